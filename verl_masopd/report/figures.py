"""PNG figures (matplotlib, Agg): training curves per domain and the main table as a bar chart.

A method keeps one colour in every panel and figure: its place in the report's method order picks
it from matplotlib's 20-colour qualitative map (`method_colours`).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from verl_masopd.report.tables import Table  # noqa: E402


def method_colours(methods: list[str]) -> dict[str, tuple]:
    """{method: RGBA}: the i-th method of the order gets colour i of tab20 (cycling past 20)."""
    palette = matplotlib.colormaps["tab20"]
    return {method: palette(i % palette.N) for i, method in enumerate(methods)}


def curves_figure(
    curves: dict[str, dict[str, dict[str, list]]], tag: str, path: Path, colours: dict[str, tuple]
) -> None:
    """One panel per domain: the mean of `tag` over seeds per method, a band of ± one std."""
    domains = sorted(curves)
    fig, axes = plt.subplots(1, len(domains), figsize=(6 * len(domains), 4), squeeze=False)
    for ax, domain in zip(axes[0], domains, strict=True):
        for method, curve in curves[domain].items():
            steps, mean = curve["steps"], curve["mean"]
            colour = colours[method]
            label = f"{method} (n={len(curve['seeds'])})"
            ax.plot(steps, mean, marker="o", markersize=3, color=colour, label=label)
            std = [s if s is not None else 0.0 for s in curve["std"]]
            low = [m - s for m, s in zip(mean, std, strict=True)]
            high = [m + s for m, s in zip(mean, std, strict=True)]
            ax.fill_between(steps, low, high, color=colour, alpha=0.2, linewidth=0)
        ax.set_title(domain)
        ax.set_xlabel("training step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(tag)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def bar_figure(table: Table, path: Path, colours: dict[str, tuple]) -> None:
    """Grouped bars: one group per column, one bar per method (mean accuracy in %), error bars ± std;
    a missing cell has no bar."""
    methods = list(table.rows)
    width = 0.8 / max(len(methods), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(table.columns) * max(1, len(methods) / 4)), 4))
    for i, method in enumerate(methods):
        xs, heights, errors = [], [], []
        for j, column in enumerate(table.columns):
            c = table.rows[method][column]
            if c is not None:
                xs.append(j - 0.4 + width * (i + 0.5))
                heights.append(100 * c.mean)
                errors.append(100 * c.std if c.std is not None else 0.0)
        ax.bar(xs, heights, width, yerr=errors, capsize=2, color=colours[method], label=method)
    ax.set_xticks(range(len(table.columns)), table.columns, rotation=20, ha="right")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(table.title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
