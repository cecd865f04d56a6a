"""First contact with CUDA: what only a GPU shows about the trainers, in one command and one table.

Every figure of this project so far came from CPUs. The trainers are written for GPUs (FSDP2, bf16,
device binding) and rehearsed on gloo CPU ranks; this script runs them on one GPU and says, row by
row, PASS / FAIL / SKIP and what it measured (the table is printed, and written with every number
to `--out`: report.json and report.md).

The GPU machine needs no torchcodec or FFmpeg: the miniature's synthetic videos are generated and
decoded once, on any machine that has them, into a folder of frames that travels with the repo:

    # 1. where torchcodec + FFmpeg work (a CPU is enough): videos, their frames, the tiny model
    python tools/gpu_check.py --predecode-only --data runs/gpu_check_data
    # 2. on the GPU machine, with runs/gpu_check_data carried along (about 10-20 MiB)
    python tools/gpu_check.py --device cuda --data runs/gpu_check_data --out runs/gpu_check

(With a lent device machine: name `runs/gpu_check_data` in `carry`, pass `--out $OUT` and
`--work /tmp/gpu_check`, so that only report.json and report.md come back.)

Every run reads frames only from that folder (`StoredFrames`: the trainer's `FrameSource` over a
`VideoReader` whose decoder is the folder) and blocks `import torchcodec` for the whole check, so a
CPU run exercises the same path as the GPU. A `--data` folder without frames is prepared first
when torchcodec is importable (that is how the CPU rehearsal runs: tests/test_gpu_check.py).

Rows, in order (each one's time counts against `--budget-s`; a row that would start after it is
SKIPped, so the whole check fits a lease of about 8 minutes on one GPU):

1. **env**: device, torch / CUDA / transformers versions, bf16 support, where paravt came from,
   that torchcodec is blocked, the GPU's peak bf16 FLOP/s used for MFU.
2. **frames**: the frame folder: videos, frames, pixel budget, and the comparison with
   torchcodec's own decode made when the folder was written (identical frames and timestamps).
3. **sft**: `train_sft` on the miniature's SFT traces, FSDP2 with world size 1 (bf16 compute on
   GPU, fp32 master weights), `--sft-steps` steps: loss, step time, and after every step every
   parameter and optimiser state on the device, in its dtype.
4. **rl**: `train_rl` (PARA-GRPO, the miniature's recipe) from that SFT model, FSDP2 world 1, the
   HF rollout engine on an inference replica on the same device, `--rl-steps` steps: reward,
   rollout / update time, tokens per second, KL, grad norm, placement after every step.
5. **logprob**: rollout log-probs (the engine's, recorded while sampling) against the trainer's
   recomputed ones (`token_logprobs` through the FSDP2 module), per trained token, one RL step at
   learning rate ~0 with the decoupled loss: max / mean / p99 |difference|, main and sub-agent
   tokens, and the share of tokens whose behaviour weight would pass the recipe's cap (5).
6. **placement**: one SFT step and one RL update (`learner.ppo_update`, the 8B recipe's loss: decoupled,
   k1 KL reward, a frozen reference) of the tiny shape under a dispatch-level audit: every op's
   tensors on the expected device (host-side batch assembly and transfers listed apart; a compute
   op off the device is a FAIL), matmul FLOPs per dtype (bf16 where the recipe says bf16),
   gradients and optimiser states on the device.
7. **real-size**: a Qwen3-VL of `--size` (2b: Qwen3-VL-2B's shape, random weights, built in
   memory) with activation checkpointing: an SFT step shaped like `sft_8b` (packing 8192) and an RL
   update shaped like `paragrpo_8b` (2 trajectories of a 64-frame overview + 2048 generated
   tokens, reference model, decoupled loss), `--real-steps` each (the first is a warm-up): peak GPU
   memory, tokens/s, MFU (model FLOPs: 2 x parameters x what they multiply per forward, the
   decoder per token, the LM head per trained position, the vision tower per patch; x3 with the
   backward; attention's own FLOPs left out; over the GPU's dense bf16 peak), and from them the
   per-GPU estimate for the 8B recipe on 8 GPUs (7 FSDP + 1 SGLang), as arithmetic. On the CPU
   (`--size tiny`) the same fields are measured and MFU is n/a.
8. **learning**: the miniature's learning check over `--learning-seeds` seeds (3), each under
   every strategy of `--learning-strategy` (fsdp2, none or both): cold-start SFT
   (`--learning-sft-steps`, 500 as the learning test), held-out accuracy, PARA-GRPO
   (`--learning-rl-steps`, 32), held-out accuracy again, paired by prompt. Every seed trains on
   the frame store's videos, which are seed 0's: the seeds differ in training seed only (data
   order, sampling), not in videos as the learning test's do, and share their held-out prompts. A
   seed is not started when the budget left cannot fit the first seed's measured time (the row
   says how many ran and why). The verdict, per strategy: the learning test's `learned` on the
   accuracy and reward gains pooled over the seeds (accuracy not down, reward +0.26 and 6 SE) and
   `format_held` for every seed (at most 0.1 invalid calls an episode after RL, format ok down by
   at most 0.05); per seed the detail gives accuracy, reward, calls, invalid calls, tool
   responses, format ok and f_tau before -> after. With fewer steps the row is named
   `learning (rehearsal)` and gives no verdict.
9. **throughput**: the sweep of `tools/throughput_sweep.py` (its docstring says every lever and
   how each number is measured) on `--throughput-shapes` (2b and the 8B-width shape on cuda, tiny
   on cpu): the real-size row's steps with one lever changed at a time and some together (tokens
   per micro-batch x2 / x4, activation checkpointing full / selective / off, SDPA / eager /
   SDPA's flash kernel only, the trainers' AdamW / fused, `torch.compile` of the decoder layers;
   packing without padding is n/a: collate pads), each configuration its own model: tokens/s,
   MFU (the real-size row's FLOP count), peak memory and the step split into forward, backward,
   optimiser and log-prob recompute; OOM is a result. The 8B-width shape (hidden 4096, MLP 12288,
   its vision tower) runs at two depths (`--throughput-8b-layers`, 3 and 6) and is extrapolated
   per layer to 36. Within what `--budget-s` leaves and `--throughput-budget-s`; no
   configuration starts that would pass it. `python tools/throughput_sweep.py` runs it alone,
   without the frame folder.

What the GPU machine needs: torch with CUDA, transformers >= 5.19, pydantic, pyyaml, pyarrow,
numpy, pillow, safetensors, tokenizers, tqdm and matplotlib (paravt-train's dependencies, without
torchcodec). paravt itself is imported from the installed packages, or else from
`packages/*/src` of this checkout (no install needed). Exit status: 0 when no row failed.
"""

# ruff: noqa: E402  (paravt is put on sys.path from this checkout before it is imported)

from __future__ import annotations

import argparse
import gc
import hashlib
import io
import json
import logging
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _paravt_source() -> str:
    """Where paravt is imported from: the installed packages, or this checkout's sources."""
    try:
        import paravt.train  # noqa: F401
    except ImportError:
        sys.path[:0] = [str(p) for p in sorted(ROOT.glob("packages/*/src"))]
        return f"{ROOT / 'packages'}/*/src (not installed)"
    return "installed packages"


PARAVT_SOURCE = _paravt_source()

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from paravt.core import CropVideoArgs, Frame, Message, TextPart, render_frames
from paravt.core.engines import HFChatEncoder
from paravt.tools import CropConfig, VideoError, VideoInfo, VideoReader, probe
from paravt.train import load_recipe, load_rl_examples, train_rl, train_sft
from paravt.train.data import read_sft_rows
from paravt.train.distributed import Backend, shard_like_policy
from paravt.train.frames import FrameSource
from paravt.train.miniature import (
    ACCURACY_MARGIN,
    ACCURACY_Z,
    FORMAT_OK_DROP_MAX,
    GATED_K,
    INVALID_CALLS_MAX,
    LR_ZERO,
    REWARD_MARGIN,
    REWARD_Z,
    Evaluation,
    TaskData,
    evaluate_held_out,
    format_held,
    learned,
    make_task_data,
    pooled_gain,
    rl_recipe,
    sft_recipe,
)
from paravt.train.modeling import (
    Sequence_,
    collate,
    pick_dtype,
    token_logprobs,
)
from paravt.train.process_group import init_distributed
from paravt.train.recipe import VideoSpec
from paravt.train.rl import (
    ppo_update,
)
from paravt.train.sft import pack_micro_batches, sft_loss

try:  # the tiny builder's home since paravt-core 0.2; the old path re-exports it
    from paravt.core.testing import cached_tiny_qwen3vl
except ImportError:  # pragma: no cover - an older checkout
    from paravt.core.tiny import cached_tiny_qwen3vl

STORE_FORMAT = 1
DATA_MANIFEST = "gpu_check_data.json"
# Dense bf16 tensor-core peaks (NVIDIA's datasheets, SXM parts): the MFU denominator.
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "H800": 989e12, "A100": 312e12, "B200": 2250e12}
# The 8B reference: 8 GPUs, 7 train with FSDP2 and 1 serves SGLang rollouts, ~250 s per RL step.
REF_TRAIN_GPUS, REF_STEP_S, REF_GPU_MEMORY_GIB = 7, 250.0, 80.0
# Shapes of the real Qwen3-VL checkpoints, from their config.json on the Hugging Face hub
# (Qwen/Qwen3-VL-2B-Instruct, Qwen/Qwen3-VL-8B-Instruct, 2025-10); the same numbers appear in
# other ports' configs (e.g. sgl-jax's Qwen3VLVisionConfig for the 2B's vision tower). Token ids
# and the vocabulary's tokenizer come from the tiny model (the processor is the tiny one).
QWEN3_VL_SHAPES: dict[str, dict[str, Any]] = {
    "2b": {
        "text": {
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 151936,
        },
        "vision": {
            "depth": 24,
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_heads": 16,
            "out_hidden_size": 2048,
            "deepstack_visual_indexes": [5, 11, 17],
        },
        "tie_word_embeddings": True,
    },
    "8b": {
        "text": {
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "num_hidden_layers": 36,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 151936,
        },
        "vision": {
            "depth": 27,
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "num_heads": 16,
            "out_hidden_size": 4096,
            "deepstack_visual_indexes": [8, 16, 24],
        },
        "tie_word_embeddings": False,
    },
}


# --------------------------------------------------------------------------------------------------
# The table


