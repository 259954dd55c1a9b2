"""detection: NMS, batched NMS and ROIAlign with torchvision's semantics, on CPU and CUDA.

Load with ``jit_loader.load("detection")``; ``reference.py`` holds the plain-PyTorch
references, importable without building anything.
"""
