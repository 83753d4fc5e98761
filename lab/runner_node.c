/* Node's rows of the `runner` scenario: each measurement runs
 * lab/node/runner.js (found through LAB_SOURCE_DIR) with `node` from PATH,
 * one process per measurement, driving the same runner children as lull's
 * transport (lull-lab runner-child), and reads the one JSON line it
 * prints. The script checks every event itself (once, in order, intact)
 * and says how many failed; lull-lab turns that into -EPROTO, as for its
 * own rows. */
#include "runner.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef LAB_SOURCE_DIR
#define LAB_SOURCE_DIR "."
#endif
/* The script, installed or in the source tree (char *: it goes into
 * execv's argument array, which nothing writes to). */
static char *script_path(void) {
    static char buf[4096];
    return (char *)lab_installed_path("share/lull/lab/node/runner.js",
                                      LAB_SOURCE_DIR "/node/runner.js", buf,
                                      sizeof buf);
}
#define SCRIPT script_path()

/* The number after "key": in a flat JSON object, or NaN (null too). */
static double field(const char *json, const char *key) {
    char pat[48];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    if (!p) return NAN;
    char *end;
    double v = strtod(p + strlen(pat), &end);
    return end == p + strlen(pat) ? NAN : v;
}

/* The string after "key": (no escapes but \" expected), into buf. */
static void string_field(const char *json, const char *key, char *buf,
                         size_t size) {
    buf[0] = '\0';
    char pat[48];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = strstr(json, pat);
    if (!p) return;
    p += strlen(pat);
    size_t n = 0;
    for (; *p && *p != '"' && n + 1 < size; p++) {
        if (*p == '\\' && p[1]) p++;
        buf[n++] = *p;
    }
    buf[n] = '\0';
}

bool runner_node_available(char *why, size_t size) {
    return lab_node_available(SCRIPT, why, size);
}

int runner_node_measure(const runner_params *p, int mode, runner_result *out) {
    memset(out, 0, sizeof *out);
    out->loop_wakeups = NAN;
    char a[9][600];
    snprintf(a[0], sizeof a[0], "lab=%s", p->exe);
    snprintf(a[1], sizeof a[1], "mode=%s",
             mode == RUNNER_POLL ? "poll" : "notify");
    snprintf(a[2], sizeof a[2], "runners=%d", p->runners);
    snprintf(a[3], sizeof a[3], "events=%d", p->events);
    snprintf(a[4], sizeof a[4], "interval_ns=%llu",
             (unsigned long long)p->interval_ns);
    snprintf(a[5], sizeof a[5], "poll_ms=%.0f", (double)p->poll_ns / 1e6);
    snprintf(a[6], sizeof a[6], "idle_ms=%.0f", (double)p->idle_ns / 1e6);
    snprintf(a[7], sizeof a[7], "aligned=%d", p->aligned ? 1 : 0);
    /* The CPUs whose /proc/stat lines the script reads over its stream. */
    snprintf(a[8], sizeof a[8], "cpus=%d,%d", runner_pinned_cpu(0),
             runner_pinned_cpu(1));
    char *args[] = {lab_node_path(),
                    SCRIPT,
                    a[0],
                    a[1],
                    a[2],
                    a[3],
                    a[4],
                    a[5],
                    a[6],
                    a[7],
                    a[8],
                    NULL};
    char buf[2048];
    int rc = lab_node_run(args, -1, -1, 0, buf, sizeof buf);
    if (rc < 0) {
        snprintf(out->why, sizeof out->why, "%s", lab_node_error(rc));
        return rc;
    }
    string_field(buf, "why", out->why, sizeof out->why);
    double err = field(buf, "errno");
    if (isfinite(err) && err < 0) return (int)err; /* a spawn that failed */
    double errors = field(buf, "errors");
    if (!isfinite(errors)) {
        snprintf(out->why, sizeof out->why, "node printed no result");
        return -ENODATA; /* Node's failure, not lull's delivery */
    }
    if (errors > 0) return -EPROTO;
    out->wait_p50_us = field(buf, "wait_p50_us");
    out->wait_p95_us = field(buf, "wait_p95_us");
    out->wait_p99_us = field(buf, "wait_p99_us");
    out->wait_max_us = field(buf, "wait_max_us");
    out->wait_mean_us = field(buf, "wait_mean_us");
    out->idle_reads = field(buf, "idle_reads");
    out->idle_wakeups = field(buf, "idle_wakeups");
    out->idle_cpu_ms = field(buf, "idle_cpu_ms");
    out->idle_s = field(buf, "idle_s");
    out->ready_ms = field(buf, "ready_ms");
    out->delivered = field(buf, "delivered");
    out->cpu_per_event_ns = field(buf, "cpu_per_event_ns");
    out->events_per_read = field(buf, "events_per_read");
    out->busy_transport_pct = field(buf, "busy_transport_pct");
    out->busy_runners_pct = field(buf, "busy_runners_pct");
    out->steal_pct = field(buf, "steal_pct");
    if (out->delivered != (double)p->runners * p->events) {
        snprintf(out->why, sizeof out->why, "node delivered %.0f events of %d",
                 out->delivered, p->runners * p->events);
        return -EPROTO;
    }
    return 0;
}
