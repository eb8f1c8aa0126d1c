"""Image pre/post-processing comparisons for ``python -m cuflow bench``.

Each fused cuflow operator is timed on the device (CUDA events, several input
buffers rotated so the L2 cache does not flatter the small cases) against its
bandwidth floor (bytes that must be read plus bytes written, over the
device-to-device copy bandwidth measured in the same run), the unfused CuPy
chain, PyTorch eager, ``torch.compile`` and torchvision's v2 functional
transforms where they exist.  Batch 1 latency is reported apart from
batch 8 throughput.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy
from .. import image
from ..image._parse import yuv_coefficients

__all__ = ["image_rows"]

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def _rot(bufs):
    it = itertools.cycle(bufs)
    return lambda: next(it)


def image_rows(cf, quick: bool, copy_tbps: float, interleaved, device_time_us,
               torch=None) -> list[dict[str, Any]]:
    import cupy  # noqa: PLC0415  (optional dependency)
    import cupyx.scipy.ndimage as ndi  # noqa: PLC0415  (optional dependency)


    rows: list[dict[str, Any]] = []
    rng = numpy.random.default_rng(7)
    H, W, N, S = 1080, 1920, 8, 640
    rounds, number = (3, 5) if quick else (5, 10)
    mean_c = cupy.asarray(MEAN, numpy.float32)
    std_c = cupy.asarray(STD, numpy.float32)
    tv = None
    if torch is not None:
        mean_t = torch.tensor(MEAN, device="cuda").view(1, 3, 1, 1)
        std_t = torch.tensor(STD, device="cuda").view(1, 3, 1, 1)
        try:
            import torchvision.transforms.v2.functional as tv  # noqa: PLC0415
        except Exception:
            tv = None

    def frames(n, k=3):
        return [cf.asarray(rng.integers(0, 256, (n, H, W, 3), dtype=numpy.uint8)) for _ in range(k)]

    def report(group, t, floor_bytes, ref="cupy unfused chain"):
        floor_us = floor_bytes / (copy_tbps * 1e12) * 1e6
        rows.append({"group": group, "case": "bandwidth floor", "us": round(floor_us, 2),
                     "bytes": int(floor_bytes)})
        for k, v in t.items():
            r = {"group": group, "case": k, "us": round(v, 2),
                 "pct_of_floor": round(100 * floor_us / v, 1)}
            for other in (ref, "torch.compile", "torchvision v2 chain", "torch eager"):
                if k.startswith("cuflow") and other in t:
                    r[f"speedup_vs_{other.replace(' ', '_')}"] = round(t[other] / v, 2)
            rows.append(r)

    def cupy_norm(xf):  # the chain people write: xf is float32 NHWC on the 0-255 scale
        y = (xf / 255.0 - mean_c) / std_c
        return cupy.ascontiguousarray(y.transpose(0, 3, 1, 2))

    # ---- normalize: batch 8 throughput, float32 and float16, and batch 1 latency
    for n, k in ((N, 3), (1, 8)):
        xs = frames(n, k)
        nxt = _rot(xs)
        px = [x.view(cupy.ndarray) for x in xs]
        pnxt = _rot(px)
        out32 = cf.empty((n, 3, H, W), numpy.float32)
        out16 = cf.empty((n, 3, H, W), numpy.float16)
        cases: dict[str, Callable[[], object]] = {
            "cuflow normalize float32": lambda: image.normalize(nxt(), mean=MEAN, std=STD,
                                                                dst=out32),
            "cuflow normalize float16": lambda: image.normalize(nxt(), mean=MEAN, std=STD,
                                                                dtype=numpy.float16, dst=out16),
            "cupy unfused chain": lambda: cupy_norm(pnxt().astype(numpy.float32)),
        }
        if torch is not None:
            ts = [torch.from_dlpack(p) for p in px]
            tnxt = _rot(ts)

            def teager(t):
                return ((t.permute(0, 3, 1, 2).float() / 255.0 - mean_t) / std_t).contiguous()

            cases["torch eager"] = lambda: teager(tnxt())
            try:
                tc = torch.compile(teager)
                tc(ts[0])
                torch.cuda.synchronize()
                cases["torch.compile"] = lambda: tc(tnxt())
            except Exception as e:  # compile may be unavailable; say so in the results
                rows.append({"group": "image", "case": "torch.compile unavailable",
                             "error": repr(e)[:200]})
            if tv is not None:
                cases["torchvision v2 chain"] = lambda: tv.normalize(
                    tv.to_dtype(tnxt().permute(0, 3, 1, 2), torch.float32, scale=True),
                    MEAN, STD)
        t = interleaved(cases, rounds, number, timer=device_time_us)
        in_b = n * H * W * 3
        g = f"normalize {n}x{H}x{W}x3 uint8 -> NCHW, device us"
        t16 = {k: v for k, v in t.items() if "float16" in k}
        report(g + " (float32 out)", {k: v for k, v in t.items() if "float16" not in k},
               in_b + 4 * in_b)
        report(g + " (float16 out)", t16, in_b + 2 * in_b)
        del xs, px, out32, out16

    # ---- 1080p -> 640x640, batch 8: resize_normalize, letterbox, NV12
    xs = frames(N)
    nxt = _rot(xs)
    pnxt = _rot([x.view(cupy.ndarray) for x in xs])
    out = cf.empty((N, 3, S, S), numpy.float32)
    in_b = N * H * W * 3
    out_b = N * 3 * S * S * 4
    zoom = (1, S / H, S / W, 1)
    rh, rw = round(H * S / W), S
    zoom_lb = (1, rh / H, rw / W, 1)

    def cupy_lb(x):
        r = ndi.zoom(x.astype(numpy.float32), zoom_lb, order=1, mode="nearest", grid_mode=True)
        canvas = cupy.full((N, S, S, 3), 114.0, numpy.float32)
        top = (S - rh) // 2
        canvas[:, top:top + rh] = r
        return cupy_norm(canvas)

    groups = {
        "resize_normalize": (
            lambda: image.resize_normalize(nxt(), S, mean=MEAN, std=STD, dst=out),
            lambda: cupy_norm(ndi.zoom(pnxt().astype(numpy.float32), zoom, order=1,
                                       mode="nearest", grid_mode=True))),
        "letterbox": (
            lambda: image.letterbox(nxt(), S, mean=MEAN, std=STD, dst=out),
            lambda: cupy_lb(pnxt())),
    }
    for name, (fused, chain) in groups.items():
        cases = {f"cuflow {name}": fused, "cupy unfused chain": chain}
        if torch is not None and tv is not None:
            tnxt = _rot([torch.from_dlpack(x.view(cupy.ndarray)) for x in xs])
            if name == "resize_normalize":
                cases["torchvision v2 chain"] = lambda: tv.normalize(tv.to_dtype(tv.resize(
                    tnxt().permute(0, 3, 1, 2), [S, S], antialias=False), torch.float32,
                    scale=True), MEAN, STD)
            else:
                top = (S - rh) // 2

                def tv_lb():
                    r = tv.resize(tnxt().permute(0, 3, 1, 2), [rh, rw], antialias=False)
                    r = tv.pad(r, [0, top, 0, S - rh - top], fill=114)
                    return tv.normalize(tv.to_dtype(r, torch.float32, scale=True), MEAN, STD)

                cases["torchvision v2 chain"] = tv_lb
        t = interleaved(cases, rounds, number, timer=device_time_us)
        report(f"{name} {N}x{H}x{W}x3 uint8 -> {N}x3x{S}x{S} float32, device us", t,
               in_b + out_b)

    # NV12 (the decoder's output) -> RGB, resized and normalized
    nv = [cf.asarray(rng.integers(16, 236, (N, H * 3 // 2, W), dtype=numpy.uint8))
          for _ in range(3)]
    nvn = _rot(nv)
    pnv = _rot([x.view(cupy.ndarray) for x in nv])
    co = yuv_coefficients("bt601", False)

    def cupy_nv12(f):
        y = f[:, :H].astype(numpy.float32)
        uv = f[:, H:].reshape(N, H // 2, W // 2, 2).astype(numpy.float32) - 128.0
        uv = cupy.repeat(cupy.repeat(uv, 2, axis=1), 2, axis=2)
        yy = (y - co[1]) * co[0]
        rgb = cupy.stack([yy + co[2] * uv[..., 1], yy - co[3] * uv[..., 0] - co[4] * uv[..., 1],
                          yy + co[5] * uv[..., 0]], axis=-1)
        rgb = cupy.clip(rgb, 0, 255)
        return cupy_norm(ndi.zoom(rgb, zoom, order=1, mode="nearest", grid_mode=True))

    cases = {"cuflow resize_normalize NV12": lambda: image.resize_normalize(
        nvn(), S, src_format="NV12", mean=MEAN, std=STD, dst=out),
        "cupy unfused chain": lambda: cupy_nv12(pnv())}
    if torch is not None and tv is not None:
        tnv = _rot([torch.from_dlpack(x.view(cupy.ndarray)) for x in nv])

        def torch_nv12():
            f = tnv()
            y = f[:, :H].float()
            uv = f[:, H:].reshape(N, H // 2, W // 2, 2).float() - 128.0
            uv = uv.repeat_interleave(2, 1).repeat_interleave(2, 2)
            yy = (y - co[1]) * co[0]
            rgb = torch.stack([yy + co[2] * uv[..., 1], yy - co[3] * uv[..., 0] - co[4] * uv[..., 1],
                               yy + co[5] * uv[..., 0]], 1).clamp(0, 255)
            r = tv.resize(rgb, [S, S], antialias=False)
            return tv.normalize(r / 255.0, MEAN, STD)

        cases["torchvision v2 chain"] = torch_nv12
    t = interleaved(cases, rounds, number, timer=device_time_us)
    report(f"NV12 {N}x{H}x{W} -> RGB {N}x3x{S}x{S} float32 normalized, device us", t,
           N * H * W * 3 // 2 + out_b)

    # crop_resize: 64 detector boxes from 8 frames into one 64x3x224x224 batch
    K, R = 64, 224
    x0 = rng.uniform(0, W - 400, K)
    y0 = rng.uniform(0, H - 400, K)
    wh = rng.uniform(64, 400, (K, 2))
    boxes = cf.asarray(numpy.stack([x0, y0, x0 + wh[:, 0], y0 + wh[:, 1]], 1).astype(numpy.float32))
    fidx = cf.asarray(rng.integers(0, N, K).astype(numpy.int32))
    cout = cf.empty((K, 3, R, R), numpy.float32)
    cases = {"cuflow crop_resize": lambda: image.crop_resize(
        nxt(), boxes, R, frame_index=fidx, mean=MEAN, std=STD, dst=cout)}
    if torch is not None:
        try:
            from torchvision.ops import roi_align  # noqa: PLC0415

            tb = torch.cat([torch.from_dlpack(fidx.view(cupy.ndarray)).float()[:, None],
                            torch.from_dlpack(boxes.view(cupy.ndarray))], 1)
            tnxt = _rot([torch.from_dlpack(x.view(cupy.ndarray)) for x in xs])
            cases["torchvision roi_align chain"] = lambda: (roi_align(
                tnxt().permute(0, 3, 1, 2).float(), tb, R, sampling_ratio=1, aligned=True)
                / 255.0 - mean_t) / std_t
        except Exception as e:
            rows.append({"group": "image", "case": "roi_align unavailable", "error": repr(e)[:200]})
    t = interleaved(cases, rounds, number, timer=device_time_us)
    crop_in = int(float((wh[:, 0] * wh[:, 1]).sum()) * 3)
    report(f"crop_resize {K} boxes from {N}x{H}x{W}x3 -> {K}x3x{R}x{R} float32, device us", t,
           crop_in + K * 3 * R * R * 4, ref="torchvision roi_align chain")

    # denormalize: model output back to uint8 frames
    y = image.normalize(xs[0][:, :S, :S], mean=MEAN, std=STD)
    dout = cf.empty((N, S, S, 3), numpy.uint8)
    py = y.view(cupy.ndarray)
    cases = {"cuflow denormalize": lambda: image.denormalize(y, mean=MEAN, std=STD, dst=dout),
             "cupy unfused chain": lambda: cupy.clip(cupy.rint(
                 (py.transpose(0, 2, 3, 1) * std_c + mean_c) * 255.0), 0, 255).astype(numpy.uint8)}
    t = interleaved(cases, rounds, number, timer=device_time_us)
    report(f"denormalize {N}x3x{S}x{S} float32 -> uint8 NHWC, device us", t,
           y.nbytes + dout.nbytes)
    return rows
