"""PARA-GRPO / GRPO, one readable recipe: setup -> data -> (rollout -> reward -> update) loop.

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
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from paravt.core.prompts import build_main_prompt, render_frames
from paravt.core.protocol import Message, TextPart
from paravt.core.runtime import AgentConfig, AgentTask, Episode, SamplingParams, run_episodes_sync
from paravt.train.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    truncate_metrics,
)
from paravt.train.distributed import Backend, all_reduce_mean, init_distributed
from paravt.train.losses import ppo_loss, step_normaliser
from paravt.train.metrics import MetricsLogger, RowOrder
from paravt.train.modeling import (
    Sequence_,
    collate,
    load_model_and_processor,
    pick_device,
    token_logprobs,
)
from paravt.train.recipe import RLRecipe
from paravt.train.sft import save_final, seed_everything

log = logging.getLogger("paravt.train")


# --------------------------------------------------------------------------------------------------
# Building blocks


def agent_config(recipe: RLRecipe, *, seed: int | None) -> AgentConfig:
    r = recipe.rollout
    return AgentConfig(
        max_turns=r.max_turns,
        max_parallel=r.max_parallel,
        dispatch=r.dispatch,
        tool_response=r.tool_response,
        think_prefix=r.think_prefix,
        max_num_frames=recipe.video.max_crop_frames,
        sampling=SamplingParams(
            max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p, seed=seed
        ),
        subagent_sampling=SamplingParams(
            max_new_tokens=r.subagent_max_new_tokens,
            temperature=r.temperature,
            top_p=r.top_p,
            seed=None if seed is None else seed + 1,
        ),
    )


def prompt_messages(
    example: Any, overview: Sequence[Any], duration_s: float, recipe: RLRecipe
) -> list[Message]:
    """The main agent's first prompt: the row's system prompt (or ours), the overview frames with
    their timestamps where the row's `<video>` placeholder was, and the question."""
    r = recipe.rollout
    if example.system is None:
        return build_main_prompt(
            example.question,
            overview,
            mode=r.prompt_mode,
            duration_s=duration_s,
            max_turns=r.max_turns,
            max_parallel=r.max_parallel,
        )
    intro = TextPart(
        f"The video is {duration_s:.1f} seconds long. Overview ({len(overview)} frames):"
    )
    return [
        Message("system", example.system),
        Message(
            "user", [intro, *render_frames(overview), TextPart("Question: " + example.question)]
        ),
    ]


@dataclass
class Rollouts:
    """One step's episodes with what they were scored against."""

    episodes: list[Episode]
    examples: list[Any]  # per episode
    budgets: list[int]  # overview K per episode
    rewards: list[Any] = field(default_factory=list)  # RewardBreakdown per episode
    advantages: list[float] = field(default_factory=list)


def rollout(
    examples: Sequence[Any],
    engine: Any,
    frames: Any,
    gate: Any,
    recipe: RLRecipe,
    *,
    epoch: int,
    seed: int | None,
) -> Rollouts:
    """`group_size` agent episodes per example (consecutive), with gated overview budgets."""
    tasks: list[AgentTask] = []
    per_episode: list[Any] = []
    budgets: list[int] = []
    for ex in examples:
        k = gate.budget(ex.key, epoch)
        overview, duration_s = frames.overview(ex.video, k)
        messages = prompt_messages(ex, overview, duration_s, recipe)
        for j in range(recipe.rollout.group_size):
            tasks.append(
                AgentTask(f"{ex.key}#{j}", messages, frames.toolbox(ex.video), ex.question)
            )
            per_episode.append(ex)
            budgets.append(k)
    episodes = run_episodes_sync(tasks, engine, agent_config(recipe, seed=seed))
    return Rollouts(episodes, per_episode, budgets)


def score_rollouts(ro: Rollouts, reward_config: Any, recipe: RLRecipe) -> None:
    """Rewards (paravt-rewards) and group-normalised advantages, in place."""
    from paravt.rewards import AdvantageConfig, group_advantages, score_episode

    for ep, ex in zip(ro.episodes, ro.examples):
        options = ex.extra_info.get("options") if isinstance(ex.extra_info, dict) else None
        ro.rewards.append(
            score_episode(
                ep,
                ex.answer,
                ex.question_type,
                reward_config,
                options=options,
                question=ex.question,
            )
        )
    a = recipe.advantage
    config = AdvantageConfig(
        estimator=a.estimator,
        reward_scaling=a.reward_scaling,
        reward_bias=a.reward_bias,
        batch_norm=a.batch_norm,
    )
    totals = [r.total for r in ro.rewards]
    ro.advantages = group_advantages(totals, recipe.rollout.group_size, config=config)


