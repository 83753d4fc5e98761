#!/usr/bin/env bash
# lull-kv's access options, checked with redis-cli, redis-py and raw
# sockets against redis-server where the bytes can be compared (CTest
# kv.access, label kv):
#   --bind: several addresses, IPv6 ::1, one port; a listener shut down
#     from outside (ss -K) logged, and with none left lull-kv exits 1;
#   --requirepass / AUTH: each reply byte for byte as redis-server 7's,
#     one log line per failed AUTH with the client's address; AUTH
#     queued inside MULTI and run by EXEC; redis-py
#     with a password; --masterauth: a replica that AUTHs syncs, one with
#     the wrong password logs the refusal and gets nothing;
#   CONFIG GET of these options (names, patterns, several at once)
#     against a redis-server started with the same ones;
#   protected mode: a client from a non-loopback address (a veth pair
#     between two network namespaces made here, 10.200.0.0/30) refused
#     with Redis' -DENIED text, and served with --protected-mode no or a
#     password (needs root and `ip netns`);
#   TLS: redis-cli --tls and redis-py ssl=True beside the plaintext port,
#     certificates made at test time with openssl; a plaintext client on
#     the TLS port closed with a logged reason; a client of a wrong CA, and
#     one without a certificate under --tls-auth-clients yes, refused;
#     --tls-auth-clients no; 5,000 keys replicated over TLS with AUTH,
#     the replica's keyspace then equal to the primary's.
# Each part missing a tool prints "skipped: ..." and the rest runs.
#   access.sh <path to lull-kv>
set -u
kv=$1
# The system's python3, where python3-redis is.
py=/usr/bin/python3
[ -x $py ] || py=$(command -v python3) || {
    echo "skipped: python3 not installed"
    exit 0
}
python3() { "$py" "$@"; }
TEST_NAME=access
# shellcheck source=kv/test_lib.sh
. "$(dirname "$0")/test_lib.sh"

# A free TCP port (for options that take no 0).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# raw PORT BYTES [HOST]: sends BYTES (with \r\n escapes) on one connection
# and prints what came back (Python's repr): up to 3 s for the first byte
# (a loaded machine, a sanitizer's build), then until 0.2 s of quiet or EOF.
cat >"$dir/raw.py" <<'PY'
import socket, sys
host = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1"
s = socket.create_connection((host, int(sys.argv[1])))
s.sendall(sys.argv[2].encode().decode("unicode_escape").encode("latin-1"))
s.settimeout(3)
out = b""
try:
    while True:
        d = s.recv(65536)
        if not d:
            break
        out += d
        s.settimeout(0.2)
except OSError:
    pass
print(repr(out))
PY
raw() { python3 "$dir/raw.py" "$@"; }

