"""``with jit_loader.check_finite(): ...``: every floating-point result of an op checked
for NaN and Inf as the op returns it, forward and backward, on any device.

A TorchDispatchMode sees each dispatcher call below autograd, so a backward op is checked
as the forward one is, whichever route (torch.ops, the fast entry, autograd) made the
call; only the ops of the namespaces asked for are checked (default: those of every op
the loader has loaded, at the time of each call), so torch's own ops pass untouched. A
check reads the result (on a GPU that waits for the op): a debugging aid, like a debug
build, not for timed code.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from jit_tools.state import loaded_states


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


class NonFiniteError(FloatingPointError):
    """An op returned NaN or Inf (``check_finite``)."""


class check_finite(TorchDispatchMode):  # noqa: N801 -- used as a function: with check_finite():
    """Raise NonFiniteError naming the op, the result and the first bad element when an op
    of ``namespaces`` (default: every op the loader loaded) returns NaN or Inf."""

    def __init__(self, namespaces: Iterable[str] | None = None):
        super().__init__()
        self.namespaces = None if namespaces is None else set(namespaces)

    def _checked(self, namespace: str) -> bool:
        if self.namespaces is not None:
            return namespace in self.namespaces
        return any(namespace in s.namespaces for s in loaded_states())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not self._checked(func.namespace):
            return out
        for i, t in enumerate(_tensors(out)):
            if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
                continue
            bad = ~torch.isfinite(t)
            count = int(bad.sum())
            if count:
                first = tuple(int(v) for v in bad.nonzero()[0])
                raise NonFiniteError(
                    f"{func.name()}: result {i} ({tuple(t.shape)}, {str(t.dtype).removeprefix('torch.')}) "
                    f"holds {count} NaN/Inf value{'s' * (count != 1)}; the first at index "
                    f"{first if len(first) != 1 else first[0]} is {t[first].item()}")
        return out
