#!/usr/bin/env bash
# `delay_correction nesterov` in the runtime: PACI at p = 4 (one layer a stage) with nadamw,
# K = 1 and K = 3. A full run prints each stage's realised drift (the most optimizer steps
# a micro-batch's forward and backward straddled); it must be the table's (K = 1: 3 2 1 0,
# K = 3: 1 1 1 0). The same program stopped after its first step leaves m = (1 - beta1) g and
# v = (1 - beta2) g^2 in state.bin, so each stage's beta1 is read back from its layer's fc
# weight as 1 - sqrt(m^2 (1 - beta2) / v), and must be beta1 + d (0.99 - beta1) / p with
# that stage's realised d. Under 1f1b the key is refused at its value.
source tests/e2e/lib.sh
python_with "numpy"

# nesterov_model NAME WINDOW SCHEDULE: a 4-stage program of 8 steps with nadamw and the key.
nesterov_model() {
    cat > "$work/$1.paci" <<DSL
model gpt2 { layers 4; width 32; heads 2; context 16; vocab 256 }
pipeline { stages 4; schedule $3; window $2; split [1, 1, 1, 1]; delay_correction nesterov }
batch { micro 2 }
train {
    data "$data/tiny_train.bin"
    steps 8
    optimizer nadamw { lr 3e-3; betas 0.9 0.95; weight_decay 0.1; clip 1.0 }
    checkpoint { every 0; dir "ckpt" }
}
DSL
}

for case in "1 3 2 1 0" "3 1 1 1 0"; do
    read -r K want <<<"$case"
    name=k$K
    nesterov_model "$name" "$K" paci
    mkdir -p "$work/$name/first"
    "$pacic" "$work/$name.paci" -o "$work/$name/run" 2>/dev/null
    out=$(cd "$work/$name" && ./run 2>/dev/null)
    drift=$(sed -n 's/^drift: //p' <<<"$out" | grep -o 'max [0-9]*' | awk '{ printf "%s%s", (NR > 1 ? " " : ""), $2 }')
    [ "$drift" = "$want" ] || fail "K=$K: the run's drift per stage is '$drift', the table's is '$want'"
    cp "$work/$name/run" "$work/$name/first/run"
    (cd "$work/$name/first" && ./run --quiet --steps 1)
    "$python" - "$work/$name/first/ckpt/step_00000001/state.bin" "$drift" <<'PY' || fail "K=$K: the stages' beta1"
import sys
import numpy as np
L, C, T, V, P, BETA1, BETA2 = 4, 32, 16, 256, 4, 0.9, 0.95
header = np.fromfile(sys.argv[1], dtype=np.int64, count=16)
total = int(header[11])
m = np.fromfile(sys.argv[1], dtype=np.float32, count=total, offset=128).astype(np.float64)
v = np.fromfile(sys.argv[1], dtype=np.float32, count=total, offset=128 + 4 * total).astype(np.float64)
# llm.c's layout: wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, ...
fcw = V * C + T * C + 2 * L * C + L * 3 * C * C + L * 3 * C + L * C * C + L * C + 2 * L * C
bad = 0
for s, d in enumerate(int(x) for x in sys.argv[2].split()):
    at = slice(fcw + s * 4 * C * C, fcw + (s + 1) * 4 * C * C)
    ms, vs = m[at], v[at]
    keep = vs > 1e-6 * vs.max()
    seen = float(np.median(1 - np.sqrt(ms[keep] ** 2 * (1 - BETA2) / vs[keep])))
    want = BETA1 + d * (0.99 - BETA1) / P
    print(f"stage {s}: d = {d}, beta1 in state.bin {seen:.6f}, formula {want:.6f}")
    bad += not abs(seen - want) < 1e-4
sys.exit(1 if bad else 0)
PY
done

nesterov_model sync 3 1f1b
err=$("$pacic" "$work/sync.paci" --check 2>&1) && fail "1f1b with delay_correction nesterov compiled"
grep -q "error: delay_correction nesterov needs an asynchronous schedule (paci or pipedream)" <<<"$err" \
    || fail "1f1b: not the expected error: $err"
echo "delay_correction nesterov: each stage's beta1 follows its delay from the table, in the runtime"
