"""The miniature's tool prior: what its stage trains on, and what of it stays in the cold start.

Issue 45's probes found the two settings a tool worth calling and a surviving prior need: the
prior stage learns the sub-agents' reports too (perception), and a share of the prior's calling
traces stays in the cold start's data. A user who trains a task with them relies on the rows
being the ones the settings name, on the same draw for the same seed, and on a clear error where
a task asks for a prior it has no traces of.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from paravt.train import miniature as m

CALL = '<tool_call>{{"name": "crop_video", "arguments": {{"start_time": {s}, "end_time": {e}}}}}</tool_call>'


def main_row(i: int, calling: bool) -> dict[str, object]:
    first = (
        "<think>\nI look closer at 2 windows.\n</think>\n"
        + CALL.format(s=0.0, e=8.0)
        + "\n"
        + CALL.format(s=8.0, e=16.0)
        if calling
        else "<think>\nThe overview shows it.\n</think>\n<answer>red</answer>"
    )
    messages = [
        {"role": "system", "content": "tools"},
        {"role": "user", "content": "<video>What colour is the square?"},
        {"role": "assistant", "content": first},
    ]
    if calling:
        messages += [
            {"role": "tool", "content": "[0.0 s - 8.0 s] \nred square"},
            {"role": "tool", "content": "[8.0 s - 16.0 s] \nno square"},
            {
                "role": "assistant",
                "content": "<think>\nA helper saw it.\n</think>\n<answer>red</answer>",
            },
        ]
    return {"id": f"v{i}_main", "agent": "main", "messages": messages}


def sub_row(i: int) -> dict[str, object]:
    return {
        "id": f"v{i}_sub0",
        "agent": "subagent",
        "messages": [
            {"role": "system", "content": "helper"},
            {"role": "user", "content": "<video>What colour is the square?"},
            {"role": "assistant", "content": "<answer>red square</answer>"},
        ],
    }


@pytest.fixture
def sft_parquet(tmp_path: Path) -> Path:
    """20 videos: a main-agent trace each (calling on even ones) and one sub-agent row each."""
    rows = [main_row(i, calling=i % 2 == 0) for i in range(20)] + [sub_row(i) for i in range(20)]
    path = tmp_path / "k2" / "sft.parquet"
    path.parent.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_the_prior_stage_learns_the_reports_only_when_the_task_says_so(sft_parquet: Path) -> None:
    plain = pq.read_table(m.write_prior_traces(sft_parquet, sft_parquet.parent / "p.parquet"))
    sub = pq.read_table(
        m.write_prior_traces(sft_parquet, sft_parquet.parent / "ps.parquet", subagents=True)
    )
    assert plain.column("agent").to_pylist() == ["main"] * 20
    assert sub.column("agent").to_pylist() == ["main"] * 20 + ["subagent"] * 20
    # the main agent's calls are in the prior's habit either way; the reports are kept as taught
    calls = [r for r in sub.to_pylist() if "<tool_code>" in json.dumps(r["messages"])]
    assert len(calls) == 10 and all(r["agent"] == "main" for r in calls)
    assert "<tool_call>" not in json.dumps(sub.to_pylist())
    assert sub.to_pylist()[20:] == [sub_row(i) for i in range(20)]


def test_the_cold_start_keeps_a_seeded_share_of_the_prior_calling_traces(sft_parquet: Path) -> None:
    prior = m.write_prior_traces(
        sft_parquet, sft_parquet.parent / "prior-sub.parquet", subagents=True
    )
    half = pq.read_table(m.prior_mix(prior, 0.5, seed=3)).to_pylist()
    # only the main agent's calling traces, in the prior's habit: 5 of the 10
    assert len(half) == 5
    assert all(r["agent"] == "main" and "<tool_code>" in json.dumps(r["messages"]) for r in half)
    again = pq.read_table(m.prior_mix(prior, 0.5, seed=3)).to_pylist()
    other = pq.read_table(m.prior_mix(prior, 0.5, seed=4)).to_pylist()
    assert [r["id"] for r in again] == [r["id"] for r in half]
    assert [r["id"] for r in other] != [r["id"] for r in half]  # a seed's own draw
    assert len(pq.read_table(m.prior_mix(prior, 1.0, seed=3))) == 10
    # more prior data: above 1 every calling trace repeats, the fraction drawn again
    more = [r["id"] for r in pq.read_table(m.prior_mix(prior, 1.5, seed=3)).to_pylist()]
    assert len(more) == 15 and sorted({more.count(i) for i in more}) == [1, 2]
    assert sum(more.count(i) == 2 for i in set(more)) == 5


def test_sft_recipe_mixes_the_prior_into_the_cold_start_only(
    tmp_path: Path, sft_parquet: Path
) -> None:
    task = m.Task("t", "test", prior_steps=10, prior_subagents=True, cold_prior_mix=0.5)
    prior = m.write_prior_traces(
        sft_parquet, sft_parquet.parent / "prior-sub.parquet", subagents=True
    )
    data = m.TaskData(
        sft={2: sft_parquet},
        rl=tmp_path / "rl.parquet",
        held_out=tmp_path / "h.parquet",
        prior={2: prior},
    )
    cold = m.sft_recipe(tmp_path / "cold", tmp_path / "model", data, seed=7, task=task)
    assert cold.data.parquet == [
        str(sft_parquet),
        str(prior.with_name("prior-sub-mix0.5-s7.parquet")),
    ]
    stage = m.sft_recipe(
        tmp_path / "prior", tmp_path / "model", data, seed=7, task=task, prior=True
    )
    assert stage.data.parquet == [str(prior)]
    # a task with no prior data cannot keep any of it: said, not skipped
    with pytest.raises(ValueError, match=r"no prior traces.*without_prior"):
        m.sft_recipe(
            tmp_path / "cold",
            tmp_path / "model",
            m.TaskData(data.sft, data.rl, data.held_out),
            task=task,
        )
    bare = task.without_prior()
    assert (bare.prior_steps, bare.prior_subagents, bare.cold_prior_mix) == (0, False, 0.0)
    assert m.sft_recipe(tmp_path / "c", tmp_path / "m", data, task=bare).data.parquet == [
        str(sft_parquet)
    ]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"prior_steps": 10, "cold_prior_mix": 4.5}, "between 0 and 4"),
        ({"cold_prior_mix": 0.5}, "prior_steps is 0"),
        ({"prior_subagents": True}, "prior_steps is 0"),
    ],
)
def test_a_task_refuses_prior_settings_it_cannot_use(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        m.Task("bad", "test", **fields)  # type: ignore[arg-type]


def test_eval_at_before_the_last_step_needs_a_constant_step(tmp_path: Path) -> None:
    """Checkpoints read as shorter runs only under a constant schedule; the tiny recipes decay the
    step (run 13), so asking for them without `optim.schedule=constant` fails before training."""
    from types import SimpleNamespace

    cold = SimpleNamespace(
        sft_model=tmp_path / "sft",
        data=SimpleNamespace(rl=tmp_path / "rl.parquet"),
        seed=0,
        held=[],
    )
    with pytest.raises(ValueError, match="constant schedule, not 'cosine'"):
        m.rl_from_cold_start(cold, tmp_path / "rl", steps=4, eval_at=[2, 4])  # type: ignore[arg-type]
