#!/usr/bin/env bash
# Installs the Debian packages the project links against, when they are missing.
# Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail

need=()
for pkg in libopenblas-dev libjpeg62-turbo-dev etcd-server; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ! command -v go >/dev/null 2>&1; then
  echo "install-deps: Go 1.26 or newer is required (https://go.dev/dl)" >&2
  exit 1
fi
[ ${#need[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "install-deps: need root or sudo to install: ${need[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${need[@]}"
