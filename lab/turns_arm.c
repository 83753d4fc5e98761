/* The rows of the `turns` figure (9), lull's alone: how much later than its
 * lull_timer_start call a delayed arm's delay starts counting on the real
 * clock, which is what the arm adds to the timer's lateness (docs/API.md,
 * lull_timer_start: a callback's first delayed arm reads the clock, a
 * further one counts from the loop's next reading, taken when the callback
 * returns or calls lull_loop_should_yield).
 *
 * Each arm records CLOCK_MONOTONIC just before its call. After the run,
 * when every arm has long been given its deadline, the deadline minus the
 * delay is the reading the delay counts from; that minus the call's time
 * is the value. Timers are due in an hour, so none fires. Rows: a producer
 * that arms one timer per task and posts itself again; the same doing
 * ~1 µs of work first (a record's worth); that one's second arm per task
 * (deferred: the first of the task reads the clock); a 1 ms timer that
 * re-arms itself and arms one more beside it (an idle loop's timer, as
 * figure (3) runs it). Each producer row is measured on its second pass,
 * its loop's timer heap grown by the first. Also linked into lull-lab-so. */
#include "lab.h"
#include "turns.h"

#include <errno.h>
#include <lull.h>
#include <stdlib.h>

#define ARMS      20000
#define REARMS    2000 /* a 1 ms timer's: 2 s of them */
#define RECORD_NS 1000 /* the work before the arm, spun on the clock */
#define HOUR_NS   (3600ull * 1000000000u)
#define TICK_NS   1000000u /* the re-armed timer's period */

enum { PLAIN, WORKED, SECOND, REARM };

/* One measurement's state: a static, as the loop's callbacks reach it. */
static struct {
    lull_loop *loop;
    lull_timer *timers; /* [want], one arm each */
    uint64_t *called;   /* the clock just before each arm's call */
    uint32_t next, want;
    int mode;
    lull_timer lead; /* SECOND: armed first in each task, not measured */
} a;

static void never_fires(lull_timer *t) {
    (void)t;
}

static void arm_next(void) {
    a.called[a.next] = lab_now_ns();
    lull_timer_start(&a.timers[a.next], HOUR_NS, 0);
    a.next++;
}

static void producer(lull_task *t) {
    if (a.mode != PLAIN) {
        uint64_t end = lab_now_ns() + RECORD_NS;
        while (lab_now_ns() < end) {
        }
    }
    if (a.mode == SECOND) lull_timer_start(&a.lead, HOUR_NS, 0);
    arm_next();
    if (a.next < a.want) lull_task_post(a.loop, t);
}

static void tick(lull_timer *t) {
    if (a.next == a.want) return;
    arm_next();
    lull_timer_start(t, TICK_NS, 0);
}

static int run_mode(lull_loop *loop) {
    if (a.mode == REARM) {
        lull_timer t;
        lull_timer_init(loop, &t, tick);
        lull_timer_start(&t, TICK_NS, 0);
        int rc = lull_loop_run(loop, LULL_RUN_DEFAULT);
        lull_timer_stop(&t);
        return rc;
    }
    lull_task t;
    lull_task_init(&t, producer);
    lull_task_post(loop, &t);
    return lull_loop_run(loop, LULL_RUN_DEFAULT);
}

/* Fills out with the percentiles of the arms' start delays, in ns. */
static int summarize(turns_result *out) {
    double *v = calloc(a.want, sizeof *v);
    if (!v) return -ENOMEM;
    for (uint32_t i = 0; i < a.want; i++) {
        uint64_t from = lull_timer_deadline(&a.timers[i]) - HOUR_NS;
        v[i] = (double)(int64_t)(from - a.called[i]);
    }
    out->v[ARM_P50_NS] = lab_percentile(v, a.want, 0.50);
    out->v[ARM_P99_NS] = lab_percentile(v, a.want, 0.99);
    out->v[ARM_P999_NS] = lab_percentile(v, a.want, 0.999);
    out->v[ARM_MAX_NS] = v[a.want - 1]; /* sorted above */
    free(v);
    return 0;
}

static int measure(int mode, turns_result *out) {
    int rc = lull_loop_new(&a.loop, NULL);
    if (rc != 0) return rc;
    a.mode = mode;
    a.next = 0;
    a.want = mode == REARM ? REARMS : ARMS;
    a.timers = calloc(a.want, sizeof *a.timers);
    a.called = calloc(a.want, sizeof *a.called);
    if (!a.timers || !a.called) {
        rc = -ENOMEM;
    } else {
        for (uint32_t i = 0; i < a.want; i++) {
            lull_timer_init(a.loop, &a.timers[i], never_fires);
            lull_timer_unref(&a.timers[i]); /* the run ends with them armed */
        }
        lull_timer_init(a.loop, &a.lead, never_fires);
        lull_timer_unref(&a.lead);
        /* The producers' first pass grows the timer heap (each arm that
         * grows it reads the clock: src/timer.c); the measured pass is the
         * second, as a server's steady state is. The 1 ms timer's arms
         * each read the clock. */
        if (mode != REARM) {
            rc = run_mode(a.loop);
            for (uint32_t i = 0; i < a.want; i++)
                lull_timer_stop(&a.timers[i]);
            a.next = 0;
        }
        if (rc == 0) rc = run_mode(a.loop);
        if (rc == 0 && a.next != a.want) rc = -EIO;
        if (rc == 0) rc = summarize(out);
        for (uint32_t i = 0; i < a.want; i++)
            lull_timer_stop(&a.timers[i]);
        lull_timer_stop(&a.lead);
    }
    free(a.timers);
    free(a.called);
    a.timers = NULL;
    a.called = NULL;
    int frc = lull_loop_free(a.loop);
    return rc != 0 ? rc : frc;
}

int turns_arm_plain(const turns_params *p, turns_result *out) {
    (void)p;
    return measure(PLAIN, out);
}

int turns_arm_worked(const turns_params *p, turns_result *out) {
    (void)p;
    return measure(WORKED, out);
}

int turns_arm_second(const turns_params *p, turns_result *out) {
    (void)p;
    return measure(SECOND, out);
}

int turns_arm_rearm(const turns_params *p, turns_result *out) {
    (void)p;
    return measure(REARM, out);
}
