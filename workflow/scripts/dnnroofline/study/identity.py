"""Run identity: the one place that spells a config key, a run id and the result paths.

A config is ``{env}_{model}_{precision}_bs{batch}`` and a run adds ``_run{N}``. Env and
model names may contain underscores, so an identity is never parsed back out of a name:
it is read from what a result file holds (:func:`identity_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from dnnroofline.errors import InputError

# The config key as a pattern: the rules write their wildcard paths with the same
# placeholders, and config_key() formats it.
CONFIG_KEY_PATTERN = "{env}_{model}_{precision}_bs{batch}"


class Identity(NamedTuple):
    """The (env, model, precision, batch) a measurement describes: a point's group."""

    env: str
    model: str
    precision: str
    batch: int


def config_key(env: str, model: str, precision: str, batch: int) -> str:
    """``{env}_{model}_{precision}_bs{batch}``: the stem of a config's result files."""
    return CONFIG_KEY_PATTERN.format(env=env, model=model, precision=precision, batch=int(batch))


def run_id(env: str, model: str, precision: str, batch: int, run: int) -> str:
    """``{env}_{model}_{precision}_bs{batch}_run{N}``: one timed run."""
    return f"{config_key(env, model, precision, batch)}_run{int(run)}"


# The result paths. Each takes wildcard placeholders too ("{menv}", "{model}"), so that
# the rules' patterns and the target lists (dnnroofline.study.targets) share one spelling;
# complexity_path and ncu_path format a batch as an int, so they take real values only.
def env_file(env: str, name: str) -> str:
    """``results/{env}/{name}``: a file of one env's results (``env_info.json``,
    ``ncu/selftest.json``, ``benchmarks/ceilings.tsv``)."""
    return f"results/{env}/{name}"


def config_file(env: str, folder: str, stem: str, suffix: str) -> str:
    """``results/{env}/{folder}/{stem}{suffix}``: a config's or a run's file, ``stem``
    being its config key or run id (``folder`` ``ncu``, ``benchmarks/traces`` ...)."""
    return env_file(env, f"{folder}/{stem}{suffix}")


def complexity_path(model: str, batch: int) -> str:
    return f"results/complexity/{model}_bs{int(batch)}.json"


def inventory_path(model: str, precision: str, batch: int | str, step: str) -> str:
    """The op inventory of (model, precision, batch) in one step variant."""
    return f"results/complexity/{model}_{precision}_bs{batch}_{step}_ops.json"


def ceilings_path(env: str) -> str:
    return env_file(env, "ceilings.json")


def run_path(env: str, run_id: str) -> str:
    """A run's JSON, from its run id."""
    return config_file(env, "runs", run_id, ".json")


def ncu_path(env: str, model: str, precision: str, batch: int) -> str:
    """A config's parsed ncu JSON."""
    return config_file(env, "ncu", config_key(env, model, precision, batch), ".json")


def _record_identity(record: object) -> Identity | None:
    """The identity of a run record (the driver's JSON): ``env`` and ``config``'s
    ``arch``, ``precision`` and ``batch_size``; None where one is missing."""
    if not isinstance(record, Mapping):
        return None
    config = record.get("config")
    if not isinstance(config, Mapping):
        return None
    env, model = record.get("env"), config.get("arch")
    precision, batch = config.get("precision"), config.get("batch_size")
    if not all(isinstance(v, str) and v for v in (env, model, precision)):
        return None
    if isinstance(batch, bool) or not isinstance(batch, int):
        return None
    return Identity(env, model, precision, batch)


def identity_of(doc: object, where: str) -> Identity:
    """The identity a result JSON holds, read from its content, never from its name.

    A run record (a timed run, a trace table) holds it as ``env`` and ``config``; a parsed
    ncu or perf JSON as the record of the driver run it measured (``driver_run``).
    """
    found = _record_identity(doc)
    if found is None and isinstance(doc, Mapping):
        found = _record_identity(doc.get("driver_run"))
    if found is None:
        raise InputError(
            f"{where}: cannot tell which run this is: it needs 'env' and 'config' with "
            "'arch', 'precision' and int 'batch_size' (or a 'driver_run' that has them)"
        )
    return found
