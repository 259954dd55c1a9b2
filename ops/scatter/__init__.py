"""scatter: PyTorch Geometric's scatter reductions (sum, mean, max, min along a dim into
index positions) as a dispatcher op with CPU and CUDA kernels and C++ autograd.

Files: ``scatter.cpp`` (schema, shared host composition, autograd), ``scatter_cpu.cpp``
(CPU kernels), ``scatter_cuda.cpp`` (CUDA host side: route choice, checks, launches),
``scatter_cuda.cu`` (torch-free kernels), ``scatter.h`` (index math shared by both kernel
units), ``scatter.py`` (Python surface), ``reference.py`` (loop and torch references).

Importing this package builds nothing; ``jit_loader.load("scatter")`` does.
"""
