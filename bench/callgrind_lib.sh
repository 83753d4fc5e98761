# Shared by bench/callgrind_hops.sh, callgrind_timers.sh and
# callgrind_trip.sh (sourced, not run): the checks every script makes
# before counting, and ir, the instructions of one run.

# callgrind_ready NAME PROGRAM...: exits 0 with a line when valgrind is
# missing (nothing measured), 1 when a program is not built; else makes
# $tmp, removed at exit.
callgrind_ready() {
    name=$1
    shift
    if ! command -v valgrind >/dev/null 2>&1; then
        echo "$name: valgrind not installed, nothing measured"
        exit 0
    fi
    for prog in "$@"; do
        if [ ! -x "$prog" ]; then
            echo "$name: $prog missing (build first)" >&2
            exit 1
        fi
    done
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
}

# ir COMMAND...: the "totals:" line of callgrind's output file for one run
# of COMMAND, or 0 (and a line on stderr) when it failed.
ir() {
    out="$tmp/out.$$"
    valgrind --tool=callgrind --callgrind-out-file="$out" "$@" \
        >/dev/null 2>&1 || { echo "failed: $*" >&2; echo 0; return; }
    awk '/^(totals|summary):/ { print $2; exit }' "$out"
    rm -f "$out"
}