@dataclass
class Row:
    check: str
    status: str  # PASS / FAIL / SKIP
    detail: str
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)

    def add(self, row: Row) -> Row:
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

    def markdown(self) -> str:
        lines = ["| check | status | seconds | detail |", "|---|---|---|---|"]
        lines += [
            f"| {r.check} | {r.status} | {r.seconds:.1f} | {r.detail.replace('|', '/')} |"
            for r in self.rows
        ]
        return "\n".join(lines)


class Fail(Exception):
    """A row's check did not hold (its message is the row's detail)."""


# --------------------------------------------------------------------------------------------------
# Frames without torchcodec: decoded once by paravt-tools, read back from a folder


def file_sha1(path: Path) -> str:
    return hashlib.sha1(Path(path).read_bytes()).hexdigest()


class FrameStore:
    """Every frame of every video of a task, as paravt-tools' `VideoReader` decodes and resizes
    them at one pixel budget, stored per video content (`frames/<sha1>.npz`, `frames/manifest.json`).
    """

    def __init__(self, root: Path) -> None:
        self.dir = Path(root) / "frames"
        manifest = json.loads((self.dir / "manifest.json").read_text())
        if manifest.get("format") != STORE_FORMAT:
            raise ValueError(f"{self.dir}: frame store format {manifest.get('format')!r}")
        self.manifest = manifest
        self.min_pixels, self.max_pixels = manifest["min_pixels"], manifest["max_pixels"]
        self.videos: dict[str, dict[str, Any]] = manifest["videos"]
        self._sha: dict[tuple[str, int, int], str] = {}
        self._frames: dict[str, tuple[torch.Tensor, list[float]]] = {}

    def key(self, path: str | os.PathLike[str]) -> str:
        p = Path(path).resolve()
        st = p.stat()
        ident = (str(p), st.st_size, st.st_mtime_ns)
        if ident not in self._sha:
            self._sha[ident] = file_sha1(p)
        sha = self._sha[ident]
        if sha not in self.videos:
            raise VideoError(
                f"{str(path)!r} is not in the frame store {self.dir} (its content was never "
                "predecoded); run tools/gpu_check.py --predecode-only on the data folder"
            )
        return sha

    def info(self, path: str | os.PathLike[str]) -> VideoInfo:
        return VideoInfo(path=str(path), **self.videos[self.key(path)]["info"])

    def frames(self, path: str | os.PathLike[str]) -> tuple[torch.Tensor, list[float]]:
        sha = self.key(path)
        if sha not in self._frames:
            with np.load(self.dir / f"{sha}.npz") as z:
                self._frames[sha] = (torch.from_numpy(z["frames"]), z["pts"].tolist())
        return self._frames[sha]

    def summary(self) -> dict[str, Any]:
        frames = sum(v["info"]["num_frames"] for v in self.videos.values())
        size = sum(p.stat().st_size for p in self.dir.glob("*.npz"))
        return {"videos": len(self.videos), "frames": frames, "bytes": size}


class StoredReader(VideoReader):
    """A paravt-tools `VideoReader` whose decoder is a `FrameStore`: probing, the frame grid,
    overview and crop sampling, clamps, the cache and the tool's answers are the reader's own;
    only the decoded pixels come from the store (torchcodec is never called)."""

    def __init__(self, store: FrameStore, config: CropConfig) -> None:
        super().__init__(config)
        if (config.min_pixels, config.max_pixels) != (store.min_pixels, store.max_pixels):
            raise ValueError(
                f"the frame store holds frames at min/max pixels {store.min_pixels}/"
                f"{store.max_pixels}, the recipe asks for {config.min_pixels}/{config.max_pixels}"
            )
        if config.overview_keyframe_snap > 0:
            raise ValueError("the frame store does not serve keyframe-snapped overviews")
        self.store = store

    def probe(self, path: str | os.PathLike[str]) -> VideoInfo:
        return self.store.info(path)

    def _decode_chunk(
        self, info: VideoInfo, size: tuple[int, int] | None, indices: list[int]
    ) -> list[tuple[torch.Tensor, float]]:
        frames, pts = self.store.frames(info.path)
        want = self.frame_size(info)
        if tuple(frames.shape[-2:]) != want:
            raise VideoError(
                f"{info.path!r}: stored frames are {tuple(frames.shape[-2:])}, not {want}"
            )
        return [(frames[i].clone(), float(pts[i])) for i in indices]


class StoredFrames(FrameSource):
    """The trainer's `FrameSource` (overviews, crop_video toolboxes, SFT media) over a
    `StoredReader`: what `train_rl(frames=...)` and the SFT conversations read on the GPU."""

    def __init__(self, video: VideoSpec, store: FrameStore) -> None:
        super().__init__(video)
        self.reader = StoredReader(store, self.reader.config)


