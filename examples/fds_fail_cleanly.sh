#!/bin/bash
# An example that makes files, run under `ulimit -n` from too low to start
# to high enough to finish (what the shell running it inherits counts too): each run must end, either with its success
# line or with exit status 1 and a line saying what failed, and leave
# nothing in its $TMPDIR. (fs_watch hung for ever when the open of its
# first step failed: it waited for an event that step never caused; and
# left its directory behind on every failure.)
# Run by CTest as examples.<name>_out_of_fds_fails_cleanly.
#   bash fds_fail_cleanly.sh <program> <success line> <lowest> <highest>
prog=$1 want=$2 low=$3 high=$4
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0 passed=0
for n in $(seq "$low" "$high"); do
    out=$(TMPDIR=$tmp timeout 10 sh -c 'ulimit -n "$1" && exec "$2"' sh \
        "$n" "$prog" 2>&1)
    rc=$?
    echo "ulimit -n $n: exit $rc: $out" | tail -2
    left=$(ls -A "$tmp")
    if [ -n "$left" ]; then
        echo "FAILED: left behind in \$TMPDIR: $left"
        exit 1
    fi
    if [ "$rc" = 127 ] && echo "$out" | grep -q "while loading shared"; then
        continue # too few fds for the dynamic loader: not the example's
    elif [ "$rc" = 0 ] && echo "$out" | grep -q "$want"; then
        passed=$((passed + 1))
    elif [ "$rc" = 1 ] && echo "$out" | grep -q "Too many open files"; then
        failed=$((failed + 1))
    else
        echo "FAILED: neither its success line nor a clear error"
        exit 1
    fi
done
# Both ends of the range were seen: the check tested something.
[ "$failed" -gt 0 ] && [ "$passed" -gt 0 ] || {
    echo "FAILED: $failed runs out of fds, $passed runs through"; exit 1; }
echo "every run ended cleanly: $failed out of fds, $passed through"
