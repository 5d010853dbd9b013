"""Outside oracles for the tests: the ml_dtypes / numpy dtype that holds each format's values."""
import ml_dtypes
import numpy as np

from nbhelpers.formats import FORMATS, FloatFormat


def np_dtype(f: FloatFormat):
    """numpy dtype with the same values as ``f`` (ml_dtypes or numpy), or None."""
    if f.ml_dtype is None:
        return None
    if hasattr(np, f.ml_dtype) and f.ml_dtype in ("float16", "float32"):
        return np.dtype(getattr(np, f.ml_dtype))
    return np.dtype(getattr(ml_dtypes, f.ml_dtype))


ORACLE_FORMATS = [name for name, f in FORMATS.items() if f.ml_dtype is not None]
SMALL_FORMATS = [name for name, f in FORMATS.items() if f.bits <= 8]

# custom IEEE-style formats that ml_dtypes also implements: a second oracle for the generic path
CUSTOM_ORACLES = {"e4m3": "float8_e4m3", "e3m4": "float8_e3m4"}


def cast_values(x32: np.ndarray, dtype) -> np.ndarray:
    """Round float32 values by casting through ``dtype``; returned as float64."""
    with np.errstate(over="ignore", invalid="ignore"):
        return x32.astype(dtype).astype(np.float64)
