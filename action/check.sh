#!/usr/bin/env bash
# The action's check step: `zeromem check` over $ZEROMEM_PATHS as GitHub annotations or a SARIF log.
# Inputs come as environment variables (action.yml maps them): ZEROMEM_PATHS, ZEROMEM_FAIL_ON,
# ZEROMEM_FORMAT (annotations | sarif), ZEROMEM_SARIF_FILE, ZEROMEM_ARGS. Exit status: zeromem's
# (1 when a finding reaches fail-on, 2 for bad input); the SARIF file is written either way.
set -uo pipefail
set -f  # globs in the paths are zeromem's to expand (it knows ** and skips non-configs)

fail() {
  echo "::error title=zeromem action::$*"
  exit 2
}

fail_on=${ZEROMEM_FAIL_ON:-error}
format=${ZEROMEM_FORMAT:-annotations}
case "$fail_on" in error|warning|information) ;; *) fail "fail-on must be error, warning or information, not '$fail_on'" ;; esac
read -r -d '' -a paths <<< "${ZEROMEM_PATHS:-.}" || true
[ ${#paths[@]} -gt 0 ] || paths=(.)
read -r -d '' -a extra <<< "${ZEROMEM_ARGS:-}" || true
command -v zeromem >/dev/null 2>&1 || fail "zeromem is not on PATH (the install step failed?)"

case "$format" in
  annotations)
    zeromem check --format github --fail-on "$fail_on" "${extra[@]}" -- "${paths[@]}"
    ;;
  sarif)
    sarif=${ZEROMEM_SARIF_FILE:-zeromem.sarif}
    zeromem check --format sarif --fail-on "$fail_on" "${extra[@]}" -- "${paths[@]}" > "$sarif"
    status=$?
    if [ -s "$sarif" ] && [ -n "${GITHUB_OUTPUT:-}" ]; then
      echo "sarif-file=$sarif" >> "$GITHUB_OUTPUT"
    fi
    exit $status
    ;;
  *)
    fail "format must be annotations or sarif, not '$format'"
    ;;
esac
