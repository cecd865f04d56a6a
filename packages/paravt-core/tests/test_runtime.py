"""The agent loop with a scripted engine: dispatch, caps, errors, forced answers, token bookkeeping."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import pytest

from paravt.core import (
    AgentConfig,
    AgentTask,
    CropVideoArgs,
    Frame,
    ToolOutput,
    Trajectory,
    build_main_prompt,
    run_episodes_sync,
)
from paravt.core.testing import END_OF_TURN, ScriptedEngine, StaticToolbox


def call(start: float, end: float) -> str:
    args = {"start_time": start, "end_time": end}
    return "<tool_call>" + json.dumps({"name": "crop_video", "arguments": args}) + "</tool_call>"


def turns_of(traj: Trajectory) -> int:
    return sum(1 for m in traj.messages if m.role == "assistant")


def make_engine(first: str, later: str = "done</think><answer>A</answer>") -> ScriptedEngine:
    def respond(traj: Trajectory) -> str:
        if traj.role == "subagent":
            return "<answer>red square seen</answer>" + END_OF_TURN
        return (first if turns_of(traj) == 0 else later) + END_OF_TURN

    return ScriptedEngine(respond)


def task(key: str = "s0", toolbox: StaticToolbox | None = None) -> AgentTask:
    msgs = build_main_prompt("What colour?", [Frame("ov", 5.0)], duration_s=60.0)
    return AgentTask(key, msgs, toolbox or StaticToolbox(duration_s=60.0), "What colour?")


def test_parallel_dispatch_runs_every_call_of_a_turn_in_one_toolbox_batch() -> None:
    toolbox = StaticToolbox()
    engine = make_engine("look</think>" + call(0, 10) + call(20, 30) + call(40, 50))
    (ep,) = run_episodes_sync([task(toolbox=toolbox)], engine)
    assert [len(batch) for batch in toolbox.calls] == [3]
    assert ep.num_tool_calls == 3 and ep.calls_per_turn == [3, 0]
    assert ep.answer == "A"
    assert len(ep.subagents) == 3
    assert all(c.summary == "red square seen" for c in ep.turns[0].calls)


def test_sequential_dispatch_runs_one_call_and_explains_the_rest() -> None:
    toolbox = StaticToolbox()
    engine = make_engine("look</think>" + call(0, 10) + call(20, 30))
    (ep,) = run_episodes_sync([task(toolbox=toolbox)], engine, AgentConfig(dispatch="sequential"))
    assert [len(b) for b in toolbox.calls] == [1]
    first, second = ep.turns[0].calls
    assert first.executed and not second.executed
    assert "one call per turn" in (second.error or "")
    tool_texts = [m.text for m in ep.main.messages if m.role == "tool"]
    assert any("one call per turn" in t for t in tool_texts)


def test_calls_over_the_cap_get_an_error_response_not_a_silent_drop() -> None:
    engine = make_engine("look</think>" + "".join(call(i, i + 1) for i in range(7)))
    (ep,) = run_episodes_sync([task()], engine, AgentConfig(max_parallel=5))
    calls = ep.turns[0].calls
    assert sum(c.executed for c in calls) == 5
    assert all("at most 5 calls per turn" in (c.error or "") for c in calls[5:])
    assert sum(1 for m in ep.main.messages if m.role == "tool") == 7


def test_one_failing_call_does_not_affect_the_others() -> None:
    toolbox = StaticToolbox(fail_starts=frozenset({20.0}))
    bad_args = '<tool_call>{"name": "crop_video", "arguments": {"start_time": 9}}</tool_call>'
    engine = make_engine("look</think>" + call(0, 10) + call(20, 30) + bad_args + call(70, 80))
    (ep,) = run_episodes_sync([task(toolbox=toolbox)], engine)
    ok, decode_err, arg_err, past_end = ep.turns[0].calls
    assert ok.error is None and ok.summary == "red square seen"
    assert "decode failed" in (decode_err.error or "")
    assert "end_time" in (arg_err.error or "") and not arg_err.executed
    assert "past the end" in (past_end.error or "")
    assert ep.answer == "A"
    assert len(ep.subagents) == 1  # only the call that returned frames is summarised


class SlowToolbox:
    async def execute(self, calls: Sequence[CropVideoArgs]) -> list[ToolOutput]:
        await asyncio.sleep(5)
        return []


class BrokenToolbox:
    async def execute(self, calls: Sequence[CropVideoArgs]) -> list[ToolOutput]:
        raise RuntimeError("decoder exploded")


def test_tool_timeouts_and_exceptions_become_error_responses() -> None:
    engine = make_engine("look</think>" + call(0, 10))
    msgs = build_main_prompt("Q", [], duration_s=60.0)
    slow = AgentTask("slow", msgs, SlowToolbox(), "Q")  # type: ignore[arg-type]
    broken = AgentTask("broken", list(msgs), BrokenToolbox(), "Q")  # type: ignore[arg-type]
    eps = run_episodes_sync([slow, broken], engine, AgentConfig(tool_timeout_s=0.05))
    assert "timed out" in (eps[0].turns[0].calls[0].error or "")
    assert "decoder exploded" in (eps[1].turns[0].calls[0].error or "")
    assert all(ep.answer == "A" for ep in eps)


def test_last_turn_is_told_to_answer_and_its_calls_are_not_run() -> None:
    engine = make_engine("a</think>" + call(0, 10), later="b</think>" + call(10, 20))
    toolbox = StaticToolbox()
    (ep,) = run_episodes_sync([task(toolbox=toolbox)], engine, AgentConfig(max_turns=3))
    assert len(ep.turns) == 3 and ep.forced_answer
    assert [len(b) for b in toolbox.calls] == [1, 1]  # turns 1 and 2 ran, turn 3 did not
    last = ep.turns[-1].calls[0]
    assert not last.executed and "no tool turns left" in (last.error or "")
    assert "final answer now" in ep.main.messages[-2].text


def test_loss_mask_covers_exactly_the_generated_tokens() -> None:
    engine = make_engine("look</think>" + call(0, 10))
    (ep,) = run_episodes_sync([task()], engine)
    main = ep.main
    assert len(main.token_ids) == len(main.loss_mask) == len(main.logprobs)
    generated = "".join(chr(t) for t, m in zip(main.token_ids, main.loss_mask) if m)
    expected = "".join(
        m.text.removeprefix("<think>\n") for m in main.messages if m.role == "assistant"
    )
    assert generated == expected
    assert all(lp == -0.5 for lp, m in zip(main.logprobs, main.loss_mask) if m)
    for sub in ep.subagents:
        gen = "".join(chr(t) for t, m in zip(sub.token_ids, sub.loss_mask) if m)
        assert gen == "<answer>red square seen</answer>" + END_OF_TURN


def test_next_prompt_is_previous_ids_plus_sampled_ids_plus_continuation() -> None:
    engine = make_engine("look</think>" + call(0, 10))
    (ep,) = run_episodes_sync([task()], engine)
    main_batches = [b for b in engine.batches if b[0].role == "main"]
    # the same Trajectory object grew: turn-2 prompt starts with everything turn 1 saw and sampled
    assert len(main_batches) == 2
    text = "".join(chr(t) if t else "\x00" for t in ep.main.token_ids)
    first_turn = "look</think>" + call(0, 10) + END_OF_TURN
    assert first_turn in text
    assert text.index(first_turn) < text.index("[tool]")


def test_think_prefix_is_part_of_the_parsed_response_but_not_of_the_generated_tokens() -> None:
    engine = make_engine("x</think><answer>B</answer>")
    (ep,) = run_episodes_sync([task()], engine)
    assert ep.turns[0].response.startswith("<think>\n")
    assert ep.final.think == "x"
    (ep2,) = run_episodes_sync(
        [task()], make_engine("<answer>B</answer>"), AgentConfig(think_prefix=False)
    )
    assert ep2.final.think is None and ep2.answer == "B"


def test_episode_token_budget_counts_tool_responses_and_ends_an_episode_that_cannot_answer() -> (
    None
):
    """`max_episode_tokens`: a turn generates at most what is left of the budget, tool responses
    are paid from it, and tool responses that do not fit end the episode unanswered (marked)."""
    first = "look</think>" + call(0, 10) + call(20, 30)
    answer = "done</think><answer>A</answer>"
    (free,) = run_episodes_sync([task()], make_engine(first, answer))
    prompt = free.main.loss_mask.index(1)  # the first prompt's tokens
    after_prompt = len(free.main.token_ids) - prompt
    assert free.answer == "A" and not free.truncated and after_prompt > len(first)

    # room for everything: the same episode
    (roomy,) = run_episodes_sync(
        [task()], make_engine(first, answer), AgentConfig(max_episode_tokens=after_prompt)
    )
    assert roomy.answer == "A" and not roomy.truncated
    assert roomy.main.token_ids == free.main.token_ids

    # the answer turn gets only what is left: cut, finish_reason "length"
    (cut,) = run_episodes_sync(
        [task()], make_engine(first, answer), AgentConfig(max_episode_tokens=after_prompt - 10)
    )
    assert cut.turns[-1].finish_reason == "length" and cut.truncated and cut.answer is None
    assert len(cut.main.token_ids) - prompt == after_prompt - 10

    # the tool responses do not fit: the episode ends after the call turn, without an answer
    toolbox = StaticToolbox()
    (ended,) = run_episodes_sync(
        [task(toolbox=toolbox)],
        make_engine(first, answer),
        AgentConfig(max_episode_tokens=len(first) + len(END_OF_TURN) + 5),
    )
    assert ended.budget_exhausted and ended.truncated and len(ended.turns) == 1
    assert ended.num_tool_calls == 2 and [len(b) for b in toolbox.calls] == [2]  # the calls ran
    assert ended.answer is None
    assert len(ended.main.token_ids) - prompt == len(first) + len(END_OF_TURN)  # nothing appended

    # a direct answer fits a budget a calling episode does not
    (direct,) = run_episodes_sync(
        [task()], make_engine(answer), AgentConfig(max_episode_tokens=len(first))
    )
    assert direct.answer == "A" and not direct.truncated


def test_context_budget_counts_the_prompt_so_a_denser_overview_leaves_less_room() -> None:
    """`max_context_tokens` caps the whole main context: the same calls fit after a short prompt
    and not after a long one; a prompt that cannot fit at all is an error naming the episode."""
    first = "look</think>" + call(0, 10) + call(20, 30)
    answer = "done</think><answer>A</answer>"

    def long_task(frames: int) -> AgentTask:
        overview = [Frame("ov", float(i)) for i in range(frames)]
        msgs = build_main_prompt("What colour?", overview, duration_s=60.0)
        return AgentTask(f"k{frames}", msgs, StaticToolbox(duration_s=60.0), "What colour?")

    (short,) = run_episodes_sync([long_task(1)], make_engine(first, answer))
    (dense,) = run_episodes_sync([long_task(8)], make_engine(first, answer))
    grow = len(dense.main.token_ids) - len(short.main.token_ids)  # the 7 extra overview frames
    assert grow > 0
    config = AgentConfig(max_context_tokens=len(short.main.token_ids) + grow // 2)
    (fits,) = run_episodes_sync([long_task(1)], make_engine(first, answer), config)
    (cut,) = run_episodes_sync([long_task(8)], make_engine(first, answer), config)
    assert fits.answer == "A" and not fits.truncated
    assert (
        cut.truncated
        and cut.answer is None
        and len(cut.main.token_ids) <= config.max_context_tokens
    )

    with pytest.raises(ValueError, match=r"episode 'k8'.*max_context_tokens=10"):
        run_episodes_sync([long_task(8)], make_engine(first), AgentConfig(max_context_tokens=10))


def test_frames_mode_returns_frames_to_the_main_context_without_subagents() -> None:
    engine = make_engine("look</think>" + call(0, 4))
    (ep,) = run_episodes_sync([task()], engine, AgentConfig(tool_response="frames"))
    assert ep.subagents == []
    tool_msgs = [m for m in ep.main.messages if m.role == "tool"]
    assert len(tool_msgs[0].images) == 4
    assert len(ep.main.media) == 1 + 4  # overview frame + the crop's frames


def test_a_batch_of_episodes_shares_generation_batches() -> None:
    engine = make_engine("look</think>" + call(0, 10) + call(10, 20))
    eps = run_episodes_sync([task(f"s{i}") for i in range(4)], engine)
    sizes = [len(b) for b in engine.batches]
    assert sizes == [4, 8, 4]  # main turn 1, all 8 sub-agents together, main turn 2
    assert [e.key for e in eps] == ["s0", "s1", "s2", "s3"]


def test_agent_config_rejects_unknown_keys_and_bad_values() -> None:
    with pytest.raises(ValueError, match="max_turn"):
        AgentConfig.model_validate({"max_turn": 3})
    with pytest.raises(ValueError):
        AgentConfig(dispatch="random")  # type: ignore[arg-type]


def test_turn_records_serialise_to_json_with_calls_issues_and_timings() -> None:
    engine = make_engine("look</think>" + call(0, 10) + "<tool_call>{}</tool_call>")
    (ep,) = run_episodes_sync([task()], engine)
    data = json.loads(json.dumps([t.to_dict() for t in ep.turns]))
    first = data[0]
    assert first["think"] == "look" and first["answer"] is None
    assert [c["window_s"] for c in first["calls"]] == [[0.0, 10.0], None]
    assert first["calls"][0]["summary"] == "red square seen"
    assert {"kind": "invalid_call", "message": first["issues"][0]["message"]} == first["issues"][0]
    assert set(first["timings_s"]) == {"generate", "tools", "subagents"}
    assert data[1]["answer"] == "A"


@pytest.mark.parametrize("mode", ["run", "skip"])
def test_the_calls_of_a_turn_its_token_limit_cut_run_only_under_run(mode: str) -> None:
    """`cut_turn_calls`: two whole calls, then a third the turn's limit cuts. 'run' (the released
    driver's way) runs the two; 'skip' runs none, and each call's tool response says why."""
    from paravt.core import SamplingParams

    first = "look</think>" + call(0, 10) + call(20, 30) + '<tool_call>{"na'
    toolbox = StaticToolbox()
    config = AgentConfig(
        cut_turn_calls=mode, sampling=SamplingParams(max_new_tokens=len(first) - 3)
    )
    (ep,) = run_episodes_sync([task(toolbox=toolbox)], make_engine(first + "me"), config)
    cut = ep.turns[0]
    assert cut.finish_reason == "length" and len(cut.calls) == 3
    assert ep.answer == "A"  # the episode goes on to its answer either way
    if mode == "run":
        assert ep.num_tool_calls == 2 and [len(b) for b in toolbox.calls] == [2]
        assert ep.tool_responses_ok == 2
    else:
        assert ep.num_tool_calls == 0 and toolbox.calls == [] and ep.tool_responses_ok == 0
        assert all("cut by its token limit" in (c.error or "") for c in cut.calls)
        tool_texts = [m.text for m in ep.main.messages if m.role == "tool"]
        assert len(tool_texts) == 3 and all("cut by its token limit" in t for t in tool_texts)


def test_cut_turn_calls_default_is_the_released_drivers() -> None:
    assert AgentConfig().cut_turn_calls == "run"
