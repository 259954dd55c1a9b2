"""What the fake kernels of every op share: the checks a real kernel makes that need no
data. A fake kernel runs under torch.compile and opcheck, and is the Meta kernel in eager
mode, where one argument on ``meta`` and the others on the CPU would otherwise give an
uninitialised CPU tensor instead of the real kernel's device error.
"""

from __future__ import annotations

import torch


def check_same_device(op: str, **tensors) -> None:
    """Every tensor on the device of the first one, as ``OP_CHECK_SAME_DEVICE`` checks
    it in C++ and with its message: ``"<op>: <name> is on <device> but <first> is on
    <device>"``. ``None`` (an optional tensor left out) is skipped."""
    given = [(name, t) for name, t in tensors.items() if t is not None]
    if not given:
        return
    ref_name, ref = given[0]
    for name, t in given[1:]:
        torch._check(t.device == ref.device,
                     lambda: f"{op}: {name} is on {t.device} but {ref_name} is on {ref.device}")