def _turn_offsets(engine: Any, ids: Sequence[int], prefix: str) -> list[tuple[int, int]]:
    """Character span of each generated token in `prefix + text` (tokens decoded one by one)."""
    spans, pos = [], len(prefix)
    for t in ids:
        piece = engine.decode([t])
        spans.append((pos, pos + len(piece)))
        pos += len(piece)
    return spans


def training_sequences(
    ro: Rollouts, recipe: RLRecipe, engine: Any, reward_config: Any
) -> list[Sequence_]:
    """Main (and optionally sub-agent) trajectories with their per-token advantages."""
    from paravt.rewards import anchor_token_rewards

    seqs: list[Sequence_] = []
    prefix = "<think>\n" if recipe.rollout.think_prefix else ""
    for ep, adv in zip(ro.episodes, ro.advantages):
        main = ep.main
        advs = [adv] * len(main.token_ids)
        if recipe.advantage.token_level_anchoring:
            # generated runs of the main trajectory are the turns, in order
            runs, start = [], None
            for i, m in enumerate([*main.loss_mask, 0]):
                if m and start is None:
                    start = i
                elif not m and start is not None:
                    runs.append((start, i))
                    start = None
            for (s, e), turn in zip(runs, ep.turns):
                offsets = _turn_offsets(engine, main.token_ids[s:e], prefix)
                bonus = anchor_token_rewards(
                    turn.parsed, offsets, lambda_anchor=reward_config.lambda_anchor
                )
                for i, b in zip(range(s, e), bonus):
                    advs[i] += b * recipe.advantage.reward_scaling
        seqs.append(Sequence_(main.token_ids, main.loss_mask, main.media, main.logprobs, advs))
        if recipe.loss.include_subagents_in_loss:
            for sub in ep.subagents:
                seqs.append(
                    Sequence_(
                        sub.token_ids,
                        sub.loss_mask,
                        sub.media,
                        sub.logprobs,
                        [adv] * len(sub.token_ids),
                    )
                )
    return seqs


def episode_metrics(ro: Rollouts) -> dict[str, float]:
    """Reward components, f_tau, kappa, calls per turn, accuracy, lengths and K of a step."""

    def mean(xs: Sequence[float]) -> float:
        return sum(xs) / len(xs) if xs else math.nan

    out: dict[str, float] = {}
    keys = ro.rewards[0].components().keys() if ro.rewards else []
    for k in keys:
        out[k] = mean([r.components()[k] for r in ro.rewards])
    eps = ro.episodes
    turns = [t for ep in eps for t in ep.turns]
    out.update(
        {
            "f_tau": mean([r.format for r in ro.rewards]),
            "kappa": mean([float(ep.num_tool_calls) for ep in eps]),
            "accuracy": mean([r.accuracy for r in ro.rewards]),
            "calls_per_turn": mean([float(t.num_calls) for t in turns]),
            "tool_use_rate": mean([float(ep.num_tool_calls > 0) for ep in eps]),
            "turns": mean([float(len(ep.turns)) for ep in eps]),
            "len/main_generated": mean([float(ep.main.num_generated) for ep in eps]),
            "len/main_total": mean([float(len(ep.main.token_ids)) for ep in eps]),
            "len/subagent_generated": mean(
                [float(s.num_generated) for ep in eps for s in ep.subagents]
            )
            if any(ep.subagents for ep in eps)
            else 0.0,
            "subagents_per_episode": mean([float(len(ep.subagents)) for ep in eps]),
            "gating/k_mean": mean([float(k) for k in ro.budgets]),
            "truncated_rate": mean([float(ep.turns[-1].finish_reason == "length") for ep in eps]),
        }
    )
    return out


