/* model.h: a reference model of lull-kv's commands on strings, lists,
 * hashes, sets and sorted sets, with expiry, written apart from lull-kv's own
 * code (cmd.c): the reply each command must get and what each key holds
 * afterwards. The simulator (sim.c) checks every reply its clients get against
 * it, and tests/test_kv.c checks it against kv_exec directly.
 *
 * Time is uncertain: a client knows only that its command ran at some
 * instant between sending it and reading the reply, so a key whose expiry
 * falls in between may be there or gone, and a PEXPIREAT for an instant
 * in between may delete the key or arm it. The model keeps every state a
 * key may be in (its candidates): each command is worked out on each
 * candidate at each instant of its window where the outcome can change,
 * and only the outcomes whose reply is the reply received are kept. A
 * reply no candidate gives is a failure. Keys are independent (each
 * command but RENAME names one), so the uncertainty stays per key.
 * SETEX and PSETEX set an expiry relative to that unknown instant: a
 * state's expiry may be a range of ms, [expire, expire_hi], and a key in
 * it is there or gone at an instant inside it.
 *
 * Pure data: no lull, no sockets. */
#ifndef LULL_KV_MODEL_H
#define LULL_KV_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* A set is held as a hash of its members with empty values, a sorted set
 * as one of its members with their scores as Redis writes them (%.17g,
 * inf, -inf): both in byte order. */
enum {
    MODEL_NONE,
    MODEL_STRING,
    MODEL_LIST,
    MODEL_HASH,
    MODEL_SET,
    MODEL_ZSET
};

/* The longest value the model holds: a string's bytes, a list's items
 * each as a length byte and its bytes, or a hash's fields in byte order,
 * each as field and value, each a length byte and its bytes. The workload keeps
 * below it, and reaches past the write log's chunks in the simulator's small
 * mode and past 64 KiB (REPLY_HANDOVER) with its big values. */
#define MODEL_VAL_MAX (70 << 10)
/* The longest request model_request writes. */
#define MODEL_REQ_MAX (MODEL_VAL_MAX + 200)

/* One state of a key. */
typedef struct model_val {
    int type;          /* MODEL_* */
    int64_t expire;    /* ms on the server's clock; 0: none */
    int64_t expire_hi; /* the latest it may be (SETEX's window); equal to
                          expire when it is known */
    uint32_t len;      /* bytes of v */
    uint16_t items;    /* a list's items, a hash's fields */
    char v[MODEL_VAL_MAX];
} model_val;

/* The states a key may be in (a model_key is over 1 MiB: static, or
 * on the heap). */
#define MODEL_CANDIDATES 16
typedef struct model_key {
    int n; /* 1..MODEL_CANDIDATES */
    model_val c[MODEL_CANDIDATES];
} model_key;

