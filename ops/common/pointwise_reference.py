"""What the references of the elementwise activation ops share (sigmoid, gelu): the
tolerance table, the random inputs and the check cases. Each op's ``reference.py`` keeps
its math and names; importing this module builds nothing."""

from __future__ import annotations

from typing import Callable

import torch

# Agreement expected with the float64 reference, per input dtype: 16-bit results are
# computed in float and rounded once.
TOLERANCES = {
    torch.float64: dict(atol=1e-12, rtol=1e-10),
    torch.float32: dict(atol=1e-6, rtol=1e-5),
    torch.float16: dict(atol=1e-3, rtol=1e-3),
    torch.bfloat16: dict(atol=8e-3, rtol=8e-3),
}


def random_input(device, dtype, numel: int, scale: float) -> torch.Tensor:
    """``numel`` values from N(0, scale^2), drawn in float32, then cast to ``dtype``."""
    x = torch.randn(numel, device=device, dtype=torch.float32) * scale
    return x.to(dtype).requires_grad_()


# The checks' sample: past several vectors of the CPU loop and a ragged tail, few enough
# for float64 gradcheck's two calls per element (the sweeps over sizes and dtypes are the
# op tests').
CHECK_NUMEL = 259


def check_cases(device, reference: Callable, example_inputs: Callable,
                names: tuple[str, str, str]) -> dict[str, dict]:
    """What every check of such an op runs (``jit_loader.check_op``; the op tester makes a
    test of each): the surface's function, autograd.Function and nn.Module (``names``) on
    fresh random inputs against the reference evaluated in float64 on the same values, in
    float32 and float64, plus bfloat16 on CUDA, within TOLERANCES; and the function on an
    empty input. Each case is jit_loader.check's arguments, ``fn`` naming the surface
    function."""
    dtypes = (torch.float32, torch.float64)
    if torch.device(device).type == "cuda":
        dtypes += (torch.bfloat16,)
    cases = {route: dict(fn=fn, inputs=(example_inputs(device, torch.float64, CHECK_NUMEL),),
                         reference=reference, dtypes=dtypes, reference_dtype=torch.float64)
             for route, fn in zip(("function", "autograd.Function", "nn.Module"), names)}
    empty = torch.empty(4, 0, 3, device=device, dtype=torch.float64, requires_grad=True)
    cases["empty"] = dict(fn=names[0], inputs=(empty,), reference=reference,
                          reference_dtype=torch.float64)
    return cases
