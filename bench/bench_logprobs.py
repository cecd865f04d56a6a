"""Peak memory and time of per-token log-probs: full-vocabulary logits vs chunked at masked positions.

The part of a log-prob pass that grows with vocabulary x length is the LM head: the plain
computation (`paravt.train.modeling.token_logprobs_full`) builds fp32 logits at every position, then
a log-softmax of the same size (and, with gradients, as much again in backward). The trainer's
`token_logprobs` feeds the head only the positions the loss mask needs, `chunk` positions at a
time, and checkpoints each chunk, so its peak is one chunk's logits whatever the length
(`paravt.train.modeling.chunked_target_logprobs`, measured here directly on the head).

Setup: hidden states of a sequence of T positions, a linear head to Qwen3-VL's vocabulary
(151,936), a mask on a quarter of the positions (the generated tokens of an RL trajectory), fp32 on
CPU. Each case runs in a fresh process; peak memory is that process's resident-set high-water mark
above its state before the computation (getrusage; glibc's mmap threshold pinned so freed blocks
are returned, not kept). Time is the wall time of the computation, median of 3 runs. Writes
bench/results/logprobs.json and prints a table.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "logprobs.json"
POSITIONS = 2048  # T
HIDDEN = 256  # small, so the head's matmul stays affordable on a 2-core CPU; the logits size
VOCAB = 151_936  # (T x V) is what the comparison is about, and it is the real one
MASKED_FRACTION = 0.25
CHUNK = 512
REPEATS = 3

CASE = r"""
import resource, statistics, sys, time, torch
from paravt.train.modeling import chunked_target_logprobs
torch.set_num_threads(int(sys.argv[7]))
impl, grad = sys.argv[1], sys.argv[2] == "grad"
T, H, V, chunk = (int(x) for x in sys.argv[3:7])
torch.manual_seed(0)
head = torch.nn.Linear(H, V, bias=False)
h = torch.randn(T, H, requires_grad=grad)
ids = torch.randint(0, V, (T,))
mask = torch.zeros(T, dtype=torch.bool)
mask[torch.randperm(T)[: T // 4]] = True

def full():
    logits = head(h).float()
    lp = torch.log_softmax(logits, -1).gather(-1, ids[:, None]).squeeze(-1)
    return (lp * mask).sum()

def chunked_masked():
    rows = mask.nonzero().squeeze(-1)
    return chunked_target_logprobs(head, h[rows], ids[rows], chunk=chunk).sum()

def chunked_all():
    return chunked_target_logprobs(head, h, ids, chunk=chunk).sum()

fn = {"full": full, "chunked_masked": chunked_masked, "chunked_all": chunked_all}[impl]

def once():
    if grad:
        fn().backward()
        h.grad = head.weight.grad = None
    else:
        with torch.no_grad():
            fn()

# warm up the kernels on a tiny slice so their one-off allocations are not counted
with torch.no_grad():
    torch.log_softmax(head(h[:4]).float(), -1)
    chunked_target_logprobs(head, h[:4], ids[:4], chunk=2)
if grad:
    chunked_target_logprobs(head, h[:4], ids[:4], chunk=2).sum().backward()
    torch.log_softmax(head(h[:4]).float(), -1).sum().backward()
    h.grad = head.weight.grad = None
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
times = []
for _ in range(int(sys.argv[8])):
    t0 = time.perf_counter(); once(); times.append(time.perf_counter() - t0)
peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(peak_kib, statistics.median(times))
"""


def run_case(impl: str, mode: str, threads: int) -> dict[str, float | str]:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": str(threads)}
    args = [impl, mode, str(POSITIONS), str(HIDDEN), str(VOCAB), str(CHUNK), str(threads)]
    done = subprocess.run(
        [sys.executable, "-c", CASE, *args, str(REPEATS)], capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        raise RuntimeError(f"case {impl} {mode} failed:\n{done.stderr[-2000:]}")
    peak_kib, seconds = done.stdout.split()[-2:]
    return {
        "impl": impl,
        "mode": mode,
        "peak_mib": round(int(peak_kib) / 1024, 1),
        "seconds": round(float(seconds), 3),
    }


def main() -> None:
    import torch

    threads = min(2, os.cpu_count() or 1)
    load_start = os.getloadavg()
    cases = [
        ("full", "no_grad"),
        ("chunked_masked", "no_grad"),
        ("full", "grad"),
        ("chunked_masked", "grad"),
        ("chunked_all", "grad"),
    ]
    results = [run_case(impl, mode, threads) for impl, mode in cases]
    logits_mib = POSITIONS * VOCAB * 4 / 2**20
    report = {
        "what": "Peak resident memory above the starting state and median wall time of the LM "
        "head's part of per-token log-probs at T positions and Qwen3-VL's vocabulary: 'full' = "
        "fp32 logits at every position + log_softmax + gather (token_logprobs_full); "
        "'chunked_masked' = only the masked quarter of positions, CHUNK at a time, each chunk "
        "checkpointed (token_logprobs); 'chunked_all' = every position, chunked. 'no_grad' = "
        "the log-prob pass (proximal / reference), 'grad' = forward + backward of the update. "
        "CPU, fp32, a fresh process per case.",
        "setup": {
            "positions": POSITIONS,
            "hidden": HIDDEN,
            "vocab": VOCAB,
            "masked_fraction": MASKED_FRACTION,
            "chunk": CHUNK,
            "repeats": REPEATS,
            "fp32_logits_at_every_position_mib": round(logits_mib, 1),
            "torch_threads": threads,
            "versions": {"torch": torch.__version__, "python": platform.python_version()},
            "machine": {"cpus": os.cpu_count(), "device": "cpu (no GPU in this session)"},
            "load_average_at_start": [round(x, 2) for x in load_start],
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "results": results,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"log-probs at T={POSITIONS}, V={VOCAB} (fp32 logits {logits_mib:.0f} MiB), "
        f"chunk {CHUNK}, load {load_start[0]:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    print(f"{'impl':<16}{'mode':<10}{'peak MiB':>10}{'seconds':>10}")
    for r in results:
        print(f"{r['impl']:<16}{r['mode']:<10}{r['peak_mib']:>10}{r['seconds']:>10}")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
