"""JSON files in and out. Output is atomic: write to a temporary file in the same
folder, then rename, so a job killed half-way never leaves a truncated file that looks
finished. :func:`dig` reads a value deep in parsed JSON that may lack any level.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from dnnroofline.errors import InputError


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` on success."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    # mkstemp makes the file 0600; give it the mode a plain open() would.
    umask = os.umask(0)
    os.umask(umask)
    tmp_path.chmod(0o666 & ~umask)
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n")


def read_json_or_none(path: str | os.PathLike) -> Any:
    """Load a JSON file, or None where it is missing or unreadable (a state file that
    only saves work: without it the work is done again)."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def read_json(path: str | os.PathLike) -> Any:
    """Load a JSON file; an unreadable or malformed file is an InputError naming it."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from exc
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def dig(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]...``, or None where a key is missing or a level is not an object
    (parsed JSON of any stage, where an optional block may be absent or null)."""
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj
