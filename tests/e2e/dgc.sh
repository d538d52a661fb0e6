#!/usr/bin/env bash
# compression dgc (runtime/dgc.c, docs/dsl.md) on the CPU, data 4 as threads, p = 2, 1f1b:
#   - density 1 is the dense run, bit for bit (model.bin, state.bin), under AdamW and LAMB
#     (error feedback: everything is sent, the residual stays zero);
#   - density 0.001: the bytes each replica's exchange wrote per step (counted by the
#     transport, --metrics exchange_bytes_per_step) are its lists' exactly (per stage 8 for
#     the count, 4 a block of 65536, 4 a pair: lib.sh dgc_list_bytes) and fall at least 500x
#     against dense; --explain prices 4 bytes a pair plus the blocks' counts (between 4 and
#     4.2 bytes a pair on this model); the final validation losses are printed (a goal, not
#     asserted);
#   - the warm-up sends more in its first steps than the final density does, and LARS's
#     momentum reaches the exchange (momentum correction): momentum 0.9 and 0 differ;
#   - SIGKILL mid-run, then --resume: the uninterrupted run's bits (model, state, dgc.bin);
#     a resume with another density, or a dense program, is refused in one line;
#   - bad blocks get located errors.
# One process per stage and replica (TCP, mpirun): tests/e2e/dgc_processes.sh.
# The selection, residual, momentum correction and warm-up are checked on fixed arrays with
# hand-worked answers in tests/unit/test_dgc.c.
source tests/e2e/lib.sh

# dgc_model NAME OPTIMIZER STEPS CKPT [COMPRESSION]: the small model, p = 2, window 2, data 4.
dgc_model() {
    small_model "$1" 2 1f1b 2 "$3" 0 "$4"
    sed -i "s/optimizer adamw { lr 3e-3; clip 0.5 }/optimizer $2/" "$work/$1.paci"
    echo "parallel { data 4${5:+; $5} }" >> "$work/$1.paci"
}
exchange() { sed -n 's/.*"exchange_bytes_per_step": \[\([0-9]*\).*/\1/p' "$work/$1/metrics.jsonl"; }
val_loss() { sed -n 's/.*"val_loss": \([0-9.]*\)}/\1/p' "$work/$1/metrics.jsonl" | tail -1; }
final() { echo "$work/$1/ckpt/step_$(printf %08d "$2")"; }

# --- density 1 == dense, to the bit ---------------------------------------------------------
for opt in "adamw { lr 3e-3; clip 0.5 }" "lamb { lr 3e-3; clip 0.5 }"; do
    name=${opt%% *}
    dgc_model "$name-dense" "$opt" 12 12
    dgc_model "$name-d1" "$opt" 12 12 "compression dgc { density 1 }"
    train "$name-dense" --blas-threads 1 || fail "$name-dense did not train"
    train "$name-d1" --blas-threads 1 || fail "$name-d1 did not train"
    for f in model.bin state.bin; do
        cmp -s "$(final "$name-dense" 12)/$f" "$(final "$name-d1" 12)/$f" || fail "$name: density 1 differs from dense in $f"
    done
    echo "$name: compression dgc at density 1 == dense, model.bin and state.bin to the bit"
done

# --- density 0.001: bytes counted by the transport, and the loss -----------------------------
dgc_model sparse "adamw { lr 3e-3; clip 0.5 }" 40 40 "compression dgc { density 0.001 }"
dgc_model dense "adamw { lr 3e-3; clip 0.5 }" 40 40
train dense --blas-threads 1 || fail "dense did not train"
train sparse --blas-threads 1 || fail "sparse did not train"
dense_bytes=$(exchange dense) sparse_bytes=$(exchange sparse)
[ -n "$dense_bytes" ] && [ -n "$sparse_bytes" ] || fail "no exchange_bytes_per_step in the metrics"
[ $((dense_bytes)) -ge $((500 * sparse_bytes)) ] \
    || fail "density 0.001 sends $sparse_bytes bytes a step against dense $dense_bytes: not 500x less"
want=$(dgc_list_bytes "$(final sparse 40)/dgc.bin" 0.001 | awk '{s += 8 + $1} END {print s}')
[ "$sparse_bytes" = "$want" ] \
    || fail "density 0.001: the threads counted $sparse_bytes bytes a step, the lists (8, 4 a block, 4 a pair) are $want"
echo "exchange per replica per step, stages summed (40 steps): dense $dense_bytes bytes," \
     "dgc 0.001 $sparse_bytes bytes ($((dense_bytes / sparse_bytes))x less; the lists' $want)"
explain=$("$pacic" "$work/sparse.paci" --explain 2>&1) || fail "--explain failed: $explain"
grep -q "4 bytes a pair (a 16-bit offset in a block of 65536 and the value in bf16" <<< "$explain" \
    || fail "--explain does not price 4-byte pairs: $(grep -A3 'compression dgc' <<< "$explain")"
per_pair=$(awk '/bytes a pair/ {on = 1; next} on && NF == 6 {print $6; next} {on = 0}' <<< "$explain")
[ "$(wc -l <<< "$per_pair")" = 2 ] || fail "--explain: no bytes a pair for both stages: $per_pair"
for b in $per_pair; do
    python3 -c "import sys; sys.exit(not 4 < $b < 4.2)" || fail "--explain prices $b bytes a pair, not 4 plus the blocks' counts"
done
echo "--explain: $(echo $per_pair) bytes a pair (stages 0 and 1)"
echo "final val loss: dense $(val_loss dense), dgc 0.001 $(val_loss sparse)" \
     "(goal: within 1%; $(python3 -c "print('%+.2f%%' % (100 * ($(val_loss sparse) / $(val_loss dense) - 1)))"))"

