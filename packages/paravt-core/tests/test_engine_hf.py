"""HFEngine: chat-template encoding, image expansion, one batched generate, exact logprobs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from paravt.core import Generated, ImagePart, Message, SamplingParams, TextPart, Trajectory
from paravt.core.engines.hf import HFEngine, ImageChunk

FAST = SamplingParams(max_new_tokens=6)


def _image(seed: int = 0, h: int = 48, w: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _prompt(images: list[Any]) -> list[Message]:
    parts: list[Any] = []
    for k, img in enumerate(images):
        parts += [TextPart(f"<{k:.1f} seconds>"), ImagePart(img)]
    return [Message("system", "You watch videos."), Message("user", [*parts, TextPart("Q?")])]


def _trajectory(engine: HFEngine, messages: list[Message], prefix: str = "") -> Trajectory:
    traj = Trajectory("main", assistant_prefix=prefix)
    traj.add_prompt(engine.encode_prompt(messages, assistant_prefix=prefix), messages)
    return traj


@pytest.fixture
def own_engine(tiny_model_path: Path) -> HFEngine:
    """An engine over a private copy of the weights, for tests that edit them."""
    return HFEngine(tiny_model_path)


def _favour(engine: HFEngine, token: str) -> int:
    """Make `token` the model's argmax everywhere (edits the output layer)."""
    tid = engine.tokenizer.convert_tokens_to_ids(token)
    with torch.no_grad():
        head = engine.model.get_output_embeddings()
        head.weight[tid] = engine.model.model.language_model.norm.weight.sign() * 50.0
    return int(tid)


def test_importing_paravt_core_and_its_engines_package_does_not_import_torch() -> None:
    code = (
        "import sys, paravt.core, paravt.core.engines, paravt.core.testing, paravt.core.cli; "
        "heavy = [m for m in ('torch', 'transformers', 'httpx') if m in sys.modules]; "
        "sys.exit(f'imported {heavy}' if heavy else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_prompt_goes_through_the_chat_template_and_ends_with_the_assistant_prefix(
    hf_engine: HFEngine,
) -> None:
    messages = [Message("system", "S"), Message("user", "Q")]
    enc = hf_engine.encode_prompt(messages, assistant_prefix="<think>\n")
    text = hf_engine.tokenizer.decode(enc.token_ids)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n" + (
        "<|im_start|>assistant\n<think>\n"
    )
    assert enc.media == []


def test_each_image_becomes_its_merged_patch_tokens_and_one_media_chunk(
    hf_engine: HFEngine,
) -> None:
    enc = hf_engine.encode_prompt(_prompt([_image(0), _image(1, 64, 96)]))
    assert [c.grid_thw.tolist() for c in enc.media] == [[1, 4, 4], [1, 4, 6]]
    assert all(isinstance(c, ImageChunk) for c in enc.media)
    assert [c.pixel_values.shape[0] for c in enc.media] == [16, 24]
    assert enc.token_ids.count(hf_engine.image_token_id) == (16 + 24) // 4


def test_numpy_torch_and_pil_frames_in_any_layout_encode_to_the_same_pixels(
    hf_engine: HFEngine,
) -> None:
    from PIL import Image

    hwc = _image(3)
    variants = [
        hwc,
        np.ascontiguousarray(hwc.transpose(2, 0, 1)),
        torch.from_numpy(hwc).permute(2, 0, 1),
        Image.fromarray(hwc),
    ]
    encoded = [hf_engine.encode_prompt(_prompt([v])) for v in variants]
    for enc in encoded[1:]:
        assert enc.token_ids == encoded[0].token_ids
        assert torch.equal(enc.media[0].pixel_values, encoded[0].media[0].pixel_values)


def test_a_float_frame_is_rejected_with_the_fix_named(hf_engine: HFEngine) -> None:
    with pytest.raises(TypeError, match="uint8"):
        hf_engine.encode_prompt(_prompt([np.zeros((32, 32, 3), dtype=np.float32)]))


