"""Number and word formatting of the report: plain functions, and the same as Jinja filters.

Every unit the report prints is here, once: decimal prefixes (1 MB = 10^6 B),
'–' for a missing value. :data:`FILTERS` registers them in the template
environment (``{{ x | bytes }}``); Python code calls the functions directly.

Also the value checks every stage shares: :func:`finite_number`, :func:`positive_number`,
:func:`isnum`, :func:`missing`, :func:`to_bool`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd


def finite_number(x: Any) -> float | None:
    """A finite float, or None for null, NaN, infinities, booleans and non-numbers."""
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def positive_number(x: Any) -> float | None:
    """A finite float above zero, else None (a count or time that must be > 0)."""
    v = finite_number(x)
    return v if v is not None and v > 0 else None


def isnum(x: Any) -> bool:
    """A finite number (bools, None, NaN and strings that are not numbers are not)."""
    return finite_number(x) is not None


def missing(x: Any) -> bool:
    if x is None:
        return True
    try:
        return bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def to_bool(v: object) -> bool:
    """A CSV cell as a bool: True, 1, yes, y, t (any case); missing is False."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if missing(v):
        return False
    if isinstance(v, (int, float, np.integer, np.floating)):
        return bool(v)
    return str(v).strip().lower() in ("true", "1", "yes", "y", "t")


def sig(x: Any, digits: int = 3) -> str:
    """``x`` to ``digits`` significant digits, with thousands separators; '–' if missing."""
    if not isnum(x):
        return "–"
    x = float(x)
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


def fmt_flops_rate(x: Any) -> str:
    """FLOP/s in GFLOP/s."""
    return "–" if not isnum(x) else f"{sig(float(x) / 1e9)} GFLOP/s"


def fmt_gflops(x: Any) -> str:
    """FLOP/s as a bare GFLOP/s number (table columns that name the unit)."""
    return "–" if not isnum(x) else sig(float(x) / 1e9)


def fmt_gflop(x: Any) -> str:
    """A FLOP count in GFLOP."""
    return "–" if not isnum(x) else f"{sig(float(x) / 1e9)} GFLOP"


_BYTE_UNITS = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"))


def fmt_bytes(x: Any) -> str:
    """Bytes with decimal prefixes (1 MB = 10^6 B)."""
    if not isnum(x):
        return "–"
    x = float(x)
    for scale, unit in _BYTE_UNITS:
        if abs(x) >= scale:
            return f"{sig(x / scale)} {unit}"
    return f"{sig(x)} B"


def fmt_bandwidth(x: Any) -> str:
    """Bytes/s in GB/s (decimal)."""
    return "–" if not isnum(x) else f"{sig(float(x) / 1e9)} GB/s"


def fmt_time(x: Any) -> str:
    """Seconds as ms (µs below 1 ms, s above 10 s)."""
    if not isnum(x):
        return "–"
    x = float(x)
    if abs(x) >= 10:
        return f"{sig(x)} s"
    if abs(x) >= 1e-3 or x == 0:
        return f"{sig(x * 1e3)} ms"
    return f"{sig(x * 1e6)} µs"


def fmt_pct(x: Any, decimals: int = 1) -> str:
    """A fraction as a percentage."""
    return "–" if not isnum(x) else f"{float(x) * 100:.{decimals}f}%"


def fmt_ai(x: Any) -> str:
    return "–" if not isnum(x) else f"{sig(x)} FLOP/B"


def fmt_ips(x: Any) -> str:
    return "–" if not isnum(x) else f"{sig(x)} img/s"


def fmt_ratio(x: Any) -> str:
    return "–" if not isnum(x) else f"{float(x):.2f}×"


def fmt_count(x: Any) -> str:
    """A count with M/k suffix (parameters)."""
    if not isnum(x):
        return "–"
    x = float(x)
    if abs(x) >= 1e9:
        return f"{sig(x / 1e9)} G"
    if abs(x) >= 1e6:
        return f"{sig(x / 1e6)} M"
    if abs(x) >= 1e3:
        return f"{sig(x / 1e3)} k"
    return sig(x)


def fmt_batches(batches: Iterable[Any]) -> str:
    vals = sorted({int(b) for b in batches if isnum(b)})
    if not vals:
        return "–"
    if len(vals) == 1:
        return str(vals[0])
    return f"{vals[0]}–{vals[-1]}"


def join(items: Iterable[Any], last: str = "and") -> str:
    """``a, b and c``."""
    items = [str(i) for i in items]
    if not items:
        return ""
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + f" {last} " + items[-1]


def ratio_txt(a: Any, b: Any) -> str:
    """``a / b`` to two decimals, '–' where it is undefined."""
    if isnum(a) and isnum(b) and float(b) > 0:
        return f"{float(a) / float(b):.2f}"
    return "–"


def plural(n: Any, word: str, many: str | None = None) -> str:
    """``word`` for one, else ``many`` (``word + 's'`` by default)."""
    return word if isnum(n) and int(n) == 1 else (many if many is not None else word + "s")


def or_dash(x: Any) -> Any:
    """The value, or '–' where it is missing or empty."""
    return "–" if missing(x) or x == "" or (isinstance(x, Sequence) and not len(x)) else x


#: Template filters: ``{{ value | name }}``.
FILTERS = {
    "sig": sig,
    "flops_rate": fmt_flops_rate,
    "gflops": fmt_gflops,
    "gflop": fmt_gflop,
    "bytes": fmt_bytes,
    "bandwidth": fmt_bandwidth,
    "time": fmt_time,
    "pct": fmt_pct,
    "ai": fmt_ai,
    "ips": fmt_ips,
    "ratio": fmt_ratio,
    "count": fmt_count,
    "batches": fmt_batches,
    "join_and": join,
    "plural": plural,
    "or_dash": or_dash,
}
