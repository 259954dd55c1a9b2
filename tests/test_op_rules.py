"""An op's argument rules, declared once in ``<op>_checks.h`` (ops/common/arg_checks.h): the
C++ checks of both ABIs expand them and the fake kernel reads them
(``jit_loader.op_rules``), so a bad argument raises the same one line from the real kernel
and from the fake one (torch.compile, opcheck, a meta tensor), on either ABI.

Two tiny ops, one per ABI, built from one checks header; every kind of rule is broken once,
and each text is compared across the four paths (real and fake, stable and ATen).
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import jit_loader

RULES = """#pragma once
#define {P}_FORWARD_RULES(RULE) \\
  RULE(floating, x)             \\
  RULE(dim_at_least, x, 1)      \\
  RULE(same_device, weight, x)  \\
  RULE(same_dtype, weight, x)   \\
  RULE(dim, weight, 1)          \\
  RULE(size_as, weight, 0, x, -1) \\
  RULE(same_shape, other, x)    \\
  RULE(size, other, 0, 2)       \\
  RULE(positive, k)             \\
  RULE(nonnegative, eps)
"""

HOST = {
    "stable": """
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include "common/stable_checks.h"
#include "{ns}_checks.h"
using torch::stable::Tensor;
Tensor probe(const Tensor& x, const Tensor& weight, const Tensor& other, int64_t k, double eps) {{
  constexpr const char* op = "{ns}.probe";
  {P}_FORWARD_RULES(OPS_CHECK_RULE)
  return torch::stable::clone(x);
}}
STABLE_TORCH_LIBRARY({ns}, m) {{
  m.def("probe(Tensor x, Tensor weight, Tensor other, int k, float eps) -> Tensor");
}}
STABLE_TORCH_LIBRARY_IMPL({ns}, CPU, m) {{ m.impl("probe", TORCH_BOX(&probe)); }}
""",
    "aten": """
#include <ATen/ATen.h>
#include <torch/library.h>
#include "common/checks.h"
#include "{ns}_checks.h"
at::Tensor probe(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& other, int64_t k,
                 double eps) {{
  constexpr const char* op = "{ns}.probe";
  {P}_FORWARD_RULES(OPS_CHECK_RULE)
  return x.clone();
}}
TORCH_LIBRARY({ns}, m) {{
  m.def("probe(Tensor x, Tensor weight, Tensor other, int k, float eps) -> Tensor");
}}
TORCH_LIBRARY_IMPL({ns}, CPU, m) {{ m.impl("probe", &probe); }}
""",
}

SURFACE = """
import torch
import jit_loader

jit_loader.load_library(__file__)
LIB = torch.library.Library("{ns}", "FRAGMENT")
RULES = jit_loader.op_rules(__file__)


@torch.library.register_fake("{ns}::probe", lib=LIB)
def _probe_fake(x, weight, other, k, eps):
    RULES.check("forward", "{ns}.probe", x=x, weight=weight, other=other, k=k, eps=eps)
    return torch.empty_like(x)
