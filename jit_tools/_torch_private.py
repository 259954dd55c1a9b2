"""Every call of a private torch API the loader makes, each with the reason.

torch offers no public way to do these things; keeping them here means a torch
upgrade that moves one breaks one small module, and the list of what to check is
this file.
"""

from __future__ import annotations

import types

import torch


def cxx11_abi() -> bool:
    """Whether torch was built with the C++11 string ABI: it is part of the cache key,
    since an op built for the other ABI fails to load with undefined symbols. torch
    exposes it only on ``torch._C``."""
    return bool(torch._C._GLIBCXX_USE_CXX11_ABI)


def dispatcher_op_names() -> list[str]:
    """Every operator the dispatcher knows (``ns::name``). ``torch.ops.<ns>`` lists only
    the ops Python has touched, not what a just-loaded library registered."""
    return list(torch._C._dispatch_get_all_op_names())


def has_kernel(qualname: str, dispatch_key: str) -> bool:
    """Whether ``ns::op`` has a kernel for a dispatch key (e.g. "CPU"); used to add the
    explanatory CUDA kernel only to ops that have backend kernels at all."""
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(qualname, dispatch_key))


def destroy_library(lib: torch.library.Library) -> None:
    """Withdraw a ``torch.library.Library``'s registrations now. The public way is to
    let the object be garbage collected, which may happen too late: the next build of
    the op registers the same fake kernels and autograd right away."""
    lib._destroy()


def forget_ops_namespace(namespace: types.ModuleType) -> None:
    """Drop the op packets ``torch.ops.<ns>`` cached (attributes and its ``_dir`` list),
    so the next access builds them again against the newly registered schema."""
    for name in list(namespace._dir):
        if name in vars(namespace):
            delattr(namespace, name)
    namespace._dir.clear()


def prepare_ldflags(cpp_extension, ldflags: list[str], with_cuda: bool) -> list[str]:
    """torch's link flags (libtorch, libc10, cudart and their folders). torch computes
    them only inside this private helper of ``cpp_extension.load``."""
    return cpp_extension._prepare_ldflags(ldflags, with_cuda, False, False, False)


def write_ninja_file(cpp_extension, **kwargs) -> None:
    """torch's build.ninja for a shared library: compile flags, include folders and
    the nvcc arch flags exactly as ``cpp_extension.load`` writes them; we run Ninja
    ourselves (progress, error capture, locking), so we need the file, not ``load``."""
    cpp_extension._write_ninja_file_to_build_library(**kwargs)


def dangling_impls() -> list[str]:
    """Descriptions of kernels registered with ``m.impl`` for operators no ``m.def``
    declares. The dispatcher accepts them at registration and fails only when the op
    is called; the loader checks right after registering so the mistake shows at load."""
    return [str(d) for d in torch._C._dispatch_find_dangling_impls()]


def schemas(qualname: str) -> list[str]:
    """The schema of every overload of ``ns::op`` as the dispatcher holds it now (to say
    what a rebuilt op changed when the dispatcher refuses the new schema)."""
    return [str(s) for s in torch._C._jit_get_schemas_for_operator(qualname)]


# Used by jit_tools.check, which must recognise dispatcher ops among the callables it
# is given and record which ops a function calls. torch has no public names for these.

# The classes of ``torch.ops.ns.op.default`` and ``torch.ops.ns.op``.
OpOverload = torch._ops.OpOverload
OpOverloadPacket = torch._ops.OpOverloadPacket


def dispatch_mode_base():
    """torch's base class of a Python dispatch mode (sees every op a call dispatches);
    imported lazily, as torch itself imports it only on use."""
    from torch.utils._python_dispatch import TorchDispatchMode
    return TorchDispatchMode


def tree_leaves(tree):
    """The leaves of nested outputs (tuples, lists, dicts), as torch's own tools walk them."""
    import torch.utils._pytree as pytree
    return pytree.tree_leaves(tree)


def tree_map_only(cls, fn, tree):
    import torch.utils._pytree as pytree
    return pytree.tree_map_only(cls, fn, tree)


def custom_op_overload(fn) -> "OpOverload | None":
    """The dispatcher op behind a ``torch.library.custom_op`` function, which keeps it
    in a private attribute; None for anything else."""
    op = getattr(fn, "_opoverload", None)
    return op if isinstance(op, OpOverload) else None
