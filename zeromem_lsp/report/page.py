"""A `StepReport` as one self-contained HTML page: inline SVG and CSS, no script, nothing loaded from anywhere.

Pure: data in, a string out. Every string that reaches the page goes through `_e` (html.escape, quotes too).
Per stage, one chart: a stacked column per moment of the step (forward, the loss, backward through the layers, the
optimizer step), one colour per part, on a shared GiB axis, with the GPU budget as a horizontal line; beside it
the stage table and the inputs with their origins. Elements carry the exact integers in `data-` attributes
(`data-stage`, `data-peak`, `data-total`, `data-bytes`, `data-budget`) for tests and for anyone reading the page.
"""

from __future__ import annotations

import zlib
from html import escape

from zeromem_lsp.report.step import RESERVED, Column, StageView, StepReport, shown_value
from zeromem_lsp.units import format_bytes, format_count, format_parameters

GIB = 2**30

#: Colours of the parts the step model names most often; the rest take their family's shades (`_FAMILIES`).
COLOURS = {
    "parameters": "#1f5fa8", "gathered parameters": "#6fa3dc", "fp32 master": "#3b7fc4",
    "16-bit partition copies": "#9cc3ea", "bf16 weight copies": "#9cc3ea", "all-gather outputs": "#b7d4f0",
    "gradients": "#2e8b57", "gradient partitions": "#4aa870", "fp32 gradients": "#7fc79a",
    "accumulated gradients": "#1d6b40", "fresh gradient": "#a5d8b5", "unsharded gradients": "#5fb37f",
    "optimizer states": "#e07b00", "optimizer scratch": "#f5b041", "momentum buffers": "#e07b00",
    "Adagrad sums": "#e07b00", "Adafactor factors": "#e07b00",
    "activations": "#7b4fb0", "recomputed layer": "#a783d1", "layer backward": "#c6addf",
    "logits": "#c0392b", "fp32 logits copy": "#e57368", "log-softmax gradients": "#f1a59d",
    "reduce bucket": "#8d6e63", "DDP buckets": "#8d6e63", "reduce-scatter": "#b49a8f",
    "reference model": "#00838f",
    RESERVED: "#9e9e9e",
}
#: Each part's family by the words in its name (first match wins), with shades for names not in COLOURS.
_FAMILIES = (
    ("reference", ("reference",), ("#00838f", "#26a6b2", "#63c4cc", "#9fdde2", "#006064")),
    ("generation", ("kv cache", "cache", "prefill", "next-token", "token ids"),
     ("#c9a100", "#e6c229", "#f2d866", "#a68400")),
    ("loss", ("logit", "log-softmax", "log-prob", "lm head", "entropy", "hidden", "tile", "loss"),
     ("#c0392b", "#e57368", "#f1a59d", "#922b21", "#d9534f", "#f6c4bf")),
    ("activations", ("activation", "recompute", "layer"), ("#7b4fb0", "#a783d1", "#c6addf", "#5b3585")),
    ("optimizer", ("optimizer", "master", "adam", "momentum", "adagrad", "adafactor", "lion", "lamb", "m, v",
                   "second moment"), ("#e07b00", "#f5b041", "#f8c471", "#b35f00")),
    ("gradients", ("gradient",), ("#2e8b57", "#4aa870", "#7fc79a", "#1d6b40", "#a5d8b5")),
    ("parameters", ("parameter", "weight", "gather", "partition"), ("#1f5fa8", "#6fa3dc", "#3b7fc4", "#9cc3ea")),
    ("buffers", ("bucket", "scatter", "buffer", "copy", "live"), ("#8d6e63", "#b49a8f", "#6d4c41", "#d7c4bb")),
)
#: The order parts are stacked in, bottom up (and listed in the legend): what lives all step long first.
STACKING = ("reserved", "parameters", "reference", "optimizer", "gradients", "activations", "generation", "loss",
            "buffers", "other")

CHART_WIDTH = 1180  # px a chart aims at; columns narrow down to NARROWEST before it grows wider (then it scales)
WIDEST, NARROWEST = 110, 80  # px per moment
PLOT_HEIGHT = 300
LEFT = 74  # the y axis and its labels
RIGHT = 128  # the budget line's label
TOP = 34
LABEL_LINES = 4


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def family_of(name: str) -> str:
    if name == RESERVED:
        return "reserved"
    if name in ("parameters", "gathered parameters", "fp32 master"):
        return "parameters" if name != "fp32 master" else "optimizer"
    lowered = name.lower()
    for family, words, _ in _FAMILIES:
        if any(word in lowered for word in words):
            return family
    return "other"


