"""`paravt-train doctor`: what a run needs, checked on this machine, with what is wrong and the fix.

Checks: Python, torch and transformers versions; CUDA (devices, free memory per device), NCCL,
cuDNN (below 9.15 with torch 2.9+, Qwen-VL vision towers' Conv3d falls back to a slow, memory-hungry
kernel and SGLang refuses to start or stalls on multimodal requests: pytorch/pytorch#174051,
sgl-project/sglang#14564); SGLang's version when it is installed here (it need not be: servers
may run elsewhere), `SGLANG_RETURN_ORIGINAL_LOGPROB` (it would make rollout log-probs
pre-temperature, unlike the trainer's); and every SGLang server given with `--server` (or in a
recipe's `rollout.server.urls`): `/health`, `/model_info`, its weight version.

With `--recipe`, the machine is judged against that recipe: a CPU recipe (`distributed.device`
cpu, or auto with no GPU here, and no GPU-only setting) passes on a CPU machine; a GPU recipe
(`distributed.device=cuda`, `distributed.backend=nccl`, `model.dtype=bfloat16`, a flash-attention
backend) fails there with one line naming why. The GPU lines (devices, NCCL, bf16, cuDNN) appear
only when a GPU is present. The recipe's `model.path` (unless `model.build_tiny` builds it),
`data.parquet` (unless `data.synth` generates it) and `data.root` must exist.

Every finding is OK, WARN or FAIL; the exit status is 1 when anything FAILs. A recipe that does not
load (unknown key, bad value) raises `RecipeError` (the CLI prints it in one line, exit 2).
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paravt.train.engine_registry import engine_checks
from paravt.train.recipe import RLRecipe, load_recipe
from paravt.train.synth_sets import stale_synth

if TYPE_CHECKING:
    from paravt.train.recipe import RLRecipe, SFTRecipe

CUDNN_MIN = (9, 15)  # below: the Conv3d fallback behind the SGLang multimodal hang (see above)
FREE_MEMORY_WARN = 0.5  # a trainer GPU with less than half its memory free is probably in use


@dataclass
class Finding:
    level: str  # OK, WARN, FAIL
    what: str
    detail: str

    def line(self) -> str:
        return f"[{self.level:<4}] {self.what}: {self.detail}"


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return None


def _cudnn_tuple(raw: int) -> tuple[int, int, int]:
    """torch.backends.cudnn.version() as (major, minor, patch): 90100 is 9.1.0, 8902 is 8.9.2."""
    if raw >= 10000:
        return raw // 10000, raw // 100 % 100, raw % 100
    return raw // 1000, raw // 100 % 10, raw % 100


def gpu_needs(recipe: SFTRecipe | RLRecipe) -> list[str]:
    """The settings of a recipe that need a GPU (empty for a CPU recipe)."""
    needs = []
    if recipe.distributed.device == "cuda":
        needs.append("distributed.device=cuda")
    if recipe.distributed.backend == "nccl":
        needs.append("distributed.backend=nccl")
    if recipe.model.dtype == "bfloat16":
        needs.append("model.dtype=bfloat16")
    if recipe.model.attn_implementation.startswith("flash_attention"):
        needs.append(f"model.attn_implementation={recipe.model.attn_implementation}")
    return needs


def check_stack(needs: Sequence[str] = (), recipe: str | None = None) -> list[Finding]:
    """Python, torch, transformers, then CUDA, GPU memory, NCCL, bf16 and cuDNN when a GPU is
    here (or one FAIL line when `recipe` needs one and there is none), SGLang."""
    out = [Finding("OK", "python", platform.python_version())]
    try:
        import torch
    except ImportError:
        return [*out, Finding("FAIL", "torch", "not installed: pip install 'paravt-train'")]
    torch_version = torch.__version__.split("+")[0]
    out.append(Finding("OK", "torch", torch.__version__))
    tf = _version("transformers")
    out.append(Finding("OK" if tf else "FAIL", "transformers", tf or "not installed"))
    if torch.cuda.is_available():
        out += _gpu_findings(torch, torch_version, "model.dtype=bfloat16" in needs)
    elif needs:
        out.append(
            Finding(
                "FAIL",
                "gpu",
                f"recipe {recipe} needs a GPU ({', '.join(needs)}) but torch sees none (CPU build, "
                "no driver, or CUDA_VISIBLE_DEVICES empty); run it on a GPU machine, or use a CPU "
                "recipe (tiny_sft, tiny_paragrpo)",
            )
        )
    elif recipe is not None:
        out.append(Finding("OK", "device", f"cpu (no GPU here; recipe {recipe} needs none)"))
    else:
        out.append(
            Finding(
                "WARN",
                "device",
                "no GPU: torch sees none (CPU build, no driver, or CUDA_VISIBLE_DEVICES empty); "
                "this machine runs the CPU recipes only (--recipe judges one)",
            )
        )
    sg = _version("sglang")
    if sg is None:
        out.append(
            Finding("OK", "sglang", "not installed here (fine when the servers run elsewhere)")
        )
    else:
        out.append(Finding("OK", "sglang", sg))
    if os.environ.get("SGLANG_RETURN_ORIGINAL_LOGPROB", "").lower() in ("1", "true", "yes"):
        out.append(
            Finding(
                "WARN",
                "SGLANG_RETURN_ORIGINAL_LOGPROB",
                "set: servers started from this shell return log-probs before temperature "
                "scaling, the trainer computes them after; unset it",
            )
        )
    return out


def _gpu_findings(torch: Any, torch_version: str, needs_bf16: bool) -> list[Finding]:
    n = torch.cuda.device_count()
    out = [Finding("OK", "cuda", f"{n} device(s), CUDA {torch.version.cuda}")]
    for i in range(n):
        free, total = torch.cuda.mem_get_info(i)
        name = torch.cuda.get_device_name(i)
        level = "OK" if free / total >= FREE_MEMORY_WARN else "WARN"
        detail = f"{name}: {free / 2**30:.1f} of {total / 2**30:.1f} GiB free"
        if level == "WARN":
            detail += " (something else holds it: another job, or a rollout server here)"
        out.append(Finding(level, f"gpu {i}", detail))
    try:
        nccl = ".".join(str(x) for x in torch.cuda.nccl.version())
        out.append(Finding("OK", "nccl", nccl))
    except Exception as exc:
        out.append(Finding("FAIL", "nccl", f"not usable: {exc}"))
    try:
        bf16 = bool(torch.cuda.is_bf16_supported())
    except Exception:
        bf16 = False
    if bf16:
        out.append(Finding("OK", "bf16", "supported"))
    else:
        out.append(
            Finding(
                "FAIL" if needs_bf16 else "WARN",
                "bf16",
                "not supported by this GPU; set model.dtype=float32",
            )
        )
    out.append(check_cudnn(torch_version, _cudnn_raw(torch)))
    return out


def _looks_like_hub_id(text: str) -> bool:
    return re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", text) is not None


def _where(path: str) -> str:
    """The recipe path rule, said where a relative path is missing: relative paths are read from
    the current directory (a packaged recipe's `runs/tiny/...` too), never from the recipe file's."""
    if Path(path).is_absolute():
        return ""
    return f" (relative paths are read from the current directory, {Path.cwd()})"


def check_paths(recipe: SFTRecipe | RLRecipe) -> list[Finding]:
    """model.path (or model.build_tiny), every data.parquet (or data.synth), data.root."""
    out = []
    model = recipe.model
    if Path(model.path).exists():
        out.append(Finding("OK", "model.path", model.path))
    elif model.build_tiny:
        out.append(Finding("OK", "model.path", f"{model.path} (built by model.build_tiny)"))
    elif _looks_like_hub_id(model.path):
        out.append(
            Finding(
                "WARN",
                "model.path",
                f"{model.path} is no local directory: a Hugging Face Hub id, downloaded on first "
                "use (needs network; set model.path=DIR for a local copy)",
            )
        )
    else:
        out.append(
            Finding(
                "FAIL",
                "model.path",
                f"{model.path} does not exist{_where(model.path)}: set model.path=DIR (a Hugging Face model "
                "directory, e.g. an earlier stage's OUTPUT_DIR/final), or model.build_tiny=true "
                "for the tiny CPU model",
            )
        )
    synth = recipe.data.synth
    for item in recipe.data.parquet:
        path = Path(item)
        if path.is_file() or (path.is_dir() and any(path.glob("*.parquet"))):
            out.append(Finding("OK", "data.parquet", item))
        elif synth is not None and path.resolve().is_relative_to(Path(synth.out_dir).resolve()):
            out.append(Finding("OK", "data.parquet", f"{item} (generated by data.synth)"))
        else:
            out.append(
                Finding(
                    "FAIL",
                    "data.parquet",
                    f"{item}: no such parquet file (or directory of *.parquet)"
                    f"{_where(item)}: download or "
                    "generate it (`paravt-tools synth`), or set data.parquet=[PATH]",
                )
            )
    if synth is not None:
        stale = stale_synth(recipe.data)
        if stale:
            out.append(Finding("FAIL", "data.synth", stale))
    root = recipe.data.root
    if root is not None and not Path(root).is_dir():
        out.append(
            Finding(
                "FAIL",
                "data.root",
                f"{root} does not exist{_where(str(root))}: set data.root=DIR, where ParaVT-Source was extracted",
            )
        )
    return out


def _cudnn_raw(torch: Any) -> int | None:
    try:
        if not torch.backends.cudnn.is_available():
            return None
        raw = torch.backends.cudnn.version()
        return int(raw) if raw else None
    except Exception:
        return None


def check_cudnn(torch_version: str, raw: int | None) -> Finding:
    """cuDNN against the Conv3d fallback behind the SGLang multimodal hang (torch 2.9+, < 9.15)."""
    if raw is None:
        return Finding(
            "WARN", "cudnn", "not available (no CUDA build); GPU runs need cuDNN >= 9.15"
        )
    version = _cudnn_tuple(raw)
    text = ".".join(str(x) for x in version)
    major_minor = tuple(int(x) for x in torch_version.split(".")[:2] if x.isdigit())
    if version[:2] < CUDNN_MIN and major_minor >= (2, 9):
        return Finding(
            "FAIL",
            "cudnn",
            f"{text} with torch {torch_version}: below 9.15, the vision tower's Conv3d falls back "
            "to a slow, memory-hungry kernel and SGLang stalls on multimodal requests "
            "(pytorch/pytorch#174051, sgl-project/sglang#14564); "
            "pip install 'nvidia-cudnn-cu12>=9.15' (or -cu13 to match your CUDA)",
        )
    return Finding("OK", "cudnn", text)


def check_servers(urls: Sequence[str], timeout_s: float = 5.0) -> list[Finding]:
    """`/health` and `/model_info` (SGLang >= 0.5.6) of every SGLang server URL."""
    import httpx

    out = []
    for url in urls:
        base = url.rstrip("/")
        try:
            health = httpx.get(base + "/health", timeout=timeout_s)
            if health.status_code != 200:
                raise RuntimeError(f"/health answered HTTP {health.status_code}")
            reply = httpx.get(base + "/model_info", timeout=timeout_s)
            if reply.status_code == 404:
                raise RuntimeError(
                    "no /model_info: SGLang older than 0.5.6 (supported: 0.5.6-0.5.23)"
                )
            info = reply.json()
        except Exception as exc:
            out.append(
                Finding(
                    "FAIL",
                    f"server {base}",
                    f"unreachable ({type(exc).__name__}: {exc}); start it with "
                    "python -m sglang.launch_server --model-path ... --host 0.0.0.0 --port ...",
                )
            )
            continue
        model = info.get("model_path") if isinstance(info, dict) else None
        version = info.get("weight_version") if isinstance(info, dict) else None
        detail = f"healthy, model {model}, weight version {version}"
        level = "OK"
        if version is None:
            level = "WARN"
            detail += " (no weight_version: needs an SGLang that reports it to check rollouts)"
        out.append(Finding(level, f"server {base}", detail))
    return out


def recipe_urls(name: str, overrides: Sequence[str]) -> list[str]:
    """The rollout server URLs of a recipe (empty for the hf engine)."""

    return _server_urls(load_recipe(name, list(overrides)))


def _server_urls(recipe: SFTRecipe | RLRecipe) -> list[str]:
    """The servers the recipe's rollout engine names for these checks
    (`EngineChecks.doctor_server_urls`: SGLang's every rollout and weight URL, none otherwise;
    the engine's light checks, so no torch or trainer is loaded)."""
    if not isinstance(recipe, RLRecipe):
        return []
    checks = engine_checks(recipe.rollout.engine)  # registered: the recipe validated
    urls = getattr(checks, "doctor_server_urls", None)
    return list(urls(recipe.rollout)) if urls is not None else []


def run(
    servers: Sequence[str] = (), recipe: str | None = None, overrides: Sequence[str] = ()
) -> int:
    """Print every finding; 1 when anything FAILs. A recipe that does not load raises
    `RecipeError`."""
    urls = list(servers)
    if recipe:
        loaded = load_recipe(recipe, list(overrides))
        findings = check_stack(gpu_needs(loaded), recipe) + check_paths(loaded)
        urls += _server_urls(loaded)
    else:
        findings = check_stack()
    findings += check_servers(list(dict.fromkeys(urls)))
    for f in findings:
        print(f.line())
    failed = [f for f in findings if f.level == "FAIL"]
    print(f"{len(failed)} problem(s)" if failed else "all checks passed")
    return 1 if failed else 0


def add_parser(sub: Any) -> None:
    """The `doctor` subcommand of `paravt-train`."""
    p = sub.add_parser(
        "doctor",
        help="check what a run needs here (GPU, NCCL, cuDNN, model and data paths, servers)",
    )
    p.add_argument("--server", action="append", default=[], help="an SGLang server URL to check")
    p.add_argument(
        "--recipe",
        help="judge this machine against this recipe: GPU or CPU, its model.path and "
        "data.parquet, its rollout.server.urls",
    )
    p.add_argument("overrides", nargs="*", help="recipe overrides key=value")
