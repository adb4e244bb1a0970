"""stdio framing: stdin read by the event loop when it is a pipe, pygls' reader for anything else.

Raw `zeromem serve` subprocesses (no pytest-lsp): messages split at awkward points, a body larger
than the reader's buffer, end of input without `exit`, and stdin that is a regular file.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import tempfile

from lsp_session import OVERFLOW, SERVER

from zeromem_lsp.lsp.pipe_io import READ_CHUNK, own_pipe

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"processId": None, "rootUri": None, "capabilities": {}}}


def frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def read_message(stream) -> dict:
    length = None
    while (line := stream.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    assert length is not None, "the server closed its output"
    return json.loads(stream.read(length))


def next_with(stream, predicate) -> dict:
    while not predicate(message := read_message(stream)):
        pass
    return message


def test_own_pipe_only_for_a_pipe_or_socket_apart_from_stdout():
    read_end, write_end = os.pipe()
    other_read, other_write = os.pipe()
    left, right = socket.socketpair()
    try:
        with open(read_end, "rb", closefd=False) as stdin, open(other_write, "wb", closefd=False) as stdout:
            assert own_pipe(stdin, stdout)
        with open(read_end, "rb", closefd=False) as stdin, open(read_end, "rb", closefd=False) as same:
            assert not own_pipe(stdin, same)  # one descriptor both ways: never made non-blocking
        with tempfile.TemporaryFile() as regular, open(other_write, "wb", closefd=False) as stdout:
            assert not own_pipe(regular, stdout)
        with left.makefile("rb") as stdin, open(other_write, "wb", closefd=False) as stdout:
            assert own_pipe(stdin, stdout)  # Node and Neovim give their servers one socket per stream
        with left.makefile("rb") as stdin, left.makefile("wb") as stdout:
            assert not own_pipe(stdin, stdout)
    finally:
        for fd in (read_end, write_end, other_read, other_write):
            os.close(fd)
        left.close()
        right.close()


def test_split_writes_and_a_body_larger_than_the_read_buffer_over_a_pipe(tmp_path):
    server = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        data = frame(INITIALIZE)
        for cut in (7, 16, 19, len(data) - 3):  # inside the header, at its end, inside the body
            server.stdin.write(data[:cut])
            server.stdin.flush()
            data = data[cut:]
        server.stdin.write(data + frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        server.stdin.flush()
        assert "capabilities" in read_message(server.stdout)["result"]
        padding = " " * (READ_CHUNK * 2)  # whitespace: the findings stay those of OVERFLOW
        text = OVERFLOW.rstrip()[:-1] + padding + "}"
        uri = (tmp_path / "ds_config.json").as_uri()
        server.stdin.write(frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "json", "version": 1, "text": text}}}))
        server.stdin.flush()
        published = next_with(server.stdout, lambda m: m.get("method") == "textDocument/publishDiagnostics")
        assert published["params"]["uri"] == uri
        assert [d["code"] for d in published["params"]["diagnostics"]] == ["ZM101"]
        server.stdin.close()  # end of input without shutdown/exit: the server ends by itself
        assert server.wait(timeout=15) == 0
    finally:
        server.kill()
        server.wait()


def test_stdin_from_a_regular_file_uses_the_blocking_reader(tmp_path):
    script = tmp_path / "session.lsp"
    script.write_bytes(frame(INITIALIZE) + frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
                       + frame({"jsonrpc": "2.0", "method": "exit"}))
    with script.open("rb") as stdin:
        done = subprocess.run(SERVER, stdin=stdin, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b""  # not a terminal: nothing said beside the protocol

    stream = io.BytesIO(done.stdout)
    assert "capabilities" in read_message(stream)["result"]
    assert read_message(stream) == {"jsonrpc": "2.0", "id": 2, "result": None}


def test_one_socket_per_stream_as_node_and_neovim_start_servers():
    parent_in, child_in = socket.socketpair()
    parent_out, child_out = socket.socketpair()
    server = subprocess.Popen(SERVER, stdin=child_in, stdout=child_out, stderr=subprocess.DEVNULL)
    child_in.close()
    child_out.close()
    try:
        parent_in.sendall(frame(INITIALIZE))
        with parent_out.makefile("rb") as replies:
            assert "capabilities" in read_message(replies)["result"]
            parent_in.sendall(frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"}))
            assert read_message(replies) == {"jsonrpc": "2.0", "id": 2, "result": None}
        parent_in.sendall(frame({"jsonrpc": "2.0", "method": "exit"}))
        assert server.wait(timeout=15) == 0
    finally:
        server.kill()
        server.wait()
        parent_in.close()
        parent_out.close()
