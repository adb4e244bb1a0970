"""`--accelerate-config PATH` (check, estimate --config): the Accelerate YAML recipes are launched with,
relative to the working directory. A file that cannot be used is a usage error (exit 2), naming the path tried."""

from __future__ import annotations

from pathlib import Path

from zeromem_lsp.cli.errors import UsageError

HELP = ("the Accelerate config recipes are launched with (accelerate launch --config_file PATH): world size, "
        "engine and mixed precision from it")


def accelerate_config(text: str | None) -> str | None:
    """The absolute path of a readable Accelerate config, or None when the option is absent."""
    if text is None:
        return None
    from zeromem_lsp.configs.model_source import read_small_text
    from zeromem_lsp.launch.accelerate import parsed_accelerate

    path = Path(text).expanduser().resolve()
    content, why = read_small_text(path)
    if content is None:
        raise UsageError(f"--accelerate-config: cannot read {text!r} (looked for {path}: {why})")
    data, problem = parsed_accelerate(content)
    if data is None:
        raise UsageError(f"--accelerate-config {text}: {problem}")
    return str(path)
