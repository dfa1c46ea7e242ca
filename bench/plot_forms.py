#!/usr/bin/env python3
"""Plots a layer group's two forms (the fused attentions, each reading its
own host rows; the staged form, one fetch of whole tokens and staged
attentions) against the share of the group's selected rows missing from
HBM, per machine, as step time over the floor (max(resident step, missing
bytes / 55 GB/s)), with the line the compiler puts between them
(kStagedGroupMissing). Not part of CI.

usage: plot_forms.py forms_crossover.csv forms_crossover.png [line]
(CSV columns: machine, missing, fused_ms, staged_ms, floor_ms, source)
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(path, out, line):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    machines = sorted({r["machine"] for r in rows}, reverse=True)
    fig, axes = plt.subplots(1, len(machines), figsize=(5.5 * len(machines), 4.2),
                             sharey=True, squeeze=False)
    for ax, machine in zip(axes[0], machines):
        mine = sorted((r for r in rows if r["machine"] == machine),
                      key=lambda r: float(r["missing"]))
        missing = [100 * float(r["missing"]) for r in mine]
        for key, label, color in (("fused_ms", "fused attentions", "tab:green"),
                                  ("staged_ms", "staged (one fetch of whole tokens)",
                                   "tab:olive")):
            ax.plot(missing, [float(r[key]) / float(r["floor_ms"]) for r in mine],
                    marker="o", label=label, color=color)
        ax.axvline(100 * line, color="tab:red", linestyle="--",
                   label=f"line: staged above {100 * line:g}%")
        ax.axhline(1.10, color="black", linestyle=":", label="target (1.10x)")
        ax.set_title(f"{machine}: FP8 group of 4, 128 requests x 64 heads")
        ax.set_xlabel("selected rows missing from HBM (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("step time / floor")
    fig.suptitle("a layer group's forms (bench/NOTES.md, twenty-ninth, thirty-second and thirty-third sessions)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 0.08)
