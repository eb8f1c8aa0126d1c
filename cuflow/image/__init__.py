"""Fused image pre- and post-processing: one kernel launch per call.

Every function here reads 8-bit frames once and writes its output once:
colour conversion (packed RGB/BGR/RGBA/BGRA/GRAY, NV12, I420), resampling
(nearest, bilinear, area), letterboxing, per-channel normalization
``(x * scale - mean) / std``, horizontal flip, layout (NCHW or NHWC) and the
output dtype (float32, float16 or uint8) all happen in the same pass
(``raw_kernels/image.cu``).  The NumPy backend runs the reference in
:mod:`cuflow.image._reference`, which the GPU tests compare the kernels against.

Frames
------
Packed frames are ``(H, W, C)`` or a batch ``(N, H, W, C)`` of uint8, with
pixels and channels contiguous (rows and frames may be strided, so crops of a
larger frame need no copy; anything else is copied first).  NV12 and I420
frames are ``(H * 3 // 2, W)`` or ``(N, H * 3 // 2, W)`` uint8 as video
decoders produce them (luma rows, then the chroma rows), H and W even.
``src_format`` names the channel order (default: ``GRAY``, ``RGB`` or ``RGBA``
by channel count); ``out_format`` the order of the output channels (default:
the source's colours without alpha; ``RGB`` for YUV sources).  An ``RGBA`` or
``BGRA`` output needs a source with alpha (``RGBA`` or ``BGRA``): alpha is
carried, never added.  A packed frame
whose height is 1, 3 or 4, such as ``(3, 16, 4)``, may be a CHW frame: it is
refused unless ``src_format`` is given, which states the HWC reading.

Errors
------
Every error is a :class:`cuflow.CuflowError`: :class:`ImageFormatError` (also a
``ValueError``) for a value that breaks a rule, :class:`ImageTypeError` (also a
``TypeError``) for an argument of the wrong type or dtype (frames that are not uint8,
a ``denormalize`` source that is not float32 or float16).  Sizes are ints (``10.9`` is
refused, not truncated); ``pad``, ``mean``, ``std`` and ``scale`` are finite real
numbers (not bools or text), ``std`` and ``scale`` non-zero (see :class:`Norm`); ``flip`` and
``full_range`` are bools.

Conventions
-----------
torchvision's (PyTorch's ``interpolate`` with ``align_corners=False``):
bilinear samples at ``(dst + 0.5) * in / out - 0.5`` clamped to the frame;
nearest at ``floor(dst * in / out)`` with ``in / out`` in float32, as PyTorch's
nearest (an exact integer division differs for some sizes: 28 rows to 46 take row 13,
not 14, for row 23); ``area`` averages the source box with
fractional edge weights (OpenCV's INTER_AREA) and is bilinear along an axis
that is upscaled.  Sizes are ``(height, width)``.  uint8 outputs are rounded
half to even and clamped; float outputs are not clamped.  YUV frames are
resampled as Y, U and V, the chroma upsampled to the luma grid by replication,
then converted to RGB and clamped to its range once per output pixel: the same
as converting the frame first and resampling its RGB, except near colours
outside the RGB range, which are clamped after resampling rather than before.

Where these differ from other libraries:

- ``size`` as one int is a square, ``(size, size)``, where torchvision's ``resize(img,
  224)`` scales the shorter side; no resampling antialiases (torchvision's
  ``antialias=False``): downscale by large factors with ``"area"``.
- ``"nearest"`` is PyTorch's legacy nearest above, not OpenCV's ``INTER_NEAREST``, and
  ``"area"`` on an upscaled axis is bilinear, where OpenCV's ``INTER_AREA`` differs; with
  ``flip=True`` the output is mirrored after resampling.
- A ``crop_resize`` box ``(x1, y1, x2, y2)`` is in source pixels and half-open: a box of
  whole pixels crops as ``frame[y1:y2, x1:x2]`` does, and the bilinear result is
  torchvision's ``roi_align`` with ``aligned=True`` and ``sampling_ratio=1``.
- Limited-range YUV decodes ``Y - 16`` as it is, below 16 too (FFmpeg's rule; OpenCV
  clamps it at 0, so the two differ on the darkest pixels).  ``GRAY`` from a YUV frame is
  the gray of the decoded RGB (BT.601 weights), not the Y plane: for the luma alone, take
  the frame's first ``H`` rows.
- :class:`Letterbox`'s ``scale`` is the gain before the resized size is rounded to whole
  pixels; :meth:`Letterbox.unmap_boxes` maps boxes back exactly.

Limits (the kernels' grid): at most 65535 frames (or boxes) per call, a ``size`` at most
65535 rows high, and a source that an operator without ``size`` keeps the height of at most
262140 rows; split larger batches and frames.

Options
-------
``mean``, ``std`` and ``scale`` may be given together as a :class:`Norm`
(``norm=Norm(MEAN, STD)``).  An operator with ``dtype=`` writes ``dst``'s
dtype when ``dst`` is given and ``dtype`` is not (float32 when neither is).

Tolerances (checked by the tests): float32 outputs match the NumPy reference
within ``1e-3 * max|a|`` (``a = scale / std``, the 0-255-scale step), float16
within that plus one float16 rounding, uint8 within 1.
"""

from ._ops import (crop_resize, cvt_color, denormalize, letterbox, normalize, resize,
                   resize_normalize)
from ._options import Norm
from ._parse import ImageFormatError, ImageTypeError
from ._plan import Letterbox

__all__ = [
    "ImageFormatError",
    "ImageTypeError",
    "Letterbox",
    "Norm",
    "crop_resize",
    "cvt_color",
    "denormalize",
    "letterbox",
    "normalize",
    "resize",
    "resize_normalize",
]
