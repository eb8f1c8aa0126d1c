"""Bufferizer: Dolphin's documented API, its defects fixed, stream ordering, double buffering."""

from __future__ import annotations

import numpy as np
import pytest

from cuflow.pipeline import BufferizerStateError
from cuflow.testing import assert_equal_host

SHAPE = (3, 4, 5)


def frames(cf, rng, k=None, dtype=np.float32):
    shape = SHAPE if k is None else (k, *SHAPE)
    return cf.asarray(rng.uniform(-1e3, 1e3, size=shape).astype(dtype))


class Recorder:
    """Counts each hook's calls and remembers len() at the call."""

    def __init__(self):
        self.calls = []

    def hook(self, name):
        return lambda buf: self.calls.append((name, len(buf)))


def test_properties(cf):
    b = cf.Bufferizer(SHAPE, 4, cf.float16)
    assert b.shape == (4, *SHAPE) and b.element_shape == SHAPE
    assert b.dtype == np.float16
    assert b.element_nbytes == 3 * 4 * 5 * 2  # bytes, not Dolphin's element count
    assert b.nbytes == 4 * b.element_nbytes
    assert len(b) == 0 and not b.full
    assert isinstance(b.darray, cf.darray) and b.darray.shape == b.shape
    b.stream.synchronize()  # the zeroing is queued on the buffer's stream
    assert_equal_host(b.darray, np.zeros(b.shape, np.float16))  # allocated zeroed
    assert b.allocation is not None


def test_darray_is_a_view(cf, rng):
    b = cf.Bufferizer(SHAPE, 2, cf.float32)
    v = b.darray
    x = frames(cf, rng)
    b.append(x)
    b.stream.synchronize()
    assert_equal_host(v[0], x)
    v[1] = 7
    assert_equal_host(b.darray[1], np.full(SHAPE, 7, np.float32))


def test_append_dispatch_one_batch_list(cf, rng):
    b = cf.Bufferizer(SHAPE, 6, cf.float32)
    one, batch, lst = frames(cf, rng), frames(cf, rng, 2), [frames(cf, rng) for _ in range(3)]
    b.append(one)
    b.append(batch)
    b.append(lst)
    assert len(b) == 6 and b.full
    b.stream.synchronize()
    want = np.concatenate([cf.asnumpy(one)[None], cf.asnumpy(batch),
                           np.stack([cf.asnumpy(x) for x in lst])])
    assert_equal_host(b.darray, want)


def test_non_contiguous_inputs(cf, rng):
    b = cf.Bufferizer(SHAPE, 4, cf.float32)
    big = frames(cf, rng, 4)
    t = cf.asarray(rng.uniform(-9, 9, size=(5, 4, 3)).astype(np.float32))
    b.append_one(t.transpose(2, 1, 0))  # F-ordered element
    b.append_multiple(big[::2])        # strided batch
    b.append_one(big[3, :, :, :])
    b.stream.synchronize()
    want = np.stack([cf.asnumpy(t).transpose(2, 1, 0), *cf.asnumpy(big)[::2],
                     cf.asnumpy(big)[3]])
    assert_equal_host(b.darray, want)


@pytest.mark.parametrize("path", ["one", "batch", "list"])
def test_overflow_is_all_or_nothing(cf, rng, path):
    b = cf.Bufferizer(SHAPE, 3, cf.float32)
    first = frames(cf, rng, 2)
    b.append(first)
    b.stream.synchronize()
    before = cf.asnumpy(b.darray).copy()
    extra = {"one": None, "batch": frames(cf, rng, 2),
             "list": [frames(cf, rng) for _ in range(2)]}[path]
    if path == "one":
        b.append_one(frames(cf, rng))
        before = cf.asnumpy(b.darray).copy()
        extra = frames(cf, rng)
    n = len(b)
    with pytest.raises(BufferError, match="nothing was appended"):
        b.append(extra)
    b.stream.synchronize()
    assert len(b) == n
    assert_equal_host(b.darray, before)


