"""Every rule has a conda env, and each stage's imports are covered by its env file.

The env files can't be created here (no conda channels), so they are checked
statically: each rule's entry script is followed through the dnnroofline modules
it imports, and every third-party import must be a dependency of the rule's env.
"""

import ast
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "workflow" / "scripts"

# import name -> conda package name, where they differ
CONDA_NAME = {
    "torch": "pytorch",
    "cpuinfo": "py-cpuinfo",
    "pynvml": "nvidia-ml-py",
    "yaml": "pyyaml",
    "PIL": "pillow",
    "vl_convert": "vl-convert-python",
    "sklearn": "scikit-learn",
}
# Rules that run inside Snakemake itself (run: blocks) need no env file.
IN_PROCESS_RULES = {"all"}


def rule_blocks():
    for smk in sorted((ROOT / "rules").glob("*.smk")):
        text = smk.read_text()
        for match in re.finditer(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", text, re.S | re.M):
            yield smk.name, match.group(1), match.group(2)


def env_dependencies(env_file: Path) -> set[str]:
    spec = yaml.safe_load(env_file.read_text())
    names = set()
    for dep in spec["dependencies"]:
        if isinstance(dep, str):
            names.add(re.split(r"[=<>! ]", dep, maxsplit=1)[0])
        elif isinstance(dep, dict):  # pip: [...]
            names |= {re.split(r"[=<>! ]", p, maxsplit=1)[0] for p in dep.get("pip", [])}
    return names


def _imports(tree: ast.AST, top_level: bool) -> list[ast.stmt]:
    """The import statements of a module: all of them, or those run on import (outside
    functions)."""
    if not top_level:
        return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    found, todo = [], list(ast.iter_child_nodes(tree))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return found


def third_party_imports(script: Path, seen: set[Path] | None = None) -> set[str]:
    """Top-level third-party modules a script may import: its own imports and, through
    every dnnroofline module it reaches, theirs. A package module is reached through the
    imports that run on import (the script's own, anywhere, run when it runs); each one
    reached counts all its third-party imports, those inside functions too."""
    entry = seen is None
    seen = set() if seen is None else seen
    if script in seen:
        return set()
    seen.add(script)
    tree = ast.parse(script.read_text())
    followed = {id(n) for n in _imports(tree, top_level=not entry)}
    found = set()
    for node in _imports(tree, top_level=False):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        for module in modules:
            top = module.split(".")[0]
            if top != "dnnroofline":
                if top not in sys.stdlib_module_names:
                    found.add(top)
                continue
            if id(node) not in followed:
                continue
            path = SCRIPTS / (module.replace(".", "/") + ".py")
            if not path.exists():
                path = SCRIPTS / module.replace(".", "/") / "__init__.py"
            found |= third_party_imports(path, seen)
            if isinstance(node, ast.ImportFrom):  # from dnnroofline.estimate import x
                for alias in node.names:
                    sub = SCRIPTS / module.replace(".", "/") / f"{alias.name}.py"
                    if sub.exists():
                        found |= third_party_imports(sub, seen)
    return found


RULES = [(f, name, body) for f, name, body in rule_blocks() if name not in IN_PROCESS_RULES]


def test_rules_found():
    names = {name for _, name, _ in RULES}
    assert {"train", "complexity", "ceilings", "ncu", "metrics", "report_sections"} <= names
    assert {"predictions", "prediction_check", "plot_parity"} <= names  # rules/perfmodel.smk


@pytest.mark.parametrize(("smk", "rule", "body"), RULES, ids=[r[1] for r in RULES])
def test_rule_env_covers_its_imports(smk, rule, body):
    conda = re.search(r'conda:\s*\n\s*"([^"]+)"', body)
    assert conda, f"rule {rule} in {smk} has no conda: directive"
    env_file = (ROOT / "rules" / conda.group(1)).resolve()
    assert env_file.exists(), f"rule {rule}: env file {env_file} does not exist"
    deps = env_dependencies(env_file)
    assert "python" in deps
    # entry_script("x.py") in params, or a script: directive's "../workflow/scripts/x.py"
    scripts = re.findall(r'entry_script\("([^"]+)"\)', body)
    scripts += re.findall(r'script:\s*\n\s*"\.\./workflow/scripts/([^"]+)"', body)
    assert scripts, f"rule {rule} calls no entry script"
    for name in scripts:
        needed = {CONDA_NAME.get(m, m) for m in third_party_imports(SCRIPTS / name)}
        missing = needed - deps
        assert not missing, f"rule {rule}: {name} imports {sorted(missing)}, not in {env_file.name}"


def test_import_walker_sees_transitive_imports():
    # complexity.py -> dnnroofline.estimate.complexity -> fvcore: the walk must follow the package.
    assert "fvcore" in third_party_imports(SCRIPTS / "complexity.py")
