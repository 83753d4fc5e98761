/* cmd_client.c: the commands about a client's own state: MULTI, EXEC and
 * DISCARD (a transaction: commands queued, then run at once on the loop,
 * nothing else running between them), pub/sub (SUBSCRIBE, UNSUBSCRIBE,
 * PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH, PUBSUB), CLIENT, and SELECT (one
 * database).
 *
 * A transaction's writes reach the log between a MULTI and an EXEC record
 * (only when it wrote something), and a replica applies the records
 * between them as one unit (cmd.c), as Redis propagates a transaction.
 *
 * Pub/sub is fan-out to readers of any speed: PUBLISH appends the message
 * to each subscriber's output and asks the owner to send it (kv.wake);
 * the owner holds a subscriber to the pubsub output limit, so one that
 * does not read is closed rather than buffered for without bound.
 * A primary logs each PUBLISH, as Redis propagates it, so a replica's
 * subscribers hear it when the replica applies it (cmd.c: not one from
 * before its sync point); a replica logs none, so a PUBLISH run on it
 * stays there. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_int.h"

struct kv_queued {
    kv_queued *next;
    size_t argc;
    resp_arg argv[]; /* then the arguments' bytes */
};

/* A client's subscription to one channel or pattern: the data of its
 * entry in the client's set (cl->subs[pattern]), whose key is the name. */
struct kv_sub {
    kv_sub *cnext, *cprev; /* the channel's subscribers */
    kv_sub *mnext, *mprev; /* the client's of the same kind, oldest first */
    kv_client *cl;
    dict_entry *chan; /* in kv.channels or kv.patterns */
    dict_entry *self; /* in cl->subs[pattern] */
    bool pattern;
};

/* A client's WATCH of one key: on the key's watchers (its entry in
 * kv.watched, whose data is the first) and on the client's watches. */
struct kv_watch {
    kv_watch *knext, *kprev;
    kv_watch *cnext;
    kv_client *cl;
    dict_entry *key;
    /* The key was there and not expired at WATCH: its expiry since fails
     * EXEC; an expired key's DEL then changes nothing (as Redis 7). */
    bool was_live;
};

static kv_chan *chan_of(dict_entry *e) {
    return (kv_chan *)dict_data(e);
}

void kv_client_init(kv_client *cl, void *owner, buf *out) {
    memset(cl, 0, sizeof *cl);
    cl->owner = owner;
    cl->out = out;
    cl->queue_tail = &cl->queue;
    dict_init(&cl->subs[0], sizeof(kv_sub));
    dict_init(&cl->subs[1], sizeof(kv_sub));
}

static void queue_free(kv_client *cl) {
    kv_queued *q = cl->queue;
    while (q) {
        kv_queued *next = q->next;
        free(q);
        q = next;
    }
    cl->queue = NULL;
    cl->queue_tail = &cl->queue;
    cl->queued = 0;
    cl->queue_bytes = 0;
    cl->multi = false;
    cl->multi_error = false;
}

/* Ends one subscription: out of its channel's subscribers (the channel
 * goes with its last one), the client's order and the client's set. */
static void unsubscribe(kv *k, kv_client *cl, kv_sub *s) {
    int kind = s->pattern;
    k->pubsub_steps++;
    chan_of(s->chan)->subs--;
    if (s->cprev)
        s->cprev->cnext = s->cnext;
    else
        chan_of(s->chan)->head = s->cnext;
    if (s->cnext) s->cnext->cprev = s->cprev;
    if (!chan_of(s->chan)->head)
        dict_delete(kind ? &k->patterns : &k->channels, s->chan);
    if (s->mprev)
        s->mprev->mnext = s->mnext;
    else
        cl->first[kind] = s->mnext;
    if (s->mnext)
        s->mnext->mprev = s->mprev;
    else
        cl->last[kind] = s->mprev;
    dict_delete(&cl->subs[kind], s->self); /* frees s */
    if (!kv_client_subscribed(cl) && k->class_changed) k->class_changed(cl);
}

void kv_client_reset(kv *k, kv_client *cl) {
    queue_free(cl);
    kv_unwatch(k, cl);
    free(cl->name);
    cl->name = NULL;
    for (int kind = 0; kind < 2; kind++) {
        while (cl->first[kind])
            unsubscribe(k, cl, cl->first[kind]);
        dict_free(&cl->subs[kind]); /* empty; its table goes too */
    }
}

/* --------------------------------------------------------- transactions */

void kv_discard(kv *k, kv_client *cl) {
    queue_free(cl);
    kv_unwatch(k, cl);
}

/* ---------------------------------------------------------------- WATCH */

static kv_watch **first_watch(dict_entry *key) {
    return (kv_watch **)dict_data(key);
}

/* e, a key of db, is not expired: what a read finds (kv_lookup). */
static bool entry_live(kv *k, const store *db, dict_entry *e) {
    return !store_obj(e)->heap ||
           !store_expired(store_expire(db, e), kv_now(k));
}

/* The key is there and not expired. */
static bool key_live(kv *k, const char *p, size_t len) {
    dict_entry *e = store_find(&k->db, p, len);
    return e && entry_live(k, &k->db, e);
}

void kv_unwatch(kv *k, kv_client *cl) {
    while (cl->watches) {
        kv_watch *w = cl->watches;
        cl->watches = w->cnext;
        if (w->kprev)
            w->kprev->knext = w->knext;
        else
            *first_watch(w->key) = w->knext;
        if (w->knext) w->knext->kprev = w->kprev;
        if (!*first_watch(w->key)) dict_delete(&k->watched, w->key);
        free(w);
    }
    cl->watch_dirty = false;
    cl->watch_bytes = 0;
}

/* What one watch of a key of `len` bytes counts in its client's memory
 * (kv_client.watch_bytes): its kv_watch and the key's entry. */
static size_t watch_size(size_t len) {
    return sizeof(kv_watch) + sizeof(dict_entry) + sizeof(kv_watch *) + len;
}

