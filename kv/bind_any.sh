#!/usr/bin/env bash
# --bind with an IPv4 and an IPv6 address of the same port, as redis.conf
# writes "every address" (`bind 0.0.0.0 ::`, either order): both listen and
# answer, an IPv4 client on the IPv4 listener (CTest kv.bind_any, label kv).
# A dual-stack "::" also claimed the IPv4 port, so lull-kv exited at start
# with "Address already in use". Skips with one line without redis-cli or
# an IPv6 loopback.
#   bind_any.sh <path to lull-kv>
set -u
kv=$1
TEST_NAME=bind_any
# shellcheck source=kv/test_lib.sh
. "$(dirname "$0")/test_lib.sh"

if ! redis-cli -h ::1 -p 1 PING 2>&1 | grep -q -i 'refused'; then
    echo "skipped: no IPv6 loopback here"
    exit 77
fi
for order in "0.0.0.0 ::" ":: 0.0.0.0" ":: 127.0.0.1"; do
    # shellcheck disable=SC2086 # the addresses are words
    start any --port 0 --bind $order
    p=$started_port
    [ "$(redis-cli -h 127.0.0.1 -p "$p" SET k "$order")" = OK ] ||
        fail "SET on 127.0.0.1 with --bind $order"
    [ "$(redis-cli -h ::1 -p "$p" GET k)" = "$order" ] ||
        fail "GET on ::1 with --bind $order"
    # The IPv4 client is served by the IPv4 listener: its address as it is.
    redis-cli -h 127.0.0.1 -p "$p" CLIENT LIST | grep -q 'addr=127\.0\.0\.1:' ||
        fail "IPv4 client seen as: $(redis-cli -h 127.0.0.1 -p "$p" CLIENT LIST)"
    kill "$started"
    wait "$started" 2>/dev/null
    echo "ok: --bind $order"
done
