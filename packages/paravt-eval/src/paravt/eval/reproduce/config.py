"""What `paravt-eval reproduce` runs: seeds, blocks, steps, held-out size, and the `--quick` preset."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

BLOCKS = ("A", "B", "C")
# the task variants of paravt.train.miniature.TASKS (named here so the config loads without torch;
# tests/test_reproduce checks the two lists agree)
TASKS = ("prior", "prior_kept", "costly", "plain")
# Overview budgets of the held-out columns: 8, the dense budget (the analogue of the paper's 64
# frames: the primary column), then 4 and 2 (the overview usually misses the square).
EVAL_BUDGETS = (8, 4, 2)


class ReproduceConfig(BaseModel):
    """The paper's Table 2 in miniature (and, with `paper_splits`, Table 1 on the paper's splits).

    Defaults are the full run: 5 training seeds, blocks A, B and C, 40 RL steps per arm, 64
    held-out videos per column, greedy and 4 samples per question, on the `prior_kept` task (the
    paper's mechanism with its preconditions made true: a tool prior the cold start keeps, a tool
    worth calling at small budgets, the gate over them). `quick()` is the variant the test suite
    runs.
    """

    model_config = ConfigDict(extra="forbid")

    out: Path = Field(Path("runs/reproduce"), description="Output directory (cells are cached).")
    task: str = Field(
        "prior_kept",
        description="The miniature's task variant (paravt.train.miniature.TASKS): 'prior_kept' "
        "(the default and the second pre-registration's task: the `prior` task with the "
        "preconditions its registered run lacked, made true on probes of the SFT policy: a tool "
        "worth calling at K = 2 and a prior the cold start keeps; issue 45), 'prior' (the first "
        "registration's: a competing tool prior pre-trained before a short cold start, a "
        "dense budget often but not always enough, the gate over it), "
        "'costly' (a context "
        "window a tool call can overflow at the dense overview; issue 25) or 'plain' (calls cost "
        "nothing).",
    )
    seeds: tuple[int, ...] = Field((0, 1, 2, 3, 4), min_length=1, description="Training seeds.")
    blocks: tuple[str, ...] = Field(BLOCKS, min_length=1, description="Table 2 blocks to run.")
    sft_steps: int | None = Field(
        None, ge=1, description="Cold-start SFT steps (default: the task's: 500, 100 or 1600)."
    )
    prior_steps: int | None = Field(
        None, ge=0, description="Tool-prior steps before the cold start (default: the task's)."
    )
    rl_steps: int = Field(40, ge=1, description="RL steps per arm.")
    n_sft_videos: int = Field(96, ge=1, description="Videos with SFT teacher traces.")
    n_rl_videos: int = Field(32, ge=1, description="Videos whose questions are RL prompts.")
    n_eval: int = Field(64, ge=1, description="Held-out videos (documents) per column.")
    eval_budgets: tuple[int, ...] = Field(
        EVAL_BUDGETS, min_length=1, description="Overview frames K of the held-out columns."
    )
    eval_samples: int = Field(
        4,
        ge=0,
        description="Beside the greedy columns: episodes per held-out question sampled at "
        "`eval_temperature` (seeded, paired by question), so arms that differ in what they "
        "sample can be told apart where greedy decoding answers alike. 0: greedy only.",
    )
    eval_temperature: float = Field(
        0.7, gt=0.0, le=2.0, description="Temperature of the sampled columns (the rollouts')."
    )
    stats_prompts: int = Field(
        32, ge=1, description="Training prompts (x group size) for base/SFT f_tau and kappa."
    )
    batch_size: int = Field(32, ge=1, description="Held-out samples generated together.")
    jobs: int = Field(
        1, ge=1, le=16, description="Seeds trained and measured at once (one process each)."
    )
    device: str = "cpu"
    paper_splits: bool = Field(
        False, description="Also run the seven paper splits on --checkpoints through lmms-eval."
    )
    checkpoints: str | None = Field(
        None, description="stage=PATH pairs for --paper-splits (base, sft, grpo, para_grpo)."
    )

    @model_validator(mode="after")
    def _known_blocks(self) -> ReproduceConfig:
        if self.task not in TASKS:
            raise ValueError(f"task {self.task!r}: one of {', '.join(TASKS)}")
        bad = [b for b in self.blocks if b not in BLOCKS]
        if bad:
            raise ValueError(f"blocks {bad}: each block is one of {', '.join(BLOCKS)}")
        if self.checkpoints and not self.paper_splits:
            raise ValueError(
                "--checkpoints names checkpoints for the paper splits; add --paper-splits "
                "(the miniature trains its own checkpoints)"
            )
        return self

    @classmethod
    def quick(cls, out: Path, **overrides: object) -> ReproduceConfig:
        """Seconds, not minutes: 2 seeds, blocks A and C, a few steps, 8 held-out videos.
        It shows the pipeline runs end to end and caches; its numbers mean nothing."""
        fields: dict[str, object] = {
            "out": out,
            "seeds": (0, 1),
            "blocks": ("A", "C"),
            "sft_steps": 30,
            "prior_steps": 10,
            "rl_steps": 2,
            "n_sft_videos": 8,
            "n_rl_videos": 4,
            "n_eval": 8,
            "eval_budgets": (8, 2),
            "eval_samples": 0,
            "stats_prompts": 4,
            **overrides,
        }
        return cls.model_validate(fields)
