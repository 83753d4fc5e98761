/* fuzz_cmd: a libFuzzer target for lull-kv's commands (cmd.c, cmd_types.c,
 * cmd_client.c), run as a connection runs them: kv_exec on a primary's
 * keyspace, for one of two clients, on a virtual clock, no sockets.
 *
 * An input is a short program. Each step is a byte choosing a command
 * from the table lull-kv serves (or moving the clock, running the expiry
 * timer's kv_expire_due, or letting the replica fall behind or catch up),
 * a byte for its client, the case of its name and its argument count
 * (mostly as the command's arity says), then its arguments: the first,
 * most often, a key of the command's own type (so commands meet each
 * other's keys and types), the others each a token chosen by a byte from
 * a list biased toward what commands trip over (integers at the edges of
 * their types and of a string's forms, "inf", "nan", "(1", "-", "+", "",
 * options, the key names), raw bytes from the input, or a 64 KiB blob.
 * kv/fuzz_cmd_seeds.py writes the seeds from readable programs. After
 * each step:
 *   - every byte the two clients were sent parses as complete RESP2
 *     replies (one for the command, more only for the (P)(UN)SUBSCRIBE
 *     family and the messages a PUBLISH delivered);
 *   - the keyspace's structures hold their invariants (check_store:
 *     hash chains, the expiry heap, every collection non-empty, the
 *     sorted set's skip list with its spans and back links), and no
 *     command armed an expiry at or before its own ms;
 *   - a replica that has caught up applies every record the step logged
 *     without error, and its keyspace equals the primary's (kv_dump).
 * At the end the replica catches up and is compared once more, and
 * everything is freed (ASan's leak check). FUZZ_CMD_PLANT switches on one
 * of the simulator's planted bugs in the primary (test only).
 *
 *   built only by clang with -fsanitize=fuzzer support (kv/CMakeLists);
 *   ./fuzz_cmd -max_total_time=60 CORPUS_DIR kv/fuzz_cmd_corpus */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "cmd_int.h"
#include "dump.h"
#include "types.h"

#define MAX_ARGS  12
#define MAX_STEPS 64
/* A client's output hard limit: far above any reply of 64 steps of 12
 * arguments (the largest, an EXEC of 63 GETs of 64 KiB strings: 4 MiB)
 * but SRANDMEMBER's with a huge negative count, which only a limit ends
 * (lull-kv's and Redis' client-output-buffer-limit). */
#define OUT_MAX (16 << 20)

/* The table's names (cmd.c, cmd_types.c, cmd_client.c); REPLSYNC, the
 * server's own, is left out (kv_exec only hands it back). Each with the
 * key its first argument names most often: one of its type's (below),
 * '*' any key, 0 no key. So a list command meets the list the last
 * command left, not a string of the same name. */
