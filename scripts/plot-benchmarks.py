#!/usr/bin/env python3
"""Plot the emulated-cluster benchmarks (scripts/bench-netns.sh) as hand-written SVG.

    scripts/plot-benchmarks.py [--results bench/netns] [--out docs/plots]

Reads every bench/netns/*.jsonl (records with "kind": "bench"; "iperf" and "error" records
are skipped) and writes to docs/plots/:

    time-vs-p-16m.svg, time-vs-p-64m.svg      median time vs p per operation and algorithm,
                                              with the bound (dashed), flat 200 Mbit/s
    ratio-16m.svg, ratio-64m.svg              ratio to the bound, bars per algorithm and p,
                                              lines at 1.00 and 1.05
    racks-chain-vs-random.svg                 rack-ordered chain vs random chain (racks shapes)
    one-by-one-vs-chain.svg                   broadcast: one-by-one, binomial, chain vs p, with
                                              the (p-1)n/B and n/B shapes
    crossover-allreduce.svg, crossover-broadcast.svg, crossover-allgather.svg
                                              time vs size (log-log) per p
    uneven-vs-flat.svg                        ratio to the flat bound, flat vs uneven links

With --netaware it prints the tables of bench/netns/*netaware-*.jsonl (network-aware
algorithms with a network model vs today's, and Open MPI, per network shape) and writes
netaware-<size>.svg (time relative to today's best algorithm).  With --tables it also prints
Markdown tables (flat results per TCP congestion control,
best algorithm per size and p, topology and uneven cells) to stdout.  With --peers it prints
the tables of harp next to Open MPI and gloo from bench/netns/*peers-*.jsonl (runs of
bench-netns.sh with peer cells); those files are left out of everything else.  A file's kind
is its name after the commit prefix (bench/netns/<commit>-<name>.jsonl, bench/README.md):
3ff3c42-netaware-200mbit.jsonl is a "netaware-" file.

Only records without passthrough arguments ("extra" empty) and whose label does not start
with "investigate" are used; when a cell was measured more than once the most recent record
(field "time") wins.  The flat figures (time vs p, ratios, one-by-one, uneven baseline) use
the records labelled "sweep".  Records from runs with --no-offload ("strict" shaping) are
kept apart: the crossover plots and tables use them for sizes up to 1 MiB when present, the
default runs above.  An allreduce or broadcast cell run without --algorithm or with
"auto" is its own series "auto" (what it chose is in "chosen").  Each flat figure is drawn
once per TCP congestion control found (one panel row each).  No third-party packages.
"""
import argparse
import glob
import json
import math
import os
import re
import sys
from collections import OrderedDict
from xml.sax.saxutils import escape

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
          "#17becf", "#7f7f7f", "#bcbd22"]
FONT = "font-family='DejaVu Sans, Arial, sans-serif'"


def variant(r):
    """'strict' when the run shaped every frame (TSO/GSO off), else 'default'."""
    return "strict" if r.get("offload") is False else "default"


def kind_name(path):
    """A results file's name without its commit prefix: 3ff3c42-netaware-200mbit.jsonl ->
    netaware-200mbit.jsonl (files named without a prefix are taken as they are)."""
    return re.sub(r"^[0-9a-f]{7,40}-", "", os.path.basename(path))


def results_files(results_dir, prefix=""):
    """The *.jsonl files of results_dir whose name after the commit prefix starts with prefix."""
    return [p for p in sorted(glob.glob(os.path.join(results_dir, "*.jsonl")))
            if kind_name(p).startswith(prefix)]


def load(results_dir):
    rows = []
    for path in results_files(results_dir):
        if kind_name(path).startswith(("peers-", "netaware-")):
            continue  # harp next to other libraries: --peers; network-aware runs: --netaware
        with open(path) as f:
            for ln, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    print(f"{path}:{ln}: not JSON, skipped", file=sys.stderr)
                    continue
                if r.get("kind") != "bench" or r.get("extra") or str(r.get("label", "")).startswith("investigate"):
                    continue
                r["variant"] = variant(r)
                r["file"] = os.path.basename(path)
                # An automatic choice is its own series: "auto" (the chosen algorithm in "chosen").
                cell = r.get("cell", "")
                req = cell.split("@")[0].split("/")[1] if "/" in cell.split("@")[0] else None
                if r["op"] in ("allreduce", "broadcast") and req in (None, "auto"):
                    r["chosen"], r["algorithm"] = r["algorithm"], "auto"
                rows.append(r)
    # When a cell was measured more than once, the most recent record wins.
    rows.sort(key=lambda r: r.get("time", ""))
    recs = OrderedDict()
    for r in rows:
        key = (r.get("label") == "sweep", r["variant"], r["shape"], r.get("tcp_cc", "?"), r["op"],
               r["algorithm"], r["bytes"], r["p"])
        recs.pop(key, None)
        recs[key] = r
    return list(recs.values())


def fmt_size(n):
    for unit, s in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {s}"
    return f"{n} B"


def fmt_time(s):
    if s == 0:
        return "0"
    if s >= 1:
        return f"{s:g} s" if s == int(s) else f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


def nice_ticks(lo, hi, n=5):
    if hi <= lo:
        hi = lo + 1
    span = hi - lo
    step = 10 ** math.floor(math.log10(span / n))
    for m in (1, 2, 2.5, 5, 10):
        if span / (step * m) <= n:
            step *= m
            break
    t = math.floor(lo / step) * step
    out = []
    while t <= hi + step * 1e-9:
        out.append(round(t, 12))
        t += step
    return out


def log_ticks(lo, hi):
    out = []
    e = math.floor(math.log10(lo))
    mult = (1, 2, 5) if hi / lo < 1e3 else (1, 3) if hi / lo < 1e5 else (1,)
    while 10 ** e <= hi * 1.0001:
        for m in mult:
            v = m * 10 ** e
            if lo / 1.0001 <= v <= hi * 1.0001:
                out.append(v)
        e += 1
    return out


