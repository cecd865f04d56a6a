"""verl 0.9.1's own agent-loop code runs `paravt.train.integrations.verl.ParaVTAgentLoop`.

The config is verl's Hydra trainer config with the README recipe's overrides; the recipe's
agent-loop YAML is loaded by verl's `AgentLoopWorker` (its registry), which instantiates the loop
with hydra and hands it a stand-in `server_manager` whose `generate` returns scripted token ids
(main turn 1: two `crop_video` calls, main turn 2: the answer; sub-agents: a report). The outputs
go through verl's v1 worker postprocess (`AgentLoopWorkerTQ._agent_loop_postprocess`, its
TransferQueue put captured) and verl's `compute_advantage_for_multi_trajectories`, or through the
legacy worker's `_agent_loop_postprocess` + `_postprocess`; each is compared with our runtime's
episode (`run_paravt_episode`) and `score_row_episode` on the same scripted generations.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from shared import CALL, TRAIN_README, readme_block

from paravt.core.agent_config import AgentConfig
from paravt.train.integrations.agent import (
    CallbackEngine,
    RowTask,
    episode_samples,
    run_paravt_episode,
    score_row_episode,
)

PROMPT_LEN, RESPONSE_LEN = 1024, 512
QUESTION, OPTIONS = "Which colour is the square?", ["A. red", "B. green"]


def recipe() -> tuple[list[dict[str, Any]], list[str]]:
    """The README recipe: its agent-loop YAML (the heredoc) and its main_ppo overrides."""
    block = readme_block("verl-agent-loop", TRAIN_README)
    match = re.search(r"<<'(\w+)'\n(.*?)\n\1\n(.*)", block, flags=re.S)
    assert match, "the recipe writes its agent-loop YAML with a quoted heredoc"
    entries = yaml.safe_load(match.group(2))
    words = shlex.split(match.group(3).replace("\\\n", " "))
    assert words[:3] == ["python", "-m", "verl.trainer.main_ppo"], words[:3]
    return entries, [w for w in words[3:] if "=" in w]


@pytest.fixture(scope="module")
def model_path() -> str:
    from paravt.core.testing import cached_tiny_qwen3vl

    return str(cached_tiny_qwen3vl(seed=0))


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> str:
    from paravt.tools.synth import SynthConfig, plan_video, write_video

    path = tmp_path_factory.mktemp("video") / "v.mp4"
    write_video(plan_video(SynthConfig(duration_s=20.0), seed=0, index=0), path)
    return str(path)


def compose(model_path: str, tmp: Path, entry_updates: dict[str, Any], *extra: str) -> Any:
    """verl's trainer config with the recipe's overrides; the recipe's YAML (with
    `entry_updates`, small frame counts for the tiny test) as the agent-loop config file."""
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    entries, overrides = recipe()
    entries = [{**e, **entry_updates} for e in entries]
    loop_yaml = Path(tempfile.mkdtemp(dir=tmp)) / "paravt_agent_loop.yaml"
    loop_yaml.write_text(yaml.safe_dump(entries))
    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    overrides = [
        *overrides,
        f"actor_rollout_ref.model.path={model_path}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loop_yaml}",
        f"data.max_prompt_length={PROMPT_LEN}",
        f"data.max_response_length={RESPONSE_LEN}",
        *extra,
    ]
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


class ScriptedServer:
    """verl's `server_manager` stand-in: `generate` answers like a policy would, by prompt."""

    def __init__(self, tokenizer: Any, main_turns: list[str]) -> None:
        self.tok = tokenizer
        self.main_turns = main_turns
        self.calls: list[dict[str, Any]] = []

    def reply(self, prompt_ids: list[int]) -> tuple[str, str]:
        text = self.tok.decode(prompt_ids)
        if "Overview" in text:
            return "main", self.main_turns[text.count("<|im_start|>assistant") - 1]
        start = re.search(r"from ([0-9.]+)", text)
        return (
            "subagent",
            f"<answer>A green square near {start.group(1) if start else '?'} s.</answer>",
        )

    def token_ids(self, prompt_ids: list[int]) -> tuple[str, list[int], list[float]]:
        role, text = self.reply(prompt_ids)
        ids = [*self.tok(text, add_special_tokens=False)["input_ids"]]
        ids.append(self.tok.convert_tokens_to_ids("<|im_end|>"))
        return role, ids, [-0.01 * (1 + k % 7) for k in range(len(ids))]

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict,
        image_data: list[Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        role, ids, lps = self.token_ids(prompt_ids)
        self.calls.append(
            {
                "role": role,
                "request_id": request_id,
                "images": image_data or [],
                "sampling": dict(sampling_params),
                "prompt_len": len(prompt_ids),
            }
        )
        return TokenOutput(token_ids=[*ids, 0, 0], log_probs=[*lps, 0.0, 0.0], num_preempted=0)


def main_turns(answer: str, calls: int = 2, video_path: str | None = None) -> list[str]:
    windows = [(1, 5), (10, 15), (16, 19)][:calls]
    call = (
        CALL
        if video_path is None
        else CALL.replace('"end_time": {}', '"end_time": {}, "video_path": "' + video_path + '"')
    )
    return [
        "I crop windows.</think>" + "".join(call.format(a, b) for a, b in windows),
        f"Seen.</think><answer>{answer}</answer>",
    ]


def row_fields(video: str, uid: str, session: int) -> dict[str, Any]:
    """One row as verl's v1 worker hands it to `_run_agent_loop` (dataset fields + its keys)."""
    return {
        "raw_prompt": [{"role": "user", "content": QUESTION}],
        "data_source": "paravt",
        "reward_model": {"ground_truth": "B", "style": "rule"},
        "extra_info": {
            "video": video,
            "question": QUESTION,
            "question_type": "mcq",
            "options": OPTIONS,
            "index": 0,
        },
        "index": 0,
        "uid": uid,
        "session_id": session,
        "global_steps": 1,
    }


SAMPLING = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": -1,
    "repetition_penalty": 1.0,
    "logprobs": True,
}
TRAJECTORY = {"step": 1, "sample_index": 0, "rollout_n": 0, "validate": False}


