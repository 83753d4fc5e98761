/* dump.c: a keyspace as text (see dump.h). Allocates per key: for tests
 * and checks, not for a server's hot path. */
#include "dump.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_int.h"
#include "types.h"

/* Keys, members and fields are bytes (a NUL inside is theirs, any
 * length): each is kept with its length, ordered as memcmp orders them
 * (the order strcmp gave for text), and written whole. As C strings a key
 * holding a NUL was looked up by its part before the NUL (not found: a
 * crash), a member was cut there, and a key name cut at ~500 bytes, so two
 * keyspaces differing there dumped equal. */
typedef struct item {
    char *p;
    size_t len;
} item;

/* Each key, member, field and value is written after its length ("3:abc"):
 * with separators alone a list of "a,b" dumped as the list of "a" and "b",
 * and a hash's field "a=b" of "c" as field "a" of "b=c". */
static size_t put_len(char *at, size_t len) {
    return (size_t)sprintf(at, "%zu:", len);
}

static void put_item(buf *d, const char *p, size_t len) {
    char n[24];
    buf_put(d, n, put_len(n, len));
    buf_put(d, p, len);
}

static int cmp_item(const void *a, const void *b) {
    const item *x = a, *y = b;
    int c = memcmp(x->p, y->p, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* Every key of k, in key order, with its type, value (sets and hashes
 * sorted) and expiry: two keyspaces are equal when their dumps are. */
void kv_dump(kv *k, buf *d) {
    d->len = 0;
    size_t n = store_count(&k->db), i = 0;
    item *keys = malloc((n + 1) * sizeof *keys);
    for (size_t b = 0; b < k->db.d.nbuckets; b++)
        for (dict_entry *e = k->db.d.buckets[b]; e; e = e->next) {
            keys[i].p = malloc(e->klen + 1);
            memcpy(keys[i].p, dict_key(&k->db.d, e), e->klen);
            keys[i].len = e->klen;
            i++;
        }
    qsort(keys, n, sizeof *keys, cmp_item);
    char line[512];
    for (i = 0; i < n; i++) {
        dict_entry *e = store_find(&k->db, keys[i].p, keys[i].len);
        kobj *o = store_obj(e);
        put_item(d, keys[i].p, keys[i].len);
        snprintf(line, sizeof line, " type=%d expire=%lld: ", o->type,
                 (long long)store_expire(&k->db, e));
        buf_str(d, line);
        item *items = NULL;
        size_t m = 0;
        if (o->type == KV_STRING) {
            put_item(d, kobj_str(o), o->len);
        } else if (o->type == KV_LIST) {
            kv_list *l = o->val;
            for (size_t j = 0; j < l->n; j++) {
                put_item(d, elem_bytes(list_at(l, j)), list_at(l, j)->len);
                buf_str(d, ",");
            }
        } else if (o->type == KV_ZSET) {
            kv_zset *z = o->val;
            for (znode *x = z->head->lv[0].fwd; x; x = x->lv[0].fwd) {
                size_t len;
                const char *name = znode_name(z, x, &len);
                put_item(d, name, len);
                snprintf(line, sizeof line, "=%.17g,", x->score);
                buf_str(d, line);
            }
        } else {
            dict *sd = o->type == KV_SET ? &((kv_set *)o->val)->d
                                         : &((kv_hash *)o->val)->d;
            items = malloc((sd->count + 1) * sizeof *items);
            for (size_t b = 0; b < sd->nbuckets; b++)
                for (dict_entry *f = sd->buckets[b]; f; f = f->next) {
                    kv_elem *v = o->type == KV_HASH ? hash_value(f) : NULL;
                    char *at = malloc(f->klen + (v ? v->len : 0) + 48);
                    items[m].p = at;
                    at += put_len(at, f->klen);
                    memcpy(at, dict_key(sd, f), f->klen);
                    at += f->klen;
                    if (v) {
                        *at++ = '=';
                        at += put_len(at, v->len);
                        memcpy(at, elem_bytes(v), v->len);
                        at += v->len;
                    }
                    items[m].len = (size_t)(at - items[m].p);
                    m++;
                }
            qsort(items, m, sizeof *items, cmp_item);
            for (size_t j = 0; j < m; j++) {
                buf_put(d, items[j].p, items[j].len);
                buf_str(d, ",");
                free(items[j].p);
            }
            free(items);
        }
        buf_str(d, "\n");
        free(keys[i].p);
    }
    free(keys);
    buf_put(d, "", 1);
}
