#!/usr/bin/env python3
"""Plot the emulated-cluster benchmarks (scripts/bench-netns.sh) as hand-written SVG.

    scripts/plot-benchmarks.py [--results docs/results] [--out docs/plots]

Reads every docs/results/*.jsonl (records with "kind": "bench"; "iperf" and "error" records
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

Only records without passthrough arguments ("extra" empty) are plotted; when a cell was
measured more than once the last record wins.  Each flat figure is drawn once per TCP
congestion control found (one panel row each).  No third-party packages.
"""
import argparse
import glob
import json
import math
import os
import sys
from collections import OrderedDict
from xml.sax.saxutils import escape

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
          "#17becf", "#7f7f7f", "#bcbd22"]
FONT = "font-family='DejaVu Sans, Arial, sans-serif'"


def load(results_dir):
    recs = OrderedDict()
    for path in sorted(glob.glob(os.path.join(results_dir, "*.jsonl"))):
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
                if r.get("kind") != "bench" or r.get("extra"):
                    continue
                key = (r["shape"], r.get("tcp_cc", "?"), r["op"], r["algorithm"], r["bytes"], r["p"])
                recs.pop(key, None)
                recs[key] = r
    return list(recs.values())


def fmt_size(n):
    for unit, s in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {s}"
    return f"{n} B"


def fmt_time(s):
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
    while 10 ** e <= hi * 1.0001:
        for m in (1, 2, 5):
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
    flat = [r for r in recs if r["shape"] == "flat" and r["bytes"] == size]
    if not flat:
        return
    cl = ccs(flat)
    ops = [o for o in ALGS if any(r["op"] == o for r in flat)]
    pw, ph, mx, my = 210, 170, 75, 70
    svg = Svg(mx + len(ops) * (pw + 70) + 10, 50 + len(cl) * (ph + my + 40) + 40)
    svg.text(svg.w / 2, 22, f"Median time vs p, {fmt_size(size)}, flat 200 Mbit/s per host "
             f"(dashed: bound from measured B)", 14, "middle", "bold")
    for ci, cc in enumerate(cl):
        rows = [r for r in flat if r.get("tcp_cc", "?") == cc]
        y0 = 60 + ci * (ph + my + 40)
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
                        svg.text(pan.px(p) + 5, pan.py(t) - 5, f"{ratio:.2f}×", 9, color=c)
                items.append((alg, c, None))
            legend(svg, x0, y0 + ph + 46, items)
    svg.save(os.path.join(out, f"time-vs-p-{size >> 20}m.svg"))


