#!/bin/bash
# A server example and a client that sends and never reads: the server's
# replies cannot leave, so it must stop reading that client rather than
# queue what it sends (prefork's workers queued 3 GB in 6 s). The client
# sends 256 MB for up to 3 s; the server and its children must stay under
# 64 MB of memory each. Run by CTest as examples.<name>_slow_reader_bounded
# (bash: /dev/tcp).
#   bash slow_reader.sh <program>
prog=$1
. "$(dirname "$0")/start_server.sh"
start_server 1024 "$prog"

exec {fd}<>"/dev/tcp/127.0.0.1/$port" || exit 1
timeout 3 head -c 256000000 /dev/zero >&"$fd"
sleep 0.5 # what was sent has arrived
worst=0
for p in "$pid" $(cat /proc/"$pid"/task/*/children); do
    kb=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status")
    [ "${kb:-0}" -gt "$worst" ] && worst=$kb
done
exec {fd}>&-
cat "$log"
echo "slow_reader: the largest process holds $((worst / 1024)) MB"
if [ "$worst" -ge $((64 * 1024)) ]; then
    echo "slow_reader: FAILED: the server queued what it could not send"
    exit 1
fi
echo "slow_reader: the server stopped reading a client that does not read"
