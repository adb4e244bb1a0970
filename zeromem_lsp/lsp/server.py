"""The language server: a thin pygls adapter over `analyse` and `zeromem_lsp.assist`.

Each handler: document → cursor offset → analysis (one per (uri, version)) → `lsp_convert`.
No validation or memory logic lives here. A failing handler is logged (window/logMessage) and
answers with an empty result; the session goes on.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from zeromem_lsp import __version__
if TYPE_CHECKING:
    from zeromem_lsp.configs.model_source import HubAccess
    from zeromem_lsp.analysis import Analysis, Memo
    from zeromem_lsp.document import Document, LineIndex
    from zeromem_lsp.configs.layers import SettingsLayer
    from zeromem_lsp.configs.settings import ZeromemSettings
    from zeromem_lsp.project import ProjectSettings

from zeromem_lsp.lsp.convert import (
    diagnostic_json, encoding_name, publish_diagnostics_json, to_code_action, to_completion_item, to_diagnostic,
    to_hover, to_inlay_hint, to_offset, to_offsets, to_workspace_edit,
)

SETTINGS_TIMEOUT = 2.0  # seconds to wait for workspace/configuration before analysing with what we have
INLINE_ANALYSIS_CHARS = 64 * 1024  # larger documents are analysed in a worker thread
SETTINGS_GLOBS = ("**/pyproject.toml", "**/zeromem.toml")  # watched: project settings are re-read on change
LAUNCH_GLOBS = ("**/*.yaml", "**/*.yml")  # watched: a recipe's Accelerate config (accelerate_config) is re-read


class ZeromemServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("zeromem", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self._editor_settings: ZeromemSettings | None = None
        self.initialization_options: object = None
        self.settings_ready = asyncio.Event()
        self.generation = 0  # bumped when settings change: cached analyses are then stale
        self._analyses: dict[str, tuple[int | None, int, Analysis]] = {}
        self._refreshing: set[str] = set()
        self._dirty: set[str] = set()
        self._projects: dict[Path, ProjectSettings] = {}  # folder -> its project settings, until a file changes
        self._settings: dict[str, tuple[int, tuple[SettingsLayer, ...]]] = {}  # uri -> (generation, its layers)
        self._running: dict[str, tuple[tuple[int | None, int], asyncio.Future]] = {}  # uri -> analysis in a thread
        self._edits: dict[str, tuple[Document, tuple[int, int, int]]] = {}  # uri -> (document before, its one edit)
        self._memo: Memo | None = None  # model counts and plans kept by content across keystrokes (analysis.Memo)

    def start_io(self, stdin=None, stdout=None) -> None:
        from zeromem_lsp.lsp.pipe_io import own_pipe, serve_pipe

        stdin, stdout = stdin or sys.stdin.buffer, stdout or sys.stdout.buffer
        if own_pipe(stdin, stdout):
            serve_pipe(self, stdin, stdout)
        else:
            super().start_io(stdin, stdout)

    # ------------------------------------------------------------ client facts

    @property
    def encoding(self) -> str:
        return encoding_name(self.workspace.position_encoding)

    def _capability(self, *names: str) -> object:
        node: object = self.client_capabilities
        for name in names:
            node = getattr(node, name, None)
        return node

    @property
    def pull_mode(self) -> bool:
        """Pull only when the client pulls and can be told to re-pull after a settings change."""
        return bool(self._capability("text_document", "diagnostic")) and bool(
            self._capability("workspace", "diagnostics", "refresh_support"))

    # ------------------------------------------------------------ settings and analyses
    # The analysis side (pydantic, the models, the rules) is imported on first use, not at start-up:
    # `initialize` is answered as soon as pygls is loaded; `initialized` loads the rest in a thread.

    @property
    def editor_settings(self) -> ZeromemSettings:
        if self._editor_settings is None:
            from zeromem_lsp.configs.settings import ZeromemSettings

            self._editor_settings = ZeromemSettings()
        return self._editor_settings

    @editor_settings.setter
    def editor_settings(self, value: ZeromemSettings) -> None:
        self._editor_settings = value

    def project_for(self, path: Path) -> ProjectSettings:
        """The project settings of a document's folder, discovered once until a settings file changes."""
        from zeromem_lsp.project import discover

        folder = path.parent
        if folder not in self._projects:
            self._projects[folder] = discover(folder)
        return self._projects[folder]

    def project_settings_changed(self) -> None:
        """A pyproject.toml or zeromem.toml changed on disk, or was opened or closed: discover again."""
        self._projects.clear()
        self.generation += 1
        self.reanalyse_open_documents()

    def launch_files_changed(self, paths: set[Path]) -> None:
        """An Accelerate config some open recipe is paired with changed on disk: analyse again."""
        paired = {Path(analysis.launch_file).resolve() for _, _, analysis in self._analyses.values()
                  if analysis.launch_file}
        if paired & {path.resolve() for path in paths}:
            self.generation += 1
            self.reanalyse_open_documents()

    def is_open(self, path: Path) -> bool:
        """Whether the client has the file at `path` open (and so shows its diagnostics)."""
        target = path.resolve()
        return any((open_path := document_path(uri)) is not None and open_path.resolve() == target
                   for uri in self.workspace.text_documents)

    def settings_for(self, uri: str) -> tuple[SettingsLayer, ...]:
        """The layers for `uri` below its own zeromem block, highest first: project files
        ([tool.zeromem], zeromem.toml), then editor settings; kept per open document until either
        changes (the generation moves)."""
        cached = self._settings.get(uri)
        if cached is not None and cached[0] == self.generation:
            return cached[1]
        settings = self._discover_settings(uri)
        if uri in self.workspace.text_documents:  # forgotten on close: the cache holds open documents only
            self._settings[uri] = (self.generation, settings)
        return settings

    def _discover_settings(self, uri: str) -> tuple[SettingsLayer, ...]:
        from zeromem_lsp.configs.layers import editor

        path = document_path(uri)
        if path is None:
            return (editor(self.editor_settings),)
        return (*self.project_for(path).layers_for(path), editor(self.editor_settings_for(path)))

    def shown_path(self, uri: str) -> str | None:
        """The document's path relative to the workspace folder holding it (else its name): what a hover shows."""
        path = document_path(uri)
        if path is None:
            return None
        uris = [*self.workspace.folders, *([self.workspace.root_uri] if self.workspace.root_uri else [])]
        folders = [folder.resolve() for folder in map(document_path, uris) if folder is not None]
        roots = [folder for folder in folders if path.resolve().is_relative_to(folder)]
        if not roots:
            return path.name
        return path.resolve().relative_to(max(roots, key=lambda root: len(root.parts))).as_posix()

    def editor_settings_for(self, path: Path) -> ZeromemSettings:
        """The editor settings, a relative `accelerateConfig` taken from the workspace folder holding `path`
        (from the document's own folder outside every workspace folder)."""
        settings = self.editor_settings
        named = settings.accelerate_config
        if named is None or Path(named).is_absolute():
            return settings
        uris = [*self.workspace.folders, *([self.workspace.root_uri] if self.workspace.root_uri else [])]
        folders = [folder.resolve() for folder in map(document_path, uris) if folder is not None]
        roots = [folder for folder in folders if path.resolve().is_relative_to(folder)]
        base = max(roots, key=lambda root: len(root.parts)) if roots else path.parent
        return settings.model_copy(update={"accelerate_config": str((base / named).resolve())})

    def apply_settings(self, *sources: object) -> None:
        from zeromem_lsp.assist.settings import resolve_settings
        from zeromem_lsp.configs.settings import ZeromemSettings

        merged, problems = ZeromemSettings(), list[str]()
        for raw in sources:
            settings, found = resolve_settings(raw)
            merged, problems = settings.merged_over(merged), problems + found
        if problems:
            self.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Warning,
                message="zeromem: ignoring invalid settings: " + "; ".join(problems)))
        if merged != self.editor_settings:
            self.editor_settings = merged
            self.generation += 1
            self.reanalyse_open_documents()

    def analysis_of(self, uri: str, version: int | None, text: str) -> Analysis:
        generation, cached = self.generation, self._analyses.get(uri)
        if cached is not None and version is not None and cached[:2] == (version, generation):
            return cached[2]
        path = document_path(uri)
        if path is not None and is_settings_file(uri):
            analysis = self.settings_file_analysis(path, text)
        else:
            analysis = self.config_analysis(path, uri, text)
        if cached is None or cached[0] is None or version is None or version >= cached[0]:
            self._analyses[uri] = (version, generation, analysis)
        return analysis

    def settings_file_analysis(self, path: Path, text: str) -> Analysis:
        """A project settings file open in the editor: its problems as ZM104 on their lines."""
        from zeromem_lsp.analysis import Analysis
        from zeromem_lsp.project import settings_from_text
        from zeromem_lsp.rules import settings as settings_rules

        project = settings_from_text(path, text)
        problems = project.problems if project is not None else ()
        return Analysis(text, None, None, settings_rules.project_findings(text, problems))

    def config_analysis(self, path: Path | None, uri: str, text: str) -> Analysis:
        """A config: the pipeline, plus its project settings' problems when the editor does not show
        the settings file itself (ZM104 at the start of the config)."""
        from zeromem_lsp.analysis import Memo, analyse
        from zeromem_lsp.project import file_loader
        from zeromem_lsp.rules import settings as settings_rules

        loader = file_loader(path, *self.hub_fetching()) if path is not None else None
        previous, edit = self._edits.pop(uri, (None, None))  # checked against `text` before it is used
        if self._memo is None:
            self._memo = Memo()
        analysis = analyse(text, document_name(uri), self.settings_for(uri), loader=loader, previous=previous,
                           edit=edit, memo=self._memo)
        project = self.project_for(path) if path is not None else None
        if (project is not None and project.problems and project.source is not None and analysis.reported
                and not self.is_open(project.source)):
            analysis.findings[:0] = settings_rules.project_findings_on_config(
                project.source.name, project.problems, analysis.text)
        return analysis

    def hub_fetching(self) -> tuple[HubAccess, Callable[[], None] | None]:
        """A hub model missing from the caches is fetched in a background thread (configs/hub.py); when it lands, every
        open document is analysed again. No analysis waits for the network. Cache-only off the event loop's reach."""
        try:
            self._event_loop = asyncio.get_running_loop()
        except RuntimeError:  # a worker thread: the loop seen before, if any
            pass
        loop = getattr(self, "_event_loop", None)
        if loop is None:
            return "cache", None
        def landed() -> None:
            loop.call_soon_threadsafe(self.hub_landed)

        return "background", landed

    def hub_landed(self) -> None:
        """A background fetch is done (a config.json kept, or a failure to show): analyse the open documents again."""
        self.generation += 1
        self.reanalyse_open_documents()

    async def analysis_async(self, uri: str, version: int | None, text: str) -> Analysis:
        """`analysis_of` without blocking the loop on a large document: it is analysed in a worker
        thread, once per (version, generation) however many handlers ask (push, pull, hover...); an
        older version still being analysed is waited for first rather than run beside it."""
        if len(text) <= INLINE_ANALYSIS_CHARS:  # ~1 ms: a thread hop would cost as much
            return self.analysis_of(uri, version, text)
        while True:
            key, cached, running = (version, self.generation), self._analyses.get(uri), self._running.get(uri)
            if cached is not None and version is not None and cached[:2] == key:
                return cached[2]
            if running is None:
                future = asyncio.ensure_future(asyncio.to_thread(self.analysis_of, uri, version, text))
                self._running[uri] = running = (key, future)
                future.add_done_callback(lambda done: self._running.get(uri, (None, None))[1] is done
                                         and self._running.pop(uri))
            if running[0] == key:
                return await asyncio.shield(running[1])
            await asyncio.wait([running[1]])  # superseded: let it finish (threads cannot be stopped)

    async def current(self, uri: str) -> tuple[TextDocument, Analysis, LineIndex]:
        """The open document, its analysis and line index; `DocumentNotOpen` for anything else."""
        document = self.workspace.text_documents.get(uri)
        if document is None:
            raise DocumentNotOpen(uri)
        analysis = await self.analysis_async(uri, document.version, document.source)
        return document, analysis, analysis.lines

    def diagnostics(self, uri: str, analysis: Analysis) -> list[types.Diagnostic]:
        lines = analysis.lines
        return [to_diagnostic(finding, lines, self.encoding, uri) for finding in analysis.findings]

    def publish(self, uri: str, analysis: Analysis | None, version: int | None = None) -> None:
        """textDocument/publishDiagnostics, written as JSON directly: the same bytes pygls' converter
        would write for the typed notification, at a fraction of the cost (tests/lsp/test_wire_form.py)."""
        diagnostics = []
        if analysis is not None:
            encoding, lines = self.encoding, analysis.lines
            diagnostics = [diagnostic_json(finding, lines, encoding, uri) for finding in analysis.findings]
        self.protocol._send_data(publish_diagnostics_json(uri, diagnostics, version))

    async def refresh(self, uri: str) -> None:
        """Analyse the newest version of `uri` and push it; a result for an older version is dropped."""
        if uri in self._refreshing:
            self._dirty.add(uri)  # the running loop picks up the newest version when it is done
            return
        self._refreshing.add(uri)
        try:
            await wait_for_settings(self)
            while True:
                self._dirty.discard(uri)
                document = self.workspace.text_documents.get(uri)
                if document is None:
                    return
                version = document.version
                analysis = await self.analysis_async(uri, version, document.source)
                latest = self.workspace.text_documents.get(uri)
                if not self.pull_mode and latest is not None and latest.version == version:
                    self.publish(uri, analysis, version)
                if uri not in self._dirty:
                    return
        finally:
            self._refreshing.discard(uri)

    def reanalyse_open_documents(self) -> None:
        for uri in list(self.workspace.text_documents):
            spawn(self, self.refresh(uri))
        if self.pull_mode:
            ignore_reply(self.workspace_diagnostic_refresh(None))
        if self._capability("workspace", "inlay_hint", "refresh_support"):
            ignore_reply(self.workspace_inlay_hint_refresh(None))

    def note_edit(self, uri: str, changes: Sequence[object]) -> None:
        """Remember a single ranged change against the last analysed text, so that the next analysis
        parses again only the value it is in (document/splice.py proves it applies, or parses in full)."""
        self._edits.pop(uri, None)
        cached = self._analyses.get(uri)
        if len(changes) != 1 or not isinstance(changes[0], types.TextDocumentContentChangePartial) or cached is None:
            return
        document, change = cached[2].document, changes[0]
        if document is None:
            return
        start, end = to_offsets(cached[2].lines, change.range, self.encoding)
        self._edits[uri] = (document, (start, end, start + len(change.text)))

    def forget(self, uri: str) -> None:
        self._analyses.pop(uri, None)
        self._settings.pop(uri, None)
        self._edits.pop(uri, None)

    def log(self, message: str, kind: types.MessageType = types.MessageType.Log) -> None:
        self.window_log_message(types.LogMessageParams(type=kind, message=message))


