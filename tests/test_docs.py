"""The README a newcomer reads in five minutes, and the pages it sends them to (issue 27,
item 9): short, with the two commands on top, and with no link, anchor or package path
that leads nowhere.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "workflow" / "scripts"

# The pages the README links for everything it no longer says itself.
DOC_PAGES = [
    "docs/method.md",
    "docs/gpu.md",
    "docs/cluster.md",
    "docs/study.md",
    "docs/running.md",
    "docs/report.md",
    "docs/model.md",
    "docs/development.md",
    "docs/contracts.md",
    "docs/compare.md",
]
PAGES = [
    "README.md",
    "BENCHMARKS.md",
    "CHANGELOG.md",
    "examples/h100/README.md",
    "examples/compare/README.md",
    "config/README.md",
    *DOC_PAGES,
]

FENCED = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+?)\s*$", re.M)


def prose(text: str) -> str:
    """The text outside code blocks and code spans, where links are links."""
    return CODE_SPAN.sub(" ", FENCED.sub(" ", text))


def anchors(text: str) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to
    hyphens, a repeated heading numbered from -1."""
    seen: dict[str, int] = {}
    out = set()
    for title in HEADING.findall(FENCED.sub(" ", text)):
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_the_readme_is_read_in_five_minutes():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 250, "README.md: keep it under 250 lines; move detail to docs/"
    first_block = FENCED.search(text).group(0).splitlines()[1:-1]
    assert [line.split("#")[0].strip() for line in first_block] == ["make study", "make test"]
    headings = HEADING.findall(text)
    for wanted in ("On an H100", "What you get", "Study your own model", "Read more"):
        assert any(h.startswith(wanted) for h in headings), f"README.md lacks '{wanted}'"
    for page in DOC_PAGES:
        assert f"]({page})" in text, f"README.md does not link {page}"


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_and_anchor_resolves(page):
    source = ROOT / page
    broken = []
    for target in LINK.findall(prose(source.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        resolved = (source.parent / path).resolve() if path else source
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text()):
            broken.append(f"{target} (no heading gives #{anchor})")
    assert broken == [], f"{page}: links that lead nowhere: {broken}"


def module_defines(module: Path, name: str) -> bool:
    tree = ast.parse(module.read_text())
    for node in tree.body:
        defines = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        if defines and node.name == name:
            return True
        targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def missing_package_path(dotted: str) -> str | None:
    """Why ``dnnroofline.x.y[.name]`` names nothing in the package, or None."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = PACKAGE.joinpath(*parts[:cut])
        module = base.with_suffix(".py")
        if (base / "__init__.py").exists() and cut == len(parts):
            return None
        if module.exists() or (base / "__init__.py").exists():
            rest = parts[cut:]
            if not rest:
                return None
            target = module if module.exists() else base / "__init__.py"
            if len(rest) == 1 and module_defines(target, rest[0]):
                return None
            return f"{dotted} ({target.relative_to(ROOT)} defines no {'.'.join(rest)})"
    return f"{dotted} (no such module)"


@pytest.mark.parametrize("page", PAGES)
def test_the_package_paths_a_page_names_exist(page):
    """Module paths written in the docs follow the package's subpackages by stage."""
    text = (ROOT / page).read_text()
    stale = []
    for path in set(re.findall(r"dnnroofline(?:/\w+)+\.py", text)):
        if not (PACKAGE / path).exists():
            stale.append(path)
    for dotted in set(re.findall(r"\bdnnroofline(?:\.\w+)+", text)):
        if why := missing_package_path(dotted.removesuffix(".py")):
            stale.append(why)
    assert stale == [], f"{page} names package paths that do not exist: {sorted(stale)}"
