"""The throughput sweep (issue 48): the update path's levers on a real-size Qwen3-VL, one at a time
and together, each configuration its own model, stepped through the trainer's own functions.

A configuration is the real-size row of `tools/gpu_check.py` (`Harness`: a Qwen3-VL of the shape
built in memory with random weights, fp32 master weights under FSDP2 world 1, the recipe's compute
dtype, a frozen reference; an SFT step shaped like `sft_8b`, one packed micro-batch, and an RL
`learner.ppo_update` shaped like `paragrpo_8b`) with these levers changed:

- **tokens per micro-batch** (`tokens-x2`, `tokens-x4`): k times the SFT packing length (2k
  sequences in one packed micro-batch) and k times the RL micro-batch (`loss.micro_batch_size`,
  one micro-batch per update).
- **activation checkpointing** (`ckpt-selective`, `ckpt-off`): full is every decoder layer and
  vision block (the baseline, the trainers' setting); selective keeps it on every other decoder
  layer (transformers' per-layer `GradientCheckpointingLayer.gradient_checkpointing` flag), vision
  blocks still checkpointed; off is none.
- **attention** (`attn-eager`, `attn-sdpa-flash`): the model built with `eager` instead of `sdpa`
  (the kernel it used is read back from `config._attn_implementation`, text and vision); and
  SDPA restricted to its flash kernel (`torch.nn.attention.sdpa_kernel`), which fails where a
  mask or a dtype forces another kernel, so it says whether the baseline's SDPA can be flash.
- **AdamW** (`adamw-fused`): `torch.optim.AdamW(fused=True)` on CUDA in place of the trainers'
  default (torch's choice, foreach on CUDA; the one taken is recorded); n/a on the CPU.
- **`torch.compile`** (`compile`): `Module.compile()` on every decoder layer before FSDP2 shards it
  (as torchtitan does); the warm-up step pays the compilation. Not rehearsed on the CPU (inductor
  builds C++ for minutes there): a stated skip.
- **packing without padding** (`packing`): n/a, with the reason: the trainers' `collate`
  right-pads every sequence of a micro-batch and never concatenates sequences (`sft.pack_
  micro_batches` bins padded sequences); the sweep's micro-batches carry the padding share each
  configuration reports, which is what packing could save at most on them.
- **together**: `x2-off-fused`, `x4-selective-fused`, `x2-off-fused-compile`.

Per configuration and step kind (sft, rl): tokens/s (all tokens of the step over the median step
time after a warm-up step); MFU: the real-size row's count, model FLOPs = 2 x parameters x what
they multiply in one forward (decoder x tokens, LM head x trained positions, vision tower x
patches; attention's own FLOPs left out), x3 for SFT, x(3 + proximal + reference passes) for the
RL update, over the GPU's dense bf16 peak (n/a on the CPU); recomputation under checkpointing
is not counted as work. Peak memory: CUDA max allocated (n/a on the CPU). The step's split:
log-prob recompute (the RL update's `logprob_pass`: proximal and reference), backward
(`Backend.backward`), optimiser (`Backend.step`: clip, AdamW, schedule, zero), forward (the rest:
collation and the loss forward passes), timed with CUDA events on a GPU and `time.perf_counter`
on the CPU (whose ops are synchronous). A configuration that runs out of memory is recorded as
OOM; one that raises as an error with its message; the sweep goes on.

Shapes: `tiny` (the CPU rehearsal), `2b` (Qwen3-VL-2B), `8b` (Qwen3-VL-8B's widths: hidden 4096,
MLP 12288, 32 / 8 heads, head dim 128, its 27-block vision tower, with few decoder layers). The 8B
shape runs each of its configurations (`--8b-configs`) at two depths (`--8b-layers`, default 3
and 6: 3 is the shallowest at which the vision tower's three deepstack features are all added, to
layers 0-2, so the non-layer work is the same at both depths) and extrapolates linearly to the
8B's 36 layers: per-layer time = (t(d2) - t(d1)) / (d2 - d1), the rest (vision
tower, embedding, LM head, optimiser of those) = t(d2) - d2 x per-layer, t(36) = rest + 36 x
per-layer; MFU at 36 layers uses the 36-layer model's FLOPs. Both depths' step times are kept: a
3-layer difference is a few hundred ms on a GPU, so one timed step's noise shows in it (`--steps`
3 times two steps per depth and takes the median).

`--budget-s`: no configuration is started when the time spent plus the longest configuration so
far (x3 for a compiled one) would pass it; those not started are listed. Standalone (needs no
frame folder: the tiny model gives the tokenizer, processor and token ids):

    python tools/throughput_sweep.py --device cuda --out runs/throughput      # 2b, then 8b
    python tools/throughput_sweep.py --device cpu --shapes tiny --out /tmp/t  # the rehearsal

and as the `throughput` row of `tools/gpu_check.py`.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
TARGET_LAYERS_8B = 36  # Qwen3-VL-8B's decoder layers


@dataclass(frozen=True)
class Config:
    """One point of the sweep (the baseline is the real-size row's setting)."""

    name: str
    tokens_x: int = 1  # micro-batch tokens, times the recipe's
    checkpointing: str = "full"  # full / selective / off
    attn: str = "sdpa"  # sdpa / eager / sdpa-flash (SDPA restricted to its flash kernel)
    adamw: str = "default"  # default (the trainers' make_optimizer) / fused
    compile: bool = False
    packing: bool = False  # packing without padding: not supported by collate (a stated n/a)


CONFIGS: tuple[Config, ...] = (
    Config("baseline"),
    Config("tokens-x2", tokens_x=2),
    Config("tokens-x4", tokens_x=4),
    Config("ckpt-selective", checkpointing="selective"),
    Config("ckpt-off", checkpointing="off"),
    Config("attn-eager", attn="eager"),
    Config("attn-sdpa-flash", attn="sdpa-flash"),
    Config("adamw-fused", adamw="fused"),
    Config("compile", compile=True),
    Config("packing", packing=True),
    Config("x2-off-fused", tokens_x=2, checkpointing="off", adamw="fused"),
    Config("x4-selective-fused", tokens_x=4, checkpointing="selective", adamw="fused"),
    Config("x2-off-fused-compile", tokens_x=2, checkpointing="off", adamw="fused", compile=True),
)
CONFIG_NAMES = [c.name for c in CONFIGS]
# The 8B shape runs each configuration twice (two depths): its default list is the shorter one.
CONFIGS_8B = ("baseline", "tokens-x2", "ckpt-off", "adamw-fused", "x2-off-fused", "compile")


def load_gpu_check() -> ModuleType:
    """tools/gpu_check.py as a module (the Harness and the FLOP count live there)."""
    if "gpu_check" in sys.modules:
        return sys.modules["gpu_check"]
    spec = importlib.util.spec_from_file_location("gpu_check", HERE / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------------------------------
# Timing the step's parts


class Timeline:
    """Marks around the step's parts: CUDA events on a GPU (read after the step's synchronisation),
    `time.perf_counter` on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list[tuple[str, Any]] = []

    def mark(self, label: str) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append((label, event))
        else:
            self.marks.append((label, time.perf_counter()))

    def wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.mark(f"{part}>")
            try:
                return fn(*args, **kwargs)
            finally:
                self.mark(f"{part}<")

        return timed

    def _seconds(self, a: Any, b: Any) -> float:
        return float(a.elapsed_time(b)) / 1e3 if self.cuda else float(b - a)

    def split(self) -> dict[str, float]:
        """Seconds per part between the step's first and last mark; `forward` is what is left."""
        parts: dict[str, float] = {"logprob": 0.0, "backward": 0.0, "optimiser": 0.0}
        opened: dict[str, Any] = {}
        for label, t in self.marks:
            part, edge = label[:-1], label[-1]
            if part == "step":
                continue
            if edge == ">":
                opened[part] = t
            else:
                parts[part] += self._seconds(opened.pop(part), t)
        total = self._seconds(self.marks[0][1], self.marks[-1][1])
        parts["forward"] = max(total - sum(parts.values()), 0.0)
        parts["total"] = total
        return parts


@contextmanager
def timed_parts(harness: Any, timeline: Timeline) -> Iterator[None]:
    """The harness's backend (backward, step) and the learner's `logprob_pass` timed for a while."""
    from paravt.train.rl import learner

    backend = harness.backend
    saved = learner.logprob_pass
    backend.backward = timeline.wrap("backward", type(backend).backward.__get__(backend))
    backend.step = timeline.wrap("optimiser", type(backend).step.__get__(backend))
    learner.logprob_pass = timeline.wrap("logprob", saved)  # type: ignore[assignment]
    try:
        yield
    finally:
        learner.logprob_pass = saved  # type: ignore[assignment]
        del backend.backward, backend.step


# --------------------------------------------------------------------------------------------------
# One configuration


def skip_reason(config: Config, device: torch.device, compile_on_cpu: bool) -> str | None:
    if config.packing:
        return (
            "n/a: the trainers' collate right-pads every sequence of a micro-batch and never "
            "concatenates sequences (sft.pack_micro_batches bins padded sequences; no varlen "
            "attention path); each configuration's padding share is what packing could save"
        )
    if config.compile and device.type != "cuda" and not compile_on_cpu:
        return (
            "not rehearsed on the CPU: torch.compile (inductor's C++ build) takes minutes there "
            "(--compile-on-cpu runs it)"
        )
    return None


def decoder_layers(model: Any) -> list[Any]:
    return list(model.model.language_model.layers)


def prepare_policy(config: Config) -> Callable[[Any], None]:
    """The checkpointing policy and compilation of `config`, applied before FSDP2 shards."""

    def prepare(policy: Any) -> None:
        layers = decoder_layers(policy)
        if config.checkpointing == "off":
            off = getattr(policy, "activation_checkpointing_disable", None)
            (off or policy.gradient_checkpointing_disable)()
        elif config.checkpointing == "selective":
            for i, layer in enumerate(layers):
                layer.gradient_checkpointing = i % 2 == 0
        if config.compile:
            for layer in layers:
                layer.compile()

    return prepare


def attn_used(model: Any) -> dict[str, str]:
    cfg = model.config
    return {
        "text": str(getattr(cfg.text_config, "_attn_implementation", None)),
        "vision": str(getattr(cfg.vision_config, "_attn_implementation", None)),
    }


def checkpointed(model: Any) -> dict[str, int]:
    layers = decoder_layers(model)
    blocks = list(model.model.visual.blocks)
    return {
        "decoder_layers": sum(bool(x.gradient_checkpointing) for x in layers),
        "decoder_of": len(layers),
        "vision_blocks": sum(bool(x.gradient_checkpointing) for x in blocks),
        "vision_of": len(blocks),
    }


def use_fused_adamw(backend: Any) -> None:
    from paravt.train.optim import make_scheduler

    spec = backend.optim_spec
    backend.optimizer = torch.optim.AdamW(
        backend.model.parameters(),
        lr=spec.lr,
        betas=tuple(spec.betas),
        eps=spec.eps,
        weight_decay=spec.weight_decay,
        fused=True,
    )
    backend.scheduler = make_scheduler(backend.optimizer, spec, 100)


def adamw_kind(optimizer: torch.optim.Optimizer) -> str:
    """fused / foreach / for-loop, as torch resolves the optimiser's settings."""
    group = optimizer.param_groups[0]
    if group.get("fused"):
        return "fused"
    if group.get("foreach") is not None:
        return "foreach" if group["foreach"] else "for-loop"
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach

        params = [p for g in optimizer.param_groups for p in g["params"]]
        _, foreach = _default_to_fused_or_foreach(params, False, False)
    except Exception as exc:  # a private helper: say so rather than guess
        return f"default (unresolved: {type(exc).__name__})"
    return "default -> foreach" if foreach else "default -> for-loop"


def padding_share(seqs: Sequence[Any], per_micro_batch: int) -> float:
    """Pad tokens / all positions of the right-padded micro-batches of `per_micro_batch`."""
    pad = positions = 0
    for i in range(0, len(seqs), per_micro_batch):
        mb = seqs[i : i + per_micro_batch]
        width = max(len(s) for s in mb)
        positions += width * len(mb)
        pad += sum(width - len(s) for s in mb)
    return pad / max(positions, 1)


def measure(
    check: ModuleType,
    harness: Any,
    name: str,
    seqs: list[Any],
    step: Callable[[list[Any]], dict[str, float]],
    passes: float,
    counts: dict[str, int],
    steps: int,
    peak: float | None,
    per_micro_batch: int,
) -> dict[str, Any]:
    """`steps` steps (the first a warm-up when there are more): the median and its parts."""
    device = harness.device
    work = check.work_of(seqs)
    flops = passes * check.forward_flops(counts, work)
    runs: list[dict[str, float]] = []
    peaks: list[float] = []
    last: dict[str, float] = {}
    for i in range(steps):
        check.free_memory(device)
        check.reset_peak(device)
        check.cuda_sync(device)
        timeline = Timeline(device)
        with timed_parts(harness, timeline):
            timeline.mark("step>")
            last = step(seqs)
            timeline.mark("step<")
        check.cuda_sync(device)
        if i > 0 or steps == 1:
            runs.append(timeline.split())
        peaks.append(check.peak_gib(device))
    median = sorted(runs, key=lambda r: r["total"])[len(runs) // 2]
    s = median["total"]
    return {
        **work,
        "step_s": s,
        "split_s": {k: median[k] for k in ("forward", "backward", "optimiser", "logprob")},
        "tokens_per_s": work["tokens"] / s,
        "model_flops": flops,
        "flops_passes": passes,
        "mfu": flops / s / peak if peak else None,
        "peak_gib": max(peaks) if device.type == "cuda" else None,
        "padding_share": padding_share(seqs, per_micro_batch),
        "loss": float(last.get("loss", math.nan)),
        "grad_norm": float(last.get("grad_norm", math.nan)),
        "steps_timed": len(runs),
        "step_s_all": [r["total"] for r in runs],
        "kind": name,
    }


def run_config(
    check: ModuleType,
    shape: Any,
    config: Config,
    tiny: Path,
    device: torch.device,
    out: Path,
    steps: int,
    peak: float | None,
) -> dict[str, Any]:
    """One configuration on one shape: its SFT step and RL update measured (raises on error)."""
    k = config.tokens_x
    shape = dataclasses.replace(
        shape, sft_packing=shape.sft_packing * k, rl_sequences=shape.rl_sequences * k
    )
    attn = "sdpa" if config.attn == "sdpa-flash" else config.attn
    overrides = [f"model.attn_implementation={attn}", f"loss.micro_batch_size={shape.rl_sequences}"]
    h = check.Harness(shape, tiny, device, out, overrides=overrides, prepare=prepare_policy(config))
    try:
        if config.adamw == "fused":
            use_fused_adamw(h.backend)
        kernel: Any = nullcontext()
        if config.attn == "sdpa-flash":
            from torch.nn.attention import SDPBackend, sdpa_kernel

            kernel = sdpa_kernel([SDPBackend.FLASH_ATTENTION])
        result: dict[str, Any] = {
            "attn_used": attn_used(h.backend.model),
            "sdpa_kernels": "flash only" if config.attn == "sdpa-flash" else "torch's choice",
            "checkpointed": checkpointed(h.backend.model),
            "adamw": adamw_kind(h.backend.optimizer),
            "compiled_layers": len(decoder_layers(h.backend.model)) if config.compile else 0,
            "compute_dtype": str(h.compute).replace("torch.", ""),
            "params": h.counts,
        }
        with kernel:
            sft = h.sequences(2 * k, total=shape.sft_packing // (2 * k))
            result["sft"] = measure(
                check, h, "sft", sft, h.sft_step, 3.0, h.counts, steps, peak, len(sft)
            )
            rl = h.sequences(shape.rl_sequences, shape.rl_generated)
            h.behaviour_logprobs(rl)
            result["rl"] = measure(
                check,
                h,
                "rl",
                rl,
                h.rl_step,
                h.rl_flops_passes(),
                h.counts,
                steps,
                peak,
                shape.rl_sequences,
            )
        return result
    finally:
        del h


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


# --------------------------------------------------------------------------------------------------
# The sweep


def shape_of(check: ModuleType, size: str, layers: int, tiny: Path, out: Path) -> Any:
    """`check.model_shape` of `size`; `8b`: the 8B's widths and vision tower with `layers`
    decoder layers, the 8B recipes' work (the 2b shape's recipe sizes are the 8B recipes')."""
    if size != "8b":
        return check.model_shape(size, tiny, out)
    base = check.model_shape("2b", tiny, out)
    spec = json.loads(json.dumps(check.QWEN3_VL_SHAPES["8b"]))
    spec["text"]["num_hidden_layers"] = layers
    return dataclasses.replace(
        base, name=f"8b-{layers}l", config=check.qwen3vl_config(spec, base.config)
    )


def extrapolate(
    check: ModuleType, base_config: Any, points: dict[int, dict[str, Any]], passes: dict[str, float]
) -> dict[str, Any]:
    """Per-layer time from two depths, to the 8B's 36 layers (see the module docstring)."""
    (d1, r1), (d2, r2) = sorted(points.items())[:2]
    spec = json.loads(json.dumps(check.QWEN3_VL_SHAPES["8b"]))
    counts36 = check.meta_counts(check.qwen3vl_config(spec, base_config))
    out: dict[str, Any] = {"depths": [d1, d2], "layers": TARGET_LAYERS_8B}
    for kind in ("sft", "rl"):
        t1, t2 = r1[kind]["step_s"], r2[kind]["step_s"]
        per_layer = (t2 - t1) / (d2 - d1)
        rest = t2 - d2 * per_layer
        t36 = rest + TARGET_LAYERS_8B * per_layer
        flops36 = passes[kind] * check.forward_flops(counts36, r2[kind])
        e: dict[str, Any] = {
            "per_layer_s": per_layer,
            "rest_s": rest,
            "step_s": t36,
            "model_flops": flops36,
            "tokens_per_s": r2[kind]["tokens"] / t36 if t36 > 0 else None,
        }
        mfu2 = r2[kind]["mfu"]
        if mfu2 is not None and t36 > 0:
            peak = r2[kind]["model_flops"] / (mfu2 * t2)
            e["mfu"] = flops36 / t36 / peak
        else:
            e["mfu"] = None
        if r1[kind]["peak_gib"] is not None and r2[kind]["peak_gib"] is not None:
            e["peak_gib_per_layer"] = (r2[kind]["peak_gib"] - r1[kind]["peak_gib"]) / (d2 - d1)
        out[kind] = e
    return out


def sweep(
    check: ModuleType,
    *,
    tiny: Path,
    device: torch.device,
    out: Path,
    shapes: Sequence[str],
    configs: Sequence[str] | None = None,
    configs_8b: Sequence[str] | None = None,
    layers_8b: Sequence[int] = (3, 6),
    steps: int = 3,
    budget_s: float = 300.0,
    peak: float | None = None,
    compile_on_cpu: bool = False,
    progress: Callable[[str], None] = print,
    on_update: Callable[[dict[str, Any]], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Every shape x configuration (see the module docstring); a JSON-able report, handed to
    `on_update` after every configuration too (so that a run cut short keeps what it measured)."""
    t0 = clock()
    by_name = {c.name: c for c in CONFIGS}
    longest: dict[bool, float] = {}
    report: dict[str, Any] = {
        "device": str(device),
        "peak_flops": peak,
        "steps": steps,
        "budget_s": budget_s,
        "flop_count": (
            "2 x parameters x what they multiply per forward (decoder x tokens, LM head x "
            "trained positions, vision x patches; attention's own FLOPs left out), x3 for SFT, "
            "x(3 + proximal + reference passes) for the RL update; recompute not counted"
        ),
        "shapes": {},
        "not_started": [],
    }
    for size in shapes:
        names = list(configs or (CONFIGS_8B if size == "8b" else CONFIG_NAMES))
        if size == "8b" and configs_8b is not None:
            names = list(configs_8b)
        depths = sorted(set(layers_8b))[:2] if size == "8b" else [0]
        shape_report: dict[str, Any] = {"configs": {}}
        report["shapes"][size] = shape_report
        shapes_by_depth = {d: shape_of(check, size, d, tiny, out) for d in depths}
        for name in names:
            config = by_name[name]
            entry: dict[str, Any] = {"config": dataclasses.asdict(config)}
            shape_report["configs"][name] = entry
            reason = skip_reason(config, device, compile_on_cpu)
            if reason:
                entry.update(status="skip", reason=reason)
                progress(f"[{size}] {name}: skip ({reason})")
                continue
            points: dict[int, dict[str, Any]] = {}
            for depth in depths:
                guess = longest.get(config.compile) or max(longest.values(), default=0.0)
                guess *= 3.0 if config.compile and not longest.get(True) else 1.0
                spent = clock() - t0
                if spent + guess > budget_s:
                    entry.update(status="not started", reason=f"budget: {spent:.0f} s spent")
                    report["not_started"].append(f"{size}/{name}")
                    break
                t = clock()
                shape = shapes_by_depth[depth]
                try:
                    result = run_config(check, shape, config, tiny, device, out, steps, peak)
                    status, reason = "ok", ""
                except Exception as exc:  # OOM is a result; any other error is reported
                    result = {}
                    status = "OOM" if is_oom(exc) else "error"
                    reason = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
                    if status == "error":
                        trace = out / f"throughput.{size}.{name}.traceback.txt"
                        trace.parent.mkdir(parents=True, exist_ok=True)
                        trace.write_text(traceback.format_exc())
                check.free_memory(device)
                seconds = clock() - t
                longest[config.compile] = max(longest.get(config.compile, 0.0), seconds)
                result.update(status=status, seconds=seconds, shape=shape.name)
                if reason:
                    result["reason"] = reason
                points[depth] = result
                if size == "8b":  # in the report at once, for a run cut short
                    entry.setdefault("depths", {})[str(depth)] = result
                else:
                    entry.update(result)
                progress(f"[{shape.name}] {name}: {line(result)}")
                if on_update is not None:
                    report["seconds"] = clock() - t0
                    on_update(report)
            if size == "8b":
                ok = [d for d, r in points.items() if r["status"] == "ok"]
                statuses = {r["status"] for r in points.values()}
                if len(ok) == 2:
                    passes = {"sft": 3.0, "rl": points[ok[0]]["rl"]["flops_passes"]}
                    base = shapes_by_depth[ok[0]].config
                    entry["extrapolated_36"] = extrapolate(check, base, points, passes)
                    entry["status"] = "ok"
                elif "status" not in entry:
                    entry["status"] = "OOM" if "OOM" in statuses else min(statuses, default="")
                    entry.setdefault(
                        "reason", "; ".join(r.get("reason", "") for r in points.values())
                    )
    report["seconds"] = clock() - t0
    return report


def _fmt(x: float | None, spec: str, na: str = "n/a") -> str:
    return na if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def line(r: dict[str, Any]) -> str:
    """One configuration's result in a line."""
    if r.get("status") != "ok":
        return f"{r.get('status')}: {r.get('reason', '')}"
    parts = []
    for kind in ("sft", "rl"):
        m = r[kind]
        split = m["split_s"]
        parts.append(
            f"{kind} {m['tokens']} tok {m['step_s']:.3g} s {m['tokens_per_s']:.0f} tok/s "
            f"MFU {_fmt(m['mfu'], '.1%')} peak {_fmt(m['peak_gib'], '.1f')} GiB "
            f"(fwd {split['forward']:.3g} / bwd {split['backward']:.3g} / "
            f"opt {split['optimiser']:.3g} / logprob {split['logprob']:.3g} s)"
        )
    attn = r["attn_used"]
    return (
        "; ".join(parts)
        + f"; attn {attn['text']}/{attn['vision']} ({r['sdpa_kernels']}), AdamW {r['adamw']}, "
        f"ckpt {r['checkpointed']['decoder_layers']}/{r['checkpointed']['decoder_of']} layers"
    )


def summary(report: dict[str, Any]) -> list[str]:
    """A line per shape x configuration, and the 8B extrapolation."""
    lines = []
    for size, s in report["shapes"].items():
        for name, e in s["configs"].items():
            if "depths" in e:
                for d, r in e["depths"].items():
                    lines.append(f"{size}-{d}l {name}: {line(r)}")
                x = e.get("extrapolated_36")
                if x:
                    lines.append(
                        f"{size} {name} -> 36 layers: "
                        + "; ".join(
                            f"{k} {x[k]['per_layer_s']:.3g} s/layer x 36 + {x[k]['rest_s']:.3g} s "
                            f"= {x[k]['step_s']:.3g} s, MFU {_fmt(x[k]['mfu'], '.1%')}"
                            for k in ("sft", "rl")
                        )
                    )
            else:
                lines.append(f"{size} {name}: {line(e)}")
    if report["not_started"]:
        lines.append(f"not started (budget): {', '.join(report['not_started'])}")
    return lines


def complete(report: dict[str, Any]) -> tuple[bool, list[str]]:
    """(no error and every configuration reported, problems)."""
    problems = []
    for size, s in report["shapes"].items():
        for name, e in s["configs"].items():
            status = e.get("status")
            if status in ("error", None, ""):
                problems.append(f"{size}/{name}: {status}: {e.get('reason', '')}")
            if status == "ok" and "depths" not in e:
                for kind in ("sft", "rl"):
                    if not math.isfinite(e[kind]["loss"]):
                        problems.append(f"{size}/{name}: {kind} loss {e[kind]['loss']}")
    return not problems, problems


# --------------------------------------------------------------------------------------------------
# Command line


def add_options(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """The sweep's options (`--throughput-...` inside gpu_check, bare here)."""
    add = parser.add_argument
    p = f"--{prefix}"
    add(
        f"{p}shapes",
        default=None,
        help="comma-separated shapes: tiny, 2b, 8b (default: 2b,8b on cuda, tiny on cpu)",
    )
    add(
        f"{p}configs",
        default=None,
        help=f"comma-separated configurations (default: all for tiny/2b, {','.join(CONFIGS_8B)} "
        f"for 8b); of: {', '.join(CONFIG_NAMES)}",
    )
    add(
        f"{p}8b-configs",
        default=None,
        help=f"the 8b shape's configurations, each run at two depths (default: --{prefix}configs "
        f"when given, else {','.join(CONFIGS_8B)})",
    )
    add(
        f"{p}8b-layers",
        default="3,6",
        help="the 8B shape's two decoder depths, for the per-layer extrapolation to 36 "
        "(default: 3,6)",
    )
    add(
        f"{p}steps",
        type=int,
        default=3,
        help="steps of each kind per configuration, the first a warm-up (default: 3)",
    )
    add(
        f"{p}compile-on-cpu",
        action="store_true",
        help="run the torch.compile configurations on the CPU too (minutes)",
    )


def parse_list(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--out", type=Path, default=Path("runs/throughput"))
    parser.add_argument(
        "--budget-s",
        type=float,
        default=420.0,
        help="no configuration starts when it would pass this (default: 420)",
    )
    parser.add_argument("--peak-tflops", type=float, default=None, help="as gpu_check's")
    add_options(parser)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    check = load_gpu_check()
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    shapes = parse_list(args.shapes) or (["2b", "8b"] if device.type == "cuda" else ["tiny"])
    configs = parse_list(args.configs)
    configs_8b = parse_list(args.__dict__["8b_configs"])
    unknown = [c for c in [*(configs or []), *(configs_8b or [])] if c not in CONFIG_NAMES]
    if unknown:
        parser.error(f"unknown configurations {unknown}; of {CONFIG_NAMES}")
    layers = [int(x) for x in parse_list(args.__dict__["8b_layers"]) or []]

    def write(report: dict[str, Any], done: bool) -> None:
        """throughput.json, after every configuration (`complete` false until the end)."""
        report["complete"] = done
        path = out / "throughput.json"
        path.with_suffix(".tmp").write_text(json.dumps(report, indent=1, default=str))
        path.with_suffix(".tmp").replace(path)

    if len(set(layers)) != 2:
        parser.error("--8b-layers takes two different depths, e.g. 3,6")
    report = sweep(
        check,
        tiny=check.cached_tiny_qwen3vl(),
        device=device,
        out=out / "work",
        shapes=shapes,
        configs=configs,
        configs_8b=configs_8b,
        layers_8b=layers,
        steps=args.steps,
        budget_s=args.budget_s,
        peak=check.peak_flops(device, args.peak_tflops),
        compile_on_cpu=args.compile_on_cpu,
        on_update=lambda r: write(r, False),
    )
    ok, problems = complete(report)
    report["problems"] = problems
    write(report, ok)
    print("\n".join(summary(report)))
    print(f"{'complete' if ok else 'PROBLEMS: ' + '; '.join(problems)} ({report['seconds']:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
