"""Device placement of the distributed code, without a GPU: which device a collective's tensors go
to for a backend (NCCL included), that every collective helper uses it, and that a process binds
its GPU before the process group starts. (The torchrun rehearsal in test_distributed.py runs on
gloo/CPU and cannot show these: this is where they are tested.)"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist

from paravt.train import distributed as D
from paravt.train import process_group as PG
from paravt.train.modeling import Sequence_, balance_micro_batches
from paravt.train.recipe import DistributedSpec


def test_device_for_backend_puts_nccl_collectives_on_the_local_gpu_and_gloo_on_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert PG.device_for_backend("nccl", local_rank=3) == torch.device("cuda", 3)
    assert PG.device_for_backend("gloo", local_rank=3) == torch.device("cpu")
    # a mixed group routes CPU tensors to gloo
    assert PG.device_for_backend("cpu:gloo,cuda:nccl", local_rank=3) == torch.device("cpu")
    monkeypatch.setenv("LOCAL_RANK", "5")
    assert PG.device_for_backend("nccl") == torch.device("cuda", 5)


def test_collective_device_follows_the_process_group_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    assert PG.collective_device() == torch.device("cuda", 2)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "gloo")
    assert PG.collective_device() == torch.device("cpu")


class _Reached(Exception):
    pass


@pytest.mark.parametrize("helper", ["mean", "sum", "max", "gather"])
def test_every_collective_helper_puts_its_tensors_on_the_collective_device(
    monkeypatch: pytest.MonkeyPatch, helper: str
) -> None:
    """`meta` stands for a device other than the CPU (a GPU under NCCL): a helper that builds its
    tensor on the CPU, whatever the backend, fails here."""
    seen: list[torch.device] = []

    def record(tensor: Any, *args: Any, **kwargs: Any) -> None:
        t = tensor if isinstance(tensor, torch.Tensor) else args[0]
        seen.append(t.device)
        raise _Reached

    monkeypatch.setattr(PG, "_world", lambda: 2)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(PG, "collective_device", lambda group=None: torch.device("meta"))
    monkeypatch.setattr(dist, "all_reduce", record)
    monkeypatch.setattr(dist, "all_gather", lambda out, t, *a, **k: record(t))
    with pytest.raises(_Reached):
        if helper == "mean":
            PG.all_reduce_mean({"a": 1.0})
        elif helper == "sum":
            PG.all_reduce_sum([1.0, 2.0])
        elif helper == "max":
            PG.all_reduce_max_int(3)
        else:
            monkeypatch.setattr(PG, "all_reduce_max_int", lambda n: 3)
            PG.all_gather_floats([1.0, 2.0])
    assert seen == [torch.device("meta")]


def test_init_distributed_binds_the_local_gpu_before_the_nccl_group_and_passes_device_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, Any]] = []
    state = {"init": False}

    def init_group(backend: str, **kwargs: Any) -> None:
        calls.append(("init_process_group", (backend, kwargs.get("device_id"))))
        state["init"] = True

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append(("set_device", d)))
    monkeypatch.setattr(dist, "init_process_group", init_group)
    monkeypatch.setattr(dist, "is_initialized", lambda: state["init"])
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    device = torch.device("cuda", 1)  # what pick_device gives LOCAL_RANK 1
    spec = DistributedSpec(strategy="fsdp2", backend="auto", timeout_s=60)
    assert PG.init_distributed(spec, device) == (1, 2)
    assert calls == [
        ("set_device", torch.device("cuda", 1)),
        ("init_process_group", ("nccl", torch.device("cuda", 1))),
    ]


def test_gloo_groups_get_no_device_id_and_cpu_processes_bind_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[Any] = []
    state = {"init": False}

    def init_group(backend: str, **kwargs: Any) -> None:
        calls.append((backend, kwargs))
        state["init"] = True

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append(("set_device", d)))
    monkeypatch.setattr(dist, "init_process_group", init_group)
    monkeypatch.setattr(dist, "is_initialized", lambda: state["init"])
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    PG.init_distributed(DistributedSpec(strategy="fsdp2", timeout_s=7), torch.device("cpu"))
    assert len(calls) == 1 and calls[0][0] == "gloo" and "device_id" not in calls[0][1]
    assert calls[0][1]["timeout"].total_seconds() == 7


def test_nccl_without_a_gpu_is_an_error_that_names_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    with pytest.raises(RuntimeError, match=r"distributed\.device=cuda"):
        PG.init_distributed(DistributedSpec(strategy="fsdp2", backend="nccl"), torch.device("cpu"))


def test_a_torchrun_launch_with_strategy_none_is_refused_naming_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    groups: list[str] = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: groups.append(backend))
    with pytest.raises(RuntimeError, match=r"WORLD_SIZE=2.*distributed\.strategy=fsdp2"):
        PG.init_distributed(DistributedSpec(strategy="none"), torch.device("cpu"))
    assert groups == []  # refused before any process group starts
    monkeypatch.setenv("WORLD_SIZE", "1")  # one process with strategy none is the normal case
    assert PG.init_distributed(DistributedSpec(strategy="none"), torch.device("cpu")) == (0, 1)


def _seq(media: bool) -> Sequence_:
    return Sequence_([1, 2, 3], [0, 1, 1], ["img"] if media else [])


def test_micro_batches_are_padded_to_the_ranks_maximum_and_each_runs_the_vision_tower(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import paravt.train.modeling as modeling

    filler = _seq(True)
    filler.mask = [0, 0, 0]
    monkeypatch.setattr(modeling, "all_reduce_max_int", lambda n: 3)
    # a rank with no rows at all still runs three (zero-loss) passes
    assert balance_micro_batches([], filler, world=2) == [[filler]] * 3
    text_only = [_seq(False)]
    with_image = [_seq(True)]
    out = balance_micro_batches([text_only, with_image], filler, world=2)
    assert len(out) == 3
    assert out[0] == [*text_only, filler] and out[1] == with_image and out[2] == [filler]
    assert balance_micro_batches([text_only], filler, world=1) == [text_only]  # one process


def test_fsdp2_mixed_precision_computes_in_bf16_and_reduces_in_fp32() -> None:
    mp = D.fsdp_mixed_precision(torch.bfloat16)
    assert mp.param_dtype == torch.bfloat16 and mp.reduce_dtype == torch.float32
    assert D.fsdp_mixed_precision(torch.float32) is None


def test_full_state_comes_in_buckets_of_bounded_size_and_rank0_keeps_the_checkpoint_copy() -> None:
    from paravt.train.recipe import OptimSpec

    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(6)])  # 16.6 KB each
    backend = D.Backend(model, DistributedSpec(), OptimSpec(lr=1e-3), total_steps=1)
    buckets = list(backend.iter_full_state(bucket_bytes=40_000))
    sizes = [sum(t.numel() * t.element_size() for _, t in b) for b in buckets]
    assert len(buckets) > 1 and max(sizes) <= 40_000
    names = [n for b in buckets for n, _ in b]
    assert names == list(model.state_dict())
    state = backend.full_model_state()
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert all(t.device.type == "cpu" for t in state.values())
