#!/bin/bash
# dial to a server that accepts and hangs up without a word must fail: it
# exited 0, as if the reply had come. The server is python3's (exits 77,
# skipped, without it). Run by CTest as examples.dial_hangup_exits_1.
#   bash dial_hangup.sh <dial program>
dial=$1
command -v python3 >/dev/null || { echo "skipped: no python3"; exit 77; }
coproc server {
    exec python3 -c '
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
s.settimeout(20)
c, _ = s.accept()
c.close()
'
}
read -r -t 5 port <&"${server[0]}" || { echo "no server"; exit 1; }
out=$("$dial" 127.0.0.1 "$port" 2>&1)
rc=$?
echo "$out"
echo "dial exited $rc"
[ "$rc" = 1 ] && echo "$out" | grep -q "closed the connection without answering"
