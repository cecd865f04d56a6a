"""The miniature: a task a 1 M-parameter Qwen3-VL learns on 2 CPU cores, and its training arms.

The task (`paravt.tools.synth`, layout `single`): a 16 s video shows one coloured square, big
enough to fill the frame's shorter side, for 2 s; "What colour is the square?". At K = 2 or 4
overview frames the overview usually misses it; at K >= 8 (= duration / needle) it always shows
it; two parallel crops of 4 frames over the halves of the video always find it, one crop about
half the time. Half of the main-agent teacher traces answer from the overview alone (right when
it shows the square, a guess otherwise), so the SFT policy calls the tool on only some prompts:
RL has something to learn, and the tool is what makes the answer findable.

Three users, one definition:
- `paravt-train smoke` and `tests/test_learning.py`: SFT, then one PARA-GRPO run with the gate
  drawing K from `GATED_K` (`rl_recipe(..., arm=None)`).
- `paravt-eval reproduce` (the paper's Table 2 in miniature): the `ARMS` below, each an RL run
  from the same SFT checkpoint (teacher traces at K = 2, 4 and 8), with the gate drawing K from
  `TABLE2_GATE` (budgets where the overview usually misses the square) and the arms without
  gating seeing `TABLE2_FIXED_K` = 8 frames, where the overview always shows it and the tool is
  unnecessary: the analogue of the paper's non-gated runs at 64 frames, its Tool Necessity Gap.
  (A first run with the gate over {2, 4, 8} left a third of the prompts without a reason to read
  the crops: after 30 steps its main agent called two crops and still answered from the
  overview, 50% at K = 2 against 86% for the smoke run's gate over {2, 4}.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paravt.train.recipe import DataSpec, RLRecipe, SFTRecipe, load_recipe

SFT_VIDEOS = 96  # videos with teacher traces (one trace set per overview budget)
RL_VIDEOS = 32  # RL prompts come from other videos than the SFT traces
EVAL_VIDEOS = 32  # held-out videos, neither SFT's nor RL's (reproduce uses more)
SFT_SEED, RL_SEED, EVAL_SEED = 0, 10_000, 20_000  # synth seeds: disjoint video sets

SYNTH = [
    "data.synth.layout=single",
    f"data.synth.n={SFT_VIDEOS}",
    "data.synth.duration_s=16",
    "data.synth.fps=2",
    "data.synth.needle_s=2",
    "data.synth.square_size=[0.9,1.0]",
    "data.synth.question_types=[oe]",
    "data.synth.crop_max_frames=4",
    "data.synth.crop_windows=2",
    "data.synth.tool_fraction=0.5",
    "data.synth.prompt_mode=agentic_minimal",
]
VIDEO = ["video.overview_frames=4", "video.max_crop_frames=4"]
SFT = [
    "max_steps=500",
    "sft.batch_size=8",
    "sft.packing=true",
    "sft.packing_length=2048",
    "optim.lr=2e-3",
    "optim.warmup_steps=15",
]
RL = [
    "rollout.batch_prompts=4",
    "rollout.group_size=8",
    "rollout.max_turns=3",
    "rollout.max_parallel=5",
    "rollout.prompt_mode=agentic_minimal",
    "rollout.max_new_tokens=80",
    "rollout.subagent_max_new_tokens=16",
    "gating.choices=[2,4]",
    "checkpoint.every_steps=0",
]
LR = 3e-4
# "Learning rate 0" for control runs: the recipe requires lr > 0; at 1e-30 no float32 weight moves.
LR_ZERO = 1e-30
GATED_K = (2, 4)  # the smoke run's and the learning test's gate
RL_STEPS = 30  # the smoke run's RL steps

# Table 2 in miniature (paravt-eval reproduce).
TABLE2_GATE = (2, 4)
TABLE2_FIXED_K = 8
TABLE2_SFT_K = (2, 4, 8)  # teacher traces at every K an arm sees
# The paper names a penalty term gamma (Table 2, "- Penalty Term"); the reference code has none
# (paravt-rewards' presets: 0). The miniature's full recipe sets it, so that removing it is a row:
# gamma times the fraction of call attempts that were invalid is subtracted from the reward.
TABLE2_GAMMA = 0.2


@dataclass(frozen=True)
class Arm:
    """One RL configuration of Table 2: which of PARA-GRPO's parts it has."""

    name: str
    label: str
    block: str  # "A" (training stage) or "B" (component effectiveness)
    anchoring: bool  # think prefix + answer_suffix + selective anchoring (lambda 0.5)
    gating: bool  # nFrames gating over TABLE2_GATE; else TABLE2_FIXED_K overview frames
    tool_reward: bool = True  # R_tool (the reference vanilla GRPO keeps it too)
    gamma: float = 0.0

    def overrides(self) -> list[str]:
        """Recipe overrides on top of `tiny_paragrpo` + `VIDEO` + `RL`."""
        reward = [f"reward.overrides.gamma={self.gamma}"]
        if not self.tool_reward:
            reward.append("reward.overrides.tool_reward=false")
        return [
            f"rollout.think_prefix={str(self.anchoring).lower()}",
            f"reward.preset={'paragrpo' if self.anchoring else 'vanilla'}",
            *reward,
            f"gating.enabled={str(self.gating).lower()}",
            f"gating.choices=[{','.join(map(str, TABLE2_GATE))}]",
            f"video.overview_frames={TABLE2_FIXED_K}",
        ]

    def describe(self) -> str:
        parts = [
            "anchoring" if self.anchoring else "no anchoring",
            f"gating K in {list(TABLE2_GATE)}" if self.gating else f"K = {TABLE2_FIXED_K}",
            "R_tool" if self.tool_reward else "no R_tool",
            f"gamma {self.gamma:g}",
        ]
        return ", ".join(parts)


