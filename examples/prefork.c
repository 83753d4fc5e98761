/* prefork: a parent accepts TCP connections and hands each one to a worker
 * process, which serves it (echo).
 *
 * The workers are this program again, started with --worker by
 * lull_process_spawn, stdin a Unix socketpair (LULL_STDIO_SOCKETPAIR,
 * framed): the parent's end comes back as a lull stream. For each accepted
 * connection the parent sends a frame of no bytes with the connection's fd
 * attached (lull_stream_send_fds, which dups it: the parent then closes
 * its own), to the workers in turn. A worker takes the fd inside on_frame
 * (lull_stream_take_fds) and opens it as a raw stream that echoes (and
 * stops reading while its replies cannot leave); near its fd limit it takes
 * no more until one closes. When the parent closes its end, a worker
 * stops taking connections and exits once those it has are closed.
 *
 *   prefork [port]       listen on 127.0.0.1:port (default 7000), 2 workers
 *   prefork --self-test  listen on a free port, connect 6 clients from the
 *                        parent's own loop, check every echo, then close
 *                        the workers' sockets and wait for them to exit 0
 *
 * Build:
 *   cc -O2 -o prefork prefork.c $(pkg-config --cflags --libs lull)
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <lull.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "self_test_fds.h"

#define WORKERS 2
#define CLIENTS 6

/* ------------------------------------------------------------ worker */

typedef struct conn {
    lull_stream s;
} conn;

/* The fds a worker keeps for itself (the loop's, stdio, the one arriving):
 * a fd passed while none is free is dropped by the kernel, and that closes
 * the stream it came on (-EMFILE), the worker's only one to the parent. */
#define RESERVED_FDS 16

static lull_stream ctl; /* the parent's socketpair, on stdin */
static rlim_t conns;    /* connections open */
static bool ctl_paused; /* not taking connections: out of fds */

/* Echoes; while the peer does not read its replies, stops reading it
 * (else what it sends would queue here without bound), until on_drain. */
static void conn_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    if (lull_endpoint_send_copy(ep, bytes, len) < 0)
        lull_endpoint_close(ep, 0);
    else if (!lull_endpoint_writable(ep))
        lull_stream_read_stop(LULL_CONTAINER_OF(ep, lull_stream, ep));
}

static void conn_drain(lull_endpoint *ep) {
    lull_stream_read_start(LULL_CONTAINER_OF(ep, lull_stream, ep));
}

static void conn_close(lull_endpoint *ep, int reason) {
    (void)reason;
    free(LULL_CONTAINER_OF(ep, conn, s.ep));
    conns--;
    if (ctl_paused && lull_stream_read_start(&ctl) == 0) ctl_paused = false;
}

/* With every fd but the reserve in use, stops reading the parent's frames:
 * the next ones (and their fds) wait in the socketpair for a close. */
static void take_no_more_if_full(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
        conns + RESERVED_FDS >= rl.rlim_cur && lull_stream_read_stop(&ctl) == 0)
        ctl_paused = true;
}

/* A frame from the parent: the connection's fd came with it. */
static void ctl_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    (void)ep;
    (void)bytes;
    (void)len;
    int fd;
    if (lull_stream_take_fds(&ctl, &fd, 1) != 1) return;
    conn *c = malloc(sizeof *c);
    if (!c) {
        close(fd);
        return;
    }
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    if (lull_stream_open(ctl.loop, &c->s, fd, &raw) < 0) { /* fd closed */
        free(c);
        return;
    }
    lull_endpoint_set_callbacks(&c->s.ep, conn_frame, conn_drain, conn_close);
    conns++;
    take_no_more_if_full();
}

