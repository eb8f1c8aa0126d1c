"""Helpers of the memory tests: fake asynchronous backends, byte patterns, the pool's
consistency check, and every logic test run over both hot paths (compiled and Python)."""

from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest

from cuflow.memory import HostBackend, HostExpandableBackend, _expandable, _pool


class FakeEvents:
    """Fake asynchronous streams: events complete when the test says so, or when the host
    waits for one (polls it ``patience`` times: the pool's out-of-memory retry does), as a
    device's work ends while the host waits."""

    patience = 10**5
    events: list
    waits: list

    def record(self, stream):
        ev = {"stream": stream, "done": False, "polls": 0}
        self.events.append(ev)
        return ev

    def done(self, event):
        if not event["done"]:
            event["polls"] += 1
            event["done"] = event["polls"] >= self.patience
        return event["done"]

    def wait(self, stream, event):
        self.waits.append((stream, event["stream"]))

    def finish_all(self):
        for ev in self.events:
            ev["done"] = True

    def _sync(self, event):  # (an expandable backend's host wait for one event)
        event["done"] = True


class EventBackend(FakeEvents, HostBackend):
    """Host memory with :class:`FakeEvents`."""

    def __init__(self, capacity=None):
        super().__init__(capacity)
        self.events = []
        self.waits = []


class ExpandableEventBackend(FakeEvents, HostExpandableBackend):
    """Expandable segments over host memory with :class:`FakeEvents`, in the heap's form
    (``PageHeap.events``: an event is created once and recorded again)."""

    def __init__(self, capacity=256 << 20):
        super().__init__(capacity)
        self.events = []
        self.waits = []
        self.heap.events = (self._create, self._record, self._query, self.wait, self._sync,
                            self._destroy)

    def _create(self):
        ev = {"stream": None, "done": True, "polls": 0, "destroyed": False}
        self.events.append(ev)
        return ev

    def _record(self, event, stream):
        assert not event["destroyed"], "a destroyed event recorded"
        event.update(stream=stream, done=False, polls=0)

    def _query(self, event):
        return 0 if self.done(event) else 600

    def _destroy(self, event):
        event["destroyed"] = True

    def wait(self, stream, event, flags=0):
        assert not event.get("destroyed"), "a destroyed event waited for"
        super().wait(stream, event)


def device_unshared() -> bool:
    """Whether this is the only test process on the device: ``memGetInfo`` counts every
    process's memory, and ``pytest -n N`` runs N of them side by side."""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) == 1


def fill(b, byte):
    ctypes.memset(b.ptr, byte, b.req)


def check(b, byte):
    data = ctypes.string_at(b.ptr, b.req)
    assert data == bytes([byte]) * b.req, f"block at {b.ptr:#x} corrupted"


class DeviceBytes:
    """fill / check / copy / set for blocks of device memory, each on the block's stream
    (asynchronous, as a kernel's use would be), checks read back and wait."""

    def __init__(self):
        import cupy

        self.rt = cupy.cuda.runtime

    def set(self, ptr, byte, n, stream):
        self.rt.memsetAsync(ptr, byte, n, stream)

    def fill(self, b, byte):
        self.set(b.ptr, byte, b.req, b.stream)

    def check(self, b, byte):
        host = np.empty(b.req, np.uint8)
        self.rt.memcpyAsync(host.ctypes.data, b.ptr, b.req, self.rt.memcpyDeviceToHost,
                            b.stream)
        self.rt.streamSynchronize(b.stream)
        assert (host == byte).all(), f"device block at {b.ptr:#x} corrupted"

    def copy(self, dst, src, n, stream):
        self.rt.memcpyAsync(dst, src, n, self.rt.memcpyDeviceToDevice, stream)


def assert_consistent(pool, live):
    """Live blocks never overlap; the pool's counters match them."""
    spans = sorted((b.ptr, b.ptr + b.size) for b in live)
    for (s0, e0), (s1, _) in zip(spans, spans[1:], strict=False):
        assert e0 <= s1, "two live blocks overlap"
    st_ = pool.stats()
    assert st_["allocated_bytes.all.current"] == sum(b.size for b in live)
    assert st_["requested_bytes.all.current"] == sum(b.req for b in live)
    assert st_["reserved_bytes.all.current"] == sum(s["size"] for s in pool.snapshot())
    for seg in pool.snapshot():  # blocks tile their segment exactly
        assert sum(blk["size"] for blk in seg["blocks"]) == seg["size"]


