/* lull-floor-epoll: the epoll floor of `lull-lab serve` (lab/floor/floor.h).
 *
 * The same system calls lull makes for lull-kv, and nothing else: a
 * level-triggered epoll set of EPOLLIN | EPOLLRDHUP per connection, 256
 * events per epoll_wait (lull's EVENTS_CAP), one recv of up to 64 KiB per
 * readable connection, its commands answered and their replies written by
 * one send (MSG_NOSIGNAL); a short send waits for EPOLLOUT. New
 * connections: accept4 until EAGAIN, at most 64 at a time (lull's
 * ACCEPT_BATCH), TCP_NODELAY on each. Every call goes through SYS(), which
 * counts it.
 *
 *   lull-floor-epoll [--port N] [--value V]
 *
 * One thread. */
#define _GNU_SOURCE
#include "floor.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* A system call, counted. */
#define SYS(call) (floor_n.syscalls++, (call))

#define EVENTS_CAP   256 /* lull's (src/backend_epoll.c) */
#define ACCEPT_BATCH 64  /* lull's (src/stream.c) */

typedef struct conn {
    int fd;
    bool want_out; /* a send came up short: EPOLLOUT is watched */
    floor_buf in;  /* an incomplete command, kept for the next read */
    floor_buf out; /* replies not yet written */
} conn;

static int ep;
static conn **conns; /* by fd */
static size_t nconns;
static char rbuf[FLOOR_READ_SIZE];

static void conn_close(conn *c) {
    SYS(close(c->fd)); /* leaves the epoll set with its last reference */
    conns[c->fd] = NULL;
    floor_buf_free(&c->in);
    floor_buf_free(&c->out);
    free(c);
}

static int watch(conn *c, int op, bool out) {
    struct epoll_event ev = {.events =
                                 EPOLLIN | EPOLLRDHUP | (out ? EPOLLOUT : 0u),
                             .data.fd = c->fd};
    return SYS(epoll_ctl(ep, op, c->fd, &ev));
}

/* Writes what the socket takes of c->out. False when c was closed. */
static bool flush(conn *c) {
    ssize_t w = SYS(send(c->fd, c->out.p, c->out.len, MSG_NOSIGNAL));
    floor_n.writes++;
    if (w < 0) {
        if (errno != EAGAIN && errno != EINTR) {
            conn_close(c);
            return false;
        }
        w = 0;
    }
    floor_buf_consume(&c->out, (size_t)w);
    bool more = c->out.len > 0;
    if (more != c->want_out) {
        c->want_out = more;
        watch(c, EPOLL_CTL_MOD, more);
    }
    return true;
}

/* One recv, its commands answered, their replies sent. */
static void readable(conn *c) {
    ssize_t r = SYS(recv(c->fd, rbuf, sizeof rbuf, 0));
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (r <= 0) {
        conn_close(c);
        return;
    }
    floor_n.reads++;
    const char *p = rbuf;
    size_t len = (size_t)r;
    if (c->in.len) { /* the rest of a command cut by the last read */
        if (!floor_buf_put(&c->in, rbuf, len)) {
            conn_close(c);
            return;
        }
        p = c->in.p;
        len = c->in.len;
    }
    long used = floor_answer(p, len, &c->out);
    bool failed = used < 0;
    if (!failed && p == c->in.p) {
        floor_buf_consume(&c->in, (size_t)used);
    } else if (!failed && (size_t)used < len) {
        failed = !floor_buf_put(&c->in, p + used, len - (size_t)used);
    }
    if (c->out.len && !c->want_out && !flush(c)) return;
    if (failed) conn_close(c); /* a protocol error: its reply went first */
}

static void accept_some(int lfd) {
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        int fd = SYS(accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (fd < 0) return; /* EAGAIN, or out of fds: level-triggered */
        int one = 1;
        SYS(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
        if ((size_t)fd >= nconns) {
            size_t n = nconns ? nconns : 1024;
            while (n <= (size_t)fd)
                n *= 2;
            conn **grown = realloc(conns, n * sizeof *conns);
            if (!grown) {
                SYS(close(fd));
                continue;
            }
            memset(grown + nconns, 0, (n - nconns) * sizeof *grown);
            conns = grown;
            nconns = n;
        }
        conn *c = calloc(1, sizeof *c);
        if (!c) {
            SYS(close(fd));
            continue;
        }
        c->fd = fd;
        conns[fd] = c;
        if (watch(c, EPOLL_CTL_ADD, false) != 0) conn_close(c);
    }
}

int main(int argc, char **argv) {
    int lfd = floor_start(argc, argv, "lull-floor-epoll", "epoll");
    ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event lev = {.events = EPOLLIN, .data.fd = lfd};
    struct epoll_event sev = {.events = EPOLLIN, .data.fd = floor_sigfd};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev) != 0 ||
        epoll_ctl(ep, EPOLL_CTL_ADD, floor_sigfd, &sev) != 0) {
        perror("lull-floor-epoll: epoll");
        return 1;
    }
    static struct epoll_event ev[EVENTS_CAP];
    for (;;) {
        int n = SYS(epoll_wait(ep, ev, EVENTS_CAP, -1));
        floor_n.waits++;
        if (n < 0 && errno != EINTR) {
            perror("lull-floor-epoll: epoll_wait");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            int fd = ev[i].data.fd;
            if (fd == lfd) {
                accept_some(lfd);
                continue;
            }
            if (fd == floor_sigfd) {
                floor_on_signal();
                continue;
            }
            conn *c = conns[fd];
            if (!c) continue; /* closed earlier in this batch */
            if ((ev[i].events & EPOLLOUT) && c->want_out && !flush(c)) continue;
            if (ev[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                readable(c);
        }
    }
}
