#!/usr/bin/env bash
# The action's install step: zeromem-lsp from the action's own checkout ($GITHUB_ACTION_PATH, i.e. the
# ref in `uses: zeromem-lsp/zeromem-lsp@<ref>`) into a virtual environment, put on $GITHUB_PATH.
set -euo pipefail
source_dir=${GITHUB_ACTION_PATH:?}
venv=${RUNNER_TEMP:-${TMPDIR:-/tmp}}/zeromem-action-venv
python=$(command -v python3 || command -v python)
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$source_dir"
echo "$venv/bin" >> "${GITHUB_PATH:?}"
echo "zeromem: $("$venv/bin/zeromem" --version 2>/dev/null || echo installed) in $venv"
