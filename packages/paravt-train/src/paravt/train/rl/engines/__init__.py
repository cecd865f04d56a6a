"""Rollout engines: one class per kind, registered by the recipe's `rollout.engine` name.

`RolloutEngine` (`base.py`) is what every engine does: build from the recipe, free memory before
an update, take the policy's weights as buckets with a version, verify them, report its metrics,
close. `paravt.train.rl.policy.WeightPublisher` drives the one a run names; `Backend` only hands
out the weight buckets. The built-in engines:

- `hf` (`hf.py`): `HFRollouts`, which builds `InProcessHF`, the policy module itself (one
  process, ZeRO-2), or `HFReplica`, an unsharded copy refreshed bucket by bucket (FSDP2, ZeRO-3);
- `sglang_server` (`servers.py`): `SGLangServers`;
- `vllm_server` (`servers.py`): `VLLMServers`.

They are named in `paravt.train.engine_registry.BUILT_IN` (the one place), each with its light
checks (`paravt.train.engine_checks`: `HFChecks`, `SGLangChecks`, `VLLMChecks`, no torch), which
judge the recipe's `rollout` section while it validates (`check_spec`) and say whether the engine
can run asynchronously (`supports_staleness`); each class here inherits its checks and is
imported only when a run builds it. A new engine is a `RolloutEngine` subclass in its own file
(it inherits `EngineChecks`; override `check_spec` for rules of its own, set `settings` for
settings of its own) and one `register_engine(name, cls)` call before its recipe is loaded, or
an entry point in the group `paravt.rollout_engines` of the package that defines it;
`rollout.engine: <name>` then builds it. The registry functions are
`paravt.train.engine_registry`'s, re-exported.
"""

from __future__ import annotations

from paravt.train.engine_registry import engine_class, engine_names, register_engine
from paravt.train.rl.engines.base import (
    WEIGHT_BUCKET_BYTES,
    Bucket,
    EngineBuilder,
    EngineContext,
    RolloutEngine,
    WeightCheck,
    build_engine,
)
from paravt.train.rl.engines.hf import HFReplica, HFRollouts, InProcessHF
from paravt.train.rl.engines.servers import ServerEngine, SGLangServers, VLLMServers

__all__ = [
    "WEIGHT_BUCKET_BYTES",
    "Bucket",
    "EngineBuilder",
    "EngineContext",
    "HFReplica",
    "HFRollouts",
    "InProcessHF",
    "RolloutEngine",
    "SGLangServers",
    "ServerEngine",
    "VLLMServers",
    "WeightCheck",
    "build_engine",
    "engine_class",
    "engine_names",
    "register_engine",
]
