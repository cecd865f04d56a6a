"""Scoring: rewards per episode, group advantages (over all ranks), the steps without a learning
signal, reward earned by invalid calls, and the training sequences (main and sub-agent
trajectories) with their metrics."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import torch

from paravt.rewards import (
    AdvantageConfig,
    advantage_scales,
    anchor_advantages,
    anchor_fractions,
    anchor_token_parts,
    episode_structure,
    group_advantages,
    score_episode,
    shape_rewards,
)
from paravt.train.modeling import (
    Sequence_,
)
from paravt.train.process_group import all_gather_floats
from paravt.train.recipe import AdvantageSpec, RLRecipe
from paravt.train.rl.rollouts import (
    Rollouts,
)

log = logging.getLogger("paravt.train")


def score_rollouts(ro: Rollouts, reward_config: Any, recipe: RLRecipe) -> None:
    """Rewards (paravt-rewards) and group-normalised advantages, in place."""

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
        reward_clip=a.reward_clip,
        batch_norm=a.batch_norm,
    )
    totals = [r.total for r in ro.rewards]
    ro.anchor_fractions = [1.0] * len(totals)
    if token_parts(recipe.advantage, reward_config):
        # The anchor term enters the advantage in the advantage's own units: the advantages are
        # computed on reward + anchor total (as sequence-level anchoring would), and
        # `training_sequences` moves the anchor's share onto the tokens that earned it, each
        # part against the group's mean of that part. Adding the raw anchor reward times
        # reward_scaling to advantages already normalised per group and batch (the earlier
        # form) put +2.0 on every `</think>` of every step, with no baseline: about twice a
        # typical advantage, whatever the group did.
        anchor_totals = [
            sum(
                p.value
                for t in ep.turns
                for p in _anchor_parts(
                    t.parsed, [], reward_config, recipe.advantage, charges_only=_unparsed(r)
                )
            )
            for ep, r in zip(ro.episodes, ro.rewards)
        ]
        # How much of each anchor total reached the shaped reward: with the released shaping
        # (scaling 10, bias -0.2, clip 20) a right answer with a call sits at the clip, and its
        # parts, counted at full value in the group's means, would push every rollout below the
        # clip up on every token (`paravt.rewards.anchor_fractions`).
        ro.anchor_fractions = anchor_fractions(totals, anchor_totals, config)
        totals = [x + t for x, t in zip(totals, anchor_totals)]
    ro.advantage_totals = totals
    ro.at_clip = [abs(s) >= config.reward_clip for s in shape_rewards(totals, config)]
    ro.advantages, ro.anchor_scales = global_advantages_and_scales(
        totals, recipe.rollout.group_size, config
    )


CALL_PARTS = frozenset({"tool_calls", "broken_calls", "format_issues"})
ALL_PARTS = frozenset({"close_think", "flow", "unclosed_think", *CALL_PARTS})


def token_parts(advantage: AdvantageSpec, reward_config: Any) -> frozenset[str] | None:
    """Which anchor parts go on their tokens: all of them with token-level anchoring; with
    sequence anchoring and `anchor_tool_calls` / `anchor_format_issues`, only the parts the
    reference's scalar has not (+0.3 on the tags of a well-formed call, -0.3 on those of a broken
    one, -0.3 on the spans of the parser's other issues, times lambda_anchor), the rest staying
    in the scalar as the reference has it; None: none."""
    if advantage.token_level_anchoring:
        return ALL_PARTS
    extra = reward_config.anchor_tool_calls or reward_config.anchor_format_issues
    if extra and reward_config.lambda_anchor > 0:
        return CALL_PARTS
    return None


def _anchor_parts(
    parsed: Any,
    offsets: Sequence[tuple[int, int]],
    reward_config: Any,
    advantage: AdvantageSpec,
    *,
    charges_only: bool,
) -> Any:
    names = token_parts(advantage, reward_config) or frozenset()
    # (names: paravt.rewards.anchoring.AnchorPart.name)
    parts = anchor_token_parts(
        parsed,
        offsets,
        lambda_anchor=reward_config.lambda_anchor,
        min_think_chars=reward_config.min_think_chars,
        tool_calls=reward_config.anchor_tool_calls,
        format_issues=reward_config.anchor_format_issues,
        charges_only=charges_only,
    )
    return [p for p in parts if p.name in names]


def _unparsed(reward: Any) -> bool:
    """The episode's format earned nothing (`RewardConfig.format_credit="parses"` and a
    structure that does not parse): it is paid no anchor credit but keeps its charges (a broken
    call's tags, a format issue, an unclosed think). Such an episode is the one the charges are
    for; dropping them too (the form before) left the token that broke the format
    (`<think>\n<answer>B</answer>`: the `<answer>`) with its outcome credit, pushed up whenever
    the answer beat its group."""
    return "format_not_parsed" in reward.flags


def global_advantages_and_scales(
    totals: list[float], group_size: int, config: Any
) -> tuple[list[float], list[float]]:
    """This rank's advantages, normalised over the global batch, and their `advantage_scales`
    (shaped-reward units -> advantage units, the group's rate also at the clip: token-level
    anchoring's `anchor_fractions` carry the clip), from one gather (collective: every rank calls
    it once a step, whatever its number of episodes).

    Every rank holds whole groups, so the rewards of all ranks in rank order are the step's
    batch as one process would hold it: group statistics are unchanged, and batch normalisation
    (`advantage.batch_norm`) uses the mean and std over all ranks' episodes, as the reference's
    global-batch normalisation does."""

    gathered = all_gather_floats(totals)
    everything = [x for rank_totals in gathered for x in rank_totals]
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    offset = sum(len(g) for g in gathered[:rank])
    mine = slice(offset, offset + len(totals))
    advantages = group_advantages(everything, group_size, config=config)
    scales = advantage_scales(everything, group_size, config=config, at_clip="group")
    return advantages[mine], scales[mine]


def global_group_advantages(totals: list[float], group_size: int, config: Any) -> list[float]:
    """This rank's advantages, normalised over the global batch (collective; see
    `global_advantages_and_scales`)."""
    return global_advantages_and_scales(totals, group_size, config)[0]


def zero_groups_frac(totals: Sequence[float], group_size: int) -> float:
    """The share of groups (consecutive `group_size` rollouts) whose rewards are all equal: their
    outcome advantages are zero, so the step learns nothing from them."""
    groups = [totals[i : i + group_size] for i in range(0, len(totals), group_size)]
    if not groups:
        return 0.0
    return sum(max(g) - min(g) < 1e-9 for g in groups) / len(groups)


def _turn_offsets(engine: Any, ids: Sequence[int], prefix: str) -> list[tuple[int, int]]:
    """Character span of each generated token in `prefix + text` (tokens decoded one by one)."""
    spans, pos = [], len(prefix)
    for t in ids:
        piece = engine.decode([t])
        spans.append((pos, pos + len(piece)))
        pos += len(piece)
    return spans


def _episode_anchor_parts(
    ep: Any, reward: Any, engine: Any, prefix: str, reward_config: Any, advantage: AdvantageSpec
) -> list[Any]:
    """The anchor parts of every turn of `ep` (scored `reward`: its charges only when its format
    earned nothing, `_unparsed`), their tokens as indices of the main trajectory."""
    main = ep.main
    # generated runs of the main trajectory are the turns, in order
    runs, start = [], None
    for i, m in enumerate([*main.loss_mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    parts = []
    for (s, e), turn in zip(runs, ep.turns):
        offsets = _turn_offsets(engine, main.token_ids[s:e], prefix)
        parts_of_turn = _anchor_parts(
            turn.parsed, offsets, reward_config, advantage, charges_only=_unparsed(reward)
        )
        for part in parts_of_turn:
            parts.append((part.name, part.value, [s + i for i in part.tokens]))
    return parts


def cut_turn(ep: Any) -> bool:
    """Some turn of `ep` stopped at its token limit (finish reason 'length'), not by itself."""
    return any(t.finish_reason == "length" for t in ep.turns)


def training_sequences(
    ro: Rollouts,
    engine: Any,
    reward_config: Any,
    advantage: AdvantageSpec,
    *,
    group_size: int,
    think_prefix: bool,
    include_subagents: bool,
) -> list[Sequence_]:
    """Main (and, with `include_subagents`, sub-agent) trajectories with their per-token
    advantages (`advantage`: the recipe's section; `group_size` and `think_prefix`: the
    rollout's; `include_subagents`: `loss.include_subagents_in_loss`)."""

    seqs: list[Sequence_] = []
    prefix = "<think>\n" if think_prefix else ""
    token_anchoring = token_parts(advantage, reward_config) is not None
    if token_anchoring:
        parts = [
            _episode_anchor_parts(ep, r, engine, prefix, reward_config, advantage)
            for ep, r in zip(ro.episodes, ro.rewards)
        ]
        credits, shares = anchor_advantages(
            parts, ro.anchor_scales, group_size, fractions=ro.anchor_fractions
        )
        charged = [{i for _, value, toks in ps if value < 0 for i in toks} for ps in parts]
    for n, (ep, adv) in enumerate(zip(ro.episodes, ro.advantages)):
        main = ep.main
        if token_anchoring:
            # the outcome's share on every token, each anchor part's credit on its own tokens
            advs = [adv - shares[n]] * len(main.token_ids)
            if advantage.no_credit_on_issues:
                for i in charged[n]:  # a charged token is never pushed up by its episode
                    advs[i] = min(advs[i], 0.0)
            for i, c in credits[n].items():
                advs[i] += c
        else:
            advs = [adv] * len(main.token_ids)
        seqs.append(Sequence_(main.token_ids, main.loss_mask, main.media, main.logprobs, advs))
        if include_subagents:
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
            "truncated_rate": mean([float(ep.truncated) for ep in eps]),
            # any turn cut, not only the last: a calling turn cut mid-call still gets its answer
            "cut_turn_rate": mean([float(cut_turn(ep)) for ep in eps]),
        }
    )
    # one format measure for every arm, and the tool prior's leaks (paravt.rewards.structure)
    shapes = [episode_structure([t.parsed for t in ep.turns]) for ep in eps]
    out.update(
        {
            "format_ok": mean([float(s.parses) for s in shapes]),
            "leak_rate": mean([float(s.prior_leak) for s in shapes]),
            "leak/tool_code": mean([float(s.tool_code) for s in shapes]),
            "leak/untagged_answer": mean([float(s.untagged_answer) for s in shapes]),
        }
    )
    # kappa per overview budget: a selective policy calls more where the overview shows less
    for k in sorted(set(ro.budgets)):
        at_k = [float(ep.num_tool_calls) for ep, b in zip(eps, ro.budgets) if b == k]
        out[f"kappa/k{k}"] = mean(at_k)
    return out