def bar_chart(path, title, groups, series, values, ylabel, refs=(), ymax=None, note=""):
    """groups: list of group labels; series: list of (label, color); values[g][s] = v or None."""
    n_g, n_s = len(groups), len(series)
    bw = 14
    gw = n_s * bw + 18
    mx, my, ph = 70, 60, 260
    pw = max(n_g * gw, 300)
    svg = Svg(mx + pw + 30, my + ph + 120 + 16 * ((n_s + 3) // 4))
    svg.text(svg.w / 2, 22, title, 14, "middle", "bold")
    if note:
        svg.text(svg.w / 2, 40, note, 11, "middle", color="#555")
    vmax = ymax or max([v for row in values for v in row if v is not None] + [r for r, _ in refs]) * 1.08
    pan = Panel(svg, mx, my, pw, ph, (0, pw), (0, vmax), xticks=[], yfmt=lambda v: f"{v:g}",
                ylabel=ylabel)
    for gi, g in enumerate(groups):
        gx = mx + gi * gw + 9
        for si, (sl, c) in enumerate(series):
            v = values[gi][si]
            if v is None:
                continue
            x = gx + si * bw
            top = pan.py(min(v, vmax))
            svg.rect(x, top, bw - 2, my + ph - top, c, title=f"{g} {sl}: {v:.3f}")
            if v > vmax:
                svg.text(x + bw / 2, my + 10, f"{v:.1f}", 8, "middle")
        svg.text(gx + n_s * bw / 2, my + ph + 12, g, 10, "end", rotate=-35)
    for r, lab in refs:
        y = pan.py(r)
        svg.line(mx, y, mx + pw, y, "#000", 1, "4,3")
        svg.text(mx + pw + 2, y + 3, lab, 9)
    legend(svg, mx, my + ph + 95, [(sl, c, None) for sl, c in series], cols=4, colw=160)
    svg.save(path)


def plot_ratio(recs, size, out):
    flat = [r for r in recs if r["shape"] == "flat" and r["bytes"] == size and r.get("ratio")]
    if not flat:
        return
    groups, keys = [], []
    for op in ALGS:
        for alg in algs_for(flat, op):
            groups.append(f"{op} {alg}" if op != alg else op)
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
              "time / bound", refs=[(1.0, "1.00"), (1.05, "1.05")], ymax=3.2,
              note="bound from measured B; bars above 3.2 are clipped (value printed)")


def plot_racks(recs, out):
    rk = [r for r in recs if r["shape"].startswith("racks") and r["op"] == "broadcast"
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
            and r["bytes"] >= (16 << 20)]
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
            items.append((alg + " (label: time·B/n)", c, None))
        legend(svg, x0, 50 + ph + 48, items, cols=2, colw=150)
    svg.save(os.path.join(out, "one-by-one-vs-chain.svg"))


def plot_crossover(recs, op, algs, out):
    rr = [r for r in recs if r["shape"] == "flat" and r["op"] == op and r["algorithm"] in algs]
    if not rr:
        return
    cl = ccs(rr)
    ps = sorted({r["p"] for r in rr})
    pw, ph = 240, 200
    svg = Svg(90 + len(ps) * (pw + 80), 60 + len(cl) * (ph + 110))
    svg.text(svg.w / 2, 22, f"{op}: median time vs size (log-log), flat 200 Mbit/s", 14, "middle", "bold")
    for ci, cc in enumerate(cl):
        for pi, p in enumerate(ps):
            sub = [r for r in rr if r["p"] == p and r.get("tcp_cc", "?") == cc]
            if not sub:
                continue
            xs = sorted({r["bytes"] for r in sub})
            ts = [r["median_s"] for r in sub]
            x0, y0 = 90 + pi * (pw + 80), 55 + ci * (ph + 110)
            pan = Panel(svg, x0, y0, pw, ph, (min(xs) / 1.3, max(xs) * 1.3),
                        (min(ts) / 1.5, max(ts) * 1.5), xlog=True, ylog=True,
                        title=f"p={p}, tcp {cc}", xlabel="bytes", xticks=xs,
                        xfmt=lambda v: fmt_size(int(v)).replace(" ", "").replace("KiB", "k").replace("MiB", "m"),
                        ylabel="median time" if pi == 0 else "")
            items = []
            for ai, alg in enumerate(algs):
                pts = sorted((r["bytes"], r["median_s"]) for r in sub if r["algorithm"] == alg)
                c = COLORS[ai]
                svg.polyline([(pan.px(x), pan.py(t)) for x, t in pts], c)
                items.append((alg, c, None))
            legend(svg, x0, y0 + ph + 48, items)
    svg.save(os.path.join(out, f"crossover-{op}.svg"))


def plot_uneven(recs, out):
    un = [r for r in recs if "uneven" in r["shape"] and r.get("ratio")]
    if not un:
        return
    groups, vals = [], []
    keys = sorted({(r["op"], r["algorithm"], r["bytes"], r["p"], r.get("tcp_cc", "?")) for r in un},
                  key=lambda k: (list(ALGS).index(k[0]) if k[0] in ALGS else 99, k[1], k[2], k[3]))
    shapes = sorted({r["shape"] for r in un})
    for op, alg, n, p, cc in keys:
        row = []
        f = next((r for r in recs if r["shape"] == "flat" and (r["op"], r["algorithm"], r["bytes"], r["p"],
                  r.get("tcp_cc", "?")) == (op, alg, n, p, cc)), None)
        row.append(f["ratio"] if f else None)
        for sh in shapes:
            u = next((r for r in un if r["shape"] == sh and (r["op"], r["algorithm"], r["bytes"], r["p"],
                      r.get("tcp_cc", "?")) == (op, alg, n, p, cc)), None)
            row.append(u["ratio"] if u else None)
        groups.append(f"{op} {alg} {fmt_size(n)} p={p}")
        vals.append(row)
    series = [("flat", "#1f77b4")] + [(sh, COLORS[(i + 1) % len(COLORS)]) for i, sh in enumerate(shapes)]
    bar_chart(os.path.join(out, "uneven-vs-flat.svg"),
              "Uneven links (per-pair R, R/2, R/4) vs flat: time / flat bound", groups, series, vals,
              "time / flat bound", refs=[(1.0, "1.00")],
              note="the bound is the flat network's; the excess is what the algorithm loses to slow pairs")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--results", default=os.path.join(root, "docs", "results"))
    ap.add_argument("--out", default=os.path.join(root, "docs", "plots"))
    a = ap.parse_args()
    recs = load(a.results)
    if not recs:
        sys.exit(f"no bench records in {a.results}/*.jsonl")
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
