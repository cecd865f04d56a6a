"""SFT: supervision exactly on assistant tokens, through the model's own chat template; learning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from paravt.core.protocol import Message
from paravt.train.recipe import load_recipe
from paravt.train.sft import encode_conversation, pack_micro_batches, train_sft


def _engine(path: Path):  # type: ignore[no-untyped-def]
    from paravt.core.engines.hf import HFEngine

    return HFEngine(path)


def test_only_assistant_tokens_are_supervised_and_they_decode_to_the_assistant_turns(
    tiny_model_path: Path, conversations: list[list[Message]]
) -> None:
    engine = _engine(tiny_model_path)
    conv = conversations[0]
    seq = encode_conversation(engine, conv)
    assert len(seq.mask) == len(seq.token_ids) and len(seq.media) == 2
    supervised = [t for t, m in zip(seq.token_ids, seq.mask) if m]
    eos = engine.tokenizer.convert_ids_to_tokens(engine.end_of_turn_id)
    text = engine.tokenizer.decode(supervised, skip_special_tokens=False)
    assert text == conv[2].text + eos + conv[5].text + eos
    # Nothing else is supervised: the unsupervised text holds system, user and tool content.
    rest = engine.tokenizer.decode([t for t, m in zip(seq.token_ids, seq.mask) if not m])
    assert "You are a video assistant." in rest and "a red square" in rest
    assert "<answer>" not in rest
    # The ids equal one chat-template rendering of the whole conversation (one tokenisation path).
    assert seq.token_ids.count(engine.image_token_id) > 0


def test_packing_fills_micro_batches_up_to_the_token_budget() -> None:
    from paravt.train.modeling import Sequence_

    seqs = [Sequence_([1] * n, [1] * n) for n in (50, 40, 30, 20, 10)]
    bins = pack_micro_batches(seqs, batch_size=2, packing_length=100)
    assert sorted(len(s) for b in bins for s in b) == [10, 20, 30, 40, 50]
    assert all(max(len(s) for s in b) * len(b) <= 100 for b in bins)
    assert len(pack_micro_batches(seqs, batch_size=2, packing_length=None)) == 3


@pytest.mark.slow
def test_sft_lowers_the_training_loss_with_a_fixed_seed(
    tiny_model_path: Path, conversations: list[list[Message]], tmp_path: Path
) -> None:
    recipe = load_recipe(
        "tiny_sft",
        [
            f"model.path={tiny_model_path}",
            "model.build_tiny=false",
            f"output_dir={tmp_path / 'run'}",
            "max_steps=30",
            "sft.batch_size=2",
            "sft.grad_accum=2",
            "optim.warmup_steps=5",
            "logging.progress=false",
        ],
    )
    final = train_sft(recipe, conversations=conversations)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 31))
    first = sum(r["loss"] for r in rows[:3]) / 3
    last = sum(r["loss"] for r in rows[-3:]) / 3
    assert last < 0.5 * first, (first, last)
    lrs = [r["lr"] for r in rows]
    assert lrs[0] < lrs[4] and lrs[-1] < lrs[10]  # warmup, then cosine decay
    from transformers import AutoModelForImageTextToText

    reloaded = AutoModelForImageTextToText.from_pretrained(final)
    assert all(torch.isfinite(p).all() for p in reloaded.parameters())


def test_encoded_rows_cache_at_most_cache_rows_and_none_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from paravt.train import sft
    from paravt.train.modeling import Sequence_

    calls: list[int] = []

    def fake_encode(encoder: object, messages: list[int]) -> Sequence_:
        calls.append(messages[0])
        return Sequence_([1] * (10 if messages[0] != 3 else 99), [1] * 10)

    monkeypatch.setattr(sft, "encode_conversation", fake_encode)
    rows = [[i] for i in range(4)]
    cached = sft.EncodedRows(rows, list, None, max_length=50, cache_rows=2)
    for i in (0, 1, 0, 2, 0, 1):
        cached[i]
    assert calls == [0, 1, 2, 1]  # 0 stays (recently used), 1 was dropped for 2
    assert len(cached._cache) == 2
    assert cached[3] == (3, None)  # longer than max_length: skipped
    calls.clear()
    plain = sft.EncodedRows(rows, list, None, max_length=50)
    for i in (0, 0, 1):
        plain[i]
    assert calls == [0, 0, 1] and not plain._cache


def test_step_rows_give_each_rank_its_slice_and_the_order_state_after_each_step() -> None:
    from paravt.train.metrics import RowOrder
    from paravt.train.sft import StepRows

    order = RowOrder(6, seed=0, shuffle=False)
    sampler = StepRows(order, per_step=2, rank=1, world=2, start=0, end=3)
    batches = list(sampler)  # the loader runs ahead of training: the states are kept per step
    assert batches == [[2, 3], [0, 1], [4, 5]]
    assert sampler.state_after[1] == {"epoch": 0, "index": 4, "n": 6}
    assert sampler.state_after[2] == {"epoch": 1, "index": 2, "n": 6}
    resumed = RowOrder(6, seed=0, shuffle=False)
    resumed.load(sampler.state_after[2])
    assert list(StepRows(resumed, 2, 1, 2, start=2, end=3)) == [[4, 5]]
