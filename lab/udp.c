/* The `udp` scenario: lull_udp against the bare batched floor and the
 * peers' datagram handling, in the same run, rounds rotated (lab/udp.h
 * has the workloads, lab/udp_app.c the checks and the harness).
 *
 * Four figures: echo and flood at 64 and 1,200 bytes. Rows: the floor
 * (recvmmsg/sendmmsg on epoll, lab/udp_floor.c), lull with its defaults
 * and with recv_batch 64 (the floor's batch), libuv's uv_udp_t as
 * uv_udp_init makes it and with UV_UDP_RECVMMSG, and libevent's event_new
 * with recvfrom/sendto, the peers when installed.
 *
 * What is counted, per datagram (a data datagram moved one way: an echo's
 * round trip is two; the flood's credits are overhead, not datagrams):
 *   CPU     both threads' CPU time (user + system, the per-thread clock)
 *           from the moment both were ready to the end of each one's part
 *   calls   system calls made by both threads, counted in lull-lab by
 *           interposing the C library's functions (lab/udp_count.c) the
 *           same way for every row: sendto/sendmsg/sendmmsg,
 *           recvfrom/recvmsg/recvmmsg (a call that found nothing
 *           included), epoll_wait/epoll_pwait/epoll_pwait2, and epoll_ctl,
 *           getsockname and getpeername (strace -c on a run finds no other
 *           call made per datagram);
 *           lull's own count (send_calls + recv_calls + the loop's polls)
 *           beside it in the long table
 * One thread: the scenario's; a measurement starts two and joins them. */
#include "udp.h"
#include "engine.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const lab_col cols[UV_COUNT] = {
    {"cpu_ns_per_dgram", "CPU ns/dg", 0},
    {"dgrams_per_s", "dg/s", LAB_COL_RATE},
    {"calls_per_dgram", "calls/dg", 0},
    {"send_calls_per_dgram", "sends/dg", 0},
    {"recv_calls_per_dgram", "recvs/dg", 0},
    {"polls_per_dgram", "polls/dg", 0},
    {"other_calls_per_dgram", "other/dg", 0},
    {"lull_own_calls_per_dgram", "lull's count", 0},
    {"rtt_p50_us", "p50 µs", 0},
    {"rtt_p99_us", "p99 µs", 0},
};

typedef struct impl {
    const char *peer;  /* JSON, and the verdict's name */
    const char *label; /* the table row */
    udp_run_fn run;    /* NULL: not built in */
    unsigned variant;
    unsigned flags; /* LAB_ROW_* */
} impl;

#ifdef LAB_HAVE_UV
#define UV_RUN udp_uv_run
#else
#define UV_RUN NULL
#endif
#ifdef LAB_HAVE_EVENT
#define EVENT_RUN udp_event_run
#else
#define EVENT_RUN NULL
#endif

static const impl impls[] = {
    {"floor", "floor: recvmmsg/sendmmsg", udp_floor_run, 0, LAB_ROW_FLOOR},
    {"lull", "lull_udp", udp_lull_run, 0, LAB_ROW_LULL | LAB_ROW_BASE},
    {"lull", "lull_udp, recv_batch 64", udp_lull_run, UDP_V_BATCH64,
     LAB_ROW_LULL},
    {"libuv", "libuv uv_udp", UV_RUN, 0, 0},
    {"libuv", "libuv uv_udp RECVMMSG", UV_RUN, UDP_V_MMSG, 0},
    {"libevent", "libevent: recvfrom/sendto", EVENT_RUN, 0, 0},
};
#define IMPLS (int)(sizeof impls / sizeof impls[0])
_Static_assert(IMPLS == UDP_IMPLS, "impls[] is in udp.h's UDP_I_* order");

typedef struct figure {
    const char *key, *title;
    int workload;
    size_t size;
} figure;

