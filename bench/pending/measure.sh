#!/usr/bin/env bash
# A pending kernel patch's whole GPU verdict in one device call that fits a
# carry of 64 MiB (forty-fourth session):
#
#   bench/pending/measure.sh build PATCH FOLDER...     on the build machine
#       From main's bundle (.device-carry, `tools/gpu-check.sh bundle`, with
#       the variants' attention shapes beside it, `bench/attention.sh variant
#       .device-carry FOLDER PATCH`) makes .device-carry-s: main's binaries,
#       the compare's four shapes of main (attention/) and of each FOLDER, and
#       every step of the checks (steps/, compiled-steps/, group-steps/)
#       compiled with PATCH applied. ~38 MB.
#       DHS_MEASURE_CARRY names another folder than .device-carry-s, so two
#       patches can wait side by side (carry it, and give run the same).
#       DHS_MEASURE_STEPS (default: the four shapes below at residency 1) are
#       the compare's lines, "SHAPE RESIDENCY" (bench/attention.sh's
#       DHS_COMPARE_STEPS); give build and run the same.
#   bench/pending/measure.sh run FOLDER...             on the GPU machine
#       `bench/attention.sh compare` of main and the FOLDERs on
#       DHS_MEASURE_STEPS; where the last FOLDER is at least 1%
#       faster than main on the first line, `tools/gpu-check.sh checks`
#       (seed 11, the tensor-core and verify steps) and the sanitizers on the
#       tensor-core steps, all on PATCH's kernels (DHS_MEASURE_CHECKS and
#       DHS_MEASURE_SANITIZE, globs of step names, narrow them). One log:
#       $OUT/call.txt.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
s=${DHS_MEASURE_CARRY:-.device-carry-s}
steps=${DHS_MEASURE_STEPS:-"fp8_b128_q1_h64 1
bf16_b128_q1_h64 1
fp8_b64_q1_h128 1
fp8_b32_q1_h64 1"}
shapes=$(awk '{print $1}' <<<"$steps" | sort -u)
mode=${1:-}
shift || true

build() { # PATCH FOLDER...
  local patch build=${DHS_BUILD_DIR:-$root/build}
  patch=$(realpath "$1") || exit 1
  shift
  local folders=("$@")
  [ -d .device-carry/bin ] || { echo "measure.sh: no main bundle in .device-carry" >&2; exit 1; }
  [ -z "$(git status --porcelain --untracked-files=no)" ] ||
    { echo "measure.sh: commit or stash the tracked changes first" >&2; exit 1; }
  git apply --check "$patch" || exit 1
  git apply "$patch"
  # shellcheck disable=SC2064
  trap "git apply -R '$patch' && ninja -C '$build' > /dev/null" EXIT
  ninja -C "$build" > /dev/null || exit 1
  rm -rf "$s" && mkdir -p "$s"
  cp -r .device-carry/bin .device-carry/unit-steps "$s/"
  cp -r "$build/test/unit/compiled-steps" "$s/compiled-steps"
  # The bundle's extra group steps (the benchmarks'), then the unit tests'.
  cp -r .device-carry/group-steps "$s/group-steps"
  cp -r "$build/test/unit/group-steps/." "$s/group-steps/"
  DHS_BUILD_DIR=$build bash tools/gpu-check.sh steps "$s" > /dev/null || exit 1
  local folder shape
  for folder in attention "${folders[@]}"; do
    for shape in $shapes; do
      [ -d ".device-carry/$folder/$shape" ] ||
        { echo "measure.sh: .device-carry/$folder/$shape is missing" >&2; exit 1; }
      mkdir -p "$s/$folder" && cp -r ".device-carry/$folder/$shape" "$s/$folder/"
    done
  done
  echo "$(cat .device-carry/COMMIT 2>/dev/null)+$(basename "$patch")" > "$s/COMMIT"
  echo "measure.sh: $s ($(du -sh "$s" | cut -f1)) for $(basename "$patch"): ${folders[*]}"
}

run() { # FOLDER...
  local folders=("$@") log=${OUT:-/tmp}/call.txt
  export DHS_STEP_TIMEOUT=40 DHS_RESULTS=/tmp/measure
  export DHS_COMPARE_STEPS=$steps
  { date; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv; } > "$log"
  bench/attention.sh compare "$s" attention "${folders[@]}" 2>&1 | tee -a "$log"
  local ratio
  local first
  read -r -a first <<<"$steps"
  ratio=$(grep -m1 "^mean *${first[0]} *${first[1]} " "$log" | grep -o "([0-9.]*x)" | tail -1 | tr -d '()x')
  echo "${folders[-1]} / main, ${first[*]}: ${ratio:-none}" | tee -a "$log"
  if [ -n "$ratio" ] && python3 -c "import sys; sys.exit(float('$ratio') > 0.99)"; then
    echo "== checks of the patch's kernels (seed 11)" | tee -a "$log"
    DHS_GPU_SEEDS=11 DHS_GPU_STEPS=${DHS_MEASURE_CHECKS:-'[tv]*'} DHS_RESULTS=/tmp/measure-checks \
      timeout 250 tools/gpu-check.sh checks "$s" 2>&1 | tee -a "$log"
    echo "== sanitizers on the tensor-core steps" | tee -a "$log"
    DHS_GPU_STEPS=${DHS_MEASURE_SANITIZE:-'tc_*'} DHS_RESULTS=/tmp/measure-sanitize \
      timeout 120 tools/gpu-soak.sh sanitize "$s" 2>&1 | tail -n 25 | tee -a "$log"
  fi
  echo "measure.sh: done" >> "$log"
}

case "$mode" in
  build) [ $# -ge 2 ] || { echo "usage: bench/pending/measure.sh build PATCH FOLDER..." >&2; exit 2; }
         build "$@" ;;
  run) [ $# -ge 1 ] || { echo "usage: bench/pending/measure.sh run FOLDER..." >&2; exit 2; }
       run "$@" ;;
  *) echo "usage: bench/pending/measure.sh build PATCH FOLDER... | run FOLDER..." >&2; exit 2 ;;
esac
