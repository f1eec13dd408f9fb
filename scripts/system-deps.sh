#!/usr/bin/env bash
# Debian/Ubuntu packages the project needs, installed only when missing.
#   libpython<X.Y>     the Python-backend stub of the local Triton links it
#   fonts-dejavu-core  real fonts for rendered test documents (visual zone)
#   fonts-ocr-b        the OCR-B typeface of machine-readable zones (rendered test documents)
# With --test, also what `make test` needs to check deploy/ (not setup, not the image):
#   prometheus         promtool checks and unit-tests deploy/prometheus; the integration
#                      test runs a real Prometheus (installing it does not start it)
set -euo pipefail
py="${1:?usage: system-deps.sh PYTHON_MAJOR.MINOR [--test]}"
wanted=("libpython${py}" fonts-dejavu-core fonts-ocr-b)
[ "${2:-}" = "--test" ] && wanted+=(prometheus)
missing=()
for pkg in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "system-deps: please install: ${missing[*]}" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "system-deps: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