def make_worker(config: Any, server: ScriptedServer, v1: bool) -> Any:
    """verl's AgentLoopWorker in this process; `v1`: with the v1 (TransferQueue) postprocess."""
    from verl.experimental.agent_loop import AgentLoopWorker

    cls = AgentLoopWorker
    if v1:
        from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

        tq_cls = AgentLoopWorkerTQ.__ray_actor_class__  # the class under ray.remote
        cls = type(
            "V1Worker",
            (AgentLoopWorker,),
            {"_agent_loop_postprocess": tq_cls._agent_loop_postprocess},
        )
    return cls(config, server)


def direct_episode(
    video: str, processor: Any, server: ScriptedServer, config: AgentConfig, overview_frames: int
) -> Any:
    """Our runtime on the same scripted generations (no verl in between)."""

    async def generate_fn(prompt_ids, images, sampling):
        _, ids, lps = server.token_ids(list(prompt_ids))
        return [*ids, 0, 0], [*lps, 0.0, 0.0]

    row = RowTask.from_row(
        {
            "video": video,
            "question": QUESTION,
            "answer": "B",
            "question_type": "mcq",
            "options": OPTIONS,
        }
    )
    engine = CallbackEngine(processor, generate_fn)
    episode = asyncio.run(
        run_paravt_episode(row, engine, overview_frames=overview_frames, config=config)
    )
    return episode, row


ENTRY = {"overview_frames": 4, "agent": {"max_turns": 3, "max_parallel": 2, "max_num_frames": 4}}


