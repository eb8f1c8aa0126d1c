"""Option groups that several image operators take, as small frozen dataclasses."""

from __future__ import annotations

import dataclasses
import math
import reprlib

import numpy

from ._parse import ImageFormatError, ImageTypeError, is_real

#: The kernels compute in float32: every coefficient must be a finite float32.
_F32_MAX = float(numpy.finfo(numpy.float32).max)


def _value(x):
    """An array (of any backend) or a NumPy scalar as the Python values it holds, where text
    and bools stay text and bools (and are refused as such)."""
    return x.tolist() if hasattr(x, "dtype") and not isinstance(x, type) else x


def _floats(what: str, v) -> tuple[float, ...]:
    items = _value(v)
    try:
        items = (items,) if numpy.ndim(items) == 0 else tuple(map(_value, items))
    except (TypeError, ValueError):  # (ragged nested sequences)
        items = None
    if items is None or not all(map(is_real, items)):
        raise ImageTypeError(f"cuflow.image.Norm: {what} must be a real number or a sequence "
                             f"of them (one per channel; not bools or text), got {v!r}")
    try:
        vals = tuple(map(float, items))
    except OverflowError:  # (a Python int past any float: not finite either)
        vals = (math.inf,)
    if not vals or not all(math.isfinite(x) for x in vals):
        raise ImageFormatError(f"cuflow.image.Norm: {what} must be finite (one value, or one "
                               f"per channel), got {reprlib.repr(v)}")
    return vals


@dataclasses.dataclass(frozen=True)
class Norm:
    """Per-channel normalization ``out = (x * scale - mean) / std`` of 0-255 values.

    Give it as ``norm=`` to :func:`normalize`, :func:`resize_normalize`,
    :func:`letterbox`, :func:`crop_resize` and :func:`denormalize`, instead of
    their ``mean=``, ``std=`` and ``scale=`` keywords.

    Attributes
    ----------
    mean, std : tuple of float
        One value for every channel, or one per output channel (in
        ``out_format`` order); a scalar becomes a 1-tuple.
    scale : float
        Applied to the 0-255 value first.

    Raises
    ------
    ImageFormatError
        A value is NaN or infinite; ``std`` or ``scale`` is zero; or a
        coefficient the kernels use (``scale / std``, ``mean / std``, and for
        :func:`denormalize` ``std / scale``, ``mean / scale``) is not a finite
        float32, as with a denormal ``std`` such as ``1e-320``.
    ImageTypeError
        A value is not a real number (a bool or a string is not one, inside a
        sequence too).
    """

    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    scale: float = 1 / 255

    def __post_init__(self):
        std = _floats("std", self.std)
        if any(x == 0 for x in std):
            raise ImageFormatError(f"cuflow.image.Norm: std must be non-zero, got {self.std!r}")
        mean = _floats("mean", self.mean)
        if numpy.ndim(self.scale) != 0:
            raise ImageTypeError(f"cuflow.image.Norm: scale must be one real number, got "
                                 f"{self.scale!r}")
        scale, = _floats("scale", self.scale)
        if scale == 0:
            raise ImageFormatError("cuflow.image.Norm: scale must be non-zero (it multiplies "
                                   "every pixel), got 0.0")
        coeffs = [abs(scale / x) for x in std] + [abs(m / x) for m in mean for x in std] + \
            [abs(x / scale) for x in std] + [abs(m / scale) for m in mean]
        if not all(c <= _F32_MAX for c in coeffs):
            raise ImageFormatError(
                f"cuflow.image.Norm: scale / std, mean / std, std / scale and mean / scale must "
                f"be finite float32 values (|x| <= {_F32_MAX:.4g}); got mean={self.mean!r}, "
                f"std={self.std!r}, scale={self.scale!r}")
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)
        object.__setattr__(self, "scale", scale)

    @classmethod
    def of(cls, name: str, norm: Norm | None, mean, std, scale,
           default_scale: float = 1 / 255) -> Norm:
        """``norm``, or one made of an operator's ``mean``, ``std`` and ``scale`` keywords
        (``default_scale`` where ``scale`` is not given)."""
        if norm is None:
            return cls(0.0 if mean is None else mean, 1.0 if std is None else std,
                       default_scale if scale is None else scale)
        if not isinstance(norm, Norm):
            raise ImageTypeError(f"cuflow.image.{name}: norm must be a cuflow.image.Norm, got "
                            f"{type(norm).__name__}")
        if mean is not None or std is not None or scale is not None:
            raise ImageTypeError(f"cuflow.image.{name}: pass either norm= or mean=/std=/scale=, "
                                 "not both")
        return norm
