"""protocol=paper sends what the released ParaVT driver sends, request for request.

`paper_driver/driver_fixtures.json` was recorded once from the driver's own `eval_one` with a
scripted client on bikes.mp4 (`paper_driver/record_driver_fixtures.py`). Here a recording
OpenAI-compatible server answers with the same scripted replies, and every request `paravt-eval ask
--protocol paper` and the lmms-eval plugin (`protocol=paper`) send must equal the driver's: roles
and order, every text verbatim, images per message with their format and pixel size (and mean
colour within 2 levels), max_tokens and temperature, and no other body keys.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from paravt.core.paper_protocol import (
    driver_letter,
    driver_span,
    driver_time_s,
    driver_tool_calls,
)
from paravt.core.testing.stand_in import FakeChatServer

HERE = Path(__file__).parent / "paper_driver"
FIXTURES = json.loads((HERE / "driver_fixtures.json").read_text(encoding="utf-8"))
SCENARIOS: dict[str, Any] = FIXTURES["scenarios"]
MODEL = "served-model"


def _recorder() -> Any:
    spec = importlib.util.spec_from_file_location(
        "record_driver_fixtures", HERE / "record_driver_fixtures.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RECORDER = _recorder()


def scenario_of(body: dict[str, Any]) -> str:
    """Which scenario a request belongs to: its first user message names the question."""
    first_user = next(m for m in body["messages"] if m["role"] == "user")
    content = first_user["content"]
    text = content if isinstance(content, str) else content[-1].get("text", "")
    hits = [n for n, s in SCENARIOS.items() if s["question"] in text]
    assert len(hits) == 1, f"no single scenario for {text[-200:]!r}: {hits}"
    return hits[0]


def scripted_reply(body: dict[str, Any]) -> str:
    """The scenario's scripted reply k for the request that carries k assistant messages."""
    k = sum(1 for m in body["messages"] if m["role"] == "assistant")
    return SCENARIOS[scenario_of(body)]["replies"][k]


class RecordingServer(FakeChatServer):
    """paravt-eval's fake OpenAI-compatible server, replying with the scenarios' scripts."""

    def __init__(self) -> None:
        super().__init__(scripted_reply)

    def requests_of(self, name: str) -> list[dict[str, Any]]:
        sent = [b for b in self.bodies if scenario_of(b) == name]
        return sorted(sent, key=lambda b: len(b["messages"]))


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    with RecordingServer() as s:
        yield s


def normalized(body: dict[str, Any]) -> dict[str, Any]:
    """A request body in the fixture's form (images as format, size, mean colour, sha256)."""
    return {
        **{k: v for k, v in body.items() if k != "messages"},
        "messages": [RECORDER.message_record(m) for m in body["messages"]],
    }


def assert_same_requests(name: str, sent: list[dict[str, Any]]) -> None:
    recorded = SCENARIOS[name]["requests"]
    assert len(sent) == len(recorded), (
        f"{name}: {len(sent)} requests, the driver sent {len(recorded)}"
    )
    for k, (ours, theirs) in enumerate(zip((normalized(b) for b in sent), recorded)):
        where = f"{name} request {k}"
        assert set(ours) == set(theirs), f"{where}: body keys {sorted(ours)} vs {sorted(theirs)}"
        for key in theirs:
            if key != "messages":
                assert ours[key] == theirs[key], f"{where}: {key} {ours[key]!r} vs {theirs[key]!r}"
        assert [m["role"] for m in ours["messages"]] == [m["role"] for m in theirs["messages"]], (
            where
        )
        for j, (mo, mt) in enumerate(zip(ours["messages"], theirs["messages"])):
            at = f"{where} message {j} ({mt['role']})"
            if isinstance(mt["content"], str):
                assert mo["content"] == mt["content"], at
                continue
            assert isinstance(mo["content"], list), at
            assert [p["type"] for p in mo["content"]] == [p["type"] for p in mt["content"]], at
            for po, pt in zip(mo["content"], mt["content"]):
                if pt["type"] == "text":
                    assert po["text"] == pt["text"], at
                elif pt["type"] == "video_url":
                    assert po == pt, at
                else:
                    assert (po["format"], po["size"]) == (pt["format"], pt["size"]), at
                    diff = max(abs(a - b) for a, b in zip(po["mean_rgb"], pt["mean_rgb"]))
                    assert diff <= 2.0, f"{at}: image mean colour differs by {diff}"


