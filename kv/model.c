/* model.c: the reference model of lull-kv's string, list, hash, set and
 * sorted set commands
 * (see model.h). Written from Redis' documented behaviour, not from
 * cmd.c: a reply both agree on is evidence, not an echo. */
#include "model.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "types.h"

#define WRONGTYPE                                                              \
    "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
#define NOT_INTEGER "-ERR value is not an integer or out of range\r\n"
#define OVERFLOW    "-ERR increment or decrement would overflow\r\n"
#define DECR_MIN    "-ERR decrement would overflow\r\n"
#define NOT_FLOAT   "-ERR value is not a valid float\r\n"
#define NAN_OR_INF  "-ERR increment would produce NaN or Infinity\r\n"
#define H_NOT_INT   "-ERR hash value is not an integer\r\n"
#define H_NOT_FLOAT "-ERR hash value is not a float\r\n"
#define BY_INF      "-ERR value is NaN or Infinity\r\n"

void model_key_init(model_key *k) {
    k->n = 1;
    memset(&k->c[0], 0, offsetof(model_val, v)); /* no bytes: no key */
}

static size_t put(char *out, size_t at, const char *s, size_t n) {
    memcpy(out + at, s, n);
    return at + n;
}

/* A constant reply. */
static size_t put_s(char *out, const char *s) {
    return put(out, 0, s, strlen(s));
}

static size_t put_bulk(char *out, size_t at, const char *s, size_t n) {
    at += (size_t)sprintf(out + at, "$%zu\r\n", n);
    at = put(out, at, s, n);
    return put(out, at, "\r\n", 2);
}

static const char *const names[OP_HSCAN + 1] = {"SET",
                                                "SET",
                                                "SET",
                                                "SET",
                                                "GET",
                                                "DEL",
                                                "INCR",
                                                "APPEND",
                                                "EXISTS",
                                                "PEXPIREAT",
                                                "PERSIST",
                                                "RPUSH",
                                                "LPOP",
                                                "LLEN",
                                                "TYPE",
                                                "INCRBY",
                                                "DECRBY",
                                                "GETDEL",
                                                "GETEX",
                                                "GETEX",
                                                "INCRBYFLOAT",
                                                "UNLINK",
                                                "TOUCH",
                                                "LREM",
                                                "LSET",
                                                "LTRIM",
                                                "RENAME",
                                                "RENAMENX",
                                                "HSET",
                                                "HSETNX",
                                                "HDEL",
                                                "HGET",
                                                "HGETALL",
                                                "HLEN",
                                                "HINCRBY",
                                                "HINCRBYFLOAT",
                                                "SETEX",
                                                "PSETEX",
                                                "LINSERT",
                                                "LMOVE",
                                                "RPOPLPUSH",
                                                "LRANGE",
                                                "SETRANGE",
                                                "PEXPIREAT",
                                                "RPUSH",
                                                "LPOS",
                                                "EXPIRE",
                                                "SADD",
                                                "SREM",
                                                "SMEMBERS",
                                                "SISMEMBER",
                                                "SCARD",
                                                "SPOP",
                                                "SRANDMEMBER",
                                                "SMOVE",
                                                "SINTER",
                                                "SINTERSTORE",
                                                "ZADD",
                                                "ZINCRBY",
                                                "ZREM",
                                                "ZSCORE",
                                                "ZCARD",
                                                "ZRANGE",
                                                "ZPOPMIN",
                                                "ZPOPMAX",
                                                "ZRANGE",
                                                "ZCOUNT",
                                                "ZREMRANGEBYSCORE",
                                                "ZREMRANGEBYRANK",
                                                "ZRANK",
                                                "ZMSCORE",
                                                "SADD",
                                                "ZADD",
                                                "SSCAN",
                                                "ZSCAN",
                                                "GETRANGE",
                                                "MGET",
                                                "HSCAN"};

/* Score bounds (OP_ZRANGEBYSCORE's, ZCOUNT's, ZREMRANGEBYSCORE's, by
 * i1 and i2): inclusive and exclusive at the workload's scores, and the
 * infinities, both spellings, exclusive too. */
static const char *const zbounds[16] = {
    "-inf", "+inf", "(1.5", "1", "(1",  "2",    "(2",    "0",
    "(0",   "-1",   "(-1",  "3", "1.5", "(inf", "(-inf", "inf"};

static const char *zbound_text(int64_t i) {
    return zbounds[((i % 16) + 16) % 16];
}

/* SADD_N's and ZADD_N's member j. */
static int bulk_member(const model_cmd *c, int64_t j, char out[8]) {
    return snprintf(out, 8, "m%d", (int)((c->off + j) % 200));
}

/* ZADD_N's score of member j: small integers, ties among them. */
static int bulk_score(const model_cmd *c, int64_t j, char out[8]) {
    return snprintf(out, 8, "%d", (int)((c->off + j) % 7) - 3);
}

/* A set or sorted set command's members: field, and "f<i2 + 2>" when i2
 * >= 0 (into m2); their number. */
static int members(const model_cmd *c, char m2[8]) {
    if (c->i2 < 0) return 1;
    snprintf(m2, 8, "f%d", (int)(c->i2 + 2) % 100);
    return 2;
}

/* SINTER, SUNION, SDIFF (OP_SETOP's i1 mod 3). */
static int setop_which(const model_cmd *c) {
    return (int)(((c->i1 % 3) + 3) % 3);
}

static const char *op_name(const model_cmd *c) {
    static const char *const setops[2][3] = {
        {"SINTER", "SUNION", "SDIFF"},
        {"SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"}};
    if (c->op == OP_SETOP || c->op == OP_SETOP_STORE)
        return setops[c->op == OP_SETOP_STORE][setop_which(c)];
    if (c->op == OP_ZRANK && (c->flags & 1)) return "ZREVRANK";
    return names[c->op];
}

/* The pattern's bytes from `from` (any offset) on, n of them, into out:
 * byte i of the pattern is 'a' + i % 26. */
static void pattern(char *out, size_t from, size_t n) {
    static char abc[MODEL_VAL_MAX + 26];
    if (!abc[0])
        for (size_t i = 0; i < sizeof abc; i++)
            abc[i] = (char)('a' + i % 26);
    memcpy(out, abc + from % 26, n);
}

/* A SET's value: val, then `pad` bytes of a pattern, shifted by `shift`
 * from byte `cut` of the pad on, into out. */
size_t model_value(const model_cmd *c, char *out) {
    size_t n = strlen(c->val);
    memcpy(out, c->val, n);
    size_t cut = c->cut < c->pad ? c->cut : c->pad;
    pattern(out + n, n, cut);
    pattern(out + n + cut, n + cut + c->shift, c->pad - cut);
    return n + c->pad;
}

void model_cmd_text(const model_cmd *c, char *out, size_t cap) {
    static char req[MODEL_REQ_MAX];
    model_cmd t = *c; /* a value's bytes past cap are not shown */
    if (t.pad > cap) t.pad = (uint32_t)cap;
    size_t n = model_request(&t, req), at = 0;
    /* The bulk strings' bytes, space-separated: skip the headers. */
    size_t i = 0, o = 0;
    while (i < n && o + 1 < cap) {
        if (req[i] == '*' || req[i] == '$') {
            while (i < n && req[i] != '\n')
                i++;
            i++;
            continue;
        }
        while (i < n && req[i] != '\r' && o + 1 < cap)
            out[o++] = req[i++];
        i += 2;
        if (i < n && o + 1 < cap) out[o++] = ' ';
        at++;
    }
    out[o] = 0;
}

/* RPUSH_N's item j: its value at even j, between them a letter (a, b, c
 * in turn), so that the value and the letters recur apart, not in one
 * run: where LREM's count starts shows at the list's ends. *n: the
 * value's length in, the item's out. */
static const char *rpush_item(const char *v, size_t *n, size_t j) {
    if (j % 2 == 0) return v;
    *n = 1;
    return &"abc"[(j / 2) % 3];
}

/* LPOS's rank: never 0 (an error), so i1's 0 is -1, from the tail. */
static long long lpos_rank(const model_cmd *c) {
    return c->i1 ? c->i1 : -1;
}

