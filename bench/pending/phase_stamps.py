#!/usr/bin/env python3
"""Summarizes the `dhs-stamp` lines the phase-stamps patch's kernels print.

usage: phase_stamps.py LOG [TILES]

The patch (bench/pending/phase-stamps.patch, a measurement, not for main:
`git apply` it on a scratch branch and build dhs-compile) makes each
tensor-core attention warpgroup read %clock64 around its phases and thread 0
of each print one line through vprintf as the kernel ends. Compile a step
with that dhs-compile, run it (dhs-run STEP --backend cuda --no-host-check
--resident 1 > LOG) and summarize LOG with the tiles each CTA walks. The
printing itself makes the launch ~1 ms; the clock reads add ~10% to the
phases they bracket (bench/NOTES.md, fortieth session).

Each line: role (0 softmax, 1 second half, 2 producer), CTA x y z, entry and
end %globaltimer (ns), then cycles since entry: setup, loop start, first
tile (full / published), loop end, end, then sums of cycles per phase.
Only the last launch's lines count (a CTA's last line per role).
"""
import statistics
import sys

ROLES = {0: "softmax", 1: "second", 2: "producer"}
SUMS = {0: ["wait full", "Q K^T", "softmax+P", "P V+release"],
        1: ["wait full", "wait P", "P V+release", "-"],
        2: ["wait empty", "-", "-", "-"]}


def main():
    lines = [l.split() for l in open(sys.argv[1]) if l.startswith("dhs-stamp")]
    tiles = int(sys.argv[2]) if len(sys.argv) > 2 else None
    last = {}
    for f in lines:
        v = list(map(int, f[1:]))
        last[(v[0], v[1], v[2], v[3])] = v
    if not last:
        print("no dhs-stamp lines")
        return
    entries = [v[4] for v in last.values()]
    t0 = min(entries)
    # The SM clock: cycles from entry to end over the ns between them.
    rates = [v[10] / (v[5] - v[4]) for v in last.values() if v[5] > v[4]]
    ghz = statistics.median(rates)
    print(f"CTAs {len(last) // 3}, SM clock ~{ghz:.3f} GHz (cycles/ns)")
    print(f"entry spread {(max(entries) - t0) / 1e3:.2f} us, "
          f"last end {(max(v[5] for v in last.values()) - t0) / 1e3:.2f} us after the first entry")
    us = lambda c: c / ghz / 1e3
    for role in (2, 0, 1):
        vs = [v for k, v in last.items() if k[0] == role]
        if not vs:
            continue
        print(f"\n{ROLES[role]} ({len(vs)} CTAs): median [min, max], us since the CTA's entry")
        for i, name in enumerate(["setup", "loop start", "first tile", "loop end", "end"]):
            xs = [us(v[6 + i]) for v in vs]
            print(f"  {name:12s} {statistics.median(xs):8.2f} [{min(xs):.2f}, {max(xs):.2f}]")
        for i, name in enumerate(SUMS[role]):
            if name == "-":
                continue
            xs = [us(v[11 + i]) for v in vs]
            per = f", {statistics.median(xs) / tiles:.3f} a tile" if tiles else ""
            print(f"  sum {name:12s} {statistics.median(xs):8.2f} [{min(xs):.2f}, {max(xs):.2f}]{per}")
        ents = [(v[4] - t0) / 1e3 for v in vs]
        ends = [(v[5] - t0) / 1e3 for v in vs]
        print(f"  entry after first entry {statistics.median(ents):.2f} [{min(ents):.2f}, {max(ents):.2f}]"
              f"; end {statistics.median(ends):.2f} [{min(ends):.2f}, {max(ends):.2f}]")


if __name__ == "__main__":
    main()
