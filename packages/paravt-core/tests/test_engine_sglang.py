"""SGLangEngine through a stand-in for `sglang.Engine` that records every call (no GPU here)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from paravt.core import (
    AgentConfig,
    AgentTask,
    Frame,
    ImagePart,
    Message,
    SamplingParams,
    TextPart,
    Trajectory,
    build_main_prompt,
    run_episodes,
)
from paravt.core.engines.sglang import SGLangEngine
from paravt.core.testing import StaticToolbox


class StandInSGLang:
    """Records `async_generate` and `update_weights_from_tensor` calls; answers `respond(ids)`."""

    def __init__(self, respond: Any) -> None:
        self.respond = respond
        self.generate_calls: list[dict[str, Any]] = []
        self.weight_calls: list[dict[str, Any]] = []

    async def async_generate(self, **kwargs: Any) -> list[dict[str, Any]]:
        self.generate_calls.append(kwargs)
        outs = []
        for ids in kwargs["input_ids"]:
            out_ids, reason = self.respond(ids)
            outs.append(
                {
                    "text": "(server text is not used)",
                    "meta_info": {
                        "output_token_logprobs": [(-0.5, t, None) for t in out_ids],
                        "finish_reason": {"type": reason},
                    },
                }
            )
        return outs

    def update_weights_from_tensor(self, **kwargs: Any) -> tuple[bool, str]:
        self.weight_calls.append(kwargs)
        return True, "Success"


@pytest.fixture
def processor(tiny_model_path: Path) -> Any:
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny_model_path)


def frame(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (64, 64, 3), dtype=np.uint8)


def test_one_async_generate_call_gets_collapsed_image_tokens_raw_frames_and_sampling(
    processor: Any,
) -> None:
    tok = processor.tokenizer
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    answer = tok("<answer>B</answer>", add_special_tokens=False)["input_ids"]
    stand_in = StandInSGLang(lambda ids: ([*answer, eot, 7, 7], "stop"))
    engine = SGLangEngine(stand_in, processor, eos_token_ids=[eot])
    images = [frame(0), frame(1)]
    messages = [
        Message("system", "S"),
        Message("user", [ImagePart(images[0]), TextPart("x"), ImagePart(images[1]), TextPart("Q")]),
    ]
    with_images = Trajectory("main")
    with_images.add_prompt(engine.encode_prompt(messages), messages)
    text_only = Trajectory("main")
    text_only.add_prompt(engine.encode_prompt([Message("user", "Q")]), [Message("user", "Q")])
    assert with_images.token_ids.count(engine.image_token_id) == 8  # 64x64: 4 tokens each

    sampling = SamplingParams(max_new_tokens=9, temperature=0.7, top_p=0.8, top_k=5)
    outs = asyncio.run(engine.generate([with_images, text_only], sampling))

    (call,) = stand_in.generate_calls
    assert call["return_logprob"] is True
    assert call["sampling_params"] == {
        "max_new_tokens": 9,
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 5,
        "skip_special_tokens": False,
    }
    sent = call["input_ids"][0]
    assert sent.count(engine.image_token_id) == 2  # one pad per image: SGLang expands them
    assert [t for t in sent if t != engine.image_token_id] == [
        t for t in with_images.token_ids if t != engine.image_token_id
    ]
    assert call["input_ids"][1] == text_only.token_ids
    sent_images = call["image_data"]
    assert [len(x) for x in sent_images] == [2, 0]
    for pil, original in zip(sent_images[0], images):
        assert np.array_equal(np.asarray(pil), original)
    for out in outs:  # ids end at the end-of-turn token; text is ours, tags kept
        assert out.token_ids == [*answer, eot]
        assert out.logprobs == [-0.5] * len(out.token_ids)
        assert out.text == "<answer>B</answer>" and out.finish_reason == "stop"


def test_length_and_abort_finish_reasons(processor: Any) -> None:
    stand_in = StandInSGLang(lambda ids: ([5, 6], "length"))
    engine = SGLangEngine(stand_in, processor, eos_token_ids=[2])
    traj = Trajectory("main")
    traj.add_prompt(engine.encode_prompt([Message("user", "Q")]), [Message("user", "Q")])
    (out,) = asyncio.run(engine.generate([traj], SamplingParams(max_new_tokens=2)))
    assert out.finish_reason == "length" and out.token_ids == [5, 6]
    stand_in.respond = lambda ids: ([5], "abort")
    with pytest.raises(RuntimeError, match="aborted"):
        asyncio.run(engine.generate([traj], SamplingParams(max_new_tokens=2)))


def test_the_runtime_drives_the_adapter_through_a_tool_turn(processor: Any) -> None:
    tok = processor.tokenizer
    eot = tok.convert_tokens_to_ids("<|im_end|>")

    def respond(ids: list[int]) -> tuple[list[int], str]:
        text = tok.decode(ids)
        if "You are a helper" in text:
            reply = "<answer>a red square</answer>"
        elif "<|im_start|>user\n<tool_response>" in text:
            reply = "done</think><answer>red</answer>"
        else:
            reply = (
                'look</think><tool_call>{"name": "crop_video", "arguments": '
                '{"start_time": 0, "end_time": 8}}</tool_call>'
            )
        return [*tok(reply, add_special_tokens=False)["input_ids"], eot], "stop"

    stand_in = StandInSGLang(respond)
    engine = SGLangEngine(stand_in, processor, eos_token_ids=[eot])

    class FrameBox(StaticToolbox):
        async def execute(self, calls: Any) -> Any:
            outs = await super().execute(calls)
            for out in outs:
                out.frames = [Frame(frame(int(f.timestamp_s)), f.timestamp_s) for f in out.frames]
            return outs

    task = AgentTask(
        "t",
        build_main_prompt("colour?", [Frame(frame(9), 4.0)], duration_s=30.0),
        FrameBox(duration_s=30.0, fps=0.25),
        "colour?",
    )
    (episode,) = asyncio.run(run_episodes([task], engine, AgentConfig(max_turns=3)))
    assert episode.answer == "red"
    assert len(episode.subagents) == 1 and episode.turns[0].calls[0].summary == "a red square"
    assert len(stand_in.generate_calls) == 3  # main, sub-agent, main
    assert len(stand_in.generate_calls[1]["image_data"][0]) == 2  # the window's frames
    assert sum(episode.main.loss_mask) == sum(t.num_tokens for t in episode.turns)


def test_weight_sync_sends_the_policy_tensors_without_copies_and_flushes_once(
    processor: Any,
) -> None:
    stand_in = StandInSGLang(lambda ids: ([], "stop"))
    engine = SGLangEngine(stand_in, processor, eos_token_ids=[2])
    policy = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
    sent = engine.sync_weights(policy, bucket_bytes=64 * 64 * 4)
    assert sent == 4
    names = [n for call in stand_in.weight_calls for n, _ in call["named_tensors"]]
    assert names == [n for n, _ in policy.named_parameters()]
    assert [c["flush_cache"] for c in stand_in.weight_calls] == [False, True]
    first = stand_in.weight_calls[0]["named_tensors"][0][1]
    assert first.data_ptr() == policy[0].weight.data_ptr()


def test_a_failed_weight_update_is_raised(processor: Any) -> None:
    stand_in = StandInSGLang(lambda ids: ([], "stop"))
    stand_in.update_weights_from_tensor = lambda **kw: (False, "shape mismatch")  # type: ignore[method-assign]
    engine = SGLangEngine(stand_in, processor, eos_token_ids=[2])
    with pytest.raises(RuntimeError, match="shape mismatch"):
        engine.sync_weights([("w", torch.zeros(2))])


def test_without_an_engine_or_model_path_the_adapter_says_what_to_pass() -> None:
    with pytest.raises(ValueError, match="model_path"):
        SGLangEngine()
