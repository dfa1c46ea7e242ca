#!/usr/bin/env bash
# The order test of bench/NOTES.md (2026-12-03, seventeenth session): is the
# mixed steps' penalty of every FP8 decode variant the variant's, or its
# place in the alternation?
#
#   bench/wip/order-test.sh build DIR   on the build machine (clean tree,
#                                       build/ configured): compiles the FP8
#                                       128 x 64-head step four ways into DIR
#                                       (main, main2 = main again, G = main
#                                       with the scale rounded to bf16, fast =
#                                       the integer decode) beside bin/dhs-run
#   bench/wip/order-test.sh run DIR     on the GPU: bench/attention.sh compare
#                                       at 5 and 14% missing, G main main2 fast
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mode=${1:?usage: order-test.sh build|run DIR}
dir=${2:?usage: order-test.sh build|run DIR}
build=${DHS_BUILD_DIR:-$root/build}
step=fp8_b128_q1_h64

compile() { # VARIANT [PATCH]: the step compiled by main's compiler (with PATCH applied)
  local patch=${2:-} rc=0
  if [ -n "$patch" ]; then git -C "$root" apply "$root/bench/wip/$patch"; fi
  { ninja -C "$build" dhs-compile > /dev/null &&
    "$build/bin/dhs-compile" "$root/bench/steps/mla_fp8_attention.mlir" --requests 128 \
      --positions 1 --heads 64 --hbm-slots 262144 -o "$dir/$1/$step"; } || rc=$?
  # The tree goes back to main's even when the build failed.
  if [ -n "$patch" ]; then git -C "$root" apply -R "$root/bench/wip/$patch"; fi
  return $rc
}

case "$mode" in
  build)
    git -C "$root" diff --quiet -- codegen || { echo "order-test: codegen/ has changes" >&2; exit 1; }
    mkdir -p "$dir/bin" && cp "$build/bin/dhs-run" "$dir/bin/"
    compile main
    cp -r "$dir/main" "$dir/main2"
    compile G fp8-scale-bf16.patch
    compile fast fp8-decode-int.patch
    ninja -C "$build" dhs-compile > /dev/null
    echo "order-test: $dir: $(ls "$dir" | tr '\n' ' ')"
    ;;
  run)
    DHS_COMPARE_STEPS="$step 0.95
$step 0.86" bash "$root/bench/attention.sh" compare "$dir" G main main2 fast
    ;;
  *) echo "usage: order-test.sh build|run DIR" >&2; exit 2 ;;
esac