enum {
    OP_SET,           /* SET k v */
    OP_SET_PXAT,      /* SET k v PXAT t */
    OP_SET_NX,        /* SET k v NX */
    OP_SET_XX,        /* SET k v XX */
    OP_GET,           /* GET k */
    OP_DEL,           /* DEL k */
    OP_INCR,          /* INCR k */
    OP_APPEND,        /* APPEND k v */
    OP_EXISTS,        /* EXISTS k */
    OP_PEXPIREAT,     /* PEXPIREAT k t */
    OP_PERSIST,       /* PERSIST k */
    OP_RPUSH,         /* RPUSH k v */
    OP_LPOP,          /* LPOP k */
    OP_LLEN,          /* LLEN k */
    OP_TYPE,          /* TYPE k */
    OP_INCRBY,        /* INCRBY k n (n in val) */
    OP_DECRBY,        /* DECRBY k n */
    OP_GETDEL,        /* GETDEL k */
    OP_GETEX_PXAT,    /* GETEX k PXAT t */
    OP_GETEX_PERSIST, /* GETEX k PERSIST */
    OP_INCRBYFLOAT,   /* INCRBYFLOAT k n (n in val) */
    OP_UNLINK,        /* UNLINK k */
    OP_TOUCH,         /* TOUCH k */
    OP_LREM,          /* LREM k count v (count in i1) */
    OP_LSET,          /* LSET k index v (index in i1) */
    OP_LTRIM,         /* LTRIM k start stop (i1, i2) */
    OP_RENAME,        /* RENAME k key2 (model_apply2) */
    OP_RENAMENX,      /* RENAMENX k key2 (model_apply2) */
    OP_HSET,          /* HSET k field v */
    OP_HSETNX,        /* HSETNX k field v */
    OP_HDEL,          /* HDEL k field */
    OP_HGET,          /* HGET k field */
    OP_HGETALL,       /* HGETALL k (its pairs in any order) */
    OP_HLEN,          /* HLEN k */
    OP_HINCRBY,       /* HINCRBY k field n (n in val) */
    OP_HINCRBYFLOAT,  /* HINCRBYFLOAT k field n (n in val) */
    OP_SETEX,         /* SETEX k i1 v (seconds) */
    OP_PSETEX,        /* PSETEX k i1 v (ms) */
    OP_LINSERT,       /* LINSERT k BEFORE (i1 < 0) or AFTER pivot (val)
                         field (the element: a short word) */
    OP_LMOVE,         /* LMOVE k key2 LEFT (i1 < 0) or RIGHT, LEFT (i2 <
                         0) or RIGHT (model_apply2) */
    OP_RPOPLPUSH,     /* RPOPLPUSH k key2 (model_apply2) */
    OP_LRANGE,        /* LRANGE k start stop (i1, i2) */
    OP_SETRANGE,      /* SETRANGE k offset v (offset in i1) */
    OP_PEXPIREAT_IF,  /* PEXPIREAT k t NX|XX|GT|LT (which: i2, 0 to 3) */
    OP_RPUSH_N,       /* RPUSH k v a v b v c v a ... (i2 items, at least
                         one: model.c's rpush_item) */
    OP_LPOS,          /* LPOS k v RANK i1 (0 sent as -1), COUNT i2 when
                         i2 >= 0 */
    OP_EXPIRE,        /* EXPIRE k i1 (seconds from the command's instant) */
    /* Sets and sorted sets: their members are field, and a second one,
     * "f<i2 + 2>", when i2 >= 0 (model.c's members); a count is i1 + 2,
     * sent when i2 >= 0. */
    OP_SADD,        /* SADD k members */
    OP_SREM,        /* SREM k members */
    OP_SMEMBERS,    /* SMEMBERS k (its members in any order) */
    OP_SISMEMBER,   /* SISMEMBER k field */
    OP_SCARD,       /* SCARD k */
    OP_SPOP,        /* SPOP k [count]: the members the reply names must
                       be there (model_apply), and they go */
    OP_SRANDMEMBER, /* SRANDMEMBER k [count]: the same, nothing goes */
    OP_SMOVE,       /* SMOVE k key2 field (model_apply2) */
    OP_SETOP,       /* SINTER, SUNION or SDIFF (i1 mod 3) of k and key2,
                       key2 first when i2 < 0 (model_apply2) */
    OP_SETOP_STORE, /* SINTERSTORE ... key2 of the same (model_apply2) */
    OP_ZADD,        /* ZADD k [NX XX GT LT CH INCR: flags] val field */
    OP_ZINCRBY,     /* ZINCRBY k val field */
    OP_ZREM,        /* ZREM k members */
    OP_ZSCORE,      /* ZSCORE k field */
    OP_ZCARD,       /* ZCARD k */
    OP_ZRANGE,      /* ZRANGE k i1 i2 [REV: flags & 1] [WITHSCORES: & 2] */
    OP_ZPOPMIN,     /* ZPOPMIN k [count] */
    OP_ZPOPMAX,     /* ZPOPMAX k [count] */
    /* Score bounds are model.c's zbounds[i1] (min) and zbounds[i2]
     * (max): "-inf", "(1.5", "+inf"... */
    OP_ZRANGEBYSCORE,    /* ZRANGE k min max BYSCORE [REV: flags & 1, max
                            first] [LIMIT off cnt: & 4] [WITHSCORES: & 2] */
    OP_ZCOUNT,           /* ZCOUNT k min max */
    OP_ZREMRANGEBYSCORE, /* ZREMRANGEBYSCORE k min max */
    OP_ZREMRANGEBYRANK,  /* ZREMRANGEBYRANK k i1 i2 */
    OP_ZRANK,            /* ZRANK k field, ZREVRANK when flags & 1 */
    OP_ZMSCORE,          /* ZMSCORE k members */
    OP_SADD_N,   /* SADD k of cnt members "m<(off + j) % 200>": sets past
                    lull-kv's SCAN_WHOLE (128), walked a part at a time */
    OP_ZADD_N,   /* ZADD k of the same, member j's score (off + j) % 7 - 3 */
    OP_SSCAN,    /* SSCAN k cursor COUNT cnt: the members the reply names
                    must be there (model_apply); a set of at most 128
                    comes whole, cursor 0 */
    OP_ZSCAN,    /* ZSCAN k cursor COUNT cnt: the same with their scores;
                    at most 128 come whole in the set's order */
    OP_GETRANGE, /* GETRANGE k i1 i2 */
    OP_COUNT,
    /* Not drawn: one key's part of a multi-key command (the simulator
     * checks MSET, MGET and DEL of several keys key by key). */
    OP_MGET_ONE = OP_COUNT, /* k's element of MGET's reply */
    /* Not drawn either: the simulator's seeds with `extra` send it for
     * half their HGETALLs. */
    OP_HSCAN /* HSCAN k cursor COUNT cnt: as ZSCAN, of a hash's fields
                and values; at most 128 come whole, in any order */
};