@pytest.mark.parametrize("path", ["append_one", "batch", "list", "append"])
def test_dtype_and_shape_checked_on_every_path(cf, rng, path):
    b = cf.Bufferizer(SHAPE, 8, cf.float32)
    bad_dtype = {"append_one": frames(cf, rng, dtype=np.float64),
                 "batch": frames(cf, rng, 2, dtype=np.float64),
                 "list": [frames(cf, rng), frames(cf, rng, dtype=np.float16)],
                 "append": frames(cf, rng, 2, dtype=np.int32)}[path]
    bad_shape = {"append_one": cf.asarray(np.ones((3, 4, 6), np.float32)),
                 "batch": cf.asarray(np.ones((2, 3, 5, 4), np.float32)),
                 "list": [frames(cf, rng), cf.asarray(np.ones((3, 4), np.float32))],
                 "append": cf.asarray(np.ones((1, 1, 3, 4, 5), np.float32))}[path]
    fn = {"append_one": b.append_one, "batch": b.append_multiple, "list": b.append_multiple,
          "append": b.append}[path]
    with pytest.raises(cf.BufferizerError, match="dtype"):
        fn(bad_dtype)
    with pytest.raises(cf.BufferizerError, match="shape"):
        fn(bad_shape)
    assert len(b) == 0
    with pytest.raises(cf.BufferizerError, match="arrays of the active"):
        b.append_one(np.ones(SHAPE, np.float32).tolist())


def test_hooks_fire_exactly_when_documented(cf, rng):
    r = Recorder()
    b = cf.Bufferizer(SHAPE, 3, cf.float32, flush_hook=r.hook("flush"),
                      allocate_hook=r.hook("allocate"), append_one_hook=r.hook("one"),
                      append_multiple_hook=r.hook("multiple"), buffer_full_hook=r.hook("full"))
    assert r.calls == []  # not for the constructor's allocation
    b.append_one(frames(cf, rng))
    assert r.calls == [("one", 1)]
    b.append_multiple(frames(cf, rng, 2))
    assert r.calls == [("one", 1), ("multiple", 3), ("full", 3)]
    r.calls.clear()
    with pytest.raises(BufferError):
        b.append_one(frames(cf, rng))
    assert r.calls == []  # a failed append fires nothing
    b.flush(5)
    assert r.calls == [("flush", 0)]
    b.stream.synchronize()
    assert_equal_host(b.darray, np.full(b.shape, 5, np.float32))
    r.calls.clear()
    b.allocate()
    assert r.calls == [("allocate", 0)]  # zeroing does not fire flush_hook
    # the zeroing is queued on the buffer's stream, and the new buffers may reuse the old
    # ones' memory (still holding 5): wait for it before reading on another stream
    b.stream.synchronize()
    assert_equal_host(b.darray, np.zeros(b.shape, np.float32))
    r.calls.clear()
    b.reset()
    assert r.calls == []
    b.next_slot()[...] = 1
    b.commit()
    b.next_slot()
    b.commit(2)
    assert r.calls == [("one", 1), ("multiple", 3), ("full", 3)]


@pytest.mark.parametrize("setter", ["flush_hook", "allocate_hook", "append_one_hook",
                                    "append_multiple_hook", "buffer_full_hook"])
def test_hook_setters(cf, rng, setter):
    r = Recorder()
    b = cf.Bufferizer(SHAPE, 2, cf.float32)
    getattr(b, setter)(r.hook(setter))
    b.append_one(frames(cf, rng))
    b.append_multiple([frames(cf, rng)])
    b.flush()
    b.allocate()
    want = {"flush_hook": [("flush_hook", 0)], "allocate_hook": [("allocate_hook", 0)],
            "append_one_hook": [("append_one_hook", 1)],
            "append_multiple_hook": [("append_multiple_hook", 2)],
            "buffer_full_hook": [("buffer_full_hook", 2)]}[setter]
    assert r.calls == want
    with pytest.raises(TypeError, match="callable"):
        getattr(b, setter)(42)


