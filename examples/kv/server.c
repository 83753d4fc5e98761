/* lull-kv: a Redis-protocol (RESP2) key-value server on one lull loop.
 *
 * An example of a real protocol server on lull's public API, and a vehicle
 * for benchmarks against clients nobody here wrote (redis-cli,
 * redis-benchmark). Not a Redis replacement: docs/KV.md says what it does
 * and does not do.
 *
 * Each connection is a lull_stream in raw mode (LULL_STREAM_RAW): bytes
 * arrive in chunks of any size at on_frame. They are appended to the
 * connection's input buffer, every complete command at its front is run
 * (pipelining), and what is left is kept for the next chunk (partial
 * reads). All replies to one chunk go out as one send, so a pipeline of N
 * commands costs one write, not N. A connection whose replies pile up past
 * the stream's high-water mark stops reading until they drain.
 *
 * A protocol error answers `-ERR Protocol error: ...`, then shuts the write
 * side down and ignores the rest of that client's input until it hangs up;
 * no other connection notices.
 *
 *   lull-kv [--port N] [--unix PATH] [--max-bulk BYTES]
 *     --port N        TCP on 127.0.0.1:N (default 6380; 0 = any free port)
 *     --unix PATH     also listen on a Unix socket (an old file is removed)
 *     --max-bulk B    the longest argument accepted (default 64 MiB)
 *   It prints "lull-kv: listening on 127.0.0.1:PORT" once ready, and runs
 *   until killed.
 *
 * Build (with resp.c and store.c):
 *   cc -O2 -o lull-kv server.c resp.c store.c $(pkg-config --cflags --libs lull) */
#define _POSIX_C_SOURCE 200809L
#include "resp.h"
#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <lull.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* 1024 arguments: far more than any command lull-kv knows takes (SET has
 * three); a client sending more is sending something lull-kv cannot run. */
#define MAX_ARGS 1024

typedef struct server {
    lull_loop *loop;
    lull_server tcp;
    lull_server unx;
    bool has_unix;
    store db;
    resp_limits lim;
    resp_arg argv[MAX_ARGS]; /* the command being run (one at a time) */
} server;

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

typedef struct conn {
    lull_stream s;
    server *srv;
    buf in;       /* bytes read and not yet parsed into a command */
    buf out;      /* replies to the current chunk, sent at its end */
    bool closing; /* QUIT or a protocol error: input is ignored from now */
} conn;

/* ------------------------------------------------------------- buffers */

static bool buf_reserve(buf *b, size_t more) {
    if (b->cap - b->len >= more) return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < more)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

/* Reply writers. Out of memory drops the connection later (see conn_ok). */
static bool oom;

