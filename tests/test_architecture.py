"""The package's shape, enforced: imports only go down the stages, no import cycles,
no private name (``_name``) used across modules, short functions and modules, entry
scripts without sys.path tricks (issue 27, issue 38).

The stages, lowest first (a module may import its own subpackage and any stage below
it): base (the contracts and helpers directly in dnnroofline/: errors, io, formatting,
stats, processes, lockfile, install_cache) < study < estimate (what is known before
anything runs: op counts, complexity, traffic, the roofline's arithmetic) < {measure,
ncu} < perfmodel (the performance model, fitted on what was measured) < aggregate <
{plots, report} < tools (whole applications: the GPU lease, the GPU wheel check). The
braces are siblings, independent of each other: the runs and the ncu captures are
measured apart, and the plots and the report both read aggregate's tables; neither of
a pair imports the other. Lazy imports inside functions count too.

Each check is a function of source text, unit-tested below on small planted violations,
then run on the real tree.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "workflow" / "scripts"
PACKAGE = SCRIPTS / "dnnroofline"

#: Each stage and the stages directly below it; what it may import is their closure.
STAGES_BELOW = {
    "base": (),
    "study": ("base",),
    "estimate": ("study",),
    "measure": ("estimate",),
    "ncu": ("estimate",),
    "perfmodel": ("measure", "ncu"),
    "aggregate": ("perfmodel",),
    "plots": ("aggregate",),
    "report": ("aggregate",),
    "tools": ("plots", "report"),
}
LAYERS = tuple(STAGES_BELOW)
#: Pairs of stages at the same height that never import each other.
SIBLINGS = (("measure", "ncu"), ("plots", "report"))
MAX_FUNCTION_LINES = 100
MAX_MODULE_LINES = 700


# ---------------------------------------------------------------- the checkers


def module_name(path: Path, package_root: Path = SCRIPTS) -> str:
    """``dnnroofline.ncu.parse`` for .../dnnroofline/ncu/parse.py (a package's
    ``__init__.py`` is the package itself)."""
    parts = list(path.relative_to(package_root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str:
    """The stage a ``dnnroofline`` module belongs to: its subpackage, or ``base`` for a
    module directly in the package (and the package itself)."""
    parts = module.split(".")
    if parts[0] != "dnnroofline":
        raise ValueError(f"{module!r} is not a dnnroofline module")
    if len(parts) >= 2 and parts[1] in LAYERS[1:]:
        return parts[1]
    if len(parts) >= 3:
        raise ValueError(f"{module!r} is in a subpackage that is no stage: one of {LAYERS[1:]}")
    return "base"


def may_import(stages_below: Mapping[str, tuple[str, ...]] = STAGES_BELOW) -> dict[str, set]:
    """Each stage and every stage below it, itself included (the closure of ``stages_below``)."""
    allowed: dict[str, set] = {}

    def closure(stage: str) -> set:
        if stage not in allowed:
            allowed[stage] = {stage}.union(*(closure(lower) for lower in stages_below[stage]))
        return allowed[stage]

    for stage in stages_below:
        closure(stage)
    return allowed


def resolve_from(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a ``from X import ...`` names, a relative one resolved against
    this module's package."""
    base = node.module or ""
    if not node.level:
        return base
    package = module.split(".") if is_package else module.split(".")[:-1]
    anchor = package[: len(package) - (node.level - 1)]
    return ".".join(anchor + ([base] if base else []))


