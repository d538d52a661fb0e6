#!/usr/bin/env bash
# Nothing a user trained is lost by a natural mistake in the checkpoint folder:
# - another program run in a folder that holds a run's checkpoints is refused, and so is a
#   rerun of the same program without --resume (a forgotten --resume): one line naming the
#   folder, the program it holds and the ways on; not a byte of the folder changes (its lock
#   file aside, which names the last run that held it), and the
#   run still resumes to the bits of an uninterrupted one;
# - a save prunes only its own run's older checkpoints (a resume is the same run); another
#   run's stay; --overwrite replaces them, but only once its own first checkpoint is saved;
# - the route a refused resume recommends (--init model.bin in a new folder) keeps the whole
#   model, the untied head in state.bin included;
# - a resume whose program reads another number of sequences a step (micro x window x data)
#   is refused, since it would skip or repeat data; the same number under another split of
#   it resumes.
source tests/e2e/lib.sh

# model NAME LAYERS STAGES WINDOW MICRO [OPTIMIZER]: 18 steps, a checkpoint every 6.
model() {
    cat > "$work/$1.paci" <<DSL
model gpt2 { layers $2; width 32; heads 2; context 16; vocab 256 }
pipeline { stages $3; schedule paci; window $4 }
batch { micro $5 }
train {
    data "$data/tiny_train.bin"
    val "$data/tiny_val.bin"
    steps 18
    optimizer ${6:-adamw} { lr 3e-3 }
    eval { every 6; batches 2 }
    checkpoint { every 6; dir "ckpt" }
}
DSL
    mkdir -p "$work/bin"
    "$pacic" "$work/$1.paci" -o "$work/bin/$1" > /dev/null || fail "$1: pacic failed"
}
# run_in DIR PROGRAM [flags]: runs PROGRAM in $work/DIR (stderr into $work/DIR/err.txt).
run_in() {
    local dir=$work/$1 program=$2
    shift 2
    mkdir -p "$dir"
    (cd "$dir" && "$work/bin/$program" --quiet --blas-threads 1 "$@" 2> err.txt)
}
snapshot() { (cd "$work/$1" && find ckpt -type f ! -name lock -print0 | sort -z | xargs -0 sha1sum); }

model four 4 3 3 2
model two 2 3 3 2
run_in straight four                               # the uninterrupted reference, 18 steps

# 1. Another program, then the same one without --resume: refused, nothing changed.
run_in a four --steps 12
before=$(snapshot a)
run_in a two && fail "another program ran in a folder of another run's checkpoints"
grep -qx "run: error: ckpt: holds the checkpoints of a run of .*four.paci (steps 6 to 12, latest step_00000012), another model (layers 4, the program has 2), which a new run here would replace: train in another folder (--ckpt-dir DIR, or \`checkpoint { dir ... }\` in the program), or pass --overwrite to replace them (this run deletes them once it has saved its first checkpoint)" "$work/a/err.txt" ||
    fail "another program: unexpected message: $(cat "$work/a/err.txt")"
run_in a four --steps 3 && fail "a rerun without --resume ran over its own checkpoints"
grep -qx "run: error: ckpt: holds the checkpoints of a run of .*four.paci (steps 6 to 12, latest step_00000012), which a new run here would replace: continue it with --resume; or train in another folder (--ckpt-dir DIR, or \`checkpoint { dir ... }\` in the program); or pass --overwrite to replace them (this run deletes them once it has saved its first checkpoint)" "$work/a/err.txt" ||
    fail "forgotten --resume: unexpected message: $(cat "$work/a/err.txt")"
[ "$(snapshot a)" = "$before" ] || fail "a refused run changed the checkpoint folder"
echo "another program and a forgotten --resume: refused, the folder unchanged"

# 2. A foreign checkpoint beside the run (copied in by hand) survives the run's pruning; the
#    resumed run prunes its own older ones and ends with the uninterrupted run's bits.
run_in other two --steps 6
cp -r "$work/other/ckpt/step_00000006" "$work/a/ckpt/step_00000001"
run_in a four --resume || fail "resume: $(cat "$work/a/err.txt")"
for f in model.bin state.bin; do
    cmp -s "$work/straight/ckpt/step_00000018/$f" "$work/a/ckpt/step_00000018/$f" ||
        fail "the resumed run's $f differs from the uninterrupted run's"
done
[ "$(ls "$work/a/ckpt" | tr '\n' ' ')" = "latest lock step_00000001 step_00000012 step_00000018 " ] ||
    fail "after the resume the folder holds $(ls "$work/a/ckpt" | tr '\n' ' ')"
echo "resumed to the uninterrupted run's bits; pruned its own step 6, kept a foreign step 1"

# 3. --overwrite: the old checkpoints stay until the new run's first save, then go. A kill
#    aimed at that save (its step_6.tmp appears) finds the old latest whole.
cp -r "$work/a" "$work/b"
(cd "$work/b" && exec "$work/bin/two" --quiet --overwrite 2> err.txt) &
pid=$!
until [ -d "$work/b/ckpt/step_00000006.tmp" ] || ! kill -0 $pid 2> /dev/null; do :; done
# Under load the loop can miss the .tmp folder's moment and see the run end by itself: then
# there is nothing to kill (a bare kill's failure would end this script under set -e, silently).
kill -KILL $pid 2> /dev/null || true
if ! { wait $pid; } 2> /dev/null; then
    name=$(cat "$work/b/ckpt/latest")
    case $name in
    step_00000018)
        for f in model.bin state.bin; do
            cmp -s "$work/a/ckpt/step_00000018/$f" "$work/b/ckpt/step_00000018/$f" ||
                fail "--overwrite killed in its first save: the old latest's $f changed"
        done ;;
    step_00000006) ;; # the kill came after the save
    *) fail "--overwrite killed in its first save: latest names $name" ;;
    esac
