"""CUDA graphs: record a function's GPU work once, replay it with one launch.

:func:`capture` has two forms:

* ``capture(fn, *example_inputs)`` returns a :class:`CapturedFunction`.  It
  copies the examples into static input buffers, calls ``fn`` eagerly ``warmup``
  times (once by default) on its own non-blocking stream (kernels compile, libraries
  set up their handles), then records one more call into a graph.  Calling the
  result copies new inputs into the static buffers, replays the graph and
  returns the static outputs.  ``capture(fn)`` without examples (or the
  :func:`graphed` decorator) captures on the first call.
* ``with capture() as g:`` records the block; ``g.replay()`` launches it on the
  current stream (or on ``stream=``), so it runs after the work queued there before it,
  as CuPy's ``Graph.launch`` and PyTorch's ``CUDAGraph.replay`` do.

Memory allocated while capturing belongs to the graph: its kernels read and
write those addresses on every replay, so a shared pool must never hand it to
another array.  Allocations made during capture therefore come from a pool
private to the graph (cuflow's pool when it is installed, else a private CuPy
``MemoryPool``), which lives as long as the graph and the arrays it returned.

Work a graph cannot record is refused with :class:`GraphCaptureError` naming
the operation and where it was called: host synchronization (``.item()``,
``float(x)``, ``asnumpy``), data-dependent shapes (boolean masks,
``nonzero``), and library calls CuPy cannot capture.  On the NumPy backend
there are no graphs: a captured function checks its calls' arguments and
results as on the GPU, then calls ``fn``.

Example
-------
>>> step = cuflow.graph.capture(lambda x: cuflow.tanh(x * 2) + 5, x0)   # doctest: +SKIP
>>> y = step(x1)     # one graph launch; y is the static output, overwritten next call
"""

from __future__ import annotations

import contextlib
import copy
import functools
import linecache
import os
import reprlib
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

import numpy

from . import memory
from ._checks import is_integer
from ._errors import ArgumentError, ArgumentTypeError, BackendError, CuflowError
from .core import as_cupy_stream, get_backend, runtime
from .core._streams import is_legacy

__all__ = ["CapturedFunction", "Graph", "GraphCaptureError", "capture", "graphed"]


class GraphCaptureError(CuflowError, RuntimeError):
    """``fn`` did something a CUDA graph cannot record (``__cause__`` is the CUDA error), or a
    captured function was called while a call of it was still running."""


class Graph:
    """A captured graph (CuPy's ``cupy.cuda.graph.Graph``) and its private memory.

    ``stream`` is the stream that captured it, kept as long as the graph: the memory pool
    watches the streams it lends memory on, and a destroyed stream's memory is reused only
    after a device synchronize.

    Made by :func:`capture` (the ``with`` block yields one) and held by a
    :class:`CapturedFunction` as its ``graph``; the recorded graph is set once the capture
    succeeds.

    Parameters
    ----------
    pool : cuflow.memory.Pool, cupy.cuda.MemoryPool or None
        Where the graph's private memory comes from: cuflow's pool when it is installed,
        else a CuPy ``MemoryPool`` of the graph's own; None on the NumPy backend.
    owner : int or None
        The id of the graph's private memory in cuflow's pool (``pool.begin_private``'s
        result), which :meth:`close` releases; None with a CuPy ``MemoryPool`` or no pool.
    stream : cupy.cuda.Stream or None
        The stream that captured the graph, kept as the ``stream`` attribute; None on the
        NumPy backend.
    """

    def __init__(self, pool: Any, owner: Any, stream: Any) -> None:
        self._graph: Any = None
        self._pool = pool      # cuflow's Pool, or a private cupy MemoryPool
        self._owner = owner    # the private pool's id in cuflow's Pool
        self.stream = stream

    def replay(self, *, stream: Any = None) -> None:
        """Launch the graph on ``stream`` (default: the current stream).

        Parameters
        ----------
        stream : cuflow.Stream, optional
            The stream the launch is queued on; the current stream when omitted.

        Notes
        -----
        Stream semantics: asynchronous; one graph launch queued on ``stream`` or the
        current stream, after the work queued there before it (the inputs the graph reads),
        and before the work queued after it (what reads its outputs).  Not on the stream
        that captured it, which nothing orders with the caller's work.
        """
        s = as_cupy_stream(stream, "graph.Graph.replay")  # (checked on every backend)
        if self._graph is None:
            raise BackendError("cuflow.graph: nothing to replay (the capture failed, the graph "
                               "was closed, or the NumPy backend has no graphs)")
        self._graph.launch(stream=s)

    launch = replay

    def close(self) -> None:
        """Drop the graph; its private memory goes back once no array uses it."""
        self._graph = None
        if self._owner is not None:
            self._pool.close_private(self._owner)
            self._owner = None
        self._pool = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