class DocumentNotOpen(LookupError):
    """A request about a document the client has not opened: answered empty, not an error."""


def document_name(uri: str) -> str:
    return unquote(urlsplit(uri).path).rsplit("/", 1)[-1]


def is_settings_file(uri: str) -> bool:
    from zeromem_lsp.project import SETTINGS_FILES

    return document_name(uri) in SETTINGS_FILES


def document_path(uri: str) -> Path | None:
    """The file behind a file:// URI (project settings and referenced files are found from it)."""
    if urlsplit(uri).scheme != "file":
        return None
    path = to_fs_path(uri)
    return Path(path) if path else None


async def wait_for_settings(ls: ZeromemServer) -> None:
    if ls.settings_ready.is_set():  # the usual case: no timer task per keystroke
        return
    try:
        await asyncio.wait_for(ls.settings_ready.wait(), SETTINGS_TIMEOUT)
    except asyncio.TimeoutError:
        ls.settings_ready.set()


def _report(ls: ZeromemServer, name: str) -> None:
    ls.log(f"zeromem: {name} failed:\n{traceback.format_exc()}", types.MessageType.Error)


def guarded(empty=None):
    """Log any exception of a handler and answer `empty()` (or None) instead."""

    def decorate(handler):
        if asyncio.iscoroutinefunction(handler):
            @functools.wraps(handler)
            async def run_async(ls, params):
                try:
                    return await handler(ls, params)
                except DocumentNotOpen:
                    return empty() if empty else None
                except Exception:
                    _report(ls, handler.__name__)
                    return empty() if empty else None
            return run_async

        @functools.wraps(handler)
        def run(ls, params):
            try:
                return handler(ls, params)
            except DocumentNotOpen:
                return empty() if empty else None
            except Exception:
                _report(ls, handler.__name__)
                return empty() if empty else None
        return run

    return decorate


