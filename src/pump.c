/* The pump (C4): one delivery pass at a time, woken by change, never by a
 * clock.
 *
 * The five rows (README, "The contracts"):
 *   trigger                 lull_pump_wake, or a raise of a notifier the
 *                           pump listens to (lull_pump_listen)
 *   source of truth         whatever the pass reads; a wake is a hint
 *   pending-work predicate  the last pass returned AGAIN or HELD, or a wake
 *                           arrived since the last pass began
 *   next deadline or retry  only after HELD: the retry timer, armed for
 *                           *retry_ns, runs the pass itself
 *   quiet condition         the last pass returned QUIET and nothing woke
 *                           the pump since: no task queued, no timer armed
 *
 * Each pass first withdraws both ways it could have been scheduled (the
 * queued task and the retry timer), so a pass runs once however it was
 * reached, and a wake while held makes the next pass re-decide the retry.
 * A wake during a pass queues the next one. The pump's listeners form a
 * doubly linked list (pump_next/pump_prev) that lull_listener_stop leaves, so a
 * listener is reusable anywhere after it. Loop thread only. */
#include <errno.h>

#include "internal.h"

/* A pass in progress keeps its bookkeeping on run_pass's stack, and the
 * pump points to it, so that lull_pump_close during the pass can record
 * there that it happened: a pass may close its pump and then free it (the
 * natural end of a session), after which run_pass must not touch the pump
 * again. */
struct lull__pass_frame {
    uint64_t delivered; /* pump->delivered when the pass began */
    bool closed;        /* the pump was closed during the pass */
    bool empty;         /* ... having delivered nothing by then */
};

static void run_pass(lull_pump *p) {
    if (p->closed) return;
    lull_task_cancel(&p->task);
    lull_timer_stop(&p->retry);
    lull_loop *loop = p->loop;
    int source = p->source;
    struct lull__pass_frame frame = {.delivered = p->delivered};
    p->frame = &frame;
    loop->passing = p;
    uint64_t retry_ns = 0;
    loop->current = (lull_any_fn)p->pass;
    int status = p->pass(p, &retry_ns);
    if (frame.closed) {
        /* Counted by lull_pump_close; p may be freed memory by now. */
        lull__audit_pass(loop, source, frame.empty);
        return;
    }
    p->frame = NULL;
    loop->passing = NULL;
    /* Anything else would leave the pump quiet with its work undone: a
     * pass that returns a count or a flag word by mistake. */
    LULL_ASSERT(status >= LULL_PASS_QUIET && status <= LULL_PASS_HELD,
                "lull: a pass returned a value that is not a "
                "lull_pass_result");
    bool empty = p->delivered == frame.delivered;
    p->passes++;
    p->empty += empty;
    lull__audit_pass(loop, source, empty);
    if (lull_task_pending(&p->task)) return;
    if (status == LULL_PASS_HELD && retry_ns == 0) status = LULL_PASS_AGAIN;
    if (status == LULL_PASS_AGAIN)
        lull_task_post(p->loop, &p->task);
    else if (status == LULL_PASS_HELD)
        lull_timer_start(&p->retry, retry_ns, 0);
}

static void pass_task(lull_task *task) {
    run_pass(LULL_CONTAINER_OF(task, lull_pump, task));
}

static void pass_retry(lull_timer *timer) {
    run_pass(LULL_CONTAINER_OF(timer, lull_pump, retry));
}

int lull_pump_init(lull_loop *loop, lull_pump *pump, lull_pass_fn pass) {
    if (!loop || !pump || !pass) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(loop);
    /* The loop's registry of open pumps: a pump is added by its first init
     * and leaves with lull_pump_close. */
    int known = lull__registry_add(&loop->pumps, pump);
    if (known < 0) return known;
    /* New to this loop: open on another loop (close it there first), or
     * new to the process's set of pumps and UDP handles in use. */
    int elsewhere = known ? 0 : lull__inuse_add(pump);
    if (elsewhere) {
        lull__registry_remove(&loop->pumps, pump);
        return elsewhere < 0 ? elsewhere : -EBUSY;
    }
    /* Open on this loop already, so its fields are lull's. In use (its
     * pass queued or running, its retry armed, a listener subscribed):
     * clearing it would cut the queue, leave the timer in the heap and lose
     * the listeners lull_pump_close unsubscribes; inside its pass, clearing
     * its frame would hide a close from the pass's end. */
    if (known &&
        (loop->passing == pump || !lull_pump_quiet(pump) || pump->listeners))
        return -EBUSY;
    lull_task_init(&pump->task, pass_task);
    lull_timer_init(loop, &pump->retry, pass_retry);
    pump->loop = loop;
    pump->pass = pass;
    pump->listeners = NULL;
    pump->passes = pump->empty = pump->delivered = 0;
    pump->source = lull__source_of(loop, (lull_any_fn)pass, LULL_SOURCE_PUMP);
    pump->closed = false;
    pump->frame = NULL;
    pump->data = NULL;
    return 0;
}

