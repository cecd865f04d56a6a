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

With `rollout.max_staleness > 0` (SGLang servers only) steps 1-3 of later steps run ahead on a
`paravt.train.producer.RolloutProducer` while this step trains: rollouts may come from weights up
to that many steps old, which the decoupled loss corrects for (the reference trains this way).
"""

from __future__ import annotations

import logging
import math
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch

from paravt.core.prompts import build_main_prompt, render_frames
from paravt.core.protocol import Message, TextPart
from paravt.core.runtime import (
    AgentConfig,
    AgentTask,
    Episode,
    SamplingParams,
    run_episodes,
    run_episodes_sync,
)
from paravt.train.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    truncate_metrics,
)
from paravt.train.distributed import (
    Backend,
    all_gather_floats,
    all_reduce_mean,
    all_reduce_sum,
    barrier,
    init_distributed,
    shard_like_policy,
)
from paravt.train.losses import kl_reward_to_go, ppo_loss, step_normaliser
from paravt.train.metrics import MetricsLogger, RowOrder
from paravt.train.modeling import (
    Sequence_,
    balance_micro_batches,
    collate,
    filler_sequence,
    load_model_and_processor,
    pick_device,
    pick_dtype,
    token_logprobs,
)
from paravt.train.producer import RolloutProducer
from paravt.train.protocol import save_trained_protocol
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
        schedule=r.schedule,
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
    tasks, per_episode, budgets = rollout_tasks(examples, frames, gate, recipe, epoch=epoch)
    episodes = run_episodes_sync(tasks, engine, agent_config(recipe, seed=seed))
    return Rollouts(episodes, per_episode, budgets)


def rollout_tasks(
    examples: Sequence[Any], frames: Any, gate: Any, recipe: RLRecipe, *, epoch: int
) -> tuple[list[AgentTask], list[Any], list[int]]:
    """The agent tasks of `rollout` (overviews decoded), each episode's example and budget."""
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
    return tasks, per_episode, budgets


class PreparedStep(NamedTuple):
    """One step's rollouts before generation (asynchronous training prepares them ahead)."""

    epoch: int
    seed: int
    tasks: list[AgentTask]
    per_episode: list[Any]  # each episode's example
    budgets: list[int]  # each episode's overview K


def score_rollouts(ro: Rollouts, reward_config: Any, recipe: RLRecipe) -> None:
    """Rewards (paravt-rewards) and group-normalised advantages, in place."""
    from paravt.rewards import AdvantageConfig, score_episode

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
    ro.advantages = global_group_advantages(
        [r.total for r in ro.rewards], recipe.rollout.group_size, config
    )


def global_group_advantages(totals: list[float], group_size: int, config: Any) -> list[float]:
    """This rank's advantages, normalised over the global batch (collective).

    Every rank holds whole groups, so the rewards of all ranks in rank order are the step's
    batch as one process would hold it: group statistics are unchanged, and batch normalisation
    (`advantage.batch_norm`) uses the mean and std over all ranks' episodes, as the reference's
    global-batch normalisation does."""
    from paravt.rewards import group_advantages

    gathered = all_gather_floats(totals)
    everything = [x for rank_totals in gathered for x in rank_totals]
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    offset = sum(len(g) for g in gathered[:rank])
    advantages = group_advantages(everything, group_size, config=config)
    return advantages[offset : offset + len(totals)]


def zero_groups_frac(totals: Sequence[float], group_size: int) -> float:
    """The share of groups (consecutive `group_size` rollouts) whose rewards are all equal: their
    outcome advantages are zero, so the step learns nothing from them."""
    groups = [totals[i : i + group_size] for i in range(0, len(totals), group_size)]
    if not groups:
        return 0.0
    return sum(max(g) - min(g) < 1e-9 for g in groups) / len(groups)


