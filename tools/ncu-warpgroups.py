#!/usr/bin/env python3
"""Where a warp-specialized kernel's warps wait, by warpgroup role.

Reads the per-instruction CSV of one kernel that Nsight Compute writes with
its source page, e.g. (on the GPU machine):

  ncu --kernel-name regex:sparse_attention_resident --launch-skip 2 \\
      --launch-count 1 --section SourceCounters --section WarpStateStats \\
      --page source --csv --print-source sass dhs-run STEP ... > source.csv

and splits the kernel's SASS into the parts that follow each `USETMAXREG`
(the tensor-core kernels' warpgroups set their registers first: producer
144, softmax 200, second value half 160), then prints per part its share of
the warp-stall samples, its largest stall reasons, and its instructions
executed per warp and per unit of work (--per: CTAs x tiles x warps, e.g.
128 x 32 x 4 for B=128 x 64 heads x top-2048, one CTA a query), with the
opcode mix; and the most sampled instructions.

  tools/ncu-warpgroups.py source.csv [--per 16384] [--top 20]
"""

import argparse
import collections
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", help="ncu --page source --csv output")
    parser.add_argument("--per", type=float, default=0.0,
                        help="divide instruction counts by this (warps x units of work)")
    parser.add_argument("--top", type=int, default=20, help="most sampled instructions shown")
    args = parser.parse_args()

    with open(args.csv) as f:
        lines = [line for line in f if line.startswith('"')]
    header, rows = None, []
    for row in csv.reader(lines):
        if row and row[0] == "Address":
            header = row
        elif header and len(row) == len(header):
            rows.append(dict(zip(header, row)))
    if not rows:
        sys.exit(f"{args.csv}: no per-instruction rows (was it written with --page source --csv?)")
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    samples_column = "Warp Stall Sampling (All Samples)"

    part = "before any USETMAXREG"
    samples = collections.defaultdict(float)
    reasons = collections.defaultdict(collections.Counter)
    opcodes = collections.defaultdict(collections.Counter)
    for row in rows:
        source = row["Source"].strip()
        if "USETMAXREG" in source:
            part = source.split(";")[0]
        words = source.split()
        opcode = words[1] if words and words[0].startswith("@") and len(words) > 1 else words[0]
        samples[part] += number(row[samples_column])
        opcodes[part][opcode.split(".")[0]] += number(row["Instructions Executed"])
        for stall in stalls:
            reasons[part][stall[len("stall_"):]] += number(row[stall])

    total = sum(samples.values()) or 1.0
    for name in samples:
        executed = sum(opcodes[name].values())
        per = f", {executed / args.per:.0f} per unit" if args.per else ""
        print(f"{name}: {samples[name] / total:.1%} of {total:.0f} samples, "
              f"{executed:.0f} instructions executed{per}")
        if samples[name]:
            top = reasons[name].most_common(6)
            print("  stalls: " + ", ".join(f"{r} {v / samples[name]:.0%}" for r, v in top))
        scale = args.per or 1.0
        print("  opcodes: " + " ".join(f"{k}:{v / scale:.0f}"
                                       for k, v in opcodes[name].most_common(16)))
    print(f"most sampled instructions (of {len(rows)}):")
    for row in sorted(rows, key=lambda r: -number(r[samples_column]))[:args.top]:
        top = max(stalls, key=lambda s: number(row[s]))
        print(f"  {row['Address']} {number(row[samples_column]):7.0f}  "
              f"{row['Source'].strip()[:64]:64s} {top[len('stall_'):]}")


if __name__ == "__main__":
    main()
