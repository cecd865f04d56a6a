"""OpenAIEngine against a real local HTTP server, the shared stand-in (`FakeChatServer`), which
records every request and answers with each test's scripted response."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from PIL import Image

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
from paravt.core.engines.openai import OpenAIEngine, image_data_url
from paravt.core.testing import StaticToolbox
from paravt.core.testing.stand_in import FakeChatServer


def completion(text: str, finish: str = "stop", logprobs: Any = None) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": finish,
    }
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    return {"id": "x", "object": "chat.completion", "choices": [choice]}


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    """Answers "<answer>A</answer>" until a test sets `server.chat.reply`: a function of the
    request body that returns the assistant's text, or the status and the whole response."""
    with FakeChatServer(lambda body: "<answer>A</answer>") as s:
        yield s


def frame(seed: int, h: int = 24, w: int = 40) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def decode_data_url(url: str) -> np.ndarray:
    head, data = url.split(",", 1)
    assert head == "data:image/png;base64"
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(data))))


def trajectory(messages: list[Message], prefix: str = "") -> Trajectory:
    traj = Trajectory("main", assistant_prefix=prefix)
    traj.add_prompt(OpenAIEngine("http://unused/v1", "m").encode_prompt(messages), messages)
    return traj


def test_requests_carry_model_messages_frames_as_data_urls_and_sampling(
    server: FakeChatServer,
) -> None:
    engine = OpenAIEngine(server.base_url, "qwen3-vl", api_key="secret")
    image = frame(0)
    messages = [
        Message("system", "S"),
        Message("user", [TextPart("<1.0 seconds>"), ImagePart(image), TextPart("Q?")]),
    ]
    sampling = SamplingParams(max_new_tokens=33, temperature=0.7, top_p=0.9, top_k=20, seed=5)
    (out,) = asyncio.run(engine.generate([trajectory(messages)], sampling))
    assert out.text == "<answer>A</answer>" and out.finish_reason == "stop"
    (body,) = server.bodies  # served (200) at POST /v1/chat/completions, the only chat route
    assert server.headers[0]["Authorization"] == "Bearer secret"
    assert body["model"] == "qwen3-vl"
    assert (body["max_tokens"], body["temperature"], body["top_p"]) == (33, 0.7, 0.9)
    assert (body["top_k"], body["seed"]) == (20, 5)
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    text, img, question = body["messages"][1]["content"]
    assert text == {"type": "text", "text": "<1.0 seconds>"}
    assert question == {"type": "text", "text": "Q?"}
    assert np.array_equal(decode_data_url(img["image_url"]["url"]), image)  # lossless PNG
    assert "continue_final_message" not in body and "logprobs" not in body


def test_torch_and_chw_frames_encode_to_the_same_png() -> None:
    import torch

    image = frame(1)
    expected = image_data_url(image)
    assert image_data_url(np.ascontiguousarray(image.transpose(2, 0, 1))) == expected
    assert image_data_url(torch.from_numpy(image).permute(2, 0, 1)) == expected
    assert image_data_url(Image.fromarray(image)) == expected
    assert image_data_url(image, fmt="jpeg").startswith("data:image/jpeg;base64,")
    with pytest.raises(TypeError, match="uint8"):
        image_data_url(image.astype(np.float32))


def test_tool_responses_are_grouped_and_the_think_prefix_is_continued(
    server: FakeChatServer,
) -> None:
    engine = OpenAIEngine(server.base_url, "m")
    traj = trajectory([Message("system", "S"), Message("user", "Q")], prefix="<think>\n")
    traj.messages += [
        Message("assistant", "<think>\nlook</think><tool_call>{}</tool_call>"),
        Message("tool", "[0.0 s - 10.0 s] a dog"),
        Message("tool", [TextPart("[20.0 s - 30.0 s] "), ImagePart(frame(2))]),
    ]
    asyncio.run(engine.generate([traj], SamplingParams(max_new_tokens=4)))
    body = server.bodies[0]
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    tool_turn = body["messages"][3]["content"]
    texts = "".join(p.get("text", "<img>") for p in tool_turn)
    assert texts == (
        "<tool_response>\n[0.0 s - 10.0 s] a dog\n</tool_response>\n"
        "<tool_response>\n[20.0 s - 30.0 s] <img>\n</tool_response>"
    )
    assert body["messages"][-1] == {"role": "assistant", "content": "<think>\n"}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False


