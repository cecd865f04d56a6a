"""A toolbox over a video that is not there: the demo's (`paravt-core demo`) and the tests'.

`StaticToolbox` answers `crop_video` with frames at evenly spaced timestamps of a window clamped
to a video of `duration_s` seconds, without decoding anything: ("frame", t) tuples, or
`image(t)` when given (e.g. a uint8 array, for an engine that encodes it). A runtime feature (the
demo runs the agent on it), re-exported by `paravt.core.testing` for the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from paravt.core.protocol import CropVideoArgs, Frame, ToolOutput


@dataclass
class StaticToolbox:
    """A toolbox over a video of `duration_s` seconds whose frames are ("frame", timestamp)
    tuples, or `image(timestamp)` when given (e.g. a uint8 array, for an engine that encodes it).

    Windows are clamped to the video like the real tool; `fail_starts` makes chosen starts fail.
    """

    duration_s: float = 60.0
    fps: float = 1.0
    fail_starts: frozenset[float] = frozenset()
    calls: list[list[CropVideoArgs]] = field(default_factory=list)
    image: Callable[[float], Any] | None = None

    async def execute(self, calls: Sequence[CropVideoArgs]) -> list[ToolOutput]:
        self.calls.append(list(calls))
        outputs = []
        for call in calls:
            if call.start_time in self.fail_starts:
                outputs.append(ToolOutput.failure(f"decode failed at {call.start_time:g} s"))
                continue
            start, end = min(call.start_time, self.duration_s), min(call.end_time, self.duration_s)
            if end <= start:
                outputs.append(
                    ToolOutput.failure(
                        f"window {call.start_time:g}-{call.end_time:g} s is past the end of the "
                        f"video ({self.duration_s:g} s)"
                    )
                )
                continue
            n = call.num_frames or max(1, min(16, int((end - start) * self.fps)))
            step = (end - start) / n
            times = [start + step * (k + 0.5) for k in range(n)]
            image = self.image or (lambda t: ("frame", t))
            frames = [Frame(image(t), t) for t in times]
            outputs.append(ToolOutput(text=f"{n} frames", frames=frames, window_s=(start, end)))
        return outputs
