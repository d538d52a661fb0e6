#!/usr/bin/env bash
# pacic plot: two short trainings of the tiny example (shrunk) drawn on one picture. The SVG
# parses as XML; each panel (steps, tokens) holds one polyline per file and series with as
# many points as the file has records, each where the panel's own tick labels put it; the
# legend names both files. The noise scale the files log is drawn the same way in a panel
# under each (a polyline per stretch between nulls, on a log axis past a decade); files
# without it draw byte for byte as before it was drawn (plot_golden.svg). Then a resumed file,
# and the bad inputs: each is refused (exit 1, no crash), named by file and line, and leaves
# no picture.
source tests/e2e/lib.sh

# tiny_variant NAME SCHEDULE MICRO STEPS EVAL: examples/tiny.paci, narrow and short.
tiny_variant() {
    cp "$root/examples/tiny.paci" "$work/$1.paci"
    sed -i -e "s|\"data/|\"$data/|" -e "s/width 128/width 32/" -e "s/context 64/context 16/" \
        -e "s/schedule paci/schedule $2/" -e "s/micro 8 /micro $3 /" -e "s/steps 600/steps $4/" \
        -e "s/layers 4/layers 2/" -e "s/every 100; batches 16/every $5; batches 2/" -e "s/every 300/every 0/" \
        "$work/$1.paci"
    grep -q "every $5; batches 2" "$work/$1.paci" && grep -q "micro $3 " "$work/$1.paci" ||
        fail "the edits of examples/tiny.paci did not apply"
}
tiny_variant a paci 2 12 4
tiny_variant b 1f1b 4 9 3
train a --blas-threads 1 --no-checkpoint
train b --blas-threads 1 --no-checkpoint
ma=$work/a/metrics.jsonl mb=$work/b/metrics.jsonl

