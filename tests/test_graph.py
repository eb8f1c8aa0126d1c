"""cuflow.graph: capture(fn, *examples), replay semantics, memory ownership, refusals."""

from __future__ import annotations

import copy
import pickle
import threading

import numpy as np
import pytest

import cuflow


def chain(cf, n):
    """The documented small-op chain (sigmoid spelled tanh, which NumPy/CuPy name)."""
    def f(x):
        for _ in range(n):
            y = x * 2
            z = cf.tanh(y)
            a = z + 5.0
            x = cf.maximum(a, 0.0)
        return x
    return f


def reference(x, n):
    x = x.astype(np.float32)
    for _ in range(n):
        x = np.maximum(np.tanh(x * 2) + np.float32(5.0), np.float32(0.0))
    return x


def swing(cf, n):
    """A chain whose result depends on its input however long it is (the documented chain
    above is 6.0 for every input after two steps): x -> 0.5 - x, summing tanh(x)."""
    def f(x):
        acc = cf.tanh(x)
        for _ in range(n):
            x = 0.5 - x
            acc = acc + cf.tanh(x)
        return x, acc
    return f


def swing_reference(x, n):
    x = x.astype(np.float32)
    acc = np.tanh(x)
    for _ in range(n):
        x = np.float32(0.5) - x
        acc = acc + np.tanh(x)
    return x, acc


def test_captured_function_matches_eager(cf, rng):
    x0 = cf.asarray(rng.uniform(-3, 3, size=(5,)).astype(np.float32))
    step = cf.graph.capture(chain(cf, 3), x0)
    steps = cf.graph.capture(swing(cf, 7), x0)
    for _ in range(3):
        host = rng.uniform(-3, 3, size=(5,)).astype(np.float32)
        out = step(cf.asarray(host))
        np.testing.assert_allclose(cf.asnumpy(out), reference(host, 3), rtol=1e-6)
        for got, want in zip(steps(cf.asarray(host)), swing_reference(host, 7)):
            np.testing.assert_allclose(cf.asnumpy(got), want, rtol=1e-5, atol=1e-6)


def test_graphed_decorator_captures_on_first_call(cf, rng):
    calls = []

    @cf.graph.graphed
    def f(a, b, k):
        calls.append(1)
        return cf.add(a, b) * k, cf.subtract(a, b)

    a, b = (cf.asarray(rng.uniform(-9, 9, size=(4, 8)).astype(np.float32)) for _ in range(2))
    s, d = f(a, b, 3.0)
    np.testing.assert_allclose(cf.asnumpy(s), (cf.asnumpy(a) + cf.asnumpy(b)) * 3, rtol=1e-6)
    np.testing.assert_array_equal(cf.asnumpy(d), cf.asnumpy(a) - cf.asnumpy(b))
    gpu = cf.get_backend().is_gpu
    # the GPU runs fn for the warm-up and the capture; the NumPy backend, which has no
    # graphs, once (the capture's run is the call's)
    n_python_calls = len(calls)
    assert n_python_calls == (2 if gpu else 1)
    ha, hb = cf.asnumpy(a), cf.asnumpy(b)
    s2, d2 = f(b, a, 3.0)  # on the GPU: the first call's graph, replayed on swapped inputs
    np.testing.assert_allclose(cf.asnumpy(s2), (hb + ha) * 3, rtol=1e-6)
    np.testing.assert_array_equal(cf.asnumpy(d2), hb - ha)
    # replayed on the GPU, fn not run again; the NumPy backend's replay is a run of fn
    assert len(calls) == n_python_calls + (0 if gpu else 1)
    n_python_calls = len(calls)
    with pytest.raises(cuflow.ArgumentError, match="recorded into the graph"):
        f(a, b, 4.0)
    with pytest.raises(cuflow.ArgumentError, match=r"shape \(4, 8\)"):
        f(a[:2], b[:2], 3.0)
    with pytest.raises(cuflow.ArgumentTypeError, match="captured with 3"):
        f(a, b)
    assert len(calls) == n_python_calls  # a refused call runs nothing


