"""End to end: the agent runtime with the tiny Qwen3-VL, real frames and both modes of each knob.

A random model never writes a tool call, so the first main turn is scripted (tokenized by the real
tokenizer); the second main turn and every sub-agent are real generations of the model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from paravt.core import (
    THINK_PREFIX,
    AgentConfig,
    AgentTask,
    CropVideoArgs,
    Episode,
    Frame,
    SamplingParams,
    ToolOutput,
    Trajectory,
    build_main_prompt,
    run_episodes,
)
from paravt.core.engines.hf import HFEngine
from paravt.core.engines.scripted import ScriptedTurns
from paravt.core.testing import StaticToolbox

FIRST_TURN = (
    "The overview is not enough, I look at two windows.</think>\n"
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 0, "end_time": 10, '
    '"num_frames": 2}}</tool_call>\n'
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 20, "end_time": 30, '
    '"num_frames": 2}}</tool_call>'
)


def frame_image(t: float) -> np.ndarray:
    """A 32x32 RGB frame whose colour encodes its timestamp."""
    image = np.zeros((32, 32, 3), dtype=np.uint8)
    image[..., 0] = int(t * 7) % 256
    image[8:24, 8:24, 1] = 200
    return image


@dataclass
class FrameToolbox:
    """StaticToolbox's windows, with real uint8 frames instead of placeholders."""

    inner: StaticToolbox = field(default_factory=lambda: StaticToolbox(duration_s=60.0))

    async def execute(self, calls: Sequence[CropVideoArgs]) -> list[ToolOutput]:
        outputs = await self.inner.execute(calls)
        for out in outputs:
            out.frames = [Frame(frame_image(f.timestamp_s), f.timestamp_s) for f in out.frames]
        return outputs


def make_task(key: str, question: str) -> AgentTask:
    overview = [Frame(frame_image(t), t) for t in (5.0, 35.0)]
    messages = build_main_prompt(question, overview, duration_s=60.0, max_turns=2)
    return AgentTask(key, messages, FrameToolbox(), question)


def mask_runs(traj: Trajectory) -> list[list[int]]:
    """The token ids of each contiguous run of loss_mask == 1."""
    runs: list[list[int]] = []
    previous = 0
    for tid, m in zip(traj.token_ids, traj.loss_mask):
        if m and not previous:
            runs.append([])
        if m:
            runs[-1].append(tid)
        previous = m
    return runs


def run(engine: HFEngine, dispatch: str, tool_response: str) -> tuple[list[Episode], ScriptedTurns]:
    scripted = ScriptedTurns(engine, {1: FIRST_TURN})
    config = AgentConfig(
        max_turns=2,
        dispatch=dispatch,  # type: ignore[arg-type]
        tool_response=tool_response,  # type: ignore[arg-type]
        sampling=SamplingParams(max_new_tokens=8, temperature=0.7, seed=0),
        subagent_sampling=SamplingParams(max_new_tokens=6, temperature=0.7, seed=1),
    )
    tasks = [make_task("a", "What colour is the square?"), make_task("b", "When does it move?")]
    return asyncio.run(run_episodes(tasks, scripted, config)), scripted


@pytest.mark.parametrize("tool_response", ["subagent", "frames"])
@pytest.mark.parametrize("dispatch", ["parallel", "sequential"])
def test_two_turn_episodes_record_exactly_what_was_generated(
    hf_engine: HFEngine, dispatch: str, tool_response: str
) -> None:
    episodes, scripted = run(hf_engine, dispatch, tool_response)
    executed = 2 if dispatch == "parallel" else 1
    assert [turn for turn, _ in scripted.scripted] == [1, 1]  # one scripted turn per episode
    tokenizer = hf_engine.tokenizer
    for ep in episodes:
        main = ep.main
        assert len(ep.turns) == 2 and ep.forced_answer
        assert ep.turns[0].num_calls == 2 and ep.turns[0].num_executed == executed
        assert ep.num_tool_errors == 2 - executed
        assert len(main.token_ids) == len(main.loss_mask) == len(main.logprobs)

        # The loss mask covers exactly the generated tokens, turn by turn.
        runs = mask_runs(main)
        assert len(runs) == 2
        assert sum(main.loss_mask) == sum(t.num_tokens for t in ep.turns)
        for ids, turn in zip(runs, ep.turns):
            assert len(ids) == turn.num_tokens
            text = tokenizer.decode(
                ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
            )
            assert THINK_PREFIX + text == turn.response
        assert ep.turns[0].response == THINK_PREFIX + FIRST_TURN
        # The second turn is the model's own sample, with real logprobs.
        second = [lp for lp, m in zip(main.logprobs, main.loss_mask) if m][-len(runs[1]) :]
        assert all(lp < 0 for lp in second)

        # Token in, token out: the ids are the prompt, the generations as sampled and the
        # continuation, each tokenized once ...
        second_start = len(main.token_ids) - len(runs[1])
        assistant = [i for i, m in enumerate(main.messages) if m.role == "assistant"]
        first_gen = scripted.scripted[episodes.index(ep)][1]
        pieces = (
            hf_engine.encode_prompt(
                main.messages[: assistant[0]], assistant_prefix=THINK_PREFIX
            ).token_ids
            + first_gen.token_ids
            + hf_engine.encode_continuation(
                main.messages[assistant[0] + 1 : assistant[1]],
                previous=first_gen,
                assistant_prefix=THINK_PREFIX,
            ).token_ids
            + runs[1]
        )
        assert main.token_ids == pieces
        # ... and, for the scripted (canonically tokenized) turn, a fresh encode of the whole
        # conversation so far gives the very same ids and images.
        fresh = hf_engine.encode_prompt(
            main.messages[: assistant[1]], assistant_prefix=THINK_PREFIX
        )
        assert fresh.token_ids == main.token_ids[:second_start]
        assert len(fresh.media) == len(main.media)
        for a, b in zip(fresh.media, main.media):
            assert torch.equal(a.pixel_values, b.pixel_values)

        # Sub-agents exist in subagent mode (one per executed call), never in frames mode.
        if tool_response == "subagent":
            assert len(ep.subagents) == executed
            assert len(main.media) == 2  # the overview only: summaries come back as text
            for sub, call in zip(ep.subagents, [c for c in ep.turns[0].calls if c.executed]):
                assert sub.role == "subagent" and sub.turn == 1 and sub.call_index == call.index
                assert len(sub.media) == 2  # the window's two frames
                (gen,) = mask_runs(sub)
                assert 1 <= len(gen) <= 6 and sub.token_ids[-len(gen) :] == gen
                assert call.summary is not None
        else:
            assert ep.subagents == []
            assert len(main.media) == 2 + 2 * executed  # overview + the frames of each window
            pad = hf_engine.image_token_id
            assert main.token_ids.count(pad) == len(main.media)  # 32x32 frames: one token each