/* False when out of memory. */
static bool watch(kv *k, kv_client *cl, const resp_arg *key) {
    dict_entry *e = dict_find(&k->watched, key->p, key->len);
    /* Watched already: then on both the key's watchers and the client's
     * watches. Walked side by side, the shorter ends the search: a key
     * thousands watch costs a client watching few nothing, nor a client
     * watching thousands of keys a key few watch. */
    kv_watch *kw = e ? *first_watch(e) : NULL, *cw = cl->watches;
    for (; kw && cw; kw = kw->knext, cw = cw->cnext) {
        k->watch_steps++;
        if (kw->cl == cl || cw->key == e) return true;
    }
    kv_watch *w = malloc(sizeof *w);
    if (!w) return false;
    if (!e) {
        e = dict_add(&k->watched, key->p, key->len);
        if (!e) {
            free(w);
            return false;
        }
        *first_watch(e) = NULL;
    }
    *w = (kv_watch){.knext = *first_watch(e),
                    .cnext = cl->watches,
                    .cl = cl,
                    .key = e,
                    .was_live = key_live(k, key->p, key->len)};
    if (w->knext) w->knext->kprev = w;
    *first_watch(e) = w;
    cl->watches = w;
    cl->watch_bytes += watch_size(key->len);
    return true;
}

/* The key was written: each watcher's next EXEC fails. A DEL of a key
 * that was already expired at WATCH changes nothing it saw. */
static void touch(kv *k, const char *p, size_t len, bool del) {
    dict_entry *e = dict_find(&k->watched, p, len);
    for (kv_watch *w = e ? *first_watch(e) : NULL; w; w = w->knext)
        if (!del || w->was_live) w->cl->watch_dirty = true;
}

void kv_watch_touch_key(kv *k, const resp_arg *key) {
    if (k->watched.count && !k->loading) touch(k, key->p, key->len, false);
}

void kv_watch_touch_record(kv *k, const resp_arg *a, size_t argc) {
    if (argc < 2 || k->loading || resp_is(&a[0], "PUBLISH")) return;
    /* Where a record's keys are: one at a[1] but for these. */
    size_t last = 1, step = 1;
    bool del = resp_is(&a[0], "DEL") || resp_is(&a[0], "UNLINK");
    if (del) {
        last = argc - 1;
    } else if (resp_is(&a[0], "MSET") || resp_is(&a[0], "MSETNX")) {
        last = argc - 1;
        step = 2;
    } else if (argc > 2 &&
               (resp_is(&a[0], "RENAME") || resp_is(&a[0], "RENAMENX") ||
                resp_is(&a[0], "SMOVE") || resp_is(&a[0], "LMOVE") ||
                resp_is(&a[0], "RPOPLPUSH"))) {
        last = 2;
    }
    for (size_t i = 1; i <= last; i += step)
        touch(k, a[i].p, a[i].len, del);
}

typedef struct touch_walk {
    kv *k;
    const store *emptied, *with; /* with: NULL for a flush */
} touch_walk;

/* One watched key as Redis 7's touchAllWatchedKeysInDb (multi.c) sees
 * it: in neither keyspace (looked up as is, expired or not, as Redis'
 * dictFind), nothing changed and no watch fails. Else a watch taken while
 * the key was there and live fails. One taken while it was absent or
 * expired (was_live false: EXEC does not test its expiry) fails if the
 * key is in the new keyspace, expired or not (a replica's swap runs while
 * Redis still loads, when keyIsExpired says no key is), or live in the
 * emptied one (it was written since, which failed the watch already): an
 * expired key deleted is no change (Redis' wk->expired case). */
static void touch_entry(const dict *d, dict_entry *e, void *arg) {
    touch_walk *t = arg;
    const char *p = dict_key(d, e);
    dict_entry *before = store_find(t->emptied, p, e->klen);
    dict_entry *after = t->with ? store_find(t->with, p, e->klen) : NULL;
    if (!before && !after) return;
    bool seen = after || entry_live(t->k, t->emptied, before);
    for (kv_watch *w = *first_watch(e); w; w = w->knext)
        if (w->was_live || seen) w->cl->watch_dirty = true;
}

static void touch_replaced(kv *k, const store *emptied, const store *with) {
    touch_walk t = {k, emptied, with};
    uint64_t cursor = 0;
    do
        cursor = dict_scan(&k->watched, cursor, 64, touch_entry, &t);
    while (cursor);
}

/* A flush deletes every key there: as the DEL of each (touch). Not one
 * in a snapshot's records (kv.loading): its keyspace is not the one the
 * clients see. */
void kv_watch_touch_present(kv *k) {
    if (!k->loading) touch_replaced(k, &k->db, NULL);
}

void kv_watch_touch_all(kv *k, const store *emptied, const store *with) {
    /* Called between commands: the time now, not the last command's. */
    k->cmd_now = 0;
    touch_replaced(k, emptied, with);
    k->cmd_now = 0;
}

/* WATCH key [key ...]: EXEC fails (a null reply) if any is written
 * before it. Not inside MULTI, where it is refused without spoiling the
 * transaction (redis-server 7). */
static void cmd_watch(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                      buf *out) {
    if (!cl) {
        buf_str(out, "-ERR WATCH needs a client\r\n");
        return;
    }
    if (cl->multi) {
        buf_str(out, "-ERR WATCH inside MULTI is not allowed\r\n");
        return;
    }
    for (size_t i = 1; i < argc; i++) {
        if (!watch(k, cl, &a[i])) {
            reply_oom(out);
            return;
        }
    }
    reply_ok(out);
}

static void cmd_unwatch(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                        buf *out) {
    (void)a;
    (void)argc;
    if (cl) kv_unwatch(k, cl);
    reply_ok(out);
}

/* EXEC's test: a watched key was written, or was there and expired. */
static bool watch_failed(kv *k, const kv_client *cl) {
    if (cl->watch_dirty) return true;
    for (const kv_watch *w = cl->watches; w; w = w->cnext)
        if (w->was_live &&
            !key_live(k, dict_key(&k->watched, w->key), w->key->klen))
            return true;
    return false;
}

