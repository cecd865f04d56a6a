"""VLLMServerEngine without a server (the real one is in integrations/with_vllm): what it sends,
how it reads replies, the checks that refuse a server the trainer cannot use, and how it knows
which weights produced each reply (its `ReloadGate`: no request at a server across a reload)."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from paravt.core.engines.vllm_server import VLLMServerEngine, VLLMServerError
from paravt.core.engines.weights import ReloadGate
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


# ------------------------------------------------------------------ which weights produced a reply


class FakeVLLM:
    """A vLLM server whose replies say which weight version was served when each request started
    and when it ended (token ids 100 + k and 200 + k, k the version's index), with the weight
    routes a reload uses. A chat request takes `seconds`."""

    def __init__(self, seconds: float = 0.05) -> None:
        self.versions = ["default"]
        self.seconds = seconds
        self.active = 0
        self.active_at_pause: list[int] = []
        self.fail_reload = False

    @property
    def k(self) -> int:
        return len(self.versions) - 1

    async def chat(self, request: httpx.Request) -> httpx.Response:
        self.active += 1
        start = self.k
        await asyncio.sleep(self.seconds)
        end = self.k
        self.active -= 1
        ids = [100 + start, 200 + end]
        entries = [{"token": f"token_id:{t}", "logprob": -0.5} for t in ids]
        choice = {"finish_reason": "length", "token_ids": ids, "logprobs": {"content": entries}}
        return httpx.Response(200, json={"choices": [choice]})

    def weight_route(self, method: str, path: str, **kwargs: Any) -> Any:
        if path == "/pause":
            self.active_at_pause.append(self.active)
        elif path == "/collective_rpc" and self.fail_reload:
            raise VLLMServerError("the reload failed")
        elif path == "/update_weight_version":
            self.versions.append(kwargs["json"]["new_version"])
        elif path == "/weight_info":
            return {"weight_version": self.versions[-1]}
        return {}


def gated_engine(processor: Any, fake: FakeVLLM, monkeypatch: Any) -> VLLMServerEngine:
    engine = VLLMServerEngine(
        "http://vllm:8000", processor, model="m", transport=httpx.MockTransport(fake.chat)
    )
    monkeypatch.setattr(engine.servers["http://vllm:8000"], "_request", fake.weight_route)
    return engine


def test_a_reload_waits_for_the_requests_in_flight_and_each_reply_is_tagged_with_its_weights(
    processor, monkeypatch, tmp_path
):
    """Requests in flight when a reload begins finish on the old weights, requests sent during it
    wait and run on the new ones: no request is at the server across the reload (the server saw
    none in flight when it was paused) and every reply's `weight_version` is the version served
    from its start to its end."""
    fake = FakeVLLM(seconds=0.2)
    engine = gated_engine(processor, fake, monkeypatch)
    engine._load_checkpoint(tmp_path, "step-0", None, None)
    sampling = SamplingParams(max_new_tokens=2)

    async def main() -> tuple[list[Any], list[Any]]:
        first = asyncio.create_task(engine.generate([trajectory(engine)] * 6, sampling))
        await asyncio.sleep(0.05)  # in flight
        assert engine.gate.in_flight == 6
        reload = asyncio.create_task(
            asyncio.to_thread(engine._load_checkpoint, tmp_path, "step-1", None, None)
        )
        await asyncio.sleep(0.05)  # the reload holds the gate, waiting for the six
        assert engine.gate.held
        late = asyncio.create_task(engine.generate([trajectory(engine)] * 4, sampling))
        outs = await first
        await reload
        return outs, await late

    first, late = asyncio.run(main())
    assert fake.active_at_pause == [0, 0]  # the server was never paused with a request of ours
    for out, version in [*((o, "step-0") for o in first), *((o, "step-1") for o in late)]:
        k = fake.versions.index(version)
        assert out.weight_version == version and out.token_ids == [100 + k, 200 + k]
    assert engine.reply_versions == {"step-0": 6, "step-1": 4}
    assert engine.gate.waited_s > 0.05  # the reload waited for the six in flight
    assert not engine.gate.held and engine.gate.in_flight == 0


@pytest.mark.parametrize("mode", ["keep", "abort"])
def test_a_pause_mode_that_lets_a_request_straddle_a_reload_or_cuts_it_is_refused(
    processor, monkeypatch, tmp_path, mode
):
    engine = gated_engine(processor, FakeVLLM(), monkeypatch)
    with pytest.raises(ValueError, match=rf"pause='{mode}' .*use pause='wait'"):
        engine._load_checkpoint(tmp_path, "step-1", mode, None)
    with pytest.raises(ValueError, match=rf"pause='{mode}'"):
        engine.servers["http://vllm:8000"].reload_weights(tmp_path, "step-1", pause=mode)


def test_after_a_failed_reload_no_reply_can_be_tagged_so_requests_fail_naming_it(
    processor, monkeypatch, tmp_path
):
    fake = FakeVLLM()
    engine = gated_engine(processor, fake, monkeypatch)
    fake.fail_reload = True
    with pytest.raises(VLLMServerError, match="the reload failed"):
        engine._load_checkpoint(tmp_path, "step-1", None, None)
    with pytest.raises(VLLMServerError, match=r"reload to 'step-1' failed .*weights are unknown"):
        asyncio.run(engine.generate([trajectory(engine)], SamplingParams(max_new_tokens=2)))


def test_a_hold_that_outlasts_its_timeout_reopens_the_gate_and_names_the_requests_in_flight():
    gate = ReloadGate(error=VLLMServerError)
    entered = asyncio.run(gate.enter())
    assert entered == (None, 0) and gate.in_flight == 1
    with pytest.raises(VLLMServerError, match=r"1 request\(s\) still in flight after 0.05 s"):
        gate.hold(0.05)
    assert not gate.held  # reopened: requests go on
    gate.leave()
    gate.hold(0.05)
    gate.release("step-1")
    assert gate.version == "step-1" and gate.reloads == 1 and not gate.held


def test_a_request_waiting_at_a_held_gate_goes_on_with_the_released_version():
    gate = ReloadGate(version="step-0", error=VLLMServerError)
    gate.hold(1.0)

    async def main() -> tuple[str | None, int]:
        waiting = asyncio.create_task(gate.enter())
        await asyncio.sleep(0.02)
        assert not waiting.done()  # held back
        await asyncio.to_thread(gate.release, "step-1")  # from another thread, as the trainer
        return await asyncio.wait_for(waiting, 1.0)

    assert asyncio.run(main()) == ("step-1", 1)


def test_each_rollout_of_a_group_gets_its_own_seed_the_same_on_a_rerun(processor):
    """A GRPO group is one prompt sampled several times. vLLM draws a request's tokens from its
    seed and prompt alone, so with the run's seed on every request the group's rollouts came back
    identical and every advantage was zero (seen: 30 RL steps on the real server, every group's
    rewards equal). Each request carries its own seed: distinct within the group and between a
    main agent's turns, the same when the run is repeated, none for an unseeded run."""
    from paravt.core.runtime import sample_key

    server = ChatServer([11])
    engine = engine_with(processor, server)

    def group(seed: int | None) -> list[int | None]:
        server.bodies.clear()
        trajs = []
        for index in range(8):  # one prompt, eight rollouts (the runtime's keys)
            traj = trajectory(engine)
            traj.sample_key = sample_key(index, "main")
            trajs.append(traj)
        sampling = SamplingParams(max_new_tokens=1, temperature=0.7, seed=seed)
        asyncio.run(engine.generate(trajs, sampling))
        return sorted(b.get("seed", -1) for b in server.bodies)

    seeds = group(1234)
    assert len(set(seeds)) == 8 and all(0 <= s < 2**31 for s in seeds)
    assert group(1234) == seeds  # reproducible
    assert set(group(1235)).isdisjoint(seeds)  # another step's seed, other draws
    assert group(None) == [-1] * 8  # unseeded: no seed sent

    traj = trajectory(engine)
    traj.sample_key = sample_key(0, "main")
    sampling = SamplingParams(max_new_tokens=1, temperature=0.7, seed=1234)
    first = engine.request_body(traj, sampling)["seed"]
    traj.token_ids.extend([11, 12])  # the same main agent's next turn
    assert engine.request_body(traj, sampling)["seed"] != first
