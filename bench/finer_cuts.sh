#!/usr/bin/env bash
# bench/finer_cuts.sh: how even the stages of examples/gpt2-medium-8.paci and gpt2-medium-4
# could get with split points finer than half layers (pacic has half layers, since 2026-12-06
# the cut after the fc product, before GELU, and since 2026-12-07 the cut after the attention
# kernel; docs/dsl.md, "Split points inside a layer"). Every price is the kernel cost model's, as `pacic --emit
# costs` prints it: the file with `split [0, n, ..., n, 0]` gives the embedding alone (stage
# 0), the head alone (the last stage) and a whole layer (stage 1's, over its layer count); a
# layer is cut into nine pieces, one a forward kernel (each with the backward ops of its
# weights and inputs, the optimizer step by the pieces' weights): ln1, qkv, attention, the
# attention projection, the residual add with ln2, fc, GELU, the MLP projection, the residual
# add. A cut before a piece sends the residual stream and the tensor that piece reads (WIDTH,
# in C values a token: 4 after qkv, 5 after fc or GELU, 2 elsewhere inside a layer; pacic's
# half boundary, before the residual add with ln2, and a layer's start send the residual's 1),
# and for each set of allowed cut points an exact dynamic program finds the split whose
# slowest stage (K forwards and backwards and one optimizer step) is least. A cut costs
# nothing in the split's choice (the fused residual add and ln2 stay one piece,
# where pacic prices a half boundary's add and LayerNorm apart; no memory limit): an estimate
# of what such a cut could reach, not a prediction. The row "half layers" is the
# estimate at pacic's own points, to compare with the file's --explain (printed above it).
# Each best split is also priced with its messages (the latency, and WIDTH C values a token
# over the link's bandwidth, by what the cut sends, in bf16 under `precision bf16`): its stage
# costs and link times go into a profile that `pacic --profile --explain` replays, and the
# column "PACI bubble" is that replay's; "refined" the same after moving one boundary at a
# time (to an allowed point up to 3 pieces away) while the replay's bubble falls: a split
# chosen for its messages too, as the slowest-stage DP's is not.
#
# Last, the fewest cut points beside the half layers' (every set of 1, 2, ... of the other seven) whose
# best split has at most 3% imbalance and every stage at least 95% busy (the goal the two
# examples are held to).
# Figures only, no assertions; about 15 seconds. Needs python3.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pacic=$root/build/bin/pacic
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make -s all >/dev/null
command -v python3 >/dev/null || { echo "bench/finer_cuts.sh: needs python3" >&2; exit 1; }

for p in 8 4; do
    file=examples/gpt2-medium-$p.paci
    layers=$(sed -n 's/^ *layers \([0-9]*\).*/\1/p' "$file")
    per=$((layers / (p - 2)))
    [ $((per * (p - 2))) = "$layers" ] || { echo "bench/finer_cuts.sh: $layers layers over $((p - 2)) stages" >&2; exit 1; }
    entries="0$(for _ in $(seq 1 $((p - 2))); do printf ", %d" "$per"; done), 0"
    sed "s/^\( *window [0-9]*\)/\1; split [$entries]/" "$file" > "$work/parts.paci"
    grep -q "split \[0, $per" "$work/parts.paci" || { echo "bench/finer_cuts.sh: $file has no 'window' line to add a split to" >&2; exit 1; }
    "$pacic" "$work/parts.paci" --emit costs 2>/dev/null > "$work/costs.txt"
    "$pacic" "$file" --explain 2>/dev/null | sed -n 's/.*step time \([0-9.e+-]*\) s.*bubble \([0-9.]*%\) (steady.*/\1 \2/p' | head -1 > "$work/explain.txt"
    python3 - "$file" "$p" "$layers" "$per" "$work/costs.txt" "$work/explain.txt" "$pacic" "$work" <<'EOF'
import itertools, re, subprocess, sys
file, p, layers, per, costs, explain = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
pacic, work = sys.argv[7], sys.argv[8]
# A layer's kernels in forward order, each with the backward ops of its weights and inputs,
# found by the text the op lists give them (ops.c), and its matrices in C^2 (AdamW's share).
PIECES = [("ln1", ["ln1 = ", "dres += d(LayerNorm 1)"], 0),
          ("qkv", ["qkv = ", "d qkvb", "d qkvw", "d ln1"], 3),
          ("attention", ["atty = ", "d q, and delta", "d k, d v"], 0),
          ("attention projection", ["attention projection", "d attprojb", "d attprojw", "d atty"], 1),
          ("residual + ln2", ["resid2 = ", "dres += d(LayerNorm 2)"], 0),
          ("fc", ["fc = ", "d fcb", "d fcw", "d ln2"], 4),
          ("GELU", ["gelu = ", "d fc = "], 0),
          ("MLP projection", ["MLP projection", "d fcprojb", "d fcprojw", "d gelu = "], 4),
          ("residual", ["resid3 = "], 0)]
