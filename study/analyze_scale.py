#!/usr/bin/python3
"""The study's batch-scaling edition (study/scale.sh): for every optimizer and lr rule, the
final validation loss at D = 1, 2, 4, 8 replicas against D = 1's at equal tokens, the
largest global batch that stays within --threshold percent of it, and DGC against dense.
Reads only the run folders, so it can be rerun without training:

    study/analyze_scale.py [--threshold PCT] DIR   # DIR: what scale.sh --out wrote
    study/analyze_scale.py --best-d1 NAME DIR      # (scale.sh) NAME's base lr multiplier

Equal tokens: a run at D is compared with its optimizer's D = 1 run at the same number of
training tokens (D = 1's validation loss there, linear between its evaluations); every run of
the grid sees the same tokens, so that is D = 1's final loss. Within: final / reference - 1 <=
PCT / 100 (a diverged run never is). The largest global batch of an optimizer under a rule is
the largest D such that every D' <= D of the grid is within (the loss holds up to it); the
optimizer's answer is the larger over its rules. Losses depend only on the seed, the run and
the code; times on the machine. Standard library only.
"""
import argparse
import csv
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analyze  # noqa: E402  (SVG panels)
import analyze_tuned  # noqa: E402  (reading a run, its replay, the lr-curve panel)

COLORS = {"adamw": "#1f77b4", "muon": "#d62728", "lamb": "#2ca02c", "lars": "#ff7f0e"}
SHADES = {1: "#000000", 2: "#1f77b4", 4: "#2ca02c", 8: "#d62728"}


def read_grid(out):
    """Every run of grid.csv, parsed: optimizer, rule ('both' at D = 1), D, multiplier, dgc."""
    runs = []
    for row in csv.DictReader(open(os.path.join(out, "grid.csv"))):
        r = analyze_tuned.read_run(os.path.join(out, row["folder"]))
        d = int(row["replicas"])
        r.update({"optimizer": row["optimizer"], "rule": row["rule"], "D": d, "m": float(row["lr_multiplier"]),
                  "m_text": row["lr_multiplier"], "dgc": row["compression"] == "dgc", "folder": row["folder"]})
        r["batch"] = r["micro"] * r["window"] * d  # sequences per optimizer step
        per_step = r["batch"] * r["context"]
        r["val_tokens"] = [(s * per_step, v) for s, v in r["val"]]
        r["train_tokens"] = [(rec["step"] * per_step, rec["loss"]) for rec in r["steps"]]
        r["final_tokens"] = r["total_steps"] * per_step
        r["peak_lr"] = max((rec.get("lr", 0) for rec in r["steps"]), default=None)
        r["exchange"] = exchange_bytes(os.path.join(out, row["folder"], "metrics.jsonl"))
        ends = analyze_tuned.replay_step_ends(os.path.join(out, row["folder"]))
        r["replayed"] = ends[-1] if ends else None
        runs.append(r)
    return runs


def exchange_bytes(path):
    """Replica 0's bytes written per step by the exchange (metrics exchange_bytes_per_step)."""
    import json
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


def loss_at_tokens(run, tokens):
    """run's validation loss after `tokens` training tokens: linear between its evaluations;
    None outside them."""
    pts = run["val_tokens"]
    for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
        if t0 <= tokens <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (tokens - t0) / (t1 - t0)
    if pts and pts[-1][0] == tokens:
        return pts[-1][1]
    return None


def compare(run, base):
    """(reference loss, relative gap) of run against its D = 1 base at equal tokens."""
    if run["final_val"] is None or base is None:
        return None, None
    ref = loss_at_tokens(base, run["final_tokens"])
    if ref is None:
        return None, None
    return ref, run["final_val"] / ref - 1


def within(gap, threshold):
    return gap is not None and gap <= threshold / 100 + 1e-12


def largest_batch(runs, base, threshold):
    """The largest D such that every D' <= D in runs (one optimizer, one rule, dense) is within
    the threshold of base; 1 when D = 2 already is not."""
    largest = 1
    for r in sorted(runs, key=lambda r: r["D"]):
        if not within(compare(r, base)[1], threshold):
            break
        largest = r["D"]
    return largest


