"""The errors the loader raises on purpose.

They cross process boundaries (``python -m jit_loader build`` workers, DDP start-up),
so each pickles with its attributes through ``__reduce__``.
"""

from __future__ import annotations


def _restore(cls, args, attrs):
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(attrs)
    return err


class JitLoaderError(RuntimeError):
    """Base class of every error the loader raises on purpose."""

    def __reduce__(self):
        # The default pickles only ``args``, so keyword-only constructors (BuildError)
        # fail to unpickle and attributes set after construction are lost.
        return _restore, (type(self), self.args, dict(self.__dict__))


class OpNotFoundError(JitLoaderError, LookupError):
    """No op folder of that name (the message lists the ones that exist)."""


class CacheError(JitLoaderError):
    """The cache directory cannot be used (missing permission, full disk...)."""


class CorruptBuild(JitLoaderError):
    """A cached library exists but cannot be loaded; it has been discarded."""


class SourcesChanged(JitLoaderError):
    """An input of a build changed while it compiled; the build was not published."""


class BuildError(JitLoaderError):
    """A compile or link failed.

    ``str(err).splitlines()[0]`` is the first compiler error as ``file:line: message``;
    ``err.log_path`` is the full build log; ``err.file``/``err.line`` locate it.
    """

    def __init__(self, message: str, *, log_path: str, file: str | None = None,
                 line: int | None = None, log: str = ""):
        super().__init__(message)
        self.log_path = log_path
        self.file = file
        self.line = line
        self.log = log