@contextlib.contextmanager
def _private_memory(stream: Any):
    """Route allocations made on ``stream`` (this thread) to memory private to one graph."""
    if memory._INSTALLED:
        pool = memory.get_pool()
        owner = pool.begin_private(stream.ptr)
        try:
            yield pool, owner
        finally:
            pool.end_private(stream.ptr)
        return
    import cupy  # noqa: PLC0415  (optional dependency)

    private = cupy.cuda.MemoryPool()
    with cupy.cuda.using_allocator(private.malloc):
        yield private, None


@contextlib.contextmanager
def _capture_block(stream: Any = None, _what: str = "the block"):
    b = get_backend()
    if not b.is_gpu:
        yield Graph(None, None, None)
        return
    s = (b.xp.cuda.Stream(non_blocking=True) if stream is None
         else as_cupy_stream(stream, "graph.capture"))
    with _private_memory(s) as (pool, owner):
        g = Graph(pool, owner, s)
        ok = False
        try:
            with s:
                s.begin_capture()
                try:
                    yield g
                    ok = True
                except BaseException as e:
                    _refuse(e, _what)
                    raise
                finally:
                    try:
                        graph = s.end_capture()
                    except b.cuda_errors as e:  # the capture was invalidated
                        if ok:
                            raise GraphCaptureError(
                                f"cuflow.graph.capture: CUDA invalidated the capture of {_what}: "
                                f"{e}") from e
                        graph = None
            g._graph = graph if ok else None
        finally:
            if not ok:
                g.close()


def _user_frame(tb: Any) -> tuple[str, str]:
    """(the call in the caller's code, the library function it reached) from a traceback."""
    pkg_dirs = tuple(d + os.sep for d in _library_dirs())
    frames = traceback.extract_tb(tb)
    last_user = None
    callee = ""
    for i, f in enumerate(frames):
        if not f.filename.startswith(pkg_dirs) and not f.filename.endswith((".pyx", ".pxd")) \
                and os.path.basename(f.filename) != "contextlib.py":
            last_user = i
    if last_user is None:
        return "", ""
    f = frames[last_user]
    line = (f.line or linecache.getline(f.filename, f.lineno)).strip()
    if last_user + 1 < len(frames):
        callee = frames[last_user + 1].name
    return f"`{line}` ({os.path.basename(f.filename)}:{f.lineno}, in {f.name})", callee


# cuflow's own package directory (this module's), whose frames are not the caller's code
_CUFLOW_DIR = os.path.dirname(os.path.abspath(__file__))


def _library_dirs() -> list[str]:
    """Directories of the libraries between the caller's code and a CUDA error."""
    dirs = [_CUFLOW_DIR, os.path.dirname(numpy.__file__)]
    with contextlib.suppress(ImportError):
        import cupy  # noqa: PLC0415  (optional dependency)
        import cupy_backends  # noqa: PLC0415  (optional dependency)

        dirs += [os.path.dirname(cupy.__file__), os.path.dirname(cupy_backends.__file__)]
    return dirs


_CAPTURE_ERRORS = ("StreamCapture", "capturing", "capture")


