"""The real SGLang path end to end on one GPU: a person with a GPU runs this once and reads a table.

    python tools/gpu_check_sglang.py --model /path/to/Qwen3-VL-2B-Instruct --out runs/gpu_check

What it does, in order (every step logs under `--out`; the table says PASS / FAIL / SKIP and what
was measured):

1. **gpu**: the CUDA device, bf16 support (skipped with `--stand-in`).
2. **server**: starts `python -m sglang.launch_server` on `--model` (port `--port`) and waits for
   `/health` (`--start-timeout-s`); on failure, the server log's tail.
3. **rl**: two PARA-GRPO steps (`tiny_paragrpo` recipe on synthetic videos, `rollout.engine=
   sglang_server`, `rollout.server.verify_sync=true`, weights pushed from disk after each step).
   PASS when the run ends, the servers reported the pushed weight versions (step-0..2 from
   `/model_info`) and the probe log-probs of the server stayed within tolerance of the trainer's
   (`sync/logprob_max_abs_diff` per step, from the run's `metrics.jsonl`).
4. **pause**: a long `/generate` request in flight, `POST /pause_generation {"mode": "in_place"}`,
   the request must not finish while paused, `POST /continue_generation`, it must then finish.
5. **kill + resume**: a three-step run; once its first checkpoint exists the server is SIGKILLed.
   PASS when the run exits non-zero within `stall_dead_s` + a margin with an error naming the
   server's URL, and, after a fresh server start, `--resume` completes the remaining steps.

`--stand-in` runs the same checks against `python -m paravt.core.testing.stand_in` on the CPU
(this is how the script itself is tested; the `gpu` row is skipped, and the stand-in is ours, so
a stand-in PASS says nothing about SGLang). Needs: `pip install -e
packages/paravt-core[hf,openai,sglang] -e packages/paravt-train` and, for the real run, SGLang (`pip install "sglang[all]"`, 0.5.x).
Exit status: 0 when no row failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx


@dataclass
class Row:
    check: str
    status: str  # PASS / FAIL / SKIP
    detail: str
    seconds: float = 0.0


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)

    def add(self, check: str, status: str, detail: str, t0: float) -> Row:
        row = Row(check, status, detail, time.monotonic() - t0)
        self.rows.append(row)
        print(f"[{row.status}] {row.check}: {row.detail} ({row.seconds:.1f} s)", flush=True)
        return row

    def table(self) -> str:
        width = max(len(r.check) for r in self.rows)
        lines = [f"{'check':<{width}}  status  seconds  detail"]
        lines += [
            f"{r.check:<{width}}  {r.status:<6}  {r.seconds:7.1f}  {r.detail}" for r in self.rows
        ]
        return "\n".join(lines)


class Server:
    """One rollout server process (SGLang, or the stand-in) with its log file."""

    def __init__(self, args: argparse.Namespace, log: Path) -> None:
        self.args, self.log = args, log
        self.url = f"http://127.0.0.1:{args.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        if self.args.stand_in:
            return [
                sys.executable,
                "-m",
                "paravt.core.testing.stand_in",
                "--model-path",
                str(self.args.model),
                "--port",
                str(self.args.port),
            ]
        return [
            sys.executable,
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(self.args.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.args.port),
            "--mem-fraction-static",
            str(self.args.mem_fraction),
            *self.args.server_arg,
        ]

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.args.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}):\n{self.tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError(
            f"no healthy server at {self.url} after {self.args.start_timeout_s} s:\n{self.tail()}"
        )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else "(no log)"


def rl_command(args: argparse.Namespace, out: Path, url: str, steps: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "paravt.train",
        "rl",
        "tiny_paragrpo",
        f"model.path={args.model}",
        f"output_dir={out}",
        f"data.parquet=[{out.parent / 'synth' / 'rl.parquet'}]",
        f"data.synth.out_dir={out.parent / 'synth'}",
        "rollout.engine=sglang_server",
        f"rollout.server.urls=[{url}]",
        f"rollout.server.weight_dir={out / 'rollout_weights'}",
        "rollout.server.verify_sync=true",
        f"rollout.server.verify_sync_tolerance={args.tolerance}",
        "rollout.server.stall_warn_s=10",
        f"rollout.server.stall_dead_s={args.stall_dead_s}",
        "rollout.server.timeout_s=600",
        "rollout.server.retries=1",
        f"max_steps={steps}",
        "checkpoint.every_steps=1",
        f"checkpoint.keep_last={steps}",
        "logging.progress=false",
        *(["distributed.device=cpu"] if args.stand_in else []),
        *args.override,
    ]


def read_metrics(run: Path) -> list[dict[str, Any]]:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_gpu(report: Report, args: argparse.Namespace) -> None:
    t0 = time.monotonic()
    if args.stand_in:
        report.add("gpu", "SKIP", "--stand-in: CPU rehearsal of this script", t0)
        return
    import torch

    if not torch.cuda.is_available():
        report.add("gpu", "FAIL", "torch.cuda.is_available() is False", t0)
        return
    name = torch.cuda.get_device_name(0)
    bf16 = torch.cuda.is_bf16_supported()
    total = torch.cuda.get_device_properties(0).total_memory / 2**30
    report.add("gpu", "PASS" if bf16 else "FAIL", f"{name}, {total:.0f} GiB, bf16={bf16}", t0)


def check_rl(report: Report, args: argparse.Namespace, server: Server) -> None:
    t0 = time.monotonic()
    run = args.out / "rl"
    log = args.out / "rl.log"
    with open(log, "wb") as out:
        rc = subprocess.run(
            rl_command(args, run, server.url, 2), stdout=out, stderr=subprocess.STDOUT
        ).returncode
    steps = [m for m in read_metrics(run) if "sync/logprob_max_abs_diff" in m]
    diffs = [float(m["sync/logprob_max_abs_diff"]) for m in steps]
    info = httpx.get(server.url + "/model_info", timeout=10).json()
    served = info.get("weight_version")
    ok = rc == 0 and len(diffs) == 2 and served == "step-2"
    ok = ok and all(d <= args.tolerance for d in diffs)
    detail = (
        f"exit {rc}; served weight_version {served!r} (expected 'step-2'); "
        f"probe max|logprob diff| per step {[f'{d:.2e}' for d in diffs]}"
    )
    if rc != 0:
        detail += f"; see {log}"
    report.add("rl: 2 steps, weight sync, probe", "PASS" if ok else "FAIL", detail, t0)


def check_pause(report: Report, args: argparse.Namespace, server: Server) -> None:
    t0 = time.monotonic()
    body = {
        "text": "Count from one to one thousand:",
        "sampling_params": {
            "max_new_tokens": args.pause_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
        },
    }
    result: dict[str, Any] = {}

    def send() -> None:
        try:
            reply = httpx.post(server.url + "/generate", json=body, timeout=600)
            result["status"] = reply.status_code
            result["meta"] = reply.json().get("meta_info", {}) if reply.status_code == 200 else {}
        except httpx.HTTPError as exc:
            result["error"] = repr(exc)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    time.sleep(args.pause_after_s)
    paused = httpx.post(server.url + "/pause_generation", json={"mode": "in_place"}, timeout=60)
    time.sleep(args.pause_hold_s)
    finished_while_paused = not thread.is_alive()
    resumed = httpx.post(server.url + "/continue_generation", json={}, timeout=60)
    thread.join(600)
    reason = (result.get("meta") or {}).get("finish_reason")
    ok = (
        paused.status_code == 200
        and resumed.status_code == 200
        and result.get("status") == 200
        and not thread.is_alive()
    )
    detail = (
        f"pause HTTP {paused.status_code}, continue HTTP {resumed.status_code}, request HTTP "
        f"{result.get('status', result.get('error'))} finish {reason}; finished while paused: "
        f"{finished_while_paused} (True: the request was shorter than the hold, raise "
        "--pause-tokens)"
    )
    report.add("pause in_place + continue", "PASS" if ok else "FAIL", detail, t0)


def check_kill_resume(report: Report, args: argparse.Namespace, server: Server) -> None:
    t0 = time.monotonic()
    run = args.out / "kill_resume"
    log = args.out / "kill_resume.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            rl_command(args, run, server.url, 3), stdout=out, stderr=subprocess.STDOUT
        )
        first = run / "checkpoints" / "step-000001"
        deadline = time.monotonic() + args.step_timeout_s
        while not (first / "trainer_state.pt").exists() and proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                report.add("kill + resume", "FAIL", f"no first checkpoint; see {log}", t0)
                return
            time.sleep(0.5)
        server.kill()
        killed = time.monotonic()
        try:
            rc = proc.wait(timeout=args.stall_dead_s + 120)
        except subprocess.TimeoutExpired:
            proc.kill()
            report.add("kill + resume", "FAIL", f"the run did not stop; see {log}", t0)
            return
        stopped_s = time.monotonic() - killed
    text = log.read_text(errors="replace")
    named = server.url in text
    server.start()
    with open(log, "ab") as out:
        rc2 = subprocess.run(
            [*rl_command(args, run, server.url, 3), "--resume"],
            stdout=out,
            stderr=subprocess.STDOUT,
        ).returncode
    steps = sorted({int(m["step"]) for m in read_metrics(run) if "step" in m})
    ok = rc != 0 and named and rc2 == 0 and steps[-1:] == [3]
    detail = (
        f"server killed after the first checkpoint: run exit {rc} after {stopped_s:.0f} s, "
        f"error names {server.url}: {named}; --resume exit {rc2}, steps logged {steps}"
    )
    report.add("kill + resume", "PASS" if ok else "FAIL", detail, t0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, required=True, help="a Qwen3-VL checkpoint dir")
    parser.add_argument("--out", type=Path, default=Path("runs/gpu_check"), help="logs, runs")
    parser.add_argument("--port", type=int, default=30000, help="the server's port")
    parser.add_argument(
        "--stand-in", action="store_true", help="paravt.core.testing.stand_in on CPU"
    )
    parser.add_argument(
        "--mem-fraction",
        type=float,
        default=0.4,
        help="SGLang --mem-fraction-static (the trainer shares the GPU)",
    )
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="extra argument for sglang.launch_server (repeatable)",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        help="extra recipe override for the RL runs (repeatable)",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.1,
        help="largest probe log-prob difference accepted (bf16: ~1e-2)",
    )
    parser.add_argument("--start-timeout-s", type=float, default=600, help="server start")
    parser.add_argument("--step-timeout-s", type=float, default=1800, help="first checkpoint")
    parser.add_argument("--stall-dead-s", type=float, default=60, help="run's stall_dead_s")
    parser.add_argument("--pause-tokens", type=int, default=2048, help="the paused request")
    parser.add_argument("--pause-after-s", type=float, default=1.0, help="pause after this")
    parser.add_argument("--pause-hold-s", type=float, default=3.0, help="stay paused this long")
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=["rl", "pause", "kill"],
        help="skip a check (repeatable)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    report = Report()
    check_gpu(report, args)
    server = Server(args, args.out / "server.log")
    t0 = time.monotonic()
    try:
        server.start()
    except RuntimeError as exc:
        report.add("server start", "FAIL", str(exc).splitlines()[0], t0)
        print(server.tail(), file=sys.stderr)
        print(report.table())
        return 1
    report.add("server start", "PASS", f"{server.url} healthy", t0)
    try:
        if "rl" not in args.skip:
            check_rl(report, args, server)
        if "pause" not in args.skip:
            check_pause(report, args, server)
        if "kill" not in args.skip:
            check_kill_resume(report, args, server)
    finally:
        server.kill()
    print()
    print(report.table())
    (args.out / "report.json").write_text(json.dumps([r.__dict__ for r in report.rows], indent=1))
    return 1 if any(r.status == "FAIL" for r in report.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
