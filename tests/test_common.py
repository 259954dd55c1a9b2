"""The shared helpers of ops/common, specified as tests: the host and device half and
bfloat16 conversions agree with torch's bit for bit over all 65,536 values of each format
(and round every float between them as torch does), the scalar math is within a few ulp of
torch's, and the CPU multiversioning follows ATen's capability.

Every op's CPU loops are compiled once per capability and pick the clone in force
(ops/common/cpu_dispatch.h). ``test_ops_under_each_cpu_capability`` runs the ops'
reference checks in a new process per capability this CPU has, forced through
``ATEN_CPU_CAPABILITY``; any test file runs the same way by hand, e.g.
``ATEN_CPU_CAPABILITY=default python -m pytest tests/test_sigmoid.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import jit_loader
from subproc import child_env, private_env, run_python

PROBE = Path(__file__).parent / "fixtures" / "common_probe"
FORMATS = {"half": torch.float16, "bfloat16": torch.bfloat16}
CAPABILITIES = ["default", "avx2", "avx512"]


@pytest.fixture(scope="module")
def probe():
    jit_loader.load(PROBE)
    return torch.ops.common_probe


def all_bits() -> torch.Tensor:
    return torch.arange(65536, dtype=torch.int32)


def torch_bits(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """torch's own float32 -> 16-bit conversion, as the bits (int32 in 0..65535)."""
    return x.to(dtype).view(torch.int16).to(torch.int32) & 0xFFFF


def torch_values(bits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return bits.to(torch.int16).view(dtype).float()


def assert_same_bits_or_both_nan(got_bits, want_bits, dtype):
    got, want = torch_values(got_bits, dtype), torch_values(want_bits, dtype)
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got_bits[~nan], want_bits[~nan])


@pytest.mark.parametrize("fmt", FORMATS)
def test_16_bit_to_float_all_values(probe, fmt, device):
    dtype = FORMATS[fmt]
    bits = all_bits()
    got = probe.bits_to_float(bits.to(device), fmt).cpu()
    want = torch_values(bits, dtype)
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan) and nan.sum() > 0
    assert torch.equal(got[~nan].view(torch.int32), want[~nan].view(torch.int32))  # -0 too


def rounding_cases(dtype: torch.dtype) -> torch.Tensor:
    """Every 16-bit value, the midpoints between neighbours (ties to even) and one float
    ulp either side of them, overflow, NaN and random floats of every magnitude."""
    values = torch_values(all_bits(), dtype)
    finite = values[values.isfinite()].double().unique()
    mid = ((finite[1:] + finite[:-1]) / 2).float()
    candidates = [values, mid, torch.nextafter(mid, torch.tensor(float("inf"))),
                  torch.nextafter(mid, torch.tensor(float("-inf"))),
                  torch.tensor([float("inf"), -float("inf"), float("nan"), 3.4e38, -3.4e38,
                                65504.0, 65519.99, 65520.0, 1e-8, -1e-8, 2.0**-25, 2.0**-24]),
                  torch.randn(100_000) * torch.exp(torch.randn(100_000) * 20)]
    return torch.cat([c.float() for c in candidates])


@pytest.mark.parametrize("fmt", FORMATS)
def test_float_to_16_bit_rounds_as_torch(probe, fmt, device):
    dtype = FORMATS[fmt]
    x = rounding_cases(dtype)
    got = probe.float_to_bits(x.to(device), fmt).cpu()
    assert_same_bits_or_both_nan(got, torch_bits(x, dtype), dtype)


BEFORE_SM80 = """
import sys, torch, jit_loader
jit_loader.load(sys.argv[1])
cases = torch.load(sys.argv[2])
out = {}
for fmt, x in cases.items():
    out[fmt] = (torch.ops.common_probe.bits_to_float(torch.arange(65536, dtype=torch.int32).cuda(), fmt).cpu(),
                torch.ops.common_probe.float_to_bits(x.cuda(), fmt).cpu())
torch.save(out, sys.argv[3])
"""


