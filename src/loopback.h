/* The loopback pair's hand-over path (src/loopback.c), inline so that
 * lull_endpoint_send (src/frame.c) queues a loopback frame without an indirect
 * call into the transport, whichever the delivery: the loopback is the
 * in-process link whose round trip is measured against the bare turn (and,
 * delivering by zero-delay timer, against the task's), and this is its hot
 * half.
 * Included by src/frame.c and src/loopback.c only. */
#ifndef LULL_LOOPBACK_H
#define LULL_LOOPBACK_H

#include "frame.h"

/* The ops of a loopback end that delivers by task (the default) and of one
 * that delivers by timer: lull_endpoint_send compares ep->ops with them, so
 * the inline path below never asks which delivery it serves. */
extern const lull_frame_ops lull__loopback_task_ops;
extern const lull_frame_ops lull__loopback_timer_ops;

/* A frame sent again while it is the last in the inbox of a's peer (its
 * owner rewrote it in flight: lull__frame_check_unqueued): it stays queued
 * once, and a fails with -EBUSY, as past max_queued (src/loopback.c); 0, for
 * lull_endpoint_send to return. */
int lull__loopback_resent(lull_loopback *a);

/* An inbox is linked from head to tail, and the tail's `next` is never
 * read (a send leaves it unwritten: lull_endpoint_send's loopback path):
 * the walk of lull__frame_check_unqueued (debug builds), stopped at the
 * tail. */
static inline void lull__loopback_check_unqueued(const lull_loopback *b,
                                                 const lull_frame *frame) {
#ifndef NDEBUG
    int n = 0;
    for (const lull_frame *f = b->head; f && n < LULL__FRAME_CHECK_DEPTH;
         f = f == b->tail ? NULL : f->next, n++)
        LULL_ASSERT(f != frame, "lull: lull_endpoint_send of a frame already "
                                "queued (rewritten while in flight)");
#else
    (void)b;
    (void)frame;
#endif
}

/* Appends frame to the inbox of a's peer, which it returns; `was_empty`
 * says whether the inbox had no frame before. Both deliveries' sends. NULL
 * for a frame that is the inbox's last already: the caller returns
 * lull__loopback_resent's answer, a tail call, so that the send's path keeps
 * no stack frame for it. The checks for a frame queued already cost nothing
 * while the inbox is empty, the hot case. */
static inline lull_loopback *
lull__loopback_append(lull_loopback *a, lull_frame *frame, bool *was_empty) {
    LULL_ASSERT_LOOP_THREAD(a->loop);
    lull_loopback *b = a->peer;
    LULL_ASSERT(b, "lull: an open loopback end without a peer");
    *was_empty = b->head == NULL;
    if (LULL_UNLIKELY(!*was_empty)) {
        if (LULL_UNLIKELY(frame == b->tail))
            return NULL; /* linked again, it would be a cycle */
        lull__loopback_check_unqueued(b, frame);
        b->tail->next = frame;
    } else {
        b->head = frame;
    }
    b->tail = frame;
    return b;
}

/* The claims lull__loopback_claim_timer leaves out of line (src/loopback.c):
 * of an end whose timer is armed (claimed: nothing to do) or that delays.
 * 0, so that a send returns its answer, a tail call that keeps
 * lull_endpoint_send's path free of a stack frame. */
int lull__loopback_claim_timer_other(lull_loopback *b);

/* Claims the turn of b, an end that delivers by timer, unless it is
 * claimed (its timer armed): a zero-delay turn is queued as a task's is, a
 * delayed one armed. The common case, an idle timer (not in the heap, not
 * queued) and no delay, is told by one branch, as lull_timer_start tells
 * it, and the rest is a call, so the common case keeps nothing for it. */
static inline int lull__loopback_claim_timer(lull_loopback *b) {
    lull_timer *t = &b->timer;
    if (LULL_UNLIKELY((lull__timer_armed_bits(t) | b->delay_ns) != 0))
        return lull__loopback_claim_timer_other(b);
    b->turns++;
    lull__timer_turn_oneshot(t);
    return 0;
}

/* How a send claims the peer's turn (a constant in every caller of
 * lull__loopback_send): by task; by timer with no delay (the pair has no
 * LULL__EP_LOOPBACK_DELAYED, as lull_endpoint_send's inline path knows);
 * by timer, with or without one. */
enum { LULL__CLAIM_TASK, LULL__CLAIM_TIMER0, LULL__CLAIM_TIMER };

/* Appends an accepted frame (in flight, counted) to the inbox
 * of a's peer and claims the peer's turn (`claim`: LULL__CLAIM_*); 0, for
 * lull_endpoint_send to return.
 *
 * By task, by the invariant of src/loopback.c the inbox alone says whether
 * the turn needs claiming: b is a's peer, so b is open with no close
 * pending, and then a non-empty inbox has its turn claimed (or b is
 * paused, or b's delivery runs and claims it when it ends, seeing the
 * frame), while an empty one has none. By zero-delay timer the same (C3:
 * the same order as a task): claimed at once while b's delivery runs, the
 * turn for the frame already behind it would land before the tasks that
 * delivery's callback posts after this send. A delayed delivery claims
 * whenever it is not claimed: its delay counts from the send, not from the
 * end of a delivery running now. The inbox's tail is only read while head
 * is set. */
static inline int lull__loopback_send(lull_loopback *a, lull_frame *frame,
                                      int claim) {
    bool timer = claim != LULL__CLAIM_TASK;
    bool was_empty;
    lull_loopback *b = lull__loopback_append(a, frame, &was_empty);
    if (LULL_UNLIKELY(!b)) return lull__loopback_resent(a);
    LULL_ASSERT(b->deliver == (timer ? LULL_DELIVER_TIMER : LULL_DELIVER_TASK),
                "lull: a loopback end's ops are not its delivery's");
    LULL_ASSERT(claim != LULL__CLAIM_TIMER0 || !b->delay_ns,
                "lull: a zero-delay claim of a delayed loopback end");
    if (timer) {
        if (claim == LULL__CLAIM_TIMER && LULL_UNLIKELY(b->delay_ns))
            return lull__loopback_claim_timer(b);
        if (LULL_UNLIKELY(!was_empty)) return 0;
        LULL_ASSERT(!lull__timer_armed_bits(&b->timer) && !b->close_pending,
                    "lull: a loopback end with an empty inbox and a turn");
        b->turns++;
        lull__timer_turn_oneshot(&b->timer);
        return 0;
    }
    if (LULL_UNLIKELY(!was_empty)) return 0;
    LULL_ASSERT(!lull__node_queued(&b->task.node) && !b->close_pending,
                "lull: a loopback end with an empty inbox and a turn");
    b->turns++;
    lull__post_owned(b->loop, &b->task);
    return 0;
}

#endif