# check_svg SVG LABELS_JOINED_BY_| FILES...: the picture against the files' records.
check_svg() {
    python3 - "$@" <<'PY' || fail "$1 does not draw the metrics files"
import json, math, re, sys, xml.etree.ElementTree as ET
svg, labels, files = sys.argv[1], sys.argv[2].split("|"), sys.argv[3:]
ns = {"s": "http://www.w3.org/2000/svg"}
text = open(svg).read()
root = ET.fromstring(text)  # valid XML, or this raises
lines = text.splitlines()
assert len(lines) > 30 and max(map(len, lines)) <= 300, "not laid out a line an element"

def records(path):
    """A file's curves as plot draws them: a step logged again (a resumed run) replaces it and
    every later one; null losses are no point."""
    curves = {"train": [], "val": [], "noise": []}
    for line in open(path):
        if not line.strip():
            continue
        rec = json.loads(line)
        if "loss" in rec and "noise_scale" in rec:  # a null one is a gap: None
            noise = curves["noise"]
            while noise and noise[-1][0] >= rec["step"]:
                noise.pop()
            noise.append((rec["step"], rec.get("tokens"), rec["noise_scale"]))
        key = "train" if "loss" in rec else "val" if "val_loss" in rec else None
        if key is None:
            continue
        curve = curves[key]
        while curve and curve[-1][0] >= rec["step"]:
            curve.pop()
        loss = rec["loss" if key == "train" else "val_loss"]
        if loss is not None:
            curve.append((rec["step"], rec.get("tokens"), loss))
    return curves

def value(label):
    scale = {"k": 1e3, "M": 1e6, "G": 1e9}.get(label[-1], 1)
    return float(label[:-1] if scale != 1 else label) * scale

def axis_map(panel, group, attr, log_y=False):
    """The affine map from data (or its log10) to pixels that the panel's ticks state: each
    grid line and the label after it."""
    lines = panel.findall(f"s:g[@class='{group}']/s:line", ns)
    labels = panel.findall(f"s:g[@class='{group}']/s:text", ns)
    assert len(lines) == len(labels), f"{group}: {len(lines)} grid lines, {len(labels)} labels"
    scale = math.log10 if log_y else (lambda v: v)
    ticks = [(scale(value(t.text)), float(l.get(attr))) for l, t in zip(lines, labels)]
    assert len(ticks) >= 2, f"{group}: fewer than two ticks"
    (v0, p0), (v1, p1) = ticks[0], ticks[-1]
    return lambda v: p0 + (p1 - p0) * (scale(v) - v0) / (v1 - v0)

def stretches(points):
    """The noise scales between nulls: a polyline each."""
    out = [[]]
    for p in points:
        if p[2] is None:
            out.append([])
        else:
            out[-1].append(p)
    return [s for s in out if s]

def check_points(panel, polyline, points, what, log_y=False):
    """A polyline's points against the records, each where the panel's ticks put it."""
    x_of, y_of = axis_map(panel, "x-ticks", "x1", log_y=False), axis_map(panel, "y-ticks", "y1", log_y)
    area = panel.find("s:rect[@class='area']", ns)
    left, top = float(area.get("x")), float(area.get("y"))
    right, bottom = left + float(area.get("width")), top + float(area.get("height"))
    xy = [tuple(map(float, p.split(","))) for p in polyline.get("points").split()]
    assert len(xy) == len(points), f"{what}: {len(xy)} points, {len(points)} records"
    assert all(math.isfinite(px) and math.isfinite(py) for px, py in xy), f"{what}: a coordinate not finite"
    assert all(left <= px <= right and top <= py <= bottom for px, py in xy), \
        f"{what}: a point outside the plotting area"
    for (px, py), (step, tokens, y) in zip(xy, points):
        want_x = x_of(tokens if panel.get("data-x") == "tokens" else step)
        assert abs(px - want_x) < 0.6 and abs(py - y_of(y)) < 0.6, \
            f"{what}, {panel.get('data-x')} panel: step {step} at ({px}, {py}), " \
            f"expected ({want_x:.1f}, {y_of(y):.1f})"

curves = [records(f) for f in files]
panels = root.findall("s:g[@class='panel']", ns)
assert [p.get("data-x") for p in panels] == ["steps", "tokens"], "not a steps and a tokens panel"
noise_values = [p[2] for c in curves for p in c["noise"] if p[2] is not None]
noise_panels = root.findall("s:g[@class='noise-panel']", ns)
assert [p.get("data-x") for p in noise_panels] == (["steps", "tokens"] if noise_values else []), \
    f"{len(noise_values)} noise scales logged, noise panels {[p.get('data-x') for p in noise_panels]}"
for panel in noise_panels:
    log_y = max(noise_values) > 10 * min(noise_values)
    assert panel.get("data-y") == ("log" if log_y else "linear"), \
        f"noise scales {min(noise_values)} to {max(noise_values)} on a {panel.get('data-y')} axis"
    polylines = panel.findall("s:polyline", ns)
    assert all(p.get("class") == "noise" for p in polylines), "a noise panel holds another series"
    for run, c in enumerate(curves):
        drawn = [p for p in polylines if p.get("data-run") == str(run)]
        expected = stretches(c["noise"])
        assert len(drawn) == len(expected), \
            f"file {run}: {len(drawn)} noise polylines, {len(expected)} stretches between nulls"
        for k, (polyline, points) in enumerate(zip(drawn, expected)):
            check_points(panel, polyline, points, f"file {run} noise stretch {k}", log_y)
for panel in panels:
    polylines = panel.findall("s:polyline", ns)
    expected = sum(1 for c in curves for series in (c["train"], c["val"]) if series)
    assert len(polylines) == expected, f"{len(polylines)} polylines, {expected} expected"
    strokes = set()
    for run, c in enumerate(curves):
        for series in ("train", "val"):
            points = c[series]
            drawn = [p for p in polylines if p.get("class") == series and p.get("data-run") == str(run)]
            assert len(drawn) == (1 if points else 0), f"file {run}: {len(drawn)} {series} polylines"
            if points:
                strokes.add(drawn[0].get("stroke"))
                check_points(panel, drawn[0], points, f"file {run} {series}")
    assert len(strokes) == len(files), "the files do not have a colour each"
legend = [t.text for t in root.findall("s:g[@class='legend']/s:text[@class='label']", ns)]
assert len(legend) == len(labels) and all(t.startswith(l + "  (") for t, l in zip(legend, labels)), \
    f"legend {legend}, labels {labels}"
assert root.find("s:text", ns) is not None, "no title"
bad = [v for e in root.iter() for v in e.attrib.values() if re.search("nan|inf", v, re.I)]
assert not bad, f"an attribute that is not finite: {bad[:3]}"
print(f"{svg}: {len(files)} files, " + ", ".join(
    f"{len(c['train'])} + {len(c['val'])} points" for c in curves) + " in each panel, " + ", ".join(
    f"{sum(p[2] is not None for p in c['noise'])} noise scales in {len(stretches(c['noise']))} stretches"
    for c in curves) + f" in {len(noise_panels)} noise panels")
PY
}

