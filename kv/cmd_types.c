/* cmd_types.c: the commands on lists, sets, hashes and sorted sets, and
 * the string commands beyond GET and SET (MSET, MSETNX, MGET, SETNX, APPEND,
 * STRLEN, GETSET, GETRANGE, SETRANGE). Their replies and errors are
 * Redis 7.0's, word for word; kv/integration.sh compares them with a
 * redis-server's when one is installed.
 *
 * Each write logs what repeats it on a replica (cmd.c has the rule): the
 * request itself when it is deterministic, SPOP as the SREM of what it
 * popped, MSETNX as the MSET it did. A collection emptied by a command is
 * deleted, as in Redis. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_int.h"
#include "types.h"

/* ------------------------------------------------------------ helpers */

/* The key's value of `type` for a read: *e NULL when the key is missing;
 * false (with the reply) when it holds another type. */
static bool find_of(kv *k, const resp_arg *key, int type, dict_entry **e,
                    buf *out) {
    *e = kv_lookup(k, key);
    if (*e && store_obj(*e)->type != type) {
        reply_wrongtype(out);
        return false;
    }
    return true;
}

static void *new_of(int type) {
    switch (type) {
    case KV_LIST:
        return list_new();
    case KV_SET:
        return set_new();
    case KV_HASH:
        return hash_new();
    default:
        return zset_new();
    }
}

/* The key's value of `type` for a write, made (empty) when the key is
 * missing; NULL with the reply on a wrong type or out of memory. */
static void *make_of(kv *k, const resp_arg *key, int type, dict_entry **pe,
                     buf *out) {
    dict_entry *e;
    if (!find_of(k, key, type, &e, out)) return NULL;
    if (!e) {
        void *v = new_of(type);
        if (!v || !(e = store_add(&k->db, key->p, key->len, type))) {
            kobj tmp = {.val = v, .type = (uint8_t)type};
            store_value_free(&tmp);
            reply_oom(out);
            return NULL;
        }
        store_obj(e)->val = v;
    }
    *pe = e;
    return store_obj(e)->val;
}

/* SPOP's members per SREM record: Redis' batch, far below the arguments a
 * request may have (MAX_ARGS, 2^20). */
#define SPOP_BATCH 1024

/* A collection that a command emptied goes (Redis deletes empty keys). */
static void drop_if_empty(kv *k, dict_entry *e, size_t n) {
    if (n == 0) kv_delete(k, e);
}

/* The members of a set, hash or sorted set: each keeps them in a dict. */
static dict *members(dict_entry *e) {
    kobj *o = store_obj(e);
    switch (o->type) {
    case KV_SET:
        return &((kv_set *)o->val)->d;
    case KV_HASH:
        return &((kv_hash *)o->val)->d;
    default:
        return &((kv_zset *)o->val)->d;
    }
}

/* The members of the key's set, hash or sorted set (`type`) for a read:
 * *d NULL when the key is missing; false (with the reply) when it holds
 * another type. */
static bool find_members(kv *k, const resp_arg *key, int type, dict **d,
                         buf *out) {
    dict_entry *e;
    if (!find_of(k, key, type, &e, out)) return false;
    *d = e ? members(e) : NULL;
    return true;
}

/* m's entry in d; NULL when m or d (a missing key) is missing. */
static dict_entry *member(dict *d, const resp_arg *m) {
    return d ? dict_find(d, m->p, m->len) : NULL;
}

/* Redis' count for LPOP, RPOP, SPOP and ZPOPMIN: an integer >= 0. */
static bool arg_count(const resp_arg *a, long long *v, buf *out) {
    if (kv_parse_i64(a->p, a->len, v) && *v >= 0) return true;
    buf_str(out, "-ERR value is out of range, must be positive\r\n");
    return false;
}

/* A score as Redis writes it in RESP2 (%.17g: 0.1 is
 * 0.10000000000000001; inf and -inf). */
static void reply_score(buf *out, double d) {
    char tmp[32];
    int n;
    if (isinf(d))
        n = snprintf(tmp, sizeof tmp, "%s", d > 0 ? "inf" : "-inf");
    else
        n = snprintf(tmp, sizeof tmp, "%.17g", d);
    buf_bulk(out, tmp, (size_t)n);
}

/* A score argument as Redis reads it: what strtod takes whole ("inf"
 * included, a NUL not), no leading space, no NaN, and not a value out of
 * range (an overflow to infinity or an underflow to zero; a subnormal is
 * taken). A spelling longer than the stack copy is copied to the heap. */
static bool arg_score(const resp_arg *a, double *d, buf *out) {
    /* An integer as kv_parse_i64 takes it (no sign but '-', no leading
     * zero, no "-0") within +-2^53 is a double exactly: strtod's answer,
     * without its copy and its ~150 instructions (redis-benchmark's ZADD
     * sends "0"). Any other spelling goes to strtod. */
    long long v;
    if (a->len <= 17 && kv_parse_i64(a->p, a->len, &v) && v >= -(1LL << 53) &&
        v <= 1LL << 53) {
        *d = (double)v;
        return true;
    }
    char small[64], *tmp = small;
    bool ok = false;
    if (a->len == 0) goto done;
    if (a->len >= sizeof small && !(tmp = malloc(a->len + 1))) {
        reply_oom(out);
        return false;
    }
    memcpy(tmp, a->p, a->len);
    tmp[a->len] = 0;
    if (tmp[0] == ' ' || (tmp[0] >= '\t' && tmp[0] <= '\r')) goto done;
    char *end;
    errno = 0;
    *d = strtod(tmp, &end);
    ok = end == tmp + a->len && !isnan(*d) &&
         !(errno == ERANGE && (isinf(*d) || *d == 0));
done:
    if (tmp != small) free(tmp);
    if (!ok) buf_str(out, "-ERR value is not a valid float\r\n");
    return ok;
}

/* Start and stop of LRANGE and ZRANGE, made absolute and clipped to n.
 * False when the range is empty. */
static bool clip_range(long long start, long long stop, size_t n, size_t *from,
                       size_t *to) {
    long long len = (long long)n;
    if (start < 0) start += len;
    if (stop < 0) stop += len;
    if (start < 0) start = 0;
    if (start > stop || start >= len) return false;
    if (stop >= len) stop = len - 1;
    *from = (size_t)start;
    *to = (size_t)stop;
    return true;
}

static void wrong_args(const resp_arg *name, buf *out) {
    char low[16];
    size_t n = name->len < sizeof low ? name->len : sizeof low - 1;
    for (size_t i = 0; i < n; i++)
        low[i] = (char)(name->p[i] | 0x20);
    low[n] = 0;
    buf_str(out, "-ERR wrong number of arguments for '");
    buf_str(out, low);
    buf_str(out, "' command\r\n");
}

/* -------------------------------------------------------------- strings */

static int set_string(kv *k, const resp_arg *key, const char *p, size_t len) {
    dict_entry *e = kv_lookup(k, key);
    if (store_put(&k->db, &e, key->p, key->len, p, len) < 0) return -ENOMEM;
    kv_set_expire(k, e, 0);
    return 0;
}

static void cmd_mset(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    if (argc % 2 == 0) {
        wrong_args(&a[0], out);
        return;
    }
    for (size_t i = 1; i < argc; i += 2) {
        if (set_string(k, &a[i], a[i + 1].p, a[i + 1].len) < 0) {
            /* Those before it were set: log them (none: no record, as
             * a bare MSET is not one), then say so. */
            if (i > 1) kv_log(k, a, i);
            reply_oom(out);
            return;
        }
    }
    kv_log(k, a, argc);
    reply_ok(out);
}

/* MSETNX key value ...: all or nothing, as Redis does it (the keys looked
 * at up to the first one there). Logged as the MSET it did. */
static void cmd_msetnx(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)cl;
    if (argc % 2 == 0) {
        wrong_args(&a[0], out);
        return;
    }
    /* end: the first key there, if any (KV_PLANT_MSETNX_PARTIAL, repl.h:
     * the keys before it are set) */
    size_t end = argc;
    for (size_t i = 1; i < argc && end == argc; i += 2)
        if (kv_lookup(k, &a[i])) end = i;
    if (end < argc && !(k->plant & KV_PLANT_MSETNX_PARTIAL)) {
        buf_str(out, ":0\r\n");
        return;
    }
    /* the record: MSET with these arguments */
    resp_arg *rec = malloc(argc * sizeof *rec);
    if (!rec) {
        reply_oom(out);
        return;
    }
    rec[0] = (resp_arg){"MSET", 4};
    memcpy(rec + 1, a + 1, (argc - 1) * sizeof *rec);
    size_t i = 1;
    for (; i < end; i += 2)
        if (set_string(k, &a[i], a[i + 1].p, a[i + 1].len) < 0) break;
    if (i > 1) kv_log(k, rec, i);
    free(rec);
    if (i < end)
        reply_oom(out);
    else
        buf_str(out, end < argc ? ":0\r\n" : ":1\r\n");
}

static void cmd_mget(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    buf_int(out, '*', (long long)argc - 1);
    for (size_t i = 1; i < argc; i++) {
        dict_entry *e = kv_lookup(k, &a[i]);
        if (e && store_obj(e)->type == KV_STRING)
            buf_bulk(out, kobj_str(store_obj(e)), store_obj(e)->len);
        else
            reply_nil(out);
    }
}

static void cmd_setnx(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                      buf *out) {
    (void)cl;
    (void)argc;
    if (kv_lookup(k, &a[1])) {
        buf_str(out, ":0\r\n");
        return;
    }
    if (set_string(k, &a[1], a[2].p, a[2].len) < 0) {
        reply_oom(out);
        return;
    }
    resp_arg rec[3] = {{"SET", 3}, a[1], a[2]};
    kv_log(k, rec, 3);
    buf_str(out, ":1\r\n");
}