size_t model_request(const model_cmd *c, char *out) {
    const char *argv[12];
    size_t lens[12], argc = 0;
    char num[24], num2[24], num3[24], num4[24], m2[8];
    static char val[MODEL_VAL_MAX];
    argv[argc] = op_name(c);
    lens[argc] = strlen(argv[argc]);
    argc++;
    argv[argc] = c->op == OP_SETOP_STORE ? c->key2 : c->key;
    lens[argc] = strlen(argv[argc]);
    argc++;
    bool count = c->i2 >= 0; /* SPOP's, SRANDMEMBER's, ZPOP*'s */
    switch (c->op) {
    case OP_SADD:
    case OP_SREM:
    case OP_ZREM:
    case OP_ZMSCORE:
        argv[argc] = c->field;
        lens[argc++] = strlen(c->field);
        if (members(c, m2) == 2) {
            argv[argc] = m2;
            lens[argc++] = strlen(m2);
        }
        break;
    case OP_SISMEMBER:
    case OP_ZSCORE:
    case OP_ZRANK:
        argv[argc] = c->field;
        lens[argc++] = strlen(c->field);
        break;
    case OP_SPOP:
    case OP_SRANDMEMBER:
    case OP_ZPOPMIN:
    case OP_ZPOPMAX:
        if (count) {
            argv[argc] = num;
            lens[argc++] =
                (size_t)snprintf(num, sizeof num, "%" PRId64, c->i1 + 2);
        }
        break;
    case OP_SMOVE:
        argv[argc] = c->key2;
        lens[argc++] = strlen(c->key2);
        argv[argc] = c->field;
        lens[argc++] = strlen(c->field);
        break;
    case OP_SETOP:
    case OP_SETOP_STORE: {
        /* The sources, after STORE's destination (key2): k and key2,
         * key2 first when i2 < 0. */
        const char *src[2] = {c->i2 < 0 ? c->key2 : c->key,
                              c->i2 < 0 ? c->key : c->key2};
        argc = c->op == OP_SETOP_STORE ? 2 : 1;
        for (int i = 0; i < 2; i++) {
            argv[argc] = src[i];
            lens[argc++] = strlen(src[i]);
        }
        break;
    }
    case OP_ZADD: {
        static const char *const opt[6] = {"NX", "XX", "GT",
                                           "LT", "CH", "INCR"};
        for (int i = 0; i < 6; i++)
            if (c->flags & (1 << i)) {
                argv[argc] = opt[i];
                lens[argc] = strlen(opt[i]);
                argc++;
            }
    }
        /* fall through */
    case OP_ZINCRBY:
        argv[argc] = val;
        lens[argc++] = model_value(c, val);
        argv[argc] = c->field;
        lens[argc++] = strlen(c->field);
        break;
    case OP_ZRANGE:
        argv[argc] = num;
        lens[argc++] = (size_t)snprintf(num, sizeof num, "%" PRId64, c->i1);
        argv[argc] = num2;
        lens[argc++] = (size_t)snprintf(num2, sizeof num2, "%" PRId64, c->i2);
        if (c->flags & 1) {
            argv[argc] = "REV";
            lens[argc++] = 3;
        }
        if (c->flags & 2) {
            argv[argc] = "WITHSCORES";
            lens[argc++] = 10;
        }
        break;
    case OP_ZRANGEBYSCORE:
    case OP_ZCOUNT:
    case OP_ZREMRANGEBYSCORE:
        argv[argc] = zbound_text(c->i1);
        lens[argc] = strlen(argv[argc]);
        argc++;
        argv[argc] = zbound_text(c->i2);
        lens[argc] = strlen(argv[argc]);
        argc++;
        if (c->op != OP_ZRANGEBYSCORE) break;
        argv[argc] = "BYSCORE";
        lens[argc++] = 7;
        if (c->flags & 1) {
            argv[argc] = "REV";
            lens[argc++] = 3;
        }
        if (c->flags & 4) {
            argv[argc] = "LIMIT";
            lens[argc++] = 5;
            argv[argc] = num3;
            lens[argc++] =
                (size_t)snprintf(num3, sizeof num3, "%" PRId64, c->off);
            argv[argc] = num4;
            lens[argc++] =
                (size_t)snprintf(num4, sizeof num4, "%" PRId64, c->cnt);
        }
        if (c->flags & 2) {
            argv[argc] = "WITHSCORES";
            lens[argc++] = 10;
        }
        break;
    case OP_ZREMRANGEBYRANK:
    case OP_GETRANGE:
        argv[argc] = num;
        lens[argc++] = (size_t)snprintf(num, sizeof num, "%" PRId64, c->i1);
        argv[argc] = num2;
        lens[argc++] = (size_t)snprintf(num2, sizeof num2, "%" PRId64, c->i2);
        break;
    case OP_SSCAN:
    case OP_ZSCAN:
    case OP_HSCAN:
        argv[argc] = num;
        lens[argc++] = (size_t)snprintf(num, sizeof num, "%" PRIu64, c->cursor);
        argv[argc] = "COUNT";
        lens[argc++] = 5;
        argv[argc] = num2;
        lens[argc++] = (size_t)snprintf(num2, sizeof num2, "%" PRId64, c->cnt);
        break;
    case OP_SET:
    case OP_SET_PXAT:
    case OP_SET_NX:
    case OP_SET_XX:
    case OP_APPEND:
    case OP_RPUSH:
    case OP_RPUSH_N:
    case OP_INCRBY:
    case OP_DECRBY:
    case OP_INCRBYFLOAT:
        argv[argc] = val;
        lens[argc++] = model_value(c, val);
        break;
    case OP_PEXPIREAT:
    case OP_PEXPIREAT_IF:
        argv[argc] = num;
        lens[argc++] = (size_t)snprintf(num, sizeof num, "%" PRId64, c->at);
        break;
    case OP_LREM:
    case OP_LSET:
    case OP_SETRANGE:
        argv[argc] = num;
        lens[argc++] = (size_t)snprintf(num, sizeof num, "%" PRId64, c->i1);
        argv[argc] = val;
        lens[argc++] = model_value(c, val);
        break;
    case OP_LTRIM:
    case OP_LRANGE:
        argv[argc] = num;
        lens[argc++] = (size_t)snprintf(num, sizeof num, "%" PRId64, c->i1);
        argv[argc] = num2;
        lens[argc++] = (size_t)snprintf(num2, sizeof num2, "%" PRId64, c->i2);
        break;
    case OP_RENAME:
    case OP_RENAMENX:
    case OP_RPOPLPUSH:
        argv[argc] = c->key2;
        lens[argc++] = strlen(c->key2);
        break;
    case OP_LMOVE:
        argv[argc] = c->key2;
        lens[argc++] = strlen(c->key2);
        argv[argc] = c->i1 < 0 ? "LEFT" : "RIGHT";
        lens[argc] = strlen(argv[argc]);
        argc++;
        argv[argc] = c->i2 < 0 ? "LEFT" : "RIGHT";
        lens[argc] = strlen(argv[argc]);
        argc++;
        break;
    case OP_LINSERT:
        argv[argc] = c->i1 < 0 ? "BEFORE" : "AFTER";
        lens[argc] = strlen(argv[argc]);
        argc++;
        argv[argc] = val;
        lens[argc++] = model_value(c, val);
        argv[argc] = c->field;
        lens[argc++] = strlen(c->field);
        break;
    case OP_HSET:
    case OP_HSETNX:
    case OP_HINCRBY:
    case OP_HINCRBYFLOAT:
        argv[argc] = c->field;
        lens[argc++] = strlen(c->field);
        argv[argc] = val;
        lens[argc++] = model_value(c, val);
        break;
    case OP_HDEL:
    case OP_HGET:
        argv[argc] = c->field;
        lens[argc++] = strlen(c->field);
        break;
    case OP_SETEX:
    case OP_PSETEX:
        argv[argc] = num;
        lens[argc++] = (size_t)snprintf(num, sizeof num, "%" PRId64, c->i1);
        argv[argc] = val;
        lens[argc++] = model_value(c, val);
        break;
    case OP_EXPIRE:
        argv[argc] = num;
        lens[argc++] = (size_t)snprintf(num, sizeof num, "%" PRId64, c->i1);
        break;
    case OP_LPOS:
        argv[argc] = val;
        lens[argc++] = model_value(c, val);
        argv[argc] = "RANK";
        lens[argc++] = 4;
        argv[argc] = num;
        lens[argc++] = (size_t)snprintf(num, sizeof num, "%lld", lpos_rank(c));
        if (c->i2 >= 0) {
            argv[argc] = "COUNT";
            lens[argc++] = 5;
            argv[argc] = num2;
            lens[argc++] =
                (size_t)snprintf(num2, sizeof num2, "%" PRId64, c->i2);
        }
        if (c->cnt > 0) {
            argv[argc] = "MAXLEN";
            lens[argc++] = 6;
            argv[argc] = num3;
            lens[argc++] =
                (size_t)snprintf(num3, sizeof num3, "%" PRId64, c->cnt);
        }
        break;
    default:
        break;
    }
    if (c->op == OP_SET_PXAT) {
        argv[argc] = "PXAT";
        lens[argc++] = 4;
        argv[argc] = num;
        lens[argc++] = (size_t)snprintf(num, sizeof num, "%" PRId64, c->at);
    } else if (c->op == OP_GETEX_PXAT) {
        argv[argc] = "PXAT";
        lens[argc++] = 4;
        argv[argc] = num;
        lens[argc++] = (size_t)snprintf(num, sizeof num, "%" PRId64, c->at);
    } else if (c->op == OP_GETEX_PERSIST) {
        argv[argc] = "PERSIST";
        lens[argc++] = 7;
    } else if (c->op == OP_PEXPIREAT_IF) {
        static const char *const opt[4] = {"NX", "XX", "GT", "LT"};
        argv[argc] = opt[c->i2 & 3];
        lens[argc++] = 2;
    } else if (c->op == OP_SET_NX || c->op == OP_SET_XX) {
        argv[argc] = c->op == OP_SET_NX ? "NX" : "XX";
        lens[argc++] = 2;
    }
    /* RPUSH_N: its value, then the items rpush_item gives */
    size_t more = c->op == OP_RPUSH_N && c->i2 > 1 ? (size_t)c->i2 - 1 : 0;
    /* SADD_N, ZADD_N: their members (ZADD_N's each after its score) */
    size_t bulk = c->op == OP_SADD_N || c->op == OP_ZADD_N ? (size_t)c->cnt : 0;
    size_t at = (size_t)sprintf(
        out, "*%zu\r\n", argc + more + bulk * (c->op == OP_ZADD_N ? 2 : 1));
    for (size_t i = 0; i < argc; i++)
        at = put_bulk(out, at, argv[i], lens[i]);
    for (size_t j = 0; j < bulk; j++) {
        char m[8];
        if (c->op == OP_ZADD_N)
            at = put_bulk(out, at, m, (size_t)bulk_score(c, (int64_t)j, m));
        at = put_bulk(out, at, m, (size_t)bulk_member(c, (int64_t)j, m));
    }
    for (size_t j = 1; j <= more; j++) {
        size_t n = lens[argc - 1];
        const char *item = rpush_item(argv[argc - 1], &n, j);
        at = put_bulk(out, at, item, n);
    }
    return at;
}

static bool alive(const model_val *s, int64_t now) {
    return s->type != MODEL_NONE && !store_expired(s->expire, now);
}

static void set_expire(model_val *s, int64_t lo, int64_t hi) {
    s->expire = lo;
    s->expire_hi = hi;
}

static void clear(model_val *s) {
    s->type = MODEL_NONE;
    set_expire(s, 0, 0);
    s->len = s->items = 0;
}

static void set_string(model_val *s, const char *v, size_t n) {
    s->type = MODEL_STRING;
    set_expire(s, 0, 0);
    s->items = 0;
    s->len = (uint32_t)n;
    memcpy(s->v, v, n);
}

/* Redis' integer: an optional '-', digits without a leading zero, in
 * range. */