class NoSignalWatch:
    """Counts consecutive steps in which every group's rewards were equal and warns (rank 0) after
    `after` of them, then every `after` steps while it lasts (0: never)."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.streak = 0

    def update(self, step: int, zero_groups_frac: float) -> None:
        self.streak = self.streak + 1 if zero_groups_frac >= 1.0 - 1e-9 else 0
        if self.after and self.streak and self.streak % self.after == 0 and _is_rank0():
            log.warning(
                "steps %d-%d: no learning signal: in every group all rollouts got the same "
                "reward (advantage/zero_groups_frac = 1), so every outcome advantage is zero. "
                "Likely causes: an untrained or random model on the rollout server (every answer "
                "equally wrong or malformed: check model.path and the server's --model-path), or "
                "a reward that cannot vary (check reward.* and the data's answers)",
                step - self.streak + 1,
                step,
            )


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


def _micro_batches(
    seqs: list[Sequence_], size: int, filler: Sequence_ | None, world: int
) -> list[list[Sequence_]]:
    """`size` trajectories per micro-batch, balanced over ranks (`balance_micro_batches`)."""
    mbs = [seqs[i : i + size] for i in range(0, len(seqs), size)]
    if filler is None:
        return mbs
    return balance_micro_batches(mbs, filler, world=world)


def logprob_pass(
    backend: Backend,
    ref_model: Any,
    mbs: list[list[Sequence_]],
    recipe: RLRecipe,
    *,
    pad_id: int,
    image_id: int,
    device: torch.device,
) -> None:
    """Before the update, without gradients: the proximal log-probs (the policy as it is now,
    for the decoupled loss) and the reference's (for the KL), stored on each sequence at its
    trained positions. Forward passes on sharded models are collectives: every rank runs the
    same (balanced) micro-batches."""
    loss_cfg = recipe.loss
    temperature = recipe.rollout.temperature or 1.0
    chunk = recipe.model.logprob_chunk_tokens
    need_ref = ref_model is not None and loss_cfg.kl_coef > 0
    if not (loss_cfg.decoupled or need_ref):
        return
    module = backend.forward_module()
    with torch.no_grad():
        for mb in mbs:
            batch = collate(mb, pad_id=pad_id, image_token_id=image_id, device=device)
            mask = batch["mask"]
            prox = ref = None
            if loss_cfg.decoupled:
                prox = token_logprobs(
                    module, batch, temperature=temperature, mask=mask, chunk=chunk
                )
            if need_ref:
                ref = token_logprobs(
                    ref_model, batch, temperature=temperature, mask=mask, chunk=chunk
                )
            for i, s in enumerate(mb):
                n = len(s)
                if prox is not None:
                    s.prox_logprobs = prox[i, :n].cpu().tolist()
                if ref is not None:
                    s.ref_logprobs = ref[i, :n].cpu().tolist()


def add_kl_reward(seqs: list[Sequence_], kl_coef: float) -> None:
    """`loss.kl_form=k1_reward`: each trained token's advantage gets the KL return
    (`losses.kl_reward_to_go` of behaviour vs reference log-probs), in place."""
    for s in seqs:
        if s.ref_logprobs is None or s.old_logprobs is None or s.advantages is None:
            continue
        kl = kl_reward_to_go(s.old_logprobs, s.ref_logprobs, s.mask, kl_coef)
        s.advantages = [a + k for a, k in zip(s.advantages, kl)]


def update(
    backend: Backend,
    ref_model: Any,
    seqs: list[Sequence_],
    recipe: RLRecipe,
    *,
    pad_id: int,
    image_id: int,
    device: torch.device,
    filler: Sequence_ | None = None,
) -> dict[str, float]:
    """One optimiser step over `seqs` (micro-batched, gradients accumulated); loss metrics.

    In train mode (gradient checkpointing active). Every rank runs the same number of
    micro-batches (`filler` pads; required under torchrun), and the loss is normalised over the
    whole step on all ranks, so the gradient is that of one process holding every rank's
    trajectories. Order: log-prob pass (proximal / reference), KL reward (k1_reward), update.
    """
    from paravt.train.distributed import all_reduce_sum

    loss_cfg = recipe.loss
    temperature = recipe.rollout.temperature or 1.0
    chunk = recipe.model.logprob_chunk_tokens
    world = backend.world_size
    mbs = _micro_batches(seqs, loss_cfg.micro_batch_size, filler, world)
    backend.model.train()
    t0 = time.perf_counter()
    logprob_pass(backend, ref_model, mbs, recipe, pad_id=pad_id, image_id=image_id, device=device)
    t_logprob = time.perf_counter() - t0
    kl_in_reward = loss_cfg.kl_form == "k1_reward" and ref_model is not None
    if kl_in_reward and loss_cfg.kl_coef > 0:
        add_kl_reward(seqs, loss_cfg.kl_coef)
    (global_norm,) = all_reduce_sum([step_normaliser(loss_cfg.aggregation, [s.mask for s in seqs])])
    norm = max(global_norm, 1.0) / backend.grad_average_ranks
    sums = {k: 0.0 for k in ("pg", "kl", "clip_fraction", "ratio", "tokens", "behav", "masked")}
    loss_total = 0.0
    module = backend.forward_module()
    use_ref = ref_model is not None and loss_cfg.kl_coef > 0
    for k, mb in enumerate(mbs):
        batch = collate(mb, pad_id=pad_id, image_token_id=image_id, device=device)
        mask = batch["mask"].clone()
        mask[:, 0] = 0.0  # the first token has no prediction
        lp = token_logprobs(module, batch, temperature=temperature, mask=mask, chunk=chunk)
        parts = ppo_loss(
            lp,
            batch["old_logprobs"],
            batch["advantages"],
            mask,
            ref_logp=batch["ref_logprobs"] if use_ref else None,
            clip_eps=loss_cfg.clip_eps,
            clip_eps_high=loss_cfg.clip_eps_high,
            kl_coef=loss_cfg.kl_coef,
            aggregation=loss_cfg.aggregation,
            norm=norm,
            prox_logp=batch["prox_logprobs"] if loss_cfg.decoupled else None,
            behav_imp_weight_cap=loss_cfg.behav_imp_weight_cap,
            kl_form=loss_cfg.kl_form,
        )
        backend.backward(parts.loss, last=k == len(mbs) - 1)
        loss_total += float(parts.loss.detach())
        w = parts.tokens
        sums["pg"] += parts.pg * w
        sums["kl"] += parts.kl * w
        sums["clip_fraction"] += parts.clip_fraction * w
        sums["ratio"] += parts.ratio_mean * w
        sums["behav"] += parts.behav_weight_mean * w
        sums["masked"] += parts.behav_masked_fraction * w
        sums["tokens"] += w
    grad_norm = backend.step()
    tok = sums["tokens"] or 1.0
    return {
        "loss": loss_total,
        "loss/pg": sums["pg"] / tok,
        "loss/normaliser": global_norm,
        "kl": sums["kl"] / tok,
        "clip_fraction": sums["clip_fraction"] / tok,
        "ratio_mean": sums["ratio"] / tok,
        "behav_weight_mean": sums["behav"] / tok,
        "behav_masked_fraction": sums["masked"] / tok,
        "grad_norm": grad_norm,
        "tokens/trained": sums["tokens"],
        "trajectories/trained": float(len(seqs)),
        "micro_batches": float(len(mbs)),
        "time/logprob_s": t_logprob,
    }


# --------------------------------------------------------------------------------------------------
# Engines


class WeightSyncError(RuntimeError):
    """The rollout servers do not hold the weights the trainer pushed, even after a second push
    (the message names the server, the expected and the served weight version)."""


class PolicyEngine:
    """The rollout engine of a run and how it follows the policy's weights.

    The seam for other engines: `_build` makes the engine, `sync` pushes weights after each
    optimiser step through `_push(bucket)`.

    - hf, one process or DeepSpeed ZeRO-2: `HFEngine` holding the policy module itself (shared
      weights: every optimiser step is seen by the next rollout; nothing to sync);
    - hf under FSDP2 / ZeRO-3: `HFEngine` on an unsharded inference replica (generation cannot
      run on the sharded module: ranks generate different numbers of tokens), refreshed bucket by
      bucket after each step;
    - sglang_server: `paravt.core.engines.sglang_server.SGLangServerEngine` over SGLang servers
      (`rollout.server.urls`); after every optimiser step trainer rank 0 pushes the weights (from
      disk: safetensors shards written bucket by bucket, then `/update_weights_from_disk`; or over
      an NCCL group), every rank waits at a barrier and then expects the new weight version.

    Weights travel as `Backend.iter_full_state` buckets: gathered one tensor at a time, at most
    `WEIGHT_BUCKET_BYTES` at once, never the whole model gathered on one GPU.
    """

    WEIGHT_BUCKET_BYTES = 256 << 20

    def __init__(
        self,
        recipe: RLRecipe,
        backend: Backend,
        processor: Any,
        model_path: Any,
        device: torch.device,
        *,
        step: int = 0,
    ) -> None:
        self.kind = recipe.rollout.engine
        self.served = self.kind in ("sglang_server", "vllm_server")
        self.max_staleness = recipe.rollout.max_staleness
        self.backend = backend
        self.replica: Any = None
        self.step = step
        self.model_path = Path(model_path)
        self.device = device
        self.engine = self._build(recipe, processor, model_path, device)
        if self.served:
            self._sync_server()  # the servers start from the policy (also after a resume)

    def _build(
        self, recipe: RLRecipe, processor: Any, model_path: Any, device: torch.device
    ) -> Any:
        if self.kind == "vllm_server":
            from paravt.core.engines.vllm_server import VLLMServerEngine

            spec = recipe.rollout.server
            self.server = spec
            self.weight_dir = Path(spec.weight_dir or Path(recipe.output_dir) / "rollout_weights")
            vllm_engine = VLLMServerEngine(
                spec.urls,
                processor,
                weight_urls=spec.weight_urls,
                timeout_s=spec.timeout_s,
                max_in_flight=spec.max_in_flight,
                retries=spec.retries,
            )
            vllm_engine.health()  # every rank: fail fast, naming the servers that do not answer
            if _is_rank0():
                vllm_engine.check_logprobs_mode()  # the ratio needs the sampled distribution's
            return vllm_engine
        if self.kind == "sglang_server":
            from paravt.core.engines.sglang_server import SGLangServerEngine

            spec = recipe.rollout.server
            self.server = spec
            # asynchronous: a reply may come from the max_staleness versions before the last push,
            # or from the one being pushed (announced in _sync_server before the push)
            stale_versions = self.max_staleness + 1 if self.max_staleness else 0
            self.weight_dir = Path(spec.weight_dir or Path(recipe.output_dir) / "rollout_weights")
            self.weight_group: Any = None
            engine = SGLangServerEngine(
                spec.urls,
                processor,
                weight_urls=spec.weight_urls,
                timeout_s=spec.timeout_s,
                connect_timeout_s=spec.connect_timeout_s,
                retries=spec.retries,
                backoff_s=spec.backoff_s,
                max_in_flight=spec.max_in_flight,
                stale_versions=stale_versions,
                stall_warn_s=spec.stall_warn_s,
                stall_dead_s=spec.stall_dead_s,
            )
            engine.health()  # every rank: fail fast, naming the servers that do not answer
            return engine
        from paravt.core.engines.hf import HFEngine

        if not self.backend.sharded:
            return HFEngine(self.backend.model, processor)
        from transformers import AutoModelForImageTextToText

        self.replica = AutoModelForImageTextToText.from_pretrained(
            str(model_path), dtype=self.backend.compute_dtype
        ).to(device)
        self.replica.requires_grad_(False).eval()
        self.sync()
        return HFEngine(self.replica, processor)

    def sync(self) -> dict[str, float]:
        """Make the engine generate with the policy's current weights (collective when the
        policy is sharded: every rank calls it)."""
        if self.served:
            self.step += 1
            return self._sync_server()
        if self.replica is None:
            return {}  # the engine holds the policy module itself
        for bucket in self.backend.iter_full_state(bucket_bytes=self.WEIGHT_BUCKET_BYTES):
            self._push(bucket)
        return {}

    def before_update(self) -> None:
        """Colocated rollout servers (`rollout.server.colocate`) give their GPU memory to the
        update; `sync` takes it back before pushing the new weights."""
        if self.kind == "sglang_server" and self.server.colocate and _is_rank0():
            self.engine.release_memory()

    def _sync_server(self) -> dict[str, float]:
        """Push the policy's weights to the servers as version `step-<step>`. With `verify_sync`,
        check that the servers hold them; if not, push once more, and if they still do not, stop
        the run (`WeightSyncError`) rather than train on rollouts of other weights."""
        t0 = time.perf_counter()
        version = f"step-{self.step}"
        self._push_server(version)
        metrics = {"sync/push_s": time.perf_counter() - t0}
        if not self.server.verify_sync:
            return metrics
        diff, problem = self._verify_sync(version)
        if problem:
            log.warning("weight sync: %s; pushing %s again", problem, version)
            self._push_server(version)
            diff, problem = self._verify_sync(version)
            if problem:
                raise WeightSyncError(
                    f"weight sync failed twice: {problem}. The run stops rather than train on "
                    "rollouts of other weights: check the server's log for its weight load (with "
                    f"weight_sync=disk it must read {self.weight_dir} under the same path)"
                )
        metrics["sync/logprob_max_abs_diff"] = diff
        return metrics

    def _push_server(self, version: str) -> None:
        """Every rank gathers the full state bucket by bucket (collective), rank 0 writes or
        broadcasts it and asks the servers to load it as `version`, all ranks meet at a barrier,
        then expect the new version."""
        spec = self.server
        bucket_bytes = self.WEIGHT_BUCKET_BYTES
        if spec.weight_sync == "distributed":
            buckets = self.backend.iter_full_state(bucket_bytes=bucket_bytes, device=self.device)
        else:
            buckets = self.backend.iter_full_state(bucket_bytes=bucket_bytes, device="cpu")
        # Asynchronous training: rollouts are in flight; the servers pause around the load so it
        # does not wait for them (pause_mode 'drain': it does, SGLang's default). Every rank
        # announces the version before rank 0 can push it (the gather below is collective), so a
        # reply generated with it in the meantime is expected.
        pause = spec.pause_mode if self.max_staleness and spec.pause_mode != "drain" else None
        if self.max_staleness:
            self.engine.expected_weight_version = version
        if _is_rank0():
            if spec.colocate:
                self.engine.resume_memory()
            named = (item for bucket in buckets for item in bucket)
            if spec.weight_sync == "distributed":
                if self.weight_group is None:
                    self.weight_group = self.engine.init_weight_update_group(
                        spec.master_address, spec.master_port, server_ranks=spec.server_ranks
                    )
                self.engine.push_weights_distributed(
                    named, version, self.weight_group, bucket_bytes=bucket_bytes, pause=pause
                )
            else:
                configs = [
                    self.model_path / f
                    for f in ("config.json", "generation_config.json")
                    if (self.model_path / f).is_file()
                ]
                target = self.engine.push_weights_from_disk(
                    named, self.weight_dir, version, config_files=configs, pause=pause
                )
                for old in self.weight_dir.iterdir():  # only the version the servers hold stays
                    if old != target and old.name.startswith("step-"):
                        shutil.rmtree(old, ignore_errors=True)
        else:
            for _ in buckets:  # the gather is collective: every rank iterates to the end
                pass
        barrier()
        self.engine.expected_weight_version = version

    def _verify_sync(self, version: str) -> tuple[float, str]:
        """Whether the servers hold the policy's weights as `version`: the largest difference
        between a server's log-probs of a fixed sequence and the policy's own (temperature 1),
        and what is wrong ("" if nothing). Collective: every rank runs the forward pass, rank 0
        asks the servers, and every rank gets the verdict."""
        text = "<|im_start|>user\nWhat colour is the square?<|im_end|>\n<|im_start|>assistant\n"
        ids = self.engine.tokenizer(text, add_special_tokens=False)["input_ids"]
        seq = Sequence_(list(ids), [1] * len(ids), [], [0.0] * len(ids), [0.0] * len(ids))
        batch = collate(
            [seq],
            pad_id=self.engine.pad_token_id,
            image_token_id=self.engine.image_token_id,
            device=self.device,
        )
        with torch.no_grad():
            mine = token_logprobs(self.backend.forward_module(), batch)[0, 1:].float().cpu()
        diff, problem = 0.0, ""
        if _is_rank0():
            diff, problem = self._check_servers(version, list(ids), mine)
        diff, failed = all_reduce_sum([diff, float(bool(problem))])
        if failed and not problem:
            problem = (
                "trainer rank 0 found a rollout server without the pushed weights (see its log)"
            )
        return diff, problem

    def _check_servers(self, version: str, ids: list[int], mine: torch.Tensor) -> tuple[float, str]:
        """Rank 0: every weight URL's served version, then its log-probs of `ids` against `mine`.

        The version is `weight_version` of SGLang's model-info route (its http_server.py builds
        it from `server_args.weight_version`, beside model_path and tokenizer_path), or of
        vLLM's `/weight_info`."""
        from paravt.core.engines.sglang_server import ServerError, StaleWeightsError
        from paravt.core.engines.vllm_server import VLLMServerError

        kind = "vLLM" if self.kind == "vllm_server" else "SGLang"

        tolerance = self.server.verify_sync_tolerance
        worst = 0.0
        try:
            for url, served in self.engine.server_weight_versions().items():
                if served != version:
                    return math.nan, (
                        f"{kind} server {url} serves weight version {served!r}, expected {version!r}"
                    )
            for url in self.engine.weight_urls:
                diff = float((torch.tensor(self.engine.score(ids, url=url)) - mine).abs().max())
                worst = max(worst, diff)
                if diff > tolerance:
                    return worst, (
                        f"{kind} server {url} serves weight version {version!r} as expected, but "
                        f"its log-probs of a fixed sequence differ from the trainer's by up to "
                        f"{diff:.3g} (rollout.server.verify_sync_tolerance={tolerance:g})"
                    )
        except (ServerError, StaleWeightsError, VLLMServerError) as exc:
            return math.nan, str(exc)
        return worst, ""

    def _push(self, bucket: list[tuple[str, torch.Tensor]]) -> None:
        targets = self.replica.state_dict()
        with torch.no_grad():
            for name, tensor in bucket:
                if name in targets:
                    targets[name].copy_(tensor)


