#!/usr/bin/env bash
# The DeepSpeed oracle (issue 21 item 17): tests/oracle run against DeepSpeed itself, in its own
# virtual environment (.venv-oracle) so the main suite stays free of torch. torch 2.13.0 (CPU: pip
# takes the +cpu wheel from the machine's local wheel directory when it has one; PyPI's Linux wheel
# pulls CUDA libraries instead) and deepspeed 0.19.8 (built against that torch, no build isolation),
# then this project. Without DeepSpeed these ~460 tests skip; here they run: ~505 tests, ~15 s, plus
# ~100 s for a fresh venv (docs/deepspeed-validation.md).
# Run from anywhere; .ci/run calls it after the main suite. ORACLE_VENV overrides the venv's path.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${ORACLE_VENV:-.venv-oracle}
start=$SECONDS
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q torch==2.13.0
"$venv/bin/pip" install -q --no-build-isolation deepspeed==0.19.8
"$venv/bin/pip" install -q -e '.[test]'
# fails here (set -e) rather than letting every oracle test skip when DeepSpeed does not import
versions=$(DS_ACCELERATOR=cpu "$venv/bin/python" -c 'import torch, deepspeed; print(f"torch {torch.__version__}, deepspeed {deepspeed.__version__}")')
echo "oracle: $versions ready in $((SECONDS - start)) s"
start=$SECONDS
DS_ACCELERATOR=cpu "$venv/bin/python" -m pytest -q tests/oracle
echo "oracle: tests/oracle against DeepSpeed took $((SECONDS - start)) s"