static int worker_main(void) {
    /* Started by hand, stdin is no socketpair: say so, rather than exit 1
     * with no word (or wait on a terminal for frames that never come). */
    struct stat st;
    if (fstat(0, &st) != 0 || !S_ISSOCK(st.st_mode)) {
        fprintf(stderr, "prefork: --worker is how prefork starts its "
                        "workers; their stdin is a socketpair, this one is "
                        "not\n");
        return 2;
    }
    lull_loop *loop;
    if (lull_loop_new(&loop, NULL) < 0) return 1;
    /* Framed, and taking the fds the parent passes with its frames. */
    lull_stream_options takes_fds = {.flags = LULL_STREAM_FDS};
    int rc = lull_stream_open(loop, &ctl, 0, &takes_fds);
    if (rc < 0) {
        fprintf(stderr, "prefork: worker: %s\n", lull_strerror(rc));
        lull_loop_free(loop);
        return 1;
    }
    /* No close callback: the parent's EOF ends it, and the loop runs until
     * the connections it handed over are closed too. */
    lull_endpoint_set_callbacks(&ctl.ep, ctl_frame, NULL, NULL);
    rc = lull_loop_run(loop, LULL_RUN_DEFAULT);
    return lull_loop_free(loop) == 0 && rc == 0 ? 0 : 1;
}

/* ------------------------------------------------------------ parent */

typedef struct handoff {
    lull_frame frame;
} handoff;

static void handoff_done(lull_frame *f) {
    free(LULL_CONTAINER_OF(f, handoff, frame));
}

typedef struct worker {
    lull_process proc;
    lull_stream ctl; /* the socketpair to its stdin: frames with fds */
    int handed;      /* connections sent to it */
    bool exited;
    int status;
} worker;

static worker workers[WORKERS];
static int spawned; /* workers started */
static int next_worker;
static int exited;

static void on_exit_cb(lull_process *p, int status, int sig) {
    worker *w = LULL_CONTAINER_OF(p, worker, proc);
    w->exited = true;
    w->status = sig ? 128 + sig : status;
    exited++;
}

/* An accepted connection goes to the next worker, fd attached; past one
 * that has died (its end closed: the send fails) to the next. */
static void on_connection(lull_server *srv) {
    lull_stream s = {0};
    if (lull_server_accept(srv, &s, NULL) < 0) return;
    int fd = lull_stream_fd(&s);
    handoff *h = calloc(1, sizeof *h);
    for (int tries = 0; h && tries < WORKERS; tries++) {
        worker *w = &workers[next_worker++ % WORKERS];
        h->frame.release = handoff_done;
        if (lull_stream_send_fds(&w->ctl, &h->frame, &fd, 1) == 0) {
            w->handed++;
            h = NULL; /* the frame's now, freed by handoff_done */
        }
    }
    free(h); /* no worker took it: the client reads EOF */
    /* The worker has its own copy now: ours closes (no close callback, so
     * the struct on this stack is ours again at once). */
    lull_endpoint_close(&s.ep, 0);
}

static int spawn_workers(lull_loop *loop, const char *self) {
    char *argv[] = {(char *)self, "--worker", NULL};
    for (int i = 0; i < WORKERS; i++) {
        lull_process_options o = {
            .file = "/proc/self/exe",
            .argv = argv,
            .stdio = {{.kind = LULL_STDIO_SOCKETPAIR,
                       .stream = &workers[i].ctl,
                       .flags = LULL_STDIO_FRAMED}},
        };
        int rc = lull_process_spawn(loop, &workers[i].proc, &o, on_exit_cb);
        if (rc < 0) {
            fprintf(stderr, "prefork: spawn: %s\n", lull_strerror(rc));
            return rc;
        }
        spawned++;
    }
    return 0;
}

/* ------------------------------------------------- the self-test's clients */

typedef struct client {
    lull_stream s;
    char msg[32];
    char got[32];
    size_t want, have;
    bool ok;
} client;

static client clients[CLIENTS];
static int clients_done, clients_ok;
static lull_server server;

static void client_finished(void) {
    if (++clients_done < CLIENTS) return;
    /* Every client has its answer: the workers may go. */
    for (int i = 0; i < WORKERS; i++)
        lull_endpoint_close(&workers[i].ctl.ep, 0);
    lull_server_close(&server);
}

