#!/bin/bash
# Idle with keys that expire: lull-kv and redis-server each hold N keys set
# with EX 86400 (a day away), then are left alone for SECONDS; the table
# shows each server's wakeups per second (voluntary context switches, from
# /proc/PID/status: a process blocked in epoll_wait that wakes up and goes
# back to sleep counts one) and its memory. A second lull-kv holds the
# same keys without an expiry: the difference in used_memory is what an
# expiry costs per key (the expiry time and heap place every key carries,
# and the heap slot of a key that has one).
#
#   bench/kv_idle.sh [LULL_KV] [N] [SECONDS]
#   (defaults: build/release/kv/lull-kv, 1000000, 5)
set -eu

kv=${1:-build/release/kv/lull-kv}
n=${2:-1000000}
secs=${3:-5}
for tool in redis-server redis-cli; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "kv_idle: $tool not installed, nothing measured"
        exit 0
    fi
done
if [ ! -x "$kv" ]; then
    echo "kv_idle: $kv missing (build first)" >&2
    exit 1
fi

pids=()
tmp=$(mktemp -d)
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
"$kv" --port 7396 >/dev/null 2>&1 &
pids+=($!)
"$kv" --port 7397 >/dev/null 2>&1 &
pids+=($!)
redis-server --port 7398 --save '' --appendonly no --io-threads 1 \
    >/dev/null 2>&1 &
pids+=($!)
sleep 0.5

field() { redis-cli -p "$1" INFO memory | tr -d '\r' | sed -n "s/^$2://p"; }
base=$(field 7396 used_memory)
base_plain=$(field 7397 used_memory)
awk -v n="$n" -v ex=1 'BEGIN {
    for (i = 0; i < n; i++) {
        k = "key:" i
        printf "*5\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1\r\nv\r\n$2\r\nEX\r\n$5\r\n86400\r\n", length(k), k
    }
}' >"$tmp/ttl"
awk -v n="$n" 'BEGIN {
    for (i = 0; i < n; i++) {
        k = "key:" i
        printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1\r\nv\r\n", length(k), k
    }
}' >"$tmp/plain"
redis-cli -p 7396 --pipe <"$tmp/ttl" >/dev/null
redis-cli -p 7397 --pipe <"$tmp/plain" >/dev/null
redis-cli -p 7398 --pipe <"$tmp/ttl" >/dev/null
sleep 0.5

sleeps() { awk '/^voluntary_ctxt_switches/ { print $2 }' "/proc/$1/status"; }
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
s0=()
c0=()
for p in "${pids[@]}"; do
    s0+=("$(sleeps "$p")")
    c0+=("$(cpu "$p")")
done
sleep "$secs"
tick=$(getconf CLK_TCK)
names=("lull-kv, $n keys with EX" "lull-kv, $n keys without" \
    "redis-server, $n keys with EX")
ports=(7396 7397 7398)
printf "%-36s %14s %14s %16s\n" "idle $secs s" "wakeups/s" "CPU ms/s" \
    "used_memory MB"
for i in 0 1 2; do
    p=${pids[$i]}
    w=$(( $(sleeps "$p") - ${s0[$i]} ))
    c=$(( $(cpu "$p") - ${c0[$i]} ))
    printf "%-36s %14.2f %14.2f %16.1f\n" "${names[$i]}" \
        "$(echo "$w / $secs" | bc -l)" \
        "$(echo "$c * 1000 / $tick / $secs" | bc -l)" \
        "$(echo "$(field "${ports[$i]}" used_memory) / 1048576" | bc -l)"
done
ttl=$(( $(field 7396 used_memory) - base ))
plain=$(( $(field 7397 used_memory) - base_plain ))
echo "lull-kv bytes per key: $((ttl / n)) with an expiry, $((plain / n))" \
    "without; an expiry costs $(((ttl - plain) / n)) bytes per key"
