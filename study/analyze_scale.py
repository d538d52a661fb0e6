#!/usr/bin/python3
"""The study's batch-scaling edition, second edition (study/scale.sh): per optimizer, lr rule
and comparison (equal tokens, equal steps), the final validation loss at D = 1, 2, 4, 8
replicas against D = 1's, the largest D within --threshold percent of it, the gradient noise
scale of the D = 1 run beside it, DGC against dense, and the issue's goals, each met or not.
Reads only the run folders, so it can be rerun without training:

    study/analyze_scale.py [--threshold PCT] [--noise-window PCT] DIR   # DIR: scale.sh --out
    study/analyze_scale.py --best-d1 NAME DIR      # (scale.sh) NAME's base lr multiplier

The reference: each optimizer's D = 1 run with the lowest final validation loss (its base lr).
Equal tokens: a run of S / D steps is compared with the reference's validation loss after the
same training tokens; equal steps: a run of S steps with the reference's after the same steps
(linear between evaluations; both are the reference's final loss when the grid is whole).
Within: loss / reference - 1 <= PCT / 100 (a diverged run never is). The largest D of an
optimizer, rule and comparison is the largest D such that every D' <= D of the grid is
within; the optimizer's is the larger over its rules. The noise scale: the mean of the
reference run's logged B_simple (sequences) over its last --noise-window percent of steps.
DGC: expected sends per weight = the sum over the run's steps of the step's density (the
warm-up's included); bytes = exchange_bytes_per_step x steps, the run's own counters.
Standard library only.
"""
import argparse
import csv
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analyze_tuned  # noqa: E402  (reading a run, the panel)

BYTES_GOAL = 100.0   # DGC: at least this many times fewer bytes than dense
NOISE_GOAL = 2.0     # the noise scale within this factor of the largest batch within 1%
LARGE_BATCH_D = 8    # LAMB or LANS within 1% up to this many times the base batch, equal steps


def read_grid(out):
    """Every run of grid.csv, parsed (scale.sh's columns)."""
    runs = []
    for row in csv.DictReader(open(os.path.join(out, "grid.csv"))):
        folder = os.path.join(out, row["folder"])
        r = analyze_tuned.read_run(folder)
        text = open(os.path.join(folder, "model.paci")).read()
        d = int(row["replicas"])
        r.update({"optimizer": row["optimizer"], "rule": row["rule"], "D": d, "m": float(row["lr_multiplier"]),
                  "m_text": row["lr_multiplier"], "comparison": row["comparison"], "dgc": row["compression"] == "dgc",
                  "folder": row["folder"], "kind": re.search(r"^\s*optimizer (\w+)", text, re.M).group(1)})
        dgc = re.search(r"compression dgc \{([^}]*)\}", text)
        r["density"] = float(re.search(r"density ([0-9.eE+-]+)", dgc.group(1)).group(1)) if dgc else None
        w = re.search(r"warmup_steps (\d+)", dgc.group(1)) if dgc else None
        r["dgc_warmup"] = int(w.group(1)) if w else 0
        r["batch"] = r["micro"] * r["window"] * d  # sequences per optimizer step
        per_step = r["batch"] * r["context"]
        r["val_tokens"] = [(s * per_step, v) for s, v in r["val"]]
        r["final_tokens"] = r["total_steps"] * per_step
        r["peak_lr"] = max((rec.get("lr", 0) for rec in r["steps"]), default=None)
        r["exchange"] = exchange_bytes(os.path.join(folder, "metrics.jsonl"))
        runs.append(r)
    return runs


def exchange_bytes(path):
    """Replica 0's bytes written per step by the exchange (metrics exchange_bytes_per_step)."""
    for line in open(path):
        rec = json.loads(line)
        if "exchange_bytes_per_step" in rec:
            return rec["exchange_bytes_per_step"][0]
    return None


def base_runs(runs):
    """Each optimizer's D = 1 reference: its D = 1 run with the lowest final validation loss
    (ties: the smaller multiplier); diverged or unfinished runs never win."""
    best = {}
    for r in runs:
        if r["D"] == 1 and r["final_val"] is not None:
            b = best.get(r["optimizer"])
            if b is None or (r["final_val"], r["m"]) < (b["final_val"], b["m"]):
                best[r["optimizer"]] = r
    return best


