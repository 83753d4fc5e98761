/* cmd.c: lull-kv's commands (see cmd.h): the table, the keyspace and
 * string commands, expiry, applying a primary's log, INFO. One thread,
 * the loop's, runs them; nothing here blocks or knows of sockets.
 *
 * The rule that keeps replicas equal to their primary: a write is logged
 * exactly when it changed the keyspace, after it did, as a request that
 * repeats it (a DEL that found nothing and an INCR refused are not
 * logged; FLUSHDB is logged as FLUSHALL, its equal with one database;
 * relative times become absolute: EXPIRE as PEXPIREAT, SET ... EX as SET
 * ... PXAT). A replica runs the records with the same code, so the same
 * record on the same keyspace gives the same keyspace. A write that
 * cannot get memory for its value changes nothing and answers -OOM; one
 * whose record cannot be logged stops lull-kv (as Redis stops when out of
 * memory), since a replica missing a write is worse.
 *
 * Expiry follows Redis: a key is gone from the moment its time comes. A
 * command that meets an expired key on a primary deletes it and logs a
 * DEL for the replicas (the primary's timer does the same for keys
 * nobody touches: kv_expire_due); a replica never deletes a key on its
 * own, hides an expired key from its clients, and waits for the DEL. */
#define _POSIX_C_SOURCE 200809L
#include "cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "blob.h"
#include "cmd_int.h"

/* ------------------------------------------------------------ keyspace */

void kv_init(kv *k) {
    memset(k, 0, sizeof *k);
    repl_log_init(&k->log);
    k->log.backlog = REPL_BACKLOG_DEFAULT;
    k->peers.next = k->peers.prev = &k->peers;
    dict_init(&k->channels, sizeof(kv_chan));
    dict_init(&k->patterns, sizeof(kv_chan));
    dict_init(&k->watched, sizeof(kv_watch *));
}

/* The clients are reset first (kv_client_reset): no subscription is
 * left. */
void kv_free(kv *k) {
    buf_free(&k->held);
    store_free(&k->db);
    repl_log_free(&k->log);
    dict_free(&k->channels);
    dict_free(&k->patterns);
    dict_free(&k->watched);
}

void kv_oom(const char *what) {
    fprintf(stderr, "lull-kv: out of memory for %s: stopping\n", what);
    abort();
}

int64_t kv_now(kv *k) {
    if (!k->cmd_now) {
        if (k->clock) {
            k->cmd_now = k->clock(k);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            k->cmd_now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        }
    }
    return k->cmd_now;
}

static void log_append(kv *k, const resp_arg *a, size_t argc) {
    if (repl_log_write(&k->log, a, argc) < 0) kv_oom("the write log");
}

/* KV_PLANT_ACK_BEFORE_LOG: the held write goes into the log now. Its
 * arguments are kept as (length, bytes) pairs in k->held. */
static void held_flush(kv *k) {
    if (!k->held_argc) return;
    resp_arg a[8];
    const char *p = k->held.p;
    for (size_t i = 0; i < k->held_argc; i++) {
        memcpy(&a[i].len, p, sizeof a[i].len);
        a[i].p = p + sizeof a[i].len;
        p += sizeof a[i].len + a[i].len;
    }
    log_append(k, a, k->held_argc);
    k->held_argc = 0;
    k->held.len = 0;
}

/* Holds a write back instead of logging it (small writes only: the
 * planted bug needs no more). */
static bool held_keep(kv *k, const resp_arg *a, size_t argc) {
    if (k->in_exec || argc > 8) return false;
    held_flush(k);
    for (size_t i = 0; i < argc; i++) {
        buf_put(&k->held, (const char *)&a[i].len, sizeof a[i].len);
        buf_put(&k->held, a[i].p, a[i].len);
    }
    k->held_argc = argc;
    return true;
}

/* What kv_log does before a record in its rare cases (a planted bug's
 * held write, a transaction's first write): true when the record is
 * held, not logged. Out of line: inlined, their calls made every write's
 * kv_log save six registers and a frame (some 8 instructions a SET). */
static __attribute__((noinline)) bool log_before(kv *k, const resp_arg *a,
                                                 size_t argc) {
    if (k->plant & KV_PLANT_ACK_BEFORE_LOG) {
        if (held_keep(k, a, argc)) return true;
        held_flush(k);
    }
    if (k->in_exec && !k->multi_logged) {
        static const resp_arg multi = {"MULTI", 5};
        log_append(k, &multi, 1);
        k->multi_logged = true;
    }
    return false;
}

void kv_log(kv *k, const resp_arg *a, size_t argc) {
    /* Every write that changed something is logged, on a replica too (which
     * keeps none): what its record names is what WATCH looks for. */
    if (k->watched.count) kv_watch_touch_record(k, a, argc);
    if (k->replica) return;
    if (__builtin_expect((k->plant & KV_PLANT_ACK_BEFORE_LOG) ||
                             (k->in_exec && !k->multi_logged),
                         0) &&
        log_before(k, a, argc))
        return;
    if (repl_log_write(&k->log, a, argc) < 0) kv_oom("the write log");
}

/* The reservation is what keeps a write and its record together: the
 * keyspace takes the write first, and a record that then finds no memory
 * (a value of many MiB needs a chunk as long) could only stop lull-kv
 * (kv_oom), with the write applied and never sent. 64 bytes and 32 a
 * word cover the records a write logs besides its own or in its place
 * (EXPIRE's PEXPIREAT, SET's PXAT, INCRBYFLOAT's SET, a MULTI, the DEL of
 * an expired key of up to 18 bytes a word); one that outgrows them still
 * asks the log for room, as before. */
size_t kv_log_need(const resp_arg *a, size_t argc, size_t *nrec) {
    *nrec = argc + 2;
    return repl_record_len(a, argc) + 64 + 32 * argc;
}

/* Adds to *len and *nrec what is left of the room EXEC asked for its
 * writes: a record logged inside the transaction by anything else (a
 * read's DEL of an expired key, SPOP's records) asks for both, or it
 * would take the room of the writes after it, whose records would then
 * find no memory (kv_oom). */
static void exec_room_left(const kv *k, size_t *len, size_t *nrec) {
    if (!k->in_exec || !k->exec_room) return;
    uint64_t used = k->log.end - k->exec_from;
    size_t urec = k->log.nrec - k->exec_rec_from;
    if (used < k->exec_room) *len += k->exec_room - (size_t)used;
    if (urec < k->exec_nrec) *nrec += k->exec_nrec - urec;
}

void kv_exec_room_extra(kv *k, uint64_t end, size_t nrec) {
    if (!k->in_exec || !k->exec_room) return;
    k->exec_from += k->log.end - end;
    k->exec_rec_from += k->log.nrec - nrec;
}

void kv_exec_room_set(kv *k, size_t len, size_t nrec) {
    k->exec_room = len;
    k->exec_nrec = nrec;
    k->exec_from = k->log.end;
    k->exec_rec_from = k->log.nrec;
}

bool kv_log_room(kv *k, size_t len, size_t nrec, buf *out) {
    if (k->replica || k->log.idle) return true; /* nothing is kept */
    exec_room_left(k, &len, &nrec);
    if (repl_log_room(&k->log, len, nrec) == 0) {
        k->room_reserved = true;
        return true;
    }
    reply_oom(out);
    return false;
}

/* kv_log_room for command c of a[0..argc) before it runs. */
static inline bool write_room(kv *k, const kv_cmd *c, const resp_arg *a,
                              size_t argc, buf *out) {
    if (!(c->flags & (CMD_WRITE | CMD_LOGGED)) || k->replica || k->log.idle)
        return true;
    size_t nrec, len = kv_log_need(a, argc, &nrec);
    return kv_log_room(k, len, nrec, out);
}

/* A primary deletes a key whose time has come and logs the DEL that
 * repeats it on its replicas. With `may_wait`, a DEL the log has no
 * memory for leaves the key in place (false): deleted unlogged, it would
 * stay on every replica. Without it (a write's lookup, which reserved
 * the room and must not find the key again), the log is asked as for any
 * record. */
static bool expire_key(kv *k, dict_entry *e, bool may_wait) {
    resp_arg del[2] = {{"DEL", 3}, {dict_key(&k->db.d, e), e->klen}};
    uint64_t end = k->log.end;
    size_t logged = k->log.nrec;
    if (may_wait && !k->replica) {
        size_t len = repl_record_len(del, 2), nrec = 1;
        exec_room_left(k, &len, &nrec);
        if (repl_log_room(&k->log, len, nrec) < 0) return false;
    }
    kv_log(k, del, 2);
    if (may_wait) kv_exec_room_extra(k, end, logged);
    store_delete(&k->db, e);
    k->expiry_changed = true;
    return true;
}

dict_entry *kv_lookup(kv *k, const resp_arg *key) {
    dict_entry *e = store_find(&k->db, key->p, key->len);
    if (!e || !store_obj(e)->heap || k->applying) return e;
    if (!store_expired(store_expire(&k->db, e), kv_now(k))) return e;
    /* A write reserved room for the DEL, and must not find the key again;
     * a read may leave it (expire_key). */
    if (!k->replica) expire_key(k, e, !k->room_reserved);
    return NULL;
}

void kv_delete(kv *k, dict_entry *e) {
    if (store_expire(&k->db, e)) k->expiry_changed = true;
    store_delete(&k->db, e);
}

int kv_set_expire(kv *k, dict_entry *e, int64_t when) {
    if (!store_expire(&k->db, e) && when <= 0) return 0;
    k->expiry_changed = true;
    return store_set_expire(&k->db, e, when);
}

static bool no_limit(void *arg) {
    (void)arg;
    return true;
}

