"""The shared ParaVT episode of the framework integrations, over a framework-style callback."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from paravt.core.agent_config import AgentConfig, SamplingParams
from paravt.train.integrations.agent import (
    CallbackEngine,
    RowTask,
    episode_samples,
    run_paravt_episode,
    score_row_episode,
)

CALL = '<tool_call>{{"name": "crop_video", "arguments": {{"start_time": {}, "end_time": {}}}}}</tool_call>'


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> str:
    from paravt.tools.synth import SynthConfig, plan_video, write_video

    path = tmp_path_factory.mktemp("video") / "v.mp4"
    write_video(plan_video(SynthConfig(duration_s=20.0), seed=0, index=0), path)
    return str(path)


@pytest.fixture(scope="module")
def processor(tiny_model_path: Path) -> Any:
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny_model_path)


def test_a_framework_callback_runs_the_whole_episode(video: str, processor: Any) -> None:
    """Turn 1 calls crop_video twice; the framework's callback is asked for the main turns and
    the two sub-agents (with the cropped frames), the tool responses are masked out."""
    tok = processor.tokenizer
    replies = {
        "main1": "I crop two windows." + "</think>" + CALL.format(1, 5) + CALL.format(10, 15),
        "main2": "Both seen.</think><answer>B</answer>",
    }
    seen: list[tuple[int, int]] = []  # (prompt length, images)

    async def generate_fn(
        prompt_ids: list[int], images: list[Any], sampling: SamplingParams
    ) -> tuple[list[int], list[float] | None]:
        seen.append((len(prompt_ids), len(images)))
        text = tok.decode(prompt_ids)
        turns = text.count("<|im_start|>assistant")
        if "Overview" in text:
            reply = replies["main1"] if turns == 1 else replies["main2"]
        else:
            reply = "A red square at 3 s."
        ids = tok(reply, add_special_tokens=False)["input_ids"]
        ids = [*ids, tok.convert_tokens_to_ids("<|im_end|>"), 0, 0]  # padding after eos is cut
        return ids, [-0.5] * len(ids)

    engine = CallbackEngine(processor, generate_fn)
    row = RowTask.from_row(
        {
            "video": video,
            "question": "Which colour?",
            "answer": "B",
            "question_type": "mcq",
            "options": ["A. red", "B. green"],
        }
    )
    config = AgentConfig(max_turns=3, max_parallel=2)
    episode = asyncio.run(run_paravt_episode(row, engine, overview_frames=4, config=config))

    assert [t.num_calls for t in episode.turns] == [2, 0]
    assert episode.tool_responses_ok == 2 and len(episode.subagents) == 2
    assert episode.answer == "B"
    assert len(seen) == 4 and seen[0][1] == 4  # overview frames went to the callback
    samples = episode_samples(episode)
    assert [s.role for s in samples] == ["main", "subagent", "subagent"]
    main = samples[0]
    assert len(main.response_ids) == len(main.response_mask) == len(main.response_logprobs)
    # generated tokens are trained on; the tool responses between the turns are not
    assert main.response_mask[0] == 1 and 0 in main.response_mask and main.response_mask[-1] == 1
    generated = [t for t, m in zip(main.response_ids, main.response_mask) if m]
    assert tok.decode(generated).count("<tool_call>") == 2
    assert all(s.images for s in samples[1:])  # the sub-agents saw the cropped frames
    reward = score_row_episode(episode, row)
    assert reward.accuracy == 1.0 and reward.tool > 0


def test_a_row_without_its_video_is_named() -> None:
    with pytest.raises(KeyError, match="video"):
        RowTask.from_row({"question": "q", "answer": "A"})
    row = RowTask.from_row(
        {"extra_info": {"video": "v.mp4", "question": "q", "answer": "x", "question_type": "tvg"}}
    )
    assert row.answer_kind == "grounding"
