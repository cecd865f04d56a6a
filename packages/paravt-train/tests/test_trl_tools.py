"""TRL's own tool loop with our crop tool: two `GRPOTrainer` steps on the tiny Qwen3-VL (CPU).

The README's `trl-tools` recipe runs as written. The tiny model's minimal chat template cannot
render tool calls, so the processor gets TRL's Qwen3-VL template (what a real Qwen3-VL ships). A
random model almost never writes a valid call, so the first turn of every other rollout is
scripted (the model still generates; its ids are replaced), and every turn after a tool response
answers; TRL parses, runs the tool, feeds the frames back and trains on all of it. The reward
function records what TRL passed; each completion's adapter score must equal `score` on the raw
text decoded from TRL's own completion token ids.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

# The first scripted turn asks for 40 frames (clamped to 16; the answer after them is cut at the
# length limit), the second for 2 (the answer fits).
CALLS = (
    "<think>\nThe overview is too sparse; I look closer at two windows.\n</think>\n\n"
    '<tool_call>\n{{"name": "crop_video", "arguments": {{"start_time": 2, "end_time": 6}}}}\n'
    "</tool_call>\n"
    '<tool_call>\n{{"name": "crop_video", "arguments": {{"start_time": "0:12", "end_time": 30, '
    '"num_frames": {}}}}}\n</tool_call>'
)
ANSWER = "<think>\nThe crops show the square; it is blue.\n</think>\n\n<answer>B</answer>"
# The turns between two generations as the chat template renders them: tool responses.
_BETWEEN = re.compile(
    r"<\|im_end\|>\n<\|im_start\|>user(.*?)<\|im_end\|>\n<\|im_start\|>assistant\n", re.S
)


def readme_block(name: str) -> str:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = re.search(rf"<!-- recipe: {re.escape(name)} -->\s*```python\n(.*?)```", readme, re.S)
    assert block is not None, f"no `{name}` recipe in README.md"
    return block.group(1)


def raw_text(ids: list[int], tokenizer: Any) -> str:
    """The model's transcript from token ids: its turns, with the tool responses inline."""
    text = tokenizer.decode(ids, skip_special_tokens=False)
    text = _BETWEEN.sub(lambda m: "\n" + m.group(1).strip() + "\n", text)
    return text.removesuffix("<|im_end|>")


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> str:
    from paravt.tools.synth import SynthConfig, plan_video, write_video

    path = tmp_path_factory.mktemp("video") / "v.mp4"
    write_video(plan_video(SynthConfig(duration_s=20.0), seed=0, index=0), path)
    return str(path)


