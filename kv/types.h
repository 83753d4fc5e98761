/* types.h: the collections a key can hold besides a string: lists, sets,
 * hashes and sorted sets, as plain data structures (no commands, no
 * replies: cmd_types.c has those). One thread owns them.
 *
 *  list  a ring buffer of elements: push and pop at both ends and index
 *        in O(1), a range in O(its length); the ring halves under 1/4
 *        full, as the set's array does
 *  set   a dict of members, plus an array of them for SPOP: a random
 *        member in O(1) (each member keeps its place in the array)
 *  hash  a dict from field to value
 *  zset  a dict from member to score, plus a skip list ordered by (score,
 *        member) whose links carry spans, so that a rank is found in
 *        O(log n): ZADD, ZPOPMIN, ZRANK, ZRANGE by rank or score
 *
 * Every element, field, value and member is a copy of its own; a list
 * element or hash value of up to KV_ELEM_INLINE bytes is held in its
 * slot, with no allocation (kv_elem). Memory failures return -ENOMEM and
 * leave the collection as it was. */
#ifndef LULL_KV_TYPES_H
#define LULL_KV_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "dict.h"

/* A list element or a hash value. Up to KV_ELEM_INLINE bytes are held in
 * the element itself, with no allocation of their own (redis-benchmark's
 * LPUSH pushes 3 bytes: a malloc a push, ~170 of its ~1,190 instructions
 * at -P 16, and a free a pop); longer ones in memory of their own. Read the
 * bytes with elem_bytes (good while the element stays where it is);
 * elem_free frees what it holds. */
#define KV_ELEM_INLINE 8
typedef struct kv_elem {
    union {
        char *heap;              /* len > KV_ELEM_INLINE: malloc'd */
        char in[KV_ELEM_INLINE]; /* len <= KV_ELEM_INLINE: the bytes */
    } u;
    size_t len; /* bytes */
} kv_elem;

static inline const char *elem_bytes(const kv_elem *e) {
    return e->len <= KV_ELEM_INLINE ? e->u.in : e->u.heap;
}
static inline void elem_free(kv_elem *e) {
    if (e->len > KV_ELEM_INLINE) free(e->u.heap);
}

/* ------------------------------------------------------------- lists */

typedef struct kv_list {
    kv_elem *a;  /* the ring: element i is a[(head + i) % cap] */
    size_t head; /* the first element's slot */
    size_t n;    /* elements */
    size_t cap;  /* slots (a power of two, or 0) */
} kv_list;

kv_list *list_new(void);
void list_free(kv_list *l);
/* Pushes a copy at the head (left) or the tail. 0 or -ENOMEM. */
int list_push(kv_list *l, bool left, const char *p, size_t len);
/* Takes the head or tail element (the caller elem_frees it). */
void list_pop(kv_list *l, bool left, kv_elem *e);
static inline kv_elem *list_at(kv_list *l, size_t i) {
    return &l->a[(l->head + i) & (l->cap - 1)];
}
/* LINSERT: a copy of p becomes element i (<= n), those from i on one
 * further; the shorter side moves, O(min(i, n - i)). 0 or -ENOMEM
 * (unchanged). */
int list_insert(kv_list *l, size_t i, const char *p, size_t len);
/* LSET: element i (< n) becomes a copy of p. 0 or -ENOMEM (unchanged). */
int list_set(kv_list *l, size_t i, const char *p, size_t len);
/* LREM: drops the elements equal to p, at most `most` of them (0: all),
 * from the head (or the tail when from_tail); how many went. One pass,
 * the rest keeping their order. */
size_t list_remove(kv_list *l, const char *p, size_t len, uint64_t most,
                   bool from_tail);
/* LTRIM: drops `left` elements from the head and `right` from the tail
 * (left + right <= n). */
void list_trim(kv_list *l, size_t left, size_t right);

/* -------------------------------------------------------------- sets */

typedef struct kv_set {
    dict d;           /* member -> its index in arr (size_t) */
    dict_entry **arr; /* the members, for a random pick */
    size_t cap;       /* arr's size; d.count members are in use */
} kv_set;

kv_set *set_new(void);
void set_free(kv_set *s);
/* 1 added, 0 already there, -ENOMEM. */
int set_add(kv_set *s, const char *m, size_t len);
/* Starts the random picks (SPOP's, SRANDMEMBER's, the skip list's
 * levels) over from seed: the simulator's seeds repeat (0: the default). */
void types_seed(uint64_t seed);
/* A number picked at random in [0, n), n > 0 (SRANDMEMBER's). */
uint64_t types_random(uint64_t n);
/* A member picked at random (the set must not be empty). */
dict_entry *set_random(kv_set *s);
/* Moves n members picked at random (n <= the count) to the end of arr,
 * arr[count - n .. count - 1], leaving the set as it was: SPOP sees what
 * it will take, and what its record needs, before it takes anything. */
void set_pick(kv_set *s, size_t n);
void set_delete(kv_set *s, dict_entry *e);

/* ------------------------------------------------------------ hashes */

typedef struct kv_hash {
    dict d; /* field -> kv_elem value */
} kv_hash;

kv_hash *hash_new(void);
void hash_free(kv_hash *h);
/* Sets field to a copy of val (which must not point into h): 1 a new
 * field, 0 an old one (its value's memory reused), -ENOMEM (unchanged). */
int hash_set(kv_hash *h, const char *f, size_t flen, const char *v,
             size_t vlen);
static inline kv_elem *hash_value(dict_entry *e) {
    return (kv_elem *)dict_data(e);
}
void hash_delete(kv_hash *h, dict_entry *e);

/* ------------------------------------------------------- sorted sets */

#define ZSET_MAXLEVEL 32

typedef struct znode znode;
struct znode {
    double score;
    dict_entry *member; /* its entry in the zset's dict (holds the name) */
    znode *back;        /* the previous node (NULL: the first) */
    struct zlevel {
        znode *fwd;  /* the next node at this level */
        size_t span; /* nodes crossed by following fwd */
    } lv[];
};

typedef struct kv_zset {
    dict d;      /* member -> zmember */
    znode *head; /* a node of ZSET_MAXLEVEL levels before the first */
    znode *tail;
    int level;    /* levels in use */
    size_t nodes; /* nodes in the list (one more than members while a
                     member moves) */
} kv_zset;

typedef struct zmember {
    double score;
    znode *node;
} zmember;

static inline zmember *zset_member(dict_entry *e) {
    return (zmember *)dict_data(e);
}
static inline size_t zset_len(const kv_zset *z) {
    return z->d.count;
}

kv_zset *zset_new(void);
void zset_free(kv_zset *z);
/* Adds member with score, or moves it to score. 1 added, 0 moved or
 * unchanged, -ENOMEM. */
int zset_set(kv_zset *z, const char *m, size_t len, double score);
void zset_delete(kv_zset *z, dict_entry *e);
/* The node of rank r (0-based, r < zset_len). */
znode *zset_at(const kv_zset *z, size_t r);
/* The rank (0-based) of node n, one of z's, in O(log n). */
size_t zset_rank(const kv_zset *z, const znode *n);
/* The members scored below s (or not above it, when or_equal): the rank
 * of the first one after them, in O(log n). */
size_t zset_count_below(const kv_zset *z, double s, bool or_equal);
static inline const char *znode_name(const kv_zset *z, const znode *n,
                                     size_t *len) {
    *len = n->member->klen;
    return dict_key(&z->d, n->member);
}

#endif
