"""The page policies of bench/heap_model.py on the GPU's virtual-memory API: device footprint
and the driver's mapping costs, per allocation trace.

    python bench/vmm_heap.py [--policy threshold] [TRACE ...]   # default: every trace

The model's placement runs as it does on the CPU, and every page it maps or unmaps is mapped
or unmapped on the device: a 2 MiB physical allocation per page (``cuMemCreate``) mapped
into one reserved address range (``cuMemMap``), read-write access set once per run of
adjacent pages (``cuMemSetAccess``), and ``cuMemUnmap`` and ``cuMemRelease`` per page.  Per
trace and replay: the mapping calls (runs mapped or unmapped), the pages, the driver's time
in them, and the device footprint: the peak of the memory in use that ``cudaMemGetInfo``
reports, above what was in use before the trace, over the peak requested bytes.  No kernel
runs on the memory; after the first replay every mapped page is written once
(``cuMemsetD8``), so a page mapped without access would fail there.

This measures the design, not a pool: the placement is the model's Python, so only the
footprint and the driver's calls are figures of a backend built on it.
"""

from __future__ import annotations

import argparse
import ctypes as C
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import heap_model  # noqa: E402  (this folder's model)
from heap_model import PAGE, Heap  # noqa: E402

RESERVE = 16 << 30  # address space reserved per trace: the tops of the traces stay under 1 GiB


class _Location(C.Structure):
    _fields_ = [("type", C.c_int), ("id", C.c_int)]


class _AllocFlags(C.Structure):
    _fields_ = [("compressionType", C.c_ubyte), ("gpuDirectRDMACapable", C.c_ubyte),
                ("usage", C.c_ushort), ("reserved", C.c_ubyte * 4)]


class _Prop(C.Structure):  # CUmemAllocationProp
    _fields_ = [("type", C.c_int), ("requestedHandleTypes", C.c_int), ("location", _Location),
                ("win32HandleMetaData", C.c_void_p), ("allocFlags", _AllocFlags)]


