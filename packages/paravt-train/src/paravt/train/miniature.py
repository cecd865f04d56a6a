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

One file because the task, its arms and their evaluation are one experiment's definition: the
settings chosen by measurement are explained next to the code that uses them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paravt.train.rl.learner as learner  # sabotaged(): where the update finds its loss
from paravt.core import parse_response
from paravt.core.engines import HFEngine
from paravt.train.examples import ensure_synth
from paravt.train.frames import FrameSource
from paravt.train.modeling import load_model_and_processor, pick_device
from paravt.train.recipe import DataSpec, RLRecipe, SFTRecipe, load_recipe
from paravt.train.rl import (
    build_gate,
    build_reward_config,
    episode_metrics,
    load_rl_examples,
    rollout,
    score_rollouts,
    train_rl,
)
from paravt.train.sft import train_sft

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
LR = 1e-4  # tiny_paragrpo's (run 9's setting); evidence_credit.py's reference arms run at 3e-4
# The numerics the learning check runs in on a CPU: fp32 (the learning test's), and the GPU's
# (FSDP2 with world size 1: fp32 master weights, bf16 compute, bf16 rollouts and evaluation).
NUMERICS: dict[str, tuple[str, ...]] = {
    "fp32": (),
    "bf16": ("model.dtype=bfloat16", "distributed.strategy=fsdp2", "distributed.device=cpu"),
}
# The same bf16 rounding points on a CPU without bf16 instructions (AVX2), where native bf16
# matmuls are about 100x slower: matmuls through fp32 kernels (paravt.train.numerics).
NUMERICS["bf16_via_fp32"] = (*NUMERICS["bf16"], "model.bf16_matmul=fp32")
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
    gating: bool  # nFrames gating over the task's gate; else its dense overview budget
    tool_reward: bool = True  # R_tool (the reference vanilla GRPO keeps it too)
    gamma: float = 0.0
    # the reference's sequence-level anchoring even where the task anchors at token level
    sequence_anchoring: bool = False
    lr_zero: bool = False  # the control: the arm's recipe at learning rate ~0
    token_tasks_only: bool = False  # an arm that only differs from another on token-level tasks

    def token_anchoring(self, task: Task | None) -> bool:
        """Whether this arm anchors at token level (with the tool-call boundaries) in `task`."""
        return (
            self.anchoring
            and task is not None
            and task.token_anchoring
            and not self.sequence_anchoring
        )

    def overrides(self, task: Task | None = None) -> list[str]:
        """Recipe overrides on top of `tiny_paragrpo` + `VIDEO` + `RL`."""
        gate = task.gate if task is not None else TABLE2_GATE
        dense = task.fixed_k if task is not None else TABLE2_FIXED_K
        reward = [f"reward.overrides.gamma={self.gamma}"]
        if not self.tool_reward:
            reward.append("reward.overrides.tool_reward=false")
        if self.token_anchoring(task):
            reward += [
                "advantage.token_level_anchoring=true",
                "reward.overrides.anchor_tool_calls=true",
            ]
        if not self.anchoring:  # no anchor parts (lambda 0), so no charge on tokens to guard
            reward.append("advantage.no_credit_on_issues=false")
        return [
            f"rollout.think_prefix={str(self.anchoring).lower()}",
            f"reward.preset={'paragrpo' if self.anchoring else 'vanilla'}",
            *reward,
            f"gating.enabled={str(self.gating).lower()}",
            f"gating.choices=[{','.join(map(str, gate))}]",
            f"video.overview_frames={dense}",
        ]

    def describe(self, task: Task | None = None) -> str:
        gate = task.gate if task is not None else TABLE2_GATE
        dense = task.fixed_k if task is not None else TABLE2_FIXED_K
        parts = [
            (
                (
                    "token-level anchoring (tool-call boundaries included)"
                    if self.token_anchoring(task)
                    else "anchoring"
                )
                if self.anchoring
                else "no anchoring"
            ),
            f"gating K in {list(gate)}" if self.gating else f"K = {dense}",
            "R_tool" if self.tool_reward else "no R_tool",
            f"gamma {self.gamma:g}",
        ]
        if self.lr_zero:
            parts.append("learning rate 0 (control)")
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
        # issue 32: the reference's sequence-level anchoring beside the token-level default, and
        # vanilla GRPO at learning rate 0 (the control of the collapse verdict)
        Arm(
            "para_grpo_sequence",
            "Full PARA-GRPO, sequence-level anchoring (reference form)",
            "B",
            True,
            True,
            gamma=TABLE2_GAMMA,
            sequence_anchoring=True,
            token_tasks_only=True,
        ),
        Arm("grpo_lr0", "+SFT+GRPO at learning rate 0 (control)", "A", False, False, lr_zero=True),
    )
}


