# bench/trace_spans.sh: sourced by the benchmarks that read a Chrome trace (run --trace, pacic
# --emit trace). trace_spans TRACE prints every instruction's span as "stage start end is_step"
# (seconds; is_step 1 for an optimizer step), by stage, then by start.
trace_spans() {
    awk '/"ph": "X"/ {
            match($0, /"tid": [0-9]+/); tid = substr($0, RSTART + 7, RLENGTH - 7)
            match($0, /"ts": [0-9.]+/); ts = substr($0, RSTART + 6, RLENGTH - 6) / 1e6
            match($0, /"dur": [0-9.]+/); dur = substr($0, RSTART + 7, RLENGTH - 7) / 1e6
            print tid, ts, ts + dur, ($0 ~ /"name": "step"/) }' "$1" | sort -k1,1n -k2,2g
}
