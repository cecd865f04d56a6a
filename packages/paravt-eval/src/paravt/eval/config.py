"""The knobs of an evaluation run: which model, which prompt, which agent protocol.

`EvalConfig` is what `--model_args` of lmms-eval, `paravt-eval ask` and `paravt-eval reproduce` all
validate into. Defaults are the paper's protocol: 64 overview frames, greedy decoding, 2048 new
tokens per turn, at most 3 turns and 5 parallel `crop_video` calls per turn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from paravt.core import AgentConfig, PromptMode, SamplingParams

MAX_OVERVIEW_FRAMES = 512


class EvalConfig(BaseModel):
    """One model under one evaluation protocol.

    Exactly one model source: `pretrained` (a local checkpoint directory loaded with transformers)
    or `base_url` + `model` (an OpenAI-compatible chat server such as vLLM or SGLang).
    """

    model_config = ConfigDict(extra="forbid")

    pretrained: str | None = Field(
        None, description="Local checkpoint directory (any Qwen3-VL-architecture model)."
    )
    base_url: str | None = Field(
        None, description="OpenAI-compatible server, e.g. http://localhost:8000/v1."
    )
    model: str | None = Field(None, description="Model name on the server (with base_url).")
    api_key: str | None = Field(None, description="Bearer token for the server, if it needs one.")
    prompt_mode: PromptMode = Field(
        "agentic_general", description="direct, reasoning, agentic_general or agentic_minimal."
    )
    main_nframes: int = Field(
        64, ge=1, le=MAX_OVERVIEW_FRAMES, description="Overview frames the main agent sees (K)."
    )
    max_turns: int = Field(3, ge=1, le=16, description="Main-agent turns; the last one answers.")
    max_parallel: int = Field(5, ge=1, le=32, description="crop_video calls run per turn at most.")
    dispatch: Literal["parallel", "sequential"] = Field(
        "parallel", description="parallel: every call of a turn; sequential: one call per turn."
    )
    tool_response: Literal["subagent", "frames"] = Field(
        "subagent",
        description="subagent: a weight-sharing sub-agent summarises each window; "
        "frames: the cropped frames return into the main context.",
    )
    max_new_tokens: int = Field(2048, ge=1, le=32768, description="Tokens per main-agent turn.")
    subagent_max_new_tokens: int = Field(256, ge=1, le=32768, description="Tokens per summary.")
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="0 is greedy (the protocol).")
    max_pixels: int | None = Field(
        None, ge=784, description="Pixel budget per frame (default: the tool's reference budget)."
    )
    max_crop_frames: int | None = Field(
        None,
        ge=1,
        le=256,
        description="Frames per crop_video window at most (default: the tool's 16); match the "
        "checkpoint's training (video.max_crop_frames).",
    )
    include_video_path: bool = Field(
        False,
        description="Show the (ignored) video_path argument in the tool schema, as released "
        "checkpoints were trained with.",
    )
    batch_size: int = Field(1, ge=1, le=256, description="Samples run in lockstep per batch.")
    device: str = Field("cpu", description="torch device for a local checkpoint.")
    traces: str | None = Field(
        None,
        description="Where per-sample traces go (a .jsonl file or a directory). Default: beside "
        "lmms-eval's results when --output_path is given, else ./paravt_traces/.",
    )

    @model_validator(mode="after")
    def _one_model_source(self) -> EvalConfig:
        if self.pretrained and self.base_url:
            raise ValueError("give either pretrained=PATH or base_url=URL,model=NAME, not both")
        if not self.pretrained and not self.base_url:
            raise ValueError(
                "no model: pass pretrained=/path/to/checkpoint or base_url=http://host:port/v1,"
                "model=NAME"
            )
        if self.base_url and not self.model:
            raise ValueError("base_url needs model=NAME (the model name the server serves)")
        if self.pretrained and not Path(self.pretrained).expanduser().is_dir():
            raise ValueError(
                f"pretrained={self.pretrained!r} is not a directory; pass a local checkpoint "
                "directory (config.json, weights, processor files)"
            )
        return self

    @property
    def model_name(self) -> str:
        """A short name for tables and file names."""
        if self.pretrained:
            return Path(self.pretrained).expanduser().resolve().name
        return str(self.model)

    def agent_config(self) -> AgentConfig:
        """The core runtime's configuration for this protocol."""
        return AgentConfig(
            # Without tools in the prompt there is nothing to wait for: one turn answers.
            max_turns=self.max_turns if self.uses_tools else 1,
            max_parallel=self.max_parallel,
            dispatch=self.dispatch,
            tool_response=self.tool_response,
            think_prefix=self.prompt_mode in ("reasoning", "agentic_general", "agentic_minimal"),
            sampling=SamplingParams(
                max_new_tokens=self.max_new_tokens, temperature=self.temperature
            ),
            subagent_sampling=SamplingParams(
                max_new_tokens=self.subagent_max_new_tokens, temperature=self.temperature
            ),
        )

    @property
    def uses_tools(self) -> bool:
        return self.prompt_mode in ("agentic_general", "agentic_minimal")


def parse_eval_config(values: dict[str, Any]) -> EvalConfig:
    """Validate model arguments; raise `ValueError` naming every bad argument and the fix."""
    try:
        return EvalConfig.model_validate(values)
    except ValidationError as exc:
        lines = []
        for err in exc.errors(include_url=False):
            loc = ".".join(str(x) for x in err.get("loc", ())) or "model_args"
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            if err.get("type") == "extra_forbidden":
                known = ", ".join(EvalConfig.model_fields)
                msg = f"unknown argument (known: {known})"
            lines.append(f"{loc}: {msg}")
        raise ValueError("paravt model arguments: " + "; ".join(lines)) from None
