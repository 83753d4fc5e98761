/* fuzz_cmd: a libFuzzer target for lull-kv's commands (cmd.c, cmd_types.c,
 * cmd_client.c), run as a connection runs them: kv_exec on a primary's
 * keyspace, for one of two clients, on a virtual clock, no sockets.
 *
 * An input is a short program. Each step is a byte choosing a command
 * from the table lull-kv serves (`names`: the table's, which a command
 * added to it adds to) (or moving the clock, or running the
 * expiry timer's kv_expire_due), a byte for its client, the case of
 * its name and its argument count, then its arguments: each a token chosen by a
 * byte from a list biased toward what commands trip over (integers at the edges
 * of their types, "inf", "nan", "(1", "-", "+", "", options, a few key names,
 * so that commands meet each other's keys and types), or raw bytes from the
 * input. After each step:
 *   - every byte the two clients were sent parses as complete RESP2
 *     replies (one for the command, more only for the (P)(UN)SUBSCRIBE
 *     family and the messages a PUBLISH delivered);
 *   - the keyspace's structures hold their invariants (check_store:
 *     hash chains, the expiry heap, every collection non-empty, the
 *     sorted set's skip list with its spans and back links);
 *   - a replica applies every record the step logged without error.
 * At the end the replica's keyspace equals the primary's (kv_dump), and
 * everything is freed (ASan's leak check).
 *
 *   built only by clang with -fsanitize=fuzzer support (kv/CMakeLists);
 *   ./fuzz_cmd -max_total_time=60 CORPUS_DIR kv/fuzz_cmd_corpus */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
 * server's own, is left out (kv_exec only hands it back). */
static const char *const names[] = {"get",
                                    "set",
                                    "setex",
                                    "psetex",
                                    "getdel",
                                    "getex",
                                    "incr",
                                    "decr",
                                    "incrby",
                                    "decrby",
                                    "incrbyfloat",
                                    "del",
                                    "unlink",
                                    "exists",
                                    "touch",
                                    "rename",
                                    "renamenx",
                                    "dbsize",
                                    "flushall",
                                    "flushdb",
                                    "expire",
                                    "pexpire",
                                    "expireat",
                                    "pexpireat",
                                    "ttl",
                                    "pttl",
                                    "expiretime",
                                    "pexpiretime",
                                    "persist",
                                    "keys",
                                    "scan",
                                    "type",
                                    "ping",
                                    "echo",
                                    "info",
                                    "quit",
                                    "command",
                                    "config",
                                    "mset",
                                    "mget",
                                    "setnx",
                                    "getset",
                                    "append",
                                    "strlen",
                                    "getrange",
                                    "setrange",
                                    "lpush",
                                    "rpush",
                                    "lpushx",
                                    "rpushx",
                                    "lpop",
                                    "rpop",
                                    "llen",
                                    "lindex",
                                    "lrange",
                                    "lset",
                                    "lrem",
                                    "ltrim",
                                    "sadd",
                                    "srem",
                                    "spop",
                                    "scard",
                                    "sismember",
                                    "smembers",
                                    "sscan",
                                    "hset",
                                    "hmset",
                                    "hget",
                                    "hmget",
                                    "hlen",
                                    "hexists",
                                    "hdel",
                                    "hgetall",
                                    "hincrbyfloat",
                                    "hincrby",
                                    "hkeys",
                                    "hvals",
                                    "hsetnx",
                                    "hstrlen",
                                    "hscan",
                                    "zadd",
                                    "zincrby",
                                    "zpopmin",
                                    "zrem",
                                    "zcard",
                                    "zscore",
                                    "zrange",
                                    "zrevrange",
                                    "zrangebyscore",
                                    "zrevrangebyscore",
                                    "zrank",
                                    "zrevrank",
                                    "zcount",
                                    "zremrangebyrank",
                                    "zremrangebyscore",
                                    "zscan",
                                    "client",
                                    "multi",
                                    "exec",
                                    "discard",
                                    "subscribe",
                                    "psubscribe",
                                    "unsubscribe",
                                    "punsubscribe",
                                    "publish",
                                    "auth",
                                    "select",
                                    "hello",
                                    "reset",
                                    "msetnx",
                                    "linsert",
                                    "lpos",
                                    "lmove",
                                    "rpoplpush",
                                    "smismember",
                                    "srandmember",
                                    "smove",
                                    "sinter",
                                    "sunion",
                                    "sdiff",
                                    "sinterstore",
                                    "sunionstore",
                                    "sdiffstore",
                                    "sintercard",
                                    "zpopmax",
                                    "zmscore"};