@dataclass(frozen=True)
class Task:
    """A variant of the miniature task: settings of the environment every arm shares."""

    name: str
    summary: str
    rollout: tuple[str, ...] = ()  # recipe overrides of every RL arm (and of its evaluation)
    synth: tuple[str, ...] = ()  # overrides of `SYNTH` (the videos and teacher traces)
    video: tuple[str, ...] = ()  # overrides of `VIDEO` (SFT and RL)
    gate: tuple[int, ...] = TABLE2_GATE  # the gated arms' overview budgets
    fixed_k: int = TABLE2_FIXED_K  # the dense budget: the arms without gating, the primary column
    sft_k: tuple[int, ...] = TABLE2_SFT_K  # teacher traces at these budgets
    prior_steps: int = 0  # tool-prior pre-training steps before the cold start (0: none)
    sft_steps: int = 500  # cold-start steps
    token_anchoring: bool = False  # the anchored arms anchor at token level, tool calls included
    prior_think: bool = False  # the prior's calling turn thinks first (`prior_messages(think=)`)
    # the prior stage also learns the sub-agents' teacher rows (perception): a pretrained VLM can
    # describe frames already; only its calling habit differs from ParaVT's
    prior_subagents: bool = False
    # this share of the prior's calling traces joins the cold start's data, as a pretrained
    # model's habits stay beside what it is fine-tuned on (seeded by the cold start's seed)
    cold_prior_mix: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.cold_prior_mix <= 4.0:
            raise ValueError(
                f"Task {self.name!r}: cold_prior_mix={self.cold_prior_mix} is a share of the "
                "prior's calling traces, between 0 and 4 (above 1 they repeat)"
            )
        if (self.prior_subagents or self.cold_prior_mix) and not self.prior_steps:
            raise ValueError(
                f"Task {self.name!r}: prior_subagents / cold_prior_mix shape a tool-prior stage, "
                "but prior_steps is 0; give the task prior steps or drop those settings"
            )

    def without_prior(self) -> Task:
        """This task with no tool-prior stage (and so nothing of the prior in the cold start)."""
        return dataclasses.replace(self, prior_steps=0, prior_subagents=False, cold_prior_mix=0.0)


# The `prior` task (issue 32): Table 2 by the paper's own mechanism. Chosen on probes of the SFT
# policy (experiments/README.md, "The tool prior"), never on trained arms' verdicts.
# - The needle shows for 1.5 s of the 16 s video: the dense K = 8 overview (a frame every 2 s)
#   shows it in about 3 of 4 videos, K = 4 in about 3 of 8, K = 2 in about 1 of 5; two parallel
#   crops of 8 frames (one a second) always catch it. Calling is worth little at the dense budget
#   and much at the small ones, and costs the same everywhere (no context limit).
# - The gate draws from {2, 4, 8}: the reference's 8B recipe draws from {4, 8, 16, 32, 64}, the
#   dense evaluation budget (64) included; 8 is the miniature's dense budget, 2 and 4 its sparse.
# - The tool prior: `PRIOR_STEPS` SFT steps on the same videos' traces written the way a
#   pretrained reasoning VLM uses tools (`prior_messages`: direct answers in think -> answer tags,
#   calls in the leaked `<tool_code>` Python form with no think and an untagged answer after
#   them), then `PRIOR_COLD_START_STEPS` of the cold start in ParaVT's format. 100 by the rule
#   written before the last probes (experiments/README.md, "The tool prior"): the shortest cold
#   start whose SFT policy executes calls (kappa >= 0.3 under vanilla GRPO's settings) among those
#   that leak the prior most; no probed cold start with working calls leaked at all (seed 0).
PRIOR_NEEDLE_S = 1.5
PRIOR_CROP_FRAMES = 8
PRIOR_GATE = (2, 4, 8)
PRIOR_STEPS = 300
PRIOR_COLD_START_STEPS = 100


