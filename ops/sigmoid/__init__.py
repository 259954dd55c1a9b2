"""sigmoid: forward and backward (from the saved output) on CPU and CUDA.

Load with ``jit_loader.load("sigmoid")``; ``reference.py`` holds the plain-PyTorch
reference, importable without building anything.
"""
