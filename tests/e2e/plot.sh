#!/usr/bin/env bash
# pacic plot: two short trainings of the tiny example (shrunk) drawn on one picture. The SVG
# parses as XML; each panel (steps, tokens) holds one polyline per file and series with as
# many points as the file has records, each where the panel's own tick labels put it; the
# legend names both files. Then a resumed file, and the bad inputs: each is refused (exit 1,
# no crash), named by file and line, and leaves no picture.
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
import json, re, sys, xml.etree.ElementTree as ET
svg, labels, files = sys.argv[1], sys.argv[2].split("|"), sys.argv[3:]
ns = {"s": "http://www.w3.org/2000/svg"}
text = open(svg).read()
root = ET.fromstring(text)  # valid XML, or this raises
lines = text.splitlines()
assert len(lines) > 30 and max(map(len, lines)) <= 300, "not laid out a line an element"

def records(path):
    """A file's curves as plot draws them: a step logged again (a resumed run) replaces it and
    every later one; null losses are no point."""
    curves = {"train": [], "val": []}
    for line in open(path):
        if not line.strip():
            continue
        rec = json.loads(line)
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

def axis_map(panel, group, attr):
    """The affine map from data to pixels that the panel's ticks state: each grid line and the
    label after it."""
    lines = panel.findall(f"s:g[@class='{group}']/s:line", ns)
    labels = panel.findall(f"s:g[@class='{group}']/s:text", ns)
    assert len(lines) == len(labels), f"{group}: {len(lines)} grid lines, {len(labels)} labels"
    ticks = [(value(t.text), float(l.get(attr))) for l, t in zip(lines, labels)]
    assert len(ticks) >= 2, f"{group}: fewer than two ticks"
    (v0, p0), (v1, p1) = ticks[0], ticks[-1]
    return lambda v: p0 + (p1 - p0) * (v - v0) / (v1 - v0)

curves = [records(f) for f in files]
panels = root.findall("s:g[@class='panel']", ns)
assert [p.get("data-x") for p in panels] == ["steps", "tokens"], "not a steps and a tokens panel"
for panel in panels:
    x_of, y_of = axis_map(panel, "x-ticks", "x1"), axis_map(panel, "y-ticks", "y1")
    area = panel.find("s:rect[@class='area']", ns)
    left, top = float(area.get("x")), float(area.get("y"))
    right, bottom = left + float(area.get("width")), top + float(area.get("height"))
    polylines = panel.findall("s:polyline", ns)
    expected = sum(1 for c in curves for series in c.values() if series)
    assert len(polylines) == expected, f"{len(polylines)} polylines, {expected} expected"
    strokes = set()
    for run, c in enumerate(curves):
        for series, points in c.items():
            drawn = [p for p in polylines if p.get("class") == series and p.get("data-run") == str(run)]
            assert len(drawn) == (1 if points else 0), f"file {run}: {len(drawn)} {series} polylines"
            if not points:
                continue
            strokes.add(drawn[0].get("stroke"))
            xy = [tuple(map(float, p.split(","))) for p in drawn[0].get("points").split()]
            assert len(xy) == len(points), f"file {run} {series}: {len(xy)} points, {len(points)} records"
            assert all(left <= px <= right and top <= py <= bottom for px, py in xy), \
                f"file {run} {series}: a point outside the plotting area"
            for (px, py), (step, tokens, loss) in zip(xy, points):
                want_x = x_of(tokens if panel.get("data-x") == "tokens" else step)
                assert abs(px - want_x) < 0.6 and abs(py - y_of(loss)) < 0.6, \
                    f"file {run} {series}, {panel.get('data-x')} panel: step {step} at ({px}, {py}), " \
                    f"expected ({want_x:.1f}, {y_of(loss):.1f})"
    assert len(strokes) == len(files), "the files do not have a colour each"
legend = [t.text for t in root.findall("s:g[@class='legend']/s:text[@class='label']", ns)]
assert len(legend) == len(labels) and all(t.startswith(l + "  (") for t, l in zip(legend, labels)), \
    f"legend {legend}, labels {labels}"
assert root.find("s:text", ns) is not None, "no title"
print(f"{svg}: {len(files)} files, " + ", ".join(
    f"{len(c['train'])} + {len(c['val'])} points" for c in curves) + " in each panel")
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
! grep -qiE '"[^"]*(nan|inf)' "$work/edge.svg" || fail "edge.svg holds a coordinate that is not finite: \
$(grep -iE '"[^"]*(nan|inf)' "$work/edge.svg" | head -3)"
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
    "a loss past a float's range, tokens below 0; losses at a float's extremes drawn with finite coordinates"
