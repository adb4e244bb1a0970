"""Any other architecture: its exact parameter count from Transformers itself, on the meta device, in a subprocess.

When a config.json's `model_type` is none zeromem describes (configs/families.py) and torch and Transformers are
importable by this interpreter (found with importlib.util.find_spec: nothing is imported here), a child process
builds the model from the config on the meta device (no memory, no weights)::

    config = transformers.AutoConfig.for_model(model_type, **config_json)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)   # else ImageTextToText, else AutoModel
    sum(p.numel() for p in model.parameters())             # shared (tied) tensors once

Remote code is never run (`trust_remote_code` is not passed: a model_type Transformers does not know is refused with
a reason). The child has a timeout, so torch's import time and any crash stay out of zeromem (and the language
server never starts it: only `zeromem check` / `estimate`). Only the model state follows: the peak of a family
zeromem does not describe is unknown. A count is kept in zeromem's cache by the config's content, so the next run
costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Mapping, NamedTuple

TIMEOUT = 180.0  # seconds: importing torch and Transformers, then building a large MoE on the meta device

SCRIPT = r"""
import json, sys
config = json.loads(sys.stdin.read())
model_type = config.pop("model_type")
import torch, transformers
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
try:
    built = AutoConfig.for_model(model_type, **config)
except (KeyError, ValueError) as error:
    print(json.dumps({"problem": f"Transformers {transformers.__version__} does not know model_type {model_type!r} "
                                 "(a model with its own code: zeromem never runs remote code)"}))
    sys.exit(0)
classes = [AutoModelForCausalLM]
try:
    from transformers import AutoModelForImageTextToText
    classes.append(AutoModelForImageTextToText)
except ImportError:
    pass
classes.append(AutoModel)
problems = []
for cls in classes:
    try:
        with torch.device("meta"):
            model = cls.from_config(built)
    except (KeyError, ValueError) as error:
        problems.append(f"{cls.__name__}: {error}")
        continue
    total = sum(p.numel() for p in model.parameters())
    print(json.dumps({"total": total, "class": type(model).__name__, "version": transformers.__version__}))
    sys.exit(0)
print(json.dumps({"problem": "; ".join(problems)[:500]}))
"""


class MetaCount(NamedTuple):
    """The count and what built it, or (total None) why there is none."""

    total: int | None
    model_class: str = ""
    version: str = ""
    problem: str = ""


def available() -> bool:
    """Whether torch and Transformers can be imported by this interpreter (neither is imported)."""
    from importlib.util import find_spec

    try:
        return find_spec("torch") is not None and find_spec("transformers") is not None
    except (ImportError, ValueError):
        return False


def _kept(config: dict, environ: Mapping[str, str]):
    from zeromem_lsp.configs.hub import cache_dir

    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    return cache_dir(environ) / "meta-counts" / f"{digest}.json"


def count(config: dict, environ: Mapping[str, str] = os.environ, timeout: float = TIMEOUT) -> MetaCount:
    """The parameter count Transformers builds for `config` on the meta device, in a child process; never raises."""
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        return MetaCount(None, problem="config.json has no model_type")
    kept = _kept(config, environ)
    try:
        found = json.loads(kept.read_text(encoding="utf-8"))
        return MetaCount(int(found["total"]), found["class"], found["version"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    import subprocess

    child = {key: value for key, value in environ.items()}
    child.setdefault("TRANSFORMERS_VERBOSITY", "error")
    child["HF_HUB_OFFLINE"] = "1"  # building from a config needs no file
    try:
        done = subprocess.run([sys.executable, "-c", SCRIPT], input=json.dumps(config), capture_output=True,
                              text=True, timeout=timeout, env=child)
    except subprocess.TimeoutExpired:
        return MetaCount(None, problem=f"counting on the meta device took longer than {timeout:g} s")
    except OSError as error:
        return MetaCount(None, problem=f"cannot start {sys.executable}: {error.strerror or error}")
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else {}
    except ValueError:
        answer = {}
    if not isinstance(answer, dict) or "total" not in answer:
        why = answer.get("problem") if isinstance(answer, dict) else None
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return MetaCount(None, problem=why or f"the meta-device count failed (exit {done.returncode}): {last}")
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(json.dumps(answer), encoding="utf-8")
    except OSError:
        pass
    return MetaCount(int(answer["total"]), str(answer["class"]), str(answer["version"]))


def fallback(text: str, error: Exception, may_run: bool, environ: Mapping[str, str] = os.environ):
    """(ParameterCount, "") for a config.json of a family zeromem does not describe, counted by Transformers on the
    meta device when `may_run` (the command line; never the editor) and torch and Transformers are importable; else
    (None, the refusal saying what would count it)."""
    from zeromem_lsp.configs.model_config import ParameterCount, UnknownFamily

    if not isinstance(error, UnknownFamily):
        return None, str(error)
    if not available():
        return None, (f"{error}; with torch and Transformers installed in this Python, `zeromem check` and "
                      "`zeromem estimate` count any other model_type exactly on the meta device")
    if not may_run:
        return None, (f"{error}; `zeromem check` / `zeromem estimate` count it with Transformers on the meta device "
                      "(the editor does not start torch)")
    config = json.loads(text)  # it parsed before the family was refused
    found = count(config, environ)
    if found.total is None or found.total <= 0:
        return None, f"{error}; Transformers did not count it either: {found.problem or 'no parameters'}"
    model_type = config.get("model_type")
    note = (f"{model_type}: counted by Transformers {found.version} ({found.model_class}) on the meta device; "
            "the peak is unknown for this family (model state only)")
    return ParameterCount(found.total, str(model_type), note), ""


def peak_unknown(model_type: str) -> str:
    """Why a family counted by Transformers has no peak."""
    return (f"the peak is unknown for model_type {model_type!r}: zeromem describes no activations for it "
            "(its parameters were counted by Transformers on the meta device: model state only)")