def spawn(ls: ZeromemServer, coroutine) -> None:
    task = asyncio.ensure_future(coroutine)

    def report(done: asyncio.Future) -> None:
        if not done.cancelled() and done.exception() is not None:
            ls.log(f"zeromem: background task failed: {done.exception()!r}", types.MessageType.Error)

    task.add_done_callback(report)


def ignore_reply(future) -> None:
    future.add_done_callback(lambda done: done.cancelled() or done.exception())


server = ZeromemServer()


# ---------------------------------------------------------------- lifecycle and settings


@server.feature(types.INITIALIZE)
@guarded()
def initialize(ls: ZeromemServer, params: types.InitializeParams):
    ls.initialization_options = params.initialization_options  # applied in `initialized`
    if not ls.pull_mode:  # pushed to: not told to pull (pygls builds the capabilities after this handler)
        ls.protocol.fm.features.pop(types.TEXT_DOCUMENT_DIAGNOSTIC, None)


@server.feature(types.INITIALIZED)
@guarded()
async def initialized(ls: ZeromemServer, params: types.InitializedParams):
    try:
        watch_settings_files(ls)
        await asyncio.to_thread(load_analysis)
        gc.freeze()  # the imported analysis side (~70k objects) is not walked again by each full collection
        ls.apply_settings(ls.initialization_options)
        await load_configuration(ls)
    finally:
        ls.settings_ready.set()