def test_a_continuation_closes_an_unfinished_turn_and_has_no_system_header(
    hf_engine: HFEngine,
) -> None:
    tools = [Message("tool", "a"), Message("tool", [TextPart("b"), ImagePart(_image())])]
    unfinished = Generated("x", hf_engine.tokenizer("x", add_special_tokens=False)["input_ids"])
    text = hf_engine.continuation_text(tools, previous=unfinished, assistant_prefix="<think>\n")
    assert text == (
        "<|im_end|>\n<|im_start|>user\n<tool_response>\na\n</tool_response>\n"
        "<tool_response>\nb<|vision_start|><|image_pad|><|vision_end|>\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n<think>\n"
    )
    finished = hf_engine.encode_generation("x</think>")
    assert finished.token_ids[-1] == hf_engine.end_of_turn_id
    text = hf_engine.continuation_text(tools[:1], previous=finished)
    assert text.startswith("\n<|im_start|>user\n<tool_response>\na")
    enc = hf_engine.encode_continuation(tools, previous=finished)
    assert len(enc.media) == 1
    assert "system" not in hf_engine.tokenizer.decode(enc.token_ids)


def test_generate_runs_one_batched_model_call_for_all_trajectories(
    own_engine: HFEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []
    original = own_engine.model.generate

    def counting(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return original(**kwargs)

    monkeypatch.setattr(own_engine.model, "generate", counting)
    trajs = [
        _trajectory(own_engine, _prompt([_image(0)]), "<think>\n"),
        _trajectory(own_engine, [Message("user", "text only, a longer question")]),
        _trajectory(own_engine, _prompt([_image(1), _image(2, 64, 96)])),
    ]
    outs = asyncio.run(own_engine.generate(trajs, FAST))
    assert len(calls) == 1
    assert calls[0]["input_ids"].shape[0] == 3
    assert calls[0]["image_grid_thw"].tolist() == [[1, 4, 4], [1, 4, 4], [1, 4, 6]]
    assert calls[0]["attention_mask"][1, 0] == 0  # left padding
    for out in outs:
        assert 1 <= len(out.token_ids) <= FAST.max_new_tokens
        assert out.logprobs is not None and len(out.logprobs) == len(out.token_ids)
        assert out.finish_reason in ("stop", "length")
        assert out.text == own_engine.decode(out.token_ids)


@pytest.mark.parametrize("inline", [False, True])
def test_generate_runs_on_one_long_lived_thread_or_inline_on_the_callers(
    own_engine: HFEngine, monkeypatch: pytest.MonkeyPatch, inline: bool
) -> None:
    """Every `generate` (from separate event loops, as the trainer runs one loop per step) runs on
    the engine's own generation thread, the same thread each time (a fresh thread per call made
    CPU generation ~1.6x slower), or with `inline` on the caller's thread (the CPU default: one
    OpenMP thread team with the trainer's own torch work)."""
    import threading

    threads: list[threading.Thread] = []
    original = own_engine.generate_sync

    def recording(trajectories: Any, sampling: Any) -> Any:
        threads.append(threading.current_thread())
        return original(trajectories, sampling)

    assert own_engine.inline  # a CPU model: inline by default
    monkeypatch.setattr(own_engine, "inline", inline)
    monkeypatch.setattr(own_engine, "generate_sync", recording)
    for _ in range(3):
        traj = _trajectory(own_engine, [Message("user", "hello")])
        (out,) = asyncio.run(own_engine.generate([traj], FAST))
        assert 1 <= len(out.token_ids) <= FAST.max_new_tokens
    assert len(threads) == 3
    assert len({id(t) for t in threads}) == 1
    assert (threads[0] is threading.current_thread()) == inline
    assert threads[0].is_alive()


def _teacher_forced_logprobs(
    engine: HFEngine, traj: Trajectory, out: Generated, temperature: float
) -> list[float]:
    ids = torch.tensor([traj.token_ids + out.token_ids])
    kwargs: dict[str, Any] = {"input_ids": ids}
    if traj.media:
        kwargs["pixel_values"] = torch.cat([c.pixel_values for c in traj.media])
        kwargs["image_grid_thw"] = torch.stack([c.grid_thw for c in traj.media])
        kwargs["mm_token_type_ids"] = (ids == engine.image_token_id).int()
    with torch.no_grad():
        logits = engine.model(**kwargs).logits[0].float()
    start = len(traj.token_ids)
    lp = torch.log_softmax(logits / temperature, dim=-1)
    return [float(lp[start - 1 + k, t]) for k, t in enumerate(out.token_ids)]


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_logprobs_are_those_of_the_sampled_tokens_under_a_fresh_forward_pass(
    hf_engine: HFEngine, temperature: float
) -> None:
    trajs = [
        _trajectory(hf_engine, _prompt([_image(0)]), "<think>\n"),
        _trajectory(hf_engine, [Message("user", "a text-only prompt that is longer")]),
    ]
    sampling = SamplingParams(max_new_tokens=5, temperature=temperature, seed=1)
    outs = hf_engine.generate_sync(trajs, sampling)
    for traj, out in zip(trajs, outs):
        expected = _teacher_forced_logprobs(hf_engine, traj, out, temperature or 1.0)
        assert out.logprobs == pytest.approx(expected, abs=2e-3)


def test_sampling_with_a_seed_is_reproducible(hf_engine: HFEngine) -> None:
    trajs = [_trajectory(hf_engine, [Message("user", "hello")])]
    sampling = SamplingParams(max_new_tokens=6, temperature=1.0, seed=7)
    first = hf_engine.generate_sync(trajs, sampling)
    again = hf_engine.generate_sync(trajs, sampling)
    assert first[0].token_ids == again[0].token_ids


def test_generation_stops_at_the_end_of_turn_token_and_keeps_it(own_engine: HFEngine) -> None:
    eot = _favour(own_engine, "<|im_end|>")
    out = own_engine.generate_sync([_trajectory(own_engine, [Message("user", "hi")])], FAST)[0]
    assert out.token_ids == [eot]
    assert out.finish_reason == "stop"
    assert out.text == ""


def test_the_model_never_emits_image_placeholders(own_engine: HFEngine) -> None:
    pad = _favour(own_engine, "<|image_pad|>")
    out = own_engine.generate_sync([_trajectory(own_engine, [Message("user", "hi")])], FAST)[0]
    assert pad not in out.token_ids
    assert len(out.token_ids) == FAST.max_new_tokens


def test_the_engine_shares_the_given_model_and_restores_its_training_mode(
    own_engine: HFEngine,
) -> None:
    model = own_engine.model
    shared = HFEngine(model, own_engine.processor)
    assert shared.model is model
    model.train()
    shared.generate_sync([_trajectory(shared, [Message("user", "hi")])], FAST)
    assert model.training
    trajs = [_trajectory(shared, [Message("user", "hi")])]
    before = shared.generate_sync(trajs, FAST)[0].logprobs
    with torch.no_grad():  # an optimizer step on the policy is seen by the next rollout
        model.get_output_embeddings().weight.mul_(3.0)
    after = shared.generate_sync(trajs, FAST)[0].logprobs
    assert before != after


def test_a_model_object_without_its_processor_is_refused(own_engine: HFEngine) -> None:
    with pytest.raises(ValueError, match="pass the processor"):
        HFEngine(own_engine.model)


def test_trajectories_whose_media_and_image_tokens_disagree_are_refused(
    hf_engine: HFEngine,
) -> None:
    traj = _trajectory(hf_engine, _prompt([_image(0)]))
    traj.media.clear()
    with pytest.raises(ValueError, match="out of step"):
        hf_engine.generate_sync([traj], FAST)
