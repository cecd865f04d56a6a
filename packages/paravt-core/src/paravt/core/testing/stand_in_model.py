"""The model side of the stand-in server (`paravt.core.testing.stand_in`): `FakeSGLang`,
generation, scoring and weight loading over an `HFEngine` (extra `hf`), as SGLang's native routes
need them.

`paravt.core.testing.stand_in` holds the HTTP side (its `ROUTES` table maps SGLang's routes onto
the methods here); this module knows no HTTP. It is a file of its own because it is the half that
needs a model: torch, PIL and safetensors are imported inside the calls that use them, so a
scripted server (`FakeChatServer`) never loads them.

As in SGLang, a weight update waits for the generations in flight and holds new ones back, so a
reply's `weight_version` names the weights that generated it. Differences from SGLang, on purpose:
image pads are expanded from the image grid directly (SGLang decodes the ids to text and
re-tokenizes); no continuous batching (requests that arrive within 5 ms of each other with the
same sampling settings run as one batch, which ends with its longest generation); a pause lets the
requests in flight finish (SGLang's 'retract' and 'in_place' stop them between tokens);
weight-update groups on gloo only (formed by `WeightUpdateGroup.create`, which mirrors SGLang's
`init_custom_process_group`); `/health` answers without generating.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import io
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from paravt.core.engines.hf import HFEngine, ImageChunk, to_image_tensor
from paravt.core.engines.sglang_server import WeightUpdateGroup
from paravt.core.runtime import SamplingParams, Trajectory


class FakeSGLang:
    """The model side: generation, scoring and weight loading over an `HFEngine`."""

    PROBE_TEXT = "<|im_start|>user\nWhat colour is the square?<|im_end|>\n<|im_start|>assistant\n"

    def __init__(self, model_path: str | Path, *, weight_version: str = "default") -> None:
        self.model_path = str(model_path)
        self.tokenizer_path = self.model_path
        self.engine = HFEngine(self.model_path)
        self.engine.model.eval()
        self.weight_version = weight_version
        self.released = False
        self.events: list[dict[str, Any]] = []
        self.generated_by_version: dict[str, int] = {}
        self.lock = threading.Lock()
        # SGLang's model-update lock: a weight update waits for the generations in flight and
        # holds new ones back; /pause_generation holds new ones back until /continue_generation.
        self.state = threading.Condition()
        self.active = 0
        self.paused = False
        self.updating = False
        self.requests = 0
        self.batcher = Batcher(self._generate_batch)
        self.groups: dict[str, Any] = {}  # weight-update process groups by name (gloo only)
        # A fixed sequence scored after every weight load: tests compare it with the trainer's.
        ids = self.engine.tokenizer(self.PROBE_TEXT, add_special_tokens=False)["input_ids"]
        self.probe = Trajectory("main", token_ids=list(ids))
        self.events.append(
            {"event": "start", "weight_version": weight_version, **self._probe_record()}
        )

    def _probe_record(self) -> dict[str, Any]:
        return {"probe_ids": self.probe.token_ids, "probe_logprobs": self.score(self.probe)}

    # ---------------------------------------------------------------------------------- requests

    def _images(self, image_data: Any) -> list[Any]:
        from PIL import Image

        items = image_data if isinstance(image_data, list) else [image_data]
        out = []
        for item in items:
            if not isinstance(item, str):
                raise ValueError("image_data items must be strings (data URLs or base64)")
            payload = item.split(",", 1)[1] if item.startswith("data:") else item
            out.append(to_image_tensor(Image.open(io.BytesIO(base64.b64decode(payload)))))
        return out

    def _trajectory(self, input_ids: list[int], image_data: Any) -> Any:
        """The request as a trajectory of the HF engine: each image pad expanded to its grid."""
        engine = self.engine
        images = self._images(image_data) if image_data else []
        pad = engine.image_token_id
        n_pads = sum(1 for t in input_ids if t == pad)
        if n_pads != len(images):
            raise ValueError(f"{n_pads} image pads in input_ids for {len(images)} images")
        chunks: list[Any] = []
        if images:
            batch = engine.processor.image_processor(images=images, return_tensors="pt")
            offset = 0
            for grid in batch["image_grid_thw"]:
                rows = int(grid.prod())
                chunks.append(
                    ImageChunk(batch["pixel_values"][offset : offset + rows], grid.clone())
                )
                offset += rows
        ids: list[int] = []
        k = 0
        for t in input_ids:
            if t == pad:
                ids.extend([pad] * (chunks[k].num_tokens // engine.merge_size**2))
                k += 1
            else:
                ids.append(int(t))
        traj = Trajectory("main", token_ids=ids, media=chunks)
        traj.loss_mask = [0] * len(ids)
        traj.logprobs = [0.0] * len(ids)
        return traj

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        """One `/generate` reply in SGLang's shape: generated with one weight version, the one
        its `meta_info.weight_version` names (no update runs while it is in flight)."""
        with self.state:
            self.state.wait_for(lambda: not (self.paused or self.updating))
            self.active += 1
        try:
            return self._generate(body)
        finally:
            with self.state:
                self.active -= 1
                self.state.notify_all()

    @contextlib.contextmanager
    def weight_update(self) -> Iterator[None]:
        """Exclusive access for a weight load: waits for the generations in flight."""
        with self.state:
            self.state.wait_for(lambda: self.active == 0 and not self.updating)
            self.updating = True
        try:
            yield
        finally:
            with self.state:
                self.updating = False
                self.state.notify_all()

    def pause_generation(self, body: dict[str, Any]) -> dict[str, Any]:
        """`/pause_generation`: new generations wait until `/continue_generation`. SGLang's
        'retract' and 'in_place' stop running requests between tokens; this stand-in lets the
        ones in flight finish first (its generation is one call)."""
        mode = body.get("mode", "abort")
        if mode not in ("abort", "retract", "in_place"):
            raise ValueError(f"Invalid mode: {mode!r}. Expected one of abort, retract, in_place")
        with self.state:
            self.paused = True
            self.state.wait_for(lambda: self.active == 0)
        self.events.append({"event": "pause_generation", "mode": mode, "time": time.time()})
        return {"message": "Generation paused successfully.", "status": "ok"}

    def continue_generation(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.state:
            self.paused = False
            self.state.notify_all()
        self.events.append({"event": "continue_generation", "time": time.time()})
        return {"message": "Generation continued successfully.", "status": "ok"}

    def _generate(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.released:
            raise ValueError("memory is released; call /resume_memory_occupation first")
        input_ids = body.get("input_ids")
        if input_ids is None and isinstance(body.get("text"), str):  # SGLang tokenizes text
            input_ids = self.engine.tokenizer(body["text"], add_special_tokens=False)["input_ids"]
        if not isinstance(input_ids, list) or not input_ids or isinstance(input_ids[0], list):
            raise ValueError("input_ids must be one non-empty list of token ids")
        params = body.get("sampling_params") or {}
        traj = self._trajectory(input_ids, body.get("image_data"))
        max_new = int(params.get("max_new_tokens", 128))
        meta: dict[str, Any] = {
            "id": f"fake-{self.requests}",
            "prompt_tokens": len(traj.token_ids),
            "weight_version": self.weight_version,
        }
        self.requests += 1
        if max_new > 0:
            with self.lock:
                n = self.generated_by_version.get(self.weight_version, 0)
                self.generated_by_version[self.weight_version] = n + 1
        if max_new == 0:  # score the prompt
            lps = self.score(traj)
            meta.update(
                completion_tokens=0,
                finish_reason={"type": "length", "length": 0},
                input_token_logprobs=[[None, traj.token_ids[0], None]]
                + [[lp, t, None] for lp, t in zip(lps, traj.token_ids[1:])],
                output_token_logprobs=[],
            )
            return {"text": "", "output_ids": [], "meta_info": meta}
        sampling = SamplingParams(
            max_new_tokens=max_new,
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
            top_k=max(int(params.get("top_k", 0) or 0), 0),
            seed=params.get("sampling_seed"),
        )
        out = self.batcher.submit(traj, sampling)
        reason: dict[str, Any] = {"type": out.finish_reason}
        if out.finish_reason == "stop" and out.token_ids:
            reason["matched"] = out.token_ids[-1]
        meta.update(completion_tokens=len(out.token_ids), finish_reason=reason)
        if body.get("return_logprob"):
            meta["output_token_logprobs"] = [
                [lp, t, None] for lp, t in zip(out.logprobs or [], out.token_ids)
            ]
        return {"text": out.text, "output_ids": out.token_ids, "meta_info": meta}

    def _generate_batch(self, trajs: list[Any], sampling: Any) -> list[Any]:
        import torch

        with torch.no_grad():
            return list(self.engine.generate_sync(trajs, sampling))

    def score(self, traj: Any) -> list[float]:
        """Log-probs (temperature 1) of tokens 1..n-1 of a trajectory given their prefixes."""
        import torch

        engine = self.engine
        ids = torch.tensor([traj.token_ids])
        inputs: dict[str, Any] = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if traj.media:
            inputs["pixel_values"] = torch.cat([c.pixel_values for c in traj.media])
            inputs["image_grid_thw"] = torch.stack([c.grid_thw for c in traj.media])
            inputs["mm_token_type_ids"] = (ids == engine.image_token_id).int()
        with engine._lock, torch.inference_mode():
            logits = engine.model(**inputs).logits[0, :-1].float()
        picked = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
        return [float(x) for x in picked]

    def update_weights_from_disk(self, body: dict[str, Any]) -> dict[str, Any]:
        """Load every `*.safetensors` under `model_path` into the model (names must all match)."""
        from safetensors.torch import load_file

        path = Path(str(body["model_path"]))  # required in SGLang's UpdateWeightFromDiskReqInput
        files = sorted(path.glob("*.safetensors"))
        if not files:
            return {"success": False, "message": f"no *.safetensors under {path}"}
        state: dict[str, Any] = {}
        for f in files:
            state.update(load_file(str(f)))
        own = self.engine.model.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            return {"success": False, "message": f"unknown parameter names: {unknown[:5]}"}
        with self.weight_update(), self.engine._lock:
            missing, _ = self.engine.model.load_state_dict(state, strict=False)
            version = body.get("weight_version")
            if version is not None:
                self.weight_version = str(version)
        self.model_path = str(path)  # as SGLang: model_info reports the loaded path
        self.events.append(
            {
                "event": "update_weights_from_disk",
                "model_path": str(path),
                "weight_version": self.weight_version,
                "tensors": len(state),
                "time": time.time(),
                **self._probe_record(),
            }
        )
        return {
            "success": True,
            "message": f"loaded {len(state)} tensors ({len(missing)} kept)",
            "num_paused_requests": 0,
        }

    def init_weights_update_group(self, body: dict[str, Any]) -> dict[str, Any]:
        """Join the trainer's weight-update group as rank `rank_offset` (gloo only: CPU), built
        like SGLang's `init_custom_process_group` (`WeightUpdateGroup.create`)."""
        if body.get("backend", "nccl") != "gloo":
            return {"success": False, "message": "the fake server supports backend=gloo only"}
        name = str(body.get("group_name", "weight_update_group"))
        self.groups[name] = WeightUpdateGroup.create(
            str(body["master_address"]),
            int(body["master_port"]),
            int(body["world_size"]),
            rank=int(body["rank_offset"]),
            backend="gloo",
            group_name=name,
            timeout_s=60,
        )
        self.events.append({"event": "init_weights_update_group", "group_name": name})
        return {"success": True, "message": "joined"}

    def update_weights_from_distributed(self, body: dict[str, Any]) -> dict[str, Any]:
        """Receive `names` (with `dtypes`, `shapes`) by broadcast from rank 0 and load them."""
        import torch

        name = str(body.get("group_name", "weight_update_group"))
        group = self.groups.get(name)
        if group is None:
            return {"success": False, "message": f"no weight-update group {name!r}"}
        state: dict[str, Any] = {}
        for pname, dtype, shape in zip(body["names"], body["dtypes"], body["shapes"]):
            tensor = torch.empty(list(shape), dtype=getattr(torch, str(dtype)))
            group.broadcast(tensor, 0)
            state[pname] = tensor
        own = self.engine.model.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            return {"success": False, "message": f"unknown parameter names: {unknown[:5]}"}
        with self.weight_update(), self.engine._lock:
            self.engine.model.load_state_dict(state, strict=False)
            if body.get("weight_version") is not None:
                self.weight_version = str(body["weight_version"])
        self.events.append(
            {
                "event": "update_weights_from_distributed",
                "weight_version": self.weight_version,
                "tensors": len(state),
                "flush_cache": bool(body.get("flush_cache", True)),
                **self._probe_record(),
            }
        )
        return {"success": True, "message": f"loaded {len(state)} tensors"}


