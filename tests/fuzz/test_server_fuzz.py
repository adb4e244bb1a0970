"""A hypothesis state machine editing a document in the real server over stdio.

Random edits (characters, emoji, corpus fragments, odd numbers, deep nesting) each followed by
random hover / inlay hint / code action / completion requests at random positions. Properties:
the process stays up, every request is answered within a timeout, every diagnostic and edit
range lies inside the document, and applying any offered quick fix yields a document the server
still analyses. ZEROMEM_FUZZ_STEPS sets the total number of steps (default: a short run).
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from tests.fuzz.sync_client import SyncClient

STEPS = int(os.environ.get("ZEROMEM_FUZZ_STEPS", "120"))
REPORT = os.environ.get("ZEROMEM_FUZZ_REPORT")  # a JSON file to write the run's counts to
COUNTS: dict[str, int] = {}
STEPS_PER_RUN = 40
DOCUMENTS = iter(range(10**9))  # each example edits its own URI: versions restart at 1 per example
CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "real"
SEED = (Path(__file__).resolve().parents[2] / "examples" / "zero1-7b-8x24gib.json").read_text()

FRAGMENTS = [
    '"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}', '"stage": ', "1e400", "-0", "NaN",
    '"zeromem": {"parameters": "7B", "gpu_memory": "24GiB", "world_size": 8}', "{", "}", "[", "]", ",", ":",
    '"', "//", "/*", "#", "\n", "🚀", "𝔘", "é", "\t", '"auto"', "9" * 400, "[" * 300, "{\"a\": " * 200,
    '"train_batch_size": 33', '"fp16": {"enabled": true}', '"bf16": {"enabled": true}',
]
if CORPUS.is_dir():
    FRAGMENTS += [path.read_text(encoding="utf-8", errors="replace")[:600] for path in sorted(CORPUS.glob("*.json"))[:12]]

texts = st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12))
# Draws never depend on what the server answered (hypothesis must be able to replay a run), so
# positions are fractions of the current length and choices are indices taken modulo.
fractions = st.integers(0, 10**6)


def utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def inside(text: str, lsp_range: dict) -> bool:
    lines = text.split("\n")  # LSP also breaks at \r; the fuzzer's \r only ever comes with \n or alone in st.text
    lines = [part for line in lines for part in line.split("\r")] if "\r" in text else lines
    for end in ("start", "end"):
        position = lsp_range[end]
        if not 0 <= position["line"] < len(lines) + 1:
            return False
        line = lines[position["line"]] if position["line"] < len(lines) else ""
        if not 0 <= position["character"] <= utf16_length(line):
            return False
    start, stop = lsp_range["start"], lsp_range["end"]
    return (start["line"], start["character"]) <= (stop["line"], stop["character"])


def offset_of(text: str, position: dict) -> int:
    lines = text.splitlines(keepends=True) or [""]
    line = min(position["line"], len(lines) - 1)
    prefix = lines[line].encode("utf-16-le")[: 2 * position["character"]].decode("utf-16-le", errors="ignore")
    return sum(len(part) for part in lines[:line]) + len(prefix)


class EditingSession(RuleBasedStateMachine):
    client: SyncClient | None = None

    @initialize()
    def open_document(self):
        if EditingSession.client is None or not EditingSession.client.alive():
            EditingSession.client = SyncClient()
            EditingSession.client.initialize()
        self.version = 1
        self.text = SEED
        self.uri = f"file:///fuzz/{next(DOCUMENTS)}/ds_config.json"
        self.client.notify("textDocument/didOpen", {"textDocument": {
            "uri": self.uri, "languageId": "json", "version": 1, "text": self.text}})

    def _count(self, what: str) -> None:
        COUNTS[what] = COUNTS.get(what, 0) + 1

    def _sync(self, new_text: str) -> None:
        self._count("edits")
        self.version += 1
        self.text = new_text
        self.client.notify("textDocument/didChange", {"textDocument": {"uri": self.uri, "version": self.version},
                                                      "contentChanges": [{"text": new_text}]})

    def _position(self, offset: int) -> dict:
        before = self.text[:offset]
        line = before.count("\n")
        return {"line": line, "character": utf16_length(before[before.rfind("\n") + 1:])}

    def _offset(self, fraction: int) -> int:
        return len(self.text) * fraction // 10**6

    @rule(where=fractions, fragment=texts)
    def insert(self, where, fragment):
        offset = self._offset(where)
        self._sync(self.text[:offset] + fragment + self.text[offset:])

    @rule(where=fractions, length=st.integers(0, 40))
    def delete(self, where, length):
        start = self._offset(where)
        self._sync(self.text[:start] + self.text[start + length:])

    @rule(fragment=st.sampled_from(FRAGMENTS))
    def replace_all(self, fragment):
        self._sync("{" + fragment + "}" if fragment.startswith('"') else fragment)

    @rule(where=fractions)
    def hover(self, where):
        offset = self._offset(where)
        self._count("hover requests")
        response = self.client.request("textDocument/hover", {"textDocument": {"uri": self.uri}, "position": self._position(offset)})
        result = response.get("result")
        if result and result.get("range"):
            assert inside(self.text, result["range"])

    @rule(first=fractions, second=fractions)
    def inlay_hints(self, first, second):
        start, end = sorted((self._offset(first), self._offset(second)))
        self._count("inlay hint requests")
        response = self.client.request("textDocument/inlayHint", {"textDocument": {"uri": self.uri}, "range": {
            "start": self._position(start), "end": self._position(end)}})
        for hint in response.get("result") or []:
            assert inside(self.text, {"start": hint["position"], "end": hint["position"]})

    @rule(where=fractions)
    def completion(self, where):
        offset = self._offset(where)
        self._count("completion requests")
        response = self.client.request("textDocument/completion", {"textDocument": {"uri": self.uri}, "position": self._position(offset)})
        result = response.get("result")
        items = result.get("items", []) if isinstance(result, dict) else result or []
        for item in items:
            if item.get("textEdit"):
                assert inside(self.text, item["textEdit"].get("range") or item["textEdit"]["replace"])

    @rule(on_diagnostic=st.booleans(), pick=st.integers(0, 10**6), where=fractions, apply=st.integers(0, 10**6))
    def code_action_and_apply(self, on_diagnostic, pick, where, apply):
        published = self.client.wait_published(self.uri, self.version)
        diagnostics = published["diagnostics"]
        for diagnostic in diagnostics:
            assert inside(self.text, diagnostic["range"]), diagnostic
        if diagnostics and on_diagnostic:
            target = diagnostics[pick % len(diagnostics)]["range"]
        else:
            start = self._offset(where)
            target = {"start": self._position(start), "end": self._position(start)}
        self._count("code action requests")
        response = self.client.request("textDocument/codeAction", {
            "textDocument": {"uri": self.uri}, "range": target, "context": {"diagnostics": diagnostics}})
        actions = [a for a in response.get("result") or [] if a.get("edit")]
        if not actions:
            return
        action = actions[apply % len(actions)]
        edits = action["edit"].get("changes", {}).get(self.uri, [])
        for change in action["edit"].get("documentChanges", []) or []:
            edits += change.get("edits", [])
        for edit in edits:
            assert inside(self.text, edit["range"]), edit
        text = self.text
        for edit in sorted(edits, key=lambda e: (e["range"]["start"]["line"], e["range"]["start"]["character"]), reverse=True):
            start, end = offset_of(text, edit["range"]["start"]), offset_of(text, edit["range"]["end"])
            text = text[:start] + edit["newText"] + text[end:]
        self._count("quick fixes applied")
        self._sync(text)
        self.client.wait_published(self.uri, self.version)  # the fixed document is still analysed

    @invariant()
    def server_is_up(self):
        COUNTS["checks"] = COUNTS.get("checks", 0) + 1
        if self.client is not None:
            assert self.client.alive(), "the server process exited"

    def teardown(self):
        if self.client is not None and self.client.alive():
            self.client.notify("textDocument/didClose", {"textDocument": {"uri": self.uri}})


def _steps() -> int:
    return sum(value for key, value in COUNTS.items() if key not in ("checks", "quick fixes applied"))


def test_editing_session_against_the_real_server():
    """Runs the state machine until at least STEPS edits and requests have gone to the server."""
    short = STEPS <= 200
    while _steps() < STEPS:
        run_state_machine_as_test(EditingSession, settings=settings(
            max_examples=max(1, min(50, (STEPS - _steps()) // 20)), stateful_step_count=STEPS_PER_RUN,
            deadline=None, suppress_health_check=list(HealthCheck), derandomize=short, database=None,
        ))
        if short:
            break


def teardown_module():
    if EditingSession.client is not None:
        EditingSession.client.close()
    if REPORT:
        import json

        Path(REPORT).write_text(json.dumps({"steps": _steps(), **COUNTS}, indent=2))
