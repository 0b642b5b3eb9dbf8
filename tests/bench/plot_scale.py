#!/usr/bin/env python3
"""Draws scale_bench's curves (the CSVs of --out_dir) as SVG, by hand (no
plotting library is installed by deploy/setup.sh).

  bazel run //tests/bench:scale_bench -- --out_dir=/tmp/scale
  python3 tests/bench/plot_scale.py /tmp/scale docs/scale

Each measured series is a solid line; its limit (the physical floor the
benchmark measured in the same run) the same colour, dashed.
"""
import csv
import math
import os
import sys

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
           "#7f7f7f", "#bcbd22"]


def read(path):
    """(column names, rows as dicts, notes) of one CSV written by scale_bench."""
    notes, lines = [], []
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                notes.append(line[1:].strip())
            elif line.strip():
                lines.append(line)
    # A failed point has only its keys and "failed": it is not drawn.
    rows = [r for r in csv.DictReader(lines) if None not in r.values() and "failed" not in r.values()]
    return rows, notes


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def ticks(lo, hi, log):
    if log:
        out, e = [], math.floor(math.log10(lo))
        while 10 ** e <= hi * 1.0001:
            for m in (1, 2, 5):
                v = m * 10 ** e
                if lo / 1.0001 <= v <= hi * 1.0001:
                    out.append(v)
            e += 1
        return out or [lo, hi]
    step = 10 ** math.floor(math.log10(max(hi - lo, 1e-12)))
    for m in (1, 2, 5, 10):
        if (hi - lo) / (step * m) <= 8:
            step *= m
            break
    v, out = math.floor(lo / step) * step, []
    while v <= hi + 1e-9:
        out.append(v)
        v += step
    return out


def fmt(v):
    if v >= 1e6 and v == int(v):
        e = int(round(math.log10(v)))
        return "10^%d" % e if 10 ** e == v else "%g" % v
    return "%g" % v


def chart(title, xlabel, ylabel, series, logx=False, logy=False, width=760, height=460):
    """series: [(name, [(x, y)], dashed, colour index)]."""
    pts = [p for _, s, _, _ in series for p in s if p[1] > 0 or not logy]
    if not pts:
        return None
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = (min(ys), max(ys))
    if logy:
        y0, y1 = y0 / 1.5, y1 * 1.5
    else:
        y0, y1 = 0, y1 * 1.1
    if x0 == x1:
        x1 = x0 * 2 if logx else x0 + 1
    L, R, T, B = 70, 230, 40, 50
    pw, ph = width - L - R, height - T - B

    def sx(x):
        return L + pw * ((math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0)) if logx else (x - x0) / (x1 - x0))

    def sy(y):
        y = max(y, y0)
        return T + ph - ph * ((math.log(y) - math.log(y0)) / (math.log(y1) - math.log(y0)) if logy else (y - y0) / (y1 - y0))

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="20" font-size="14">%s</text>' % (L, esc(title))]
    for t in ticks(y0, y1, logy):
        y = sy(t)
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (L, y, L + pw, y))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (L - 5, y + 4, fmt(t)))
    xt = sorted(set(xs)) if len(set(xs)) <= 12 else ticks(x0, x1, logx)
    for t in xt:
        x = sx(t)
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (x, T, x, T + ph))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (x, T + ph + 16, fmt(t)))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="black"/>' % (L, T, pw, ph))
    out.append('<text x="%d" y="%d" text-anchor="middle">%s</text>' % (L + pw / 2, height - 12, esc(xlabel)))
    out.append('<text transform="translate(16,%d) rotate(-90)" text-anchor="middle">%s</text>' % (T + ph / 2, esc(ylabel)))
    legend_y = T + 5
    for name, s, dashed, ci in series:
        s = sorted(p for p in s if p[1] > 0 or not logy)
        if not s:
            continue
        c = COLOURS[ci % len(COLOURS)]
        d = " ".join("%.1f,%.1f" % (sx(x), sy(y)) for x, y in s)
        dash = ' stroke-dasharray="5,4"' if dashed else ""
        out.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>' % (d, c, dash))
        if not dashed:
            for x, y in s:
                out.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (sx(x), sy(y), c))
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>' % (L + pw + 10, legend_y, L + pw + 35, legend_y, c, dash))
        out.append('<text x="%d" y="%d">%s</text>' % (L + pw + 40, legend_y + 4, esc(name)))
        legend_y += 16
    out.append("</svg>")
    return "\n".join(out)


def where(name):
    """'loopback', or the link of a --netns curve ('netns, tbf 10gbit')."""
    return "netns, tbf %s" % name.split("_netns_")[1] if "_netns_" in name else "loopback"


def group(rows, keys):
    out = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return out


