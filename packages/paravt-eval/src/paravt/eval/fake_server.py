"""A fake OpenAI-compatible chat server, for tests, benchmarks and trying the plugin without a GPU.

`FakeChatServer(reply, latency_s=None)` serves `POST /v1/chat/completions` on 127.0.0.1 (one
thread per request, so concurrent requests overlap like on a continuously batching server) and
`GET /v1/models`. `reply(body) -> str` writes the assistant text; `latency_s(body) -> float` (if
given) is how long the server waits before answering. Every request body is recorded in `bodies`
(set `record=False` to keep none, e.g. in a benchmark).

    with FakeChatServer(lambda body: "<answer>B</answer>") as server:
        ...  # base_url=server.base_url, model="fake"
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[dict[str, Any]], str]
Latency = Callable[[dict[str, Any]], float]


class FakeChatServer:
    """See the module docstring."""

    def __init__(
        self,
        reply: Reply,
        latency_s: Latency | None = None,
        *,
        record: bool = True,
        model: str = "fake",
    ) -> None:
        self.reply = reply
        self.latency_s = latency_s
        self.record = record
        self.model = model
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out at once (no 40 ms stalls)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model}]})
                else:
                    self._send(404, {"error": f"no route {self.path}"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    if server.record:
                        server.bodies.append(body)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if server.latency_s is not None:
                        time.sleep(max(0.0, float(server.latency_s(body))))
                    text = server.reply(body)
                    status, payload = 200, _completion(text)
                except Exception as exc:  # a scripted reply that fails is a 500, as on a server
                    status, payload = 500, {"error": f"{type(exc).__name__}: {exc}"}
                finally:
                    with server.lock:
                        server.in_flight -= 1
                self._send(status, payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def start(self) -> FakeChatServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeChatServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # many clients connect at once (the default backlog is 5)


def _completion(text: str) -> dict[str, Any]:
    return {
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
    """How many assistant messages a request carries (its turn index), not counting a final
    assistant prefix that the server is asked to continue."""
    messages = body.get("messages", [])
    n = sum(1 for m in messages if m.get("role") == "assistant")
    if body.get("continue_final_message") and messages and messages[-1].get("role") == "assistant":
        n -= 1
    return n