def ask_args(name: str, base_url: str, clip: Path) -> list[str]:
    s = SCENARIOS[name]
    args = [
        "ask",
        s["question"],
        "--video",
        str(clip),
        "--base-url",
        base_url,
        "--served-model",
        MODEL,
        "--protocol",
        "paper",
        "--prompt-mode",
        s["prompt_mode"],
        "--json",
    ]
    for option in s["options"] or []:
        args += ["--option", option]
    if not s["is_mcq"]:
        args += ["--kind", "grounding"]
    if s["video_channel"] == "video_url":
        args += ["--video-channel", "video_url"]
    elif not s["is_mcq"]:  # the driver's --video_channel image_url for a grounding split
        args += ["--video-channel", "images"]
    return args


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_ask_with_protocol_paper_sends_the_drivers_requests(name, server, bikes_mp4, capsys):
    from paravt.eval.cli import main

    code = main(ask_args(name, server.base_url, bikes_mp4))
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    assert_same_requests(name, server.requests_of(name))
    trace = json.loads(out)
    result = SCENARIOS[name]["result"]
    assert trace["answer"] == result["pred"]  # the driver's letter / span
    assert trace["num_tool_calls"] == result["tool_calls"]


# The paper protocol's prompt mode when none is given: the driver's for ParaVT-8B (by is_mcq).
DEFAULT_MODE = {True: "agentic_general", False: "agentic_minimal"}
# ... and its channel for a served model: images for MCQ, the server's decode for Charades-STA.
DEFAULT_CHANNEL = {True: "image_url", False: "video_url"}


def default_ask_args(name: str, base_url: str, clip: Path) -> list[str]:
    """`ask_args` with no --protocol, and no --prompt-mode or --video-channel where the
    scenario's is the default."""
    args = ask_args(name, base_url, clip)
    i = args.index("--protocol")
    del args[i : i + 2]
    s = SCENARIOS[name]
    if s["prompt_mode"] == DEFAULT_MODE[s["is_mcq"]]:
        i = args.index("--prompt-mode")
        del args[i : i + 2]
    if "--video-channel" in args and s["video_channel"] == DEFAULT_CHANNEL[s["is_mcq"]]:
        i = args.index("--video-channel")
        del args[i : i + 2]
    return args


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_ask_with_no_protocol_flag_sends_a_served_model_the_drivers_requests(
    name, server, bikes_mp4, capsys
):
    """A served model carries no protocol: it is asked the paper's way, grounding questions in
    the driver's Charades mode, and the first line says so."""
    from paravt.eval.cli import main

    code = main(default_ask_args(name, server.base_url, bikes_mp4))
    captured = capsys.readouterr()
    assert code == 0, captured.out[-2000:]
    assert captured.err.splitlines()[0].startswith(
        f"protocol: paper v3 (no recorded protocol in served model {MODEL} at {server.base_url})"
    )
    assert_same_requests(name, server.requests_of(name))
    trace = json.loads(captured.out)
    assert trace["answer"] == SCENARIOS[name]["result"]["pred"]