fi
run_in b two --overwrite || fail "--overwrite: $(cat "$work/b/err.txt")"
[ "$(ls "$work/b/ckpt" | tr '\n' ' ')" = "latest lock step_00000012 step_00000018 " ] ||
    fail "--overwrite left $(ls "$work/b/ckpt" | tr '\n' ' ')"
grep -q "program .*two.paci" "$work/b/ckpt/step_00000012/run.txt" || fail "--overwrite: step 12 is not the new run's"
echo "--overwrite: the old run's latest held until the new run's first save; then only the new run's"

# 4. A refused resume's advice, followed to the letter, keeps the whole model: its export
#    equals the checkpoint's (the untied head of a 3-stage model included).
model muon 4 3 3 2 muon
run_in a muon --resume && fail "a resume under another optimizer was accepted"
advice=$(sed -n 's/.*in another folder: \(--init [^ ]* --ckpt-dir [^ ]*\)$/\1/p' "$work/a/err.txt")
[ -n "$advice" ] || fail "the optimizer refusal gives no --init route: $(cat "$work/a/err.txt")"
run_in a four --export hf hf-checkpoint > /dev/null
# shellcheck disable=SC2086
run_in a muon $advice --export hf hf-advised > /dev/null || fail "the advised route: $(cat "$work/a/err.txt")"
cmp -s "$work/a/hf-checkpoint/model.safetensors" "$work/a/hf-advised/model.safetensors" ||
    fail "the advised --init route does not start from the checkpoint's model"
# shellcheck disable=SC2086
run_in a muon $advice --steps 6 || fail "the advised route does not train: $(cat "$work/a/err.txt")"
echo "the refused resume's route ($advice) starts from the whole trained model"
# model.bin copied without its state.bin: the head starts as wte, and the run says so
mkdir -p "$work/lone"
cp "$work/a/ckpt/$(cat "$work/a/ckpt/latest")/model.bin" "$work/lone/"
run_in lone muon --init model.bin --steps 1 --no-checkpoint || fail "--init of a lone model.bin: $(cat "$work/lone/err.txt")"
grep -q "^run: note: --init model.bin: no state.bin beside it, so the untied LM head starts as a copy of wte" \
    "$work/lone/err.txt" || fail "--init of a lone model.bin lost the head in silence: $(cat "$work/lone/err.txt")"
! grep -q "note: --init" "$work/a/err.txt" || fail "the advised route, with state.bin, said the head was lost"
echo "--init of a model.bin without its state.bin says the head starts as wte"

# 5. Another number of sequences a step is refused (window, micro); the same number in
#    another split of micro x window resumes.
for variant in "window 3 6 2" "micro 3 3 4"; do
    set -- $variant
    model "$1" 4 "$2" "$3" "$4"
    run_in a "$1" --resume && fail "a resume at another $1 was accepted"
    grep -q "written with micro 2 x window 3 x data 1 = 6 sequences a step, the program has micro $4 x window $3 x data 1 = 12: the data position" "$work/a/err.txt" ||
        fail "another $1: unexpected message: $(cat "$work/a/err.txt")"
done
model split 4 3 6 1
run_in c four --steps 12
run_in c split --resume || fail "micro 1 x window 6 (6 sequences a step, as 2 x 3): $(cat "$work/c/err.txt")"
echo "another window or micro (12 sequences a step for 6): refused; micro 1 x window 6 for 2 x 3: resumed"

# 6. A run that has finished says so on --resume.
out=$(cd "$work/straight" && "$work/bin/four" --resume --blas-threads 1) || fail "resume of a finished run failed"
grep -qx "run: nothing left to train: the checkpoint is at step 18, the run's last (18 steps)" <<< "$out" ||
    fail "resume of a finished run: $out"
echo "resume of a finished run: nothing left to train"

# 7. A resume where another run's later checkpoint sits (here the uninterrupted run's step 12,
#    copied in) is refused, naming both steps; not a byte of the folder changes.
run_in d four --steps 6
cp -r "$work/straight/ckpt/step_00000012" "$work/d/ckpt/"
before=$(snapshot d)
run_in d four --resume && fail "a resume ran over another run's later checkpoint"
grep -qx "run: error: ckpt: holds 1 checkpoint of steps 12 to 12, later than step 6 that --resume continues from (ckpt/step_00000006): resuming would replace them; move them out of the folder, or pass --overwrite to replace them (this run deletes them once it has saved its first checkpoint)" "$work/d/err.txt" ||
    fail "another run's later checkpoint: unexpected message: $(cat "$work/d/err.txt")"
[ "$(snapshot d)" = "$before" ] || fail "a refused resume changed the checkpoint folder"
echo "a resume below another run's later checkpoint: refused, the folder unchanged"