/* Queues a copy of the command (one allocation: the argument table, then
 * the bytes). False when out of memory. */
bool kv_queue(kv_client *cl, const resp_arg *a, size_t argc) {
    size_t bytes = 0;
    for (size_t i = 0; i < argc; i++)
        bytes += a[i].len;
    size_t size = sizeof(kv_queued) + argc * sizeof(resp_arg) + bytes;
    kv_queued *q = malloc(size);
    if (!q) return false;
    cl->queue_bytes += size;
    char *p = (char *)&q->argv[argc];
    for (size_t i = 0; i < argc; i++) {
        memcpy(p, a[i].p, a[i].len);
        q->argv[i] = (resp_arg){p, a[i].len};
        p += a[i].len;
    }
    q->argc = argc;
    q->next = NULL;
    *cl->queue_tail = q;
    cl->queue_tail = &q->next;
    cl->queued++;
    return true;
}

static void cmd_multi(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                      buf *out) {
    (void)k;
    (void)a;
    (void)argc;
    if (!cl) {
        buf_str(out, "-ERR MULTI needs a client\r\n");
        return;
    }
    if (cl->multi) {
        buf_str(out, "-ERR MULTI calls can not be nested\r\n");
        return;
    }
    cl->multi = true;
    reply_ok(out);
}

static void cmd_discard(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                        buf *out) {
    (void)a;
    (void)argc;
    if (!cl || !cl->multi) {
        buf_str(out, "-ERR DISCARD without MULTI\r\n");
        return;
    }
    kv_discard(k, cl);
    reply_ok(out);
}

static void cmd_exec(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    (void)a;
    (void)argc;
    if (!cl || !cl->multi) {
        buf_str(out, "-ERR EXEC without MULTI\r\n");
        return;
    }
    if (cl->multi_error) {
        kv_discard(k, cl);
        buf_str(out, "-EXECABORT Transaction discarded because of previous "
                     "errors.\r\n");
        return;
    }
    if (watch_failed(k, cl)) {
        kv_discard(k, cl);
        buf_str(out, "*-1\r\n");
        return;
    }
    /* Room for every record the transaction may log, or none of it runs
     * (kv_log_room). */
    size_t len = 0, nrec = 2; /* and its MULTI and EXEC */
    for (kv_queued *w = cl->queue; w; w = w->next) {
        const kv_cmd *c = kv_command(&w->argv[0]);
        if (!c || !(c->flags & (CMD_WRITE | CMD_LOGGED))) continue;
        size_t r;
        len += kv_log_need(w->argv, w->argc, &r);
        nrec += r;
    }
    if (len && !kv_log_room(k, len + 32, nrec, out)) {
        kv_discard(k, cl);
        return;
    }
    bool reserved = len && !k->replica && !k->log.idle;
    if (reserved) kv_exec_room_set(k, len + 32, nrec);
    kv_unwatch(k, cl); /* its own writes below fail no EXEC of its */
    kv_queued *q = cl->queue;
    cl->queue = NULL;
    size_t n = cl->queued;
    queue_free(cl); /* out of MULTI: the commands run as themselves */
    buf_int(out, '*', (long long)n);
    k->in_exec = true;
    k->multi_logged = false;
    while (q) {
        kv_queued *next = q->next;
        /* A write's share of the room covers the DEL of a key of its
         * expired; a read's lookup asks for room beside the writes'. */
        const kv_cmd *c = kv_command(&q->argv[0]);
        k->room_reserved =
            reserved && c && (c->flags & (CMD_WRITE | CMD_LOGGED));
        kv_run(k, cl, q->argv, q->argc, out);
        free(q);
        q = next;
    }
    k->in_exec = false;
    kv_exec_room_set(k, 0, 0);
    if (k->multi_logged) {
        static const resp_arg exec = {"EXEC", 4};
        kv_log(k, &exec, 1);
        k->multi_logged = false;
    }
}

/* --------------------------------------------------------------- pub/sub */

static kv_sub *find_sub(kv *k, kv_client *cl, const resp_arg *name,
                        bool pattern) {
    k->pubsub_steps++;
    dict_entry *e = dict_find(&cl->subs[pattern], name->p, name->len);
    return e ? (kv_sub *)dict_data(e) : NULL;
}

static size_t sub_count(const kv_client *cl) {
    return cl->subs[0].count + cl->subs[1].count;
}

/* *3 (kind, name or nil, the client's count). */
static void sub_reply(buf *out, const char *kind, const char *name, size_t len,
                      size_t count) {
    buf_str(out, "*3\r\n");
    buf_bulk(out, kind, strlen(kind));
    if (name)
        buf_bulk(out, name, len);
    else
        reply_nil(out);
    buf_int(out, ':', (long long)count);
}

/* A new subscription of cl to a[i]'s channel or pattern. False when out
 * of memory (nothing changed). */
static bool add_sub(kv *k, kv_client *cl, const resp_arg *name, bool pattern) {
    dict *d = pattern ? &k->patterns : &k->channels;
    dict_entry *e = dict_find(d, name->p, name->len);
    if (!e && !(e = dict_add(d, name->p, name->len))) return false;
    dict_entry *self = dict_add(&cl->subs[pattern], name->p, name->len);
    if (!self) {
        if (!chan_of(e)->head) dict_delete(d, e);
        return false;
    }
    kv_sub *s = dict_data(self);
    s->cl = cl;
    s->chan = e;
    s->self = self;
    s->pattern = pattern;
    s->cnext = chan_of(e)->head;
    if (s->cnext) s->cnext->cprev = s;
    chan_of(e)->head = s;
    chan_of(e)->subs++;
    s->mprev = cl->last[pattern];
    if (s->mprev)
        s->mprev->mnext = s;
    else
        cl->first[pattern] = s;
    cl->last[pattern] = s;
    if (cl->subs[0].count + cl->subs[1].count == 1 && k->class_changed)
        k->class_changed(cl);
    return true;
}

