#!/usr/bin/env bash
# SIGTERM and SIGINT end lull-kv as they end redis-server: no more
# accepts, every connection closed, the --unix file removed, exit 0.
# A primary with a replica following, a subscriber, a client that asked
# for 20 MiB of replies and reads none of them, and one in the middle of
# a command: each sees EOF, the primary exits 0 within 5 s of SIGTERM
# (sent twice), its socket file is gone; the replica, its link down,
# goes on until its own SIGINT, which ends it the same way. A primary
# whose catch-up sender thread is stalled by a replica that stopped
# reading ends at once too; so does one whose log's reader is gone. The
# --unix path: a regular file or a live server's socket refused, a stale
# socket taken over, and at exit only this run's own file removed. A
# SIGINT ignored from the start stays ignored. With no fd left for the
# signalfd the signals keep their usual action; an abstract name ("@x")
# touches no file.
#   shutdown.sh <path to lull-kv>
# Prints one line and exits 0 when redis-cli is not installed.
set -u
kv=$1
TEST_NAME=shutdown
# shellcheck source=kv/test_lib.sh
. "$(dirname "$0")/test_lib.sh"

# gone PID: waits up to 5 s for PID to exit; its status in $status.
gone() {
    for _ in $(seq 100); do
        if ! kill -0 "$1" 2>/dev/null; then
            wait "$1"
            status=$?
            return 0
        fi
        sleep 0.05
    done
    return 1
}

start primary --port 0 --unix "$dir/kv.sock"
ppid_=$started
port=$started_port
[ -S "$dir/kv.sock" ] || fail "no socket file"
# The replica gets SIGINT: a background job of a script starts with it
# ignored, which exec keeps; env --default-signal gives it back.
printf '#!/bin/sh\nexec env --default-signal=INT "%s" "$@"\n' "$kv" >"$dir/kv-int"
chmod +x "$dir/kv-int"
kv=$dir/kv-int start replica --port 0 --replica-of "127.0.0.1:$port"
rpid=$started
rport=$started_port
link_up() { redis-cli -p "$rport" INFO replication | tr -d '\r' | grep -q '^master_link_status:up'; }
eventually link_up || fail "the replica's link did not come up"

head -c 1048576 /dev/zero | tr '\0' x >"$dir/big"
redis-cli -p "$port" -x SET big <"$dir/big" >/dev/null || fail "SET big"
has_big() { [ "$(redis-cli -p "$rport" STRLEN big)" = 1048576 ]; }
eventually has_big || fail "the replica did not get big"
# A subscriber, waiting.
redis-cli -p "$port" SUBSCRIBE news >"$dir/sub.out" 2>&1 &
sub=$!
pids="$pids $sub"
# A client that asks for 20 MiB and reads nothing; one half-way through
# a command.
exec 3<>"/dev/tcp/127.0.0.1/$port"
for _ in $(seq 20); do printf '*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n' >&3; done
exec 4<>"/dev/tcp/127.0.0.1/$port"
printf '*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100\r\nhalf' >&4
eventually grep -q subscribe "$dir/sub.out" || fail "the subscriber did not subscribe"
clients() { redis-cli -p "$port" INFO clients | tr -d '\r' | sed -n 's/^connected_clients://p'; }
three_more() { [ "$(clients)" -ge 4 ]; } # and the one asking (a replica is not a client)
eventually three_more || fail "connected clients: $(clients)"

kill -TERM "$ppid_"
kill -TERM "$ppid_" 2>/dev/null
gone "$ppid_" || fail "the primary did not exit within 5 s of SIGTERM"
[ "$status" = 0 ] || fail "the primary exited $status after SIGTERM"
grep -q "SIGTERM received: closing every connection and exiting" "$dir/primary.out" ||
    fail "no log line of the SIGTERM"
! grep -q "did not close\|still open" "$dir/primary.out" || fail "left open at exit"
[ ! -e "$dir/kv.sock" ] || fail "the socket file is still there"
gone "$sub" || fail "the subscriber did not see the close"
# Both raw clients see the end: EOF, or for the one whose requests were
# still unread a reset (the kernel's answer to a close with input
# pending); what the 20 GETs had queued is cut short.
timeout 5 cat <&3 >"$dir/unread" 2>/dev/null
[ $? != 124 ] || fail "the unread client saw no end"
got=$(wc -c <"$dir/unread")
[ "$got" -lt $((20 * 1048576)) ] || fail "all 20 MiB arrived after the close"
timeout 5 cat <&4 >/dev/null || fail "the half-command client saw no EOF"

