/* types.c: lists, sets, hashes and sorted sets (see types.h).
 *
 * Invariants. list: n <= cap, cap a power of two (or 0). set: arr[i] is a
 * member whose index is i, for i < d.count. zset: the nodes at level 0
 * are every member, in (score, member) order; at level i > 0 a subset;
 * lv[i].span counts the level-0 steps a link covers; back links the
 * level-0 order backwards; every member's dict entry points at its node
 * and holds its score. */
#include "types.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int elem_copy(kv_elem *e, const char *p, size_t len) {
    char *to = e->u.in;
    if (len > KV_ELEM_INLINE && !(to = e->u.heap = malloc(len))) return -ENOMEM;
    if (len) memcpy(to, p, len);
    e->len = len;
    return 0;
}

/* A small xorshift generator for set_random and skip-list levels: the
 * choice needs no quality, and a replica never repeats it (SPOP is logged
 * as the SREM of what it popped). */
static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;

void types_seed(uint64_t seed) {
    rnd_state = seed ? seed : 0x9e3779b97f4a7c15ull; /* xorshift: never 0 */
}

static uint64_t rnd(void) {
    uint64_t x = rnd_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rnd_state = x;
}

/* ------------------------------------------------------------- lists */

kv_list *list_new(void) {
    return calloc(1, sizeof(kv_list));
}

void list_free(kv_list *l) {
    if (!l) return;
    for (size_t i = 0; i < l->n; i++)
        elem_free(list_at(l, i));
    free(l->a);
    free(l);
}

/* The slots of a list (or a set's array) to start with. */
#define MIN_SLOTS 8

/* Moves the elements to a ring of cap slots (cap >= n), from slot 0. */
static int list_resize(kv_list *l, size_t cap) {
    kv_elem *a = malloc(cap * sizeof *a);
    if (!a) return -ENOMEM;
    for (size_t i = 0; i < l->n; i++)
        a[i] = *list_at(l, i);
    free(l->a);
    l->a = a;
    l->cap = cap;
    l->head = 0;
    return 0;
}

static int list_grow(kv_list *l) {
    return list_resize(l, l->cap ? l->cap * 2 : MIN_SLOTS);
}

/* A ring under 1/4 full shrinks, by halves, until it is not (a queue
 * that once held 10^6 elements would otherwise keep 16 MiB of slots for
 * good): at most half full after it and doubled only once full, so
 * pushes and pops around a length never resize back and forth, and each
 * copy is paid for by the pops since the last one. Out of memory, the
 * ring just stays large. */
static void list_fit(kv_list *l) {
    if (l->n == 0) return; /* an emptied list is about to go */
    size_t cap = l->cap;
    while (cap > MIN_SLOTS && l->n < cap / 4)
        cap /= 2;
    if (cap != l->cap) list_resize(l, cap);
}

int list_push(kv_list *l, bool left, const char *p, size_t len) {
    if (l->n == l->cap && list_grow(l) < 0) return -ENOMEM;
    kv_elem e;
    if (elem_copy(&e, p, len) < 0) return -ENOMEM;
    if (left) {
        l->head = (l->head - 1) & (l->cap - 1);
        l->a[l->head] = e;
    } else {
        *list_at(l, l->n) = e;
    }
    l->n++;
    return 0;
}

void list_pop(kv_list *l, bool left, kv_elem *e) {
    if (left) {
        *e = l->a[l->head];
        l->head = (l->head + 1) & (l->cap - 1);
    } else {
        *e = *list_at(l, l->n - 1);
    }
    l->n--;
    list_fit(l);
}

int list_insert(kv_list *l, size_t i, const char *p, size_t len) {
    if (l->n == l->cap && list_grow(l) < 0) return -ENOMEM;
    kv_elem e;
    if (elem_copy(&e, p, len) < 0) return -ENOMEM;
    if (i < l->n / 2) { /* the head side moves a slot left */
        l->head = (l->head - 1) & (l->cap - 1);
        for (size_t j = 0; j < i; j++)
            *list_at(l, j) = *list_at(l, j + 1);
    } else { /* the tail side a slot right */
        for (size_t j = l->n; j > i; j--)
            *list_at(l, j) = *list_at(l, j - 1);
    }
    *list_at(l, i) = e;
    l->n++;
    return 0;
}