def update(
    backend: Backend,
    ref_model: Any,
    seqs: list[Sequence_],
    recipe: RLRecipe,
    *,
    pad_id: int,
    image_id: int,
    device: torch.device,
) -> dict[str, float]:
    """One optimiser step over `seqs` (micro-batched, gradients accumulated); loss metrics."""
    loss_cfg = recipe.loss
    temperature = recipe.rollout.temperature or 1.0
    norm = step_normaliser(loss_cfg.aggregation, [s.mask for s in seqs])
    mbs = [
        seqs[i : i + loss_cfg.micro_batch_size]
        for i in range(0, len(seqs), loss_cfg.micro_batch_size)
    ]
    sums = {"pg": 0.0, "kl": 0.0, "clip_fraction": 0.0, "ratio": 0.0, "tokens": 0.0}
    loss_total = 0.0
    module = backend.forward_module()
    for k, mb in enumerate(mbs):
        batch = collate(mb, pad_id=pad_id, image_token_id=image_id, device=device)
        mask = batch["mask"].clone()
        mask[:, 0] = 0.0  # the first token has no prediction
        ref_lp = None
        if ref_model is not None and loss_cfg.kl_coef > 0:
            with torch.no_grad():
                ref_lp = token_logprobs(ref_model, batch, temperature=temperature)
        lp = token_logprobs(module, batch, temperature=temperature)
        parts = ppo_loss(
            lp,
            batch["old_logprobs"],
            batch["advantages"],
            mask,
            ref_logp=ref_lp,
            clip_eps=loss_cfg.clip_eps,
            clip_eps_high=loss_cfg.clip_eps_high,
            kl_coef=loss_cfg.kl_coef,
            aggregation=loss_cfg.aggregation,
            norm=norm,
        )
        backend.backward(parts.loss, last=k == len(mbs) - 1)
        loss_total += float(parts.loss.detach())
        w = parts.tokens
        sums["pg"] += parts.pg * w
        sums["kl"] += parts.kl * w
        sums["clip_fraction"] += parts.clip_fraction * w
        sums["ratio"] += parts.ratio_mean * w
        sums["tokens"] += w
    grad_norm = backend.step()
    tok = sums["tokens"] or 1.0
    return {
        "loss": loss_total,
        "loss/pg": sums["pg"] / tok,
        "kl": sums["kl"] / tok,
        "clip_fraction": sums["clip_fraction"] / tok,
        "ratio_mean": sums["ratio"] / tok,
        "grad_norm": grad_norm,
        "tokens/trained": sums["tokens"],
        "trajectories/trained": float(len(seqs)),
    }


# --------------------------------------------------------------------------------------------------
# Engines


class PolicyEngine:
    """The rollout engine of a run and how it follows the policy's weights.

    - hf, one process or DeepSpeed ZeRO-2: `HFEngine` holding the policy module itself (shared
      weights: every optimiser step is seen by the next rollout; nothing to sync);
    - hf under FSDP2 / ZeRO-3: `HFEngine` on an unsharded replica refreshed after each step;
    - sglang: `paravt.core.engines.sglang.SGLangEngine`, weights pushed after each step.
    """

    def __init__(
        self,
        recipe: RLRecipe,
        backend: Backend,
        processor: Any,
        model_path: Any,
        device: torch.device,
    ) -> None:
        self.kind = recipe.rollout.engine
        self.backend = backend
        self.replica: Any = None
        if self.kind == "sglang":
            from paravt.core.engines.sglang import SGLangEngine

            # GPU only, written against SGLang's documented offline-engine API; untested here.
            self.engine = SGLangEngine(
                processor=processor, model_path=str(model_path), engine_kwargs=recipe.rollout.sglang
            )
            return
        from paravt.core.engines.hf import HFEngine

        if backend.sharded:
            from transformers import AutoModelForImageTextToText

            self.replica = AutoModelForImageTextToText.from_pretrained(str(model_path)).to(device)
            self.replica.requires_grad_(False)
            self.sync()
            self.engine = HFEngine(self.replica, processor)
        else:
            self.engine = HFEngine(backend.model, processor)

    def sync(self) -> None:
        """Make the engine generate with the policy's current weights."""
        if self.kind == "sglang":
            state = self.backend.full_model_state()
            self.engine.sync_weights(list(state.items()))  # names as in the HF checkpoint
        elif self.replica is not None:
            state = self.backend.full_model_state()
            self.replica.load_state_dict(state, strict=False)


# --------------------------------------------------------------------------------------------------
# The recipe


def load_rl_examples(recipe: RLRecipe) -> list[Any]:
    from paravt.train.data import read_rl_rows
    from paravt.train.frames import ensure_synth

    ensure_synth(recipe.data)
    examples, report = read_rl_rows(
        recipe.data.parquet, root=recipe.data.root, max_rows=recipe.data.max_rows
    )
    log.info("RL data: %s", report)
    return examples


def build_gate(recipe: RLRecipe) -> Any:
    from paravt.rewards import NFramesGate

    g = recipe.gating
    return NFramesGate(
        choices=g.choices, seed=g.seed, enabled=g.enabled, default=recipe.video.overview_frames
    )


