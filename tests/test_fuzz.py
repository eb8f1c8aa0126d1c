"""A property-based fuzz of the public API: random arguments of the wrong type or value, NaN,
inf, huge, negative, empty, non-contiguous, or of the wrong backend.

Every call must end in a CuflowError with a message, or return a correct result: never
another exception, a crash, a hang (each example has a deadline) or silent garbage.  The
calls with many arguments draw valid ones and make at most one of them nasty (none in about
half of the examples), and each such test asserts that a share of its calls gave a result, which
is then checked: a fuzz whose every call is refused would check nothing.

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


def _huge(v) -> bool:
    """A size that may be valid but past a few thousand elements a side: its output would
    take seconds and gigabytes on the NumPy backend (sizes no memory holds are drawn apart)."""
    return any(isinstance(x, int) and not isinstance(x, bool) and x > 64
               for x in (v if isinstance(v, tuple | list) else (v,)))


SIZES = st.one_of(st.integers(-2, 40), st.tuples(st.integers(-2, 40), st.integers(-2, 40)),
                  ANY_VALUE.filter(lambda v: not _huge(v)),
                  st.tuples(NASTY_FLOATS, st.integers(1, 9)), st.just((1, 2**62)))
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


def mixed(data, valid: dict, nasty: dict) -> dict:
    """Arguments drawn from ``valid``, at most one of them from ``nasty`` instead (none in
    about half of the draws)."""
    bad = data.draw(st.sampled_from([None] * len(nasty) + list(nasty)), label="nasty argument")
    return {k: data.draw(nasty[k] if k == bad else v, label=k) for k, v in valid.items()}


def fuzz(body) -> None:
    """Run the fuzz ``body(data)`` (True where the call gave a result, checked) over the
    profile's examples; at least a tenth of them must have given one."""
    results: list[bool] = []

    @FUZZ
    @given(data=st.data())
    def run(data):
        results.append(bool(body(data)))

    run()
    assert sum(results) >= max(len(results) // 10, 1), \
        f"{sum(results)} of {len(results)} calls gave a result: the valid draws are refused"


#: uint8 frames every image operator takes: (N,) H, W, C with C of 1, 3 or 4, and a height
#: that is no channel count (a frame of height 3 could be a CHW image)
FRAME_SHAPES = st.tuples(st.integers(1, 3), st.integers(5, 12), st.integers(1, 12),
                         st.sampled_from([1, 3, 4]))


@st.composite
def good_frames(draw, batched=None):
    n, h, w, c = draw(FRAME_SHAPES)
    shape = (n, h, w, c) if (draw(st.booleans()) if batched is None else batched) else (h, w, c)
    x = np.random.default_rng(draw(st.integers(0, 2**16))).integers(0, 256, shape, np.uint8)
    return cuflow.asarray(x)


GOOD_SIZES = st.one_of(st.integers(1, 24), st.tuples(st.integers(1, 24), st.integers(1, 24)))
GOOD_MEAN = st.one_of(st.none(), st.floats(-50, 300))
GOOD_STD = st.one_of(st.none(), st.floats(0.5, 100))
GOOD_SCALE = st.one_of(st.none(), st.floats(1e-3, 2))


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


def test_normalize():
    fuzz(_normalize)


def _normalize(data):
    kw = mixed(data, dict(src=good_frames(), mean=GOOD_MEAN, std=GOOD_STD, scale=GOOD_SCALE,
                          layout=st.sampled_from(["NCHW", "NHWC"]),
                          dtype=st.sampled_from([None, "float32", "float16", "uint8"]),
                          flip=st.booleans()),
               dict(src=FRAMES, mean=ANY_VALUE, std=ANY_VALUE, scale=ANY_VALUE, layout=LAYOUTS,
                    dtype=st.sampled_from(["int8", "x", object]), flip=ANY_VALUE))
    src, mean, std, scale, layout, dtype, flip = kw.values()
    out = outcome(image.normalize, **kw)
    if out is None:
        return False
    x = host(src)
    assert x.dtype == np.uint8 and x.ndim in (3, 4) and x.shape[-3] not in (1, 3, 4)
    assert out.dtype == np.dtype(np.float32 if dtype is None else dtype)
    o = host(out).astype(np.float64)  # (inf only where the reference is past the dtype's
    # range: the comparison below checks every other entry)
    if scale is None:  # a uint8 output keeps the 0-255 scale, a float one is x / 255
        scale = 1.0 if out.dtype == np.uint8 else 1 / 255
    want = _norm_reference(x[..., ::-1, :] if flip else x, 0.0 if mean is None else mean,
                           1.0 if std is None else std, scale, layout)
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
    return True


def test_resizing():
    fuzz(_resizing)


def _resizing(data):
    op = data.draw(st.sampled_from(["resize", "resize_normalize", "letterbox"]), label="op")
    kw = mixed(data, dict(src=good_frames(), size=GOOD_SIZES, pad=st.integers(0, 255),
                          interpolation=st.sampled_from(["bilinear", "nearest", "area"])),
               dict(src=FRAMES, size=SIZES, pad=ANY_VALUE, interpolation=ANY_VALUE))
    src, size = kw.pop("src"), kw.pop("size")
    if op != "letterbox":
        del kw["pad"]
    out = outcome(getattr(image, op), src, size, **kw)
    if out is None:
        return False
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
    return True


@st.composite
def good_boxes(draw, n_frames=1):
    """``(boxes, frame_index)``: k boxes inside a 5x1 frame's corner (every good frame is at
    least that), and None or k frame indices below ``n_frames``."""
    k = draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    lo = rng.uniform(0, 0.5, (k, 2))
    boxes = np.concatenate([lo, lo + rng.uniform(0.2, 0.5, (k, 2))], 1).astype(np.float32)
    index = None if draw(st.booleans()) else rng.integers(0, n_frames, k)
    return cuflow.asarray(boxes), index if index is None else cuflow.asarray(index)


def test_crop_resize():
    fuzz(_crop_resize)


def _crop_resize(data):
    kw = mixed(data, dict(src=good_frames(batched=False), boxes=good_boxes(), size=GOOD_SIZES),
               dict(src=FRAMES, boxes=st.one_of(arrays(min_dims=2, max_dims=2), ANY_VALUE),
                    size=SIZES))
    src, size = kw["src"], kw["size"]
    boxes, frame_index = kw["boxes"] if isinstance(kw["boxes"], tuple) and \
        len(kw["boxes"]) == 2 and isinstance(kw["boxes"][0], cuflow.darray) else (kw["boxes"], None)
    if data.draw(st.integers(0, 4), label="nasty frame_index") == 0:
        frame_index = data.draw(st.one_of(arrays(min_dims=1, max_dims=1), ANY_VALUE),
                                label="frame_index")
    out = outcome(image.crop_resize, src, boxes, size, frame_index=frame_index)
    if out is None:
        return False
    b = host(boxes)
    if b.shape == (0,):  # no boxes, as an empty sequence
        b = b.reshape(0, 4)
    assert b.ndim == 2 and b.shape[1] == 4 and b.dtype.kind in "iuf"
    if not cuflow.get_backend().is_gpu:
        assert np.isfinite(b.astype(np.float64)).all()
    if frame_index is not None:
        assert host(frame_index).dtype.kind in "iu"
    o = host(out)
    assert o.shape[0] == b.shape[0] and np.isfinite(o).all()
    # every output is a weighted mean of source pixels (scaled by 1/255): within their range
    x = host(src).astype(np.float64) / 255
    if o.size:
        assert x.min() - 1e-5 <= o.min() and o.max() <= x.max() + 1e-5, (o.min(), o.max())
    return True


@st.composite
def good_normalized(draw):
    """A float32 or float16 (N,) 3, H, W batch and its layout, or (N,) H, W, 3 and NHWC."""
    n, h, w = draw(st.integers(1, 3)), draw(st.integers(1, 9)), draw(st.integers(1, 9))
    nchw = draw(st.booleans())
    shape = (n, 3, h, w) if nchw else (n, h, w, 3)
    x = np.random.default_rng(draw(st.integers(0, 2**16))).uniform(-3, 3, shape)
    return cuflow.asarray(x.astype(draw(st.sampled_from([np.float32, np.float16])))), \
        "NCHW" if nchw else "NHWC"


def test_denormalize():
    fuzz(_denormalize)


def _denormalize(data):
    kw = mixed(data, dict(src=good_normalized(), mean=GOOD_MEAN, std=GOOD_STD),
               dict(src=st.one_of(arrays(dtypes=st.sampled_from([np.float32, np.float16,
                                                                  np.uint8]),
                                         min_dims=3, max_dims=4), ANY_VALUE),
                    mean=ANY_VALUE, std=ANY_VALUE))
    src, mean, std = kw.values()
    if isinstance(src, tuple) and len(src) == 2 and isinstance(src[0], cuflow.darray):
        src, layout = src
    else:
        layout = data.draw(LAYOUTS, label="layout")
    out = outcome(image.denormalize, src, layout=layout, mean=mean, std=std)
    if out is None:
        return False
    x = host(src)
    nchw = layout in (None, "NCHW")
    c = x.shape[-3] if nchw else x.shape[-1]
    assert c == 3 and (layout is not None or x.shape[-1] != 3)  # never a guessed layout
    o = host(out)
    assert o.dtype == np.uint8 and o.shape[-1] == 3
    # the inverse of normalize: x * std + mean on the 0-255 scale, rounded and clipped
    m = np.asarray(0.0 if mean is None else mean, np.float64)  # (a value per channel, or one)
    sd = np.asarray(1.0 if std is None else std, np.float64)
    hwc = x.astype(np.float64) if not nchw else np.moveaxis(x.astype(np.float64), -3, -1)
    want = np.clip(np.rint((hwc * sd + m) * 255), 0, 255)
    np.testing.assert_allclose(o, want, atol=1)
    return True


# ------------------------------------------------------------------ creation, interop
_OF_THE_DTYPE = object()
GOOD_FILLS = {None: st.floats(-1e6, 1e6), "float32": st.floats(-1e6, 1e6, width=32),
              "uint8": st.integers(0, 255), "bool": st.booleans()}


def test_creation():
    fuzz(_creation)


def _creation(data):
    fn = data.draw(st.sampled_from(["empty", "zeros", "ones", "full"]), label="fn")
    kw = mixed(data, dict(shape=st.one_of(st.integers(0, 9),
                                          st.lists(st.integers(0, 5), max_size=3).map(tuple)),
                          dtype=st.sampled_from([None, "float32", "uint8", "bool"]),
                          fill=st.just(_OF_THE_DTYPE)),
               # (sizes past any memory, not sizes a large host could fill: a fuzz worker
               # filling gigabytes is killed)
               dict(shape=st.one_of(SIZES, st.lists(st.one_of(st.integers(-1, 64), st.sampled_from(
                   [2**40, 2**62, 2**63 - 1])), min_size=1, max_size=3).map(tuple)),
                    dtype=st.sampled_from(["x", object]), fill=ANY_VALUE))
    shape, dtype, fill = kw.values()
    if fill is _OF_THE_DTYPE:  # a value the drawn dtype holds
        fill = data.draw(GOOD_FILLS.get(dtype, st.just(1)), label="fill")
    args = (shape, fill) if fn == "full" else (shape,)
    kw = {} if dtype is None else {"dtype": dtype}
    out = outcome(getattr(cuflow, fn), *args, **kw)
    if out is None:
        return False
    want = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    assert out.shape == want and out.dtype.kind in "biufc"
    if fn in ("zeros", "ones"):
        assert (host(out) == (fn == "ones")).all()
    elif fn == "full":  # the value NumPy makes of fill in that dtype
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            np.testing.assert_array_equal(host(out), np.full(want, fill, dtype=out.dtype))
    return True


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


@st.composite
def good_frame_lists(draw):
    """Up to four uint8 H, W, 3 frames of one shape, on the host."""
    h, w = draw(st.integers(5, 10)), draw(st.integers(1, 10))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    return [rng.integers(0, 256, (h, w, 3), np.uint8) for _ in range(draw(st.integers(0, 4)))]


def test_pipeline():
    fuzz(_pipeline)


def _pipeline(data):
    kw = mixed(data, dict(size=GOOD_SIZES, batch=st.integers(1, 3),
                          opts=st.fixed_dictionaries({}, optional=dict(
                              mean=st.floats(-1, 1), std=st.floats(0.5, 2),
                              layout=st.sampled_from(["NCHW", "NHWC"]),
                              letterbox=st.booleans(), frames_reused=st.booleans())),
                          frames=good_frame_lists()),
               dict(size=SIZES, batch=SCALARS,
                    opts=st.dictionaries(st.sampled_from(
                        ["mean", "std", "scale", "layout", "pad", "letterbox", "n_staging",
                         "copy_threads", "frames_reused", "interpolation"]), ANY_VALUE,
                        min_size=1, max_size=3),
                    frames=st.lists(host_arrays(dtypes=st.sampled_from([np.uint8, np.float32]),
                                                min_dims=2, max_dims=4, max_side=10),
                                    min_size=1, max_size=4)))
    size, batch, opts, frames = kw.values()
    pipe = outcome(cuflow.Pipeline, size, batch, **opts)
    if pipe is None:
        return False
    got = outcome(lambda: [host(b) for b in pipe.batches(frames)])
    if got is None:  # refused midway: the frames are counted
        assert pipe.frames_out + len(pipe.undelivered) == pipe.frames_in
        return False
    assert sum(len(b) for b in got) == len(frames) == pipe.frames_out
    for b in got:
        assert np.isfinite(b.astype(np.float64)).all()
    # the batches hold the frames in order, each as the image operator makes it alone
    o = pipe.options
    kw = o.kernel_kwargs()
    for f, want in zip(frames, (w for b in got for w in b)):
        one = cuflow.asarray(np.asarray(f))
        ref = image.letterbox(one, o.size, **kw)[0] if o.letterbox else \
            image.resize_normalize(one, o.size, **kw)
        np.testing.assert_array_equal(want, host(ref))
    return True


# ------------------------------------------------------------------ the ops of core
@st.composite
def fitting(draw, fn, a):
    """An ``other`` that makes ``fn(a, other)`` a valid call."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if fn in ("add", "concatenate"):
        shape = a.shape if fn == "add" or draw(st.booleans()) else (1, *a.shape[1:])
        return cuflow.asarray(rng.uniform(-300, 300, shape).astype(a.dtype))
    if fn == "sqrt":
        return cuflow.asarray(rng.uniform(0, 300, a.shape).astype(np.float32))
    if fn == "matmul":
        return cuflow.asarray(rng.uniform(-3, 3, (a.shape[-1], 2)).astype(a.dtype))
    if fn == "sum":
        return draw(st.integers(-a.ndim, a.ndim - 1))
    if fn == "reshape":
        return draw(st.sampled_from([(-1,), (a.size,), a.shape[::-1], (1, -1)]))
    if fn == "transpose":
        return tuple(draw(st.permutations(range(a.ndim))))
    if fn == "take":
        return cuflow.asarray(rng.integers(0, max(a.size, 1), 3)) if a.size else \
            cuflow.asarray(np.zeros(0, np.int64))
    return draw(st.sampled_from(["float32", np.int8, np.float16, bool]))  # astype


def _numpy_result(call):
    """NumPy's result of ``call``, or None where NumPy refuses."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return np.asarray(call())
        except Exception:
            return None


def _int(x) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_)


