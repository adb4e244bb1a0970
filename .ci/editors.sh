#!/usr/bin/env bash
# Editor integrations in CI (issue #7):
#   1. Neovim for tests/editors/test_neovim.py (a real LSP client): Debian's neovim via apt-get when
#      nvim is missing and apt-get is usable; otherwise that test skips itself.
#   2. The VS Code extension: npm ci, compile (copies schemas/ in), and its unit test (node --test).
#      Skipped with a message when npm is missing.
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

if command -v npm >/dev/null 2>&1; then
  echo "editors: VS Code extension (node $(node --version), npm $(npm --version))"
  (
    cd editors/vscode
    npm ci --no-audit --no-fund --prefer-offline --loglevel=error
    npm run --silent compile
    npm test
  )
else
  echo "editors: warning: npm not found; skipping the VS Code extension build and unit test" >&2
fi
