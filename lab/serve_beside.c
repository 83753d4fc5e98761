/* `serve`'s rows beside redis-server that redis-benchmark does not drive
 * (lab/serve_more.h): the 64 MiB value, idle with a million keys that
 * expire, pub/sub with a subscriber that never reads, each a figure of
 * its own file; here their one short table, the "not run" lines when
 * serve cannot run, and the helpers they share (CPU time and status from
 * /proc, a pinned client thread, INFO). One thread. */
#include "serve_more.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool serve_wants(const lab_options *opts, const char *name) {
    return !opts->only || strcmp(opts->only, name) == 0;
}

/* ---------------------------------------------------------------- /proc */

bool serve_cpu_ns(pid_t pid, uint64_t *ns) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    uint64_t sum = 0;
    bool any = false;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char file[128];
        snprintf(file, sizeof file, "%.63s/%.32s/schedstat", path, e->d_name);
        FILE *f = fopen(file, "re");
        unsigned long long on_cpu;
        if (f && fscanf(f, "%llu", &on_cpu) == 1) {
            sum += on_cpu;
            any = true;
        }
        if (f) fclose(f);
    }
    if (d) closedir(d);
    if (!any) { /* a kernel without schedstat: stat's ticks */
        double s;
        long sleeps;
        if (!serve_proc_cpu(pid, &s, &sleeps)) return false;
        sum = (uint64_t)(s * 1e9);
    }
    *ns = sum;
    return true;
}

long long serve_status_field(pid_t pid, const char *name) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    size_t n = strlen(name);
    long long v = -1;
    while (v < 0 && fgets(line, sizeof line, f))
        if (strncmp(line, name, n) == 0 && line[n] == ':')
            v = strtoll(line + n + 1, NULL, 10);
    fclose(f);
    return v;
}

/* --------------------------------------------------------------- threads */

int serve_run_pinned(int cpu, void *(*fn)(void *), void *arg) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        pthread_attr_setaffinity_np(&attr, sizeof set, &set);
    }
    pthread_t t;
    int err = pthread_create(&t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (err) return -err;
    void *rc;
    pthread_join(t, &rc);
    return (int)(intptr_t)rc;
}

/* ------------------------------------------------------------------ INFO */

int serve_info(int fd, const char *section, char *buf, size_t size) {
    char req[96];
    int n = snprintf(req, sizeof req, "*2\r\n$4\r\nINFO\r\n$%zu\r\n%s\r\n",
                     strlen(section), section);
    if (serve_send_all(fd, req, (size_t)n) < 0) return -1;
    char head[32];
    size_t h = 0;
    while (h < sizeof head - 1) { /* "$<len>\r\n" */
        if (serve_recv_exact(fd, head + h, 1) < 0) return -1;
        if (head[h++] == '\n') break;
    }
    head[h] = '\0';
    if (head[0] != '$') return -1;
    long len = strtol(head + 1, NULL, 10);
    if (len < 0 || (size_t)len + 2 > size) return -1;
    if (serve_recv_exact(fd, buf, (size_t)len + 2) < 0) return -1;
    buf[len] = '\0';
    return 0;
}

/* ---------------------------------------------------------- short table */

void serve_brief_row(lab_table *t, const char *label, double kv, double redis,
                     double ratio) {
    char a[LAB_CELL], b[LAB_CELL], c[LAB_CELL];
    int row = lab_table_row(t);
    if (row < 0) return;
    lab_table_set(t, row, 0, "%s", label);
    lab_table_set(t, row, 1, "%s", isfinite(kv) ? lab_fmt(a, kv) : "–");
    lab_table_set(t, row, 2, "%s", isfinite(redis) ? lab_fmt(b, redis) : "–");
    lab_table_set(t, row, 3, "%s", lab_fmt_ratio(c, ratio));
}

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
        snprintf(idle_what, sizeof idle_what, "idle %.3g/s", side->idle_kv);
    snprintf(v->what, sizeof v->what, "%s%s%s", big_what, both ? "; " : "",
             idle_what);
    snprintf(v->target, sizeof v->target, "%s%s%s", side->big_ran ? "≤ 2×" : "",
             both ? "; " : "", side->idle_ran ? "0/s" : "");
    if (side->idle_ran) snprintf(c, sizeof c, "%.3g/s", side->idle_redis);
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
