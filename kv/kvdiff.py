#!/usr/bin/python3
"""lull-kv's replies beside redis-server's, on random command sequences.

    kvdiff.py LULL_KV [--seeds N] [--first S] [--commands N] [--verbose]
               [--strings] [--edges] [--matrix]

Starts a redis-server (on a Unix socket) and the given lull-kv (port 0),
then for each seed sends both the same random sequence of requests drawn
from lull-kv's commands (docs/KV.md), with wrong types and arities,
negative, huge and non-numeric counts and indexes, empty and binary keys
and values, overflowing INCRBY, expiry edge cases and transactions, over
raw sockets, and compares the replies byte for byte. With --strings most
requests are string commands on values of 0 to 17 bytes (lull-kv keeps
one of up to 8 in its key's entry) and counters across 8 digits. --edges
sends EDGES instead, once, in order: a hostile client's counts, indexes,
bounds, floats, options and globs at their limits, and WATCH of a key
then each kind of write that may or may not change it, then EXEC (which
writes fail a watch in redis-server). --matrix sends MATRIX
instead: every command on a key of each type and a missing one, with an
argument fewer and more; each write on keys with a TTL, then the TTLs;
ZADD and ZINCRBY with every ordered choice of up to three options; each
number argument spelt "+5", " 5", "0x10", "1e3", "-0", "nan" and so on.
Unordered replies
(SMEMBERS, SINTER, SUNION, SDIFF, HGETALL, KEYS, a SCAN, SSCAN, HSCAN
or ZSCAN walked to its end) compare as sets; SRANDMEMBER's random picks
in shape and size.
Exit 0 when every reply agreed; 1 with each difference printed (seed, the
request number and the requests before it) otherwise. Without
redis-server it prints a `skipped:` line and exits 77 (a skip for ctest).

Left out, as docs/KV.md says lull-kv differs on purpose: INFO, CONFIG,
COMMAND, CLIENT, a score of -0. Times: relative expiries are far (or
zero/negative), absolute ones long past or far ahead, so the two servers'
clocks cannot disagree; PTTL and (P)EXPIRETIME compare within a second.
Also left out: a bulk not followed by CRLF (redis-server skips any two
bytes there, lull-kv refuses the request), a NUL in an inline request
(redis-server waits for ever for its line's end), SETRANGE past a small
offset (hundreds of megabytes on both servers).
"""
import itertools
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time


class Line(bytes):
    """A status or error reply (with its '+' or '-'), told from a bulk."""


