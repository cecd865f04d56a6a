"""The agent protocol a model was trained with, saved beside its weights.

`trained_protocol(recipe)` is paravt's protocol (`paravt.core.agent_protocol.PARAVT_PROTOCOL`) in
the recipe's prompt mode, with the recipe's overview frames, crop frames/fps, pixel budgets,
think prefix, token limits, turns and calls per turn. The trainers write it into every `final/`
they save (`agent_protocol.json`), so `paravt-eval ask --model RUN/final` and the lmms-eval plugin
evaluate a checkpoint the way it was trained unless flags say otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paravt.core import AgentProtocol, get_protocol
from paravt.train.ranks import is_rank0


def trained_protocol(recipe: Any) -> AgentProtocol:
    """The protocol of an `SFTRecipe` or `RLRecipe` (SFT recipes have no rollout section: paravt's
    defaults for what only RL sets; the overview is `video.overview_frames` either way, the K a
    gated RL run uses when gating is off and the K its teacher traces show by default)."""
    video = recipe.video
    rollout = getattr(recipe, "rollout", None)
    base = get_protocol("paravt", rollout.prompt_mode if rollout is not None else None)
    changes: dict[str, Any] = {
        "overview": base.overview.model_copy(
            update={
                "num_frames": video.overview_frames,
                "min_pixels": video.min_pixels,
                "max_pixels": video.max_pixels,
            }
        ),
        "crop": base.crop.model_copy(
            update={
                "max_frames": video.max_crop_frames,
                "fps": video.crop_fps,
                "min_pixels": video.min_pixels,
                "max_pixels": video.max_pixels,
            }
        ),
        "source": f"paravt-train {getattr(recipe, 'stage', '?')} recipe, output_dir "
        f"{recipe.output_dir}",
    }
    if rollout is not None:
        prefix_modes = set(base.think_prefix_modes)
        if rollout.think_prefix:
            prefix_modes.add(rollout.prompt_mode)
        else:
            prefix_modes.discard(rollout.prompt_mode)
        changes.update(
            think_prefix_modes=tuple(sorted(prefix_modes)),
            tool_result=base.tool_result.model_copy(update={"form": rollout.tool_response}),
            max_new_tokens=rollout.max_new_tokens,
            subagent_max_new_tokens=rollout.subagent_max_new_tokens,
            max_turns=rollout.max_turns,
            max_parallel=rollout.max_parallel,
            max_context_tokens=rollout.max_context_tokens,
        )
    return base.with_overrides(**changes)


def save_trained_protocol(final: Path, recipe: Any) -> None:
    """Write `agent_protocol.json` into `final` (rank 0 only; a no-op when `final` is missing)."""
    if not is_rank0():
        return
    if Path(final).is_dir():
        trained_protocol(recipe).save(final)