def prior_messages(
    messages: Sequence[dict[str, str]], *, think: bool = False
) -> list[dict[str, str]]:
    """A main-agent teacher trace rewritten in the tool prior's habits, as a pretrained reasoning
    VLM has them: it thinks and answers in tags when it answers directly (the think -> answer
    format of reasoning LMMs: such traces are kept as they are), but it calls tools its own way:
    each `<tool_call>` JSON call becomes `<tool_code>crop_video(start_time=S, end_time=E)
    </tool_code>` with no think before it (the Python form Qwen-VL models leak; the reference
    parser runs it), and the answer after the tool responses is the untagged sentence "The square
    is X.". So the prior competes with ParaVT's format exactly where the tool is used. With
    `think`, the calling turn keeps its think block and only the call envelope differs. System,
    user and tool messages are kept as they are."""
    calling = any(
        m["role"] == "assistant" and parse_response(m["content"]).tool_calls for m in messages
    )
    if not calling:
        return [dict(m) for m in messages]
    out: list[dict[str, str]] = []
    for m in messages:
        if m["role"] != "assistant":
            out.append(dict(m))
            continue
        parsed = parse_response(m["content"])
        calls = [c for c in parsed.tool_calls if c.ok]
        if calls:
            lines = [
                "<tool_code>crop_video(start_time={:g}, end_time={:g})</tool_code>".format(
                    c.arguments["start_time"], c.arguments["end_time"]
                )
                for c in calls
            ]
            head = ""
            if think and parsed.think is not None:
                head = f"<think>\n{parsed.think.strip()}\n</think>\n"
            out.append({"role": "assistant", "content": head + "\n".join(lines)})
        else:
            answer = (parsed.answer or "").strip()
            out.append({"role": "assistant", "content": f"The square is {answer}."})
    return out


