"""An adapter to SGLang's offline engine (`sglang.Engine`), extra `sglang`.

NOT YET EXERCISED ON A GPU: written against SGLang's documented offline API and unit-tested only
through a stand-in object that records calls. Treat the first GPU run as its real test.

What it relies on (SGLang 0.5.x):
- `await engine.async_generate(input_ids=[[...], ...], image_data=[[img, ...], ...],
  sampling_params={...}, return_logprob=True)` returns one dict per request with
  `meta_info["output_token_logprobs"]` as `(logprob, token_id, text)` triples and
  `meta_info["finish_reason"]["type"]` in {"stop", "length", "abort"} (`output_ids` as fallback).
- SGLang decodes `input_ids` back to text and expands each `<|vision_start|><|image_pad|>
  <|vision_end|>` (one pad per image) with its own processor. Our trajectories hold the *expanded*
  ids (what a trainer scores), so each run of pad tokens is collapsed to one pad before sending, and
  the raw frames (kept by the encoder) are sent as PIL images.
- `engine.update_weights_from_tensor(named_tensors=[(name, tensor), ...], load_format=None,
  flush_cache=True)` for weight sync. It drives its own event loop: call `sync_weights` from
  synchronous training code, not from inside a running asyncio loop.

Tokenization is `HFChatEncoder`'s (the processor's own chat template), so token-in token-out holds
exactly as with `HFEngine`. Not supported here: suppressing image placeholders in the output (the
HF engine does) and sampling seeds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from paravt.core.engines.hf import HFChatEncoder, ImageChunk
from paravt.core.runtime import Generated, SamplingParams, Trajectory


class SGLangEngine(HFChatEncoder):
    """`Engine` over an `sglang.Engine`.

    Pass a running `engine` (and its `processor`), or `model_path` to start one with
    `engine_kwargs` (e.g. `{"mem_fraction_static": 0.6}`); the processor then defaults to
    `AutoProcessor.from_pretrained(model_path)`. `eos_token_ids` defaults to the model's
    generation config.
    """

    def __init__(
        self,
        engine: Any = None,
        processor: Any = None,
        *,
        model_path: str | None = None,
        engine_kwargs: dict[str, Any] | None = None,
        eos_token_ids: Sequence[int] | None = None,
    ) -> None:
        if engine is None and model_path is None:
            raise ValueError("SGLangEngine: pass a running sglang engine or a model_path")
        if processor is None:
            if model_path is None:
                raise ValueError("SGLangEngine(engine, processor=None): pass the model's processor")
            from transformers import AutoProcessor

            processor = AutoProcessor.from_pretrained(model_path)
        if eos_token_ids is None and model_path is not None:
            from transformers import GenerationConfig

            try:
                eos = GenerationConfig.from_pretrained(model_path).eos_token_id
            except OSError:
                eos = None
            eos_token_ids = eos if isinstance(eos, list) else ([eos] if eos is not None else None)
        if engine is None:
            try:
                import sglang
            except ImportError as exc:
                raise ImportError(
                    'SGLangEngine needs SGLang on a GPU machine: pip install "paravt-core[sglang]"'
                ) from exc
            engine = sglang.Engine(model_path=model_path, **(engine_kwargs or {}))
        super().__init__(processor, eos_token_ids=eos_token_ids, keep_images=True)
        self.engine = engine
        self.vision_start_id: int = self.tokenizer.convert_tokens_to_ids("<|vision_start|>")

    # ---------------------------------------------------------------------------------- requests

    def request_ids(self, trajectory: Trajectory) -> list[int]:
        """The trajectory's ids with every run of image pads collapsed to one pad (SGLang expands
        them again from the image)."""
        out: list[int] = []
        for tid in trajectory.token_ids:
            if tid == self.image_token_id and out and out[-1] == self.image_token_id:
                continue
            out.append(tid)
        return out

    @staticmethod
    def request_images(chunks: Iterable[ImageChunk]) -> list[Any]:
        from PIL import Image

        images = []
        for chunk in chunks:
            if chunk.image is None:
                raise ValueError(
                    "an image was encoded without its frame; use this engine's encoder"
                )
            images.append(Image.fromarray(chunk.image.permute(1, 2, 0).cpu().numpy()))
        return images

    @staticmethod
    def sampling_params(sampling: SamplingParams) -> dict[str, Any]:
        """Our sampling knobs in SGLang's names (greedy = temperature 0)."""
        params: dict[str, Any] = {
            "max_new_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "skip_special_tokens": False,
        }
        if sampling.top_k:
            params["top_k"] = sampling.top_k
        return params

    def parse_output(self, output: dict[str, Any]) -> Generated:
        """A `Generated` from one SGLang result dict."""
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
            raise RuntimeError(
                f"SGLangEngine: the request was aborted: {meta.get('finish_reason')}"
            )
        # Our contract: ids up to and including the end-of-turn token, nothing after.
        for k, tid in enumerate(ids):
            if tid in self.eos_token_ids:
                ids = ids[: k + 1]
                logprobs = logprobs[: k + 1] if logprobs is not None else None
                break
        finish = "length" if reason == "length" else "stop"
        return Generated(self.decode(ids), ids, logprobs, finish)  # type: ignore[arg-type]

    # -------------------------------------------------------------------------------- generation

    async def generate(
        self, trajectories: Sequence[Trajectory], sampling: SamplingParams
    ) -> list[Generated]:
        """Continue every trajectory once, in one `async_generate` call."""
        if not trajectories:
            return []
        input_ids = [self.request_ids(t) for t in trajectories]
        images = [self.request_images(self.image_chunks(t, n)) for n, t in enumerate(trajectories)]
        kwargs: dict[str, Any] = {
            "input_ids": input_ids,
            "sampling_params": self.sampling_params(sampling),
            "return_logprob": True,
        }
        if any(images):
            kwargs["image_data"] = images
        outputs = await self.engine.async_generate(**kwargs)
        if isinstance(outputs, dict):
            outputs = [outputs]
        if len(outputs) != len(trajectories):
            raise RuntimeError(
                f"SGLangEngine: {len(outputs)} results for {len(trajectories)} requests"
            )
        return [self.parse_output(o) for o in outputs]

    # ------------------------------------------------------------------------------- weight sync

    def sync_weights(self, model_or_tensors: Any, *, bucket_bytes: int = 512 << 20) -> int:
        """Push a policy's weights into the engine with `update_weights_from_tensor`.

        `model_or_tensors`: a torch module (its `named_parameters()`) or `(name, tensor)` pairs
        named as in the checkpoint. Sent in buckets of about `bucket_bytes`; the KV cache is
        flushed once, after the last bucket. Returns the number of tensors sent. Call it from
        synchronous code (SGLang runs its own event loop here).
        """
        if hasattr(model_or_tensors, "named_parameters"):
            named = [(n, p.detach()) for n, p in model_or_tensors.named_parameters()]
        else:
            named = [(n, t.detach() if hasattr(t, "detach") else t) for n, t in model_or_tensors]
        if not named:
            raise ValueError("sync_weights: no tensors to send")
        buckets: list[list[tuple[str, Any]]] = [[]]
        size = 0
        for name, tensor in named:
            nbytes = tensor.numel() * tensor.element_size()
            if buckets[-1] and size + nbytes > bucket_bytes:
                buckets.append([])
                size = 0
            buckets[-1].append((name, tensor))
            size += nbytes
        for k, bucket in enumerate(buckets):
            result = self.engine.update_weights_from_tensor(
                named_tensors=bucket, load_format=None, flush_cache=k == len(buckets) - 1
            )
            ok = result[0] if isinstance(result, tuple) else getattr(result, "success", True)
            if ok is False:
                message = result[1] if isinstance(result, tuple) else result
                raise RuntimeError(f"SGLangEngine: weight update failed: {message}")
        return len(named)
