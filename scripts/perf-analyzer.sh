#!/usr/bin/env bash
# `make perf-analyzer`: NVIDIA's perf_analyzer of the server's release (2.51.0) as
# VENV/bin/perf_analyzer, for `kyc bench` and the tests.
# The binary ships inside the tritonclient 2.51.0 wheel (the project's own tritonclient is
# newer and has none); it links Debian's libb64 and loads libcudart.so.12 even on a CPU,
# which the nvidia-cuda-runtime-cu12 wheel provides. Both wheels are pinned with their
# sha256 in locks/perf-analyzer.lock, downloaded (never installed) and unpacked into
# VENV/lib/perf_analyzer/; VENV/bin/perf_analyzer is a wrapper that finds the library.
# Usage: perf-analyzer.sh VENV
set -euo pipefail
venv="${1:?usage: perf-analyzer.sh VENV}"
cd "$(dirname "$0")/.."
py=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
bash scripts/system-deps.sh "$py" --perf-analyzer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
  --only-binary=:all: -r locks/perf-analyzer.lock -d "$tmp" 2> >(grep -v "^WARNING: Location" >&2)
lib="$(cd "$venv" && pwd)/lib/perf_analyzer"
mkdir -p "$lib"
"$venv/bin/python" - "$tmp" "$lib" <<'PY'
import sys
import zipfile
from pathlib import Path

wheels, lib = Path(sys.argv[1]), Path(sys.argv[2])
wanted = {"tritonclient-": ("tritonclient-2.51.0.data/data/bin/perf_analyzer", "perf_analyzer"),
          "nvidia_cuda_runtime_cu12-": ("nvidia/cuda_runtime/lib/libcudart.so.12",
                                        "libcudart.so.12")}
for prefix, (member, name) in wanted.items():
    (wheel,) = wheels.glob(prefix + "*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (lib / name).write_bytes(archive.read(member))
    (lib / name).chmod(0o755)
PY
cat > "$venv/bin/perf_analyzer" <<SH
#!/bin/sh
# NVIDIA perf_analyzer 2.51.0, unpacked by scripts/perf-analyzer.sh; libcudart.so.12 beside it.
LD_LIBRARY_PATH="$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$lib/perf_analyzer" "\$@"
SH
chmod +x "$venv/bin/perf_analyzer"
"$venv/bin/perf_analyzer" --version >/dev/null 2>&1 || {
  echo "perf-analyzer: $venv/bin/perf_analyzer does not run:" >&2
  "$venv/bin/perf_analyzer" --version 2>&1 | head -5 >&2
  exit 1
}
echo "perf-analyzer: $venv/bin/perf_analyzer (2.51.0)"
