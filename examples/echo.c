/* echo: a TCP echo server with an idle timeout per connection and a stats
 * timer.
 *
 * Each connection is one malloc'd struct holding its fd watcher, its idle
 * timer and a buffer; the callbacks get back to it with LULL_CONTAINER_OF
 * (a timer has no data pointer; the watcher's is left unused). Every read
 * restarts the idle timer: lull_timer_start on an armed timer re-arms it
 * (libev's ev_timer_again), so a connection is closed after IDLE with
 * nothing received. A reply the
 * socket cannot take at once is kept, and the connection stops reading and
 * waits until the socket is writable: the server buffers one read per
 * connection, never more. The stats timer is unreferenced: it reports while
 * the server runs but does not keep lull_loop_run going by itself.
 *
 *   echo [PORT]       serve on 127.0.0.1:PORT (default 7000) until killed;
 *                     try `nc 127.0.0.1 7000`
 *   echo --self-test  serve on a free port and drive it from a client
 *                     thread: one connection echoes 256 KiB and hangs up,
 *                     one says hello and then goes quiet until the server
 *                     times it out. Exits 0 when every byte came back and
 *                     both connections ended the way they should.
 *
 * Build:
 *   cc -O2 -pthread -o echo echo.c $(pkg-config --cflags --libs lull)
 * or with CMake (find_package(lull)), all examples at once:
 *   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=<lull prefix>
 *   cmake --build build-examples */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <lull.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MS 1000000ull

typedef struct server {
    lull_loop *loop;
    lull_io listen_io; /* the listening socket */
    lull_timer stats;  /* every stats_ns, unreferenced */
    lull_timer retry;  /* resumes accepting after running out of fds */
    lull_task stop;    /* posted by the self-test client when it is done */
    uint64_t idle_ns;  /* a connection quiet this long is closed */
    uint64_t accepted, open, closed_by_peer, closed_idle, bytes;
} server;

typedef struct conn {
    server *srv;
    lull_io io;      /* the connection's socket */
    lull_timer idle; /* restarted by every read */
    size_t off, len; /* buf[off, len) is a reply not yet written */
    char buf[16384];
} conn;

static int set_nonblocking(int fd) {
    int flags = fcntl(fd, F_GETFL);
    return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

/* Stopping both handles is all lull needs: nothing is queued behind them,
 * so the struct can go at once (no close callback, unlike uv_close). */
static void conn_close(conn *c) {
    lull_io_stop(&c->io);
    lull_timer_stop(&c->idle);
    close(c->io.fd);
    c->srv->open--;
    free(c);
}

/* Writes what is pending; true when all of it left. */
static bool conn_flush(conn *c) {
    while (c->off < c->len) {
        /* send, not write: a peer that hung up must cost an EPIPE, not a
         * SIGPIPE that kills the server. */
        ssize_t n =
            send(c->io.fd, c->buf + c->off, c->len - c->off, MSG_NOSIGNAL);
        if (n < 0)
            return false; /* EAGAIN: wait for writable; else the
                             next read reports the error */
        c->off += (size_t)n;
        c->srv->bytes += (uint64_t)n;
    }
    return true;
}

/* Watches for exactly `events` (a watcher is stopped and started again to
 * change what it waits for). */
static void conn_watch(conn *c, int events) {
    lull_io_stop(&c->io);
    lull_io_start(&c->io, events);
}

static void on_conn(lull_io *io, int events) {
    conn *c = LULL_CONTAINER_OF(io, conn, io);
    if (c->off < c->len) { /* waiting to write, not reading */
        if (!conn_flush(c) && !(events & (LULL_HANGUP | LULL_ERROR))) return;
        conn_watch(c, LULL_READABLE);
    }
    /* One read per callback: the watcher is level-triggered, so whatever
     * is left is reported again next iteration, after other connections
     * had their turn. */
    ssize_t n = read(io->fd, c->buf, sizeof c->buf);
    if (n > 0) {
        lull_timer_start(&c->idle, c->srv->idle_ns, 0); /* re-arm */
        c->off = 0;
        c->len = (size_t)n;
        if (!conn_flush(c)) conn_watch(c, LULL_WRITABLE);
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        c->srv->closed_by_peer++;
        conn_close(c);
    }
}

static void on_idle(lull_timer *t) {
    conn *c = LULL_CONTAINER_OF(t, conn, idle);
    c->srv->closed_idle++;
    conn_close(c);
}

static void on_accept(lull_io *io, int events) {
    server *s = LULL_CONTAINER_OF(io, server, listen_io);
    (void)events;
    int fd;
    while ((fd = accept(io->fd, NULL, NULL)) >= 0) {
        conn *c = malloc(sizeof *c);
        if (!c || set_nonblocking(fd) < 0 ||
            lull_io_init(s->loop, &c->io, fd, on_conn) < 0 ||
            lull_io_start(&c->io, LULL_READABLE) < 0) {
            free(c);
            close(fd);
            continue;
        }
        c->srv = s;
        c->off = c->len = 0;
        lull_timer_init(s->loop, &c->idle, on_idle);
        lull_timer_start(&c->idle, s->idle_ns, 0);
        s->accepted++;
        s->open++;
    }
    /* Out of fds (or memory): the connection stays in the backlog, so the
     * socket stays readable and watching it would spin. Pause accepting
     * for 100 ms, as lull's own listener does; closes free fds meanwhile. */
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
        errno == ENOMEM) {
        lull_io_stop(io);
        lull_timer_start(&s->retry, 100 * MS, 0);
    }
}

static void on_retry(lull_timer *t) {
    server *s = LULL_CONTAINER_OF(t, server, retry);
    lull_io_start(&s->listen_io, LULL_READABLE);
}

