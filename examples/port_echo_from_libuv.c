/* port_echo_from_libuv: the TCP echo server of docs/MIGRATING.md, ported
 * from libuv (the original is examples/libuv/echo_libuv.c).
 *
 * Each connection echoes what it reads and is closed after IDLE with
 * nothing read or written. When a reply cannot leave (the peer reads
 * slowly), the connection stops reading until its queue has drained, so
 * the server holds at most about one high-water mark and one read per
 * connection. What the port changed, in short:
 *
 *   uv_tcp_t + uv_timer_t per connection  ->  one lull_stream: the idle
 *       timeout is an option (idle_timeout_ns), not a handle
 *   uv_listen + uv_accept        ->  lull_server_listen_tcp, and
 *       lull_server_accept inside on_connection
 *   uv_read_start(alloc, read)   ->  on_frame (LULL_STREAM_RAW: bytes as
 *       they come, in the stream's own buffer)
 *   uv_write + its callback      ->  lull_endpoint_send_copy (the copy is
 *       freed once written)
 *   write queue size >= HIGH     ->  !lull_endpoint_writable: read_stop;
 *       on_drain: read_start
 *   uv_close twice + a count     ->  on_close, once, whoever closed: peer,
 *       idle timeout, error or us
 *   (nothing)                    ->  max_queued: a hard bound per connection
 *   handle->data                 ->  ep->data
 *   uv_async_send                ->  lull_task_post_remote
 *
 *   port_echo_from_libuv [PORT]       serve on 127.0.0.1:PORT (default
 *                                     7000) until killed
 *   port_echo_from_libuv --self-test  serve on a free port, driven by the
 *                                     client of echo_client.h; exits 0 when
 *                                     every byte came back, the idle
 *                                     connection was closed, and reading
 *                                     paused instead of queueing
 *
 * Build:
 *   cc -O2 -pthread -o port_echo_from_libuv port_echo_from_libuv.c $(pkg-config --cflags --libs lull)
 * or with CMake (find_package(lull)), all examples at once:
 *   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=<lull prefix>
 *   cmake --build build-examples */
#define _POSIX_C_SOURCE 200809L
#include "echo_client.h"
#include <errno.h>
#include <lull.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS        1000000ull
#define READ_SIZE ((size_t)64 << 10) /* the stream's read buffer */
/* A hard bound per connection: the read pause keeps a queue near 64 KiB,
 * so a queue of 1 MiB means that logic broke; the connection is then closed
 * (-ENOBUFS) instead of growing without limit. */
#define MAX_QUEUED ((size_t)1 << 20)

typedef struct server {
    lull_loop *loop;
    lull_server listener;
    lull_task stop;   /* posted by the self-test client when it is done */
    uint64_t idle_ns; /* a connection quiet this long is closed */
    uint64_t accepted, open, closed_by_peer, closed_idle, closed_error;
    uint64_t bytes, pauses;
    size_t peak; /* the largest write queue seen, in bytes */
} server;

typedef struct conn {
    lull_stream s; /* the connection; &s.ep is its endpoint */
    server *srv;
} conn;

static void on_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    conn *c = ep->data;
    if (lull_endpoint_send_copy(ep, bytes, len) != 0)
        return; /* closing: on_close follows */
    c->srv->bytes += len;
    if (ep->queued > c->srv->peak) c->srv->peak = ep->queued;
    if (!lull_endpoint_writable(ep)) { /* past high_water */
        lull_stream_read_stop(&c->s);
        c->srv->pauses++;
    }
}

static void on_drain(lull_endpoint *ep) {
    conn *c = ep->data;
    lull_stream_read_start(&c->s);
}

static void on_close(lull_endpoint *ep, int reason) {
    conn *c = ep->data;
    if (reason == 0)
        c->srv->closed_by_peer++;
    else if (reason == -ETIMEDOUT)
        c->srv->closed_idle++;
    else
        c->srv->closed_error++;
    c->srv->open--;
    free(c);
}

static void on_connection(lull_server *srv) {
    server *s = LULL_CONTAINER_OF(srv, server, listener);
    conn *c = malloc(sizeof *c);
    lull_stream_options o = {.flags = LULL_STREAM_RAW,
                             .read_size = READ_SIZE,
                             .idle_timeout_ns = s->idle_ns,
                             .max_queued = MAX_QUEUED};
    if (!c || lull_server_accept(srv, &c->s, &o) != 0) {
        free(c); /* the connection is closed when we return */
        return;
    }
    c->srv = s;
    c->s.ep.data = c;
    lull_endpoint_set_callbacks(&c->s.ep, on_frame, on_drain, on_close);
    s->accepted++;
    s->open++;
}