# ------------------------------------------------------------------ bind
have_v6=$(python3 -c 'import socket
try:
    s = socket.socket(socket.AF_INET6); s.bind(("::1", 0)); print(1)
except OSError:
    print(0)')
if [ "$have_v6" = 1 ]; then
    start bind --port 0 --bind 127.0.0.1 ::1 127.0.0.2
    [ "$(redis-cli -h ::1 -p "$started_port" PING)" = PONG ] || fail "PING on ::1"
else
    echo "skipped: --bind ::1 (no IPv6 loopback here)"
    start bind --port 0 --bind 127.0.0.1 127.0.0.2
fi
bport=$started_port
[ "$(redis-cli -h 127.0.0.1 -p "$bport" SET k v)" = OK ] || fail "SET on 127.0.0.1"
[ "$(redis-cli -h 127.0.0.2 -p "$bport" GET k)" = v ] || fail "GET on 127.0.0.2"
grep -q "listening on 127.0.0.1:$bport and " "$dir/bind.out" || fail "listening line: $(cat "$dir/bind.out")"
# An address not bound is not listened on.
redis-cli -h 127.0.0.3 -p "$bport" PING >/dev/null 2>&1 && fail "127.0.0.3 answered"
start bindone --port 0 --bind 127.0.0.2
redis-cli -h 127.0.0.1 -p "$started_port" PING >/dev/null 2>&1 && fail "--bind 127.0.0.2 answered on 127.0.0.1"
[ "$(redis-cli -h 127.0.0.2 -p "$started_port" PING)" = PONG ] || fail "PING on the one bound address"
"$kv" --bind >/dev/null 2>&1 && fail "--bind without an address accepted"
"$kv" --port 0 --bind 300.1.1.1 >"$dir/badbind.out" 2>&1 && fail "--bind 300.1.1.1 started"
echo "ok: --bind"

# A listening socket shut down from outside (`ss -K`, where the kernel
# can destroy sockets): lull-kv logs it and serves on the address left;
# when none is left it says so and exits 1, where it once ran on, unseen.
can_kill_listener() {
    python3 - <<'PY'
import socket, subprocess, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
port = s.getsockname()[1]
r = subprocess.run(["ss", "-K", "-t", "state", "listening", "src",
                    "127.0.0.1:%d" % port], capture_output=True)
s.setblocking(False)
try:
    s.accept()
except OSError as e:
    sys.exit(0 if e.errno == 22 else 1)
sys.exit(1)
PY
}
if ! command -v ss >/dev/null 2>&1 || ! can_kill_listener; then
    echo "skipped: a listener shut down from outside (ss -K cannot destroy a listening socket here)"
else
    start lost --port 0 --bind 127.0.0.1 127.0.0.2
    lport=$started_port
    lpid=$started
    ss -K -t state listening src "127.0.0.1:$lport" >/dev/null
    eventually grep -q "^lull-kv: stopped accepting on 127.0.0.1:$lport: Invalid argument$" "$dir/lost.out" ||
        fail "a listener shut down: not logged"
    [ "$(redis-cli -h 127.0.0.2 -p "$lport" PING)" = PONG ] || fail "PING on the address left"
    kill -0 "$lpid" || fail "lull-kv exited with an address left"
    ss -K -t state listening src "127.0.0.2:$lport" >/dev/null
    for _ in $(seq 100); do kill -0 "$lpid" 2>/dev/null || break; sleep 0.05; done
    kill -0 "$lpid" 2>/dev/null && fail "lull-kv runs on with no address to accept on"
    wait "$lpid"
    [ $? = 1 ] || fail "lull-kv's exit status with no address left: not 1"
    grep -q "^lull-kv: no address left to accept on: stopping$" "$dir/lost.out" ||
        fail "no address left: not logged"
    echo "ok: a listener shut down from outside"
fi

# ------------------------------------------------------------------ AUTH
start auth --port 0 --requirepass 's3cret pass'
aport=$started_port
start noauth --port 0
nport=$started_port
have_redis=0
if command -v redis-server >/dev/null 2>&1; then
    rport=$(free_port)
    rnport=$(free_port)
    redis-server --port "$rport" --save '' --appendonly no --requirepass 's3cret pass' >"$dir/redis.log" 2>&1 &
    pids="$pids $!"
    redis-server --port "$rnport" --save '' --appendonly no >"$dir/redisn.log" 2>&1 &
    pids="$pids $!"
    eventually redis-cli -p "$rport" -a 's3cret pass' --no-auth-warning PING >/dev/null 2>&1 ||
        fail "redis-server did not start"
    eventually redis-cli -p "$rnport" PING >/dev/null 2>&1 || fail "redis-server did not start"
    have_redis=1
else
    echo "skipped: byte comparison with redis-server (not installed)"
fi
# Each request, on a fresh connection, to lull-kv and (when there) to
# redis-server: the same bytes back. AUTH inside MULTI is queued and runs
# from EXEC (its failure an element of EXEC's reply), a refused EXEC is
# Redis' -EXECABORT ... NOAUTH, and a subscribed client is refused AUTH. "password-only" marks a request
# compared with requirepass only (lull-kv has no HELLO otherwise).
while IFS= read -r req; do
    [ -z "$req" ] && continue
    only=0
    case $req in password-only\ *) only=1 req=${req#password-only } ;; esac
    got=$(raw "$aport" "$req")
    gotn=$(raw "$nport" "$req")
    if [ $have_redis = 1 ]; then
        want=$(raw "$rport" "$req")
        wantn=$(raw "$rnport" "$req")
        [ "$got" = "$want" ] || fail "with requirepass, $req: $got, redis-server: $want"
        [ $only = 1 ] || [ "$gotn" = "$wantn" ] || fail "without requirepass, $req: $gotn, redis-server: $wantn"
    fi
done <<'REQ'
PING\r\n
GET k\r\n
AUTH\r\n
AUTH wrong\r\n
AUTH default wrong\r\n
AUTH bob s3cret pass\r\n
*2\r\n$4\r\nAUTH\r\n$11\r\ns3cret pass\r\nPING\r\n
*3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$11\r\ns3cret pass\r\nSET a 1\r\nGET a\r\n
*2\r\n$4\r\nAUTH\r\n$11\r\ns3cret PASS\r\nPING\r\n
AUTH a b c\r\n
QUIT\r\n
password-only HELLO\r\n
password-only HELLO 2\r\n
password-only HELLO 2 SETNAME x\r\n
RESET\r\n
*2\r\n$4\r\nAUTH\r\n$11\r\ns3cret pass\r\nRESET\r\nPING\r\n
*2\r\n$4\r\nAUTH\r\n$11\r\ns3cret pass\r\nSUBSCRIBE x\r\nRESET\r\nPING\r\n
*2\r\n$4\r\nAUTH\r\n$11\r\ns3cret pass\r\nMULTI\r\nSET r 1\r\nRESET\r\nEXEC\r\n
HELLO 1\r\n
HELLO abc\r\n
HELLO 2 FOO\r\n
HELLO 2 AUTH default\r\n
password-only HELLO 2 AUTH default wrong\r\n
HELLO 2 AUTH bob x SETNAME y\r\n
MULTI\r\n
AUTH wrong\r\nPING\r\nauth wrong\r\n
EXEC\r\n
MULTI\r\nAUTH wrong\r\nPING\r\nEXEC\r\nPING\r\n
MULTI\r\n*2\r\n$4\r\nAUTH\r\n$11\r\ns3cret pass\r\nEXEC\r\nPING\r\n
*2\r\n$4\r\nAUTH\r\n$11\r\ns3cret pass\r\nMULTI\r\nAUTH wrong\r\nPING\r\nEXEC\r\nPING\r\n
*2\r\n$4\r\nAUTH\r\n$11\r\ns3cret pass\r\nMULTI\r\n*2\r\n$4\r\nAUTH\r\n$11\r\ns3cret pass\r\nAUTH default x\r\nAUTH\r\nEXEC\r\nPING\r\n
*2\r\n$4\r\nAUTH\r\n$11\r\ns3cret pass\r\nMULTI\r\nAUTH a b c\r\nAUTH bob x\r\n*3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$11\r\ns3cret pass\r\nEXEC\r\nPING\r\n
*2\r\n$4\r\nAUTH\r\n$11\r\ns3cret pass\r\nMULTI\r\nSET mq 1\r\nAUTH x\r\nDISCARD\r\nGET mq\r\n
*2\r\n$4\r\nAUTH\r\n$11\r\ns3cret pass\r\nMULTI\r\nAUTH x\r\nMULTI\r\nEXEC\r\n
*2\r\n$4\r\nAUTH\r\n$11\r\ns3cret pass\r\nSUBSCRIBE x\r\nAUTH x\r\nAUTH\r\nPING\r\n
REQ
[ "$(raw "$aport" 'PING\r\n')" = "b'-NOAUTH Authentication required.\\r\\n'" ] || fail "NOAUTH: $(raw "$aport" 'PING\r\n')"
# HELLO's AUTH option signs the client in (its map differs from
# redis-server's in the version and id, so it is not compared).
got=$(raw "$aport" '*7\r\n$5\r\nHELLO\r\n$1\r\n2\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$11\r\ns3cret pass\r\n$7\r\nSETNAME\r\n$1\r\nh\r\nCLIENT GETNAME\r\n')
case $got in
"b'*14\\r\\n\$6\\r\\nserver\\r\\n"*"\$1\\r\\nh\\r\\n'") ;;
*) fail "HELLO 2 AUTH default <pass> SETNAME h, CLIENT GETNAME: $got" ;;
esac
# One log line per failed AUTH, with the client's address.
before=$(grep -c 'AUTH failed' "$dir/auth.out")
for _ in 1 2 3 4 5; do raw "$aport" 'AUTH nope\r\n' >/dev/null; done
after=$(grep -c 'AUTH failed' "$dir/auth.out")
[ $((after - before)) = 5 ] || fail "5 failed AUTHs logged $((after - before)) lines"
grep -q '^lull-kv: client 127\.0\.0\.1:[0-9]*: AUTH failed$' "$dir/auth.out" || fail "AUTH failure line"
# 1,000 failures pipelined on one connection: answered, and the server
# lives on.
python3 -c 'import sys; sys.stdout.write("AUTH nope\r\n" * 1000)' >"$dir/many"
[ "$(redis-cli -p "$aport" <"$dir/many" 2>&1 | grep -c WRONGPASS)" = 1000 ] || fail "1,000 WRONGPASS"
# A failed AUTH run from EXEC is logged too.
after=$(grep -c 'AUTH failed' "$dir/auth.out")
raw "$aport" '*2\r\n$4\r\nAUTH\r\n$11\r\ns3cret pass\r\nMULTI\r\nAUTH nope\r\nEXEC\r\n' >/dev/null
[ $(($(grep -c 'AUTH failed' "$dir/auth.out") - after)) = 1 ] || fail "a failed AUTH inside EXEC not logged"
[ "$(redis-cli -p "$aport" -a 's3cret pass' --no-auth-warning PING)" = PONG ] || fail "redis-cli -a"
[ "$(redis-cli -p "$aport" --user default --pass 's3cret pass' --no-auth-warning PING)" = PONG ] || fail "redis-cli --user"
if python3 -c 'import redis' 2>/dev/null; then
    python3 - "$aport" <<'PY' || fail "redis-py with a password"
