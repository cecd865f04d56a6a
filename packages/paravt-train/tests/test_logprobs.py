"""Chunked log-probs at masked positions equal the full-vocabulary computation and use less
memory; gradients agree too."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from paravt.train.modeling import (
    chunked_target_logprobs,
    collate,
    token_logprobs,
    token_logprobs_full,
)


def _batch(model_path: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from paravt.core.engines.hf import HFChatEncoder

    from .conftest import tool_conversation

    model = AutoModelForImageTextToText.from_pretrained(model_path, dtype=torch.float32)
    processor = AutoProcessor.from_pretrained(model_path)
    encoder = HFChatEncoder(processor)
    from paravt.train.sft import encode_conversation

    seqs = [
        encode_conversation(encoder, tool_conversation("red", (255, 0, 0))),
        encode_conversation(encoder, tool_conversation("blue", (0, 0, 255))[:3]),
    ]
    pad = processor.tokenizer.pad_token_id or 0
    batch = collate(
        seqs, pad_id=pad, image_token_id=encoder.image_token_id, device=torch.device("cpu")
    )
    return model, batch


def test_chunked_logprobs_at_masked_positions_equal_the_full_computation_with_gradients(
    tiny_model_path: Path,
) -> None:
    model, batch = _batch(tiny_model_path)
    mask = batch["mask"]
    assert 0 < mask.sum() < mask.numel()
    full = token_logprobs_full(model, batch, temperature=0.7)
    (full * mask).sum().backward()
    grads_full = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    chunked = token_logprobs(model, batch, temperature=0.7, mask=mask, chunk=7)
    (chunked * mask).sum().backward()
    assert torch.allclose(chunked * mask, full * mask, atol=1e-5)
    assert (chunked[mask == 0] == 0).all()  # nothing computed where the mask does not need it
    for name, p in model.named_parameters():
        if name in grads_full:
            assert torch.allclose(p.grad, grads_full[name], atol=1e-5, rtol=1e-4), name
    # the lm_head is restored after the call
    assert isinstance(model.lm_head, torch.nn.Linear)


def test_an_empty_mask_still_reaches_every_parameter_with_zero_gradient(
    tiny_model_path: Path,
) -> None:
    model, batch = _batch(tiny_model_path)
    lp = token_logprobs(model, batch, mask=torch.zeros_like(batch["mask"]))
    (lp * 0.0).sum().backward()
    used = [p for p in model.parameters() if p.requires_grad]
    assert all(p.grad is not None for p in used)
    assert all(float(p.grad.abs().sum()) == 0.0 for p in used)


_PEAK_SCRIPT = """
import sys, torch
from paravt.train.modeling import chunked_target_logprobs
torch.set_num_threads(1)
torch.manual_seed(0)
n, hidden, vocab, mode = 2048, 64, 8192, sys.argv[1]
head = torch.nn.Linear(hidden, vocab, bias=False)
h = torch.randn(n, hidden, requires_grad=True)
t = torch.randint(0, vocab, (n,))
chunked_target_logprobs(head, h[:8], t[:8], chunk=4).sum().backward()  # warm up kernels
torch.log_softmax(head(h[:8]).float(), -1).sum().backward()
h.grad = head.weight.grad = None
def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:  # reset the peak (VmHWM) to the current RSS
    f.write("5")
if mode == "full":
    lp = torch.log_softmax(head(h).float(), -1).gather(-1, t[:, None]).squeeze(-1)
else:
    lp = chunked_target_logprobs(head, h, t, chunk=256)
lp.sum().backward()
print(status("VmHWM") - before)
"""


def _peak_kib(mode: str) -> int:
    import subprocess
    import sys

    # a fixed mmap threshold: freed blocks go back to the system at once (glibc otherwise raises
    # the threshold and keeps freed chunks in the heap, which RSS would count as live)
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, mode],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return int(done.stdout.strip().splitlines()[-1])


def test_chunked_head_uses_a_fraction_of_the_full_logits_memory() -> None:
    """Peak resident memory (VmHWM reset before the measured work, a fresh process each) of log-probs + backward at 2048
    positions x 8192 vocabulary: the full path holds 64 MiB logits (and as much again for the
    softmax and its gradient), the chunked path one 256-position chunk at a time."""
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 500, bias=False)
    h, t = torch.randn(300, 16), torch.randint(0, 500, (300,))
    ref = torch.log_softmax(head(h), -1).gather(-1, t[:, None]).squeeze(-1)
    assert torch.allclose(chunked_target_logprobs(head, h, t, chunk=64), ref, atol=1e-5)
    full_kib, chunk_kib = _peak_kib("full"), _peak_kib("chunked")
    assert full_kib > 100 * 1024  # the full path really did hold the logits
    assert chunk_kib < full_kib / 4, (chunk_kib, full_kib)
