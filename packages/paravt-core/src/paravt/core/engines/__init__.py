"""Engines behind the `Engine` protocol of `paravt.core.runtime`.

- `paravt.core.engines.hf.HFEngine` (extra `hf`): transformers, in-process, CPU or GPU; the default.
- `paravt.core.engines.openai.OpenAIEngine` (extra `openai`): an OpenAI-compatible chat-completions
  server (vLLM, SGLang), text in and text out.
- `paravt.core.engines.sglang_server.SGLangServerEngine` (extra `sglang`): SGLang servers'
  native HTTP API (`sglang.launch_server`, or its router), token ids in, token ids and log-probs
  out, weight pushes with a checked version; exercised on CPU against `paravt.core.fake_sglang`.
- `paravt.core.engines.vllm_server.VLLMServerEngine` (extras `hf`, `openai`): vLLM servers for RL
  rollouts (our token ids, vLLM's sampled ids and log-probs; weights reloaded from disk with a
  checked version); checked against a real vLLM CPU server in `nox -s real_server`.
- `paravt.core.engines.scripted.ScriptedTurns`: wraps any token engine and replaces chosen main-agent
  turns with scripted text (demos and tests of a random model that never calls tools by itself).

Importing this package is light: each engine imports its heavy dependencies when it is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from paravt.core.engines.hf import HFEngine
    from paravt.core.engines.openai import OpenAIEngine
    from paravt.core.engines.scripted import ScriptedTurns
    from paravt.core.engines.sglang_server import SGLangServerEngine
    from paravt.core.engines.vllm_server import VLLMServerEngine

_LAZY = {
    "HFEngine": "paravt.core.engines.hf",
    "OpenAIEngine": "paravt.core.engines.openai",
    "SGLangServerEngine": "paravt.core.engines.sglang_server",
    "ScriptedTurns": "paravt.core.engines.scripted",
    "VLLMServerEngine": "paravt.core.engines.vllm_server",
}

__all__ = ["HFEngine", "OpenAIEngine", "SGLangServerEngine", "ScriptedTurns", "VLLMServerEngine"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'paravt.core.engines' has no attribute {name!r}")
