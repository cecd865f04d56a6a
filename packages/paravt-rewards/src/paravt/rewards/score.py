"""`score`: one completion (or agent episode) -> `RewardBreakdown` with every component and flag."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from paravt.core import Episode, IssueKind, ParsedResponse, parse_response
from paravt.rewards.accuracy import (
    Options,
    as_text,
    mcq_accuracy,
    normalize_text,
    temporal_iou,
    token_f1,
    token_f1_normalized,
)
from paravt.rewards.anchoring import anchor_token_rewards, shift_offsets
from paravt.rewards.config import AccuracyMode, RewardConfig
from paravt.rewards.judge import JudgeOutcome, LLMJudge, judge_for
from paravt.rewards.structure import episode_structure
from paravt.rewards.terms import (
    answer_text,
    degenerate_reason,
    evidence_call,
    format_terms,
    invalid_calls,
    parseable_call,
    penalty_fraction,
    strip_chat_tokens,
    tool_reward,
)

_DEFAULT = RewardConfig()


@dataclass(slots=True)
class RewardBreakdown:
    """The total reward and every part of it, ready to log (`components()`)."""

    total: float
    accuracy: float = 0.0
    format: float = 0.0  # R_fmt in [0, 1]; includes lambda*R_anchor in the sequence form
    base_format: float = 0.0  # R_base_fmt in [0, 1]
    anchor: float = 0.0  # R_anchor in [-0.3, 0.7], before lambda_anchor
    tool: float = 0.0  # R_tool in [0, 1] (0 when the tool reward is off)
    penalty: float = 0.0  # what gamma multiplies: the invalid fraction of call attempts in [0, 1]
    # (penalty_unit "fraction"), or the number of invalid calls (penalty_unit "call")
    call_attempts: int = 0
    invalid_calls: int = 0
    tool_responses: int = 0
    answer: str | None = None
    accuracy_mode: AccuracyMode = "f1"
    judge: JudgeOutcome | None = None  # set when the LLM judge was asked
    degenerate: str | None = None  # 'chat_token_spam' / 'runaway_repetition' when guarded
    flags: list[str] = field(default_factory=list)
    token_rewards: list[float] | None = None  # token-level anchoring, when offsets were given

    def components(self) -> dict[str, float]:
        """Flat float metrics for a logger (flags become 0/1 values)."""
        out = {
            "reward/total": self.total,
            "reward/accuracy": self.accuracy,
            "reward/format": self.format,
            "reward/base_format": self.base_format,
            "reward/anchor": self.anchor,
            "reward/tool": self.tool,
            "reward/penalty": self.penalty,
            "tool/call_attempts": float(self.call_attempts),
            "tool/invalid_calls": float(self.invalid_calls),
            "tool/responses": float(self.tool_responses),
            "flag/degenerate": float(self.degenerate is not None),
            "flag/judge_unavailable": float(self.judge == "unavailable"),
        }
        return out


def _accuracy(
    answer: str | None,
    ground_truth: str,
    mode: AccuracyMode,
    config: RewardConfig,
    *,
    options: Options,
    question: str,
    judge: LLMJudge | None,
    flags: list[str],
) -> tuple[float, JudgeOutcome | None]:
    if not answer or not ground_truth.strip():
        return 0.0, None
    # normalised once: the exact-match shortcut and token F1 share it. A window's text loses its
    # decimal points to the normalisation ('[5.0, 12.0]' reads '50 120'), so only the released
    # form (grounding_shortcut) lets the shortcut grade one; ours grades a window by its IoU.
    shortcut = config.exact_match_shortcut and (mode != "temporal_iou" or config.grounding_shortcut)
    norm_answer = norm_truth = None
    if shortcut or mode in ("exact", "f1"):
        norm_answer, norm_truth = normalize_text(answer), normalize_text(ground_truth)
        if norm_answer and norm_answer == norm_truth:
            return 1.0, None
    if mode == "mcq":
        return mcq_accuracy(answer, ground_truth, options, config.mcq_letters), None
    if mode == "temporal_iou":
        return temporal_iou(answer, ground_truth), None
    if mode == "exact":
        return 0.0, None
    if mode == "llm":
        if judge is None:
            if config.judge is None:
                flags.append("judge_not_configured")
                return token_f1(answer, ground_truth), "unavailable"
            judge = judge_for(config.judge)
        result = judge.judge(question, answer, ground_truth)
        if result.score is None:
            flags.append("judge_unavailable")  # graded by token F1 instead, never silently 0
            return token_f1(answer, ground_truth), "unavailable"
        return result.score, result.outcome
    if norm_answer is None or norm_truth is None:
        return token_f1(answer, ground_truth), None
    return token_f1_normalized(norm_answer, norm_truth), None


def _compose(
    *,
    fmt_parsed: ParsedResponse,
    answer: str | None,
    ground_truth: Any,
    question_type: str | None,
    config: RewardConfig,
    parseable: bool,
    evidence: bool,
    parses: bool,
    responses: int,
    invalid: int,
    attempts: int,
    options: Options,
    question: str,
    judge: LLMJudge | None,
) -> RewardBreakdown:
    flags: list[str] = []
    mode = config.accuracy_mode(question_type)
    breakdown = RewardBreakdown(
        0.0,
        answer=answer,
        accuracy_mode=mode,
        flags=flags,
        call_attempts=attempts,
        invalid_calls=invalid,
        tool_responses=responses,
    )
    text = fmt_parsed.text
    if (
        config.degenerate_guard and len(text) < config.chat_spam_max_chars
    ) or config.repetition_guard:
        degenerate = degenerate_reason(
            text,
            guard=config.degenerate_guard,
            spam_min_tokens=config.chat_spam_min_tokens,
            spam_max_chars=config.chat_spam_max_chars,
            repetition=config.repetition_guard,
            repetition_min_chars=config.repetition_min_chars,
        )
        if degenerate is not None:
            breakdown.degenerate = degenerate
            flags.append(degenerate)
            return breakdown
    for issue in fmt_parsed.issues:
        if issue.kind is IssueKind.MODEL_TOOL_RESPONSE:
            if "model_tool_response" not in flags:
                flags.append("model_tool_response")  # the model wrote a tool response itself
        elif issue.kind is IssueKind.TOO_MANY_TAGS:
            flags.append("too_many_tags")
    acc, breakdown.judge = _accuracy(
        answer,
        ground_truth if type(ground_truth) is str else as_text(ground_truth),
        mode,
        config,
        options=options,
        question=question,
        judge=judge,
        flags=flags,
    )
    # which calls earn the tool reward and the think-before-call bonus (RewardConfig.tool_credit):
    # the released code pays any call with a tool name, so a policy can earn reward with calls
    # that bring no evidence; under "evidence" only a call that ran does
    credited = evidence if config.tool_credit == "evidence" else parseable
    terms = format_terms(
        fmt_parsed,
        answer_suffix=config.answer_suffix,
        min_think_chars=config.min_think_chars,
        think_before_tool_bonus=config.think_before_tool_bonus,
        balanced_tags_bonus=config.balanced_tags_bonus,
        parseable=credited,
    )
    anchor = terms.anchor if config.lambda_anchor > 0 else 0.0
    base = terms.base
    if config.format_credit == "parses" and not parses:
        # the released rule pays each tag whatever the rest is ('<think>' spam with one closed
        # answer earns R_fmt 1, a turn cut off inside a third call keeps its credit); here
        # format credit needs a structure that parses in ParaVT's format; the anchor keeps its
        # charge (an unclosed think), which the token form places on its token
        base = 0.0
        anchor = min(anchor, 0.0)
        flags.append("format_not_parsed")
    fmt = base
    if config.anchoring == "sequence":
        fmt = min(1.0, max(0.0, base + config.lambda_anchor * anchor))
    responded = evidence if config.tool_credit == "evidence" else responses > 0
    tool = tool_reward(credited, responded, acc) if config.tool_reward else 0.0
    if config.penalty_unit == "call":
        penalty = float(min(invalid, config.max_calls_per_turn))
    else:
        penalty = penalty_fraction(invalid, attempts)
    total = (
        config.accuracy_weight * acc
        + config.format_weight * fmt
        + config.tool_weight * tool
        - config.gamma * penalty
    )
    # rounded so that 0.2 + 0.5 + 0.1 logs as 0.8 (the terms are sums of tenths); 0 and 1 are
    # common and exact, and round() is not free at 30k scores a second
    breakdown.accuracy = acc if acc == 0.0 or acc == 1.0 else round(acc, 10)
    breakdown.format = round(fmt, 10) if fmt else 0.0
    breakdown.base_format = round(base, 10) if base else 0.0
    breakdown.anchor = round(anchor, 10) if anchor else 0.0
    breakdown.tool = round(tool, 10) if tool else 0.0
    breakdown.penalty = round(penalty, 10) if penalty else 0.0
    breakdown.total = round(total, 10) if total else 0.0
    return breakdown


def _parses(turns: Sequence[ParsedResponse]) -> bool:
    """Whether the turns' structure parses in ParaVT's format (`episode_structure`), reading past
    chat special tokens (`<|im_end|>` ...) that a framework's decoding left in the text: they are
    the template's, not text the model wrote outside the tags."""
    if any("<|" in t.text for t in turns):
        turns = [
            parse_response(strip_chat_tokens(t.text), transcript=t.transcript)
            if "<|" in t.text
            else t
            for t in turns
        ]
    return episode_structure(turns).parses