class _Access(C.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", C.c_int)]


class Driver:
    """The virtual-memory calls of libcuda for one device, timed."""

    def __init__(self, device: int) -> None:
        self.cu = C.CDLL("libcuda.so.1")
        # pinned device memory on ``device``; read-write access from it
        self.prop = _Prop(1, 0, _Location(1, device), None, _AllocFlags())
        self.access = _Access(_Location(1, device), 3)
        self.ns = 0

    def __call__(self, name: str, *args) -> None:
        t = time.perf_counter_ns()
        r = getattr(self.cu, name)(*args)
        self.ns += time.perf_counter_ns() - t
        if r:
            raise RuntimeError(f"{name} returned CUresult {r}")

    def reserve(self, size: int) -> int:
        p = C.c_uint64()
        self("cuMemAddressReserve", C.byref(p), C.c_size_t(size), C.c_size_t(0), C.c_uint64(0),
             C.c_uint64(0))
        return p.value

    def granularity(self) -> int:
        g = C.c_size_t()
        self("cuMemGetAllocationGranularity", C.byref(g), C.byref(self.prop), 0)
        return g.value


def _runs(pages) -> list[list[int]]:
    out: list[list[int]] = []
    for p in sorted(pages):
        if out and out[-1][-1] == p - 1:
            out[-1].append(p)
        else:
            out.append([p])
    return out


class DeviceHeap(Heap):
    """The model's heap, its pages mapped on the device."""

    def __init__(self, policy: str, drv: Driver, used) -> None:
        super().__init__(policy)
        self.drv, self.used = drv, used
        self.base = drv.reserve(RESERVE)
        self.handles: dict[int, C.c_uint64] = {}
        self.base_used = used()
        self.peak_used = 0
        self.pages_mapped = self.pages_unmapped = 0

    def map_pages(self, pages: list[int]) -> None:
        for run in _runs(pages):
            for p in run:
                h = C.c_uint64()
                self.drv("cuMemCreate", C.byref(h), C.c_size_t(PAGE), C.byref(self.drv.prop),
                         C.c_uint64(0))
                self.drv("cuMemMap", C.c_uint64(self.base + p * PAGE), C.c_size_t(PAGE),
                         C.c_size_t(0), h, C.c_uint64(0))
                self.handles[p] = h
            self.drv("cuMemSetAccess", C.c_uint64(self.base + run[0] * PAGE),
                     C.c_size_t(len(run) * PAGE), C.byref(self.drv.access), C.c_size_t(1))
        self.pages_mapped += len(pages)
        super().map_pages(pages)
        self.peak_used = max(self.peak_used, self.used() - self.base_used)

    def unmap_pages(self, pages: set[int]) -> None:
        for p in sorted(pages):
            self.drv("cuMemUnmap", C.c_uint64(self.base + p * PAGE), C.c_size_t(PAGE))
            self.drv("cuMemRelease", self.handles.pop(p))
        self.pages_unmapped += len(pages)
        super().unmap_pages(pages)

    def touch(self) -> None:
        """Write every mapped page once (fails on a page mapped without access)."""
        for run in _runs(self.mapped):
            self.drv("cuMemsetD8_v2", C.c_uint64(self.base + run[0] * PAGE), C.c_ubyte(7),
                     C.c_size_t(len(run) * PAGE))
        self.drv("cuCtxSynchronize")

    def close(self) -> None:
        self.unmap_pages(set(self.mapped))
        self.drv("cuMemAddressFree", C.c_uint64(self.base), C.c_size_t(RESERVE))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="*", help="trace names (default: every trace and loop)")
    ap.add_argument("--policy", default="threshold", choices=("grow", "unmap", "threshold"))
    args = ap.parse_args(argv)
    names = [*heap_model._traces.TRACES, *heap_model._traces.loop_names()]
    unknown = sorted(set(args.traces) - set(names))
    if unknown:
        ap.error(f"unknown traces {unknown}; the traces are {names}")
    try:
        import cupy

        cupy.zeros(1)  # the device's primary context, current for the driver's calls
    except Exception as e:
        print(f"bench/vmm_heap.py maps device memory and needs a GPU through CuPy: {e}",
              file=sys.stderr)
        return 1
    drv = Driver(cupy.cuda.runtime.getDevice())
    if drv.granularity() > PAGE:
        print(f"the device maps in {drv.granularity()} byte granules, more than the model's "
              f"{PAGE}", file=sys.stderr)
        return 1
    rt = cupy.cuda.runtime

    def used() -> int:
        free, total = rt.memGetInfo()
        return total - free

    print(f"policy {args.policy}; per replay: mapping calls (runs mapped + unmapped), pages "
          f"mapped + unmapped, the driver's time in them")
    print(f"{'trace':38s} {'footprint':>9s} {'model':>6s}  {'first replay':>34s}  "
          f"{'second replay':>34s}")
    for name in args.traces or names:
        its = heap_model._traces.trace_its(name)
        heap = DeviceHeap(args.policy, drv, used)
        cells = []

        def after(i: int, heap: DeviceHeap = heap, cells: list[str] = cells) -> None:
            calls = heap.maps + heap.unmaps
            pages = heap.pages_mapped + heap.pages_unmapped
            cells.append((calls, pages, drv.ns))
            if i == 0:
                heap.touch()
                drv.ns = cells[-1][2]  # (the check's time is not the replay's)

        drv.ns = 0
        model, _, _ = heap_model.replay(its, args.policy, heap, after)
        (c1, p1, t1), (c2, p2, t2) = cells
        footprint = heap.peak_used / heap_model._traces.peak_requested(its)
        heap.close()
        print(f"{name:38s} {footprint:9.3f} {model:6.2f}  {c1:5d} calls {p1:6d} pages "
              f"{t1 / 1e6:8.2f} ms  {c2 - c1:5d} calls {p2 - p1:6d} pages "
              f"{(t2 - t1) / 1e6:8.2f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
