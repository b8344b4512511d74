"""Read the table of an Nsight Compute (``ncu``) CSV: its kernels and their metric
values, units applied. :mod:`dnnroofline.ncu.parse` turns them into counts.

Accepted input (any ncu CSV a user is likely to have):

* the *details* page in long form: one row per (kernel, metric), with columns
  ``ID``, ``Kernel Name``, ``Metric Name``, ``Metric Unit``, ``Metric Value``
  (and any others, NVTX columns with doubled quotes included);
* ``--page raw`` in wide form: a header row, a units row, then one row per
  kernel launch, one column per metric.

Before the header there may be a UTF-8 byte-order mark, ``==PROF==`` /
``==WARNING==`` lines and the application's own stdout; all are skipped. Units are
parsed per value and are decimal (1 Kbyte = 1,000 bytes), scaled in
:class:`decimal.Decimal`; ``n/a`` (and an empty cell) is *missing* (None), never 0.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from dnnroofline.errors import InputError
from dnnroofline.ncu.metrics import (
    DETAILS_ALIASES,
    METRIC_DIMENSIONS,
    NOT_COUNT_DIMENSIONS,
    is_roofline_metric,
    parse_number,
    unit_scale,
)


@dataclass
class Kernel:
    key: tuple
    id: Any
    name: str
    line: int
    cc: str | None = None
    values: dict[str, Decimal | None] = field(default_factory=dict)


@dataclass
class Table:
    layout: str
    kernels: list[Kernel]
    messages: list[str]
    present: set[str]
    warnings: list[str]


_MSG_LINE = re.compile(r"^==[A-Za-z_\- ]+==")


def _split(line: str, source: str, lineno: int) -> list[str]:
    try:
        rows = list(csv.reader([line], strict=True))
    except csv.Error as err:
        raise InputError(
            f"{source}: line {lineno}: malformed CSV row ({err}); "
            "the file looks truncated or corrupted"
        ) from None
    return rows[0] if rows else []


def _is_header(cells: list[str]) -> bool:
    stripped = [c.strip() for c in cells]
    return "Kernel Name" in stripped and len(stripped) >= 3


def _error_lines(lines: list[str]) -> list[str]:
    return [ln.strip() for ln in lines if _MSG_LINE.match(ln.strip())]


def _no_table_error(source: str, lines: list[str]) -> InputError:
    msgs = _error_lines(lines)
    if msgs:
        quoted = "\n".join(f"  {m}" for m in msgs[-20:])
        hint = ""
        if any("ERR_NVGPUCTRPERM" in m for m in msgs):
            hint = (
                "\nncu was not allowed to read the GPU performance counters; see "
                "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
            )
        return InputError(f"{source}: no ncu table in this file; ncu said:\n{quoted}{hint}")
    nonblank = [ln for ln in lines if ln.strip()]
    if not nonblank:
        return InputError(f"{source}: the file is empty: no ncu table")
    first = "\n".join(f"  {ln[:120]}" for ln in nonblank[:3])
    return InputError(
        f"{source}: no ncu CSV table found (no header row with a 'Kernel Name' column); "
        f"the file starts with:\n{first}"
    )


def _check_row(
    cells: list[str], line: str, width: int, source: str, lineno: int, last: bool
) -> None:
    if line.count('"') % 2 or len(cells) != width:
        where = "the last row" if last else "a row"
        raise InputError(
            f"{source}: line {lineno}: {where} has {len(cells)} fields where the header has {width}"
            f"{' (unbalanced quotes)' if line.count(chr(34)) % 2 else ''}; "
            "the CSV is truncated or corrupted"
        )


def _convert(raw: str, unit: str, metric: str, source: str, lineno: int) -> Decimal | None:
    try:
        value = parse_number(raw)
    except ValueError:
        raise InputError(
            f"{source}: line {lineno}: metric {metric}: value {raw!r} is not a number"
        ) from None
    if value is None:  # n/a: no quantity, so no unit to check
        return None
    factor, dim = unit_scale(unit)
    allowed = METRIC_DIMENSIONS.get(metric)
    if allowed is not None:
        ok = dim in allowed
    else:  # a count (instructions, ops): any unit but a time, a size, a percentage or a rate
        ok = dim not in NOT_COUNT_DIMENSIONS and "/" not in dim
    if not ok:
        raise InputError(f"{source}: line {lineno}: metric {metric}: unexpected unit {unit!r}")
    return value * factor


def _clean_lines(text: str) -> list[str]:
    """The text's lines without a trailing "\r" (CRLF files) or byte-order marks at the
    start of any line."""
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]
    return [ln.lstrip("\ufeff") for ln in lines]


def _header_index(lines: list[str], source: str) -> int:
    """Index of the first header row (one with a 'Kernel Name' column)."""
    for i, ln in enumerate(lines):
        s = ln.strip()
        if not s or _MSG_LINE.match(s) or "Kernel Name" not in s:
            continue
        try:
            cells = next(csv.reader([ln]))
        except (csv.Error, StopIteration):
            continue
        if _is_header(cells):
            return i
    raise _no_table_error(source, lines)


class _RowReader:
    """The kernels of one table, filled row by row: on the raw page a row is a kernel,
    on the details page a row is one metric of a kernel."""

    def __init__(self, header: list[str], source: str, header_lineno: int) -> None:
        self.header, self.source = header, source
        self.col: dict[str, int] = {}
        for j, name in enumerate(header):
            self.col.setdefault(name, j)
        self.layout = "details" if {"Metric Name", "Metric Value"} <= set(self.col) else "raw"
        if "Metric Name" in self.col and "Metric Value" not in self.col:
            summary = ", ".join(h for h in header if h in ("Minimum", "Maximum", "Average"))
            raise InputError(
                f"{source}: line {header_lineno}: this is a summary table (columns "
                f"{summary or 'no'} values per metric, e.g. --print-summary), not per-kernel "
                "values; export the details page (ncu --csv) or the raw page "
                "(ncu --csv --page raw) instead"
            )
        self.kernels: dict[tuple, Kernel] = {}
        self.present: set[str] = set()
        self.aliased: set[tuple] = set()  # (kernel, metric) values taken from a display name
        self.units: list[str] | None = None  # the raw page's units row
        self.conflicts = 0

    def get(self, cells: list[str], name: str, default: str = "") -> str:
        j = self.col.get(name)
        return cells[j].strip() if j is not None else default

    def _new_kernel(self, key: tuple, cells: list[str], lineno: int) -> Kernel:
        kid, cc = self.get(cells, "ID"), self.get(cells, "CC") or None
        name = cells[self.col["Kernel Name"]]
        kern = Kernel(key, _kernel_id(kid, len(self.kernels)), name, lineno, cc)
        self.kernels[key] = kern
        return kern

    def row(self, cells: list[str], lineno: int) -> None:
        if self.layout == "raw":
            self._raw_row(cells, lineno)
        else:
            self._details_row(cells, lineno)

    def _raw_row(self, cells: list[str], lineno: int) -> None:
        kid = self.get(cells, "ID")
        if kid == "" and self.units is None:  # the units row under the header
            self.units = [c.strip() for c in cells]
            return
        kern = self._new_kernel((self.get(cells, "Process ID"), kid, lineno), cells, lineno)
        for name, j in self.col.items():
            if not is_roofline_metric(name):
                continue
            self.present.add(name)
            unit = self.units[j] if self.units is not None else ""
            kern.values[name] = _convert(cells[j], unit, name, self.source, lineno)

    def _details_row(self, cells: list[str], lineno: int) -> None:
        key = (self.get(cells, "Process ID"), self.get(cells, "ID"))
        kern = self.kernels.get(key)
        if kern is None:
            kern = self._new_kernel(key, cells, lineno)
        name = self.get(cells, "Metric Name")
        unit = self.get(cells, "Metric Unit")
        from_alias = name in DETAILS_ALIASES and unit_scale(unit)[1] == "second"
        if from_alias:
            name = DETAILS_ALIASES[name]
            if name in kern.values:
                return  # the real metric wins over its display name
        if not is_roofline_metric(name):
            return
        self.present.add(name)
        value = _convert(self.get(cells, "Metric Value"), unit, name, self.source, lineno)
        if name in kern.values and (key, name) not in self.aliased:
            if kern.values[name] != value:
                self.conflicts += 1
            return
        kern.values[name] = value
        if from_alias:
            self.aliased.add((key, name))
        else:
            self.aliased.discard((key, name))

    def table(self, messages: list[str]) -> Table:
        """The kernels read; on the details page, a metric some kernels report and
        others lack is missing (None) on the others."""
        if self.layout == "details":
            for kern in self.kernels.values():
                for name in self.present - kern.values.keys():
                    kern.values[name] = None
        warnings = []
        if self.conflicts:
            warnings.append(
                f"{self.conflicts} duplicate metric rows with different values; the first was kept"
            )
        return Table(self.layout, list(self.kernels.values()), messages, self.present, warnings)


def read_table(text: str, source: str) -> Table:
    lines = _clean_lines(text)
    last_content = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    header_at = _header_index(lines, source)
    header = [c.strip() for c in _split(lines[header_at], source, header_at + 1)]
    # ==ERROR== / ==WARNING== lines (not the per-kernel ==PROF== progress lines).
    messages = [m for m in _error_lines(lines) if not m.startswith("==PROF==")][:50]
    reader = _RowReader(header, source, header_at + 1)
    for i in range(header_at + 1, len(lines)):
        ln, lineno = lines[i], i + 1
        s = ln.strip()
        if not s or _MSG_LINE.match(s):
            continue
        cells = _split(ln, source, lineno)
        _check_row(cells, ln, len(header), source, lineno, last=(i == last_content))
        if [c.strip() for c in cells] == header:  # a repeated header (several processes)
            reader.units = None
            continue
        reader.row(cells, lineno)
    return reader.table(messages)


def _kernel_id(text: str, index: int) -> Any:
    if text.isdigit():
        return int(text)
    return text if text else index
