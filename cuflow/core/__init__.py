"""cuflow's core: the runtime, darray, the output contract, streams and the array operations.

The packages above (memory, image, pipeline, graph, bench) import what they
need from here; nothing here imports them.
"""

from ._contract import may_share, prepare_out, resolve_out
from ._ops import CREATION as _CREATION
from ._ops import as_darray, asarray, astype, copy
from ._runtime import Runtime, get_backend, on_select, runtime, set_backend
from ._streams import Event, Stream, as_cupy_stream, as_stream, current_stream, use_stream

empty = _CREATION["empty"]
zeros = _CREATION["zeros"]

__all__ = ["Runtime", "runtime", "get_backend", "set_backend", "on_select", "prepare_out",
           "resolve_out", "may_share", "Stream", "Event", "as_cupy_stream", "as_stream",
           "current_stream", "use_stream", "as_darray", "asarray", "astype", "copy", "empty",
           "zeros"]
