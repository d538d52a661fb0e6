#!/usr/bin/env bash
# Hugging Face GPT-2 export and import against an independent reader and writer
# (tests/numeric/hf_ref.py: json + numpy, the float64 GPT-2 of torch_ref.py):
#   run -> --export hf -> reference: the reference's loss of the exported weights equals the
#     validation loss run reports for them (untied head on 2 stages, tied on 1);
#   reference writes a file -> run --init -> the loss of step 1 (before any update) equals the
#     reference's (F32, BF16, F16; a folder or a bare file; with or without "transformer.");
#   export -> run --init: the same loss again;
# and hostile files and folders: one line naming the file and the tensor, exit 1.
source tests/e2e/lib.sh

python_with "torch, numpy"
ref() { "$python" "$root/tests/numeric/hf_ref.py" "$@"; }

# model NAME STAGES TIED: 2 layers, 2 heads, window 2 (step 1 = micro-batches 0 and 1),
# validation on micro-batches 0 and 1 after the last step.
model() {
    mkdir -p "$work/$1"
    cat > "$work/$1.paci" <<DSL
model gpt2 { layers 2; width 32; heads 2; context 16; vocab 256; tied $3 }
pipeline { stages $2; schedule 1f1b; window 2 }
batch { micro 2 }
train {
    data "$data/tiny_train.bin"
    val "$data/tiny_val.bin"
    steps 4
    optimizer adamw { lr 3e-3; clip 1 }
    eval { every 0; batches 2 }
    checkpoint { every 0; dir "ckpt" }
}
DSL
    "$pacic" "$work/$1.paci" -o "$work/$1/run"
}
shape=(--layers 2 --width 32 --heads 2 --context 16 --vocab 256)

# in NAME [run flags...]: runs NAME's program in its folder, metrics to metrics.jsonl.
runin() {
    local name=$1
    shift
    (cd "$work/$name" && ./run --quiet --metrics metrics.jsonl "$@")
}
first_loss() { sed -n 's/^{"step": 1, "loss": \([^,]*\),.*/\1/p' "$work/$1/metrics.jsonl"; }
val_loss() { sed -n 's/.*"val_loss": \([^}]*\)}.*/\1/p' "$work/$1/metrics.jsonl" | tail -1; }

