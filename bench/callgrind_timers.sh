#!/bin/sh
# Instructions per arm + cancel with BASE timers armed, counted by
# callgrind: timer_scale runs one pattern of one implementation in its own
# process (--inline) with R1 and with R2 rounds of EXTRA arms and cancels,
# and (Ir(R2) - Ir(R1)) / ((R2 - R1) x EXTRA) is what one arm and its cancel
# cost, the fill and the set-up cancelled out (bench/callgrind_hops.sh does
# the same for hops). The patterns are timer_scale's: flushed (in the heap
# before the cancel; the whole loop iteration of each batch counted),
# before-flush (cancelled in the arming callback), outside (no run). This
# count does not depend on the machine's load.
#
#   bench/callgrind_timers.sh [BUILD_DIR] [BASE] [EXTRA] [R1] [R2]
#   (defaults build/release 1000000 100000 2 4)
set -eu

build=${1:-build/release}
base=${2:-1000000}
extra=${3:-100000}
r1=${4:-2}
r2=${5:-4}
bin="$build/bench/timer_scale"

. "$(dirname "$0")/callgrind_lib.sh"
callgrind_ready callgrind_timers "$bin"

names=$("$bin" --no-spike --runs 1 1000 10 2 2>/dev/null |
    awk '/^(lull|lull-virtual|libev|libuv) / { print $1 }' | sort -u)

echo "instructions per arm + cancel (callgrind; $base armed, $extra per round," \
    "rounds $r1 and $r2)"
for pattern in flushed before-flush outside; do
    echo "  $pattern"
    for impl in lull lull-virtual libev libuv; do
        case " $(echo $names) " in *" $impl "*) ;; *) continue ;; esac
        a=$(ir "$bin" --inline "$pattern" "$base" "$extra" "$r1" "$impl")
        b=$(ir "$bin" --inline "$pattern" "$base" "$extra" "$r2" "$impl")
        awk -v l="$impl" -v a="$a" -v b="$b" -v r1="$r1" -v r2="$r2" \
            -v n="$extra" \
            'BEGIN { if (a == 0 || b == 0) printf "    %-14s failed\n", l;
                     else printf "    %-14s %8.1f\n", l,
                                 (b - a) / ((r2 - r1) * n) }'
    done
done
