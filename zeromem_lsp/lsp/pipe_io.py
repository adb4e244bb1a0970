"""Reading stdin on the event loop itself when it is a pipe, instead of pygls' thread hops.

pygls reads stdio through a thread pool: one hop per header line and one for the body, three per
message, each a thread wake-up and a GIL hand-over (~0.1 ms apiece on two busy cores). When stdin
is a pipe or socket of its own (how editors start servers: Node and Neovim hand over one socket per
stream, Python's subprocess a pipe), an asyncio stream reads it from the loop's own poll. Anything
else (a file, a terminal, one descriptor for both directions, Windows) keeps pygls' reader, whose
blocking reads are safe everywhere.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import sys
from threading import Event

from pygls.io_ import StdoutWriter, run_async

logger = logging.getLogger(__name__)
READ_CHUNK = 2**20  # bytes buffered before reading pauses (a 10 MB didOpen arrives in ~20 reads)


def own_pipe(stdin, stdout) -> bool:
    """stdin is a pipe or socket apart from stdout: making it non-blocking cannot affect our writes."""
    if sys.platform == "win32":
        return False
    try:
        read, written = os.fstat(stdin.fileno()), os.fstat(stdout.fileno())
    except (AttributeError, OSError, ValueError):
        return False
    streamed = stat.S_ISFIFO(read.st_mode) or stat.S_ISSOCK(read.st_mode)
    return streamed and (read.st_dev, read.st_ino) != (written.st_dev, written.st_ino)


async def _serve(server, stdin) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=READ_CHUNK)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    try:
        await run_async(stop_event=server._stop_event, reader=reader, protocol=server.protocol,
                        logger=logger, error_handler=server.report_server_error)
    except asyncio.IncompleteReadError:  # the client went away in the middle of a message
        logger.error("Connection to the client is lost! Shutting down the server.")


def serve_pipe(server, stdin, stdout) -> None:
    """pygls' `_start_io_async`, with `stdin` read by the event loop."""
    server._stop_event = Event()
    server.protocol.set_writer(StdoutWriter(stdout))
    try:
        asyncio.run(_serve(server, stdin))
    except BrokenPipeError:
        logger.error("Connection to the client is lost! Shutting down the server.")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()
        try:
            os.set_blocking(stdin.fileno(), True)  # as we found it, for whoever shares the pipe
        except (OSError, ValueError):
            pass
