#!/usr/bin/python3
"""The study's fourth edition (study/v4.sh): equal device time. Reads only the study's folder,
so it can be rerun without training:

    study/analyze_v4.py DIR                          # the tables: what v4.sh --out wrote
    study/analyze_v4.py --plan DIR --base-steps N    # (v4.sh) the baseline, budget, steps
    study/analyze_v4.py --best DIR                   # (v4.sh) each line's best lr so far
    study/analyze_v4.py --replay-total TRACE         # (v4.sh) a replay's seconds

The rules (docs/study/fourth/METHOD.md): the synchronous lines at PACI's memory are those of
AT_PACI_MEMORY; the budget line is the one of them with the shortest replayed step (they train
alike per token); the budget is --base-steps of its steps; every line trains
floor(budget / its step) steps. Spread: the sample standard deviation over the seeds. The
baseline of the comparisons is the synchronous line at PACI's memory with the lowest mean
equal-time loss; the strict target, per seed, its final validation loss at that seed.
Standard library only.
"""
import argparse
import csv
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analyze  # noqa: E402  (read_metrics)
import analyze_tuned  # noqa: E402  (read_run, replay_step_ends, best_run)

AT_PACI_MEMORY = ("1f1b", "zb-h1", "zb-v", "interleaved")  # synchronous, at most 1F1B's slots
SYNC = AT_PACI_MEMORY + ("zb-h2", "gpipe")
TRAIN_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "examples", "data", "tiny_train.bin")


def read_csv(path):
    return list(csv.DictReader(open(path)))


def spread(xs):
    """The sample standard deviation (n - 1), None below two values."""
    return statistics.stdev(xs) if len(xs) >= 2 else None


def mean(xs):
    return statistics.mean(xs) if xs else None


# ---- the plan --------------------------------------------------------------------------------

def equal_time_steps(budget, step_s, warm_steps=0, warm_step_s=None):
    """The steps a line trains in `budget` replayed seconds: its warm start's steps at their
    own price, the rest at step_s, floor'ed."""
    if warm_steps:
        rest = budget - warm_steps * warm_step_s
        return warm_steps + max(1, math.floor(rest / step_s + 1e-9))
    return max(1, math.floor(budget / step_s + 1e-9))


