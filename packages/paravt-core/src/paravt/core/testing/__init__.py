"""The test helpers of ParaVT, in a room of their own: the runtime never imports them.

- `paravt.core.testing` (this module, light: pydantic): `ScriptedEngine` and `StaticToolbox`,
  stand-ins for an engine and a toolbox, so the runtime runs and is tested without a model
  (`scripted`); the tiny Qwen3-VL builder, `build_tiny_qwen3vl` / `cached_tiny_qwen3vl` (`tiny`:
  the model itself needs the extra `hf`, loaded when a model is built).
- `paravt.core.testing.stand_in`: the stand-in server (SGLang's native API over a transformers
  model, or scripted OpenAI-compatible chat replies), also `python -m paravt.core.testing.stand_in`;
  its model side is `paravt.core.testing.stand_in_model`.
- `paravt.core.testing.vllm`: `serve_vllm`, a real vLLM server (its CPU build) on a local
  checkpoint, as the real-server tests, the benchmarks and the experiments start it.

The core runtime (its root, `runtime`, `engines`, `parser`, ...) imports nothing from here: an
import-linter contract in the workspace's pyproject.toml says so. Other packages, their tests, the
benchmarks and the `paravt-core` command line use it.
"""

from __future__ import annotations

from paravt.core.testing.scripted import END_OF_TURN, IMAGE_TOKEN, ScriptedEngine, StaticToolbox
from paravt.core.testing.tiny import (
    TinyQwen3VLConfig,
    build_tiny_qwen3vl,
    build_tokenizer,
    cache_key,
    cached_tiny_qwen3vl,
    default_cache_dir,
)

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
