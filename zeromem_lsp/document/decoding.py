"""Bytes of a config file → text, the way DeepSpeed would read them (UTF-8), never raising.

DeepSpeed opens config files as UTF-8 text; anything else makes its loader fail. The text is still
returned (undecodable bytes replaced) so the rest of the file can be checked.
"""

from __future__ import annotations

from typing import NamedTuple

BINARY_PROBE = 8192


class Decoded(NamedTuple):
    text: str
    problem: str | None = None  # why DeepSpeed could not read these bytes
    offset: int = 0  # character offset in `text` where the problem is
    binary: bool = False


def decode_config(data: bytes) -> Decoded:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return Decoded(
            data.decode("utf-16", errors="replace"),
            "the file is UTF-16 encoded; DeepSpeed and HF read config files as UTF-8 and fail on it",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        text = data.decode("utf-8", errors="replace")
        offset = len(data[: error.start].decode("utf-8", errors="replace"))
        if b"\x00" in data[:BINARY_PROBE]:
            return Decoded(text, "binary data, not a text config", 0, binary=True)
        return Decoded(
            text,
            f"invalid UTF-8 (byte 0x{data[error.start]:02x} at byte offset {error.start}); DeepSpeed cannot read the file",
            offset,
        )
    if "\x00" in text[:BINARY_PROBE]:
        return Decoded(text, "binary data (NUL bytes), not a text config", text.index("\x00"), binary=True)
    return Decoded(text)
