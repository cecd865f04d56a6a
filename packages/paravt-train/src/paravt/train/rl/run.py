"""The RL recipe, top to bottom: `train_rl` is set-up (`set_up_rl`), the loop over steps
(`rl_step`) and the finish. One file because it is that one reading order; each stage it calls
lives in its own module (rollouts, scoring, learner, policy, step_metrics, watches).

One step (`rl_step`):
1. take `batch_prompts` prompts (split over ranks; `StepPlan`);
2. nFrames gating (`paravt.rewards.NFramesGate`) picks the overview K of each prompt, the same K
   for all its rollouts;
3. `group_size` rollouts per prompt run through the agent runtime (`paravt.core.run_episodes`) on
   the run's rollout engine (`paravt.train.rl.engines`: the policy module itself, a replica, or
   SGLang / vLLM servers; think prefix, turns, parallel dispatch, sub-agents);
4. `paravt.rewards.score_episode` scores every episode, `group_advantages` normalises per group;
5. PPO clipped loss against the rollout log-probs + k3 KL to a frozen reference, over the main
   trajectories and (with `include_subagents_in_loss`) the sub-agent trajectories, which carry
   their episode's advantage;
6. the rollout engine follows the new weights (`WeightPublisher.sync`);
7. the metrics row (`step_metrics`), the watches (`NoSignalWatch`, `InvalidCallWatch`), progress
   bar, checkpoint every N steps; rank 0 records a sample of the step's episodes
   (`paravt.train.episodes`, `<output_dir>/episodes/`).

With `rollout.max_staleness > 0` (SGLang servers only) steps 1-3 of later steps run ahead on a
`paravt.train.producer.RolloutProducer` while this step trains: rollouts may come from weights up
to that many steps old, which the decoupled loss corrects for (the reference trains this way).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paravt.core import (
    Engine,
    Episode,
    run_episodes,
)
from paravt.core.engines import HFEngine
from paravt.rewards import NFramesGate, RewardConfig
from paravt.train.checkpoint import (
    latest_checkpoint,
)
from paravt.train.data import read_rl_rows
from paravt.train.distributed import Backend, shard_like_policy
from paravt.train.episodes import EpisodeRecorder
from paravt.train.examples import load_examples
from paravt.train.frames import FrameSource
from paravt.train.metrics import RowOrder
from paravt.train.modeling import (
    Sequence_,
    ensure_model,
    filler_sequence,
    load_model_and_processor,
    pick_device,
)
from paravt.train.producer import RolloutProducer
from paravt.train.recipe import RLRecipe
from paravt.train.rl.learner import ppo_update
from paravt.train.rl.policy import WeightPublisher
from paravt.train.rl.rollouts import (
    PreparedStep,
    Rollouts,
    agent_config,
    rollout,
    rollout_tasks,
)
from paravt.train.rl.scoring import (
    episode_metrics,
    score_rollouts,
    training_sequences,
)
from paravt.train.rl.step_metrics import StepTimes, progress_bar, step_metrics
from paravt.train.rl.watches import ClipWatch, InvalidCallWatch, NoSignalWatch
from paravt.train.runs import Run, start_run

log = logging.getLogger("paravt.train")

OnStep = Callable[[int, Backend, dict[str, float], Rollouts], None]


def load_rl_examples(recipe: RLRecipe) -> list[Any]:
    """The recipe's RL rows (its synthetic task set generated first when it has one)."""
    return load_examples(recipe.data, read_rl_rows, "RL")


def build_gate(recipe: RLRecipe) -> NFramesGate:
    """The nFrames gate of `recipe.gating` (its default K: the overview's frame count)."""
    g = recipe.gating
    return NFramesGate(
        choices=g.choices, seed=g.seed, enabled=g.enabled, default=recipe.video.overview_frames
    )


def build_reward_config(recipe: RLRecipe) -> RewardConfig:
    """The reward of `recipe.reward` (with token-level anchoring when the advantage asks)."""
    config: RewardConfig = recipe.reward.build()
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


