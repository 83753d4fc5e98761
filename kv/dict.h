/* dict.h: lull-kv's hash table from byte-string keys to entries of its
 * user's, used for the keyspace and inside sets, hashes and sorted sets.
 *
 * An entry is one allocation: the table's link and hash (16 bytes), `extra`
 * bytes of the user's (dict_data: a value, a score, an index ...), then
 * the key. The table chains collisions and doubles once it holds as many
 * entries as buckets, so chains stay short on average (past 2^32 buckets
 * it stops doubling: 32 GiB of buckets; its chains then grow). The hash is
 * FNV-1a: short, and good enough for keys a benchmark or a test chooses (not
 * hardened against keys chosen to collide, which a server facing untrusted
 * clients would need: a keyed hash such as SipHash). Growing is done all at
 * once, so the insert that grows the table pays for it: fine for an example, a
 * known stall for a real server (Redis rehashes a step at a time).
 *
 * dict_scan walks the table with a cursor that survives the table growing
 * between calls: buckets are visited in the order of their index's bits
 * reversed, so that the buckets a bucket splits into when the table
 * doubles come after it. Every entry present for the whole walk is
 * returned at least once, as Redis' SCAN promises.
 *
 * Pure data structure: no lull. One thread owns it. */
#ifndef LULL_KV_DICT_H
#define LULL_KV_DICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dict_entry {
    struct dict_entry *next; /* the bucket's chain */
    uint32_t hash; /* the key's hash's low half: its bucket in a table of
                      up to 2^32 (DICT_MAX_BUCKETS), and a quick compare */
    uint32_t klen;
    /* then the user's extra bytes (aligned for any scalar), then the key */
    _Alignas(8) unsigned char mem[];
} dict_entry;

typedef struct dict {
    dict_entry **buckets; /* chains; nbuckets is a power of two, or 0 */
    size_t nbuckets;
    size_t count; /* entries held */
    size_t extra; /* the user's bytes per entry (a multiple of 8) */
} dict;

/* extra: bytes of the user's per entry. No allocation until the first
 * add. */
void dict_init(dict *d, size_t extra);
/* Frees every entry (the user frees what its data points to first). */
void dict_free(dict *d);

/* Keys the hash (every dict's, process-wide); before any dict holds an
 * entry. Without a call the hash uses a fixed key, so runs repeat
 * (the simulator, tests); lull-kv calls it with a random seed. */
void dict_seed(uint64_t seed);
uint64_t dict_hash(const char *key, size_t klen);

static inline void *dict_data(dict_entry *e) {
    return e->mem;
}
static inline const char *dict_key(const dict *d, const dict_entry *e) {
    return (const char *)e->mem + d->extra;
}

dict_entry *dict_find(const dict *d, const char *key, size_t klen);
/* Adds key (which must not be there); its data is zeroed. NULL when out
 * of memory. */
dict_entry *dict_add(dict *d, const char *key, size_t klen);
/* Unlinks e (it must be in d) and frees it; the table halves when
 * under 1/8 full (other entries stay where they are in memory). */
void dict_delete(dict *d, dict_entry *e);
/* Unlinks every entry, calling fn on each (to free its data) first,
 * and frees the table (the next add makes a small one). */
void dict_clear(dict *d, void (*fn)(dict *d, dict_entry *e, void *arg),
                void *arg);

/* One step of a walk: calls fn on the entries of the next bucket or so
 * (at least `count` entries when there are that many left), and returns
 * the cursor to continue from; 0 when the walk is done. Start at 0. fn
 * must not add or delete entries. */
uint64_t dict_scan(const dict *d, uint64_t cursor, size_t count,
                   void (*fn)(const dict *d, dict_entry *e, void *arg),
                   void *arg);

#endif
