"""ParaVT inside verl (tested: 0.9.1): an agent loop registered as `paravt`.

`ParaVTAgentLoop.run` plays one ParaVT episode of a dataset row with our runtime
(`paravt.train.integrations.agent`): the overview of the row's own video, parallel `crop_video`
calls (at most `AgentConfig.max_parallel` per turn) executed by paravt-tools on that video, one
sub-agent per window that sees the cropped frames, the reports, the answer. Every generation goes
through verl's `server_manager.generate(request_id, prompt_ids=, sampling_params=, image_data=)`
(`LLMServerClient`, verl/workers/rollout/llm_server.py:99), wrapped as our `CallbackEngine`. The
episode is scored with `paravt.rewards.score_episode` (`score_row_episode`) and the score set as
`reward_score` with its parts in `extra_fields["reward_extra_info"]`, so verl's reward loop does
not score it again (agent_loop.py:972 `_compute_score` skips a set score).

Why not verl's `ToolAgentLoop`: it runs at most `multi_turn.max_parallel_calls` calls through
verl tools, raises NotImplementedError for a tool that returns video (tool_agent_loop.py:368) and
returns one trajectory, so the sub-agents could not be trained.

Sub-agent samples (PARA-GRPO's broadcast advantage), the least invasive design: nothing of verl is
subclassed or patched. `run` returns `[sub-agent 1, ..., sub-agent k, main]`, a list, which verl
0.9.1's default trainer (`trainer.use_v1: true`, trainer/config/ppo_trainer.yaml:232) accepts:
- `AgentLoopWorkerTQ._agent_loop_postprocess` (trainer/ppo/v1/agent_loop_tq.py:148) takes
  `AgentLoopOutput | list[AgentLoopOutput]`, treats `outputs[-1]` as the final output (scored,
  its `reward_score` and `reward_extra_info` copied to the others) and stores each output as its
  own sample under the key `{uid}_{session_id}_{index}`;
- `compute_advantage_for_multi_trajectories` (trainer/ppo/v1/utils.py:158), what the v1 trainer's
  `_compute_advantage` calls (trainer/ppo/v1/trainer_base.py:1775), computes GRPO over the highest
  index of each `{uid}_{session_id}` only, i.e. over the main trajectories, and broadcasts that
  advantage to every other output of the session: the sub-agents.
So the main trajectory must come last (it does) and the estimator must be GRPO (checked: other
estimators would put the sub-agents into the group statistics). The legacy trainer
(`trainer.use_v1=false`, `AgentLoopWorker._agent_loop_postprocess`, agent_loop.py:691) takes one
output per row: with `subagent_samples: false` the loop returns the main trajectory alone.

Masks: `response_ids` are everything after the first prompt (each turn's generated tokens, the
tool responses between turns); `response_mask` is 1 exactly on generated tokens, as verl defines
it (agent_loop.py:95); `response_logprobs` are the server's log-probs of the generated tokens (0
on tool tokens), present when `rollout.calculate_log_probs` asks for them.

Sampling: verl's `sampling_params` (temperature, top_p, top_k, logprobs; `val_kwargs` during
validation) are sent unchanged; our `AgentConfig` supplies `max_tokens` per request (a main turn,
the forced answer, a sub-agent). The model never chooses the video: the row's `video` field does.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from paravt.core import AgentConfig, SamplingParams, run_episodes
from paravt.rewards import RewardBreakdown
from paravt.rewards.integrations import resolve_config, verl_score
from paravt.train.integrations.agent import (
    CallbackEngine,
    RowTask,
    TokenSample,
    episode_samples,
    paravt_task,
    score_row_episode,
    to_pil,
)

AGENT_NAME = "paravt"
__all__ = ["AGENT_NAME", "ParaVTAgentLoop", "reward_extra_info", "row_of"]


def row_of(fields: Mapping[str, Any]) -> RowTask:
    """The ParaVT row of verl's dataset fields (the agent loop's `**kwargs`): `video`,
    `question`, `answer` (`question_type`, `options`) at the top level or in `extra_info`; the
    answer may also be verl's `reward_model["ground_truth"]` (`RowTask.from_row` reads them all)."""
    return RowTask.from_row(fields)


