"""`rollout.engine: sglang_server` and `vllm_server`: rollouts on inference servers over HTTP
(`paravt.core.engines`' clients), weights pushed by trainer rank 0 after every optimiser step as
version `step-<n>`, and optionally verified.

What both share (`ServerEngine`): every rank gathers the full state bucket by bucket (collective),
rank 0 hands it to the client's weight push (`paravt.core.engines.ServerWeights`: a checkpoint on
disk that every server loads), all ranks meet at a barrier and then expect the new version; the
check compares the servers' log-probs of a fixed sequence with the policy's own. SGLang adds the
push over an NCCL weight-update group, colocated servers that free their memory during the update,
and asynchronous rollouts that may carry the versions before the last push (its replies say which
weights produced them). vLLM's do not: asynchronous, its client keeps every request off the
servers while they reload, so each reply has the one version it was sent under.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from paravt.core.engines import SGLangServerEngine, VLLMServerEngine
from paravt.train.engine_checks import ServerChecks, SGLangChecks, VLLMChecks
from paravt.train.modeling import Sequence_, collate, token_logprobs
from paravt.train.process_group import all_reduce_sum
from paravt.train.ranks import barrier, is_rank0
from paravt.train.rl.engines.base import (
    WEIGHT_BUCKET_BYTES,
    Bucket,
    EngineContext,
    RolloutEngine,
    WeightCheck,
)

PROBE = "<|im_start|>user\nWhat colour is the square?<|im_end|>\n<|im_start|>assistant\n"


def _pairs(buckets: Iterable[Bucket]) -> Iterator[tuple[str, torch.Tensor]]:
    return (item for bucket in buckets for item in bucket)


class ServerEngine(ServerChecks, RolloutEngine):
    """Rollout servers behind a core client with the `ServerWeights` interface; the recipe's
    `rollout.server` section configures them (its rules: `ServerChecks`)."""

    def __init__(self, engine: Any, ctx: EngineContext) -> None:
        self.engine = engine
        self.spec = ctx.recipe.rollout.server
        self.max_staleness = ctx.recipe.rollout.max_staleness
        self.backend = ctx.backend
        self.device = ctx.device
        self.model_path = ctx.model_path
        self.weight_dir = Path(
            self.spec.weight_dir or Path(ctx.recipe.output_dir) / "rollout_weights"
        )
        self.sync_hint = (
            "check the server's log for its weight load (with weight_sync=disk it must read "
            f"{self.weight_dir} under the same path; rollout.server.verify_sync_tolerance="
            f"{self.spec.verify_sync_tolerance:g})"
        )

    @classmethod
    def client_options(cls, ctx: EngineContext) -> dict[str, Any]:
        """The client settings both kinds take from `rollout.server`."""
        spec = ctx.recipe.rollout.server
        return {
            "weight_urls": spec.weight_urls,
            "timeout_s": spec.timeout_s,
            "max_in_flight": spec.max_in_flight,
            "retries": spec.retries,
        }

    @property
    def bucket_device(self) -> torch.device | str | None:
        return "cpu"

    def load_weights(self, buckets: Iterable[Bucket], version: str) -> None:
        """Rank 0 pushes (`_push`), the other ranks only take part in the gather; then every rank
        expects `version`."""
        if is_rank0():
            self._push(_pairs(buckets), version)
        else:
            for _ in buckets:  # the gather is collective: every rank iterates to the end
                pass
        barrier()
        self.engine.expected_weight_version = version

    def _push(self, named: Iterator[tuple[str, torch.Tensor]], version: str) -> None:
        self._push_from_disk(named, version)

    def _push_from_disk(
        self, named: Iterator[tuple[str, torch.Tensor]], version: str, pause: str | None = None
    ) -> None:
        """A checkpoint under `weight_dir/<version>/` that every server loads; only the version
        the servers hold stays on disk."""
        configs = [
            self.model_path / f
            for f in ("config.json", "generation_config.json")
            if (self.model_path / f).is_file()
        ]
        target = self.engine.push_weights_from_disk(
            named, self.weight_dir, version, config_files=configs, pause=pause
        )
        for old in self.weight_dir.iterdir():
            if old != target and old.name.startswith("step-"):
                shutil.rmtree(old, ignore_errors=True)

    def verify(self, version: str) -> WeightCheck | None:
        """With `rollout.server.verify_sync`: every rank runs the policy's forward pass over a
        fixed sequence, rank 0 asks the servers (`ServerWeights.check_weights`), and every rank
        gets the verdict (collective)."""
        if not self.spec.verify_sync:
            return None
        ids = list(self.engine.tokenizer(PROBE, add_special_tokens=False)["input_ids"])
        seq = Sequence_(ids, [1] * len(ids), [], [0.0] * len(ids), [0.0] * len(ids))
        batch = collate(
            [seq],
            pad_id=self.engine.pad_token_id,
            image_token_id=self.engine.image_token_id,
            device=self.device,
        )
        with torch.no_grad():
            mine = token_logprobs(self.backend.forward_module(), batch)[0, 1:].float().cpu()
        diff, problem = 0.0, ""
        if is_rank0():
            diff, problem = self.engine.check_weights(
                version, ids, mine.tolist(), tolerance=self.spec.verify_sync_tolerance
            )
        diff, failed = all_reduce_sum([diff, float(bool(problem))])
        if failed and not problem:
            problem = (
                "trainer rank 0 found a rollout server without the pushed weights (see its log)"
            )
        return WeightCheck(diff, problem)

    def metrics(self) -> dict[str, float]:
        """Prompts a server tokenized otherwise than the trainer scores them (so far)."""
        return {"rollout/prompt_token_mismatches": float(self.engine.prompt_token_mismatches)}


class SGLangServers(SGLangChecks, ServerEngine):
    """SGLang servers (`SGLangServerEngine`): weights from disk (`/update_weights_from_disk`) or
    over an NCCL weight-update group; colocated servers (`rollout.server.colocate`) give their
    GPU memory to the update; with `rollout.max_staleness` N a reply may come from the N versions
    before the last push, or from the one being pushed (announced before the push)."""

    engine: SGLangServerEngine

    def __init__(self, engine: SGLangServerEngine, ctx: EngineContext) -> None:
        super().__init__(engine, ctx)
        self.weight_group: Any = None

    @classmethod
    def build(cls, ctx: EngineContext) -> SGLangServers:
        spec, staleness = ctx.recipe.rollout.server, ctx.recipe.rollout.max_staleness
        engine = SGLangServerEngine(
            spec.urls,
            ctx.processor,
            connect_timeout_s=spec.connect_timeout_s,
            backoff_s=spec.backoff_s,
            stale_versions=staleness + 1 if staleness else 0,
            stall_warn_s=spec.stall_warn_s,
            stall_dead_s=spec.stall_dead_s,
            **cls.client_options(ctx),
        )
        engine.health()  # every rank: fail fast, naming the servers that do not answer
        return cls(engine, ctx)

    @property
    def bucket_device(self) -> torch.device | str | None:
        return self.device if self.spec.weight_sync == "distributed" else "cpu"

    def before_update(self) -> None:
        if self.spec.colocate and is_rank0():
            self.engine.release_memory()

    def load_weights(self, buckets: Iterable[Bucket], version: str) -> None:
        # Asynchronous training: every rank announces the version before rank 0 can push it (the
        # gather is collective), so a reply generated with it in the meantime is expected.
        if self.max_staleness:
            self.engine.expected_weight_version = version
        super().load_weights(buckets, version)

    def _push(self, named: Iterator[tuple[str, torch.Tensor]], version: str) -> None:
        # Rollouts in flight (asynchronous training): the servers pause around the load so it
        # does not wait for them (pause_mode 'drain': it does, SGLang's default).
        spec = self.spec
        pause = spec.pause_mode if self.max_staleness and spec.pause_mode != "drain" else None
        if spec.colocate:
            self.engine.resume_memory()
        if spec.weight_sync != "distributed":
            self._push_from_disk(named, version, pause)
            return
        if self.weight_group is None:
            self.weight_group = self.engine.init_weight_update_group(
                spec.master_address, spec.master_port, server_ranks=spec.server_ranks
            )
        self.engine.push_weights_distributed(
            named, version, self.weight_group, bucket_bytes=WEIGHT_BUCKET_BYTES, pause=pause
        )


class VLLMServers(VLLMChecks, ServerEngine):
    """vLLM servers (`VLLMServerEngine`): every server reloads each version from disk
    (`check_spec` refuses distributed sync and colocation). With `rollout.max_staleness` N the
    servers generate later steps while the trainer trains: a vLLM chat reply says nothing of the
    weights that produced it, so the client tracks them (`VLLMServerEngine.gate`): a reload waits
    for every rank's requests in flight and holds new ones back until it is done, so every reply
    comes from the one version it was sent under (explicit `pause_mode` retract / in_place, which
    would let requests run across a reload, are refused)."""

    engine: VLLMServerEngine

    def __init__(self, engine: VLLMServerEngine, ctx: EngineContext) -> None:
        super().__init__(engine, ctx)
        self.drain_s = 0.0  # this rank's wait for its requests in flight before the last reload

    @classmethod
    def build(cls, ctx: EngineContext) -> VLLMServers:
        engine = VLLMServerEngine(
            ctx.recipe.rollout.server.urls, ctx.processor, **cls.client_options(ctx)
        )
        # every rank (no rank may go on to the weight push's collectives while another stops):
        # fail fast naming a server that does not answer, or that returns log-probs of another
        # distribution than the one it samples (the ratio needs the sampled one's)
        engine.health()
        engine.check_logprobs_mode()
        return cls(engine, ctx)

    def load_weights(self, buckets: Iterable[Bucket], version: str) -> None:
        """As every server engine; asynchronous, no rank has a request at a server while rank 0
        reloads: the other ranks hold theirs back (and wait for those in flight) before the
        gather, rank 0 its own inside the reload, after writing the checkpoint."""
        if not self.max_staleness:
            super().load_weights(buckets, version)
            return
        held = not is_rank0()
        if held:
            self.drain_s = self.engine.hold_requests()
        before = self.engine.gate.waited_s
        try:
            barrier()  # every rank has drained before rank 0 can reload
            super().load_weights(buckets, version)
        except BaseException as exc:
            if held:
                self.engine.release_requests(
                    None, failed=f"the push of {version!r} failed: {exc!r}"
                )
            raise
        if held:
            self.engine.release_requests(version)
        else:
            self.drain_s = self.engine.gate.waited_s - before

    def metrics(self) -> dict[str, float]:
        """The server engine's, and the time this rank's last reload waited for its requests in
        flight (`sync/drain_s`, asynchronous only: the cost of knowing each reply's weights)."""
        out = super().metrics()
        if self.max_staleness:
            out["sync/drain_s"] = self.drain_s
        return out
