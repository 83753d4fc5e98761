#!/bin/bash
# A server example out of fds: it runs under `ulimit -n LIMIT`, more
# clients connect than it has fds for, and the connections it cannot
# accept wait in the backlog, keeping its listening socket readable. It
# must pause accepting, not spin on EMFILE (echo and reuseport took 100% of
# a CPU until a client left), and accept again once the clients have gone.
# Run by CTest as examples.<name>_out_of_fds_idles (bash: /dev/tcp).
#   bash out_of_fds.sh <program> <fd limit> [<argument after the port>]
prog=$1 limit=$2 extra=$3
. "$(dirname "$0")/start_server.sh"
start_server "$limit" "$prog" "$extra"

# Twice the fd limit of clients: most wait in the backlog.
fds=()
for _ in $(seq $((2 * limit))); do
    exec {fd}<>"/dev/tcp/127.0.0.1/$port" || exit 1
    fds+=("$fd")
done
sleep 0.5
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
before=$(cpu)
sleep 2
ticks=$(($(cpu) - before))
echo "out_of_fds: $((2 * limit)) clients at ulimit -n $limit: $ticks CPU ticks in 2 s"

# The clients leave; the server must serve a new one.
for fd in "${fds[@]}"; do exec {fd}>&-; done
ping_server
cat "$log"
if [ "$ticks" -ge 20 ]; then
    echo "out_of_fds: FAILED: the server spun while out of fds"
    exit 1
fi
if [ "$reply" != "ping" ]; then
    echo "out_of_fds: FAILED: no echo once fds were free again ('$reply')"
    exit 1
fi
echo "out_of_fds: idle while out of fds, then served again"
