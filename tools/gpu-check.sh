#!/usr/bin/env bash
# GPU checks of dhs, repeatable by anyone with an NVIDIA GPU.
#
#   tools/gpu-check.sh bundle [DIR]  on the build machine (MLIR installed, no
#                                    GPU needed): compile every example step to
#                                    PTX and put the runtime binaries (no MLIR
#                                    inside) and the steps into DIR
#                                    (default .device-carry/), with the
#                                    commit they were built from (DIR/COMMIT,
#                                    which names the results).
#   tools/gpu-check.sh run [DIR]     on the GPU machine: run the unit tests
#                                    (their CUDA cases run there, the step
#                                    executor on CUDA vs the CPU among them),
#                                    the example engine and dhs-decode --check
#                                    (BF16 and FP8 KV rows)
#                                    on CUDA, then every
#                                    step through the runtime at residency 0,
#                                    0.5 and 1 on fresh seeds against the fp64
#                                    CPU reference,
#                                    then the promotion benchmark and the
#                                    top-k benchmark (vs torch.topk)
#                                    and the bad-input cases; print a table
#                                    (kept in DIR/results/report.txt).
#   tools/gpu-check.sh checks [DIR]  run without its benchmarks (promotions,
#                                    executor steps, top-k): every check, in
#                                    about half the time.
#   tools/gpu-check.sh               both, on a machine that has everything.
#   tools/gpu-check.sh steps DIR     only compile bundle's steps into DIR.
#   tools/gpu-check.sh soak [DIR] [--seconds N]   on the GPU machine: the
#                                    timed soak (default 240 s) and then
#                                    compute-sanitizer memcheck + racecheck
#                                    on every generated kernel
#                                    (tools/gpu-soak.sh all).
#
# DHS_GPU_STEPS (a glob over the bundled steps' names, e.g. 'verify_step*')
# narrows run's every-step section; one that names none stops run at once.
# DHS_RUN_TIMEOUT (seconds, default 300) limits each run of a check: one that
# does not finish (a hung kernel) fails, and the rest go on.
# Logs and JSON results go to DIR/results (or $DHS_RESULTS); where $OUT is
# set (the device tool's output folder, which returns few files), they are
# also packed into one archive, $OUT/gpu-check-MODE.tar.gz.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=${1:-all}
dir=${2:-$root/.device-carry}

# Runs a command of the GPU checks with a time limit (DHS_RUN_TIMEOUT
# seconds, default 300; the unit suite gets three times as long): a kernel
# that never finishes (a deadlock, e.g. setmaxnreg budgets that overcommit
# the CTA's registers) fails its check, and the checks go on instead of
# holding the GPU machine until the call's own limit.
limited() { # SECONDS COMMAND...
  local seconds=$1
  shift
  timeout -k 10 "$seconds" "$@"
  local rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "gpu-check: timed out after $seconds s (a kernel that never finished?): $1" >&2
  fi
  return $rc
}
run_timeout=${DHS_RUN_TIMEOUT:-300}

