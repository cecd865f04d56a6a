"""OpenRLHF's own rollout code runs the ParaVT agent: overview, parallel crops, sub-agents, answer.

The README's agent file is loaded by OpenRLHF's `_load_agent_executor` (what
`--train.agent_func_path` does) into OpenRLHF's own `RolloutRayActor` (its class, without Ray or
vLLM), whose `generate_responses` calls our `execute` with `llm_engine=self`, so every generation
goes through OpenRLHF's `generate` (image pad collapsing, `TokensPrompt`). The processor is the one
OpenRLHF's `get_tokenizer` loads for a VLM; `SamplesGenerator` turns the output into an
`Experience`. Stand-ins: a scripted vLLM `AsyncLLMEngine` (turn 1: two crop_video calls, turn 2:
the answer; sub-agents reply with text) and the `vllm` import stub. The reference is our own
runtime's episode over the same scripted generations.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.metadata
import json
import re
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from shared import CALL, TRAIN_README, openrlhf_parser, readme_block

from paravt.core.agent_config import SamplingParams as OurSampling
from paravt.tools.crop import CropConfig, VideoReader
from paravt.train.integrations.agent import (
    CallbackEngine,
    RowTask,
    run_paravt_episode,
    score_row_episode,
)

SUB_REPLY = "A red square at 3 s."
MAIN_REPLIES = {
    1: "I crop two windows.</think>" + CALL.format(1, 5) + CALL.format(10, 15),
    2: "Both windows seen.</think><answer>B</answer>",
}
ROW = {
    "question": "Which colour is the square?",
    "answer": "B",
    "question_type": "mcq",
    "options": ["A. red", "B. green"],
}


def reply_for(text: str) -> str:
    """The scripted policy: main turns by their number, every sub-agent the same report."""
    if "Overview" in text:
        return MAIN_REPLIES[min(text.count("<|im_start|>assistant"), 2)]
    return SUB_REPLY


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> str:
    from paravt.tools.synth import SynthConfig, plan_video, write_video

    path = tmp_path_factory.mktemp("video") / "v.mp4"
    write_video(plan_video(SynthConfig(duration_s=20.0), seed=0, index=0), path)
    return str(path)


@pytest.fixture(scope="module")
def processor() -> Any:
    """What OpenRLHF passes as `hf_tokenizer` for a VLM actor: its `get_tokenizer`'s processor."""
    from openrlhf.utils.utils import get_tokenizer

    from paravt.core.testing import cached_tiny_qwen3vl

    return get_tokenizer(str(cached_tiny_qwen3vl(seed=0)), None, "left")


def readme_args(workdir: Path) -> Any:
    """The README command through OpenRLHF's parser and `hierarchize`, with the agent file it
    names written from the README's block."""
    from openrlhf.utils.config import hierarchize

    (workdir / "agent.py").write_text(readme_block("openrlhf-agent agent.py", TRAIN_README))
    words = shlex.split(readme_block("openrlhf-agent", TRAIN_README).replace("\\\n", " "))
    assert words[:3] == ["python", "-m", "openrlhf.cli.train_ppo_ray"], words
    argv = [str(workdir / w) if w == "agent.py" else w for w in words[3:] if w != "..."]
    return hierarchize(openrlhf_parser().parse_args(argv))


