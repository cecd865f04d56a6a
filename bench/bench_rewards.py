"""Reward throughput: completions scored per second per core (PARA-GRPO preset), and spam cost.

A realistic mix of rollouts (think + parallel calls + tool responses + answer, direct answers,
broken formats, grounding, open-ended, chat spam; MCQ / TVG / OE) is scored single-threaded with
`paravt.rewards.score`, which computes every span, issue and flag. The figure is per core: wall
clock and process CPU time are both reported (on a busy machine wall time also counts time spent
waiting for a core). A typical 3-call completion is measured alone as well.

The reference's `compose_reward` (EvolvingLMMs-Lab/ParaVT, paravt/rl/rewards/compose.py) is timed
on the same mix in the same run when `PARAVT_REFERENCE_DIR` names a checkout of that repository
(its reward modules are loaded from there, never copied; its LLM judge is stubbed, the mix needs
none); otherwise that row says why it is missing.

Then one completion of 0.25, 0.5 and 1 MB of each kind of spam is scored (the bench_parser
adversarial inputs plus long well-formed ones): 1 MB of any of them must score in under 0.1 s.
Writes bench/results/rewards.json (with the load average before and after) and prints a table.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import random
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

from bench_parser import INPUTS as PARSER_SPAM

from paravt.rewards import RewardConfig, score

RESULTS = Path(__file__).parent / "results" / "rewards.json"
CONFIG = RewardConfig.paragrpo()
# the reference recipe paragrpo_8b.yaml as its environment variables (paravt/rl/config.py)
REFERENCE_ENV = {"ANSWER_SUFFIX": "1", "ANCHOR_WEIGHT": "0.5", "FORMAT_WEIGHT": "1.0"}
TARGET_PER_SECOND = 30_000
SPAM_BUDGET_S_PER_MB = 0.1
THINK = (
    "<think>The overview shows a kitchen; the question asks what happens after the kettle boils, "
    "which the 64 frames only hint at around the 9-minute mark, so I will crop three windows.</think>"
)
RESPONSE = "<tool_response>The person pours water into a cup at 552 s.</tool_response>"

Sample = tuple[str, str, str]


def call(start: int, end: int) -> str:
    return (
        f'<tool_call>{{"name": "crop_video", "arguments": {{"start_time": {start}, '
        f'"end_time": {end}}}}}</tool_call>'
    )


def mix(n: int, seed: int = 0) -> list[Sample]:
    """(completion, ground truth, question type) rollouts in realistic proportions."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.random()
        letter = rng.choice("ABCD")
        if k < 0.35:  # parallel calls, tool responses, MCQ answer
            calls = "".join(
                call(s, s + 30) for s in rng.sample(range(0, 600, 30), rng.randint(1, 5))
            )
            out.append(
                (THINK + calls + RESPONSE + f"<answer>{rng.choice('ABCD')}</answer>", letter, "mcq")
            )
        elif k < 0.6:  # direct answer
            out.append(
                (THINK + f"<answer>The answer is {rng.choice('ABCD')}</answer>", letter, "mcq")
            )
        elif k < 0.7:  # temporal grounding
            s = rng.randint(0, 500)
            out.append((THINK + f"<answer>[{s}, {s + 20}]</answer>", f"[{s + 5}, {s + 30}]", "tvg"))
        elif k < 0.8:  # open-ended
            out.append(
                (
                    THINK + "<answer>she pours the water into a red cup</answer>",
                    "pouring water into a cup",
                    "oe",
                )
            )
        elif k < 0.92:  # collapsed format: unclosed think, malformed call
            out.append(("<think>" + THINK[7:-8] + ' <tool_call>{"name": crop_video', letter, "mcq"))
        else:  # chat-token spam
            out.append(("<|im_start|>assistant\n" * 6, letter, "mcq"))
    return out


