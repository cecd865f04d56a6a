"""OpenRLHF (tested: 0.11.2): the whole ParaVT episode as an `AgentExecutor` for
`--train.agent_func_path`.

OpenRLHF loads the file named by `--train.agent_func_path`, takes its `AgentExecutor` class (a
subclass of `openrlhf.utils.agent.AgentExecutorBase`) and builds it with no arguments
(`openrlhf/trainer/ray/vllm_engine.py`, `_load_agent_executor`, lines 19-30). Each rollout calls
`execute(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images)`
(`utils/agent.py` line 15; called from `RolloutRayActor.generate_responses`, `vllm_engine.py`
lines 183-206, with `llm_engine=self`) and must return the dict `MultiTurnAgentExecutor` returns
(`utils/agent.py` lines 172-184): `observation_tokens`, `action_ranges` (the generated spans),
`rollout_log_probs`, `mm_train_inputs`, `reward`, `scores`, `extra_logs`, `truncated`, ...

`make_openrlhf_paravt_agent` builds that class. Its `execute` runs our runtime over the row named
by the label: the overview of the row's own video, the main agent's turns, each turn's
`crop_video` calls run together by paravt-tools on that video, one sub-agent generation per window
over its cropped frames, the answer. Every generation (main and sub-agent) goes through OpenRLHF's
own `llm_engine.generate(token_ids, sampling_params, multi_modal_data={"image": [...]})`
(`vllm_engine.py` lines 153-177), bridged by `CallbackEngine`.

The sample OpenRLHF trains is the main trajectory. OpenRLHF turns one `execute` result into
exactly one `Experience` (`samples_generator.py` lines 164-165 and 243-310) and groups rewards by
`n_samples_per_prompt` (`experience_maker.py` line 256), so an episode cannot hand back the
sub-agents as extra samples. The sub-agents' reports enter the main trajectory as tool responses,
outside the action ranges (not trained on), like any environment feedback; the sub-agents'
own tokens are not trained through OpenRLHF (PARA-GRPO's broadcast advantage to sub-agents needs
our trainer). Their counts are logged in `extra_logs`.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Mapping, Sequence
from copy import deepcopy
from typing import Any

from paravt.core import AgentConfig, Episode, SamplingParams, Trajectory, run_episodes
from paravt.rewards import RewardBreakdown, RewardConfig
from paravt.rewards.integrations import check_framework_version, resolve_config
from paravt.tools import VideoReader
from paravt.train.integrations.agent import (
    CallbackEngine,
    RowTask,
    paravt_task,
    score_row_episode,
    to_pil,
)

# The role ("main" or "subagent") of the trajectory being generated, set per request task.
_ROLE: contextvars.ContextVar[str] = contextvars.ContextVar("paravt_openrlhf_role", default="main")
LOGGED = ("accuracy", "format", "anchor", "tool", "penalty")


def row_of_label(label: Any) -> RowTask:
    """The ParaVT row carried by an OpenRLHF label (`--data.label_key`): a dict, or a JSON object
    string, with `video`, `question`, `answer` (and optionally `question_type`, `options`, `key`)."""
    if isinstance(label, str):
        try:
            label = json.loads(label)
        except json.JSONDecodeError:
            label = None
    if not isinstance(label, Mapping):
        raise ValueError(
            "the ParaVT agent needs each OpenRLHF label to be the row: a dict or JSON object with "
            "'video', 'question' and 'answer' (optionally 'question_type', 'options'); point "
            "--data.label_key at such a column"
        )
    return RowTask.from_row(label)


def action_ranges(loss_mask: Sequence[int]) -> list[tuple[int, int]]:
    """The `[start, end)` runs of 1s in a loss mask: OpenRLHF's `action_ranges`."""
    ranges: list[tuple[int, int]] = []
    start = None
    for i, m in enumerate([*loss_mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            ranges.append((start, i))
            start = None
    return ranges


def mm_train_inputs(trajectory: Trajectory) -> dict[str, Any] | None:
    """The trajectory's processed images as OpenRLHF keeps a Qwen-VL processor's output
    (`pixel_values`, `image_grid_thw`; `utils/vlm_utils.py` lines 106-117), or None."""
    import torch

    chunks = [c for c in trajectory.media if hasattr(c, "pixel_values")]
    if not chunks:
        return None
    return {
        "pixel_values": torch.cat([c.pixel_values for c in chunks]),
        "image_grid_thw": torch.stack([c.grid_thw for c in chunks]),
    }


class _RoleEngine(CallbackEngine):
    """`CallbackEngine` that tells `generate_fn` whose trajectory it generates: each request runs
    in its own task with `_ROLE` set, so the main agent's requests keep OpenRLHF's sampling and
    length budget while sub-agents use `AgentConfig.subagent_sampling`."""

    async def generate(self, trajectories: Sequence[Trajectory], sampling: SamplingParams) -> Any:
        async def one(trajectory: Trajectory) -> Any:
            _ROLE.set(trajectory.role)
            (out,) = await CallbackEngine.generate(self, [trajectory], sampling)
            return out

        return list(await asyncio.gather(*(one(t) for t in trajectories)))


def _episode_config(config: AgentConfig, sampling_params: Any) -> AgentConfig:
    """`config` with the main agent sampling as OpenRLHF asked (`--rollout.temperature`,
    `--rollout.top_p`, `--rollout.max_new_tokens` per turn when set): the trainer's log-probs
    assume the rollout's temperature."""
    update: dict[str, Any] = {"temperature": float(getattr(sampling_params, "temperature", 1.0))}
    top_p = getattr(sampling_params, "top_p", None)
    if top_p is not None:
        update["top_p"] = float(top_p)
    top_k = getattr(sampling_params, "top_k", None)
    if top_k is not None:
        update["top_k"] = max(int(top_k), 0)  # vLLM's -1 is our 0: no top-k
    if getattr(sampling_params, "max_tokens", None):
        update["max_new_tokens"] = int(sampling_params.max_tokens)
    return config.model_copy(update={"sampling": config.sampling.model_copy(update=update)})


def episode_output(
    episode: Episode,
    reward: RewardBreakdown,
    *,
    prompt: Any,
    label: Any,
    images: Any,
    max_length: int,
    with_logprobs: bool,
    image_token_id: int,
) -> dict[str, Any]:
    """The dict OpenRLHF's executors return (`utils/agent.py` lines 172-184) for `episode`: the
    main trajectory's tokens, its generated spans, its images and the episode's reward."""
    main = episode.main
    tokens = list(main.token_ids)
    if image_token_id in tokens[max_length:]:
        raise ValueError(
            f"the episode's main trajectory has {len(tokens)} tokens and images past --data.max_len"
            f" {max_length}, which OpenRLHF cuts (samples_generator.py line 261) apart from their "
            "pixels; raise --data.max_len or lower max_turns / overview_frames"
        )
    sub_tokens = sum(t.num_generated for t in episode.subagents)
    logs = {name: float(getattr(reward, name)) for name in LOGGED}
    logs.update(
        turns=float(len(episode.turns)),
        tool_calls=float(episode.num_tool_calls),
        tool_errors=float(episode.num_tool_errors),
        subagents=float(len(episode.subagents)),
        subagent_tokens=float(sub_tokens),  # generated, answered as tool responses, not trained
    )
    return {
        "prompt": prompt,
        "label": label,
        "images": images,
        "mm_train_inputs": mm_train_inputs(main),
        "reward": float(reward.total),
        "scores": float(reward.accuracy),
        "observation_tokens": tokens,
        "action_ranges": action_ranges(main.loss_mask),
        "rollout_log_probs": [float(x) for x in main.logprobs] if with_logprobs else None,
        "truncated": episode.truncated,
        "extra_logs": logs,
    }


def make_openrlhf_paravt_agent(
    *,
    overview_frames: int = 16,
    config: AgentConfig | Mapping[str, Any] | None = None,
    reward: RewardConfig | Mapping[str, Any] | str | None = None,
    reader: VideoReader | None = None,
) -> type:
    """An OpenRLHF `AgentExecutor` class (for `--train.agent_func_path`) running ParaVT episodes.

    `overview_frames`: frames of the overview; `config`: the `AgentConfig` (turns, parallel calls,
    sub-agent sampling; the main agent's sampling comes from OpenRLHF); `reward`: the
    `RewardConfig` or preset name (default PARA-GRPO); `reader`: the `VideoReader` (default: the
    process-wide one). Needs openrlhf, a VLM actor (OpenRLHF then passes its `AutoProcessor` as
    `hf_tokenizer`, `utils/utils.py` lines 51-68) and `--data.max_images_per_prompt` at least the
    most frames one prompt holds, so that OpenRLHF collapses each image's pad tokens before vLLM
    (`vllm_engine.py` lines 155-161 and 228-236).
    """
    from openrlhf.utils.agent import AgentExecutorBase

    check_framework_version("openrlhf")
    agent_config = (
        config if isinstance(config, AgentConfig) else AgentConfig.model_validate(config or {})
    )
    reward_config = resolve_config(reward)
    if overview_frames < 1:
        raise ValueError(f"overview_frames must be at least 1, got {overview_frames}")

    class ParaVTAgentExecutor(AgentExecutorBase):
        """One ParaVT episode per OpenRLHF rollout; generation through OpenRLHF's `llm_engine`."""

        # the settings every episode runs with (a reference run can reuse them)
        paravt_overview_frames = overview_frames
        paravt_config = agent_config
        paravt_reward = reward_config

        async def execute(  # type: ignore[no-untyped-def]
            self, prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images=None
        ):
            row = row_of_label(label)
            if not hasattr(hf_tokenizer, "image_processor"):
                raise ValueError(
                    "the ParaVT agent needs OpenRLHF's VLM processor as hf_tokenizer (it loads "
                    f"AutoProcessor for a vision-language actor), got {type(hf_tokenizer).__name__};"
                    " train a vision-language model such as Qwen3-VL"
                )
            cfg = _episode_config(self.paravt_config, sampling_params)
            with_logprobs = getattr(sampling_params, "logprobs", None) is not None

            async def generate_fn(
                prompt_ids: list[int], frames: list[Any], sampling: SamplingParams
            ) -> tuple[list[int], list[float] | None]:
                params = deepcopy(sampling_params)
                main = _ROLE.get() == "main"
                if main:  # OpenRLHF's sampling; prompt + response within --data.max_len
                    budget = max_length - len(prompt_ids)
                    if budget <= 0:
                        return [], None
                    params.max_tokens = min(sampling.max_new_tokens, budget)
                else:  # a sub-agent: its own sampling, log-probs unused (not trained here)
                    params.max_tokens = sampling.max_new_tokens
                    params.temperature = sampling.temperature
                    params.top_p = sampling.top_p
                    params.top_k = sampling.top_k or -1
                    params.logprobs = None
                mm = {"image": [to_pil(f) for f in frames]} if frames else None
                request = await llm_engine.generate(list(prompt_ids), params, multi_modal_data=mm)
                out = request.outputs[0]
                ids = [int(t) for t in out.token_ids]
                if not (main and with_logprobs and out.logprobs is not None):
                    return ids, None
                # as OpenRLHF's executors read them (utils/agent.py lines 259-264)
                lps = []
                for tid, by_token in zip(ids, out.logprobs):
                    entry = by_token.get(tid) if by_token else None
                    lps.append(float(entry.logprob) if entry is not None else 0.0)
                return ids, lps

            engine = _RoleEngine(hf_tokenizer, generate_fn)
            # the overview is decoded off the event loop: vLLM's other requests keep running
            task = await asyncio.to_thread(
                paravt_task,
                row,
                overview_frames=self.paravt_overview_frames,
                config=cfg,
                reader=reader,
            )
            (episode,) = await run_episodes([task], engine, cfg)
            result = score_row_episode(episode, row, self.paravt_reward)
            return episode_output(
                episode,
                result,
                prompt=prompt,
                label=label,
                images=images,
                max_length=max_length,
                with_logprobs=with_logprobs,
                image_token_id=engine.image_token_id,
            )

    ParaVTAgentExecutor.__qualname__ = ParaVTAgentExecutor.__name__
    return ParaVTAgentExecutor
