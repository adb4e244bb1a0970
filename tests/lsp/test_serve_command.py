"""`zeromem serve` says what it is doing on stderr: where it listens (`--tcp`), and that it waits for an
LSP client when started on a terminal (a newcomer typing `zeromem serve` sees no prompt otherwise)."""

from __future__ import annotations

import os
import pty
import socket
import subprocess

from lsp_session import SERVER
from test_transport import INITIALIZE, frame, read_message


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return probe.getsockname()[1]


def test_tcp_says_where_it_listens_and_serves_there():
    port = free_port()
    server = subprocess.Popen([*SERVER, "--tcp", f"127.0.0.1:{port}"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        said = server.stderr.readline().decode()
        assert said == f"zeromem serve: listening for an LSP client on 127.0.0.1:{port} (TCP); Ctrl-C stops\n"
        connection = socket.create_connection(("127.0.0.1", port), timeout=30)  # said once it listens
        with connection, connection.makefile("rb") as replies:
            connection.sendall(frame(INITIALIZE))
            assert "capabilities" in read_message(replies)["result"]
    finally:
        server.kill()
        server.wait()


def test_tcp_on_a_port_in_use_is_a_clear_error():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run([*SERVER, "--tcp", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith(f"zeromem: error: --tcp: cannot listen on 127.0.0.1:{port}: ")
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_on_a_terminal_it_says_it_waits_for_an_lsp_client():
    terminal, other_end = pty.openpty()
    server = subprocess.Popen(SERVER, stdin=other_end, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.close(other_end)
    try:
        said = server.stderr.readline().decode()
        assert said.startswith("zeromem serve: waiting for an LSP client on stdin")
        assert "zeromem check" in said  # what to run instead
    finally:
        server.kill()
        server.wait()
        os.close(terminal)
