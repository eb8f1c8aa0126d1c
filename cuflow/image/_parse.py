"""Input parsing: frame layouts (packed, NV12, I420), formats, sizes and their checks."""

from __future__ import annotations

import dataclasses
import math
import reprlib
from typing import Any

import numpy

from .._checks import is_integer
from .._errors import CuflowError
from ..core import runtime
from ..core._contract import parse_dtype

CHANNELS = {"GRAY": "L", "RGB": "RGB", "BGR": "BGR", "RGBA": "RGBA", "BGRA": "BGRA"}
YUV = {"NV12": 1, "I420": 2}
INTERP = {"nearest": 0, "bilinear": 1, "area": 2}
LAYOUTS = ("NCHW", "NHWC")
OUT_DTYPES = ("float32", "float16", "uint8")
#: the same as NumPy dtypes in the machine's byte order (a set test, where ``dtype.name``
#: runs Python code on every call)
_OUT_NATIVE = frozenset(numpy.dtype(n) for n in OUT_DTYPES)
#: Luma weights of RGB -> GRAY (ITU-R BT.601, as OpenCV's COLOR_RGB2GRAY).
GRAY = {"R": 0.299, "G": 0.587, "B": 0.114}
#: (Kr, Kb) of the YUV matrices.
MATRICES = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}


class ImageFormatError(CuflowError, ValueError):
    """A frame's shape, layout or format, or another argument's value, does not fit the
    operation."""


class ImageTypeError(CuflowError, TypeError):
    """An argument of the wrong type: an input (frames, boxes, frame indices) that is not an
    array of the active backend or has a dtype the operation does not take (frames that are
    not uint8), a flag that is not a bool.

    Problems with ``dst=`` raise the output contract's errors instead
    (:class:`cuflow.DstTypeError` and the other ``Dst*`` errors).
    """


def choice(name: str, what: str, value: Any, allowed) -> Any:
    try:  # (an array's comparison is no bool: refused too)
        ok = isinstance(value, str | int | float | type(None)) and value in allowed
    except (TypeError, ValueError):  # unhashable
        ok = False
    if not ok:
        raise ImageFormatError(f"cuflow.image.{name}: {what} must be one of "
                               f"{sorted(allowed)}, got {value!r}")
    return value


def per_channel(name: str, what: str, v, n: int) -> tuple[float, ...]:
    """``v`` (a scalar, or 1 or ``n`` values) as ``n`` floats."""
    vals = (float(v),) * n if numpy.ndim(v) == 0 else tuple(float(x) for x in v)
    if len(vals) == 1:
        vals *= n
    if len(vals) != n:
        raise ImageFormatError(f"cuflow.image.{name}: {what} needs "
                               f"{'1' if n == 1 else f'1 or {n}'} value{'s' * (n > 1)} (one per "
                               f"channel), got {len(vals)}: {v!r}")
    return vals


def out_dtype(dtype: Any, dst: Any) -> Any:
    """The output dtype: ``dtype``, else ``dst``'s (when it is one the kernels write), else
    float32 (and the output contract then explains what is wrong with ``dst``)."""
    if dtype is not None:
        return dtype
    dt = getattr(dst, "dtype", None)
    if dt in _OUT_NATIVE:
        return dt
    # (a dst of another byte order is not adopted: the output contract says what is wrong)
    return dt if dt is not None and dt.name in OUT_DTYPES and dt.isnative else numpy.float32


def checked_dtype(name: str, dtype: Any) -> numpy.dtype:
    """``dtype`` as a NumPy dtype the kernels write: one of OUT_DTYPES, in the machine's
    byte order."""
    dt = parse_dtype(dtype)
    if dt is None:
        raise ImageTypeError(f"cuflow.image.{name}: dtype must be one of {list(OUT_DTYPES)}, "
                             f"got {dtype!r}")
    choice(name, "dtype", dt.name, OUT_DTYPES)
    if not dt.isnative:  # (the kernels write the machine's byte order)
        raise ImageTypeError(f"cuflow.image.{name}: dtype must be in the machine's byte order, "
                             f"got {dt.str}")
    return dt


