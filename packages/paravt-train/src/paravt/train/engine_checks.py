"""What each built-in rollout engine judges in a recipe, light: no torch, no trainer.

A recipe validates before anything is built, on any machine (`paravt-train doctor` and
`load_recipe` need neither torch nor the RL trainer), so an engine's recipe rules live apart from
the engine itself: one light class per engine here (`EngineChecks` and its subclasses), the
engine's heavy class in `paravt.train.rl.engines` inheriting its checks (`HFRollouts` from
`HFChecks`, `SGLangServers` from `SGLangChecks`, ...), so the two never disagree. The registry
(`paravt.train.engine_registry`) asks these while the recipe validates and imports the heavy
class only when a run builds the engine.

What a check class says:

- `supports_staleness`: whether the engine may generate while the trainer trains and knows which
  weights produced each reply (`rollout.max_staleness` > 0); when not, `synchronous_reason` says
  why (the registry writes the refusal, naming the engines that can);
- `check_spec(rollout)`: the engine's own problems with the recipe's `rollout` section, one
  each, naming the key and the fix ([]: none);
- `doctor_server_urls(rollout)`: the servers `paravt-train doctor --recipe` checks with its
  server checks (SGLang's routes);
- `settings`: the pydantic model of the engine's own settings, the recipe's
  `rollout.engine_settings` (None: it takes none); the registry validates them while the recipe
  loads and the engine reads them with `engine_settings(rollout)`.

Nothing here imports the recipe (which imports the registry, which imports this): `rollout` is
the recipe's `RolloutSpec`, read by attribute.
"""

from __future__ import annotations

from typing import Any, ClassVar


class EngineChecks:
    """The recipe rules every engine has (the base of `RolloutEngine`): synchronous only, no
    rules of its own, no servers for the doctor. A subclass overrides what it changes."""

    # `rollout.max_staleness` > 0: the engine generates later steps while the trainer trains and
    # knows which weights produced each reply (so the staleness bound holds); when False, why not
    supports_staleness: ClassVar[bool] = False
    synchronous_reason: ClassVar[str] = "it cannot tell which weights produced a reply"
    # the model of `rollout.engine_settings` (pydantic, extra="forbid" advised); None: no settings
    settings: ClassVar[Any] = None

    @classmethod
    def engine_settings(cls, rollout: Any) -> Any:
        """The recipe's `rollout.engine_settings` as this engine's `settings` model (validated
        already while the recipe loaded); None for an engine without settings."""
        return (
            None if cls.settings is None else cls.settings.model_validate(rollout.engine_settings)
        )

    @classmethod
    def check_spec(cls, rollout: Any) -> list[str]:
        """What this engine finds wrong with a recipe's `rollout` section (a `RolloutSpec`), one
        problem each, naming the key and the fix ([]: nothing). Called while the recipe
        validates, before anything is built; `max_staleness` against `supports_staleness` is the
        registry's (`paravt.train.engine_registry.check_spec`), not repeated here. A subclass
        adds its own (`super().check_spec(rollout) + [...]`)."""
        return []

    @classmethod
    def doctor_server_urls(cls, rollout: Any) -> list[str]:
        """The servers of a recipe's `rollout` section that `paravt-train doctor --recipe`
        checks with its server checks (SGLang's routes: `/health`, `/model_info`); none here."""
        return []


class HFChecks(EngineChecks):
    """`rollout.engine: hf` (`HFRollouts`): transformers in the trainer's processes."""

    synchronous_reason = "the in-process engine generates with the very weights being trained"


class ServerChecks(EngineChecks):
    """Rollout servers (`ServerEngine`): the recipe's `rollout.server` section names them."""

    example_url: ClassVar[str] = "http://127.0.0.1:8000"  # in the message of a missing url
    launch_hint: ClassVar[str] = "start the servers first"  # how, in the same message

    @classmethod
    def check_spec(cls, rollout: Any) -> list[str]:
        problems = super().check_spec(rollout)
        if not rollout.server.urls:
            problems.append(
                f"rollout.engine={rollout.engine} needs rollout.server.urls, e.g. "
                f"rollout.server.urls=[{cls.example_url}] ({cls.launch_hint}; see paravt-train's "
                "README, Launch)"
            )
        return problems


class SGLangChecks(ServerChecks):
    """`rollout.engine: sglang_server` (`SGLangServers`): asynchronous when not colocated."""

    supports_staleness = True  # every reply carries the weight version that generated it
    example_url = "http://127.0.0.1:30000"
    launch_hint = "start the server with python -m sglang.launch_server"

    @classmethod
    def check_spec(cls, rollout: Any) -> list[str]:
        problems = super().check_spec(rollout)
        if rollout.max_staleness and rollout.server.colocate:
            problems.append(
                f"rollout.max_staleness={rollout.max_staleness} cannot run with "
                "rollout.server.colocate=true: colocated servers give their memory to the "
                "update, so nothing can generate meanwhile; set rollout.max_staleness=0"
            )
        return problems

    @classmethod
    def doctor_server_urls(cls, rollout: Any) -> list[str]:
        """Every rollout and weight URL (SGLang's routes are what the doctor checks)."""
        spec = rollout.server
        return list(dict.fromkeys([*spec.urls, *(spec.weight_urls or [])]))


class VLLMChecks(ServerChecks):
    """`rollout.engine: vllm_server` (`VLLMServers`): weights reloaded from disk, servers not
    colocated; asynchronous with `pause_mode` drain only (its client tags each reply with the
    version it was sent under, so no request may straddle a reload)."""

    supports_staleness = True  # the client tags each reply with its version (no request straddles)
    launch_hint = (
        "start it with VLLM_SERVER_DEV_MODE=1 python -m vllm.entrypoints.openai.api_server "
        "--model MODEL ..."
    )

    @classmethod
    def check_spec(cls, rollout: Any) -> list[str]:
        problems = super().check_spec(rollout)
        unsupported = {
            "rollout.server.weight_sync": (rollout.server.weight_sync, "disk"),
            "rollout.server.colocate": (rollout.server.colocate, False),
        }
        for key, (value, allowed) in unsupported.items():
            if value != allowed:
                problems.append(
                    f"{key}={value} is not available with rollout.engine={rollout.engine} (it "
                    f"reloads weights from disk and its servers are not colocated): set "
                    f"{key}={allowed}, or use rollout.engine=sglang_server"
                )
        mode, explicit = rollout.server.pause_mode, rollout.server.model_fields_set
        if rollout.max_staleness and "pause_mode" in explicit and mode != "drain":
            problems.append(
                f"rollout.server.pause_mode={mode} lets a request go on across a weight "
                f"reload, and rollout.engine={rollout.engine} could not tell which weights "
                "produced its reply (vLLM's chat replies carry no weight version): set "
                "rollout.server.pause_mode=drain (what this engine does: a reload waits for "
                "the requests in flight), or leave the key out"
            )
        return problems