import sys, redis
port = int(sys.argv[1])
r = redis.Redis(port=port, password="s3cret pass")
assert r.set("py", "x") and r.get("py") == b"x"
# redis-py's exception classes for these vary by version: the words do
# not.
for password, words in (("bad", "WRONGPASS"), (None, "Authentication required")):
    try:
        redis.Redis(port=port, password=password).get("py")
        sys.exit("password %r was accepted" % password)
    except redis.exceptions.RedisError as e:
        assert words in str(e), str(e)
PY
else
    echo "skipped: redis-py parts (python3-redis not installed)"
fi
echo "ok: --requirepass and AUTH"

# ---------------------------------------------------------- CONFIG GET
# CONFIG GET for the access options (and the limits), against a
# redis-server started with the same options: each parameter lull-kv
# has answers as redis-server's does, under the same name, with the same
# value; a pattern's answer is redis-server's restricted to the
# parameters lull-kv has (Redis has some 190 more, and answers in its
# hash table's order: compared as maps). The ports are each server's own.
#   config.py LULL-PORT LULL-TLS-PORT REDIS-PORT REDIS-TLS-PORT PASSWORD
#   (requests on stdin, one a line: CONFIG GET's arguments)
cat >"$dir/config.py" <<'PY'
import socket, sys
lport, ltls, rport, rtls, pw = sys.argv[1:6]
def conn(port):
    s = socket.create_connection(("127.0.0.1", int(port)))
    f = s.makefile("rb")
    if pw:
        ask(s, f, ["AUTH", pw])
    return s, f