class Svg:
    def __init__(self, w, h):
        self.w, self.h, self.parts = w, h, []

    def add(self, s):
        self.parts.append(s)

    def text(self, x, y, s, size=12, anchor="start", weight="normal", color="#222", rotate=None):
        tr = f" transform='rotate({rotate} {x:.1f} {y:.1f})'" if rotate else ""
        self.add(f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' text-anchor='{anchor}' "
                 f"font-weight='{weight}' fill='{color}' {FONT}{tr}>{escape(str(s))}</text>")

    def line(self, x1, y1, x2, y2, color="#000", width=1, dash=None):
        d = f" stroke-dasharray='{dash}'" if dash else ""
        self.add(f"<line x1='{x1:.1f}' y1='{y1:.1f}' x2='{x2:.1f}' y2='{y2:.1f}' stroke='{color}' "
                 f"stroke-width='{width}'{d}/>")

    def rect(self, x, y, w, h, fill, stroke="none", title=None):
        t = f"<title>{escape(title)}</title>" if title else ""
        self.add(f"<rect x='{x:.1f}' y='{y:.1f}' width='{max(w, 0):.1f}' height='{max(h, 0):.1f}' "
                 f"fill='{fill}' stroke='{stroke}'>{t}</rect>")

    def polyline(self, pts, color, width=2, dash=None, markers=True, title=None):
        if not pts:
            return
        d = f" stroke-dasharray='{dash}'" if dash else ""
        self.add(f"<polyline fill='none' stroke='{color}' stroke-width='{width}'{d} points='"
                 + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + "'/>")
        if markers:
            for x, y in pts:
                t = f"<title>{escape(title)}</title>" if title else ""
                self.add(f"<circle cx='{x:.1f}' cy='{y:.1f}' r='3.2' fill='{color}'>{t}</circle>")

    def save(self, path):
        with open(path, "w") as f:
            f.write(f"<svg xmlns='http://www.w3.org/2000/svg' width='{self.w}' height='{self.h}' "
                    f"viewBox='0 0 {self.w} {self.h}'>\n<rect width='100%' height='100%' fill='white'/>\n")
            f.write("\n".join(self.parts))
            f.write("\n</svg>\n")
        print(f"wrote {path}")


class Panel:
    """An axes box inside an Svg with linear or log scales."""

    def __init__(self, svg, x, y, w, h, xr, yr, xlog=False, ylog=False, title="", xlabel="",
                 ylabel="", xticks=None, xfmt=str, yfmt=fmt_time, yticks=None):
        self.s, self.x, self.y, self.w, self.h = svg, x, y, w, h
        self.xr, self.yr, self.xlog, self.ylog = xr, yr, xlog, ylog
        s = svg
        s.rect(x, y, w, h, "#fafafa", "#999")
        if title:
            s.text(x + w / 2, y - 8, title, 13, "middle", "bold")
        xt = xticks if xticks is not None else (log_ticks(*xr) if xlog else nice_ticks(*xr))
        yt = yticks if yticks is not None else (log_ticks(*yr) if ylog else nice_ticks(*yr))
        for v in xt:
            if xr[0] <= v <= xr[1]:
                px = self.px(v)
                s.line(px, y + h, px, y + h + 4, "#666")
                s.line(px, y, px, y + h, "#e4e4e4")
                s.text(px, y + h + 16, xfmt(v), 10, "middle")
        for v in yt:
            if yr[0] <= v <= yr[1] * 1.0001:
                py = self.py(v)
                s.line(x - 4, py, x, py, "#666")
                s.line(x, py, x + w, py, "#e4e4e4")
                s.text(x - 6, py + 3.5, yfmt(v), 10, "end")
        if xlabel:
            s.text(x + w / 2, y + h + 32, xlabel, 11, "middle")
        if ylabel:
            s.text(x - 52, y + h / 2, ylabel, 11, "middle", rotate=-90)

    def px(self, v):
        a, b = self.xr
        if self.xlog:
            return self.x + (math.log(v) - math.log(a)) / (math.log(b) - math.log(a)) * self.w
        return self.x + (v - a) / (b - a) * self.w

    def py(self, v):
        a, b = self.yr
        if self.ylog:
            v = max(v, a)
            return self.y + self.h - (math.log(v) - math.log(a)) / (math.log(b) - math.log(a)) * self.h
        return self.y + self.h - (v - a) / (b - a) * self.h