class Batcher:
    """Generation requests that arrive within `window_s` of each other with the same sampling
    settings run as one batch (at most `max_batch`): a stand-in for SGLang's continuous batching,
    so concurrent requests do not queue one by one. Callers block in `submit`."""

    def __init__(
        self,
        run: Callable[[list[Any], Any], list[Any]],
        *,
        window_s: float = 0.005,
        max_batch: int = 64,
    ) -> None:
        self.run, self.window_s, self.max_batch = run, window_s, max_batch
        self.queue: list[tuple[Any, Any, concurrent.futures.Future[Any]]] = []
        self.cond = threading.Condition()
        self.batches: list[int] = []  # sizes, for tests
        threading.Thread(target=self._loop, name="fake-sglang-batcher", daemon=True).start()

    def submit(self, traj: Any, sampling: Any) -> Any:
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self.cond:
            self.queue.append((traj, sampling, fut))
            self.cond.notify()
        return fut.result()

    def _loop(self) -> None:
        while True:
            with self.cond:
                self.cond.wait_for(lambda: bool(self.queue))
            time.sleep(self.window_s)  # let requests sent together arrive
            with self.cond:
                sampling = self.queue[0][1]
                same = [i for i, item in enumerate(self.queue) if item[1] == sampling]
                picked = set(same[: self.max_batch])
                batch = [item for i, item in enumerate(self.queue) if i in picked]
                self.queue = [item for i, item in enumerate(self.queue) if i not in picked]
            self.batches.append(len(batch))
            try:
                outs = self.run([t for t, _, _ in batch], sampling)
            except Exception as exc:  # every request of the batch gets the error
                for _, _, fut in batch:
                    fut.set_exception(exc)
                continue
            for (_, _, fut), out in zip(batch, outs):
                fut.set_result(out)
