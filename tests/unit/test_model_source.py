"""Where a model's config.json is found: file, model directory, hub id in the Hugging Face cache (offline)."""

from pathlib import Path

import pytest

from zeromem_lsp.configs.model_source import MAX_LOADED_BYTES, find_model_config, hub_cache, is_repo_id

HOME = str(Path("~").expanduser())


@pytest.mark.parametrize("environ, expected", [
    ({}, f"{HOME}/.cache/huggingface/hub"),
    ({"XDG_CACHE_HOME": "/xdg"}, "/xdg/huggingface/hub"),
    ({"XDG_CACHE_HOME": "/xdg", "HF_HOME": "/hf"}, "/hf/hub"),
    ({"HF_HOME": "/hf", "HUGGINGFACE_HUB_CACHE": "/legacy"}, "/legacy"),
    ({"HF_HOME": "/hf", "HUGGINGFACE_HUB_CACHE": "/legacy", "HF_HUB_CACHE": "/hub"}, "/hub"),
    ({"HF_HOME": "~/hf"}, f"{HOME}/hf/hub"),
])
def test_the_cache_directory_follows_huggingface_hubs_constants(environ, expected):
    assert hub_cache(environ) == Path(expected)


@pytest.mark.parametrize("name, valid", [
    ("Qwen/Qwen2.5-7B", True), ("gpt2", True), ("google/gemma-3-4b-it", True),
    ("a/b/c", False), ("org--x/name", False), ("../name", False), ("org/name.git", False), ("-org/name", False),
    ("/abs/config.json", False), ("", False), ("café/x", False),
])
def test_repo_ids_are_what_validate_repo_id_accepts(name, valid):
    assert is_repo_id(name) is valid


def cache_with(root: Path, repo: str, text: str | None = '{"model_type": "gpt2"}', ref: str | None = "abc") -> Path:
    """A hub cache holding `repo` the way huggingface_hub lays it out."""
    folder = root / ("models--" + repo.replace("/", "--"))
    (folder / "snapshots" / "abc").mkdir(parents=True)
    if ref is not None:
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(ref)
    if text is not None:
        (folder / "snapshots" / "abc" / "config.json").write_text(text)
    return folder


def test_a_file_a_directory_and_a_hub_id_in_that_order(tmp_path):
    cache = tmp_path / "hub"
    cache_with(cache, "org/model")
    environ = {"HF_HUB_CACHE": str(cache)}
    found = find_model_config("org/model", tmp_path, environ)
    assert found.path == cache / "models--org--model" / "snapshots" / "abc" / "config.json"
    assert found.text == '{"model_type": "gpt2"}' and str(found.path) in found.shown
    (tmp_path / "org" / "model").mkdir(parents=True)
    (tmp_path / "org" / "model" / "config.json").write_text("{}")
    found = find_model_config("org/model", tmp_path, environ)  # a local directory wins, as in Transformers
    assert found.path == tmp_path / "org" / "model" / "config.json" and found.text == "{}"
    found = find_model_config("org/model/config.json", tmp_path, environ)
    assert found.shown == "org/model/config.json" and found.text == "{}"


def test_a_missing_model_says_every_place_looked(tmp_path):
    cache = tmp_path / "hub"
    found = find_model_config("org/missing", tmp_path, {"HF_HUB_CACHE": str(cache)})
    assert found.text is None
    assert found.tried == (f"{tmp_path / 'org' / 'missing'} (file not found)",
                           f"{cache / 'models--org--missing'} (not in the Hugging Face cache)")
    assert found.why.startswith("looked for ")


def test_cache_states_huggingface_hub_distinguishes(tmp_path):
    cache = tmp_path / "hub"
    environ = {"HF_HUB_CACHE": str(cache)}
    cache_with(cache, "org/no-ref", ref=None)  # no refs/main: "main" is taken as the snapshot name
    assert "no snapshot of revision main" in find_model_config("org/no-ref", tmp_path, environ).why
    folder = cache_with(cache, "org/absent", text=None)
    (folder / ".no_exist" / "abc").mkdir(parents=True)
    (folder / ".no_exist" / "abc" / "config.json").write_text("")
    assert "revision abc has no config.json" in find_model_config("org/absent", tmp_path, environ).why
    cache_with(cache, "org/weights-only", text=None)
    assert "snapshots/abc/config.json (file not found)" in find_model_config("org/weights-only", tmp_path,
                                                                              environ).why


def test_a_huge_file_is_not_read(tmp_path):
    (tmp_path / "config.json").write_bytes(b" " * (MAX_LOADED_BYTES + 1))
    assert "larger than 16 MiB" in find_model_config("config.json", tmp_path, {}).why
