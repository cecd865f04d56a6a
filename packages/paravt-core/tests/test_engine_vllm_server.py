"""VLLMServerEngine without a server (the real one is in integrations/with_vllm): what it sends,
how it reads replies, and the checks that refuse a server the trainer cannot use."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from paravt.core.engines.vllm_server import VLLMServerEngine, VLLMServerError
from paravt.core.protocol import Message
from paravt.core.runtime import SamplingParams, Trajectory


@pytest.fixture(scope="module")
def processor(tiny_model_path: Path) -> Any:
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny_model_path)


class ChatServer:
    """Answers chat completions with `ids` and their log-probs; records the bodies."""

    def __init__(self, ids: list[int], prompt_ids: list[int] | None = None) -> None:
        self.ids, self.prompt_ids, self.bodies = ids, prompt_ids, []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        entries = [{"token": f"token_id:{t}", "logprob": -0.5} for t in self.ids]
        choice = {
            "message": {"role": "assistant", "content": "x"},
            "finish_reason": "stop",
            "token_ids": self.ids,
            "logprobs": {"content": entries},
        }
        return httpx.Response(200, json={"choices": [choice], "prompt_token_ids": self.prompt_ids})


def engine_with(processor: Any, server: ChatServer) -> VLLMServerEngine:
    return VLLMServerEngine(
        "http://vllm:8000", processor, model="m", transport=httpx.MockTransport(server)
    )


def trajectory(engine: VLLMServerEngine) -> Trajectory:
    messages = [Message("user", "What colour is the square?")]
    encoded = engine.encode_prompt(messages, assistant_prefix="<think>\n")
    return Trajectory(
        "main", token_ids=list(encoded.token_ids), messages=messages, assistant_prefix="<think>\n"
    )


def test_a_turn_asks_for_token_ids_and_log_probs_and_stops_at_the_end_of_turn(processor):
    eos = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    server = ChatServer([11, 12, eos, 13, 14])
    engine = engine_with(processor, server)
    traj = trajectory(engine)
    server.prompt_ids = list(traj.token_ids)
    (out,) = asyncio.run(engine.generate([traj], SamplingParams(max_new_tokens=5, temperature=0.7)))
    (body,) = server.bodies
    assert body["return_token_ids"] is True and body["logprobs"] is True
    assert body["skip_special_tokens"] is False and body["model"] == "m"
    assert body["continue_final_message"] is True  # the think prefix is continued
    assert body["messages"][-1] == {"role": "assistant", "content": "<think>\n"}
    assert out.token_ids == [11, 12, eos] and out.logprobs == [-0.5, -0.5, -0.5]
    assert out.finish_reason == "stop"
    assert engine.prompt_token_mismatches == 0


def test_a_prompt_the_server_tokenized_differently_is_counted(processor, caplog):
    server = ChatServer([11], prompt_ids=[1, 2, 3])
    engine = engine_with(processor, server)
    asyncio.run(engine.generate([trajectory(engine)], SamplingParams(max_new_tokens=1)))
    assert engine.prompt_token_mismatches == 1
    assert "tokenized a prompt" in caplog.text


def test_a_reply_without_token_ids_is_an_error_naming_the_fix(processor):
    def no_ids(request: httpx.Request) -> httpx.Response:
        choice = {"message": {"content": "x"}, "finish_reason": "stop"}
        return httpx.Response(200, json={"choices": [choice]})

    engine = VLLMServerEngine(
        "http://vllm:8000", processor, model="m", transport=httpx.MockTransport(no_ids)
    )
    with pytest.raises(VLLMServerError, match="return_token_ids"):
        asyncio.run(engine.generate([trajectory(engine)], SamplingParams(max_new_tokens=1)))


@pytest.mark.parametrize(
    ("mode", "sampled_shift", "refused"),
    [("raw_logprobs", 0.0, True), ("processed_logprobs", -0.3, False)],
)
def test_a_server_returning_temperature_1_log_probs_is_refused(
    processor, monkeypatch, mode, sampled_shift, refused
):
    """vLLM's default mode returns the sampled tokens' log-probs at temperature 1, equal to its
    prompt log-probs of the same tokens; processed mode returns those of the sampling temperature."""
    engine = VLLMServerEngine("http://vllm:8000", processor, model="m")
    raw = [-1.2, -0.7, -2.0, -0.4]
    server = engine.servers["http://vllm:8000"]

    def fake_request(method: str, path: str, **kwargs: Any) -> Any:
        assert path == "/v1/completions"
        body = kwargs["json"]
        if body.get("prompt_logprobs") == 0:  # the probe: prompt log-probs, temperature 1
            ids = body["prompt"]
            lps = [None] + [{str(t): {"logprob": -9.0}} for t in ids[1:]]
            for k, lp in enumerate(raw):
                lps[len(ids) - len(raw) + k] = {str(ids[len(ids) - len(raw) + k]): {"logprob": lp}}
            return {"choices": [{"prompt_logprobs": lps}]}
        assert body["temperature"] == 0.5 and body["logprobs"] == 0
        sampled = [lp + sampled_shift for lp in raw]
        ids = [100 + k for k in range(len(raw))]
        return {"choices": [{"token_ids": ids, "logprobs": {"token_logprobs": sampled}}]}

    monkeypatch.setattr(server, "_request", fake_request)
    if refused:
        with pytest.raises(VLLMServerError, match="--logprobs-mode processed_logprobs"):
            engine.check_logprobs_mode(tokens=len(raw))
    else:
        assert math.isclose(engine.check_logprobs_mode(tokens=len(raw)), 0.3, abs_tol=1e-9)


def test_requests_in_flight_stay_within_max_in_flight(processor):
    state = {"now": 0, "most": 0}
    reply = ChatServer([11])

    async def slow(request: httpx.Request) -> httpx.Response:
        state["now"] += 1
        state["most"] = max(state["most"], state["now"])
        await asyncio.sleep(0.05)
        state["now"] -= 1
        return reply(request)

    engine = VLLMServerEngine(
        "http://vllm:8000",
        processor,
        model="m",
        max_in_flight=2,
        transport=httpx.MockTransport(slow),
    )
    trajs = [trajectory(engine) for _ in range(6)]
    outs = asyncio.run(engine.generate(trajs, SamplingParams(max_new_tokens=1)))
    assert len(outs) == 6 and state["most"] == 2
