"""What every framework's ParaVT episode shares.

A framework owns generation (verl's server manager, OpenRLHF's vLLM engines, TRL's model); our
runtime owns the episode. `CallbackEngine` is the bridge: our chat template and token-in token-out
bookkeeping (`HFChatEncoder`), with each generation handed to the framework's `generate_fn`.
`paravt_task` builds the task of one dataset row over its own video (the model never names a
file), `run_paravt_episode` runs it, and `episode_samples` cuts the episode into one token sample
per trajectory (main agent first, then each sub-agent) with the loss mask that is 1 exactly on
generated tokens, so tool responses and sub-agent reports are never trained on as the model's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from paravt.core import (
    AgentConfig,
    AgentTask,
    Episode,
    FinishReason,
    Generated,
    SamplingParams,
    Trajectory,
    build_main_prompt,
    run_episodes,
)
from paravt.core.engines import HFChatEncoder
from paravt.rewards import RewardBreakdown, RewardConfig, score_episode
from paravt.rewards.integrations import row_field, sample_from
from paravt.tools import VideoReader, default_reader

# (prompt token ids, the trajectory's images as uint8 CHW tensors in prompt order, sampling)
#   -> (generated token ids, their log-probs or None)
GenerateFn = Callable[
    [list[int], list[Any], SamplingParams], Awaitable[tuple[list[int], list[float] | None]]
]


def to_pil(image: Any) -> Any:
    """A frame as the PIL image the frameworks pass to their servers and processors: a uint8
    (3, H, W) torch tensor (our frames), an (H, W, 3) numpy array, or a PIL image (unchanged)."""
    from PIL import Image  # lazy: pillow is loaded with the first frame a framework asks for

    if isinstance(image, Image.Image):
        return image
    if hasattr(image, "permute"):  # torch, channels first
        image = image.permute(1, 2, 0).contiguous().cpu().numpy()
    return Image.fromarray(image)


class CallbackEngine(HFChatEncoder):
    """An `Engine` whose generations come from a framework's `generate_fn` (see `GenerateFn`).

    Token ids past the first end-of-turn token are cut (a framework may return padding or a
    second eos); `finish_reason` is "stop" when the reply ends with an end-of-turn token, else
    "length". The requests of one batch run concurrently.
    """

    continuous_batching = True  # the runtime sends each request as soon as it is ready

    def __init__(
        self, processor: Any, generate_fn: GenerateFn, *, eos_token_ids: Sequence[int] | None = None
    ) -> None:
        super().__init__(processor, eos_token_ids=eos_token_ids, keep_images=True)
        self.generate_fn = generate_fn

    async def _one(self, trajectory: Trajectory, n: int, sampling: SamplingParams) -> Generated:
        images = [c.image for c in self.image_chunks(trajectory, n)]
        ids, logprobs = await self.generate_fn(list(trajectory.token_ids), images, sampling)
        ids = [int(t) for t in ids]
        for k, tid in enumerate(ids):
            if tid in self.eos_token_ids:
                ids = ids[: k + 1]
                break
        if logprobs is not None:
            if len(logprobs) < len(ids):
                raise ValueError(
                    f"generate_fn returned {len(ids)} token ids but {len(logprobs)} log-probs"
                )
            logprobs = [float(x) for x in logprobs[: len(ids)]]
        finish: FinishReason = "stop" if ids and ids[-1] in self.eos_token_ids else "length"
        return Generated(self.decode(ids), ids, logprobs, finish)

    async def generate(
        self, trajectories: Sequence[Trajectory], sampling: SamplingParams
    ) -> list[Generated]:
        return list(
            await asyncio.gather(*(self._one(t, i, sampling) for i, t in enumerate(trajectories)))
        )


@dataclass(frozen=True)
class RowTask:
    """The fields of one dataset row a ParaVT episode needs.

    `video` is a path the *dataset* names (the model never chooses a file); `options` are shown
    under the question; `answer` and `question_type` are what the episode is scored against.
    """

    video: str
    question: str
    answer: str
    question_type: str = "mcq"
    options: tuple[str, ...] | None = None
    key: str = ""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RowTask:
        """From a row with `video`, `question`, `answer` (and optionally `question_type`,
        `options`, `key`). The ground truth is read by paravt-rewards' row reader
        (`sample_from`: `answer` or ground_truth / solution / label, directly or in the
        reference's `extra_info` or verl's `reward_model`, dicts or JSON strings), so an episode
        is scored against what the reward adapters read; `video` may sit in `extra_info` too. A
        missing field is an error naming it."""
        sample = sample_from(**row)
        video = row_field(row, "video")
        found = {"video": video, "question": sample.question, "answer": sample.answer}
        missing = [k for k, v in found.items() if not v]
        if missing:
            raise KeyError(
                f"a ParaVT episode needs the row fields {missing} (present: {sorted(row)})"
            )
        key = row_field(row, "key") or row_field(row, "index")
        return cls(
            video=str(video),
            question=sample.question,
            answer=sample.answer,
            question_type=sample.question_type or "mcq",
            options=sample.options,
            key=str(key or ""),
        )

    @property
    def answer_kind(self) -> str:
        """The protocol's final-answer note for this question type."""
        if self.question_type in ("tvg", "grounding"):
            return "grounding"
        return "mcq" if self.question_type == "mcq" else "open"


