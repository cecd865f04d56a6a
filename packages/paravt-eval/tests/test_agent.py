"""EvalAgent runs the core runtime per sample and turns episodes into traces (no model needed)."""

from __future__ import annotations

import json

import pytest

from paravt.core import Frame
from paravt.core.testing import ScriptedEngine, StaticToolbox
from paravt.eval.agent import EvalAgent, VideoQuestion
from paravt.eval.config import EvalConfig, parse_eval_config
from paravt.eval.traces import TraceWriter, read_traces

TWO_CALLS = (
    "Look closer.</think>"
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 0, "end_time": 10}}</tool_call>'
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 50, "end_time": 90}}</tool_call>'
)


def respond(traj):
    if traj.role == "subagent":
        return "<answer>a red square at 5 s</answer>"
    turns = sum(1 for m in traj.messages if m.role == "assistant")
    return TWO_CALLS if turns == 0 else "It was red.</think><answer>B</answer>"


class FakeSource:
    """Overview frames and a StaticToolbox per video; a video named 'missing' fails to open."""

    def __init__(self, duration_s: float = 60.0) -> None:
        self.duration_s = duration_s
        self.toolboxes: dict[str, StaticToolbox] = {}

    def overview(self, video, num_frames):
        if video == "missing":
            raise FileNotFoundError("missing: no such video")
        step = self.duration_s / num_frames
        return self.duration_s, [Frame(("img", i), step * (i + 0.5)) for i in range(num_frames)]

    def toolbox(self, video):
        return self.toolboxes.setdefault(video, StaticToolbox(duration_s=self.duration_s))


@pytest.fixture
def config(tmp_path):
    # replies in paravt's form (sub-agent summaries): this project's protocol, named
    return EvalConfig(pretrained=str(tmp_path), protocol="paravt", main_nframes=4, batch_size=2)


def test_a_parallel_turn_is_traced_with_windows_summaries_and_the_answer(config):
    source = FakeSource()
    agent = EvalAgent(config, engine=ScriptedEngine(respond), source=source)
    [trace] = agent.run([VideoQuestion("k", "v.mp4", "What colour?", options=["blue", "red"])])
    assert trace.error is None
    assert trace.answer == "B" and trace.response == "B"
    assert trace.overview_frames == 4 and trace.duration_s == 60.0
    first = trace.turns[0]
    assert [c["executed"] for c in first["calls"]] == [True, True]
    # the second window is clamped to the 60 s video by the toolbox, and reported as read
    assert [c["window_s"] for c in first["calls"]] == [[0.0, 10.0], [50.0, 60.0]]
    assert all(c["summary"] == "a red square at 5 s" for c in first["calls"])
    assert trace.num_tool_calls == 2 and trace.used_tool
    # both calls of the turn reached the toolbox together
    assert [len(batch) for batch in source.toolboxes["v.mp4"].calls] == [2]


def test_an_answer_cut_by_the_context_window_is_traced_and_counted_as_truncated(tmp_path):
    # ScriptedEngine counts one token per character: the prompt and the calling turn fit in
    # this window, the two tool responses do not, so the episode ends unanswered
    source = FakeSource()
    free = EvalAgent(
        EvalConfig(pretrained=str(tmp_path), protocol="paravt", main_nframes=4),
        engine=ScriptedEngine(respond),
        source=source,
    )
    [whole] = free.run([VideoQuestion("k", "v.mp4", "What colour?")])
    assert whole.answer == "B" and not whole.truncated
    calling_turn_ends = whole.episode.main.loss_mask.index(1) + len(TWO_CALLS) + 5
    config = EvalConfig(
        pretrained=str(tmp_path),
        protocol="paravt",
        main_nframes=4,
        max_context_tokens=calling_turn_ends + 10,
    )
    agent = EvalAgent(config, engine=ScriptedEngine(respond), source=source)
    [cut] = agent.run([VideoQuestion("k", "v.mp4", "What colour?")])
    assert cut.truncated and cut.answer is None and cut.num_tool_calls == 2
    writer = TraceWriter(tmp_path / "traces.jsonl")
    writer.write([cut, whole])
    assert json.loads(writer.summary_path.read_text())["ask"]["truncated"] == 1
    assert read_traces(writer.path)[0]["truncated"] is True


def test_sequential_dispatch_runs_one_call_per_turn(tmp_path):
    config = EvalConfig(
        pretrained=str(tmp_path), protocol="paravt", main_nframes=4, dispatch="sequential"
    )
    source = FakeSource()
    agent = EvalAgent(config, engine=ScriptedEngine(respond), source=source)
    [trace] = agent.run([VideoQuestion("k", "v.mp4", "What colour?")])
    calls = trace.turns[0]["calls"]
    assert [c["executed"] for c in calls] == [True, False]
    assert "sequential" in calls[1]["error"]
    assert trace.num_tool_calls == 1


