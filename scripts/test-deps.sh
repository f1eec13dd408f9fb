#!/usr/bin/env bash
# What `make test` needs besides the venv, to check deploy/ (not part of setup or the image):
#   prometheus   Debian's package: promtool checks and unit-tests deploy/prometheus, and the
#                integration test runs a real Prometheus against the local server
#   kubectl      renders deploy/ with kustomize (`kubectl kustomize`); not a Debian package:
#                the machine image of CI and the developers carries it (kubectl 1.32)
set -euo pipefail
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
  if ! command -v apt-get >/dev/null; then
    echo "test-deps: please install Prometheus (prometheus and promtool on PATH)" >&2
    exit 1
  fi
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "test-deps: installing prometheus (Debian)" >&2
  $sudo apt-get update -qq
  # Installing does not start it (no init system here; and the tests run their own).
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    prometheus >/dev/null
fi
if ! command -v kubectl >/dev/null; then
  echo "test-deps: kubectl is needed (kubectl kustomize renders deploy/): install kubectl >= 1.27" >&2
  exit 1
fi
