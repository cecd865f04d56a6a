"""Credit for evidence: what a policy can earn with a tool call that brought nothing.

The released reward pays R_tool (0.1, +0.5 with a right answer) and the think-before-call bonus
for any call with a tool name, valid or not, and charges nothing for an invalid one: on a GPU a
policy learnt to make nothing but invalid calls while its reward rose. Under every preset a
right (or wrong) answer after an invalid call must never score above the same answer with no
call, and a call that ran must score above an invalid one.
"""

from __future__ import annotations

import pytest

from paravt.core import AgentConfig, AgentTask, Episode, Message, run_episodes_sync
from paravt.core.runtime import Trajectory
from paravt.core.testing import ScriptedEngine, StaticToolbox
from paravt.rewards import PRESETS, RewardConfig, score, score_episode

OURS = ("paragrpo", "vanilla")
THINK = "I check the clip first."
CALLS = {
    "valid": '<tool_call>{"name": "crop_video", "arguments": {"start_time": 10, "end_time": 20}}'
    "</tool_call>",
    # the window the `prior` task's policy learnt: start = end
    "empty_window": '<tool_call>{"name": "crop_video", "arguments": {"start_time": 8.0, '
    '"end_time": 8.0}}</tool_call>',
    "unknown_tool": '<tool_call>{"name": "zoom", "arguments": {"t": 3}}</tool_call>',
    "bad_json": "<tool_call>{name: crop_video, start 10}</tool_call>",
    "empty_block": "<tool_call></tool_call>",
    "reversed_window": '<tool_call>{"name": "crop_video", "arguments": {"start_time": 20, '
    '"end_time": 10}}</tool_call>',
}
INVALID = [k for k in CALLS if k != "valid"]
# (The prior's leaked `<tool_code>crop_video(...)</tool_code>` envelope is not here: the parser
# reads it as a valid call and the runtime runs it, so it brings evidence; `format_ok` and the
# leak rate count it as a format failure.)
ANSWERS = {"right": "B", "wrong": "C"}


def episode(first: str, final: str, toolbox: StaticToolbox | None = None) -> Episode:
    """A two-turn episode from the real runtime (the call turn, then the answer turn)."""

    def respond(traj: Trajectory) -> str:
        if traj.role == "subagent":
            return "<answer>A red square at 12 s.</answer>"
        turns = sum(1 for m in traj.messages if m.role == "assistant")
        return first if turns == 0 else final

    task = AgentTask("k", [Message("user", "Which colour?")], toolbox or StaticToolbox(), "Which?")
    (ep,) = run_episodes_sync([task], ScriptedEngine(respond), AgentConfig())
    return ep


@pytest.mark.parametrize("preset", OURS)
@pytest.mark.parametrize("answer", ANSWERS)
@pytest.mark.parametrize("call", INVALID)
def test_an_invalid_call_in_an_episode_never_beats_no_call(
    preset: str, answer: str, call: str
) -> None:
    config = RewardConfig.preset(preset)
    final = f"{THINK}</think><answer>{ANSWERS[answer]}</answer>"
    with_call = score_episode(episode(f"{THINK}</think>{CALLS[call]}", final), "B", "mcq", config)
    without = score_episode(episode(final, "unused"), "B", "mcq", config)
    assert with_call.tool == 0.0 and with_call.invalid_calls >= 1
    assert with_call.total < without.total, (with_call, without)
    valid = score_episode(episode(f"{THINK}</think>{CALLS['valid']}", final), "B", "mcq", config)
    assert valid.tool_responses == 1 and valid.total > with_call.total


@pytest.mark.parametrize("preset", OURS)
@pytest.mark.parametrize("answer", ANSWERS)
@pytest.mark.parametrize("call", INVALID)
def test_an_invalid_call_in_a_transcript_never_beats_no_call(
    preset: str, answer: str, call: str
) -> None:
    """Text mode (verl, OpenRLHF, AReaL, TRL transcripts): a tool response in the text does not
    make an invalid call count as evidence."""
    config = RewardConfig.preset(preset)
    response = "<tool_response>Error: invalid call.</tool_response>"
    end = f"<think>{THINK}</think><answer>{ANSWERS[answer]}</answer>"
    with_call = score(f"<think>{THINK}</think>{CALLS[call]}{response}{end}", "B", "mcq", config)
    without = score(end, "B", "mcq", config)
    assert with_call.tool == 0.0
    assert with_call.total <= without.total - config.gamma + 1e-9, (with_call, without)
    valid = score(f"<think>{THINK}</think>{CALLS['valid']}{response}{end}", "B", "mcq", config)
    assert valid.total > with_call.total