K = len(PIECES)
# what a cut before piece k sends each way, in C values a token: the residual stream, and
# beside it the tensor the next piece reads (a half boundary adds the residual first: C)
WIDTH = [1, 2, 4, 2, 1, 2, 5, 5, 2]
stage, ops, ops_fwd = {}, [0.0] * K, [0.0] * K
for line in open(costs):
    f = line.split()
    if f[0] == "stage":
        stage[int(f[1])] = (float(f[3]), float(f[5]), float(f[7]))
    elif f[0] == "op" and f[1] == "1" and f[3] in ("block_forward", "block_backward", "block_backward_down", "block_backward_late"):
        what = line.split('"')[1]
        owner = [k for k in range(K) for prefix in PIECES[k][1] if what.startswith(prefix)]
        if len(owner) != 1:
            sys.exit(f"bench/finer_cuts.sh: the block op '{what}' belongs to no piece (ops.c changed?)")
        ops[owner[0]] += float(f[12]) * float(f[6]) / per  # seconds a call x calls a step, per layer
        if f[3] == "block_forward":
            ops_fwd[owner[0]] += float(f[12]) * float(f[6]) / per
window = int(re.search(r"^\s*window (\d+)", open(file).read(), re.M).group(1))
def step_time(s):
    fwd, bwd, opt = stage[s]
    return window * (fwd + bwd) + opt
layer = step_time(1) / per
opt_layer = stage[1][2] / per
piece = [ops[k] + opt_layer * PIECES[k][2] / 12 for k in range(K)]
if abs(sum(piece) - layer) > 1e-4 * layer:  # --emit costs prints 6 digits
    sys.exit(f"bench/finer_cuts.sh: the pieces ({sum(piece)}) do not add up to the layer ({layer})")
embed, head = step_time(0), step_time(p - 1)
seq = [piece[k % K] for k in range(K * layers)]
seq[0] += embed
seq[-1] += head
total = sum(seq)

def best(allowed):
    """Over the splits of p stages cut where `allowed` lets: the least slowest stage, and among
    the splits that reach it, the most the least busy stage can hold."""
    cuts = [0] + [j for j in range(1, len(seq)) if j % K in allowed] + [len(seq)]
    pre = [0.0]
    for x in seq:
        pre.append(pre[-1] + x)
    n, inf = len(cuts), float("inf")
    def span(j, i):
        return pre[cuts[i]] - pre[cuts[j]]
    worst = [[inf] * n for _ in range(p + 1)]  # [k][i]: the first k stages end at cut i
    worst[0][0] = 0.0
    for k in range(1, p + 1):
        for i in range(1, n):
            worst[k][i] = min(max(worst[k - 1][j], span(j, i)) for j in range(i))
    slowest = worst[p][n - 1]
    least = [[-inf] * n for _ in range(p + 1)]  # the same, every stage at most the slowest
    least[0][0] = inf
    came = [[0] * n for _ in range(p + 1)]
    for k in range(1, p + 1):
        for i in range(1, n):
            for j in range(i):
                if span(j, i) <= slowest * (1 + 1e-12) and min(least[k - 1][j], span(j, i)) > least[k][i]:
                    least[k][i], came[k][i] = min(least[k - 1][j], span(j, i)), j
    starts, i = [], n - 1  # the pieces each stage starts at, from the last stage back
    for k in range(p, 0, -1):
        i = came[k][i]
        starts.insert(0, cuts[i])
    return slowest, least[p][n - 1], starts

text = open(file).read()
def number(key):
    return float(re.search(r"^\s*" + key + r"\s+([0-9.e_+-]+)", text, re.M).group(1).replace("_", ""))
value_bytes = 2 if re.search(r"^\s*precision bf16", text, re.M) else 4
tokens = number("micro") * number("context")
embed_fwd, embed_bwd, embed_step = stage[0]
head_fwd, head_bwd, head_step = stage[p - 1]

