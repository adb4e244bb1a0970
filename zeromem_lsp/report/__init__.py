"""Reports of an estimate beyond the terminal: `zeromem estimate --html` (a picture of the training step).

`step.step_report` turns an `Estimate` into plain data (every moment of every phase per stage, the stage table,
the inputs with their origins); `page.render_html` turns that data into one self-contained HTML page. Both are
pure: the CLI writes the file. The figures are the estimate's own (the same integers as `--format json`).
"""

from __future__ import annotations

from zeromem_lsp.report.page import render_html
from zeromem_lsp.report.step import StepReport, step_report


def html_report(estimate) -> str:
    """The estimate's step, per stage, as one self-contained HTML page (inline SVG and CSS, no script)."""
    return render_html(step_report(estimate))


__all__ = ["StepReport", "html_report", "render_html", "step_report"]
