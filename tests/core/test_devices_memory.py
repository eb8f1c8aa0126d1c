"""The memory API per device: one pool per device, statistics of each, ``device=`` validated.

Runs on the NumPy backend emulating three devices and on the machine's GPUs (``gpu``).
"""

from __future__ import annotations

import pytest

MIB = 1 << 20

def test_every_device_has_statistics(dcf):
    for i in range(dcf.Device().count):
        s = dcf.memory.stats(device=i)
        # counters of the device's own pool (earlier tests may have run it out of memory)
        assert s["allocated_bytes.all.current"] >= 0 and s["num_ooms"] >= 0
        assert s["segment.all.current"] == len(dcf.memory.get_pool(device=i)._segments)
        assert dcf.memory.empty_cache(device=i) >= 0
        dcf.memory.reset_peak_stats(device=i)


@pytest.mark.parametrize("fn", ["stats", "empty_cache", "summary", "reset_peak_stats"])
def test_a_device_that_does_not_exist_is_refused(dcf, fn):
    n = dcf.Device().count
    for bad in (n, -1):
        with pytest.raises(ValueError, match="device") as e:
            getattr(dcf.memory, fn)(device=bad)
        assert isinstance(e.value, dcf.CuflowError)


@pytest.mark.gpu
def test_pools_are_per_device_and_isolated(gpu_cf):
    cf = gpu_cf
    n = cf.Device().count
    for i in range(n):
        before = [cf.memory.stats(device=k)["allocated_bytes.all.current"] for k in range(n)]
        with cf.Device(i):
            x = cf.empty(64 * MIB, dtype=cf.uint8)
            x.fill(1)
        after = [cf.memory.stats(device=k)["allocated_bytes.all.current"] for k in range(n)]
        assert after[i] - before[i] >= 64 * MIB
        assert all(after[k] == before[k] for k in range(n) if k != i)
        assert cf.get_backend().device_of(x) == i
        del x
        cf.Device(i).synchronize()
        assert cf.memory.stats(device=i)["allocated_bytes.all.current"] == before[i]


@pytest.mark.gpu
def test_a_limit_on_one_device_leaves_the_others_alone(gpu_cf):
    cf = gpu_cf
    n = cf.Device().count
    if n < 2:
        pytest.skip("needs two devices; this machine has one GPU")
    try:
        cf.memory.set_limit(32 * MIB, device=n - 1)
        with cf.Device(0):
            a = cf.empty(128 * MIB, dtype=cf.uint8)  # device 0 has no limit
        with cf.Device(n - 1), pytest.raises(cf.OutOfMemoryError):
            cf.empty(128 * MIB, dtype=cf.uint8)
        del a
    finally:
        cf.memory.set_limit(None, device=n - 1)
