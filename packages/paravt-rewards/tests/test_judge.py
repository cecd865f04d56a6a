from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from paravt.rewards import JudgeConfig, LLMJudge, RewardConfig, score


def transport(replies: list[object], seen: list[dict[str, object]]) -> httpx.MockTransport:
    """Serves `replies` in order: a string is a chat reply, an int an HTTP status, an exception
    is raised."""

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        reply = replies.pop(0) if replies else 500
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, int):
            return httpx.Response(reply)
        return httpx.Response(200, json={"choices": [{"message": {"content": reply}}]})

    return httpx.MockTransport(handler)


def make(tmp_path: Path, replies: list[object], **kw: object) -> tuple[LLMJudge, list[dict]]:
    seen: list[dict[str, object]] = []
    cfg = JudgeConfig(
        base_url="http://judge.local/v1",
        model="judge-1",
        api_key_env=None,
        backoff_s=0.0,
        cache_dir=str(tmp_path / "cache"),
        **kw,  # type: ignore[arg-type]
    )
    return LLMJudge(cfg, transport=transport(replies, seen)), seen


def test_the_judge_grades_through_the_chat_completions_endpoint(tmp_path: Path) -> None:
    judge, seen = make(tmp_path, ["CORRECT"])
    result = judge.judge("What colour?", "crimson", "red")
    assert (result.score, result.outcome) == (1.0, "ok")
    assert seen[0]["model"] == "judge-1"
    assert "crimson" in str(seen[0]["messages"])


def test_verdicts_are_cached_on_disk_across_judges(tmp_path: Path) -> None:
    first, _ = make(tmp_path, ["INCORRECT"])
    assert first.judge("q", "blue", "red").score == 0.0
    second, seen = make(tmp_path, [])
    result = second.judge("q", "blue", "red")
    assert (result.score, result.outcome, seen) == (0.0, "cached", [])


def test_server_errors_and_timeouts_are_retried(tmp_path: Path) -> None:
    judge, seen = make(tmp_path, [503, httpx.ReadTimeout("slow"), "CORRECT"], max_retries=2)
    assert judge.judge("q", "a", "b").outcome == "ok"
    assert len(seen) == 3


def test_an_unreachable_judge_is_reported_unavailable_and_counted(tmp_path: Path) -> None:
    judge, seen = make(tmp_path, [500, 500, 500], max_retries=2)
    result = judge.judge("q", "a", "b")
    assert (result.score, result.outcome) == (None, "unavailable")
    assert "HTTP 500" in (result.error or "")
    assert judge.stats["unavailable"] == 1 and len(seen) == 3


def test_client_errors_are_not_retried(tmp_path: Path) -> None:
    judge, seen = make(tmp_path, [401, "CORRECT"], max_retries=3)
    assert judge.judge("q", "a", "b").outcome == "unavailable"
    assert len(seen) == 1


def test_an_unparseable_reply_is_not_a_verdict(tmp_path: Path) -> None:
    judge, _ = make(tmp_path, ["maybe?"], max_retries=0)
    assert judge.judge("q", "a", "b").outcome == "unavailable"


def test_score_falls_back_to_f1_and_flags_an_unavailable_judge(tmp_path: Path) -> None:
    judge, _ = make(tmp_path, [500], max_retries=0)
    cfg = RewardConfig.paragrpo(default_accuracy="llm")
    r = score("<answer>a red square</answer>", "red circle", "oe", cfg, judge=judge)
    assert r.judge == "unavailable" and "judge_unavailable" in r.flags
    assert r.accuracy == pytest.approx(0.5)  # token F1, not a silent 0
    assert r.components()["flag/judge_unavailable"] == 1.0


def test_score_uses_the_judge_verdict_when_it_answers(tmp_path: Path) -> None:
    judge, _ = make(tmp_path, ["CORRECT"])
    cfg = RewardConfig.paragrpo(default_accuracy="llm")
    r = score("<answer>crimson</answer>", "red", "oe", cfg, judge=judge, question="Colour?")
    assert (r.accuracy, r.judge) == (1.0, "ok")


def test_llm_mode_without_a_judge_config_is_flagged() -> None:
    r = score("<answer>crimson</answer>", "red", "oe", RewardConfig(default_accuracy="llm"))
    assert r.judge == "unavailable" and "judge_not_configured" in r.flags


def test_a_slow_judge_stops_at_its_deadline_and_is_unavailable(tmp_path: Path) -> None:
    """A judge that keeps failing slowly gives up at `deadline_s` (all attempts and back-offs
    together), reports the budget, and each request gets at most the time left."""
    import time

    seen: list[dict[str, object]] = []
    timeouts: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        timeouts.append(float(request.extensions["timeout"]["read"]))
        time.sleep(0.2)
        return httpx.Response(503)

    cfg = JudgeConfig(
        base_url="http://judge.local/v1",
        model="judge-1",
        api_key_env=None,
        timeout_s=30.0,
        max_retries=10,
        backoff_s=0.1,
        deadline_s=0.5,
    )
    judge = LLMJudge(cfg, transport=httpx.MockTransport(handler))
    t0 = time.monotonic()
    result = judge.judge("q", "a", "b")
    assert result.outcome == "unavailable" and "0.5 s budget" in (result.error or "")
    assert time.monotonic() - t0 < 1.0 and 1 <= len(seen) < 11
    assert max(timeouts) <= 0.5 and timeouts == sorted(timeouts, reverse=True)
