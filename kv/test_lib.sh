# What kv/integration.sh, kv/access.sh and kv/shutdown.sh share: redis-cli
# (without it, one line and exit 0), a scratch directory, starting lull-kv
# and cleaning up after it. Sourced, with $kv (the lull-kv to run) set and
# TEST_NAME naming the scratch directory.

if ! command -v redis-cli >/dev/null 2>&1; then
    echo "skipped: redis-cli not installed (Debian package redis-tools)"
    exit 77
fi

dir=$(mktemp -d "/tmp/lull-kv-$TEST_NAME.XXXXXX")
pids=
netns=
cleanup() {
    # A process a case stopped (SIGSTOP) takes the TERM only once
    # continued; only those get a CONT, which also cancels a stop in
    # flight: the ptrace stop of a sanitizer's exit-time leak check, which
    # then waits for ever (seen under load, a cleanup just as a process
    # began to exit).
    for p in $pids; do
        kill "$p" 2>/dev/null || continue
        case $(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -d' ' -f1) in
        T) kill -CONT "$p" 2>/dev/null ;;
        esac
        wait "$p" 2>/dev/null
    done
    for n in $netns; do ip netns del "$n" 2>/dev/null; done
    rm -rf "$dir"
}
trap cleanup EXIT

# fail MESSAGE: says it, shows the tail of every server's output, exits.
fail() {
    echo "FAIL: $*"
    for f in "$dir"/*.out; do
        [ -s "$f" ] && echo "--- $(basename "$f"):" && tail -n 20 "$f"
    done
    exit 1
}

# eventually CMD...: runs CMD every 50 ms until it succeeds, for up to 5 s;
# its status is the last run's.
eventually() {
    for _ in $(seq 100); do
        "$@" && return 0
        sleep 0.05
    done
    return 1
}

# start NAME ARGS...: lull-kv with its output in $dir/NAME.out; sets
# $started (its pid), $started_port (its first address's port) and
# $started_tls (the TLS port, if any).
start() {
    local name=$1
    shift
    "$kv" "$@" >"$dir/$name.out" 2>&1 &
    started=$!
    pids="$pids $started"
    started_port=
    for _ in $(seq 200); do
        started_port=$(sed -n 's/^lull-kv: listening on [^ ]*:\([0-9]*\).*/\1/p' "$dir/$name.out" 2>/dev/null)
        if [ -n "$started_port" ]; then
            started_tls=$(sed -n 's/.* and tls [^ ]*:\([0-9]*\).*/\1/p' "$dir/$name.out" | head -1)
            return
        fi
        kill -0 "$started" 2>/dev/null || fail "lull-kv $name exited: $(cat "$dir/$name.out")"
        sleep 0.05
    done
    fail "lull-kv $name did not start"
}
