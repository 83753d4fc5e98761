#!/bin/bash
# What a closed-loop client pays when the server sleeps often: lull-kv and
# redis-server under `redis-benchmark -c 50 -P DEPTH` (the client's CPU is
# the limit there: lull-lab serve's CPU table), and lull-kv again with the
# sleep_later shim spinning SPIN ns before each blocking epoll_wait. If the
# client's cost per request falls and the rate rises when lull-kv sleeps
# less often, the rate measures how often the server sleeps, not what it
# costs. The shim is an experiment, not a mode of lull.
#
#   bench/kv_batching.sh [BUILD_DIR] [ROUNDS] [REQUESTS] [SPIN_NS] [DEPTH]
#   (defaults: build/release, 5, 300000, 3000, 1)
set -eu

build=${1:-build/release}
rounds=${2:-5}
n=${3:-300000}
spin=${4:-3000}
depth=${5:-1}
kv="$build/kv/lull-kv"
shim="$(cd "$build/bench" 2>/dev/null && pwd)/libsleep_later.so"
for tool in redis-server redis-benchmark taskset; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "kv_batching: $tool not installed, nothing measured"
        exit 0
    fi
done
for f in "$kv" "$shim"; do
    if [ ! -e "$f" ]; then
        echo "kv_batching: $f missing (build first)" >&2
        exit 1
    fi
done

pids=()
out=$(mktemp)
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -f "$out"' EXIT
taskset -c 0 "$kv" --port 7391 >/dev/null 2>&1 &
pids+=($!)
LD_PRELOAD="$shim" SLEEP_LATER_NS="$spin" taskset -c 0 "$kv" --port 7392 \
    >/dev/null 2>&1 &
pids+=($!)
taskset -c 0 redis-server --port 7393 --save '' --appendonly no \
    --io-threads 1 >/dev/null 2>&1 &
pids+=($!)
sleep 0.5
names=("lull-kv" "lull-kv, sleep_later $spin ns" "redis-server")

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
sleeps() { awk '/^voluntary_ctxt_switches/ { print $2 }' "/proc/$1/status"; }
tick=$(getconf CLK_TCK)

for ((r = 0; r < rounds; r++)); do
    for i in 0 1 2; do
        pid=${pids[$i]}
        port=$((7391 + i))
        t0=$(cpu_ticks "$pid")
        s0=$(sleeps "$pid")
        res=$({ /usr/bin/time -f "%U %S" taskset -c 1 redis-benchmark \
            -p "$port" -t ping_mbulk -n "$n" -c 50 -P "$depth" --csv; } 2>&1)
        t1=$(cpu_ticks "$pid")
        s1=$(sleeps "$pid")
        rps=$(echo "$res" | awk -F'"' '/^"PING_MBULK"/ { print $4 }')
        if [ -z "$rps" ]; then
            echo "kv_batching: redis-benchmark against ${names[$i]}:" \
                "$(echo "$res" | tail -2)" >&2
            exit 1
        fi
        client=$(echo "$res" | tail -1)
        echo "$i $rps $client $((t1 - t0)) $((s1 - s0))" >>"$out"
    done
done

echo "redis-benchmark -t ping_mbulk -n $n -c 50 -P $depth (pinned to CPU 1)," \
    "servers on CPU 0 in turn; $rounds rounds, median [min-max]"
printf "  %-34s %-24s %-24s %-22s %s\n" server "req/s" \
    "client CPU µs/req" "server CPU µs/req" "req per server sleep"
for i in 0 1 2; do
    awk -v i="$i" -v n="$n" -v tick="$tick" -v name="${names[$i]}" '
        function med(a, k, f,   s, j, t, m) {
            for (j = 1; j <= k; j++) s[j] = a[j]
            for (j = 2; j <= k; j++) { t = s[j]; m = j - 1
                while (m > 0 && s[m] > t) { s[m + 1] = s[m]; m-- }
                s[m + 1] = t }
            return sprintf(f " [" f "-" f "]", s[int((k + 1) / 2)], s[1], s[k])
        }
        $1 == i { k++; rps[k] = $2; cl[k] = ($3 + $4) * 1e6 / n
                  sv[k] = $5 / tick * 1e6 / n; ps[k] = n / ($6 > 0 ? $6 : 1) }
        END { printf "  %-34s %-24s %-24s %-22s %s\n", name,
                     med(rps, k, "%.0f"), med(cl, k, "%.2f"),
                     med(sv, k, "%.2f"), med(ps, k, "%.2f") }' "$out"
done
