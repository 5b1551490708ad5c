#!/usr/bin/env bash
# The system packages some tests need (scripts/test-all.sh runs this): a one-node SLURM with munge
# (tests/test_slurm_cluster.py, started by scripts/slurm-up.sh), openssl (the self-signed certificate of
# the Kubeflow status endpoint, tests/test_kubeflow.py) and shellcheck (the GPU smoke scripts,
# tests/test_smoke_checker.py). Installed with apt-get as root, or with passwordless sudo. Without
# either, nothing is installed: this says what is missing and the command that installs it, exits 0,
# and those tests skip with the same command as their reason (conftest.py, needs_system).
# Binaries are looked up on PATH, as the tests look them up.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(slurmctld slurmd slurm-client munge openssl shellcheck)
BINARIES=(slurmctld slurmd munged mungekey sbatch squeue scontrol scancel openssl shellcheck)
INSTALL="sudo bash scripts/system-packages.sh"  # what the message and the tests' skip reasons name

missing=()
for binary in "${BINARIES[@]}"; do
  command -v "$binary" >/dev/null 2>&1 || missing+=("$binary")
done
[ ${#missing[@]} -eq 0 ] && exit 0

apt=(apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}")
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "system-packages.sh: not root and no passwordless sudo: not installing ${PACKAGES[*]}" \
       "(missing: ${missing[*]})." >&2
  echo "system-packages.sh: the SLURM, Kubeflow (openssl) and shellcheck tests will skip; install them with:" >&2
  echo "  $INSTALL" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "system-packages.sh: no apt-get here; install these with your package manager: ${PACKAGES[*]}" \
       "(missing: ${missing[*]}). Their tests skip meanwhile." >&2
  exit 0
fi
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive "${apt[@]}" >/dev/null