def main(src, dst):
    os.makedirs(dst, exist_ok=True)
    written = []

    def save(name, svg):
        if svg:
            path = os.path.join(dst, name)
            with open(path, "w") as f:
                f.write(svg + "\n")
            written.append(path)

    # The loopback curves, and with --netns one per link rate
    # (null_step_netns_10gbit.csv, ...).
    for name in ["null_step"] + sorted(n[:-4] for n in os.listdir(src) if n.startswith("null_step_netns_")):
        p = os.path.join(src, name + ".csv")
        if not os.path.exists(p):
            continue
        rows, _ = read(p)
        series = []
        for i, ((ps,), g) in enumerate(sorted(group(rows, ["ps"]).items(), key=lambda kv: int(kv[0][0]))):
            series.append(("%s PS" % ps, [(int(r["workers"]), float(r["step_ms"])) for r in g], False, i))
            series.append(("%s PS limit" % ps, [(int(r["workers"]), float(r["limit_ms"])) for r in g], True, i))
        series.append(("TensorFlow 2016", [(1, 1.8), (100, 8.8)], True, 9))
        save(name + ".svg", chart("SYNC null step against worker processes (%s)" % where(name), "worker processes",
                                  "ms per step", series, logx=True, logy=True))

    for name in ["dense_step"] + sorted(n[:-4] for n in os.listdir(src) if n.startswith("dense_step_netns_")):
        p = os.path.join(src, name + ".csv")
        if not os.path.exists(p):
            continue
        rows, _ = read(p)
        series = []
        keyed = sorted(group(rows, ["model_MB", "ps"]).items(), key=lambda kv: (float(kv[0][0]), int(kv[0][1])))
        for i, ((mb, ps), g) in enumerate(keyed):
            series.append(("%s MB, %s PS" % (mb, ps), [(int(r["workers"]), float(r["step_ms"])) for r in g], False, i))
            series.append(("limit", [(int(r["workers"]), float(r["limit_ms"])) for r in g], True, i))
        save(name + ".svg", chart("SYNC dense step against worker processes (%s)" % where(name), "worker processes",
                                  "ms per step", series, logx=True, logy=True))

    p = os.path.join(src, "sparse.csv")
    if os.path.exists(p):
        rows, _ = read(p)
        for what in ("read", "write"):
            series = []
            keyed = sorted(group(rows, ["dim", "draws", "ids"]).items(),
                           key=lambda kv: (int(kv[0][0]), int(kv[0][1]), kv[0][2]))
            keyed = [kv for kv in keyed if kv[0][2] in ("uniform", "zipf1.1")]
            for i, ((dim, draws, ids), g) in enumerate(keyed):
                series.append(("dim %s, %s %s" % (dim, draws, ids),
                               [(int(r["table_rows"]), float(r[what + "_ms"])) for r in g], False, i))
            save("sparse_%s.svg" % what, chart("Sparse %ss against table size (one PS, Adam)" % what, "table rows",
                                               "ms per %s" % what, series, logx=True, logy=True))

    p = os.path.join(src, "memory.csv")
    if os.path.exists(p):
        rows, _ = read(p)
        series = [("bytes/row (RSS)", [(int(r["rows"]), float(r["bytes/row"])) for r in rows], False, 0),
                  ("raw 3 x dim x 4", [(int(r["rows"]), float(r["raw"])) for r in rows], True, 1),
                  ("PS accounting", [(int(r["rows"]), float(r["ps_counted/row"])) for r in rows], False, 2)]
        before = os.path.join(src, "memory_before.csv")  # the same curve on an older ps/server, if kept
        if os.path.exists(before):
            old, _ = read(before)
            series.append(("bytes/row before the fix", [(int(r["rows"]), float(r["bytes/row"])) for r in old], False, 3))
        save("memory.svg", chart("Hash-table bytes per row with Adam (one PS)", "rows", "bytes per row", series,
                                 logx=True, logy=False))

    p = os.path.join(src, "hotkeys.csv")
    if os.path.exists(p):
        rows, _ = read(p)
        series = []
        keyed = sorted(group(rows, ["table", "ids", "skew"]).items())
        for i, ((table, ids, skew), g) in enumerate(keyed):
            series.append(("%s %s %s" % (table, ids, skew), [(int(r["draws"]), float(r["max/mean"])) for r in g],
                           False, i))
        series.append(("goal 1.5", [(min(int(r["draws"]) for r in rows), 1.5), (max(int(r["draws"]) for r in rows), 1.5)],
                       True, 9))
        save("hotkeys.svg", chart("Busiest PS / mean PS bytes (4 PS)", "ids drawn per step", "busiest / mean",
                                  series, logx=True, logy=False))
    for w in written:
        print(w)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_scale.py CSV_DIR SVG_DIR")
    main(sys.argv[1], sys.argv[2])
