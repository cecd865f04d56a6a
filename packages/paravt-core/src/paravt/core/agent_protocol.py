"""`AgentProtocol`: everything that must match a checkpoint's training or a paper's evaluation.

One named, versioned, JSON-serialisable value: the system prompt of each prompt mode, how the first
user turn shows the overview (timestamps or not, frame count, pixel budget), the question template,
how a tool result returns (a sub-agent's summary or the frames; one message per call or grouped; its
text), the crop's frames/fps/pixel bounds, what happens after the last tool turn (the last turn is
told to answer, or one extra forced-answer request with its own token limit), how the answer is
extracted, and the decoding budget (max_tokens, temperature, turns, calls per turn).

Two instances ship: `PARAVT_PROTOCOL` (`paravt`, what this project trains and evaluates with) and
`PAPER_PROTOCOL` (`paper`, the released evaluation driver of EvolvingLMMs-Lab/ParaVT, whose strings
live verbatim in `paravt.core.paper_protocol`). A trained checkpoint carries the protocol it was
trained with: `protocol.save(checkpoint_dir)` writes `agent_protocol.json` beside the weights and
`AgentProtocol.load(checkpoint_dir)` reads it back (None when the checkpoint records none).

One file because every method reads the fields of one frozen value (prompt layout, tool results,
the forced answer, answer extraction): the sub-specs, the class and its two instances belong
together; the released driver's strings are in `paravt.core.paper_protocol`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from paravt.core import paper_protocol as paper
from paravt.core.agent_config import AgentConfig, SamplingParams
from paravt.core.parser import Block, ToolCall
from paravt.core.prompts import (
    _AGENTIC_GENERAL,
    _AGENTIC_MINIMAL,
    _DIRECT,
    _REASONING,
    FINAL_ANSWER_NOTE,
    OPTION_LETTERS,
    PROMPT_MODES,
    THINK_PREFIX,
    PromptMode,
    timestamp_text,
    tool_response_message,
)
from paravt.core.protocol import (
    CropVideoArgs,
    Frame,
    ImagePart,
    Message,
    Part,
    TextPart,
    ToolOutput,
    crop_video_schema,
    parse_time_s,
)

PROTOCOL_FILE = "agent_protocol.json"
AnswerKind = Literal["mcq", "grounding", "open"]
ANSWER_KINDS: tuple[AnswerKind, ...] = ("mcq", "grounding", "open")
FrameSampling = Literal["paravt_tools", "qwen_vl_utils_0.0.14"]


@dataclass(frozen=True)
class VideoURL:
    """The whole video by reference (`file://...`), for servers that decode it themselves (the
    driver's `video_url` channel). Carried as an `ImagePart`'s image; the OpenAI engine sends it as
    a `video_url` part, other engines cannot."""

    url: str


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OverviewSpec(_Frozen):
    """How the first user turn shows the video."""

    num_frames: int = Field(64, ge=1, le=512, description="Overview frames (K).")
    sampling: FrameSampling = Field(
        "paravt_tools",
        description="Who picks and sizes the frames: paravt-tools' reader (evenly spaced, the "
        "tool's pixel budget) or qwen-vl-utils 0.0.14 `fetch_video(nframes=K)` (the driver's).",
    )
    min_pixels: int | None = Field(
        None, ge=1, description="Pixels per frame at least (None: the sampler's default)."
    )
    max_pixels: int | None = Field(
        None, ge=1, description="Pixels per frame at most (None: the sampler's default)."
    )
    channel: Literal["images", "video_url"] = Field(
        "images",
        description="images: the overview frames as images; video_url: the video file itself "
        "(`file://` URL) for the server to decode (the driver's --video_channel video_url).",
    )
    frame_timestamps: bool = Field(True, description="A `<t seconds>` text before each frame.")
    intro: str | None = Field(
        "{duration}Overview ({num_frames} frames):",
        description="Text before the frames ({duration} is 'The video is D seconds long. ' when "
        "known); None: frames only.",
    )
    question_prefix: str = Field("Question: ", description="Text put before the question part.")


class QuestionSpec(_Frozen):
    """How a question (and its options) becomes the question text."""

    mcq_template: str = Field(
        "{question}\n{options}",
        description="Multiple choice: {question}, {options} (one `L. option` per line) and "
        "{instruction}.",
    )
    option_template: str = "{letter}. {option}"
    mcq_instruction: dict[str, str] = Field(
        default_factory=dict, description="Per prompt mode; '' when the mode has none."
    )
    grounding_template: str | None = Field(
        None, description="Grounding questions over a bare caption ({caption}); None: as given."
    )
    video_path_suffix: str | None = Field(
        None,
        description="Appended in agentic modes unless the text already mentions a video path "
        "({video_name}: the file's base name).",
    )


class CropSpec(_Frozen):
    """How a crop_video call is read and which frames it returns."""

    call_reading: Literal["paravt", "driver"] = Field(
        "paravt",
        description="paravt: the strict parser (validated arguments, errors named to the model); "
        "driver: the released driver's reading (any JSON body, start/end aliases, missing end = "
        "start + missing_end_s, bad times read as 0).",
    )
    missing_end_s: float = Field(10.0, gt=0, description="driver reading: a missing end.")
    sampling: FrameSampling = "paravt_tools"
    fps: float | None = Field(None, gt=0, description="Frames per second of video (None: even).")
    max_frames: int = Field(16, ge=1, le=256)
    min_pixels: int = Field(784, ge=1)
    max_pixels: int = Field(50176, ge=1)


class ToolResultSpec(_Frozen):
    """How a call's result returns to the main agent."""

    form: Literal["subagent", "frames"] = "subagent"
    role: Literal["tool", "user"] = Field(
        "tool",
        description="tool: `tool` messages (the chat template / engine groups them); "
        "user: one user message per call.",
    )
    frame_timestamps: bool = True
    text: str | None = Field(
        None,
        description="user role: the text after a call's frames ({num_frames}, {start}, {end}: the "
        "requested window); None: paravt's `[S s - E s] note` before the frames.",
    )
    error_text: str | None = Field(None, description="user role: a failed call's message.")
    skipped_calls: Literal["error_message", "dropped"] = Field(
        "error_message",
        description="Calls not run (over max_parallel, invalid): told as errors, or left out.",
    )


class FinalTurnSpec(_Frozen):
    """What happens after the last tool turn."""

    mode: Literal["told_to_answer", "forced_request"] = Field(
        "told_to_answer",
        description="told_to_answer: the note follows the tool results before the last allowed "
        "turn, whose calls are not run; forced_request: after max_turns tool turns one more "
        "request with the note and its own max_tokens.",
    )
    note: dict[str, str] = Field(default_factory=dict, description="Per answer kind.")
    max_new_tokens: dict[str, int] = Field(
        default_factory=dict, description="forced_request: per answer kind."
    )


class AnswerSpec(_Frozen):
    extraction: Literal["answer_tag", "driver"] = Field(
        "answer_tag",
        description="answer_tag: the `<answer>` block; driver: the driver's extract_letter / "
        "extract_time_from_response on the final reply (its `<answer>` block first), handed to "
        "scorers as the letter alone or the span as `S - E`.",
    )
    grounding_format: str = Field(
        "{start:.1f} - {end:.1f}",
        description="How a grounding span is handed to a benchmark scorer (lmms-eval's Charades "
        "scorer parses `S - E`, not `[S, E]`).",
    )


class TransportSpec(_Frozen):
    """How images and sampling travel to an OpenAI-compatible server."""

    image_format: Literal["png", "jpeg"] = "png"
    jpeg_quality: int = Field(90, ge=1, le=100)
    minimal_body: bool = Field(
        False, description="Send only model, messages, max_tokens, temperature (no top_p, n)."
    )


class AgentProtocol(_Frozen):
    """One named, versioned agent protocol. See the module docstring."""

    name: str = Field(description="paravt, paper, or a custom name.")
    version: int = Field(1, ge=1)
    source: str = Field("", description="Where the protocol comes from.")
    prompt_mode: PromptMode = "agentic_general"
    grounding_prompt_mode: PromptMode | None = Field(
        None,
        description="The prompt mode of grounding questions (None: prompt_mode). The driver ran "
        "ParaVT-8B's Charades-STA under agentic_minimal; an explicitly chosen prompt mode clears it.",
    )
    grounding_channel: Literal["images", "video_url"] | None = Field(
        None,
        description="The overview channel of grounding questions asked of a server (None: "
        "overview.channel). The driver sent Charades-STA as video_url (the server decodes the "
        "video); a local checkpoint always takes images.",
    )
    system_prompts: dict[str, str | None] = Field(
        description="Per prompt mode: a str.format template over {schema}, {max_turns}, "
        "{max_parallel}; None: no system message."
    )
    tool_schema_json: str | None = Field(
        None, description="The crop_video schema shown; None: generated from CropVideoArgs."
    )
    include_video_path: bool = False
    think_prefix_modes: tuple[str, ...] = Field(
        (), description="Modes whose replies start with the assistant prefix `<think>\\n`."
    )
    single_turn_modes: tuple[str, ...] = ("direct", "reasoning")
    overview: OverviewSpec = OverviewSpec()
    question: QuestionSpec = QuestionSpec()
    crop: CropSpec = CropSpec()
    tool_result: ToolResultSpec = ToolResultSpec()
    final_turn: FinalTurnSpec = FinalTurnSpec()
    answer: AnswerSpec = AnswerSpec()
    transport: TransportSpec = TransportSpec()
    max_new_tokens: int = Field(2048, ge=1)
    subagent_max_new_tokens: int = Field(256, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    max_turns: int = Field(
        3,
        ge=1,
        description="told_to_answer: main-agent generations, the last one answers; "
        "forced_request: tool turns, then one forced request.",
    )
    max_parallel: int = Field(5, ge=1, description="crop_video calls run per turn at most.")
    max_context_tokens: int | None = Field(
        None,
        ge=1,
        description="Main-context tokens at most, prompt included (AgentConfig."
        "max_context_tokens); None: no limit. Recorded by training runs that had one, so a "
        "checkpoint is evaluated under the context it was trained in.",
    )

    # ---------------------------------------------------------------------------- persistence

    def save(self, checkpoint_dir: str | os.PathLike[str]) -> Path:
        """Write `agent_protocol.json` into `checkpoint_dir` (atomically); return its path."""
        directory = Path(checkpoint_dir)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / PROTOCOL_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, checkpoint_dir: str | os.PathLike[str]) -> AgentProtocol | None:
        """The protocol a checkpoint records, or None when it has no `agent_protocol.json`.

        Raises `ValueError` naming the file when it exists but is not a valid protocol."""
        path = Path(checkpoint_dir) / PROTOCOL_FILE
        if not path.is_file():
            return None
        try:
            return cls.model_validate(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, ValidationError) as exc:
            raise ValueError(
                f"{path} is not a valid agent protocol ({exc}); rewrite it with "
                "AgentProtocol.save(dir) or delete it to use the default protocol"
            ) from None

    def with_overrides(self, **changes: Any) -> AgentProtocol:
        """A validated copy with some top-level fields changed (e.g. `prompt_mode`, `max_turns`)."""
        unknown = sorted(set(changes) - set(type(self).model_fields))
        if unknown:
            raise ValueError(f"unknown protocol fields {unknown}; known: {list(self.model_fields)}")
        return type(self).model_validate({**self.model_dump(), **changes})

    # ---------------------------------------------------------------------------------- modes

    def for_question(self, kind: AnswerKind, *, served: bool = False) -> AgentProtocol:
        """This protocol as a question of `kind` is asked: grounding questions switch to
        `grounding_prompt_mode` when one is set, and, asked of a server (`served`), to
        `grounding_channel` when one is set."""
        if kind != "grounding":
            return self
        changes: dict[str, Any] = {}
        mode = self.grounding_prompt_mode
        if mode is not None and mode != self.prompt_mode:
            changes["prompt_mode"] = mode
        channel = self.grounding_channel
        if served and channel is not None and channel != self.overview.channel:
            changes["overview"] = self.overview.model_copy(update={"channel": channel})
        return self.with_overrides(**changes) if changes else self

    @property
    def uses_tools(self) -> bool:
        return self.prompt_mode not in self.single_turn_modes

    @property
    def assistant_prefix(self) -> str:
        return THINK_PREFIX if self.prompt_mode in self.think_prefix_modes else ""

    def tool_schema(self) -> str:
        if self.tool_schema_json is not None:
            return self.tool_schema_json
        return json.dumps(crop_video_schema(include_video_path=self.include_video_path))

    def system_prompt(self) -> str | None:
        """The system message of the protocol's prompt mode (None: none is sent)."""
        if self.prompt_mode not in self.system_prompts:
            raise ValueError(
                f"protocol {self.name!r} has no prompt for mode {self.prompt_mode!r}; its modes: "
                f"{', '.join(self.system_prompts)}"
            )
        template = self.system_prompts[self.prompt_mode]
        if template is None:
            return None
        schema = self.tool_schema()
        return template.format(
            schema=schema,
            tool_schema=schema,
            max_turns=self.max_turns,
            max_parallel=self.max_parallel,
        )

    # ------------------------------------------------------------------------------- question

    def format_question(
        self,
        question: str,
        options: Sequence[str] | None = None,
        *,
        kind: AnswerKind = "mcq",
    ) -> str:
        """The question text: options laid out with the mode's instruction; an MCQ whose text
        already lists its options plus the mode's instruction; the grounding template over a
        caption; or the question as given (`open`)."""
        q = self.question
        if options:
            lines = "\n".join(
                q.option_template.format(letter=letter, option=option)
                for letter, option in zip(OPTION_LETTERS, options)
            )
            instruction = q.mcq_instruction.get(self.prompt_mode, "")
            text = q.mcq_template.format(
                question=question.rstrip(), options=lines, instruction=instruction
            )
            return text.rstrip("\n") if not instruction else text
        if kind == "mcq":  # options already in the text: the mode's instruction follows
            instruction = q.mcq_instruction.get(self.prompt_mode, "")
            return f"{question}\n{instruction}" if instruction else question
        if kind == "grounding" and q.grounding_template is not None:
            return q.grounding_template.format(caption=question)
        return question

    def question_text(self, text: str, video_name: str | None) -> str:
        """`text` plus the video-path suffix where the protocol adds one (agentic modes)."""
        suffix = self.question.video_path_suffix
        if suffix and self.uses_tools and "video path" not in text.lower():
            return text + suffix.format(video_name=video_name or "")
        return text

    def build_main_prompt(
        self,
        question_text: str,
        overview: Sequence[Frame],
        *,
        duration_s: float | None = None,
        video_name: str | None = None,
        video_path: str | None = None,
    ) -> list[Message]:
        """The first prompt: the system message (if any), then one user message with the
        overview (or, on the `video_url` channel, the video at `video_path`) and the question
        text (already formatted, see `format_question`)."""
        o = self.overview
        content: list[Part] = []
        if o.channel == "video_url":
            if not video_path:
                raise ValueError("the video_url channel needs the video's path")
            url = "file://" + os.path.abspath(video_path.removeprefix("file://"))
            content.append(ImagePart(VideoURL(url)))
            overview = []
        if o.intro is not None:
            duration = (
                f"The video is {duration_s:.1f} seconds long. " if duration_s is not None else ""
            )
            content.append(TextPart(o.intro.format(duration=duration, num_frames=len(overview))))
        for frame in overview:
            if o.frame_timestamps:
                content.append(TextPart(timestamp_text(frame.timestamp_s)))
            content.append(ImagePart(frame.image))
        prefix = "" if question_text.startswith(o.question_prefix) else o.question_prefix
        content.append(TextPart(prefix + self.question_text(question_text, video_name)))
        messages: list[Message] = []
        system = self.system_prompt()
        if system is not None:
            messages.append(Message("system", system))
        messages.append(Message("user", content))
        return messages

    # ---------------------------------------------------------------------------- tool calls

    def read_calls(self, response: str) -> list[ToolCall] | None:
        """The calls of a reply under the driver's reading (None: use the strict parser's).

        Each call's `args` is a `CropVideoArgs` built without validation from the driver's
        (start, end) reading: the toolbox gets the window as the driver would pass it and must
        clamp it itself; `CropVideoArgs` never vouches for these values. A call the driver would
        crash on (not a JSON object) keeps `args=None` and its error."""
        if self.crop.call_reading != "driver":
            return None
        calls: list[ToolCall] = []
        for raw in paper.driver_tool_calls(response):
            block = Block("tool_call", 0, 0, 0, 0, True, json.dumps(raw, default=str)[:2000])
            arguments = raw.get("arguments", {}) if isinstance(raw, dict) else {}
            name = raw.get("name") if isinstance(raw, dict) else None
            try:
                start, end = paper.driver_window(raw, self.crop.missing_end_s)
            except TypeError as exc:
                calls.append(
                    ToolCall(
                        name if isinstance(name, str) else None,
                        {},
                        block,
                        "tool_call",
                        error=f"the driver cannot read this call: {exc}",
                    )
                )
                continue
            args = CropVideoArgs.model_construct(start_time=start, end_time=end, num_frames=None)
            calls.append(
                ToolCall(
                    name if isinstance(name, str) else None,
                    dict(arguments) if isinstance(arguments, dict) else {},
                    block,
                    "tool_call",
                    args=args,
                )
            )
        return calls

    def tool_messages(
        self,
        results: Sequence[tuple[CropVideoArgs | None, ToolOutput, str | None, bool]],
    ) -> list[Message]:
        """The messages returning one turn's calls, in call order. Each entry is
        (arguments, output, sub-agent summary, executed); a call that was not executed carries
        `ToolOutput.failure(why)` and is told or dropped as `tool_result.skipped_calls` says."""
        spec = self.tool_result
        messages: list[Message] = []
        for args, output, summary, executed in results:
            if not executed and spec.skipped_calls == "dropped":
                continue
            if spec.role == "tool":
                messages.append(tool_response_message(output, summary=summary))
                continue
            start = args.start_time if args is not None else 0.0
            end = args.end_time if args is not None else 0.0
            if output.error is not None or (spec.form == "frames" and not output.frames):
                text = (spec.error_text or "{start:.1f}-{end:.1f}: {error}").format(
                    start=start, end=end, error=output.error or "no frames"
                )
                messages.append(Message("user", text))
                continue
            note = (spec.text or "").format(num_frames=len(output.frames), start=start, end=end)
            if spec.form == "subagent":
                messages.append(Message("user", (note + "\n" if note else "") + (summary or "")))
                continue
            parts: list[Part] = []
            for frame in output.frames:
                if spec.frame_timestamps:
                    parts.append(TextPart(timestamp_text(frame.timestamp_s)))
                parts.append(ImagePart(frame.image))
            parts.append(TextPart(note))
            messages.append(Message("user", parts))
        return messages

    # ---------------------------------------------------------------------------- last turn

    def final_note(self, kind: AnswerKind = "mcq") -> str | None:
        """The text that tells the agent to answer (after the last tool turn)."""
        notes = self.final_turn.note
        return notes.get(kind) or notes.get("mcq") or None

    def final_max_new_tokens(self, kind: AnswerKind = "mcq") -> int | None:
        """forced_request: the forced request's max_tokens; otherwise None (the turn's own)."""
        if self.final_turn.mode != "forced_request" or not self.uses_tools:
            return None
        limits = self.final_turn.max_new_tokens
        return limits.get(kind) or limits.get("mcq") or self.max_new_tokens

    def runtime_max_turns(self) -> int:
        """Main-agent generations at most, as the runtime counts them."""
        if not self.uses_tools:
            return 1
        return self.max_turns + (1 if self.final_turn.mode == "forced_request" else 0)

    def agent_config(self, **overrides: Any) -> AgentConfig:
        """The core runtime's `AgentConfig` for this protocol (keyword overrides win)."""
        values: dict[str, Any] = {
            "max_turns": self.runtime_max_turns(),
            "max_parallel": self.max_parallel,
            "max_context_tokens": self.max_context_tokens,
            "tool_response": self.tool_result.form,
            "think_prefix": bool(self.assistant_prefix),
            "max_num_frames": self.crop.max_frames,
            "sampling": SamplingParams(
                max_new_tokens=self.max_new_tokens, temperature=self.temperature
            ),
            "subagent_sampling": SamplingParams(
                max_new_tokens=self.subagent_max_new_tokens, temperature=self.temperature
            ),
        }
        values.update(overrides)
        return AgentConfig(**values)

    # -------------------------------------------------------------------------------- answers

    def extract_answer(self, final_text: str, parsed_answer: str | None, kind: AnswerKind) -> str:
        """What a benchmark scorer receives, from the final reply.

        answer_tag: the `<answer>` content (else the reply); a grounding span is rewritten in
        `answer.grounding_format`. driver: what the driver scores, so that every scorer grades
        it alike (lmms-eval's read the whole reply, letters of the reasoning included): the
        letter of its `extract_letter` (its `<answer>` block first), '' when that is no option
        letter; the span of its `extract_time_from_response` as `S - E`, '' when there is none or
        it is empty or reversed (the driver's IoU of such a span is 0; lmms-eval's Charades
        scorer would reorder it); an open answer as under answer_tag."""
        if self.answer.extraction == "driver" and kind == "mcq":
            letter = paper.driver_letter(final_text)
            return letter if len(letter) == 1 and letter in paper.OPTION_LETTERS else ""
        if self.answer.extraction == "driver" and kind == "grounding":
            span = paper.driver_span(final_text)
            if span is None or not span[0] < span[1]:
                return ""
            return f"{_seconds(span[0])} - {_seconds(span[1])}"
        text = parsed_answer if parsed_answer is not None else final_text
        if kind == "grounding":
            found = _span_of(text)
            if found is not None:
                return self.answer.grounding_format.format(start=found[0], end=found[1])
        return text

    def driver_prediction(self, final_text: str, kind: AnswerKind) -> str | None:
        """The driver's prediction: an option letter, or `S-E` for grounding (None: no span)."""
        if kind == "grounding":
            span = paper.driver_span(final_text)
            return None if span is None else f"{span[0]:.1f}-{span[1]:.1f}"
        return paper.driver_letter(final_text)


def _seconds(value: float) -> str:
    """A time in seconds in plain decimal notation, no precision lost (`12.0`, `8.25`)."""
    text = repr(float(value))
    return text if "e" not in text else f"{value:.6f}".rstrip("0").rstrip(".")


_TIME_TOKEN = re.compile(r"\d+(?::\d+){0,2}(?:\.\d+)?")


def _span_of(text: str) -> tuple[float, float] | None:
    """The first two times of an answer (`[12.0, 20.0]`, `00:12 - 00:20`) as an ordered span, or
    None (fewer than two times, or not start < end)."""
    times: list[float] = []
    for match in _TIME_TOKEN.finditer(text[:2000]):
        try:
            times.append(parse_time_s(match.group(0)))
        except ValueError:
            continue
        if len(times) == 2:
            break
    if len(times) < 2 or not times[0] < times[1]:
        return None
    return times[0], times[1]


# ------------------------------------------------------------------------------------ instances

PARAVT_PROTOCOL = AgentProtocol(
    name="paravt",
    version=1,
    source="paravt.core.prompts (this project's training and evaluation protocol)",
    system_prompts={
        "direct": _DIRECT,
        "reasoning": _REASONING,
        "agentic_general": _AGENTIC_GENERAL,
        "agentic_minimal": _AGENTIC_MINIMAL,
    },
    think_prefix_modes=("reasoning", "agentic_general", "agentic_minimal"),
    overview=OverviewSpec(),
    question=QuestionSpec(
        grounding_template='When does this happen in the video: "{caption}"? Answer with its start '
        "and end times in seconds."
    ),
    crop=CropSpec(),
    tool_result=ToolResultSpec(form="subagent", role="tool"),
    final_turn=FinalTurnSpec(mode="told_to_answer", note={"mcq": FINAL_ANSWER_NOTE}),
    answer=AnswerSpec(extraction="answer_tag"),
)

PAPER_PROTOCOL = AgentProtocol(
    name="paper",
    # 2: grounding questions in the driver's Charades mode; answers as the driver's. 3: served
    # grounding questions over the driver's Charades channel (video_url)
    version=3,
    source="EvolvingLMMs-Lab/ParaVT@cf55249 paravt/eval/driver.py + utils.py (Apache-2.0)",
    grounding_prompt_mode=paper.PAPER_GROUNDING_PROMPT_MODE,
    grounding_channel=paper.PAPER_GROUNDING_CHANNEL,
    system_prompts={
        "direct": paper.PAPER_DIRECT_SYSTEM,
        "reasoning": paper.PAPER_REASONING_SYSTEM,
        # The driver formats these with str.format(tool_schema=...): kept as its templates.
        "agentic_general": paper.PAPER_GENERAL_AGENTIC_SYSTEM,
        "agentic_minimal": paper.PAPER_MINIMAL_AGENTIC_SYSTEM,
    },
    tool_schema_json=paper.PAPER_TOOL_SCHEMA,
    include_video_path=True,
    think_prefix_modes=(),
    overview=OverviewSpec(
        num_frames=64,
        sampling="qwen_vl_utils_0.0.14",
        frame_timestamps=False,
        intro=None,
        question_prefix="",
    ),
    question=QuestionSpec(
        mcq_template=paper.PAPER_MCQ_TEMPLATE,
        mcq_instruction={
            "direct": paper.PAPER_MCQ_INSTRUCTION_DIRECT,
            "reasoning": paper.PAPER_MCQ_INSTRUCTION,
            "agentic_general": paper.PAPER_MCQ_INSTRUCTION,
            "agentic_minimal": paper.PAPER_MCQ_INSTRUCTION,
        },
        grounding_template=paper.PAPER_GROUNDING_TEMPLATE,
        video_path_suffix=paper.PAPER_VIDEO_PATH_SUFFIX,
    ),
    crop=CropSpec(
        call_reading="driver",
        missing_end_s=10.0,
        sampling="qwen_vl_utils_0.0.14",
        fps=1.0,
        max_frames=16,
        min_pixels=784,
        max_pixels=50176,
    ),
    tool_result=ToolResultSpec(
        form="frames",
        role="user",
        frame_timestamps=False,
        text=paper.PAPER_TOOL_RESPONSE,
        error_text=paper.PAPER_TOOL_ERROR,
        skipped_calls="dropped",
    ),
    final_turn=FinalTurnSpec(
        mode="forced_request",
        note={"mcq": paper.PAPER_FORCE_MCQ, "grounding": paper.PAPER_FORCE_GROUNDING},
        max_new_tokens={
            "mcq": paper.PAPER_FORCE_MCQ_MAX_TOKENS,
            "grounding": paper.PAPER_FORCE_GROUNDING_MAX_TOKENS,
        },
    ),
    answer=AnswerSpec(extraction="driver"),
    # utils.pil_to_b64: JPEG quality 85; _completion_with_retry: model, messages, max_tokens, temp.
    transport=TransportSpec(image_format="jpeg", jpeg_quality=85, minimal_body=True),
    max_new_tokens=paper.PAPER_MAX_TOKENS,
    temperature=0.0,
    max_turns=3,
    max_parallel=5,
)

PROTOCOLS: dict[str, AgentProtocol] = {"paravt": PARAVT_PROTOCOL, "paper": PAPER_PROTOCOL}


def get_protocol(name: str, prompt_mode: PromptMode | None = None) -> AgentProtocol:
    """A shipped protocol by name (`paravt`, `paper`), optionally in another prompt mode."""
    if name not in PROTOCOLS:
        raise ValueError(f"unknown agent protocol {name!r}; known: {', '.join(PROTOCOLS)}")
    protocol = PROTOCOLS[name]
    if prompt_mode is not None and prompt_mode != protocol.prompt_mode:
        if prompt_mode not in PROMPT_MODES:
            raise ValueError(f"prompt mode {prompt_mode!r} is not one of {PROMPT_MODES}")
        protocol = protocol.with_overrides(prompt_mode=prompt_mode)
    return protocol