/* A command the model knows: one key (RENAME's two), and a value, a time
 * or indexes. */
typedef struct model_cmd {
    int op;
    char key[32];
    char key2[32];  /* RENAME's and RENAMENX's new name, LMOVE's and
                       RPOPLPUSH's destination (may be key) */
    char field[8];  /* the hash commands' field, LINSERT's element */
    char val[24];   /* SET, APPEND, RPUSH, LREM, LSET, HSET, HSETNX,
                       SETEX, PSETEX, SETRANGE; INCRBY's, DECRBY's, INCRBYFLOAT's
                       and the HINCRBYs' n */
    int64_t i1, i2; /* LREM's count, LSET's index, LTRIM's and LRANGE's
                       start and stop; SETEX's seconds, PSETEX's ms;
                       SETRANGE's offset */
    uint32_t pad;   /* SET: the value goes on with this many bytes of a
                       pattern (model_value), to reach large values */
    /* The pattern shifted by `shift` from its byte `cut` on: values of
     * one length that differ only past a prefix of any length. */
    uint32_t cut;
    uint8_t shift;
    uint8_t flags;    /* ZADD's options (MODEL_Z_*), ZRANGE's */
    int64_t at;       /* SET PXAT, PEXPIREAT (_IF), GETEX PXAT: ms on the
                         server's clock */
    int64_t off, cnt; /* ZRANGE BYSCORE's LIMIT; SADD_N's and ZADD_N's
                         first member and number; the SCANs' COUNT */
    uint64_t cursor;  /* SSCAN's and ZSCAN's */
} model_cmd;

enum {
    MODEL_Z_NX = 1,
    MODEL_Z_XX = 2,
    MODEL_Z_GT = 4,
    MODEL_Z_LT = 8,
    MODEL_Z_CH = 16,
    MODEL_Z_INCR = 32
};

/* The commands of two keys, which model_apply2 checks. */
static inline bool model_two_keys(int op) {
    return op == OP_RENAME || op == OP_RENAMENX || op == OP_LMOVE ||
           op == OP_RPOPLPUSH || op == OP_SMOVE || op == OP_SETOP ||
           op == OP_SETOP_STORE;
}

void model_key_init(model_key *k); /* one candidate: no key */

