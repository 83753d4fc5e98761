#!/usr/bin/env bash
# lull-kv against what real clients and peers do, one case per run (each
# its own ctest entry, kv.clients.CASE):
#   reset_peer_named  a TCP client that sent a request and reset before
#                     lull-kv accepted it is named "?:0" in the log, as
#                     Redis names it (it was "unix")
#   clients.sh <path to lull-kv> <case>
# Prints one line and exits 0 when redis-cli (or the case's python3) is
# not installed.
set -u
kv=$1
case_name=$2
TEST_NAME=clients
# shellcheck source=kv/test_lib.sh
. "$(dirname "$0")/test_lib.sh"

need_python() {
    command -v python3 >/dev/null 2>&1 && return 0
    echo "skipped: python3 not installed"
    exit 0
}

case_reset_peer_named() {
    need_python
    start p --port 0 --requirepass pw
    local pid=$started
    # Stopped, lull-kv cannot accept: the connection waits in the
    # backlog, and its RST arrives before accept4 takes it. Its request is
    # still read (and its AUTH fails, a log line naming the client).
    kill -STOP "$pid"
    python3 - "$started_port" <<'PY'
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"AUTH wrong\r\n")
s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
s.close()
PY
    kill -CONT "$pid"
    said() { grep -q 'AUTH failed' "$dir/p.out"; }
    eventually said || fail "no AUTH failed line"
    # Named as Redis names a peer without an address, not "unix".
    grep -q '^lull-kv: client ?:0: AUTH failed$' "$dir/p.out" ||
        fail "the reset TCP client misnamed: $(grep 'AUTH failed' "$dir/p.out")"
    [ "$(redis-cli -p "$started_port" -a pw --no-auth-warning PING)" = PONG ] ||
        fail "PING after the reset client"
}

declare -F "case_$case_name" >/dev/null || fail "no case $case_name"
"case_$case_name"
echo "ok: $case_name"