int list_set(kv_list *l, size_t i, const char *p, size_t len) {
    kv_elem e;
    if (elem_copy(&e, p, len) < 0) return -ENOMEM;
    elem_free(list_at(l, i));
    *list_at(l, i) = e;
    return 0;
}

static bool elem_is(const kv_elem *e, const char *p, size_t len) {
    return e->len == len && memcmp(elem_bytes(e), p, len) == 0;
}

size_t list_remove(kv_list *l, const char *p, size_t len, uint64_t most,
                   bool from_tail) {
    size_t gone = 0, n = l->n;
    /* The kept elements close up towards the end the walk starts from:
     * slot w (counted from that end) takes the next one kept. */
    for (size_t r = 0, w = 0; r < n; r++) {
        kv_elem *x = list_at(l, from_tail ? n - 1 - r : r);
        if ((most == 0 || gone < most) && elem_is(x, p, len)) {
            elem_free(x);
            gone++;
            continue;
        }
        if (w != r) *list_at(l, from_tail ? n - 1 - w : w) = *x;
        w++;
    }
    if (from_tail) l->head = (l->head + gone) & (l->cap - 1);
    l->n -= gone;
    list_fit(l);
    return gone;
}

void list_trim(kv_list *l, size_t left, size_t right) {
    kv_elem e;
    while (left--) {
        list_pop(l, true, &e);
        elem_free(&e);
    }
    while (right--) {
        list_pop(l, false, &e);
        elem_free(&e);
    }
}

/* -------------------------------------------------------------- sets */

kv_set *set_new(void) {
    kv_set *s = calloc(1, sizeof *s);
    if (s) dict_init(&s->d, sizeof(size_t));
    return s;
}

void set_free(kv_set *s) {
    if (!s) return;
    dict_free(&s->d);
    free(s->arr);
    free(s);
}

static size_t *set_index(dict_entry *e) {
    return (size_t *)dict_data(e);
}

int set_add(kv_set *s, const char *m, size_t len) {
    if (dict_find(&s->d, m, len)) return 0;
    if (s->d.count == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : MIN_SLOTS;
        dict_entry **a = realloc(s->arr, cap * sizeof *a);
        if (!a) return -ENOMEM;
        s->arr = a;
        s->cap = cap;
    }
    dict_entry *e = dict_add(&s->d, m, len);
    if (!e) return -ENOMEM;
    *set_index(e) = s->d.count - 1;
    s->arr[s->d.count - 1] = e;
    return 1;
}

void set_delete(kv_set *s, dict_entry *e) {
    size_t i = *set_index(e);
    size_t last = s->d.count - 1;
    if (i != last) {
        s->arr[i] = s->arr[last];
        *set_index(s->arr[i]) = i;
    }
    dict_delete(&s->d, e);
    /* Under 1/4 full, the array halves (as a list's ring does). */
    if (s->cap > MIN_SLOTS && s->d.count < s->cap / 4) {
        dict_entry **a = realloc(s->arr, s->cap / 2 * sizeof *a);
        if (a) {
            s->arr = a;
            s->cap /= 2;
        }
    }
}

dict_entry *set_random(kv_set *s) {
    return s->arr[rnd() % s->d.count];
}

void set_pick(kv_set *s, size_t n) {
    size_t count = s->d.count;
    for (size_t i = count; i > count - n; i--) {
        size_t j = rnd() % i; /* among arr[0 .. i - 1], not yet picked */
        dict_entry *t = s->arr[j];
        s->arr[j] = s->arr[i - 1];
        s->arr[i - 1] = t;
        *set_index(s->arr[j]) = j;
        *set_index(t) = i - 1;
    }
}

uint64_t types_random(uint64_t n) {
    return rnd() % n;
}

/* ------------------------------------------------------------ hashes */

kv_hash *hash_new(void) {
    kv_hash *h = calloc(1, sizeof *h);
    if (h) dict_init(&h->d, sizeof(kv_elem));
    return h;
}

static void free_value(dict *d, dict_entry *e, void *arg) {
    (void)d;
    (void)arg;
    elem_free(hash_value(e));
}

