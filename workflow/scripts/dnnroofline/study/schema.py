"""The config against config/schema.yaml: what jsonschema lets through, and one line
per schema error. Used where a config is read: the Snakefile and scripts/gpu_lease.py
(jsonschema comes with Snakemake)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from dnnroofline.errors import InputError
from dnnroofline.study.config import check_config_files, suggest


def checked_config(
    config: dict, schema_path: str | os.PathLike, configfiles: Iterable[str | os.PathLike] = ()
) -> dict:
    """``config`` (merged from ``configfiles``) as the workflow reads it, with the schema's
    defaults filled in; InputError, one line naming the file or key and the value, where
    a file repeats a key or the config breaks the schema (integers strictly)."""
    from snakemake.utils import validate

    check_config_files(configfiles, yaml.compose)
    check_integers(config, yaml.safe_load(Path(schema_path).read_text()))
    validate(config, str(schema_path), set_default=True)
    return config


def check_integers(config: Any, schema: dict) -> None:
    """Refuse a whole-number float (``8.0``) where the schema wants an integer.

    jsonschema takes 8.0 for an integer (JSON Schema draft 6 on), and the value then
    goes on as a float: a batch size of 8.0 names run ids ``bs8.0`` that no rule
    matches, an ``iters: 10.0`` fails every run at its command line.
    """
    base = jsonschema.validators.validator_for(schema)
    strict = jsonschema.validators.extend(
        base,
        type_checker=base.TYPE_CHECKER.redefine(
            "integer", lambda _checker, v: isinstance(v, int) and not isinstance(v, bool)
        ),
    )
    error = jsonschema.exceptions.best_match(strict(schema).iter_errors(config))
    if error is not None:
        raise InputError(schema_error_message(error))


def schema_error_message(error: object) -> str:
    """One line for a jsonschema ValidationError: the config key path, the bad value and
    what the schema wants, with close names for a misspelt key."""
    parts = [str(p) for p in getattr(error, "absolute_path", [])]
    path = ""
    for p in parts:
        path += f"[{p}]" if p.isdigit() else (f".{p}" if path else p)
    where = f"config {path}" if path else "config"
    validator = getattr(error, "validator", None)
    instance = getattr(error, "instance", None)
    schema = getattr(error, "schema", None) or {}
    message = str(getattr(error, "message", error))
    if validator == "additionalProperties" and isinstance(instance, dict):
        allowed = list((schema.get("properties") or {}).keys())
        extra = [k for k in instance if k not in allowed]
        hints = [f"{k!r}{suggest(str(k), allowed)}" for k in extra]
        return (
            f"{where}: unknown key {', '.join(hints)}; allowed keys: {', '.join(allowed)} "
            "(see config/schema.yaml)"
        )
    if validator == "propertyNames":
        return f"{where}: {message} (names: letters, digits, '_' and '-'; see config/schema.yaml)"
    if validator == "required":
        return f"{where}: {message} (see config/schema.yaml)"
    value = f" {instance!r}" if not isinstance(instance, (dict, list)) else ""
    desc = schema.get("description") if isinstance(schema, dict) else None
    return (
        f"{where}: bad value{value}: {message}"
        + (f" ({desc})" if desc else "")
        + " (see config/schema.yaml)"
    )
