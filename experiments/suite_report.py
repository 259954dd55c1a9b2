"""What a run of the benchmark suite writes (``experiments/suite.py``): ``bench.json``,
``ratios.png`` (one panel per op family: the ratio to each baseline on a log axis, targets
as ticks, missed ones in red), ``bandwidth.png`` (achieved GB/s next to ``clone()`` at the
same traffic and the copy ceiling), ``summary.md`` (the targets, met or not with the reason,
and every record), and the one table a per-op script prints.
"""

from __future__ import annotations

import json
from pathlib import Path

from experiments import benchutil

OUTPUTS = {"json": "bench.json", "ratios": "ratios.png", "bandwidth": "bandwidth.png",
           "summary": "summary.md"}

def write_outputs(doc: dict, out_dir: str | Path) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / f for name, f in output_names(doc).items()}
    paths["json"].write_text(json.dumps(doc, indent=1) + "\n")
    if "ratios" in paths:
        plot_ratios(doc, paths["ratios"])
        plot_bandwidth(doc, paths["bandwidth"])
    paths["summary"].write_text(render_summary(doc))
    return paths

def output_names(doc: dict) -> dict[str, str]:
    """The files a run writes: the plots only where the cases section ran."""
    if doc.get("copy_ceiling") is None:
        return {k: v for k, v in OUTPUTS.items() if k in ("json", "summary")}
    return dict(OUTPUTS)

def _case_label(r: dict, several_impls: bool, several_ops: bool = False) -> str:
    label = f"{r['pass']} {r['shape']} {r['dtype']}"
    label = f"{r['op']} {label}" if several_ops else label
    return f"{label} [{r['impl']}]" if several_impls else label

def _title(doc: dict) -> str:
    env = doc["environment"]
    return f"{env['device']}, torch {env['torch']}, {env['date']}"

def _families(records: list[dict], doc: dict) -> dict[str, list[dict]]:
    """The records by plot family (the script that defines the op's cases), in run order."""
    family_of = doc.get("families") or {}
    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(family_of.get(r["op"], r["op"]), []).append(r)
    return groups

def _small_multiples(groups: dict, rows_of, title: str, xlabel: str, width_per_panel=7.5):
    """A figure of one panel per family, two per row, each as tall as its rows need
    (``rows_of(records)``: the panel's row count). Returns the figure and its axes."""
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    names = list(groups) or ["(no records)"]
    cols = min(2, len(names))
    grid = [names[i:i + cols] for i in range(0, len(names), cols)]
    heights = [max(1.6, 0.16 * max(rows_of(groups.get(n, [])) for n in line) + 1.0)
               for line in grid]
    fig, axes = plt.subplots(len(grid), cols, figsize=(width_per_panel * cols, sum(heights) + 0.8),
                             squeeze=False, gridspec_kw={"height_ratios": heights})
    panels = {}
    for line, row_axes in zip(grid, axes):
        for k, ax in enumerate(row_axes):
            if k < len(line):
                panels[line[k]] = ax
                ax.set_title(line[k], loc="left", fontsize=10, fontweight="bold")
                ax.set_xlabel(xlabel, fontsize=7)
            else:
                ax.set_visible(False)
    fig.suptitle(title, fontsize=10)
    return fig, panels

