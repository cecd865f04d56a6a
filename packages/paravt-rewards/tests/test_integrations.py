"""Each adapter called exactly the way its framework's reward manager calls it."""

from __future__ import annotations

import json

import pytest

from paravt.rewards import RewardConfig
from paravt.rewards.integrations import (
    compute_score,
    make_areal_reward_fn,
    make_openrlhf_reward_func,
    reward_fn,
    reward_func,
    trl_reward_funcs,
    trl_reward_weights,
)

GOOD = "<think>I check the clip.</think><answer>B</answer>"
CALL = (
    '<tool_call>{"name": "crop_video", "arguments": {"start_time": 1, "end_time": 9}}</tool_call>'
)
WITH_CALL = "<think>I check the clip.</think>" + CALL + "<answer>B</answer>"


# ---------------------------------------------------------------- TRL


def trl_call(fn, completions, **columns):
    """As GRPOTrainer._calculate_rewards: keywords, columns as lists, plus trainer extras."""
    n = len(completions)
    log_metric = columns.pop("log_metric", lambda name, value: None)
    return fn(
        prompts=["Which option?"] * n,
        completions=completions,
        completion_ids=[[1, 2, 3]] * n,
        **columns,
        trainer_state=object(),
        log_extra=lambda column, values: None,
        log_metric=log_metric,
    )


def test_trl_reward_scores_plain_text_completions_from_dataset_columns() -> None:
    (fn,) = trl_reward_funcs("paragrpo")
    out = trl_call(fn, [GOOD, "<answer>C</answer>"], answer=["B", "B"], question_type=["mcq"] * 2)
    assert out == pytest.approx([2.0, 0.6])


def test_trl_reward_accepts_chat_format_completions() -> None:
    (fn,) = trl_reward_funcs()
    completions = [
        [{"role": "assistant", "content": GOOD}],
        [{"role": "assistant", "content": [{"type": "text", "text": GOOD}]}],
    ]
    assert trl_call(fn, completions, answer=["B", "B"], question_type=["mcq", "mcq"]) == [2.0, 2.0]


def test_trl_tool_messages_count_as_a_tool_response() -> None:
    (fn,) = trl_reward_funcs(components=True)[2:3]
    completions = [
        [
            {"role": "assistant", "content": "<think>I check the clip.</think>" + CALL},
            {"role": "tool", "content": "red at 12 s"},
            {"role": "assistant", "content": "<answer>B</answer>"},
        ]
    ]
    assert trl_call(fn, completions, answer=["B"], question_type=["mcq"]) == [0.8]


def test_trl_reads_the_reference_extra_info_json_column() -> None:
    (fn,) = trl_reward_funcs()
    extra = json.dumps({"answer": "[10, 20]", "question_type": "tvg"})
    out = trl_call(
        fn, ["<think>Found the event.</think><answer>[15, 25]</answer>"], extra_info=[extra]
    )
    assert out == pytest.approx([1 / 3 + 1.0])


def test_trl_component_functions_sum_to_the_total_with_the_matching_weights() -> None:
    cfg = RewardConfig.paragrpo(gamma=0.5)
    funcs = trl_reward_funcs(cfg, components=True)
    assert [f.__name__ for f in funcs] == [
        "paravt_accuracy",
        "paravt_format",
        "paravt_tool",
        "paravt_penalty",
    ]
    comps = [trl_call(f, [WITH_CALL + CALL], answer=["B"], question_type=["mcq"])[0] for f in funcs]
    (total_fn,) = trl_reward_funcs(cfg)
    total = trl_call(total_fn, [WITH_CALL + CALL], answer=["B"], question_type=["mcq"])[0]
    assert sum(w * c for w, c in zip(trl_reward_weights(cfg), comps)) == pytest.approx(total)