def _ints(v) -> bool:
    """An int, or a tuple or list of ints (not bools)."""
    return _int(v) or (isinstance(v, tuple | list) and all(map(_int, v)))


def _refused_on_purpose(fn, a, other, want) -> bool:
    """What cuflow refuses on purpose where NumPy computes (docs/errors.md): a result that is
    no number (NumPy's object arrays), a sequence or object where an array is meant
    (converted with ``asarray`` first, as CuPy has it), a bool where an int is meant,
    indices that are no integers, a shape or axes that are no ints or tuple of ints (a
    text, an array), a dtype that is no number's (a subarray dtype), another backend's
    array on the GPU."""
    if cuflow.get_backend().is_gpu and any(isinstance(v, np.ndarray) for v in (a, other)):
        return True
    if want.dtype.kind not in "biufc":
        return True
    arrays_meant = fn in ("add", "sqrt", "matmul", "concatenate", "take")
    if arrays_meant and not isinstance(other, cuflow.darray | np.ndarray | int | float |
                                       np.generic):
        return True
    if isinstance(other, bool | np.bool_) and fn in ("sum", "reshape", "transpose", "take"):
        return True
    if fn in ("reshape", "transpose", "sum") and not _ints(other) and not (
            other is None and fn != "reshape"):  # shapes and axes: ints, or tuples of ints
        return True
    if isinstance(other, tuple | list) and any(isinstance(v, bool | np.bool_) for v in other):
        return True
    if fn == "take" and np.asarray(host(other)).dtype.kind not in "iu":
        return True
    if fn == "astype":  # (a subarray dtype such as (float32, 7) casts to more dimensions)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dt = np.dtype(other)
        return dt.kind not in "biufc" or dt.subdtype is not None
    return False