@pytest.mark.parametrize("preset", OURS)
def test_a_call_whose_tool_failed_brings_no_evidence(preset: str) -> None:
    config = RewardConfig.preset(preset)
    box = StaticToolbox(duration_s=60, fail_starts=frozenset({10.0}))
    final = f"{THINK}</think><answer>B</answer>"
    failed = score_episode(
        episode(f"{THINK}</think>{CALLS['valid']}", final, box), "B", "mcq", config
    )
    without = score_episode(episode(final, "unused"), "B", "mcq", config)
    assert (failed.tool, failed.tool_responses, failed.penalty) == (0.0, 0, 1.0)
    assert failed.total == pytest.approx(without.total - config.gamma)


@pytest.mark.parametrize("preset", OURS)
def test_one_valid_call_beside_an_invalid_one_still_pays_but_is_charged(preset: str) -> None:
    config = RewardConfig.preset(preset)
    final = f"{THINK}</think><answer>B</answer>"
    both = episode(f"{THINK}</think>{CALLS['valid']}{CALLS['empty_window']}", final)
    clean = episode(f"{THINK}</think>{CALLS['valid']}", final)
    r_both, r_clean = (score_episode(e, "B", "mcq", config) for e in (both, clean))
    assert r_both.tool == r_clean.tool == pytest.approx(0.8)
    assert (r_both.call_attempts, r_both.invalid_calls) == (2, 1)
    assert r_both.total <= r_clean.total - config.gamma * 0.5 + 1e-9


@pytest.mark.parametrize("unit", ["fraction", "call"])
def test_a_call_cut_after_two_valid_ones_costs_what_the_penalty_unit_says(unit: str) -> None:
    """The miniature's hole after evidence credit: two crops, then a third `<tool_call>` cut by
    the turn's token limit. Under penalty_unit "fraction" (the paper's P) the two valid calls
    dilute the charge to gamma/3; under "call" the cut call costs gamma whatever came before.
    (The released format rule, so that the penalty is the only difference: under the presets'
    `format_credit="parses"` the cut call also loses the episode's R_fmt.)"""
    config = RewardConfig.paragrpo(penalty_unit=unit, gamma=0.3, format_credit="tags")
    final = f"{THINK}</think><answer>B</answer>"
    two = f"{THINK}</think>{CALLS['valid']}{CALLS['valid'].replace('10', '30').replace('20', '40')}"
    cut = score_episode(episode(two + '<tool_call>{"name": "crop', final), "B", "mcq", config)
    clean = score_episode(episode(two, final), "B", "mcq", config)
    assert (cut.call_attempts, cut.invalid_calls, cut.tool_responses) == (3, 1, 2)
    charge = 0.3 if unit == "call" else 0.1
    assert clean.total - cut.total == pytest.approx(charge)
    many = score_episode(episode(f"{THINK}</think>" + CALLS["bad_json"] * 7, final), "B", "mcq",
                         config)  # fmt: skip
    # each invalid call is charged, up to max_calls_per_turn of them
    assert many.penalty == (5.0 if unit == "call" else 1.0)


def test_the_released_form_is_the_hole_and_stays_reachable_by_name() -> None:
    """What the reference pays, kept bit-identical under `reference_paragrpo()`: an invalid call
    with a right answer scores above the same answer with no call."""
    config = RewardConfig.preset("reference_paragrpo")
    final = f"{THINK}</think><answer>B</answer>"
    bad = score_episode(
        episode(f"{THINK}</think>{CALLS['empty_window']}", final), "B", "mcq", config
    )
    none = score_episode(episode(final, "unused"), "B", "mcq", config)
    assert bad.tool == pytest.approx(0.6) and bad.total > none.total
    assert set(PRESETS) == {"paragrpo", "vanilla", "reference_paragrpo", "reference_vanilla"}


@pytest.mark.parametrize("preset", OURS)
def test_format_credit_for_a_parsing_structure_pays_no_tag_spam(preset: str) -> None:
    """Under the released format rule ("tags") '<think>' spam with one closed answer earns R_fmt
    in full (seen in a probe: a policy charged gamma 1.0 for its calls learnt exactly this); the
    presets' `format_credit="parses"` pays format only for a structure that parses, and leaves a
    clean completion's score as the released rule's."""
    spam = (
        "<think>\n<think>\n<think>\n<answer>green</answer>\n<think>\n<answer>B</answer>\n</think>"
    )
    gated = RewardConfig.preset(preset)
    assert gated.format_credit == "parses"
    tags = RewardConfig.preset(preset, format_credit="tags")
    ours = score(spam, "B", "mcq", gated)
    released = score(spam, "B", "mcq", tags)
    assert released.format >= 0.6
    assert ours.format == 0.0 and "format_not_parsed" in ours.flags
    clean = f"<think>{THINK}</think><answer>B</answer>"
    plain = score(clean, "B", "mcq", tags)
    assert score(clean, "B", "mcq", gated).total == plain.total > ours.total
    assert score(clean + "<|im_end|>", "B", "mcq", gated).format == plain.format
