"""What every adapter needs: completion text from any format, and the sample's ground truth."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

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


def completion_text(completion: Any) -> str:
    """Plain text of a completion: a string, or chat messages (`[{"role", "content"}, ...]`,
    content a string or a list of `{"type": "text", "text": ...}` parts). Tool messages are
    rendered inside `<tool_response>` so a tool answer is visible to the reward."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        completion = [completion]
    if not isinstance(completion, Sequence):
        return "" if completion is None else str(completion)
    parts: list[str] = []
    for message in completion:
        if not isinstance(message, Mapping):
            parts.append(str(message))
            continue
        content = message.get("content")
        if isinstance(content, str):
            text = content
        elif isinstance(content, Sequence):
            text = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        else:
            text = ""
        if message.get("role") == "tool":
            text = f"<tool_response>{text}</tool_response>"
        parts.append(text)
    return "\n".join(parts)


_SCORERS: dict[int, tuple[RewardConfig, Callable[[str, Sample], RewardBreakdown]]] = {}
_CONFIGS: dict[str, RewardConfig] = {}


def _scorer(config: RewardConfig) -> Callable[[str, Sample], RewardBreakdown]:
    entry = _SCORERS.get(id(config))
    if entry is None or entry[0] is not config:
        if len(_SCORERS) > 64:
            _SCORERS.clear()

        @lru_cache(maxsize=4096)
        def run(text: str, sample: Sample) -> RewardBreakdown:
            return score(
                text,
                sample.answer,
                sample.question_type,
                config,
                options=sample.options,
                question=sample.question,
            )

        entry = _SCORERS[id(config)] = (config, run)
    return entry[1]


def cached_score(config: RewardConfig, text: str, sample: Sample) -> RewardBreakdown:
    """`score` memoised per config, so several per-component callables score each completion once."""
    return _scorer(config)(text, sample)


def resolve_config(config: RewardConfig | Mapping[str, Any] | str | None) -> RewardConfig:
    """A `RewardConfig` from itself, a dict of fields, a preset name ('paragrpo', 'vanilla') or None
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
        presets = {"paragrpo": RewardConfig.paragrpo, "vanilla": RewardConfig.vanilla}
        if config not in presets:
            raise ValueError(f"unknown reward preset {config!r}; use 'paragrpo' or 'vanilla'")
        resolved = presets[config]()
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
