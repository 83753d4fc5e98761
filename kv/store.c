/* store.c: the keyspace (see store.h). Invariants: every key with a
 * expiry is in the heap at index heap - 1, and no other key is; heap[i]'s
 * expire is no later than its children's (2i + 1, 2i + 2). */
#include "store.h"

#include "blob.h"
#include "types.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int store_init(store *st) {
    memset(st, 0, sizeof *st);
    dict_init(&st->d, sizeof(kobj));
    return 0;
}

void store_value_free(kobj *o) {
    switch (o->type) {
    case KV_LIST:
        list_free(o->val);
        break;
    case KV_SET:
        set_free(o->val);
        break;
    case KV_HASH:
        hash_free(o->val);
        break;
    case KV_ZSET:
        zset_free(o->val);
        break;
    default: /* a string */
        if (o->len > KOBJ_INLINE) store_str_free(o->val, o->len);
        break;
    }
    o->val = NULL;
    o->len = 0;
}

static void drop_value(dict *d, dict_entry *e, void *arg) {
    (void)d;
    (void)arg;
    store_value_free(store_obj(e));
}

void store_clear(store *st) {
    dict_clear(&st->d, drop_value, NULL);
    st->nheap = 0;
    st->expire_sum[0] = st->expire_sum[1] = 0;
}

void store_free(store *st) {
    store_clear(st);
    dict_free(&st->d);
    free(st->heap);
    st->heap = NULL;
    st->heap_cap = 0;
}

/* ------------------------------------------------------- expiry heap */

/* The sum of the heap's times, as a time joins it or leaves it (each is
 * positive: the sum of up to 2^32 of them fits in the two words). */
static void sum_add(store *st, int64_t t) {
    uint64_t lo = st->expire_sum[0] + (uint64_t)t;
    st->expire_sum[1] += lo < st->expire_sum[0];
    st->expire_sum[0] = lo;
}

static void sum_sub(store *st, int64_t t) {
    st->expire_sum[1] -= st->expire_sum[0] < (uint64_t)t;
    st->expire_sum[0] -= (uint64_t)t;
}

int64_t store_mean_expire(const store *st) {
    if (!st->nheap) return 0;
    long double sum = (long double)st->expire_sum[1] * 18446744073709551616.0L +
                      (long double)st->expire_sum[0];
    return (int64_t)(sum / (long double)st->nheap);
}

static int64_t when(const store *st, size_t i) {
    return st->heap[i].expire;
}

static void place(store *st, size_t i, store_timed x) {
    st->heap[i] = x;
    store_obj(x.e)->heap = (uint32_t)(i + 1);
}

static void sift_up(store *st, size_t i) {
    store_timed x = st->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (when(st, parent) <= x.expire) break;
        place(st, i, st->heap[parent]);
        i = parent;
    }
    place(st, i, x);
}

static void sift_down(store *st, size_t i) {
    store_timed x = st->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= st->nheap) break;
        if (c + 1 < st->nheap && when(st, c + 1) < when(st, c)) c++;
        if (when(st, c) >= x.expire) break;
        place(st, i, st->heap[c]);
        i = c;
    }
    place(st, i, x);
}

static void heap_remove(store *st, dict_entry *e) {
    kobj *o = store_obj(e);
    size_t i = o->heap - 1;
    sum_sub(st, st->heap[i].expire);
    o->heap = 0;
    st->nheap--;
    if (i == st->nheap) return;
    place(st, i, st->heap[st->nheap]);
    sift_down(st, i);
    sift_up(st, store_obj(st->heap[i].e)->heap - 1);
}

int store_set_expire(store *st, dict_entry *e, int64_t t) {
    kobj *o = store_obj(e);
    if (t <= 0) {
        if (o->heap) heap_remove(st, e);
        return 0;
    }
    if (o->heap) {
        store_timed *x = &st->heap[o->heap - 1];
        int64_t old = x->expire;
        x->expire = t;
        sum_sub(st, old);
        sum_add(st, t);
        if (t < old)
            sift_up(st, o->heap - 1);
        else
            sift_down(st, o->heap - 1);
        return 0;
    }
    if (st->nheap == st->heap_cap) {
        size_t cap = st->heap_cap ? st->heap_cap * 2 : 64;
        if (cap > UINT32_MAX) return -ENOMEM;
        store_timed *h = realloc(st->heap, cap * sizeof *h);
        if (!h) return -ENOMEM;
        st->heap = h;
        st->heap_cap = cap;
    }
    st->heap[st->nheap] = (store_timed){t, e};
    o->heap = (uint32_t)++st->nheap;
    sum_add(st, t);
    sift_up(st, st->nheap - 1);
    return 0;
}

/* ---------------------------------------------------------------- keys */

dict_entry *store_add(store *st, const char *key, size_t klen, int type) {
    dict_entry *e = dict_add(&st->d, key, klen);
    if (e) store_obj(e)->type = (uint8_t)type;
    return e;
}

void store_delete(store *st, dict_entry *e) {
    kobj *o = store_obj(e);
    if (o->heap) heap_remove(st, e);
    store_value_free(o);
    dict_delete(&st->d, e);
}

const char *store_get(const store *st, const char *key, size_t klen,
                      size_t *vlen) {
    dict_entry *e = store_find(st, key, klen);
    if (!e || store_obj(e)->type != KV_STRING) return NULL;
    *vlen = store_obj(e)->len;
    return kobj_str(store_obj(e));
}

/* KV_PLANT_INT32: a decimal in [2^31, 2^32) as its 32-bit wrap, into
 * tmp (>= 16 bytes); false for any other value. */
