"""The image operators: each one fused kernel launch (or the NumPy reference)."""

from __future__ import annotations

from typing import Any

import numpy

from . import _plan
from ._options import Norm
from ..core import runtime, use_stream
from ._parse import (CHANNELS, YUV, ImageFormatError, device_vector, out_dtype,
                     size as _size)

__all__ = ["crop_resize", "cvt_color", "denormalize", "letterbox", "normalize", "resize",
           "resize_normalize"]

#: The largest box coordinate crop_resize takes (float32 holds every whole pixel position
#: up to it).
_BOX_MAX = 2**24


def normalize(src: Any, *, mean: Any = None, std: Any = None, scale: float | None = None,
              norm: Norm | None = None, src_format: str | None = None,
              out_format: str | None = None, layout: str = "NCHW", dtype: Any = None,
              flip: bool = False, matrix: str = "bt601", full_range: bool = False, dst: Any = None,
              stream: Any = None) -> Any:
    """Frames -> normalized tensor in one pass: ``(x * scale - mean) / std`` per channel.

    ``(N, H, W, C)`` uint8 becomes ``(N, C, H, W)`` (``layout="NCHW"``) or
    ``(N, H, W, C)``; a single ``(H, W, C)`` frame gives ``(C, H, W)`` or
    ``(H, W, C)``.  With ``flip=True`` the image is mirrored horizontally.

    Parameters
    ----------
    src : darray
        uint8 frames (see :mod:`cuflow.image`).
    mean, std : float or sequence of float
        Per output channel (in ``out_format`` order), on the scale after
        ``scale``: ``out = (x * scale - mean) / std`` (default 0 and 1).
    scale : float
        Applied to the 0-255 value first (default ``1/255``, and 1 for a uint8
        output, which then keeps the 0-255 values).
    norm : Norm, optional
        ``mean``, ``std`` and ``scale`` as one :class:`Norm` (give one or the other).
    src_format : str, optional
        ``GRAY``, ``RGB``, ``BGR``, ``RGBA``, ``BGRA``, ``NV12`` or ``I420``.
    out_format : str, optional
        ``GRAY``, ``RGB`` or ``BGR`` (swap R and B by naming the other order);
        ``RGBA`` or ``BGRA`` only from an ``RGBA`` or ``BGRA`` source, whose
        alpha they carry: no alpha is added (GRAY, RGB, BGR, NV12 or I420 to
        RGBA raises :class:`ImageFormatError`).
    layout : {"NCHW", "NHWC"}
    dtype : {float32, float16, uint8}, optional
        Default: ``dst``'s dtype when ``dst`` is given, else float32.
    flip : bool
        Mirror horizontally.
    matrix, full_range :
        YUV sources only: ``"bt601"`` or ``"bt709"``, limited (16-235) or
        full (0-255) range.
    dst : darray, optional
        Output of exactly the result shape and dtype, C-contiguous, not
        overlapping the input; written and returned, nothing is allocated.
    stream : Stream, optional
        Where the kernel is queued (default: the current stream).

    Returns
    -------
    darray
        ``dst`` when given, else a new array: ``(N, C, H, W)`` or ``(N, H, W, C)`` (one frame:
        ``(C, H, W)`` or ``(H, W, C)``) of ``dtype``.

    Notes
    -----
    Stream semantics: asynchronous; one kernel queued on ``stream`` (or the
    current stream).  The source must not be modified until it has run.
    """
    return _plan.warp("normalize", src, interpolation="nearest", norm=norm, mean=mean, std=std,
                      scale=scale, src_format=src_format, out_format=out_format, layout=layout,
                      dtype=out_dtype(dtype, dst), flip=flip, matrix=matrix,
                      full_range=full_range, dst=dst, stream=stream)[0]