def plot_ratios(doc: dict, path: Path) -> None:
    """One panel per op family: per case (pass, size, dtype), the ratio to each baseline as
    a marker on a log axis, 1 marked, targets drawn as ticks (green met, red missed)."""
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    records = doc["records"]
    groups = _families(records, doc)

    def labels_of(mine):
        several = len({r["impl"] for r in mine}) > 1
        ops = len({r["op"] for r in mine}) > 1
        return list(dict.fromkeys(_case_label(r, several, ops) for r in mine))

    fig, panels = _small_multiples(
        groups, lambda mine: len(labels_of(mine)), f"Ratio to each baseline: {_title(doc)}",
        "baseline time / our time (log; > 1: ours faster); ticks: targets")
    values = [r["ratio"] for r in records] + [r["target"] for r in records if r["target"]]
    lo, hi = min(values + [1.0]) / 1.6, max(values + [1.0]) * 1.6
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    markers = "osD^v<>ph*"
    for family, ax in panels.items():
        mine = groups.get(family, [])
        labels = labels_of(mine)
        several = len({r["impl"] for r in mine}) > 1
        ops = len({r["op"] for r in mine}) > 1
        for k, baseline in enumerate(dict.fromkeys(r["baseline"] for r in mine)):
            sel = [r for r in mine if r["baseline"] == baseline]
            ys = [labels.index(_case_label(r, several, ops)) for r in sel]
            ax.scatter([r["ratio"] for r in sel], ys, s=14, color=colors[k % len(colors)],
                       marker=markers[k % len(markers)], label=baseline, zorder=3)
            for y, r in zip(ys, sel):
                if r["target"] is not None:
                    ax.plot([r["target"]] * 2, [y - 0.4, y + 0.4],
                            color="green" if r["met"] else "red", linewidth=2.5)
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.tick_params(axis="x", labelsize=7)
        ax.axvline(1.0, color="black", linewidth=1)
        ax.set_yticks(range(len(labels)), labels, fontsize=6)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.grid(axis="x", which="both", alpha=0.25)
        if mine:
            ax.legend(fontsize=6, loc="best", title="baseline", title_fontsize=6)
    fig.tight_layout(rect=(0, 0, 1, 0.98))  # room for the title above the first row
    fig.savefig(path, dpi=110)
    plt.close(fig)

def plot_bandwidth(doc: dict, path: Path) -> None:
    """One panel per op family with memory-bound cases: achieved GB/s next to clone() at the
    same traffic, and the copy ceiling (all from the same run)."""
    import matplotlib.pyplot as plt

    seen, rows = set(), []
    for r in doc["records"]:
        key = (r["op"], r["pass"], r["shape"], r["dtype"], r["impl"])
        if r["gbps"] is not None and key not in seen:
            seen.add(key)
            rows.append(r)
    groups = _families(rows, doc)
    fig, panels = _small_multiples(
        groups, len, f"Achieved bandwidth: {_title(doc)}",
        "GB/s of ideal traffic (labels: % of clone() of the same bytes)")
    ceiling = doc["copy_ceiling"]
    for family, ax in panels.items():
        mine = groups.get(family, [])
        if not mine:
            ax.text(0.5, 0.5, "no memory-bound case in this run", ha="center",
                    transform=ax.transAxes)
        several = len({r["impl"] for r in mine}) > 1
        ops = len({r["op"] for r in mine}) > 1
        ys = range(len(mine))
        ax.barh([y - 0.2 for y in ys], [r["gbps"] for r in mine], 0.4, label="ours")
        ax.barh([y + 0.2 for y in ys], [r["copy_gbps"] for r in mine], 0.4,
                label="clone() of the same bytes", color="0.7")
        for y, r in zip(ys, mine):
            ax.text(r["gbps"], y - 0.2, f" {100 * r['gbps'] / r['copy_gbps']:.0f}%",
                    va="center", fontsize=5)
        ax.set_yticks(list(ys), [_case_label(r, several, ops) for r in mine], fontsize=6)
        ax.set_ylim(len(mine) - 0.5, -0.5)
        ax.axvline(ceiling["gbps"], color="black", linestyle="--", linewidth=1,
                   label=f"copy ceiling {ceiling['gbps']:.3g} GB/s")
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", alpha=0.25)
        ax.legend(fontsize=6, loc="best")
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=110)
    plt.close(fig)

def _fmt(v, digits=3) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 10 ** digits else f"{v:.0f}"
    return str(v)

def _spread_of(warning: str) -> float:
    try:
        return float(warning.split(" is ")[1].split("%")[0])
    except (IndexError, ValueError):
        return 0.0

