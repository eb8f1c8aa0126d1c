"""Batch frames on the GPU into preallocated buffers (Dolphin's ``Bufferizer``, fixed).

A :class:`Bufferizer` owns ``n_buffers`` device buffers of shape
``(buffer_size, *shape)``.  Elements are appended by copy (``append``) or
written in place by a kernel (``next_slot`` + ``commit``); when the active
buffer is full it is handed to a consumer with :meth:`Bufferizer.take`, and
with ``n_buffers=2`` appends go on into the other buffer while the consumer
works.  Compared with Dolphin's class:

* ``element_nbytes`` is bytes (Dolphin returned an element count);
* appends are all-or-nothing: an append that does not fit raises
  ``BufferError`` before anything is copied or counted;
* shape and dtype are checked on every path, the batched one included;
* all copies are queued on the buffer's stream, ordered after the producer's
  stream, and a consumer on another stream is ordered after them by an event
  (``take(stream=)``), never by a host synchronization;
* a buffer that was handed out is not written again before its consumer's
  work is done (``release(stream=)`` records that point on the consumer's stream);
* every call is all-or-nothing: when a hook, a copy or an allocation raises,
  the Bufferizer is as it was before the call, or, when the hook had changed it
  itself (flushed or took the batch, say), as the hook left it (see
  :class:`Bufferizer`, "Warnings").
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy

from .._checks import is_integer
from .._errors import ArgumentError, ArgumentTypeError, CuflowError, DeviceError
from ..core import (Device, Event, Stream, as_cupy_stream, as_darray, as_stream, copy, empty,
                    get_backend)
from ..core._contract import parse_dtype
from ..core._creation import check_fill_value
from ..memory import record_stream

_MEMCPY_DEFAULT = 4  # cudaMemcpyKind: the pointers say where (as CuPy's copies pass)

__all__ = ["Bufferizer", "BufferizerError", "BufferizerHookError", "BufferizerStateError"]

Hook = Callable[["Bufferizer"], Any]

#: most buffers a Bufferizer rotates through
MAX_BUFFERS = 64


class BufferizerError(CuflowError, ValueError):
    """An element does not match the Bufferizer (shape, dtype, backend)."""


class BufferizerStateError(CuflowError, BufferError):
    """The Bufferizer's state does not allow the call: the elements do not fit, the buffer
    is empty, or it was taken and not released."""


class BufferizerHookError(CuflowError, RuntimeError):
    """A hook raised; the call was undone (``__cause__`` holds the hook's exception)."""


def _on_own_device(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``method`` with the Bufferizer's device current (a no-op with one device)."""
    @functools.wraps(method)
    def run(self: Bufferizer, *args: Any, **kwargs: Any) -> Any:
        if not self._multi or get_backend().current_device() == self._device:
            return method(self, *args, **kwargs)
        with Device(self._device):
            return method(self, *args, **kwargs)
    return run


def _stream_arg(name: str, resolve: Callable[[Any], Any], stream: Any) -> Any:
    """``resolve(stream)``, a refusal naming the method."""
    try:
        return resolve(stream)
    except ArgumentTypeError as e:
        raise ArgumentTypeError(f"cuflow.Bufferizer.{name}: {e}") from None


def _producer(name: str, stream: Any) -> Any:
    """The producer's ``stream=`` as a CuPy stream (None on the NumPy backend), checked
    before anything else: the NumPy backend would not otherwise look at it."""
    return _stream_arg(name, as_cupy_stream, stream)


def _check_hook(name: str, hook: Any) -> Hook | None:
    if hook is not None and not callable(hook):
        raise ArgumentTypeError(f"Bufferizer: {name} must be callable or None, got "
                                f"{type(hook).__name__}")
    return hook


def _run_hook(name: str, hook: Hook, buf: Bufferizer, call: str, mark: int,
              undo: Callable[[], None], undone: str) -> None:
    """``hook(buf)``; if it raises, ``undo()`` the call, and an exception becomes a
    :class:`BufferizerHookError` saying what was undone.

    ``mark`` is the Bufferizer's change count once the call made its change.  A hook that
    changed the Bufferizer itself before raising (an append, ``flush``, ``take``, ``reset``
    or ``allocate``) moved it on: undoing the call on top of that would un-count elements
    the hook already flushed or took (a negative length) or drop the hook's own, so the
    Bufferizer is left as the hook left it.  ``KeyboardInterrupt`` and the other
    ``BaseException`` are undone the same way and re-raised as they are.
    """
    try:
        hook(buf)
    except BaseException as e:
        if buf._changes == mark:
            undo()
        else:
            undone = (f"a hook changed the Bufferizer itself (an append, flush, take, reset or "
                      f"allocate of its own), so the call was not undone: it is as the hook "
                      f"left it ({len(buf)} element(s))")
        if not isinstance(e, Exception):
            raise
        raise BufferizerHookError(f"Bufferizer.{call}: {name} raised {type(e).__name__}: {e}; "
                                  f"{undone}") from e


class Bufferizer:
    """Preallocated GPU buffers that collect elements into batches.

    Parameters
    ----------
    shape : tuple of int
        Shape of one element.
    buffer_size : int
        Elements per buffer (the batch size).
    dtype : dtype
        Element dtype (required; None is refused); appended elements must have
        exactly this dtype.
    stream : Stream, optional
        Stream of every copy and fill of the buffer.  Default: a new
        non-blocking stream owned by the Bufferizer (cuflow's ``Stream``, a
        CuPy or PyTorch stream, or anything with ``__cuda_stream__``).
    flush_hook, allocate_hook, append_one_hook, append_multiple_hook, buffer_full_hook : callable, optional
        Called with the Bufferizer as only argument: ``flush_hook`` in
        :meth:`flush`, once the Bufferizer is empty and before the fill is
        queued; ``allocate_hook`` at the end of :meth:`allocate` (not for the
        allocation made by the constructor); ``append_one_hook``
        after one element was appended (:meth:`append_one`, :meth:`commit`
        of one slot); ``append_multiple_hook`` after several were appended at
        once (:meth:`append_multiple`); ``buffer_full_hook`` after any append
        that filled the buffer, after the append hook.
    n_buffers : int, default 1
        Buffers to rotate through, at most :data:`MAX_BUFFERS`.  With 2, :meth:`take` hands
        out the full buffer and appends continue in the other one.

    Warnings
    --------
    Every call is all-or-nothing.  A call that raises leaves the Bufferizer
    as it was before it: the same length, active buffer and taken buffers.

    * An append that does not fit, ``take`` of an empty buffer and a write to
      a buffer taken and not released raise :class:`BufferizerStateError`
      (also a ``BufferError``) before anything is copied or counted.
    * An exception in a hook raises :class:`BufferizerHookError` (also a
      ``RuntimeError``), the hook's exception as ``__cause__``, after undoing
      the call; ``KeyboardInterrupt`` is undone the same way and re-raised as
      it is.  Per hook:

      - ``append_one_hook`` / ``append_multiple_hook``: the element(s) are
        not counted (``len`` as before); their copy may have been queued into
        the free slots, which the next append overwrites.  A retry appends
        them once.
      - ``buffer_full_hook``: as above; the append hook that ran before it is
        not undone (its own effects are the caller's), so a retry calls it again.
      - ``flush_hook``: it runs when the Bufferizer is empty, before the fill
        is queued; if it raises, nothing is filled and the elements are kept.
      - ``allocate_hook``: it runs with the new buffers in place; if it raises,
        the old buffers, length and taken buffers come back and the new
        buffers are freed.
      - any hook that changed the Bufferizer itself before raising (an append,
        ``flush``, ``take``, ``reset`` or ``allocate`` of its own, such as a
        ``buffer_full_hook`` that runs the model and flushes): the call is not
        undone on top of that, and the Bufferizer is left as the hook left
        it, never with a negative length.  What the hook flushed or took, the
        call's own elements included, is not put back (a retry appends them
        again); the message says so.

    * A failing copy or allocation (:class:`cuflow.OutOfMemoryError`,
      :class:`cuflow.CudaError`) raises before the element is counted, or
      before the old buffers are replaced.

    Notes
    -----
    Stream semantics: appends, ``flush`` and ``allocate`` are asynchronous
    and queued on the buffer's stream, which first waits for the producer's
    stream (``stream=`` of the append, default the current stream).  Hooks
    run on the host when the work has been queued, not when it is done.
    The buffers are allocated on the buffer's stream, so the memory pool
    reuses their memory only after the work queued there.
    """

    def __init__(self, shape: Sequence[int], buffer_size: int, dtype: Any,
                 stream: Any = None, flush_hook: Hook | None = None,
                 allocate_hook: Hook | None = None, append_one_hook: Hook | None = None,
                 append_multiple_hook: Hook | None = None,
                 buffer_full_hook: Hook | None = None, *, n_buffers: int = 1) -> None:
        dims = shape if isinstance(shape, Sequence) else (shape,)
        if isinstance(shape, str | bytes) or not all(
                is_integer(d) for d in dims):
            raise ArgumentTypeError(f"Bufferizer: shape must be a tuple of ints, got {shape!r}")
        shape = tuple(int(d) for d in dims)
        if any(d < 0 for d in shape):
            raise ArgumentError(f"Bufferizer: shape must be non-negative, got {shape}")
        for name, v, lo in (("buffer_size", buffer_size, 1), ("n_buffers", n_buffers, 1)):
            if not is_integer(v):
                raise ArgumentTypeError(f"Bufferizer: {name} must be an int >= {lo}, got {v!r}")
            if v < lo:
                raise ArgumentError(f"Bufferizer: {name} must be an int >= {lo}, got {v!r}")
        if n_buffers > MAX_BUFFERS:  # (checked before a buffer is made: each is an allocation)
            raise ArgumentError(f"Bufferizer: n_buffers must be at most {MAX_BUFFERS} (a "
                                f"consumer holds one buffer while the others fill), got "
                                f"{n_buffers!r}")
        if dtype is None:  # (numpy.dtype(None) is float64: the dtype has no default)
            raise ArgumentTypeError("Bufferizer: dtype must be a NumPy dtype, got None")
        if parse_dtype(dtype) is None:
            raise ArgumentTypeError(f"Bufferizer: dtype must be a NumPy dtype, got {dtype!r}")
        rt = get_backend()
        self._device = rt.current_device()  # buffers, stream and events live here
        self._multi = rt.multi
        self._shape = shape
        self._len = int(buffer_size)
        self._dtype = numpy.dtype(dtype)
        self._n_buffers = int(n_buffers)
        self._stream = as_stream(stream, "Bufferizer") if stream is not None else \
            Stream(non_blocking=True)
        self._element_nbytes = math.prod(shape) * self._dtype.itemsize
        # CuPy's CUDA runtime, for the appends' copies and events (None on the NumPy backend)
        self._runtime = rt.xp.cuda.runtime if rt.is_gpu else None
        self._flush_hook: Hook | None = None
        self._allocate_hook: Hook | None = None
        self._append_one_hook = _check_hook("append_one_hook", append_one_hook)
        self._append_multiple_hook = _check_hook("append_multiple_hook", append_multiple_hook)
        self._buffer_full_hook = _check_hook("buffer_full_hook", buffer_full_hook)
        self._buffers: list[Any] = []
        self._active = self._n = 0
        # Counts the changes of the active buffer's contents (appends, flush, take, reset,
        # allocate): a hook that raises is undone only if it did not change them itself.
        self._changes = 0
        self._freed: list[Event | None] = []
        self._taken: list[bool] = []
        self._stale: list[Any] = []  # taken buffers allocate() replaced, until released
        self._producer_done = Event(timing=False)
        self._producer_done_ptr = self._producer_done.ptr  # (the event lives as long)
        self._slot_ready = Event(timing=False)  # (one reused event, no allocation per slot)
        self.allocate()
        self._flush_hook = _check_hook("flush_hook", flush_hook)
        self._allocate_hook = _check_hook("allocate_hook", allocate_hook)

    # ------------------------------------------------------------------ memory
    @_on_own_device
    def allocate(self) -> None:
        """(Re)allocate the buffers, zero them and empty the Bufferizer.

        Fires ``allocate_hook`` (not for the constructor's allocation); the
        zeroing does not fire ``flush_hook``.  Buffers handed out earlier by
        :meth:`take` keep their old memory.  If the allocation or the hook
        raises, the old buffers stay in place (see "Warnings" in the class docstring).

        Notes
        -----
        Stream semantics: the zeroing is queued on the buffer's stream, after
        the released consumers' work on the old buffers.
        """
        full = (self._len, *self._shape)
        bufs = []
        for _ in range(self._n_buffers):
            a = empty(full, dtype=self._dtype, stream=self._stream)
            self._fill(a, 0)
            bufs.append(a)
        # The old buffers go back to the pool on the buffer's stream: order it after their
        # released consumers first, so their memory is not reused under a consumer's reads.
        for ev in self._freed:
            if ev is not None:
                self._stream.wait(ev)
        old = (self._buffers, self._active, self._n, self._freed, self._taken, self._changes,
               self._stale)
        self._buffers = bufs
        self._active = 0
        self._n = 0
        self._freed = [None] * self._n_buffers  # consumer done
        # batches taken from the old buffers: their consumers still release them
        self._stale = self._stale + [b for b, t in zip(old[0], self._taken) if t]
        self._taken = [False] * self._n_buffers
        self._changes += 1
        if self._allocate_hook is not None:
            def undo() -> None:
                (self._buffers, self._active, self._n, self._freed, self._taken,
                 self._changes, self._stale) = old

            _run_hook("allocate_hook", self._allocate_hook, self, "allocate", self._changes,
                      undo, "the old buffers are back in place")

    def _fill(self, a: Any, value: Any) -> None:
        if self._stream.cupy is None:
            a.fill(value)
            return
        with self._stream.cupy:  # CuPy's fill takes no stream argument
            a.fill(value)

    # ---------------------------------------------------------------- appends
    @_on_own_device
    def append(self, element: Any, *, stream: Any = None) -> None:
        """Append one element, a batch ``(k, *shape)`` or a list of elements.

        Dispatches to :meth:`append_one` or :meth:`append_multiple` by shape.

        Parameters
        ----------
        element : darray or list of darrays
            One element of the Bufferizer's shape, a batch ``(k, *shape)``, or a list of elements.
        stream : cuflow.Stream, optional
            The producer's stream, whose work so far the copy follows; the current stream when
            omitted.

        Notes
        -----
        Stream semantics: as :meth:`append_one`.
        """
        # resolved once here: the call it dispatches to gets the resolved stream (a CuPy
        # stream, or None on the NumPy backend), which resolves to itself
        producer = _producer("append", stream)
        if isinstance(element, list | tuple):
            return self.append_multiple(element, stream=producer)
        shape = self._array(element, "append").shape
        if shape == self._shape:  # (on the Bufferizer's device already, as append_one is)
            return self._append_one(element, producer)
        if len(shape) == len(self._shape) + 1 and shape[1:] == self._shape:
            return self.append_multiple(element, stream=producer)
        raise BufferizerError(
            f"Bufferizer.append: an element has shape {self._shape} and a batch (k, "
            f"{', '.join(map(str, self._shape))}); got {shape}")

    @_on_own_device
    def append_one(self, element: Any, *, stream: Any = None) -> None:
        """Copy one element (shape ``shape``, dtype ``dtype``; any strides) into the next slot.

        Raises :class:`BufferizerStateError` (a ``BufferError``) when the
        buffer is full (nothing changes).

        Parameters
        ----------
        element : darray
            One element of the Bufferizer's shape and dtype (any strides).
        stream : cuflow.Stream, optional
            The producer's stream, whose work so far the copy follows; the current stream when
            omitted.

        Notes
        -----
        Stream semantics: asynchronous; the copy is queued on the buffer's
        stream after the work queued so far on ``stream`` (default: current), and
        the pool reuses the element's memory only after the copy has read it (a
        temporary, ``append(x + 1)``, is safe).
        """
        self._append_one(element, _producer("append_one", stream))

    def _append_one(self, element: Any, producer: Any) -> None:
        """:meth:`append_one` on the Bufferizer's device, ``producer`` resolved."""
        self._check(element, "append_one", batched=False)
        self._room(1, "append_one")
        self._prepare_write(producer)
        self._copy(element, self._buffers[self._active], self._n, producer)
        self._appended(1, self._append_one_hook)

    @_on_own_device
    def append_multiple(self, element: Any, *, stream: Any = None) -> None:
        """Copy a batch ``(k, *shape)`` or a list of ``k`` elements into the next ``k`` slots.

        Every element is checked and the room for all ``k`` is checked before
        anything is copied: on error nothing is appended.

        Parameters
        ----------
        element : darray or list of darrays
            A batch ``(k, *shape)`` or a list of ``k`` elements.
        stream : cuflow.Stream, optional
            The producer's stream, whose work so far the copy follows; the current stream when
            omitted.

        Notes
        -----
        Stream semantics: as :meth:`append_one`.
        """
        name = "append_multiple"
        producer = _producer(name, stream)
        if isinstance(element, list | tuple):
            for e in element:
                self._check(e, name, batched=False)
            k = len(element)
        else:
            self._check(element, name, batched=True)
            k = element.shape[0]
        self._room(k, name)
        if k == 0:
            return
        self._prepare_write(producer)
        buf = self._buffers[self._active]
        if isinstance(element, list | tuple):
            for i, e in enumerate(element):
                self._copy(e, buf, self._n + i, producer)
        else:
            self._copy(element, buf, self._n, producer, k)
        self._appended(k, self._append_multiple_hook)

    @_on_own_device
    def next_slot(self, *, stream: Any = None) -> Any:
        """The view of the next free element, for a kernel to write into with ``dst=``.

        Queue the kernel on ``stream`` (default: the current stream), then call
        :meth:`commit` with the same ``stream=`` to count the element.  No copy is
        made.  Raises :class:`BufferizerStateError` when full.  A kernel that fails
        before :meth:`commit` leaves the Bufferizer unchanged.

        Parameters
        ----------
        stream : cuflow.Stream, optional
            The stream of the kernel that writes the slot; the current stream when omitted.

        Returns
        -------
        darray
            A view of the next free element, to write with ``dst=``.

        Notes
        -----
        Stream semantics: ``stream`` is ordered after the work queued so far on the
        buffer's stream (its zero-fill) and after the previous consumer of this buffer,
        so the kernel writes the slot after both.
        """
        producer = _producer("next_slot", stream)
        self._room(1, "next_slot")
        i = self._active
        if self._freed[i] is not None:
            self._stream.wait(self._freed[i])
            self._freed[i] = None
        if self._stream.cupy is not None and producer.ptr != self._stream.ptr:
            as_stream(producer).wait(self._stream.record(self._slot_ready))
        return self._buffers[i][self._n, ...]  # (a view, also of a 0-d element)

    @_on_own_device
    def commit(self, n: int = 1, *, stream: Any = None) -> None:
        """Count ``n`` elements written through :meth:`next_slot` (fires the append hooks).

        Parameters
        ----------
        n : int, default 1
            How many elements written through :meth:`next_slot` to count.
        stream : cuflow.Stream, optional
            The stream of the kernels that wrote them; the current stream when omitted.

        Notes
        -----
        Stream semantics: the buffer's stream is ordered after the work queued so far on
        ``stream`` (default: current), the stream of the kernels that wrote the elements,
        so a consumer of :meth:`take` reads them written.
        """
        producer = _producer("commit", stream)
        if not is_integer(n):
            raise ArgumentTypeError(f"Bufferizer.commit: n must be an int >= 1, got {n!r}")
        if n < 1:
            raise ArgumentError(f"Bufferizer.commit: n must be an int >= 1, got {n!r}")
        self._room(int(n), "commit")
        self._after(producer)
        self._appended(int(n), self._append_one_hook if n == 1 else self._append_multiple_hook)

    # -------------------------------------------------------------- consumers
    @_on_own_device
    def take(self, *, stream: Any = None) -> Any:
        """Hand the elements appended so far (``darray[:len(self)]``) to a consumer.

        ``stream`` (the consumer's, default: the current stream) waits for
        the buffer's writes, so work queued on it, a DLPack consumer such as
        ``torch.from_dlpack`` on that stream included, reads the finished
        elements.  Appends continue in
        the next buffer; the taken one is written again only after
        :meth:`release`.  Raises :class:`BufferizerStateError` (a
        ``BufferError``) if it is empty.

        Parameters
        ----------
        stream : cuflow.Stream, optional
            The consumer's stream; the current stream when omitted.

        Returns
        -------
        darray
            A view of the elements appended so far, ``(len(self), *shape)``.

        Notes
        -----
        Stream semantics: no host synchronization; one event record on the
        buffer's stream and one wait on ``stream``.
        """
        consumer = _stream_arg("take", as_stream, stream)
        if self._n == 0:
            raise BufferizerStateError("Bufferizer.take: the buffer is empty")
        i, n = self._active, self._n
        consumer.wait(self._stream.record())
        self._taken[i] = True
        view = as_darray(self._buffers[i][:n])
        self._active = (i + 1) % self._n_buffers
        self._n = 0
        self._changes += 1
        return view

    @_on_own_device
    def release(self, *, stream: Any = None) -> None:
        """The consumer's work on the oldest taken buffer is queued on ``stream``.

        The buffer's stream waits for that point before writing the buffer
        again (no host synchronization).  Raises :class:`BufferizerStateError`
        if no buffer is taken.

        Parameters
        ----------
        stream : cuflow.Stream, optional
            The stream where the consumer's work on the oldest taken buffer is queued;
            the current stream when omitted.

        Notes
        -----
        Stream semantics: no host synchronization; one event record on ``stream``, which the
        buffer's stream waits for before writing the buffer again.
        """
        consumer = _stream_arg("release", as_stream, stream)
        if self._stale:  # the oldest: a buffer allocate() replaced, whose memory goes back to
            # the pool once the view is gone; the pool reuses it after the consumer's work
            record_stream(self._stale.pop(0), consumer)
            return
        order = [(self._active + k) % self._n_buffers for k in range(self._n_buffers)]
        for i in order:
            if self._taken[i]:
                self._freed[i] = consumer.record()
                self._taken[i] = False
                return
        raise BufferizerStateError("Bufferizer.release: no buffer has been taken")

    @property
    @_on_own_device
    def ready_event(self) -> Event:
        """An event recorded now on the buffer's stream: wait on it to read the buffer."""
        return self._stream.record()

    @_on_own_device
    def flush(self, value: Any = 0) -> None:
        """Empty the active buffer, fire ``flush_hook`` and fill the buffer with ``value``.

        The hook sees the Bufferizer empty; if it raises, nothing is filled and
        the elements are kept (see "Warnings" in the class docstring).  What a hook
        does is kept: the fill leaves the elements it appended, and a buffer it took
        (``take``) is not filled.

        Parameters
        ----------
        value : number, default 0
            The fill value: one number the dtype holds (``300`` or ``1.5`` for
            uint8, ``1e300`` for float32 or ``None`` raise
            :class:`cuflow.ArgumentError` / :class:`cuflow.ArgumentTypeError`
            before anything changes), as for :func:`cuflow.full`.

        Notes
        -----
        Stream semantics: the fill is queued on the buffer's stream.
        """
        value = check_fill_value("Bufferizer.flush", value, self._dtype)
        if numpy.ndim(value) != 0:  # _fill_value passes arrays on, and fill() takes none
            raise ArgumentTypeError(f"cuflow.Bufferizer.flush: fill_value must be one number, "
                                    f"got an array of shape {numpy.shape(value)}")
        self._writable("flush")
        n, before = self._n, self._changes
        self._n = 0
        self._changes += 1
        mark = self._changes

        def undo() -> None:
            self._n, self._changes = n, before

        if self._flush_hook is not None:
            _run_hook("flush_hook", self._flush_hook, self, "flush", mark, undo,
                      f"nothing was filled and the {n} element(s) are kept")
        start = 0
        if self._changes != mark:  # the hook changed the Bufferizer: what it did is kept
            if self._taken[self._active]:
                return  # (a buffer taken for a consumer is never written)
            start = self._n  # (elements it appended are not filled over)
        try:
            self._prepare_write(as_cupy_stream(None))
            self._fill(self._buffers[self._active][start:], value)
        except BaseException:
            if self._changes == mark:  # a hook that changed it is not undone (see _run_hook)
                undo()
            raise

    def reset(self) -> None:
        """Empty the active buffer without writing memory (no hook)."""
        self._n = 0
        self._changes += 1

    # ------------------------------------------------------------------ hooks
    def flush_hook(self, hook: Hook | None) -> None:
        """Set the hook called by :meth:`flush`, once the Bufferizer is empty and before the
        fill is queued."""
        self._flush_hook = _check_hook("flush_hook", hook)

    def allocate_hook(self, hook: Hook | None) -> None:
        """Set the hook called at the end of :meth:`allocate`."""
        self._allocate_hook = _check_hook("allocate_hook", hook)

    def append_one_hook(self, hook: Hook | None) -> None:
        """Set the hook called after one element was appended."""
        self._append_one_hook = _check_hook("append_one_hook", hook)

    def append_multiple_hook(self, hook: Hook | None) -> None:
        """Set the hook called after several elements were appended at once."""
        self._append_multiple_hook = _check_hook("append_multiple_hook", hook)

    def buffer_full_hook(self, hook: Hook | None) -> None:
        """Set the hook called after an append filled the buffer."""
        self._buffer_full_hook = _check_hook("buffer_full_hook", hook)

    # ------------------------------------------------------------- properties
    @property
    def allocation(self) -> Any:
        """The active buffer's memory (``cupy.cuda.MemoryPointer``; the array on NumPy)."""
        buf = self._buffers[self._active]
        return buf.data if get_backend().is_gpu else buf

    @property
    def darray(self) -> Any:
        """The whole active buffer ``(buffer_size, *shape)`` as a darray view (not a copy)."""
        return as_darray(self._buffers[self._active])

    @property
    def stream(self) -> Stream:
        """The stream every write of the buffer is queued on."""
        return self._stream

    @property
    def element_nbytes(self) -> int:
        """Bytes of one element."""
        return self._element_nbytes

    @property
    def nbytes(self) -> int:
        """Bytes of one buffer (``buffer_size * element_nbytes``)."""
        return self._len * self.element_nbytes

    @property
    def full(self) -> bool:
        """True when the active buffer holds ``buffer_size`` elements."""
        return self._n == self._len

    @property
    def shape(self) -> tuple[int, ...]:
        """``(buffer_size, *shape)``."""
        return (self._len, *self._shape)

    @property
    def element_shape(self) -> tuple[int, ...]:
        """Shape of one element."""
        return self._shape

    @property
    def dtype(self) -> numpy.dtype:
        """The element dtype."""
        return self._dtype

    @property
    def n_buffers(self) -> int:
        """How many buffers the Bufferizer rotates through."""
        return self._n_buffers

    def __len__(self) -> int:
        """Elements in the active buffer."""
        return self._n

    def __repr__(self) -> str:
        return (f"<cuflow.Bufferizer {len(self)}/{self._len} x {self._shape} {self._dtype}, "
                f"{self._n_buffers} buffer(s)>")

    # ---------------------------------------------------------------- helpers
    def _array(self, element: Any, name: str) -> Any:
        if not isinstance(element, get_backend().ndarray):
            raise BufferizerError(
                f"Bufferizer.{name}: elements must be arrays of the active "
                f"{get_backend().name} backend, got {type(element).__module__}."
                f"{type(element).__name__} (convert host data with cuflow.asarray first)")
        return element

    def _check(self, element: Any, name: str, batched: bool) -> None:
        shape = self._array(element, name).shape
        ok = shape[1:] == self._shape and len(shape) == len(self._shape) + 1 if batched \
            else shape == self._shape
        if not ok:
            want = f"(k, {', '.join(map(str, self._shape))})" if batched else str(self._shape)
            raise BufferizerError(f"Bufferizer.{name}: element shape must be {want}, got {shape}")
        if element.dtype != self._dtype:
            raise BufferizerError(f"Bufferizer.{name}: element dtype must be {self._dtype}, "
                                  f"got {element.dtype} (cast with astype(dst=) first)")
        if self._multi:
            # the calls run on the Bufferizer's device whatever device is current, so the
            # element must be there (the ops' advice, another current device, cannot help)
            d = get_backend().device_of(element)
            if d is not None and d != self._device:
                raise DeviceError(
                    f"cuflow.Bufferizer.{name}: an input is on device {d} but elements must be "
                    f"on the Bufferizer's device {self._device} (its calls run there whatever "
                    f"device is current); copy it with x.to_device({self._device}) first")

    def _room(self, k: int, name: str) -> None:
        self._writable(name)
        if self._n + k > self._len:
            raise BufferizerStateError(
                f"Bufferizer.{name}: {k} element(s) do not fit: {self._n} of {self._len} "
                "slots are used; nothing was appended")

    def _writable(self, name: str) -> None:
        if self._taken[self._active]:
            raise BufferizerStateError(
                f"Bufferizer.{name}: buffer {self._active} was taken and not released; call "
                "release(stream=consumer) after queuing the consumer's work")

    def _copy(self, src: Any, buf: Any, start: int, producer: Any, k: int | None = None) -> None:
        """``src`` -> ``buf[start]`` (one element) or ``buf[start:start + k]`` (a batch) on
        the buffer's stream."""
        s = self._stream.cupy
        if s is not None and src._c_contiguous:  # (CuPy's flags object costs more)
            # one cudaMemcpyAsync at the slot's address: a view of the slot would cost more
            # host time than the copy's own call (bench/ab.py, its bufferizer_append rows)
            nbytes = src.nbytes
            if nbytes:
                self._runtime.memcpyAsync(buf.data.ptr + start * self._element_nbytes,
                                          src.data.ptr, nbytes, _MEMCPY_DEFAULT, s.ptr)
        else:
            copy(src, dst=buf[start, ...] if k is None else buf[start:start + k],
                 stream=self._stream)
        if s is not None and producer.ptr != s.ptr:
            # src may be a temporary (append(x + 1)) freed on return: the pool must not
            # hand its memory to the producer's stream before this copy has read it
            record_stream(src, s)

    def _prepare_write(self, producer: Any) -> None:
        """Order the buffer's stream after ``producer`` (a resolved CuPy stream; None on the
        NumPy backend) and after the buffer's last consumer."""
        i = self._active
        if self._freed[i] is not None:
            self._stream.wait(self._freed[i])
            self._freed[i] = None
        self._after(producer)

    def _after(self, producer: Any) -> None:
        """Order the buffer's stream after the work queued so far on ``producer``."""
        s = self._stream.cupy
        if s is None or producer.ptr == s.ptr:
            return
        if self._multi:  # (Event.record refuses a producer's stream of another device)
            self._producer_done.record(producer)  # one reused event, no allocation
            self._stream.wait(self._producer_done)
            return
        # the same two runtime calls without the wrappers' checks, on every default append
        # (bench/ab.py, its bufferizer_append_own_stream row)
        self._runtime.eventRecord(self._producer_done_ptr, producer.ptr)
        self._runtime.streamWaitEvent(s.ptr, self._producer_done_ptr, 0)

    def _appended(self, k: int, hook: Hook | None) -> None:
        """Count ``k`` elements and fire the hooks; a hook that raises un-counts them, unless
        it changed the Bufferizer itself first (see :func:`_run_hook`)."""
        before = self._changes
        self._n += k
        self._changes += 1
        if hook is None and (self._buffer_full_hook is None or self._n != self._len):
            return  # no hook fires
        # one mark for both hooks: once an append hook has changed the Bufferizer (and
        # returned), a raising buffer_full_hook finds nothing of this call's left to undo
        mark = self._changes

        def undo() -> None:
            self._n -= k
            self._changes = before

        call = "append" if hook is None else (
            "append_one" if hook is self._append_one_hook else "append_multiple")
        undone = f"the {k} element(s) were not appended"
        if hook is not None:
            _run_hook(f"{call}_hook", hook, self, call, mark, undo, undone)
        # (an append hook that changed the Bufferizer itself, by an append of its own, say,
        # made the call that filled it, which fired the full hook once already)
        if self._n == self._len and self._changes == mark and self._buffer_full_hook is not None:
            _run_hook("buffer_full_hook", self._buffer_full_hook, self, call, mark, undo, undone)


_HOOK_SECTIONS = """

        Parameters
        ----------
        hook : callable or None
            Called with the Bufferizer as its only argument (the class's parameters say
            when); None removes the hook.  A hook that raises ends its call with
            :class:`BufferizerHookError` (the class's Warnings say what is undone then).

        Raises
        ------
        ArgumentTypeError
            ``hook`` is neither callable nor None.
        """
if sys.flags.optimize < 2:  # (python -OO strips docstrings)
    for _name in ("flush_hook", "allocate_hook", "append_one_hook", "append_multiple_hook",
                  "buffer_full_hook"):
        _setter = getattr(Bufferizer, _name)
        _setter.__doc__ = _setter.__doc__.rstrip() + _HOOK_SECTIONS
