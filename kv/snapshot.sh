#!/usr/bin/env bash
# A full resync by snapshot, through a forked child, between two real
# lull-kv processes: a primary with a 16 KiB backlog holding 60,000
# strings (a binary one among them), a list, a set, a hash and a sorted
# set of 1,000 each, and keys with expiry times, long past its backlog;
# a replica that attaches only then gets a snapshot ("full: a snapshot
# of N keys") and ends with every key, value and expiry of the primary's
# (compared type by type through redis-cli); writes after it follow.
# With `tls`, the replica connects to the primary's TLS port: the child
# writes to a pipe that the primary's loop relays into the session.
# With `killed`, the primary is killed (SIGKILL) while its child writes
# to a replica that reads nothing: the child goes with it, and a new
# lull-kv takes the port at once.
#   snapshot.sh <path to lull-kv> [tls|killed]
# Prints one line and exits 0 when redis-cli (or, with tls, openssl or
# lull's TLS) is not there.
set -u
kv=$1
tls=${2:-}
TEST_NAME=snapshot${tls:+_$tls}
# shellcheck source=kv/test_lib.sh
. "$(dirname "$0")/test_lib.sh"

info() { redis-cli -p "$1" INFO replication | tr -d '\r' | sed -n "s/^$2://p"; }

if [ "$tls" = killed ]; then
    start primary --port 0 --repl-backlog-size 16kb
    port=$started_port
    for i in $(seq 0 199999); do
        printf 'SET key:%d value-%d-0123456789012345678901234567890123456789\n' "$i" "$i"
    done | redis-cli -p "$port" >/dev/null
    # A replica that asks for a full sync and reads none of it.
    exec 3<>"/dev/tcp/127.0.0.1/$port"
    printf 'REPLSYNC ? 0 0\r\n' >&3
    for _ in $(seq 100); do
        child=$(sed -n 's/.* from child \([0-9]*\),.*/\1/p' "$dir/primary.out")
        [ -n "$child" ] && break
        sleep 0.05
    done
    [ -n "$child" ] || fail "no snapshot child"
    kill -9 "$started"
    wait "$started" 2>/dev/null
    gone() { ! kill -0 "$child" 2>/dev/null; }
    eventually gone || fail "the child $child outlived its primary"
    start again --port "$port"
    [ "$(redis-cli -p "$port" PING)" = PONG ] || fail "no PONG from the new primary"
    exec 3>&-
    echo "snapshot: a primary killed mid-snapshot took its child with it; its port was free at once"
    exit 0
fi

pargs=() rargs=()
if [ -n "$tls" ]; then
    skip() { echo "skipped: snapshot over TLS ($1)"; exit 77; }
    command -v openssl >/dev/null 2>&1 || skip "openssl not installed"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$dir/s.key" -out "$dir/s.crt" -subj /CN=localhost -days 1 \
        -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null || fail "openssl req"
    tport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    timeout 2 "$kv" --port 0 --tls-port "$tport" --tls-cert-file "$dir/s.crt" \
        --tls-key-file "$dir/s.key" --tls-ca-cert-file "$dir/s.crt" 2>&1 |
        grep -q "built without" && skip "lull built without OpenSSL"
    pargs=(--tls-port "$tport" --tls-cert-file "$dir/s.crt" --tls-key-file "$dir/s.key"
        --tls-ca-cert-file "$dir/s.crt" --tls-auth-clients no)
    rargs=(--tls-replication yes --tls-ca-cert-file "$dir/s.crt")
fi
start primary --port 0 --repl-backlog-size 16kb "${pargs[@]}"
port=$started_port
link=$port
[ -n "$tls" ] && link=$started_tls
ppid_=$started
{
    for i in $(seq 0 59999); do
        printf 'SET key:%d value-%d\n' "$i" "$i"
    done
    for i in $(seq 0 999); do
        printf 'RPUSH list l%d\nSADD set s%d\nHSET hash f%d v%d\nZADD zset %d.5 m%d\n' \
            "$i" "$i" "$i" "$i" "$i" "$i"
    done
    for i in $(seq 0 99); do
        printf 'SET ttl:%d v PX 3600000\n' "$i"
    done
    printf 'PEXPIRE list 7200000\n'
} | redis-cli -p "$port" >/dev/null
printf 'bin\0key' | redis-cli -p "$port" -x SET binval >/dev/null
first=$(info "$port" repl_backlog_first_byte_offset)
[ "${first:-0}" -gt 1 ] || fail "the backlog was not trimmed (first byte $first)"

start replica --port 0 --replica-of "127.0.0.1:$link" "${rargs[@]}"
rport=$started_port
synced() {
    for _ in $(seq 1200); do
        m=$(info "$port" master_repl_offset)
        r=$(info "$rport" slave_repl_offset)
        [ -n "$m" ] && [ "$m" = "$r" ] && [ "$(info "$rport" master_link_status)" = up ] && return 0
        sleep 0.05
    done
    fail "replica at offset '$r', primary at '$m'"
}
synced
grep -q "(full: a snapshot of 60105 keys)" "$dir/replica.out" ||
    fail "no snapshot: $(cat "$dir/replica.out")"
how="on the link's socket"
[ -n "$tls" ] && how="relayed by the loop"
grep -q "a snapshot as of offset [0-9]* from child [0-9]*, $how" "$dir/primary.out" ||
    fail "no child ($how): $(cat "$dir/primary.out")"
redis-cli -p "$port" INCR after >/dev/null
redis-cli -p "$port" DEL key:7 >/dev/null
synced

# every key of both, type by type
view() {
    redis-cli -p "$1" --scan | grep -v "^key:" | sort | while read -r k; do
        t=$(redis-cli -p "$1" TYPE "$k")
        case $t in
        string) v=$(redis-cli -p "$1" GET "$k" | od -An -c | tr -d ' \n') ;;
        list) v=$(redis-cli -p "$1" LRANGE "$k" 0 -1 | tr '\n' ,) ;;
        set) v=$(redis-cli -p "$1" SMEMBERS "$k" | sort | tr '\n' ,) ;;
        hash) v=$(redis-cli -p "$1" HGETALL "$k" | paste - - | sort | tr '\n' ,) ;;
        zset) v=$(redis-cli -p "$1" ZRANGE "$k" 0 -1 WITHSCORES | tr '\n' ,) ;;
        esac
        ttl=$(redis-cli -p "$1" PTTL "$k")
        [ "$ttl" -gt 0 ] && ttl=set
        echo "$k $t $ttl $v"
    done
}
# Strings are many: compared in one pipelined MGET-like pass below; the
# view takes the others and every key's name.
view "$port" >"$dir/p.view"
view "$rport" >"$dir/r.view"
cmp -s "$dir/p.view" "$dir/r.view" || fail "replica differs: $(diff "$dir/p.view" "$dir/r.view" | head)"
mget() { { printf 'MGET'; for i in $(seq 0 59999); do printf ' key:%d' "$i"; done; echo; } | redis-cli -p "$1"; }
mget "$port" >"$dir/p.mget"
mget "$rport" >"$dir/r.mget"
cmp -s "$dir/p.mget" "$dir/r.mget" || fail "replica strings differ"
[ "$(redis-cli -p "$rport" DBSIZE)" = "$(redis-cli -p "$port" DBSIZE)" ] || fail "DBSIZE"
echo "snapshot${tls:+ over TLS}: a replica attached past a 16 KiB backlog got a forked snapshot of 60105 keys, equal on every type and expiry"