def _warnings(all_warnings: list[str]) -> list[str]:
    """The warnings to show: many wide spreads are folded into their count and the widest
    five (indented)."""
    spreads = [w for w in all_warnings if w.startswith("wide spread")]
    warnings = [w for w in all_warnings if w not in spreads]
    if len(spreads) > 8:  # many noisy timings: say how many, show the worst
        worst = sorted(spreads, key=_spread_of, reverse=True)[:5]
        warnings.append(f"wide spread (IQR over {100 * benchutil.WIDE_SPREAD:.0f}% of the median) "
                        f"in {len(spreads)} timings, all listed in bench.json; the widest:")
        warnings += [f"  {w.removeprefix('wide spread: ')}" for w in worst]
    else:
        warnings += spreads
    return warnings

def render_summary(doc: dict, results: bool = False, command: str | None = None) -> str:
    """Markdown: header, warnings, the targets, then every record.

    ``results``: as a section for experiments/RESULTS.md (``##`` heading naming the device,
    torch version and date, the command that produced it)."""
    env = doc["environment"]
    ceiling = doc["copy_ceiling"]
    overhead = doc.get("overhead", [])
    h = "##" if results else "#"
    lines = [f"{h} Benchmark suite: {env['device']}, torch {env['torch']} (CUDA {env['cuda']}), "
             f"{env['date']}", ""]
    if results:
        lines += [f"`{command or 'python -m experiments.bench'}` ({doc['scale']} sizes): "
                  f"{doc['cases']} cases and {len(overhead)} call-overhead rows of "
                  f"{', '.join(doc['ops'])} in {doc['elapsed_s']:.0f} s. "
                  "Ratios are baseline time / our time, baselines timed in the same run, "
                  "interleaved; times are medians (CUDA events on a GPU) with the IQR; wall "
                  "times (host-bound cases) are synchronised calls timed by the host clock.", ""]
    else:
        lines += [f"{doc['cases']} cases and {len(overhead)} call-overhead rows "
                  f"({doc['scale']} sizes), {doc['elapsed_s']:.0f} s, "
                  f"load average {env['load_average']} on {env['cores']} cores.", ""]
    if ceiling is not None:
        lines += [f"Copy ceiling: {ceiling['gbps']:.0f} GB/s (clone() of "
                  f"{ceiling['bytes'] >> 20} MB of traffic, same run).", ""]
    warnings = _warnings(doc["warnings"])
    for title, items in (("Warnings", warnings), ("Errors", doc["errors"])):
        if items:
            lines += [f"{h}# {title}", ""]
            lines += [f"  - {w.strip()}" if w.startswith("  ") else f"- {w}" for w in items] + [""]
    if overhead:
        lines += render_overhead(overhead, h, doc.get("overhead_cpu_clock", "wall-clock"),
                                 doc.get("autograd_op_path"))
    if ceiling is None:  # the cases section did not run
        return "\n".join(lines) + "\n"
    targets = [r for r in doc["records"] if r["target"] is not None]
    met = sum(r["met"] for r in targets)
    lines += [f"{h}# Targets: {met} of {len(targets)} met", ""]
    if targets:
        lines.append("| op | pass | shape | dtype | baseline | ours us | baseline us | ratio | "
                     "target | met | reason | wall ratio |")
        lines.append("|" + "---|" * 12)
        for r in targets:
            wall = f"{r['wall_ratio']:.3g}x" if r["wall_ratio"] else ""
            lines.append(
                f"| {r['op']} | {r['pass']} | {r['shape']} | {r['dtype']} | {r['baseline']} | "
                f"{_fmt(r['median_us'])} | {_fmt(r['baseline_us'])} | {r['ratio']:.3g}x | "
                f"{r['target']:g}x | {'met' if r['met'] else '**NOT MET**'} | {r['reason'] or ''} | "
                f"{wall} |")
    else:
        lines.append("(no case of this run carries a target)")
    lines += ["", f"{h}# All results", ""]
    lines.append("| op | pass | shape | dtype | impl | us (IQR) | GB/s | % copy | "
                 "baseline | baseline us | ratio | wall us | baseline wall us | wall ratio |")
    lines.append("|" + "---|" * 14)
    for r in doc["records"]:
        pct = 100 * r["gbps"] / r["copy_gbps"] if r["gbps"] and r["copy_gbps"] else None
        lines.append(
            f"| {r['op']} | {r['pass']} | {r['shape']} | {r['dtype']} | {r['impl']} | "
            f"{_fmt(r['median_us'])} ({_fmt(r['iqr_us'], 2)}) | {_fmt(r['gbps'])} | {_fmt(pct)} | "
            f"{r['baseline']} | {_fmt(r['baseline_us'])} | {r['ratio']:.3g}x | {_fmt(r['wall_us'])} | "
            f"{_fmt(r['baseline_wall_us'])} | {_fmt(r['wall_ratio'])}{'x' if r['wall_ratio'] else ''} |")
    return "\n".join(lines) + "\n"