# Compiles the steps gpu-check runs into $dir (needs only dhs-compile): the
# top-k benchmark's step, dhs-run's problems in steps/, and the large
# layer-group steps in group-steps/ (tools/compare-ptx.sh compiles them too).
steps() {
  local build=${DHS_BUILD_DIR:-$root/build}
  [ -x "$build/bin/dhs-compile" ] || { echo "gpu-check: build first (tools/setup.sh)" >&2; exit 1; }
  mkdir -p "$dir/steps"
  # The top-k benchmark's step (bench/topk.sh runs it beside torch.topk).
  "$build/bin/dhs-compile" "$root/bench/topk_glm5.mlir" -o "$dir/topk_glm5" || exit 1
  # The steps of one attention op (dhs-run's problems): every row format,
  # one layer or a layer of a group. (The whole-model examples compile to PTX,
  # see test/Codegen/models.test; running them needs the step executor.)
  for name in default_step mla_bf16_64heads_top2048 v41_fp8_step v41_window_step verify_step \
              gqa_step; do
    "$build/bin/dhs-compile" "$root/examples/$name.mlir" -o "$dir/steps/$name" || exit 1
  done
  # A layer of a group of 4 layers: the CUDA backend runs the group through
  # the runtime, so compile the step for each layer index of the pool
  # (steps/NAME/layer<l>; dhs-run gets all four).
  for name in mla_fp8_layer_group verify_step_fp8_group; do
    for layer in 0 1 2 3; do
      sed -E "s/\blayer = [0-9]+/layer = $layer/" "$root/examples/$name.mlir" \
        > "$dir/${name}_layer$layer.mlir"
      "$build/bin/dhs-compile" "$dir/${name}_layer$layer.mlir" \
        -o "$dir/steps/$name/layer$layer" || exit 1
    done
  done
  # The default step with 3 and 4 query positions (the examples have 1, 2
  # and 5), in a pool that holds all their rows at residency 1.
  for q in 3 4; do
    sed "s/4x1x/4x${q}x/g; s/hbm = 2048/hbm = 4096/g" "$root/examples/default_step.mlir" \
      > "$dir/default_q${q}_step.mlir"
    "$build/bin/dhs-compile" "$dir/default_q${q}_step.mlir" \
      -o "$dir/steps/default_q${q}_step" || exit 1
  done
  # The GQA layer with f16 and f32 rows (the example's are bf16).
  for dtype in f16 f32; do
    sed "s/dtype = bf16/dtype = $dtype/g" "$root/examples/gqa_step.mlir" \
      > "$dir/gqa_${dtype}_step.mlir"
    "$build/bin/dhs-compile" "$dir/gqa_${dtype}_step.mlir" \
      -o "$dir/steps/gqa_${dtype}_step" || exit 1
  done
  # The same verify step without its phase marker: nothing is shared, every
  # position's attention reads its own missing rows from the host (fused).
  # The pair measures what shared retrieval saves.
  # (The same for the sliding-window step: its fused kernel.)
  for name in verify_step v41_window_step; do
    grep -v 'dhs.verify gamma\|^  }$' "$root/examples/$name.mlir" \
      > "$dir/${name}_unshared.mlir"
    "$build/bin/dhs-compile" "$dir/${name}_unshared.mlir" \
      -o "$dir/steps/${name}_unshared" || exit 1
  done
  # The tensor-core kernel beyond the examples: 128 heads (two CTAs per
  # query over rows fetched once into the arena) and a verify step of 64
  # heads (staged rows found through the shared fetch's index).
  "$build/bin/dhs-compile" "$root/bench/steps/mla_fp8_attention.mlir" --requests 4 --positions 2 \
    --heads 128 --hbm-slots 16384 -o "$dir/steps/tc_fp8_h128_step" || exit 1
  # The same with bf16 rows (rows in HBM by cp.async).
  "$build/bin/dhs-compile" "$root/bench/steps/mla_bf16_attention.mlir" --requests 4 --positions 2 \
    --heads 128 --hbm-slots 16384 -o "$dir/steps/tc_bf16_h128_step" || exit 1
  # Overlapped staging (--overlap-retrieval): a fetch of 4 CTAs beside the
  # attention, ready flags per tile, programmatic dependent launch; FP8 64
  # heads and bf16 128 heads, 2 query positions.
  "$build/bin/dhs-compile" "$root/bench/steps/mla_fp8_attention.mlir" --requests 8 --positions 2 \
    --heads 64 --hbm-slots 32768 --overlap-retrieval -o "$dir/steps/tc_fp8_overlap_step" || exit 1
  "$build/bin/dhs-compile" "$root/bench/steps/mla_bf16_attention.mlir" --requests 4 --positions 2 \
    --heads 128 --hbm-slots 16384 --overlap-retrieval -o "$dir/steps/tc_bf16_overlap_step" || exit 1
  # The same layer group fused (each layer reads its host rows itself).
  "$build/bin/dhs-compile" "$root/bench/steps/mla_fp8_group_attention.mlir" --requests 8 \
    --positions 1 --heads 64 --hbm-slots 16384 -o "$dir/steps/mla_fp8_layer_group_whole" || exit 1
  # The host-row ring (unsplit FP8 64-head queries of more than four tiles:
  # --min-blocks=0 keeps 8 requests unsplit), one layer and a layer group.
  "$build/bin/dhs-compile" "$root/bench/steps/mla_fp8_attention.mlir" --requests 8 \
    --positions 1 --heads 64 --hbm-slots 16384 --min-blocks=0 \
    -o "$dir/steps/tc_fp8_host_row_ring" || exit 1
  "$build/bin/dhs-compile" "$root/bench/steps/mla_fp8_group_attention.mlir" --requests 8 \
    --positions 1 --heads 64 --hbm-slots 16384 --min-blocks=0 \
    -o "$dir/steps/tc_fp8_group_host_row_ring" || exit 1
  # A layer group's overlapped staging: one fetch of whole tokens beside the
  # four FP8 layers' attentions, which wait for its ready flags.
  "$build/bin/dhs-compile" "$root/bench/steps/mla_fp8_group_attention.mlir" --requests 8 \
    --positions 1 --heads 64 --hbm-slots 16384 --overlap-retrieval \
    -o "$dir/steps/tc_fp8_group_overlap_step" || exit 1
  sed 's/x16x/x64x/g' "$root/examples/verify_step.mlir" > "$dir/verify_step_h64.mlir"
  "$build/bin/dhs-compile" "$dir/verify_step_h64.mlir" -o "$dir/steps/verify_step_h64" || exit 1
  # The same with --share-tiles: share_rows, then a cluster of a request's
  # five position CTAs that gathers the rows they all selected once (staged
  # attention shares only with --share-min-missing=0: its missing rows are
  # in the staging arena).
  "$build/bin/dhs-compile" "$dir/verify_step_h64.mlir" --share-tiles --share-min-missing=0 \
    -o "$dir/steps/verify_step_h64_shared" || exit 1
  # A fused verify step (FP8 rows, 8 requests x 5 positions x 64 heads,
  # top-2048) with --share-tiles as it is by default: a request's positions
  # share where 32 or more of its prefix rows are on the host (residency 0
  # and 0.5), and gather alone where they are not (residency 1), with the
  # same bits.
  awk '/dhs.sparse_attention/ { print "  dhs.verify gamma = 4 {"; inside = 1 }
       { print } inside && /scale =/ { print "  }"; inside = 0 }' \
    "$root/bench/steps/mla_fp8_attention.mlir" > "$dir/verify_step_fp8_fused.mlir"
  "$build/bin/dhs-compile" "$dir/verify_step_fp8_fused.mlir" --requests 8 --positions 5 \
    --heads 64 --hbm-slots $((8 * 5 * 2048)) --share-tiles \
    -o "$dir/steps/verify_step_fp8_fused_shared" || exit 1
  # A verify layer group: four FP8 layers over one selection in one step (a
  # whole-model step of one group), one share_rows for the four layers.
  awk '/dhs.sparse_attention/ && !inside { print "  dhs.verify gamma = 4 {"; inside = 1 }
       /^  return/ && inside { print "  }"; inside = 0 } { print }' \
    "$root/bench/steps/mla_fp8_group_attention.mlir" > "$dir/verify_group4_fp8.mlir"
  "$build/bin/dhs-compile" "$dir/verify_group4_fp8.mlir" --requests 8 --positions 5 \
    --heads 64 --hbm-slots $((8 * 5 * 2048)) --share-tiles \
    -o "$dir/steps/verify_step_fp8_group4_shared" || exit 1
  # A larger resolving layer group for dhs-step-bench: 16 requests x 4 query
  # positions x top-2048 (131072 selections a group, many repeated), 4 FP8
  # layers a pool, 16384 slots.
  local resolve="  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 16384, host = ?>)\n      rows(%rows : memref<16x4x2048xi32>)\n      history(%history_start, %history_len : memref<16xi64>, memref<16xi32>)\n      into(%slots : memref<16x4x2048xi32>)"
  for layer in 0 1 2 3; do
    sed "s/memref<4x1x/memref<16x4x/g; s/x256xi32/x2048xi32/g; s/memref<4xi/memref<16xi/g;
         s/hbm = 2048/hbm = 16384/g; s/@LAYERS@/4/g; s/@LAYER@/$layer/g;
         s|@RESOLVE@|$resolve|; s/@ENTRIES@//; s/@WRITE_BACK@//" \
      "$root/test/unit/steps/mla_fp8_group.mlir.in" > "$dir/large_g4_layer$layer.mlir"
    "$build/bin/dhs-compile" "$dir/large_g4_layer$layer.mlir" \
      -o "$dir/group-steps/large_g4_resolved/layer$layer" || exit 1
  done
  # Its decision and aging steps (residency decisions on the device,
  # dhs-decision-bench).
  "$build/bin/dhs-compile" "$root/examples/decision_step.mlir" --requests 16 --positions 4 \
    --topk 2048 --hbm-slots 16384 -o "$dir/decisions/large_g4" || exit 1
  "$build/bin/dhs-compile" "$root/examples/aging_step.mlir" --requests 16 \
    --hbm-slots 16384 -o "$dir/decisions/aging_large_g4" || exit 1
  # A one-layer group's layer step over B requests x top-2048 that resolves
  # on the device, 65536 slots: group-steps/bB_g1_resolved/layer0; with
  # `write_back`, its misses written into the pool's write-back ring too:
  # group-steps/bB_g1_write_back/layer0. A variant ending in `_staged` is
  # compiled with 8 heads a CTA: a query's two CTAs read the missing rows
  # from staging, which a fetch fills (and, writing back, writes the ring).
  one_layer_step() {
    local B=$1 variant=${2:-resolved}
    local options=()
    [ "${variant%_staged}" != "$variant" ] && options=(--max-heads-per-block 8)
    local resolve="  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 65536, host = ?>)\n      rows(%rows : memref<${B}x1x2048xi32>)\n      history(%history_start, %history_len : memref<${B}xi64>, memref<${B}xi32>)\n      into(%slots : memref<${B}x1x2048xi32>)"
    local entries="" write_back=""
    if [ "${variant#write_back}" != "$variant" ]; then
      resolve="$resolve write_back(%entries : memref<${B}x1x2048xi32>)"
      entries="\n                %entries: memref<${B}x1x2048xi32>,"
      write_back="\n      write_back(%entries : memref<${B}x1x2048xi32>)"
    fi
    sed "s/memref<4x1x/memref<${B}x1x/g; s/x256xi32/x2048xi32/g; s/memref<4xi/memref<${B}xi/g;
         s/hbm = 2048/hbm = 65536/g; s/@LAYERS@/1/g; s/@LAYER@/0/g;
         s|@RESOLVE@|$resolve|; s|@ENTRIES@|$entries|; s|@WRITE_BACK@|$write_back|" \
      "$root/test/unit/steps/mla_fp8_group.mlir.in" > "$dir/b${B}_${variant}_g1_layer0.mlir"
    "$build/bin/dhs-compile" "$dir/b${B}_${variant}_g1_layer0.mlir" "${options[@]}" \
      -o "$dir/group-steps/b${B}_g1_${variant}/layer0" || exit 1
  }
  # Many groups for dhs-decision-bench's host time: 128 requests x top-2048,
  # one FP8 layer a group (the bench runs 20 of them), 65536 slots.
  one_layer_step 128
  sed "s/layers = 4/layers = 1/g" "$root/examples/place_rows_step.mlir" > "$dir/place_rows_g1.mlir"
  "$build/bin/dhs-compile" "$dir/place_rows_g1.mlir" -o "$dir/decisions/place_rows_g1" || exit 1
  sed "s/layers = 4/layers = 1/g" "$root/examples/decision_step.mlir" > "$dir/decision_step_g1.mlir"
  "$build/bin/dhs-compile" "$dir/decision_step_g1.mlir" --requests 128 --positions 1 \
    --topk 2048 --hbm-slots 65536 -o "$dir/decisions/b128_g1" || exit 1
  sed "s/layers = 4/layers = 1/g" "$root/examples/aging_step.mlir" > "$dir/aging_step_g1.mlir"
  "$build/bin/dhs-compile" "$dir/aging_step_g1.mlir" --requests 128 --hbm-slots 65536 \
    -o "$dir/decisions/aging_b128_g1" || exit 1
  # A steady state for dhs-decision-bench --drift (bench/attention.sh's
  # executor section): 16 requests x top-2048, one FP8 layer a group, 65536
  # slots: a group's working set (32768 rows) fits, so a step misses about
  # the share of its selections drawn afresh and promotes them.
  one_layer_step 16
  "$build/bin/dhs-compile" "$dir/decision_step_g1.mlir" --requests 16 --positions 1 \
    --topk 2048 --hbm-slots 65536 -o "$dir/decisions/b16_g1" || exit 1
  # The same with the write-back ring: the promotions copy the rows the
  # attention read from the host store out of HBM. And both staged (the
  # fetch writing the ring).
  one_layer_step 16 write_back
  one_layer_step 16 resolved_staged
  one_layer_step 16 write_back_staged
  sed "s/layers = 4/layers = 1/g" "$root/examples/decision_step_write_back.mlir" \
    > "$dir/decision_step_write_back_g1.mlir"
  "$build/bin/dhs-compile" "$dir/decision_step_write_back_g1.mlir" --requests 16 --positions 1 \
    --topk 2048 --hbm-slots 65536 -o "$dir/decisions/b16_g1_write_back" || exit 1
}

