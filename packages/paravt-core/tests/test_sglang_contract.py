"""The SGLang contract: what our client sends and what our stand-in serves are what SGLang has.

`SGLANG` below is SGLang's native HTTP API (and the two OpenAI-compatible routes our stand-in
serves) as its source defines it, for the versions we support (0.5.6 to 0.5.23), each entry cited
by file and line. Sources: the released wheels
`sglang==0.5.6.post2`, `0.5.12` and `0.5.23` (paths inside the wheel: `sglang/srt/entrypoints/
http_server.py`, `sglang/srt/managers/io_struct.py`, `.../tokenizer_manager.py`,
`sglang/api/v1/api_types.py`; in the repository they sit under `python/`); where a line is given
without a version it is 0.5.23's. Older lines checked against the repository's http_server.py at
commit 0025436 (about 0.5.4). What changed inside the range is noted where it matters to us. The
reference trained with SGLang 0.5.9, inside the range. This is a check against SGLang's source: no
SGLang server has been run with this code (none installs on these CPUs).

The tests fail when
- the stand-in (`paravt.core.testing.stand_in.ROUTES`, both modes) serves a route or method
  SGLang does not have, or takes a body where SGLang takes none (or the reverse);
- the client (`SGLangServerEngine`) calls a route SGLang does not have, or sends a field SGLang's
  request type does not define, or leaves out a required one, or a sampling key SGLang 0.5.23
  rejects;
- the stand-in differs from SGLang in status code or body type on the behaviours the client relies
  on: flush while busy, pause modes and bodies, the model path after a disk update, memory
  release replies, the removed weight-version route.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from paravt.core.testing.stand_in import FLUSH_TEXT, ROUTES, serve

BASE_FIELDS = frozenset({"rid", "http_worker_ipc"})  # BaseReq, io_struct L86-90: every request


@dataclass(frozen=True)
class Route:
    """One SGLang route: the request type's fields (None: the handler reads no body), the ones
    without a default, how it answers, and where the source says so."""

    fields: frozenset[str] | None
    required: frozenset[str] = frozenset()
    reply: str = "json"  # json | text | empty | null
    cite: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _route(fields: str | None, required: str = "", **kw: Any) -> Route:
    names = None if fields is None else frozenset(fields.split()) | BASE_FIELDS
    return Route(names, frozenset(required.split()), **kw)


_FLUSH = _route(
    None,
    reply="text",
    cite="http_server.py L1025-1040 (GET and POST; Response(content=..., status_code=200 if "
    "ret.success else HTTPStatus.BAD_REQUEST)); scheduler flushes only when fully idle "
    "(scheduler.py L5520, is_fully_idle(ignore_waiting=self._engine_paused))",
)
_MODEL_INFO = _route(
    None,
    cite="http_server.py L812-849: model_path, served_model_name, tokenizer_path, is_generation, "
    "preferred_sampling_params, weight_version (L824), ...; 0.5.6.post2 has it too",
    extra={"keys": {"model_path", "tokenizer_path", "is_generation", "weight_version"}},
)
_MEMORY = _route(
    "tags",
    reply="null",
    cite="http_server.py L1575 / L1587 (GET and POST; the handler returns nothing: 200, body "
    "null); ReleaseMemoryOccupationReqInput / Resume...: io_struct L2177-2180 / L2187-2190",
)
# ChatCompletionRequest's OpenAI fields (openai/protocol.py L919-956; SGLang's own follow them)
_CHAT_FIELDS = (
    "messages model frequency_penalty logit_bias logprobs top_logprobs max_tokens "
    "max_completion_tokens n presence_penalty response_format seed stop stream stream_options "
    "temperature top_p user tools tool_choice parallel_tool_calls"
)
SGLANG: dict[tuple[str, str], Route] = {
    ("GET", "/health"): _route(None, reply="empty", cite="http_server.py L721-722 (Response())"),
    ("GET", "/health_generate"): _route(None, reply="empty", cite="http_server.py L721-722"),
    ("GET", "/model_info"): _MODEL_INFO,
    ("GET", "/get_model_info"): _route(
        None, cite="http_server.py L802-809: deprecated alias, logs a warning, returns model_info()"
    ),
    ("GET", "/server_info"): _route(None, cite="http_server.py L853-894"),
    ("GET", "/get_server_info"): _route(None, cite="http_server.py L853 (deprecated alias)"),
    ("POST", "/generate"): _route(
        "text input_ids input_embeds image_data video_data audio_data sampling_params "
        "return_logprob logprob_start_len top_logprobs_num token_ids_logprob "
        "return_text_in_logprobs stream lora_path custom_logit_processor return_hidden_states "
        "bootstrap_host bootstrap_port bootstrap_room data_parallel_rank",
        cite="http_server.py L928-990 (POST and PUT); GenerateReqInput io_struct L176-260 "
        "(input_ids L188, image_data L200, sampling_params L227, return_logprob L230, "
        "logprob_start_len L233, stream L256)",
    ),
    ("PUT", "/generate"): _route(None, cite="http_server.py L928"),
    ("GET", "/flush_cache"): _FLUSH,
    ("POST", "/flush_cache"): _FLUSH,
    ("POST", "/update_weights_from_disk"): _route(
        "model_path load_format abort_all_requests weight_version is_async torch_empty_cache "
        "keep_pause token_step recapture_cuda_graph flush_cache manifest",
        "model_path",
        cite="http_server.py L1300-1326 (ORJSONResponse, 200 on success else 400: success, "
        "message, num_paused_requests); UpdateWeightFromDiskReqInput io_struct L1970-1992 "
        "(flush_cache and manifest new in 0.5.23; unknown keys are ignored)",
    ),
    ("POST", "/init_weights_update_group"): _route(
        "master_address master_port rank_offset world_size group_name backend",
        "master_address master_port rank_offset world_size",
        cite="http_server.py L1404-1417; InitWeightsUpdateGroupReqInput io_struct L2126-2138",
    ),
    ("POST", "/destroy_weights_update_group"): _route("group_name", cite="http_server.py L1420"),
    ("POST", "/update_weights_from_distributed"): _route(
        "names dtypes shapes group_name flush_cache abort_all_requests weight_version "
        "load_format selector torch_empty_cache",
        "names dtypes shapes",
        cite="http_server.py L1488-1505; UpdateWeightsFromDistributedReqInput io_struct L2002-2019",
    ),
    ("POST", "/update_weight_version"): _route(
        "new_version abort_all_requests",
        "new_version",
        cite="http_server.py L1527-1556; UpdateWeightVersionReqInput io_struct L2155-2159 "
        "(abort_all_requests defaults to True)",
    ),
    ("POST", "/pause_generation"): _route(
        "mode",
        cite="http_server.py L1831-1840; PauseGenerationReqInput io_struct L1927-1946: "
        "mode Literal['abort', 'retract', 'in_place'] = 'abort'; a JSON body is required "
        "(0.5.4 read none and always aborted)",
        extra={"modes": ("abort", "retract", "in_place")},
    ),
    ("POST", "/continue_generation"): _route(
        "torch_empty_cache",
        cite="http_server.py L1844-1853; ContinueGenerationReqInput io_struct L1949-1955",
    ),
    ("GET", "/release_memory_occupation"): _MEMORY,
    ("POST", "/release_memory_occupation"): _MEMORY,
    ("GET", "/resume_memory_occupation"): _MEMORY,
    ("POST", "/resume_memory_occupation"): _MEMORY,
    ("POST", "/abort_request"): _route(
        "abort_all", cite="http_server.py L1721-1731; AbortReq io_struct L2285-2291"
    ),
    # OpenAI-compatible (`sglang/srt/entrypoints/openai/protocol.py`); the stand-in serves them
    # with scripted replies (FakeChatServer)
    ("POST", "/v1/chat/completions"): Route(  # not a BaseReq: no rid, http_worker_ipc
        frozenset(_CHAT_FIELDS.split()),
        frozenset({"messages"}),
        cite="http_server.py L1870-1879 (0.5.6.post2: L1137); ChatCompletionRequest "
        "openai/protocol.py L909 (0.5.6.post2: L455)",
    ),
    ("GET", "/v1/models"): _route(
        None,
        cite="http_server.py L1993-2022 (0.5.6.post2: L1207): ModelList of ModelCard(id=served "
        "model name, ...), protocol.py L87-103",
    ),
}
# Routes SGLang no longer has in the supported range: `/get_weight_version` and `/weight_version`
# answer 404 from 0.5.12 (HTTPException "deprecated. Please use '/model_info' instead.") and are
# gone in 0.5.23; the weight version is read from /model_info.
GONE = (("GET", "/get_weight_version"), ("GET", "/weight_version"))
# sglang/api/v1/api_types.py L177-178: SamplingParams, "unknown keys rejected" (0.5.23 answers
# 400 `unknown field ...`); the keys it knows.
SAMPLING_KEYS = frozenset(
    {
        "max_new_tokens",
        "stop",
        "stop_token_ids",
        "stop_regex",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
        "min_new_tokens",
        "n",
        "json_schema",
        "regex",
        "ebnf",
        "structural_tag",
        "ignore_eos",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "no_stop_trim",
        "stream_interval",
        "logit_bias",
        "sampling_seed",
        "custom_params",
        "beam_width",
        "watermark",
        "choice",
    }
)
# tokenizer_manager.py L2365-2369 (_update_model_path_info, called at L2383 / L2390) and 0.5.4
# L1126-1132: after a successful disk update model_path (and the served name) is the loaded path;
# tokenizer_path does not change.


# -------------------------------------------------------------------------------------- stand-in


def test_every_route_the_stand_in_serves_is_an_sglang_route_with_its_body_rule() -> None:
    ours = {key: route.body for key, route in ROUTES.items() if not key[1].startswith("/fake/")}
    unknown = sorted(set(ours) - set(SGLANG))
    assert not unknown, f"the stand-in serves routes SGLang does not have: {unknown}"
    for key, body_required in ours.items():
        # a handler with a request type needs a JSON body (an empty POST is a 400 in SGLang)
        assert body_required == (SGLANG[key].fields is not None), (key, SGLANG[key].cite)
    for gone in GONE:
        assert gone not in ROUTES


@pytest.fixture(scope="module")
def server(tiny_model_path: Path) -> Iterator[Any]:
    srv = serve(tiny_model_path)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    yield srv
    srv.shutdown()
    srv.server_close()


def test_model_info_has_sglangs_keys_and_the_gone_routes_are_404(server: Any) -> None:
    info = httpx.get(server.url + "/model_info").json()
    assert SGLANG["GET", "/model_info"].extra["keys"] <= set(info)
    assert httpx.get(server.url + "/get_model_info").json() == info
    for method, path in GONE:
        assert httpx.request(method, server.url + path).status_code == 404


def test_flush_answers_plain_text_and_400_while_a_request_runs(server: Any) -> None:
    for method in ("GET", "POST"):
        idle = httpx.request(method, server.url + "/flush_cache")
        assert idle.status_code == 200 and idle.headers["content-type"].startswith("text/plain")
        assert idle.text == FLUSH_TEXT  # SGLang sends the same text on 200 and 400
    fake = server.fake
    with fake.state:
        fake.active += 1  # one generation running
    try:
        busy = httpx.post(server.url + "/flush_cache")
    finally:
        with fake.state:
            fake.active -= 1
    assert busy.status_code == 400 and busy.text == FLUSH_TEXT


def test_pause_takes_sglangs_modes_and_needs_a_body(server: Any) -> None:
    for mode in SGLANG["POST", "/pause_generation"].extra["modes"]:
        reply = httpx.post(server.url + "/pause_generation", json={"mode": mode})
        assert reply.status_code == 200 and reply.json()["status"] == "ok"
        assert httpx.post(server.url + "/continue_generation", json={}).status_code == 200
    assert httpx.post(server.url + "/pause_generation", json={"mode": "drain"}).status_code == 400
    assert httpx.post(server.url + "/pause_generation").status_code == 400  # no body
    assert httpx.post(server.url + "/continue_generation").status_code == 400


def test_memory_routes_answer_null(server: Any) -> None:
    for path in ("/release_memory_occupation", "/resume_memory_occupation"):
        reply = httpx.post(server.url + path, json={"tags": ["weights"]})
        assert reply.status_code == 200 and reply.json() is None


def test_a_disk_update_reports_the_loaded_path_and_needs_one(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    from safetensors.torch import save_file

    srv = serve(tiny_model_path)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        state = {k: v.clone() for k, v in srv.fake.engine.model.state_dict().items()}
        target = tmp_path / "step-1"
        target.mkdir()
        save_file(state, str(target / "model.safetensors"))
        before = httpx.get(url + "/model_info").json()
        reply = httpx.post(
            url + "/update_weights_from_disk",
            json={"model_path": str(target), "weight_version": "step-1"},
        )
        assert reply.status_code == 200
        assert {"success", "message", "num_paused_requests"} <= set(reply.json())
        after = httpx.get(url + "/model_info").json()
        assert after["model_path"] == str(target) and after["weight_version"] == "step-1"
        assert after["tokenizer_path"] == before["tokenizer_path"]
        missing = httpx.post(url + "/update_weights_from_disk", json={"weight_version": "x"})
        assert missing.status_code == 400
        wrong = httpx.post(url + "/update_weights_from_disk", json={"model_path": str(tmp_path)})
        assert wrong.status_code == 400 and wrong.json()["success"] is False
    finally:
        srv.shutdown()
        srv.server_close()


# ---------------------------------------------------------------------------------------- client


class Recorder:
    """An httpx transport that records every request and answers as SGLang would."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.calls.append((request.method, request.url.path, body))
        path = request.url.path
        if path == "/health":
            return httpx.Response(200)
        if path == "/model_info":
            return httpx.Response(200, json={"model_path": "/m", "weight_version": "v1"})
        if path == "/flush_cache":
            return httpx.Response(200, text=FLUSH_TEXT)
        if path in ("/release_memory_occupation", "/resume_memory_occupation"):
            return httpx.Response(200, json=None)
        if path == "/generate":
            meta = {
                "finish_reason": {"type": "length", "length": 1},
                "prompt_tokens": 3,
                "weight_version": "v1",
                "output_token_logprobs": [[-0.5, 7, None]],
                "input_token_logprobs": [[None, 1, None], [-1.0, 2, None], [-2.0, 3, None]],
            }
            return httpx.Response(200, json={"text": "x", "output_ids": [7], "meta_info": meta})
        if path in ("/pause_generation", "/continue_generation"):
            return httpx.Response(200, json={"message": "ok", "status": "ok"})
        return httpx.Response(200, json={"success": True, "message": "", "num_paused_requests": 0})


