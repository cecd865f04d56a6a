"""An LLM judge over an OpenAI-compatible endpoint, with timeout, retries and an on-disk cache.

`httpx` is imported only when a request is made (extra `paravt-rewards[judge]`). A judge that
cannot answer returns the explicit outcome "unavailable"; `score` then falls back to token F1 and
flags the completion, and `LLMJudge.stats` counts it, so an outage is never silently scored 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from paravt.rewards.config import JudgeConfig

JudgeOutcome = Literal["ok", "cached", "unavailable"]

JUDGE_PROMPT = (
    "You grade answers to questions about a video. Compare the candidate answer with the "
    "reference answer. Reply with exactly one word: CORRECT if the candidate means the same as "
    "the reference, otherwise INCORRECT.\n\nQuestion: {question}\nReference answer: {reference}\n"
    "Candidate answer: {prediction}"
)


@dataclass(frozen=True)
class JudgeResult:
    """A verdict: `score` is 1.0/0.0, or None when `outcome == "unavailable"` (see `error`)."""

    score: float | None
    outcome: JudgeOutcome
    error: str | None = None


def parse_verdict(reply: str) -> float | None:
    """CORRECT -> 1.0, INCORRECT -> 0.0 (first such word wins, case-insensitive), else None."""
    for word in reply.upper().replace(".", " ").replace(",", " ").split()[:64]:
        if word in ("CORRECT", "YES"):
            return 1.0
        if word in ("INCORRECT", "NO", "WRONG"):
            return 0.0
    return None


class LLMJudge:
    """Grades (question, prediction, reference) through `POST {base_url}/chat/completions`.

    `transport` (an `httpx.BaseTransport`) is for tests. `stats` counts outcomes.
    """

    def __init__(self, config: JudgeConfig, *, transport: Any = None) -> None:
        self.config = config
        self.stats: Counter[str] = Counter()
        self._transport = transport
        self._client: Any = None
        self._cache = Path(config.cache_dir) if config.cache_dir else None

    def _key(self, prompt: str) -> str:
        return hashlib.sha256(f"{self.config.model}\n{prompt}".encode()).hexdigest()

    def _cached(self, key: str) -> float | None:
        if self._cache is None:
            return None
        path = self._cache / f"{key}.json"
        try:
            value = json.loads(path.read_text())["score"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return float(value) if value in (0, 1, 0.0, 1.0) else None

    def _store(self, key: str, score: float) -> None:
        if self._cache is None:
            return
        try:
            self._cache.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self._cache, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump({"score": score, "model": self.config.model}, f)
            os.replace(tmp, self._cache / f"{key}.json")  # atomic: readers never see half a file
        except OSError:
            pass  # a read-only cache must not fail scoring

    def _http(self) -> Any:
        if self._client is None:
            try:
                import httpx
            except ImportError as exc:
                raise RuntimeError(
                    "the LLM judge needs httpx: pip install 'paravt-rewards[judge]'"
                ) from exc
            headers = {}
            if self.config.api_key_env and os.environ.get(self.config.api_key_env):
                headers["Authorization"] = f"Bearer {os.environ[self.config.api_key_env]}"
            self._client = httpx.Client(
                base_url=self.config.base_url.rstrip("/"),
                timeout=self.config.timeout_s,
                headers=headers,
                transport=self._transport,
            )
        return self._client

    def judge(self, question: str, prediction: str, reference: str) -> JudgeResult:
        """One verdict. Never raises: failures after all retries return outcome "unavailable"."""
        n = self.config.max_chars
        prompt = JUDGE_PROMPT.format(
            question=question[:n], prediction=prediction[:n], reference=reference[:n]
        )
        key = self._key(prompt)
        cached = self._cached(key)
        if cached is not None:
            self.stats["cached"] += 1
            return JudgeResult(cached, "cached")
        error = "no attempt made"
        budget = self.config.deadline_s
        deadline = None if budget is None else time.monotonic() + budget
        for attempt in range(self.config.max_retries + 1):
            if attempt:
                pause = self.config.backoff_s * 2 ** (attempt - 1)
                if deadline is not None:
                    pause = min(pause, max(0.0, deadline - time.monotonic()))
                time.sleep(pause)
            timeout = self.config.timeout_s
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    error = (
                        f"no verdict within the judge's {budget:g} s budget (deadline_s); {error}"
                    )
                    break
                timeout = min(timeout, left)
            try:
                response = self._http().post(
                    "/chat/completions",
                    json={
                        "model": self.config.model,
                        "messages": [{"role": "user", "content": prompt}],
                        "temperature": 0.0,
                        "max_tokens": 8,
                    },
                    timeout=timeout,
                )
                if response.status_code >= 400:
                    error = f"HTTP {response.status_code} from {self.config.base_url}"
                    if response.status_code < 500 and response.status_code != 429:
                        break  # a client error does not get better by retrying
                    continue
                reply = response.json()["choices"][0]["message"]["content"]
                verdict = parse_verdict(str(reply))
                if verdict is None:
                    error = f"judge reply is not CORRECT/INCORRECT: {str(reply)[:80]!r}"
                    continue
            except RuntimeError as exc:
                error = str(exc)
                break
            except Exception as exc:  # network errors, timeouts, malformed JSON
                error = f"{type(exc).__name__}: {str(exc)[:160]}"
                continue
            self._store(key, verdict)
            self.stats["ok"] += 1
            return JudgeResult(verdict, "ok")
        self.stats["unavailable"] += 1
        return JudgeResult(None, "unavailable", error)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


_JUDGES: dict[JudgeConfig, LLMJudge] = {}


def judge_for(config: JudgeConfig) -> LLMJudge:
    """One shared `LLMJudge` per configuration (so its connection pool and stats persist)."""
    judge = _JUDGES.get(config)
    if judge is None:
        judge = _JUDGES[config] = LLMJudge(config)
    return judge