def test_logprobs_and_token_ids_are_recorded_when_the_server_returns_them(
    server: FakeChatServer,
) -> None:
    entries = [{"token": "token_id:17", "logprob": -0.25}, {"token": "token_id:4", "logprob": -1.5}]
    server.chat.reply = lambda body: (200, completion("hi", finish="length", logprobs=entries))
    engine = OpenAIEngine(server.base_url, "m", logprobs=True)
    traj = trajectory([Message("user", "Q")])
    (out,) = asyncio.run(engine.generate([traj], SamplingParams(max_new_tokens=2)))
    assert server.bodies[0]["logprobs"] is True
    assert server.bodies[0]["return_tokens_as_token_ids"] is True
    assert (out.token_ids, out.logprobs, out.finish_reason) == ([17, 4], [-0.25, -1.5], "length")
    # Without token ids the logprobs cannot be aligned to tokens and are not recorded.
    server.chat.reply = lambda body: (
        200,
        completion("hi", logprobs=[{"token": "hi", "logprob": -1}]),
    )
    (out,) = asyncio.run(engine.generate([traj], SamplingParams(max_new_tokens=2)))
    assert (out.token_ids, out.logprobs) == ([], None)


def test_the_turn_counts_the_servers_completion_tokens_when_no_ids_come_back() -> None:
    engine = OpenAIEngine("http://127.0.0.1:9/v1", "m")
    body = completion("a b c", finish="length")
    body["usage"] = {"prompt_tokens": 40, "completion_tokens": 3, "total_tokens": 43}
    out = engine.parse_choice(body, "u")
    assert (out.token_ids, out.num_tokens) == ([], 3)
    del body["usage"]
    assert engine.parse_choice(body, "u").num_tokens == 0  # nothing counted: nothing claimed
    entries = [{"token": "token_id:5", "logprob": -0.1}]
    with_ids = completion("x", logprobs=entries)
    with_ids["usage"] = {"completion_tokens": 9}
    assert (
        OpenAIEngine("http://127.0.0.1:9/v1", "m", logprobs=True)
        .parse_choice(with_ids, "u")
        .num_tokens
        == 1
    )  # the ids we hold win


def test_a_batch_sends_one_request_per_trajectory_in_order(server: FakeChatServer) -> None:
    server.chat.reply = lambda body: "echo " + body["messages"][-1]["content"]
    engine = OpenAIEngine(server.base_url, "m", max_concurrency=2)
    trajs = [trajectory([Message("user", f"q{i}")]) for i in range(5)]
    outs = asyncio.run(engine.generate(trajs, SamplingParams(max_new_tokens=2)))
    assert [o.text for o in outs] == [f"echo q{i}" for i in range(5)]
    assert len(server.bodies) == 5


def test_server_errors_name_the_url_and_status(server: FakeChatServer) -> None:
    server.chat.reply = lambda body: (500, {"error": "model overloaded"})
    engine = OpenAIEngine(server.base_url, "m")
    with pytest.raises(RuntimeError, match=r"HTTP 500.*model overloaded"):
        asyncio.run(engine.generate([trajectory([Message("user", "Q")])], SamplingParams()))


def test_an_unreachable_server_is_reported_with_the_fix() -> None:
    engine = OpenAIEngine("http://127.0.0.1:9/v1", "m", timeout_s=2)
    with pytest.raises(RuntimeError, match="is the server running"):
        asyncio.run(engine.generate([trajectory([Message("user", "Q")])], SamplingParams()))


