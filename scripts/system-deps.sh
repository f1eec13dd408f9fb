#!/usr/bin/env bash
# Debian/Ubuntu packages the project needs, installed only when missing.
#   make               `make setup` itself, in the image's build stage (NGC's image has none)
#   libpython<X.Y>     the Python-backend stub of the local Triton links it
#   fonts-dejavu-core  real fonts for rendered test documents (visual zone)
#   fonts-ocr-b        the OCR-B typeface of machine-readable zones (rendered test documents)
# With --test, also what `make test` needs to check deploy/ (not setup, not the image):
#   prometheus         promtool checks and unit-tests deploy/prometheus; the integration
#                      test runs a real Prometheus (installing it does not start it)
#   chromium           the capture page's test in a real headless browser (Playwright
#                      drives it; a fake camera plays a rendered video)
#   redis-server       the shared ledger of spent liveness tokens: the tests start their
#                      own on a free loopback port (tests/kyc_testing.py, redis_server)
# With --image-base, also what `make image-base-cpu` needs:
#   debootstrap        the Debian root file system of the CPU stand-in base
# With KYC_DEBS_DIR set (the image's build stage, which has no network), missing packages
# are installed from the .deb files there, which `make wheelhouse` downloaded on the host
# (--image-debs prints their names); apt is not asked.
# PYTHON_MAJOR.MINOR defaults to that of python3.
set -euo pipefail
py="${1:-$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')}"
# What a Triton base image may lack (NGC has python3 and libpython3, not make or the fonts):
# architecture-independent or needing only libc, so the host's packages install there.
image_debs=(make fonts-dejavu-core fonts-ocr-b)
if [ "${2:-}" = "--image-debs" ]; then
  printf '%s\n' "${image_debs[@]}"
  exit 0
fi
wanted=("${image_debs[@]}" "libpython${py}")
[ "${2:-}" = "--test" ] && wanted+=(prometheus chromium redis-server)
# perf_analyzer (scripts/perf-analyzer.sh) links libb64.
[ "${2:-}" = "--perf-analyzer" ] && wanted+=(libb64-0d)
[ "${2:-}" = "--image-base" ] && wanted+=(debootstrap)
missing=()
for pkg in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if [ -n "${KYC_DEBS_DIR:-}" ]; then
  debs=()
  for pkg in "${missing[@]}"; do
    found=("$KYC_DEBS_DIR/${pkg}_"*.deb)
    [ -f "${found[0]}" ] || { echo "system-deps: $pkg is not installed and no ${pkg}_*.deb is in" \
      "$KYC_DEBS_DIR (make wheelhouse puts it there)" >&2; exit 1; }
    debs+=("${found[0]}")
  done
  echo "system-deps: installing ${missing[*]} from $KYC_DEBS_DIR" >&2
  $sudo dpkg -i "${debs[@]}" >/dev/null
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "system-deps: please install: ${missing[*]}" >&2
  exit 1
fi
echo "system-deps: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
