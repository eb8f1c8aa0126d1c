"""cuflow's core: the runtime, darray, the output contract, streams and the array operations.

The packages above (memory, image, pipeline, graph, bench) and the ``cuflow``
namespace import what they need from here; nothing here imports them.
"""

from __future__ import annotations

from ._arithmetic import (  # noqa: A004
    add, subtract, multiply, divide, true_divide, floor_divide, remainder, mod, fmod, divmod,
    power, pow, float_power, negative, positive, absolute, abs, fabs, sign, reciprocal, square,
    sqrt, cbrt, maximum, minimum, fmax, fmin, heaviside, gcd, lcm, copysign, nextafter,
    spacing, ldexp, frexp, modf, hypot, rint, floor, ceil, trunc, conjugate, conj,
)
from ._transcendental import (  # noqa: A004
    exp, exp2, expm1, log, log2, log10, log1p, logaddexp, logaddexp2, sin, cos, tan, arcsin,
    asin, arccos, acos, arctan, atan, arctan2, atan2, sinh, cosh, tanh, arcsinh, asinh,
    arccosh, acosh, arctanh, atanh, deg2rad, rad2deg, degrees, radians,
)
from ._logical import (  # noqa: A004
    equal, not_equal, less, less_equal, greater, greater_equal, logical_and, logical_or,
    logical_xor, logical_not, bitwise_and, bitwise_or, bitwise_xor, invert, bitwise_invert,
    bitwise_not, left_shift, bitwise_left_shift, right_shift, bitwise_right_shift,
    bitwise_count, isfinite, isinf, isnan, isnat, signbit, where,
)
from ._statistical import (  # noqa: A004
    sum, prod, mean, std, var, min, max, argmin, argmax, any, all,
)
from ._creation import (  # noqa: A004
    empty, zeros, ones, full, empty_like, zeros_like, ones_like, full_like, arange, linspace,
    eye, identity,
)
from ._interop import (  # noqa: A004
    asarray, array, from_dlpack, asnumpy, as_darray, copy, astype,
)
from ._manipulation import (  # noqa: A004
    flatten, ravel, reshape, transpose, ascontiguousarray, concatenate, stack, take, take_along_axis,
)
from ._general import (  # noqa: A004
    matmul, dot, clip, around, round, cumsum, cumprod,
)
from ._sorting import argsort, sort
from . import (
    _arithmetic, _creation, _general, _interop, _logical, _manipulation, _sorting, _statistical,
    _transcendental,
)
from ._contract import may_share, prepare_out, resolve_out
from ._runtime import UFUNC_NAMES, Device, Runtime, get_backend, on_select, runtime, set_backend
from ._streams import (
    Event, Stream, as_cupy_stream, as_stream, current_stream, streams, synchronize, use_stream,
)

#: every array operation of the namespace (written out in the modules above)
OPS = tuple(n for m in (_arithmetic, _transcendental, _logical, _statistical, _creation,
                        _interop, _manipulation, _general, _sorting)
            for n in m.__all__ if n != "copy_into")

__all__ = [
    "Runtime", "Device", "runtime", "get_backend", "set_backend", "on_select", "UFUNC_NAMES", "prepare_out",
    "resolve_out", "may_share", "Stream", "Event", "as_cupy_stream", "as_stream", "current_stream",
    "streams", "synchronize", "use_stream", "OPS", *OPS,
]