static void subscribe(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                      bool pattern, buf *out) {
    if (!cl) {
        buf_str(out, "-ERR SUBSCRIBE needs a client\r\n");
        return;
    }
    for (size_t i = 1; i < argc; i++) {
        if (!find_sub(k, cl, &a[i], pattern) &&
            !add_sub(k, cl, &a[i], pattern)) {
            reply_oom(out);
            return;
        }
        sub_reply(out, pattern ? "psubscribe" : "subscribe", a[i].p, a[i].len,
                  sub_count(cl));
    }
}

static void unsubscribe_cmd(kv *k, kv_client *cl, const resp_arg *a,
                            size_t argc, bool pattern, buf *out) {
    const char *kind = pattern ? "punsubscribe" : "unsubscribe";
    if (!cl) {
        sub_reply(out, kind, NULL, 0, 0);
        return;
    }
    if (argc > 1) {
        for (size_t i = 1; i < argc; i++) {
            kv_sub *s = find_sub(k, cl, &a[i], pattern);
            if (s) unsubscribe(k, cl, s);
            sub_reply(out, kind, a[i].p, a[i].len, sub_count(cl));
        }
        return;
    }
    /* None named: every one, each answered with its name and the count
     * left, oldest first. (Redis 7.0 answers patterns in that order, and
     * channels in the order of its hash table, which is seeded at random
     * per process: any order is one it could give.) The reply is written
     * before the subscription goes, while its name is still there. */
    if (!cl->first[pattern]) {
        sub_reply(out, kind, NULL, 0, sub_count(cl));
        return;
    }
    while (cl->first[pattern]) {
        kv_sub *s = cl->first[pattern];
        sub_reply(out, kind, dict_key(&cl->subs[pattern], s->self),
                  s->self->klen, sub_count(cl) - 1);
        unsubscribe(k, cl, s);
    }
}

static void cmd_subscribe(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                          buf *out) {
    subscribe(k, cl, a, argc, false, out);
}

static void cmd_psubscribe(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                           buf *out) {
    subscribe(k, cl, a, argc, true, out);
}

static void cmd_unsubscribe(kv *k, kv_client *cl, const resp_arg *a,
                            size_t argc, buf *out) {
    unsubscribe_cmd(k, cl, a, argc, false, out);
}

static void cmd_punsubscribe(kv *k, kv_client *cl, const resp_arg *a,
                             size_t argc, buf *out) {
    unsubscribe_cmd(k, cl, a, argc, true, out);
}

typedef struct publish_walk {
    kv *k;
    const resp_arg *chan, *msg;
    long long n;
} publish_walk;

static void deliver(kv *k, kv_client *cl) {
    if (k->wake) k->wake(cl);
}

static void publish_pattern(const dict *d, dict_entry *e, void *arg) {
    publish_walk *w = arg;
    const char *pat = dict_key(d, e);
    if (!kv_glob(pat, e->klen, w->chan->p, w->chan->len, false)) return;
    for (kv_sub *s = chan_of(e)->head; s; s = s->cnext) {
        buf *o = s->cl->out;
        buf_str(o, "*4\r\n$8\r\npmessage\r\n");
        buf_bulk(o, pat, e->klen);
        buf_bulk(o, w->chan->p, w->chan->len);
        buf_bulk(o, w->msg->p, w->msg->len);
        deliver(w->k, s->cl);
        w->n++;
    }
}

static void cmd_publish(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                        buf *out) {
    (void)cl;
    (void)argc;
    publish_walk w = {k, &a[1], &a[2], 0};
    dict_entry *e = dict_find(&k->channels, a[1].p, a[1].len);
    for (kv_sub *s = e ? chan_of(e)->head : NULL; s; s = s->cnext) {
        buf *o = s->cl->out;
        buf_str(o, "*3\r\n$7\r\nmessage\r\n");
        buf_bulk(o, a[1].p, a[1].len);
        buf_bulk(o, a[2].p, a[2].len);
        deliver(k, s->cl);
        w.n++;
    }
    if (k->patterns.count && !((k->plant & KV_PLANT_PUBLISH_PATTERN) && w.n)) {
        uint64_t cur = 0;
        do
            cur = dict_scan(&k->patterns, cur, SIZE_MAX, publish_pattern, &w);
        while (cur);
    }
    /* For the replicas' subscribers (a replica logs none). (The planted
     * KV_PLANT_PUBLISH_UNLOGGED, repl.h: not logged.) */
    if (!(k->plant & KV_PLANT_PUBLISH_UNLOGGED)) kv_log(k, a, 3);
    buf_int(out, ':', w.n);
}

/* A HELP reply as Redis writes one: a status line per line of text. */
static void reply_help(buf *out, const char *const *lines, size_t n) {
    buf_int(out, '*', (long long)n);
    for (size_t i = 0; i < n; i++) {
        buf_str(out, "+");
        buf_str(out, lines[i]);
        buf_str(out, "\r\n");
    }
}

/* ---------------------------------------------------------------- PUBSUB */

typedef struct channels_walk {
    const resp_arg *pat; /* NULL: every channel */
    buf tmp;             /* the names found, as bulk strings */
    long long n;
} channels_walk;

static void channels_visit(const dict *d, dict_entry *e, void *arg) {
    channels_walk *w = arg;
    const char *name = dict_key(d, e);
    if (w->pat && !kv_glob(w->pat->p, w->pat->len, name, e->klen, false))
        return;
    buf_bulk(&w->tmp, name, e->klen);
    w->n++;
}

/* PUBSUB CHANNELS [pattern]: the channels with a subscriber (a channel
 * goes with its last one), in the order of the table, as Redis' (whose
 * order is its own table's). */