def resize_normalize(src: Any, size: int | tuple[int, int], *, interpolation: str = "bilinear",
                     mean: Any = None, std: Any = None, scale: float | None = None,
                     norm: Norm | None = None, src_format: str | None = None,
                     out_format: str | None = None, layout: str = "NCHW", dtype: Any = None,
                     flip: bool = False, matrix: str = "bt601", full_range: bool = False,
                     dst: Any = None, stream: Any = None) -> Any:
    """Resize to ``size`` and normalize in one pass (see :func:`normalize`).

    Parameters
    ----------
    src : darray
        uint8 frames (see :mod:`cuflow.image`).
    size : int or (int, int)
        Output ``(height, width)``.
    interpolation : {"bilinear", "nearest", "area"}
    mean, std, scale, norm, src_format, out_format, layout, dtype, flip, matrix, full_range :
        As for :func:`normalize`.
    dst : darray, optional
        Output of exactly the result shape and dtype, C-contiguous, not
        overlapping the input; written and returned, nothing is allocated.
    stream : Stream, optional
        Where the kernel is queued (default: the current stream).

    Returns
    -------
    darray
        ``dst`` when given, else a new array of ``size`` in ``layout`` and ``dtype``, as
        :func:`normalize` gives.

    Notes
    -----
    Stream semantics: asynchronous; one kernel queued on ``stream`` (or the
    current stream).  The source must not be modified until it has run.
    """
    return _plan.warp("resize_normalize", src, size=_size("resize_normalize", size),
                      interpolation=interpolation, norm=norm, mean=mean, std=std, scale=scale,
                      src_format=src_format, out_format=out_format, layout=layout,
                      dtype=out_dtype(dtype, dst), flip=flip, matrix=matrix,
                      full_range=full_range, dst=dst, stream=stream)[0]


def resize(src: Any, size: int | tuple[int, int], *, interpolation: str = "bilinear",
           src_format: str | None = None, out_format: str | None = None, matrix: str = "bt601",
           full_range: bool = False, dst: Any = None, stream: Any = None) -> Any:
    """Resize uint8 frames to ``size`` = ``(height, width)``: uint8 in the input's HWC layout.

    ``(N, H, W, C)`` gives ``(N, h, w, C')``: ``C'`` is ``out_format``'s channel count,
    by default the source's colours without alpha (an RGBA frame gives RGB; pass
    ``out_format="RGBA"`` to keep alpha).  YUV frames give packed RGB.  Rounded half to
    even, as torchvision does on CUDA tensors.

    Parameters
    ----------
    src : darray
        uint8 frames (see :mod:`cuflow.image`).
    size : int or (int, int)
        Output ``(height, width)``.
    interpolation : {"bilinear", "nearest", "area"}
    src_format, out_format, matrix, full_range :
        As for :func:`normalize`.
    dst : darray, optional
        uint8 output of exactly the result shape, C-contiguous, not
        overlapping the input; written and returned.
    stream : Stream, optional
        Where the kernel is queued (default: the current stream).

    Returns
    -------
    darray
        ``dst`` when given, else a new uint8 array: ``(N, h, w, C')`` (one frame: ``(h, w, C')``).

    Notes
    -----
    Stream semantics: asynchronous; one kernel queued on ``stream`` (or the
    current stream).  The source must not be modified until it has run.
    """
    return _plan.warp("resize", src, size=_size("resize", size), interpolation=interpolation,
                      src_format=src_format, out_format=out_format, layout="NHWC",
                      dtype=numpy.uint8, matrix=matrix, full_range=full_range,
                      identity_affine=True, dst=dst, stream=stream)[0]