size_t kv_expire_due(kv *k, bool (*more_ok)(void *arg), void *arg) {
    if (k->replica) return 0;
    if (!more_ok) more_ok = no_limit;
    /* Inside EXEC (KEYS, SCAN, DBSIZE) the transaction's one time holds
     * (kv_run); otherwise the clock is read afresh, before and after. */
    bool fresh = !k->in_exec;
    if (fresh) k->cmd_now = 0;
    int64_t now = kv_now(k);
    size_t n = 0;
    dict_entry *e;
    /* At least one key per call, whatever more_ok says: each run of the
     * timer makes progress. */
    while ((e = store_first_expiry(&k->db)) &&
           store_expired(store_expire(&k->db, e), now)) {
        if (!expire_key(k, e, true)) {
            k->expire_waits = true; /* the timer tries again later */
            break;
        }
        n++;
        if (!more_ok(arg)) break;
    }
    if (fresh) k->cmd_now = 0;
    return n;
}

bool kv_parse_i64(const char *p, size_t n, long long *out) {
    /* At most a sign and 19 digits: INT64_MIN is "-9223372036854775808". */
    if (n == 0 || n > 20) return false;
    bool neg = p[0] == '-';
    size_t i = neg;
    if (i == n) return false;
    /* "0" alone; otherwise the first digit is 1-9 ("007", "-0" refused,
     * as Redis refuses them). */
    if (p[i] == '0') {
        if (n != 1) return false;
        *out = 0;
        return true;
    }
    unsigned long long v = 0;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return false;
        unsigned d = (unsigned)(p[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (unsigned long long)INT64_MAX + 1) return false;
        *out =
            v == (unsigned long long)INT64_MAX + 1 ? INT64_MIN : -(long long)v;
    } else {
        if (v > (unsigned long long)INT64_MAX) return false;
        *out = (long long)v;
    }
    return true;
}

/* ------------------------------------------------------------- replies */

void reply_wrongtype(buf *out) {
    buf_str(out, "-WRONGTYPE Operation against a key holding the wrong kind "
                 "of value\r\n");
}

void reply_not_integer(buf *out) {
    buf_str(out, "-ERR value is not an integer or out of range\r\n");
}

void reply_syntax(buf *out) {
    buf_str(out, "-ERR syntax error\r\n");
}

void reply_nil(buf *out) {
    buf_str(out, "$-1\r\n");
}

void reply_ok(buf *out) {
    buf_str(out, "+OK\r\n");
}

void reply_oom(buf *out) {
    buf_str(out,
            "-OOM command not allowed when used memory > 'maxmemory'.\r\n");
}

bool arg_i64(const resp_arg *a, long long *v, buf *out) {
    if (kv_parse_i64(a->p, a->len, v)) return true;
    reply_not_integer(out);
    return false;
}

/* -------------------------------------------------------------- strings */

/* Whether a string of len bytes may be answered by reference to its blob
 * (k->reply_blob): a blob, a client's own reply, not within EXEC (whose
 * replies may still be cut back). */
static inline bool blob_reply_ok(const kv *k, const kv_client *cl,
                                 const buf *out, size_t len) {
    return len >= KV_BLOB_MIN && k->reply_blob && cl && out == cl->out &&
           !k->in_exec;
}

/* A string's bulk reply: its blob sent where it is when the owner can
 * (the reply holds it, so the key may go or change meanwhile), else
 * copied. */
static inline void reply_str(kv *k, kv_client *cl, kobj *o, buf *out) {
    if (blob_reply_ok(k, cl, out, o->len) && k->reply_blob(cl, o->val, o->len))
        return;
    buf_bulk(out, kobj_str(o), o->len);
}

static void cmd_get(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                    buf *out) {
    (void)argc;
    dict_entry *e = kv_lookup(k, &a[1]);
    if (!e) {
        reply_nil(out);
        return;
    }
    kobj *o = store_obj(e);
    if (o->type != KV_STRING) {
        reply_wrongtype(out);
        return;
    }
    reply_str(k, cl, o, out);
}

enum {
    SET_NX = 0x1,
    SET_XX = 0x2,
    SET_GET = 0x4,
    SET_KEEPTTL = 0x8,
    SET_EX = 0x10,
    SET_PX = 0x20,
    SET_EXAT = 0x40,
    SET_PXAT = 0x80,
};
#define SET_ANY_TTL (SET_EX | SET_PX | SET_EXAT | SET_PXAT)

/* The milliseconds of EX / PX / EXAT / PXAT as an absolute time; false
 * (with the reply) when it is not a valid one. Redis' rules and words. */
static bool expire_arg(kv *k, const resp_arg *a, int unit_flag, const char *cmd,
                       int64_t *when, buf *out) {
    long long v;
    if (!arg_i64(a, &v, out)) return false;
    bool seconds = unit_flag & (SET_EX | SET_EXAT);
    if (v <= 0 || (seconds && v > INT64_MAX / 1000)) goto bad;
    if (seconds) v *= 1000;
    if (unit_flag & (SET_EX | SET_PX)) {
        if (v > INT64_MAX - kv_now(k)) goto bad;
        v += kv_now(k);
    }
    *when = v;
    return true;
bad:
    buf_str(out, "-ERR invalid expire time in '");
    buf_str(out, cmd);
    buf_str(out, "' command\r\n");
    return false;
}

/* SET's work once its options are read: f (SET_*) and the expiry time
 * `when` (0: none) for key and val; the reply and the record. True when
 * the value was written. */
static bool set_key(kv *k, const resp_arg *key, const resp_arg *val, unsigned f,
                    int64_t when, buf *out) {
    dict_entry *e = kv_lookup(k, key);
    if (e && (f & SET_GET) && store_obj(e)->type != KV_STRING) {
        reply_wrongtype(out);
        return false;
    }
    size_t mark = out->len; /* where the reply starts, for an -OOM */
    if ((f & SET_NX && e) || (f & SET_XX && !e)) {
        if (f & SET_GET && e)
            buf_bulk(out, kobj_str(store_obj(e)), store_obj(e)->len);
        else
            reply_nil(out);
        return false;
    }
    if (f & SET_GET) {
        if (e)
            buf_bulk(out, kobj_str(store_obj(e)), store_obj(e)->len);
        else
            reply_nil(out);
    }
    /* The entry is made first, so that nothing is logged that cannot be
     * applied. The value is the store's own copy: the log frees its bytes
     * once they leave the backlog. */
    int rc;
    if (val->p == k->arg_blob && val->p) { /* received into a blob: kept */
        rc = store_take(&k->db, &e, key->p, key->len, k->arg_blob, val->len);
        if (rc > 0) k->arg_blob = NULL;
    } else {
        rc = store_put(&k->db, &e, key->p, key->len, val->p, val->len);
    }
    if (rc < 0) {
        out->len = mark; /* the old value is still there: no GET reply */
        reply_oom(out);
        return false;
    }
    if (!(f & SET_KEEPTTL) && (when || store_expire(&k->db, e)) &&
        kv_set_expire(k, e, when) < 0) {
        kv_delete(k, e); /* no room for its expiry: it must not outlive it */
        resp_arg del[2] = {{"DEL", 3}, *key};
        kv_log(k, del, 2);
        out->len = mark;
        reply_oom(out);
        return false;
    }
    /* The record: the key and value, and the expiry as an absolute time
     * (or KEEPTTL), so that a replica applying it later agrees. */
    char num[24];
    resp_arg rec[5];
    rec[0] = (resp_arg){"SET", 3};
    rec[1] = *key;
    rec[2] = *val;
    size_t n = 3;
    if (when) {
        rec[n++] = (resp_arg){"PXAT", 4};
        rec[n].len = (size_t)snprintf(num, sizeof num, "%" PRId64, when);
        rec[n++].p = num;
    } else if (f & SET_KEEPTTL) {
        rec[n++] = (resp_arg){"KEEPTTL", 7};
    }
    kv_log(k, rec, n);
    if (!(f & SET_GET)) reply_ok(out);
    return true;
}

/* SET ... GET: as set_key, but an old value the owner may send by
 * reference (blob_reply_ok) is, as GET's is. The old blob is held across
 * the write (which then leaves its bytes alone) and answered once the
 * write is done, in place of set_key's +OK: a reference cannot be cut
 * back as set_key cuts its reply on -OOM. Out of the common SET's way. */
static __attribute__((noinline)) void
set_get_key(kv *k, kv_client *cl, const resp_arg *key, const resp_arg *val,
            unsigned f, int64_t when, buf *out) {
    dict_entry *e = kv_lookup(k, key);
    kobj *o = e ? store_obj(e) : NULL;
    if (!o || o->type != KV_STRING || !blob_reply_ok(k, cl, out, o->len)) {
        set_key(k, key, val, f, when, out);
        return;
    }
    if (f & SET_NX) { /* the key is there: nothing written */
        reply_str(k, cl, o, out);
        return;
    }
    const char *old = o->val;
    size_t len = o->len, mark = out->len;
    kv_blob_ref(old);
    if (set_key(k, key, val, f & ~(unsigned)SET_GET, when, out)) {
        out->len = mark; /* its +OK */
        if (!k->reply_blob(cl, old, len)) buf_bulk(out, old, len);
    }
    kv_blob_unref(old);
}

static void cmd_set(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                    buf *out) {
    unsigned f = 0;
    const resp_arg *ttl = NULL;
    for (size_t j = 3; j < argc; j++) {
        const resp_arg *o = &a[j];
        bool next = j + 1 < argc;
        if (resp_is(o, "NX") && !(f & SET_XX)) {
            f |= SET_NX;
        } else if (resp_is(o, "XX") && !(f & SET_NX)) {
            f |= SET_XX;
        } else if (resp_is(o, "GET")) {
            f |= SET_GET;
        } else if (resp_is(o, "KEEPTTL") && !(f & SET_ANY_TTL)) {
            f |= SET_KEEPTTL;
        } else if (next && (resp_is(o, "EX") || resp_is(o, "PX") ||
                            resp_is(o, "EXAT") || resp_is(o, "PXAT"))) {
            unsigned t = resp_is(o, "EX")     ? SET_EX
                         : resp_is(o, "PX")   ? SET_PX
                         : resp_is(o, "EXAT") ? SET_EXAT
                                              : SET_PXAT;
            /* The same one again is taken, the last value kept, as
             * Redis does; another one, or KEEPTTL, is a syntax error. */
            if (f & (SET_KEEPTTL | (SET_ANY_TTL & ~t))) {
                reply_syntax(out);
                return;
            }
            f |= t;
            ttl = &a[++j];
        } else {
            reply_syntax(out);
            return;
        }
    }
    int64_t when = 0;
    if (ttl && !expire_arg(k, ttl, (int)(f & SET_ANY_TTL), "set", &when, out))
        return;
    if (f & SET_GET)
        set_get_key(k, cl, &a[1], &a[2], f, when, out);
    else
        set_key(k, &a[1], &a[2], f, when, out);
}

