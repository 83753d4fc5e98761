/* How many times a loop polls in a window of real time, for the cases
 * that check a loop goes quiet: a handle whose registration reports an
 * event it never consumes makes thousands of polls; a quiet loop a few.
 * Shared by the test files (each includes it once, after check.h). */
#ifndef LULL_TESTS_POLLS_H
#define LULL_TESTS_POLLS_H

#include <lull.h>

#include "check.h"

static inline void polls_window_end(lull_timer *t) {
    lull_loop_stop(t->loop);
}

/* Runs the loop for `ms` and returns the polls it made. Two timers: one
 * ends the window, a longer one keeps the loop alive where its handles
 * hold no interest, so the run ends at the window either way. */
static inline uint64_t polls_in(lull_loop *loop, uint64_t ms) {
    lull_timer end, hold;
    CHECK_EQ(lull_timer_init(loop, &end, polls_window_end), 0);
    CHECK_EQ(lull_timer_init(loop, &hold, polls_window_end), 0);
    lull_timer_start(&end, LULL_MS(ms), 0);
    lull_timer_start(&hold, LULL_MS(ms) * 50, 0);
    lull_metrics m0, m1;
    lull_loop_metrics(loop, &m0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    lull_loop_metrics(loop, &m1);
    lull_timer_stop(&end);
    lull_timer_stop(&hold);
    return m1.polls - m0.polls;
}

#endif
