/* Notifiers and listeners (C4).
 *
 * Owns: a notifier's subscriber list and the raise. A raise posts each
 * subscriber's target task; posting a pending task is a no-op, so however
 * often a notifier is raised before the listener runs, it runs once, and
 * never inside lull_notifier_raise. Listeners run in subscription order because
 * their tasks are posted in list order. No allocation: the list is threaded
 * through the caller-owned listeners.
 *
 * The five rows (README, "The contracts") of a listener: trigger:
 * lull_notifier_raise; source of truth: whatever state the notifier guards (the
 * raise is a hint to look); pending predicate: its task is queued; next
 * deadline: none; quiet condition: not queued (no timer is ever involved). Loop
 * thread only, except lull_notifier_raise_remote. */
#include <sched.h>

#include <errno.h>
#include <string.h>

#include "internal.h"

static void notify_from_remote(lull_task *task);

int lull_notifier_init(lull_notifier *n) {
    if (!n) return -EINVAL;
    /* Listeners subscribed: clearing the list would leave them on their
     * loop's list, and their later stop or the next raise would walk freed
     * or foreign memory. Asked by address (src/registry.c): n is garbage
     * before its first init, and a copy of a live notifier is not one. */
    if (lull__inuse_has(n)) return -EBUSY;
    n->head = n->tail = NULL;
    n->raised = 0;
    n->raisers = 0;
    n->data = NULL;
    lull_task_init(&n->remote, notify_from_remote);
    return 0;
}

static void listener_run(lull_task *task) {
    lull_listener *l = LULL_CONTAINER_OF(task, lull_listener, task);
    l->loop->current = (lull_any_fn)l->fn;
    l->fn(l);
}

/* Is l subscribed, on any loop? Asked by address, in the process's set of
 * handles in use (src/registry.c): l needs no initialisation before it is
 * subscribed, so its own fields cannot say, and a walk of the loop's list
 * would make subscribing a listener per connection quadratic. */
bool lull__listener_subscribed(const lull_listener *l) {
    return lull__inuse_has(l);
}

/* Every field of l is written here or by the caller before it is read, so
 * a listener may be subscribed straight from uninitialised memory. The
 * caller found it not subscribed (lull__listener_subscribed). */
