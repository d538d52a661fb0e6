#!/usr/bin/env bash
# cc_cache.sh ARGS...: the C compiler $PACI_CC_REAL (default cc) run with ARGS, except that
# the object of a one-source compilation (`-c SOURCE.c -o OBJECT`) is kept in $PACI_CC_CACHE
# and copied from there when the same compilation comes again. tests/run.sh makes it the CC
# of a whole run: the e2e scripts build hundreds of programs with pacic, and many of those
# compile the same generated code (the same model and schedule, or the same stage under
# another split), which differs only in the .paci path its banner comment names.
# The key is what decides the object: the compiler (its path and --version), every argument
# but the source's and the object's names, and the source preprocessed with those arguments
# (every header's content in, comments out; no line markers, so not the source's folder, but
# __FILE__ would be in). What the compiler printed is kept and printed again. Any other call
# (a link, --version, several sources, dependency files) runs as it is. Entries are written
# whole (renamed into place): concurrent compilations may share the folder.
set -u
real=${PACI_CC_REAL:-cc}
cache=${PACI_CC_CACHE:-}
[ -n "$cache" ] || exec $real "$@"

args=("$@") source= object= compiles=0 flags=() plain=1
while [ $# -gt 0 ]; do
    case $1 in
        -c) compiles=$((compiles + 1)) ;;
        -o) [ $# -ge 2 ] && [ -z "$object" ] || plain=0
            object=${2:-}; shift ;;
        -o?* | -M* | -save-temps* | -E | -S | -x | - | @*) plain=0 ;;
        -*) flags+=("$1") ;;
        *.c) [ -z "$source" ] || plain=0
            source=$1 ;;
        *) flags+=("$1") ;;
    esac
    shift
done
if [ "$plain" != 1 ] || [ "$compiles" != 1 ] || [ -z "$source" ] || [ -z "$object" ] || [ ! -f "$source" ]; then
    exec $real "${args[@]}"
fi

mkdir -p "$cache"
key=$({ command -v $real; $real --version; printf '%s\n' "${flags[@]}" --; $real "${flags[@]}" -E -P "$source"; } |
      sha256sum | cut -c1-40) || exec $real "${args[@]}"
if [ -f "$cache/$key.o" ] && [ -f "$cache/$key.err" ]; then
    cp "$cache/$key.o" "$object" && cat "$cache/$key.err" >&2 && exit 0
fi
err=$(mktemp "$cache/$key.err.XXXXXX")
status=0
$real "${args[@]}" 2> "$err" || status=$?
cat "$err" >&2
if [ "$status" = 0 ]; then
    tmp=$(mktemp "$cache/$key.o.XXXXXX")
    cp "$object" "$tmp" && mv -f "$tmp" "$cache/$key.o" && mv -f "$err" "$cache/$key.err"
fi
rm -f "$err" "${tmp:-}"
exit "$status"