/* SETEX key seconds value, PSETEX key ms value: SET key value EX (PX),
 * the time read first, its errors naming the command. */
static void cmd_setex(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                      buf *out) {
    (void)cl;
    (void)argc;
    bool ms = (a[0].p[0] | 0x20) == 'p';
    int64_t when;
    if (!expire_arg(k, &a[2], ms ? SET_PX : SET_EX, ms ? "psetex" : "setex",
                    &when, out))
        return;
    set_key(k, &a[1], &a[3], ms ? SET_PX : SET_EX, when, out);
}

/* GETDEL key: GET, then the key goes (logged as its DEL). */
static void cmd_getdel(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)argc;
    dict_entry *e = kv_lookup(k, &a[1]);
    if (!e) {
        reply_nil(out);
        return;
    }
    kobj *o = store_obj(e);
    if (o->type != KV_STRING) {
        reply_wrongtype(out);
        return;
    }
    reply_str(k, cl, o, out); /* a blob outlives the key in the reply */
    kv_delete(k, e);
    resp_arg del[2] = {{"DEL", 3}, a[1]};
    kv_log(k, del, 2);
}

/* GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]: Redis 7.0's order of
 * checks, the options first, then the key and its type, then the time
 * (a missing key is nil whatever the time says). Logged as what it did,
 * as Redis propagates it: PEXPIREAT, a DEL (a time already past) or
 * PERSIST; without an option it is a read. */
static void cmd_getex(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                      buf *out) {
    (void)cl;
    bool persist = false;
    unsigned unit = 0;
    const resp_arg *ttl = NULL;
    for (size_t j = 2; j < argc; j++) {
        const resp_arg *o = &a[j];
        unsigned t = resp_is(o, "EX")     ? SET_EX
                     : resp_is(o, "PX")   ? SET_PX
                     : resp_is(o, "EXAT") ? SET_EXAT
                     : resp_is(o, "PXAT") ? SET_PXAT
                                          : 0;
        /* The same option again is taken (the last value kept), as Redis
         * does; two different ones are a syntax error. */
        if (resp_is(o, "PERSIST") && !unit) {
            persist = true;
        } else if (t && !persist && (!unit || unit == t) && j + 1 < argc) {
            unit = t;
            ttl = &a[++j];
        } else {
            reply_syntax(out);
            return;
        }
    }
    dict_entry *e = kv_lookup(k, &a[1]);
    if (!e) {
        reply_nil(out);
        return;
    }
    kobj *o = store_obj(e);
    if (o->type != KV_STRING) {
        reply_wrongtype(out);
        return;
    }
    int64_t when = 0;
    if (ttl && !expire_arg(k, ttl, (int)unit, "getex", &when, out)) return;
    size_t mark = out->len;
    buf_bulk(out, kobj_str(o), o->len);
    if (ttl && (unit & (SET_EXAT | SET_PXAT)) && when <= kv_now(k)) {
        resp_arg del[2] = {{"DEL", 3}, a[1]};
        kv_delete(k, e);
        kv_log(k, del, 2);
    } else if (ttl) {
        if (kv_set_expire(k, e, when) < 0) {
            out->len = mark;
            reply_oom(out);
            return;
        }
        char num[24];
        resp_arg rec[3] = {{"PEXPIREAT", 9}, a[1], {num, 0}};
        rec[2].len = (size_t)snprintf(num, sizeof num, "%" PRId64, when);
        kv_log(k, rec, 3);
    } else if (persist && o->heap) {
        kv_set_expire(k, e, 0);
        resp_arg rec[2] = {{"PERSIST", 7}, a[1]};
        kv_log(k, rec, 2);
    }
}

/* INCR, DECR, INCRBY, DECRBY: by. The value keeps its expiry. */
static void incr_by(kv *k, const resp_arg *a, size_t argc, long long by,
                    buf *out) {
    dict_entry *e = kv_lookup(k, &a[1]);
    long long n = 0;
    if (e) {
        kobj *o = store_obj(e);
        if (o->type != KV_STRING) {
            reply_wrongtype(out);
            return;
        }
        if (!kv_parse_i64(kobj_str(o), o->len, &n)) {
            reply_not_integer(out);
            return;
        }
    }
    if ((by < 0 && n < INT64_MIN - by) || (by > 0 && n > INT64_MAX - by)) {
        buf_str(out, "-ERR increment or decrement would overflow\r\n");
        return;
    }
    /* The digits by hand (snprintf's format parsing cost a fifth of an
     * INCR). */
    char tmp[24], *end = tmp + sizeof tmp, *q = end;
    long long v = n + by;
    unsigned long long u =
        v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do {
        *--q = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *--q = '-';
    if (store_put(&k->db, &e, a[1].p, a[1].len, q, (size_t)(end - q)) < 0) {
        reply_oom(out);
        return;
    }
    kv_log(k, a, argc);
    buf_int(out, ':', n + by);
}

static void cmd_incr(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    incr_by(k, a, argc, resp_is(&a[0], "DECR") ? -1 : 1, out);
}

static void cmd_incrby(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)cl;
    long long by;
    if (!arg_i64(&a[2], &by, out)) return;
    if (resp_is(&a[0], "DECRBY")) {
        if (by == INT64_MIN) {
            buf_str(out, "-ERR decrement would overflow\r\n");
            return;
        }
        by = -by;
    }
    incr_by(k, a, argc, by, out);
}

/* Redis' string2ld: what strtold takes whole (hex and "inf" too), no
 * leading space, no NUL, no NaN, not an overflow nor an underflow to 0,
 * shorter than KV_LD_MAX. */
bool kv_parse_ld(const char *p, size_t n, long double *v) {
    char tmp[KV_LD_MAX];
    if (n == 0 || n >= sizeof tmp || memchr(p, 0, n)) return false;
    memcpy(tmp, p, n);
    tmp[n] = 0;
    if (tmp[0] == ' ' || (tmp[0] >= '\t' && tmp[0] <= '\r')) return false;
    char *end;
    errno = 0;
    long double x = strtold(tmp, &end);
    if (end != tmp + n || isnan(x) || (errno == ERANGE && (isinf(x) || x == 0)))
        return false;
    *v = x;
    return true;
}

/* Redis' ld2string(LD_STR_HUMAN): %.17Lf, the zeros after the point
 * trimmed (and the point when nothing is left after it), -0 as 0. The
 * longest, LDBL_MAX's 4933 digits and 18 more, fits KV_LD_MAX. */
size_t kv_format_ld(long double v, char *out) {
    int n = snprintf(out, KV_LD_MAX, "%.17Lf", v);
    size_t l = n < 0 ? 0 : (size_t)n < KV_LD_MAX ? (size_t)n : KV_LD_MAX - 1;
    if (memchr(out, '.', l)) {
        while (out[l - 1] == '0')
            l--;
        if (out[l - 1] == '.') l--;
    }
    if (l == 2 && out[0] == '-' && out[1] == '0') {
        out[0] = '0';
        l = 1;
    }
    return l;
}

size_t kv_add_ld(long double v, long double by, char *out, buf *err) {
    v += by;
    if (isnan(v) || isinf(v)) {
        buf_str(err, "-ERR increment would produce NaN or Infinity\r\n");
        return 0;
    }
    return kv_format_ld(v, out);
}

/* INCRBYFLOAT key by: Redis' long double sum, logged as SET key result
 * KEEPTTL (as Redis replicates it), so that a replica stores the
 * primary's digits and never rounds on its own. */
static void cmd_incrbyfloat(kv *k, kv_client *cl, const resp_arg *a,
                            size_t argc, buf *out) {
    (void)cl;
    (void)argc;
    dict_entry *e = kv_lookup(k, &a[1]);
    long double v = 0, by;
    if (e && store_obj(e)->type != KV_STRING) {
        reply_wrongtype(out);
        return;
    }
    if ((e && !kv_parse_ld(kobj_str(store_obj(e)), store_obj(e)->len, &v)) ||
        !kv_parse_ld(a[2].p, a[2].len, &by)) {
        buf_str(out, "-ERR value is not a valid float\r\n");
        return;
    }
    char num[KV_LD_MAX];
    size_t n = kv_add_ld(v, by, num, out);
    if (n == 0) return;
    if (store_put(&k->db, &e, a[1].p, a[1].len, num, n) < 0) {
        reply_oom(out);
        return;
    }
    resp_arg rec[4] = {{"SET", 3}, a[1], {num, n}, {"KEEPTTL", 7}};
    kv_log(k, rec, 4);
    buf_bulk(out, num, n);
}

/* ----------------------------------------------------------------- keys */

static void cmd_del(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                    buf *out) {
    (void)cl;
    long long n = 0;
    for (size_t i = 1; i < argc; i++) {
        dict_entry *e = kv_lookup(k, &a[i]);
        if (e) {
            kv_delete(k, e);
            n++;
        }
    }
    if (n) kv_log(k, a, argc);
    buf_int(out, ':', n);
}

/* RENAME and RENAMENX key newkey: Redis' order (the source, then a
 * rename onto itself, then the target); the value and its expiry move,
 * the target's old value and expiry go. Logged as sent: the same move on
 * a replica's same keyspace. */
