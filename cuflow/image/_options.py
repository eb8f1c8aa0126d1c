"""Option groups that several image operators take, as small frozen dataclasses."""

from __future__ import annotations

import dataclasses
import math

import numpy

from ._parse import ImageFormatError


def _floats(what: str, v) -> tuple[float, ...]:
    vals = (float(v),) if numpy.ndim(v) == 0 else tuple(float(x) for x in v)
    if not vals or not all(math.isfinite(x) for x in vals):
        raise ImageFormatError(f"cuflow.image.Norm: {what} must be finite (one value, or one "
                               f"per channel), got {v!r}")
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
        ``out_format`` order); a scalar becomes a 1-tuple.  ``std`` is non-zero.
    scale : float
        Applied to the 0-255 value first.
    """

    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    scale: float = 1 / 255

    def __post_init__(self):
        std = _floats("std", self.std)
        if any(x == 0 for x in std):
            raise ImageFormatError(f"cuflow.image.Norm: std must be non-zero, got {self.std!r}")
        object.__setattr__(self, "mean", _floats("mean", self.mean))
        object.__setattr__(self, "std", std)
        object.__setattr__(self, "scale", float(self.scale))

    @classmethod
    def of(cls, name: str, norm: Norm | None, mean, std, scale) -> Norm:
        """``norm``, or one made of an operator's ``mean``, ``std`` and ``scale`` keywords."""
        if norm is None:
            return cls(0.0 if mean is None else mean, 1.0 if std is None else std,
                       1 / 255 if scale is None else scale)
        if not isinstance(norm, Norm):
            raise TypeError(f"cuflow.image.{name}: norm must be a cuflow.image.Norm, got "
                            f"{type(norm).__name__}")
        if mean is not None or std is not None or scale is not None:
            raise TypeError(f"cuflow.image.{name}: pass either norm= or mean=/std=/scale=, "
                            "not both")
        return norm
