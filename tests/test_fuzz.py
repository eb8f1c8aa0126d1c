"""A property-based fuzz of the public API: random arguments of the wrong type or value, NaN,
inf, huge, negative, empty, non-contiguous, or of the wrong backend.

Every call must end in a CuflowError with a message, or return a correct result: never
another exception, a crash, a hang (each example has a deadline) or silent garbage.

Profiles: ``CUFLOW_FUZZ_EXAMPLES`` (default 40) examples per test, derandomized so CI is
repeatable; set it for more examples, drawn at random (``bench/gpu_run.sh`` sets 400).
"""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import cuflow
from cuflow import image

_N = os.environ.get("CUFLOW_FUZZ_EXAMPLES")
FUZZ = settings(max_examples=int(_N or 40), derandomize=_N is None, deadline=None,
                suppress_health_check=list(HealthCheck), database=None)

# ------------------------------------------------------------------ strategies
NASTY_FLOATS = st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-320, 5e-324,
                                1e300, -1e300, 3.5e38, 1e-45])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.integers(-3, 70),
    st.floats(allow_nan=True, allow_infinity=True), NASTY_FLOATS, st.text(max_size=3),
    st.complex_numbers(max_magnitude=10), st.just(object()), st.just(np.float32(2.5)),
    st.just(np.int64(7)), st.just(np.bool_(True)))
SEQUENCES = st.one_of(st.lists(SCALARS, max_size=4).map(tuple), st.lists(SCALARS, max_size=4))
ANY_VALUE = st.one_of(SCALARS, SEQUENCES)
DTYPES = st.sampled_from([np.uint8, np.float32, np.float16, np.int64, np.bool_, np.complex64])


