"""What every adapter needs: completion text from any format, and the sample's ground truth."""

from __future__ import annotations

import contextlib
import json
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from typing import Any

from paravt.core import content_text
from paravt.rewards.accuracy import as_text
from paravt.rewards.config import RewardConfig
from paravt.rewards.score import RewardBreakdown, score

ANSWER_KEYS = ("answer", "ground_truth", "solution", "label")
MAX_FIELD_CHARS = 100_000


@dataclass(frozen=True)
class Sample:
    """The ground truth of one sample, as found in a dataset row."""

    answer: str
    question_type: str | None = None
    options: tuple[str, ...] | None = None
    question: str = ""


def _mapping(value: Any) -> Mapping[str, Any] | None:
    """A dict, or a JSON object string (the reference stores `extra_info` as JSON), else None."""
    if isinstance(value, Mapping):
        return value
    if isinstance(value, str) and value.lstrip().startswith("{") and len(value) < MAX_FIELD_CHARS:
        try:
            obj = json.loads(value)
        except ValueError:
            return None
        return obj if isinstance(obj, dict) else None
    return None


def _options(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, Mapping):
        return tuple(f"{k}. {v}" for k, v in value.items())
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def row_field(fields: Mapping[str, Any], name: str) -> Any:
    """A row's field at the top level, else in its `extra_info` or `reward_model` (dicts or JSON
    objects, read as `sample_from` reads them); None when absent."""
    if fields.get(name) is not None:
        return fields[name]
    for key in ("extra_info", "reward_model"):
        m = _mapping(fields.get(key))
        if m and m.get(name) is not None:
            return m[name]
    return None


def sample_from(answer: Any = None, **fields: Any) -> Sample:
    """Build a `Sample` from a row's fields.

    The answer is `answer`, else any of ground_truth / solution / label; a dict or JSON-object
    answer (and an `extra_info` / `reward_model` dict) may carry `answer`, `question_type`,
    `options`, `question`. Explicit top-level fields win over nested ones.
    """
    nested: dict[str, Any] = {}
    for key in ("reward_model", "extra_info"):
        m = _mapping(fields.get(key))
        if m:
            nested.update({k: v for k, v in m.items() if v is not None})
    if answer is None:
        answer = next((fields[k] for k in ANSWER_KEYS if fields.get(k) is not None), None)
    m = _mapping(answer)
    if m is not None:
        nested.update({k: v for k, v in m.items() if v is not None})
        answer = next((m[k] for k in ANSWER_KEYS if m.get(k) is not None), None)
    if answer is None:
        answer = next((nested[k] for k in ANSWER_KEYS if nested.get(k) is not None), "")
    qt = fields.get("question_type") or nested.get("question_type")
    opts = fields.get("options") if fields.get("options") is not None else nested.get("options")
    question = fields.get("question") or nested.get("question") or ""
    return Sample(
        answer=as_text(answer),
        question_type=str(qt) if qt is not None else None,
        options=_options(opts),
        question=str(question)[:MAX_FIELD_CHARS],
    )


@dataclass(frozen=True)
class Completion:
    """What the model wrote, and how many tool responses the environment gave back in between.

    `tool_responses` is None for plain text (the parser counts `<tool_response>` blocks in it);
    for chat messages it is the number of `tool`-role messages, which are never part of `text`.
    """

    text: str
    tool_responses: int | None = None


def _call_text(call: Any) -> str:
    """One parsed tool call back as the model wrote it: `<tool_call>{"name", "arguments"}</tool_call>`.

    TRL's parser gives `{"type": "function", "function": {"name", "arguments"}}` (the flat
    `{"name", "arguments"}` form is read too); `arguments` is a dict, or a JSON string as in the
    OpenAI format. A string that is not JSON stays a string, so our parser reports the call as
    invalid, as it would in the raw text."""
    if not isinstance(call, Mapping):
        return f"<tool_call>{call}</tool_call>"
    function = call.get("function")
    body = function if isinstance(function, Mapping) else call
    arguments = body.get("arguments")
    if isinstance(arguments, str) and len(arguments) < MAX_FIELD_CHARS:
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments)
    payload = {"name": body.get("name"), "arguments": {} if arguments is None else arguments}
    return f"<tool_call>{json.dumps(payload, ensure_ascii=False, default=str)}</tool_call>"


