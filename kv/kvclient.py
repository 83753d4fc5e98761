"""Raw-socket helpers the kv/clients.sh cases share: they speak RESP to
lull-kv byte for byte (no client library hides a reply's shape or a
closed connection) and read the server's memory from /proc."""


def cmd(*args):
    """One request as a multibulk of the given bytes arguments."""
    out = b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def reply(s, n):
    """Exactly n bytes from socket s; a close before them fails."""
    got = b""
    while len(got) < n:
        d = s.recv(n - len(got))
        assert d, "closed after %r" % got[:100]
        got += d
    return got


def status_kb(pid, field):
    """A /proc/PID/status field in kB (VmRSS, VmHWM)."""
    for line in open("/proc/%d/status" % pid):
        if line.startswith(field + ":"):
            return int(line.split()[1])