@pytest.mark.parametrize("value, dtype, err", [
    (300, np.uint8, ValueError), (-1, np.uint8, ValueError), (1.5, np.uint8, ValueError),
    (float("nan"), np.int32, ValueError), (1e300, np.float32, ValueError),
    (None, np.float32, TypeError), ("abc", np.uint8, TypeError), ([1, 2], np.float32, TypeError),
    (np.ones(2), np.float32, TypeError), (1j, np.float32, TypeError),
    (2.5, np.bool_, ValueError), (1j, np.bool_, ValueError), (2, np.bool_, ValueError),
    (1.0, np.bool_, ValueError)])
def test_flush_refuses_a_fill_value_the_dtype_cannot_hold(cf, rng, value, dtype, err):
    b = cf.Bufferizer(SHAPE, 2, dtype)
    x = cf.asarray(rng.integers(0, 100, size=SHAPE).astype(dtype))
    b.append(x)
    with pytest.raises(err, match="fill_value") as e:
        b.flush(value)
    assert isinstance(e.value, cf.CuflowError)
    assert len(b) == 1  # refused before anything changed
    b.stream.synchronize()
    assert_equal_host(b.darray[0], x)


@pytest.mark.parametrize("value, dtype", [(255, np.uint8), (2.0, np.uint8), (np.int64(7), np.uint8),
                                          (float("inf"), np.float32), (True, np.float32),
                                          (3 + 0j, np.float16), (True, np.bool_),
                                          (1, np.bool_), (np.int8(1), np.bool_),
                                          (np.False_, np.bool_)])
def test_flush_fills_with_a_value_the_dtype_holds(cf, value, dtype):
    b = cf.Bufferizer(SHAPE, 2, dtype)
    b.flush(value)
    b.stream.synchronize()
    assert_equal_host(b.darray, np.full(b.shape, np.real(value), dtype))


@pytest.mark.parametrize("value", [2.5, 1j, -1, 2, np.float32(1), True, 0, np.True_])
def test_flush_and_full_agree_on_bool_fill_values(cf, value):
    """A bool buffer takes True, False, 0 or 1: a cast would make 2.5 or 1j True."""
    ok = isinstance(value, bool | np.bool_) or value in (0, 1) and isinstance(value, int)
    b = cf.Bufferizer(SHAPE, 2, np.bool_)
    b.flush(not value if ok else True)  # (the buffer holds the other value first)
    b.stream.synchronize()
    if ok:
        b.flush(value)
        b.stream.synchronize()
        assert_equal_host(b.darray, np.full(b.shape, bool(value)))
        assert_equal_host(cf.full(3, value, dtype=bool), np.full(3, bool(value)))
        return
    for fill in (b.flush, lambda v: cf.full(3, v, dtype=bool)):
        with pytest.raises(cf.ArgumentError, match=r"bool must be True, False, 0 or 1"):
            fill(value)
    b.stream.synchronize()
    assert_equal_host(b.darray, np.full(b.shape, True))  # a refused fill wrote nothing


def test_dtype_is_required(cf):
    with pytest.raises(cf.ArgumentTypeError, match=r"Bufferizer: dtype must be a NumPy dtype, "
                       r"got None"):
        cf.Bufferizer(SHAPE, 2, None)


@pytest.mark.parametrize("call", ["append_one", "append", "append_multiple", "next_slot",
                                  "commit", "take", "release"])
@pytest.mark.parametrize("bad", [5, "zz"])
def test_stream_is_checked_first_on_every_path(cf, rng, call, bad):
    """The NumPy backend queues nothing, and must refuse what the GPU refuses."""
    b = cf.Bufferizer(SHAPE, 2, cf.float32)
    x = frames(cf, rng)
    b.append_one(x)
    args = {"append_one": (x,), "append": (x,), "append_multiple": ([x],)}.get(call, ())
    with pytest.raises(cf.ArgumentTypeError, match=rf"Bufferizer\.{call}: stream= must be"):
        getattr(b, call)(*args, stream=bad)
    assert len(b) == 1  # nothing appended, taken or released
    b.append_one(x)  # the buffer was not taken
    assert b.full


