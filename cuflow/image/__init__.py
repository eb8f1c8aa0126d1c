"""Fused image pre- and post-processing: one kernel launch per call.

Every function here reads 8-bit frames once and writes its output once:
colour conversion (packed RGB/BGR/RGBA/BGRA/GRAY, NV12, I420), resampling
(nearest, bilinear, area), letterboxing, per-channel normalization
``(x * scale - mean) / std``, horizontal flip, layout (NCHW or NHWC) and the
output dtype (float32, float16 or uint8) all happen in the same pass
(``raw_kernels/image.cu``).  The NumPy backend runs the reference in
:mod:`cuflow._image_ref`, which the GPU tests compare the kernels against.

Frames
------
Packed frames are ``(H, W, C)`` or a batch ``(N, H, W, C)`` of uint8, with
pixels and channels contiguous (rows and frames may be strided, so crops of a
larger frame need no copy; anything else is copied first).  NV12 and I420
frames are ``(H * 3 // 2, W)`` or ``(N, H * 3 // 2, W)`` uint8 as video
decoders produce them (luma rows, then the chroma rows), H and W even.
``src_format`` names the channel order (default: ``GRAY``, ``RGB`` or ``RGBA``
by channel count); ``out_format`` the order of the output channels (default:
the source's colours without alpha; ``RGB`` for YUV sources).

Conventions
-----------
torchvision's (PyTorch's ``interpolate`` with ``align_corners=False``):
bilinear samples at ``(dst + 0.5) * in / out - 0.5`` clamped to the frame;
nearest at ``floor(dst * in / out)``; ``area`` averages the source box with
fractional edge weights (OpenCV's INTER_AREA) and is bilinear along an axis
that is upscaled.  Sizes are ``(height, width)``.  uint8 outputs are rounded
half to even and clamped; float outputs are not clamped.  YUV frames are
resampled as Y, U and V, the chroma upsampled to the luma grid by replication,
then converted to RGB and clamped to its range once per output pixel: the same
as converting the frame first and resampling its RGB, except near colours
outside the RGB range, which are clamped after resampling rather than before.

Tolerances (checked by the tests): float32 outputs match the NumPy reference
within ``1e-3 * max|a|`` (``a = scale / std``, the 0-255-scale step), float16
within that plus one float16 rounding, uint8 within 1.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Callable
from typing import Any

import numpy

from . import _reference as _image_ref
from ..core import runtime, use_stream
from ..core._runtime import get_backend
from ..core._contract import prepare_out
from .._errors import CuflowError, DstDtypeError, DstError, DstTypeError
from ..core._streams import as_cupy_stream
from ..raw_kernels import _launch  # its launch is looked up per call (cuflow.debug wraps it)
from ..raw_kernels._registry import LIN_SOURCES, VEC_CHANNELS, vec_run

__all__ = ["ImageFormatError", "Letterbox", "crop_resize", "cvt_color", "denormalize", "letterbox", "normalize",
           "resize", "resize_normalize"]

# --------------------------------------------------------------------------- options
_CHANNELS = {"GRAY": "L", "RGB": "RGB", "BGR": "BGR", "RGBA": "RGBA", "BGRA": "BGRA"}
_YUV = {"NV12": 1, "I420": 2}
_INTERP = {"nearest": 0, "bilinear": 1, "area": 2}
_LAYOUTS = ("NCHW", "NHWC")
_OUT_DTYPES = ("float32", "float16", "uint8")
#: Luma weights of RGB -> GRAY (ITU-R BT.601, as OpenCV's COLOR_RGB2GRAY).
_GRAY = {"R": 0.299, "G": 0.587, "B": 0.114}
#: (Kr, Kb) of the YUV matrices.
_MATRICES = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}


class ImageFormatError(CuflowError, ValueError):
    """A frame's shape, dtype, layout or format does not fit the operation."""


def _choice(name: str, what: str, value: Any, allowed) -> Any:
    if value not in allowed:
        raise ImageFormatError(f"cuflow.image.{name}: {what} must be one of "
                               f"{sorted(allowed)}, got {value!r}")
    return value


def _per_channel(name: str, what: str, v, n: int) -> tuple[float, ...]:
    vals = (float(v),) * n if numpy.ndim(v) == 0 else tuple(float(x) for x in v)
    if len(vals) == 1:
        vals *= n
    if len(vals) != n:
        raise ImageFormatError(f"cuflow.image.{name}: {what} needs 1 or {n} values (one per "
                               f"output channel), got {len(vals)}: {v!r}")
    if not all(math.isfinite(x) for x in vals):
        raise ImageFormatError(f"cuflow.image.{name}: {what} must be finite, got {v!r}")
    return vals