static void cmd_getset(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)cl;
    (void)argc;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_STRING, &e, out)) return;
    size_t mark = out->len;
    if (e)
        buf_bulk(out, kobj_str(store_obj(e)), store_obj(e)->len);
    else
        reply_nil(out);
    if (set_string(k, &a[1], a[2].p, a[2].len) < 0) {
        out->len = mark;
        reply_oom(out);
        return;
    }
    resp_arg rec[3] = {{"SET", 3}, a[1], a[2]};
    kv_log(k, rec, 3);
}

static void cmd_append(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)cl;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_STRING, &e, out)) return;
    if (!e) {
        if (store_put(&k->db, &e, a[1].p, a[1].len, a[2].p, a[2].len) < 0) {
            reply_oom(out);
            return;
        }
    } else {
        kobj *o = store_obj(e);
        /* Redis' bound, for clients (its argument had it already): a
         * string may not grow past proto-max-bulk-len by appends. */
        if (k->max_string && !k->applying &&
            a[2].len > k->max_string -
                           (o->len < k->max_string ? o->len : k->max_string)) {
            buf_str(out, "-ERR string exceeds maximum allowed size "
                         "(proto-max-bulk-len)\r\n");
            return;
        }
        size_t old = o->len;
        char *v = kobj_str_resize(o, old + a[2].len);
        if (!v) {
            reply_oom(out);
            return;
        }
        memcpy(v + old, a[2].p, a[2].len);
    }
    kv_log(k, a, argc);
    buf_int(out, ':', (long long)store_obj(e)->len);
}

static void cmd_strlen(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)cl;
    (void)argc;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_STRING, &e, out)) return;
    buf_int(out, ':', e ? (long long)store_obj(e)->len : 0);
}

/* GETRANGE key start end: Redis 7.0's arithmetic, ends included (an end
 * before the start, even a negative one, clipped to the first byte). */
static void cmd_getrange(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                         buf *out) {
    (void)cl;
    (void)argc;
    long long start, end;
    if (!arg_i64(&a[2], &start, out) || !arg_i64(&a[3], &end, out)) return;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_STRING, &e, out)) return;
    long long len = e ? (long long)store_obj(e)->len : 0;
    if (start < 0 && end < 0 && start > end) len = 0;
    if (start < 0) start += len;
    if (end < 0) end += len;
    if (start < 0) start = 0;
    if (end < 0) end = 0;
    if (end >= len) end = len - 1;
    if (len == 0 || start > end) {
        buf_str(out, "$0\r\n\r\n");
        return;
    }
    buf_bulk(out, kobj_str(store_obj(e)) + start, (size_t)(end - start + 1));
}

/* SETRANGE key offset value: the offset, then the key, then the bound
 * (proto-max-bulk-len, as APPEND's; an offset + length past 64 bits too).
 * A gap past the end is zeros; an empty value changes nothing and makes
 * no key. Logged as sent. */
static void cmd_setrange(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                         buf *out) {
    (void)cl;
    long long off;
    if (!arg_i64(&a[2], &off, out)) return;
    if (off < 0) {
        buf_str(out, "-ERR offset is out of range\r\n");
        return;
    }
    dict_entry *e;
    if (!find_of(k, &a[1], KV_STRING, &e, out)) return;
    size_t len = a[3].len, old = e ? store_obj(e)->len : 0;
    if (len == 0) {
        buf_int(out, ':', (long long)old);
        return;
    }
    size_t end = (size_t)off + len;
    if (end < len || (k->max_string && !k->applying && end > k->max_string)) {
        buf_str(out, "-ERR string exceeds maximum allowed size "
                     "(proto-max-bulk-len)\r\n");
        return;
    }
    bool made = !e;
    if (made && !(e = store_add(&k->db, a[1].p, a[1].len, KV_STRING))) {
        reply_oom(out);
        return;
    }
    /* (in place when it may be: a blob a reply reads is copied first) */
    bool cut = k->plant & KV_PLANT_SETRANGE_SHRINK; /* (repl.h) */
    char *v = kobj_str_resize(store_obj(e), end > old || cut ? end : old);
    if (!v) {
        if (made) store_delete(&k->db, e); /* no key made after all */
        reply_oom(out);
        return;
    }
    if (end > old) memset(v + old, 0, end - old);
    memcpy(v + off, a[3].p, len);
    kv_log(k, a, argc);
    buf_int(out, ':', (long long)store_obj(e)->len);
}

/* ---------------------------------------------------------------- lists */

static void push(kv *k, const resp_arg *a, size_t argc, bool left, bool only_x,
                 buf *out) {
    dict_entry *e;
    if (only_x) {
        if (!find_of(k, &a[1], KV_LIST, &e, out)) return;
        if (!e) {
            buf_str(out, ":0\r\n");
            return;
        }
    }
    /* (LPUSHX found its key already: not looked up again) */
    kv_list *l =
        only_x ? store_obj(e)->val : make_of(k, &a[1], KV_LIST, &e, out);
    if (!l) return;
    size_t i = 2;
    for (; i < argc; i++)
        if (list_push(l, left, a[i].p, a[i].len) < 0) break;
    if (i > 2) kv_log(k, a, i);
    if (i < argc) {
        drop_if_empty(k, e, l->n);
        reply_oom(out);
        return;
    }
    buf_int(out, ':', (long long)l->n);
}

static void cmd_lpush(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                      buf *out) {
    (void)cl;
    push(k, a, argc, a[0].p[0] == 'L' || a[0].p[0] == 'l', a[0].len == 6, out);
}

static void cmd_lpop(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    bool left = a[0].p[0] == 'L' || a[0].p[0] == 'l';
    if (argc > 3) {
        wrong_args(&a[0], out);
        return;
    }
    long long count = 1;
    if (argc == 3 && !arg_count(&a[2], &count, out)) return;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_LIST, &e, out)) return;
    if (!e) {
        buf_str(out, argc == 3 ? "*-1\r\n" : "$-1\r\n");
        return;
    }
    kv_list *l = store_obj(e)->val;
    size_t n = (size_t)count < l->n ? (size_t)count : l->n;
    if (argc == 3) buf_int(out, '*', (long long)n);
    for (size_t i = 0; i < n; i++) {
        kv_elem x;
        list_pop(l, left, &x);
        buf_bulk(out, elem_bytes(&x), x.len);
        elem_free(&x);
    }
    if (n) kv_log(k, a, argc);
    drop_if_empty(k, e, l->n);
}

static void cmd_llen(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    (void)argc;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_LIST, &e, out)) return;
    buf_int(out, ':', e ? (long long)((kv_list *)store_obj(e)->val)->n : 0);
}

static void cmd_lindex(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)cl;
    (void)argc;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_LIST, &e, out)) return;
    if (!e) { /* nil whatever the index, as Redis answers */
        reply_nil(out);
        return;
    }
    long long i;
    if (!arg_i64(&a[2], &i, out)) return;
    kv_list *l = store_obj(e)->val;
    if (i < 0) i += (long long)l->n;
    if (i < 0 || i >= (long long)l->n) {
        reply_nil(out);
        return;
    }
    kv_elem *x = list_at(l, (size_t)i);
    buf_bulk(out, elem_bytes(x), x->len);
}

static void cmd_lrange(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)cl;
    (void)argc;
    long long start, stop;
    if (!arg_i64(&a[2], &start, out) || !arg_i64(&a[3], &stop, out)) return;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_LIST, &e, out)) return;
    size_t from, to;
    if (!e || !clip_range(start, stop, ((kv_list *)store_obj(e)->val)->n, &from,
                          &to)) {
        buf_str(out, "*0\r\n");
        return;
    }
    kv_list *l = store_obj(e)->val;
    /* (KV_PLANT_LRANGE_END, repl.h: one short) */
    size_t n = to - from + 1 - !!(k->plant & KV_PLANT_LRANGE_END);
    buf_int(out, '*', (long long)n);
    for (size_t i = from; i < from + n; i++)
        buf_bulk(out, elem_bytes(list_at(l, i)), list_at(l, i)->len);
}

/* LSET key index element: the key first (missing: no such key), then
 * the index, as Redis 7.0 checks them. Logged as sent: the same index on
 * the same list. */
static void cmd_lset(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_LIST, &e, out)) return;
    if (!e) {
        buf_str(out, "-ERR no such key\r\n");
        return;
    }
    long long i;
    if (!arg_i64(&a[2], &i, out)) return;
    kv_list *l = store_obj(e)->val;
    if (i < 0) i += (long long)l->n;
    if (i < 0 || i >= (long long)l->n) {
        buf_str(out, "-ERR index out of range\r\n");
        return;
    }
    if (list_set(l, (size_t)i, a[3].p, a[3].len) < 0) {
        reply_oom(out);
        return;
    }
    kv_log(k, a, argc);
    reply_ok(out);
}

/* LREM key count element: count > 0 from the head, < 0 from the tail, 0
 * all (Redis' O(n) walk). Logged as sent when it removed any. */
static void cmd_lrem(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    long long count;
    if (!arg_i64(&a[2], &count, out)) return;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_LIST, &e, out)) return;
    size_t gone = 0;
    if (e) {
        kv_list *l = store_obj(e)->val;
        uint64_t most = count < 0 ? 0 - (uint64_t)count : (uint64_t)count;
        /* (KV_PLANT_LREM_DIRECTION, repl.h: the other way) */
        bool tail = k->plant & KV_PLANT_LREM_DIRECTION ? count > 0 : count < 0;
        gone = list_remove(l, a[3].p, a[3].len, most, tail);
        if (gone) kv_log(k, a, argc);
        drop_if_empty(k, e, l->n);
    }
    buf_int(out, ':', (long long)gone);
}

/* LTRIM key start stop: keeps LRANGE's range of the list (none: the key
 * goes). Logged as sent when it dropped any element. */
