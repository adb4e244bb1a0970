"""For every test: no request reaches the Hugging Face Hub, and zeromem's cache of fetched configs is a fresh folder.

`zeromem check` / `estimate` fetch a recipe's model from the Hub when no cache has it (configs/hub.py). Tests that
exercise the fetch (tests/unit/test_hub_fetch.py) lift ZEROMEM_OFFLINE and point HF_ENDPOINT at a local server; the
rest run offline, and were the switch lifted by mistake, HF_ENDPOINT names a port nothing listens on, never the
internet. Set here, at import, so that subprocesses the tests start inherit it too.
"""

import os
import tempfile

os.environ["ZEROMEM_OFFLINE"] = "1"
os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"
os.environ["ZEROMEM_CACHE_DIR"] = tempfile.mkdtemp(prefix="zeromem-test-cache-")
for _name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
    os.environ.pop(_name, None)
os.environ["HF_TOKEN_PATH"] = os.path.join(os.environ["ZEROMEM_CACHE_DIR"], "no-token")