def pytest_generate_tests(metafunc):
    """Every test of the pool's logic runs over the compiled hot path and the Python one
    (the GPU tests use the pool cuflow installed)."""
    if (metafunc.definition.get_closest_marker("gpu") is None
            and "hot_path" not in metafunc.definition.name):  # not the tests comparing them
        metafunc.parametrize("hot_path", ["compiled", "python"], indirect=True)


@pytest.fixture(autouse=True)
def hot_path(request, monkeypatch):
    which = getattr(request, "param", "installed")
    if which == "python":
        monkeypatch.setattr(_pool, "HotAlloc", None)
        monkeypatch.setattr(_expandable, "CPageHeap", None)
    elif which == "compiled":
        needs_compiled()
    return which


def needs_compiled():
    """Skip a test of the compiled hot path under ``CUFLOW_POOL_HOTPATH=python``; fail it
    where the extension was not built."""
    if os.environ.get("CUFLOW_POOL_HOTPATH", "").strip().lower() == "python":
        pytest.skip("CUFLOW_POOL_HOTPATH=python: the Python hot path only")
    assert _pool.HotAlloc is not None, (
        "the memory pool's C hot path (cuflow/memory/_hotpath.c) was not built: install "
        "with a C compiler and Python's headers (pip install -e .), or set "
        "CUFLOW_POOL_HOTPATH=python to test the Python one only")


def python_pool(*args, **kwargs):
    """``Pool(*args, **kwargs)`` as a build without a compiler makes it: Python paths and
    Python free lists."""
    saved, _pool.HotAlloc = _pool.HotAlloc, None
    try:
        return _pool.Pool(*args, **kwargs)
    finally:
        _pool.HotAlloc = saved


def python_hot_path(pool):
    """``pool`` with the Python hot path (what a build without a compiler runs)."""
    saved, _pool.HotAlloc = _pool.HotAlloc, None
    try:
        pool.alloc_ptr = pool._make_alloc()
    finally:
        _pool.HotAlloc = saved
    return pool


class CaptureBackend(EventBackend):
    """Fake streams that may be capturing a graph, with CUDA's rules: while any stream
    captures, nothing frees device memory or synchronizes the device, and no event is
    recorded on or awaited by a capturing stream outside the captured work; events are
    recorded on and awaited by existing streams only (``streams``, when the test sets it)."""

    def __init__(self, capacity=None):
        super().__init__(capacity)
        self.capturing = set()
        self.streams = None
        self.syncs = 0

    def _legal(self, what, stream=None):
        bad = self.capturing if stream is None else self.capturing & {stream}
        assert not bad, f"{what} while stream(s) {sorted(bad)} capture a graph"
        assert stream is None or self.streams is None or stream in self.streams, (
            f"{what} on stream {stream}, which does not exist")

    def free(self, ptr, nbytes, stream):
        self._legal("a device free")
        super().free(ptr, nbytes, stream)

    def synchronize(self):
        self._legal("a device synchronize")
        self.syncs += 1
        self.finish_all()

    def record(self, stream):
        self._legal("an event record", stream)
        return super().record(stream)

    def wait(self, stream, event):
        self._legal("an event wait", stream)
        super().wait(stream, event)


def begin_capture(pool, be, stream):
    be.capturing.add(stream)
    return pool.begin_private(stream)


def end_capture(pool, be, stream):
    be.capturing.discard(stream)  # CUDA ends the capture, then cuflow.graph tells the pool
    pool.end_private(stream)


class FakeStream:
    """Stands for a CuPy stream object: the pool watches its life through a weak reference."""


@pytest.fixture
def pooled(gpu_cf):
    if not gpu_cf.memory._INSTALLED:
        pytest.skip("cuflow's pool is off (CUFLOW_POOL=off): CuPy keeps its own allocator")
    return gpu_cf