static void cmd_pubsub_channels(kv *k, kv_client *cl, const resp_arg *a,
                                size_t argc, buf *out) {
    (void)cl;
    if (argc > 3) {
        kv_reply_bad_sub(out,
                         "unknown subcommand or wrong number of "
                         "arguments for",
                         a);
        return;
    }
    channels_walk w = {0};
    if (argc == 3) w.pat = &a[2];
    uint64_t cur = 0;
    do
        cur = dict_scan(&k->channels, cur, SIZE_MAX, channels_visit, &w);
    while (cur);
    buf_int(out, '*', w.n);
    buf_put(out, w.tmp.p, w.tmp.len);
    if (w.tmp.oom) out->oom = true;
    buf_free(&w.tmp);
}

/* PUBSUB NUMSUB [channel ...]: each channel and its subscribers, not
 * counting pattern subscriptions. */
static void cmd_pubsub_numsub(kv *k, kv_client *cl, const resp_arg *a,
                              size_t argc, buf *out) {
    (void)cl;
    buf_int(out, '*', 2 * (long long)(argc - 2));
    for (size_t i = 2; i < argc; i++) {
        dict_entry *e = dict_find(&k->channels, a[i].p, a[i].len);
        buf_bulk(out, a[i].p, a[i].len);
        buf_int(out, ':', e ? (long long)chan_of(e)->subs : 0);
    }
}

/* PUBSUB NUMPAT: the patterns with a subscriber (as Redis 7.0 counts:
 * a pattern two clients hold is one). */
static void cmd_pubsub_numpat(kv *k, kv_client *cl, const resp_arg *a,
                              size_t argc, buf *out) {
    (void)cl;
    (void)a;
    (void)argc;
    buf_int(out, ':', (long long)k->patterns.count);
}

static void cmd_pubsub_help(kv *k, kv_client *cl, const resp_arg *a,
                            size_t argc, buf *out) {
    (void)k;
    (void)cl;
    (void)a;
    (void)argc;
    static const char *const help[] = {
        "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CHANNELS [<pattern>]",
        "    Return the currently active channels matching a <pattern> "
        "(default: '*').",
        "NUMPAT",
        "    Return number of subscriptions to patterns.",
        "NUMSUB [<channel> ...]",
        "    Return the number of subscribers for the specified channels, "
        "excluding",
        "    pattern subscriptions(default: no channels).",
        "HELP",
        "    Prints this help.",
    };
    reply_help(out, help, sizeof help / sizeof *help);
}

/* ------------------------------------------------------------- SELECT */

/* SELECT index: lull-kv has one database, 0. Redis' words for the rest:
 * an index in int range is out of range, one past int is another error.
 * Clients and pools send SELECT 0 on connect (or from redis://host/0). */
static void cmd_select(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out) {
    (void)k;
    (void)cl;
    (void)argc;
    long long db;
    if (!arg_i64(&a[1], &db, out)) return;
    if (db < INT32_MIN || db > INT32_MAX)
        buf_str(out, "-ERR value is out of range, value must between "
                     "-2147483648 and 2147483647\r\n");
    else if (db != 0)
        buf_str(out, "-ERR DB index is out of range\r\n");
    else
        reply_ok(out);
}

/* ---------------------------------------------------------------- CLIENT */

/* Redis' check of a client name: printable ASCII, no spaces. False with
 * the error in out. */
static bool name_ok(const resp_arg *name, buf *out) {
    for (size_t i = 0; i < name->len; i++)
        if (name->p[i] < '!' || name->p[i] > '~') {
            buf_str(out, "-ERR Client names cannot contain spaces, newlines "
                         "or special characters.\r\n");
            return false;
        }
    return true;
}

/* Sets cl's name (HELLO SETNAME too) after name_ok; an empty one clears
 * it. False with the error in out. */
static bool set_name(kv_client *cl, const resp_arg *name, buf *out) {
    if (!name_ok(name, out)) return false;
    if (!cl) return true; /* no client of its own to name (tests) */
    char *n = NULL;
    if (name->len && !(n = malloc(name->len + 1))) {
        reply_oom(out);
        return false;
    }
    if (n) {
        memcpy(n, name->p, name->len);
        n[name->len] = 0;
    }
    free(cl->name);
    cl->name = n;
    return true;
}

/* CLIENT SETNAME name: kept for GETNAME and CLIENT LIST (pools name their
 * connections so). */
static void cmd_client_setname(kv *k, kv_client *cl, const resp_arg *a,
                               size_t argc, buf *out) {
    (void)k;
    (void)argc;
    if (set_name(cl, &a[2], out)) reply_ok(out);
}

static void cmd_client_getname(kv *k, kv_client *cl, const resp_arg *a,
                               size_t argc, buf *out) {
    (void)k;
    (void)a;
    (void)argc;
    if (cl && cl->name)
        buf_bulk(out, cl->name, strlen(cl->name));
    else
        reply_nil(out);
}

/* CLIENT ID: the owner's number for the connection, from 1 (0: no client
 * of its own, tests). */
static void cmd_client_id(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                          buf *out) {
    (void)k;
    (void)a;
    (void)argc;
    buf_int(out, ':', cl ? (long long)cl->id : 0);
}

/* CLIENT SETINFO attr value: taken and not kept (redis-py sends it; Redis
 * 7.2 knows it, 7.0 does not). */
static void cmd_client_setinfo(kv *k, kv_client *cl, const resp_arg *a,
                               size_t argc, buf *out) {
    (void)k;
    (void)cl;
    (void)a;
    (void)argc;
    reply_ok(out);
}

/* An argument as Redis' %s prints it in an error: up to its first NUL,
 * a CR or LF as a space (an error is one line). */
static void put_cstr(buf *out, const resp_arg *a) {
    for (size_t i = 0; i < a->len && a->p[i]; i++) {
        char ch = a->p[i];
        buf_put(out, ch == '\r' || ch == '\n' ? " " : &ch, 1);
    }
}

/* KV_CLIENT_* of a type's name (Redis' getClientTypeByName), or false
 * with its error in out. */
