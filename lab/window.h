/* A committed-event window: the source of truth of the `pump` scenario
 * (the polling pump's) and of tests/test_window.c, written against lull.h only
 * so it can be lifted into a program as is.
 *
 * A writer appends events (each gets the next sequence number, from 1) and
 * commits them as a batch. A committed batch becomes readable at once, or,
 * while a checkpoint is pending, when the checkpoint ends. Each reader owns a
 * cursor (the next sequence number it will read) and reads the readable
 * events after it; moving a cursor (recovery) re-reads from there. The window
 * keeps `retain` events behind the slowest cursor and drops older ones.
 *
 * The window's notifier is raised after every change of what some reader
 * could read: a commit that made events readable, a checkpoint that released
 * events, a cursor move. It is raised after the new state is stored, and
 * lull_notifier_raise never runs a listener inline, so a listener always reads
 * the new state and never runs inside lab_window_commit. These three calls are
 * the complete, closed set of wake sources; docs/PUMP.md and the tests guard
 * it (a change that does not notify leaves an event undelivered).
 *
 * Storage is one ring of `capacity` slots allocated and written (its pages
 * faulted in) by lab_window_init; no call after it allocates. Loop thread only
 * (the notifier's listeners live on the window's loop). */
#ifndef LAB_WINDOW_H
#define LAB_WINDOW_H

#include <lull.h>

#include <stdbool.h>
#include <stdint.h>

/* Event flags; the window stores them for the caller and reads none. */
#define LAB_EVENT_TERMINAL 0x1u /* the last event of a turn */

typedef struct lab_window_event {
    uint64_t seq;         /* 1, 2, 3, ... in append order */
    uint64_t readable_ns; /* lull_loop_now_exact when it became readable */
    uint64_t value;       /* the caller's payload */
    uint32_t flags;       /* the caller's LAB_EVENT_* bits */
    uint32_t turn;        /* the caller's turn number */
} lab_window_event;

typedef struct lab_window lab_window;

typedef struct lab_window_cursor {
    lab_window *window;             /* NULL while closed */
    uint64_t next;                  /* sequence number it reads next */
    struct lab_window_cursor *link; /* the window's list of cursors */
} lab_window_cursor;

struct lab_window {
    lull_notifier notifier;     /* raised after a readable-state change */
    lull_loop *loop;            /* the clock that stamps readable_ns */
    lab_window_event *ring;     /* capacity slots; event s is ring[s % cap] */
    uint32_t capacity;          /* slots: retained + not yet dropped events */
    uint32_t retain;            /* events kept behind the slowest cursor */
    uint64_t first;             /* oldest retained sequence number */
    uint64_t next;              /* sequence number of the next append */
    uint64_t committed;         /* events below this are committed */
    uint64_t readable;          /* events below this are readable */
    uint32_t holds;             /* pending checkpoints (nesting depth) */
    lab_window_cursor *cursors; /* open cursors, newest first */
    uint64_t reads;             /* lab_window_read calls: the "state reads" */
    uint64_t raises;            /* notifier raises */
    uint64_t dropped;           /* events dropped by the retention bound */
};

/* Allocates the ring; capacity > 0. 0 or -ENOMEM / -EINVAL. The notifier is
 * initialized here: subscribe to &w->notifier after init. */
int lab_window_init(lab_window *w, lull_loop *loop, uint32_t capacity,
                    uint32_t retain);
/* Frees the ring. Close cursors and unsubscribe listeners first. */
void lab_window_free(lab_window *w);

/* Appends an uncommitted event; returns its sequence number, or 0 when the
 * ring is full (the slowest reader is `capacity - retain` events behind:
 * the caller must wait for it, as a bounded control plane would). */
uint64_t lab_window_append(lab_window *w, uint64_t value, uint32_t flags,
                           uint32_t turn);
/* Commits every appended event. Unless a checkpoint is pending they become
 * readable, are stamped, and the notifier is raised (after the store).
 * Returns the number of events that became readable. */
int lab_window_commit(lab_window *w);

/* A checkpoint barrier: while one is pending, committed events are held
 * (committed, not readable). Checkpoints nest; the last end releases the
 * held events, stamps them and raises the notifier. end returns the number
 * released, or -EINVAL without a pending checkpoint. */
void lab_window_checkpoint_begin(lab_window *w);
int lab_window_checkpoint_end(lab_window *w);

/* Opens a reader at sequence number `from` (1 = from the start; clamped to
 * the retained range). */
void lab_window_cursor_open(lab_window *w, lab_window_cursor *c, uint64_t from);
void lab_window_cursor_close(lab_window_cursor *c);
/* Moves a cursor (recovery: back to a retained event, or forward). Raises
 * the notifier. 0, or -ERANGE for a position that is dropped or beyond
 * the committed events. */
int lab_window_cursor_seek(lab_window_cursor *c, uint64_t seq);

/* One state read: copies up to max readable events after the cursor into
 * out, advances the cursor past them and applies the retention bound.
 * Returns the number copied. Counted in w->reads whatever it finds. O(1)
 * plus the events copied: the ring is indexed by sequence number. */
int lab_window_read(lab_window *w, lab_window_cursor *c, lab_window_event *out,
                    int max);

/* Readable events after the cursor. Not a state read (not counted): for
 * assertions and for a pass that must decide without reading. */
uint64_t lab_window_backlog(const lab_window_cursor *c);
/* Retained events (readable or not). */
uint64_t lab_window_retained(const lab_window *w);

#endif /* LAB_WINDOW_H */
