/* sim_counter: a protocol proved on lull's simulated network
 * (docs/SIMULATION.md), seed after seed.
 *
 * The protocol: a server keeps a total; clients send numbered increments
 * ("<client> <id> <amount>", one frame each) and the server acknowledges
 * each ("ack <id>"). A connection can fail at any byte, so a client that
 * loses one reconnects and sends again every increment not acknowledged:
 * at least once. The server makes that exactly once by remembering the
 * last id it applied for each client. The invariant: once every client is
 * done, the total is the sum of every increment, each counted once.
 *
 * Each seed runs a server and three clients in one process, on one
 * virtual-clock loop, over connections with faults drawn from the seed:
 * delays, jitter, a small window, slow readers, partitions that resume or
 * break, resets, refused connects. The protocol code only sees
 * lull_endpoint; the same code would run over lull streams.
 *
 *   sim_counter [--seeds N] [--seed S] [--trace] [--no-dedup]
 *     --no-dedup  the server forgets to deduplicate: the simulator must
 *                 find the increment a resend counts twice (exit 0 when
 *                 it does)
 *     --seed S --trace  one seed, its trace on stdout
 *
 * Build:
 *   cc -O2 -o sim_counter sim_counter.c $(pkg-config --cflags --libs lull)
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <lull.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS         1000000ull
#define CLIENTS    3
#define INCREMENTS 40 /* per client */

static bool dedup = true;

/* ------------------------------------------------------------ server */

typedef struct server {
    lull_simserver ls;
    long long total;
    int last[CLIENTS]; /* the last id applied, per client */
} server;

typedef struct session { /* one accepted connection */
    lull_simconn c;
    server *srv;
} session;

static void server_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    session *s = ep->data;
    char text[64];
    int client, id, amount;
    snprintf(text, sizeof text, "%.*s", (int)len, (const char *)bytes);
    if (sscanf(text, "%d %d %d", &client, &id, &amount) != 3 || client < 0 ||
        client >= CLIENTS) {
        lull_endpoint_close(ep, -EPROTO); /* not our protocol */
        return;
    }
    if (!dedup || id > s->srv->last[client]) {
        s->srv->total += amount;
        s->srv->last[client] = id;
    }
    int n = snprintf(text, sizeof text, "ack %d", id);
    lull_endpoint_send_copy(ep, text, (size_t)n); /* fails once closing */
}

static void server_close(lull_endpoint *ep, int reason) {
    (void)reason;
    free(ep->data); /* the session's one free path */
}

static void server_accept(lull_simserver *ls) {
    session *s = calloc(1, sizeof *s);
    if (!s) return; /* not accepted: the connect is refused */
    s->srv = LULL_CONTAINER_OF(ls, server, ls);
    s->c.ep.data = s;
    if (lull_simserver_accept(ls, &s->c, NULL) < 0) {
        free(s);
        return;
    }
    lull_endpoint_set_callbacks(&s->c.ep, server_frame, NULL, server_close);
}

/* ------------------------------------------------------------ clients */

typedef struct client {
    int id;
    lull_simnet *net;
    lull_simconn c;
    bool up;
    int acked; /* increments acknowledged: 1..acked */
    int amount[INCREMENTS + 1];
    lull_timer retry; /* reconnects after a failure */
    bool done;
} client;

static void client_connect(client *cl);

static void client_send_from(client *cl, int id) {
    for (; id <= INCREMENTS; id++) {
        char text[64];
        int n =
            snprintf(text, sizeof text, "%d %d %d", cl->id, id, cl->amount[id]);
        if (lull_endpoint_send_copy(&cl->c.ep, text, (size_t)n) < 0) return;
    }
}

static void client_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    client *cl = ep->data;
    int id;
    char text[32];
    snprintf(text, sizeof text, "%.*s", (int)len, (const char *)bytes);
    if (sscanf(text, "ack %d", &id) == 1 && id == cl->acked + 1) cl->acked = id;
    if (cl->acked == INCREMENTS) lull_endpoint_close(ep, 0);
}

static void client_connected(lull_simconn *c, int status) {
    client *cl = c->ep.data;
    if (status < 0) return; /* the close callback, right after, retries */
    cl->up = true;
    client_send_from(cl, cl->acked + 1); /* everything not acknowledged */
}

static void client_closed(lull_endpoint *ep, int reason) {
    (void)reason;
    client *cl = ep->data;
    cl->up = false;
    if (cl->acked == INCREMENTS) {
        cl->done = true;
        return;
    }
    lull_timer_start(&cl->retry, 10 * MS, 0);
}

static void client_retry(lull_timer *t) {
    client_connect(LULL_CONTAINER_OF(t, client, retry));
}

static void client_connect(client *cl) {
    lull_simconn_options o = {.name = "client"};
    cl->c.ep.data = cl;
    if (lull_simconn_connect(cl->net, &cl->c, "counter", &o, client_connected) <
        0)
        return;
    lull_endpoint_set_callbacks(&cl->c.ep, client_frame, NULL, client_closed);
}

