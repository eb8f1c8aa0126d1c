"""Bufferizer calls are all-or-nothing: a raising hook, copy or allocation leaves it as before.

Each test makes one hook (or step) fail once, checks the error and the state, retries, and
checks that every element is in the buffer exactly once.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import cuflow
from cuflow.pipeline import BufferizerHookError, BufferizerStateError
from cuflow.testing import assert_equal_host

SHAPE = (4, 5)


def elements(cf, rng, k=None):
    shape = SHAPE if k is None else (k, *SHAPE)
    return cf.asarray(rng.uniform(-100, 100, size=shape).astype(np.float32))


class FailOnce:
    """A hook that raises ``exc`` the first time (and records every call)."""

    def __init__(self, exc=None):
        self.exc = RuntimeError("hook failed") if exc is None else exc
        self.calls = []

    def __call__(self, buf):
        self.calls.append(len(buf))
        if len(self.calls) == 1:
            raise self.exc


def host(cf, b):
    b.stream.synchronize()
    return cf.asnumpy(b.darray)[:len(b)]


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
@pytest.mark.parametrize("hook, path", [("append_one_hook", "one"),
                                        ("append_multiple_hook", "multiple"),
                                        ("buffer_full_hook", "one"),
                                        ("buffer_full_hook", "multiple"),
                                        ("append_one_hook", "commit")])
def test_a_raising_append_hook_leaves_nothing_counted(cf, rng, hook, path, exc):
    h = FailOnce(exc)
    b = cf.Bufferizer(SHAPE, 3, cf.float32, **{hook: h})
    first = elements(cf, rng, 2)
    if path == "one" or path == "commit":
        b.append_multiple(first)
        x = elements(cf, rng)
    else:
        b.append_one(first[0])
        x = elements(cf, rng, 2)
        first = first[:1]
    n = len(b)

    def call():
        if path == "one":
            b.append_one(x)
        elif path == "multiple":
            b.append_multiple(x)
        else:
            b.next_slot()[...] = x
            b.commit()

    expected = BufferizerHookError if isinstance(exc, Exception) else KeyboardInterrupt
    with pytest.raises(expected) as e:
        call()
    if isinstance(exc, Exception):
        assert e.value.__cause__ is exc and isinstance(e.value, cuflow.CuflowError)
        assert hook in str(e.value) and "not appended" in str(e.value)
    assert len(b) == n and not b.full  # nothing counted
    call()  # the retry appends it once
    assert b.full and len(b) == 3
    want = np.concatenate([cf.asnumpy(first), cf.asnumpy(x).reshape(-1, *SHAPE)])
    np.testing.assert_array_equal(host(cf, b), want)


@pytest.mark.parametrize("exc", [ValueError("flush hook"), KeyboardInterrupt()])
def test_a_raising_flush_hook_fills_nothing_and_keeps_the_elements(cf, rng, exc):
    h = FailOnce(exc)
    b = cf.Bufferizer(SHAPE, 3, cf.float32, flush_hook=h)
    x = elements(cf, rng, 2)
    b.append(x)
    with pytest.raises(BufferizerHookError if isinstance(exc, Exception) else KeyboardInterrupt):
        b.flush(9)
    assert h.calls == [0]  # the hook saw the Bufferizer empty
    assert len(b) == 2
    np.testing.assert_array_equal(host(cf, b), cf.asnumpy(x))  # not filled
    b.flush(9)
    assert len(b) == 0 and h.calls == [0, 0]
    b.stream.synchronize()
    assert_equal_host(b.darray, np.full(b.shape, 9, np.float32))


@pytest.mark.parametrize("exc", [OSError("allocate hook"), KeyboardInterrupt()])
def test_a_raising_allocate_hook_puts_the_old_buffers_back(cf, rng, exc):
    h = FailOnce(exc)
    b = cf.Bufferizer(SHAPE, 3, cf.float32, n_buffers=2, allocate_hook=h)
    x = elements(cf, rng, 3)
    b.append(x)
    taken = b.take()
    y = elements(cf, rng)
    b.append(y)
    with pytest.raises(BufferizerHookError if isinstance(exc, Exception) else KeyboardInterrupt):
        b.allocate()
    assert len(b) == 1
    np.testing.assert_array_equal(host(cf, b), cf.asnumpy(y)[None])  # the old, unzeroed buffer
    # the taken buffer is still taken: its release is still owed
    b.release()
    b.stream.synchronize()
    np.testing.assert_array_equal(cf.asnumpy(taken), cf.asnumpy(x))
    b.allocate()
    assert len(b) == 0 and h.calls == [0, 0]
    with pytest.raises(BufferizerStateError):
        b.release()  # the new buffers have none taken


@pytest.mark.parametrize("exc", [RuntimeError("model failed"), KeyboardInterrupt()])
@pytest.mark.parametrize("empties", ["flush", "take", "reset"])
@pytest.mark.parametrize("hook, path", [("buffer_full_hook", "one"),
                                        ("buffer_full_hook", "multiple"),
                                        ("append_one_hook", "one"),
                                        ("append_multiple_hook", "multiple")])
def test_a_hook_that_empties_the_buffer_and_raises_is_not_undone(cf, rng, hook, path,
                                                                 empties, exc):
    """Undoing the append on top of the hook's flush or take would count -k elements: the
    Bufferizer is left as the hook left it, and appends go on from the first slot."""
    taken = []

    def consume(buf):
        if empties == "take":
            taken.append(buf.take())
        else:
            getattr(buf, empties)()
        raise exc

    b = cf.Bufferizer(SHAPE, 3, cf.float32, n_buffers=2, **{hook: consume})
    if path == "one":
        first, x = elements(cf, rng, 2), elements(cf, rng)
        b.append_multiple(first)
        call = b.append_one
    else:
        first, x = elements(cf, rng, 1), elements(cf, rng, 2)
        b.append_one(first[0])
        call = b.append_multiple
    expected = BufferizerHookError if isinstance(exc, Exception) else KeyboardInterrupt
    with pytest.raises(expected) as e:
        call(x)
    if isinstance(exc, Exception):
        assert "as the hook left it" in str(e.value) and e.value.__cause__ is exc
    assert len(b) == 0 and not b.full
    if taken:  # the hook's batch holds the call's elements too
        b.stream.synchronize()
        want = np.concatenate([cf.asnumpy(first), cf.asnumpy(x).reshape(-1, *SHAPE)])
        np.testing.assert_array_equal(cf.asnumpy(taken[0]), want)
        b.release()
    getattr(b, hook)(None)
    y = elements(cf, rng)
    b.append_one(y)
    assert len(b) == 1
    np.testing.assert_array_equal(host(cf, b), cf.asnumpy(y)[None])


@pytest.mark.parametrize("hook", ["flush_hook", "allocate_hook"])
def test_a_flush_or_allocate_hook_that_appends_and_raises_is_not_undone(cf, rng, hook):
    """Putting the old length back would count, over the hook's element, ones that were
    emptied (flush) or are in other buffers (allocate)."""
    y = elements(cf, rng)

    def refill(buf):
        buf.append_one(y)
        raise RuntimeError("hook failed")

    b = cf.Bufferizer(SHAPE, 3, cf.float32, **{hook: refill})
    b.append(elements(cf, rng, 2))
    with pytest.raises(BufferizerHookError, match="as the hook left it"):
        b.flush() if hook == "flush_hook" else b.allocate()
    assert len(b) == 1
    np.testing.assert_array_equal(host(cf, b), cf.asnumpy(y)[None])


def test_what_a_flush_hook_does_is_kept_by_the_fill(cf, rng):
    """The fill after the hook leaves what the hook did: an element it appended is kept, and
    a buffer it took for a consumer is never written."""
    y = elements(cf, rng)
    b = cf.Bufferizer(SHAPE, 3, cf.float32, flush_hook=lambda buf: buf.append_one(y))
    b.append(elements(cf, rng, 2))
    b.flush(-1)
    assert len(b) == 1
    np.testing.assert_array_equal(host(cf, b), cf.asnumpy(y)[None])
    np.testing.assert_array_equal(cf.asnumpy(b.darray)[1:], -1)
    # a batch of one: the hook's append fills the buffer, and buffer_full_hook hands it out
    x = elements(cf, rng, 1)
    t = cf.Bufferizer(SHAPE, 1, cf.float32, n_buffers=2)
    t.append(x)
    held = t.take()  # the consumer holds buffer 0
    taken = []
    t.flush_hook(lambda buf: buf.append_one(y))
    t.buffer_full_hook(lambda buf: taken.append(buf.take()))
    t.flush(-1)
    np.testing.assert_array_equal(cf.asnumpy(held), cf.asnumpy(x))
    assert len(taken) == 1
    np.testing.assert_array_equal(cf.asnumpy(taken[0]), cf.asnumpy(y)[None])


def test_a_hook_whose_own_call_was_undone_is_undone_too(cf, rng):
    """A buffer_full_hook whose flush failed (and was undone) changed nothing: its append is
    undone as for any raising hook."""
    def refuse(buf):
        raise ValueError("flush refused")

    b = cf.Bufferizer(SHAPE, 2, cf.float32, flush_hook=refuse,
                      buffer_full_hook=lambda buf: buf.flush())
    x = elements(cf, rng, 2)
    b.append_one(x[0])
    with pytest.raises(BufferizerHookError, match="not appended"):
        b.append_one(x[1])
    assert len(b) == 1
    np.testing.assert_array_equal(host(cf, b), cf.asnumpy(x[:1]))


def test_a_failed_kernel_between_next_slot_and_commit_counts_nothing(cf, rng):
    b = cf.Bufferizer((3, 8, 8), 2, cf.float32)
    frame = cf.asarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
    slot = b.next_slot()
    with pytest.raises(cuflow.image.ImageFormatError):
        cuflow.image.normalize(frame, dst=slot, scale=float("nan"))
    assert len(b) == 0
    cuflow.image.normalize(frame, dst=b.next_slot(), stream=b.stream)
    b.commit()
    assert len(b) == 1


def test_an_allocation_no_memory_holds_is_a_clear_out_of_memory_error(cf):
    with pytest.raises(cuflow.OutOfMemoryError) as e:
        cf.Bufferizer((2**31, 2**31), 2**20, cf.float32)
    assert "bytes" in str(e.value) and isinstance(e.value, MemoryError)


def test_state_errors_are_buffer_errors_and_cuflow_errors(cf, rng):
    b = cf.Bufferizer(SHAPE, 1, cf.float32)
    with pytest.raises(BufferizerStateError) as e:
        b.take()
    assert isinstance(e.value, BufferError) and isinstance(e.value, cuflow.CuflowError)
    b.append_one(elements(cf, rng))
    with pytest.raises(BufferError, match="do not fit"):
        b.append_one(elements(cf, rng))


class BufferizerWithFaults(RuleBasedStateMachine):
    """Appends, takes and releases with hooks that fail at random: the elements counted are
    always the ones appended by calls that returned, each once and in order."""

    def __init__(self):
        super().__init__()
        self.cf = cuflow
        self.rng = np.random.default_rng(7)
        self.fail = set()
        self.b = cuflow.Bufferizer(SHAPE, 4, cuflow.float32, n_buffers=2,
                                   append_one_hook=self._hook("one"),
                                   append_multiple_hook=self._hook("multiple"),
                                   buffer_full_hook=self._hook("full"))
        self.model: list[np.ndarray] = []  # the active buffer's elements
        self.taken = 0

    def _hook(self, name):
        def hook(buf):
            if name in self.fail:
                raise RuntimeError(name)
        return hook

    @rule(k=st.integers(1, 3), fail=st.sets(st.sampled_from(["one", "multiple", "full"])))
    def append(self, k, fail):
        self.fail = fail
        x = self.rng.uniform(-9, 9, (k, *SHAPE)).astype(np.float32)
        try:
            if k == 1:
                self.b.append_one(self.cf.asarray(x[0]))
            else:
                self.b.append_multiple(self.cf.asarray(x))
        except (BufferizerHookError, BufferizerStateError):
            return
        finally:
            self.fail = set()
        self.model.extend(x)

    @precondition(lambda self: len(self.model) > 0)
    @rule()
    def take(self):
        try:
            got = self.b.take()
        except BufferizerStateError:
            return
        self.b.stream.synchronize()
        np.testing.assert_array_equal(self.cf.asnumpy(got), np.stack(self.model))
        self.model = []
        self.taken += 1

    @rule()
    def release(self):
        try:
            self.b.release()
            self.taken -= 1
        except BufferizerStateError:
            assert self.taken == 0

    @invariant()
    def counted_once(self):
        assert len(self.b) == len(self.model)


TestBufferizerWithFaults = BufferizerWithFaults.TestCase
TestBufferizerWithFaults.settings = settings(max_examples=40, stateful_step_count=20,
                                             deadline=None,
                                             suppress_health_check=[HealthCheck.too_slow])