static void cmd_rename(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)cl;
    bool nx = a[0].len == 8;
    dict_entry *from = kv_lookup(k, &a[1]);
    if (!from) {
        buf_str(out, "-ERR no such key\r\n");
        return;
    }
    if (a[1].len == a[2].len && memcmp(a[1].p, a[2].p, a[1].len) == 0) {
        buf_str(out, nx ? ":0\r\n" : "+OK\r\n");
        return;
    }
    dict_entry *to = kv_lookup(k, &a[2]);
    if (to && nx) {
        buf_str(out, ":0\r\n");
        return;
    }
    if (!to && !(to = store_add(&k->db, a[2].p, a[2].len, KV_STRING))) {
        reply_oom(out);
        return;
    }
    if (store_expire(&k->db, from) || store_expire(&k->db, to))
        k->expiry_changed = true;
    store_move(&k->db, from, to);
    kv_log(k, a, argc);
    buf_str(out, nx ? ":1\r\n" : "+OK\r\n");
}

static void cmd_exists(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)cl;
    long long n = 0;
    for (size_t i = 1; i < argc; i++)
        n += kv_lookup(k, &a[i]) != NULL;
    buf_int(out, ':', n);
}

static void cmd_dbsize(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)cl;
    (void)a;
    (void)argc;
    kv_expire_due(k, NULL, NULL); /* a due key is gone, timer or not */
    buf_int(out, ':', (long long)store_count(&k->db));
}

static void cmd_flushall(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                         buf *out) {
    (void)cl;
    if (argc > 2 ||
        (argc == 2 && !resp_is(&a[1], "SYNC") && !resp_is(&a[1], "ASYNC"))) {
        reply_syntax(out);
        return;
    }
    if (store_first_expiry(&k->db)) k->expiry_changed = true;
    kv_watch_touch_present(k);
    store_clear(&k->db);
    static const resp_arg flushall = {"FLUSHALL", 8};
    if (!(k->plant & KV_PLANT_FLUSH_UNLOGGED)) kv_log(k, &flushall, 1);
    reply_ok(out);
}

/* The first n bytes of p up to its first NUL: what %.*s prints. */
static size_t c_len(const char *p, size_t n) {
    const char *z = n ? memchr(p, 0, n) : NULL;
    return z ? (size_t)(z - p) : n;
}

/* EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT key time [NX|XX|GT|LT]. */
static void cmd_expire(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)cl;
    enum { NX = 1, XX = 2, GT = 4, LT = 8 };
    unsigned f = 0;
    for (size_t j = 3; j < argc; j++) {
        if (resp_is(&a[j], "NX"))
            f |= NX;
        else if (resp_is(&a[j], "XX"))
            f |= XX;
        else if (resp_is(&a[j], "GT"))
            f |= GT;
        else if (resp_is(&a[j], "LT"))
            f |= LT;
        else {
            /* Redis' %s: up to a NUL, the CRs and LFs that end it
             * trimmed (addReplyErrorFormat trims the message's ends), the
             * rest as spaces, so the reply stays one line. */
            size_t n = c_len(a[j].p, a[j].len);
            while (n && (a[j].p[n - 1] == '\r' || a[j].p[n - 1] == '\n'))
                n--;
            buf_str(out, "-ERR Unsupported option ");
            for (size_t i = 0; i < n; i++) {
                char ch = a[j].p[i];
                buf_put(out, ch == '\r' || ch == '\n' ? " " : &ch, 1);
            }
            buf_str(out, "\r\n");
            return;
        }
    }
    if ((f & NX) && (f & (XX | GT | LT))) {
        buf_str(out, "-ERR NX and XX, GT or LT options at the same time are "
                     "not compatible\r\n");
        return;
    }
    if ((f & GT) && (f & LT)) {
        buf_str(out, "-ERR GT and LT options at the same time are not "
                     "compatible\r\n");
        return;
    }
    long long when;
    if (!arg_i64(&a[2], &when, out)) return;
    bool seconds = resp_is(&a[0], "EXPIRE") || resp_is(&a[0], "EXPIREAT");
    bool relative = resp_is(&a[0], "EXPIRE") || resp_is(&a[0], "PEXPIRE");
    int64_t base = relative ? kv_now(k) : 0;
    if ((seconds && (when > INT64_MAX / 1000 || when < INT64_MIN / 1000)) ||
        (seconds ? when * 1000 : when) > INT64_MAX - base) {
        char name[16];
        size_t n = a[0].len < sizeof name ? a[0].len : sizeof name - 1;
        for (size_t i = 0; i < n; i++)
            name[i] = (char)(a[0].p[i] | 0x20);
        name[n] = 0;
        buf_str(out, "-ERR invalid expire time in '");
        buf_str(out, name);
        buf_str(out, "' command\r\n");
        return;
    }
    /* (KV_PLANT_EXPIRE_SECONDS, repl.h: EXPIRE's seconds taken as ms) */
    if (seconds && !(relative && (k->plant & KV_PLANT_EXPIRE_SECONDS)))
        when *= 1000;
    when += base;
    dict_entry *e = kv_lookup(k, &a[1]);
    if (!e) {
        buf_str(out, ":0\r\n");
        return;
    }
    int64_t cur = store_expire(&k->db, e); /* 0: none, as Redis' -1 */
    if (((f & NX) && cur) || ((f & XX) && !cur) ||
        ((f & GT) && (cur ? when <= cur : !(k->plant & KV_PLANT_EXPIRE_GT))) ||
        ((f & LT) && cur && when >= cur)) {
        buf_str(out, ":0\r\n");
        return;
    }
    /* KV_PLANT_EXPIRE_NOW: the current ms taken as still ahead. */
    bool plant_now = k->plant & KV_PLANT_EXPIRE_NOW;
    if (when <= kv_now(k) - plant_now && !k->applying) {
        /* Already past: the key goes now, and so it does on replicas. */
        resp_arg del[2] = {{"DEL", 3}, a[1]};
        kv_delete(k, e);
        kv_log(k, del, 2);
        buf_str(out, ":1\r\n");
        return;
    }
    if (kv_set_expire(k, e, when) < 0) {
        reply_oom(out);
        return;
    }
    char num[24];
    resp_arg rec[3] = {{"PEXPIREAT", 9}, a[1], {num, 0}};
    rec[2].len = (size_t)snprintf(num, sizeof num, "%lld", when);
    kv_log(k, rec, 3);
    buf_str(out, ":1\r\n");
}

static void cmd_ttl(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                    buf *out) {
    (void)cl;
    (void)argc;
    dict_entry *e = kv_lookup(k, &a[1]);
    if (!e) {
        buf_str(out, ":-2\r\n");
        return;
    }
    int64_t t = store_expire(&k->db, e);
    if (!t) {
        buf_str(out, ":-1\r\n");
        return;
    }
    /* EXPIRETIME and PEXPIRETIME give the time itself */
    int64_t left = a[0].len > 4 ? t : t - kv_now(k);
    if (left < 0)
        left = 0; /* a replica's key that its primary has not
                     deleted yet */
    bool ms = (a[0].p[0] | 0x20) == 'p';
    /* rounded to the nearest second without adding first: an EXPIRETIME
     * near INT64_MAX ms must not wrap */
    buf_int(out, ':', ms ? left : left / 1000 + (left % 1000 >= 500));
}

static void cmd_persist(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                        buf *out) {
    (void)cl;
    dict_entry *e = kv_lookup(k, &a[1]);
    if (!e || !store_expire(&k->db, e)) {
        buf_str(out, ":0\r\n");
        return;
    }
    kv_set_expire(k, e, 0);
    kv_log(k, a, argc);
    buf_str(out, ":1\r\n");
}

/* --------------------------------------------------------- the server */

static void cmd_ping(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)k;
    if (argc > 2) {
        buf_str(out, "-ERR wrong number of arguments for 'ping' command\r\n");
        return;
    }
    if (cl && kv_client_subscribed(cl)) { /* RESP2 while subscribed */
        buf_str(out, "*2\r\n$4\r\npong\r\n");
        buf_bulk(out, argc == 2 ? a[1].p : "", argc == 2 ? a[1].len : 0);
    } else if (argc == 1)
        buf_str(out, "+PONG\r\n");
    else
        buf_bulk(out, a[1].p, a[1].len);
}

static void cmd_echo(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)k;
    (void)cl;
    (void)argc;
    buf_bulk(out, a[1].p, a[1].len);
}

static void cmd_info(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    kv_info(k, &a[1], argc - 1, out);
}

static void cmd_quit(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)k;
    (void)cl;
    (void)a;
    (void)argc;
    reply_ok(out);
}

/* COMMAND [...]: redis-cli asks for COMMAND DOCS to offer hints; it
 * copes with an empty answer. */
static void cmd_command(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                        buf *out) {
    (void)k;
    (void)cl;
    (void)a;
    (void)argc;
    buf_str(out, "*0\r\n");
}

/* CONFIG GET name|pattern ...: what a server without persistence says for
 * the parameters redis-benchmark and redis-cli ask about at start-up, and
 * the options the server was started with (k->config); others are
 * unknown. As Redis 7: each parameter appears once however many
 * arguments name it; a name without * ? [ is looked up ignoring case and
 * answered under the name as the client spelt it; a pattern (matched
 * ignoring case) answers with the parameter's own name. Redis answers in
 * its table's hash order, lull-kv in the order the arguments found them:
 * a client reads the answer as a map. */
#define CONFIG_MAX 32 /* the fixed two and server.c's table, with room */