def interpolate(pts, x):
    """The y of pts [(x, y)] at x, linear between points; None outside them."""
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    if pts and pts[-1][0] == x:
        return pts[-1][1]
    return None


def reference(run, base, comparison):
    """The reference's validation loss at the run's end: after the same tokens (tokens) or the
    same steps (steps)."""
    if comparison == "steps":
        return interpolate(base["val"], run["total_steps"])
    return interpolate(base["val_tokens"], run["final_tokens"])


def compare(run, base, comparison):
    """(reference loss, relative gap) of run against its D = 1 base."""
    if run["final_val"] is None or base is None:
        return None, None
    ref = reference(run, base, comparison)
    if ref is None:
        return None, None
    return ref, run["final_val"] / ref - 1


def within(gap, threshold):
    return gap is not None and gap <= threshold / 100 + 1e-12


def largest_replicas(runs, base, comparison, threshold):
    """The largest D such that every D' <= D in runs (one optimizer, rule and comparison,
    dense) is within the threshold of base; 1 when the smallest D > 1 already is not."""
    largest = 1
    for r in sorted(runs, key=lambda r: r["D"]):
        if not within(compare(r, base, comparison)[1], threshold):
            break
        largest = r["D"]
    return largest


def noise_scale(base, window_pct):
    """(first step, last step, mean, min, max) of the base run's logged B_simple over its last
    window_pct percent of steps; the values None where it logged none there."""
    last = base["total_steps"]
    first = last - last * window_pct // 100 + 1
    values = [rec["noise_scale"] for rec in base["steps"]
              if first <= rec["step"] <= last and isinstance(rec.get("noise_scale"), (int, float))]
    if not values:
        return first, last, None, None, None
    return first, last, sum(values) / len(values), min(values), max(values)


def dgc_density(density, warmup, t):
    """Step t's density (from 1): runtime/paci_dgc.h's warm-up."""
    start = 0.25 if density < 0.25 else 1.0
    if warmup <= 0 or t > warmup:
        return density
    return start * (density / start) ** ((t - 1) / warmup)


def sends_per_weight(density, warmup, steps):
    """(expected sends per weight over the run, of them after the warm-up): the sum of the
    steps' densities (a weight's share of the k = density x n entries a step sends)."""
    during = sum(dgc_density(density, warmup, t) for t in range(1, min(warmup, steps) + 1))
    after = density * max(0, steps - warmup)
    return during + after, after


def fmt(x, f="%.4f", none="-"):
    return f % x if x is not None else none


def verdict(ok):
    return "met" if ok else "not met"