# The replica lost its primary and goes on, then SIGINT ends it.
eventually bash -c "redis-cli -p $rport INFO replication | tr -d '\r' | grep -q '^master_link_status:down'" ||
    fail "the replica's link is not down"
[ "$(redis-cli -p "$rport" GET big | wc -c)" = 1048577 ] || fail "the replica's copy"
kill -INT "$rpid"
gone "$rpid" || fail "the replica did not exit within 5 s of SIGINT"
[ "$status" = 0 ] || fail "the replica exited $status after SIGINT"
grep -q "SIGINT received" "$dir/replica.out" || fail "no log line of the SIGINT"
# A primary whose catch-up sender thread is stuck writing to a replica
# that reads nothing of 200,000 keys: SIGTERM still ends it, at once.
start tprimary --port 0 --repl-catchup thread
tpid=$started
tport=$started_port
awk 'BEGIN {
    for (i = 0; i < 200000; i++) {
        k = "k:" i; v = sprintf("%0100d", i)
        printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, length(v), v
    }
}' | redis-cli -p "$tport" --pipe >"$dir/pipe.out" 2>&1
grep -q "errors: 0, replies: 200000" "$dir/pipe.out" || fail "--pipe: $(cat "$dir/pipe.out")"
# The replica is a socket that asks for the log from 0 and reads none of
# it (a real replica stopped with SIGSTOP could finish a fast catch-up
# before the stop): the sender fills the socket and waits.
exec 5<>"/dev/tcp/127.0.0.1/$tport"
printf '*4\r\n$8\r\nREPLSYNC\r\n$1\r\n?\r\n$1\r\n0\r\n$1\r\n0\r\n' >&5
linked() { redis-cli -p "$tport" INFO replication | tr -d '\r' | grep -q '^connected_slaves:1'; }
eventually linked || fail "the stalled replica's link did not start"
kill -TERM "$tpid"
gone "$tpid" || fail "the primary did not exit within 5 s of SIGTERM, its sender stalled"
[ "$status" = 0 ] || fail "the primary exited $status after SIGTERM, its sender stalled"
exec 5<&-

# The log's reader gone (stderr a pipe whose reader exited): the
# shutdown's log line fails to be written, and the shutdown goes on.
mkfifo "$dir/log"
"$kv" --port 0 --unix "$dir/p.sock" >"$dir/log" 2>&1 &
lpid=$!
pids="$pids $lpid"
read -r first <"$dir/log"
case $first in "lull-kv: listening on"*) ;; *) fail "first line: $first" ;; esac
kill -TERM "$lpid"
gone "$lpid" || fail "no exit after SIGTERM with its log's reader gone"
[ "$status" = 0 ] || fail "exit $status after SIGTERM with its log's reader gone"
[ ! -e "$dir/p.sock" ] || fail "the socket file stayed, its log's reader gone"

# The --unix path: a file there that is not a socket is refused and
# kept; a live server's socket is refused; at exit only this run's own
# socket file is removed, not one another server put there since.
echo "precious" >"$dir/file"
timeout 5 "$kv" --port 0 --unix "$dir/file" >"$dir/onfile.out" 2>&1
[ $? = 1 ] && grep -q "Address already in use" "$dir/onfile.out" ||
    fail "--unix over a regular file: $(cat "$dir/onfile.out")"
[ "$(cat "$dir/file")" = precious ] || fail "the regular file was touched"
start a --port 0 --unix "$dir/s.sock"
apid=$started
timeout 5 "$kv" --port 0 --unix "$dir/s.sock" >"$dir/busy.out" 2>&1
[ $? = 1 ] && grep -q "Address already in use" "$dir/busy.out" ||
    fail "--unix over a live server's socket: $(cat "$dir/busy.out")"
rm "$dir/s.sock"
start b --port 0 --unix "$dir/s.sock"
bpid=$started
bport=$started_port
kill -TERM "$apid"
gone "$apid" || fail "a did not exit"
[ "$status" = 0 ] || fail "a exited $status"
[ "$(redis-cli -s "$dir/s.sock" CONFIG GET port | tail -1)" = "$bport" ] ||
    fail "b's socket file was removed by a's exit"
