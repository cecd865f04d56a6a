"""Our client against a real vLLM server (CPU build, 0.32.0) on the tiny checkpoint.

Everything else in the suite talks to our own stand-in servers; here the server is vLLM's, so a
route, field or default we only imagined fails. The tiny checkpoint has random weights: the checks
are about what crosses the boundary (protocol, frames, tokens, log-probs, weights), not answers.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

PY = sys.executable


def _video(synth_dir: Path) -> Path:
    return sorted((synth_dir / "videos").glob("*.mp4"))[0]


def _ask(served: Any, video: Path, *extra: str, env: dict[str, str]) -> dict[str, Any]:
    cmd = [
        PY,
        "-m",
        "paravt.eval.cli",
        "ask",
        "--video",
        str(video),
        "--base-url",
        served.base_url,
        "--served-model",
        served.model,
        "--max-new-tokens",
        "16",
        "--json",
        *extra,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    first_line = proc.stderr.splitlines()[0] if proc.stderr else ""
    trace = json.loads(proc.stdout)
    trace["_first_line"] = first_line
    return trace


def test_ask_with_no_protocol_flag_asks_a_served_model_under_the_paper_protocol(
    vllm_server, synth_dir, offline_env
):
    trace = _ask(
        vllm_server,
        _video(synth_dir),
        "--option",
        "red",
        "--option",
        "blue",
        "Which colour is the square?",
        env=offline_env,
    )
    assert trace["error"] is None
    assert trace["protocol"].startswith("protocol: paper"), trace["protocol"]
    assert "no recorded protocol in served model" in trace["protocol"]
    assert trace["_first_line"] == trace["protocol"]  # the first thing a run says
    assert trace["overview_frames"] == 64  # the driver's overview
    [turn] = trace["turns"][:1]
    # vLLM returns no token ids without logprobs; the count is the server's own usage figure
    assert 0 < turn["num_tokens"] <= 16, turn


def test_ask_under_our_protocol_and_a_grounding_question_over_the_video_url_channel(
    vllm_server, synth_dir, offline_env
):
    trace = _ask(
        vllm_server,
        _video(synth_dir),
        "--protocol",
        "paravt",
        "--nframes",
        "8",
        "Which colour is the square?",
        env=offline_env,
    )
    assert trace["error"] is None and trace["protocol"].startswith("protocol: paravt")
    assert trace["overview_frames"] == 8
    # video_url: the server decodes the file itself (the driver's Charades-STA channel)
    grounding = _ask(
        vllm_server,
        _video(synth_dir),
        "--kind",
        "grounding",
        "--video-channel",
        "video_url",
        "the red square appears",
        env=offline_env,
    )
    assert grounding["error"] is None, grounding["error"]
    assert "grounding questions agentic_minimal" in grounding["protocol"]
    assert grounding["turns"] and grounding["turns"][0]["num_tokens"] > 0


def test_lmms_eval_runs_paravt_over_the_server_on_a_multiple_choice_and_a_grounding_split(
    vllm_server, synth_dir, tmp_path, offline_env
):
    from paravt.eval.synth_tasks import write_synth_tasks

    tasks = write_synth_tasks(synth_dir, tmp_path / "tasks", limit=3)
    out = tmp_path / "out"
    # the README's recipe (paravt-eval, "Reproduce Table 1"): the servers as one base_url joined
    # by '|' (here the one server twice, so the list path runs), no protocol (paper by default);
    # the synthetic splits stand in for the paper's
    urls = f"{vllm_server.base_url}|{vllm_server.base_url}"
    model_args = f"base_url={urls},model={vllm_server.model},max_new_tokens=16"
    cmd = [
        PY,
        "-m",
        "lmms_eval",
        "--model",
        "paravt",
        "--model_args",
        model_args,
        "--tasks",
        "paravt_synth_mcq,paravt_synth_grounding",
        "--include_path",
        str(tasks),
        "--output_path",
        str(out),
        "--log_samples",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=offline_env, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    [results_file] = list(out.rglob("*_results.json"))
    results = json.loads(results_file.read_text())["results"]
    assert set(results) >= {"paravt_synth_mcq", "paravt_synth_grounding"}
    assert results["paravt_synth_mcq"]["errored,none"] == 0
    assert results["paravt_synth_grounding"]["errored,none"] == 0
    [summary_file] = list(results_file.parent.glob("*_paravt_traces.summary.json"))
    summary = json.loads(summary_file.read_text())
    for task in ("paravt_synth_mcq", "paravt_synth_grounding"):
        assert summary[task]["samples"] == 3
        assert summary[task]["protocol"].startswith("protocol: paper"), summary[task]


def _trainer(checkpoint: Path) -> Any:
    import torch
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(str(checkpoint), dtype=torch.float32).eval()


def _logprobs_of(model: Any, ids: list[int]) -> list[float]:
    """log p(ids[i] | ids[:i]) for i >= 1 under `model` (the trainer's forward pass)."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    lp = torch.log_softmax(logits, dim=-1)
    return [float(lp[i - 1, ids[i]]) for i in range(1, len(ids))]


def test_sampled_log_probs_from_the_openai_engine_equal_the_trainers(vllm_server):
    """The OpenAI engine's log-prob path (`return_tokens_as_token_ids`, a vLLM extension) gives
    token ids and log-probs that the trainer's own forward pass reproduces."""
    from transformers import AutoTokenizer

    from paravt.core.engines.openai import OpenAIEngine
    from paravt.core.protocol import Message
    from paravt.core.runtime import SamplingParams, Trajectory

    engine = OpenAIEngine(vllm_server.base_url, vllm_server.model, logprobs=True)
    messages = [Message("user", "What colour is the square?")]
    traj = Trajectory("main", messages=list(messages))
    (out,) = asyncio.run(
        engine.generate([traj], SamplingParams(max_new_tokens=12, temperature=1.0, seed=0))
    )
    assert out.token_ids and out.logprobs is not None
    assert len(out.token_ids) == len(out.logprobs) == out.num_tokens <= 12
    tok = AutoTokenizer.from_pretrained(str(vllm_server.checkpoint))
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What colour is the square?"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    prompt = list(tok(text, add_special_tokens=False)["input_ids"])
    mine = _logprobs_of(_trainer(vllm_server.checkpoint), prompt + out.token_ids)[len(prompt) - 1 :]
    worst = max(abs(a - b) for a, b in zip(out.logprobs, mine))
    assert worst < 1e-3, (worst, out.logprobs, mine)


def test_two_optimiser_steps_reach_the_server_through_a_reload_from_disk(vllm_server, tmp_path):
    """The RL weight path on a real server: after each optimiser step the trainer writes its
    weights, the server pauses, reloads them in place, takes the new version and resumes; its
    log-probs of a fixed probe then equal the trainer's and no longer the old weights'."""
    import torch
    from transformers import AutoTokenizer

    from paravt.core.engines.vllm_server import VLLMServer, VLLMServerError

    server = VLLMServer(vllm_server.root, model=vllm_server.model)
    tok = AutoTokenizer.from_pretrained(str(vllm_server.checkpoint))
    probe = tok(
        "<|im_start|>user\nWhat colour is the square?<|im_end|>\n<|im_start|>assistant\n",
        add_special_tokens=False,
    )["input_ids"]
    policy = _trainer(vllm_server.checkpoint)
    start = _logprobs_of(policy, probe)
    assert max(abs(a - b) for a, b in zip(server.prompt_logprobs(probe), start)) < 1e-3
    assert server.weight_version() == "default"

    target = torch.tensor([tok("red red red red", add_special_tokens=False)["input_ids"]])
    optimiser = torch.optim.SGD(policy.parameters(), lr=1.0)
    before = start
    try:
        for step in (1, 2):
            policy.train()
            loss = policy(input_ids=target, labels=target).loss
            loss.backward()
            optimiser.step()
            optimiser.zero_grad()
            policy.eval()
            out = tmp_path / f"step-{step}"
            policy.save_pretrained(out)
            server.reload_weights(out, f"step-{step}")
            assert server.weight_version() == f"step-{step}"
            assert not server.is_paused()
            served = server.prompt_logprobs(probe)
            mine = _logprobs_of(policy, probe)
            diff = max(abs(a - b) for a, b in zip(served, mine))
            moved = max(abs(a - b) for a, b in zip(served, before))
            print(f"step {step}: served vs trainer {diff:.2e}, vs previous weights {moved:.3f}")
            assert diff < 1e-3 and moved > 1e-2, (step, diff, moved)
            before = mine
        with pytest.raises(VLLMServerError, match="no checkpoint directory"):
            server.reload_weights(tmp_path / "missing", "step-3")
        assert server.weight_version() == "step-2" and not server.is_paused()
    finally:  # the other tests expect the checkpoint's own weights
        server.reload_weights(vllm_server.checkpoint, "default")
    assert max(abs(a - b) for a, b in zip(server.prompt_logprobs(probe), start)) < 1e-3


def test_two_rl_steps_roll_out_on_the_vllm_server_and_sync_its_weights(vllm_server, tmp_path):
    """rollout.engine=vllm_server end to end: the trainer's rollouts (main agents and sub-agents,
    with frames) are sampled by the vLLM server; after each optimiser step the weights go to the
    server by a reload from disk as step-N, and the trainer checks (verify_sync) that the server's
    log-probs of a fixed sequence equal its own. The served version advances step-0 -> step-2,
    the weights move, and vLLM tokenized every prompt exactly as the trainer did."""
    import json as _json

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packages/paravt-train/tests"))
    from rl_helpers import AlternateScripted, examples

    from paravt.core.engines.vllm_server import VLLMServer
    from paravt.train.recipe import load_recipe
    from paravt.train.rl import train_rl

    server = VLLMServer(vllm_server.root, model=vllm_server.model)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(vllm_server.checkpoint))
    probe = tok("<|im_start|>user\nWhich colour?<|im_end|>\n", add_special_tokens=False)[
        "input_ids"
    ]
    start = server.prompt_logprobs(probe)
    out = tmp_path / "rl"
    recipe = load_recipe(
        "tiny_paragrpo",
        [
            f"model.path={vllm_server.checkpoint}",
            f"output_dir={out}",
            "model.dtype=float32",
            "rollout.engine=vllm_server",
            f"rollout.server.urls=[{vllm_server.root}]",
            "rollout.server.verify_sync=true",
            "rollout.server.verify_sync_tolerance=0.001",
            "rollout.server.timeout_s=300",
            "rollout.batch_prompts=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=12",
            "rollout.subagent_max_new_tokens=8",
            "rollout.max_turns=2",
            "gating.choices=[2,4]",
            "optim.lr=1e-2",
            "optim.warmup_steps=0",  # every step moves the weights the server is pushed
            "max_steps=2",
            "checkpoint.every_steps=2",
            "checkpoint.save_final=false",
            "logging.progress=false",
        ],
    )
    engines: list[Any] = []

    def wrap(engine: Any) -> Any:
        engines.append(engine)
        return AlternateScripted(engine)  # rewards differ within groups: the weights move

    exs, frames = examples()
    try:
        train_rl(recipe, examples=exs, frames=frames, wrap_engine=wrap)
        metrics = [_json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        diffs = [
            m["sync/logprob_max_abs_diff"] for m in metrics if "sync/logprob_max_abs_diff" in m
        ]
        assert server.weight_version() == "step-2"
        moved = max(abs(a - b) for a, b in zip(server.prompt_logprobs(probe), start))
        (engine,) = engines
        print(
            f"vLLM RL: sync diffs {diffs}, probe moved {moved:.3g}, prompt mismatches "
            f"{engine.prompt_token_mismatches}, metrics {metrics[-1]}"
        )
        assert len(diffs) == 2 and all(d < 1e-3 for d in diffs), diffs
        assert moved > 1e-4, moved
        assert engine.prompt_token_mismatches == 0
    finally:  # the other tests expect the checkpoint's own weights
        server.reload_weights(vllm_server.checkpoint, "default")


def test_the_rollout_engine_returns_the_log_probs_the_trainer_recomputes(vllm_server):
    """VLLMServerEngine: the ids it returns are the server's samples, their log-probs are those of
    the sampling temperature (the server runs with --logprobs-mode processed_logprobs), equal to
    the trainer's recompute on the same prompt with an image; vLLM tokenized the prompt exactly as
    we did; a server in vLLM's default mode would be refused by check_logprobs_mode."""
    import numpy as np
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from paravt.core.engines.vllm_server import VLLMServerEngine
    from paravt.core.protocol import ImagePart, Message, TextPart
    from paravt.core.runtime import SamplingParams, Trajectory
    from paravt.train.modeling import Sequence_, collate, token_logprobs

    processor = AutoProcessor.from_pretrained(str(vllm_server.checkpoint))
    engine = VLLMServerEngine(vllm_server.root, processor)
    assert engine.model == vllm_server.model  # read from /v1/models
    assert engine.check_logprobs_mode() > 1e-3
    frame = np.zeros((56, 56, 3), dtype=np.uint8)
    frame[14:42, 14:42] = (255, 0, 0)
    messages = [Message("user", [ImagePart(frame), TextPart("What colour is the square?")])]
    encoded = engine.encode_prompt(messages, assistant_prefix="<think>\n")
    traj = Trajectory(
        "main",
        token_ids=list(encoded.token_ids),
        media=list(encoded.media),
        messages=messages,
        assistant_prefix="<think>\n",
    )
    model = AutoModelForImageTextToText.from_pretrained(str(vllm_server.checkpoint)).eval()
    for temperature in (0.7, 1.0):
        sampling = SamplingParams(max_new_tokens=12, temperature=temperature, seed=1)
        (out,) = asyncio.run(engine.generate([traj], sampling))
        assert out.token_ids and out.logprobs and len(out.logprobs) == len(out.token_ids)
        ids = traj.token_ids + out.token_ids
        seq = Sequence_(ids, [1] * len(ids), list(encoded.media))
        batch = collate([seq], pad_id=engine.pad_token_id, image_token_id=engine.image_token_id,
                        device=torch.device("cpu"))  # fmt: skip
        with torch.no_grad():  # the trainer's own forward pass (M-RoPE positions included)
            lp = token_logprobs(model, batch, temperature=temperature)[0]
        mine = lp[len(traj.token_ids) :]
        diff = float((mine - torch.tensor(out.logprobs)).abs().max())
        print(f"T={temperature}: sampled log-probs vs trainer {diff:.2e}")
        # with an image in the prompt vLLM's own image preprocessing enters (measured 5.5e-3 at
        # T=0.7; text alone agrees to 1e-6): well inside bf16 training noise, far below the
        # temperature-1 log-probs of vLLM's default mode (0.25 apart at T=0.7)
        assert diff < 2e-2, (temperature, diff)
    assert engine.prompt_token_mismatches == 0


def test_a_reload_mid_flight_waits_and_each_reply_has_the_log_probs_of_the_weights_it_names(
    vllm_server, tmp_path
):
    """Asynchronous RL's weight side on a real server: requests are in flight when a reload
    begins. vLLM's chat replies carry no weight version, so the client keeps it: the reload waits
    for the requests in flight (they finish on the old weights), requests sent meanwhile wait
    for it and run on the new ones, and every reply is tagged with its version. The proof: each
    reply's sampled log-probs equal the trainer's recompute under the weights it is tagged with,
    and not under the others."""
    import threading

    import torch
    from transformers import AutoProcessor

    from paravt.core.engines.vllm_server import VLLMServerEngine
    from paravt.core.protocol import Message
    from paravt.core.runtime import SamplingParams, Trajectory

    processor = AutoProcessor.from_pretrained(str(vllm_server.checkpoint))
    # ignore_eos (vLLM's sampling extension): every request runs its full length on the server
    engine = VLLMServerEngine(vllm_server.root, processor, extra_body={"ignore_eos": True})
    old = _trainer(vllm_server.checkpoint)
    new = _trainer(vllm_server.checkpoint)
    with torch.no_grad():
        for p in new.parameters():
            p.mul_(1.3)
    new.save_pretrained(tmp_path / "step-1")
    messages = [Message("user", "Count the squares.")]
    encoded = engine.encode_prompt(messages, assistant_prefix="<think>\n")
    traj = Trajectory("main", token_ids=list(encoded.token_ids), messages=messages,
                      assistant_prefix="<think>\n")  # fmt: skip
    sampling = SamplingParams(max_new_tokens=96, temperature=1.0)
    reload_done = threading.Event()

    async def main() -> tuple[list[Any], list[Any]]:
        first = asyncio.ensure_future(engine.generate([traj] * 4, sampling))
        while engine.gate.in_flight < 4:
            await asyncio.sleep(0.005)

        def reload() -> None:
            engine._load_checkpoint(tmp_path / "step-1", "step-1", None, None)
            reload_done.set()

        reloading = asyncio.ensure_future(asyncio.to_thread(reload))
        while not engine.gate.held:
            await asyncio.sleep(0.001)
        late = asyncio.ensure_future(engine.generate([traj] * 4, sampling))
        await asyncio.sleep(0.05)
        assert not late.done() and not reload_done.is_set()  # both wait for the first four
        outs = await first
        await reloading
        return outs, await late

    try:
        engine._load_checkpoint(vllm_server.checkpoint, "step-0", None, None)
        first, late = asyncio.run(main())
        assert engine.gate.waited_s > 0.0
        worst = {"tagged": 0.0, "other": math.inf}
        for out, tagged in [*((o, "step-0") for o in first), *((o, "step-1") for o in late)]:
            assert out.weight_version == tagged
            ids = list(traj.token_ids) + list(out.token_ids)
            n = len(traj.token_ids) - 1
            under = {
                "step-0": _logprobs_of(old, ids)[n:],
                "step-1": _logprobs_of(new, ids)[n:],
            }
            for version, lps in under.items():
                diff = max(abs(a - b) for a, b in zip(out.logprobs, lps))
                key = "tagged" if version == tagged else "other"
                worst[key] = max(worst[key], diff) if key == "tagged" else min(worst[key], diff)
        print(
            f"reload waited {engine.gate.waited_s:.3f} s; replies vs their tagged weights "
            f"{worst['tagged']:.2e}, vs the other weights at least {worst['other']:.3g}"
        )
        assert worst["tagged"] < 1e-3 and worst["other"] > 1e-2, worst
        assert engine.reply_versions == {"step-0": 4, "step-1": 4}
    finally:  # the other tests expect the checkpoint's own weights
        engine._load_checkpoint(vllm_server.checkpoint, "default", None, None)


def test_rl_steps_with_rollouts_a_step_ahead_on_the_vllm_server(vllm_server, tmp_path):
    """Asynchronous RL on vLLM (rollout.max_staleness=1, the decoupled loss): step s's rollouts
    are generated while step s-1 trains, on weights at most one version older than the ones that
    train on them; each push waits for the requests in flight and the servers serve step-N after
    it (verify_sync: their log-probs equal the trainer's). Every reply is tagged with the version
    that produced it, and the step that started after a push ran on the pushed weights."""
    import json as _json

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packages/paravt-train/tests"))
    from rl_helpers import AlternateScripted, examples

    from paravt.core.engines.vllm_server import VLLMServer
    from paravt.train.recipe import load_recipe
    from paravt.train.rl import train_rl

    server = VLLMServer(vllm_server.root, model=vllm_server.model)
    out = tmp_path / "rl"
    recipe = load_recipe(
        "tiny_paragrpo",
        [
            f"model.path={vllm_server.checkpoint}",
            f"output_dir={out}",
            "model.dtype=float32",
            "rollout.engine=vllm_server",
            f"rollout.server.urls=[{vllm_server.root}]",
            "rollout.server.verify_sync=true",
            "rollout.server.verify_sync_tolerance=0.001",
            "rollout.server.timeout_s=300",
            "rollout.max_staleness=1",
            "loss.decoupled=true",
            "rollout.batch_prompts=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=12",
            "rollout.subagent_max_new_tokens=8",
            "rollout.max_turns=2",
            "gating.choices=[2,4]",
            "optim.lr=1e-2",
            "optim.warmup_steps=0",  # every step moves the weights the server is pushed
            "max_steps=3",
            "checkpoint.every_steps=3",
            "checkpoint.save_final=false",
            "logging.progress=false",
        ],
    )
    engines: list[Any] = []

    def wrap(engine: Any) -> Any:
        engines.append(engine)
        return AlternateScripted(engine)  # rewards differ within groups: the weights move

    exs, frames = examples()
    try:
        train_rl(recipe, examples=exs, frames=frames, wrap_engine=wrap)
        rows = [_json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        (engine,) = engines
        staleness = [r["rollout/staleness"] for r in rows]
        diffs = [r["sync/logprob_max_abs_diff"] for r in rows]
        print(
            f"vLLM async RL: staleness {staleness}, replies per version {engine.reply_versions}, "
            f"drain {[r['sync/drain_s'] for r in rows]}, sync diffs {diffs}"
        )
        assert [r["step"] for r in rows] == [1, 2, 3]
        assert all(0 <= s <= 1 for s in staleness) and max(staleness) == 1, staleness
        assert all(d < 1e-3 for d in diffs), diffs
        assert server.weight_version() == "step-3"
        # every reply tagged; step 3 could start only once step-1 was served, so its replies
        # (at least) came from a later version than step 1's
        assert None not in engine.reply_versions
        assert set(engine.reply_versions) <= {"step-0", "step-1", "step-2"}
        assert len(engine.reply_versions) >= 2, engine.reply_versions
        assert engine.gate.in_flight == 0 and not engine.gate.held
        assert engine.prompt_token_mismatches == 0
    finally:  # the other tests expect the checkpoint's own weights
        server.reload_weights(vllm_server.checkpoint, "default")
