"""The transformers engine: in-process batched generation with per-token logprobs (extra `hf`).

Prompts are tokenized through the processor's own chat template, once per piece: the first prompt,
then after every generation a continuation (closing the assistant turn when the model did not,
rendering the new messages, opening the next assistant turn). A trajectory's token ids are those
pieces plus the generated ids as sampled, so training scores exactly what was generated.

Images (numpy HWC/CHW uint8, torch uint8 (C, H, W) or PIL) are expanded to the right number of
`<|image_pad|>` tokens by the processor; the processed pixels of each image are kept in
`Encoded.media` as an `ImageChunk`, and one batched `model.generate` concatenates them in order.

The engine holds a reference to its model (`engine.model`), never a copy: a trainer that passes its
policy module shares the weights, and every optimizer step is seen by the next rollout.

Seeded sampling comes in two kinds. By default one seed per batch (`torch.manual_seed` before
`model.generate`): which draws a row gets depends on the rows beside it and their order, and the
runtime's batches depend on timing. With `SamplingParams.batch_invariant` and a `sample_key` on
every trajectory (the runtime sets them), each row samples by the Gumbel-max trick under greedy
decoding: temperature, top-k and top-p warp its logits as before, `KeyedGumbelNoise` adds Gumbel
noise drawn from a generator seeded by (seed, the row's key, the token's position in its own
trajectory), and the argmax is a sample of the same distribution. A row's tokens then depend on its
own logits, key and positions only; what is left of the batch is float rounding in the logits of
differently shaped batches (tests/test_batch_invariant_sampling.py measures it).

One file because the engine's encoding, batching and both sampling paths share one tokenizer and
one model call: split, each half would need the other's private state.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paravt.core.protocol import ImagePart, Message
from paravt.core.runtime import Encoded, Generated, SamplingParams, Trajectory

if TYPE_CHECKING:  # pragma: no cover
    import torch

_MARKER = "\u2063PARAVT_TURN_MARKER\u2063"
# Tokens the policy must never emit: a generated image placeholder has no pixels behind it and would
# break the next turn's vision input.
_VISION_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")


@dataclass
class ImageChunk:
    """One processed image: its patch rows of `pixel_values` and its `(t, h, w)` grid."""

    pixel_values: torch.Tensor
    grid_thw: torch.Tensor
    image: torch.Tensor | None = None  # the uint8 (3, H, W) frame, when the encoder keeps it

    @property
    def num_tokens(self) -> int:
        return int(self.grid_thw.prod().item())


def to_image_tensor(image: Any) -> torch.Tensor:
    """A frame as a uint8 (3, H, W) tensor. Accepts PIL images, numpy arrays (HWC or CHW) and
    torch tensors (CHW or HWC), with 1 or 3 channels, dtype uint8."""
    import numpy as np
    import torch

    if hasattr(image, "convert") and hasattr(image, "size"):  # PIL
        image = np.asarray(image.convert("RGB"))
    if isinstance(image, np.ndarray):
        array = np.ascontiguousarray(image)
        image = torch.from_numpy(array if array.flags.writeable else array.copy())
    if not isinstance(image, torch.Tensor):
        raise TypeError(
            f"image of type {type(image).__name__} is not supported: pass a PIL image, a numpy "
            "array or a torch tensor of uint8 pixels"
        )
    if image.dtype != torch.uint8:
        raise TypeError(
            f"image dtype {image.dtype} is not supported: pass uint8 pixels (0-255), e.g. "
            "(x * 255).round().to(torch.uint8)"
        )
    if image.ndim == 2:
        image = image.unsqueeze(0)
    if image.ndim != 3:
        raise ValueError(f"image shape {tuple(image.shape)} is not (C, H, W) or (H, W, C)")
    if image.shape[0] not in (1, 3) and image.shape[-1] in (1, 3):
        image = image.permute(2, 0, 1)
    if image.shape[0] == 1:
        image = image.expand(3, -1, -1)
    if image.shape[0] != 3:
        raise ValueError(f"image shape {tuple(image.shape)} has no 1 or 3 channel axis")
    return image.contiguous()


def token_seed(seed: int, key: int, position: int) -> int:
    """The generator seed of one sampled token: the run's `seed`, the request's `key`
    (`Trajectory.sample_key`) and the token's `position` in its own trajectory (its unpadded
    prompt length plus the step), hashed (blake2b) to 63 bits, the same in every process."""
    digest = hashlib.blake2b(f"{seed}/{key}/{position}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


class KeyedGumbelNoise:
    """A logits processor that turns greedy decoding into sampling, row by row: it adds to row i
    Gumbel(0, 1) noise drawn from a generator seeded by `token_seed(seed, keys[i], position)`, the
    position being `prompt_lengths[i]` plus the step, so that the argmax of the (warped) scores
    plus noise is a sample of softmax(scores) that depends on nothing else in the batch.

    `width`: the padded prompt width of the batch (`input_ids` grows from it by one per step).
    Tokens masked to -inf (suppressed, outside top-k/top-p) stay -inf. The noise is float32 from
    the scores' device's generator: the same on every machine of one device type, not across
    device types."""

    def __init__(
        self, seed: int, keys: Sequence[int], prompt_lengths: Sequence[int], width: int
    ) -> None:
        if len(keys) != len(prompt_lengths):
            raise ValueError(f"{len(keys)} keys for {len(prompt_lengths)} rows")
        self.seed = seed
        self.keys = list(keys)
        self.prompt_lengths = list(prompt_lengths)
        self.width = width
        self._generators: list[torch.Generator] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        import torch

        if scores.shape[0] != len(self.keys):
            raise ValueError(f"{scores.shape[0]} rows of scores for {len(self.keys)} keys")
        if not self._generators or self._generators[0].device != scores.device:
            self._generators = [torch.Generator(device=scores.device) for _ in self.keys]
        step = input_ids.shape[1] - self.width
        uniform = torch.empty(scores.shape, dtype=torch.float32, device=scores.device)
        for i, (key, length, generator) in enumerate(
            zip(self.keys, self.prompt_lengths, self._generators)
        ):
            generator.manual_seed(token_seed(self.seed, key, length + step))
            uniform[i].uniform_(generator=generator)
        # Gumbel(0, 1) = -log(-log U); U = 0 (probability 2^-24) is read as the smallest float
        gumbel = uniform.clamp_(min=torch.finfo(torch.float32).tiny).log_().neg_().log_().neg_()
        return scores + gumbel.to(scores.dtype)


def _hf_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Our messages as chat-template dicts (images become `{"type": "image"}` placeholders)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
            continue
        parts: list[dict[str, Any]] = []
        for part in m.parts:
            if isinstance(part, ImagePart):
                parts.append({"type": "image"})
            else:
                parts.append({"type": "text", "text": part.text})
        out.append({"role": m.role, "content": parts})
    return out


def _images(messages: Sequence[Message]) -> list[Any]:
    return [img for m in messages for img in m.images]


class HFChatEncoder:
    """Tokenization through a processor's own chat template (no model needed).

    `processor`: a transformers processor (or a bare tokenizer for text-only use) with a chat
    template. `eos_token_ids`: the ids that end a generation (first = end of turn); defaults to the
    tokenizer's eos. `keep_images`: also keep each frame's uint8 tensor in its `ImageChunk`
    (engines that send raw images, such as SGLang, need them).
    """

    def __init__(
        self,
        processor: Any,
        *,
        eos_token_ids: Sequence[int] | None = None,
        keep_images: bool = False,
    ) -> None:
        self.processor = processor
        self.keep_images = keep_images
        self.tokenizer = getattr(processor, "tokenizer", processor)
        template = getattr(processor, "chat_template", None) or getattr(
            self.tokenizer, "chat_template", None
        )
        if not template:
            raise ValueError(
                "the processor and tokenizer have no chat template; save one with the model "
                "(processor.chat_template = ...)"
            )
        self.chat_template: str = template
        self.image_token_id: int = self.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        image_processor = getattr(processor, "image_processor", None)
        self.merge_size: int = int(getattr(image_processor, "merge_size", 2))
        eos_ids = list(eos_token_ids or [])
        if self.tokenizer.eos_token_id is not None:
            eos_ids.append(self.tokenizer.eos_token_id)
        if not eos_ids:
            raise ValueError("no eos token: pass eos_token_ids or use a tokenizer with eos_token")
        self.eos_token_ids: list[int] = list(dict.fromkeys(int(i) for i in eos_ids))
        self.end_of_turn_id: int = self.eos_token_ids[0]
        pad = self.tokenizer.pad_token_id
        self.pad_token_id: int = int(pad) if pad is not None else self.end_of_turn_id
        # How the template closes an assistant turn, and what it renders before new messages.
        self._base = [
            {"role": "user", "content": "."},
            {"role": "assistant", "content": _MARKER},
        ]
        self._base_text = self._render(self._base, add_generation_prompt=False)
        cut = self._base_text.rfind(_MARKER)
        if cut < 0:
            raise ValueError("the chat template drops assistant content")
        self.turn_suffix: str = self._base_text[cut + len(_MARKER) :]

    # ----------------------------------------------------------------------------------- encoding

    def _render(self, conversation: list[dict[str, Any]], *, add_generation_prompt: bool) -> str:
        text = self.tokenizer.apply_chat_template(
            conversation,
            chat_template=self.chat_template,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )
        return str(text)

    def _encode_text(self, text: str, images: list[Any]) -> Encoded:
        tensors = [to_image_tensor(img) for img in images]
        batch = self.processor(
            text=[text],
            images=tensors or None,
            return_tensors="pt",
            add_special_tokens=False,
        )
        ids = batch["input_ids"][0].tolist()
        media: list[Any] = []
        if tensors:
            grids = batch["image_grid_thw"]
            rows = grids.prod(-1).tolist()
            offset = 0
            for grid, n in zip(grids, rows):
                source = tensors[len(media)] if self.keep_images else None
                media.append(
                    ImageChunk(batch["pixel_values"][offset : offset + n], grid.clone(), source)
                )
                offset += n
        return Encoded(ids, media)

    def encode_prompt(self, messages: Sequence[Message], *, assistant_prefix: str = "") -> Encoded:
        """Token ids (and processed images) of a first prompt: the chat template rendering of
        `messages`, the generation prompt, then `assistant_prefix`."""
        text = self._render(_hf_messages(messages), add_generation_prompt=True) + assistant_prefix
        return self._encode_text(text, _images(messages))

    def continuation_text(
        self, messages: Sequence[Message], *, previous: Generated, assistant_prefix: str = ""
    ) -> str:
        """The text `encode_continuation` tokenizes (useful to inspect the template's output)."""
        full = self._render(self._base + _hf_messages(messages), add_generation_prompt=True)
        if not full.startswith(self._base_text):
            raise ValueError(
                "the chat template renders earlier turns differently once more messages "
                "follow; token-in token-out needs a template whose rendering only appends"
            )
        closing = self.turn_suffix
        if previous.token_ids and previous.token_ids[-1] in self.eos_token_ids:
            eos_text = self.tokenizer.convert_ids_to_tokens(previous.token_ids[-1])
            if closing.startswith(eos_text):
                closing = closing[len(eos_text) :]
        return closing + full[len(self._base_text) :] + assistant_prefix

    def encode_continuation(
        self, messages: Sequence[Message], *, previous: Generated, assistant_prefix: str = ""
    ) -> Encoded:
        """What follows a generation: the end of the assistant turn (unless `previous` already
        ended with the end-of-turn token), `messages` as the template renders them after an
        assistant turn (no default system header), the generation prompt and `assistant_prefix`."""
        text = self.continuation_text(
            messages, previous=previous, assistant_prefix=assistant_prefix
        )
        return self._encode_text(text, _images(messages))

    def encode_generation(self, text: str, *, end_turn: bool = True) -> Generated:
        """`text` tokenized as if the model had generated it (plus the end-of-turn token when
        `end_turn`); logprobs unknown. Scripted turns use it."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if end_turn:
            ids = [*ids, self.end_of_turn_id]
        return Generated(self.decode(ids), ids, None, "stop" if end_turn else "length")

    def decode(self, token_ids: Sequence[int]) -> str:
        """Generated ids as text: protocol tags kept, chat special tokens dropped."""
        return str(
            self.tokenizer.decode(
                list(token_ids), skip_special_tokens=True, clean_up_tokenization_spaces=False
            )
        )

    # ------------------------------------------------------------------------------- validation

    def image_chunks(self, trajectory: Trajectory, n: int = 0) -> list[ImageChunk]:
        """The trajectory's media, checked against its image tokens."""
        if not trajectory.token_ids:
            raise ValueError(f"trajectory {n} has no prompt tokens; encode a prompt first")
        own = [c for c in trajectory.media if isinstance(c, ImageChunk)]
        if len(own) != len(trajectory.media):
            raise TypeError(
                f"trajectory {n} holds media that this engine did not encode; encode its prompt "
                "with this engine"
            )
        want = sum(c.num_tokens for c in own) // self.merge_size**2
        have = sum(1 for t in trajectory.token_ids if t == self.image_token_id)
        if want != have:
            raise ValueError(
                f"trajectory {n} has {have} image tokens but its media need {want}; the "
                "token ids and media are out of step"
            )
        return own


class HFEngine(HFChatEncoder):
    """The `Engine` of a transformers vision-language model (Qwen3-VL and relatives).

    `model_or_path`: a loaded model (shared, not copied: training passes its policy) or a path
    loadable by `AutoModelForImageTextToText`. `processor`: defaults to `AutoProcessor` from the
    path (required when a model object is given). `device` and `dtype` apply when loading from a
    path; a given model stays where it is.

    `inline`: run `generate` on the caller's thread (blocking the event loop while it generates)
    rather than on the engine's generation thread. Default: inline when the model is on the CPU.
    There torch's OpenMP threads are per calling thread: a second thread doing the generation
    brings a second thread team whose spin-waits compete with the trainer's own on the same cores
    (bench/bench_train.py, 2 cores, 2 threads: 0.54 s vs 0.37 s per RL step). On a GPU the
    generation thread keeps the event loop free for tool calls while the device generates.
    """

    def __init__(
        self,
        model_or_path: Any,
        processor: Any = None,
        *,
        device: str = "cpu",
        dtype: Any = None,
        inline: bool | None = None,
    ) -> None:
        from transformers import AutoModelForImageTextToText, AutoProcessor

        if isinstance(model_or_path, (str, Path)):
            path = str(model_or_path)
            kwargs: dict[str, Any] = {} if dtype is None else {"dtype": dtype}
            self.model = AutoModelForImageTextToText.from_pretrained(path, **kwargs).to(device)
            processor = processor or AutoProcessor.from_pretrained(path)
        else:
            if processor is None:
                raise ValueError(
                    "HFEngine(model, processor=None): pass the processor that belongs to the "
                    "model object, or pass a path instead of a model"
                )
            self.model = model_or_path
        eos = self.model.generation_config.eos_token_id
        eos_ids = eos if isinstance(eos, list) else ([eos] if eos is not None else [])
        super().__init__(processor, eos_token_ids=eos_ids)
        self._lock = threading.Lock()
        # Unless inline, one long-lived thread runs every `generate` (started on first use):
        # generation leaves the event loop free, and a thread that stays alive is about 1.6x
        # faster on CPU than a fresh one per call (`asyncio.to_thread` starts one per event loop;
        # bench/bench_train.py measured 0.39 s vs 0.25 s for one 8 x 96-token batch on 2 cores).
        self._generate_thread: ThreadPoolExecutor | None = None
        if inline is None:
            first = next(iter(self.model.parameters()), None)
            inline = first is None or first.device.type == "cpu"
        self.inline = inline
        self._suppress = [
            i
            for i in (self.tokenizer.convert_tokens_to_ids(t) for t in _VISION_TOKENS)
            if isinstance(i, int) and i >= 0 and i != self.tokenizer.unk_token_id
        ]

    # --------------------------------------------------------------------------------- generation

    async def generate(
        self, trajectories: Sequence[Trajectory], sampling: SamplingParams
    ) -> list[Generated]:
        """Continue every trajectory once, in ONE batched `model.generate` (on the engine's
        generation thread, so the event loop stays free, or on this thread when `inline`)."""
        if not trajectories:
            return []
        if self.inline:
            return self.generate_sync(trajectories, sampling)
        if self._generate_thread is None:
            self._generate_thread = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="paravt-hf-generate"
            )
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._generate_thread, self.generate_sync, trajectories, sampling
        )

    @staticmethod
    def _keyed_sampler(
        sampling: SamplingParams, keys: list[int], prompt_lengths: list[int], width: int
    ) -> Any:
        """The logits processors of batch-invariant sampling, in the order `generate` applies its
        own when sampling (after suppression): temperature, top-k, top-p, then the keyed noise."""
        from transformers import (
            LogitsProcessorList,
            TemperatureLogitsWarper,
            TopKLogitsWarper,
            TopPLogitsWarper,
        )

        assert sampling.seed is not None
        processors: list[Any] = []
        if sampling.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(sampling.temperature))
        if sampling.top_k:
            processors.append(TopKLogitsWarper(top_k=sampling.top_k))
        if sampling.top_p < 1.0:
            processors.append(TopPLogitsWarper(top_p=sampling.top_p))
        processors.append(KeyedGumbelNoise(sampling.seed, keys, prompt_lengths, width))
        return LogitsProcessorList(processors)

    def generate_sync(
        self, trajectories: Sequence[Trajectory], sampling: SamplingParams
    ) -> list[Generated]:
        """`generate` without an event loop."""
        import torch

        device = next(self.model.parameters()).device
        rows: list[list[int]] = []
        chunks: list[ImageChunk] = []
        for n, traj in enumerate(trajectories):
            chunks.extend(self.image_chunks(traj, n))
            rows.append(traj.token_ids)
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):  # left padding: every row ends where generation starts
            input_ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            attention[i, width - len(r) :] = 1
        inputs: dict[str, Any] = {
            "input_ids": input_ids.to(device),
            "attention_mask": attention.to(device),
        }
        if chunks:
            dtype = next(self.model.parameters()).dtype
            inputs["pixel_values"] = torch.cat([c.pixel_values for c in chunks]).to(device, dtype)
            inputs["image_grid_thw"] = torch.stack([c.grid_thw for c in chunks]).to(device)
            inputs["mm_token_type_ids"] = (input_ids == self.image_token_id).int().to(device)

        greedy = sampling.temperature == 0.0
        keys = [t.sample_key for t in trajectories]
        keyed = (
            not greedy
            and sampling.batch_invariant
            and sampling.seed is not None
            and all(k is not None for k in keys)
        )
        gen_kwargs: dict[str, Any] = {
            "max_new_tokens": sampling.max_new_tokens,
            "do_sample": not greedy and not keyed,
            "eos_token_id": self.eos_token_ids,
            "pad_token_id": self.pad_token_id,
            "suppress_tokens": self._suppress or None,
            "output_logits": True,
            "return_dict_in_generate": True,
        }
        if greedy or keyed:
            gen_kwargs.update(temperature=None, top_p=None, top_k=None)
        else:
            gen_kwargs.update(
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k or None,
            )
        if keyed:
            gen_kwargs["logits_processor"] = self._keyed_sampler(
                sampling, [int(k) for k in keys if k is not None], [len(r) for r in rows], width
            )
        with self._lock, torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
            if sampling.seed is not None and not keyed:
                torch.manual_seed(sampling.seed)
            was_training = self.model.training
            self.model.eval()
            try:
                with torch.inference_mode():
                    out = self.model.generate(**inputs, **gen_kwargs)
            finally:
                self.model.train(was_training)

        new = out.sequences[:, width:].cpu()
        temperature = 1.0 if greedy else sampling.temperature
        # Logprob of each sampled token under the raw logits / temperature (before top-p/top-k or
        # suppression), the quantity a trainer recomputes from the same model.
        # One step at a time, so no (batch, steps, vocab) tensor is ever materialised.
        sampled = out.sequences[:, width:]
        picked = torch.stack(
            [
                torch.log_softmax(lg.float() / temperature, dim=-1)
                .gather(-1, sampled[:, t : t + 1])
                .squeeze(-1)
                for t, lg in enumerate(out.logits)
            ],
            dim=1,
        ).cpu()
        del out
        eos = torch.tensor(self.eos_token_ids)
        results: list[Generated] = []
        for i in range(len(rows)):
            ids = new[i].tolist()
            hits = torch.isin(new[i], eos).nonzero()
            if len(hits):
                end, reason = int(hits[0]) + 1, "stop"
            else:
                end, reason = len(ids), "length"
            ids = ids[:end]
            results.append(
                Generated(
                    text=self.decode(ids),
                    token_ids=ids,
                    logprobs=picked[i, :end].tolist(),
                    finish_reason=reason,  # type: ignore[arg-type]
                )
            )
        return results