bundle() {
  local build=${DHS_BUILD_DIR:-$root/build}
  [ -x "$build/bin/dhs-compile" ] || { echo "gpu-check: build first (tools/setup.sh)" >&2; exit 1; }
  rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/steps"
  # The tree the bundle was built from (the GPU machine's checkout may be
  # another commit): run and bench/attention.sh name their results by it.
  git -C "$root" describe --always --dirty --abbrev=7 > "$dir/COMMIT" 2>/dev/null || rm -f "$dir/COMMIT"
  cp "$build/bin/dhs-run" "$build/bin/dhs-unittests" "$build/bin/dhs-engine" \
     "$build/bin/dhs-topk-bench" "$build/bin/dhs-promotion-bench" "$build/bin/dhs-step-bench" \
     "$build/bin/dhs-retrieval-bench" "$build/bin/dhs-decision-bench" "$build/bin/dhs-graph-launch-bench" \
     "$build/bin/dhs-decode" "$dir/bin/"
  # dhs-decode's steps, beside it where it looks for them.
  cp -r "$build/bin/dhs-decode-steps" "$dir/bin/dhs-decode-steps"
  cp -r "$root/bench" "$dir/bench"
  cp -r "$root/test/unit/steps" "$dir/unit-steps"
  # Steps the unit tests compiled at build time (the draft-ring kernels).
  [ -d "$build/test/unit/compiled-steps" ] &&
    cp -r "$build/test/unit/compiled-steps" "$dir/compiled-steps"
  # The layer-group steps (FP8, groups of 2 and 4, one step per layer index).
  [ -d "$build/test/unit/group-steps" ] &&
    cp -r "$build/test/unit/group-steps" "$dir/group-steps"
  steps
  # The attention benchmark's shapes (bench/attention.sh run DIR times them).
  DHS_BUILD_DIR=$build bash "$root/bench/attention.sh" steps "$dir" || exit 1
  echo "gpu-check: bundle in $dir: $(ls "$dir/steps" | tr '\n' ' ')"
}

