"""What a GPU machine without a package index needs from the lock (``make gpu-wheels``).

The machine has its own torch stack and many packages. A locked package is brought as
a wheel only where the machine lacks it or has a version that breaks a bound on it
(requirements.txt's, or a brought wheel's ``Requires-Dist``). ``scripts/gpu_check.py
wheels`` downloads, reads the wheels' metadata and asks :func:`wheels_to_bring`.
It runs on a bare python3, before any venv: packaging comes from pip's own copy there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from dnnroofline.errors import InputError
from dnnroofline.lockfile import canonical_name

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
    """packaging's markers, requirements, specifiers and versions: pip's own copy on a bare
    python3 (make gpu-wheels runs before any venv exists)."""
    try:
        from packaging import markers, requirements, specifiers, version
    except ImportError:  # pragma: no cover - every venv here has packaging
        from pip._vendor.packaging import markers, requirements, specifiers, version
    return markers, requirements, specifiers, version


def parse_requirements(lines: list[str], where: str) -> dict[str, list[str]]:
    """``{canonical name: [specifier, ...]}`` of requirement lines (comments, options and
    ``-r`` includes are the caller's). A line that is no requirement is an InputError."""
    _, requirements, _, _ = _packaging()
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
    markers, requirements, _, _ = _packaging()
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
    _, _, specifier_sets, versions = _packaging()
    specs = [specifier_sets.SpecifierSet(s) for s in specifiers if s]
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
    torch stack is always the machine's. It starts from every downloadable package brought
    (the most specifiers); fewer brought means fewer specifiers, so it repeats until
    nothing more can be left out.
    """

    def provided(name: str, bring: set[str]) -> bool:
        if _TORCH_STACK.match(name):
            return True
        if name not in installed:
            return False
        specs = list(roots.get(name, []))
        specs += [s for q in bring if q != name for dep, s in requires.get(q, ()) if dep == name]
        return machine_meets(installed[name], specs)

    bring = set(requires)
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
            if provided(name, bring):
                continue
            if name not in requires:
                missing.setdefault(name, []).append(who)
                continue
            needed.add(name)
            stack += [(dep, name) for dep, _ in requires[name]]
        if needed == bring:
            return needed, missing
        bring = needed


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
