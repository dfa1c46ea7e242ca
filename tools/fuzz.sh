#!/usr/bin/env bash
# Runs dhs's libFuzzer targets (fuzz/), built with ASan + UBSan in
# build-asan/ (tools/sanitize.sh --build builds them when missing).
#
#   tools/fuzz.sh TARGET SECONDS [libFuzzer flags...]
#       TARGET: mlir | manifest | capi. Fuzzes for SECONDS, growing the
#       corpus in build-asan/fuzz/corpus/TARGET/, writing a crash to
#       build-asan/fuzz/crashes/TARGET/, and prints executions, corpus size
#       and crashes at the end (exit status 1 after a crash).
#   tools/fuzz.sh smoke [SECONDS]
#       CI's smoke run: every target for SECONDS (default 10) from its seeds;
#       fails on any crash.
# Every run first runs each regression input in fuzz/corpus/TARGET/ once.
#
# Seeds (regenerated each run into build-asan/fuzz/seeds/TARGET/): for mlir
# the .mlir files of examples/, test/ and bench/ split at `// -----`; for
# manifest the manifests of examples/ compiled by dhs-compile and of the unit
# tests' steps, each also with its first PTX file after a `--ptx--` line;
# for capi random bytes. Plus fuzz/corpus/TARGET/: the regression inputs
# (every crash found, kept once fixed), replayed first.
# One fuzzer process runs at a time (libFuzzer's default: one job).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${DHS_ASAN_BUILD_DIR:-$root/build-asan}
# shellcheck source=tools/sanitizer-env.sh
source "$root/tools/sanitizer-env.sh"

usage() {
  echo "usage: tools/fuzz.sh mlir|manifest|capi SECONDS [libFuzzer flags...] | smoke [SECONDS]" >&2
  exit 2
}

ensure_built() {
  if [ ! -x "$build/bin/dhs-fuzz-capi" ] || [ ! -x "$build/bin/dhs-fuzz-manifest" ] ||
     [ ! -x "$build/bin/dhs-fuzz-mlir" ]; then
    bash "$root/tools/sanitize.sh" --build || exit 1
  fi
}

