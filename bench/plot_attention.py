#!/usr/bin/env python3
"""Plots one run of bench/attention.sh: the all-resident attention's rate per
shape against the dense bf16 matrix rate and FlashMLA's sparse FP8 decode,
and the mixed steps' time over the issue's floor, max(time at residency 1,
missing bytes / pinned copy rate), by the share of selected rows missing
from HBM. Reads the text the script prints (bench/results/attention-*.txt);
a section the run did not print is left out of the picture. Not part of CI.

usage: plot_attention.py attention.txt attention.png
"""
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# FlashMLA's sparse FP8 decode on the H200, same shapes (issue 10's table).
FLASH_MLA_TFLOPS = {64: 314.0, 128: 380.0}
# What SM loads read from pinned host memory at most against the copy engines
# (51.4 of 55.5 GB/s, bench/NOTES.md, twenty-third session): a step bound by
# its missing rows cannot come closer to the floor than this.
SM_LOAD_LIMIT = 55.5 / 51.4
TARGET = 1.10


def parse(path):
    """The run's sections as lists of row tuples, keyed by section."""
    shapes, layer, group = [], [], []
    matrix_rate = None
    section = None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            found = re.match(r"dense bf16 matmul: ([\d.]+) TFLOP/s", line)
            if found:
                matrix_rate = float(found.group(1))
                continue
            if line.startswith("shape "):
                section = "shapes"
                continue
            if line.startswith("missing "):
                section = "layer"
                continue
            if line.startswith("group missing"):
                section = "group"
                continue
            if not line.strip():
                section = None
                continue
            cells = line.split()
            if section == "shapes" and len(cells) >= 3:
                shapes.append((cells[0], float(cells[2])))
            elif section == "layer" and len(cells) >= 4:
                overlapped = float(cells[-1]) if cells[-1] != "-" else None
                floor = float(cells[2])
                layer.append((float(cells[0].rstrip("%")), float(cells[1]) / floor,
                              overlapped / floor if overlapped else None))
            elif section == "group" and len(cells) >= 8:
                def ratio(cell):
                    return None if cell == "-" else float(cell)
                group.append((float(cells[0].rstrip("%")), ratio(cells[5]), ratio(cells[6]),
                              ratio(cells[7])))
    return matrix_rate, shapes, layer, group


def heads_of(shape):
    found = re.search(r"_h(\d+)$", shape)
    return int(found.group(1)) if found else None


def plot_shapes(axes, matrix_rate, shapes):
    names = [name for name, _ in shapes]
    rates = [rate for _, rate in shapes]
    colors = ["tab:blue" if name.startswith("fp8") else
              "tab:orange" if name.startswith("bf16") else "tab:gray" for name in names]
    axes.barh(range(len(names)), rates, color=colors)
    axes.set_yticks(range(len(names)), names, fontsize=8)
    axes.invert_yaxis()
    for index, (name, rate) in enumerate(shapes):
        axes.text(rate + 5, index, f"{rate:.0f}", va="center", fontsize=7)
        heads = heads_of(name)
        # FlashMLA's figures are for the full-GPU FP8 shapes of the issue.
        if name in ("fp8_b128_q1_h64", "fp8_b64_q2_h64", "fp8_b64_q1_h128"):
            axes.plot([FLASH_MLA_TFLOPS[heads]] * 2, [index - 0.4, index + 0.4], color="black",
                      linewidth=2)
    axes.plot([], [], color="black", linewidth=2, label="FlashMLA sparse FP8 decode")
    if matrix_rate:
        axes.axvline(matrix_rate, color="tab:red", linestyle="--",
                     label=f"dense bf16 matmul ({matrix_rate:.0f})")
    axes.set_xlabel("TFLOP/s (2 x heads x 2048 x 1088 a query)")
    axes.set_title("attention, every selected row resident (FP8 blue, BF16 orange)")
    axes.legend(fontsize=8, loc="lower right")


def plot_mixed(axes, layer, group):
    def line(rows, column, label, color, style="-"):
        points = [(row[0], row[column]) for row in rows if row[column] is not None]
        if points:
            axes.plot([x for x, _ in points], [y for _, y in points], style, marker="o",
                      color=color, label=label)

    line(layer, 1, "one layer, fused", "tab:blue")
    line(layer, 2, "one layer, overlapped staging", "tab:cyan", "--")
    line(group, 1, "group of 4, fused layers", "tab:green")
    line(group, 2, "group of 4, staged (one fetch of whole tokens)", "tab:olive", "--")
    line(group, 3, "group of 4, form chosen per step", "tab:red")
    axes.axhline(TARGET, color="black", linestyle=":", label=f"target ({TARGET:.2f}x)")
    axes.axhline(SM_LOAD_LIMIT, color="gray", linestyle="-.",
                 label=f"SM loads of host memory at most ({SM_LOAD_LIMIT:.2f}x)")
    axes.set_ylim(bottom=1.0)
    axes.set_xscale("log")
    axes.set_xticks([1, 5, 10, 14, 30], ["1", "5", "10", "14", "30"])
    axes.set_xlabel("selected rows missing from HBM (%)")
    axes.set_ylabel("step time / max(resident step, missing bytes / copy rate)")
    axes.set_title("mixed steps, FP8, 128 requests x 64 heads")
    axes.legend(fontsize=8)


def main(path, out):
    matrix_rate, shapes, layer, group = parse(path)
    if not shapes and not layer:
        sys.exit(f"plot_attention: no attention table in {path}")
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5))
    plot_shapes(left, matrix_rate, shapes)
    plot_mixed(right, layer, group)
    fig.suptitle(path.rsplit("/", 1)[-1], fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
