/* dump.c: a keyspace as text (see dump.h). Allocates per key: for tests
 * and checks, not for a server's hot path. */
#include "dump.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_int.h"
#include "types.h"

/* Every key of k, in key order, with its type, value (sets and hashes
 * sorted) and expiry: two keyspaces are equal when their dumps are. */
static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void kv_dump(kv *k, buf *d) {
    d->len = 0;
    size_t n = store_count(&k->db), i = 0;
    char **keys = malloc((n + 1) * sizeof *keys);
    for (size_t b = 0; b < k->db.d.nbuckets; b++)
        for (dict_entry *e = k->db.d.buckets[b]; e; e = e->next) {
            keys[i] = malloc(e->klen + 1);
            memcpy(keys[i], dict_key(&k->db.d, e), e->klen);
            keys[i][e->klen] = 0;
            i++;
        }
    qsort(keys, n, sizeof *keys, cmp_str);
    char line[512];
    for (i = 0; i < n; i++) {
        dict_entry *e = store_find(&k->db, keys[i], strlen(keys[i]));
        kobj *o = store_obj(e);
        snprintf(line, sizeof line, "%s type=%d expire=%lld: ", keys[i],
                 o->type, (long long)o->expire);
        buf_str(d, line);
        char **items = NULL;
        size_t m = 0;
        if (o->type == KV_STRING) {
            buf_put(d, o->val, o->len);
        } else if (o->type == KV_LIST) {
            kv_list *l = o->val;
            for (size_t j = 0; j < l->n; j++) {
                buf_put(d, list_at(l, j)->p, list_at(l, j)->len);
                buf_str(d, ",");
            }
        } else if (o->type == KV_ZSET) {
            kv_zset *z = o->val;
            for (znode *x = z->head->lv[0].fwd; x; x = x->lv[0].fwd) {
                size_t len;
                const char *name = znode_name(z, x, &len);
                buf_put(d, name, len);
                snprintf(line, sizeof line, "=%.17g,", x->score);
                buf_str(d, line);
            }
        } else {
            dict *sd = o->type == KV_SET ? &((kv_set *)o->val)->d
                                         : &((kv_hash *)o->val)->d;
            items = malloc(sd->count * sizeof *items);
            for (size_t b = 0; b < sd->nbuckets; b++)
                for (dict_entry *f = sd->buckets[b]; f; f = f->next) {
                    kv_elem *v = o->type == KV_HASH ? hash_value(f) : NULL;
                    items[m] = calloc(1, f->klen + (v ? v->len : 0) + 2);
                    memcpy(items[m], dict_key(sd, f), f->klen);
                    if (v) {
                        items[m][f->klen] = '=';
                        memcpy(items[m] + f->klen + 1, v->p, v->len);
                    }
                    m++;
                }
            qsort(items, m, sizeof *items, cmp_str);
            for (size_t j = 0; j < m; j++) {
                buf_str(d, items[j]);
                buf_str(d, ",");
                free(items[j]);
            }
            free(items);
        }
        buf_str(d, "\n");
        free(keys[i]);
    }
    free(keys);
    buf_put(d, "", 1);
}
