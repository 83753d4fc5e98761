/* The loopback pair (C6): two endpoints of the frame interface connected on
 * one loop, delivering the way a socket would.
 *
 * Owns: each end's inbox (the peer's frames not yet delivered, linked
 * through the caller's lull_frame structs, so the hand-over path allocates
 * nothing), its delivery turn, and the close handshake. One thread: the
 * loop's.
 *
 * The delivery model: a send appends the frame to the receiver's inbox and
 * claims the receiver's delivery turn (a posted task, or a timer when the
 * pair was made with LULL_DELIVER_TIMER); the turn delivers the oldest frame
 * only, then claims the next turn if frames remain. So nothing arrives inside
 * the sender's call, frames arrive in send order, and a frame's callback,
 * with everything it runs and every task it posts, is done before the next
 * frame lands. A close of one end releases its inbox undelivered and hands
 * its reason to the peer, which gets it after the frames already in its
 * inbox.
 *
 * One free path: on_close runs once per end, whoever closed, as its last
 * callback. The closing end gets its own in a later turn, once the frames
 * it sent are back with their owners: at once if the peer's inbox is
 * empty, else the peer hands the turn over when that inbox empties for good
 * (its close notice delivered, or its own close: release_closer), so an
 * owner may free frames embedded in the end's struct in its close callback.
 * A close of an end whose peer's close notice is still queued to it drops
 * the notice with the inbox: its close callback gets its own reason. Until
 * then (paired, or its close callback owed) an end is in its loop's and the
 * process's sets of live ends (src/registry.c), and lull_loopback_pair
 * refuses it.
 *
 * Reading paused (lull_endpoint_read_stop): the turn delivers nothing,
 * not even the peer's close, and claims no next one; the inbox grows and
 * the sender's queued with it, so its lull_endpoint_writable falls at the
 * high-water mark, as a paused stream's peer fills the socket. A resume
 * claims the turn again. The pause is told by the turn's callback, which
 * set_turn swaps, not by a test on every frame, and so are a closed or shut
 * peer (the frame path then tests for the sender and for an end behind the
 * frame; an end whose peer talks tests neither). A close of the paused end
 * un-pauses it: its own close callback is owed. Shut down
 * (lull_endpoint_shutdown): sends are refused at once; the peer is marked `eof`
 * and, once it has delivered every frame this end sent, closes itself with
 * reason 0, as a stream without an on_end does at EOF; this end reads on until
 * that close reaches it.
 *
 * Invariants: an end with a non-empty inbox, a pending close or `eof` has
 * its delivery turn claimed, except while that turn runs, while it is
 * paused, and except a closed end whose close callback waits for its
 * peer's inbox (the peer's `closer`); a frame in an inbox is in flight and
 * counted in its sender's `queued`; an inbox runs from head to tail, and
 * the tail's `next` is unwritten (a list handed to release_list ends in
 * NULL); `peer` is mutual and cleared on both ends
 * by the first close, so a closed end is touched again only by its own close
 * turn and its peer's release_closer: it may be reused or freed in its close
 * callback, or as soon as lull_endpoint_close returns when it has none, inside
 * a delivery to it too (its close clears the loop's `delivering`, which
 * tells a delivery that looks at the end after its callbacks; the common
 * one, nothing queued behind its frame, never does: deliver).
 *
 * The send half of an end that delivers by task lives in src/loopback.h,
 * so that lull_endpoint_send inlines it; it leans on the first invariant: an
 * open end's inbox alone says whether its turn is claimed.
 *
 * The five rows (README, "The contracts"):
 *   Trigger                 a send to this end, the peer's close, or
 *                           this end's own close (its close callback, once
 *                           the peer's inbox is empty)
 *   Source of truth         the inbox, close_pending and the peer's closer
 *   Pending-work predicate  inbox non-empty or close_pending
 *   Next deadline or retry  none; timer delivery waits delay_ns per frame
 *   Quiet condition         inbox empty and no close pending: no task
 *                           queued, no timer armed */
#include <errno.h>

#include "frame.h"
#include "internal.h"
#include "loopback.h"

static inline lull_loopback *end_of(lull_endpoint *ep) {
    return LULL_CONTAINER_OF(ep, lull_loopback, ep);
}

