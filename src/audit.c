/* The wake audit (C8): who woke the loop, and which pumps ran for nothing.
 *
 * Owns: a table of sources keyed by callback function. Keying by function,
 * not by handle, keeps the table as small as the program's code (10,000
 * sessions sharing a pass function are one row) and makes a polling
 * component show up under one name (signals, which have no callback of
 * lull's, share one row). Rows are preallocated; the table
 * grows only past SOURCES_PREALLOCATED distinct callbacks, never per event.
 * Loop thread only. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Rows made at loop creation: enough for a program's distinct callbacks
 * in the common case, so the first wakeup of a run does not allocate. */
#define SOURCES_PREALLOCATED 32

int lull__audit_init(lull_loop *loop) {
    loop->sources = calloc(SOURCES_PREALLOCATED, sizeof *loop->sources);
    if (!loop->sources) return -ENOMEM;
    loop->sources_cap = SOURCES_PREALLOCATED;
    loop->audit_task_row = -1;
    loop->audit_start = lull__clock_real();
    return 0;
}

/* Starts a new row; -1 if the table cannot grow (the event goes uncounted
 * rather than failing the loop). */
static int add_source(lull_loop *loop, lull_any_fn fn, int kind) {
    if (loop->sources_len == loop->sources_cap) {
        int cap = loop->sources_cap ? loop->sources_cap * 2 : 16;
        lull__source *s = realloc(loop->sources, (size_t)cap * sizeof *s);
        if (!s) return -1;
        loop->sources = s;
        loop->sources_cap = cap;
    }
    lull__source *s = &loop->sources[loop->sources_len];
    memset(s, 0, sizeof *s);
    s->fn = fn;
    s->kind = kind;
    return loop->sources_len++;
}

LULL__HOT int lull__source_of(lull_loop *loop, lull_any_fn fn, int kind) {
    for (int i = 0; i < loop->sources_len; i++)
        if (loop->sources[i].fn == fn && loop->sources[i].kind == kind)
            return i;
    return add_source(loop, fn, kind);
}

LULL__HOT void lull__audit_wakeup(lull_loop *loop, lull_any_fn fn, int kind) {
    int i = lull__source_of(loop, fn, kind);
    if (i >= 0) loop->sources[i].wakeups++;
}

/* A remote post is charged to the callback it leads to, as the walk names
 * it (src/live.c): a plain task to its function; lull_notifier_raise_remote's
 * raise, whose task is lull's own forwarder shared by every notifier, to the
 * first listener it reaches, or to that listener's pump pass in the pump's own
 * row (one row per name: the pass's wakeups beside its passes). A raise of
 * a notifier with no listener keeps the forwarder's row, labelled so. */
LULL__HOT void lull__audit_remote_wakeup(lull_loop *loop,
                                         const lull_task *task) {
    /* A plain task (no notifier or pump behind it) is charged to its own
     * function, so its row can be remembered by that function: a
     * cross-thread ping-pong wakes the loop for the same task every time,
     * and the description and the row search cost more than the rest of
     * the wake path's bookkeeping. Rows are never removed or moved while
     * the loop lives (a reset zeroes their counts), so the index stays
     * good. */
    if (task->node.fn.task == loop->audit_task_fn &&
        loop->audit_task_row >= 0) {
        loop->sources[loop->audit_task_row].wakeups++;
        return;
    }
    lull_live e = {.fd = -1};
    lull__describe_node(&task->node, &e);
    lull_any_fn fn = e.fn;
    int kind = LULL_SOURCE_REMOTE;
    if (e.kind == LULL_HANDLE_PUMP) {
        kind = LULL_SOURCE_PUMP;
    } else if (e.kind == LULL_HANDLE_NOTIFIER &&
               !lull__notify_reaches(e.handle, &fn, &kind)) {
        fn = lull__notify_raise_fn();
    }
    int i = lull__source_of(loop, fn, kind);
    if (i < 0) return;
    loop->sources[i].wakeups++;
    if (e.kind == LULL_HANDLE_TASK) {
        loop->audit_task_fn = task->node.fn.task;
        loop->audit_task_row = i;
    }
}