def _write_rows(rows: list[dict[str, Any]], out: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = out.with_suffix(".tmp.parquet")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.replace(out)  # a crash never leaves a half-written file under the cached name
    return out


def write_prior_traces(
    sft_parquet: Path, out: Path, *, think: bool = False, subagents: bool = False
) -> Path:
    """`out`: the main-agent rows of `sft_parquet` with `prior_messages` traces; `subagents`: then
    the sub-agent rows of `sft_parquet` as they are (perception, which the prior already has),
    else those are left out (the prior is the main agent's calling habit)."""
    import pyarrow.parquet as pq

    if out.is_file():
        return out
    every = pq.read_table(sft_parquet).to_pylist()
    rows = [r for r in every if r.get("agent") == "main"]
    for r in rows:
        r["messages"] = prior_messages(r["messages"], think=think)
        r["id"] = f"{r['id']}_prior"
    if subagents:
        rows += [r for r in every if r.get("agent") != "main"]
    return _write_rows(rows, out)


def prior_mix(prior: Path, share: float, seed: int) -> Path:
    """A `seed`ed `share` of the calling rows of the prior's traces `prior` (main agent, the
    prior's `<tool_code>` habit), written beside it: what of the prior stays in the cold start.
    A share above 1 repeats them (1.5: each once, and half of them twice): more prior data."""
    import random

    import pyarrow.parquet as pq

    out = prior.with_name(f"{prior.stem}-mix{share:g}-s{seed}.parquet")
    if out.is_file():
        return out
    rows = [
        r
        for r in pq.read_table(prior).to_pylist()
        if r.get("agent") == "main" and any("<tool_code>" in m["content"] for m in r["messages"])
    ]
    rng = random.Random(seed)
    whole = int(share)  # above 1: every row that many times (each copy in its own order), then
    drawn = [r for _ in range(whole) for r in rng.sample(rows, len(rows))]  # the fraction drawn
    drawn += rng.sample(rows, round((share - whole) * len(rows)))
    return _write_rows(drawn, out)


PRIOR_TASK = Task(
    "prior",
    "the paper's mechanism: a competing tool prior pre-trained before a short cold start "
    f"({PRIOR_STEPS} + {PRIOR_COLD_START_STEPS} SFT steps), a needle of "
    f"{PRIOR_NEEDLE_S:g} s that the dense K = {TABLE2_FIXED_K} overview shows in most "
    "videos but not all, the gate over "
    f"{list(PRIOR_GATE)} (dense budget included) and token-level anchoring with the "
    "tool-call boundaries in the anchored arms",
    synth=(
        f"data.synth.needle_s={PRIOR_NEEDLE_S}",
        f"data.synth.crop_max_frames={PRIOR_CROP_FRAMES}",
    ),
    video=(f"video.max_crop_frames={PRIOR_CROP_FRAMES}",),
    # a seeded run samples the same tokens however its requests happen to be batched
    rollout=("rollout.batch_invariant_sampling=true",),
    gate=PRIOR_GATE,
    prior_steps=PRIOR_STEPS,
    sft_steps=PRIOR_COLD_START_STEPS,
    token_anchoring=True,
)

# The `prior_kept` task (issue 45): the `prior` task with the three preconditions its registered
# run lacked, chosen on probes of the SFT policy by the rule committed before the last of them
# (experiments/preconditions_probe.py, SELECTION; experiments/README.md, "preconditions_probe.py"),
# never on trained arms (probe C8). The square shows for 2 s, three quarters of the teacher traces
# call, the prior stage also learns the sub-agents' reports (perception), and the cold start is
# long (1600 steps) with the prior's calling traces in it one and a half times (each once, half of
# them twice). On seeds 0 and 1: an oracle's calls beat the overview by 0.55 / 0.49 at K = 2 and
# not at K = 8, the SFT policy's own K = 2 accuracy is 0.41 / 0.35 above it, the lr-0 control
# leaks the prior in 0.55 of its rollouts, its f_tau is 0.42 / 0.40 (the paper's fragile cold
# start), greedy decoding calls. The same with the prior's traces once and 1200 steps (C7) kept
# f_tau at 0.53-0.57 on four seeds. Seeds 2 and 3, probed after the choice, met all six targets
# too (K = 2 gap 0.59 / 0.63, leak 0.55, f_tau 0.41): experiments/README.md.
PRIOR_KEPT_NEEDLE_S = 2.0
PRIOR_KEPT_TOOL_FRACTION = 0.75
PRIOR_KEPT_COLD_START_STEPS = 1600
PRIOR_KEPT_MIX = 1.5
# The third registration (issue 45; docs/reproduce_rules.md): every arm's shaped rewards clipped
# at +-40, which no reward of the miniature's arms reaches (at most 3 reward units and, with
# token-level anchoring, 1 anchor unit: (4 - 0.2) * 10 = 38), instead of the released config's
# 20, which flattens every reward above 2.2: every right answer with a call reads 2.2 whatever
# else it earned (anchor, format), and the exact token decomposition put +-9 to +-22
# advantage units on single tokens of the second run's SFT policies (experiments/README.md,
# "anchor_call_probe.py"; at 40: 2.5 at most). Chosen on those probes, the same for every arm.
PRIOR_KEPT_REWARD_CLIP = 40.0

PRIOR_KEPT_TASK = dataclasses.replace(
    PRIOR_TASK,
    name="prior_kept",
    summary="the `prior` task with its preconditions made true on probes: a needle of "
    f"{PRIOR_KEPT_NEEDLE_S:g} s, {PRIOR_KEPT_TOOL_FRACTION:g} of the teacher traces calling, the "
    f"sub-agents' reports in the prior's {PRIOR_STEPS} steps, and a "
    f"{PRIOR_KEPT_COLD_START_STEPS}-step cold start that keeps the prior's calling traces "
    f"({PRIOR_KEPT_MIX:g} times); every arm's shaped rewards clipped at "
    f"+-{PRIOR_KEPT_REWARD_CLIP:g}, which none reaches",
    synth=(
        *PRIOR_TASK.synth,
        f"data.synth.tool_fraction={PRIOR_KEPT_TOOL_FRACTION}",
        f"data.synth.needle_s={PRIOR_KEPT_NEEDLE_S}",
    ),
    rollout=(*PRIOR_TASK.rollout, f"advantage.reward_clip={PRIOR_KEPT_REWARD_CLIP:g}"),
    sft_steps=PRIOR_KEPT_COLD_START_STEPS,
    prior_subagents=True,
    cold_prior_mix=PRIOR_KEPT_MIX,
)

# The context window of the `costly` task (issue 25), picked by measurement with
# experiments/tool_prior_paradox.py (the SFT policy of seed 0, 32 RL prompts x 8 episodes at
# temperature 0.7, and the lengths of its episodes): the overview prompt is 307 / 328 / 367 tokens
# at K = 2 / 4 / 8; a direct answer ends at 320-389 tokens; an episode with the two parallel calls
# ends at 451-454 (K = 2), 472-475 (K = 4) and 513-522 (K = 8) tokens (the reproduce run's SFT
# policies of seeds 0, 1 and 2 too: 513-522 at K = 8, of which 75 tokens are the calling turn and
# 55-57 the two tool responses). A window of 496 tokens is about halfway between: at the gated
# budgets both calls fit with 20+ tokens to spare, at the dense K = 8 overview the two calls' answer
# is cut (by 17+ tokens) while a direct answer fits, and so should a single call (one call block
# and one tool response fewer: an estimate from those parts; the SFT policy never makes one). A
# ledge a few tokens wide (514: 58% of those K = 8 episodes cut, 516: 3%) was rejected: it would
# turn on a seed's verbosity, not on the call.
COSTLY_CONTEXT_TOKENS = 496

TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task(
            "costly",
            "a tool call costs context: the main context (prompt included) ends at "
            f"{COSTLY_CONTEXT_TOKENS} tokens, so at the dense K = {TABLE2_FIXED_K} overview the answer "
            "after two parallel calls does not fit (a single call's should), while every episode fits at "
            "the gated budgets",
            (f"rollout.max_context_tokens={COSTLY_CONTEXT_TOKENS}",),
        ),
        Task("plain", "no context limit: a tool call never costs anything"),
        PRIOR_TASK,
        PRIOR_KEPT_TASK,
    )
}
DEFAULT_TASK = "prior_kept"  # the second and third pre-registrations' task (issue 45)