static void put(buf *b, const void *p, size_t n) {
    if (!buf_reserve(b, n)) {
        oom = true;
        return;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void put_str(buf *b, const char *s) {
    put(b, s, strlen(s));
}

static void put_int(buf *b, char tag, long long v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%c%lld\r\n", tag, v);
    put(b, tmp, (size_t)n);
}

static void put_bulk(buf *b, const char *p, size_t n) {
    put_int(b, '$', (long long)n);
    put(b, p, n);
    put(b, "\r\n", 2);
}

/* ------------------------------------------------------------ commands */

static bool is(const resp_arg *a, const char *name) {
    return a->len == strlen(name) && strncasecmp(a->p, name, a->len) == 0;
}

static void wrong_args(buf *out, const resp_arg *cmd) {
    put_str(out, "-ERR wrong number of arguments for '");
    put(out, cmd->p, cmd->len > 64 ? 64 : cmd->len);
    put_str(out, "' command\r\n");
}

static void unknown(buf *out, const resp_arg *cmd) {
    put_str(out, "-ERR unknown command '");
    /* Echo at most 64 printable bytes: the reply is one line. */
    for (size_t i = 0; i < cmd->len && i < 64; i++) {
        char c = cmd->p[i];
        put(out, (c >= 0x20 && c < 0x7f) ? &c : "?", 1);
    }
    put_str(out, "'\r\n");
}

/* INCR's parse: what Redis accepts, an optional '-' and digits, no spaces,
 * no leading '+', within int64. */
static bool parse_i64(const char *p, size_t n, long long *out) {
    if (n == 0 || n > 20) return false;
    char tmp[21];
    memcpy(tmp, p, n);
    tmp[n] = 0;
    if (!(tmp[0] == '-' || (tmp[0] >= '0' && tmp[0] <= '9'))) return false;
    char *end;
    errno = 0;
    long long v = strtoll(tmp, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

/* CONFIG GET: what a server without persistence says, for the parameters
 * redis-benchmark and redis-cli ask about at start-up; others are unknown
 * (an empty reply, as Redis gives for a name that matches nothing). */
static void config_get(buf *out, const resp_arg *name) {
    static const char *const params[][2] = {{"save", ""}, {"appendonly", "no"}};
    size_t n = 0, match[2];
    for (size_t i = 0; i < 2; i++)
        if (is(name, "*") || is(name, params[i][0])) match[n++] = i;
    put_int(out, '*', (long long)(2 * n));
    for (size_t i = 0; i < n; i++) {
        put_bulk(out, params[match[i]][0], strlen(params[match[i]][0]));
        put_bulk(out, params[match[i]][1], strlen(params[match[i]][1]));
    }
}

/* Runs one command; its reply goes to c->out. */
static void run(conn *c, const resp_arg *a, size_t argc) {
    store *db = &c->srv->db;
    buf *out = &c->out;
    if (is(&a[0], "PING")) {
        if (argc == 1)
            put_str(out, "+PONG\r\n");
        else if (argc == 2)
            put_bulk(out, a[1].p, a[1].len);
        else
            wrong_args(out, &a[0]);
    } else if (is(&a[0], "ECHO")) {
        if (argc != 2) return wrong_args(out, &a[0]);
        put_bulk(out, a[1].p, a[1].len);
    } else if (is(&a[0], "GET")) {
        if (argc != 2) return wrong_args(out, &a[0]);
        size_t vlen;
        const char *v = store_get(db, a[1].p, a[1].len, &vlen);
        if (v)
            put_bulk(out, v, vlen);
        else
            put_str(out, "$-1\r\n");
    } else if (is(&a[0], "SET")) {
        if (argc != 3) /* plain SET only: no EX, NX, ... */
            return wrong_args(out, &a[0]);
        if (store_set(db, a[1].p, a[1].len, a[2].p, a[2].len) < 0)
            put_str(out, "-OOM out of memory\r\n");
        else
            put_str(out, "+OK\r\n");
    } else if (is(&a[0], "DEL") || is(&a[0], "EXISTS")) {
        if (argc < 2) return wrong_args(out, &a[0]);
        bool del = is(&a[0], "DEL");
        long long n = 0;
        for (size_t i = 1; i < argc; i++) {
            size_t vlen;
            n += del ? store_del(db, a[i].p, a[i].len)
                     : store_get(db, a[i].p, a[i].len, &vlen) != NULL;
        }
        put_int(out, ':', n);
    } else if (is(&a[0], "INCR")) {
        if (argc != 2) return wrong_args(out, &a[0]);
        size_t vlen;
        const char *v = store_get(db, a[1].p, a[1].len, &vlen);
        long long n = 0;
        if (v && !parse_i64(v, vlen, &n))
            return put_str(out,
                           "-ERR value is not an integer or out of range\r\n");
        if (n == INT64_MAX)
            return put_str(out,
                           "-ERR increment or decrement would overflow\r\n");
        char tmp[32];
        int len = snprintf(tmp, sizeof tmp, "%lld", n + 1);
        if (store_set(db, a[1].p, a[1].len, tmp, (size_t)len) < 0)
            return put_str(out, "-OOM out of memory\r\n");
        put_int(out, ':', n + 1);
    } else if (is(&a[0], "DBSIZE")) {
        put_int(out, ':', (long long)db->count);
    } else if (is(&a[0], "FLUSHALL") || is(&a[0], "FLUSHDB")) {
        store_clear(db);
        put_str(out, "+OK\r\n");
    } else if (is(&a[0], "QUIT")) {
        put_str(out, "+OK\r\n");
        c->closing = true;
    } else if (is(&a[0], "COMMAND")) {
        /* redis-cli asks for COMMAND DOCS to offer hints; it copes with an
         * empty answer. */
        put_str(out, "*0\r\n");
    } else if (is(&a[0], "CONFIG")) {
        if (argc == 3 && is(&a[1], "GET"))
            config_get(out, &a[2]);
        else
            put_str(out, "-ERR CONFIG: only CONFIG GET is supported\r\n");
    } else {
        unknown(out, &a[0]);
    }
}

/* ---------------------------------------------------------- connections */

static void conn_free(conn *c) {
    free(c->in.p);
    free(c->out.p);
    free(c);
}

static void on_close(lull_endpoint *ep, int reason) {
    (void)reason; /* EOF, reset, ...: the client is gone either way */
    conn_free(LULL_CONTAINER_OF(ep, conn, s.ep));
}

/* Sends what the chunk produced, and pushes back when it piles up. The
 * copy is one allocation per chunk, not per command: the output buffer is
 * reused for the next chunk while lull still holds the copy. */
static void flush(conn *c) {
    if (c->out.len == 0) return;
    lull_send_copy(&c->s.ep, c->out.p, c->out.len);
    c->out.len = 0;
    if (!lull_writable(&c->s.ep)) lull_stream_read_stop(&c->s);
}

static void on_drain(lull_endpoint *ep) {
    /* Also when closing: reading on is how the client's EOF is seen. */
    lull_stream_read_start(&LULL_CONTAINER_OF(ep, conn, s.ep)->s);
}

/* Stops serving this client: the queued replies are written, then the
 * write side is shut; its input is ignored until it hangs up. */
static void conn_finish(conn *c) {
    c->closing = true;
    flush(c);
    lull_stream_shutdown(&c->s);
}

static void on_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    conn *c = LULL_CONTAINER_OF(ep, conn, s.ep);
    server *srv = c->srv;
    if (c->closing) return;
    if (!buf_reserve(&c->in, len)) {
        lull_endpoint_close(&c->s.ep, -ENOMEM); /* no on_close follows */
        conn_free(c);
        return;
    }
    memcpy(c->in.p + c->in.len, bytes, len);
    c->in.len += len;

    size_t off = 0;
    while (!c->closing) {
        size_t argc;
        const char *err = NULL;
        long n = resp_parse(&srv->lim, c->in.p + off, c->in.len - off,
                            srv->argv, &argc, &err);
        if (n == RESP_INCOMPLETE) break;
        if (n == RESP_ERROR) {
            put_str(&c->out, "-ERR ");
            put_str(&c->out, err);
            put_str(&c->out, "\r\n");
            conn_finish(c);
            return;
        }
        off += (size_t)n;
        if (argc) run(c, srv->argv, argc);
    }
    /* Keep the unparsed tail at the front for the next chunk. */
    memmove(c->in.p, c->in.p + off, c->in.len - off);
    c->in.len -= off;
    if (oom) {
        oom = false;
        lull_endpoint_close(&c->s.ep, -ENOMEM);
        conn_free(c);
        return;
    }
    if (c->closing)
        conn_finish(c);
    else
        flush(c);
}

static server *the_server; /* lull_server has no data pointer: one server */

static void accept_conn(lull_server *ls) {
    conn *c = calloc(1, sizeof *c);
    if (!c) return; /* the waiting connection is closed when we return */
    c->srv = the_server;
    lull_stream_options o = {.flags = LULL_STREAM_RAW};
    if (lull_stream_accept(ls, &c->s, &o) < 0) {
        free(c);
        return;
    }
    lull_endpoint_callbacks(&c->s.ep, on_frame, on_drain, on_close);
}

/* ----------------------------------------------------------------- main */

static int usage(void) {
    fprintf(stderr,
            "usage: lull-kv [--port N] [--unix PATH] [--max-bulk BYTES]\n");
    return 2;
}

int main(int argc, char **argv) {
    static server srv;
    int port = 6380;
    const char *unix_path = NULL;
    srv.lim.max_bulk = (size_t)64 << 20; /* 64 MiB: see --max-bulk */
    srv.lim.max_args = MAX_ARGS;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--port") == 0)
            port = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--unix") == 0)
            unix_path = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--max-bulk") == 0)
            srv.lim.max_bulk = strtoull(argv[++i], NULL, 10);
        else
            return usage();
    }
    if (port < 0 || port > 65535) return usage();
    the_server = &srv;
    int rc;
    if ((rc = store_init(&srv.db)) < 0 ||
        (rc = lull_loop_new(&srv.loop, NULL)) < 0) {
        fprintf(stderr, "lull-kv: %s\n", strerror(-rc));
        return 1;
    }
    rc = lull_tcp_listen(srv.loop, &srv.tcp, "127.0.0.1", port, 0, accept_conn);
    if (rc < 0) {
        fprintf(stderr, "lull-kv: listen on 127.0.0.1:%d: %s\n", port,
                strerror(-rc));
        return 1;
    }
    if (unix_path) {
        unlink(unix_path); /* a socket file left by an earlier run */
        rc = lull_unix_listen(srv.loop, &srv.unx, unix_path, 0, accept_conn);
        if (rc < 0) {
            fprintf(stderr, "lull-kv: listen on %s: %s\n", unix_path,
                    strerror(-rc));
            return 1;
        }
        srv.has_unix = true;
    }
    printf("lull-kv: listening on 127.0.0.1:%d%s%s\n",
           lull_server_port(&srv.tcp), unix_path ? " and " : "",
           unix_path ? unix_path : "");
    fflush(stdout);
    lull_run(srv.loop, LULL_RUN_DEFAULT);
    lull_server_close(&srv.tcp);
    if (srv.has_unix) lull_server_close(&srv.unx);
    store_free(&srv.db);
    lull_loop_free(srv.loop);
    return 0;
}
