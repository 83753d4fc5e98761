#!/bin/bash
# prefork's workers at their fd limit (prlimit lowers theirs to 24, the
# parent keeps its own): 40 clients connect at once, more than the workers
# have fds for. A worker must stop taking connections until some close,
# not read the next fd: one the kernel drops for want of an fd closes the
# worker's end (-EMFILE), and the worker is gone for good (both were, and
# every later client read EOF). Run by CTest as
# examples.prefork_workers_out_of_fds_survive (bash: /dev/tcp; skipped
# without prlimit).
#   bash worker_fds.sh <prefork program>
prog=$1
command -v prlimit >/dev/null || { echo "skipped: no prlimit"; exit 77; }
. "$(dirname "$0")/start_server.sh"
start_server 1024 "$prog"

read -r -a kids <"/proc/$pid/task/$pid/children"
for k in "${kids[@]}"; do prlimit --pid "$k" --nofile=24:24 || exit 1; done
fds=()
for i in $(seq 40); do
    exec {fd}<>"/dev/tcp/127.0.0.1/$port" || exit 1
    printf 'x' >&"$fd"
    fds+=("$fd")
done
sleep 1
for fd in "${fds[@]}"; do exec {fd}>&-; done
sleep 0.5
read -r -a left <"/proc/$pid/task/$pid/children"
ping_server
cat "$log"
echo "worker_fds: ${#left[@]} of ${#kids[@]} workers left; a new client got '$reply'"
[ "${#left[@]}" = "${#kids[@]}" ] && [ "$reply" = ping ]
