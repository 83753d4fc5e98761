#!/bin/sh
# Instructions per hop, counted by callgrind: each chain runs at two lengths
# N1 and N2, and (Ir(N2) - Ir(N1)) / (N2 - N1) is what one hop costs, with
# setup and teardown cancelled out. lull's task chain and zero-delay timer
# chain, each under lull's default I/O policy (one check per 0.5 ms quantum)
# and checking I/O every hop (quantum_ns = 1), then every peer mode
# hop_cost_peers was built with. Rows that check I/O the same way compare
# like for like: lull's default with libevent at a 500 us dispatch
# interval; lull every hop with uv_idle, ev_idle and libevent per callback.
# The floor row is what any loop checking I/O every hop must at least do.
# One row is per round trip instead: the loopback pair's, beside the hops.
#
#   bench/callgrind_hops.sh [BUILD_DIR] [N1] [N2]
#   (BUILD_DIR defaults to build/release; N1, N2 to 100000, 300000)
set -eu

build=${1:-build/release}
n1=${2:-100000}
n2=${3:-300000}
bench="$build/bench"

. "$(dirname "$0")/callgrind_lib.sh"
callgrind_ready callgrind_hops "$bench/hop_cost" "$bench/hop_cost_peers"

per_hop() { # label, command...
    label=$1
    shift
    a=$(ir "$@" "$n1")
    b=$(ir "$@" "$n2")
    awk -v l="$label" -v a="$a" -v b="$b" -v n1="$n1" -v n2="$n2" \
        'BEGIN { if (a == 0 || b == 0) printf "  %-44s failed\n", l;
                 else printf "  %-44s %8.1f\n", l, (b - a) / (n2 - n1) }'
}

echo "instructions per hop (callgrind; N = $n1 and $n2)"
# The floor: no loop, epoll_wait(.., 0) and one indirect call per hop.
per_hop "floor: epoll_wait(0) + 1 indirect call" "$bench/hop_cost" floor
per_hop "lull: posted task (I/O every 0.5 ms)" "$bench/hop_cost" task
per_hop "lull: posted task (I/O every hop)" "$bench/hop_cost" task-every-hop
per_hop "lull: zero-delay timer (I/O every 0.5 ms)" "$bench/hop_cost" timer0
per_hop "lull: zero-delay timer (I/O every hop)" "$bench/hop_cost" \
    timer0-every-hop
# Not a hop: a loopback round trip (a frame each way, two delivery turns),
# lull-lab loopback's "round trip alone"; the target is ≤ 2 × two hops.
per_hop "lull: loopback round trip (2 turns, 2 frames)" "$bench/hop_cost" \
    loopback
per_hop "lull: the same, delivered by zero-delay timer" "$bench/hop_cost" \
    loopback-timer0
for mode in $("$bench/hop_cost_peers" list); do
    case $mode in
    uv-idle) label="libuv: uv_idle (next iteration)" ;;
    uv-timer0) label="libuv: uv_timer_start(0)" ;;
    ev-idle) label="libev: ev_idle (next iteration)" ;;
    ev-timer0) label="libev: ev_timer 0." ;;
    event-active) label="libevent: event_active, one-pass drain" ;;
    event-active-checked) label="libevent: event_active, I/O per callback" ;;
    event-active-500us) label="libevent: event_active, I/O every 500 us" ;;
    event-timer0) label="libevent: evtimer_add {0,0}" ;;
    *) label=$mode ;;
    esac
    per_hop "$label" "$bench/hop_cost_peers" "$mode"
done
echo "  (a 0.5 ms policy polls more often under callgrind, which runs the"
echo "  chain far slower than natively: those rows are upper bounds)"
echo "  target: lull ≤ 60 instructions per hop"