static void on_stats(lull_timer *t) {
    server *s = LULL_CONTAINER_OF(t, server, stats);
    lull_metrics m;
    lull_loop_metrics(s->loop, &m);
    printf("stats: %llu open, %llu accepted, %llu bytes echoed, "
           "%llu wakeups\n",
           (unsigned long long)s->open, (unsigned long long)s->accepted,
           (unsigned long long)s->bytes, (unsigned long long)m.wakeups);
    fflush(stdout);
}

/* Stops accepting; the open connections end on their own (peer or idle),
 * and then nothing referenced is left: lull_loop_run returns. */
static void on_stop(lull_task *t) {
    server *s = LULL_CONTAINER_OF(t, server, stop);
    lull_io_stop(&s->listen_io);
    lull_timer_stop(&s->retry);
    close(s->listen_io.fd);
}

static int listen_on(uint16_t port, uint16_t *bound) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 64) < 0 ||
        set_nonblocking(fd) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        close(fd);
        return -1;
    }
    *bound = ntohs(a.sin_port);
    return fd;
}

/* ------------------------------------------------ the self-test client */

typedef struct client {
    server *srv;
    uint16_t port;
    bool ok;
} client;

static int dial(uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
    if (fd >= 0) close(fd);
    return -1;
}

/* Sends n bytes of a pattern and reads them back, both at once (poll), so
 * neither side's socket buffer has to hold the whole exchange. */
static bool exchange(int fd, size_t n) {
    static char out[4096], in[4096];
    size_t sent = 0, got = 0;
    while (got < n) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (sent < n) p.events |= POLLOUT;
        if (poll(&p, 1, 5000) <= 0) return false;
        if (p.revents & POLLOUT) {
            size_t k = n - sent < sizeof out ? n - sent : sizeof out;
            for (size_t i = 0; i < k; i++)
                out[i] = (char)((sent + i) % 251);
            ssize_t w = send(fd, out, k, MSG_NOSIGNAL);
            if (w < 0) return false;
            sent += (size_t)w;
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t r = read(fd, in, sizeof in);
            if (r <= 0) return false;
            for (ssize_t i = 0; i < r; i++)
                if (in[i] != (char)((got + (size_t)i) % 251)) return false;
            got += (size_t)r;
        }
    }
    return true;
}

static void *client_main(void *arg) {
    client *cl = arg;
    int quiet = dial(cl->port), busy = dial(cl->port);
    char c;
    cl->ok = quiet >= 0 && busy >= 0 && exchange(quiet, 6) &&
             exchange(busy, 256 * 1024);
    if (busy >= 0) close(busy); /* the server sees the hang-up */
    /* Say nothing more: the server must close this one after its idle
     * timeout, which reads as end of file here. */
    if (quiet >= 0) {
        cl->ok = cl->ok && read(quiet, &c, 1) == 0;
        close(quiet);
    }
    /* The only call another thread may make on the loop: a remote post. */
    lull_task_post_remote(cl->srv->loop, &cl->srv->stop);
    return NULL;
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
    int arg = self_test ? 0 : argc > 1 ? port_arg(argv[1]) : 7000;
    /* --help is asked for: the usage on stdout, exit 0; a mistake: stderr, 2.
     */
    bool help = argc == 2 && strcmp(argv[1], "--help") == 0;
    if (help || arg < 0 || argc > 2) {
        fprintf(help ? stdout : stderr,
                "usage: echo [PORT (1-65535)] | --self-test\n");
        return help ? 0 : 2;
    }
    uint16_t port = (uint16_t)arg;
    /* The self-test's idle timeout must outlast any stall of its client
     * thread on a loaded machine (a 250 ms one was seen to expire in the
     * middle of the busy exchange), yet keep the test short. */
    server s = {.idle_ns = self_test ? 1000 * MS : 10000 * MS};
    uint64_t stats_ns = self_test ? 50 * MS : 1000 * MS;
    int fd = listen_on(port, &port);
    if (fd < 0) {
        perror("echo");
        return 1;
    }
    int rc = lull_loop_new(&s.loop, NULL);
    if (rc < 0) {
        fprintf(stderr, "echo: %s\n", lull_strerror(rc));
        close(fd);
        return 1;
    }
    lull_io_init(s.loop, &s.listen_io, fd, on_accept);
    lull_io_start(&s.listen_io, LULL_READABLE);
    lull_timer_init(s.loop, &s.stats, on_stats);
    lull_timer_start(&s.stats, stats_ns, stats_ns);
    lull_timer_unref(&s.stats);
    lull_timer_init(s.loop, &s.retry, on_retry);
    lull_task_init(&s.stop, on_stop);
    LULL_NAME(s.loop, on_idle, "echo: idle timeout");
    LULL_NAME(s.loop, on_stats, "echo: stats");
    printf("echo: listening on 127.0.0.1:%u\n", port);
    fflush(stdout);

    client cl = {.srv = &s, .port = port};
    pthread_t th;
    bool client_started =
        !self_test || pthread_create(&th, NULL, client_main, &cl) == 0;
    if (!client_started) on_stop(&s.stop); /* nothing to serve */
    rc = lull_loop_run(s.loop, LULL_RUN_DEFAULT);
    if (self_test && client_started) pthread_join(th, NULL);

    printf("echo: %llu connections, %llu bytes echoed, %llu closed by peer, "
           "%llu closed idle\n",
           (unsigned long long)s.accepted, (unsigned long long)s.bytes,
           (unsigned long long)s.closed_by_peer,
           (unsigned long long)s.closed_idle);
    lull_timer_stop(&s.stats); /* unreferenced, but still armed */
    if (lull_loop_free(s.loop) != 0 || rc != 0) return 1;
    if (self_test && !(cl.ok && s.closed_by_peer == 1 && s.closed_idle == 1))
        return 1;
    return 0;
}