def colour_of(name: str) -> str:
    """One colour per part name, the same in every stage (and on every page)."""
    if name in COLOURS:
        return COLOURS[name]
    family = family_of(name)
    shades = next((shades for found, _, shades in _FAMILIES if found == family), ("#607d8b", "#90a4ae", "#455a64"))
    return shades[zlib.crc32(name.encode("utf-8")) % len(shades)]


def _stack_key(name: str) -> tuple[int, str]:
    return STACKING.index(family_of(name)), name


def gib_label(value: int) -> str:
    """A tick's label: whole GiB, or up to two decimals below 1 GiB steps."""
    whole, rest = divmod(value, GIB)
    if not rest:
        return f"{whole} GiB"
    return f"{value / GIB:.2f}".rstrip("0").rstrip(".") + " GiB"


def tick_step(top: int) -> int:
    """A round step in bytes giving about five to eight ticks up to `top`."""
    for step in (GIB // 16, GIB // 8, GIB // 4, GIB // 2, GIB, 2 * GIB, 5 * GIB, 10 * GIB, 20 * GIB, 25 * GIB,
                 50 * GIB, 100 * GIB, 200 * GIB, 250 * GIB, 500 * GIB, 1000 * GIB):
        if top // step <= 8:
            return step
    return max(top // 8, 1)


def scale_top(stage: StageView, budget: int | None) -> int:
    """The y axis' top of a stage's chart: its largest column or the budget, up to the next tick."""
    largest = max([column.total for column in stage.columns] + [budget or 0])
    if largest <= 0:
        return GIB
    step = tick_step(largest)
    return (largest // step + 1) * step


def column_width(count: int) -> int:
    """Px per moment: as wide as fits CHART_WIDTH, between NARROWEST and WIDEST."""
    return max(NARROWEST, min(WIDEST, (CHART_WIDTH - LEFT - RIGHT) // max(count, 1)))


def wrap(text: str, width: int = 16, lines: int = LABEL_LINES) -> list[str]:
    """A moment's name in lines of about `width` characters (the last one cut with … when too long)."""
    words, out, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            out.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    if line:
        out.append(line)
    if len(out) > lines:
        out = out[:lines]
        out[-1] = out[-1][: width - 1].rstrip() + "…"
    return out


def _column_svg(column: Column, x: float, bar: int, y_of) -> str:
    """A stacked column: one rect per part, bottom up in STACKING order, each with its exact bytes."""
    rects = []
    base = 0
    for part in sorted(column.parts, key=lambda part: _stack_key(part.name)):
        if part.bytes <= 0:
            continue
        y0, y1 = y_of(base + part.bytes), y_of(base)
        rects.append(f'<rect class="part" x="{x}" y="{y0:.2f}" width="{bar}" height="{max(y1 - y0, 0):.2f}" '
                     f'fill="{colour_of(part.name)}" data-part="{_e(part.name)}" data-bytes="{part.bytes}">'
                     f'<title>{_e(part.name)}: {_e(format_bytes(part.bytes))} ({_e(format_count(part.bytes))} B)'
                     f'</title></rect>')
        base += part.bytes
    marks = ""
    if column.phase_peak:
        y = y_of(column.total)
        weight = "peak" if column.stage_peak else "phase-peak"
        label = f"peak {format_bytes(column.total)}" if column.stage_peak else format_bytes(column.total)
        marks = (f'<rect class="outline {weight}" x="{x - 1.5}" y="{y - 1.5:.2f}" width="{bar + 3}" '
                 f'height="{y_of(0) - y + 3:.2f}"/>'
                 f'<text class="total {weight}" x="{x + bar / 2}" y="{y - 6:.2f}" text-anchor="middle">{_e(label)}</text>')
    title = f"{column.phase}: {column.moment} — {format_bytes(column.total)} ({format_count(column.total)} B)"
    return (f'<g class="moment" data-phase="{_e(column.phase)}" data-moment="{_e(column.moment)}" '
            f'data-total="{column.total}" data-phase-peak="{str(column.phase_peak).lower()}" '
            f'data-stage-peak="{str(column.stage_peak).lower()}"><title>{_e(title)}</title>{"".join(rects)}{marks}</g>')


def stage_chart(stage: StageView, report: StepReport) -> str:
    """One stage's SVG: y axis in GiB, a column per moment, phases bracketed under their moments, the budget."""
    count = len(stage.columns)
    top = scale_top(stage, report.budget)
    each = column_width(count)
    bar = each * 9 // 16
    plot_right = LEFT + count * each
    width = plot_right + RIGHT
    label_height = 14 * LABEL_LINES + 52
    height = TOP + PLOT_HEIGHT + label_height
    bottom = TOP + PLOT_HEIGHT

    def y_of(value: int) -> float:
        return bottom - PLOT_HEIGHT * value / top

    out = [f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" style="max-width:100%;height:auto" data-stage="{_e(stage.key)}">',
           f'<title>{_e(stage.label)}: memory per GPU at each moment of one training step</title>']
    step = tick_step(top)
    out.append('<g class="axis">')
    for value in range(0, top + 1, step):
        y = y_of(value)
        out.append(f'<line class="grid" x1="{LEFT}" x2="{plot_right}" y1="{y:.2f}" y2="{y:.2f}"/>'
                   f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.2f}" text-anchor="end" data-bytes="{value}">'
                   f'{_e(gib_label(value))}</text>')
    out.append(f'<line class="axis-line" x1="{LEFT}" x2="{LEFT}" y1="{TOP - 6}" y2="{bottom}"/>'
               f'<line class="axis-line" x1="{LEFT}" x2="{plot_right}" y1="{bottom}" y2="{bottom}"/>'
               f'<text class="axis-title" x="14" y="{TOP + PLOT_HEIGHT / 2:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 14 {TOP + PLOT_HEIGHT / 2:.0f})">per GPU</text></g>')
    first_of_phase: dict[str, int] = {}
    for index, column in enumerate(stage.columns):
        x = LEFT + index * each + (each - bar) / 2
        first_of_phase.setdefault(column.phase, index)
        out.append(_column_svg(column, x, bar, y_of))
        centre = x + bar / 2
        lines = wrap(column.moment, (each - 6) * 10 // 63)
        spans = "".join(f'<tspan x="{centre}" dy="{0 if n == 0 else 13}">{_e(line)}</tspan>'
                        for n, line in enumerate(lines))
        out.append(f'<text class="moment-label" x="{centre}" y="{bottom + 16}" text-anchor="middle">{spans}'
                   f'<title>{_e(column.moment)}</title></text>')
    # the phases: a bracket under their moments, the phase's peak beside its name
    phases = list(first_of_phase)
    for number, phase in enumerate(phases):
        start = first_of_phase[phase]
        end = first_of_phase[phases[number + 1]] if number + 1 < len(phases) else count
        x0, x1 = LEFT + start * each + 6, LEFT + end * each - 6
        y = bottom + 14 * LABEL_LINES + 16
        peak = stage.phases.get(phase)
        text = f"peak {format_bytes(peak + stage.reserved)}" if peak is not None else ""
        out.append(f'<g class="phase" data-phase="{_e(phase)}"><path d="M{x0} {y - 6} V{y} H{x1} V{y - 6}"/>'
                   f'<text x="{(x0 + x1) / 2}" y="{y + 15}" text-anchor="middle">{_e(phase)}</text>'
                   f'<text class="phase-peak" x="{(x0 + x1) / 2}" y="{y + 29}" text-anchor="middle">{_e(text)}</text>'
                   '</g>')
        if number:
            out.append(f'<line class="phase-divider" x1="{x0 - 6}" x2="{x0 - 6}" y1="{TOP}" y2="{bottom}"/>')
    if report.budget is not None:
        y = y_of(report.budget)
        out.append(f'<g class="budget" data-budget="{report.budget}"><line x1="{LEFT}" x2="{plot_right + 8}" '
                   f'y1="{y:.2f}" y2="{y:.2f}"/><text x="{plot_right + 12}" y="{y - 3:.2f}">GPU budget</text>'
                   f'<text x="{plot_right + 12}" y="{y + 12:.2f}">{_e(format_bytes(report.budget))}</text></g>')
    out.append("</svg>")
    return "".join(out)


def _bytes_cell(value: int | None) -> str:
    if value is None:
        return '<td class="num">—</td>'
    return (f'<td class="num" data-bytes="{value}">{_e(format_bytes(value))}'
            f'<span class="exact">{_e(format_count(value))} B</span></td>')


CHOSEN = ' class="chosen"'


def stage_table(report: StepReport) -> str:
    rows = []
    for stage in report.stages:
        held = (f"{stage.peak_phase}: {stage.peak_moment}" if stage.peak_phase is not None else stage.why or "")
        verdict = stage.verdict or "—"
        rows.append(f'<tr data-stage="{_e(stage.key)}" data-verdict="{_e(stage.verdict)}"'
                    f'{CHOSEN if stage.chosen else ""}>'
                    f'<th scope="row">{"▶ " if stage.chosen else ""}{_e(stage.label)}</th>'
                    f'{_bytes_cell(stage.state)}{_bytes_cell(stage.peak)}'
                    f'<td class="num">{_e(stage.percent or "—")}</td>'
                    f'<td class="verdict {_e(stage.verdict)}">{_e(verdict)}'
                    f'{f" <small>by {_e(stage.judged_by)}</small>" if stage.verdict else ""}</td>'
                    f'<td class="held">{_e(held)}</td></tr>')
    budget = f" of {format_bytes(report.budget)}" if report.budget is not None else ""
    return ('<table class="stages"><thead><tr><th>stage</th><th>model state</th><th>peak</th>'
            f'<th>% of budget{_e(budget)}</th><th>verdict</th><th>peak phase: moment</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def inputs_table(report: StepReport) -> str:
    rows = [f'<tr data-input="{_e(item.name)}"><th scope="row">{_e(item.label)}</th>'
            f'<td>{_e(shown_value(item.given.value))}</td><td class="from">{_e(item.given.note)}</td></tr>'
            for item in report.inputs]
    state = [("P (parameter bytes)", format_count(report.parameter_bytes) + " B", ""),
             ("G (gradient bytes)", format_count(report.gradient_bytes) + " B", ""),
             ("O (optimizer-state bytes)", format_count(report.optimizer_bytes) + " B", ""),
             ("R (ranks)", str(report.world_size), report.world_size_from or "")]
    if report.parameters is not None:
        state.insert(0, ("parameters", f"{format_parameters(report.parameters)} ({format_count(report.parameters)})",
                         ""))
    rows = [f'<tr><th scope="row">{_e(label)}</th><td>{_e(value)}</td><td class="from">{_e(origin)}</td></tr>'
            for label, value, origin in state] + rows
    missing = "".join(f"<li>{_e(item)}</li>" for item in report.missing)
    return ('<table class="inputs"><thead><tr><th>input</th><th>value</th><th>from</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>'
            + (f'<p class="missing">The peak is not computable; missing:</p><ul class="missing">{missing}</ul>'
               if missing else ""))


def legend(report: StepReport) -> str:
    names = {part.name for stage in report.stages for column in stage.columns for part in column.parts
             if part.bytes > 0}
    items = "".join(f'<li data-part="{_e(name)}"><span class="swatch" style="background:{colour_of(name)}"></span>'
                    f'{_e(name)}</li>' for name in sorted(names, key=_stack_key))
    return f'<ul class="legend" aria-label="parts">{items}</ul>' if items else ""


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:#1c1c1c;
background:#fff;margin:24px;max-width:1500px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px}h3{font-size:15px;margin:0 0 6px}
.sub{color:#555;margin:0 0 16px}
table{border-collapse:collapse;margin:8px 0 16px}th,td{padding:4px 10px;border-bottom:1px solid #e3e3e3;
text-align:left;vertical-align:top}thead th{font-weight:600;border-bottom:2px solid #bbb}
td.num{text-align:right;white-space:nowrap}.exact{display:block;color:#777;font-size:11px}
.verdict.fits{color:#1b7f3b;font-weight:600}.verdict.exceeds{color:#b3261e;font-weight:600}
tr.chosen th{font-weight:700}tbody th{white-space:nowrap}td.from{color:#555}
.legend{list-style:none;padding:0;margin:8px 0 12px;display:flex;flex-wrap:wrap;gap:6px 16px}
.legend li{display:flex;align-items:center;gap:6px}.swatch{display:inline-block;width:14px;height:14px;
border-radius:2px;border:1px solid rgba(0,0,0,.2)}
.stage{border:1px solid #ddd;border-radius:6px;padding:12px 14px;margin:0 0 16px;overflow-x:auto}
.stage .head{color:#444;margin:0 0 6px}.why{background:#f6f6f6;border-left:4px solid #9e9e9e;padding:10px 12px}
.approximate{background:#fff6e0;border-left:4px solid #e0a000;padding:10px 12px;margin:12px 0}
svg.chart{display:block;font-size:12px}svg .tick{fill:#555;font-size:11px}svg .grid{stroke:#ececec}
svg .axis-line{stroke:#777}svg .axis-title{fill:#555;font-size:12px}
svg .moment-label{fill:#333;font-size:11px}svg .phase path{fill:none;stroke:#888}
svg .phase text{fill:#222;font-weight:600}svg .phase .phase-peak{fill:#555;font-weight:400}svg .phase-divider{stroke:#ccc;stroke-dasharray:2 3}
svg .part{stroke:#fff;stroke-width:.5}svg .outline{fill:none;stroke:#555;stroke-width:1}
svg .outline.peak{stroke:#111;stroke-width:2}svg .total{fill:#333;font-size:11px}svg .total.peak{font-weight:700}
svg .budget line{stroke:#d62728;stroke-width:2;stroke-dasharray:8 4}svg .budget text{fill:#d62728;font-weight:600}
.missing{color:#8a4b00}footer{color:#777;font-size:12px;margin-top:24px}
"""


def stage_section(stage: StageView, report: StepReport) -> str:
    head = (f"model state {format_bytes(stage.state)}"
            + (f" · peak {format_bytes(stage.peak)} ({stage.peak_phase}, {stage.peak_moment})"
               if stage.peak is not None else "")
            + (f" · {stage.percent} of {format_bytes(report.budget)}, {stage.verdict}"
               if report.budget is not None and stage.percent else "")
            + (f" · {format_bytes(stage.host)} on the host" if stage.host else ""))
    body = (stage_chart(stage, report) if stage.columns else
            f'<p class="why" data-why="{_e(stage.why or "")}">{_e(stage.why or "")}</p>')
    peak = f' data-peak="{stage.peak}"' if stage.peak is not None else ' data-peak=""'
    return (f'<section class="stage" data-stage="{_e(stage.key)}" data-state="{stage.state}"{peak}>'
            f'<h3>{_e(stage.label)}{" (the config’s stage)" if stage.chosen else ""}</h3>'
            f'<p class="head">{_e(head)}</p>{body}</section>')


def render_html(report: StepReport) -> str:
    """The whole page: title, approximation notice, legend, one chart per stage, the stage table, the inputs."""
    model = (f"{format_parameters(report.parameters)} parameters, " if report.parameters is not None else "")
    budget = f", budget {format_bytes(report.budget)} per GPU" if report.budget is not None else ""
    cheapest = ""
    if report.budget is not None:
        cheapest = (f" Cheapest stage that fits: {report.cheapest}." if report.cheapest is not None
                    else " No stage fits the budget.")
    approximate = ""
    if report.approximate:
        lines = "".join(f"<li>{_e(line)}</li>" for line in report.approximations)
        approximate = (f'<div class="approximate" data-approximate="true"><strong>{_e(report.approximate)}</strong>'
                       f'<ul class="ignored">{lines}</ul></div>')
    assumptions = "".join(f"<li>{_e(item)}</li>" for item in report.assumptions)
    charted = any(stage.columns for stage in report.stages)
    explain = ("Each column is one moment of a training step (steady state: the optimizer state exists), "
               "stacked by what is alive then on one GPU; the outlined column of each phase holds that phase's "
               "peak, the boldest the stage's. Each chart has its own scale. Hover a block for its exact bytes." if charted else "")
    return "".join([
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e('zeromem: memory per GPU through one training step')}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{_e('Memory per GPU through one training step')}</h1>",
        f'<p class="sub">{_e(f"{model}{report.world_size} ranks, {report.family}{budget}.{cheapest}")}</p>',
        approximate,
        f'<p>{_e(explain)}</p>' if explain else "",
        legend(report),
        "".join(stage_section(stage, report) for stage in report.stages),
        "<h2>Stages</h2>", stage_table(report),
        "<h2>Inputs</h2>", inputs_table(report),
        f'<h2>Assumptions</h2><ul class="assumptions">{assumptions}</ul>' if assumptions else "",
        f"<footer>{_e('zeromem estimate --html: the figures of zeromem estimate --format json (exact bytes in each block’s tooltip).')}</footer>",
        "</body></html>\n",
    ])


__all__ = ["COLOURS", "colour_of", "family_of", "render_html", "scale_top", "stage_chart", "tick_step", "wrap"]