def cvt_color(src: Any, src_format: str, out_format: str, *, matrix: str = "bt601",
              full_range: bool = False, dst: Any = None, stream: Any = None) -> Any:
    """Convert uint8 frames between colour formats; uint8 HWC out.

    Parameters
    ----------
    src : darray
        uint8 frames (see :mod:`cuflow.image`).
    src_format : str
        ``GRAY``, ``RGB``, ``BGR``, ``RGBA``, ``BGRA``, ``NV12`` or ``I420``.
    out_format : str
        ``GRAY``, ``RGB`` or ``BGR`` from any source; ``RGBA`` or ``BGRA`` only
        from an ``RGBA`` or ``BGRA`` source, whose alpha they carry: no alpha
        is added (GRAY, RGB, BGR, NV12 or I420 to RGBA raises
        :class:`ImageFormatError`).  GRAY uses BT.601 luma weights; GRAY to
        RGB repeats the gray value.
    matrix, full_range :
        YUV sources only: ``"bt601"`` or ``"bt709"``, limited (16-235,
        the default) or full (0-255) range.
    dst : darray, optional
        uint8 output of exactly the result shape, C-contiguous, not
        overlapping the input; written and returned.
    stream : Stream, optional
        Where the kernel is queued (default: the current stream).

    Returns
    -------
    darray
        ``dst`` when given, else a new uint8 HWC array of ``out_format``'s channels.

    Notes
    -----
    Stream semantics: asynchronous; one kernel queued on ``stream`` (or the
    current stream).  The source must not be modified until it has run.
    """
    if src_format is None or out_format is None:
        raise ImageFormatError(
            f"cuflow.image.cvt_color: src_format and out_format must both be given (src_format "
            f"one of {sorted(CHANNELS.keys() | YUV.keys())}, out_format one of "
            f"{sorted(CHANNELS)}), got src_format={src_format!r}, out_format={out_format!r}")
    return _plan.warp("cvt_color", src, interpolation="nearest", src_format=src_format,
                      out_format=out_format, layout="NHWC", dtype=numpy.uint8, matrix=matrix,
                      full_range=full_range, identity_affine=True, dst=dst, stream=stream)[0]


def letterbox(src: Any, size: int | tuple[int, int], *, pad: Any = 114,
              interpolation: str = "bilinear", mean: Any = None, std: Any = None,
              scale: float | None = None, norm: Norm | None = None, src_format: str | None = None,
              out_format: str | None = None, layout: str = "NCHW", dtype: Any = None,
              matrix: str = "bt601", full_range: bool = False, dst: Any = None,
              stream: Any = None) -> Any:
    """Aspect-preserving resize into ``size`` with constant padding, normalized (YOLO-style).

    The image is scaled by ``min(out_h / h, out_w / w)``, centred, and the
    border filled with ``pad`` (on the 0-255 scale, normalized like the
    pixels).  Returns ``(out, info)``; ``info.unmap_boxes`` maps detections
    back to source pixels.

    Parameters
    ----------
    src : darray
        uint8 frames (see :mod:`cuflow.image`).
    size : int or (int, int)
        Output ``(height, width)``.
    pad : float
        Border value before normalization (default 114, as YOLO).
    interpolation : {"bilinear", "nearest", "area"}
    mean, std, scale, norm, src_format, out_format, layout, dtype, matrix, full_range :
        As for :func:`normalize`.
    dst : darray, optional
        Output of exactly the result shape and dtype, C-contiguous, not
        overlapping the input; written and returned, nothing is allocated.
    stream : Stream, optional
        Where the kernel is queued (default: the current stream).

    Returns
    -------
    out : darray
    info : Letterbox

    Notes
    -----
    Stream semantics: asynchronous; one kernel queued on ``stream`` (or the
    current stream).  The source must not be modified until it has run.
    """
    out, plan = _plan.warp("letterbox", src, size=_size("letterbox", size), letterbox_pad=True,
                           interpolation=interpolation, norm=norm, mean=mean, std=std,
                           scale=scale, src_format=src_format, out_format=out_format,
                           layout=layout, dtype=out_dtype(dtype, dst), pad=pad, matrix=matrix,
                           full_range=full_range, dst=dst, stream=stream)
    return out, plan.info