ARMS: dict[str, Arm] = {
    a.name: a
    for a in (
        Arm("grpo", "+SFT+GRPO", "A", anchoring=False, gating=False),
        Arm("para_grpo", "+SFT+PARA-GRPO", "A", anchoring=True, gating=True, gamma=TABLE2_GAMMA),
        Arm("anchoring_only", "+SFT+GRPO + Exploration Anchoring", "B", True, False),
        Arm("gating_only", "+SFT+GRPO + nFrames Gating", "B", False, True),
        Arm(
            "no_tool_reward",
            "Full PARA-GRPO - R_tool",
            "B",
            True,
            True,
            tool_reward=False,
            gamma=TABLE2_GAMMA,
        ),
        Arm("no_gamma", "Full PARA-GRPO - penalty gamma", "B", True, True, gamma=0.0),
    )
}


@dataclass
class TaskData:
    """Where one copy of the task lives: SFT traces per overview budget, RL rows, held-out rows."""

    sft: dict[int, Path]  # K -> sft.parquet (the same videos, traces over a K-frame overview)
    rl: Path  # rl.parquet of the RL videos
    held_out: Path  # rl.parquet of the held-out videos (its directory holds the mp4 files)


def make_task_data(
    root: Path,
    *,
    sft_budgets: Sequence[int] = GATED_K,
    n_sft: int = SFT_VIDEOS,
    n_rl: int = RL_VIDEOS,
    n_eval: int = EVAL_VIDEOS,
    seed_offset: int = 0,
) -> TaskData:
    """Generate (or reuse) the task's videos and rows under `root`; returns where they are."""
    from paravt.train.frames import ensure_synth

    def synth(where: Path, **update: Any) -> None:
        spec = load_recipe(
            "tiny_sft",
            [
                f"output_dir={root}",
                "model.path=unused",
                f"data.synth.out_dir={where}",
                f"data.parquet=[{where / 'sft.parquet'}]",
                *SYNTH,
            ],
        ).data.synth
        assert spec is not None
        spec = spec.model_copy(update=update)
        ensure_synth(DataSpec(parquet=[str(where / "sft.parquet")], synth=spec))

    for k in sft_budgets:  # the same videos, teacher traces over each overview budget
        synth(root / f"synth-sft-k{k}", sft_overview_frames=k, n=n_sft, seed=SFT_SEED + seed_offset)
    synth(root / "synth-rl", n=n_rl, seed=RL_SEED + seed_offset)
    synth(root / "synth-held", n=n_eval, seed=EVAL_SEED + seed_offset)
    return TaskData(
        sft={k: root / f"synth-sft-k{k}" / "sft.parquet" for k in sft_budgets},
        rl=root / "synth-rl" / "rl.parquet",
        held_out=root / "synth-held" / "rl.parquet",
    )


def sft_recipe(
    out: Path,
    model: Path,
    data: TaskData,
    *,
    seed: int = 0,
    steps: int | None = None,
    extra: Sequence[str] = (),
) -> SFTRecipe:
    """The cold start: `tiny_sft` on the teacher traces of every budget in `data`."""
    parquets = ", ".join(str(p) for p in data.sft.values())
    recipe = load_recipe(
        "tiny_sft",
        [
            f"output_dir={out}",
            f"model.path={model}",
            f"data.parquet=[{parquets}]",
            "data.synth=null",
            f"seed={seed}",
            *VIDEO,
            *SFT,
            *([f"max_steps={steps}"] if steps else []),
            *extra,
        ],
        stage="sft",
    )
    assert isinstance(recipe, SFTRecipe)
    return recipe


def rl_recipe(
    out: Path,
    init: Path,
    parquet: Path,
    *,
    arm: Arm | None = None,
    seed: int = 0,
    steps: int = RL_STEPS,
    lr: float = LR,
    extra: Sequence[str] = (),
) -> RLRecipe:
    """An RL run from `init` on the rows of `parquet`: the smoke run's PARA-GRPO (`arm=None`:
    gate over `GATED_K`, 4-frame overview otherwise) or one Table 2 arm."""
    recipe = load_recipe(
        "tiny_paragrpo",
        [
            f"output_dir={out}",
            f"model.path={init}",
            "model.build_tiny=false",
            f"data.parquet=[{parquet}]",
            "data.synth=null",
            f"seed={seed}",
            *VIDEO,
            *RL,
            f"optim.lr={lr}",
            f"max_steps={steps}",
            *(arm.overrides() if arm is not None else []),
            *extra,
        ],
        stage="rl",
    )
    assert isinstance(recipe, RLRecipe)
    return recipe