static const figure figures[] = {
    {"echo_64", "echo, 64 B", UDP_ECHO, 64},
    {"echo_1200", "echo, 1200 B", UDP_ECHO, 1200},
    {"flood_64", "flood, 64 B", UDP_FLOOD, 64},
    {"flood_1200", "flood, 1200 B", UDP_FLOOD, 1200},
};
#define FIGS (int)(sizeof figures / sizeof figures[0])
_Static_assert(FIGS == UDP_FIGS, "figures[]: udp.h's UDP_FIGS, echoes first");

/* The echo's window: 32 datagrams of 1,200 bytes take about 150 KB of the
 * receiver's buffer at the kernel's accounting (2.3-4.5 KB each), under
 * the 208 KB default. The flood's: 64 beyond the last credit, credits
 * every 16, the same bound at most twice over (lull-lab asks for 4 MiB
 * buffers, the system's cap allowing). */
#define ECHO_WINDOW  32
#define FLOOD_WINDOW 64

typedef struct uctx {
    const figure *fig;
    uint64_t count;
} uctx;

static int measure(lab_fig *f, lab_row *row, int round, double *v) {
    (void)round;
    const uctx *c = f->ctx;
    const impl *im = row->arg;
    udp_result r;
    char why[192] = "";
    int window = c->fig->workload == UDP_ECHO ? ECHO_WINDOW : FLOOD_WINDOW;
    int rc = udp_measure(im->run, im->variant, c->fig->workload, c->fig->size,
                         c->count, window, &r, why, sizeof why);
    if (rc == -EPROTO || rc == -ETIMEDOUT) {
        /* Lost (the watchdog), repeated or corrupt: a failed check. */
        printf("udp %s, %s: %s\n", c->fig->title, im->label, why);
        return -EPROTO;
    }
    if (rc < 0) {
        lab_detail("udp %s, %s: %s %s\n", c->fig->title, im->label,
                   strerror(-rc), why);
        return rc;
    }
    double n = r.dgrams;
    v[UV_CPU] = r.cpu_ns / n;
    v[UV_RATE] = n / r.seconds;
    v[UV_CALLS] = (double)(r.calls.sends + r.calls.recvs + r.calls.polls +
                           r.calls.other) /
                  n;
    v[UV_SENDS] = (double)r.calls.sends / n;
    v[UV_RECVS] = (double)r.calls.recvs / n;
    v[UV_POLLS] = (double)r.calls.polls / n;
    v[UV_OTHER] = (double)r.calls.other / n;
    if (strcmp(im->peer, "lull") == 0) v[UV_OWN] = r.own_calls / n;
    v[UV_P50] = r.p50_us;
    v[UV_P99] = r.p99_us;
    return 0;
}

static bool uv_available(char *why, size_t size) {
#ifdef LAB_HAVE_UV
    (void)why;
    (void)size;
    return true;
#else
    snprintf(why, size, "libuv not found at build time");
    return false;
#endif
}

/* The rows that can run; the others' reasons into skipped. */
static int usable_impls(bool ok[IMPLS], char skipped[IMPLS][160]) {
    int n = 0;
    for (int i = 0; i < IMPLS; i++) {
        const impl *im = &impls[i];
        ok[i] = im->run != NULL;
        skipped[i][0] = '\0';
        if (!ok[i]) {
            snprintf(skipped[i], sizeof skipped[i],
                     "%s not found at build time", im->peer);
            continue;
        }
#ifdef LAB_HAVE_UV
        if (im->variant & UDP_V_MMSG && !udp_uv_has_mmsg()) {
            ok[i] = false;
            snprintf(skipped[i], sizeof skipped[i],
                     "libuv %s has no UV_UDP_RECVMMSG (1.37+)",
                     udp_uv_version());
            continue;
        }
#endif
        n++;
    }
    return n;
}

