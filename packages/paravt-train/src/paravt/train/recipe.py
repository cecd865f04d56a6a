"""Recipes: one typed object per training stage, loaded from YAML and `key.sub=value` overrides.

A recipe is a YAML file validated by pydantic. Unknown keys are errors that name the key and list
the keys allowed there, so a typo never silently falls back to a default. Every field carries its
help text next to it (`paravt-train sft --help-recipe` prints them).

    recipe = load_recipe("tiny_paragrpo", ["rollout.group_size=4", "optim.lr=1e-4"])

A bare name (`tiny_sft`, `paragrpo_8b.yaml`) resolves to the recipes shipped inside this package;
anything else is a path.

One file because it is the recipe schema: one pydantic field per setting with its bounds and help
text (the CLI's `--help-recipe` and every error message come from them), and the checks that
span sections.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from paravt.core import EpisodeSettings
from paravt.rewards import PresetName, RewardConfig
from paravt.train.engine_registry import check_spec as check_engine_spec

RECIPE_NAMES = (
    "tiny_sft",
    "tiny_paragrpo",
    "tiny_vanilla_grpo",
    "sft_8b",
    "paragrpo_8b",
    "vanilla_grpo_8b",
)


class RecipeError(ValueError):
    """A recipe that cannot be loaded: the message names the file, the key and the fix."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# --------------------------------------------------------------------------------------------------
# Shared sections


class ModelSpec(_Strict):
    path: str = Field(description="A Hugging Face model directory (or hub id when online).")
    build_tiny: bool = Field(
        False,
        description="Build a tiny random Qwen3-VL at `path` when it does not exist yet "
        "(paravt.core.tiny.build_tiny_qwen3vl); for CPU tests and smoke runs.",
    )
    tiny_seed: int = Field(0, description="Seed of the tiny model's random weights.")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="Training dtype; 'auto' is bfloat16 on GPU and float32 on CPU."
    )
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in the backward pass (less memory, ~30% slower)."
    )
    bf16_matmul: Literal["native", "fp32"] = Field(
        "native",
        description="How bf16 linear and convolution layers run: 'native' kernels, or 'fp32' "
        "(inputs and weights upcast exactly, fp32 kernels accumulate, outputs rounded to bf16: "
        "a GPU's rounding points) for CPUs without bf16 instructions (AVX2), where native bf16 "
        "matmuls are about 100x slower than fp32 (paravt.train.numerics). No effect in fp32.",
    )
    attn_implementation: str = Field("sdpa", description="transformers attention backend.")
    logprob_chunk_tokens: int = Field(
        1024,
        ge=1,
        description="Token log-probs are computed only at trained positions, this many positions "
        "at a time through the LM head (peak memory: chunk x vocabulary, not length x vocabulary).",
    )


