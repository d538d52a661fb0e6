#!/usr/bin/env bash
# README.md's commands work when pasted, and README stays short (at most 150 lines).
#
# Every line of a ```sh block is a command, run from the root of a copy of the working tree
# (its tracked and untracked files that git does not ignore, with their times, the build
# tree $PACI_BUILD as build/, and the token files make writes into examples/data/), in the
# order README gives them, so a command may use what an earlier one wrote (m.jsonl, p.txt).
# A line ending in `\` continues on the next; a comment starts at whitespace then `#` (so
# keep ` #` out of quoted arguments); blank and comment lines are not commands. Each line runs
# in its own `bash -c` with a time limit of PACI_README_TIMEOUT seconds (default 300): a
# `cd` or a variable does not carry over to the next line; a line ending in `&` runs in
# the background and is waited for at the end of its block. The test fails naming README's
# line, the command and its output when one exits non-zero or runs out of time.
#
# Marker lines, each alone on its line, put blocks between them in a class of their own (an
# opened marker must be closed before the next opens, and by the end of the file):
#   <!-- setup -->   ... <!-- /setup -->    the two set-up commands README opens with: not
#       run (they are `make test` itself and the 600-step training), but they must be
#       exactly `.ci/install-deps && make train` and `make test`, `.ci/run` must run the same
#       test command, and the Makefile must have a `train` target. Stood in for by what they
#       leave behind: `run` compiled from examples/tiny.paci, and a checkpoint in
#       checkpoints/ (here after 10 steps, not 600).
#   <!-- long -->    ... <!-- /long -->     not run: minutes of training.
#   <!-- pending --> ... <!-- /pending -->  not run: a feature on its way; delete the two
#       marker lines when it lands.
#   <!-- file PATH --> ... <!-- /file -->   the block in between is a copy of the .paci file
#       PATH, maybe laid out more compactly, with its own notes: their entries must be equal
#       (comments and layout aside: `a { b 1; c 2 }` equals the same on four lines).
# Other HTML comments are prose. Blocks in other languages (```text, ```paci) are not run.
# Afterwards the pictures `make svg` writes (docs/schedule-*.svg) must equal the committed
# ones, when README ran `make svg`.
# PACI_README=FILE checks another file in README's place (the copy's README.md is replaced).
source tests/e2e/lib.sh

[ "${PACI_BUILD:-build}" = build ] || skip "README's commands name build/bin/pacic; PACI_BUILD=$PACI_BUILD"
readme=${PACI_README:-$root/README.md}
limit=${PACI_README_TIMEOUT:-300}
[ -f "$readme" ] || fail "no $readme"

lines=$(wc -l < "$readme")
[ "$lines" -le 150 ] || fail "README.md has $lines lines, more than 150: a newcomer's page; move details to docs/"