def predecode(root: Path, spec: VideoSpec) -> dict[str, Any]:
    """Decode every video under `root` with paravt-tools (torchcodec) into `root/frames`, then
    read a few overviews and crops back through `StoredReader` and compare them with the real
    reader's. Returns the store's manifest."""
    out = root / "frames"
    out.mkdir(parents=True, exist_ok=True)
    config = CropConfig(
        fps=spec.crop_fps,
        max_frames=spec.max_crop_frames,
        min_pixels=spec.min_pixels,
        max_pixels=spec.max_pixels,
    )
    reader = VideoReader(config)
    videos: dict[str, dict[str, Any]] = {}
    for path in sorted(root.rglob("*.mp4")):
        sha = file_sha1(path)
        if sha in videos:  # the SFT budgets share their videos
            continue
        info = probe(path)
        got = reader.frames_at(info, range(info.num_frames))
        bad = [i for i, v in got.items() if isinstance(v, Exception)]
        if bad:
            raise VideoError(f"{path}: frames {bad[:5]} do not decode: {got[bad[0]]}")
        frames = np.stack([got[i][0].numpy() for i in range(info.num_frames)])  # type: ignore[index]
        pts = np.array([got[i][1] for i in range(info.num_frames)])  # type: ignore[index]
        buf = io.BytesIO()
        np.savez_compressed(buf, frames=frames, pts=pts)
        (out / f"{sha}.npz").write_bytes(buf.getvalue())
        fields = {k: getattr(info, k) for k in VideoInfo.__dataclass_fields__ if k != "path"}
        videos[sha] = {"info": fields, "example": str(path.relative_to(root))}
    manifest: dict[str, Any] = {
        "format": STORE_FORMAT,
        "min_pixels": spec.min_pixels,
        "max_pixels": spec.max_pixels,
        "videos": videos,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    stored = StoredReader(FrameStore(root), config)
    worst, reads, same_times = 0, 0, True
    for meta in list(videos.values())[:4]:
        path = root / meta["example"]
        dur = float(meta["info"]["duration_s"])
        pairs = [(stored.overview(path, k), reader.overview(path, k)) for k in (2, 4, 8)]
        calls = [
            CropVideoArgs(start_time=0.0, end_time=dur / 2),
            CropVideoArgs(start_time=dur / 3, end_time=dur),
        ]
        for a, b in zip(stored.crop(path, calls), reader.crop(path, calls)):
            pairs.append((a.frames, b.frames))
        for mine, real in pairs:
            reads += 1
            same_times &= [f.timestamp_s for f in mine] == [f.timestamp_s for f in real]
            same_times &= len(mine) == len(real)
            for f, g in zip(mine, real):
                diff = (f.image.int() - g.image.int()).abs().max()
                worst = max(worst, int(diff))
    manifest["verified"] = {
        "reads": reads,
        "max_pixel_diff": worst,
        "timestamps_equal": bool(same_times),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def block_torchcodec() -> str:
    """Make `import torchcodec` fail for the rest of this process, as on the GPU machine."""
    present = "torchcodec" in sys.modules
    for name in [n for n in sys.modules if n == "torchcodec" or n.startswith("torchcodec.")]:
        sys.modules[name] = None  # type: ignore[assignment]
    sys.modules["torchcodec"] = None  # type: ignore[assignment]
    return "imported for predecoding, then blocked" if present else "blocked (never imported)"


def task_sets(root: Path, videos: int | None) -> Any:
    """`miniature.make_task_data` in `root` with `videos` per set (None: the miniature's)."""
    n = {"n_sft": videos, "n_rl": videos, "n_eval": videos} if videos else {}
    return make_task_data(root, **n)  # type: ignore[arg-type]


def prepared_task_sets(root: Path) -> Any:
    """The task sets `prepare_data` made in `root`, at the size it made them (its manifest's
    `videos_per_set`): asked at another size, paravt-train refuses the sets as stale."""
    manifest = json.loads((root / DATA_MANIFEST).read_text())
    videos = manifest.get("videos_per_set")
    return task_sets(root, videos if isinstance(videos, int) else None)


def prepare_data(root: Path, videos: int | None) -> dict[str, Any]:
    """The miniature's task sets (synthetic videos and rows), their frames and the tiny model, in
    `root`; needs torchcodec (encoding and decoding). Returns the data manifest."""
    root.mkdir(parents=True, exist_ok=True)
    data = task_sets(root, videos)
    spec = sft_recipe(root / "unused", root / "model", data).video
    store = predecode(root, spec)
    model = root / "model"
    if not (model / "config.json").is_file():
        shutil.copytree(cached_tiny_qwen3vl(seed=0), model)
    import torchcodec

    manifest = {
        "videos_per_set": videos or "miniature",
        "torch": torch.__version__,
        "torchcodec": getattr(torchcodec, "__version__", "?"),
        "store": {**FrameStore(root).summary(), "verified": store["verified"]},
        "made": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    (root / DATA_MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def folder_mib(root: Path) -> float:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20


# --------------------------------------------------------------------------------------------------
# Placement: where every tensor of a step lives, and in which dtype


MATMULS = {"aten.mm.default", "aten.addmm.default", "aten.bmm.default", "aten.baddbmm.default"}
# Ops that only build, copy, move or look at tensors: batch assembly on the host (collate) and
# transfers, not compute that fell back to the CPU.
DATA_MOVEMENT = {
    "_to_copy", "copy_", "copy", "lift_fresh", "lift_fresh_copy", "full", "zeros", "ones",
    "empty", "empty_strided", "new_empty", "new_zeros", "new_full", "fill_", "zero_", "slice",
    "select", "view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "expand", "t",
    "transpose", "permute", "cat", "stack", "alias", "detach", "clone", "_local_scalar_dense",
    "index_put_", "arange", "eq", "ne", "nonzero", "split", "split_with_sizes", "unbind",
    "as_strided", "contiguous", "item", "scalar_tensor", "set_", "resize_",
}  # fmt: skip


def matmul_flops(name: str, args: Sequence[Any]) -> tuple[int, torch.dtype] | None:
    if name not in MATMULS:
        return None
    a, b = (args[0], args[1]) if name in ("aten.mm.default", "aten.bmm.default") else args[1:3]
    if a.dim() == 2:
        return 2 * a.shape[0] * a.shape[1] * b.shape[1], a.dtype
    return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2], a.dtype


class DeviceAudit(TorchDispatchMode):
    """Every op dispatched while active: on which devices its (non-scalar) tensors live, and the
    FLOPs of each matmul by dtype. Ops touching another device than `device_type` are sorted into
    transfers (mixed devices), host-side data movement and compute (the silent CPU fallbacks)."""

    def __init__(self, device_type: str, threshold: int = 4096) -> None:
        super().__init__()
        self.device_type, self.threshold = device_type, threshold
        self.ops = 0
        self.transfers: Counter[str] = Counter()
        self.host: Counter[str] = Counter()
        self.fallback: Counter[str] = Counter()
        self.flops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        name = str(func)
        tensors = [t for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
        devices = {t.device.type for t in tensors if t.dim() > 0}
        if devices - {self.device_type}:
            short = name.split(".")[1] if name.count(".") >= 2 else name
            if len(devices) > 1:
                self.transfers[name] += 1
            elif short in DATA_MOVEMENT:
                self.host[name] += 1
            else:
                big = any(t.is_floating_point() and t.numel() >= self.threshold for t in tensors)
                (self.fallback if big else self.host)[name] += 1
        mm = matmul_flops(name, args)
        if mm is not None:
            self.flops[str(mm[1]).replace("torch.", "")] += mm[0]
        return out


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def placement(model: Any, optimizer: Any, device_type: str) -> dict[str, Any]:
    """Devices and dtypes of a model's parameters (the local shards under FSDP2) and of its
    optimiser's state tensors."""
    params = [_local(p) for p in model.parameters()]
    states = [
        _local(v)
        for st in optimizer.state.values()
        for v in st.values()
        if isinstance(v, torch.Tensor) and v.dim() > 0
    ]
    return {
        "params": len(params),
        "params_off_device": sum(p.device.type != device_type for p in params),
        "param_dtypes": dict(Counter(str(p.dtype).replace("torch.", "") for p in params)),
        "optimizer_states": len(states),
        "states_off_device": sum(s.device.type != device_type for s in states),
        "state_dtypes": dict(Counter(str(s.dtype).replace("torch.", "") for s in states)),
    }


class StepWatch:
    """`on_step` of `train_sft` / `train_rl`: placement after every optimiser step."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self.seen: list[dict[str, Any]] = []
        self.compute_dtype = ""

    def __call__(self, step: int, backend: Any, *rest: Any) -> None:
        self.compute_dtype = str(backend.compute_dtype).replace("torch.", "")
        self.seen.append(placement(backend.model, backend.optimizer, self.device_type))

    def ok(self) -> bool:
        return bool(self.seen) and all(
            s["params_off_device"] == 0 and s["states_off_device"] == 0 for s in self.seen
        )

    def describe(self) -> str:
        if not self.seen:
            return "no step seen"
        last = self.seen[-1]
        return (
            f"after each of {len(self.seen)} steps: {last['params']} params "
            f"{last['param_dtypes']} and {last['optimizer_states']} optimiser states "
            f"{last['state_dtypes']}, off {self.device_type}: "
            f"{max(s['params_off_device'] + s['states_off_device'] for s in self.seen)}; "
            f"compute {self.compute_dtype}"
        )


class AuditedBackend(Backend):
    """The trainer's `Backend`, noting where the gradients are just before each optimiser step."""

    def __init__(self, *args: Any, device_type: str, **kwargs: Any) -> None:
        self.device_type = device_type
        self.grads: dict[str, Any] = {}
        super().__init__(*args, **kwargs)

    def step(self, **kwargs: Any) -> float:
        grads = [_local(p.grad) for p in self.model.parameters() if p.grad is not None]
        self.grads = {
            "grads": len(grads),
            "grads_off_device": sum(g.device.type != self.device_type for g in grads),
            "grad_dtypes": dict(Counter(str(g.dtype).replace("torch.", "") for g in grads)),
        }
        return super().step(**kwargs)


# --------------------------------------------------------------------------------------------------
# Steps of a real-size model: built in memory, stepped through the trainer's own functions


@dataclass
class Shape:
    """A model shape and the per-step work of the recipes of that size."""

    name: str
    config: Any
    frames: int  # overview frames per prompt
    pixels: int  # pixels per frame
    rl_generated: int  # generated tokens per trajectory
    rl_sequences: int  # trajectories per micro-batch (loss.micro_batch_size)
    sft_packing: int  # padded tokens per SFT micro-batch


def qwen3vl_config(shape: dict[str, Any], base: Any) -> Any:
    """A `Qwen3VLConfig` of `shape` (QWEN3_VL_SHAPES) with the token ids of `base` (the tiny
    model's config), as `paravt.core.tiny` builds its own."""
    from transformers import Qwen3VLConfig

    text = {
        **shape["text"],
        "max_position_embeddings": 32768,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 5e6,
            "mrope_section": [24, 20, 20],
        },
        "pad_token_id": base.text_config.pad_token_id,
    }
    vision = {
        **shape["vision"],
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "num_position_embeddings": 2304,
    }
    return Qwen3VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=base.image_token_id,
        video_token_id=base.video_token_id,
        vision_start_token_id=base.vision_start_token_id,
        vision_end_token_id=base.vision_end_token_id,
        tie_word_embeddings=shape["tie_word_embeddings"],
    )


def model_shape(size: str, tiny: Path, out: Path) -> Shape:
    """`tiny`: the tiny model with the miniature's recipe sizes; `2b`: Qwen3-VL-2B's shape with the
    8B recipes' sizes (`paragrpo_8b`: 64 frames of 50176 pixels, 2048 new tokens, 2 trajectories
    per micro-batch; `sft_8b`: packing 8192)."""
    from transformers import AutoConfig

    base = AutoConfig.from_pretrained(str(tiny))
    if size == "tiny":
        unused = out / "unused.parquet"
        rl = rl_recipe(out, tiny, unused)
        sft = sft_recipe(out, tiny, TaskData(sft={GATED_K[0]: unused}, rl=unused, held_out=unused))
        return Shape(
            "tiny",
            base,
            rl.video.overview_frames,
            rl.video.max_pixels,
            rl.rollout.max_new_tokens,
            2,
            sft.sft.packing_length,
        )
    rl8 = load_recipe("paragrpo_8b", [f"output_dir={out}"])
    sft8 = load_recipe("sft_8b", [f"output_dir={out}"])
    return Shape(
        size,
        qwen3vl_config(QWEN3_VL_SHAPES[size], base),
        rl8.video.overview_frames,
        rl8.video.max_pixels,
        rl8.rollout.max_new_tokens,
        rl8.loss.micro_batch_size,
        sft8.sft.packing_length,
    )


def param_counts(model: Any) -> dict[str, int]:
    """Parameters by the FLOPs they cost: decoder (per text token), vision (per patch), the LM
    head (per position whose log-prob is taken) and the embedding (a lookup, free)."""
    counts = Counter()
    for name, p in model.named_parameters():
        if ".visual." in f".{name}":
            counts["vision"] += p.numel()
        elif "embed_tokens" in name:
            counts["embedding"] += p.numel()
        elif name.startswith("lm_head"):
            counts["head"] += p.numel()
        else:
            counts["decoder"] += p.numel()
    if not counts["head"]:  # tied to the embedding: the head still multiplies
        counts["head"] = int(model.lm_head.weight.numel())
    counts["total"] = sum(p.numel() for p in model.parameters())
    return dict(counts)


def meta_counts(config: Any) -> dict[str, int]:
    from transformers import Qwen3VLForConditionalGeneration

    with torch.device("meta"):
        return param_counts(Qwen3VLForConditionalGeneration(config))


def forward_flops(counts: dict[str, int], work: dict[str, int]) -> float:
    """2 x parameters x what they multiply in one forward (attention's own FLOPs left out)."""
    return 2.0 * (
        counts["decoder"] * work["tokens"]
        + counts["head"] * work["head_positions"]
        + counts["vision"] * work["patches"]
    )


def work_of(seqs: Sequence[Sequence_]) -> dict[str, int]:
    return {
        "tokens": sum(len(s) for s in seqs),
        "head_positions": sum(sum(s.mask[1:]) for s in seqs),
        "patches": sum(int(c.grid_thw.prod()) for s in seqs for c in s.media),
        "sequences": len(seqs),
    }


class Harness:
    """A Qwen3-VL of `shape` built in memory (fp32 master weights, FSDP2 world 1, the recipe's
    compute dtype, activation checkpointing) with a frozen reference, stepped by the trainer's
    functions: `collate`, `sft_loss`, `Backend`, `learner.ppo_update`."""

    def __init__(
        self,
        shape: Shape,
        tiny: Path,
        device: torch.device,
        out: Path,
        *,
        overrides: Sequence[str] = (),
        prepare: Callable[[Any], None] | None = None,
    ) -> None:
        """`overrides`: more `paragrpo_8b` overrides (the throughput sweep's attention kernel and
        micro-batch); `prepare`: called on the policy before it is sharded (the sweep's
        checkpointing policy and `torch.compile`)."""
        from transformers import AutoModelForImageTextToText, AutoProcessor

        overrides = [
            f"output_dir={out}",
            f"model.path={tiny}",
            f"distributed.device={device.type}",
            *overrides,
        ]
        self.recipe = load_recipe("paragrpo_8b", overrides)
        self.shape, self.device = shape, device
        init_distributed(self.recipe.distributed, device)
        self.compute = pick_dtype(self.recipe.model, device)
        attn = self.recipe.model.attn_implementation
        torch.manual_seed(0)
        with torch.device(device):
            policy = AutoModelForImageTextToText.from_config(shape.config, attn_implementation=attn)
        self.counts = param_counts(policy)
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        policy.config.use_cache = False
        if prepare is not None:
            prepare(policy)
        torch.manual_seed(0)
        with torch.device(device):
            ref = AutoModelForImageTextToText.from_config(shape.config, attn_implementation=attn)
        ref = ref.to(self.compute)
        self.ref = shard_like_policy(ref, self.recipe.distributed, self.compute).eval()
        self.backend = AuditedBackend(
            policy,
            self.recipe.distributed,
            self.recipe.optim,
            100,
            compute_dtype=self.compute,
            device_type=device.type,
        )
        self.processor = AutoProcessor.from_pretrained(str(tiny))
        low = min(self.processor.image_processor.size["shortest_edge"], shape.pixels)
        self.processor.image_processor.size = {"shortest_edge": low, "longest_edge": shape.pixels}
        self.encoder = HFChatEncoder(self.processor)
        tok = self.encoder.tokenizer
        added = set(tok.added_tokens_decoder)
        self.plain_ids = [i for i in range(len(tok)) if i not in added]
        self.rng = np.random.default_rng(0)

    def sequences(self, n: int, generated: int = 0, total: int = 0) -> list[Sequence_]:
        """`n` trajectories: a prompt with the shape's overview frames (random pixels, each after
        its timestamp) and a question, then `generated` trained tokens (or as many as make
        `total` tokens) and the end of the turn."""
        side = math.isqrt(self.shape.pixels)
        seqs = []
        for i in range(n):
            frames = [
                Frame(self.rng.integers(0, 256, (side, side, 3), dtype=np.uint8), float(t))
                for t in range(self.shape.frames)
            ]
            prompt = self.encoder.encode_prompt(
                [Message("user", [*render_frames(frames), TextPart("What colour is the square?")])]
            )
            length = generated or max(16, total - len(prompt.token_ids) - 1)
            gen = [int(x) for x in self.rng.choice(self.plain_ids, length)]
            ids = list(prompt.token_ids) + gen + [self.encoder.end_of_turn_id]
            mask = [0] * len(prompt.token_ids) + [1] * (length + 1)
            adv = 1.0 if i % 2 == 0 else -1.0
            seqs.append(
                Sequence_(ids, mask, list(prompt.media), [0.0] * len(ids), [adv] * len(ids))
            )
        return seqs

    def behaviour_logprobs(self, seqs: list[Sequence_]) -> None:
        """Old log-probs = the policy's own (as if it had sampled them), so ratios start at 1."""
        temperature = self.recipe.rollout.temperature or 1.0
        with torch.no_grad():
            for s in seqs:
                batch = self._collate([s])
                lp = token_logprobs(
                    self.backend.forward_module(),
                    batch,
                    temperature=temperature,
                    mask=batch["mask"],
                )
                s.old_logprobs = lp[0].float().cpu().tolist()

    def _collate(self, seqs: Sequence[Sequence_]) -> dict[str, Any]:
        return collate(
            seqs,
            pad_id=self.encoder.pad_token_id,
            image_token_id=self.encoder.image_token_id,
            device=self.device,
        )

    def sft_step(self, seqs: list[Sequence_]) -> dict[str, float]:
        """One optimiser step of `train_sft`'s loop over `seqs` (packed as the recipe packs)."""
        micro = pack_micro_batches(
            seqs, batch_size=len(seqs), packing_length=self.shape.sft_packing
        )
        tokens = float(sum(sum(s.mask[1:]) for s in seqs))
        norm = max(tokens, 1.0) / self.backend.grad_average_ranks
        chunk = self.recipe.model.logprob_chunk_tokens
        nll = 0.0
        for k, mb in enumerate(micro):
            loss, part = sft_loss(
                self.backend.forward_module(), self._collate(mb), norm, chunk=chunk
            )
            self.backend.backward(loss, last=k == len(micro) - 1)
            nll += part
        return {
            "loss": nll / max(tokens, 1.0),
            "grad_norm": self.backend.step(),
            "micro_batches": float(len(micro)),
        }

    def rl_step(self, seqs: list[Sequence_]) -> dict[str, float]:
        """`learner.ppo_update` (log-prob pass, KL reward, decoupled PPO loss, one optimiser step)."""
        advantages = [list(s.advantages or []) for s in seqs]
        try:
            return ppo_update(
                self.backend,
                self.ref,
                seqs,
                self.recipe,
                pad_id=self.encoder.pad_token_id,
                image_id=self.encoder.image_token_id,
                device=self.device,
            )
        finally:
            for s, a in zip(seqs, advantages):  # the k1 KL reward is added in place
                s.advantages = a

    def rl_flops_passes(self) -> float:
        """Forward-pass equivalents of one RL update: proximal and reference passes (no grad),
        forward + backward of the loss (x3)."""
        loss = self.recipe.loss
        return float(loss.decoupled) + float(loss.kl_coef > 0) + 3.0


def cuda_sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return math.nan


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def peak_flops(device: torch.device, override: float | None) -> float | None:
    if override:
        return override * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)


# --------------------------------------------------------------------------------------------------
# The rows


@dataclass
class Ctx:
    args: argparse.Namespace
    device: torch.device
    out: Path  # report.json, report.md, tracebacks
    work: Path  # the trainers' runs
    root: Path  # the data folder
    data: TaskData
    store: FrameStore
    model: Path  # the tiny base model (in the data folder)
    t0: float
    sft_final: Path | None = None
    conversations: list[list[Message]] | None = None

    def dist(self, strategy: str = "fsdp2") -> list[str]:
        return [
            f"distributed.strategy={strategy}",
            f"distributed.device={self.device.type}",
            "logging.progress=false",
        ]

    def frames(self, video: VideoSpec) -> StoredFrames:
        return StoredFrames(video, self.store)

    def sft_conversations(self, recipe: Any) -> list[list[Message]]:
        """The SFT rows as core messages with their frames from the store (what `train_sft`'s
        DataLoader would decode), built once."""
        if self.conversations is None:
            examples, _ = read_sft_rows(recipe.data.parquet, root=recipe.data.root)
            frames = self.frames(recipe.video)
            self.conversations = [frames.messages_of(ex) for ex in examples]
        return self.conversations


def read_metrics(run: Path) -> list[dict[str, Any]]:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def row_env(ctx: Ctx) -> Row:
    import transformers

    dev = ctx.device
    data: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "paravt": PARAVT_SOURCE,
        "torchcodec": ctx.args.torchcodec_state,
        "python": sys.version.split()[0],
    }
    codec = f"torchcodec {ctx.args.torchcodec_state}"
    if dev.type == "cpu":
        data["threads"] = torch.get_num_threads()
        detail = (
            f"CPU rehearsal (torch {torch.__version__}, transformers {transformers.__version__}, "
            f"{torch.get_num_threads()} threads, paravt from {PARAVT_SOURCE}, {codec}): the "
            "GPU-only facts (kernels, memory, MFU) are not checked"
        )
        return Row("env", "PASS", detail, data=data)
    if not torch.cuda.is_available():
        raise Fail("torch.cuda.is_available() is False")
    props = torch.cuda.get_device_properties(dev)
    bf16 = torch.cuda.is_bf16_supported()
    peak = peak_flops(dev, ctx.args.peak_tflops)
    data.update(
        name=props.name,
        memory_gib=props.total_memory / 2**30,
        capability=f"{props.major}.{props.minor}",
        bf16=bf16,
        nccl=".".join(map(str, torch.cuda.nccl.version())),
        peak_bf16_tflops=peak / 1e12 if peak else None,
    )
    detail = (
        f"{props.name}, {props.total_memory / 2**30:.0f} GiB, sm {props.major}.{props.minor}, "
        f"bf16={bf16}, torch {torch.__version__} CUDA {torch.version.cuda}, transformers "
        f"{transformers.__version__}, paravt from {PARAVT_SOURCE}, {codec}; MFU peak "
        + (f"{peak / 1e12:.0f} TFLOP/s bf16" if peak else "unknown (--peak-tflops)")
    )
    return Row("env", "PASS" if bf16 else "FAIL", detail, data=data)