static const struct {
    const char *name;
    char key;
} names[] = {
    {"get", 'k'},
    {"set", 'k'},
    {"setex", 'k'},
    {"psetex", 'k'},
    {"getdel", 'k'},
    {"getex", 'k'},
    {"incr", 'k'},
    {"decr", 'k'},
    {"incrby", 'k'},
    {"decrby", 'k'},
    {"incrbyfloat", 'k'},
    {"del", '*'},
    {"unlink", '*'},
    {"exists", '*'},
    {"touch", '*'},
    {"rename", '*'},
    {"renamenx", '*'},
    {"dbsize", 0},
    {"flushall", 0},
    {"flushdb", 0},
    {"expire", '*'},
    {"pexpire", '*'},
    {"expireat", '*'},
    {"pexpireat", '*'},
    {"ttl", '*'},
    {"pttl", '*'},
    {"expiretime", '*'},
    {"pexpiretime", '*'},
    {"persist", '*'},
    {"keys", 0},
    {"scan", 0},
    {"type", '*'},
    {"ping", 0},
    {"echo", 0},
    {"info", 0},
    {"quit", 0},
    {"command", 0},
    {"config", 0},
    {"mset", 'k'},
    {"mget", 'k'},
    {"setnx", 'k'},
    {"getset", 'k'},
    {"append", 'k'},
    {"strlen", 'k'},
    {"getrange", 'k'},
    {"setrange", 'k'},
    {"lpush", 'l'},
    {"rpush", 'l'},
    {"lpushx", 'l'},
    {"rpushx", 'l'},
    {"lpop", 'l'},
    {"rpop", 'l'},
    {"llen", 'l'},
    {"lindex", 'l'},
    {"lrange", 'l'},
    {"lset", 'l'},
    {"lrem", 'l'},
    {"ltrim", 'l'},
    {"sadd", 's'},
    {"srem", 's'},
    {"spop", 's'},
    {"scard", 's'},
    {"sismember", 's'},
    {"smembers", 's'},
    {"sscan", 's'},
    {"hset", 'h'},
    {"hmset", 'h'},
    {"hget", 'h'},
    {"hmget", 'h'},
    {"hlen", 'h'},
    {"hexists", 'h'},
    {"hdel", 'h'},
    {"hgetall", 'h'},
    {"hincrbyfloat", 'h'},
    {"hincrby", 'h'},
    {"hkeys", 'h'},
    {"hvals", 'h'},
    {"hsetnx", 'h'},
    {"hstrlen", 'h'},
    {"hscan", 'h'},
    {"zadd", 'z'},
    {"zincrby", 'z'},
    {"zpopmin", 'z'},
    {"zrem", 'z'},
    {"zcard", 'z'},
    {"zscore", 'z'},
    {"zrange", 'z'},
    {"zrevrange", 'z'},
    {"zrangebyscore", 'z'},
    {"zrevrangebyscore", 'z'},
    {"zrank", 'z'},
    {"zrevrank", 'z'},
    {"zcount", 'z'},
    {"zremrangebyrank", 'z'},
    {"zremrangebyscore", 'z'},
    {"zscan", 'z'},
    {"client", 0},
    {"multi", 0},
    {"exec", 0},
    {"discard", 0},
    {"subscribe", 0},
    {"psubscribe", 0},
    {"unsubscribe", 0},
    {"punsubscribe", 0},
    {"publish", 0},
    {"auth", 0},
    {"select", 0},
    {"hello", 0},
    {"reset", 0},
    {"msetnx", 'k'},
    {"linsert", 'l'},
    {"lpos", 'l'},
    {"lmove", 'l'},
    {"rpoplpush", 'l'},
    {"smismember", 's'},
    {"srandmember", 's'},
    {"smove", 's'},
    {"sinter", 's'},
    {"sunion", 's'},
    {"sdiff", 's'},
    {"sinterstore", '*'},
    {"sunionstore", '*'},
    {"sdiffstore", '*'},
    {"sintercard", 0},
    {"zpopmax", 'z'},
    {"zmscore", 'z'},
    {"pubsub", 0},
    {"watch", '*'},
    {"unwatch", 0},
};
#define NNAMES    (sizeof names / sizeof names[0])
#define CLOCK_OPS 218 /* a step's byte from here on: not a command */
_Static_assert(NNAMES <= CLOCK_OPS, "every command has a step byte");

/* Arguments: the keys first (a byte below NKEYS picks one), then numbers
 * and words that commands parse. */
#define NKEYS 6
static const char *const tokens[] = {
    "k", "l", "s", "h", "z", "n", /* keys of each type, and a counter */
    "", "0", "1", "-1", "2", "3", "10", "-2", "100", "-0", "007", "+1", " 1",
    "1 ", "0x10", "1.5", "-1.5", "0.1", "1e3", "1e308", "-1e308", "1e-320",
    "1e400", "9223372036854775807", "-9223372036854775808",
    "9223372036854775808", "-9223372036854775809", "18446744073709551615",
    "4294967295", "4294967296", "2147483647", "-2147483648", "2147483648",
    "536870911", "536870912", "1000000000000", "-1000000000000",
    "253402300800000",
    /* sizes at the edges of a string's
       forms: inline (KOBJ_INLINE, 8
       bytes), on the heap, a blob
       (KV_BLOB_MIN, 64 KiB), and past
       max_string (64 KiB here) */
    "7", "8", "9", "65535", "65536", "inf", "-inf", "+inf", "nan", "-nan",
    "Infinity", "(1", "(", "(inf", "(-inf", "(nan", "[a", "(a", "-", "+", "[",
    "*", "?", "[a-", "\\", "*a*", "[^a]", "a", "b", "c", "NX", "XX", "GT", "LT",
    "CH", "INCR", "EX", "PX", "EXAT", "PXAT", "KEEPTTL", "GET", "PERSIST",
    "WITHSCORES", "LIMIT", "BYSCORE", "BYLEX", "REV", "MATCH", "COUNT", "TYPE",
    "string", "list", "zset", "AUTH", "SETNAME", "ID", "KILL", "LIST", "INFO",
    "GETNAME", "SKIPME", "USER", "ADDR", "yes", "no", "default", "HELP", "GET",
    "SET", "RESETSTAT", "maxmemory", "*max*", "all", "everything", "keyspace",
    "ch", "BEFORE", "AFTER", "LEFT", "RIGHT", "RANK", "MAXLEN", "x\r\ny",
    "CHANNELS", "NUMSUB", "NUMPAT", "\0a"};
