"""Properties of the parser over arbitrary text: it never raises, and its spans are always true."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from paravt.core import parse_response
from paravt.core.parser import STRUCTURAL_TAGS

PIECES = [
    *STRUCTURAL_TAGS,
    '{"name": "crop_video", "arguments": {"start_time": 1, "end_time": 2}}',
    "crop_video(1, 2)",
    "print(crop_video(start_time=3, end_time=4))",
    '{"name": "crop_video", "arguments": {"start_time": NaN, "end_time": 1e999}}',
    "<",
    ">",
    "</",
    "{",
    '"',
    "B",
    "\n",
]
# Text assembled from protocol fragments exercises the state machine far more than random text.
protocolish = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), max_size=40).map(
    "".join
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(), protocolish))
def test_parse_never_raises_and_spans_are_consistent(text: str) -> None:
    parsed = parse_response(text)
    for tag in parsed.tags:
        assert text[tag.start : tag.end] == tag.tag
    for block in parsed.blocks:
        assert (
            0 <= block.start <= block.content_start <= block.content_end <= block.end <= len(text)
        )
        assert text[block.content_start : block.content_end] == block.content
    for issue in parsed.issues:
        assert 0 <= issue.start <= issue.end <= len(text)
    # every executable call comes from a closed block and carries validated arguments
    for call in parsed.valid_calls:
        assert call.block.closed and call.args is not None
        assert call.args.start_time < call.args.end_time  # type: ignore[attr-defined]
    if parsed.answer is not None:
        assert any(b.closed for b in parsed.answer_blocks)


@settings(max_examples=200, deadline=None)
@given(protocolish)
def test_blocks_do_not_overlap_and_come_in_text_order(text: str) -> None:
    blocks = parse_response(text).blocks
    for a, b in itertools.pairwise(blocks):
        assert a.end <= b.start