def row_frames(ctx: Ctx) -> Row:
    summary = ctx.store.summary()
    verified = ctx.store.manifest.get("verified", {})
    frames = ctx.frames(sft_recipe(ctx.work / "unused", ctx.model, ctx.data).video)
    video = ctx.root / next(iter(ctx.store.videos.values()))["example"]
    overview, duration = frames.overview(video, 4)
    (crop,) = frames.reader.crop(video, [CropVideoArgs(start_time=0.0, end_time=duration / 2)])
    if crop.error:
        raise Fail(f"a crop through the store failed: {crop.error}")
    try:
        import torchcodec  # noqa: F401

        raise Fail("torchcodec is importable: the check would not show the GPU machine's path")
    except ImportError:
        pass
    ok = verified.get("max_pixel_diff") == 0 and verified.get("timestamps_equal") is True
    detail = (
        f"{summary['videos']} videos, {summary['frames']} frames at {ctx.store.min_pixels}-"
        f"{ctx.store.max_pixels} px ({summary['bytes'] / 2**20:.1f} MiB); read back here without "
        f"torchcodec: a {len(overview)}-frame overview and a {len(crop.frames)}-frame crop; "
        f"against torchcodec when written: {verified.get('reads')} overviews/crops, max |pixel "
        f"diff| {verified.get('max_pixel_diff')}, timestamps equal {verified.get('timestamps_equal')}"
    )
    return Row("frames", "PASS" if ok else "FAIL", detail, data={**summary, **verified})