#define NTOKENS (sizeof tokens / sizeof tokens[0])
#define RAW                                                                    \
    236 /* an argument byte from here on: raw bytes (255: a big one)           \
         */

/* A byte at a time off the input; zeros once it is used up. */
typedef struct input {
    const uint8_t *p;
    size_t n;
} input;

static uint8_t take(input *in) {
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}

static int64_t now_ms = 1700000000000;
static int64_t virtual_clock(kv *k) {
    (void)k;
    return now_ms;
}

/* ------------------------------------------------------------- replies */

/* A CRLF-ended line at p[0, n): its length (without the CRLF), or -1. A
 * line may hold no CR or LF of its own. */
static long line(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\n') return -1;
        if (p[i] == '\r') return i + 1 < n && p[i + 1] == '\n' ? (long)i : -1;
    }
    return -1;
}

static bool integer(const char *p, size_t n, long long *v) {
    return kv_parse_i64(p, n, v);
}

/* One RESP2 reply at the front of p[0, n): its bytes, or 0 when it is not
 * one whole well-formed reply. */
static size_t reply(const char *p, size_t n, int depth) {
    if (n < 3 || depth > 32) return 0;
    long l = line(p + 1, n - 1);
    if (l < 0) return 0;
    size_t head = 1 + (size_t)l + 2;
    long long v;
    switch (p[0]) {
    case '+':
    case '-':
        return head;
    case ':':
        return integer(p + 1, (size_t)l, &v) ? head : 0;
    case '$':
        if (!integer(p + 1, (size_t)l, &v) || v < -1) return 0;
        if (v == -1) return head;
        if ((unsigned long long)v > n - head || n - head - (size_t)v < 2)
            return 0;
        if (p[head + v] != '\r' || p[head + v + 1] != '\n') return 0;
        return head + (size_t)v + 2;
    case '*':
        if (!integer(p + 1, (size_t)l, &v) || v < -1) return 0;
        for (long long i = 0; i < v; i++) {
            size_t r = reply(p + head, n - head, depth + 1);
            if (!r) return 0;
            head += r;
        }
        return head;
    default:
        return 0;
    }
}

/* b holds whole replies: how many (abort when it does not). */
static size_t replies(const buf *b) {
    size_t off = 0, count = 0;
    if (b->oom) abort();
    while (off < b->len) {
        size_t r = reply(b->p + off, b->len - off, 0);
        if (!r) {
            fprintf(stderr, "fuzz_cmd: malformed reply at %zu: %.*s\n", off,
                    (int)(b->len - off > 200 ? 200 : b->len - off), b->p + off);
            abort();
        }
        off += r;
        count++;
    }
    return count;
}

/* ------------------------------------------------------ the keyspace */

#define CHECK(c)                                                               \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "fuzz_cmd: %s:%d: %s\n", __FILE__, __LINE__, #c);  \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* Every entry in the chain its hash names, and count entries. */
static void check_dict(const dict *d) {
    size_t n = 0;
    CHECK(d->nbuckets == 0 || (d->nbuckets & (d->nbuckets - 1)) == 0);
    for (size_t b = 0; b < d->nbuckets; b++)
        for (dict_entry *e = d->buckets[b]; e; e = e->next) {
            CHECK((e->hash & (d->nbuckets - 1)) == b);
            CHECK(e->hash == (uint32_t)dict_hash(dict_key(d, e), e->klen));
            n++;
        }
    CHECK(n == d->count);
}

static bool zbefore(const kv_zset *z, const znode *a, const znode *b) {
    if (a->score != b->score) return a->score < b->score;
    size_t al, bl;
    const char *an = znode_name(z, a, &al), *bn = znode_name(z, b, &bl);
    int c = memcmp(an, bn, al < bl ? al : bl);
    return c < 0 || (c == 0 && al < bl);
}

