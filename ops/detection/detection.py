"""Python surface of the detection ops, with torchvision's semantics:

* ``nms(boxes, scores, iou_threshold)``: indices of the kept boxes, by decreasing score.
* ``batched_nms(boxes, scores, idxs, iou_threshold)``: NMS within each category.
* ``roi_align(input, boxes, output_size, spatial_scale=1.0, sampling_ratio=-1,
  aligned=False)``, differentiable in ``input``; also ``RoIAlignFunction`` and ``RoIAlign``.

The dispatcher ops are ``torch.ops.detection.{nms, batched_nms, roi_align,
roi_align_backward}``; they are looked up at call time, so handles given out earlier call
the newest build. Registered through ``LIB`` so that the loader can withdraw these
registrations when it reloads the op.

Behaviour worth knowing:

* Boxes are ``(x1, y1, x2, y2)``. Boxes are visited by a stable descending sort of the
  scores, as torchvision does: of two tied boxes the one with the lower index wins.
* NaN or infinite coordinates never crash. On the CPU they behave as in torchvision's CPU
  kernel (``std::max``/``std::min``, which return their first argument when one is NaN);
  on CUDA as in torchvision's CUDA kernel (``fmax``/``fmin``, which ignore a NaN).
  A zero-area box overlaps nothing (IoU 0, or 0/0 = NaN with an identical zero-area box,
  never above the threshold): for thresholds >= 0 it suppresses nothing and is never
  suppressed.
* On CUDA the overlap mask is built and reduced on the device; the one host sync left
  is reading the number of kept boxes, which sets the output's length.
* ``batched_nms`` compares only boxes of the same category inside the kernel. This gives
  the result of the coordinate-offset trick (torchvision's ``batched_nms``) without its
  loss of precision when offsets make the coordinates large.
* ROIAlign samples at non-finite positions count as outside the feature map (zero).
  A roi's batch index outside ``[0, N)`` is an error on the CPU; on CUDA it is not
  checked (that would need a sync) and the roi gives zeros.
* The CUDA backward of ROIAlign is deterministic (a gather, no atomics).
* Adaptive sampling (``sampling_ratio <= 0``) takes torchvision's ``ceil(bin)`` samples per
  bin and axis up to the map's length along that axis plus 2 (samples count one pixel
  beyond each border, so a longer bin is larger than the whole map). Every roi up to
  ``output_size`` times the map is sampled exactly as torchvision samples it; a longer one
  (a diverged box regressor's ``[0, 0, 0, 1e9, 1e9]``) is sampled at that many evenly
  spaced points: the same average over its bins at fewer points, at a cost of at most
  ``output_size**2`` passes over the map, where torchvision's 10^16 samples per bin never
  finish.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple, Union

import torch
from torch import Tensor

import jit_loader

jit_loader.load_library(__file__)

LIB = torch.library.Library("detection", "FRAGMENT")


def _check(cond: bool, message) -> None:
    torch._check(cond, message)


def _check_nms_fake(op: str, boxes, scores, idxs=None) -> None:
    # Before the data-dependent output length, which would hide a device mismatch.
    jit_loader.check_same_device(op, boxes=boxes, scores=scores, idxs=idxs)
    _check(boxes.dim() == 2 and boxes.shape[1] == 4,
           lambda: f"{op}: boxes must have shape (N, 4), got {tuple(boxes.shape)}")
    _check(scores.dim() == 1 and scores.shape[0] == boxes.shape[0],
           lambda: f"{op}: boxes and scores must have the same length, got {boxes.shape[0]} boxes "
                   f"and {tuple(scores.shape)} scores")


# nms has a data-dependent output length: the fake kernel returns an unbacked size, so
# torch.compile and opcheck can trace it without running it.
@torch.library.register_fake("detection::nms", lib=LIB)
def _nms_fake(boxes, scores, iou_threshold):
    _check_nms_fake("detection.nms", boxes, scores)
    kept = torch.library.get_ctx().new_dynamic_size()
    return boxes.new_empty((kept,), dtype=torch.long)


@torch.library.register_fake("detection::batched_nms", lib=LIB)
def _batched_nms_fake(boxes, scores, idxs, iou_threshold):
    _check_nms_fake("detection.batched_nms", boxes, scores, idxs)
    kept = torch.library.get_ctx().new_dynamic_size()
    return boxes.new_empty((kept,), dtype=torch.long)


# Shape functions of roi_align for torch.compile and opcheck.
@torch.library.register_fake("detection::roi_align", lib=LIB)
def _roi_align_fake(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    jit_loader.check_same_device("detection.roi_align", input=input, rois=rois)
    _check(input.dim() == 4, lambda: f"detection.roi_align: input must be a 4-D tensor, got {input.dim()}-D")
    _check(rois.dim() == 2 and rois.shape[1] == 5,
           lambda: f"detection.roi_align: rois must have shape (K, 5), got {tuple(rois.shape)}")
    return input.new_empty((rois.shape[0], input.shape[1], pooled_height, pooled_width))


@torch.library.register_fake("detection::roi_align_backward", lib=LIB)
def _roi_align_backward_fake(grad, rois, spatial_scale, pooled_height, pooled_width, batch_size,
                             channels, height, width, sampling_ratio, aligned):
    jit_loader.check_same_device("detection.roi_align_backward", grad=grad, rois=rois)
    return grad.new_empty((batch_size, channels, height, width))


# Gradients flow to input (not to the roi coordinates, as in torchvision). Served by the
# loader's C++ autograd kernel where it is built (no Python per call), else by
# register_autograd.
jit_loader.register_autograd_op(
    "detection::roi_align", "detection::roi_align_backward",
    ["grad", "rois", "spatial_scale", "pooled_height", "pooled_width", "input.shape[0]",
     "input.shape[1]", "input.shape[2]", "input.shape[3]", "sampling_ratio", "aligned"],
    gives="input", lib=LIB)
# The backward is linear in grad with the forward as its adjoint: this makes double
# backward (gradgradcheck, gradient penalties) work.
jit_loader.register_autograd_op(
    "detection::roi_align_backward", "detection::roi_align",
    ["grad", "rois", "spatial_scale", "pooled_height", "pooled_width", "sampling_ratio", "aligned"],
    gives="grad", lib=LIB)


# Resolved once per build (the loader runs this file again for every build), each called
# through the loader's fast entry (jit_loader.fast_op); an OpOverload outlives a reload.
_NMS = jit_loader.fast_op(torch.ops.detection.nms.default)
_BATCHED_NMS = jit_loader.fast_op(torch.ops.detection.batched_nms.default)
_ROI_ALIGN = jit_loader.fast_op(torch.ops.detection.roi_align.default)
_ROI_ALIGN_BACKWARD = jit_loader.fast_op(torch.ops.detection.roi_align_backward.default)


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Greedy non-maximum suppression, the twin of ``torchvision.ops.nms``.

    boxes: ``(N, 4)`` as ``x1, y1, x2, y2``; scores: ``(N,)``. Returns the int64 indices of
    the kept boxes by decreasing score: a box is dropped when its IoU with a kept box of
    higher score is greater than ``iou_threshold``.
    """
    return _NMS(boxes, scores, float(iou_threshold))


