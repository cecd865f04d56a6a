"""paravt.core: the ParaVT protocol (tool schema, parser, prompts) and the async agent runtime.

Light by design: importing it needs only pydantic. Engines live in `paravt.core.engines` behind the
`hf`, `openai` and `sglang` extras and import their heavy dependencies lazily.
"""

from importlib.metadata import PackageNotFoundError, version

from paravt.core.agent_protocol import (
    PAPER_PROTOCOL,
    PARAVT_PROTOCOL,
    PROTOCOLS,
    AgentProtocol,
    get_protocol,
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
    PROMPT_MODES,
    THINK_PREFIX,
    PromptMode,
    build_main_prompt,
    build_subagent_prompt,
    render_frames,
    timestamp_text,
)
from paravt.core.protocol import (
    CROP_VIDEO,
    CropVideoArgs,
    Frame,
    ImagePart,
    Message,
    TextPart,
    ToolOutput,
    crop_video_schema,
    parse_time_s,
)
from paravt.core.runtime import (
    AgentConfig,
    AgentTask,
    CallRecord,
    Encoded,
    Engine,
    Episode,
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
    "CROP_VIDEO",
    "PAPER_PROTOCOL",
    "PARAVT_PROTOCOL",
    "PROMPT_MODES",
    "PROTOCOLS",
    "THINK_PREFIX",
    "AgentConfig",
    "AgentProtocol",
    "AgentTask",
    "Block",
    "CallRecord",
    "CropVideoArgs",
    "Encoded",
    "Engine",
    "Episode",
    "Frame",
    "Generated",
    "ImagePart",
    "Issue",
    "IssueKind",
    "Message",
    "ParsedResponse",
    "PromptMode",
    "SamplingParams",
    "TagSpan",
    "TextPart",
    "ToolCall",
    "ToolOutput",
    "Toolbox",
    "Trajectory",
    "TurnRecord",
    "__version__",
    "build_main_prompt",
    "build_subagent_prompt",
    "crop_video_schema",
    "get_protocol",
    "parse_response",
    "parse_time_s",
    "render_frames",
    "run_episodes",
    "run_episodes_sync",
    "timestamp_text",
]
