/* echo_libuv: the libuv program docs/MIGRATING.md ports to lull
 * (examples/port_echo_from_libuv.c is the port). A TCP echo server in the
 * shape most libuv programs have: each connection is a uv_tcp_t and a
 * uv_timer_t for its idle timeout, found through handle->data; a read is
 * echoed with uv_write; reading stops while the write queue is past
 * HIGH_WATER and starts again when a write brings it back below; the
 * connection's memory is freed when the second of its two handles has
 * closed.
 *
 * Not a lull example: lull's build compiles it and runs its self-test
 * against the same client as the port (echo_client.h) when libuv is
 * installed (examples/libuv/check.sh), so that the side by side in
 * MIGRATING.md stays honest.
 *
 *   echo_libuv [PORT] | --self-test   as port_echo_from_libuv
 *
 * Build:
 *   cc -O2 -pthread -o echo_libuv echo_libuv.c $(pkg-config --cflags --libs libuv) */
#define _POSIX_C_SOURCE 200809L
#include "../echo_client.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define HIGH_WATER ((size_t)64 << 10) /* as lull's default high_water */
#define READ_SIZE  ((size_t)64 << 10) /* libuv suggests 64 KiB per read */

typedef struct server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_async_t stop;  /* sent by the self-test client when it is done */
    uint64_t idle_ms; /* a connection quiet this long is closed */
    uint64_t accepted, open, closed_by_peer, closed_idle, closed_error;
    uint64_t bytes, pauses;
    size_t peak; /* the largest write queue seen, in bytes */
} server;

typedef struct conn {
    uv_tcp_t tcp;
    uv_timer_t idle; /* restarted by every read */
    server *srv;
    int handles; /* handles not yet closed: free at 0 */
    bool reading;
} conn;

typedef struct write_req {
    uv_write_t req;
    uv_buf_t buf; /* the bytes read, echoed and then freed */
} write_req;

static void on_read(uv_stream_t *stream, ssize_t n, const uv_buf_t *buf);

static void on_handle_closed(uv_handle_t *h) {
    conn *c = h->data;
    if (--c->handles == 0) {
        c->srv->open--;
        free(c);
    }
}

/* Whoever closes first counts the reason; both handles must close before
 * the memory can go. */
static void conn_close(conn *c, int reason) {
    if (uv_is_closing((uv_handle_t *)&c->tcp)) return;
    if (reason == UV_EOF)
        c->srv->closed_by_peer++;
    else if (reason == UV_ETIMEDOUT)
        c->srv->closed_idle++;
    else
        c->srv->closed_error++;
    uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
    uv_close((uv_handle_t *)&c->idle, on_handle_closed);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    (void)h;
    (void)suggested;
    buf->base = malloc(READ_SIZE);
    buf->len = buf->base ? READ_SIZE : 0;
}

static void on_written(uv_write_t *req, int status) {
    write_req *w = (write_req *)req;
    conn *c = req->handle->data;
    free(w->buf.base);
    free(w);
    if (status < 0) { /* UV_ECANCELED once closing */
        conn_close(c, status);
        return;
    }
    size_t queued = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
    if (!c->reading && queued < HIGH_WATER &&
        !uv_is_closing((uv_handle_t *)&c->tcp)) {
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
        c->reading = true;
    }
}

static void on_read(uv_stream_t *stream, ssize_t n, const uv_buf_t *buf) {
    conn *c = stream->data;
    if (n <= 0) {
        free(buf->base);
        if (n < 0) conn_close(c, (int)n); /* UV_EOF, or an error */
        return;
    }
    uv_timer_again(&c->idle);
    write_req *w = malloc(sizeof *w);
    if (!w) {
        free(buf->base);
        conn_close(c, UV_ENOMEM);
        return;
    }
    w->buf = uv_buf_init(buf->base, (unsigned)n);
    int rc = uv_write(&w->req, stream, &w->buf, 1, on_written);
    if (rc < 0) {
        free(buf->base);
        free(w);
        conn_close(c, rc);
        return;
    }
    c->srv->bytes += (uint64_t)n;
    size_t queued = uv_stream_get_write_queue_size(stream);
    if (queued > c->srv->peak) c->srv->peak = queued;
    if (queued >= HIGH_WATER) {
        uv_read_stop(stream);
        c->reading = false;
        c->srv->pauses++;
    }
}

