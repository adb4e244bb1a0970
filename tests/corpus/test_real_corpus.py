"""The real-world corpus in ../shared (absent in a user's clone: skipped) through `zeromem check`.

A config DeepSpeed accepts must get no error finding; one it refuses must get at least one.
Files containing "auto" are judged by DeepSpeed's verdict after HF filled them ("via_hf").
"""

import json
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "real"
VERDICTS = CORPUS / "DEEPSPEED_VERDICTS.json"

pytestmark = pytest.mark.skipif(not VERDICTS.is_file(), reason="../shared/corpus/real is not available")


@pytest.fixture(scope="module")
def findings_by_file():
    done = run_zeromem("check", "--format", "json", str(CORPUS))
    assert done.returncode in (0, 1), done.stderr
    by_file: dict[str, list] = {}
    for finding in json.loads(done.stdout)["findings"]:
        by_file.setdefault(Path(finding["path"]).name, []).append(finding)
    return by_file


def _cases():
    if not VERDICTS.is_file():
        return []
    return sorted(json.loads(VERDICTS.read_text())["files"].items())


@pytest.mark.parametrize(("name", "verdict"), _cases(), ids=[name for name, _ in _cases()])
def test_verdict_matches_deepspeed(findings_by_file, name, verdict):
    text = (CORPUS / name).read_text(encoding="utf-8")
    expected = verdict["via_hf"] if '"auto"' in text else verdict["deepspeed"]
    errors = [f for f in findings_by_file.get(name, []) if f["severity"] == "error"]
    if expected == "accept":
        assert errors == [], f"false alarm on a config DeepSpeed accepts: {errors}"
    else:
        assert errors, f"DeepSpeed refuses this ({verdict.get('deepspeed_error')}) but zeromem reports no error"


# --- FSDP JSON (--fsdp_config) and Accelerate YAML ----------------------------------------------

def _fsdp_and_accelerate_files():
    if not CORPUS.is_dir():
        return []
    names = sorted(p.name for p in CORPUS.iterdir() if p.suffix in (".yaml", ".yml") or "fsdp_config" in p.name)
    return [name for name in names if "gpt-neox" not in name]  # a GPT-NeoX config, not an Accelerate one


def test_every_fsdp_and_accelerate_file_is_in_the_corpus_set():
    names = _fsdp_and_accelerate_files()
    assert len([n for n in names if n.endswith(".json")]) == 6
    assert len([n for n in names if not n.endswith(".json")]) == 22


@pytest.mark.parametrize("name", _fsdp_and_accelerate_files())
def test_fsdp_and_accelerate_files_have_no_false_errors(findings_by_file, name):
    """Each of these loads in current Transformers / Accelerate: no error, through the CLI and the
    server's entry point (`analyse(text, name)`, which the language server calls)."""
    from zeromem_lsp.analysis import analyse

    errors = [f for f in findings_by_file.get(name, []) if f["severity"] == "error"]
    assert errors == [], f"false alarm: {errors}"
    analysis = analyse((CORPUS / name).read_text(encoding="utf-8"), name)
    assert analysis.kind in ("accelerate", "fsdp")
    assert [f for f in analysis.findings if f.severity == "error"] == []
