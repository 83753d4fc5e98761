/* lull-floor-uring: the io_uring floor of `lull-lab serve`
 * (lab/floor/floor.h), built where liburing is installed.
 *
 * The design an io_uring backend for lull would have: one ring per
 * thread, set up with IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN where the
 * kernel has them (6.1: completions are run only when the thread waits,
 * never by interrupting it), else COOP_TASKRUN, else plain; multishot
 * accept; a multishot receive per connection into a ring of provided
 * buffers (1024 of 16 KiB); per received chunk, its commands answered and
 * their replies sent by one send (MSG_WAITALL: it completes once all of
 * it is written), every send of an iteration submitted by the one
 * io_uring_enter that then waits. That enter waits for the sends'
 * completions plus one more (min_complete), so a send that completes at
 * once does not end the wait on its own: one enter per iteration, the
 * only system call on the request path. Each send completes without us
 * (the client reads its replies), and the one more is a client's next
 * request. A connection's replies that come while its send is in flight
 * wait for that send; then the enter waits for one completion only, which
 * may be the one that frees them.
 *
 *   lull-floor-uring [--port N] [--value V]
 *
 * One thread. */
#define _GNU_SOURCE
#include "floor.h"

#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A system call, counted. */
#define SYS(call) (floor_n.syscalls++, (call))

#define ENTRIES  4096 /* submission queue; completions: twice as many */
#define BUFS     1024 /* provided buffers: a power of two */
#define BUF_SIZE ((size_t)16 << 10)
#define BGID     0 /* the buffer group */

/* user_data: a connection's address (or 0: the listener, floor_sigfd)
 * with the operation in its low bits (a conn is at least 8-byte
 * aligned). */
enum { OP_ACCEPT, OP_RECV, OP_SEND, OP_SIGNAL };

typedef struct conn {
    int fd;
    bool closing;  /* EOF, an error, or a protocol error: no more input;
                      closed and freed once nothing is in flight */
    bool recv_on;  /* the multishot receive is armed */
    bool sending;  /* tx is in flight */
    bool held;     /* out waits for tx (counted in `waiting`) */
    floor_buf in;  /* an incomplete command, kept for the next chunk */
    floor_buf out; /* replies gathered while tx is in flight */
    floor_buf tx;  /* replies in flight (bytes [0, tx.len)) */
} conn;

static struct io_uring ring;
static struct io_uring_buf_ring *br;
static char *bufs;
static int nsends;  /* sends queued in this iteration */
static int waiting; /* connections whose `out` waits for their send */

static struct io_uring_sqe *sqe_get(void) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    if (!sqe) { /* full: submit what is queued, without waiting */
        SYS(io_uring_submit(&ring));
        floor_n.waits++;
        sqe = io_uring_get_sqe(&ring);
    }
    return sqe;
}

static void arm_accept(int lfd) {
    struct io_uring_sqe *sqe = sqe_get();
    io_uring_prep_multishot_accept(sqe, lfd, NULL, NULL, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(sqe, OP_ACCEPT);
}

static void arm_signal(void) {
    struct io_uring_sqe *sqe = sqe_get();
    io_uring_prep_poll_multishot(sqe, floor_sigfd, POLLIN);
    io_uring_sqe_set_data64(sqe, OP_SIGNAL);
}

static void arm_recv(conn *c) {
    struct io_uring_sqe *sqe = sqe_get();
    io_uring_prep_recv_multishot(sqe, c->fd, NULL, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = BGID;
    io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | OP_RECV);
    c->recv_on = true;
}

static void send_tx(conn *c) {
    struct io_uring_sqe *sqe = sqe_get();
    io_uring_prep_send(sqe, c->fd, c->tx.p, c->tx.len,
                       MSG_NOSIGNAL | MSG_WAITALL);
    io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | OP_SEND);
    c->sending = true;
    nsends++;
    floor_n.writes++;
}

/* Sends what c gathered, unless a send is in flight (it follows that
 * one). */
static void flush(conn *c) {
    if (c->out.len == 0) return;
    if (c->sending) {
        if (!c->held) waiting++;
        c->held = true;
        return;
    }
    floor_buf t = c->tx;
    c->tx = c->out;
    c->out = t;
    c->out.len = 0;
    send_tx(c);
}

/* Frees c once nothing of it is in flight: the kernel holds its buffers
 * until then (and the socket: a close does not end an armed receive). */
static void conn_release(conn *c) {
    if (c->recv_on || c->sending) return;
    SYS(close(c->fd));
    if (c->held) waiting--;
    floor_buf_free(&c->in);
    floor_buf_free(&c->out);
    floor_buf_free(&c->tx);
    free(c);
}

/* No more input: a receive still armed ends (shutdown makes it complete
 * with 0); replies in flight still go out. */
static void conn_end(conn *c) {
    if (!c->closing && c->recv_on) SYS(shutdown(c->fd, SHUT_RD));
    c->closing = true;
    conn_release(c);
}

static void give_back(int bid) {
    io_uring_buf_ring_add(br, bufs + (size_t)bid * BUF_SIZE, BUF_SIZE,
                          (unsigned short)bid, io_uring_buf_ring_mask(BUFS), 0);
    io_uring_buf_ring_advance(br, 1);
}

