"""Every call of a private torch API the loader makes, each with the reason.

torch offers no public way to do these things; keeping them here means a torch
upgrade that moves one breaks one small module, and the list of what to check is
this file.
"""

from __future__ import annotations

import contextlib
import inspect
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


def cpu_keyset():
    """The dispatch key set of the CPU key alone: a live edit's gate calls its operator
    again at the CPU key, where the rebuilt CPU kernels now sit over it (swap/gate.py);
    ``OpOverload.redispatch`` takes a key set, which only ``torch._C`` makes."""
    return torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


def destroy_library(lib: torch.library.Library) -> None:
    """Withdraw a ``torch.library.Library``'s registrations now. The public way is to
    let the object be garbage collected, which may happen too late: the next build of
    the op registers the same fake kernels and autograd right away."""
    lib._destroy()


def add_registration_handle(lib: torch.library.Library, handle) -> None:
    """Make ``handle.destroy()`` run when ``lib`` is destroyed (or collected), as for the
    library's own registrations: the loader's C++ autograd kernels then follow the op
    surface's Library through reloads. Library keeps that list private."""
    lib._registration_handles.append(handle)


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


def ninja_flags(cpp_extension, **kwargs) -> dict:
    """The compile and link flags ``cpp_extension.load`` writes into its build.ninja
    (include folders, nvcc's arch flags, torch's own defines), as lists: the arguments its
    ``_write_ninja_file_to_build_library`` hands to its writer ``_write_ninja_file``, which
    is replaced for the call by one that keeps them (and writes nothing). torch composes
    them only there, and the composition changes between releases; the loader writes the
    file itself, with its own pieces on the lines (jit_tools/builder/ninja_file.py).
    Like the arch list and CUDA_HOME its caller sets, not for a thread running
    ``cpp_extension.load`` at the same time."""
    writer = cpp_extension._write_ninja_file
    signature = inspect.signature(writer)
    kept: dict = {}

    def keep(*args, **kw):
        kept.update(signature.bind(*args, **kw).arguments)

    cpp_extension._write_ninja_file = keep
    try:
        cpp_extension._write_ninja_file_to_build_library(**kwargs)
    finally:
        cpp_extension._write_ninja_file = writer
    return kept


def dangling_impls() -> list[str]:
    """Descriptions of kernels registered with ``m.impl`` for operators no ``m.def``
    declares. The dispatcher accepts them at registration and fails only when the op
    is called; the loader checks right after registering so the mistake shows at load."""
    return [str(d) for d in torch._C._dispatch_find_dangling_impls()]


def schemas(qualname: str) -> list[str]:
    """The schema of every overload of ``ns::op`` as the dispatcher holds it now (to say
    what a rebuilt op changed when the dispatcher refuses the new schema)."""
    return [str(s) for s in torch._C._jit_get_schemas_for_operator(qualname)]


# Used by jit_tools.tools.check, which must recognise dispatcher ops among the callables it
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


def has_schema(name: str) -> bool:
    """Whether the dispatcher entry ``ns::op`` or ``ns::op.overload`` has a schema (an
    entry can outlive its declaration while kernels are registered for it)."""
    base, _, overload = name.partition(".")
    return any(s.overload_name == overload
               for s in torch._C._jit_get_schemas_for_operator(base))


def registrations_of(qualname: str) -> str:
    """The dispatcher's report of what is registered for ``ns::op``, each with the place
    that registered it, for messages that must say who holds an operator."""
    return str(torch._C._dispatch_dump(qualname)).strip()


class _Retired:
    """Stands in for the native callables of a Python op object whose operator entry was
    freed: any use raises, where the stale pointer would have touched freed memory."""

    def __init__(self, message: str):
        self._message = message

    def __call__(self, *args, **kwargs):
        raise RuntimeError(self._message)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise RuntimeError(self._message)


def is_plain_overload(obj) -> bool:
    """An ``OpOverload`` as ``torch.ops`` makes it (not a subclass, no Python-object
    dispatcher of torch 2.14's in place of its native callable)."""
    return type(obj) is OpOverload and getattr(obj, "_pyobj_dispatcher", None) is None


def overload_with_call(overload, call=None):
    """A copy of ``overload`` (its attributes: schema, native callables, Python kernels) of
    a subclass whose ``__call__`` is ``call``, a builtin function (not bound to the
    instance: it holds what it needs); with ``call`` None, ``OpOverload.__call__`` until
    :func:`set_fast_call` gives it one."""
    cls = type("OpOverload", (OpOverload,),
               {"__slots__": (), "__call__": call or OpOverload.__call__, "_jit_fast_call": call,
                "__module__": OpOverload.__module__, "__doc__": OpOverload.__doc__})
    fast = object.__new__(cls)
    vars(fast).update(vars(overload))
    return fast


def set_fast_call(fast, call) -> None:
    """Calls of ``fast`` (made by :func:`overload_with_call`) go to ``call`` from now on:
    its class's ``__call__``, which no call of it reads in any other way."""
    cls = type(fast)
    cls.__call__ = call
    cls._jit_fast_call = call


