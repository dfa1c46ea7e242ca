#!/usr/bin/env bash
# The attention benchmark (issue 10's table): the generated attention kernels
# on GLM-5 / DeepSeek-V3.2-shaped steps, each checked against the fp64 CPU
# reference before it is timed, against the floors measured in the same run
# (dense bf16 matmul rate and pinned host-to-device copy rate, with torch).
#
#   bench/attention.sh steps DIR   on the build machine: compile every shape
#                                  (bench/steps/*.mlir via dhs-compile) into DIR
#   bench/attention.sh run DIR [SECTION...]
#                                  on the GPU machine (DIR holds bin/dhs-run,
#                                  as tools/gpu-check.sh bundle makes it):
#                                  time every shape and print the table, or
#                                  its SECTIONs (shapes costs mixed group
#                                  verify retrieval executor; the whole table takes
#                                  over 600 s); it is also written to
#                                  bench/results/ with the date, GPU, commit
#                                  and the sections of a part (and, where
#                                  $OUT is set, copied there with one archive
#                                  of the per-shape logs); DHS_VERIFY_FORMATS,
#                                  DHS_VERIFY_OVERLAPS and DHS_VERIFY_MISSING
#                                  narrow `verify`; on the build machine
#                                  bench/plot_attention.py draws a run's
#                                  table (bench/attention.png)
#   bench/attention.sh variant DIR FOLDER PATCH
#                                  on the build machine, in a checkout with
#                                  no tracked changes: apply PATCH (a kernel
#                                  change, e.g. bench/pending/*.patch),
#                                  rebuild dhs-compile, compile the resident
#                                  shapes as `steps` does into DIR/FOLDER,
#                                  then take the patch back out and rebuild
#                                  (for `compare DIR attention FOLDER`)
#   bench/attention.sh compare DIR A B...
#                                  on the GPU machine: kernel variants (A, B,
#                                  ...: folders under DIR holding steps as
#                                  `steps` compiles them into DIR/attention,
#                                  e.g. by another branch's dhs-compile)
#                                  timed alternately, two rounds (the second
#                                  in reverse order), each run
#                                  checked against fp64 first, then each
#                                  variant's mean and its ratio to A's; by
#                                  default the
#                                  FP8 128 x 64-head step at 0 / 1 / 5 / 14%
#                                  missing (DHS_COMPARE_STEPS: "NAME
#                                  RESIDENCY [FORM_SHARE]" lines, a form
#                                  share forcing a form as dhs-run
#                                  --form-share does; DHS_COMPARE_HISTORY_ROWS:
#                                  rows a request, default 32768)
#
# A dhs-run that does not finish in DHS_STEP_TIMEOUT seconds (default 120: a
# hung kernel) fails its shape, and the others go on.
#
# Shapes: FP8 656 B and bf16 1152 B rows, 576/512 dims, top-2048, 64 and 128
# heads, 1, 2 and 5 query positions, 32 to 128 requests, 32K-row histories,
# all rows resident (kernel time: dhs-run --no-host-check times the step's
# launches with CUDA events); a CTA's fixed and per-tile costs (the FP8
# 64-head step at top-512 and top-2048, one CTA alone and 128 together);
# then the FP8 64-head shape with x% of the
# selected rows missing (x = 1, 5, 14, 30) against max(attention at residency
# 1, missing bytes / copy rate), and against max(attention at residency 1,
# missing bytes / the rate of the generated fetch kernel on the same rows: one
# layer's 656-byte rows, scattered over the same 2.75 GB store, timed by
# dhs-retrieval-bench in the same run), and the same steps compiled with
# --overlap-retrieval (a fetch of 4 CTAs beside the attention); a layer
# group's mixed steps (four FP8 layers over one selection, 2624-byte tokens):
# fused (each layer reads its host rows) and overlapped (one fetch of whole
# tokens beside the four attentions) against max(the group at residency 1,
# missing bytes / copy rate); the CUDA-core kernel on the first shape; and
# retrieval: the fetch kernel of one layer group over a 22 GB pinned store
# (dhs-retrieval-bench, 5-20% of the selections missing, first in each list
# or scattered in it) against the copy rate; executor steps (dhs-decision-bench:
# the large step and B=128 x 20 layer groups, residency decided on the device,
# each step's phases and host time; a decode's steady state, 5% and 14% of
# the selections new each step, with ncu's kernel times of one decided step:
# the promotions' second read of the missing rows against the attention);
# and verify steps (64 requests x 5 positions x 64 heads): the step inside a
# dhs.verify phase compiled with --share-tiles (dhs.share_rows orders each request's
# selections, then a cluster of its five position CTAs gathers each row they
# all selected once where 32 or more of them are on the host, else each
# position alone) and with --share-min-missing=0 (always shared) against the
# same step without the phase (every position's CTA gathers its own rows),
# at the generator's overlap 0.85 (each position keeps 85% of the previous
# one's rows: ~52% common to all five), 1 (all the same) and 0 with every
# row resident, and at overlap 0.85 with 1-30% of the rows on the host;
# times include the share_rows launch.
# Progress and the table go to stdout as each shape finishes.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=${1:-}
dir=${2:-$root/.device-carry}
# run_step's failures go to fd 3: stderr, or the table inside `run`.
exec 3>&2
# requests positions heads
shapes=("128 1 64" "64 2 64" "32 1 64" "64 5 64" "64 1 128" "32 1 128")