# one_line WHAT PATTERN COMMAND...: COMMAND fails (not by a signal) with one matching line.
one_line() {
    local what=$1 pattern=$2 out status=0
    shift 2
    out=$("$@" 2>&1) || status=$?
    out=$(grep -v '^run: note:' <<< "$out" || true)
    [ $status = 1 ] || fail "$what: exit status $status: $out"
    [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "$what: expected one line, got: $out"
    grep -qE "$pattern" <<< "$out" || fail "$what: '$out' does not match '$pattern'"
    echo "$what: $out"
}

model untied 2 false
model tied 1 true
for name in strong again; do
    mkdir -p "$work/$name"
    cp "$work/untied/run" "$work/$name/"
done
last=$(ref prepare "$work/in" "${shape[@]}")
checks=$work/checks

# Export after 4 steps from the seeded initialisation: the reference's loss of the export on
# the validation micro-batches is the validation loss run reports.
for name in untied tied; do
    runin $name
    runin $name --export hf hf >/dev/null
    [ -z "$(ls -d "$work/$name"/hf.tmp-* 2>/dev/null)" ] || fail "$name: a temporary export folder is left"
    echo "$work/$name/hf $data/tiny_val.bin 2 2 2 $(val_loss $name)" >> "$checks"
done
grep -q '"tie_word_embeddings": false' "$work/untied/hf/config.json" || fail "untied: config.json says tied"
grep -q '"tie_word_embeddings": true' "$work/tied/hf/config.json" || fail "tied: config.json says untied"
if grep -qa lm_head <<< "$(head -c 65536 "$work/tied/hf/model.safetensors" | tr -d '\0')"; then fail "tied: lm_head.weight exported"; fi

# Import of weights far from any initialisation (every bias too): step 1's loss, before any
# update, is the reference's on micro-batches 0 and 1 (window 2). Then the export after
# training from them, and that export read back by run.
runin strong --init "$work/in/strong.safetensors" --steps 3
echo "$work/in/strong.safetensors $data/tiny_train.bin 2 2 2 $(first_loss strong)" >> "$checks"
runin strong --export hf hf >/dev/null
echo "$work/strong/hf $data/tiny_val.bin 2 2 2 $(val_loss strong)" >> "$checks"
runin again --init "$work/strong/hf" --steps 1 --no-checkpoint
echo "$work/strong/hf $data/tiny_train.bin 2 2 2 $(first_loss again)" >> "$checks"

# Half-precision folders under GPT2Model's names (no "transformer."): BF16 into the tied
# program; F16 with a tied head into the untied program, whose head then starts as wte.
runin tied --init "$work/in/bf16" --steps 1 --no-checkpoint
echo "$work/in/bf16 $data/tiny_train.bin 2 2 2 $(first_loss tied)" >> "$checks"
runin again --init "$work/in/f16" --steps 1 --no-checkpoint
echo "$work/in/f16 $data/tiny_train.bin 2 2 2 $(first_loss again)" >> "$checks"
ref check < "$checks" || fail "run and the reference disagree on the loss of the same weights"

# Hostile files and folders, each against the untied program.
bad=$work/in/bad
init() { bash -c "cd '$work/again' && ./run --quiet --steps 1 --no-checkpoint --init '$1'"; }
one_line "truncated" "truncated\.safetensors: tensor '$last': data_offsets .* lie outside" init "$bad/truncated.safetensors"
one_line "header length past the end" "header_past_end\.safetensors: header length [0-9]+ runs past the end" \
    init "$bad/header_past_end.safetensors"
one_line "5 bytes" "short\.safetensors: 5 bytes: too short" init "$bad/short.safetensors"
one_line "bad JSON" "bad_json\.safetensors: the header is not valid JSON: ':' expected near ';' at line 1, column [0-9]+$" \
    init "$bad/bad_json.safetensors"
one_line "a tensor twice" "repeated\.safetensors: the header holds the key 'transformer\.wpe\.weight' twice" \
    init "$bad/repeated.safetensors"
one_line "a quoted name twice" "repeated_quoted\.safetensors: the header holds the key 'a \"quoted\\\\\" name' twice" \
    init "$bad/repeated_quoted.safetensors"
one_line "wrong shape" "wrong_shape\.safetensors: tensor 'transformer\.wpe\.weight': shape \[32, 16\], the program needs \[16, 32\]" \
    init "$bad/wrong_shape.safetensors"
one_line "missing tensor" "missing\.safetensors: tensor 'transformer\.h\.1\.ln_2\.bias' is missing" \
    init "$bad/missing.safetensors"
one_line "wrong dtype" "wrong_dtype\.safetensors: tensor 'transformer\.h\.0\.attn\.c_proj\.bias': dtype I32" \
    init "$bad/wrong_dtype.safetensors"
one_line "span beside the shape" "wrong_span\.safetensors: tensor 'transformer\.h\.0\.mlp\.c_fc\.bias': data_offsets span 516 bytes, .* need 512" \
    init "$bad/wrong_span.safetensors"
one_line "extra layer" "extra\.safetensors: tensor 'transformer\.h\.9\.ln_1\.weight' is not a weight" \
    init "$bad/extra.safetensors"
one_line "config.json of other heads" "heads/config\.json: n_head is 4, the program has 2" init "$bad/heads"
one_line "untied config without lm_head" "headless/model\.safetensors: tensor 'lm_head\.weight' is missing" init "$bad/headless"
# config.json up to 1 MiB is read whole (here 300 KiB of it blanks after the object); past that it is refused
for size in 300000 1048577; do
    cp -r "$work/untied/hf" "$bad/config$size"
    pad=$(( size - $(stat -c %s "$bad/config$size/config.json") ))
    head -c "$pad" /dev/zero | tr '\0' ' ' >> "$bad/config$size/config.json"
    [ "$(stat -c %s "$bad/config$size/config.json")" = "$size" ] || fail "padding config.json to $size bytes"
done
init "$bad/config300000" >/dev/null 2>&1 || fail "a config.json of 300000 bytes (blanks after the object) was refused"
one_line "config.json over 1 MiB" "config1048577/config\.json: larger than 1 MiB" init "$bad/config1048577"

# Export never mixes with what is there: a non-empty folder or a file is refused, untouched.
before=$(cat "$work/untied/hf/"* | md5sum)
one_line "export into a non-empty folder" "hf: exists and is not empty" runin untied --export hf hf
touch "$work/untied/file"
one_line "export onto a file" "file: exists and is not a folder" runin untied --export hf file
[ -z "$(ls -d "$work/untied"/*.tmp-* 2>/dev/null)" ] || fail "a refused export left a temporary folder"
[ "$(cat "$work/untied/hf/"* | md5sum)" = "$before" ] || fail "a refused export changed the folder"
one_line "export under a missing folder" "nowhere/hf: cannot create the export folder" \
    runin untied --export hf nowhere/hf
mkdir "$work/untied/empty"
runin untied --export hf empty/ >/dev/null
[ -s "$work/untied/empty/model.safetensors" ] || fail "export into an empty folder wrote nothing"
echo "hf_roundtrip: ok"
