"""Devices: ``cuflow.Device``, arrays that know their device, ops that refuse another device's
arrays, ``to_device``, streams, events, kernels, Bufferizer and Pipeline on a device.

One body runs on the NumPy backend emulating three devices (``CUFLOW_NUMPY_DEVICES=3``) and on
the GPUs of the machine (``gpu``); the checks that need two devices skip with a reason on a
machine with one GPU, and every check runs over all devices there are.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cuflow

from .conftest import EMULATED

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

def n_devices(cf):
    return cf.Device().count


def two(cf):
    """The ordinals of two devices, or a skip on a machine with one."""
    if n_devices(cf) < 2:
        pytest.skip("needs two devices; this machine has one GPU")
    return 0, n_devices(cf) - 1


def device_of(cf, x):
    return cf.get_backend().device_of(x)


def frame(rng, h=24, w=32):
    return rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)


# ---------------------------------------------------------------- the Device context
def test_device_context_switches_and_restores(dcf):
    n = n_devices(dcf)
    assert dcf.Device().id == 0
    for i in range(n):
        with dcf.Device(i) as d:
            assert d.id == i and dcf.Device() == d == i
            with dcf.Device(0):
                assert dcf.Device().id == 0
            assert dcf.Device().id == i
        assert dcf.Device().id == 0


def test_device_use_and_cupys_properties(dcf):
    i = n_devices(dcf) - 1
    try:
        dcf.Device(i).use()
        assert dcf.Device().id == i
    finally:
        dcf.Device(0).use()
    assert dcf.Device().id == 0
    d = dcf.Device(0)
    if dcf.get_backend().is_gpu:
        assert d.compute_capability.isdigit() and int(d.compute_capability) >= 35
        free, total = d.mem_info
        assert 0 < free <= total
    else:
        for what in ("compute_capability", "mem_info"):
            with pytest.raises(cuflow.BackendError, match=f"Device.{what} describes a GPU"):
                getattr(d, what)


def test_device_context_restores_after_an_error(dcf):
    i = n_devices(dcf) - 1
    with pytest.raises(ZeroDivisionError):
        with dcf.Device(i):
            1 / 0
    assert dcf.Device().id == 0


@given(path=st.lists(st.integers(0, EMULATED - 1), max_size=8))
@settings(max_examples=40, deadline=None)
def _nested_devices_restore_in_order(path):
    n = cuflow.Device().count
    seen = []

    def enter(rest):
        if not rest:
            return
        i = rest[0] % n
        with cuflow.Device(i):
            seen.append(cuflow.Device().id == i)
            enter(rest[1:])
            seen.append(cuflow.Device().id == i)

    before = cuflow.Device().id
    enter(path)
    assert all(seen) and cuflow.Device().id == before


@pytest.fixture
def emulated(monkeypatch):
    monkeypatch.setenv("CUFLOW_NUMPY_DEVICES", str(EMULATED))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cuflow.set_backend("numpy")
    yield cuflow
    monkeypatch.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cuflow.set_backend("numpy")


def test_nested_devices_under_emulation(emulated):
    _nested_devices_restore_in_order()


@pytest.mark.parametrize("bad", [-1, "n", 1.0, True, None])
def test_device_refuses_a_bad_ordinal(dcf, bad):
    if bad is None:
        bad = n_devices(dcf)  # one past the last device
    with pytest.raises(dcf.ArgumentError, match=r"cuflow\.Device: device must be"):
        dcf.Device(bad)


def test_emulated_device_count_must_be_positive(monkeypatch):
    monkeypatch.setenv("CUFLOW_NUMPY_DEVICES", "zero")
    with pytest.raises(cuflow.BackendError, match="CUFLOW_NUMPY_DEVICES must be a positive int"):
        cuflow.set_backend("numpy")
    monkeypatch.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cuflow.set_backend("numpy")


# -------------------------------------------------------------- arrays know their device
def test_arrays_are_made_on_the_current_device(dcf, rng):
    host = rng.standard_normal((5, 7)).astype(np.float32)
    for i in range(n_devices(dcf)):
        with dcf.Device(i):
            made = [dcf.asarray(host), dcf.zeros((3,)), dcf.arange(4), dcf.asarray(host) * 2,
                    dcf.sum(dcf.asarray(host), axis=0), dcf.image.normalize(
                        dcf.asarray(frame(rng)), mean=MEAN, std=STD)]
            assert [device_of(dcf, x) for x in made] == [i] * len(made)
            assert made[0].device.id == i


def test_ops_on_every_device_give_the_same_result(dcf, rng):
    host = rng.standard_normal((64, 33)).astype(np.float32)
    want = np.sqrt(np.abs(host)) + host.sum(axis=1, keepdims=True)
    for i in range(n_devices(dcf)):
        with dcf.Device(i):
            a = dcf.asarray(host)
            got = dcf.sqrt(dcf.abs(a)) + dcf.sum(a, axis=1, keepdims=True)
            np.testing.assert_allclose(dcf.asnumpy(got), want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------- another device's array is refused
def test_ops_refuse_an_array_of_another_device(dcf, rng):
    i, j = two(dcf)
    host = rng.standard_normal((4, 6)).astype(np.float32)
    with dcf.Device(j):
        b = dcf.asarray(host)
    with dcf.Device(i):
        a = dcf.asarray(host)
        dst = dcf.empty_like(a)
        calls = {
            "add": lambda: dcf.add(a, b),
            "operator": lambda: a + b,
            "in-place": lambda: a.__iadd__(b),
            "unary": lambda: dcf.negative(b),
            "reduction": lambda: dcf.sum(b),
            "method": lambda: b.sum(),
            "dst": lambda: dcf.add(a, a, dst=b),
            "input with dst": lambda: dcf.add(a, b, dst=dst),
            "concatenate": lambda: dcf.concatenate([a, b]),
            "stack": lambda: dcf.stack([a, b]),
            "where": lambda: dcf.where(a > 0, a, b),
            "clip": lambda: dcf.clip(b, -1.0, 1.0),
            "matmul": lambda: dcf.matmul(a, b.T),
            "fused": lambda: dcf.fuse(lambda x, y: x * y + 1.0)(a, b),
            "forwarded": lambda: dcf.linalg.solve(a[:, :4], b[:, 0]),  # (array-api-compat's)
            "forwarded random": lambda: dcf.random.normal(b),
        }
        for what, call in calls.items():
            before = dcf.asnumpy(a)
            with pytest.raises((dcf.DeviceError, dcf.DstError), match=f"device {j}") as e:
                call()
            assert isinstance(e.value, dcf.CuflowError), what
            np.testing.assert_array_equal(dcf.asnumpy(a), before)


def test_darray_methods_refuse_an_array_of_another_device(dcf, rng):
    """``copy``, ``dot`` and item assignment check devices as the ops do: the base class's
    own would compute on another device's array (CuPy by peer access, NumPy's emulated
    devices into an array of that device)."""
    i, j = two(dcf)
    host = rng.uniform(-1e3, 1e3, size=(5, 5)).astype(np.float32)
    rows = rng.permutation(5)[:2]
    with dcf.Device(j):
        b = dcf.asarray(host.copy())  # (the NumPy backend may share host's memory)
        idx = dcf.asarray(rows)
    with dcf.Device(i):
        a = dcf.asarray(host[::-1].copy())
        dst = dcf.empty_like(a)
        calls = {
            "copy": lambda: b.copy(),
            "copy with dst": lambda: b.copy(dst=dst),
            "dot": lambda: a.dot(b),
            "dot of it": lambda: b.dot(a),
            "dot out": lambda: a.dot(a, out=b),
            "assign another device's value": lambda: a.__setitem__(slice(None), b),
            "assign into it": lambda: b.__setitem__(0, 1.0),
            "assign at its index": lambda: a.__setitem__(idx, 0.0),
            "assign at its index in a tuple": lambda: a.__setitem__((idx, 1), 0.0),
        }
        for what, call in calls.items():
            with pytest.raises(dcf.DeviceError, match=f"device {j}") as e:
                call()
            assert isinstance(e.value, dcf.CuflowError), what
            assert f"x.to_device({i})" in str(e.value), what
            np.testing.assert_array_equal(dcf.asnumpy(a), host[::-1], err_msg=what)
    with dcf.Device(j):
        np.testing.assert_array_equal(dcf.asnumpy(b), host)
        # on their own device the same calls run, their results there
        c = b.copy()
        d = b.dot(b)
        b[idx] = 0.0
        assert device_of(dcf, c) == device_of(dcf, d) == j
        np.testing.assert_array_equal(dcf.asnumpy(c), host)
        scale = float(np.abs(host).max()) ** 2 * host.shape[0]  # (sums in any order)
        np.testing.assert_allclose(dcf.asnumpy(d), host @ host, rtol=1e-5, atol=1e-6 * scale)
        want = host.copy()
        want[rows] = 0
        np.testing.assert_array_equal(dcf.asnumpy(b), want)
    with dcf.Device(i):
        a[...] = b.to_device(i)  # the explicit copy is the way across
        np.testing.assert_array_equal(dcf.asnumpy(a), want)


def test_image_ops_refuse_a_frame_of_another_device(dcf, rng):
    i, j = two(dcf)
    with dcf.Device(j):
        f = dcf.asarray(frame(rng))
    with dcf.Device(i):
        with pytest.raises(dcf.DeviceError, match=rf"image\.\w+: an input is on device {j}"):
            dcf.image.resize_normalize(f, (8, 8), mean=MEAN, std=STD)
        out = dcf.empty((3, 8, 8), dtype=dcf.float32)
        with pytest.raises(dcf.DeviceError, match=f"device {j}"):
            dcf.image.resize_normalize(f, (8, 8), mean=MEAN, std=STD, dst=out)


def test_the_error_says_how_to_fix_it(dcf):
    i, j = two(dcf)
    with dcf.Device(j):
        b = dcf.ones(3)
    with dcf.Device(i), pytest.raises(dcf.DeviceError) as e:
        dcf.multiply(b, 2)
    msg = str(e.value)
    assert f"x.to_device({i})" in msg and f"cuflow.Device({j})" in msg
    assert isinstance(e.value, ValueError)


# ----------------------------------------------------------------------------- to_device
def test_to_device_copies_between_every_pair(dcf, rng):
    n = n_devices(dcf)
    host = rng.standard_normal((257, 31)).astype(np.float32)
    for i in range(n):
        with dcf.Device(i):
            a = dcf.asarray(host)[:, 3:17]  # not contiguous: the copy makes it so
        for j in range(n):
            b = a.to_device(j)
            assert device_of(dcf, b) == j
            assert (b is a) == (i == j)
            with dcf.Device(j):
                np.testing.assert_array_equal(dcf.asnumpy(b + 0), host[:, 3:17])


def test_to_device_takes_device_objects(dcf):
    j = n_devices(dcf) - 1
    a = dcf.ones(4)
    assert device_of(dcf, a.to_device(dcf.Device(j))) == j
    with pytest.raises(dcf.ArgumentError):
        a.to_device(n_devices(dcf))


def test_to_device_then_op_on_the_destination(dcf, rng):
    i, j = two(dcf)
    host = rng.standard_normal(1000).astype(np.float32)
    with dcf.Device(j):
        b = dcf.asarray(host)
    with dcf.Device(i):
        a = dcf.asarray(host)
        np.testing.assert_allclose(dcf.asnumpy(a + b.to_device(i)), 2 * host, rtol=1e-6)


# ------------------------------------------------------------------ streams and events
def test_streams_and_events_belong_to_their_device(dcf):
    for i in range(n_devices(dcf)):
        with dcf.Device(i):
            s = dcf.Stream()
            assert s.device == i
            with s:
                x = dcf.ones(8) * 3
            e = s.record()
            assert e.device == i
            e.synchronize()
            assert float(dcf.asnumpy(x).sum()) == 24


def test_a_stream_of_another_device_is_refused(dcf):
    i, j = two(dcf)
    with dcf.Device(j):
        s = dcf.Stream()
        x = dcf.ones(4)
    with dcf.Device(i):
        with pytest.raises(dcf.DeviceError, match=f"belongs to device {j}"):
            with s:
                pass
        with pytest.raises(dcf.DeviceError, match=f"belongs to device {j}"):
            dcf.add(dcf.ones(4), 1, stream=s)
        e = dcf.Event()
        with pytest.raises(dcf.DeviceError, match=f"event belongs to device {i}"):
            e.record(s)
    with dcf.Device(j):
        np.testing.assert_array_equal(dcf.asnumpy(dcf.add(x, 1, stream=s)), 2)


def test_one_device_object_entered_by_two_threads(dcf):
    """Each thread's block restores that thread's previous device."""
    i, j = two(dcf)
    shared, res = dcf.Device(j), {}
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def first():
        with shared:
            a_in.set()
            b_in.wait(10)
        res["first"] = dcf.Device().id
        a_out.set()

    def second():
        with dcf.Device(i):
            a_in.wait(10)
            with shared:
                b_in.set()
                a_out.wait(10)
            res["second"] = dcf.Device().id

    before = dcf.Device().id
    ts = [threading.Thread(target=f) for f in (first, second)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert res == {"first": before, "second": i}


def test_a_stream_of_another_device_records_and_is_waited_for(dcf):
    """A stream's own event is made on the stream's device, whichever device is current,
    so another device's stream can wait for its work."""
    i, j = two(dcf)
    with dcf.Device(j):
        s = dcf.Stream()
        x = dcf.ones(1 << 16) * 3  # queued on device j's current stream
        s.wait_stream(dcf.current_stream())
    with dcf.Device(i):
        e = s.record()
        assert e.device == j and dcf.Device().id == i
        t = dcf.Stream()
        t.wait_stream(s)
        t.wait(e)
        y = dcf.add(x.to_device(i, stream=t), 1, stream=t)
        t.synchronize()
        np.testing.assert_array_equal(dcf.asnumpy(y), 4)


