"""The RL recipe, top to bottom: setup -> data -> (rollout -> reward -> update) loop.

Per step:
1. take `batch_prompts` prompts (split over ranks);
2. nFrames gating (`paravt.rewards.NFramesGate`) picks the overview K of each prompt, the same K
   for all its rollouts;
3. `group_size` rollouts per prompt run through the agent runtime (`paravt.core.run_episodes`) on
   an Engine that shares the policy's weights (think prefix, turns, parallel dispatch, sub-agents);
4. `paravt.rewards.score_episode` scores every episode, `group_advantages` normalises per group;
5. PPO clipped loss against the rollout log-probs + k3 KL to a frozen reference, over the main
   trajectories and (with `include_subagents_in_loss`) the sub-agent trajectories, which carry
   their episode's advantage;
6. metrics.jsonl row, progress bar, checkpoint every N steps.

With `rollout.max_staleness > 0` (SGLang servers only) steps 1-3 of later steps run ahead on a
`paravt.train.producer.RolloutProducer` while this step trains: rollouts may come from weights up
to that many steps old, which the decoupled loss corrects for (the reference trains this way).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from paravt.core import (
    Episode,
    run_episodes,
)
from paravt.core.engines import HFEngine
from paravt.rewards import NFramesGate
from paravt.train.checkpoint import (
    latest_checkpoint,
)
from paravt.train.data import read_rl_rows
from paravt.train.distributed import (
    all_reduce_mean,
    shard_like_policy,
)
from paravt.train.frames import FrameSource, ensure_synth
from paravt.train.metrics import RowOrder
from paravt.train.modeling import (
    ensure_model,
    filler_sequence,
    load_model_and_processor,
    pick_device,
)
from paravt.train.producer import RolloutProducer
from paravt.train.recipe import RLRecipe
from paravt.train.rl.learner import update
from paravt.train.rl.policy import PolicyEngine
from paravt.train.rl.rollouts import (
    PreparedStep,
    Rollouts,
    agent_config,
    rollout,
    rollout_tasks,
)
from paravt.train.rl.scoring import (
    NoSignalWatch,
    episode_metrics,
    score_rollouts,
    training_sequences,
    zero_groups_frac,
)
from paravt.train.runs import start_run

log = logging.getLogger("paravt.train")


def load_rl_examples(recipe: RLRecipe) -> list[Any]:

    ensure_synth(recipe.data)
    examples, report = read_rl_rows(
        recipe.data.parquet, root=recipe.data.root, max_rows=recipe.data.max_rows
    )
    log.info("RL data: %s", report)
    return examples


def build_gate(recipe: RLRecipe) -> Any:

    g = recipe.gating
    return NFramesGate(
        choices=g.choices, seed=g.seed, enabled=g.enabled, default=recipe.video.overview_frames
    )


def build_reward_config(recipe: RLRecipe) -> Any:
    config = recipe.reward.build()
    if recipe.advantage.token_level_anchoring:
        config = config.model_copy(update={"anchoring": "token"})
    return config


def resume_hint(out: Path, recipe: RLRecipe) -> str:
    """Where a stopped run can continue from: its last complete checkpoint, or none."""
    last = latest_checkpoint(out)
    if last is None:
        return (
            f"No checkpoint was written yet (checkpoint.every_steps={recipe.checkpoint.every_steps})"
            "; a rerun starts over"
        )
    return f"The last complete checkpoint is {last}: fix the cause and rerun with --resume"


def train_rl(
    recipe: RLRecipe,
    *,
    resume: bool = False,
    examples: Sequence[Any] | None = None,
    frames: Any = None,
    wrap_engine: Any = None,
    on_step: Any = None,
) -> Path:
    """Run RL as the recipe says; returns the `final/` model directory.

    `examples` (RLExample-like) and `frames` (overview + toolbox source) replace the recipe's
    parquet data and the paravt-tools frame source (tests, custom tools); `wrap_engine(engine)`
    wraps the rollout engine (e.g. `paravt.core.engines.ScriptedTurns` for scripted turns);
    `on_step(step, backend, metrics, rollouts)` runs on every rank after each step (monitoring,
    tests; it may make collectives, the same on every rank).
    """
    run = start_run(recipe, resume=resume)
    init_path = ensure_model(recipe.model)  # the reference and the servers start from it
    out, device, rank, world = run.out, run.device, run.rank, run.world
    backend, processor, compute_dtype = run.backend, run.processor, run.compute_dtype
    ref_model = None
    if recipe.loss.kl_coef > 0:  # the frozen reference is the initial policy, also on resume
        ref_model, _ = load_model_and_processor(
            recipe.model.model_copy(update={"gradient_checkpointing": False}),
            device,
            path=init_path,
            dtype=compute_dtype,
        )
        ref_model = shard_like_policy(ref_model, recipe.distributed, compute_dtype).eval()
    logger = run.resume()  # after the reference: the restored generators are the run's own
    ckpt, start, order_state = run.checkpoint_dir, run.start, run.data_state

    policy = PolicyEngine(recipe, backend, processor, ckpt or init_path, device, step=start)
    engine = policy.engine if wrap_engine is None else wrap_engine(policy.engine)
    if frames is None:
        frames = FrameSource(recipe.video)
    rows = list(examples) if examples is not None else load_rl_examples(recipe)
    gate = build_gate(recipe)
    reward_config = build_reward_config(recipe)
    order = RowOrder(len(rows), recipe.seed, recipe.data.shuffle)
    if order_state is not None:
        order.load(order_state)
    if recipe.rollout.batch_prompts % world:
        raise ValueError(
            f"rollout.batch_prompts ({recipe.rollout.batch_prompts}) must divide over "
            f"{world} ranks; pick a multiple of {world}"
        )
    per_rank = recipe.rollout.batch_prompts // world
    pad_id, image_id = policy.engine.pad_token_id, policy.engine.image_token_id
    filler = filler_sequence(policy.engine) if world > 1 else None

    # Which prompts each step trains on, in step order; the data state before each step is kept
    # so a checkpoint resumes exactly even when later steps were prepared ahead.
    order_before: dict[int, dict[str, int]] = {}
    plan_lock = threading.Lock()

    def plan(step: int) -> tuple[int, list[Any], int]:
        with plan_lock:
            order_before[step] = order.state()
            epoch = order.epoch
            picked = order.take(recipe.rollout.batch_prompts)
        picked = picked[rank * per_rank : (rank + 1) * per_rank]
        seed = (recipe.seed * 1_000_003 + step * 7919 + rank * 104_729) % 2**31
        return epoch, [rows[i] for i in picked], seed

    def data_state_after(step: int) -> dict[str, int]:
        """The data state a resume at `step + 1` starts from (and forget the steps done)."""
        with plan_lock:
            for done in [k for k in order_before if k <= step]:
                del order_before[done]
            return order_before.get(step + 1) or order.state()

    producer: RolloutProducer[PreparedStep, list[Episode]] | None = None
    if recipe.rollout.max_staleness:

        def prepare(step: int) -> PreparedStep:
            epoch, batch_examples, seed = plan(step)
            tasks, per_episode, budgets = rollout_tasks(
                batch_examples, frames, gate, recipe, epoch=epoch
            )
            return PreparedStep(epoch, seed, tasks, per_episode, budgets)

        async def generate(prepared: PreparedStep) -> list[Episode]:
            config = agent_config(recipe, seed=prepared.seed)
            return await run_episodes(prepared.tasks, engine, config)

        producer = RolloutProducer(
            prepare,
            generate,
            first=start + 1,
            last=recipe.max_steps,
            max_staleness=recipe.rollout.max_staleness,
            version=start,
        )
        log.info(
            "asynchronous rollouts: up to %d steps ahead of training", recipe.rollout.max_staleness
        )
    no_signal = NoSignalWatch(recipe.advantage.zero_signal_warn_steps)
    step = start
    try:
        for step in range(start + 1, recipe.max_steps + 1):
            t0 = time.perf_counter()
            async_metrics: dict[str, float] = {}
            if producer is None:
                epoch, batch_examples, seed = plan(step)
                ro = rollout(batch_examples, engine, frames, gate, recipe, epoch=epoch, seed=seed)
            else:
                got = producer.take(step)
                epoch = got.prepared.epoch
                ro = Rollouts(got.result, got.prepared.per_episode, got.prepared.budgets)
                async_metrics = {
                    "rollout/staleness": float(got.staleness),
                    "time/rollout_generate_s": got.ended_at - got.started_at,
                }
            t1 = time.perf_counter()
            score_rollouts(ro, reward_config, recipe)
            seqs = training_sequences(ro, recipe, policy.engine, reward_config)
            t2 = time.perf_counter()
            metrics = episode_metrics(ro)
            metrics["advantage/zero_groups_frac"] = zero_groups_frac(
                [r.total for r in ro.rewards], recipe.rollout.group_size
            )
            policy.before_update()
            metrics.update(
                update(
                    backend,
                    ref_model,
                    seqs,
                    recipe,
                    pad_id=pad_id,
                    image_id=image_id,
                    device=device,
                    filler=filler,
                )
            )
            metrics.update(policy.sync())
            if producer is not None:
                producer.set_version(policy.step)  # later steps may start on these weights
            t3 = time.perf_counter()
            generated = sum(s.num_generated for ep in ro.episodes for s in [ep.main, *ep.subagents])
            metrics.update(
                {
                    "time/rollout_s": t1 - t0,
                    "time/reward_s": t2 - t1,
                    "time/update_s": t3 - t2,
                    "time/step_s": t3 - t0,
                    "tokens/generated": float(generated),
                    "throughput/generated_tokens_per_s": generated / max(t3 - t0, 1e-9),
                    **async_metrics,
                }
            )
            if hasattr(policy.engine, "prompt_token_mismatches"):  # server engines, every rank
                # prompts the server tokenized otherwise than the trainer scores (so far)
                mismatches = float(policy.engine.prompt_token_mismatches)
                metrics["rollout/prompt_token_mismatches"] = mismatches
            metrics = all_reduce_mean(metrics)
            no_signal.update(step, metrics["advantage/zero_groups_frac"])
            metrics["lr"] = backend.lr
            metrics["epoch"] = epoch
            logger.log(
                step,
                metrics,
                bar={
                    "reward": metrics["reward/total"],
                    "f_tau": metrics["f_tau"],
                    "kappa": metrics["kappa"],
                },
            )
            if on_step is not None:
                on_step(step, backend, metrics, ro)
            run.checkpoint(step, data_state_after(step))
    except Exception as exc:
        if rank == 0:
            log.error("RL stopped in step %d: %s. %s", step, exc, resume_hint(out, recipe))
        raise
    finally:
        if producer is not None:
            producer.close()
    return run.finish()


def evaluate(
    model_path: Path | str,
    recipe: RLRecipe,
    examples: Sequence[Any],
    *,
    frames: Any = None,
    seed: int = 12345,
) -> dict[str, float]:
    """f_tau, kappa, accuracy (and the other rollout metrics) of a model on `examples`, sampled
    at the recipe's rollout temperature with the recipe's gate, without any update."""

    device = pick_device(recipe.distributed.device)
    model, processor = load_model_and_processor(recipe.model, device, path=model_path)
    engine = HFEngine(model, processor)
    if frames is None:
        frames = FrameSource(recipe.video)
    ro = rollout(list(examples), engine, frames, build_gate(recipe), recipe, epoch=0, seed=seed)
    score_rollouts(ro, build_reward_config(recipe), recipe)
    return episode_metrics(ro)