static bool client_type(const resp_arg *a, int *type, buf *out) {
    static const char *const names[] = {"normal", "replica", "slave", "pubsub",
                                        "master"};
    static const int types[] = {KV_CLIENT_NORMAL, KV_CLIENT_REPLICA,
                                KV_CLIENT_REPLICA, KV_CLIENT_PUBSUB,
                                KV_CLIENT_MASTER};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (resp_is(a, names[i])) {
            *type = types[i];
            return true;
        }
    buf_str(out, "-ERR Unknown client type '");
    put_cstr(out, a);
    buf_str(out, "'\r\n");
    return false;
}

/* The lines written to out from `at` on become one bulk string (Redis'
 * verbatim reply, in RESP2): its header is put before them. */
static void bulk_from(buf *out, size_t at) {
    char head[BUF_INT_MAX];
    size_t n = out->len - at;
    size_t h = (size_t)(buf_int_at(head, '$', (long long)n) - head);
    if (out->oom || !buf_reserve(out, h + 2)) {
        out->oom = true;
        return;
    }
    memmove(out->p + at + h, out->p + at, n);
    memcpy(out->p + at, head, h);
    memcpy(out->p + at + h + n, "\r\n", 2);
    out->len += h + 2;
}

/* The lines of the clients f matches: the owner's, or (none: tests) the
 * asking client's own with no connection fields. False: out of memory. */
static bool list_clients(kv *k, kv_client *cl, const kv_client_filter *f,
                         buf *out) {
    if (k->client_list) return k->client_list(k, cl, f, out);
    int type =
        cl && kv_client_subscribed(cl) ? KV_CLIENT_PUBSUB : KV_CLIENT_NORMAL;
    kv_conn_info ci = {.id = cl ? cl->id : 0,
                       .addr = "?:0",
                       .laddr = "?:0",
                       .fd = -1,
                       .events = ""};
    for (size_t i = 0; cl && i < (f->nids ? f->nids : 1); i++) {
        long long id = 0;
        if (f->nids) kv_parse_i64(f->ids[i].p, f->ids[i].len, &id);
        if ((f->type < 0 || f->type == type) && (!f->id || f->id == cl->id) &&
            (!f->nids || (uint64_t)id == cl->id))
            kv_client_line(cl, &ci, out);
    }
    return true;
}

void kv_client_line(const kv_client *cl, const kv_conn_info *ci, buf *out) {
    char flags[8], *f = flags;
    if (ci->flags & KV_CF_REPLICA) *f++ = 'S';
    if (ci->flags & KV_CF_MASTER) *f++ = 'M';
    if (cl && kv_client_subscribed(cl)) *f++ = 'P';
    if (cl && cl->multi) *f++ = 'x';
    if (cl && cl->watch_dirty) *f++ = 'd';
    if (ci->flags & KV_CF_CLOSING) *f++ = 'c';
    if (ci->flags & KV_CF_UNIX) *f++ = 'U';
    if (f == flags) *f++ = 'N';
    *f = 0;
    size_t multi_mem = cl ? cl->queue_bytes : 0;
    size_t name_mem = cl && cl->name ? strlen(cl->name) + 1 : 0;
    char line[640];
    int n = snprintf(line, sizeof line,
                     "id=%" PRIu64 " addr=%s laddr=%s fd=%d name=", ci->id,
                     ci->addr, ci->laddr, ci->fd);
    buf_put(out, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : 0);
    if (cl && cl->name) buf_str(out, cl->name); /* any length */
    n = snprintf(
        line, sizeof line,
        " age=%" PRIu64 " idle=%" PRIu64 " flags=%s db=0 sub=%zu psub=%zu "
        "ssub=0 multi=%lld qbuf=%zu qbuf-free=%zu argv-mem=%zu multi-mem=%zu "
        "rbs=%zu rbp=%zu obl=%zu oll=%zu omem=%zu tot-mem=%zu events=%s "
        "cmd=%s user=%s redir=-1 resp=2\n",
        ci->age, ci->idle, flags, cl ? cl->subs[0].count : 0,
        cl ? cl->subs[1].count : 0,
        cl && cl->multi ? (long long)cl->queued : -1LL, ci->qbuf, ci->qbuf_free,
        ci->argv_mem, multi_mem, ci->rbs, ci->rbp, ci->obl, ci->oll, ci->omem,
        ci->tot_mem + multi_mem + name_mem + (cl ? cl->watch_bytes : 0),
        ci->events, cl && cl->cmd ? cl->cmd : "NULL",
        cl ? "default" : "(superuser)");
    buf_put(out, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : 0);
}

/* CLIENT LIST [TYPE type | ID id ...]: a line per client, oldest first
 * (with IDs, in their order, a repeated one repeated), as Redis 7.0. */
static void cmd_client_list(kv *k, kv_client *cl, const resp_arg *a,
                            size_t argc, buf *out) {
    kv_client_filter f = {.type = -1};
    if (argc == 4 && resp_is(&a[2], "TYPE")) {
        if (!client_type(&a[3], &f.type, out)) return;
    } else if (argc > 3 && resp_is(&a[2], "ID")) {
        long long id;
        for (size_t i = 3; i < argc; i++) /* every one checked first */
            if (!kv_parse_i64(a[i].p, a[i].len, &id)) {
                buf_str(out, "-ERR Invalid client ID\r\n");
                return;
            }
        f.ids = &a[3];
        f.nids = argc - 3;
    } else if (argc != 2) {
        reply_syntax(out);
        return;
    }
    size_t at = out->len;
    if (!list_clients(k, cl, &f, out)) {
        out->len = at;
        reply_oom(out);
        return;
    }
    bulk_from(out, at);
}

/* CLIENT INFO: the asking client's line. */
static void cmd_client_info(kv *k, kv_client *cl, const resp_arg *a,
                            size_t argc, buf *out) {
    (void)a;
    (void)argc;
    kv_client_filter f = {.type = -1, .id = cl ? cl->id : 0};
    size_t at = out->len;
    if (cl && cl->id && !list_clients(k, cl, &f, out)) {
        out->len = at;
        reply_oom(out);
        return;
    }
    bulk_from(out, at);
}