static void cmd_ltrim(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                      buf *out) {
    (void)cl;
    long long start, stop;
    if (!arg_i64(&a[2], &start, out) || !arg_i64(&a[3], &stop, out)) return;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_LIST, &e, out)) return;
    if (e) {
        kv_list *l = store_obj(e)->val;
        size_t from, to, n = l->n;
        if (clip_range(start, stop, n, &from, &to))
            list_trim(l, from, n - 1 - to);
        else
            list_trim(l, 0, n);
        if (l->n != n)
            kv_log(k, a, argc);
        else
            kv_watch_touch_key(k, &a[1]); /* a write still (Redis) */
        drop_if_empty(k, e, l->n);
    }
    reply_ok(out);
}

/* LINSERT key BEFORE|AFTER pivot element: the word first, then the key
 * (missing: 0), then the first pivot from the head (none: -1). Logged as
 * sent when it inserted. */
static void cmd_linsert(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                        buf *out) {
    (void)cl;
    bool after = resp_is(&a[2], "AFTER");
    if (!after && !resp_is(&a[2], "BEFORE")) {
        reply_syntax(out);
        return;
    }
    dict_entry *e;
    if (!find_of(k, &a[1], KV_LIST, &e, out)) return;
    if (!e) {
        buf_str(out, ":0\r\n");
        return;
    }
    kv_list *l = store_obj(e)->val;
    size_t i = 0;
    while (i < l->n &&
           (list_at(l, i)->len != a[3].len ||
            memcmp(elem_bytes(list_at(l, i)), a[3].p, a[3].len) != 0))
        i++;
    if (i == l->n) {
        buf_str(out, ":-1\r\n");
        return;
    }
    if (list_insert(l, i + after, a[4].p, a[4].len) < 0) {
        reply_oom(out);
        return;
    }
    kv_log(k, a, argc);
    buf_int(out, ':', (long long)l->n);
}

/* LPOS's RANK, COUNT and MAXLEN numbers as Redis reads them: RANK within
 * +-(2^63 - 1) ("value is out of range ..."), the others >= 0 (`msg`
 * otherwise, a non-integer too). */
static bool arg_range(const resp_arg *a, long long lo, const char *msg,
                      long long *v, buf *out) {
    if (kv_parse_i64(a->p, a->len, v) && *v >= lo) return true;
    if (msg)
        buf_str(out, msg);
    else if (kv_parse_i64(a->p, a->len, v))
        buf_str(out, "-ERR value is out of range, value must between "
                     "-9223372036854775807 and 9223372036854775807\r\n");
    else
        reply_not_integer(out);
    return false;
}

/* LPOS key element [RANK r] [COUNT n] [MAXLEN m]: Redis 7.0's lposCommand
 * (options, then the key), its arithmetic included: RANK
 * -9223372036854775808, which its range check lets by, stays negative
 * when negated, so every match from the tail counts and COUNT never stops
 * the walk (redis-server 7.0 answers so). */
static void cmd_lpos(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    long long rank = 1, count = -1, maxlen = 0;
    for (size_t j = 3; j < argc; j += 2) {
        bool more = j + 1 < argc;
        if (more && resp_is(&a[j], "RANK")) {
            if (!kv_parse_i64(a[j + 1].p, a[j + 1].len, &rank)) {
                reply_not_integer(out);
                return;
            }
            if (rank == 0) {
                buf_str(out, "-ERR RANK can't be zero: use 1 to start from "
                             "the first match, 2 from the second ... or use "
                             "negative to start from the end of the list\r\n");
                return;
            }
        } else if (more && resp_is(&a[j], "COUNT")) {
            if (!arg_range(&a[j + 1], 0, "-ERR COUNT can't be negative\r\n",
                           &count, out))
                return;
        } else if (more && resp_is(&a[j], "MAXLEN")) {
            if (!arg_range(&a[j + 1], 0, "-ERR MAXLEN can't be negative\r\n",
                           &maxlen, out))
                return;
        } else {
            reply_syntax(out);
            return;
        }
    }
    bool tail = rank < 0;
    if (tail) rank = (long long)(0 - (unsigned long long)rank);
    dict_entry *e;
    if (!find_of(k, &a[1], KV_LIST, &e, out)) return;
    if (!e) {
        buf_str(out, count != -1 ? "*0\r\n" : "$-1\r\n");
        return;
    }
    kv_list *l = store_obj(e)->val;
    buf tmp = {0};
    long long matches = 0, found = 0;
    for (size_t i = 0; i < l->n && (maxlen == 0 || i < (size_t)maxlen); i++) {
        kv_elem *x = list_at(l, tail ? l->n - 1 - i : i);
        if (x->len != a[2].len || memcmp(elem_bytes(x), a[2].p, x->len) != 0)
            continue;
        if (++matches < rank) continue;
        /* (KV_PLANT_LPOS_TAIL, repl.h: i from the tail) */
        bool at_i = !tail || (k->plant & KV_PLANT_LPOS_TAIL);
        long long at = (long long)(at_i ? i : l->n - 1 - i);
        if (count == -1) {
            buf_int(out, ':', at);
            return;
        }
        buf_int(&tmp, ':', at);
        found++;
        /* matches - rank + 1, wrapping as Redis' long does */
        long long nth = (long long)((unsigned long long)matches -
                                    (unsigned long long)rank + 1);
        if (count && nth >= count) break;
    }
    if (count == -1) {
        reply_nil(out);
        return;
    }
    buf_int(out, '*', found);
    buf_put(out, tmp.p, tmp.len);
    if (tmp.oom) out->oom = true;
    buf_free(&tmp);
}

/* LMOVE source destination LEFT|RIGHT LEFT|RIGHT, and RPOPLPUSH (RIGHT
 * LEFT): the words, the source (missing: nil), then the destination's
 * type. The element is pushed before it is popped, so a failed push
 * loses nothing, and a list moved onto itself rotates. Logged as sent. */
static void cmd_lmove(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                      buf *out) {
    (void)cl;
    bool from_left = false, to_left = true;
    if (argc == 5) {
        bool fl = resp_is(&a[3], "LEFT"), tl = resp_is(&a[4], "LEFT");
        if ((!fl && !resp_is(&a[3], "RIGHT")) ||
            (!tl && !resp_is(&a[4], "RIGHT"))) {
            reply_syntax(out);
            return;
        }
        from_left = fl;
        to_left = tl;
    }
    dict_entry *src, *dst;
    if (!find_of(k, &a[1], KV_LIST, &src, out)) return;
    if (!src) {
        reply_nil(out);
        return;
    }
    if (!find_of(k, &a[2], KV_LIST, &dst, out)) return;
    kv_list *from = store_obj(src)->val;
    kv_list *to = make_of(k, &a[2], KV_LIST, &dst, out);
    if (!to) return;
    /* A copy of the element (its bytes, or its pointer to them): the
     * push may move the ring of a list moved onto itself, and with it
     * an element's inline bytes. */
    kv_elem x = *list_at(from, from_left ? 0 : from->n - 1);
    if (list_push(to, to_left, elem_bytes(&x), x.len) < 0) {
        drop_if_empty(k, dst, to->n);
        reply_oom(out);
        return;
    }
    kv_elem v;
    list_pop(from, from_left, &v);
    buf_bulk(out, elem_bytes(&v), v.len);
    elem_free(&v);
    kv_log(k, a, argc);
    drop_if_empty(k, src, from->n);
}

/* ------------------------------- sets, hashes and sorted sets alike */

/* The type a set, hash or sorted-set command acts on, told by its name's
 * first letter, as LPUSH's side is (SCARD, HLEN, ZCARD). */
static int type_of(const resp_arg *name) {
    switch (name->p[0] | 0x20) {
    case 's':
        return KV_SET;
    case 'h':
        return KV_HASH;
    default:
        return KV_ZSET;
    }
}

/* SCARD, HLEN and ZCARD: how many members the key has. */
static void cmd_card(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    (void)argc;
    dict *d;
    if (!find_members(k, &a[1], type_of(&a[0]), &d, out)) return;
    buf_int(out, ':', d ? (long long)d->count : 0);
}

/* SISMEMBER and HEXISTS: whether the key a[1] has the member a[2]. */
static void cmd_has(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                    buf *out) {
    (void)cl;
    (void)argc;
    dict *d;
    if (!find_members(k, &a[1], type_of(&a[0]), &d, out)) return;
    buf_str(out, member(d, &a[2]) ? ":1\r\n" : ":0\r\n");
}

/* SREM, HDEL and ZREM: removes the members a[2..] from the key a[1],
 * which goes when they were its last. */
static void cmd_remove(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)cl;
    int type = type_of(&a[0]);
    dict_entry *e;
    if (!find_of(k, &a[1], type, &e, out)) return;
    long long n = 0;
    if (e) {
        dict *d = members(e);
        void *v = store_obj(e)->val;
        for (size_t i = 2; i < argc; i++) {
            dict_entry *m = dict_find(d, a[i].p, a[i].len);
            if (!m) continue;
            if (type == KV_SET)
                set_delete(v, m);
            else if (type == KV_HASH)
                hash_delete(v, m);
            else
                zset_delete(v, m);
            n++;
        }
        if (n) kv_log(k, a, argc);
        drop_if_empty(k, e, d->count);
    }
    buf_int(out, ':', n);
}

/* ----------------------------------------------------------------- sets */

static void cmd_sadd(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    dict_entry *e;
    kv_set *s = make_of(k, &a[1], KV_SET, &e, out);
    if (!s) return;
    long long added = 0;
    size_t i = 2;
    for (; i < argc; i++) {
        int rc = set_add(s, a[i].p, a[i].len);
        if (rc < 0) break;
        added += rc;
    }
    if (added) kv_log(k, a, i);
    if (i < argc) {
        drop_if_empty(k, e, s->d.count);
        reply_oom(out);
        return;
    }
    buf_int(out, ':', added);
}

/* SPOP's SREM records of took[0..n), SPOP_BATCH members each: logged, or
 * with `need` their bytes and count added to *need and *nrec. */