def score(
    completion: str | ParsedResponse,
    ground_truth: Any,
    question_type: str | None = None,
    config: RewardConfig | None = None,
    *,
    options: Options = None,
    question: str = "",
    token_offsets: Sequence[tuple[int, int]] | None = None,
    tool_responses: int | None = None,
    judge: LLMJudge | None = None,
) -> RewardBreakdown:
    """Score one completion against its ground truth.

    In: the completion text (or an already parsed response), the ground truth (a string such as
    `"B"`, `"[12.0, 30.5]"`, or a `[start, end]` pair), the question type (`mcq`, `tvg`, `oe`...,
    mapped to an accuracy mode by `config.accuracy_modes`), the config (default: PARA-GRPO).
    `options` lets an MCQ answer name an option by its text; `question` feeds the LLM judge;
    `token_offsets` (one character span per completion token) adds the token-level anchoring
    vector `token_rewards`.

    Tool responses: with `tool_responses=None` the completion is read as a multi-turn transcript
    (what verl, AReaL, OpenRLHF and TRL's tool loop pass) and its `<tool_response>` blocks are the
    environment's replies, counted as tool responses. With `tool_responses=N` (a single model
    turn: pass how many tool responses came back) any `<tool_response>` block in the text was
    written by the model: it is flagged `model_tool_response` and earns nothing. Either way no
    tool block (`tool_call`, `tool_code`, `tool_response`) is ever graded as the answer.
    Out: a `RewardBreakdown`. Never raises on model output.
    """
    config = config or _DEFAULT
    prefix = config.completion_prefix
    transcript = tool_responses is None
    if isinstance(completion, ParsedResponse):
        parsed = (
            parse_response(prefix + completion.text, transcript=completion.transcript)
            if prefix
            else completion
        )
    else:
        text = completion if isinstance(completion, str) else ""
        parsed = parse_response(prefix + text if prefix else text, transcript=transcript)
    responses = parsed.num_tool_responses if tool_responses is None else max(0, tool_responses)
    invalid, attempts = invalid_calls(parsed, config.max_calls_per_turn)
    out = _compose(
        fmt_parsed=parsed,
        answer=answer_text(parsed, config.answer_fallback),
        ground_truth=ground_truth,
        question_type=question_type,
        config=config,
        parseable=parseable_call(parsed),
        evidence=evidence_call(parsed, responses),
        parses=config.format_credit == "tags" or _parses([parsed]),
        responses=responses,
        invalid=invalid,
        attempts=attempts,
        options=options,
        question=question,
        judge=judge,
    )
    if token_offsets is not None:
        offsets = shift_offsets(token_offsets, len(prefix)) if prefix else list(token_offsets)
        if out.degenerate is not None or config.anchoring == "sequence":
            out.token_rewards = [0.0] * len(offsets)
        else:
            # a structure that does not parse earns no anchor credit, but keeps its charges
            out.token_rewards = anchor_token_rewards(
                parsed,
                offsets,
                lambda_anchor=config.lambda_anchor,
                min_think_chars=config.min_think_chars,
                tool_calls=config.anchor_tool_calls,
                charges_only="format_not_parsed" in out.flags,
            )
    return out


