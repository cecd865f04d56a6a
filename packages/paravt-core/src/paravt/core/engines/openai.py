"""An OpenAI-compatible chat-completions engine (vLLM or SGLang servers), extra `openai`.

Text in, text out: trajectories carry chat messages (their `token_ids` stay empty unless the server
reports token ids), frames travel as base64 PNG/JPEG data URLs. Tool responses are sent the way a
Qwen chat template renders `tool` messages: consecutive ones grouped into one user message of
`<tool_response>` blocks, so servers that insist on `tool_call_id` for role `tool` are not needed.

An assistant prefix (the `<think>\\n` of think-prefix mode) is sent as a final assistant message
with `continue_final_message=true, add_generation_prompt=false`, the vLLM/SGLang extension that
continues it; the returned text is what follows the prefix.
"""

from __future__ import annotations

import asyncio
import base64
import io
import weakref
from collections.abc import Sequence
from typing import Any

from paravt.core.agent_protocol import VideoURL
from paravt.core.protocol import ImagePart, Message
from paravt.core.runtime import Encoded, FinishReason, Generated, SamplingParams, Trajectory

_TOKEN_ID_PREFIX = "token_id:"


def image_data_url(image: Any, *, fmt: str = "png", jpeg_quality: int = 90) -> str:
    """A frame (PIL, numpy HWC/CHW uint8 or torch uint8 CHW/HWC) as a `data:image/...` URL."""
    from PIL import Image

    if not (hasattr(image, "save") and hasattr(image, "mode")):  # not PIL yet
        if hasattr(image, "detach"):  # torch tensor
            image = image.detach().cpu().numpy()
        import numpy as np

        array = np.asarray(image)
        if array.dtype != np.uint8:
            raise TypeError(f"image dtype {array.dtype} is not supported: pass uint8 pixels")
        if array.ndim == 3 and array.shape[0] in (1, 3) and array.shape[-1] not in (1, 3):
            array = array.transpose(1, 2, 0)
        if array.ndim == 3 and array.shape[-1] == 1:
            array = array[..., 0]
        if array.ndim not in (2, 3):
            raise ValueError(f"image shape {array.shape} is not (H, W, C) or (C, H, W)")
        image = Image.fromarray(np.ascontiguousarray(array))
    fmt = fmt.lower()
    if fmt not in ("png", "jpeg"):
        raise ValueError(f"image format {fmt!r} is not 'png' or 'jpeg'")
    buffer = io.BytesIO()
    if fmt == "jpeg":
        image.convert("RGB").save(buffer, format="JPEG", quality=jpeg_quality)
    else:
        image.save(buffer, format="PNG")
    return f"data:image/{fmt};base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def served_model_name(base_url: str, *, timeout_s: float = 30.0) -> str:
    """The first model of `GET {base_url}/models` (an OpenAI-compatible server's served name).
    Raises `RuntimeError` naming the URL when it cannot be read."""
    import httpx

    url = base_url.rstrip("/") + "/models"
    try:
        reply = httpx.get(url, timeout=timeout_s)
        reply.raise_for_status()
        return str(reply.json()["data"][0]["id"])
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
        raise RuntimeError(
            f"cannot read the served model's name from {url} ({type(exc).__name__}: {exc}); is "
            "the server up, and does the URL end in /v1?"
        ) from None