def _is_rank0() -> bool:
    import torch.distributed as dist

    return not dist.is_initialized() or dist.get_rank() == 0


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
    from paravt.train.modeling import ensure_model

    out = Path(recipe.output_dir)
    device = pick_device(recipe.distributed.device)
    rank, world = init_distributed(recipe.distributed, device)
    seed_everything(recipe.seed + rank)

    init_path = ensure_model(recipe.model)
    ckpt = latest_checkpoint(out) if resume else None
    compute_dtype = pick_dtype(recipe.model, device)
    master = torch.float32 if recipe.distributed.strategy == "fsdp2" else compute_dtype
    model, processor = load_model_and_processor(recipe.model, device, path=ckpt, dtype=master)
    backend = Backend(
        model, recipe.distributed, recipe.optim, recipe.max_steps, compute_dtype=compute_dtype
    )
    ref_model = None
    if recipe.loss.kl_coef > 0:  # the frozen reference is the initial policy, also on resume
        ref_model, _ = load_model_and_processor(
            recipe.model.model_copy(update={"gradient_checkpointing": False}),
            device,
            path=init_path,
            dtype=compute_dtype,
        )
        ref_model = shard_like_policy(ref_model, recipe.distributed, compute_dtype).eval()
    start, order_state = 0, None
    if ckpt is not None:
        state = load_checkpoint(ckpt, backend)
        start, order_state = int(state["step"]), state["data"]
        truncate_metrics(out / "metrics.jsonl", start)
        log.info("resumed from %s at step %d", ckpt, start)
    elif rank == 0 and (out / "metrics.jsonl").exists():
        (out / "metrics.jsonl").unlink()

    policy = PolicyEngine(recipe, backend, processor, ckpt or init_path, device, step=start)
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
            data_state = data_state_after(step)
            if recipe.checkpoint.every_steps and step % recipe.checkpoint.every_steps == 0:
                save_checkpoint(
                    out,
                    step,
                    backend,
                    processor,
                    data_state=data_state,
                    keep_last=recipe.checkpoint.keep_last,
                )
    except Exception as exc:
        if rank == 0:
            log.error("RL stopped in step %d: %s. %s", step, exc, resume_hint(out, recipe))
        raise
    finally:
        if producer is not None:
            producer.close()
        logger.close()
    final = out / "final"
    if recipe.checkpoint.save_final:
        save_final(final, backend, processor)
        save_trained_protocol(final, recipe)  # agent_protocol.json: how this model was trained
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
