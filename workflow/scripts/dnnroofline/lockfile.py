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


#: What a GPU machine's own torch brings with it: ``make gpu-wheels`` leaves these out.
_TORCH_STACK = re.compile(r"^(torch|torchvision|triton|nvidia-.+|cuda-.+)$")
_FREEZE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?:==\s*(\S+)|@.*)?$")


def parse_installed(text: str, where: str) -> dict[str, str | None]:
    """``{canonical name: version or None}`` of a machine's ``pip freeze`` (or of a list
    of names, one a line: versions unknown).

    ``name==version``, ``name @ url`` and bare names count; ``-e`` lines, comments and
    blank lines are skipped; anything else is an InputError naming the file and line.
    """
    installed: dict[str, str | None] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-e "):
            continue
        match = _FREEZE.match(line)
        if not match:
            raise InputError(
                f"{where} line {number}: {line!r} is not a package name, name==version "
                "or name @ url (write it with: pip freeze)"
            )
        installed[canonical_name(match.group(1))] = match.group(2)
    return installed


def wheel_pins(pins: Mapping[str, str], installed: Mapping[str, str | None]) -> dict[str, str]:
    """The locked pins to download for a GPU machine without a package index: all but the
    torch stack (the machine's own torch is used) and what the machine has at the locked
    version. :func:`wheels_to_bring` then keeps only those the machine needs."""
    return {
        name: version
        for name, version in sorted(pins.items())
        if not _TORCH_STACK.match(name) and installed.get(name, "") != version
    }


#: The conda env files of the measuring stages (env_info, ceilings, train, trace, ncu,
#: ncu_selftest, perf): with Snakemake, what a machine needs to run ``snakemake measure``.
MEASURE_ENV_FILES = ("envs/machine.yaml", "envs/train.yaml", "envs/profile.yaml")

#: Specifier operators that a newer release can break: a version the machine has but
#: did not say is taken as recent, so a floor is met and one of these may not be.
_CAPS = ("<", "<=", "==", "===", "~=", "!=")


def _packaging():
    """packaging's requirements, markers and versions: pip's own copy on a bare python3
    (make gpu-wheels runs before any venv exists)."""
    try:
        from packaging import markers, requirements, version
    except ImportError:  # pragma: no cover - every venv here has packaging
        from pip._vendor.packaging import markers, requirements, version
    return markers, requirements, version


def parse_requirements(lines: list[str], where: str) -> dict[str, list[str]]:
    """``{canonical name: [specifier, ...]}`` of requirement lines (comments, options and
    ``-r`` includes are the caller's). A line that is no requirement is an InputError."""
    _, requirements, _ = _packaging()
    out: dict[str, list[str]] = {}
    for number, raw in enumerate(lines, start=1):
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line or line.startswith("-"):
            continue
        try:
            req = requirements.Requirement(line)
        except requirements.InvalidRequirement as exc:
            raise InputError(
                f"{where} line {number}: {line!r} is not a requirement: {exc}"
            ) from None
        specs = out.setdefault(canonical_name(req.name), [])
        if str(req.specifier):
            specs.append(str(req.specifier))
    return out


def requires_dist(metadata: str, python_version: str) -> list[tuple[str, str]]:
    """``[(canonical name, specifier)]`` of a wheel's METADATA ``Requires-Dist`` lines that
    apply on CPython ``python_version`` on x86_64 Linux (extras not asked for: left out)."""
    markers, requirements, _ = _packaging()
    target = {
        "python_version": python_version,
        "python_full_version": f"{python_version}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "extra": "",
    }
    out = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = requirements.Requirement(line.split(":", 1)[1].strip())
        try:
            applies = req.marker is None or req.marker.evaluate(target)
        except markers.UndefinedEnvironmentName:
            applies = False
        if applies:
            out.append((canonical_name(req.name), str(req.specifier)))
    return out


def machine_meets(version: str | None, specifiers: list[str]) -> bool:
    """Whether a machine's ``version`` of a package meets every specifier. ``None`` (a name
    listed without its version) is taken as a recent release: it meets floors, not caps."""
    _, requirements, versions = _packaging()
    specs = [requirements.Requirement(f"x{s}").specifier for s in specifiers if s]
    if version is None:
        return not any(spec.operator in _CAPS for group in specs for spec in group)
    release = versions.Version(version.split("+", 1)[0])  # 2.11.0+cu130 is a 2.11.0
    return all(group.contains(release, prereleases=True) for group in specs)


def wheels_to_bring(
    roots: Mapping[str, list[str]],
    requires: Mapping[str, list[tuple[str, str]]],
    installed: Mapping[str, str | None],
) -> tuple[set[str], dict[str, list[str]]]:
    """``(names to bring as wheels, {needed name: [who needs it]} that cannot be brought)``.

    ``roots``: what will be installed, with its specifiers (requirements.txt's);
    ``requires``: each downloadable package's dependencies (:func:`requires_dist`);
    ``installed``: the machine's packages (:func:`parse_installed`). A package is brought
    when it is needed (a root, or a dependency of one brought) and the machine's own
    does not meet the specifiers on it of the roots and of the packages brought; the
    torch stack is always the machine's. Fewer packages brought means fewer specifiers,
    so this repeats until nothing more can be left out.
    """

    def provided(name: str, bring: set[str]) -> bool:
        if _TORCH_STACK.match(name):
            return True
        if name not in installed:
            return False
        specs = list(roots.get(name, []))
        specs += [s for q in bring if q != name for dep, s in requires.get(q, ()) if dep == name]
        return machine_meets(installed[name], specs)

    bring: set[str] | None = None
    while True:
        needed: set[str] = set()
        missing: dict[str, list[str]] = {}
        stack = [(name, "the requirements") for name in sorted(roots)]
        seen: set[str] = set()
        while stack:
            name, who = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if bring is not None and provided(name, bring):
                continue
            if bring is None and _TORCH_STACK.match(name):
                continue
            if name not in requires:
                if not provided(name, set()):
                    missing.setdefault(name, []).append(who)
                continue
            needed.add(name)
            stack += [(dep, name) for dep, _ in requires[name]]
        if needed == bring:
            return needed, missing
        bring = needed


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


def env_file_dependencies(text: str) -> list[str]:
    """The ``dependencies:`` entries of a conda env file, read without a YAML parser
    (make gpu-wheels runs on a bare python3): one ``  - name==version`` a line."""
    deps, inside = [], False
    for line in text.splitlines():
        if re.match(r"^\S", line):
            inside = line.split("#", 1)[0].strip() == "dependencies:"
        elif inside:
            match = re.match(r"^\s+-\s+([^#:]+?)\s*(#.*)?$", line)
            if match:
                deps.append(match.group(1))
    return deps


def env_file_disagreements(spec: Mapping, pins: Mapping[str, str], where: str) -> list[str]:
    """How a conda env file disagrees with the lock: a locked package left unpinned or
    pinned to another version (python is the lock's :data:`LOCK_PYTHON`). Empty: it agrees."""
    problems = []
    for name, version in conda_pins(spec, where).items():
        conda = CONDA_NAMES.get(name, name)
        if name == "python":
            if version != LOCK_PYTHON:
                problems.append(f"{where}: python={version} but the lock is for {LOCK_PYTHON}")
        elif name not in pins:
            problems.append(f"{where}: {conda} is not in the lock")
        elif version is None:
            problems.append(f"{where}: {conda} is not pinned (the lock has =={pins[name]})")
        elif version != pins[name]:
            problems.append(f"{where}: {conda}=={version} but the lock has =={pins[name]}")
    return problems


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
