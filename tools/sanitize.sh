#!/usr/bin/env bash
# The sanitized suite: builds what the tests need, and the fuzz targets, with
# AddressSanitizer (LeakSanitizer included) and UndefinedBehaviorSanitizer
# (clang-22, every report fatal) into build-asan/ (or $DHS_ASAN_BUILD_DIR),
# then runs the whole ctest there.
#
#   tools/sanitize.sh            configure, build, test
#   tools/sanitize.sh --build    configure and build only (tools/fuzz.sh uses it)
#
# Needs clang-22 and libclang-rt-22-dev (tools/setup.sh installs them). The
# build shares ccache with build/ (different flags: separate cache entries).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${DHS_ASAN_BUILD_DIR:-$root/build-asan}
cuda=${CUDA_TOOLKIT_ROOT:-/usr/local/cuda}

for tool in clang-22 clang++-22; do
  command -v "$tool" >/dev/null ||
    { echo "sanitize: $tool is missing (tools/setup.sh installs clang-22)" >&2; exit 1; }
done

cmake -G Ninja -S "$root" -B "$build" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
  -DDHS_SANITIZE=address,undefined -DDHS_FUZZ=ON \
  -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
  -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
  -DCUDA_TOOLKIT_ROOT="$cuda" >/dev/null
start=$(date +%s)
cmake --build "$build" --target dhs-test-deps dhs-fuzz-targets
echo "sanitize: built in $(( $(date +%s) - start )) s into $build"
[ "${1:-}" = --build ] && exit 0

# shellcheck source=tools/sanitizer-env.sh
source "$root/tools/sanitizer-env.sh"
start=$(date +%s)
# The 100000-operation soak takes 7 minutes under the sanitizers; 20000 of
# the same random operations cover the same paths.
export DHS_SOAK_OPERATIONS=${DHS_SOAK_OPERATIONS:-20000}
ctest --test-dir "$build" -j"${DHS_TEST_JOBS:-2}" --output-on-failure
echo "sanitize: the whole ctest passed under ASan+LSan+UBSan in $(( $(date +%s) - start )) s"