def render_overhead(rows: list[dict], h: str = "#", cpu_clock: str = "wall-clock",
                    autograd_path: str | None = None) -> list[str]:
    """The call-overhead table: host time per call, ours / native (< 1: ours cheaper)."""
    limited = [r for r in rows if r["limit"] is not None]
    within = sum(r["within"] for r in limited)
    served = (f" The autograd of sigmoid, GELU, resize and ROIAlign: {autograd_path}."
              if autograd_path else "")
    lines = [f"{h}# Call overhead: {within} of {len(limited)} within the limits", "",
             "Host time per call on one CPU thread, best of "
             f"{rows[0]['runs']} runs of back-to-back calls (one sync at the end of a run on "
             f"CUDA; CPU rows by {cpu_clock} time); ratio is ours / native (< 1: ours cheaper); "
             "limits: forward 1.25x, forward+backward 1.5x. CUDA graph rows: replay time per "
             "op, the floor. Rows aten via torch.ops: the native op entered as every custom op is, "
             "the floor of a Python call. Rows cell: the LLTM cell at the tutorial's size against "
             "the eager cell, limits 0.2x forward and 0.333x forward+backward (5x and 3x eager)."
             f"{served}", "",
             "| op | pass | mode | device | shape | ours | native | calls | ours us | "
             "native us | ratio | limit | within |",
             "|" + "---|" * 13]
    for r in rows:
        verdict = "" if r["within"] is None else "yes" if r["within"] else "**NO**"
        limit = "" if r["limit"] is None else f"{r['limit']:.3g}x"
        lines.append(
            f"| {r['op']} | {r['pass']} | {r['mode']} | {r['device']} | {r['shape']} | "
            f"`{r['ours']}` | `{r['native']}` | {r['calls']} | {_fmt(r['ours_us'])} | "
            f"{_fmt(r['native_us'])} | {r['ratio']:.3g}x | {limit} | {verdict} |")
    return lines + [""]

# The table a per-op script prints: one row per record.
VIEW_COLUMNS = {"pass": "pass", "shape": "shape", "dtype": "dtype", "impl": "impl",
                "median_us": "us", "iqr_us": "IQR us", "gbps": "GB/s", "baseline": "baseline",
                "baseline_us": "baseline us", "ratio": "ratio", "wall_ratio": "wall ratio",
                "target": "target", "met": "met"}

def render_view(doc: dict, name: str) -> str:
    """The header, the copy ceiling, warnings and errors, and every record in one table."""
    env = doc["environment"]
    lines = [f"# bench_{name}: {env['device']}, torch {env['torch']} (CUDA {env['cuda']}), "
             f"{env['date']}, {env['threads']} threads, {doc['scale']} sizes, "
             f"load average {env['load_average']}",
             f"# copy ceiling {doc['copy_ceiling']['gbps']:.3g} GB/s; ratio: baseline time / "
             "our time (> 1: ours faster); GB/s: ideal traffic of the case"]
    lines += [f"# warning: {w.strip()}" for w in _warnings(doc["warnings"])]
    lines += [f"# ERROR: {e}" for e in doc["errors"]]
    rows = []
    for r in doc["records"]:
        row = {"op": r["op"]} if len(doc["ops"]) > 1 else {}
        row.update({title: r[key] for key, title in VIEW_COLUMNS.items()})
        rows.append(row)
    return "\n".join(lines + [benchutil.format_table(rows)])