class CountingStream:
    """A stream of PyTorch's form (``cuda_stream``, the current stream's handle) that counts
    how often it is read."""

    def __init__(self, ptr):
        self.ptr, self.reads = ptr, 0

    @property
    def cuda_stream(self):
        self.reads += 1
        return self.ptr


@pytest.mark.parametrize("what", ["one", "batch", "list"])
def test_append_reads_its_stream_as_the_call_it_dispatches_to(cf, rng, what):
    """``append(x, stream=s)`` resolves ``s`` once, as ``append_one`` / ``append_multiple``
    do, and writes the same elements."""
    x = {"one": frames(cf, rng), "batch": frames(cf, rng, 3),
         "list": [frames(cf, rng) for _ in range(3)]}[what]
    k = 1 if what == "one" else 3
    b = cf.Bufferizer(SHAPE, 2 * k, cf.float32)
    ptr = cf.current_stream().ptr
    direct, dispatched = CountingStream(ptr), CountingStream(ptr)
    (b.append_one if what == "one" else b.append_multiple)(x, stream=direct)
    b.append(x, stream=dispatched)
    assert dispatched.reads == direct.reads >= 1
    assert b.full
    b.stream.synchronize()
    want = np.stack([cf.asnumpy(e) for e in x]) if what == "list" else \
        cf.asnumpy(x).reshape(k, *SHAPE)
    assert_equal_host(b.darray, np.concatenate([want, want]))


def test_the_full_hook_fires_once_per_fill_with_reentrant_appends(cf, rng):
    """An append hook that appends again: only the append that fills the buffer fires
    buffer_full_hook, once."""
    e = cf.asarray(rng.uniform(1, 2, 2).astype(np.float32))
    buf, fired = cf.Bufferizer((2,), 3, np.float32), []
    buf.append_one_hook(lambda b: b.append_one(e) if len(b) < 3 else None)
    buf.buffer_full_hook(lambda b: fired.append(len(b)))
    buf.append_one(e)
    assert fired == [3]


def test_reset_does_not_write(cf, rng):
    b = cf.Bufferizer(SHAPE, 2, cf.float32)
    x = frames(cf, rng, 2)
    b.append(x)
    b.reset()
    assert len(b) == 0 and not b.full
    b.stream.synchronize()
    assert_equal_host(b.darray, x)


def test_next_slot_commit_writes_in_place(cf, rng):
    b = cf.Bufferizer((3, 4, 6), 2, cf.float32)
    src = cf.asarray(rng.integers(0, 256, size=(2, 4, 6, 3), dtype=np.uint8))
    for i in range(2):
        slot = b.next_slot()
        # on the current stream: next_slot's and commit's (the upload's too, so the kernel
        # reads the frame after it arrived)
        assert cf.image.normalize(src[i], src_format="RGB", dst=slot) is slot
        b.commit()
    assert b.full
    with pytest.raises(BufferError):
        b.next_slot()
    with pytest.raises(BufferError):
        b.commit()
    b.stream.synchronize()
    want = cf.asnumpy(src).transpose(0, 3, 1, 2).astype(np.float32) / 255
    np.testing.assert_allclose(cf.asnumpy(b.darray), want, rtol=1e-6, atol=1e-6)