static bool as_integer(const char *s, size_t len, long long *out) {
    if (len == 0 || len > 20) return false;
    const char *p = s, *end = s + len;
    bool neg = *p == '-';
    if (neg && ++p == end) return false;
    if (*p == '0' && end - p > 1) return false;
    if (neg && *p == '0') return false;
    /* In unsigned: INT64_MIN's digits are one past INT64_MAX. */
    unsigned long long v = 0, max = neg ? (unsigned long long)INT64_MAX + 1
                                        : (unsigned long long)INT64_MAX;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9') return false;
        unsigned d = (unsigned)(*p - '0');
        if (v > (max - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = neg ? (long long)(0 - v) : (long long)v;
    return true;
}

/* A float as Redis' INCRBYFLOAT reads it: what strtold takes whole, not
 * NaN, no leading space, no overflow (or underflow to zero), shorter
 * than Redis' MAX_LONG_DOUBLE_CHARS (5 KiB). */
static bool as_float(const char *s, size_t len, long double *out) {
    static char tmp[5 << 10];
    if (len == 0 || len >= sizeof tmp || memchr(s, 0, len) || isspace(s[0]))
        return false;
    memcpy(tmp, s, len);
    tmp[len] = 0;
    char *end;
    errno = 0;
    *out = strtold(tmp, &end);
    return end == tmp + len && !isnan(*out) &&
           !(errno == ERANGE && (isinf(*out) || *out == 0));
}

static size_t put_int(char *out, size_t at, long long n) {
    return at + (size_t)sprintf(out + at, ":%lld\r\n", n);
}

/* Redis' digits of a long double: 17 after the point, its trailing zeros
 * (and the point) dropped; -0 is 0. */
static int format_ld(long double n, char *num, size_t cap) {
    int len = snprintf(num, cap, "%.17Lf", n);
    if (strchr(num, '.')) {
        while (num[len - 1] == '0')
            len--;
        if (num[len - 1] == '.') len--;
    }
    if (len == 2 && num[0] == '-' && num[1] == '0') {
        num[0] = '0';
        len = 1;
    }
    return len;
}

/* A hash's fields, in byte order, each a length byte and its bytes, then
 * its value the same way: whether field f is there, and where its entry
 * begins (or where it would go). */
static bool field_at(const model_val *s, const char *f, size_t flen,
                     size_t *at) {
    size_t p = 0;
    for (size_t i = 0; i < s->items; i++) {
        size_t n = (unsigned char)s->v[p];
        int d = memcmp(s->v + p + 1, f, n < flen ? n : flen);
        if (d == 0 && n == flen) {
            *at = p;
            return true;
        }
        if (d > 0 || (d == 0 && n > flen)) break;
        p += 1 + n;
        p += 1 + (unsigned char)s->v[p];
    }
    *at = p;
    return false;
}

/* The value of the entry at `at`: where its length byte is. */
static size_t value_at(const model_val *s, size_t at) {
    return at + 1 + (unsigned char)s->v[at];
}

/* The entry at `at` goes. */
static void field_delete(model_val *s, size_t at) {
    size_t va = value_at(s, at), end = va + 1 + (unsigned char)s->v[va];
    memmove(s->v + at, s->v + end, s->len - end);
    s->len -= (uint32_t)(end - at);
    s->items--;
}

/* Field f (at `at`, there or not) becomes v: a hash made of s if it is
 * no key (a set or sorted set keeps its type). */
static void field_put(model_val *s, size_t at, bool there, const char *f,
                      size_t flen, const char *v, size_t vlen) {
    if (s->type == MODEL_NONE) {
        clear(s);
        s->type = MODEL_HASH;
    }
    if (there) field_delete(s, at);
    size_t n = 2 + flen + vlen;
    memmove(s->v + at + n, s->v + at, s->len - at);
    s->v[at] = (char)flen;
    memcpy(s->v + at + 1, f, flen);
    s->v[at + 1 + flen] = (char)vlen;
    memcpy(s->v + at + 2 + flen, v, vlen);
    s->len += (uint32_t)n;
    s->items++;
}

/* HINCRBY and HINCRBYFLOAT on a live hash or no key. */
static size_t hash_incr(model_val *s, const model_cmd *c, bool live,
                        const char *v, size_t vlen, char *out) {
    /* Redis' order of checks: the increment, the key's type, the field's
     * value. */
    size_t flen = strlen(c->field), at = 0, rn;
    bool hash = live && s->type == MODEL_HASH;
    bool there = hash && field_at(s, c->field, flen, &at);
    const char *old = there ? s->v + value_at(s, at) + 1 : "";
    size_t olen = there ? (unsigned char)s->v[value_at(s, at)] : 0;
    char num[5200];
    int len;
    if (c->op == OP_HINCRBY) {
        long long n = 0, by;
        if (!as_integer(v, vlen, &by)) return put_s(out, NOT_INTEGER);
        if (live && s->type != MODEL_HASH) return put_s(out, WRONGTYPE);
        if (there && !as_integer(old, olen, &n)) return put_s(out, H_NOT_INT);
        if ((by < 0 && n < INT64_MIN - by) || (by > 0 && n > INT64_MAX - by))
            return put_s(out, OVERFLOW);
        len = snprintf(num, sizeof num, "%lld", n + by);
        rn = put_int(out, 0, n + by);
    } else {
        long double n = 0, by;
        if (!as_float(v, vlen, &by)) return put_s(out, NOT_FLOAT);
        if (isinf(by)) return put_s(out, BY_INF);
        if (live && s->type != MODEL_HASH) return put_s(out, WRONGTYPE);
        if (there && !as_float(old, olen, &n)) return put_s(out, H_NOT_FLOAT);
        n += by;
        if (isnan(n) || isinf(n)) return put_s(out, NAN_OR_INF);
        len = format_ld(n, num, sizeof num);
        /* A value the model cannot hold: no reply matches. */
        if (len > 255) return put_s(out, "-model: value too long\r\n");
        rn = put_bulk(out, 0, num, (size_t)len);
    }
    field_put(s, at, there, c->field, flen, num, (size_t)len);
    return rn;
}

/* The hash commands on state s, live or not. */
static size_t hash_cmd(model_val *s, const model_cmd *c, bool live,
                       const char *v, size_t vlen, char *out) {
    if (c->op == OP_HINCRBY || c->op == OP_HINCRBYFLOAT)
        return hash_incr(s, c, live, v, vlen, out);
    if (live && s->type != MODEL_HASH) return put_s(out, WRONGTYPE);
    size_t flen = strlen(c->field), at = 0;
    bool there = live && field_at(s, c->field, flen, &at);
    switch (c->op) {
    case OP_HSET:
    case OP_HSETNX:
        if (there && c->op == OP_HSETNX) return put_s(out, ":0\r\n");
        field_put(s, at, there, c->field, flen, v, vlen);
        return put_int(out, 0, !there);
    case OP_HDEL:
        if (!there) return put_s(out, ":0\r\n");
        field_delete(s, at);
        if (s->items == 0) clear(s);
        return put_s(out, ":1\r\n");
    case OP_HGET:
        if (!there) return put_s(out, "$-1\r\n");
        at = value_at(s, at);
        return put_bulk(out, 0, s->v + at + 1, (unsigned char)s->v[at]);
    case OP_HLEN:
        return put_int(out, 0, live ? s->items : 0);
    default: { /* HGETALL: the pairs in byte order (model_apply sorts the
                  reply's) */
        size_t o = (size_t)sprintf(out, "*%d\r\n", live ? 2 * s->items : 0);
        for (size_t i = 0, p = 0; live && i < s->items; i++) {
            o = put_bulk(out, o, s->v + p + 1, (unsigned char)s->v[p]);
            p = value_at(s, p);
            o = put_bulk(out, o, s->v + p + 1, (unsigned char)s->v[p]);
            p += 1 + (unsigned char)s->v[p];
        }
        return o;
    }
    }
}

/* ------------------------------------------ sets and sorted sets */

/* The reply model_apply checks, for SPOP and SRANDMEMBER, whose members
 * are the server's random choice: the model checks that they are there,
 * as many as the count says (distinct, but for a negative count), and
 * takes them (SPOP). NULL: none (model_reply). */
static const char *given;
static size_t given_len;

static const char *line_end(const char *p, const char *end);
static bool line_count(const char *p, const char *lf, long long *n);
static void copy_val(model_val *to, const model_val *from);

#define OUT_OF_RANGE "-ERR value is out of range, must be positive\r\n"
#define NOT_SCORE    "-ERR value is not a valid float\r\n"
#define RANDOM_BAD   "-model: not the members the count allows\r\n"

/* The entry after the one at p. */
static size_t next_entry(const model_val *s, size_t p) {
    p = value_at(s, p);
    return p + 1 + (unsigned char)s->v[p];
}

/* Member m joins set s (a set, or no key: made one); whether it is new. */
static bool set_add_m(model_val *s, const char *m, size_t n) {
    size_t at;
    if (field_at(s, m, n, &at)) return false;
    if (s->type == MODEL_NONE) {
        clear(s);
        s->type = MODEL_SET;
    }
    field_put(s, at, false, m, n, "", 0);
    return true;
}

/* Member m leaves s (a set or sorted set, which goes when emptied);
 * whether it was there. */
static bool member_rem(model_val *s, const char *m, size_t n) {
    size_t at;
    if (s->type == MODEL_NONE || !field_at(s, m, n, &at)) return false;
    field_delete(s, at);
    if (s->items == 0) clear(s);
    return true;
}

/* The members as a RESP array, in the model's (byte) order. */
static size_t put_members(const model_val *s, char *out) {
    size_t o = (size_t)sprintf(out, "*%d\r\n", s->items);
    for (size_t i = 0, p = 0; i < s->items; i++, p = next_entry(s, p))
        o = put_bulk(out, o, s->v + p + 1, (unsigned char)s->v[p]);
    return o;
}

/* One bulk string of the reply at *p (before end): its bytes. */
static bool take_bulk(const char **p, const char *end, const char **b,
                      size_t *n) {
    const char *lf = line_end(*p, end);
    long long len;
    if (!lf || **p != '$' || !line_count(*p + 1, lf, &len) || len < 0 ||
        len > 255 || end - (lf + 2) < len + 2)
        return false;
    *b = lf + 2;
    *n = (size_t)len;
    *p = lf + 2 + len + 2;
    return true;
}

/* SPOP and SRANDMEMBER on a live set: the given reply, when its members
 * are ones the command may pick. */
static size_t set_random_cmd(model_val *s, const model_cmd *c, char *out) {
    bool pop = c->op == OP_SPOP, has_count = c->i2 >= 0;
    long long count = c->i1 + 2, n = 1;
    if (!given) return put_s(out, "-model: a random member\r\n");
    const char *p = given, *end = given + given_len;
    if (has_count) {
        const char *lf = line_end(p, end);
        if (!lf || *p != '*' || !line_count(p + 1, lf, &n))
            return put_s(out, RANDOM_BAD);
        p = lf + 2;
    }
    long long want = !has_count         ? 1
                     : count < 0        ? -count
                     : count < s->items ? count
                                        : s->items;
    if (n != want) return put_s(out, RANDOM_BAD);
    /* Distinct members leave `left` as they are taken; repeats (a
     * negative count) are looked up in s. */
    static model_val left;
    copy_val(&left, s);
    bool repeats = has_count && count < 0;
    for (long long i = 0; i < n; i++) {
        const char *b;
        size_t bn, at;
        if (!take_bulk(&p, end, &b, &bn) ||
            !field_at(repeats ? s : &left, b, bn, &at))
            return put_s(out, RANDOM_BAD);
        if (!repeats) field_delete(&left, at);
    }
    if (p != end) return put_s(out, RANDOM_BAD);
    if (pop) {
        copy_val(s, &left);
        if (s->items == 0) clear(s);
    }
    memcpy(out, given, given_len);
    return given_len;
}

/* The one-key set commands on s, live or not. */
static size_t scan_cmd(model_val *s, const model_cmd *c, bool live, char *out);

static size_t set_cmd(model_val *s, const model_cmd *c, bool live, char *out) {
    if (c->op == OP_SSCAN) return scan_cmd(s, c, live, out);
    char m2[8];
    const char *m[2] = {c->field, m2};
    int nm = members(c, m2);
    if (c->op == OP_SPOP && c->i2 >= 0 && c->i1 + 2 < 0)
        return put_s(out, OUT_OF_RANGE); /* the count, before the type */
    if (live && s->type != MODEL_SET) return put_s(out, WRONGTYPE);
    long long n = 0;
    size_t at;
    switch (c->op) {
    case OP_SADD:
        for (int i = 0; i < nm; i++)
            n += set_add_m(s, m[i], strlen(m[i]));
        return put_int(out, 0, n);
    case OP_SREM:
        for (int i = 0; i < nm; i++)
            n += member_rem(s, m[i], strlen(m[i]));
        return put_int(out, 0, n);
    case OP_SMEMBERS: /* model_apply sorts the reply's */
        return put_members(s, out);
    case OP_SISMEMBER:
        return put_int(out, 0, field_at(s, c->field, strlen(c->field), &at));
    case OP_SCARD:
        return put_int(out, 0, s->items);
    case OP_SADD_N:
        for (int64_t j = 0; j < c->cnt; j++) {
            char b[8];
            n += set_add_m(s, b, (size_t)bulk_member(c, j, b));
        }
        return put_int(out, 0, n);
    default: /* SPOP, SRANDMEMBER */
        if (!live) return put_s(out, c->i2 >= 0 ? "*0\r\n" : "$-1\r\n");
        return set_random_cmd(s, c, out);
    }
}

/* SMOVE, SINTER, SUNION, SDIFF and their STORE forms from s (k) and d
 * (key2; d == s: the same name), at instant now. */
static size_t set_two(model_val *s, model_val *d, const model_cmd *c,
                      int64_t now, char *out) {
    size_t flen = strlen(c->field), at;
    if (c->op == OP_SMOVE) {
        /* Redis 7.0's order: a missing source first, then both types. */
        if (!alive(s, now)) {
            clear(s);
            return put_s(out, ":0\r\n");
        }
        if (s->type != MODEL_SET) return put_s(out, WRONGTYPE);
        if (d != s && !alive(d, now)) clear(d);
        if (d->type != MODEL_NONE && d->type != MODEL_SET)
            return put_s(out, WRONGTYPE);
        if (!field_at(s, c->field, flen, &at)) return put_s(out, ":0\r\n");
        if (d == s) return put_s(out, ":1\r\n");
        set_add_m(d, c->field, flen);
        member_rem(s, c->field, flen);
        return put_s(out, ":1\r\n");
    }
    if (!alive(s, now)) clear(s);
    if (d != s && !alive(d, now)) clear(d);
    if ((s->type != MODEL_NONE && s->type != MODEL_SET) ||
        (d->type != MODEL_NONE && d->type != MODEL_SET))
        return put_s(out, WRONGTYPE);
    const model_val *a = c->i2 < 0 ? d : s, *b = c->i2 < 0 ? s : d;
    static model_val r;
    clear(&r);
    int which = setop_which(c); /* SINTER, SUNION, SDIFF */
    for (size_t i = 0, p = 0; i < a->items; i++, p = next_entry(a, p)) {
        const char *m = a->v + p + 1;
        size_t n = (unsigned char)a->v[p];
        bool in_b = field_at(b, m, n, &at);
        if (which == 1 || in_b == (which == 0)) set_add_m(&r, m, n);
    }
    if (which == 1)
        for (size_t i = 0, p = 0; i < b->items; i++, p = next_entry(b, p))
            set_add_m(&r, b->v + p + 1, (unsigned char)b->v[p]);
    if (c->op == OP_SETOP) return put_members(&r, out);
    /* STORE: key2 becomes the result, no expiry; none deletes it. */
    copy_val(d, &r);
    return put_int(out, 0, r.items);
}

/* A score argument as Redis reads it (strtod's whole, no leading space,
 * not NaN, no overflow or underflow to zero). */
static bool as_score(const char *v, size_t n, double *d) {
    char tmp[64];
    if (n == 0 || n >= sizeof tmp || isspace((unsigned char)v[0]) ||
        memchr(v, 0, n))
        return false;
    memcpy(tmp, v, n);
    tmp[n] = 0;
    char *end;
    errno = 0;
    *d = strtod(tmp, &end);
    return end == tmp + n && !isnan(*d) &&
           !(errno == ERANGE && (isinf(*d) || *d == 0));
}

/* A score as Redis writes it: %.17g, inf, -inf. */
static int score_text(double d, char *num) {
    if (isinf(d)) return sprintf(num, "%s", d > 0 ? "inf" : "-inf");
    return sprintf(num, "%.17g", d);
}

/* The score of the sorted set's entry at p. */
static double score_at(const model_val *s, size_t p) {
    char tmp[64];
    size_t va = value_at(s, p), n = (unsigned char)s->v[va];
    memcpy(tmp, s->v + va + 1, n);
    tmp[n] = 0;
    return strtod(tmp, NULL);
}

/* The sorted set's entries in its order, by score, then member (the
 * entries are in member order, and the sort is stable): where each
 * begins, into at; their number. */
static size_t zorder(const model_val *s, size_t at[]) {
    static double score[UINT16_MAX + 1]; /* at[j]'s: read once each */
    size_t n = 0;
    for (size_t p = 0; n < s->items; p = next_entry(s, p)) {
        size_t j = n++;
        double sc = score_at(s, p);
        for (; j > 0 && score[j - 1] > sc; j--) {
            at[j] = at[j - 1];
            score[j] = score[j - 1];
        }
        at[j] = p;
        score[j] = sc;
    }
    return n;
}

/* A score bound (zbounds): its value, and whether it is exclusive. */
static double zbound_of(int64_t i, bool *ex) {
    const char *t = zbound_text(i);
    *ex = t[0] == '(';
    return strtod(t + *ex, NULL);
}

/* Whether score sc is within min i1 and max i2 (swapped: REV's). */
static bool in_bounds(double sc, const model_cmd *c, bool swapped) {
    bool lx, hx;
    double lo = zbound_of(swapped ? c->i2 : c->i1, &lx);
    double hi = zbound_of(swapped ? c->i1 : c->i2, &hx);
    return (lx ? sc > lo : sc >= lo) && (hx ? sc < hi : sc <= hi);
}

/* The entry at p, member and score, into out at o. */
static size_t put_zentry(const model_val *s, size_t p, bool score, char *out,
                         size_t o) {
    o = put_bulk(out, o, s->v + p + 1, (unsigned char)s->v[p]);
    if (!score) return o;
    p = value_at(s, p);
    return put_bulk(out, o, s->v + p + 1, (unsigned char)s->v[p]);
}

/* ZADD (one pair) and ZINCRBY (ZADD INCR): Redis 7.0's order of checks
 * (the options, the score, the type). */
static size_t zadd(model_val *s, const model_cmd *c, bool live, const char *v,
                   size_t vlen, char *out) {
    unsigned f = c->op == OP_ZINCRBY ? MODEL_Z_INCR : c->flags;
    bool nx = f & MODEL_Z_NX, xx = f & MODEL_Z_XX, gt = f & MODEL_Z_GT;
    bool lt = f & MODEL_Z_LT, incr = f & MODEL_Z_INCR;
    if (nx && xx)
        return put_s(out, "-ERR XX and NX options at the same time are not "
                          "compatible\r\n");
    if ((gt && nx) || (lt && nx) || (gt && lt))
        return put_s(out, "-ERR GT, LT, and/or NX options at the same time "
                          "are not compatible\r\n");
    double score;
    if (!as_score(v, vlen, &score)) return put_s(out, NOT_SCORE);
    if (live && s->type != MODEL_ZSET) return put_s(out, WRONGTYPE);
    if (!live && xx) return put_s(out, incr ? "$-1\r\n" : ":0\r\n");
    size_t flen = strlen(c->field), at = 0;
    bool there = live && field_at(s, c->field, flen, &at);
    bool skipped = false, set = false;
    long long added = 0, changed = 0;
    if (there) {
        double cur = score_at(s, at);
        if (nx) {
            skipped = true;
        } else {
            if (incr) score += cur;
            if (isnan(score))
                return put_s(out, "-ERR resulting score is not a number "
                                  "(NaN)\r\n");
            if ((gt && score <= cur) || (lt && score >= cur))
                skipped = true;
            else if (score != cur)
                set = true, changed++;
        }
    } else if (xx) {
        skipped = true;
    } else {
        set = true, added++;
    }
    if (set) { /* a -0 is kept as 0; INCR's reply gives it as sent */
        char num[32];
        int n = score_text(score == 0 ? 0 : score, num);
        if (s->type == MODEL_NONE) {
            clear(s);
            s->type = MODEL_ZSET;
        }
        field_put(s, at, there, c->field, flen, num, (size_t)n);
    }
    if (!incr) return put_int(out, 0, added + (f & MODEL_Z_CH ? changed : 0));
    if (skipped) return put_s(out, "$-1\r\n");
    char num[32];
    return put_bulk(out, 0, num, (size_t)score_text(score, num));
}

/* The sorted set commands on s, live or not. */
static size_t zset_cmd(model_val *s, const model_cmd *c, bool live,
                       const char *v, size_t vlen, char *out) {
    if (c->op == OP_ZADD || c->op == OP_ZINCRBY)
        return zadd(s, c, live, v, vlen, out);
    if (c->op == OP_ZSCAN) return scan_cmd(s, c, live, out);
    bool pop = c->op == OP_ZPOPMIN || c->op == OP_ZPOPMAX;
    long long count = c->i2 >= 0 ? c->i1 + 2 : 1;
    if (pop && count < 0) return put_s(out, OUT_OF_RANGE);
    if (live && s->type != MODEL_ZSET) return put_s(out, WRONGTYPE);
    char m2[8];
    const char *m[2] = {c->field, m2};
    int nm = members(c, m2);
    size_t at, n = 0;
    static size_t order[UINT16_MAX + 1];
    switch (c->op) {
    case OP_ZREM:
        for (int i = 0; i < nm; i++)
            n += member_rem(s, m[i], strlen(m[i]));
        return put_int(out, 0, (long long)n);
    case OP_ZSCORE:
        if (!field_at(s, c->field, strlen(c->field), &at))
            return put_s(out, "$-1\r\n");
        at = value_at(s, at);
        return put_bulk(out, 0, s->v + at + 1, (unsigned char)s->v[at]);
    case OP_ZCARD:
        return put_int(out, 0, s->items);
    case OP_ZRANGE: { /* by rank, as LRANGE; REV counts from the highest */
        bool rev = c->flags & 1, scores = c->flags & 2;
        long long len = (long long)zorder(s, order);
        long long from = c->i1 < 0 ? c->i1 + len : c->i1;
        long long to = c->i2 < 0 ? c->i2 + len : c->i2;
        if (from < 0) from = 0;
        if (to >= len) to = len - 1;
        if (from > to || from >= len) return put_s(out, "*0\r\n");
        size_t o = (size_t)sprintf(out, "*%lld\r\n",
                                   (to - from + 1) * (scores ? 2 : 1));
        for (long long i = from; i <= to; i++)
            o = put_zentry(s, order[rev ? len - 1 - i : i], scores, out, o);
        return o;
    }
    case OP_ZRANGEBYSCORE: { /* LIMIT: a negative offset skips all, a
                                negative count bounds nothing (Redis' loops) */
        bool rev = c->flags & 1, scores = c->flags & 2, lim = c->flags & 4;
        long long skip = lim ? c->off : 0, left = lim ? c->cnt : -1;
        static size_t pick[UINT16_MAX + 1];
        size_t len = zorder(s, order);
        for (size_t i = 0; i < len; i++) {
            size_t p = order[rev ? len - 1 - i : i];
            if (!in_bounds(score_at(s, p), c, rev)) continue;
            if (skip < 0 || left == 0) break;
            if (skip > 0) {
                skip--;
                continue;
            }
            if (left > 0) left--;
            pick[n++] = p;
        }
        size_t o = (size_t)sprintf(out, "*%zu\r\n", n * (scores ? 2 : 1));
        for (size_t i = 0; i < n; i++)
            o = put_zentry(s, pick[i], scores, out, o);
        return o;
    }
    case OP_ZCOUNT:
    case OP_ZREMRANGEBYSCORE:
    case OP_ZREMRANGEBYRANK: {
        /* The entries in range, removed from the last (by place) on, so
         * that the places before stay where they are. */
        size_t len = zorder(s, order);
        long long from = c->i1 < 0 ? c->i1 + (long long)len : c->i1;
        long long to = c->i2 < 0 ? c->i2 + (long long)len : c->i2;
        static size_t pick[UINT16_MAX + 1];
        for (size_t i = 0; i < len; i++)
            if (c->op == OP_ZREMRANGEBYRANK
                    ? (long long)i >= from && (long long)i <= to
                    : in_bounds(score_at(s, order[i]), c, false))
                pick[n++] = order[i];
        if (c->op != OP_ZCOUNT) {
            for (size_t i = 1; i < n; i++) /* by place, descending */
                for (size_t j = i; j > 0 && pick[j - 1] < pick[j]; j--) {
                    size_t t = pick[j];
                    pick[j] = pick[j - 1];
                    pick[j - 1] = t;
                }
            for (size_t i = 0; i < n; i++)
                field_delete(s, pick[i]);
            if (s->items == 0) clear(s);
        }
        return put_int(out, 0, (long long)n);
    }
    case OP_ZRANK: {
        if (!field_at(s, c->field, strlen(c->field), &at))
            return put_s(out, "$-1\r\n");
        size_t len = zorder(s, order), r = 0;
        while (order[r] != at)
            r++;
        return put_int(out, 0, (long long)(c->flags & 1 ? len - 1 - r : r));
    }
    case OP_ZMSCORE: {
        size_t o = (size_t)sprintf(out, "*%d\r\n", nm);
        for (int i = 0; i < nm; i++) {
            if (!field_at(s, m[i], strlen(m[i]), &at)) {
                o = put(out, o, "$-1\r\n", 5);
                continue;
            }
            at = value_at(s, at);
            o = put_bulk(out, o, s->v + at + 1, (unsigned char)s->v[at]);
        }
        return o;
    }
    case OP_ZADD_N: { /* the scores set, as ZADD's one pair: the new count */
        if (s->type == MODEL_NONE) {
            clear(s);
            s->type = MODEL_ZSET;
        }
        for (int64_t j = 0; j < c->cnt; j++) {
            char b[8], sc[8], num[32];
            size_t bn = (size_t)bulk_member(c, j, b);
            bulk_score(c, j, sc);
            int sn = score_text(strtod(sc, NULL), num);
            bool there = field_at(s, b, bn, &at);
            n += !there;
            field_put(s, at, there, b, bn, num, (size_t)sn);
        }
        return put_int(out, 0, (long long)n);
    }
    default: { /* ZPOPMIN, ZPOPMAX: the lowest or highest first */
        size_t len = zorder(s, order);
        n = (size_t)count < len ? (size_t)count : len;
        size_t o = (size_t)sprintf(out, "*%zu\r\n", 2 * n);
        for (size_t i = 0; i < n; i++)
            o = put_zentry(s, order[c->op == OP_ZPOPMAX ? len - 1 - i : i],
                           true, out, o);
        /* The members go, read back from the reply. */
        const char *p = line_end(out, out + o) + 2;
        for (size_t i = 0; i < n; i++) {
            const char *b;
            size_t bn;
            take_bulk(&p, out + o, &b, &bn);
            member_rem(s, b, bn);
            take_bulk(&p, out + o, &b, &bn);
        }
        return o;
    }
    }
}

/* The most members a scan's reply may name at once, whatever its COUNT:
 * lull-kv's SCAN_WHOLE (and Redis' 128 listpack entries). */
#define SCAN_WHOLE 128
#define SCAN_BAD   "-model: not members the set holds, or not all\r\n"

/* SSCAN, ZSCAN and HSCAN on s: a missing key is an empty walk; a set of
 * at most SCAN_WHOLE comes whole (a sorted set's in its order, a hash's
 * in any), cursor 0; a larger one's reply names members it holds (with
 * their scores, a hash's fields with their values). The reply (`given`)
 * when it is one of those. */
static size_t scan_cmd(model_val *s, const model_cmd *c, bool live, char *out) {
    bool z = c->op == OP_ZSCAN, h = c->op == OP_HSCAN;
    static size_t order[UINT16_MAX + 1];
    if (!live) return put_s(out, "*2\r\n$1\r\n0\r\n*0\r\n");
    if (s->type != (z ? MODEL_ZSET : h ? MODEL_HASH : MODEL_SET))
        return put_s(out, WRONGTYPE);
    if (z && s->items <= SCAN_WHOLE) { /* the reply it must be */
        size_t len = zorder(s, order);
        size_t o = (size_t)sprintf(out, "*2\r\n$1\r\n0\r\n*%zu\r\n", 2 * len);
        for (size_t i = 0; i < len; i++)
            o = put_zentry(s, order[i], true, out, o);
        return o;
    }
    if (!given) return put_s(out, "-model: the server's walk\r\n");
    const char *p = given, *end = given + given_len, *b;
    size_t bn, at;
    long long n;
    const char *lf = line_end(p, end);
    if (!lf || lf - p != 2 || memcmp(p, "*2", 2) != 0)
        return put_s(out, SCAN_BAD);
    p = lf + 2;
    if (!take_bulk(&p, end, &b, &bn)) return put_s(out, SCAN_BAD);
    bool cursor0 = bn == 1 && b[0] == '0';
    lf = line_end(p, end);
    if (!lf || *p != '*' || !line_count(p + 1, lf, &n) || n < 0)
        return put_s(out, SCAN_BAD);
    p = lf + 2;
    bool whole = s->items <= SCAN_WHOLE; /* a set's: each member once */
    if (whole && (!cursor0 || n != (z || h ? 2 : 1) * s->items))
        return put_s(out, SCAN_BAD);
    static model_val left;
    copy_val(&left, s);
    for (long long i = 0; i < n; i++) {
        model_val *in = whole ? &left : s; /* each once when whole */
        if (!take_bulk(&p, end, &b, &bn) || !field_at(in, b, bn, &at))
            return put_s(out, SCAN_BAD);
        if (z || h) {
            const char *sc;
            size_t sn, va = value_at(in, at);
            if (!take_bulk(&p, end, &sc, &sn) ||
                sn != (unsigned char)in->v[va] ||
                memcmp(sc, in->v + va + 1, sn) != 0)
                return put_s(out, SCAN_BAD);
            i++;
        }
        if (whole) field_delete(&left, at);
    }
    if (p != end) return put_s(out, SCAN_BAD);
    memcpy(out, given, given_len);
    return given_len;
}

/* A list's items, each a length byte and its bytes, from first to last:
 * where item i begins. */
static size_t item_at(const model_val *s, size_t i) {
    size_t at = 0;
    while (i--)
        at += 1 + (unsigned char)s->v[at];
    return at;
}

/* LREM, LSET and LTRIM on a list, or on no key (live false). */
static size_t list_cmd(model_val *s, const model_cmd *c, bool live,
                       const char *v, size_t vlen, char *out) {
    long long n = live ? s->items : 0;
    if (c->op == OP_LSET) {
        if (!live) return put_s(out, "-ERR no such key\r\n");
        long long i = c->i1 < 0 ? c->i1 + n : c->i1;
        if (i < 0 || i >= n) return put_s(out, "-ERR index out of range\r\n");
        size_t at = item_at(s, (size_t)i), old = (unsigned char)s->v[at];
        memmove(s->v + at + 1 + vlen, s->v + at + 1 + old,
                s->len - at - 1 - old);
        s->len = (uint32_t)(s->len - old + vlen);
        s->v[at] = (char)vlen;
        memcpy(s->v + at + 1, v, vlen);
        return put_s(out, "+OK\r\n");
    }
    if (c->op == OP_LTRIM || c->op == OP_LRANGE) {
        /* LRANGE's range: negative from the end, clipped; none empties
         * (LTRIM) or reads none (LRANGE) */
        long long from = c->i1 < 0 ? c->i1 + n : c->i1;
        long long to = c->i2 < 0 ? c->i2 + n : c->i2;
        if (from < 0) from = 0;
        if (to >= n) to = n - 1;
        if (c->op == OP_LRANGE) {
            if (!live || from > to || from >= n) return put_s(out, "*0\r\n");
            size_t o = (size_t)sprintf(out, "*%lld\r\n", to - from + 1);
            for (size_t i = (size_t)from, at = item_at(s, i); i <= (size_t)to;
                 i++) {
                o = put_bulk(out, o, s->v + at + 1, (unsigned char)s->v[at]);
                at += 1 + (unsigned char)s->v[at];
            }
            return o;
        }
        if (!live) return put_s(out, "+OK\r\n");
        if (from > to || from >= n) {
            clear(s);
            return put_s(out, "+OK\r\n");
        }
        size_t a = item_at(s, (size_t)from), b = item_at(s, (size_t)to + 1);
        memmove(s->v, s->v + a, b - a);
        s->len = (uint32_t)(b - a);
        s->items = (uint16_t)(to - from + 1);
        return put_s(out, "+OK\r\n");
    }
    /* LREM: |count| matches at most (0: all), from the tail when
     * negative. */
    if (!live) return put_s(out, ":0\r\n");
    bool tail = c->i1 < 0;
    unsigned long long most =
        tail ? 0 - (unsigned long long)c->i1 : (unsigned long long)c->i1;
    long long gone = 0;
    for (long long k = 0; k < n; k++) {
        if (most && (unsigned long long)gone == most) break;
        long long i = tail ? n - 1 - k : k;
        size_t at = item_at(s, (size_t)(i - (tail ? 0 : gone)));
        size_t len = (unsigned char)s->v[at];
        if (len != vlen || memcmp(s->v + at + 1, v, vlen) != 0) continue;
        memmove(s->v + at, s->v + at + 1 + len, s->len - at - 1 - len);
        s->len -= (uint32_t)(1 + len);
        s->items--;
        gone++;
    }
    if (s->items == 0) clear(s);
    return put_int(out, 0, gone);
}

static void copy_val(model_val *to, const model_val *from);

/* LINSERT on a list, or on no key (live false): before or after the
 * first item equal to the pivot (v) from the head. */
static size_t model_linsert(model_val *s, const model_cmd *c, bool live,
                            const char *v, size_t vlen, char *out) {
    if (!live) return put_s(out, ":0\r\n");
    size_t at = 0, flen = strlen(c->field);
    for (size_t i = 0; i < s->items; i++) {
        size_t len = (unsigned char)s->v[at];
        if (len == vlen && memcmp(s->v + at + 1, v, vlen) == 0) {
            if (c->i1 >= 0) at += 1 + len; /* AFTER */
            memmove(s->v + at + 1 + flen, s->v + at, s->len - at);
            s->v[at] = (char)flen;
            memcpy(s->v + at + 1, c->field, flen);
            s->len += (uint32_t)(1 + flen);
            return put_int(out, 0, ++s->items);
        }
        at += 1 + len;
    }
    return put_s(out, ":-1\r\n");
}

/* LPOS on a list, or on no key (live false): the index of the rank-th
 * item equal to v from the head (from the tail for a negative rank), nil
 * when there is none; with COUNT n, the indexes of up to n (0: all) from
 * that one on, in the order walked; with MAXLEN m (cnt > 0), only the
 * first m items walked are looked at. */
static size_t model_lpos(const model_val *s, const model_cmd *c, bool live,
                         const char *v, size_t vlen, char *out) {
    long long rank = lpos_rank(c), matches = 0, found = 0;
    bool tail = rank < 0, count = c->i2 >= 0;
    if (tail) rank = -rank;
    size_t n = live ? s->items : 0;
    static uint32_t at[UINT16_MAX + 1]; /* where item i begins */
    for (size_t i = 0, p = 0; i < n; i++) {
        at[i] = (uint32_t)p;
        p += 1 + (unsigned char)s->v[p];
    }
    static char ints[MODEL_REQ_MAX];
    size_t o = 0;
    for (size_t k = 0; k < n && (c->cnt <= 0 || k < (size_t)c->cnt); k++) {
        size_t i = tail ? n - 1 - k : k;
        if ((unsigned char)s->v[at[i]] != vlen ||
            memcmp(s->v + at[i] + 1, v, vlen) != 0 || ++matches < rank)
            continue;
        if (!count) return put_int(out, 0, (long long)i);
        o = put_int(ints, o, (long long)i);
        if (++found == c->i2) break;
    }
    if (!count) return put_s(out, "$-1\r\n");
    size_t h = (size_t)sprintf(out, "*%lld\r\n", found);
    memcpy(out + h, ints, o);
    return h + o;
}

/* LMOVE and RPOPLPUSH from s to d (d == s: the same name): an item off
 * one end of s onto one end of d (made when it is no key); s goes when
 * emptied. Each keeps its own expiry. */
static size_t move_item(model_val *s, model_val *d, const model_cmd *c,
                        int64_t now, char *out) {
    bool from_left = c->op == OP_LMOVE && c->i1 < 0;
    bool to_left = c->op == OP_RPOPLPUSH || c->i2 < 0;
    if (!alive(s, now)) {
        clear(s);
        return put_s(out, "$-1\r\n");
    }
    if (s->type != MODEL_LIST) return put_s(out, WRONGTYPE);
    if (d != s && !alive(d, now)) clear(d);
    if (d->type != MODEL_NONE && d->type != MODEL_LIST)
        return put_s(out, WRONGTYPE);
    char item[256];
    size_t at = from_left ? 0 : item_at(s, s->items - 1);
    size_t n = (unsigned char)s->v[at];
    memcpy(item, s->v + at + 1, n);
    size_t r = put_bulk(out, 0, item, n);
    memmove(s->v + at, s->v + at + 1 + n, s->len - at - 1 - n);
    s->len -= (uint32_t)(1 + n);
    s->items--;
    if (d->type == MODEL_NONE) {
        clear(d);
        d->type = MODEL_LIST;
    }
    at = to_left ? 0 : d->len;
    memmove(d->v + at + 1 + n, d->v + at, d->len - at);
    d->v[at] = (char)n;
    memcpy(d->v + at + 1, item, n);
    d->len += (uint32_t)(1 + n);
    d->items++;
    if (s->items == 0) clear(s);
    return r;
}

/* RENAME and RENAMENX from s to d (d == s: the same name): the value
 * and its expiry move, d's old ones go. */
static size_t rename_key(model_val *s, model_val *d, const model_cmd *c,
                         int64_t now, char *out) {
    bool nx = c->op == OP_RENAMENX;
    if (!alive(s, now)) {
        clear(s);
        return put_s(out, "-ERR no such key\r\n");
    }
    if (d == s) return put_s(out, nx ? ":0\r\n" : "+OK\r\n");
    if (!alive(d, now)) clear(d);
    if (nx && d->type != MODEL_NONE) return put_s(out, ":0\r\n");
    copy_val(d, s);
    clear(s);
    return put_s(out, nx ? ":1\r\n" : "+OK\r\n");
}

/* The command on state s (updated in place) at instant now, in a window
 * that ends at hi (SETEX's expiry is somewhere in it, shifted); the reply
 * into out. */
static size_t run(model_val *s, const model_cmd *c, int64_t now, int64_t hi,
                  char *out) {
    bool live = alive(s, now);
    if (!live) clear(s);
    char v[MODEL_VAL_MAX];
    size_t vlen = model_value(c, v);
    switch (c->op) {
    case OP_SET:
    case OP_SET_PXAT:
        set_string(s, v, vlen);
        if (c->op == OP_SET_PXAT) set_expire(s, c->at, c->at);
        return put_s(out, "+OK\r\n");
    case OP_SET_NX:
    case OP_SET_XX:
        if (live != (c->op == OP_SET_XX)) return put_s(out, "$-1\r\n");
        set_string(s, v, vlen);
        return put_s(out, "+OK\r\n");
    case OP_GET:
        if (!live) return put_s(out, "$-1\r\n");
        if (s->type != MODEL_STRING) return put_s(out, WRONGTYPE);
        return put_bulk(out, 0, s->v, s->len);
    case OP_GETRANGE: { /* Redis' order: both ends negative and crossed
                         * first, then each end made absolute and clipped */
        if (live && s->type != MODEL_STRING) return put_s(out, WRONGTYPE);
        int64_t len = live ? (int64_t)s->len : 0, a = c->i1, b = c->i2;
        if (a < 0 && b < 0 && a > b) return put_s(out, "$0\r\n\r\n");
        if (a < 0) a += len;
        if (b < 0) b += len;
        if (a < 0) a = 0;
        if (b < 0) b = 0;
        if (b >= len) b = len - 1;
        if (len == 0 || a > b) return put_s(out, "$0\r\n\r\n");
        return put_bulk(out, 0, s->v + a, (size_t)(b - a + 1));
    }
    case OP_MGET_ONE: /* MGET answers nil for a key of another type */
        if (!live || s->type != MODEL_STRING) return put_s(out, "$-1\r\n");
        return put_bulk(out, 0, s->v, s->len);
    case OP_DEL:
    case OP_UNLINK:
        clear(s);
        return put_int(out, 0, live);
    case OP_EXISTS:
    case OP_TOUCH:
        return put_int(out, 0, live);
    case OP_INCR:
    case OP_INCRBY:
    case OP_DECRBY: {
        long long n = 0, by = 1;
        if (c->op != OP_INCR) {
            if (!as_integer(v, vlen, &by)) return put_s(out, NOT_INTEGER);
            if (c->op == OP_DECRBY) {
                if (by == INT64_MIN) return put_s(out, DECR_MIN);
                by = -by;
            }
        }
        if (live && s->type != MODEL_STRING) return put_s(out, WRONGTYPE);
        if (live && !as_integer(s->v, s->len, &n))
            return put_s(out, NOT_INTEGER);
        if ((by < 0 && n < INT64_MIN - by) || (by > 0 && n > INT64_MAX - by))
            return put_s(out, OVERFLOW);
        char num[24];
        int len = snprintf(num, sizeof num, "%lld", n + by);
        int64_t keep = s->expire, keep_hi = s->expire_hi;
        set_string(s, num, (size_t)len);
        set_expire(s, keep, keep_hi);
        return put_int(out, 0, n + by);
    }
    case OP_INCRBYFLOAT: {
        long double n = 0, by;
        if (live && s->type != MODEL_STRING) return put_s(out, WRONGTYPE);
        if ((live && !as_float(s->v, s->len, &n)) || !as_float(v, vlen, &by))
            return put_s(out, NOT_FLOAT);
        n += by;
        if (isnan(n) || isinf(n)) return put_s(out, NAN_OR_INF);
        char num[5200];
        int len = format_ld(n, num, sizeof num);
        int64_t keep = s->expire, keep_hi = s->expire_hi;
        set_string(s, num, (size_t)len);
        set_expire(s, keep, keep_hi);
        return put_bulk(out, 0, num, (size_t)len);
    }
    case OP_GETDEL:
    case OP_GETEX_PXAT:
    case OP_GETEX_PERSIST: {
        if (!live) return put_s(out, "$-1\r\n");
        if (s->type != MODEL_STRING) return put_s(out, WRONGTYPE);
        size_t at = put_bulk(out, 0, s->v, s->len);
        if (c->op == OP_GETDEL || (c->op == OP_GETEX_PXAT && c->at <= now))
            clear(s); /* a time already past deletes the key */
        else if (c->op == OP_GETEX_PXAT)
            set_expire(s, c->at, c->at);
        else
            set_expire(s, 0, 0);
        return at;
    }
    case OP_APPEND:
        if (!live) {
            set_string(s, v, vlen);
            return put_int(out, 0, (long long)vlen);
        }
        if (s->type != MODEL_STRING) return put_s(out, WRONGTYPE);
        memcpy(s->v + s->len, v, vlen);
        s->len += (uint32_t)vlen;
        return put_int(out, 0, s->len);
    case OP_SETRANGE: {
        /* The offset, then the type; an empty value makes no key; a gap
         * past the end is zeros; the expiry stays. */
        if (c->i1 < 0) return put_s(out, "-ERR offset is out of range\r\n");
        if (live && s->type != MODEL_STRING) return put_s(out, WRONGTYPE);
        if (vlen == 0) return put_int(out, 0, live ? s->len : 0);
        size_t end = (size_t)c->i1 + vlen;
        if (end > MODEL_VAL_MAX)
            return put_s(out, "-model: value too long\r\n");
        if (!live) set_string(s, "", 0);
        if (end > s->len) {
            memset(s->v + s->len, 0, end - s->len);
            s->len = (uint32_t)end;
        }
        memcpy(s->v + c->i1, v, vlen);
        return put_int(out, 0, s->len);
    }
    case OP_PEXPIREAT_IF: {
        /* No expiry is an infinite one: GT never passes it, LT always
         * does (Redis 7.0). Then as PEXPIREAT. */
        if (!live) return put_s(out, ":0\r\n");
        int64_t cur = s->expire; /* one outcome in its range (split_at) */
        int opt = (int)(c->i2 & 3);
        if ((opt == 0 && cur) || (opt == 1 && !cur) ||
            (opt == 2 && (!cur || c->at <= cur)) ||
            (opt == 3 && cur && c->at >= cur))
            return put_s(out, ":0\r\n");
        if (c->at <= now)
            clear(s);
        else
            set_expire(s, c->at, c->at);
        return put_s(out, ":1\r\n");
    }
    case OP_PEXPIREAT:
        if (!live) return put_s(out, ":0\r\n");
        if (c->at <= now)
            clear(s); /* a time already past deletes the key */
        else
            set_expire(s, c->at, c->at);
        return put_s(out, ":1\r\n");
    case OP_PERSIST:
        if (!live || !s->expire) return put_s(out, ":0\r\n");
        set_expire(s, 0, 0);
        return put_s(out, ":1\r\n");
    case OP_RPUSH:
    case OP_RPUSH_N: {
        if (live && s->type != MODEL_LIST) return put_s(out, WRONGTYPE);
        int64_t n = c->op == OP_RPUSH_N && c->i2 > 1 ? c->i2 : 1;
        size_t add = 0;
        for (int64_t j = 0; j < n; j++) {
            size_t len = vlen;
            rpush_item(v, &len, (size_t)j);
            add += 1 + len;
        }
        if (s->len + add > MODEL_VAL_MAX ||
            (live ? s->items : 0) + n > UINT16_MAX)
            return put_s(out, "-model: value too long\r\n");
        if (!live) {
            clear(s);
            s->type = MODEL_LIST;
        }
        for (int64_t j = 0; j < n; j++) {
            size_t len = vlen;
            const char *item = rpush_item(v, &len, (size_t)j);
            s->v[s->len++] = (char)len;
            memcpy(s->v + s->len, item, len);
            s->len += (uint32_t)len;
            s->items++;
        }
        return put_int(out, 0, s->items);
    }
    case OP_LPOP: {
        if (!live) return put_s(out, "$-1\r\n");
        if (s->type != MODEL_LIST) return put_s(out, WRONGTYPE);
        size_t n = (unsigned char)s->v[0];
        size_t at = put_bulk(out, 0, s->v + 1, n);
        memmove(s->v, s->v + 1 + n, s->len - 1 - n);
        s->len -= (uint32_t)(1 + n);
        if (--s->items == 0) clear(s);
        return at;
    }
    case OP_LLEN:
        if (live && s->type != MODEL_LIST) return put_s(out, WRONGTYPE);
        return put_int(out, 0, live ? s->items : 0);
    case OP_TYPE:
        if (!live) return put_s(out, "+none\r\n");
        return s->type == MODEL_STRING ? put_s(out, "+string\r\n")
               : s->type == MODEL_LIST ? put_s(out, "+list\r\n")
               : s->type == MODEL_SET  ? put_s(out, "+set\r\n")
               : s->type == MODEL_ZSET ? put_s(out, "+zset\r\n")
                                       : put_s(out, "+hash\r\n");
    case OP_LREM:
    case OP_LSET:
    case OP_LTRIM:
    case OP_LRANGE:
        if (live && s->type != MODEL_LIST) return put_s(out, WRONGTYPE);
        return list_cmd(s, c, live, v, vlen, out);
    case OP_RENAME:
    case OP_RENAMENX: {
        /* key2 missing (model_apply2 runs the two-key form) */
        static model_val none;
        memset(&none, 0, offsetof(model_val, v));
        return rename_key(s, strcmp(c->key, c->key2) ? &none : s, c, now, out);
    }
    case OP_LINSERT:
        if (live && s->type != MODEL_LIST) return put_s(out, WRONGTYPE);
        return model_linsert(s, c, live, v, vlen, out);
    case OP_LPOS:
        if (live && s->type != MODEL_LIST) return put_s(out, WRONGTYPE);
        return model_lpos(s, c, live, v, vlen, out);
    case OP_LMOVE:
    case OP_RPOPLPUSH: {
        static model_val none; /* key2 missing, as for RENAME */
        memset(&none, 0, offsetof(model_val, v));
        return move_item(s, strcmp(c->key, c->key2) ? &none : s, c, now, out);
    }
    case OP_HSET:
    case OP_HSETNX:
    case OP_HDEL:
    case OP_HGET:
    case OP_HGETALL:
    case OP_HLEN:
    case OP_HINCRBY:
    case OP_HINCRBYFLOAT:
        return hash_cmd(s, c, live, v, vlen, out);
    case OP_HSCAN:
        return scan_cmd(s, c, live, out);
    case OP_SETEX:
    case OP_PSETEX: {
        int64_t ms = c->op == OP_SETEX ? c->i1 * 1000 : c->i1;
        if (c->i1 <= 0)
            return put_s(out, c->op == OP_SETEX
                                  ? "-ERR invalid expire time in 'setex' "
                                    "command\r\n"
                                  : "-ERR invalid expire time in 'psetex' "
                                    "command\r\n");
        set_string(s, v, vlen);
        set_expire(s, now + ms, hi + ms);
        return put_s(out, "+OK\r\n");
    }
    case OP_SADD:
    case OP_SREM:
    case OP_SMEMBERS:
    case OP_SISMEMBER:
    case OP_SCARD:
    case OP_SPOP:
    case OP_SRANDMEMBER:
    case OP_SADD_N:
    case OP_SSCAN:
        return set_cmd(s, c, live, out);
    case OP_SMOVE:
    case OP_SETOP:
    case OP_SETOP_STORE: {
        static model_val none; /* key2 missing, as for RENAME */
        memset(&none, 0, offsetof(model_val, v));
        return set_two(s, strcmp(c->key, c->key2) ? &none : s, c, now, out);
    }
    case OP_ZADD:
    case OP_ZINCRBY:
    case OP_ZREM:
    case OP_ZSCORE:
    case OP_ZCARD:
    case OP_ZRANGE:
    case OP_ZPOPMIN:
    case OP_ZPOPMAX:
    case OP_ZRANGEBYSCORE:
    case OP_ZCOUNT:
    case OP_ZREMRANGEBYSCORE:
    case OP_ZREMRANGEBYRANK:
    case OP_ZRANK:
    case OP_ZMSCORE:
    case OP_ZADD_N:
    case OP_ZSCAN:
        return zset_cmd(s, c, live, v, vlen, out);
    case OP_EXPIRE: /* relative, as SETEX: within the window, shifted */
        if (!live) return put_s(out, ":0\r\n");
        if (c->i1 <= 0)
            clear(s); /* already past: the key goes */
        else
            set_expire(s, now + c->i1 * 1000, hi + c->i1 * 1000);
        return put_s(out, ":1\r\n");
    }
    return 0;
}

size_t model_reply(const model_val *s, const model_cmd *c, int64_t now,
                   char *out) {
    static model_val copy;
    copy_val(&copy, s);
    return run(&copy, c, now, now, out);
}

/* a and b hold the same, their expiry times aside. */
static bool same_value(const model_val *a, const model_val *b) {
    return a->type == b->type && a->len == b->len && a->items == b->items &&
           memcmp(a->v, b->v, a->len) == 0;
}

static bool same(const model_val *a, const model_val *b) {
    return same_value(a, b) && a->expire == b->expire &&
           a->expire_hi == b->expire_hi;
}

static bool has_same(const model_key *k, const model_val *s) {
    for (int i = 0; i < k->n; i++)
        if (same(&k->c[i], s)) return true;
    return false;
}

bool model_key_has(const model_key *k, const model_val *s) {
    for (int i = 0; i < k->n; i++) {
        const model_val *c = &k->c[i];
        if (same_value(c, s) &&
            (c->expire ? s->expire >= c->expire && s->expire <= c->expire_hi
                       : !s->expire))
            return true;
    }
    return false;
}

/* Copies a state: its header and the bytes in use, not the whole
 * buffer (the simulator settles every key after every reply). */
static void copy_val(model_val *to, const model_val *from) {
    memcpy(to, from, offsetof(model_val, v));
    memcpy(to->v, from->v, from->len);
}

void model_key_copy(model_key *to, const model_key *from) {
    to->n = from->n;
    for (int i = 0; i < from->n; i++)
        copy_val(&to->c[i], &from->c[i]);
}

static void add(model_key *k, const model_val *s) {
    /* A state that differs from one kept only in an expiry range that
     * meets the other's widens it: the union of the two. */
    for (int i = 0; i < k->n; i++) {
        model_val *c = &k->c[i];
        if (!same_value(c, s) || !c->expire != !s->expire) continue;
        if (s->expire > c->expire_hi + 1 || c->expire > s->expire_hi + 1)
            continue;
        if (s->expire < c->expire) c->expire = s->expire;
        if (s->expire_hi > c->expire_hi) c->expire_hi = s->expire_hi;
        return;
    }
    if (has_same(k, s)) return;
    /* More states than the model holds: the oldest one goes. Never seen
     * in practice (a reply narrows them to one or two). */
    if (k->n == MODEL_CANDIDATES) {
        memmove(&k->c[0], &k->c[1], (MODEL_CANDIDATES - 1) * sizeof k->c[0]);
        k->n--;
    }
    copy_val(&k->c[k->n++], s);
}

static const char *line_end(const char *p, const char *end);
static bool line_count(const char *p, const char *lf, long long *n);

/* t joins the instants at[] to try, once, when it is in (lo, hi]. */
static void at_add(int64_t *at, int *n, int64_t t, int64_t lo, int64_t hi) {
    if (t <= lo || t > hi) return;
    for (int i = 0; i < *n; i++)
        if (at[i] == t) return;
    at[(*n)++] = t;
}

/* The states s may be in at instant t, into v: s, and when t falls
 * inside its expiry range, s there for sure (expiring at t or later)
 * beside s gone (it reads as expired at t). */
static int views(const model_val *s, int64_t t, model_val v[2]) {
    copy_val(&v[0], s);
    if (!s->expire || s->expire >= t || s->expire_hi < t) return 1;
    copy_val(&v[1], s);
    v[1].expire = t;
    return 2;
}

/* HGETALL's reply with its pairs sorted by field (per 2), or a set's
 * members sorted (per 1): the model's order, into out (as long); a reply
 * not of those is copied as it is. */
static void sort_pairs(const char *r, size_t len, char *out, int per) {
    memcpy(out, r, len);
    long long n;
    const char *lf = line_end(r, r + len);
    if (len < 2 || r[0] != '*' || !lf || !line_count(r + 1, lf, &n) ||
        n % per || n > 1024 * per || n == 0)
        return;
    struct pair {
        const char *p;
        size_t len;    /* the pair's bytes */
        const char *f; /* the field */
        long long flen;
    };
    static struct pair pairs[1024]; /* sets past SCAN_WHOLE: hundreds */
    const char *p = lf + 2, *end = r + len;
    size_t o = (size_t)(p - r); /* the header's bytes */
    n /= per;
    for (long long i = 0; i < n; i++) {
        pairs[i].p = p;
        for (int j = 0; j < per; j++) {
            lf = line_end(p, end);
            long long bl;
            if (!lf || *p != '$' || !line_count(p + 1, lf, &bl) || bl < 0 ||
                end - (lf + 2) < bl + 2)
                return;
            if (j == 0) {
                pairs[i].f = lf + 2;
                pairs[i].flen = bl;
            }
            p = lf + 2 + bl + 2;
        }
        pairs[i].len = (size_t)(p - pairs[i].p);
    }
    /* Insertion sort: a few hundred members at most. */
    for (long long i = 1; i < n; i++)
        for (long long j = i; j > 0; j--) {
            struct pair *a = &pairs[j - 1], *b = &pairs[j];
            size_t m = (size_t)(a->flen < b->flen ? a->flen : b->flen);
            int d = memcmp(a->f, b->f, m);
            if (d < 0 || (d == 0 && a->flen <= b->flen)) break;
            struct pair t = *a;
            *a = *b;
            *b = t;
        }
    for (long long i = 0; i < n; i++) {
        memcpy(out + o, pairs[i].p, pairs[i].len);
        o += pairs[i].len;
    }
}

/* PEXPIREAT's GT and LT compare the key's expiry with t: a state whose
 * expiry range holds t is three (before t, t, after t), in each of which
 * the comparison has one outcome. Into part, their number; 0 when s is
 * one already. */
static int split_at(const model_val *s, const model_cmd *c, model_val part[3]) {
    int64_t t = c->at, lo = s->expire, hi = s->expire_hi;
    if (c->op != OP_PEXPIREAT_IF || !lo || lo == hi || t < lo || t > hi)
        return 0;
    int n = 0;
    int64_t from[3] = {lo, t, t + 1}, to[3] = {t - 1, t, hi};
    for (int i = 0; i < 3; i++) {
        if (from[i] > to[i]) continue;
        copy_val(&part[n], s);
        set_expire(&part[n++], from[i], to[i]);
    }
    return n;
}

bool model_apply(model_key *k, const model_cmd *c, int64_t lo, int64_t hi,
                 const char *reply, size_t len) {
    static model_key next;
    next.n = 0;
    static char out[MODEL_REQ_MAX];
    static char sorted[MODEL_REQ_MAX];
    if ((c->op == OP_HGETALL || c->op == OP_SMEMBERS || c->op == OP_SETOP) &&
        len <= sizeof sorted) {
        sort_pairs(reply, len, sorted, c->op == OP_HGETALL ? 2 : 1);
        reply = sorted;
    }
    given = reply; /* SPOP's and SRANDMEMBER's members */
    given_len = len;
    static model_val part[3];
    for (int i = 0; i < k->n; i++) {
        int np = split_at(&k->c[i], c, part);
        for (int p = 0; p < (np ? np : 1); p++) {
            /* The outcome changes only where an instant in the window
             * passes the key's expiry (the ms after either end of its
             * range) or reaches the command's time: try lo and those. */
            const model_val *ki = np ? &part[p] : &k->c[i];
            int64_t at[4] = {lo, 0, 0, 0};
            int nat = 1;
            at_add(at, &nat, ki->expire ? ki->expire + 1 : 0, lo, hi);
            at_add(at, &nat, ki->expire ? ki->expire_hi + 1 : 0, lo, hi);
            if (c->op == OP_PEXPIREAT || c->op == OP_PEXPIREAT_IF ||
                c->op == OP_GETEX_PXAT)
                at_add(at, &nat, c->at, lo, hi);
            for (int j = 0; j < nat; j++) {
                static model_val v[2];
                int nv = views(ki, at[j], v);
                for (int m = 0; m < nv; m++) {
                    size_t n = run(&v[m], c, at[j], hi, out);
                    if (n == len && memcmp(out, reply, len) == 0)
                        add(&next, &v[m]);
                }
            }
        }
    }
    given = NULL;
    if (next.n == 0) return false;
    k->n = next.n;
    for (int i = 0; i < next.n; i++)
        copy_val(&k->c[i], &next.c[i]);
    return true;
}

bool model_apply2(model_key *from, model_key *to, const model_cmd *c,
                  int64_t lo, int64_t hi, const char *reply, size_t len) {
    if (from == to || strcmp(c->key, c->key2) == 0)
        return model_apply(from, c, lo, hi, reply, len);
    static model_key nf, nt;
    static model_val s, d;
    static char out[MODEL_REQ_MAX], sorted[MODEL_REQ_MAX];
    nf.n = nt.n = 0;
    if (c->op == OP_SETOP && len <= sizeof sorted) {
        sort_pairs(reply, len, sorted, 1);
        reply = sorted;
    }
    for (int i = 0; i < from->n; i++)
        for (int j = 0; j < to->n; j++) {
            /* The outcome changes only where an instant passes either
             * end of either key's expiry range. */
            const model_val *f = &from->c[i], *t = &to->c[j];
            int64_t at[5] = {lo, 0, 0, 0, 0};
            int nat = 1;
            at_add(at, &nat, f->expire ? f->expire + 1 : 0, lo, hi);
            at_add(at, &nat, f->expire ? f->expire_hi + 1 : 0, lo, hi);
            at_add(at, &nat, t->expire ? t->expire + 1 : 0, lo, hi);
            at_add(at, &nat, t->expire ? t->expire_hi + 1 : 0, lo, hi);
            for (int k = 0; k < nat; k++) {
                static model_val fv[2], tv[2];
                int nf_ = views(f, at[k], fv), nt_ = views(t, at[k], tv);
                for (int a = 0; a < nf_; a++)
                    for (int b = 0; b < nt_; b++) {
                        copy_val(&s, &fv[a]);
                        copy_val(&d, &tv[b]);
                        size_t n = c->op == OP_LMOVE || c->op == OP_RPOPLPUSH
                                       ? move_item(&s, &d, c, at[k], out)
                                   : c->op == OP_RENAME || c->op == OP_RENAMENX
                                       ? rename_key(&s, &d, c, at[k], out)
                                       : set_two(&s, &d, c, at[k], out);
                        if (n != len || memcmp(out, reply, len) != 0) continue;
                        add(&nf, &s);
                        add(&nt, &d);
                    }
            }
        }
    if (nf.n == 0) return false;
    model_key_copy(from, &nf);
    model_key_copy(to, &nt);
    return true;
}

bool model_list_item(const model_val *s, uint32_t i, model_cmd *c) {
    if (s->type != MODEL_LIST || s->items == 0) return false;
    size_t at = item_at(s, i % s->items), n = (unsigned char)s->v[at];
    if (n >= sizeof c->val) return false;
    memcpy(c->val, s->v + at + 1, n);
    c->val[n] = 0;
    c->pad = 0;
    return true;
}

bool model_member(const model_val *s, uint32_t i, model_cmd *c) {
    if ((s->type != MODEL_SET && s->type != MODEL_ZSET) || s->items == 0)
        return false;
    size_t p = 0;
    for (i %= s->items; i > 0; i--)
        p = next_entry(s, p);
    size_t n = (unsigned char)s->v[p];
    if (n >= sizeof c->field) return false;
    memcpy(c->field, s->v + p + 1, n);
    c->field[n] = 0;
    return true;
}

/* must keeps only the members every state of k holds (a state that is
 * no set or sorted set holds none). */
void model_scan_keep(model_val *must, const model_key *k) {
    for (int i = 0; i < k->n; i++) {
        const model_val *c = &k->c[i];
        bool members = c->type == MODEL_SET || c->type == MODEL_ZSET;
        size_t p = 0, at;
        for (size_t j = 0; j < must->items;) {
            size_t n = (unsigned char)must->v[p];
            if (members && field_at(c, must->v + p + 1, n, &at)) {
                p = next_entry(must, p);
                j++;
            } else {
                field_delete(must, p);
            }
        }
    }
}

void model_scan_begin(model_val *must, model_val *seen, const model_key *k) {
    const model_val *c = &k->c[0];
    clear(seen);
    seen->type = MODEL_SET;
    clear(must);
    must->type = MODEL_SET;
    if (c->type != MODEL_SET && c->type != MODEL_ZSET) return;
    for (size_t i = 0, p = 0; i < c->items; i++, p = next_entry(c, p))
        set_add_m(must, c->v + p + 1, (unsigned char)c->v[p]);
    model_scan_keep(must, k);
}

bool model_scan_reply(model_val *seen, const char *r, size_t len, bool pairs,
                      uint64_t *cursor) {
    const char *p = r, *end = r + len, *b;
    size_t bn;
    long long n;
    const char *lf = line_end(p, end);
    if (!lf || lf - p != 2 || memcmp(p, "*2", 2) != 0) return false;
    p = lf + 2;
    if (!take_bulk(&p, end, &b, &bn) || bn == 0 || bn > 20) return false;
    char num[24];
    memcpy(num, b, bn);
    num[bn] = 0;
    *cursor = strtoull(num, NULL, 10);
    lf = line_end(p, end);
    if (!lf || *p != '*' || !line_count(p + 1, lf, &n)) return false;
    p = lf + 2;
    for (long long i = 0; i < n; i += 1 + pairs) {
        if (!take_bulk(&p, end, &b, &bn)) return false;
        set_add_m(seen, b, bn);
        if (pairs && !take_bulk(&p, end, &b, &bn)) return false;
    }
    return p == end;
}

bool model_scan_missed(const model_val *must, const model_val *seen,
                       char *out) {
    size_t at;
    for (size_t i = 0, p = 0; i < must->items; i++, p = next_entry(must, p)) {
        size_t n = (unsigned char)must->v[p];
        if (field_at(seen, must->v + p + 1, n, &at)) continue;
        memcpy(out, must->v + p + 1, n);
        out[n] = 0;
        return true;
    }
    return false;
}

/* In place: the states kept move down over the ones merged away, and a
 * state is only compared with those before it, already settled. A state
 * whose expiry range holds lo is two: gone, and there until lo or later
 * (the no key goes after the others). */
void model_settle(model_key *k, int64_t lo) {
    int n = k->n;
    bool gone = false;
    k->n = 0;
    for (int i = 0; i < n; i++) {
        model_val *s = &k->c[i];
        if (s->type != MODEL_NONE && s->expire && s->expire < lo &&
            s->expire_hi >= lo) {
            s->expire = lo;
            gone = true;
        }
        if (!alive(s, lo)) clear(s);
        if (has_same(k, s)) continue;
        if (k->n != i) copy_val(&k->c[k->n], s);
        k->n++;
    }
    if (gone) {
        static model_val none;
        add(k, &none);
    }
}

void model_exists(const model_key *k, int64_t lo, int64_t hi, bool *may,
                  bool *must) {
    *may = false;
    *must = true;
    for (int i = 0; i < k->n; i++) {
        const model_val *s = &k->c[i];
        if (s->type == MODEL_NONE) {
            *must = false;
            continue;
        }
        if (!s->expire || s->expire_hi >= lo) *may = true;
        if (s->expire && store_expired(s->expire, hi)) *must = false;
    }
}

bool model_from_store(const store *st, const char *key, int64_t now,
                      model_val *out) {
    memset(out, 0, sizeof *out);
    dict_entry *e = store_find(st, key, strlen(key));
    if (!e) return true;
    kobj *o = store_obj(e);
    int64_t expire = store_expire(st, e);
    if (store_expired(expire, now)) return true;
    set_expire(out, expire, expire);
    if (o->type == KV_STRING) {
        if (o->len > MODEL_VAL_MAX) return false;
        set_string(out, kobj_str(o), o->len);
        set_expire(out, expire, expire);
        return true;
    }
    if (o->type == KV_HASH) {
        dict *d = &((kv_hash *)o->val)->d;
        out->type = MODEL_HASH;
        for (size_t b = 0; b < d->nbuckets; b++)
            for (dict_entry *f = d->buckets[b]; f; f = f->next) {
                kv_elem *x = hash_value(f);
                size_t at;
                if (f->klen > 255 || x->len > 255 ||
                    out->len + 2 + f->klen + x->len > MODEL_VAL_MAX)
                    return false;
                bool there = field_at(out, dict_key(d, f), f->klen, &at);
                field_put(out, at, there, dict_key(d, f), f->klen,
                          elem_bytes(x), x->len);
            }
        return true;
    }
    if (o->type == KV_SET || o->type == KV_ZSET) {
        dict *d = o->type == KV_SET ? &((kv_set *)o->val)->d
                                    : &((kv_zset *)o->val)->d;
        out->type = o->type == KV_SET ? MODEL_SET : MODEL_ZSET;
        for (size_t b = 0; b < d->nbuckets; b++)
            for (dict_entry *f = d->buckets[b]; f; f = f->next) {
                char num[32];
                int n = o->type == KV_SET
                            ? 0
                            : score_text(zset_member(f)->score, num);
                size_t at;
                if (f->klen > 255 ||
                    out->len + 2 + f->klen + (size_t)n > MODEL_VAL_MAX)
                    return false;
                bool there = field_at(out, dict_key(d, f), f->klen, &at);
                field_put(out, at, there, dict_key(d, f), f->klen, num,
                          (size_t)n);
            }
        return true;
    }
    if (o->type != KV_LIST) return false;
    kv_list *l = o->val;
    out->type = MODEL_LIST;
    for (size_t i = 0; i < l->n; i++) {
        kv_elem *x = list_at(l, i);
        if (x->len > 255 || out->len + 1 + x->len > MODEL_VAL_MAX) return false;
        out->v[out->len++] = (char)x->len;
        memcpy(out->v + out->len, elem_bytes(x), x->len);
        out->len += (uint32_t)x->len;
        out->items++;
    }
    return true;
}

void model_describe(const model_val *s, char *out, size_t cap) {
    if (s->type == MODEL_NONE) {
        snprintf(out, cap, "none");
        return;
    }
    int n = snprintf(out, cap, "%s \"",
                     s->type == MODEL_STRING ? "string"
                     : s->type == MODEL_LIST ? "list"
                     : s->type == MODEL_SET  ? "set"
                     : s->type == MODEL_ZSET ? "zset"
                                             : "hash");
    for (size_t i = 0; i < s->len && (size_t)n + 8 < cap; i++) {
        unsigned char ch = (unsigned char)s->v[i];
        if (s->type != MODEL_STRING && ch < 32)
            n += snprintf(out + n, cap - (size_t)n, "|");
        else
            out[n++] = (char)ch;
    }
    if (s->expire_hi != s->expire)
        snprintf(out + n, cap - (size_t)n, "\" expire %" PRId64 "..%" PRId64,
                 s->expire, s->expire_hi);
    else
        snprintf(out + n, cap - (size_t)n, "\" expire %" PRId64, s->expire);
}

/* The end of a CRLF-terminated line from p, or NULL. */
static const char *line_end(const char *p, const char *end) {
    for (; p + 1 < end; p++)
        if (p[0] == '\r' && p[1] == '\n') return p;
    return NULL;
}

/* The count of a "$n" or "*n" line, its bytes [p, lf): false when they
 * are not one. Not sscanf, which measures the whole string first: a
 * 64 KiB reply read in pieces was scanned again at every piece. */
static bool line_count(const char *p, const char *lf, long long *n) {
    bool neg = p < lf && *p == '-';
    p += neg;
    if (p == lf || lf - p > 18) return false;
    long long v = 0;
    for (; p < lf; p++) {
        if (*p < '0' || *p > '9') return false;
        v = v * 10 + (*p - '0');
    }
    *n = neg ? -v : v;
    return true;
}

static long parse_one(const char *p, const char *end, int depth) {
    if (p >= end) return 0;
    const char *lf = line_end(p, end);
    if (!lf) return 0;
    long head = (long)(lf - p) + 2;
    long long n = 0;
    switch (p[0]) {
    case '+':
    case '-':
    case ':':
        return head;
    case '$':
    case '*':
        if (!line_count(p + 1, lf, &n)) return -1;
        break;
    default:
        return -1;
    }
    if (n < 0) return head;
    if (p[0] == '$') {
        if (end - (p + head) < n + 2) return 0;
        return head + (long)n + 2;
    }
    if (depth > 4) return -1;
    long at = head;
    for (long long i = 0; i < n; i++) {
        long r = parse_one(p + at, end, depth + 1);
        if (r <= 0) return r;
        at += r;
    }
    return at;
}

long model_reply_len(const char *p, size_t n) {
    return parse_one(p, p + n, 0);
}
