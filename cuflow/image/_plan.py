"""Per-call plans: what a call does, apart from the arrays' addresses, built once per key.

A plan is built (and validated) once per distinct combination of shapes and
options, cached under a key of them, and reused: a steady-state call only
checks ``dst``, packs the pointers and launches.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

import numpy

from .._checks import is_integer
from ..core import as_cupy_stream, prepare_out, runtime, use_stream
from ..raw_kernels import _launch  # its launch is looked up per call (cuflow.debug wraps it)
from ..raw_kernels._registry import LIN_SOURCES, VEC_CHANNELS, vec_run
from . import _reference
from ._options import Norm
from ._parse import (CHANNELS, INTERP, LAYOUTS, MATRICES, ImageFormatError, ImageTypeError,
                     Src, checked_dtype, choice, finite, flag, out_map, out_shape,
                     output_elements, parse_src, per_channel, yuv_coefficients)

@dataclasses.dataclass(frozen=True)
class _Affine:
    """``out = v * a[c] + b[c]`` per output channel (``v`` on the 0-255 scale)."""

    a: tuple[float, ...]
    b: tuple[float, ...]

    @classmethod
    def normalization(cls, name: str, norm: Norm, n: int) -> _Affine:
        m = per_channel(name, "mean", norm.mean, n)
        s = per_channel(name, "std", norm.std, n)
        return cls(tuple(norm.scale / x for x in s),
                   tuple(-mu / x for mu, x in zip(m, s, strict=True)))

    def padded(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        return self.a + (1.0,) * (4 - len(self.a)), self.b + (0.0,) * (4 - len(self.b))


_IDENTITY = {n: _Affine((1.0,) * n, (0.0,) * n) for n in (1, 3, 4)}


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

    Raises
    ------
    ImageTypeError, ImageFormatError
        Built by hand with fields that are no such numbers: a scale that is not a positive
        finite real, a negative padding, a size that is not two positive ints.
    """

    scale: float
    pad_x: int
    pad_y: int
    resized: tuple[int, int]
    src_size: tuple[int, int]

    def __post_init__(self) -> None:
        if finite("Letterbox", "scale", self.scale) <= 0:
            raise ImageFormatError(f"cuflow.image.Letterbox: scale must be positive, got "
                                   f"{self.scale!r}")
        for what in ("pad_x", "pad_y"):
            v = getattr(self, what)
            if not is_integer(v) or v < 0:
                raise (ImageFormatError if is_integer(v) else ImageTypeError)(
                    f"cuflow.image.Letterbox: {what} must be an int >= 0, got {v!r}")
        for what in ("resized", "src_size"):
            v = getattr(self, what)
            if not (isinstance(v, tuple | list) and len(v) == 2 and all(map(is_integer, v))):
                raise ImageTypeError(f"cuflow.image.Letterbox: {what} must be (height, width) "
                                     f"of ints, got {v!r}")
            if not all(x > 0 for x in v):
                raise ImageFormatError(f"cuflow.image.Letterbox: {what} must be positive, got "
                                       f"{v!r}")

    def unmap_boxes(self, boxes, *, stream=None):
        """``(..., 4)`` boxes ``x1, y1, x2, y2`` in output pixels -> source pixels, clipped to the frame.

        Returns a new array of the active backend (a few small elementwise kernels on the
        GPU; boxes on the host are uploaded first).  Boxes must be real numbers with a last
        axis of 4 (:class:`ImageFormatError`): take ``[..., :4]`` of detections with more
        columns.

        Parameters
        ----------
        boxes : darray, numpy.ndarray or sequence
            Boxes of shape ``(..., 4)``, ``x1, y1, x2, y2`` in output pixels.
        stream : cuflow.Stream, optional
            The stream the work is queued on; the current stream when omitted.

        Returns
        -------
        darray
            The boxes in source pixels, of ``boxes``' shape, clipped to
            ``[0, width]`` x ``[0, height]`` of the source frames, in the dtype the boxes'
            dtype promotes to with float32 (float32 for float16, float32 and 8- and
            16-bit integers; float64 for float64 and wider integers).

        Raises
        ------
        ImageFormatError
            ``boxes`` is ragged, not real, or its last axis is not 4.

        Notes
        -----
        Stream semantics: asynchronous; queued on ``stream`` or the current stream (host
        boxes are uploaded on it first).
        """
        rt = runtime()
        xp = rt.xp
        if not hasattr(boxes, "shape"):  # (a list of boxes)
            try:
                boxes = numpy.asarray(boxes)
            except ValueError as e:  # ragged
                raise ImageFormatError(
                    f"cuflow.image.Letterbox.unmap_boxes: boxes must be a real array of shape "
                    f"(..., 4) (x1, y1, x2, y2), got a ragged {type(boxes).__name__}: "
                    f"{boxes!r}") from e
        shape = boxes.shape
        kind = getattr(getattr(boxes, "dtype", None), "kind", "")
        if not shape or shape[-1] != 4 or kind not in "iuf":
            raise ImageFormatError(
                f"cuflow.image.Letterbox.unmap_boxes: boxes must be a real array of shape "
                f"(..., 4) (x1, y1, x2, y2; take [..., :4] of detections with more columns), "
                f"got {type(boxes).__name__} of shape {shape} and dtype "
                f"{getattr(boxes, 'dtype', None)}")
        with use_stream(stream, "image.Letterbox.unmap_boxes"):
            if rt.is_gpu and isinstance(boxes, numpy.ndarray):  # host boxes (after NMS on
                boxes = xp.asarray(boxes)  # the host): uploaded, as crop_resize's are
            h, w = self.src_size
            rh, rw = self.resized
            off = xp.asarray([self.pad_x, self.pad_y, self.pad_x, self.pad_y], numpy.float32)
            gain = xp.asarray([w / rw, h / rh, w / rw, h / rh], numpy.float32)
            hi = xp.asarray([w, h, w, h], numpy.float32)
            r = xp.clip((boxes - off) * gain, 0, hi)
        return rt.wrap(r)