# seeds TARGET DIR: writes the target's generated seeds into DIR.
seeds() {
  local target=$1 dir=$2
  mkdir -p "$dir"
  case "$target" in
    mlir)
      local f
      for f in "$root"/examples/*.mlir "$root"/test/*/*.mlir "$root"/bench/*.mlir \
               "$root"/test/unit/steps/*.mlir; do
        [ -f "$f" ] || continue
        # One seed per `// -----` split.
        awk -v out="$dir/$(basename "$f" .mlir)" '
          /^\/\/ -----/ { part++; next } { print > (out "." part ".mlir") }' part=0 "$f"
      done
      ;;
    manifest)
      local steps; steps=$(mktemp -d)
      local f name ptx
      for f in "$root"/examples/*.mlir; do
        name=$(basename "$f" .mlir)
        "$build/bin/dhs-compile" "$f" -o "$steps/$name" >/dev/null 2>&1 || true
      done
      for f in "$steps"/*/manifest.json "$build"/test/unit/compiled-steps/*/manifest.json \
               "$build"/test/unit/group-steps/*/layer0/manifest.json \
               "$root"/test/unit/steps/*/manifest.json; do
        [ -f "$f" ] || continue
        name=$(basename "$(dirname "$f")")
        cp "$f" "$dir/$name.json"
        ptx=$(ls "$(dirname "$f")"/*.ptx 2>/dev/null | head -n 1)
        # The manifest, then its first PTX file (the harness names it step.ptx).
        [ -n "$ptx" ] && { cat "$f"; printf '\n--ptx--\n'; cat "$ptx"; } > "$dir/$name.with-ptx"
      done
      rm -rf "$steps"
      ;;
    capi)
      # The harness decodes bytes, not text: random byte strings.
      local i
      for i in 1 2 3 4 5 6 7 8; do
        head -c $((64 * i)) /dev/urandom > "$dir/random-$i"
      done
      ;;
  esac
}

# artifacts DIR: the failures libFuzzer wrote into DIR (crashes, leaks,
# timeouts, out-of-memory; not the slow units it notes).
artifacts() {
  ls "$1" | grep -E '^(crash|leak|timeout|oom)-' || true
}

# run TARGET SECONDS [flags...]: one fuzzing session; prints its summary.
run() {
  local target=$1 seconds=$2
  shift 2
  local bin="$build/bin/dhs-fuzz-$target"
  local work="$build/fuzz"
  local corpus="$work/corpus/$target" crashes="$work/crashes/$target" seedDir="$work/seeds/$target"
  mkdir -p "$corpus" "$crashes"
  rm -rf "$seedDir"
  seeds "$target" "$seedDir"
  local regressions="$root/fuzz/corpus/$target"
  mkdir -p "$regressions"
  local maxLen=16384
  [ "$target" = mlir ] && maxLen=65536
  [ "$target" = manifest ] && maxLen=262144
  local log="$work/$target.log"
  # capi: nearly every refused call throws, and after each throw ASan's fake
  # stack (its stack-use-after-return detection) is garbage-collected, half
  # the time of a long input; the sanitized ctest keeps that detection on.
  local env=()
  [ "$target" = capi ] &&
    env=(env "ASAN_OPTIONS=detect_stack_use_after_return=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}")
  # The regression inputs first, each run once: a short run may end before
  # libFuzzer has read its whole corpus.
  local kept=("$regressions"/*)
  if [ -e "${kept[0]}" ]; then
    if ! "${env[@]}" "$bin" -timeout=60 -rss_limit_mb=4096 "${kept[@]}" \
         > "$work/$target.regressions.log" 2>&1; then
      echo "fuzz: $target: a regression input in $regressions fails again" \
           "(log $work/$target.regressions.log)"
      grep -m 20 -E "ERROR|SUMMARY|Running:|runtime error" "$work/$target.regressions.log" |
        sed 's/^/  /'
      return 1
    fi
    echo "fuzz: $target: ${#kept[@]} regression inputs pass"
  fi
  local before; before=$(artifacts "$crashes" | wc -l)
  echo "fuzz: $target for ${seconds} s (corpus $corpus, seeds $seedDir and $regressions)"
  local start; start=$(date +%s)
  "${env[@]}" "$bin" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -max_len="$maxLen" \
    -artifact_prefix="$crashes/" -print_final_stats=1 "$@" \
    "$corpus" "$seedDir" "$regressions" > "$log" 2>&1
  local rc=$?
  local after; after=$(artifacts "$crashes" | wc -l)
  local execs; execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  local files; files=$(ls "$corpus" | wc -l)
  local bytes; bytes=$(du -sb "$corpus" | cut -f1)
  local cov; cov=$(grep -oE '^#[0-9]+.*cov: [0-9]+ ft: [0-9]+' "$log" | tail -n 1 | grep -oE 'cov: [0-9]+ ft: [0-9]+')
  local took=$(( $(date +%s) - start ))
  echo "fuzz: $target: ${execs:-?} executions in $took s, corpus $files inputs ($bytes bytes)," \
       "${cov:-cov: ?} (edges, features), crashes $((after - before)) (exit $rc; log $log)"
  if [ $rc -ne 0 ]; then
    grep -m 20 -E "ERROR|SUMMARY|Test unit written|dhs-fuzz|runtime error" "$log" | sed 's/^/  /'
    return 1
  fi
  return 0
}

main() {
  [ $# -ge 1 ] || usage
  ensure_built
  case "$1" in
    smoke)
      seconds=${2:-10}
      failed=0
      for target in capi manifest mlir; do
        run "$target" "$seconds" || failed=1
      done
      [ $failed -eq 0 ] && echo "fuzz: smoke run clean" || echo "fuzz: smoke run FAILED"
      exit $failed
      ;;
    mlir | manifest | capi)
      [ $# -ge 2 ] || usage
      target=$1 seconds=$2
      shift 2
      run "$target" "$seconds" "$@"
      ;;
    *) usage ;;
  esac
}

# (One line: bash has read the whole script before a long run starts.)
main "$@"; exit $?
