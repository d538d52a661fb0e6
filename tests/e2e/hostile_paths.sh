#!/usr/bin/env bash
# User strings that reach generated code: the .paci file's path (in every file's banner
# comment and in program.c), the data files' absolute paths and the checkpoint folder (string
# literals). Each holds "*/", "/*", a quote, a backslash, a newline and the trigraph "??="
# (the generated C is compiled with -std=c11, where trigraphs are live). pacic must build
# `run` (through NVRTC too where it loads), `run` must train from and checkpoint into those
# exact paths, the literals must read back as the strings they stand for, and the profile that
# names the path (run --profile-out) must read back through pacic --profile.
source tests/e2e/lib.sh
export PACIC_CACHE=off # NVRTC compiles the unit every time instead of finding it cached

odd=$' "q" \\b\nc ??= d'
dir="$work/x*/$odd/*e"
ckpt=$'ck */ "q" \\ \n ??= end'
mkdir -p "$dir"
cp "$data/tiny_train.bin" "$data/tiny_val.bin" "$dir/"
cat > "$dir/m.paci" <<'DSL'
model gpt2 { layers 2; width 16; heads 2; context 8; vocab 256 }
pipeline { stages 2; schedule 1f1b; window 2 }
batch { micro 2 }
train {
    data "tiny_train.bin"
    val "tiny_val.bin"
    steps 2
    eval { batches 1 }
    checkpoint { dir "ck */ \"q\" \\ \n ??= end" }
}
DSL

out=$("$pacic" "$dir/m.paci" -o "$dir/run" --keep "$work/gen" 2>&1) ||
    fail "pacic cannot build a file under a folder named '$dir': $(head -3 <<<"$out")"
(cd "$dir" && ./run --quiet --profile-out profile.txt) || fail "run under '$dir' failed"
[ -f "$dir/$ckpt/step_00000002/model.bin" ] || fail "no checkpoint in the folder named '$ckpt'"
echo "built, trained and checkpointed under the odd folder names"

# The profile's first comment names the source path; a newline there must not break the
# file that pacic --profile reads back.
out=$("$pacic" "$dir/m.paci" --profile "$dir/profile.txt" --explain 2>&1 >/dev/null) ||
    fail "pacic --profile cannot read the profile run wrote under the odd folder: $(head -3 <<<"$out")"
echo "pacic --profile reads back the profile written there"

if [ -f "$work/gen/cuda_images.c" ]; then
    echo "NVRTC compiled stages.cu, whose banner names the path"
else
    echo "note: no NVRTC or CUDA runtime here, the C path only"
fi

# Each banner is one comment: its first "*/" ends the banner's last line.
for f in "$work"/gen/*.c "$work"/gen/*.cu; do
    [ -f "$f" ] || continue
    first=$(grep -n -m1 '\*/' "$f" | cut -d: -f1) # -m1: no SIGPIPE from an early head
    [ "$(sed -n "${first}p" "$f")" = " */" ] || fail "$(basename "$f"): the banner's comment ends early: $(sed -n "${first}p" "$f")"
done

# The literals of program.c, compiled as the build compiles them, print the strings back.
{
    echo '#include <stdio.h>'
    echo 'int main(void)'
    echo '{'
    for field in source train_data ckpt_dir; do
        literal=$(sed -n "s/^ *\.$field = \(\".*\"\),\$/\1/p" "$work/gen/program.c")
        [ -n "$literal" ] || fail "program.c has no one-line .$field literal"
        echo "    fputs($literal, stdout);"
        echo '    putchar(0);'
    done
    echo '}'
} > "$work/literals.c"
${CC:-cc} -std=c11 -Werror -o "$work/literals" "$work/literals.c" || fail "the literals do not compile"
"$work/literals" | python3 -c '
import sys
got = sys.stdin.buffer.read().split(b"\0")[:3]
want = [s.encode() for s in sys.argv[1:4]]
for name, g, w in zip(("source", "train_data", "ckpt_dir"), got, want):
    if g != w:
        sys.exit(f"FAIL: .{name} reads back as {g!r}, not {w!r}")
    print(f".{name} reads back as {g!r}")
' "$dir/m.paci" "$(cd "$dir" && pwd -P)/tiny_train.bin" "$ckpt" || fail "a literal does not read back"