static void check_zset(const kv_zset *z) {
    check_dict(&z->d);
    CHECK(z->nodes == z->d.count);
    CHECK(z->level >= 1 && z->level <= ZSET_MAXLEVEL);
    znode **at = malloc((z->nodes + 1) * sizeof *at);
    size_t n = 0;
    at[0] = z->head;
    for (znode *x = z->head->lv[0].fwd; x; x = x->lv[0].fwd) {
        CHECK(n < z->nodes);
        at[++n] = x;
        CHECK(!isnan(x->score));
        CHECK(zset_member(x->member)->node == x);
        CHECK(zset_member(x->member)->score == x->score);
        CHECK(x->back == (n == 1 ? NULL : at[n - 1]));
        if (n > 1) CHECK(zbefore(z, at[n - 1], x));
        CHECK(x->lv[0].span == 1 || !x->lv[0].fwd);
    }
    CHECK(n == z->nodes);
    CHECK(z->tail == (n ? at[n] : NULL));
    /* Each level's links land where their spans say. Each node's rank
     * is found by a search of at[]: nodes are few here. */
    for (int i = 0; i < ZSET_MAXLEVEL; i++) {
        if (i >= z->level) {
            CHECK(z->head->lv[i].fwd == NULL);
            continue;
        }
        size_t rank = 0;
        for (znode *x = z->head; x->lv[i].fwd; x = x->lv[i].fwd) {
            rank += x->lv[i].span;
            CHECK(rank <= n && at[rank] == x->lv[i].fwd);
        }
    }
    free(at);
}

static void check_store(const store *st) {
    const dict *d = &st->d;
    check_dict(d);
    size_t timed = 0;
    for (size_t b = 0; b < d->nbuckets; b++)
        for (dict_entry *e = d->buckets[b]; e; e = e->next) {
            kobj *o = store_obj(e);
            if (o->heap) {
                CHECK(o->heap <= st->nheap);
                CHECK(st->heap[o->heap - 1].e == e);
                timed++;
            }
            switch (o->type) {
            case KV_STRING:
                CHECK(o->len <= KOBJ_INLINE || o->val);
                break;
            case KV_LIST: {
                kv_list *l = o->val;
                CHECK(l && l->n > 0 && l->n <= l->cap);
                CHECK((l->cap & (l->cap - 1)) == 0);
                for (size_t i = 0; i < l->n; i++) /* short ones inline */
                    CHECK(list_at(l, i)->len <= KV_ELEM_INLINE ||
                          list_at(l, i)->u.heap);
                break;
            }
            case KV_SET: {
                kv_set *s = o->val;
                CHECK(s && s->d.count > 0 && s->d.count <= s->cap);
                check_dict(&s->d);
                for (size_t i = 0; i < s->d.count; i++)
                    CHECK(*(size_t *)dict_data(s->arr[i]) == i);
                break;
            }
            case KV_HASH: {
                kv_hash *h = o->val;
                CHECK(h && h->d.count > 0);
                check_dict(&h->d);
                break;
            }
            case KV_ZSET:
                CHECK(o->val && zset_len(o->val) > 0);
                check_zset(o->val);
                break;
            default:
                CHECK(!"a key of no type");
            }
        }
    CHECK(timed == st->nheap);
    uint64_t sum[2] = {0, 0}; /* the heap's times, summed afresh */
    for (size_t i = 0; i < st->nheap; i++) {
        CHECK(st->heap[i].expire != 0);
        CHECK(store_obj(st->heap[i].e)->heap == i + 1);
        if (i) CHECK(st->heap[(i - 1) / 2].expire <= st->heap[i].expire);
        uint64_t lo = sum[0] + (uint64_t)st->heap[i].expire;
        sum[1] += lo < sum[0];
        sum[0] = lo;
    }
    /* what INFO keyspace's avg_ttl is worked out from, kept as it went */
    CHECK(sum[0] == st->expire_sum[0] && sum[1] == st->expire_sum[1]);
}

/* Redis' expiry contract: a time at or before the command's own ms
 * (EXPIRE k 0, GETEX k PXAT in the past) deletes the key, it never arms
 * it. So every expiry time a command leaves that is not later than now
 * was there before it (a RENAME moves one, a refusal keeps one). SET is
 * the exception (redis-server 7.0 arms `SET k v PXAT 10`; the key is gone
 * at its next look), and so is an EXEC, which may run one. */