# Compiles every shape, all rows resident, into DIR/FOLDER.
compile_shapes() { # FOLDER
  local compile=${DHS_BUILD_DIR:-$root/build}/bin/dhs-compile
  mkdir -p "$dir/$1"
  for shape in "${shapes[@]}"; do
    read -r b q h <<<"$shape"
    for format in fp8 bf16; do
      "$compile" "$root/bench/steps/mla_${format}_attention.mlir" --requests "$b" \
        --positions "$q" --heads "$h" --hbm-slots $((b * q * 2048)) \
        -o "$dir/$1/${format}_b${b}_q${q}_h${h}" || exit 1
    done
  done
}

steps() {
  local compile=${DHS_BUILD_DIR:-$root/build}/bin/dhs-compile
  compile_shapes attention
  # Verify steps: the same step inside a verify phase of gamma = 4.
  for format in fp8 bf16; do
    awk '/dhs.sparse_attention/ { print "  dhs.verify gamma = 4 {"; inside = 1 }
         { print } inside && /scale =/ { print "  }"; inside = 0 }' \
      "$root/bench/steps/mla_${format}_attention.mlir" > "$dir/attention/verify_${format}.mlir"
    for b in 64 8; do
      "$compile" "$dir/attention/verify_${format}.mlir" --requests $b --positions 5 --heads 64 \
        --hbm-slots $((b * 5 * 2048)) --share-tiles -o "$dir/attention/verify_${format}_b${b}_q5_h64" || exit 1
      "$compile" "$dir/attention/verify_${format}.mlir" --requests $b --positions 5 --heads 64 \
        --hbm-slots $((b * 5 * 2048)) --share-tiles --share-min-missing=0 \
        -o "$dir/attention/verify_always_${format}_b${b}_q5_h64" || exit 1
    done
  done
  "$compile" "$root/bench/steps/mla_fp8_attention.mlir" --requests 128 --positions 1 --heads 64 \
    --hbm-slots 262144 --tensor-cores=false -o "$dir/attention/cores_fp8_b128_q1_h64" || exit 1
  # The mixed steps with overlapped staging (a fetch of 4 CTAs beside the
  # attention) against the fused kernel.
  "$compile" "$root/bench/steps/mla_fp8_attention.mlir" --requests 128 --positions 1 --heads 64 \
    --hbm-slots 262144 --overlap-retrieval -o "$dir/attention/overlap_fp8_b128_q1_h64" || exit 1
  # A layer group's mixed steps: four FP8 layers fused, and overlapped.
  "$compile" "$root/bench/steps/mla_fp8_group_attention.mlir" --requests 128 --positions 1 \
    --heads 64 --hbm-slots 262144 -o "$dir/attention/group_fp8_b128_q1_h64" || exit 1
  "$compile" "$root/bench/steps/mla_fp8_group_attention.mlir" --requests 128 --positions 1 \
    --heads 64 --hbm-slots 262144 --overlap-retrieval \
    -o "$dir/attention/group_overlap_fp8_b128_q1_h64" || exit 1
  # A CTA's fixed and per-tile costs: the FP8 64-head step at top-512 and
  # top-2048 (8 and 32 tiles a CTA), one query and 128, never split.
  sed 's/x2048xi32/x512xi32/g' "$root/bench/steps/mla_fp8_attention.mlir" \
    > "$dir/attention/mla_fp8_attention_k512.mlir"
  local k b
  for k in 512 2048; do
    local source="$root/bench/steps/mla_fp8_attention.mlir"
    [ $k = 512 ] && source="$dir/attention/mla_fp8_attention_k512.mlir"
    for b in 1 128; do
      "$compile" "$source" --requests $b --positions 1 --heads 64 --hbm-slots $((b * k)) \
        --min-blocks 0 -o "$dir/attention/costs_fp8_b${b}_k$k" || exit 1
    done
  done
  # Retrieval: one layer group's fetch over a 22 GB store (dhs-retrieval-bench).
  "$compile" "$root/bench/steps/fetch_fp8_group.mlir" -o "$dir/attention/fetch_fp8_group" || exit 1
  # The mixed steps' fetch baseline: single 656-byte rows (dhs-retrieval-bench).
  "$compile" "$root/bench/steps/fetch_fp8_layer.mlir" -o "$dir/attention/fetch_fp8_layer" || exit 1
}

