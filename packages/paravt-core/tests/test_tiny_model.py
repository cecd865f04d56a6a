"""The tiny Qwen3-VL: real architecture, offline, deterministic, round-trips through Auto classes."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from paravt.core.tiny import (
    CHAT_SPECIAL_TOKENS,
    MARKER_FILE,
    PROTOCOL_TAGS,
    TinyQwen3VLConfig,
    build_tiny_qwen3vl,
    build_tokenizer,
    cached_tiny_qwen3vl,
)


def _digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


@pytest.mark.slow
def test_building_twice_with_the_same_seed_writes_identical_files(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    again = build_tiny_qwen3vl(tmp_path / "again", seed=0)
    assert _digest(again) == _digest(tiny_model_path)


def test_the_tokenizer_depends_on_the_seed() -> None:
    small = TinyQwen3VLConfig(corpus_lines=300, vocab_size=600)
    a, b, c = build_tokenizer(0, small), build_tokenizer(0, small), build_tokenizer(1, small)
    assert a.get_vocab() == b.get_vocab()
    assert a.get_vocab() != c.get_vocab()


def test_the_model_round_trips_through_auto_classes_offline(
    tiny_model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import (
        AutoModelForImageTextToText,
        AutoProcessor,
        Qwen2VLImageProcessor,
        Qwen3VLForConditionalGeneration,
        Qwen3VLProcessor,
    )

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    processor = AutoProcessor.from_pretrained(tiny_model_path)
    model = AutoModelForImageTextToText.from_pretrained(tiny_model_path)
    assert isinstance(model, Qwen3VLForConditionalGeneration)
    assert isinstance(processor, Qwen3VLProcessor)
    assert isinstance(processor.image_processor, Qwen2VLImageProcessor)
    ip = processor.image_processor
    assert (ip.patch_size, ip.merge_size, ip.temporal_patch_size) == (16, 2, 2)
    params = sum(p.numel() for p in model.parameters())
    assert 0.5e6 < params < 2e6
    assert model.config.text_config.vocab_size >= len(processor.tokenizer)
    assert model.config.image_token_id == processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")


def test_protocol_tags_are_single_tokens_that_decode_back_to_their_text(
    tiny_model_path: Path,
) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    for tag in PROTOCOL_TAGS:
        ids = tok(tag, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, tag
        assert tok.decode(ids, skip_special_tokens=True) == tag
    text = "<think>\nLook at 12.5 s</think><tool_call>{}</tool_call><answer>B</answer>"
    ids = tok(text + "<|im_end|>", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_chat_special_tokens_are_special_and_digits_are_split(tiny_model_path: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    for token in CHAT_SPECIAL_TOKENS:
        assert token in tok.all_special_tokens or token in tok.get_added_vocab(), token
        assert tok.decode(tok.convert_tokens_to_ids([token]), skip_special_tokens=True) == ""
    pieces = tok.convert_ids_to_tokens(tok("t=1234.5", add_special_tokens=False)["input_ids"])
    assert [p for p in pieces if p.isdigit()] == ["1", "2", "3", "4", "5"]


def test_the_chat_template_groups_consecutive_tool_messages_into_one_user_turn(
    tiny_model_path: Path,
) -> None:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_model_path)
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": [{"type": "text", "text": "Q"}, {"type": "image"}]},
        {"role": "assistant", "content": "<think>\nx</think>"},
        {"role": "tool", "content": "first"},
        {"role": "tool", "content": "second"},
    ]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nS<|im_end|>\n"
        "<|im_start|>user\nQ<|vision_start|><|image_pad|><|vision_end|><|im_end|>\n"
        "<|im_start|>assistant\n<think>\nx</think><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nfirst\n</tool_response>\n"
        "<tool_response>\nsecond\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_the_processor_expands_an_image_into_merged_patch_tokens(tiny_model_path: Path) -> None:
    import torch
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_model_path)
    image = torch.zeros((3, 64, 64), dtype=torch.uint8)
    batch = processor(
        text=["<|vision_start|><|image_pad|><|vision_end|>"], images=[image], return_tensors="pt"
    )
    assert batch["image_grid_thw"].tolist() == [[1, 4, 4]]  # 64 px / patch 16
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert batch["input_ids"][0].tolist().count(pad) == 4  # 16 patches / merge 2x2


def test_the_cache_returns_the_built_model_without_rebuilding(tiny_model_path: Path) -> None:
    marker = tiny_model_path / MARKER_FILE
    before = os.stat(marker).st_mtime_ns
    again = cached_tiny_qwen3vl(seed=0, cache_dir=tiny_model_path.parent)
    assert again == tiny_model_path
    assert os.stat(marker).st_mtime_ns == before


def test_an_invalid_config_is_rejected_with_the_field_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="head_dim 30"):
        build_tiny_qwen3vl(tmp_path, config=TinyQwen3VLConfig(head_dim=30))
    with pytest.raises(ValueError, match="perfect square"):
        build_tiny_qwen3vl(tmp_path, config=TinyQwen3VLConfig(num_position_embeddings=500))
