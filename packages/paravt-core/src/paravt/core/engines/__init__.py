"""Engines behind the `Engine` protocol of `paravt.core.runtime`.

- `paravt.core.engines.hf.HFEngine` (extra `hf`): transformers, in-process, CPU or GPU; the default.
- `paravt.core.engines.openai.OpenAIEngine` (extra `openai`): an OpenAI-compatible chat-completions
  server (vLLM, SGLang), text in and text out.
- `paravt.core.engines.sglang_server.SGLangServerEngine` (extra `sglang`): SGLang servers'
  native HTTP API (`sglang.launch_server`, or its router), token ids in, token ids and log-probs
  out, weight pushes with a checked version; exercised on CPU against `paravt.core.testing.stand_in`.
- `paravt.core.engines.vllm_server.VLLMServerEngine` (extras `hf`, `openai`): vLLM servers for RL
  rollouts (our token ids, vLLM's sampled ids and log-probs; weights reloaded from disk with a
  checked version); checked against a real vLLM CPU server in `nox -s real_server`.
- `paravt.core.engines.weights.ServerWeights`: the weight side both server engines share (a
  versioned push from disk, `check_weights` against the trainer's log-probs).
- `paravt.core.engines.scripted.ScriptedTurns`: wraps any token engine and replaces chosen main-agent
  turns with scripted text (demos and tests of a random model that never calls tools by itself).

Importing this package is light: each engine imports its heavy dependencies when it is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from paravt.core.engines.hf import HFChatEncoder, HFEngine, ImageChunk
    from paravt.core.engines.openai import OpenAIEngine, image_data_url, served_model_name
    from paravt.core.engines.scripted import ScriptedTurns
    from paravt.core.engines.sglang_server import (
        ServerError,
        SGLangServerEngine,
        StaleWeightsError,
        WeightUpdateGroup,
    )
    from paravt.core.engines.vllm_server import VLLMServer, VLLMServerEngine, VLLMServerError
    from paravt.core.engines.weights import (
        ServerWeights,
        bucket_tensors,
        iter_buckets,
        write_checkpoint,
    )

# each name is loaded from its module when first used (the engines need the optional extras)
_LAZY = {
    "HFChatEncoder": "paravt.core.engines.hf",
    "HFEngine": "paravt.core.engines.hf",
    "ImageChunk": "paravt.core.engines.hf",
    "OpenAIEngine": "paravt.core.engines.openai",
    "image_data_url": "paravt.core.engines.openai",
    "served_model_name": "paravt.core.engines.openai",
    "ScriptedTurns": "paravt.core.engines.scripted",
    "SGLangServerEngine": "paravt.core.engines.sglang_server",
    "ServerError": "paravt.core.engines.sglang_server",
    "StaleWeightsError": "paravt.core.engines.sglang_server",
    "WeightUpdateGroup": "paravt.core.engines.sglang_server",
    "VLLMServer": "paravt.core.engines.vllm_server",
    "VLLMServerEngine": "paravt.core.engines.vllm_server",
    "VLLMServerError": "paravt.core.engines.vllm_server",
    "ServerWeights": "paravt.core.engines.weights",
    "bucket_tensors": "paravt.core.engines.weights",
    "iter_buckets": "paravt.core.engines.weights",
    "write_checkpoint": "paravt.core.engines.weights",
}

__all__ = [
    "HFChatEncoder",
    "HFEngine",
    "ImageChunk",
    "OpenAIEngine",
    "SGLangServerEngine",
    "ScriptedTurns",
    "ServerError",
    "ServerWeights",
    "StaleWeightsError",
    "VLLMServer",
    "VLLMServerEngine",
    "VLLMServerError",
    "WeightUpdateGroup",
    "bucket_tensors",
    "image_data_url",
    "iter_buckets",
    "served_model_name",
    "write_checkpoint",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'paravt.core.engines' has no attribute {name!r}")
