#!/usr/bin/env bash
# `make wheelhouse`: everything the image's build stage installs, fetched and checked here
# on the host, because the build itself runs with no network (docker build --network none;
# an air-gapped build needs only this directory beside the sources):
#   DIR/wheels/   the wheels of locks/dev-pyX.Y.lock (which holds the runtime lock's),
#                 build.lock and triton.lock for CPython X.Y on manylinux x86_64, with
#                 their sha256 checked by pip (--require-hashes); the build installs
#                 them with --no-index, and --require-hashes again
#   DIR/weights/  the pinned model archives, sha256 from tools/kyc_tools/assets/manifest.json
#                 (kyc models fetch --download-only); the build converts them
#   DIR/debs/     the Debian packages `make setup` needs that a Triton base lacks
#                 (system-deps.sh --image-debs), by apt-get download, which checks each
#                 against the host's signed package indexes
# Usage: wheelhouse.sh PYTHON_X.Y DIR. Idempotent: what is there and checks out is kept.
set -euo pipefail
py="${1:?usage: wheelhouse.sh PYTHON_X.Y DIR}"
dir="${2:?usage: wheelhouse.sh PYTHON_X.Y DIR}"
cd "$(dirname "$0")/.."
bin=.venv/bin
[ -x "$bin/kyc" ] || { echo "wheelhouse: run make setup first" >&2; exit 1; }
mkdir -p "$dir/wheels" "$dir/weights" "$dir/debs"
started=$(date +%s)

# pip takes --platform literally: name every manylinux level up to the base's glibc
# (2.35 on NGC 24.10's Ubuntu 22.04, 2.36 on Debian 12), as the lock's resolution did.
platforms=()
for tag in manylinux_2_35 manylinux_2_34 manylinux_2_28 manylinux_2_27 manylinux_2_24 \
           manylinux_2_17 manylinux2014 manylinux2010 manylinux1; do
  platforms+=(--platform "${tag}_x86_64")
done
"$bin/python" -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
  --only-binary=:all: --implementation cp --python-version "$py" --abi "cp${py/./}" \
  "${platforms[@]}" --platform any \
  -r "locks/dev-py$py.lock" -r locks/build.lock -r locks/triton.lock -d "$dir/wheels" \
  2> >(grep -v "^WARNING: Location" >&2)

"$bin/kyc" models fetch --download-only --cache-dir "$dir/weights" >/dev/null

mapfile -t debs < <(bash scripts/system-deps.sh "$py" --image-debs)
need=()
for pkg in "${debs[@]}"; do
  compgen -G "$dir/debs/${pkg}_*.deb" >/dev/null || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  apt-cache show "${need[@]}" >/dev/null 2>&1 || $sudo apt-get update -qq
  # apt's sandbox user may not write here: download to a temporary folder, then move.
  tmp=$(mktemp -d)
  chmod 777 "$tmp"
  (cd "$tmp" && apt-get download -qq "${need[@]}")
  mv "$tmp"/*.deb "$dir/debs/"
  rmdir "$tmp"
fi
echo "wheelhouse: $dir for Python $py: $(find "$dir/wheels" -name '*.whl' | wc -l) wheels," \
  "$(find "$dir/weights" -type f | wc -l) weight archives, $(find "$dir/debs" -name '*.deb' | wc -l)" \
  "debs, $(du -sh "$dir" | cut -f1) ($(( $(date +%s) - started )) s)"