void hash_free(kv_hash *h) {
    if (!h) return;
    dict_clear(&h->d, free_value, NULL);
    dict_free(&h->d);
    free(h);
}

int hash_set(kv_hash *h, const char *f, size_t flen, const char *v,
             size_t vlen) {
    dict_entry *e = dict_find(&h->d, f, flen);
    if (e) {
        /* The old value's memory takes the new one: as long, or both
         * short enough to be held inline, it is written over (no malloc
         * and free a request, redis-benchmark's HSET setting one field
         * again and again); otherwise a new copy replaces it, and a copy
         * that fails leaves the old value. */
        kv_elem *old = hash_value(e);
        if (vlen == old->len ||
            (vlen <= KV_ELEM_INLINE && old->len <= KV_ELEM_INLINE)) {
            if (vlen) memcpy((char *)elem_bytes(old), v, vlen);
            old->len = vlen;
            return 0;
        }
        kv_elem val;
        if (elem_copy(&val, v, vlen) < 0) return -ENOMEM;
        elem_free(old);
        *old = val;
        return 0;
    }
    kv_elem val;
    if (elem_copy(&val, v, vlen) < 0) return -ENOMEM;
    e = dict_add(&h->d, f, flen);
    if (!e) {
        elem_free(&val);
        return -ENOMEM;
    }
    *hash_value(e) = val;
    return 1;
}

void hash_delete(kv_hash *h, dict_entry *e) {
    elem_free(hash_value(e));
    dict_delete(&h->d, e);
}

/* ------------------------------------------------------- sorted sets */

static znode *node_new(int level, double score, dict_entry *m) {
    znode *n = calloc(1, sizeof *n + (size_t)level * sizeof n->lv[0]);
    if (n) {
        n->score = score;
        n->member = m;
    }
    return n;
}

kv_zset *zset_new(void) {
    kv_zset *z = calloc(1, sizeof *z);
    if (!z) return NULL;
    dict_init(&z->d, sizeof(zmember));
    z->head = node_new(ZSET_MAXLEVEL, 0, NULL);
    if (!z->head) {
        free(z);
        return NULL;
    }
    z->level = 1;
    return z;
}

void zset_free(kv_zset *z) {
    if (!z) return;
    znode *n = z->head;
    while (n) {
        znode *next = n->lv[0].fwd;
        free(n);
        n = next;
    }
    dict_free(&z->d);
    free(z);
}

/* Whether (score, name) of node n comes before (score, m). */
static bool before(const kv_zset *z, const znode *n, double score,
                   const char *m, size_t len) {
    if (n->score != score) return n->score < score;
    size_t nlen;
    const char *name = znode_name(z, n, &nlen);
    int c = memcmp(name, m, nlen < len ? nlen : len);
    return c < 0 || (c == 0 && nlen < len);
}

/* A level for a new node: 1, then one more with probability 1/4 (Redis'
 * and Pugh's choice: few levels, short searches). */
static int random_level(void) {
    int level = 1;
    while (level < ZSET_MAXLEVEL && (rnd() & 3) == 0)
        level++;
    return level;
}

/* Links a new node for member e at score. */
static znode *insert(kv_zset *z, dict_entry *e, double score) {
    znode *update[ZSET_MAXLEVEL];
    size_t rank[ZSET_MAXLEVEL];
    size_t len;
    const char *m = (const char *)dict_key(&z->d, e);
    len = e->klen;
    znode *x = z->head;
    for (int i = z->level - 1; i >= 0; i--) {
        rank[i] = i == z->level - 1 ? 0 : rank[i + 1];
        while (x->lv[i].fwd && before(z, x->lv[i].fwd, score, m, len)) {
            rank[i] += x->lv[i].span;
            x = x->lv[i].fwd;
        }
        update[i] = x;
    }
    int level = random_level();
    znode *n = node_new(level, score, e);
    if (!n) return NULL;
    if (level > z->level) {
        for (int i = z->level; i < level; i++) {
            rank[i] = 0;
            update[i] = z->head;
            update[i]->lv[i].span = z->nodes; /* to the end */
        }
        z->level = level;
    }
    for (int i = 0; i < level; i++) {
        n->lv[i].fwd = update[i]->lv[i].fwd;
        update[i]->lv[i].fwd = n;
        n->lv[i].span = update[i]->lv[i].span - (rank[0] - rank[i]);
        update[i]->lv[i].span = rank[0] - rank[i] + 1;
    }
    for (int i = level; i < z->level; i++)
        update[i]->lv[i].span++;
    z->nodes++;
    n->back = update[0] == z->head ? NULL : update[0];
    if (n->lv[0].fwd)
        n->lv[0].fwd->back = n;
    else
        z->tail = n;
    return n;
}

