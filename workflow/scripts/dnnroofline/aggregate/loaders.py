"""Reading the study's ledgers for the entry scripts (the I/O side of aggregate)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from dnnroofline.aggregate.inputs import key_ceilings
from dnnroofline.aggregate.points import POINTS_DTYPES
from dnnroofline.errors import InputError
from dnnroofline.io import read_json


def read_csv(path: str, what: str, dtype: dict | None = None) -> pd.DataFrame:
    """A ledger CSV; one that cannot be read is an InputError naming the file and what."""
    try:
        return pd.read_csv(path, dtype=dtype)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise InputError(f"{path}: cannot read {what} CSV: {exc}") from exc


def load_points_and_ceilings(
    points_csv: str, ceilings_files: Sequence[str], env: str | None = None
) -> tuple[pd.DataFrame, dict[str, Mapping], dict[str, str]]:
    """roofline_points.csv and the ceilings by env, narrowed to one env if given.

    Returns (points, {env: ceilings doc}, {env: ceilings file}).
    """
    points = read_csv(points_csv, "points", POINTS_DTYPES)
    ceilings, sources = key_ceilings((p, read_json(p)) for p in ceilings_files)
    if env is not None:
        if env not in ceilings:
            raise InputError(f"--env {env!r}: no ceilings file for it among {list(ceilings_files)}")
        ceilings = {env: ceilings[env]}
        sources = {env: sources[env]}
        points = points[points["env"] == env].reset_index(drop=True)
    return points, ceilings, sources
