"""A hub model's config.json fetched from the Hugging Face Hub when no cache has it: urllib only, one file.

    GET {HF_ENDPOINT or https://huggingface.co}/{repo}/resolve/{revision or main}/config.json

(a composite's preprocessor_config.json the same way: `filename`, configs/processor_config.py)

with `Authorization: Bearer <token>` when huggingface_hub would send one (HF_TOKEN, HUGGING_FACE_HUB_TOKEN, else the
file `huggingface-cli login` writes: HF_TOKEN_PATH, default `$HF_HOME/token`; none under
HF_HUB_DISABLE_IMPLICIT_TOKEN). Redirects are followed (the Authorization header only to the same host), each socket
operation waits at most TIMEOUT seconds, and at most MAX_CONFIG_BYTES are read. What arrives is stored in zeromem's
own cache, never in the Hugging Face cache (whose layout huggingface_hub owns):

    $ZEROMEM_CACHE_DIR (default $XDG_CACHE_HOME/zeromem, else ~/.cache/zeromem) /hub/<repo>/<revision>/config.json
    ... /hub/<repo>/<revision>/.no_exist/<file>   (the Hub said: no such file in that revision; not asked again)

and read from there before any request: a second run makes none. Nothing is requested when HF_HUB_OFFLINE,
TRANSFORMERS_OFFLINE or ZEROMEM_OFFLINE is set to 1/true/yes/on (`offline_reason`), nor by a caller that does not ask
(`zeromem check --offline`, the language server's first look). A failure is a short reason naming the cause (gated,
no such repo or revision, unreachable), remembered for this process so that twenty recipes naming one gated model make
one request. Stdlib only: no huggingface_hub, nothing imported on the analysis path beyond urllib.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Callable, Mapping, NamedTuple
from urllib.parse import quote

CONFIG_NAME = "config.json"
NO_EXIST = ".no_exist"  # beside a revision's files: the ones the Hub said it lacks (huggingface_hub's cache has one)
DEFAULT_ENDPOINT = "https://huggingface.co"
TIMEOUT = 10.0  # seconds per socket operation (huggingface_hub's HF_HUB_ETAG_TIMEOUT default)
MAX_CONFIG_BYTES = 16 * 2**20  # model_source.MAX_LOADED_BYTES: a config.json is kilobytes
OFFLINE_VARIABLES = ("ZEROMEM_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
TRUE = ("1", "ON", "YES", "TRUE")  # huggingface_hub utils._runtime._is_true

_failures: dict[tuple, str] = {}  # (endpoint, repo, revision, token sent) -> why, for this process
_running: dict[tuple, threading.Thread] = {}
_lock = threading.Lock()


class Fetched(NamedTuple):
    """The config.json fetched (or read from zeromem's cache): its path and text, or None and why not."""

    url: str
    path: Path | None = None
    text: str | None = None
    problem: str = ""


def _true(value: str | None) -> bool:
    return value is not None and value.strip().upper() in TRUE


def offline_reason(environ: Mapping[str, str] = os.environ) -> str | None:
    """"HF_HUB_OFFLINE=1" (the variable that forbids the network), else None."""
    for name in OFFLINE_VARIABLES:
        if _true(environ.get(name)):
            return f"{name}={environ[name]}"
    return None


def endpoint(environ: Mapping[str, str] = os.environ) -> str:
    return (environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _hf_home(environ: Mapping[str, str]) -> str:
    default = os.path.join(environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")),
                           "huggingface")
    return os.path.expandvars(os.path.expanduser(environ.get("HF_HOME", default)))


def token(environ: Mapping[str, str] = os.environ) -> str | None:
    """The token huggingface_hub's `get_token` finds (environment, then the saved token file), or None."""
    if _true(environ.get("HF_HUB_DISABLE_IMPLICIT_TOKEN")):
        return None
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        value = (environ.get(name) or "").strip()
        if value:
            return value
    path = environ.get("HF_TOKEN_PATH") or os.path.join(_hf_home(environ), "token")
    try:
        with open(os.path.expandvars(os.path.expanduser(path)), encoding="utf-8") as file:
            return file.read(4096).strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """zeromem's own cache folder (not the Hugging Face cache)."""
    base = environ.get("ZEROMEM_CACHE_DIR") or os.path.join(
        environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "zeromem")
    return Path(os.path.expandvars(os.path.expanduser(base)))


def stored_path(repo: str, revision: str | None, environ: Mapping[str, str] = os.environ,
                filename: str = CONFIG_NAME) -> Path:
    """Where the config.json (or `filename`) of `repo` at `revision` is kept (the revision quoted: "refs/pr/1" is one
    folder)."""
    return cache_dir(environ) / "hub" / repo / quote(revision or "main", safe="") / filename


def url_of(repo: str, revision: str | None, environ: Mapping[str, str] = os.environ,
           filename: str = CONFIG_NAME) -> str:
    """huggingface_hub's hf_hub_url: the revision quoted whole."""
    return f"{endpoint(environ)}/{repo}/resolve/{quote(revision or 'main', safe='')}/{filename}"


def stored(repo: str, revision: str | None, environ: Mapping[str, str] = os.environ,
           filename: str = CONFIG_NAME) -> Fetched | None:
    """The file kept by an earlier fetch, or None; a file the Hub said the revision lacks, with that problem."""
    path = stored_path(repo, revision, environ, filename)
    url = url_of(repo, revision, environ, filename)
    try:
        if path.is_file() and path.stat().st_size <= MAX_CONFIG_BYTES:
            return Fetched(url, path, path.read_text(encoding="utf-8", errors="replace"))
        if (path.parent / NO_EXIST / filename).is_file():
            return Fetched(url, problem=f"{repo} has no {filename} at revision {revision or 'main'!r} (the Hub said "
                                        f"so before: {path.parent / NO_EXIST / filename})")
    except OSError:
        return None
    return None


def _key(repo: str, revision: str | None, environ: Mapping[str, str], filename: str = CONFIG_NAME) -> tuple:
    return endpoint(environ), repo, revision or "main", token(environ) is not None, filename


def failure(repo: str, revision: str | None, environ: Mapping[str, str] = os.environ,
            filename: str = CONFIG_NAME) -> str | None:
    """Why this process's fetch of `repo` at `revision` failed, or None (not tried, or it worked)."""
    with _lock:
        return _failures.get(_key(repo, revision, environ, filename))


def fetch(repo: str, revision: str | None = None, environ: Mapping[str, str] = os.environ,
          timeout: float = TIMEOUT, filename: str = CONFIG_NAME) -> Fetched:
    """The config.json (or `filename`) of `repo` at `revision`: zeromem's cache, else the Hub (stored on success; a
    file the Hub says the revision lacks is remembered as missing, as huggingface_hub's .no_exist). Never raises
    for what the network or the Hub does; the problem says which failure it was and what to do."""
    kept = stored(repo, revision, environ, filename)
    url = url_of(repo, revision, environ, filename)
    if kept is not None:
        return kept
    offline = offline_reason(environ)
    if offline:
        return Fetched(url, problem=f"not asked: {offline}")
    key = _key(repo, revision, environ, filename)
    with _lock:
        known = _failures.get(key)
    if known is not None:
        return Fetched(url, problem=known)
    text, problem = _get(url, repo, revision, token(environ), timeout, filename)
    path = stored_path(repo, revision, environ, filename)
    if text is None:
        with _lock:
            _failures[key] = problem
        if problem.startswith(f"404: {repo} has no {filename}"):  # the revision exists and lacks the file
            try:
                _store(path.parent / NO_EXIST / filename, "")
            except OSError:
                pass
        return Fetched(url, problem=problem)
    try:
        _store(path, text)
    except OSError as error:  # counted all the same, fetched again next time
        return Fetched(url, None, text, f"not stored in {path.parent}: {error.strerror or error}")
    return Fetched(url, path, text)


def fetch_in_background(repo: str, revision: str | None, environ: Mapping[str, str],
                        landed: Callable[[], None], filename: str = CONFIG_NAME) -> bool:
    """Start fetching (once per repo, revision and file at a time) in a daemon thread that calls `landed()` when
    done; False when there is nothing to start (offline, already failed, or already running)."""
    key = _key(repo, revision, environ, filename)
    if offline_reason(environ):
        return False
    with _lock:
        if key in _failures or key in _running:
            return key in _running
        environ = dict(environ)

        def work() -> None:
            try:
                fetch(repo, revision, environ, filename=filename)
            finally:
                with _lock:
                    _running.pop(key, None)
                landed()

        thread = _running[key] = threading.Thread(target=work, name=f"zeromem-hub-{repo}", daemon=True)
    thread.start()
    return True


def _store(path: Path, text: str) -> None:
    """Written whole or not at all (a temporary file renamed), so a reader never sees half a file."""
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".config-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _get(url: str, repo: str, revision: str | None, sent_token: str | None,
         timeout: float, filename: str = CONFIG_NAME) -> tuple[str | None, str]:
    """(text, "") or (None, why): one GET, redirects followed."""
    import socket
    import urllib.error
    import urllib.request

    from zeromem_lsp import __version__

    request = urllib.request.Request(url, headers={"User-Agent": f"zeromem/{__version__}",
                                                   "Accept": "application/json"})
    if sent_token:
        request.add_unredirected_header("Authorization", f"Bearer {sent_token}")
    opener = urllib.request.build_opener(_redirect_handler()())
    try:
        with opener.open(request, timeout=timeout) as response:
            body = response.read(MAX_CONFIG_BYTES + 1)
    except urllib.error.HTTPError as error:
        return None, _http_problem(error.code, error.headers, repo, revision, sent_token is not None, filename)
    except (TimeoutError, socket.timeout):
        return None, f"the Hub did not answer within {timeout:g} s: offline? {OFFLINE_HINT}"
    except urllib.error.URLError as error:
        reason = error.reason
        if isinstance(reason, (TimeoutError, socket.timeout)):
            return None, f"the Hub did not answer within {timeout:g} s: offline? {OFFLINE_HINT}"
        return None, f"the Hub is unreachable ({getattr(reason, 'strerror', None) or reason}): offline? {OFFLINE_HINT}"
    except (OSError, ValueError) as error:  # a connection reset mid-body, a malformed HF_ENDPOINT
        return None, f"the Hub is unreachable ({type(error).__name__}: {error}): offline? {OFFLINE_HINT}"
    if len(body) > MAX_CONFIG_BYTES:
        return None, f"the Hub's answer is larger than {MAX_CONFIG_BYTES // 2**20} MiB: not a {filename}"
    text = body.decode("utf-8", errors="replace")
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return None, "the Hub's answer is not JSON (is HF_ENDPOINT a Hub?)"
    if not isinstance(parsed, dict):
        return None, "the Hub's answer is not a JSON object"
    return text, ""


OFFLINE_HINT = "set ZEROMEM_OFFLINE=1 (or --offline) not to ask"
LOGIN = "set HF_TOKEN or run `huggingface-cli login`"


def _http_problem(code: int, headers, repo: str, revision: str | None, sent: bool, filename: str = CONFIG_NAME) -> str:
    """What an error answer of the Hub means (its X-Error-Code, as huggingface_hub's hf_raise_for_status reads it)."""
    kind = (headers.get("X-Error-Code") if headers is not None else None) or ""
    at = revision or "main"
    if kind == "GatedRepo" or (code == 403 and kind != "RepoNotFound"):
        if sent:
            return (f"{code}: {repo} is gated and the token sent has no access: accept its terms on "
                    f"https://huggingface.co/{repo} with that account")
        return f"{code}: {repo} is gated: accept its terms on https://huggingface.co/{repo}, then {LOGIN}"
    if code == 401:
        if sent:
            return f"401: no repo {repo}, or the token sent cannot read it: check the id, or the token's access"
        return f"401: no repo {repo}, or it is private or gated and no token was sent: check the id, or {LOGIN}"
    if code == 404:
        if kind == "RevisionNotFound":
            return f"404: {repo} has no revision {at!r}: check model_revision"
        if kind == "EntryNotFound":
            return f"404: {repo} has no {filename} at revision {at!r}"
        return f"404: no repo {repo} or no revision {at!r} in it: check the id and the revision"
    return f"HTTP {code} from the Hub{f' ({kind})' if kind else ''}"


def _redirect_handler():
    import urllib.request

    class SameHostAuthorization(urllib.request.HTTPRedirectHandler):
        """Follows redirects; the token goes on only to the host it was meant for (a CDN never sees it)."""

        def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 (urllib's signature)
            from urllib.parse import urlsplit

            new = super().redirect_request(req, fp, code, msg, headers, newurl)
            authorization = req.get_header("Authorization")
            if new is not None and authorization and urlsplit(new.full_url).netloc == urlsplit(req.full_url).netloc:
                new.add_unredirected_header("Authorization", authorization)
            return new

    return SameHostAuthorization

