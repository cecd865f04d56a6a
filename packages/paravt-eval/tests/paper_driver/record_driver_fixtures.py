"""Record what the released ParaVT evaluation driver sends, once, into `driver_fixtures.json`.

Runs the driver's own `eval_one` (EvolvingLMMs-Lab/ParaVT, `paravt/eval/driver.py`) with a
scripted fake OpenAI client on a real clip, for each scenario below, and writes every request it
makes: roles, texts, each image's size and mean colour, max_tokens and temperature, plus the
driver's result (prediction, score, tool calls). It also records how the driver's helpers read a
table of replies (letters, spans, times, tool calls). `test_paper_protocol.py` checks that
`protocol=paper` sends the same requests through `paravt-eval ask` and the lmms-eval plugin.

Usage (a checkout of the released repository and the driver's dependencies: openai, pillow, numpy,
qwen-vl-utils==0.0.14 with torchcodec; the test venv has them):

    git clone https://github.com/EvolvingLMMs-Lab/ParaVT /tmp/ParaVT   # commit cf55249
    python record_driver_fixtures.py --driver-repo /tmp/ParaVT --clip bikes.mp4

The clip is paravt-tools' sample `bikes.mp4` (`paravt.tools.samples.fetch_sample_clips`).
The released package is also named `paravt`; it is imported from `--driver-repo` first on the path,
in this process only (our packages are not imported here).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
# Each scenario asks its own question, so a recording server can tell concurrent samples apart.
QUESTIONS = {
    "two_calls_then_answer": "What is the person in the video riding?",
    "forced_answer": "What does the rider pass by?",
    "direct_answer": "How many wheels does the vehicle have?",
    "reasoning_answer": "What moves in the video?",
    "driver_argument_reading": "What is the main object in the video?",
}
OPTIONS = ["A horse", "A bicycle", "A skateboard", "A car"]
CAPTIONS = {
    "grounding_minimal": "a person rides a bike past the camera",
    "grounding_video_url": "a cyclist crosses the street",
}


def call(start: Any, end: Any = None, **extra: Any) -> str:
    args: dict[str, Any] = {"video_path": "bikes.mp4", "start_time": start, **extra}
    if end is not None:
        args["end_time"] = end
    return (
        "<tool_call>\n" + json.dumps({"name": "crop_video", "arguments": args}) + "\n</tool_call>"
    )


# Each scenario: the driver's prompt mode, whether the sample is MCQ, and the scripted replies in
# request order (the fake client answers request k with replies[k]).
SCENARIOS: dict[str, dict[str, Any]] = {
    "two_calls_then_answer": {
        "prompt_mode": "agentic_general",
        "is_mcq": True,
        "replies": [
            "<think>The overview is too coarse; look at two moments.</think>\n"
            + call(1.0, 4.0)
            + "\n"
            + call(5, 9),
            "<think>Both crops show a bicycle.</think>\n<answer>B</answer>",
        ],
    },
    "forced_answer": {
        "prompt_mode": "agentic_general",
        "is_mcq": True,
        "replies": [
            "<think>Start.</think>\n" + call(0, 3),
            "<think>More.</think>\n" + call("00:03", "00:06"),
            "<think>Last look.</think>\n" + call(6.5, 9.5),
            "B",
        ],
    },
    "direct_answer": {
        "prompt_mode": "direct",
        "is_mcq": True,
        "replies": ["<answer>B</answer>"],
    },
    "reasoning_answer": {
        "prompt_mode": "reasoning",
        "is_mcq": True,
        "replies": ["<think>It has two wheels and pedals.</think><answer>B</answer>"],
    },
    "grounding_minimal": {
        "prompt_mode": "agentic_minimal",
        "is_mcq": False,
        "gt": [2.0, 7.0],
        "replies": [
            call(0, 5),
            call(2, 8),
            call(4),  # no end: the driver reads start + 10 s
            "The event happens in the 2.0 - 6.5 seconds.",
        ],
    },
    # Charades as the paper ran it: the video travels as a file:// video_url for the server to
    # decode (--video_channel video_url); crops still return images.
    "grounding_video_url": {
        "prompt_mode": "agentic_minimal",
        "is_mcq": False,
        "video_channel": "video_url",
        "gt": [2.0, 7.0],
        "replies": [call(1, 6), "The event happens in the 1.5 - 6.0 seconds."],
    },
    "driver_argument_reading": {
        "prompt_mode": "agentic_general",
        "is_mcq": True,
        "replies": [
            "<think>Seven windows, read the driver's way.</think>\n"
            + "<tool_call>\n"
            + json.dumps({"name": "crop_video", "arguments": {"start": 1, "end": 3}})
            + "\n</tool_call>\n"
            + call("00:02", "00:04.5")
            + "\n<tool_call>{not json}</tool_call>\n"
            + call(9, 2)  # end before start: the crop fails
            + "\n"
            + call("abc", 2)  # an unreadable time reads as 0
            + "\n<tool_code>crop_video(start_time=3, end_time='00:00:08')</tool_code>\n"
            + call(7, 8)
            + "\n",
            # the driver reads <tool_call> bodies first, then <tool_code> leaks: the leak is the
            # sixth readable call, over max_parallel (5), and is dropped
            "<answer>B</answer>",
        ],
    },
}

# Replies whose reading the driver's helpers define (letters, spans, times, calls).
LETTER_TEXTS = [
    "<answer>B</answer>",
    "<answer> C </answer>",
    "<answer>Option D is right</answer>",
    "The answer is A.",
    "Answer: E",
    "D",
    "I think it is B",
    "probably (C)",
    "none of these",
    "",
    "<think>A or B?</think><answer>the second</answer> so B",
]
SPAN_TEXTS = [
    "The event happens in the 12.0 - 20.0 seconds.",
    "[12.0, 20.0]",
    "12.0 - 20.0",
    "<time>00:19.7 - 00:25.6</time>",
    "from 1:05 – 1:30",
    "starting at 3.5 and ending at 9",
    "begin 4 end 2",
    "20 - 10 then 1",
    "nothing here",
    "",
    "<answer>[5.5, 8.25]</answer>",
]
TIME_VALUES: list[Any] = [3, 2.5, "4", "4.5", "01:05", "1:02:03", "abc", "1:2:3:4", None, "", "nan"]
CALL_TEXTS = [
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 1, "end_time": 2}}</tool_call>',
    "<tool_call>[1, 2]</tool_call>",
    "<tool_call>{broken</tool_call>",
    "<tool_code>crop_video(start_time=1.5, end_time=\"00:09\", video_path='x.mp4')</tool_code>",
    "<tool_code>print(1)</tool_code><tool_code>crop_video()</tool_code>",
    '<tool_call>\n{"name": "other", "arguments": {}}\n</tool_call>',
]


def image_record(url: str) -> dict[str, Any]:
    from PIL import Image

    head, data = url.split(",", 1)
    raw = base64.b64decode(data)
    import numpy as np

    image = Image.open(io.BytesIO(raw)).convert("RGB")
    mean = [round(float(v), 2) for v in np.asarray(image).reshape(-1, 3).mean(axis=0)]
    return {
        "type": "image_url",
        "format": head,
        "size": list(image.size),
        "mean_rgb": mean,
        "sha256": hashlib.sha256(raw).hexdigest(),
    }


def message_record(message: dict[str, Any]) -> dict[str, Any]:
    content = message["content"]
    if isinstance(content, str):
        return {"role": message["role"], "content": content}
    parts = []
    for part in content:
        if part["type"] == "text":
            parts.append({"type": "text", "text": part["text"]})
        elif part["type"] == "image_url":
            parts.append(image_record(part["image_url"]["url"]))
        elif part["type"] == "video_url":  # the file's name only: the directory is the machine's
            url = part["video_url"]["url"]
            parts.append(
                {"type": "video_url", "scheme": url.split("://")[0], "file": Path(url).name}
            )
        else:
            parts.append({"type": part["type"], **{k: v for k, v in part.items() if k != "type"}})
    return {"role": message["role"], "content": parts}


class ScriptedClient:
    """The slice of `openai.OpenAI` the driver uses: `client.chat.completions.create(...)`."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.chat = self
        self.completions = self

    def create(self, *, model: str, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        self.requests.append(
            {
                "model": model,
                **kwargs,
                "messages": [message_record(m) for m in messages],
            }
        )
        text = self.replies[len(self.requests) - 1]
        message = type("Message", (), {"content": text})()
        choice = type("Choice", (), {"message": message})()
        return type("Completion", (), {"choices": [choice]})()


def sample_for(name: str, spec: dict[str, Any], clip: Path, utils: Any) -> dict[str, Any]:
    """A sample dict shaped as the driver's `utils.load_samples` shapes it."""
    if spec["is_mcq"]:
        options = "\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(OPTIONS))
        instruction = (
            "Think step by step, use crop_video if needed, then provide your "
            "answer in <answer>X</answer> tags where X is the option letter."
            if spec["prompt_mode"] == "direct"
            else "Answer with the option letter only."
        )
        question = f"Question: {QUESTIONS[name]}\nOptions:\n{options}\n{instruction}"
        return {
            "id": name,
            "video_path": str(clip),
            "question": question,
            "answer": "B",
            "is_mcq": True,
        }
    gt = spec["gt"]
    return {
        "id": name,
        "key": f"{clip.name}>>>{CAPTIONS[name]}>>>{gt}",
        "video_path": str(clip),
        "question": (
            "Please find the visual event described by a sentence in the video, "
            "determining its starting and ending times. The format should be: "
            "'The event happens in the start time - end time'. "
            "For example, The event 'person turn a light on' happens in the 24.3 - 30.4 seconds. "
            f'Now I will give you the textual sentence: "{CAPTIONS[name]}". '
            "Please return its start time and end time."
        ),
        "answer": gt,
        "is_mcq": False,
        "gt_start": float(gt[0]),
        "gt_end": float(gt[1]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--driver-repo", required=True, help="checkout of EvolvingLMMs-Lab/ParaVT")
    parser.add_argument("--clip", required=True, help="paravt-tools' sample bikes.mp4")
    parser.add_argument("--out", default=str(HERE / "driver_fixtures.json"))
    args = parser.parse_args(argv)

    sys.path.insert(0, str(Path(args.driver_repo).resolve()))
    from paravt.eval import driver, utils  # the released driver, not our paravt-eval

    assert Path(driver.__file__).resolve().is_relative_to(Path(args.driver_repo).resolve()), (
        f"imported {driver.__file__}, not the released driver under {args.driver_repo}"
    )
    from importlib.metadata import version

    import qwen_vl_utils  # noqa: F401  (the version decides frame sizes)

    clip = Path(args.clip).resolve()
    scenarios: dict[str, Any] = {}
    for name, spec in SCENARIOS.items():
        client = ScriptedClient(spec["replies"])
        sample = sample_for(name, spec, clip, utils)
        result = driver.eval_one(
            client,
            "served-model",
            sample,
            nframes=64,
            max_turns=3,
            prompt_mode=spec["prompt_mode"],
            max_parallel=5,
            video_channel=spec.get("video_channel", "image_url"),
        )
        assert "error" not in result, (name, result)
        assert len(client.requests) == len(spec["replies"]), (name, len(client.requests))
        scenarios[name] = {
            "prompt_mode": spec["prompt_mode"],
            "is_mcq": spec["is_mcq"],
            "question": QUESTIONS[name] if spec["is_mcq"] else CAPTIONS[name],
            "video_channel": spec.get("video_channel", "image_url"),
            "options": OPTIONS if spec["is_mcq"] else None,
            "driver_question": sample["question"],
            "replies": spec["replies"],
            "requests": client.requests,
            "result": {k: result[k] for k in ("pred", "score", "tool_calls", "correct")},
        }

    readings = {
        "extract_letter": {t: utils.extract_letter(t) for t in LETTER_TEXTS},
        "extract_time_from_response": {t: utils.extract_time_from_response(t) for t in SPAN_TEXTS},
        "parse_time_val": [[v, utils.parse_time_val(v)] for v in TIME_VALUES],
        "parse_tool_calls": {t: driver.parse_tool_calls(t) for t in CALL_TEXTS},
    }
    out = {
        "source": "EvolvingLMMs-Lab/ParaVT paravt/eval/driver.py eval_one (commit cf55249), "
        "recorded by record_driver_fixtures.py",
        "clip": clip.name,
        "qwen_vl_utils": version("qwen-vl-utils"),
        "scenarios": scenarios,
        "readings": readings,
    }
    Path(args.out).write_text(json.dumps(out, indent=1, default=str) + "\n", encoding="utf-8")
    counts = ", ".join(f"{k} ({len(v['requests'])} requests)" for k, v in scenarios.items())
    print(f"wrote {args.out}: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
