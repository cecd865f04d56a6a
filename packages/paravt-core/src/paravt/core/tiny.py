"""A tiny, real Qwen3-VL built offline from a seed: for smoke runs, demos and tests.
One file because the model, its tokenizer, chat template and processor are written together and
must agree (vocabulary, special and image tokens, the template's tags).

A runtime feature, not a test helper: `model.path: tiny` in a recipe, `paravt-eval ask --model
tiny`, the reproduce cells and `paravt-core demo` build it (`paravt.core.testing` re-exports its
names for the tests).

`build_tiny_qwen3vl(path)` writes a `Qwen3VLForConditionalGeneration` with random weights (about
1 M parameters), a byte-level BPE tokenizer trained on the spot, a Qwen3-style ChatML chat template
and a `Qwen3VLProcessor`, so that `AutoProcessor.from_pretrained(path)` and
`AutoModelForImageTextToText.from_pretrained(path)` load it with no network. The same seed and
config give the same files. `cached_tiny_qwen3vl()` builds once per (seed, config) into a cache
directory and returns the path afterwards.

Needs the `hf` extra (torch, transformers, tokenizers); imported lazily, so importing this module
is light.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from paravt.core.prompts import FINAL_ANSWER_NOTE, PROMPT_MODES, system_prompt

# Bump when the files this module writes change, so caches rebuild.
FORMAT_VERSION = 1
MARKER_FILE = "paravt_tiny.json"

# Qwen2's pre-tokenizer pattern: digits become single tokens, which helps a tiny model read times.
QWEN2_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CHAT_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
PROTOCOL_TAGS = (
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_code>",
    "</tool_code>",
    "<answer>",
    "</answer>",
    "<tool_response>",
    "</tool_response>",
)

# ChatML in the Qwen3 style. Consecutive `tool` messages become one user turn of
# `<tool_response>` blocks; images render as vision start/pad/end (the processor expands the pad).
# Assistant content is rendered verbatim, so a conversation re-rendered from its messages tokenizes
# to the same ids as the prompt pieces an engine tokenized turn by turn.
CHAT_TEMPLATE = (
    "{%- macro render(content) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- else -%}{%- for part in content -%}"
    "{%- if part.type == 'image' or 'image' in part or 'image_url' in part -%}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif part.type == 'video' or 'video' in part -%}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{%- elif 'text' in part -%}{{ part.text }}"
    "{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}<|im_start|>user{%- endif -%}"
    "{{ '\\n<tool_response>\\n' }}{{ render(message.content) }}{{ '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}<|im_end|>{{ '\\n' }}"
    "{%- endif -%}"
    "{%- else -%}"
    "<|im_start|>{{ message.role }}{{ '\\n' }}{{ render(message.content) }}<|im_end|>{{ '\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant{{ '\\n' }}{%- endif -%}"
)


class TinyQwen3VLConfig(BaseModel):
    """Sizes of the tiny model (defaults: the ~1 M parameter config verified in ENVIRONMENT.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vocab_size: int = Field(2048, ge=512, description="BPE vocabulary target (tags included).")
    hidden_size: int = Field(128, ge=16)
    intermediate_size: int = Field(256, ge=16)
    num_hidden_layers: int = Field(2, ge=1)
    num_attention_heads: int = Field(4, ge=1)
    num_key_value_heads: int = Field(2, ge=1)
    head_dim: int = Field(32, ge=8, description="Must be divisible by 4 (M-RoPE sections).")
    vision_depth: int = Field(2, ge=1)
    vision_hidden_size: int = Field(64, ge=16)
    vision_intermediate_size: int = Field(128, ge=16)
    vision_num_heads: int = Field(4, ge=1)
    num_position_embeddings: int = Field(576, description="A perfect square.")
    min_pixels: int = Field(32 * 32, ge=32 * 32, description="Image processor pixel floor.")
    max_pixels: int = Field(128 * 128, ge=32 * 32, description="Image processor pixel cap.")
    corpus_lines: int = Field(3000, ge=100, description="Synthetic lines the tokenizer trains on.")

    def mrope_section(self) -> list[int]:
        half = self.head_dim // 2
        t = half // 2
        h = (half - t) // 2
        return [t, h, half - t - h]


def _synthetic_corpus(rng: random.Random, lines: int) -> list[str]:
    """Text in the shape of ParaVT conversations: prompts, timestamps, tool calls, answers."""

    fixed = [system_prompt(mode) for mode in PROMPT_MODES]
    fixed.append(system_prompt("agentic_general", include_video_path=True))
    fixed.append(FINAL_ANSWER_NOTE)
    words = " ".join(fixed).replace("\n", " ").split()
    words += [
        "red",
        "green",
        "blue",
        "yellow",
        "square",
        "circle",
        "person",
        "car",
        "dog",
        "walks",
        "runs",
        "opens",
        "door",
        "kitchen",
        "table",
        "the",
        "a",
        "an",
        "is",
        "are",
        "was",
        "at",
        "in",
        "on",
        "of",
        "to",
        "from",
        "and",
        "then",
        "after",
        "before",
        "first",
        "last",
        "seconds",
        "frames",
        "video",
        "window",
        "overview",
        "question",
        "answer",
        "option",
        "which",
        "when",
        "where",
        "what",
        "who",
        "how",
        "many",
        "color",
        "appears",
        "shows",
        "holds",
        "moves",
        "left",
        "right",
        "top",
        "bottom",
        "start",
        "end",
        "time",
        "helper",
        "look",
        "closer",
    ]
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "si", "pe", "da", "gu", "zo", "qu", "ix"]
    corpus = list(fixed)
    for _ in range(lines):
        kind = rng.randrange(5)
        if kind == 0:
            t0 = round(rng.uniform(0, 600), 1)
            t1 = round(t0 + rng.uniform(1, 60), 1)
            args = {"start_time": t0, "end_time": t1}
            if rng.random() < 0.3:
                args["num_frames"] = rng.randint(1, 16)
            corpus.append(
                "<tool_call>"
                + json.dumps({"name": "crop_video", "arguments": args})
                + "</tool_call>"
            )
        elif kind == 1:
            stamps = " ".join(f"<{rng.uniform(0, 900):.1f} seconds>" for _ in range(6))
            corpus.append(stamps)
        elif kind == 2:
            sentence = " ".join(rng.choice(words) for _ in range(rng.randint(6, 24)))
            corpus.append(f"<think>\n{sentence}.</think>\n<answer>{rng.choice('ABCD')}</answer>")
        elif kind == 3:
            made_up = [
                "".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(8)
            ]
            corpus.append(" ".join(made_up).capitalize() + ".")
        else:
            corpus.append(" ".join(rng.choice(words) for _ in range(rng.randint(8, 30))))
    return corpus