static void probe_peers(lab_json *json) {
    char skipped[160];
    lab_detail("implementations: lull");
    if (json) {
        lab_json_key(json, "peers");
        lab_json_begin_array(json);
    }
#ifdef LAB_HAVE_UV
    lab_peer_probe(json, "libuv", true, uv_available, udp_uv_version, NULL,
                   skipped, sizeof skipped);
#else
    lab_peer_probe(json, "libuv", false, uv_available, NULL, NULL, skipped,
                   sizeof skipped);
#endif
#ifdef LAB_HAVE_EVENT
    lab_peer_probe(json, "libevent", true, NULL, udp_event_version, NULL,
                   skipped, sizeof skipped);
#else
    lab_peer_probe(json, "libevent", false, NULL, NULL, NULL, skipped,
                   sizeof skipped);
#endif
    lab_detail("\n");
    if (json) lab_json_end_array(json);
}

/* ------------------------------------------------------------- tables */

static const lab_row *row_of(const lab_fig *f, int impl_index) {
    for (int i = 0; i < f->nrows; i++)
        if (f->rows[i].tag == impl_index) return &f->rows[i];
    return NULL;
}

static void brief(lab_fig *const figs[FIGS], const bool ok[IMPLS],
                  char skipped[IMPLS][160]) {
    const char *header[] = {
        "CPU ns per datagram", "echo 64",  "echo 1200", "flood 64",
        "flood 1200",          "calls/dg", "p50/p99 µs"};
    lab_table t;
    lab_table_init(&t, 7, header);
    for (int i = 0; i < IMPLS; i++) {
        int r = lab_table_row(&t);
        lab_table_set(&t, r, 0, "%s", impls[i].label);
        if (!ok[i]) { /* the reason goes under the table */
            for (int c = 1; c < 7; c++)
                lab_table_set(&t, r, c, "%s", c == 1 ? "not run" : "–");
            continue;
        }
        char a[LAB_CELL], b[LAB_CELL];
        for (int k = 0; k < FIGS; k++) {
            const lab_row *row = row_of(figs[k], i);
            if (row && row->v[UV_CPU].n == 0 && row->failures)
                lab_table_set(&t, r, 1 + k, "failed");
            else
                lab_table_set(&t, r, 1 + k, "%s",
                              lab_fmt3(a, lab_row_median(row, UV_CPU)));
        }
        lab_table_set(
            &t, r, 5, "%s · %s",
            lab_fmt3(a, lab_row_median(row_of(figs[0], i), UV_CALLS)),
            lab_fmt3(b, lab_row_median(row_of(figs[3], i), UV_CALLS)));
        lab_table_set(&t, r, 6, "%s / %s",
                      lab_fmt3(a, lab_row_median(row_of(figs[0], i), UV_P50)),
                      lab_fmt3(b, lab_row_median(row_of(figs[0], i), UV_P99)));
    }
    lab_table_brief(&t, "calls/dg: echo 64 B · flood 1200 B; p50/p99: the "
                        "echo 64 B round trip");
    for (int i = 0; i < IMPLS; i++)
        if (!ok[i])
            printf("  %s: not run: %.60s\n", impls[i].label, skipped[i]);
}

/* ------------------------------------------------------------- driver */

