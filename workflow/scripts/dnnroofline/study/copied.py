"""Results copied in from another machine: the envs this machine does not measure whose
``results/{env}/`` folder is here, checked, and what each folder holds.

The folder is read once, when the workflow is parsed (:func:`find_copied_envs`); the target
lists (:mod:`dnnroofline.study.targets`) are then pure functions of what was found. Paths
are relative to the working directory, as the rules write them.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from dnnroofline.errors import InputError
from dnnroofline.study.identity import env_file

#: What a copied folder must hold to be used: the machine's fingerprint and its roofs.
WHOLE_ENV_FILES = ("env_info.json", "ceilings.json")

#: ``check(env, declared, fingerprint, where)``: refuses (InputError) a fingerprint that is
#: not the declared machine's (``dnnroofline.measure.envinfo.check_copied_env``).
FingerprintCheck = Callable[[str, Mapping, Mapping, str], None]


@dataclass(frozen=True)
class CopiedEnv:
    """One env's copied results folder, as found: the files the target lists read."""

    name: str
    runs: tuple[str, ...] = ()  # runs/*.json
    ncu: tuple[str, ...] = ()  # ncu/*.json, the self-test's left out
    trace_tables: frozenset[str] = frozenset()  # traces/*.ops.json
    efficiency: bool = False  # efficiency.json is there
    selftest: bool = False  # ncu/selftest.json is there


def _found(env: str, pattern: str) -> list[str]:
    """The files of results/{env}/ matching ``pattern``, sorted (glob: no hidden files)."""
    return sorted(glob.glob(env_file(env, pattern)))


def read_copied_env(env: str) -> CopiedEnv:
    """What results/{env}/ holds of the files the study reads."""
    selftest = env_file(env, "ncu/selftest.json")
    return CopiedEnv(
        name=env,
        runs=tuple(_found(env, "runs/*.json")),
        ncu=tuple(f for f in _found(env, "ncu/*.json") if f != selftest),
        trace_tables=frozenset(_found(env, "traces/*.ops.json")),
        efficiency=os.path.exists(env_file(env, "efficiency.json")),
        selftest=os.path.exists(selftest),
    )


def _checked_fingerprint(env: str, declared: Mapping, check: FingerprintCheck) -> None:
    where = env_file(env, "env_info.json")
    try:
        with open(where) as fh:
            fingerprint = json.load(fh)
    except (OSError, ValueError) as err:
        raise InputError(f"{where}: cannot read the copied fingerprint: {err}") from None
    check(env, declared, fingerprint, where)


def find_copied_envs(
    envs: Mapping[str, Mapping], measured: Iterable[str], check: FingerprintCheck
) -> list[CopiedEnv]:
    """Envs not measured here whose results were copied into results/{env}/, in config order.

    A copied folder must be whole (env_info.json and ceilings.json) and come from the
    machine its env declares (``check``); otherwise InputError stops the study before any
    job, rather than ignore those results or file them under the wrong machine. A folder
    with neither those files nor runs holds nothing copied, and is passed over.
    """
    measured = set(measured)
    found = []
    for env, declared in envs.items():
        if env in measured or not os.path.isdir(env_file(env, "")):
            continue
        have = [name for name in WHOLE_ENV_FILES if os.path.exists(env_file(env, name))]
        if not have and not _found(env, "runs/*.json"):
            continue
        lacking = [name for name in WHOLE_ENV_FILES if name not in have]
        if lacking:
            raise InputError(
                f"results/{env}/ holds results of env {env!r}, which this machine does not "
                f"measure, but lacks {' and '.join(lacking)}: copy the whole results/{env}/ "
                f"folder from env {env!r}'s machine (after its env_info and ceilings jobs ran)"
            )
        _checked_fingerprint(env, declared, check)
        found.append(read_copied_env(env))
    return found
