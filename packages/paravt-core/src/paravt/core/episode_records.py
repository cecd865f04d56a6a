"""Episodes on disk, one schema for training and evaluation: what the agent saw, did and was paid.

One file because the schema written out below and the code that fills it are read side by side
(a field added to one is added to the other); the file helpers are apart (`episode_files`). RL runs
write it through `paravt.train.episodes.EpisodeRecorder` (a sample per step and K, under a size
cap, resumable); `paravt-eval ask --trace DIR` writes its one episode (`step` 0, no reward, no
advantage); `paravt-train episodes DIR` summarises and views either.

Layout of an episodes folder (an RL run's `<output_dir>/episodes/`, an `ask --trace DIR`):

- `episodes.jsonl`: one JSON object per episode (schema below), appended as whole lines, flushed
  and fsynced (`paravt.core.episode_files`);
- `images/...*.jpg`: downscaled JPEG thumbnails of the overview frames and of each sub-agent's
  frames (`images/step_NNNNNN/` in an RL run, `images/ask/` from evaluation), each written to a
  temporary file and renamed; the records name them by paths relative to the folder.

Schema (`SCHEMA_VERSION` 1), one line:

    schema_version  1
    step            the RL step that trained on the episode (0: from evaluation)
    weight_version  the policy version that generated it (step - 1 - staleness)
    index           its position among rank 0's episodes of the step (group = index // group_size)
    key             the runtime's episode key (`<example key>#<rollout>`)
    k               the overview budget K the gate gave its prompt
    question, question_type, options, ground_truth
    prompt          [{role, text}] of the first prompt, each image written as `<image>`
    overview        {duration_s, frames: [{t, image}]}  (image: path relative to episodes/)
    turns           [{turn, text, finish_reason, num_tokens, think, answer,
                      issues: [{kind, message, start, end}]  (the parser's, spans into text),
                      calls: [{index, name, arguments, status, reason, error, window_s,
                               num_frames, clamps, note, report,
                               subagent: {frames: [{t, image}], text} | null}]}]
    answer          the last turn's answer (null: none)
    reward          {total, accuracy, format, base_format, anchor, tool, penalty, call_attempts,
                     invalid_calls, tool_responses, degenerate, flags}  (null: not scored)
    format_ok       every main turn parses and ends in a non-empty answer
                    (`paravt.rewards.episode_structure(...).parses`)
    leak            {prior_leak, tool_code, untagged_answer}
    advantage       the episode's (outcome) advantage (null: not trained on)
    forced_answer, truncated, tool_response ("subagent" or "frames")

A call's `status`: `ok` (ran and answered), `invalid` (the parser rejected it; `reason` is the
parser's issue kind: invalid_json, invalid_call, empty_tool_call, unknown_tool,
invalid_arguments, unclosed_tag), `not_executed` (valid, not run: past max_parallel, or the last
turn) or `tool_error` (ran, the tool failed; `reason` tool_error). Non-finite numbers are written
as null.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from paravt.core.protocol import ImagePart, Message, TextPart

SCHEMA_VERSION = 1
THUMB_SIDE = 96  # longest side of a thumbnail, pixels
THUMB_QUALITY = 70  # JPEG quality
_CALL_ISSUES = frozenset(
    {"invalid_json", "invalid_call", "empty_tool_call", "unknown_tool", "invalid_arguments"}
)
_TIMESTAMP = re.compile(r"<(\d+(?:\.\d+)?) seconds>")
_DURATION = re.compile(r"The video is (\d+(?:\.\d+)?) seconds long")


# --------------------------------------------------------------------------------------------------
# Images


def thumbnail_jpeg(image: Any, side: int = THUMB_SIDE, quality: int = THUMB_QUALITY) -> bytes:
    """A JPEG of `image` (PIL image, HWC/CHW array or tensor, uint8 or float in [0, 1]) whose
    longest side is at most `side` pixels."""
    from PIL import Image

    if isinstance(image, Image.Image):
        pil = image.convert("RGB")
    else:
        import numpy as np

        if hasattr(image, "detach"):  # a torch tensor (no torch import needed)
            image = image.detach().cpu().numpy()
        arr = np.asarray(image)
        if arr.ndim == 3 and arr.shape[0] in (1, 3, 4) and arr.shape[-1] not in (1, 3, 4):
            arr = arr.transpose(1, 2, 0)  # CHW -> HWC
        if arr.dtype != np.uint8:
            scale = 255.0 if arr.size and float(arr.max()) <= 1.0 else 1.0
            arr = np.clip(arr.astype(np.float32) * scale, 0, 255).astype(np.uint8)
        if arr.ndim == 3 and arr.shape[-1] == 1:
            arr = arr[..., 0]
        pil = Image.fromarray(arr).convert("RGB")
    pil.thumbnail((side, side))
    buf = io.BytesIO()
    pil.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def timed_images(messages: Sequence[Message]) -> list[tuple[float | None, Any]]:
    """The images of `messages` in order, each with the `<t seconds>` timestamp text before it."""
    out: list[tuple[float | None, Any]] = []
    t: float | None = None
    for m in messages:
        for part in m.parts:
            if isinstance(part, TextPart):
                found = _TIMESTAMP.findall(part.text)
                if found:
                    t = float(found[-1])
            elif isinstance(part, ImagePart):
                out.append((t, part.image))
                t = None
    return out


def _prompt_text(messages: Sequence[Message]) -> list[dict[str, str]]:
    rows = []
    for m in messages:
        text = "".join(p.text if isinstance(p, TextPart) else "<image>" for p in m.parts)
        rows.append({"role": m.role, "text": text})
    return rows


# --------------------------------------------------------------------------------------------------
# One record


def _finite(x: Any) -> Any:
    """JSON-ready: non-finite floats as None, tuples as lists, anything odd as its repr."""
    if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if hasattr(x, "item") and callable(x.item):  # numpy / torch scalars
        try:
            return _finite(x.item())
        except (TypeError, ValueError):
            pass
    return repr(x)


def call_status(call: Any, parsed: Any) -> tuple[str, str | None]:
    """(status, reason) of one `CallRecord` of a turn parsed as `parsed` (see the module)."""
    if call.executed:
        return ("ok", None) if call.error is None else ("tool_error", "tool_error")
    tool_calls = getattr(parsed, "tool_calls", [])
    tc = tool_calls[call.index] if call.index < len(tool_calls) else None
    if tc is not None and tc.name == call.name and not tc.ok:
        block = tc.block
        for issue in parsed.issues:
            kind = issue.kind.value
            if kind in _CALL_ISSUES and (issue.start, issue.end) == (block.start, block.end):
                return "invalid", kind
        return "invalid", "unclosed_tag" if not block.closed else "invalid_call"
    error = call.error or ""
    if error.startswith("not executed"):
        return "not_executed", "not_executed"
    return "invalid", "invalid_call"


def episode_record(
    ep: Any,
    example: Any,
    k: int,
    reward: Any,
    advantage: float | None,
    *,
    shape: Any,
    step: int,
    weight_version: int,
    index: int,
    tool_response: str = "subagent",
    image: Callable[[str, Any], str] | None = None,
) -> dict[str, Any]:
    """The schema's record of one episode (`paravt.core.Episode`). `reward` is its
    `paravt.rewards` breakdown (None: not scored, e.g. a question without a ground truth, written
    as null), `shape` its `paravt.rewards.episode_structure` (format ok and the leaks: the caller
    measures it, core knows no reward). `image(name, data) -> str` stores a thumbnail and returns
    its path relative to the episodes folder (None: no images are written)."""

    def store(name: str, data: Any) -> str | None:
        if image is None:
            return None
        return str(image(name, data))

    prompt = _prompt_text(_first_prompt(ep))
    overview_frames = []
    for n, (t, img) in enumerate(timed_images(_first_prompt(ep))):
        overview_frames.append({"t": t, "image": store(f"ov{n}", img)})
    duration = None
    for row in prompt:
        m = _DURATION.search(row["text"])
        if m:
            duration = float(m.group(1))
            break
    subs = {(s.turn, s.call_index): s for s in ep.subagents}
    turns = []
    for tr in ep.turns:
        calls = []
        for c in tr.calls:
            status, reason = call_status(c, tr.parsed)
            sub = subs.get((tr.turn, c.index))
            sub_rec = None
            if sub is not None:
                frames = [
                    {"t": t, "image": store(f"t{tr.turn}c{c.index}f{n}", img)}
                    for n, (t, img) in enumerate(timed_images(sub.messages))
                ]
                said = [m.text for m in sub.messages if m.role == "assistant"]
                sub_rec = {"frames": frames, "text": said[-1] if said else ""}
            calls.append(
                {
                    "index": c.index,
                    "name": c.name,
                    "arguments": c.arguments,
                    "status": status,
                    "reason": reason,
                    "error": c.error,
                    "window_s": list(c.window_s) if c.window_s else None,
                    "num_frames": c.num_frames,
                    "clamps": list(c.clamps),
                    "note": c.note,
                    "report": c.summary,
                    "subagent": sub_rec,
                }
            )
        turns.append(
            {
                "turn": tr.turn,
                "text": tr.response,
                "finish_reason": tr.finish_reason,
                "num_tokens": tr.num_tokens,
                "think": tr.parsed.think,
                "answer": tr.parsed.answer,
                "issues": [
                    {"kind": i.kind.value, "message": i.message, "start": i.start, "end": i.end}
                    for i in tr.parsed.issues
                ],
                "calls": calls,
            }
        )
    extra = getattr(example, "extra_info", None)
    options = extra.get("options") if isinstance(extra, dict) else None
    return _finite(
        {
            "schema_version": SCHEMA_VERSION,
            "step": step,
            "weight_version": weight_version,
            "index": index,
            "key": ep.key,
            "k": k,
            "question": getattr(example, "question", None),
            "question_type": getattr(example, "question_type", None),
            "options": options,
            "ground_truth": getattr(example, "answer", None),
            "prompt": prompt,
            "overview": {"duration_s": duration, "frames": overview_frames},
            "turns": turns,
            "answer": ep.answer if ep.turns else None,
            "reward": None if reward is None else reward_parts(reward),
            "format_ok": shape.parses,
            "leak": {
                "prior_leak": shape.prior_leak,
                "tool_code": shape.tool_code,
                "untagged_answer": shape.untagged_answer,
            },
            "advantage": advantage,
            "forced_answer": ep.forced_answer,
            "truncated": ep.truncated,
            "tool_response": tool_response,
        }
    )


def reward_parts(reward: Any) -> dict[str, Any]:
    """A `paravt.rewards` breakdown as the schema's `reward` object."""
    return {
        "total": reward.total,
        "accuracy": reward.accuracy,
        "format": reward.format,
        "base_format": reward.base_format,
        "anchor": reward.anchor,
        "tool": reward.tool,
        "penalty": reward.penalty,
        "call_attempts": reward.call_attempts,
        "invalid_calls": reward.invalid_calls,
        "tool_responses": reward.tool_responses,
        "degenerate": reward.degenerate,
        "flags": list(reward.flags),
    }


def _first_prompt(ep: Any) -> list[Message]:
    """The messages of the main trajectory before its first generation (the task's prompt)."""
    out = []
    for m in ep.main.messages:
        if m.role == "assistant":
            break
        out.append(m)
    return out