int lull__loopback_claim_timer_other(lull_loopback *b) {
    if (lull__timer_armed(&b->timer)) return 0;
    b->turns++;
    lull_timer_start(&b->timer, b->delay_ns, 0);
    return 0;
}

/* The timer half of claim_turn: out of line, so the task path (the
 * default) needs no saved registers or stack frame. It takes the timer,
 * the pointer a delivery by timer has in hand, so that the delivery keeps
 * no other (a saved register) across its callbacks for it. */
__attribute__((noinline)) static void claim_timer(lull_timer *t) {
    lull__loopback_claim_timer(LULL_CONTAINER_OF(t, lull_loopback, timer));
}

/* Claims this end's delivery turn, unless it is already claimed. `timer`
 * is the end's delivery (lb->deliver), a constant where the caller knows
 * it. */
static inline void claim_turn(lull_loopback *lb, bool timer) {
    if (LULL_UNLIKELY(timer)) {
        claim_timer(&lb->timer);
        return;
    }
    if (lull__node_queued(&lb->task.node)) return;
    lb->turns++;
    lull__post(lb->loop, &lb->task);
}

/* Releases a detached list of frames: touches only the frames. */
static void release_list(lull_frame *f) {
    while (f) {
        lull_frame *next = f->next;
        lull__frame_release(f);
        f = next;
    }
}

/* The end is the caller's again (closed, and its close callback, if one
 * is owed, about to run): lull_loopback_pair may take it. */
static void unregister_end(lull_loopback *lb) {
    lull__registry_remove(&lb->loop->loopbacks, lb);
    lull__inuse_remove(lb);
}

/* This end's inbox is empty for good: the closed peer whose close callback
 * waited for its frames to be delivered or dropped gets its close turn. */
static void release_closer(lull_loopback *lb) {
    lull_loopback *closer = lb->closer;
    if (!closer) return;
    lb->closer = NULL;
    lb->loop->handles--; /* its turn keeps the loop from now on */
    claim_turn(closer, false);
}

/* The turn that finds no frame: the close, once the frames before it were
 * delivered (the peer's close), or once the frames this end sent were (its
 * own). Rare, so kept out of the frame path. */
__attribute__((noinline)) static void deliver_close(lull_loopback *lb) {
    if (!lb->close_pending) return;
    lb->close_pending = false;
    lb->ep.flags |= LULL__EP_CLOSED;
    release_closer(lb); /* its frames are all delivered now */
    if (LULL_UNLIKELY(lb->failing)) {
        /* A send past max_queued closed it: the frames it had not
         * delivered go back to their owners here, in a turn. A release
         * callback may close this end (a no-op now) but not free it: its
         * close callback, below, is still owed. */
        lb->failing = false;
        lull_frame *undelivered = lb->discard;
        lb->discard = NULL;
        release_list(undelivered);
    }
    unregister_end(lb);
    if (lb->ep.on_close) lb->ep.on_close(&lb->ep, lb->reason);
}

/* The turn that finds no frame: the peer's or this end's close, or the
 * peer's shutdown, once every frame it sent was delivered: this end then
 * closes with 0 (its peer gets 0 after the frames this end sent). */
__attribute__((noinline)) static void deliver_end(lull_loopback *lb) {
    if (lb->close_pending || !lb->eof) {
        deliver_close(lb);
        return;
    }
    lb->eof = false;
    lull_endpoint_close(&lb->ep, 0);
}

/* A delivery's end, its callbacks done: claims the next turn of the end
 * if a frame or the peer's close waits, unless a callback closed it. The
 * end is found from the loop's `delivering`, its turn (`timer`: which one),
 * so that the delivery keeps no pointer to it across the callbacks.
 * `talking` (the turn ran deliver_task or deliver_timer: set_turn): no
 * close or shutdown of the peer waited when the turn began, so only a
 * frame can; one that came in the callbacks claimed the turn itself
 * (its send found the inbox empty, or the frames after this one were
 * there already), and so did a close or shutdown of the peer made in them
 * (close_end, lull__loopback_shutdown). */
