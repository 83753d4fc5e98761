/* The intrusive FIFO behind the ready queue and the due list.
 *
 * A queue is a circular, doubly linked list through a sentinel node, so
 * removing a node needs no queue pointer and no branch. A node that is not
 * queued has next == prev == NULL, which is how "pending" is answered. */
#ifndef LULL_QUEUE_H
#define LULL_QUEUE_H

#include "lull.h"

static inline void lull__queue_init(lull__node *q) {
    q->next = q;
    q->prev = q;
}

static inline bool lull__queue_empty(const lull__node *q) {
    return q->next == q;
}

static inline bool lull__node_queued(const lull__node *n) {
    return n->next != NULL;
}

/* The store to tail->next sits between n's two links on purpose: the
 * compiler cannot then pair them into one vector store, from which the
 * scalar loads of the next queue walk forward slowly (the
 * loopback round trip and the task hop both wait on that forward). */
static inline void lull__queue_push(lull__node *q, lull__node *n) {
    lull__node *tail = q->prev;
    n->prev = tail;
    tail->next = n;
    n->next = q;
    q->prev = n;
}

static inline void lull__queue_remove(lull__node *n) {
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->next = NULL;
    n->prev = NULL;
}

#endif