def priced(starts):
    """PACI's bubble as `pacic --profile --explain` prices the split that starts its stages at
    these pieces: each stage's forward, backward and step from the pieces' kernel costs, each
    link's message (latency + WIDTH x C values a token over the bandwidth), replayed."""
    bounds = starts + [len(seq)]
    lines = ["version 2"]
    for s_ in range(p):
        part = range(bounds[s_], bounds[s_ + 1])
        fwd = sum(ops_fwd[j % K] for j in part) / window
        bwd = sum(ops[j % K] - ops_fwd[j % K] for j in part) / window
        step = sum(opt_layer * PIECES[j % K][2] / 12 for j in part)
        if s_ == 0:
            fwd, bwd, step = fwd + embed_fwd, bwd + embed_bwd, step + embed_step
        if s_ == p - 1:
            fwd, bwd, step = fwd + head_fwd, bwd + head_bwd, step + head_step
        lines.append(f"stage {s_} fwd {fwd:.9g} bwd {bwd:.9g} step {step:.9g}")
    for link in range(p - 1):
        values = WIDTH[bounds[link + 1] % K] * number("width") * tokens
        lines.append(f"link {link} {number('latency') + values * value_bytes / number('bandwidth'):.9g}")
    with open(f"{work}/split.profile", "w") as out:
        out.write("\n".join(lines) + "\n")
    out = subprocess.run([pacic, file, "--profile", f"{work}/split.profile", "--explain"], capture_output=True, text=True).stdout
    return float(re.search(r"^\s+paci\s+([0-9.]+)%", out, re.M).group(1))

def refined(starts, allowed):
    """The priced bubble after moving one stage boundary at a time to another allowed cut
    point up to 3 pieces away, while that lowers it: a split chosen for its messages too."""
    cuts = [j for j in range(1, len(seq)) if j % K in allowed]
    current, bubble = list(starts), priced(starts)
    moved = True
    while moved:
        moved = False
        for b in range(1, p):
            for c in cuts:
                if c == current[b] or abs(c - current[b]) > 3 or not current[b - 1] < c < (current[b + 1] if b + 1 < p else len(seq)):
                    continue
                trial = current[:b] + [c] + current[b + 1:]
                cost = priced(trial)
                if cost < bubble - 1e-9:
                    current, bubble, moved = trial, cost, True
    return bubble

step, bubble = open(explain).read().split()
print(f"{file}: {p} stages, slowest and least busy stage per split point set (kernel cost model,")
print(f"seconds a step; a layer {1e3 * layer:.2f} ms: " +
      ", ".join(f"{n[0]} {1e3 * x:.2f}" for n, x in zip(PIECES, piece)) +
      f"; embedding {1e3 * embed:.2f}, head {1e3 * head:.2f}; mean stage {1e3 * total / p:.2f} ms)")
print(f"  pacic --explain on the file: step time {1e3 * float(step):.2f} ms, bubble {bubble} (imbalance and messages)")
print(f"  {'split points':<48} {'slowest':>9} {'imbalance':>10} {'least busy':>11} {'PACI bubble':>13} {'refined':>8}")
# a cut before the pieces named: 0 a layer's start, 4 pacic's half boundary, 6 its cut after fc
for name, allowed in [("whole layers", {0}), ("half layers", {0, 4}),
                      ("half layers and after fc (pacic's points)", {0, 4, 6}),
                      ("half layers and after GELU (sends 5x)", {0, 4, 7}),
                      ("half layers and after qkv (sends 4x)", {0, 2, 4}),
                      ("half layers, after qkv and after GELU", {0, 2, 4, 7}),
                      ("every kernel", set(range(K)))]:
    slowest, least, starts = best(allowed)
    print(f"  {name:<48} {1e3 * slowest:6.2f} ms {100 * (1 - total / p / slowest):9.1f}% {100 * least / slowest:10.1f}% {priced(starts):12.1f}% {refined(starts, allowed):7.1f}%")
# the fewest cut points beside the half layers' whose best split is within the goal (imbalance
# at most 3%, every stage at least 95% busy; the messages come on top where two slowest
# stages are neighbours), every such set of that size
others = [k for k in range(1, K) if k != 4]
for size in range(1, len(others) + 1):
    found = []
    for chosen in itertools.combinations(others, size):
        slowest, least, starts = best({0, 4} | set(chosen))
        imbalance = 1 - total / p / slowest
        if imbalance <= 0.03 and least >= 0.95 * slowest:
            found.append((chosen, imbalance, least / slowest, priced(starts), refined(starts, {0, 4} | set(chosen))))
    if found:
        print(f"  the fewest cut points beside half layers for at most 3% imbalance and every stage at least 95% busy: {size}")
        for chosen, imbalance, busy, bubble, better in found:
            names = ", ".join(f"before {PIECES[k][0]}" for k in chosen)
            print(f"    {names:<60} {100 * imbalance:5.1f}% {100 * busy:6.1f}%, PACI bubble {bubble:.1f}%, refined {better:.1f}%")
        break
else:
    print("  no set of cut points reaches 3% imbalance with every stage at least 95% busy")
EOF
done
