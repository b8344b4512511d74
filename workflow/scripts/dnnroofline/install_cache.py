"""Values that take seconds to compute and change only with some files (an installed
package, a user's model code), kept in the user's cache folder and read back while those
files stay as they were.

Every snakemake command lists torchvision's models (importing torchvision costs seconds)
and checks each user's model factory (importing torch, building the model, one forward
pass); every interactive roofline inlines vl-convert's JavaScript bundle (seconds to
build). Each is the same until its files change, so each is computed once.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from dnnroofline.io import read_json_or_none, write_text_atomic

T = TypeVar("T")


def cache_dir() -> Path:
    """The user's cache folder for dnnroofline: ``$XDG_CACHE_HOME`` or ``~/.cache``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dnnroofline"


def kept_per_install(
    name: str, package: str, compute: Callable[[], T], variant: str = "", where: Path | None = None
) -> T:
    """``compute()``'s JSON value, computed once per install of ``package`` (the path, size
    and mtime of its ``__init__``) and ``variant``: see :func:`kept_while_unchanged`."""
    origin = package_origin(package)
    if origin is None:
        return compute()  # not installed: compute's ImportError says so
    return kept_while_unchanged(name, [origin], compute, variant, where)


def package_origin(package: str) -> Path | None:
    """The file an import of ``package`` runs first, found without importing it."""
    spec = importlib.util.find_spec(package)
    return Path(spec.origin) if spec is not None and spec.origin else None


def kept_while_unchanged(
    name: str,
    files: Sequence[Path],
    compute: Callable[[], T],
    variant: str = "",
    where: Path | None = None,
) -> T:
    """``compute()``'s JSON value, kept in ``where`` (default :func:`cache_dir`) as
    ``{name}_{hash}.json`` and read back while ``files`` (their paths, sizes and mtimes)
    and ``variant`` stay the same. The value must survive JSON (str, list, dict, numbers);
    an exception from ``compute`` keeps nothing."""
    stats = []
    for path in files:
        st = Path(path).stat()
        stats.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
    key = f"{';'.join(stats)}:{variant}"
    cache = (where or cache_dir()) / f"{name}_{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
    kept = read_json_or_none(cache)  # none kept yet, or unreadable: compute it again
    if isinstance(kept, dict) and kept.get("key") == key and "value" in kept:
        return kept["value"]
    value = compute()
    # written whole, then renamed: concurrent jobs never read half of it; where it cannot
    # be written (a read-only home), it is computed again next time
    with contextlib.suppress(OSError):
        write_text_atomic(cache, json.dumps({"key": key, "value": value}))
    return value