run() {
  # The bundled steps DHS_GPU_STEPS names (a glob, default all); one that
  # names none stops here, before the GPU is used (bash would run its
  # pattern as a path).
  local names=() step
  for step in "$dir"/steps/${DHS_GPU_STEPS:-*}/; do
    [ -d "$step" ] && names+=("$(basename "$step")")
  done
  [ ${#names[@]} -gt 0 ] || {
    echo "gpu-check: DHS_GPU_STEPS='${DHS_GPU_STEPS:-*}' names no step in $dir/steps;" \
         "bundled: $(ls "$dir/steps" 2>/dev/null | tr '\n' ' ')" >&2
    return 2
  }
  local results=${DHS_RESULTS:-$dir/results}
  mkdir -p "$results"
  # The table reads every *-seed*.json here: an earlier call's (a warm
  # machine keeps them) would show as this run's rows.
  rm -f "$results"/*-seed*.json "$results"/*-seed*.log
  local failed=0
  checkpoint
  echo "== device"
  [ -f "$dir/COMMIT" ] && echo "bundle built from $(cat "$dir/COMMIT")"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

  checkpoint
  echo "== unit tests (CUDA cases included)"
  DHS_TEST_STEPS_DIR="$dir/unit-steps" DHS_COMPILED_STEPS_DIR="$dir/compiled-steps" \
    DHS_TEST_GROUP_STEPS_DIR="$dir/group-steps" \
    limited $((3 * run_timeout)) "$dir/bin/dhs-unittests" --reporter compact --durations yes \
    > "$results/unittests.log" 2>&1 || { failed=1; echo "FAILED: unit tests"; }
  # Catch2's summary ("Passed all ..." or "test cases: ... failed").
  grep -E "^(Passed|Failed|test cases)" "$results/unittests.log" | tail -n 1 | sed "s/^/  /"
  echo "  slowest cases and sections:"
  grep -E "^[0-9]+\.[0-9]+ s: " "$results/unittests.log" | sort -rn | head -n 5 | sed "s/^/    /"
  grep -E "warning: .?(cuda|device selections)|SKIPPED" "$results/unittests.log" | sed "s/^/  /"

  checkpoint
  echo "== every step through the runtime vs the fp64 CPU reference, residency 0 / 0.5 / 1, same inputs"
  local seeds=${DHS_GPU_SEEDS:-"11 12 13"}
  local name
  for name in "${names[@]}"; do
    step=$dir/steps/$name/
    # A layer group's steps (one per layer index) run together.
    local steps=("$step")
    [ -d "$step/layer0" ] && steps=("$step"layer*/)
    local extra=()
    # Long histories for the large step: rows spread over a 1.8 GB host store.
    [ "$name" = mla_bf16_64heads_top2048 ] && extra=(--history-rows 100000)
    # Verify positions select overlapping rows (the shared fetch's case).
    case "$name" in verify_step* | v41_window_step*) extra=(--overlap 0.85) ;; esac
    for seed in $seeds; do
      local start=$SECONDS
      if limited "$run_timeout" "$dir/bin/dhs-run" "${steps[@]}" --backend cuda --seed "$seed" \
           --resident 0,0.5,1 --unused 0.05 --repeat 20 "${extra[@]}" \
           --json "$results/$name-seed$seed.json" > "$results/$name-seed$seed.log" 2>&1; then
        printf '  %-36s seed %s: PASS (%d s)\n' "$name" "$seed" $((SECONDS - start))
      else
        failed=1; echo "FAILED: $name seed $seed"; tail -n 3 "$results/$name-seed$seed.log"
      fi
    done
    checkpoint
  done

  checkpoint
  echo "== the runtime's step executor on CUDA: the example engine on the default step"
  if [ -x "$dir/bin/dhs-engine" ]; then
    limited "$run_timeout" "$dir/bin/dhs-engine" "$dir/steps/default_step" --backend cuda \
      --steps 30 --timed-steps 200 > "$results/engine.log" 2>&1 || { failed=1; echo "FAILED: dhs-engine"; }
    tail -n 4 "$results/engine.log"
  fi

  checkpoint
  echo "== dhs-decode on CUDA: greedy streams with and without speculation, residency all/part/none"
  if [ -x "$dir/bin/dhs-decode" ]; then
    for kv in bf16 fp8; do
      limited "$run_timeout" "$dir/bin/dhs-decode" --backend cuda --check --kv $kv \
        > "$results/decode-$kv.log" 2>&1 ||
        { failed=1; echo "FAILED: dhs-decode --check --kv $kv"; }
      tail -n 9 "$results/decode-$kv.log"
    done
  fi

  checkpoint
  echo "== shared retrieval at the edges: identical positions, unused selections"
  for args in "--overlap 1 --unused 0.3" "--overlap 0 --unused 0" "--overlap 0.5 --unused 0.9"; do
    # shellcheck disable=SC2086
    if limited "$run_timeout" "$dir/bin/dhs-run" "$dir/steps/verify_step" --backend cuda --seed 21 --resident 0,0.5 \
         $args > "$results/edges.log" 2>&1; then
      printf '  %-28s -> %s\n' "$args" "$(grep -E '^ +[0-9.]+ +[0-9]' "$results/edges.log" |
        awk '{printf "residency %s: fetched %s for %s missing selections; ", $1, $5, $4}')PASS"
    else
      failed=1; echo "FAILED: verify_step $args"; tail -n 3 "$results/edges.log"
    fi
  done

  checkpoint
  echo "== a layer group's kernels alone (dhs-run --no-host-check: every layer attends, the first is checked)"
  # The overlap step's forms each at every residency (the fused attentions
  # up to 8% missing, the fetch and staged attentions above), and as chosen.
  for run in mla_fp8_layer_group_whole: tc_fp8_group_overlap_step: \
             tc_fp8_group_overlap_step:0.08 tc_fp8_group_overlap_step:1; do
    name=${run%%:*} share=${run#*:}
    [ -d "$dir/steps/$name" ] || continue
    if limited "$run_timeout" "$dir/bin/dhs-run" "$dir/steps/$name" --backend cuda --no-host-check --seed 31 \
         --resident 0,0.5,1 --repeat 5 ${share:+--form-share $share} \
         > "$results/direct-$name${share:+-$share}.log" 2>&1; then
      printf '  %-36s %-14s PASS\n' "$name" "${share:+form share $share}"
    else
      failed=1; echo "FAILED: $name ${share:+form share $share} (direct)"
      tail -n 3 "$results/direct-$name${share:+-$share}.log"
    fi
  done

  # (The checks above and this one first: a run cut short by its time limit
  # still has them; the benchmarks below check their outputs too.)
  checkpoint
  echo "== bad input is reported by the kernel itself (host checks off), not read"
  # The default step, and a layer group's overlapped staging (the fetch
  # skips a bad row and still marks its tile staged: the attentions waiting
  # for it report, they do not hang).
  # (The group's staged form: residency 0.5 misses more than its 8%.)
  for name in default_step tc_fp8_group_overlap_step; do
    [ -d "$dir/steps/$name" ] || continue
    for kind in row-id bad-id slot host-row; do
      if limited "$run_timeout" "$dir/bin/dhs-run" "$dir/steps/$name" --backend cuda \
           --inject-error "$kind" --no-host-check --resident 0.5 \
           > "$results/inject-$name-$kind.log" 2>&1; then
        failed=1; echo "FAILED: injected $kind was not reported ($name)"
      elif grep -q "gpu-check: timed out" "$results/inject-$name-$kind.log"; then
        failed=1; echo "FAILED: injected $kind hung the step ($name)"
      elif grep -q "ready flag stayed unset" "$results/inject-$name-$kind.log"; then
        failed=1; echo "FAILED: injected $kind left a tile unstaged ($name): a wait timed out"
      else
        printf '  %-26s %-9s -> %s\n' "$name" "$kind" \
          "$(grep -m1 'error' "$results/inject-$name-$kind.log")"
      fi
    done
  done

  # The benchmarks (`checks` skips them: the checks above in about half the
  # time, where device time is short).
  if [ "$mode" = checks ]; then
    echo "== benchmarks: skipped (gpu-check.sh checks)"
  else
    checkpoint
    echo "== promotions: a copy per row vs one driver batch vs the place_rows kernel"
    if [ -x "$dir/bin/dhs-promotion-bench" ] && [ -d "$dir/compiled-steps/place_rows" ]; then
      "$dir/bin/dhs-promotion-bench" "$dir/compiled-steps/place_rows" \
        > "$results/promotion.log" 2>&1 || { failed=1; echo "FAILED: promotion benchmark"; }
      sed 's/^/  /' "$results/promotion.log"
    fi

    checkpoint
    echo "== executor steps: selections in host memory vs in device memory"
    if [ -x "$dir/bin/dhs-step-bench" ] && [ -d "$dir/group-steps/fp8_g4_resolved" ]; then
      "$dir/bin/dhs-step-bench" "$dir/compiled-steps/place_rows" \
        "$dir"/group-steps/fp8_g4_resolved/layer{0,1,2,3} \
        > "$results/step.log" 2>&1 || { failed=1; echo "FAILED: step benchmark"; }
      sed 's/^/  /' "$results/step.log"
      "$dir/bin/dhs-step-bench" "$dir/compiled-steps/place_rows" \
        "$dir"/group-steps/large_g4_resolved/layer{0,1,2,3} \
        > "$results/step_large.log" 2>&1 || { failed=1; echo "FAILED: step benchmark (large)"; }
      sed 's/^/  /' "$results/step_large.log"
    fi

    checkpoint
    echo "== executor steps: residency decided by the host vs on the device"
    if [ -x "$dir/bin/dhs-decision-bench" ] && [ -d "$dir/decisions/large_g4" ]; then
      # Appends taken back to the host for each step, then replayed on the
      # device (dhs.age_rows: one CTA, O(1) owner checks, CLOCK trips of 1024
      # slots; the faster of the two since the ninth session; bench/NOTES.md
      # has the one-thread form's 80 ms a step and the one-warp form's 6.5 ms).
      "$dir/bin/dhs-decision-bench" "$dir/compiled-steps/place_rows" "$dir/decisions/large_g4" \
        "$dir"/group-steps/large_g4_resolved/layer{0,1,2,3} \
        > "$results/decision.log" 2>&1 || { failed=1; echo "FAILED: decision benchmark"; }
      sed 's/^/  /' "$results/decision.log"
      "$dir/bin/dhs-decision-bench" --aging-step "$dir/decisions/aging_large_g4" \
        "$dir/compiled-steps/place_rows" "$dir/decisions/large_g4" \
        "$dir"/group-steps/large_g4_resolved/layer{0,1,2,3} \
        > "$results/decision_aging.log" 2>&1 || { failed=1; echo "FAILED: decision benchmark (aging)"; }
      sed 's/^/  /' "$results/decision_aging.log"
      "$dir/bin/dhs-decision-bench" --groups 20 --history 2304 "$dir/decisions/place_rows_g1" \
        "$dir/decisions/b128_g1" "$dir/group-steps/b128_g1_resolved/layer0" \
        > "$results/decision_b128.log" 2>&1 || { failed=1; echo "FAILED: decision benchmark (B=128)"; }
      sed 's/^/  /' "$results/decision_b128.log"
      # The same with the appends replayed on the device (the one-warp kernel
      # took 1.73 s a step here); its slots must end as the host's.
      "$dir/bin/dhs-decision-bench" --groups 20 --history 2304 --steps 10 \
        --aging-step "$dir/decisions/aging_b128_g1" "$dir/decisions/place_rows_g1" \
        "$dir/decisions/b128_g1" "$dir/group-steps/b128_g1_resolved/layer0" \
        > "$results/decision_b128_aging.log" 2>&1 ||
        { failed=1; echo "FAILED: decision benchmark (B=128, aging)"; }
      sed 's/^/  /' "$results/decision_b128_aging.log"
    fi

    checkpoint
    echo "== top-k: the generated kernel vs torch.topk and the memory floor"
    if [ -x "$dir/bin/dhs-topk-bench" ]; then
      bash "$dir/bench/topk.sh" "$dir/topk_glm5" "$dir/bin/dhs-topk-bench" \
        > "$results/topk.log" 2>&1 || { failed=1; echo "FAILED: top-k benchmark"; }
      tail -n 1 "$results/topk.log" | sed 's/^/  /'
    fi
  fi

  checkpoint
  echo "== table"
  python3 - "$results" <<'PY'
import glob, json, os, sys
rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*-seed*.json"))):
    r = json.load(open(path))
    name = os.path.basename(path)[:-5]
    for m in r["mixes"]:
        fetched = m.get("fetched_rows")
        rows.append((name, m["residency"], m["selections"], m["resident_reads"],
                     m["host_reads"], "-" if fetched is None else str(fetched),
                     m["relative_error"], m["time_ms"],
                     r["bit_identical_across_mixes"], m["pass"]))
print(f"{'step-seed':36} {'resid':>5} {'selected':>8} {'in HBM':>8} {'host':>8} "
      f"{'fetched':>8} {'rel err':>9} {'ms':>8} {'bits same':>9} {'check':>5}")
for n, f, s, res, host, fetched, err, ms, same, ok in rows:
    print(f"{n:36} {f:5.2f} {s:8d} {res:8d} {host:8d} {fetched:>8} {err:9.2e} "
          f"{ms:8.3f} {str(same):>9} {'PASS' if ok else 'FAIL':>5}")
PY
  if [ $failed -eq 0 ]; then echo "gpu-check: PASS"; else echo "gpu-check: FAIL"; fi
  return $failed
}

# Runs `run`, its report (what it prints) also kept beside its logs
# (results/report.txt, in the archive).
report() {
  local results=${DHS_RESULTS:-$dir/results}
  mkdir -p "$results"
  run 2>&1 | tee "$results/report.txt"
  return "${PIPESTATUS[0]}"
}

# Packs what run has logged so far: a run cut short by a time limit still
# returns its logs.
checkpoint() { pack run >/dev/null; }

# Packs DIR/results into $OUT/gpu-check-$1.tar.gz when $OUT is set.
pack() {
  [ -n "${OUT:-}" ] || return 0
  tar czf "$OUT/gpu-check-$1.tar.gz" -C "${DHS_RESULTS:-$dir/results}" . &&
    echo "gpu-check: logs in $OUT/gpu-check-$1.tar.gz"
}

case "$mode" in
  soak) shift; exec bash "$root/tools/gpu-soak.sh" all "$@" ;;
  bundle) bundle ;;
  steps) steps ;;
  run | checks) report; rc=$?; pack run; exit $rc ;;
  all) bundle && { report; rc=$?; pack run; exit $rc; } ;;
  *) echo "usage: tools/gpu-check.sh [bundle|steps|run|checks|all|soak] [DIR]" >&2; exit 2 ;;
esac
