/* The pump (C4): one delivery pass at a time, woken by change, never by a
 * clock.
 *
 * Contract (BRIEF 1A):
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
 * A wake during a pass queues the next one. Loop thread only. */
#include "internal.h"

static void run_pass(lull_pump *p) {
    if (p->closed) return;
    lull_cancel(&p->task);
    lull_timer_stop(&p->retry);
    uint64_t delivered = p->delivered;
    uint64_t retry_ns = 0;
    p->loop->current = (lull_any_fn)p->pass;
    int status = p->pass(p, &retry_ns);
    bool empty = p->delivered == delivered;
    p->passes++;
    p->empty += empty;
    lull__audit_pass(p->loop, p->source, empty);
    if (p->closed || lull_task_pending(&p->task)) return;
    if (status == LULL_PASS_HELD && retry_ns == 0) status = LULL_PASS_AGAIN;
    if (status == LULL_PASS_AGAIN)
        lull_post(p->loop, &p->task);
    else if (status == LULL_PASS_HELD)
        lull_timer_start(&p->retry, retry_ns, 0);
}

static void pass_task(lull_task *task) {
    run_pass(LULL_CONTAINER_OF(task, lull_pump, task));
}

static void pass_retry(lull_timer *timer) {
    run_pass(LULL_CONTAINER_OF(timer, lull_pump, retry));
}

void lull_pump_init(lull_loop *loop, lull_pump *pump, lull_pass_fn pass) {
    if (!loop || !pump || !pass) return;
    LULL_ASSERT_LOOP_THREAD(loop);
    lull_task_init(&pump->task, pass_task);
    lull_timer_init(loop, &pump->retry, pass_retry);
    pump->loop = loop;
    pump->pass = pass;
    pump->listeners = NULL;
    pump->passes = pump->empty = pump->delivered = 0;
    pump->source = lull__source_of(loop, (lull_any_fn)pass, LULL_SOURCE_PUMP);
    pump->closed = false;
}

void lull_pump_wake(lull_pump *pump) {
    if (!pump || pump->closed) return;
    LULL_ASSERT_LOOP_THREAD(pump->loop);
    lull_timer_stop(&pump->retry);
    lull_post(pump->loop, &pump->task);
}

void lull_pump_listen(lull_pump *pump, lull_notifier *n, lull_listener *l) {
    if (!pump || !n || !l || pump->closed) return;
    LULL_ASSERT_LOOP_THREAD(pump->loop);
    lull__listen_task(pump->loop, n, l, &pump->task);
    l->pump_next = pump->listeners;
    pump->listeners = l;
}

void lull_pump_delivered(lull_pump *pump, uint64_t n) {
    if (pump) pump->delivered += n;
}

void lull_pump_close(lull_pump *pump) {
    if (!pump || pump->closed) return;
    LULL_ASSERT_LOOP_THREAD(pump->loop);
    pump->closed = true;
    lull_cancel(&pump->task);
    lull_timer_stop(&pump->retry);
    for (lull_listener *l = pump->listeners; l; l = l->pump_next)
        lull_unlisten(l);
    pump->listeners = NULL;
}

bool lull_pump_quiet(const lull_pump *pump) {
    return !pump || (!lull_task_pending(&pump->task) &&
                     !lull_timer_active(&pump->retry));
}

bool lull__pump_describe(const lull__node *n, lull_live *out) {
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
