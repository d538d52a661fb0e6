#!/usr/bin/python3
"""The study's second edition (study/tuned.sh): picks each configuration's best learning rate
and writes the tables, the CSV files and the SVG plots. Reads only the run folders, so it can
be rerun with another target without training:

    study/analyze_tuned.py --target LOSS DIR            # DIR: what tuned.sh --out wrote
    study/analyze_tuned.py --median-profile DIR/runs/NAME  # (tuned.sh) one profile for NAME

Best lr: the multiplier whose run ends with the lowest final validation loss (a diverged run
is never best). Baseline: of the configurations whose schedule is --baseline (default zb-h1,
the best synchronous schedule at PACI's memory; 1f1b where the grid has none), the one with the
lowest final validation loss at its best lr; the best 1f1b configuration is the second
reference. Time to target: the replayed end of the first block of --block micro-batches whose
mean training loss is at most --target. Loss at the baseline's time: the validation loss a
configuration has at the end of the baseline's whole replayed run (what a fixed budget of
device time buys), linear between its evaluations. Losses depend only on the seed, the configuration and the code;
times on the machine. Standard library only.
"""
import argparse
import csv
import json
import math
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analyze  # noqa: E402  (the first edition's blocks, reach and SVG panels)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shown_dir(path):
    """The study folder as results.md names it: relative to the repository where it lies in it."""
    rel = os.path.relpath(os.path.abspath(path), ROOT)
    return path if rel.startswith("..") else rel


PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]


# ---- the per-configuration profile the replay uses -------------------------------------------

def median_profile(config_dir):
    """Per stage and link, the median of what the configuration's finished runs measured: the
    run folders under config_dir (tuned.sh's calibration passes, or lr-xM training runs),
    version 1 of the profile format (stage lines, with W's seconds where they have them, and link
    lines)."""
    runs = sorted(d for d in os.listdir(config_dir) if os.path.isdir(os.path.join(config_dir, d)))
    stage, link, w, used = {}, {}, {}, []
    for d in runs:
        folder = os.path.join(config_dir, d)
        path = os.path.join(folder, "profile.txt")
        if os.path.exists(os.path.join(folder, "diverged.txt")) or not os.path.exists(path):
            continue
        used.append(d)
        for line in open(path):
            m = re.match(r"stage (\d+) fwd (\S+) bwd (\S+) step (\S+)(?: w (\S+))?", line)
            if m:
                stage.setdefault(int(m.group(1)), []).append([float(x) for x in m.group(2, 3, 4)])
                if m.group(5):
                    w.setdefault(int(m.group(1)), []).append(float(m.group(5)))
            m = re.match(r"link (\d+) (\S+)", line)
            if m:
                link.setdefault(int(m.group(1)), []).append(float(m.group(2)))
    if not used:
        return None
    out = ["# per-stage median of the costs measured by %s (study/analyze_tuned.py)" % " ".join(used)]
    for s in sorted(stage):
        f, b, p = (statistics.median(col) for col in zip(*stage[s]))
        line = "stage %d fwd %.9g bwd %.9g step %.9g" % (s, f, b, p)
        if len(w.get(s, [])) == len(stage[s]):  # a zero-bubble W's seconds, measured by every run
            line += " w %.9g" % min(statistics.median(w[s]), b)
        out.append(line)
    for l in sorted(link):
        out.append("link %d %.9g" % (l, statistics.median(link[l])))
    return "\n".join(out) + "\n"


# ---- reading the runs -----------------------------------------------------------------------

def read_run(folder):
    """One run's losses, memory, drift and times; diverged runs keep the steps they logged."""
    run, text = analyze.read_metrics(folder)
    run.update({"drift": None, "drift_effective": None,
                "lrs": re.search(r"^\s*optimizer (.*)$", text, re.M).group(1)})
    diverged = os.path.join(folder, "diverged.txt")
    run["diverged"] = open(diverged).read().strip() if os.path.exists(diverged) else None
    done = len(run["steps"]) == run["total_steps"] and run["val"] and run["val"][-1][0] == run["total_steps"]
    run["final_val"] = run["val"][-1][1] if done and not run["diverged"] else None
    if run["final_val"] is not None and not math.isfinite(run["final_val"]):
        run["final_val"] = None
    log = os.path.join(folder, "run.log")
    drift = re.search(r"^drift: (.*)$", open(log).read(), re.M) if os.path.exists(log) else None
    if drift:
        run["drift"] = [int(d) for d in re.findall(r"max (\d+)", drift.group(1))]
        effective = re.findall(r"stage (\d+) max \d+ \([^)]*\)( effective (\d+))?", drift.group(1))
        run["drift_effective"] = [int(e[2]) if e[2] else run["drift"][i] for i, e in enumerate(effective)]
    times = os.path.join(folder, "time.txt")
    run["wall"], run["cpu"] = None, None
    if os.path.exists(times):
        wall, user, sys_ = (float(x) for x in open(times).read().split()[-3:])
        run["wall"], run["cpu"] = wall, user + sys_
    return run