class OpenAIEngine:
    """`Engine` over `POST {base_url}/chat/completions`.

    `base_url`: e.g. `http://127.0.0.1:8000/v1`. `model`: the served model name. `api_key`: sent as
    a bearer token when given. `timeout_s`: per request. `max_concurrency`: requests in flight per
    batch. `image_format`: `png` (lossless) or `jpeg` (at `jpeg_quality`). `logprobs`: ask for
    per-token logprobs and token ids (`return_tokens_as_token_ids`, a vLLM extension); they are
    recorded only when the server returns both. `minimal_body`: send only `model`, `messages`,
    `max_tokens`, `temperature` (and top_k / seed when set), as the released ParaVT driver does;
    otherwise `top_p` and `n` too. `retries`: a request that cannot connect or gets HTTP 5xx is
    sent again up to this many times, `retry_backoff_s x attempt` apart (the released driver
    retries 3 times in all). `extra_body`: merged into every request.

    Each image part is encoded once: a trajectory resends its earlier turns' images on every turn
    (the overview's 64 frames on each of the main agent's turns), and the data URL of an
    `ImagePart` object is kept while that object lives, as the released driver keeps its encoded
    messages. Parts are frozen; an image array changed in place after it was sent is not re-read.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout_s: float = 300.0,
        max_concurrency: int = 16,
        image_format: str = "png",
        jpeg_quality: int = 90,
        logprobs: bool = False,
        minimal_body: bool = False,
        continue_prefix: bool = True,
        retries: int = 0,
        retry_backoff_s: float = 1.5,
        extra_body: dict[str, Any] | None = None,
        transport: Any = None,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        if image_format not in ("png", "jpeg"):
            raise ValueError(f"image_format {image_format!r} is not 'png' or 'jpeg'")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        if not 1 <= jpeg_quality <= 100:
            raise ValueError(f"jpeg_quality must be in 1..100, got {jpeg_quality}")
        self.image_format = image_format
        self.jpeg_quality = jpeg_quality
        self.minimal_body = minimal_body
        self.logprobs = logprobs
        self.continue_prefix = continue_prefix
        if retries < 0 or retry_backoff_s < 0:
            raise ValueError(f"retries ({retries}) and retry_backoff_s must not be negative")
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.extra_body = dict(extra_body or {})
        self._transport = transport  # an httpx transport, for tests and custom retries
        self._ssl_context: Any = None  # built once: httpx builds one per client (~50 ms) otherwise
        # (id(part), format, quality) -> (a weak reference to the part, its data URL); an entry
        # leaves with its part
        self._urls: dict[tuple[int, str, int], tuple[weakref.ref[ImagePart], str]] = {}

    # A text engine tokenizes nothing: the runtime keeps the messages in the trajectory.
    def encode_prompt(self, messages: Sequence[Message], *, assistant_prefix: str = "") -> Encoded:
        """Nothing to tokenize: the trajectory's messages are what is sent."""
        return Encoded([])

    def encode_continuation(
        self, messages: Sequence[Message], *, previous: Generated, assistant_prefix: str = ""
    ) -> Encoded:
        """Nothing to tokenize: the trajectory's messages are what is sent."""
        return Encoded([])

    # ------------------------------------------------------------------------------------ request

    def _content(self, message: Message) -> str | list[dict[str, Any]]:
        if isinstance(message.content, str):
            return message.content
        parts: list[dict[str, Any]] = []
        for part in message.parts:
            if isinstance(part, ImagePart) and isinstance(part.image, VideoURL):
                parts.append({"type": "video_url", "video_url": {"url": part.image.url}})
            elif isinstance(part, ImagePart):
                parts.append({"type": "image_url", "image_url": {"url": self._image_url(part)}})
            elif part.text:
                parts.append({"type": "text", "text": part.text})
        return parts

    def _image_url(self, part: ImagePart) -> str:
        """The part's data URL, encoded on its first request and kept while the part lives."""
        key = (id(part), self.image_format, self.jpeg_quality)
        hit = self._urls.get(key)
        if hit is not None and hit[0]() is part:
            return hit[1]
        url = image_data_url(part.image, fmt=self.image_format, jpeg_quality=self.jpeg_quality)
        urls = self._urls

        def forget(_: weakref.ref[ImagePart]) -> None:
            urls.pop(key, None)

        urls[key] = (weakref.ref(part, forget), url)
        return url

    def chat_messages(self, trajectory: Trajectory) -> list[dict[str, Any]]:
        """The request's `messages` for a trajectory (tool messages grouped into user turns)."""
        out: list[dict[str, Any]] = []
        pending_tool: list[dict[str, Any]] = []

        def flush() -> None:
            if pending_tool:
                out.append({"role": "user", "content": list(pending_tool)})
                pending_tool.clear()

        for m in trajectory.messages:
            if m.role == "tool":
                content = self._content(m)
                body = [{"type": "text", "text": content}] if isinstance(content, str) else content
                if pending_tool:
                    pending_tool.append({"type": "text", "text": "\n"})
                pending_tool.append({"type": "text", "text": "<tool_response>\n"})
                pending_tool.extend(body)
                pending_tool.append({"type": "text", "text": "\n</tool_response>"})
                continue
            flush()
            out.append({"role": m.role, "content": self._content(m)})
        flush()
        return out

    def request_body(self, trajectory: Trajectory, sampling: SamplingParams) -> dict[str, Any]:
        """The JSON body sent for one trajectory."""
        messages = self.chat_messages(trajectory)
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
        }
        if not self.minimal_body or sampling.top_p != 1.0:
            body.update(top_p=sampling.top_p)
        if not self.minimal_body:
            body.update(n=1)
        if sampling.top_k:
            body["top_k"] = sampling.top_k
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if self.logprobs:
            body["logprobs"] = True
            body["return_tokens_as_token_ids"] = True
        if trajectory.assistant_prefix and self.continue_prefix:
            messages.append({"role": "assistant", "content": trajectory.assistant_prefix})
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        body.update(self.extra_body)
        return body

    def parse_choice(self, payload: dict[str, Any], url: str) -> Generated:
        """A `Generated` from a chat-completions response body."""
        try:
            choice = payload["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise RuntimeError(
                f"OpenAIEngine: {url} returned no choices: {str(payload)[:300]}"
            ) from None
        text = (choice.get("message") or {}).get("content") or ""
        reason: FinishReason = "length" if choice.get("finish_reason") == "length" else "stop"
        token_ids: list[int] = []
        logprobs: list[float] | None = None
        entries = ((choice.get("logprobs") or {}).get("content")) or []
        if entries and all(str(e.get("token", "")).startswith(_TOKEN_ID_PREFIX) for e in entries):
            try:
                token_ids = [int(str(e["token"])[len(_TOKEN_ID_PREFIX) :]) for e in entries]
                logprobs = [float(e["logprob"]) for e in entries]
            except (KeyError, ValueError):
                token_ids, logprobs = [], None
        usage = payload.get("usage") or {}
        counted = usage.get("completion_tokens") if isinstance(usage, dict) else None
        return Generated(
            text=text,
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason=reason,
            usage_tokens=counted if isinstance(counted, int) and counted >= 0 else None,
        )

    # --------------------------------------------------------------------------------- generation

    def _client(self) -> Any:
        """An httpx client with this engine's timeout, key and (cached) SSL context."""
        import httpx

        if self._ssl_context is None:
            import ssl

            self._ssl_context = ssl.create_default_context()
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.AsyncClient(
            timeout=self.timeout_s,
            headers=headers,
            transport=self._transport,
            verify=self._ssl_context,
        )

    async def post_body(
        self, body: dict[str, Any], *, client: Any = None, limit: asyncio.Semaphore | None = None
    ) -> dict[str, Any]:
        """POST one chat-completions body; the response's JSON. Connection errors and HTTP 5xx
        are retried `retries` times; anything else that is not a 200 raises, naming the URL."""
        import httpx

        if client is None:
            async with self._client() as own:
                return await self.post_body(body, client=own, limit=limit)
        url = self.base_url + "/chat/completions"
        limit = limit or asyncio.Semaphore(1)
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            async with limit:
                try:
                    response = await client.post(url, json=body)
                except httpx.HTTPError as exc:
                    if not last:
                        await asyncio.sleep(self.retry_backoff_s * (attempt + 1))
                        continue
                    raise RuntimeError(
                        f"OpenAIEngine: cannot reach {url} ({type(exc).__name__}: {exc}); "
                        "is the server running and is base_url right (it usually ends in /v1)?"
                    ) from exc
            if response.status_code >= 500 and not last:  # transient server trouble
                await asyncio.sleep(self.retry_backoff_s * (attempt + 1))
                continue
            if response.status_code != 200:
                raise RuntimeError(
                    f"OpenAIEngine: {url} answered HTTP {response.status_code}: "
                    f"{response.text[:500]}"
                )
            payload = response.json()
            if not isinstance(payload, dict):
                raise RuntimeError(f"OpenAIEngine: {url} returned {type(payload).__name__}")
            return payload
        raise AssertionError("unreachable")

    async def generate(
        self, trajectories: Sequence[Trajectory], sampling: SamplingParams
    ) -> list[Generated]:
        """One chat-completions request per trajectory, up to `max_concurrency` at once."""
        if not trajectories:
            return []
        url = self.base_url + "/chat/completions"
        bodies = [self.request_body(t, sampling) for t in trajectories]
        limit = asyncio.Semaphore(self.max_concurrency)
        # A client per call: one shared client's connection pool costs O(requests x connections)
        # per request event in httpcore (measured by bench/bench_eval.py: 2x slower at 32 samples
        # in flight); the SSL context, the expensive part of a client (~50 ms), is built once.
        async with self._client() as client:

            async def one(body: dict[str, Any]) -> Generated:
                payload = await self.post_body(body, client=client, limit=limit)
                return self.parse_choice(payload, url)

            return list(await asyncio.gather(*(one(b) for b in bodies)))
