"""The lmms-eval entry point (group `lmms_eval.models`): registers the chat model `paravt`.

Kept tiny on purpose: lmms-eval loads it while building its model registry, so it must not import
the model class (or torch) itself; lmms-eval imports `chat_class_path` only when `--model paravt`
is asked for.
"""

from __future__ import annotations

from typing import Any

MODEL_ID = "paravt"
CHAT_CLASS_PATH = "paravt.eval.lmms_model.ParaVT"


def manifest() -> Any:
    """The `ModelManifest` of the `paravt` chat model (lmms-eval >= 0.7)."""
    from lmms_eval.models.registry_v2 import ModelManifest

    return ModelManifest(model_id=MODEL_ID, chat_class_path=CHAT_CLASS_PATH)
