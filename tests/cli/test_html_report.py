"""`zeromem estimate --html PATH` (issue 28, item 3): one self-contained page picturing the training step per stage.

Through the real entry point (a subprocess): the page is written, loads nothing from anywhere, shows every stage
the engine has, the budget line, and the very integers `--format json` prints — every moment's parts sum to its
column, the column holding each phase's peak is that phase's peak plus reserved, the one holding the stage's
peak has the JSON's parts. Then in a real headless Chromium (Debian's `chromium` driven by Playwright; skipped
when either is missing): no console error, every stage's group and the budget line in the DOM, a screenshot
that is not blank."""

from __future__ import annotations

import json
import os
import shutil
import struct
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem_subprocess
from tests.cli.test_approximate import LONG_CONTEXT, RECIPE, _project

ROOT = Path(__file__).resolve().parents[2]
LLAMA = str(ROOT / "tests" / "data" / "models" / "Meta-Llama-3-8B" / "config.json")
QWEN = str(ROOT / "tests" / "data" / "models" / "Qwen2.5-7B" / "config.json")
STEP = ("--model-config", LLAMA, "--world-size", "8", "--sequence-length", "4096", "--micro-batch", "1")

#: Commands whose page must agree with their JSON: DeepSpeed's four stages, FSDP's three, torch's DDP, gradient
#: accumulation (a later micro-batch's moments), a DPO reference model in every moment, LoRA on a frozen base.
CASES = {
    "deepspeed": (*STEP, "--gpu-memory", "80GiB"),
    "fsdp": (*STEP, "--engine", "fsdp", "--gpu-memory", "40GiB"),
    "torch": ("--model-config", QWEN, "--world-size", "2", "--sequence-length", "1024", "--micro-batch", "2",
              "--engine", "torch", "--gpu-memory", "80GiB"),
    "accumulation": (*STEP, "--gradient-accumulation-steps", "4", "--gradient-checkpointing"),
    "dpo": (*STEP, "--trainer", "dpo", "--gpu-memory", "80GiB"),
    "lora": (*STEP, "--lora-rank", "16", "--lora-targets", "q_proj,v_proj", "--gpu-memory", "24GiB"),
}


