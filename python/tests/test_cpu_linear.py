"""cpu_linear: decode-shaped products agree with F.linear; prefill and other dtypes are F.linear itself."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ternforge_server import cpu_linear


def _linear(n: int, k: int, bias: bool) -> torch.nn.Linear:
    torch.manual_seed(n + k)
    return torch.nn.Linear(k, n, bias=bias)


def test_decode_rows_agree_with_f_linear_for_layer_and_head_shapes() -> None:
    for n, k, bias in [(96, 64, False), (64, 160, True), (cpu_linear._LARGE_N + 300, 48, False)]:
        lin = _linear(n, k, bias)
        assert cpu_linear.apply(lin) == 1
        for shape in [(1, 1, k), (16, 1, k), (4, 3, k), (cpu_linear.MAX_ROWS, k)]:
            x = torch.randn(shape)
            y = lin(x)
            assert y.shape == (*shape[:-1], n)
            torch.testing.assert_close(y, F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)


def test_prefill_and_other_dtypes_take_f_linear_bit_for_bit() -> None:
    lin = _linear(40, 32, True)
    cpu_linear.apply(lin)
    x = torch.randn(2, cpu_linear.MAX_ROWS, 32)  # 128 rows: prefill
    assert torch.equal(lin(x), F.linear(x, lin.weight, lin.bias))
    half = _linear(40, 32, False).to(torch.bfloat16)
    cpu_linear.apply(half)
    xh = torch.randn(1, 32)  # float32 input into a bf16 layer: F.linear's own error, unchanged
    try:
        F.linear(xh, half.weight)
    except RuntimeError as e:
        expected = str(e)
    else:
        raise AssertionError("F.linear accepted mixed dtypes")
    try:
        half(xh)
    except RuntimeError as e:
        assert str(e) == expected
    else:
        raise AssertionError("the patched forward accepted mixed dtypes")


def test_apply_leaves_modules_on_other_devices_and_non_linears_alone() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    assert cpu_linear.apply(model) == 2
    assert "forward" not in vars(model[1])
    meta = torch.nn.Linear(8, 8, device="meta")
    assert cpu_linear.apply(meta) == 0 and "forward" not in vars(meta)
