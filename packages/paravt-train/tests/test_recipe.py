"""Recipes: YAML + pydantic, unknown keys named, key.sub=value overrides, packaged recipes."""

from __future__ import annotations

from pathlib import Path

import pytest

from paravt.train.cli import build_parser, main
from paravt.train.recipe import (
    RECIPE_NAMES,
    RecipeError,
    RLRecipe,
    SFTRecipe,
    apply_overrides,
    load_recipe,
    parse_override,
)


@pytest.mark.parametrize("name", RECIPE_NAMES)
def test_every_packaged_recipe_loads_and_validates(name: str) -> None:
    recipe = load_recipe(name)
    assert isinstance(recipe, SFTRecipe if "sft" in name else RLRecipe)


@pytest.mark.parametrize("name", ["tiny_sft", "tiny_paragrpo", "tiny_vanilla_grpo"])
def test_synthetic_teacher_crops_default_to_the_frames_the_recipe_shows(name: str) -> None:
    """Otherwise every teacher trace describes crop frames the model is not shown (a warning)."""
    recipe = load_recipe(name)
    assert recipe.data.synth is not None and recipe.video.max_crop_frames == 4
    assert recipe.data.synth.crop_max_frames == 4
    wider = load_recipe(name, ["video.max_crop_frames=8"])
    assert wider.data.synth is not None and wider.data.synth.crop_max_frames == 8
    chosen = load_recipe(name, ["data.synth.crop_max_frames=2"])
    assert chosen.data.synth is not None and chosen.data.synth.crop_max_frames == 2


def test_reference_paragrpo_recipe_carries_the_paper_settings() -> None:
    r = load_recipe("paragrpo_8b")
    assert isinstance(r, RLRecipe)
    assert (r.rollout.group_size, r.rollout.batch_prompts, r.rollout.temperature) == (8, 7, 0.7)
    assert (r.rollout.max_turns, r.rollout.max_parallel, r.rollout.max_new_tokens) == (3, 5, 2048)
    assert (r.optim.lr, r.optim.schedule, r.loss.clip_eps, r.loss.kl_coef) == (
        2e-6,
        "constant",
        0.2,
        0.01,
    )
    assert (r.advantage.reward_scaling, r.advantage.reward_bias) == (10.0, -0.2)
    assert r.gating.enabled and r.gating.choices == (4, 8, 16, 32, 64)
    assert r.distributed.strategy == "fsdp2" and r.rollout.engine == "sglang_server"
    assert r.rollout.server.urls == ["http://127.0.0.1:30000"] and r.rollout.server.verify_sync
    # asynchronous as the reference (AReaL max_head_offpolicyness: 2), with the decoupled loss
    assert r.rollout.max_staleness == 2 and r.loss.decoupled
    vanilla = load_recipe("vanilla_grpo_8b")
    assert isinstance(vanilla, RLRecipe)
    assert not vanilla.gating.enabled and not vanilla.rollout.think_prefix
    assert vanilla.reward.build().lambda_anchor == 0.0


def test_asynchronous_rollouts_need_servers_apart_from_training_and_the_decoupled_loss() -> None:
    with pytest.raises(
        RecipeError,
        match=r"max_staleness=1 needs a rollout engine .*\(rollout\.engine=sglang_server or "
        r"rollout\.engine=vllm_server\); "
        r"rollout\.engine=hf does not \(the in-process engine generates with the very weights",
    ):
        load_recipe("tiny_paragrpo", ["rollout.max_staleness=1", "loss.decoupled=true"])
    with pytest.raises(RecipeError, match=r"cannot run with rollout\.server\.colocate=true"):
        load_recipe("paragrpo_8b", ["rollout.server.colocate=true"])
    with pytest.raises(RecipeError, match=r"needs loss\.decoupled=true"):
        load_recipe("paragrpo_8b", ["loss.decoupled=false"])
    sync = load_recipe("paragrpo_8b", ["rollout.max_staleness=0", "rollout.server.colocate=true"])
    assert isinstance(sync, RLRecipe) and sync.rollout.server.colocate