def load_analysis() -> None:
    """Import the analysis side (off the event loop): the first document is then analysed at once."""
    import zeromem_lsp.analysis  # noqa: F401
    import zeromem_lsp.assist.completion  # noqa: F401
    import zeromem_lsp.assist.hover  # noqa: F401
    import zeromem_lsp.configs.deepspeed.models  # noqa: F401  (the first hover's key documentation: pydantic)
    import zeromem_lsp.configs.settings_model  # noqa: F401
    import zeromem_lsp.assist.inlay  # noqa: F401
    import zeromem_lsp.project  # noqa: F401


def watch_settings_files(ls: ZeromemServer) -> None:
    """Ask the client to report changes of project settings files (workspace/didChangeWatchedFiles)."""
    if not ls._capability("workspace", "did_change_watched_files", "dynamic_registration"):
        return
    options = types.DidChangeWatchedFilesRegistrationOptions(
        watchers=[types.FileSystemWatcher(glob_pattern=glob) for glob in SETTINGS_GLOBS + LAUNCH_GLOBS])
    registration = types.Registration(id="zeromem-settings-files", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                                      register_options=options)
    ignore_reply(ls.client_register_capability(types.RegistrationParams(registrations=[registration])))


@server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
@guarded()
def did_change_watched_files(ls: ZeromemServer, params: types.DidChangeWatchedFilesParams):
    if any(is_settings_file(change.uri) for change in params.changes) or not params.changes:
        ls.project_settings_changed()
    else:
        ls.launch_files_changed({path for change in params.changes if (path := document_path(change.uri))})


