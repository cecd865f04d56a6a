"""SGLangServerEngine against our stand-in server (`paravt.core.testing.stand_in`, the tiny
Qwen3-VL on CPU) over real HTTP: token-in/token-out generation with images, weight pushes with versions, a
stale server refused, retries, and a dead server reported by URL instead of a hang."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
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
from paravt.core.engines.scripted import ScriptedTurns
from paravt.core.engines.sglang_server import (
    ServerError,
    SGLangServerEngine,
    StaleWeightsError,
)
from paravt.core.engines.weights import bucket_tensors
from paravt.core.testing import StaticToolbox
from paravt.core.testing.stand_in import serve


def _start(model_path: Path) -> Any:
    server = serve(model_path)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def server(tiny_model_path: Path) -> Iterator[Any]:
    """A fake server whose weights no test changes."""
    srv = _start(tiny_model_path)
    yield srv
    srv.shutdown()


def url_of(srv: Any) -> str:
    return f"http://127.0.0.1:{srv.server_port}"


def engine_for(srv: Any, **kw: Any) -> SGLangServerEngine:
    local = srv.fake.engine
    return SGLangServerEngine(url_of(srv), local.processor, eos_token_ids=local.eos_token_ids, **kw)


def frame(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (64, 64, 3), dtype=np.uint8)


def prompt(engine: Any, with_images: bool) -> Trajectory:
    content: Any = (
        [ImagePart(frame(0)), TextPart("x"), ImagePart(frame(1)), TextPart("Q")]
        if with_images
        else "Q"
    )
    messages = [Message("system", "S"), Message("user", content)]
    traj = Trajectory("main")
    traj.add_prompt(engine.encode_prompt(messages), messages)
    return traj


def test_requests_carry_collapsed_image_pads_data_urls_and_sglang_sampling_names(
    server: Any,
) -> None:
    engine = engine_for(server)
    traj = prompt(engine, with_images=True)
    assert traj.token_ids.count(engine.image_token_id) == 8  # 64x64: 4 tokens per image
    body = engine.request_body(traj, SamplingParams(max_new_tokens=9, temperature=0.7, top_k=5))
    assert body["input_ids"].count(engine.image_token_id) == 2  # one pad per image
    assert [t for t in body["input_ids"] if t != engine.image_token_id] == [
        t for t in traj.token_ids if t != engine.image_token_id
    ]
    assert [u[:22] for u in body["image_data"]] == ["data:image/png;base64,"] * 2
    assert body["sampling_params"] == {
        "max_new_tokens": 9,
        "temperature": 0.7,
        "top_p": 1.0,
        "top_k": 5,
        "skip_special_tokens": False,
    }
    assert body["return_logprob"] is True


def test_with_send_seed_each_rollout_of_a_group_gets_its_own_seed(server: Any) -> None:
    """`send_seed`: one seed per request (`runtime.request_seed`), so a GRPO group's rollouts of
    one prompt are not all the same draw; the same seeds on a rerun."""
    from paravt.core.runtime import sample_key

    engine = engine_for(server, send_seed=True)
    sampling = SamplingParams(max_new_tokens=1, temperature=0.7, seed=7)

    def seeds() -> list[int]:
        out = []
        for index in range(4):
            traj = prompt(engine, with_images=False)
            traj.sample_key = sample_key(index, "main")
            out.append(engine.request_body(traj, sampling)["sampling_params"]["sampling_seed"])
        return out

    first = seeds()
    assert len(set(first)) == 4 and seeds() == first
    assert (
        "sampling_seed"
        not in engine_for(server).request_body(prompt(engine, with_images=False), sampling)[
            "sampling_params"
        ]
    )


def test_each_frame_is_encoded_once_across_turns(
    server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import paravt.core.engines.sglang_server as sglang_engine

    calls: list[int] = []
    real = sglang_engine.image_data_url

    def counting(image: Any, **kw: Any) -> str:
        calls.append(1)
        return real(image, **kw)

    monkeypatch.setattr(sglang_engine, "image_data_url", counting)
    engine = engine_for(server)
    traj = prompt(engine, with_images=True)
    first = engine.request_body(traj, SamplingParams())["image_data"]
    again = engine.request_body(traj, SamplingParams())["image_data"]
    assert first == again and len(calls) == 2  # two frames, encoded once each
    other = prompt(engine, with_images=True)  # new chunks (same pixels): encoded anew
    engine.request_body(other, SamplingParams())
    assert len(calls) == 4


def test_greedy_generation_through_the_server_equals_the_in_process_engine(
    server: Any, hf_engine: Any
) -> None:
    engine = engine_for(server)
    sampling = SamplingParams(max_new_tokens=12)
    for with_images in (True, False):
        remote = asyncio.run(engine.generate([prompt(engine, with_images)], sampling))[0]
        local = hf_engine.generate_sync([prompt(hf_engine, with_images)], sampling)[0]
        assert remote.token_ids == local.token_ids and remote.text == local.text
        assert remote.logprobs == pytest.approx(local.logprobs, abs=1e-4)
        assert remote.finish_reason == local.finish_reason
    assert engine.prompt_token_mismatches == 0  # the server counted our expanded prompt


def test_the_runtime_drives_the_server_engine_through_a_tool_turn_with_subagents(
    server: Any,
) -> None:
    engine = engine_for(server)
    call = (
        'look</think><tool_call>{"name": "crop_video", "arguments": '
        '{"start_time": 0, "end_time": 8}}</tool_call>'
    )
    scripted = ScriptedTurns(engine, {1: call})

    class FrameBox(StaticToolbox):
        async def execute(self, calls: Any) -> Any:
            outs = await super().execute(calls)
            for out in outs:
                out.frames = [Frame(frame(int(f.timestamp_s)), f.timestamp_s) for f in out.frames]
            return outs

    tasks = [
        AgentTask(
            f"t{i}",
            build_main_prompt("colour?", [Frame(frame(9), 4.0)], duration_s=30.0),
            FrameBox(duration_s=30.0, fps=0.25),
            "colour?",
        )
        for i in range(2)
    ]
    config = AgentConfig(
        max_turns=2,
        sampling=SamplingParams(max_new_tokens=6),
        subagent_sampling=SamplingParams(max_new_tokens=5),
    )
    episodes = asyncio.run(run_episodes(tasks, scripted, config))
    for ep in episodes:
        assert len(ep.turns) == 2 and len(ep.subagents) == 1
        assert ep.turns[0].calls[0].executed and ep.turns[0].calls[0].summary is not None
        sub = ep.subagents[0]
        assert sum(sub.loss_mask) == len([lp for lp, m in zip(sub.logprobs, sub.loss_mask) if m])
        assert len(sub.media) == 2  # the window's two frames went to the server
        assert all(lp < 0 for lp, m in zip(ep.main.logprobs[-3:], ep.main.loss_mask[-3:]) if m)


def test_weight_push_from_disk_changes_the_servers_logprobs_to_the_trainers(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForImageTextToText

    srv = _start(tiny_model_path)
    try:
        engine = engine_for(srv)
        fixed = prompt(engine, with_images=False).token_ids
        before = engine.score(fixed)
        trainer = AutoModelForImageTextToText.from_pretrained(tiny_model_path)
        with torch.no_grad():
            for p in trainer.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        target = engine.push_weights_from_disk(
            trainer.state_dict().items(), tmp_path / "weights", "step-1", shard_bytes=1 << 20
        )
        assert len(list(target.glob("*.safetensors"))) > 1  # bucketed into shards
        assert engine.expected_weight_version == "step-1"
        assert engine.server_weight_versions() == {url_of(srv): "step-1"}
        after = engine.score(fixed)
        ids = torch.tensor([fixed])
        with torch.no_grad():
            logits = trainer(input_ids=ids).logits[0, :-1].float()
        want = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1).tolist()
        assert max(abs(a - b) for a, b in zip(after, before)) > 1e-2  # the weights changed
        assert after == pytest.approx(want, abs=1e-4)  # ... to the trainer's
        start, event = srv.fake.events
        assert event["weight_version"] == "step-1" and event["tensors"] == len(trainer.state_dict())
        assert event["probe_logprobs"] != start["probe_logprobs"]
        out = asyncio.run(
            engine.generate([prompt(engine, False)], SamplingParams(max_new_tokens=3))
        )
        assert len(out[0].token_ids) == 3
    finally:
        srv.shutdown()


def test_a_server_on_other_weights_is_refused(server: Any) -> None:
    engine = engine_for(server)
    engine.expected_weight_version = "step-7"  # what the trainer believes it pushed
    with pytest.raises(StaleWeightsError, match=r"'default'.*'step-7'"):
        asyncio.run(engine.generate([prompt(engine, False)], SamplingParams(max_new_tokens=2)))
    engine.check_weight_version = False
    asyncio.run(engine.generate([prompt(engine, False)], SamplingParams(max_new_tokens=2)))


def test_with_stale_versions_replies_from_recent_pushes_pass_and_older_ones_are_refused(
    server: Any,
) -> None:
    """Asynchronous training: a rollout started before the last push(es) may end after them."""
    engine = engine_for(server, stale_versions=1)
    engine.expected_weight_version = "default"  # what the stand-in serves
    engine.expected_weight_version = "step-1"
    assert engine.accepted_weight_versions == ("default", "step-1")
    asyncio.run(engine.generate([prompt(engine, False)], SamplingParams(max_new_tokens=2)))
    engine.expected_weight_version = "step-2"  # 'default' is now two pushes old
    assert engine.accepted_weight_versions == ("step-1", "step-2")
    with pytest.raises(StaleWeightsError, match=r"'default'.*'step-2' \(or 'step-1'\)"):
        asyncio.run(engine.generate([prompt(engine, False)], SamplingParams(max_new_tokens=2)))
    with pytest.raises(ValueError, match="stale_versions"):
        engine_for(server, stale_versions=-1)


def test_a_push_with_pause_waits_for_no_request_and_wraps_only_the_load(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    import threading

    srv = _start(tiny_model_path)
    try:
        engine = engine_for(srv)
        state = {n: t.clone() for n, t in srv.fake.engine.model.state_dict().items()}
        engine.push_weights_from_disk(state.items(), tmp_path / "w", "step-1", pause="retract")
        kinds = [e["event"] for e in srv.fake.events[1:]]
        assert kinds == ["pause_generation", "update_weights_from_disk", "continue_generation"]
        assert srv.fake.events[1]["mode"] == "retract"
        # paused: a request waits (it does not fail) until generation continues
        engine.pause_generation("in_place")
        done = threading.Event()

        def one() -> None:
            asyncio.run(engine.generate([prompt(engine, False)], SamplingParams(max_new_tokens=2)))
            done.set()

        thread = threading.Thread(target=one, daemon=True)
        thread.start()
        assert not done.wait(1.0)
        engine.continue_generation()
        assert done.wait(60)
        with pytest.raises(ValueError, match="pause mode"):
            engine.pause_generation("later")
        old = SGLangServerEngine(
            url_of(srv),
            srv.fake.engine.processor,
            transport=httpx.MockTransport(lambda r: httpx.Response(404, text="Not Found")),
            sync_transport=httpx.MockTransport(lambda r: httpx.Response(404, text="Not Found")),
        )
        with pytest.raises(ServerError, match=r"HTTP 404.*pause_mode=drain"):
            old.pause_generation("retract")
    finally:
        srv.shutdown()


def test_a_dead_server_is_named_after_bounded_retries_not_a_hang(server: Any) -> None:
    with socket_closed_port() as port:
        dead = f"http://127.0.0.1:{port}"
        local = server.fake.engine
        engine = SGLangServerEngine(
            dead, local.processor, eos_token_ids=local.eos_token_ids, retries=2, backoff_s=0.05
        )
        t0 = time.monotonic()
        with pytest.raises(ServerError, match=f"{dead}.*3 attempt"):
            asyncio.run(engine.generate([prompt(engine, False)], SamplingParams(max_new_tokens=2)))
        assert time.monotonic() - t0 < 5
        with pytest.raises(ServerError, match="unhealthy"):
            engine.health(timeout_s=1)


class silent_server:
    """A local server (127.0.0.1 only) that accepts connections, reads nothing and never answers;
    its accept loop ends on exit, after 64 connections or after 60 s."""

    def __enter__(self) -> str:
        import socket

        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(0.05)
        self.stop = threading.Event()
        self.held: list[Any] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self) -> None:
        deadline = time.monotonic() + 60
        while not self.stop.is_set() and len(self.held) < 64 and time.monotonic() < deadline:
            try:
                self.held.append(self.listener.accept()[0])
            except OSError:  # accept timed out: look at the stop flag again
                continue

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join(5)
        for conn in self.held:
            conn.close()
        self.listener.close()


def test_a_server_that_never_answers_is_warned_about_then_declared_dead(
    server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    local = server.fake.engine
    with silent_server() as url:
        engine = SGLangServerEngine(
            url,
            local.processor,
            eos_token_ids=local.eos_token_ids,
            timeout_s=60,  # the request timeout is not what ends it
            retries=0,
            stall_warn_s=0.1,
            stall_dead_s=2.0,
        )
        two = [prompt(engine, False), prompt(engine, False)]
        dead = rf"SGLang server {url} sent nothing back for \d+ s with 2 request\(s\) in flight"
        with (
            caplog.at_level("WARNING", logger="paravt.core.sglang"),
            pytest.raises(ServerError, match=dead + ": declared dead"),
        ):
            asyncio.run(engine.generate(two, SamplingParams(max_new_tokens=2)))
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) >= 2  # repeated while the stall lasts, one line per period
        assert all(f"{url} has sent nothing back" in w for w in warnings)
        assert all("2 request(s) in flight" in w for w in warnings)
        # declared dead: later requests fail at once instead of waiting again
        with pytest.raises(ServerError, match="declared dead"):
            asyncio.run(engine.generate(two[:1], SamplingParams(max_new_tokens=2)))


def test_stall_warnings_repeat_every_period_and_an_answer_restarts_the_clock(
    server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    engine = engine_for(server)  # defaults: warn every 60 s, dead after 300 s
    url = engine.urls[0]
    engine._in_flight[url] = 3

    def quiet_for(seconds: float) -> None:
        engine._quiet_since[url] = time.monotonic() - seconds

    with caplog.at_level("WARNING", logger="paravt.core.sglang"):
        engine._restart_stall_clock(url)
        engine._check_stall(url)  # just started: nothing to say
        quiet_for(65)
        engine._check_stall(url)
        engine._check_stall(url)  # the same period: no second line
        quiet_for(125)
        engine._check_stall(url)
        engine._restart_stall_clock(url)  # a reply came back
        engine._check_stall(url)
        quiet_for(61)
        engine._check_stall(url)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and all(f"{url} has sent nothing back" in x for x in lines)
    assert all("3 request(s) in flight" in x for x in lines)
    quiet_for(301)
    with pytest.raises(ServerError, match=rf"{url} sent nothing back for 301 s.*declared dead"):
        engine._check_stall(url)
    with pytest.raises(ValueError, match="stall_dead_s"):
        engine_for(server, stall_dead_s=0)


class socket_closed_port:
    """A local port nothing listens on."""

    def __enter__(self) -> int:
        import socket

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        return int(self.port)

    def __exit__(self, *exc: Any) -> None:
        return None


def test_5xx_answers_are_retried_with_backoff_and_4xx_are_not(server: Any) -> None:
    local = server.fake.engine
    answers = [503, 502, 200]
    seen: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(time.monotonic())
        code = answers.pop(0)
        if code != 200:
            return httpx.Response(code, text="busy")
        meta = {"output_token_logprobs": [[-0.1, 5, None]], "finish_reason": {"type": "length"}}
        return httpx.Response(200, json={"text": "", "meta_info": meta})

    engine = SGLangServerEngine(
        "http://sglang.invalid",
        local.processor,
        eos_token_ids=local.eos_token_ids,
        backoff_s=0.05,
        transport=httpx.MockTransport(handler),
    )
    (out,) = asyncio.run(engine.generate([prompt(engine, False)], SamplingParams(max_new_tokens=1)))
    assert out.token_ids == [5] and out.finish_reason == "length" and len(seen) == 3
    assert seen[2] - seen[1] >= 0.09  # 0.05 s, then 0.1 s

    engine._transport = httpx.MockTransport(lambda r: httpx.Response(400, text="bad input_ids"))
    engine._per_loop.clear()
    with pytest.raises(ServerError, match="HTTP 400: bad input_ids"):
        asyncio.run(engine.generate([prompt(engine, False)], SamplingParams(max_new_tokens=1)))


def test_outputs_are_cut_at_the_end_of_turn_and_aborts_raise(server: Any) -> None:
    engine = engine_for(server)
    eot = engine.end_of_turn_id
    meta = {"output_token_logprobs": [[-1.0, 7, None], [-2.0, eot, None], [-3.0, 9, None]]}
    out = engine.parse_output({"meta_info": {**meta, "finish_reason": {"type": "stop"}}})
    assert out.token_ids == [7, eot] and out.logprobs == [-1.0, -2.0]
    with pytest.raises(ServerError, match="aborted"):
        engine.parse_output({"meta_info": {"finish_reason": {"type": "abort"}}}, "http://x")


def test_tensors_are_bucketed_in_order_by_size() -> None:
    named = [(f"w{i}", torch.zeros(n)) for i, n in enumerate([10, 10, 30, 5, 5])]
    buckets = bucket_tensors(named, bucket_bytes=80)
    assert [[n for n, _ in b] for b in buckets] == [["w0", "w1"], ["w2"], ["w3", "w4"]]


def test_urls_are_validated() -> None:
    with pytest.raises(ValueError, match="http://"):
        SGLangServerEngine("localhost:30000", None)


def test_memory_release_and_resume_reach_the_server(tiny_model_path: Path) -> None:
    srv = _start(tiny_model_path)
    try:
        engine = engine_for(srv)
        engine.release_memory(["kv_cache"])
        with pytest.raises(ServerError, match=r"HTTP 400.*resume"):
            asyncio.run(engine.generate([prompt(engine, False)], SamplingParams(max_new_tokens=2)))
        engine.resume_memory()
        asyncio.run(engine.generate([prompt(engine, False)], SamplingParams(max_new_tokens=2)))
        assert [e["event"] for e in srv.fake.events] == [
            "start",
            "release_memory_occupation",
            "resume_memory_occupation",
        ]
        assert srv.fake.events[1]["tags"] == ["kv_cache"]
    finally:
        srv.shutdown()


def test_distributed_weight_push_broadcasts_bucket_by_bucket_and_tags_the_last(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    """The NCCL path's protocol on gloo against the stand-in in its own process (both sides build
    the group like SGLang's init_custom_process_group; SGLang itself: untested)."""
    import os

    from transformers import AutoModelForImageTextToText, AutoProcessor

    from paravt.core.testing.stand_in import spawn

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    server, url = spawn(tiny_model_path, tmp_path / "server.log", env=env, timeout_s=90)
    try:
        engine = SGLangServerEngine(url, AutoProcessor.from_pretrained(tiny_model_path))
        with socket_closed_port() as port:
            group = engine.init_weight_update_group("127.0.0.1", port, backend="gloo")
        trainer = AutoModelForImageTextToText.from_pretrained(tiny_model_path)
        with torch.no_grad():
            for p in trainer.parameters():
                p.add_(torch.randn_like(p) * 0.05)
        state = trainer.state_dict()
        sent = engine.push_weights_distributed(state.items(), "step-1", group, bucket_bytes=1 << 20)
        assert sent == len(state) and engine.expected_weight_version == "step-1"
        events = httpx.get(url + "/fake/events").json()
        updates = [e for e in events if e["event"] == "update_weights_from_distributed"]
        assert len(updates) > 1  # bucketed
        assert [u["flush_cache"] for u in updates] == [False] * (len(updates) - 1) + [True]
        assert updates[-1]["weight_version"] == "step-1"
        assert sum(u["tensors"] for u in updates) == len(state)
        x = torch.tensor([events[0]["probe_ids"]])
        with torch.no_grad():
            logits = trainer(input_ids=x).logits[0, :-1].float()
        want = torch.log_softmax(logits, -1).gather(-1, x[0, 1:, None]).squeeze(-1).tolist()
        assert updates[-1]["probe_logprobs"] == pytest.approx(want, abs=1e-4)
        asyncio.run(engine.generate([prompt(engine, False)], SamplingParams(max_new_tokens=2)))
    finally:
        server.kill()
        server.wait()


def test_requests_sent_together_are_generated_as_one_batch_by_the_stand_in(server: Any) -> None:
    engine = engine_for(server)
    before = len(server.fake.batcher.batches)
    trajs = [prompt(engine, False) for _ in range(6)]
    out = asyncio.run(engine.generate(trajs, SamplingParams(max_new_tokens=3, temperature=0.0)))
    assert [len(o.token_ids) for o in out] == [3] * 6
    sizes = server.fake.batcher.batches[before:]
    assert sum(sizes) == 6 and max(sizes) > 1, sizes
    alone = asyncio.run(
        engine.generate(trajs[:1], SamplingParams(max_new_tokens=3, temperature=0.0))
    )
    assert alone[0].token_ids == out[0].token_ids  # greedy: the batch changes nothing


def test_spawn_names_a_server_that_does_not_start_with_the_end_of_its_log(tmp_path: Path) -> None:
    from paravt.core.testing.stand_in import spawn

    with pytest.raises(RuntimeError, match=r"did not start:[\s\S]*no-such-model"):
        spawn(tmp_path / "no-such-model", tmp_path / "server.log", timeout_s=60)