"""


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    """namespace -> its op, one per ABI."""
    base = tmp_path_factory.mktemp("rules")
    out = {}
    for abi, host in HOST.items():
        ns = f"rules_{abi}"
        folder = base / ns
        folder.mkdir()
        fields = dict(ns=ns, P=ns.upper())
        (folder / f"{ns}_checks.h").write_text(RULES.format(**fields))
        (folder / f"{ns}.cpp").write_text(host.format(**fields))
        (folder / f"{ns}.py").write_text(SURFACE.format(**fields))
        out[ns] = jit_loader.load(folder)
    return out


def valid() -> dict:
    return dict(x=torch.randn(2, 4), weight=torch.randn(4), other=torch.randn(2, 4), k=1, eps=0.0)


# case -> (what changes in valid(), the message after "<op>: ")
CASES = {
    "floating": (dict(x=torch.ones(2, 4, dtype=torch.long)), "x must be a floating-point tensor, got Long"),
    "dim_at_least": (dict(x=torch.tensor(1.0)), "x must be at least 1-D, got 0-D with shape []"),
    "same_device": (dict(weight=torch.randn(4, device="meta")), "weight is on meta but x is on cpu"),
    "same_dtype": (dict(weight=torch.randn(4, dtype=torch.float64)),
                   "weight has dtype Double but x has dtype Float"),
    "dim": (dict(weight=torch.randn(1, 4)), "weight must be a 1-D tensor, got 2-D with shape [1, 4]"),
    "size_as": (dict(weight=torch.randn(5)), "weight.size(0) must be x.size(-1) = 4, got 5 (shape [5])"),
    "same_shape": (dict(other=torch.randn(3, 4)), "other has shape [3, 4] but x has shape [2, 4]"),
    "size": (dict(x=torch.randn(3, 4), other=torch.randn(3, 4)),
             "other.size(0) must be 2, got 3 (shape [3, 4])"),
    "positive": (dict(k=0), "k must be > 0, got 0"),
    "nonnegative": (dict(eps=-0.5), "eps must be >= 0, got -0.5"),
}


def real_error(ns: str, args: dict) -> str:
    """The C++ kernel's error (called on the CPU kernel itself: a meta tensor among the
    arguments would otherwise send the call to the fake kernel)."""
    overload = getattr(torch.ops, ns).probe.default
    with pytest.raises(RuntimeError) as info:
        overload.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.CPU), *args.values())
    return str(info.value)


def fake_error(ns: str, args: dict) -> str:
    """The fake kernel's error, as torch.compile meets it."""
    with FakeTensorMode() as mode:
        fakes = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args.values()]
        with pytest.raises(RuntimeError) as info:
            getattr(torch.ops, ns).probe(*fakes)
    return str(info.value)


@pytest.mark.parametrize("case", list(CASES))
def test_every_rule_reads_the_same_from_the_real_and_the_fake_kernel_on_both_abis(probes, case):
    change, message = CASES[case]
    args = {**valid(), **change}
    for ns in probes:
        want = f"{ns}.probe: {message}"
        assert real_error(ns, args) == want
        assert fake_error(ns, args) == want


def test_valid_arguments_pass_every_rule(probes):
    args = valid()
    for ns in probes:
        torch.testing.assert_close(getattr(torch.ops, ns).probe(*args.values()), args["x"])
        with FakeTensorMode() as mode:
            x = mode.from_tensor(args["x"])
            out = getattr(torch.ops, ns).probe(x, *(mode.from_tensor(a) if isinstance(a, torch.Tensor)
                                                    else a for a in list(args.values())[1:]))
            assert out.shape == x.shape


def test_rules_are_parsed_with_groups_and_refused_when_unknown(tmp_path):
    (tmp_path / "my_op").mkdir()
    header = tmp_path / "my_op" / "my_op_checks.h"
    header.write_text("#define MY_OP_FORWARD_RULES(RULE) \\\n  RULE(floating, x) \\\n"
                      "  RULE(size_as, w, 0, x, -1)\n\n"
                      "#define MY_OP_BACKWARD_RULES(RULE) \\\n  MY_OP_FORWARD_RULES(RULE) \\\n"
                      "  RULE(same_shape, grad, x)\n")
    rules = jit_loader.op_rules(tmp_path / "my_op" / "my_op.py")  # the surface finds its header
    assert rules.groups == {
        "forward": [("floating", ("x",)), ("size_as", ("w", 0, "x", -1))],
        "backward": [("floating", ("x",)), ("size_as", ("w", 0, "x", -1)), ("same_shape", ("grad", "x"))]}
    header.write_text("#define MY_OP_FORWARD_RULES(RULE) \\\n  RULE(floatin, x)\n")
    with pytest.raises(ValueError, match=r"RULE\(floatin, \.\.\.\): no such rule"):
        jit_loader.op_rules(header)
