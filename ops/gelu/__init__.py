"""gelu: the sigmoid approximation x * sigmoid(1.702 x), forward and backward (from
the saved input) on CPU and CUDA.

Load with ``jit_loader.load("gelu")``; ``reference.py`` holds the plain-PyTorch
reference, importable without building anything.
"""