def unigram_loss(folder):
    """The byte-unigram model's loss, the level a model that has learnt only how often each
    token occurs reaches: the training file's token frequencies scored on the validation file
    (llm.c token files: a 256-int header, then uint16 tokens), or None without the files."""
    import collections
    import re
    import struct
    text = open(os.path.join(folder, "model.paci")).read()
    paths = [re.search(r'\b%s\s+"([^"]*)"' % k, text) for k in ("data", "val")]
    if not all(paths) or not all(os.path.exists(p.group(1)) for p in paths):
        return None
    tokens = []
    for p in paths:
        b = open(p.group(1), "rb").read()
        tokens.append(struct.unpack("<%dH" % ((len(b) - 1024) // 2), b[1024:]))
    counts, n = collections.Counter(tokens[0]), len(tokens[0])
    return -sum(math.log(counts[t] / n) for t in tokens[1]) / len(tokens[1])


def fmt(x, f="%.4f", none="-"):
    return f % x if x is not None else none


def plots(out, runs, base, names, rules, threshold):
    # Final validation loss against the global batch, one line per optimizer and rule.
    ds = sorted({r["D"] for r in runs if not r["dgc"]})
    series = []
    for name in names:
        for k, rule in enumerate(rules):
            pts = [(1, base[name]["final_val"])] if name in base else []
            pts += [(r["D"], r["final_val"]) for r in runs if r["optimizer"] == name and r["rule"] == rule
                    and not r["dgc"] and r["D"] > 1 and r["final_val"] is not None]
            color = COLORS.get(name, analyze_tuned.PALETTE[len(series) % len(analyze_tuned.PALETTE)])
            series.append(("%s, %s rule" % (name, rule), color if k == 0 else shade(color), sorted(pts), None))
    svg = analyze_tuned.lr_panel(series, ds, "Final validation loss against the global batch (equal tokens)",
                                 xlabel="global batch, x the base (D replicas; log scale)")
    open(os.path.join(out, "final_loss_vs_batch.svg"), "w").write(svg)
    # Validation loss against tokens: a panel per optimizer and rule, a curve per D (and DGC).
    panels, ys = [], [v for r in runs for _, v in r["val_tokens"] if math.isfinite(v)]
    xmax = max(r["final_tokens"] for r in runs)
    ylo, yhi = math.floor(min(ys) * 10) / 10, min(math.ceil(max(ys) * 10) / 10, math.floor(min(ys) * 10) / 10 + 2)
    for name in names:
        for rule in rules:
            series = [("D = 1", SHADES[1], base[name]["val_tokens"])] if name in base else []
            for r in sorted(runs, key=lambda r: (r["D"], r["dgc"])):
                if r["optimizer"] == name and r["D"] > 1 and (r["rule"] == rule) and r["val_tokens"]:
                    series.append(("D = %d%s" % (r["D"], " dgc" if r["dgc"] else ""),
                                   SHADES.get(r["D"], "#555") if not r["dgc"] else "#9467bd" if r["D"] == 4 else "#8c564b",
                                   r["val_tokens"]))
            panels.append(("%s, %s rule" % (name, rule), series, "training tokens", "validation loss", xmax, ylo, yhi))
    analyze.write_svg(os.path.join(out, "val_loss_vs_tokens.svg"), "Validation loss against tokens, per optimizer and lr rule",
                      panels, "the same tokens at every D; steps = base steps / D; D = 1 is the same run under both rules")


def shade(color):
    """A lighter tone of a #rrggbb colour (the second rule's line)."""
    c = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
    return "#%02x%02x%02x" % tuple((x + 255) // 2 for x in c)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threshold", type=float, default=1.0, help="percent above D = 1's final loss (default 1)")
    ap.add_argument("--best-d1", metavar="NAME", help="print NAME's D = 1 multiplier with the lowest final loss")
    ap.add_argument("dir")
    args = ap.parse_args()
    out = args.dir
    runs = read_grid(out)
    base = base_runs(runs)
    if args.best_d1:
        if args.best_d1 not in base:
            return 1
        print(base[args.best_d1]["m_text"])
        return 0

    names = list(dict.fromkeys(r["optimizer"] for r in runs))
    rules = list(dict.fromkeys(r["rule"] for r in runs if r["D"] > 1 and not r["dgc"]))
    sources = {}
    if os.path.exists(os.path.join(out, "sources.csv")):
        sources = {row["optimizer"]: row["source"] for row in csv.DictReader(open(os.path.join(out, "sources.csv")))}

    # Deterministic record: every logged loss of every run, no times.
    with open(os.path.join(out, "losses.csv"), "w") as f:
        f.write("folder,step,tokens,train_loss,val_loss\n")
        for r in runs:
            val = dict(r["val"])
            per_step = r["batch"] * r["context"]
            for rec in r["steps"]:
                v = val.get(rec["step"])
                f.write("%s,%d,%d,%.6f,%s\n" % (r["folder"], rec["step"], rec["step"] * per_step, rec["loss"],
                                                "%.6f" % v if v is not None else ""))

    # Every run.
    rows = []
    for r in runs:
        b = base.get(r["optimizer"])
        ref, gap = compare(r, b) if r is not b else (r["final_val"], 0.0)
        if r["D"] == 1 and r is not b:
            ref, gap = None, None  # a tuning run: not the reference
        rows.append((r, ref, gap))
    with open(os.path.join(out, "runs.csv"), "w") as f:
        f.write("optimizer,rule,replicas,global_batch,steps,lr_multiplier,peak_lr,compression,final_val_loss,"
                "d1_val_loss_at_equal_tokens,gap_pct,within,exchange_bytes_per_step,replayed_s,diverged,folder\n")
        for r, ref, gap in rows:
            f.write("%s,%s,%d,%d,%d,%s,%s,%s,%s,%s,%s,%s,%s,%s,%d,%s\n" % (
                r["optimizer"], r["rule"], r["D"], r["batch"], r["total_steps"], r["m_text"], fmt(r["peak_lr"], "%.6g", ""),
                "dgc" if r["dgc"] else "", fmt(r["final_val"], "%.6f", ""), fmt(ref, "%.6f", ""),
                fmt(None if gap is None else 100 * gap, "%.3f", ""), int(within(gap, args.threshold)) if gap is not None else "",
                r["exchange"] if r["exchange"] is not None else "", fmt(r["replayed"], "%.3f", ""),
                1 if r["diverged"] else 0, r["folder"]))

    # Per optimizer and rule: the largest global batch within the threshold.
    summary = []
    for name in names:
        b = base.get(name)
        per_rule = {}
        for rule in rules:
            dense = [r for r in runs if r["optimizer"] == name and r["rule"] == rule and not r["dgc"] and r["D"] > 1]
            per_rule[rule] = largest_batch(dense, b, args.threshold) if b else None
        best_rule = max(rules, key=lambda rule: (per_rule[rule] or 0, -rules.index(rule))) if rules else None
        if best_rule and (per_rule[best_rule] or 1) == 1:
            best_rule = None  # no D > 1 within: D = 1's batch, under no rule
        summary.append((name, b, per_rule, best_rule))
    with open(os.path.join(out, "summary.csv"), "w") as f:
        f.write("optimizer,base_lr_multiplier,d1_final_val_loss,%s,largest_replicas,largest_global_batch,rule\n"
                % ",".join("largest_replicas_%s" % rule for rule in rules))
        for name, b, per_rule, best_rule in summary:
            d = (per_rule[best_rule] if best_rule else 1) if b else None
            f.write("%s,%s,%s,%s,%s,%s,%s\n" % (name, b["m_text"] if b else "", fmt(b["final_val"], "%.6f", "") if b else "",
                                                 ",".join(str(per_rule[rule] or "") for rule in rules),
                                                 d or "", d * b["micro"] * b["window"] if d else "", best_rule or ""))

    # DGC against dense at the same optimizer, rule and D.
    dgc_rows = []
    for r in runs:
        if not r["dgc"]:
            continue
        dense = next((x for x in runs if not x["dgc"] and x["optimizer"] == r["optimizer"] and x["rule"] == r["rule"]
                      and x["D"] == r["D"]), None)
        cost = (r["final_val"] / dense["final_val"] - 1) if dense and dense["final_val"] and r["final_val"] else None
        saved = (dense["exchange"] / r["exchange"]) if dense and dense["exchange"] and r["exchange"] else None
        dgc_rows.append((r, dense, cost, saved))
    with open(os.path.join(out, "dgc.csv"), "w") as f:
        f.write("optimizer,rule,replicas,dense_final_val_loss,dgc_final_val_loss,loss_cost_pct,"
                "dense_exchange_bytes_per_step,dgc_exchange_bytes_per_step,bytes_saved_x\n")
        for r, dense, cost, saved in dgc_rows:
            f.write("%s,%s,%d,%s,%s,%s,%s,%s,%s\n" % (
                r["optimizer"], r["rule"], r["D"], fmt(dense["final_val"] if dense else None, "%.6f", ""),
                fmt(r["final_val"], "%.6f", ""), fmt(None if cost is None else 100 * cost, "%.3f", ""),
                dense["exchange"] if dense and dense["exchange"] is not None else "",
                r["exchange"] if r["exchange"] is not None else "", fmt(saved, "%.1f", "")))

    if base and rules:
        plots(out, runs, base, names, rules, args.threshold)

    # results.md
    def md_dir():
        return analyze_tuned.shown_dir(out)
    first = runs[0]
    text = ["# The study, batch scaling: results", ""]
    for what, fname in (("run", "date.txt"), ("command", "command.txt")):
        path = os.path.join(out, fname)
        if os.path.exists(path):
            text.append("%s: `%s`  " % (what, open(path).read().strip()))
    text += ["analysis: `study/analyze_scale.py --threshold %g %s`" % (args.threshold, md_dir()), "",
             "Every run: %d training tokens (%d micro-batches of %d x %d), p = %d, K = %d, 1F1B-flush; "
             "D replicas as threads, global batch %d x D sequences, steps = %d / D. "
             "Gap: final validation loss over D = 1's at equal tokens, minus 1; within: gap <= %g%%. "
             "Replayed s: the run's program simulated with its optimizer's D = 1 measured instruction costs "
             "(the replicas' allreduce at the file's network_bandwidth), as if every stage of every replica had its "
             "own device." % (first["final_tokens"], first["final_tokens"] // first["context"] // first["micro"],
                              first["micro"], first["context"], first["stages"], first["window"],
                              first["micro"] * first["window"], first["final_tokens"] // (first["micro"] * first["window"] * first["context"]),
                              args.threshold), ""]
    unigram = unigram_loss(os.path.join(out, first["folder"]))
    if unigram is not None:
        text += ["Reference: a model that knows only how often each token occurs (the training file's "
                 "frequencies, scored on the validation file) has a validation loss of %.4f." % unigram, ""]
    text += ["| optimizer | base lr | where the base lr comes from | D = 1 final val loss | largest global batch within %g%% | %s |"
             % (args.threshold, " | ".join("largest D, %s rule" % rule for rule in rules)),
             "| --- | ---: | --- | ---: | ---: | %s |" % " | ".join("---:" for _ in rules)]
    for name, b, per_rule, best_rule in summary:
        d = (per_rule[best_rule] if best_rule else 1) if b else None
        text.append("| %s | %s | %s | %s | %s | %s |" % (
            name, ("x%s: `%s`" % (b["m_text"], b["lrs"])) if b else "no D = 1 run finished", sources.get(name, ""),
            fmt(b["final_val"]) if b else "-",
            ("%d (D = %d, %s rule)" % (d * b["micro"] * b["window"], d, best_rule) if best_rule
             else "%d (D = 1 only)" % (b["micro"] * b["window"])) if b else "-",
            " | ".join(str(per_rule[rule] or "-") for rule in rules)))
    text += ["", "| optimizer | rule | D | global batch | steps | lr multiplier | peak lr | final val loss | D = 1 at equal tokens | gap | within %g%% | exchange bytes/step | replayed s |" % args.threshold,
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    for r, ref, gap in rows:
        text.append("| %s | %s%s | %d | %d | %d | x%s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["optimizer"], r["rule"], ", dgc" if r["dgc"] else "", r["D"], r["batch"], r["total_steps"], r["m_text"],
            fmt(r["peak_lr"], "%.4g"), "diverged" if r["diverged"] else fmt(r["final_val"]), fmt(ref),
            fmt(None if gap is None else 100 * gap, "%+.2f%%"),
            ("yes" if within(gap, args.threshold) else "no") if gap is not None and r["D"] > 1 else "",
            r["exchange"] if r["exchange"] is not None else "-", fmt(r["replayed"], "%.2f")))
    if dgc_rows:
        text += ["", "| optimizer | rule | D | dense final val loss | DGC final val loss | loss cost | dense bytes/step | DGC bytes/step | bytes saved |",
                 "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r, dense, cost, saved in dgc_rows:
            text.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s |" % (
                r["optimizer"], r["rule"], r["D"], fmt(dense["final_val"] if dense else None),
                "diverged" if r["diverged"] else fmt(r["final_val"]), fmt(None if cost is None else 100 * cost, "%+.2f%%"),
                dense["exchange"] if dense and dense["exchange"] is not None else "-",
                r["exchange"] if r["exchange"] is not None else "-", fmt(saved, "%.0fx")))
    text += ["", "![final validation loss against the global batch](final_loss_vs_batch.svg)", "",
             "![validation loss against tokens](val_loss_vs_tokens.svg)", ""]
    open(os.path.join(out, "results.md"), "w").write("\n".join(text))
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