def plan(out, base_steps):
    rows = read_csv(os.path.join(out, "step_times.csv"))
    candidates = [r for r in rows if r["schedule"] in AT_PACI_MEMORY and int(r["warm_steps"]) == 0]
    if not candidates:
        sys.exit("analyze_v4: no synchronous line at PACI's memory (%s) in %s/step_times.csv: no budget"
                 % (", ".join(AT_PACI_MEMORY), out))
    base = min(candidates, key=lambda r: float(r["step_s"]))
    budget = base_steps * float(base["step_s"])
    base_tokens = base_steps * int(base["tokens_per_step"])
    path = os.path.join(out, "plan.csv")
    if os.path.exists(path):  # a resumed study: lines added since must not move the runs it has
        before = read_csv(path)
        was = next((r for r in before if r["budget_line"] == "1"), None)
        if was and (was["config"] != base["config"] or "%.9g" % budget != was["budget_s"]):
            sys.exit("analyze_v4: the budget would move from %s s (%s) to %.9g s (%s): the runs kept from "
                     "before are priced on the first; start the study afresh"
                     % (was["budget_s"], was["config"], budget, base["config"]))
    with open(path, "w") as f:
        f.write("config,budget_line,budget_s,steps_time,steps_tokens,steps_half\n")
        for r in rows:
            warm = int(r["warm_steps"])
            warm_step_s = float(r["warm_step_s"]) if warm else None
            n = equal_time_steps(budget, float(r["step_s"]), warm, warm_step_s)
            half = equal_time_steps(budget / 2, float(r["step_s"]), warm, warm_step_s)
            tokens = max(1, base_tokens // int(r["tokens_per_step"]))
            if warm and half <= warm:
                sys.exit("analyze_v4: %s's warm start (%d steps) takes half the budget" % (r["config"], warm))
            if warm and tokens <= warm:
                tokens = warm + 1
            f.write("%s,%d,%.9g,%d,%d,%d\n" % (r["config"], r is base, budget, n, tokens, half))
    print("study: budget %.3f replayed s = %d steps of %s (%.6f s a step, the shortest of the synchronous lines "
          "at PACI's memory); plan.csv" % (budget, base_steps, base["config"], float(base["step_s"])))


def step_ends(trace):
    """The replayed end of every optimizer step: the last stage to finish it (a device with
    chunks steps each of its stages: the trace names the stage)."""
    per = {}
    for e in json.load(open(trace))["traceEvents"]:
        if e.get("cat") == "step":
            stage = e.get("args", {}).get("stage", e["tid"])
            per.setdefault(stage, []).append((e["ts"] + e["dur"]) * 1e-6)
    return [max(col) for col in zip(*per.values())]


# ---- the runs --------------------------------------------------------------------------------

def load(out):
    grid = read_csv(os.path.join(out, "grid.csv"))
    runs = {}  # (config, kind) -> {(m, seed): run}
    order, schedule_of = [], {}
    for row in grid:
        c = row["config"]
        if c not in schedule_of:
            order.append(c)
            schedule_of[c] = row["schedule"]
        run = analyze_tuned.read_run(os.path.join(out, row["folder"]))
        runs.setdefault((c, row["kind"]), {})[(float(row["lr_multiplier"]), int(row["seed"]))] = run
    return order, schedule_of, runs


def best_lr(runs, c, seed):
    """The multiplier whose equal-time run at `seed` ends lowest (ties: the smaller), and
    whether it is at an end of the multipliers tried ('low', 'high' or 'no')."""
    tried = [(m, r) for (m, s), r in runs.get((c, "time"), {}).items() if s == seed]
    best = analyze_tuned.best_run(tried)
    if best is None:
        return None, "no"
    ms = sorted(m for m, _ in tried)
    edge = "no" if len(ms) < 2 else "low" if best[0] == ms[0] else "high" if best[0] == ms[-1] else "no"
    return best[0], edge


def print_best(out):
    order, _, runs = load(out)
    first_seed = min(s for v in runs.values() for _, s in v)
    for c in order:
        m, edge = best_lr(runs, c, first_seed)
        if m is None:
            sys.exit("analyze_v4: %s diverged at every multiplier tried" % c)
        print("%s %g %s" % (c, m, edge))


def val_at(points, x):
    """The validation loss at x on a curve [(x, loss)]: linear between its points, its last
    once it has ended, None before its first."""
    before = [(t, v) for t, v in points if t <= x * (1 + 1e-9)]
    after = [(t, v) for t, v in points if t > x * (1 + 1e-9)]
    if not before:
        return None
    if not after:
        return before[-1][1]
    (t0, v0), (t1, v1) = before[-1], after[0]
    return v0 + (v1 - v0) * (x - t0) / (t1 - t0)


def first_below(points, target):
    """The first x at which the curve [(x, loss)] reaches target, linear between points."""
    prev = None
    for t, v in points:
        if v <= target:
            if prev is None or prev[1] == v:
                return t
            return prev[0] + (t - prev[0]) * (prev[1] - target) / (prev[1] - v)
        prev = (t, v)
    return None


def peak_mib(run, schedule):
    """The fullest device's MiB: a device's stages summed (chunks: `loop` d, p + d, ...;
    `v` d and 2p - 1 - d)."""
    sb, p = run["stage_bytes"], run["stages"]
    if not sb:
        return None
    if len(sb) == p:
        return max(sb) / 2**20
    v = len(sb) // p
    if schedule == "zb-v":
        per = [sb[d] + sb[2 * p - 1 - d] for d in range(p)]
    else:
        per = [sum(sb[c * p + d] for c in range(v)) for d in range(p)]
    return max(per) / 2**20


LOSSES_HEADER = "config,kind,lr_multiplier,seed,step,tokens,train_loss,val_loss\n"


def loss_rows(c, kind, m, seed, r):
    """One run's rows of losses.csv: every logged step's train loss, the validation loss where
    it was evaluated."""
    val = dict(r["val"])
    tps = r["window"] * r["micro"] * r["context"]
    return ["%s,%s,%g,%d,%d,%d,%.6f,%s\n" % (c, kind, m, seed, rec["step"], rec["step"] * tps, rec["loss"],
                                             "%.6f" % val[rec["step"]] if rec["step"] in val else "")
            for rec in r["steps"]]


def compare_run(out, folder, c, kind, m, seed):
    """A rerun's rows against the study's losses.csv: 0 when every row is the same text."""
    run, _ = analyze.read_metrics(folder)
    mine = loss_rows(c, kind, float(m), int(seed), run)
    key = "%s,%s,%g,%d," % (c, kind, float(m), int(seed))
    theirs = [line for line in open(os.path.join(out, "losses.csv")) if line.startswith(key)]
    if not theirs:
        print("analyze_v4: %s has no rows for %s" % (os.path.join(out, "losses.csv"), key.rstrip(",")))
        return 1
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if a != b:
            print("analyze_v4: row %d of %s differs:\n  study: %s  rerun: %s" % (i + 1, key.rstrip(","), b, a))
            return 1
    if len(mine) != len(theirs):
        print("analyze_v4: the rerun logged %d rows, the study %d" % (len(mine), len(theirs)))
        return 1
    print("%s: all %d rows of losses.csv reproduced to the bit (last: %s)" % (key.rstrip(","), len(mine), mine[-1].strip()))
    return 0


def fmt(x, f="%.4f", none="-"):
    return f % x if x is not None else none


def pm(m, s, f="%.4f"):
    if m is None:
        return "-"
    return (f + " ± " + f) % (m, s) if s is not None else f % m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plan", metavar="DIR")
    ap.add_argument("--base-steps", type=int)
    ap.add_argument("--best", metavar="DIR")
    ap.add_argument("--replay-total", metavar="TRACE")
    ap.add_argument("--compare", nargs=6, metavar=("DIR", "FOLDER", "CONFIG", "KIND", "M", "SEED"),
                    help="FOLDER's run against DIR's losses.csv rows of CONFIG KIND xM SEED")
    ap.add_argument("dir", nargs="?")
    args = ap.parse_args()
    if args.replay_total:
        print("%.9g" % step_ends(args.replay_total)[-1])
        return 0
    if args.compare:
        return compare_run(*args.compare)
    if args.plan:
        if not args.base_steps:
            ap.error("--plan needs --base-steps")
        plan(args.plan, args.base_steps)
        return 0
    if args.best:
        print_best(args.best)
        return 0
    if not args.dir:
        ap.error("give the study's folder")
    return analyse(args.dir)


def analyse(out):
    order, schedule_of, runs = load(out)
    plan_rows = {r["config"]: r for r in read_csv(os.path.join(out, "plan.csv"))}
    times = {r["config"]: r for r in read_csv(os.path.join(out, "step_times.csv"))}
    gpu_path = os.path.join(out, "gpu_step_times.csv")
    gpu = {r["config"]: r for r in read_csv(gpu_path)} if os.path.exists(gpu_path) else {}
    budget = float(next(iter(plan_rows.values()))["budget_s"])
    budget_line = next(c for c, r in plan_rows.items() if r["budget_line"] == "1")
    seeds = sorted({s for v in runs.values() for _, s in v})
    ends = {}
    for c in order:
        for kind in ("time", "tokens"):
            trace = os.path.join(out, "runs", c, kind, "replay.json")
            if os.path.exists(trace):
                ends[(c, kind)] = step_ends(trace)

    # Deterministic record: every logged loss of every run, no times.
    with open(os.path.join(out, "losses.csv"), "w") as f:
        f.write(LOSSES_HEADER)
        for (c, kind), rs in runs.items():
            for (m, seed), r in rs.items():
                f.writelines(loss_rows(c, kind, m, seed, r))

    # Every line at its best multiplier (the first seed's), per seed.
    line = {}
    for c in order:
        m, edge = best_lr(runs, c, seeds[0])
        info = {"config": c, "schedule": schedule_of[c], "m": m, "edge": edge, "seeds": {}}
        line[c] = info
        if m is None:
            continue
        for seed in seeds:
            r = runs[(c, "time")].get((m, seed))
            if r is None or r["final_val"] is None:
                continue
            e = ends.get((c, "time"))
            curve_t = [(e[s - 1], v) for s, v in r["val"]] if e else []
            tok_run = runs.get((c, "tokens"), {}).get((m, seed))
            if tok_run is None and plan_rows[c]["steps_tokens"] == plan_rows[c]["steps_time"]:
                tok_run = r  # the same length: the equal-time run is the equal-token run
            # at half the budget: the half-budget run of its own where the study has one (its lr
            # schedule ends there), else this run read halfway (before its lr decayed)
            half_run = runs.get((c, "half"), {}).get((m, seed))
            if half_run is not None and half_run["final_val"] is not None:
                half = half_run["final_val"]
            else:
                half = val_at(curve_t, budget / 2) if curve_t and not runs.get((c, "half")) else None
            info["seeds"][seed] = {
                "final": r["final_val"], "run": r, "curve_t": curve_t,
                "total": e[-1] if e else None,
                "half": half,
                "tokens": tok_run["final_val"] if tok_run else None,
                "peak": peak_mib(r, schedule_of[c]),
                "wall": r["wall"], "cpu": r["cpu"]}

    def agg(c, key):
        xs = [d[key] for d in line[c]["seeds"].values() if d[key] is not None]
        return mean(xs), spread(xs), len(xs)

    sync_mem = [c for c in order if schedule_of[c] in AT_PACI_MEMORY and line[c]["seeds"]
                and int(times[c]["warm_steps"]) == 0]
    base = min(sync_mem, key=lambda c: agg(c, "final")[0]) if sync_mem else None
    paci = [c for c in order if schedule_of[c] == "paci" and line[c]["seeds"]]
    paci_best = min(paci, key=lambda c: agg(c, "final")[0]) if paci else None

    # The strict target, per seed: the baseline's own final validation loss at that seed.
    for c in order:
        for seed, d in line[c]["seeds"].items():
            target = line[base]["seeds"].get(seed, {}).get("final") if base else None
            d["to_target"] = first_below(d["curve_t"], target) if target is not None and d["curve_t"] else None
    for c in order:
        for seed, d in line[c]["seeds"].items():
            base_t = line[base]["seeds"][seed]["to_target"] if base and seed in line[base]["seeds"] else None
            d["speedup"] = base_t / d["to_target"] if base_t and d["to_target"] else None

    # The GPU projection: each line's mean validation curve (by step) read at the steps the GPU
    # budget gives it: the budget line's steps at the fastest synchronous line at PACI's memory.
    proj = {}
    if gpu:
        gsync = [c for c in sync_mem if c in gpu]
        gbase = min(gsync, key=lambda c: float(gpu[c]["gpu_step_s"])) if gsync else None
        gbudget = int(plan_rows[budget_line]["steps_time"]) * float(gpu[gbase]["gpu_step_s"]) if gbase else None
        for c in order:
            if c not in gpu or not line[c]["seeds"] or gbudget is None:
                continue
            warm = int(times[c]["warm_steps"])
            steps = equal_time_steps(gbudget, float(gpu[c]["gpu_step_s"]), warm,
                                     float(gpu[c]["gpu_warm_step_s"]) if warm else None)
            # per seed, the shortest of the line's runs (equal time, equal tokens) that reaches
            # the projected steps (its lr schedule the nearest to a run of that length), else
            # the longest
            at, ended = [], False
            for seed, d in line[c]["seeds"].items():
                own = [d["run"]] + [r for (m, s_), r in runs.get((c, "tokens"), {}).items()
                                    if m == line[c]["m"] and s_ == seed and r["final_val"] is not None]
                reach = [r for r in own if r["total_steps"] >= steps]
                r = min(reach, key=lambda r: r["total_steps"]) if reach else max(own, key=lambda r: r["total_steps"])
                ended = ended or r["total_steps"] < steps
                at.append(val_at(r["val"], min(steps, r["total_steps"])))
            proj[c] = {"steps": steps, "loss": mean(at), "ended": ended, "gpu_step": float(gpu[c]["gpu_step_s"])}
        proj_base = gbase

    # summary.csv
    rows = []
    for c in order:
        info = line[c]
        eq, eq_sd, n = agg(c, "final") if info["seeds"] else (None, None, 0)
        half, half_sd, _ = agg(c, "half") if info["seeds"] else (None, None, 0)
        tok, tok_sd, _ = agg(c, "tokens") if info["seeds"] else (None, None, 0)
        tt, _, _ = agg(c, "to_target") if info["seeds"] else (None, None, 0)
        sp, sp_sd, sp_n = agg(c, "speedup") if info["seeds"] else (None, None, 0)
        total, _, _ = agg(c, "total") if info["seeds"] else (None, None, 0)
        peak = max((d["peak"] for d in info["seeds"].values() if d["peak"] is not None), default=None)
        base_eq = agg(base, "final")[0] if base else None
        base_tok = agg(base, "tokens")[0] if base else None
        rows.append({
            "config": c, "schedule": schedule_of[c], "window": times[c]["window"],
            "memory": "paci" if schedule_of[c] == "paci" else "at PACI's" if schedule_of[c] in AT_PACI_MEMORY
            else "relaxed",
            "m": info["m"], "edge": info["edge"], "seeds": n, "steps": int(plan_rows[c]["steps_time"]),
            "tokens_time": int(plan_rows[c]["steps_time"]) * int(times[c]["tokens_per_step"]),
            "total": total, "budget_use": total / budget if total else None,
            "eq": eq, "eq_sd": eq_sd, "half": half, "half_sd": half_sd, "tok": tok, "tok_sd": tok_sd,
            "gap": 100 * (tok / base_tok - 1) if tok is not None and base_tok else None,
            "eq_gap": 100 * (eq / base_eq - 1) if eq is not None and base_eq else None,
            "to_target": tt, "to_target_n": sum(1 for d in info["seeds"].values() if d["to_target"] is not None),
            "speedup": sp if sp_n == n and n else None, "speedup_sd": sp_sd if sp_n == n else None,
            "peak": peak, "step_s": float(times[c]["step_s"]), "proj": proj.get(c)})
    cols = ("config,schedule,window,memory,lr_multiplier,seeds,steps_equal_time,tokens_equal_time,"
            "replayed_step_s,replayed_s_total,budget_use,equal_time_val_loss,equal_time_spread,"
            "half_budget_val_loss,half_budget_spread,equal_tokens_val_loss,equal_tokens_spread,"
            "gap_vs_baseline_pct,equal_time_gap_pct,replayed_s_to_target,speedup_vs_baseline,"
            "speedup_spread,peak_device_mib,gpu_step_s,gpu_projected_steps,gpu_projected_val_loss")
    with open(os.path.join(out, "summary.csv"), "w") as f:
        f.write(cols + "\n")
        for r in rows:
            p = r["proj"]
            f.write(",".join([
                r["config"], r["schedule"], r["window"], r["memory"], fmt(r["m"], "%g", ""), str(r["seeds"]),
                str(r["steps"]), str(r["tokens_time"]), "%.6f" % r["step_s"], fmt(r["total"], "%.6f", ""),
                fmt(r["budget_use"], "%.4f", ""), fmt(r["eq"], "%.4f", ""), fmt(r["eq_sd"], "%.4f", ""),
                fmt(r["half"], "%.4f", ""), fmt(r["half_sd"], "%.4f", ""), fmt(r["tok"], "%.4f", ""),
                fmt(r["tok_sd"], "%.4f", ""), fmt(r["gap"], "%.3f", ""), fmt(r["eq_gap"], "%.3f", ""),
                fmt(r["to_target"], "%.6f", ""), fmt(r["speedup"], "%.4f", ""), fmt(r["speedup_sd"], "%.4f", ""),
                fmt(r["peak"], "%.3f", ""), fmt(p["gpu_step"] if p else None, "%.6g", ""),
                str(p["steps"]) if p else "", fmt(p["loss"] if p else None, "%.4f", "")]) + "\n")

    write_results(out, rows, base, paci_best, budget, budget_line, seeds, proj, proj_base if gpu else None, runs)
    return 0


def goals(by, base, paci_best, sync_mem):
    """The three goals, each (met: True/False/None, sentence)."""
    if not paci_best or not base:
        return [(None, "no PACI line or no synchronous line at PACI's memory finished")]
    p = by[paci_best]
    out = []
    # 1. equal time: below every synchronous line at PACI's memory by more than twice the spread
    if p["eq_sd"] is None:
        out.append((None, "at equal device time: one seed, no spread: cannot be judged (%s %.4f against %s %.4f)"
                    % (paci_best, p["eq"], base, by[base]["eq"])))
    else:
        worst = []
        for c in sync_mem:
            s = by[c]
            margin = s["eq"] - p["eq"]
            twice = 2 * max(p["eq_sd"], s["eq_sd"] or 0)
            worst.append((margin - twice, c, margin, twice))
        ok = all(w[0] > 0 for w in worst)
        tight = min(worst)
        out.append((ok, "at equal device time %s ends at %s; the closest synchronous line at PACI's memory, %s, "
                    "%.4f above it against twice the larger spread %.4f" % (
                        paci_best, pm(p["eq"], p["eq_sd"]), tight[1], tight[2], tight[3])))
    # 2. equal tokens: within 1% of the best synchronous line at PACI's memory
    toks = [(by[c]["tok"], c) for c in sync_mem if by[c]["tok"] is not None]
    if p["tok"] is None or not toks:
        out.append((None, "at equal tokens: no equal-token loss"))
    else:
        best_tok = min(t for t, _ in toks)
        tied = [c for t, c in toks if t == best_tok]  # the K = 8 lines train the same bits per token
        named = tied[0] if len(tied) == 1 else "%s and %s" % (", ".join(tied[:-1]), tied[-1])
        gap = 100 * (p["tok"] / best_tok - 1)
        out.append((gap <= 1.0, "at equal tokens %s is %+.2f%% from the best synchronous line%s at PACI's memory "
                    "(%s, %.4f)" % (paci_best, gap, "s" if len(tied) > 1 else "", named, best_tok)))
    # 3. at least 1.3x sooner to the strict target
    if p["speedup"] is None:
        out.append((False, "%s does not reach the strict target (%s's final loss) at every seed" % (paci_best, base)))
    else:
        out.append((p["speedup"] >= 1.3, "%s reaches the strict target (%s's own final loss, per seed) %s sooner"
                    % (paci_best, base, pm(p["speedup"], p["speedup_sd"], "%.2fx"))))
    return out


def write_results(out, rows, base, paci_best, budget, budget_line, seeds, proj, proj_base, runs):
    by = {r["config"]: r for r in rows}
    sync_mem = [r["config"] for r in rows if r["memory"] == "at PACI's" and r["eq"] is not None]
    read = lambda name: open(os.path.join(out, name)).read().strip() if os.path.exists(os.path.join(out, name)) else "?"
    train_tokens = os.path.getsize(TRAIN_FILE) if os.path.exists(TRAIN_FILE) else None
    text = ["# Study, fourth edition: results (generated by study/v4.sh and study/analyze_v4.py; do not edit)", "",
            "date: %s, commit %s  " % (read("date.txt"), read("commit.txt")),
            ] + (["resumed (study/v4.sh --resume; date and commit of each resume): %s  "
                  % "; ".join(read("resumed.txt").splitlines())] if os.path.exists(os.path.join(out, "resumed.txt")) else []) + [
            "command: `%s`  " % read("command.txt"),
            "analysis: `study/analyze_v4.py %s`  " % analyze_tuned.shown_dir(out),
            "budget: %.3f replayed s = the whole run of `%s` (the synchronous line at PACI's memory with the shortest "
            "replayed step); seeds: %s (spread: sample sd); baseline and strict target: `%s` (the synchronous line "
            "at PACI's memory with the lowest mean equal-time loss); method: docs/study/fourth/METHOD.md"
            % (budget, budget_line, " ".join(str(s) for s in seeds), base), ""]
    half_label = "(runs of their own)" if any(kind == "half" for _, kind in runs) else "(mid-run)"
    text += ["| line | memory | K | lr | steps in the budget | val loss at equal device time | at half the budget "
             "%s | at equal tokens | replayed s to the strict target | speed-up | peak MiB (fullest device) |" % half_label,
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if r["eq"] is None:
            text.append("| %s | %s | %s | - | %d | diverged or unfinished | - | - | - | - | - |"
                        % (r["config"], r["memory"], r["window"], r["steps"]))
            continue
        reached = "%s (%d of %d seeds)" % (fmt(r["to_target"], "%.2f"), r["to_target_n"], r["seeds"]) \
            if r["to_target_n"] < r["seeds"] else fmt(r["to_target"], "%.2f")
        text.append("| %s | %s | %s | x%g%s | %d | %s | %s | %s | %s | %s | %s |" % (
            r["config"], r["memory"], r["window"], r["m"], " (the grid's %s end)" % r["edge"] if r["edge"] != "no" else "",
            r["steps"], pm(r["eq"], r["eq_sd"]),
            pm(r["half"], r["half_sd"]), pm(r["tok"], r["tok_sd"]), reached,
            pm(r["speedup"], r["speedup_sd"], "%.2fx"), fmt(r["peak"], "%.2f")))
    text += ["", "Goals (PACI's best line: the PACI line with the lowest mean equal-time loss, `%s`):" % paci_best, ""]
    for i, (met, sentence) in enumerate(goals(by, base, paci_best, sync_mem), 1):
        text.append("%d. **%s**: %s." % (i, {True: "met", False: "not met", None: "not judged"}[met], sentence))
    if proj:
        text += ["", "GPU projection (a projection, not a measurement): each line's mean validation curve by step, read at "
                 "the steps its `pacic --explain` step time on examples/gpt2-medium-8.paci (same p and K, the line's "
                 "schedule and keys) fits in the budget line's steps at the fastest synchronous line at PACI's "
                 "memory there (`%s`), on the shortest of the line's runs (equal time, equal tokens) that "
                 "reaches those steps. Per-token losses are assumed to carry over; where none of its runs "
                 "reaches them, its longest run's final loss is shown (marked: a longer run would go lower)."
                 % proj_base, "",
                 "| line | GPU step s | projected steps | projected val loss |", "| --- | ---: | ---: | ---: |"]
        ranked = sorted(proj.items(), key=lambda kv: kv[1]["loss"])
        for c, p in ranked:
            text.append("| %s | %.5f | %d | %.4f%s |" % (c, p["gpu_step"], p["steps"], p["loss"],
                                                           " (run ended first)" if p["ended"] else ""))
        text += ["", "Projected winner of the budget on H100s: `%s`." % ranked[0][0]]
    if train_tokens:
        epochs = ["%s %.2f" % (r["config"], r["tokens_time"] / train_tokens) for r in rows]
        text += ["", "Epochs of examples/data/tiny_train.bin (%d tokens) in each equal-time run: %s."
                 % (train_tokens, ", ".join(epochs))]
    walls = [r["wall"] for rs in runs.values() for r in rs.values() if r["wall"] is not None]
    cpus = [r["cpu"] for rs in runs.values() for r in rs.values() if r["cpu"] is not None]
    if walls:
        text += ["", "training: %d runs, %.1f min of wall time and %.1f min of CPU time in all (this machine, its load "
                 "at the time)" % (len(walls), sum(walls) / 60, sum(cpus) / 60)]
    text.append("")
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(text))
    print("\n".join(text[5:]))


if __name__ == "__main__":
    sys.exit(main())