def test_trl_total_function_logs_component_means() -> None:
    logged: dict[str, float] = {}
    (fn,) = trl_reward_funcs()
    trl_call(
        fn,
        [GOOD, "x"],
        answer=["B", "B"],
        question_type=["mcq"] * 2,
        log_metric=lambda name, value: logged.__setitem__(name, value),
    )
    assert logged["paravt/reward/accuracy"] == 0.5
    assert "paravt/flag/judge_unavailable" in logged


def test_scalar_adapters_refuse_token_level_anchoring() -> None:
    with pytest.raises(ValueError, match="anchoring='sequence'"):
        trl_reward_funcs(RewardConfig(anchoring="token"))


# ---------------------------------------------------------------- verl


def test_verl_compute_score_called_like_the_naive_reward_manager() -> None:
    # verl: self.compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...)
    out = compute_score(
        data_source="paravt",
        solution_str=WITH_CALL,
        ground_truth="B",
        extra_info={"question_type": "mcq", "index": 3},
    )
    assert out["score"] == pytest.approx(2.6)
    assert {"acc", "format", "tool", "penalty", "anchor"} <= set(out)
    assert all(isinstance(v, float) for v in out.values())


def test_verl_accepts_newer_keywords_and_reward_kwargs() -> None:
    # newer managers add step/tokenizer; custom_reward_function.reward_kwargs add preset/config
    out = compute_score(
        data_source="paravt",
        solution_str=GOOD,
        ground_truth="B",
        extra_info=json.dumps({"question_type": "mcq"}),
        step=3,
        tokenizer=None,
        preset="vanilla",
    )
    assert out["score"] == pytest.approx(1.7)
    out = compute_score("paravt", GOOD, "B", {"question_type": "mcq"}, config={"format_weight": 0})
    assert out["score"] == pytest.approx(1.0)


# ---------------------------------------------------------------- AReaL


def test_areal_reward_fn_called_like_the_rlvr_workflow() -> None:
    # AReaL: reward_fn(prompt_str, completions_str, input_tokens, output_tokens, **data)
    data = {"answer": "B", "question_type": "mcq", "messages": [{"role": "user", "content": "?"}]}
    assert reward_fn("Which option?", WITH_CALL, [1, 2], [3, 4, 5], **data) == pytest.approx(2.6)
    vanilla = make_areal_reward_fn("vanilla")
    assert vanilla("q", GOOD, [1], [2], **data) == pytest.approx(1.7)


# ---------------------------------------------------------------- OpenRLHF


def test_openrlhf_reward_func_called_with_queries_prompts_and_labels() -> None:
    torch = pytest.importorskip("torch")
    prompt = "<|im_start|>user\nWhich option?<|im_end|>\n<|im_start|>assistant\n"
    queries = [prompt + GOOD + "<|im_end|>", prompt + "<answer>C</answer><|im_end|>"]
    labels = ["B", json.dumps({"answer": "B", "question_type": "mcq"})]
    out = reward_func(queries, [prompt, prompt], labels)
    assert set(out) == {"rewards", "scores", "extra_logs"}
    assert isinstance(out["rewards"], torch.Tensor)
    # label 0 has no question type: F1 of "B" vs "B" is an exact match anyway
    assert out["rewards"].tolist() == pytest.approx([2.0, 0.6])
    assert out["scores"].tolist() == [1.0, 0.0]
    assert set(out["extra_logs"]) == {"accuracy", "format", "tool", "penalty"}
    keyword = make_openrlhf_reward_func("vanilla")(
        queries=queries, prompts=[prompt] * 2, labels=labels
    )
    assert keyword["rewards"].tolist() == pytest.approx([1.7, 0.4])


def test_openrlhf_rejects_mismatched_batches_with_a_clear_error() -> None:
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match="one prompt and one label per query"):
        reward_func(["a", "b"], ["a"], ["B", "B"])


def test_the_parser_counts_tool_responses_carried_in_a_transcript() -> None:
    from paravt.core import parse_response

    text = WITH_CALL.replace("<answer>", "<tool_response>red</tool_response>\n<answer>")
    assert parse_response(text).num_tool_responses == 1
    assert parse_response(WITH_CALL).num_tool_responses == 0
