#!/usr/bin/env bash
# Rewrites generated PTX files in place into the form that compute-sanitizer
# racecheck checks (tools/gpu-soak.sh sanitize runs it on a copy of the
# steps): the same accesses in the same order, with synchronization that
# racecheck credits and that the PTX memory model already implies.
#
#   tools/racecheck-ptx.sh FILE.ptx...
#
# 1. Every named-barrier arrival `bar.arrive N, M;` becomes `bar.sync N, M;`
#    (same barrier and count). racecheck does not credit a non-blocking
#    arrival with ordering the arriving thread's earlier accesses before the
#    accesses that follow a `bar.sync` on the same barrier; the tensor-core
#    kernels hand P and the rescale factors between their consumer
#    warpgroups that way (RELIABILITY.md has the experiment).
# 2. Every line carrying a marker `// dhs.racecheck: TEXT` becomes TEXT (the
#    line's indentation kept). The cluster tensor-core kernel (a verify
#    step's positions sharing their prefix) releases a tile with one thread
#    of each consumer warpgroup arriving on every CTA's empty mbarriers after
#    a named barrier, and racecheck does not credit
#    ordering that reaches another thread's mbarrier arrival through a named
#    barrier, so it reports WAR hazards on the tile's row biases; with every
#    consumer thread arriving too (and the barriers' count raised to match)
#    it reports none (measured on the H200: 0 hazards, results vs fp64
#    unchanged). The generator emits those arrivals as comments
#    (`// dhs.racecheck: { ... mapa ...; mbarrier.arrive... }`) and the count
#    as `mov.b32 %r, 10; // dhs.racecheck: mov.b32 %r, 1290;`, so the kernel
#    the GPU runs is unchanged.
#
# Fails (exit 1, file left as it was) when a file has cluster mbarrier
# arrivals (`mbarrier.arrive... .shared::cluster`) but not both kinds of
# marker (arrivals and count), so that a generator change that drops them
# cannot make racecheck report the hazards again, or miss the count.
set -uo pipefail

[ $# -gt 0 ] || { echo "usage: tools/racecheck-ptx.sh FILE.ptx..." >&2; exit 2; }
status=0
for f in "$@"; do
  [ -f "$f" ] || { echo "racecheck-ptx: $f: no such file" >&2; status=1; continue; }
  # Real cluster arrivals (an instruction, not a marker's comment).
  if grep -qE '^[[:space:]]*mbarrier\.arrive[.a-z_:]*\.shared::cluster\.' "$f"; then
    arrivals=$(grep -cE '// dhs\.racecheck: .*mbarrier\.arrive' "$f")
    counts=$(grep -cE '^[[:space:]]*mov\.b32 [^;]*; // dhs\.racecheck: mov\.b32 ' "$f")
    if [ "$arrivals" -eq 0 ] || [ "$counts" -eq 0 ]; then
      echo "racecheck-ptx: $f has cluster mbarrier arrivals but $arrivals racecheck" \
           "arrival markers and $counts count markers (codegen/HopperBuilder.h," \
           "racecheckArriveCluster / racecheckConstant); racecheck would report" \
           "false WAR hazards or run with wrong counts" >&2
      status=1
      continue
    fi
  fi
  sed -i -E \
    -e 's/\bbar\.arrive ([0-9]+), ([0-9]+);/bar.sync \1, \2;/' \
    -e 's@^([[:space:]]*).*// dhs\.racecheck: (.*)$@\1\2@' "$f" || status=1
done
exit $status
