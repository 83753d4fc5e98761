/* `serve`'s 64 MiB row (lab/serve_more.h): one SET of a 64 MiB value,
 * then a GET of it, lull-kv beside redis-server, as
 * bench/kv_bigvalue.sh does for one size: the time from the SET's first
 * byte to its +OK, from the GET's first byte to the last byte of its
 * reply, and the server's CPU time for the pair (every thread,
 * serve_cpu_ns). The client is lull-lab's, on a thread pinned to the
 * client CPU; its request and reply buffers are built and faulted in
 * before the clock starts, and the reply is compared with the value
 * after it stops. Both servers start once for the figure and take turns
 * (the first rotating round by round); a DEL after each pair leaves the
 * next round the keyspace it found. One thread, and the client's. */
#include "serve_more.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BIG_MIB 64
#define BIG     ((size_t)BIG_MIB << 20)

enum { BV_SET_MS, BV_GET_MS, BV_TOTAL_MS, BV_CPU_MS, BV_MS_PER_MIB, BV_COUNT };

static const lab_col cols[BV_COUNT] = {
    {"set_ms", "SET ms", 0},
    {"get_ms", "GET ms", 0},
    {"set_get_ms", "SET + GET ms", 0},
    {"server_cpu_ms", "server CPU ms", 0},
    {"ms_per_mib", "SET + GET ms per MiB", 0},
};

/* The buffers every round shares. */
typedef struct big {
    char *set_req; /* "*3 ... SET big <value>" */
    size_t set_len;
    char *want; /* the GET's reply: "$<len>\r\n<value>\r\n" */
    size_t want_len;
    char *got; /* where the reply is read */
    server srv[SERVERS];
} big;

typedef struct big_job {
    const big *b;
    const server *srv;
    double *v;
    char why[120];
} big_job;

static void *client(void *arg) {
    big_job *j = arg;
    const big *b = j->b;
    int fd = serve_client_connect(j->srv->port);
    if (fd < 0) {
        snprintf(j->why, sizeof j->why, "cannot connect");
        return (void *)(intptr_t)-EIO;
    }
    static const char get[] = "*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n";
    static const char del[] = "*2\r\n$3\r\nDEL\r\n$3\r\nbig\r\n";
    char ok[5], one[4];
    uint64_t cpu0, cpu1;
    bool cpu = serve_cpu_ns(j->srv->pid, &cpu0);
    uint64_t t0 = lab_now_ns();
    int rc = serve_send_all(fd, b->set_req, b->set_len) == 0 &&
                     serve_recv_exact(fd, ok, sizeof ok) == 0
                 ? 0
                 : -EIO;
    uint64_t t1 = lab_now_ns();
    if (rc == 0 && (serve_send_all(fd, get, sizeof get - 1) != 0 ||
                    serve_recv_exact(fd, b->got, b->want_len) != 0))
        rc = -EIO;
    uint64_t t2 = lab_now_ns();
    cpu = cpu && serve_cpu_ns(j->srv->pid, &cpu1);
    if (rc < 0) {
        snprintf(j->why, sizeof j->why, "the connection failed");
    } else if (memcmp(ok, "+OK\r\n", 5) != 0 ||
               memcmp(b->got, b->want, b->want_len) != 0) {
        snprintf(j->why, sizeof j->why, "a wrong reply");
        rc = -EPROTO;
    } else if (serve_send_all(fd, del, sizeof del - 1) != 0 ||
               serve_recv_exact(fd, one, sizeof one) != 0 ||
               memcmp(one, ":1\r\n", 4) != 0) {
        snprintf(j->why, sizeof j->why, "DEL failed");
        rc = -EIO;
    }
    close(fd);
    if (rc < 0) return (void *)(intptr_t)rc;
    j->v[BV_SET_MS] = (double)(t1 - t0) / 1e6;
    j->v[BV_GET_MS] = (double)(t2 - t1) / 1e6;
    j->v[BV_TOTAL_MS] = (double)(t2 - t0) / 1e6;
    j->v[BV_MS_PER_MIB] = j->v[BV_TOTAL_MS] / BIG_MIB;
    if (cpu) j->v[BV_CPU_MS] = (double)(cpu1 - cpu0) / 1e6;
    return (void *)(intptr_t)0;
}

static int measure(lab_fig *f, lab_row *row, int round, double *v) {
    (void)round;
    const big *b = f->ctx;
    big_job j = {.b = b, .srv = &b->srv[row->tag], .v = v};
    int rc = serve_run_pinned(serve_cpu_client, client, &j);
    if (rc < 0)
        printf("64 MiB SET + GET, %s: %s\n", server_name[row->tag],
               j.why[0] ? j.why : strerror(-rc));
    return rc;
}

/* The requests and the expected reply: a value of bytes from a seeded
 * generator, so a reply from the wrong place cannot match. */