/* Stops listening; the open connections end on their own (peer or idle),
 * and then nothing is left: lull_loop_run returns. */
static void on_stop(lull_task *t) {
    server *s = LULL_CONTAINER_OF(t, server, stop);
    lull_server_close(&s->listener);
}

/* The self-test client's last call, on its thread. */
static void client_done(void *arg) {
    server *s = arg;
    lull_task_post_remote(s->loop, &s->stop);
}

/* A port from the command line: digits only, 1-65535 (atoi read "abc"
 * as 0, a port the kernel picks, and wrapped 70000 to 4464); -1 if not. */
static int port_arg(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    return *s >= '0' && *s <= '9' && !*end && v >= 1 && v <= 65535 ? (int)v
                                                                   : -1;
}

int main(int argc, char **argv) {
    bool self_test = argc > 1 && strcmp(argv[1], "--self-test") == 0;
    int port = self_test ? 0 : argc > 1 ? port_arg(argv[1]) : 7000;
    /* --help is asked for: the usage on stdout, exit 0; a mistake: stderr, 2.
     */
    bool help = argc == 2 && strcmp(argv[1], "--help") == 0;
    if (help || port < 0 || argc > 2) {
        fprintf(help ? stdout : stderr,
                "usage: port_echo_from_libuv [PORT (1-65535)] | --self-test\n");
        return help ? 0 : 2;
    }
    /* The self-test's idle timeout must outlast the busy connection's
     * unread phase (echo_client.h): the client pushes up to ~10 MB while
     * reading nothing, and the paused server sees no progress meanwhile.
     * Under ThreadSanitizer on a loaded 2-CPU machine that phase passed
     * 1 s (3 of 80 runs closed the busy connection idle); 3 s holds it
     * and adds at most 2 s of waiting for the quiet connection's close. */
    server s = {.idle_ns = (self_test ? 3000 : 10000) * MS};
    int rc = lull_loop_new(&s.loop, NULL);
    if (rc == 0)
        rc = lull_server_listen_tcp(s.loop, &s.listener, "127.0.0.1", port, 128,
                                    on_connection);
    if (rc != 0) {
        fprintf(stderr, "listen: %s\n", lull_strerror(rc));
        if (s.loop) lull_loop_free(s.loop);
        return 1;
    }
    lull_task_init(&s.stop, on_stop);
    port = lull_server_port(&s.listener);
    printf("port_echo: listening on 127.0.0.1:%d\n", port);
    fflush(stdout);

    echo_client cl = {.port = (uint16_t)port, .done = client_done, .arg = &s};
    bool client_started = !self_test || echo_client_start(&cl);
    if (!client_started) lull_server_close(&s.listener); /* nothing to do */
    rc = lull_loop_run(s.loop, LULL_RUN_DEFAULT);
    bool client_ok =
        self_test && client_started ? echo_client_join(&cl) : client_started;

    printf("port_echo: %llu connections, %llu bytes echoed, %llu closed by "
           "peer, %llu closed idle, %llu by error; reading paused %llu "
           "times, largest queue %zu bytes\n",
           (unsigned long long)s.accepted, (unsigned long long)s.bytes,
           (unsigned long long)s.closed_by_peer,
           (unsigned long long)s.closed_idle,
           (unsigned long long)s.closed_error, (unsigned long long)s.pauses,
           s.peak);
    if (lull_loop_free(s.loop) != 0 || rc != 0) return 1;
    if (!self_test) return 0;
    if (!client_ok) fprintf(stderr, "self-test: %s failed\n", cl.failure);
    /* Backpressure held: a queue never grew past one high-water mark plus
     * one read. */
    bool bounded =
        s.pauses > 0 && s.peak <= LULL_HIGH_WATER_DEFAULT + READ_SIZE;
    if (!bounded) fprintf(stderr, "self-test: the write queue was unbounded\n");
    return client_ok && bounded && s.closed_by_peer == 1 &&
                   s.closed_idle == 1 && s.closed_error == 0
               ? 0
               : 1;
}