"$pacic" plot "$ma" "$mb" -o "$work/ab.svg" || fail "pacic plot of two files"
check_svg "$work/ab.svg" "$ma|$mb" "$ma" "$mb"
[ "$(grep -c '"loss"' "$ma")" = 12 ] && [ "$(grep -c '"val_loss"' "$ma")" = 3 ] ||
    fail "a.jsonl holds not 12 losses and 3 validation losses"
"$pacic" plot "$mb" "$ma" --label '1f1b, micro 4' --label 'paci <K=4> & co' -o "$work/labels.svg" ||
    fail "pacic plot with --label"
check_svg "$work/labels.svg" "1f1b, micro 4|paci <K=4> & co" "$mb" "$ma"
"$pacic" plot "$ma" --x tokens -o "$work/tokens.svg" || fail "--x tokens"
[ "$(grep -c 'class="panel"' "$work/tokens.svg")" = 1 ] && grep -q 'data-x="tokens"' "$work/tokens.svg" ||
    fail "--x tokens does not draw one panel, against tokens"

# A resumed run appends: its steps replace those it logs again; a null (non-finite) loss is no
# point. Its validation loss lies below every training loss, so the y range must take both.
cat > "$work/resumed.jsonl" <<'EOF'
{"stage_bytes": [1024]}
{"step": 1, "loss": 5.5, "tokens": 64}
{"step": 2, "loss": 5.0, "tokens": 128}
{"step": 3, "loss": 4.9, "tokens": 192}
{"stage_bytes": [1024]}
{"step": 2, "loss": 5.1, "tokens": 128}
{"step": 3, "loss": null, "tokens": 192}

{"step": 4, "loss": 4.6, "tokens": 256}
{"step": 4, "val_loss": 4.4, "tokens": 256}
EOF
"$pacic" plot "$work/resumed.jsonl" "$ma" -o "$work/resumed.svg" || fail "pacic plot of a resumed file"
check_svg "$work/resumed.svg" "$work/resumed.jsonl|$ma" "$work/resumed.jsonl" "$ma"

# The noise scale: the real runs log it (paci and 1f1b over two stages, a window of micro-batches
# each step), drawn above in ab.svg. By hand: nulls (not estimated yet) are gaps, a stretch of
# one point still shows, a resume replaces the steps it logs again; past a decade the axis is
# log, within one linear; a file without the field beside one with it has no noise series.
grep -q '"noise_scale": [0-9]' "$ma" && grep -q '"noise_scale": [0-9]' "$mb" ||
    fail "the tiny runs log no noise scale: $(grep -m1 '"loss"' "$ma")"
cat > "$work/noise.jsonl" <<'EOF'
{"stage_bytes": [1024, 2048]}
{"step": 1, "loss": 5.5, "noise_scale": null, "tokens": 64}
{"step": 2, "loss": 5.0, "noise_scale": 2.8, "tokens": 128}
{"step": 3, "loss": 4.9, "noise_scale": 6.5, "tokens": 192}
{"step": 4, "loss": 4.7, "noise_scale": 9.1, "tokens": 256}
{"stage_bytes": [1024, 2048]}
{"step": 4, "loss": 4.7, "noise_scale": null, "tokens": 256}
{"step": 5, "loss": 4.5, "noise_scale": 15.2, "tokens": 320}
{"step": 6, "loss": null, "noise_scale": null, "tokens": 384}
{"step": 7, "loss": 4.0, "noise_scale": 36.4, "tokens": 448}
{"step": 8, "loss": 3.9, "noise_scale": 31.0, "tokens": 512}
{"step": 8, "tokens": 512, "val_loss": 4.1}
EOF
printf '{"step": 1, "loss": 3, "noise_scale": 12, "tokens": 8}\n%s\n' \
    '{"step": 2, "loss": 2, "noise_scale": 30.5, "tokens": 16}' \
    > "$work/noise_linear.jsonl"
printf '{"step": 1, "loss": 3, "tokens": 8}\n{"step": 2, "loss": 2.5, "tokens": 16}\n' > "$work/no_noise.jsonl"
"$pacic" plot "$work/noise.jsonl" "$work/no_noise.jsonl" -o "$work/noise.svg" || fail "pacic plot of noise scales"
check_svg "$work/noise.svg" "$work/noise.jsonl|$work/no_noise.jsonl" "$work/noise.jsonl" "$work/no_noise.jsonl"
grep -q 'data-y="log"' "$work/noise.svg" && grep -q 'noise scale 31 at step 8)' "$work/noise.svg" ||
    fail "noise.svg: not a log axis, or the legend lacks the last noise scale"
