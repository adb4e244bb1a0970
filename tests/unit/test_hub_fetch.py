"""A hub model missing from the caches is fetched from the Hub (configs/hub.py): against a local HTTP server standing
in for the Hub through HF_ENDPOINT, never the internet (tests/conftest.py points HF_ENDPOINT at a dead port and sets
ZEROMEM_OFFLINE for every other test)."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem
from zeromem_lsp.configs import hub
from zeromem_lsp.configs.model_config import count_parameters_from_text
from zeromem_lsp.configs.model_source import find_model_config

DATA = Path(__file__).resolve().parents[1] / "data"
LLAMA_1B = DATA / "hf_cache" / "models--NousResearch--Llama-3.2-1B" / "snapshots"
LLAMA_1B_CONFIG = next(LLAMA_1B.glob("*/config.json")).read_text(encoding="utf-8")
RECIPE = DATA / "recipes" / "axolotl" / "examples" / "llama-3" / "lora-1b.yml"  # base_model: NousResearch/Llama-3.2-1B
GEMMA = (DATA / "models" / "gemma-3-4b-it" / "config.json").read_text(encoding="utf-8")


class FakeHub:
    """Answers `GET /{repo}/resolve/{revision}/config.json` from `files` (another file of the revision from `others`,
    keyed by repo, revision and name), as the Hub does (X-Error-Code on errors); records every request (path,
    Authorization)."""

    def __init__(self) -> None:
        self.files: dict[tuple[str, str], str] = {}
        self.others: dict[tuple[str, str, str], str] = {}
        self.gated: set[str] = set()
        self.redirects: dict[str, str] = {}
        self.requests: list[tuple[str, str | None]] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                owner.requests.append((self.path, self.headers.get("Authorization")))
                if self.path in owner.redirects:
                    self.send_response(307)
                    self.send_header("Location", owner.redirects[self.path])
                    self.end_headers()
                    return
                repo, _, rest = self.path.lstrip("/").partition("/resolve/")
                revision, _, name = rest.partition("/")
                from urllib.parse import unquote

                revision = unquote(revision)
                if repo in owner.gated and self.headers.get("Authorization") != "Bearer good-token":
                    code = 403 if self.headers.get("Authorization") else 401
                    return self.error(code, "GatedRepo")
                if not any(known == repo for known, _ in owner.files):
                    return self.error(401, "RepoNotFound")
                if (repo, revision) not in owner.files:
                    return self.error(404, "RevisionNotFound")
                if name != "config.json" and (repo, revision, name) not in owner.others:
                    return self.error(404, "EntryNotFound")
                text = owner.files[repo, revision] if name == "config.json" else owner.others[repo, revision, name]
                body = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def error(self, code: int, kind: str) -> None:
                self.send_response(code)
                self.send_header("X-Error-Code", kind)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """A running fake Hub, the network allowed, empty caches (HF's and zeromem's) under tmp_path."""
    served = FakeHub()
    for name in ("ZEROMEM_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", served.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("ZEROMEM_CACHE_DIR", str(tmp_path / "zeromem-cache"))
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-token"))
    yield served
    served.close()


def test_a_config_is_fetched_once_and_kept_outside_the_hf_cache(fake_hub, tmp_path):
    fake_hub.files["org/tiny", "main"] = LLAMA_1B_CONFIG
    found = find_model_config("org/tiny", tmp_path, hub="fetch")
    assert found.text == LLAMA_1B_CONFIG
    assert found.path == tmp_path / "zeromem-cache" / "hub" / "org" / "tiny" / "main" / "config.json"
    assert not (tmp_path / "hf-cache").exists()  # HF's cache is never written
    assert [path for path, _ in fake_hub.requests] == ["/org/tiny/resolve/main/config.json"]
    again = find_model_config("org/tiny", tmp_path, hub="fetch")
    assert again.text == LLAMA_1B_CONFIG and len(fake_hub.requests) == 1  # kept: no second request


def test_the_cache_is_read_offline_and_by_the_editor(fake_hub, tmp_path, monkeypatch):
    fake_hub.files["org/tiny", "main"] = LLAMA_1B_CONFIG
    find_model_config("org/tiny", tmp_path, hub="fetch")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert find_model_config("org/tiny", tmp_path, hub="cache").text == LLAMA_1B_CONFIG
    assert len(fake_hub.requests) == 1


def test_a_revision_is_asked_for_and_kept_apart(fake_hub, tmp_path):
    fake_hub.files["org/tiny", "main"] = LLAMA_1B_CONFIG
    fake_hub.files["org/tiny", "refs/pr/1"] = GEMMA
    found = find_model_config("org/tiny", tmp_path, revision="refs/pr/1", hub="fetch")
    assert found.text == GEMMA
    assert found.path.parent.name == "refs%2Fpr%2F1"
    assert fake_hub.requests[-1][0] == "/org/tiny/resolve/refs%2Fpr%2F1/config.json"
    assert find_model_config("org/tiny", tmp_path, hub="fetch").text == LLAMA_1B_CONFIG


def test_a_missing_revision_says_so(fake_hub, tmp_path):
    fake_hub.files["org/tiny", "main"] = LLAMA_1B_CONFIG
    found = find_model_config("org/tiny", tmp_path, revision="v9", hub="fetch")
    assert found.text is None
    assert "404: org/tiny has no revision 'v9'" in found.why


def test_a_missing_repo_says_check_the_id(fake_hub, tmp_path):
    found = find_model_config("org/nothing", tmp_path, hub="fetch")
    assert found.text is None
    assert "401: no repo org/nothing, or it is private or gated and no token was sent" in found.why
    assert "HF_TOKEN" in found.why


def test_a_gated_repo_asks_for_a_token_and_the_token_is_sent(fake_hub, tmp_path, monkeypatch):
    fake_hub.files["meta/gated", "main"] = LLAMA_1B_CONFIG
    fake_hub.gated.add("meta/gated")
    found = find_model_config("meta/gated", tmp_path, hub="fetch")
    assert found.text is None and "401: meta/gated is gated" in found.why and "huggingface-cli login" in found.why
    (tmp_path / "token").write_text("good-token\n")
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "token"))  # as `huggingface-cli login` saves it
    found = find_model_config("meta/gated", tmp_path, hub="fetch")
    assert found.text == LLAMA_1B_CONFIG
    assert fake_hub.requests[-1] == ("/meta/gated/resolve/main/config.json", "Bearer good-token")


def test_a_token_without_access_is_named(fake_hub, tmp_path, monkeypatch):
    fake_hub.files["meta/gated2", "main"] = LLAMA_1B_CONFIG
    fake_hub.gated.add("meta/gated2")
    monkeypatch.setenv("HF_TOKEN", "other-token")
    found = find_model_config("meta/gated2", tmp_path, hub="fetch")
    assert "403: meta/gated2 is gated and the token sent has no access" in found.why


def test_a_redirect_is_followed(fake_hub, tmp_path):
    fake_hub.files["org/new-name", "main"] = LLAMA_1B_CONFIG
    fake_hub.redirects["/org/old-name/resolve/main/config.json"] = "/org/new-name/resolve/main/config.json"
    assert find_model_config("org/old-name", tmp_path, hub="fetch").text == LLAMA_1B_CONFIG


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "ZEROMEM_OFFLINE"])
def test_the_offline_variables_forbid_the_request(fake_hub, tmp_path, monkeypatch, variable):
    fake_hub.files["org/tiny", "main"] = LLAMA_1B_CONFIG
    monkeypatch.setenv(variable, "1")
    found = find_model_config("org/tiny", tmp_path, hub="fetch")
    assert found.text is None and fake_hub.requests == []
    assert "resolve" not in found.why  # the message is the cache-only one


def test_an_unreachable_hub_says_so_quickly(fake_hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    found = find_model_config("org/unreachable", tmp_path, hub="fetch")
    assert found.text is None and "the Hub is unreachable" in found.why and "ZEROMEM_OFFLINE=1" in found.why


def test_an_answer_that_is_not_json_is_refused(fake_hub, tmp_path):
    fake_hub.files["org/html", "main"] = "<html>login</html>"
    found = find_model_config("org/html", tmp_path, hub="fetch")
    assert found.text is None and "not JSON" in found.why
    assert not (tmp_path / "zeromem-cache" / "hub" / "org" / "html").exists()


def test_a_background_fetch_calls_back_and_then_finds_it(fake_hub, tmp_path):
    fake_hub.files["org/later", "main"] = LLAMA_1B_CONFIG
    landed = threading.Event()
    first = find_model_config("org/later", tmp_path, hub="background", landed=landed.set)
    assert first.text is None and "being fetched from the Hub" in first.why
    assert landed.wait(10)
    assert find_model_config("org/later", tmp_path, hub="background").text == LLAMA_1B_CONFIG


def test_check_counts_a_recipe_whose_model_is_only_on_the_hub(fake_hub, tmp_path):
    fake_hub.files["NousResearch/Llama-3.2-1B", "main"] = LLAMA_1B_CONFIG
    done = run_zeromem("check", "--format", "json", "--gpu-memory", "2GiB", str(RECIPE))
    assert "Traceback" not in done.stderr
    findings = json.loads(done.stdout)["findings"]
    assert "ZM108" not in {f["code"] for f in findings}
    assert any("GiB" in f["message"] and "peak" in f["message"] for f in findings), findings
    assert len(fake_hub.requests) == 1
    again = run_zeromem("estimate", "--config", str(RECIPE), "--format", "json", "--offline")
    assert again.returncode in (0, 1), again.stderr
    assert json.loads(again.stdout)["peak_missing"] == []  # counted and shaped, from zeromem's cache
    assert len(fake_hub.requests) == 1  # found in zeromem's cache


def test_check_offline_and_a_missing_model_keep_the_recipe_clean(fake_hub, tmp_path):
    done = run_zeromem("check", "--format", "json", "--offline", str(RECIPE))
    [finding] = json.loads(done.stdout)["findings"]
    assert finding["code"] == "ZM108" and finding["severity"] == "information"
    assert fake_hub.requests == [] and done.returncode == 0
    done = run_zeromem("check", "--format", "json", str(RECIPE))  # the fake Hub does not have it
    [finding] = json.loads(done.stdout)["findings"]
    assert finding["code"] == "ZM108" and finding["severity"] == "information" and done.returncode == 0
    assert "401: no repo NousResearch/Llama-3.2-1B" in finding["message"]


def test_estimate_model_config_fetches_a_hub_id(fake_hub, tmp_path):
    fake_hub.files["org/tiny", "main"] = LLAMA_1B_CONFIG
    done = run_zeromem("estimate", "--format", "json", "-R", "8", "--model-config", "org/tiny", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["inputs"]["parameters"] == count_parameters_from_text(LLAMA_1B_CONFIG).total
    refused = run_zeromem("estimate", "-R", "8", "--model-config", "org/other", "--offline", cwd=tmp_path)
    assert refused.returncode == 2 and len(fake_hub.requests) == 1


def test_the_token_is_read_as_huggingface_hub_reads_it(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "token").write_text("saved\n")
    assert hub.token({"HF_HOME": str(tmp_path / "hf")}) == "saved"
    assert hub.token({"HF_HOME": str(tmp_path / "hf"), "HF_TOKEN": "env"}) == "env"
    assert hub.token({"HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}) is None
    assert hub.token({"HF_TOKEN_PATH": str(tmp_path / "missing")}) is None


def test_tests_never_reach_the_default_endpoint():
    import os

    assert os.environ["HF_ENDPOINT"].startswith("http://127.0.0.1") or hub.offline_reason() is not None


def test_the_language_server_fetches_in_the_background_and_analyses_again(fake_hub, tmp_path):
    """No analysis waits for the network: the first says the fetch is under way; when it lands, the server bumps its
    generation and analyses every open document again (which then finds the config in zeromem's cache)."""
    import asyncio

    pytest.importorskip("pygls")
    from zeromem_lsp.lsp.server import ZeromemServer
    from zeromem_lsp.project import file_loader

    fake_hub.files["org/editor", "main"] = LLAMA_1B_CONFIG

    async def scenario() -> None:
        ls = ZeromemServer()
        again = asyncio.Event()
        ls.reanalyse_open_documents = again.set
        generation = ls.generation
        hub_access, landed = ls.hub_fetching()
        assert hub_access == "background"
        loader = file_loader(tmp_path / "recipe.yml", hub_access, landed)
        assert "being fetched" in loader.model_config("org/editor").why
        await asyncio.wait_for(again.wait(), 10)
        assert ls.generation == generation + 1
        assert loader.model_config("org/editor").text == LLAMA_1B_CONFIG

    asyncio.run(scenario())


QWEN2_VL = DATA / "hf_cache" / "models--Qwen--Qwen2-VL-7B-Instruct" / "snapshots"
QWEN2_VL_CONFIG = next(QWEN2_VL.glob("*/config.json")).read_text(encoding="utf-8")
QWEN2_VL_PROCESSOR = (DATA / "models" / "Qwen2-VL-7B-Instruct" / "preprocessor_config.json").read_text(encoding="utf-8")
AXOLOTL_QWEN2_VL = DATA / "vision_language" / "axolotl_qwen2vl_lora_7b.yaml"  # base_model: Qwen/Qwen2-VL-7B-Instruct


def _images(done) -> str:
    data = json.loads(done.stdout)
    return next(line for line in data["assumptions"] if line.startswith("images: "))


def test_a_composites_processor_config_is_fetched_with_its_config_and_kept(fake_hub, tmp_path):
    """axolotl's Qwen2-VL recipe, its model only on the Hub: config.json and preprocessor_config.json are fetched
    (same revision, endpoint), the published max_pixels bounds the images (said, from the Hub), and a second run,
    offline, finds both in zeromem's cache without a request."""
    fake_hub.files["Qwen/Qwen2-VL-7B-Instruct", "main"] = QWEN2_VL_CONFIG
    fake_hub.others["Qwen/Qwen2-VL-7B-Instruct", "main", "preprocessor_config.json"] = QWEN2_VL_PROCESSOR
    done = run_zeromem("estimate", "--format", "json", "-R", "1", "--config", str(AXOLOTL_QWEN2_VL))
    assert done.returncode == 0, done.stderr
    assert sorted(path for path, _ in fake_hub.requests) == [
        "/Qwen/Qwen2-VL-7B-Instruct/resolve/main/config.json",
        "/Qwen/Qwen2-VL-7B-Instruct/resolve/main/preprocessor_config.json"]
    said = _images(done)
    assert "max_pixels 12,845,056 (preprocessor_config.json from the Hub: " in said
    assert "at most 16,384 image tokens per image" in said  # 12,845,056 / 28²
    assert json.loads(done.stdout)["approximate"] is False
    again = run_zeromem("estimate", "--format", "json", "-R", "1", "--offline", "--config", str(AXOLOTL_QWEN2_VL))
    assert _images(again) == said and len(fake_hub.requests) == 2


def test_a_processor_config_the_hub_lacks_leaves_the_class_defaults_approximate_and_is_not_asked_again(fake_hub):
    """The Hub has the model's config.json but no preprocessor_config.json (EntryNotFound): the class defaults bound
    the images, the figure approximate, the missing file named; remembered, so the next run asks for nothing."""
    fake_hub.files["Qwen/Qwen2-VL-7B-Instruct", "main"] = QWEN2_VL_CONFIG
    done = run_zeromem("estimate", "--format", "json", "-R", "1", "--config", str(AXOLOTL_QWEN2_VL))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["approximate"] is True
    [ignored] = [item for item in data["ignored"] if item["key"].startswith("preprocessor_config.json")]
    assert "404: Qwen/Qwen2-VL-7B-Instruct has no preprocessor_config.json at revision 'main'" in ignored["why"]
    assert "the image processor's default max_pixels 1,003,520" in _images(done)
    asked = len(fake_hub.requests)
    again = run_zeromem("estimate", "--format", "json", "-R", "1", "--config", str(AXOLOTL_QWEN2_VL))
    assert json.loads(again.stdout)["approximate"] is True and len(fake_hub.requests) == asked