def test_a_sample_whose_video_cannot_be_read_is_errored_not_dropped(config):
    agent = EvalAgent(config, engine=ScriptedEngine(respond), source=FakeSource())
    traces = agent.run(
        [VideoQuestion("a", "missing", "q?", doc_id=0), VideoQuestion("b", "v.mp4", "q?", doc_id=1)]
    )
    assert [t.doc_id for t in traces] == [0, 1]
    assert traces[0].error is not None and "missing" in traces[0].error
    assert traces[0].response == ""
    assert traces[1].error is None and traces[1].answer == "B"


def test_an_engine_failure_on_one_sample_does_not_lose_the_batch(config):
    def flaky(traj):
        if any("poison" in m.text for m in traj.messages):
            raise RuntimeError("engine exploded")
        return respond(traj)

    agent = EvalAgent(config, engine=ScriptedEngine(flaky), source=FakeSource())
    traces = agent.run([VideoQuestion("a", "v.mp4", "poison?"), VideoQuestion("b", "w.mp4", "q?")])
    assert "engine exploded" in traces[0].error
    assert traces[1].error is None and traces[1].answer == "B"


def test_direct_mode_answers_in_one_turn_without_tools(tmp_path):
    config = EvalConfig(
        pretrained=str(tmp_path), protocol="paravt", main_nframes=2, prompt_mode="direct"
    )
    agent = EvalAgent(config, engine=ScriptedEngine(lambda t: TWO_CALLS), source=FakeSource())
    [trace] = agent.run([VideoQuestion("k", "v.mp4", "q?")])
    assert len(trace.turns) == 1
    assert trace.num_tool_calls == 0
    assert trace.turns[0]["calls"][0]["error"] == "not executed: no tool turns left"
    assert config.agent_config().think_prefix is False


def test_the_trace_writer_keeps_a_per_task_summary_consistent_with_the_traces(config, tmp_path):
    agent = EvalAgent(config, engine=ScriptedEngine(respond), source=FakeSource())
    samples = [
        VideoQuestion("a", "v.mp4", "q?", task="t1", doc_id=0),
        VideoQuestion("b", "missing", "q?", task="t1", doc_id=1),
    ]
    writer = TraceWriter(tmp_path / "traces.jsonl", protocol=config.protocol_line())
    writer.write(agent.run(samples))
    rows = read_traces(writer.path)
    assert [r["doc_id"] for r in rows] == [0, 1]
    summary = json.loads(writer.summary_path.read_text())
    reason = "could not prepare the sample: FileNotFoundError"
    assert summary["t1"] == {
        "samples": 2,
        "avg_tool_calls": (rows[0]["num_tool_calls"] + rows[1]["num_tool_calls"]) / 2,
        "tool_usage_rate": 0.5,
        "errored": 1,
        "truncated": 0,
        "errors": {reason: {"count": 1, "example": f"doc 1: {rows[1]['error']}"}},
        "protocol": config.protocol_line(),
    }
    # the errored sample is handed to its scorer as an empty answer (wrong), and said why
    assert rows[1]["response"] == "" and "missing" in rows[1]["error"]
    assert writer.error_lines() == [
        f"t1: 1 of 2 samples errored (scored wrong): {reason} (e.g. doc 1: {rows[1]['error']})"
    ]


def test_model_arguments_are_validated_with_errors_that_name_the_fix(tmp_path):
    with pytest.raises(ValueError, match="not both"):
        parse_eval_config({"pretrained": str(tmp_path), "base_url": "http://x/v1", "model": "m"})
    with pytest.raises(ValueError, match="no model"):
        parse_eval_config({})
    with pytest.raises(ValueError, match="not a directory"):
        parse_eval_config({"pretrained": str(tmp_path / "nope")})
    with pytest.raises(ValueError, match=r"max_turn: unknown argument \(known: .*max_turns"):
        parse_eval_config({"pretrained": str(tmp_path), "max_turn": 3})
    with pytest.raises(ValueError, match="dispatch"):
        parse_eval_config({"pretrained": str(tmp_path), "dispatch": "both"})
    with pytest.raises(ValueError, match="needs model"):
        parse_eval_config({"base_url": "http://localhost:8000/v1"})


