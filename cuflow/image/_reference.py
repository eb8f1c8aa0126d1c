"""NumPy reference of the image kernels (``raw_kernels/image.cu``).

The NumPy backend runs these, and the GPU tests compare the kernels against
them.  They follow the kernels step for step: the same source coordinates
and weights (computed in float32 with the same roundings), interpolation on
the 0-255 scale (of Y and the chroma for YUV sources, converted to RGB after),
then ``v * a[c] + b[c]`` and the cast.  The kernels contract some multiply-adds
into FMAs, and ``cf_resize_lin`` interpolates as ``a + w1 * (b - a)``, so values
may differ in the last float32 bits (and a uint8 output by 1 at a .5 tie).
"""

from __future__ import annotations

from typing import Any

import numpy

__all__ = ["denormalize", "taps", "to_samples", "warp", "yuv_to_rgb"]

_F = numpy.float32


def to_samples(frame: numpy.ndarray, fmt: int, H: int, W: int) -> numpy.ndarray:
    """(H, W, C) float32 that the kernels resample, from one packed, NV12 (1) or I420 (2)
    frame: the packed channels on the 0-255 scale, or Y and the chroma minus 128 with the
    chroma upsampled by replication."""
    if fmt == 0:
        return frame.astype(_F)
    Y = frame[:H].astype(_F)
    if fmt == 1:
        uv = frame[H:H + H // 2].reshape(H // 2, W // 2, 2).astype(_F)
        U, V = uv[..., 0], uv[..., 1]
    else:
        flat = frame[H:].reshape(-1)
        q = (H // 2) * (W // 2)
        U = flat[:q].reshape(H // 2, W // 2).astype(_F)
        V = flat[q:2 * q].reshape(H // 2, W // 2).astype(_F)
    U = numpy.repeat(numpy.repeat(U, 2, 0), 2, 1) - _F(128)
    V = numpy.repeat(numpy.repeat(V, 2, 0), 2, 1) - _F(128)
    return numpy.stack([Y, U, V], axis=-1)


def yuv_to_rgb(v: numpy.ndarray, yuv) -> numpy.ndarray:
    """Resampled (Y, U - 128, V - 128) (..., 3) -> RGB on the 0-255 scale, clamped."""
    ys, yoff, rv, gu, gv, bu = (_F(c) for c in yuv)
    yy = (v[..., 0] - yoff) * ys
    U, V = v[..., 1], v[..., 2]
    rgb = numpy.stack([yy + rv * V, yy - gu * U - gv * V, yy + bu * U], axis=-1)
    return numpy.clip(rgb, _F(0), _F(255))


def taps(n_out: int, n_in: int, scale: float, origin: float, interp: int):
    """Source indices and weights along one axis: (idx, w), each (n_out, K).

    ``interp``: 0 nearest, 1 bilinear, 2 area (bilinear where the axis is not
    downscaled).  Mirrors the coordinate code of ``cf_warp``.
    """
    d = numpy.arange(n_out, dtype=_F)
    sc, org = _F(scale), _F(origin)
    if interp == 0:
        i = numpy.clip(numpy.floor(org + d * sc), 0, n_in - 1).astype(numpy.int64)
        return i[:, None], numpy.ones((n_out, 1), _F)
    if interp == 1 or sc <= 1:
        s = org + (sc * (d + _F(0.5)) - _F(0.5))
        s = numpy.minimum(numpy.maximum(s, _F(0)), _F(n_in - 1))
        i0 = s.astype(numpy.int64)
        i1 = numpy.minimum(i0 + 1, n_in - 1)
        w1 = s - i0.astype(_F)
        return numpy.stack([i0, i1], 1), numpy.stack([_F(1) - w1, w1], 1)
    lo = org + d * sc
    hi = lo + sc
    i0 = numpy.clip(numpy.floor(lo), 0, n_in - 1).astype(numpy.int64)
    i1 = numpy.maximum(i0, numpy.clip(numpy.ceil(hi) - 1, 0, n_in - 1).astype(numpy.int64))
    k = int((i1 - i0).max()) + 1
    idx = i0[:, None] + numpy.arange(k)
    # The box's first cell starts at lo and its last ends at hi, even where they lie outside
    # the frame: the border cells stand for everything beyond them (clamped coordinates),
    # so a box that leaves the frame weights the border pixels by the part outside.
    left = numpy.where(idx == i0[:, None], lo[:, None], idx.astype(_F))
    right = numpy.where(idx == i1[:, None], hi[:, None], (idx + 1).astype(_F))
    w = numpy.where(idx <= i1[:, None], right - left, _F(0)).astype(_F)
    return numpy.minimum(idx, n_in - 1), w


def _sample(img: numpy.ndarray, ty, tx, interp: int, sx: float, sy: float) -> numpy.ndarray:
    """Resample ``img`` (H, W, C) float32 at the separable taps: (OH, OW, C)."""
    (iy, wy), (ix, wx) = ty, tx
    if interp == 0:
        return img[iy[:, 0]][:, ix[:, 0]]
    if interp == 1 or (sx <= 1 and sy <= 1):
        rows0, rows1 = img[iy[:, 0]], img[iy[:, 1]]
        w0, w1 = wx[None, :, 0, None], wx[None, :, 1, None]
        top = w0 * rows0[:, ix[:, 0]] + w1 * rows0[:, ix[:, 1]]
        bot = w0 * rows1[:, ix[:, 0]] + w1 * rows1[:, ix[:, 1]]
        return wy[:, 0, None, None] * top + wy[:, 1, None, None] * bot
    acc = numpy.zeros((iy.shape[0], ix.shape[0], img.shape[2]), _F)
    wsum = numpy.zeros((iy.shape[0], ix.shape[0], 1), _F)
    for ky in range(iy.shape[1]):
        rows = img[iy[:, ky]]
        for kx in range(ix.shape[1]):
            w = (wy[:, ky, None] * wx[None, :, kx])[..., None]
            acc += w * rows[:, ix[:, kx]]
            wsum += w
    return numpy.where(wsum > 0, acc / numpy.where(wsum > 0, wsum, _F(1)), _F(0)).astype(_F)


def cast_out(v: numpy.ndarray, dtype) -> numpy.ndarray:
    if numpy.dtype(dtype) == numpy.uint8:  # (NaN is 0, as the kernels' fmaxf clamp makes it)
        return numpy.rint(numpy.nan_to_num(numpy.clip(v, _F(0), _F(255)), nan=0.0)).astype(
            numpy.uint8)
    with numpy.errstate(over="ignore"):  # past float16's range is inf, as the kernels' cast
        return v.astype(dtype)


def warp(frames: list[numpy.ndarray], p: dict[str, Any], out: numpy.ndarray) -> None:
    """Reference of ``cf_warp``/``cf_normalize_vec``: fill ``out`` (B, OC, OH, OW) or (B, OH, OW, OC).

    ``frames`` holds each source frame (packed (H, W, C) or YUV (H*3/2, W)
    uint8); ``p`` holds the fields of the kernel's parameter struct by name.
    """
    H, W, OH, OW, OC = p["H"], p["W"], p["OH"], p["OW"], p["OC"]
    oy0, ox0, rh, rw = p["oy0"], p["ox0"], p["rh"], p["rw"]
    a = numpy.asarray(p["a"][:OC], _F)
    b = numpy.asarray(p["b"][:OC], _F)
    samples = [to_samples(f, p["fmt"], H, W) for f in frames]
    rois = p.get("rois")
    uniform = None
    for n in range(out.shape[0]):
        if rois is not None:
            x1, y1, x2, y2 = (_F(v) for v in rois[n])
            sx, sy = (x2 - x1) / _F(rw), (y2 - y1) / _F(rh)
            fi = 0 if p.get("roi_frame") is None else int(p["roi_frame"][n])
            img = samples[min(max(fi, 0), len(samples) - 1)]
            t = (taps(rh, H, sy, y1, p["interp"]), taps(rw, W, sx, x1, p["interp"]), sx, sy)
        else:
            img = samples[n]
            if uniform is None:
                sx, sy = _F(p["sx"]), _F(p["sy"])
                uniform = (taps(rh, H, sy, 0.0, p["interp"]), taps(rw, W, sx, 0.0, p["interp"]),
                           sx, sy)
            t = uniform
        region = _sample(img, t[0], t[1], p["interp"], t[2], t[3])
        if p["fmt"]:
            region = yuv_to_rgb(region, p["yuv"])
        if p["flip"]:
            region = region[:, ::-1]
        if p["gray"]:
            gw = [_F(g) for g in p["gw"]]
            region = (gw[0] * region[..., 0] + gw[1] * region[..., 1]
                      + gw[2] * region[..., 2])[..., None]
        else:
            region = region[..., list(p["src_map"][:OC])]
        val = numpy.full((OH, OW, OC), _F(p["pad"]), _F)
        val[oy0:oy0 + rh, ox0:ox0 + rw] = region
        res = cast_out(val * a + b, out.dtype)
        out[n] = res.transpose(2, 0, 1) if p["nchw"] else res


def denormalize(src: numpy.ndarray, p: dict[str, Any], out: numpy.ndarray) -> None:
    """Reference of ``cf_denormalize``: ``src`` (N, C, H, W) or (N, H, W, C) -> ``out`` (N, H, W, OC) uint8."""
    x = src.astype(_F)
    if p["nchw"]:
        x = x.transpose(0, 2, 3, 1)
    OC = p["OC"]
    a = numpy.asarray(p["a"][:OC], _F)
    b = numpy.asarray(p["b"][:OC], _F)
    out[...] = cast_out(x[..., list(p["src_map"][:OC])] * a + b, numpy.uint8)
