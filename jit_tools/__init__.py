"""The loader behind ``jit_loader``. The load path is the modules of this folder (one small
module per responsibility; ARCHITECTURE.md walks through them); ``builder/`` holds the
compiler toolchain and the build speed-ups, ``swap/`` the kernels swapped into a live
process, ``tools/`` the command line, the Jupyter extension, the op check and the
scaffold. The public API is the ``jit_loader`` module."""
