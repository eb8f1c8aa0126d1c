"""Graph-private pools: allocations made while a stream captures a graph.

While a stream captures (``begin_private`` .. ``end_private``), its allocations
come from a private pool (segments from ``Backend.alloc_private``, never
stream-ordered, so never captured) that lives as long as the graph: its
blocks are not reused outside it, and its free segments go back once the
graph is closed (``close_private``).  Freeing device memory is illegal while
any stream captures, so releases wait for the end of the last capture.
"""

from __future__ import annotations

from typing import Any

from .._checks import is_integer
from ._blocks import check_stream
from ._exceptions import MemoryTypeError, MemoryValueError

__all__ = ["GraphPoolsMixin"]


class GraphPoolsMixin:
    """The private pools of :class:`~cuflow.memory._pool.Pool` (its state, its lock)."""

    def begin_private(self, stream: int) -> int:
        """Route allocations on ``stream`` to a new private pool; returns its id.

        Parameters
        ----------
        stream : int
            The handle of the capturing stream, an int in [0, 2**63).

        Returns
        -------
        int
            The private pool's id, for :meth:`close_private`.

        Raises
        ------
        MemoryTypeError, MemoryValueError
            ``stream`` is not an int (a bool neither), or not in [0, 2**63).
        """
        stream = check_stream("Pool.begin_private", stream)
        with self._lock:
            owner = self._next_owner
            self._next_owner += 1
            self._private[owner] = {"closed": False, "segments": 0}
            self._capturing[stream] = owner
            self._slow = True
            return owner

    def end_private(self, stream: int) -> None:
        """The capture on ``stream`` ended; with no capture left, closed graphs' memory that
        became free meanwhile goes back.

        Parameters
        ----------
        stream : int
            The handle given to :meth:`begin_private`, an int in [0, 2**63).

        Raises
        ------
        MemoryTypeError, MemoryValueError
            ``stream`` is not an int (a bool neither), or not in [0, 2**63).
        """
        stream = check_stream("Pool.end_private", stream)
        with self._lock:
            self._capturing.pop(stream, None)
            self._update_slow()
            if not self._capturing and not self._busy:
                self._drain()
                self._process_pending()
                self._release_closed()

    def close_private(self, owner: int) -> None:
        """The graph that owns ``owner`` is gone: release its segments once they are free
        (if a graph is being captured, when the capture ends).  Closing it again does
        nothing.

        Parameters
        ----------
        owner : int
            An id :meth:`begin_private` returned.

        Raises
        ------
        MemoryTypeError
            ``owner`` is not an int (a bool neither).
        MemoryValueError
            ``owner`` is no id this pool's :meth:`begin_private` returned.
        """
        if not is_integer(owner):
            raise MemoryTypeError(f"cuflow.memory.Pool.close_private: owner must be an int id "
                                  f"that begin_private returned, got {type(owner).__name__} "
                                  f"{owner!r}")
        if not 1 <= owner < self._next_owner:  # (ids count up from 1)
            raise MemoryValueError(f"cuflow.memory.Pool.close_private: owner must be an id "
                                   f"that this pool's begin_private returned, in [1, "
                                   f"{self._next_owner}), got {owner}")
        owner = int(owner)
        with self._lock:
            self._settle()
            info = self._private.get(owner)
            if info is None:
                return
            info["closed"] = True
            if info["segments"] == 0:
                del self._private[owner]
            elif not self._capturing:
                self._release_closed()

    def _release_closed(self) -> None:
        """Give back the free segments of closed private pools (no capture may be running)."""
        closed = [o for o, info in self._private.items() if info["closed"]]
        if not closed:
            return
        if any(self._closed_private(b.seg.owner) for b in self._orphans):
            self._adopt_orphans()  # blocks of a destroyed capture stream
        for owner in closed:
            self._release_free_segments(owner)
            info = self._private.get(owner)
            if info is not None and info["segments"] == 0:
                del self._private[owner]

    def _closed_private(self, owner: Any) -> bool:
        info = self._private.get(owner) if owner is not None else None
        return info is not None and info["closed"]