static void subscribe(lull_loop *loop, lull_notifier *n, lull_listener *l) {
    /* The listener and, with the first listener, n join the process's set
     * of handles in use (their stops take them out), so that a second
     * subscription and lull_notifier_init refuse them. A subscription
     * cannot fail: without memory for the set (-ENOMEM) only that check
     * is lost. */
    (void)lull__inuse_add(l);
    if (!n->head) (void)lull__inuse_add(n);
    /* A zeroed notifier (static storage, calloc) never given to
     * lull_notifier_init takes listeners and local raises; the task that
     * carries its remote raises is set up here, on the owner thread and
     * before any listener can hear one, or a remote raise would be lost.
     * Atomic: another thread's raise may read it meanwhile. */
    if (!__atomic_load_n(&n->remote.node.fn.task, __ATOMIC_RELAXED))
        __atomic_store_n(&n->remote.node.fn.task, notify_from_remote,
                         __ATOMIC_RELEASE);
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

int lull_listener_start(lull_loop *loop, lull_notifier *n, lull_listener *l,
                        lull_listener_fn fn) {
    if (!loop || !n || !l || !fn) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(loop);
    /* Subscribed already: rewriting its task would cut the loop's queue
     * if queued, and linking it again makes the lists a cycle that a raise
     * never leaves. A programming error that debug builds stop at. */
    bool subscribed = lull__listener_subscribed(l);
    LULL_ASSERT(!subscribed, "lull: listener subscribed twice");
    if (subscribed) return -EBUSY;
    lull_task_init(&l->task, listener_run);
    l->target = &l->task;
    l->fn = fn;
    l->pump_next = l->pump_prev = NULL;
    subscribe(loop, n, l);
    return 0;
}

/* Subscribes a listener whose raise posts another task (a pump's pass).
 * The caller asked lull__listener_subscribed first: l is not. */
void lull__listen_task(lull_loop *loop, lull_notifier *n, lull_listener *l,
                       lull_task *target) {
    /* Never posted (a raise posts target): it needs no function. */
    memset(&l->task, 0, sizeof l->task);
    l->target = target;
    l->fn = NULL;
    subscribe(loop, n, l);
}

void lull_listener_stop(lull_listener *l) {
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
    lull__inuse_remove(l);               /* free to subscribe again */
    if (!n->head) lull__inuse_remove(n); /* lull_notifier_init may clear it */
    if (l->target == &l->task)
        lull_task_cancel(&l->task);
    else
        lull__pump_unlink_listener(l); /* reusable anywhere from here */
    l->loop->listeners--;
    if (l->loop_prev)
        l->loop_prev->loop_next = l->loop_next;
    else
        l->loop->listening = l->loop_next;
    if (l->loop_next) l->loop_next->loop_prev = l->loop_prev;
    l->loop_next = l->loop_prev = NULL;
}

void lull_notifier_raise(lull_notifier *n) {
    if (!n) return;
    n->raised++;
    for (lull_listener *l = n->head; l; l = l->next)
        lull_task_post(l->loop, l->target);
}

static void notify_from_remote(lull_task *task) {
    lull_notifier_raise(LULL_CONTAINER_OF(task, lull_notifier, remote));
}

/* A raiser is counted for as long as it may touch the notifier (the claim
 * of n->remote, even one that finds it queued already), so that
 * lull_notifier_quiesce can wait for it as lull_loop_free waits for a
 * poster. */
void lull_notifier_raise_remote(lull_loop *loop, lull_notifier *n) {
    /* No carrier: a zeroed notifier that no listener ever joined, where a
     * raise reaches no one (as lull_notifier_raise of it). */
    if (!loop || !n ||
        !__atomic_load_n(&n->remote.node.fn.task, __ATOMIC_ACQUIRE))
        return;
    __atomic_fetch_add(&n->raisers, 1, __ATOMIC_RELAXED);
    lull_task_post_remote(loop, &n->remote);
    __atomic_fetch_sub(&n->raisers, 1, __ATOMIC_RELEASE);
}

void lull_notifier_quiesce(lull_loop *loop, lull_notifier *n) {
    if (!loop || !n) return;
    LULL_ASSERT_LOOP_THREAD(loop);
    while (__atomic_load_n(&n->raisers, __ATOMIC_ACQUIRE) != 0)
        sched_yield();
    /* With no raiser inside, n->remote is either not queued remotely or
     * sits complete on the loop's stack: take the stack (its other posts
     * are queued as a poll would queue them), then unqueue the raise. */
    if (__atomic_load_n(&n->remote.remote_next, __ATOMIC_ACQUIRE) != NULL)
        lull__remote_drain(loop);
    LULL_ASSERT(__atomic_load_n(&n->remote.remote_next, __ATOMIC_RELAXED) ==
                    NULL,
                "lull: lull_notifier_quiesce on another loop than the raises");
    lull_task_cancel(&n->remote);
}

/* lull_loop_fork, in the child: a thread that was inside
 * lull_notifier_raise_remote at the fork is not there, and never leaves.
 * Its count would keep lull_notifier_quiesce waiting for ever, and a claim
 * it had made of n->remote but not yet pushed would leave the task looking
 * queued on no stack, so that every raise in the child was taken as
 * coalesced into one that never runs. The stack is taken first: after it,
 * a link still set is such a claim. The raise it was making is made here
 * (a raise is a hint to look: one more loses nothing). Notifiers whose
 * listeners are on this loop are the ones it can reach; a raise of
 * another goes to the loop its listeners are on. */
void lull__notify_fork(lull_loop *loop) {
    lull__remote_drain(loop);
    for (lull_listener *l = loop->listening; l; l = l->loop_next) {
        lull_notifier *n = l->notifier;
        __atomic_store_n(&n->raisers, 0u, __ATOMIC_RELAXED);
        if (__atomic_load_n(&n->remote.remote_next, __ATOMIC_RELAXED)) {
            __atomic_store_n(&n->remote.remote_next, NULL, __ATOMIC_RELAXED);
            lull_task_post(loop, &n->remote);
        }
    }
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