#define NNAMES (sizeof names / sizeof names[0])

/* Arguments: the keys first (a byte below NKEYS picks one), then numbers
 * and words that commands parse. */
#define NKEYS 6
static const char *const tokens[] = {"k",
                                     "l",
                                     "s",
                                     "h",
                                     "z",
                                     "n", /* keys of each type, and a counter */
                                     "",
                                     "0",
                                     "1",
                                     "-1",
                                     "2",
                                     "3",
                                     "10",
                                     "-2",
                                     "100",
                                     "-0",
                                     "007",
                                     "+1",
                                     " 1",
                                     "1 ",
                                     "0x10",
                                     "1.5",
                                     "-1.5",
                                     "0.1",
                                     "1e3",
                                     "1e308",
                                     "-1e308",
                                     "1e-320",
                                     "1e400",
                                     "9223372036854775807",
                                     "-9223372036854775808",
                                     "9223372036854775808",
                                     "-9223372036854775809",
                                     "18446744073709551615",
                                     "4294967295",
                                     "4294967296",
                                     "2147483647",
                                     "-2147483648",
                                     "2147483648",
                                     "536870911",
                                     "536870912",
                                     "1000000000000",
                                     "-1000000000000",
                                     "253402300800000",
                                     "inf",
                                     "-inf",
                                     "+inf",
                                     "nan",
                                     "-nan",
                                     "Infinity",
                                     "(1",
                                     "(",
                                     "(inf",
                                     "(-inf",
                                     "(nan",
                                     "[a",
                                     "(a",
                                     "-",
                                     "+",
                                     "[",
                                     "*",
                                     "?",
                                     "[a-",
                                     "\\",
                                     "*a*",
                                     "[^a]",
                                     "a",
                                     "b",
                                     "c",
                                     "NX",
                                     "XX",
                                     "GT",
                                     "LT",
                                     "CH",
                                     "INCR",
                                     "EX",
                                     "PX",
                                     "EXAT",
                                     "PXAT",
                                     "KEEPTTL",
                                     "GET",
                                     "PERSIST",
                                     "WITHSCORES",
                                     "LIMIT",
                                     "BYSCORE",
                                     "BYLEX",
                                     "REV",
                                     "MATCH",
                                     "COUNT",
                                     "TYPE",
                                     "string",
                                     "list",
                                     "zset",
                                     "AUTH",
                                     "SETNAME",
                                     "ID",
                                     "KILL",
                                     "LIST",
                                     "INFO",
                                     "GETNAME",
                                     "SKIPME",
                                     "USER",
                                     "ADDR",
                                     "yes",
                                     "no",
                                     "default",
                                     "HELP",
                                     "GET",
                                     "SET",
                                     "RESETSTAT",
                                     "maxmemory",
                                     "*max*",
                                     "all",
                                     "everything",
                                     "keyspace",
                                     "ch",
                                     "BEFORE",
                                     "AFTER",
                                     "LEFT",
                                     "RIGHT",
                                     "RANK",
                                     "MAXLEN",
                                     "x\r\ny",
                                     "\0a"};
#define NTOKENS (sizeof tokens / sizeof tokens[0])
#define RAW     236 /* an argument byte from here on: raw bytes */

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
                for (size_t i = 0; i < l->n; i++)
                    CHECK(list_at(l, i)->p);
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
    for (size_t i = 0; i < st->nheap; i++) {
        CHECK(st->heap[i].expire != 0);
        CHECK(store_obj(st->heap[i].e)->heap == i + 1);
        if (i) CHECK(st->heap[(i - 1) / 2].expire <= st->heap[i].expire);
    }
}

/* ----------------------------------------------------------- the run */

typedef struct run {
    kv p, r;          /* the primary, and a replica of it */
    uint64_t applied; /* the primary's log bytes the replica has */
    buf out[2];       /* each client's connection */
    kv_client cl[2];
    buf log; /* the step's records, for the replica */
} run;

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

