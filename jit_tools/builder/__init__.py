"""The build speed-ups and the compiler around them: ``toolchain`` (which compilers, which
CUDA), ``ninja`` (torch's ``build.ninja``, Ninja, the first compiler error), ``shared``
(pieces built once per toolchain: precompiled headers, the gold probe, ccache) and
``nvcc_parallel`` (nvcc's host and device halves side by side)."""