@dataclass
class TaskData:
    """Where one copy of the task lives: SFT traces per overview budget, RL rows, held-out rows."""

    sft: dict[int, Path]  # K -> sft.parquet (the same videos, traces over a K-frame overview)
    rl: Path  # rl.parquet of the RL videos
    held_out: Path  # rl.parquet of the held-out videos (its directory holds the mp4 files)
    prior: dict[int, Path] = field(default_factory=dict)  # K -> the tool prior's traces


def make_task_data(
    root: Path,
    *,
    sft_budgets: Sequence[int] = GATED_K,
    n_sft: int = SFT_VIDEOS,
    n_rl: int = RL_VIDEOS,
    n_eval: int = EVAL_VIDEOS,
    seed_offset: int = 0,
    task: Task | None = None,
) -> TaskData:
    """Generate (or reuse) the task's videos and rows under `root` (`task`'s synth settings and,
    with a prior stage, its prior traces); returns where they are."""

    def synth(where: Path, **update: Any) -> None:
        spec = load_recipe(
            "tiny_sft",
            [
                f"output_dir={root}",
                "model.path=unused",
                f"data.synth.out_dir={where}",
                f"data.parquet=[{where / 'sft.parquet'}]",
                *SYNTH,
                *(task.synth if task is not None else ()),
            ],
        ).data.synth
        assert spec is not None
        spec = spec.model_copy(update=update)
        ensure_synth(DataSpec(parquet=[str(where / "sft.parquet")], synth=spec))

    for k in sft_budgets:  # the same videos, teacher traces over each overview budget
        synth(root / f"synth-sft-k{k}", sft_overview_frames=k, n=n_sft, seed=SFT_SEED + seed_offset)
    synth(root / "synth-rl", n=n_rl, seed=RL_SEED + seed_offset)
    synth(root / "synth-held", n=n_eval, seed=EVAL_SEED + seed_offset)
    sft = {k: root / f"synth-sft-k{k}" / "sft.parquet" for k in sft_budgets}
    prior = {}
    if task is not None and task.prior_steps:
        name = "prior" + "-think" * task.prior_think + "-sub" * task.prior_subagents
        prior = {
            k: write_prior_traces(
                p,
                p.parent / f"{name}.parquet",
                think=task.prior_think,
                subagents=task.prior_subagents,
            )
            for k, p in sft.items()
        }
    return TaskData(
        sft=sft,
        rl=root / "synth-rl" / "rl.parquet",
        held_out=root / "synth-held" / "rl.parquet",
        prior=prior,
    )


