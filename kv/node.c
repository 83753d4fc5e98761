/* node.c: one lull-kv server's life, whatever carries its connections:
 * set up, started, stopped and freed; its log lines; the expiry timer's
 * hook. main (server.c) runs one over sockets; the simulator (sim.c) runs
 * a primary and its replicas in one process over its network. */
#define _POSIX_C_SOURCE 200809L
#include "server.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void srv_log(server *srv, const char *fmt, ...) {
    char line[512];
    int n = snprintf(line, sizeof line, "lull-kv: ");
    if (srv->name)
        n += snprintf(line + n, sizeof line - (size_t)n, "%s: ", srv->name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (srv->log) {
        srv->log(srv, line);
        return;
    }
    fprintf(stderr, "%s\n", line);
}

void keys_expired(void *arg) {
    server *srv = arg;
    /* KV_PLANT_LOST_WAKEUP: the records are logged, and nobody is told. */
    if (srv->kv.plant & KV_PLANT_LOST_WAKEUP) return;
    wake_links(srv);
}

static int64_t plant_clock(void *arg) {
    server *srv = arg;
    return srv->kv.clock(&srv->kv);
}

void server_defaults(server *srv) {
    memset(srv, 0, sizeof *srv);
    kv_init(&srv->kv);
    /* Redis' defaults (redis.conf): proto-max-bulk-len 512mb,
     * client-query-buffer-limit 1gb, client-output-buffer-limit replica
     * 256mb 64mb 60, pubsub 32mb 8mb 60. Not its normal 0 0 0: a reply is
     * built whole before it is sent, so with no limit one MGET or EXEC of
     * a few KiB could make lull-kv take as much memory as it asked for,
     * and the kernel's OOM killer would end every client. 1gb, the query
     * buffer's limit, is twice the longest value, whose GET fits. */
    srv->lim.max_bulk = (size_t)512 << 20;
    srv->lim.max_args = ARGS_START;
    srv->lim.grow_args = MAX_ARGS;
    srv->qbuf_limit = (size_t)1 << 30;
    srv->obl[CLASS_NORMAL] = (obuf_limit){(size_t)1 << 30, 0, 0};
    srv->obl[CLASS_REPLICA] =
        (obuf_limit){(size_t)256 << 20, (size_t)64 << 20, 60 * 1000000000ull};
    srv->obl[CLASS_PUBSUB] =
        (obuf_limit){(size_t)32 << 20, (size_t)8 << 20, 60 * 1000000000ull};
    srv->should_yield = lull_loop_should_yield;
    srv->sender_cpu = -1;
    srv->snap_timeout_ms = 60000;
}

bool kv_parse_size(const char *s, size_t len, size_t *out) {
    static const struct {
        const char *unit;
        unsigned long long mul;
    } units[] = {{"", 1},           {"b", 1},          {"k", 1000},
                 {"kb", 1024},      {"m", 1000000},    {"mb", 1 << 20},
                 {"g", 1000000000}, {"gb", 1ull << 30}};
    size_t i = 0;
    unsigned long long v = 0;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (ULLONG_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    if (i == 0) return false;
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++)
        if (strlen(units[u].unit) == len - i &&
            strncasecmp(s + i, units[u].unit, len - i) == 0) {
            if (v > SIZE_MAX / units[u].mul) return false;
            *out = (size_t)(v * units[u].mul);
            return true;
        }
    return false;
}

resp_arg *server_args(server *srv, size_t n) {
    if (n > srv->lim.max_args) {
        resp_arg *v = realloc(srv->argv, n * sizeof *v);
        if (!v) return NULL;
        srv->argv = v;
        srv->lim.max_args = n;
    }
    return srv->argv;
}

static resp_arg *grow_args(kv *k, size_t n) {
    return server_args(LULL_CONTAINER_OF(k, server, kv), n);
}

int server_open(server *srv, lull_loop *loop, const kv_net *net,
                int64_t clock_ms) {
    srv->loop = loop;
    srv->net = net;
    srv->argv = malloc(srv->lim.max_args * sizeof *srv->argv);
    if (!srv->argv) return -ENOMEM;
    int rc = store_init(&srv->kv.db);
    if (rc < 0) {
        free(srv->argv);
        srv->argv = NULL;
        return rc;
    }
    kv_expiry_init(&srv->expiry, loop, &srv->kv, clock_ms);
    srv->kv.start_ms = clock_ms;
    /* Test only: the planted bugs of the keyspace and the log. */
    srv->kv.db.plant_int32 = srv->kv.plant & KV_PLANT_INT32;
    srv->kv.db.plant_same_length = srv->kv.plant & KV_PLANT_SAME_LENGTH;
    srv->kv.db.plant_blob_inplace = srv->kv.plant & KV_PLANT_BLOB_INPLACE;
    srv->kv.log.plant = srv->kv.plant;
    srv->kv.log.clock = plant_clock;
    srv->kv.log.clock_arg = srv;
    /* The links and hand-offs that read the log hold its trim back. */
    srv->kv.log.pinned = links_pinned;
    srv->kv.log.pinned_arg = srv;
    srv->expiry.expired = keys_expired;
    srv->expiry.arg = srv;
    srv->expiry.should_yield = srv->should_yield;
    srv->kv.wake = conn_wake;
    srv->kv.class_changed = conn_class_changed;
    srv->kv.reply_blob = conn_reply_blob;
    srv->kv.grow_args = grow_args;
    srv->kv.auth = conn_auth;
    srv->kv.requirepass = srv->requirepass != NULL;
    srv->kv.client_list = conn_client_list;
    srv->kv.client_kill = conn_client_kill;
    srv->kv.max_string = srv->lim.max_bulk;
    srv->kv.config_set = conn_config_set;
    lull_task_init(&srv->evict, clients_evict);
    conn_budget_set(srv, srv->maxmemory_clients);
    return 0;
}

void server_start(server *srv) {
    if (srv->kv.replica) master_start(srv);
}

void server_stop(server *srv) {
    if (srv->kv.replica) master_stop(srv);
    kv_expiry_stop(&srv->expiry);
    snapshots_stop(srv);
    senders_stop(srv);
    lull_task_cancel(&srv->evict);
}

void server_free(server *srv) {
    snapshots_stop(srv);
    senders_stop(srv); /* it reads the log */
    kv_free(&srv->kv);
    buf_free(&srv->m.in);
    store_free(&srv->m.snap_db);
    free(srv->argv);
    srv->argv = NULL;
}