def is_real(value: Any) -> bool:
    """Whether ``value`` is one real number, Python's or NumPy's: not a bool (``True`` is a
    mistake, not 1), nor text (``"0.5"`` is not parsed)."""
    return isinstance(value, int | float | numpy.integer | numpy.floating) and not isinstance(
        value, bool | numpy.bool_)


def flag(name: str, what: str, value: Any) -> bool:
    """``value`` as a bool: True or False (or NumPy's); anything else is refused."""
    if isinstance(value, bool | numpy.bool_):
        return bool(value)
    raise ImageTypeError(f"cuflow.image.{name}: {what} must be True or False, got {value!r}")


#: the largest float32: the kernels take their parameters as float32
FLOAT32_MAX = float(numpy.finfo(numpy.float32).max)


def finite(name: str, what: str, value: Any) -> float:
    """``value`` as a float that is finite in float32, the kernels' parameter type (a NaN or
    infinite parameter cannot be meant, and one past float32's range becomes infinite)."""
    if not is_real(value):
        raise ImageTypeError(f"cuflow.image.{name}: {what} must be a real number, got "
                             f"{value!r}")
    try:
        v = float(value)
    except OverflowError:  # (a Python int past any float)
        v = math.inf
    if not abs(v) <= FLOAT32_MAX:
        raise ImageFormatError(f"cuflow.image.{name}: {what} must be finite in float32 (at "
                               f"most {FLOAT32_MAX:.6g} in magnitude), got "
                               f"{reprlib.repr(value)}")
    return v


#: the most rows of an output: the kernels' grid holds at most 65535 blocks along y, and a
#: block covers 4 rows or more
MOST_ROWS = 4 * 65535


def output_elements(name: str, oh: int, ow: int, oc: int) -> None:
    """Refuse an output image more than :data:`MOST_ROWS` rows high (the height of a source
    that an operator without ``size`` keeps; ``size`` itself is at most 65535), or of ``oh``
    x ``ow`` x ``oc`` elements past 2**31 (the warp kernel's offsets within one output
    image are 32-bit)."""
    if oh > MOST_ROWS:
        raise ImageFormatError(f"cuflow.image.{name}: an output image is at most {MOST_ROWS} "
                               f"rows high, got {oh} (the source's height); split the frame "
                               f"into bands")
    if oh * ow * oc >= 1 << 31:
        raise ImageFormatError(f"cuflow.image.{name}: an output image must have fewer than "
                               f"2**31 elements, got {oh} x {ow} x {oc}; resize in tiles")


def size(name: str, size) -> tuple[int, int]:
    if type(size) is int and 0 < size <= 65535:
        return size, size
    if type(size) is tuple and len(size) == 2 and type(size[0]) is int \
            and type(size[1]) is int and 0 < size[0] <= 65535 and 0 < size[1]:
        return size  # the common case, checked without conversions
    if is_integer(size):
        size = (size, size)
    if not (isinstance(size, tuple | list) and len(size) == 2 and all(map(is_integer, size))):
        # sizes are whole pixels: (10.9, 12.7) is refused rather than truncated
        raise ImageFormatError(f"cuflow.image.{name}: size must be an int or (height, width) "
                               f"of ints, got {size!r}")
    h, w = int(size[0]), int(size[1])
    if not (0 < h <= 65535 and 0 < w):
        raise ImageFormatError(f"cuflow.image.{name}: size must be positive with height <= "
                               f"65535, got {(h, w)}")
    return h, w


def yuv_coefficients(matrix: str, full_range: bool) -> tuple[float, ...]:
    """(ys, yoff, rv, gu, gv, bu): R = (Y - yoff) * ys + rv * (V - 128), and so on."""
    kr, kb = MATRICES[matrix]
    kg = 1.0 - kr - kb
    ys, yoff, cs = (1.0, 0.0, 1.0) if full_range else (255.0 / 219.0, 16.0, 255.0 / 224.0)
    return (ys, yoff, 2 * (1 - kr) * cs, 2 * kb * (1 - kb) / kg * cs, 2 * kr * (1 - kr) / kg * cs,
            2 * (1 - kb) * cs)