def test_capture_validates_arguments(cf):
    with pytest.raises(TypeError, match="callable"):
        cf.graph.capture(42)
    with pytest.raises(cuflow.ArgumentError, match="warmup must be an int >= 0, got -1"):
        cf.graph.capture(lambda: None, warmup=-1)
    for bad in (1.5, True, "2", None):  # a wrong type is the TypeError kind
        with pytest.raises(cuflow.ArgumentTypeError, match="warmup must be an int >= 0"):
            cf.graph.capture(lambda: None, warmup=bad)
        with pytest.raises(cuflow.ArgumentTypeError, match="warmup must be an int >= 0"):
            cf.graph.graphed(warmup=bad)(lambda: None)
    assert isinstance(cf.graph.capture(lambda: None, warmup=np.int64(2)), cf.graph.CapturedFunction)
    with pytest.raises(cuflow.ArgumentError, match="warmup= is for a captured function"):
        cf.graph.capture(warmup=3)
    with pytest.raises(cuflow.ArgumentError, match="example inputs are for a captured function"):
        cf.graph.capture(None, cf.ones(3))
    for bad in (np.array([1, 2]), 1.0, True):  # (not an int, even where it equals 1)
        with pytest.raises(cuflow.ArgumentTypeError,
                           match=rf"warmup= is for a captured function .* got {type(bad).__name__}"):
            cf.graph.capture(warmup=bad)


def test_calls_are_checked_on_every_backend(cf, rng):
    """Code that runs on the NumPy backend, where there is no graph, runs on the GPU: the
    arguments and results are checked the same way."""
    a = cf.asarray(rng.uniform(-9, 9, size=(4, 8)).astype(np.float32))
    f = cf.graph.capture(lambda x, k: x * k, a, 2.0)
    np.testing.assert_array_equal(cf.asnumpy(f(a, 2.0)), cf.asnumpy(a) * 2)
    np.testing.assert_array_equal(cf.asnumpy(f.replay()), cf.asnumpy(a) * 2)
    assert f.inputs[0] is not a and f.outputs is not None  # static inputs, as the graph's
    with pytest.raises(cf.ArgumentTypeError, match="captured with 2"):
        f(a)
    with pytest.raises(cf.ArgumentError, match=r"shape \(4, 8\)"):
        f(a[:2], 2.0)
    with pytest.raises(cf.ArgumentError, match="recorded into the graph"):
        f(a, 3.0)
    with pytest.raises(cf.graph.GraphCaptureError, match="must return arrays"):
        cf.graph.capture(lambda x: "text", a)(a)  # (on the GPU: at the capture)
    with pytest.raises(cf.ArgumentError, match=r"block form .* got stream=<cuflow\.Stream"):
        cf.graph.capture(lambda x: x, a, stream=cf.Stream())


def test_numpy_backend_just_calls_fn():
    """No graph: the capture runs fn once on the examples (its static outputs, as a GPU
    capture makes them), and each call runs it again."""
    before = cuflow.get_backend().name
    cuflow.set_backend("numpy")
    try:
        seen = []
        f = cuflow.graph.capture(lambda x: seen.append(x) or x + 1, np.ones(3))
        assert f.graph is None and len(seen) == 1
        np.testing.assert_array_equal(f.outputs, np.full(3, 2.0))
        out = f(cuflow.asarray(np.zeros(3)))
        np.testing.assert_array_equal(out, np.ones(3))
        assert len(seen) == 2 and out is f.outputs
    finally:
        cuflow.set_backend(before)


@pytest.mark.gpu
def test_replay_reads_new_inputs(gpu_cf, rng):
    cf = gpu_cf
    x0 = cf.asarray(rng.uniform(-3, 3, size=(5,)).astype(np.float32))
    step = cf.graph.capture(swing(cf, 51), x0)
    for _ in range(2):
        host = rng.uniform(-3, 3, size=(5,)).astype(np.float32)
        step.inputs[0][...] = cf.asarray(host)
        for got, want in zip(step.replay(), swing_reference(host, 51)):
            np.testing.assert_allclose(cf.asnumpy(got), want, rtol=1e-5, atol=1e-5)


