#!/usr/bin/env python3
"""Plots dhs-sim's load-step CSV: host fetches (% of selected rows, a 10-step
moving average) and HBM use over time for the adaptive and the fixed-budget
policies, with the number of admitted requests. Not part of CI.

usage: plot_load_step.py load_step.csv load_step.png [groups]
(groups: the layer groups simulated, 1 by default; the CSV's optional budget
is per group)
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def moving_average(values, n=10):
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= n:
            acc -= values[i - n]
        out.append(acc / min(i + 1, n))
    return out


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    groups = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    step = [int(r["step"]) for r in rows]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    colors = {"adaptive": "tab:blue", "fixed": "tab:red"}
    for policy in ("adaptive", "fixed"):
        # Fetch % over each 10-step window: fetched / selected summed.
        sel = [int(r[f"{policy}_selected"]) for r in rows]
        fet = [int(r[f"{policy}_fetched"]) for r in rows]
        pct = [100.0 * f / s if s else 0.0 for f, s in
               zip(moving_average(fet), moving_average(sel))]
        ax1.plot(step, pct, color=colors[policy], label=f"{policy}")
        ax2.plot(step, [float(r[f"{policy}_hbm_gib"]) for r in rows],
                 color=colors[policy], label=f"{policy}: HBM used")
    ax1.set_ylabel("rows fetched from host\n(% of selected, 10-step mean)")
    ax1.set_ylim(0, 40)
    ax1.grid(alpha=0.3)
    ax1.legend(loc="upper right")
    reqs = ax1.twinx()
    reqs.plot(step, [int(r["adaptive_admitted"]) for r in rows], color="gray",
              linestyle=":", label="admitted requests")
    reqs.set_ylabel("admitted requests", color="gray")
    reqs.set_ylim(0, 40)
    reqs.legend(loc="upper left")
    # The adaptive optional budget (slots per group, every group) in the same
    # bytes per slot.
    per_slot = [float(r["adaptive_hbm_gib"]) / int(r["adaptive_hbm_slots_used"])
                for r in rows if int(r["adaptive_hbm_slots_used"])][0]
    ax2.plot(step, [int(r["adaptive_optional_budget"]) * groups * per_slot for r in rows],
             color=colors["adaptive"], linestyle="--", label="adaptive: optional budget")
    ax2.set_ylabel("HBM (GiB, 78 layers)")
    ax2.set_xlabel("decode step")
    ax2.grid(alpha=0.3)
    ax2.legend(loc="upper right")
    fig.suptitle("dhs-sim load step: DRR selections, K=2048, one pool of 133376 slots per group")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
