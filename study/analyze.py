#!/usr/bin/python3
"""Reads the study's runs (study/run.sh) and writes the CSV files, the SVG plots and the table.

Deterministic outputs (losses.csv, the loss columns of the table) depend only on the seed and
the schedule; the time columns come from each run's replay: the compiler's simulator over the
run's own schedule table, fed the run's measured per-instruction thread CPU times, as if every
stage had its own device. Standard library only.
"""
import argparse
import json
import math
import os
import re
import sys

COLORS = {"gpipe": "#7f7f7f", "1f1b": "#1f77b4", "pipedream": "#2ca02c", "paci": "#d62728"}


def read_metrics(folder):
    """A run's shape (from its model.paci, returned too) and its metrics.jsonl: the per-step
    records, the validation losses and the stage bytes (study/analyze_tuned.py reads runs so
    too)."""
    text = open(os.path.join(folder, "model.paci")).read()
    key = lambda k: int(re.search(r"\b%s (\d+)" % k, text).group(1))
    run = {"window": key("window"), "micro": key("micro"), "context": key("context"),
           "stages": key("stages"), "total_steps": key("steps"), "steps": [], "val": [],
           "stage_bytes": None}
    for line in open(os.path.join(folder, "metrics.jsonl")):
        rec = json.loads(line)
        if "stage_bytes" in rec:
            run["stage_bytes"] = rec["stage_bytes"]
        elif "val_loss" in rec:
            run["val"].append((rec["step"], rec["val_loss"]))
        elif "loss" in rec:
            run["steps"].append(rec)
    return run, text


def read_run(folder):
    """Everything one run left behind, parsed."""
    run, _ = read_metrics(folder)
    log = open(os.path.join(folder, "run.log")).read()
    run["pipeline_seconds"] = float(re.search(r"\(([0-9.]+) s in the pipeline", log).group(1))
    drift = re.search(r"^drift: (.*)$", log, re.M).group(1)
    run["drift"] = [int(d) for d in re.findall(r"max (\d+)", drift)]
    effective = re.findall(r"stage (\d+) max \d+ \([^)]*\)( effective (\d+))?", drift)
    run["drift_effective"] = [int(e[2]) if e[2] else run["drift"][i] for i, e in enumerate(effective)]
    # Replayed end of every optimizer step: the last stage to finish it.
    trace = json.load(open(os.path.join(folder, "replay.json")))
    ends = {}
    for e in trace["traceEvents"]:
        if e.get("cat") == "step":
            ends.setdefault(e["tid"], []).append((e["ts"] + e["dur"]) * 1e-6)
    run["step_end"] = [max(col) for col in zip(*ends.values())]
    return run


def tokens_per_step(run):
    return run["window"] * run["micro"] * run["context"]


def blocks(run, block_mb):
    """Mean training loss over consecutive blocks of block_mb micro-batches: the same token
    granularity for every window. Returns (tokens, loss, replayed seconds) per block."""
    per = block_mb // run["window"]
    out = []
    for b in range(len(run["steps"]) // per):
        chunk = run["steps"][b * per:(b + 1) * per]
        loss = sum(r["loss"] for r in chunk) / per
        last = (b + 1) * per
        out.append((last * tokens_per_step(run), loss, run["step_end"][last - 1]))
    return out


def reach(run, block_mb, target):
    for tokens, loss, seconds in blocks(run, block_mb):
        if loss <= target:
            return tokens, seconds
    return None, None


# ---- SVG -------------------------------------------------------------------------------------

def nice_ticks(lo, hi, n=5):
    span = hi - lo if hi > lo else 1.0
    step = 10 ** math.floor(math.log10(span / n))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= n:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def panel(x0, y0, w, h, title, series, xlabel, ylabel, xmax, ylo, yhi):
    """One plot: series is [(label, color, [(x, y)...])]."""
    out = ['<g transform="translate(%d,%d)">' % (x0, y0)]
    L, R, T, B = 55, 10, 25, 40
    pw, ph = w - L - R, h - T - B
    sx = lambda x: L + pw * x / xmax
    sy = lambda y: T + ph * (1 - (y - ylo) / (yhi - ylo))
    out.append('<text x="%d" y="15" font-size="13" font-weight="bold">%s</text>' % (L, title))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>' % (L, T, pw, ph))
    for t in nice_ticks(0, xmax):
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (sx(t), T, sx(t), T + ph))
        out.append('<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%g</text>' % (sx(t), T + ph + 13, t))
    for t in nice_ticks(ylo, yhi):
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (L, sy(t), L + pw, sy(t)))
        out.append('<text x="%d" y="%.1f" font-size="10" text-anchor="end">%g</text>' % (L - 4, sy(t) + 3, t))
    out.append('<text x="%.1f" y="%d" font-size="11" text-anchor="middle">%s</text>' % (L + pw / 2, h - 5, xlabel))
    out.append('<text x="12" y="%.1f" font-size="11" text-anchor="middle" transform="rotate(-90 12 %.1f)">%s</text>'
               % (T + ph / 2, T + ph / 2, ylabel))
    for i, (label, color, pts) in enumerate(series):
        pts = [(x, min(max(y, ylo), yhi)) for x, y in pts]
        path = " ".join("%.1f,%.1f" % (sx(x), sy(y)) for x, y in pts)
        out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>' % (color, path))
        ly = T + 12 + 13 * i
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>'
                   % (L + pw - 95, ly - 4, L + pw - 78, ly - 4, color))
        out.append('<text x="%d" y="%d" font-size="10">%s</text>' % (L + pw - 74, ly, label))
    out.append("</g>")
    return out