@settings(FUZZ, phases=[Phase.generate], report_multiple_bugs=False)  # fails fast, no shrink
@given(fn=st.sampled_from(["add", "sqrt", "sum", "reshape", "matmul", "transpose", "take",
                           "concatenate", "astype"]),
       a=arrays(dtypes=st.sampled_from([np.float32, np.int64]), min_dims=1, max_dims=3),
       data=st.data())
def test_core_ops(fn, a, data):
    other = data.draw(st.one_of(fitting(fn, a), arrays(min_dims=0, max_dims=3), ANY_VALUE),
                      label="other")
    f = getattr(cuflow, fn)
    call = {"add": lambda: f(a, other), "sqrt": lambda: f(other), "sum": lambda: f(a, axis=other),
            "reshape": lambda: f(a, other), "matmul": lambda: f(a, other),
            "transpose": lambda: f(a, other), "take": lambda: f(a, other),
            "concatenate": lambda: f([a, other]), "astype": lambda: f(a, other)}[fn]
    ha, ho = host(a), host(other) if isinstance(other, cuflow.darray) else other
    reference = {
        "add": lambda: np.add(ha, ho), "sqrt": lambda: np.sqrt(ho),
        "sum": lambda: np.sum(ha, axis=ho), "reshape": lambda: np.reshape(ha, ho),
        "matmul": lambda: np.matmul(ha, ho), "transpose": lambda: np.transpose(ha, ho),
        # device indices past the end wrap on the GPU (checking them would synchronize);
        # host indices are checked
        "take": lambda: np.take(ha, ho, mode="wrap" if cuflow.get_backend().is_gpu
                                and isinstance(other, cuflow.darray) else "raise"),
        "concatenate": lambda: np.concatenate([ha, ho]), "astype": lambda: ha.astype(ho)}[fn]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            got = call()
        except cuflow.CuflowError as e:
            assert str(e)
            # a refusal is right where NumPy refuses too, or where cuflow's rules refuse
            want = _numpy_result(reference)
            if want is not None and not _refused_on_purpose(fn, a, other, want):
                pytest.fail(f"cuflow.{fn} refused arguments NumPy computes: {e}")
            return
        # a result must be NumPy's for the same arguments (on host copies); arguments
        # NumPy refuses have no correct result, so cuflow must refuse them too
        try:
            want = np.asarray(reference())
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
