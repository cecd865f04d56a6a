"""PARA-GRPO / GRPO: the RL trainer, in rooms that the step's data flows through one way.

- `rollouts`: the agent configuration of a run, the main prompt, one step's episodes
  (`rollout`, `rollout_tasks`, `Rollouts`);
- `scoring`: rewards per episode, group advantages over all ranks, the training sequences and
  episode metrics; `watches`: steps without a learning signal (`NoSignalWatch`), invalid tool
  calls rising with the reward (`InvalidCallWatch`), rewards flattened by the clip
  (`ClipWatch`); `step_metrics`: the step's metrics row;
- `learner`: micro-batches, the log-prob pass (proximal, reference), the KL reward, `ppo_update`
  (the loss and one optimiser step);
- `engines`: the rollout engines, one class per kind behind one interface (`RolloutEngine`:
  build, before_update, load_weights, verify, metrics, close), registered by the recipe's
  `rollout.engine` name (`register_engine`): in-process HF, an HF replica, SGLang and vLLM
  servers;
- `policy`: `WeightPublisher`, the run's rollout engine and how it follows the policy's weights
  (versions, buckets, the check of a push and its one repeat; `WeightSyncError`);
- `run`: the recipe top to bottom (`train_rl`: `set_up_rl` -> the loop of `rl_step` (rollout ->
  score -> update -> sync -> `step_metrics`) -> checkpoints -> final), `evaluate` on held-out
  examples, and the recipe's builders.

Import from here; the modules are the layout, not the interface.
"""

from __future__ import annotations

from paravt.train.rl.engines import (
    EngineContext,
    RolloutEngine,
    WeightCheck,
    engine_names,
    register_engine,
)
from paravt.train.rl.learner import add_kl_reward, logprob_pass, ppo_update
from paravt.train.rl.policy import WeightPublisher, WeightSyncError
from paravt.train.rl.rollouts import PreparedStep, Rollouts, agent_config, prompt_messages, rollout
from paravt.train.rl.run import (
    RLSetup,
    StepPlan,
    build_gate,
    build_reward_config,
    evaluate,
    load_rl_examples,
    resume_hint,
    rl_step,
    set_up_rl,
    train_rl,
)
from paravt.train.rl.scoring import (
    episode_metrics,
    global_group_advantages,
    score_rollouts,
    training_sequences,
    zero_groups_frac,
)
from paravt.train.rl.step_metrics import progress_bar, step_metrics
from paravt.train.rl.watches import ClipWatch, InvalidCallWatch, NoSignalWatch

__all__ = [
    "ClipWatch",
    "EngineContext",
    "InvalidCallWatch",
    "NoSignalWatch",
    "PreparedStep",
    "RLSetup",
    "RolloutEngine",
    "Rollouts",
    "StepPlan",
    "WeightCheck",
    "WeightPublisher",
    "WeightSyncError",
    "add_kl_reward",
    "agent_config",
    "build_gate",
    "build_reward_config",
    "engine_names",
    "episode_metrics",
    "evaluate",
    "global_group_advantages",
    "load_rl_examples",
    "logprob_pass",
    "ppo_update",
    "progress_bar",
    "prompt_messages",
    "register_engine",
    "resume_hint",
    "rl_step",
    "rollout",
    "score_rollouts",
    "set_up_rl",
    "step_metrics",
    "train_rl",
    "training_sequences",
    "zero_groups_frac",
]
