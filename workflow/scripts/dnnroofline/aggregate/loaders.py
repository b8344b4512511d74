"""Reading the study's ledgers for the plotting scripts (the I/O side of aggregate)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from dnnroofline.aggregate.inputs import key_ceilings
from dnnroofline.aggregate.points import POINTS_DTYPES
from dnnroofline.errors import InputError
from dnnroofline.io import read_json


def load_points_and_ceilings(
    points_csv: str, ceilings_files: Sequence[str], env: str | None = None
) -> tuple[pd.DataFrame, dict[str, Mapping], dict[str, str]]:
    """roofline_points.csv and the ceilings by env, narrowed to one env if given.

    Returns (points, {env: ceilings doc}, {env: ceilings file}).
    """
    try:
        points = pd.read_csv(points_csv, dtype=POINTS_DTYPES)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise InputError(f"{points_csv}: cannot read points CSV: {exc}") from exc
    ceilings, sources = key_ceilings((p, read_json(p)) for p in ceilings_files)
    if env is not None:
        if env not in ceilings:
            raise InputError(f"--env {env!r}: no ceilings file for it among {list(ceilings_files)}")
        ceilings = {env: ceilings[env]}
        sources = {env: sources[env]}
        points = points[points["env"] == env].reset_index(drop=True)
    return points, ceilings, sources
