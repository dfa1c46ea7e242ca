#!/usr/bin/env python3
"""Plots a verify step's time against the fraction of its rows missing from
HBM for the three forms bench/attention.sh's verify section times: each
position alone, always shared, and shared where the step's requests have
enough prefix rows on the host (--share-tiles), with the shared forms'
speedup over per-position. Not part of CI.

usage: plot_verify.py verify.csv verify.png
(CSV columns: missing, per_position_ms, always_shared_ms, per_step_ms)
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(path, out):
    with open(path) as f:
        rows = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]
    missing = [100 * r["missing"] for r in rows]
    forms = [("per_position_ms", "each position alone", "tab:blue"),
             ("always_shared_ms", "always shared (--share-min-missing=0)", "tab:orange"),
             ("per_step_ms", "chosen per step (--share-tiles)", "tab:green")]
    fig, (times, speedup) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, label, color in forms:
        times.plot(missing, [r[key] for r in rows], marker="o", label=label, color=color)
    times.set_xlabel("rows missing from HBM (%)")
    times.set_ylabel("step time (ms)")
    times.set_title("FP8 verify step, 64 requests x 5 positions x 64 heads")
    times.legend()
    for key, label, color in forms[1:]:
        speedup.plot(missing, [r["per_position_ms"] / r[key] for r in rows], marker="o",
                     label=label, color=color)
    speedup.axhline(1.0, color="gray", linewidth=0.8)
    speedup.set_xlabel("rows missing from HBM (%)")
    speedup.set_ylabel("speedup over each position alone")
    speedup.set_title("positions share the rows all selected (overlap 0.85)")
    speedup.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