@dataclasses.dataclass
class Src:
    """A parsed source: its layout as the kernels address it."""

    arr: Any            # the (possibly copied) source array
    batched: bool
    N: int
    H: int
    W: int
    C: int              # packed channels (3 for YUV: what sampling yields)
    fmt: int            # 0 packed, 1 NV12, 2 I420
    colors: str         # channel letters of what sampling yields ("RGB", "BGRA", "L", ...)
    fstride: int        # bytes between frames
    rstride: int        # bytes between rows
    dense: bool         # frames and rows packed back to back
    copied: bool = False  # the input's layout needed a contiguous copy first


def parse_src(name: str, src, src_format: str | None) -> Src:
    b = runtime()
    if not isinstance(src, b.ndarray):
        raise ImageTypeError(
            f"cuflow.image.{name}: src must be an array of the active {b.name} backend, got "
            f"{type(src).__module__}.{type(src).__name__} (convert with cuflow.asarray)")
    if src.dtype != numpy.uint8:  # (a dtype problem is a TypeError, as NumPy's)
        raise ImageTypeError(f"cuflow.image.{name}: frames must be uint8, got {src.dtype}")
    if src_format is not None:  # checked first: a list is unhashable to the lookups below
        choice(name, "src_format", src_format, set(CHANNELS) | set(YUV))
    if src_format in YUV:
        if src.ndim not in (2, 3):
            raise ImageFormatError(
                f"cuflow.image.{name}: {src_format} frames are (H*3/2, W) or (N, H*3/2, W), got "
                f"shape {src.shape}")
        rows, W = src.shape[-2:]
        H = rows * 2 // 3
        if rows == 0 or W == 0:
            raise ImageFormatError(f"cuflow.image.{name}: frames need H, W > 0, got shape "
                                   f"{src.shape} ({src_format}: H={H}, W={W})")
        if rows % 3 or H % 2 or W % 2:
            raise ImageFormatError(
                f"cuflow.image.{name}: {src_format} frames need an even height and width, so "
                f"(H*3/2, W) with H*3/2 divisible by 3; got shape {src.shape}")
        copied = not src.flags.c_contiguous
        if copied:
            src = b.xp.ascontiguousarray(src)
        batched = src.ndim == 3
        return Src(src, batched, src.shape[0] if batched else 1, H, W, 3, YUV[src_format],
                   "RGB", rows * W, W, True, copied)
    if src.ndim not in (3, 4):
        raise ImageFormatError(
            f"cuflow.image.{name}: packed frames are (H, W, C) or (N, H, W, C) with C in "
            f"(1, 3, 4), got shape {src.shape}" + (" (pass src_format='NV12' or 'I420' for YUV "
                                                   "frames)" if src.ndim == 2 else ""))
    H, W, C = src.shape[-3:]
    if C not in (1, 3, 4) or H == 0 or W == 0:
        chw = C not in (1, 3, 4) and H in (1, 3, 4) and W and C
        raise ImageFormatError(f"cuflow.image.{name}: frames need H, W > 0 and C in (1, 3, 4), "
                               f"got shape {src.shape}" + (
                                   "; it reads as CHW, and cuflow.image takes HWC: move the "
                                   "channels last (cuflow.moveaxis(x, -3, -1))" if chw else ""))
    if src_format is None:
        if H in (1, 3, 4):
            # (3, 16, 4) is a 3 x 16 RGBA frame or a CHW frame of 3 channels: the shape
            # cannot tell, and a CHW frame read as HWC gives wrong pixels without an error
            raise ImageFormatError(
                f"cuflow.image.{name}: frames of shape {src.shape} may be HWC (C={C}) or CHW "
                f"(C={H}); cuflow.image takes HWC: pass src_format= to say so, or move the "
                "channels last first (cuflow.moveaxis(x, -3, -1))")
        src_format = {1: "GRAY", 3: "RGB", 4: "RGBA"}[C]
    colors = CHANNELS[src_format]
    if len(colors) != C:
        raise ImageFormatError(f"cuflow.image.{name}: src_format={src_format!r} has "
                               f"{len(colors)} channels but the frames have C={C}" +
                               (" (cuflow.image takes HWC frames, not CHW)"
                                if H == len(colors) else ""))
    st = src.strides
    copied = st[-1] != 1 or st[-2] != C or st[-3] < W * C or (src.ndim == 4 and
                                                               st[0] < H * st[-3])
    if copied:
        src = b.xp.ascontiguousarray(src)
        st = src.strides
    batched = src.ndim == 4
    fstride = st[0] if batched else H * st[-3]
    dense = st[-3] == W * C and fstride == H * W * C
    return Src(src, batched, src.shape[0] if batched else 1, H, W, C, 0, colors, fstride,
               st[-3], dense, copied)