def _assistant_text(message: Mapping[str, Any], *, cut: bool = False) -> str:
    """An assistant message back as the model's own text.

    A chat parser (TRL's `parse_response` with the tokenizer's response template, vLLM's reasoning
    and tool parsers) takes the text apart: `<think>` into `reasoning_content` (or `reasoning`),
    `<tool_call>` blocks into `tool_calls`, the rest into `content`. It is put back in the order a
    Qwen3 turn is written and rendered: `<think>reasoning</think>`, the content, one
    `<tool_call>` per call. A message with only `content` is its content, unchanged. `cut`: the
    generation stopped at the length limit; a turn holding only reasoning was cut inside
    `<think>`, so the block stays open (the parser cannot say whether `</think>` was written).
    """
    content = content_text(message.get("content"))
    reasoning = message.get("reasoning_content")
    if reasoning is None:
        reasoning = message.get("reasoning")
    calls = message.get("tool_calls")
    if reasoning is None and not calls:
        return content
    parts = []
    if isinstance(reasoning, str):
        open_think = cut and not content and not calls
        parts.append(f"<think>{reasoning}" if open_think else f"<think>{reasoning}</think>")
    if content:
        parts.append(content)
    if isinstance(calls, Sequence) and not isinstance(calls, str):
        parts.extend(_call_text(call) for call in calls)
    return "\n".join(parts)


def split_completion(completion: Any, *, truncated: bool = False) -> Completion:
    """The model's own text of a completion, and the count of environment tool responses.

    A completion is a string, or chat messages (`[{"role", "content"}, ...]`, content a string or
    a list of `{"type": "text", "text": ...}` parts). From messages, the assistant turns are
    joined with newlines (the transcript the model wrote) and `tool`-role messages are counted,
    not copied: the environment wrote them, so they are never graded as the answer nor parsed as
    model-written tags. An assistant turn that a chat parser took apart (TRL's tool mode:
    `reasoning_content`, `content`, `tool_calls`) is put back together as the model wrote it,
    `<think>reasoning</think>`, content, `<tool_call>{"name", "arguments"}</tool_call>` per call
    (`_assistant_text`), so it scores as the raw completion text does. `truncated=True` (the
    completion ended at the length limit, not at an end-of-turn token) leaves the last turn's
    `<think>` open when that turn holds nothing else, as it was in the raw text.
    """
    if isinstance(completion, str):
        return Completion(completion)
    if isinstance(completion, Mapping):
        completion = [completion]
    if not isinstance(completion, Sequence):
        return Completion("" if completion is None else str(completion))
    parts: list[str] = []
    tool_messages = 0
    last = len(completion) - 1
    for k, message in enumerate(completion):
        if not isinstance(message, Mapping):
            parts.append(str(message))
        elif message.get("role") == "tool":
            tool_messages += 1
        elif message.get("role") in (None, "assistant"):
            parts.append(_assistant_text(message, cut=truncated and k == last))
    return Completion("\n".join(parts), tool_messages)


def completion_text(completion: Any) -> str:
    """The model's own text of a completion (see `split_completion`; tool messages left out)."""
    return split_completion(completion).text


_SCORERS: dict[int, tuple[RewardConfig, Callable[[str, Sample, int | None], RewardBreakdown]]] = {}
_CONFIGS: dict[str, RewardConfig] = {}


def _scorer(config: RewardConfig) -> Callable[[str, Sample, int | None], RewardBreakdown]:
    entry = _SCORERS.get(id(config))
    if entry is None or entry[0] is not config:
        if len(_SCORERS) > 64:
            _SCORERS.clear()

        @lru_cache(maxsize=4096)
        def run(text: str, sample: Sample, tool_responses: int | None) -> RewardBreakdown:
            return score(
                text,
                sample.answer,
                sample.question_type,
                config,
                options=sample.options,
                question=sample.question,
                tool_responses=tool_responses,
            )

        entry = _SCORERS[id(config)] = (config, run)
    return entry[1]


