/* What is live (C8): what keeps lull_loop_free at -EBUSY, counted by cause
 * (lull_metrics' live_* fields) and listed handle by handle
 * (lull_loop_walk, lull_loop_print_live).
 *
 * Owns no state: it reads the structures the loop already keeps for its own
 * work. Every cause of -EBUSY is reachable that way without allocating per
 * handle: the ready queue, the due list and the flush queue (tasks and
 * timers queued to run), the timer heap (armed timers), the table of started fd
 * watchers (src/backend_epoll.c), the loop's list of subscribed listeners
 * (src/notify.c, kept for this file) and the stack of remote posts
 * (src/remote.c). Held references are a count and have no handle. Nodes of
 * lull's own (a listener's task, a pump's pass and retry, a notifier's
 * remote raise) are reported as the handle the user owns, with the user's
 * callback behind them. Loop thread only; nothing here is a hot path. */
#include <errno.h>

#include "internal.h"

typedef struct walk {
    lull_loop *loop;
    lull_walk_fn fn;
    void *arg;
    int count;
} walk;

static void emit(walk *w, lull_live *e) {
    e->name = e->fn ? lull__name_lookup(w->loop, e->fn) : NULL;
    w->count++;
    if (w->fn) w->fn(e, w->arg);
}

/* A queued or armed node: a user's task or timer, or lull's own node, which
 * is reported as the handle behind it. */
void lull__describe_node(const lull__node *n, lull_live *e) {
    if (lull__notify_describe(n, e) || lull__pump_describe(n, e)) return;
    if (n->flags & LULL__NODE_TIMER) {
        e->kind = LULL_HANDLE_TIMER;
        e->fn = (lull_any_fn)n->fn.timer;
    } else {
        e->kind = LULL_HANDLE_TASK;
        e->fn = (lull_any_fn)n->fn.task;
    }
    e->handle = n;
}

static void walk_queue(walk *w, const lull__node *q) {
    for (const lull__node *n = q->next; n != q; n = n->next) {
        lull_live e = {.cause = LULL_LIVE_READY, .ref = true, .fd = -1};
        lull__describe_node(n, &e);
        emit(w, &e);
    }
}

static void walk_remote_one(lull_task *t, void *arg) {
    lull_live e = {.cause = LULL_LIVE_REMOTE, .fd = -1};
    lull__describe_node(&t->node, &e);
    emit(arg, &e);
}

static int walk_all(lull_loop *loop, lull_walk_fn fn, void *arg) {
    walk w = {.loop = loop, .fn = fn, .arg = arg};
    /* Deferred arms get their deadlines first: a walk reports them. */
    if (loop->heap.pend) lull__timers_flush_now(loop);
    walk_queue(&w, &loop->ready);
    walk_queue(&w, &loop->due);
    walk_queue(&w, &loop->flush);
    for (uint32_t i = 0; i < loop->heap.len; i++) {
        const lull__slot *s = lull__heap_slot(&loop->heap, LULL__HEAP_ROOT + i);
        lull_live e = {.cause = LULL_LIVE_ARMED,
                       .ref = !(s->timer->node.flags & LULL__NODE_UNREF),
                       .deadline = s->deadline,
                       .fd = -1};
        lull__describe_node(&s->timer->node, &e);
        emit(&w, &e);
    }
    for (uint32_t i = 0; i < loop->io_slots_cap; i++) {
        const lull_io *io = loop->io_slots[i].io;
        if (!io) continue;
        lull_live e = {.cause = LULL_LIVE_STARTED,
                       .kind = LULL_HANDLE_IO,
                       .handle = io,
                       .fn = (lull_any_fn)io->fn,
                       .ref = !(io->flags & LULL__IO_UNREF),
                       .fd = io->fd};
        emit(&w, &e);
    }
    for (const lull_listener *l = loop->listening; l; l = l->loop_next) {
        lull_live e = {.cause = LULL_LIVE_SUBSCRIBED,
                       .kind = LULL_HANDLE_LISTENER,
                       .handle = l,
                       .fn = lull__listener_fn(l),
                       .fd = -1};
        emit(&w, &e);
    }
    lull__remote_each(loop, walk_remote_one, &w);
    return w.count;
}

int lull_loop_walk(lull_loop *loop, lull_walk_fn fn, void *arg) {
    if (!loop || !fn) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(loop);
    return walk_all(loop, fn, arg);
}

/* Fills the live_* fields of the metrics (src/metrics.c). */
static void count_one(const lull_live *e, void *arg) {
    lull_metrics *m = arg;
    switch (e->cause) {
    case LULL_LIVE_READY:
        m->live_ready++;
        break;
    case LULL_LIVE_REMOTE:
        m->live_remote++;
        break;
    default:
        break; /* counted below from the loop's own counters */
    }
}

