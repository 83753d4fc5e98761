#!/usr/bin/env python3
"""fuzz_cmd_seeds.py: writes kv/fuzz_cmd_corpus, fuzz_cmd's seeds, from
readable programs: each a list of commands as a client sends them, and
the clock's and the replica's steps. The encoding is fuzz_cmd.c's (step,
argument, first_key); its tables are read from it, so the two cannot
drift apart. Run from anywhere: python3 kv/fuzz_cmd_seeds.py"""
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = open(os.path.join(HERE, "fuzz_cmd.c")).read()

names = re.findall(r'\{"([a-z]+)", (?:\'(.)\'|0)\}', SRC)
NAMES = [n for n, _ in names]
KEYOF = {n: k for n, k in names}
tok_block = SRC[SRC.index("tokens[] = {"):SRC.index("#define NTOKENS")]
TOKENS = [t.encode().decode("unicode_escape")
          for t in re.findall(r'"((?:[^"\\]|\\.)*)"', tok_block)]
NKEYS = 6
CLOCK_OPS = int(re.search(r"#define CLOCK_OPS (\d+)", SRC).group(1))
# The arities fuzz_cmd reads from the table: fixed (n) or "at least n".
ARITY = {}
for f in ("cmd.c", "cmd_types.c", "cmd_client.c"):
    for n, a in re.findall(r'\{"([a-z|]+)", (-?\d+),', open(os.path.join(HERE, f)).read()):
        ARITY.setdefault(n, int(a))
N = len(NAMES)


def token(t):
    return bytes([60 + TOKENS.index(t) - 0]) if TOKENS.index(t) >= NKEYS \
        else bytes([TOKENS.index(t)])


def command(words, who=0):
    name, args = words[0].lower(), words[1:]
    argc = 1 + len(args)
    ar = ARITY[name]
    if ar > 0 and argc == ar:
        how = 0
    elif ar < 0 and 0 <= argc + ar <= 3:
        how = argc + ar
    else:  # any count
        how = 12
    out = bytes([NAMES.index(name), (who << 7) | how])
    if how == 12:
        out += bytes([argc - 1])
    for i, a in enumerate(args):
        if i == 0 and KEYOF[name] and a in TOKENS[:NKEYS]:
            k = KEYOF[name]
            if k == "*":
                out += bytes([TOKENS.index(a)])
            elif k == "k":
                out += bytes([["k", "n"].index(a)])
            else:
                assert a == k, (name, a)
                out += b"\0"
        elif a in TOKENS:
            out += token(a)
        else:
            b = a.encode()
            assert len(b) < 19
            out += bytes([236 + len(b)]) + b
    return out


def clock(kind, arg=0):
    # op % 5: 0 ms, 1 s, 2 the expiry timer, 3 days, 4 the replica's lag
    op = next(o for o in range(CLOCK_OPS, 256) if o % 5 == kind)
    return bytes([op]) + (bytes([arg]) if kind in (0, 1, 3) else b"")


def program(*steps):
    out = b""
    for s in steps:
        out += s if isinstance(s, bytes) else command(s.split())
    return out


SEEDS = {
    "strings": program("SET k a", "APPEND k b", "GET k", "SETRANGE k 1 c",
                       "GETRANGE k 0 -1", "STRLEN k", "SET n 10", "INCR n",
                       "INCRBY n -2", "DECR n", "INCRBYFLOAT n 1.5",
                       "MSET k a n 1", "MGET k n", "GETSET k b", "SETNX k c",
                       "GETDEL k", "RENAME n k", "EXISTS k n", "DEL k"),
    "list": program("RPUSH l a b c", "LPUSH l 1 2", "LRANGE l 0 -1",
                    "LINDEX l 1", "LSET l 0 b", "LREM l 1 a", "LTRIM l 1 2",
                    "LLEN l", "LPOP l", "RPOP l 2", "RPUSHX l c"),
    "set": program("SADD s a b c", "SISMEMBER s a", "SCARD s",
                   "SMEMBERS s", "SREM s a", "SPOP s", "SSCAN s 0"),
    "hash": program("HSET h a 1 b 2", "HGET h a", "HINCRBY h a 2",
                    "HINCRBYFLOAT h b 1.5", "HSETNX h c 3", "HMGET h a c",
                    "HGETALL h", "HKEYS h", "HDEL h a", "HLEN h",
                    "HSTRLEN h b", "HSCAN h 0"),
    "zset": program("ZADD z 1 a 2 b", "ZINCRBY z 2 a", "ZSCORE z a",
                    "ZRANGE z 0 -1 WITHSCORES", "ZRANK z b",
                    "ZRANGEBYSCORE z (1 +inf", "ZCOUNT z -inf +inf",
                    "ZREMRANGEBYRANK z 0 0", "ZPOPMIN z", "ZCARD z"),
    "expiry": program("SET k a", "PEXPIRE k 100", "PTTL k", clock(0, 50),
                      "EXPIRE k 10", "TTL k", "PERSIST k", "SET n 1 PX 10",
                      clock(0, 20), "GET n", "SETEX k 1 a", clock(1, 2),
                      clock(2), "PEXPIREAT k 0", "GETEX k PX 10",
                      "EXPIRETIME k"),
    "lag": program(clock(4), "RPUSH l a b c", "PEXPIRE l 100",
                   "HSET h a 1", clock(0, 40), "HINCRBY h a 2",
                   clock(4), "LLEN l", clock(4), "SADD s a", clock(1, 1),
                   "ZADD z 1 a", clock(4)),
    "multi": program("MULTI", "SET k a", "RPUSH l a", "INCR n", "EXEC",
                     "MULTI", "GET k", "DISCARD", "DBSIZE", "TYPE l",
                     "KEYS *", "SCAN 0"),
    "pubsub": program("SUBSCRIBE a", "PUBLISH a b", "PSUBSCRIBE *a*",
                      "PUBSUB NUMSUB a", "UNSUBSCRIBE", "PUBSUB CHANNELS *a*",
                      "PUNSUBSCRIBE", "PUBSUB NUMPAT", "PING",
                      "CLIENT SETNAME a", "ECHO a", "FLUSHALL"),
}

if __name__ == "__main__":
    d = os.path.join(HERE, "fuzz_cmd_corpus")
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    for name, data in SEEDS.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