/* A pump its owner may act on: not closed, and initialised (a zeroed pump
 * that lull_pump_init never reached has no loop, and an owner's clean-up
 * may close it, as it may stop a zeroed timer). */
static bool pump_open(const lull_pump *pump) {
    return pump && !pump->closed && pump->loop;
}

/* A pump left open by a lull_loop_free (quiet: allowed) has freed memory
 * for its loop: only its close may follow (it asks the process's set of
 * handles in use, as a wake cannot afford to). A wake or listen on it is a
 * use after free, which debug builds stop at before reading the loop; so
 * is one on a copy of an open pump (memcpy), which the set does not know:
 * its task would be posted into the loop in place of the pump's. */
#define ASSERT_LOOP_NOT_FREED(pump)                                            \
    LULL_ASSERT(lull__inuse_has(pump),                                         \
                "lull: a pump used after its loop's free, or a copy of one "   \
                "(only its close may follow)")

void lull_pump_wake(lull_pump *pump) {
    if (!pump_open(pump)) return;
    ASSERT_LOOP_NOT_FREED(pump);
    LULL_ASSERT_LOOP_THREAD(pump->loop);
    lull_timer_stop(&pump->retry);
    lull_task_post(pump->loop, &pump->task);
}

int lull_pump_listen(lull_pump *pump, lull_notifier *n, lull_listener *l) {
    if (!pump_open(pump) || !n || !l) return -EINVAL;
    ASSERT_LOOP_NOT_FREED(pump);
    LULL_ASSERT_LOOP_THREAD(pump->loop);
    /* Subscribed already (to this pump or not, on another notifier too):
     * linked again, the first notifier would keep it on its list and
     * raise the pump after it was closed and freed, or the lists would
     * become a cycle. A programming error that debug builds stop at. */
    bool subscribed = lull__listener_subscribed(l);
    LULL_ASSERT(!subscribed, "lull: listener subscribed twice");
    if (subscribed) return -EBUSY;
    lull__listen_task(pump->loop, n, l, &pump->task);
    l->pump_prev = NULL;
    l->pump_next = pump->listeners;
    if (pump->listeners) pump->listeners->pump_prev = l;
    pump->listeners = l;
    return 0;
}

/* lull_listener_stop of a pump's listener: it leaves the pump's list too, so
 * that it can be subscribed again anywhere without the list still holding
 * it (a later lull_pump_listen would make the list a cycle, a
 * lull_listener_start would cut it). */
void lull__pump_unlink_listener(lull_listener *l) {
    lull_pump *pump = LULL_CONTAINER_OF(l->target, lull_pump, task);
    if (l->pump_prev)
        l->pump_prev->pump_next = l->pump_next;
    else if (pump->listeners == l)
        pump->listeners = l->pump_next;
    if (l->pump_next) l->pump_next->pump_prev = l->pump_prev;
    l->pump_next = l->pump_prev = NULL;
}

void lull_pump_delivered(lull_pump *pump, uint64_t n) {
    if (pump) pump->delivered += n;
}

void lull_pump_close(lull_pump *pump) {
    if (!pump_open(pump)) return;
    /* Left open, quiet, by a lull_loop_free that forgot it: its loop is
     * freed memory, which a clean-up's close after the teardown must not
     * touch, and a quiet pump holds nothing there. An open pump is in the
     * process's set until then (lull_pump_init), so the set, asked by
     * address, tells. */
    if (!lull__inuse_has(pump)) {
        pump->closed = true;
        return;
    }
    LULL_ASSERT_LOOP_THREAD(pump->loop);
    pump->closed = true;
    lull__registry_remove(&pump->loop->pumps, pump);
    lull__inuse_remove(pump);
    if (pump->frame) { /* closed by (or during) its own pass */
        struct lull__pass_frame *f = pump->frame;
        pump->frame = NULL;
        pump->loop->passing = NULL; /* the owner's again: init may reuse it */
        f->closed = true;
        f->empty = pump->delivered == f->delivered;
        pump->passes++;
        pump->empty += f->empty;
    }
    lull_task_cancel(&pump->task);
    lull_timer_stop(&pump->retry);
    lull_listener *l;
    while ((l = pump->listeners) != NULL) {
        lull_listener_stop(l); /* unlinks it from the list */
        if (pump->listeners == l) lull__pump_unlink_listener(l);
    }
}

bool lull_pump_quiet(const lull_pump *pump) {
    return !pump || (!lull_task_pending(&pump->task) &&
                     !lull_timer_active(&pump->retry));
}

LULL__HOT bool lull__pump_describe(const lull__node *n, lull_live *out) {
    const lull_pump *p;
    if (n->flags & LULL__NODE_TIMER) {
        if (n->fn.timer != pass_retry) return false;
        p = LULL_CONTAINER_OF((const lull_timer *)n, lull_pump, retry);
    } else {
        if (n->fn.task != pass_task) return false;
        p = LULL_CONTAINER_OF((const lull_task *)n, lull_pump, task);
    }
    out->kind = LULL_HANDLE_PUMP;
    out->handle = p;
    out->fn = (lull_any_fn)p->pass;
    return true;
}