static bool int32_wrap(const char *val, size_t vlen, char *tmp, size_t *n) {
    if (vlen != 10) return false;
    long long v = 0;
    for (size_t i = 0; i < vlen; i++) {
        if (val[i] < '0' || val[i] > '9') return false;
        v = v * 10 + (val[i] - '0');
    }
    if (v < 2147483648ll || v > 4294967295ll) return false;
    *n = (size_t)snprintf(tmp, 16, "%lld", v - 4294967296ll);
    return true;
}

/* KV_PLANT_SAME_LENGTH (test only): a large value written over one of
 * the same length whose first KiB is the same is taken as "unchanged". */
static bool planted_unchanged(const store *st, dict_entry *old, const char *val,
                              size_t vlen) {
    return st->plant_same_length && old && vlen >= KV_BLOB_MIN &&
           store_obj(old)->type == KV_STRING && store_obj(old)->len == vlen &&
           memcmp(store_obj(old)->val, val, 1024) == 0;
}

int store_put(store *st, dict_entry **pe, const char *key, size_t klen,
              const char *val, size_t vlen) {
    char wrapped[16];
    if (st->plant_int32 && int32_wrap(val, vlen, wrapped, &vlen)) val = wrapped;
    dict_entry *old = *pe;
    bool big = vlen >= KV_BLOB_MIN;
    /* (a blob a reply still reads is left to it: a new one is made;
     * KV_PLANT_BLOB_INPLACE writes over it) */
    if (old && store_obj(old)->type == KV_STRING &&
        store_obj(old)->len == vlen &&
        !(big && kv_blob_shared(store_obj(old)->val) &&
          !st->plant_blob_inplace)) {
        /* The same length over a string: in place, no allocation (a
         * benchmark's SET, and many real overwrites). */
        if (planted_unchanged(st, old, val, vlen)) return 0;
        if (vlen) memcpy(kobj_str(store_obj(old)), val, vlen);
        return 0;
    }
    char *v = NULL; /* a long value's own copy (a blob's when big) */
    if (vlen > KOBJ_INLINE) {
        if (!(v = big ? kv_blob_new(vlen) : malloc(vlen))) return -ENOMEM;
        memcpy(v, val, vlen);
    }
    dict_entry *e = *pe;
    if (!e && !(e = store_add(st, key, klen, KV_STRING))) {
        store_str_free(v, vlen);
        return -ENOMEM;
    }
    kobj *o = store_obj(e);
    store_value_free(o);
    o->type = KV_STRING;
    o->len = vlen;
    if (v)
        o->val = v;
    else if (vlen)
        memcpy(o->small, val, vlen);
    *pe = e;
    return 0;
}

int store_take(store *st, dict_entry **pe, const char *key, size_t klen,
               char *blob, size_t vlen) {
    dict_entry *old = *pe;
    if (planted_unchanged(st, old, blob, vlen)) return 0;
    dict_entry *e = old;
    if (!e && !(e = store_add(st, key, klen, KV_STRING))) return -ENOMEM;
    kobj *o = store_obj(e);
    store_value_free(o);
    o->type = KV_STRING;
    o->val = blob;
    o->len = vlen;
    *pe = e;
    return 1;
}

void store_str_free(char *v, size_t len) {
    if (len >= KV_BLOB_MIN)
        kv_blob_unref(v);
    else
        free(v);
}

char *kobj_str_resize(kobj *o, size_t len) {
    size_t old = o->len;
    if (len <= KOBJ_INLINE) {
        if (old > KOBJ_INLINE) { /* into the entry */
            char *p = o->val;
            memcpy(o->small, p, len);
            store_str_free(p, old);
        }
        o->len = len;
        return o->small;
    }
    char *v;
    if (old <= KOBJ_INLINE) { /* out of the entry */
        v = len >= KV_BLOB_MIN ? kv_blob_new(len) : malloc(len + 1);
        if (!v) return NULL;
        memcpy(v, o->small, old);
    } else if (old < KV_BLOB_MIN && len < KV_BLOB_MIN) {
        /* (one byte more, as APPEND has always reserved) */
        if (!(v = realloc(o->val, len + 1))) return NULL;
    } else if (old >= KV_BLOB_MIN && len >= KV_BLOB_MIN &&
               !kv_blob_shared(o->val)) {
        if (!(v = kv_blob_resize(o->val, len))) return NULL;
    } else { /* into or out of a blob, or a blob a reply reads: a copy */
        v = len >= KV_BLOB_MIN ? kv_blob_new(len) : malloc(len + 1);
        if (!v) return NULL;
        memcpy(v, o->val, old < len ? old : len);
        store_str_free(o->val, old);
    }
    o->val = v;
    o->len = len;
    return v;
}

int store_set_entry(store *st, const char *key, size_t klen, const char *val,
                    size_t vlen, dict_entry **out) {
    dict_entry *e = store_find(st, key, klen);
    int rc = store_put(st, &e, key, klen, val, vlen);
    if (rc == 0 && out) *out = e;
    return rc;
}

int store_set(store *st, const char *key, size_t klen, const char *val,
              size_t vlen) {
    return store_set_entry(st, key, klen, val, vlen, NULL);
}

void store_move(store *st, dict_entry *from, dict_entry *to) {
    kobj *f = store_obj(from), *t = store_obj(to);
    if (t->heap) heap_remove(st, to);
    store_value_free(t);
    *t = *f;
    if (f->heap)
        place(st, f->heap - 1, (store_timed){when(st, f->heap - 1), to});
    f->heap = 0;
    f->val = NULL; /* moved: nothing of it is freed */
    f->type = KV_STRING;
    dict_delete(&st->d, from);
}

int store_del(store *st, const char *key, size_t klen) {
    dict_entry *e = store_find(st, key, klen);
    if (!e) return 0;
    store_delete(st, e);
    return 1;
}