def replay_step_ends(config_dir):
    """The replayed end of every optimizer step (the last stage to finish it), or None."""
    path = os.path.join(config_dir, "replay.json")
    if not os.path.exists(path):
        return None
    ends = {}
    for e in json.load(open(path))["traceEvents"]:
        if e.get("cat") == "step":
            ends.setdefault(e["tid"], []).append((e["ts"] + e["dur"]) * 1e-6)
    return [max(col) for col in zip(*ends.values())]


# ---- the rules -------------------------------------------------------------------------------

def best_run(runs):
    """The run with the lowest final validation loss (ties: the smaller multiplier); diverged
    or unfinished runs never win. runs: [(multiplier, run)]. Returns (multiplier, run) or None."""
    finished = [(r["final_val"], m, r) for m, r in runs if r["final_val"] is not None]
    if not finished:
        return None
    _, m, r = min(finished, key=lambda t: (t[0], t[1]))
    return m, r


def baseline(best, schedule_of, schedule):
    """Of the configurations of `schedule` at their best lr, the one with the lowest final
    validation loss (ties: the first declared). best: {config: (multiplier, run) or None}, in grid
    order."""
    candidates = [(b[1]["final_val"], i, c) for i, (c, b) in enumerate(best.items())
                  if b and schedule_of[c] == schedule]
    return min(candidates)[2] if candidates else None


# ---- SVG: final validation loss against the learning rate -----------------------------------

def lr_panel(series, multipliers, title, xlabel="learning rate, x each optimizer's base (log scale; the dot: the best)"):
    w, h, L, R, T, B = 840, 380, 60, 170, 30, 45
    pw, ph = w - L - R, h - T - B
    xs = [math.log2(m) for m in multipliers]
    xlo, xhi = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    ys = [y for _, _, pts, _ in series for _, y in pts]
    ylo = math.floor(min(ys) * 10) / 10 if ys else 0
    yhi = math.ceil(max(ys) * 10) / 10 if ys else 1
    yhi = max(yhi, ylo + 0.1)
    sx = lambda m: L + pw * (math.log2(m) - xlo) / (xhi - xlo)
    sy = lambda y: T + ph * (1 - (y - ylo) / (yhi - ylo))
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (w, h),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="14" font-weight="bold">%s</text>' % (L, title),
           '<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>' % (L, T, pw, ph)]
    for m in multipliers:
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (sx(m), T, sx(m), T + ph))
        out.append('<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%gx</text>' % (sx(m), T + ph + 13, m))
    for t in analyze.nice_ticks(ylo, yhi):
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (L, sy(t), L + pw, sy(t)))
        out.append('<text x="%d" y="%.1f" font-size="10" text-anchor="end">%g</text>' % (L - 4, sy(t) + 3, t))
    out.append('<text x="%.1f" y="%d" font-size="11" text-anchor="middle">%s</text>' % (L + pw / 2, h - 8, xlabel))
    out.append('<text x="14" y="%.1f" font-size="11" text-anchor="middle" transform="rotate(-90 14 %.1f)">'
               'final validation loss</text>' % (T + ph / 2, T + ph / 2))
    for i, (label, color, pts, best) in enumerate(series):
        if pts:
            path = " ".join("%.1f,%.1f" % (sx(m), sy(y)) for m, y in pts)
            out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>' % (color, path))
            for m, y in pts:
                out.append('<circle cx="%.1f" cy="%.1f" r="%d" fill="%s"/>' % (sx(m), sy(y), 4 if m == best else 2, color))
        ly = T + 12 + 14 * i
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>'
                   % (L + pw + 10, ly - 4, L + pw + 28, ly - 4, color))
        out.append('<text x="%d" y="%d" font-size="10">%s</text>' % (L + pw + 32, ly, label))
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ---- main ------------------------------------------------------------------------------------

