# bench/replay_lib.sh: what bench/balance.sh, bench/half_layers.sh and bench/vocab_split.sh
# share: a small GPT whose LM head outweighs its layers (width 128, context 64, vocabulary 4096:
# the head is about 2.6 layers of FLOPs; vocab_split.sh doubles the vocabulary) over 4 stages
# under PACI, window 8 of 8 sequences, trained with --profile-out and replayed with the costs
# it measured. Sourced, not run; STEPS (default 20).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
steps=${STEPS:-20}
pacic=$root/build/bin/pacic
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make -s all >/dev/null

# write NAME LAYERS SPLIT_LINE: the model with LAYERS layers and `split` as given ("" = automatic).
write() {
    cat > "$work/$1.paci" <<DSL
model gpt2 { layers $2; width 128; heads 4; context 64; vocab 4096 }
pipeline { stages 4; schedule paci; window 8 $3 }
batch { micro 8 }
train {
    data "$root/examples/data/tiny_train.bin"
    steps $steps
    optimizer adamw { lr 1e-3 }
}
DSL
}

# measure NAME: trains STEPS steps at one BLAS thread a stage with --profile-out, then replays
# the schedule with the costs that run measured (thread CPU seconds per instruction, per
# stage) as if every stage had a core of its own (`pacic --profile --explain`), the way the
# study does. Prints NAME|stages' layers|replayed tokens/s and bubble|busy per stage|wall-clock
# tokens/s of the run (its stages share this machine's cores: not the pipeline's speed).
measure() {
    local dir=$work/$1 explain split replay busy wall
    mkdir -p "$dir"
    "$pacic" "$work/$1.paci" -o "$dir/run"
    (cd "$dir" && ./run --blas-threads 1 --profile-out profile.txt --ckpt-dir ckpt > run.log 2>&1)
    explain=$("$pacic" "$work/$1.paci" --profile "$dir/profile.txt" --explain)
    split=$(sed -n '/^stage  layers/,/^memory/s/^ *[0-9]  \([^ ]*\) .*/\1/p' <<< "$explain" | paste -sd ' ')
    replay=$(sed -n 's/^  step time .*, \([0-9.e+]*\) tokens\/s, bubble \([0-9.]*%\).*/\1 \2/p' <<< "$explain")
    busy=$(sed -n '/^stage  layers/,/^memory/s/.* \([0-9.]*%\)$/\1/p' <<< "$explain" | paste -sd ' ')
    wall=$(sed -n 's/^done: .*, \([0-9]*\) tokens\/s;.*/\1/p' "$dir/run.log")
    echo "$1|$split|$replay|$busy|$wall"
}

# tokens_per_s PACI [pacic flags]: the predicted tokens/s --explain prints.
tokens_per_s() {
    "$pacic" "$@" --explain | sed -n 's/^  step time .*, \([0-9.e+]*\) tokens\/s, bubble.*/\1/p'
}

# print_rows LABEL ROW...: the rows measure printed, under a header whose first column is LABEL.
print_rows() {
    local label=$1 row name split replay busy tps bubble
    shift
    printf '%-10s %-30s %16s %8s   %s\n' "$label" "stages (layers)" "replayed tok/s" bubble "busy per stage"
    for row in "$@"; do
        IFS='|' read -r name split replay busy _ <<< "$row"
        read -r tps bubble <<< "$replay"
        printf '%-10s %-30s %16.0f %8s   %s\n' "$name" "$split" "$tps" "$bubble" "$busy"
    done
}
