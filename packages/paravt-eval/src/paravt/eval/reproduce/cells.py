"""Measurement cells of the miniature, one JSON file each under `OUT/cells/seed<S>/`:

- accuracy: a checkpoint on the held-out videos at one overview budget K, greedy, parallel or
  sequential dispatch, through paravt-eval's `EvalAgent` (the agent `ask` and the lmms-eval plugin
  run), under the protocol the checkpoint was trained with (`agent_protocol.json`) with K and the
  temperature set; scored per document with the synthetic open-ended scorer (normalised exact
  match, else token F1), so seeds and arms can be compared document by document;
- rollout stats (base and SFT rows): f_tau and kappa of the training-time rollouts the full
  PARA-GRPO arm's first step would make: its training prompts, gate, temperature and reward;
  with f_tau, the measures it cannot hide: format_ok and the invalid tool calls (and call
  attempts) per episode, from the same episodes' `RewardBreakdown`s;
- training curves (RL rows): f_tau, format_ok, invalid calls per episode, kappa, accuracy and
  reward per step, read from the run's `metrics.jsonl`; the row's values are the mean of the last
  `SETTLED_STEPS` steps.

A finished cell is never re-run.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paravt.core import PROTOCOL_FILE, parse_response
from paravt.eval.agent import EvalAgent, VideoQuestion
from paravt.eval.config import EvalConfig
from paravt.eval.episode_out import write_episode
from paravt.eval.metrics import open_ended_score
from paravt.eval.reproduce.config import ReproduceConfig
from paravt.eval.reproduce.progress import log
from paravt.eval.synth_tasks import synth_documents
from paravt.rewards import episode_structure

SETTLED_STEPS = 5  # an RL row's f_tau / kappa: the mean of its last steps
EPISODES_PER_CELL = 4  # an accuracy cell's first held-out samples, also written as episodes
CURVE_KEYS = (
    "f_tau",
    "kappa",
    "accuracy",
    "reward/total",
    "tool_use_rate",
    "truncated_rate",
    "format_ok",
    "leak_rate",
    # invalid tool-call attempts per episode and all call attempts (RewardBreakdown.components)
    "tool/invalid_calls",
    "tool/call_attempts",
)


def cell_path(out: Path, seed: int, model: str, name: str) -> Path:
    return out / "cells" / f"seed{seed}" / f"{model}__{name}.json"


def cached(path: Path, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The cell at `path`, computed and written first when it is missing."""
    if path.is_file():
        return dict(json.loads(path.read_text(encoding="utf-8")))
    t0 = time.perf_counter()
    cell = compute()
    cell["seconds"] = round(time.perf_counter() - t0, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cell, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)
    return cell


def held_out_documents(held_out: Path) -> list[dict[str, Any]]:
    """The held-out open-ended documents (`paravt.eval.synth_tasks.synth_documents`)."""

    docs = synth_documents(held_out.parent)["paravt_synth_oe"]
    if not docs:
        raise ValueError(f"{held_out}: no open-ended questions to evaluate on")
    return docs


def protocol_source(checkpoint: Path, fallback: Path) -> str:
    """The checkpoint's own recorded protocol, else `fallback` (a directory with one): the base
    model has none, and an SFT checkpoint records no rollout settings."""

    recorded = checkpoint / PROTOCOL_FILE
    if recorded.is_file():
        data = json.loads(recorded.read_text(encoding="utf-8"))
        if "paravt-train rl" in str(data.get("source", "")):
            return str(checkpoint)
    return str(fallback)


def accuracy_cell(
    config: ReproduceConfig,
    seed: int,
    model: str,
    checkpoint: Path,
    k: int,
    docs: list[dict[str, Any]],
    protocol: str,
    *,
    dispatch: str = "parallel",
    samples: int = 0,
) -> dict[str, Any]:
    """Held-out accuracy of `checkpoint` at overview budget `k`: greedy, or with `samples` > 0
    that many episodes per question at `config.eval_temperature`, seeded by the training seed
    and the question (every model of a seed draws with the same seeds); `per_doc` is then each
    question's mean over its samples, so models stay paired by question."""
    sampled = samples > 0
    name = (f"sampled{samples}_k{k}" if sampled else f"acc_k{k}") + (
        "" if dispatch == "parallel" else f"_{dispatch}"
    )
    n = samples if sampled else 1
    how = f"{n} samples each at T = {config.eval_temperature:g}" if sampled else "greedy"

    def compute() -> dict[str, Any]:

        log(f"seed {seed}: {model} on {len(docs)} held-out videos, K = {k}, {dispatch} ({how})")
        agent = EvalAgent(
            EvalConfig(
                pretrained=str(checkpoint),
                protocol=protocol,
                main_nframes=k,
                temperature=config.eval_temperature if sampled else 0.0,
                seed=seed if sampled else None,
                dispatch=dispatch,  # type: ignore[arg-type, unused-ignore]
                device=config.device,
                batch_size=config.batch_size,
            )
        )
        questions = [
            VideoQuestion(
                key=str(d["id"]) + (f"#{j}" if sampled else ""),
                video=d["video"],
                question=d["question"],
                task=name,
                doc_id=i,
                answer_kind="open",
            )
            for i, d in enumerate(docs)
            for j in range(n)
        ]
        asked = [d for d in docs for _ in range(n)]
        traces = agent.run(questions)
        record_episodes(
            episodes_dir(config.out, seed, model, name), agent, traces, questions, asked
        )
        scores = [
            0.0 if t.error else open_ended_score(t.response, d["answer"])
            for t, d in zip(traces, asked)
        ]
        per_doc = [sum(scores[i * n : (i + 1) * n]) / n for i in range(len(docs))]
        calls = [t.num_tool_calls for t in traces]
        shapes = [trace_structure(t) for t in traces]
        return {
            "seed": seed,
            "model": model,
            "k": k,
            "dispatch": dispatch,
            "samples": n,
            "temperature": config.eval_temperature if sampled else 0.0,
            "accuracy": sum(scores) / len(scores),
            "per_doc": per_doc,
            "kappa": sum(calls) / len(calls),
            "tool_use_rate": sum(c > 0 for c in calls) / len(calls),
            "format_ok": sum(x.parses for x in shapes) / len(shapes),
            "leak_rate": sum(x.prior_leak for x in shapes) / len(shapes),
            "errored": sum(1 for t in traces if t.error),
            # answers a token limit cut (the costly task's context at K = 8), scored wrong
            "truncated": sum(1 for t in traces if t.truncated),
            "documents": len(docs),
            "example": traces[0].turns[-1]["response"][:300] if traces[0].turns else "",
        }

    return cached(cell_path(config.out, seed, model, name), compute)


