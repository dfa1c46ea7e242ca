#!/usr/bin/env bash
# The GPU's long checks (issue 12), run on the GPU machine from a bundle made
# by `tools/gpu-check.sh bundle` (default .device-carry/):
#
#   tools/gpu-soak.sh soak [--seconds N] [DIR]
#       The timed soak (test/unit/SoakTest.cpp) on CUDA for N seconds
#       (default 240: with the start and the checks, one 600-second device
#       call holds it): random arrivals, appends, steps and departures at high
#       HBM occupancy with the invariant checker on, every output checked
#       against the CPU oracle; per-layer pools, layer-group pools with the
#       placement step and device selections, a layer group's forms (fused
#       and staged by the step's misses), and verify steps among plain ones
#       (a quarter of the time each).
#   tools/gpu-soak.sh sanitize [DIR]
#       compute-sanitizer memcheck and racecheck on every generated kernel at
#       a small size: each bundled attention step through dhs-run (attention,
#       fetch, union_missing, attention_combine kernels; dhs-run's default
#       histories, residency 0.5), and the unit tests' kernel cases
#       (ring_index, copy_rows, resolve, accept, topk, place_rows,
#       plan_promotions, the draft rings through the runtime; not the
#       10^6-block chi-square, too long under racecheck); memcheck also on the
#       executor's cases on every backend (layer groups, verify, placement,
#       windows, step logs, graphs).
#   tools/gpu-soak.sh all [--seconds N] [DIR]      both.
#
# Under racecheck the unit tests load a rewritten copy of their steps too
# (tools/racecheck-ptx.sh), and their kernels' block takes about 7 minutes on
# an H100 (the age_rows, plan_promotions and draft-ring cases under load take
# a minute each): within one 600-second device call, run it alone, or in two
# parts through DHS_SANITIZE_CASES.
# DHS_GPU_STEPS (a glob, as for tools/gpu-check.sh) limits sanitize to some
# of the bundled steps and skips the unit tests' blocks (minutes); one that
# names no step stops before the GPU is used. DHS_SANITIZE_TOOLS (default
# "memcheck racecheck") picks the tools; the executor's cases run under
# memcheck only. DHS_SANITIZE_CASES (a Catch test spec, e.g. a case's name)
# runs those unit-test cases under each tool instead of the two blocks,
# DHS_GPU_STEPS or not. A failed unit-test block prints its log's last lines
# (a crash's call stack among them).
# Logs go to DIR/results (or $DHS_RESULTS), packed into one archive,
# $OUT/gpu-soak.tar.gz, where $OUT is set; the last lines say PASS or FAIL.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=${1:-all}
shift || true
seconds=240
dir=$root/.device-carry
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    *) dir=$1; shift ;;
  esac
done
results=${DHS_RESULTS:-$dir/results}
mkdir -p "$results"
env_steps=(DHS_TEST_STEPS_DIR="$dir/unit-steps" DHS_COMPILED_STEPS_DIR="$dir/compiled-steps"
           DHS_TEST_GROUP_STEPS_DIR="$dir/group-steps")
# sanitize's steps and tools, checked before `all` spends the soak's time: a
# glob that names no step would run its pattern as a path.
names=()
for step in "$dir"/steps/${DHS_GPU_STEPS:-*}/; do
  [ -d "$step" ] && names+=("$(basename "$step")")
