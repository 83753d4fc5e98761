/* Node's rows of the `loopback` scenario: each measurement runs
 * lab/node/loopback.js (found through LAB_SOURCE_DIR, set by
 * lab/CMakeLists.txt) with `node` from PATH, one process per measurement,
 * and reads the one JSON line it prints. Node is skipped with a line when it
 * is not on PATH. The fast modes first run as many unmeasured runs as they
 * measure, so V8 has compiled the workload (the C rows need one). Its
 * polls are libuv's iterations (performance.nodeTiming.uvMetricsInfo
 * .loopCount, one poll each), where this Node has them. */
#include "lab.h"
#include "loopback.h"

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
    return (char *)lab_installed_path("share/lull/lab/node/loopback.js",
                                      LAB_SOURCE_DIR "/node/loopback.js", buf,
                                      sizeof buf);
}
#define SCRIPT script_path()

/* The number after "key": in a flat JSON object, or NaN. */
static double field(const char *json, const char *key) {
    char pat[48];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    if (!p) return NAN;
    char *end;
    double v = strtod(p + strlen(pat), &end);
    return end == p + strlen(pat) ? NAN : v;
}

static int measure(const char *mode, const lb_params *p, lb_result *out) {
    char a[6][48];
    snprintf(a[0], sizeof a[0], "mode=%s", mode);
    snprintf(a[1], sizeof a[1], "reps=%d", p->reps);
    snprintf(a[2], sizeof a[2], "warmup=%d", p->reps > 1 ? p->reps : 0);
    snprintf(a[3], sizeof a[3], "commits=%d", p->commits);
    snprintf(a[4], sizeof a[4], "effects=%d", p->effects);
    snprintf(a[5], sizeof a[5], "rounds=%d", p->graph_rounds);
    char *args[] = {
        lab_node_path(), SCRIPT, a[0], a[1], a[2], a[3], a[4], a[5], NULL};
    char buf[1024];
    int rc = lab_node_run(args, -1, -1, 0, buf, sizeof buf);
    if (rc < 0) return rc;
    static const char *const names[LB_WORKLOADS] = {"commits", "graph"};
    for (int w = 0; w < LB_WORKLOADS; w++) {
        char key[32];
        snprintf(key, sizeof key, "%s_ms", names[w]);
        out->ms[w] = field(buf, key);
        snprintf(key, sizeof key, "%s_frames", names[w]);
        out->frames[w] = field(buf, key);
        snprintf(key, sizeof key, "%s_turns", names[w]);
        out->turns[w] = field(buf, key);
        snprintf(key, sizeof key, "%s_timers", names[w]);
        out->timers[w] = field(buf, key);
        snprintf(key, sizeof key, "%s_polls", names[w]);
        out->polls[w] = field(buf, key); /* NaN where Node cannot say */
        /* No figures is Node's failure (-ENODATA); frames other than
         * those sent, a failed check of the delivery (-EPROTO). */
        if (!isfinite(out->ms[w])) return -ENODATA;
        if (out->frames[w] != (double)lb_work_expected_frames(w, p))
            return -EPROTO;
    }
    return 0;
}

static int set_timeout(const lb_params *p, lb_result *out) {
    return measure("setTimeout", p, out);
}

static int set_immediate(const lb_params *p, lb_result *out) {
    return measure("setImmediate", p, out);
}

static int message_channel(const lb_params *p, lb_result *out) {
    return measure("MessageChannel", p, out);
}

static bool available(char *why, size_t size) {
    return lab_node_available(SCRIPT, why, size);
}

static const lb_entry entries[] = {
    {"setTimeout", "node: setTimeout(0)", set_timeout, true,
     "every turn (1 ms clamp)", LB_CLASS_EVERY_TURN},
    {"setImmediate", "node: setImmediate", set_immediate, false, "every turn",
     LB_CLASS_EVERY_TURN},
    {"MessageChannel", "node: MessageChannel", message_channel, false,
     "every turn", LB_CLASS_EVERY_TURN},
};

const lb_peer lb_node = {
    "node",
    lab_node_version,
    available,
    entries,
    (int)(sizeof entries / sizeof entries[0]),
};