void lull__live_count(lull_loop *loop, lull_metrics *m) {
    m->live_ready = m->live_remote = 0;
    /* Only the queues and the remote stack need a walk; the rest is kept
     * counted by the loop for liveness. */
    walk w = {.loop = loop, .fn = count_one, .arg = m};
    walk_queue(&w, &loop->ready);
    walk_queue(&w, &loop->due);
    walk_queue(&w, &loop->flush);
    lull__remote_each(loop, walk_remote_one, &w);
    m->live_timers = loop->timers_ref;
    m->live_timers_unref = loop->heap.len + loop->heap.pend - loop->timers_ref;
    m->live_io = loop->io_ref;
    m->live_io_unref = loop->io_active - loop->io_ref;
    m->live_listeners = loop->listeners;
    m->live_refs = loop->refs;
}

static const char *cause_word(int cause) {
    switch (cause) {
    case LULL_LIVE_READY:
        return "ready";
    case LULL_LIVE_ARMED:
        return "armed";
    case LULL_LIVE_STARTED:
        return "started";
    case LULL_LIVE_SUBSCRIBED:
        return "subscribed";
    default:
        return "remote";
    }
}

static const char *kind_word(int kind) {
    switch (kind) {
    case LULL_HANDLE_TASK:
        return "task";
    case LULL_HANDLE_TIMER:
        return "timer";
    case LULL_HANDLE_IO:
        return "fd";
    case LULL_HANDLE_LISTENER:
        return "listener";
    case LULL_HANDLE_PUMP:
        return "pump";
    default:
        return "notifier";
    }
}

typedef struct printer {
    lull_loop *loop;
    FILE *out;
} printer;

static void print_one(const lull_live *e, void *arg) {
    printer *p = arg;
    char what[64];
    if (e->name)
        snprintf(what, sizeof what, "%s", e->name);
    else if (e->fn)
        /* The code address, as the wake audit prints it (docs/AUDIT.md). */
        snprintf(what, sizeof what, "callback %#lx",
                 (unsigned long)(uintptr_t)e->fn);
    else
        snprintf(what, sizeof what, "(no listener)");
    fprintf(p->out, "  %-10s %-8s %p  %s", cause_word(e->cause),
            kind_word(e->kind), e->handle, what);
    /* lull's own handle: say whose it is. */
    const lull__own_name *own = e->fn ? lull__own_name_of(e->fn) : NULL;
    if (own)
        fprintf(p->out, " of %s %p", own->owner,
                (const void *)((const char *)e->handle - own->offset));
    if (e->cause == LULL_LIVE_STARTED) fprintf(p->out, "  fd %d", e->fd);
    if (e->cause == LULL_LIVE_ARMED) {
        uint64_t now = p->loop->now;
        if (e->deadline >= now)
            fprintf(p->out, "  due in %llu ns",
                    (unsigned long long)(e->deadline - now));
        else
            fprintf(p->out, "  due");
    }
    if ((e->cause == LULL_LIVE_ARMED || e->cause == LULL_LIVE_STARTED) &&
        !e->ref)
        fprintf(p->out, "  unref");
    fputc('\n', p->out);
}

int lull_loop_print_live(lull_loop *loop, FILE *out) {
    if (!loop || !out) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(loop);
    /* Counted first, so the header can say how many lines follow. */
    int n = walk_all(loop, NULL, NULL);
    fprintf(out, "lull loop %p: %d live handle entr%s, %u reference%s held",
            (void *)loop, n, n == 1 ? "y" : "ies", loop->refs,
            loop->refs == 1 ? "" : "s");
    /* Open streams, servers and udp sockets keep lull_loop_free busy too,
     * watched or not: an idle one (paused, its peer's EOF kept, a udp
     * socket not receiving) has no entry. */
    if (loop->handles)
        fprintf(out, ", %u stream, server or udp handle%s open", loop->handles,
                loop->handles == 1 ? "" : "s");
    fputc('\n', out);
    printer p = {.loop = loop, .out = out};
    walk_all(loop, print_one, &p);
    /* A report that did not arrive is an error, not n: stdio keeps the
     * failure in the stream (a closed pipe, a full non-blocking one), and
     * fflush says whether the buffered rest got out. errno is the failed
     * write's: nothing else ran since. */
    if (fflush(out) != 0 || ferror(out)) return errno > 0 ? -errno : -EIO;
    return n;
}

static bool queued_on(const lull__node *q, const lull__node *node) {
    for (const lull__node *n = q->next; n != q; n = n->next)
        if (n == node) return true;
    return false;
}

bool lull__live_on(const lull_loop *loop, const lull_io *io,
                   const lull__node *const *nodes, int n) {
    for (uint32_t i = 0; io && i < loop->io_slots_cap; i++)
        if (loop->io_slots[i].io == io) return true;
    for (int k = 0; k < n; k++)
        if (queued_on(&loop->ready, nodes[k]) ||
            queued_on(&loop->flush, nodes[k]))
            return true;
    return false;
}