# One step's median time in ms at a residency (and overlap), from dhs-run's
# JSON (empty on failure); logs under $results.
# The steps are read from DIR/attention, or DIR/$variant where set.
# A run that does not finish in $DHS_STEP_TIMEOUT seconds (default 120: a
# hung kernel, e.g. a variant under test) fails, and the others go on.
run_step() { # NAME RESIDENCY [OVERLAP] [FORM_SHARE]
  local folder=${variant:-attention}
  local log=$results/${variant:+$variant-}$1-$2${3:+-$3}${4:+-form$4}
  rm -f "$log.json"
  timeout -k 10 "${DHS_STEP_TIMEOUT:-120}" \
    "$dir/bin/dhs-run" "$dir/$folder/$1" --backend cuda --no-host-check --resident "$2" \
    ${3:+--overlap $3} ${4:+--form-share $4} --history-rows "${history_rows:-32768}" \
    --repeat 20 --json "$log.json" \
    > "$log.log" 2>&1 ||
    { echo "FAILED: $1 at residency $2 (exit $?; 124: timed out)" >&3; tail -n 3 "$log.log" >&3
      return; }
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['mixes'][0]['time_ms'])" \
    "$log.json"
}

# The floors measured in this run (torch): sets $peak (dense bf16 matmul,
# TFLOP/s) and $copy (pinned host-to-device copy, GB/s) and prints them.
measure_floors() {
  local floors
  floors=$(python3 - <<'PY'
import torch
def timed(f, n=20):
    f(); torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n): f()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / n
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
ms = timed(lambda: a @ a)
host = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
dev = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
copy = timed(lambda: dev.copy_(host, non_blocking=True), 10)
print(f"{2 * 8192**3 / ms / 1e9:.1f} {(1 << 30) / copy / 1e6:.1f}")
PY
)
  read -r peak copy <<<"$floors"
  echo "dense bf16 matmul: $peak TFLOP/s; pinned host-to-device copy: $copy GB/s"
}

# Each section of the table (`run DIR [SECTION...]`).
section_shapes() { # every shape, all rows resident
  printf '%-24s %9s %9s %12s\n' shape ms TFLOP/s "of peak"
  for shape in "${shapes[@]}" "128 1 64 cores"; do
    read -r b q h kind <<<"$shape"
    for format in fp8 bf16; do
      [ "${kind:-}" = cores ] && [ $format = bf16 ] && continue
      local name=${format}_b${b}_q${q}_h${h}
      [ -n "${kind:-}" ] && name=${kind}_$name
      local ms; ms=$(run_step "$name" 1)
      [ -n "$ms" ] || continue
      python3 -c "import sys; b,q,h,ms,peak=map(float,sys.argv[1:6]); t=2*h*2048*1088*b*q/ms/1e9
print(f'{sys.argv[6]:24} {ms:9.4f} {t:9.1f} {t/peak:11.1%}')" "$b" "$q" "$h" "$ms" "$peak" "$name"
    done
  done
}