def test_what_carries_no_protocol_is_evaluated_under_the_papers(tmp_path):
    from paravt.core import PAPER_PROTOCOL

    # a released checkpoint (no agent_protocol.json) and a served model: the paper protocol
    released = EvalConfig(pretrained=str(tmp_path))
    assert released.resolved_protocol() == PAPER_PROTOCOL
    assert released.protocol_line() == (
        f"protocol: paper v3 (no recorded protocol in {tmp_path}); prompt mode agentic_general, "
        "grounding questions agentic_minimal"
    )
    served = EvalConfig(base_url="http://h:8000/v1", model="ParaVT-8B")
    assert served.resolved_protocol() == PAPER_PROTOCOL
    assert served.protocol_line() == (
        "protocol: paper v3 (no recorded protocol in served model ParaVT-8B at http://h:8000/v1); "
        "prompt mode agentic_general, grounding questions agentic_minimal over the video_url "
        "channel"
    )
    # asked for: said so; a prompt mode given applies to grounding questions too
    asked = EvalConfig(base_url="http://h/v1", model="m", protocol="paper", prompt_mode="direct")
    assert asked.protocol_line("--protocol ") == (
        "protocol: paper v3 (--protocol paper); prompt mode direct, grounding questions over the "
        "video_url channel"
    )
    assert asked.resolved_protocol().for_question("grounding").prompt_mode == "direct"
    # a channel given applies to every question
    images = EvalConfig(base_url="http://h/v1", model="m", video_channel="images")
    assert images.resolved_protocol().for_question("grounding", served=True).overview.channel == (
        "images"
    )
    assert EvalConfig(pretrained=str(tmp_path), protocol="paravt").protocol_line() == (
        "protocol: paravt v1 (protocol=paravt); prompt mode agentic_general"
    )


def test_a_checkpoint_that_records_its_protocol_is_evaluated_under_it(tmp_path):
    from paravt.core import PAPER_PROTOCOL, PARAVT_PROTOCOL

    PARAVT_PROTOCOL.save(tmp_path / "ours")
    ours = EvalConfig(pretrained=str(tmp_path / "ours"))
    assert ours.resolved_protocol() == PARAVT_PROTOCOL
    assert ours.protocol_line() == (
        f"protocol: paravt v1 (checkpoint records it: {tmp_path / 'ours' / 'agent_protocol.json'}); "
        "prompt mode agentic_general"
    )
    recorded = PAPER_PROTOCOL.with_overrides(prompt_mode="agentic_minimal", max_turns=2)
    recorded.save(tmp_path)
    config = EvalConfig(pretrained=str(tmp_path))
    assert config.resolved_protocol() == recorded
    assert config.agent_config().max_turns == 3  # 2 tool turns + the forced request
    # flags override single fields; protocol= overrides the recorded one
    assert EvalConfig(pretrained=str(tmp_path), max_turns=3).resolved_protocol().max_turns == 3
    assert EvalConfig(pretrained=str(tmp_path), protocol="paravt").resolved_protocol().name == (
        "paravt"
    )
    assert (
        EvalConfig(base_url="http://x/v1", model="m", protocol=str(tmp_path)).resolved_protocol()
        == recorded
    )
    with pytest.raises(ValueError, match="neither paravt nor paper"):
        parse_eval_config({"pretrained": str(tmp_path), "protocol": "papr"})

    # a context window the checkpoint was trained in is evaluated too; a flag lifts or sets it
    (tmp_path / "ctx").mkdir()
    recorded.with_overrides(max_context_tokens=496).save(tmp_path / "ctx")
    assert EvalConfig(pretrained=str(tmp_path / "ctx")).agent_config().max_context_tokens == 496
    lifted = EvalConfig(pretrained=str(tmp_path / "ctx"), max_context_tokens=4096)
    assert lifted.agent_config().max_context_tokens == 4096


def test_the_video_url_channel_is_for_servers_only(tmp_path):
    with pytest.raises(ValueError, match="video_url hands the video file to a server"):
        parse_eval_config({"pretrained": str(tmp_path), "video_channel": "video_url"})
    config = parse_eval_config(
        {"base_url": "http://x/v1", "model": "m", "protocol": "paper", "video_channel": "video_url"}
    )
    assert config.resolved_protocol().overview.channel == "video_url"


def test_local_checkpoints_load_in_bfloat16_on_cuda_unless_told_otherwise(tmp_path):
    assert EvalConfig(pretrained=str(tmp_path), device="cuda").torch_dtype() == "bfloat16"
    assert EvalConfig(pretrained=str(tmp_path), device="cuda:1").torch_dtype() == "bfloat16"
    assert EvalConfig(pretrained=str(tmp_path)).torch_dtype() is None  # CPU: transformers' default
    assert (
        EvalConfig(pretrained=str(tmp_path), device="cuda", dtype="float32").torch_dtype()
        == "float32"
    )


def test_the_recorded_protocols_crop_bounds_reach_the_crop_tool(tmp_path):
    from paravt.core import PARAVT_PROTOCOL
    from paravt.core.testing import ScriptedEngine

    data = PARAVT_PROTOCOL.model_dump()
    data["crop"].update(max_frames=4, fps=2.0, max_pixels=4096)
    type(PARAVT_PROTOCOL).model_validate(data).save(tmp_path)
    agent = EvalAgent(EvalConfig(pretrained=str(tmp_path)), engine=ScriptedEngine(respond))
    crop = agent.source.reader.config
    assert (crop.max_frames, crop.fps, crop.max_pixels) == (4, 2.0, 4096)
    # a model argument still wins
    agent = EvalAgent(
        EvalConfig(pretrained=str(tmp_path), max_crop_frames=8), engine=ScriptedEngine(respond)
    )
    assert agent.source.reader.config.max_frames == 8