def test_the_recipe_registers_the_loop_through_verls_own_loader(model_path, tmp_path) -> None:
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    import paravt.train.integrations.verl as module

    entries, _ = recipe()
    (entry,) = entries
    assert entry["_target_"] == f"{module.__name__}.{module.ParaVTAgentLoop.__qualname__}"
    config = compose(model_path, tmp_path, ENTRY)
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == entry["name"] == "paravt"
    assert config.trainer.use_v1 and config.algorithm.adv_estimator == "grpo"
    worker = make_worker(config, ScriptedServer(None, []), v1=False)
    assert worker.processor is not None, "verl loaded no processor for the tiny Qwen3-VL"
    assert _agent_loop_registry["paravt"]["_target_"] == entry["_target_"]
    assert _agent_loop_registry["paravt"]["agent"]["max_parallel"] == 2


def run_v1_session(worker, server, video, monkeypatch, uid, session) -> dict[str, Any]:
    """One rollout through verl's `_run_agent_loop` with the v1 postprocess; the TransferQueue
    put it makes, captured."""
    from verl.trainer.ppo.v1 import agent_loop_tq

    put: dict[str, Any] = {}

    async def capture(keys, fields, tags, partition_id):
        put.update(keys=keys, fields=fields, tags=tags, partition_id=partition_id)

    monkeypatch.setattr(agent_loop_tq.tq, "async_kv_batch_put", capture)
    worker.llm_client = server
    kwargs = row_fields(video, uid, session)
    asyncio.run(
        worker._run_agent_loop(
            dict(SAMPLING), TRAJECTORY, agent_name="paravt", trace=False, **kwargs
        )
    )
    return put