section_mixed() { # the FP8 64-head shape with x% of its rows missing
  local resident; resident=$(run_step fp8_b128_q1_h64 1)
  [ -n "$resident" ] || { echo "mixed: FAILED at residency 1"; return; }
  # The generated fetch kernel on the mixed steps' rows (656 B, scattered over
  # a 2.75 GB store): its GB/s per missing fraction.
  local fetch=""
  if [ -x "$dir/bin/dhs-retrieval-bench" ] && [ -d "$dir/attention/fetch_fp8_layer" ]; then
    "$dir/bin/dhs-retrieval-bench" "$dir/attention/fetch_fp8_layer" 32768 \
      --missing=0.01,0.05,0.14,0.30 > "$results/fetch_fp8_layer.log" 2>&1 ||
      echo "FAILED: dhs-retrieval-bench on fetch_fp8_layer" >&2
    fetch=$(awk '/scattered/ { sub("%", "", $1); printf "%g:%s,", $1 + 0, $5 }' \
      "$results/fetch_fp8_layer.log")
  fi
  printf '\n%-8s %9s %9s %9s %9s %10s %9s %13s\n' missing ms floor/ms "vs floor" GB/s \
    "fetch GB/s" "vs fetch" "overlapped ms"
  for missing in 0.01 0.05 0.14 0.30; do
    local ms; ms=$(run_step fp8_b128_q1_h64 "$(python3 -c "print(1-$missing)")")
    [ -n "$ms" ] || continue
    local overlapped; overlapped=$(run_step overlap_fp8_b128_q1_h64 "$(python3 -c "print(1-$missing)")")
    python3 -c "import sys; x,ms,res,copy=map(float,sys.argv[1:5]); byts=x*128*2048*656
rates=dict(p.split(':') for p in sys.argv[5].split(',') if p)
rate=float(rates.get(f'{x*100:.0f}', 0))
floor=max(res, byts/copy/1e6); fetch=max(res, byts/rate/1e6) if rate else 0
print(f'{x:8.0%} {ms:9.4f} {floor:9.4f} {ms/floor:9.2f} {byts/(ms-res)/1e6 if ms>res else 0:9.1f}'
      + (f' {rate:10.1f} {ms/fetch:9.2f}' if rate else f' {\"-\":>10} {\"-\":>9}')
      + (f' {float(sys.argv[6]):13.4f}' if sys.argv[6] else f' {\"-\":>13}'))" \
      "$missing" "$ms" "$resident" "$copy" "$fetch" "$overlapped"
  done
}