def reward_extra_info(r: RewardBreakdown) -> dict[str, float]:
    """The reward's parts as verl logs them (the keys of `paravt.rewards.integrations.verl`)."""
    return dict(verl_score(r))


class _ServerGenerate:
    """Our `GenerateFn` over verl's `server_manager.generate`.

    A continuation of an earlier request (its prompt starts with that request's prompt) keeps its
    request id, so the server's sticky session reuses the prefix cache."""

    def __init__(self, server_manager: Any, sampling_params: Mapping[str, Any], priority: int):
        self.server_manager = server_manager
        self.sampling_params = dict(sampling_params)
        self.priority = priority
        self.sessions: list[tuple[str, list[int]]] = []
        self.num_preempted = 0
        self.global_steps: list[int] = []

    def _request_id(self, prompt_ids: list[int]) -> str:
        for k, (rid, seen) in enumerate(self.sessions):
            if len(seen) <= len(prompt_ids) and prompt_ids[: len(seen)] == seen:
                del self.sessions[k]
                return rid
        return uuid.uuid4().hex

    async def __call__(
        self, prompt_ids: list[int], images: list[Any], sampling: SamplingParams
    ) -> tuple[list[int], list[float] | None]:
        request_id = self._request_id(prompt_ids)
        params = {k: v for k, v in self.sampling_params.items() if k != "max_new_tokens"}
        params["max_tokens"] = sampling.max_new_tokens
        extra = {"priority": self.priority} if self.priority else {}
        out = await self.server_manager.generate(
            request_id=request_id,
            prompt_ids=list(prompt_ids),
            sampling_params=params,
            image_data=[to_pil(img) for img in images] or None,
            **extra,
        )
        ids = [int(t) for t in out.token_ids]
        self.sessions.append((request_id, list(prompt_ids)))
        self.num_preempted += int(out.num_preempted or 0)
        fields = getattr(out, "extra_fields", None) or {}
        self.global_steps += [
            int(fields[k])
            for k in ("min_global_steps", "max_global_steps")
            if fields.get(k) is not None
        ]
        return ids, (list(out.log_probs) if out.log_probs else None)


def _plain(value: Any) -> Any:
    """Hydra hands nested YAML mappings over as DictConfig: plain containers for pydantic."""
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


