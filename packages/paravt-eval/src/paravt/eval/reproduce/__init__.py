"""`paravt-eval reproduce`: the paper's Table 2 in miniature, and Table 1 on the paper's splits.

A thin orchestration over paravt-train and paravt-eval, one room per part:

- `config`: what runs (seeds, blocks, steps, held-out size; `ReproduceConfig.quick()`);
- `training`: the task data and, per seed, the base model, SFT and one RL run per arm
  (`paravt.train.miniature` defines the task and the arms);
- `cells`: held-out accuracy through `paravt.eval.agent.EvalAgent`, f_tau / kappa from rollouts
  and training curves, one cached JSON each;
- `tables`: mean ± spread over seeds and Table 2's blocks as markdown;
- `claims`: the results section, one verdict per claim of the paper;
- `chart`: f_tau / kappa curves per step with the seed spread shaded, accuracy bars;
- `paper`: Table 1 on the seven paper splits for given checkpoints, through the lmms-eval CLI;
- `run`: `run_reproduce`, the order of work and the report.
"""

from paravt.eval.reproduce.config import ReproduceConfig
from paravt.eval.reproduce.run import ReproduceResult, run_reproduce

__all__ = ["ReproduceConfig", "ReproduceResult", "run_reproduce"]
