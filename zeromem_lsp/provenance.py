"""Where a value came from. One key-path type, one provenance type, one value-with-provenance type.

`Origin.note` names the layer in words a user can look up: a config key (`train_batch_size`), a
command-line flag (`--world-size`), an editor setting (`editor setting zeromem.worldSize`), a project
file (`pyproject.toml [tool.zeromem]`), the file's own block (`deepspeed.zeromem.world_size`), or a
default. `Origin.path` is the key path when the value is written in the analysed document.
"""

from __future__ import annotations

from typing import NamedTuple

Path = tuple[str | int, ...]  # a key path in a document, e.g. ("zero_optimization", "stage")


class Origin(NamedTuple):
    """Where a value came from: a note naming the layer and, when written in this document, its key path."""

    note: str
    path: Path | None = None


class Assumed(Origin):
    """An origin no source gave: a value zeromem assumes where nothing says (the smallest world that runs the
    parallel degrees), shown like any other; no error rests on it, since the run may be given another."""

    __slots__ = ()


class Given(NamedTuple):
    """A value and where it came from."""

    value: object
    note: str
    path: Path | None = None

    @property
    def origin(self) -> Origin:
        return Origin(self.note, self.path)

    @classmethod
    def of(cls, value: object, origin: Origin) -> Given:
        return cls(value, origin.note, origin.path)
