/* store.h: lull-kv's keyspace: keys (byte strings) to values of one of
 * Redis' types, and the keys' expiry times. One thread (the loop's) owns
 * it.
 *
 * Expiry. A key may carry an expiry time, in milliseconds on the clock of
 * the keyspace's owner (cmd.c keeps it: the loop's monotonic clock, put
 * on the Unix epoch once at start). The keys that carry one are also in a
 * binary min-heap ordered by that time, so the earliest is found at once
 * and a change costs O(log n): the owner arms one lull timer for the
 * earliest expiry, not one per key (docs/KV.md has the measurement behind
 * the choice). The heap is an array of (expiry time, entry) pairs, and
 * each entry keeps its place in it: 20 bytes per key that expires, 4 for
 * one that does not (its place, 0). The time is read from the heap: in
 * the entry it made every key's 8 bytes longer, and a key of a
 * benchmark's (10 bytes) took malloc's 80-byte size class, not 64. */
#ifndef LULL_KV_STORE_H
#define LULL_KV_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dict.h"

enum { KV_STRING, KV_LIST, KV_SET, KV_HASH, KV_ZSET };

/* A string this short (a flag, a counter below 10^8: most values) is
 * kept in the place of its pointer, in the key's entry: no allocation of
 * its own (16 to 32 bytes of malloc's, and a miss, saved per key). */
#define KOBJ_INLINE sizeof(void *)

/* A key's value and expiry: the user data of its dict entry. */
typedef struct kobj {
    union {
        void *val;               /* a collection (types.h), or a string's
                                    bytes when longer than KOBJ_INLINE:
                                    malloc'd, a blob's from KV_BLOB_MIN
                                    bytes on (blob.h) */
        char small[KOBJ_INLINE]; /* a string of at most that: its bytes */
    };
    size_t len;    /* string: its length (which says where its bytes are) */
    uint32_t heap; /* its index in the expiry heap + 1; 0: no expiry */
    uint8_t type;  /* KV_* */
} kobj;

/* A key with an expiry, in the heap. */
typedef struct store_timed {
    int64_t expire; /* when the key expires (ms, see above); never 0 */
    dict_entry *e;  /* the key */
} store_timed;

typedef struct store {
    dict d;            /* the keys */
    store_timed *heap; /* the keys with an expiry, a min-heap by it */
    size_t nheap, heap_cap;
    /* The sum of the heap's times, 128 bits (low, high word), for INFO
     * keyspace's avg_ttl: kept as times come and go, never summed by a
     * walk. */
    uint64_t expire_sum[2];
    bool plant_int32;        /* test only: KV_PLANT_INT32 (repl.h) */
    bool plant_same_length;  /* test only: KV_PLANT_SAME_LENGTH */
    bool plant_blob_inplace; /* test only: KV_PLANT_BLOB_INPLACE */
} store;

int store_init(store *st);   /* 0 or -ENOMEM */
void store_free(store *st);  /* drops every key */
void store_clear(store *st); /* FLUSHALL: drops every key and the table */

static inline kobj *store_obj(dict_entry *e) {
    return (kobj *)dict_data(e);
}
static inline size_t store_count(const store *st) {
    return st->d.count;
}

/* The key's entry, expired or not (cmd.c decides what an expired key
 * means), or NULL. */
static inline dict_entry *store_find(const store *st, const char *key,
                                     size_t klen) {
    return dict_find(&st->d, key, klen);
}
/* A string's bytes (kobj_str_resize or store_put change them). */
static inline char *kobj_str(kobj *o) {
    return o->len <= KOBJ_INLINE ? o->small : (char *)o->val;
}
/* Makes o's string len bytes long and writable, its first bytes kept
 * (the rest not set): in the entry up to KOBJ_INLINE, a blob from
 * KV_BLOB_MIN on, and a blob a reply still reads is copied first. Its
 * bytes, or NULL when out of memory (o unchanged). */
char *kobj_str_resize(kobj *o, size_t len);

/* Adds a key (which must not be there) holding an empty value of `type`
 * (for a string: no bytes, len 0; else val NULL). NULL when out of
 * memory. */
dict_entry *store_add(store *st, const char *key, size_t klen, int type);
/* Drops the key: its value, its expiry, the entry. */
void store_delete(store *st, dict_entry *e);
/* Frees a value (strings and collections alike); o is left empty. */
void store_value_free(kobj *o);

/* Whether a key with expiry time `expire` (0: none) is gone at `now` (ms).
 * Redis' rule: only once the clock is past it (now > expire), not when
 * it reads it. The clock counts whole ms, so a key set at x.8 ms with
 * PX 20 reads x + 20 at 19.2 ms after its SET; `>=` would drop it then,
 * before its time as its client measures it. The one rule for commands,
 * the expiry timer and the simulator's model. */
static inline bool store_expired(int64_t expire, int64_t now) {
    return expire && now > expire;
}

/* The key's expiry time (ms), 0 when it has none. */
static inline int64_t store_expire(const store *st, dict_entry *e) {
    uint32_t i = store_obj(e)->heap;
    return i ? st->heap[i - 1].expire : 0;
}

/* Sets (when > 0) or clears (0) the key's expiry time. 0, or -ENOMEM
 * (the heap could not grow: nothing changed). */
int store_set_expire(store *st, dict_entry *e, int64_t when);
/* The mean of the keys' expiry times (ms), or 0 when none has one. */
int64_t store_mean_expire(const store *st);
/* The key that expires first, or NULL when none has an expiry. */
static inline dict_entry *store_first_expiry(const store *st) {
    return st->nheap ? st->heap[0].e : NULL;
}

/* Strings, for the commands and the tests. The value of key (expired or
 * not), or NULL when it is missing or not a string; *vlen gets its
 * length. Valid until the next change to that key. */
const char *store_get(const store *st, const char *key, size_t klen,
                      size_t *vlen);
/* Sets key to a string copy of val, keeping its expiry (the caller
 * decides about that). 0 or -ENOMEM (the key is then unchanged). *out,
 * when not NULL, gets the entry. */
int store_set(store *st, const char *key, size_t klen, const char *val,
              size_t vlen);
/* store_set for a key already looked up: *pe is its entry (NULL when it
 * is missing: it is added, and *pe set). One lookup per SET, not two. */
int store_put(store *st, dict_entry **pe, const char *key, size_t klen,
              const char *val, size_t vlen);
/* SET of an argument received into a blob of its own (blob.h), vlen >=
 * KV_BLOB_MIN: the blob becomes the value, no copy. 1 when it was taken
 * (the caller's hold on it is the store's now), 0 when not (the caller
 * keeps it), or -ENOMEM (likewise; the key is unchanged). */
int store_take(store *st, dict_entry **pe, const char *key, size_t klen,
               char *blob, size_t vlen);
/* Frees a string's bytes of length len (> KOBJ_INLINE: out of the
 * entry): a blob's hold, or its memory. */
void store_str_free(char *v, size_t len);
int store_set_entry(store *st, const char *key, size_t klen, const char *val,
                    size_t vlen, dict_entry **out);
/* RENAME: key `to` (an entry of st other than from: an old key or one
 * just added) takes from's value and expiry, its own dropped; from goes.
 * No allocation: the value moves, and `to` takes from's place in the
 * expiry heap (the same time there). */
void store_move(store *st, dict_entry *from, dict_entry *to);
/* 1 when the key was there and is gone, 0 when it was not there. */
int store_del(store *st, const char *key, size_t klen);

#endif
