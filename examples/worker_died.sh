#!/bin/bash
# prefork with one of its workers killed: every new client must still be
# served, by the worker left (the parent kept handing every other
# connection to the dead one, and those clients got EOF). Run by CTest as
# examples.prefork_worker_died_others_serve (bash: /dev/tcp).
#   bash worker_died.sh <prefork program>
prog=$1
. "$(dirname "$0")/start_server.sh"
start_server 1024 "$prog"

read -r -a kids <"/proc/$pid/task/$pid/children"
kill -KILL "${kids[0]}"
sleep 0.5 # the parent sees the worker's end close
served=0
for i in 1 2 3 4 5 6; do
    exec {fd}<>"/dev/tcp/127.0.0.1/$port" || exit 1
    printf 'ping%s' "$i" >&"$fd"
    reply=
    read -r -t 3 -n 5 -u "$fd" reply
    exec {fd}>&-
    [ "$reply" = "ping$i" ] && served=$((served + 1))
done
cat "$log"
echo "worker_died: $served of 6 clients served after worker pid ${kids[0]} was killed"
[ "$served" = 6 ]