def openrlhf_output_fields() -> set[str]:
    """The keys of the dict OpenRLHF's own `MultiTurnAgentExecutor.execute` returns."""
    import openrlhf.utils.agent as agent

    tree = ast.parse(Path(agent.__file__).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Dict)
            and any(getattr(t, "id", "") == "final_response" for t in node.targets)
        ):
            return {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    raise AssertionError("MultiTurnAgentExecutor no longer builds `final_response`")


class ScriptedVLLM:
    """vLLM's `AsyncLLMEngine.generate(prompt, params, request_id)` as OpenRLHF's
    `RolloutRayActor.generate` calls it: an async generator of `RequestOutput`s. Replies follow
    `reply_for`, cut at `max_tokens`; every request is recorded."""

    def __init__(self, processor: Any) -> None:
        self.tok = processor.tokenizer
        self.pads = {processor.image_token_id, processor.video_token_id}
        self.eos = self.tok.convert_tokens_to_ids("<|im_end|>")
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def generate(self, prompt: dict, sampling_params: Any, request_id: str) -> Any:
        ids = list(prompt["prompt_token_ids"])
        images = (prompt.get("multi_modal_data") or {}).get("image", [])
        text = self.tok.decode(ids)
        self.requests.append(
            {
                "main": "Overview" in text,
                "images": [im.size for im in images],
                "placeholders": sum(t in self.pads for t in ids),
                "params": sampling_params,
            }
        )
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.05)  # a sibling request sent at once overlaps this one
        self.in_flight -= 1
        out = [*self.tok(reply_for(text), add_special_tokens=False)["input_ids"], self.eos]
        finish = "stop"
        if len(out) > sampling_params.max_tokens:
            out, finish = out[: sampling_params.max_tokens], "length"
        logprobs = None
        if sampling_params.logprobs is not None:
            logprobs = [{t: SimpleNamespace(logprob=-0.25)} for t in out]
        yield SimpleNamespace(
            outputs=[
                SimpleNamespace(
                    token_ids=out,
                    text=self.tok.decode(out),
                    finish_reason=finish,
                    logprobs=logprobs,
                )
            ]
        )


def rollout_actor(executor: Any, llm: ScriptedVLLM, processor: Any) -> Any:
    """OpenRLHF's `RolloutRayActor` (the class under `@ray.remote`) holding our executor and the
    scripted vLLM engine, with the pad ids `create_vllm_engines` gives it for a VLM."""
    from openrlhf.trainer.ray import vllm_engine

    cls = vllm_engine.RolloutRayActor.__ray_metadata__.modified_class.__ray_actor_class__
    actor = cls.__new__(cls)  # its __init__ starts vLLM
    actor.executor, actor.llm = executor, llm
    actor._mm_pad_token_ids = {
        getattr(processor, a) for a in ("image_token_id", "video_token_id") if hasattr(processor, a)
    }
    return actor


def openrlhf_sampling(max_new_tokens: int | None = None) -> Any:
    """The `SamplingParams` `SamplesGenerator._dispatch_prompts_to_vllm` builds."""
    from vllm import SamplingParams

    return SamplingParams(
        temperature=0.7,
        top_p=1.0,
        top_k=-1,
        max_tokens=max_new_tokens,
        min_tokens=1,
        skip_special_tokens=False,
        logprobs=1,
    )