def crop_resize(src: Any, boxes: Any, size: int | tuple[int, int], *, frame_index: Any = None,
                interpolation: str = "bilinear", mean: Any = None, std: Any = None,
                scale: float | None = None, norm: Norm | None = None, src_format: str | None = None,
                out_format: str | None = None, layout: str = "NCHW", dtype: Any = None,
                matrix: str = "bt601", full_range: bool = False, dst: Any = None,
                stream: Any = None) -> Any:
    """Many regions of interest -> one resized, normalized batch, in one launch.

    Output image ``k`` is box ``boxes[k] = (x1, y1, x2, y2)`` (source pixels,
    the box covering ``[x1, x2) x [y1, y2)``) of frame ``frame_index[k]``,
    resampled to ``size``.  Boxes may leave the frame: coordinates are
    clamped, so the border pixels repeat.  Frame indices outside
    ``[0, N)`` are clamped too (the kernel never reads outside the source).

    An inverted box samples the frame backwards: ``x2 < x1`` mirrors the
    crop horizontally and ``y2 < y1`` vertically (with bilinear sampling,
    ``[6, 6, 2, 2]`` gives ``[2, 2, 6, 6]`` turned by 180 degrees; nearest
    takes the pixel below each mirrored position, one further along;
    ``interpolation="area"`` samples a mirrored axis bilinearly, as an upscaled one); an
    empty box (``x1 == x2``) repeats one column.  Coordinates must be finite
    and within ``+-2**24`` (16777216: float32 holds every whole pixel position
    up to there, and the box's size and sampling positions, computed in
    float32, stay finite).  A box past that raises :class:`ImageFormatError`
    on the NumPy backend and when the boxes come from the host; device boxes on
    the GPU are not read back (checking them would synchronize the host), and
    such a crop's values are unspecified (NaN among them), but the kernel
    never reads memory outside the frame: check a detector's output with
    ``(cuflow.abs(boxes) <= 2**24).all()`` where it may hold such values.

    Parameters
    ----------
    src : darray
        uint8 frames (see :mod:`cuflow.image`).
    boxes : darray, numpy.ndarray or sequence
        ``(K, 4)`` real numbers (converted to float32), e.g. a detector's output on
        the device.  Boxes given on the host are copied to the device, and checked
        there for coordinates that are not finite or not within ``+-2**24``
        (device boxes are not read back).
    size : int or (int, int)
        Output ``(height, width)`` of every crop.
    frame_index : darray, numpy.ndarray or sequence, optional
        ``(K,)`` integers (converted to int32): the frame of each box (default:
        all from frame 0).  A real-valued array is refused, not truncated.  Indices
        given on the host must lie in ``[0, N)`` for ``N`` frames; indices on the device
        are not read back, and one outside that range reads the nearest frame.
    interpolation : {"bilinear", "nearest", "area"}
    mean, std, scale, norm, src_format, out_format, layout, dtype, matrix, full_range :
        As for :func:`normalize`.
    dst : darray, optional
        Output of exactly the result shape and dtype, C-contiguous, not
        overlapping the inputs; written and returned, nothing is allocated.
    stream : Stream, optional
        Where the kernel is queued (default: the current stream).

    Returns
    -------
    darray
        ``dst`` when given, else a new ``(K, C, h, w)`` (``layout="NCHW"``) or ``(K, h, w, C)``
        array of ``dtype``, one image per box.

    Notes
    -----
    Stream semantics: asynchronous; one kernel queued on ``stream`` (or the
    current stream), after any conversion of ``boxes`` or ``frame_index`` to
    float32 / int32 (queued there too).  The inputs must not be modified until
    it has run.
    """
    size = _size("crop_resize", size)
    rt = runtime()
    # boxes on the host are checked there (device boxes are not read back: no sync)
    on_host = not rt.is_gpu or not isinstance(boxes, rt.ndarray)
    given = boxes
    with use_stream(stream, "image.crop_resize"):  # conversions on the kernel's stream
        boxes = device_vector("crop_resize", "boxes", boxes, numpy.float32)
    if boxes.shape == (0,):  # no detections, as an empty list or array: no box
        boxes = boxes.reshape(0, 4)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ImageFormatError(f"cuflow.image.crop_resize: boxes must be (K, 4) x1, y1, x2, y2, "
                               f"got shape {boxes.shape}")
    if on_host:
        hb = numpy.asarray(given, dtype=numpy.float64).reshape(boxes.shape)  # (as given)
        # The kernel reads float32 coordinates and computes the box's size and sampling
        # positions in float32.  Within +-2**24 they stay finite, and an area cell's end
        # lies past its start (its weight is positive); past it a finite box's width may
        # overflow to inf, and its positions become NaN.  NaN fails the comparison too.
        with numpy.errstate(over="ignore", invalid="ignore"):
            ok = (numpy.abs(hb.astype(numpy.float32)) <= _BOX_MAX).all(axis=1)
        if not ok.all():
            bad = int(numpy.argwhere(~ok)[0, 0])
            raise ImageFormatError(f"cuflow.image.crop_resize: box coordinates must be finite "
                                   f"float32 values within +-2**24 ({_BOX_MAX}), box {bad} "
                                   f"is {hb[bad].tolist()}")
    frames_given = None  # frame indices on the host, checked against the frame count there
    if frame_index is not None:
        if not (rt.is_gpu and isinstance(frame_index, rt.ndarray)):
            frames_given = frame_index
        with use_stream(stream):
            frame_index = device_vector("crop_resize", "frame_index", frame_index, numpy.int32)
        if frame_index.shape != (boxes.shape[0],):
            raise ImageFormatError(f"cuflow.image.crop_resize: frame_index must be "
                                   f"({boxes.shape[0]},) like boxes, got {frame_index.shape}")
    return _plan.warp("crop_resize", src, size=size, rois=boxes, roi_frame=frame_index,
                      frames_given=frames_given,
                      interpolation=interpolation, norm=norm, mean=mean, std=std, scale=scale,
                      src_format=src_format, out_format=out_format, layout=layout,
                      dtype=out_dtype(dtype, dst), matrix=matrix, full_range=full_range,
                      dst=dst, stream=stream)[0]


