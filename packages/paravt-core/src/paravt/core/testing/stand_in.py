"""The stand-in server for tests, benchmarks and CPU rehearsals: SGLang's native HTTP API and the
OpenAI-compatible chat API on 127.0.0.1, from one routes table (`ROUTES`) and one HTTP machinery
(`StandInServer`, a `ThreadingHTTPServer`: one thread per request, so concurrent requests overlap
as on a continuously batching server). It is for tests, not for serving. One file because its two
APIs share that machinery and one routes table. Two modes:

- Scripted: `FakeChatServer(reply, latency_s=None, *, record=True, model="fake")` answers
  `POST /v1/chat/completions` with `reply(body) -> str` as the assistant text (or, returning a
  `(status, response)` pair, with that response as it is: finish reasons, log-probs, errors), after
  waiting `latency_s(body)` seconds if given (a reply that raises is a 500), and `GET /v1/models`
  with `model`. Every request body is kept in `bodies` and its headers in `headers`
  (`record=False` keeps none, e.g. in a benchmark); `max_in_flight` is the most requests it worked
  on at once; `chat.reply` may be replaced while it serves.

      with FakeChatServer(lambda body: "<answer>B</answer>") as server:
          ...  # base_url=server.base_url, model="fake"

- Model-backed: `serve(model_path)` (in a thread), `spawn(model_path, log)` (its own process) or
  `python -m paravt.core.testing.stand_in --model-path DIR --port 30000 [--port-file F]` serves
  the subset of SGLang's native API that `paravt.core.engines.sglang_server.SGLangServerEngine`
  uses, over a transformers model (extra `hf`; the model side is
  `paravt.core.testing.stand_in_model.FakeSGLang`).

Every route is SGLang's (0.5.6-0.5.23), with SGLang's method, request body rule, status codes and
body types on the behaviours the clients rely on, checked against SGLang's source line by line by
`packages/paravt-core/tests/test_sglang_contract.py`. Model-backed: `GET /health`; `GET
/model_info` (and its deprecated alias `/get_model_info`) with `weight_version`, `model_path`
following the last disk update; `POST /generate` (`input_ids` + `image_data` data URLs +
`sampling_params` + `return_logprob`, one request per call; `max_new_tokens: 0` scores the prompt
into `meta_info.input_token_logprobs`); `GET|POST /flush_cache` (plain text, 400 while requests
run or wait); `POST /update_weights_from_disk` (`model_path` required; 200 / 400 with `success`);
`POST /release_memory_occupation`, `/resume_memory_occupation` (200, body `null`); `POST
/init_weights_update_group` + `/update_weights_from_distributed` over a gloo group; `POST
/pause_generation` (`mode`: abort, retract, in_place; else 400) and `/continue_generation` (both
need a JSON body). Its own routes for tests: `GET /fake/events` (weight updates with their
versions and the log-probs of a fixed probe sequence right after each load, memory
release/resume, ...) and `GET /fake/generated` (generation requests served per weight version).
Scripted: `POST /v1/chat/completions`, `GET /v1/models`. A route of the other mode is a 404.

Differences from SGLang, on purpose: the scripted chat reply carries only `id`, `object` and
`choices` (and `/v1/models` only the `id`); the model side's own are listed in
`paravt.core.testing.stand_in_model`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

from paravt.core.testing.stand_in_model import FakeSGLang

log = logging.getLogger("paravt.core.testing.stand_in")

Reply = Callable[[dict[str, Any]], str | tuple[int, Any]]
Latency = Callable[[dict[str, Any]], float]
_S = TypeVar("_S", bound="StandInServer")


class ScriptedChat:
    """The scripted mode's side: chat replies written by `reply`, delayed by `latency_s`."""

    def __init__(
        self, reply: Reply, latency_s: Latency | None = None, *, record: bool, model: str
    ) -> None:
        self.reply, self.latency_s, self.record, self.model = reply, latency_s, record, model
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0

    def complete(
        self, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """One `/v1/chat/completions` reply: 200 with the scripted text (or the scripted status and
        response), 500 if the script fails."""
        with self.lock:
            if self.record:
                self.bodies.append(body)
                self.headers.append(dict(headers or {}))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency_s is not None:
                time.sleep(max(0.0, float(self.latency_s(body))))
            text = self.reply(body)
        except Exception as exc:  # a scripted reply that fails is a 500, as on a server
            return 500, {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            with self.lock:
                self.in_flight -= 1
        if isinstance(text, tuple):
            return text
        return 200, {
            "id": "fake",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
        }


def assistant_turns(body: dict[str, Any]) -> int:
    """How many assistant messages a chat request carries (its turn index), not counting a final
    assistant prefix that the server is asked to continue."""
    messages = body.get("messages", [])
    n = sum(1 for m in messages if m.get("role") == "assistant")
    if body.get("continue_final_message") and messages and messages[-1].get("role") == "assistant":
        n -= 1
    return n


# ------------------------------------------------------------------------------------ the routes


class PlainText(str):
    """A reply body sent as text/plain (SGLang's /flush_cache answers in text)."""


FLUSH_TEXT = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)


def _model_info(fake: FakeSGLang, body: dict[str, Any]) -> dict[str, Any]:
    # SGLang's model_info keys we read (http_server.py model_info); model_path follows the last
    # disk update, as SGLang's tokenizer manager sets it
    return {
        "model_path": fake.model_path,
        "tokenizer_path": fake.tokenizer_path,
        "is_generation": True,
        "weight_version": fake.weight_version,
    }


def _flush_cache(fake: FakeSGLang, body: dict[str, Any]) -> tuple[int, PlainText]:
    # SGLang flushes only when nothing is running or waiting, else 400; the same text either way
    busy = fake.active > 0 or fake.paused
    fake.events.append({"event": "flush_cache", "flushed": not busy})
    return (400 if busy else 200), PlainText(FLUSH_TEXT)


def _memory(release: bool) -> Callable[[FakeSGLang, dict[str, Any]], None]:
    def handle(fake: FakeSGLang, body: dict[str, Any]) -> None:
        fake.released = release
        name = "release_memory_occupation" if release else "resume_memory_occupation"
        fake.events.append({"event": name, "tags": body.get("tags")})
        return None  # SGLang's handler returns nothing: HTTP 200 with the JSON body `null`

    return handle


def _with_status(name: str) -> Callable[[FakeSGLang, dict[str, Any]], Any]:
    """The stand-in's method `name` (looked up on the instance, so tests may replace it), whose
    `{"success": ...}` replies go out as SGLang sends them: 200 on success, 400 on failure."""

    def handle(fake: FakeSGLang, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        reply = getattr(fake, name)(body)
        return (200 if reply.get("success", True) else 400), reply

    return handle


@dataclass(frozen=True)
class Route:
    """What answers one (method, path): `handler(backend, body)` returns the reply (a JSON value,
    a `PlainText`, or a `(status, reply)` pair); `body` says the route needs a JSON object body
    (SGLang >= 0.5.6 answers 400 to an empty POST on these); `mode` is the backend class that
    serves it (`FakeSGLang`: model-backed, `ScriptedChat`: scripted); `headers`: the handler takes
    the request's headers too, `handler(backend, body, headers)`."""

    handler: Callable[..., Any]
    body: bool
    mode: type
    headers: bool = False


def _sglang(handler: Callable[[FakeSGLang, dict[str, Any]], Any], body: bool) -> Route:
    return Route(handler, body, FakeSGLang)


# Every route the stand-in serves, in both modes: all of them SGLang's own routes (native and
# OpenAI-compatible) with SGLang's methods (checked against SGLang's source by
# packages/paravt-core/tests/test_sglang_contract.py), plus the stand-in's own `/fake/...` routes.
ROUTES: dict[tuple[str, str], Route] = {
    ("GET", "/health"): _sglang(lambda fake, body: PlainText(""), False),
    ("GET", "/model_info"): _sglang(_model_info, False),
    ("GET", "/get_model_info"): _sglang(_model_info, False),  # SGLang's deprecated alias
    ("POST", "/generate"): _sglang(lambda fake, body: fake.generate(body), True),
    ("GET", "/flush_cache"): _sglang(_flush_cache, False),
    ("POST", "/flush_cache"): _sglang(_flush_cache, False),
    ("POST", "/update_weights_from_disk"): _sglang(_with_status("update_weights_from_disk"), True),
    ("POST", "/init_weights_update_group"): _sglang(
        _with_status("init_weights_update_group"), True
    ),
    ("POST", "/update_weights_from_distributed"): _sglang(
        _with_status("update_weights_from_distributed"), True
    ),
    ("POST", "/pause_generation"): _sglang(_with_status("pause_generation"), True),
    ("POST", "/continue_generation"): _sglang(_with_status("continue_generation"), True),
    ("POST", "/release_memory_occupation"): _sglang(_memory(True), True),
    ("POST", "/resume_memory_occupation"): _sglang(_memory(False), True),
    ("GET", "/fake/events"): _sglang(lambda fake, body: fake.events, False),
    ("GET", "/fake/generated"): _sglang(lambda fake, body: fake.generated_by_version, False),
    # the OpenAI-compatible routes, scripted
    ("POST", "/v1/chat/completions"): Route(
        lambda chat, body, headers: chat.complete(body, headers), True, ScriptedChat, headers=True
    ),
    ("GET", "/v1/models"): Route(
        lambda chat, body: {"object": "list", "data": [{"id": chat.model}]}, False, ScriptedChat
    ),
}


# ---------------------------------------------------------------------------------- the server


class _Handler(BaseHTTPRequestHandler):
    """Serves `ROUTES` for the server's backend."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once (no 40 ms stalls)
    server: StandInServer

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _send(self, code: int, payload: Any) -> None:
        if isinstance(payload, PlainText):
            data, kind = payload.encode(), "text/plain; charset=utf-8"
        else:
            data, kind = json.dumps(payload).encode(), "application/json"
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self, required: bool) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw.strip():
            if required:  # FastAPI's "Field required", which SGLang turns into a 400
                raise ValueError("Field required: the request needs a JSON object body")
            return {}
        body = json.loads(raw)
        if not isinstance(body, dict):
            raise ValueError("the request body must be a JSON object")
        return body

    def _route(self, method: str) -> None:
        backend = self.server.backend
        route = ROUTES.get((method, self.path.split("?", 1)[0]))
        if route is None or not isinstance(backend, route.mode):
            self._send(404, {"detail": "Not Found"})  # FastAPI's answer to an unknown route
            return
        try:
            body = self._body(route.body)
            if route.headers:
                reply = route.handler(backend, body, dict(self.headers.items()))
            else:
                reply = route.handler(backend, body)
        except (ValueError, KeyError, TypeError) as exc:
            self._send(400, {"error": {"message": f"{type(exc).__name__}: {exc}"}})
            return
        if isinstance(reply, tuple):
            self._send(*reply)
        else:
            self._send(200, reply)

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")


class StandInServer(ThreadingHTTPServer):
    """The routes of `ROUTES` that `backend` serves, on `host:port` (`port=0`: a free one, then
    `server_port`). Run it with `serve_forever()` in a thread of your own, or `start()` / `stop()`
    (or `with`), which run it in a daemon thread."""

    daemon_threads = True
    request_queue_size = 1024  # many clients connect at once (the default backlog is 5)

    def __init__(
        self, backend: FakeSGLang | ScriptedChat, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.backend = backend
        super().__init__((host, port), _Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def fake(self) -> FakeSGLang:
        """The model side of a model-backed server."""
        if not isinstance(self.backend, FakeSGLang):
            raise AttributeError("a scripted stand-in has no model side")
        return self.backend

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API's base URL."""
        return f"http://{self.server_address[0]!s}:{self.server_address[1]}/v1"

    def start(self: _S) -> _S:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class FakeChatServer(StandInServer):
    """The scripted mode (see the module docstring), on a free port of 127.0.0.1."""

    def __init__(
        self,
        reply: Reply,
        latency_s: Latency | None = None,
        *,
        record: bool = True,
        model: str = "fake",
    ) -> None:
        self.chat = ScriptedChat(reply, latency_s, record=record, model=model)
        super().__init__(self.chat)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return self.chat.bodies

    @property
    def headers(self) -> list[dict[str, str]]:
        return self.chat.headers

    @property
    def max_in_flight(self) -> int:
        return self.chat.max_in_flight


def serve(model_path: str | Path, host: str = "127.0.0.1", port: int = 0) -> StandInServer:
    """A model-backed server over `model_path`, not started (`port=0` picks a free port:
    `server.server_port`); its model side is `server.fake`."""
    return StandInServer(FakeSGLang(model_path), host, port)


def spawn(
    model_path: str | Path,
    log_path: str | Path,
    *,
    env: dict[str, str] | None = None,
    timeout_s: float = 120.0,
) -> tuple[subprocess.Popen[bytes], str]:
    """`python -m paravt.core.testing.stand_in` in its own process on a free port, its output
    in `log_path`; returns the process and its URL once it answers `/health`. Raises
    `RuntimeError` with the end of the log when it exits or does not come up within `timeout_s`.
    The caller kills the process."""
    import httpx

    log_path = Path(log_path)
    port_file = log_path.with_name(log_path.name + ".port")
    port_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "paravt.core.testing.stand_in", "--model-path", str(model_path)]
    with open(log_path, "wb") as log_file:  # the child keeps its own handle
        proc = subprocess.Popen(
            [*cmd, "--port", "0", "--port-file", str(port_file)],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + timeout_s
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise RuntimeError(
                f"the stand-in server over {model_path} did not start:\n"
                + log_path.read_text(errors="replace")[-3000:]
            )
        time.sleep(0.2)
    url = f"http://127.0.0.1:{port_file.read_text().strip()}"
    httpx.get(url + "/health", timeout=10).raise_for_status()
    return proc, url


def main(argv: list[str] | None = None) -> None:
    """`python -m paravt.core.testing.stand_in --model-path DIR [--host H] [--port P]
    [--port-file F]`."""
    parser = argparse.ArgumentParser(
        prog="python -m paravt.core.testing.stand_in", description=__doc__
    )
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--port-file", help="write the bound port here once serving")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s stand_in %(message)s")
    server = serve(args.model_path, args.host, args.port)
    port = server.server_address[1]
    if args.port_file:
        tmp = Path(args.port_file + ".tmp")
        tmp.write_text(str(port))
        tmp.rename(args.port_file)
    log.info("serving %s on http://%s:%d", args.model_path, args.host, port)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
