"""The loader behind ``jit_loader`` (one small module per responsibility; ARCHITECTURE.md
walks through them), its command line (``cli``), Jupyter extension (``notebook``) and
op check (``check``). The public API is the ``jit_loader`` module."""
