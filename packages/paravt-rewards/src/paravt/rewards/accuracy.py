"""Accuracy terms over an answer string and a ground truth, each in [0, 1].

These normalise answer *strings* (letters, times, words); the structure of a response (where the
answer is) comes from `paravt.core.parse_response`. Inputs are cut to `MAX_ANSWER_CHARS` first, so
every function is linear and bounded whatever the model wrote.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

from paravt.core import parse_time_s

MAX_ANSWER_CHARS = 16_384  # answers longer than this are graded on their first 16 KiB

Options = Sequence[str] | Mapping[str, str] | None

_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_PUNCT_BYTES = string.punctuation.encode()
_TIME_TOKEN = re.compile(r"\d+(?::\d+){0,2}(?:\.\d+)?")


def _cut(text: str) -> str:
    return text[:MAX_ANSWER_CHARS]


def as_text(value: Any) -> str:
    """Any ground truth as text: strings stay, `[s, e]` pairs become `"[s, e]"`, None is `""`."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return f"[{value[0]}, {value[1]}]"
    try:
        return str(value)
    except Exception:  # a hostile __str__ must not break scoring
        return ""


def normalize_text(text: str) -> str:
    """Lowercase, drop English articles and ASCII punctuation, collapse whitespace."""
    if len(text) == 1:  # a bare letter (most MCQ answers and truths): the same rules, directly
        char = text.lower()
        return "" if char == "a" or char in string.punctuation or char.isspace() else char
    text = _ARTICLES.sub(" ", _cut(text).lower())
    if text.isascii():  # bytes.translate deletes characters ~3x faster than str.translate
        text = text.encode().translate(None, _PUNCT_BYTES).decode()
    else:
        text = text.translate(_PUNCT)
    return " ".join(text.split())


def exact_match(prediction: str, ground_truth: str) -> float:
    """1.0 when both normalise to the same non-empty string, else 0.0."""
    p, g = normalize_text(prediction), normalize_text(ground_truth)
    return 1.0 if p and p == g else 0.0


def token_f1(prediction: str, ground_truth: str) -> float:
    """SQuAD token F1 over normalised words (multiset overlap). 0.0 if either side is empty.

    The reference counts the overlap as a *set*, which under-credits repeated words; the multiset
    form is the standard definition.
    """
    return token_f1_normalized(normalize_text(prediction), normalize_text(ground_truth))


def token_f1_normalized(prediction: str, ground_truth: str) -> float:
    """`token_f1` of two texts that are already `normalize_text`-ed."""
    pred, gold = prediction.split(), ground_truth.split()
    if not pred or not gold:
        return 0.0
    # multiset intersection size with plain dicts (collections.Counter costs more here)
    remaining: dict[str, int] = {}
    for word in gold:
        remaining[word] = remaining.get(word, 0) + 1
    common = 0
    for word in pred:
        left = remaining.get(word)
        if left:
            common += 1
            remaining[word] = left - 1
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


# ------------------------------------------------------------------------------------------------
# Multiple choice


def _letter_patterns(letters: str) -> list[re.Pattern[str]]:
    cls = "[" + re.escape(letters) + "]"
    # after "answer is" / "answer:" / "option": a capital letter, or a small one that ends the
    # answer ("answer: b."); a small letter followed by words is an article or a word ("The
    # answer is a red car" names no option A)
    letter = rf"\(?(?:({cls})\b|({cls.lower()})\)?[.):]?\s*$)"
    return [
        re.compile(rf"^\(?({cls})\)?[.):]?$"),  # B, (B), B., B)
        re.compile(rf"^\(?({cls})[.):]\s"),  # "B. text", "(B) text", "B) text"
        re.compile(rf"^\(({cls})\)\s"),
        re.compile(rf"(?i:answer\s+is)\s*(?:[:\-]\s*)?{letter}"),
        re.compile(rf"(?i:answer)\s*[:\-]\s*{letter}"),
        re.compile(rf"\b(?i:option)\s*{letter}"),
    ]


_PATTERN_CACHE: dict[str, tuple[list[re.Pattern[str]], re.Pattern[str]]] = {}
_SAID = re.compile(r"(?i:answer\s+is|answer\s*[:\-])\s*(.+?)\s*$", re.DOTALL)


def _patterns(letters: str) -> tuple[list[re.Pattern[str]], re.Pattern[str]]:
    cached = _PATTERN_CACHE.get(letters)
    if cached is None:
        lone = re.compile(r"\b([" + re.escape(letters) + r"])\b")
        cached = (_letter_patterns(letters), lone)
        _PATTERN_CACHE[letters] = cached
    return cached