/* CLIENT KILL ip:port | CLIENT KILL [ID id] [TYPE type] [ADDR ip:port]
 * [LADDR ip:port] [USER name] [SKIPME yes|no] ...: Redis 7.0's parse and
 * replies. The owner closes the clients that match after its walk (the
 * asking one after this reply); the old form may close the asker too. */
static void cmd_client_kill(kv *k, kv_client *cl, const resp_arg *a,
                            size_t argc, buf *out) {
    kv_client_filter f = {.type = -1, .skipme = true};
    if (argc == 3) {
        f.addr = &a[2];
        f.skipme = false;
    } else {
        for (size_t i = 2; i < argc; i += 2) {
            if (i + 1 == argc) {
                reply_syntax(out);
                return;
            }
            const resp_arg *v = &a[i + 1];
            long long id;
            if (resp_is(&a[i], "ID")) {
                if (!kv_parse_i64(v->p, v->len, &id) || id < 1) {
                    buf_str(out, "-ERR client-id should be greater than 0\r\n");
                    return;
                }
                f.id = (uint64_t)id;
            } else if (resp_is(&a[i], "TYPE")) {
                if (!client_type(v, &f.type, out)) return;
            } else if (resp_is(&a[i], "ADDR")) {
                f.addr = v;
            } else if (resp_is(&a[i], "LADDR")) {
                f.laddr = v;
            } else if (resp_is(&a[i], "USER")) {
                /* Redis' ACL names are byte for byte; default is the one
                 * user lull-kv has. */
                if (v->len != 7 || memcmp(v->p, "default", 7) != 0) {
                    buf_str(out, "-ERR No such user '");
                    put_cstr(out, v);
                    buf_str(out, "'\r\n");
                    return;
                }
                f.users = true;
            } else if (resp_is(&a[i], "SKIPME") && resp_is(v, "yes")) {
                f.skipme = true;
            } else if (resp_is(&a[i], "SKIPME") && resp_is(v, "no")) {
                f.skipme = false;
            } else {
                reply_syntax(out);
                return;
            }
        }
    }
    long long n = k->client_kill ? k->client_kill(k, cl, &f) : 0;
    if (argc != 3)
        buf_int(out, ':', n);
    else if (n)
        reply_ok(out);
    else
        buf_str(out, "-ERR No such client\r\n");
}

/* CLIENT HELP: Redis' help in its format and words, for the subcommands
 * lull-kv has (every unknown subcommand's error says to try it). */
static void cmd_client_help(kv *k, kv_client *cl, const resp_arg *a,
                            size_t argc, buf *out) {
    (void)k;
    (void)cl;
    (void)a;
    (void)argc;
    static const char *const help[] = {
        "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GETNAME",
        "    Return the name of the current connection.",
        "ID",
        "    Return the ID of the current connection.",
        "INFO",
        "    Return information about the current client connection.",
        "KILL <ip:port>",
        "    Kill connection made from <ip:port>.",
        "KILL <option> <value> [<option> <value> [...]]",
        "    Kill connections. Options are:",
        "    * ADDR (<ip:port>|<unixsocket>:0)",
        "      Kill connections made from the specified address",
        "    * LADDR (<ip:port>|<unixsocket>:0)",
        "      Kill connections made to specified local address",
        "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
        "      Kill connections by type.",
        "    * USER <username>",
        "      Kill connections authenticated by <username>.",
        "    * ID <client-id>",
        "      Kill connections by client id.",
        "    * SKIPME (YES|NO)",
        "      Skip killing current connection (default: yes).",
        "LIST [options ...]",
        "    Return information about client connections. Options:",
        "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
        "      Return clients of specified type.",
        "    * ID <client-id> [<client-id> ...]",
        "      Return clients of specified IDs only.",
        "SETNAME <name>",
        "    Assign the name <name> to the current connection.",
        "SETINFO <option> <value>",
        "    Set client meta attr (taken, not kept).",
        "HELP",
        "    Prints this help.",
    };
    reply_help(out, help, sizeof help / sizeof *help);
}

/* AUTH: a command like any other as far as kv_exec's checks go (so inside
 * MULTI it is queued and runs from EXEC, and a subscribed client is
 * refused it, as Redis 7 does); the password is the owner's (kv.auth). A
 * client not yet authenticated reaches here only with AUTH: the owner
 * refuses everything else before kv_exec. */
static const char no_password[] =
    "-ERR AUTH <password> called without any password configured for the "
    "default user. Are you sure your configuration is correct?\r\n";

static void cmd_auth(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                     buf *out) {
    if (k->auth && cl)
        k->auth(cl, a, argc, out);
    else if (argc > 3)
        buf_str(out, "-ERR syntax error\r\n");
    else if (argc == 2)
        buf_str(out, no_password);
    else
        buf_str(out, a[1].len == 7 && memcmp(a[1].p, "default", 7) == 0
                         ? "+OK\r\n" /* the name as it is, as Redis */
                         : "-WRONGPASS invalid username-password pair or "
                           "user is disabled.\r\n");
}

/* ------------------------------------------------------------- RESET */

/* RESET: the connection as new, as Redis 7 resets it: out of MULTI (its
 * queue dropped), every subscription gone, no name, and signed out when a
 * password is set. It runs at once inside MULTI, while subscribed and
 * before AUTH (conn.c lets it through), as in redis-server. */
static void cmd_reset(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                      buf *out) {
    (void)a;
    (void)argc;
    if (cl) {
        kv_client_reset(k, cl); /* its sets stay usable, empty */
        cl->noauth = k->requirepass;
    }
    buf_str(out, "+RESET\r\n");
}

/* ------------------------------------------------------------- HELLO */

/* HELLO [protover [AUTH user pass] [SETNAME name]]: redis-server 7's
 * checks in its order (version, options and names, AUTH, authenticated,
 * SETNAME) for a server that speaks RESP2 only, so 3 is refused as a
 * RESP2 server refuses it and the client carries on in RESP2. The reply
 * is Redis' map, flat as RESP2 gives it. AUTH is the AUTH command's
 * (kv.auth). */
