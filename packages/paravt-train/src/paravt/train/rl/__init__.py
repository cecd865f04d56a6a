"""PARA-GRPO / GRPO: the RL trainer, in rooms that the step's data flows through one way.

- `rollouts`: the agent configuration of a run, the main prompt, one step's episodes
  (`rollout`, `rollout_tasks`, `Rollouts`);
- `scoring`: rewards per episode, group advantages over all ranks, steps without a learning signal
  (`NoSignalWatch`), the training sequences and episode metrics;
- `learner`: micro-batches, the log-prob pass (proximal, reference), the KL reward, `update`
  (the loss and one optimiser step);
- `policy`: `PolicyEngine`, the rollout engine of a run and how it follows the policy's weights
  (in-process, SGLang or vLLM servers; pushes, versions, sync checks; `WeightSyncError`);
- `run`: the recipe top to bottom (`train_rl`: set-up -> data -> (rollout -> score -> update)
  loop -> checkpoints), `evaluate` on held-out examples, and the recipe's builders.

Import from here; the modules are the layout, not the interface.
"""

from __future__ import annotations

from paravt.train.rl.learner import add_kl_reward, logprob_pass, update
from paravt.train.rl.policy import PolicyEngine, WeightSyncError
from paravt.train.rl.rollouts import PreparedStep, Rollouts, agent_config, prompt_messages, rollout
from paravt.train.rl.run import (
    build_gate,
    build_reward_config,
    evaluate,
    load_rl_examples,
    resume_hint,
    train_rl,
)
from paravt.train.rl.scoring import (
    NoSignalWatch,
    episode_metrics,
    global_group_advantages,
    score_rollouts,
    training_sequences,
    zero_groups_frac,
)

__all__ = [
    "NoSignalWatch",
    "PolicyEngine",
    "PreparedStep",
    "Rollouts",
    "WeightSyncError",
    "add_kl_reward",
    "agent_config",
    "build_gate",
    "build_reward_config",
    "episode_metrics",
    "evaluate",
    "global_group_advantages",
    "load_rl_examples",
    "logprob_pass",
    "prompt_messages",
    "resume_hint",
    "rollout",
    "score_rollouts",
    "train_rl",
    "training_sequences",
    "update",
    "zero_groups_frac",
]
