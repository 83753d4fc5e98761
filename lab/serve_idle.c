/* `serve`'s idle row (lab/serve_more.h): lull-kv and redis-server each
 * hold the same keys, "key:%08d" set with EX 864000 (ten days away;
 * 1,000,000 of them, 100,000 with --quick), and are then left alone for a
 * window. Each server's wakeups are its voluntary context switches over
 * the window (/proc/PID/status: a process blocked in epoll_wait that
 * wakes and sleeps again counts one), per second; beside them its CPU
 * time (serve_cpu_ns) and its memory. lull-kv arms one timer, for its
 * earliest key, ten days on; redis-server wakes hz (10) times a second to
 * sample keys. The two servers' windows are the same seconds (a
 * side-by-side figure: idle servers compete for nothing). One thread,
 * and one per row while a window runs. */
#include "serve_more.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEYS       1000000
#define QUICK_KEYS 100000
#define WINDOW_MS  3000
#define QUICK_MS   1000

enum { IV_WAKEUPS, IV_CPU_MS, IV_RSS_MB, IV_COUNT };

static const lab_col cols[IV_COUNT] = {
    {"wakeups_per_s", "wakeups/s", 0},
    {"cpu_ms_per_s", "CPU ms/s", 0},
    {"rss_mb", "RSS MB", 0},
};

typedef struct idle_ctx {
    server srv[SERVERS];
    int window_ms;
} idle_ctx;

/* Sets keys "key:%08d" to "v" with EX 864000, pipelined in batches whose
 * replies (+OK) fit the socket buffers. 0 or -1. */
static int load_ttl_keys(int port, int keys) {
    enum { BATCH = 4096 };
    static const char fmt[] =
        "*5\r\n$3\r\nSET\r\n$12\r\nkey:%08d\r\n$1\r\nv\r\n"
        "$2\r\nEX\r\n$6\r\n864000\r\n";
    int fd = serve_client_connect(port);
    if (fd < 0) return -1;
    size_t cap = (size_t)BATCH * 80;
    char *out = malloc(cap);
    char *in = malloc((size_t)BATCH * 5);
    int rc = out && in ? 0 : -1;
    for (int k = 0; rc == 0 && k < keys; k += BATCH) {
        int n = keys - k < BATCH ? keys - k : BATCH;
        size_t used = 0;
        for (int i = 0; i < n; i++)
            used += (size_t)snprintf(out + used, cap - used, fmt, k + i);
        if (serve_send_all(fd, out, used) < 0 ||
            serve_recv_exact(fd, in, (size_t)n * 5) < 0)
            rc = -1;
        for (int i = 0; rc == 0 && i < n; i++)
            if (memcmp(in + (size_t)i * 5, "+OK\r\n", 5) != 0) rc = -1;
    }
    free(out);
    free(in);
    close(fd);
    return rc;
}

/* One window of one server (its own thread). */
static int measure(lab_fig *f, lab_row *row, int round, double *v) {
    (void)round;
    const idle_ctx *c = f->ctx;
    pid_t pid = c->srv[row->tag].pid;
    uint64_t cpu0, cpu1;
    long long sw0 = serve_status_field(pid, "voluntary_ctxt_switches");
    bool cpu = serve_cpu_ns(pid, &cpu0);
    uint64_t t0 = lab_now_ns();
    serve_sleep_ms(c->window_ms);
    uint64_t t1 = lab_now_ns();
    long long sw1 = serve_status_field(pid, "voluntary_ctxt_switches");
    cpu = cpu && serve_cpu_ns(pid, &cpu1);
    long long rss = serve_status_field(pid, "VmRSS");
    if (sw0 < 0 || sw1 < 0 || !cpu) return -ESRCH;
    double s = (double)(t1 - t0) / 1e9;
    v[IV_WAKEUPS] = (double)(sw1 - sw0) / s;
    v[IV_CPU_MS] = (double)(cpu1 - cpu0) / 1e6 / s;
    if (rss >= 0) v[IV_RSS_MB] = (double)rss / 1024;
    return 0;
}

int serve_idle(const lab_options *opts, lab_json *json, lab_table *brief,
               serve_side *side) {
    static idle_ctx c;
    memset(&c, 0, sizeof c);
    for (int s = 0; s < SERVERS; s++)
        c.srv[s].out_fd = -1;
    int keys = opts->quick ? QUICK_KEYS : KEYS;
    c.window_ms = opts->quick ? QUICK_MS : WINDOW_MS;
    int rounds = lab_rounds(opts, 3, 1);
    lab_detail("\nidle: lull-kv and redis-server each hold %d keys set with "
               "EX 864000 (ten days away), then nothing is sent to them for "
               "%d windows of %.1f s, the same seconds for both; wakeups = "
               "voluntary context switches (/proc/PID/status) per second\n",
               keys, rounds, c.window_ms / 1000.0);
    char why[200] = "";
    for (int s = 0; s < SERVERS && !why[0]; s++) {
        bool ok = s == S_KV
                      ? serve_start_kv(&c.srv[s], NULL, serve_cpu_server)
                      : serve_start_redis(&c.srv[s], 0, serve_cpu_server, -1);
        if (!ok)
            snprintf(why, sizeof why, "%s: %.160s", server_name[s],
                     c.srv[s].why);
        else if (load_ttl_keys(c.srv[s].port, keys) < 0)
            snprintf(why, sizeof why, "%s: loading %d keys failed",
                     server_name[s], keys);
    }
    lab_fig *f = NULL;
    int rc = 0;
    if (!why[0]) {
        serve_sleep_ms(200); /* whatever the loading left to finish */
        lab_fig_spec spec = {
            "idle",     "serve: idle, keys with a TTL", NULL,    cols, IV_COUNT,
            IV_WAKEUPS, LAB_FIG_SIDE_BY_SIDE,           measure, NULL, NULL,
            &c};
        f = lab_fig_new(&spec);
        if (!f) rc = -ENOMEM;
    }
    if (f) {
        for (int s = 0; s < SERVERS; s++)
            lab_fig_add(f, s == S_KV ? "lull" : "redis-server",
                        s == S_KV ? LAB_ROW_LULL | LAB_ROW_BASE : 0, "%s",
                        server_name[s])
                ->tag = s;
        lab_fig_run(f, opts, rounds);
        if (lab_fig_error(f))
            snprintf(why, sizeof why, "a server's /proc was not readable");
    }
    for (int s = 0; s < SERVERS; s++)
        serve_server_stop(&c.srv[s]);
    if (why[0] || rc < 0) {
        printf("idle row: not run (%s)\n", why[0] ? why : strerror(-rc));
        snprintf(side->why, sizeof side->why, "idle: %.140s",
                 why[0] ? why : strerror(-rc));
        lab_fig_free(f);
        return rc;
    }
    lab_fig_print(f);
    const lab_row *kv = &f->rows[S_KV], *redis = &f->rows[S_REDIS];
    /* The target is none at all: the worst window counts, not the
     * median. */
    side->idle_ran = true;
    side->idle_kv = lab_series_max(&kv->v[IV_WAKEUPS]);
    side->idle_redis = lab_row_median(redis, IV_WAKEUPS);
    char label[64];
    snprintf(label, sizeof label, "idle, 10^%d keys with a TTL: wakeups/s",
             keys == 1000000 ? 6 : 5);
    serve_brief_row(brief, label, lab_row_median(kv, IV_WAKEUPS),
                    side->idle_redis, NAN);
    lab_fig_json(f, json);
    lab_fig_free(f);
    return 0;
}