static void spop_records(kv *k, const resp_arg *key, dict_entry *const *took,
                         size_t n, const dict *d, resp_arg *rec, bool need,
                         size_t *len, size_t *nrec) {
    rec[0] = (resp_arg){"SREM", 4};
    rec[1] = *key;
    for (size_t i = 0; i < n; i += SPOP_BATCH) {
        size_t m = n - i < SPOP_BATCH ? n - i : SPOP_BATCH;
        for (size_t j = 0; j < m; j++)
            rec[j + 2] =
                (resp_arg){dict_key(d, took[i + j]), took[i + j]->klen};
        if (need) {
            *len += repl_record_len(rec, m + 2);
            ++*nrec;
        } else {
            kv_log(k, rec, m + 2);
        }
    }
}

/* SPOP key [count]: logged as the SREM of the members it took, so a
 * replica takes the same ones. The members are picked first and their
 * records' room asked of the log before any is taken: a pop whose SREMs
 * then found no memory would stop lull-kv with the members gone. */
static void cmd_spop(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    if (argc > 3) {
        reply_syntax(out);
        return;
    }
    long long count = 1;
    if (argc == 3 && !arg_count(&a[2], &count, out)) return;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_SET, &e, out)) return;
    if (!e) {
        buf_str(out, argc == 3 ? "*0\r\n" : "$-1\r\n");
        return;
    }
    kv_set *s = store_obj(e)->val;
    size_t n = (size_t)count < s->d.count ? (size_t)count : s->d.count;
    resp_arg *rec =
        malloc(((n < SPOP_BATCH ? n : SPOP_BATCH) + 2) * sizeof *rec);
    if (!rec) {
        reply_oom(out);
        return;
    }
    set_pick(s, n);
    dict_entry *const *took = s->arr + s->d.count - n;
    /* Records of SPOP_BATCH members at most, so that none has more
     * arguments than a replica parses (MAX_ARGS); several sit in one
     * transaction (unless in one already), which a replica applies as a
     * unit. */
    static const resp_arg multi = {"MULTI", 5}, exec = {"EXEC", 4};
    bool wrap = n > SPOP_BATCH && !k->in_exec;
    size_t len = 0, nrec = 0;
    if (wrap) {
        len = repl_record_len(&multi, 1) + repl_record_len(&exec, 1);
        nrec = 2;
    }
    spop_records(k, &a[1], took, n, &s->d, rec, true, &len, &nrec);
    if (!kv_log_room(k, len, nrec, out)) {
        free(rec);
        return;
    }
    if (wrap) {
        k->in_exec = true;
        k->multi_logged = false;
    }
    uint64_t end = k->log.end;
    size_t logged = k->log.nrec;
    spop_records(k, &a[1], took, n, &s->d, rec, false, NULL, NULL);
    if (!wrap) kv_exec_room_extra(k, end, logged);
    free(rec);
    if (wrap) {
        k->in_exec = false;
        if (k->multi_logged) kv_log(k, &exec, 1);
        k->multi_logged = false;
    }
    if (argc == 3) buf_int(out, '*', (long long)n);
    /* Taken from the end of arr, where set_pick put them: none moves (a
     * delete may shrink arr, so each is read afresh). */
    for (size_t i = 0; i < n; i++) {
        dict_entry *m = s->arr[s->d.count - 1];
        buf_bulk(out, dict_key(&s->d, m), m->klen);
        set_delete(s, m);
    }
    drop_if_empty(k, e, s->d.count);
}

static void cmd_smembers(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                         buf *out) {
    (void)cl;
    (void)argc;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_SET, &e, out)) return;
    if (!e) {
        buf_str(out, "*0\r\n");
        return;
    }
    kv_set *s = store_obj(e)->val;
    buf_int(out, '*', (long long)s->d.count);
    for (size_t i = 0; i < s->d.count; i++)
        buf_bulk(out, dict_key(&s->d, s->arr[i]), s->arr[i]->klen);
}

static int cmp_size(const void *x, const void *y) {
    size_t a = *(const size_t *)x, b = *(const size_t *)y;
    return a < b ? -1 : a > b;
}

/* SMISMEMBER key member ...: 1 or 0 for each. */
static void cmd_smismember(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                           buf *out) {
    (void)cl;
    dict *d;
    if (!find_members(k, &a[1], KV_SET, &d, out)) return;
    buf_int(out, '*', (long long)argc - 2);
    for (size_t i = 2; i < argc; i++)
        buf_str(out, member(d, &a[i]) ? ":1\r\n" : ":0\r\n");
}

/* SRANDMEMBER key [count]: Redis 7.0's srandmemberWithCountCommand. A
 * count >= 0 gives distinct members, at most the set's (a sample of the
 * array, in its order: no memory but the reply's); a negative one gives
 * |count| picks, repeats allowed, as many as asked, Redis' bound being
 * the client's output limit: the picks stop once the reply cannot grow
 * (out->oom: past the hard limit, or out of memory), and the connection
 * is dropped then, as Redis closes a client over its limit. A read:
 * nothing is logged. */
static void cmd_srandmember(kv *k, kv_client *cl, const resp_arg *a,
                            size_t argc, buf *out) {
    (void)cl;
    if (argc > 3) {
        reply_syntax(out);
        return;
    }
    long long count = 1;
    if (argc == 3 && !arg_range(&a[2], -INT64_MAX, NULL, &count, out)) return;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_SET, &e, out)) return;
    if (!e) {
        buf_str(out, argc == 3 ? "*0\r\n" : "$-1\r\n");
        return;
    }
    kv_set *s = store_obj(e)->val;
    if (argc == 2) {
        dict_entry *m = set_random(s);
        buf_bulk(out, dict_key(&s->d, m), m->klen);
        return;
    }
    if (count < 0) {
        unsigned long long n = 0 - (unsigned long long)count;
        buf_int(out, '*', count == INT64_MIN ? 0 : -count);
        for (unsigned long long i = 0; i < n && !out->oom; i++) {
            dict_entry *m = set_random(s);
            buf_bulk(out, dict_key(&s->d, m), m->klen);
        }
        return;
    }
    size_t size = s->d.count;
    size_t want = (unsigned long long)count < size ? (size_t)count : size;
    if (want * 2 <= size) {
        /* Few of many: distinct random indexes, in O(want log want). */
        size_t *idx = malloc(want * sizeof *idx), got = 0;
        if (want && !idx) {
            reply_oom(out);
            return;
        }
        while (got < want) {
            for (size_t i = got; i < want; i++)
                idx[i] = (size_t)types_random(size);
            qsort(idx, want, sizeof *idx, cmp_size);
            got = 1;
            for (size_t i = 1; i < want; i++) /* at most half repeat */
                if (idx[i] != idx[got - 1]) idx[got++] = idx[i];
        }
        buf_int(out, '*', (long long)want);
        for (size_t i = 0; i < want; i++)
            buf_bulk(out, dict_key(&s->d, s->arr[idx[i]]),
                     s->arr[idx[i]]->klen);
        free(idx);
        return;
    }
    /* Most of them: selection sampling (Knuth's algorithm S) in O(size),
     * which is O(want): member i is taken with probability (still wanted)
     * / (still left), so exactly `want` are, each subset as likely. */
    buf_int(out, '*', (long long)want);
    for (size_t i = 0; want; i++) {
        if (types_random(size - i) < want) {
            buf_bulk(out, dict_key(&s->d, s->arr[i]), s->arr[i]->klen);
            want--;
        }
    }
}

/* SMOVE source destination member: Redis 7.0's order (a missing source
 * is 0 before any type is looked at; then both types; a set moved onto
 * itself changes nothing). The member is added before it is removed, so
 * a failed add loses nothing. Logged as sent when it moved. */
static void cmd_smove(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                      buf *out) {
    (void)cl;
    dict_entry *src = kv_lookup(k, &a[1]), *dst;
    if (!src) {
        buf_str(out, ":0\r\n");
        return;
    }
    if (store_obj(src)->type != KV_SET) {
        reply_wrongtype(out);
        return;
    }
    if (!find_of(k, &a[2], KV_SET, &dst, out)) return;
    kv_set *from = store_obj(src)->val;
    dict_entry *m = member(&from->d, &a[3]);
    /* KV_PLANT_SMOVE_SAME (test only): onto itself, the member moves. */
    if (!m || (src == dst && !(k->plant & KV_PLANT_SMOVE_SAME))) {
        buf_str(out, m ? ":1\r\n" : ":0\r\n");
        return;
    }
    kv_set *to = make_of(k, &a[2], KV_SET, &dst, out);
    if (!to) return;
    int added = set_add(to, a[3].p, a[3].len);
    if (added < 0) {
        drop_if_empty(k, dst, to->d.count);
        reply_oom(out);
        return;
    }
    set_delete(from, m);
    /* A member the destination had already only leaves the source: its
     * SREM is the record, and the destination's watchers see no write
     * (as Redis). Shorter than the SMOVE the room was asked for. */
    if (added) {
        kv_log(k, a, argc);
    } else {
        resp_arg rec[3] = {{"SREM", 4}, a[1], a[3]};
        kv_log(k, rec, 3);
    }
    drop_if_empty(k, src, from->d.count);
    buf_str(out, ":1\r\n");
}

enum { S_INTER, S_UNION, S_DIFF };

/* The sets named by keys[0, n) for SINTER, SUNION, SDIFF, their STORE
 * forms and SINTERCARD: every key's type checked first (Redis answers
 * WRONGTYPE for any of them, a missing key before it or not), a missing
 * key NULL. The array (n entries) is the caller's to free; NULL with the
 * reply on a wrong type or out of memory. */
static kv_set **sets_of(kv *k, const resp_arg *keys, size_t n, buf *out) {
    kv_set **v = malloc(n * sizeof *v);
    if (!v) {
        reply_oom(out);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        dict_entry *e;
        if (!find_of(k, &keys[i], KV_SET, &e, out)) {
            free(v);
            return NULL;
        }
        v[i] = e ? store_obj(e)->val : NULL;
    }
    return v;
}

