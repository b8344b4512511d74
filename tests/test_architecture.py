"""The package's shape, enforced: imports only go down the stages, no import cycles,
short functions and modules, entry scripts without sys.path tricks (issue 27).

The stages, lowest first (a module may import its own subpackage and any earlier one):
base (the modules directly in dnnroofline/) < study < model < measure < ncu < aggregate
< plots < report. Lazy imports inside functions count too.

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

LAYERS = ("base", "study", "model", "measure", "ncu", "aggregate", "plots", "report")
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


def imports_of(source: str, module: str, is_package: bool, known: set[str]) -> list[tuple]:
    """``[(line, imported dnnroofline module)]`` of every import in the source, lazy ones
    inside functions included. ``from pkg import name`` counts as importing
    ``pkg.name`` where that is a module in ``known``, else ``pkg``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                package = module.split(".") if is_package else module.split(".")[:-1]
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.append((node.lineno, candidate if candidate in known else base))
    return [(line, name) for line, name in found if name.split(".")[0] == "dnnroofline"]


def upward_imports(modules: Mapping[str, list[tuple]]) -> list[str]:
    """An import into a later stage, or from a base module into any subpackage."""
    bad = []
    for module, imports in modules.items():
        rank = LAYERS.index(layer_of(module))
        for line, target in imports:
            if target == "dnnroofline":
                continue  # the package root holds only its docstring and version
            if LAYERS.index(layer_of(target)) > rank:
                bad.append(
                    f"{module}:{line} imports {target} ({layer_of(module)} may not import "
                    f"{layer_of(target)})"
                )
    return bad


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
