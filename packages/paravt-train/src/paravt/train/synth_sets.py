"""Whether the synthetic task set already in a recipe's `data.synth.out_dir` is the one the recipe
asks for. Light (no torch, no paravt-tools import): `paravt-train doctor` asks it too."""

from __future__ import annotations

import json
from pathlib import Path

from paravt.train.recipe import DataSpec


def stale_synth(data: DataSpec) -> str | None:
    """Why the set in `data.synth.out_dir` is not the recipe's: its `manifest.json` (written by
    paravt-tools synth) names another size, seed or setting for a field the recipe sets. None when
    it matches, or when there is no manifest to compare (a set made by other means)."""
    if data.synth is None:
        return None
    try:
        manifest = json.loads((Path(data.synth.out_dir) / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict):
        return None
    config = manifest.get("config")
    made = {"n": manifest.get("n"), "seed": manifest.get("seed")}
    made |= config if isinstance(config, dict) else {}
    # the recipe's fields as paravt-tools records them (JSON); a field the recipe leaves unset
    # takes paravt-tools' default, which the recipe does not name, so it is not compared
    wanted = data.synth.model_dump(mode="json", exclude_none=True, exclude={"out_dir"})
    differ = [k for k in wanted if k in made and made[k] != wanted[k]]
    if not differ:
        return None
    shown = ", ".join(f"{k}={made[k]!r} (the recipe: {wanted[k]!r})" for k in differ)
    return (
        f"{data.synth.out_dir} already holds a synthetic set made with {shown}, and its parquet "
        "files would be read as if they were the recipe's; delete that folder to generate the "
        "set the recipe asks for, or point data.synth.out_dir (and data.parquet) elsewhere"
    )