def imports_of(source: str, module: str, is_package: bool, known: set[str]) -> list[tuple]:
    """``[(line, imported dnnroofline module)]`` of every import in the source, lazy ones
    inside functions included. ``from pkg import name`` counts as importing
    ``pkg.name`` where that is a module in ``known``, else ``pkg``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = resolve_from(node, module, is_package)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.append((node.lineno, candidate if candidate in known else base))
    return [(line, name) for line, name in found if name.split(".")[0] == "dnnroofline"]


def upward_imports(modules: Mapping[str, list[tuple]]) -> list[str]:
    """An import into a stage that is not below the importer's: a later one, a sibling,
    or from a base module into any subpackage."""
    allowed = may_import()
    bad = []
    for module, imports in modules.items():
        for line, target in imports:
            if target == "dnnroofline":
                continue  # the package root holds only its docstring and version
            if layer_of(target) not in allowed[layer_of(module)]:
                bad.append(
                    f"{module}:{line} imports {target} ({layer_of(module)} may not import "
                    f"{layer_of(target)})"
                )
    return bad


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(source: str, module: str, is_package: bool, known: set[str]) -> list[str]:
    """Every private name (``_name``, dunders aside) of another dnnroofline module that the
    source uses: ``from X import _name``, and ``X._name`` where ``X`` is a module it
    imported (``from pkg import X``, ``import X as y``, ``import dnnroofline.X``)."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # a local name -> the dnnroofline module it is bound to
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in known:
                    modules[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = resolve_from(node, module, is_package)
            if base.split(".")[0] != "dnnroofline":
                continue
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    modules[alias.asname or alias.name] = f"{base}.{alias.name}"
                elif is_private(alias.name) and base != module:
                    found.append(f"line {node.lineno}: from {base} import {alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            owner = ast.unparse(node.value)
            owner = modules.get(owner, owner)
            if owner in known and owner != module:
                found.append(f"line {node.lineno}: {owner}.{node.attr}")
    return sorted(found, key=lambda text: int(text.split(":")[0].split()[1]))


def import_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module that
    imports itself): each is an import cycle (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    cycles.append(sorted(component))
    return cycles


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int, int]]:
    """``[(name, first line, length)]`` of every function or method (nested ones too)
    longer than ``limit`` lines, decorators excluded."""
    return [
        (node.name, node.lineno, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > limit
    ]


def path_tricks(source: str) -> list[str]:
    """What an entry script does to find the package other than importing it: any use of
    ``sys.path``, and ``noqa: E402`` (an import below code, which a sys.path edit needs)."""
    tricks = [
        f"line {node.lineno}: sys.path"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    ]
    tricks += [
        f"line {number}: noqa: E402"
        for number, text in enumerate(source.splitlines(), 1)
        if "noqa: E402" in text
    ]
    return tricks


# ------------------------------------------------------------- the real tree


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def package_imports() -> dict[str, list[tuple]]:
    paths = package_modules()
    known = set(paths)
    return {
        name: imports_of(path.read_text(), name, path.name == "__init__.py", known)
        for name, path in paths.items()
    }


def python_files() -> Iterator[Path]:
    """The code the size limits hold for: workflow/scripts/ (entry scripts and the
    package) and scripts/."""
    yield from sorted(SCRIPTS.rglob("*.py"))
    yield from sorted((ROOT / "scripts").rglob("*.py"))


def test_every_package_module_is_in_a_stage():
    assert {layer_of(name) for name in package_modules()} <= set(LAYERS)


def test_imports_only_go_down_the_stages():
    found = upward_imports(package_imports())
    assert not found, "\n".join(found)


def test_siblings_are_declared_independent():
    allowed = may_import()
    for one, other in SIBLINGS:
        assert other not in allowed[one] and one not in allowed[other], (one, other)
    # Everything else keeps the old order: each stage may import every earlier stage
    # of LAYERS except its sibling.
    siblings = {frozenset(pair) for pair in SIBLINGS}
    for rank, stage in enumerate(LAYERS):
        expected = {s for s in LAYERS[: rank + 1] if frozenset((s, stage)) not in siblings}
        assert allowed[stage] == expected, stage


def test_siblings_never_import_each_other():
    found = [
        f"{module}:{line} imports {target}"
        for module, imports in package_imports().items()
        for line, target in imports
        for pair in SIBLINGS
        if target != "dnnroofline" and {layer_of(module), layer_of(target)} == set(pair)
    ]
    assert not found, "\n".join(found)


def test_no_private_name_used_across_modules():
    known = set(package_modules())
    found = [
        f"{path.relative_to(ROOT)} {use}"
        for path in sorted(SCRIPTS.rglob("*.py"))
        for use in private_imports(
            path.read_text(), module_name(path), path.name == "__init__.py", known
        )
    ]
    assert not found, "\n".join(found)


def test_no_import_cycles():
    graph = {
        module: {target for _, target in imports} for module, imports in package_imports().items()
    }
    cycles = import_cycles(graph)
    assert not cycles, "\n".join(" <-> ".join(cycle) for cycle in cycles)


def test_no_function_over_100_lines():
    found = [
        f"{path.relative_to(ROOT)}:{line} {name} ({length} lines)"
        for path in python_files()
        for name, line, length in long_functions(path.read_text())
    ]
    assert not found, "\n".join(found)


def test_no_module_over_700_lines():
    found = [
        f"{path.relative_to(ROOT)} ({lines} lines)"
        for path in python_files()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not found, "\n".join(found)


def test_entry_scripts_import_the_package_plainly():
    found = [
        f"{path.relative_to(ROOT)} {trick}"
        for path in sorted(SCRIPTS.glob("*.py"))
        for trick in path_tricks(path.read_text())
    ]
    assert not found, "\n".join(found)


# ----------------------------------------------- the checkers, on planted faults

KNOWN = {
    "dnnroofline",
    "dnnroofline.io",
    "dnnroofline.study",
    "dnnroofline.study.config",
    "dnnroofline.measure",
    "dnnroofline.measure.train",
    "dnnroofline.report",
    "dnnroofline.report.data",
}


def test_module_name_of_a_module_and_of_a_package():
    assert module_name(PACKAGE / "ncu" / "parse.py") == "dnnroofline.ncu.parse"
    assert module_name(PACKAGE / "ncu" / "__init__.py") == "dnnroofline.ncu"
    assert module_name(PACKAGE / "io.py") == "dnnroofline.io"


def test_layer_of_base_and_subpackage_modules():
    assert layer_of("dnnroofline.errors") == "base"
    assert layer_of("dnnroofline") == "base"
    assert layer_of("dnnroofline.ncu.parse") == "ncu"
    assert layer_of("dnnroofline.report") == "report"
    with pytest.raises(ValueError, match="no stage"):
        layer_of("dnnroofline.misc.helpers")


def test_imports_of_finds_lazy_relative_and_from_imports():
    source = (
        "import os\n"
        "from dnnroofline.study import config\n"
        "import dnnroofline.io\n"
        "def later():\n"
        "    from dnnroofline.measure.train import main\n"
        "    from . import data\n"
        "    from ..io import read_json\n"
    )
    found = imports_of(source, "dnnroofline.report.render", False, KNOWN)
    assert found == [
        (2, "dnnroofline.study.config"),
        (3, "dnnroofline.io"),
        (5, "dnnroofline.measure.train"),
        (6, "dnnroofline.report.data"),
        (7, "dnnroofline.io"),
    ]


def test_upward_import_is_found_lazy_or_not():
    modules = {
        "dnnroofline.study.config": imports_of(
            "def f():\n    from dnnroofline.measure import train\n",
            "dnnroofline.study.config",
            False,
            KNOWN,
        ),
        "dnnroofline.measure.train": [(1, "dnnroofline.study.config"), (2, "dnnroofline.io")],
    }
    assert upward_imports(modules) == [
        "dnnroofline.study.config:2 imports dnnroofline.measure.train "
        "(study may not import measure)"
    ]


def test_base_module_may_import_only_base():
    modules = {"dnnroofline.io": [(4, "dnnroofline.study.config"), (5, "dnnroofline.errors")]}
    assert upward_imports(modules) == [
        "dnnroofline.io:4 imports dnnroofline.study.config (base may not import study)"
    ]


def test_import_cycles_are_found_and_a_dag_has_none():
    dag = {"a": {"b", "c"}, "b": {"c"}, "c": set()}
    assert import_cycles(dag) == []
    loop = {"study": {"ceilings"}, "ceilings": {"train_config"}, "train_config": {"study"}}
    two = {"train": {"ddp"}, "ddp": {"train"}, "other": {"train"}}
    assert import_cycles({**loop, **two}) == [
        ["ceilings", "study", "train_config"],
        ["ddp", "train"],
    ]
    assert import_cycles({"self": {"self"}}) == [["self"]]


def test_long_function_is_found_nested_too():
    body = "".join(f"    x{i} = {i}\n" for i in range(100))
    nested = body.replace("    ", "            ")
    source = (
        f"def long():\n{body}\n"
        "def short():\n    pass\n\n"
        f"class C:\n    def m(self):\n        def inner():\n{nested}"
    )
    found = long_functions(source)
    assert [(name, line, length) for name, line, length in found] == [
        ("long", 1, 101),
        ("m", 107, 102),
        ("inner", 108, 101),
    ]
    assert long_functions("def f():\n" + "    pass\n" * 99) == []


def test_path_tricks_are_found():
    source = (
        "import sys\n"
        "sys.path.insert(0, 'x')\n"
        "from dnnroofline import io  # noqa: E402\n"
        "print(sys.argv)\n"
    )
    assert path_tricks(source) == ["line 2: sys.path", "line 3: noqa: E402"]
    assert path_tricks("import sys\nfrom dnnroofline import io\nprint(sys.argv)\n") == []


def test_sibling_import_is_found_either_way():
    modules = {
        "dnnroofline.ncu.parse": [(3, "dnnroofline.measure.train"), (4, "dnnroofline.io")],
        "dnnroofline.plots.kernels": [(7, "dnnroofline.report.data")],
        "dnnroofline.report.data": [(9, "dnnroofline.plots.roofline")],
        "dnnroofline.aggregate.points": [(2, "dnnroofline.ncu.parse")],
    }
    assert upward_imports(modules) == [
        "dnnroofline.ncu.parse:3 imports dnnroofline.measure.train (ncu may not import measure)",
        "dnnroofline.plots.kernels:7 imports dnnroofline.report.data (plots may not import report)",
        "dnnroofline.report.data:9 imports dnnroofline.plots.roofline "
        "(report may not import plots)",
    ]


def test_may_import_is_the_closure_of_the_stages_below():
    allowed = may_import({"low": (), "left": ("low",), "right": ("low",), "top": ("left", "right")})
    assert allowed == {
        "low": {"low"},
        "left": {"left", "low"},
        "right": {"right", "low"},
        "top": {"top", "left", "right", "low"},
    }


def test_private_imports_are_found_in_every_form():
    known = KNOWN | {"dnnroofline.report.render"}
    source = (
        "import dnnroofline.io\n"
        "import dnnroofline.study.config as cfg\n"
        "from dnnroofline.report.data import _rows, public, __version__\n"
        "from dnnroofline.measure import train\n"
        "from . import render\n"
        "from ._private_mod import thing\n"
        "from torch.optim.optimizer import _get_foreach\n"
        "def later():\n"
        "    from ..io import _tmp\n"
        "    return train._stderr, cfg._KEYS, dnnroofline.io._x, render._gid, os._exit\n"
    )
    found = private_imports(source, "dnnroofline.report.sections", False, known)
    assert found == [
        "line 3: from dnnroofline.report.data import _rows",
        "line 9: from dnnroofline.io import _tmp",
        "line 10: dnnroofline.measure.train._stderr",
        "line 10: dnnroofline.study.config._KEYS",
        "line 10: dnnroofline.io._x",
        "line 10: dnnroofline.report.render._gid",
    ]


def test_private_names_of_the_module_itself_are_its_own():
    source = "from dnnroofline.report.data import _rows\nfrom dnnroofline.io import read_json\n"
    assert private_imports(source, "dnnroofline.report.data", False, KNOWN) == []