# A stale socket file (nobody listens) is taken over.
kill -9 "$bpid"
wait "$bpid" 2>/dev/null
[ -S "$dir/s.sock" ] || fail "no stale file to take over"
start c --port 0 --unix "$dir/s.sock"
[ "$(redis-cli -s "$dir/s.sock" PING)" = PONG ] || fail "the stale file was not taken over"

# Started with SIGINT ignored (a background job of a script is), it
# keeps ignoring it; SIGTERM still ends it.
(
    trap '' INT
    exec "$kv" --port 0 >"$dir/ign.out" 2>&1
) &
ipid=$!
pids="$pids $ipid"
eventually grep -q "listening on" "$dir/ign.out" || fail "ign did not start"
kill -INT "$ipid"
sleep 0.3
kill -0 "$ipid" 2>/dev/null || fail "SIGINT ended a lull-kv started with it ignored"
kill -TERM "$ipid"
gone "$ipid" || fail "ign did not exit after SIGTERM"
[ "$status" = 0 ] || fail "ign exited $status"

exec 3<&- 4<&- # the raw clients' sockets, not for the servers below

# No fd left for the signalfd (as a sandbox refusing it would leave it):
# at the lowest fd limit lull-kv listens under, the signalfd, its last
# fd, cannot open; lull-kv says so, serves, and SIGTERM takes its usual
# action rather than being blocked and never read.
lim=
for n in $(seq 4 32); do
    (
        ulimit -n "$n"
        exec "$kv" --port 0 >"$dir/lim.out" 2>&1
    ) &
    lpid=$!
    pids="$pids $lpid"
    listening() { grep -q "listening on" "$dir/lim.out"; }
    exited() { ! kill -0 "$lpid" 2>/dev/null; }
    up_or_gone() { listening || exited; }
    eventually up_or_gone || fail "at ulimit -n $n: neither listening nor gone"
    if listening; then
        lim=$n
        break
    fi
    wait "$lpid" 2>/dev/null
done
[ -n "$lim" ] || fail "lull-kv listened under no fd limit up to 32"
grep -q "SIGINT and SIGTERM not watched (Too many open files)" "$dir/lim.out" ||
    fail "at ulimit -n $lim: $(cat "$dir/lim.out")"
sleep 0.2 # (no fd is left for a client either: it runs, serving none)
kill -0 "$lpid" 2>/dev/null || fail "at ulimit -n $lim it exited: $(cat "$dir/lim.out")"
kill -TERM "$lpid"
gone "$lpid" || fail "SIGTERM, unwatched, did not end it"
[ "$status" = 143 ] || fail "SIGTERM, unwatched: exit $status, not its usual action (143)"

# An abstract name ("@name") has no file: a file of that name in the
# working directory (here a stale socket) is neither taken over nor
# removed.
abs="@lull-kv-abs-$$"
start abs0 --port 0 --unix "$dir/$abs"
{ kill -9 "$started"; wait "$started"; } 2>/dev/null
[ -S "$dir/$abs" ] || fail "no stale socket named $abs"
(
    cd "$dir" || exit 1
    exec "$kv" --port 0 --unix "$abs" >"$dir/abs.out" 2>&1
) &
apid=$!
pids="$pids $apid"
eventually grep -q "listening on" "$dir/abs.out" || fail "abstract: $(cat "$dir/abs.out")"
kill -TERM "$apid"
gone "$apid" && [ "$status" = 0 ] || fail "abstract: exit $status"
[ -S "$dir/$abs" ] || fail "the file $abs was taken over or removed for an abstract name"

echo "shutdown: SIGTERM (twice) closed a subscriber, a replica's link, a client holding" \
    "$got of 20 MiB unread and one mid-command, removed the socket file, exit 0; SIGINT ended the replica, exit 0;" \
    "SIGTERM ended a primary whose sender thread was stalled by a stopped replica, exit 0;" \
    "its log's reader gone, exit 0; --unix refused over a file and a live socket, a stale one taken over," \
    "another server's file kept at exit; an inherited ignored SIGINT stays ignored;" \
    "at ulimit -n $lim, signals unwatched, said, and SIGTERM's usual action; an abstract name touches no file"