static bool in_set(const kv_set *s, dict_entry *m, const kv_set *from) {
    return s && dict_find(&s->d, dict_key(&from->d, m), m->klen);
}

/* Where the members of a result go: into a set (STORE, and SUNION,
 * whose sets may share members), as bulk strings into a buffer, or only
 * counted (SINTERCARD, up to `limit`; 0: no limit). */
typedef struct set_sink {
    kv_set *s;       /* or NULL */
    buf *b;          /* or NULL */
    long long n;     /* members in it */
    long long limit; /* stop at this many (0: none) */
    bool oom;
} set_sink;

static bool sink_full(const set_sink *o) {
    return o->oom || (o->limit && o->n >= o->limit);
}

static void sink_add(set_sink *o, const kv_set *from, dict_entry *m) {
    const char *p = dict_key(&from->d, m);
    if (o->s) {
        int rc = set_add(o->s, p, m->klen);
        if (rc < 0) o->oom = true;
        o->n += rc > 0;
        return;
    }
    if (o->b) buf_bulk(o->b, p, m->klen);
    o->n++;
}

/* The members of op over sets[0, n) into o: an intersection walks the
 * smallest set (none, when a set is missing), a difference the first. */
static void set_algebra(int op, kv_set **sets, size_t n, set_sink *o) {
    if (op == S_UNION) {
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; sets[i] && j < sets[i]->d.count && !o->oom; j++)
                sink_add(o, sets[i], sets[i]->arr[j]);
        return;
    }
    size_t first = 0;
    if (op == S_INTER) {
        for (size_t i = 0; i < n; i++) {
            if (!sets[i]) return;
            if (sets[i]->d.count < sets[first]->d.count) first = i;
        }
    }
    kv_set *walk = sets[first];
    for (size_t j = 0; walk && j < walk->d.count && !sink_full(o); j++) {
        dict_entry *m = walk->arr[j];
        size_t i = 0;
        for (; i < n; i++) {
            if (i == first || (op == S_INTER && sets[i] == walk)) continue;
            if (in_set(sets[i], m, walk) != (op == S_INTER)) break;
        }
        if (i == n) sink_add(o, walk, m);
    }
}

static int set_op(const resp_arg *name) {
    char c = (char)(name->p[1] | 0x20); /* sInter, sUnion, sDiff */
    return c == 'i' ? S_INTER : c == 'u' ? S_UNION : S_DIFF;
}

/* SINTER, SUNION and SDIFF key ...: a read (nothing logged). */
static void cmd_setop(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                      buf *out) {
    (void)cl;
    int op = set_op(&a[0]);
    kv_set **sets = sets_of(k, &a[1], argc - 1, out);
    if (!sets) return;
    buf tmp = {0};
    set_sink o = {.b = &tmp};
    if (op == S_UNION && !(o.s = set_new())) o.oom = true;
    if (!o.oom) set_algebra(op, sets, argc - 1, &o);
    free(sets);
    if (o.oom || tmp.oom) {
        set_free(o.s);
        buf_free(&tmp);
        reply_oom(out);
        return;
    }
    if (o.s) { /* SUNION: the set built */
        buf_int(out, '*', (long long)o.s->d.count);
        for (size_t i = 0; i < o.s->d.count; i++)
            buf_bulk(out, dict_key(&o.s->d, o.s->arr[i]), o.s->arr[i]->klen);
        set_free(o.s);
    } else {
        buf_int(out, '*', o.n);
        buf_put(out, tmp.p, tmp.len);
    }
    buf_free(&tmp);
}

/* SINTERSTORE, SUNIONSTORE and SDIFFSTORE destination key ...: the result
 * is built apart (the destination may be one of the keys), then replaces
 * the destination whatever it held, its expiry cleared; an empty result
 * deletes it. Logged as sent when the keyspace changed: the same sets
 * give the same result on a replica. */
static void cmd_setop_store(kv *k, kv_client *cl, const resp_arg *a,
                            size_t argc, buf *out) {
    (void)cl;
    if (k->plant & KV_PLANT_SETSTORE_SOURCE) { /* test only */
        dict_entry *d = kv_lookup(k, &a[1]);
        if (d && store_obj(d)->type == KV_SET) kv_delete(k, d);
    }
    kv_set **sets = sets_of(k, &a[2], argc - 2, out);
    if (!sets) return;
    set_sink o = {.s = set_new()};
    if (!o.s) o.oom = true;
    if (!o.oom) set_algebra(set_op(&a[0]), sets, argc - 2, &o);
    free(sets);
    if (o.oom) {
        set_free(o.s);
        reply_oom(out);
        return;
    }
    dict_entry *e = kv_lookup(k, &a[1]);
    if (o.s->d.count == 0) {
        set_free(o.s);
        if (e) {
            kv_delete(k, e);
            kv_log(k, a, argc);
        }
        buf_str(out, ":0\r\n");
        return;
    }
    if (!e && !(e = store_add(&k->db, a[1].p, a[1].len, KV_SET))) {
        set_free(o.s);
        reply_oom(out);
        return;
    }
    kobj *v = store_obj(e);
    kv_set_expire(k, e, 0); /* clearing needs no memory */
    store_value_free(v);
    v->type = KV_SET;
    v->val = o.s;
    kv_log(k, a, argc);
    buf_int(out, ':', (long long)o.s->d.count);
}

/* SINTERCARD numkeys key ... [LIMIT limit]: Redis 7.0's checks (numkeys,
 * then the options, then the keys); the walk stops at the limit. */
static void cmd_sintercard(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                           buf *out) {
    (void)cl;
    long long nkeys, limit = 0;
    if (!kv_parse_i64(a[1].p, a[1].len, &nkeys) || nkeys < 1) {
        buf_str(out, "-ERR numkeys should be greater than 0\r\n");
        return;
    }
    if ((unsigned long long)nkeys > argc - 2) {
        buf_str(out, "-ERR Number of keys can't be greater than number of "
                     "args\r\n");
        return;
    }
    for (size_t j = 2 + (size_t)nkeys; j < argc; j += 2) {
        if (j + 1 < argc && resp_is(&a[j], "LIMIT")) {
            if (!arg_range(&a[j + 1], 0, "-ERR LIMIT can't be negative\r\n",
                           &limit, out))
                return;
        } else {
            reply_syntax(out);
            return;
        }
    }
    kv_set **sets = sets_of(k, &a[2], (size_t)nkeys, out);
    if (!sets) return;
    set_sink o = {.limit = limit};
    set_algebra(S_INTER, sets, (size_t)nkeys, &o);
    free(sets);
    buf_int(out, ':', o.n);
}

/* --------------------------------------------------------------- hashes */

static void cmd_hset(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    if (argc % 2) {
        wrong_args(&a[0], out);
        return;
    }
    dict_entry *e;
    kv_hash *h = make_of(k, &a[1], KV_HASH, &e, out);
    if (!h) return;
    long long added = 0;
    size_t i = 2;
    for (; i < argc; i += 2) {
        int rc = hash_set(h, a[i].p, a[i].len, a[i + 1].p, a[i + 1].len);
        if (rc < 0) break;
        added += rc;
    }
    if (i > 2) kv_log(k, a, i);
    if (i < argc) {
        drop_if_empty(k, e, h->d.count);
        reply_oom(out);
        return;
    }
    if (a[0].len == 5) /* HMSET */
        reply_ok(out);
    else
        buf_int(out, ':', added);
}

static void cmd_hget(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    (void)argc;
    dict *d;
    if (!find_members(k, &a[1], KV_HASH, &d, out)) return;
    dict_entry *f = member(d, &a[2]);
    if (f)
        buf_bulk(out, elem_bytes(hash_value(f)), hash_value(f)->len);
    else
        reply_nil(out);
}

static void cmd_hmget(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                      buf *out) {
    (void)cl;
    dict *d;
    if (!find_members(k, &a[1], KV_HASH, &d, out)) return;
    buf_int(out, '*', (long long)argc - 2);
    for (size_t i = 2; i < argc; i++) {
        dict_entry *f = member(d, &a[i]);
        if (f)
            buf_bulk(out, elem_bytes(hash_value(f)), hash_value(f)->len);
        else
            reply_nil(out);
    }
}

typedef struct pairs {
    buf *out;
} pairs;

static void hash_pair(const dict *d, dict_entry *f, void *arg) {
    buf *out = ((pairs *)arg)->out;
    buf_bulk(out, dict_key(d, f), f->klen);
    buf_bulk(out, elem_bytes(hash_value(f)), hash_value(f)->len);
}

static void cmd_hgetall(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                        buf *out) {
    (void)cl;
    (void)argc;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_HASH, &e, out)) return;
    if (!e) {
        buf_str(out, "*0\r\n");
        return;
    }
    kv_hash *h = store_obj(e)->val;
    buf_int(out, '*', 2 * (long long)h->d.count);
    pairs p = {out};
    uint64_t cur = 0;
    do
        cur = dict_scan(&h->d, cur, SIZE_MAX, hash_pair, &p);
    while (cur);
}

/* HKEYS and HVALS: the fields or the values, in HGETALL's order (the
 * dict's), so that the two replies zip while the hash is unchanged. */
typedef struct hash_half {
    buf *out;
    bool values;
} hash_half;

static void hash_one(const dict *d, dict_entry *f, void *arg) {
    hash_half *w = arg;
    if (w->values)
        buf_bulk(w->out, elem_bytes(hash_value(f)), hash_value(f)->len);
    else
        buf_bulk(w->out, dict_key(d, f), f->klen);
}

static void cmd_hkeys(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                      buf *out) {
    (void)cl;
    (void)argc;
    dict *d;
    if (!find_members(k, &a[1], KV_HASH, &d, out)) return;
    buf_int(out, '*', d ? (long long)d->count : 0);
    if (!d) return;
    hash_half w = {out, (a[0].p[1] | 0x20) == 'v'};
    uint64_t cur = 0;
    do
        cur = dict_scan(d, cur, SIZE_MAX, hash_one, &w);
    while (cur);
}

