"""An engine from an installed package, named on the command line with nothing run first: the
entry-point group `paravt.rollout_engines` (`paravt.train.engine_registry`), and settings of the
engine's own in the recipe's `rollout.engine_settings`, validated against its `settings` model.

The toy distribution is installed the way an installer leaves one (its module and a
`*.dist-info` folder with `METADATA` and `entry_points.txt`) into a temporary folder on the
path, so no build backend or network is needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paravt.train.recipe import RecipeError, load_recipe

TOY = '''
"""A rollout engine with settings of its own: the in-process HF engine, recorded."""
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from paravt.train.rl import RolloutEngine
from paravt.train.rl.engines import HFRollouts


class ToySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note: str = "default"
    record: str


class ToyEngine(RolloutEngine):
    settings = ToySettings

    def __init__(self, inner, settings):
        self.inner, self.toy = inner, settings
        self.engine = inner.engine
        self.receives_weights = inner.receives_weights
        self.calls = []

    @classmethod
    def build(cls, ctx):
        return cls(HFRollouts.build(ctx), cls.engine_settings(ctx.recipe.rollout))

    @property
    def bucket_device(self):
        return self.inner.bucket_device

    def before_update(self):
        self.calls.append("before_update")
        self.inner.before_update()

    def load_weights(self, buckets, version):
        self.calls.append(f"load {version}")
        self.inner.load_weights(buckets, version)

    def verify(self, version):
        return self.inner.verify(version)

    def metrics(self):
        return {**self.inner.metrics(), "toy/built": 1.0}

    def close(self):
        self.inner.close()
        Path(self.toy.record).write_text(json.dumps({"note": self.toy.note, "calls": self.calls}))
'''


def install_toy(site: Path, name: str = "toy_ep") -> Path:
    """The toy distribution's files as an installer writes them, under `site`."""
    site.mkdir(parents=True, exist_ok=True)
    (site / "toy_paravt_engine.py").write_text(TOY)
    info = site / "toy_paravt_engine-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-paravt-engine\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[paravt.rollout_engines]\n{name} = toy_paravt_engine:ToyEngine\n"
    )
    return site


def test_an_installed_engine_is_named_by_a_recipe_and_its_settings_are_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(install_toy(tmp_path / "site", "toy_ep_recipe")))
    base = [f"output_dir={tmp_path}", "rollout.engine=toy_ep_recipe"]
    r = load_recipe("tiny_paragrpo", [*base, "rollout.engine_settings.record=x.json"])
    assert r.rollout.engine == "toy_ep_recipe"
    assert r.rollout.engine_settings == {"record": "x.json"}
    with pytest.raises(RecipeError, match=r"rollout\.engine_settings\.colour: Extra inputs"):
        load_recipe(
            "tiny_paragrpo",
            [*base, "rollout.engine_settings.record=x", "rollout.engine_settings.colour=red"],
        )
    with pytest.raises(RecipeError, match=r"rollout\.engine_settings\.record: Field required"):
        load_recipe("tiny_paragrpo", base)
    # a built-in engine takes no settings of its own
    with pytest.raises(RecipeError, match=r"rollout\.engine=hf takes no settings of its own"):
        load_recipe("tiny_paragrpo", [f"output_dir={tmp_path}", "rollout.engine_settings.x=1"])


def test_a_broken_entry_point_names_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = install_toy(tmp_path / "site", "toy_ep_broken")
    (site / "toy_paravt_engine-0.1.dist-info" / "entry_points.txt").write_text(
        "[paravt.rollout_engines]\ntoy_ep_broken = toy_paravt_engine:NoSuchEngine\n"
    )
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(RecipeError, match=r"toy_paravt_engine:NoSuchEngine.*failed to load"):
        load_recipe("tiny_paragrpo", [f"output_dir={tmp_path}", "rollout.engine=toy_ep_broken"])


def test_an_entry_point_under_a_built_in_name_is_refused_not_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from paravt.train.engine_registry import engine_class

    monkeypatch.syspath_prepend(str(install_toy(tmp_path / "site", "hf")))
    with pytest.raises(ValueError, match=r"'hf' is a built-in engine.*rename the entry point"):
        engine_class("hf")


@pytest.mark.slow
def test_an_installed_engine_trains_two_steps_from_the_command_line(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    site = install_toy(tmp_path / "site")
    record, run = tmp_path / "record.json", tmp_path / "run"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
    }
    env["HF_HUB_OFFLINE"] = "1"
    synth = tmp_path / "synth"
    proc = subprocess.run(
        [
            sys.executable, "-m", "paravt.train", "rl", "tiny_paragrpo",
            f"model.path={tiny_model_path}", f"output_dir={run}",
            "rollout.engine=toy_ep", "rollout.engine_settings.note=hello",
            f"rollout.engine_settings.record={record}",
            f"data.synth.out_dir={synth}", "data.synth.n=4", f"data.parquet=[{synth}/rl.parquet]",
            "max_steps=2", "rollout.batch_prompts=2", "rollout.group_size=2",
            "rollout.max_new_tokens=12", "rollout.subagent_max_new_tokens=8",
            "checkpoint.every_steps=0", "checkpoint.save_final=false", "logging.progress=false",
        ],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = json.loads(record.read_text())
    assert done == {"note": "hello", "calls": ["before_update", "before_update"]}
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["toy/built"] == 1.0 for r in rows)