/* A pump's retry timer is lull's own callback, shared by every pump: its
 * wakeup is charged to the pump's row (its pass, as a raise that reaches
 * the pump is), so that a pump holding by the clock shows under the name
 * of its pass, beside its passes. Any other timer is charged to its own
 * callback. */
LULL__HOT void lull__audit_timer_wakeup(lull_loop *loop, const lull__node *n) {
    lull_live e = {.fd = -1};
    if (lull__pump_describe(n, &e))
        lull__audit_wakeup(loop, e.fn, LULL_SOURCE_PUMP);
    else
        lull__audit_wakeup(loop, (lull_any_fn)n->fn.timer, LULL_SOURCE_TIMER);
}

void lull__audit_pass(lull_loop *loop, int source, bool empty) {
    if (source < 0 || source >= loop->sources_len) return;
    loop->sources[source].passes++;
    if (empty) loop->sources[source].empty++;
}

static const char *kind_word(int kind) {
    switch (kind) {
    case LULL_SOURCE_TIMER:
        return "timer";
    case LULL_SOURCE_IO:
        return "fd";
    case LULL_SOURCE_REMOTE:
        return "remote";
    case LULL_SOURCE_SIGNAL:
        return "signal";
    default:
        return "pump";
    }
}

static const char *label(lull_loop *loop, lull__source *s) {
    /* Signals have no callback of lull's: one row for all of them. */
    if (s->kind == LULL_SOURCE_SIGNAL) return "signal (interrupted wait)";
    if (s->fn == lull__notify_raise_fn())
        return "lull_notifier_raise_remote (a notifier with no listener)";
    const char *name = lull__name_lookup(loop, s->fn);
    if (name) return name;
    if (!s->label[0]) {
        /* Converting a function pointer to an integer is implementation
         * defined; on every Linux ABI it is the code address. */
        snprintf(s->label, sizeof s->label, "%s callback %#lx",
                 kind_word(s->kind), (unsigned long)(uintptr_t)s->fn);
    }
    return s->label;
}

static uint64_t weight(const lull__source *s) {
    return s->wakeups + s->empty;
}

int lull_loop_audit(lull_loop *loop, lull_audit_entry *out, int max,
                    uint64_t *window_ns) {
    if (!loop || max < 0 || (max > 0 && !out)) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(loop);
    uint64_t window = lull__clock_real() - loop->audit_start;
    if (window_ns) *window_ns = window;
    double seconds = window ? (double)window / 1e9 : 1.0;
    /* Selection of the busiest rows: the table holds one row per callback
     * function, so a quadratic pick is cheap and needs no scratch memory. */
    bool taken_any = false;
    for (int k = 0; k < max && k < loop->sources_len; k++) {
        int best = -1;
        for (int i = 0; i < loop->sources_len; i++) {
            lull__source *s = &loop->sources[i];
            if (s->reported) continue;
            if (best < 0 || weight(s) > weight(&loop->sources[best])) best = i;
        }
        lull__source *s = &loop->sources[best];
        s->reported = true;
        taken_any = true;
        out[k] = (lull_audit_entry){
            .name = label(loop, s),
            .kind = s->kind,
            .wakeups = s->wakeups,
            .passes = s->passes,
            .empty_passes = s->empty,
            .wakeups_per_s = (double)s->wakeups / seconds,
            .empty_per_s = (double)s->empty / seconds,
        };
    }
    if (taken_any)
        for (int i = 0; i < loop->sources_len; i++)
            loop->sources[i].reported = false;
    return loop->sources_len;
}

void lull_loop_audit_reset(lull_loop *loop) {
    if (!loop) return;
    LULL_ASSERT_LOOP_THREAD(loop);
    for (int i = 0; i < loop->sources_len; i++) {
        loop->sources[i].wakeups = 0;
        loop->sources[i].passes = 0;
        loop->sources[i].empty = 0;
    }
    loop->audit_start = lull__clock_real();
}

void lull__audit_free(lull_loop *loop) {
    free(loop->sources);
    loop->sources = NULL;
    loop->sources_len = loop->sources_cap = 0;
}