def test_the_runtime_runs_a_parallel_tool_episode_through_the_http_engine(
    server: FakeChatServer,
) -> None:
    call = '<tool_call>{"name": "crop_video", "arguments": {"start_time": %d, "end_time": %d}}</tool_call>'

    def reply(body: dict[str, Any]) -> str:
        system = body["messages"][0]["content"]
        if system.startswith("You are a helper"):
            return "<answer>a red square</answer>"
        if len(body["messages"]) == 3:  # system, user, assistant prefix: first main turn
            return "look</think>" + call % (0, 10) + call % (20, 30)
        return "seen</think><answer>red</answer>"

    server.chat.reply = reply

    messages = build_main_prompt("colour?", [Frame(frame(9), 5.0)], duration_s=60.0)
    task = AgentTask(
        "t",
        messages,
        StaticToolbox(duration_s=60.0, fps=0.2, image=lambda t: frame(int(t))),
        "colour?",
    )
    config = AgentConfig(max_turns=3, sampling=SamplingParams(max_new_tokens=64))
    (episode,) = asyncio.run(run_episodes([task], OpenAIEngine(server.base_url, "m"), config))
    assert episode.answer == "red"
    assert episode.num_tool_calls == 2 and len(episode.subagents) == 2
    sub_requests = [
        body
        for body in server.bodies
        if body["messages"][0]["content"].startswith("You are a helper")
    ]
    assert len(sub_requests) == 2
    for body in sub_requests:
        images = [p for p in body["messages"][1]["content"] if p["type"] == "image_url"]
        assert len(images) == 2  # 10 s at 0.2 fps
    last = server.bodies[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user", "assistant"]
    assert "".join(p["text"] for p in last[3]["content"]) == (
        "<tool_response>\n[0.0 s - 10.0 s] 2 frames\na red square\n</tool_response>\n"
        "<tool_response>\n[20.0 s - 30.0 s] 2 frames\na red square\n</tool_response>"
    )


def test_transient_server_errors_are_retried_and_the_last_one_is_raised(server):
    calls = {"n": 0}

    def flaky(body):
        calls["n"] += 1
        return (503, {"error": "busy"}) if calls["n"] < 3 else "<answer>A</answer>"

    server.chat.reply = flaky
    engine = OpenAIEngine(server.base_url, "m", retries=2, retry_backoff_s=0.01)
    traj = trajectory([Message("user", "q")])
    [out] = asyncio.run(engine.generate([traj], SamplingParams()))
    assert out.text == "<answer>A</answer>" and calls["n"] == 3
    calls["n"] = -10  # more failures than retries
    with pytest.raises(RuntimeError, match="HTTP 503"):
        asyncio.run(engine.generate([traj], SamplingParams()))
    server.chat.reply = lambda body: (
        400,
        {"error": "bad request"},
    )  # a client error is not retried
    calls["n"] = 0
    with pytest.raises(RuntimeError, match="HTTP 400"):
        asyncio.run(engine.generate([traj], SamplingParams()))
    assert len(server.bodies) == 3 + 3 + 1


def test_an_image_part_is_encoded_once_across_turns_and_a_new_part_anew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The overview's frames travel on every main-agent turn; each part is encoded on its first
    request only, the later bodies carry the same URL, and another part (or a changed format) is
    encoded for itself."""
    import gc

    import paravt.core.engines.openai as openai_engine

    encoded: list[int] = []
    real = openai_engine.image_data_url

    def counting(image: Any, **kwargs: Any) -> str:
        encoded.append(id(image))
        return real(image, **kwargs)

    monkeypatch.setattr(openai_engine, "image_data_url", counting)
    engine = OpenAIEngine("http://unused/v1", "m")
    a, b = frame(1), frame(2)
    traj = trajectory([Message("user", [ImagePart(a), ImagePart(b), TextPart("Q?")])])
    sampling = SamplingParams(max_new_tokens=8)
    first = engine.request_body(traj, sampling)
    assert len(encoded) == 2
    traj.messages.append(Message("assistant", "<tool_call>...</tool_call>"))
    traj.messages.append(Message("tool", [ImagePart(frame(3)), TextPart("crop")]))
    second = engine.request_body(traj, sampling)
    assert len(encoded) == 3  # only the crop's frame is new
    assert second["messages"][0] == first["messages"][0]
    assert np.array_equal(
        decode_data_url(second["messages"][0]["content"][1]["image_url"]["url"]), b
    )

    # equal pixels in a new part are encoded again: identity, not content, is the key
    again = trajectory([Message("user", [ImagePart(a)])])
    engine.request_body(again, sampling)
    assert len(encoded) == 4
    # a changed format is not served from the PNG entries
    engine.image_format = "jpeg"
    jpeg = engine.request_body(again, sampling)
    assert len(encoded) == 5
    assert jpeg["messages"][0]["content"][0]["image_url"]["url"].startswith("data:image/jpeg")
    # entries leave with their parts
    del traj, again
    gc.collect()
    assert engine._urls == {}