@st.composite
def host_arrays(draw, dtypes=DTYPES, min_dims=0, max_dims=4, max_side=9):
    dtype = draw(dtypes)
    shape = tuple(draw(st.lists(st.integers(0, max_side), min_size=min_dims,
                                max_size=max_dims)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    a = (rng.uniform(-300, 300, shape) if np.dtype(dtype).kind in "fc"
         else rng.integers(0, 256, shape)).astype(dtype)
    if a.ndim and draw(st.booleans()):  # non-contiguous views
        a = a[..., ::2] if draw(st.booleans()) else np.swapaxes(a, 0, -1)
    return a


@st.composite
def arrays(draw, **kw):
    """A backend array, or now and then a host array (the wrong backend on the GPU)."""
    a = draw(host_arrays(**kw))
    if draw(st.integers(0, 9)) == 0:
        return a
    return cuflow.asarray(a)


FRAMES = st.one_of(
    arrays(dtypes=st.just(np.uint8), min_dims=3, max_dims=4, max_side=12),
    arrays(min_dims=0, max_dims=5), ANY_VALUE)
SIZES = st.one_of(st.integers(-2, 40), st.tuples(st.integers(-2, 40), st.integers(-2, 40)),
                  ANY_VALUE, st.tuples(NASTY_FLOATS, st.integers(1, 9)))
LAYOUTS = st.one_of(st.sampled_from(["NCHW", "NHWC", None]), ANY_VALUE)


def outcome(fn, *args, **kwargs):
    """``fn``'s result, or None when it raised a CuflowError with a message; any other
    exception fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a NumPy overflow is not an answer
        try:
            return fn(*args, **kwargs)
        except cuflow.CuflowError as e:
            assert str(e).strip(), f"{type(e).__name__} without a message"
            return None


def host(x):
    return cuflow.asnumpy(x)


@pytest.fixture(autouse=True)
def _backend(cf):
    """Every fuzz runs on every backend (the ``cf`` fixture switches it)."""


# ------------------------------------------------------------------ image
def _norm_reference(x, mean, std, scale, layout):
    """(x * scale - mean) / std of default-format packed frames, in float64."""
    c = x.shape[-1]
    v = x[..., :1] if c == 1 else x[..., :3]
    oc = v.shape[-1]
    m = np.broadcast_to(np.asarray(mean, np.float64).reshape(-1), (oc,)) if np.ndim(mean) \
        else np.full(oc, float(mean))
    s = np.broadcast_to(np.asarray(std, np.float64).reshape(-1), (oc,)) if np.ndim(std) \
        else np.full(oc, float(std))
    r = (v.astype(np.float64) * scale - m) / s
    return np.moveaxis(r, -1, -3) if layout == "NCHW" else r


@FUZZ
@given(src=FRAMES, mean=st.one_of(st.none(), ANY_VALUE), std=st.one_of(st.none(), ANY_VALUE),
       scale=st.one_of(st.none(), ANY_VALUE), layout=LAYOUTS,
       dtype=st.sampled_from([None, "float32", "float16", "uint8", "int8", "x"]),
       flip=st.one_of(st.booleans(), ANY_VALUE))
def test_normalize(src, mean, std, scale, layout, dtype, flip):
    out = outcome(image.normalize, src, mean=mean, std=std, scale=scale, layout=layout,
                  dtype=dtype, flip=flip)
    if out is None:
        return
    x = host(src)
    assert x.dtype == np.uint8 and x.ndim in (3, 4) and x.shape[-3] not in (1, 3, 4)
    assert out.dtype == np.dtype(np.float32 if dtype is None else dtype)
    o = host(out).astype(np.float64)
    assert out.dtype == np.uint8 or np.isfinite(o).all()
    want = _norm_reference(x[..., ::-1, :] if flip else x, 0.0 if mean is None else mean,
                           1.0 if std is None else std, 1 / 255 if scale is None else scale,
                           layout)
    assert o.shape == want.shape
    if out.dtype == np.uint8:
        np.testing.assert_allclose(o, np.clip(np.rint(want), 0, 255), atol=1)
    else:
        # an entry whose float64 reference lies past the output dtype's range has no
        # reference value in that dtype: every other entry is compared
        with np.errstate(over="ignore"):
            fin = np.isfinite(want.astype(out.dtype))
        o, want = o[fin], want[fin]
        tol = 2e-3 if out.dtype == np.float16 else 1e-5
        np.testing.assert_allclose(o, want, rtol=tol,
                                   atol=tol * (1 + np.abs(want).max(initial=0)))


@FUZZ
@given(src=FRAMES, size=SIZES, op=st.sampled_from(["resize", "resize_normalize", "letterbox"]),
       pad=st.one_of(st.integers(0, 255), ANY_VALUE),
       interpolation=st.one_of(st.sampled_from(["bilinear", "nearest", "area"]), ANY_VALUE))
def test_resizing(src, size, op, pad, interpolation):
    kw = dict(interpolation=interpolation)
    if op == "letterbox":
        kw["pad"] = pad
    out = outcome(getattr(image, op), src, size, **kw)
    if out is None:
        return
    out = out[0] if op == "letterbox" else out
    h, w = (size, size) if isinstance(size, int | np.integer) else size
    assert isinstance(h, int | np.integer) and isinstance(w, int | np.integer) and h > 0 < w
    o = host(out)
    assert (o.shape[-3:-1] if op == "resize" else o.shape[-2:]) == (h, w)
    if o.dtype.kind == "f":
        assert np.isfinite(o).all()
    if op == "resize" and o.size:  # every interpolation is a convex combination of pixels
        x = host(src)
        assert x.min() - 0.5 <= o.min() and o.max() <= x.max() + 0.5


@FUZZ
@given(src=FRAMES, boxes=st.one_of(arrays(min_dims=2, max_dims=2), ANY_VALUE),
       frame_index=st.one_of(st.none(), arrays(min_dims=1, max_dims=1), ANY_VALUE),
       size=SIZES)
def test_crop_resize(src, boxes, frame_index, size):
    out = outcome(image.crop_resize, src, boxes, size, frame_index=frame_index)
    if out is None:
        return
    b = host(boxes)
    assert b.ndim == 2 and b.shape[1] == 4 and b.dtype.kind in "iuf"
    if not cuflow.get_backend().is_gpu:
        assert np.isfinite(b.astype(np.float64)).all()
    if frame_index is not None:
        assert host(frame_index).dtype.kind in "iu"
    assert host(out).shape[0] == b.shape[0] and np.isfinite(host(out)).all()


@FUZZ
@given(src=st.one_of(arrays(dtypes=st.sampled_from([np.float32, np.float16, np.uint8]),
                            min_dims=3, max_dims=4), ANY_VALUE),
       layout=LAYOUTS, mean=st.one_of(st.none(), ANY_VALUE), std=st.one_of(st.none(), ANY_VALUE))
def test_denormalize(src, layout, mean, std):
    out = outcome(image.denormalize, src, layout=layout, mean=mean, std=std)
    if out is None:
        return
    x = host(src)
    nchw = layout in (None, "NCHW")
    c = x.shape[-3] if nchw else x.shape[-1]
    assert c == 3 and (layout is not None or x.shape[-1] != 3)  # never a guessed layout
    assert host(out).dtype == np.uint8 and host(out).shape[-1] == 3


# ------------------------------------------------------------------ creation, interop
@FUZZ
@given(shape=st.one_of(SIZES, st.lists(st.integers(-1, 2**33), max_size=3).map(tuple)),
       fn=st.sampled_from(["empty", "zeros", "ones", "full"]),
       dtype=st.sampled_from([None, "float32", "uint8", "bool", "x", object]),
       fill=ANY_VALUE)
def test_creation(shape, fn, dtype, fill):
    args = (shape, fill) if fn == "full" else (shape,)
    kw = {} if dtype is None else {"dtype": dtype}
    out = outcome(getattr(cuflow, fn), *args, **kw)
    if out is None:
        return
    want = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    assert out.shape == want and out.dtype.kind in "biufc"
    if fn in ("zeros", "ones"):
        assert (host(out) == (fn == "ones")).all()
    elif fn == "full":  # the value NumPy makes of fill in that dtype
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            np.testing.assert_array_equal(host(out), np.full(want, fill, dtype=out.dtype))


@FUZZ
@given(obj=st.one_of(ANY_VALUE, st.lists(SEQUENCES, max_size=3), host_arrays()),
       dtype=st.sampled_from([None, "float32", "int8", "x"]))
def test_asarray(obj, dtype):
    out = outcome(cuflow.asarray, obj, dtype=dtype)
    if out is None:
        return
    assert out.dtype.kind in "biufc"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = np.asarray(obj, dtype=dtype)
    np.testing.assert_array_equal(host(out), want)


# ------------------------------------------------------------------ streams, pipeline
@FUZZ
@given(non_blocking=st.one_of(st.booleans(), ANY_VALUE), priority=st.one_of(st.none(), SCALARS),
       n=SCALARS)
def test_streams(non_blocking, priority, n):
    s = outcome(cuflow.Stream, non_blocking=non_blocking, priority=priority)
    if s is not None:
        assert isinstance(non_blocking, bool | np.bool_) or non_blocking in (0, 1)
        assert priority is None or isinstance(priority, int | np.integer) and \
            not isinstance(priority, bool | np.bool_)
        s.synchronize()
    ss = outcome(cuflow.streams, n)
    if ss is not None:
        assert len(ss) == n and n >= 0


@FUZZ
@given(shape=st.one_of(st.tuples(st.integers(-1, 4), st.integers(0, 4)), ANY_VALUE),
       size=SCALARS, dtype=st.sampled_from(["float32", "uint8", "x", None]),
       element=st.one_of(arrays(dtypes=st.sampled_from([np.float32, np.uint8]), max_dims=3,
                                max_side=4), ANY_VALUE),
       data=st.data())
def test_bufferizer(shape, size, dtype, element, data):
    b = outcome(cuflow.Bufferizer, shape, size, dtype)
    if b is None:
        return
    assert b.shape[0] == size >= 1
    if data.draw(st.booleans()):  # an element that fits (one, or a batch of k), else the drawn one
        k = data.draw(st.integers(0, 3))
        rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
        shp = b.element_shape if k == 0 else (k, *b.element_shape)
        element = (rng.uniform(-300, 300, shp) if b.dtype.kind == "f"
                   else rng.integers(0, 256, shp)).astype(b.dtype)
    n = len(b)
    try:
        outcome(b.append, element)
    except BufferError as e:  # the buffer is full: all-or-nothing, and a CuflowError
        assert isinstance(e, cuflow.CuflowError)
    if len(b) == n:  # refused: nothing counted
        return
    x = host(element)  # taken: one element or a batch of them, of the buffer's dtype
    assert x.dtype == b.dtype
    assert x.shape == b.element_shape or x.shape[1:] == b.element_shape
    b.stream.synchronize()
    np.testing.assert_array_equal(host(b.darray)[n:len(b)], x.reshape(len(b) - n, *b.element_shape))


@FUZZ
@given(size=SIZES, batch=SCALARS,
       opts=st.dictionaries(st.sampled_from(["mean", "std", "scale", "layout", "pad",
                                             "letterbox", "n_staging", "copy_threads",
                                             "frames_reused", "interpolation"]),
                            ANY_VALUE, max_size=3),
       frames=st.lists(host_arrays(dtypes=st.sampled_from([np.uint8, np.float32]),
                                   min_dims=2, max_dims=4, max_side=10), max_size=4))
def test_pipeline(size, batch, opts, frames):
    pipe = outcome(cuflow.Pipeline, size, batch, **opts)
    if pipe is None:
        return
    got = outcome(lambda: [host(b) for b in pipe.batches(frames)])
    if got is None:  # refused midway: the frames are counted
        assert pipe.frames_out + len(pipe.undelivered) == pipe.frames_in
        return
    assert sum(len(b) for b in got) == len(frames) == pipe.frames_out
    for b in got:
        assert np.isfinite(b.astype(np.float64)).all()


# ------------------------------------------------------------------ the ops of core
@settings(FUZZ, phases=[Phase.generate], report_multiple_bugs=False)  # fails fast, no shrink
@given(fn=st.sampled_from(["add", "sqrt", "sum", "reshape", "matmul", "transpose", "take",
                           "concatenate", "astype"]),
       a=arrays(dtypes=st.sampled_from([np.float32, np.int64]), min_dims=1, max_dims=3),
       other=st.one_of(arrays(min_dims=0, max_dims=3), ANY_VALUE))
def test_core_ops(fn, a, other):
    f = getattr(cuflow, fn)
    call = {"add": lambda: f(a, other), "sqrt": lambda: f(other), "sum": lambda: f(a, axis=other),
            "reshape": lambda: f(a, other), "matmul": lambda: f(a, other),
            "transpose": lambda: f(a, other), "take": lambda: f(a, other),
            "concatenate": lambda: f([a, other]), "astype": lambda: f(a, other)}[fn]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            got = call()
        except cuflow.CuflowError as e:
            assert str(e)
            return
        # a result must be NumPy's for the same arguments (on host copies); arguments
        # NumPy refuses have no correct result, so cuflow must refuse them too
        ha, ho = host(a), host(other) if isinstance(other, cuflow.darray) else other
        try:
            want = np.asarray({
                "add": lambda: np.add(ha, ho), "sqrt": lambda: np.sqrt(ho),
                "sum": lambda: np.sum(ha, axis=ho), "reshape": lambda: np.reshape(ha, ho),
                "matmul": lambda: np.matmul(ha, ho), "transpose": lambda: np.transpose(ha, ho),
                # device indices past the end wrap on the GPU (checking them would
                # synchronize); host indices are checked
                "take": lambda: np.take(ha, ho, mode="wrap" if cuflow.get_backend().is_gpu
                                        and isinstance(other, cuflow.darray) else "raise"),
                "concatenate": lambda: np.concatenate([ha, ho]),
                "astype": lambda: ha.astype(ho)}[fn]())
        except Exception as e:
            pytest.fail(f"cuflow.{fn} returned a result where NumPy raises "
                        f"{type(e).__name__}: {e}")
    g = host(got)
    assert g.dtype == want.dtype and g.shape == want.shape, (g.dtype, g.shape, want.dtype,
                                                             want.shape)
    if want.dtype.kind in "fc":
        # sums and matrix products may cancel: their error scales with the summed magnitudes
        mag = {"sum": lambda: np.sum(np.abs(ha), axis=ho),
               "matmul": lambda: np.matmul(np.abs(ha), np.abs(ho))}.get(fn, lambda: 0)()
        np.testing.assert_allclose(g, want, rtol=1e-5,
                                   atol=1e-5 * np.max(mag, initial=0))
    else:
        np.testing.assert_array_equal(g, want)