@pytest.mark.slow
def test_the_readme_trl_tools_recipe_trains_with_our_crop_tool_and_scores_the_raw_text(
    tiny_model_path: Path, video: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trl
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from trl.chat_template_utils import qwen3_vl_chat_template

    from paravt.rewards import score
    from paravt.rewards.integrations.common import split_completion

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    monkeypatch.chdir(tmp_path)
    forced = dict(
        use_cpu=True,
        bf16=False,
        report_to="none",
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=640,
        max_steps=2,
        logging_steps=1,
        save_strategy="no",
        seed=0,
    )
    grpo_config = trl.GRPOConfig
    monkeypatch.setattr(trl, "GRPOConfig", lambda **kw: grpo_config(**{**kw, **forced}))

    original = trl.GRPOTrainer._generate_single_turn
    frame_requests = iter([40, 2])

    def scripted(self: Any, prompt_ids: list[list[int]], *args: Any, **kwargs: Any) -> Any:
        ids, logprobs = original(self, prompt_ids, *args, **kwargs)
        tok = self._tokenizer
        out = []
        for k, (prompt, own) in enumerate(zip(prompt_ids, ids)):
            after_tool = tok.decode(prompt[-8:]).endswith(
                "</tool_response><|im_end|>\n<|im_start|>assistant\n"
            )
            reply = ANSWER if after_tool else None
            if not after_tool and k % 2 == 0:
                reply = CALLS.format(next(frame_requests))
            if reply is None:
                out.append(own)
            else:
                out.append([*tok(reply, add_special_tokens=False)["input_ids"], tok.eos_token_id])
        return out, logprobs

    monkeypatch.setattr(trl.GRPOTrainer, "_generate_single_turn", scripted)

    seen: list[tuple[list[Any], list[list[int]], dict[str, Any]]] = []

    def spy(prompts: list[Any], completions: list[Any], completion_ids: Any, **kwargs: Any):
        seen.append((completions, completion_ids, kwargs))
        return [0.0] * len(completions)

    rows = [
        {
            "video": video,
            "question": "Which colour is the square?",
            "answer": answer,
            "question_type": "mcq",
            "options": ["red", "blue"],
        }
        for answer in ("B", "A")
    ]
    processor = AutoProcessor.from_pretrained(tiny_model_path)
    processor.chat_template = qwen3_vl_chat_template
    namespace: dict[str, Any] = {
        "rows": rows,
        "model": AutoModelForImageTextToText.from_pretrained(tiny_model_path),
        "processor": processor,
    }
    recipe = readme_block("trl-tools")
    call = 'trl_reward_funcs("paragrpo", eos_token_ids=[processor.tokenizer.eos_token_id])'
    assert recipe.count(call) == 1
    recipe = recipe.replace(call, f"[*{call}, spy]")
    namespace["spy"] = spy
    exec(compile(recipe, "README.md (trl-tools recipe)", "exec"), namespace)
    trainer = namespace["trainer"]
    paravt_reward = trainer.reward_funcs[0]
    tok = processor.tokenizer

    assert trainer.state.global_step == 2 and len(seen) == 2
    logged = [h for h in trainer.state.log_history if "tools/call_frequency" in h]
    assert len(logged) == 2 and all(math.isfinite(float(h["loss"])) for h in logged)
    assert all(float(h["tools/failure_frequency"]) == 0.0 for h in logged)
    with_tools, cut = 0, 0
    for completions, completion_ids, kwargs in seen:
        assert "environments" in kwargs and kwargs["video"] == [video, video]
        for i, (completion, ids) in enumerate(zip(completions, completion_ids)):
            columns = {k: [kwargs[k][i]] for k in ("answer", "question_type", "options")}
            (ours,) = paravt_reward(
                prompts=[None], completions=[completion], completion_ids=[ids], **columns
            )
            raw = raw_text(ids, tok)
            direct = score(raw, kwargs["answer"][i], "mcq", options=kwargs["options"][i])
            assert ours == direct.total, (completion, raw)
            tool_messages = [m for m in completion if m["role"] == "tool"]
            if not tool_messages:
                continue
            with_tools += 1
            first = completion[0]
            assert [c["function"]["name"] for c in first["tool_calls"]] == ["crop_video"] * 2
            assert first["reasoning_content"].strip().startswith("The overview is too sparse")
            assert len(tool_messages) == 2 == direct.tool_responses == direct.call_attempts
            narrow, wide = ([p for p in m["content"] if p["type"] == "text"] for m in tool_messages)
            assert narrow[0]["text"].startswith("[2.0 s - 6.0 s]")
            note = wide[0]["text"]
            assert note.startswith("[12.0 s - 20.0 s]")
            clamp = "num_frames 40 is above the limit of 16 frames per call; clamped to 16."
            assert (clamp in note) == (len(wide) - 1 == 16)
            assert "end_time 30 s is past the end of the video (20.0 s); clamped to 20.0 s." in note
            images = [p for m in tool_messages for p in m["content"] if p["type"] == "image"]
            assert len(images) == len(narrow) - 1 + len(wide) - 1  # one timestamp per frame
            assert direct.tool > 0 and direct.invalid_calls == 0
            if ids[-1] != tok.eos_token_id:  # the answer turn was cut inside <think>
                cut += 1
                assert raw.endswith("it is blue.\n") and direct.answer is None
            else:
                assert direct.answer == "B"
            assert split_completion(completion).tool_responses == 2
    assert with_tools == 2 and cut == 1
