"""A minimal LSP client over stdio for benchmarks: one framing, one reader task, timestamps.

Both servers are driven by this same client, so protocol overhead is identical on both sides.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field


@dataclass
class Session:
    process: asyncio.subprocess.Process
    pending: dict[int, asyncio.Future] = field(default_factory=dict)
    diagnostics: dict[str, asyncio.Queue] = field(default_factory=dict)
    next_id: int = 1
    config: dict = field(default_factory=dict)

    @classmethod
    async def start(cls, command: list[str], config: dict | None = None) -> "Session":
        process = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, limit=2**28,
        )
        session = cls(process, config=config or {})
        session.reader = asyncio.create_task(session._read())
        return session

    def _send(self, message: dict) -> None:
        body = json.dumps(message).encode()
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def request(self, method: str, params: dict) -> object:
        request_id, self.next_id = self.next_id, self.next_id + 1
        future = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        await self.process.stdin.drain()
        return await future

    async def notify(self, method: str, params: dict) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})
        await self.process.stdin.drain()

    def queue(self, uri: str) -> asyncio.Queue:
        return self.diagnostics.setdefault(uri, asyncio.Queue())

    async def _read(self) -> None:
        stream = self.process.stdout
        while True:
            header = await stream.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in header.split(b"\r\n") if line.lower().startswith(b"content-length"))
            message = json.loads(await stream.readexactly(length))
            now = time.perf_counter()
            if "id" in message and "method" not in message:
                future = self.pending.pop(message["id"], None)
                if future and not future.done():
                    future.set_result(message.get("result"))
            elif message.get("method") == "textDocument/publishDiagnostics":
                params = message["params"]
                self.queue(params["uri"]).put_nowait((now, params))
            elif "id" in message:  # a request from the server
                self._answer(message)

    def _answer(self, message: dict) -> None:
        method = message["method"]
        if method == "workspace/configuration":
            result = [self.config.get(item.get("section", ""), None) for item in message["params"]["items"]]
        else:
            result = None
        self._send({"jsonrpc": "2.0", "id": message["id"], "result": result})

    async def initialize(self, root: str, initialization_options: dict | None = None) -> dict:
        capabilities = {
            "general": {"positionEncodings": ["utf-16"]},
            "workspace": {"configuration": True},
            "textDocument": {
                "synchronization": {"dynamicRegistration": False},
                "hover": {"contentFormat": ["markdown", "plaintext"]},
                "publishDiagnostics": {"versionSupport": True},
                "inlayHint": {},
                "completion": {"completionItem": {"snippetSupport": False}},
            },
        }
        result = await self.request("initialize", {
            "processId": os.getpid(), "rootUri": root, "capabilities": capabilities,
            "initializationOptions": initialization_options or {},
        })
        await self.notify("initialized", {})
        return result

    async def wait_diagnostics(self, uri: str, timeout: float = 120.0) -> tuple[float, dict]:
        return await asyncio.wait_for(self.queue(uri).get(), timeout)

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.request("shutdown", {}), 10)
            await self.notify("exit", {})
            await asyncio.wait_for(self.process.wait(), 10)
        except (asyncio.TimeoutError, ConnectionError):
            self.process.kill()
        self.reader.cancel()

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0
