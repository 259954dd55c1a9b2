"""The tools built on the load path: ``cli`` (``python -m jit_loader``), ``notebook``
(``%load_ext jit_loader``), ``check`` (``jit_loader.check``) and ``scaffold`` with
``op_schema`` and ``scaffold_schema`` (``python -m jit_loader new``)."""