class StepPlan:
    """Which prompts each step trains on, in step order: `plan(step)` is this rank's share of the
    step's prompts, their data epoch and the step's sampling seed. The data state before each
    step is kept, so a checkpoint resumes exactly even when later steps were planned ahead (the
    producer plans from its own thread)."""

    def __init__(
        self, rows: list[Any], recipe: RLRecipe, rank: int, world: int, state: Any = None
    ) -> None:
        if recipe.rollout.batch_prompts % world:
            raise ValueError(
                f"rollout.batch_prompts ({recipe.rollout.batch_prompts}) must divide over "
                f"{world} ranks; pick a multiple of {world}"
            )
        self.rows, self.rank = rows, rank
        self.batch, self.seed = recipe.rollout.batch_prompts, recipe.seed
        self.per_rank = self.batch // world
        self.order = RowOrder(len(rows), recipe.seed, recipe.data.shuffle)
        if state is not None:
            self.order.load(state)
        self._before: dict[int, dict[str, int]] = {}
        self._lock = threading.Lock()

    def __call__(self, step: int) -> tuple[int, list[Any], int]:
        with self._lock:
            self._before[step] = self.order.state()
            epoch = self.order.epoch
            picked = self.order.take(self.batch)
        picked = picked[self.rank * self.per_rank : (self.rank + 1) * self.per_rank]
        seed = (self.seed * 1_000_003 + step * 7919 + self.rank * 104_729) % 2**31
        return epoch, [self.rows[i] for i in picked], seed

    def data_state_after(self, step: int) -> dict[str, int]:
        """The data state a resume at `step + 1` starts from (and forget the steps done)."""
        with self._lock:
            for done in [k for k in self._before if k <= step]:
                del self._before[done]
            return self._before.get(step + 1) or self.order.state()


@dataclass
class RLSetup:
    """What every step of a run uses (`set_up_rl` builds it once)."""

    recipe: RLRecipe
    run: Run
    publisher: WeightPublisher  # the run's rollout engine, kept on the policy's weights
    generator: Engine  # what the agent runtime generates with: the rollout engine's, maybe wrapped
    encoder: Any  # what tokenises the episodes for training (the rollout engine's own Engine,
    # with the processor's pad and image token ids)
    ref_model: Any  # the frozen KL reference, sharded like the policy (None: no KL term)
    frames: FrameSource
    gate: NFramesGate
    reward_config: RewardConfig
    plan: StepPlan
    producer: RolloutProducer[PreparedStep, list[Episode]] | None
    filler: Sequence_ | None
    no_signal: NoSignalWatch
    invalid_calls: InvalidCallWatch = field(default_factory=lambda: InvalidCallWatch(0))
    clip: ClipWatch | None = None  # rewards flattened by advantage.reward_clip
    episodes: EpisodeRecorder | None = None  # rank 0's sampled episodes (paravt.train.episodes)

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close()
        self.publisher.close()


def reference_model(recipe: RLRecipe, run: Run, init_path: Any) -> Any:
    """The frozen KL reference: the initial policy (also on resume), sharded like the policy;
    None without a KL term."""
    if recipe.loss.kl_coef <= 0:
        return None
    ref_model, _ = load_model_and_processor(
        recipe.model.model_copy(update={"gradient_checkpointing": False}),
        run.device,
        path=init_path,
        dtype=run.compute_dtype,
    )
    return shard_like_policy(ref_model, recipe.distributed, run.compute_dtype).eval()


def rollout_producer(
    recipe: RLRecipe, plan: StepPlan, engine: Any, frames: Any, gate: NFramesGate, start: int
) -> RolloutProducer[PreparedStep, list[Episode]]:
    """Steps `start + 1 ..` generated ahead of training, at most `max_staleness` versions old."""

    def prepare(step: int) -> PreparedStep:
        epoch, batch_examples, seed = plan(step)
        tasks, per_episode, budgets = rollout_tasks(
            batch_examples, frames, gate, recipe.rollout, epoch=epoch
        )
        return PreparedStep(epoch, seed, tasks, per_episode, budgets)

    async def generate(prepared: PreparedStep) -> list[Episode]:
        config = agent_config(recipe.rollout, recipe.video.max_crop_frames, seed=prepared.seed)
        return await run_episodes(prepared.tasks, engine, config)

    log.info(
        "asynchronous rollouts: up to %d steps ahead of training", recipe.rollout.max_staleness
    )
    return RolloutProducer(
        prepare,
        generate,
        first=start + 1,
        last=recipe.max_steps,
        max_staleness=recipe.rollout.max_staleness,
        version=start,
    )