@register(AGENT_NAME)
class ParaVTAgentLoop(AgentLoopBase):
    """verl agent loop running one ParaVT episode per row (see the module docstring).

    Options (keys of the agent-loop YAML entry, passed by `hydra.utils.instantiate`):
    `overview_frames` (frames of the first prompt's overview, default 16), `agent` (a mapping of
    `AgentConfig` fields: max_turns, max_parallel, tool_response, sampling, ...), `reward` (a
    preset name, 'paragrpo' or 'vanilla', or a mapping of `RewardConfig` fields) and
    `subagent_samples` (default true: the sub-agents are trained as extra samples; needs verl's
    v1 trainer and GRPO).
    """

    def __init__(
        self,
        *args: Any,
        overview_frames: int = 16,
        agent: Mapping[str, Any] | AgentConfig | None = None,
        reward: Mapping[str, Any] | str | None = None,
        subagent_samples: bool = True,
        name: str | None = None,
        tools: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if self.processor is None:
            raise ValueError(
                "the ParaVT agent loop needs the model's multimodal processor, but verl loaded "
                "none for actor_rollout_ref.model.path (verl's hf_processor turns a load error into "
                "the warning 'Failed to create processor'; Qwen3-VL's processor needs a torchvision "
                "that works with the installed torch)"
            )
        self.overview_frames = int(overview_frames)
        if self.overview_frames < 1:
            raise ValueError(f"overview_frames must be at least 1, got {overview_frames}")
        agent = _plain(agent)
        self.agent_config = (
            agent if isinstance(agent, AgentConfig) else AgentConfig.model_validate(agent or {})
        )
        self.reward_config = resolve_config(_plain(reward))
        self.subagent_samples = bool(subagent_samples)
        if self.subagent_samples:
            use_v1 = bool(self.config.trainer.get("use_v1", False))
            estimator = str(self.config.algorithm.get("adv_estimator", ""))
            if not use_v1:
                raise ValueError(
                    "subagent_samples needs verl's v1 trainer (trainer.use_v1=true), whose agent "
                    "loop worker takes several outputs per row; with trainer.use_v1=false set "
                    "subagent_samples: false in the agent-loop config (main trajectory only)"
                )
            if estimator != "grpo":
                raise ValueError(
                    f"subagent_samples broadcasts the main trajectory's GRPO advantage, which "
                    f"verl computes for algorithm.adv_estimator=grpo only (got {estimator!r}); "
                    "set algorithm.adv_estimator=grpo or subagent_samples: false"
                )
        self.response_length = int(self.rollout_config.response_length)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.image_token_id = int(self.tokenizer.convert_tokens_to_ids("<|image_pad|>"))

    async def run(
        self, sampling_params: dict[str, Any], **kwargs: Any
    ) -> AgentLoopOutput | list[AgentLoopOutput]:
        row = row_of(kwargs)
        generate = _ServerGenerate(
            self.server_manager, sampling_params, int(kwargs.get("priority", 0) or 0)
        )
        engine = CallbackEngine(self.processor, generate)
        # the overview decode is blocking work: off the event loop the other rows share
        task = await asyncio.get_running_loop().run_in_executor(
            None,
            lambda: paravt_task(
                row, overview_frames=self.overview_frames, config=self.agent_config
            ),
        )
        (episode,) = await run_episodes([task], engine, self.agent_config)
        reward = score_row_episode(episode, row, self.reward_config)
        metrics = AgentLoopMetrics(
            generate_sequences=sum(t.generate_s + t.subagent_s for t in episode.turns),
            tool_calls=sum(t.tools_s for t in episode.turns),
            num_preempted=generate.num_preempted,
        )
        shared = {
            "reward_extra_info": reward_extra_info(reward),
            "paravt_answer": episode.answer or "",
            "paravt_tool_calls": episode.num_tool_calls,
            "turn_scores": [],
            "tool_rewards": [],
        }
        if generate.global_steps:
            shared["min_global_steps"] = min(generate.global_steps)
            shared["max_global_steps"] = max(generate.global_steps)
        logprobs = bool(sampling_params.get("logprobs"))
        main, *subagents = episode_samples(episode)
        main_out = self._output(
            main, reward.total, 2 * len(episode.turns), metrics, shared, logprobs
        )
        if not self.subagent_samples:
            return main_out
        outs = [self._output(s, reward.total, 2, metrics, shared, logprobs) for s in subagents]
        return [*outs, main_out]  # verl's v1 worker scores and groups by the last output

    def _output(
        self,
        sample: TokenSample,
        reward: float,
        num_turns: int,
        metrics: AgentLoopMetrics,
        shared: dict[str, Any],
        logprobs: bool,
    ) -> AgentLoopOutput:
        who = f"the {sample.role} trajectory" + (
            f" (turn {sample.turn}, call {sample.call_index})" if sample.role == "subagent" else ""
        )
        if len(sample.prompt_ids) > self.prompt_length:
            raise ValueError(
                f"{who} has a prompt of {len(sample.prompt_ids)} tokens, over "
                f"rollout.prompt_length={self.prompt_length}; cutting it would misalign its "
                "images: raise actor_rollout_ref.rollout.prompt_length or lower overview_frames "
                "/ agent.max_num_frames"
            )
        n = self.response_length
        if self.image_token_id in sample.response_ids[n:]:
            raise ValueError(
                f"{who} has {len(sample.response_ids)} response tokens with images past "
                f"rollout.response_length={n}; raise actor_rollout_ref.rollout.response_length"
            )
        return AgentLoopOutput(
            prompt_ids=sample.prompt_ids,
            response_ids=sample.response_ids[:n],
            response_mask=sample.response_mask[:n],
            response_logprobs=sample.response_logprobs[:n] if logprobs else None,
            multi_modal_data={"images": [to_pil(img) for img in sample.images]},
            reward_score=reward,
            num_turns=num_turns,
            metrics=metrics.model_copy(),
            extra_fields={
                **shared,
                "reward_extra_info": dict(shared["reward_extra_info"]),
                "paravt_role": sample.role,
                "paravt_turn": -1 if sample.turn is None else sample.turn,
                "paravt_call_index": -1 if sample.call_index is None else sample.call_index,
                "paravt_truncated": len(sample.response_ids) > n,
            },
        )