def test_vllm_rollouts_go_through_the_disk_and_run_ahead_only_draining_around_a_reload() -> None:
    url = "rollout.server.urls=[http://127.0.0.1:8000]"
    recipe = load_recipe("tiny_paragrpo", ["rollout.engine=vllm_server", url])
    assert recipe.rollout.engine == "vllm_server"
    with pytest.raises(RecipeError, match=r"vllm_server needs rollout\.server\.urls"):
        load_recipe("tiny_paragrpo", ["rollout.engine=vllm_server"])
    # asynchronous: the client tags each reply with its weights, no request crosses a reload
    ahead = ["rollout.engine=vllm_server", url, "rollout.max_staleness=2", "loss.decoupled=true"]
    assert load_recipe("tiny_paragrpo", ahead).rollout.max_staleness == 2
    assert load_recipe("tiny_paragrpo", [*ahead, "rollout.server.pause_mode=drain"])
    for mode in ("retract", "in_place"):  # requests going on across a reload: refused
        with pytest.raises(
            RecipeError,
            match=rf"pause_mode={mode} lets a request go on across a weight reload.*"
            r"set rollout\.server\.pause_mode=drain",
        ):
            load_recipe("tiny_paragrpo", [*ahead, f"rollout.server.pause_mode={mode}"])
    # the 8B recipe on vLLM: its explicit retract (SGLang's) is refused, drain is the fix
    with pytest.raises(RecipeError, match=r"pause_mode=retract"):
        load_recipe("paragrpo_8b", ["rollout.engine=vllm_server"])
    assert load_recipe(
        "paragrpo_8b", ["rollout.engine=vllm_server", "rollout.server.pause_mode=drain"]
    )
    for key, value in [
        ("rollout.server.weight_sync", "distributed"),
        ("rollout.server.colocate", "true"),
    ]:
        with pytest.raises(
            RecipeError, match=rf"{key}=.* is not available with rollout\.engine=vllm_server"
        ):
            load_recipe("tiny_paragrpo", ["rollout.engine=vllm_server", url, f"{key}={value}"])


def test_an_engine_name_nobody_registered_is_refused_listing_the_registered_ones() -> None:
    with pytest.raises(
        RecipeError,
        match=r"rollout\.engine='nope' is no registered .*hf, sglang_server, .*vllm_server",
    ):
        load_recipe("tiny_paragrpo", ["rollout.engine=nope"])


def test_overrides_set_nested_keys_with_yaml_typed_values() -> None:
    r = load_recipe(
        "tiny_paragrpo", ["rollout.group_size=3", "optim.lr=5e-5", "gating.choices=[2,4]"]
    )
    assert r.rollout.group_size == 3 and r.optim.lr == 5e-5 and r.gating.choices == (2, 4)


def test_an_unknown_key_is_an_error_naming_the_key_and_the_allowed_ones() -> None:
    with pytest.raises(RecipeError) as err:
        load_recipe("tiny_sft", ["optim.lrr=1e-4"])
    text = str(err.value)
    assert "unknown key 'optim.lrr'" in text and "lr" in text and "warmup_steps" in text


def test_a_mistyped_value_names_the_key() -> None:
    with pytest.raises(RecipeError, match=r"sft\.batch_size"):
        load_recipe("tiny_sft", ["sft.batch_size=many"])


def test_an_sft_recipe_is_refused_by_the_rl_command() -> None:
    with pytest.raises(RecipeError, match="needs stage: rl"):
        load_recipe("tiny_sft", stage="rl")


@pytest.mark.parametrize("placed", [[], ["reward.overrides.anchor_format_issues=true"]])
def test_bad_reward_overrides_are_reported_as_recipe_errors(placed: list[str]) -> None:
    # also where a recipe check builds the reward first (no credit on charged tokens): the error
    # names reward.overrides, not an unknown top-level key
    with pytest.raises(RecipeError, match=r"(?s)reward\.overrides are not valid.*not_a_field"):
        load_recipe(
            "tiny_paragrpo",
            [*placed, "advantage.no_credit_on_issues=true", "reward.overrides.not_a_field=1"],
        )


def test_malformed_overrides_say_what_form_is_expected() -> None:
    with pytest.raises(RecipeError, match=r"key\.sub=value"):
        parse_override("optim.lr")
    with pytest.raises(RecipeError, match="is a value, not a section"):
        apply_overrides({"seed": 1}, ["seed.x=2"])


def test_a_recipe_file_on_disk_loads_with_overrides(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(
        "stage: sft\noutput_dir: out\nmax_steps: 3\nmodel: {path: m}\ndata: {parquet: d.parquet}\n"
        "optim: {lr: 0.1}\n"
    )
    r = load_recipe(str(path), ["sft.grad_accum=2"])
    assert isinstance(r, SFTRecipe) and r.sft.grad_accum == 2 and r.data.parquet == ["d.parquet"]


def test_the_cli_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    for command in ("sft", "rl", "materialize", "plot", "smoke"):
        assert command in out


def test_the_cli_reports_recipe_errors_without_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["sft", "tiny_sft", "optim.nope=1"]) == 2
    assert "unknown key 'optim.nope'" in capsys.readouterr().err


def test_help_recipe_lists_keys_with_their_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rl", "--help-recipe"]) == 0
    out = capsys.readouterr().out
    assert "loss.include_subagents_in_loss" in out and "rollout.group_size" in out


def test_sft_8b_runs_the_fixed_paths_fsdp2_bf16_workers_and_no_row_cache() -> None:
    recipe = load_recipe("sft_8b")
    assert recipe.distributed.strategy == "fsdp2" and recipe.model.dtype == "bfloat16"
    assert recipe.model.gradient_checkpointing
    assert recipe.sft.num_workers > 0 and recipe.sft.cache_rows == 0
    assert recipe.distributed.timeout_s > 0 and recipe.model.logprob_chunk_tokens <= 4096