static inline void after_delivery(lull_loop *loop, bool timer, bool talking) {
    void *turn = loop->delivering;
    if (!turn) return; /* a callback closed this end */
    /* Open here (a close of this end cleared `delivering`; left set, it
     * means nothing once this returns). */
    lull_loopback *lb =
        timer ? LULL_CONTAINER_OF((lull_timer *)turn, lull_loopback, timer)
              : LULL_CONTAINER_OF((lull_task *)turn, lull_loopback, task);
    LULL_ASSERT(!(lb->ep.flags & LULL__EP_CLOSED),
                "lull: a closed loopback end past its delivery");
    if (lb->head || (!talking && LULL_UNLIKELY(lb->close_pending || lb->eof)))
        claim_turn(lb, timer);
}

/* The delivery of a frame that took its sender's count below the
 * high-water mark: the frame callback, the release, then the sender's
 * drain: after the release, so the drain may re-send this very frame. Out
 * of line, so that the frame path keeps nothing across its callbacks for
 * the crossing. The end is found from `delivering` (a callback may close
 * it: NULL then, and the end is not touched at all); the release may also
 * close the sender (then `peer`, read again, is NULL). */
__attribute__((noinline)) static void
deliver_then_drain(lull_loop *loop, lull_frame *f, bool timer) {
    void *turn = loop->delivering;
    lull_loopback *lb =
        timer ? LULL_CONTAINER_OF((lull_timer *)turn, lull_loopback, timer)
              : LULL_CONTAINER_OF((lull_task *)turn, lull_loopback, task);
    if (lb->ep.on_frame) lb->ep.on_frame(&lb->ep, f->bytes, f->len);
    lull__frame_release(f);
    turn = loop->delivering;
    if (turn) {
        lb = timer ? LULL_CONTAINER_OF((lull_timer *)turn, lull_loopback, timer)
                   : LULL_CONTAINER_OF((lull_task *)turn, lull_loopback, task);
        lull_loopback *sender = lb->peer;
        if (sender) lull__endpoint_drain(&sender->ep);
    }
    after_delivery(loop, timer, false);
}

/* A frame's turn that looks at the end after the callbacks (deliver):
 * frames behind this one, the peer closed or shut down, or the sender's
 * drain owed (`drain`). Out of line, so that the common turn saves and
 * restores one register, not two. A close of the end in the callbacks
 * clears the loop's `delivering`, and then lb is not touched again. (Left
 * set by a turn, it means nothing to any other: only a turn that set it
 * reads it.) Turns do not nest (lull_loop_run and lull_loop_settle refuse
 * to run inside a callback), so one slot per loop serves, and the loop
 * outlives them (lull_loop_free refuses a running loop). Its value is the
 * turn's own handle (close_end compares it with both), and the frame
 * waits in a slot of its own (`delivering_frame`): after the callbacks the
 * delivery finds the end and the frame again from the loop, the one
 * pointer it keeps across them, so that it saves and restores one
 * register instead of three (the end, the frame and the loop). */
__attribute__((noinline)) static void deliver_watched(lull_loopback *lb,
                                                      lull_frame *f, bool timer,
                                                      bool talking,
                                                      bool drain) {
    lull_loop *loop = lb->loop;
    loop->delivering = timer ? (void *)&lb->timer : (void *)&lb->task;
    if (LULL_UNLIKELY(drain)) {
        deliver_then_drain(loop, f, timer);
        return;
    }
    loop->delivering_frame = f;
    if (LULL_LIKELY(lb->ep.on_frame != NULL))
        lb->ep.on_frame(&lb->ep, f->bytes, f->len);
    lull__frame_release(loop->delivering_frame);
    after_delivery(loop, timer, talking);
}

/* One turn: the oldest frame, or the peer's close once no frame is left.
 * The inbox's tail is only read while head is set, so taking the last
 * frame leaves it stale rather than spending a store on it. `talking`:
 * the turn of an end whose peer is open and has not shut down (set_turn),
 * which tests neither. */
