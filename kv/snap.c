/* snap.c: the snapshot of a keyspace (see snap.h). One thread: the loop's,
 * or a forked child's (which only reads the keyspace it was copied with). */
#include "snap.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "types.h"

typedef struct snap {
    snap_out *o;
    int err; /* the first flush error: nothing more is written */
} snap;

static void put(snap *s, const char *p, size_t n) {
    snap_out *o = s->o;
    while (n && !s->err) {
        if (o->len == o->cap) {
            s->err = o->flush(o);
            continue;
        }
        size_t k = o->cap - o->len < n ? o->cap - o->len : n;
        memcpy(o->p + o->len, p, k);
        o->len += k;
        p += k;
        n -= k;
    }
}

static void put_int(snap *s, char tag, long long v) {
    char tmp[BUF_INT_MAX];
    put(s, tmp, (size_t)(buf_int_at(tmp, tag, v) - tmp));
}

static void head(snap *s, size_t argc) {
    put_int(s, '*', (long long)argc);
}

static void arg(snap *s, const char *p, size_t n) {
    put_int(s, '$', (long long)n);
    put(s, p, n);
    put(s, "\r\n", 2);
}

static void arg_str(snap *s, const char *p) {
    arg(s, p, strlen(p));
}

/* The first part of a record: the command, the key. */
static void start(snap *s, const char *cmd, size_t nargs, const char *key,
                  size_t klen) {
    head(s, 2 + nargs);
    arg_str(s, cmd);
    arg(s, key, klen);
}

/* A collection's next record: at most SNAP_BATCH of its left items. */
static size_t batch(size_t left) {
    return left < SNAP_BATCH ? left : SNAP_BATCH;
}

/* (KV_PLANT_SNAP_BATCH, repl.h: `most` SNAP_BATCH; SIZE_MAX otherwise) */
static void list_records(snap *s, const char *key, size_t klen, kv_list *l,
                         size_t most) {
    for (size_t i = 0; i < l->n && i < most;) {
        size_t m = batch(l->n - i);
        start(s, "RPUSH", m, key, klen);
        for (size_t j = 0; j < m; j++, i++)
            arg(s, elem_bytes(list_at(l, i)), list_at(l, i)->len);
    }
}

/* Sets and hashes: a dict's entries, batch by batch. */
static void dict_records(snap *s, const char *key, size_t klen, dict *d,
                         bool hash) {
    size_t left = d->count, b = 0;
    dict_entry *e = NULL;
    while (left) {
        size_t m = batch(left);
        start(s, hash ? "HSET" : "SADD", hash ? 2 * m : m, key, klen);
        for (size_t j = 0; j < m; j++) {
            while (!e)
                e = d->buckets[b++];
            arg(s, dict_key(d, e), e->klen);
            if (hash) arg(s, elem_bytes(hash_value(e)), hash_value(e)->len);
            e = e->next;
        }
        left -= m;
    }
}

static void zset_records(snap *s, const char *key, size_t klen, kv_zset *z) {
    znode *x = z->head->lv[0].fwd;
    for (size_t left = zset_len(z); left;) {
        size_t m = batch(left);
        start(s, "ZADD", 2 * m, key, klen);
        for (size_t j = 0; j < m; j++, x = x->lv[0].fwd) {
            /* %.17g gives the double back exactly, "inf" and "-inf"
             * included, as ZADD reads them. */
            char num[32];
            snprintf(num, sizeof num, "%.17g", x->score);
            arg_str(s, num);
            size_t len;
            const char *name = znode_name(z, x, &len);
            arg(s, name, len);
        }
        left -= m;
    }
}

int snap_write(kv *k, snap_out *o) {
    snap s = {.o = o};
    long long keys = 0;
    dict *d = &k->db.d;
    for (size_t b = 0; b < d->nbuckets && !s.err; b++)
        for (dict_entry *e = d->buckets[b]; e && !s.err; e = e->next) {
            kobj *v = store_obj(e);
            int64_t expire = store_expire(&k->db, e);
            const char *key = dict_key(d, e);
            if (expire && (k->plant & KV_PLANT_SNAPSHOT_TTL)) continue;
            switch (v->type) {
            case KV_STRING:
                start(&s, "SET", 1, key, e->klen);
                arg(&s, kobj_str(v), v->len);
                break;
            case KV_LIST:
                list_records(&s, key, e->klen, v->val,
                             k->plant & KV_PLANT_SNAP_BATCH ? SNAP_BATCH
                                                            : SIZE_MAX);
                break;
            case KV_SET:
                dict_records(&s, key, e->klen, &((kv_set *)v->val)->d, false);
                break;
            case KV_HASH:
                dict_records(&s, key, e->klen, &((kv_hash *)v->val)->d, true);
                break;
            default:
                zset_records(&s, key, e->klen, v->val);
                break;
            }
            if (expire) {
                char num[24];
                snprintf(num, sizeof num, "%" PRId64, expire);
                start(&s, "PEXPIREAT", 1, key, e->klen);
                arg_str(&s, num);
            }
            keys++;
        }
    char num[24];
    snprintf(num, sizeof num, "%lld", keys);
    head(&s, 2);
    arg_str(&s, SNAP_END);
    arg_str(&s, num);
    if (!s.err && o->len) s.err = o->flush(o);
    return s.err;
}
