"""The report: one module per section, each computing its facts as plain data, worded by
a Jinja2 template in ``templates/`` (autoescaped; base.html holds the style sheet).

:data:`SECTIONS` is the one list of the report's sections: the rules read it for their
outputs and the report's categories, ``write_report_sections.py`` for the files it
writes, and :mod:`dnnroofline.report.sections` builds one page per entry. Each has its
caption in ``report/{name}.rst``. Two pages are not in it, each written by a rule of its
own where the study has them: the traces (``traces.enabled``) and the comparison with a
baseline (:data:`COMPARE_SECTION`, config ``compare:``). It imports nothing, so the
Snakefile reads it cheaply.
"""

from __future__ import annotations

#: ``(name, category)`` in the report's order: the page is
#: ``results/report_sections/{name}.html``, its caption ``report/{name}.rst``.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("design", "1. Experiment design"),
    ("complexity", "2. Complexity"),
    ("measurement", "3. Measurement"),
    ("roofline", "4. Roofline"),
    ("analysis", "5. Analysis"),
    ("reproducibility", "6. Reproducibility"),
    ("model", "7. Model"),
    ("energy", "8. Energy"),
)
SECTION_NAMES = tuple(name for name, _ in SECTIONS)


def section_file(name: str) -> str:
    """The file name of a section's page."""
    return f"{name}.html"


SECTION_FILES = tuple(section_file(name) for name in SECTION_NAMES)

#: The page of a study compared with a baseline (config ``compare:``): written by a rule of
#: its own (``compare_section``), since a study without a ``compare:`` block has no such
#: page, as the traces page is (``trace_section``); captioned by ``report/{name}.rst``.
#: Its category ends with the baseline's label: "9. Compared with <label>".
COMPARE_SECTION = "before_after"
COMPARE_CATEGORY = "9. Compared with"