def ask(s, f, args):
    s.sendall(b"*%d\r\n" % len(args) + b"".join(
        b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in args))
    return read(f)
def read(f):
    line = f.readline()
    if line[:1] == b"*":
        return [read(f) for _ in range(int(line[1:]))]
    if line[:1] == b"$":
        n = int(line[1:])
        return f.read(n + 2)[:-2].decode() if n >= 0 else None
    return line.decode().rstrip("\r\n")
def pairs(reply, port, tls):
    if not isinstance(reply, list):
        return reply
    d = {}
    for n, v in zip(reply[::2], reply[1::2]):
        assert n not in d, "%s twice" % n
        if n.lower() == "port" and v == port: v = "<port>"
        if n.lower() == "tls-port" and v == tls: v = "<tls-port>"
        # a number each: Redis' configured, lull-kv's from RLIMIT_NOFILE
        if n.lower() == "maxclients" and v.isdigit(): v = "<maxclients>"
        d[n] = v
    return d
l, r = conn(lport), conn(rport)
known = set(pairs(ask(*l, ["CONFIG", "GET", "*"]), lport, ltls))
bad = n = 0
for line in sys.stdin:
    args = line.split()
    x = pairs(ask(*l, ["CONFIG", "GET"] + args), lport, ltls)
    y = pairs(ask(*r, ["CONFIG", "GET"] + args), rport, rtls)
    if isinstance(y, dict):
        y = {k: v for k, v in y.items() if k.lower() in known}
    n += 1
    if x != y:
        bad += 1
        print("CONFIG GET %s: lull-kv %r, redis-server %r" % (line.strip(), x, y))
print("%d requests, %d differ" % (n, bad))
sys.exit(1 if bad else 0)
PY
config_requests='port
PORT
Port
bind
requirepass
masterauth
protected-mode
tls-port
tls-cert-file
tls-key-file
tls-ca-cert-file
tls-auth-clients
tls-replication
unixsocket
replicaof
slaveof
proto-max-bulk-len
client-query-buffer-limit
client-output-buffer-limit
maxmemory-clients
save
appendonly
*
tls-*
*pass*
*port
BIND*
*auth*
[pr]*
?ind
*of
port PORT
p*rt PORT
PORT p*rt
port tls-port bind requirepass masterauth
TLS-* tls-port
nosuch
'
# lull-kv's defaults that are not Redis' (docs/KV.md): a normal client's
# replies are held to 1gb, as a reply is built whole (and maxmemory-clients,
# below). The redis-servers whose CONFIG GET is compared are given them.
obl=(--client-output-buffer-limit 'normal 1gb 0 0')
# redis_start NAME ARGS...: a redis-server on a free port ($rs_port).
redis_start() {
    local name=$1
    shift
    rs_port=$(free_port)
    redis-server --port "$rs_port" --save '' --appendonly no "${obl[@]}" "$@" >"$dir/$name.log" 2>&1 &
    pids="$pids $!"
    eventually redis_up "$rs_port" || fail "redis-server $name did not start: $(tail -3 "$dir/$name.log")"
}
redis_up() { redis-cli -p "$1" PING 2>/dev/null | grep -q -E 'PONG|NOAUTH'; }
if [ $have_redis = 1 ]; then
    copts=(--bind 127.0.0.1 127.0.0.2 --requirepass 'p w' --masterauth 'm a' --protected-mode no)
    start cfg --port 0 "${copts[@]}"
    # And maxmemory-clients: lull-kv's is a quarter of the memory it may
    # use (Redis' 0, none), given to the redis-servers as lull-kv says it.
    mmc=$(redis-cli -p "$started_port" --user default --pass 'p w' --no-auth-warning CONFIG GET maxmemory-clients | tail -1)
    case $mmc in '' | *[!0-9]*) fail "CONFIG GET maxmemory-clients: '$mmc'" ;; esac
    obl+=(--maxmemory-clients "$mmc")
    redis_start rcfg "${copts[@]}"
    printf '%s' "$config_requests" | python3 "$dir/config.py" "$started_port" 0 "$rs_port" 0 'p w' >"$dir/config.res" ||
        fail "CONFIG GET differs from redis-server's: $(cat "$dir/config.res")"
    # Defaults, and a replica's replicaof (of a port nobody listens on).
    nobody=$(free_port)
    start cfgr --port 0 --replica-of "127.0.0.1:$nobody"
    redis_start rcfgr --bind 127.0.0.1 --replicaof 127.0.0.1 "$nobody"
    printf '%s' "$config_requests" | python3 "$dir/config.py" "$started_port" 0 "$rs_port" 0 '' >"$dir/config.res" ||
        fail "CONFIG GET (defaults, a replica) differs from redis-server's: $(cat "$dir/config.res")"
    raw "$started_port" 'CONFIG GET\r\nCONFIG\r\n' >"$dir/cfgerr.l"
    raw "$rs_port" 'CONFIG GET\r\nCONFIG\r\n' >"$dir/cfgerr.r"
    cmp -s "$dir/cfgerr.l" "$dir/cfgerr.r" || fail "CONFIG's errors: $(cat "$dir/cfgerr.l") and $(cat "$dir/cfgerr.r")"
    echo "ok: CONFIG GET"