/* A chunk received: its commands answered, their replies sent. */
static void received(conn *c, const char *data, size_t len) {
    floor_n.reads++;
    const char *p = data;
    if (c->in.len) {
        if (!floor_buf_put(&c->in, data, len)) {
            conn_end(c);
            return;
        }
        p = c->in.p;
        len = c->in.len;
    }
    long used = floor_answer(p, len, &c->out);
    bool failed = used < 0;
    if (!failed && p == c->in.p)
        floor_buf_consume(&c->in, (size_t)used);
    else if (!failed && (size_t)used < len)
        failed = !floor_buf_put(&c->in, p + used, len - (size_t)used);
    flush(c);
    if (failed) conn_end(c); /* a protocol error: its reply goes first */
}

static void on_recv(conn *c, struct io_uring_cqe *cqe) {
    bool more = cqe->flags & IORING_CQE_F_MORE;
    if (cqe->flags & IORING_CQE_F_BUFFER) {
        int bid = (int)(cqe->flags >> IORING_CQE_BUFFER_SHIFT);
        if (cqe->res > 0 && !c->closing)
            received(c, bufs + (size_t)bid * BUF_SIZE, (size_t)cqe->res);
        give_back(bid);
    }
    if (more) return;
    c->recv_on = false;
    if (!c->closing && (cqe->res > 0 || cqe->res == -ENOBUFS)) {
        arm_recv(c); /* ended by the kernel (out of buffers): again */
        return;
    }
    conn_end(c); /* EOF, an error, or the end conn_end asked for */
}

static void on_send(conn *c, struct io_uring_cqe *cqe) {
    c->sending = false;
    if (cqe->res < 0) {
        conn_end(c);
        return;
    }
    floor_buf_consume(&c->tx, (size_t)cqe->res);
    if (c->tx.len) { /* short (MSG_WAITALL makes it rare): the rest */
        send_tx(c);
        return;
    }
    if (c->held) {
        c->held = false;
        waiting--;
        flush(c);
    }
    if (c->closing) conn_release(c);
}

static void on_accept(int lfd, struct io_uring_cqe *cqe) {
    if (!(cqe->flags & IORING_CQE_F_MORE)) arm_accept(lfd);
    if (cqe->res < 0) return;
    int fd = cqe->res, one = 1;
    SYS(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
    conn *c = calloc(1, sizeof *c);
    if (!c) {
        SYS(close(fd));
        return;
    }
    c->fd = fd;
    arm_recv(c);
}

/* The ring with the lightest completion mode the kernel takes. */
static const char *setup(void) {
    static const struct {
        unsigned flags;
        const char *name;
    } modes[] = {
        {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
         "io_uring, single issuer, defer taskrun"},
        {IORING_SETUP_COOP_TASKRUN, "io_uring, coop taskrun"},
        {0, "io_uring"},
    };
    int rc = -EINVAL;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        struct io_uring_params p = {.flags = modes[i].flags};
        rc = io_uring_queue_init_params(ENTRIES, &ring, &p);
        if (rc == 0) return modes[i].name;
    }
    fprintf(stderr, "lull-floor-uring: io_uring_setup: %s\n", strerror(-rc));
    exit(1);
}

static void setup_buffers(void) {
    void *mem = NULL;
    bufs = malloc(BUFS * BUF_SIZE);
    if (!bufs || posix_memalign(&mem, 4096, BUFS * sizeof(struct io_uring_buf)))
        goto fail;
    br = mem;
    struct io_uring_buf_reg reg = {
        .ring_addr = (unsigned long)br, .ring_entries = BUFS, .bgid = BGID};
    int rc = io_uring_register_buf_ring(&ring, &reg, 0);
    if (rc < 0) {
        fprintf(stderr, "lull-floor-uring: provided buffers: %s\n",
                strerror(-rc));
        exit(1);
    }
    io_uring_buf_ring_init(br);
    for (int i = 0; i < BUFS; i++)
        io_uring_buf_ring_add(br, bufs + (size_t)i * BUF_SIZE, BUF_SIZE,
                              (unsigned short)i, io_uring_buf_ring_mask(BUFS),
                              i);
    io_uring_buf_ring_advance(br, BUFS);
    return;
fail:
    fprintf(stderr, "lull-floor-uring: out of memory\n");
    exit(1);
}

int main(int argc, char **argv) {
    /* The ring first: its mode is on the "listening" line. */
    const char *mode = setup();
    int lfd = floor_start(argc, argv, "lull-floor-uring", mode);
    setup_buffers();
    arm_accept(lfd);
    arm_signal();
    for (;;) {
        /* The sends just queued complete, most of them during the
         * submit; wait for one completion more, unless replies wait for
         * a send (then that send's completion must end the wait). */
        unsigned want = waiting ? 1u : (unsigned)nsends + 1u;
        nsends = 0;
        int rc = SYS(io_uring_submit_and_wait(&ring, want));
        floor_n.waits++;
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            fprintf(stderr, "lull-floor-uring: io_uring_enter: %s\n",
                    strerror(-rc));
            return 1;
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            uint64_t data = io_uring_cqe_get_data64(cqe);
            conn *c = (conn *)(uintptr_t)(data & ~(uint64_t)7);
            switch (data & 7) {
            case OP_ACCEPT:
                on_accept(lfd, cqe);
                break;
            case OP_RECV:
                on_recv(c, cqe);
                break;
            case OP_SEND:
                on_send(c, cqe);
                break;
            case OP_SIGNAL:
                if (!(cqe->flags & IORING_CQE_F_MORE)) arm_signal();
                floor_on_signal();
                break;
            }
            seen++;
        }
        io_uring_cq_advance(&ring, seen);
    }
}
