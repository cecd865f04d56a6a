"""`model.bf16_matmul: fp32`: bf16 compute on a CPU without bf16 instructions.

The learning check's bf16 column stands in for a GPU's numerics. A user on an AVX2 CPU who sets
`bf16_matmul: fp32` relies on getting the same rounding points as native bf16 (not fp32 compute
with a bf16 label), on the setting reaching every model the run loads, and on fp32 compute being
left alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from paravt.train.modeling import load_model_and_processor
from paravt.train.numerics import apply_matmul_setting, bf16_matmuls_through_fp32
from paravt.train.recipe import ModelSpec


def test_a_routed_layer_rounds_where_the_native_bf16_kernel_does() -> None:
    torch.manual_seed(0)
    layer = nn.Linear(512, 256).to(torch.bfloat16)
    x = torch.randn(256, 512, dtype=torch.bfloat16)
    native = layer(x)
    assert bf16_matmuls_through_fp32(layer) == 1
    routed = layer(x)
    exact = F.linear(x.double(), layer.weight.double(), layer.bias.double())
    assert routed.dtype == torch.bfloat16  # rounded to bf16, not fp32 compute
    # the native kernel's outputs, but for a rare rounding tie (fp32 sums in another order)
    assert (routed == native).float().mean() > 0.999
    fp32_error = (exact.float() - exact).abs().mean()
    assert (routed.double() - exact).abs().mean() > 100 * fp32_error  # bf16's rounding is there
    assert bf16_matmuls_through_fp32(layer) == 0  # a second call changes nothing
    x32 = x.float()
    assert torch.equal(layer.float()(x32), F.linear(x32, layer.weight, layer.bias))


def test_convolutions_are_routed_and_other_layers_left_alone() -> None:
    class Custom(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) * 2

    model = nn.Sequential(nn.Conv3d(3, 8, 2, stride=2), nn.Flatten(), Custom(8, 4), nn.ReLU())
    model = model.to(torch.bfloat16)
    x = torch.randn(1, 3, 2, 2, 2, dtype=torch.bfloat16)
    native = model(x)
    assert bf16_matmuls_through_fp32(model) == 1  # the convolution; the custom forward stays
    out = model(x)
    assert out.dtype == torch.bfloat16 and torch.allclose(out.float(), native.float(), atol=0.05)
    with pytest.raises(ValueError, match="one of 'native', 'fp32'"):
        apply_matmul_setting(model, "fp16")


def test_the_recipe_setting_reaches_the_loaded_model_and_keeps_it_near_native(
    tiny_model_path: Path,
) -> None:
    """Every loader of the trainer goes through `load_model_and_processor`: with the setting the
    tiny Qwen3-VL's logits sit closer to native bf16's than fp32 compute's do."""
    spec = ModelSpec(path=str(tiny_model_path), dtype="bfloat16", bf16_matmul="fp32")
    cpu = torch.device("cpu")
    routed, _ = load_model_and_processor(spec, cpu)
    native, _ = load_model_and_processor(spec.model_copy(update={"bf16_matmul": "native"}), cpu)
    fp32, _ = load_model_and_processor(spec, cpu, dtype=torch.float32)
    n_linear = sum(isinstance(m, nn.Linear) for m in routed.modules())
    assert n_linear and all(
        getattr(m.forward, "__func__", None) is not nn.Linear.forward
        for m in routed.modules()
        if type(m) is nn.Linear
    )
    assert all(
        getattr(m.forward, "__func__", None) is nn.Linear.forward
        for m in native.modules()
        if type(m) is nn.Linear
    )
    ids = torch.randint(10, 1000, (2, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = {
            name: m(input_ids=ids).logits.float()
            for name, m in (("routed", routed), ("native", native), ("fp32", fp32))
        }
    off_routed = (logits["routed"] - logits["native"]).abs().mean()
    off_fp32 = (logits["fp32"] - logits["native"]).abs().mean()
    assert off_routed < 0.5 * off_fp32