@pytest.mark.cuda
def test_device_conversions_of_gpus_before_sm80(tmp_path):
    """Built as compute_75 PTX (which the driver compiles for this GPU), the conversions
    take the code paths of GPUs without bfloat16 instructions; they agree all the same."""
    cases = {fmt: rounding_cases(dtype) for fmt, dtype in FORMATS.items()}
    torch.save(cases, tmp_path / "cases.pt")
    env = private_env(tmp_path / "cache", JIT_LOADER_CUDA_ARCH="7.5+PTX")
    proc = run_python(BEFORE_SM80, PROBE, tmp_path / "cases.pt", tmp_path / "out.pt", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = torch.load(tmp_path / "out.pt")
    for fmt, dtype in FORMATS.items():
        to_float, to_bits = out[fmt]
        want = torch_values(all_bits(), dtype)
        nan = want.isnan()
        assert torch.equal(to_float.isnan(), nan)
        assert torch.equal(to_float[~nan].view(torch.int32), want[~nan].view(torch.int32))
        assert_same_bits_or_both_nan(to_bits, torch_bits(cases[fmt], dtype), dtype)


def ulp_error(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """|got - want| in units of float32's spacing at want (float64 want)."""
    spacing = (torch.nextafter(want.float().abs(), torch.tensor(float("inf"))).double()
               - want.float().abs().double()).clamp_min(2.0**-149)
    return (got.double() - want).abs() / spacing


@pytest.mark.parametrize("name, lo, hi, reference, max_ulp", [
    ("exp", -110.0, 0.0, torch.exp, 2),
    ("expm1", -110.0, 0.0, torch.expm1, 2),
    ("sigmoid", -110.0, 110.0, torch.sigmoid, 3),
    ("elu", -30.0, 30.0, lambda x: torch.where(x > 0, x, torch.expm1(x)), 2),
    ("tanh", -12.0, 12.0, torch.tanh, 4),
])
def test_host_scalar_math_within_a_few_ulp(probe, name, lo, hi, reference, max_ulp):
    x = torch.cat([torch.linspace(lo, hi, 200_001), torch.empty(50_000).uniform_(lo, hi),
                   torch.tensor([lo, hi, 0.0, -0.0, -1e-30, -1e-7])]).clamp(lo, hi)
    got = probe.scalar_math(x, name)
    err = ulp_error(got, reference(x.double()))
    assert err.max() <= max_ulp, (name, x[err.argmax()].item(), err.max().item())
    assert probe.scalar_math(torch.tensor([float("nan")]), name).isnan().all()


def test_host_fast_exp_for_16_bit_data(probe):
    """The kFast exp that 16-bit data takes: relative error far below a half ulp (2^-11)
    down to -87, 0 below (under float's normal range), NaN kept."""
    x = torch.cat([torch.linspace(-87.0, 0.0, 200_001), torch.empty(50_000).uniform_(-87.0, 0.0),
                   torch.tensor([-87.0, 0.0, -0.0, -1e-30, -1e-7])])
    got = probe.scalar_math(x, "exp_fast").double()
    want = torch.exp(x.double())
    assert ((got - want).abs() / want).max() <= 4e-6
    below = torch.tensor([-87.5, -100.0, -1e4, float("-inf")])
    assert torch.equal(probe.scalar_math(below, "exp_fast"), torch.zeros(4))
    assert probe.scalar_math(torch.tensor([float("nan")]), "exp_fast").isnan().all()


def test_cpu_clone_follows_aten_capability(probe):
    assert probe.cpu_isa() == torch.backends.cpu.get_cpu_capability().lower()


def capabilities_here() -> list[str]:
    """default up to what ATen finds on this CPU (forcing more would run illegal code)."""
    best = torch.backends.cpu.get_cpu_capability().lower()
    return CAPABILITIES[:CAPABILITIES.index(best) + 1] if best in CAPABILITIES else ["default"]


CHECK_UNDER_CAPABILITY = r"""
import sys, torch, jit_loader
from pathlib import Path
from ops.sigmoid import reference as sigmoid_ref
from ops.gelu import reference as gelu_ref
want = sys.argv[1]
assert torch.backends.cpu.get_cpu_capability().lower() == want
jit_loader.load(Path(sys.argv[2]))
assert torch.ops.common_probe.cpu_isa() == want, torch.ops.common_probe.cpu_isa()
results = []
for name in ("sigmoid", "gelu", "lltm"):  # against the references; the compiler is not at issue
    results += jit_loader.check_op(jit_loader.load(name), "cpu", gradcheck=False, opcheck=False,
                                   compile_backend=None, verbose=False)
for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
    x = (torch.randn(4099) * 4).to(dtype)  # a tail past every vector width
    for name, module, ref in (("sigmoid", sigmoid_ref, sigmoid_ref.sigmoid_reference),
                              ("gelu", gelu_ref, gelu_ref.gelu_reference)):
        got = getattr(torch.ops, name).forward(x)
        torch.testing.assert_close(got.double(), ref(x.double()), **module.TOLERANCES[dtype])
bad = [r.table() for r in results if not r]
assert results and not bad, bad
print("ok", want, len(results))
"""


@pytest.mark.parametrize("capability", CAPABILITIES)
def test_ops_under_each_cpu_capability(probe, capability):
    if capability not in capabilities_here():
        pytest.skip(f"this CPU's best capability is {torch.backends.cpu.get_cpu_capability()}")
    result = run_python(CHECK_UNDER_CAPABILITY, capability, PROBE,
                        env=child_env(ATEN_CPU_CAPABILITY=capability))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"ok {capability}" in result.stdout


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_block_and_warp_reductions(probe, dtype):
    """common/reduce.cuh: one block of 256 threads per row, row lengths below, at and past a
    warp and a block; a NaN wins the maximum, as in torch."""
    for cols in (1, 31, 32, 33, 255, 256, 257, 1000, 100_003):
        x = torch.randn(7, cols, dtype=dtype, device="cuda")
        x[3, cols // 2] = float("nan")
        sums, maxima, warp_sums = probe.row_reductions(x)
        tol = dict(rtol=1e-5, atol=1e-5 * cols ** 0.5) if dtype == torch.float32 else {}
        torch.testing.assert_close(sums, x.sum(1), equal_nan=True, **tol)
        torch.testing.assert_close(maxima, x.amax(1), equal_nan=True)
        torch.testing.assert_close(warp_sums, x[:, :32].sum(1), equal_nan=True, **tol)
        assert maxima[3].isnan() and not maxima[[0, 1, 2, 4, 5, 6]].isnan().any()
