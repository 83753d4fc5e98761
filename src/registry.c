/* Registries: a set of handles keyed by address, for the inits that must
 * refuse a handle still in use (lull_pump_init, lull_udp_init) when its
 * memory may be garbage (a handle is, before its first init): a lookup
 * hashes the address and never reads the handle, so garbage that looks
 * like a live handle (a copy of one) is not mistaken for it, and a handle
 * found there is one whose fields lull wrote.
 *
 * Open addressing with linear probing, at most half full (a lookup looks
 * at about two slots), and removal by moving back the rest of a run (no
 * tombstones, so lookups stay short after many removals). Loop thread
 * only; not a hot path (a handle's set-up and end). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "internal.h"

/* 16 slots to start with; the table doubles when it would be more than
 * half full. */
#define REGISTRY_MIN 16u

/* The first slot to look at: Fibonacci hashing (the top bits of the
 * address times 2^64 / phi), which spreads the evenly spaced addresses of
 * an array of handles over the table. */
static uint32_t home(const lull__registry *r, const void *h) {
    uint64_t x = (uint64_t)(uintptr_t)h * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(x >> (64 - __builtin_ctz(r->cap)));
}

/* h's slot, or the free slot where it would go. cap > 0, a slot free. */
static uint32_t slot_of(lull__registry *r, const void *h) {
    uint32_t mask = r->cap - 1;
    for (uint32_t i = home(r, h);; i = (i + 1) & mask) {
        r->probes++;
        if (r->slots[i] == h || !r->slots[i]) return i;
    }
}

bool lull__registry_has(lull__registry *r, const void *h) {
    return r->cap && r->slots[slot_of(r, h)] == h;
}

/* Doubles the table. Its moves are not counted as probes: they are the
 * amortized part of the adds, not lookups. */
static int grow(lull__registry *r) {
    uint32_t cap = r->cap ? 2 * r->cap : REGISTRY_MIN;
    if (cap <= r->cap) return -ENOMEM; /* 2^31 handles */
    const void **slots = calloc(cap, sizeof *slots);
    if (!slots) return -ENOMEM;
    lull__registry grown = {.slots = slots, .cap = cap, .len = r->len};
    for (uint32_t i = 0; i < r->cap; i++)
        if (r->slots[i]) slots[slot_of(&grown, r->slots[i])] = r->slots[i];
    free(r->slots);
    grown.probes = r->probes;
    *r = grown;
    return 0;
}

int lull__registry_add(lull__registry *r, const void *h) {
    uint32_t i = r->cap ? slot_of(r, h) : 0;
    if (r->cap && r->slots[i] == h) return 1;
    if (2 * ((uint64_t)r->len + 1) > r->cap) {
        int err = grow(r);
        if (err) return err;
        i = slot_of(r, h);
    }
    r->slots[i] = h;
    r->len++;
    return 0;
}

/* Each later handle of the run moves back into the hole unless its home
 * lies cyclically between the hole and its slot (then a lookup starting
 * there would no longer reach it). */
void lull__registry_remove(lull__registry *r, const void *h) {
    if (!r->cap) return;
    uint32_t mask = r->cap - 1;
    uint32_t hole = slot_of(r, h);
    if (r->slots[hole] != h) return;
    r->slots[hole] = NULL;
    r->len--;
    for (uint32_t j = (hole + 1) & mask; r->slots[j]; j = (j + 1) & mask) {
        if (((j - home(r, r->slots[j])) & mask) >= ((j - hole) & mask)) {
            r->slots[hole] = r->slots[j];
            r->slots[j] = NULL;
            hole = j;
        }
    }
}

void lull__registry_free(lull__registry *r) {
    free(r->slots);
    *r = (lull__registry){0};
}

/* The process's pumps, UDP handles, processes, fs watches, servers, streams,
 * TLS connections, notifiers and loopback ends in use on any loop (the union of
 * the loops' `pumps`, `loopbacks` and `udps` sets, the spawned handles whose
 * on_exit has not run, the started watches and lull_io_init's started watchers,
 * the servers not closed, the notifiers with a subscribed listener, and the
 * streams and TLS connections set up whose on_close has not run), so that an
 * init on one loop refuses a handle open on another: that loop's set cannot be
 * asked from this thread, and clearing the handle would cut that loop's queue
 * or lose its fd. Under inuse_lock, held only for one set operation (inits,
 * closes and the start and stop of a user's watcher: not a hot path). */
static pthread_mutex_t inuse_lock = PTHREAD_MUTEX_INITIALIZER;
static lull__registry inuse; /* under inuse_lock */
static pthread_once_t inuse_once = PTHREAD_ONCE_INIT;

/* A fork() while another thread holds the lock would leave the child's
 * copy locked for ever: the fork waits for it, and both sides release. */
static void inuse_prepare(void) {
    pthread_mutex_lock(&inuse_lock);
}

static void inuse_after(void) {
    pthread_mutex_unlock(&inuse_lock);
}

static void inuse_init(void) {
    pthread_atfork(inuse_prepare, inuse_after, inuse_after);
}

static void inuse_take(void) {
    pthread_once(&inuse_once, inuse_init);
    pthread_mutex_lock(&inuse_lock);
}

int lull__inuse_add(const void *h) {
    inuse_take();
    int rc = lull__registry_add(&inuse, h);
    pthread_mutex_unlock(&inuse_lock);
    return rc;
}

bool lull__inuse_has(const void *h) {
    inuse_take();
    bool has = lull__registry_has(&inuse, h);
    pthread_mutex_unlock(&inuse_lock);
    return has;
}

void lull__inuse_remove(const void *h) {
    inuse_take();
    lull__registry_remove(&inuse, h);
    pthread_mutex_unlock(&inuse_lock);
}

void lull__inuse_forget(const lull__registry *r) {
    inuse_take();
    for (uint32_t i = 0; i < r->cap; i++)
        if (r->slots[i]) lull__registry_remove(&inuse, r->slots[i]);
    pthread_mutex_unlock(&inuse_lock);
}
