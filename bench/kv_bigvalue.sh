#!/bin/bash
# A large value's SET then GET, lull-kv beside redis-server: the time from
# the first byte of the SET to its +OK, and from the GET to the last byte
# of its answer, for values of 8, 16, 32 and 64 MiB (a client written for
# this, /usr/bin/python3, that builds each request before the clock
# starts and reads replies into a buffer of the right size), and the
# server's CPU time for the pair (all its threads, from
# /proc/PID/task/*/schedstat: ns, not ticks). The servers take turns
# (A B A B ...) and each figure is the median of ROUNDS runs, with min and
# max. Time linear in the size shows as a constant ms/MiB down a column.
#
#   bench/kv_bigvalue.sh [LULL_KV] [ROUNDS] [SIZES_MIB]
#   (defaults: build/release/kv/lull-kv, 5, "8 16 32 64")
set -eu

kv=${1:-build/release/kv/lull-kv}
rounds=${2:-5}
sizes=${3:-8 16 32 64}
py=/usr/bin/python3
for tool in redis-server "$py"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "kv_bigvalue: $tool not installed, nothing measured"
        exit 0
    fi
done
if [ ! -x "$kv" ]; then
    echo "kv_bigvalue: $kv missing (build first)" >&2
    exit 1
fi

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
"$kv" --port 7394 >/dev/null 2>&1 &
pids+=($!)
redis-server --port 7395 --save '' --appendonly no --io-threads 1 \
    >/dev/null 2>&1 &
pids+=($!)
sleep 0.5

"$py" - "$rounds" "$sizes" "${pids[0]}" "${pids[1]}" <<'PY'
import os, socket, statistics, sys, time

rounds = int(sys.argv[1])
sizes = [int(s) for s in sys.argv[2].split()]
servers = [("lull-kv", 7394, sys.argv[3]), ("redis-server", 7395, sys.argv[4])]

def cpu_ns(pid):
    total = 0
    for t in os.listdir("/proc/%s/task" % pid):
        with open("/proc/%s/task/%s/schedstat" % (pid, t)) as f:
            total += int(f.read().split()[0])
    return total

def read_exact(s, view):
    got = 0
    while got < len(view):
        n = s.recv_into(view[got:])
        if n == 0:
            raise SystemExit("server closed the connection")
        got += n

def one(port, pid, mib):
    v = b"v" * (mib << 20)
    setreq = b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$%d\r\n%s\r\n" % (len(v), v)
    getreq = b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n"
    want = b"$%d\r\n%s\r\n" % (len(v), v)
    buf = bytearray(len(want))
    s = socket.create_connection(("127.0.0.1", port))
    ok = bytearray(5)
    c0 = cpu_ns(pid)
    t0 = time.perf_counter()
    s.sendall(setreq)
    read_exact(s, memoryview(ok))
    t1 = time.perf_counter()
    s.sendall(getreq)
    read_exact(s, memoryview(buf))
    t2 = time.perf_counter()
    c1 = cpu_ns(pid)
    if bytes(ok) != b"+OK\r\n" or buf != want:
        raise SystemExit("wrong answer from port %d" % port)
    s.sendall(b"*2\r\n$3\r\nDEL\r\n$3\r\nbig\r\n")
    read_exact(s, memoryview(bytearray(4)))
    s.close()
    return (t1 - t0) * 1e3, (t2 - t1) * 1e3, (c1 - c0) / 1e6

res = {(n, m): [] for n, _, _ in servers for m in sizes}
for _ in range(rounds):
    for m in sizes:
        for name, port, pid in servers:
            res[(name, m)].append(one(port, pid, m))

def fmt(xs):
    return "%6.1f (%5.1f-%5.1f)" % (statistics.median(xs), min(xs), max(xs))

print("SET then GET of one value; ms, median of %d (min-max); servers "
      "alternating" % rounds)
print("%-13s %4s %21s %21s %21s %6s %21s %6s" % (
    "server", "MiB", "SET ms", "GET ms", "SET+GET ms", "ms/MiB",
    "server CPU ms", "ms/MiB"))
for m in sizes:
    for name, _, _ in servers:
        r = res[(name, m)]
        tot = [a + b for a, b, _ in r]
        cpu = [c for _, _, c in r]
        print("%-13s %4d %21s %21s %21s %6.2f %21s %6.2f" % (
            name, m, fmt([a for a, _, _ in r]), fmt([b for _, b, _ in r]),
            fmt(tot), statistics.median(tot) / m, fmt(cpu),
            statistics.median(cpu) / m))
    k = [res[("lull-kv", m)], res[("redis-server", m)]]
    t = [statistics.median([a + b for a, b, _ in x]) for x in k]
    c = [statistics.median([z for _, _, z in x]) for x in k]
    print("%-13s %4d lull-kv / redis-server: time %.2fx, server CPU %.2fx" % (
        "", m, t[0] / t[1], c[0] / c[1]))
PY