static int build(big *b) {
    char head[64];
    int h = snprintf(head, sizeof head,
                     "*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$%zu\r\n", BIG);
    int w = snprintf(NULL, 0, "$%zu\r\n", BIG);
    b->set_len = (size_t)h + BIG + 2;
    b->want_len = (size_t)w + BIG + 2;
    b->set_req = malloc(b->set_len);
    b->want = malloc(b->want_len);
    b->got = malloc(b->want_len);
    if (!b->set_req || !b->want || !b->got) return -ENOMEM;
    memcpy(b->set_req, head, (size_t)h);
    uint64_t seed = 0x6c756c6c2d6b76ull; /* any: the same every run */
    char *value = b->set_req + h;
    for (size_t i = 0; i < BIG; i += 8) {
        uint64_t r = lab_rand(&seed);
        memcpy(value + i, &r, 8);
    }
    memcpy(value + BIG, "\r\n", 2);
    snprintf(b->want, (size_t)w + 1, "$%zu\r\n", BIG);
    memcpy(b->want + w, value, BIG + 2);
    memset(b->got, 0, b->want_len); /* its pages in before the clock */
    return 0;
}

int serve_bigvalue(const lab_options *opts, lab_json *json, lab_table *brief,
                   serve_side *side) {
    static big b;
    memset(&b, 0, sizeof b);
    int rounds = lab_rounds(opts, 5, 1);
    lab_detail("\n64 MiB: a SET of a %d MiB value then a GET of it, on one "
               "connection of lull-lab's (pinned to the client CPU), "
               "lull-kv and redis-server in turn, the first rotating; "
               "time from the request's first byte to the reply's last; "
               "the server's CPU for the pair; one unmeasured pair against "
               "each first; %d round%s\n",
               BIG_MIB, rounds, rounds == 1 ? "" : "s");
    for (int s = 0; s < SERVERS; s++)
        b.srv[s].out_fd = -1;
    char why[160] = "";
    int rc = build(&b);
    if (rc == 0 && !serve_start_kv(&b.srv[S_KV], NULL, serve_cpu_server))
        snprintf(why, sizeof why, "lull-kv: %.140s", b.srv[S_KV].why);
    else if (rc == 0 &&
             !serve_start_redis(&b.srv[S_REDIS], 0, serve_cpu_server, -1))
        snprintf(why, sizeof why, "redis-server: %.140s", b.srv[S_REDIS].why);
    if (why[0]) {
        printf("64 MiB SET + GET: not run (%s)\n", why);
        rc = 1;
    }
    lab_fig *f = NULL;
    if (rc == 0) {
        lab_fig_spec spec = {"bigvalue", "serve: 64 MiB SET then GET",
                             NULL,       cols,
                             BV_COUNT,   BV_TOTAL_MS,
                             0,          measure,
                             NULL,       NULL,
                             &b};
        f = lab_fig_new(&spec);
        if (!f) rc = -ENOMEM;
    }
    if (rc == 0) {
        for (int s = 0; s < SERVERS; s++)
            lab_fig_add(f, s == S_KV ? "lull" : "redis-server",
                        s == S_KV ? LAB_ROW_LULL | LAB_ROW_BASE : 0, "%s",
                        server_name[s])
                ->tag = s;
        /* One pair each first, unmeasured: each server's first 64 MiB
         * pays for memory it then keeps (redis-server's allocator keeps
         * it; lull-kv's input buffer and log map theirs afresh each
         * time), whichever server would run first. */
        for (int s = 0; s < SERVERS && rc == 0; s++) {
            double scratch[LAB_VALUES];
            rc = measure(f, &f->rows[s], 0, scratch);
        }
        if (rc == 0) lab_fig_run(f, opts, rounds);
        if (rc == 0) rc = lab_fig_error(f);
    }
    for (int s = 0; s < SERVERS; s++)
        serve_server_stop(&b.srv[s]);
    free(b.set_req);
    free(b.want);
    free(b.got);
    if (rc != 0) {
        snprintf(side->why, sizeof side->why, "64 MiB: %.140s",
                 why[0] ? why : strerror(-rc));
        lab_fig_free(f);
        return rc < 0 ? rc : 0;
    }
    lab_fig_print(f);
    lab_fig_notes(f);
    const lab_row *kv = &f->rows[S_KV], *redis = &f->rows[S_REDIS];
    side->big_ran = true;
    side->big_x = lab_ratio(f, kv, redis, BV_TOTAL_MS);
    side->big_kv_ms = lab_row_median(kv, BV_TOTAL_MS);
    side->big_redis_ms = lab_row_median(redis, BV_TOTAL_MS);
    serve_brief_row(brief, "64 MiB SET + GET, ms", side->big_kv_ms,
                    side->big_redis_ms, side->big_x);
    lab_fig_json(f, json);
    lab_fig_free(f);
    return 0;
}
