"""The extension inside a real VS Code: code-server (VS Code in the browser) driven by headless
Chromium through Playwright. Run by `.ci/vscode-e2e.sh`, which installs everything and sets:

    ZEROMEM_CODE_SERVER  the code-server executable      ZEROMEM_VSIX    the built extension
    ZEROMEM_PYTHON       a Python with zeromem-lsp        ZEROMEM_NODE    the Node that runs code-server
    ZEROMEM_CHROMIUM     the browser (default /usr/bin/chromium)
    ZEROMEM_SCREENSHOTS  where to save the screenshots (optional)

The tests run in file order against one window, as a user would: a failed start fixed from the
settings; diagnostics, hover and the quick fix on an over-budget DeepSpeed config; the Settings UI; a real
axolotl recipe (its model found in a local Hugging Face cache) with its diagnostic and memory hover.
"""

from __future__ import annotations

import json
import re
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

playwright = pytest.importorskip("playwright.sync_api")

NEEDED = ("ZEROMEM_CODE_SERVER", "ZEROMEM_VSIX", "ZEROMEM_PYTHON")
if any(not os.environ.get(name) for name in NEEDED):
    pytest.skip(f"set {', '.join(NEEDED)} (.ci/vscode-e2e.sh does)", allow_module_level=True)

CHROMIUM = os.environ.get("ZEROMEM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 60_000

# The model comes from the file's zeromem block, the 24 GiB budget from the User settings: ZM101 shows
# only if the extension passed them. 7B, bf16, AdamW, R = 64 / (4 × 2) = 8 ranks:
# ZeRO-1 = P + G + ⌈O/R⌉ = 14e9 + 14e9 + ⌈84e9/8⌉ = 38.5e9 B = 35.9 GiB > 24 GiB;
# ZeRO-3 = ⌈(14e9 + 14e9 + 84e9)/8⌉ = 14e9 B = 13.0 GiB fits. The comment is fine for DeepSpeed (hjson).
CONFIG = """{
  // DeepSpeed reads this file as hjson: comments are allowed
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 2,
  "bf16": {"enabled": true},
  "optimizer": {"type": "AdamW", "params": {"lr": 2e-5}},
  "zero_optimization": {"stage": 1},
  "zeromem": {"parameters": "7B"}
}
"""
STAGE_LINE = 8  # 1-based, as VS Code's "Go to Line" takes it
STAGE_COLUMN = CONFIG.splitlines()[STAGE_LINE - 1].index('1}') + 1


ROOT = Path(__file__).resolve().parents[3]
#: A real recipe (tests/data/recipes/SOURCES.md), opened as written: axolotl's DPO LoRA on Llama-3-8B-Instruct. Its
#: base_model resolves in a Hugging Face cache holding Llama-3-8B's config.json (tests/data/models/Meta-Llama-3-8B;
#: the Instruct model's config differs from the base model's in no shape). A text model, so the peak is known (a
#: vision-language composite such as Gemma-3 gets model state only: its image tokens are not described).
RECIPE = ROOT / "tests" / "data" / "recipes" / "axolotl" / "examples" / "llama-3" / "instruct-dpo-lora-8b.yml"
MODEL_CONFIG = ROOT / "tests" / "data" / "models" / "Meta-Llama-3-8B" / "config.json"
MODEL_ID = "meta-llama/Meta-Llama-3-8B-Instruct"
#: The project's settings for recipes only (the ds_config.json tests keep the User budget): a budget below any
#: estimate of this 8B-parameter run, so a finding is certain whatever the memory model counts.
PROJECT_SETTINGS = '[[tool.zeromem.overrides]]\nfiles = ["*.yml"]\ngpu-memory = "1GiB"\n'


def hub_cache(root: Path) -> Path:
    """A Hugging Face hub cache with MODEL_ID's config.json at revision main (huggingface_hub's layout)."""
    repo = root / "hub" / ("models--" + MODEL_ID.replace("/", "--"))
    (repo / "snapshots" / "c0ffee").mkdir(parents=True)
    shutil.copy(MODEL_CONFIG, repo / "snapshots" / "c0ffee" / "config.json")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("c0ffee", encoding="utf-8")
    return root / "hub"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("code-server")
    project = root / "project"
    project.mkdir()
    (project / "ds_config.json").write_text(CONFIG, encoding="utf-8")
    shutil.copy(RECIPE, project / RECIPE.name)
    (project / "pyproject.toml").write_text(PROJECT_SETTINGS, encoding="utf-8")
    hub_cache(root)
    user = root / "data" / "User"
    user.mkdir(parents=True)
    return root


def write_user_settings(root: Path, **zeromem: str) -> None:
    settings = {
        "workbench.startupEditor": "none",
        "workbench.secondarySideBar.defaultVisibility": "hidden",
        "chat.disableAIFeatures": True,
        "security.workspace.trust.enabled": False,
        "telemetry.telemetryLevel": "off",
        "extensions.autoCheckUpdates": False,
        "extensions.autoUpdate": False,
        "editor.hover.delay": 100,
        **{f"zeromem.{key}": value for key, value in zeromem.items()},
    }
    (root / "data" / "User" / "settings.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")


@pytest.fixture(scope="module")
def server(workspace):
    env = {**os.environ, "XDG_CONFIG_HOME": str(workspace / "xdg"), "HF_HUB_CACHE": str(workspace / "hub")}
    node = os.environ.get("ZEROMEM_NODE")
    if node:
        env["PATH"] = f"{Path(node).parent}{os.pathsep}{env['PATH']}"
    data, extensions = workspace / "data", workspace / "extensions"
    install = subprocess.run([os.environ["ZEROMEM_CODE_SERVER"], "--user-data-dir", str(data), "--extensions-dir",
                              str(extensions), "--install-extension", os.environ["ZEROMEM_VSIX"]],
                             env=env, capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    # the first start fails: the interpreter named in the User settings does not exist
    write_user_settings(workspace, interpreter=str(workspace / "no-such-venv" / "bin" / "python"), gpuMemory="24GiB")
    port = free_port()
    log = open(workspace / "code-server.log", "w")
    process = subprocess.Popen(
        [os.environ["ZEROMEM_CODE_SERVER"], "--bind-addr", f"127.0.0.1:{port}", "--auth", "none",
         "--user-data-dir", str(data), "--extensions-dir", str(extensions), "--disable-telemetry",
         "--disable-update-check", "--disable-workspace-trust", "--disable-getting-started-override",
         str(workspace / "project")],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # its own process group
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
            break
        except OSError:
            assert process.poll() is None, (workspace / "code-server.log").read_text()
            assert time.monotonic() < deadline, "code-server did not answer within 120 s"
            time.sleep(0.5)
    yield f"http://127.0.0.1:{port}/?folder={workspace / 'project'}"
    process.terminate()
    process.wait(timeout=30)
    try:  # the extension host, file watcher and language servers it started
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    log.close()


@pytest.fixture(scope="module")
def page(server, workspace):
    profile = workspace / "chromium"
    shutil.rmtree(profile, ignore_errors=True)
    with playwright.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 860})
        context.set_default_timeout(TIMEOUT_MS)
        page = context.pages[0] if context.pages else context.new_page()
        page.goto(server)
        page.wait_for_selector(".monaco-workbench .part.editor")
        yield page
        context.close()


def screenshot(page, name: str) -> None:
    folder = os.environ.get("ZEROMEM_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / name))


def command(page, name: str) -> None:
    """Run a command from the palette (F1), by its title. Under load a key press can land while the
    workbench moves focus (a toast, an editor opening): then the palette does not open; press again."""
    box = page.locator(".quick-input-widget input")
    for attempt in range(4):
        if attempt:
            page.keyboard.press("Escape")
        page.locator(".monaco-workbench").first.focus()
        page.keyboard.press("F1")
        try:
            box.wait_for(state="visible", timeout=TIMEOUT_MS // 4)
            break
        except playwright.Error:
            if attempt == 3:
                raise
    box.fill(f">{name}")
    page.locator(".quick-input-list .monaco-list-row", has_text=name).first.wait_for()
    page.keyboard.press("Enter")


def problems(page) -> str:
    panel = page.locator(".markers-panel")
    if not panel.is_visible():
        command(page, "View: Focus Problems")
        panel.wait_for(state="visible")
    return panel.inner_text()


def wait_for(predicate, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def open_config(page) -> None:
    page.get_by_role("treeitem", name="ds_config.json").click()
    page.locator(".monaco-editor .view-lines", has_text="zero_optimization").first.wait_for()


def setting(page, key: str):
    """The Settings UI (User tab) filtered to one setting; returns its row."""
    if not page.locator(".settings-editor").first.is_visible():
        command(page, "Preferences: Open User Settings")
    search = page.locator(".settings-editor .settings-header .suggest-input-container").first
    search.wait_for(state="visible")
    search.click()
    page.keyboard.press("Control+a")
    page.keyboard.type(key)
    title = key.split(".")[-1]
    words = "".join(" " + c if c.isupper() else c for c in title).title()  # worldSize -> World Size
    row = page.locator(".settings-editor .setting-item-contents", has_text=f"Zeromem: {words}").first
    row.wait_for(state="visible")
    return row


def type_into(row, text: str, workspace: Path, key: str) -> None:
    """Type into a setting's text box as a user does, until VS Code has saved it to the User settings."""
    box = row.locator("input")
    settings = workspace / "data" / "User" / "settings.json"

    def saved() -> bool:
        return user_settings(workspace).get(key) == text

    for _ in range(3):  # a re-render of the Settings UI under load can eat keystrokes: type again
        box.click()
        box.fill(text)
        box.press("End")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not saved():
            time.sleep(0.25)
        if saved():
            return
    raise AssertionError(f"{key} = {text!r} not saved; settings.json: {settings.read_text(encoding='utf-8')}")


def user_settings(root: Path) -> dict:
    """The User settings as VS Code last saved them; {} while it is rewriting the file (it truncates
    first, so a read can see an empty or half-written file)."""
    try:
        return json.loads((root / "data" / "User" / "settings.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def ensure_interpreter(workspace: Path) -> None:
    """A later test starts from a working server even when the test that sets it up failed (its own
    failure is reported there; this keeps one failure from cascading into every later test)."""
    python = os.environ["ZEROMEM_PYTHON"]
    settings = user_settings(workspace)
    if settings and settings.get("zeromem.interpreter") != python:
        write_user_settings(workspace, interpreter=python, gpuMemory="24GiB")


def close_settings(page) -> None:
    page.keyboard.press("Escape")
    if page.locator(".settings-editor").first.is_visible():
        command(page, "View: Close Editor")


def test_a_failed_start_is_retried_when_the_settings_change(page, workspace):
    open_config(page)
    toast = page.locator(".notifications-toasts", has_text="cannot start the language server")
    toast.first.wait_for()
    assert "no-such-venv" in toast.first.inner_text()  # the User value was read (scope: window)
    assert "ZM101" not in problems(page)
    # the user fixes the setting in the Settings UI
    type_into(setting(page, "zeromem.interpreter"), os.environ["ZEROMEM_PYTHON"], workspace, "zeromem.interpreter")
    close_settings(page)
    wait_for(lambda: "ZM101" in problems(page), "ZM101 after fixing zeromem.interpreter")


def test_overflow_hover_and_quick_fix(page, workspace):
    ensure_interpreter(workspace)
    wait_for(lambda: "ZM101" in problems(page), "ZM101 on the over-budget config")
    text = problems(page)
    assert "ZeRO-1 needs 35.9 GiB per GPU (38,500,000,000 B)" in text and "24.0 GiB budget" in text
    # DeepSpeed JSON is our language: VS Code's JSON service does not report the comment as well
    assert "Comments are not permitted" not in text
    assert "ZM253" in text  # zeromem's own word on the comment: fine for DeepSpeed, not for json.load
    assert page.locator(".statusbar", has_text="DeepSpeed JSON").count() == 1

    command(page, "Notifications: Clear All Notifications")  # the first start's error, now stale
    page.locator(".monaco-editor textarea").first.focus()
    page.keyboard.press("Control+g")
    page.keyboard.type(f"{STAGE_LINE}:{STAGE_COLUMN}")
    page.keyboard.press("Enter")
    command(page, "Show or Focus Hover")
    hover = page.locator(".monaco-hover", has_text="ZeRO-1 exceeds the budget").first  # after the problem's part
    hover.wait_for(state="visible")
    shown = hover.inner_text()
    assert "ZeRO-1 exceeds the budget: model state 35.9 GiB of 24.0 GiB per GPU (149%" in shown  # the verdict
    assert "Cheapest that fits: ZeRO-3 (13.0 GiB/GPU)" in shown
    assert "zeromem estimate --config" in shown  # the way to the whole breakdown
    assert shown.count("ZeRO stage") <= 1  # no schema hover beside ours
    screenshot(page, "vscode-hover.png")
    page.keyboard.press("Escape")

    command(page, "Quick Fix...")
    fix = page.locator(".action-widget .monaco-list-row", has_text="Switch to ZeRO-3").first
    fix.wait_for(state="visible")
    screenshot(page, "vscode-quick-fix.png")
    fix.click()
    page.locator(".monaco-editor .view-lines", has_text='"stage": 3').first.wait_for()
    wait_for(lambda: "ZM101" not in problems(page), "ZM101 to go after the quick fix")
    screenshot(page, "vscode-fixed.png")


def test_restart_twice_in_a_row_leaves_one_working_server(page):
    page.keyboard.press("Control+z")  # back to ZeRO-1
    wait_for(lambda: "ZM101" in problems(page), "ZM101 after undo")
    command(page, "zeromem: Restart language server")
    command(page, "zeromem: Restart language server")
    page.locator(".monaco-editor textarea").first.focus()
    page.keyboard.press("End")
    page.keyboard.type(" ")  # an edit after the restarts: the new server must answer it
    wait_for(lambda: "ZM101" in problems(page), "ZM101 after two restarts")
    assert problems(page).count("ZM101") == 1


def test_a_remote_value_added_then_removed_falls_back_to_the_user_value(page, workspace):
    """code-server's Remote settings (data/Machine/settings.json) override User ones; removing the
    Remote value must bring back the User value, not `zeromem` on PATH."""
    remote = workspace / "data" / "Machine" / "settings.json"
    remote.parent.mkdir(exist_ok=True)
    remote.write_text(json.dumps({"zeromem.interpreter": "/remote/only/python"}), encoding="utf-8")
    try:
        toast = page.locator(".notifications-toasts", has_text="/remote/only/python")
        toast.first.wait_for()
        wait_for(lambda: "ZM101" not in problems(page), "the server to stop for the Remote value")
        command(page, "Notifications: Clear All Notifications")
    finally:
        remote.write_text("{}", encoding="utf-8")
    wait_for(lambda: "ZM101" in problems(page), "ZM101 with the User value again")
    assert page.locator(".notifications-toasts", has_text="not found on PATH").count() == 0


def test_settings_ui_edits_every_setting(page, workspace):
    """Text boxes for the free-form settings, dropdowns with a "default" choice (no "null")."""
    for key in ("gpuMemory", "parameters", "worldSize", "warnFraction", "sequenceLength", "microBatch", "reserved"):
        row = setting(page, f"zeromem.{key}")
        assert row.locator("input").count() == 1, f"{key}: no input box"
        assert "Edit in settings.json" not in row.inner_text()
    for key in ("precision", "optimizer", "gradientCheckpointing", "attention"):
        row = setting(page, f"zeromem.{key}")
        options = row.locator("select option").all_inner_texts()
        assert options and options[0].startswith("default ("), options
        assert "null" not in options
    # a number typed into World Size reaches the server: 4 ranks instead of the 8 the batch sizes
    # imply make ZeRO-1 = 14e9 + 14e9 + ⌈84e9/4⌉ = 49e9 B = 45.6 GiB
    type_into(setting(page, "zeromem.worldSize"), "4", workspace, "zeromem.worldSize")
    screenshot(page, "vscode-settings.png")
    close_settings(page)
    wait_for(lambda: "45.6 GiB per GPU (49,000,000,000 B)" in problems(page), "ZM101 with worldSize 4")


def zeromem_cli(workspace: Path, *args: str):
    """What `zeromem` itself says about the project's files, with the environment the editor's server has."""
    done = subprocess.run([os.environ["ZEROMEM_PYTHON"], "-m", "zeromem_lsp", *args], cwd=workspace / "project",
                          env={**os.environ, "HF_HUB_CACHE": str(workspace / "hub")}, capture_output=True, text=True,
                          timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_a_real_recipe_gets_its_diagnostic_and_memory_hover(page, workspace):
    """axolotl's instruct-dpo-lora-8b.yml, unmodified: VS Code sends the YAML, the server recognises the recipe by its
    keys, resolves base_model in the local hub cache, and shows what `zeromem check` and `zeromem estimate
    --config` say about it (the project's 1 GiB budget for *.yml)."""
    ensure_interpreter(workspace)
    name = RECIPE.name
    expected = json.loads(zeromem_cli(workspace, "check", "--format", "json", "-q", name).stdout)["findings"]
    assert expected and all(item["code"] != "ZM108" for item in expected)  # the model was found and counted
    # the same inputs the server has: a World Size an earlier test typed into the User settings reaches it (ranks
    # change the peak: one NCCL communicator's buffers beside the step when there is more than one)
    ranks = user_settings(workspace).get("zeromem.worldSize")
    flags = ["--world-size", str(ranks)] if ranks else []
    estimate = json.loads(zeromem_cli(workspace, "estimate", "--config", name, *flags, "--format", "json").stdout)
    stage = estimate["stage"]

    command(page, "View: Close All Editors")  # the DeepSpeed config's problems leave with it
    page.get_by_role("treeitem", name=name).click()
    page.locator(".monaco-editor .view-lines", has_text="base_model").first.wait_for()

    def shown() -> bool:
        text = problems(page)
        return all(item["code"] in text and item["message"][:60] in text for item in expected)

    wait_for(shown, f"the recipe's {[item['code'] for item in expected]} in Problems")
    assert "ZM101" not in problems(page) or any(item["code"] == "ZM101" for item in expected)

    page.locator(".monaco-editor textarea").first.focus()
    page.keyboard.press("Control+g")
    page.keyboard.type("1:3")  # on `base_model`
    page.keyboard.press("Enter")
    hover = page.locator(".monaco-hover", has_text="zeromem estimate --config").first
    for attempt in range(3):  # a hover requested while the editor still lays out can close at once: ask again
        command(page, "Show or Focus Hover")
        try:
            hover.wait_for(state="visible", timeout=TIMEOUT_MS // 3)
            break
        except playwright.Error:
            if attempt == 2:
                raise
    text = hover.inner_text()
    from zeromem_lsp.units import format_bytes

    assert stage == "ddp" and "DDP exceeds the budget (approximate)" in text, text  # no engine named: DDP assumed
    assert "torch DDP" in text and "Approximate:" in text  # ... and said to be an assumption
    if estimate["peak"] is not None:  # what zeromem estimate gives: the peak, else (a composite model whose image
        shown = f"peak {format_bytes(estimate['peak']['ddp'])}"  # tokens zeromem does not describe) the model state
    else:
        shown = f"model state {format_bytes(estimate['ddp'])}"
    assert f"{shown} of 1.0 GiB per GPU" in text, text
    assert f"zeromem estimate --config {name} -v" in text  # the breakdown, the path as the workspace names it
    assert "NO_SHARD" not in text
    screenshot(page, "vscode-recipe.png")
    page.keyboard.press("Escape")


def test_the_memory_report_command_opens_the_picture_of_the_step(page, workspace):
    """"zeromem: Show memory report" on the open recipe: the server's page (what `zeromem estimate --config FILE
    --html` writes) in a webview beside it — every stage's chart, the budget line, the stage table."""
    page.locator(".monaco-editor textarea").first.focus()
    command(page, "zeromem: Show memory report")
    page.locator(".tab", has_text=f"Memory: {RECIPE.name}").first.wait_for(state="visible")

    def report_frame():
        for frame in page.frames:
            try:
                if frame.locator("svg").count() and "GPU budget" in frame.content():
                    return frame
            except playwright.Error:  # a frame detached while we looked
                continue
        return None

    wait_for(lambda: report_frame() is not None, "the report's page inside the webview")
    page_html = report_frame().content()  # SVG text included (inner_text leaves parts of the chart out)
    text = " ".join(re.sub(r"<[^>]+>", " ", page_html).split())
    assert "Memory per GPU through one training step" in text and "budget 1.0 GiB per GPU" in text
    assert "GPU budget" in text and "DDP" in text and "optimizer step" in text
    assert 'class="budget"' in page_html and "approximate" in text.lower()  # DDP is an assumption, said here too
    screenshot(page, "vscode-memory-report.png")
    command(page, "View: Close Editor")
