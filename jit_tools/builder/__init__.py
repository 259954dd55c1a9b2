"""The compiler and the build speed-ups around it: ``toolchain`` (which compilers, which
CUDA), ``ninja_file`` (the op's ``build.ninja`` from torch's flags and the pieces it uses),
``ninja`` (running Ninja, the first compiler error, publishing), ``shared`` (the store of
pieces built once per toolchain), ``speedups`` (precompiled headers, the gold probe,
ccache, the nvcc shim), ``nvcc_parallel`` (nvcc's host and device halves side by side)
and ``process_pieces`` (the pieces a process loads: the autograd kernel, the fast entry)."""