static inline void deliver(lull_loopback *lb, bool timer, bool talking) {
    /* Not paused: a paused end's turn runs deliver_paused (set_turn). */
    LULL_ASSERT(!lb->paused, "lull: a paused loopback end's frame turn");
    LULL_ASSERT(!talking || (lb->peer && !lb->eof && !lb->close_pending &&
                             lb->ep.on_frame),
                "lull: a loopback end's turn is not its state's (set_turn)");
    lull_frame *f = lb->head;
    if (LULL_UNLIKELY(!f)) {
        deliver_end(lb);
        return;
    }
    /* The last frame is the tail, whose `next` means nothing (a send to an
     * empty inbox leaves it unwritten). */
    lb->delivered++;
    bool last = f == lb->tail;
    lull_frame *next = NULL;
    if (!last) next = f->next;
    lb->head = next;
    /* Delivered: the frame leaves its sender's count as it is handed to
     * the frame callback, as bytes a socket's peer has read leave the
     * sender's buffer, and so before its release, where it is the owner's
     * again (lull.h: re-send it) and a re-send must not be measured
     * against max_queued with it still counted. Read here, before any
     * callback, `peer` needs no check that lb is still open. An open
     * sender counts this frame: only a close, which clears `peer`, zeroes
     * its count. The drain, when the count crossed below the high-water
     * mark, runs after the release (deliver_then_drain). */
    lull_loopback *sender = lb->peer;
    bool drain = (talking || LULL_LIKELY(sender != NULL)) &&
                 LULL_UNLIKELY(lull__endpoint_unqueue(&sender->ep, f->len));
    /* The frame, release and drain callbacks may close this end and free
     * it (a closed end is the caller's again). f is off the inbox, its
     * own. The turn of an end whose peer talks, with no frame behind this
     * one (a request answered, the common case), has nothing to do for
     * the end after them: whatever they send to it claims its turn (the
     * send finds the inbox empty), and so do a close or shutdown of the
     * peer (close_end, lull__loopback_shutdown); so it keeps the frame
     * alone across them and never looks at the end again. */
    if (LULL_LIKELY(talking && last && !drain)) {
        lb->ep.on_frame(&lb->ep, f->bytes, f->len); /* set: talking */
        lull__frame_release(f);
        return;
    }
    deliver_watched(lb, f, timer, talking, drain);
}

static void deliver_task(lull_task *t) {
    deliver(LULL_CONTAINER_OF(t, lull_loopback, task), false, true);
}
LULL__OWN_NAME(deliver_task, "lull_loopback delivery task", lull_loopback,
               task);

static void deliver_timer(lull_timer *t) {
    deliver(LULL_CONTAINER_OF(t, lull_loopback, timer), true, true);
}
LULL__OWN_NAME(deliver_timer, "lull_loopback delivery timer", lull_loopback,
               timer);

/* The turn of an end whose peer closed or shut down: its frames, then its
 * end. */
static void deliver_task_ending(lull_task *t) {
    deliver(LULL_CONTAINER_OF(t, lull_loopback, task), false, false);
}
LULL__OWN_NAME(deliver_task_ending, "lull_loopback delivery task",
               lull_loopback, task);

static void deliver_timer_ending(lull_timer *t) {
    deliver(LULL_CONTAINER_OF(t, lull_loopback, timer), true, false);
}
LULL__OWN_NAME(deliver_timer_ending, "lull_loopback delivery timer",
               lull_loopback, timer);

/* The turn of a paused end. A pause holds back what the peer sent, its
 * close included, but not this end's own close after a send past
 * max_queued (its inbox is empty then): that close callback is owed
 * whatever the owner did after the refusal. */
static void deliver_paused(lull_loopback *lb) {
    LULL_ASSERT(lb->paused, "lull: an unpaused loopback end's paused turn");
    if (lb->failing) deliver_end(lb);
}

static void deliver_task_paused(lull_task *t) {
    deliver_paused(LULL_CONTAINER_OF(t, lull_loopback, task));
}
LULL__OWN_NAME(deliver_task_paused, "lull_loopback delivery task",
               lull_loopback, task);

static void deliver_timer_paused(lull_timer *t) {
    deliver_paused(LULL_CONTAINER_OF(t, lull_loopback, timer));
}
LULL__OWN_NAME(deliver_timer_paused, "lull_loopback delivery timer",
               lull_loopback, timer);

/* Picks the end's turn callbacks by its state, so that the frame path,
 * whichever turn claimed it and whenever the state changed (inside a frame
 * callback too, the next turn claimed after it), tests none of it: a
 * paused end's run deliver_paused; an end whose peer is open and has not
 * shut down, with a frame callback, deliver (`talking`), which tests
 * neither the sender nor the callback and does not look for an end behind
 * the frame; any other, deliver with those tests. Called after every
 * change of `paused`, `peer`, `eof` or the frame callback
 * (lull__loopback_callbacks_set). */