def cached_score(
    config: RewardConfig, completion: str | Completion, sample: Sample
) -> RewardBreakdown:
    """`score` memoised per config, so several per-component callables score each completion once.

    A `Completion` passes its tool-response count on to `score(..., tool_responses=)`."""
    if isinstance(completion, Completion):
        return _scorer(config)(completion.text, sample, completion.tool_responses)
    return _scorer(config)(completion, sample, None)


def score_row(
    config: RewardConfig, completion: Any, fields: Mapping[str, Any], *, truncated: bool = False
) -> RewardBreakdown:
    """One framework row scored: its completion in any format (`split_completion`; `truncated`
    leaves a cut-off last `<think>` open) against the ground truth in the row's `fields`
    (`sample_from`), memoised per config (`cached_score`). What every adapter does per row."""
    return cached_score(
        config, split_completion(completion, truncated=truncated), sample_from(**fields)
    )


def resolve_config(config: RewardConfig | Mapping[str, Any] | str | None) -> RewardConfig:
    """A `RewardConfig` from itself, a dict of fields, a preset name (`paravt.rewards.PRESETS`: 'paragrpo',
    'vanilla', 'reference_paragrpo', 'reference_vanilla') or None
    (PARA-GRPO). Names and dicts resolve to one shared object each (cheap to call per sample)."""
    if isinstance(config, RewardConfig):
        return config
    if config is None:
        config = "paragrpo"
    key = (
        config if isinstance(config, str) else json.dumps(dict(config), sort_keys=True, default=str)
    )
    cached = _CONFIGS.get(key)
    if cached is not None:
        return cached
    if isinstance(config, str):
        resolved = RewardConfig.preset(config)
    else:
        resolved = RewardConfig.model_validate(dict(config))
    if len(_CONFIGS) > 64:
        _CONFIGS.clear()
    _CONFIGS[key] = resolved
    return resolved


def require_sequence_anchoring(config: RewardConfig, framework: str) -> None:
    if config.anchoring != "sequence":
        raise ValueError(
            f"{framework} reward functions return one scalar per completion; use "
            "RewardConfig(anchoring='sequence') here and token-level anchoring in the trainer"
        )


class FrameworkVersionWarning(UserWarning):
    """The installed RL framework is outside the range its adapter was tested with."""


# Inclusive (lowest, highest) versions each adapter was run against through the framework's own
# calling code (`nox -s integrations`); widen a range only together with that session's pins.
TESTED_VERSIONS: dict[str, tuple[str, str]] = {
    "trl": ("1.16.0", "1.16.0"),
    "verl": ("0.9.1", "0.9.1"),
    "openrlhf": ("0.11.2", "0.11.2"),
    "areal": ("1.0.4", "1.0.4"),
}
_CHECKED: set[str] = set()


def _release(version: str) -> tuple[int, ...]:
    """The leading release numbers of a version string: '0.9.1.dev0' -> (0, 9, 1)."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip().lstrip("v"))
    return tuple(int(x) for x in match.group(0).split(".")) if match else ()


def check_framework_version(framework: str) -> None:
    """Warn once per process when `framework` is installed at a version outside
    `TESTED_VERSIONS[framework]` (a `FrameworkVersionWarning` naming the tested range). Silent when
    the framework is not installed (the adapters are plain functions, callable without it)."""
    if framework in _CHECKED:
        return
    _CHECKED.add(framework)
    low, high = TESTED_VERSIONS[framework]
    try:
        installed = metadata.version(framework)
    except metadata.PackageNotFoundError:
        return
    got = _release(installed)
    if not got or not (_release(low) <= got[: len(_release(high))] <= _release(high)):
        tested = low if low == high else f"{low} to {high}"
        warnings.warn(
            f"paravt.rewards.integrations: {framework} {installed} is installed, but this adapter "
            f"was tested with {framework} {tested} only; its calling convention may have changed. "
            f"Check the {framework} section of the paravt-rewards README, or pin {framework}=={high}.",
            FrameworkVersionWarning,
            stacklevel=3,
        )
