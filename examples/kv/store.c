/* store.c: the keyspace as a chained hash table.
 *
 * Our own rather than a library's: it is some eighty lines, lull-kv then
 * needs nothing beyond lull and libc (the examples build against an
 * installed lull with no other package), and it does exactly what the five
 * keyspace commands need. Chaining keeps deletion simple; the table doubles
 * when it holds as many keys as buckets, so chains stay short on average.
 * The hash is FNV-1a: short, and good enough for keys a benchmark or a
 * test chooses (not hardened against keys chosen to collide, which a
 * server facing untrusted clients would need: a keyed hash such as
 * SipHash). Rehashing is done all at once, so the SET that grows the table
 * pays for it: fine for an example, a known stall for a real server. */
#include "store.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct store_entry {
    store_entry *next; /* the bucket's chain */
    uint64_t hash;
    char *val; /* malloc'd, vlen bytes (never NULL: zero-length is 1 byte) */
    size_t vlen;
    size_t klen;
    char key[]; /* klen bytes */
};

/* 16 buckets to start: a fresh server holds nothing, and doubling is cheap
 * while small. */
#define INITIAL_BUCKETS 16

static uint64_t hash(const char *p, size_t n) {
    uint64_t h = 14695981039346656037ull; /* FNV-1a 64-bit offset basis */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ull; /* FNV-1a 64-bit prime */
    }
    return h;
}

int store_init(store *st) {
    st->buckets = calloc(INITIAL_BUCKETS, sizeof *st->buckets);
    if (!st->buckets) return -ENOMEM;
    st->nbuckets = INITIAL_BUCKETS;
    st->count = 0;
    return 0;
}

void store_clear(store *st) {
    for (size_t i = 0; i < st->nbuckets; i++) {
        store_entry *e = st->buckets[i];
        while (e) {
            store_entry *next = e->next;
            free(e->val);
            free(e);
            e = next;
        }
        st->buckets[i] = NULL;
    }
    st->count = 0;
}

void store_free(store *st) {
    store_clear(st);
    free(st->buckets);
    st->buckets = NULL;
    st->nbuckets = 0;
}

static store_entry **find(const store *st, const char *key, size_t klen,
                          uint64_t h) {
    store_entry **pp = &st->buckets[h & (st->nbuckets - 1)];
    for (; *pp; pp = &(*pp)->next) {
        store_entry *e = *pp;
        if (e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0)
            break;
    }
    return pp;
}

const char *store_get(const store *st, const char *key, size_t klen,
                      size_t *vlen) {
    store_entry *e = *find(st, key, klen, hash(key, klen));
    if (!e) return NULL;
    *vlen = e->vlen;
    return e->val;
}

/* Doubles the table; on -ENOMEM the old one stays (chains just grow). */
static void grow(store *st) {
    size_t n = st->nbuckets * 2;
    store_entry **b = calloc(n, sizeof *b);
    if (!b) return;
    for (size_t i = 0; i < st->nbuckets; i++) {
        store_entry *e = st->buckets[i];
        while (e) {
            store_entry *next = e->next;
            store_entry **slot = &b[e->hash & (n - 1)];
            e->next = *slot;
            *slot = e;
            e = next;
        }
    }
    free(st->buckets);
    st->buckets = b;
    st->nbuckets = n;
}

int store_set(store *st, const char *key, size_t klen, const char *val,
              size_t vlen) {
    uint64_t h = hash(key, klen);
    store_entry **pp = find(st, key, klen, h);
    char *v = malloc(vlen ? vlen : 1);
    if (!v) return -ENOMEM;
    if (vlen) memcpy(v, val, vlen);
    if (*pp) {
        free((*pp)->val);
        (*pp)->val = v;
        (*pp)->vlen = vlen;
        return 0;
    }
    store_entry *e = malloc(sizeof *e + klen);
    if (!e) {
        free(v);
        return -ENOMEM;
    }
    e->hash = h;
    e->val = v;
    e->vlen = vlen;
    e->klen = klen;
    memcpy(e->key, key, klen);
    e->next = *pp;
    *pp = e;
    st->count++;
    if (st->count > st->nbuckets) grow(st);
    return 0;
}

int store_del(store *st, const char *key, size_t klen) {
    store_entry **pp = find(st, key, klen, hash(key, klen));
    store_entry *e = *pp;
    if (!e) return 0;
    *pp = e->next;
    free(e->val);
    free(e);
    st->count--;
    return 1;
}
