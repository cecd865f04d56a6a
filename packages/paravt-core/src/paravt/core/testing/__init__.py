"""The test helpers of ParaVT, in a room of their own: the runtime never imports them.

- `paravt.core.testing` (this module, light: pydantic): `ScriptedEngine`, a stand-in for an
  engine, so the runtime runs and is tested without a model (`scripted`); re-exported for the
  tests from the runtime: `StaticToolbox` (`paravt.core.toy`, the demo's toolbox) and the tiny
  Qwen3-VL builder, `build_tiny_qwen3vl` / `cached_tiny_qwen3vl` (`paravt.core.tiny`, which smoke
  runs, the demo and the reproduce cells use; the model needs the extra `hf`).
- `paravt.core.testing.stand_in`: the stand-in server (SGLang's native API over a transformers
  model, or scripted OpenAI-compatible chat replies), also `python -m paravt.core.testing.stand_in`;
  its model side is `paravt.core.testing.stand_in_model`.
- `paravt.core.testing.vllm`: `serve_vllm`, a real vLLM server (its CPU build) on a local
  checkpoint, as the real-server tests, the benchmarks and the experiments start it.

No runtime module of any package imports from here: an import-linter contract in the workspace's
pyproject.toml says so. The packages' tests, the benchmarks and the experiments use it.
"""

from __future__ import annotations

from paravt.core.testing.scripted import END_OF_TURN, IMAGE_TOKEN, ScriptedEngine
from paravt.core.tiny import (
    TinyQwen3VLConfig,
    build_tiny_qwen3vl,
    build_tokenizer,
    cache_key,
    cached_tiny_qwen3vl,
    default_cache_dir,
)
from paravt.core.toy import StaticToolbox

__all__ = [
    "END_OF_TURN",
    "IMAGE_TOKEN",
    "ScriptedEngine",
    "StaticToolbox",
    "TinyQwen3VLConfig",
    "build_tiny_qwen3vl",
    "build_tokenizer",
    "cache_key",
    "cached_tiny_qwen3vl",
    "default_cache_dir",
]