def build_reward_config(recipe: RLRecipe) -> Any:
    config = recipe.reward.build()
    if recipe.advantage.token_level_anchoring:
        config = config.model_copy(update={"anchoring": "token"})
    return config


def train_rl(
    recipe: RLRecipe,
    *,
    resume: bool = False,
    examples: Sequence[Any] | None = None,
    frames: Any = None,
    wrap_engine: Any = None,
) -> Path:
    """Run RL as the recipe says; returns the `final/` model directory.

    `examples` (RLExample-like) and `frames` (overview + toolbox source) replace the recipe's
    parquet data and the paravt-tools frame source (tests, custom tools); `wrap_engine(engine)`
    wraps the rollout engine (e.g. `paravt.core.engines.ScriptedTurns` for scripted turns).
    """
    from paravt.train.modeling import ensure_model

    out = Path(recipe.output_dir)
    device = pick_device(recipe.distributed.device)
    rank, world = init_distributed(recipe.distributed, device)
    seed_everything(recipe.seed + rank)

    init_path = ensure_model(recipe.model)
    ckpt = latest_checkpoint(out) if resume else None
    model, processor = load_model_and_processor(recipe.model, device, path=ckpt)
    backend = Backend(model, recipe.distributed, recipe.optim, recipe.max_steps)
    ref_model = None
    if recipe.loss.kl_coef > 0:  # the frozen reference is the initial policy, also on resume
        ref_model, _ = load_model_and_processor(
            recipe.model.model_copy(update={"gradient_checkpointing": False}),
            device,
            path=init_path,
        )
        ref_model.requires_grad_(False).eval()
    start, order_state = 0, None
    if ckpt is not None:
        state = load_checkpoint(ckpt, backend)
        start, order_state = int(state["step"]), state["data"]
        truncate_metrics(out / "metrics.jsonl", start)
        log.info("resumed from %s at step %d", ckpt, start)
    elif rank == 0 and (out / "metrics.jsonl").exists():
        (out / "metrics.jsonl").unlink()

    policy = PolicyEngine(recipe, backend, processor, ckpt or init_path, device)
    engine = policy.engine if wrap_engine is None else wrap_engine(policy.engine)
    if frames is None:
        from paravt.train.frames import FrameSource

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
    logger = MetricsLogger(out, recipe.logging, rank=rank, total=recipe.max_steps, initial=start)
    pad_id, image_id = policy.engine.pad_token_id, policy.engine.image_token_id

    for step in range(start + 1, recipe.max_steps + 1):
        t0 = time.perf_counter()
        epoch = order.epoch
        picked = order.take(recipe.rollout.batch_prompts)[rank * per_rank : (rank + 1) * per_rank]
        batch_examples = [rows[i] for i in picked]
        seed = (recipe.seed * 1_000_003 + step * 7919 + rank * 104_729) % 2**31
        ro = rollout(batch_examples, engine, frames, gate, recipe, epoch=epoch, seed=seed)
        t1 = time.perf_counter()
        score_rollouts(ro, reward_config, recipe)
        seqs = training_sequences(ro, recipe, policy.engine, reward_config)
        t2 = time.perf_counter()
        metrics = episode_metrics(ro)
        metrics.update(
            update(
                backend, ref_model, seqs, recipe, pad_id=pad_id, image_id=image_id, device=device
            )
        )
        policy.sync()
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
            }
        )
        metrics = all_reduce_mean(metrics)
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
        if recipe.checkpoint.every_steps and step % recipe.checkpoint.every_steps == 0:
            save_checkpoint(
                out,
                step,
                backend,
                processor,
                data_state=order.state(),
                keep_last=recipe.checkpoint.keep_last,
            )
    logger.close()
    final = out / "final"
    if recipe.checkpoint.save_final:
        save_final(final, backend, processor)
    return final


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
    from paravt.core.engines.hf import HFEngine

    device = pick_device(recipe.distributed.device)
    model, processor = load_model_and_processor(recipe.model, device, path=model_path)
    engine = HFEngine(model, processor)
    if frames is None:
        from paravt.train.frames import FrameSource

        frames = FrameSource(recipe.video)
    ro = rollout(list(examples), engine, frames, build_gate(recipe), recipe, epoch=0, seed=seed)
    score_rollouts(ro, build_reward_config(recipe), recipe)
    return episode_metrics(ro)