class OptimSpec(_Strict):
    lr: float = Field(gt=0, description="Peak learning rate of AdamW.")
    weight_decay: float = Field(0.01, ge=0, description="AdamW decoupled weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    eps: float = Field(1e-8, gt=0, description="AdamW epsilon.")
    schedule: Literal["cosine", "constant", "linear"] = Field(
        "cosine", description="Learning-rate shape after warmup."
    )
    warmup_steps: int = Field(0, ge=0, description="Linear warmup from 0 over this many steps.")
    min_lr_ratio: float = Field(
        0.0, ge=0, le=1, description="Floor of the cosine/linear decay, as a fraction of lr."
    )
    max_grad_norm: float = Field(
        1.0, ge=0, description="Clip the global gradient norm to this (0 disables clipping)."
    )


class DistributedSpec(_Strict):
    strategy: Literal["none", "fsdp2", "deepspeed"] = Field(
        "none",
        description="'none': one process (refused under torchrun with WORLD_SIZE > 1); 'fsdp2': "
        "torch fully_shard under torchrun; 'deepspeed': DeepSpeed ZeRO (stage below).",
    )
    zero_stage: Literal[2, 3] = Field(2, description="DeepSpeed ZeRO stage (2 or 3).")
    backend: Literal["auto", "gloo", "nccl"] = Field(
        "auto", description="torch.distributed backend; 'auto' is nccl on GPU, gloo on CPU."
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="'auto' uses CUDA when available (cuda:LOCAL_RANK under torchrun)."
    )
    timeout_s: int = Field(
        1800,
        ge=1,
        description="Process-group timeout: a collective that waits longer raises instead of "
        "hanging (a rank out of step with the others).",
    )


class CheckpointSpec(_Strict):
    every_steps: int = Field(
        0,
        ge=0,
        description="Save a resumable checkpoint every N optimiser steps (0: only the end).",
    )
    keep_last: int = Field(2, ge=1, description="Step checkpoints kept on disk (oldest deleted).")
    save_final: bool = Field(True, description="Save `final/` (HF-loadable) when training ends.")


class LoggingSpec(_Strict):
    log_every: int = Field(1, ge=1, description="Write a metrics.jsonl row every N steps.")
    progress: bool = Field(True, description="Show a tqdm progress bar on rank 0.")
    tensorboard: bool = Field(False, description="Also log to TensorBoard (when installed).")
    wandb: bool = Field(False, description="Also log to Weights & Biases (when installed).")
    wandb_project: str = Field("paravt", description="W&B project name.")
    episodes_per_k: int = Field(
        2,
        ge=0,
        description="RL: episodes recorded per step and overview budget K (prompt, overview "
        "thumbnails, turns, calls, sub-agent reports, reward parts) to <output_dir>/episodes/ "
        "(paravt.train.episodes; rank 0's episodes; 0: none). `paravt-train episodes RUN_DIR` "
        "summarises them and writes the viewer.",
    )
    episodes_max_mib: float = Field(
        50.0,
        ge=0,
        description="RL: size cap of the run's episodes/ folder in MiB; recording stops (with a "
        "warning) before an episode would pass it.",
    )


class VideoSpec(_Strict):
    overview_frames: int = Field(
        64, ge=1, description="Overview frames K when nFrames gating is off (and for SFT rows)."
    )
    crop_fps: float = Field(1.0, gt=0, description="Frames per second sampled inside a crop.")
    max_crop_frames: int = Field(16, ge=1, description="Frames per crop at most.")
    min_pixels: int = Field(784, ge=1, description="Pixel budget per frame, lower bound.")
    max_pixels: int = Field(50176, ge=1, description="Pixel budget per frame, upper bound.")

    @model_validator(mode="after")
    def _ordered(self) -> VideoSpec:
        if self.min_pixels > self.max_pixels:
            raise ValueError(
                f"video.min_pixels ({self.min_pixels}) must not exceed video.max_pixels "
                f"({self.max_pixels})"
            )
        return self


class SynthSpec(_Strict):
    """Generate a synthetic task set with `paravt-tools synth` when the data is missing."""

    n: int = Field(16, ge=1, description="Number of synthetic videos/tasks.")
    duration_s: float = Field(60.0, gt=0, description="Length of each synthetic video.")
    seed: int = Field(0, description="Seed of the generator.")
    out_dir: str = Field(description="Where the videos and parquet files are written.")
    question_types: list[Literal["mcq", "oe", "tvg"]] = Field(
        ["mcq", "oe", "tvg"],
        min_length=1,
        description="Question types, one RL row and one main-agent SFT trace per video and type "
        "(mcq: fixed option order; oe: the colour word; tvg: [start, end] seconds).",
    )
    sft_overview_frames: int = Field(
        32, ge=1, description="Overview frames K of the main-agent teacher traces."
    )
    crop_max_frames: int | None = Field(
        None,
        ge=1,
        description="Frames per crop in the teacher traces (default: the recipe's "
        "video.max_crop_frames, so every frame a trace describes is shown).",
    )
    layout: Literal["cue", "single"] = Field(
        "cue",
        description="'cue': checkerboard cue, target square after it, distractors; 'single': one "
        "square (the family a tiny model learns on a CPU; see paravt.tools.synth).",
    )
    fps: float = Field(4.0, ge=1.0, description="Frame rate of the synthetic videos.")
    needle_s: float = Field(2.0, gt=0, description="How long a square is on screen.")
    prompt_mode: Literal["agentic_general", "agentic_minimal"] = Field(
        "agentic_general",
        description="System prompt of the teacher traces (match rollout.prompt_mode).",
    )
    square_size: tuple[float, float] = Field(
        (0.4, 0.8), description="Side of a square as a fraction of the frame's shorter side."
    )
    crop_windows: int = Field(
        2, ge=1, le=16, description="'single' layout: equal windows the teacher crops in parallel."
    )
    tool_fraction: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="Share of main-agent teacher traces that call crop_video (the rest answer "
        "from the overview alone).",
    )


