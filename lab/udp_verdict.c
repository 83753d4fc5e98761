/* The udp scenario's verdict lines (lab/udp.c measures the figures):
 * lull_udp's CPU per datagram beside the floor's and libuv's with
 * recvmmsg, its system calls beside libuv's defaults, the echo's p50
 * beside the floor's. Apart so that lab/test_verdict.c judges made-up
 * figures with it. */
#include <math.h>
#include <stdio.h>

#include "engine.h"
#include "udp.h"

/* The row of implementation impl_index (its tag), or NULL. */
static const lab_row *row_of(const lab_fig *f, int impl_index) {
    for (int i = 0; i < f->nrows; i++)
        if (f->rows[i].tag == impl_index) return &f->rows[i];
    return NULL;
}

static double median_of(const lab_fig *f, int impl_index, int col) {
    return lab_row_median(row_of(f, impl_index), col);
}

/* A line judged in every figure: a figure that ran (it has rows; --only
 * runs one) with no ratio, its rows failed, is a miss, never skipped;
 * gap: the first such, or -1. The line names it where it names a figure. */
static void note_gap(int *gap, int k) {
    if (*gap < 0) *gap = k;
}

static void name_figure(lab_verdict *v, lab_fig *const figs[], int gap,
                        int wf) {
    if (gap >= 0)
        snprintf(v->peer, sizeof v->peer, "missing: %s", figs[gap]->title);
    else
        snprintf(v->peer, sizeof v->peer, "worst: %s", figs[wf]->title);
}

/* quick (the demo): the first line only, the one the scenario stands for;
 * the rest are judged in full runs. */