def test_a_call_returns_the_same_outputs_overwritten_on_every_backend(cf, rng):
    """The static outputs: the same arrays every call, holding the last call's results (the
    NumPy backend writes its eager results there too, so code that keeps them behaves alike)."""
    x0 = cf.asarray(rng.uniform(-3, 3, size=(5,)).astype(np.float32))
    f = cf.graph.capture(swing(cf, 3), x0)
    h1, h2 = (rng.uniform(-3, 3, size=(5,)).astype(np.float32) for _ in range(2))
    first = f(cf.asarray(h1))
    second = f(cf.asarray(h2))
    assert all(a is b for a, b in zip(first, second))
    for got, want in zip(first, swing_reference(h2, 3)):
        np.testing.assert_allclose(cf.asnumpy(got), want, rtol=1e-5, atol=1e-6)


def test_a_closed_captured_function_says_so_and_captures_again_when_called(cf, rng):
    x0 = cf.asarray(rng.uniform(-3, 3, size=(5,)).astype(np.float32))
    f = cf.graph.capture(swing(cf, 3), x0)
    f.close()
    with pytest.raises(cuflow.BackendError, match="no graph to replay: it was not captured "
                                                  "yet or was closed"):
        f.replay()
    host = rng.uniform(-3, 3, size=(5,)).astype(np.float32)
    for got, want in zip(f(cf.asarray(host)), swing_reference(host, 3)):
        np.testing.assert_allclose(cf.asnumpy(got), want, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_graph_never_corrupts_arrays_allocated_after_capture(gpu_cf, rng):
    """Temporaries of the capture are freed inside it; with CuPy's shared pool they would be
    handed to the arrays below and every replay would overwrite them."""
    import cupy  # noqa: PLC0415  (optional dependency)

    cf = gpu_cf
    n = 1 << 16

    def f(x):
        tmp = cf.multiply(x, x)
        tmp2 = cf.add(tmp, 1.0)
        del tmp
        return cf.add(tmp2, x)

    x0 = cf.asarray(rng.uniform(-1, 1, size=(n,)).astype(np.float32))
    g = cf.graph.capture(f, x0)
    live = [cupy.full((n,), 5.0, cupy.float32) for _ in range(8)]
    more = [cf.full((n,), 6.0, dtype=cf.float32) for _ in range(8)]
    for _ in range(4):
        g(x0)
    cf.synchronize()
    for a in live:
        assert float(a.min()) == 5.0 == float(a.max())
    for a in more:
        assert float(a.min()) == 6.0 == float(a.max())
    xh = cf.asnumpy(x0)
    np.testing.assert_allclose(cf.asnumpy(g.outputs), xh * xh + 1 + xh, rtol=1e-6)
    out = g.outputs
    g.close()
    np.testing.assert_allclose(cf.asnumpy(out), xh * xh + 1 + xh, rtol=1e-6)  # still valid


@pytest.mark.gpu
def test_replay_on_caller_stream_is_ordered(gpu_cf, rng):
    cf = gpu_cf
    s = cf.Stream()
    x0 = cf.asarray(rng.uniform(-1, 1, size=(1 << 20,)).astype(np.float32))
    g = cf.graph.capture(lambda x: cf.multiply(x, 3.0), x0)
    with s:
        x = cf.asarray(rng.uniform(-1, 1, size=(1 << 20,)).astype(np.float32))
        y = g(x)
        total = y.sum()
    s.synchronize()
    assert abs(float(total) - 3 * float(cf.asnumpy(x).astype(np.float64).sum())) < 1.0


@pytest.mark.gpu
@pytest.mark.parametrize("what, body, names", [
    ("item", lambda cf, x: cf.multiply(x, float((x * 2).sum().item())), "item"),
    ("mask", lambda cf, x: x[x > 0], "x[x > 0]"),
    ("asnumpy", lambda cf, x: cf.asarray(cf.asnumpy(x) + 1), "asnumpy"),
])
def test_uncapturable_work_is_refused_by_name(gpu_cf, rng, what, body, names):
    cf = gpu_cf
    x0 = cf.asarray(rng.uniform(-1, 1, size=(64,)).astype(np.float32))
    with pytest.raises(cf.graph.GraphCaptureError) as info:
        cf.graph.capture(lambda x: body(cf, x), x0, warmup=0)
    msg = str(info.value)
    assert names in msg and "test_graph.py" in msg, msg
    assert info.value.__cause__ is not None
    # the device is still usable afterwards
    assert float(cf.ones((4,)).sum()) == 4.0


@pytest.mark.gpu
def test_non_array_output_is_refused(gpu_cf):
    cf = gpu_cf
    with pytest.raises(cf.graph.GraphCaptureError, match="must return arrays"):
        cf.graph.capture(lambda x: "text", cf.ones((3,)))


def test_graphed_methods_capture_per_instance(cf, rng):
    class Model:
        def __init__(self, w):
            self.w = w

        @cf.graph.graphed
        def forward(self, x):
            return x * self.w

    x = cf.asarray(rng.uniform(-9, 9, size=(4, 8)).astype(np.float32))
    a, b = Model(2.0), Model(3.0)
    np.testing.assert_array_equal(cf.asnumpy(a.forward(x)), cf.asnumpy(x) * 2)
    np.testing.assert_array_equal(cf.asnumpy(b.forward(x)), cf.asnumpy(x) * 3)
    np.testing.assert_array_equal(cf.asnumpy(a.forward(x)), cf.asnumpy(x) * 2)
    assert a.forward is a.forward and a.forward is not b.forward
    assert a.forward.__name__ == "forward"
    # a copy (its __dict__ copied, the capture found there included) captures its own self
    c = copy.copy(a)
    c.w = 5.0
    np.testing.assert_array_equal(cf.asnumpy(c.forward(x)), cf.asnumpy(x) * 5)
    assert c.forward is not a.forward
    np.testing.assert_array_equal(cf.asnumpy(a.forward(x)), cf.asnumpy(x) * 2)


def test_a_recorded_constant_is_compared_as_a_value(cf, rng):
    x = cf.asarray(rng.uniform(-9, 9, size=(8,)).astype(np.float32))
    f = cf.graph.capture(lambda a, k: a * k, x, 3)
    np.testing.assert_array_equal(cf.asnumpy(f(x, 3)), cf.asnumpy(x) * 3)
    for other in (x, np.ones(8), 3.0, True, [3]):  # arrays, and values of another type
        with pytest.raises(cuflow.ArgumentError, match="argument 1 .* recorded into the graph"):
            f(x, other)
    g = cf.graph.capture(lambda a, k: a + k, x, float("nan"))
    assert np.isnan(cf.asnumpy(g(x, float("nan")))).all()
    # zeros of the other sign are another constant (a divisor's sign is the result's)
    h = cf.graph.capture(lambda a, k: a / k, x, -0.0)
    assert (cf.asnumpy(h(x, -0.0)) * cf.asnumpy(x) <= 0).all()
    with pytest.raises(cuflow.ArgumentError, match="argument 1 .* recorded into the graph"):
        h(x, 0.0)


def test_a_capture_that_raised_is_tried_again(cf, rng):
    x = cf.asarray(rng.uniform(-9, 9, size=(8,)).astype(np.float32))
    calls = []

    def step(a):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the first call fails")
        return a * 2

    f = cf.graph.graphed(step)
    with pytest.raises(RuntimeError, match="first call"):
        f(x)
    np.testing.assert_array_equal(cf.asnumpy(f(x)), cf.asnumpy(x) * 2)
    # the failed call's inputs are not the capture's: another shape is captured anew
    g = cf.graph.graphed(lambda a: a.reshape(3, 3) * 2)
    with pytest.raises(ValueError):
        g(x)  # (8,) has no 3 x 3 shape (the base ndarray's reshape says so)
    nine = cf.asarray(rng.uniform(-9, 9, size=(9,)).astype(np.float32))
    np.testing.assert_array_equal(cf.asnumpy(g(nine)), cf.asnumpy(nine).reshape(3, 3) * 2)


def test_stream_arguments_are_checked_on_every_backend(cf, rng):
    a = cf.asarray(rng.uniform(-9, 9, size=(8,)).astype(np.float32))
    f = cf.graph.capture(lambda x: x * 2, a)
    with pytest.raises(cf.ArgumentTypeError, match=r"cuflow\.graph\.capture: stream= must be "
                                                    r".* got int 5$"):
        cf.graph.capture(stream=5)
    with pytest.raises(cf.ArgumentTypeError, match=r"CapturedFunction\(.*<lambda>\): stream= "
                                                    r"must be .* got str 'q'$"):
        f(a, stream="q")
    with pytest.raises(cf.ArgumentTypeError, match=r"\.replay: stream= must be .* got int 7$"):
        f.replay(stream=7)
    s = cf.Stream()
    out = f(a, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(cf.asnumpy(out), cf.asnumpy(a) * 2)


class _ForeignStream:
    """A PyTorch-like stream: ``torch.cuda.default_stream().cuda_stream`` is 0."""

    def __init__(self, handle):
        self.cuda_stream = handle


def test_a_block_is_not_captured_on_the_legacy_default_stream(cf, rng):
    """CUDA cannot capture on the legacy (null) stream: refused up front, on every backend,
    naming the rule and the stream."""
    for legacy in (cf.current_stream(), _ForeignStream(0), _ForeignStream(1)):
        with pytest.raises(cf.graph.GraphCaptureError,
                           match=r"^cuflow\.graph\.capture: .* non-default stream .* got "
                                 rf"{type(legacy).__name__} .*legacy"):
            cf.graph.capture(stream=legacy)
    host = rng.uniform(-1e30, 1e30, size=(8,)).astype(np.float32)
    with cf.Stream() as s:
        x = cf.asarray(host)
        with cf.graph.capture(stream=cf.current_stream()) as g:  # s: capturable
            y = x * 2
    if cf.get_backend().is_gpu:  # (the NumPy backend ran the block; it has no graph)
        g.replay(stream=s)
        s.synchronize()
    np.testing.assert_array_equal(cf.asnumpy(y), host * 2)


@pytest.mark.gpu
def test_a_block_replays_on_the_current_stream(gpu_cf, rng, spin):
    """g.replay() runs after the work queued on the current stream before it: a replay on the
    capture's own stream would read x before the copy of this step's input into it."""
    import cupy  # noqa: PLC0415  (optional dependency)

    cf = gpu_cf
    old, new = (rng.uniform(-1, 1, size=(1 << 20,)).astype(np.float32) for _ in range(2))
    x, x_new = cf.asarray(old), cf.asarray(new)
    with cf.graph.capture() as g:
        y = cf.add(x, 1.0)
    cf.synchronize()
    busy = cupy.cuda.Stream(non_blocking=True)
    spin(busy)
    with busy:  # the current stream, with earlier work queued
        cf.copy(x_new, dst=x)  # this step's input
        g.replay()
        running = not busy.done
        got = cf.asnumpy(y)  # on the current stream, after the replay
    assert running, "the current stream finished first: the test would prove nothing"
    np.testing.assert_allclose(got, new + 1, rtol=1e-6)
    with cf.Stream() as s:
        cf.copy(x_new * 2, dst=x)
        g.replay(stream=s)
        np.testing.assert_allclose(cf.asnumpy(y, stream=s), 2 * new + 1, rtol=1e-6)


@pytest.mark.gpu
def test_the_capture_copies_its_examples_before_any_call(gpu_cf, rng, spin):
    """capture(fn, x0) copies x0 into the static input on its own stream, after the current
    stream's work; a call on another stream copies x1 there on that stream.  The call waits
    for the capture's copy, or x0 lands last and a later replay computes fn(x0)."""
    import cupy  # noqa: PLC0415  (optional dependency)

    cf = gpu_cf

    def f(t):
        return t * 2.0 + 1.0

    h0, h1 = (rng.uniform(-1, 1, size=(1 << 20,)).astype(np.float32) for _ in range(2))
    x0, x1 = cf.asarray(h0), cf.asarray(h1)
    warm = cf.graph.capture(f, x0)  # the kernels compile here, not under the spin
    warm(x1)
    cf.synchronize()
    busy = cupy.cuda.Stream(non_blocking=True)
    spin(busy)
    with busy:  # capture while the current stream has work queued
        g = cf.graph.capture(f, x0)
    q = cf.Stream()
    out = g(x1, stream=q)
    running = not busy.done
    with q:
        first = cf.asnumpy(out, stream=q)
    cf.synchronize()
    again = cf.asnumpy(g.replay())  # on the static input as the call left it: x1
    assert running, "the current stream finished first: the test would prove nothing"
    np.testing.assert_allclose(first, h1 * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(again, h1 * 2 + 1, rtol=1e-6)
    g.close()
    warm.close()


@pytest.mark.gpu
def test_a_capture_at_the_first_call_follows_the_calls_stream(gpu_cf, rng, spin):
    """graphed's capture at a first call on stream q, whose input is still being written
    there: the capture's copy of the example waits for q, and q for the capture's work,
    so the call and a later replay give fn of the input."""
    cf = gpu_cf
    h = rng.uniform(-1, 1, size=(1 << 20,)).astype(np.float32)
    step = cf.graph.graphed(lambda t: t * 3.0)
    src = cf.asarray(h)
    q = cf.Stream()
    cf.synchronize()
    spin(q.cupy)
    x = cf.multiply(src, 1.0, stream=q)  # written on q, after the spin
    out = step(x, stream=q)
    with q:
        got = cf.asnumpy(out, stream=q)
    np.testing.assert_allclose(got, h * 3, rtol=1e-6)
    cf.synchronize()
    np.testing.assert_allclose(cf.asnumpy(step.replay()), h * 3, rtol=1e-6)


def test_captured_function_takes_its_examples_as_a_tuple(cf):
    from cuflow.graph import CapturedFunction

    x = cf.ones((3, 4), dtype=cf.float32)
    for bad in (x, 5):
        with pytest.raises(cuflow.ArgumentTypeError, match="example_inputs must be a tuple"):
            CapturedFunction(lambda v: v * 2, bad)
    f = CapturedFunction(lambda v: v * 2, [x])
    np.testing.assert_array_equal(cf.asnumpy(f(x)), np.full((3, 4), 2.0))


def test_a_none_output_keeps_the_arrays_beside_it_static(cf, rng):
    x = cf.asarray(rng.uniform(-3, 3, size=(5,)).astype(np.float32))
    g = cf.graph.capture(lambda v: (v + 1, None), x)
    first = g(x)
    second = g(x * 3)
    assert first[0] is second[0] and second[1] is None
    np.testing.assert_allclose(cf.asnumpy(second[0]), cf.asnumpy(x) * 3 + 1, rtol=1e-6)


def test_arguments_are_positional(cf, rng):
    x = cf.asarray(rng.uniform(-9, 9, size=(8,)).astype(np.float32))
    f = cf.graph.graphed(lambda a, k=2.0: a * k)
    with pytest.raises(cuflow.ArgumentTypeError, match=r"^cuflow\.graph: \S*<lambda> takes its "
                                                        r"arguments positionally .* got keyword "
                                                        r"argument\(s\) k$"):
        f(x, k=3.0)
    np.testing.assert_array_equal(cf.asnumpy(f(x, 3.0)), cf.asnumpy(x) * 3)


def test_a_call_while_another_runs_is_refused(cf, rng):
    """The static inputs and outputs are shared: a call while another is running (in another
    thread, or inside fn) would overwrite the first call's inputs, so it is refused, and the
    first call computes on its own inputs."""
    xa, xb = (cf.asarray(rng.uniform(-9, 9, size=(8,)).astype(np.float32)) for _ in range(2))
    entered, leave = threading.Event(), threading.Event()

    def step(t):
        if not entered.is_set():  # the first run (on the GPU: the warm-up) waits
            entered.set()
            assert leave.wait(30)
        return t * 2

    f = cf.graph.graphed(step)
    got = {}

    def first():
        try:
            got["a"] = cf.asnumpy(f(xa))
        except BaseException as e:  # (reported below, not lost in the thread)
            got["a"] = e

    t = threading.Thread(target=first)
    t.start()
    try:
        assert entered.wait(30)
        for name, call in (("call", lambda: f(xb)), ("replay", f.replay), ("close", f.close)):
            with pytest.raises(cf.graph.GraphCaptureError,
                               match=rf"^cuflow\.graph: cannot {name} \S*step while a call of it "
                                     r"is still running \(in another thread, or inside fn\)"):
                call()
    finally:
        leave.set()
        t.join(30)
    assert not isinstance(got["a"], BaseException), got["a"]
    np.testing.assert_array_equal(got["a"], cf.asnumpy(xa) * 2)
    np.testing.assert_array_equal(cf.asnumpy(f(xb)), cf.asnumpy(xb) * 2)  # then free again

    def again(t):  # a call inside fn: the same rule
        return g(t) * 2

    g = cf.graph.graphed(again)
    with pytest.raises(cf.graph.GraphCaptureError, match=r"cannot call \S*again while a call"):
        g(xa)


def _double(a):
    return a * 2


@cuflow.graph.graphed
def _tripled(a):
    return a * 3


class _Scaled:
    def __init__(self, w):
        self.w = w

    @cuflow.graph.graphed
    def forward(self, x):
        return x * self.w


def test_a_copy_of_a_captured_function_is_one_of_its_own(cf, rng):
    x = cf.asarray(rng.uniform(-9, 9, size=(8,)).astype(np.float32))
    want = cf.asnumpy(x) * 2
    f = cf.graph.graphed(_double)
    first = f(x)  # captured, with static outputs of its own
    copies = [copy.copy(f), copy.deepcopy(f), pickle.loads(pickle.dumps(f))]
    for c in copies:
        assert c is not f and c.graph is None and c.outputs is None  # not captured yet
        np.testing.assert_array_equal(cf.asnumpy(c(x)), want)
        assert c.outputs is not first  # its own static outputs
        c.close()
    # closing the copies left the original's graph alone
    np.testing.assert_array_equal(cf.asnumpy(f(x)), want)
    f.close()


def test_a_copy_of_a_graphed_method_is_one_of_its_own(cf, rng):
    x = cf.asarray(rng.uniform(-9, 9, size=(8,)).astype(np.float32))
    m = _Scaled(3.0)
    first = m.forward(x)
    for c in (copy.copy(m.forward), copy.deepcopy(m.forward)):
        assert c is not m.forward and c.graph is None
        np.testing.assert_array_equal(cf.asnumpy(c(x)), cf.asnumpy(x) * 3)
        assert c.outputs is not first
        c.close()
    np.testing.assert_array_equal(cf.asnumpy(m.forward(x)), cf.asnumpy(x) * 3)
    m.forward.close()


def test_a_graphed_module_function_pickles_by_name(cf, rng):
    x = cf.asarray(rng.uniform(-9, 9, size=(8,)).astype(np.float32))
    _tripled(x)
    assert pickle.loads(pickle.dumps(_tripled)) is _tripled  # as a function pickles
    np.testing.assert_array_equal(cf.asnumpy(_tripled(x)), cf.asnumpy(x) * 3)
    _tripled.close()


def test_an_instance_with_a_graphed_method_pickles_after_a_call(cf, rng):
    x = cf.asarray(rng.uniform(-9, 9, size=(8,)).astype(np.float32))
    m = _Scaled(3.0)
    m.forward(x)
    m2 = pickle.loads(pickle.dumps(m))
    m2.w = 5.0
    np.testing.assert_array_equal(cf.asnumpy(m2.forward(x)), cf.asnumpy(x) * 5)
    np.testing.assert_array_equal(cf.asnumpy(m.forward(x)), cf.asnumpy(x) * 3)
    m.forward.close()
    m2.forward.close()