def _prepare_dst(name: str, dst, shape, dtype, src_arrays, stream):
    if dst is None:
        rt = runtime()
        if rt.multi:
            rt.check_devices(f"image.{name}", *src_arrays)
        # allocated on the stream the kernel writes it on: the pool then reuses the memory
        # only after that work, wherever the output is freed
        with use_stream(stream, f"image.{name}"):
            return rt.as_darray(rt.xp.empty(shape, dtype))
    prepare_out(f"image.{name}", dst, shape, dtype, inputs=src_arrays, casting="no",
                overlap="refuse", contiguous=True)
    return dst


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
_PLANS: dict[tuple, Any] = {}  # Plan and DenormPlan, keyed by operator name and options
_MAX_PLANS = 512


def _values_key(v: Any) -> tuple:
    """``mean``, ``std`` or ``scale`` as given, as part of a plan key.

    A list or array becomes the tuple of its values, so that it finds the plan of that
    tuple rather than making the key unhashable (and the plan rebuilt on every call).  The
    values' types are part of the key: ``True == 1``, and a plan built for ``1`` must not
    answer a call given ``True``, which :class:`Norm` refuses.
    """
    if v is None:
        return None, type(None)
    if type(v) is tuple:
        return v, tuple(map(type, v))
    if hasattr(v, "dtype"):
        v = v.tolist()
    if isinstance(v, list):
        v = tuple(v)
    return v, tuple(map(type, v)) if isinstance(v, tuple) else type(v)


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
class Plan:
    """Everything about one call that does not depend on the arrays' addresses.

    Built (and validated) once per distinct combination of shapes and
    options, then reused: a steady-state call only checks ``dst``, packs
    the pointers and launches.
    """

    name: str
    src: Src           # parsed source layout (``arr`` dropped: each call passes its own)
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
        b = runtime()
        op = f"image.{self.name}"
        if self.src.copied:
            with use_stream(stream, op):  # the kernel on ``stream`` reads the copy
                src = b.xp.ascontiguousarray(src)
        out = _prepare_dst(self.name, dst, self.shape, self.dtype, (src, rois, roi_frame),
                           stream)
        if not b.is_gpu:
            as_cupy_stream(stream, op)  # validates the stream argument
            s = self.src
            frames = [src[i] if s.batched else src for i in range(s.N)]
            p = self.p
            if rois is not None:
                p = {**p, "rois": numpy.asarray(rois),
                     "roi_frame": None if roi_frame is None else numpy.asarray(roi_frame)}
            _reference.warp(frames, p, out.reshape((-1, *out.shape[-3:])))
            return out
        if out.size == 0:
            return out
        sp = as_cupy_stream(stream, op).ptr
        sptr, optr = src.data.ptr, out.data.ptr
        dt = self.dt
        if self.vec is not None and not (sptr & 15 or optr & 15):
            # Persistent blocks (one wave) prefetch their next tile; float32 output (4 bytes
            # written per byte read) is faster with a block per tile
            # (bench/test_bench_image.py::test_image[normalize float32]).
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


