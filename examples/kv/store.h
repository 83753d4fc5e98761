/* store.h: lull-kv's keyspace, an in-memory hash table from byte-string
 * keys to byte-string values. One thread (the loop's) owns it. */
#ifndef LULL_KV_STORE_H
#define LULL_KV_STORE_H

#include <stddef.h>

typedef struct store_entry store_entry;

typedef struct store {
    store_entry **buckets; /* chains; nbuckets is a power of two */
    size_t nbuckets;
    size_t count; /* keys held: DBSIZE */
} store;

int store_init(store *st);   /* 0 or -ENOMEM */
void store_free(store *st);  /* drops every key */
void store_clear(store *st); /* FLUSHALL: drops every key, keeps the table */
/* The value of key, or NULL; *vlen gets its length. Valid until the next
 * change to that key. */
const char *store_get(const store *st, const char *key, size_t klen,
                      size_t *vlen);
/* Sets key to a copy of val. 0 or -ENOMEM (the key is then unchanged). */
int store_set(store *st, const char *key, size_t klen, const char *val,
              size_t vlen);
/* 1 when the key was there and is gone, 0 when it was not there. */
int store_del(store *st, const char *key, size_t klen);

#endif
