/* reuseport: one TCP port served by one loop per CPU (lull_percore), in the
 * two ways a server spreads connections over its loops:
 *
 *   reuseport  every loop opens its own listening socket on the same port
 *              with SO_REUSEPORT, and the kernel spreads new connections
 *              over them: no thread ever touches another loop;
 *   handoff    loop 0 alone accepts, and hands each connection to the
 *              loops in turn with lull_task_post_remote: the way to go when the
 *              program, not the kernel, must choose the loop.
 *
 * Each connection echoes what it reads until the peer hangs up. A loop's
 * state is its own (one `server` per loop, touched only by that loop's
 * thread); the only cross-thread call is lull_task_post_remote.
 *
 * Stopping with hand-offs in flight: lull_percore_stop runs every hand-off
 * the loops post, also one that lands after its loop's stop function ran;
 * such a hand-off closes the connection at once instead of starting it.
 *
 *   reuseport [PORT [MODE]]  serve 127.0.0.1:PORT (default 7001) in MODE
 *                            (reuseport, the default, or handoff) until
 *                            Ctrl-C; try `nc 127.0.0.1 7001`
 *   reuseport --self-test    both modes on free ports, 64 connections each
 *                            from this thread; exits 0 when every byte came
 *                            back, every loop served some and the loops
 *                            stopped cleanly
 *
 * Build:
 *   cc -O2 -pthread -o reuseport reuseport.c $(pkg-config --cflags --libs lull)
 * or with CMake (find_package(lull)), all examples at once:
 *   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=<lull prefix>
 *   cmake --build build-examples */
#define _GNU_SOURCE /* pthread_sigmask, sigwait with -std=c11 */
#include <errno.h>
#include <lull.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "self_test_fds.h"

#define MAX_LOOPS 64

enum { MODE_REUSEPORT, MODE_HANDOFF };

typedef struct conn conn;

typedef struct server { /* one per loop, touched by its thread only */
    lull_loop *loop;
    int index;
    int listen_fd;     /* -1 when this loop does not accept */
    lull_io listen_io; /* reuseport: every loop; handoff: loop 0 */
    lull_timer retry;  /* resumes accepting after running out of fds */
    conn *conns;       /* open connections, to close at stop */
    bool stopping;     /* the stop function ran */
    uint64_t served;   /* connections this loop echoed for */
    uint64_t bytes;    /* bytes echoed */
    unsigned next;     /* handoff, loop 0: the next loop to hand to */
} server;

struct conn {
    lull_io io;
    lull_task adopt; /* handoff: runs on the target loop */
    server *srv;     /* the loop that serves it */
    conn *next, *prev;
    int fd;
    size_t off, len; /* buf[off, len): a reply not yet written */
    char buf[16384];
};

typedef struct app {
    int mode;
    uint16_t port;
    int loops;
    lull_percore *pc;
    server servers[MAX_LOOPS];
} app;

/* ------------------------------------------------------- connections */

static void conn_close(conn *c) {
    server *s = c->srv;
    lull_io_stop(&c->io);
    close(c->fd);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    free(c);
}

static bool conn_flush(conn *c) {
    while (c->off < c->len) {
        ssize_t n = send(c->fd, c->buf + c->off, c->len - c->off, MSG_NOSIGNAL);
        if (n < 0) return false; /* EAGAIN: wait for writable */
        c->off += (size_t)n;
        c->srv->bytes += (uint64_t)n;
    }
    return true;
}

static void conn_watch(conn *c, int events) {
    lull_io_stop(&c->io);
    lull_io_start(&c->io, events);
}

static void on_conn(lull_io *io, int events) {
    conn *c = LULL_CONTAINER_OF(io, conn, io);
    if (c->off < c->len) {
        if (!conn_flush(c) && !(events & (LULL_HANGUP | LULL_ERROR))) return;
        conn_watch(c, LULL_READABLE);
    }
    ssize_t n = read(c->fd, c->buf, sizeof c->buf);
    if (n > 0) {
        c->off = 0;
        c->len = (size_t)n;
        if (!conn_flush(c)) conn_watch(c, LULL_WRITABLE);
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        conn_close(c);
    }
}

/* On the serving loop's thread: starts watching c, or closes it if the
 * loop is stopping. */
