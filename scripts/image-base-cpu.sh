#!/usr/bin/env bash
# `make image-base-cpu`: kyc-triton-base:cpu, the CPU stand-in for NGC's Triton image, from
# packages only (docker/base-cpu/Dockerfile says what it holds; docs/image.md how it differs).
#   1. a Debian 12 root file system by debootstrap from the mirror apt already uses, with
#      what NGC's image has and the Dockerfile relies on: python3 with pip and virtualenv
#      (and no ensurepip, as there), libpython for the Python-backend stub, CA certificates;
#      imported as kyc-debian:bookworm-<hash of that list> (kept: about 40 s to make)
#   2. the nvidia-pytriton wheel from locks/triton.lock (pip checks its sha256) and the
#      project's Python-based onnxruntime backend, built into NAME with --network none
# The image carries a label with the sha256 of its inputs: when they have not changed,
# nothing is rebuilt. Usage: image-base-cpu.sh NAME PYTHON_X.Y (Debian 12's Python, 3.11).
set -euo pipefail
name="${1:?usage: image-base-cpu.sh NAME PYTHON_X.Y}"
py="${2:?usage: image-base-cpu.sh NAME PYTHON_X.Y}"
cd "$(dirname "$0")/.."
suite=bookworm
packages=python3,python3-pip,python3-virtualenv,"libpython$py",ca-certificates
work=build/base-cpu
label=org.kyc.inputs

inputs=$( { echo "$suite $packages $py"; cat docker/base-cpu/Dockerfile locks/triton.lock \
  backends/kyc/onnx_runtime/local_backends/onnxruntime/model.py "$0"; } | sha256sum | cut -c1-16)
have=$(docker image inspect --format "{{ index .Config.Labels \"$label\" }}" "$name" 2>/dev/null || true)
if [ "$have" = "$inputs" ]; then
  echo "image-base-cpu: $name is up to date ($inputs)" >&2
  exit 0
fi
started=$(date +%s)

rootfs_image="kyc-debian:$suite-$(echo "$suite $packages" | sha256sum | cut -c1-12)"
if ! docker image inspect "$rootfs_image" >/dev/null 2>&1; then
  bash scripts/system-deps.sh "" --image-base  # "": the host Python's own packages
  # The mirror this machine's apt uses (deb822 or one-line sources), else Debian's own.
  mirror=$(grep -h -m1 -oE '^URIs: *\S+' /etc/apt/sources.list.d/*.sources 2>/dev/null \
             | head -n1 | awk '{print $2}' || true)
  [ -n "$mirror" ] || mirror=$(grep -h -m1 -oE '^deb +\S+' /etc/apt/sources.list 2>/dev/null \
                                 | awk '{print $2}' || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  rm -rf "$work/rootfs"
  mkdir -p "$work"
  echo "image-base-cpu: debootstrap $suite from $mirror ($packages)" >&2
  debootstrap --variant=minbase --include="$packages" "$suite" "$work/rootfs" "$mirror" \
    > "$work/debootstrap.log" 2>&1 || { tail -n 20 "$work/debootstrap.log" >&2; exit 1; }
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
  tar -C "$work/rootfs" -c . | docker import - "$rootfs_image" >/dev/null
  rm -rf "$work/rootfs"
fi

context="$work/context"
rm -rf "$context"
mkdir -p "$context/onnxruntime"
.venv/bin/python -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
  -r locks/triton.lock -d "$context" 2> >(grep -v '^WARNING: Location' >&2)
cp backends/kyc/onnx_runtime/local_backends/onnxruntime/model.py "$context/onnxruntime/"
DOCKER_BUILDKIT=0 docker build -q --network none -f docker/base-cpu/Dockerfile \
  --build-arg ROOTFS_IMAGE="$rootfs_image" --build-arg PYTHON_VERSION="$py" \
  --label "$label=$inputs" -t "$name" "$context" >/dev/null
rm -rf "$context"
echo "image-base-cpu: built $name from $rootfs_image in $(( $(date +%s) - started )) s" >&2