def _refuse(e: BaseException, what: str) -> None:
    """Turn a CUDA error caused by capturing into a GraphCaptureError naming the operation."""
    if isinstance(e, GraphCaptureError):
        return
    cuda_errors = get_backend().cuda_errors
    cause = e if isinstance(e, cuda_errors) else e.__cause__
    text = f"{type(cause).__name__}: {cause}" if cause is not None else f"{type(e).__name__}: {e}"
    if not isinstance(cause, cuda_errors) and not any(k in text for k in _CAPTURE_ERRORS):
        return
    where, callee = _user_frame(e.__traceback__)
    op = f"{where} (reached {callee})" if callee else where or "an operation"
    raise GraphCaptureError(
        f"cuflow.graph.capture: {op} cannot be recorded into a CUDA graph while capturing "
        f"{what}: it synchronizes with the host, has a data-dependent shape, or calls a "
        f"library that cannot be captured ({text}). Move it out of the captured function.") \
        from e


def _check_outputs(out: Any, nd: type, name: str) -> None:
    items = out if isinstance(out, tuple | list) else (out,)
    for x in items:
        if x is not None and not isinstance(x, nd):
            raise GraphCaptureError(
                f"cuflow.graph.capture: {name} must return arrays (or a tuple/list of "
                f"arrays); got {type(x).__name__}, which a graph replay could not update")


def _same_constant(x: Any, static: Any) -> bool:
    """Whether ``x`` is the constant ``static`` a graph recorded: the same object, or a value
    of the same type that equals it (NaN equals NaN); an array (whose ``==`` is no bool)
    never is one."""
    if x is static:
        return True
    if type(x) is not type(static):
        return False
    try:
        eq = x == static
    except Exception:  # (a value whose comparison raises is not the recorded one)
        return False
    if not isinstance(eq, bool | numpy.bool_):
        return False
    if eq and isinstance(x, float | complex | numpy.inexact):
        # -0.0 == 0.0, but not as a divisor: zeros of other signs are other constants
        a = numpy.asarray([x, static])
        if a.dtype.kind == "c":
            a = numpy.stack([a.real, a.imag], 1)
        return bool((numpy.signbit(a[0]) == numpy.signbit(a[1])).all())
    return bool(eq) or (x != x and static != static)