static void conn_start(server *s, conn *c) {
    c->srv = s;
    c->off = c->len = 0;
    if (s->stopping || lull_io_init(s->loop, &c->io, c->fd, on_conn) < 0 ||
        lull_io_start(&c->io, LULL_READABLE) < 0) {
        close(c->fd);
        free(c);
        return;
    }
    c->prev = NULL;
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->served++;
}

static void on_adopt(lull_task *t) {
    conn *c = LULL_CONTAINER_OF(t, conn, adopt);
    conn_start(c->srv, c);
}

/* --------------------------------------------------------- accepting */

static app the_app;

static void on_accept(lull_io *io, int events) {
    server *s = LULL_CONTAINER_OF(io, server, listen_io);
    (void)events;
    int fd;
    while ((fd = accept4(io->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >=
           0) {
        conn *c = malloc(sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        if (the_app.mode == MODE_REUSEPORT) {
            conn_start(s, c);
            continue;
        }
        /* Hand it to the next loop in turn, this one included. */
        int i = (int)(s->next++ % (unsigned)the_app.loops);
        c->srv = &the_app.servers[i];
        lull_task_init(&c->adopt, on_adopt);
        lull_task_post_remote(c->srv->loop, &c->adopt);
    }
    /* Out of fds (or memory): the connection stays in the backlog, so the
     * socket stays readable and watching it would spin. Pause accepting
     * for 100 ms, as lull's own listener does; closes free fds meanwhile. */
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
        errno == ENOMEM) {
        lull_io_stop(io);
        lull_timer_start(&s->retry, LULL_MS(100), 0);
    }
}

static void on_retry(lull_timer *t) {
    server *s = LULL_CONTAINER_OF(t, server, retry);
    lull_io_start(&s->listen_io, LULL_READABLE);
}

static int listen_on(uint16_t port, uint16_t *bound) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0 ||
        bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 128) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        close(fd);
        return -1;
    }
    *bound = ntohs(a.sin_port);
    return fd;
}

/* -------------------------------------------- per-loop start and stop */

/* Runs on loop `index`'s thread before it runs. The listening sockets were
 * opened by main (so that a failure is reported before anything starts);
 * each loop watches its own. */
static void loop_start(lull_loop *loop, int index, void *arg) {
    app *a = arg;
    server *s = &a->servers[index];
    s->loop = loop;
    s->index = index;
    if (s->listen_fd >= 0) {
        lull_io_init(loop, &s->listen_io, s->listen_fd, on_accept);
        lull_io_start(&s->listen_io, LULL_READABLE);
        lull_timer_init(loop, &s->retry, on_retry);
    }
}

static void loop_stop(lull_loop *loop, int index, void *arg) {
    app *a = arg;
    server *s = &a->servers[index];
    (void)loop;
    s->stopping = true;
    if (s->listen_fd >= 0) {
        lull_io_stop(&s->listen_io);
        lull_timer_stop(&s->retry);
        close(s->listen_fd);
        s->listen_fd = -1;
    }
    while (s->conns)
        conn_close(s->conns);
}

/* Opens the listening sockets and starts the loops. */
static int serve(app *a) {
    for (int i = 0; i < a->loops; i++) {
        server *s = &a->servers[i];
        memset(s, 0, sizeof *s);
        s->listen_fd = -1;
        if (a->mode == MODE_HANDOFF && i > 0) continue;
        /* Port 0 picks a free port for the first socket; the others join
         * it on that port. */
        s->listen_fd = listen_on(a->port, &a->port);
        if (s->listen_fd < 0) return -errno;
    }
    lull_percore_options o = {
        .loops = a->loops, .start = loop_start, .stop = loop_stop, .arg = a};
    return lull_percore_start(&a->pc, &o);
}

/* ------------------------------------------------ the self-test client */

#define CONNS 64
#define BYTES 4096

