"""An `Engine` over SGLang servers' native HTTP API, plus the client side of weight sync (extra `sglang`).

Rollouts run on `python -m sglang.launch_server` processes (one per rollout GPU, or several behind
SGLang's router); trainer processes talk to them over HTTP, so no event loop, CUDA context or
memory pool is shared with training. Token in, token out: prompts are tokenized here with the
processor's own chat template (`HFChatEncoder`, as `HFEngine`), the ids go to the server, and the
sampled ids and their log-probs come back.

The SGLang API this relies on, for SGLang 0.5.6 to 0.5.23 (routes, fields, status codes and body
types checked against SGLang's source, with line citations, by
`packages/paravt-core/tests/test_sglang_contract.py`, which also holds this client and the
stand-in server `paravt.core.testing.stand_in` to them):

- `POST /generate` with `GenerateReqInput` fields `input_ids` (one list), `image_data` (a list of
  images: URLs, file paths or base64 data URLs), `sampling_params` (`max_new_tokens`,
  `temperature`, `top_p`, `top_k`, `skip_special_tokens`, `sampling_seed`: SGLang 0.5.23 rejects
  unknown sampling keys with 400), `return_logprob`, `logprob_start_len`. The reply's `meta_info`
  holds `finish_reason` (`{"type": "stop" | "length" | "abort", ...}`), `prompt_tokens`,
  `weight_version` (the server's version when the reply was built) and, with `return_logprob`,
  `output_token_logprobs` / `input_token_logprobs` as `[logprob, token_id, text_or_null]` triples.
  `output_ids` is the fallback for the ids. Unless the server runs with
  `SGLANG_RETURN_ORIGINAL_LOGPROB=1`, output log-probs are computed after temperature scaling:
  log_softmax(logits / T), what a trainer recomputes with the same T.
- For a multimodal request SGLang decodes `input_ids` to text and lets its processor expand each
  `<|vision_start|><|image_pad|><|vision_end|>` from the image. Our trajectories hold the expanded
  ids (what the trainer scores), so each run of pad tokens is collapsed to one pad before sending;
  `meta_info.prompt_tokens` is compared with our own count to catch any drift.
- `GET /model_info` (`model_path`, `weight_version`, ...; `/get_model_info` is its deprecated
  alias, and `/get_weight_version` is gone since 0.5.12). After `/update_weights_from_disk` SGLang
  reports the loaded directory as `model_path` (and as the served model name): compare versions,
  never paths.
- Weight sync: `POST /update_weights_from_disk` (`UpdateWeightFromDiskReqInput`: `model_path`,
  `load_format`, `abort_all_requests`, `weight_version`; 200 or 400 with
  `{"success", "message", "num_paused_requests"}`), `POST /init_weights_update_group`
  (`master_address`, `master_port`, `rank_offset`, `world_size`, `group_name`, `backend`),
  `POST /update_weights_from_distributed` (`names`, `dtypes`, `shapes`, `group_name`,
  `flush_cache`, `weight_version`); replies `{"success": bool, "message": str}`, 400 on failure.
- `POST /pause_generation` (`mode`: abort, retract, in_place; another mode is a 400) and
  `POST /continue_generation`, both with a JSON body (`{}` at least: an empty POST is a 400).
- `POST /release_memory_occupation` and `POST /resume_memory_occupation` (optional `tags`, e.g.
  `["weights", "kv_cache"]`; 200 with the body `null`), `POST /flush_cache` (plain text; 400 while
  requests run or wait), `GET /health` (empty body).

Every reply's `weight_version` is checked against the version the trainer last pushed
(`expected_weight_version`): a rollout never uses stale weights unknowingly. Requests have timeouts
and are retried with exponential backoff on connection errors and 5xx answers; when a server stays
unreachable a `ServerError` names its URL. A server that accepts generation requests and answers
none is reported: a warning every `stall_warn_s` while requests wait on it with nothing back, and a
`ServerError` (the server declared dead) after `stall_dead_s`.

Both weight paths are exercised on CPU against `paravt.core.testing.stand_in` (our stand-in server; the
distributed one over gloo, with the stand-in joining the group the way `WeightUpdateGroup` forms
it). No real SGLang server was run while writing this (none installs without a GPU): in particular
that SGLang's `init_custom_process_group` rendezvous matches `WeightUpdateGroup` is unverified.

One file because it is one client of one server API: generation, weight pushes (from disk and
over a weight-update group), version checks, health and the stall watch share the server list,
the connection pool and the expected weight version.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from paravt.core.engines.hf import HFChatEncoder, ImageChunk
from paravt.core.engines.openai import image_data_url
from paravt.core.engines.weights import ServerWeights, iter_buckets
from paravt.core.runtime import Generated, SamplingParams, Trajectory, request_seed

log = logging.getLogger("paravt.core.sglang")

_RETRY_STATUS = frozenset({500, 502, 503, 504})


def _retry_reason(url: str, response: Any) -> str:
    """Why a reply is worth retrying (HTTP 5xx), or "" for a 200; any other status is an error."""
    if response.status_code in _RETRY_STATUS:
        return f"HTTP {response.status_code}: {response.text[:300]}"
    if response.status_code != 200:
        raise ServerError(f"{url} answered HTTP {response.status_code}: {response.text[:500]}")
    return ""


class ServerError(RuntimeError):
    """An SGLang server is unreachable, timed out, or refused a request (the message names it)."""


class StaleWeightsError(RuntimeError):
    """A server generated with weights other than the ones the trainer last pushed."""


def _as_urls(urls: str | Sequence[str]) -> list[str]:
    items = [urls] if isinstance(urls, str) else list(urls)
    out = [u.strip().rstrip("/") for u in items if u and u.strip()]
    if not out:
        raise ValueError("SGLangServerEngine: pass at least one server URL, e.g. http://host:30000")
    for u in out:
        if not u.startswith(("http://", "https://")):
            raise ValueError(f"server URL {u!r} must start with http:// or https://")
    return out


def _with_last(items: Iterable[Any]) -> Iterator[tuple[Any, bool]]:
    """`(item, is_last)` pairs, holding one item back."""
    it = iter(items)
    try:
        held = next(it)
    except StopIteration:
        return
    for item in it:
        yield held, False
        held = item
    yield held, True


class SGLangServerEngine(HFChatEncoder, ServerWeights):
    """`Engine` over one or more SGLang servers (or one router URL), native API, token ids in and out.

    `urls`: where generation requests go (a router URL, or the servers themselves; with several,
    each request goes to the one with the fewest requests in flight from this process).
    `weight_urls`: the servers weight updates and memory release/resume go to (defaults to
    `urls`; behind a router, list the servers themselves). `processor`: the model's processor
    (tokenization and images). `timeout_s`: one generation at most; `connect_timeout_s`: opening a
    connection. `retries`: extra attempts on connection errors and 5xx answers, waiting
    `backoff_s`, 2x, 4x ... between them. `max_in_flight`: requests open at once from this process.
    `check_weight_version`: raise `StaleWeightsError` when a reply's weight version is not the one
    last pushed, or one of the `stale_versions` pushed before it (asynchronous training with
    bounded staleness: a rollout started before a push may end after it). `send_seed`: send
    `SamplingParams.seed` as `sampling_seed` (SGLang honours it only with
    `--enable-deterministic-inference`; older servers reject the key). `stall_warn_s`,
    `stall_dead_s`: while generation requests to a server are in flight and none has come back for
    `stall_warn_s`, a warning names the server and the requests in flight (again every
    `stall_warn_s`); after `stall_dead_s` the server is declared dead: its requests, and any sent
    to it later, raise `ServerError`. `transport`, `sync_transport`: httpx transports for the async
    and sync clients (tests).
    """

    continuous_batching = True  # the server batches: the runtime sends requests one by one
    server_name = "SGLang"
    server_errors = (ServerError, StaleWeightsError)

    def __init__(
        self,
        urls: str | Sequence[str],
        processor: Any,
        *,
        weight_urls: str | Sequence[str] | None = None,
        eos_token_ids: Sequence[int] | None = None,
        timeout_s: float = 900.0,
        connect_timeout_s: float = 10.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_in_flight: int = 256,
        image_format: str = "png",
        check_weight_version: bool = True,
        stale_versions: int = 0,
        send_seed: bool = False,
        stall_warn_s: float = 60.0,
        stall_dead_s: float = 300.0,
        transport: Any = None,
        sync_transport: Any = None,
    ) -> None:
        if timeout_s <= 0 or connect_timeout_s <= 0:
            raise ValueError("timeout_s and connect_timeout_s must be positive")
        if stall_warn_s <= 0 or stall_dead_s <= 0:
            raise ValueError(
                f"stall_warn_s ({stall_warn_s}) and stall_dead_s ({stall_dead_s}) must be positive"
            )
        if retries < 0 or backoff_s < 0:
            raise ValueError("retries and backoff_s must be >= 0")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        if stale_versions < 0:
            raise ValueError(f"stale_versions must be >= 0, got {stale_versions}")
        self.urls = _as_urls(urls)
        self.weight_urls = _as_urls(weight_urls) if weight_urls is not None else list(self.urls)
        super().__init__(processor, eos_token_ids=eos_token_ids, keep_images=True)
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_in_flight = max_in_flight
        self.image_format = image_format
        self.check_weight_version = check_weight_version
        self.stale_versions = stale_versions
        self._versions: list[str] = []  # the versions pushed, newest last (stale_versions + 1)
        self.prompt_token_mismatches = 0
        self.send_seed = send_seed
        self._transport = transport
        self._sync_transport = sync_transport
        self._in_flight = dict.fromkeys(self.urls, 0)
        self.stall_warn_s = stall_warn_s
        self.stall_dead_s = stall_dead_s
        # Per URL: when something last came back (or requests began to wait), the stall warnings
        # logged since, and why a server was declared dead.
        self._quiet_since = dict.fromkeys(self.urls, time.monotonic())
        self._stall_warnings = dict.fromkeys(self.urls, 0)
        self._dead: dict[str, str] = {}
        # One httpx client and one semaphore per event loop (both bind to the loop they first run
        # on; the trainer calls asyncio.run once per step).
        self._urls: OrderedDict[int, tuple[weakref.ref[Any], str]] = OrderedDict()
        self._per_loop: weakref.WeakKeyDictionary[Any, tuple[Any, asyncio.Semaphore]] = (
            weakref.WeakKeyDictionary()
        )

    # ---------------------------------------------------------------------------------- requests

    def request_ids(self, trajectory: Trajectory) -> list[int]:
        """The trajectory's ids with every run of image pads collapsed to one pad (SGLang expands
        each from its image again)."""
        out: list[int] = []
        for tid in trajectory.token_ids:
            if tid == self.image_token_id and out and out[-1] == self.image_token_id:
                continue
            out.append(tid)
        return out

    URL_CACHE_SIZE = 4096  # encoded frames kept (a trajectory re-sends its frames every turn)

    def request_images(self, chunks: Iterable[ImageChunk]) -> list[str]:
        """The frames of `chunks` as data URLs (lossless PNG by default), in prompt order. Each
        frame is encoded once: later turns of a trajectory re-send the same chunks."""

        images = []
        for chunk in chunks:
            if chunk.image is None:
                raise ValueError(
                    "an image was encoded without its frame; use this engine's encoder"
                )
            cached = self._urls.get(id(chunk))
            if cached is not None and cached[0]() is chunk:
                self._urls.move_to_end(id(chunk))
                images.append(cached[1])
                continue
            url = image_data_url(chunk.image, fmt=self.image_format)
            self._urls[id(chunk)] = (weakref.ref(chunk), url)
            while len(self._urls) > self.URL_CACHE_SIZE:
                self._urls.popitem(last=False)
            images.append(url)
        return images

    def sampling_params(
        self, sampling: SamplingParams, trajectory: Trajectory | None = None
    ) -> dict[str, Any]:
        """Our sampling knobs in SGLang's names (greedy = temperature 0); with `send_seed`, the
        seed is the trajectory's own (`runtime.request_seed`: one per rollout of a group)."""
        params: dict[str, Any] = {
            "max_new_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "skip_special_tokens": False,
        }
        if sampling.top_k:
            params["top_k"] = sampling.top_k
        if self.send_seed and sampling.seed is not None:
            params["sampling_seed"] = (
                sampling.seed if trajectory is None else request_seed(sampling.seed, trajectory)
            )
        return params

    def request_body(
        self, trajectory: Trajectory, sampling: SamplingParams, n: int = 0
    ) -> dict[str, Any]:
        """The JSON body of `POST /generate` for one trajectory."""
        body: dict[str, Any] = {
            "input_ids": self.request_ids(trajectory),
            "sampling_params": self.sampling_params(sampling, trajectory),
            "return_logprob": True,
            # Log-probs of the output only: start at the last prompt token.
            "logprob_start_len": max(len(trajectory.token_ids) - 1, 0),
        }
        images = self.request_images(self.image_chunks(trajectory, n))
        if images:
            body["image_data"] = images
        return body

    def parse_output(self, output: dict[str, Any], url: str = "") -> Generated:
        """A `Generated` from one `/generate` reply: ids up to and including the end-of-turn token."""
        if not isinstance(output, dict):
            raise ServerError(f"{url}/generate returned {type(output).__name__}, not a JSON object")
        meta = output.get("meta_info") or {}
        triples = meta.get("output_token_logprobs") or []
        if triples:
            ids = [int(t[1]) for t in triples]
            logprobs: list[float] | None = [float(t[0]) for t in triples]
        else:
            ids = [int(t) for t in output.get("output_ids") or []]
            logprobs = None
        reason = (meta.get("finish_reason") or {}).get("type")
        if reason == "abort":
            raise ServerError(f"{url}/generate aborted the request: {meta.get('finish_reason')}")
        for k, tid in enumerate(ids):
            if tid in self.eos_token_ids:
                ids = ids[: k + 1]
                logprobs = logprobs[: k + 1] if logprobs is not None else None
                break
        finish = "length" if reason == "length" else "stop"
        return Generated(self.decode(ids), ids, logprobs, finish)  # type: ignore[arg-type]

    @property
    def expected_weight_version(self) -> str | None:
        """The weight version last pushed (set by the push methods, or by a trainer rank that
        did not push itself); None until the first push."""
        return self._versions[-1] if self._versions else None

    @expected_weight_version.setter
    def expected_weight_version(self, version: str | None) -> None:
        if version is None:
            self._versions = []
        elif not self._versions or self._versions[-1] != str(version):
            self._versions = [*self._versions, str(version)][-(self.stale_versions + 1) :]

    @property
    def accepted_weight_versions(self) -> tuple[str, ...]:
        """The versions a reply may carry: the last pushed and the `stale_versions` before it."""
        return tuple(self._versions)

    def check_version(self, meta: dict[str, Any], url: str) -> None:
        """Raise `StaleWeightsError` when `meta["weight_version"]` is not the version last pushed
        (nor one of the `stale_versions` before it)."""
        if not self.check_weight_version or self.expected_weight_version is None:
            return
        got = meta.get("weight_version")
        if got is None:
            raise StaleWeightsError(
                f"{url} reports no weight_version; this needs an SGLang that returns "
                "meta_info.weight_version (>= 0.5), or check_weight_version=False"
            )
        if str(got) not in self._versions:
            older = ", ".join(map(repr, self._versions[:-1]))
            accepted = f" (or {older})" if older else ""
            raise StaleWeightsError(
                f"{url} generated with weight version {got!r}, but the trainer last pushed "
                f"{self.expected_weight_version!r}{accepted}: the weight update did not reach "
                "this server (list every server in weight_urls when a router is in front of them)"
            )

    # ------------------------------------------------------------------------------------ HTTP

    def _timeout(self) -> Any:
        import httpx

        return httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s)

    def _loop_state(self) -> tuple[Any, asyncio.Semaphore]:
        import httpx

        loop = asyncio.get_running_loop()
        state = self._per_loop.get(loop)
        if state is None:
            limits = httpx.Limits(max_connections=self.max_in_flight)
            client = httpx.AsyncClient(
                timeout=self._timeout(), transport=self._transport, limits=limits
            )
            state = (client, asyncio.Semaphore(self.max_in_flight))
            self._per_loop[loop] = state
        return state

    def _error(
        self, method: str, url: str, attempts: int, started: float, last: str
    ) -> ServerError:
        return ServerError(
            f"SGLang server {url} did not answer {method} after {attempts} attempt(s) in "
            f"{time.monotonic() - started:.1f} s ({last}). Is it running and reachable "
            "(python -m sglang.launch_server ..., see its log)? `paravt-train doctor --server "
            f"{url.rsplit('/', 1)[0] if url.count('/') > 2 else url}` checks it."
        )

    async def _post_async(self, base: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        client, _ = self._loop_state()
        url = base + path
        started = time.monotonic()
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = await self._watched(client.post(url, json=body), base)
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            self._restart_stall_clock(base)
            last = _retry_reason(url, response)
            if last:
                continue
            return response.json()
        raise self._error(f"POST {path}", base, self.retries + 1, started, last)

    def _request_sync(
        self,
        method: str,
        base: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> Any:
        import httpx

        url = base + path
        started = time.monotonic()
        last = ""
        timeout = httpx.Timeout(timeout_s or self.timeout_s, connect=self.connect_timeout_s)
        with httpx.Client(timeout=timeout, transport=self._sync_transport) as client:
            for attempt in range(self.retries + 1):
                if attempt:
                    time.sleep(self.backoff_s * 2 ** (attempt - 1))
                try:
                    response = client.request(method, url, json=body)
                except httpx.TransportError as exc:
                    last = f"{type(exc).__name__}: {exc}"
                    continue
                last = _retry_reason(url, response)
                if last:
                    continue
                try:
                    return response.json()
                except json.JSONDecodeError:
                    return response.text
        raise self._error(f"{method} {path}", base, self.retries + 1, started, last)

    def _pick_url(self) -> str:
        return min(self.urls, key=lambda u: self._in_flight[u])

    # ------------------------------------------------------------------------- stalled servers

    def _restart_stall_clock(self, url: str) -> None:
        """Something came back from `url`, or requests begin to wait on it: its stall clock
        restarts."""
        self._quiet_since[url] = time.monotonic()
        self._stall_warnings[url] = 0

    async def _watched(self, request: Any, url: str) -> Any:
        """Await `request` (to `url`), checking meanwhile whether that server has stalled."""
        task = asyncio.ensure_future(request)
        tick = min(1.0, self.stall_warn_s / 4, self.stall_dead_s / 4)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=tick)
                if done:
                    return task.result()
                self._check_stall(url)
        finally:
            task.cancel()  # no-op once done; a dead server's request is abandoned

    def _check_stall(self, url: str) -> None:
        """Warn every `stall_warn_s` while `url` has requests in flight and nothing came back;
        past `stall_dead_s` declare it dead (`ServerError`)."""
        quiet = time.monotonic() - self._quiet_since[url]
        waiting = self._in_flight[url]
        if quiet >= self.stall_dead_s:
            self._dead.setdefault(
                url,
                f"SGLang server {url} sent nothing back for {quiet:.0f} s with {waiting} "
                f"request(s) in flight: declared dead (stall_dead_s={self.stall_dead_s:g}). "
                "Check its log (out of memory? a hung GPU?) and restart it.",
            )
            raise ServerError(self._dead[url])
        if quiet >= (self._stall_warnings[url] + 1) * self.stall_warn_s:
            self._stall_warnings[url] = int(quiet // self.stall_warn_s)
            log.warning(
                "SGLang server %s has sent nothing back for %.0f s with %d request(s) in flight "
                "(declared dead after %g s)",
                url,
                quiet,
                waiting,
                self.stall_dead_s,
            )

    # -------------------------------------------------------------------------------- generation

    async def generate(
        self, trajectories: Sequence[Trajectory], sampling: SamplingParams
    ) -> list[Generated]:
        """Continue every trajectory once: one `/generate` request each, all in flight together."""
        if not trajectories:
            return []
        bodies = [self.request_body(t, sampling, n) for n, t in enumerate(trajectories)]
        outs = await asyncio.gather(
            *(self._generate_one(b, len(t.token_ids)) for b, t in zip(bodies, trajectories))
        )
        return list(outs)

    async def _generate_one(self, body: dict[str, Any], prompt_len: int) -> Generated:
        _, limit = self._loop_state()
        async with limit:
            url = self._pick_url()
            if url in self._dead:
                raise ServerError(self._dead[url])
            if not self._in_flight[url]:
                self._restart_stall_clock(url)  # nothing was waiting on it until now
            self._in_flight[url] += 1
            try:
                reply = await self._post_async(url, "/generate", body)
            finally:
                self._in_flight[url] -= 1
        if isinstance(reply, list):  # a batch reply to a single request: take its only item
            reply = reply[0] if len(reply) == 1 else reply
        meta = (reply.get("meta_info") or {}) if isinstance(reply, dict) else {}
        self.check_version(meta, url)
        got = meta.get("prompt_tokens")
        if got is not None and int(got) != prompt_len:
            self.prompt_token_mismatches += 1
            if self.prompt_token_mismatches == 1:
                log.warning(
                    "%s counted %s prompt tokens where the trajectory has %d: the server's "
                    "tokenization of the prompt differs from ours (image expansion?); training "
                    "scores our ids, so log-prob ratios may be off",
                    url,
                    got,
                    prompt_len,
                )
        return self.parse_output(reply, url)

    def score(
        self, token_ids: Sequence[int], *, images: Sequence[Any] = (), url: str | None = None
    ) -> list[float]:
        """Log-probs (temperature 1) the server gives tokens 1..n-1 of `token_ids` (each given its
        prefix), with `max_new_tokens=0`: how a trainer checks the server has its weights."""

        body: dict[str, Any] = {
            "input_ids": list(token_ids),
            "sampling_params": {"max_new_tokens": 0, "temperature": 1.0},
            "return_logprob": True,
            "logprob_start_len": 0,
        }
        if images:
            body["image_data"] = [image_data_url(i, fmt=self.image_format) for i in images]
        base = url or self.urls[0]
        reply = self._request_sync("POST", base, "/generate", body)
        meta = reply.get("meta_info") or {}
        self.check_version(meta, base)
        triples = meta.get("input_token_logprobs") or []
        if len(triples) != len(token_ids):
            raise ServerError(
                f"{base}/generate returned {len(triples)} input log-probs for {len(token_ids)} tokens"
            )
        return [float(t[0]) for t in triples[1:]]

    # ------------------------------------------------------------------------ health and control

    def health(self, *, timeout_s: float = 10.0) -> dict[str, Any]:
        """`GET /health` and `GET /model_info` of every URL; raises `ServerError` naming the
        servers that do not answer. Returns the model info per URL."""
        infos: dict[str, Any] = {}
        bad: list[str] = []
        for url in dict.fromkeys([*self.urls, *self.weight_urls]):
            try:
                self._request_sync("GET", url, "/health", timeout_s=timeout_s)
                infos[url] = self.model_info(url, timeout_s=timeout_s)
            except ServerError as exc:
                bad.append(str(exc))
        if bad:
            raise ServerError("unhealthy SGLang server(s):\n" + "\n".join(bad))
        return infos

    def model_info(self, url: str, *, timeout_s: float | None = None) -> dict[str, Any]:
        """`GET /model_info` of one server (SGLang >= 0.5.6; a 404 says the version is older)."""
        try:
            info = self._request_sync("GET", url, "/model_info", timeout_s=timeout_s)
        except ServerError as exc:
            if "HTTP 404" not in str(exc):
                raise
            raise ServerError(
                f"{url} has no /model_info: SGLang older than 0.5.6? ParaVT supports SGLang "
                "0.5.6 to 0.5.23 (pip install 'sglang>=0.5.6')"
            ) from None
        if not isinstance(info, dict):
            raise ServerError(f"{url}/model_info returned {type(info).__name__}, not a JSON object")
        return info

    def server_weight_versions(self) -> dict[str, str | None]:
        """The weight version each weight URL reports (`weight_version` of `GET /model_info`)."""
        out: dict[str, str | None] = {}
        for url in self.weight_urls:
            version = self.model_info(url).get("weight_version")
            out[url] = None if version is None else str(version)
        return out

    def _post_all(self, path: str, body: dict[str, Any], *, timeout_s: float | None = None) -> None:
        for url in self.weight_urls:
            reply = self._request_sync("POST", url, path, body, timeout_s=timeout_s)
            if isinstance(reply, dict) and reply.get("success") is False:
                raise ServerError(f"{url}{path} failed: {reply.get('message')}")

    def flush_cache(self) -> None:
        """`POST /flush_cache` on every weight URL (drop the prefix cache). SGLang refuses (HTTP
        400, plain text) while requests run or wait: that is a `ServerError` saying so."""
        try:
            self._post_all("/flush_cache", {})
        except ServerError as exc:
            if "HTTP 400" not in str(exc):
                raise
            raise ServerError(
                f"{exc.args[0].split(' answered')[0]} did not flush its cache: SGLang flushes only "
                "when no request is running or waiting; flush between steps, or pause generation "
                "first (pause_generation('retract'))"
            ) from None

    def release_memory(self, tags: Sequence[str] | None = None) -> None:
        """`POST /release_memory_occupation`: free the servers' GPU memory (weights and KV cache,
        or only `tags`) while training uses the same GPUs. Needs `--enable-memory-saver`."""
        self._post_all("/release_memory_occupation", {"tags": list(tags)} if tags else {})

    def resume_memory(self, tags: Sequence[str] | None = None) -> None:
        """`POST /resume_memory_occupation`: take the released memory back before generating."""
        self._post_all("/resume_memory_occupation", {"tags": list(tags)} if tags else {})

    def pause_generation(self, mode: str = "retract") -> None:
        """`POST /pause_generation` on every weight URL: the servers stop generating ('retract':
        running requests go back to the waiting queue and are recomputed after
        `continue_generation`; 'in_place': they keep their KV cache; 'abort': they end with
        finish reason abort). A weight update while paused does not wait for the requests in
        flight; they continue on the new weights, each token's log-prob from the weights that
        sampled it."""
        if mode not in ("retract", "in_place", "abort"):
            raise ValueError(f"pause mode must be retract, in_place or abort, got {mode!r}")
        try:
            self._post_all("/pause_generation", {"mode": mode})
        except ServerError as exc:
            if "HTTP 404" not in str(exc):
                raise
            raise ServerError(
                f"{exc}. This SGLang has no /pause_generation (or no 'mode'): upgrade it, or let "
                "weight loads wait for the requests in flight (rollout.server.pause_mode=drain)"
            ) from None

    def continue_generation(self) -> None:
        """`POST /continue_generation` on every weight URL (after `pause_generation`)."""
        self._post_all("/continue_generation", {})

    # ------------------------------------------------------------------------------ weight sync

    def _load_checkpoint(
        self, path: Path, version: str, pause: str | None, fmt: str | None
    ) -> None:
        """`/update_weights_from_disk` on every weight URL: load `path` as `version`
        (`push_weights_from_disk` writes it first), in load format `fmt` (SGLang's default:
        None). `pause` ('retract' / 'in_place'): pause generation around the load only, so it
        does not wait for requests in flight (see `pause_generation`)."""
        body: dict[str, Any] = {"model_path": str(path), "weight_version": version}
        if fmt:
            body["load_format"] = fmt
        with self._paused(pause):
            self._post_all("/update_weights_from_disk", body)

    @contextlib.contextmanager
    def _paused(self, mode: str | None) -> Iterator[None]:
        if mode is None:
            yield
            return
        self.pause_generation(mode)
        try:
            yield
        finally:
            self.continue_generation()

    def push_weights_distributed(
        self,
        named_tensors: Iterable[tuple[str, Any]],
        version: str,
        group: Any,
        *,
        bucket_bytes: int = 1 << 30,
        group_name: str = "weight_update_group",
        pause: str | None = None,
    ) -> int:
        """Broadcast `(name, tensor)` pairs from this process (rank 0 of `group`, see
        `init_weight_update_group`) to the servers, one `/update_weights_from_distributed` request
        per bucket of about `bucket_bytes` (names, dtypes, shapes), the last one flushing the
        cache and tagging `version`; at most two buckets are held at once. Tensors must live on
        the group's device. `pause`: as in `push_weights_from_disk`, from the first bucket to the
        last. Tested on gloo against the stand-in only. Returns the number of tensors sent."""
        with self._paused(pause):
            sent = self._push_distributed(named_tensors, version, group, bucket_bytes, group_name)
        self.expected_weight_version = str(version)
        return sent

    def _push_distributed(
        self,
        named_tensors: Iterable[tuple[str, Any]],
        version: str,
        group: Any,
        bucket_bytes: int,
        group_name: str,
    ) -> int:
        import threading

        sent = 0
        for bucket, last in _with_last(iter_buckets(named_tensors, bucket_bytes)):
            sent += len(bucket)
            body: dict[str, Any] = {
                "names": [n for n, _ in bucket],
                "dtypes": [str(t.dtype).removeprefix("torch.") for _, t in bucket],
                "shapes": [list(t.shape) for _, t in bucket],
                "group_name": group_name,
                "flush_cache": last,
            }
            if last:
                body["weight_version"] = str(version)
            errors: list[BaseException] = []

            def post(body: dict[str, Any] = body, errors: list[BaseException] = errors) -> None:
                try:
                    self._post_all("/update_weights_from_distributed", body)
                except BaseException as exc:
                    errors.append(exc)

            # The servers wait in the broadcast after accepting the request: post in a thread while
            # this process broadcasts, then join.
            thread = threading.Thread(target=post, daemon=True)
            thread.start()
            for _, tensor in bucket:
                group.broadcast(tensor.contiguous(), 0)
            thread.join(self.timeout_s)
            if thread.is_alive():
                raise ServerError(
                    f"/update_weights_from_distributed did not return in {self.timeout_s:g} s"
                )
            if errors:
                raise errors[0]
        if not sent:
            raise ValueError("push_weights_distributed: no tensors to send")
        return sent

    def init_weight_update_group(
        self,
        master_address: str,
        master_port: int,
        *,
        server_ranks: Sequence[int] | None = None,
        backend: str = "nccl",
        group_name: str = "weight_update_group",
        timeout_s: float = 600.0,
    ) -> Any:
        """Form the weight-update process group of this process (rank 0) and every weight URL's
        ranks (`server_ranks[i]` GPUs for server i: its tp x dp size; default 1 each), through
        `POST /init_weights_update_group`. Returns a `WeightUpdateGroup` (its `broadcast(tensor,
        src)` is what `push_weights_distributed` uses). Tested on gloo against the stand-in only."""
        import threading

        ranks = list(server_ranks or [1] * len(self.weight_urls))
        if len(ranks) != len(self.weight_urls):
            raise ValueError(
                f"server_ranks has {len(ranks)} entries for {len(self.weight_urls)} URLs"
            )
        world = 1 + sum(ranks)
        errors: list[BaseException] = []
        threads = []
        offset = 1
        for url, n in zip(self.weight_urls, ranks):
            body = {
                "master_address": master_address,
                "master_port": master_port,
                "rank_offset": offset,
                "world_size": world,
                "group_name": group_name,
                "backend": backend,
            }
            offset += n

            def post(url: str = url, body: dict[str, Any] = body) -> None:
                try:
                    reply = self._request_sync(
                        "POST", url, "/init_weights_update_group", body, timeout_s=timeout_s
                    )
                    if isinstance(reply, dict) and reply.get("success") is False:
                        raise ServerError(
                            f"{url}/init_weights_update_group: {reply.get('message')}"
                        )
                except BaseException as exc:
                    errors.append(exc)

            threads.append(threading.Thread(target=post, daemon=True))
        for t in threads:
            t.start()
        group = WeightUpdateGroup.create(
            master_address,
            master_port,
            world,
            backend=backend,
            group_name=group_name,
            timeout_s=timeout_s,
        )
        for t in threads:
            t.join(timeout_s)
        if errors:
            raise errors[0]
        return group


class WeightUpdateGroup:
    """One member of a process group shared by trainer rank 0 and SGLang servers' ranks, made the
    way SGLang's `init_custom_process_group` makes it (as verl, slime, AReaL and OpenRLHF do on the
    trainer side): a TCP rendezvous at `master_address:master_port`, the store prefixed by the
    group name, torch's process-group helper, and the group registered with its ranks so
    `torch.distributed.broadcast(..., group=...)` works. It leaves the trainer's default group
    alone. Uses private torch.distributed helpers (as those frameworks do)."""

    def __init__(self, pg: Any) -> None:
        self.pg = pg

    @classmethod
    def create(
        cls,
        master_address: str,
        master_port: int,
        world_size: int,
        *,
        rank: int = 0,
        backend: str = "nccl",
        group_name: str = "weight_update_group",
        timeout_s: float = 600.0,
    ) -> WeightUpdateGroup:
        """Rendezvous as `rank` of `world_size` and build the backend's process group."""
        import inspect
        from datetime import timedelta

        from torch.distributed.distributed_c10d import (
            Backend,
            PrefixStore,
            _new_process_group_helper,
            _world,
            rendezvous,
        )

        if backend not in ("nccl", "gloo"):
            raise ValueError(f"backend {backend!r} is not 'nccl' or 'gloo'")
        timeout = timedelta(seconds=timeout_s)
        url = f"tcp://{master_address}:{master_port}"
        store, rank, world_size = next(rendezvous(url, rank, world_size, timeout=timeout))
        store.set_timeout(timeout)
        store = PrefixStore(group_name, store)
        params = inspect.signature(_new_process_group_helper).parameters
        options = "backend_options" if "backend_options" in params else "pg_options"
        pg, _ = _new_process_group_helper(
            world_size,
            rank,
            [],
            Backend(backend),
            store,
            group_name=group_name,
            timeout=timeout,
            **{options: None},
        )
        _world.pg_group_ranks[pg] = {i: i for i in range(world_size)}
        return cls(pg)

    def broadcast(self, tensor: Any, src: int = 0) -> None:
        """Broadcast `tensor` from group rank `src` to every member."""
        import torch.distributed as dist

        dist.broadcast(tensor, src=src, group=self.pg)