def batched_nms(boxes: Tensor, scores: Tensor, idxs: Tensor, iou_threshold: float) -> Tensor:
    """NMS within each category ``idxs`` (boxes of different categories never suppress each
    other); the twin of ``torchvision.ops.batched_nms``. Kept indices by decreasing score."""
    return _BATCHED_NMS(boxes, scores, idxs, float(iou_threshold))


def convert_boxes_to_roi_format(boxes: Sequence[Tensor]) -> Tensor:
    """A list of per-image ``(K_i, 4)`` boxes as one ``(sum K_i, 5)`` tensor of rois whose
    first column is the image index."""
    for i, b in enumerate(boxes):
        torch._check(isinstance(b, Tensor) and b.dim() == 2 and b.shape[1] == 4,
                     lambda: f"roi_align: boxes[{i}] must be a (K, 4) tensor, got "
                             f"{tuple(b.shape) if isinstance(b, Tensor) else type(b).__name__}")
    concat = torch.cat(list(boxes), dim=0)
    ids = torch.cat([torch.full((b.shape[0], 1), i, dtype=concat.dtype, device=concat.device)
                     for i, b in enumerate(boxes)], dim=0)
    return torch.cat([ids, concat], dim=1)


def _pair(output_size) -> Tuple[int, int]:
    if isinstance(output_size, int):
        return output_size, output_size
    height, width = output_size
    return int(height), int(width)


def roi_align(input: Tensor, boxes: Union[Tensor, List[Tensor]], output_size,
              spatial_scale: float = 1.0, sampling_ratio: int = -1, aligned: bool = False) -> Tensor:
    """ROIAlign (Mask R-CNN), the twin of ``torchvision.ops.roi_align``; differentiable in
    ``input``.

    input: ``(N, C, H, W)``; boxes: ``(K, 5)`` rois ``(batch_index, x1, y1, x2, y2)`` or a
    list of per-image ``(K_i, 4)`` boxes; output_size: ``int`` or ``(height, width)``.
    Box coordinates are multiplied by ``spatial_scale``; each output bin averages
    ``sampling_ratio`` x ``sampling_ratio`` bilinear samples (``ceil(bin size)`` per axis
    when ``sampling_ratio <= 0``). ``aligned=True`` shifts the box by half a pixel so that
    pixel centres line up (the corrected convention).
    """
    rois = boxes if isinstance(boxes, Tensor) else convert_boxes_to_roi_format(boxes)
    height, width = _pair(output_size)
    return _ROI_ALIGN(input, rois, float(spatial_scale), height, width, int(sampling_ratio),
                      bool(aligned))


class RoIAlignFunction(torch.autograd.Function):
    """The same op as an explicit autograd.Function (saves only the rois)."""

    @staticmethod
    def forward(ctx, input, rois, output_size, spatial_scale=1.0, sampling_ratio=-1, aligned=False):
        height, width = _pair(output_size)
        ctx.save_for_backward(rois)
        ctx.input_shape = tuple(input.shape)
        ctx.params = (float(spatial_scale), height, width, int(sampling_ratio), bool(aligned))
        return _ROI_ALIGN(input, rois, *ctx.params)

    @staticmethod
    def backward(ctx, grad):
        (rois,) = ctx.saved_tensors
        spatial_scale, height, width, sampling_ratio, aligned = ctx.params
        grad_input = _ROI_ALIGN_BACKWARD(
            grad, rois, spatial_scale, height, width, *ctx.input_shape, sampling_ratio, aligned)
        return grad_input, None, None, None, None, None


class RoIAlign(torch.nn.Module):
    """Drop-in for ``torchvision.ops.RoIAlign``."""

    def __init__(self, output_size, spatial_scale: float = 1.0, sampling_ratio: int = -1,
                 aligned: bool = False):
        super().__init__()
        self.output_size = _pair(output_size)
        self.spatial_scale = float(spatial_scale)
        self.sampling_ratio = int(sampling_ratio)
        self.aligned = bool(aligned)

    def forward(self, input: Tensor, rois: Union[Tensor, List[Tensor]]) -> Tensor:
        return roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio,
                         self.aligned)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
                f"sampling_ratio={self.sampling_ratio}, aligned={self.aligned}")
