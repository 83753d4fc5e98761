/* Notifiers and listeners (C4).
 *
 * Owns: a notifier's subscriber list and the raise. A raise posts each
 * subscriber's target task; posting a pending task is a no-op, so however
 * often a notifier is raised before the listener runs, it runs once, and
 * never inside lull_notify. Listeners run in subscription order because
 * their tasks are posted in list order. No allocation: the list is threaded
 * through the caller-owned listeners.
 *
 * Contract (BRIEF 1A) of a listener: trigger: lull_notify; source of truth:
 * whatever state the notifier guards (the raise is a hint to look); pending
 * predicate: its task is queued; next deadline: none; quiet condition: not
 * queued (no timer is ever involved). Loop thread only, except
 * lull_notify_remote. */
#include "internal.h"

static void notify_from_remote(lull_task *task);

void lull_notifier_init(lull_notifier *n) {
    if (!n) return;
    n->head = n->tail = NULL;
    n->raised = 0;
    lull_task_init(&n->remote, notify_from_remote);
}

static void listener_run(lull_task *task) {
    lull_listener *l = LULL_CONTAINER_OF(task, lull_listener, task);
    l->loop->current = (lull_any_fn)l->fn;
    l->fn(l);
}

static void subscribe(lull_loop *loop, lull_notifier *n, lull_listener *l) {
    l->loop = loop;
    l->notifier = n;
    l->next = NULL;
    l->prev = n->tail;
    if (n->tail)
        n->tail->next = l;
    else
        n->head = l;
    n->tail = l;
    loop->listeners++;
    l->loop_prev = NULL;
    l->loop_next = loop->listening;
    if (loop->listening) loop->listening->loop_prev = l;
    loop->listening = l;
}

void lull_listen(lull_loop *loop, lull_notifier *n, lull_listener *l,
                 lull_listener_fn fn) {
    if (!loop || !n || !l || !fn) return;
    LULL_ASSERT_LOOP_THREAD(loop);
    LULL_ASSERT(l->notifier == NULL || l->notifier != n || l->loop != loop,
                "lull: listener subscribed twice");
    lull_task_init(&l->task, listener_run);
    l->target = &l->task;
    l->fn = fn;
    l->pump_next = NULL;
    subscribe(loop, n, l);
}

/* Subscribes a listener whose raise posts another task (a pump's pass). */
void lull__listen_task(lull_loop *loop, lull_notifier *n, lull_listener *l,
                       lull_task *target) {
    lull_task_init(&l->task, NULL);
    l->target = target;
    l->fn = NULL;
    l->pump_next = NULL;
    subscribe(loop, n, l);
}

void lull_unlisten(lull_listener *l) {
    if (!l || !l->notifier) return;
    LULL_ASSERT_LOOP_THREAD(l->loop);
    lull_notifier *n = l->notifier;
    if (l->prev)
        l->prev->next = l->next;
    else
        n->head = l->next;
    if (l->next)
        l->next->prev = l->prev;
    else
        n->tail = l->prev;
    l->next = l->prev = NULL;
    l->notifier = NULL;
    if (l->target == &l->task) lull_cancel(&l->task);
    l->loop->listeners--;
    if (l->loop_prev)
        l->loop_prev->loop_next = l->loop_next;
    else
        l->loop->listening = l->loop_next;
    if (l->loop_next) l->loop_next->loop_prev = l->loop_prev;
    l->loop_next = l->loop_prev = NULL;
}

void lull_notify(lull_notifier *n) {
    if (!n) return;
    n->raised++;
    for (lull_listener *l = n->head; l; l = l->next)
        lull_post(l->loop, l->target);
}

static void notify_from_remote(lull_task *task) {
    lull_notify(LULL_CONTAINER_OF(task, lull_notifier, remote));
}

void lull_notify_remote(lull_loop *loop, lull_notifier *n) {
    if (!loop || !n) return;
    lull_post_remote(loop, &n->remote);
}

lull_any_fn lull__listener_fn(const lull_listener *l) {
    if (l->fn) return (lull_any_fn)l->fn;
    lull_live pump;
    if (l->target && lull__pump_describe(&l->target->node, &pump))
        return pump.fn;
    return NULL;
}

bool lull__notify_describe(const lull__node *n, lull_live *out) {
    if (n->flags & LULL__NODE_TIMER) return false;
    if (n->fn.task == listener_run) {
        const lull_listener *l =
            LULL_CONTAINER_OF((const lull_task *)n, lull_listener, task);
        out->kind = LULL_HANDLE_LISTENER;
        out->handle = l;
        out->fn = (lull_any_fn)l->fn;
        return true;
    }
    if (n->fn.task == notify_from_remote) {
        const lull_notifier *nt =
            LULL_CONTAINER_OF((const lull_task *)n, lull_notifier, remote);
        out->kind = LULL_HANDLE_NOTIFIER;
        out->handle = nt;
        out->fn = nt->head ? lull__listener_fn(nt->head) : NULL;
        return true;
    }
    return false;
}

bool lull__notify_reaches(const lull_notifier *n, lull_any_fn *fn, int *kind) {
    const lull_listener *l = n->head;
    if (!l) return false;
    lull_live pump;
    if (!l->fn && l->target && lull__pump_describe(&l->target->node, &pump)) {
        *fn = pump.fn;
        *kind = LULL_SOURCE_PUMP;
    } else {
        *fn = (lull_any_fn)l->fn;
        *kind = LULL_SOURCE_REMOTE;
    }
    return true;
}

lull_any_fn lull__notify_raise_fn(void) {
    return (lull_any_fn)notify_from_remote;
}