def test_v1_worker_trains_the_main_agent_and_its_subagents_with_the_broadcast_advantage(
    model_path, video, tmp_path, monkeypatch
) -> None:
    from verl import DataProto
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    config = compose(model_path, tmp_path, ENTRY)
    worker = make_worker(config, ScriptedServer(None, []), v1=True)
    tok = worker.tokenizer
    right = ScriptedServer(tok, main_turns("B"))
    put = run_v1_session(worker, right, video, monkeypatch, "u0", 0)

    # the server: main turn 1 with the 4 overview frames, the two sub-agents with their crops,
    # main turn 2 continuing main's request id (sticky session)
    roles = [c["role"] for c in right.calls]
    assert roles == ["main", "subagent", "subagent", "main"]
    assert (
        len(right.calls[0]["images"]) == 4 and right.calls[3]["images"] == right.calls[0]["images"]
    )
    assert all(len(c["images"]) > 0 for c in right.calls[1:3])
    assert right.calls[3]["request_id"] == right.calls[0]["request_id"]
    assert len({c["request_id"] for c in right.calls}) == 3
    assert all(
        c["sampling"]["temperature"] == 1.0 and "max_tokens" in c["sampling"] for c in right.calls
    )

    assert put["keys"] == ["u0_0_0", "u0_0_1", "u0_0_2"] and put["partition_id"] == "train"
    fields = put["fields"]
    extra = [fields["extra_fields"][i] for i in range(3)]
    assert [e["paravt_role"] for e in extra] == ["subagent", "subagent", "main"]
    assert extra[2]["paravt_tool_calls"] == 2 and extra[2]["paravt_answer"] == "B"

    # equal to our runtime's episode on the same generations, token for token
    episode, row = direct_episode(
        video, worker.processor, right, AgentConfig(**ENTRY["agent"]), ENTRY["overview_frames"]
    )
    samples = episode_samples(episode)
    expected = [*samples[1:], samples[0]]
    reward = score_row_episode(episode, row)
    assert reward.accuracy == 1.0 and reward.tool > 0
    for i, sample in enumerate(expected):
        assert fields["prompts"][i].tolist() == sample.prompt_ids
        assert fields["responses"][i].tolist() == sample.response_ids
        assert fields["response_mask"][i].tolist() == sample.response_mask
        assert fields["rollout_log_probs"][i].tolist() == pytest.approx(sample.response_logprobs)
        # every sample carries the main trajectory's reward on its last token
        rm = fields["rm_scores"][i].tolist()
        assert rm[-1] == pytest.approx(reward.total) and sum(map(abs, rm[:-1])) == 0
        assert fields["extra_fields"][i]["reward_extra_info"]["score"] == pytest.approx(
            reward.total
        )
        # verl's own processor pass over our images equals our encoder's pixels
        mmi = fields["multi_modal_inputs"][i]
        ours = [c for c in (episode.main if sample.role == "main" else episode.subagents[i]).media]
        assert mmi["image_grid_thw"].shape[0] == len(ours) == len(sample.images)
        assert torch.equal(mmi["pixel_values"], torch.cat([c.pixel_values for c in ours]))
    # multi-turn masks: main's generated turns are 1, the sub-agent reports fed back are 0
    main_ids, main_mask = expected[2].response_ids, expected[2].response_mask
    generated = tok.decode([t for t, m in zip(main_ids, main_mask) if m])
    fed_back = tok.decode([t for t, m in zip(main_ids, main_mask) if not m])
    assert generated.count("<tool_call>") == 2 and "<answer>B</answer>" in generated
    assert "A green square near" in fed_back and "<tool_call>" not in fed_back
    assert main_mask[0] == 1 and main_mask[-1] == 1 and 0 in main_mask
    assert all(m == 1 for m in expected[0].response_mask)  # a sub-agent: one generated turn

    # a second rollout of the same row answers wrong: verl's GRPO over the mains, broadcast
    wrong = ScriptedServer(tok, main_turns("A"))
    put2 = run_v1_session(worker, wrong, video, monkeypatch, "u0", 1)
    keys = put["keys"] + put2["keys"]
    rows = [(put, i) for i in range(3)] + [(put2, i) for i in range(len(put2["keys"]))]

    def stack(name, width):
        return torch.stack(
            [
                torch.nn.functional.pad(
                    p["fields"][name][i], (0, width - len(p["fields"][name][i]))
                )
                for p, i in rows
            ]
        )

    width = max(len(p["fields"]["responses"][i]) for p, i in rows)
    data = DataProto.from_dict(
        tensors={
            "response_mask": stack("response_mask", width),
            "token_level_rewards": stack("rm_scores", width).float(),
        },
        non_tensors={"uid": np.array(["u0"] * len(rows), dtype=object)},
    )
    out = compute_advantage_for_multi_trajectories(
        data, batch_keys=keys, adv_estimator="grpo", config=config.algorithm
    )
    adv = out.batch["advantages"]
    first = [float(adv[r][data.batch["response_mask"][r].bool()][0]) for r in range(len(rows))]
    assert first[2] > 0 > first[-1]  # the right main above the wrong one
    assert first[0] == first[1] == first[2] and len(set(first[3:])) == 1  # broadcast
    assert first[2] == pytest.approx(-first[-1])


