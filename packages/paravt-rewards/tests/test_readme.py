from __future__ import annotations

import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1]


def test_the_readme_quickstart_is_the_example_file() -> None:
    readme = (PKG / "README.md").read_text()
    section = readme.split("## Quickstart", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert block is not None
    assert block.group(1) == (PKG / "examples" / "quickstart.py").read_text()


def test_the_quickstart_runs(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(PKG / "examples" / "quickstart.py"), run_name="__main__")
    assert capsys.readouterr().out.startswith("2.8 1.0 1.0 0.8")


def test_importing_the_package_and_its_adapters_loads_neither_torch_nor_numpy() -> None:
    code = (
        "import sys, paravt.rewards, paravt.rewards.integrations; "
        "print(sorted(m for m in ('torch', 'numpy', 'httpx') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