class CapturedFunction:
    """``fn`` recorded into a CUDA graph with static inputs and outputs.

    Call it with arrays of the captured shapes and dtypes (non-array
    arguments must equal the captured ones).  Each call copies the inputs
    into the static input buffers, replays the graph, and returns the static
    outputs: the same arrays every call, overwritten by the next call (copy
    them to keep a result).  Made by :func:`capture` and :func:`graphed`.

    A non-array argument's value is recorded into the graph: the same object is taken as
    the same value, so a list or a configuration object changed after the capture replays
    its old value on the GPU (capture again instead).  Arguments are positional: the graph
    records them in order, and a keyword argument is refused.

    Thread safety: the static buffers are shared by every caller, so one thread at a time
    calls a captured function and reads its outputs.  A call (or :meth:`replay`,
    :meth:`close`) made while another call of the same captured function is running, in
    another thread or inside ``fn``, raises :class:`GraphCaptureError` rather than
    overwriting that call's inputs.  Threads that share one serialize their calls with a
    lock of their own, held until they have read (or copied) the outputs; or each thread
    captures its own.  A copy (``copy.copy``, ``copy.deepcopy``) or an unpickled captured
    function is one of its own, not captured yet: it captures its graph at its first call.

    Parameters
    ----------
    fn : callable
        Takes arrays (and constants) and returns an array, a tuple/list of arrays, or None;
        its GPU work queued on the current stream.
    example_inputs : tuple, optional
        ``fn``'s positional arguments, arrays of the shapes and dtypes of later calls:
        the capture happens here.  None captures on the first call, with its arguments.
    warmup : int, default 1
        Eager calls of ``fn`` on the static inputs before the capture (an int >= 0, not a
        bool); on the NumPy backend, which has no graphs, there are none.

    Raises
    ------
    cuflow.ArgumentTypeError
        ``fn`` is not callable, ``warmup`` is not an int, or ``example_inputs`` is not a
        tuple or list; at a call, another count of arguments than captured, or a keyword
        argument other than ``stream=``.
    cuflow.ArgumentError
        ``warmup`` is negative; at a call, an argument unlike the captured one (not an
        array of the captured shape and dtype, or another recorded value).
    GraphCaptureError
        With ``example_inputs``: ``fn`` does something a graph cannot record (the message
        names it; on the GPU backend), or returns something other than arrays.  At a call:
        another call of this captured function is still running.

    Notes
    -----
    Stream semantics: asynchronous; the input copies and the graph launch are
    queued on ``stream=`` of the call (default: the current stream), in that
    order, so the outputs are ready for later work on that stream.  The capture
    runs on a stream of its own, after the work queued so far on the current
    stream (on the call's stream, for a capture at the first call); that stream,
    and each later call's stream until the capture's work is done, wait for it,
    so a call never overwrites the static inputs before the capture's own copies
    of the examples.
    """

    def __init__(self, fn: Callable[..., Any], example_inputs: tuple[Any, ...] | None = None, *,
                 warmup: int = 1) -> None:
        if not callable(fn):
            raise ArgumentTypeError(f"cuflow.graph.capture: fn must be callable, got "
                                    f"{type(fn).__name__}")
        if not is_integer(warmup):
            raise ArgumentTypeError(f"cuflow.graph.capture: warmup must be an int >= 0, got "
                                    f"{type(warmup).__name__} {warmup!r}")
        if warmup < 0:
            raise ArgumentError(f"cuflow.graph.capture: warmup must be an int >= 0, got {warmup!r}")
        warmup = int(warmup)
        self.fn = fn
        self._warmup = warmup
        self._name = getattr(fn, "__qualname__", repr(fn))
        self.graph: Graph | None = None
        self.inputs: tuple[Any, ...] = ()
        self.outputs: Any = None
        self._captured = False
        self._ready: Any = None  # the capture stream's work, while it may be incomplete
        # taken by the running call, replay or close; a second one at once is refused, not
        # made to wait: waiting would not make two threads' calls safe, since on the GPU the
        # host's order does not order the two calls' streams (the second copy can overwrite
        # a static input the first replay has not read yet), and the outputs stay shared
        self._busy = threading.Lock()
        functools.update_wrapper(self, fn, updated=())
        if example_inputs is not None:
            if not isinstance(example_inputs, tuple | list):
                raise ArgumentTypeError(
                    f"cuflow.graph.CapturedFunction: example_inputs must be a tuple of fn's "
                    f"arguments (one array is (x,)), or None, got "
                    f"{type(example_inputs).__name__}")
            self._capture(tuple(example_inputs))
            if not get_backend().is_gpu:
                # the static outputs now, as a GPU capture makes them (code that keeps
                # .outputs and calls replay() reads the same on both backends)
                try:
                    self._run_eagerly()
                except BaseException:
                    self.inputs, self._captured = (), False
                    raise

    def _capture(self, examples: tuple[Any, ...], after: Any = None) -> None:
        """Capture on a new stream ordered after ``after`` (a CuPy stream, where the examples
        were made; None: the current one), which then waits for the capture's work."""
        # (captured only once it all succeeded: a capture that raised is tried again by the
        # next call, not left half made)
        b = get_backend()
        if not b.is_gpu:  # no graph: static inputs as on the GPU, checked, then fn runs
            self.inputs = tuple(runtime().wrap(x.copy()) if isinstance(x, b.ndarray) else x
                                for x in examples)
            self._captured = True
            return
        base = b.xp.cuda.get_current_stream() if after is None else after
        s = b.xp.cuda.Stream(non_blocking=True)
        s.wait_event(base.record())  # the examples are ready
        with s:
            # Held for the graph's life, so an ordinary allocation is safe.
            statics = tuple(runtime().wrap(x.copy()) if isinstance(x, b.ndarray) else x
                            for x in examples)
            for _ in range(self._warmup):
                _check_outputs(self.fn(*statics), b.ndarray, self._name)
        with _capture_block(stream=s, _what=self._name) as g:
            out = self.fn(*statics)
        _check_outputs(out, b.ndarray, self._name)
        # The copies of the examples into the static inputs and the warm-up calls are still
        # queued on s: the examples' stream waits for them here (its later writes to the
        # examples, and calls on it), and a call on another stream while they may run (_wait)
        ready = s.record()
        base.wait_event(ready)
        self.graph, self.inputs, self.outputs = g, statics, out
        self._ready = ready
        self._captured = True

    def _wait(self, s: Any) -> None:
        """Order CuPy stream ``s`` after the capture's own work, until that is done."""
        ready = self._ready
        if ready is not None:
            if ready.done:
                self._ready = None
            else:
                s.wait_event(ready)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        """As a method: one captured function per instance (its graph records that
        instance's ``self``), kept in the instance's ``__dict__``."""
        if obj is None:
            return self
        d = getattr(obj, "__dict__", None)
        if d is None:
            raise ArgumentTypeError(f"cuflow.graph: {self._name} is graphed as a method of "
                                    f"{type(obj).__name__}, whose instances have no __dict__ "
                                    "to keep a graph per instance in")
        key = f"_cuflow_graph_{id(self)}"
        bound = d.get(key)
        # a copy of the instance (copy.copy copies its __dict__) captures its own: the
        # graph found there recorded the original's self
        if bound is None or bound.fn.args[0] is not obj:
            bound = d[key] = CapturedFunction(functools.partial(self.fn, obj),
                                              warmup=self._warmup)
            functools.update_wrapper(bound, self.fn, updated=())
            bound._name = self._name
            bound._bound_attr = getattr(self, "_attr", None)
        return bound

    def __set_name__(self, owner: type, name: str) -> None:
        self._attr = name  # as a method: the attribute it is found by (see __reduce__)

    def __copy__(self) -> CapturedFunction:
        # a copy is not captured yet and captures its own graph at its first call: a graph,
        # its static buffers and the call guard belong to one captured function
        return _uncaptured(self.fn, self._warmup, self._name, self)

    def __deepcopy__(self, memo: dict) -> CapturedFunction:
        return _uncaptured(copy.deepcopy(self.fn, memo), self._warmup, self._name, self)

    def __reduce__(self) -> Any:
        # pickled: a graph cannot cross processes.  An instance's is its instance's attribute
        # again; a module's (a decorated function, which its name now finds) is pickled by
        # name, as functions are; any other, a captured function of the same fn
        attr = getattr(self, "_bound_attr", None)
        if attr is not None:
            return (getattr, (self.fn.args[0], attr))
        module = sys.modules.get(getattr(self, "__module__", None) or "")
        if module is not None and getattr(module, getattr(self, "__qualname__", ""),
                                          None) is self:
            return self.__qualname__
        return (_uncaptured, (self.fn, self._warmup, self._name))

    def _in_use(self, what: str) -> GraphCaptureError:
        """The error of a call, replay or close that found ``_busy`` taken."""
        return GraphCaptureError(
            f"cuflow.graph: cannot {what} {self._name} while a call of it is still running "
            f"(in another thread, or inside fn): its static inputs and outputs are shared "
            f"by every call, so one call at a time; serialize the threads' calls with a lock "
            f"held until the outputs are read, or capture one per thread")

    def __call__(self, *inputs: Any, stream: Any = None, **kwargs: Any) -> Any:
        """Copy ``inputs`` into the static inputs and replay (captured on the first call
        where no example inputs were given); the static outputs, see the class docstring."""
        if kwargs:
            raise ArgumentTypeError(
                f"cuflow.graph: {self._name} takes its arguments positionally (the graph "
                f"records them in order; stream= is the only keyword of a call), got keyword "
                f"argument(s) {', '.join(kwargs)}")
        if not self._busy.acquire(blocking=False):
            raise self._in_use("call")
        try:
            b = get_backend()
            s = as_cupy_stream(stream, f"graph.CapturedFunction({self._name})")
            if not self._captured:
                self._capture(inputs, s if stream is not None else None)
                if not b.is_gpu:
                    # the NumPy backend's capture runs fn only here: a first call that raised
                    # is not a capture either, as on the GPU (the next call captures again)
                    try:
                        return self._run_eagerly()
                    except BaseException:
                        self.inputs, self._captured = (), False
                        raise
            self._check(inputs, b.ndarray)
            if b.is_gpu:
                # (before the copies: the capture's copies of the examples come first)
                self._wait(s)
            for x, static in zip(inputs, self.inputs, strict=True):
                if isinstance(static, b.ndarray) and x is not static:
                    with contextlib.nullcontext() if s is None else s:  # (None: NumPy's)
                        b.xp.copyto(static, x)
            if not b.is_gpu:
                return self._run_eagerly()
            self.graph.replay(stream=s)
            return self.outputs
        finally:
            self._busy.release()

    def _run_eagerly(self) -> Any:
        """The NumPy backend's replay: ``fn`` on the static inputs, its results written into
        the outputs of the first run, as a graph's replay writes its static outputs (code
        that keeps them sees the same on both backends)."""
        out = self.fn(*self.inputs)
        nd = get_backend().ndarray
        _check_outputs(out, nd, self._name)
        old = self.outputs
        pairs = (list(zip(out, old)) if isinstance(out, tuple | list)
                 and type(old) is type(out) and len(old) == len(out) else [(out, old)])
        if old is None or not all(
                (n is None and o is None) or (isinstance(n, nd) and isinstance(o, nd)
                                              and n.shape == o.shape and n.dtype == o.dtype)
                for n, o in pairs):
            self.outputs = out
            return out
        for n, o in pairs:
            if o is not None:
                o[...] = n
        return old

    def _check(self, inputs: tuple[Any, ...], nd: type) -> None:
        """``inputs`` are what the graph was captured for (on every backend, so code that
        runs on the NumPy backend runs on the GPU)."""
        if len(inputs) != len(self.inputs):
            raise ArgumentTypeError(f"cuflow.graph: {self._name} was captured with "
                                    f"{len(self.inputs)} argument(s), called with {len(inputs)}")
        for i, (x, static) in enumerate(zip(inputs, self.inputs, strict=True)):
            if not isinstance(static, nd):
                if not _same_constant(x, static):
                    raise ArgumentError(
                        f"cuflow.graph: argument {i} of {self._name} is not an array, so its "
                        f"value was recorded into the graph ({static!r}); got {x!r}. Capture "
                        "again for another value")
                continue
            if not isinstance(x, nd) or x.shape != static.shape or x.dtype != static.dtype:
                got = (f"{type(x).__name__} {getattr(x, 'shape', '')} "
                       f"{getattr(x, 'dtype', '')}").strip()
                raise ArgumentError(
                    f"cuflow.graph: argument {i} of {self._name} must be an array of shape "
                    f"{static.shape} and dtype {static.dtype} (the captured example); got {got}")

    def replay(self, *, stream: Any = None) -> Any:
        """Replay on the current static inputs (no copies) and return the static outputs
        (on the NumPy backend: ``fn`` of the last inputs).

        Parameters
        ----------
        stream : cuflow.Stream, optional
            The stream the launch is queued on; the current stream when omitted.

        Returns
        -------
        darray, tuple of darrays or None
            The static outputs, overwritten by the next call or replay.

        Raises
        ------
        cuflow.BackendError
            There is no graph: not captured yet, or closed.
        GraphCaptureError
            A call of this captured function is still running (see the class docstring).

        Notes
        -----
        Stream semantics: asynchronous; one graph launch queued on ``stream`` or the
        current stream.
        """
        if not self._busy.acquire(blocking=False):
            raise self._in_use("replay")
        try:
            b = get_backend()
            s = as_cupy_stream(stream, f"graph.CapturedFunction({self._name}).replay")
            if not b.is_gpu and self._captured:
                return self._run_eagerly()
            if self.graph is None:
                raise BackendError(f"cuflow.graph: {self._name} has no graph to replay: it was "
                                   "not captured yet or was closed (call it once, which "
                                   "captures it, or pass example inputs to capture)")
            self._wait(s)
            self.graph.replay(stream=s)
            return self.outputs
        finally:
            self._busy.release()

    def close(self) -> None:
        """Release the graph (its memory goes back once no returned array uses it).

        Raises
        ------
        GraphCaptureError
            A call of this captured function is still running (see the class docstring).
        """
        if not self._busy.acquire(blocking=False):
            raise self._in_use("close")
        try:
            if self.graph is not None:
                self.graph.close()
            self.graph, self.inputs, self.outputs = None, (), None
            self._ready = None
            self._captured = False
        finally:
            self._busy.release()