def test_legacy_worker_assembles_the_main_trajectory_batch(model_path, video, tmp_path) -> None:
    """`subagent_samples: false` under `trainer.use_v1=false`: verl's legacy
    `_agent_loop_postprocess` + `_postprocess` pad and mask the main trajectory."""
    config = compose(
        model_path, tmp_path, {**ENTRY, "subagent_samples": False}, "trainer.use_v1=false"
    )
    worker = make_worker(config, ScriptedServer(None, []), v1=False)
    server = ScriptedServer(worker.tokenizer, main_turns("B"))
    worker.llm_client = server
    out = asyncio.run(
        worker._run_agent_loop(
            dict(SAMPLING),
            TRAJECTORY,
            agent_name="paravt",
            trace=False,
            **row_fields(video, "u1", 0),
        )
    )
    batch = worker._postprocess([out])
    episode, row = direct_episode(
        video, worker.processor, server, AgentConfig(**ENTRY["agent"]), ENTRY["overview_frames"]
    )
    main = episode_samples(episode)[0]
    n_p, n_r = len(main.prompt_ids), len(main.response_ids)
    assert batch.batch["prompts"].shape == (1, PROMPT_LEN)
    assert batch.batch["prompts"][0, -n_p:].tolist() == main.prompt_ids
    assert batch.batch["responses"][0, :n_r].tolist() == main.response_ids
    assert batch.batch["response_mask"][0].tolist() == main.response_mask + [0] * (
        RESPONSE_LEN - n_r
    )
    assert batch.batch["attention_mask"][0].sum() == n_p + n_r
    rm = batch.batch["rm_scores"][0]
    assert float(rm[n_r - 1]) == pytest.approx(score_row_episode(episode, row).total) != 0
    assert float(rm.abs().sum()) == pytest.approx(abs(float(rm[n_r - 1])))
    assert batch.non_tensor_batch["acc"].tolist() == [1.0]
    assert batch.batch["position_ids"].shape == (1, 4, PROMPT_LEN + RESPONSE_LEN)  # M-RoPE


def test_hostile_calls_stay_on_the_rows_video_and_under_the_cap(
    model_path, video, tmp_path, monkeypatch
) -> None:
    """Three calls naming another file: two run (max_parallel), both on the row's video."""
    config = compose(model_path, tmp_path, ENTRY)
    worker = make_worker(config, ScriptedServer(None, []), v1=True)
    server = ScriptedServer(worker.tokenizer, main_turns("B", calls=3, video_path="/etc/passwd"))
    put = run_v1_session(worker, server, video, monkeypatch, "u2", 0)
    assert [c["role"] for c in server.calls] == ["main", "subagent", "subagent", "main"]
    extra = put["fields"]["extra_fields"]
    assert [extra[i]["paravt_role"] for i in range(3)] == ["subagent", "subagent", "main"]
    assert extra[2]["paravt_tool_calls"] == 2
    fed_back = worker.tokenizer.decode(
        [
            t
            for t, m in zip(
                put["fields"]["responses"][2].tolist(), put["fields"]["response_mask"][2].tolist()
            )
            if not m
        ]
    )
    assert "max_parallel" in fed_back  # the third call is refused, with the reason


def test_misconfigurations_are_named(model_path, video, tmp_path) -> None:
    """verl's hydra instantiation wraps a constructor's error; our message stays in it."""
    from hydra.errors import InstantiationException

    config = compose(model_path, tmp_path, ENTRY, "trainer.use_v1=false")
    worker = make_worker(config, ScriptedServer(None, []), v1=False)
    with pytest.raises(InstantiationException, match=r"trainer\.use_v1=true"):
        asyncio.run(
            worker._run_agent_loop(
                dict(SAMPLING),
                TRAJECTORY,
                agent_name="paravt",
                trace=False,
                **row_fields(video, "u3", 0),
            )
        )
    config = compose(model_path, tmp_path, ENTRY, "algorithm.adv_estimator=rloo")
    worker = make_worker(config, ScriptedServer(None, []), v1=True)
    with pytest.raises(InstantiationException, match=r"adv_estimator=grpo.*got 'rloo'"):
        asyncio.run(
            worker._run_agent_loop(
                dict(SAMPLING),
                TRAJECTORY,
                agent_name="paravt",
                trace=False,
                **row_fields(video, "u3", 0),
            )
        )
    config = compose(model_path, tmp_path, ENTRY)
    worker = make_worker(config, ScriptedServer(worker.tokenizer, main_turns("B")), v1=True)
    fields = row_fields(video, "u3", 0)
    del fields["extra_info"]["video"]
    with pytest.raises(KeyError, match="video"):
        asyncio.run(
            worker._run_agent_loop(
                dict(SAMPLING), TRAJECTORY, agent_name="paravt", trace=False, **fields
            )
        )
