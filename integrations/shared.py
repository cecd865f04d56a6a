"""What every framework integration test shares: the completions, the direct scores they must
equal, the tiny tokenizer, and the README recipes (so a recipe that drifts fails here)."""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paravt.rewards import RewardBreakdown, RewardConfig, score

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "packages" / "paravt-rewards" / "README.md"
# the tool path inside the frameworks (paravt.train.integrations) is documented with paravt-train
TRAIN_README = ROOT / "packages" / "paravt-train" / "README.md"

CALL = '<tool_call>{{"name": "crop_video", "arguments": {{"start_time": {}, "end_time": {}}}}}</tool_call>'


@dataclass(frozen=True)
class Case:
    """One completion with its dataset row (answer and question type)."""

    completion: str
    answer: str
    question_type: str


CASES = (
    # the right answer after two parallel calls
    Case(
        "<think>The overview is coarse; I crop two windows at once.</think>"
        + CALL.format(10, 20)
        + CALL.format(40, 50)
        + "<answer>B</answer>",
        "B",
        "mcq",
    ),
    # a well-formatted wrong answer
    Case("<think>The square is red, so the answer is C.</think><answer>C</answer>", "B", "mcq"),
    # broken format
    Case("the answer might be B or C", "B", "mcq"),
    # a partly right open-ended answer (token F1)
    Case(
        "<think>I look at the last frames of the clip.</think><answer>a red circle</answer>",
        "a red square",
        "oe",
    ),
)
PRESETS = {"paragrpo": RewardConfig.paragrpo(), "vanilla": RewardConfig.vanilla()}


def direct(case: Case, preset: str = "paragrpo") -> RewardBreakdown:
    """`paravt.rewards.score` called directly: what every framework path must reproduce."""
    return score(case.completion, case.answer, case.question_type, PRESETS[preset])


def verl_metrics(r: RewardBreakdown) -> dict[str, float]:
    """The extra metrics the verl adapter must report for a direct score."""
    return {
        "score": r.total,
        "acc": r.accuracy,
        "format": r.format,
        "base_format": r.base_format,
        "anchor": r.anchor,
        "tool": r.tool,
        "penalty": r.penalty,
        "degenerate": float(r.degenerate is not None),
        "judge_unavailable": float(r.judge == "unavailable"),
    }


def tokenizer_dir(tmp: Path) -> Path:
    """The tiny byte-level BPE tokenizer of paravt-core (ChatML tokens special, protocol tags
    plain added tokens), saved where a framework's own loader can read it."""
    from paravt.core.testing import build_tokenizer

    path = tmp / "tokenizer"
    build_tokenizer(seed=0).save_pretrained(path)
    return path


def readme_block(framework: str, readme: Path = README) -> str:
    """The fenced code block right after `<!-- recipe: FRAMEWORK -->` in `readme` (default: the
    paravt-rewards README; the tool-path recipes are in TRAIN_README)."""
    text = readme.read_text(encoding="utf-8")
    match = re.search(
        rf"<!-- recipe: {re.escape(framework)} -->\s*```[a-z]*\n(.*?)```", text, flags=re.S
    )
    if match is None:
        raise AssertionError(f"{readme} has no '<!-- recipe: {framework} -->' code block")
    return match.group(1)


def readme_tested_version(framework: str) -> str:
    """The version the README's section states as tested ('Tested with verl 0.9.1')."""
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"Tested with {re.escape(framework)} ([0-9][^ ,;)]*)", text, flags=re.I)
    if match is None:
        raise AssertionError(f"{README} states no 'Tested with {framework} <version>'")
    return match.group(1).rstrip(".")


def as_list(values: Any) -> list[float]:
    """Floats from a tensor, numpy array or list."""
    if hasattr(values, "tolist"):
        values = values.tolist()
    return [float(v) for v in values]


def openrlhf_parser() -> Any:
    """The argument parser `python -m openrlhf.cli.train_ppo_ray` builds (its own code)."""
    import openrlhf.cli

    path = Path(openrlhf.cli.__file__).parent / "train_ppo_ray.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    # the module's standard-library imports (argparse, datetime, ...), then its __main__ block
    # up to parse_args; its other imports start ray, DeepSpeed and vLLM, which the parser needs not
    body: list[ast.stmt] = [
        node
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        and all(
            (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
            in sys.stdlib_module_names
            for alias in node.names
        )
    ]
    main = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
    )
    for stmt in main.body:
        if "parse_args" in ast.unparse(stmt):
            break
        body.append(stmt)
    namespace: dict[str, Any] = {"__name__": "train_ppo_ray_parser"}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), namespace)
    return namespace["parser"]
