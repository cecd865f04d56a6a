"""Which anchor parts an RL step places on tokens (`paravt.train.rl.scoring.token_parts`).

With sequence anchoring and `reward.overrides.anchor_tool_calls=true` only the tool-call parts go
on their tokens: the `<tool_call>` tags of a cut or broken call block are charged where they were
written, the well-formed ones credited, and the think/answer anchor stays in the scalar as the
reference has it."""

from __future__ import annotations

from pathlib import Path

import pytest

from paravt.core import parse_response
from paravt.rewards import RewardConfig
from paravt.train.recipe import load_recipe
from paravt.train.rl.scoring import ALL_PARTS, CALL_PARTS, _anchor_parts, token_parts

CALL = (
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 1, "end_time": 4}}</tool_call>'
)
# two crops, then a third call cut by the turn's token limit
CUT = (
    f"<think>I look twice.</think>{CALL}{CALL.replace('1', '5').replace('4', '8')}"
    + '<tool_call>{"na'
)


# tiny_paragrpo places the charges on tokens (run 9's setting); these tests start from the
# reference's placement (none) and switch each part on themselves
NO_PARTS = (
    "reward.overrides.anchor_tool_calls=false",
    "reward.overrides.anchor_format_issues=false",
    "advantage.no_credit_on_issues=false",
)


def recipe(tmp_path: Path, *extra: str):  # type: ignore[no-untyped-def]
    return load_recipe("tiny_paragrpo", [f"output_dir={tmp_path}", *NO_PARTS, *extra])


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ((), None),
        (("reward.overrides.anchor_tool_calls=true",), CALL_PARTS),
        (("advantage.token_level_anchoring=true",), ALL_PARTS),
        (
            ("advantage.token_level_anchoring=true", "reward.overrides.anchor_tool_calls=true"),
            ALL_PARTS,
        ),
        # no anchor weight (vanilla GRPO): nothing goes on tokens
        (("reward.preset=vanilla", "reward.overrides.anchor_tool_calls=true"), None),
    ],
)
def test_the_parts_on_tokens_follow_the_recipe(tmp_path: Path, extra, expected) -> None:  # type: ignore[no-untyped-def]
    r = recipe(tmp_path, *extra)
    assert token_parts(r.advantage, r.reward.build()) == expected


def test_sequence_anchoring_charges_the_cut_call_on_its_own_tags(tmp_path: Path) -> None:
    r = recipe(tmp_path, "reward.overrides.anchor_tool_calls=true")
    config: RewardConfig = r.reward.build()
    parsed = parse_response(CUT)
    # one (start, end) span per character: token i is character i
    offsets = [(i, i + 1) for i in range(len(CUT))]
    parts = {
        p.name: p for p in _anchor_parts(parsed, offsets, config, r.advantage, charges_only=False)
    }
    # no think/answer part (those stay in the scalar), no format issues part (off by default)
    assert set(parts) == {"tool_calls", "broken_calls"}
    assert parts["broken_calls"].value == pytest.approx(-0.3 * config.lambda_anchor)
    assert parts["tool_calls"].value == pytest.approx(0.3 * config.lambda_anchor)
    cut_at = CUT.rindex("<tool_call>")
    # the charge sits on the cut block's opening tag, nowhere else
    assert {CUT[i] for i in parts["broken_calls"].tokens} <= set("<tool_call>")
    assert min(parts["broken_calls"].tokens) == cut_at
    assert all(i < cut_at for i in parts["tool_calls"].tokens)
    # the call bodies (the windows the model picks) carry nothing
    body = CUT.index('{"name"')
    assert body not in parts["tool_calls"].tokens


def test_no_credit_without_charges_on_tokens_is_refused(tmp_path: Path) -> None:
    """The switch would silently do nothing: the recipe says so and names the fix."""
    from paravt.train.recipe import RecipeError

    with pytest.raises((RecipeError, ValueError), match="anchor_format_issues=true"):
        recipe(tmp_path, "advantage.no_credit_on_issues=true")
    r = recipe(
        tmp_path,
        "advantage.no_credit_on_issues=true",
        "reward.overrides.anchor_format_issues=true",
    )
    assert token_parts(r.advantage, r.reward.build()) == CALL_PARTS