def _fixture_tasks(root: Path, clip: Path) -> Path:
    """Two lmms-eval tasks over the scenarios' documents (MCQ and grounding)."""
    root.mkdir(parents=True, exist_ok=True)
    mcq, grounding = [], []
    for name, s in SCENARIOS.items():
        doc = {
            "id": name,
            "video": str(clip),
            "question": s["question"],
            "answer": "B" if s["is_mcq"] else json.dumps([2.0, 7.0]),
            "paravt_question": s["question"],
            "paravt_options": json.dumps(s["options"]) if s["options"] else "",
            "paravt_answer_kind": "mcq" if s["is_mcq"] else "grounding",
            "prompt_mode": s["prompt_mode"],
        }
        (mcq if s["is_mcq"] else grounding).append(doc)
    for task, docs, process in (
        ("paper_fixture_mcq", mcq, "process_mcq"),
        ("paper_fixture_grounding", grounding, "process_grounding"),
    ):
        (root / f"{task}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
        (root / f"{task}.yaml").write_text(
            f"task: {task}\n"
            "dataset_path: json\n"
            f"dataset_kwargs:\n  data_files:\n    test: {task}.jsonl\n"
            "test_split: test\n"
            "output_type: generate_until\n"
            "doc_to_visual: !function paravt.eval.synth_tasks.doc_to_visual\n"
            "doc_to_text: !function paravt.eval.synth_tasks.doc_to_text\n"
            "doc_to_target: answer\n"
            f"process_results: !function paravt.eval.synth_tasks.{process}\n"
            "metric_list:\n  - metric: avg_tool_calls\n    aggregation: mean\n"
            "    higher_is_better: true\n"
            "metadata:\n  version: 0.1\n"
        )
    return root


@pytest.mark.parametrize(
    ("mode", "channel"),
    [
        ("direct", "image_url"),
        ("reasoning", "image_url"),
        ("agentic_general", "image_url"),
        ("agentic_minimal", "image_url"),
        ("agentic_minimal", "video_url"),
    ],
)
def test_the_lmms_eval_plugin_with_protocol_paper_sends_the_drivers_requests(
    mode, channel, server, bikes_mp4, tmp_path
):
    """In-process lmms-eval (the real evaluator and task loading) with the paravt chat model."""
    from lmms_eval import evaluator
    from lmms_eval.tasks import TaskManager

    from paravt.eval.lmms_model import ParaVT

    names = [
        n
        for n, s in SCENARIOS.items()
        if s["prompt_mode"] == mode and s["video_channel"] == channel
    ]
    tasks_dir = _fixture_tasks(tmp_path / "tasks", bikes_mp4)
    lm = ParaVT(
        base_url=server.base_url,
        model=MODEL,
        protocol="paper",
        prompt_mode=mode,
        video_channel="images" if channel == "image_url" else "video_url",
        traces=str(tmp_path / "t.jsonl"),
    )
    kinds = {SCENARIOS[n]["is_mcq"] for n in names}
    tasks = (["paper_fixture_mcq"] if True in kinds else []) + (
        ["paper_fixture_grounding"] if False in kinds else []
    )
    # only this mode's documents: the others would be asked under the wrong prompt mode
    wanted = set(names)
    for task in tasks:
        path = tasks_dir / f"{task}.jsonl"
        docs = [json.loads(x) for x in path.read_text().splitlines()]
        path.write_text("".join(json.dumps(d) + "\n" for d in docs if d["id"] in wanted))
    evaluator.simple_evaluate(
        model=lm,
        tasks=tasks,
        task_manager=TaskManager("WARNING", include_path=str(tasks_dir), model_name="paravt"),
    )
    for name in names:
        assert_same_requests(name, server.requests_of(name))


def test_the_lmms_eval_plugin_with_no_protocol_sends_the_drivers_requests(
    server, bikes_mp4, tmp_path
):
    """No protocol, no prompt mode, no channel: MCQ and grounding documents in one run, each
    asked as the driver asked ParaVT-8B (agentic_general over images; Charades-STA's
    agentic_minimal over video_url)."""
    from lmms_eval import evaluator
    from lmms_eval.tasks import TaskManager

    from paravt.eval.lmms_model import ParaVT

    names = {
        n
        for n, s in SCENARIOS.items()
        if s["video_channel"] == DEFAULT_CHANNEL[s["is_mcq"]]
        and s["prompt_mode"] == DEFAULT_MODE[s["is_mcq"]]
    }
    assert {SCENARIOS[n]["is_mcq"] for n in names} == {True, False}
    tasks_dir = _fixture_tasks(tmp_path / "tasks", bikes_mp4)
    for task in ("paper_fixture_mcq", "paper_fixture_grounding"):
        path = tasks_dir / f"{task}.jsonl"
        docs = [json.loads(x) for x in path.read_text().splitlines()]
        path.write_text("".join(json.dumps(d) + "\n" for d in docs if d["id"] in names))
    lm = ParaVT(base_url=server.base_url, model=MODEL, traces=str(tmp_path / "t.jsonl"))
    assert lm.protocol_line.startswith("protocol: paper v3 (no recorded protocol in served model")
    evaluator.simple_evaluate(
        model=lm,
        tasks=["paper_fixture_mcq", "paper_fixture_grounding"],
        task_manager=TaskManager("WARNING", include_path=str(tasks_dir), model_name="paravt"),
    )
    for name in sorted(names):
        assert_same_requests(name, server.requests_of(name))


@pytest.mark.slow
def test_the_lmms_eval_cli_with_protocol_paper_sends_the_drivers_requests(
    server, bikes_mp4, tmp_path, offline_env
):
    """The real `python -m lmms_eval` command, three agentic_general scenarios in one run."""
    names = [
        n
        for n, s in SCENARIOS.items()
        if s["prompt_mode"] == "agentic_general" and s["video_channel"] == "image_url"
    ]
    tasks_dir = _fixture_tasks(tmp_path / "tasks", bikes_mp4)
    path = tasks_dir / "paper_fixture_mcq.jsonl"
    docs = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(d) + "\n" for d in docs if d["id"] in names))
    cmd = [
        sys.executable,
        "-m",
        "lmms_eval",
        "--model",
        "paravt",
        "--model_args",
        f"base_url={server.base_url},model={MODEL},protocol=paper,prompt_mode=agentic_general",
        "--tasks",
        "paper_fixture_mcq",
        "--include_path",
        str(tasks_dir),
        "--output_path",
        str(tmp_path / "out"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=offline_env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in names:
        assert_same_requests(name, server.requests_of(name))


# ------------------------------------------------------------------------ the driver's reading

READINGS = FIXTURES["readings"]


@pytest.mark.parametrize(("text", "letter"), list(READINGS["extract_letter"].items()))
def test_letters_are_extracted_as_the_driver_extracts_them(text, letter):
    assert driver_letter(text) == letter


@pytest.mark.parametrize(("text", "span"), list(READINGS["extract_time_from_response"].items()))
def test_spans_are_extracted_as_the_driver_extracts_them(text, span):
    assert driver_span(text) == span


def test_times_and_calls_are_read_as_the_driver_reads_them():
    import math

    for value, seconds in READINGS["parse_time_val"]:
        got = driver_time_s(value)
        assert (math.isnan(got) and math.isnan(seconds)) or got == seconds, value
    for text, calls in READINGS["parse_tool_calls"].items():
        assert driver_tool_calls(text) == calls, text


# ------------------------------------------------------------------------- a local checkpoint


class Recording:
    """Wraps an engine; records each main-agent request's messages and max_new_tokens."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.requests: list[tuple[list[Any], int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    async def generate(self, trajectories: Any, sampling: Any) -> Any:
        for t in trajectories:
            self.requests.append((list(t.messages), sampling.max_new_tokens))
        return await self.engine.generate(trajectories, sampling)


def as_record(message: Any) -> dict[str, Any]:
    """One of our messages in the fixture's form (images by size only)."""
    from paravt.core import ImagePart

    if isinstance(message.content, str):
        return {"role": message.role, "content": message.content}
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, ImagePart):
            h, w = part.image.shape[:2]
            parts.append({"type": "image_url", "size": [int(w), int(h)]})
        else:
            parts.append({"type": "text", "text": part.text})
    return {"role": message.role, "content": parts}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["forced_answer", "grounding_minimal"])