def test_double_buffering_take_release(cf, rng):
    b = cf.Bufferizer(SHAPE, 2, cf.float32, n_buffers=2)
    consumer = cf.Stream()
    a, c = frames(cf, rng, 2), frames(cf, rng, 2)
    b.append(a)
    first = b.take(stream=consumer)
    assert first.shape == (2, *SHAPE) and len(b) == 0
    b.append(c)  # goes into the other buffer
    second = b.take(stream=consumer)
    consumer.synchronize()
    assert_equal_host(first, a)
    assert_equal_host(second, c)
    with pytest.raises(BufferError, match="not released"):
        b.append_one(frames(cf, rng))
    b.release(stream=consumer)
    b.append_one(frames(cf, rng))  # the first buffer again
    assert len(b) == 1
    b.release(stream=consumer)
    with pytest.raises(BufferError, match="no buffer"):
        b.release(stream=consumer)
    with pytest.raises(BufferError, match="empty"):
        cf.Bufferizer(SHAPE, 2, cf.float32).take()


def test_partial_take(cf, rng):
    b = cf.Bufferizer(SHAPE, 4, cf.float32)
    x = frames(cf, rng)
    b.append(x)
    part = b.take()
    assert part.shape == (1, *SHAPE)
    b.stream.synchronize()
    assert_equal_host(part[0], x)


@pytest.mark.parametrize("bad", [dict(buffer_size=0), dict(buffer_size=2.5),
                                 dict(n_buffers=0), dict(shape=(-1, 2)), dict(shape="ab")])
def test_constructor_validation(cf, bad):
    kw = dict(shape=SHAPE, buffer_size=2, dtype=cf.float32) | bad
    with pytest.raises((ValueError, TypeError)):
        cf.Bufferizer(**kw)


@pytest.mark.gpu
def test_ordering_against_producer_and_consumer_streams(gpu_cf, rng):
    """Producer on s1 writes a frame after a long kernel; the buffer's copy must see it,
    and the consumer on s2 must see the copy, with no host synchronization in between."""
    cf = gpu_cf
    s1, s2 = cf.streams(2)
    b = cf.Bufferizer((1024, 1024), 2, cf.float32, n_buffers=2)
    big = cf.asarray(rng.uniform(-1, 1, size=(4096, 4096)).astype(np.float32))
    for _ in range(3):
        with s1:
            x = cf.empty((1024, 1024), dtype=cf.float32)
            for _ in range(20):   # keep s1 busy so a missing wait would read stale data
                cf.matmul(big, big)
            cf.multiply(big[:1024, :1024], 3.0, dst=x)
        b.append(x, stream=s1)
        b.append(x, stream=s1)
        batch = b.take(stream=s2)
        with s2:
            total = batch.sum()
        b.release(stream=s2)
        want = float(cf.asnumpy(big[:1024, :1024]).astype(np.float64).sum() * 6)
        s2.synchronize()
        assert abs(float(total) - want) <= 1e-3 * abs(want) + 1


@pytest.mark.gpu
def test_take_orders_torch_consumers(gpu_cf, rng):
    torch = pytest.importorskip("torch")
    cf = gpu_cf
    b = cf.Bufferizer(SHAPE, 2, cf.float32)
    x = frames(cf, rng, 2)
    b.append(x)
    t = torch.from_dlpack(b.take())
    assert t.data_ptr() == b.darray.data.ptr  # no copy
    torch.cuda.synchronize()
    np.testing.assert_array_equal(t.cpu().numpy(), cf.asnumpy(x))


def test_scalar_elements_are_written_in_place(cf):
    b = cf.Bufferizer((), 4, np.float32)
    b.append_one(cf.asarray(np.float32(1.5)))
    b.append([cf.asarray(np.float32(7)), cf.asarray(np.float32(8))])
    cf.multiply(cf.asarray(np.float32(3)), 2, dst=b.next_slot())
    b.commit()
    np.testing.assert_array_equal(cf.asnumpy(b.take()), [1.5, 7, 8, 6])
    b.release()


def test_a_batch_taken_before_allocate_is_still_released(cf):
    b = cf.Bufferizer((2,), 1, np.float32)
    b.append(cf.ones(2, dtype=np.float32))
    taken = b.take()
    b.allocate()  # the taken batch keeps its memory
    b.release()
    assert float(cf.asnumpy(taken).sum()) == 2.0
    with pytest.raises(BufferizerStateError, match="no buffer has been taken"):
        b.release()


