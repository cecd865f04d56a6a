"""tools/gpu_check.py, rehearsed on the CPU (`--device cpu --size tiny`, tiny step counts): the
script a person runs on a GPU must keep working between GPU runs. It goes through the path the GPU
machine takes: frames predecoded into the data folder, torchcodec blocked for the whole check. A
PASS here says the rows run; it says nothing about CUDA (the env row says so)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
ROWS = ["env", "frames", "sft", "rl", "logprob", "placement", "real-size (tiny)"]


@pytest.mark.slow
def test_the_gpu_check_rehearses_every_row_on_the_cpu(tmp_path: Path) -> None:
    small = [
        "rollout.batch_prompts=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=24",
        "rollout.subagent_max_new_tokens=8",
    ]
    cmd = [sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--device", "cpu"]
    cmd += ["--size", "tiny", "--data", str(tmp_path / "data"), "--videos", "2"]
    cmd += ["--out", str(tmp_path / "out"), "--sft-steps", "2", "--rl-steps", "1"]
    cmd += ["--learning-sft-steps", "1", "--learning-rl-steps", "1", "--eval-prompts", "2"]
    cmd += ["--learning-seeds", "2", "--learning-jobs", "2", "--throughput-steps", "1"]
    cmd += ["--real-steps", "2", "--sft-override", "sft.num_workers=0"]
    for override in small:
        cmd += ["--override", override]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    rows = {r["check"]: r for r in json.loads((tmp_path / "out" / "report.json").read_text())}
    assert [*rows] == [*ROWS, "learning (rehearsal)", "throughput (tiny)"]
    assert all(r["status"] == "PASS" for r in rows.values()), rows
    # the GPU machine's path: frames from the folder, identical to torchcodec's, torchcodec blocked
    assert "then blocked" in rows["env"]["detail"]
    assert rows["frames"]["data"]["max_pixel_diff"] == 0
    assert rows["frames"]["data"]["timestamps_equal"] is True
    # fp32 on the CPU: the engine's log-probs are the trainer's
    assert rows["logprob"]["data"]["max"] < 1e-3 and rows["logprob"]["data"]["tokens"] > 0
    # every op of the audited steps ran where expected; the recipe's bf16 is what multiplied
    audit = rows["placement"]["data"]
    assert audit["ops"] > 1000 and not audit["fallback"]
    assert set(audit["matmul_flops_by_dtype"]) == {"bfloat16"}
    real = rows["real-size (tiny)"]["data"]
    assert real["rl"]["tokens_per_s"] > 0 and real["rl"]["mfu"] is None  # MFU n/a on the CPU
    learning = rows["learning (rehearsal)"]
    assert "not a verdict" in learning["detail"]
    # two seeds, each its own cold start and RL run, reported one by one and pooled
    assert learning["data"]["seeds_run"] == [0, 1] and learning["data"]["stopped"] is None
    assert learning["data"]["jobs"] == 2  # each seed in a process of its own, side by side
    runs = learning["data"]["runs"]
    assert [(r["seed"], r["strategy"]) for r in runs] == [(0, "fsdp2"), (1, "fsdp2")]
    for r in runs:
        assert r["sft_steps"] == 1 and r["rl_steps"] == 1
        for key in ("accuracy", "reward", "call_attempts", "invalid_calls", "tool_responses"):
            assert len(r[key]) == 2, key
        assert isinstance(r["format_held"], bool)
        assert f"seed {r['seed']} fsdp2: accuracy" in learning["detail"]
    assert learning["data"]["pooled"]["fsdp2"]["accuracy"]["n"] == 2 * runs[0]["prompts"]
    sweep = rows["throughput (tiny)"]["data"]["shapes"]["tiny"]["configs"]
    assert [*sweep] == SWEEP_CONFIGS and sweep["baseline"]["status"] == "ok"
    assert (tmp_path / "out" / "report.md").read_text().count("| PASS |") == len(rows)
    assert "status" in proc.stdout  # the table is printed


def load_gpu_check() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "tools" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_check", module)
    spec.loader.exec_module(module)
    return module


def fake_run(seed: int, strategy: str, gain: float, invalid: float = 0.0) -> dict[str, Any]:
    """What `learning_run` returns, for 8 prompts whose accuracy and reward rise by `gain` (0.01
    apart from prompt to prompt, so that the standard error is small but not 0)."""
    keys = ("accuracy", "reward", "tool_use", "format")
    before = {f"p{i}": dict.fromkeys(keys, 0.5) for i in range(8)}
    after = {p: {k: 0.5 + gain + 0.01 * (i % 2) for k in keys} for i, p in enumerate(before)}
    metrics = {"tool/call_attempts": 1.0, "tool/invalid_calls": 0.0, "tool/responses": 1.0}
    metrics |= {"format_ok": 1.0, "f_tau": 1.0, "tool_use_rate": 0.5}
    after_metrics = {**metrics, "tool/invalid_calls": invalid}
    both = [0.5, 0.5 + gain]
    return {
        "seed": seed,
        "strategy": strategy,
        "sft_steps": 500,
        "rl_steps": 32,
        "prompts": 8,
        "group_size": 8,
        "accuracy": both,
        "reward": both,
        "accuracy_gain": gain,
        "accuracy_gain_se": 0.01,
        "reward_gain": gain,
        "reward_gain_se": 0.01,
        **{k: [1.0, 1.0] for k in ("call_attempts", "tool_responses", "format_ok", "f_tau")},
        "invalid_calls": [0.0, invalid],
        "tool_use": [0.5, 0.5],
        "format_held": invalid <= 0.1,
        "seconds": {},
        "before": {"metrics": metrics, "per_prompt": before},
        "after": {"metrics": after_metrics, "per_prompt": after},
    }


def test_the_learning_row_pools_its_seeds_and_stops_at_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`row_learning` without training (each seed's run faked): the verdict per strategy is
    `learned` on the pooled gains and `format_held` on every seed, and a seed whose measured time
    does not fit the budget left is not started."""
    check = load_gpu_check()
    gains = {0: 0.5, 1: 0.5, 2: 0.5}
    invalid: dict[tuple[int, str], float] = {}
    started: list[tuple[int, str]] = []

    def run(ctx: Any, seed: int, strategy: str) -> dict[str, Any]:
        started.append((seed, strategy))
        return fake_run(seed, strategy, gains[seed], invalid.get((seed, strategy), 0.0))

    monkeypatch.setattr(check, "learning_run", run)

    def row(strategy: str, budget: float = 1e6, spent: float = 0.0) -> Any:
        args = argparse.Namespace(
            learning_sft_steps=500,
            learning_rl_steps=32,
            learning_strategy=strategy,
            learning_seeds=3,
            learning_jobs=1,
            budget_s=budget,
        )
        ctx = SimpleNamespace(
            args=args, t0=time.monotonic() - spent, out=tmp_path, device=torch.device("cpu")
        )
        started.clear()
        return check.row_learning(ctx)

    r = row("both")
    assert r.status == "PASS" and r.check == "learning"
    assert started == [(s, k) for s in range(3) for k in ("fsdp2", "none")]
    assert r.data["seeds_run"] == [0, 1, 2] and r.data["pooled"]["none"]["accuracy"]["n"] == 24
    assert "seed 2 none: accuracy 0.500 -> 1.000" in r.detail
    # one seed in the invalid-call hole fails its strategy, and so the row
    invalid[(1, "none")] = 0.5
    r = row("both")
    assert r.status == "FAIL"
    assert r.data["pooled"]["fsdp2"]["pass"] and not r.data["pooled"]["none"]["pass"]
    assert "[format NOT held]" in r.detail
    # no gain: not learned
    gains.update({0: 0.0, 1: 0.0, 2: 0.0})
    assert row("fsdp2").status == "FAIL"
    # the budget: seed 0 always runs; seed 1 does not fit what is left
    monkeypatch.setattr(check, "learning_run", lambda *a: (time.sleep(0.05), run(*a))[1])
    r = row("fsdp2", budget=10.0, spent=10.0 - 0.02)
    assert started == [(0, "fsdp2")] and r.data["seeds_run"] == [0]
    assert "seeds 1..2 not started" in r.detail and "1 of 3 seeds" in r.detail