section_group() { # a layer group's mixed steps
  # A layer group's mixed steps (four FP8 layers over one selection, tokens
  # of 2624 bytes over an 11 GB store), against max(the fused group at
  # residency 1, missing bytes / copy rate): the four fused kernels (each
  # reads its 656-byte host rows itself; the step compiled without
  # --overlap-retrieval), the staged form (one fetch of whole tokens beside
  # the four staged attentions, forced: --form-share 1) and the step with
  # both forms as it chooses (the fused attentions up to 8% missing). The
  # four layers run back to back with their queries known, as in a verify
  # group; in a decode each layer's queries come from the previous layer's
  # output, so only the first would run beside the fetch.
  local group_resident; group_resident=$(run_step group_fp8_b128_q1_h64 1)
  if [ -n "$group_resident" ]; then
    printf '\n%-14s %9s %10s %10s %9s %11s %11s %11s %8s\n' "group missing" "fused ms" \
      "staged ms" "chosen ms" floor/ms "fused/floor" "staged/fl." "chosen/fl." "chose"
    for missing in 0.01 0.05 0.10 0.14 0.30; do
      local resident_fraction; resident_fraction=$(python3 -c "print(1-$missing)")
      local fused; fused=$(run_step group_fp8_b128_q1_h64 "$resident_fraction")
      local staged; staged=$(run_step group_overlap_fp8_b128_q1_h64 "$resident_fraction" "" 1)
      local chosen; chosen=$(run_step group_overlap_fp8_b128_q1_h64 "$resident_fraction")
      # The form the step chose (dhs-run's form share: 0.02 the fused
      # attentions' resident kernels, 0.08 the fused attentions, 1 staged).
      local form; form=$(python3 -c "import json,sys
share=json.load(open(sys.argv[1]))['mixes'][0].get('form_share', -1)
print({0.02: 'resident', 0.08: 'fused', 1.0: 'staged'}.get(round(share, 2), share))" \
        "$results/group_overlap_fp8_b128_q1_h64-$resident_fraction.json" 2>/dev/null)
      python3 -c "import sys; x,res,copy=map(float,sys.argv[1:4])
floor=max(res, x*128*2048*2624/copy/1e6)
def cells(v, width):
    return (f'{float(v):{width}.4f}', f'{float(v)/floor:.2f}') if v else (f'{\"FAILED\":>{width}}', '-')
(fused,fr),(stg,sr),(cho,cr)=cells(sys.argv[4], 9),cells(sys.argv[5], 10),cells(sys.argv[6], 10)
print(f'{x:14.0%} {fused} {stg} {cho} {floor:9.4f} {fr:>11} {sr:>11} {cr:>11} {sys.argv[7]:>8}')" \
        "$missing" "$group_resident" "$copy" "$fused" "$staged" "$chosen" "${form:--}"
    done
  else
    echo "group: FAILED at residency 1"
  fi
}

section_retrieval() {
  # Retrieval of missing rows in the store's layout (2624-byte group tokens)
  # from a 22 GB pinned store: the fetch kernel against the copy rate.
  if [ -x "$dir/bin/dhs-retrieval-bench" ] && [ -d "$dir/attention/fetch_fp8_group" ]; then
    echo
    "$dir/bin/dhs-retrieval-bench" "$dir/attention/fetch_fp8_group" 2>&1 ||
      echo "FAILED: dhs-retrieval-bench"
  else
    echo "retrieval: skipped (no $dir/bin/dhs-retrieval-bench or $dir/attention/fetch_fp8_group)"
  fi
}

section_executor() {
  # Executor steps: the runtime over the generated kernels, residency decided
  # on the device (the step log booked, victims, promotions and the appends'
  # aging by kernels): the issue's large step (B=16 x 4 positions, 8 FP8
  # layers in 2 groups) and B=128 x 20 layer groups, each step's phases and
  # the host's time against the device's (tools/gpu-check.sh runs these and
  # the host-decided forms with their whole logs).
  if [ -x "$dir/bin/dhs-decision-bench" ] && [ -d "$dir/decisions/aging_b128_g1" ]; then
    local shape
    for shape in large b128; do
      echo
      local log=$results/executor-$shape.log args
      if [ $shape = large ]; then
        args=(--aging-step "$dir/decisions/aging_large_g4" "$dir/compiled-steps/place_rows"
              "$dir/decisions/large_g4" "$dir"/group-steps/large_g4_resolved/layer{0,1,2,3})
      else
        args=(--groups 20 --history 2304 --steps 10 --aging-step "$dir/decisions/aging_b128_g1"
              "$dir/decisions/place_rows_g1" "$dir/decisions/b128_g1"
              "$dir/group-steps/b128_g1_resolved/layer0")
      fi
      "$dir/bin/dhs-decision-bench" "${args[@]}" > "$log" 2>&1 ||
        echo "FAILED: dhs-decision-bench ($shape)"
      grep -E "^ *(B=|medians|logged|decided|outputs differing)" "$log"
    done
    # A decode's steady state (16 requests x top-2048, 20 one-layer groups
    # whose pools hold the working set): each step draws a share of its
    # selections afresh, misses about that share and promotes it; the
    # promotions (place_rows) read from the host the rows the attention has
    # just read from there. With ncu, the profiled decided step's kernels
    # by name: the attention's time against the placement's.
    # With the write-back ring (`wb`): the same steps compiled with
    # write_back, the decided runtime's rings 8192 tokens a pool; place_rows
    # copies the rows from HBM. `staged` and `wb_staged` (at 14% only): 8
    # heads a CTA, so a fetch stages the missing rows for a query's two
    # CTAs and, writing back, writes the ring.
    if [ -d "$dir/decisions/b16_g1" ]; then
      local form drift ring
      for form in host:0.05 host:0.14 wb:0.05 wb:0.14 staged:0.14 wb_staged:0.14; do
      ring=${form%%:*} drift=${form#*:}
      local steps
      case $ring in
        host) steps=resolved ;;
        wb) steps=write_back ;;
        staged) steps=resolved_staged ;;
        wb_staged) steps=write_back_staged ;;
      esac
      [ -d "$dir/group-steps/b16_g1_$steps" ] || continue
        echo
        local log=$results/executor-steady-$ring-$drift.log
        local args=(--groups 20 --history 16384 --drift $drift "$dir/decisions/place_rows_g1"
                    "$dir/decisions/b16_g1" "$dir/group-steps/b16_g1_$steps/layer0")
        [ "${ring#wb}" != "$ring" ] &&
          args=(--groups 20 --history 16384 --drift $drift --write-back-rows 8192
                "$dir/decisions/place_rows_g1" "$dir/decisions/b16_g1_write_back"
                "$dir/group-steps/b16_g1_$steps/layer0")
        "$dir/bin/dhs-decision-bench" --steps 20 "${args[@]}" > "$log" 2>&1 ||
          echo "FAILED: dhs-decision-bench (steady, $ring, drift $drift)"
        grep -E "^ *(B=|last step|medians|logged \(|decided \(|outputs differing)" "$log"
        if command -v ncu > /dev/null; then
          ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --print-units base \
            "$dir/bin/dhs-decision-bench" --steps 5 --profile "${args[@]}" \
            > "$results/executor-steady-$ring-$drift-ncu.csv" \
            2> "$results/executor-steady-$ring-$drift-ncu.err" ||
            echo "FAILED: ncu over dhs-decision-bench (steady, $ring, drift $drift)"
          python3 - "$results/executor-steady-$ring-$drift-ncu.csv" <<'PY'