def paravt_task(
    row: RowTask,
    *,
    overview_frames: int,
    config: AgentConfig,
    reader: VideoReader | None = None,
) -> AgentTask:
    """The agent task of `row`: our system prompt, an overview of `overview_frames` frames of the
    row's video with timestamps, the question (with its options), and a `crop_video` toolbox bound
    to that video."""
    reader = reader or default_reader()
    info = reader.probe(row.video)
    overview = reader.overview(row.video, overview_frames)
    messages = build_main_prompt(
        row.question,
        overview,
        options=row.options,
        duration_s=float(info.duration_s),
        max_turns=config.max_turns,
        max_parallel=config.max_parallel,
    )
    return AgentTask(
        row.key or row.video, messages, reader.toolbox(row.video), row.question, row.answer_kind
    )


async def run_paravt_episode(
    row: RowTask,
    engine: CallbackEngine,
    *,
    overview_frames: int = 16,
    config: AgentConfig | None = None,
    reader: VideoReader | None = None,
) -> Episode:
    """One ParaVT episode of `row` through our runtime, generating with `engine`."""
    config = config or AgentConfig()
    task = paravt_task(row, overview_frames=overview_frames, config=config, reader=reader)
    (episode,) = await run_episodes([task], engine, config)
    return episode


def score_row_episode(
    episode: Episode, row: RowTask, config: RewardConfig | None = None
) -> RewardBreakdown:
    """The episode's reward against the row (`paravt.rewards.score_episode`)."""
    return score_episode(
        episode,
        row.answer,
        row.question_type,
        config or RewardConfig.paragrpo(),
        options=row.options,
        question=row.question,
    )


@dataclass
class TokenSample:
    """One trajectory as a trainer takes it: the first prompt, then everything after it.

    `response_ids` holds the generated tokens *and* the tool responses / notes fed back in
    between (multi-turn), `response_mask` is 1 exactly on generated tokens; `images` are the
    trajectory's images (uint8 CHW tensors) in prompt order.
    """

    role: str  # "main" or "subagent"
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]
    images: list[Any] = field(default_factory=list)
    messages: list[Any] = field(default_factory=list)
    turn: int | None = None
    call_index: int | None = None


def trajectory_sample(trajectory: Trajectory) -> TokenSample:
    """Cut a trajectory at its first generated token."""
    mask = trajectory.loss_mask
    start = mask.index(1) if 1 in mask else len(mask)
    return TokenSample(
        role=trajectory.role,
        prompt_ids=list(trajectory.token_ids[:start]),
        response_ids=list(trajectory.token_ids[start:]),
        response_mask=list(mask[start:]),
        response_logprobs=list(trajectory.logprobs[start:]),
        images=[getattr(c, "image", c) for c in trajectory.media],
        messages=list(trajectory.messages),
        turn=trajectory.turn,
        call_index=trajectory.call_index,
    )


def episode_samples(episode: Episode) -> list[TokenSample]:
    """The main trajectory's sample, then one per sub-agent (in the order they were spawned).
    Sub-agents carry the main trajectory's reward: the broadcast advantage of PARA-GRPO."""
    return [trajectory_sample(episode.main), *(trajectory_sample(t) for t in episode.subagents)]