def test_learning_children_report_what_finished_failed_or_ran_past_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--learning-jobs`: each (seed, strategy) runs as a child process; a child that finishes is
    read back, one that fails is named with the end of its log, one still running when the budget
    is spent is killed and named, and a pair that could not start is named too. The children
    here are stand-ins (a child's real command line is the rehearsal test's)."""
    check = load_gpu_check()
    done = json.dumps(fake_run(0, "fsdp2", 0.5))

    def argv(ctx: Any, seed: int, strategy: str, out: Path) -> list[str]:
        code = {
            0: f"import pathlib; pathlib.Path({str(out)!r}, 'learning_run.json').write_text({done!r})",
            1: "import sys; print('CUDA out of memory'); sys.exit(3)",
            2: "import time; time.sleep(60)",
        }.get(seed, "import time; time.sleep(60)")
        return [sys.executable, "-c", code]

    monkeypatch.setattr(check, "_child_argv", argv)
    args = argparse.Namespace(learning_jobs=3, budget_s=6.0, argv=[])
    ctx = SimpleNamespace(args=args, t0=time.monotonic(), out=tmp_path, work=tmp_path / "work")
    t = time.monotonic()
    runs, problems, _ = check.learning_in_children(
        ctx, [(0, "fsdp2"), (1, "fsdp2"), (2, "fsdp2"), (3, "fsdp2")]
    )
    assert time.monotonic() - t < 30  # the sleeping child did not hold the row
    assert [r["seed"] for r in runs] == [0]
    assert json.loads((tmp_path / "learning_runs.json").read_text())[0]["seed"] == 0
    assert "seed 1 fsdp2 failed (exit 3" in problems and "CUDA out of memory" in problems
    assert "seed 2 fsdp2 killed when the budget was spent" in problems
    # seed 3 waited for a free slot (the failed child's), then ran past the budget too
    assert "seed 3 fsdp2 killed" in problems
    # on one GPU side by side was measured slower than one after another: refused, with why
    with pytest.raises(SystemExit):
        check.main(["--device", "cuda", "--learning-jobs", "2"])


SWEEP_CONFIGS = [
    "baseline",
    "tokens-x2",
    "tokens-x4",
    "ckpt-selective",
    "ckpt-off",
    "attn-eager",
    "attn-sdpa-flash",
    "adamw-fused",
    "compile",
    "packing",
    "x2-off-fused",
    "x4-selective-fused",
    "x2-off-fused-compile",
]


@pytest.mark.slow
def test_the_throughput_sweep_rehearses_every_configuration_on_the_cpu(tmp_path: Path) -> None:
    """tools/throughput_sweep.py at the tiny shape on the CPU, one step per kind: every
    configuration runs and reports (tokens/s, the step's parts; MFU and peak memory n/a), or
    says why it does not (compile: minutes of inductor on a CPU; packing: collate pads)."""
    cmd = [sys.executable, str(ROOT / "tools" / "throughput_sweep.py"), "--device", "cpu"]
    cmd += ["--shapes", "tiny", "--steps", "1", "--budget-s", "3600", "--out", str(tmp_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads((tmp_path / "throughput.json").read_text())
    assert report["complete"] and not report["not_started"]
    configs = report["shapes"]["tiny"]["configs"]
    assert [*configs] == SWEEP_CONFIGS
    skipped = {n for n, e in configs.items() if e["status"] == "skip"}
    assert skipped == {"compile", "packing", "x2-off-fused-compile"}
    assert all(configs[n]["reason"] for n in skipped)
    for name, e in configs.items():
        if name in skipped:
            continue
        assert e["status"] == "ok", (name, e)
        for kind in ("sft", "rl"):
            m = e[kind]
            assert m["tokens_per_s"] > 0 and m["mfu"] is None and m["peak_gib"] is None
            assert set(m["split_s"]) == {"forward", "backward", "optimiser", "logprob"}
            assert m["split_s"]["backward"] > 0 and m["split_s"]["optimiser"] > 0
            assert sum(m["split_s"].values()) <= m["step_s"] * 1.001
        assert e["rl"]["split_s"]["logprob"] > 0 and e["sft"]["split_s"]["logprob"] == 0
    base = configs["baseline"]
    assert configs["tokens-x4"]["sft"]["tokens"] == 4 * base["sft"]["tokens"]
    assert configs["tokens-x2"]["rl"]["sequences"] == 2 * base["rl"]["sequences"]
    assert configs["attn-eager"]["attn_used"] == {"text": "eager", "vision": "eager"}
    assert base["attn_used"]["text"] == "sdpa"
    ckpt = {n: configs[n]["checkpointed"]["decoder_layers"] for n in ("baseline", "ckpt-off")}
    assert ckpt == {"baseline": base["checkpointed"]["decoder_of"], "ckpt-off": 0}
    assert 0 < configs["ckpt-selective"]["checkpointed"]["decoder_layers"] < ckpt["baseline"]
    assert configs["adamw-fused"]["adamw"] == "fused" and base["adamw"] != "fused"
    assert "tiny baseline:" in proc.stdout


def test_the_sweep_extrapolates_the_8b_per_layer_and_stops_at_its_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without training (`run_config` faked, times linear in depth): the 8B shape has the 8B's
    widths at the asked depth, two depths give the per-layer time and the rest, and a
    configuration that would pass the budget is not started; an OOM is a result."""
    check = load_gpu_check()
    sweep = check.load_throughput_sweep()
    tiny = check.cached_tiny_qwen3vl()
    shape = sweep.shape_of(check, "8b", 4, tiny, tmp_path)
    text = shape.config.text_config
    assert (text.hidden_size, text.intermediate_size, text.num_hidden_layers) == (4096, 12288, 4)
    assert shape.config.vision_config.depth == 27 and shape.name == "8b-4l"
    shapes = {4: shape, 2: sweep.shape_of(check, "8b", 2, tiny, tmp_path)}
    monkeypatch.setattr(sweep, "shape_of", lambda c, size, depth, *rest: shapes[depth])
    now = [0.0]  # the sweep's clock: each faked configuration takes 10 s of it

    def fake(check_: Any, shape: Any, config: Any, *rest: Any) -> dict[str, Any]:
        depth = shape.config.text_config.num_hidden_layers
        if config.name == "tokens-x2" and depth == 4:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        now[0] += 10.0
        work = {"tokens": 1000, "head_positions": 500, "patches": 100, "sequences": 2}
        out: dict[str, Any] = {
            "attn_used": {"text": "sdpa", "vision": "sdpa"},
            "sdpa_kernels": "torch's choice",
            "adamw": "foreach",
            "checkpointed": {"decoder_layers": depth, "decoder_of": depth},
        }
        for kind, per_layer, rest_s in (("sft", 0.5, 2.0), ("rl", 1.0, 3.0)):
            step_s = rest_s + per_layer * depth
            out[kind] = {**work, "step_s": step_s, "mfu": 0.1, "peak_gib": 10.0 + depth}
            out[kind]["tokens_per_s"] = 1000 / step_s
            out[kind]["split_s"] = dict.fromkeys(
                ("forward", "backward", "optimiser", "logprob"), 0.1
            )
            out[kind]["model_flops"] = 0.1 * 1e15 * step_s  # as if the peak were 1 PFLOP/s
            out[kind]["flops_passes"] = 5.0
            out[kind]["loss"] = 1.0
        return out

    monkeypatch.setattr(sweep, "run_config", fake)
    report = sweep.sweep(
        check,
        tiny=tiny,
        device=torch.device("cpu"),
        out=tmp_path,
        shapes=["8b"],
        configs=["baseline", "tokens-x2", "compile"],
        layers_8b=[4, 2],
        budget_s=1e6,
        compile_on_cpu=True,
        progress=lambda _: None,
        clock=lambda: now[0],
    )
    configs = report["shapes"]["8b"]["configs"]
    x = configs["baseline"]["extrapolated_36"]
    assert x["depths"] == [2, 4] and x["layers"] == 36
    assert x["sft"]["per_layer_s"] == pytest.approx(0.5) and x["sft"]["rest_s"] == pytest.approx(2)
    assert x["rl"]["step_s"] == pytest.approx(3.0 + 36 * 1.0)
    assert x["rl"]["peak_gib_per_layer"] == pytest.approx(1.0)
    assert 0 < x["rl"]["mfu"] < 1
    assert configs["tokens-x2"]["status"] == "OOM"
    assert configs["tokens-x2"]["depths"]["2"]["status"] == "ok"
    assert sweep.complete(report)[0]
    # the budget: after baseline's first depth (10 s), nothing fits in 15 s
    report = sweep.sweep(
        check,
        tiny=tiny,
        device=torch.device("cpu"),
        out=tmp_path,
        shapes=["8b"],
        configs=["baseline", "ckpt-off"],
        layers_8b=[4, 2],
        budget_s=15.0,
        progress=lambda _: None,
        clock=lambda: now[0],
    )
    configs = report["shapes"]["8b"]["configs"]
    assert configs["baseline"]["depths"]["2"]["status"] == "ok"
    assert "4" not in configs["baseline"]["depths"]
    assert configs["baseline"]["status"] == configs["ckpt-off"]["status"] == "not started"
    assert report["not_started"] == ["8b/baseline", "8b/ckpt-off"]