/* The command as words ("SET c1:k2 v7 PXAT 1700000000123"), for traces
 * and messages. */
void model_cmd_text(const model_cmd *c, char *out, size_t cap);

/* A SET's value (val, then pad bytes of a pattern, shifted from `cut`
 * on) into out (>= MODEL_VAL_MAX bytes); its length. */
size_t model_value(const model_cmd *c, char *out);

/* The request as RESP (multibulk) into out (>= MODEL_REQ_MAX bytes); its
 * length. */
size_t model_request(const model_cmd *c, char *out);

/* The command ran at some ms in [lo, hi] on one of k's states: keeps the
 * outcomes whose reply is reply[0, len). False (k unchanged) when none
 * is. */
bool model_apply(model_key *k, const model_cmd *c, int64_t lo, int64_t hi,
                 const char *reply, size_t len);

/* The same for model_two_keys' commands, whose outcome
 * links their two keys'
 * states (from: key, to: key2; one key when the names are equal). Each
 * key keeps the states some pair of candidates allows: a key's own
 * uncertainty, not which of one key's states goes with which of the
 * other's (looser than the truth, never tighter). */
bool model_apply2(model_key *from, model_key *to, const model_cmd *c,
                  int64_t lo, int64_t hi, const char *reply, size_t len);

/* Every command from now on runs at `lo` ms or later: states expired by
 * then are no key, and equal states merge. */
void model_settle(model_key *k, int64_t lo);

/* The reply a command gets on one state at one instant, into out (>=
 * MODEL_REQ_MAX bytes); its length. For messages (a RENAME's key2 taken as
 * missing). */
size_t model_reply(const model_val *s, const model_cmd *c, int64_t now,
                   char *out);

/* Whether some state of k is a key at some instant in [lo, hi] (*may),
 * and whether every state is one at every instant of it (*must): what a
 * KEYS or SCAN run in [lo, hi] may and must name. */
void model_exists(const model_key *k, int64_t lo, int64_t hi, bool *may,
                  bool *must);

/* A key as a store holds it, read into the model's terms (MODEL_NONE
 * when missing or expired at `now`). False when it holds what the model
 * does not know (another type, a longer value). */
bool model_from_store(const store *st, const char *key, int64_t now,
                      model_val *out);

/* to = from, copying only the bytes in use. */
void model_key_copy(model_key *to, const model_key *from);

/* s (a store's key, its expiry known) is one of k's candidates (after
 * model_settle): within a candidate's expiry range. */
bool model_key_has(const model_key *k, const model_val *s);

/* Into c->val, item i (modulo their number) of s's list, so LREM and
 * LINSERT find it: false (val unchanged) when s holds no list. */
bool model_list_item(const model_val *s, uint32_t i, model_cmd *c);

/* Into c->field, member i (modulo their number) of s's set or sorted
 * set, so SMOVE, SREM and ZREM find it: false (field unchanged) when s
 * holds neither. */
bool model_member(const model_val *s, uint32_t i, model_cmd *c);

/* SSCAN and ZSCAN walks (the SCAN guarantee: a member there for the
 * whole walk comes back at least once). The members as a set: must
 * holds those in every state of k (model_scan_keep: those still there),
 * seen those a reply named (model_scan_reply: its cursor into *cursor;
 * false when it is not a scan's reply). model_scan_missed: a member of
 * must not in seen, into out (>= 256 bytes), or false. */
void model_scan_begin(model_val *must, model_val *seen, const model_key *k);
void model_scan_keep(model_val *must, const model_key *k);
bool model_scan_reply(model_val *seen, const char *r, size_t len, bool pairs,
                      uint64_t *cursor);
bool model_scan_missed(const model_val *must, const model_val *seen, char *out);

/* A state as text, for messages ("string \"v1\" expire 123"). */
void model_describe(const model_val *s, char *out, size_t cap);

/* The length of the first complete RESP reply in p[0, n) (arrays
 * nested), 0 when it is not all there, -1 when it is not RESP. */
long model_reply_len(const char *p, size_t n);

#endif
