/* The runner scenario's scale line: lull's transport ÷ the no-loop floor
 * over the sizes of the table by sessions (lab/runner.c measures them).
 * Apart so that lab/test_verdict.c judges made-up sizes with it. */
#include <math.h>
#include <stdio.h>

#include "runner.h"

void runner_scale_note(runner_scale *w, int k, double q50, double qcpu,
                       double floor_move) {
    if (!isfinite(q50) || !isfinite(qcpu)) w->gaps++;
    if (k == 0) w->first_q50 = q50;
    if (q50 > w->q50 || (!isfinite(w->q50) && isfinite(q50))) {
        w->q50 = q50;
        w->floor_move = floor_move;
    }
    if (qcpu > w->qcpu || !isfinite(w->qcpu)) w->qcpu = qcpu;
}

/* The floor's p50 spread is evidence for the two p50 bounds only: no
 * spread of the floor's CPU is kept, so a CPU miss is never noise. A
 * missing ratio (a gap, or the first size's) is a miss, never skipped. */
void runner_scale_verdict(const runner_scale *w, int first_n) {
    if (!isfinite(w->q50) && !w->gaps) return; /* no size measured */
    lab_verdict *v = lab_verdict_add("runner", 2);
    if (!v) return;
    char a[LAB_CELL], b[LAB_CELL], c[LAB_CELL];
    v->timing = true;
    snprintf(v->what, sizeof v->what, "÷ floor: p50 ≤ %s, CPU/ev ≤ %s",
             lab_fmt3(a, w->q50), lab_fmt3(b, w->qcpu));
    snprintf(v->target, sizeof v->target, "≤ 1.5; %d: ≤ 1.1", first_n);
    snprintf(v->peer, sizeof v->peer, "%d: p50 %s× floor", first_n,
             lab_fmt3(c, w->first_q50));
    lab_verdict_spread(v, "the floor's p50", w->floor_move);
    lab_verdict_bound(v, w->q50, 1.5, true);
    lab_verdict_bound(v, w->first_q50, 1.1, true);
    lab_verdict_spread(v, "", NAN); /* none for what follows */
    lab_verdict_bound(v, w->qcpu, 1.5, true);
    if (w->gaps) lab_verdict_bound(v, NAN, 1.5, true);
}