#define MAX_EXPIRIES 1024
static size_t expiries_of(const store *st, int64_t *at) {
    if (st->nheap > MAX_EXPIRIES) return SIZE_MAX; /* too many: unchecked */
    for (size_t i = 0; i < st->nheap; i++)
        at[i] = st->heap[i].expire;
    return st->nheap;
}

static void check_new_expiries(const store *st, const int64_t *at, size_t n) {
    if (n == SIZE_MAX) return;
    for (size_t i = 0; i < st->nheap; i++) {
        if (st->heap[i].expire > now_ms) continue;
        size_t j = 0;
        while (j < n && at[j] != st->heap[i].expire)
            j++;
        CHECK(j < n);
    }
}

/* ----------------------------------------------------------- the run */

typedef struct run {
    kv p, r;          /* the primary, and a replica of it */
    uint64_t applied; /* the primary's log bytes the replica has */
    buf out[2];       /* each client's connection */
    kv_client cl[2];
    buf log;    /* the step's records, for the replica */
    bool lag;   /* the replica applies nothing until it catches up */
    buf dp, dr; /* the two keyspaces' dumps */
} run;

/* The replica holds what the primary does: checked after every step it
 * has caught up on, as a later one may undo a difference (an LTRIM off
 * by one, then an RPOP of the whole list). */
static void same(run *t) {
    t->dp.len = t->dr.len = 0;
    kv_dump(&t->p, &t->dp);
    kv_dump(&t->r, &t->dr);
    if (t->dp.len != t->dr.len || memcmp(t->dp.p, t->dr.p, t->dp.len) != 0) {
        fprintf(stderr, "fuzz_cmd: primary\n%.*s\nreplica\n%.*s\n",
                (int)t->dp.len, t->dp.p, (int)t->dr.len, t->dr.p);
        abort();
    }
}

/* Whatever the step logged, applied on the replica: every byte taken,
 * without a refusal (a record the primary wrote fails nowhere). */
static void replicate(run *t) {
    repl_log *log = &t->p.log;
    if (log->end == t->applied) return;
    repl_cursor cur;
    CHECK(repl_log_seek(log, t->applied, &cur) == 0);
    t->log.len = 0;
    size_t len;
    const char *rec;
    while ((rec = repl_log_next(log, &cur, &len)))
        buf_put(&t->log, rec, len);
    CHECK(!t->log.oom && t->applied + t->log.len == log->end);
    /* Records of more arguments than a command had: SPOP's SREM of up to
     * 1,024 members (SPOP_BATCH), ZPOPMIN's ZREM. */
    static resp_arg argv[4096];
    resp_limits lim = {.max_bulk = 1 << 30, .max_args = 4096};
    const char *err = NULL;
    size_t need;
    long n =
        kv_apply_stream(&t->r, &lim, argv, t->log.p, t->log.len, &err, &need);
    if (n != (long)t->log.len) {
        fprintf(stderr, "fuzz_cmd: the replica took %ld of %zu: %s\n%.*s\n", n,
                t->log.len, err ? err : "", (int)t->log.len, t->log.p);
        abort();
    }
    t->applied = log->end;
}

static bool fewer_than_8(void *arg) {
    return ++*(int *)arg < 8;
}

/* An argument by a byte of the input: of its values, 60 pick a key,
 * 176 a token, 19 raw bytes (0 to 18 of them), and 255 a big value (a
 * blob: KV_BLOB_MIN bytes of one byte of the input, the last another)
 * that no input of 4 KiB could spell. Raw and big ones are copies of
 * exactly their size in *raw, so ASan sees a read past one. */
static resp_arg argument(input *in, uint8_t tok, char **raw) {
    if (tok < RAW) {
        size_t w = tok < 60 ? tok % NKEYS : (size_t)(tok - 60) % NTOKENS;
        /* The last token, "\0a", holds a NUL: strlen would stop. */
        return (resp_arg){tokens[w], w + 1 == NTOKENS ? 2 : strlen(tokens[w])};
    }
    if (tok == 255) {
        *raw = malloc(KV_BLOB_MIN);
        memset(*raw, take(in), KV_BLOB_MIN);
        (*raw)[KV_BLOB_MIN - 1] = (char)take(in);
        return (resp_arg){*raw, KV_BLOB_MIN};
    }
    size_t len = tok - RAW;
    if (len > in->n) len = in->n;
    *raw = malloc(len ? len : 1);
    memcpy(*raw, in->p, len);
    in->p += len;
    in->n -= len;
    return (resp_arg){*raw, len};
}