else
    echo "skipped: CONFIG GET against redis-server (not installed)"
fi
start cfgu --port 0 --unix "$dir/kv.sock"
[ "$(redis-cli -p "$started_port" CONFIG GET unixsocket | tail -1)" = "$dir/kv.sock" ] ||
    fail "CONFIG GET unixsocket: $(redis-cli -p "$started_port" CONFIG GET unixsocket)"

# --masterauth: a replica with the password syncs; one without, or with
# the wrong one, is refused and says so.
awk 'BEGIN { for (i = 0; i < 2000; i++) printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length("m:" i), "m:" i, length("v" i), "v" i }' >"$dir/mass"
redis-cli -p "$aport" -a 's3cret pass' --no-auth-warning --pipe <"$dir/mass" >/dev/null || fail "--pipe with AUTH"
start rgood --port 0 --replica-of "127.0.0.1:$aport" --masterauth 's3cret pass'
rg=$started_port
start rbad --port 0 --replica-of "127.0.0.1:$aport" --masterauth wrong
rb=$started_port
start rnone --port 0 --replica-of "127.0.0.1:$aport"
keys() { redis-cli -p "$aport" -a 's3cret pass' --no-auth-warning DBSIZE; }
synced_good() { [ "$(redis-cli -p "$rg" DBSIZE)" = "$(keys)" ]; }
eventually synced_good || fail "replica with --masterauth: $(redis-cli -p "$rg" DBSIZE) keys of $(keys)"
eventually grep -q 'refused AUTH: -WRONGPASS' "$dir/rbad.out" || fail "wrong --masterauth not logged"
eventually grep -q 'refused: NOAUTH' "$dir/rnone.out" || fail "a replica without --masterauth not logged"
[ "$(redis-cli -p "$rb" DBSIZE)" = 0 ] || fail "a replica with the wrong password got keys"
echo "ok: --masterauth"

# -------------------------------------------------------- protected mode
# A client from a non-loopback address needs a second host: two network
# namespaces made here, joined by a veth pair (10.200.0.1 the server's,
# 10.200.0.2 the client's), reaching nothing outside, deleted at exit.
ns_ok=0
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null 2>&1; then
    s_ns=lullkvs$$
    c_ns=lullkvc$$
    if ip netns add $s_ns 2>/dev/null; then
        netns="$s_ns"
        if ip netns add $c_ns 2>/dev/null; then
            netns="$netns $c_ns"
            ip link add lkvs$$ netns $s_ns type veth peer name lkvc$$ netns $c_ns 2>/dev/null &&
                ip -n $s_ns addr add 10.200.0.1/30 dev lkvs$$ &&
                ip -n $c_ns addr add 10.200.0.2/30 dev lkvc$$ &&
                ip -n $s_ns link set lkvs$$ up && ip -n $c_ns link set lkvc$$ up &&
                ip -n $s_ns link set lo up && ip -n $c_ns link set lo up && ns_ok=1
        fi
    fi
fi
if [ $ns_ok = 1 ]; then
    # in_s / in_c CMD...: CMD in the server's / the client's namespace.
    in_s() { ip netns exec $s_ns "$@"; }
    in_c() { ip netns exec $c_ns "$@"; }
    eventually in_c ping -c1 -W1 10.200.0.1 >/dev/null 2>&1 || true
    started_in_s() {
        local name=$1
        shift
        ip netns exec $s_ns "$kv" "$@" >"$dir/$name.out" 2>&1 &
        started=$!
        pids="$pids $started"
        for _ in $(seq 200); do
            grep -q "listening on" "$dir/$name.out" 2>/dev/null && return
            sleep 0.05
        done
        fail "lull-kv $name did not start in $s_ns"
    }
    started_in_s prot --port 7000 --bind 10.200.0.1 127.0.0.1
    got=$(in_c "$py" "$dir/raw.py" 7000 'PING\r\n' 10.200.0.1)
    if command -v redis-server >/dev/null 2>&1; then
        ip netns exec $s_ns redis-server --port 7001 --bind 10.200.0.1 127.0.0.1 --save '' --appendonly no >"$dir/redisp.log" 2>&1 &
        pids="$pids $!"
        eventually in_s redis-cli -p 7001 PING >/dev/null 2>&1 || fail "redis-server in $s_ns"
        want=$(in_c "$py" "$dir/raw.py" 7001 'PING\r\n' 10.200.0.1)
        [ "$got" = "$want" ] || fail "protected mode: $got, redis-server: $want"
    fi
    # (Python's repr quotes it with " : the text holds a '.)
    case $got in b?"-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user."*"from the outside.\\r\\n"?) ;;
        *) fail "protected mode answered $got" ;;
    esac
    grep -q '^lull-kv: client 10\.200\.0\.2:[0-9]*: refused by protected mode; connection closed$' "$dir/prot.out" ||
        fail "protected mode's refusal not logged"
    [ "$(in_s redis-cli -p 7000 PING)" = PONG ] || fail "loopback refused in protected mode"
    started_in_s unprot --port 7002 --bind 10.200.0.1 --protected-mode no
    got=$(in_c "$py" "$dir/raw.py" 7002 'PING\r\n' 10.200.0.1)
    [ "$got" = "b'+PONG\\r\\n'" ] || fail "--protected-mode no answered $got"
    started_in_s protpass --port 7003 --bind 10.200.0.1 --requirepass pw
    got=$(in_c "$py" "$dir/raw.py" 7003 'PING\r\nAUTH pw\r\nPING\r\n' 10.200.0.1)
    [ "$got" = "b'-NOAUTH Authentication required.\\r\\n+OK\\r\\n+PONG\\r\\n'" ] ||
        fail "protected mode with a password answered $got"
    echo "ok: protected mode"
