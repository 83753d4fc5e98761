/* What lab/turns.c (the `turns` figures and their rows) shares with
 * lab/turns_report.c (what the figures are judged by: the notes under each
 * table, the short table and the verdict lines). lab/turns.c calls
 * lab/turns_report.c, never the other way. */
#ifndef LAB_TURNS_REPORT_H
#define LAB_TURNS_REPORT_H

#include "engine.h"
#include "turns.h"

typedef struct turns_figure {
    lab_fig_spec spec;  /* key, title, policy header, columns, ×, flags */
    const char *method; /* how it is measured; NULL: print_method says */
    const char *target; /* lull's target (README: The contracts) */
    int rows_of;        /* the figure whose entries it runs */
} turns_figure;

extern const turns_figure turns_figures[TURNS_FIGURES]; /* lab/turns.c */
/* Whether figure f is a cross-thread round trip (one CPU or two): its
 * rows are the round trip's entries. */
bool turns_is_trip(int f);
/* The thread's timer slack when lull-lab started. */
extern long turns_default_slack_ns;
/* The idle figure's handles ("10k" in its labels), fewer where
 * RLIMIT_NOFILE is low (lab/turns.c halves them to fit). */
extern int turns_idle_handles;
/* One CLOCK_MONOTONIC read, ns (measured after the timers figure). */
extern double turns_clock_ns;

/* The notes under figure f's table (--verbose). */
void turns_report_figure(const lab_fig *fig, int f, const turns_params *p);
/* The short table of every figure that ran (figs[f], NULL: did not run)
 * and the scenario's verdict lines. */
void turns_report(lab_fig *const figs[TURNS_FIGURES], const lab_options *opts);

#endif /* LAB_TURNS_REPORT_H */
