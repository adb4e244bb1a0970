"""A blocking LSP client over stdio for the stateful fuzz test (hypothesis state machines are sync).

A reader thread parses every message; requests wait on their id with a timeout; published
diagnostics are kept per URI with their version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading


class ServerDied(AssertionError):
    pass


class SyncClient:
    def __init__(self, command: list[str] | None = None):
        self.process = subprocess.Popen(
            command or [sys.executable, "-m", "zeromem_lsp", "serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        self.lock = threading.Condition()  # guards what the reader thread records
        self.write_lock = threading.Lock()  # never held while waiting: a full pipe must not block the reader
        self.responses: dict[int, dict] = {}
        self.published: dict[str, list[dict]] = {}
        self.log_messages: list[str] = []
        self.next_id = 1
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    with self.lock:
                        self.lock.notify_all()
                    return
                if line in (b"\r\n", b"\n"):
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            message = json.loads(stream.read(length))
            with self.lock:
                if "id" in message and "method" not in message:
                    self.responses[message["id"]] = message
                elif message.get("method") == "textDocument/publishDiagnostics":
                    self.published.setdefault(message["params"]["uri"], []).append(message["params"])
                elif message.get("method") == "window/logMessage":
                    self.log_messages.append(message["params"]["message"])
                self.lock.notify_all()
            if "id" in message and "method" in message:  # a request from the server
                self._send({"jsonrpc": "2.0", "id": message["id"], "result": None
                            if message["method"] != "workspace/configuration"
                            else [None for _ in message["params"]["items"]]})

    def _send(self, message: dict) -> None:
        body = json.dumps(message).encode()
        try:
            with self.write_lock:
                self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
                self.process.stdin.flush()
        except (BrokenPipeError, OSError) as error:
            raise ServerDied(f"server pipe closed: {error}") from None

    def alive(self) -> bool:
        return self.process.poll() is None

    def request(self, method: str, params: dict, timeout: float = 15.0) -> dict:
        with self.lock:
            request_id, self.next_id = self.next_id, self.next_id + 1
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        with self.lock:
            answered = self.lock.wait_for(lambda: request_id in self.responses or not self.alive(), timeout)
            if not self.alive():
                raise ServerDied(f"server exited (status {self.process.poll()}) during {method}")
            if not answered:
                raise AssertionError(f"{method} not answered within {timeout} s")
            return self.responses.pop(request_id)

    def notify(self, method: str, params: dict) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def wait_published(self, uri: str, version: int, timeout: float = 15.0) -> dict:
        def ready():
            return any(p.get("version") in (version, None) for p in self.published.get(uri, [])[-3:]) or not self.alive()

        with self.lock:
            if not self.lock.wait_for(ready, timeout):
                raise AssertionError(f"no diagnostics for version {version} within {timeout} s")
            if not self.alive():
                raise ServerDied("server exited while analysing")
            return [p for p in self.published[uri] if p.get("version") in (version, None)][-1]

    def initialize(self) -> dict:
        result = self.request("initialize", {"processId": os.getpid(), "rootUri": None, "capabilities": {
            "textDocument": {"publishDiagnostics": {"versionSupport": True}, "hover": {"contentFormat": ["markdown"]},
                             "inlayHint": {}, "codeAction": {"codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["quickfix"]}}}},
        }})
        self.notify("initialized", {})
        return result

    def close(self) -> None:
        try:
            self.request("shutdown", {}, timeout=10)
            self.notify("exit", {})
            self.process.wait(timeout=10)
        except Exception:
            self.process.kill()