@dataclasses.dataclass(frozen=True)
class _Affine:
    """``out = v * a[c] + b[c]`` per output channel (``v`` on the 0-255 scale)."""

    a: tuple[float, ...]
    b: tuple[float, ...]

    @classmethod
    def normalization(cls, name: str, mean, std, scale, n: int) -> _Affine:
        m = _per_channel(name, "mean", mean, n)
        s = _per_channel(name, "std", std, n)
        if any(x == 0 for x in s):
            raise ImageFormatError(f"cuflow.image.{name}: std must be non-zero, got {std!r}")
        sc = float(scale)
        return cls(tuple(sc / x for x in s), tuple(-mu / x for mu, x in zip(m, s, strict=True)))

    def padded(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        return self.a + (1.0,) * (4 - len(self.a)), self.b + (0.0,) * (4 - len(self.b))


_IDENTITY = {n: _Affine((1.0,) * n, (0.0,) * n) for n in (1, 3, 4)}


def _size(name: str, size) -> tuple[int, int]:
    if type(size) is tuple and len(size) == 2 and type(size[0]) is int \
            and type(size[1]) is int and 0 < size[0] <= 65535 and 0 < size[1]:
        return size  # the common case, checked without conversions
    if isinstance(size, int | numpy.integer):
        size = (size, size)
    try:
        h, w = (int(s) for s in size)
    except (TypeError, ValueError):
        raise ImageFormatError(f"cuflow.image.{name}: size must be an int or (height, width), "
                               f"got {size!r}") from None
    if not (0 < h <= 65535 and 0 < w):
        raise ImageFormatError(f"cuflow.image.{name}: size must be positive with height <= "
                               f"65535, got {(h, w)}")
    return h, w


def _yuv_coefficients(matrix: str, full_range: bool) -> tuple[float, ...]:
    """(ys, yoff, rv, gu, gv, bu): R = (Y - yoff) * ys + rv * (V - 128), and so on."""
    kr, kb = _MATRICES[matrix]
    kg = 1.0 - kr - kb
    ys, yoff, cs = (1.0, 0.0, 1.0) if full_range else (255.0 / 219.0, 16.0, 255.0 / 224.0)
    return (ys, yoff, 2 * (1 - kr) * cs, 2 * kb * (1 - kb) / kg * cs, 2 * kr * (1 - kr) / kg * cs,
            2 * (1 - kb) * cs)


# --------------------------------------------------------------------------- frames
@dataclasses.dataclass
class _Src:
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


def _parse_src(name: str, src, src_format: str | None) -> _Src:
    b = get_backend()
    if not isinstance(src, b.ndarray):
        raise DstTypeError(
            f"cuflow.image.{name}: src must be an array of the active {b.name} backend, got "
            f"{type(src).__module__}.{type(src).__name__} (convert with cuflow.asarray)")
    if src.dtype != numpy.uint8:
        raise ImageFormatError(f"cuflow.image.{name}: frames must be uint8, got {src.dtype}")
    if src_format in _YUV:
        if src.ndim not in (2, 3):
            raise ImageFormatError(
                f"cuflow.image.{name}: {src_format} frames are (H*3/2, W) or (N, H*3/2, W), got "
                f"shape {src.shape}")
        rows, W = src.shape[-2:]
        H = rows * 2 // 3
        if rows % 3 or H % 2 or W % 2 or H == 0:
            raise ImageFormatError(
                f"cuflow.image.{name}: {src_format} frames need an even height and width, so "
                f"(H*3/2, W) with H*3/2 divisible by 3; got shape {src.shape}")
        copied = not src.flags.c_contiguous
        if copied:
            src = b.xp.ascontiguousarray(src)
        batched = src.ndim == 3
        return _Src(src, batched, src.shape[0] if batched else 1, H, W, 3, _YUV[src_format],
                    "RGB", rows * W, W, True, copied)
    if src.ndim not in (3, 4):
        raise ImageFormatError(
            f"cuflow.image.{name}: packed frames are (H, W, C) or (N, H, W, C) with C in "
            f"(1, 3, 4), got shape {src.shape}" + (" (pass src_format='NV12' or 'I420' for YUV "
                                                   "frames)" if src.ndim == 2 else ""))
    H, W, C = src.shape[-3:]
    if C not in (1, 3, 4) or H == 0 or W == 0:
        raise ImageFormatError(f"cuflow.image.{name}: frames need H, W > 0 and C in (1, 3, 4), "
                               f"got shape {src.shape}")
    if src_format is None:
        src_format = {1: "GRAY", 3: "RGB", 4: "RGBA"}[C]
    _choice(name, "src_format", src_format, set(_CHANNELS) | set(_YUV))
    colors = _CHANNELS[src_format]
    if len(colors) != C:
        raise ImageFormatError(f"cuflow.image.{name}: src_format={src_format!r} has "
                               f"{len(colors)} channels but the frames have C={C}")
    st = src.strides
    copied = st[-1] != 1 or st[-2] != C or st[-3] < W * C or (src.ndim == 4 and
                                                               st[0] < H * st[-3])
    if copied:
        src = b.xp.ascontiguousarray(src)
        st = src.strides
    batched = src.ndim == 4
    fstride = st[0] if batched else H * st[-3]
    dense = st[-3] == W * C and fstride == H * W * C
    return _Src(src, batched, src.shape[0] if batched else 1, H, W, C, 0, colors, fstride,
                st[-3], dense, copied)


def _out_map(name: str, s: _Src, out_format: str | None) -> tuple[str, list[int], bool, list]:
    """Output channel letters, the source channel of each, gray flag and gray weights."""
    if out_format is None:
        out_format = {"L": "GRAY", "RGB": "RGB", "BGR": "BGR", "RGBA": "RGB",
                      "BGRA": "BGR"}[s.colors]
    _choice(name, "out_format", out_format, set(_CHANNELS))
    letters = _CHANNELS[out_format]
    if letters == "L" and s.colors != "L":
        gw = [0.0, 0.0, 0.0]
        for i, ch in enumerate(s.colors[:3]):
            gw[i] = _GRAY[ch]
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


def _out_shape(batched: bool, n: int, oh: int, ow: int, oc: int,
               layout: str) -> tuple[int, ...]:
    img = (oc, oh, ow) if layout == "NCHW" else (oh, ow, oc)
    return (n, *img) if batched else img


def _prepare_dst(name: str, dst, shape, dtype, src_arrays):
    b = get_backend()
    if dst is None:
        return b.xp.empty(shape, dtype).view(b.darray)
    prepare_out(f"image.{name}", dst, shape, dtype, inputs=src_arrays, casting="no",
                overlap="refuse", contiguous=True)
    return dst


# --------------------------------------------------------------------------- launch
_NORM = struct.Struct("=QQqqi4i4f4fi")
_WARP = struct.Struct("=QQQQqqq4q16i4i4ii20f")
_DENORM = struct.Struct("=QQqq3i4i4f4fi")
# CF_WARP_PX / CF_WARP_PX_YUV of image.cu: output pixels per thread of cf_warp for packed
# and YUV sources (a warp covers 32 of them in a row, a block 4 rows); CF_LIN_PX and
# CF_LIN_ROWS: cf_resize_lin's pixels per thread in a row, and rows per thread;
# CF_NV12_ROWS: cf_resize_nv12's rows per thread (it has two columns per thread).
_WARP_PX = {0: 2, 1: 4, 2: 4}
_LIN_PX, _LIN_ROWS = 1, 4
_NV12_ROWS = 2
_PLANS: dict[tuple, Any] = {}  # _Plan and _DenormPlan, keyed by operator name and options
_MAX_PLANS = 512


def _cached_plan(key: tuple, build: Callable[[], Any]) -> Any:
    """The plan cached under ``key``, else ``build()`` (cached unless ``key`` is unhashable)."""
    try:
        plan = _PLANS.get(key)
    except TypeError:  # unhashable options (lists, arrays): no caching
        return build()
    if plan is None:
        plan = build()
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


@dataclasses.dataclass
class _Plan:
    """Everything about one call that does not depend on the arrays' addresses.

    Built (and validated) once per distinct combination of shapes and
    options, then reused: a steady-state call only checks ``dst``, packs
    the pointers and launches.
    """

    name: str
    src: _Src           # parsed source layout (``arr`` dropped: each call passes its own)
    shape: tuple[int, ...]
    dtype: numpy.dtype
    p: dict[str, Any]   # the kernel's fields by name (the reference reads these)
    warp: tuple         # cf_warp (and cf_resize_lin) fields after their four pointers
    warp_entry: str     # cf_warp instantiation for the source format and channels
    lin_entry: str | None  # cf_resize_lin instantiation, when it applies
    lin_pairs: bool     # cf_resize_nv12 applies (when dst is aligned to two elements)
    vec: tuple | None   # cf_normalize_vec fields after its two pointers, when it applies
    vec_entry: str
    vec_tiles: int      # tiles of cf_normalize_vec (its grid: all of them, or one wave)
    info: Any = None    # Letterbox for letterbox()

    def __post_init__(self):
        self.dt = self.dtype.name  # numpy computes the name on every access
        self.pair_align = 2 * self.dtype.itemsize

    def run(self, src, rois, roi_frame, dst, stream):
        b = get_backend()
        if self.src.copied:
            src = b.xp.ascontiguousarray(src)
        out = _prepare_dst(self.name, dst, self.shape, self.dtype, (src, rois, roi_frame))
        if not b.is_gpu:
            as_cupy_stream(stream)  # validates the stream argument
            s = self.src
            frames = [src[i] if s.batched else src for i in range(s.N)]
            p = self.p
            if rois is not None:
                p = {**p, "rois": numpy.asarray(rois),
                     "roi_frame": None if roi_frame is None else numpy.asarray(roi_frame)}
            _image_ref.warp(frames, p, out.reshape((-1, *out.shape[-3:])))
            return out
        if out.size == 0:
            return out
        sp = as_cupy_stream(stream).ptr
        sptr, optr = src.data.ptr, out.data.ptr
        dt = self.dt
        if self.vec is not None and not (sptr & 15 or optr & 15):
            # Persistent blocks prefetch their next tile; float32 output (4 bytes written per
            # byte read) ran faster with a block per tile on an H200 (bench/results).
            tiles = self.vec_tiles
            grid = (tiles if dt == "float32"
                    else min(tiles, _launch.one_wave("image", self.vec_entry, dt, 256)), 1, 1)
            _launch.launch("image", self.vec_entry, dt, grid, (256, 1, 1), sp, _NORM,
                           (sptr, optr, *self.vec))
        else:
            B = out.shape[0] if out.ndim == 4 else 1
            if self.lin_entry is not None and not sptr & 3:  # it needs 4-byte alignment
                if self.lin_pairs and not optr % self.pair_align:
                    entry, cols, rows = "cf_resize_nv12<{T}>", 64, 4 * _NV12_ROWS
                else:
                    entry, cols, rows = self.lin_entry, 32 * _LIN_PX, 4 * _LIN_ROWS
            else:
                entry, cols, rows = self.warp_entry, 32 * _WARP_PX[self.src.fmt], 4
            _launch.launch("image", entry, dt,
                           (-(-self.p["OW"] // cols), -(-self.p["OH"] // rows), B),
                           (32, 4, 1), sp, _WARP,
                           (sptr, optr, 0 if rois is None else rois.data.ptr,
                            0 if roi_frame is None else roi_frame.data.ptr, *self.warp))
        return out


def _make_plan(name, src, *, size, letterbox_pad, rois, interpolation, mean, std, scale,
               src_format, out_format, layout, dtype, flip, pad, matrix, full_range,
               identity_affine) -> _Plan:
    _choice(name, "layout", layout, _LAYOUTS)
    dtype = numpy.dtype(dtype)
    _choice(name, "dtype", dtype.name, _OUT_DTYPES)
    _choice(name, "interpolation", interpolation, _INTERP)
    _choice(name, "matrix", matrix, _MATRICES)
    s = _parse_src(name, src, src_format)
    letters, src_map, gray, gw = _out_map(name, s, out_format)
    oc = len(letters)
    affine = (_IDENTITY[oc] if identity_affine
              else _Affine.normalization(name, mean, std, scale, oc))
    a, bb = affine.padded()
    oh, ow = (s.H, s.W) if size is None else size
    info = None
    if letterbox_pad:
        r = min(oh / s.H, ow / s.W)
        rh, rw = max(1, min(oh, round(s.H * r))), max(1, min(ow, round(s.W * r)))
        oy0, ox0 = (oh - rh) // 2, (ow - rw) // 2
        info = Letterbox(r, ox0, oy0, (rh, rw), (s.H, s.W))
    else:
        oy0, ox0, rh, rw = 0, 0, oh, ow
    if rois is not None and rois.shape[0] > 65535:
        raise ImageFormatError(f"cuflow.image.{name}: at most 65535 boxes per call, got "
                               f"{rois.shape[0]}; split them")
    n_out = s.N if rois is None else rois.shape[0]
    if n_out > 65535:
        raise ImageFormatError(f"cuflow.image.{name}: at most 65535 frames per call, got "
                               f"{n_out}; split the batch")
    if oh * ow * oc >= 1 << 31:  # cf_warp offsets within one output image are 32-bit
        raise ImageFormatError(f"cuflow.image.{name}: an output image must have fewer than "
                               f"2**31 elements, got {oh} x {ow} x {oc}; resize in tiles")
    shape = _out_shape(s.batched or rois is not None, n_out, oh, ow, oc, layout)
    identity = (oh, ow) == (s.H, s.W) and not letterbox_pad and rois is None
    interp = 0 if identity else _INTERP[interpolation]  # scale 1 is the identity for every mode
    nchw = int(layout == "NCHW")
    sm = src_map + [0] * (4 - len(src_map))
    yuv = _yuv_coefficients(matrix, full_range)
    p = dict(H=s.H, W=s.W, OH=oh, OW=ow, OC=oc, fmt=s.fmt, interp=interp, nchw=nchw,
             flip=int(bool(flip)), oy0=oy0, ox0=ox0, rh=rh, rw=rw, gray=int(gray), src_map=sm,
             sx=s.W / rw, sy=s.H / rh, a=a, b=bb, pad=float(pad), gw=gw, yuv=yuv)
    ch, direct, sa, sb = _slots(src_map, s.C, gray, a, bb)
    kpad, kyuv = p["pad"], yuv
    if s.fmt:
        # cf_warp converts YUV on the 0-1 scale, where the clamp is free (a saturating
        # multiply-add): the coefficients, the pad value and the output scale follow
        ys, yoff, *c = (v / 255 for v in yuv)
        kyuv = (ys, -yoff * 255 * ys, *c)
        kpad, sa = kpad / 255, [v * 255 for v in sa]
    choff = [c * oh * ow if nchw else c for c in ch]
    warp = (s.fstride, s.rstride, oh * ow * oc, *choff, s.H, s.W, s.C, oh, ow, oc, s.fmt, interp,
            nchw, p["flip"], oy0, ox0, rh, rw, p["gray"], s.N, *sm, *ch, direct, p["sx"],
            p["sy"], *sa, *sb, kpad, *gw, *kyuv)
    vec = None
    run = vec_run(dtype)  # pixels per thread: 16-byte stores when the frame allows
    if (s.H * s.W) % run:
        run = 4
    vec_entry = f"cf_normalize_vec<{{T}},{s.C},{oc},{'{V}' if run != 4 else 4}>"
    if (s.fmt == 0 and identity and not flip and not gray and s.dense
            and (s.C, oc) in VEC_CHANNELS and (s.H * s.W) % 4 == 0):
        vec = (s.H * s.W, s.N, nchw, *sm, *a, *bb, 0)
    tiles = -(-s.N * s.H * s.W // (256 * run))
    # cf_resize_lin reads the aligned words that hold the bytes it needs, so the span from
    # the first frame's start to the last frame's end must be 4-byte aligned (the start is
    # checked per call); it reads NV12 chroma pairs from the start of a word, so every row
    # must start aligned (YUV frames are contiguous: a width divisible by 4), and takes
    # row offsets within an NV12 frame as 32-bit
    end = (s.N - 1) * s.fstride + (s.H - 1) * s.rstride + s.W * s.C
    aligned = (s.W % 4 == 0 and s.fstride < 1 << 31) if s.fmt else end % 4 == 0
    lin = None
    if (direct and (s.fmt, s.C, oc) in LIN_SOURCES and s.H >= 2 and s.W >= 2 and aligned
            and (interp == 1 or (interp == 2 and rois is None
                                 and p["sx"] <= 1 and p["sy"] <= 1))):
        # bilinear everywhere, each output channel a source channel: the fast path
        lin = f"cf_resize_lin<{{T}},{s.fmt},{s.C},{oc}>"
    # cf_resize_nv12 stores two adjacent columns at once and reads 8 bytes from at most
    # W - 8: NV12 with an even output width (so every pair starts at an even element)
    pairs = lin is not None and s.fmt == 1 and ow % 2 == 0 and s.W >= 8
    s.arr = None  # a cached plan must not keep the first caller's frames alive
    return _Plan(name, s, shape, dtype, p, warp, f"cf_warp<{{T}},{s.fmt},{s.C}>", lin, pairs,
                 vec, vec_entry, tiles, info)


def _slots(src_map, C, gray, a, b):
    """cf_warp's output slots: when the output channels are a permutation of the first
    source channels, slot j carries source channel j to output channel ``ch[j]`` (with that
    channel's coefficients), so the kernel selects nothing per pixel; otherwise slot j is
    output channel j and the kernel picks ``src_map[j]``."""
    oc = len(src_map)
    if not gray and oc <= C and sorted(src_map) == list(range(oc)):
        ch = [src_map.index(j) for j in range(oc)] + [0] * (4 - oc)
        return (ch, 1, [a[c] for c in ch[:oc]] + list(a[oc:]),
                [b[c] for c in ch[:oc]] + list(b[oc:]))
    return [0, 1, 2, 3], 0, a, b


def _op(name: str, src, *, size=None, letterbox_pad=False, rois=None, roi_frame=None,
        interpolation="bilinear", mean=0.0, std=1.0, scale=1.0, src_format=None,
        out_format=None, layout="NCHW", dtype=numpy.float32, flip=False, pad=0.0,
        matrix="bt601", full_range=False, identity_affine=False, dst=None,
        stream=None) -> tuple[Any, _Plan]:
    """One fused warp: find (or build and validate) the plan, then run it."""
    b = get_backend()
    if not isinstance(src, b.ndarray):
        _parse_src(name, src, src_format)  # raises the type error
    key = (b, name, src.shape, src.strides, src.dtype, None if rois is None else rois.shape,
           size, letterbox_pad, interpolation, mean, std, scale, src_format, out_format, layout,
           dtype, flip, pad, matrix, full_range, identity_affine)
    plan = _cached_plan(key, lambda: _make_plan(
        name, src, rois=rois, size=size, letterbox_pad=letterbox_pad,
        interpolation=interpolation, mean=mean, std=std, scale=scale, src_format=src_format,
        out_format=out_format, layout=layout, dtype=dtype, flip=flip, pad=pad, matrix=matrix,
        full_range=full_range, identity_affine=identity_affine))
    return plan.run(src, rois, roi_frame, dst, stream), plan


_NORM_DOC = """
    mean, std : float or sequence of float
        Per output channel (in ``out_format`` order), on the scale after
        ``scale``: ``out = (x * scale - mean) / std``.
    scale : float
        Applied to the 0-255 value first (default ``1/255``).
    src_format : str, optional
        ``GRAY``, ``RGB``, ``BGR``, ``RGBA``, ``BGRA``, ``NV12`` or ``I420``.
    out_format : str, optional
        ``GRAY``, ``RGB``, ``BGR``, ``RGBA`` or ``BGRA`` (swap R and B by
        naming the other order).
    layout : {"NCHW", "NHWC"}
    dtype : {float32, float16, uint8}
    dst : darray, optional
        Output of exactly the result shape and dtype, C-contiguous, not
        overlapping the input; written and returned, nothing is allocated.
    stream : Stream, optional
        Where the kernel is queued (default: the current stream).
    matrix, full_range :
        YUV sources only: ``"bt601"`` or ``"bt709"``, limited (16-235) or
        full (0-255) range.

    Notes
    -----
    Stream semantics: asynchronous; one kernel queued on ``stream`` (or the
    current stream).  The source must not be modified until it has run.
"""


def _doc(f):
    f.__doc__ = f.__doc__.replace("    {norm}\n", _NORM_DOC.lstrip("\n"))
    return f


@_doc
def normalize(src, *, mean=0.0, std=1.0, scale=1 / 255, src_format=None, out_format=None,
              layout="NCHW", dtype=numpy.float32, flip=False, matrix="bt601", full_range=False,
              dst=None, stream=None):
    """Frames -> normalized tensor in one pass: ``(x * scale - mean) / std`` per channel.

    ``(N, H, W, C)`` uint8 becomes ``(N, C, H, W)`` (``layout="NCHW"``) or
    ``(N, H, W, C)``; a single ``(H, W, C)`` frame gives ``(C, H, W)`` or
    ``(H, W, C)``.  With ``flip=True`` the image is mirrored horizontally.

    Parameters
    ----------
    src : darray
        uint8 frames (see the module docstring).
    {norm}
    """
    return _op("normalize", src, interpolation="nearest", mean=mean, std=std, scale=scale,
               src_format=src_format, out_format=out_format, layout=layout, dtype=dtype,
               flip=flip, matrix=matrix, full_range=full_range, dst=dst, stream=stream)[0]


@_doc
def resize_normalize(src, size, *, interpolation="bilinear", mean=0.0, std=1.0, scale=1 / 255,
                     src_format=None, out_format=None, layout="NCHW", dtype=numpy.float32,
                     flip=False, matrix="bt601", full_range=False, dst=None, stream=None):
    """Resize to ``size`` and normalize in one pass (see :func:`normalize`).

    Parameters
    ----------
    src : darray
        uint8 frames (see the module docstring).
    size : int or (int, int)
        Output ``(height, width)``.
    interpolation : {"bilinear", "nearest", "area"}
    {norm}
    """
    return _op("resize_normalize", src, size=_size("resize_normalize", size),
               interpolation=interpolation, mean=mean, std=std, scale=scale,
               src_format=src_format, out_format=out_format, layout=layout, dtype=dtype,
               flip=flip, matrix=matrix, full_range=full_range, dst=dst, stream=stream)[0]


def resize(src, size, *, interpolation="bilinear", src_format=None, out_format=None,
           matrix="bt601", full_range=False, dst=None, stream=None):
    """Resize uint8 frames to ``size`` = ``(height, width)``: uint8 in the input's HWC layout.

    ``(N, H, W, C)`` gives ``(N, h, w, C')``; YUV frames give packed RGB.
    Rounded half to even, as torchvision does on CUDA tensors.

    Notes
    -----
    Stream semantics: asynchronous; one kernel queued on ``stream`` (or the
    current stream).
    """
    return _op("resize", src, size=_size("resize", size), interpolation=interpolation,
               src_format=src_format, out_format=out_format, layout="NHWC", dtype=numpy.uint8,
               matrix=matrix, full_range=full_range, identity_affine=True, dst=dst,
               stream=stream)[0]


def cvt_color(src, src_format, out_format, *, matrix="bt601", full_range=False, dst=None,
              stream=None):
    """Convert uint8 frames between colour formats; uint8 HWC out.

    ``src_format``: ``GRAY``, ``RGB``, ``BGR``, ``RGBA``, ``BGRA``, ``NV12`` or
    ``I420``; ``out_format``: ``GRAY``, ``RGB``, ``BGR``, ``RGBA`` or
    ``BGRA``.  GRAY uses BT.601 luma weights; YUV sources use ``matrix``
    (``"bt601"`` or ``"bt709"``) in limited (default) or full range.

    Notes
    -----
    Stream semantics: asynchronous; one kernel queued on ``stream`` (or the
    current stream).
    """
    if src_format is None or out_format is None:
        raise ImageFormatError("cuflow.image.cvt_color: name both src_format and out_format")
    return _op("cvt_color", src, interpolation="nearest", src_format=src_format,
               out_format=out_format, layout="NHWC", dtype=numpy.uint8, matrix=matrix,
               full_range=full_range, identity_affine=True, dst=dst, stream=stream)[0]


@dataclasses.dataclass(frozen=True)
class Letterbox:
    """Where :func:`letterbox` put the image: map boxes back with :meth:`unmap_boxes`.

    Attributes
    ----------
    scale : float
        ``min(out_h / h, out_w / w)``.
    pad_x, pad_y : int
        Left and top padding in output pixels.
    resized : (int, int)
        ``(height, width)`` of the image inside the output.
    src_size : (int, int)
        ``(height, width)`` of the source frames.
    """

    scale: float
    pad_x: int
    pad_y: int
    resized: tuple[int, int]
    src_size: tuple[int, int]

    def unmap_boxes(self, boxes, *, stream=None):
        """``(..., 4)`` boxes ``x1, y1, x2, y2`` in output pixels -> source pixels, clipped to the frame.

        Returns a new array of the same backend (a few small elementwise kernels on the GPU).
        """
        xp = get_backend().xp
        with use_stream(stream):
            h, w = self.src_size
            rh, rw = self.resized
            off = xp.asarray([self.pad_x, self.pad_y, self.pad_x, self.pad_y], numpy.float32)
            gain = xp.asarray([w / rw, h / rh, w / rw, h / rh], numpy.float32)
            hi = xp.asarray([w, h, w, h], numpy.float32)
            r = xp.clip((boxes - off) * gain, 0, hi)
        return runtime().wrap(r)


@_doc
def letterbox(src, size, *, pad=114, interpolation="bilinear", mean=0.0, std=1.0, scale=1 / 255,
              src_format=None, out_format=None, layout="NCHW", dtype=numpy.float32,
              matrix="bt601", full_range=False, dst=None, stream=None):
    """Aspect-preserving resize into ``size`` with constant padding, normalized (YOLO-style).

    The image is scaled by ``min(out_h / h, out_w / w)``, centred, and the
    border filled with ``pad`` (on the 0-255 scale, normalized like the
    pixels).  Returns ``(out, info)``; ``info.unmap_boxes`` maps detections
    back to source pixels.

    Parameters
    ----------
    src : darray
        uint8 frames (see the module docstring).
    size : int or (int, int)
        Output ``(height, width)``.
    pad : float
        Border value before normalization (default 114, as YOLO).
    interpolation : {"bilinear", "nearest", "area"}
    {norm}
    """
    out, plan = _op("letterbox", src, size=_size("letterbox", size), letterbox_pad=True,
                    interpolation=interpolation, mean=mean, std=std, scale=scale,
                    src_format=src_format, out_format=out_format, layout=layout, dtype=dtype,
                    pad=pad, matrix=matrix, full_range=full_range, dst=dst, stream=stream)
    return out, plan.info


@_doc
def crop_resize(src, boxes, size, *, frame_index=None, interpolation="bilinear", mean=0.0,
                std=1.0, scale=1 / 255, src_format=None, out_format=None, layout="NCHW",
                dtype=numpy.float32, matrix="bt601", full_range=False, dst=None, stream=None):
    """Many regions of interest -> one resized, normalized batch, in one launch.

    Output image ``k`` is box ``boxes[k] = (x1, y1, x2, y2)`` (source pixels,
    the box covering ``[x1, x2) x [y1, y2)``) of frame ``frame_index[k]``,
    resampled to ``size``.  Boxes may leave the frame: coordinates are
    clamped, so the border pixels repeat.  Frame indices outside
    ``[0, N)`` are clamped too (the kernel never reads outside the source).

    Parameters
    ----------
    src : darray
        uint8 frames (see the module docstring).
    boxes : darray
        ``(K, 4)`` float32 on the device (e.g. a detector's output).
    size : int or (int, int)
        Output ``(height, width)`` of every crop.
    frame_index : darray, optional
        ``(K,)`` int32: the frame of each box (default: all from frame 0).
    interpolation : {"bilinear", "nearest", "area"}
    {norm}
    """
    b = get_backend()
    size = _size("crop_resize", size)
    boxes = _device_vector("crop_resize", "boxes", boxes, numpy.float32, b)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ImageFormatError(f"cuflow.image.crop_resize: boxes must be (K, 4) x1, y1, x2, y2, "
                               f"got shape {boxes.shape}")
    if frame_index is not None:
        frame_index = _device_vector("crop_resize", "frame_index", frame_index, numpy.int32, b)
        if frame_index.shape != (boxes.shape[0],):
            raise ImageFormatError(f"cuflow.image.crop_resize: frame_index must be "
                                   f"({boxes.shape[0]},) like boxes, got {frame_index.shape}")
    return _op("crop_resize", src, size=size, rois=boxes, roi_frame=frame_index,
               interpolation=interpolation, mean=mean, std=std, scale=scale,
               src_format=src_format, out_format=out_format, layout=layout, dtype=dtype,
               matrix=matrix, full_range=full_range, dst=dst, stream=stream)[0]


def _device_vector(name, what, x, dtype, b):
    if not isinstance(x, b.ndarray):
        raise DstTypeError(f"cuflow.image.{name}: {what} must be an array of the active "
                               f"{b.name} backend, got {type(x).__name__}")
    if x.dtype != dtype or not x.flags.c_contiguous:
        x = b.xp.ascontiguousarray(x, dtype=dtype)  # a small conversion kernel
    return x


def denormalize(src, *, mean=0.0, std=1.0, scale=1 / 255, layout="NCHW", src_format="RGB",
                out_format=None, dst=None, stream=None):
    """Normalized float tensor -> uint8 ``(N, H, W, C)`` frames, rounded and clamped.

    Inverts :func:`normalize`: ``u8 = round(clamp((x * std + mean) / scale))``
    per channel, for visualizing model outputs.

    Parameters
    ----------
    src : darray
        float32 or float16 ``(N, C, H, W)`` / ``(C, H, W)`` (``layout="NCHW"``)
        or ``(N, H, W, C)`` / ``(H, W, C)``; C-contiguous.
    mean, std, scale :
        As given to :func:`normalize` (per channel of ``src``).
    src_format, out_format : str
        Channel order of ``src`` and of the output (default: the same).
    dst : darray, optional
        uint8 output of the result shape; written and returned.
    stream : Stream, optional

    Notes
    -----
    Stream semantics: asynchronous; one kernel queued on ``stream`` (or the
    current stream).
    """
    b = get_backend()
    if not isinstance(src, b.ndarray) or src.dtype not in (numpy.float32, numpy.float16):
        raise DstTypeError(f"cuflow.image.denormalize: src must be a float32 or float16 array "
                           f"of the active {b.name} backend, got "
                           f"{getattr(src, 'dtype', type(src).__name__)}")
    key = (b, "denormalize", src.shape, src.strides, src.dtype, mean, std, scale, layout,
           src_format, out_format)
    plan = _cached_plan(key, lambda: _denorm_plan(src, mean, std, scale, layout, src_format,
                                                  out_format))
    if not src.flags.c_contiguous:
        src = b.xp.ascontiguousarray(src)
    out = _prepare_dst("denormalize", dst, plan.shape, numpy.dtype(numpy.uint8), (src,))
    if not b.is_gpu:
        as_cupy_stream(stream)
        x = src.reshape(plan.N, *src.shape[-3:])
        _image_ref.denormalize(x, plan.p, out.reshape(plan.N, *plan.shape[-3:]))
        return out
    if out.size:
        sptr, optr, sp = src.data.ptr, out.data.ptr, as_cupy_stream(stream).ptr
        if plan.vec is not None and not (sptr | optr) & 15:
            # four pixels per thread with vector loads and word stores
            _launch.launch("image", plan.vec, plan.dt, (-(-plan.npix // 1024), plan.N, 1),
                           (256, 1, 1), sp, _DENORM, (sptr, optr, *plan.fields))
        else:
            _launch.launch("image", "cf_denormalize", plan.dt,
                           (min((plan.npix * plan.N + 255) // 256, 2**31 - 1), 1, 1),
                           (256, 1, 1), sp, _DENORM, (sptr, optr, *plan.fields))
    return out


@dataclasses.dataclass
class _DenormPlan:
    """denormalize's validated layout and kernel fields, built once per shape and options."""

    shape: tuple[int, ...]  # of the output
    N: int
    npix: int
    p: dict[str, Any]       # the kernel's fields by name (the reference reads these)
    fields: tuple           # cf_denormalize(_vec) fields after the two pointers
    vec: str | None         # cf_denormalize_vec instantiation, when the frame size allows
    dt: str                 # the input's dtype name (the kernels' instantiation)


def _denorm_plan(src, mean, std, scale, layout, src_format, out_format) -> _DenormPlan:
    name = "denormalize"
    _choice(name, "layout", layout, _LAYOUTS)
    if src.ndim not in (3, 4):
        raise ImageFormatError(f"cuflow.image.denormalize: src must be (N, C, H, W), (C, H, W) "
                               f"or their NHWC forms, got shape {src.shape}")
    batched = src.ndim == 4
    shape4 = src.shape if batched else (1, *src.shape)
    if layout == "NCHW":
        N, C, H, W = shape4
    else:
        N, H, W, C = shape4
    _choice(name, "src_format", src_format, set(_CHANNELS))
    colors = _CHANNELS[src_format]
    if len(colors) != C:
        raise ImageFormatError(f"cuflow.image.denormalize: src_format={src_format!r} has "
                               f"{len(colors)} channels, src has C={C}")
    out_format = src_format if out_format is None else out_format
    _choice(name, "out_format", out_format, set(_CHANNELS))
    letters = _CHANNELS[out_format]
    if any(ch not in colors for ch in letters):
        raise ImageFormatError(f"cuflow.image.denormalize: out_format={out_format!r} needs "
                               f"channels that src_format={src_format!r} lacks")
    src_map = [colors.index(ch) for ch in letters]
    m = _per_channel(name, "mean", mean, C)
    sd = _per_channel(name, "std", std, C)
    if float(scale) == 0:
        raise ImageFormatError("cuflow.image.denormalize: scale must be non-zero")
    a = [sd[c] / float(scale) for c in src_map] + [1.0] * (4 - len(src_map))
    bb = [m[c] / float(scale) for c in src_map] + [0.0] * (4 - len(src_map))
    oc = len(letters)
    nchw = int(layout == "NCHW")
    sm = src_map + [0] * (4 - len(src_map))
    vec = (f"cf_denormalize_vec<{{T}},{C},{oc}>"
           if (H * W) % 4 == 0 and N <= 65535 and (C, oc) in VEC_CHANNELS else None)
    return _DenormPlan((N, H, W, oc) if batched else (H, W, oc), N, H * W,
                       dict(OC=oc, nchw=nchw, src_map=src_map, a=a, b=bb),
                       (H * W, N, C, oc, nchw, *sm, *a, *bb, 0), vec, src.dtype.name)