def option_texts(options: Options, letters: str = "ABCDEFGHIJ") -> dict[str, str]:
    """Options as {letter: text}. A list gets letters in order; a leading "B." on item B is dropped."""
    if options is None or isinstance(options, str):
        return {}
    out: dict[str, str] = {}
    try:
        if isinstance(options, Mapping):
            items = [(str(k).strip().upper()[:1], str(v)) for k, v in options.items()]
        else:
            items = list(zip(letters, (str(o) for o in options)))
    except Exception:
        return {}
    pats, _ = _patterns(letters)
    for letter, text in items:
        if not letter or letter not in letters:
            continue
        text = _cut(text).strip()
        m = pats[1].match(text) or pats[2].match(text)
        if m and m.group(1) == letter:
            text = text[m.end() :].strip()
        out[letter] = text
    return out


def extract_choice(answer: str, options: Options = None, letters: str = "ABCDEFGHIJ") -> str | None:
    """The option letter an answer names, or None.

    Accepts `B`, `(B)`, `B.`, `B) text`, `Option B`, `The answer is B`, `Answer: B` (a small
    letter only where it ends the answer: "the answer is a red car" names no option A), an
    option's text when `options` are given (alone or after "the answer is"), and as a last
    resort a single distinct capital letter standing alone in the answer (the reference's
    loosest rule).
    """
    text = _cut(answer).strip()
    if not text:
        return None
    pats, lone = _patterns(letters)
    upper = text.upper()
    if len(upper) <= 4:
        m = pats[0].match(upper)
        if m:
            return m.group(1)
    for pat in pats[1:]:
        m = pat.search(text)
        found = m and next((g for g in m.groups() if g), None)
        if found and found.upper() in letters:
            return found.upper()
    if options is not None:
        said = _SAID.search(text)  # "The answer is a red car": the option's text after the phrase
        for candidate in (text, said.group(1) if said else ""):
            norm = normalize_text(candidate)
            if norm:
                for letter, option in option_texts(options, letters).items():
                    if normalize_text(option) == norm:
                        return letter
    found = {m.group(1) for m in lone.finditer(text)}
    if len(found) == 1:
        return found.pop()
    return None


def mcq_accuracy(
    prediction: str, ground_truth: str, options: Options = None, letters: str = "ABCDEFGHIJ"
) -> float:
    """1.0 when the prediction names the ground-truth option, else 0.0.

    The ground truth may be a letter in any accepted form or, with `options`, an option's text.
    """
    gold_text, answer = ground_truth.strip().upper(), prediction.strip().upper()
    if len(gold_text) == 1 and gold_text in letters and len(answer) == 1 and answer in letters:
        return 1.0 if answer == gold_text else 0.0  # bare letters, the commonest case
    gold = extract_choice(ground_truth, options, letters)
    if gold is None:
        return 0.0
    return 1.0 if extract_choice(prediction, options, letters) == gold else 0.0


# ------------------------------------------------------------------------------------------------
# Temporal grounding


def parse_window(text: str) -> tuple[float, float] | None:
    """The first two times in `text` as a window `(start_s, end_s)`, or None.

    A number with colons is a clock (`MM:SS`, `HH:MM:SS`); any other number is seconds, so
    `[01:05, 80.5]` is (65, 80.5). A reversed pair is swapped (the reference scores it 0); equal
    times give None (a zero-length window has no IoU).
    """
    times: list[float] = []
    for m in _TIME_TOKEN.finditer(_cut(text)):
        token = m.group(0)
        if ":" not in token:  # digits with an optional fraction: plain, finite, non-negative
            times.append(float(token))
        else:
            try:
                times.append(parse_time_s(token))
            except ValueError:
                continue
        if len(times) == 2:
            break
    if len(times) < 2:
        return None
    start, end = sorted(times)
    return None if end <= start else (start, end)


def temporal_iou(prediction: str, ground_truth: str) -> float:
    """Intersection over union of the predicted and ground-truth windows; 0.0 if either is absent."""
    pred, gold = parse_window(prediction), parse_window(ground_truth)
    if pred is None or gold is None:
        return 0.0
    inter = max(0.0, min(pred[1], gold[1]) - max(pred[0], gold[0]))
    union = (pred[1] - pred[0]) + (gold[1] - gold[0]) - inter
    return inter / union if union > 0 else 0.0