class DataSpec(_Strict):
    parquet: list[str] = Field(description="Parquet files (or directories of *.parquet) to read.")
    root: str | None = Field(
        None,
        description="Local root for sentinel-relative video paths (longvt_source/..., museg/..., "
        "selfqa/...); materialised in memory as file://ROOT/<path>.",
    )
    shuffle: bool = Field(True, description="Shuffle rows every epoch (seeded by the recipe seed).")
    max_rows: int | None = Field(None, ge=1, description="Use at most this many rows.")
    synth: SynthSpec | None = Field(
        None, description="Generate the parquet with paravt-tools synth if it does not exist."
    )

    @field_validator("parquet", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class _RecipeBase(_Strict):
    output_dir: str = Field(description="Run directory: metrics.jsonl, checkpoints, final/.")
    seed: int = Field(0, description="Seed of data order, sampling and initialisation.")
    max_steps: int = Field(ge=1, description="Optimiser steps to run.")
    model: ModelSpec
    data: DataSpec
    video: VideoSpec = Field(default_factory=VideoSpec)
    optim: OptimSpec
    distributed: DistributedSpec = Field(default_factory=DistributedSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    logging: LoggingSpec = Field(default_factory=LoggingSpec)

    @model_validator(mode="after")
    def _synth_crops_as_shown(self) -> _RecipeBase:
        synth = self.data.synth
        if synth is not None and synth.crop_max_frames is None:
            synth.crop_max_frames = self.video.max_crop_frames
        return self


# --------------------------------------------------------------------------------------------------
# SFT


class SFTSpec(_Strict):
    batch_size: int = Field(1, ge=1, description="Sequences (or packs) per micro-batch per rank.")
    grad_accum: int = Field(1, ge=1, description="Micro-batches accumulated per optimiser step.")
    max_length: int = Field(
        8192, ge=16, description="Tokens per sample at most; longer samples are skipped (logged)."
    )
    num_workers: int = Field(
        2,
        ge=0,
        description="DataLoader worker processes that decode frames and tokenise rows ahead of "
        "the training loop (0: in the training process).",
    )
    cache_rows: int = Field(
        0,
        ge=0,
        description="Encoded rows (frames included) each worker keeps for reuse in later epochs, "
        "least recently used dropped first; 0 keeps none (an 8B row with 64 frames is ~100 MB).",
    )
    packing: bool = Field(
        False, description="Concatenate samples into sequences of `packing_length` tokens."
    )
    packing_length: int = Field(8192, ge=16, description="Length of one packed sequence.")


class SFTRecipe(_RecipeBase):
    stage: Literal["sft"] = Field(description="Which trainer this recipe drives.")
    sft: SFTSpec = Field(default_factory=SFTSpec)


# --------------------------------------------------------------------------------------------------
# RL


class SGLangServerSpec(_Strict):
    urls: list[str] = Field(
        default_factory=list,
        description="Where rollout requests go: one sglang_router URL, or every "
        "`python -m sglang.launch_server` URL (http://host:port).",
    )
    weight_urls: list[str] | None = Field(
        None,
        description="The servers weight updates go to (default: urls). Behind a router, list "
        "the servers themselves.",
    )
    weight_sync: Literal["disk", "distributed"] = Field(
        "disk",
        description="'disk': rank 0 writes safetensors to weight_dir, servers load them "
        "(/update_weights_from_disk); 'distributed': an NCCL group with the servers "
        "(/update_weights_from_distributed; tested on gloo against a stand-in server only).",
    )
    weight_dir: str | None = Field(
        None,
        description="Where rank 0 writes the weights for the servers; the SAME path must be "
        "readable on the rollout machines (default: <output_dir>/rollout_weights).",
    )
    master_address: str = Field(
        "127.0.0.1", description="'distributed' sync: address of trainer rank 0 for the group."
    )
    master_port: int = Field(29600, description="'distributed' sync: port of that group.")
    server_ranks: list[int] | None = Field(
        None, description="'distributed' sync: GPUs per server (tp x dp); default 1 each."
    )
    colocate: bool = Field(
        False,
        description="Rollout servers share GPUs with training: release their memory during the "
        "update and resume it before the weight push (servers need --enable-memory-saver).",
    )
    timeout_s: float = Field(900.0, gt=0, description="One generation request at most.")
    stall_warn_s: float = Field(
        60.0,
        gt=0,
        description="Warn (naming the server and the requests in flight) when requests are in "
        "flight and nothing has come back for this long; again every stall_warn_s.",
    )
    stall_dead_s: float = Field(
        300.0,
        gt=0,
        description="After this long with requests in flight and nothing back, the server is "
        "declared dead and the run stops with an error naming it (the last checkpoint stays; "
        "--resume continues from it).",
    )
    connect_timeout_s: float = Field(10.0, gt=0, description="Opening a connection at most.")
    retries: int = Field(3, ge=0, description="Extra attempts on connection errors and 5xx.")
    backoff_s: float = Field(0.5, ge=0, description="First wait between attempts (doubles).")
    max_in_flight: int = Field(256, ge=1, description="Requests open at once per trainer rank.")
    pause_mode: Literal["retract", "in_place", "drain"] = Field(
        "retract",
        description="With rollout.max_staleness > 0, how the servers treat requests in flight "
        "while rank 0 pushes weights: 'retract' / 'in_place': POST /pause_generation with that "
        "mode, push, POST /continue_generation (requests go on with the new weights; each token "
        "keeps the log-prob of the weights that sampled it); 'drain': SGLang's default, the "
        "update waits until the requests in flight finish and holds new ones back.",
    )
    verify_sync: bool = Field(
        False,
        description="After every push, check that every weight URL serves the pushed version and "
        "that its log-probs of a fixed sequence are within verify_sync_tolerance of the policy's "
        "(metric sync/logprob_max_abs_diff; one small forward pass). On a mismatch the weights "
        "are pushed once more; a second mismatch stops the run with an error naming the server.",
    )
    verify_sync_tolerance: float = Field(
        1.0,
        gt=0,
        description="verify_sync: the largest log-prob difference accepted (bf16 noise is "
        "expected near 1e-2, not measured here). It catches weights loaded wrong; a push that "
        "never arrived is caught by the weight version.",
    )


class RolloutSpec(_Strict, EpisodeSettings):
    """Rollouts: the engine, the group, sampling, and (from paravt-core's `EpisodeSettings`,
    declared there once) turns, calls per turn, token budgets, dispatch, tool response, think
    prefix and schedule."""

    engine: str = Field(
        "hf",
        description="Which rollout engine generates, by its registered name (each engine judges "
        "the rest of this section itself): 'hf': in-process transformers engine sharing the "
        "policy's weights; 'sglang_server': SGLang servers (rollout.server.urls), weights pushed "
        "from trainer rank 0 after every optimiser step; 'vllm_server': vLLM servers "
        "(rollout.server.urls, started with VLLM_SERVER_DEV_MODE=1), weights written to "
        "weight_dir and reloaded by the servers after every step (weight_sync disk, not "
        "colocated); or an engine registered with paravt.train.rl.register_engine before the "
        "recipe is loaded, or installed by a package under the entry-point group "
        "paravt.rollout_engines.",
    )
    engine_settings: dict[str, Any] = Field(
        default_factory=dict,
        description="The engine's own settings, validated against its settings model "
        "(EngineChecks.settings) while the recipe loads: a key the engine does not know is an "
        "error naming its keys; an engine without a settings model takes none. The built-in "
        "engines take none (SGLang's and vLLM's live in rollout.server).",
    )
    max_staleness: int = Field(
        0,
        ge=0,
        description="Asynchronous RL (the reference's AReaL max_head_offpolicyness, 2 there): "
        "the servers generate a step's episodes while the trainer still trains the steps "
        "before it, with weights at most this many optimiser steps older than the ones that "
        "train on them; the decoupled loss corrects for it. 0: synchronous. Needs "
        "an engine that knows which weights produced each reply (sglang_server, not colocated; "
        "vllm_server) and loss.decoupled.",
    )
    batch_prompts: int = Field(7, ge=1, description="Prompts per step (over all ranks).")
    group_size: int = Field(8, ge=1, description="Rollouts per prompt (the GRPO group).")
    temperature: float = Field(0.7, ge=0, description="Sampling temperature of rollouts.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    batch_invariant_sampling: bool = Field(
        False,
        description="engine=hf: sample each episode's tokens from (step seed, the request's key, "
        "the token's position) alone (paravt-core's SamplingParams.batch_invariant), so a seeded "
        "run draws the same tokens however the runtime happens to batch its requests (the "
        "batching depends on timing, so on the machine's load). False: one seed per batch, as "
        "the runs recorded before this key.",
    )
    max_new_tokens: int = Field(2048, ge=1, description="Main-agent tokens per turn at most.")
    subagent_max_new_tokens: int = Field(256, ge=1, description="Sub-agent tokens at most.")
    prompt_mode: Literal["direct", "reasoning", "agentic_general", "agentic_minimal"] = Field(
        "agentic_general", description="System prompt of the main agent (paravt.core.prompts)."
    )
    server: SGLangServerSpec = Field(
        default_factory=lambda: SGLangServerSpec(),
        description="The servers of rollout.engine=sglang_server or vllm_server.",
    )

    @model_validator(mode="after")
    def _the_engine_judges_its_settings(self) -> RolloutSpec:
        # the engine named checks the rest of the section: its light checks (EngineChecks, no
        # torch, no trainer) through the registry below both (paravt.train.engine_registry)
        problems = check_engine_spec(self.engine, self)
        if problems:
            raise ValueError("; ".join(problems))
        return self


class GatingSpec(_Strict):
    enabled: bool = Field(True, description="nFrames gating: draw the overview K per prompt.")
    choices: tuple[int, ...] = Field((4, 8, 16, 32, 64), description="The K values drawn from.")
    seed: int = Field(0, description="Seed of the per-prompt draw (stable across processes).")


class RewardSpec(_Strict):
    preset: PresetName = Field(
        "paragrpo",
        description="RewardConfig preset of paravt-rewards: 'paragrpo' / 'vanilla' pay the tool "
        "reward only for a call that ran and charge invalid calls (gamma 0.2); "
        "'reference_paragrpo' / 'reference_vanilla' are the released code's reward (any call "
        "with a tool name earns the tool reward, gamma 0).",
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Fields of paravt.rewards.RewardConfig set on top of the preset.",
    )

    @model_validator(mode="after")
    def _overrides_are_reward_fields(self) -> RewardSpec:
        # checked here, so every recipe (loaded or built in code) is refused with this message
        # and checks that read the reward (RLRecipe's) can build it
        try:
            self.build()
        except ValidationError as exc:
            raise ValueError(
                f"reward.overrides are not valid RewardConfig fields:\n{exc}"
            ) from None
        return self

    def build(self) -> Any:
        """The `paravt.rewards.RewardConfig` this section describes (validated by rewards)."""

        base = RewardConfig.preset(self.preset)
        if not self.overrides:
            return base
        return RewardConfig.model_validate({**base.model_dump(), **self.overrides})


class AdvantageSpec(_Strict):
    estimator: Literal["grpo", "dr_grpo"] = Field(
        "grpo", description="'grpo': (r - mean) / std per group; 'dr_grpo': r - mean (no std)."
    )
    reward_scaling: float = Field(10.0, description="Rewards are scaled by this ...")
    reward_bias: float = Field(
        -0.2, description="... after adding this bias (reference: 10, -0.2)."
    )
    reward_clip: float = Field(
        20.0,
        gt=0,
        description="... and clipped to +-this (AReaL's default, which the reference keeps). With "
        "scaling 10 and bias -0.2 every reward above 2.2 sits at the clip: a right answer with "
        "a call usually does, and what it earns above that (R_tool, anchor parts) moves nothing.",
    )
    batch_norm: bool = Field(True, description="Normalise advantages over the batch afterwards.")
    token_level_anchoring: bool = Field(
        False,
        description="Add the anchor reward only at structural-token positions (per-token "
        "advantages) instead of the sequence-level scalar.",
    )
    zero_signal_warn_steps: int = Field(
        3,
        ge=0,
        description="Warn when this many consecutive steps had equal rewards within every group "
        "(zero advantages: no learning signal; metric advantage/zero_groups_frac), and again "
        "every as many steps while it lasts. 0: never warn.",
    )
    invalid_call_warn_window: int = Field(
        8,
        ge=0,
        description="Warn once per run when the reward is earned by invalid tool calls: over "
        "the last this many steps, the last half's mean reward/total is above the first "
        "half's and the invalid share of call attempts (tool/invalid_calls / "
        "tool/call_attempts) rose by at least invalid_call_warn_rise. 0: never warn; else at "
        "least 2.",
    )
    no_credit_on_issues: bool = Field(
        False,
        description="Tokens that carry a charge (the negative anchor parts placed on tokens: a "
        "broken call's tags, the parser's other issues, an unclosed think) get no positive "
        "outcome credit: their share of the sequence advantage is clipped at 0 before the "
        "charge is added, so text that breaks the format is never reinforced because its "
        "episode was right (with sequence-level credit a run-on after the calls rose with the "
        "answers it came with). Ours; needs parts on tokens (token_level_anchoring, or "
        "reward.overrides.anchor_tool_calls / anchor_format_issues).",
    )
    invalid_call_warn_rise: float = Field(
        0.1,
        gt=0,
        le=1,
        description="The rise of the invalid share of call attempts (absolute, between the "
        "window's halves) that, with a rising reward, makes the invalid-call warning.",
    )

    @field_validator("invalid_call_warn_window")
    @classmethod
    def _window_has_two_halves(cls, v: int) -> int:
        if v == 1:
            raise ValueError("invalid_call_warn_window must be 0 (never warn) or at least 2")
        return v


class LossSpec(_Strict):
    clip_eps: float = Field(0.2, gt=0, description="PPO ratio clip epsilon (lower side).")
    clip_eps_high: float | None = Field(
        None, gt=0, description="Upper clip epsilon (clip-higher); None uses clip_eps."
    )
    kl_coef: float = Field(
        0.01, ge=0, description="Weight of the KL term to a frozen reference model."
    )
    kl_form: Literal["k3_loss", "k1_reward"] = Field(
        "k3_loss",
        description="'k3_loss': kl_coef * k3(policy, ref) added to the loss; 'k1_reward': "
        "kl_coef * k1(old, ref) subtracted from the per-token reward before advantages "
        "(AReaL's form, the reference's).",
    )
    decoupled: bool = Field(
        False,
        description="Decoupled PPO (off-policy correction, reference): the ratio is taken "
        "against proximal log-probs recomputed by the trainer, and the behaviour importance "
        "weight exp(prox - old) multiplies the token loss.",
    )
    behav_imp_weight_cap: float | None = Field(
        5.0,
        gt=0,
        description="Decoupled loss: tokens whose behaviour importance weight exceeds this are "
        "left out of the loss (reference: 5); None keeps all.",
    )
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = Field(
        "token-mean", description="How per-token losses are reduced to one number."
    )
    include_subagents_in_loss: bool = Field(
        False,
        description="Also train sub-agent trajectories with their episode's (broadcast) "
        "advantage (the reference leaves them out by default).",
    )
    micro_batch_size: int = Field(
        4, ge=1, description="Trajectories per forward/backward pass in the update."
    )
    ppo_mini_batches: int = Field(
        1,
        ge=1,
        description="Optimiser steps per pass over a step's trajectories: they are cut into this "
        "many mini-batches of whole micro-batches (at most one per micro-batch). With 1 the "
        "ratio to the rollout is 1 at the only step and the clip never acts; from the second "
        "step on it bounds how far the batch moves the policy (verl: batch / "
        "ppo_mini_batch_size). The learning-rate schedule advances once per RL step.",
    )
    ppo_epochs: int = Field(
        1, ge=1, description="Passes over the mini-batches per RL step (verl's ppo_epochs)."
    )


class RLRecipe(_RecipeBase):
    stage: Literal["rl"] = Field(description="Which trainer this recipe drives.")
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    gating: GatingSpec = Field(default_factory=GatingSpec)
    reward: RewardSpec = Field(default_factory=RewardSpec)
    advantage: AdvantageSpec = Field(default_factory=AdvantageSpec)
    loss: LossSpec = Field(default_factory=LossSpec)

    @model_validator(mode="after")
    def _staleness_needs_decoupled_loss(self) -> RLRecipe:
        if self.rollout.max_staleness and not self.loss.decoupled:
            raise ValueError(
                f"rollout.max_staleness={self.rollout.max_staleness} needs loss.decoupled=true: "
                "tokens sampled by older weights need the behaviour importance weight"
            )
        return self

    @model_validator(mode="after")
    def _no_credit_needs_parts_on_tokens(self) -> RLRecipe:
        if self.advantage.no_credit_on_issues and not self.advantage.token_level_anchoring:
            reward = self.reward.build()
            placed = reward.anchor_tool_calls or reward.anchor_format_issues
            if not placed or reward.lambda_anchor == 0:
                raise ValueError(
                    "advantage.no_credit_on_issues=true would do nothing: no charge is placed on "
                    "tokens. Set reward.overrides.anchor_format_issues=true (or anchor_tool_calls, "
                    "or advantage.token_level_anchoring=true) with lambda_anchor > 0"
                )
        return self


Recipe = Annotated[SFTRecipe | RLRecipe, Field(discriminator="stage")]


# --------------------------------------------------------------------------------------------------
# Loading


def recipe_path(name_or_path: str | Path) -> Path:
    """A packaged recipe by name (`tiny_sft`, `paragrpo_8b.yaml`) or an existing file path."""
    path = Path(name_or_path)
    if path.exists():
        return path
    stem = path.name.removesuffix(".yaml").removesuffix(".yml")
    if path.parent == Path(".") and stem in RECIPE_NAMES:
        return Path(str(resources.files("paravt.train") / "recipes" / f"{stem}.yaml"))
    raise RecipeError(
        f"recipe {str(name_or_path)!r} is neither a file nor a packaged recipe; "
        f"packaged recipes: {', '.join(RECIPE_NAMES)}"
    )


def parse_override(text: str) -> tuple[list[str], Any]:
    """`"optim.lr=1e-4"` -> (["optim", "lr"], 1e-4). Values are parsed as YAML scalars/lists."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise RecipeError(
            f"override {text!r} is not of the form key.sub=value (e.g. optim.lr=1e-4)"
        )
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise RecipeError(f"override {text!r}: the value is not valid YAML ({exc})") from None
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of `data` with each `key.sub=value` set (intermediate mappings are created)."""
    out = yaml.safe_load(yaml.safe_dump(data)) or {}
    for text in overrides:
        keys, value = parse_override(text)
        node = out
        for i, key in enumerate(keys[:-1]):
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            if not isinstance(child, dict):
                where = ".".join(keys[: i + 1])
                raise RecipeError(f"override {text!r}: {where!r} is a value, not a section")
            node = child
        node[keys[-1]] = value
    return out


def _allowed_keys(model: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    """The field names of the section that holds `loc[-1]` (best effort, for error messages)."""
    current: Any = model
    for part in loc[:-1]:
        fields = getattr(current, "model_fields", None)
        if fields is None or part not in fields:
            return []
        annotation = fields[part].annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        current = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
        if current is None:
            return []
    return sorted(getattr(current, "model_fields", {}))


def format_recipe_error(source: str, error: ValidationError, stage: str | None) -> str:
    model: type[BaseModel] = RLRecipe if stage == "rl" else SFTRecipe
    lines = [f"recipe {source} is invalid:"]
    for item in error.errors(include_url=False):
        loc = list(item.get("loc", ()))
        key = ".".join(str(p) for p in loc) or "(top level)"
        if item.get("type") == "extra_forbidden":
            allowed = _allowed_keys(model, loc)
            hint = f"; allowed keys here: {', '.join(allowed)}" if allowed else ""
            lines.append(f"  unknown key {key!r}{hint}")
        elif item.get("type") == "missing":
            lines.append(f"  missing key {key!r} (add it to the recipe or pass {key}=VALUE)")
        else:
            msg = str(item.get("msg", "invalid")).removeprefix("Value error, ")
            lines.append(f"  {key}: {msg} (got {item.get('input')!r})")
    return "\n".join(lines)


def load_recipe(
    name_or_path: str | Path, overrides: Sequence[str] = (), *, stage: str | None = None
) -> SFTRecipe | RLRecipe:
    """Load, override and validate a recipe. `stage` ('sft' or 'rl') is checked when given.

    Raises `RecipeError` naming the file and every bad key.
    """
    path = recipe_path(name_or_path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise RecipeError(f"recipe {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise RecipeError(f"recipe {path} must be a mapping of keys, got {type(data).__name__}")
    data = apply_overrides(data, overrides)
    found = data.get("stage")
    if stage is not None and found != stage:
        raise RecipeError(
            f"recipe {path} has stage {found!r}, but `paravt-train {stage}` needs stage: {stage}"
        )
    model: type[SFTRecipe | RLRecipe]
    if found == "sft":
        model = SFTRecipe
    elif found == "rl":
        model = RLRecipe
    else:
        raise RecipeError(f"recipe {path}: key 'stage' must be 'sft' or 'rl', got {found!r}")
    try:
        recipe = model.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(format_recipe_error(str(path), exc, found)) from None
    return recipe


def recipe_help(stage: Literal["sft", "rl"]) -> str:
    """Every key of a stage's recipe with its default and help text, one per line."""
    model: type[BaseModel] = SFTRecipe if stage == "sft" else RLRecipe
    lines: list[str] = []

    def walk(cls: type[BaseModel], prefix: str) -> None:
        for name, info in cls.model_fields.items():
            annotation = info.annotation
            candidates = [annotation, *getattr(annotation, "__args__", ())]
            sub = next(
                (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
            )
            if sub is not None and name not in ("stage",):
                walk(sub, f"{prefix}{name}.")
                continue
            default = (
                "required"
                if info.is_required()
                else f"default {info.get_default(call_default_factory=True)!r}"
            )
            lines.append(f"{prefix}{name}  ({default})  {info.description or ''}".rstrip())

    walk(model, "")
    return "\n".join(lines)
