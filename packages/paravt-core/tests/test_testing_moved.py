"""The test helpers' old module paths (before `paravt.core.testing`) still answer, with a warning."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import paravt.core.testing.stand_in
import paravt.core.testing.stand_in_model
import paravt.core.testing.tiny


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("paravt.core.tiny", paravt.core.testing.tiny, "cached_tiny_qwen3vl"),
        ("paravt.core.stand_in", paravt.core.testing.stand_in, "FakeChatServer"),
        ("paravt.core.stand_in_model", paravt.core.testing.stand_in_model, "FakeSGLang"),
    ],
)
def test_an_old_path_warns_and_gives_the_moved_object(old: str, new: object, name: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=r"moved to paravt\.core\.testing"):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(new, name)
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018


def test_the_old_stand_in_command_still_serves_its_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "paravt.core.stand_in", "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0 and "--model-path" in result.stdout
    assert "DeprecationWarning" in result.stderr


def test_the_runtime_does_not_load_the_test_helpers() -> None:
    code = (
        "import sys, paravt.core, paravt.core.engines, paravt.core.runtime; "
        "sys.exit([m for m in sys.modules if m.startswith('paravt.core.testing')] or 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