def episodes_dir(out: Path, seed: int, model: str, name: str) -> Path:
    """Where an accuracy cell's first samples go as episodes (beside the cell's JSON)."""
    return cell_path(out, seed, model, name).with_suffix("").with_name(f"{model}__{name}_episodes")


def record_episodes(
    root: Path, agent: Any, traces: list[Any], samples: list[Any], docs: list[dict[str, Any]]
) -> None:
    """The first `EPISODES_PER_CELL` samples that ran, as episodes (`paravt-train episodes ROOT
    --html` shows them), the folder written afresh with the cell. A failure to write is logged
    and costs the cell nothing."""
    shutil.rmtree(root, ignore_errors=True)
    ran = [(t, s, d) for t, s, d in zip(traces, samples, docs) if t.episode is not None]
    try:
        for trace, sample, doc in ran[:EPISODES_PER_CELL]:
            tool_response = agent.config_for(sample).tool_response
            write_episode(
                root, trace, sample, tool_response=tool_response, ground_truth=str(doc["answer"])
            )
    except Exception as exc:  # the episodes are a view of the cell, never its cost
        log(f"episodes of {root.name} not recorded: {type(exc).__name__}: {exc}")


def trace_structure(trace: Any) -> Any:
    """`paravt.rewards.episode_structure` of an evaluation trace's main-agent turns."""
    return episode_structure([parse_response(t["response"]) for t in trace.turns])


def rollout_stats_cell(
    config: ReproduceConfig, seed: int, model: str, checkpoint: Path, recipe: Any
) -> dict[str, Any]:
    """f_tau and kappa (with format_ok and invalid calls per episode, `CURVE_KEYS`) of
    `checkpoint` from rollouts under `recipe` (the full PARA-GRPO arm's) on
    `config.stats_prompts` training prompts x the group size, at the rollout temperature."""

    def compute() -> dict[str, Any]:
        # lazy: the optional extra paravt-eval[train]
        from paravt.train import evaluate_rl as evaluate
        from paravt.train import load_rl_examples

        examples = load_rl_examples(recipe)[: config.stats_prompts]
        n = len(examples) * recipe.rollout.group_size
        log(
            f"seed {seed}: {model}, {n} training-prompt rollouts at temperature "
            f"{recipe.rollout.temperature:g} for f_tau and kappa"
        )
        metrics = evaluate(checkpoint, recipe, examples, seed=seed)
        return {
            "seed": seed,
            "model": model,
            "rollouts": n,
            "temperature": recipe.rollout.temperature,
            **{k: metrics.get(k) for k in CURVE_KEYS},
        }

    return cached(cell_path(config.out, seed, model, "rollout_stats"), compute)


def training_curves(run: Path) -> dict[str, list[float]]:
    """Per-step values of `CURVE_KEYS` from an RL run's metrics.jsonl."""
    rows = [
        json.loads(line)
        for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    rows = [r for r in rows if "kappa" in r]  # rollout steps (not e.g. eval-only rows)
    per_k = sorted({k for r in rows for k in r if k.startswith("kappa/k")})  # kappa per budget
    return {k: [float(r.get(k, float("nan"))) for r in rows] for k in ("step", *CURVE_KEYS, *per_k)}


def settled(values: list[float], n: int = SETTLED_STEPS) -> float:
    tail = values[-n:]
    return sum(tail) / len(tail) if tail else float("nan")


def settle_step(values: list[float], tolerance: float) -> int | None:
    """The first step from which the 5-step moving average stays within `tolerance` of the
    run's settled value (its last 5 steps' mean); None for a run too short to tell."""
    n = SETTLED_STEPS
    if len(values) < 2 * n:
        return None
    final = settled(values)
    moving = [sum(values[i - n + 1 : i + 1]) / n for i in range(n - 1, len(values))]
    for i, _ in enumerate(moving):
        if all(abs(m - final) <= tolerance for m in moving[i:]):
            return i + n  # 1-based step at which that window ends
    return len(values)
