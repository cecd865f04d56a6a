"""paravt-core without torch: parse a response, validate its calls, run an episode on a stand-in."""

from paravt.core import (
    AgentConfig,
    AgentTask,
    Frame,
    build_main_prompt,
    parse_response,
    run_episodes_sync,
)
from paravt.core.testing import END_OF_TURN, ScriptedEngine, StaticToolbox

response = (
    "<think>The overview shows a checkerboard near 40 s; look right after it.</think>"
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": "0:40", "end_time": 50}}</tool_call>'
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 50, "end_time": 40}}</tool_call>'
)
parsed = parse_response(response)
for call in parsed.tool_calls:
    print("call:", call.args if call.ok else f"rejected ({call.error})")


def respond(trajectory):  # a scripted model: one parallel turn, then an answer
    if trajectory.role == "subagent":
        return "<answer>A red square appears at 43 s.</answer>" + END_OF_TURN
    first = not any(m.role == "assistant" for m in trajectory.messages)
    text = response.removeprefix("<think>") if first else "Red.</think><answer>red</answer>"
    return text + END_OF_TURN


messages = build_main_prompt("What colour is the shape?", [Frame("frame", 5.0)], duration_s=120)
task = AgentTask("demo", messages, StaticToolbox(duration_s=120), "What colour is the shape?")
(episode,) = run_episodes_sync([task], ScriptedEngine(respond), AgentConfig(max_turns=3))
print("answer:", episode.answer, "| calls per turn:", episode.calls_per_turn)
assert episode.answer == "red" and episode.num_tool_calls == 1 and episode.num_tool_errors == 1
