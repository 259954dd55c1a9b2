"""LLTM: the recurrent cell of PyTorch's C++/CUDA extension tutorial (no forget gate,
ELU candidate), as a dispatcher op with CPU and CUDA kernels.

Files: ``lltm.cpp`` (schema, shared host composition, autograd), ``lltm_cpu.cpp`` (CPU
kernels), ``lltm_cuda.cpp`` (CUDA host side), ``lltm_cuda.cu`` (fused CUDA kernels),
``lltm.h`` (elementwise math shared by both kernel units), ``lltm.py`` (Python
surface: ``lltm``, ``LLTMFunction``, ``LLTM``), ``reference.py`` (pure-PyTorch oracle).

Importing this package builds nothing; ``jit_loader.load("lltm")`` does.
"""