def _uncaptured(fn: Callable[..., Any], warmup: int, name: str,
                like: CapturedFunction | None = None) -> CapturedFunction:
    """A captured function of ``fn`` not captured yet (a copy's, an unpickled one's), found
    by the same attribute as ``like`` where that is an instance's."""
    c = CapturedFunction(fn, warmup=warmup)
    c._name = name
    if like is not None and getattr(like, "_bound_attr", None) is not None:
        c._bound_attr = like._bound_attr
    return c


def capture(fn: Callable[..., Any] | None = None, *example_inputs: Any, stream: Any = None,
            warmup: int = 1) -> Any:
    """Record ``fn``'s GPU work into a CUDA graph (or, without ``fn``, a ``with`` block).

    Parameters
    ----------
    fn : callable, optional
        Takes arrays (and constants) and returns an array, a tuple/list of
        arrays, or None.  Its GPU work must be queued on the current stream.
    *example_inputs
        Arrays of the shapes and dtypes of later calls.  Without them the
        capture happens on the first call.
    stream : Stream, optional
        Block form only: the capturing stream (default: a new non-blocking one).  Replays
        run on the current stream, or on ``replay(stream=)``, not on this one.
    warmup : int, default 1
        Eager calls before capturing (function form only: a block runs once, as written).

    Returns
    -------
    CapturedFunction, or a context manager yielding a :class:`Graph`.

    Raises
    ------
    GraphCaptureError
        ``fn`` does something a graph cannot record (the message names it).
    """
    if fn is None:
        if example_inputs:
            raise ArgumentError(f"cuflow.graph.capture: example inputs are for a captured "
                                f"function, and fn is None (the block form takes none), got "
                                f"{len(example_inputs)} of them")
        if not is_integer(warmup):
            raise ArgumentTypeError(f"cuflow.graph.capture: warmup= is for a captured function "
                                    f"(an int >= 0); a block (with capture():) is captured as "
                                    f"it runs, got {type(warmup).__name__} "
                                    f"{reprlib.repr(warmup)}")
        if warmup != 1:
            raise ArgumentError(f"cuflow.graph.capture: warmup= is for a captured function; a "
                                f"block (with capture():) is captured as it runs, got "
                                f"warmup={warmup!r}")
        as_cupy_stream(stream, "graph.capture")  # (checked here, on every backend)
        if stream is not None and is_legacy(stream):
            raise GraphCaptureError(
                f"cuflow.graph.capture: a block is captured on a non-default stream (CUDA "
                f"cannot capture on the legacy default stream): leave stream= out for a new "
                f"one, or pass stream=cuflow.Stream() or cuflow.current_stream() inside `with "
                f"cuflow.Stream():`; got {type(stream).__name__} {reprlib.repr(stream)}, the "
                f"legacy default stream")
        return _capture_block(stream=stream)
    if stream is not None:
        raise ArgumentError(f"cuflow.graph.capture: stream= is for the block form (with "
                            f"capture(stream=s)), and fn is given: a captured function's calls "
                            f"take stream=, got stream={reprlib.repr(stream)}")
    return CapturedFunction(fn, example_inputs if example_inputs else None, warmup=warmup)


def graphed(fn: Callable[..., Any] | None = None, *, warmup: int = 1) -> Any:
    """Decorator: ``fn`` is captured on its first call and replayed on the next ones.

    Parameters
    ----------
    fn : callable, optional
        The function, as :func:`capture` takes it; left out, ``graphed`` returns a decorator
        (``@graphed(warmup=2)``).
    warmup : int, default 1
        Eager calls before the capture, as :func:`capture`'s.

    Returns
    -------
    CapturedFunction or callable
        The captured function (or, without ``fn``, a decorator that makes it).

    Notes
    -----
    Stream semantics: as :class:`CapturedFunction`'s.
    """
    if fn is None:
        return functools.partial(graphed, warmup=warmup)
    return CapturedFunction(fn, None, warmup=warmup)
