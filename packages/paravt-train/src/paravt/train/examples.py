"""A recipe's examples, for both trainers: its synthetic task set generated when the recipe has
one and its files are missing (rank 0 writes, every rank waits), then its rows read and reported."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from paravt.tools import SynthConfig, generate
from paravt.train.ranks import barrier, is_rank0
from paravt.train.recipe import DataSpec
from paravt.train.synth_sets import stale_synth

log = logging.getLogger(__name__)


def ensure_synth(data: DataSpec) -> None:
    """Generate the recipe's synthetic task set with `paravt.tools.synth.generate` when its parquet
    files are missing (only for recipes with a `data.synth` section); refuse one already there that
    paravt-tools made with another size, seed or setting (`stale_synth`)."""
    if data.synth is None:
        return
    if all(Path(p).exists() for p in data.parquet):
        problem = stale_synth(data)
        if problem:
            raise ValueError(f"data.synth: {problem}")
        return
    if is_rank0():
        s = data.synth
        # the recipe's synth fields, as paravt-tools declares them (unset ones: its defaults)
        config = SynthConfig(
            **s.model_dump(include=set(SynthConfig.model_fields), exclude_none=True)
        )
        log.info("generating %d synthetic tasks in %s (paravt-tools synth)", s.n, s.out_dir)
        result = generate(s.out_dir, n=s.n, config=config, seed=s.seed)
        log.info(
            "synth: %d videos, %d RL rows, %d SFT rows in %.1f s",
            len(result.videos),
            result.num_rl_rows,
            result.num_sft_rows,
            result.seconds,
        )
        missing = [p for p in data.parquet if not Path(p).exists()]
        if missing:
            raise FileNotFoundError(
                f"paravt-tools synth wrote {sorted(p.name for p in Path(s.out_dir).iterdir())} "
                f"but the recipe expects {missing}; fix data.parquet"
            )
    barrier()


def load_examples(
    data: DataSpec, read: Callable[..., tuple[Sequence[Any], Any]], what: str
) -> list[Any]:
    """A recipe's rows through `read` (`paravt.train.data.read_sft_rows` / `read_rl_rows`),
    generating its synthetic task set first when the recipe has one and it is missing; the read
    report is logged as `<what> data: ...`. Both trainers load their data here."""
    ensure_synth(data)
    examples, report = read(data.parquet, root=data.root, max_rows=data.max_rows)
    log.info("%s data: %s", what, report)
    return list(examples)