/* Unlinks node n (the member's entry stays). */
static void unlink_node(kv_zset *z, znode *n) {
    znode *update[ZSET_MAXLEVEL];
    size_t len;
    const char *m = znode_name(z, n, &len);
    znode *x = z->head;
    for (int i = z->level - 1; i >= 0; i--) {
        while (x->lv[i].fwd && x->lv[i].fwd != n &&
               before(z, x->lv[i].fwd, n->score, m, len))
            x = x->lv[i].fwd;
        update[i] = x;
    }
    for (int i = 0; i < z->level; i++) {
        if (update[i]->lv[i].fwd == n) {
            update[i]->lv[i].span += n->lv[i].span - 1;
            update[i]->lv[i].fwd = n->lv[i].fwd;
        } else {
            update[i]->lv[i].span--;
        }
    }
    if (n->lv[0].fwd)
        n->lv[0].fwd->back = n->back;
    else
        z->tail = n->back;
    while (z->level > 1 && !z->head->lv[z->level - 1].fwd)
        z->level--;
    z->nodes--;
    free(n);
}

int zset_set(kv_zset *z, const char *m, size_t len, double score) {
    dict_entry *e = dict_find(&z->d, m, len);
    if (e) {
        zmember *zm = zset_member(e);
        if (zm->score == score) return 0;
        /* Moved: unlinked and linked again at its new place. A new node
         * is made first, so a failed allocation leaves it where it was. */
        znode *old = zm->node;
        znode *n = insert(z, e, score);
        if (!n) return -ENOMEM;
        zm->node = n;
        zm->score = score;
        /* insert placed n beside old (same member, another score); old
         * is found by identity. */
        unlink_node(z, old);
        return 0;
    }
    e = dict_add(&z->d, m, len);
    if (!e) return -ENOMEM;
    znode *n = insert(z, e, score);
    if (!n) {
        dict_delete(&z->d, e);
        return -ENOMEM;
    }
    zset_member(e)->score = score;
    zset_member(e)->node = n;
    return 1;
}

void zset_delete(kv_zset *z, dict_entry *e) {
    unlink_node(z, zset_member(e)->node);
    dict_delete(&z->d, e);
}

znode *zset_at(const kv_zset *z, size_t r) {
    size_t want = r + 1, at = 0;
    znode *x = z->head;
    for (int i = z->level - 1; i >= 0; i--) {
        while (x->lv[i].fwd && at + x->lv[i].span <= want) {
            at += x->lv[i].span;
            x = x->lv[i].fwd;
        }
        if (at == want) return x;
    }
    return NULL;
}

size_t zset_rank(const kv_zset *z, const znode *n) {
    size_t len, rank = 0;
    const char *m = znode_name(z, n, &len);
    const znode *x = z->head;
    for (int i = z->level - 1; i >= 0; i--) {
        while (x->lv[i].fwd && (x->lv[i].fwd == n ||
                                before(z, x->lv[i].fwd, n->score, m, len))) {
            rank += x->lv[i].span;
            x = x->lv[i].fwd;
        }
        if (x == n) break;
    }
    return rank - 1; /* the spans count n itself */
}

size_t zset_count_below(const kv_zset *z, double s, bool or_equal) {
    size_t rank = 0;
    const znode *x = z->head;
    for (int i = z->level - 1; i >= 0; i--) {
        while (x->lv[i].fwd && (x->lv[i].fwd->score < s ||
                                (or_equal && x->lv[i].fwd->score == s))) {
            rank += x->lv[i].span;
            x = x->lv[i].fwd;
        }
    }
    return rank;
}