@pytest.fixture(scope="module")
def processor(tiny_model_path: Path) -> Any:
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny_model_path)


def test_every_request_the_client_sends_is_one_sglang_takes(
    processor: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from paravt.core.engines import sglang_server
    from paravt.core.engines.sglang_server import SGLangServerEngine
    from paravt.core.runtime import SamplingParams, Trajectory

    recorder = Recorder()
    engine = SGLangServerEngine(
        "http://sglang:30000",
        processor,
        transport=httpx.MockTransport(recorder),
        sync_transport=httpx.MockTransport(recorder),
        send_seed=True,
    )
    engine.health()
    engine.server_weight_versions()
    engine.flush_cache()
    engine.release_memory(["weights", "kv_cache"])
    engine.resume_memory()
    for mode in ("retract", "in_place", "abort"):
        engine.pause_generation(mode)
    engine.continue_generation()
    tensors = [("w", torch.zeros(2, 2)), ("b", torch.ones(3))]
    engine.push_weights_from_disk(iter(tensors), tmp_path, "v1", pause="retract")
    engine.score([1, 2, 3])

    class Group:
        def broadcast(self, tensor: Any, src: int = 0) -> None:
            pass

    monkeypatch.setattr(sglang_server.WeightUpdateGroup, "create", lambda *a, **k: Group())
    group = engine.init_weight_update_group("127.0.0.1", 29600)
    engine.push_weights_distributed(iter(tensors), "v1", group, bucket_bytes=16)

    traj = Trajectory("main", token_ids=[1, 2, 3])
    sampling = SamplingParams(max_new_tokens=4, temperature=0.7, top_p=0.9, top_k=5, seed=3)
    asyncio.run(engine.generate([traj], sampling))

    seen = {(m, p) for m, p, _ in recorder.calls}
    assert {("POST", "/generate"), ("POST", "/init_weights_update_group")} <= seen
    for method, path, body in recorder.calls:
        route = SGLANG.get((method, path))
        assert route is not None, f"the client calls {method} {path}, which SGLang does not have"
        if route.fields is None:
            continue
        assert isinstance(body, dict), f"{method} {path} needs a JSON object body in SGLang"
        unknown = set(body) - route.fields
        assert not unknown, f"{path}: fields SGLang does not define: {unknown} ({route.cite})"
        missing = route.required - set(body)
        assert not missing, f"{path}: SGLang requires {missing} ({route.cite})"
        if path == "/generate":
            keys = set(body.get("sampling_params") or {})
            assert keys <= SAMPLING_KEYS, (
                f"SGLang 0.5.23 rejects sampling keys {keys - SAMPLING_KEYS}"
            )
        if path == "/pause_generation":
            assert body["mode"] in SGLANG[method, path].extra["modes"]


def test_the_client_says_what_sglangs_refusals_mean(processor: Any) -> None:
    from paravt.core.engines.sglang_server import ServerError, SGLangServerEngine

    def old_or_busy(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/flush_cache":
            return httpx.Response(400, text=FLUSH_TEXT)
        return httpx.Response(404, json={"detail": "Not Found"})

    transport = httpx.MockTransport(old_or_busy)
    engine = SGLangServerEngine(
        "http://sglang:30000", processor, transport=transport, sync_transport=transport
    )
    with pytest.raises(ServerError, match=r"SGLang older than 0\.5\.6"):
        engine.server_weight_versions()
    with pytest.raises(ServerError, match="flushes only when no request is running or waiting"):
        engine.flush_cache()
