"""The ``jit_loader`` logger: messages about waits, rebuilds and CPU-only builds.

Until the application configures logging, they go to stderr as ``jit_loader: ...``
(what users saw before logging was used). Once the root logger has a handler, they
reach it by propagation only, formatted as the application wants.
"""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger("jit_loader")


class _StderrUnlessConfigured(logging.Handler):
    """Writes to the current ``sys.stderr`` (which Jupyter and pytest replace), and
    stays silent when the root logger has handlers, so nothing is printed twice."""

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:
            return
        try:
            sys.stderr.write(f"jit_loader: {self.format(record)}\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)


if not any(isinstance(h, _StderrUnlessConfigured) for h in logger.handlers):
    logger.addHandler(_StderrUnlessConfigured(logging.INFO))
if logger.level == logging.NOTSET:
    logger.setLevel(logging.INFO)
