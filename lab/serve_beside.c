/* `serve`'s rows beside redis-server that redis-benchmark does not drive
 * (lab/serve_more.h): the 64 MiB value, idle with a million keys that
 * expire, pub/sub with a subscriber that never reads, each a figure of
 * its own file; here their one short table and the "not run" lines when
 * serve cannot run. It calls those files (and the scenario's helpers,
 * lab/serve_proc.c); none of them calls it. One thread. */
#include "serve_more.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The 64 MiB value within 2× of redis-server's time and no wakeup when
 * idle, on one line. */
static void side_verdict(const serve_side *side) {
    lab_verdict *v = lab_verdict_add("serve", SERVE_V_BESIDE);
    if (!v) return;
    if (!side->big_ran && !side->idle_ran) {
        snprintf(v->what, sizeof v->what, "64 MiB, idle");
        snprintf(v->note, sizeof v->note, "%s", side->why);
        return;
    }
    char a[LAB_CELL], b[LAB_CELL], c[LAB_CELL];
    bool both = side->big_ran && side->idle_ran;
    bool big_ok = !side->big_ran || side->big_x >= 0.5;
    bool idle_ok = !side->idle_ran || side->idle_kv == 0;
    char big_what[64] = "", idle_what[64] = "";
    if (side->big_ran)
        snprintf(big_what, sizeof big_what, "64 MiB %s ms",
                 lab_fmt3(a, side->big_kv_ms));
    if (side->idle_ran)
        snprintf(idle_what, sizeof idle_what, "idle %s/s",
                 lab_fmt3(c, side->idle_kv));
    snprintf(v->what, sizeof v->what, "%s%s%s", big_what, both ? "; " : "",
             idle_what);
    snprintf(v->target, sizeof v->target, "%s%s%s", side->big_ran ? "≤ 2×" : "",
             both ? "; " : "", side->idle_ran ? "0/s" : "");
    if (side->idle_ran) {
        char d[LAB_CELL];
        snprintf(c, sizeof c, "%s/s", lab_fmt3(d, side->idle_redis));
    }
    snprintf(v->peer, sizeof v->peer, "redis %s%s%s",
             side->big_ran ? lab_fmt_ratio(b, side->big_x) : "",
             both ? "; " : "", side->idle_ran ? c : "");
    v->timing = true;
    (void)big_ok;
    (void)idle_ok;
    /* A wakeup is a count: its miss has no size, so never noise. */
    if (side->big_ran) lab_verdict_bound(v, side->big_x, 0.5, false);
    if (side->idle_ran) lab_verdict_bound(v, side->idle_kv, 0, true);
}

int serve_beside(const lab_options *opts, lab_json *json) {
    static lab_table t;
    static serve_side side;
    memset(&side, 0, sizeof side);
    const char *header[] = {"beside redis-server", "lull-kv", "redis-server",
                            "×"};
    lab_table_init(&t, 4, header);
    int rc = 0;
    bool big = serve_wants(opts, "bigvalue"), idle = serve_wants(opts, "idle");
    if (big) rc = serve_bigvalue(opts, json, &t, &side);
    if (rc == 0 && idle) rc = serve_idle(opts, json, &t, &side);
    if (rc == 0 && serve_wants(opts, "pubsub"))
        rc = serve_pubsub(opts, json, &t);
    /* --verbose only: the short output's verdict has the 64 MiB value and
     * the idle wakeups (and the demo fits 80 lines). */
    if (t.rows > 1 && lab_verbose) lab_table_brief(&t, NULL);
    if (rc == 0 && (big || idle)) side_verdict(&side);
    return rc;
}

void serve_more_not_run(void) {
    char why[160], reason[128] = "";
    if (!serve_kv_available(reason, sizeof reason))
        snprintf(why, sizeof why, "lull-kv: %s", reason);
    else if (!serve_redis_available(reason, sizeof reason))
        snprintf(why, sizeof why, "redis-server: %s", reason);
    else if (!serve_bench_available(reason, sizeof reason))
        snprintf(why, sizeof why, "redis-benchmark: %s", reason);
    else
        snprintf(why, sizeof why, "serve did not run");
    static const int parts[] = {SERVE_V_SUITE, SERVE_V_BESIDE};
    static const char *const what[] = {"default suite", "64 MiB, idle"};
    for (int i = 0; i < 2; i++) {
        lab_verdict *v = lab_verdict_add("serve", parts[i]);
        if (!v) return;
        snprintf(v->what, sizeof v->what, "%s", what[i]);
        snprintf(v->note, sizeof v->note, "%s", why);
    }
}