def test_under_the_paper_protocol_grounding_questions_use_the_drivers_charades_mode(tmp_path):
    """One batch, both kinds: MCQ under agentic_general, grounding under agentic_minimal; the
    scorer gets the driver's letter and span, not the reply."""
    from paravt.core.paper_protocol import (
        PAPER_GENERAL_AGENTIC_SYSTEM,
        PAPER_MINIMAL_AGENTIC_SYSTEM,
        PAPER_TOOL_SCHEMA,
    )

    systems: dict[str, str] = {}

    def reply(traj):
        system = traj.messages[0].text
        text = traj.messages[-1].text
        systems["grounding" if "find the visual event" in text else "mcq"] = system
        if "find the visual event" in text:
            return "The event happens in the 2.0 - 6.5 seconds."
        return "<think>A horse? No: not A.</think><answer>B</answer>"

    config = EvalConfig(pretrained=str(tmp_path), main_nframes=2, batch_size=2)
    agent = EvalAgent(config, engine=ScriptedEngine(reply), source=FakeSource())
    mcq, grounding = agent.run(
        [
            VideoQuestion("m", "v.mp4", "What is ridden?", options=["a horse", "a bike"]),
            VideoQuestion("g", "v.mp4", "a person rides a bike", answer_kind="grounding"),
        ]
    )
    assert systems == {
        "mcq": PAPER_GENERAL_AGENTIC_SYSTEM.format(tool_schema=PAPER_TOOL_SCHEMA),
        "grounding": PAPER_MINIMAL_AGENTIC_SYSTEM.format(tool_schema=PAPER_TOOL_SCHEMA),
    }
    assert (mcq.response, mcq.answer) == ("B", "B")
    assert (grounding.response, grounding.answer) == ("2.0 - 6.5", "2.0-6.5")
    # a prompt mode given is every question's
    systems.clear()
    config = EvalConfig(pretrained=str(tmp_path), main_nframes=2, prompt_mode="agentic_general")
    agent = EvalAgent(config, engine=ScriptedEngine(reply), source=FakeSource())
    agent.run([VideoQuestion("g", "v.mp4", "a person rides a bike", answer_kind="grounding")])
    assert systems["grounding"] == PAPER_GENERAL_AGENTIC_SYSTEM.format(
        tool_schema=PAPER_TOOL_SCHEMA
    )


class SeedRecorder(ScriptedEngine):
    """A ScriptedEngine that records the sampling settings of every request, per role."""

    def __init__(self) -> None:
        super().__init__(respond)
        self.seen: list[tuple[str, float, int | None, bool]] = []

    async def generate(self, trajectories, sampling):
        for traj in trajectories:
            self.seen.append(
                (traj.role, sampling.temperature, sampling.seed, sampling.batch_invariant)
            )
        return await super().generate(trajectories, sampling)


def test_a_seed_gives_each_sample_seeded_draws_of_its_own_and_a_rerun_the_same(tmp_path):
    from paravt.eval.sampling import sample_seed

    questions = [VideoQuestion(key, "v.mp4", "What colour?") for key in ("q#0", "q#1", "r#0")]

    def seen(**fields):
        engine = SeedRecorder()
        config = EvalConfig(
            pretrained=str(tmp_path), protocol="paravt", main_nframes=4, batch_size=1, **fields
        )
        EvalAgent(config, engine=engine, source=FakeSource()).run(questions)
        return engine.seen

    seeded = seen(temperature=0.7, seed=7)
    mains = [s for s in seeded if s[0] == "main"]
    # one sample a batch: each main request carries its sample's own seed, keyed draws
    expected = [sample_seed(7, q.key) for q in questions]
    assert sorted({s[2] for s in mains}) == sorted(expected)
    assert len(set(expected)) == 3  # repeated samples of one question draw apart
    assert all(s[1] == 0.7 and s[3] for s in mains)
    subs = [s for s in seeded if s[0] == "subagent"]
    assert subs and {s[2] for s in subs} == {e + 1 for e in expected}
    assert seen(temperature=0.7, seed=7) == seeded  # a rerun asks for the same draws
    assert {s[2] for s in seen(temperature=0.7, seed=8) if s[0] == "main"}.isdisjoint(expected)
    # without a seed nothing is seeded (as before)
    assert {(s[2], s[3]) for s in seen(temperature=0.7)} == {(None, False)}