static void cmd_hstrlen(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                        buf *out) {
    (void)cl;
    (void)argc;
    dict *d;
    if (!find_members(k, &a[1], KV_HASH, &d, out)) return;
    dict_entry *f = member(d, &a[2]);
    buf_int(out, ':', f ? (long long)hash_value(f)->len : 0);
}

/* HSETNX key field value: sets a field that is not there (logged as
 * sent: deterministic); an existing one is left, and nothing logged. */
static void cmd_hsetnx(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)cl;
    dict_entry *e;
    kv_hash *h = make_of(k, &a[1], KV_HASH, &e, out);
    if (!h) return;
    if (member(&h->d, &a[2])) {
        buf_str(out, ":0\r\n");
        return;
    }
    if (hash_set(h, a[2].p, a[2].len, a[3].p, a[3].len) < 0) {
        drop_if_empty(k, e, h->d.count);
        reply_oom(out);
        return;
    }
    kv_log(k, a, argc);
    buf_str(out, ":1\r\n");
}

/* HINCRBY key field by: Redis' order of checks (the increment, then the
 * key's type, then the field's value as string2ll reads it). Logged as
 * sent: the same sum on the same value on a replica. */
static void cmd_hincrby(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                        buf *out) {
    (void)cl;
    long long by, v = 0;
    if (!arg_i64(&a[3], &by, out)) return;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_HASH, &e, out)) return;
    dict_entry *f = e ? member(members(e), &a[2]) : NULL;
    if (f && !kv_parse_i64(elem_bytes(hash_value(f)), hash_value(f)->len, &v)) {
        buf_str(out, "-ERR hash value is not an integer\r\n");
        return;
    }
    if ((by < 0 && v < 0 && by < INT64_MIN - v) ||
        (by > 0 && v > 0 && by > INT64_MAX - v)) {
        buf_str(out, "-ERR increment or decrement would overflow\r\n");
        return;
    }
    char num[24];
    size_t n = (size_t)snprintf(num, sizeof num, "%lld", v + by);
    kv_hash *h = make_of(k, &a[1], KV_HASH, &e, out);
    if (!h) return;
    if (hash_set(h, a[2].p, a[2].len, num, n) < 0) {
        drop_if_empty(k, e, h->d.count);
        reply_oom(out);
        return;
    }
    kv_log(k, a, argc);
    buf_int(out, ':', v + by);
}

/* HINCRBYFLOAT key field by: Redis' order of checks (the increment,
 * then the key's type, then the field's value), its long double sum,
 * and its record: HSET of the result, so a replica never rounds on its
 * own. */
static void cmd_hincrbyfloat(kv *k, kv_client *cl, const resp_arg *a,
                             size_t argc, buf *out) {
    (void)cl;
    (void)argc;
    long double by, v = 0;
    if (!kv_parse_ld(a[3].p, a[3].len, &by)) {
        buf_str(out, "-ERR value is not a valid float\r\n");
        return;
    }
    if (isinf(by)) {
        buf_str(out, "-ERR value is NaN or Infinity\r\n");
        return;
    }
    dict_entry *e;
    if (!find_of(k, &a[1], KV_HASH, &e, out)) return;
    dict_entry *f = e ? member(members(e), &a[2]) : NULL;
    if (f && !kv_parse_ld(elem_bytes(hash_value(f)), hash_value(f)->len, &v)) {
        buf_str(out, "-ERR hash value is not a float\r\n");
        return;
    }
    char num[KV_LD_MAX];
    size_t n = kv_add_ld(v, by, num, out);
    if (n == 0) return;
    kv_hash *h = make_of(k, &a[1], KV_HASH, &e, out);
    if (!h) return;
    if (hash_set(h, a[2].p, a[2].len, num, n) < 0) {
        drop_if_empty(k, e, h->d.count);
        reply_oom(out);
        return;
    }
    resp_arg rec[4] = {{"HSET", 4}, a[1], a[2], {num, n}};
    kv_log(k, rec, 4);
    buf_bulk(out, num, n);
}

/* ---------------------------------------------------------- sorted sets */

enum { Z_NX = 1, Z_XX = 2, Z_GT = 4, Z_LT = 8, Z_CH = 16, Z_INCR = 32 };

/* ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member ..., and ZINCRBY
 * (ZADD INCR with one pair). */
static void zadd(kv *k, const resp_arg *a, size_t argc, unsigned f,
                 size_t first, buf *out) {
    size_t elements = argc - first;
    if (elements % 2 || !elements) {
        reply_syntax(out);
        return;
    }
    elements /= 2;
    if ((f & Z_NX) && (f & Z_XX)) {
        buf_str(out, "-ERR XX and NX options at the same time are not "
                     "compatible\r\n");
        return;
    }
    if (((f & Z_GT) && (f & Z_NX)) || ((f & Z_LT) && (f & Z_NX)) ||
        ((f & Z_GT) && (f & Z_LT))) {
        buf_str(out, "-ERR GT, LT, and/or NX options at the same time are "
                     "not compatible\r\n");
        return;
    }
    if ((f & Z_INCR) && elements > 1) {
        buf_str(out, "-ERR INCR option supports a single increment-element "
                     "pair\r\n");
        return;
    }
    /* The scores are all read before anything changes (a bad one refuses
     * the whole ZADD). A few pairs, the common ZADD, keep them on the
     * stack: no allocation per request. */
    double few[16];
    double *scores = elements <= sizeof few / sizeof *few
                         ? few
                         : malloc(elements * sizeof *scores);
    if (!scores) {
        reply_oom(out);
        return;
    }
    for (size_t i = 0; i < elements; i++)
        if (!arg_score(&a[first + 2 * i], &scores[i], out)) {
            if (scores != few) free(scores);
            return;
        }
    dict_entry *e;
    if (!find_of(k, &a[1], KV_ZSET, &e, out)) {
        if (scores != few) free(scores);
        return;
    }
    if (!e && (f & Z_XX)) { /* nothing to update, nothing made */
        if (scores != few) free(scores);
        if (f & Z_INCR)
            reply_nil(out);
        else
            buf_str(out, ":0\r\n");
        return;
    }
    /* The key find_of found is used as it is: make_of would look it up
     * again (it makes a missing one). */
    kv_zset *z = e ? store_obj(e)->val : make_of(k, &a[1], KV_ZSET, &e, out);
    if (!z) {
        if (scores != few) free(scores);
        return;
    }
    long long added = 0, changed = 0;
    bool skipped = false, oom = false;
    double last = 0;
    size_t i = 0; /* the pairs looked at: all, or up to one out of memory */
    for (; i < elements && !oom; i++) {
        const resp_arg *m = &a[first + 2 * i + 1];
        double score = scores[i], kept;
        dict_entry *me = dict_find(&z->d, m->p, m->len);
        if (me) {
            double cur = zset_member(me)->score;
            if (f & Z_NX) {
                skipped = true;
                continue;
            }
            if (f & Z_INCR) {
                score += cur;
                if (isnan(score)) {
                    buf_str(out,
                            "-ERR resulting score is not a number (NaN)\r\n");
                    if (scores != few) free(scores);
                    drop_if_empty(k, e, zset_len(z));
                    return;
                }
            }
            if (((f & Z_GT) && score <= cur) || ((f & Z_LT) && score >= cur)) {
                skipped = true;
                continue;
            }
            last = score;
            if (score != cur) {
                kept = score == 0 ? 0 : score; /* -0 as 0 (below) */
                if (zset_set(z, m->p, m->len, kept) < 0)
                    oom = true;
                else
                    changed++;
            }
        } else {
            if (f & Z_XX) {
                skipped = true;
                continue;
            }
            last = score;
            /* A -0 is kept as 0, as a small Redis 7.0 sorted set keeps
             * it (its listpack writes the score as "0"); the reply to
             * ZINCRBY or INCR still gives the -0 it was sent. */
            kept = score == 0 ? 0 : score;
            if (zset_set(z, m->p, m->len, kept) < 0)
                oom = true;
            else
                added++;
        }
    }
    if (scores != few) free(scores);
    /* Out of memory part way: the record repeats the pairs before the
     * one that failed (as SADD's does), not pairs never added. */
    if (oom) i--;
    if (added || changed) kv_log(k, a, first + 2 * i);
    drop_if_empty(k, e, zset_len(z));
    if (oom) {
        reply_oom(out);
    } else if (f & Z_INCR) {
        if (skipped)
            reply_nil(out);
        else
            reply_score(out, last);
    } else {
        buf_int(out, ':', added + ((f & Z_CH) ? changed : 0));
    }
}

/* ZADD's options from a[2] on, added to *f: the index of the first word
 * that is not one. */
static size_t zadd_options(const resp_arg *a, size_t argc, unsigned *f) {
    size_t i = 2;
    for (; i < argc; i++) {
        if (resp_is(&a[i], "NX"))
            *f |= Z_NX;
        else if (resp_is(&a[i], "XX"))
            *f |= Z_XX;
        else if (resp_is(&a[i], "GT"))
            *f |= Z_GT;
        else if (resp_is(&a[i], "LT"))
            *f |= Z_LT;
        else if (resp_is(&a[i], "CH"))
            *f |= Z_CH;
        else if (resp_is(&a[i], "INCR"))
            *f |= Z_INCR;
        else
            break;
    }
    return i;
}

static void cmd_zadd(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    unsigned f = 0;
    size_t first = zadd_options(a, argc, &f);
    zadd(k, a, argc, f, first, out);
}

/* ZINCRBY key increment member: Redis runs it as ZADD INCR, options and
 * all, so "ZINCRBY key NX m" is ZADD's syntax error, not a bad float. */
static void cmd_zincrby(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                        buf *out) {
    (void)cl;
    unsigned f = Z_INCR;
    size_t first = zadd_options(a, argc, &f);
    zadd(k, a, argc, f, first, out);
}

/* ZPOPMIN and ZPOPMAX key [count]: the lowest or highest first. Logged
 * as sent: the same ends of the same set on a replica. */
