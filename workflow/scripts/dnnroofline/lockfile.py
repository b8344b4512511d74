"""The lock files (``requirements.lock``, ``requirements-dev.lock``) and what agrees with them.

``make lock`` writes them with ``uv pip compile --generate-hashes`` for CPython
:data:`LOCK_PYTHON` on Linux x86_64; ``make study``/``make test`` install them with
``pip install --require-hashes``. This module reads them (pure: text in, data out), checks
a conda env file's pins against them, and compares the package versions a machine
recorded in ``env_info.json`` (``packages``) with them for the report.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from dnnroofline.errors import InputError

#: The Python the lock is resolved for (the Makefile's ``--python-version``).
LOCK_PYTHON = "3.11"

#: pip name -> conda-forge name, where they differ. The one map: env files use it, so
#: does the check that they agree with the lock.
CONDA_NAMES = {"torch": "pytorch"}

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")


def canonical_name(name: str) -> str:
    """PEP 503 normalised name: ``PyYAML`` and ``pyyaml``, ``py_cpuinfo`` and ``py-cpuinfo``."""
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def parse_lock(text: str, where: str = "requirements.lock") -> dict[str, str]:
    """``{canonical name: version}`` of a hashed lock file.

    Every requirement must be an exact ``name==version`` pin with at least one
    ``--hash``, as ``pip install --require-hashes`` needs: anything else is an
    InputError naming the file and line.
    """
    pins: dict[str, str] = {}
    hashed: set[str] = set()
    current = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = re.sub(r"(^|\s)#.*$", "", raw).strip().rstrip("\\").strip()
        if not line:
            continue
        requirement, *options = line.split()
        if requirement.startswith("-"):
            requirement, options = "", [requirement, *options]
        if requirement:
            match = _PIN.match(requirement)
            if not match:
                raise InputError(
                    f"{where} line {number}: {requirement!r} is not an exact "
                    "name==version pin (regenerate it: make lock)"
                )
            current = canonical_name(match.group(1))
            if current in pins:
                raise InputError(f"{where} line {number}: {current} is pinned twice")
            pins[current] = match.group(3)
        for option in options:
            if not option.startswith("--hash="):
                raise InputError(
                    f"{where} line {number}: option {option!r} in a lock file; "
                    "a lock holds only hashed name==version pins (regenerate it: make lock)"
                )
            if current is None:
                raise InputError(f"{where} line {number}: a --hash before any requirement")
            hashed.add(current)
    unhashed = sorted(set(pins) - hashed)
    if unhashed:
        raise InputError(
            f"{where}: no --hash for {', '.join(unhashed)}; pip --require-hashes refuses it "
            "(regenerate it: make lock)"
        )
    if not pins:
        raise InputError(f"{where}: no pinned packages")
    return pins


def conda_pins(spec: Mapping, where: str) -> dict[str, str | None]:
    """``{canonical pip name: pinned version or None}`` of a conda env file's dependencies.

    ``name==1.2`` and ``name=1.2`` count as pins; a bound (``>=``) or a bare name is
    None. conda-forge names go back to pip names through :data:`CONDA_NAMES`.
    """
    deps = spec.get("dependencies") if isinstance(spec, Mapping) else None
    if not isinstance(deps, list):
        raise InputError(f"{where}: no 'dependencies' list")
    to_pip = {conda: pip for pip, conda in CONDA_NAMES.items()}
    out: dict[str, str | None] = {}
    for dep in deps:
        if not isinstance(dep, str):
            continue  # a nested pip: list
        match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(==?|[<>!~]=?)?\s*([^\s,]*)", dep)
        if not match:
            raise InputError(f"{where}: cannot read dependency {dep!r}")
        name, op, version = match.groups()
        pip_name = canonical_name(to_pip.get(name, name))
        out[pip_name] = version if op in ("=", "==") and version else None
    return out


def machine_versions(env_info: Mapping) -> tuple[dict[str, str], bool]:
    """``({canonical name: version}, complete)`` recorded by one env's env_info.json.

    ``packages`` lists every installed distribution; an env_info.json written before
    it existed has only ``torch`` and ``torchvision`` (complete is then False). Those are
    ``__version__`` strings, where PyPI's CUDA wheel adds ``+cu130`` to the ``2.14.1`` of its
    metadata: their local label is dropped, so only the release is compared.
    """
    packages = env_info.get("packages")
    if isinstance(packages, Mapping) and packages:
        return {canonical_name(k): str(v) for k, v in packages.items()}, True
    found = {
        k: str(env_info[k]).split("+", 1)[0] for k in ("torch", "torchvision") if env_info.get(k)
    }
    return found, False


def version_differences(
    env_info: Mapping, pins: Mapping[str, str]
) -> tuple[list[tuple[str, str, str]], int]:
    """``([(package, machine version, locked version)], locked packages compared)`` for one
    env (Python, when recorded, is compared too, and not counted).

    Locked packages the env's interpreter lacks are not compared (a conda env per stage
    holds only that stage's packages). The Python version is compared with
    :data:`LOCK_PYTHON` by major.minor. A local version label counts as a difference:
    ``2.14.1+cpu`` is another build than the locked ``2.14.1``.
    """
    versions, _ = machine_versions(env_info)
    diffs = []
    compared = 0
    python = env_info.get("python")
    if python and ".".join(str(python).split(".")[:2]) != LOCK_PYTHON:
        diffs.append(("python", str(python), f"{LOCK_PYTHON}.*"))
    for name in sorted(pins):
        if name in versions:
            compared += 1
            if versions[name] != pins[name]:
                diffs.append((name, versions[name], pins[name]))
    return diffs, compared


def lock_match(env_infos: Mapping[str, Mapping], pins: Mapping[str, str] | None) -> dict:
    """The facts of the report's "Installed versions against the lock" part: per env,
    whether the machine ran the locked versions, and the versions that differ."""
    envs = []
    for env, info in env_infos.items():
        diffs, compared = version_differences(info, pins or {})
        _, complete = machine_versions(info)
        envs.append(
            {
                "env": env,
                "python": info.get("python"),
                "compared": compared,
                "complete": complete,
                "diffs": [[env, *d] for d in diffs],
            }
        )
    return {"locked": len(pins or {}), "lock_python": LOCK_PYTHON, "envs": envs if pins else []}