class Page(HTMLParser):
    """The elements of a page that carry data- attributes, in document order, with their ancestors' data-; and
    every tag and attribute seen (for the self-containment checks)."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[dict] = []
        self.tags: list[tuple[str, dict]] = []
        self._stack: list[dict] = []
        self.text: list[str] = []
        self.feed(text)

    VOID = {"meta", "link", "br", "img", "input", "hr", "path", "line", "rect"}

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        inherited = {**(self._stack[-1] if self._stack else {}),
                     **{key: value for key, value in attributes.items() if key.startswith("data-")}}
        element = {"tag": tag, "class": attributes.get("class", ""), **attributes, "inherited": inherited}
        self.elements.append(element)
        if tag not in self.VOID:
            self._stack.append(inherited)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in self.VOID:
            self._stack.pop()

    def handle_endtag(self, tag):
        if tag not in self.VOID and self._stack:
            self._stack.pop()

    def handle_data(self, data):
        self.text.append(data)

    def find(self, tag: str | None = None, css_class: str | None = None, **data: str) -> list[dict]:
        return [element for element in self.elements
                if (tag is None or element["tag"] == tag)
                and (css_class is None or css_class in element["class"].split())
                and all(element.get(f"data-{key.replace('_', '-')}") == value for key, value in data.items())]


def estimate(tmp_path: Path, *args: str, cwd: Path | None = None) -> tuple[dict, str, Page]:
    """(the JSON, the page's text, the page parsed) of one `zeromem estimate ... --format json --html PATH`."""
    path = tmp_path / "report.html"
    done = run_zeromem_subprocess("estimate", *args, "--format", "json", "--html", str(path), cwd=cwd)
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    assert f"wrote {path}" in done.stderr
    text = path.read_text(encoding="utf-8")
    return json.loads(done.stdout), text, Page(text)


def stages_of(data: dict) -> list[str]:
    return [key for key in ("ddp", "zero1", "zero2", "zero3") if key in data]


def assert_self_contained(text: str, page: Page) -> None:
    """One page: nothing fetched (no src / href / url() / @import / link / script source), no web fonts."""
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert "http://" not in text and "https://" not in text
    for tag, attributes in page.tags:
        assert tag not in ("link", "iframe", "object", "embed", "img", "script"), tag
        assert not {"src", "href", "xlink:href", "srcset"} & set(attributes), (tag, attributes)
    assert "@import" not in text and "url(" not in text and "@font-face" not in text


def assert_agrees(data: dict, page: Page) -> None:
    """The page's integers are the JSON's: model state, peak, each phase's peak, the peak's parts, the budget."""
    stages = stages_of(data)
    assert stages, data
    assert [element["data-stage"] for element in page.find("section", "stage")] == stages
    assert [element["data-stage"] for element in page.find("tr") if "data-stage" in element] == stages
    budget = data["gpu_memory"]
    for stage in stages:
        (section,) = page.find("section", "stage", stage=stage)
        assert int(section["data-state"]) == data[stage]
        peak = (data.get("peak") or {}).get(stage)
        found = (data.get("phases") or {}).get(stage)
        moments = [element for element in page.find("g", "moment") if element["inherited"].get("data-stage") == stage]
        if peak is None:
            assert section["data-peak"] == "" and not moments
            (why,) = [element for element in page.find("p", "why") if element["inherited"]["data-stage"] == stage]
            if found is not None:
                assert why["data-why"] == f"peak unknown: {found['unknown']}"
            continue
        assert int(section["data-peak"]) == peak
        reserved = found["reserved_bytes"]
        assert {element["data-phase"] for element in moments} == set(found["phases"])
        for element in moments:  # each column is its parts, stacked
            parts = [int(part["data-bytes"]) for part in page.find("rect", "part")
                     if part["inherited"].get("data-stage") == stage
                     and part["inherited"].get("data-moment") == element["data-moment"]
                     and part["inherited"].get("data-phase") == element["data-phase"]]
            assert parts and int(element["data-total"]) >= max(parts)
            assert int(element["data-total"]) <= found["phases"][element["data-phase"]] + reserved
        for phase, value in found["phases"].items():  # the phase's peak is its tallest column, marked once
            held = [element for element in moments if element["data-phase"] == phase
                    and element["data-phase-peak"] == "true"]
            assert len(held) == 1 and int(held[0]["data-total"]) == value + reserved
        (held,) = [element for element in moments if element["data-stage-peak"] == "true"]
        assert (held["data-phase"], held["data-moment"], int(held["data-total"])) == (
            found["peak_phase"], found["moment"], peak)
        parts = {part["data-part"]: int(part["data-bytes"]) for part in page.find("rect", "part")
                 if part["inherited"].get("data-stage") == stage and part["inherited"].get("data-stage-peak") == "true"}
        assert parts == {**found["parts"], "reserved": reserved}
        budgets = [element for element in page.find("g", "budget") if element["inherited"].get("data-stage") == stage]
        assert [int(element["data-budget"]) for element in budgets] == ([budget] if budget is not None else [])
        (row,) = [element for element in page.find("tr") if element.get("data-stage") == stage]
        verdict = "" if data["fits"] is None else "fits" if data["fits"][stage] else "exceeds"
        assert row["data-verdict"] == verdict
    cells = [int(element["data-bytes"]) for element in page.find("td") if "data-bytes" in element]
    for stage in stages:
        assert data[stage] in cells
    shown = {element["data-input"] for element in page.find("tr") if "data-input" in element}
    assert shown == set(data.get("peak_inputs") or {})


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_page_shows_the_json_figures(tmp_path, case):
    data, text, page = estimate(tmp_path, *CASES[case])
    assert_self_contained(text, page)
    assert_agrees(data, page)
    words = " ".join(page.text)
    for name, given in data["peak_inputs"].items():  # each input with its origin, as the JSON has them
        assert given["from"] in words, name
    plain = run_zeromem_subprocess("estimate", *CASES[case], "--format", "json")
    assert json.loads(plain.stdout) == data  # --html changes nothing printed


def test_the_later_micro_batch_and_the_reference_model_are_columns(tmp_path):
    _, _, page = estimate(tmp_path, *CASES["accumulation"])
    assert any("a later micro-batch" in element["data-moment"] for element in page.find("g", "moment"))
    _, _, page = estimate(tmp_path, *CASES["dpo"])
    columns = page.find("g", "moment")
    references = [part for part in page.find("rect", "part", part="reference model")]
    assert columns and len(references) == len(columns)  # the reference model is alive at every moment


def test_every_stage_says_why_when_the_peak_is_unknown_or_not_computable(tmp_path):
    data, text, page = estimate(tmp_path, *STEP, "--trainer", "grpo", "--use-vllm", "--gpu-memory", "80GiB")
    assert all(value == {"unknown": data["phases"][stage]["unknown"]} for stage, value in data["phases"].items())
    assert_agrees(data, page)
    assert "vLLM" in " ".join(page.text) or "vllm" in " ".join(page.text)
    data, text, page = estimate(tmp_path, "--parameters", "7B", "--world-size", "8", "--gpu-memory", "24GiB")
    assert_self_contained(text, page)
    assert_agrees(data, page)
    whys = [element["data-why"] for element in page.find("p", "why")]
    assert len(whys) == 4 and all(why.startswith("no peak") for why in whys)
    data, _, page = estimate(tmp_path, "--model-config", LLAMA, "--world-size", "8", "--gpu-memory", "24GiB")
    assert all(element["data-why"].startswith("peak not computable: missing") for element in page.find("p", "why"))
    assert data["peak"] is None


def test_a_config_file_and_its_approximation(tmp_path, monkeypatch):
    """--config: the recipe's stages and inputs; the keys the model ignores named, with their values."""
    recipe = _project(tmp_path, monkeypatch, RECIPE + LONG_CONTEXT)
    data, text, page = estimate(tmp_path, "--config", str(recipe), "--world-size", "8", "--gpu-memory", "80GiB",
                                cwd=tmp_path)
    assert_self_contained(text, page)
    assert_agrees(data, page)
    assert data["approximate"] is True
    (box,) = page.find("div", "approximate")
    words = " ".join(page.text)
    assert "approximate: it derives context_parallel_size: 8 from the code, without a measured step" in words
    for item in data["ignored"]:
        assert f"derived: {item['key']}: " in words and item["why"] in words
    recipe.write_text(RECIPE)
    data, _, page = estimate(tmp_path, "--config", str(recipe), "--world-size", "8", "--gpu-memory", "80GiB",
                             cwd=tmp_path)
    assert data["approximate"] is False and not page.find("div", "approximate")


def test_every_string_is_escaped(tmp_path):
    """A model config in a directory named like markup: the path shows as text, never as markup."""
    folder = tmp_path / 'a<b onmouseover="x">&amp;'
    folder.mkdir()
    shutil.copy(LLAMA, folder / "config.json")
    _, text, page = estimate(tmp_path, "--model-config", str(folder / "config.json"), "--world-size", "8",
                             "--sequence-length", "512", "--micro-batch", "1")
    assert "<b onmouseover" not in text and "&lt;b onmouseover=&quot;x&quot;&gt;&amp;amp;" in text
    assert not [tag for tag, _ in page.tags if tag == "b"]
    assert str(folder) in " ".join(page.text)


def test_an_unwritable_path_is_a_usage_error(tmp_path):
    done = run_zeromem_subprocess("estimate", "--parameters", "7B", "--world-size", "8",
                                  "--html", str(tmp_path / "missing" / "report.html"))
    assert done.returncode == 2 and "--html: cannot write" in done.stderr and "Traceback" not in done.stderr


# ---------------------------------------------------------------- in a real browser

CHROMIUM = os.environ.get("ZEROMEM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run"]


def png_colours(data: bytes, limit: int = 10_000) -> int:
    """Distinct pixel colours of an 8-bit RGB / RGBA PNG (Chromium's screenshots), counted up to `limit`."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    offset, idat, width = 8, b"", 0
    while offset < len(data):
        (length,), kind = struct.unpack(">I", data[offset:offset + 4]), data[offset + 4:offset + 8]
        body = data[offset + 8:offset + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        offset += 12 + length
    raw, stride = zlib.decompress(idat), width * channels
    previous, seen = bytearray(stride), set()
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                guess = left + up - corner
                pa, pb, pc = abs(guess - left), abs(guess - up), abs(guess - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        seen.update(bytes(line[i:i + 3]) for i in range(0, stride, channels * 7))  # every 7th pixel
        previous = line
        if len(seen) >= limit:
            break
    return len(seen)


def test_png_colours_counts_a_tiny_image():
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    pixels = b"\x00" + bytes([255, 0, 0] * 7 + [0, 0, 255] * 7) + b"\x02" + bytes(42)  # a row, then the same row
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 14, 2, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(pixels)) + chunk(b"IEND", b""))
    assert png_colours(png) == 2


def test_the_page_in_a_headless_chromium(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright; "
                                   "never `playwright install`: the browser is Debian's chromium)")
    if not (os.access(CHROMIUM, os.X_OK) or shutil.which(CHROMIUM)):
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium; or set ZEROMEM_CHROMIUM)")
    data, _, _ = estimate(tmp_path, *CASES["deepspeed"])
    stages = stages_of(data)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            errors: list[str] = []
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            page.on("pageerror", lambda error: errors.append(str(error)))
            requests: list[str] = []
            page.on("request", lambda request: requests.append(request.url))
            page.goto((tmp_path / "report.html").as_uri())
            page.wait_for_load_state("load")
            assert errors == []
            assert requests == [(tmp_path / "report.html").as_uri()]  # nothing else fetched
            for stage in stages:
                assert page.locator(f'section.stage[data-stage="{stage}"] svg.chart').count() == 1
                assert page.locator(f'section.stage[data-stage="{stage}"] g.moment').count() >= 3
                budget = page.locator(f'section.stage[data-stage="{stage}"] g.budget line')
                assert budget.count() == 1 and budget.bounding_box()["width"] > 300
            assert page.locator(f'g.budget[data-budget="{data["gpu_memory"]}"]').count() == len(stages)
            assert page.locator("ul.legend li").count() >= 5
            shot = page.screenshot(full_page=True)
        finally:
            browser.close()
    if os.environ.get("ZEROMEM_SCREENSHOTS"):
        Path(os.environ["ZEROMEM_SCREENSHOTS"], "html-report.png").write_bytes(shot)
    assert png_colours(shot) > 20  # bars in a dozen colours, text, the budget line: not a blank page


def test_every_moment_is_kept_and_the_largest_holds_the_phase():
    """memory/step.py keeps each phase's moments (what the columns show): the largest (the first of equal ones) is
    the phase's moment with its parts, the moments' parts sum to their totals."""
    from zeromem_lsp.configs.model_config import model_shape_from_text
    from zeromem_lsp.memory.step import estimate_step

    shape = model_shape_from_text(Path(LLAMA).read_text(encoding="utf-8"))
    for arguments in ({"engine": "torch"}, {"engine": "deepspeed", "stage": 3, "ranks": 8},
                      {"engine": "fsdp", "ranks": 8, "gradient_accumulation_steps": 2}):
        step = estimate_step(shape, 1024, 1, **arguments)
        for name, phase in step.phases.items():
            assert phase.moments and all(moment.total == sum(part.bytes for part in moment.parts)
                                         for moment in phase.moments)
            held = max(phase.moments, key=lambda moment: moment.total)
            assert (held.name, held.total, held.parts) == (phase.moment, phase.peak, phase.parts), (arguments, name)
