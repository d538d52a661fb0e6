#!/usr/bin/env bash
# The gradient noise scale (docs/run.md, "The gradient noise scale") across a resume, processes
# and devices:
#   - a run stopped at a checkpoint and resumed logs the straight run's noise_scale on every
#     step after the resume, to the bit (run.txt carries each stage's averages), at p = 1 and
#     p = 2; a checkpoint without them (an older pacic's run.txt) resumes, restarts the
#     averages and says so in one line, so the values after it differ.
source tests/e2e/lib.sh

# noise_of FILE: "step value" of every step line of a metrics file, the value as written.
noise_of() {
    python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    rec = json.loads(line)
    if "loss" in rec:
        print(rec["step"], json.dumps(rec.get("noise_scale", "absent")))
PY
}

# --- a resume continues the averages ----------------------------------------------------------
for stages in 1 2; do
    name=resume-p$stages
    small_model "$name" "$stages" 1f1b 4 20 0 10
    train "$name" --blas-threads 1 || fail "$name did not train"
    mkdir -p "$work/$name-cut"
    cp "$work/$name/run" "$work/$name-cut/run"
    run_quiet "$name-cut" --steps 10 || fail "$name: the first 10 steps"
    cp -r "$work/$name-cut" "$work/$name-old"
    (cd "$work/$name-cut" && ./run --quiet --blas-threads 1 --resume --metrics resumed.jsonl 2>err.txt) ||
        fail "$name: the resume"
    [ ! -s "$work/$name-cut/err.txt" ] || fail "$name: the resume said: $(cat "$work/$name-cut/err.txt")"
    straight=$(noise_of "$work/$name/metrics.jsonl" | tail -n 10)
    resumed=$(noise_of "$work/$name-cut/resumed.jsonl")
    [ "$(echo "$straight" | grep -c '[0-9]$')" = 10 ] || fail "$name: steps 11..20 logged no noise scale: $straight"
    [ "$straight" = "$resumed" ] ||
        fail "$name: the noise scale after the resume differs from the straight run's:
$(diff <(echo "$straight") <(echo "$resumed") | head -6)"
    # an older pacic's checkpoint: run.txt without the averages
    sed -i '/^noise_scale /d' "$work/$name-old/ckpt/step_00000010/run.txt"
    (cd "$work/$name-old" && ./run --quiet --blas-threads 1 --resume --metrics resumed.jsonl 2>err.txt) ||
        fail "$name: the resume of a checkpoint without the averages"
    note="run: note: ckpt/step_00000010/run.txt records no noise-scale averages, so the noise scale's averages start afresh"
    [ "$(cat "$work/$name-old/err.txt")" = "$note" ] ||
        fail "$name: without the averages the resume said '$(cat "$work/$name-old/err.txt")', not the note"
    [ "$(noise_of "$work/$name-old/resumed.jsonl")" != "$straight" ] ||
        fail "$name: restarted averages log the straight run's values: the comparison is blind"
    echo "p = $stages: 10 + resume + 10 logs the straight run's noise_scale on steps 11..20 to the bit" \
        "($(echo "$straight" | tail -n 1)); without the averages in run.txt: one note, other values"
done