def sft_recipe(
    out: Path,
    model: Path,
    data: TaskData,
    *,
    seed: int = 0,
    steps: int | None = None,
    extra: Sequence[str] = (),
    task: Task | None = None,
    prior: bool = False,
) -> SFTRecipe:
    """The cold start: `tiny_sft` on the teacher traces of every budget in `data`, with `task`'s
    share of the prior's calling traces (`prior`: the tool prior's stage on `data.prior` instead)."""
    traces = list((data.prior if prior else data.sft).values())
    if prior and not traces:
        raise ValueError("sft_recipe(prior=True): this task data has no prior traces")
    if not prior and task is not None and task.cold_prior_mix:
        if not data.prior:
            raise ValueError(
                f"sft_recipe: task {task.name!r} keeps {task.cold_prior_mix:g} of the prior's "
                "calling traces in the cold start, but this task data has no prior traces; make "
                "it with make_task_data(task=...) for a task with prior steps, or train "
                "task.without_prior()"
            )
        traces += [prior_mix(p, task.cold_prior_mix, seed) for p in data.prior.values()]
    parquets = ", ".join(str(p) for p in traces)
    recipe = load_recipe(
        "tiny_sft",
        [
            f"output_dir={out}",
            f"model.path={model}",
            f"data.parquet=[{parquets}]",
            "data.synth=null",
            f"seed={seed}",
            *VIDEO,
            *(task.video if task is not None else ()),
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
    task: Task | None = None,
    seed: int = 0,
    steps: int = RL_STEPS,
    lr: float = LR,
    extra: Sequence[str] = (),
) -> RLRecipe:
    """An RL run from `init` on the rows of `parquet`: the smoke run's PARA-GRPO (`arm=None`:
    gate over `GATED_K`, 4-frame overview otherwise) or one Table 2 arm, in `task`'s environment
    (None: no task settings, as the `plain` task)."""
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
            *(task.video if task is not None else ()),
            *RL,
            f"optim.lr={LR_ZERO if arm is not None and arm.lr_zero else lr}",
            f"max_steps={steps}",
            *(arm.overrides(task) if arm is not None else []),
            *(task.rollout if task is not None else ()),
            *extra,
        ],
        stage="rl",
    )
    assert isinstance(recipe, RLRecipe)
    return recipe


# Held-out evaluation, kept per prompt (prompts are the independent units).


@dataclass
class Evaluation:
    """Per-episode scores of one model on the held-out prompts (`group_size` episodes each)."""

    metrics: dict[str, float]
    per_prompt: dict[str, dict[str, float]]  # prompt key -> mean of each score over its episodes

    def mean_se(self, key: str) -> tuple[float, float]:
        """Mean over prompts and its standard error (prompts are the independent units)."""
        return mean_and_se([v[key] for v in self.per_prompt.values()])


SCORES = ("accuracy", "reward", "tool_use", "format")


