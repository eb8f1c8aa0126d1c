"""CUDA graph capture whose allocations live in a private memory pool.

Memory allocated while a stream captures belongs to the captured graph: its
kernels read and write those addresses on every replay.  A shared pool would
hand that memory to other arrays once the capturing code frees it, and
replays would then overwrite them.  :func:`capture` routes the capturing
stream's allocations to a private pool of cuflow's allocator that lives as
long as the returned :class:`Graph` (and any array still using it); a capture
that fails releases it at once.

Example
-------
>>> with cuflow.graph.capture() as g:          # doctest: +SKIP
...     y = cuflow.add(x, x)
>>> g.replay()                                 # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
from typing import Any

from ._backend import get_backend
from ._errors import BackendError

__all__ = ["Graph", "capture"]


class Graph:
    """A captured graph (CuPy's ``cupy.cuda.graph.Graph``) and its private pool."""

    def __init__(self, pool: Any, owner: int | None, stream: Any) -> None:
        self._graph: Any = None
        self._pool = pool
        self._owner = owner
        self.stream = stream

    def replay(self, *, stream: Any = None) -> None:
        """Launch the graph on ``stream`` (default: the capture stream).

        Notes
        -----
        Stream semantics: asynchronous; queued on ``stream``.
        """
        if self._graph is None:
            raise BackendError("cuflow.graph: nothing to replay (the capture failed, the graph "
                               "was closed, or the NumPy backend has no graphs)")
        from ._streams import as_cupy_stream  # noqa: PLC0415

        s = as_cupy_stream(stream)
        self._graph.launch(stream=self.stream if s is None else s)

    launch = replay

    def close(self) -> None:
        """Drop the graph; its private memory goes back once no array uses it."""
        self._graph = None
        if self._pool is not None and self._owner is not None:
            self._pool.close_private(self._owner)
            self._owner = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


@contextlib.contextmanager
def capture(*, stream: Any = None):
    """Capture the work queued inside the block on ``stream`` into a :class:`Graph`.

    ``stream`` defaults to a new non-blocking stream (the legacy default stream
    cannot capture); the block runs with it as the current stream.  CuPy's
    relaxed capture mode is used.  On the NumPy backend the block simply runs
    and the graph cannot be replayed.
    """
    b = get_backend()
    if not b.is_gpu:
        yield Graph(None, None, None)
        return
    from . import memory  # noqa: PLC0415
    from ._streams import as_cupy_stream  # noqa: PLC0415

    s = b.xp.cuda.Stream(non_blocking=True) if stream is None else as_cupy_stream(stream)
    pool = memory.get_pool() if memory._INSTALLED else None
    owner = pool.begin_private(s.ptr) if pool is not None else None
    g = Graph(pool, owner, s)
    ok = False
    try:
        with s:
            s.begin_capture()
            try:
                yield g
                ok = True
            finally:
                graph = s.end_capture()
        g._graph = graph if ok else None
    finally:
        if pool is not None:
            pool.end_private(s.ptr)
        if not ok:
            g.close()