def score_episode(
    episode: Episode,
    ground_truth: Any,
    question_type: str | None = None,
    config: RewardConfig | None = None,
    *,
    options: Options = None,
    question: str = "",
    judge: LLMJudge | None = None,
) -> RewardBreakdown:
    """Score a whole agent `Episode` (paravt.core.runtime) the way the reference scores a
    multi-turn completion.

    - accuracy: the final turn's answer (`episode.final`);
    - format and anchoring: the main agent's turns joined into one transcript, parsed once;
    - tool: under `tool_credit="evidence"` (the presets) an executed call that returned
      without an error (`episode.tool_responses_ok > 0`); under "parseable" (the released form)
      a parseable call in any turn, and "a tool response came back" means
      `episode.tool_responses_ok > 0`;
    - penalty: call attempts that were not executed or failed, over all attempts.
    Out: a `RewardBreakdown` (sequence-level; for token-level anchoring call
    `anchor_token_rewards` on each turn's parsed response with that turn's token offsets).
    """
    config = config or _DEFAULT
    if not episode.turns:
        return RewardBreakdown(total=0.0, flags=["empty_episode"])
    # turn.response already starts with the think prefix the runtime appended
    transcript = parse_response("\n".join(t.response for t in episode.turns))
    attempts = sum(len(t.calls) for t in episode.turns)
    invalid = sum(1 for t in episode.turns for c in t.calls if not c.executed or c.error)
    final = episode.final
    return _compose(
        fmt_parsed=transcript,
        answer=answer_text(final, config.answer_fallback),
        ground_truth=ground_truth,
        question_type=question_type,
        config=config,
        parseable=any(parseable_call(t.parsed) for t in episode.turns),
        evidence=episode.tool_responses_ok > 0,
        parses=config.format_credit == "tags" or _parses([t.parsed for t in episode.turns]),
        responses=episode.tool_responses_ok,
        invalid=invalid,
        attempts=attempts,
        options=options,
        question=question,
        judge=judge,
    )
