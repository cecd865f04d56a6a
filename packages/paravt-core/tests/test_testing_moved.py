"""Where the test helpers and the runtime's tiny pieces live (issue 46): the runtime never loads
`paravt.core.testing`, the tiny model builder and the demo's toolbox are runtime modules that the
test helpers re-export, and the stand-in's pre-0.2 paths (deprecated in 0.2.0) are gone."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import paravt.core.testing
import paravt.core.tiny
import paravt.core.toy


def test_the_runtime_does_not_load_the_test_helpers() -> None:
    """What a smoke run, the demo and the trainers import: the tiny builder and the toy toolbox,
    the engines and the runtime, and paravt.core.testing nowhere among them."""
    code = (
        "import sys, paravt.core, paravt.core.engines, paravt.core.runtime, paravt.core.tiny, "
        "paravt.core.toy, paravt.core.cli; "
        "sys.exit([m for m in sys.modules if m.startswith('paravt.core.testing')] or 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr + result.stdout


def test_the_test_helpers_re_export_the_runtime_pieces() -> None:
    assert paravt.core.testing.cached_tiny_qwen3vl is paravt.core.tiny.cached_tiny_qwen3vl
    assert paravt.core.testing.build_tiny_qwen3vl is paravt.core.tiny.build_tiny_qwen3vl
    assert paravt.core.testing.StaticToolbox is paravt.core.toy.StaticToolbox


@pytest.mark.parametrize("old", ["paravt.core.stand_in", "paravt.core.stand_in_model"])
def test_the_stand_ins_old_paths_are_gone(old: str) -> None:
    sys.modules.pop(old, None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
