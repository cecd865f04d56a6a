"""Same seed, same tokens: with `SamplingParams.batch_invariant` a trajectory's sampled tokens depend
on the seed, its `sample_key` and its own positions, not on which requests share its batch or where.

The runtime's batches depend on timing (tool calls decode in threads, episodes finish at different
times), so the batch-seeded default gave a seeded run different rollouts under different load.
The keyed path (Gumbel-max under greedy decoding, `paravt.core.engines.hf.KeyedGumbelNoise`) must
sample from the same distribution as before. What batching can still change is float rounding in
the logits of differently shaped batches (about 1e-6 in log-probs here); the tests below assert
exact token equality, which held in every measurement (0 of 2,560 tokens flipped over 64 rows x 40
tokens, alone vs one batch vs shuffled vs batches of 8, with 1 and 2 torch threads).
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

from paravt.core import (
    AgentConfig,
    AgentTask,
    CropVideoArgs,
    Episode,
    Frame,
    ImagePart,
    Message,
    SamplingParams,
    TextPart,
    ToolOutput,
    Trajectory,
    build_main_prompt,
    run_episodes,
)
from paravt.core.engines.hf import HFEngine, KeyedGumbelNoise, token_seed
from paravt.core.engines.scripted import ScriptedTurns
from paravt.core.runtime import sample_key
from paravt.core.testing import StaticToolbox

KEYED = SamplingParams(max_new_tokens=16, temperature=0.7, seed=11, batch_invariant=True)


def _image(seed: int, size: int = 32) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)


def _trajectory(engine: HFEngine, i: int, key: int | None = None) -> Trajectory:
    """Row `i` of a mixed batch: every third row has an image, prompt lengths vary."""
    if i % 3 == 0:
        messages = [
            Message("system", "You watch videos."),
            Message("user", [ImagePart(_image(i)), TextPart(f"Q{i}? " + "more " * (i % 5))]),
        ]
    else:
        messages = [Message("user", f"question number {i} " + "word " * (i % 11))]
    traj = Trajectory("main", sample_key=1000 + i if key is None else key)
    traj.add_prompt(engine.encode_prompt(messages), messages)
    return traj


def _ids(engine: HFEngine, rows: Sequence[int], sampling: SamplingParams) -> list[list[int]]:
    outs = engine.generate_sync([_trajectory(engine, i) for i in rows], sampling)
    return [o.token_ids for o in outs]


def test_a_row_samples_the_same_tokens_alone_in_a_batch_and_anywhere_in_it(
    hf_engine: HFEngine,
) -> None:
    n = 12
    alone = [_ids(hf_engine, [i], KEYED)[0] for i in range(n)]
    assert all(len(ids) == KEYED.max_new_tokens for ids in alone)  # nothing cut short

    together = _ids(hf_engine, range(n), KEYED)
    assert together == alone

    order = list(range(n))
    random.Random(0).shuffle(order)
    shuffled = dict(zip(order, _ids(hf_engine, order, KEYED)))
    assert [shuffled[i] for i in range(n)] == alone

    # other company: rows 0..3 beside four different rows, in front of them and behind them
    assert _ids(hf_engine, [0, 1, 2, 3, 20, 21, 22, 23], KEYED)[:4] == alone[:4]
    assert _ids(hf_engine, [24, 25, 26, 0, 1, 2, 3], KEYED)[3:] == alone[:4]


def test_the_batch_seeded_default_is_unchanged_and_depends_on_the_batch(
    hf_engine: HFEngine,
) -> None:
    """Without `batch_invariant` (or without a key on every row) the batch's seed is used as
    before: the measured problem, kept as the default so that recorded runs still reproduce."""
    batch_seeded = KEYED.model_copy(update={"batch_invariant": False})
    alone = [_ids(hf_engine, [i], batch_seeded)[0] for i in range(6)]
    together = _ids(hf_engine, range(6), batch_seeded)
    assert together != alone  # the same rows, other draws: the batch decides

    keyless = [_trajectory(hf_engine, i) for i in range(3)]
    keyless[1].sample_key = None  # one row without a key: the whole batch falls back
    fallback = [o.token_ids for o in hf_engine.generate_sync(keyless, KEYED)]
    assert fallback == _ids(hf_engine, range(3), batch_seeded)


def test_greedy_decoding_ignores_the_keys(hf_engine: HFEngine) -> None:
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0, seed=11)
    keyed_greedy = greedy.model_copy(update={"batch_invariant": True})
    assert _ids(hf_engine, range(4), keyed_greedy) == _ids(hf_engine, range(4), greedy)


def test_other_keys_and_other_seeds_sample_other_tokens(hf_engine: HFEngine) -> None:
    base = [o.token_ids for o in hf_engine.generate_sync([_trajectory(hf_engine, 1)], KEYED)]
    other_key = hf_engine.generate_sync([_trajectory(hf_engine, 1, key=7)], KEYED)
    other_seed = hf_engine.generate_sync(
        [_trajectory(hf_engine, 1)], KEYED.model_copy(update={"seed": 12})
    )
    assert other_key[0].token_ids != base[0]
    assert other_seed[0].token_ids != base[0]
    # the same prompt twice in one batch with two keys (a GRPO group): two samples
    twins = hf_engine.generate_sync(
        [_trajectory(hf_engine, 1, key=5), _trajectory(hf_engine, 1, key=6)], KEYED
    )
    assert twins[0].token_ids != twins[1].token_ids


def test_logprobs_stay_those_of_the_raw_logits_over_the_temperature(
    hf_engine: HFEngine,
) -> None:
    """The keyed path warps and perturbs the scores, not the logits `generate` returns: each
    sampled token's logprob is still log_softmax(logits / T) of a fresh forward pass."""
    sampling = KEYED.model_copy(update={"max_new_tokens": 5, "top_p": 0.9})
    trajs = [_trajectory(hf_engine, 0), _trajectory(hf_engine, 4)]
    outs = hf_engine.generate_sync(trajs, sampling)
    for traj, out in zip(trajs, outs):
        ids = torch.tensor([traj.token_ids + out.token_ids])
        kwargs: dict[str, Any] = {"input_ids": ids}
        if traj.media:
            kwargs["pixel_values"] = torch.cat([c.pixel_values for c in traj.media])
            kwargs["image_grid_thw"] = torch.stack([c.grid_thw for c in traj.media])
            kwargs["mm_token_type_ids"] = (ids == hf_engine.image_token_id).int()
        with torch.no_grad():
            logits = hf_engine.model(**kwargs).logits[0].float()
        lp = torch.log_softmax(logits / sampling.temperature, dim=-1)
        start = len(traj.token_ids)
        expected = [float(lp[start - 1 + k, t]) for k, t in enumerate(out.token_ids)]
        assert out.logprobs == pytest.approx(expected, abs=2e-3)