def fmt(x, f="%.2f", none="-"):
    return f % x if x is not None else none


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", type=float, help="mean training loss over a block")
    ap.add_argument("--block", type=int, default=32, help="micro-batches per block (default 32)")
    ap.add_argument("--baseline", default="zb-h1", help="the baseline's schedule (default zb-h1; 1f1b if the grid has none)")
    ap.add_argument("--median-profile", metavar="CONFIG_DIR", help="print the replay profile of one configuration")
    ap.add_argument("dir", nargs="?")
    args = ap.parse_args()
    if args.median_profile:
        text = median_profile(args.median_profile)
        if text is None:
            print("analyze_tuned: no finished run in %s to take costs from" % args.median_profile, file=sys.stderr)
            return 1
        sys.stdout.write(text)
        return 0
    if args.dir is None or args.target is None:
        ap.error("give --target LOSS and the study's folder")
    out = args.dir

    grid = list(csv.DictReader(open(os.path.join(out, "grid.csv"))))
    configs, schedule_of, runs = [], {}, {}
    for row in grid:
        c = row["config"]
        if c not in schedule_of:
            configs.append(c)
            schedule_of[c] = row["schedule"]
            runs[c] = []
        runs[c].append((float(row["lr_multiplier"]), read_run(os.path.join(out, row["folder"]))))
    step_end = {c: replay_step_ends(os.path.join(out, "runs", c)) for c in configs}
    multipliers = sorted({m for c in configs for m, _ in runs[c]})
    first = runs[configs[0]][0][1]
    if args.block % first["window"] != 0:
        ap.error("--block %d is not a multiple of the window %d" % (args.block, first["window"]))

    def reach(c, r):
        if step_end[c] is None:
            return None, None
        return analyze.reach(dict(r, step_end=step_end[c]), args.block, args.target)

    def lowest_block(c, r):
        b = analyze.blocks(dict(r, step_end=step_end[c] or [0.0] * r["total_steps"]), args.block)
        return min(l for _, l, _ in b) if b else None

    # Deterministic record: every logged loss of every run, no times.
    with open(os.path.join(out, "losses.csv"), "w") as f:
        f.write("config,lr_multiplier,step,tokens,train_loss,val_loss\n")
        for c in configs:
            for m, r in runs[c]:
                val = dict(r["val"])
                for rec in r["steps"]:
                    v = val.get(rec["step"])
                    f.write("%s,%g,%d,%d,%.6f,%s\n" % (c, m, rec["step"], rec["step"] * analyze.tokens_per_step(r),
                                                       rec["loss"], "%.6f" % v if v is not None else ""))

    best = {c: best_run(runs[c]) for c in configs}
    base_schedule = args.baseline if baseline(best, schedule_of, args.baseline) else "1f1b"
    base = baseline(best, schedule_of, base_schedule)
    base_run = best[base][1] if base else None
    base_tok, base_sec = reach(base, base_run) if base else (None, None)
    flush = baseline(best, schedule_of, "1f1b")  # 1F1B-flush: the second reference
    flush_sec = reach(flush, best[flush][1])[1] if flush else None
    base_total = step_end[base][-1] if base and step_end[base] else None

    def loss_at(c, r, seconds):
        """c's validation loss at `seconds` of replayed time: linear between its evaluations
        (the same held-out tokens at every point, unlike a training block), its last one once
        the run has ended; None before its first."""
        if seconds is None or step_end[c] is None:
            return None
        points = [(step_end[c][s - 1], v) for s, v in r["val"]]
        before = [(t, v) for t, v in points if t <= seconds * (1 + 1e-9)]
        after = [(t, v) for t, v in points if t > seconds * (1 + 1e-9)]
        if not before:
            return None
        if not after:
            return before[-1][1]
        (t0, v0), (t1, v1) = before[-1], after[0]
        return v0 + (v1 - v0) * (seconds - t0) / (t1 - t0)

    # The lr table: every configuration at every multiplier.
    lr_rows = []
    for c in configs:
        for m, r in runs[c]:
            tok, sec = reach(c, r)
            lr_rows.append({"config": c, "m": m, "run": r, "tokens": tok, "seconds": sec,
                            "lowest_block": lowest_block(c, r), "best": best[c] is not None and best[c][0] == m})
    with open(os.path.join(out, "lr_table.csv"), "w") as f:
        f.write("config,lr_multiplier,final_val_loss,diverged,tokens_to_target,replayed_s_to_target,"
                "lowest_block_train_loss,best,wall_s,cpu_s,optimizer\n")
        for row in lr_rows:
            r = row["run"]
            f.write('%s,%g,%s,%s,%s,%s,%s,%d,%s,%s,"%s"\n' % (
                row["config"], row["m"], fmt(r["final_val"], "%.4f", ""), 1 if r["diverged"] else 0,
                row["tokens"] or "", fmt(row["seconds"], "%.6f", ""), fmt(row["lowest_block"], "%.4f", ""),
                row["best"], fmt(r["wall"], "%.1f", ""), fmt(r["cpu"], "%.1f", ""), r["lrs"].replace('"', '""')))

    # The summary: every configuration at its best lr.
    stages = first["stages"]
    rows = []
    for c in configs:
        if not best[c]:
            rows.append({"config": c, "m": None})
            continue
        m, r = best[c]
        tok, sec = reach(c, r)
        rows.append({"config": c, "m": m, "run": r, "tokens": tok, "seconds": sec,
                     "speedup": base_sec / sec if sec and base_sec else None,
                     "speedup_flush": flush_sec / sec if sec and flush_sec else None,
                     "loss_at_base_time": loss_at(c, r, base_total),
                     "gap": 100 * (r["final_val"] / base_run["final_val"] - 1) if base_run else None,
                     "total": step_end[c][-1] if step_end[c] else None})
    with open(os.path.join(out, "summary.csv"), "w") as f:
        f.write("config,schedule,best_lr_multiplier,final_val_loss,gap_vs_baseline_pct,tokens_to_target,"
                "replayed_s_to_target,speedup_vs_baseline,replayed_s_total,speedup_vs_1f1b,"
                "val_loss_at_baseline_time,%s,%s\n"
                % (",".join("mib_stage%d" % i for i in range(stages)), ",".join("drift_stage%d" % i for i in range(stages))))
        for row in rows:
            if row["m"] is None:
                f.write("%s,%s,,,,,,,,,,%s,%s\n" % (row["config"], schedule_of[row["config"]], "," * (stages - 1), "," * (stages - 1)))
                continue
            r = row["run"]
            f.write("%s,%s,%g,%.4f,%s,%s,%s,%s,%s,%s,%s,%s,%s\n" % (
                row["config"], schedule_of[row["config"]], row["m"], r["final_val"], fmt(row["gap"], "%.3f", ""),
                row["tokens"] or "", fmt(row["seconds"], "%.6f", ""), fmt(row["speedup"], "%.4f", ""),
                fmt(row["total"], "%.6f", ""), fmt(row["speedup_flush"], "%.4f", ""),
                fmt(row["loss_at_base_time"], "%.4f", ""),
                ",".join("%.3f" % (b / 2**20) for b in r["stage_bytes"]) if r["stage_bytes"] else "," * (stages - 1),
                ",".join(str(d) for d in r["drift"]) if r["drift"] else "," * (stages - 1)))

    tokens_per_block = args.block * first["micro"] * first["context"]
    text = ["# Study results (generated by study/tuned.sh and study/analyze_tuned.py; do not edit)", "",
            "date: %s  " % open(os.path.join(out, "date.txt")).read().strip(),
            "command: `%s`  " % open(os.path.join(out, "command.txt")).read().strip(),
            "analysis: `study/analyze_tuned.py --target %g --block %d%s %s`  "
            % (args.target, args.block, "" if args.baseline == "zb-h1" else " --baseline " + args.baseline, shown_dir(out)),
            "time axis: each configuration's schedule replayed by the compiler's simulator with the per-stage median "
            "of the thread CPU times per instruction %s, as if every stage had its own device "
            "(evaluation excluded)" % ("of its calibration runs (every configuration's program, one after another "
                                       "after the training, three times; study/tuned.sh)"
                                       if os.path.isdir(os.path.join(out, "calibration"))
                                       else "its runs measured"), "",
            "target: mean training loss <= %g over a block of %d micro-batches (%d tokens). Best lr: the lowest final "
            "validation loss. Baseline: %s.%s Loss at the baseline's time: the validation loss each has when the "
            "baseline's whole replayed run ends%s, linear between its evaluations (its last once it has ended)."
            % (args.target, args.block, tokens_per_block,
               "`%s` at lr x%g (the %s configuration with the lowest final validation loss at its best lr)"
               % (base, best[base][0], base_schedule) if base else "none (no %s configuration finished a run)" % base_schedule,
               " Second reference (1F1B-flush): `%s` at lr x%g." % (flush, best[flush][0]) if flush and flush != base else "",
               " (%s s)" % fmt(base_total) if base_total else ""),
            ""]
    if base and base_sec is None:
        text += ["The baseline does not reach the target: no speed-up can be given; choose a higher --target "
                 "(the lr table's last column is each run's lowest block loss).", ""]
    text += ["| configuration | best lr | final val loss | gap vs %s | tokens to target | replayed s to target "
             "| speed-up vs %s | speed-up vs 1f1b | replayed s (whole run) | loss at the baseline's time "
             "| peak MiB, stage 0 .. %d | max drift per stage |" % (base_schedule, base_schedule, stages - 1),
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for row in rows:
        if row["m"] is None:
            text.append("| %s | diverged or unfinished at every lr | - | - | - | - | - | - | - | - | - | - |" % row["config"])
            continue
        r = row["run"]
        drift = ",".join(str(d) for d in r["drift"]) if r["drift"] else "-"
        if r["drift_effective"] and r["drift_effective"] != r["drift"]:
            drift += " (effective: %s)" % ",".join(str(d) for d in r["drift_effective"])
        text.append("| %s | x%g | %.4f | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            row["config"], row["m"], r["final_val"], fmt(row["gap"], "%+.2f%%"),
            row["tokens"] or "not reached", fmt(row["seconds"]), fmt(row["speedup"], "%.2fx"),
            fmt(row["speedup_flush"], "%.2fx"), fmt(row["total"]), fmt(row["loss_at_base_time"], "%.4f"),
            " ".join("%.2f" % (b / 2**20) for b in r["stage_bytes"]) if r["stage_bytes"] else "-", drift))
    text += ["", "Every configuration at every learning rate (x the base of configs.txt; the best in bold):", "",
             "| configuration | lr | optimizer | final val loss | tokens to target | replayed s to target | lowest block loss |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    for row in lr_rows:
        r = row["run"]
        val = "diverged (%s)" % r["diverged"].split("run: error: ")[-1].split(";")[0] if r["diverged"] else fmt(r["final_val"], "%.4f")
        if row["best"]:
            val = "**%s**" % val
        text.append("| %s | x%g | `%s` | %s | %s | %s | %s |" % (
            row["config"], row["m"], r["lrs"], val, row["tokens"] or "not reached", fmt(row["seconds"]),
            fmt(row["lowest_block"], "%.4f")))
    walls = [r["wall"] for c in configs for _, r in runs[c] if r["wall"] is not None]
    cpus = [r["cpu"] for c in configs for _, r in runs[c] if r["cpu"] is not None]
    if walls:
        text += ["", "training: %d runs, %.1f min of wall time and %.1f min of CPU time in all (this machine, "
                 "its load at the time)" % (len(walls), sum(walls) / 60, sum(cpus) / 60)]

    # Plots: the lr curve, and the best runs' curves.
    colors = {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(configs)}
    series = [(c, colors[c], [(m, r["final_val"]) for m, r in runs[c] if r["final_val"] is not None],
               best[c][0] if best[c] else None) for c in configs]
    with open(os.path.join(out, "lr_curve.svg"), "w") as f:
        f.write(lr_panel(series, multipliers, "Final validation loss against the learning rate, p = %d, K = %d"
                         % (stages, first["window"])))
    finished = [c for c in configs if best[c]]
    tok_series = [("%s x%g" % (c, best[c][0]), colors[c],
                   [(t / 1e3, l) for t, l, _ in analyze.blocks(dict(best[c][1], step_end=step_end[c]), args.block)])
                  for c in finished if step_end[c]]
    time_series = [("%s x%g" % (c, best[c][0]), colors[c],
                    [(step_end[c][s - 1], v) for s, v in best[c][1]["val"]]) for c in finished if step_end[c]]
    if any(pts for _, _, pts in tok_series) and any(pts for _, _, pts in time_series):
        losses = [l for _, _, pts in tok_series + time_series for _, l in pts]
        ylo = math.floor(min(losses) * 5) / 5
        yhi = min(math.ceil(max(losses) * 5) / 5, ylo + 2)
        xt = max(p[0] for _, _, pts in tok_series for p in pts) or 1
        xs = max(p[0] for _, _, pts in time_series for p in pts) or 1
        analyze.write_svg(os.path.join(out, "best_runs.svg"),
                          "Each configuration at its best learning rate, p = %d, K = %d" % (stages, first["window"]),
                          [("training loss (block means of %d micro-batches)" % args.block, tok_series,
                            "thousand tokens", "training loss", xt, ylo, yhi),
                           ("validation loss", time_series, "replayed seconds", "validation loss", xs, ylo, yhi)],
                          "target %g; same seed, data order and tokens for every run" % args.target)
    text += ["", "![final validation loss against the learning rate](lr_curve.svg)", "",
             "![the best runs](best_runs.svg)", ""]
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(text))
    print("\n".join(text[2:-4]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