def is_fast_object(obj) -> bool:
    """An object of :func:`overload_with_call`, with a fast call or waiting for one."""
    return "_jit_fast_call" in vars(type(obj))


def fast_call_of(obj):
    """The builtin behind an object of :func:`overload_with_call`, else None."""
    return getattr(type(obj), "_jit_fast_call", None)


def retire_op_objects(qualnames, template: str) -> list:
    """Point every live ``OpOverload``/``OpOverloadPacket`` of ``qualnames`` (``ns::op``
    or ``ns::op.overload``) at a :class:`_Retired` stand-in. torch's op objects keep a raw
    handle into the dispatcher's operator entry, which the dispatcher frees once the
    last registration goes; Python code (a variable, a traced graph) may still hold
    them. They can be anywhere, so the garbage collector's list of objects is searched
    (only when an operator is withdrawn, never on an ordinary reload). Returns the
    objects retired."""
    import gc
    names = set(qualnames)
    bases = {n.split(".", 1)[0] for n in names}
    retired = []
    for obj in gc.get_objects():
        cls = type(obj)  # not isinstance: it would dereference weak proxies and lazy modules
        if issubclass(cls, OpOverload):
            name = obj._name
            if name not in names and obj._schema.name not in bases:
                continue
        elif issubclass(cls, OpOverloadPacket):
            name = obj._qualified_op_name
            if name not in bases:
                continue
        else:
            continue
        ns, _, op = name.partition("::")
        stand_in = _Retired(template.format(name=name, ns=ns, op=op.split(".")[0]))
        vars(obj)["_op"] = stand_in
        if issubclass(cls, OpOverload):
            # _cpp_dispatch_handle and _op_dk are the other callables holding the
            # handle; _handle is a cached property that would look the name up again.
            for attr in ("_cpp_dispatch_handle", "_op_dk", "_handle"):
                vars(obj)[attr] = stand_in
            vars(obj)["_pyobj_dispatcher"] = None
        retired.append(obj)
    return retired


def reset_compiled_code() -> None:
    """Make torch.compile trace again: a compiled graph holds the op objects of the
    schema it was traced with. ``torch._dynamo.reset`` is public; it is called only
    when dynamo was imported (importing it costs seconds)."""
    import sys
    if "torch._dynamo" in sys.modules:
        torch._dynamo.reset()


def forget_schema_signatures(qualnames) -> None:
    """torch.fx keeps the Python signature of each operator schema it read, keyed by the
    operator's name and overload (``operator_schemas._SCHEMA_TO_SIGNATURE_CACHE``);
    inductor normalizes a traced call's arguments with it (torch 2.11), so after a schema
    change it would match them against the old schema and fail. Dropped for ``qualnames``
    (``ns::op``); nothing to do where torch.fx never read a schema."""
    import sys
    cache = getattr(sys.modules.get("torch.fx.operator_schemas"), "_SCHEMA_TO_SIGNATURE_CACHE", None)
    if not cache:
        return
    names = {q.split(".", 1)[0] for q in qualnames}
    for key in [k for k in cache if k[0] in names]:
        cache.pop(key, None)


def forget_argument_layout(function) -> None:
    """torch.compile keeps the argument layout of each Python function it traced, read
    from the function's code once and keyed by the function object (dynamo's
    ``_spec_cache``, torch 2.14): a function whose code the loader replaced in place on a
    reload (jit_tools/surface.py) would be traced with its old arguments. Dropped for that
    function; nothing to do where dynamo was never imported."""
    import sys
    cache = getattr(sys.modules.get("torch._dynamo.variables.functions"), "_spec_cache", None)
    if cache is not None:
        cache.pop(function, None)


def torchscript_users(qualnames) -> list[str]:
    """Names of the TorchScript functions and methods that call one of ``qualnames``.
    TorchScript resolves an operator once, at compile time, into a native handle that
    nothing can retire; such an operator must stay where it is. Looks at the functions
    of Python's compilation unit (scripted and traced functions and modules) and at
    every live ScriptModule (``torch.jit.load`` gives them a unit of their own)."""
    import gc
    bases = {q.split(".", 1)[0] for q in qualnames}
    found = []

    def scan(label, graph_text):
        if any(f"{b}(" in graph_text or f"{b}." in graph_text for b in bases):
            found.append(label)

    try:
        for fn in torch.jit._state._python_cu.get_functions():
            scan(fn.qualified_name, str(fn.graph))
    except (AttributeError, RuntimeError):
        pass
    script_module = torch.jit.ScriptModule
    for obj in gc.get_objects():
        if issubclass(type(obj), script_module):
            with contextlib.suppress(AttributeError, RuntimeError):
                for name in obj._c._method_names():
                    scan(f"{obj._c._type().qualified_name()}.{name}",
                         str(obj._c._get_method(name).graph))
    return sorted(set(found))