void udp_verdict(lab_fig *const figs[UDP_FIGS], const bool ok[UDP_IMPLS],
                 bool quick) {
    char a[LAB_CELL], b[LAB_CELL];
    /* 1. CPU per datagram within 1.15× of the floor, in every figure. */
    double worst = NAN, spread = NAN;
    int wf = 0, gap = -1, ran = 0;
    for (int k = 0; k < UDP_FIGS; k++) {
        if (!figs[k]->nrows) continue;
        ran++;
        double x = median_of(figs[k], UDP_I_LULL, UV_CPU) /
                   median_of(figs[k], UDP_I_FLOOR, UV_CPU);
        if (!isfinite(x)) note_gap(&gap, k);
        if (isfinite(x) && !(x <= worst)) {
            worst = x;
            wf = k;
            spread = lab_row_spread(row_of(figs[k], UDP_I_FLOOR), UV_CPU);
        }
    }
    lab_verdict *v = lab_verdict_add("udp", 0);
    if (v && !ran) {
        snprintf(v->note, sizeof v->note,
                 "CPU/datagram: not measured (--only)");
    } else if (v) {
        v->timing = true;
        /* The figure goes to the last column: the first stays narrow
         * enough for the verdict's, whichever figure is the worst. */
        snprintf(v->what, sizeof v->what, "CPU/datagram %s× floor",
                 lab_fmt3(a, worst));
        snprintf(v->target, sizeof v->target, "≤ 1.15× floor");
        name_figure(v, figs, gap, wf);
        lab_verdict_spread(v, "floor CPU/datagram", spread);
        lab_verdict_judge(v, worst <= 1.15 && gap < 0);
    }
    if (quick) return;
    /* 2. Calls per datagram: at least 2× fewer than libuv's defaults. */
    v = lab_verdict_add("udp", 1);
    if (v && !ok[UDP_I_UV]) {
        snprintf(v->note, sizeof v->note, "calls/dg: libuv not run");
    } else if (v) {
        double least = NAN, mm = NAN;
        wf = 0;
        gap = -1;
        for (int k = 0; k < UDP_FIGS; k++) {
            if (!figs[k]->nrows) continue;
            double lull = median_of(figs[k], UDP_I_LULL, UV_CALLS);
            double x = median_of(figs[k], UDP_I_UV, UV_CALLS) / lull;
            if (!isfinite(x)) note_gap(&gap, k);
            if (isfinite(x) && !(x >= least)) {
                least = x;
                wf = k;
                mm = median_of(figs[k], UDP_I_UV_MMSG, UV_CALLS) / lull;
            }
        }
        snprintf(v->what, sizeof v->what, "calls/dg ×%s fewer",
                 lab_fmt3(a, least));
        snprintf(v->target, sizeof v->target, "≥ 2× fewer than libuv");
        if (gap >= 0)
            name_figure(v, figs, gap, wf);
        else
            snprintf(v->peer, sizeof v->peer, "libuv RECVMMSG %s",
                     lab_fmt_ratio(b, mm));
        lab_verdict_judge(v, least >= 2 && gap < 0);
    }
    /* 3. CPU per datagram below the peers' at equal batching, in every
     * figure: libuv with recvmmsg (UV_UDP_RECVMMSG; its queued sends
     * leave by sendmmsg) is the peer that batches as lull does. libevent
     * and libuv's default make one call a datagram: their rows stand in
     * the table, a different policy. */
    v = lab_verdict_add("udp", 2);
    if (v && !ok[UDP_I_UV_MMSG]) {
        snprintf(v->note, sizeof v->note,
                 "CPU/dg at equal batching: libuv RECVMMSG not run");
    } else if (v) {
        double least = NAN;
        wf = 0;
        gap = -1;
        for (int k = 0; k < UDP_FIGS; k++) {
            if (!figs[k]->nrows) continue;
            double x = lab_ratio(figs[k], row_of(figs[k], UDP_I_LULL),
                                 row_of(figs[k], UDP_I_UV_MMSG), UV_CPU);
            if (!isfinite(x)) note_gap(&gap, k);
            if (isfinite(x) && !(x >= least)) {
                least = x;
                wf = k;
            }
        }
        v->timing = true;
        snprintf(v->what, sizeof v->what, "CPU/dg: libuv mmsg %s",
                 lab_fmt_ratio(a, least));
        snprintf(v->target, sizeof v->target, "below, equal batching");
        name_figure(v, figs, gap, wf);
        lab_verdict_judge(v, least > 1 && gap < 0);
    }
    /* 4. The echo's p50 within 1.2× of the floor's. */
    worst = NAN;
    wf = 0;
    gap = -1;
    ran = 0;
    for (int k = 0; k < UDP_ECHO_FIGS; k++) {
        if (!figs[k]->nrows) continue;
        ran++;
        double x = median_of(figs[k], UDP_I_LULL, UV_P50) /
                   median_of(figs[k], UDP_I_FLOOR, UV_P50);
        if (!isfinite(x)) note_gap(&gap, k);
        if (isfinite(x) && !(x <= worst)) {
            worst = x;
            wf = k;
            spread = lab_row_spread(row_of(figs[k], UDP_I_FLOOR), UV_P50);
        }
    }
    if ((v = lab_verdict_add("udp", 3)) && !ran) {
        snprintf(v->note, sizeof v->note, "echo p50: not measured (--only)");
    } else if (v) {
        v->timing = true;
        snprintf(v->what, sizeof v->what, "echo p50 %s× floor",
                 lab_fmt3(a, worst));
        snprintf(v->target, sizeof v->target, "≤ 1.2× floor");
        if (gap >= 0)
            name_figure(v, figs, gap, wf);
        else
            snprintf(v->peer, sizeof v->peer, "%s µs vs %s µs",
                     lab_fmt3(a, median_of(figs[wf], UDP_I_LULL, UV_P50)),
                     lab_fmt3(b, median_of(figs[wf], UDP_I_FLOOR, UV_P50)));
        lab_verdict_spread(v, "floor p50", spread);
        lab_verdict_judge(v, worst <= 1.2 && gap < 0);
    }
}