static int run_udp(const lab_options *opts, lab_json *json) {
    int rounds = lab_rounds(opts, 5, 3);
    bool ok[IMPLS];
    char skipped[IMPLS][160];
    usable_impls(ok, skipped);
    probe_peers(json);
    static uctx ctx[FIGS];
    lab_fig *figs[FIGS] = {NULL};
    int rc = 0;
    for (int k = 0; k < FIGS; k++) {
        const figure *fg = &figures[k];
        ctx[k].fig = fg;
        /* Echo: round trips; flood: datagrams. About 0.1 s a row at
         * full size on a quiet machine for the fastest rows. */
        ctx[k].count = fg->workload == UDP_ECHO ? (opts->quick ? 4000 : 40000)
                                                : (opts->quick ? 8000 : 80000);
        lab_fig_spec spec = {fg->key, fg->title, NULL, cols, UV_COUNT, UV_CPU,
                             0,       measure,   NULL, NULL, &ctx[k]};
        if (!(figs[k] = lab_fig_new(&spec))) {
            rc = -ENOMEM;
            goto out;
        }
        if (opts->only && strcmp(opts->only, fg->key) != 0) continue;
        for (int i = 0; i < IMPLS; i++) {
            if (!ok[i]) continue;
            lab_row *r = lab_fig_add(figs[k], impls[i].peer, impls[i].flags,
                                     "%s", impls[i].label);
            if (!r) continue;
            r->arg = &impls[i];
            r->tag = i;
        }
    }
    lab_detail("two threads pinned to CPU %d, one UDP socket each on "
               "127.0.0.1; echo: %d datagrams in flight, %llu round trips; "
               "flood: %llu datagrams, at most %d beyond the last credit "
               "(one every %d); every datagram's seq and checksum checked; "
               "%d rounds, the row that goes first rotating\n",
               lab_first_cpu(), ECHO_WINDOW, (unsigned long long)ctx[0].count,
               (unsigned long long)ctx[2].count, FLOOD_WINDOW, UDP_CREDIT_EVERY,
               rounds);
    /* Rounds outermost: every figure's round r before any round r + 1,
     * so a slow minute of the machine touches all four alike. */
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < FIGS; k++)
            lab_fig_round(figs[k], opts, r);
    for (int k = 0; k < FIGS; k++) {
        lab_detail("\n%s\n", figures[k].title);
        lab_fig_print(figs[k]);
        lab_fig_notes(figs[k]);
    }
    lab_detail("  per datagram: one way (an echo's round trip is two); "
               "calls: send, recv, epoll_wait, epoll_ctl, getsockname and "
               "getpeername calls of both threads, counted by interposition; "
               "lull's count: its "
               "send_calls + recv_calls + polls; × : the row's CPU/dg ÷ "
               "lull_udp's\n");
    if (json) {
        lab_json_key(json, "params");
        lab_json_begin_object(json);
        lab_json_field(json, "rounds", rounds);
        lab_json_field(json, "echo_window", ECHO_WINDOW);
        lab_json_field(json, "flood_window", FLOOD_WINDOW);
        lab_json_field(json, "credit_every", UDP_CREDIT_EVERY);
        lab_json_field(json, "echo_round_trips", (double)ctx[0].count);
        lab_json_field(json, "flood_datagrams", (double)ctx[2].count);
        lab_json_end_object(json);
        for (int k = 0; k < FIGS; k++)
            lab_fig_json(figs[k], json);
    }
    /* The demo (--quick) shows the verdict's line and leaves the table to
     * full runs and --verbose: `make demo` stays one screen. */
    if (!opts->quick) brief(figs, ok, skipped);
    udp_verdict(figs, ok, opts->quick);
    for (int k = 0; k < FIGS; k++) {
        char title[96];
        snprintf(title, sizeof title, "udp %s: CPU per datagram",
                 figures[k].title);
        lab_fig_plot(figs[k], opts->plot, UV_CPU, title, "ns");
    }
    /* A row that could not run (not a failed check: those are counted
     * already) fails the scenario. */
    for (int k = 0; k < FIGS && rc == 0; k++) {
        int e = lab_fig_error(figs[k]);
        if (e < 0 && e != -EPROTO) rc = e;
    }
out:
    for (int k = 0; k < FIGS; k++)
        if (figs[k]) lab_fig_free(figs[k]);
    return rc;
}

/* --only: figures[]' keys. */
static const char *const udp_only[] = {"echo_64", "echo_1200", "flood_64",
                                       "flood_1200", NULL};

const lab_scenario lab_udp = {
    "udp",
    "datagrams: echo and flood at 64 and 1200 B, lull_udp beside a bare "
    "recvmmsg/sendmmsg floor, libuv and libevent",
    run_udp,
    "udp: echo and flood, CPU and system calls per datagram beside the floor",
    "udp",
    NULL,
    true,
    udp_only,
};