def _frequencies(sampling: SamplingParams, logits: list[float], draws: int) -> list[float]:
    """How often each token wins over `draws` keys (one row per key, one step) through the
    engine's keyed processors: temperature, top-k, top-p, noise."""
    processors = HFEngine._keyed_sampler(sampling, list(range(draws)), [3] * draws, width=3)
    scores = torch.tensor([logits] * draws, dtype=torch.float32)
    input_ids = torch.zeros((draws, 3), dtype=torch.long)
    winners = processors(input_ids, scores).argmax(-1)
    return (torch.bincount(winners, minlength=len(logits)).double() / draws).tolist()


LOG_P = [math.log(p) for p in (0.5, 0.3, 0.2)]


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p", "logits", "kept"),
    [
        # two tokens: softmax(logits / T)
        (0.7, 0, 1.0, [0.0, 0.5], [0.0, 0.5]),
        (1.0, 0, 1.0, [1.3, 0.2], [1.3, 0.2]),
        # top-k 2 of 3: the third never wins, the two kept renormalised
        (0.7, 2, 1.0, [0.0, 0.5, -0.2], [0.0, 0.5, -math.inf]),
        # top-p 0.6 of probabilities (0.5, 0.3, 0.2): the first two kept
        (1.0, 0, 0.6, [LOG_P[0], LOG_P[1], LOG_P[2]], [LOG_P[0], LOG_P[1], -math.inf]),
    ],
)
def test_the_keyed_argmax_samples_softmax_of_the_warped_logits(
    temperature: float, top_k: int, top_p: float, logits: list[float], kept: list[float]
) -> None:
    """Over 20,000 keys, each token wins as often as softmax(kept logits / T) says, within 4.5
    binomial standard errors (a false alarm about once in 150,000 runs per token)."""
    sampling = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, seed=3)
    draws = 20_000
    freq = _frequencies(sampling, logits, draws)
    probs = torch.softmax(torch.tensor(kept, dtype=torch.float64) / temperature, -1).tolist()
    for f, p in zip(freq, probs):
        sigma = math.sqrt(p * (1 - p) / draws)
        assert abs(f - p) <= 4.5 * sigma, (freq, probs)


