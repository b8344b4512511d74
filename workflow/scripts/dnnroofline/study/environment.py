"""An env's environment variables (config ``envs.<env>.environment``): what every
measurement of the env runs with, such as glibc's malloc thresholds or an allocator in
LD_PRELOAD, so that two envs on one machine time the difference side by side.

They must be set when the process starts: glibc reads its malloc tunables then, and
the loader reads LD_PRELOAD. So a measurement given ``--environ NAME=VALUE`` starts
itself again with them (:func:`start_with_environment`), before it takes the
measurement lock or imports torch. The flag, not a shell prefix: the same command run
by hand (the report's reproducibility page) runs as the study's did, and the commands of
envs without variables stay as they were, so none of their finished jobs runs again.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence

from dnnroofline.errors import InputError

FLAG = "--environ"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Variables the pipeline sets itself, and what sets them.
RESERVED = {
    "OMP_NUM_THREADS": "the env's threads key (Snakemake sets it from the job's threads)",
    "CUDA_VISIBLE_DEVICES": "the scheduler (Slurm's gres or the machine's owner)",
}
#: Lists the tools around a measurement extend too (ncu injects its library through
#: LD_PRELOAD): the env's entries are added in front of what the process has.
PATH_LISTS = ("LD_PRELOAD", "LD_LIBRARY_PATH")
#: Set in a measurement started again, so that it can never loop.
_RESTARTED = "DNNROOFLINE_ENVIRON_APPLIED"


def from_config(env: str, spec: Mapping) -> dict[str, str]:
    """The env's variables from its config block ``spec``, checked: names of variables,
    none the pipeline sets itself, values that are strings or numbers."""
    block = spec.get("environment") or {}
    key = f"config envs.{env}.environment"
    if not isinstance(block, Mapping):
        raise InputError(f"{key}: a mapping of variable names to values, not {block!r}")
    out = {}
    for name, value in block.items():
        _check_name(str(name), f"{key}.{name}")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise InputError(
                f'{key}.{name}: {value!r} is not a string or a number (quote it, e.g. {name}: "1")'
            )
        out[str(name)] = str(value)
        _check_value(out[str(name)], f"{key}.{name}")
    return out


def _check_name(name: str, where: str) -> None:
    if not _NAME.match(name):
        raise InputError(f"{where}: {name!r} is not a variable name (letters, digits, _)")
    if name in RESERVED:
        raise InputError(f"{where}: {name} is set by {RESERVED[name]}, not here")


def _check_value(value: str, where: str) -> None:
    if "\0" in value:
        raise InputError(f"{where}: a value cannot hold a NUL character")


def flags(environ: Mapping[str, str]) -> list[str]:
    """Command-line flags, each quoted for the shell, that give a measurement ``environ``."""
    return [f"{FLAG} {shlex.quote(f'{k}={v}')}" for k, v in environ.items()]


def parse(assignments: Sequence[str] | None) -> dict[str, str]:
    """``--environ NAME=VALUE`` values as a mapping, each checked as the config is."""
    out = {}
    for text in assignments or ():
        name, sep, value = text.partition("=")
        if not sep:
            raise InputError(f"{FLAG} {text!r}: not NAME=VALUE")
        _check_name(name, f"{FLAG} {text!r}")
        _check_value(value, f"{FLAG} {text!r}")
        out[name] = value
    return out


def add_argument(parser) -> None:
    """The ``--environ`` flag of a measurement script's parser."""
    parser.add_argument(
        FLAG,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="run with this environment variable (the script starts itself again with "
        "it, as glibc and the loader read theirs at start); repeat for more",
    )


def _entries(value: str | None) -> list[str]:
    return [e for e in re.split(r"[:\s]+", value or "") if e]


def merged(current: Mapping[str, str], wanted: Mapping[str, str]) -> dict[str, str]:
    """The environment ``current`` with ``wanted`` set: path lists keep their other
    entries behind the wanted ones."""
    out = dict(current)
    for name, value in wanted.items():
        if name in PATH_LISTS and current.get(name):
            rest = [e for e in _entries(current[name]) if e not in _entries(value)]
            value = ":".join(_entries(value) + rest)
        out[name] = value
    return out


def in_effect(current: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    """Whether ``current`` already has ``wanted`` (a path list: each wanted entry)."""
    for name, value in wanted.items():
        if name in PATH_LISTS:
            if not set(_entries(value)) <= set(_entries(current.get(name))):
                return False
        elif current.get(name) != value:
            return False
    return True


def wanted_in(argv: Sequence[str]) -> dict[str, str]:
    """The ``--environ`` values anywhere in ``argv``, also after ``--`` (a profiler's
    wrapper gives them to the driver it runs, and starts itself with them first)."""
    values, tokens = [], list(argv)
    for i, token in enumerate(tokens):
        if token == FLAG and i + 1 < len(tokens):
            values.append(tokens[i + 1])
        elif token.startswith(FLAG + "="):
            values.append(token[len(FLAG) + 1 :])
    return parse(values)


def start_with_environment(argv: Sequence[str] | None = None) -> None:
    """Start this script again (the same process, by exec) with the ``--environ``
    variables of its command line, unless it has them: first thing in a measurement's
    entry script. Bad values: the error, and exit 2, before anything is measured."""
    prog = os.path.basename(sys.argv[0])
    try:
        wanted = wanted_in(sys.argv[1:] if argv is None else argv)
    except InputError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if in_effect(os.environ, wanted):
        return
    if os.environ.get(_RESTARTED):  # started again and still without them: never loop
        print(f"{prog}: error: {FLAG}: still not in effect after a restart", file=sys.stderr)
        raise SystemExit(2)
    env = {**merged(os.environ, wanted), _RESTARTED: "1"}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def require_in_effect(wanted: Mapping[str, str], current: Mapping[str, str]) -> None:
    """InputError unless ``current`` (the process's environment) has ``wanted``: a driver
    imported rather than started as a script, which :func:`start_with_environment`
    could not restart."""
    missing = [k for k, v in wanted.items() if not in_effect(current, {k: v})]
    if missing:
        raise InputError(
            f"{FLAG}: {', '.join(missing)} not in this process's environment; run the entry "
            "script, which starts itself again with them"
        )
