"""nFrames Gating: the per-prompt overview budget K, the same for every rollout of a group.

K is drawn from `choices` by a stable hash (BLAKE2b) of `(seed, key, epoch)`, so it is identical
across the rollouts of a prompt, across processes and across runs, and (for distinct keys) uniform
over the choices. Python's `hash()` is salted per process and would break all three.
"""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, ConfigDict, Field, field_validator


class NFramesGate(BaseModel):
    """`gate.budget(key)` -> K in `choices`; `enabled=False` -> always `default`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    choices: tuple[int, ...] = Field(
        (4, 8, 16, 32, 64), min_length=1, description="Overview frame budgets drawn uniformly."
    )
    seed: int = Field(
        0, description="Changes every prompt's draw; fixed per run for reproducibility."
    )
    enabled: bool = Field(True, description="Off: every prompt gets `default` frames.")
    default: int = Field(64, ge=1, description="The budget when gating is off (reference: 64).")

    @field_validator("choices")
    @classmethod
    def _positive(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(k < 1 for k in value):
            raise ValueError(f"choices must be positive frame counts, got {value}")
        return value

    def budget(self, key: str, epoch: int = 0) -> int:
        """The frame budget K of prompt `key` (e.g. the sample id) in `epoch`.

        Pass a different `epoch` to redraw K for the same prompt in a later pass over the data.
        """
        if not self.enabled:
            return self.default
        digest = hashlib.blake2b(
            f"{self.seed}\x1f{epoch}\x1f{key}".encode("utf-8", "surrogatepass"), digest_size=8
        ).digest()
        return self.choices[int.from_bytes(digest, "big") % len(self.choices)]
