#!/usr/bin/env bash
# Installs the Debian packages the project links against, when they are missing, and the
# optional ones (data sets) whose absence only skips a test or a demo: failing to install
# those prints a warning and does not fail.
# Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail

# The launchers the cluster tests start (parallel/launch/clustertest: mpirun, and a one-node
# SLURM cluster with munge), and iproute2's ip and tc for the multi-host test bed
# (internal/netbed), with nftables to drop packets on its links (the lossy-link and
# unreachable-host tests) and iptables to delay them (NFQUEUE) where the kernel has no netem
# (the delayed-link tests, bench/netbed). Optional: when they cannot be installed the tests
# skip and say why, so a failure here does not fail `make deps`.
cluster=()
for pkg in openmpi-bin slurm-wlm munge iproute2 nftables iptables; do
  dpkg -s "$pkg" >/dev/null 2>&1 || cluster+=("$pkg")
done
if [ ${#cluster[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
    echo "install-deps: not installing ${cluster[*]} (need root or sudo); the cluster tests will skip" >&2
  else
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "install-deps: installing ${cluster[*]} (for the cluster tests)"
    if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${cluster[@]}"; }; then
      echo "install-deps: could not install ${cluster[*]}; the cluster tests will skip" >&2
    fi
  fi
fi

need=()
for pkg in libopenblas-dev libjpeg62-turbo-dev etcd-server; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
# dataset-fashion-mnist: Fashion-MNIST's IDX files in /usr/share/datasets/fashion-mnist
# (data.FashionMNIST, make demo).
optional=()
for pkg in dataset-fashion-mnist; do
  dpkg -s "$pkg" >/dev/null 2>&1 || optional+=("$pkg")
done
if ! command -v go >/dev/null 2>&1; then
  echo "install-deps: Go 1.26 or newer is required (https://go.dev/dl)" >&2
  exit 1
fi
[ ${#need[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ] && exit 0

warn_optional() {
  echo "install-deps: could not install ${optional[*]} ($1); the tests that read it skip and make demo cannot run" >&2
}

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    if [ ${#need[@]} -eq 0 ]; then
      warn_optional "need root or sudo"
      exit 0
    fi
    echo "install-deps: need root or sudo to install: ${need[*]} ${optional[*]}" >&2
    exit 1
  fi
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}"
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${need[@]}"
elif ! $sudo apt-get update -qq; then
  warn_optional "apt-get update failed"
  exit 0
fi
if [ ${#optional[@]} -gt 0 ]; then
  echo "install-deps: installing ${optional[*]}"
  $sudo apt-get install -y -qq "${optional[@]}" || warn_optional "apt-get install failed"
fi
exit 0