static void on_idle(uv_timer_t *t) {
    conn_close(t->data, UV_ETIMEDOUT);
}

static void on_connection(uv_stream_t *listener, int status) {
    server *s = listener->data;
    if (status < 0) return;
    conn *c = malloc(sizeof *c);
    if (!c) return;
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->idle);
    c->tcp.data = c->idle.data = c;
    c->srv = s;
    c->handles = 2;
    c->reading = true;
    s->accepted++;
    s->open++;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c, UV_ECONNABORTED);
        return;
    }
    uv_timer_start(&c->idle, on_idle, s->idle_ms, s->idle_ms);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* Stops listening; the open connections end on their own (peer or idle),
 * and then nothing is left: uv_run returns. */
static void on_stop(uv_async_t *a) {
    server *s = a->data;
    uv_close((uv_handle_t *)&s->listener, NULL);
    uv_close((uv_handle_t *)&s->stop, NULL);
}

/* The self-test client's last call, on its thread. */
static void client_done(void *arg) {
    server *s = arg;
    uv_async_send(&s->stop);
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
    if (port < 0) {
        fprintf(stderr, "usage: echo_libuv [PORT (1-65535)] | --self-test\n");
        return 2;
    }
    /* As port_echo_from_libuv's: outlasts the client's unread phase. */
    server s = {.idle_ms = self_test ? 3000 : 10000};
    uv_loop_t loop;
    uv_loop_init(&loop);
    s.loop = &loop;
    uv_tcp_init(&loop, &s.listener);
    s.listener.data = &s;
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", port, &addr);
    int rc = uv_tcp_bind(&s.listener, (const struct sockaddr *)&addr, 0);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&s.listener, 128, on_connection);
    if (rc != 0) {
        fprintf(stderr, "listen: %s\n", uv_strerror(rc));
        return 1;
    }
    uv_async_init(&loop, &s.stop, on_stop);
    s.stop.data = &s;
    struct sockaddr_in bound;
    int len = sizeof bound;
    uv_tcp_getsockname(&s.listener, (struct sockaddr *)&bound, &len);
    port = ntohs(bound.sin_port);
    printf("echo_libuv: listening on 127.0.0.1:%d\n", port);
    fflush(stdout);

    echo_client cl = {.port = (uint16_t)port, .done = client_done, .arg = &s};
    if (self_test && !echo_client_start(&cl)) return 1;
    uv_run(&loop, UV_RUN_DEFAULT);
    bool client_ok = self_test ? echo_client_join(&cl) : true;

    printf("echo_libuv: %llu connections, %llu bytes echoed, %llu closed by "
           "peer, %llu closed idle, %llu by error; reading paused %llu "
           "times, largest queue %zu bytes\n",
           (unsigned long long)s.accepted, (unsigned long long)s.bytes,
           (unsigned long long)s.closed_by_peer,
           (unsigned long long)s.closed_idle,
           (unsigned long long)s.closed_error, (unsigned long long)s.pauses,
           s.peak);
    if (uv_loop_close(&loop) != 0) return 1;
    if (!self_test) return 0;
    if (!client_ok) fprintf(stderr, "self-test: %s failed\n", cl.failure);
    bool bounded = s.pauses > 0 && s.peak <= HIGH_WATER + READ_SIZE;
    if (!bounded) fprintf(stderr, "self-test: the write queue was unbounded\n");
    return client_ok && bounded && s.closed_by_peer == 1 &&
                   s.closed_idle == 1 && s.closed_error == 0
               ? 0
               : 1;
}
