# Sourced by the example checks written in bash (out_of_fds.sh,
# says_port.sh, ...): start_server <limit> <program> [<argument after the
# port>] starts a server example under `ulimit -n <limit>` on a port of its
# own (tried again while the port is in use) with its output in
# $log, and sets $pid and $port; it exits the check if none would start.
# ping_server: a new client sends "ping"; $reply is what came back
# within 5 s (the echo examples answer "ping").
# The server is killed when the check exits.
log=$(mktemp) || exit 1
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -f "$log"
}
trap cleanup EXIT

start_server() {
    local limit=$1 prog=$2 extra=$3 try
    for try in 1 2 3 4 5; do
        port=$((20000 + ($$ * 7 + try * 911) % 40000))
        (ulimit -n "$limit" && exec "$prog" "$port" $extra) >"$log" 2>&1 &
        pid=$!
        for _ in $(seq 50); do
            grep -q "127.0.0.1:$port" "$log" && return 0
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        # Still running, but it never said where: no other port helps.
        kill -0 "$pid" 2>/dev/null && break
        wait "$pid" 2>/dev/null
        pid=
    done
    cat "$log"
    echo "$(basename "$prog"): no \"127.0.0.1:$port\" line within 5 s"
    exit 1
}

ping_server() {
    local fd
    exec {fd}<>"/dev/tcp/127.0.0.1/$port" || exit 1
    printf 'ping' >&"$fd"
    reply=
    read -r -t 5 -n 4 -u "$fd" reply
    exec {fd}>&-
}
