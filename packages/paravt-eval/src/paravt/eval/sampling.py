"""Seeded sampling for evaluation: each sample's own seed, and an agent config that draws with it."""

from __future__ import annotations

import hashlib

from paravt.core import AgentConfig


def sample_seed(seed: int, key: str) -> int:
    """The sampling seed of the sample `key` in a run seeded with `seed` (a stable hash: the
    same in every process, different for every key, so repeated samples of one question,
    keyed apart, draw apart)."""
    digest = hashlib.blake2b(f"paravt-eval/{seed}/{key}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") >> 1


def seeded(config: AgentConfig, seed: int | None, key: str) -> AgentConfig:
    """`config` as the sample `key` runs it in a run seeded with `seed` (None: unchanged): the
    main agent draws with `sample_seed(seed, key)`, the sub-agents with that + 1, each request
    keyed (`SamplingParams.batch_invariant`), so a local checkpoint's tokens do not depend on
    what else shares the batch."""
    if seed is None:
        return config
    own = sample_seed(seed, key)
    return config.model_copy(
        update={
            "sampling": config.sampling.model_copy(update={"seed": own, "batch_invariant": True}),
            "subagent_sampling": config.subagent_sampling.model_copy(
                update={"seed": own + 1, "batch_invariant": True}
            ),
        }
    )
