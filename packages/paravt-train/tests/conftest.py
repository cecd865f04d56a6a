"""Shared fixtures of paravt-train's tests: the tiny Qwen3-VL (built once, cached) and recipes."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from paravt.core.prompts import render_frames
from paravt.core.protocol import Frame, Message, TextPart


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """The tiny Qwen3-VL (seed 0), built once into $PARAVT_CACHE_DIR or ~/.cache/paravt."""
    from paravt.core.testing import cached_tiny_qwen3vl

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return cached_tiny_qwen3vl(seed=0)


def colour_frames(colour: tuple[int, int, int], n: int = 2, size: int = 64) -> list[Frame]:
    frames = []
    for k in range(n):
        img = np.zeros((size, size, 3), dtype=np.uint8)
        img[16:48, 16:48] = colour
        frames.append(Frame(img, float(k * 5)))
    return frames


def tool_conversation(colour_name: str, colour: tuple[int, int, int]) -> list[Message]:
    """A ParaVT teacher trace: think + parallel crop calls, tool responses, then the answer."""
    calls = "".join(
        f'<tool_call>{{"name": "crop_video", "arguments": {{"start_time": {s}, "end_time": {s + 5}}}}}'
        "</tool_call>"
        for s in (0, 5)
    )
    return [
        Message("system", "You are a video assistant."),
        Message(
            "user",
            [
                *render_frames(colour_frames(colour)),
                TextPart("Question: what colour is the square?"),
            ],
        ),
        Message("assistant", f"<think>\nLook at both windows closely.</think>{calls}"),
        Message("tool", f"[0.0 s - 5.0 s] a {colour_name} square"),
        Message("tool", "[5.0 s - 10.0 s] nothing"),
        Message(
            "assistant",
            f"<think>\nThe square is {colour_name}.</think><answer>{colour_name}</answer>",
        ),
    ]


@pytest.fixture
def conversations() -> list[list[Message]]:
    return [
        tool_conversation("red", (255, 0, 0)),
        tool_conversation("blue", (0, 0, 255)),
        tool_conversation("green", (0, 255, 0)),
        tool_conversation("yellow", (255, 255, 0)),
    ]