def row_sft(ctx: Ctx) -> Row:
    a = ctx.args
    recipe = sft_recipe(
        ctx.work / "sft",
        ctx.model,
        ctx.data,
        steps=a.sft_steps,
        extra=[*ctx.dist(), *a.sft_override],
    )
    watch = StepWatch(ctx.device.type)
    reset_peak(ctx.device)
    ctx.sft_final = train_sft(recipe, conversations=ctx.sft_conversations(recipe), on_step=watch)
    rows = read_metrics(ctx.work / "sft")
    losses = [float(r["loss"]) for r in rows]
    times = [float(r["time/step_s"]) for r in rows]
    tokens = [float(r["tokens/total"]) for r in rows]
    finite = bool(losses) and all(math.isfinite(x) for x in losses)
    k = max(1, min(5, len(losses) // 2))
    falls = len(losses) < 10 or _mean(losses[-k:]) < _mean(losses[:k])
    ok = finite and falls and watch.ok() and len(rows) == a.sft_steps
    data = {
        "losses": losses,
        "step_s": times,
        "placement": watch.seen[-1:],
        "peak_gib": peak_gib(ctx.device),
    }
    detail = (
        f"train_sft, {len(rows)} steps, FSDP2 world 1 on {ctx.device.type}: loss "
        f"{losses[0]:.3f} -> {losses[-1]:.3f} (first/last {k} mean {_mean(losses[:k]):.3f} -> "
        f"{_mean(losses[-k:]):.3f}), median step {statistics.median(times):.3f} s, "
        f"{sum(tokens) / max(sum(times), 1e-9):.0f} tokens/s; placement {watch.describe()}"
        + (f"; peak {data['peak_gib']:.2f} GiB" if ctx.device.type == "cuda" else "")
    )
    return Row("sft", "PASS" if ok else "FAIL", detail, data=data)


def row_rl(ctx: Ctx) -> Row:
    a = ctx.args
    init = ctx.sft_final or ctx.model
    recipe = rl_recipe(
        ctx.work / "rl",
        init,
        ctx.data.rl,
        steps=a.rl_steps,
        extra=[*ctx.dist(), "checkpoint.save_final=false", *a.override],
    )
    watch = StepWatch(ctx.device.type)
    reset_peak(ctx.device)
    train_rl(
        recipe, examples=load_rl_examples(recipe), frames=ctx.frames(recipe.video), on_step=watch
    )
    rows = read_metrics(ctx.work / "rl")
    keys = [
        "reward/total",
        "accuracy",
        "kappa",
        "loss",
        "kl",
        "grad_norm",
        "time/rollout_s",
        "time/update_s",
        "time/step_s",
        "tokens/generated",
        "throughput/generated_tokens_per_s",
    ]
    series = {k: [float(r.get(k, math.nan)) for r in rows] for k in keys}
    finite = all(math.isfinite(x) for k in ("loss", "grad_norm") for x in series[k])
    ok = finite and watch.ok() and len(rows) == a.rl_steps
    detail = (
        f"train_rl (PARA-GRPO) from {'the SFT row' if ctx.sft_final else 'the base model'}, "
        f"{len(rows)} steps, FSDP2 world 1 + HF engine on a replica on {ctx.device.type}: "
        f"reward {_mean(series['reward/total']):.3f}, accuracy {_mean(series['accuracy']):.3f}, "
        f"rollout {_mean(series['time/rollout_s']):.2f} s + update {_mean(series['time/update_s']):.2f} s"
        f" per step, {_mean(series['throughput/generated_tokens_per_s']):.0f} generated tokens/s, "
        f"KL {_mean(series['kl']):.2e}, grad norm {_mean(series['grad_norm']):.3f}; "
        f"placement {watch.describe()}"
        + (f"; peak {peak_gib(ctx.device):.2f} GiB" if ctx.device.type == "cuda" else "")
    )
    data = {**series, "placement": watch.seen[-1:], "peak_gib": peak_gib(ctx.device)}
    return Row("rl", "PASS" if ok else "FAIL", detail, data=data)


def row_logprob(ctx: Ctx) -> Row:
    a = ctx.args
    init = ctx.sft_final or ctx.model
    recipe = rl_recipe(
        ctx.work / "logprob",
        init,
        ctx.data.rl,
        steps=1,
        lr=LR_ZERO,
        extra=[*ctx.dist(), "loss.decoupled=true", "checkpoint.save_final=false", *a.override],
    )
    from transformers import AutoProcessor

    temperature = recipe.rollout.temperature or 1.0
    chunk = recipe.model.logprob_chunk_tokens
    encoder = HFChatEncoder(AutoProcessor.from_pretrained(str(init)))
    pad, image = encoder.pad_token_id, encoder.image_token_id
    diffs: dict[str, list[float]] = {"main": [], "subagent": []}

    def on_step(step: int, backend: Any, metrics: Any, ro: Any) -> None:
        # lr ~0 (1e-30: no fp32 weight moves), so the policy now is the one that sampled
        module = backend.forward_module()
        with torch.no_grad():
            for ep in ro.episodes:
                for kind, traj in [("main", ep.main), *(("subagent", s) for s in ep.subagents)]:
                    if not any(traj.loss_mask):
                        continue
                    seq = Sequence_(traj.token_ids, traj.loss_mask, traj.media, traj.logprobs)
                    batch = collate([seq], pad_id=pad, image_token_id=image, device=ctx.device)
                    mask = batch["mask"].clone()
                    mask[:, 0] = 0
                    lp = token_logprobs(
                        module, batch, temperature=temperature, mask=mask, chunk=chunk
                    )
                    sel = mask[0].bool()
                    d = (lp[0][sel] - batch["old_logprobs"][0][sel]).abs()
                    diffs[kind].extend(d.float().cpu().tolist())

    train_rl(
        recipe, examples=load_rl_examples(recipe), frames=ctx.frames(recipe.video), on_step=on_step
    )
    rows = read_metrics(ctx.work / "logprob")
    every = diffs["main"] + diffs["subagent"]
    if not every:
        raise Fail("no trained token in the step's rollouts")
    cap = math.log(recipe.loss.behav_imp_weight_cap or 5.0)
    bf16 = pick_dtype(recipe.model, ctx.device) == torch.bfloat16
    max_tol = a.logprob_max_tol if a.logprob_max_tol is not None else (cap if bf16 else 1e-3)
    mean_tol = a.logprob_mean_tol if a.logprob_mean_tol is not None else (0.05 if bf16 else 1e-4)
    q = sorted(every)
    stats = {
        "tokens": len(every),
        "max": q[-1],
        "mean": _mean(every),
        "p99": q[min(len(q) - 1, int(0.99 * len(q)))],
        "over_cap_share": sum(x > cap for x in every) / len(every),
        **{f"{k}_tokens": len(v) for k, v in diffs.items()},
        **{f"{k}_max": max(v) for k, v in diffs.items() if v},
        **{f"{k}_mean": _mean(v) for k, v in diffs.items() if v},
        "trainer_behav_weight_mean": rows[-1].get("behav_weight_mean") if rows else None,
        "trainer_ratio_mean": rows[-1].get("ratio_mean") if rows else None,
        "trainer_clip_fraction": rows[-1].get("clip_fraction") if rows else None,
        "max_tol": max_tol,
        "mean_tol": mean_tol,
    }
    ok = stats["max"] <= max_tol and stats["mean"] <= mean_tol
    per_kind = ", ".join(
        f"{k} {stats[f'{k}_tokens']} tokens max {stats[f'{k}_max']:.2e} mean {stats[f'{k}_mean']:.2e}"
        for k in diffs
        if diffs[k]
    )
    detail = (
        f"rollout (HF engine, {'bf16' if bf16 else 'fp32'}) vs trainer recompute (FSDP2 module), "
        f"{stats['tokens']} trained tokens: max |diff| {stats['max']:.2e}, mean {stats['mean']:.2e}, "
        f"p99 {stats['p99']:.2e} ({per_kind}); share over ln(cap {math.exp(cap):g}) "
        f"{stats['over_cap_share']:.3%}; the trainer's step: behaviour weight mean "
        f"{stats['trainer_behav_weight_mean']}, ratio mean {stats['trainer_ratio_mean']}, clip "
        f"fraction {stats['trainer_clip_fraction']}; tolerance max {max_tol:.2g} mean {mean_tol:.2g}"
    )
    return Row("logprob", "PASS" if ok else "FAIL", detail, data=stats)


def row_placement(ctx: Ctx) -> Row:
    shape = model_shape("tiny", ctx.model, ctx.work / "placement")
    h = Harness(shape, ctx.model, ctx.device, ctx.work / "placement")
    sft = h.sequences(2, 24)
    rl = h.sequences(shape.rl_sequences, 24)
    h.behaviour_logprobs(rl)
    audit = DeviceAudit(ctx.device.type)
    with audit:
        h.sft_step(sft)
        sft_grads = dict(h.backend.grads)
        h.rl_step(rl)
    rl_grads = dict(h.backend.grads)
    where = placement(h.backend.model, h.backend.optimizer, ctx.device.type)
    compute = str(h.compute).replace("torch.", "")
    total = sum(audit.flops.values()) or 1
    share = audit.flops.get(compute, 0) / total
    grads_ok = all(g["grads"] > 0 and g["grads_off_device"] == 0 for g in (sft_grads, rl_grads))
    ok = (
        not audit.fallback
        and grads_ok
        and where["params_off_device"] == 0
        and where["states_off_device"] == 0
        and set(where["param_dtypes"]) == {"float32"}
        and share >= 0.99
    )
    data = {
        "ops": audit.ops,
        "fallback": dict(audit.fallback),
        "host": dict(audit.host),
        "transfers": dict(audit.transfers),
        "matmul_flops_by_dtype": dict(audit.flops),
        "grads_sft": sft_grads,
        "grads_rl": rl_grads,
        **where,
    }
    top = ", ".join(f"{k} x{v}" for k, v in audit.fallback.most_common(5)) or "none"
    flops = ", ".join(f"{k} {v / total:.1%}" for k, v in audit.flops.most_common())
    detail = (
        f"SFT step + RL update (learner.ppo_update: decoupled, k1 KL reward, reference) of the tiny "
        f"shape under a dispatch audit, expecting {ctx.device.type} / compute {compute}: "
        f"{audit.ops} ops; compute ops off {ctx.device.type}: {top}; host-side data movement "
        f"{sum(audit.host.values())}, transfers {sum(audit.transfers.values())}; matmul FLOPs "
        f"{flops}; params {where['param_dtypes']} off device {where['params_off_device']}; grads "
        f"{rl_grads['grad_dtypes']} off device {sft_grads['grads_off_device'] + rl_grads['grads_off_device']}; "
        f"optimiser states {where['state_dtypes']} off device {where['states_off_device']}"
    )
    del h
    return Row("placement", "PASS" if ok else "FAIL", detail, data=data)


def row_real_size(ctx: Ctx) -> Row:
    a, dev = ctx.args, ctx.device
    shape = model_shape(a.size, ctx.model, ctx.work / "real")
    h = Harness(shape, ctx.model, dev, ctx.work / "real")
    counts = h.counts
    sft = h.sequences(2, total=shape.sft_packing // 2)  # one packed micro-batch
    rl = h.sequences(shape.rl_sequences, shape.rl_generated)
    h.behaviour_logprobs(rl)
    peak = peak_flops(dev, a.peak_tflops)
    results: dict[str, dict[str, Any]] = {}
    for name, seqs, step, passes in (
        ("sft", sft, h.sft_step, 3.0),
        ("rl", rl, h.rl_step, h.rl_flops_passes()),
    ):
        work = work_of(seqs)
        flops = passes * forward_flops(counts, work)
        times, peaks, last = [], [], {}
        for i in range(a.real_steps):
            free_memory(dev)
            reset_peak(dev)
            cuda_sync(dev)
            t = time.perf_counter()
            last = step(seqs)
            cuda_sync(dev)
            if i > 0 or a.real_steps == 1:  # the first step warms up (allocator, kernels)
                times.append(time.perf_counter() - t)
            peaks.append(peak_gib(dev))
        s = statistics.median(times)
        results[name] = {
            **work,
            "step_s": s,
            "tokens_per_s": work["tokens"] / s,
            "model_flops": flops,
            "mfu": flops / s / peak if peak else None,
            "peak_gib": max(peaks),
            "loss": float(last.get("loss", math.nan)),
            "grad_norm": float(last.get("grad_norm", math.nan)),
        }
    where = placement(h.backend.model, h.backend.optimizer, dev.type)
    estimate, lines = estimate_8b(ctx, shape, counts, results, peak, h.rl_flops_passes())
    ok = all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in results.values())
    ok = ok and where["params_off_device"] == 0 and where["states_off_device"] == 0

    def part(n: str) -> str:
        r = results[n]
        mfu = f"MFU {r['mfu']:.1%}" if r["mfu"] is not None else "MFU n/a"
        mem = f", peak {r['peak_gib']:.1f} GiB" if dev.type == "cuda" else ""
        return (
            f"{n} {r['sequences']} seq x {r['tokens'] // r['sequences']} tokens "
            f"({r['patches']} patches): {r['step_s']:.2f} s, {r['tokens_per_s']:.0f} tokens/s, {mfu}{mem}"
        )

    detail = (
        f"{shape.name} shape ({counts['total'] / 1e9:.3f} B params, random init, FSDP2 world 1, "
        f"compute {str(h.compute).replace('torch.', '')}, activation checkpointing), median of "
        f"{max(1, a.real_steps - 1)} step(s) after a warm-up: {part('sft')}; {part('rl')}; "
        + " ".join(lines)
    )
    del h
    return Row(
        f"real-size ({shape.name})",
        "PASS" if ok else "FAIL",
        detail,
        data={"counts": counts, **results, "estimate_8b": estimate, "placement": where},
    )


def estimate_8b(
    ctx: Ctx,
    shape: Shape,
    counts: dict[str, int],
    results: dict[str, dict[str, Any]],
    peak: float | None,
    passes: float,
) -> tuple[dict[str, Any], list[str]]:
    """What the 8B RL recipe needs per trainer GPU (7 FSDP2 ranks), scaled from this run: rough
    (activations scaled by width x depth, the LM head's chunk and the vision tower with them)."""
    n8 = meta_counts(qwen3vl_config(QWEN3_VL_SHAPES["8b"], shape.config))  # its token ids
    gib = 2**30
    states = 16.0 * n8["total"] / REF_TRAIN_GPUS / gib  # fp32 master + grad + AdamW m, v
    ref = 2.0 * n8["total"] / REF_TRAIN_GPUS / gib  # the bf16 reference, sharded like the policy
    est: dict[str, Any] = {"params_8b": n8, "states_gib": states, "ref_gib": ref}
    lines = [
        f"8B recipe per trainer GPU ({REF_TRAIN_GPUS} FSDP2 ranks): states 16 B x "
        f"{n8['total'] / 1e9:.2f} B params / {REF_TRAIN_GPUS} = {states:.1f} GiB + bf16 reference "
        f"2 B x params / {REF_TRAIN_GPUS} = {ref:.1f} GiB"
    ]
    rl = results["rl"]
    if ctx.device.type != "cuda" or shape.name == "tiny":
        lines.append("+ activations and time: need the GPU run at --size 2b (n/a here).")
        return est, lines
    t8 = QWEN3_VL_SHAPES["8b"]["text"]
    t2 = QWEN3_VL_SHAPES[shape.name]["text"]
    scale = (
        t8["hidden_size"] * t8["num_hidden_layers"] / (t2["hidden_size"] * t2["num_hidden_layers"])
    )
    rest = rl["peak_gib"] - 18.0 * counts["total"] / gib  # beyond states and the reference
    act = max(rest, 0.0) * scale
    total = states + ref + act
    est.update(activations_gib=act, total_gib=total, activation_scale=scale)
    lines.append(
        f"+ activations (this RL update's peak {rl['peak_gib']:.1f} GiB - 18 B x "
        f"{counts['total'] / 1e9:.2f} B params = {rest:.1f} GiB, x {scale:.2f} for 8B's width x "
        f"depth) {act:.1f} GiB = {total:.1f} GiB of {REF_GPU_MEMORY_GIB:.0f};"
    )
    if rl["mfu"]:
        episodes = 7 * 8  # paragrpo_8b: 7 prompts x group 8 per step
        per_rank_mb = math.ceil(episodes / REF_TRAIN_GPUS / shape.rl_sequences)
        f8 = passes * forward_flops(n8, rl)  # the same passes as the measured update
        seconds = per_rank_mb * f8 / (peak * rl["mfu"])  # type: ignore[operator]
        est.update(update_s=seconds, micro_batches_per_rank=per_rank_mb)
        lines.append(
            f"update time: {episodes} trajectories / {REF_TRAIN_GPUS} ranks / {shape.rl_sequences} "
            f"per micro-batch = {per_rank_mb} micro-batches x {f8 / 1e12:.0f} TFLOP ({passes:g} passes "
            f"of this run's micro-batch on 8B) / ({peak / 1e12:.0f} TFLOP/s x MFU {rl['mfu']:.1%}) = "  # type: ignore[operator]
            f"{seconds:.0f} s of the reference's ~{REF_STEP_S:.0f} s step (one turn of 2048 "
            "tokens per trajectory; generation on the SGLang GPU not included)."
        )
    return est, lines


def evaluate(model: Path, recipe: Any, examples: Sequence[Any], frames: Any) -> Evaluation:
    """`miniature.evaluate_held_out` with the frames from the store: the recipe's temperature,
    gate and group size, fixed seed."""
    return evaluate_held_out(model, recipe, examples, frames=frames)


LEARNING_STRATEGIES = {"fsdp2": ("fsdp2",), "none": ("none",), "both": ("fsdp2", "none")}


def learning_run(ctx: Ctx, seed: int, strategy: str) -> dict[str, Any]:
    """One seed of the learning check under one strategy: cold-start SFT from the tiny base
    model, the held-out evaluation, PARA-GRPO from that SFT model, the held-out evaluation again.

    The videos are always the frame store's, i.e. seed 0's (`ctx.data`): the store holds no other
    seed's videos (a copy per seed would multiply the folder carried to the GPU machine, about
    19 MiB a seed). `seed` is the training seed of both recipes (`sft_recipe(seed=...)`,
    `rl_recipe(seed=...)`: data order, sampling, the gate's draws), as in `miniature.cold_start`,
    but not `make_task_data(seed_offset=seed)`: the seeds share their SFT traces, RL prompts and
    held-out prompts."""
    a = ctx.args
    root = ctx.work / "learning" / f"seed{seed}-{strategy}"
    dist = ctx.dist(strategy)
    sft = sft_recipe(
        root / "sft",
        ctx.model,
        ctx.data,
        seed=seed,
        steps=a.learning_sft_steps,
        extra=[*dist, *a.sft_override],
    )
    t = time.perf_counter()
    sft_final = train_sft(sft, conversations=ctx.sft_conversations(sft))
    t_sft = time.perf_counter() - t
    held_recipe = rl_recipe(
        root / "held", sft_final, ctx.data.held_out, seed=seed, extra=[*dist, *a.override]
    )
    held = load_rl_examples(held_recipe)[: a.eval_prompts]
    frames = ctx.frames(held_recipe.video)
    t = time.perf_counter()
    before = evaluate(sft_final, held_recipe, held, frames)
    t_eval = time.perf_counter() - t
    rl = rl_recipe(
        root / "rl",
        sft_final,
        ctx.data.rl,
        seed=seed,
        steps=a.learning_rl_steps,
        extra=[*dist, *a.override],
    )
    t = time.perf_counter()
    final = train_rl(rl, examples=load_rl_examples(rl), frames=ctx.frames(rl.video))
    t_rl = time.perf_counter() - t
    t = time.perf_counter()
    after = evaluate(final, held_recipe, held, frames)
    t_eval += time.perf_counter() - t
    gains = {k: pooled_gain([(before, after)], k) for k in ("accuracy", "reward")}

    def pair(key: str) -> list[float]:
        return [before.metrics.get(key, math.nan), after.metrics.get(key, math.nan)]

    return {
        "seed": seed,
        "strategy": strategy,
        "sft_steps": sft.max_steps,
        "rl_steps": rl.max_steps,
        "prompts": len(held),
        "group_size": held_recipe.rollout.group_size,
        "accuracy": [before.mean_se("accuracy")[0], after.mean_se("accuracy")[0]],
        "reward": [before.mean_se("reward")[0], after.mean_se("reward")[0]],
        "accuracy_gain": gains["accuracy"].mean,
        "accuracy_gain_se": gains["accuracy"].se,
        "reward_gain": gains["reward"].mean,
        "reward_gain_se": gains["reward"].se,
        "call_attempts": pair("tool/call_attempts"),
        "invalid_calls": pair("tool/invalid_calls"),
        "tool_responses": pair("tool/responses"),
        "tool_use": pair("tool_use_rate"),
        "format_ok": pair("format_ok"),
        "f_tau": pair("f_tau"),
        "format_held": format_held(before.metrics, after.metrics),
        "seconds": {"sft": t_sft, "rl": t_rl, "evaluation": t_eval},
        "before": {"metrics": before.metrics, "per_prompt": before.per_prompt},
        "after": {"metrics": after.metrics, "per_prompt": after.per_prompt},
    }


def seed_line(r: dict[str, Any]) -> str:
    """One seed's numbers in the row's detail, before -> after RL: accuracy, reward, call
    attempts, invalid calls and tool responses per episode, the shared format measure and f_tau.
    A reward that rises while the calls turn invalid is the PARA-GRPO tool reward's known hole
    (it pays 0.1, +0.5 with a right answer, for any call with a tool name, valid or not)."""

    def arrow(key: str, digits: int = 2) -> str:
        b, a = r[key]
        return f"{b:.{digits}f} -> {a:.{digits}f}"

    return (
        f"seed {r['seed']} {r['strategy']}: accuracy {arrow('accuracy', 3)} "
        f"({r['accuracy_gain']:+.3f} ± {r['accuracy_gain_se']:.3f}), reward {arrow('reward', 3)} "
        f"({r['reward_gain']:+.3f} ± {r['reward_gain_se']:.3f}), calls {arrow('call_attempts')} "
        f"(invalid {arrow('invalid_calls')}, tool responses {arrow('tool_responses')}), format ok "
        f"{arrow('format_ok')}, f_tau {arrow('f_tau')}"
        f"{'' if r['format_held'] else ' [format NOT held]'}"
    )


def _child_argv(ctx: Ctx, seed: int, strategy: str, out: Path) -> list[str]:
    """The command line of one learning child: this check's own arguments (the last `--out`
    wins in argparse), run for one (seed, strategy) pair and nothing else."""
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        *ctx.args.argv,
        "--learning-child",
        f"{seed}:{strategy}",
        "--out",
        str(out),
        "--work",
        str(ctx.work),
    ]


def learning_in_children(
    ctx: Ctx, pairs: Sequence[tuple[int, str]]
) -> tuple[list[dict[str, Any]], str, float]:
    """`--learning-jobs` > 1: every (seed, strategy) pair in a process of its own, J at a time.

    For a CPU with many cores, where a tiny model's seed uses few of them well; each child gets
    an equal share of the CPU threads. Not for one GPU: there seeds side by side were slower than
    one after another (`main` refuses it; bench/results/gpu_check_h200_2.json). A child that is still running when the check's
    budget is spent is killed and named; a child that fails is named with the end of its log
    (each child writes `<work>/learning/children/<seed>-<strategy>/log.txt`). Returns the runs
    in the order of `pairs`, what did not finish, and the slowest child's seconds."""
    a = ctx.args
    jobs = min(a.learning_jobs, len(pairs))
    threads = max(1, (os.cpu_count() or 1) // jobs)
    # each child starts its own group of one: this process's group variables (set by an earlier
    # row's init_distributed) would make them all bind the same MASTER_PORT
    group_vars = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE")
    env = {k: v for k, v in os.environ.items() if k not in group_vars}
    env |= {"OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    deadline = ctx.t0 + a.budget_s
    waiting = list(pairs)
    running: dict[tuple[int, str], tuple[Any, Path, float, Any]] = {}
    done: dict[tuple[int, str], dict[str, Any]] = {}
    problems: list[str] = []
    slowest = 0.0
    while waiting or running:
        while waiting and len(running) < jobs and time.monotonic() < deadline:
            seed, strategy = pair = waiting.pop(0)
            out = ctx.work / "learning" / "children" / f"{seed}-{strategy}"
            out.mkdir(parents=True, exist_ok=True)
            log = (out / "log.txt").open("w")
            proc = subprocess.Popen(
                _child_argv(ctx, seed, strategy, out), stdout=log, stderr=subprocess.STDOUT, env=env
            )
            running[pair] = (proc, out, time.monotonic(), log)
        if not running:
            break
        time.sleep(1.0)
        for pair, (proc, out, started, log) in list(running.items()):
            if proc.poll() is None and time.monotonic() < deadline:
                continue
            killed = proc.poll() is None
            if killed:
                proc.kill()
                proc.wait()
            log.close()
            del running[pair]
            result = out / "learning_run.json"
            if killed:
                problems.append(f"seed {pair[0]} {pair[1]} killed when the budget was spent")
            elif proc.returncode == 0 and result.exists():
                done[pair] = json.loads(result.read_text())
                slowest = max(slowest, time.monotonic() - started)
                print(f"  learning, {seed_line(done[pair])}", flush=True)
                # kept as the children finish: a lease that ends mid-row still has them
                ordered = [done[p] for p in pairs if p in done]
                (ctx.out / "learning_runs.json").write_text(
                    json.dumps(ordered, indent=1, default=str)
                )
            else:
                tail = (out / "log.txt").read_text(errors="replace").strip().splitlines()[-3:]
                problems.append(
                    f"seed {pair[0]} {pair[1]} failed (exit {proc.returncode}, log {out}/log.txt): "
                    + " | ".join(line.strip()[:200] for line in tail)
                )
    if waiting:
        problems.append(
            "not started, the budget spent: " + ", ".join(f"seed {s} {st}" for s, st in waiting)
        )
    return [done[p] for p in pairs if p in done], "; ".join(problems), slowest


def row_learning(ctx: Ctx) -> Row:
    """The learning check over `--learning-seeds` seeds (0..N-1), each under every strategy of
    `--learning-strategy`, each its own cold start + PARA-GRPO (`learning_run`: the seeds share
    seed 0's videos, only the training seed differs). A seed is started only while the budget
    left (`--budget-s` from the check's start) fits the first seed's measured time. The verdict,
    per strategy: `learned` on the accuracy and reward gains pooled over the seeds that ran
    (the learning test's margins and standard errors; the seeds share their held-out prompts, so
    each prompt counts once per seed) and `format_held` for every seed."""
    a = ctx.args
    full = a.learning_sft_steps >= 500 and a.learning_rl_steps >= 32
    name = "learning" if full else "learning (rehearsal)"
    strategies = LEARNING_STRATEGIES[a.learning_strategy]
    runs: list[dict[str, Any]] = []
    stopped = ""
    per_seed = math.nan
    t_row = time.monotonic()
    pairs = [(seed, strategy) for seed in range(a.learning_seeds) for strategy in strategies]
    if a.learning_jobs > 1:
        runs, stopped, per_seed = learning_in_children(ctx, pairs)
    for seed in range(a.learning_seeds if a.learning_jobs == 1 else 0):
        left = a.budget_s - (time.monotonic() - ctx.t0)
        if seed > 0 and left < per_seed:
            stopped = (
                f"seeds {seed}..{a.learning_seeds - 1} not started: {left:.0f} s of the budget "
                f"left, a seed took {per_seed:.0f} s"
            )
            break
        t = time.monotonic()
        for strategy in strategies:
            runs.append(learning_run(ctx, seed, strategy))
            print(f"  learning, {seed_line(runs[-1])}", flush=True)
            # kept as the seeds finish: a lease that ends mid-row still has them
            (ctx.out / "learning_runs.json").write_text(json.dumps(runs, indent=1, default=str))
            free_memory(ctx.device)
        if seed == 0:
            per_seed = time.monotonic() - t
    if not runs:
        raise Fail(f"no seed finished: {stopped}")
    seeds = sorted({r["seed"] for r in runs})
    pooled: dict[str, Any] = {}
    for strategy in strategies:
        mine = [r for r in runs if r["strategy"] == strategy]
        pairs = [
            (
                Evaluation(r["before"]["metrics"], r["before"]["per_prompt"]),
                Evaluation(r["after"]["metrics"], r["after"]["per_prompt"]),
            )
            for r in mine
        ]
        gains = {k: pooled_gain(pairs, k) for k in ("accuracy", "reward")}
        held = all(r["format_held"] for r in mine)
        pooled[strategy] = {
            **{k: {"mean": g.mean, "se": g.se, "z": g.z, "n": g.n} for k, g in gains.items()},
            "learned": learned(gains),
            "format_held": held,
            "pass": learned(gains) and held,
            "text": f"{strategy} pooled over {len(mine)} seed(s): {gains['accuracy']}, "
            f"{gains['reward']}; learned {'yes' if learned(gains) else 'NO'}, format held on "
            f"{sum(r['format_held'] for r in mine)} of {len(mine)} seeds",
        }
    margins = (
        f"margins: pooled accuracy +{ACCURACY_MARGIN:g} and {ACCURACY_Z:g} SE, reward "
        f"+{REWARD_MARGIN:g} and {REWARD_Z:g} SE; per seed invalid calls <= {INVALID_CALLS_MAX:g} "
        f"an episode and format ok down <= {FORMAT_OK_DROP_MAX:g}"
    )
    if full:
        ok = all(p["pass"] for p in pooled.values())
        verdict = f"{'learned' if ok else 'NOT learned'} ({margins})"
        status = "PASS" if ok else "FAIL"
    else:
        verdict = "a rehearsal of the pipeline with too few steps: not a verdict"
        status = "PASS"
    first = runs[0]
    data = {
        "seeds_requested": a.learning_seeds,
        "seeds_run": seeds,
        "stopped": stopped or None,
        "strategies": list(strategies),
        "jobs": a.learning_jobs,
        "per_seed_s": per_seed,
        "row_wall_s": time.monotonic() - t_row,
        "videos": "seed 0's for every seed (the frame store's); the seeds differ in training seed",
        "prompts": first["prompts"],
        "group_size": first["group_size"],
        "pooled": pooled,
        "runs": runs,
    }
    detail = (
        f"{len(seeds)} of {a.learning_seeds} seeds ({stopped or 'all ran'}), "
        f"{'/'.join(strategies)} on {ctx.device.type}"
        f"{f', {a.learning_jobs} at a time in processes of their own' if a.learning_jobs > 1 else ''}"
        f" ({time.monotonic() - t_row:.0f} s), every seed on seed 0's videos (training "
        f"seed only); SFT {first['sft_steps']} steps, PARA-GRPO {first['rl_steps']} steps, "
        f"held-out {first['prompts']} prompts x {first['group_size']}; "
        + "; ".join(seed_line(r) for r in runs)
        + "; "
        + "; ".join(p["text"] for p in pooled.values())
        + f"; {verdict}"
    )
    return Row(name, status, detail, data=data)


def load_throughput_sweep() -> Any:
    """tools/throughput_sweep.py (beside this file) as a module."""
    import importlib.util

    if "throughput_sweep" in sys.modules:
        return sys.modules["throughput_sweep"]
    path = Path(__file__).resolve().parent / "throughput_sweep.py"
    spec = importlib.util.spec_from_file_location("throughput_sweep", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["throughput_sweep"] = module
    spec.loader.exec_module(module)
    return module


def row_throughput(ctx: Ctx) -> Row:
    """The throughput sweep (tools/throughput_sweep.py) on `--throughput-shapes`, within what is
    left of `--budget-s` and at most `--throughput-budget-s`."""
    a, dev = ctx.args, ctx.device
    sweep = load_throughput_sweep()
    shapes = sweep.parse_list(a.throughput_shapes) or (
        ["2b", "8b"] if dev.type == "cuda" else ["tiny"]
    )
    layers = [int(x) for x in sweep.parse_list(a.throughput_8b_layers) or []]
    names = [
        *(sweep.parse_list(a.throughput_configs) or []),
        *(sweep.parse_list(a.throughput_8b_configs) or []),
    ]
    unknown = [n for n in names if n not in sweep.CONFIG_NAMES]
    if unknown:
        raise Fail(f"unknown throughput configurations {unknown}; of {sweep.CONFIG_NAMES}")
    if len(set(layers)) != 2:
        raise Fail("--throughput-8b-layers takes two different depths, e.g. 3,6")
    left = a.budget_s - (time.monotonic() - ctx.t0)
    budget = max(min(a.throughput_budget_s, left), 0.0)
    report = sweep.sweep(
        sys.modules[__name__],
        tiny=ctx.model,
        device=dev,
        out=ctx.work / "throughput",
        shapes=shapes,
        configs=sweep.parse_list(a.throughput_configs),
        configs_8b=sweep.parse_list(a.throughput_8b_configs),
        layers_8b=layers,
        steps=a.throughput_steps,
        budget_s=budget,
        peak=peak_flops(dev, a.peak_tflops),
        compile_on_cpu=a.throughput_compile_on_cpu,
        progress=lambda text: print(f"  throughput {text}", flush=True),
    )
    ok, problems = sweep.complete(report)
    report["complete"], report["problems"] = ok, problems
    ran = sum(
        e.get("status") in ("ok", "OOM")
        for s in report["shapes"].values()
        for e in s["configs"].values()
    )
    listed = sum(len(s["configs"]) for s in report["shapes"].values())
    head = (
        f"{ran} of {listed} configurations measured on {', '.join(shapes)} in "
        f"{report['seconds']:.0f} s (budget {budget:.0f} s; MFU by the real-size row's FLOP "
        f"count{'' if report['peak_flops'] else ', n/a here'}): "
    )
    tail = f" PROBLEMS: {'; '.join(problems)}" if problems else ""
    return Row(
        f"throughput ({'/'.join(shapes)})",
        "PASS" if ok else "FAIL",
        head + " | ".join(sweep.summary(report)) + tail,
        data=report,
    )


ROWS: dict[str, Callable[[Ctx], Row]] = {
    "env": row_env,
    "frames": row_frames,
    "sft": row_sft,
    "rl": row_rl,
    "logprob": row_logprob,
    "placement": row_placement,
    "real-size": row_real_size,
    "learning": row_learning,
    "throughput": row_throughput,
}


def run_row(ctx: Ctx, name: str, report: Report) -> None:
    t = time.monotonic()
    if name in ctx.args.skip:
        report.add(Row(name, "SKIP", "--skip", 0.0))
        return
    spent = t - ctx.t0
    if spent > ctx.args.budget_s:
        report.add(
            Row(name, "SKIP", f"the budget ({ctx.args.budget_s:.0f} s) is spent: {spent:.0f} s")
        )
        return
    try:
        row = ROWS[name](ctx)
    except Exception as exc:  # a failing row must not hide the others
        trace = ctx.out / f"{name}.traceback.txt"
        trace.write_text(traceback.format_exc())
        first = str(exc).strip().splitlines()[0][:400] if str(exc).strip() else ""
        kind = "" if isinstance(exc, Fail) else f"{type(exc).__name__}: "
        row = Row(name, "FAIL", f"{kind}{first} (traceback: {trace})")
    finally:
        free_memory(ctx.device)
    row.seconds = time.monotonic() - t
    report.add(row)


# --------------------------------------------------------------------------------------------------
# Command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add(
        "--device",
        choices=["cuda", "cpu"],
        default="cuda",
        help="where the trainers run; cpu is the rehearsal of this script (default: cuda)",
    )
    add(
        "--size",
        choices=["tiny", "2b"],
        default=None,
        help="the real-size row's model: 2b (Qwen3-VL-2B's shape) or tiny "
        "(default: 2b on cuda, tiny on cpu)",
    )
    add(
        "--data",
        type=Path,
        default=Path("runs/gpu_check_data"),
        help="the task's videos, rows, frames and tiny model; prepared here first when it has "
        "none and torchcodec works (default: runs/gpu_check_data)",
    )
    add(
        "--predecode-only",
        action="store_true",
        help="prepare --data (needs torchcodec + FFmpeg) and stop: run this before the GPU run",
    )
    add(
        "--videos",
        type=int,
        default=None,
        help="videos per task set when preparing --data (default: the miniature's 96/32/32)",
    )
    add(
        "--out",
        type=Path,
        default=Path("runs/gpu_check"),
        help="report.json, report.md and tracebacks (default: runs/gpu_check)",
    )
    add(
        "--work",
        type=Path,
        default=None,
        help="where the trainers write their runs (default: <out>/work)",
    )
    add(
        "--budget-s",
        type=float,
        default=480.0,
        help="rows that would start later than this are SKIPped, and the learning row starts "
        "no further seed when what is left cannot fit its first seed's time (default: 480)",
    )
    add("--sft-steps", type=int, default=20, help="steps of the sft row (default: 20)")
    add("--rl-steps", type=int, default=3, help="steps of the rl row (default: 3)")
    add(
        "--real-steps",
        type=int,
        default=3,
        help="steps of each real-size step kind, the first a warm-up (default: 3)",
    )
    add(
        "--learning-sft-steps",
        type=int,
        default=500,
        help="cold-start SFT steps of the learning row (default: 500, the learning test's)",
    )
    add(
        "--learning-rl-steps",
        type=int,
        default=32,
        help="PARA-GRPO steps of the learning row (default: 32, the learning test's)",
    )
    add(
        "--learning-seeds",
        type=int,
        default=3,
        help="seeds 0..N-1 of the learning row, each its own cold start + PARA-GRPO on the frame "
        "store's videos (seed 0's; the seeds differ in training seed only); a seed is not started "
        "when the budget left cannot fit the first seed's measured time (default: 3)",
    )
    add(
        "--learning-strategy",
        choices=list(LEARNING_STRATEGIES),
        default="fsdp2",
        help="fsdp2: fp32 master weights, bf16 compute (the 8B recipes); none: the miniature's "
        "own setting, bf16 weights on a GPU; both: every seed under each, judged per strategy "
        "(default: fsdp2)",
    )
    add(
        "--learning-jobs",
        type=int,
        default=1,
        help="learning runs (seed x strategy) at a time, each in a process of its own with an "
        "equal share of the CPU threads: for a CPU with many cores (--device cpu). Refused on cuda: "
        "on one H200 (no MPS) 2 seeds side by side had not finished after 240 s where one alone "
        "takes 155 s (bench/results/gpu_check_h200_2.json) (default: 1, one after another in this "
        "process)",
    )
    add("--learning-child", default=None, help=argparse.SUPPRESS)  # SEED:STRATEGY, internal
    add(
        "--eval-prompts",
        type=int,
        default=None,
        help="held-out prompts of the learning row (default: all)",
    )
    add(
        "--override",
        action="append",
        default=[],
        help="recipe override for every RL run, e.g. rollout.group_size=2 (repeatable)",
    )
    add(
        "--sft-override",
        action="append",
        default=[],
        help="recipe override for every SFT run, e.g. sft.num_workers=0 (repeatable)",
    )
    add(
        "--logprob-max-tol",
        type=float,
        default=None,
        help="largest |rollout - trainer| log-prob accepted (default: ln 5 in bf16, the "
        "decoupled loss's behaviour-weight cap; 1e-3 in fp32)",
    )
    add(
        "--logprob-mean-tol",
        type=float,
        default=None,
        help="largest mean |rollout - trainer| log-prob accepted (default: 0.05 bf16, 1e-4 fp32)",
    )
    add(
        "--peak-tflops",
        type=float,
        default=None,
        help="the GPU's dense bf16 peak for MFU (default: known for H100/H200/A100/B200)",
    )
    add(
        "--skip",
        action="append",
        default=[],
        choices=list(ROWS),
        help="leave a row out (repeatable)",
    )
    add(
        "--throughput-budget-s",
        type=float,
        default=300.0,
        help="the throughput row's own budget, within what --budget-s leaves: no configuration "
        "starts when it would pass it (default: 300)",
    )
    load_throughput_sweep().add_options(parser, prefix="throughput-")
    add("--verbose", action="store_true", help="the trainers' INFO logs")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.learning_seeds < 1:
        parser.error("--learning-seeds must be at least 1")
    if args.learning_jobs < 1:
        parser.error("--learning-jobs must be at least 1")
    if args.learning_jobs > 1 and args.device == "cuda" and not args.learning_child:
        parser.error(
            "--learning-jobs > 1 runs seeds side by side, which on one GPU is slower than one after "
            "another (H200, no MPS: 2 side by side unfinished after 240 s, one alone 155 s; "
            "bench/results/gpu_check_h200_2.json): leave it at 1 on cuda"
        )
    args.argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(message)s",
    )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not args.verbose:
        import transformers

        transformers.utils.logging.disable_progress_bar()
    args.size = args.size or ("2b" if args.device == "cuda" else "tiny")
    data = args.data.resolve()
    if not (data / DATA_MANIFEST).is_file():
        try:
            import torchcodec  # noqa: F401
        except (ImportError, OSError, RuntimeError) as exc:
            print(
                f"{data} holds no prepared frames and torchcodec does not load here ({exc}); run "
                f"`python tools/gpu_check.py --predecode-only --data {args.data}` where it does "
                "and carry the folder",
                file=sys.stderr,
            )
            return 2
        t = time.monotonic()
        manifest = prepare_data(data, args.videos)
        print(
            f"prepared {data} in {time.monotonic() - t:.0f} s: {json.dumps(manifest['store'])}; "
            f"{folder_mib(data):.1f} MiB to carry",
            flush=True,
        )
    if args.predecode_only:
        return 0
    args.torchcodec_state = block_torchcodec()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    work = (args.work or out / "work").resolve()
    data_sets, store = prepared_task_sets(data), FrameStore(data)
    ctx = Ctx(args, device, out, work, data, data_sets, store, data / "model", time.monotonic())
    if args.learning_child:  # one seed of the learning row, in its own process
        seed, strategy = args.learning_child.split(":")
        run = learning_run(ctx, int(seed), strategy)
        (out / "learning_run.json").write_text(json.dumps(run, indent=1, default=str))
        return 0
    report = Report()
    head = f"# tools/gpu_check.py on {args.device} ({time.strftime('%Y-%m-%d %H:%M')})\n\n"
    for name in ROWS:
        run_row(ctx, name, report)
        # written after every row, so that a lease that ends mid-check keeps the rows it ran
        (out / "report.json").write_text(
            json.dumps([r.__dict__ for r in report.rows], indent=1, default=str)
        )
        (out / "report.md").write_text(head + report.markdown() + "\n")
        if name == "env" and report.rows[-1].status == "FAIL":
            break  # no usable device: every other row would fail the same way
    print()
    print(report.table())
    return 1 if any(r.status == "FAIL" for r in report.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