def three_calls(n: int, seed: int = 1) -> list[Sample]:
    """The typical tool-using rollout: think, three parallel calls, a tool response, an answer."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        starts = rng.sample(range(0, 600, 30), 3)
        text = THINK + "".join(call(s, s + 30) for s in starts) + RESPONSE
        out.append((text + f"<answer>{rng.choice('ABCD')}</answer>", rng.choice("ABCD"), "mcq"))
    return out


def load_reference(root: Path) -> Callable[..., tuple[float, dict[str, float]]]:
    """The reference's `compose_reward`, loaded from a ParaVT checkout at `root` by file path
    (so its package `paravt` does not shadow ours); its LLM judge module is stubbed."""
    folder = root / "paravt" / "rl" / "rewards"
    if not (folder / "compose.py").is_file():
        raise FileNotFoundError(f"{folder / 'compose.py'} not found")
    for name in ("paravt.rl", "paravt.rl.rewards"):
        package = types.ModuleType(name)
        package.__path__ = []
        sys.modules.setdefault(name, package)
    judge = types.ModuleType("paravt.rl.rewards.llm_judge")
    judge.llm_judge_reward = lambda *a, **k: 0.0  # type: ignore[attr-defined]
    sys.modules[judge.__name__] = judge
    for module in ("utils", "task_metrics", "format", "tool", "compose"):
        name = f"paravt.rl.rewards.{module}"
        spec = importlib.util.spec_from_file_location(name, folder / f"{module}.py")
        assert spec is not None and spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[name] = loaded
        spec.loader.exec_module(loaded)
    os.environ.update(REFERENCE_ENV)
    return sys.modules["paravt.rl.rewards.compose"].compose_reward  # type: ignore[no-any-return]


def rate(fn: Callable[[str, str, str], object], samples: list[Sample], rounds: int = 11) -> dict:  # type: ignore[type-arg]
    """Scores per second over `rounds` passes of `samples` (about 0.3 s each): best and median,
    by wall clock and by process CPU time."""
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(rounds):
        w0, c0 = time.perf_counter(), time.process_time()
        for text, truth, qtype in samples:
            fn(text, truth, qtype)
        w, c = time.perf_counter() - w0, time.process_time() - c0
        wall.append(len(samples) / w)
        cpu.append(len(samples) / max(c, 1e-9))
    return {
        "per_second_wall_best": max(wall),
        "per_second_wall_median": statistics.median(wall),
        "per_second_cpu_best": max(cpu),
        "per_second_cpu_median": statistics.median(cpu),
        "rounds": rounds,
        "samples_per_round": len(samples),
    }


def ours(text: str, truth: str, qtype: str) -> object:
    return score(text, truth, qtype, CONFIG)


def _fill(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


SPAM: dict[str, Callable[[int], str]] = {
    "long think": lambda n: (
        "<think>" + _fill(THINK[7:-8] + " ", n) + "</think>" + call(1, 9) + "<answer>B</answer>"
    ),
    "long answer (F1)": lambda n: THINK + "<answer>" + _fill("she pours water ", n) + "</answer>",
    "parallel calls": lambda n: THINK + _fill(call(10, 40), n) + "<answer>B</answer>",
    "tag soup": lambda n: _fill("<think><tool_call></answer><|im_start|>", n),
    "tool responses": lambda n: _fill(RESPONSE, n),
    **PARSER_SPAM,
}
QTYPE = {"long answer (F1)": ("pouring water into a cup", "oe")}


def spam_costs() -> list[dict[str, float | str]]:
    rows: list[dict[str, float | str]] = []
    for kind, make in SPAM.items():
        truth, qtype = QTYPE.get(kind, ("B", "mcq"))
        for size in (250_000, 500_000, 1_000_000):
            text = make(size)
            best = min(_timed(text, truth, qtype) for _ in range(3))
            rows.append(
                {
                    "input": kind,
                    "bytes": len(text),
                    "seconds": best,
                    "seconds_per_mb": best / (len(text) / 1e6),
                }
            )
    return rows


def _timed(text: str, truth: str, qtype: str) -> float:
    t0 = time.perf_counter()
    score(text, truth, qtype, CONFIG)
    return time.perf_counter() - t0


def main() -> None:
    load_before = os.getloadavg()
    samples = mix(4000)
    typical = three_calls(4000)
    reference = None
    why_not = None
    ref_dir = os.environ.get("PARAVT_REFERENCE_DIR")
    if ref_dir:
        try:
            compose = load_reference(Path(ref_dir))

            def reference(text: str, truth: str, qtype: str) -> object:
                return compose("", text, [], [], truth, question_type=qtype)

        except (OSError, ImportError) as exc:
            why_not = f"could not load the reference from {ref_dir}: {exc}"
    else:
        why_not = "set PARAVT_REFERENCE_DIR to a checkout of EvolvingLMMs-Lab/ParaVT to measure it"

    # interleaved, so both see the same machine
    rows: dict[str, dict] = {}  # type: ignore[type-arg]
    for name, fn, data in (
        ("ours_mix", ours, samples),
        ("reference_mix", reference, samples),
        ("ours_3call", ours, typical),
        ("reference_3call", reference, typical),
    ):
        if fn is not None:
            rows[name] = rate(fn, data)
    spam = spam_costs()
    load_after = os.getloadavg()
    ratio = {
        key: rows[f"ours_{key}"]["per_second_cpu_best"]
        / rows[f"reference_{key}"]["per_second_cpu_best"]
        for key in ("mix", "3call")
        if f"reference_{key}" in rows
    }
    # the criterion: 1 MB of any spam scores in under 0.1 s (smaller spam costs at most as much:
    # past MAX_TAGS tags the parser stops structuring, so the cost is bounded, not per byte)
    worst = max((r for r in spam if float(r["bytes"]) >= 1e6), key=lambda r: float(r["seconds"]))
    slowest_any = max(float(r["seconds"]) for r in spam)
    result = {
        "preset": "paragrpo",
        "machine": {
            "python": platform.python_version(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
        },
        "load_average_1_5_15min": {"before": list(load_before), "after": list(load_after)},
        "mix": {
            "samples": len(samples),
            "mean_chars": sum(len(t) for t, _, _ in samples) / len(samples),
            "question_types": sorted({q for _, _, q in samples}),
        },
        "throughput": rows,
        "reference": "measured" if reference is not None else why_not,
        "ratio_ours_over_reference_cpu_best": ratio,
        "target_per_second": TARGET_PER_SECOND,
        "spam": spam,
        "spam_worst_seconds_for_1mb": float(worst["seconds"]),
        "spam_worst_input": worst["input"],
        "spam_slowest_seconds_any_size": slowest_any,
        "spam_budget_seconds_per_mb": SPAM_BUDGET_S_PER_MB,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")

    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)")
    print(f"{'scorer':<18} {'wall best':>10} {'wall med':>10} {'cpu best':>10} {'cpu med':>10}")
    for name, r in rows.items():
        print(
            f"{name:<18} {r['per_second_wall_best']:>10,.0f} {r['per_second_wall_median']:>10,.0f} "
            f"{r['per_second_cpu_best']:>10,.0f} {r['per_second_cpu_median']:>10,.0f}"
        )
    if why_not:
        print(f"reference: {why_not}")
    for key, value in ratio.items():
        print(f"ours / reference ({key}, cpu best): {value:.2f}x")
    print(f"{'spam input':<30} {'size':>8} {'seconds':>9} {'s/MB':>8}")
    for r in spam:
        print(
            f"{r['input']:<30} {float(r['bytes']) / 1e6:>6.2f}MB {float(r['seconds']):>9.4f} "
            f"{float(r['seconds_per_mb']):>8.4f}"
        )
    print(
        f"worst 1 MB of spam: {worst['input']} in {float(worst['seconds']):.4f} s "
        f"(budget {SPAM_BUDGET_S_PER_MB} s); slowest at any size {slowest_any:.4f} s"
    )


if __name__ == "__main__":
    main()
