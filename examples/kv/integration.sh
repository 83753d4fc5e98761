#!/usr/bin/env bash
# lull-kv driven by redis-cli, a client nobody here wrote (CTest label
# "integration"). Starts lull-kv on a free port and a Unix socket and checks:
# 10,000 keys mass-inserted with `redis-cli --pipe` read back one by one over
# the Unix socket; INCR from 8 concurrent redis-cli processes summed
# correctly; DBSIZE, EXISTS, DEL, FLUSHALL; inline commands; a malformed
# request closing that connection only.
#   integration.sh <path to lull-kv>
# Prints one line and exits 0 when redis-cli is not installed.
set -u
kv=$1
if ! command -v redis-cli >/dev/null 2>&1; then
    echo "skipped: redis-cli not installed (Debian package redis-tools)"
    exit 0
fi
dir=$(mktemp -d /tmp/lull-kv-test.XXXXXX)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}

"$kv" --port 0 --unix "$dir/kv.sock" >"$dir/out" 2>&1 &
pid=$!
port=
for _ in $(seq 100); do
    port=$(sed -n 's/^lull-kv: listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$dir/out")
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || fail "lull-kv exited: $(cat "$dir/out")"
    sleep 0.05
done
[ -n "$port" ] || fail "lull-kv did not start"
cli() { redis-cli -p "$port" "$@"; }

[ "$(cli PING)" = PONG ] || fail "PING"

# Mass insertion: the RESP stream redis-cli --pipe expects, 10,000 SETs.
n=10000
awk -v n=$n 'BEGIN {
    for (i = 0; i < n; i++) {
        k = "key:" i; v = "value:" (i * 7)
        printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, length(v), v
    }
}' >"$dir/mass"
out=$(redis-cli -p "$port" --pipe <"$dir/mass" 2>&1)
echo "$out" | grep -q "errors: 0, replies: $n" || fail "--pipe: $out"
[ "$(cli DBSIZE)" = $n ] || fail "DBSIZE after insertion: $(cli DBSIZE)"

# Read every key back, over the Unix socket, one command per line.
awk -v n=$n 'BEGIN { for (i = 0; i < n; i++) print "GET key:" i }' |
    redis-cli -s "$dir/kv.sock" >"$dir/got"
awk -v n=$n 'BEGIN { for (i = 0; i < n; i++) print "value:" (i * 7) }' >"$dir/want"
cmp -s "$dir/got" "$dir/want" || fail "GET read back differs: $(diff "$dir/got" "$dir/want" | head -3)"

# INCR from 8 concurrent clients, 500 each.
for _ in 1 2 3 4 5 6 7 8; do
    redis-cli -p "$port" -r 500 INCR counter >/dev/null &
done
wait $(jobs -p | grep -v "^$pid\$")
[ "$(cli GET counter)" = 4000 ] || fail "INCR sum: $(cli GET counter)"
[ "$(cli DBSIZE)" = $((n + 1)) ] || fail "DBSIZE: $(cli DBSIZE)"

[ "$(cli EXISTS key:1 key:2 nokey)" = 2 ] || fail "EXISTS"
[ "$(cli DEL key:1 nokey)" = 1 ] || fail "DEL"
[ "$(cli INCR key:2)" = "ERR value is not an integer or out of range" ] || fail "INCR on text"
[ "$(cli NOSUCH)" = "ERR unknown command 'NOSUCH'" ] || fail "unknown"

# Inline commands and a protocol error on a raw connection: the error
# line, then EOF; the other clients go on.
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'PING\r\nECHO hi\r\n*1\r\n$x\r\nPING\r\n' >&3
raw=$(timeout 5 cat <&3 | tr -d '\r' | tr '\n' ' ')
exec 3>&-
[ "$raw" = "+PONG \$2 hi -ERR Protocol error: invalid bulk length " ] ||
    fail "raw connection: '$raw'"
[ "$(cli PING)" = PONG ] || fail "PING after a protocol error"

[ "$(cli FLUSHALL)" = OK ] || fail "FLUSHALL"
[ "$(cli DBSIZE)" = 0 ] || fail "DBSIZE after FLUSHALL"
kill -0 "$pid" || fail "lull-kv died"
echo "integration: $n keys via --pipe read back, 8 clients x 500 INCR = 4000, protocol error closed one connection only"