else
    echo "skipped: protected mode (needs root and ip netns to make a non-loopback client)"
fi

# forty_pings PORT [retake]: 40 clients connect at once and PING; prints
# each distinct answer with its count. With "retake", once they close, a
# new client must find a place within 5 s (else "no place freed").
forty_pings() {
    python3 - "$@" <<'PY'
import socket, sys, time
port = int(sys.argv[1])
conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(40)]
seen = {}
for c in conns:
    c.settimeout(5)
    c.sendall(b"PING\r\n")
    r = c.recv(100)
    seen[r] = seen.get(r, 0) + 1
for c in conns:
    c.close()
for _ in range(100 if sys.argv[2:] == ["retake"] else 0):
    time.sleep(0.05)
    c = socket.create_connection(("127.0.0.1", port))
    c.settimeout(5)
    c.sendall(b"PING\r\n")
    if c.recv(100) == b"+PONG\r\n":
        break
else:
    if sys.argv[2:] == ["retake"]:
        seen[b"no place freed"] = 1
print(sorted(seen.items()))
PY
}

# ------------------------------------------------------------ maxclients
# Under RLIMIT_NOFILE 64, 32 descriptors and the listening socket's are
# the server's own: 32 clients are served and the rest answered Redis'
# error and closed (they waited in the listen backlog, unanswered, once
# accept ran out of descriptors), with one log line; a freed place is
# taken again.
real_kv=$kv
kv_limited() { ulimit -n 64 && exec "$real_kv" "$@"; }
kv=kv_limited
start fds --port 0
kv=$real_kv
fport=$started_port
got=$(forty_pings "$fport" retake)
[ "$got" = "[(b'+PONG\\r\\n', 32), (b'-ERR max number of clients reached\\r\\n', 8)]" ] ||
    fail "40 clients under ulimit -n 64: $got"
[ "$(grep -c 'max number of clients reached (32)' "$dir/fds.out")" = 1 ] || fail "maxclients log line"
# Every refusal is counted where Redis counts it (8, and any retry above
# that found the place not freed yet).
rejected=$(redis-cli -p "$fport" INFO stats | tr -d '\r' | sed -n 's/^rejected_connections://p')
[ "${rejected:-0}" -ge 8 ] || fail "INFO rejected_connections after 8 refused: '$rejected'"
# The bound is read as Redis' is, by name.
[ "$(redis-cli -p "$fport" CONFIG GET maxclients | tail -1)" = 32 ] || fail "CONFIG GET maxclients"
echo "ok: maxclients"
# A soft limit under the hard one is raised to it at the start, as
# redis-server does: under soft 64, hard 128, all 40 are served.
kv_soft() { ulimit -S -n 64 && ulimit -H -n 128 && exec "$real_kv" "$@"; }
kv=kv_soft
start soft --port 0
kv=$real_kv
got=$(forty_pings "$started_port")
[ "$got" = "[(b'+PONG\\r\\n', 40)]" ] || fail "40 clients under a soft limit of 64: $got"
echo "ok: the soft descriptor limit raised"

# ------------------------------------------------------------------- TLS
if ! command -v openssl >/dev/null 2>&1; then
    echo "skipped: TLS (openssl not installed)"
    exit 0
fi
if ! redis-cli --help 2>&1 | grep -q -- --tls; then
    echo "skipped: TLS (this redis-cli was built without it)"
    exit 0
fi
# Certificates made now, in $dir (deleted at exit): a CA, a server and a
# client certificate it signed (the server's for localhost and
# 127.0.0.1), and a second CA with a client of its own, trusted by
# nobody.
cert() { # NAME CA EXT: NAME.key, and NAME.crt signed by CA
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$dir/$1.key" -out "$dir/$1.csr" -subj "/CN=$1" 2>/dev/null &&
        printf '%s\n' "$3" >"$dir/$1.ext" &&
        openssl x509 -req -in "$dir/$1.csr" -CA "$dir/$2.crt" -CAkey "$dir/$2.key" \
            -CAcreateserial -days 1 -out "$dir/$1.crt" -extfile "$dir/$1.ext" 2>/dev/null
}
for ca in ca ca2; do
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$dir/$ca.key" -out "$dir/$ca.crt" -subj "/CN=lull-kv test $ca" -days 1 \
        2>/dev/null || fail "openssl req (CA)"
