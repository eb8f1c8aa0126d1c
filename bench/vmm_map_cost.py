"""Host cost of the driver's virtual-memory calls by size, beside cudaMalloc and cudaFree.

    python bench/vmm_map_cost.py [--sizes 2 8 32 128 512] [--repeat 5]

Per size: ``cuMemCreate``, ``cuMemMap``, ``cuMemSetAccess``, ``cuMemUnmap`` and
``cuMemRelease`` of one physical allocation of that size, and ``cudaMalloc`` / ``cudaFree`` of
the same bytes (medians of ``--repeat``).  Then 32 MiB mapped as 16 pages of 2 MiB, one
``cuMemCreate`` and ``cuMemMap`` each and one ``cuMemSetAccess`` over the run, as
``VirtualMemoryBackend`` maps a run of pages (and one ``cuMemUnmap`` over the run, then a
``cuMemRelease`` a page): what a first pass over expandable segments pays per page, against
one allocation of the whole run.
"""

from __future__ import annotations

import argparse
import ctypes as C
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 8, 32, 128, 512],
                    help="MiB, multiples of 2")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    if args.repeat < 1 or any(m < 2 or m % 2 for m in args.sizes):
        ap.error(f"--repeat must be >= 1 and --sizes multiples of 2 MiB, got {args.repeat} "
                 f"and {args.sizes}")
    import cuflow
    if not cuflow.get_backend().is_gpu:
        print("bench/vmm_map_cost.py needs a GPU", file=sys.stderr)
        return 1
    import cupy

    from cuflow.memory._expandable import (_DEVICE, _PINNED, _READ_WRITE, _Access, _AllocFlags,
                                           _Location, _Prop)

    rt = cupy.cuda.runtime
    dev = rt.getDevice()
    rt.free(rt.malloc(1 << 20))  # (the context exists before the first timed call)
    cu = C.CDLL("libcuda.so.1")
    prop = _Prop(_PINNED, 0, _Location(_DEVICE, dev), None, _AllocFlags())
    acc = _Access(_Location(_DEVICE, dev), _READ_WRITE)
    span = max(max(args.sizes), 32) << 20
    base = C.c_uint64()

    def ok(r: int, what: str) -> None:
        if r:
            raise RuntimeError(f"{what} returned CUresult {r}")

    ok(cu.cuMemAddressReserve(C.byref(base), C.c_size_t(span), C.c_size_t(0), C.c_uint64(0),
                              C.c_uint64(0)), "cuMemAddressReserve")
    addr = C.c_uint64(base.value)

    def timed(fn):
        t0 = time.perf_counter()
        r = fn()
        return (time.perf_counter() - t0) * 1e6, r

    print("host us per call (medians)")
    for mib in args.sizes:
        n = C.c_size_t(mib << 20)
        rows: dict[str, list[float]] = {k: [] for k in ("create", "map", "access", "unmap",
                                                        "release", "cudaMalloc", "cudaFree")}
        for _ in range(args.repeat):
            h = C.c_uint64()
            for name, fn in (
                    ("create", lambda: cu.cuMemCreate(C.byref(h), n, C.byref(prop), C.c_uint64(0))),
                    ("map", lambda: cu.cuMemMap(addr, n, C.c_size_t(0), h, C.c_uint64(0))),
                    ("access", lambda: cu.cuMemSetAccess(addr, n, C.byref(acc), C.c_size_t(1))),
                    ("unmap", lambda: cu.cuMemUnmap(addr, n)),
                    ("release", lambda: cu.cuMemRelease(h))):
                dt, r = timed(fn)
                ok(r, name)
                rows[name].append(dt)
            dt, p = timed(lambda: rt.malloc(mib << 20))
            rows["cudaMalloc"].append(dt)
            dt, _ = timed(lambda: rt.free(p))
            rows["cudaFree"].append(dt)
        print(f"{mib:5d} MiB  " + "  ".join(f"{k} {statistics.median(v):7.1f}"
                                           for k, v in rows.items()))
    page = 2 << 20
    maps, unmaps = [], []
    for _ in range(args.repeat):
        hs = []
        t0 = time.perf_counter()
        for i in range(16):
            h = C.c_uint64()
            ok(cu.cuMemCreate(C.byref(h), C.c_size_t(page), C.byref(prop), C.c_uint64(0)),
               "cuMemCreate")
            ok(cu.cuMemMap(C.c_uint64(base.value + i * page), C.c_size_t(page), C.c_size_t(0),
                           h, C.c_uint64(0)), "cuMemMap")
            hs.append(h)
        ok(cu.cuMemSetAccess(addr, C.c_size_t(16 * page), C.byref(acc), C.c_size_t(1)),
           "cuMemSetAccess")
        t1 = time.perf_counter()
        ok(cu.cuMemUnmap(addr, C.c_size_t(16 * page)), "cuMemUnmap")
        for h in hs:
            ok(cu.cuMemRelease(h), "cuMemRelease")
        t2 = time.perf_counter()
        maps.append((t1 - t0) * 1e6)
        unmaps.append((t2 - t1) * 1e6)
    print(f"32 MiB as 16 pages of 2 MiB: map {statistics.median(maps):.0f} us, "
          f"unmap {statistics.median(unmaps):.0f} us")
    ok(cu.cuMemAddressFree(C.c_uint64(base.value), C.c_size_t(span)), "cuMemAddressFree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