@pytest.fixture()
def crops(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every `VideoReader.crop` invocation: (video, number of calls run together)."""
    seen: list[tuple[str, int]] = []
    crop = VideoReader.crop

    def recording(self: VideoReader, path: Any, calls: Any) -> Any:
        seen.append((str(path), len(calls)))
        return crop(self, path, calls)

    monkeypatch.setattr(VideoReader, "crop", recording)
    return seen


def reference_episode(executor: Any, processor: Any, row: RowTask, temperature: float) -> Any:
    """The same episode through our own runtime and the same scripted generations."""
    tok = processor.tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")

    async def generate_fn(
        ids: list[int], images: list[Any], sampling: OurSampling
    ) -> tuple[list[int], list[float]]:
        out = [*tok(reply_for(tok.decode(ids)), add_special_tokens=False)["input_ids"], eos]
        return out, [-0.25] * len(out)

    config = executor.paravt_config.model_copy(
        update={
            "sampling": executor.paravt_config.sampling.model_copy(
                update={"temperature": temperature}
            )
        }
    )
    engine = CallbackEngine(processor, generate_fn)
    return asyncio.run(
        run_paravt_episode(
            row, engine, overview_frames=executor.paravt_overview_frames, config=config
        )
    )


def test_the_readme_recipe_is_openrlhfs_and_fits_the_agent(tmp_path: Path) -> None:
    from openrlhf.trainer.ray.vllm_engine import _load_agent_executor

    installed = importlib.metadata.version("openrlhf")
    section = TRAIN_README.read_text(encoding="utf-8").split("### OpenRLHF: the ParaVT agent")[1]
    assert re.search(rf"Tested with OpenRLHF {re.escape(installed)}\b", section), installed
    args = readme_args(tmp_path)
    assert args.train.agent_func_path == str(tmp_path / "agent.py")
    assert args.data.label_key == "paravt"
    executor = _load_agent_executor(args.train.agent_func_path)
    # vLLM must take the most images one prompt holds: the overview, or one crop
    most = max(executor.paravt_overview_frames, CropConfig().max_frames)
    assert args.data.max_images_per_prompt >= most


@pytest.mark.parametrize("as_json", [False, True], ids=["label-dict", "label-json"])
def test_openrlhf_runs_the_paravt_episode(
    tmp_path: Path, video: str, processor: Any, crops: list[tuple[str, int]], as_json: bool
) -> None:
    import torch
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
    from openrlhf.trainer.ray.vllm_engine import _load_agent_executor

    args = readme_args(tmp_path)
    executor = _load_agent_executor(args.train.agent_func_path)
    max_len = args.data.max_len
    label: Any = {"video": video, **ROW}
    label = json.dumps(label) if as_json else label
    llm = ScriptedVLLM(processor)
    actor = rollout_actor(executor, llm, processor)
    params = openrlhf_sampling()
    (output,) = asyncio.run(
        actor.generate_responses("Which colour?", label, params, max_len, processor, num_samples=1)
    )
    openrlhf_crops = list(crops)
    crops.clear()
    row = RowTask.from_row({"video": video, **ROW})
    ref = reference_episode(executor, processor, row, params.temperature)
    expected = score_row_episode(ref, row, executor.paravt_reward)

    # our tool ran both calls of turn 1 together, on the row's own video
    assert openrlhf_crops == [(video, 2)] == crops
    assert [t.num_calls for t in ref.turns] == [2, 0] and ref.tool_responses_ok == 2
    # OpenRLHF's engine got: main turn 1, the two sub-agents at once (with their frames), turn 2
    assert [r["main"] for r in llm.requests] == [True, False, False, True]
    assert llm.most_in_flight == 2
    for r in llm.requests:  # OpenRLHF collapsed each image's pad tokens to one placeholder
        assert r["placeholders"] == len(r["images"]) > 0
    assert len(llm.requests[0]["images"]) == executor.paravt_overview_frames
    sizes = [(f.image.shape[2], f.image.shape[1]) for f in ref.subagents[0].media]
    assert [len(r["images"]) for r in llm.requests[1:3]] == [
        c.num_frames for c in ref.turns[0].calls
    ]
    assert llm.requests[1]["images"] == sizes  # the cropped frames, as PIL (width, height)
    # main agent: OpenRLHF's sampling within --data.max_len; sub-agents: our sub-agent sampling
    sub = executor.paravt_config.subagent_sampling
    for r in llm.requests:
        p = r["params"]
        if r["main"]:
            assert (p.temperature, p.logprobs) == (0.7, 1)
            assert p.max_tokens <= executor.paravt_config.sampling.max_new_tokens
        else:
            assert (p.temperature, p.max_tokens, p.logprobs) == (
                sub.temperature,
                sub.max_new_tokens,
                None,
            )

    # OpenRLHF's fields, the main trajectory's tokens, generated spans and reward
    assert set(output) == openrlhf_output_fields()
    main = ref.main
    assert output["observation_tokens"] == main.token_ids
    ranges = output["action_ranges"]
    assert len(ranges) == 2
    mask = [0] * len(main.token_ids)
    for start, end in ranges:
        mask[start:end] = [1] * (end - start)
    assert mask == main.loss_mask
    tok = processor.tokenizer
    generated = tok.decode([t for t, m in zip(main.token_ids, mask) if m])
    assert generated.count("<tool_call>") == 2 and "<answer>B</answer>" in generated
    # the tool responses (the sub-agents' reports) sit between the turns, not trained on
    between = tok.decode(main.token_ids[ranges[0][1] : ranges[1][0]])
    assert between.count(SUB_REPLY) == 2 and "<tool_call>" not in between
    assert output["reward"] == pytest.approx(expected.total) and expected.total > 0
    assert output["scores"] == pytest.approx(expected.accuracy) == 1.0
    for name in ("accuracy", "format", "anchor", "tool", "penalty"):
        assert output["extra_logs"][name] == pytest.approx(getattr(expected, name)), name
    assert output["extra_logs"]["subagents"] == 2.0 and output["extra_logs"]["tool_calls"] == 2.0
    assert output["truncated"] is False
    assert output["rollout_log_probs"] == main.logprobs
    mm = output["mm_train_inputs"]
    assert torch.equal(mm["pixel_values"], torch.cat([c.pixel_values for c in main.media]))
    assert mm["image_grid_thw"].shape == (executor.paravt_overview_frames, 3)

    # what OpenRLHF's SamplesGenerator makes of it
    generator = SamplesGenerator.__new__(SamplesGenerator)
    exp = generator._process_response_into_experience(output, max_len=max_len)
    assert exp.sequences[0].tolist() == main.token_ids
    assert exp.action_mask[0].tolist() == main.loss_mask[1:]
    assert exp.rewards.tolist() == pytest.approx([expected.total])
    assert exp.scores.tolist() == pytest.approx([expected.accuracy])
    assert exp.info["tool"].tolist() == pytest.approx([expected.tool])
    assert exp.rollout_log_probs[0].tolist() == pytest.approx(main.logprobs[1:])


def test_the_main_agent_stays_within_max_len(
    tmp_path: Path, video: str, processor: Any, crops: list[tuple[str, int]]
) -> None:
    """With room for 5 tokens the first turn is cut: no call runs, the rollout is truncated."""
    from openrlhf.trainer.ray.vllm_engine import _load_agent_executor

    executor = _load_agent_executor(readme_args(tmp_path).train.agent_func_path)
    label = {"video": video, **ROW}
    first = asyncio.run(
        rollout_actor(executor, ScriptedVLLM(processor), processor).generate_responses(
            "q", label, openrlhf_sampling(), 10**6, processor
        )
    )[0]
    prompt_len = first["action_ranges"][0][0]
    crops.clear()
    llm = ScriptedVLLM(processor)
    (output,) = asyncio.run(
        rollout_actor(executor, llm, processor).generate_responses(
            "q", label, openrlhf_sampling(), prompt_len + 5, processor
        )
    )
    assert [r["params"].max_tokens for r in llm.requests] == [5]
    assert output["action_ranges"] == [(prompt_len, prompt_len + 5)]
    assert len(output["observation_tokens"]) == prompt_len + 5
    assert output["truncated"] is True and output["extra_logs"]["tool_calls"] == 0.0
    assert crops == []


def test_bad_inputs_are_named(tmp_path: Path, video: str, processor: Any) -> None:
    from openrlhf.trainer.ray.vllm_engine import _load_agent_executor

    executor = _load_agent_executor(readme_args(tmp_path).train.agent_func_path)

    def run(label: Any, tokenizer: Any = processor) -> Any:
        actor = rollout_actor(executor, ScriptedVLLM(processor), processor)
        return asyncio.run(
            actor.generate_responses("q", label, openrlhf_sampling(), 8192, tokenizer)
        )

    with pytest.raises(ValueError, match=r"--data\.label_key"):
        run("B")  # a bare answer: the row (its video) is missing
    with pytest.raises(KeyError, match="video"):
        run({"question": "q", "answer": "B"})
    with pytest.raises(ValueError, match="VLM processor"):
        run({"video": video, **ROW}, processor.tokenizer)