static void cmd_config_get(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                           buf *out) {
    (void)cl;
    static const char *const fixed[][2] = {{"save", ""}, {"appendonly", "no"}};
    size_t entries = 2 + k->nconfig;
    if (entries > CONFIG_MAX) entries = CONFIG_MAX;
    /* Per parameter: the name it is answered under (NULL: not asked for)
     * and the order it was found in. */
    const char *shown[CONFIG_MAX] = {0};
    size_t shown_len[CONFIG_MAX], order[CONFIG_MAX], found = 0;
    for (size_t i = 2; i < argc; i++) {
        bool pattern = memchr(a[i].p, '*', a[i].len) ||
                       memchr(a[i].p, '?', a[i].len) ||
                       memchr(a[i].p, '[', a[i].len);
        for (size_t e = 0; e < entries; e++) {
            const char *name = e < 2 ? fixed[e][0] : k->config[e - 2][0];
            size_t len = strlen(name);
            if (shown[e]) continue;
            if (pattern ? !kv_glob(a[i].p, a[i].len, name, len, true)
                        : a[i].len != len || strncasecmp(a[i].p, name, len))
                continue;
            shown[e] = pattern ? name : a[i].p;
            shown_len[e] = len;
            order[found++] = e;
            if (!pattern) break;
        }
    }
    buf_int(out, '*', (long long)(2 * found));
    for (size_t i = 0; i < found; i++) {
        size_t e = order[i];
        const char *value = e < 2 ? fixed[e][1] : k->config[e - 2][1];
        buf_bulk(out, shown[e], shown_len[e]);
        buf_bulk(out, value, strlen(value));
    }
}

/* CONFIG's other subcommands in Redis 7.0, with their arities: refused
 * when they run; an unknown one is refused before, as Redis does. */
static void cmd_config_other(kv *k, kv_client *cl, const resp_arg *a,
                             size_t argc, buf *out) {
    (void)k;
    (void)cl;
    (void)a;
    (void)argc;
    buf_str(out, "-ERR CONFIG: only CONFIG GET is supported\r\n");
}

/* CONFIG SET name value: the parameters the owner sets (kv.config_set:
 * maxmemory-clients); any other, or several at once, refused as before. */
static void cmd_config_set(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                           buf *out) {
    const char *err =
        argc == 4 && k->config_set ? k->config_set(k, &a[2], &a[3]) : "";
    if (!err)
        buf_str(out, "+OK\r\n");
    else if (*err)
        buf_str(out, err);
    else
        cmd_config_other(k, cl, a, argc, out);
}

/* CONFIG is a container, as CLIENT is: the subcommand and its arity are
 * checked before MULTI queues it, so a refused one aborts the
 * transaction (lull-kv queued "CONFIG GET" and "CONFIG FOO", answered
 * them from EXEC and ran the rest). */
static const kv_cmd config_subcommands[] = {
    {"config|get", -3, 0, cmd_config_get},
    {"config|set", -4, 0, cmd_config_set},
    {"config|resetstat", 2, 0, cmd_config_other},
    {"config|rewrite", 2, 0, cmd_config_other},
    {"config|help", 2, 0, cmd_config_other},
};

static const kv_cmd *config_subcommand(const resp_arg *name) {
    for (size_t i = 0;
         i < sizeof config_subcommands / sizeof *config_subcommands; i++)
        if (resp_is(name, config_subcommands[i].name + sizeof "config|" - 1))
            return &config_subcommands[i];
    return NULL;
}

/* -------------------------------------------------------------- globs */

/* Redis' glob: * ? [abc] [^a] [a-z] and \ escapes, with redis-server's
 * answers in the corners:
 *   - an empty string matches only the empty pattern: not even "*" (KEYS
 *     and SCAN MATCH take a pattern of one "*" as "every key" before
 *     matching, but a "*" subscriber gets nothing published to "");
 *   - a class with no closing ] runs to the end of the pattern ("[ab"
 *     matches "a"); "[]" and "[^]" are the empty class and its negation;
 *   - a range's ends are swapped when reversed ([z-a] is [a-z]); "a-]" is
 *     the range from a to ], as the class is read left to right; ranges
 *     compare bytes as C's char, signed as redis-server on x86-64 has it
 *     (a byte of 0x80 or more sorts below '\0');
 *   - a \ in a class escapes the next byte, compared without nocase; a \
 *     at the end of the pattern is a literal \;
 *   - nocase folds A-Z only (the C locale's tolower);
 *   - a pattern with more than GLOB_MAX_STARS runs of '*' before an
 *     element that is not '*' matches nothing: redis-server's recursion
 *     gives up at that depth.
 *
 * The match is the classic walk with one backtrack point: the elements other
 * than '*' each take exactly one byte, so after a mismatch only the last
 * '*' seen needs to take one byte more (an earlier star taking more could
 * only lead to a position the last one reaches too). Each element is
 * compared with each byte at most once per start the last star tries:
 * O(pattern * string) at worst, where a recursion on every '*' (lull-kv's
 * before this) is exponential in the stars: "*a" 7 times then "*b"
 * against 60 'a's took 26 s at -O2, some eight times more per star. */
#define GLOB_MAX_STARS 1000

static inline char glob_fold(char c, bool nocase) {
    return nocase && c >= 'A' && c <= 'Z' ? (char)(c | 0x20) : c;
}

/* Whether the element at pat[i] (not a '*') takes byte c; *next is where
 * the element after it starts. */
static inline bool glob_one(const char *pat, size_t plen, size_t i, char c,
                            bool nocase, size_t *next, size_t *steps) {
    if (pat[i] == '?') {
        *next = i + 1;
        return true;
    }
    if (pat[i] != '[') {
        if (pat[i] == '\\' && i + 1 < plen) i++;
        *next = i + 1;
        return glob_fold(pat[i], nocase) == glob_fold(c, nocase);
    }
    i++;
    bool neg = i < plen && pat[i] == '^';
    i += neg;
    bool match = false;
    for (;; i++) {
        (*steps)++;
        if (i == plen) { /* no closing ]: the class ends with the pattern */
            *next = plen;
            return match != neg;
        }
        if (pat[i] == '\\' && i + 1 < plen) {
            i++;
            match |= pat[i] == c;
        } else if (pat[i] == ']') {
            *next = i + 1;
            return match != neg;
        } else if (i + 2 < plen && pat[i + 1] == '-') {
            /* C's char: signed here, as in redis-server on x86-64. */
            int lo = (signed char)pat[i], hi = (signed char)pat[i + 2];
            int x = (signed char)c;
            if (lo > hi) {
                int t = lo;
                lo = hi;
                hi = t;
            }
            lo = glob_fold((char)lo, nocase);
            hi = glob_fold((char)hi, nocase);
            x = glob_fold((char)x, nocase);
            match |= x >= lo && x <= hi;
            i += 2;
        } else {
            match |= glob_fold(pat[i], nocase) == glob_fold(c, nocase);
        }
    }
}

static inline bool glob(const char *pat, size_t plen, const char *s,
                        size_t slen, bool nocase, size_t *steps) {
    if (slen == 0) return plen == 0;
    size_t p = 0, i = 0;
    size_t star_p = SIZE_MAX; /* the element after the last '*' seen */
    size_t star_i = 0;        /* where that star's match ends now */
    size_t stars = 0;         /* runs of '*' passed (each is passed once) */
    while (i < slen) {
        (*steps)++;
        if (p < plen && pat[p] == '*') {
            while (p < plen && pat[p] == '*')
                p++;
            if (p == plen) return true;
            if (++stars > GLOB_MAX_STARS) return false;
            star_p = p;
            star_i = i;
            continue;
        }
        size_t next;
        if (p < plen && glob_one(pat, plen, p, s[i], nocase, &next, steps)) {
            p = next;
            i++;
        } else if (star_p != SIZE_MAX) {
            p = star_p;
            i = ++star_i;
        } else {
            return false;
        }
    }
    while (p < plen && pat[p] == '*')
        p++;
    return p == plen;
}

bool kv_glob(const char *pat, size_t plen, const char *s, size_t slen,
             bool nocase) {
    size_t steps = 0;
    return glob(pat, plen, s, slen, nocase, &steps);
}

bool kv_glob_steps(const char *pat, size_t plen, const char *s, size_t slen,
                   bool nocase, size_t *steps) {
    *steps = 0;
    return glob(pat, plen, s, slen, nocase, steps);
}

/* -------------------------------------------------------- KEYS, SCAN */

typedef struct keys_walk {
    kv *k;
    const resp_arg *pat; /* NULL: every key */
    int type;            /* -1: any */
    buf tmp;             /* the keys found, as bulk strings */
    long long n;
} keys_walk;

static void keys_visit(const dict *d, dict_entry *e, void *arg) {
    keys_walk *w = arg;
    const char *key = dict_key(d, e);
    kobj *o = store_obj(e);
    if (store_expired(store_expire(&w->k->db, e), kv_now(w->k)) &&
        !w->k->applying)
        return;
    if (w->type >= 0 && o->type != w->type) return;
    if (w->pat && !kv_glob(w->pat->p, w->pat->len, key, e->klen, false)) return;
    buf_bulk(&w->tmp, key, e->klen);
    w->n++;
}

static void cmd_keys(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    (void)argc;
    kv_expire_due(k, NULL, NULL);
    keys_walk w = {.k = k, .type = -1};
    if (!(a[1].len == 1 && a[1].p[0] == '*')) w.pat = &a[1];
    uint64_t cur = 0;
    do
        cur = dict_scan(&k->db.d, cur, SIZE_MAX, keys_visit, &w);
    while (cur);
    buf_int(out, '*', w.n);
    buf_put(out, w.tmp.p, w.tmp.len);
    if (w.tmp.oom) out->oom = true;
    buf_free(&w.tmp);
}

static const char *const type_names[] = {"string", "list", "set", "hash",
                                         "zset"};

static void cmd_type(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    (void)argc;
    dict_entry *e = kv_lookup(k, &a[1]);
    buf_str(out, "+");
    buf_str(out, e ? type_names[store_obj(e)->type] : "none");
    buf_str(out, "\r\n");
}

/* The cursor as Redis reads it: strtoul over the argument up to its
 * first NUL (a C string), refused if it starts with a space, has more
 * after the digits, or is past 64 bits. So an empty cursor is 0, and a
 * sign is taken: -1 is 2^64 - 1. */
