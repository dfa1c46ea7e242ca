#!/usr/bin/env bash
# The load-step experiment of dhs-sim (no GPU): 4 requests at low load, 28
# arrivals over steps 400-419, departures over steps 1000-1019, 1400 steps,
# DRR selections (K = 2048) in each of GLM-5's 20 layer groups (78 layers in
# groups of 4, each group its own selection stream and slot space), one HBM
# pool for both policies (133376 slots per layer group: the fixed policy's
# 32 x 4168 just fits), 656-byte FP8 rows. About 6 minutes on one core. Writes bench/load_step.txt (the printed
# table), bench/load_step.csv (every step) and, with matplotlib,
# bench/load_step.png.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sim=${DHS_SIM:-$root/build/bin/dhs-sim}
cmd=("$sim" --seed 1 --low 4 --high 32 --arrive-at 400 --depart-at 1000 --ramp 20
     --steps 1400 --context 32768 --groups 20 --csv "$root/bench/load_step.csv" --every 50 --check)
{ echo "\$ dhs-sim ${cmd[*]:1}" | sed "s|$root/||g"; "${cmd[@]}"; } | tee "$root/bench/load_step.txt"
python3 "$root/bench/plot_load_step.py" "$root/bench/load_step.csv" "$root/bench/load_step.png" 20