def _is_uint8(dtype: Any) -> bool:
    """Whether ``dtype`` names uint8: an 8-bit output keeps the 0-255 scale by default."""
    try:
        return numpy.dtype(dtype) == numpy.uint8
    except Exception:  # (NumPy's parser raises SyntaxError too: refused with the rule's
        # message when the plan is made)
        return False


def _make_plan(name, src, *, size, letterbox_pad, rois, interpolation, norm, src_format,
               out_format, layout, dtype, flip, pad, matrix, full_range,
               identity_affine) -> Plan:
    choice(name, "layout", layout, LAYOUTS)
    dtype = checked_dtype(name, dtype)
    choice(name, "interpolation", interpolation, INTERP)
    choice(name, "matrix", matrix, MATRICES)
    flip = flag(name, "flip", flip)
    flag(name, "full_range", full_range)
    pad = finite(name, "pad", pad)
    s = parse_src(name, src, src_format)
    letters, src_map, gray, gw = out_map(name, s, out_format)
    oc = len(letters)
    affine = (_IDENTITY[oc] if identity_affine
              else _Affine.normalization(name, norm, oc))
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
    if rois is not None and rois.shape[0] and not s.N:  # (a box's frame must exist)
        raise ImageFormatError(f"cuflow.image.{name}: {rois.shape[0]} boxes but no frame to "
                               f"crop them from (src holds 0 frames)")
    if rois is not None and rois.shape[0] > 65535:
        raise ImageFormatError(f"cuflow.image.{name}: at most 65535 boxes per call, got "
                               f"{rois.shape[0]}; split them")
    n_out = s.N if rois is None else rois.shape[0]
    if n_out > 65535:
        raise ImageFormatError(f"cuflow.image.{name}: at most 65535 frames per call, got "
                               f"{n_out}; split the batch")
    output_elements(name, oh, ow, oc)
    shape = out_shape(s.batched or rois is not None, n_out, oh, ow, oc, layout)
    identity = (oh, ow) == (s.H, s.W) and not letterbox_pad and rois is None
    interp = 0 if identity else INTERP[interpolation]  # scale 1 is the identity for every mode
    nchw = int(layout == "NCHW")
    sm = src_map + [0] * (4 - len(src_map))
    yuv = yuv_coefficients(matrix, full_range)
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
    return Plan(name, s, shape, dtype, p, warp, f"cf_warp<{{T}},{s.fmt},{s.C}>", lin, pairs,
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


def warp(name: str, src, *, size=None, letterbox_pad=False, rois=None, roi_frame=None,
         frames_given=None, interpolation="bilinear", norm=None, mean=None, std=None, scale=None,
         src_format=None, out_format=None, layout="NCHW", dtype=numpy.float32, flip=False,
         pad=0.0, matrix="bt601", full_range=False, identity_affine=False, dst=None,
         stream=None) -> tuple[Any, Plan]:
    """One fused warp: find (or build and validate) the plan, then run it.

    ``norm`` or ``mean``, ``std`` and ``scale`` (see :meth:`Norm.of`) are
    ignored with ``identity_affine``.  ``frames_given``: the rois' frame indices as given on
    the host, which must index the source's frames.
    """
    b = runtime()
    if not isinstance(src, b.ndarray):
        parse_src(name, src, src_format)  # raises the type error
    # flip, full_range and pad with their types: 1 == 1.0 == True would otherwise find the
    # plan of a valid call for an invalid one (flip=1.0, pad=True) and skip its checks
    key = (b, name, src.shape, src.strides, src.dtype, None if rois is None else rois.shape,
           size, letterbox_pad, interpolation, norm, _values_key(mean), _values_key(std),
           _values_key(scale), src_format, out_format, layout, dtype, flip, type(flip), pad,
           type(pad), matrix, full_range, type(full_range), identity_affine)
    plan = _cached_plan(key, lambda: _make_plan(
        name, src, rois=rois, size=size, letterbox_pad=letterbox_pad,
        interpolation=interpolation,
        norm=None if identity_affine else Norm.of(name, norm, mean, std, scale,
                                                  1.0 if _is_uint8(dtype) else 1 / 255),
        src_format=src_format,
        out_format=out_format, layout=layout, dtype=dtype, flip=flip, pad=pad, matrix=matrix,
        full_range=full_range, identity_affine=identity_affine))
    if frames_given is not None:
        fi = numpy.asarray(frames_given)
        n = plan.src.N
        if fi.size and (fi.min() < 0 or fi.max() >= n):
            raise ImageFormatError(f"cuflow.image.{name}: frame_index must index the {n} "
                                   f"source frame{'s' if n > 1 else ''}, each in [0, {n}), got "
                                   f"values from {fi.min()} to {fi.max()}")
    return plan.run(src, rois, roi_frame, dst, stream), plan


@dataclasses.dataclass
class DenormPlan:
    """denormalize's validated layout and kernel fields, built once per shape and options."""

    shape: tuple[int, ...]  # of the output
    N: int
    npix: int
    p: dict[str, Any]       # the kernel's fields by name (the reference reads these)
    fields: tuple           # cf_denormalize(_vec) fields after the two pointers
    vec: str | None         # cf_denormalize_vec instantiation, when the frame size allows
    dt: str                 # the input's dtype name (the kernels' instantiation)

    def run(self, src, dst, stream):
        b = runtime()
        if not src.flags.c_contiguous:
            with use_stream(stream, "image.denormalize"):  # the kernel reads the copy there
                src = b.xp.ascontiguousarray(src)
        out = _prepare_dst("denormalize", dst, self.shape, numpy.dtype(numpy.uint8), (src,),
                           stream)
        if not b.is_gpu:
            as_cupy_stream(stream, "image.denormalize")  # validates the stream argument
            x = src.reshape(self.N, *src.shape[-3:])
            _reference.denormalize(x, self.p, out.reshape(self.N, *self.shape[-3:]))
            return out
        if out.size:
            sptr, optr, sp = (src.data.ptr, out.data.ptr,
                              as_cupy_stream(stream, "image.denormalize").ptr)
            if self.vec is not None and not (sptr | optr) & 15:
                # four pixels per thread with vector loads and word stores
                _launch.launch("image", self.vec, self.dt, (-(-self.npix // 1024), self.N, 1),
                               (256, 1, 1), sp, _DENORM, (sptr, optr, *self.fields))
            else:
                _launch.launch("image", "cf_denormalize", self.dt,
                               (min((self.npix * self.N + 255) // 256, 2**31 - 1), 1, 1),
                               (256, 1, 1), sp, _DENORM, (sptr, optr, *self.fields))
        return out


def denorm(src, *, norm, mean, std, scale, layout, src_format, out_format, dst, stream):
    """denormalize: find (or build and validate) the plan, then run it."""
    b = runtime()
    if not isinstance(src, b.ndarray) or src.dtype not in (numpy.float32, numpy.float16):
        raise ImageTypeError(f"cuflow.image.denormalize: src must be a float32 or float16 "
                             f"array of the active {b.name} backend, got "
                             f"{getattr(src, 'dtype', type(src).__name__)}")
    key = (b, "denormalize", src.shape, src.strides, src.dtype, norm, _values_key(mean),
           _values_key(std), _values_key(scale), layout, src_format, out_format)
    plan = _cached_plan(key, lambda: _denorm_plan(
        src, Norm.of("denormalize", norm, mean, std, scale), layout, src_format, out_format))
    return plan.run(src, dst, stream)


def _denorm_plan(src, norm: Norm, layout, src_format, out_format) -> DenormPlan:
    name = "denormalize"
    if layout is not None:
        choice(name, "layout", layout, LAYOUTS)
    if src.ndim not in (3, 4):
        raise ImageFormatError(f"cuflow.image.denormalize: src must be (N, C, H, W), (C, H, W) "
                               f"or their NHWC forms, got shape {src.shape}")
    batched = src.ndim == 4
    shape4 = src.shape if batched else (1, *src.shape)
    choice(name, "src_format", src_format, set(CHANNELS))
    colors = CHANNELS[src_format]
    if layout is None:
        # Unstated: NCHW, unless the shape reads as NHWC too (or only as NHWC), where a
        # wrong guess gives wrong pixels and no error.
        nc = len(colors)
        if shape4[1] == nc and shape4[3] == nc:
            raise ImageFormatError(
                f"cuflow.image.denormalize: src of shape {src.shape} may be NCHW or NHWC "
                f"({nc} channels either way); pass layout='NCHW' or layout='NHWC'")
        if shape4[3] == nc and shape4[1] != nc:
            raise ImageFormatError(
                f"cuflow.image.denormalize: src of shape {src.shape} has {nc} channels last "
                f"(NHWC), but layout is not given and defaults to NCHW; pass layout='NHWC'")
        layout = "NCHW"
    if layout == "NCHW":
        N, C, H, W = shape4
    else:
        N, H, W, C = shape4
    if len(colors) != C:
        raise ImageFormatError(f"cuflow.image.denormalize: src_format={src_format!r} has "
                               f"{len(colors)} channels, src has C={C}")
    out_format = src_format if out_format is None else out_format
    choice(name, "out_format", out_format, set(CHANNELS))
    letters = CHANNELS[out_format]
    if any(ch not in colors for ch in letters):
        raise ImageFormatError(f"cuflow.image.denormalize: out_format={out_format!r} needs "
                               f"channels that src_format={src_format!r} lacks")
    src_map = [colors.index(ch) for ch in letters]
    m = per_channel(name, "mean", norm.mean, C)
    sd = per_channel(name, "std", norm.std, C)
    if norm.scale == 0:
        raise ImageFormatError("cuflow.image.denormalize: scale must be non-zero")
    a = [sd[c] / norm.scale for c in src_map] + [1.0] * (4 - len(src_map))
    bb = [m[c] / norm.scale for c in src_map] + [0.0] * (4 - len(src_map))
    oc = len(letters)
    nchw = int(layout == "NCHW")
    sm = src_map + [0] * (4 - len(src_map))
    vec = (f"cf_denormalize_vec<{{T}},{C},{oc}>"
           if (H * W) % 4 == 0 and N <= 65535 and (C, oc) in VEC_CHANNELS else None)
    return DenormPlan((N, H, W, oc) if batched else (H, W, oc), N, H * W,
                      dict(OC=oc, nchw=nchw, src_map=src_map, a=a, b=bb),
                      (H * W, N, C, oc, nchw, *sm, *a, *bb, 0), vec, src.dtype.name)

