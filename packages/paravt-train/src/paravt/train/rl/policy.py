"""The policy engine: the rollout engine of a run (in-process, SGLang or vLLM servers) and how it
follows the policy's weights (pushes, versions, the log-prob check of a sync)."""

from __future__ import annotations

import logging
import math
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from paravt.core.engines import HFEngine
from paravt.train.distributed import Backend, all_reduce_sum
from paravt.train.modeling import (
    Sequence_,
    collate,
    token_logprobs,
)
from paravt.train.ranks import barrier, is_rank0
from paravt.train.recipe import RLRecipe

log = logging.getLogger("paravt.train")


class WeightSyncError(RuntimeError):
    """The rollout servers do not hold the weights the trainer pushed, even after a second push
    (the message names the server, the expected and the served weight version)."""


class PolicyEngine:
    """The rollout engine of a run and how it follows the policy's weights.

    The seam for other engines: `_build` makes the engine, `sync` pushes weights after each
    optimiser step through `_push(bucket)`.

    - hf, one process or DeepSpeed ZeRO-2: `HFEngine` holding the policy module itself (shared
      weights: every optimiser step is seen by the next rollout; nothing to sync);
    - hf under FSDP2 / ZeRO-3: `HFEngine` on an unsharded inference replica (generation cannot
      run on the sharded module: ranks generate different numbers of tokens), refreshed bucket by
      bucket after each step;
    - sglang_server: `paravt.core.engines.sglang_server.SGLangServerEngine` over SGLang servers
      (`rollout.server.urls`); after every optimiser step trainer rank 0 pushes the weights (from
      disk: safetensors shards written bucket by bucket, then `/update_weights_from_disk`; or over
      an NCCL group), every rank waits at a barrier and then expects the new weight version.

    Weights travel as `Backend.iter_full_state` buckets: gathered one tensor at a time, at most
    `WEIGHT_BUCKET_BYTES` at once, never the whole model gathered on one GPU.
    """

    WEIGHT_BUCKET_BYTES = 256 << 20

    def __init__(
        self,
        recipe: RLRecipe,
        backend: Backend,
        processor: Any,
        model_path: Any,
        device: torch.device,
        *,
        step: int = 0,
    ) -> None:
        self.kind = recipe.rollout.engine
        self.served = self.kind in ("sglang_server", "vllm_server")
        self.max_staleness = recipe.rollout.max_staleness
        self.backend = backend
        self.replica: Any = None
        self.step = step
        self.model_path = Path(model_path)
        self.device = device
        self.engine = self._build(recipe, processor, model_path, device)
        if self.served:
            self._sync_server()  # the servers start from the policy (also after a resume)

    def _build(
        self, recipe: RLRecipe, processor: Any, model_path: Any, device: torch.device
    ) -> Any:
        if self.kind == "vllm_server":
            # lazy: the optional extra paravt-train[sglang] (httpx)
            from paravt.core.engines import VLLMServerEngine

            spec = recipe.rollout.server
            self.server = spec
            self.weight_dir = Path(spec.weight_dir or Path(recipe.output_dir) / "rollout_weights")
            vllm_engine = VLLMServerEngine(
                spec.urls,
                processor,
                weight_urls=spec.weight_urls,
                timeout_s=spec.timeout_s,
                max_in_flight=spec.max_in_flight,
                retries=spec.retries,
            )
            # every rank (no rank may go on to the weight push's collectives while another
            # stops): fail fast naming a server that does not answer, or that returns log-probs
            # of another distribution than the one it samples (the ratio needs the sampled one's)
            vllm_engine.health()
            vllm_engine.check_logprobs_mode()
            return vllm_engine
        if self.kind == "sglang_server":
            # lazy: the optional extra paravt-train[sglang] (httpx)
            from paravt.core.engines import SGLangServerEngine

            spec = recipe.rollout.server
            self.server = spec
            # asynchronous: a reply may come from the max_staleness versions before the last push,
            # or from the one being pushed (announced in _sync_server before the push)
            stale_versions = self.max_staleness + 1 if self.max_staleness else 0
            self.weight_dir = Path(spec.weight_dir or Path(recipe.output_dir) / "rollout_weights")
            self.weight_group: Any = None
            engine = SGLangServerEngine(
                spec.urls,
                processor,
                weight_urls=spec.weight_urls,
                timeout_s=spec.timeout_s,
                connect_timeout_s=spec.connect_timeout_s,
                retries=spec.retries,
                backoff_s=spec.backoff_s,
                max_in_flight=spec.max_in_flight,
                stale_versions=stale_versions,
                stall_warn_s=spec.stall_warn_s,
                stall_dead_s=spec.stall_dead_s,
            )
            engine.health()  # every rank: fail fast, naming the servers that do not answer
            return engine

        if not self.backend.sharded:
            return HFEngine(self.backend.model, processor)
        from transformers import AutoModelForImageTextToText

        self.replica = AutoModelForImageTextToText.from_pretrained(
            str(model_path), dtype=self.backend.compute_dtype
        ).to(device)
        self.replica.requires_grad_(False).eval()
        self.sync()
        return HFEngine(self.replica, processor)

    def sync(self) -> dict[str, float]:
        """Make the engine generate with the policy's current weights (collective when the
        policy is sharded: every rank calls it)."""
        if self.served:
            self.step += 1
            return self._sync_server()
        if self.replica is None:
            return {}  # the engine holds the policy module itself
        for bucket in self.backend.iter_full_state(bucket_bytes=self.WEIGHT_BUCKET_BYTES):
            self._push(bucket)
        return {}

    def before_update(self) -> None:
        """Colocated rollout servers (`rollout.server.colocate`) give their GPU memory to the
        update; `sync` takes it back before pushing the new weights."""
        if self.kind == "sglang_server" and self.server.colocate and is_rank0():
            self.engine.release_memory()

    def _sync_server(self) -> dict[str, float]:
        """Push the policy's weights to the servers as version `step-<step>`. With `verify_sync`,
        check that the servers hold them; if not, push once more, and if they still do not, stop
        the run (`WeightSyncError`) rather than train on rollouts of other weights."""
        t0 = time.perf_counter()
        version = f"step-{self.step}"
        self._push_server(version)
        metrics = {"sync/push_s": time.perf_counter() - t0}
        if not self.server.verify_sync:
            return metrics
        diff, problem = self._verify_sync(version)
        if problem:
            log.warning("weight sync: %s; pushing %s again", problem, version)
            self._push_server(version)
            diff, problem = self._verify_sync(version)
            if problem:
                raise WeightSyncError(
                    f"weight sync failed twice: {problem}. The run stops rather than train on "
                    "rollouts of other weights: check the server's log for its weight load (with "
                    f"weight_sync=disk it must read {self.weight_dir} under the same path)"
                )
        metrics["sync/logprob_max_abs_diff"] = diff
        return metrics

    def _push_server(self, version: str) -> None:
        """Every rank gathers the full state bucket by bucket (collective), rank 0 writes or
        broadcasts it and asks the servers to load it as `version`, all ranks meet at a barrier,
        then expect the new version."""
        spec = self.server
        bucket_bytes = self.WEIGHT_BUCKET_BYTES
        if spec.weight_sync == "distributed":
            buckets = self.backend.iter_full_state(bucket_bytes=bucket_bytes, device=self.device)
        else:
            buckets = self.backend.iter_full_state(bucket_bytes=bucket_bytes, device="cpu")
        # Asynchronous training: rollouts are in flight; the servers pause around the load so it
        # does not wait for them (pause_mode 'drain': it does, SGLang's default). Every rank
        # announces the version before rank 0 can push it (the gather below is collective), so a
        # reply generated with it in the meantime is expected.
        pause = spec.pause_mode if self.max_staleness and spec.pause_mode != "drain" else None
        if self.max_staleness:
            self.engine.expected_weight_version = version
        if is_rank0():
            if spec.colocate:
                self.engine.resume_memory()
            named = (item for bucket in buckets for item in bucket)
            if spec.weight_sync == "distributed":
                if self.weight_group is None:
                    self.weight_group = self.engine.init_weight_update_group(
                        spec.master_address, spec.master_port, server_ranks=spec.server_ranks
                    )
                self.engine.push_weights_distributed(
                    named, version, self.weight_group, bucket_bytes=bucket_bytes, pause=pause
                )
            else:
                configs = [
                    self.model_path / f
                    for f in ("config.json", "generation_config.json")
                    if (self.model_path / f).is_file()
                ]
                target = self.engine.push_weights_from_disk(
                    named, self.weight_dir, version, config_files=configs, pause=pause
                )
                for old in self.weight_dir.iterdir():  # only the version the servers hold stays
                    if old != target and old.name.startswith("step-"):
                        shutil.rmtree(old, ignore_errors=True)
        else:
            for _ in buckets:  # the gather is collective: every rank iterates to the end
                pass
        barrier()
        self.engine.expected_weight_version = version

    def _verify_sync(self, version: str) -> tuple[float, str]:
        """Whether the servers hold the policy's weights as `version`: the largest difference
        between a server's log-probs of a fixed sequence and the policy's own (temperature 1),
        and what is wrong ("" if nothing). Collective: every rank runs the forward pass, rank 0
        asks the servers, and every rank gets the verdict."""
        text = "<|im_start|>user\nWhat colour is the square?<|im_end|>\n<|im_start|>assistant\n"
        ids = self.engine.tokenizer(text, add_special_tokens=False)["input_ids"]
        seq = Sequence_(list(ids), [1] * len(ids), [], [0.0] * len(ids), [0.0] * len(ids))
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
            diff, problem = self._check_servers(version, list(ids), mine)
        diff, failed = all_reduce_sum([diff, float(bool(problem))])
        if failed and not problem:
            problem = (
                "trainer rank 0 found a rollout server without the pushed weights (see its log)"
            )
        return diff, problem

    def _check_servers(self, version: str, ids: list[int], mine: torch.Tensor) -> tuple[float, str]:
        """Rank 0: every weight URL's served version, then its log-probs of `ids` against `mine`.

        The version is `weight_version` of SGLang's model-info route (its http_server.py builds
        it from `server_args.weight_version`, beside model_path and tokenizer_path), or of
        vLLM's `/weight_info`."""
        # lazy: the optional extra paravt-train[sglang] (httpx)
        from paravt.core.engines import ServerError, StaleWeightsError, VLLMServerError

        kind = "vLLM" if self.kind == "vllm_server" else "SGLang"

        tolerance = self.server.verify_sync_tolerance
        worst = 0.0
        try:
            for url, served in self.engine.server_weight_versions().items():
                if served != version:
                    return math.nan, (
                        f"{kind} server {url} serves weight version {served!r}, expected {version!r}"
                    )
            for url in self.engine.weight_urls:
                diff = float((torch.tensor(self.engine.score(ids, url=url)) - mine).abs().max())
                worst = max(worst, diff)
                if diff > tolerance:
                    return worst, (
                        f"{kind} server {url} serves weight version {version!r} as expected, but "
                        f"its log-probs of a fixed sequence differ from the trainer's by up to "
                        f"{diff:.3g} (rollout.server.verify_sync_tolerance={tolerance:g})"
                    )
        except (ServerError, StaleWeightsError, VLLMServerError) as exc:
            return math.nan, str(exc)
        return worst, ""

    def _push(self, bucket: list[tuple[str, torch.Tensor]]) -> None:
        targets = self.replica.state_dict()
        with torch.no_grad():
            for name, tensor in bucket:
                if name in targets:
                    targets[name].copy_(tensor)