static bool echo_all(uint16_t port) {
    int fds[CONNS];
    for (int i = 0; i < CONNS; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fds[i] < 0 ||
            connect(fds[i], (struct sockaddr *)&a, sizeof a) < 0) {
            fprintf(stderr, "reuseport: connection %d of %d: %s\n", i + 1,
                    CONNS, strerror(errno));
            for (int k = 0; k <= i; k++)
                if (fds[k] >= 0) close(fds[k]);
            return false;
        }
    }
    bool ok = true;
    for (int i = 0; i < CONNS && ok; i++) {
        char out[BYTES], in[BYTES];
        for (int k = 0; k < BYTES; k++)
            out[k] = (char)(i * 31 + k);
        ok = send(fds[i], out, BYTES, MSG_NOSIGNAL) == BYTES;
        size_t got = 0;
        while (ok && got < BYTES) {
            struct pollfd p = {.fd = fds[i], .events = POLLIN};
            ssize_t r = poll(&p, 1, 5000) == 1
                            ? read(fds[i], in + got, BYTES - got)
                            : -1;
            ok = r > 0;
            if (ok) got += (size_t)r;
        }
        ok = ok && memcmp(in, out, BYTES) == 0;
        if (!ok)
            fprintf(stderr,
                    "reuseport: connection %d: no echo, or a wrong "
                    "one, within 5 s\n",
                    i + 1);
    }
    for (int i = 0; i < CONNS; i++)
        close(fds[i]);
    return ok;
}

static bool self_test(int mode) {
    app *a = &the_app;
    a->mode = mode;
    a->port = 0;
    a->loops = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (a->loops < 2) a->loops = 2; /* two loops even on one CPU */
    if (a->loops > 4) a->loops = 4;
    if (serve(a) < 0) {
        perror("reuseport");
        return false;
    }
    bool ok = echo_all(a->port);
    int rc = lull_percore_stop(a->pc); /* joined: the counts are ours */
    uint64_t served = 0;
    bool every = true;
    printf("%s:", mode == MODE_HANDOFF ? "handoff" : "reuseport");
    for (int i = 0; i < a->loops; i++) {
        printf(" loop %d served %llu (%llu bytes)%s", i,
               (unsigned long long)a->servers[i].served,
               (unsigned long long)a->servers[i].bytes,
               i + 1 < a->loops ? "," : "\n");
        served += a->servers[i].served;
        every = every && a->servers[i].served > 0;
    }
    if (rc < 0) printf("lull_percore_stop: %s\n", strerror(-rc));
    return ok && rc == 0 && every && served == CONNS;
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
    /* Every thread lull_percore starts inherits this mask, so SIGINT and
     * SIGTERM reach only sigwait below. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);

    if (argc > 1 && strcmp(argv[1], "--self-test") == 0) {
        /* CONNS client sockets and as many accepted, beside the loops'. */
        if (!self_test_fds("reuseport", 2 * CONNS + 64)) return 1;
        bool ok = self_test(MODE_REUSEPORT);
        ok = self_test(MODE_HANDOFF) && ok;
        printf("self-test: %s\n", ok ? "every connection echoed, every loop "
                                       "served, loops stopped cleanly"
                                     : "FAILED");
        return ok ? 0 : 1;
    }
    app *a = &the_app;
    int port = argc > 1 ? port_arg(argv[1]) : 7001;
    const char *mode = argc > 2 ? argv[2] : "reuseport";
    /* --help is asked for: the usage on stdout, exit 0; a mistake: stderr, 2.
     */
    bool help = argc == 2 && strcmp(argv[1], "--help") == 0;
    if (help || port < 0 || argc > 3 ||
        (strcmp(mode, "handoff") != 0 && strcmp(mode, "reuseport") != 0)) {
        fprintf(help ? stdout : stderr,
                "usage: reuseport [PORT (1-65535) [reuseport|handoff]] "
                "| --self-test\n");
        return help ? 0 : 2;
    }
    a->port = (uint16_t)port;
    a->mode = strcmp(mode, "handoff") == 0 ? MODE_HANDOFF : MODE_REUSEPORT;
    a->loops = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (a->loops > MAX_LOOPS) a->loops = MAX_LOOPS;
    int rc = serve(a);
    if (rc < 0) {
        fprintf(stderr, "reuseport: %s\n", strerror(-rc));
        return 1;
    }
    printf("reuseport: 127.0.0.1:%u, %d loops, %s; Ctrl-C stops\n", a->port,
           a->loops, a->mode == MODE_HANDOFF ? "handoff" : "SO_REUSEPORT");
    fflush(stdout);
    int sig;
    sigwait(&stop_signals, &sig);
    rc = lull_percore_stop(a->pc);
    for (int i = 0; i < a->loops; i++)
        printf("loop %d: %llu connections, %llu bytes\n", i,
               (unsigned long long)a->servers[i].served,
               (unsigned long long)a->servers[i].bytes);
    return rc == 0 ? 0 : 1;
}