def set_up_rl(
    recipe: RLRecipe,
    run: Run,
    *,
    examples: Sequence[Any] | None = None,
    frames: Any = None,
    wrap_engine: Callable[[Any], Any] | None = None,
) -> RLSetup:
    """After `start_run`: the reference, the resume, the rollout engine (starting from the
    policy's weights), the data plan, the gate, the reward config and, asynchronous, the
    producer."""
    init_path = ensure_model(recipe.model)  # the reference and the servers start from it
    ref_model = reference_model(recipe, run, init_path)
    run.resume()  # after the reference: the restored generators are the run's own
    publisher = WeightPublisher(
        recipe,
        run.backend,
        run.processor,
        run.checkpoint_dir or init_path,
        run.device,
        step=run.start,
    )
    encoder = publisher.rollout_engine.engine
    generator = encoder if wrap_engine is None else wrap_engine(encoder)
    frames = FrameSource(recipe.video) if frames is None else frames
    rows = list(examples) if examples is not None else load_rl_examples(recipe)
    gate = build_gate(recipe)
    reward_config = build_reward_config(recipe)
    plan = StepPlan(rows, recipe, run.rank, run.world, run.data_state)
    producer = None
    if recipe.rollout.max_staleness:
        producer = rollout_producer(recipe, plan, generator, frames, gate, run.start)
    return RLSetup(
        recipe=recipe,
        run=run,
        publisher=publisher,
        generator=generator,
        encoder=encoder,
        ref_model=ref_model,
        frames=frames,
        gate=gate,
        reward_config=reward_config,
        plan=plan,
        producer=producer,
        filler=filler_sequence(encoder) if run.world > 1 else None,
        no_signal=NoSignalWatch(recipe.advantage.zero_signal_warn_steps),
        invalid_calls=InvalidCallWatch(
            recipe.advantage.invalid_call_warn_window,
            recipe.advantage.invalid_call_warn_rise,
            reward_config,
        ),
        episodes=episode_recorder(recipe, run),
        clip=ClipWatch(recipe.advantage),
    )


def episode_recorder(recipe: RLRecipe, run: Run) -> EpisodeRecorder | None:
    """Rank 0's recorder of sampled episodes (after `Run.resume`: a resume keeps the steps done);
    None on other ranks or with `logging.episodes_per_k` 0."""
    if run.rank != 0 or recipe.logging.episodes_per_k <= 0:
        return None
    return EpisodeRecorder(
        run.out / "episodes",
        per_k=recipe.logging.episodes_per_k,
        max_mib=recipe.logging.episodes_max_mib,
        start=run.start,
    )


def train_rl(
    recipe: RLRecipe,
    *,
    resume: bool = False,
    examples: Sequence[Any] | None = None,
    frames: Any = None,
    wrap_engine: Callable[[Any], Any] | None = None,
    on_step: OnStep | None = None,
) -> Path:
    """Run RL as the recipe says; returns the `final/` model directory.

    `examples` (RLExample-like) and `frames` (overview + toolbox source) replace the recipe's
    parquet data and the paravt-tools frame source (tests, custom tools); `wrap_engine(engine)`
    wraps the rollout engine (e.g. `paravt.core.engines.ScriptedTurns` for scripted turns);
    `on_step(step, backend, metrics, rollouts)` runs on every rank after each step (monitoring,
    tests; it may make collectives, the same on every rank).
    """
    run = start_run(recipe, resume=resume)
    rl = set_up_rl(recipe, run, examples=examples, frames=frames, wrap_engine=wrap_engine)
    step = run.start
    try:
        for step in range(run.start + 1, recipe.max_steps + 1):
            metrics, rollouts = rl_step(rl, step)
            run.logger.log(step, metrics, bar=progress_bar(metrics))
            if on_step is not None:
                on_step(step, run.backend, metrics, rollouts)
            run.checkpoint(step, rl.plan.data_state_after(step))
    except Exception as exc:
        if run.rank == 0:
            log.error("RL stopped in step %d: %s. %s", step, exc, resume_hint(run.out, recipe))
        raise
    finally:
        rl.close()
    return run.finish()


