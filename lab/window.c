/* The committed-event window (lab/window.h).
 *
 * Invariants, in sequence numbers:
 *   first <= every open cursor <= readable <= committed <= next
 *   next - first <= capacity          (the ring holds every retained event)
 *   readable == committed             whenever no checkpoint is pending
 * Event s lives in ring[s % capacity]. Every change of `readable` or of a
 * cursor is followed by one raise of the notifier; nothing else raises it.
 * Loop thread only.
 *
 * Contract (the polling pump's cure), as a component that wakes its readers:
 *   trigger                 lab_window_commit, lab_window_checkpoint_end,
 *                           lab_window_cursor_seek (the closed set)
 *   source of truth         `readable` and each reader's cursor
 *   pending-work predicate  a reader's backlog (readable - cursor) > 0
 *   next deadline or retry  none: the window never arms a timer
 *   quiet condition         always; the window owns no task and no timer,
 *                           its listeners do */
#include "window.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int lab_window_init(lab_window *w, lull_loop *loop, uint32_t capacity,
                    uint32_t retain) {
    if (!w || !loop || capacity == 0) return -EINVAL;
    memset(w, 0, sizeof *w);
    w->ring = malloc((size_t)capacity * sizeof *w->ring);
    if (!w->ring) return -ENOMEM;
    /* Every slot written here, so no append or commit after init is the
     * first write to a page: a fault there is an allocation in all but
     * name. seq 0 is no event (sequence numbers start at 1); the non-zero
     * turn keeps the compiler from folding the stores into a calloc, which
     * would leave the pages untouched. */
    for (uint32_t i = 0; i < capacity; i++)
        w->ring[i] = (lab_window_event){.seq = 0, .turn = UINT32_MAX};
    lull_notifier_init(&w->notifier);
    w->loop = loop;
    w->capacity = capacity;
    w->retain = retain;
    w->first = w->next = w->committed = w->readable = 1;
    return 0;
}

void lab_window_free(lab_window *w) {
    if (!w) return;
    free(w->ring);
    w->ring = NULL;
    w->cursors = NULL;
}

/* Drops events more than `retain` behind the slowest cursor (behind
 * `readable` when no reader is open). */
static void trim(lab_window *w) {
    uint64_t slowest = w->readable;
    for (lab_window_cursor *c = w->cursors; c; c = c->link)
        if (c->next < slowest) slowest = c->next;
    if (slowest > w->first + w->retain) {
        uint64_t keep_from = slowest - w->retain;
        w->dropped += keep_from - w->first;
        w->first = keep_from;
    }
}

uint64_t lab_window_append(lab_window *w, uint64_t value, uint32_t flags,
                           uint32_t turn) {
    if (w->next - w->first >= w->capacity) {
        trim(w);
        if (w->next - w->first >= w->capacity) return 0;
    }
    uint64_t seq = w->next++;
    w->ring[seq % w->capacity] = (lab_window_event){
        .seq = seq, .value = value, .flags = flags, .turn = turn};
    return seq;
}

/* Makes committed events readable: stamp them, store, then raise. */
static int release(lab_window *w) {
    if (w->readable == w->committed) return 0;
    uint64_t now = lull_loop_now_exact(w->loop);
    for (uint64_t s = w->readable; s < w->committed; s++)
        w->ring[s % w->capacity].readable_ns = now;
    int n = (int)(w->committed - w->readable);
    w->readable = w->committed;
    w->raises++;
    lull_notifier_raise(&w->notifier);
    return n;
}

int lab_window_commit(lab_window *w) {
    w->committed = w->next;
    return w->holds ? 0 : release(w);
}

void lab_window_checkpoint_begin(lab_window *w) {
    w->holds++;
}

int lab_window_checkpoint_end(lab_window *w) {
    if (w->holds == 0) return -EINVAL;
    return --w->holds ? 0 : release(w);
}

void lab_window_cursor_open(lab_window *w, lab_window_cursor *c,
                            uint64_t from) {
    if (from < w->first) from = w->first;
    if (from > w->readable) from = w->readable;
    c->window = w;
    c->next = from;
    c->link = w->cursors;
    w->cursors = c;
}

void lab_window_cursor_close(lab_window_cursor *c) {
    lab_window *w = c->window;
    if (!w) return;
    for (lab_window_cursor **p = &w->cursors; *p; p = &(*p)->link) {
        if (*p == c) {
            *p = c->link;
            break;
        }
    }
    c->window = NULL;
    c->link = NULL;
    trim(w);
}

int lab_window_cursor_seek(lab_window_cursor *c, uint64_t seq) {
    lab_window *w = c->window;
    if (!w || seq < w->first || seq > w->readable) return -ERANGE;
    if (seq == c->next) return 0; /* nothing a reader could see changed */
    c->next = seq;
    trim(w); /* a forward move can release retained events */
    w->raises++;
    lull_notifier_raise(&w->notifier);
    return 0;
}

int lab_window_read(lab_window *w, lab_window_cursor *c, lab_window_event *out,
                    int max) {
    w->reads++;
    uint64_t n = w->readable - c->next;
    if (max <= 0) return 0;
    if (n > (uint64_t)max) n = (uint64_t)max;
    for (uint64_t i = 0; i < n; i++)
        out[i] = w->ring[(c->next + i) % w->capacity];
    if (n == 0) return 0;
    c->next += n;
    trim(w);
    return (int)n;
}

uint64_t lab_window_backlog(const lab_window_cursor *c) {
    return c->window ? c->window->readable - c->next : 0;
}

uint64_t lab_window_retained(const lab_window *w) {
    return w->next - w->first;
}