def plot(out, comparison, runs, base, names, rules):
    """Final validation loss against D, one line per optimizer and rule."""
    ds = sorted({r["D"] for r in runs if not r["dgc"]})
    series = []
    for name in names:
        for k, rule in enumerate(rules):
            pts = [(1, base[name]["final_val"])] if name in base else []
            pts += [(r["D"], r["final_val"]) for r in runs if r["optimizer"] == name and r["rule"] == rule
                    and r["comparison"] == comparison and r["final_val"] is not None]
            color = analyze_tuned.PALETTE[names.index(name) % len(analyze_tuned.PALETTE)]
            if k:
                c = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
                color = "#%02x%02x%02x" % tuple((x + 255) // 2 for x in c)
            series.append(("%s, %s rule" % (name, rule), color, sorted(pts), None))
    title = "Final validation loss against the global batch (equal %s)" % comparison
    svg = analyze_tuned.lr_panel(series, ds, title, xlabel="replicas D: global batch, x the base (log scale)")
    open(os.path.join(out, "final_loss_vs_batch_%s.svg" % comparison), "w").write(svg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threshold", type=float, default=1.0, help="percent above D = 1's loss (default 1)")
    ap.add_argument("--noise-window", type=int, default=20, help="the last PCT%% of D = 1's steps (default 20)")
    ap.add_argument("--best-d1", metavar="NAME", help="print NAME's D = 1 multiplier with the lowest final loss")
    ap.add_argument("dir")
    args = ap.parse_args()
    if not 0 < args.noise_window <= 100:
        ap.error("--noise-window %d is not a percentage in 1..100" % args.noise_window)
    out = args.dir
    runs = read_grid(out)
    base = base_runs(runs)
    if args.best_d1:
        if args.best_d1 not in base:
            return 1
        print(base[args.best_d1]["m_text"])
        return 0

    th = args.threshold
    names = list(dict.fromkeys(r["optimizer"] for r in runs))
    dense = [r for r in runs if r["D"] > 1 and not r["dgc"] and r["comparison"] in ("tokens", "steps")]
    rules = list(dict.fromkeys(r["rule"] for r in dense))
    comparisons = [c for c in ("tokens", "steps") if any(r["comparison"] == c for r in dense)]
    sources = {}
    if os.path.exists(os.path.join(out, "sources.csv")):
        sources = {row["optimizer"]: row for row in csv.DictReader(open(os.path.join(out, "sources.csv")))}

    # Deterministic record, no times: every run's validation losses, and its training loss and
    # noise scale at those steps and at 64 evenly spaced ones (every step would be 11 MB).
    with open(os.path.join(out, "losses.csv"), "w") as f:
        f.write("folder,step,tokens,train_loss,val_loss,noise_scale\n")
        for r in runs:
            val = dict(r["val"])
            per_step = r["batch"] * r["context"]
            every = max(1, r["total_steps"] // 64)
            for rec in r["steps"]:
                if rec["step"] % every and rec["step"] not in val:
                    continue
                v, ns = val.get(rec["step"]), rec.get("noise_scale")
                f.write("%s,%d,%d,%.6f,%s,%s\n" % (r["folder"], rec["step"], rec["step"] * per_step, rec["loss"],
                                                   "%.6f" % v if v is not None else "",
                                                   "%.6g" % ns if isinstance(ns, (int, float)) else ""))

    # Every run against its reference.
    rows = []
    for r in runs:
        b = base.get(r["optimizer"])
        ref = gap = None
        if r is b:
            ref, gap = r["final_val"], 0.0
        elif r["D"] > 1 and r["comparison"] in ("tokens", "steps"):
            ref, gap = compare(r, b, r["comparison"])
        rows.append((r, ref, gap))
    with open(os.path.join(out, "runs.csv"), "w") as f:
        f.write("optimizer,rule,comparison,replicas,global_batch,steps,lr_multiplier,peak_lr,compression,density,"
                "final_val_loss,d1_val_loss,gap_pct,within,exchange_bytes_per_step,cpu_s,diverged,folder\n")
        for r, ref, gap in rows:
            f.write("%s,%s,%s,%d,%d,%d,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%d,%s\n" % (
                r["optimizer"], r["rule"], r["comparison"], r["D"], r["batch"], r["total_steps"], r["m_text"],
                fmt(r["peak_lr"], "%.6g", ""), "dgc" if r["dgc"] else "", "%g" % r["density"] if r["dgc"] else "",
                fmt(r["final_val"], "%.6f", ""), fmt(ref, "%.6f", ""), fmt(None if gap is None else 100 * gap, "%.3f", ""),
                int(within(gap, th)) if gap is not None and r["D"] > 1 else "",
                r["exchange"] if r["exchange"] is not None else "", fmt(r["cpu"], "%.1f", ""),
                1 if r["diverged"] else 0, r["folder"]))

    # Per optimizer: bracketed base lr, largest D per rule and comparison, the noise scale.
    summary = []
    for name in names:
        b = base.get(name)
        tried = sorted(r["m"] for r in runs if r["optimizer"] == name and r["D"] == 1)
        s = {"name": name, "base": b, "bracketed": b is not None and len(tried) >= 3 and tried[0] < b["m"] < tried[-1],
             "tried": tried, "largest": {}, "best": {}}
        for c in comparisons:
            for rule in rules:
                grid = [r for r in dense if r["optimizer"] == name and r["rule"] == rule and r["comparison"] == c]
                s["largest"][c, rule] = largest_replicas(grid, b, c, th) if b and grid else None
            answers = [(s["largest"][c, rule], -i, rule) for i, rule in enumerate(rules) if s["largest"][c, rule]]
            s["best"][c] = max(answers) if answers else None  # (D, -, rule): the larger over the rules
        s["noise"] = noise_scale(b, args.noise_window) if b else (None,) * 5
        summary.append(s)

    def largest_text(s, c):
        if s["best"].get(c) is None:
            return "-"
        d, _, rule = s["best"][c]
        return "%d (%d sequences%s)" % (d, d * s["base"]["batch"], ", %s rule" % rule if d > 1 else "")

    with open(os.path.join(out, "summary.csv"), "w") as f:
        f.write("optimizer,kind,base_lr_multiplier,multipliers_tried,bracketed,d1_final_val_loss,base_batch,%s%s"
                "b_simple,b_simple_min,b_simple_max,noise_first_step,noise_last_step\n"
                % ("".join("largest_replicas_%s_%s," % (c, rule) for c in comparisons for rule in rules),
                   "".join("largest_replicas_%s," % c for c in comparisons)))
        for s in summary:
            b = s["base"]
            first, last, mean, lo, hi = s["noise"]
            f.write("%s,%s,%s,%s,%s,%s,%s,%s%s%s,%s,%s,%s,%s\n" % (
                s["name"], b["kind"] if b else "", b["m_text"] if b else "", " ".join("%g" % m for m in s["tried"]),
                "yes" if s["bracketed"] else "no", fmt(b["final_val"], "%.6f", "") if b else "", b["batch"] if b else "",
                "".join("%s," % (s["largest"][c, rule] or "") for c in comparisons for rule in rules),
                "".join("%s," % (s["best"][c][0] if s["best"].get(c) else "") for c in comparisons),
                fmt(mean, "%.2f", ""), fmt(lo, "%.2f", ""), fmt(hi, "%.2f", ""), first or "", last or ""))

    # The noise scale against the largest batch within the threshold at equal tokens.
    noise_rows = []
    for s in summary:
        b, mean = s["base"], s["noise"][2]
        largest = s["best"].get("tokens")
        if b is None or mean is None or largest is None:
            noise_rows.append((s, None, None, None))
            continue
        batch = largest[0] * b["batch"]
        ratio = mean / batch
        censored = largest[0] == max(r["D"] for r in dense)  # the grid's largest D: the true one may be larger
        noise_rows.append((s, batch, ratio, censored))
    with open(os.path.join(out, "noise.csv"), "w") as f:
        f.write("optimizer,first_step,last_step,b_simple,b_simple_min,b_simple_max,base_batch,"
                "largest_batch_equal_tokens,ratio,censored,within_%gx\n" % NOISE_GOAL)
        for s, batch, ratio, censored in noise_rows:
            first, last, mean, lo, hi = s["noise"]
            f.write("%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n" % (
                s["name"], first or "", last or "", fmt(mean, "%.2f", ""), fmt(lo, "%.2f", ""), fmt(hi, "%.2f", ""),
                s["base"]["batch"] if s["base"] else "", batch or "", fmt(ratio, "%.3f", ""),
                "" if censored is None else int(censored),
                "" if ratio is None else int(1 / NOISE_GOAL <= ratio <= NOISE_GOAL)))

    # DGC against dense at the same optimizer, rule, D and steps.
    dgc_rows = []
    for r in runs:
        if not r["dgc"]:
            continue
        partner = next((x for x in runs if not x["dgc"] and x["optimizer"] == r["optimizer"] and x["rule"] == r["rule"]
                        and x["D"] == r["D"] and x["total_steps"] == r["total_steps"]), None)
        cost = (r["final_val"] / partner["final_val"] - 1) if partner and partner["final_val"] and r["final_val"] else None
        dense_total = partner["exchange"] * partner["total_steps"] if partner and partner["exchange"] else None
        dgc_total = r["exchange"] * r["total_steps"] if r["exchange"] else None
        saved = dense_total / dgc_total if dense_total and dgc_total else None
        sends, after = sends_per_weight(r["density"], r["dgc_warmup"], r["total_steps"])
        # the same count from the bytes: a pair is 4 bytes, as a dense weight is
        from_bytes = dgc_total / (partner["exchange"]) if dgc_total and partner and partner["exchange"] else None
        ok_bytes = saved is not None and saved >= BYTES_GOAL
        ok_loss = cost is not None and cost <= th / 100 + 1e-12
        dgc_rows.append((r, partner, cost, dense_total, dgc_total, saved, sends, after, from_bytes, ok_bytes, ok_loss))
    with open(os.path.join(out, "dgc.csv"), "w") as f:
        f.write("optimizer,rule,replicas,steps,density,warmup_steps,sends_per_weight,sends_after_warmup,"
                "sends_per_weight_from_bytes,dense_final_val_loss,dgc_final_val_loss,loss_cost_pct,"
                "dense_bytes,dgc_bytes,bytes_saved_x,bytes_goal,loss_goal\n")
        for r, partner, cost, dense_total, dgc_total, saved, sends, after, from_bytes, ok_b, ok_l in dgc_rows:
            f.write("%s,%s,%d,%d,%g,%d,%.2f,%.2f,%s,%s,%s,%s,%s,%s,%s,%s,%s\n" % (
                r["optimizer"], r["rule"], r["D"], r["total_steps"], r["density"], r["dgc_warmup"], sends, after,
                fmt(from_bytes, "%.2f", ""), fmt(partner["final_val"] if partner else None, "%.6f", ""),
                fmt(r["final_val"], "%.6f", ""), fmt(None if cost is None else 100 * cost, "%.3f", ""),
                "%d" % dense_total if dense_total else "", "%d" % dgc_total if dgc_total else "",
                fmt(saved, "%.1f", ""), verdict(ok_b), verdict(ok_l)))

    for c in comparisons:
        if base and rules:
            plot(out, c, runs, base, names, rules)

    # The goals.
    goals = []
    both = [(r, cost, saved) for r, _, cost, _, _, saved, _, _, _, ok_b, ok_l in dgc_rows if ok_b and ok_l]
    if dgc_rows:
        goals.append(("DGC sends at least %gx fewer bytes than dense and ends within %g%% of dense" % (BYTES_GOAL, th),
                      bool(both), "; ".join("%s at density %g: %.0fx fewer bytes, %+.2f%%" % (r["optimizer"], r["density"], saved, 100 * cost)
                                            for r, cost, saved in both) or
                      "no (optimizer, density) does both of %d: %s" % (len(dgc_rows), "; ".join(
                          "%s at %g: %sx, %s" % (r["optimizer"], r["density"], fmt(saved, "%.0f"),
                                                 fmt(None if cost is None else 100 * cost, "%+.2f%%"))
                          for r, _, cost, _, _, saved, _, _, _, _, _ in dgc_rows))))
    judged = [(s, batch, ratio, censored) for s, batch, ratio, censored in noise_rows if ratio is not None]
    if judged:
        good = [s["name"] for s, _, ratio, _ in judged if 1 / NOISE_GOAL <= ratio <= NOISE_GOAL]
        goals.append(("the measured noise scale predicts the largest batch within %g%% to within %gx" % (th, NOISE_GOAL),
                      len(good) == len(judged),
                      "%d of %d optimizers: %s" % (len(good), len(judged), "; ".join(
                          "%s B_simple %.1f against %d%s (x%.2f)" % (s["name"], s["noise"][2], batch,
                                                                     " or more" if censored else "", ratio)
                          for s, batch, ratio, censored in judged))))
    large = [s for s in summary if s["base"] and s["base"]["kind"] in ("lamb", "lans") and "steps" in comparisons]
    if large:
        holds = [s["name"] for s in large if s["best"]["steps"] and s["best"]["steps"][0] >= LARGE_BATCH_D]
        goals.append(("LAMB or LANS holds within %g%% to %dx the base batch at equal steps" % (th, LARGE_BATCH_D),
                      bool(holds), "; ".join("%s: largest D %s" % (s["name"], largest_text(s, "steps")) for s in large)))

    # results.md
    first = runs[0]
    text = ["# The study, batch scaling (second edition): results", ""]
    for what, fname in (("run", "date.txt"), ("command", "command.txt")):
        path = os.path.join(out, fname)
        if os.path.exists(path):
            text.append("%s: `%s`  " % (what, open(path).read().strip()))
    d1_steps = base[names[0]]["total_steps"] if names[0] in base else first["total_steps"]
    text += ["analysis: `study/analyze_scale.py --threshold %g --noise-window %d %s`"
             % (th, args.noise_window, analyze_tuned.shown_dir(out)), "",
             "D = 1: %d steps of %d sequences of %d tokens (p = %d, K = %d, micro %d). At D replicas the global "
             "batch is %d x D sequences: equal tokens, %d / D steps; equal steps, %d steps. Gap: final validation "
             "loss over the D = 1 reference's at the same tokens (equal tokens) or steps (equal steps), minus 1; "
             "within: gap <= %g%%. Noise scale: the mean of the reference's logged B_simple (sequences) over its "
             "last %d%% of steps." % (d1_steps, first["micro"] * first["window"], first["context"], first["stages"],
                                      first["window"], first["micro"], first["micro"] * first["window"], d1_steps,
                                      d1_steps, th, args.noise_window), "", "## Goals", ""]
    for what, ok, figures in goals:
        text.append("- %s: **%s** (%s)" % (what, verdict(ok), figures))
    header = ["optimizer", "base lr", "tried (bracketed)", "D = 1 final val loss"]
    header += ["largest D within %g%%, equal %s" % (th, c) for c in comparisons]
    header += ["B_simple (steps %d-%d)" % summary[0]["noise"][:2] if summary and summary[0]["base"] else "B_simple"]
    text += ["", "## Per optimizer", "", "| %s |" % " | ".join(header), "| %s |" % " | ".join(["---"] * 3 + ["---:"] * (len(header) - 3))]
    for s in summary:
        b = s["base"]
        text.append("| %s | %s | %s | %s | %s | %s |" % (
            s["name"], ("x%s: `%s`" % (b["m_text"], b["lrs"])) if b else "no D = 1 run finished",
            "x" + " x".join("%g" % m for m in s["tried"]) + (" (yes)" if s["bracketed"] else " (no)"),
            fmt(b["final_val"]) if b else "-", " | ".join(largest_text(s, c) for c in comparisons),
            fmt(s["noise"][2], "%.1f") + (" (%.1f to %.1f)" % s["noise"][3:] if s["noise"][2] is not None else "")))
    text += ["", "Per rule: " + "; ".join("%s %s" % (s["name"], ", ".join(
        "%s %s %s" % (c, rule, s["largest"][c, rule] or "-") for c in comparisons for rule in rules)) for s in summary)]
    text += ["", "## Every run", "",
             "| optimizer | rule | comparison | D | global batch | steps | lr x | peak lr | final val loss | D = 1 reference | gap | within %g%% | exchange bytes/step | CPU s |" % th,
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    for r, ref, gap in rows:
        text.append("| %s | %s | %s | %d | %d | %d | x%s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["optimizer"], r["rule"], r["comparison"] + (" %g" % r["density"] if r["dgc"] else ""), r["D"], r["batch"],
            r["total_steps"], r["m_text"], fmt(r["peak_lr"], "%.4g"), "diverged" if r["diverged"] else fmt(r["final_val"]),
            fmt(ref), fmt(None if gap is None else 100 * gap, "%+.2f%%"),
            ("yes" if within(gap, th) else "no") if gap is not None and r["D"] > 1 else "",
            r["exchange"] if r["exchange"] is not None else "-", fmt(r["cpu"], "%.0f")))
    if dgc_rows:
        text += ["", "## DGC against dense", "",
                 "| optimizer | rule | D | steps | density | warm-up steps | sends per weight (after warm-up; from bytes) | dense final | DGC final | loss cost | dense bytes | DGC bytes | fewer bytes | goals (bytes, loss) |",
                 "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for r, partner, cost, dense_total, dgc_total, saved, sends, after, from_bytes, ok_b, ok_l in dgc_rows:
            text.append("| %s | %s | %d | %d | %g | %d | %.1f (%.1f; %s) | %s | %s | %s | %s | %s | %s | %s, %s |" % (
                r["optimizer"], r["rule"], r["D"], r["total_steps"], r["density"], r["dgc_warmup"], sends, after,
                fmt(from_bytes, "%.1f"), fmt(partner["final_val"] if partner else None),
                "diverged" if r["diverged"] else fmt(r["final_val"]), fmt(None if cost is None else 100 * cost, "%+.2f%%"),
                dense_total or "-", dgc_total or "-", fmt(saved, "%.0fx"), verdict(ok_b), verdict(ok_l)))
    text += [""] + ["![final validation loss against the global batch, equal %s](final_loss_vs_batch_%s.svg)" % (c, c)
                    for c in comparisons] + [""]
    open(os.path.join(out, "results.md"), "w").write("\n".join(text))
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
