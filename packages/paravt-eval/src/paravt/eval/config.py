"""The knobs of an evaluation run: which model, which agent protocol, which overrides.

`EvalConfig` is what `--model_args` of lmms-eval, `paravt-eval ask` and `paravt-eval reproduce` all
validate into. The agent protocol (`paravt.core.AgentProtocol`) comes from `protocol=` (`paravt`,
`paper`, or a checkpoint directory / JSON file), else from the checkpoint's own
`agent_protocol.json`, else it is `paper`: a model that does not carry its protocol (a served model,
a released checkpoint) is evaluated the way the paper evaluated it. Every other field left unset
keeps the protocol's value (64 overview frames, greedy decoding, 2048 new tokens per turn, 3 turns,
5 calls per turn in both shipped protocols). `protocol_line()` says which protocol and why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from paravt.core import (
    PAPER_PROTOCOL,
    PROTOCOL_FILE,
    PROTOCOLS,
    AgentConfig,
    AgentProtocol,
    PromptMode,
    get_protocol,
)

MAX_OVERVIEW_FRAMES = 512
# The released driver's server settings (github.com/EvolvingLMMs-Lab/ParaVT, commit cf55249):
# `OPENAI_TIMEOUT_S = 1800.0` (paravt/eval/driver.py:206, and `timeout=1800.0` in utils.py:616) and
# `--workers_per_shard` 4 (driver.py:588, configs/withtool.yaml:52): one shard of samples per
# server, 4 samples in flight in each.
DRIVER_TIMEOUT_S = 1800.0
DRIVER_SAMPLES_PER_SERVER = 4


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
        None,
        description="OpenAI-compatible server(s), e.g. http://localhost:8000/v1; several "
        "separated by '|' (lmms-eval splits model_args at commas), e.g. "
        "http://a:8000/v1|http://b:8000/v1: samples go to the server with the fewest in flight.",
    )
    model: str | None = Field(None, description="Model name on the server (with base_url).")
    api_key: str | None = Field(None, description="Bearer token for the server, if it needs one.")
    protocol: str | None = Field(
        None,
        description="Agent protocol: paravt, paper (the released driver's), or a checkpoint "
        "directory / agent_protocol.json; default: the checkpoint's recorded protocol, else paper "
        "(served models and checkpoints without agent_protocol.json).",
    )
    prompt_mode: PromptMode | None = Field(
        None,
        description="direct, reasoning, agentic_general or agentic_minimal, for every question; "
        "default: the protocol's (paper: agentic_general, grounding questions agentic_minimal).",
    )
    main_nframes: int | None = Field(
        None, ge=1, le=MAX_OVERVIEW_FRAMES, description="Overview frames the main agent sees (K)."
    )
    video_channel: Literal["images", "video_url"] | None = Field(
        None,
        description="images: overview frames as images; video_url: the video file for the server "
        "to decode (the driver's channel for Charades-STA; servers only). Default: protocol's.",
    )
    max_turns: int | None = Field(None, ge=1, le=16, description="Main-agent turns (protocol's).")
    max_parallel: int | None = Field(
        None, ge=1, le=32, description="crop_video calls run per turn at most."
    )
    dispatch: Literal["parallel", "sequential"] = Field(
        "parallel", description="parallel: every call of a turn; sequential: one call per turn."
    )
    tool_response: Literal["subagent", "frames"] | None = Field(
        None,
        description="subagent: a weight-sharing sub-agent summarises each window; "
        "frames: the cropped frames return into the main context.",
    )
    max_new_tokens: int | None = Field(None, ge=1, le=32768, description="Tokens per turn.")
    max_context_tokens: int | None = Field(
        None,
        ge=1,
        description="Main-context tokens at most, prompt included (default: the protocol's; "
        "a checkpoint trained with a context window records it).",
    )
    subagent_max_new_tokens: int | None = Field(
        None, ge=1, le=32768, description="Tokens per summary."
    )
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="0 is greedy.")
    seed: int | None = Field(
        None,
        ge=0,
        description="Sampling seed (temperature > 0): each sample gets a seed of its own from "
        "(seed, its key), sent with its requests; a local checkpoint, which generates in "
        "batches, draws from the batch's first seed and each request's place in the batch, so a "
        "rerun over the same batches draws the same tokens. None: unseeded draws.",
    )
    max_pixels: int | None = Field(
        None, ge=784, description="Pixel budget per frame (default: the protocol's)."
    )
    max_crop_frames: int | None = Field(
        None,
        ge=1,
        le=256,
        description="Frames per crop_video window at most (default: the protocol's 16); match the "
        "checkpoint's training (video.max_crop_frames).",
    )
    include_video_path: bool | None = Field(
        None,
        description="Show the (ignored) video_path argument in the tool schema, as released "
        "checkpoints were trained with.",
    )
    batch_size: int = Field(
        1, ge=1, le=256, description="Local checkpoints: samples generated together in lockstep."
    )
    samples_per_server: int = Field(
        DRIVER_SAMPLES_PER_SERVER,
        ge=1,
        le=1024,
        description="Servers: samples in flight per server, each moving on its own (a rolling "
        "pool; the released driver's workers_per_shard).",
    )
    concurrency: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Servers: samples in flight over all servers at once (default: "
        "samples_per_server x the number of servers).",
    )
    prepare_ahead: int | None = Field(
        None,
        ge=0,
        le=4096,
        description="Servers: samples whose overview is decoded while every slot is busy, so that "
        "a freed slot sends a prepared sample at once (default: as many as are in flight, at "
        "most 16; 0 decodes inside the slot, as the released driver's workers do). Each holds "
        "its decoded overview in memory.",
    )
    timeout_s: float = Field(
        DRIVER_TIMEOUT_S,
        gt=0,
        le=86400,
        description="Servers: one request at most, in seconds (the released driver's OpenAI "
        "client timeout: a 64-frame overview with three tool turns under load needs minutes).",
    )
    device: str = Field("cpu", description="torch device for a local checkpoint.")
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        "auto",
        description="Local checkpoint weights: auto = bfloat16 on CUDA, transformers' default "
        "elsewhere.",
    )
    traces: str | None = Field(
        None,
        description="Where per-sample traces go (a .jsonl file or a directory). Default: beside "
        "lmms-eval's results when --output_path is given, else ./paravt_traces/.",
    )
    episodes: int = Field(
        8,
        ge=0,
        description="The lmms-eval plugin: the first this many samples of each task that ran are "
        "also written as episodes (thumbnails, every turn and call; the schema RL runs record, "
        "paravt.core.episode_records) to a folder beside the traces, <traces stem>_episodes/; "
        "`paravt-train episodes DIR --html` shows them. 0: none.",
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
        if self.protocol is not None:
            self._base_protocol()  # fails here, naming the fix, on an unknown protocol
        if self.pretrained and self.video_channel == "video_url":
            raise ValueError(
                "video_channel=video_url hands the video file to a server to decode; a local "
                "checkpoint takes images: use video_channel=images or base_url=...,model=..."
            )
        if self.base_url is not None and not self.base_urls:
            raise ValueError("base_url is empty: give http://host:port/v1 (several: joined by '|')")
        for url in self.base_urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(
                    f"base_url {url!r} is not an http(s) URL; give e.g. http://127.0.0.1:8000/v1 "
                    "(several: joined by '|')"
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
    def base_urls(self) -> list[str]:
        """The servers of `base_url` (several are separated by '|'), in order."""
        if not self.base_url:
            return []
        return [u.strip().rstrip("/") for u in self.base_url.split("|") if u.strip()]

    @property
    def in_flight(self) -> int:
        """Samples in flight at once over all servers."""
        if self.concurrency is not None:
            return self.concurrency
        return self.samples_per_server * max(1, len(self.base_urls))

    @property
    def ahead(self) -> int:
        """Samples prepared ahead of a free slot (`prepare_ahead`, default min(in_flight, 16))."""
        if self.prepare_ahead is not None:
            return self.prepare_ahead
        return min(self.in_flight, 16)

    @property
    def model_name(self) -> str:
        """A short name for tables and file names."""
        if self.pretrained:
            return Path(self.pretrained).expanduser().resolve().name
        return str(self.model)

    def resolved_protocol(self) -> AgentProtocol:
        """The agent protocol of this run: the named / recorded / default one, with every field
        this config sets laid over it (a prompt mode given here applies to every question)."""
        base, _ = self._base_protocol()
        data = base.model_dump()
        if self.prompt_mode is not None:
            data["grounding_prompt_mode"] = None
        if self.video_channel is not None:  # a channel given applies to every question
            data["grounding_channel"] = None
        for key in (
            "prompt_mode",
            "max_turns",
            "max_parallel",
            "max_new_tokens",
            "max_context_tokens",
            "subagent_max_new_tokens",
            "temperature",
            "include_video_path",
        ):
            value = getattr(self, key)
            if value is not None:
                data[key] = value
        if self.main_nframes is not None:
            data["overview"]["num_frames"] = self.main_nframes
        if self.video_channel is not None:
            data["overview"]["channel"] = self.video_channel
        if self.tool_response is not None:
            data["tool_result"]["form"] = self.tool_response
        if self.max_crop_frames is not None:
            data["crop"]["max_frames"] = self.max_crop_frames
        if self.max_pixels is not None:
            data["crop"]["max_pixels"] = self.max_pixels
            data["overview"]["max_pixels"] = self.max_pixels
        return AgentProtocol.model_validate(data)

    def protocol_line(self, flag: str = "protocol=") -> str:
        """The line a run states first: the protocol, why it is this one, its prompt mode(s).
        `flag` is how the caller's user names the protocol argument (`--protocol `)."""
        protocol = self.resolved_protocol()
        _, why = self._base_protocol(flag)
        modes: str = protocol.prompt_mode
        grounding = protocol.for_question("grounding", served=bool(self.base_url))
        differs: list[str] = []
        if grounding.prompt_mode != protocol.prompt_mode:
            differs.append(grounding.prompt_mode)
        if grounding.overview.channel != protocol.overview.channel:
            differs.append(f"over the {grounding.overview.channel} channel")
        if differs:
            modes += ", grounding questions " + " ".join(differs)
        return f"protocol: {protocol.name} v{protocol.version} ({why}); prompt mode {modes}"

    def _base_protocol(self, flag: str = "protocol=") -> tuple[AgentProtocol, str]:
        """The named / recorded / default protocol and why it is the one."""
        name = self.protocol
        if name is None:
            if self.pretrained:
                directory = Path(self.pretrained).expanduser()
                recorded = AgentProtocol.load(directory)
                if recorded is not None:
                    return recorded, f"checkpoint records it: {directory / PROTOCOL_FILE}"
                return PAPER_PROTOCOL, f"no recorded protocol in {directory}"
            return (
                PAPER_PROTOCOL,
                f"no recorded protocol in served model {self.model} at {self.base_url}",
            )
        if name in PROTOCOLS:
            return get_protocol(name), f"{flag}{name}"
        path = Path(name).expanduser()
        directory = path.parent if path.name == PROTOCOL_FILE else path
        recorded = AgentProtocol.load(directory) if directory.is_dir() else None
        if recorded is None:
            raise ValueError(
                f"protocol={name!r} is neither {' nor '.join(PROTOCOLS)} nor a directory with "
                f"{PROTOCOL_FILE}"
            )
        return recorded, f"{flag}{directory / PROTOCOL_FILE}"

    def agent_config(self) -> AgentConfig:
        """The core runtime's configuration for this run's protocol."""
        return self.resolved_protocol().agent_config(dispatch=self.dispatch)

    @property
    def uses_tools(self) -> bool:
        return self.resolved_protocol().uses_tools

    def torch_dtype(self) -> str | None:
        """The dtype name a local checkpoint loads in (None: the checkpoint's own on CPU)."""
        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if self.device.startswith("cuda") else None


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
