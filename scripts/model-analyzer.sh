#!/usr/bin/env bash
# `make model-analyzer`: NVIDIA's Model Analyzer (triton-model-analyzer 1.58.0) for
# `kyc tune`, in a venv of its own at VENV/lib/model-analyzer, from
# locks/model-analyzer-py3.X.lock (sha256-pinned). Its own venv because it wants numpy 2
# and a newer tritonclient, and the Python stubs take the project venv's packages
# (numpy 2 there makes every Python model answer with empty outputs).
# VENV/bin/model-analyzer is a wrapper; Model Analyzer drives VENV/bin/perf_analyzer.
# Usage: model-analyzer.sh VENV
set -euo pipefail
venv="${1:?usage: model-analyzer.sh VENV}"
cd "$(dirname "$0")/.."
py=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
base=$("$venv/bin/python" -c 'import sys; print(sys.base_prefix)')/bin/python$py
ma="$(cd "$venv" && pwd)/lib/model-analyzer"
[ -x "$ma/bin/python" ] || "$base" -m venv "$ma"
"$ma/bin/python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes \
  --only-binary=:all: -r "locks/model-analyzer-py$py.lock" 2> >(grep -v "^WARNING: Location" >&2)
cat > "$venv/bin/model-analyzer" <<SH
#!/bin/sh
# NVIDIA Model Analyzer 1.58.0 in its own venv (scripts/model-analyzer.sh).
exec "$ma/bin/model-analyzer" "\$@"
SH
chmod +x "$venv/bin/model-analyzer"
"$venv/bin/model-analyzer" --version >/dev/null 2>&1 || {
  echo "model-analyzer: $venv/bin/model-analyzer does not run:" >&2
  "$venv/bin/model-analyzer" --version 2>&1 | tail -5 >&2
  exit 1
}
echo "model-analyzer: $venv/bin/model-analyzer ($("$venv/bin/model-analyzer" --version 2>&1 | tail -1))"