def build_tokenizer(seed: int = 0, config: TinyQwen3VLConfig | None = None) -> Any:
    """A byte-level BPE `PreTrainedTokenizerFast` trained on a seeded synthetic corpus.

    Chat tokens are special (dropped by `skip_special_tokens`); protocol tags are added tokens that
    decode back to their text. Deterministic in `seed` and `config`.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    config = config or TinyQwen3VLConfig()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size - len(PROTOCOL_TAGS),
        special_tokens=list(CHAT_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_synthetic_corpus(random.Random(seed), config.corpus_lines), trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in PROTOCOL_TAGS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
    )


def build_tiny_qwen3vl(
    path: str | os.PathLike[str], seed: int = 0, config: TinyQwen3VLConfig | None = None
) -> Path:
    """Write a tiny random-weight Qwen3-VL (model, tokenizer, processor) to `path`; return it.

    `seed` fixes the tokenizer corpus and the weights: the same (seed, config) writes the same
    files. Loads back with `AutoProcessor` / `AutoModelForImageTextToText.from_pretrained(path)`
    offline. Needs the `hf` extra.
    """
    import torch
    from transformers import (
        GenerationConfig,
        Qwen2VLImageProcessor,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
    )

    config = config or TinyQwen3VLConfig()
    if config.head_dim % 4:
        raise ValueError(f"head_dim {config.head_dim} must be divisible by 4 for M-RoPE sections")
    side = math.isqrt(config.num_position_embeddings)
    if side * side != config.num_position_embeddings:
        raise ValueError(
            f"num_position_embeddings {config.num_position_embeddings} must be a perfect square"
        )
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(seed, config)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in CHAT_SPECIAL_TOKENS}
    vocab = -(-len(tokenizer) // 64) * 64  # round up: embedding rows for every token
    model_config = Qwen3VLConfig(
        text_config={
            "vocab_size": vocab,
            "hidden_size": config.hidden_size,
            "intermediate_size": config.intermediate_size,
            "num_hidden_layers": config.num_hidden_layers,
            "num_attention_heads": config.num_attention_heads,
            "num_key_value_heads": config.num_key_value_heads,
            "head_dim": config.head_dim,
            "max_position_embeddings": 32768,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 5e6,
                "mrope_section": config.mrope_section(),
            },
            "pad_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": config.vision_depth,
            "hidden_size": config.vision_hidden_size,
            "intermediate_size": config.vision_intermediate_size,
            "num_heads": config.vision_num_heads,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": config.hidden_size,
            "num_position_embeddings": config.num_position_embeddings,
            "deepstack_visual_indexes": list(range(min(2, config.vision_depth))),
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3VLForConditionalGeneration(model_config)
    model.generation_config = GenerationConfig(
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
        do_sample=False,
    )
    image_processor = Qwen2VLImageProcessor(
        patch_size=16,
        merge_size=2,
        temporal_patch_size=2,
        min_pixels=config.min_pixels,
        max_pixels=config.max_pixels,
    )
    video_processor = Qwen3VLVideoProcessor(
        patch_size=16,
        merge_size=2,
        temporal_patch_size=2,
        do_sample_frames=False,
        size={"shortest_edge": config.min_pixels, "longest_edge": config.max_pixels * 8},
    )
    processor = Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )
    model.save_pretrained(out)
    processor.save_pretrained(out)
    marker = {"format_version": FORMAT_VERSION, "seed": seed, "config": config.model_dump()}
    (out / MARKER_FILE).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")
    return out


def default_cache_dir() -> Path:
    """`$PARAVT_CACHE_DIR`, else `~/.cache/paravt`."""
    env = os.environ.get("PARAVT_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "paravt"


def cache_key(seed: int = 0, config: TinyQwen3VLConfig | None = None) -> str:
    """The cache directory name of a (seed, config, format, transformers version) combination."""
    import transformers

    config = config or TinyQwen3VLConfig()
    blob = json.dumps(
        [FORMAT_VERSION, seed, config.model_dump(), transformers.__version__], sort_keys=True
    )
    return f"tiny-qwen3vl-seed{seed}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def cached_tiny_qwen3vl(
    seed: int = 0,
    config: TinyQwen3VLConfig | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """The path of the tiny model for (seed, config), building it into `cache_dir` the first time.

    The build goes to a temporary directory that is renamed into place, so concurrent callers
    never see half-written files.
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / cache_key(seed, config)
    if (target / MARKER_FILE).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    try:
        build_tiny_qwen3vl(staging, seed=seed, config=config)
        try:
            staging.rename(target)
        except OSError:
            if not (target / MARKER_FILE).is_file():  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
