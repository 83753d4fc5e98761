/* dict.c: the hash table (see dict.h). Invariants: nbuckets is 0 or a
 * power of two; every entry is in the chain of bucket hash & (nbuckets -
 * 1); count is the number of entries. */
#include "dict.h"

#include "bytes.h"

#include <stdlib.h>
#include <string.h>

/* 8 buckets to start: most sets and hashes are small, and doubling is
 * cheap while small. */
#define INITIAL_BUCKETS 8
/* An entry keeps 32 bits of its hash: enough to place it in a table of
 * this many buckets, and no more. */
#define DICT_MAX_BUCKETS ((size_t)1 << 32)

void dict_init(dict *d, size_t extra) {
    memset(d, 0, sizeof *d);
    d->extra = (extra + 7) & ~(size_t)7;
}

/* The hash's key: three words drawn from the seed (dict_seed). A client
 * who does not know them cannot choose keys that share a bucket. */
static uint64_t key0 = 0x243f6a8885a308d3ull, key1 = 0x13198a2e03707344ull,
                key2 = 0xa4093822299f31d0ull; /* pi's digits: a fixed key */

/* splitmix64's step: a seed of any bits gives well-spread words. */
static uint64_t next_word(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void dict_seed(uint64_t seed) {
    key0 = next_word(&seed);
    key1 = next_word(&seed);
    key2 = next_word(&seed);
}

/* The 128-bit product of a and b, its halves xored: each output bit
 * depends on every bit of both, so a difference in either input comes out
 * as a difference the other input (here, always keyed) decides. A
 * multiply-and-shift mixer carries some differences through unchanged
 * (a flip of a word's top bit stays a flip of the product's), and keys
 * built from those collided under any seed. */
static inline uint64_t fold(uint64_t a, uint64_t b) {
    unsigned __int128 p = (unsigned __int128)a * b;
    return (uint64_t)p ^ (uint64_t)(p >> 64);
}

static inline uint64_t load64(const char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

static inline uint64_t load32(const char *p) {
    uint32_t w;
    memcpy(&w, p, 4);
    return w;
}

/* 16 bytes a step, one multiply each: every lookup hashes its key, so this
 * is a share of each GET. The last 1-15 bytes are read as two words that
 * may overlap (the length, hashed in first, tells the keys apart). */
static inline __attribute__((always_inline)) uint64_t hash_bytes(const char *p,
                                                                 size_t n) {
    uint64_t h = key0 ^ ((uint64_t)n * 0x9e3779b97f4a7c15ull);
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        h = fold(load64(p + i) ^ key1, load64(p + i + 8) ^ h);
    size_t r = n - i;
    uint64_t a = 0, b = 0;
    if (r >= 8) {
        a = load64(p + i);
        b = load64(p + n - 8);
    } else if (r >= 4) {
        a = load32(p + i);
        b = load32(p + n - 4);
    } else if (r > 0) {
        a = (uint64_t)(unsigned char)p[i] << 16 |
            (uint64_t)(unsigned char)p[i + r / 2] << 8 |
            (unsigned char)p[n - 1];
    }
    h = fold(a ^ key1, b ^ h ^ key2);
    return fold(h ^ key2, key0 ^ n);
}

uint64_t dict_hash(const char *p, size_t n) {
    return hash_bytes(p, n);
}

static dict_entry **slot(const dict *d, const char *key, size_t klen,
                         uint64_t h) {
    dict_entry **pp = &d->buckets[h & (d->nbuckets - 1)];
    for (; *pp; pp = &(*pp)->next) {
        dict_entry *e = *pp;
        if (e->hash == (uint32_t)h && e->klen == klen &&
            bytes_same(dict_key(d, e), key, klen))
            break;
    }
    return pp;
}

dict_entry *dict_find(const dict *d, const char *key, size_t klen) {
    if (d->count == 0) return NULL;
    return *slot(d, key, klen, hash_bytes(key, klen));
}

/* Moves the entries to a table of n buckets; on -ENOMEM the old one
 * stays (chains just grow, or the table stays large). */
static void resize(dict *d, size_t n) {
    dict_entry **b = calloc(n, sizeof *b);
    if (!b) return;
    for (size_t i = 0; i < d->nbuckets; i++) {
        dict_entry *e = d->buckets[i];
        while (e) {
            dict_entry *next = e->next;
            dict_entry **s = &b[e->hash & (n - 1)];
            e->next = *s;
            *s = e;
            e = next;
        }
    }
    free(d->buckets);
    d->buckets = b;
    d->nbuckets = n;
}

/* Doubles the table (or makes the first one). */
static void grow(dict *d) {
    if (d->nbuckets >= DICT_MAX_BUCKETS) return;
    resize(d, d->nbuckets ? d->nbuckets * 2 : INITIAL_BUCKETS);
}

/* A table under 1/8 full halves (a set that once held 10^6 members and
 * now holds a few would otherwise keep 2^20 buckets: their memory, and a
 * walk of all of them at every SSCAN, HGETALL or KEYS). Under a quarter
 * full after it and doubled only once full, so adds and deletes around a
 * size never resize back and forth; each halving's cost, the old table, is paid
 * for by the deletes since the last one (at least an eighth of it). Redis
 * shrinks a table under 10% full. A walk (dict_scan) goes on across it. */
static void maybe_shrink(dict *d) {
    if (d->nbuckets > INITIAL_BUCKETS && d->count < d->nbuckets / 8)
        resize(d, d->nbuckets / 2);
}

dict_entry *dict_add(dict *d, const char *key, size_t klen) {
    if (klen > UINT32_MAX) return NULL;
    if (d->count >= d->nbuckets) grow(d);
    if (!d->nbuckets) return NULL;
    dict_entry *e = malloc(sizeof *e + d->extra + klen);
    if (!e) return NULL;
    uint64_t h = hash_bytes(key, klen);
    e->hash = (uint32_t)h;
    e->klen = (uint32_t)klen;
    memset(e->mem, 0, d->extra);
    memcpy(e->mem + d->extra, key, klen);
    dict_entry **s = &d->buckets[h & (d->nbuckets - 1)];
    e->next = *s;
    *s = e;
    d->count++;
    return e;
}

void dict_delete(dict *d, dict_entry *e) {
    dict_entry **pp = &d->buckets[e->hash & (d->nbuckets - 1)];
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    free(e);
    d->count--;
    maybe_shrink(d);
}

void dict_clear(dict *d, void (*fn)(dict *d, dict_entry *e, void *arg),
                void *arg) {
    for (size_t i = 0; i < d->nbuckets && d->count; i++) {
        dict_entry *e = d->buckets[i];
        while (e) {
            dict_entry *next = e->next;
            if (fn) fn(d, e, arg);
            free(e);
            d->count--;
            e = next;
        }
        d->buckets[i] = NULL;
    }
    /* the table goes too: the next add makes a small one */
    free(d->buckets);
    d->buckets = NULL;
    d->nbuckets = 0;
}

void dict_free(dict *d) {
    dict_clear(d, NULL, NULL);
    free(d->buckets);
    d->buckets = NULL;
    d->nbuckets = 0;
}

static uint64_t reverse(uint64_t v) {
    v = ((v >> 1) & 0x5555555555555555ull) | ((v & 0x5555555555555555ull) << 1);
    v = ((v >> 2) & 0x3333333333333333ull) | ((v & 0x3333333333333333ull) << 2);
    v = ((v >> 4) & 0x0f0f0f0f0f0f0f0full) | ((v & 0x0f0f0f0f0f0f0f0full) << 4);
    v = ((v >> 8) & 0x00ff00ff00ff00ffull) | ((v & 0x00ff00ff00ff00ffull) << 8);
    v = ((v >> 16) & 0x0000ffff0000ffffull) |
        ((v & 0x0000ffff0000ffffull) << 16);
    return (v >> 32) | (v << 32);
}

uint64_t dict_scan(const dict *d, uint64_t cursor, size_t count,
                   void (*fn)(const dict *d, dict_entry *e, void *arg),
                   void *arg) {
    if (d->count == 0) return 0;
    uint64_t mask = d->nbuckets - 1;
    size_t seen = 0;
    do {
        for (dict_entry *e = d->buckets[cursor & mask]; e; e = e->next) {
            fn(d, e, arg);
            seen++;
        }
        /* The next index in reversed-bit order: set the bits above the
         * mask, so the increment of the reversed value carries into the
         * bits that matter. A cursor from a smaller table goes on where
         * it left off; one from a larger table visits what it had not. */
        cursor |= ~mask;
        cursor = reverse(cursor);
        cursor++;
        cursor = reverse(cursor);
    } while (cursor && seen < count);
    return cursor;
}
