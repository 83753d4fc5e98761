#!/bin/bash
# Server CPU per request as instructions (callgrind), which a loaded
# machine does not move: each server runs under valgrind's callgrind, is
# sent `redis-benchmark -t TEST -n N -c 50 -P DEPTH`, and is stopped; a
# run that only starts and stops it is subtracted, and the rest divided
# by N. A test that needs another first runs after it, as in the default
# suite, and that one's count is subtracted: the LRANGE tests (on a list
# redis-benchmark fills with N LPUSHes itself), LPOP after LPUSH, RPOP
# after RPUSH, SPOP after SADD, ZPOPMIN after ZADD. Instructions are not
# time (cache misses and system calls are not in them), but they show
# what each server's code does per request, the same way on any machine.
#
#   bench/kv_instructions.sh [LULL_KV] [N] [DEPTHS] [TESTS]
#   (defaults: build/release/kv/lull-kv, 20000, "1 16", every test of
#    redis-benchmark's default suite)
set -eu

kv=${1:-build/release/kv/lull-kv}
n=${2:-20000}
depths=${3:-1 16}
tests=${4:-ping_inline ping_mbulk set get incr lpush rpush lpop rpop sadd hset spop zadd zpopmin lrange_100 lrange_300 lrange_500 lrange_600 mset}
for tool in valgrind redis-server redis-benchmark redis-cli; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "kv_instructions: $tool not installed, nothing measured"
        exit 0
    fi
done

# ir SERVER TEST DEPTH: the instructions of one run (TEST "" : start, stop).
ir() {
    local port=$((20000 + RANDOM % 20000)) dir
    dir=$(mktemp -d)
    if [ "$1" = lull-kv ]; then
        valgrind --tool=callgrind --callgrind-out-file="$dir/cg" \
            "$kv" --port "$port" >/dev/null 2>&1 &
    else
        valgrind --tool=callgrind --callgrind-out-file="$dir/cg" \
            redis-server --port "$port" --save '' --appendonly no \
            --io-threads 1 >/dev/null 2>&1 &
    fi
    local pid=$!
    for _ in $(seq 300); do
        redis-cli -p "$port" PING >/dev/null 2>&1 && break
        sleep 0.1
    done
    if [ -n "$2" ]; then
        redis-benchmark -p "$port" -t "$2" -n "$n" -c 50 -P "$3" -q \
            >/dev/null 2>&1
    fi
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    awk '/^summary:/ { print $2 }' "$dir/cg"
    rm -rf "$dir"
}

printf "%-12s %6s %14s %14s %8s\n" test depth "lull-kv ins/req" \
    "redis ins/req" ratio
# before TEST: the test that runs first ("" for none).
before() {
    case $1 in
    lpop) echo lpush ;; rpop) echo rpush ;; spop) echo sadd ;;
    zpopmin) echo zadd ;; *) echo "" ;;
    esac
}
for p in $depths; do
    declare -A idle=() first=()
    for s in lull-kv redis-server; do
        idle[$s]=$(ir "$s" "" "$p")
    done
    for t in $tests; do
        declare -A per=()
        b=$(before "$t")
        for s in lull-kv redis-server; do
            case $t in
            lrange_*)
                [ -n "${first[$s.lpush]:-}" ] ||
                    first[$s.lpush]=$(ir "$s" lpush "$p")
                total=$(ir "$s" "$t" "$p")
                base=${first[$s.lpush]}
                ;;
            *)
                if [ -n "$b" ]; then
                    [ -n "${first[$s.$b]:-}" ] ||
                        first[$s.$b]=$(ir "$s" "$b" "$p")
                    total=$(ir "$s" "$b,$t" "$p")
                    base=${first[$s.$b]}
                else
                    total=$(ir "$s" "$t" "$p")
                    base=${idle[$s]}
                    first[$s.$t]=$total
                fi
                ;;
            esac
            per[$s]=$(((total - base) / n))
        done
        printf "%-12s %6s %14d %14d %8.2f\n" "$t" "-P $p" "${per[lull-kv]}" \
            "${per[redis-server]}" \
            "$(echo "${per[lull-kv]} / ${per[redis-server]}" | bc -l)"
    done
done