bool kv_scan_cursor(const resp_arg *arg, unsigned long long *cur) {
    const char *p = arg->p, *z = arg->len ? memchr(p, 0, arg->len) : NULL;
    size_t n = z ? (size_t)(z - p) : arg->len, i = 0;
    if (n == 0) {
        *cur = 0;
        return true;
    }
    if (p[0] == ' ' || (p[0] >= '\t' && p[0] <= '\r')) return false;
    bool neg = p[0] == '-';
    if (p[0] == '-' || p[0] == '+') i++;
    if (i == n) return false; /* a sign alone: no digits */
    unsigned long long v = 0;
    for (; i < n; i++) {
        unsigned d = (unsigned char)p[i] - '0';
        if (d > 9 || v > (ULLONG_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *cur = neg ? 0 - v : v;
    return true;
}

/* SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]. The cursor is dict's
 * (reverse-binary): every key there for the whole walk comes back at
 * least once, whatever the table does between calls. */
static void cmd_scan(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)cl;
    unsigned long long cur;
    if (!kv_scan_cursor(&a[1], &cur)) goto bad_cursor;
    keys_walk w = {.k = k, .type = -1};
    long long count = 10;
    for (size_t j = 2; j < argc; j += 2) {
        if (j + 1 >= argc) {
            reply_syntax(out);
            return;
        }
        if (resp_is(&a[j], "MATCH")) {
            /* "*" is every key: no pattern (a MATCH before it too) */
            w.pat =
                a[j + 1].len == 1 && a[j + 1].p[0] == '*' ? NULL : &a[j + 1];
        } else if (resp_is(&a[j], "COUNT")) {
            if (!arg_i64(&a[j + 1], &count, out)) return;
            if (count < 1) {
                reply_syntax(out);
                return;
            }
        } else if (resp_is(&a[j], "TYPE")) {
            w.type = 99; /* a type name Redis does not know matches none */
            for (int t = 0; t < 5; t++)
                if (resp_is(&a[j + 1], type_names[t])) w.type = t;
        } else {
            reply_syntax(out);
            return;
        }
    }
    kv_expire_due(k, NULL, NULL);
    cur = dict_scan(&k->db.d, cur, (size_t)count, keys_visit, &w);
    if ((k->plant & KV_PLANT_SCAN_MATCH_END) && w.pat && !w.n) cur = 0;
    buf_str(out, "*2\r\n");
    char c[24];
    int n = snprintf(c, sizeof c, "%llu", cur);
    buf_bulk(out, c, (size_t)n);
    buf_int(out, '*', w.n);
    buf_put(out, w.tmp.p, w.tmp.len);
    if (w.tmp.oom) out->oom = true;
    buf_free(&w.tmp);
    return;
bad_cursor:
    buf_str(out, "-ERR invalid cursor\r\n");
}

/* ---------------------------------------------------------- the table */

static const kv_cmd commands[] = {
    {"get", 2, 0, cmd_get},
    {"set", -3, CMD_WRITE, cmd_set},
    {"setex", 4, CMD_WRITE, cmd_setex},
    {"psetex", 4, CMD_WRITE, cmd_setex},
    {"getdel", 2, CMD_WRITE, cmd_getdel},
    {"getex", -2, CMD_WRITE, cmd_getex},
    {"incr", 2, CMD_WRITE, cmd_incr},
    {"decr", 2, CMD_WRITE, cmd_incr},
    {"incrby", 3, CMD_WRITE, cmd_incrby},
    {"decrby", 3, CMD_WRITE, cmd_incrby},
    {"incrbyfloat", 3, CMD_WRITE, cmd_incrbyfloat},
    {"del", -2, CMD_WRITE, cmd_del},
    {"unlink", -2, CMD_WRITE, cmd_del},
    {"exists", -2, 0, cmd_exists},
    {"touch", -2, 0, cmd_exists},
    {"rename", 3, CMD_WRITE, cmd_rename},
    {"renamenx", 3, CMD_WRITE, cmd_rename},
    {"dbsize", 1, 0, cmd_dbsize},
    {"flushall", -1, CMD_WRITE, cmd_flushall},
    {"flushdb", -1, CMD_WRITE, cmd_flushall},
    {"expire", -3, CMD_WRITE, cmd_expire},
    {"pexpire", -3, CMD_WRITE, cmd_expire},
    {"expireat", -3, CMD_WRITE, cmd_expire},
    {"pexpireat", -3, CMD_WRITE, cmd_expire},
    {"ttl", 2, 0, cmd_ttl},
    {"pttl", 2, 0, cmd_ttl},
    {"expiretime", 2, 0, cmd_ttl},
    {"pexpiretime", 2, 0, cmd_ttl},
    {"persist", 2, CMD_WRITE, cmd_persist},
    {"keys", 2, 0, cmd_keys},
    {"scan", -2, 0, cmd_scan},
    {"type", 2, 0, cmd_type},
    {"ping", -1, CMD_PUBSUB, cmd_ping},
    {"echo", 2, 0, cmd_echo},
    {"info", -1, 0, cmd_info},
    {"quit", -1, CMD_PUBSUB, cmd_quit},
    {"command", -1, 0, cmd_command},
    {"config", -2, CMD_CONTAINER, NULL},
    /* The server's own (conn.c, link.c): kv_exec returns KV_SERVER. A
     * connection that becomes a replica link stops being a client, so
     * neither a transaction nor a subscribed client may turn into one. */
    {"replsync", -1, CMD_SERVER | CMD_NOMULTI, NULL},
};

/* The names, hashed case-insensitively into open slots. A name of up to
 * 8 bytes (nearly all of them, and every one a benchmark sends) is read
 * into one 64-bit word with its letters folded to lower case, hashed by a
 * multiply, and compared as a word: some twenty instructions per command,
 * where comparing letter by letter took three times that. Longer names go
 * by their length, first and last letters, and a letter-by-letter
 * compare. 256 slots each for some 90 names keeps the probes short.
 *
 * Folding with x | 0x20 is exact for names made of letters: a byte folds
 * to a lower-case letter only when it is that letter in either case. */
#define SLOTS 256
static struct slot {
    const kv_cmd *c;
    uint64_t key; /* short names: the folded word; long: a hash */
    size_t len;
} shorts[SLOTS], longs[SLOTS];
static bool table_ready;

/* A name of n (1 to 8) bytes as a word, byte i at bits 8i, each with 0x20
 * set (ASCII letters folded to lower case): from two loads that overlap
 * (or three bytes), not a loop over the bytes, as every command's name
 * comes here. */
static inline uint64_t fold8(const char *p, size_t n) {
    uint64_t v;
    if (n >= 4) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + n - 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        v = lo | (uint64_t)hi << (8 * (n - 4));
    } else {
        v = (uint64_t)(unsigned char)p[0] |
            (uint64_t)(unsigned char)p[n / 2] << (8 * (n / 2)) |
            (uint64_t)(unsigned char)p[n - 1] << (8 * (n - 1));
    }
    return v | (0x2020202020202020ull >> (64 - 8 * n));
}

static inline uint32_t short_slot(uint64_t key) {
    return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 56);
}

static uint64_t long_hash(const char *p, size_t n) {
    uint64_t a = (unsigned char)(p[0] | 0x20);
    uint64_t z = (unsigned char)(p[n - 1] | 0x20);
    return n * 2654435761u ^ a * 40503u ^ z * 1103515245u;
}

static void table_add(const kv_cmd *c) {
    size_t len = strlen(c->name);
    struct slot *t = len <= 8 ? shorts : longs;
    uint64_t key = len <= 8 ? fold8(c->name, len) : long_hash(c->name, len);
    uint32_t i =
        len <= 8 ? short_slot(key) : (uint32_t)(key >> 8) & (SLOTS - 1);
    while (t[i].c)
        i = (i + 1) & (SLOTS - 1);
    t[i] = (struct slot){c, key, len};
}

void kv_commands_add(const kv_cmd *cmds, size_t n) {
    for (size_t i = 0; i < n; i++)
        table_add(&cmds[i]);
}

/* Once, on the first command (cold: kept out of kv_command's way). */
__attribute__((noinline, cold)) static void table_init(void) {
    table_ready = true;
    kv_commands_add(commands, sizeof commands / sizeof commands[0]);
    kv_types_init();
    kv_client_commands_init();
}

static const kv_cmd *long_command(const resp_arg *name) {
    if (name->len > 32) return NULL;
    uint64_t h = long_hash(name->p, name->len);
    for (uint32_t i = (uint32_t)(h >> 8) & (SLOTS - 1); longs[i].c;
         i = (i + 1) & (SLOTS - 1)) {
        if (longs[i].key != h || longs[i].len != name->len) continue;
        const char *n = longs[i].c->name;
        size_t j = 0;
        while (j < name->len && (name->p[j] | 0x20) == n[j])
            j++;
        if (j == name->len) return longs[i].c;
    }
    return NULL;
}

static inline __attribute__((always_inline)) const kv_cmd *
find_command(const resp_arg *name) {
    if (!table_ready) table_init();
    size_t n = name->len;
    if (n - 1 >= 8) return n ? long_command(name) : NULL;
    uint64_t key = fold8(name->p, n);
    for (uint32_t i = short_slot(key); shorts[i].c; i = (i + 1) & (SLOTS - 1))
        if (shorts[i].key == key && shorts[i].len == n) return shorts[i].c;
    return NULL;
}

const kv_cmd *kv_command(const resp_arg *name) {
    return find_command(name);
}

static void wrong_args(buf *out, const kv_cmd *c) {
    buf_str(out, "-ERR wrong number of arguments for '");
    buf_str(out, c->name);
    buf_str(out, "' command\r\n");
}

/* Redis' words: the name, then up to 128 bytes of the arguments, each in
 * quotes; a CR or LF would end the line, so they become spaces. */