/* The key a command's first argument names, by a byte: below 160, one
 * of its type's ("k" or "n" for a string); else as any argument. */
static resp_arg first_key(input *in, char key, uint8_t b, char **raw) {
    if (b < 160 && key == '*') return (resp_arg){tokens[b % NKEYS], 1};
    if (b < 160) {
        static const char *const str[] = {"k", "n"};
        if (key == 'k') return (resp_arg){str[b & 1], 1};
        for (size_t i = 0; i < NKEYS; i++)
            if (tokens[i][0] == key) return (resp_arg){tokens[i], 1};
    }
    return argument(in, b, raw);
}

/* After a command: a replica that has caught up applies its records and
 * equals the primary; the keyspace holds; no expiry left at or before now
 * (expiries: the keyspace's before the command). */
static void step_checked(run *t, const int64_t *expiries, size_t nexp) {
    if (!t->lag) {
        replicate(t);
        same(t);
    }
    check_store(&t->p.db);
    check_new_expiries(&t->p.db, expiries, nexp);
}

/* One step of the program. */
static void step(run *t, input *in) {
    /* A byte's values below CLOCK_OPS name a command (op % NNAMES), the
     * other 38 the clock's, the timer's and the replica's steps: a fixed
     * share, whatever the table's length. */
    uint8_t op = take(in);
    if (op >= CLOCK_OPS) {
        switch (op % 5) {
        case 0: /* time goes on: by 0 to 255 ms, or as many seconds */
            now_ms += take(in);
            break;
        case 1:
            now_ms += (int64_t)take(in) * 1000;
            break;
        case 2: { /* the expiry timer fires */
            int steps = 0;
            kv_expire_due(&t->p, fewer_than_8, &steps);
            break;
        }
        case 3:
            now_ms += (int64_t)take(in) * 86400000;
            break;
        default: /* the replica falls behind, or catches up: it applies
                    the log later than the primary wrote it, as a real
                    one does */
            t->lag = !t->lag;
        }
        if (!t->lag) {
            replicate(t);
            same(t);
        }
        check_store(&t->p.db);
        return;
    }
    op %= NNAMES;
    uint8_t how = take(in);
    int who = how >> 7;
    /* The argument count: mostly as the command's arity says (a count
     * of "at least n" with up to 3 more), else any (refusals). */
    size_t argc;
    char name[16];
    size_t nlen = strlen(names[op].name);
    for (size_t i = 0; i < nlen; i++)
        name[i] = (char)(names[op].name[i] - 'a' + 'A');
    const kv_cmd *c = kv_command(&(resp_arg){name, nlen});
    if ((how & 15) < 12 && c) {
        argc = c->arity > 0 ? (size_t)c->arity
                            : (size_t)-c->arity + (how & 15) % 4;
        if (argc > MAX_ARGS) argc = MAX_ARGS;
    } else {
        argc = 1 + take(in) % MAX_ARGS;
    }
    resp_arg a[MAX_ARGS];
    char *raw[MAX_ARGS] = {0};
    /* The name in upper case, as clients send it, or (a bit of `how`)
     * as the table spells it. */
    if (how & 0x40) memcpy(name, names[op].name, nlen);
    a[0] = (resp_arg){name, nlen};
    for (size_t i = 1; i < argc; i++)
        a[i] = i == 1 && names[op].key
                   ? first_key(in, names[op].key, take(in), &raw[i])
                   : argument(in, take(in), &raw[i]);
    buf *out = &t->out[who];
    size_t before = out->len;
    int64_t expiries[MAX_EXPIRIES];
    size_t nexp = strcmp(names[op].name, "set") == 0 ||
                          strcmp(names[op].name, "exec") == 0
                      ? SIZE_MAX /* unchecked */
                      : expiries_of(&t->p.db, expiries);
    int rc = kv_exec(&t->p, &t->cl[who], a, argc, out);
    for (size_t i = 0; i < argc; i++)
        free(raw[i]);
    if (rc & KV_SERVER) abort(); /* REPLSYNC is not sent */
    if (out->over) { /* past the output limit (SRANDMEMBER k -10^12): the
                        connection closes, as lull-kv's would */
        kv_client_reset(&t->p, &t->cl[who]);
        buf_free(out);
        kv_client_init(&t->cl[who], NULL, out);
        step_checked(t, expiries, nexp);
        return;
    }
    /* The command's reply: exactly one, but for the commands that answer
     * each channel, and an EXEC that ran one of them (redis-server 7 too
     * answers EXEC of MULTI, SUBSCRIBE a b with *1 and two replies). */
    buf mine = {.p = out->p + before, .len = out->len - before};
    size_t n = replies(&mine);
    bool many = strstr(names[op].name, "subscribe") != NULL ||
                strcmp(names[op].name, "exec") == 0;
    if (n == 0 || (n != 1 && !many)) {
        fprintf(stderr, "fuzz_cmd: %s answered %zu replies: %.*s\n",
                names[op].name, n, (int)mine.len, mine.p);
        abort();
    }
    out->len = 0;
    replies(&t->out[!who]); /* what a PUBLISH sent it */
    t->out[!who].len = 0;
    if (rc & KV_QUIT) { /* the connection closes; another one comes */
        kv_client_reset(&t->p, &t->cl[who]);
        kv_client_init(&t->cl[who], NULL, out);
    }
    step_checked(t, expiries, nexp);
}

