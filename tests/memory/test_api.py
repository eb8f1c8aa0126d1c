"""cuflow.memory's module API and CuPy glue: the installed allocator, pinned host arrays."""

from __future__ import annotations

import os

import numpy as np
import pytest

from cuflow.memory import round_size


@pytest.mark.gpu
def test_cupy_allocations_use_the_pool(pooled):
    import cupy

    gpu_cf = pooled
    pool = gpu_cf.memory.get_pool()
    n = pool.num_alloc
    x = cupy.empty((1000,), cupy.float32)  # plain CuPy, not cuflow
    assert pool.num_alloc == n + 1
    assert pool.block_of(x.data.ptr) is not None
    used = pool.used_bytes()
    del x
    assert pool.used_bytes() == used - round_size(4000)
    # the backend CUFLOW_POOL_BACKEND names (the default: the driver's pool)
    assert pool.stats()["backend"] == {"driver": "driver-pool", "vmm": "vmm",
                                       "cudamalloc": "cudamalloc"}[gpu_cf.memory.POOL_BACKEND]


_WHICH_ALLOCATOR = (
    "import cupy, cuflow as cf; cf.set_backend('cupy'); cf.zeros(4); "
    "print(type(cf.zeros(4).data.mem).__name__)")


@pytest.mark.gpu
@pytest.mark.parametrize(("env", "owner"), [
    ({}, "PoolMemory"), ({"CUFLOW_POOL": "off"}, "PooledMemory")])
def test_pool_is_installed_by_default_and_off_leaves_cupys(gpu_cf, env, owner):
    """By default cuflow's pool becomes CuPy's allocator on first use (CuPy's
    memory objects of cuflow's allocator hook); CUFLOW_POOL=off keeps CuPy's MemoryPool."""
    import subprocess
    import sys

    e = {k: v for k, v in os.environ.items() if k not in ("CUFLOW_POOL", "CUFLOW_POOL_HOTPATH")}
    e.update(env)
    out = subprocess.run([sys.executable, "-c", _WHICH_ALLOCATOR], env=e, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[-1] == owner


@pytest.mark.gpu
def test_pinned_host_arrays(gpu_cf):
    cf = gpu_cf
    h = cf.memory.empty_pinned((4, 5), np.float32)
    h[...] = np.arange(20, dtype=np.float32).reshape(4, 5)
    assert cf.memory.zeros_pinned(3, np.int32).tolist() == [0, 0, 0]
    s = cf.Stream()
    d = cf.asarray(h, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(cf.asnumpy(d), h)


@pytest.mark.gpu
def test_arrays_freed_by_a_garbage_collection_go_back_to_the_pool(gpu_cf):
    """A collected reference cycle that holds arrays gives their blocks back (the cycle's
    objects are cleared in allocation order, the memory objects before the list)."""
    import gc

    cf = gpu_cf
    gc.collect()
    before = cf.memory.stats()["allocated_bytes.all.current"]
    for _ in range(20):
        a = cf.empty(1 << 20, dtype="uint8")
        cycle = [a]
        cycle.append(cycle)
        del a, cycle
    gc.collect()
    cf.memory.get_pool().flush_frees()
    assert cf.memory.stats()["allocated_bytes.all.current"] == before