done
cert server ca "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1
extendedKeyUsage=serverAuth,clientAuth" || fail "openssl (server certificate)"
cert client ca "extendedKeyUsage=clientAuth" || fail "openssl (client certificate)"
cert stranger ca2 "extendedKeyUsage=clientAuth" || fail "openssl (stranger certificate)"
if timeout 2 "$kv" --port 0 --tls-port "$(free_port)" --tls-cert-file "$dir/server.crt" \
    --tls-key-file "$dir/server.key" --tls-ca-cert-file "$dir/ca.crt" 2>&1 |
    grep -q "built without"; then
    echo "skipped: TLS (lull built without OpenSSL)"
    exit 0
fi
tlsargs=(--tls-cert-file "$dir/server.crt" --tls-key-file "$dir/server.key" --tls-ca-cert-file "$dir/ca.crt")
start tls --port 0 --tls-port "$(free_port)" --requirepass pw "${tlsargs[@]}"
port=$started_port
tport=$started_tls
[ -n "$tport" ] || fail "no TLS port in: $(cat "$dir/tls.out")"
tcli() { redis-cli --tls --cacert "$dir/ca.crt" --cert "$dir/client.crt" --key "$dir/client.key" -p "$tport" --no-auth-warning -a pw "$@"; }
[ "$(tcli SET t 1)" = OK ] || fail "SET over TLS: $(tcli SET t 1 2>&1)"
[ "$(redis-cli -p "$port" -a pw --no-auth-warning GET t)" = 1 ] || fail "the plaintext port beside TLS"
[ "$(tcli GET t)" = 1 ] || fail "GET over TLS"
# 10,000 SETs pipelined over TLS, every reply there (AUTH's not counted).
awk 'BEGIN { for (i = 0; i < 10000; i++) printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length("t:" i), "t:" i, length("w" i), "w" i }' >"$dir/tmass"
out=$(tcli --pipe <"$dir/tmass" 2>&1)
echo "$out" | grep -q "errors: 0, replies: 10000" || fail "--pipe over TLS: $out"
# A plaintext client on the TLS port: closed, and the reason logged.
got=$(raw "$tport" 'PING\r\n')
case $got in "b''" | "b'\\x15"*) ;; *) fail "plaintext on the TLS port answered $got" ;; esac
eventually grep -q "TLS handshake failed" "$dir/tls.out" || fail "plaintext on the TLS port not logged"
# No client certificate (--tls-auth-clients yes, Redis' default): refused.
redis-cli --tls --cacert "$dir/ca.crt" -p "$tport" -a pw --no-auth-warning PING 2>&1 | grep -q PONG &&
    fail "a client without a certificate was served"
# A client trusting another CA refuses the server; a client whose
# certificate another CA signed is refused.
redis-cli --tls --cacert "$dir/ca2.crt" --cert "$dir/client.crt" --key "$dir/client.key" -p "$tport" -a pw --no-auth-warning PING 2>&1 | grep -q PONG &&
    fail "a client of another CA was answered"
redis-cli --tls --cacert "$dir/ca.crt" --cert "$dir/stranger.crt" --key "$dir/stranger.key" -p "$tport" -a pw --no-auth-warning PING 2>&1 | grep -q PONG &&
    fail "a certificate of another CA was accepted"
eventually grep -q "certificate" "$dir/tls.out" || fail "a refused certificate not logged"
[ "$(tcli PING)" = PONG ] || fail "the server after the refusals"
if python3 -c 'import redis' 2>/dev/null; then
    python3 - "$tport" "$dir" <<'PY' || fail "redis-py ssl=True"
import sys, redis
port, d = int(sys.argv[1]), sys.argv[2]
r = redis.Redis(port=port, password="pw", ssl=True, ssl_ca_certs=d + "/ca.crt",
                ssl_certfile=d + "/client.crt", ssl_keyfile=d + "/client.key")
assert r.set("py", "y") and r.get("py") == b"y"
assert r.get("t:9999") == b"w9999"
p = r.pipeline(transaction=True)
p.incr("n").incr("n")
assert p.execute() == [1, 2]
PY
fi
# --tls-auth-clients no / optional: a client without a certificate served.
for mode in no optional; do
    start tls$mode --port 0 --tls-port "$(free_port)" --tls-auth-clients $mode "${tlsargs[@]}"
    [ "$(redis-cli --tls --cacert "$dir/ca.crt" -p "$started_tls" PING)" = PONG ] ||
        fail "--tls-auth-clients $mode without a client certificate"
done
redis-cli --tls --cacert "$dir/ca.crt" --cert "$dir/stranger.crt" --key "$dir/stranger.key" -p "$started_tls" PING 2>&1 | grep -q PONG &&
    fail "--tls-auth-clients optional accepted a certificate of another CA"