static void unknown(buf *out, const resp_arg *a, size_t argc) {
    buf tmp = {0};
    buf_str(&tmp, "-ERR unknown command '");
    /* Each word ends at its first NUL, as Redis' %s prints it. */
    buf_put(&tmp, a[0].p, c_len(a[0].p, a[0].len > 128 ? 128 : a[0].len));
    buf_str(&tmp, "', with args beginning with: ");
    size_t args = 0;
    for (size_t i = 1; i < argc && args < 128; i++) {
        size_t n = c_len(a[i].p, a[i].len > 128 - args ? 128 - args : a[i].len);
        buf_str(&tmp, "'");
        buf_put(&tmp, a[i].p, n);
        buf_str(&tmp, "' ");
        args += n + 3;
    }
    for (size_t i = 1; i < tmp.len; i++)
        if (tmp.p[i] == '\r' || tmp.p[i] == '\n') tmp.p[i] = ' ';
    buf_put(out, tmp.p, tmp.len);
    buf_str(out, "\r\n");
    if (tmp.oom) out->oom = true;
    buf_free(&tmp);
}

/* Redis' words for a container's subcommand refused: the name up to 128
 * bytes or its first NUL (Redis formats it as a C string), the command
 * in upper case; a CR or LF becomes a space. */
void kv_reply_bad_sub(buf *out, const char *lead, const resp_arg *a) {
    buf_str(out, "-ERR ");
    buf_str(out, lead);
    buf_str(out, " '");
    for (size_t i = 0; i < a[1].len && i < 128 && a[1].p[i]; i++) {
        char ch = a[1].p[i];
        buf_put(out, ch == '\r' || ch == '\n' ? " " : &ch, 1);
    }
    buf_str(out, "'. Try ");
    for (size_t i = 0; i < a[0].len; i++) {
        char ch = a[0].p[i];
        if (ch >= 'a' && ch <= 'z') ch = (char)(ch - 'a' + 'A');
        buf_put(out, &ch, 1);
    }
    buf_str(out, " HELP.\r\n");
}

/* The command a request names: a container's subcommand when it has
 * one (*bad when that is unknown); the container itself without one
 * (its arity then refuses it). */
static const kv_cmd *resolve(const kv_cmd *c, const resp_arg *a, size_t argc,
                             bool *bad) {
    *bad = false;
    if (!c || !(c->flags & CMD_CONTAINER) || argc < 2) return c;
    const kv_cmd *s = strcmp(c->name, "config") == 0
                          ? config_subcommand(&a[1])
                          : kv_client_subcommand(c, &a[1]);
    *bad = !s;
    return s ? s : c;
}

void kv_run(kv *k, kv_client *cl, const resp_arg *a, size_t argc, buf *out) {
    /* cmd_now is left as EXEC found it: every command of a transaction
     * sees one time, as in Redis 7.0 (call()'s fixed_time_expire), so a
     * key alive at its start is alive throughout. */
    bool bad;
    const kv_cmd *c = resolve(kv_command(&a[0]), a, argc, &bad);
    /* Queued only once kv_exec's checks passed: never a container or a
     * CMD_SERVER command. */
    c->fn(k, cl, a, argc, out);
}

/* EXEC refused by a check (its arity, a subscribed client): Redis'
 * rejectCommand answers -EXECABORT with the reason and discards the
 * transaction, whether or not the client is in MULTI (execCommandAbort).
 * out[at, len) is the refusal, "-ERR <reason>\r\n". */
static void exec_abort(kv *k, kv_client *cl, buf *out, size_t at) {
    static const char prefix[] = "-ERR ";
    size_t n = out->len - at, skip = sizeof prefix - 1;
    if (n < skip || memcmp(out->p + at, prefix, skip) != 0) skip = 1;
    buf why = {0};
    buf_put(&why, out->p + at + skip, n - skip);
    out->len = at;
    buf_str(out, "-EXECABORT Transaction discarded because of: ");
    buf_put(out, why.p, why.len);
    if (why.oom) out->oom = true;
    buf_free(&why);
    if (cl) kv_discard(k, cl);
}

/* kv_exec for a command runs_at_once did not pass: found is what the
 * name looked up to (NULL when unknown). */
static __attribute__((noinline)) int exec_checked(kv *k, kv_client *cl,
                                                  const resp_arg *a,
                                                  size_t argc, buf *out,
                                                  const kv_cmd *found) {
    bool bad_sub;
    const kv_cmd *c = resolve(found, a, argc, &bad_sub);
    size_t at = out->len; /* where a refusal starts */
    if (cl) cl->cmd = c && !bad_sub ? c->name : NULL; /* as Redis' lastcmd */
    /* Redis' order of checks, and inside MULTI a refused command spoils
     * the transaction (EXEC answers -EXECABORT). */
    if (!c) {
        unknown(out, a, argc);
    } else if (bad_sub) {
        kv_reply_bad_sub(out, "unknown subcommand", a);
    } else if (!kv_arity_ok(c, argc)) {
        wrong_args(out, c);
    } else if ((c->flags & CMD_NOMULTI) && cl && cl->multi) {
        buf_str(out, "-ERR Command not allowed inside a transaction\r\n");
    } else if ((c->flags & CMD_WRITE) && k->replica) {
        buf_str(out, KV_READONLY_ERR "\r\n");
    } else if (cl && kv_client_subscribed(cl) && !(c->flags & CMD_PUBSUB)) {
        buf_str(out, "-ERR Can't execute '");
        buf_str(out, c->name);
        buf_str(out, "': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / "
                     "QUIT / RESET are allowed in this context\r\n");
    } else if (cl && cl->multi && !(c->flags & CMD_NOQUEUE) &&
               c->fn != cmd_quit) {
        if (kv_queue(cl, a, argc)) {
            buf_str(out, "+QUEUED\r\n");
            return 0;
        }
        reply_oom(out);
    } else if (c->flags & CMD_SERVER) {
        return KV_SERVER; /* the caller's to run */
    } else {
        if (write_room(k, c, a, argc, out)) c->fn(k, cl, a, argc, out);
        return c->fn == cmd_quit ? KV_QUIT : 0;
    }
    if (c && strcmp(c->name, "exec") == 0) exec_abort(k, cl, out, at);
    /* (KV_PLANT_EXEC_ARITY, repl.h: only an unknown command spoils it) */
    bool spoils = !c || !(k->plant & KV_PLANT_EXEC_ARITY);
    if (cl && cl->multi && spoils) cl->multi_error = true;
    return 0;
}

/* A command that passes every check of exec_checked at a glance: known,
 * not a container, the server's or QUIT, with its arity, not a write on a
 * replica, from a client outside MULTI and not subscribed. That is almost
 * every command, and taking it here, in a function small enough to keep
 * its arguments in registers, saves the checked path's stack frame (12 of
 * the ~326 instructions a pipelined PING cost lull-kv, callgrind). */
static inline bool runs_at_once(const kv *k, const kv_client *cl,
                                const kv_cmd *c, size_t argc) {
    return c && !(c->flags & (CMD_CONTAINER | CMD_SERVER)) &&
           c->fn != cmd_quit && kv_arity_ok(c, argc) &&
           !(k->replica && (c->flags & CMD_WRITE)) &&
           (!cl || (!cl->multi && !kv_client_subscribed(cl)));
}

int kv_exec(kv *k, kv_client *cl, const resp_arg *a, size_t argc, buf *out) {
    k->cmd_now = 0;
    k->room_reserved = false;
    const kv_cmd *c = find_command(&a[0]);
    if (!runs_at_once(k, cl, c, argc))
        return exec_checked(k, cl, a, argc, out, c);
    if (cl) cl->cmd = c->name; /* CLIENT LIST's cmd */
    if (write_room(k, c, a, argc, out)) c->fn(k, cl, a, argc, out);
    return 0;
}

/* ---------------------------------------------------------- replication */

/* A record's command, if it is one the log holds (a write, or a logged
 * PUBLISH) with its arguments; else NULL and *err says why, naming the
 * command: its first 32 bytes, each one not printable as '?' (the reason
 * goes into a log line). Refusals are written to one buffer: the loop's
 * thread only, read before the next record is looked at. */
static const kv_cmd *record_cmd(const resp_arg *a, size_t argc,
                                const char **err) {
    if (argc == 0) {
        *err = "empty record";
        return NULL;
    }
    const kv_cmd *c = kv_command(&a[0]);
    if (!c || !(c->flags & (CMD_WRITE | CMD_LOGGED)) || !kv_arity_ok(c, argc)) {
        static char why[96];
        char name[33];
        size_t n = a[0].len < 32 ? a[0].len : 32;
        for (size_t i = 0; i < n; i++)
            name[i] = a[0].p[i] >= 0x20 && a[0].p[i] < 0x7f ? a[0].p[i] : '?';
        name[n] = 0;
        snprintf(why, sizeof why,
                 "'%s%s': not a logged write with its arguments", name,
                 a[0].len > 32 ? "..." : "");
        *err = why;
        return NULL;
    }
    return c;
}

/* Runs one record of the primary's log: a write, with its arguments, that
 * succeeds here as it did there. */
static int apply_record(kv *k, const resp_arg *a, size_t argc,
                        const char **err) {
    const kv_cmd *c = record_cmd(a, argc, err);
    if (!c) return -EPROTO;
    /* A message published before this replica's sync point: heard (or
     * not) when it was published; k->offset is its record's start (a
     * transaction's: the sync point is never inside one). */
    if (!(c->flags & CMD_WRITE) && k->offset < k->quiet_until) return 0;
    static buf scratch; /* the reply, looked at and dropped */
    scratch.len = 0;
    scratch.oom = false;
    k->cmd_now = 0;
    k->applying = true;
    c->fn(k, NULL, a, argc, &scratch);
    k->applying = false;
    if (scratch.oom) return -ENOMEM;
    if (scratch.len && scratch.p[0] == '-') {
        if (strncmp(scratch.p, "-OOM", 4) == 0) return -ENOMEM;
        /* The primary ran it on the same keyspace: refused here means the
         * two have diverged. */
        *err = "a record that fails here (the keyspaces have diverged)";
        return -EPROTO;
    }
    buf_shrink(&scratch, 1 << 16);
    return 0;
}

static bool is_record(const resp_arg *a, size_t argc, const char *name) {
    return argc == 1 && resp_is(&a[0], name);
}

