#!/usr/bin/env bash
# Sets up dhs on Debian 12 (as root): installs the missing packages, then
# configures and builds into build/ (or $DHS_BUILD_DIR). Safe to run again:
# it installs only what is missing and rebuilds only what changed.
#
# Needs the CUDA 13 toolkit at /usr/local/cuda (cuda.h, nvJitLink, ptxas);
# no GPU is needed to build or to run the tests.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${DHS_BUILD_DIR:-$root/build}
cuda=${CUDA_TOOLKIT_ROOT:-/usr/local/cuda}

# clang-22 and its runtimes (libFuzzer, sanitizers) build the sanitized suite
# and the fuzz targets (tools/sanitize.sh, tools/fuzz.sh).
packages=(cmake ninja-build ccache g++ python3
          llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
          catch2 nlohmann-json3-dev clang-22 libclang-rt-22-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: run as root to install packages (or install them yourself)" >&2
    exit 1
  fi
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

for f in include/cuda.h include/nvJitLink.h bin/ptxas; do
  if [ ! -e "$cuda/$f" ]; then
    echo "setup: $cuda/$f is missing: dhs needs the CUDA 13 toolkit at $cuda" \
         "(set CUDA_TOOLKIT_ROOT to use another place)" >&2
    exit 1
  fi
done

cmake -G Ninja -S "$root" -B "$build" \
  -DCMAKE_BUILD_TYPE=Release \
  -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
  -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
  -DCUDA_TOOLKIT_ROOT="$cuda" >/dev/null
cmake --build "$build"
echo "setup: built into $build"