class Conn:
    """One raw RESP2 connection: sends multibulk requests, reads replies
    back as (raw bytes, parsed value)."""

    def __init__(self, sock):
        self.s = sock
        self.s.settimeout(5)
        self.buf = b""

    def send(self, args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.s.sendall(b"".join(out))

    def _fill(self):
        d = self.s.recv(65536)
        if not d:
            raise EOFError("connection closed")
        self.buf += d

    def _line(self, pos):
        while True:
            i = self.buf.find(b"\r\n", pos)
            if i >= 0:
                return i
            self._fill()

    def _parse(self, pos):
        """Returns (value, next position); reads more as needed."""
        while len(self.buf) <= pos:
            self._fill()
        end = self._line(pos)
        t, line = self.buf[pos:pos + 1], self.buf[pos + 1:end]
        pos = end + 2
        if t in (b"+", b"-"):
            return Line(t + line), pos
        if t == b":":
            return int(line), pos
        if t == b"$":
            n = int(line)
            if n < 0:
                return None, pos
            while len(self.buf) < pos + n + 2:
                self._fill()
            return self.buf[pos:pos + n], pos + n + 2
        if t == b"*":
            n = int(line)
            if n < 0:
                return ("nil-array",), pos
            items = []
            for _ in range(n):
                v, pos = self._parse(pos)
                items.append(v)
            return items, pos
        raise ValueError("bad reply byte %r in %r" % (t, self.buf[:200]))

    def reply(self):
        try:
            v, pos = self._parse(0)
        except (socket.timeout, EOFError, ConnectionError) as e:
            # no reply: shown as such (the caller's seed ends here)
            return b"<%s after %r>" % (type(e).__name__.encode(), self.buf), None
        raw, self.buf = self.buf[:pos], self.buf[pos:]
        return raw, v

    def ask(self, args):
        self.send(args)
        return self.reply()


# ------------------------------------------------------------ the requests

KEYS = [b"k", b"l", b"s", b"h", b"z", b"n", b"", b"\x00\xff\r\n", b"key:1",
        b"key:2"]
WORDS = [b"", b"a", b"b", b"c", b"0", b"1", b"-1", b"10", b"x y",
         b"\x00", b"\xff\xfe", b"\r\n", b"*", b"value", b"a" * 100]
INTS = [b"0", b"1", b"-1", b"2", b"3", b"5", b"-5", b"100", b"-100",
        b"9223372036854775807", b"-9223372036854775808",
        b"9223372036854775806", b"-9223372036854775807",
        b"9223372036854775808", b"-9223372036854775809",
        b"99999999999999999999", b"4611686018427387904",
        b"2147483647", b"2147483648", b"4294967296", b"-2147483649",
        b"007", b"-0", b"+1", b" 1", b"1 ", b"", b"x", b"1.5", b"0x10", b"1e3"]
FLOATS = [b"0", b"1", b"-1", b"1.5", b"-2.5", b"0.1", b"1e300", b"-1e300",
          b"1e308", b"1e309", b"inf", b"-inf", b"+inf", b"INF", b"nan",
          b"x", b"", b" 1", b"1 ", b"3", b"1e-300", b"0x10", b"10.",
          b".5", b"+5", b"123456789012345678901234567890", b"5e-324"]
PATTERNS = [b"*", b"k*", b"?", b"key:?", b"[a-z]", b"*:*", b"", b"\\*",
            b"[^k]*", b"[", b"h[", b"*\x00*"]


def pick_ints(r):
    if r.random() < 0.6:
        return str(r.randint(-12, 12)).encode()
    return r.choice(INTS)


def pick_key(r):
    return r.choice(KEYS)


def pick_word(r):
    if r.random() < 0.1:
        return bytes(r.randrange(256) for _ in range(r.randint(0, 8)))
    return r.choice(WORDS)


def pick_float(r):
    if r.random() < 0.5:
        return r.choice([b"0", b"1", b"2", b"1.5", b"-3", b"10", b"0.25"])
    return r.choice(FLOATS)


def pick_bound(r):
    """A ZCOUNT or ZRANGEBYSCORE min or max: inclusive, exclusive or not a
    float (Redis reads "" and "(" as 0)."""
    c = r.random()
    if c < 0.45:
        return str(r.randint(-4, 4)).encode()
    if c < 0.7:
        return b"(" + str(r.randint(-4, 4)).encode()
    return r.choice([b"-inf", b"+inf", b"inf", b"(-inf", b"(+inf", b"x",
                     b"", b"(", b"nan", b"((1", b"1.5", b"(2.5", b"1 ",
                     b" 1", b"1\x00x", b"0x2", b"1e400", b"(1e-400"])


# Relative expiry times, each a second (or a millisecond) apart from every
# other in the seed: an EXPIRE 1000 GT over an expiry that SET EX 1000
# set a few requests before would depend on whether each server's clock
# moved to its next ms in between (lull-kv's and redis-server's ms do not
# tick together). Reset for each seed.
REL = [0]


def rel_s(base):
    """base seconds and a few more, never the same twice in a seed."""
    REL[0] += 1
    return str(base + REL[0]).encode()


def rel_ms(base):
    """base ms and a few seconds more plus 1 ms: never a whole second, so
    never any EX's, and never the same twice in a seed."""
    REL[0] += 1
    return str(base + 1000 * REL[0] + 1).encode()


def ttl_opts(r, now_s):
    """An expiry option: far, already past, zero, negative or garbage."""
    c = r.randrange(14)
    if c == 0:
        return [b"EX", rel_s(1000)]
    if c == 1:
        return [b"PX", rel_ms(1000000)]
    if c == 2:
        return [b"EXAT", str(now_s + 5000).encode()]
    if c == 3:
        return [b"PXAT", str((now_s + 5000) * 1000).encode()]
    if c == 4:
        return [b"EXAT", r.choice([b"1", b"100", str(now_s - 100).encode()])]
    if c == 5:
        return [b"PXAT", r.choice([b"1", b"1000", str(now_s * 1000 - 5000).encode()])]
    if c == 6:
        return [b"KEEPTTL"]
    if c == 7:
        return [r.choice([b"EX", b"PX", b"EXAT", b"PXAT"]),
                r.choice([b"0", b"-1", b"x", b"", b"9223372036854775807",
                          b"9223372036854775", b"9223372036854776",
                          b"-9223372036854775808", b"1.5"])]
    if c == 8:
        return [r.choice([b"EX", b"PX"])]
    if c == 9:
        return [b"ex", rel_s(2000)]
    return []


def getex_opts(r, now_s):
    """GETEX's options: none, PERSIST, a time far ahead or long past,
    garbage, or two of them."""
    c = r.randrange(8)
    if c == 0:
        return []
    if c == 1:
        return [b"PERSIST"]
    if c == 2:
        return [r.choice([b"EX", b"ex"]), rel_s(1000)]
    if c == 3:
        return [b"PX", rel_ms(1000000)]
    if c == 4:
        return [r.choice([b"EXAT", b"PXAT"]),
                r.choice([b"1", str(now_s - 100).encode()])]
    if c == 5:
        return [b"PXAT", str((now_s + 5000) * 1000).encode()]
    if c == 6:
        return ttl_opts(r, now_s)
    return r.choice([[b"PERSIST", b"PERSIST"], [b"PERSIST", b"EX", b"10"],
                     [b"EX", b"10", b"EX", b"20"], [b"EX", b"10", b"PX", b"5"],
                     [b"KEEPTTL"], [b"GET"], [b"FOO"]])


def expire_args(r, cmd, now_s):
    c = r.randrange(8)
    if c == 0:
        t = r.choice([b"0", b"-1", b"-100", b"x", b"", b"9223372036854775807",
                      b"-9223372036854775808", b"9223372036854775",
                      b"9223372036854776", b"1.5"])
    elif cmd in (b"EXPIRE",):
        t = rel_s(r.choice([1000, 5000, 100000]))
    elif cmd == b"PEXPIRE":
        t = rel_ms(r.choice([1000000, 5000000]))
    elif cmd == b"EXPIREAT":
        t = r.choice([str(now_s + 3000).encode(), str(now_s + 9000).encode(),
                      b"1", str(now_s - 10).encode()])
    else:
        t = r.choice([str((now_s + 3000) * 1000).encode(), b"1",
                      str((now_s + 9000) * 1000).encode()])
    args = [cmd, pick_key(r), t]
    for _ in range(r.choice([0, 0, 0, 1, 1, 2])):
        args.append(r.choice([b"NX", b"XX", b"GT", b"LT", b"nx", b"FOO"]))
    return args


NCASES = 104  # gen's cases

# --strings: most requests are string commands on values of lengths
# around 8 (lull-kv keeps a string of up to 8 bytes in its key's entry)
# and counters across 8 digits.
STRINGS = False


def pick_short(r):
    """A string of a length at or near 8 (0 and 16 too), or a counter
    that INCR or DECR carries across 8 characters."""
    if r.random() < 0.3:
        return r.choice([b"99999999", b"9999999", b"-9999999", b"-99999999",
                         b"100000000", b"-10000000", b"12345678", b"1234567"])
    n = r.choice([0, 1, 7, 8, 9, 15, 16, 17])
    return bytes(r.choice(b"ab\x00\xff") for _ in range(n))


def gen_strings(r, now_s):
    k = r.choice(KEYS[:4])
    c = r.randrange(18)
    if c == 0:
        return [b"GET", k]
    if c == 1:
        return [b"SET", k, pick_short(r)] + r.choice(
            [[], [b"GET"], [b"KEEPTTL"], [b"NX"], [b"XX"], [b"XX", b"GET"],
             [b"NX", b"GET"], [b"KEEPTTL", b"GET"]] + [ttl_opts(r, now_s)])
    if c == 2:
        return [b"APPEND", k, pick_short(r)]
    if c == 3:
        return [b"SETRANGE", k, str(r.randint(0, 20)).encode(), pick_short(r)]
    if c == 4:
        return [b"GETRANGE", k, str(r.randint(-20, 20)).encode(),
                str(r.randint(-20, 20)).encode()]
    if c == 5:
        return [b"STRLEN", k]
    if c == 6:
        return [r.choice([b"INCR", b"DECR"]), k]
    if c == 7:
        return [r.choice([b"INCRBY", b"DECRBY"]), k,
                r.choice([b"1", b"-1", b"90000000", b"-90000000", b"10"])]
    if c == 8:
        return [b"INCRBYFLOAT", k, r.choice([b"0.5", b"-1.25", b"1e7", b"3"])]
    if c == 9:
        return [r.choice([b"GETSET", b"SETNX"]), k, pick_short(r)]
    if c == 10:
        return [r.choice([b"GETDEL", b"PERSIST", b"TTL", b"PTTL"]), k]
    if c == 11:
        return [b"GETEX", k] + getex_opts(r, now_s)
    if c == 12:
        return [b"MSET", k, pick_short(r), r.choice(KEYS[:4]), pick_short(r)]
    if c == 13:
        return [b"MGET"] + [r.choice(KEYS[:4]) for _ in range(3)]
    if c == 14:
        return [r.choice([b"RENAME", b"RENAMENX"]), k, r.choice(KEYS[:4])]
    if c == 15:
        return [r.choice([b"SETEX", b"PSETEX"]), k, rel_s(100000), pick_short(r)]
    if c == 16:
        # GT and LT left out: against an expiry set by SET EX 1000 a few
        # requests before, EXPIRE 1000 GT depends on whether each server's
        # clock moved to its next ms in between.
        a = expire_args(r, r.choice([b"EXPIRE", b"PEXPIRE", b"EXPIREAT",
                                      b"PEXPIREAT"]), now_s)
        return [x for x in a if x not in (b"GT", b"LT")]
    return [b"LPUSH", k, pick_short(r)]


def gen(r, now_s, in_multi=False):
    """One random request (a list of byte strings)."""
    if STRINGS and r.random() < 0.85:
        return gen_strings(r, now_s)
    k = pick_key(r)
    c = r.randrange(NCASES)
    if c == 0:
        a = [b"GET", k]
    elif c == 1:
        a = [b"SET", k, pick_word(r) if r.random() < 0.7 else pick_ints(r)]
        opts = []
        if r.random() < 0.3:
            opts.append(r.choice([b"NX", b"XX"]))
        if r.random() < 0.3:
            opts.append(b"GET")
        opts += ttl_opts(r, now_s)
        if r.random() < 0.1:
            opts.append(r.choice([b"NX", b"XX", b"GET", b"KEEPTTL", b"EX"]))
        r.shuffle(opts) if r.random() < 0.2 else None
        a += opts
    elif c == 2:
        a = [r.choice([b"INCR", b"DECR"]), k]
    elif c == 3:
        a = [r.choice([b"INCRBY", b"DECRBY"]), k, pick_ints(r)]
    elif c == 4:
        a = [b"DEL"] + [pick_key(r) for _ in range(r.randint(1, 3))]
    elif c == 5:
        a = [b"EXISTS"] + [pick_key(r) for _ in range(r.randint(1, 4))]
    elif c == 6:
        a = [b"TYPE", k]
    elif c == 7:
        a = [r.choice([b"TTL", b"PTTL"]), k]
    elif c == 8:
        a = expire_args(r, r.choice([b"EXPIRE", b"PEXPIRE", b"EXPIREAT",
                                     b"PEXPIREAT"]), now_s)
    elif c == 9:
        a = [b"PERSIST", k]
    elif c == 10:
        a = [b"SETNX", k, pick_word(r)]
    elif c == 11:
        a = [b"GETSET", k, pick_word(r)]
    elif c == 12:
        a = [b"MSET"]
        for _ in range(r.randint(1, 3)):
            a += [pick_key(r), pick_word(r)]
    elif c == 13:
        a = [b"MGET"] + [pick_key(r) for _ in range(r.randint(1, 4))]
    elif c == 14:
        a = [b"APPEND", k, pick_word(r)]
    elif c == 15:
        a = [b"STRLEN", k]
    elif c in (16, 17):
        a = [r.choice([b"LPUSH", b"RPUSH", b"LPUSHX", b"RPUSHX"]), k] + \
            [pick_word(r) for _ in range(r.randint(1, 4))]
    elif c == 18:
        a = [r.choice([b"LPOP", b"RPOP"]), k]
        if r.random() < 0.5:
            a.append(pick_ints(r))
    elif c == 19:
        a = [b"LLEN", k]
    elif c == 20:
        a = [b"LINDEX", k, pick_ints(r)]
    elif c in (21, 22):
        a = [b"LRANGE", k, pick_ints(r), pick_ints(r)]
    elif c in (23, 24):
        a = [b"SADD", k] + [pick_word(r) for _ in range(r.randint(1, 4))]
    elif c == 25:
        a = [b"SREM", k] + [pick_word(r) for _ in range(r.randint(1, 3))]
    elif c == 26 and not in_multi:
        a = [b"SPOP", k]
        if r.random() < 0.6:
            a.append(pick_ints(r))
    elif c == 27:
        a = [b"SCARD", k]
    elif c == 28:
        a = [b"SISMEMBER", k, pick_word(r)]
    elif c == 29:
        a = [b"SMEMBERS", k]
    elif c in (30, 31):
        a = [r.choice([b"HSET", b"HMSET"]), k]
        for _ in range(r.randint(1, 3)):
            a += [pick_word(r), pick_word(r)]
    elif c == 32:
        a = [b"HGET", k, pick_word(r)]
    elif c == 33:
        a = [b"HMGET", k] + [pick_word(r) for _ in range(r.randint(1, 3))]
    elif c == 34:
        a = [b"HLEN", k]
    elif c == 35:
        a = [b"HEXISTS", k, pick_word(r)]
    elif c == 36:
        a = [b"HDEL", k] + [pick_word(r) for _ in range(r.randint(1, 3))]
    elif c == 37:
        a = [b"HGETALL", k]
    elif c in (38, 39, 40):
        a = [b"ZADD", k]
        for _ in range(r.choice([0, 0, 0, 1, 2])):
            a.append(r.choice([b"NX", b"XX", b"GT", b"LT", b"CH", b"INCR"]))
        for _ in range(r.randint(1, 3)):
            a += [pick_float(r), pick_word(r)]
    elif c == 41:
        a = [b"ZINCRBY", k, pick_float(r), pick_word(r)]
    elif c == 42:
        a = [b"ZPOPMIN", k]
        if r.random() < 0.5:
            a.append(pick_ints(r))
    elif c == 43:
        a = [b"ZREM", k] + [pick_word(r) for _ in range(r.randint(1, 3))]
    elif c == 44:
        a = [b"ZCARD", k]
    elif c == 45:
        a = [b"ZSCORE", k, pick_word(r)]
    elif c in (46, 47):
        a = [b"ZRANGE", k, pick_ints(r), pick_ints(r)]
        for _ in range(r.choice([0, 0, 1, 2])):
            a.append(r.choice([b"REV", b"WITHSCORES", b"withscores", b"FOO"]))
    elif c == 48:
        a = [b"KEYS", r.choice(PATTERNS)]
    elif c == 49 and not in_multi:
        a = [b"SCAN", b"0"]
        if r.random() < 0.4:
            a += [b"MATCH", r.choice(PATTERNS)]
        if r.random() < 0.4:
            a += [b"COUNT", r.choice([b"1", b"2", b"10", b"1000"])]
        if r.random() < 0.3:
            a += [b"TYPE", r.choice([b"string", b"list", b"set", b"hash",
                                     b"zset", b"nosuch", b"STRING"])]
    elif c == 50:
        a = [b"SCAN", r.choice([b"x", b"-1", b"", b"18446744073709551616",
                                 b"0"])]
        a += r.choice([[b"COUNT"], [b"COUNT", b"0"], [b"COUNT", b"-1"],
                       [b"COUNT", b"x"], [b"MATCH"], [b"TYPE"], [b"FOO", b"1"],
                       [b"COUNT", b"9223372036854775808"]])
    elif c == 51:
        a = [b"DBSIZE"]
    elif c == 52:
        a = [b"ECHO", pick_word(r)]
    elif c == 53:
        a = [b"PING"] + ([pick_word(r)] if r.random() < 0.5 else [])
    elif c == 54:
        # a channel no subscriber of pubsub_step's listens to
        a = [b"PUBLISH", b"\xfe" + pick_word(r), pick_word(r)]
    elif c == 55 and r.random() < 0.2:
        a = [r.choice([b"FLUSHALL", b"FLUSHDB"])]
        if r.random() < 0.3:
            a.append(r.choice([b"SYNC", b"ASYNC", b"x", b"sync"]))
    elif c == 56:
        a = [b"SET", k, pick_ints(r)]
    elif c == 57:
        # past the small encodings (listpack, intset): 128 and 512 members
        n = r.choice([100, 130, 300, 600])
        kind = r.choice([b"SADD", b"RPUSH", b"HSET", b"ZADD"])
        nums = r.random() < 0.5
        a = [kind, k]
        for j in range(n):
            m = str(j).encode() if nums else b"m%d" % j
            if kind == b"HSET":
                a += [m, b"v"]
            elif kind == b"ZADD":
                a += [str(j % 7).encode(), m]
            else:
                a.append(m)
    elif c == 58:
        a = [b"GETDEL", k]
    elif c in (59, 60):
        a = [b"GETEX", k] + getex_opts(r, now_s)
    elif c in (61, 62):
        a = [b"INCRBYFLOAT", k, pick_float(r)]
    elif c == 63:
        a = [b"HINCRBYFLOAT", k, pick_word(r), pick_float(r)]
    elif c == 64:
        a = [b"SET", k, pick_float(r)]
    elif c in (65, 66) and not in_multi:
        a = [r.choice([b"SSCAN", b"HSCAN", b"ZSCAN"]), k, b"0"]
        if r.random() < 0.4:
            a += [b"MATCH", r.choice(PATTERNS)]
        if r.random() < 0.4:
            a += [b"COUNT", r.choice([b"1", b"2", b"10", b"1000"])]
    elif c == 67:
        a = [r.choice([b"SSCAN", b"HSCAN", b"ZSCAN"]), k,
             r.choice([b"x", b"-1", b"", b"18446744073709551616", b"0", b"7"])]
        a += r.choice([[], [b"COUNT"], [b"COUNT", b"0"], [b"COUNT", b"-1"],
                       [b"COUNT", b"x"], [b"MATCH"], [b"TYPE", b"set"],
                       [b"FOO", b"1"], [b"COUNT", b"9223372036854775808"]])
    elif c == 68:
        a = [b"HINCRBY", k, pick_word(r), pick_ints(r)]
    elif c == 69:
        a = [r.choice([b"HKEYS", b"HVALS"]), k]
    elif c == 70:
        a = [b"HSETNX", k, pick_word(r), pick_word(r)]
    elif c == 71:
        a = [b"HSTRLEN", k, pick_word(r)]
    elif c == 72:
        a = [b"HSET", k, pick_word(r), pick_ints(r)]
    elif c == 73:
        a = [r.choice([b"SETEX", b"PSETEX"]), k,
             r.choice([b"1000000", b"100000", b"0", b"-1", b"x", b"", b"1.5",
                       b"9223372036854775807", b"9223372036854775",
                       b"9223372036854774", b"-9223372036854775808"]),
             pick_word(r)]
    elif c == 74:
        a = [b"UNLINK"] + [pick_key(r) for _ in range(r.randint(1, 3))]
    elif c == 75:
        a = [b"TOUCH"] + [pick_key(r) for _ in range(r.randint(1, 4))]
    elif c in (76, 77):
        a = [r.choice([b"RENAME", b"RENAMENX"]), k,
             k if r.random() < 0.1 else pick_key(r)]
    elif c == 78:
        a = [b"LREM", k, pick_ints(r), pick_word(r)]
    elif c == 79:
        a = [b"LSET", k, pick_ints(r), pick_word(r)]
    elif c == 80:
        a = [b"LTRIM", k, pick_ints(r), pick_ints(r)]
    elif c == 81:
        a = [r.choice([b"ZRANK", b"ZREVRANK"]), k, pick_word(r)]
    elif c == 82:
        a = [b"ZCOUNT", k, pick_bound(r), pick_bound(r)]
    elif c in (83, 84):
        name = r.choice([b"ZREVRANGE", b"ZRANGEBYSCORE", b"ZREVRANGEBYSCORE",
                         b"ZRANGE"])
        if name == b"ZREVRANGE" or (name == b"ZRANGE" and r.random() < 0.3):
            a = [name, k, pick_ints(r), pick_ints(r)]
        else:
            a = [name, k, pick_bound(r), pick_bound(r)]
        opts = [b"WITHSCORES", b"withscores", b"REV", b"BYSCORE", b"byscore",
                b"LIMIT", b"FOO"]
        for _ in range(r.choice([0, 1, 1, 2, 3])):
            o = r.choice(opts)
            a.append(o)
            if o == b"LIMIT" and r.random() < 0.9:
                a += [pick_ints(r), pick_ints(r)]
    elif c == 85:
        a = [b"ZREMRANGEBYRANK", k, pick_ints(r), pick_ints(r)]
    elif c == 86:
        a = [b"ZREMRANGEBYSCORE", k, pick_bound(r), pick_bound(r)]
    elif c == 87:
        # small integer scores with ties: ranges by score cross them
        a = [b"ZADD", k]
        for _ in range(r.randint(3, 8)):
            a += [str(r.randint(-3, 3)).encode(), b"m%d" % r.randint(0, 9)]
    elif c == 88:
        a = [r.choice([b"EXPIRETIME", b"PEXPIRETIME"]), k]
    elif c == 89:
        a = [b"GETRANGE", k, pick_ints(r), pick_ints(r)]
    elif c == 90:
        # offsets small, or past 64 bits, or negative: never a string of
        # hundreds of megabytes on both servers
        a = [b"SETRANGE", k, r.choice([b"0", b"1", b"3", b"10", b"-1", b"x",
                                       b"", b"9223372036854775808",
                                       b"9223372036854775807"]),
             pick_word(r)]
    elif c in (91, 92):
        # set algebra: sets sharing members ("a", "b", "c", ...), missing
        # keys, keys of other types, a destination that is a source
        name = r.choice([b"SINTER", b"SUNION", b"SDIFF", b"SINTERSTORE",
                         b"SUNIONSTORE", b"SDIFFSTORE"])
        a = [name] + [pick_key(r) for _ in range(r.randint(1, 3))]
        if name.endswith(b"STORE") and r.random() < 0.3:
            a.insert(2, a[1])
    elif c == 93:
        n = r.randint(-1, 4)
        a = [b"SINTERCARD", str(n).encode() if r.random() < 0.8
             else pick_ints(r)] + [pick_key(r) for _ in range(max(n, 1))]
        if r.random() < 0.4:
            a += [r.choice([b"LIMIT", b"limit", b"FOO"]), pick_ints(r)]
    elif c == 94:
        a = [b"SMISMEMBER", k] + [pick_word(r) for _ in range(r.randint(1, 3))]
    elif c == 95:
        # random picks: compared in shape and size (same()); never a huge
        # negative count, which redis-server 7.0 answers until it dies
        a = [b"SRANDMEMBER", k]
        if r.random() < 0.7:
            a.append(r.choice([b"0", b"1", b"2", b"3", b"-1", b"-3", b"100",
                               b"9223372036854775807", b"x", b"1.5",
                               b"-9223372036854775808", b""]))
    elif c == 96:
        a = [b"SMOVE", k, k if r.random() < 0.2 else pick_key(r),
             pick_word(r)]
    elif c == 97:
        a = [b"MSETNX"]
        for _ in range(r.randint(1, 3)):
            a += [pick_key(r), pick_word(r)]
    elif c == 98:
        a = [b"LINSERT", k, r.choice([b"BEFORE", b"AFTER", b"after",
                                      b"MIDDLE"]), pick_word(r), pick_word(r)]
    elif c == 99:
        a = [b"LPOS", k, pick_word(r)]
        for _ in range(r.choice([0, 1, 1, 2, 3])):
            a += [r.choice([b"RANK", b"COUNT", b"MAXLEN", b"rank", b"FOO"]),
                  r.choice([b"1", b"2", b"-1", b"-2", b"0", b"3"])
                  if r.random() < 0.7 else pick_ints(r)]
    elif c == 100:
        if r.random() < 0.3:
            a = [b"RPOPLPUSH", k, pick_key(r)]
        else:
            a = [b"LMOVE", k, k if r.random() < 0.2 else pick_key(r),
                 r.choice([b"LEFT", b"RIGHT", b"left", b"UP"]),
                 r.choice([b"LEFT", b"RIGHT", b"right"])]
    elif c == 101:
        a = [b"ZPOPMAX", k]
        if r.random() < 0.5:
            a.append(pick_ints(r))
    elif c == 102:
        a = [b"ZMSCORE", k] + [pick_word(r) for _ in range(r.randint(1, 3))]
    elif c == 103:
        # small members shared by the set commands above
        a = [r.choice([b"SADD", b"RPUSH"]), k] + \
            [r.choice([b"a", b"b", b"c", b"d", b"e"])
             for _ in range(r.randint(1, 5))]
    else:
        a = [b"SET", k, pick_word(r)]
    # Wrong arities now and then: one argument fewer or one more.
    x = r.random()
    if x < 0.04 and len(a) > 1:
        a = a[:-1]
    elif x < 0.08:
        # not a time of a millisecond or so after a bare EX or PX: the two
        # servers would race its expiry
        a = a + [b"x" if a[-1].upper() in (b"EX", b"PX") else pick_word(r)]
    elif x < 0.09:
        a = [a[0].lower()] + a[1:]
    return a


# --edges: fixed requests at the edges, one string each, words split at
# spaces ("\s" a space in a word, "\e" an empty word).
EDGES = r"""
HSET hb f 9223372036854775806
HINCRBY hb f 1
HINCRBY hb f 1
HSET hb g -9223372036854775807
HINCRBY hb g -1
HINCRBY hb g -1
SET cb 9223372036854775806
INCRBY cb 1
INCR cb
SET cc -9223372036854775807
DECRBY cc 1
DECR cc
RPUSH l a b c d e
LRANGE l 9223372036854775807 -9223372036854775808
LRANGE l -9223372036854775808 9223372036854775807
LRANGE l 0 18446744073709551616
LINDEX l -9223372036854775808
LSET l -9223372036854775808 x
LSET l 9223372036854775807 x
LREM l -9223372036854775808 a
LREM l 9223372036854775807 b
LTRIM l 9223372036854775807 -9223372036854775808
RPUSH l a b c d e
LPOP l 0
RPOP l 0
LPOP nolist 0
LPOP l -1
LPOP l -9223372036854775808
LPOP l 9223372036854775808
LPOP l 9223372036854775807
SADD s a b c
SPOP s 0
SPOP nos 0
SPOP s -1
SPOP s -9223372036854775808
SADD s \e
SISMEMBER s \e
SREM s \e \e
ZADD z 1 a 2 b 3 c
ZPOPMIN z 0
ZPOPMIN z -1
ZPOPMIN noz 0
ZRANGE z -inf +inf BYSCORE LIMIT 0 -1
ZRANGE z -inf +inf BYSCORE LIMIT 0 -5
ZRANGE z -inf +inf BYSCORE LIMIT -1 5
ZRANGE z -inf +inf BYSCORE LIMIT -9223372036854775808 -9223372036854775808
ZRANGE z -inf +inf BYSCORE LIMIT 9223372036854775807 9223372036854775807
ZRANGE z +inf -inf BYSCORE REV LIMIT 1 1 WITHSCORES
ZRANGE z 0 -1 LIMIT 0 1
ZRANGE z 0 -1 REV REV
ZRANGE z 0 -1 BYSCORE BYSCORE
ZRANGEBYSCORE z -inf +inf LIMIT 0
ZRANGEBYSCORE z -inf +inf WITHSCORES LIMIT 1 -1
ZREVRANGEBYSCORE z +inf -inf LIMIT 0 -1 WITHSCORES
ZRANGEBYSCORE z nan 1
ZRANGEBYSCORE z (nan 1
ZRANGEBYSCORE z ( (
ZRANGEBYSCORE z [1 2
ZRANGEBYSCORE z (inf inf
ZRANGEBYSCORE z infinity infinity
ZRANGEBYSCORE z 0x0 0x10
ZREMRANGEBYRANK z -9223372036854775808 9223372036854775807
ZADD z 1 a 2 b 3 c
ZREMRANGEBYSCORE z -inf (-inf
ZREMRANGEBYSCORE z nan nan
ZADD z NX XX 1 a
ZADD z GT LT 1 a
ZADD z GT NX 1 a
ZADD z INCR 1 a 2 b
ZADD z INCR nan a
ZADD z nan a
ZADD z ch CH 5 a
ZADD z incr INCR 1 a
ZADD z XX INCR 1 nomember
ZADD z NX INCR 1 a
ZADD z GT INCR -1 a
ZADD z 1 a 2
ZADD z2 inf a
ZINCRBY z2 -inf a
ZADD z 1e308 c
ZINCRBY z 1e308 c
ZADD z 1e-400 e
ZADD z 5e-324 e
ZINCRBY z -0 g
ZRANGE z 0 -1 WITHSCORES
ZCOUNT z (-inf (+inf
ZCOUNT z \s1 \s1
HSET h a inf b nan c 1e400 d \s1 e -0 f 00 g +1
HINCRBYFLOAT h a 1
HINCRBYFLOAT h b 1
HINCRBYFLOAT h c 1
HINCRBYFLOAT h d 1
HINCRBYFLOAT h e 0
HINCRBY h e 0
HINCRBY h f 0
HINCRBY h g 0
HINCRBYFLOAT h x 1e308
HINCRBYFLOAT h x 1e308
HINCRBYFLOAT h y 1e4932
HINCRBYFLOAT h y 1e4933
HINCRBY h z 9223372036854775807
HINCRBY h z 1
HSET h \e \e
HGET h \e
HSTRLEN h \e
SET n -9223372036854775808
DECR n
DECRBY n -9223372036854775808
INCRBY n 9223372036854775807
SET f 1e4932
INCRBYFLOAT f 1
INCRBYFLOAT f2 1e4932
INCRBYFLOAT f2 1e4932
INCRBYFLOAT f3 -0
INCRBYFLOAT f3 infinity
INCRBYFLOAT f3 1e
SET \e v
RENAME \e \e
RENAMENX \e \e
RENAME \e x
SCAN 0 COUNT 0
SCAN 0 COUNT 9223372036854775807
SCAN 0 MATCH [
SCAN 0 MATCH \\
SCAN 0 MATCH **
SCAN 0 MATCH [^]
SCAN 0 MATCH [^] MATCH *
SCAN 0 type SET
SCAN 18446744073709551615
SCAN -18446744073709551615
SCAN +5
KEYS [
KEYS \\
KEYS **
KEYS [^]
KEYS [a-
KEYS [\\
SSCAN s 0 COUNT 0
SSCAN s x
SSCAN nos 0 COUNT 0
SSCAN s 0 NOVALUES
HSCAN h 0 NOVALUES
EXPIRE s 100 NX XX
EXPIRE s 100 GT LT
EXPIRE s 100 XX XX
EXPIRE s 9223372036854775807
PEXPIRE s 9223372036854775807
EXPIREAT s 9223372036854775807
EXPIRE s -9223372036854775808
EXPIRE s 9223372036854776
SADD s2 a
PEXPIREAT s2 9223372036854775807
EXPIRETIME s2
SET a b NX XX
SET a b GET GET
SET a b EX 10 KEEPTTL
SET a b EX 9223372036854775807
SET a b EXAT 9223372036854776
GETEX a EX 9223372036854776
GETEX a PERSIST EX 5
SETEX a 9223372036854776 v
SET a hello
GETRANGE a -9223372036854775808 9223372036854775807
GETRANGE a -1 -9223372036854775808
SETRANGE a -1 x
SETRANGE a 536870912 x
SETRANGE nokey 5 \e
SADD s a b c
SADD t b c d
SRANDMEMBER s 9223372036854775807
SRANDMEMBER s -9223372036854775808
SRANDMEMBER s -9223372036854775809
SRANDMEMBER s 0
SRANDMEMBER s -0
SINTERCARD 9223372036854775807 s
SINTERCARD 1 s LIMIT 9223372036854775807
SINTERCARD 1 s LIMIT 9223372036854775808
SINTERCARD 2 s t LIMIT -9223372036854775808
SINTERCARD 1 s LIMIT 1 LIMIT 0
SINTERSTORE s s t
SDIFFSTORE t t t
SMOVE s s b
SMOVE s \e b
SMOVE \e s b
RPUSH l a b a c a
LPOS l a RANK -9223372036854775808
LPOS l a RANK -9223372036854775808 COUNT 1
LPOS l a RANK -9223372036854775807 COUNT 0
LPOS l a RANK 9223372036854775807
LPOS l a RANK 9223372036854775808
LPOS l a COUNT 9223372036854775807 MAXLEN 9223372036854775807
LPOS l a MAXLEN 9223372036854775808
LPOS l a COUNT 0 RANK -2 MAXLEN 3
LPOS l \e
LINSERT l BEFORE \e x
LINSERT l AFTER a \e
LMOVE l l LEFT RIGHT
LMOVE l l RIGHT LEFT
LMOVE l \e RIGHT LEFT
RPOPLPUSH \e \e
LRANGE l 0 -1
ZADD z 1 a 2 b 3 c
ZPOPMAX z 0
ZPOPMAX z -1
ZPOPMAX z 9223372036854775808
ZPOPMAX z 9223372036854775807
ZMSCORE z a
MSETNX m 1 m 2
MSETNX m 1
MSETNX \e 1
MULTI x
MULTI
INCR a
LPUSH a x
GET
EXEC
MULTI
INCR a
LPUSH a x
INCR a
EXEC
FLUSHALL
"""


# WATCH, then a write (or none) to what it watches, then MULTI PING EXEC:
# the EXEC runs or fails alike (requests split at " | "; each case is
# followed by MULTI, PING, EXEC and a FLUSHALL).
WATCH_EDGES = [
    'set k v | WATCH k | set k v',
    'set k v | WATCH k | setrange k 0 \\e',
    'WATCH k | setrange k 0 \\e',
    'rpush k a b | WATCH k | ltrim k 0 -1',
    'WATCH k | ltrim k 0 -1',
    'WATCH k | expire k 100',
    'set k v | WATCH k | persist k',
    'set k v ex 100 | WATCH k | persist k',
    'hset k f v | WATCH k | hset k f v',
    'hset k f v | WATCH k | hsetnx k f x',
    'zadd k 1 m | WATCH k | zadd k 1 m',
    'zadd k 1 m | WATCH k | zadd k nx 2 m',
    'zadd k 1 m | WATCH k | zincrby k 0 m',
    'set k 1 | WATCH k | incrby k 0',
    'set k 1 | WATCH k | incrbyfloat k 0',
    'hset k f 1 | WATCH k | hincrby k f 0',
    'set k v | WATCH k | getex k',
    'set k v | WATCH k | getex k persist',
    'set k v | WATCH k | getex k ex 100',
    'set k v | WATCH k | getdel k',
    'WATCH k | getdel k',
    'set d x | WATCH d | sinterstore d nope1 nope2',
    'WATCH d | sinterstore d nope1 nope2',
    'WATCH d | sunionstore d nope1',
    'WATCH d | sdiffstore d nope1',
    'set k v | WATCH k | rename k k',
    'set k v | WATCH k | renamenx k k',
    'set k v | WATCH k | rename k j',
    'set k v | WATCH j | rename k j',
    'WATCH k | flushall',
    'WATCH k | flushdb',
    'set o v | WATCH k | flushall',
    'set k v | WATCH k | flushall',
    'WATCH k | del k',
    'sadd k a | WATCH k | srem k b',
    'rpush k a | WATCH k | lrem k 0 b',
    'WATCH k | lpushx k a',
    'WATCH k | spop k',
    'sadd k a | WATCH k | spop k 0',
    'rpush k a | WATCH k | lpop k 0',
    'zadd k 1 a | WATCH k | zpopmin k 0',
    'zadd k 1 a | WATCH k | zrem k b',
    'zadd k 1 a | WATCH k | zremrangebyscore k 5 6',
    'zadd k 1 a | WATCH k | zremrangebyrank k 5 6',
    'hset k f v | WATCH k | hdel k g',
    'sadd k a | WATCH k | smove k d zz',
    'sadd k a | WATCH k | smove k k a',
    'sadd k a | sadd d a | WATCH d | smove k d a',
    'rpush k a | WATCH k | lmove k k left right',
    'WATCH d | rpoplpush k d',
    'rpush k a | WATCH k | lset k 0 a',
    'rpush k a | WATCH k | linsert k before zz x',
    'set k v | WATCH k | append k \\e',
    'WATCH k | append k \\e',
    'set k v | WATCH k | setnx k x',
    'set k v | WATCH k | set k x nx',
    'WATCH k | set k x xx',
    'set k v | WATCH k | msetnx k x j y',
    'set k v | WATCH j | msetnx k x j y',
    'WATCH j | mset k x j y',
    'set k v | WATCH k | expire k 0',
    'set k v ex 100 | WATCH k | expire k 200 nx',
    'WATCH k | pexpireat k 1',
    'set k v ex 100 | WATCH k | expire k 100',
    'sadd k a | WATCH k | sadd k a',
    'WATCH k | publish k m',
    'set k v | set j v | WATCH k | del j',
    'set k v | WATCH k | unlink k',
    'set k v ex 100 | WATCH k | set k v keepttl',
    'set k v | WATCH k | getset k v',
    'set k v | WATCH k | setex k 100 v',
    'hset k f 1 | WATCH k | hincrbyfloat k f 0',
    'zadd k 1 a | WATCH k | zadd k xx 1 b',
    'zadd k 1 a | WATCH k | zadd k incr 0 a',
    'zadd k 5 a | WATCH k | zadd k gt 1 a',
]


def edge_requests():
    lines = EDGES.strip().split("\n")
    for case in WATCH_EDGES:
        lines += case.split(" | ") + ["MULTI", "PING", "EXEC", "FLUSHALL"]
    for line in lines[:-1]:
        yield [w.encode("latin-1").replace(b"\\s", b" ").replace(b"\\e", b"")
               for w in line.split(" ")]


def run_edges(a, b):
    """EDGES once, in order, on both; the number of differences."""
    bad = 0
    for c in (a, b):
        c.ask([b"FLUSHALL"])
    for cmd in edge_requests():
        x, y = a.ask(cmd), b.ask(cmd)
        if not same(cmd, x, y):
            bad += 1
            print("edge: %s" % fmt(cmd))
            print("  lull-kv      %r" % (x[0],))
            print("  redis-server %r" % (y[0],))
    return bad



# --matrix: every command of lull-kv's (a template each, K the key) on a
# key of each type and on a missing one, then with one argument fewer and
# with one and two more: WRONGTYPE, the order of checks and the arity of
# each, and what each left (the types and lists it may have written).
# Then each write on a key of each type that has a TTL, with sources and a
# destination that have theirs: the TTLs and types after it (which writes
# keep a TTL, which drop it, which move it). Then ZADD and ZINCRBY with
# each ordered choice of up to three options, and each number argument
# spelt as a hostile client spells it.
MATRIX = r"""
GET K
SET K v
SET K v GET
SETNX K v
GETSET K v
MGET K K
APPEND K v
STRLEN K
GETRANGE K 0 -1
SETRANGE K 1 v
INCR K
DECR K
INCRBY K 1
DECRBY K 1
INCRBYFLOAT K 1
GETDEL K
GETEX K
GETEX K PERSIST
GETEX K EX 100
SETEX K 100 v
PSETEX K 100000 v
DEL K
EXISTS K
TOUCH K
TYPE K
RENAME K dst
RENAMENX K dst
EXPIRE K 100
PEXPIRE K 100000
TTL K
PTTL K
PERSIST K
LPUSH K a
RPUSH K a
LPUSHX K a
RPUSHX K a
LPOP K
RPOP K 2
LLEN K
LINDEX K 0
LRANGE K 0 -1
LSET K 0 x
LREM K 0 a
LTRIM K 0 -1
LINSERT K BEFORE a x
LPOS K a
LPOS K a COUNT 0
LMOVE K dstl LEFT RIGHT
LMOVE srcl K LEFT RIGHT
RPOPLPUSH K dstl
RPOPLPUSH srcl K
SADD K a
SREM K a
SPOP K
SPOP K 2
SCARD K
SISMEMBER K a
SMISMEMBER K a b
SMEMBERS K
SSCAN K 0
SRANDMEMBER K -3
SMOVE K dsts a
SMOVE srcs K a
SINTER K srcs
SINTER srcs K
SUNION K srcs
SDIFF K srcs
SDIFF srcs K
SINTERSTORE dst2 K srcs
SUNIONSTORE dst2 srcs K
SDIFFSTORE dst2 srcs K
SINTERSTORE K srcs
SINTERCARD 2 K srcs
HSET K f v
HMSET K f v
HGET K f
HMGET K f g
HLEN K
HEXISTS K f
HDEL K f
HGETALL K
HKEYS K
HVALS K
HSETNX K f v
HSTRLEN K f
HINCRBY K f 1
HINCRBYFLOAT K f 1
HSCAN K 0
ZADD K 1 a
ZADD K INCR 1 a
ZINCRBY K 1 a
ZPOPMIN K
ZPOPMAX K 2
ZREM K a
ZCARD K
ZSCORE K a
ZMSCORE K a b
ZRANK K a
ZREVRANK K a
ZCOUNT K -inf +inf
ZRANGE K 0 -1
ZRANGE K -inf +inf BYSCORE
ZREVRANGE K 0 -1
ZRANGEBYSCORE K -inf +inf
ZREVRANGEBYSCORE K +inf -inf
ZREMRANGEBYRANK K 0 0
ZREMRANGEBYSCORE K 0 0
ZSCAN K 0
"""

MATRIX_SETUP = ["FLUSHALL", "SET str 5", "RPUSH lst a b a", "SADD set a b c",
                "HSET hsh f 5 g x", "ZADD zs 1 a 2 b", "RPUSH srcl q",
                "SADD srcs a z"]
MATRIX_AFTER = ["TYPE dst", "TYPE dst2", "LRANGE dstl 0 -1", "SMEMBERS dsts",
                "SMEMBERS srcs", "LRANGE srcl 0 -1"]

TTL_WRITES = r"""
SET K v
SET K v KEEPTTL
SETNX K v
GETSET K v
MSET K v
APPEND K v
SETRANGE K 5 zz
INCR K
INCRBYFLOAT K 1.5
GETEX K PERSIST
RENAME K dst
RENAME src K
RENAMENX src K
LPUSH K x
RPOP K
LSET K 0 q
LTRIM K 5 6
LINSERT K BEFORE a b
LMOVE K K LEFT RIGHT
LMOVE K dst LEFT RIGHT
LMOVE srcl K LEFT RIGHT
SADD K x
SPOP K
SMOVE K dst a
SMOVE srcs K z
SINTERSTORE K srcs
SUNIONSTORE K K srcs
SDIFFSTORE K K srcs
SINTERSTORE dst K
HSET K f v
HINCRBYFLOAT K f 1
ZADD K 5 a
ZINCRBY K 1 a
ZPOPMIN K
ZREMRANGEBYRANK K 0 0
"""

TTL_SETUPS = ["SET K 5", "RPUSH K a b", "SADD K a b", "HSET K f 5 g 6",
              "ZADD K 1 a 2 b"]
TTL_SETUP = ["EXPIRE K 100000", "SET dst 1", "EXPIRE dst 200000", "SET src 1",
             "EXPIRE src 300000", "RPUSH srcl q", "EXPIRE srcl 400000",
             "SADD srcs z", "EXPIRE srcs 500000"]
TTL_AFTER = ["TTL K", "TTL dst", "TTL src", "TTL srcl", "TTL srcs", "TYPE K",
             "TYPE dst"]

# N: an integer argument, F: a float one, B: a score bound.
NUMBERS = r"""
SET K v EX N
SET K v PX N
GETEX K EX N
SETEX K N v
EXPIRE K N
PEXPIREAT K N
INCRBY K N
DECRBY K N
INCRBYFLOAT K F
GETRANGE K N -1
SETRANGE K N x
LPOP lst N
LINDEX lst N
LRANGE lst N -1
LREM lst N a
LPOS lst a RANK N
LPOS lst a COUNT N
LPOS lst a MAXLEN N
SPOP set N
SRANDMEMBER set N
SINTERCARD N set
SINTERCARD 1 set LIMIT N
HINCRBY hsh f N
HINCRBYFLOAT hsh f F
ZADD zs F m
ZINCRBY zs F a
ZPOPMIN zs N
ZRANGE zs N -1
ZRANGE zs B +inf BYSCORE
ZRANGE zs -inf +inf BYSCORE LIMIT N 1
ZRANGE zs -inf +inf BYSCORE LIMIT 0 N
ZCOUNT zs B +inf
ZREMRANGEBYRANK zs N N
SCAN N
SCAN 0 COUNT N
SSCAN set N
HSCAN hsh 0 COUNT N
"""
NUM_SPELLINGS = [b"+5", b" 5", b"5 ", b"0x10", b"1e3", b"-0", b"nan", b"inf",
                 b"-inf", b"9223372036854775808", b"-9223372036854775809",
                 b"5\x00", b"", b"(5", b"(-0", b"1.5"]


def matrix_requests():
    """(request, compared) pairs: set-up requests are sent to both but
    not compared."""
    def words(line, k=None):
        return [(k if w == "K" else w).encode() for w in line.split(" ")]
    for line in MATRIX.strip().split("\n"):
        for k in ["str", "lst", "set", "hsh", "zs", "nokey"]:
            for st in MATRIX_SETUP:
                yield words(st), False
            yield words(line, k), True
            yield words("TYPE " + k), True
            for after in MATRIX_AFTER:
                yield words(after), True
        w = words(line, "str")
        for cmd in (w[:-1], w + [b"extra"], w + [b"extra", b"more"]):
            yield cmd, True
    for line in TTL_WRITES.strip().split("\n"):
        for setup in TTL_SETUPS:
            yield [b"FLUSHALL"], False
            for st in [setup] + TTL_SETUP:
                yield words(st, "key"), False
            yield words(line, "key"), True
            for after in TTL_AFTER:
                yield words(after, "key"), True
    # ZADD (and ZINCRBY) with every ordered choice of up to three of its
    # options, on a member there and one not, with a higher and a lower
    # score, nan and -inf
    opts = [b"NX", b"XX", b"GT", b"LT", b"CH", b"INCR"]
    for r in range(4):
        for combo in itertools.permutations(opts, r):
            for pairs in ([b"5", b"a"], [b"0", b"a"], [b"5", b"new"],
                          [b"0", b"new"], [b"5", b"a", b"0", b"new"],
                          [b"nan", b"a"], [b"-inf", b"a"]):
                yield [b"DEL", b"z"], False
                yield [b"ZADD", b"z", b"1", b"a", b"2", b"b"], False
                yield [b"ZADD", b"z"] + list(combo) + pairs, True
                yield [b"ZRANGE", b"z", b"0", b"-1", b"WITHSCORES"], True
            yield [b"DEL", b"z"], False
            yield [b"ZADD", b"z", b"1", b"a"], False
            yield [b"ZINCRBY", b"z"] + list(combo) + [b"2", b"a"], True
            yield [b"ZRANGE", b"z", b"0", b"-1", b"WITHSCORES"], True
    for line in NUMBERS.strip().split("\n"):
        for n in NUM_SPELLINGS:
            for st in MATRIX_SETUP + ["SET K 10"]:
                yield words(st, "K"), False
            yield [n if w in ("N", "F", "B") else (b"K" if w == "K" else
                   w.encode()) for w in line.split(" ")], True
            yield [b"TTL", b"K"], True
            yield [b"GET", b"K"], True


def run_matrix(a, b):
    """MATRIX, TTL_WRITES, ZADD's options and NUMBERS on both; the number of
    differences (SPOP's random picks compared as run_seed does)."""
    bad = 0
    n = 0
    for cmd, compared in matrix_requests():
        x, y = a.ask(cmd), b.ask(cmd)
        if not compared:
            continue
        n += 1
        if cmd[0] == b"SPOP" and isinstance(x[1], (list, bytes)) \
                and isinstance(y[1], (list, bytes)):
            ok = resync_spop(a, b, cmd, x[1], y[1])
        else:
            ok = same(cmd, x, y)
        if not ok:
            bad += 1
            print("matrix: %s" % fmt(cmd))
            print("  lull-kv      %r" % (x[0],))
            print("  redis-server %r" % (y[0],))
    print("%d matrix requests, %d differ" % (n, bad))
    return bad

# ----------------------------------------------------------- comparing

UNORDERED = {b"SMEMBERS", b"KEYS", b"HKEYS", b"HVALS", b"SINTER", b"SUNION",
             b"SDIFF"}


def pairs(v):
    return sorted(zip(v[0::2], v[1::2]))


def same(cmd, x, y):
    """Whether replies x and y (raw, parsed) to request cmd agree."""
    name = cmd[0].upper()
    (rx, vx), (ry, vy) = x, y
    if rx == ry:
        return True
    if name in UNORDERED and isinstance(vx, list) and isinstance(vy, list):
        return sorted(vx) == sorted(vy)
    if name == b"SRANDMEMBER" and isinstance(vx, list) \
            and isinstance(vy, list):
        # random picks: as many, distinct for a count >= 0
        return len(vx) == len(vy) and (cmd[2:3] and cmd[2].startswith(b"-")
                                       or len(set(vx)) == len(vx))
    if name == b"SRANDMEMBER" and isinstance(vx, bytes) \
            and isinstance(vy, bytes):
        return not isinstance(vx, Line) and not isinstance(vy, Line)
    if name == b"HGETALL" and isinstance(vx, list) and isinstance(vy, list):
        return len(vx) == len(vy) and pairs(vx) == pairs(vy)
    if name == b"SCAN" and isinstance(vx, list) and isinstance(vy, list):
        # one step: cursors and counts are the implementation's; only the
        # shape must agree, and the keys when both say they are done
        if not (len(vx) == len(vy) == 2 and isinstance(vx[1], list)
                and isinstance(vy[1], list)):
            return False
        if vx[0] == vy[0] == b"0" and cmd[1] in (b"0", b""):
            return sorted(set(vx[1])) == sorted(set(vy[1]))
        return True
    if name in (b"SSCAN", b"HSCAN", b"ZSCAN") and isinstance(vx, list) \
            and isinstance(vy, list):
        # as SCAN; a small collection comes whole from both, in an order
        # of each server's own (Redis': its listpack's or intset's)
        if not (len(vx) == len(vy) == 2 and isinstance(vx[1], list)
                and isinstance(vy[1], list)):
            return False
        if vx[0] == vy[0] == b"0" and cmd[2] in (b"0", b""):
            return members(name, vx[1]) == members(name, vy[1])
        return True
    if name == b"DBSIZE" and isinstance(vx, int) and isinstance(vy, int):
        # redis-server counts a key SET with a time already past until it
        # is next touched or its expiry cycle finds it; lull-kv never does
        return vx <= vy
    if name == b"PTTL" and isinstance(vx, int) and isinstance(vy, int):
        return vx >= 0 and vy >= 0 and abs(vx - vy) < 1000
    if name in (b"EXPIRETIME", b"PEXPIRETIME") and isinstance(vx, int) \
            and isinstance(vy, int):
        # a relative expiry's instant is each server's own clock's
        return vx >= 0 and vy >= 0 and \
            abs(vx - vy) <= (1000 if name == b"PEXPIRETIME" else 1)
    return False


def members(name, v):
    """A member scan's elements as a set: (field, value) pairs for HSCAN
    and ZSCAN."""
    return sorted(set(v)) if name == b"SSCAN" else sorted(set(pairs(v)))


def fmt(cmd):
    return b" ".join(repr(a)[2:-1].encode() if a else b'""' for a in cmd).decode()


class Diff(Exception):
    pass


def scan_all(c, args):
    """Walks a SCAN (SSCAN, HSCAN, ZSCAN) to cursor 0 (at most 10,000
    steps); the set of keys (members, pairs), or the raw first reply if
    it was not a scan reply."""
    keys = set()
    name = args[0].upper()
    at = 1 if name == b"SCAN" else 2  # where the cursor goes
    cur = b"0"
    for _ in range(10000):
        raw, v = c.ask(args[:at] + [cur] + args[at + 1:])
        if not (isinstance(v, list) and len(v) == 2):
            return raw
        cur = v[0]
        if name in (b"HSCAN", b"ZSCAN"):
            if not isinstance(v[1], list) or len(v[1]) % 2:
                return raw
            keys.update(pairs(v[1]))
        else:
            keys.update(v[1])
        if cur == b"0":
            return sorted(keys)
    return "no end"


CHANNELS = [b"c1", b"c2", b"news", b"", b"\x00\r\n"]
CPATTERNS = [b"c*", b"[^\xfe]*", b"c?", b"[", b"n[a-z]ws", b"\\*"]


def pubsub_step(r, a, b, sa, sb, subs, hist):
    """One request on the subscriber connections (sa, sb) or a PUBLISH on
    (a, b) with the messages it delivers; subs is the subscriber's
    [channels, patterns] as this script models them."""
    chans, pats = subs
    c = r.randrange(10)
    if c == 0:
        names = [r.choice(CHANNELS) for _ in range(r.randint(1, 3))]
        cmd, n = [b"SUBSCRIBE"] + names, len(names)
        chans.update(names)
    elif c == 1:
        names = [r.choice(CPATTERNS) for _ in range(r.randint(1, 2))]
        cmd, n = [b"PSUBSCRIBE"] + names, len(names)
        pats.update(names)
    elif c == 2:
        names = [r.choice(CHANNELS) for _ in range(r.randint(0, 2))]
        cmd = [b"UNSUBSCRIBE"] + names
        n = len(names) or max(1, len(chans))
        if names:
            chans.difference_update(names)
        else:
            chans.clear()
    elif c == 3:
        names = [r.choice(CPATTERNS) for _ in range(r.randint(0, 2))]
        cmd = [b"PUNSUBSCRIBE"] + names
        n = len(names) or max(1, len(pats))
        if names:
            pats.difference_update(names)
        else:
            pats.clear()
    elif c == 4:
        cmd, n = [b"PING"] + ([pick_word(r)] if r.random() < 0.5 else []), 1
    elif c == 5:
        cmd, n = r.choice([[b"GET", b"k"], [b"SET", b"k", b"v"],
                           [b"PUBLISH", b"c1", b"x"], [b"ECHO", b"x"],
                           [b"NOSUCH"], [b"subscribe"]]), 1
        if cmd == [b"subscribe"]:
            n = 1  # no channel: an arity error
    elif c == 6:
        # what the subscriber's channels and patterns add up to, asked
        # on another connection
        cmd = [b"PUBSUB"] + r.choice([
            [b"NUMSUB"] + [r.choice(CHANNELS) for _ in range(r.randint(0, 3))],
            [b"NUMPAT"], [b"CHANNELS"], [b"CHANNELS", r.choice(CPATTERNS)],
            [b"CHANNELS", b"*", b"x"], [b"NUMPAT", b"x"], [b"SHARDX"]])
        hist.append(cmd)
        x, y = a.ask(cmd), b.ask(cmd)
        if cmd[1] == b"CHANNELS" and isinstance(x[1], list):
            # in each server's own table order
            x, y = sorted(x[1]), (sorted(y[1]) if isinstance(y[1], list)
                                  else y)
        return (cmd, x, y) if x != y else None
    else:
        ch = r.choice(CHANNELS)
        cmd = [b"PUBLISH", ch, pick_word(r)]
        hist.append(cmd)
        x, y = a.ask(cmd), b.ask(cmd)
        if x != y:
            return cmd, x, y
        n = y[1] if isinstance(y[1], int) else 0
        mx = [sa.reply()[0] for _ in range(n)]
        my = [sb.reply()[0] for _ in range(n)]
        # a message per channel first, then per pattern in an order of
        # each server's own (Redis': its dict's)
        if sorted(mx) != sorted(my):
            return cmd + [b"(messages)"], (b"".join(mx),), (b"".join(my),)
        return None
    hist.append([b"(subscriber)"] + cmd)
    sa.send(cmd)
    sb.send(cmd)
    x = [sa.reply()[0] for _ in range(n)]
    y = [sb.reply()[0] for _ in range(n)]
    if len(cmd) == 1 and cmd[0] in (b"UNSUBSCRIBE", b"PUNSUBSCRIBE"):
        # all of them: docs/KV.md says oldest first, Redis' dict order; the
        # counts after each differ with the order, so the names compare
        x = [v[:v.rfind(b":")] for v in x]
        y = [v[:v.rfind(b":")] for v in y]
        x.sort()
        y.sort()
    if x != y:
        return [b"(subscriber)"] + cmd, (b"".join(x),), (b"".join(y),)
    return None


def proto_case(r, connect):
    """Pipelined requests, well-formed, inline and malformed, on fresh
    connections in one write: the bytes that come back before the server
    closes (or goes quiet) must be the same."""
    good = [b"*1\r\n$4\r\nPING\r\n", b"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n",
            b"*3\r\n$3\r\nSET\r\n$1\r\np\r\n$1\r\n1\r\n",
            b"*2\r\n$4\r\nINCR\r\n$1\r\np\r\n", b"PING\r\n", b"PING\n",
            b"ECHO hi\r\n", b"  ECHO   two  \r\n", b"\r\n", b"\n",
            b"   \r\n", b"ECHO a\tb\r\n", b"SET p 5\r\n", b"GET p\n",
            b"*0\r\n", b"*-1\r\n", b"*-5\r\n", b"get p\r\n",
            b"ECHO \x01\xff\r\n", b"ECHO a\rb\r\n", b"ECHO \x0ba\x0bb\x0c\r\n", b"INCR p\r\n",
            b"*1\r\n$3\r\nGET\r\n", b"ECHO\r\n", b"NOSUCH a\r\n"]
    bad = [b"*x\r\n", b"*1\r\n+x\r\n", b"*1\r\n$-1\r\n", b"*1\r\n$x\r\n",
           b"*2\r\n$3\r\nGET\r\n$01\r\np\r\n", b"*01\r\n$4\r\nPING\r\n",
           b"*3000000000\r\n", b"*1\r\n$536870913\r\n",
           b"*1\r\n:4\r\n", b"*1\r\n$ 4\r\nPING\r\n", b"*+1\r\n",
           b"*1\r\n$4 \r\nPING\r\n", b"*1 \r\n", b"*\r\n", b"*1\r\n$\r\n",
           b"*1\r\n$-0\r\n", b"*-0\r\n", b"*1\n$4\r\nPING\r\n",
           b"*1\r\n$4\nPING\r\n", b"*2\r\n$4\r\nECHO\r\n*1\r\n",
           b"*9223372036854775808\r\n", b"*1\r\n$9223372036854775808\r\n"]
    parts = [r.choice(good) for _ in range(r.randint(0, 4))]
    if r.random() < 0.7:
        parts.append(r.choice(bad))
    parts += [r.choice(good) for _ in range(r.randint(0, 2))]
    # QUIT: both close at once once they have read it all
    data = b"".join(parts) + b"QUIT\r\n"
    outs = []
    for c in connect():
        c.s.sendall(data)
        got = b""
        c.s.settimeout(0.3)
        try:
            while True:
                d = c.s.recv(65536)
                if not d:
                    got += b"<closed>"
                    break
                got += d
        except socket.timeout:
            got += b"<open>"
        except ConnectionResetError:
            got += b"<reset>"
        c.s.close()
        outs.append(got)
    return data, outs


def run_seed(a, b, seed, ncmds, verbose, sub=None, connect=None):
    r = random.Random(seed)
    REL[0] = 0
    if connect is not None:
        for _ in range(3):
            for c in (a, b):
                c.ask([b"FLUSHALL"])
            data, (x, y) = proto_case(r, connect)
            if x != y:
                raise Diff(seed, "protocol", [], [data], (x, x), (y, y))
    subs = [set(), set()]
    now_s = int(time.time())
    for c in (a, b):
        raw, _ = c.ask([b"FLUSHALL"])
        assert raw == b"+OK\r\n", raw
    hist = []
    multi = 0  # requests queued in the current MULTI on this side
    queued = []
    i = 0
    while i < ncmds:
        i += 1
        if sub is not None and multi == 0 and r.random() < 0.05:
            d = pubsub_step(r, a, b, sub[0], sub[1], subs, hist)
            if d is not None:
                raise Diff(seed, i, hist, *d)
            continue
        if r.random() < 0.02:
            # WATCH (refused inside MULTI) or UNWATCH: a later EXEC runs or
            # fails alike on both.
            if r.random() < 0.8:
                cmd = [b"WATCH"] + [pick_key(r) for _ in range(r.randint(1, 3))]
            else:
                cmd = [b"UNWATCH"]
        elif multi == 0 and r.random() < 0.03:
            cmd = [b"MULTI"]
            multi = 1
            queued = []
        elif multi and r.random() < 0.2:
            cmd = [r.choice([b"EXEC", b"EXEC", b"EXEC", b"DISCARD"])]
        else:
            cmd = gen(r, now_s, in_multi=bool(multi))
        hist.append(cmd)
        if verbose:
            print(seed, i, fmt(cmd))
        name = cmd[0].upper()
        walk = (name == b"SCAN" and cmd[1:2] == [b"0"]) or \
            (name in (b"SSCAN", b"HSCAN", b"ZSCAN") and cmd[2:3] == [b"0"])
        if walk and not multi and r.random() < 0.9:
            x, y = scan_all(a, cmd), scan_all(b, cmd)
            if x != y:
                raise Diff(seed, i, hist, cmd, (x, x), (y, y))
            continue
        x, y = a.ask(cmd), b.ask(cmd)
        if name == b"SPOP" and not multi and isinstance(x[1], (list, bytes)) \
                and isinstance(y[1], (list, bytes)):
            ok = resync_spop(a, b, cmd, x[1], y[1])
        elif name == b"EXEC" and isinstance(x[1], list) and isinstance(y[1], list):
            ok = len(x[1]) == len(y[1]) == len(queued) and all(
                same(q, (enc(u), u), (enc(w), w))
                for q, u, w in zip(queued, x[1], y[1]))
        else:
            ok = same(cmd, x, y)
        if not ok:
            raise Diff(seed, i, hist, cmd, x, y)
        if multi:
            if name == b"MULTI" and multi == 1 and len(cmd) == 1:
                multi = 2
            elif name in (b"EXEC", b"DISCARD") and len(cmd) == 1:
                multi = 0
            elif x[0] == b"+QUEUED\r\n":
                queued.append(cmd)
    if multi:
        a.ask([b"DISCARD"])
        b.ask([b"DISCARD"])
    # The whole keyspace at the end, as a last check of state.
    for k in KEYS:
        for cmd in ([b"TYPE", k], [b"DUMPVALUE", k]):
            if cmd[0] == b"DUMPVALUE":
                t = a.ask([b"TYPE", k])[1]
                cmd = {b"+string": [b"GET", k], b"+list": [b"LRANGE", k, b"0", b"-1"],
                       b"+set": [b"SMEMBERS", k], b"+hash": [b"HGETALL", k],
                       b"+zset": [b"ZRANGE", k, b"0", b"-1", b"WITHSCORES"],
                       b"+none": [b"EXISTS", k]}[t]
            x, y = a.ask(cmd), b.ask(cmd)
            if not same(cmd, x, y):
                raise Diff(seed, "end", hist, cmd, x, y)


def enc(v):
    """A parsed reply's RESP2 bytes (for EXEC's elements)."""
    if v is None:
        return b"$-1\r\n"
    if isinstance(v, int):
        return b":%d\r\n" % v
    if isinstance(v, tuple):
        return b"*-1\r\n"
    if isinstance(v, list):
        return b"*%d\r\n" % len(v) + b"".join(enc(e) for e in v)
    if isinstance(v, Line):
        return v + b"\r\n"
    return b"$%d\r\n%s\r\n" % (len(v), v)


def resync_spop(a, b, cmd, x, y):
    """SPOP takes random members: the replies agree in shape and size, and
    redis-server is then made to hold what lull-kv holds (its members
    added back, lull-kv's taken)."""
    if isinstance(x, list) != isinstance(y, list):
        return False
    if isinstance(x, list):
        if len(x) != len(y) or len(set(x)) != len(x):
            return False
        xs, ys = x, y
    else:
        if isinstance(x, Line) or isinstance(y, Line):
            return x == y
        xs, ys = [x], [y]
    if set(xs) == set(ys):
        return True
    k = cmd[1]
    if ys:
        b.ask([b"SADD", k] + ys)
    if xs:
        b.ask([b"SREM", k] + xs)
    # both hold the same members now (or neither the key)
    ma, mb = sorted(a.ask([b"SMEMBERS", k])[1]), sorted(b.ask([b"SMEMBERS", k])[1])
    if ma != mb:
        print("SPOP resync:", ma, mb, xs, ys)
    return ma == mb


def start(argv, ready, tmp, name):
    log = open(os.path.join(tmp, name + ".out"), "w+b")
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(200):
        log.seek(0)
        m = ready(log.read())
        if m is not None:
            return p, m
        if p.poll() is not None:
            break
        time.sleep(0.05)
    log.seek(0)
    sys.exit("%s did not start: %s" % (name, log.read()[-2000:]))


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    kv = args.pop(0)
    seeds, first, ncmds, verbose, edges = 50, 1, 300, False, False
    matrix = False
    while args:
        o = args.pop(0)
        if o == "--seeds":
            seeds = int(args.pop(0))
        elif o == "--first":
            first = int(args.pop(0))
        elif o == "--commands":
            ncmds = int(args.pop(0))
        elif o == "--verbose":
            verbose = True
        elif o == "--strings":
            global STRINGS
            STRINGS = True
        elif o == "--edges":
            edges = True
        elif o == "--matrix":
            matrix = True
        else:
            sys.exit("unknown option " + o)
    rs = shutil.which("redis-server")
    if rs is None:
        print("skipped: redis-server not installed")
        return 77  # ctest's SKIP_RETURN_CODE: a skip, not a pass
    tmp = tempfile.mkdtemp(prefix="lull-kvdiff.")
    sock = os.path.join(tmp, "redis.sock")
    procs = []
    try:
        def accepts(out):
            """redis-server is ready once its socket takes a connection: the
            file appears at bind(), before listen() (refused between)."""
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect(sock)
                return 1
            except OSError:
                return None
            finally:
                s.close()
        p, _ = start([rs, "--port", "0", "--unixsocket", sock, "--save", "",
                      "--appendonly", "no"], accepts, tmp, "redis")
        procs.append(p)

        def kv_port(out):
            for line in out.decode(errors="replace").splitlines():
                if line.startswith("lull-kv: listening on "):
                    return int(line.split()[3].split(" ")[0].rsplit(":", 1)[1])
            return None
        p, port = start([kv, "--port", "0"], kv_port, tmp, "lull-kv")
        procs.append(p)

        def connect():
            """A new connection to each: lull-kv's, redis-server's."""
            s = socket.socket(socket.AF_UNIX)
            s.connect(sock)
            return Conn(socket.create_connection(("127.0.0.1", port))), Conn(s)
        bad = 0
        if matrix:
            a, b = connect()
            return 1 if run_matrix(a, b) else 0
        if edges:
            a, b = connect()
            bad = run_edges(a, b)
            print("%d edge requests, %d differ" % (len(list(edge_requests())), bad))
            return 1 if bad else 0
        for seed in range(first, first + seeds):
            # fresh connections each seed: a transaction, a subscription or
            # a half-read reply may be left on the last ones
            a, b = connect()
            sub = connect()
            try:
                run_seed(a, b, seed, ncmds, verbose, sub, connect)
            except Diff as d:
                seed, i, hist, cmd, x, y = d.args
                bad += 1
                print("seed %d request %s: %s" % (seed, i, fmt(cmd)))
                print("  lull-kv      %r" % (x[0],))
                print("  redis-server %r" % (y[0],))
                print("  after: " + " | ".join(fmt(h) for h in hist[-12:-1]))
            for c in (a, b) + sub:
                c.s.close()
        print("%d seeds of %d requests, %d differ" % (seeds, ncmds, bad))
        return 1 if bad else 0
    finally:
        for p in procs:
            p.terminate()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
