#!/bin/bash
# dial to a server that accepts and hangs up without a word must fail: it
# exited 0, as if the reply had come. With "silent", the server keeps the
# connection open and says nothing: dial must give up after 5 s (it
# waited for ever). The server is python3's (exits 77, skipped, without
# it). Run by CTest as examples.dial_hangup_exits_1 and
# examples.dial_silent_server_exits_1.
#   bash dial_hangup.sh <dial program> [silent]
dial=$1 mode=${2:-hangup}
command -v python3 >/dev/null || { echo "skipped: no python3"; exit 77; }
coproc server {
    exec python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
s.settimeout(20)
c, _ = s.accept()
if sys.argv[1] == "silent":
    time.sleep(20)
c.close()
' "$mode"
}
read -r -t 5 port <&"${server[0]}" || { echo "no server"; exit 1; }
out=$("$dial" 127.0.0.1 "$port" 2>&1)
rc=$?
kill "$server_PID" 2>/dev/null
echo "$out"
echo "dial exited $rc"
want="closed the connection without answering"
[ "$mode" = silent ] && want="did not answer within 5 s"
[ "$rc" = 1 ] && echo "$out" | grep -q "$want"