# ---- parse: one record per command, "LINE<US>BLOCK<US>CLASS<US>COMMAND" -----------------------
# BLOCK numbers the ```sh blocks; CLASS is run, setup, long or pending. A `file` block's lines
# go to $work/file-N.txt and its PATH to $work/file-N.path.
records=$work/records
awk -v work="$work" '
    function bad(msg) { printf "README.md:%d: %s\n", NR, msg > "/dev/stderr"; error = 1; exit 1 }
    /^<!-- \/(setup|long|pending|file) -->$/ {
        name = substr($0, 7); sub(/ -->$/, "", name)
        if (fence) bad("marker inside a code block")
        if (region == "") bad("closing marker without an opening one: " $0)
        if (name != region) bad("closing " name " inside " region)
        region = ""; next
    }
    /^<!-- (setup|long|pending) -->$/ || /^<!-- file [^ ]+ -->$/ {
        if (fence) bad("marker inside a code block")
        if (region != "") bad("marker inside the " region " region opened at line " region_line)
        region = $2; region_line = NR
        if (region == "file") { files++; print $3 > (work "/file-" files ".path") }
        next
    }
    /^```/ {
        if (!fence) {
            fence = 1; lang = substr($0, 4); sub(/[ \t]+$/, "", lang)
            if (lang == "sh") blocks++
            if (region == "file" && ++file_blocks[files] > 1) bad("two blocks in one file region")
            pending_cmd = ""
            next
        }
        if ($0 != "```") bad("a fence that closes a block must be ``` alone")
        if (pending_cmd != "") bad("the block ends inside a continued line")
        fence = 0; next
    }
    fence && region == "file" { print > (work "/file-" files ".txt") }
    fence && lang == "sh" {
        text = $0
        if (pending_cmd != "") { text = pending_cmd " " text; start = pending_start } else start = NR
        if (text ~ /\\$/) { pending_cmd = substr(text, 1, length(text) - 1); pending_start = start; next }
        pending_cmd = ""
        sub(/(^|[ \t]+)#.*$/, "", text); sub(/^[ \t]+/, "", text); sub(/[ \t]+$/, "", text)
        if (text == "") next
        class = region == "" ? "run" : region
        if (class == "file") bad("a sh block inside a file region")
        printf "%d\037%d\037%s\037%s\n", start, blocks, class, text
    }
    END {
        if (error) exit 1
        if (fence) { print "README.md: a code block is never closed" > "/dev/stderr"; exit 1 }
        if (region != "") { printf "README.md:%d: the %s region is never closed\n", region_line, region > "/dev/stderr"; exit 1 }
    }
' "$readme" > "$records" || fail "README.md's markers or blocks are malformed (above)"

# ---- the set-up commands: README's opening rule ------------------------------------------
setup=$(awk -F '\037' '$3 == "setup" { print $4 }' "$records")
expected=$'.ci/install-deps && make train\nmake test'
[ "$setup" = "$expected" ] ||
    fail "README's set-up block must be exactly '.ci/install-deps && make train' and 'make test'; it has: $setup"
grep -qE '(^|[[:space:]])make test$' "$root/.ci/run" || fail ".ci/run does not run README's test command, make test"
grep -q '^train:' "$root/Makefile" || fail "the Makefile has no train target, which README's first command runs"

# ---- copies of files with notes ----------------------------------------------------------
# entries FILE: a .paci file's entries, one a line, without comments: `;` and braces split
# lines as the DSL does, so a compact copy (`batch { micro 8 }`) equals the file's layout.
entries() {
    sed -e 's/[[:space:]]*#.*$//' -e 's/;/\n/g' -e 's/{/{\n/g' -e 's/}/\n}/g' "$1" |
        sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' -e 's/[[:space:]][[:space:]]*/ /g' -e '/^$/d'
}
for path_file in "$work"/file-*.path; do
    [ -e "$path_file" ] || continue
    path=$(cat "$path_file") copy=${path_file%.path}.txt
    [ -f "$root/$path" ] || fail "README shows a copy of $path, which does not exist"
    [ -f "$copy" ] || fail "README's file region for $path holds no code block"
    diff <(entries "$root/$path") <(entries "$copy") > "$work/file.diff" ||
        fail "README's copy of $path differs from the file (comments and layout aside): $(cat "$work/file.diff")"
done

# ---- a copy of the working tree, and what the set-up leaves ------------------------------
repo=$work/repo
mkdir -p "$repo"
git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1 || skip "not a git work tree: the copy needs git ls-files"
(cd "$root" && git ls-files -z -c -o --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf -) | tar -C "$repo" -xf - || fail "cannot copy the working tree"
[ -z "${PACI_README:-}" ] || cp "$readme" "$repo/README.md"
# build/ less make check's caches (build/test-cache), which grow from run to run
(cd "$root" && tar --exclude=build/test-cache -cf - build) | tar -C "$repo" -xf - || fail "cannot copy build/"
cp -p "$root"/examples/data/*.bin "$repo/examples/data/"
[ ! -d "$root/examples/data/gpt2" ] || cp -a "$root/examples/data/gpt2" "$repo/examples/data/gpt2" # .ci/install-deps fetched it
(cd "$repo" && build/bin/pacic examples/tiny.paci -o run && ./run --steps 10 --quiet) > "$work/setup.log" 2>&1 ||
    fail "the stand-in for make train failed: $(cat "$work/setup.log")"

# ---- run the commands --------------------------------------------------------------------
# Launchers' variables left out give the defaults README's multi-process lines rely on, but
# the port is this script's own (tests/run.sh gives each script a block of ports).
export MASTER_PORT=$port
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE \
    SLURM_PROCID SLURM_NTASKS SLURM_STEP_NUM_TASKS
ran=0 skipped_long=0 skipped_pending=0
bg_pids=() bg_lines=()
# report LINE COMMAND STATUS: names the failed command, its status and its output.
report() {
    local why="exit $3"
    [ "$3" != 124 ] && [ "$3" != 137 ] || why="no end within $limit s (PACI_README_TIMEOUT)"
    echo "README.md:$1: $2" >&2
    echo "  $why; its output:" >&2
    tail -n 40 "$work/out-$1.log" | sed 's/^/    /' >&2
    # The block's background commands: one that failed first is often the cause.
    local i status
    for i in "${!bg_pids[@]}"; do
        [ "${bg_lines[$i]}" != "$1" ] || continue
        kill -0 "${bg_pids[$i]}" 2>/dev/null && { kill "${bg_pids[$i]}" 2>/dev/null || true; continue; }
        status=0; wait "${bg_pids[$i]}" || status=$?
        [ "$status" != 0 ] || continue
        echo "README.md:${bg_lines[$i]}, in the background, ended first with exit $status; its output:" >&2
        tail -n 20 "$work/out-${bg_lines[$i]}.log" | sed 's/^/    /' >&2
    done
    bg_pids=() bg_lines=()
    fail "README.md:$1: a command that does not work as pasted: $2"
}
# finish_block: waits for the block's background commands.
finish_block() {
    local i status
    for i in "${!bg_pids[@]}"; do
        status=0; wait "${bg_pids[$i]}" || status=$?
        [ "$status" = 0 ] || report "${bg_lines[$i]}" "$(cmd_at "${bg_lines[$i]}")" "$status"
    done
    bg_pids=() bg_lines=()
}
cmd_at() { awk -F '\037' -v l="$1" '$1 == l { print $4 }' "$records"; }
block=
while IFS=$'\037' read -r line b class cmd <&3; do
    case $class in
        setup) continue ;;
        long) skipped_long=$((skipped_long + 1)); continue ;;
        pending) skipped_pending=$((skipped_pending + 1)); continue ;;
    esac
    [ "$b" = "$block" ] || finish_block
    block=$b ran=$((ran + 1))
    echo "README.md:$line: $cmd"
    if [[ $cmd == *'&' && $cmd != *'&&' ]]; then
        (cd "$repo" && exec timeout -k 5 "$limit" bash -c "${cmd%&}") > "$work/out-$line.log" 2>&1 &
        bg_pids+=($!) bg_lines+=("$line")
    else
        status=0
        (cd "$repo" && exec timeout -k 5 "$limit" bash -c "$cmd") > "$work/out-$line.log" 2>&1 < /dev/null || status=$?
        [ "$status" = 0 ] || report "$line" "$cmd" "$status"
    fi
done 3< "$records"
finish_block
[ "$ran" -gt 0 ] || fail "no command of README.md ran"

# The committed pictures are what `make svg` draws now (when README's commands ran it).
for svg in "$repo"/docs/schedule-*.svg; do
    [ -e "$svg" ] || continue
    cmp -s "$svg" "$root/docs/${svg##*/}" || fail "docs/${svg##*/} is not what make svg draws now: run make svg and commit it"
done
echo "README.md: $lines lines; $ran commands ran, $skipped_long long and $skipped_pending pending left out"