long kv_parse_record(kv *k, resp_limits *lim, resp_arg **argv,
                     const char *bytes, size_t len, size_t *argc,
                     const char **err, size_t *need) {
    for (;;) {
        long n = resp_parse_need(lim, bytes, len, *argv, argc, err, need);
        if (__builtin_expect(n != RESP_GROW, 1)) return n;
        resp_arg *v = k->grow_args ? k->grow_args(k, *argc) : NULL;
        if (!v) {
            *err = "out of memory";
            return RESP_GROW;
        }
        *argv = v;
        lim->max_args = *argc;
    }
}

/* The transaction whose MULTI record ends at `from` (bytes[start, from)
 * being the MULTI): the offset just past its EXEC record; 0 when EXEC is
 * not all there yet (*need then counts from start); or -EPROTO. The scan
 * goes on from *scanned (bytes past start found whole before, by an
 * earlier call on the same transaction), and leaves it where it stopped:
 * started from the MULTI at every call, a transaction arriving a read at
 * a time cost its size squared over the read's. */
static long transaction_end(kv *k, resp_limits *lim, resp_arg **argv,
                            const char *bytes, size_t len, size_t start,
                            size_t from, size_t *scanned, const char **err,
                            size_t *need) {
    size_t pos = from;
    if (*scanned > from - start && *scanned <= len - start)
        pos = start + *scanned;
    *scanned = 0;
    for (;;) {
        if (pos == len) {
            *scanned = pos - start;
            *need = len - start + 1;
            return 0;
        }
        if (bytes[pos] != '*') {
            *err = "a record that is not a multibulk request";
            return -EPROTO;
        }
        size_t argc, rneed;
        long n = kv_parse_record(k, lim, argv, bytes + pos, len - pos, &argc,
                                 err, &rneed);
        if (n == RESP_INCOMPLETE) {
            *scanned = pos - start;
            *need = pos - start + rneed;
            return 0;
        }
        if (n < 0) return n == RESP_GROW ? -ENOMEM : -EPROTO;
        pos += (size_t)n;
        if (is_record(*argv, argc, "EXEC")) return (long)pos;
        if (is_record(*argv, argc, "MULTI")) {
            *err = "a MULTI inside a transaction";
            return -EPROTO;
        }
        /* Each record is looked at before any is applied: a transaction
         * refused part way would leave half of it in the keyspace. */
        if (!record_cmd(*argv, argc, err)) return -EPROTO;
    }
}

long kv_apply_stream(kv *k, const resp_limits *limits, resp_arg *argv,
                     const char *bytes, size_t len, const char **err,
                     size_t *need) {
    resp_limits lim = *limits; /* max_args follows argv as it grows */
    size_t off = 0;
    *need = 1;
    k->torn = false;
    while (off < len) {
        /* The log holds multibulk requests only: an inline line here is
         * not lull-kv's log. */
        if (bytes[off] != '*') {
            *err = "a record that is not a multibulk request";
            return -EPROTO;
        }
        size_t argc;
        long n = kv_parse_record(k, &lim, &argv, bytes + off, len - off, &argc,
                                 err, need);
        if (n == RESP_INCOMPLETE) break;
        if (n < 0) return n == RESP_GROW ? -ENOMEM : -EPROTO;
        size_t end = off + (size_t)n;
        if (is_record(argv, argc, "MULTI")) {
            /* A transaction: applied as a unit once its EXEC is in, so
             * the replica's clients never see half of it. */
            long t = transaction_end(k, &lim, &argv, bytes, len, off, end,
                                     &k->txn_scanned, err, need);
            if (t < 0) return t;
            if (t == 0) break;
            /* argv holds the longest of its records now: none grows. */
            for (size_t pos = end; pos < (size_t)t;) {
                size_t need2;
                long m = resp_parse_need(&lim, bytes + pos, len - pos, argv,
                                         &argc, err, &need2);
                pos += (size_t)m;
                if (pos == (size_t)t) break; /* the EXEC */
                int rc = apply_record(k, argv, argc, err);
                if (rc == -ENOMEM) *err = "out of memory";
                if (rc < 0) {
                    /* Its records before this one are in (each was a
                     * write, checked by transaction_end; this one failed
                     * running). */
                    k->torn = pos - (size_t)m > end;
                    return rc;
                }
            }
            end = (size_t)t;
        } else {
            int rc = apply_record(k, argv, argc, err);
            if (rc == -ENOMEM) *err = "out of memory";
            if (rc < 0) return rc;
        }
        *need = 1;
        k->offset += (uint64_t)(end - off);
        off = end;
    }
    return (long)off;
}

/* ----------------------------------------------------------------- INFO */

static void info_line(buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void info_line(buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    buf_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
    buf_put(b, "\r\n", 2);
}

static void info_replication(const kv *k, buf *b) {
    info_line(b, "# Replication");
    if (k->replica) {
        info_line(b, "role:slave");
        info_line(b, "master_host:%s", k->master_host);
        info_line(b, "master_port:%d", k->master_port);
        info_line(b, "master_link_status:%s", k->link_up ? "up" : "down");
        info_line(b, "slave_repl_offset:%" PRIu64, k->offset);
        info_line(b, "connected_slaves:0");
        info_line(b, "master_repl_offset:%" PRIu64, k->offset);
    } else {
        info_line(b, "role:master");
        info_line(b, "connected_slaves:%zu", k->npeers);
        size_t i = 0;
        for (const repl_peer *p = k->peers.next; p != &k->peers; p = p->next)
            info_line(
                b, "slave%zu:ip=%s,port=%d,state=%s,offset=%" PRIu64 ",lag=0",
                i++, p->ip, p->port, p->snapshot ? "wait_bgsave" : "online",
                p->offset);
        info_line(b, "master_replid:%s", k->replid);
        info_line(b, "master_repl_offset:%" PRIu64, k->log.end);
        /* Redis' backlog fields: its first byte counted from 1. */
        /* None before a first replica, as Redis (repl.h, idle). */
        info_line(b, "repl_backlog_active:%d", k->log.idle ? 0 : 1);
        info_line(b, "repl_backlog_size:%" PRIu64, k->log.backlog);
        info_line(b, "repl_backlog_first_byte_offset:%" PRIu64,
                  k->log.base + 1);
        info_line(b, "repl_backlog_histlen:%" PRIu64, k->log.end - k->log.base);
    }
}

/* Standalone, one process on epoll (KV_REDIS_VERSION: cmd_int.h). */
static void info_server(kv *k, buf *b) {
    struct utsname u;
    if (uname(&u) != 0) u = (struct utsname){.sysname = "Linux"};
    int64_t up = (kv_now(k) - k->start_ms) / 1000;
    info_line(b, "# Server");
    info_line(b, "redis_version:" KV_REDIS_VERSION);
    info_line(b, "redis_mode:standalone");
    info_line(b, "os:%s %s %s", u.sysname, u.release, u.machine);
    info_line(b, "arch_bits:%zu", sizeof(void *) * 8);
    info_line(b, "multiplexing_api:epoll");
    info_line(b, "process_id:%ld", (long)getpid());
    info_line(b, "tcp_port:%d", k->tcp_port);
    info_line(b, "uptime_in_seconds:%" PRId64, up);
    info_line(b, "uptime_in_days:%" PRId64, up / 86400);
}

/* used_memory: the bytes malloc has handed out and not had back (heap
 * and mmap'd blocks), what Redis counts as its own; used_memory_rss: the
 * process's resident pages. */
static void info_memory(buf *b) {
    struct mallinfo2 mi = mallinfo2();
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%*s %ld", &pages) != 1) pages = 0;
        fclose(f);
    }
    info_line(b, "# Memory");
    info_line(b, "used_memory:%zu", mi.uordblks + mi.hblkhd);
    info_line(b, "used_memory_rss:%ld", pages * sysconf(_SC_PAGESIZE));
}

/* db0's keys, how many of them have an expiry and their average TTL in
 * ms (as Redis shows it; nothing when the keyspace is empty). Redis'
 * avg_ttl is an estimate from its sampling; this one is exact, the mean
 * of the expiry heap's times less now (0 with none, or all due). */
static void info_keyspace(kv *k, buf *b) {
    info_line(b, "# Keyspace");
    if (!store_count(&k->db)) return;
    int64_t avg = 0;
    if (k->db.nheap) avg = store_mean_expire(&k->db) - kv_now(k);
    info_line(b, "db0:keys=%zu,expires=%zu,avg_ttl=%" PRId64,
              store_count(&k->db), k->db.nheap, avg > 0 ? avg : 0);
}

/* Whether INFO's sections (n of them) ask for the one named. */
static bool info_wants(const resp_arg *sections, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (resp_is(&sections[i], name)) return true;
    return false;
}

void kv_info(kv *k, const resp_arg *sections, size_t n, buf *out) {
    bool all = n == 0 || info_wants(sections, n, "all") ||
               info_wants(sections, n, "default") ||
               info_wants(sections, n, "everything");
    buf b = {0};
    bool any = false;
    if (all || info_wants(sections, n, "server")) {
        info_server(k, &b);
        any = true;
    }
    if (all || info_wants(sections, n, "clients")) {
        if (any) info_line(&b, "%s", "");
        info_line(&b, "# Clients");
        info_line(&b, "connected_clients:%zu", k->clients);
        any = true;
    }
    if (all || info_wants(sections, n, "memory")) {
        if (any) info_line(&b, "%s", "");
        info_memory(&b);
        any = true;
    }
    if (all || info_wants(sections, n, "stats")) {
        if (any) info_line(&b, "%s", "");
        info_line(&b, "# Stats");
        if (k->stats) k->stats(k, &b);
        any = true;
    }
    if (all || info_wants(sections, n, "replication")) {
        if (any) info_line(&b, "%s", "");
        info_replication(k, &b);
        any = true;
    }
    if (all || info_wants(sections, n, "keyspace")) {
        if (any) info_line(&b, "%s", "");
        kv_expire_due(k, NULL, NULL);
        info_keyspace(k, &b);
    }
    if (b.oom) out->oom = true;
    buf_bulk(out, b.p ? b.p : "", b.len);
    buf_free(&b);
}