def test_a_rows_noise_depends_on_its_seed_key_and_position_only() -> None:
    scores = torch.zeros((3, 50))
    noise = KeyedGumbelNoise(seed=1, keys=[10, 11, 10], prompt_lengths=[4, 4, 6], width=6)
    out = noise(torch.zeros((3, 8), dtype=torch.long), scores)  # step 2: positions 6, 6, 8
    alone = KeyedGumbelNoise(seed=1, keys=[10], prompt_lengths=[4], width=4)
    assert torch.equal(alone(torch.zeros((1, 6), dtype=torch.long), scores[:1])[0], out[0])
    assert not torch.equal(out[0], out[1])  # another key
    assert not torch.equal(out[0], out[2])  # the same key at another position
    assert token_seed(1, 10, 6) != token_seed(1, 10, 7) != token_seed(2, 10, 7)
    # the runtime's keys: stable text hashes, one per episode, role, turn and call
    keys = {
        sample_key(0, "main"),
        sample_key(1, "main"),
        sample_key(0, "subagent", 1, 0),
        sample_key(0, "subagent", 1, 1),
        sample_key(0, "subagent", 2, 0),
    }
    assert len(keys) == 5
    assert sample_key(3, "subagent", 1, 2) == 8830063423474222047  # the same in every process


# --------------------------------------------------------------------------------------------------
# The runtime: the same episodes however the scheduler batches them

FIRST_TURN = (
    "I look at two windows.</think>\n"
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 0, "end_time": 10, '
    '"num_frames": 2}}</tool_call>\n'
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 20, "end_time": 30, '
    '"num_frames": 2}}</tool_call>'
)


@dataclass
class SleepyToolbox:
    """StaticToolbox's windows with uint8 frames, after `delay_s` of pretend decoding."""

    delay_s: float
    inner: StaticToolbox = field(default_factory=lambda: StaticToolbox(duration_s=60.0))

    async def execute(self, calls: Sequence[CropVideoArgs]) -> list[ToolOutput]:
        await asyncio.sleep(self.delay_s)
        outputs = await self.inner.execute(calls)
        for out in outputs:
            out.frames = [Frame(_image(int(f.timestamp_s * 10)), f.timestamp_s) for f in out.frames]
        return outputs


def _episodes(
    engine: HFEngine, delays: Sequence[float], *, batch_invariant: bool = True, **config: Any
) -> list[Episode]:
    tasks = []
    for i, delay in enumerate(delays):
        question = f"What happens in video {i}?" + " Really?" * (i % 3)
        overview = [Frame(_image(100 + i), 5.0), Frame(_image(200 + i), 35.0)]
        messages = build_main_prompt(question, overview, duration_s=60.0, max_turns=3)
        tasks.append(AgentTask(f"v{i}", messages, SleepyToolbox(delay), question))
    agent = AgentConfig(
        max_turns=3,
        sampling=SamplingParams(
            max_new_tokens=8, temperature=0.7, seed=0, batch_invariant=batch_invariant
        ),
        subagent_sampling=SamplingParams(
            max_new_tokens=6, temperature=0.7, seed=1, batch_invariant=batch_invariant
        ),
        **config,
    )
    return asyncio.run(run_episodes(tasks, ScriptedTurns(engine, {1: FIRST_TURN}), agent))


def _generated(episodes: list[Episode]) -> list[list[list[int]]]:
    """Every trajectory's token ids, main first then sub-agents by (turn, call)."""
    out = []
    for ep in episodes:
        subs = sorted(ep.subagents, key=lambda t: (t.turn or 0, t.call_index or 0))
        out.append([ep.main.token_ids, *(t.token_ids for t in subs)])
    return out


def test_run_episodes_gives_the_same_episodes_however_the_scheduler_batches_them(
    hf_engine: HFEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches: list[list[int]] = []  # the sample keys of each engine call
    original = hf_engine.generate_sync

    def recording(trajectories: Sequence[Trajectory], sampling: SamplingParams) -> Any:
        batches.append([t.sample_key or 0 for t in trajectories])
        return original(trajectories, sampling)

    monkeypatch.setattr(hf_engine, "generate_sync", recording)
    n = 5
    runs = {
        "one batch of whatever waits": dict(delays=[0.0] * n),
        "two at a time, tools of different speeds": dict(
            delays=[0.05 * (i % 3) for i in range(n)], max_requests_in_flight=2
        ),
        "three at a time, slowest tools first": dict(
            delays=[0.03 * (n - i) for i in range(n)], max_requests_in_flight=3
        ),
    }
    results: dict[str, list[list[list[int]]]] = {}
    seen: dict[str, list[list[int]]] = {}
    for name, kwargs in runs.items():
        batches.clear()
        settings = dict(kwargs)
        episodes = _episodes(hf_engine, settings.pop("delays"), **settings)
        results[name] = _generated(episodes)
        seen[name] = list(batches)
        assert all(len(ep.subagents) == 2 for ep in episodes)  # the sub-agents did generate
        assert all(len(ep.turns) >= 2 for ep in episodes)  # and the main agent after them
    first, *others = results
    assert len({str(b) for b in seen.values()}) == len(runs)  # three different batchings
    for name in others:
        assert results[name] == results[first], name
