"""A stand-in for vLLM, which has no CPU build that installs here: only the names OpenRLHF's
reward path imports (`openrlhf.trainer.ray.vllm_engine`, `samples_generator`). No engine: the
tests drive OpenRLHF's executors with a scripted engine instead."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__version__ = "0+stub"


@dataclass
class SamplingParams:
    """The fields OpenRLHF's executors read and write."""

    max_tokens: int | None = None
    logprobs: int | None = None
    temperature: float = 1.0
    extra: dict[str, Any] | None = None
    # what `SamplesGenerator._dispatch_prompts_to_vllm` sets too (samples_generator.py 199-207)
    top_p: float = 1.0
    top_k: int = -1
    min_tokens: int = 0
    skip_special_tokens: bool = True