def mean_and_se(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    m = sum(values) / n
    if n < 2:
        return m, math.nan
    var = sum((v - m) ** 2 for v in values) / (n - 1)
    return m, math.sqrt(var / n)


EVAL_SEED = 12345  # the held-out evaluation's sampling seed


def scored_rollouts(
    model: Path,
    recipe: RLRecipe,
    examples: Sequence[Any],
    *,
    frames: Any = None,
    seed: int = EVAL_SEED,
) -> Any:
    """`paravt.train.rl`'s rollout and scoring of `model` on `examples` without an update (the
    recipe's temperature, gate and group size; fixed sampling `seed`): the `Rollouts` with
    rewards and group advantages, what the recipe's first RL step would see. `frames`: where the
    frames come from (default: `FrameSource(recipe.video)`, decoding the videos)."""
    device = pick_device(recipe.distributed.device)
    net, processor = load_model_and_processor(recipe.model, device, path=model)
    ro = rollout(
        list(examples),
        HFEngine(net, processor),
        frames if frames is not None else FrameSource(recipe.video),
        build_gate(recipe),
        recipe,
        epoch=0,
        seed=seed,
    )
    score_rollouts(ro, build_reward_config(recipe), recipe)
    return ro


def evaluate_held_out(
    model: Path,
    recipe: RLRecipe,
    examples: Sequence[Any],
    *,
    frames: Any = None,
    seed: int = EVAL_SEED,
) -> Evaluation:
    """`scored_rollouts` of `model` on `examples`, kept per prompt for standard errors and paired
    differences (a fresh draw: another `seed`, or more episodes with `rollout.group_size`)."""
    return evaluation_of(scored_rollouts(model, recipe, examples, frames=frames, seed=seed))


def evaluation_of(ro: Any) -> Evaluation:
    """The `Evaluation` of scored `Rollouts`: the step metrics and the scores per prompt."""
    sums: dict[str, dict[str, list[float]]] = {}
    for ep, ex, r in zip(ro.episodes, ro.examples, ro.rewards):
        row = sums.setdefault(ex.key, {k: [] for k in SCORES})
        row["accuracy"].append(r.accuracy)
        row["reward"].append(r.total)
        row["tool_use"].append(float(ep.num_tool_calls > 0))
        row["format"].append(r.format)
    per_prompt = {k: {s: sum(v) / len(v) for s, v in row.items()} for k, row in sums.items()}
    return Evaluation(episode_metrics(ro), per_prompt)


def paired(after: Evaluation, before: Evaluation, key: str) -> tuple[float, float]:
    """Mean over prompts of `after - before` for one score, and its standard error."""
    gain = pooled_gain([(before, after)], key)
    return gain.mean, gain.se


# The learning test's runs (`tests/test_learning.py`, `experiments/learning_distribution.py`).


@dataclass
class ColdStart:
    """One seed's task data, its SFT policy and that policy's held-out evaluation."""

    seed: int
    root: Path
    data: TaskData
    sft_model: Path
    held: list[Any]  # held-out RL examples (videos neither SFT nor RL saw)
    before: Evaluation  # the SFT policy on `held`


def cold_start(
    root: Path,
    model: Path,
    *,
    seed: int,
    extra: Sequence[str] = (),
    sft_steps: int | None = None,
    sft_videos: int = SFT_VIDEOS,
) -> ColdStart:
    """Task data for `seed` (synth seeds offset by it), the SFT policy, its held-out scores.
    `extra`: recipe overrides of the SFT run and of the evaluation (numerics: e.g.
    `model.dtype=bfloat16`, `distributed.strategy=fsdp2` for the GPU's bf16 compute)."""

    data = make_task_data(root, seed_offset=seed, n_sft=sft_videos)
    sft = sft_recipe(
        root / "sft",
        model,
        data,
        seed=seed,
        steps=sft_steps,
        extra=["logging.progress=false", *extra],
    )
    sft_model = train_sft(sft)
    held_recipe = rl_recipe(root / "held", sft_model, data.held_out, seed=seed, extra=extra)
    held = load_rl_examples(held_recipe)
    return ColdStart(
        seed, root, data, sft_model, held, evaluate_held_out(sft_model, held_recipe, held)
    )


SABOTAGES = ("sign", "mask")


@contextlib.contextmanager
def sabotaged(kind: str) -> Iterator[None]:
    """Break the RL trainer on purpose, for controls that must not learn.

    `sign`: the policy-gradient sign flipped (advantages negated inside the PPO loss).
    `mask`: the loss mask inverted (prompt and tool-response tokens trained, sampled ones not).
    `""`: no sabotage."""
    if kind not in ("", *SABOTAGES):
        raise ValueError(f"unknown sabotage {kind!r}: use one of {SABOTAGES} or ''")
    real_loss, real_collate = learner.ppo_loss, learner.collate

    def flipped(logp: Any, old_logp: Any, advantages: Any, *args: Any, **kw: Any) -> Any:
        return real_loss(logp, old_logp, -advantages, *args, **kw)

    def inverted(*args: Any, **kw: Any) -> Any:
        batch = real_collate(*args, **kw)
        batch["mask"] = (1.0 - batch["mask"]) * batch["attention_mask"].to(batch["mask"].dtype)
        return batch

    if kind == "sign":
        learner.ppo_loss = flipped  # type: ignore[assignment, unused-ignore]
    elif kind == "mask":
        learner.collate = inverted  # type: ignore[assignment, unused-ignore]
    try:
        yield
    finally:
        learner.ppo_loss, learner.collate = real_loss, real_collate  # type: ignore[assignment, unused-ignore]


def rl_from_cold_start(
    cold: ColdStart,
    out: Path,
    *,
    lr: float = LR,
    steps: int,
    sabotage: str = "",
    eval_at: Sequence[int] = (),
    extra: Sequence[str] = (),
) -> dict[int, Evaluation]:
    """One RL run from `cold`'s SFT policy; the held-out evaluation after `steps` and after each
    step in `eval_at` (read from the run's checkpoints: step 16 of a 32-step run is the 16-step
    run only under a constant schedule, so `eval_at` before the last step needs
    `optim.schedule=constant` in `extra`; the tiny recipes decay the step). `extra`: recipe
    overrides (numerics, reward) of the run and of its evaluation."""

    every = math.gcd(*eval_at) if eval_at else 0
    if any(s > steps for s in eval_at):
        raise ValueError(f"eval_at {list(eval_at)} goes past the run's {steps} steps")
    recipe = rl_recipe(
        out,
        cold.sft_model,
        cold.data.rl,
        seed=cold.seed,
        steps=steps,
        lr=lr,
        extra=[
            "logging.progress=false",
            f"checkpoint.every_steps={every}",
            f"checkpoint.keep_last={steps // every if every else 1}",
            *extra,
        ],
    )
    if any(s != steps for s in eval_at) and recipe.optim.schedule != "constant":
        raise ValueError(
            f"eval_at {list(eval_at)} reads checkpoints before step {steps} as shorter runs, which "
            f"holds only under a constant schedule, not {recipe.optim.schedule!r}; pass "
            "extra=['optim.schedule=constant', ...] or evaluate at the last step only"
        )
    with sabotaged(sabotage):
        final = train_rl(recipe)
    results = {steps: evaluate_held_out(final, recipe, cold.held)}
    for s in eval_at:
        if s != steps:
            results[s] = evaluate_held_out(out / "checkpoints" / f"step-{s:06d}", recipe, cold.held)
    return dict(sorted(results.items()))


@dataclass(frozen=True)
class PairedGain:
    """`after - before` on the held-out prompts of one or more seeds, paired by prompt."""

    key: str
    mean: float
    se: float
    n: int  # prompts (over all seeds)

    @property
    def z(self) -> float:
        """The gain in standard errors (inf when every prompt moved by the same amount)."""
        if self.se > 0:
            return self.mean / self.se
        return math.copysign(math.inf, self.mean) if self.mean else 0.0

    def __str__(self) -> str:
        return f"{self.key} {self.mean:+.3f} ± {self.se:.3f} ({self.z:+.1f} SE, n={self.n})"


def pooled_gain(runs: Sequence[tuple[Evaluation, Evaluation]], key: str) -> PairedGain:
    """The paired gain in `key` over the prompts of every (before, after) pair in `runs`."""
    diffs = [
        after.per_prompt[p][key] - before.per_prompt[p][key]
        for before, after in runs
        for p in before.per_prompt
    ]
    m, se = mean_and_se(diffs)
    return PairedGain(key, m, se, len(diffs))


# The learning test's verdict, chosen from the measured distribution over seeds x torch threads x
# CPU kernels (experiments/learning_distribution.py; paravt-train's README has the table).
LEARNING_SEEDS = (0, 1)
LEARNING_RL_STEPS = 32
LEARNING_THREADS = 1
# The pooled held-out gains that count as learning: each metric by its margin and by that many
# standard errors. Chosen on 2026-12-03 from the shipped setting's distribution by a rule fixed
# before the runs it judged (experiments/README.md, "The learning test's verdict over every pair"):
# per threshold, the 10th percentile over the pairs of measured seeds 2-11 in the numeric where it
# is lower, rounded down, never below zero. Under the shipped reward a seed's accuracy gain is a
# draw of its cold start (whether its sub-agents read the crops), so two seeds cannot carry an
# accuracy margin (the old +0.08 held on 37 of 66 fp32 pairs, 23 of 66 bf16): held-out accuracy
# must not fall, the reward must rise; that accuracy rises is shown over 16 seeds per numeric.
ACCURACY_MARGIN, ACCURACY_Z = 0.0, 0.0
REWARD_MARGIN, REWARD_Z = 0.26, 6.0
# The lr-0 control must give the SFT policy's scores again, within these (half the margins of
# 2026-11-24, +0.08 / +0.30): the evaluation of unchanged weights is not bit-stable in bf16 and
# can differ by a batch's timing.
LR0_TOLERANCE = {"accuracy": 0.04, "reward": 0.15}


# The invalid-call hole (issue 44): a reward can rise while the policy learns calls that bring no
# evidence. Per seed, after RL: at most this many invalid call attempts per held-out episode, and the
# shared format measure (`format_ok`) no more than this far below the SFT policy's.
INVALID_CALLS_MAX = 0.1
FORMAT_OK_DROP_MAX = 0.05


def format_held(before: Mapping[str, float], after: Mapping[str, float]) -> bool:
    """Whether one seed's RL run stayed out of the invalid-call hole: `after`'s invalid calls per
    episode at most `INVALID_CALLS_MAX` and its `format_ok` at most `FORMAT_OK_DROP_MAX` below
    `before`'s (both `Evaluation.metrics` of the held-out evaluation)."""
    return (
        after["tool/invalid_calls"] <= INVALID_CALLS_MAX
        and after["format_ok"] >= before["format_ok"] - FORMAT_OK_DROP_MAX
    )


def learned(gains: dict[str, PairedGain]) -> bool:
    """Whether held-out accuracy and reward both reached their margin and their number of
    standard errors (gains pooled over the seeds' prompts, paired by prompt): today the reward
    rose by +0.26 and 6 standard errors and accuracy did not fall."""
    acc, reward = gains["accuracy"], gains["reward"]
    return (
        acc.mean >= ACCURACY_MARGIN
        and acc.z >= ACCURACY_Z
        and reward.mean >= REWARD_MARGIN
        and reward.z >= REWARD_Z
    )