static void client_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    client *c = LULL_CONTAINER_OF(ep, client, s.ep);
    if (c->have + len > c->want) len = c->want - c->have;
    memcpy(c->got + c->have, bytes, len);
    c->have += len;
    if (c->have < c->want) return;
    c->ok = memcmp(c->got, c->msg, c->want) == 0;
    clients_ok += c->ok;
    lull_endpoint_close(ep, 0);
}

static void client_close(lull_endpoint *ep, int reason) {
    (void)ep;
    (void)reason;
    client_finished();
}

static void client_connected(lull_stream *s, int status) {
    if (status < 0) return; /* its close callback follows */
    client *c = LULL_CONTAINER_OF(s, client, s);
    lull_endpoint_send_copy(&s->ep, c->msg, c->want);
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
    if (argc > 1 && strcmp(argv[1], "--worker") == 0) return worker_main();
    bool self_test = argc > 1 && strcmp(argv[1], "--self-test") == 0;
    int port = self_test ? 0 : (argc > 1 ? port_arg(argv[1]) : 7000);
    /* --help is asked for: the usage on stdout, exit 0; a mistake: stderr, 2.
     */
    bool help = argc == 2 && strcmp(argv[1], "--help") == 0;
    if (help || port < 0 || argc > 2) {
        fprintf(help ? stdout : stderr,
                "usage: prefork [PORT (1-65535)] | --self-test\n");
        return help ? 0 : 2;
    }
    /* The self-test's parent holds its CLIENTS sockets and, until each is
     * handed over, the one accepted for it, beside the loop's, the
     * listener's and two per worker. */
    if (self_test && !self_test_fds("prefork", 2 * CLIENTS + 2 * WORKERS + 16))
        return 1;
    lull_loop *loop;
    if (lull_loop_new(&loop, NULL) < 0) return 1;
    int rc = lull_server_listen_tcp(loop, &server, "127.0.0.1", port, 0,
                                    on_connection);
    bool listening = rc == 0;
    if (rc == 0) rc = spawn_workers(loop, argv[0]);
    if (rc < 0) {
        /* Undo what started: the workers that run exit at their socket's
         * EOF, and the loop runs until they are reaped. */
        fprintf(stderr, "prefork: %s\n", lull_strerror(rc));
        for (int i = 0; i < spawned; i++)
            lull_endpoint_close(&workers[i].ctl.ep, 0);
        if (listening) lull_server_close(&server);
        lull_loop_run(loop, LULL_RUN_DEFAULT);
        lull_loop_free(loop);
        return 1;
    }
    port = lull_server_port(&server);
    if (!self_test) {
        printf("prefork: listening on 127.0.0.1:%d\n", port);
        fflush(stdout); /* now, also when stdout is a pipe or a file */
    }
    if (self_test) {
        lull_stream_options raw = {.flags = LULL_STREAM_RAW};
        for (int i = 0; i < CLIENTS; i++) {
            client *c = &clients[i];
            c->want = (size_t)snprintf(c->msg, sizeof c->msg, "hello %d", i);
            rc = lull_stream_connect_tcp(loop, &c->s, "127.0.0.1", port, &raw,
                                         client_connected);
            if (rc < 0) { /* done, and not ok: the summary says so */
                fprintf(stderr, "prefork: client %d: %s\n", i,
                        lull_strerror(rc));
                client_finished();
                continue;
            }
            lull_endpoint_set_callbacks(&c->s.ep, client_frame, NULL,
                                        client_close);
        }
    }
    rc = lull_loop_run(loop, LULL_RUN_DEFAULT);
    bool workers_ok = true;
    for (int i = 0; i < WORKERS; i++)
        workers_ok &= workers[i].exited && workers[i].status == 0;
    if (lull_loop_free(loop) < 0) return 1;
    if (!self_test) return rc == 0 ? 0 : 1;
    printf("prefork: %d of %d connections echoed, handed %d and %d to %d "
           "workers, which exited %s\n",
           clients_ok, CLIENTS, workers[0].handed, workers[1].handed, WORKERS,
           workers_ok ? "0" : "badly");
    return clients_ok == CLIENTS && workers_ok ? 0 : 1;
}
