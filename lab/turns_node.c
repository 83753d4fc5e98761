/* Node's row of the `turns` figures: each entry runs lab/node/turns.js
 * (found through LAB_SOURCE_DIR, set by lab/CMakeLists.txt) with `node` from
 * PATH, one process per measurement, and reads the one JSON line it prints:
 * {"figure": "...", "values": [v0, v1, ...]} (null for a value Node cannot
 * measure). Node is skipped with a line when it is not on PATH. The round
 * trip pins the whole Node process (main thread and worker) to the CPUs the
 * C round trips pin their two threads to; the lateness rows give it the
 * timer slack the driver gave the C rows' thread (inherited across exec).
 * Polls per hop are Node's libuv iterations per hop
 * (performance.nodeTiming.uvMetricsInfo.loopCount; one poll each). */
#include "lab.h"
#include "turns.h"

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
    return (char *)lab_installed_path("share/lull/lab/node/turns.js",
                                      LAB_SOURCE_DIR "/node/turns.js", buf,
                                      sizeof buf);
}
#define SCRIPT script_path()

/* Reads the numbers of "values": [...] into out (null -> NaN). */
static int parse_values(const char *json, turns_result *out) {
    const char *p = strstr(json, "\"values\"");
    if (!p) return -ENODATA;
    p = strchr(p, '[');
    if (!p) return -ENODATA;
    p++;
    for (int i = 0; i < TURNS_VALUES; i++) {
        while (*p == ' ' || *p == '\n')
            p++;
        if (*p == ']') break;
        if (strncmp(p, "null", 4) == 0) {
            out->v[i] = NAN;
            p += 4;
        } else {
            char *end;
            out->v[i] = strtod(p, &end);
            if (end == p) return -ENODATA;
            p = end;
        }
        while (*p == ' ')
            p++;
        if (*p == ',') p++;
    }
    return 0;
}

static int measure(const char *figure, const turns_params *p, bool pin,
                   turns_result *out) {
    char a[10][48];
    snprintf(a[0], sizeof a[0], "hops=%llu", (unsigned long long)p->hops);
    snprintf(a[1], sizeof a[1], "slow_hops=%llu",
             (unsigned long long)p->slow_hops);
    snprintf(a[2], sizeof a[2], "samples=%d", p->lateness_samples);
    snprintf(a[3], sizeof a[3], "handles=%d", p->idle_handles);
    snprintf(a[4], sizeof a[4], "window_ms=%llu",
             (unsigned long long)(p->idle_window_ns / 1000000));
    snprintf(a[5], sizeof a[5], "trips=%d", p->trips);
    snprintf(a[6], sizeof a[6], "warmup=%d", p->warmup_trips);
    snprintf(a[7], sizeof a[7], "timers=%d", p->timers);
    snprintf(a[8], sizeof a[8], "pairs=%d", p->timer_pairs);
    snprintf(a[9], sizeof a[9], "seed=%llu",
             (unsigned long long)(p->seed & 0xFFFFFFFFu));
    char *args[] = {lab_node_path(),
                    "--expose-gc",
                    SCRIPT,
                    (char *)figure,
                    a[0],
                    a[1],
                    a[2],
                    a[3],
                    a[4],
                    a[5],
                    a[6],
                    a[7],
                    a[8],
                    a[9],
                    NULL};
    char buf[4096];
    int rc = lab_node_run(args, pin ? p->cpu : -1, p->cpu_b, p->slack_ns, buf,
                          sizeof buf);
    if (rc < 0) return rc;
    return parse_values(buf, out);
}

static int chain_task(const turns_params *p, turns_result *out) {
    return measure("chain_task", p, false, out);
}

static int chain_timer0(const turns_params *p, turns_result *out) {
    return measure("chain_timer0", p, false, out);
}

static int lateness(const turns_params *p, turns_result *out) {
    return measure("lateness", p, false, out);
}

static int idle(const turns_params *p, turns_result *out) {
    return measure("idle", p, false, out);
}

/* On one CPU both threads share it; on two, Node's main thread and its
 * worker may each run on either (Node cannot pin its own threads). */
static int roundtrip(const turns_params *p, turns_result *out) {
    return measure("roundtrip", p, true, out);
}

static int timers(const turns_params *p, turns_result *out) {
    /* A million Timeout objects take Node seconds to build: --quick
     * measures them in the first round only. */
    if (p->quick && p->round > 0) return TURNS_SKIPPED;
    return measure("timers", p, false, out);
}

static bool available(char *why, size_t size) {
    return lab_node_available(SCRIPT, why, size);
}

static const turns_entry entries[] = {
    {TURNS_CHAIN_TASK, "node: setImmediate", chain_task, "every hop", 0,
     TURNS_CLASS_EVERY_HOP},
    {TURNS_CHAIN_TIMER0, "node: setTimeout(0)", chain_timer0,
     "every hop (1 ms clamp)", 0, TURNS_CLASS_EVERY_HOP},
    {TURNS_LATENESS, "node: setTimeout(1)", lateness, NULL, TURNS_SLACK_BOTH,
     0},
    {TURNS_IDLE, "node (process CPU)", idle, NULL, 0, 0},
    {TURNS_ROUNDTRIP, "node: worker MessagePort", roundtrip, NULL, 0, 0},
    {TURNS_TIMERS, "node: setTimeout", timers, NULL, 0, 0},
};

const turns_peer turns_node = {
    "node",
    lab_node_version,
    available,
    entries,
    (int)(sizeof entries / sizeof entries[0]),
    "the `node` on PATH, one process per measurement",
};
