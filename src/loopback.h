/* The loopback pair's hand-over path (src/loopback.c), inline so that
 * lull_send (src/frame.c) queues a loopback frame without an indirect call
 * into the transport: the loopback is the in-process link whose round trip
 * is measured against the bare turn (issue 7), and this is its hot half.
 * Included by src/frame.c and src/loopback.c only. */
#ifndef LULL_LOOPBACK_H
#define LULL_LOOPBACK_H

#include "internal.h"

/* The loopback's lull_frame_ops: lull_send compares ep->ops with it. */
extern const lull_frame_ops lull__loopback_ops;

/* The timer half of lull__loopback_claim, out of line: the task path (the
 * default) then needs no saved registers or stack frame. Returns 0, so
 * that callers can end in a jump to it. */
int lull__loopback_claim_timer(lull_loopback *lb);

/* Claims this end's delivery turn, unless it is already claimed. 0. */
static inline int lull__loopback_claim(lull_loopback *lb) {
    if (LULL_UNLIKELY(lb->deliver != LULL_DELIVER_TASK))
        return lull__loopback_claim_timer(lb);
    if (lull__node_queued(&lb->task.node)) return 0;
    lb->turns++;
    lull__post(lb->loop, &lb->task);
    return 0;
}

/* Appends an accepted frame (in flight, next NULL, counted) to the peer's
 * inbox and claims the peer's turn; 0, for lull_send to return. The
 * inbox's tail is only read while head is set. */
static inline int lull__loopback_send(lull_loopback *a, lull_frame *frame) {
    LULL_ASSERT_LOOP_THREAD(a->loop);
    lull_loopback *b = a->peer;
    LULL_ASSERT(b, "lull: an open loopback end without a peer");
    if (b->head) {
        b->tail->next = frame;
    } else {
        b->head = frame;
    }
    b->tail = frame;
    return lull__loopback_claim(b);
}

#endif