static void set_turn(lull_loopback *lb) {
    if (lb->paused) {
        lb->task.node.fn.task = deliver_task_paused;
        lb->timer.node.fn.timer = deliver_timer_paused;
    } else if (lb->peer && !lb->eof && lb->ep.on_frame) {
        /* (no close pending, then) */
        lb->task.node.fn.task = deliver_task;
        lb->timer.node.fn.timer = deliver_timer;
    } else {
        lb->task.node.fn.task = deliver_task_ending;
        lb->timer.node.fn.timer = deliver_timer_ending;
    }
}

void lull__loopback_callbacks_set(lull_endpoint *ep) {
    set_turn(end_of(ep));
}

/* Pauses or resumes the end's deliveries. Only here, in end_init (not
 * paused) and in close_end (un-paused, its set_turn once the pair is
 * detached) is `paused` written. */
static void set_paused(lull_loopback *lb, bool paused) {
    lb->paused = paused;
    set_turn(lb);
}

/* lull_endpoint_send runs lull__loopback_send itself; these entries serve
 * any other caller of the ops. */
static void loopback_send_task(lull_endpoint *ep, lull_frame *frame) {
    lull__loopback_send(end_of(ep), frame, LULL__CLAIM_TASK);
}

static void loopback_send_timer(lull_endpoint *ep, lull_frame *frame) {
    lull__loopback_send(end_of(ep), frame, LULL__CLAIM_TIMER);
}

/* Closes a's half of the pair without running any callback: detaches the
 * pair (the peer is told `reason` after the frames a sent), owes a's close
 * turn, and returns a's undelivered frames (its inbox, and a failing end's
 * discard) for the caller to release. The close turn is owed when a has a
 * close callback, or when `turn` asks for one (a failing end, whose frames
 * wait for it). */
/* The end whose closer is a: a failed (a send past max_queued) and waits
 * for the frames it sent in its former peer's inbox, where no link from a
 * leads any more. Found in the loop's set of live ends: only a close of an
 * end owed a callback and without a turn (such an end closed again, or a
 * paused one its peer's close waits in) looks, never a send or a delivery. */
static lull_loopback *holder_of(lull_loopback *a) {
    const lull__registry *r = &a->loop->loopbacks;
    for (uint32_t i = 0; i < r->cap; i++) {
        lull_loopback *b = (lull_loopback *)r->slots[i];
        if (b && b->closer == a) return b;
    }
    return NULL;
}

static lull_frame *close_end(lull_loopback *a, int reason, bool turn) {
    LULL_ASSERT_LOOP_THREAD(a->loop);
    lull_loopback *holder = a->close_pending && !lull_task_pending(&a->task) &&
                                    !lull_timer_active(&a->timer)
                                ? holder_of(a)
                                : NULL;
    const void *d = a->loop->delivering;
    if (d == &a->task || d == &a->timer)
        a->loop->delivering = NULL; /* a delivery to a runs: it stops */
    lull_task_cancel(&a->task);
    lull_timer_stop(&a->timer);
    a->close_pending = false;
    a->failing = false;
    a->paused = false; /* its close callback is owed */
    a->eof = false;
    lull_frame *inbox = a->head;
    if (inbox) {
        a->tail->next = a->discard;
    } else {
        inbox = a->discard;
    }
    a->head = a->tail = a->discard = NULL;
    lull_loopback *b = a->peer;
    a->peer = NULL;
    set_turn(a);
    if (b) {
        /* b's frames to a are in a's inbox, released by the caller: b owes
         * no drain and can send nothing more. */
        b->peer = NULL;
        set_turn(b);
        lull__endpoint_peer_gone(&b->ep);
        b->close_pending = true;
        b->reason = reason;
        claim_turn(b, b->deliver == LULL_DELIVER_TIMER);
    }
    /* One free path: this end's own close callback runs too, in a later
     * turn (its task: the inbox is empty, so the delivery finds the close
     * at once, whichever delivery the pair uses), and only once the frames
     * it sent are back with their owners, so that the owner may free them
     * there: while b still holds some, b hands the turn over when it has
     * delivered them (release_closer). An end with no close callback is
     * the caller's again as soon as lull_endpoint_close returns. */
    if (a->ep.on_close || turn) {
        a->close_pending = true;
        a->reason = reason;
        if (b && b->head) {
            /* No turn of its own until then, and a paused b claims none:
             * counted as a handle, so that lull_loop_free refuses the
             * loop while its close callback is owed. */
            b->closer = a;
            a->loop->handles++;
        } else if (!holder) {
            claim_turn(a, false);
        } /* else it waits on, as before this close */
    } else {
        if (holder) { /* no callback owed: the holder forgets a */
            holder->closer = NULL;
            a->loop->handles--;
        }
        unregister_end(a); /* no callback owed: the caller's at return */
    }
    /* A closed peer waiting for this inbox: the caller releases it. */
    release_closer(a);
    return inbox;
}