# --- the warm-up, and LARS's momentum correction reach the exchange -----------------------------
dgc_model nowarm "adamw { lr 3e-3; clip 0.5 }" 4 4 "compression dgc { density 0.001 }"
dgc_model warm "adamw { lr 3e-3; clip 0.5 }" 4 4 "compression dgc { density 0.001; warmup_steps 4 }"
train nowarm --blas-threads 1 && train warm --blas-threads 1 || fail "warm-up runs failed"
[ $(($(exchange warm))) -ge $((20 * $(exchange nowarm))) ] \
    || fail "warm-up 4 sent $(exchange warm) bytes a step over its 4 steps, without it $(exchange nowarm): ignored?"
echo "warm-up: 4 steps send $(exchange warm) bytes a step, none $(exchange nowarm)"
dgc_model lars9 "lars { lr 0.5; momentum 0.9 }" 6 6 "compression dgc { density 0.01 }"
dgc_model lars0 "lars { lr 0.5; momentum 0 }" 6 6 "compression dgc { density 0.01 }"
train lars9 --blas-threads 1 && train lars0 --blas-threads 1 || fail "lars runs failed"
cmp -s "$(final lars9 6)/model.bin" "$(final lars0 6)/model.bin" \
    && fail "lars momentum 0.9 and 0 give the same weights under dgc: momentum correction is skipped"
echo "lars under dgc: momentum 0.9 and 0 differ (the velocity is corrected locally)"

# --- kill -9 mid-run, then --resume: the uninterrupted bits --------------------------------------
# has_checkpoint DIR: DIR holds a complete step folder; a kill after its rename and before
# `latest` leaves one without `latest`, and only --resume continues from it.
has_checkpoint() {
    compgen -G "$1/step_[0-9]*[0-9]" > /dev/null
}
for opt in "adamw { lr 3e-3; clip 0.5 }" "lars { lr 0.5; momentum 0.9 }"; do
    name=kill-${opt%% *}
    dgc_model "$name" "$opt" 30 2 "compression dgc { density 0.01; warmup_steps 5; clip 1 }"
    train "$name" --blas-threads 1 || fail "$name did not train"
    dir=$work/$name-killed
    mkdir -p "$dir"
    cp "$work/$name/run" "$dir/"
    kills=0
    for i in 1 2 3 4 5 6; do
        resume=""
        has_checkpoint "$dir/ckpt" && resume=--resume
        (cd "$dir" && exec ./run --quiet --blas-threads 1 $resume > out.txt 2> err.txt) &
        pid=$!
        sleep "0.$((RANDOM % 30 + 5))"
        kill -KILL $pid 2>/dev/null || true
        if { wait $pid; } 2>/dev/null; then rm -rf "$dir/ckpt"; continue; fi # finished first
        grep -q error "$dir/err.txt" && fail "$name kill $i: $(cat "$dir/err.txt")"
        kills=$((kills + 1))
    done
    resume=""
    has_checkpoint "$dir/ckpt" && resume=--resume
    (cd "$dir" && ./run --quiet --blas-threads 1 $resume) || fail "$name: the run after the kills failed"
    for f in model.bin state.bin dgc.bin; do
        cmp -s "$(final "$name" 30)/$f" "$dir/ckpt/step_00000030/$f" || fail "$name: $f after $kills kills differs"
    done
    echo "$name: $kills SIGKILLs, resumed each time: model.bin, state.bin, dgc.bin bit-identical"
done

# --- resumes that cannot be exact are refused ---------------------------------------------------
cp -r "$work/kill-adamw/ckpt" "$work/other-ckpt"
dgc_model other "adamw { lr 3e-3; clip 0.5 }" 40 2 "compression dgc { density 0.02; warmup_steps 5; clip 1 }"
dgc_model plain "adamw { lr 3e-3; clip 0.5 }" 40 2
for name in other plain; do
    mkdir -p "$work/$name"
    "$pacic" "$work/$name.paci" -o "$work/$name/run" 2>/dev/null
    rm -rf "$work/$name/ckpt"
    cp -r "$work/kill-adamw/ckpt" "$work/$name/ckpt"
    out=$(cd "$work/$name" && ./run --quiet --resume --steps 32 2>&1) && fail "$name: the resume was not refused"
    [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && grep -q "dgc.bin: written with" <<< "$out" \
        || fail "$name: unexpected refusal: $out"
    echo "refused ($name): $out"
done

# --- bad blocks: located errors ---------------------------------------------------------------------
for bad in "data 4; compression dgc { density 0 }|'density' 0 is out of range: it must be in (0, 1]" \
           "data 4; compression dgc { density 1.5 }|'density' 1.5 is out of range: it must be in (0, 1]" \
           "data 4; compression dgc { density nan }|'density' must be a number, not a word" \
           "compression dgc { density 0.01 }|data 1 has none to exchange" \
           "data 4; compression dgc { densty 0.01 }|unknown key 'densty' in 'compression'; did you mean 'density'?"; do
    block=${bad%%|*} want=${bad#*|}
    small_model bad 2 1f1b 2 4
    echo "parallel { $block }" >> "$work/bad.paci"
    out=$("$pacic" "$work/bad.paci" --check 2>&1) && fail "'$block' was accepted"
    first=$(head -1 <<< "$out")
    grep -qE "^$work/bad.paci:12:[0-9]+: error: " <<< "$first" || fail "'$block': not located: $first"
    grep -qF -- "$want" <<< "$first" || fail "'$block': $first"
    echo "refused: ${first#"$work/"}"
done