/* Test only: FUZZ_CMD_PLANT names one of the simulator's planted bugs
 * (sim.c) that live where this target reaches — the commands, the
 * keyspace, the write log's records — switched on in the primary alone:
 * the replica, applying the log with the code as it is, is what the
 * primary is compared with. The fuzzer's strength is measured by how soon
 * it finds one (kv.fuzz_cmd_plant). */
static const struct {
    const char *name;
    unsigned bit;
} plants[] = {{"ack-before-log", KV_PLANT_ACK_BEFORE_LOG},
              {"expire-relative", KV_PLANT_EXPIRE_RELATIVE},
              {"int32", KV_PLANT_INT32},
              {"expire-now", KV_PLANT_EXPIRE_NOW},
              {"same-length", KV_PLANT_SAME_LENGTH},
              {"ltrim-off", KV_PLANT_LTRIM_OFF},
              {"hincrby-set", KV_PLANT_HINCRBY_SET}};
static unsigned plant;

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *name = getenv("FUZZ_CMD_PLANT");
    if (!name || !*name) return 0;
    for (size_t i = 0; i < sizeof plants / sizeof plants[0]; i++)
        if (strcmp(plants[i].name, name) == 0) plant = plants[i].bit;
    if (!plant) {
        fprintf(stderr, "fuzz_cmd: FUZZ_CMD_PLANT=%s: no such plant\n", name);
        exit(2);
    }
    return 0;
}

static int64_t log_clock(void *arg) {
    (void)arg;
    return now_ms;
}

static void open_kv(kv *k, bool replica) {
    kv_init(k);
    if (store_init(&k->db) < 0) abort();
    k->replica = replica;
    memset(k->replid, 'a', 40);
    k->clock = virtual_clock;
    /* proto-max-bulk-len: lull-kv's default is Redis' 512 MB; a fuzzer's
     * SETRANGE there would only measure malloc. */
    k->max_string = 1 << 16;
    if (!replica && plant) {
        k->plant = k->log.plant = plant;
        k->log.clock = log_clock;
        k->db.plant_int32 = plant & KV_PLANT_INT32;
        k->db.plant_same_length = plant & KV_PLANT_SAME_LENGTH;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    static run t;
    memset(&t, 0, sizeof t);
    now_ms = 1700000000000;
    open_kv(&t.p, false);
    open_kv(&t.r, true);
    t.p.log.backlog = 0; /* every record kept: the replica reads them */
    repl_log_keep(&t.p.log);
    t.out[0].max = t.out[1].max = OUT_MAX;
    kv_client_init(&t.cl[0], NULL, &t.out[0]);
    kv_client_init(&t.cl[1], NULL, &t.out[1]);
    input in = {data, size};
    for (int s = 0; s < MAX_STEPS && in.n; s++)
        step(&t, &in);
    replicate(&t);
    same(&t);
    buf_free(&t.dp);
    buf_free(&t.dr);
    buf_free(&t.log);
    for (int i = 0; i < 2; i++) {
        kv_client_reset(&t.p, &t.cl[i]);
        buf_free(&t.out[i]);
    }
    kv_free(&t.p);
    kv_free(&t.r);
    return 0;
}