static void cmd_zpopmin(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                        buf *out) {
    (void)cl;
    if (argc > 3) {
        reply_syntax(out);
        return;
    }
    long long count = 1;
    if (argc == 3 && !arg_count(&a[2], &count, out)) return;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_ZSET, &e, out)) return;
    if (!e) {
        buf_str(out, "*0\r\n");
        return;
    }
    kv_zset *z = store_obj(e)->val;
    bool max = (a[0].p[5] | 0x20) == 'a'; /* ZPOPMAX */
    size_t n = (size_t)count < zset_len(z)
                   ? (size_t)count
                   : zset_len(z) - !!(k->plant & KV_PLANT_ZPOP_PAST);
    buf_int(out, '*', 2 * (long long)n);
    for (size_t i = 0; i < n; i++) {
        znode *first = max ? z->tail : z->head->lv[0].fwd;
        size_t len;
        const char *name = znode_name(z, first, &len);
        buf_bulk(out, name, len);
        reply_score(out, first->score);
        zset_delete(z, first->member);
    }
    if (n) kv_log(k, a, argc);
    drop_if_empty(k, e, zset_len(z));
}

static void cmd_zscore(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)cl;
    (void)argc;
    dict *d;
    if (!find_members(k, &a[1], KV_ZSET, &d, out)) return;
    dict_entry *m = member(d, &a[2]);
    if (m)
        reply_score(out, zset_member(m)->score);
    else
        reply_nil(out);
}

/* ZMSCORE key member ...: each score, or nil. */
static void cmd_zmscore(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                        buf *out) {
    (void)cl;
    dict *d;
    if (!find_members(k, &a[1], KV_ZSET, &d, out)) return;
    buf_int(out, '*', (long long)argc - 2);
    for (size_t i = 2; i < argc; i++) {
        dict_entry *m = member(d, &a[i]);
        if (m)
            reply_score(out, zset_member(m)->score);
        else
            reply_nil(out);
    }
}

/* ZRANK and ZREVRANK key member: nil for a missing key or member. */
static void cmd_zrank(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                      buf *out) {
    (void)cl;
    (void)argc;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_ZSET, &e, out)) return;
    dict_entry *m = e ? member(members(e), &a[2]) : NULL;
    if (!m) {
        reply_nil(out);
        return;
    }
    kv_zset *z = store_obj(e)->val;
    size_t r = zset_rank(z, zset_member(m)->node);
    bool rev = (a[0].p[3] | 0x20) == 'v'; /* ZREVRANK */
    buf_int(out, ':', (long long)(rev ? zset_len(z) - 1 - r : r));
}

/* A score bound: its value and whether it is exclusive ("(" first). */
typedef struct zbound {
    double v;
    bool ex;
} zbound;

/* A min or max as Redis 7.0 reads it (zslParseRange): an optional "(",
 * then what strtod takes up to the end or the first NUL (so "" and "("
 * are 0 and leading space is taken), not NaN, no range check. 0, -EINVAL
 * or -ENOMEM (a long spelling is copied to the heap). */
static int arg_bound(const resp_arg *a, zbound *b) {
    const char *p = a->p;
    size_t len = a->len;
    const char *nul = memchr(p, 0, len);
    if (nul) len = (size_t)(nul - p);
    b->ex = len && p[0] == '(';
    if (b->ex) p++, len--;
    char small[64], *tmp = small;
    if (len >= sizeof small && !(tmp = malloc(len + 1))) return -ENOMEM;
    memcpy(tmp, p, len);
    tmp[len] = 0;
    char *end;
    b->v = strtod(tmp, &end);
    bool ok = *end == 0 && !isnan(b->v);
    if (tmp != small) free(tmp);
    return ok ? 0 : -EINVAL;
}

static bool arg_bounds(const resp_arg *min, const resp_arg *max, zbound *lo,
                       zbound *hi, buf *out) {
    int rc = arg_bound(min, lo);
    if (rc == 0) rc = arg_bound(max, hi);
    if (rc == -ENOMEM) reply_oom(out);
    if (rc == -EINVAL) buf_str(out, "-ERR min or max is not a float\r\n");
    return rc == 0;
}

/* The ranks [*from, *to) of the members within lo and hi. */
static void score_ranks(const kv *k, const kv_zset *z, const zbound *lo,
                        const zbound *hi, size_t *from, size_t *to) {
    *from = zset_count_below(z, lo->v, lo->ex);
    *to = zset_count_below(z, hi->v,
                           !hi->ex || (k->plant & KV_PLANT_ZSCORE_EXCLUSIVE));
    if (*to < *from) *to = *from;
}

enum { ZR_AUTO, ZR_RANK, ZR_SCORE };

/* ZRANGE key start stop [BYSCORE] [REV] [LIMIT offset count]
 * [WITHSCORES], and ZREVRANGE, ZRANGEBYSCORE, ZREVRANGEBYSCORE (`by`
 * and `rev` fixed by the name): Redis 7.0's zrangeGenericCommand, its
 * options first (LIMIT's numbers read there), then the range, then the
 * key. BYLEX is not done (a syntax error). LIMIT's offset skips that many
 * of the range (negative: all), its count bounds the rest (negative: no
 * bound), as Redis' loops do. O(log n) to the first member, then O(1)
 * each. */
static void zrange(kv *k, const resp_arg *a, size_t argc, int by, int rev,
                   buf *out) {
    bool scores = false;
    long long offset = 0, limit = -1;
    for (size_t i = 4; i < argc; i++) {
        if (resp_is(&a[i], "WITHSCORES")) {
            scores = true;
        } else if (resp_is(&a[i], "LIMIT") && argc - i - 1 >= 2) {
            if (!arg_i64(&a[i + 1], &offset, out) ||
                !arg_i64(&a[i + 2], &limit, out))
                return;
            i += 2;
        } else if (rev < 0 && resp_is(&a[i], "REV")) { /* twice: an error */
            rev = 1;
        } else if (by == ZR_AUTO && resp_is(&a[i], "BYSCORE")) {
            by = ZR_SCORE;
        } else {
            reply_syntax(out);
            return;
        }
    }
    if (limit != -1 && by != ZR_SCORE) {
        buf_str(out, "-ERR syntax error, LIMIT is only supported in "
                     "combination with either BYSCORE or BYLEX\r\n");
        return;
    }
    long long start = 0, stop = 0;
    zbound lo, hi;
    if (by == ZR_SCORE) {
        /* reversed, the first bound is the max */
        if (!arg_bounds(&a[rev > 0 ? 3 : 2], &a[rev > 0 ? 2 : 3], &lo, &hi,
                        out))
            return;
    } else if (!arg_i64(&a[2], &start, out) || !arg_i64(&a[3], &stop, out)) {
        return;
    }
    dict_entry *e;
    if (!find_of(k, &a[1], KV_ZSET, &e, out)) return;
    kv_zset *z = e ? store_obj(e)->val : NULL;
    size_t from, to, n = 0; /* ranks [from, to) in the set's order */
    if (!z) {
        n = 0;
    } else if (by == ZR_SCORE) {
        score_ranks(k, z, &lo, &hi, &from, &to);
        n = to - from;
        if (offset < 0 || (unsigned long long)offset >= n)
            n = 0;
        else
            n -= (size_t)offset;
        if (limit >= 0 && (unsigned long long)limit < n) n = (size_t)limit;
        if (n && rev > 0) to -= (size_t)offset;
        if (n && rev <= 0) from += (size_t)offset;
    } else if (clip_range(start, stop, zset_len(z), &from, &to)) {
        n = to - from + 1;
        if (rev > 0) { /* ranks counted from the end */
            size_t last = zset_len(z) - 1;
            to = last - from + 1;
            from = last - (from + n - 1);
        } else {
            to = from + n;
        }
    }
    buf_int(out, '*', (long long)(scores ? 2 * n : n));
    if (!n) return;
    znode *x = zset_at(z, rev > 0 ? to - 1 : from);
    for (size_t i = 0; i < n && x; i++) {
        size_t len;
        const char *name = znode_name(z, x, &len);
        buf_bulk(out, name, len);
        if (scores) reply_score(out, x->score);
        x = rev > 0 ? x->back : x->lv[0].fwd;
    }
}

static void cmd_zrange(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)cl;
    /* the name says how: ZRANGE, ZREVRANGE, ZRANGEBYSCORE... */
    bool rev = (a[0].p[3] | 0x20) == 'v'; /* ZREV... */
    bool by_score = a[0].len > 9;
    if (a[0].len == 6)
        zrange(k, a, argc, ZR_AUTO, -1, out);
    else
        zrange(k, a, argc, by_score ? ZR_SCORE : ZR_RANK, rev, out);
}

/* ZCOUNT key min max. */
static void cmd_zcount(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)cl;
    (void)argc;
    zbound lo, hi;
    if (!arg_bounds(&a[2], &a[3], &lo, &hi, out)) return;
    dict_entry *e;
    if (!find_of(k, &a[1], KV_ZSET, &e, out)) return;
    size_t from = 0, to = 0;
    if (e) score_ranks(k, store_obj(e)->val, &lo, &hi, &from, &to);
    buf_int(out, ':', (long long)(to - from));
}

/* ZREMRANGEBYRANK key start stop and ZREMRANGEBYSCORE key min max: the
 * range read before the key, as Redis does. Logged as sent when any went
 * (the same range of the same set on a replica). */