done
tools=${DHS_SANITIZE_TOOLS:-memcheck racecheck}
if [ "$mode" = sanitize ] || [ "$mode" = all ]; then
  [ ${#names[@]} -gt 0 ] || {
    echo "gpu-soak: DHS_GPU_STEPS='${DHS_GPU_STEPS:-*}' names no step in $dir/steps;" \
         "bundled: $(ls "$dir/steps" 2>/dev/null | tr '\n' ' ')" >&2
    exit 2
  }
  for tool in $tools; do
    [ "$tool" = memcheck ] || [ "$tool" = racecheck ] ||
      { echo "gpu-soak: DHS_SANITIZE_TOOLS: '$tool' is not memcheck or racecheck" >&2; exit 2; }
  done
fi

soak() {
  echo "== soak: ${seconds} s on CUDA (invariant checker on)"
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
  env "${env_steps[@]}" DHS_SOAK_SECONDS="$seconds" DHS_SOAK_BACKEND=cuda \
    "$dir/bin/dhs-unittests" "[soak-timed]" \
    > "$results/soak.log" 2>&1
  local rc=$?
  # A soak that found no GPU ran nothing: not a pass.
  grep -q "SKIPPED (no GPU)" "$results/soak.log" && rc=1
  grep -E -A6 "soak \(|SKIPPED|FAILED" "$results/soak.log" | sed "s/^/  /"; tail -n 2 "$results/soak.log"
  [ $rc -eq 0 ] && echo "soak: PASS" || echo "soak: FAIL (exit $rc, $results/soak.log)"
  return $rc
}

sanitize() {
  command -v compute-sanitizer >/dev/null ||
    { echo "sanitize: compute-sanitizer is not on PATH"; return 1; }
  local failed=0 tool step name
  local cs=(compute-sanitizer --error-exitcode 99 --print-limit 20)
  # The logs are this call's only (the archive holds them).
  rm -f "$results"/cs-*.log
  # racecheck checks a copy of the steps rewritten by tools/racecheck-ptx.sh:
  # the same accesses in the same order, with synchronization racecheck
  # credits and the PTX memory model already implies. (1) racecheck does not
  # credit a named barrier's non-blocking arrival (`bar.arrive`) with
  # ordering the arriving thread's earlier accesses before the accesses that
  # follow a `bar.sync` on the same barrier; the tensor-core kernels hand P
  # and the rescale factors between their consumer warpgroups that way
  # (RELIABILITY.md has the experiment), so the copy's arrivals wait too
  # (`bar.sync`, same barrier and count). (2) In a cluster kernel (the
  # positions of a verify step sharing their prefix) one thread per consumer
  # warpgroup releases a tile on every CTA's empty mbarriers after a named
  # barrier, and racecheck does not credit ordering
  # that reaches another thread's mbarrier arrival through a named barrier
  # (false WAR hazards on the row biases); the copy has every consumer thread
  # arrive too, from the generator's `// dhs.racecheck:` markers, which was
  # racecheck-clean on the H200. The script fails on cluster arrivals
  # without markers.
  for tool in $tools; do
    echo "== compute-sanitizer --tool $tool: the bundled steps through dhs-run"
    # The steps' and the unit tests' PTX, rewritten for racecheck when it is
    # the tool (the unit tests load their steps from these folders too).
    local steps_dir=$dir/steps unit_env=("${env_steps[@]}")
    if [ "$tool" = racecheck ]; then
      local copy
      copy=$(mktemp -d) || return 1
      for sub in steps unit-steps compiled-steps group-steps; do
        [ -d "$dir/$sub" ] && { cp -r "$dir/$sub" "$copy/$sub" || return 1; }
      done
      find "$copy" -name '*.ptx' -exec "$root/tools/racecheck-ptx.sh" {} + ||
        { echo "sanitize: FAIL (tools/racecheck-ptx.sh could not rewrite the steps for racecheck)"; return 1; }
      steps_dir=$copy/steps
      unit_env=(DHS_TEST_STEPS_DIR="$copy/unit-steps" DHS_COMPILED_STEPS_DIR="$copy/compiled-steps"
                DHS_TEST_GROUP_STEPS_DIR="$copy/group-steps")
    fi
    for name in "${names[@]}"; do
      step=$steps_dir/$name/
      # A layer group's steps (one per layer index) run together.
      local steps=("$step")
      [ -d "$step/layer0" ] && steps=("$step"layer*/)
      local extra=(--leak-check full)
      [ "$tool" = racecheck ] && extra=(--racecheck-report hazard)
      if "${cs[@]}" --tool "$tool" "${extra[@]}" "$dir/bin/dhs-run" "${steps[@]}" --backend cuda \
           --seed 5 --resident 0.5 --repeat 1 --warmup 0 \
           > "$results/cs-$tool-$name.log" 2>&1; then
        printf '  %-8s %-36s %s\n' "$tool" "$name" \
          "$(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$results/cs-$tool-$name.log")"
      else
        failed=1
        printf '  %-8s %-36s FAIL (%s)\n' "$tool" "$name" "$results/cs-$tool-$name.log"
        grep -m 5 -E "=========" "$results/cs-$tool-$name.log" | sed 's/^/    /'
      fi
    done
    if [ -n "${DHS_SANITIZE_CASES:-}" ]; then
      echo "== compute-sanitizer --tool $tool: the unit tests' '$DHS_SANITIZE_CASES'"
      if env "${unit_env[@]}" "${cs[@]}" --tool "$tool" "$dir/bin/dhs-unittests" \
           "$DHS_SANITIZE_CASES" --reporter compact --durations yes > "$results/cs-$tool-cases.log" 2>&1; then
        echo "  $tool cases: $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$results/cs-$tool-cases.log")"
      else
        failed=1
        echo "  $tool cases: FAIL ($results/cs-$tool-cases.log)"
        tail -n 40 "$results/cs-$tool-cases.log" | sed 's/^/    /'
      fi
      continue
    fi
    if [ -n "${DHS_GPU_STEPS:-}" ]; then
      echo "== $tool unit tests: skipped: DHS_GPU_STEPS narrows sanitize to bundled steps"
      continue
    fi
    echo "== compute-sanitizer --tool $tool: the generated kernels' unit tests"
    if env "${unit_env[@]}" "${cs[@]}" --tool "$tool" "$dir/bin/dhs-unittests" \
         "[ring],[resolve],[accept]~[chi-square],[topk],[place],[promotion],[sort],[share],[residency][device],[runtime][draft][backends]" \
         --reporter compact --durations yes \
         > "$results/cs-$tool-kernels.log" 2>&1; then
      echo "  $tool kernels: $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$results/cs-$tool-kernels.log")"
    else
      failed=1
      echo "  $tool kernels: FAIL ($results/cs-$tool-kernels.log)"
      tail -n 40 "$results/cs-$tool-kernels.log" | sed 's/^/    /'
    fi
    [ "$tool" = memcheck ] || continue
    echo "== compute-sanitizer --tool memcheck: the executor's CUDA cases"
    if env "${env_steps[@]}" "${cs[@]}" --tool memcheck "$dir/bin/dhs-unittests" "[runtime][cuda],[runtime][backends]" \
         --reporter compact > "$results/cs-memcheck-executor.log" 2>&1; then
      echo "  memcheck executor: $(grep -m1 'ERROR SUMMARY' "$results/cs-memcheck-executor.log")"
    else
      failed=1
      echo "  memcheck executor: FAIL ($results/cs-memcheck-executor.log)"
      tail -n 40 "$results/cs-memcheck-executor.log" | sed 's/^/    /'
    fi
  done
  [ $failed -eq 0 ] && echo "sanitize: PASS" || echo "sanitize: FAIL"
  return $failed
}

# The device tool returns few files: one archive of the logs.
pack() {
  [ -z "${OUT:-}" ] || tar czf "$OUT/gpu-soak.tar.gz" -C "$results" .
}

# A call killed by its time limit still returns the logs so far.
trap 'pack; exit 143' TERM INT

case "$mode" in
  soak) soak; a=$?; pack; exit $a ;;
  sanitize) sanitize; a=$?; pack; exit $a ;;
  all) soak; a=$?; sanitize; b=$?; pack; exit $((a || b)) ;;
  *) echo "usage: tools/gpu-soak.sh soak|sanitize|all [--seconds N] [DIR]" >&2; exit 2 ;;
esac