import csv, re, sys
rows = list(csv.reader(open(sys.argv[1], errors='replace')))
head = next((i for i, r in enumerate(rows) if 'Kernel Name' in r and 'Metric Value' in r), None)
if head is None:
    sys.exit('ncu: no kernel rows')
h = rows[head]
name, unit, value = h.index('Kernel Name'), h.index('Metric Unit'), h.index('Metric Value')
scale = {'nsecond': 1e-6, 'usecond': 1e-3, 'msecond': 1.0, 'second': 1e3,
         'ns': 1e-6, 'us': 1e-3, 'ms': 1.0, 's': 1e3}
total, count = {}, {}
for r in rows[head + 1:]:
    if len(r) <= value or not r[value]:
        continue
    kernel = re.sub(r'[(<].*', '', r[name])
    ms = float(r[value].replace(',', '')) * scale.get(r[unit], float('nan'))
    total[kernel] = total.get(kernel, 0.0) + ms
    count[kernel] = count.get(kernel, 0) + 1
print('  the profiled decided step (ncu, gpu__time_duration): kernel, launches, ms')
for kernel in sorted(total, key=total.get, reverse=True):
    print(f'    {kernel:32} {count[kernel]:5d} {total[kernel]:9.3f}')
print(f'    {"all":32} {sum(count.values()):5d} {sum(total.values()):9.3f}')
PY
        fi
      done
    fi
  else
    echo "executor: skipped (no $dir/bin/dhs-decision-bench or $dir/decisions)"
  fi
}

# The whole table is made of these, in this order. It takes longer than one
# 600-second device call (2026-12-05: killed at 580 s inside `verify`), so a
# call runs some of them: `run DIR shapes mixed group`, then
# `run DIR verify retrieval executor`.
sections=(shapes costs mixed group verify retrieval executor)

