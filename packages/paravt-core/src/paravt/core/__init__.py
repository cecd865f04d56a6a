"""paravt.core: the ParaVT protocol (tool schema, parser, prompts) and the async agent runtime.

Light by design: importing it needs only pydantic. Engines live in `paravt.core.engines` behind the
`hf`, `openai` and `sglang` extras and import their heavy dependencies lazily.
"""

from importlib.metadata import PackageNotFoundError, version

from paravt.core.agent_config import Dispatch, Schedule, ToolResponseMode
from paravt.core.agent_protocol import (
    ANSWER_KINDS,
    PAPER_PROTOCOL,
    PARAVT_PROTOCOL,
    PROTOCOL_FILE,
    PROTOCOLS,
    AgentProtocol,
    AnswerKind,
    get_protocol,
)
from paravt.core.cli_style import add_debug, one_line, run_command, style
from paravt.core.paper_protocol import (
    PAPER_GROUNDING_TEMPLATE,
    PAPER_MCQ_INSTRUCTION,
    PAPER_SUBTITLE_PREFIX,
    driver_iou,
    driver_letter,
    driver_span,
)
from paravt.core.parser import (
    Block,
    Issue,
    IssueKind,
    ParsedResponse,
    TagSpan,
    ToolCall,
    parse_response,
)
from paravt.core.prompts import (
    OPTION_LETTERS,
    PROMPT_MODES,
    THINK_PREFIX,
    PromptMode,
    build_main_prompt,
    build_subagent_prompt,
    format_question,
    render_frames,
    system_prompt,
    timestamp_text,
    tool_response_message,
)
from paravt.core.protocol import (
    CROP_VIDEO,
    DEFAULT_MAX_NUM_FRAMES,
    CropVideoArgs,
    Frame,
    ImagePart,
    Message,
    Part,
    TextPart,
    ToolOutput,
    crop_video_schema,
    format_validation_error,
    parse_time_s,
)
from paravt.core.runtime import (
    AgentConfig,
    AgentTask,
    CallRecord,
    Encoded,
    Engine,
    Episode,
    FinishReason,
    Generated,
    SamplingParams,
    Toolbox,
    Trajectory,
    TurnRecord,
    run_episodes,
    run_episodes_sync,
)

try:
    __version__ = version("paravt-core")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0+unknown"

__all__ = [
    "ANSWER_KINDS",
    "CROP_VIDEO",
    "DEFAULT_MAX_NUM_FRAMES",
    "OPTION_LETTERS",
    "PAPER_GROUNDING_TEMPLATE",
    "PAPER_MCQ_INSTRUCTION",
    "PAPER_PROTOCOL",
    "PAPER_SUBTITLE_PREFIX",
    "PARAVT_PROTOCOL",
    "PROMPT_MODES",
    "PROTOCOLS",
    "PROTOCOL_FILE",
    "THINK_PREFIX",
    "AgentConfig",
    "AgentProtocol",
    "AgentTask",
    "AnswerKind",
    "Block",
    "CallRecord",
    "CropVideoArgs",
    "Dispatch",
    "Encoded",
    "Engine",
    "Episode",
    "FinishReason",
    "Frame",
    "Generated",
    "ImagePart",
    "Issue",
    "IssueKind",
    "Message",
    "ParsedResponse",
    "Part",
    "PromptMode",
    "SamplingParams",
    "Schedule",
    "TagSpan",
    "TextPart",
    "ToolCall",
    "ToolOutput",
    "ToolResponseMode",
    "Toolbox",
    "Trajectory",
    "TurnRecord",
    "__version__",
    "add_debug",
    "build_main_prompt",
    "build_subagent_prompt",
    "crop_video_schema",
    "driver_iou",
    "driver_letter",
    "driver_span",
    "format_question",
    "format_validation_error",
    "get_protocol",
    "one_line",
    "parse_response",
    "parse_time_s",
    "render_frames",
    "run_command",
    "run_episodes",
    "run_episodes_sync",
    "style",
    "system_prompt",
    "timestamp_text",
    "tool_response_message",
]
