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