static void cmd_hello(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                      buf *out) {
    long long ver;
    if (argc >= 2 && !kv_parse_i64(a[1].p, a[1].len, &ver)) {
        buf_str(out,
                "-ERR Protocol version is not an integer or out of range\r\n");
        return;
    }
    if (argc >= 2 && ver != 2) {
        buf_str(out, "-NOPROTO unsupported protocol version\r\n");
        return;
    }
    const resp_arg *user = NULL, *name = NULL;
    for (size_t j = 2; j < argc; j++) {
        size_t more = argc - 1 - j;
        if (resp_is(&a[j], "AUTH") && more >= 2) {
            user = &a[j + 1];
            j += 2;
        } else if (resp_is(&a[j], "SETNAME") && more >= 1) {
            /* Checked here, before AUTH runs: a refused HELLO signs no
             * one in. (redis-server 7.0 runs each option in its order, so
             * an AUTH before a bad SETNAME leaves it signed in; the
             * reply is the same error.) */
            name = &a[++j];
            if (!name_ok(name, out)) return;
        } else {
            /* Redis' %s: up to a NUL; a CR or LF would end the line. */
            buf_str(out, "-ERR Syntax error in HELLO option '");
            for (size_t i = 0; i < a[j].len && i < 128 && a[j].p[i]; i++) {
                char ch = a[j].p[i];
                buf_put(out, ch == '\r' || ch == '\n' ? " " : &ch, 1);
            }
            buf_str(out, "'\r\n");
            return;
        }
    }
    if (user) {
        resp_arg auth[3] = {{"AUTH", 4}, user[0], user[1]};
        size_t at = out->len;
        cmd_auth(k, cl, auth, 3, out);
        if (out->len - at != 5 || memcmp(out->p + at, "+OK\r\n", 5) != 0)
            return; /* its refusal is the reply */
        out->len = at;
    }
    if (cl && cl->noauth) {
        buf_str(out, "-NOAUTH HELLO must be called with the client already "
                     "authenticated, otherwise the HELLO AUTH <user> <pass> "
                     "option can be used to authenticate the client and "
                     "select the RESP protocol version at the same time\r\n");
        return;
    }
    if (name && !set_name(cl, name, out)) return;
    buf_str(out, "*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n");
    buf_bulk(out, KV_REDIS_VERSION, sizeof KV_REDIS_VERSION - 1);
    buf_str(out, "$5\r\nproto\r\n:2\r\n$2\r\nid\r\n");
    buf_int(out, ':', cl ? (long long)cl->id : 0);
    buf_str(out, "$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n");
    if (k->replica)
        buf_str(out, "$7\r\nreplica\r\n");
    else
        buf_str(out, "$6\r\nmaster\r\n");
    buf_str(out, "$7\r\nmodules\r\n*0\r\n");
}

/* Redis' names and arities; they queue inside MULTI and are refused while
 * subscribed, as any command but the pub/sub ones. */
static const kv_cmd client_subcommands[] = {
    {"client|kill", -3, 0, cmd_client_kill},
    {"client|list", -2, 0, cmd_client_list},
    {"client|info", 2, 0, cmd_client_info},
    {"client|help", 2, 0, cmd_client_help},
    {"client|setname", 3, 0, cmd_client_setname},
    {"client|getname", 2, 0, cmd_client_getname},
    {"client|id", 2, 0, cmd_client_id},
    {"client|setinfo", 4, 0, cmd_client_setinfo},
};

/* Redis' names and arities (its SHARDCHANNELS and SHARDNUMSUB are for
 * sharded channels, which lull-kv has not); they queue inside MULTI and
 * are refused while subscribed. */
static const kv_cmd pubsub_subcommands[] = {
    {"pubsub|channels", -2, 0, cmd_pubsub_channels},
    {"pubsub|numsub", -2, 0, cmd_pubsub_numsub},
    {"pubsub|numpat", 2, 0, cmd_pubsub_numpat},
    {"pubsub|help", 2, 0, cmd_pubsub_help},
};

static const kv_cmd *find_subcommand(const kv_cmd *table, size_t n,
                                     const resp_arg *name) {
    for (size_t i = 0; i < n; i++) {
        const char *sub = strchr(table[i].name, '|') + 1;
        if (resp_is(name, sub)) return &table[i];
    }
    return NULL;
}

const kv_cmd *kv_client_subcommand(const kv_cmd *container,
                                   const resp_arg *name) {
    if (strcmp(container->name, "pubsub") == 0)
        return find_subcommand(
            pubsub_subcommands,
            sizeof pubsub_subcommands / sizeof *pubsub_subcommands, name);
    return find_subcommand(
        client_subcommands,
        sizeof client_subcommands / sizeof *client_subcommands, name);
}

static const kv_cmd client_commands[] = {
    {"client", -2, CMD_CONTAINER, NULL},
    {"pubsub", -2, CMD_CONTAINER, NULL},
    {"multi", 1, CMD_NOQUEUE, cmd_multi},
    {"exec", 1, CMD_NOQUEUE, cmd_exec},
    {"discard", 1, CMD_NOQUEUE, cmd_discard},
    {"watch", -2, CMD_NOQUEUE, cmd_watch},
    {"unwatch", 1, 0, cmd_unwatch},
    {"subscribe", -2, CMD_PUBSUB, cmd_subscribe},
    {"psubscribe", -2, CMD_PUBSUB, cmd_psubscribe},
    {"unsubscribe", -1, CMD_PUBSUB, cmd_unsubscribe},
    {"punsubscribe", -1, CMD_PUBSUB, cmd_punsubscribe},
    {"publish", 3, CMD_LOGGED, cmd_publish},
    {"auth", -2, 0, cmd_auth},
    {"select", 2, 0, cmd_select},
    {"hello", -1, 0, cmd_hello},
    {"reset", 1, CMD_PUBSUB | CMD_NOQUEUE, cmd_reset},
};

void kv_client_commands_init(void) {
    kv_commands_add(client_commands,
                    sizeof client_commands / sizeof client_commands[0]);
}