run() { # SECTION...
  results=${DHS_RESULTS:-$dir/results}/attention
  mkdir -p "$results"
  # The table reads only what run_step just wrote, but the logs' archive
  # takes the folder: an earlier call's logs (a warm machine) out of it.
  rm -f "$results"/*.json "$results"/*.log
  # run_step's failures go to the table (fd 3), not into the values.
  exec 3>&1
  measure_floors
  [ -n "${copy:-}" ] || { echo "FAILED: the floors (torch) could not be measured"; return 1; }
  local section
  for section in "$@"; do
    "section_$section"
    # The logs so far (a call killed later still returns them).
    [ -z "${OUT:-}" ] || tar czf "$OUT/attention-logs.tar.gz" -C "$results/.." attention
  done
}

# A CTA's costs: the FP8 64-head step (all rows resident, never split) at
# 8 and 32 tiles a CTA, one CTA alone and 128 together; per tile = the
# difference over 24 tiles, fixed = the rest (launch to the first tile's
# scores, the tail). bench/NOTES.md (thirty-ninth session): 2.8 us a tile,
# the CTA's own; ~12 us fixed alone, ~20 us at 128 CTAs.
section_costs() {
  printf '\n%-10s %12s %12s %14s %10s %14s\n' costs "8 tiles ms" "32 tiles ms" "per tile us" \
    "fixed us" "fixed of 32"
  local b
  for b in 1 128; do
    local short long
    short=$(run_step costs_fp8_b${b}_k512 1)
    long=$(run_step costs_fp8_b${b}_k2048 1)
    [ -n "$short" ] && [ -n "$long" ] || continue
    python3 -c "import sys; b,s,l=sys.argv[1],float(sys.argv[2]),float(sys.argv[3])
tile=(l-s)/24*1e3; fixed=s*1e3-8*tile
print(f'{b+\" CTAs\" if b!=\"1\" else \"1 CTA\":10} {s:12.4f} {l:12.4f} {tile:14.2f} {fixed:10.1f} {fixed/(l*1e3):14.0%}')" \
      "$b" "$short" "$long"
  done
}

# Verify steps: positions sharing the rows they all selected (a cluster per
# request) against each position's CTA gathering its own, both --share-tiles
# forms checked against the fp64 CPU reference first (8 requests, every
# residency, the same bits at each).
section_verify() {
  printf '\n%-22s %8s %10s %10s %10s %9s\n' verify overlap "per-pos ms" "always ms" \
    "shared ms" "vs per-pos"
  for format in ${DHS_VERIFY_FORMATS:-fp8 bf16}; do
    for overlap in ${DHS_VERIFY_OVERLAPS:-0.85 1 0}; do
      local form checked=1
      for form in verify verify_always; do
        timeout -k 10 "${DHS_STEP_TIMEOUT:-120}" \
          "$dir/bin/dhs-run" "$dir/attention/${form}_${format}_b8_q5_h64" --backend cuda \
          --resident 0,0.5,1 --overlap $overlap --history-rows 32768 --repeat 1 \
          > "$results/${form}_${format}_check-$overlap.log" 2>&1 ||
          { echo "FAILED: ${form}_${format}_b8_q5_h64 vs fp64 at overlap $overlap"; checked=0; }
      done
      [ $checked = 1 ] || continue
      local per always shared
      per=$(run_step ${format}_b64_q5_h64 1 $overlap)
      always=$(run_step verify_always_${format}_b64_q5_h64 1 $overlap)
      shared=$(run_step verify_${format}_b64_q5_h64 1 $overlap)
      [ -n "$per" ] && [ -n "$always" ] && [ -n "$shared" ] || continue
      python3 -c "import sys; per,al,sh,o=map(float,sys.argv[1:5])
print(f'{sys.argv[5]:22} {o:8.2f} {per:10.4f} {al:10.4f} {sh:10.4f} {per/sh:8.2f}x')" \
        "$per" "$always" "$shared" "$overlap" "${format}_b64_q5_h64"
    done
  done
  # The same verify steps with rows missing from HBM (FP8, overlap 0.85):
  # the shared step reads a row all positions selected from the host once,
  # the per-position step once for each position that selected it (where L2
  # does not keep it between them). The prefix is ~1024 rows a request: 32
  # on the host is ~3%.
  printf '\n%-22s %8s %10s %10s %10s %9s\n' "verify, rows missing" missing "per-pos ms" \
    "always ms" "shared ms" "vs per-pos"
  for missing in ${DHS_VERIFY_MISSING:-0.01 0.02 0.05 0.14 0.30}; do
    local resident; resident=$(python3 -c "print(1-$missing)")
    local per always shared
    per=$(run_step fp8_b64_q5_h64 "$resident" 0.85)
    always=$(run_step verify_always_fp8_b64_q5_h64 "$resident" 0.85)
    shared=$(run_step verify_fp8_b64_q5_h64 "$resident" 0.85)
    [ -n "$per" ] && [ -n "$always" ] && [ -n "$shared" ] || continue
    python3 -c "import sys; per,al,sh,x=map(float,sys.argv[1:5])
print(f'{\"fp8_b64_q5_h64\":22} {x:8.0%} {per:10.4f} {al:10.4f} {sh:10.4f} {per/sh:8.2f}x')" \
      "$per" "$always" "$shared" "$missing"
  done
}

# A kernel variant's steps (the `variant` mode): the shapes of `steps`
# compiled by this checkout's dhs-compile with a patch applied.
variant() { # FOLDER PATCH
  local folder=$1 patch build=${DHS_BUILD_DIR:-$root/build}
  patch=$(realpath "$2") || exit 1
  [ -z "$(git -C "$root" status --porcelain --untracked-files=no)" ] ||
    { echo "bench/attention.sh variant: commit or stash the tracked changes first" >&2; exit 1; }
  git -C "$root" apply --check "$patch" || exit 1
  git -C "$root" apply "$patch"
  # The patch comes back out however this ends (the trap runs after the
  # function's locals are gone: expanded now).
  # shellcheck disable=SC2064
  trap "git -C '$root' apply -R '$patch' && ninja -C '$build' bin/dhs-compile > /dev/null" EXIT
  ninja -C "$build" bin/dhs-compile > /dev/null || exit 1
  compile_shapes "$folder"
  echo "bench/attention.sh variant: $(basename "$patch") in $dir/$folder"
}

# Kernel variants timed alternately (the `compare` mode).
compare() { # VARIANT...
  local results=${DHS_RESULTS:-$dir/results}/compare
  mkdir -p "$results"
  local default_steps="fp8_b128_q1_h64 1
fp8_b128_q1_h64 0.99
fp8_b128_q1_h64 0.95
fp8_b128_q1_h64 0.86"
  printf '%-8s %-30s %9s %5s' round step resident form
  printf ' %12s' "$@"
  echo
  local round name resident form variant ms line history_rows=${DHS_COMPARE_HISTORY_ROWS:-32768}
  local -a order reversed=()
  # Every time, by "line variant" (line: the step's line in the list), for
  # the summary; FAILED where a run failed.
  local -A all=()
  for variant in "$@"; do reversed=("$variant" "${reversed[@]}"); done
  for round in 1 2; do
    # The second round runs the variants in reverse order (the columns
    # keep the given order), so that no variant always runs first.
    order=("$@")
    [ "$round" = 2 ] && order=("${reversed[@]}")
    line=0
    while read -r name resident form; do
      line=$((line + 1))
      for variant in "${order[@]}"; do
        ms=$(run_step "$name" "$resident" "" "$form")
        all["$line $variant"]+=" ${ms:-FAILED}"
      done
      printf '%-8s %-30s %9s %5s' "$round" "$name" "$resident" "${form:--}"
      for variant in "$@"; do
        ms=${all["$line $variant"]##* }
        [ "$ms" = FAILED ] || ms=$(printf '%.4f' "$ms")
        printf ' %12s' "$ms"
      done
      echo
    done <<<"${DHS_COMPARE_STEPS:-$default_steps}"
  done
  # Each variant's mean of the two rounds and its ratio to the first
  # variant's (below 1: faster).
  printf '%-8s %-30s %9s %5s' mean step resident form
  printf ' %18s' "$@"
  echo
  line=0
  while read -r name resident form; do
    line=$((line + 1))
    printf '%-8s %-30s %9s %5s' mean "$name" "$resident" "${form:--}"
    local -a groups=()
    for variant in "$@"; do groups+=("${all["$line $variant"]# }"); done
    python3 - "${groups[@]}" <<'PY'
import sys
means = [None if "FAILED" in g.split() else sum(map(float, g.split())) / len(g.split())
         for g in sys.argv[1:]]
for i, mean in enumerate(means):
    if mean is None:
        cell = "FAILED"
    elif i == 0 or means[0] is None:
        cell = "%.4f" % mean
    else:
        cell = "%.4f (%.3fx)" % (mean, mean / means[0])
    print(" %18s" % cell, end="")
print()
PY
  done <<<"${DHS_COMPARE_STEPS:-$default_steps}"
}

case "$mode" in
  steps) steps ;;
  variant)
    [ $# -eq 4 ] || { echo "usage: bench/attention.sh variant DIR FOLDER PATCH" >&2; exit 2; }
    variant "$3" "$4"
    ;;
  run)
    shift; [ $# -gt 0 ] && shift
    chosen=("$@")
    [ ${#chosen[@]} -gt 0 ] || chosen=("${sections[@]}")
    for section in "${chosen[@]}"; do
      [[ " ${sections[*]} " == *" $section "* ]] ||
        { echo "bench/attention.sh: no section '$section' (${sections[*]})" >&2; exit 2; }
    done
    # The table as it grows (where $OUT is set, also there: a killed run
    # still returns what it measured).
    partial=${OUT:-${DHS_RESULTS:-$dir/results}}/attention-partial.txt
    mkdir -p "$(dirname "$partial")"
    run "${chosen[@]}" | tee "$partial"
    out=$(cat "$partial")
    rm -f "$partial"
    name="$(date +%F)-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' _)"
    # The bundle's commit (tools/gpu-check.sh bundle), else this checkout's.
    commit=$(cat "$dir/COMMIT" 2>/dev/null || git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
    name="$name-$commit"
    # A part of the table is named by its sections.
    [ "${chosen[*]}" = "${sections[*]}" ] || name="$name-$(IFS=_; echo "${chosen[*]}")"
    mkdir -p "$root/bench/results" && echo "$out" > "$root/bench/results/attention-$name.txt"
    # The device tool returns few files: the table and one archive of the logs.
    if [ -n "${OUT:-}" ]; then
      cp "$root/bench/results/attention-$name.txt" "$OUT/"
    fi
    ;;
  compare)
    shift 2
    [ $# -ge 1 ] || { echo "usage: bench/attention.sh compare DIR VARIANT..." >&2; exit 2; }
    compare "$@"
    ;;
  *) echo "usage: bench/attention.sh steps|variant|run|compare DIR [...]" >&2; exit 2 ;;
esac