"$kv" --port 0 --tls-port "$(free_port)" --tls-cert-file "$dir/server.crt" >"$dir/nokey.out" 2>&1 &&
    fail "--tls-port without a key started"
echo "ok: TLS clients"

# CONFIG GET of the TLS options, against a redis-server with the same
# ones (when this redis-server has TLS).
if [ $have_redis = 1 ]; then
    ctls=(--bind 127.0.0.1 --tls-auth-clients optional --tls-replication yes "${tlsargs[@]}")
    start tlscfg --port 0 --tls-port "$(free_port)" "${ctls[@]}"
    rtport=$(free_port)
    rs_port=$(free_port)
    redis-server --port "$rs_port" --tls-port "$rtport" --save '' --appendonly no "${obl[@]}" "${ctls[@]}" >"$dir/rtlscfg.log" 2>&1 &
    pids="$pids $!"
    if eventually redis_up "$rs_port"; then
        printf '%s' "$config_requests" | python3 "$dir/config.py" "$started_port" "$started_tls" "$rs_port" "$rtport" '' >"$dir/config.res" ||
            fail "CONFIG GET (TLS) differs from redis-server's: $(cat "$dir/config.res")"
        echo "ok: CONFIG GET of the TLS options"
    else
        echo "skipped: CONFIG GET of the TLS options (redis-server without TLS)"
    fi
fi

# Replication over TLS with AUTH: 10,000 keys (and 5,000 written while it
# follows) reach the replica, whose keyspace then equals the primary's.
start trep --port 0 --replica-of "127.0.0.1:$tport" --tls-replication yes --masterauth pw \
    --tls-cert-file "$dir/client.crt" --tls-key-file "$dir/client.key" --tls-ca-cert-file "$dir/ca.crt"
rport=$started_port
awk 'BEGIN { for (i = 0; i < 5000; i++) printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length("f:" i), "f:" i, length("x" i), "x" i }' >"$dir/fmass"
tcli --pipe <"$dir/fmass" >/dev/null 2>&1 || fail "--pipe over TLS while a replica follows"
pinfo() { redis-cli -p "$port" -a pw --no-auth-warning INFO replication | tr -d '\r' | sed -n "s/^$1://p"; }
rinfo() { redis-cli -p "$rport" INFO replication | tr -d '\r' | sed -n "s/^$1://p"; }
tsynced() { [ "$(rinfo master_link_status)" = up ] && [ "$(pinfo master_repl_offset)" = "$(rinfo slave_repl_offset)" ]; }
for _ in $(seq 1200); do tsynced && break; sleep 0.05; done
tsynced || fail "TLS replica at $(rinfo slave_repl_offset), primary at $(pinfo master_repl_offset)"
grep -q "in sync with 127.0.0.1:$tport" "$dir/trep.out" || fail "TLS replica's log"
[ "$(pinfo connected_slaves)" = 1 ] || fail "connected_slaves $(pinfo connected_slaves)"
redis-cli -p "$port" -a pw --no-auth-warning KEYS '*' | sort >"$dir/tkeys"
[ "$(wc -l <"$dir/tkeys")" -ge 15000 ] || fail "primary has $(wc -l <"$dir/tkeys") keys"
awk '{ print "GET " $0 }' "$dir/tkeys" | redis-cli -p "$port" -a pw --no-auth-warning >"$dir/tp.dump"
awk '{ print "GET " $0 }' "$dir/tkeys" | redis-cli -p "$rport" >"$dir/tr.dump"
cmp -s "$dir/tp.dump" "$dir/tr.dump" || fail "TLS replica's keyspace differs: $(diff "$dir/tp.dump" "$dir/tr.dump" | head -3)"
[ "$(redis-cli -p "$rport" DBSIZE)" = "$(wc -l <"$dir/tkeys")" ] || fail "replica DBSIZE"
# A replica trusting another CA refuses the primary, and says why in
# OpenSSL's words (it said "Key was rejected by service").
start trepbad --port 0 --replica-of "127.0.0.1:$tport" --tls-replication yes --masterauth pw \
    --tls-cert-file "$dir/client.crt" --tls-key-file "$dir/client.key" --tls-ca-cert-file "$dir/ca2.crt"
eventually grep -q "replica: connect to 127.0.0.1:$tport: certificate verify failed" "$dir/trepbad.out" ||
    fail "a TLS replica of the wrong CA not logged with its reason"
[ "$(redis-cli -p "$started_port" DBSIZE)" = 0 ] || fail "a TLS replica of the wrong CA got keys"
# A primary at [::1], as --replica-of writes an IPv6 address: its
# certificate's IP name is checked (the brackets were, "hostname mismatch").
if [ "$have_v6" = 1 ]; then
    start tls6 --port 0 --bind ::1 --tls-port "$(free_port)" --tls-auth-clients no "${tlsargs[@]}"
    start trep6 --port 0 --replica-of "[::1]:$started_tls" --tls-replication yes "${tlsargs[@]}"
    eventually grep -q "in sync with \[::1\]:" "$dir/trep6.out" ||
        fail "TLS replica of [::1]: $(cat "$dir/trep6.out")"
fi
echo "ok: TLS replication ($(wc -l <"$dir/tkeys") keys)"