def rl_step(rl: RLSetup, step: int) -> tuple[dict[str, float], Rollouts]:
    """One step: rollouts (generated now, or taken from the producer) -> rewards, advantages and
    training sequences -> the update -> the rollout engine follows the new weights -> the
    step's metrics, averaged over ranks. Collective: every rank runs it."""
    recipe, run, publisher = rl.recipe, rl.run, rl.publisher
    started = time.perf_counter()
    rollouts, epoch, producer_metrics = step_rollouts(rl, step)
    rolled_out = time.perf_counter()
    score_rollouts(rollouts, rl.reward_config, recipe)
    sequences = training_sequences(
        rollouts,
        rl.encoder,
        rl.reward_config,
        recipe.advantage,
        group_size=recipe.rollout.group_size,
        think_prefix=recipe.rollout.think_prefix,
        include_subagents=recipe.loss.include_subagents_in_loss,
    )
    scored = time.perf_counter()
    publisher.before_update()
    update_metrics = ppo_update(
        run.backend,
        rl.ref_model,
        sequences,
        recipe,
        pad_id=rl.encoder.pad_token_id,
        image_id=rl.encoder.image_token_id,
        device=run.device,
        filler=rl.filler,
    )
    sync_metrics = publisher.sync()
    if rl.producer is not None:
        rl.producer.set_version(publisher.step)  # later steps may start on these weights
    metrics = step_metrics(
        rollouts,
        recipe.rollout.group_size,
        update_metrics=update_metrics,
        sync_metrics=sync_metrics,
        engine_metrics=publisher.metrics(),
        times=StepTimes(started, rolled_out, scored, time.perf_counter()),
        producer_metrics=producer_metrics,
    )
    rl.no_signal.observe(step, metrics["advantage/zero_groups_frac"], metrics["accuracy"])
    rl.invalid_calls.observe(step, metrics)
    if rl.clip is not None:
        rl.clip.observe(step, metrics)
    t_rec = time.perf_counter()
    if rl.episodes is not None:  # rank 0 only, no collective
        staleness = int(producer_metrics.get("rollout/staleness", 0))
        records = rl.episodes.record(
            step,
            rollouts,
            weight_version=step - 1 - staleness,
            tool_response=recipe.rollout.tool_response,
        )
        run.logger.log_episodes(step, records)  # W&B / TensorBoard when on; never raises
    metrics["time/episodes_s"] = time.perf_counter() - t_rec
    metrics["lr"] = run.backend.lr
    metrics["epoch"] = epoch
    return metrics, rollouts


def step_rollouts(rl: RLSetup, step: int) -> tuple[Rollouts, int, dict[str, float]]:
    """The step's rollouts, their data epoch and (from the producer) their staleness and
    generation time."""
    if rl.producer is None:
        epoch, batch_examples, seed = rl.plan(step)
        rollouts = rollout(
            batch_examples, rl.generator, rl.frames, rl.gate, rl.recipe, epoch=epoch, seed=seed
        )
        return rollouts, epoch, {}
    got = rl.producer.take(step)
    rollouts = Rollouts(got.result, got.prepared.per_episode, got.prepared.budgets)
    return rollouts, got.prepared.epoch, {
        "rollout/staleness": float(got.staleness),
        "time/rollout_generate_s": got.ended_at - got.started_at,
    }  # fmt: skip


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
    rollouts = rollout(
        list(examples), engine, frames, build_gate(recipe), recipe, epoch=0, seed=seed
    )
    score_rollouts(rollouts, build_reward_config(recipe), recipe)
    return episode_metrics(rollouts)