# --------------------------------------------------------------- kernels on each device
def test_fused_kernels_run_on_every_device(dcf, rng):
    f = frame(rng, 40, 56)
    with dcf.Device(0):
        want = dcf.asnumpy(dcf.image.resize_normalize(dcf.asarray(f), (16, 24), mean=MEAN,
                                                      std=STD))
    for i in range(n_devices(dcf)):
        with dcf.Device(i):
            src = dcf.asarray(f)
            got = dcf.image.resize_normalize(src, (16, 24), mean=MEAN, std=STD)
            assert device_of(dcf, got) == i
            np.testing.assert_allclose(dcf.asnumpy(got), want, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_work_on_one_device_while_another_is_busy(gpu_cf, rng):
    """Kernels, a Bufferizer and a Pipeline on device j do not wait for device i's queue."""
    cf = gpu_cf
    i, j = two(cf)
    frames = [frame(rng, 64, 64) for _ in range(6)]

    def on_j():
        with cf.Device(j):
            one = cf.asnumpy(cf.image.resize_normalize(cf.asarray(frames[0]), (32, 32),
                                                       mean=MEAN, std=STD))
            pipe = cf.Pipeline((32, 32), 4, mean=MEAN, std=STD)
        batches = np.concatenate([cf.asnumpy(b) for b in pipe.batches(frames)])
        return one, batches

    want = on_j()  # compiles device j's kernels first
    with cf.Device(i):
        busy = cf.Stream()
        big = cf.asarray(rng.standard_normal((4096, 4096)).astype(np.float32))
        with busy:
            for _ in range(200):
                big = big @ big * 1e-3  # about half a second of device i's time
    got = on_j()
    assert not busy.query(), "device j's work waited for device i"
    busy.synchronize()
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[1][0], got[0], rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------- Bufferizer and Pipeline
def test_bufferizer_stays_on_its_device(dcf, rng):
    j = n_devices(dcf) - 1
    host = rng.standard_normal((4, 3, 5)).astype(np.float32)
    with dcf.Device(j):
        buf = dcf.Bufferizer((3, 5), 4, dcf.float32, n_buffers=2)
        elems = [dcf.asarray(h) for h in host]
    for e in elems[:3]:
        buf.append(e)  # from the caller's device 0: the work runs on device j
    buf.append_multiple(elems[3][None])
    batch = buf.take()
    assert device_of(dcf, batch) == j and dcf.Device().id == 0
    np.testing.assert_array_equal(dcf.asnumpy(batch), host)
    buf.release()


def test_bufferizer_refuses_an_element_of_another_device(dcf):
    i, j = two(dcf)
    with dcf.Device(j):
        buf = dcf.Bufferizer((3,), 2, dcf.float32)
    with dcf.Device(i):
        e = dcf.ones(3, dtype=dcf.float32)
    for call, arg in (("append_one", e), ("append_multiple", e[None]), ("append", [e])):
        with pytest.raises(dcf.DeviceError) as ei:
            getattr(buf, call)(arg)
        msg = str(ei.value)
        # the Bufferizer works on its own device whatever is current: only a copy helps
        assert f"Bufferizer.{'append_multiple' if call == 'append' else call}: an input is on " \
               f"device {i} but elements must be on the Bufferizer's device {j}" in msg
        assert f"x.to_device({j})" in msg and "cuflow.Device" not in msg
    assert len(buf) == 0
    buf.append_one(e.to_device(j))
    assert len(buf) == 1


def test_pipeline_runs_on_its_device(dcf, rng):
    frames = [frame(rng) for _ in range(7)]
    want = np.stack([dcf.asnumpy(dcf.image.resize_normalize(dcf.asarray(f), (16, 16),
                                                            mean=MEAN, std=STD))
                     for f in frames])
    for i in range(n_devices(dcf)):
        with dcf.Device(i):
            pipe = dcf.Pipeline((16, 16), 3, mean=MEAN, std=STD)
        got = []
        for b in pipe.batches(frames):  # asked for from device 0
            assert dcf.Device().id == 0  # the caller's device between batches
            assert device_of(dcf, b) == i
            got.append(dcf.asnumpy(b))
        np.testing.assert_allclose(np.concatenate(got), want, rtol=1e-5, atol=1e-5)
        assert pipe.device == i and pipe.frames == 7