def out_map(name: str, s: Src, out_format: str | None) -> tuple[str, list[int], bool, list]:
    """Output channel letters, the source channel of each, gray flag and gray weights."""
    if out_format is None:
        out_format = {"L": "GRAY", "RGB": "RGB", "BGR": "BGR", "RGBA": "RGB",
                      "BGRA": "BGR"}[s.colors]
    choice(name, "out_format", out_format, set(CHANNELS))
    letters = CHANNELS[out_format]
    if letters == "L" and s.colors != "L":
        gw = [0.0, 0.0, 0.0]
        for i, ch in enumerate(s.colors[:3]):
            gw[i] = GRAY[ch]
        return letters, [0], True, gw
    if s.colors == "L":
        if "A" in letters:
            raise ImageFormatError(f"cuflow.image.{name}: a GRAY source has no alpha for "
                                   f"out_format={out_format!r}")
        return letters, [0] * len(letters), False, [0.0, 0.0, 0.0]
    missing = [ch for ch in letters if ch not in s.colors]
    if missing:
        raise ImageFormatError(f"cuflow.image.{name}: out_format={out_format!r} needs channel(s) "
                               f"{missing} that src ({s.colors}) does not have")
    return letters, [s.colors.index(ch) for ch in letters], False, [0.0, 0.0, 0.0]


def out_shape(batched: bool, n: int, oh: int, ow: int, oc: int,
              layout: str) -> tuple[int, ...]:
    img = (oc, oh, ow) if layout == "NCHW" else (oh, ow, oc)
    return (n, *img) if batched else img


def device_vector(name, what, x, dtype):
    """``x`` (an array of the backend, or a NumPy array or sequence on the host) as a
    C-contiguous vector of ``dtype`` on the backend.

    Integers take integer arrays only, reals integer or real ones: a frame index of 1.9
    is refused rather than truncated.  Host input is copied to the device (boxes and
    frame indices are small).
    """
    rt = runtime()
    if not isinstance(x, rt.ndarray):
        if isinstance(x, numpy.ndarray | list | tuple):
            try:  # (an empty list is of the dtype asked for, not NumPy's float64)
                empty = isinstance(x, list | tuple) and not x
                x = numpy.asarray(x, dtype=dtype if empty else None)
            except ValueError as e:  # ragged
                raise ImageFormatError(f"cuflow.image.{name}: {what} must be a rectangular "
                                       f"array of numbers: {e}") from e
        else:
            raise ImageTypeError(f"cuflow.image.{name}: {what} must be an array of the active "
                                 f"{rt.name} backend, a NumPy array or a sequence, got "
                                 f"{type(x).__name__}")
    kinds = "iu" if numpy.dtype(dtype).kind in "iu" else "iuf"
    if x.dtype.kind not in kinds:
        raise ImageTypeError(f"cuflow.image.{name}: {what} must be an array of "
                             f"{'integers' if kinds == 'iu' else 'real numbers'}, got dtype "
                             f"{x.dtype}")
    if isinstance(x, numpy.ndarray):  # on the host: checked here, where it costs no sync
        dt = numpy.dtype(dtype)
        if dt.kind in "iu" and x.size:
            lo, hi, info = x.min(), x.max(), numpy.iinfo(dt)
            if lo < info.min or hi > info.max:  # a cast would wrap them to other values
                raise ImageFormatError(f"cuflow.image.{name}: {what} must fit {dt}, got values "
                                       f"from {lo} to {hi}")
        with numpy.errstate(over="ignore"):  # a real past dt's range becomes inf: the
            # callers refuse non-finite values (asarray keeps a 0-d array 0-d, for the
            # callers' shape checks; ascontiguousarray would make it (1,))
            x = numpy.asarray(x, dtype=dt, order="C")
        return x if rt.xp is numpy else rt.xp.asarray(x)
    if x.dtype != dtype or not x.flags.c_contiguous:
        x = rt.xp.ascontiguousarray(x, dtype=dtype)  # a small conversion kernel
    return x