def legend(svg, x, y, items, cols=1, colw=190):
    for i, (label, color, dash) in enumerate(items):
        cx, cy = x + (i % cols) * colw, y + (i // cols) * 16
        svg.line(cx, cy - 4, cx + 22, cy - 4, color, 2.5, dash)
        svg.text(cx + 28, cy, label, 11)


ALGS = OrderedDict([
    ("broadcast", ["chain", "binomial", "one-by-one"]),
    ("allgather", ["ring", "known-total"]),
    ("allreduce", ["regroup-allgather", "bidirectional-exchange"]),
    ("reduce-scatter", None),
    ("regroup", None),
])
BOUND_TXT = {"broadcast": "n/B", "allreduce": "2(p−1)/p·n/B", "allgather": "(p−1)/p·n/B",
             "reduce-scatter": "(p−1)/p·n/B", "regroup": "(p−1)/p·n/B"}


def algs_for(recs, op):
    want = ALGS.get(op)
    have = []
    for r in recs:
        if r["op"] == op and r["algorithm"] not in have:
            have.append(r["algorithm"])
    if want:
        return [a for a in want if a in have] + [a for a in have if a not in want]
    return have


def ccs(recs):
    out = []
    for r in recs:
        c = r.get("tcp_cc", "?")
        if c not in out:
            out.append(c)
    return sorted(out, key=lambda c: (c != "reno", c))


def plot_time_vs_p(recs, size, out):
    flat = [r for r in recs if r["shape"] == "flat" and r["bytes"] == size and r["variant"] == "default"
            and r.get("label") == "sweep"]
    if not flat:
        return
    cl = ccs(flat)
    ops = [o for o in ALGS if any(r["op"] == o for r in flat)]
    pw, ph, mx, my = 210, 170, 75, 70
    svg = Svg(mx + len(ops) * (pw + 70) + 10, 50 + len(cl) * (ph + my + 70) + 40)
    svg.text(svg.w / 2, 22, f"Median time vs p, {fmt_size(size)}, flat 200 Mbit/s per host "
             f"(dashed: bound from measured B)", 14, "middle", "bold")
    for ci, cc in enumerate(cl):
        rows = [r for r in flat if r.get("tcp_cc", "?") == cc]
        y0 = 60 + ci * (ph + my + 70)
        for oi, op in enumerate(ops):
            rr = [r for r in rows if r["op"] == op]
            if not rr:
                continue
            ps = sorted({r["p"] for r in rr})
            ymax = max(max(r["median_s"] for r in rr), max(r["bound_s"] or 0 for r in rr)) * 1.1
            x0 = mx + oi * (pw + 70)
            pan = Panel(svg, x0, y0, pw, ph, (min(ps) - 0.5, max(ps) + 0.5), (0, ymax),
                        title=f"{op} (tcp {cc})", xlabel="p (hosts)", xticks=ps,
                        ylabel="median time" if oi == 0 else "")
            bpts = [(pan.px(p), pan.py(next(r["bound_s"] for r in rr if r["p"] == p))) for p in ps
                    if any(r["p"] == p and r["bound_s"] for r in rr)]
            svg.polyline(bpts, "#000", 1.5, "5,4", markers=False)
            items = [(f"bound {BOUND_TXT.get(op, '')}", "#000", "5,4")]
            for ai, alg in enumerate(algs_for(rows, op)):
                pts = sorted((r["p"], r["median_s"], r.get("ratio")) for r in rr if r["algorithm"] == alg)
                c = COLORS[ai % len(COLORS)]
                svg.polyline([(pan.px(p), pan.py(t)) for p, t, _ in pts], c,
                             title=f"{alg}")
                for p, t, ratio in pts:
                    if ratio:
                        first = p == min(ps)
                        svg.text(pan.px(p) + (5 if first else -4), pan.py(t) - 6 - 10 * ai, f"{ratio:.2f}×", 9,
                                 "start" if first else "end", color=c)
                items.append((alg, c, None))
            legend(svg, x0, y0 + ph + 46, items)
    svg.save(os.path.join(out, f"time-vs-p-{size >> 20}m.svg"))


def bar_chart(path, title, groups, series, values, ylabel, refs=(), ymin=0.0, ymax=None, note=""):
    """groups: list of group labels; series: list of (label, color); values[g][s] = v or None.
    Bars start at ymin; bars above ymax are clipped and carry their value."""
    n_g, n_s = len(groups), len(series)
    bw = 14 if n_s > 2 else 22
    gw = n_s * bw + 18
    longest = max(len(g) for g in groups)
    mx, my, ph = max(70, int(longest * 5.2) - 20), 60, 260
    pw = max(n_g * gw, 300)
    lab_h = int(longest * 6.2 * 0.6) + 20
    svg = Svg(mx + pw + 60, my + ph + lab_h + 30 + 16 * ((n_s + 2) // 3))
    svg.text(svg.w / 2, 22, title, 14, "middle", "bold")
    if note:
        svg.text(svg.w / 2, 40, note, 11, "middle", color="#555")
    vmax = ymax or max([v for row in values for v in row if v is not None] + [r for r, _ in refs]) * 1.08
    pan = Panel(svg, mx, my, pw, ph, (0, pw), (ymin, vmax), xticks=[], yfmt=lambda v: f"{v:g}",
                ylabel=ylabel)
    for gi, g in enumerate(groups):
        gx = mx + gi * gw + 9
        for si, (sl, c) in enumerate(series):
            v = values[gi][si]
            if v is None:
                continue
            x = gx + si * bw
            top = pan.py(min(max(v, ymin), vmax))
            svg.rect(x, top, bw - 2, my + ph - top, c, title=f"{g} {sl}: {v:.3f}")
            if v > vmax:
                svg.text(x + bw / 2 + 3, my + 4, f"{v:.2f}", 9, "end", "bold", "#fff", rotate=-90)
        svg.text(gx + n_s * bw / 2, my + ph + 12, g, 10, "end", rotate=-35)
    for i, (r, lab) in enumerate(refs):
        y = pan.py(r)
        svg.line(mx, y, mx + pw, y, "#000", 1, "4,3")
        svg.text(mx + pw + 3, y + (-2 if i % 2 else 8), lab, 9)
    legend(svg, mx, my + ph + lab_h + 10, [(sl, c, None) for sl, c in series], cols=3, colw=230)
    svg.save(path)


def plot_ratio(recs, size, out):
    flat = [r for r in recs if r["shape"] == "flat" and r["bytes"] == size and r.get("ratio")
            and r["variant"] == "default" and r.get("label") == "sweep"]
    if not flat:
        return
    groups, keys = [], []
    for op in ALGS:
        for alg in algs_for(flat, op):
            groups.append(f"{op} {alg}" if alg != "default" else op)
            keys.append((op, alg))
    cl = ccs(flat)
    ps = sorted({r["p"] for r in flat})
    series, vals = [], [[] for _ in keys]
    palette = {"reno": ["#9ecae1", "#4292c6", "#08519c"], "bbr": ["#fdae6b", "#f16913", "#a63603"]}
    for ci, cc in enumerate(cl):
        for pi, p in enumerate(ps):
            pal = palette.get(cc, COLORS[ci * 3:ci * 3 + 3] or COLORS)
            series.append((f"tcp {cc}, p={p}", pal[pi % len(pal)]))
            for ki, (op, alg) in enumerate(keys):
                v = next((r["ratio"] for r in flat if r["op"] == op and r["algorithm"] == alg
                          and r["p"] == p and r.get("tcp_cc", "?") == cc), None)
                vals[ki].append(v)
    bar_chart(os.path.join(out, f"ratio-{size >> 20}m.svg"),
              f"Median time / bound, {fmt_size(size)}, flat 200 Mbit/s", groups, series, vals,
              "time / bound", refs=[(1.0, "1.00"), (1.05, "1.05")], ymin=0.9, ymax=1.5,
              note="bound from measured B; axis starts at 0.9; bars above 1.5 are clipped (value printed)")


def plot_racks(recs, out):
    rk = [r for r in recs if r["shape"].startswith("racks") and r["op"] == "broadcast" and r["variant"] == "default"
          and r["algorithm"] in ("chain", "chain-random")]
    if not rk:
        return
    shapes = sorted({(r["shape"], r.get("tcp_cc", "?"), r["p"]) for r in rk})
    sizes = sorted({r["bytes"] for r in rk})
    groups, vals = [], []
    for sh, cc, p in shapes:
        for n in sizes:
            row = []
            for alg in ("chain", "chain-random"):
                r = next((r for r in rk if (r["shape"], r.get("tcp_cc", "?"), r["p"]) == (sh, cc, p)
                          and r["bytes"] == n and r["algorithm"] == alg), None)
                row.append(r["ratio"] if r else None)
            if any(v is not None for v in row):
                groups.append(f"{sh} p={p} {cc} {fmt_size(n)}")
                vals.append(row)
    bar_chart(os.path.join(out, "racks-chain-vs-random.svg"),
              "Broadcast across racks: rack-ordered chain vs random chain", groups,
              [("chain (rack order)", "#1f77b4"), ("chain-random", "#d62728")], vals,
              "time / (n / B_uplink)", refs=[(1.0, "1.00")],
              note="bound: every byte must cross the slower rack uplink once (n / measured uplink rate)")


def plot_one_by_one(recs, out):
    flat = [r for r in recs if r["shape"] == "flat" and r["op"] == "broadcast"
            and r["bytes"] >= (16 << 20) and r["variant"] == "default" and r.get("label") == "sweep"]
    if not flat:
        return
    cc = ccs(flat)[0]
    flat = [r for r in flat if r.get("tcp_cc", "?") == cc]
    sizes = sorted({r["bytes"] for r in flat})
    pw, ph = 300, 220
    svg = Svg(80 + len(sizes) * (pw + 90), ph + 170)
    svg.text(svg.w / 2, 22, f"Broadcast: one-by-one vs binomial vs chain (flat 200 Mbit/s, tcp {cc})",
             14, "middle", "bold")
    for si, n in enumerate(sizes):
        rr = [r for r in flat if r["bytes"] == n]
        ps = sorted({r["p"] for r in rr})
        B = rr[0]["B_bits"] / 8
        ymax = max(max(r["median_s"] for r in rr), (max(ps) - 1) * n / B) * 1.1
        x0 = 80 + si * (pw + 90)
        pan = Panel(svg, x0, 50, pw, ph, (min(ps) - 0.5, max(ps) + 0.5), (0, ymax),
                    title=fmt_size(n), xlabel="p (hosts)", xticks=ps, ylabel="median time")
        svg.polyline([(pan.px(p), pan.py((p - 1) * n / B)) for p in ps], "#888", 1.5, "5,4", False)
        svg.polyline([(pan.px(p), pan.py(math.ceil(math.log2(p)) * n / B)) for p in ps], "#bbb", 1.5, "2,3", False)
        svg.polyline([(pan.px(p), pan.py(n / B)) for p in ps], "#000", 1.5, "5,4", False)
        items = [("(p−1)·n/B", "#888", "5,4"), ("⌈log2 p⌉·n/B", "#bbb", "2,3"), ("n/B", "#000", "5,4")]
        for ai, alg in enumerate(["one-by-one", "binomial", "chain"]):
            pts = sorted((r["p"], r["median_s"]) for r in rr if r["algorithm"] == alg)
            c = COLORS[ai]
            svg.polyline([(pan.px(p), pan.py(t)) for p, t in pts], c)
            for p, t in pts:
                svg.text(pan.px(p) + 5, pan.py(t) - 5, f"{t * B / n:.2f}", 9, color=c)
            items.append((alg, c, None))
        svg.text(x0 + pw, 50 + ph + 32, "labels: time·B/n", 9, "end", color="#555")
        legend(svg, x0, 50 + ph + 48, items, cols=2, colw=175)
    svg.save(os.path.join(out, "one-by-one-vs-chain.svg"))


STRICT_MAX = 1 << 20   # strict shaping is CPU-bound on 2 cores above this (see the doc)


def crossover_recs(recs, op, algs, variant_small="strict"):
    """Flat records of op/algs: sizes <= 1 MiB from the given variant (strict shaping by
    default, when there is any), bigger sizes from the default runs."""
    latest = OrderedDict()
    for r in sorted((r for r in recs if r["shape"] == "flat" and r["op"] == op and r["algorithm"] in algs),
                    key=lambda r: r.get("time", "")):
        latest[(r["variant"], r.get("tcp_cc", "?"), r["algorithm"], r["bytes"], r["p"])] = r
    rr = list(latest.values())
    small = [r for r in rr if r["variant"] == variant_small and r["bytes"] <= STRICT_MAX]
    if variant_small == "default" or not small:
        return [r for r in rr if r["variant"] == "default"], "default shaping"
    return small + [r for r in rr if r["variant"] == "default" and r["bytes"] > STRICT_MAX], \
        f"≤{fmt_size(STRICT_MAX)}: strict shaping (TSO/GSO off, small htb burst); larger: default shaping"


def plot_crossover(recs, op, algs, out):
    algs = list(algs) + (["auto"] if op in ("allreduce", "broadcast") else [])
    rr, how = crossover_recs(recs, op, algs)
    if not rr:
        return
    cl = ccs(rr)
    ps = sorted({r["p"] for r in rr})
    pw, ph = 240, 200
    svg = Svg(90 + len(ps) * (pw + 80), 75 + len(cl) * (ph + 110))
    svg.text(svg.w / 2, 22, f"{op}: median time vs size (log-log), flat 200 Mbit/s", 14, "middle", "bold")
    svg.text(svg.w / 2, 40, how, 11, "middle", color="#555")
    for ci, cc in enumerate(cl):
        for pi, p in enumerate(ps):
            sub = [r for r in rr if r["p"] == p and r.get("tcp_cc", "?") == cc]
            if not sub:
                continue
            small, build = latest_build([r for r in sub if r["bytes"] <= STRICT_MAX])
            sub = small + [r for r in sub if r["bytes"] > STRICT_MAX]
            xs = sorted({r["bytes"] for r in sub})
            ts = [r["median_s"] for r in sub]
            x0, y0 = 90 + pi * (pw + 80), 70 + ci * (ph + 110)
            pan = Panel(svg, x0, y0, pw, ph, (min(xs) / 1.3, max(xs) * 1.3),
                        (min(ts) / 1.5, max(ts) * 1.5), xlog=True, ylog=True,
                        title=f"p={p}, tcp {cc}, build {build[:7]}", xlabel="bytes",
                        xticks=[x for x in xs if x & (x - 1) == 0 and (x.bit_length() - 1) % 2 == 0],
                        xfmt=lambda v: fmt_size(int(v)).replace(" ", "").replace("KiB", "k").replace("MiB", "m"),
                        ylabel="median time" if pi == 0 else "")
            items = []
            for ai, alg in enumerate(algs):
                pts = sorted((r["bytes"], r["median_s"]) for r in sub if r["algorithm"] == alg)
                if not pts:
                    continue
                c = COLORS[ai]
                dash = "3,3" if alg == "auto" else None
                svg.polyline([(pan.px(x), pan.py(t)) for x, t in pts], c, 1.5 if dash else 2, dash)
                items.append((alg, c, dash))
            legend(svg, x0, y0 + ph + 48, items)
    svg.save(os.path.join(out, f"crossover-{op}.svg"))


def plot_uneven(recs, out):
    un = [r for r in recs if "uneven" in r["shape"] and r.get("ratio") and r["variant"] == "default"]
    if not un:
        return
    shapes = sorted({r["shape"] for r in un})
    cl = ccs(un)
    keys = sorted({(r["op"], r["algorithm"], r["bytes"], r["p"]) for r in un},
                  key=lambda k: (list(ALGS).index(k[0]) if k[0] in ALGS else 99, k[1], k[2], k[3]))
    flat = [r for r in recs if r["shape"] == "flat" and r["variant"] == "default" and r.get("label") == "sweep"]
    series = []
    pal = {"reno": ("#9ecae1", "#08519c"), "bbr": ("#fdae6b", "#a63603")}
    for cc in cl:
        light, dark = pal.get(cc, ("#bbbbbb", "#444444"))
        series.append((f"flat, tcp {cc}", light))
        for sh in shapes:
            series.append((f"{sh}, tcp {cc}", dark))
    groups, vals = [], []
    for op, alg, n, p in keys:
        row = []
        for cc in cl:
            f = next((r for r in flat if r.get("tcp_cc", "?") == cc and
                      (r["op"], r["algorithm"], r["bytes"], r["p"]) == (op, alg, n, p)), None)
            row.append(f["ratio"] if f else None)
            for sh in shapes:
                u = next((r for r in un if r["shape"] == sh and r.get("tcp_cc", "?") == cc and
                          (r["op"], r["algorithm"], r["bytes"], r["p"]) == (op, alg, n, p)), None)
                row.append(u["ratio"] if u else None)
        groups.append(f"{op} {alg if alg != 'default' else ''} {fmt_size(n)} p={p}".replace("  ", " "))
        vals.append(row)
    bar_chart(os.path.join(out, "uneven-vs-flat.svg"),
              "Uneven links (per-pair R, R/2, R/4) vs flat: time / flat bound", groups, series, vals,
              "time / flat bound", refs=[(1.0, "1.00")],
              note="the bound is the flat network's; the excess is what the algorithm loses to slow pairs")


def ms(t):
    return f"{t * 1e3:.3f}" if t < 0.01 else f"{t * 1e3:.1f}" if t < 10 else f"{t * 1e3:.0f}"


def auto_table(recs, var, cc):
    """For every size and p with an 'auto' record: its time, what it chose, and its slowdown
    against the best explicit algorithm measured in the same variant."""
    exp = {"allreduce": ("bidirectional-exchange", "regroup-allgather"), "broadcast": ("chain", "binomial")}
    for op, algs in exp.items():
        rr = [r for r in recs if r["shape"] == "flat" and r["op"] == op and r["variant"] == var
              and r.get("tcp_cc", "?") == cc and (r["algorithm"] in algs or r["algorithm"] == "auto")]
        rr, _ = latest_build(rr)
        autos = [r for r in rr if r["algorithm"] == "auto"]
        if not autos:
            continue
        sizes = sorted({r["bytes"] for r in autos})
        ps = sorted({r["p"] for r in autos})
        print(f"### {op} auto vs the best explicit algorithm ({var} shaping, tcp {cc}, build "
              f"{autos[0].get('harp_sha256', '?')})\n")
        print("Each cell: auto's median (its choice: B = bidirectional-exchange / binomial, R = "
              "regroup-allgather, C = chain) and auto ÷ best explicit; **bold** when > 1.10.\n")
        print(f"| p | " + " | ".join(fmt_size(n) for n in sizes) + " |")
        print("|---|" + "---|" * len(sizes))
        for p in ps:
            cells = []
            for n in sizes:
                a = next((r for r in autos if r["p"] == p and r["bytes"] == n), None)
                ex = [r for r in rr if r["p"] == p and r["bytes"] == n and r["algorithm"] in algs]
                if not a or not ex:
                    cells.append("–")
                    continue
                best = min(r["median_s"] for r in ex)
                q = a["median_s"] / best
                ch = {"bidirectional-exchange": "B", "binomial": "B", "regroup-allgather": "R", "chain": "C"}.get(a.get("chosen"), "?")
                qs = f"**{q:.2f}**" if q > 1.10 else f"{q:.2f}"
                cells.append(f"{ms(a['median_s'])} ({ch}) {qs}")
            print(f"| {p} | " + " | ".join(cells) + " |")
        print()


def latest_build(rr):
    """Keep the records of the build (harp_sha256) of the most recent record."""
    if not rr:
        return rr, "?"
    b = max(rr, key=lambda r: r.get("time", "")).get("harp_sha256", "?")
    return [r for r in rr if r.get("harp_sha256", "?") == b], b


def crossover_candidates(recs, var, cc):
    """Worst slowdown against the best explicit algorithm, over every measured size and p, of
    the rule 'small algorithm below T bytes, large algorithm from T on', for candidate T."""
    rules = {"allreduce": ("bidirectional-exchange", "regroup-allgather"), "broadcast": ("binomial", "chain")}
    for op, (small, large) in rules.items():
        rr = [r for r in recs if r["shape"] == "flat" and r["op"] == op and r["variant"] == var
              and r.get("tcp_cc", "?") == cc and r["algorithm"] in (small, large) and r["bytes"] <= STRICT_MAX]
        rr, build = latest_build(rr)
        cells = {}
        for r in rr:
            cells.setdefault((r["p"], r["bytes"]), {})[r["algorithm"]] = r["median_s"]
        cells = {k: v for k, v in cells.items() if len(v) == 2}
        if not cells:
            continue
        ps = sorted({p for p, _ in cells})
        print(f"### {op}: rule '{small} below T, {large} from T' ({var} shaping, tcp {cc}, sizes ≤ "
              f"{fmt_size(STRICT_MAX)}, build {build})\n")
        print("Worst slowdown of the rule's choice against the better of the two, per p "
              "(the size where it happens in brackets); cells within 0.1 ms count as ties.\n")
        print("| T | " + " | ".join(f"p={p}" for p in ps) + " |")
        print("|---|" + "---|" * len(ps))
        for T in (2048, 4096, 8192, 16384, 32768, 65536):
            row = []
            for p in ps:
                worst, at = 1.0, None
                for (pp, n), v in cells.items():
                    if pp != p:
                        continue
                    pick = v[small] if n < T else v[large]
                    best = min(v.values())
                    if pick - best <= 1e-4:   # within 0.1 ms: run-to-run noise at these sizes
                        continue
                    if pick / best > worst:
                        worst, at = pick / best, n
                row.append(f"{worst:.2f}" + (f" ({fmt_size(at)})" if at else ""))
            print(f"| {fmt_size(T)} | " + " | ".join(row) + " |")
        print()


def tables(recs):
    flat = [r for r in recs if r["shape"] == "flat" and r["variant"] == "default" and r.get("label") == "sweep"]
    cl = ccs(flat)
    builds = sorted({r.get("harp_sha256", "?") for r in flat})
    print(f"### Flat 200 Mbit/s sweep: median time (ms) and ratio to the bound (build {', '.join(builds)})\n")
    head = "| op | algorithm | n | p | bound ms |" + "".join(f" {c} ms | {c} ratio |" for c in cl)
    print(head)
    print("|" + "---|" * (5 + 2 * len(cl)))
    keys = sorted({(r["op"], r["algorithm"], r["bytes"], r["p"]) for r in flat},
                  key=lambda k: (list(ALGS).index(k[0]) if k[0] in ALGS else 99,
                                 (algs_for(flat, k[0]).index(k[1])), k[2], k[3]))
    for op, alg, n, p in keys:
        row = {r.get("tcp_cc", "?"): r for r in flat if (r["op"], r["algorithm"], r["bytes"], r["p"]) == (op, alg, n, p)}
        b = next((r["bound_s"] for r in row.values() if r.get("bound_s")), None)
        cells = ""
        for c in cl:
            r = row.get(c)
            cells += f" {ms(r['median_s'])} | {r['ratio']:.3f} |" if r and r.get("ratio") else (f" {ms(r['median_s'])} | – |" if r else " – | – |")
        print(f"| {op} | {alg} | {fmt_size(n)} | {p} | {ms(b) if b else '–'} |{cells}")
    print()
    pairs = {"broadcast": ("chain", "binomial"), "allreduce": ("bidirectional-exchange", "regroup-allgather"),
             "allgather": ("ring", "known-total")}
    for c in cl:
        print(f"### Best algorithm per size (tcp {c}); in brackets: slowdown of the other(s) vs the best\n")
        for op in ("broadcast", "allreduce", "allgather"):
            rr, how = crossover_recs(recs, op, pairs[op])
            sub = [r for r in rr if r.get("tcp_cc", "?") == c]
            if not sub:
                continue
            blds = sorted({r.get("harp_sha256", "?") for r in sub if r["bytes"] <= STRICT_MAX})
            print(f"{op}: {how}; build(s) up to {fmt_size(STRICT_MAX)}: {', '.join(blds)}\n")
            sizes = sorted({r["bytes"] for r in sub})
            ps = sorted({r["p"] for r in sub})
            print(f"| {op} | " + " | ".join(fmt_size(n) for n in sizes) + " |")
            print("|---|" + "---|" * len(sizes))
            for p in ps:
                cells = []
                for n in sizes:
                    rr = sorted((r["median_s"], r["algorithm"]) for r in sub if r["p"] == p and r["bytes"] == n)
                    if not rr:
                        cells.append("–")
                        continue
                    best = rr[0]
                    others = ", ".join(f"{a[:5]} {t / best[0]:.2f}×" for t, a in rr[1:])
                    cells.append(f"**{best[1]}** {ms(best[0])} ms ({others})")
                print(f"| p={p} | " + " | ".join(cells) + " |")
            print()
    for v in ("strict", "default"):
        for c in cl:
            crossover_candidates(recs, v, c)
            auto_table(recs, v, c)
    other = [r for r in recs if r["shape"] != "flat" and r["variant"] == "default"]
    if other:
        print("### Other shapes\n")
        print("| shape | tcp | op | algorithm | n | p | median ms | bound ms (basis) | ratio |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in sorted(other, key=lambda r: (r["shape"], r.get("tcp_cc", "?"), r["op"], r["bytes"], r["algorithm"], r["p"])):
            b = f"{ms(r['bound_s'])} ({r.get('bound_basis', 'B')})" if r.get("bound_s") else "–"
            ratio = f"{r['ratio']:.3f}" if r.get("ratio") else "–"
            print(f"| {r['shape']} | {r.get('tcp_cc', '?')} | {r['op']} | {r['algorithm']} | {fmt_size(r['bytes'])} | "
                  f"{r['p']} | {ms(r['median_s'])} | {b} | {ratio} |")


def peer_tables(results_dir):
    """Markdown tables of the peers-*.jsonl results: harp next to Open MPI and gloo."""
    recs = OrderedDict()
    rows = []
    for path in results_files(results_dir, "peers-"):
        with open(path) as f:
            rows += [json.loads(ln) for ln in f if ln.strip()]
    rows = [r for r in rows if r.get("kind") == "bench"]
    rows.sort(key=lambda r: r.get("time", ""))
    for r in rows:  # the most recent record of a cell wins
        key = (r["shape"], r.get("tcp_cc"), r.get("impl", "harp"), r["op"], r["algorithm"],
               r["bytes"], r["p"], r.get("inner", 1))
        recs.pop(key, None)
        recs[key] = r
    recs = list(recs.values())

    def get(shape, impl, op, n, p, alg=None):
        rr = [r for r in recs if r["shape"] == shape and r.get("impl", "harp") == impl and r["op"] == op
              and r["bytes"] == n and r["p"] == p and (alg is None or r["algorithm"] == alg)]
        return min(rr, key=lambda r: r["median_s"]) if rr else None

    def ms(x):
        return f"{x * 1e3:.3f}" if x < 0.01 else f"{x * 1e3:.1f}" if x < 1 else f"{x * 1e3:.0f}"

    flat = [r for r in recs if r["shape"] == "flat"]
    for p in sorted({r["p"] for r in flat}):
        print(f"### Flat {flat[0]['rate_bits'] // 1000000} Mbit/s, p = {p}, tcp {flat[0].get('tcp_cc')}: "
              "harp, Open MPI and gloo in one run\n")
        print("| op | harp 1 KiB ms | Open MPI 1 KiB ms | gloo 1 KiB ms | harp / Open MPI | "
              "harp 16 MiB / bound | Open MPI / bound | gloo / bound | harp / Open MPI 16 MiB |")
        print("|---|---|---|---|---|---|---|---|---|")
        for op in ("broadcast", "allreduce", "allgather", "reduce-scatter"):
            small = [get("flat", i, op, 1024, p) for i in ("harp", "openmpi", "gloo")]
            big = [get("flat", i, op, 16 << 20, p) for i in ("harp", "openmpi", "gloo")]
            cells = [f"{ms(r['median_s'])} (×{r.get('inner', 1)})" if r else "–" for r in small]
            cells.append(f"{small[0]['median_s'] / small[1]['median_s']:.2f}" if small[0] and small[1] else "–")
            cells += [f"{r['ratio']:.2f}" if r and r.get("ratio") else "–" for r in big]
            cells.append(f"{big[0]['median_s'] / big[1]['median_s']:.2f}" if big[0] and big[1] else "–")
            alg = small[0]["algorithm"] + " / " + big[0]["algorithm"] if small[0] and big[0] else ""
            print(f"| {op} ({alg}) | " + " | ".join(cells) + " |")
        print()
    shaped = [r for r in recs if r["shape"] != "flat"]
    harp_algs = {"broadcast": ["chain", "binomial"], "reduce": ["binomial", "scatter-gather"],
                 "gather": ["default"], "scatter": ["default"]}
    for op, algs in harp_algs.items():
        sizes = sorted({r["bytes"] for r in shaped if r["op"] == op})
        if not sizes:
            continue
        print(f"### {op}: harp's algorithms today vs Open MPI (median ms; bold: best harp / Open MPI; "
              "b: the bound, ms)\n")
        head = " | ".join(f"{fmt_size(n)}: " + ", ".join(algs if len(algs) > 1 else ["harp"]) + ", Open MPI"
                          for n in sizes)
        print(f"| shape | p | {head} |")
        print("|---|---|" + "---|" * len(sizes) + "")
        for shape in sorted({r["shape"] for r in shaped}):
            for p in sorted({r["p"] for r in shaped if r["shape"] == shape}):
                cells = []
                for n in sizes:
                    hs = [get(shape, "harp", op, n, p, a) for a in algs]
                    m = get(shape, "openmpi", op, n, p)
                    best = min((h["median_s"] for h in hs if h), default=None)
                    txt = ", ".join(ms(h["median_s"]) if h else "–" for h in hs)
                    txt += f", {ms(m['median_s'])}" if m else ", –"
                    txt += f", **{best / m['median_s']:.2f}**" if m and best else ""
                    bound = next((h["bound_s"] for h in hs + [m] if h and h.get("bound_s")), None)
                    txt += f"; b {ms(bound)}" if bound else ""
                    cells.append(txt)
                print(f"| {shape} | {p} | " + " | ".join(cells) + " |")
        print()


# Network-aware runs: today's algorithms and the network-aware ones per operation (series keyed
# by the cell's --algorithm; "auto" with a model is a network-aware choice).
NA_TODAY = {"broadcast": ["chain", "binomial"], "reduce": ["binomial", "scatter-gather"],
            "gather": ["direct"], "scatter": ["direct"]}
NA_NEW = {"broadcast": ["net-chain", "net-hierarchy", "auto"], "reduce": ["net-ring", "net-hierarchy"],
          "gather": ["net-tree", "net-relay", "auto"], "scatter": ["net-tree", "parallel", "net-relay", "auto"]}


def netaware(results_dir, out):
    rows = []
    for path in results_files(results_dir, "netaware-"):
        with open(path) as f:
            rows += [json.loads(ln) for ln in f if ln.strip()]
    cells = OrderedDict()
    for r in sorted((r for r in rows if r.get("kind") == "bench"), key=lambda r: r.get("time", "")):
        impl = r.get("impl", "harp")
        alg = "openmpi" if impl != "harp" else r["cell"].split("@")[0].partition("/")[2] or "default"
        key = (r["shape"], r["p"], r["op"], r["bytes"], alg)
        cells.pop(key, None)
        cells[key] = r
    if not cells:
        sys.exit(f"no bench records in {results_dir}/*netaware-*.jsonl")
    shapes = sorted({k[0] for k in cells}, key=lambda s: (s == "flat", s))
    sizes = sorted({k[3] for k in cells})

    def t(shape, p, op, n, alg):
        r = cells.get((shape, p, op, n, alg))
        return r["median_s"] if r else None

    def ms(x):
        return "–" if x is None else f"{x * 1e3:.0f}" if x >= 0.1 else f"{x * 1e3:.1f}"

    summary = {}
    for n in sizes:
        print(f"### {fmt_size(n)}: median ms; today = best of today's algorithms; "
              "new = best network-aware; change = new / today − 1\n")
        print("| shape | p | op | today's algorithms | network-aware | Open MPI | today | new | change | "
              "Open MPI / new |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for shape in shapes:
            for p in sorted({k[1] for k in cells if k[0] == shape and k[3] == n}):
                for op in NA_TODAY:
                    old = {a: t(shape, p, op, n, a) for a in NA_TODAY[op]}
                    new = {a: t(shape, p, op, n, a) for a in NA_NEW[op]}
                    mpi = t(shape, p, op, n, "openmpi")
                    if not any(v for v in old.values()) and not any(v for v in new.values()):
                        continue
                    bo = min((v for v in old.values() if v), default=None)
                    bn = min((v for v in new.values() if v), default=None)
                    ch = f"**{bn / bo - 1:+.0%}**" if bo and bn else "–"
                    summary[(shape, p, op, n)] = (bo, bn, mpi)
                    print(f"| {shape} | {p} | {op} | "
                          + ", ".join(f"{a} {ms(v)}" for a, v in old.items()) + " | "
                          + ", ".join(f"{a} {ms(v)}" for a, v in new.items()) + f" | {ms(mpi)} | "
                          + f"{ms(bo)} | {ms(bn)} | {ch} | "
                          + (f"{mpi / bn:.2f}" if mpi and bn else "–") + " |")
        print()
    os.makedirs(out, exist_ok=True)
    for n in sizes:
        keys = [k for k in summary if k[3] == n and k[2] in NA_TODAY]
        if not keys:
            continue
        keys.sort(key=lambda k: (k[1], shapes.index(k[0]), list(NA_TODAY).index(k[2])))
        groups = [f"{k[0]} p={k[1]} {k[2]}" for k in keys]
        series = [("today's best", "#7f7f7f"), ("network-aware best", "#1f77b4"), ("Open MPI", "#d62728")]
        vals = []
        for k in keys:
            bo, bn, mpi = summary[k]
            vals.append([1.0 if bo else None, bn / bo if bo and bn else None, mpi / bo if bo and mpi else None])
        bar_chart(os.path.join(out, f"netaware-{n >> 20}m.svg"),
                  f"Time relative to today's best algorithm, {fmt_size(n)}, 200 Mbit/s hosts",
                  groups, series, vals, "time / today's best", refs=[(1.0, "1.00"), (0.75, "0.75")],
                  ymin=0.0, ymax=2.0, note="uneven: pairs R, R/2, R/4; racks2: 100 Mbit/s uplinks; "
                  "bars above 2.0 clipped (value printed)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--results", default=os.path.join(root, "bench", "netns"))
    ap.add_argument("--out", default=os.path.join(root, "docs", "plots"))
    ap.add_argument("--tables", action="store_true", help="print Markdown tables instead of plotting")
    ap.add_argument("--peers", action="store_true",
                    help="print the tables of harp next to Open MPI and gloo (peers-*.jsonl)")
    ap.add_argument("--netaware", action="store_true",
                    help="tables and plots of the network-aware runs (netaware-*.jsonl)")
    a = ap.parse_args()
    if a.netaware:
        netaware(a.results, a.out)
        return
    if a.peers:
        peer_tables(a.results)
        return
    recs = load(a.results)
    if not recs:
        sys.exit(f"no bench records in {a.results}/*.jsonl")
    if a.tables:
        tables(recs)
        return
    os.makedirs(a.out, exist_ok=True)
    for size in (16 << 20, 64 << 20):
        plot_time_vs_p(recs, size, a.out)
        plot_ratio(recs, size, a.out)
    plot_racks(recs, a.out)
    plot_one_by_one(recs, a.out)
    plot_crossover(recs, "allreduce", ["bidirectional-exchange", "regroup-allgather"], a.out)
    plot_crossover(recs, "broadcast", ["chain", "binomial"], a.out)
    plot_crossover(recs, "allgather", ["ring", "known-total"], a.out)
    plot_uneven(recs, a.out)


if __name__ == "__main__":
    main()