def test_a_local_checkpoint_under_protocol_paper_gets_the_drivers_conversation(
    name, tiny_model, bikes_mp4, tmp_path
):
    """pretrained= (transformers, the checkpoint's own chat template): the same messages, images
    and token limits as the driver's requests, and the chat template renders them all."""
    from paravt.core.engines import ScriptedTurns
    from paravt.eval.agent import EvalAgent, VideoQuestion
    from paravt.eval.config import EvalConfig

    s = SCENARIOS[name]
    config = EvalConfig(pretrained=str(tiny_model), protocol="paper", prompt_mode=s["prompt_mode"])
    agent = EvalAgent(config)
    inner = agent.engine
    scripts = {k + 1: reply for k, reply in enumerate(s["replies"])}
    recording = Recording(ScriptedTurns(inner, scripts))
    agent.engine = recording
    [trace] = agent.run(
        [
            VideoQuestion(
                name,
                str(bikes_mp4),
                s["question"],
                options=s["options"],
                answer_kind="mcq" if s["is_mcq"] else "grounding",
            )
        ]
    )
    assert trace.error is None, trace.error
    assert trace.answer == s["result"]["pred"]
    recorded = s["requests"]
    assert len(recording.requests) == len(recorded)
    for (messages, max_tokens), theirs in zip(recording.requests, recorded):
        assert max_tokens == theirs["max_tokens"]
        ours = [as_record(m) for m in messages]
        assert [m["role"] for m in ours] == [m["role"] for m in theirs["messages"]]
        for mo, mt in zip(ours, theirs["messages"]):
            if isinstance(mt["content"], str):
                assert mo["content"] == mt["content"]
                continue
            assert [(p["type"], p.get("text"), p.get("size")) for p in mo["content"]] == [
                (p["type"], p.get("text"), p.get("size")) for p in mt["content"]
            ]
    # the checkpoint's chat template rendered the whole conversation: every image has its pads
    tokens = trace.episode.main.token_ids if trace.episode else []
    images = sum(
        1 for m in recording.requests[-1][0] for p in m.parts if type(p).__name__ == "ImagePart"
    )
    assert len(trace.episode.main.media) == images
    text = inner.tokenizer.decode(tokens)
    assert text.count("<|vision_start|>") == images
    assert SCENARIOS[name]["requests"][0]["messages"][0]["content"] in text  # the system prompt
