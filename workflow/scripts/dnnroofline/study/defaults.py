"""The config's defaults, read from config/schema.yaml: the one place that states them.

The Snakefile fills them into the config (``dnnroofline.study.schema.checked_config``),
and the rules and results/study_config.json read them from there. What runs without that
config reads them here, never from a literal of its own: an entry script's flags (run by
hand, from any folder), a ``Study`` built from a bare dict, and a study_config.json that
an older version wrote before a key existed. ``tests/test_rules.py`` refuses a default
stated anywhere else.

The package always runs from the checkout (``make gpu-wheels`` brings the third-party
packages, never this one; the Snakefile and the entry scripts import it from
workflow/scripts/), so the schema is found from this file, whatever the working folder.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

# the checkout's root (workflow/scripts/dnnroofline/study/ is four folders down)
WORKFLOW_ROOT = Path(__file__).resolve().parents[4]
SCHEMA_PATH = WORKFLOW_ROOT / "config" / "schema.yaml"


@functools.cache
def schema() -> dict:
    """config/schema.yaml, loaded once per process."""
    return yaml.safe_load(SCHEMA_PATH.read_text())


def _node(key: str) -> dict:
    node: Any = schema()
    for part in key.split("."):
        if part == "*":  # every env: the schema's additionalProperties
            node = node.get("additionalProperties")
        else:
            node = (node.get("properties") or {}).get(part)
        if not isinstance(node, dict):
            raise KeyError(f"{SCHEMA_PATH} has no config key {key!r}")
    return node


def default(key: str) -> Any:
    """The schema's default of a dotted config key: ``study.warmup_iters``, or
    ``envs.*.nproc`` for a key of every env. KeyError naming the key where the schema
    has no such key or gives it no default."""
    node = _node(key)
    if "default" not in node:
        raise KeyError(f"{SCHEMA_PATH} gives config key {key!r} no default")
    return copy.deepcopy(node["default"])


def value(block: Mapping | None, key: str) -> Any:
    """``block``'s value of the dotted ``key`` (its last part), else the schema's default:
    for a block that was never filled, such as a study_config.json written by a version
    before the key existed."""
    leaf = key.rsplit(".", 1)[-1]
    given = (block or {}).get(leaf)
    return default(key) if given is None else given


def fill_defaults(config: Any, node: Mapping | None = None) -> Any:
    """Fill the schema's defaults into ``config`` in place where a key is missing (and
    return it), as Snakemake's ``validate(..., set_default=True)`` does: a property with a
    default is set when absent, then its value is filled in turn; an env's keys come from
    ``additionalProperties``. Values of the wrong type are left for the checks to refuse."""
    node = schema() if node is None else node
    if not isinstance(config, dict):
        return config
    properties = node.get("properties") or {}
    for key, sub in properties.items():
        if "default" in sub and key not in config:
            config[key] = copy.deepcopy(sub["default"])
        if key in config:
            fill_defaults(config[key], sub)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        for key, sub_config in config.items():
            if key not in properties:
                fill_defaults(sub_config, extra)
    return config
