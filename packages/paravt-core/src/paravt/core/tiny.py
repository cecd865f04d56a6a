"""Moved to `paravt.core.testing.tiny` (also exported by `paravt.core.testing`); this old path
re-exports it, with a DeprecationWarning, until a later release removes it."""

from __future__ import annotations

import warnings

from paravt.core.testing.tiny import (
    CHAT_SPECIAL_TOKENS,
    CHAT_TEMPLATE,
    FORMAT_VERSION,
    MARKER_FILE,
    PROTOCOL_TAGS,
    TinyQwen3VLConfig,
    build_tiny_qwen3vl,
    build_tokenizer,
    cache_key,
    cached_tiny_qwen3vl,
    default_cache_dir,
)

__all__ = [
    "CHAT_SPECIAL_TOKENS",
    "CHAT_TEMPLATE",
    "FORMAT_VERSION",
    "MARKER_FILE",
    "PROTOCOL_TAGS",
    "TinyQwen3VLConfig",
    "build_tiny_qwen3vl",
    "build_tokenizer",
    "cache_key",
    "cached_tiny_qwen3vl",
    "default_cache_dir",
]

warnings.warn(
    "paravt.core.tiny moved to paravt.core.testing.tiny (or import from paravt.core.testing)",
    DeprecationWarning,
    stacklevel=2,
)
