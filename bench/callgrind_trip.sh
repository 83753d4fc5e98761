#!/bin/sh
# Instructions per cross-thread round trip, counted by callgrind: the
# remote_trip bench at two lengths N1 and N2, (Ir(N2) - Ir(N1)) / (N2 - N1),
# both threads of the process counted (callgrind runs them one at a time,
# so the interleaving is not a real CPU's; the count is what the code
# executes per trip on the path callgrind's scheduling takes).
#
#   bench/callgrind_trip.sh [BUILD_DIR] [N1] [N2]
#   (BUILD_DIR defaults to build/release; N1, N2 to 20000, 60000)
set -eu

build=${1:-build/release}
n1=${2:-20000}
n2=${3:-60000}
bin="$build/bench/remote_trip"

. "$(dirname "$0")/callgrind_lib.sh"
callgrind_ready callgrind_trip "$bin"

echo "instructions per cross-thread round trip (callgrind; N = $n1 and $n2)"
for mode in futex epoll; do
    a=$(ir "$bin" "$mode" "$n1")
    b=$(ir "$bin" "$mode" "$n2")
    awk -v m="$mode" -v a="$a" -v b="$b" -v n1="$n1" -v n2="$n2" \
        'BEGIN { if (a == 0 || b == 0) printf "  %-8s failed\n", m;
                 else printf "  %-8s %8.1f\n", m, (b - a) / (n2 - n1) }'
done
