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
# a call that ran: the tool response is the environment's (the presets pay only for evidence)
WITH_CALL = (
    "<think>I check the clip.</think>"
    + CALL
    + "<tool_response>A red square.</tool_response><answer>B</answer>"
)


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
    assert out["score"] == pytest.approx(2.8)
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
    assert reward_fn("Which option?", WITH_CALL, [1, 2], [3, 4, 5], **data) == pytest.approx(2.8)
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

    bare = "<think>I check the clip.</think>" + CALL + "<answer>B</answer>"
    text = bare.replace("<answer>", "<tool_response>red</tool_response>\n<answer>")
    assert parse_response(text).num_tool_responses == 1
    assert parse_response(bare).num_tool_responses == 0


# ---------------------------------------------------------------- TRL tool-calling completions


def test_trl_tool_messages_are_never_graded_as_the_answer() -> None:
    """TRL's tool-calling loop hands the reward the environment's tool messages: a tool message
    holding the right answer earns no accuracy, and counts as one tool response."""
    from paravt.rewards import score

    (total,) = trl_reward_funcs()
    acc, _fmt, tool, _pen = trl_reward_funcs(components=True)
    call_turn = {"role": "assistant", "content": "<think>I check the clip.</think>" + CALL}
    for tool_content in ("B", [{"type": "text", "text": "B"}]):
        completions = [[call_turn, {"role": "tool", "content": tool_content}]]
        assert trl_call(acc, completions, answer=["B"], question_type=["mcq"]) == [0.0]
        assert trl_call(tool, completions, answer=["B"], question_type=["mcq"]) == [0.3]
        direct = score(call_turn["content"], "B", "mcq", tool_responses=1)
        assert trl_call(total, completions, answer=["B"], question_type=["mcq"]) == [direct.total]
    # the answer the model itself gives after the tool message is graded
    completions = [
        [
            call_turn,
            {"role": "tool", "content": "C"},
            {"role": "assistant", "content": "<answer>B</answer>"},
        ]
    ]
    assert trl_call(acc, completions, answer=["B"], question_type=["mcq"]) == [1.0]


def test_split_completion_keeps_only_what_the_model_wrote() -> None:
    from paravt.rewards.integrations import split_completion

    messages = [
        {"role": "assistant", "content": "<think>a</think>"},
        {"role": "tool", "content": "<answer>B</answer>"},
        {"role": "assistant", "content": [{"type": "text", "text": "<answer>C</answer>"}]},
    ]
    got = split_completion(messages)
    assert (got.text, got.tool_responses) == ("<think>a</think>\n<answer>C</answer>", 1)
    assert split_completion("plain").tool_responses is None


# ---------------------------------------------------------------- framework drift


@pytest.fixture
def fresh_version_check(monkeypatch: pytest.MonkeyPatch):
    from paravt.rewards.integrations import common

    monkeypatch.setattr(common, "_CHECKED", set())
    return common


def test_an_untested_framework_version_warns_once_with_the_tested_range(
    fresh_version_check, monkeypatch: pytest.MonkeyPatch
) -> None:
    from paravt.rewards.integrations import FrameworkVersionWarning

    monkeypatch.setattr(fresh_version_check.metadata, "version", lambda name: "0.10.0")
    with pytest.warns(FrameworkVersionWarning, match=r"verl 0\.10\.0 .* tested with verl 0\.9\.1"):
        compute_score("paravt", GOOD, "B", {"question_type": "mcq"})
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compute_score("paravt", GOOD, "B", {"question_type": "mcq"})  # once per process


@pytest.mark.parametrize("installed", ["0.9.1", "0.9.1.post1", None])
def test_a_tested_or_absent_framework_does_not_warn(
    fresh_version_check, monkeypatch: pytest.MonkeyPatch, installed: str | None
) -> None:
    import warnings

    def version(name: str) -> str:
        if installed is None:
            raise fresh_version_check.metadata.PackageNotFoundError(name)
        return installed

    monkeypatch.setattr(fresh_version_check.metadata, "version", version)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compute_score("paravt", GOOD, "B", {"question_type": "mcq"})


# ---------------------------------------------------------------- verl managers' contracts


def test_verl_batch_form_returns_one_dict_per_response() -> None:
    # verl's batch manager: compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=)
    out = compute_score(
        data_sources=["paravt", "paravt"],
        solution_strs=[WITH_CALL, "<answer>C</answer>"],
        ground_truths=["B", "B"],
        extra_infos=[{"question_type": "mcq"}, {"question_type": "mcq"}],
        preset="paragrpo",
    )
    assert [o["score"] for o in out] == pytest.approx([2.8, 0.6])
    with pytest.raises(ValueError, match="one of each per response"):
        compute_score(solution_strs=["a", "b"], ground_truths=["B"])


def test_verl_prime_reads_the_total_at_index_0_and_pickles_the_function() -> None:
    import pickle
    from functools import partial

    out = compute_score("paravt", WITH_CALL, "B", {"question_type": "mcq"})  # positional, as prime
    assert out[0] == out["score"] == pytest.approx(2.8)
    assert 0 not in out and float(out[0]) == pytest.approx(2.8)
    assert pickle.loads(pickle.dumps(partial(compute_score, "paravt")))(WITH_CALL, "B")["score"]


def test_verl_module_loaded_from_its_file_path_hands_out_picklable_functions() -> None:
    import importlib.util
    import pickle

    import paravt.rewards.integrations.verl as canonical

    spec = importlib.util.spec_from_file_location("custom_module_123", canonical.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # what verl's load_extern_object does with a file path
    assert module.compute_score is canonical.compute_score
    assert pickle.loads(pickle.dumps(module.compute_score)) is canonical.compute_score


# ---------------------------------------------------------------- AReaL and OpenRLHF contracts


def test_areal_reward_pickles_as_object_and_resolves_as_dotted_path() -> None:
    import importlib
    import pickle

    from paravt.rewards.integrations import ArealReward

    data = {"answer": "B", "question_type": "mcq"}
    copy = pickle.loads(pickle.dumps(make_areal_reward_fn("vanilla")))
    assert isinstance(copy, ArealReward) and copy("q", GOOD, [], [], **data) == pytest.approx(1.7)
    module = importlib.import_module("paravt.rewards.integrations.areal")
    assert module.reward_fn is reward_fn  # what AReaL's import_from_string resolves


def test_openrlhf_scores_only_the_response_when_the_prompt_was_truncated() -> None:
    from paravt.rewards.integrations.openrlhf import response_of

    prompt = "<answer>A</answer> Reply inside <answer></answer>.\nWhich option?\n"
    assert response_of(prompt + GOOD, prompt) == GOOD
    assert response_of(prompt[20:] + GOOD, prompt) == GOOD  # OpenRLHF kept the prompt's tail
    assert response_of("\ufffd" + prompt[21:] + GOOD, prompt) == GOOD  # cut inside a character
    assert response_of(GOOD, "unrelated prompt") == GOOD