"$pacic" plot "$work/noise_linear.jsonl" -o "$work/noise_linear.svg" || fail "pacic plot of one decade"
check_svg "$work/noise_linear.svg" "$work/noise_linear.jsonl" "$work/noise_linear.jsonl"
grep -q 'data-y="linear"' "$work/noise_linear.svg" || fail "12 to 30.5 not on a linear axis"

# Files without noise_scale draw as before: plot_golden.svg is what pacic plot wrote for these
# two files before the noise scale was drawn. After an intended change to the picture, write it
# anew (the command below, -o tests/e2e/plot_golden.svg, from these files) and review the diff.
cat > "$work/g1.jsonl" <<'EOF'
{"stage_bytes": [1024, 2048]}
{"step": 1, "loss": 5.5, "lr": 0.001, "grad_norm": 1.3, "tokens": 64}
{"step": 2, "loss": 5.0, "lr": 0.001, "grad_norm": 1.2, "tokens": 128}
{"step": 3, "loss": 4.9, "lr": 0.001, "grad_norm": 1.1, "tokens": 192}
{"step": 3, "tokens": 192, "val_loss": 5.1}
{"stage_bytes": [1024, 2048]}
{"step": 3, "loss": 4.8, "lr": 0.001, "grad_norm": 1.1, "tokens": 192}
{"step": 4, "loss": null, "lr": 0.001, "grad_norm": null, "tokens": 256}
{"step": 5, "loss": 4.2, "lr": 0.001, "grad_norm": 0.9, "tokens": 320}
{"step": 6, "loss": 3.9, "lr": 0.001, "grad_norm": 0.8, "tokens": 384}
{"step": 6, "tokens": 384, "val_loss": 4.3}
EOF
cat > "$work/g2.jsonl" <<'EOF'
{"step": 1, "loss": 5.6, "tokens": 128}
{"step": 2, "loss": 4.7, "tokens": 256}
{"step": 3, "loss": 4.1, "tokens": 384}
{"step": 3, "val_loss": 4.4, "tokens": 384}
EOF
"$pacic" plot "$work/g1.jsonl" "$work/g2.jsonl" --label 'resumed, p=2' --label '1f1b <K> & co' -o "$work/golden.svg" ||
    fail "pacic plot of the golden files"
cmp -s "$work/golden.svg" "$root/tests/e2e/plot_golden.svg" || fail "files without noise_scale no longer draw \
as before: $(diff "$work/golden.svg" "$root/tests/e2e/plot_golden.svg" | head -8)"
echo "noise scales drawn (log and linear axes, gaps at nulls); files without them draw as plot_golden.svg"

# refused EXPECTED ARGS...: pacic plot ARGS exits 1 (no crash), says EXPECTED, writes no picture.
refused() {
    local expected=$1 out status=0
    shift
    rm -f "$work/bad.svg"
    out=$("$pacic" plot "$@" 2>&1) || status=$?
    [ "$status" = 1 ] || fail "pacic plot $*: exit $status, 1 expected: $out"
    grep -qF -- "$expected" <<< "$out" || fail "pacic plot $*: '$expected' not said: $out"
    [ ! -e "$work/bad.svg" ] || fail "pacic plot $*: wrote a picture although it failed"
}
head -2 "$ma" > "$work/not_json.jsonl"
echo '{"step": 3, "loss": 5.2' >> "$work/not_json.jsonl"
printf '{"stage_bytes": [1]}\n{"step": 2, "lr": 0.001}\n' > "$work/lacks.jsonl"
printf '{"step": 1, "loss": "low"}\n' > "$work/not_number.jsonl"
head -1 "$ma" > "$work/no_loss.jsonl"
sed 's/, "tokens": [0-9]*//' "$ma" > "$work/old.jsonl"
refused "cannot read $work/none.jsonl: No such file or directory" "$ma" "$work/none.jsonl" -o "$work/bad.svg"
refused "$work/not_json.jsonl:3: not a JSON record" "$ma" "$work/not_json.jsonl" -o "$work/bad.svg"
refused "$work/lacks.jsonl:2: not a record of run --metrics" "$work/lacks.jsonl" -o "$work/bad.svg"
refused "$work/not_number.jsonl:1: \"loss\" is not a number" "$work/not_number.jsonl" -o "$work/bad.svg"
refused "$work/no_loss.jsonl: no loss records" "$ma" "$work/no_loss.jsonl" -o "$work/bad.svg"
refused "$work/old.jsonl:2: a loss without \"tokens\"" "$work/old.jsonl" --x tokens -o "$work/bad.svg"
# Losses past a float's range (run writes floats) made the frame's span inf and every y "-nan";
# tokens below 0 an x of -inf: refused. At the float's own extremes every coordinate is finite.
printf '{"step": 1, "loss": 1e308, "tokens": 8}\n{"step": 2, "loss": -1e308, "tokens": 16}\n' > "$work/huge.jsonl"
printf '{"step": 1, "loss": 2, "tokens": -1e308}\n' > "$work/negative_tokens.jsonl"
refused "$work/huge.jsonl:1: \"loss\" 1e+308 is out of range: it must be in [-3.40282347e+38, 3.40282347e+38]" \
    "$work/huge.jsonl" -o "$work/bad.svg"
