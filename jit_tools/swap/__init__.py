"""Kernels swapped into the live process instead of a build: ``hotswap`` (which edits
the load path swaps in), ``nvrtc`` (device code compiled with NVRTC) and ``kernels``
(the swap itself, through the CUDA driver)."""
