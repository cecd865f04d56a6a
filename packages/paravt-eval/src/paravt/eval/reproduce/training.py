"""Training cells of the miniature: the task data, and per seed the base model, the SFT cold start
and one RL run per Table 2 arm, all through paravt-train (`paravt.train.miniature`).

Each run writes `done.json` beside its `final/` when it finishes; a re-run with the same settings
reuses it, a run without `done.json` (interrupted) is started again from scratch, and a finished
run with other settings (steps) is an error naming the directory, never silently mixed in.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paravt.core.tiny import build_tiny_qwen3vl
from paravt.eval.reproduce.config import ReproduceConfig
from paravt.eval.reproduce.progress import log


def _miniature() -> Any:
    try:
        # lazy: the optional extra paravt-eval[train] (named in the error below)
        from paravt.train import miniature
    except ImportError as exc:
        raise ImportError(
            f"reproduce trains its checkpoints with paravt-train ({exc}); install it with "
            "`pip install 'paravt-eval[train]'` (or `pip install -e packages/paravt-train`)"
        ) from None
    return miniature


def arms_for(blocks: tuple[str, ...], task: str = "plain") -> list[str]:
    """The RL arms the blocks need on `task`: A the two stages and the lr-0 control of vanilla
    GRPO, B its components (with A's two as reference rows; the sequence-anchoring arm only where
    the task anchors at token level), C the PARA-GRPO checkpoint."""
    m = _miniature()
    token = m.TASKS[task].token_anchoring
    names: list[str] = []
    if "A" in blocks or "B" in blocks:
        names += ["grpo", "para_grpo"]
    if "A" in blocks and token:
        names.append("grpo_lr0")
    if "B" in blocks:
        names += [
            a.name for a in m.ARMS.values() if a.block == "B" and (token or not a.token_tasks_only)
        ]
    if "C" in blocks and "para_grpo" not in names:
        names.append("para_grpo")
    return names


def steps_of(config: ReproduceConfig) -> tuple[int, int]:
    """(tool-prior steps, cold-start steps): the config's, else the task's."""
    task = _miniature().TASKS[config.task]
    prior = config.prior_steps if config.prior_steps is not None else task.prior_steps
    sft = config.sft_steps if config.sft_steps is not None else task.sft_steps
    return prior, sft


def task_of(config: ReproduceConfig) -> Any:
    """The config's miniature task, without its tool-prior stage when the config asks for 0
    prior steps (and so with none of the prior's traces in the cold start either)."""
    task = _miniature().TASKS[config.task]
    return task if steps_of(config)[0] else task.without_prior()


@dataclass
class SeedRuns:
    """Where one seed's checkpoints are, and how long each took to train."""

    seed: int
    base: Path
    sft: Path
    arms: dict[str, Path] = field(default_factory=dict)  # arm name -> final/
    seconds: dict[str, float] = field(default_factory=dict)

    def checkpoint(self, model: str) -> Path:
        return {"base": self.base, "sft": self.sft, **self.arms}[model]


def ensure_data(config: ReproduceConfig) -> Any:
    """The miniature's videos and rows (`paravt.train.miniature.TaskData`), the same for every seed:
    SFT traces at every budget the gate draws, RL prompts, `n_eval` held-out videos."""
    m = _miniature()
    root = config.out / "data"
    log(
        f"task data in {root} ({config.n_sft_videos} SFT / {config.n_rl_videos} RL / "
        f"{config.n_eval} held-out videos)"
    )
    task = task_of(config)
    return m.make_task_data(
        root,
        sft_budgets=task.sft_k,
        n_sft=config.n_sft_videos,
        n_rl=config.n_rl_videos,
        n_eval=config.n_eval,
        task=task,
    )


def _finished(run: Path, settings: dict[str, Any]) -> float | None:
    """Seconds the finished run in `run` took, None when it has not finished; raises when it
    finished with other settings."""
    marker = run / "done.json"
    if not marker.is_file():
        if run.exists():
            log(f"{run}: unfinished (no done.json), training it again")
            shutil.rmtree(run)
        return None
    done = json.loads(marker.read_text(encoding="utf-8"))
    if done.get("settings") != settings:
        raise ValueError(
            f"{run} was trained with {done.get('settings')}, this run asks for {settings}; "
            "use another --out or delete that directory"
        )
    return float(done.get("seconds", 0.0))


def _mark_done(run: Path, settings: dict[str, Any], seconds: float) -> float:
    """Write `done.json`; returns the seconds as recorded there (what a re-run reads back)."""
    seconds = round(seconds, 1)
    (run / "done.json").write_text(
        json.dumps({"settings": settings, "seconds": seconds}) + "\n", encoding="utf-8"
    )
    return seconds


def ensure_seed(config: ReproduceConfig, seed: int, data: Any, arms: list[str]) -> SeedRuns:
    """Build the seed's base model, then train (or reuse) its SFT and RL runs."""

    m = _miniature()
    root = config.out / f"seed{seed}"
    base = root / "base"
    if not (base / "config.json").is_file():
        log(
            f"seed {seed}: building the untrained tiny Qwen3-VL (weights and tokenizer seed {seed})"
        )
        build_tiny_qwen3vl(base, seed=seed)
    common = ["logging.progress=false", f"distributed.device={config.device}"]
    task = task_of(config)
    prior_steps, sft_steps = steps_of(config)
    # lazy: the optional extra paravt-eval[train]
    from paravt.train import train_sft

    init = base
    seconds: float | None = None
    if prior_steps:
        prior_dir = root / "prior"
        settings: dict[str, Any] = {"steps": prior_steps, "seed": seed, "task": task.summary}
        seconds = _finished(prior_dir, settings)
        if seconds is None:
            recipe = m.sft_recipe(
                prior_dir,
                base,
                data,
                seed=seed,
                steps=prior_steps,
                extra=common,
                task=task,
                prior=True,
            )
            log(f"seed {seed}: the tool prior, {prior_steps} SFT steps on the prior's traces")
            t0 = time.perf_counter()
            train_sft(recipe)
            seconds = _mark_done(prior_dir, settings, time.perf_counter() - t0)
        init = prior_dir / "final"

    sft_dir = root / "sft"
    settings = {"steps": sft_steps, "seed": seed}
    if prior_steps:
        settings["prior_steps"] = prior_steps
    if task.cold_prior_mix:  # a cold start with the prior's traces in it is another run
        settings["cold_prior_mix"] = task.cold_prior_mix
    runs = SeedRuns(seed, base, sft_dir / "final")
    if prior_steps and seconds is not None:
        runs.seconds["prior"] = seconds
    seconds = _finished(sft_dir, settings)
    if seconds is None:
        recipe = m.sft_recipe(
            sft_dir, init, data, seed=seed, steps=sft_steps, extra=common, task=task
        )
        log(f"seed {seed}: SFT cold start, {sft_steps} steps")
        t0 = time.perf_counter()
        train_sft(recipe)
        seconds = _mark_done(sft_dir, settings, time.perf_counter() - t0)
    runs.seconds["sft"] = seconds

    for name in arms:
        arm = m.ARMS[name]
        run = root / name
        settings = {
            "steps": config.rl_steps,
            "seed": seed,
            "arm": arm.describe(task),
            "task": task.summary,
        }
        seconds = _finished(run, settings)
        if seconds is None:
            # lazy: the optional extra paravt-eval[train]
            from paravt.train import train_rl

            recipe = m.rl_recipe(
                run,
                runs.sft,
                data.rl,
                arm=arm,
                task=task,
                seed=seed,
                steps=config.rl_steps,
                extra=common,
            )
            log(
                f"seed {seed}: RL arm {name} ({arm.describe(task)}; task {config.task}), "
                f"{config.rl_steps} steps"
            )
            t0 = time.perf_counter()
            train_rl(recipe)
            seconds = _mark_done(run, settings, time.perf_counter() - t0)
        runs.arms[name] = run / "final"
        runs.seconds[name] = seconds
    return runs


def rl_recipe_for_stats(config: ReproduceConfig, seed: int, init: Path, data: Any) -> Any:
    """The full PARA-GRPO arm's recipe from `init`: what base and SFT rows' f_tau and kappa are
    measured under (its gate, temperature, turns and reward), as its first training step sees them."""
    m = _miniature()
    return m.rl_recipe(
        config.out / f"seed{seed}" / "stats",
        init,
        data.rl,
        arm=m.ARMS["para_grpo"],
        task=m.TASKS[config.task],
        seed=seed,
        steps=1,
        extra=["logging.progress=false", f"distributed.device={config.device}"],
    )