refused "$work/negative_tokens.jsonl:1: \"tokens\" -1e+308 is out of range: it must be in [0, 1e+30]" \
    "$work/negative_tokens.jsonl" -o "$work/bad.svg"
printf '{"step": 1, "loss": 3.4e38, "tokens": 8}\n{"step": 2, "loss": -3.4e38, "tokens": 1e30}\n' > "$work/edge.jsonl"
"$pacic" plot "$work/edge.jsonl" -o "$work/edge.svg" || fail "losses at a float's extremes are not drawn"
# nan or inf as a word in an attribute (the legend's file name, a random temporary path, may hold the letters)
! grep -qiE '="[^"]*\b(nan|inf)\b' "$work/edge.svg" || fail "edge.svg holds a coordinate that is not finite: \
$(grep -iE '="[^"]*\b(nan|inf)\b' "$work/edge.svg" | head -3)"
# A noise scale not a number, or outside (0, 1e30]: run writes null where B_simple is not > 0.
printf '{"step": 1, "loss": 2, "noise_scale": "wide", "tokens": 8}\n' > "$work/noise_word.jsonl"
printf '{"step": 1, "loss": 2, "noise_scale": 3, "tokens": 8}\n%s\n' \
    '{"step": 2, "loss": 2, "noise_scale": -4, "tokens": 16}' \
    > "$work/noise_negative.jsonl"
printf '{"step": 1, "loss": 2, "noise_scale": 0, "tokens": 8}\n' > "$work/noise_zero.jsonl"
printf '{"step": 1, "loss": 2, "noise_scale": 1e308, "tokens": 8}\n' > "$work/noise_huge.jsonl"
refused "$work/noise_word.jsonl:1: \"noise_scale\" is not a number" "$work/noise_word.jsonl" -o "$work/bad.svg"
refused "$work/noise_negative.jsonl:2: \"noise_scale\" -4 is out of range: it must be in (0, 1e+30]" \
    "$work/noise_negative.jsonl" -o "$work/bad.svg"
refused "$work/noise_zero.jsonl:1: \"noise_scale\" 0 is out of range" "$work/noise_zero.jsonl" -o "$work/bad.svg"
refused "$work/noise_huge.jsonl:1: \"noise_scale\" 1e+308 is out of range" "$work/noise_huge.jsonl" -o "$work/bad.svg"
printf '{"step": 1, "loss": 2, "noise_scale": 1e-300, "tokens": 8}\n%s\n' \
    '{"step": 2, "loss": 2, "noise_scale": 1e30, "tokens": 16}' \
    > "$work/noise_edge.jsonl"
"$pacic" plot "$work/noise_edge.jsonl" -o "$work/noise_edge.svg" ||
    fail "noise scales at the range's ends are not drawn"
check_svg "$work/noise_edge.svg" "$work/noise_edge.jsonl" "$work/noise_edge.jsonl"
refused "no -o FILE.svg" "$ma"
refused "-o needs a value" "$ma" -o
refused "no metrics file given" -o "$work/bad.svg"
refused "more --label than metrics files" "$ma" --label x --label y -o "$work/bad.svg"
refused "--x takes steps, tokens or both" "$ma" --x time -o "$work/bad.svg"
# Without --x, a file from before "tokens" is drawn against steps only, with a note.
out=$("$pacic" plot "$work/old.jsonl" -o "$work/old.svg" 2>&1) || fail "a file without tokens: $out"
grep -qF "note: $work/old.jsonl:2:" <<< "$out" && [ "$(grep -c 'class="panel"' "$work/old.svg")" = 1 ] ||
    fail "a file without tokens is not drawn against steps alone, with a note: $out"
echo "bad inputs refused: a missing file, a line not JSON, a record lacking its fields, a loss not a number," \
    "a file without losses, --x tokens on a file without tokens, no -o, no file, a --label too many, a bad --x," \
    "a loss past a float's range, tokens below 0, a noise scale not a number or outside (0, 1e30]; losses at a" \
    "float's extremes and noise scales at 1e-300 and 1e30 drawn with finite coordinates"