/* An end lull_loop_free forgot: its loop accepted the pair open, quiet,
 * detached both ends (forget_pairs) and dropped them from the
 * process's set of live ends, which is how the calls below tell (asked by
 * address: close and control only, never a send or a delivery). Its loop
 * is freed memory and its peer may be paired again or freed: the close
 * hands back this end's inbox (frames a paused end held) for release,
 * and no callback is owed. */
static bool forgotten(const lull_loopback *lb) {
    return !lull__inuse_has(lb);
}

static lull_frame *close_forgotten(lull_loopback *a) {
    lull_frame *inbox = a->head;
    if (inbox) a->tail->next = NULL; /* a list for release_list */
    a->head = a->tail = NULL;
    set_paused(a, false);
    return inbox;
}

/* lull_loop_free forgets the pairs left open on loop (quiet: no turn
 * claimed, no close callback owed). Each end is detached now, while both
 * ends are surely live: a later close or send of one never reads the
 * other, which its owner may have paired again or freed by then, nor the
 * freed loop (sends fail, -EPIPE). */
static void forget_pairs(lull_loop *loop) {
    const lull__registry *r = &loop->loopbacks;
    for (uint32_t i = 0; i < r->cap; i++) {
        lull_loopback *lb = (lull_loopback *)r->slots[i];
        if (!lb) continue;
        lb->peer = NULL;
        set_turn(lb);
        lull__endpoint_peer_gone(&lb->ep);
    }
}

static void loopback_close(lull_endpoint *ep, int reason) {
    lull_loopback *a = end_of(ep);
    /* Last: a release callback may do anything, this end is consistent. */
    release_list(forgotten(a) ? close_forgotten(a)
                              : close_end(a, reason, false));
}

/* A send past max_queued, inside lull_endpoint_send: the end closes now in
 * every way but the callbacks, which its close turn runs: the release of
 * its undelivered frames, then its close callback with `reason`. */
static void loopback_fail(lull_endpoint *ep, int reason) {
    lull_loopback *a = end_of(ep);
    lull_frame *undelivered = close_end(a, reason, true);
    a->discard = undelivered;
    a->failing = true;
    /* Closed in all but the callbacks: the peer, detached, no longer
     * counts its deliveries here, so nothing is queued any more (as after
     * lull_endpoint_close). */
    a->ep.queued = 0;
}

int lull__loopback_resent(lull_loopback *a) {
    a->ep.flags |= LULL__EP_PEER_GONE;
    loopback_fail(&a->ep, -EBUSY);
    return 0;
}

int lull__loopback_read(lull_endpoint *ep, bool on) {
    lull_loopback *lb = end_of(ep);
    if (lb->paused != on) return 0;      /* already so */
    if (forgotten(lb)) return -ENOTCONN; /* its loop is gone */
    LULL_ASSERT_LOOP_THREAD(lb->loop);
    /* A failed end (a send past max_queued) is closed in all but its
     * callbacks: its close turn is claimed on its task, or waits for the
     * frames it sent (its holder's `closer`), and a pause holds back none
     * of it. A resume must claim no turn of its own: one of its delivery
     * ran the close callback before those frames were back, or stayed
     * claimed beside the close turn in an end its close callback may free. */
    if (lb->failing) return 0;
    set_paused(lb, !on);
    /* Resumed: what waited arrives in a later turn, never inside this. */
    if (on && (lb->head || lb->close_pending || lb->eof))
        claim_turn(lb, lb->deliver == LULL_DELIVER_TIMER);
    return 0;
}

