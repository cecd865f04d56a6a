"""bf16 compute where the CPU has no bf16 instructions: matmuls through fp32 kernels.

A GPU's bf16 matmul reads bf16 inputs, accumulates in fp32 and rounds its output to bf16. On a
CPU with bf16 instructions (AVX-512 BF16, AMX) torch does the same natively. On one without them
(AVX2) torch's bf16 matmul falls back to a scalar kernel: about 100 times slower than fp32 on the
tiny model's shapes (a bf16 RL arm about seven times slower end to end), which put the learning
check's bf16 column out of reach there.

`model.bf16_matmul: fp32` routes the model's `nn.Linear` and convolution layers through fp32
kernels when their input is bf16: the inputs and weights are upcast (exactly: every bf16 value is
an fp32 value), the fp32 kernel accumulates, and the output is rounded to bf16. The rounding
points are those of a native bf16 matmul; only the order of the fp32 sums differs, as it differs
between any two kernels (a single layer's outputs agree with the native kernel's bit for bit in
all but 0.5 to 2 of 10,000 elements on the tiny model's shapes, a rounding tie going the other
way). Everything else (norms,
activations, attention, the optimizer's master weights) runs as it would natively.
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def _linear_through_fp32(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if x.dtype is not torch.bfloat16:
        return F.linear(x, self.weight, self.bias)
    bias = None if self.bias is None else self.bias.float()
    return F.linear(x.float(), self.weight.float(), bias).to(torch.bfloat16)


def _conv_through_fp32(self: Any, x: torch.Tensor) -> torch.Tensor:
    if x.dtype is not torch.bfloat16:
        return self._conv_forward(x, self.weight, self.bias)
    bias = None if self.bias is None else self.bias.float()
    out = self._conv_forward(x.float(), self.weight.float(), bias)
    return out.to(torch.bfloat16)


def bf16_matmuls_through_fp32(model: nn.Module) -> int:
    """Route `model`'s bf16 linear and convolution layers through fp32 kernels (above); returns
    how many layers now do. Layers whose class has a forward of its own (a quantised linear, a
    LoRA wrapper) are left as they are; calling this twice changes nothing more."""
    routed = 0
    for module in model.modules():
        if type(module).forward is nn.Linear.forward and isinstance(module, nn.Linear):
            route: Any = _linear_through_fp32
        elif isinstance(module, _CONVS) and type(module).forward in {c.forward for c in _CONVS}:
            route = _conv_through_fp32
        else:
            continue
        if getattr(module.forward, "__func__", None) is route:
            continue  # already routed
        module.forward = types.MethodType(route, module)
        routed += 1
    return routed


def apply_matmul_setting(model: nn.Module, setting: str) -> int:
    """The recipe's `model.bf16_matmul` on a loaded model: 'native' leaves it, 'fp32' routes its
    layers (`bf16_matmuls_through_fp32`); returns how many layers were routed."""
    if setting == "native":
        return 0
    if setting == "fp32":
        return bf16_matmuls_through_fp32(model)
    raise ValueError(f"model.bf16_matmul={setting!r}: one of 'native', 'fp32'")
