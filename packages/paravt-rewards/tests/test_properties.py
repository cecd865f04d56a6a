"""Every term stays in its range and nothing raises, whatever the text and the ground truth."""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from paravt.rewards import RewardConfig, score

TAGS = [
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<tool_call>",
    "</tool_call>",
    "<tool_code>",
    "</tool_code>",
    "<tool_response>",
    "<|im_start|>",
    "<|im_end|>",
    '{"name": "crop_video", "arguments": {"start_time": 1, "end_time": 9}}',
    "crop_video(1, 9)",
    "B",
    "(C)",
    "[10, 20]",
    "01:30",
    " ",
    "\n",
]

structured = st.lists(st.one_of(st.sampled_from(TAGS), st.text(max_size=30)), max_size=40).map(
    "".join
)
texts = st.one_of(st.text(max_size=400), structured)
truths = st.one_of(
    st.none(),
    st.text(max_size=50),
    st.sampled_from(["A", "B", "J", "[10, 20]", "red square"]),
    st.tuples(st.floats(allow_nan=True), st.floats(allow_infinity=True)),
    st.integers(),
    st.lists(st.integers(), max_size=3),
)
qtypes = st.one_of(st.none(), st.sampled_from(["mcq", "tvg", "oe", "open", "MCQ", ""]))
configs = st.sampled_from(
    [
        RewardConfig.paragrpo(),
        RewardConfig.vanilla(),
        RewardConfig.paragrpo(gamma=1.0, repetition_guard=True),
        RewardConfig.paragrpo(anchoring="token", default_accuracy="exact"),
    ]
)


@settings(max_examples=300, deadline=None)
@given(text=texts, truth=truths, qtype=qtypes, config=configs)
def test_every_term_stays_in_range_on_arbitrary_input(
    text: str, truth: object, qtype: str | None, config: RewardConfig
) -> None:
    r = score(text, truth, qtype, config)
    for value in (r.accuracy, r.format, r.base_format, r.tool, r.penalty):
        assert 0.0 <= value <= 1.0
    assert -0.3 - 1e-9 <= r.anchor <= 0.7 + 1e-9
    assert math.isfinite(r.total)
    upper = config.accuracy_weight + config.format_weight + config.tool_weight
    assert -config.gamma - 1e-9 <= r.total <= upper + 1e-9


@settings(max_examples=150, deadline=None)
@given(text=texts, data=st.data())
def test_token_anchoring_never_raises_and_sums_to_the_weighted_anchor(
    text: str, data: st.DataObject
) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(0, len(text)), max_size=60)) | {0, len(text)})
    offsets = [(a, b) for a, b in itertools.pairwise(cuts)] or [(0, 0)]
    config = RewardConfig.paragrpo(anchoring="token")
    r = score(text, "B", "mcq", config, token_offsets=offsets)
    assert r.token_rewards is not None and len(r.token_rewards) == len(offsets)
    if r.degenerate is None:
        assert math.fsum(r.token_rewards) == pytest_approx(config.lambda_anchor * r.anchor)


def pytest_approx(x: float) -> object:
    import pytest

    return pytest.approx(x, abs=1e-9)