int lull__loopback_shutdown(lull_endpoint *ep) {
    lull_loopback *a = end_of(ep);
    if (forgotten(a)) return -ENOTCONN; /* its loop is gone */
    /* Shut already, or the peer closed (a send past max_queued too): the
     * peer has heard or will hear of the end. */
    if (a->ep.flags & LULL__EP_PEER_GONE) return 0;
    LULL_ASSERT_LOOP_THREAD(a->loop);
    a->ep.flags |= LULL__EP_PEER_GONE; /* sends fail; queued still counts */
    lull_loopback *b = a->peer;
    b->eof = true;
    set_turn(b);
    if (!b->head && !b->paused) claim_turn(b, b->deliver == LULL_DELIVER_TIMER);
    return 0;
}

const lull_frame_ops lull__loopback_task_ops = {loopback_send_task,
                                                loopback_close, loopback_fail};
const lull_frame_ops lull__loopback_timer_ops = {loopback_send_timer,
                                                 loopback_close, loopback_fail};

static void end_init(lull_loop *loop, lull_loopback *lb, lull_loopback *peer,
                     const lull_loopback_options *o) {
    lull__endpoint_init(&lb->ep,
                        o->deliver == LULL_DELIVER_TIMER
                            ? &lull__loopback_timer_ops
                            : &lull__loopback_task_ops,
                        o->max_frame, o->high_water, o->max_queued);
    if (o->deliver == LULL_DELIVER_TIMER && o->delay_ns)
        lb->ep.flags |= LULL__EP_LOOPBACK_DELAYED;
    lull_task_init(&lb->task, deliver_task);
    lb->task.loop = loop; /* its only loop: sends post it as owned */
    lull_timer_init(loop, &lb->timer, deliver_timer);
    lb->loop = loop;
    lb->peer = peer;
    lb->head = lb->tail = NULL;
    lb->delay_ns = o->delay_ns;
    lb->deliver = o->deliver;
    lb->reason = 0;
    lb->close_pending = false;
    lb->failing = false;
    lb->paused = false;
    lb->eof = false;
    lb->closer = NULL;
    lb->discard = NULL;
    lb->delivered = 0;
    lb->turns = 0;
    lb->closed_flag = NULL; /* unused: the loop's `delivering` serves */
    set_turn(lb);           /* no frame callback yet */
}

/* Puts both ends in the loop's set of live ends and the process's (which
 * a pair on another loop asks), until each is the caller's again
 * (unregister_end): -EBUSY when one is live still. Asked by address: an end
 * is garbage before its first pair, and a copy of a live end is not one.
 * Set-up and close only: sends and deliveries never touch the sets. */
static int register_ends(lull_loop *loop, lull_loopback *a, lull_loopback *b) {
    int rc = lull__inuse_add(a);
    if (rc != 0) return rc < 0 ? rc : -EBUSY;
    rc = lull__inuse_add(b);
    if (rc != 0) {
        lull__inuse_remove(a);
        return rc < 0 ? rc : -EBUSY;
    }
    loop->loopbacks_forget = forget_pairs;
    /* New to the process, so new to this loop's set too: 0 or -ENOMEM. */
    rc = lull__registry_add(&loop->loopbacks, a);
    if (rc == 0) rc = lull__registry_add(&loop->loopbacks, b);
    if (rc < 0) {
        lull__registry_remove(&loop->loopbacks, a);
        lull__inuse_remove(a);
        lull__inuse_remove(b);
    }
    return rc;
}

int lull_loopback_pair(lull_loop *loop, lull_loopback *a, lull_loopback *b,
                       const lull_loopback_options *opts) {
    static const lull_loopback_options defaults = {0};
    const lull_loopback_options *o = opts ? opts : &defaults;
    if (!loop || !a || !b || a == b) return -EINVAL;
    if (o->deliver != LULL_DELIVER_TASK && o->deliver != LULL_DELIVER_TIMER)
        return -EINVAL;
    if (!lull__marks_ok(o->high_water, o->max_queued)) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(loop);
    int rc = register_ends(loop, a, b);
    if (rc < 0) return rc;
    end_init(loop, a, b, o);
    end_init(loop, b, a, o);
    return 0;
}

bool lull_loopback_pending(const lull_loopback *lb) {
    /* close_pending without a turn: a closed end whose close callback
     * waits for its frames in the peer's inbox (the peer's `closer`). */
    return lb && (lull_task_pending(&lb->task) ||
                  lull_timer_active(&lb->timer) || lb->close_pending);
}