def write_svg(path, title, panels, note):
    cols = 2
    w, h = 420, 300
    rows = (len(panels) + cols - 1) // cols
    width, height = cols * w, rows * h + 45
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="10" y="18" font-size="14" font-weight="bold">%s</text>' % title,
           '<text x="10" y="34" font-size="11" fill="#555">%s</text>' % note]
    for i, p in enumerate(panels):
        out += panel((i % cols) * w, 40 + (i // cols) * h, w, h, *p)
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


# ---- main ------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--stages", type=int, required=True)
    ap.add_argument("--windows", required=True)
    ap.add_argument("--schedules", required=True)
    ap.add_argument("--target", type=float, required=True)
    ap.add_argument("--wallclock-runs", default="")
    args = ap.parse_args()
    windows = [int(k) for k in args.windows.split()]
    schedules = args.schedules.split()
    block_mb = 2 * max(windows)
    for k in windows:
        block_mb = block_mb * k // math.gcd(block_mb, k)
    runs = {}
    for k in windows:
        for s in schedules:
            runs[(s, k)] = read_run(os.path.join(args.out, "runs", "%s-k%d" % (s, k)))

    # Deterministic record: every logged loss, no times.
    with open(os.path.join(args.out, "losses.csv"), "w") as f:
        f.write("schedule,window,step,tokens,train_loss,val_loss\n")
        for (s, k), r in runs.items():
            val = dict(r["val"])
            for rec in r["steps"]:
                v = val.get(rec["step"])
                f.write("%s,%d,%d,%d,%.6f,%s\n" % (s, k, rec["step"], rec["step"] * tokens_per_step(r),
                                                   rec["loss"], "%.6f" % v if v is not None else ""))
    with open(os.path.join(args.out, "replay_times.csv"), "w") as f:
        f.write("schedule,window,step,tokens,replayed_seconds\n")
        for (s, k), r in runs.items():
            for i, t in enumerate(r["step_end"]):
                f.write("%s,%d,%d,%d,%.6f\n" % (s, k, i + 1, (i + 1) * tokens_per_step(r), t))

    rows = []
    for (s, k), r in runs.items():
        tok, sec = reach(r, block_mb, args.target)
        base_tok, base_sec = reach(runs[("1f1b", k)], block_mb, args.target) if ("1f1b", k) in runs else (None, None)
        rows.append({
            "schedule": s, "window": k,
            "final_val": r["val"][-1][1] if r["val"] else float("nan"),
            "tokens_to_target": tok, "seconds_to_target": sec,
            "speedup": base_sec / sec if sec and base_sec else None,
            "replayed_seconds": r["step_end"][-1],
            "peak_mib": [b / 2**20 for b in r["stage_bytes"]],
            "drift": r["drift"], "drift_effective": r["drift_effective"],
        })
    with open(os.path.join(args.out, "summary.csv"), "w") as f:
        f.write("schedule,window,final_val_loss,tokens_to_target,replayed_s_to_target,speedup_vs_1f1b,"
                "replayed_s_total,%s,%s\n" % (",".join("mib_stage%d" % i for i in range(args.stages)),
                                              ",".join("drift_stage%d" % i for i in range(args.stages))))
        for row in rows:
            f.write("%s,%d,%.4f,%s,%s,%s,%.3f,%s,%s\n" % (
                row["schedule"], row["window"], row["final_val"],
                row["tokens_to_target"] or "", "%.3f" % row["seconds_to_target"] if row["seconds_to_target"] else "",
                "%.3f" % row["speedup"] if row["speedup"] else "", row["replayed_seconds"],
                ",".join("%.3f" % m for m in row["peak_mib"]), ",".join(str(d) for d in row["drift"])))

    table = ["target: mean training loss <= %g over a block of %d micro-batches (%d tokens)"
             % (args.target, block_mb, block_mb * runs[(schedules[0], windows[0])]["micro"] * runs[(schedules[0], windows[0])]["context"]),
             "",
             "| schedule | K | final val loss | tokens to target | replayed s to target | speed-up vs 1f1b | replayed s (whole run) | peak MiB, stage 0 .. %d | max drift per stage |" % (args.stages - 1),
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for row in rows:
        drift = ",".join(str(d) for d in row["drift"])
        if row["drift_effective"] != row["drift"]:
            drift += " (stashed: %s)" % ",".join(str(d) for d in row["drift_effective"])
        table.append("| %s | %d | %.4f | %s | %s | %s | %.2f | %s | %s |" % (
            row["schedule"], row["window"], row["final_val"],
            row["tokens_to_target"] if row["tokens_to_target"] else "not reached",
            "%.2f" % row["seconds_to_target"] if row["seconds_to_target"] else "-",
            "%.2fx" % row["speedup"] if row["speedup"] else "-", row["replayed_seconds"],
            " ".join("%.2f" % m for m in row["peak_mib"]), drift))

    wall = []
    for name in args.wallclock_runs.split():
        r = read_run(os.path.join(args.out, "runs", name))
        wall.append("%s at %d stages: replayed %.2f s, real %.2f s in the pipeline (replay / real = %.2f)"
                    % (name, r["stages"], r["step_end"][-1], r["pipeline_seconds"], r["step_end"][-1] / r["pipeline_seconds"]))

    note = ("time axis: each run's schedule replayed by the compiler's simulator with that run's measured "
            "mean thread CPU time per instruction, as if every stage had its own device (evaluation excluded)")
    tokens_panels, time_panels = [], []
    all_blocks = {key: blocks(r, block_mb) for key, r in runs.items()}
    losses = [l for b in all_blocks.values() for _, l, _ in b] + [v for r in runs.values() for _, v in r["val"]]
    ylo, yhi = math.floor(min(losses) * 5) / 5, min(math.ceil(max(losses) * 5) / 5, math.floor(min(losses) * 5) / 5 + 3)
    for k in windows:
        series = [(s, COLORS.get(s, "#000"), [(t / 1e3, l) for t, l, _ in all_blocks[(s, k)]]) for s in schedules]
        xmax = max(p[0] for _, _, pts in series for p in pts)
        tokens_panels.append(("K = %d" % k, series, "thousand tokens", "training loss", xmax, ylo, yhi))
        series = [(s, COLORS.get(s, "#000"), [(runs[(s, k)]["step_end"][step - 1], v) for step, v in runs[(s, k)]["val"]])
                  for s in schedules]
        xmax = max(p[0] for _, _, pts in series for p in pts)
        time_panels.append(("K = %d" % k, series, "replayed seconds", "validation loss", xmax, ylo, yhi))
    write_svg(os.path.join(args.out, "loss_vs_tokens.svg"),
              "Training loss against tokens, %d stages (block means of %d micro-batches)" % (args.stages, block_mb),
              tokens_panels, "same seed, data order, hyperparameter rule and tokens for every run")
    write_svg(os.path.join(args.out, "val_loss_vs_time.svg"),
              "Validation loss against replayed time, %d stages" % args.stages, time_panels, note)

    date = open(os.path.join(args.out, "date.txt")).read().strip()
    command = open(os.path.join(args.out, "command.txt")).read().strip()
    text = ["# Study results (generated by study/run.sh; do not edit)", "",
            "date: %s  " % date, "command: `%s`  " % command, "%s" % note, ""] + table
    if wall:
        text += ["", "wall-clock check (real time on this machine's cores against the replay):", ""]
        text += ["- " + w for w in wall]
    text += ["", "![loss against tokens](loss_vs_tokens.svg)", "", "![validation loss against time](val_loss_vs_time.svg)", ""]
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(text))
    print("\n".join(text[2:-4]))


if __name__ == "__main__":
    sys.exit(main())