async def load_configuration(ls: ZeromemServer) -> None:
    if not ls._capability("workspace", "configuration"):
        return
    items = [types.ConfigurationItem(section="zeromem")]
    result = await ls.workspace_configuration_async(types.ConfigurationParams(items=items))
    ls.apply_settings(ls.initialization_options, result[0] if result else None)


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
@guarded()
def did_change_configuration(ls: ZeromemServer, params: types.DidChangeConfigurationParams):
    settings = params.settings
    if isinstance(settings, dict) and isinstance(settings.get("zeromem"), dict):
        from zeromem_lsp.assist.settings import settings_section

        ls.apply_settings(ls.initialization_options, settings_section(settings))
    else:  # "pull" style: the notification only says something changed
        spawn(ls, load_configuration(ls))


# ---------------------------------------------------------------- document sync and diagnostics


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
@guarded()
async def did_open(ls: ZeromemServer, params: types.DidOpenTextDocumentParams):
    if is_settings_file(params.text_document.uri):  # its problems move from the configs onto it
        ls.project_settings_changed()
    await ls.refresh(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
@guarded()
async def did_change(ls: ZeromemServer, params: types.DidChangeTextDocumentParams):
    ls.note_edit(params.text_document.uri, params.content_changes)
    await ls.refresh(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
@guarded()
async def did_save(ls: ZeromemServer, params: types.DidSaveTextDocumentParams):
    await ls.refresh(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
@guarded()
def did_close(ls: ZeromemServer, params: types.DidCloseTextDocumentParams):
    ls.forget(params.text_document.uri)
    if is_settings_file(params.text_document.uri):  # its problems go back onto the configs
        ls.project_settings_changed()
    if not ls.pull_mode:
        ls.publish(params.text_document.uri, None)


def _empty_report():
    return types.RelatedFullDocumentDiagnosticReport(items=[])


@server.feature(types.TEXT_DOCUMENT_DIAGNOSTIC,
                types.DiagnosticOptions(identifier="zeromem", inter_file_dependencies=False, workspace_diagnostics=False))
@guarded(_empty_report)
async def pull_diagnostics(ls: ZeromemServer, params: types.DocumentDiagnosticParams):
    await wait_for_settings(ls)  # only pull-mode clients are offered this request (see `initialize`)
    document, analysis, _ = await ls.current(params.text_document.uri)
    result_id = f"{document.version}:{ls.generation}"
    if params.previous_result_id == result_id:
        return types.RelatedUnchangedDocumentDiagnosticReport(result_id=result_id)
    return types.RelatedFullDocumentDiagnosticReport(items=ls.diagnostics(document.uri, analysis), result_id=result_id)


# ---------------------------------------------------------------- editor features


@server.feature(types.TEXT_DOCUMENT_HOVER)
@guarded()
async def hover(ls: ZeromemServer, params: types.HoverParams):
    from zeromem_lsp.assist.hover import hover_at

    document, analysis, lines = await ls.current(params.text_document.uri)
    found = hover_at(analysis, to_offset(lines, params.position, ls.encoding), ls.shown_path(document.uri))
    return to_hover(found, lines, ls.encoding) if found else None


#: The command a client runs for the whole breakdown behind a memory hover (arguments: the document's URI).
MEMORY_REPORT = "zeromem.memoryReport"


@server.command(MEMORY_REPORT)
async def memory_report(ls: ZeromemServer, uri: str) -> dict:
    """{"markdown": ...}: every figure behind the hover's verdict — the stage table with each peak's phase and parts,
    P, G, O, R and where each came from, offload and the peak's arithmetic ("" for a document that is not open)."""
    from zeromem_lsp.assist.hover import breakdown_markdown

    try:
        _, analysis, _ = await ls.current(uri)
    except DocumentNotOpen:
        return {"markdown": ""}
    return {"markdown": breakdown_markdown(analysis.plan, analysis.setup)}


#: The command a client runs for the picture of the step (arguments: the document's URI): {"html": ...} or {"why": ...}.
MEMORY_REPORT_HTML = "zeromem.memoryReportHtml"


@server.command(MEMORY_REPORT_HTML)
async def memory_report_html(ls: ZeromemServer, uri: str) -> dict:
    """The page `zeromem estimate --config FILE --html` writes, for this document's plan (report/), or why none."""
    from zeromem_lsp.memory.estimate import Estimate
    from zeromem_lsp.memory.plan import MemoryPlan
    from zeromem_lsp.report import html_report

    try:
        _, analysis, _ = await ls.current(uri)
    except DocumentNotOpen:
        return {"why": "the document is not open"}
    plan = analysis.plan
    if not isinstance(plan, MemoryPlan):
        missing = "; ".join(plan.missing) if plan is not None else "this file is not a training config"
        return {"why": f"no memory figure for this file: {missing}"}
    return {"html": html_report(Estimate(plan))}


@server.feature(types.TEXT_DOCUMENT_INLAY_HINT)
@guarded()
async def inlay_hint(ls: ZeromemServer, params: types.InlayHintParams):
    from zeromem_lsp.assist.inlay import inlay_hints

    document, analysis, lines = await ls.current(params.text_document.uri)
    start, end = to_offsets(lines, params.range, ls.encoding)
    return [to_inlay_hint(hint, lines, ls.encoding) for hint in inlay_hints(analysis, start, end)] or None


@server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=['"', ":"]))
@guarded()
async def completion(ls: ZeromemServer, params: types.CompletionParams):
    from zeromem_lsp.assist.completion import complete

    document, analysis, lines = await ls.current(params.text_document.uri)
    candidates = complete(analysis, to_offset(lines, params.position, ls.encoding))
    if not candidates:
        return None
    return types.CompletionList(is_incomplete=False, items=[to_completion_item(c, lines, ls.encoding) for c in candidates])


@server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]))
@guarded()
async def code_action(ls: ZeromemServer, params: types.CodeActionParams):
    only = params.context.only
    if only and not any(types.CodeActionKind.QuickFix.startswith(kind) for kind in only):
        return None
    document, analysis, lines = await ls.current(params.text_document.uri)
    start, end = to_offsets(lines, params.range, ls.encoding)
    versioned = bool(ls._capability("workspace", "workspace_edit", "document_changes"))
    actions = []
    for finding in analysis.findings:
        if finding.fixes and finding.start <= end and start <= finding.end:
            diagnostic = to_diagnostic(finding, lines, ls.encoding, document.uri)
            for fix in finding.fixes:
                edit = to_workspace_edit(fix, lines, ls.encoding, document.uri, document.version, versioned)
                actions.append(to_code_action(fix, diagnostic, edit))
    return actions or None
