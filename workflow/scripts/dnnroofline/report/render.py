"""The report's Jinja2 environment: templates/ in this package, autoescaping on.

Every value that comes from data is escaped by the template; only
:class:`markupsafe.Markup` passes as it is (a fragment that a template, or
:func:`esc`, already made safe). Undefined names fail loudly (StrictUndefined)
instead of rendering empty.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

from dnnroofline.estimate.roofline import HOST_BOUND_BELOW
from dnnroofline.formatting import FILTERS, isnum
from dnnroofline.perfmodel.levers import HIGH_EFFICIENCY, LOW_EFFICIENCY
from dnnroofline.report import data

TEMPLATES = Path(__file__).resolve().parent / "templates"

ENV = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    finalize=lambda v: "" if v is None else v,  # None prints as nothing, as html.escape did
)
ENV.filters.update(FILTERS)
ENV.tests["finite"] = isnum  # {% if x is finite %}: a number, not None or NaN
# the thresholds the sentences quote
ENV.globals.update(
    NOISY_CV=data.NOISY_CV,
    LOW_EFFICIENCY=LOW_EFFICIENCY,
    HIGH_EFFICIENCY=HIGH_EFFICIENCY,
    HIGH_DATA_WAIT=data.HIGH_DATA_WAIT,
    HOST_BOUND_BELOW=HOST_BOUND_BELOW,
)


def render_page(template: str, **facts: Any) -> str:
    """A whole page: ``template`` extends base.html."""
    return ENV.get_template(template).render(**facts)


def section(template: str, facts: Callable[..., dict]) -> Callable[..., str]:
    """A section's page builder: ``facts(...)`` worded by ``template``; it takes what
    ``facts`` takes (same signature and docstring)."""

    @functools.wraps(facts)
    def build(*args: Any, **kwargs: Any) -> str:
        return render_page(template, **facts(*args, **kwargs))

    return build


def fragment(template: str, **facts: Any) -> Markup:
    """A part of a page, rendered from its own template, to pass into a section's facts."""
    return Markup(ENV.get_template(template).render(**facts))


def esc(value: Any) -> Markup:
    """``value`` escaped for HTML text and attributes (None as empty)."""
    return escape("" if value is None else value)


def table(
    headers: Sequence[Any],
    rows: Iterable[Sequence[Any]],
    num_cols: Iterable[int] = (),
    caption: Any = None,
    row_classes: Sequence[str | None] | None = None,
) -> Markup:
    """A table of already formatted cells, for Python code that builds a fragment.

    Cells are escaped unless they are :class:`Markup`. Templates use the same
    macros (macros.html) directly.
    """
    return fragment(
        "table.html",
        headers=list(headers),
        rows=[list(r) for r in rows],
        num=list(num_cols),
        caption=caption,
        classes=list(row_classes or []),
    )


def page(title: str, body: str | Markup) -> str:
    """A self-contained page (the base template's style sheet) around a body of HTML."""
    return render_page("page.html", title=title, body=Markup(body))