static void cmd_zremrange(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                          buf *out) {
    (void)cl;
    bool by_score = a[0].p[11] == 'S' || a[0].p[11] == 's';
    long long start, stop;
    zbound lo, hi;
    if (by_score) {
        if (!arg_bounds(&a[2], &a[3], &lo, &hi, out)) return;
    } else if (!arg_i64(&a[2], &start, out) || !arg_i64(&a[3], &stop, out)) {
        return;
    }
    dict_entry *e;
    if (!find_of(k, &a[1], KV_ZSET, &e, out)) return;
    kv_zset *z = e ? store_obj(e)->val : NULL;
    size_t from = 0, to = 0;
    if (!by_score && stop < 0 && (k->plant & KV_PLANT_ZREMRANK_NEGATIVE))
        stop--; /* test only */
    if (z && by_score) {
        score_ranks(k, z, &lo, &hi, &from, &to);
    } else if (z && clip_range(start, stop, zset_len(z), &from, &to)) {
        to++;
    }
    znode *x = to > from ? zset_at(z, from) : NULL;
    for (size_t i = from; i < to; i++) {
        znode *next = x->lv[0].fwd;
        zset_delete(z, x->member);
        x = next;
    }
    if (to > from) {
        kv_log(k, a, argc);
        drop_if_empty(k, e, zset_len(z));
    }
    buf_int(out, ':', (long long)(to - from));
}

/* ------------------------------------------- SSCAN, HSCAN, ZSCAN */

/* A collection of at most this many members comes whole in one reply,
 * cursor 0, whatever COUNT says: Redis' answer for its small encodings
 * (listpack: 128 hash fields or sorted-set members; a sorted set's in
 * score order, as here). */
#define SCAN_WHOLE 128

typedef struct member_walk {
    const resp_arg *pat; /* NULL: every member */
    int type;            /* KV_SET, KV_HASH or KV_ZSET */
    buf tmp;             /* what is found, as bulk strings */
    long long n;         /* bulk strings in tmp */
} member_walk;

static void member_visit(const dict *d, dict_entry *m, void *arg) {
    member_walk *w = arg;
    const char *name = dict_key(d, m);
    if (w->pat && !kv_glob(w->pat->p, w->pat->len, name, m->klen, false))
        return;
    buf_bulk(&w->tmp, name, m->klen);
    w->n++;
    if (w->type == KV_HASH) {
        buf_bulk(&w->tmp, elem_bytes(hash_value(m)), hash_value(m)->len);
        w->n++;
    } else if (w->type == KV_ZSET) {
        reply_score(&w->tmp, zset_member(m)->score);
        w->n++;
    }
}

/* KV_PLANT_SCAN_SKIP's: a bucket passed over. */
static void scan_skip(const dict *d, dict_entry *m, void *arg) {
    (void)d;
    (void)m;
    (void)arg;
}

/* SSCAN, HSCAN, ZSCAN key cursor [MATCH pattern] [COUNT n]: Redis 7.0's
 * order of checks (the cursor, the key, its type, then the options, no
 * TYPE among them). A larger collection is walked with its dict's
 * cursor, as SCAN walks the keys: every member there for the whole walk
 * comes back at least once. */
static void cmd_member_scan(kv *k, kv_client *cl, const resp_arg *a,
                            size_t argc, buf *out) {
    (void)cl;
    unsigned long long cur;
    if (!kv_scan_cursor(&a[2], &cur)) {
        buf_str(out, "-ERR invalid cursor\r\n");
        return;
    }
    member_walk w = {.type = type_of(&a[0])};
    dict_entry *e;
    if (!find_of(k, &a[1], w.type, &e, out)) return;
    if (!e) {
        buf_str(out, "*2\r\n$1\r\n0\r\n*0\r\n");
        return;
    }
    long long count = 10;
    for (size_t j = 3; j < argc; j += 2) {
        if (j + 1 < argc && resp_is(&a[j], "COUNT")) {
            if (!arg_i64(&a[j + 1], &count, out)) return;
            if (count < 1) {
                reply_syntax(out);
                return;
            }
        } else if (j + 1 < argc && resp_is(&a[j], "MATCH")) {
            /* "*" is every member: no pattern (a MATCH before it too) */
            w.pat =
                a[j + 1].len == 1 && a[j + 1].p[0] == '*' ? NULL : &a[j + 1];
        } else {
            reply_syntax(out);
            return;
        }
    }
    dict *d = members(e);
    if (d->count <= SCAN_WHOLE && w.type == KV_ZSET) {
        kv_zset *z = store_obj(e)->val;
        for (znode *x = z->head->lv[0].fwd; x; x = x->lv[0].fwd)
            member_visit(d, x->member, &w);
        cur = 0;
    } else if (d->count <= SCAN_WHOLE) {
        cur = 0;
        do
            cur = dict_scan(d, cur, SIZE_MAX, member_visit, &w);
        while (cur);
    } else {
        cur = dict_scan(d, cur, (size_t)count, member_visit, &w);
        if (cur && (k->plant & KV_PLANT_SCAN_SKIP)) /* test only */
            cur = dict_scan(d, cur, 0, scan_skip, NULL);
    }
    char c[24];
    int n = snprintf(c, sizeof c, "%llu", cur);
    buf_str(out, "*2\r\n");
    buf_bulk(out, c, (size_t)n);
    buf_int(out, '*', w.n);
    buf_put(out, w.tmp.p, w.tmp.len);
    if (w.tmp.oom) out->oom = true;
    buf_free(&w.tmp);
}

/* ---------------------------------------------------------- the table */

static const kv_cmd type_commands[] = {
    {"mset", -3, CMD_WRITE, cmd_mset},
    {"msetnx", -3, CMD_WRITE, cmd_msetnx},
    {"mget", -2, 0, cmd_mget},
    {"setnx", 3, CMD_WRITE, cmd_setnx},
    {"getset", 3, CMD_WRITE, cmd_getset},
    {"append", 3, CMD_WRITE, cmd_append},
    {"strlen", 2, 0, cmd_strlen},
    {"getrange", 4, 0, cmd_getrange},
    {"setrange", 4, CMD_WRITE, cmd_setrange},
    {"lpush", -3, CMD_WRITE, cmd_lpush},
    {"rpush", -3, CMD_WRITE, cmd_lpush},
    {"lpushx", -3, CMD_WRITE, cmd_lpush},
    {"rpushx", -3, CMD_WRITE, cmd_lpush},
    {"lpop", -2, CMD_WRITE, cmd_lpop},
    {"rpop", -2, CMD_WRITE, cmd_lpop},
    {"llen", 2, 0, cmd_llen},
    {"lindex", 3, 0, cmd_lindex},
    {"lrange", 4, 0, cmd_lrange},
    {"lset", 4, CMD_WRITE, cmd_lset},
    {"lrem", 4, CMD_WRITE, cmd_lrem},
    {"ltrim", 4, CMD_WRITE, cmd_ltrim},
    {"linsert", 5, CMD_WRITE, cmd_linsert},
    {"lpos", -3, 0, cmd_lpos},
    {"lmove", 5, CMD_WRITE, cmd_lmove},
    {"rpoplpush", 3, CMD_WRITE, cmd_lmove},
    {"sadd", -3, CMD_WRITE, cmd_sadd},
    {"srem", -3, CMD_WRITE, cmd_remove},
    {"spop", -2, CMD_WRITE, cmd_spop},
    {"scard", 2, 0, cmd_card},
    {"sismember", 3, 0, cmd_has},
    {"smembers", 2, 0, cmd_smembers},
    {"sscan", -3, 0, cmd_member_scan},
    {"smismember", -3, 0, cmd_smismember},
    {"srandmember", -2, 0, cmd_srandmember},
    {"smove", 4, CMD_WRITE, cmd_smove},
    {"sinter", -2, 0, cmd_setop},
    {"sunion", -2, 0, cmd_setop},
    {"sdiff", -2, 0, cmd_setop},
    {"sinterstore", -3, CMD_WRITE, cmd_setop_store},
    {"sunionstore", -3, CMD_WRITE, cmd_setop_store},
    {"sdiffstore", -3, CMD_WRITE, cmd_setop_store},
    {"sintercard", -3, 0, cmd_sintercard},
    {"hset", -4, CMD_WRITE, cmd_hset},
    {"hmset", -4, CMD_WRITE, cmd_hset},
    {"hget", 3, 0, cmd_hget},
    {"hmget", -3, 0, cmd_hmget},
    {"hlen", 2, 0, cmd_card},
    {"hexists", 3, 0, cmd_has},
    {"hdel", -3, CMD_WRITE, cmd_remove},
    {"hgetall", 2, 0, cmd_hgetall},
    {"hincrbyfloat", 4, CMD_WRITE, cmd_hincrbyfloat},
    {"hincrby", 4, CMD_WRITE, cmd_hincrby},
    {"hkeys", 2, 0, cmd_hkeys},
    {"hvals", 2, 0, cmd_hkeys},
    {"hsetnx", 4, CMD_WRITE, cmd_hsetnx},
    {"hstrlen", 3, 0, cmd_hstrlen},
    {"hscan", -3, 0, cmd_member_scan},
    {"zadd", -4, CMD_WRITE, cmd_zadd},
    {"zincrby", 4, CMD_WRITE, cmd_zincrby},
    {"zpopmin", -2, CMD_WRITE, cmd_zpopmin},
    {"zpopmax", -2, CMD_WRITE, cmd_zpopmin},
    {"zrem", -3, CMD_WRITE, cmd_remove},
    {"zcard", 2, 0, cmd_card},
    {"zscore", 3, 0, cmd_zscore},
    {"zmscore", -3, 0, cmd_zmscore},
    {"zrange", -4, 0, cmd_zrange},
    {"zrevrange", -4, 0, cmd_zrange},
    {"zrangebyscore", -4, 0, cmd_zrange},
    {"zrevrangebyscore", -4, 0, cmd_zrange},
    {"zrank", 3, 0, cmd_zrank},
    {"zrevrank", 3, 0, cmd_zrank},
    {"zcount", 4, 0, cmd_zcount},
    {"zremrangebyrank", 4, CMD_WRITE, cmd_zremrange},
    {"zremrangebyscore", 4, CMD_WRITE, cmd_zremrange},
    {"zscan", -3, 0, cmd_member_scan},
};

void kv_types_init(void) {
    kv_commands_add(type_commands,
                    sizeof type_commands / sizeof type_commands[0]);
}
