"""The versions that run: a library's installed version read from its metadata (importlib.metadata: no import of the
library), else the newest the model follows. Every figure says which versions it is for (present.versions_line)."""

from __future__ import annotations

import functools
import re
from importlib import metadata

#: The newest release of each library the step model follows (docs/memory-model.md, "Versions").
NEWEST = {"torch": "2.13", "transformers": "5.24", "deepspeed": "0.19.8", "peft": "0.21", "trl": "1.16"}


@functools.lru_cache(maxsize=None)
def installed(package: str) -> str | None:
    """The version of `package` installed beside zeromem (None: not installed)."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def release(version: str) -> tuple[int, ...]:
    """(major, minor, patch) of a version string ("1.15.0.dev0" → (1, 15, 0))."""
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def running(package: str) -> tuple[str, bool]:
    """(the version that runs, whether it is the installed one): installed, else the newest followed."""
    found = installed(package)
    return (found, True) if found is not None else (NEWEST[package], False)


__all__ = ["NEWEST", "installed", "release", "running"]
