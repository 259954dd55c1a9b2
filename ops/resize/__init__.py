"""resize: bilinear resize with a selectable pixel convention (half_pixel, align_corners,
asymmetric), forward and deterministic backward on CPU and CUDA.

Load with ``jit_loader.load("resize")``; ``reference.py`` holds the plain NumPy/PyTorch
reference, importable without building anything.
"""