/* One step of the program. */
static void step(run *t, input *in) {
    /* 218 of a byte's values name a command (each twice), the other 38
     * the clock's and the timer's steps. */
    uint8_t op = take(in);
    if (op >= 2 * NNAMES) {
        switch (op % 4) {
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
        default:
            now_ms += (int64_t)take(in) * 86400000;
        }
        replicate(t);
        check_store(&t->p.db);
        return;
    }
    op %= NNAMES;
    uint8_t how = take(in);
    int who = how >> 7;
    size_t argc = 1 + (how & 15) % MAX_ARGS;
    resp_arg a[MAX_ARGS];
    /* Arguments of raw bytes are copies of exactly their size, so ASan
     * sees a read past one. */
    char *raw[MAX_ARGS] = {0};
    /* The name in upper case, as clients send it, or (a bit of `how`)
     * as the table spells it. */
    char name[16];
    size_t nlen = strlen(names[op]);
    for (size_t i = 0; i < nlen; i++)
        name[i] = how & 0x40 ? names[op][i] : (char)(names[op][i] - 'a' + 'A');
    a[0] = (resp_arg){name, nlen};
    for (size_t i = 1; i < argc; i++) {
        uint8_t tok = take(in);
        /* Of a byte's values, 60 pick a key, 176 a token, 20 raw bytes
         * (0 to 19 of them). */
        if (tok < RAW) {
            size_t w = tok < 60 ? tok % NKEYS : (size_t)(tok - 60) % NTOKENS;
            /* The last token, "\0a", holds a NUL: strlen would stop. */
            a[i] =
                (resp_arg){tokens[w], w + 1 == NTOKENS ? 2 : strlen(tokens[w])};
        } else {
            size_t len = tok - RAW;
            if (len > in->n) len = in->n;
            raw[i] = malloc(len ? len : 1);
            memcpy(raw[i], in->p, len);
            in->p += len;
            in->n -= len;
            a[i] = (resp_arg){raw[i], len};
        }
    }
    buf *out = &t->out[who];
    size_t before = out->len;
    int rc = kv_exec(&t->p, &t->cl[who], a, argc, out);
    for (size_t i = 0; i < argc; i++)
        free(raw[i]);
    if (rc & KV_SERVER) abort(); /* REPLSYNC is not sent */
    if (out->over) { /* past the output limit (SRANDMEMBER k -10^12): the
                        connection closes, as lull-kv's would */
        kv_client_reset(&t->p, &t->cl[who]);
        buf_free(out);
        kv_client_init(&t->cl[who], NULL, out);
        replicate(t);
        check_store(&t->p.db);
        return;
    }
    /* The command's reply: exactly one, but for the commands that answer
     * each channel, and an EXEC that ran one of them (redis-server 7 too
     * answers EXEC of MULTI, SUBSCRIBE a b with *1 and two replies). */
    buf mine = {.p = out->p + before, .len = out->len - before};
    size_t n = replies(&mine);
    bool many = strstr(names[op], "subscribe") != NULL ||
                strcmp(names[op], "exec") == 0;
    if (n == 0 || (n != 1 && !many)) {
        fprintf(stderr, "fuzz_cmd: %s answered %zu replies: %.*s\n", names[op],
                n, (int)mine.len, mine.p);
        abort();
    }
    out->len = 0;
    replies(&t->out[!who]); /* what a PUBLISH sent it */
    t->out[!who].len = 0;
    if (rc & KV_QUIT) { /* the connection closes; another one comes */
        kv_client_reset(&t->p, &t->cl[who]);
        kv_client_init(&t->cl[who], NULL, out);
    }
    replicate(t);
    check_store(&t->p.db);
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
    /* The replica holds what the primary does. */
    buf dp = {0}, dr = {0};
    kv_dump(&t.p, &dp);
    kv_dump(&t.r, &dr);
    if (dp.len != dr.len || memcmp(dp.p, dr.p, dp.len) != 0) {
        fprintf(stderr, "fuzz_cmd: primary\n%s\nreplica\n%s\n", dp.p, dr.p);
        abort();
    }
    buf_free(&dp);
    buf_free(&dr);
    buf_free(&t.log);
    for (int i = 0; i < 2; i++) {
        kv_client_reset(&t.p, &t.cl[i]);
        buf_free(&t.out[i]);
    }
    kv_free(&t.p);
    kv_free(&t.r);
    return 0;
}
