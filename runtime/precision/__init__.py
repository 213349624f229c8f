"""Precision plugins. The six canonical precisions are named in :mod:`runtime.catalog`."""

from runtime.precision.base import Precision
from runtime.precision.full import FullPrecision
from runtime.precision.mixed import BFloat16MixedPrecision, Float16MixedPrecision, MixedPrecision
from runtime.precision.true_dtype import (
    BFloat16TruePrecision,
    DoublePrecision,
    HalfTruePrecision,
    TrueDtypePrecision,
)

__all__ = [
    "BFloat16MixedPrecision",
    "BFloat16TruePrecision",
    "DoublePrecision",
    "Float16MixedPrecision",
    "FullPrecision",
    "HalfTruePrecision",
    "MixedPrecision",
    "Precision",
    "TrueDtypePrecision",
]