/* ------------------------------------------------------------ one seed */

/* Runs one seed; its trace to `trace` (may be NULL). True when the
 * invariant held; else *why says what did not. */
static bool run(uint64_t seed, FILE *trace, long long *total, long long *want,
                const char **why) {
    lull_loop_options lo = {.clock = LULL_CLOCK_VIRTUAL,
                            .flags = LULL_LOOP_AUTO_ADVANCE};
    lull_loop *loop;
    lull_simnet *net;
    lull_simnet_options no = {.seed = seed, .trace = trace};
    no.faults = (lull_simfaults){.delay_ns = 2 * MS,
                                 .jitter_ns = 3 * MS,
                                 .window = 100,
                                 .slow_permille = 300,
                                 .slow_read_ns = MS,
                                 .partition_every_ns = 200 * MS,
                                 .partition_ns = 100 * MS,
                                 .break_permille = 500,
                                 .reset_permille = 500,
                                 .reset_within = 600,
                                 .refuse_permille = 100};
    if (lull_loop_new(&loop, &lo) < 0) exit(1);
    if (lull_simnet_new(&net, loop, &no) < 0) {
        lull_loop_free(loop);
        exit(1);
    }
    server srv = {0};
    lull_simserver_listen(net, &srv.ls, "counter", server_accept);
    client cl[CLIENTS];
    *want = 0;
    for (int i = 0; i < CLIENTS; i++) {
        cl[i] = (client){.id = i, .net = net};
        for (int j = 1; j <= INCREMENTS; j++) {
            cl[i].amount[j] = (int)((seed * 31 + (uint64_t)i * 7 + j) % 97);
            *want += cl[i].amount[j];
        }
        lull_timer_init(loop, &cl[i].retry, client_retry);
        client_connect(&cl[i]);
    }
    /* The clients retry until they are done, and close; the run ends
     * when nothing is left (no connection, no timer). */
    *why = NULL;
    if (lull_loop_run(loop, LULL_RUN_DEFAULT) < 0)
        *why = "lull_loop_run failed";
    for (int i = 0; i < CLIENTS && !*why; i++)
        if (!cl[i].done) *why = "a client did not finish";
    *total = srv.total;
    if (!*why && *total != *want)
        *why = *total > *want ? "a resend counted again" : "an increment lost";
    lull_simserver_close(&srv.ls);
    if (lull_simnet_free(net) != 0 || lull_loop_free(loop) != 0)
        if (!*why) *why = "something was left open";
    return !*why;
}

/* A seed or a count: digits only (strtoull read "abc" as 0 seeds, which
 * then "proved" the protocol, and "-1" as 2^64 - 1). */
static bool count_arg(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s < '0' || *s > '9' || *end || errno) return false;
    *out = v;
    return true;
}

int main(int argc, char **argv) {
    uint64_t seeds = 200, first = 1;
    bool one = false, trace = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seeds") == 0 && i + 1 < argc &&
            count_arg(argv[i + 1], &seeds) && seeds > 0)
            i++;
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc &&
                 count_arg(argv[i + 1], &first))
            i++, one = true, seeds = 1;
        else if (strcmp(argv[i], "--trace") == 0)
            trace = true;
        else if (strcmp(argv[i], "--no-dedup") == 0)
            dedup = false;
        else {
            /* --help is asked for: the usage on stdout, exit 0; a mistake:
             * stderr, 2. */
            bool help = strcmp(argv[i], "--help") == 0;
            fprintf(help ? stdout : stderr,
                    "usage: sim_counter [--seeds N] [--seed S] [--trace] "
                    "[--no-dedup]\n");
            return help ? 0 : 2;
        }
    }
    if (seeds > UINT64_MAX - first) {
        fprintf(stderr, "sim_counter: --seed and --seeds run past the last "
                        "seed\n");
        return 2;
    }
    for (uint64_t s = first; s < first + seeds; s++) {
        long long total, want;
        const char *why;
        if (run(s, one && trace ? stdout : NULL, &total, &want, &why)) continue;
        printf("seed %llu: total %lld, the increments sum to %lld (%s)\n"
               "replay: %s --seed %llu --trace%s\n",
               (unsigned long long)s, total, want, why, argv[0],
               (unsigned long long)s, dedup ? "" : " --no-dedup");
        if (!dedup && total > want) {
            printf("sim_counter: the missing deduplication found by seed "
                   "%llu\n",
                   (unsigned long long)s);
            return 0;
        }
        return 1;
    }
    if (!dedup) {
        printf("sim_counter: the missing deduplication NOT found in %llu "
               "seeds\n",
               (unsigned long long)seeds);
        return 1;
    }
    printf("sim_counter: %llu seeds, every increment counted once\n",
           (unsigned long long)seeds);
    return 0;
}
