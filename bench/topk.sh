#!/usr/bin/env bash
# The top-k benchmark, on a GPU machine: the generated kernel
# (bench/topk_glm5.mlir compiled to $1, default build/bench/topk_glm5)
# against torch.topk on the same shape and the memory floor (score bytes
# read once over the copy bandwidth measured in the same run).
#   bench/topk.sh [compiled step dir] [dhs-topk-bench binary]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
step=${1:-$root/build/bench/topk_glm5}
bin=${2:-$root/build/bin/dhs-topk-bench}
ours=$("$bin" "$step")
echo "$ours"
read -r B Q N K < <(echo "$ours" | sed -E 's/.*B=([0-9]+) Q=([0-9]+) N=([0-9]+) K=([0-9]+).*/\1 \2 \3 \4/')
theirs=$(python3 "$root/bench/topk_baseline.py" "$B" "$Q" "$N" "$K")
echo "$theirs"
python3 - "$ours" "$theirs" "$B" "$Q" "$N" <<'PY'
import re, sys
ours, theirs, B, Q, N = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
dhs = float(re.search(r"median_ms=([0-9.]+)", ours).group(1))
torch_ms = float(re.search(r"median_ms=([0-9.]+)", theirs).group(1))
bw = float(re.search(r"copy_GBps=([0-9.]+)", theirs).group(1))
floor = B * Q * N * 4 / (bw * 1e6)
print(f"dhs {dhs:.4f} ms | torch.topk {torch_ms:.4f} ms | floor {floor:.4f} ms "
      f"({bw:.0f} GB/s) | dhs/torch {dhs / torch_ms:.2f}x | dhs/floor {dhs / floor:.1f}x")
PY