def denormalize(src: Any, *, mean: Any = None, std: Any = None, scale: float | None = None,
                norm: Norm | None = None, layout: str | None = None, src_format: str = "RGB",
                out_format: str | None = None, dst: Any = None, stream: Any = None) -> Any:
    """Normalized float tensor -> uint8 ``(N, H, W, C)`` frames, rounded and clamped.

    Inverts :func:`normalize`: ``u8 = round(clamp((x * std + mean) / scale))``
    per channel, for visualizing model outputs.

    Parameters
    ----------
    src : darray
        float32 or float16 ``(N, C, H, W)`` / ``(C, H, W)`` (``layout="NCHW"``)
        or ``(N, H, W, C)`` / ``(H, W, C)``; C-contiguous.
    mean, std, scale, norm :
        As given to :func:`normalize` (per channel of ``src``).
    layout : {"NCHW", "NHWC"}, optional
        Default: NCHW.  When it is not given, a shape that reads as NHWC
        (``src_format``'s channel count last) is refused, so that NHWC input is
        never read as NCHW: ``(1, 3, 16, 3)`` fits both and needs ``layout=``.
    src_format : str, default "RGB"
        Channel order of ``src``.
    out_format : str, optional
        Channel order of the output; ``src_format`` when omitted.
    dst : darray, optional
        uint8 output of the result shape; written and returned.
    stream : Stream, optional
        Where the kernel is queued (default: the current stream).

    Returns
    -------
    darray
        ``dst`` when given, else a new uint8 ``(N, H, W, C)`` (one image: ``(H, W, C)``) array.

    Notes
    -----
    Stream semantics: asynchronous; one kernel queued on ``stream`` (or the
    current stream).  The source must not be modified until it has run.
    """
    return _plan.denorm(src, norm=norm, mean=mean, std=std, scale=scale, layout=layout,
                        src_format=src_format, out_format=out_format, dst=dst, stream=stream)
