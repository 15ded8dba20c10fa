#!/usr/bin/env python3
"""Draws scripts/soak.sh's samples as one SVG: a panel per resource (resident memory, open
files, threads, data directory size) over the run's minutes, each from zero so that growth
shows at its true scale. Standard library only.

    scripts/soak-plot.py SAMPLES.csv OUT.svg [TITLE]
"""
import csv
import sys

PANELS = [
    ("rss_kib", "resident memory (MiB)", 1 / 1024),
    ("open_files", "open files", 1),
    ("threads", "threads", 1),
    ("data_dir_bytes", "data directory (MiB)", 1 / 1048576),
    ("cpu", "CPU (cores, over each 10 s)", 1),
]
WIDTH, PANEL_HEIGHT, LEFT, TOP, GAP = 720, 150, 70, 40, 40


def nice_ceiling(value):
    """The smallest 1, 2 or 5 times a power of ten at or above value."""
    step = 1
    while step * 10 <= value:
        step *= 10
    for m in (1, 2, 5, 10):
        if m * step >= value:
            return m * step
    return 10 * step


def main():
    samples, out = sys.argv[1], sys.argv[2]
    title = sys.argv[3] if len(sys.argv) > 3 else "Weir soak"
    rows = list(csv.DictReader(open(samples)))
    # The CPU panel: the server's CPU time between samples over the time between them.
    for previous, row in zip([None] + rows, rows):
        spent = int(row["cpu_seconds"]) - int(previous["cpu_seconds"]) if previous else 0
        elapsed = int(row["seconds"]) - int(previous["seconds"]) if previous else 1
        row["cpu"] = spent / elapsed if elapsed else 0
    minutes = [int(r["seconds"]) / 60 for r in rows]
    span = max(minutes[-1], 1e-9)
    plot_width = WIDTH - LEFT - 20
    height = TOP + len(PANELS) * (PANEL_HEIGHT + GAP)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        f'<text x="{LEFT}" y="20" font-size="14">{title}</text>',
    ]
    for i, (key, label, scale) in enumerate(PANELS):
        values = [float(r[key]) * scale for r in rows]
        top = TOP + i * (PANEL_HEIGHT + GAP)
        ceiling = nice_ceiling(max(values) * 1.1 or 1)
        x = lambda m: LEFT + m / span * plot_width
        y = lambda v: top + PANEL_HEIGHT - v / ceiling * PANEL_HEIGHT
        parts.append(f'<text x="{LEFT}" y="{top - 6}">{label}</text>')
        parts.append(f'<rect x="{LEFT}" y="{top}" width="{plot_width}" height="{PANEL_HEIGHT}" fill="none" stroke="#999"/>')
        for tick in (0, ceiling / 2, ceiling):
            parts.append(f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>')
        points = " ".join(f"{x(m):.1f},{y(v):.1f}" for m, v in zip(minutes, values))
        parts.append(f'<polyline points="{points}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>')
        for m in range(0, int(span) + 1, max(1, int(span) // 6 or 1)):
            parts.append(f'<text x="{x(m):.1f}" y="{top + PANEL_HEIGHT + 14}" text-anchor="middle">{m} min</text>')
    parts.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