# --------------------------------------------------- stream ordering (GPU)
# A spin kernel keeps one stream busy: work not ordered after it runs first, and reads
# back wrong values.

@pytest.mark.gpu
def test_a_slot_written_on_the_current_stream_is_read_written_by_the_consumer(gpu_cf, rng,
                                                                              spin):
    cf = gpu_cf
    n = 1 << 20
    xs = rng.standard_normal((2, n)).astype(np.float32)
    x = cf.asarray(xs)
    buf = cf.Bufferizer((n,), 2, cf.float32)
    producer, consumer = cf.Stream(non_blocking=True), cf.Stream(non_blocking=True)
    with producer:  # the kernels on the current stream, as in the pipelines guide
        cf.add(x[0], 1.0, dst=buf.next_slot())
        buf.commit()
        slot = buf.next_slot()
        spin(producer)  # the chain that feeds the last slot is slow
        cf.add(x[1], 1.0, dst=slot)
        buf.commit()
        batch = buf.take(stream=consumer)
        running = not producer.cupy.done  # (the consumer's read below waits for it)
    with consumer:
        got = cf.asnumpy(cf.copy(batch), stream=consumer)
    np.testing.assert_array_equal(got, xs + np.float32(1.0))
    assert running, "the producer finished first: the test would prove nothing"


def _vector_buffer(cf, rng, n=1 << 20):
    """(n, the host data, its device copy, a Bufferizer of two such vectors, a producer
    stream)."""
    xs = rng.standard_normal(n).astype(np.float32)
    return n, xs, cf.asarray(xs), cf.Bufferizer((n,), 2, cf.float32), cf.Stream(non_blocking=True)


@pytest.mark.gpu
def test_a_slot_is_written_after_the_buffers_own_fill(gpu_cf, rng, spin):
    """flush() zero-fills on the buffer's stream; a kernel that writes the next slot on
    another stream runs after that fill, not before it (the fill would wipe the slot)."""
    cf = gpu_cf
    n, xs, x, buf, producer = _vector_buffer(cf, rng)
    with producer:
        cf.add(x, 1.0, dst=buf.next_slot())  # (compiled and warm before the spin)
    buf.commit(stream=producer)
    buf.flush()
    cf.get_backend().xp.cuda.Device().synchronize()
    spin(buf.stream)  # the next fill waits behind it on the buffer's stream
    buf.flush()
    with producer:
        cf.add(x, 1.0, dst=buf.next_slot())
        buf.commit()
        running = not buf.stream.cupy.done
        batch = buf.take(stream=producer)
        got = cf.asnumpy(cf.copy(batch), stream=producer)
    np.testing.assert_array_equal(got[0], xs + np.float32(1.0))
    assert running, "the buffer's stream finished first: the test would prove nothing"


@pytest.mark.gpu
def test_an_appended_temporary_is_copied_before_its_memory_is_reused(gpu_cf, rng, spin):
    cf = gpu_cf
    n, xs, x, buf, producer = _vector_buffer(cf, rng)
    with producer:  # the sizes warm in the producer stream's cache
        buf.append(cf.add(x, 1.0))
        cf.full((n,), -7.0, dtype=cf.float32)
    cf.get_backend().xp.cuda.Device().synchronize()
    buf.reset()
    spin(buf.stream)  # the buffer's copies wait behind earlier work
    with producer:
        buf.append(cf.add(x, 1.0))  # freed on return, while its copy is still queued
        junk = [cf.full((n,), -7.0, dtype=cf.float32) for _ in range(4)]
    del junk
    batch = buf.take(stream=producer)
    got = cf.asnumpy(cf.copy(batch, stream=producer), stream=producer)
    np.testing.assert_array_equal(got[0], xs + np.float32(1.0))