def test_without_the_switch_sequence_anchoring_places_nothing(tmp_path: Path) -> None:
    r = recipe(tmp_path)
    parsed = parse_response(CUT)
    offsets = [(i, i + 1) for i in range(len(CUT))]
    assert _anchor_parts(parsed, offsets, r.reward.build(), r.advantage, charges_only=False) == []


# two crops, then the turn runs on past its calls until the token limit cuts it
RUNON = f"<think>I look twice.</think>{CALL}{CALL.replace('1', '5').replace('4', '8')}"
RUNON += " no square.</think><answer>blue"


def test_a_turn_that_runs_on_after_its_calls_is_charged_on_the_run_on_text(
    tmp_path: Path,
) -> None:
    r = recipe(
        tmp_path,
        "reward.overrides.anchor_tool_calls=true",
        "reward.overrides.anchor_format_issues=true",
    )
    config: RewardConfig = r.reward.build()
    parsed = parse_response(RUNON)
    offsets = [(i, i + 1) for i in range(len(RUNON))]
    parts = {
        p.name: p for p in _anchor_parts(parsed, offsets, config, r.advantage, charges_only=False)
    }
    assert set(parts) == {"tool_calls", "format_issues"}  # both calls are well formed
    assert parts["format_issues"].value == pytest.approx(-0.3 * config.lambda_anchor)
    charged = "".join(RUNON[i] for i in parts["format_issues"].tokens)
    assert charged == "no square.</think><answer>blue"
    # off by default: the same turn under the recipe's reward places nothing there
    plain = recipe(tmp_path, "reward.overrides.anchor_tool_calls=true")
    names = {
        p.name
        for p in _anchor_parts(
            parsed, offsets, plain.reward.build(), plain.advantage, charges_only=False
        )
    }
    assert names == {"tool_calls"}


@pytest.mark.slow
def test_charged_tokens_get_no_positive_outcome_credit(
    tiny_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`advantage.no_credit_on_issues`: the tokens of the parser's issues (the untrained model's
    text outside the tags, here) are never pushed up because their episode scored well; the other
    tokens keep the outcome's share."""
    import paravt.train.rl.run as run_module
    from paravt.train.rl import scoring, train_rl

    from .rl_helpers import EveryOtherScripted, examples
    from .test_rl import tiny_rl_recipe

    seen: list[tuple[list[float], set[int], float]] = []

    def recording(ro, engine, reward_config, advantage, **kw):  # type: ignore[no-untyped-def]
        seqs = scoring.training_sequences(ro, engine, reward_config, advantage, **kw)
        prefix = "<think>\n" if kw["think_prefix"] else ""
        for ep, r, scale in zip(ro.episodes, ro.rewards, ro.anchor_scales):
            main = next(s for s in seqs if s.token_ids is ep.main.token_ids)
            parts = scoring._episode_anchor_parts(ep, r, engine, prefix, reward_config, advantage)
            charged = {i for _, value, toks in parts if value < 0 for i in toks}
            seen.append((list(main.advantages or []), charged, scale))
        return seqs

    monkeypatch.setattr(run_module, "training_sequences", recording)
    exs, frames = examples()
    recipe = tiny_rl_recipe(
        tiny_model_path,
        tmp_path / "run",
        "max_steps=1",
        "reward.overrides.anchor_tool_calls=true",
        "reward.overrides.anchor_format_issues=true",
        "advantage.no_credit_on_issues=true",
        # the released format rule: the untrained model's text never parses, so under the
        # presets' rule no episode would earn format and the groups' outcomes would not differ
        "reward.overrides.format_credit=tags",
        "checkpoint.save_final=false",
    )
    train_rl(recipe, examples=exs, frames=frames, wrap_engine=EveryOtherScripted)
    pushed_up = [
        (advs, charged, scale)
        for advs, charged, scale in seen
        if charged and max(set(advs), key=advs.count) > 0
    ]
    assert pushed_up, "no episode with a positive outcome share had charged tokens"
    for advs, charged, scale in pushed_up:
        bound = scale * 0.5 * 0.3 * 2  # lambda x a charge's size x two turns, in advantage units
        assert all(advs[i] <= bound + 1e-6 for i in charged), [advs[i] for i in charged]
        assert max(set(advs), key=advs.count) > bound  # the rest keeps the outcome's share
