/* UDP handles (src/udp.c), on 127.0.0.1 and ::1 and on Unix datagram
 * socketpairs (lull_udp_open), where a full receiver makes the sender
 * wait: echo, every datagram checked, in order; the sends of one slice in
 * one sendmmsg (counted by the handle, not timed); a flood read a bounded
 * number of batches per iteration (a task posted by the first datagram runs
 * before the rest); exactly a full batch, then more, none lost; truncation
 * reported; ICMP's refusal on a connected socket reported; each datagram's
 * own sender when a slot is reused; GSO and GRO giving the same datagrams
 * as plain sends; the send bound; a full device queue failing datagrams
 * rather than spinning; close and recv_stop inside every
 * callback; hostile arguments. */
#include "check.h"
#include "stdio_gone.h"

#include "polls.h"
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <lull.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static lull_loop *new_loop(void) {
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    check_trace_reset();
    return loop;
}

static struct sockaddr_in v4(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

/* A receiver that records what it got. */
typedef struct rx {
    lull_udp udp;
    int count;
    int errors;
    int last_error;
    unsigned char seen[256]; /* first byte of each datagram, in order */
    size_t lens[256];
    unsigned flags[256];
    int close_at; /* close the handle at this datagram (1-based), or 0 */
    int stop_at;  /* recv_stop at this datagram, or 0 */
    int closes;   /* close callbacks */
    lull_task *post_at_first; /* posted at the first datagram */
    int family[256];
} rx;

static void rx_recv(lull_udp *udp, int status, const void *bytes, size_t len,
                    const struct sockaddr *from, unsigned flags) {
    rx *r = udp->data;
    if (status < 0) {
        r->errors++;
        r->last_error = status;
        CHECK(bytes == NULL);
        return;
    }
    CHECK(from != NULL);
    if (r->count < 256) {
        r->seen[r->count] = len ? ((const unsigned char *)bytes)[0] : 0;
        r->lens[r->count] = len;
        r->flags[r->count] = flags;
        r->family[r->count] = from->sa_family;
    }
    r->count++;
    if (r->count == 1 && r->post_at_first)
        lull_task_post(udp->loop, r->post_at_first);
    if (r->count == r->close_at) lull_udp_close(udp, NULL);
    if (r->count == r->stop_at) lull_udp_recv_stop(udp);
}

static void rx_closed(lull_udp *udp) {
    rx *r = udp->data;
    r->closes++;
}

static void rx_bind(lull_loop *loop, rx *r, const lull_udp_options *o) {
    memset(r, 0, sizeof *r);
    r->udp.data = r;
    CHECK_EQ(lull_udp_init(loop, &r->udp, o), 0);
    CHECK_EQ(r->udp.data, r); /* init keeps the owner's pointer */
    CHECK_EQ(lull_udp_bind(&r->udp, "127.0.0.1", 0, 0), 0);
    CHECK(lull_udp_local_port(&r->udp) > 0);
    CHECK_EQ(lull_udp_recv_start(&r->udp, rx_recv), 0);
}

static void rx_close(rx *r) {
    CHECK_EQ(lull_udp_close(&r->udp, rx_closed), 0);
}

/* A Unix datagram socketpair: sender tx on sv[0] (options so), receiver r
 * opened on sv[1], not yet receiving. */
static void open_unix_pair(lull_loop *loop, int sv[2], lull_udp *tx,
                           const lull_udp_options *so, rx *r) {
    CHECK_EQ(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv), 0);
    memset(r, 0, sizeof *r);
    r->udp.data = r;
    CHECK_EQ(lull_udp_init(loop, tx, so), 0);
    CHECK_EQ(lull_udp_open(tx, sv[0]), 0);
    CHECK_EQ(lull_udp_init(loop, &r->udp, NULL), 0);
    CHECK_EQ(lull_udp_open(&r->udp, sv[1]), 0);
}

/* Closes sender tx and receiver r, runs the loop out and frees it. */
static void close_tx_rx_and_loop(lull_loop *loop, lull_udp *tx, rx *r) {
    lull_udp_close(tx, NULL);
    rx_close(r);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Sends, results recorded. */
static int send_status[512];
static int sends_done;

static void on_sent(lull_datagram *d, int status) {
    int i = (int)(intptr_t)d->data;
    send_status[i] = status;
    sends_done++;
    check_trace(i);
}

static unsigned char payload[512][8];
static lull_datagram dgrams[512];

static int send_n(lull_udp *u, int n, const struct sockaddr *to) {
    sends_done = 0;
    for (int i = 0; i < n; i++) {
        memset(payload[i], i & 0xff, sizeof payload[i]);
        dgrams[i].data = (void *)(intptr_t)i;
        send_status[i] = 1;
        int rc = lull_udp_send(u, &dgrams[i], payload[i], sizeof payload[i], to,
                               on_sent);
        if (rc < 0) return rc;
    }
    return 0;
}

static void run_until(lull_loop *loop, const int *counter, int want) {
    for (int i = 0; i < 10000 && *counter < want; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(*counter, want);
}

TEST(sends_of_one_slice_leave_in_one_sendmmsg) {
    lull_loop *loop = new_loop();
    rx r;
    rx_bind(loop, &r, NULL);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    CHECK_EQ(send_n(&tx, 50, (struct sockaddr *)&to), 0);
    CHECK_EQ(sends_done, 0); /* no callback inside the sends */
    CHECK_U64_EQ(tx.send_calls, 0);
    CHECK_EQ(tx.queued, 50 * 8);
    run_until(loop, &r.count, 50);
    CHECK_U64_EQ(tx.send_calls, 1);
    CHECK_U64_EQ(tx.sent, 50);
    CHECK_EQ(tx.queued, 0);
    CHECK_EQ(sends_done, 50);
    for (int i = 0; i < 50; i++) {
        CHECK_EQ(send_status[i], 0);
        CHECK_EQ(r.seen[i], i);
        CHECK_EQ(r.lens[i], 8);
        CHECK_EQ(r.flags[i], 0);
        CHECK_EQ(r.family[i], AF_INET);
    }
    CHECK_U64_EQ(r.udp.received, 50);
    CHECK(r.udp.recv_calls <= 4); /* batches of 16 */
    lull_udp_close(&tx, NULL);
    rx_close(&r);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(r.closes, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* getsockname calls made by this process: the executable's definition
 * comes first for lull's calls too (linked statically), and forwards to
 * the C library's. */
static int getsockname_calls;

int getsockname(int fd, struct sockaddr *restrict addr,
                socklen_t *restrict len) {
    static int (*next)(int, struct sockaddr *, socklen_t *);
    if (!next)
        next = (int (*)(int, struct sockaddr *, socklen_t *))dlsym(
            RTLD_NEXT, "getsockname");
    getsockname_calls++;
    return next(fd, addr, len);
}

/* A send checks its destination against the socket's family, which lull
 * reads once, when it takes the socket: a datagram costs no system call
 * of its own beyond its share of the batch. */
TEST(sends_to_an_address_make_no_system_call) {
    lull_loop *loop = new_loop();
    rx r;
    rx_bind(loop, &r, NULL);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    CHECK_EQ(lull_udp_bind(&tx, "127.0.0.1", 0, 0), 0);
    int before = getsockname_calls;
    CHECK_EQ(send_n(&tx, 50, (struct sockaddr *)&to), 0);
    CHECK_EQ(getsockname_calls, before);
    run_until(loop, &r.count, 50);
    CHECK_U64_EQ(tx.send_calls, 1);
    close_tx_rx_and_loop(loop, &tx, &r);
}

/* A server that echoes, and a client: the classic round trip. */
static lull_datagram echo_reply;
static unsigned char echo_buf[64];

static void echo_recv(lull_udp *udp, int status, const void *bytes, size_t len,
                      const struct sockaddr *from, unsigned flags) {
    CHECK_EQ(status, 0);
    CHECK_EQ(flags, 0);
    CHECK(len <= sizeof echo_buf);
    memcpy(echo_buf, bytes, len);
    CHECK_EQ(lull_udp_send(udp, &echo_reply, echo_buf, len, from, NULL), 0);
}

TEST(echo_round_trips_ipv4) {
    lull_loop *loop = new_loop();
    lull_udp srv;
    CHECK_EQ(lull_udp_init(loop, &srv, NULL), 0);
    CHECK_EQ(lull_udp_bind(&srv, NULL, 0, LULL_UDP_REUSEADDR), 0);
    CHECK_EQ(lull_udp_recv_start(&srv, echo_recv), 0);
    rx r;
    memset(&r, 0, sizeof r);
    r.udp.data = &r;
    CHECK_EQ(lull_udp_init(loop, &r.udp, NULL), 0);
    CHECK_EQ(lull_udp_connect(&r.udp, "127.0.0.1", lull_udp_local_port(&srv)),
             0);
    CHECK_EQ(lull_udp_recv_start(&r.udp, rx_recv), 0);
    for (int i = 0; i < 20; i++) {
        static unsigned char b[5];
        static lull_datagram d;
        memset(b, 'a' + i, sizeof b);
        CHECK_EQ(lull_udp_send(&r.udp, &d, b, sizeof b, NULL, NULL), 0);
        run_until(loop, &r.count, i + 1);
        CHECK_EQ(r.seen[i], 'a' + i);
        CHECK_EQ(r.lens[i], 5);
    }
    lull_udp_close(&srv, NULL);
    lull_udp_close(&r.udp, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(dual_stack_socket_takes_ipv4) {
    int probe = socket(AF_INET6, SOCK_DGRAM, 0);
    if (probe < 0) {
        printf("skipped: no IPv6 here (%s)\n", strerror(errno));
        return;
    }
    close(probe);
    lull_loop *loop = new_loop();
    rx r;
    memset(&r, 0, sizeof r);
    r.udp.data = &r;
    CHECK_EQ(lull_udp_init(loop, &r.udp, NULL), 0);
    int rc = lull_udp_bind(&r.udp, "::", 0, 0);
    if (rc == -EADDRNOTAVAIL) {
        printf("skipped: no IPv6 address to bind here\n");
        lull_udp_close(&r.udp, NULL);
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
        CHECK_EQ(lull_loop_free(loop), 0);
        return;
    }
    CHECK_EQ(rc, 0);
    CHECK_EQ(lull_udp_recv_start(&r.udp, rx_recv), 0);
    int port = lull_udp_local_port(&r.udp);
    lull_udp tx4, tx6;
    CHECK_EQ(lull_udp_init(loop, &tx4, NULL), 0);
    CHECK_EQ(lull_udp_init(loop, &tx6, NULL), 0);
    struct sockaddr_in to4 = v4(port);
    struct sockaddr_in6 to6 = {.sin6_family = AF_INET6,
                               .sin6_port = htons((uint16_t)port)};
    to6.sin6_addr = in6addr_loopback;
    static lull_datagram d4, d6, d_mapped;
    CHECK_EQ(lull_udp_send(&tx4, &d4, "4", 1, (struct sockaddr *)&to4, NULL),
             0);
    CHECK_EQ(lull_udp_send(&tx6, &d6, "6", 1, (struct sockaddr *)&to6, NULL),
             0);
    run_until(loop, &r.count, 2);
    CHECK_EQ(r.family[0], AF_INET6); /* v4-mapped on a dual-stack socket */
    CHECK_EQ(r.family[1], AF_INET6);
    /* An IPv4 destination from an IPv6 socket goes as a mapped address;
     * an IPv6 one cannot leave an IPv4 socket. */
    CHECK_EQ(
        lull_udp_send(&tx6, &d_mapped, "m", 1, (struct sockaddr *)&to4, NULL),
        0);
    CHECK_EQ(lull_udp_send(&tx4, &d4, "x", 1, (struct sockaddr *)&to6, NULL),
             -EINVAL);
    run_until(loop, &r.count, 3);
    CHECK_EQ(r.seen[2], 'm');
    lull_udp_close(&tx4, NULL);
    lull_udp_close(&tx6, NULL);
    lull_udp_close(&r.udp, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Posted by the first datagram of a flood: runs after at most four
 * batches, not after the whole flood. */
static rx *flood_rx;
static int flood_seen_at_task;

static void flood_task(lull_task *t) {
    (void)t;
    flood_seen_at_task = flood_rx->count;
}

TEST(flood_is_read_a_bounded_number_of_batches_per_iteration) {
    lull_loop *loop = new_loop();
    lull_udp_options o = {.recv_batch = 8};
    rx r;
    rx_bind(loop, &r, &o);
    lull_task task;
    lull_task_init(&task, flood_task);
    r.post_at_first = &task;
    flood_rx = &r;
    flood_seen_at_task = -1;
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    CHECK_EQ(send_n(&tx, 100, (struct sockaddr *)&to), 0);
    run_until(loop, &r.count, 100);
    /* 4 rounds of 8 datagrams, then the task; the rest later. */
    CHECK_EQ(flood_seen_at_task, 32);
    close_tx_rx_and_loop(loop, &tx, &r);
}

/* Exactly a full batch pending, then more arriving: while the full
 * batch's last datagram is delivered (before lull looks at the socket
 * again), and after the batch, once the loop has gone on. Nothing is lost,
 * nothing comes twice, the order holds; and the extra arrivals are read
 * without any other event on the socket to prompt them. */
static int full_fd = -1;
static struct sockaddr_in full_to;
static int full_count;
static unsigned char full_seen[64];

static void full_send(int first, int n) {
    for (int i = first; i < first + n; i++) {
        unsigned char b = (unsigned char)i;
        CHECK_EQ(sendto(full_fd, &b, 1, 0, (struct sockaddr *)&full_to,
                        sizeof full_to),
                 1);
    }
}

static void full_recv(lull_udp *udp, int status, const void *bytes, size_t len,
                      const struct sockaddr *from, unsigned flags) {
    (void)udp, (void)from, (void)flags;
    CHECK_EQ(status, 0);
    CHECK_EQ(len, 1u);
    if (full_count < 64) full_seen[full_count] = *(const unsigned char *)bytes;
    full_count++;
    if (full_count == 8) full_send(8, 3); /* the batch's last: 3 more */
}

TEST(a_full_batch_then_more_arriving_loses_nothing) {
    lull_loop *loop = new_loop();
    lull_udp_options o = {.recv_batch = 8};
    lull_udp r;
    CHECK_EQ(lull_udp_init(loop, &r, &o), 0);
    CHECK_EQ(lull_udp_bind(&r, "127.0.0.1", 0, 0), 0);
    CHECK_EQ(lull_udp_recv_start(&r, full_recv), 0);
    full_to = v4(lull_udp_local_port(&r));
    full_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(full_fd >= 0);
    full_count = 0;
    full_send(0, 8); /* exactly one batch */
    run_until(loop, &full_count, 11);
    uint64_t calls = r.recv_calls;
    /* After the batch and its 3, once the handle has read the socket
     * empty: another exactly full batch, then 5 more later. */
    full_send(11, 8);
    run_until(loop, &full_count, 19);
    full_send(19, 5);
    run_until(loop, &full_count, 24);
    for (int i = 0; i < 24; i++)
        CHECK_EQ(full_seen[i], i); /* none lost, none twice, in order */
    CHECK(r.recv_calls > calls);
    /* Nothing more: a loop with nothing ready does not deliver again. */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(full_count, 24);
    close(full_fd);
    lull_udp_close(&r, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(truncated_datagram_is_reported) {
    lull_loop *loop = new_loop();
    lull_udp_options o = {.max_datagram = 16};
    rx r;
    rx_bind(loop, &r, &o);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    static unsigned char big[100];
    memset(big, 'B', sizeof big);
    static lull_datagram d, d2;
    CHECK_EQ(
        lull_udp_send(&tx, &d, big, sizeof big, (struct sockaddr *)&to, NULL),
        0);
    CHECK_EQ(lull_udp_send(&tx, &d2, big, 16, (struct sockaddr *)&to, NULL), 0);
    run_until(loop, &r.count, 2);
    CHECK_EQ(r.lens[0], 16);
    CHECK_EQ(r.flags[0], LULL_UDP_TRUNCATED);
    CHECK_EQ(r.lens[1], 16);
    CHECK_EQ(r.flags[1], 0); /* exactly the slot's size fits */
    close_tx_rx_and_loop(loop, &tx, &r);
}

/* A port nobody listens on: the kernel answers with ICMP port unreachable,
 * and a connected socket reports it, to the reader and to the next send. */
static int free_udp_port(void) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_in a = v4(0);
    CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    CHECK_EQ(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

TEST(connected_socket_reports_icmp_refusal) {
    lull_loop *loop = new_loop();
    rx r;
    memset(&r, 0, sizeof r);
    r.udp.data = &r;
    CHECK_EQ(lull_udp_init(loop, &r.udp, NULL), 0);
    CHECK_EQ(lull_udp_connect(&r.udp, "127.0.0.1", free_udp_port()), 0);
    CHECK_EQ(lull_udp_recv_start(&r.udp, rx_recv), 0);
    CHECK_EQ(send_n(&r.udp, 1, NULL), 0);
    run_until(loop, &r.errors, 1);
    CHECK_EQ(r.last_error, -ECONNREFUSED);
    CHECK_EQ(send_status[0], 0); /* the datagram itself left */
    CHECK_EQ(r.count, 0);
    /* Not reading: the next send that meets the error fails with it. */
    CHECK_EQ(lull_udp_recv_stop(&r.udp), 0);
    CHECK_EQ(send_n(&r.udp, 1, NULL), 0);
    run_until(loop, &sends_done, 1);
    CHECK_EQ(send_status[0], 0);
    CHECK_EQ(send_n(&r.udp, 1, NULL), 0);
    run_until(loop, &sends_done, 1);
    CHECK_EQ(send_status[0], -ECONNREFUSED);
    lull_udp_close(&r.udp, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A close inside the recv callback that is reporting an error (ICMP's
 * refusal): the close completes once, nothing is reported after it. */
static void close_on_error(lull_udp *udp, int status, const void *bytes,
                           size_t len, const struct sockaddr *from,
                           unsigned flags) {
    rx_recv(udp, status, bytes, len, from, flags);
    if (status < 0) CHECK_EQ(lull_udp_close(udp, rx_closed), 0);
}

TEST(close_inside_an_error_report) {
    lull_loop *loop = new_loop();
    rx r;
    memset(&r, 0, sizeof r);
    r.udp.data = &r;
    CHECK_EQ(lull_udp_init(loop, &r.udp, NULL), 0);
    CHECK_EQ(lull_udp_connect(&r.udp, "127.0.0.1", free_udp_port()), 0);
    CHECK_EQ(lull_udp_recv_start(&r.udp, close_on_error), 0);
    CHECK_EQ(send_n(&r.udp, 3, NULL), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(r.errors, 1);
    CHECK_EQ(r.last_error, -ECONNREFUSED);
    CHECK_EQ(r.closes, 1);
    CHECK_EQ(sends_done, 3);
    CHECK_EQ(lull_loop_free(loop), 0);
}

static void stop_loop(lull_timer *t) {
    lull_loop_stop(t->loop);
}

/* A socket given with IP_RECVERR keeps each ICMP error on its error queue
 * as well as in its pending error: the read that returns the pending one
 * leaves the queue, which polls EPOLLERR until it is read with
 * MSG_ERRQUEUE. The handle reads it (the error reported once, as the
 * pending one was), so the loop goes quiet instead of waking for ever. */
TEST(icmp_error_on_the_error_queue_is_consumed) {
    lull_loop *loop = new_loop();
    rx r;
    memset(&r, 0, sizeof r);
    r.udp.data = &r;
    CHECK_EQ(lull_udp_init(loop, &r.udp, NULL), 0);
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    int one = 1;
    CHECK_EQ(setsockopt(fd, IPPROTO_IP, IP_RECVERR, &one, sizeof one), 0);
    struct sockaddr_in me = v4(0);
    CHECK_EQ(bind(fd, (struct sockaddr *)&me, sizeof me), 0);
    CHECK_EQ(lull_udp_open(&r.udp, fd), 0);
    CHECK_EQ(lull_udp_recv_start(&r.udp, rx_recv), 0);
    struct sockaddr_in to = v4(free_udp_port());
    CHECK_EQ(send_n(&r.udp, 1, (struct sockaddr *)&to), 0);
    run_until(loop, &r.errors, 1);
    CHECK_EQ(r.last_error, -ECONNREFUSED);
    CHECK(polls_in(loop, 20) < 10);
    CHECK_EQ(r.count, 0);
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    CHECK_EQ(poll(&pf, 1, 0), 0); /* nothing left: no EPOLLERR */
    /* Still receiving: a datagram after the error arrives. */
    rx peer;
    rx_bind(loop, &peer, NULL);
    struct sockaddr_in back = v4(lull_udp_local_port(&r.udp));
    CHECK_EQ(send_n(&peer.udp, 1, (struct sockaddr *)&back), 0);
    run_until(loop, &r.count, 1);
    rx_close(&peer);
    lull_udp_close(&r.udp, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Not receiving, only sending: the error queue fills with every refusal
 * and nothing in the handle reads it; with no interest registered the
 * loop never hears of it either, so it stays quiet. */
TEST(icmp_errors_while_only_sending_keep_the_loop_quiet) {
    lull_loop *loop = new_loop();
    rx r;
    memset(&r, 0, sizeof r);
    r.udp.data = &r;
    CHECK_EQ(lull_udp_init(loop, &r.udp, NULL), 0);
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    int one = 1;
    CHECK_EQ(setsockopt(fd, IPPROTO_IP, IP_RECVERR, &one, sizeof one), 0);
    CHECK_EQ(lull_udp_open(&r.udp, fd), 0);
    struct sockaddr_in to = v4(free_udp_port());
    CHECK_EQ(send_n(&r.udp, 3, (struct sockaddr *)&to), 0);
    run_until(loop, &sends_done, 3);
    CHECK(polls_in(loop, 20) < 10);
    lull_udp_close(&r.udp, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The handle's fd closed behind it while another descriptor (a dup, a
 * forked child's copy) keeps the socket open: the registration, keyed by
 * the open file, goes on reporting its datagrams, and every read of the
 * closed number says EBADF. Reported once, it ends the receiving (the fd
 * can never work again) instead of a report per iteration for ever. */
TEST(fd_closed_behind_a_receiving_handle) {
    lull_loop *loop = new_loop();
    rx r;
    rx_bind(loop, &r, NULL);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    int tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(tx >= 0);
    int keep = dup(r.udp.io.fd);
    CHECK(keep >= 0);
    CHECK_EQ(close(r.udp.io.fd), 0); /* the user's mistake */
    CHECK_EQ(sendto(tx, "x", 1, 0, (struct sockaddr *)&to, sizeof to), 1);
    CHECK(polls_in(loop, 20) < 10);
    CHECK_EQ(r.errors, 1);
    CHECK_EQ(r.last_error, -EBADF);
    CHECK_EQ(r.count, 0);
    lull_udp_close(&r.udp, NULL); /* its close of the number: EBADF */
    close(tx);
    close(keep);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The same with the closed number taken at once by a file (dup2 here, as
 * a program's next open would take it): every read of it says ENOTSOCK,
 * reported once, and the receiving ends. */
TEST(fd_reused_by_a_file_behind_a_receiving_handle) {
    lull_loop *loop = new_loop();
    rx r;
    rx_bind(loop, &r, NULL);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    int tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(tx >= 0);
    int keep = dup(r.udp.io.fd);
    CHECK(keep >= 0);
    int file = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(file >= 0);
    CHECK(dup2(file, r.udp.io.fd) >= 0); /* the user's mistake */
    CHECK_EQ(sendto(tx, "x", 1, 0, (struct sockaddr *)&to, sizeof to), 1);
    CHECK(polls_in(loop, 20) < 10);
    CHECK_EQ(r.errors, 1);
    CHECK_EQ(r.last_error, -ENOTSOCK);
    CHECK_EQ(r.count, 0);
    lull_udp_close(&r.udp, NULL); /* closes the file's number */
    close(file);
    close(tx);
    close(keep);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The socket's read side shut down behind a receiving handle (by a
 * holder of the fd, a forked child's copy, a failed shutdown of an
 * unconnected socket alike): the kernel reports it readable for ever, with
 * nothing to read. What was queued before still arrives; then -ESHUTDOWN
 * is reported once and receiving ends, instead of a poll per iteration
 * for ever. */
TEST(read_side_shut_down_behind_a_receiving_handle) {
    lull_loop *loop = new_loop();
    rx r;
    rx_bind(loop, &r, NULL);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    int tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(tx >= 0);
    CHECK_EQ(sendto(tx, "a", 1, 0, (struct sockaddr *)&to, sizeof to), 1);
    CHECK_EQ(sendto(tx, "b", 1, 0, (struct sockaddr *)&to, sizeof to), 1);
    /* Unconnected: -ENOTCONN, but the read side is shut all the same. */
    (void)shutdown(r.udp.io.fd, SHUT_RD);
    /* A poll or two, however slowly the machine runs the loop: the batch
     * that empties the socket, then the report (a 20 ms window alone ended
     * between them under valgrind on a busy machine). */
    for (int i = 0; i < 10 && r.errors == 0; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(r.count, 2);
    CHECK_EQ(r.seen[0], 'a');
    CHECK_EQ(r.seen[1], 'b');
    CHECK_EQ(r.errors, 1);
    CHECK_EQ(r.last_error, -ESHUTDOWN);
    CHECK(polls_in(loop, 20) < 10); /* then quiet */
    CHECK_EQ(r.errors, 1);
    rx_close(&r);
    close(tx);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(r.closes, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A Unix datagram socketpair's sender, receiving and waiting for room
 * (its peer reads nothing), when the peer closes: the wait ends (the
 * queued sends fail, the peer being gone) and the loop goes quiet. */
TEST(blocked_sender_when_its_unix_peer_closes) {
    lull_loop *loop = new_loop();
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv), 0);
    rx r;
    memset(&r, 0, sizeof r);
    r.udp.data = &r;
    CHECK_EQ(lull_udp_init(loop, &r.udp, NULL), 0);
    CHECK_EQ(lull_udp_open(&r.udp, sv[0]), 0);
    CHECK_EQ(lull_udp_recv_start(&r.udp, rx_recv), 0);
    enum { N = 500 };
    CHECK_EQ(send_n(&r.udp, N, NULL), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK(sends_done < N); /* the peer's queue filled */
    close(sv[1]);
    /* Each send fails in its turn; a loop woken for ever would use up the
     * iterations first, one that never woke ends at the guard. */
    lull_timer guard;
    CHECK_EQ(lull_timer_init(loop, &guard, stop_loop), 0);
    lull_timer_start(&guard, LULL_MS(5000), 0);
    for (int i = 0; i < 10000 && sends_done < N && lull_timer_active(&guard);
         i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    lull_timer_stop(&guard);
    CHECK_EQ(sends_done, N);
    CHECK(polls_in(loop, 20) < 10);
    CHECK(send_status[N - 1] < 0);
    lull_udp_close(&r.udp, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(send_bound_refuses_and_keeps_the_handle) {
    lull_loop *loop = new_loop();
    rx r;
    rx_bind(loop, &r, NULL);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    lull_udp tx;
    lull_udp_options o = {.max_queued = 20};
    CHECK_EQ(lull_udp_init(loop, &tx, &o), 0);
    CHECK_EQ(send_n(&tx, 2, (struct sockaddr *)&to), 0); /* 16 bytes */
    CHECK_EQ(lull_udp_send(&tx, &dgrams[2], payload[0], 8,
                           (struct sockaddr *)&to, NULL),
             -ENOBUFS);
    CHECK_EQ(lull_udp_send(&tx, &dgrams[2], payload[0], 4,
                           (struct sockaddr *)&to, NULL),
             0); /* up to the bound exactly */
    run_until(loop, &r.count, 3);
    CHECK_EQ(tx.queued, 0);
    CHECK_EQ(send_n(&tx, 2, (struct sockaddr *)&to), 0); /* room again */
    run_until(loop, &r.count, 5);
    close_tx_rx_and_loop(loop, &tx, &r);
}

/* Close right after sending: the queue gets one last send, as far as the
 * socket takes it now (as a stream's close writes once more), and what
 * it did not take is cancelled: each callback once, in send order, 0 for
 * a datagram that left and -ECANCELED after the first that did not, then
 * the close callback, all later. A last notice sent just before a close
 * leaves (it was cancelled, where libuv, sending at once, sent it). */
static int close_cb_calls;
static void count_close(lull_udp *u) {
    (void)u;
    close_cb_calls++;
    check_trace(1000);
}

TEST(close_sends_once_what_the_socket_takes_and_cancels_the_rest) {
    lull_loop *loop = new_loop();
    int sv[2];
    lull_udp tx;
    rx r;
    open_unix_pair(loop, sv, &tx, NULL, &r); /* r reads nothing yet */
    enum { N = 500 };                        /* past the peer's queue */
    CHECK_EQ(send_n(&tx, N, NULL), 0);
    close_cb_calls = 0;
    check_trace_reset();
    CHECK_EQ(lull_udp_close(&tx, count_close), 0);
    CHECK_EQ(lull_udp_close(&tx, count_close), 0); /* idempotent */
    CHECK_EQ(sends_done, 0);
    CHECK_EQ(close_cb_calls, 0); /* never inside the call */
    CHECK_EQ(lull_udp_send(&tx, &dgrams[N], "x", 1, NULL, NULL), -EPIPE);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(sends_done, N);
    CHECK_EQ(close_cb_calls, 1);
    CHECK_EQ(check_trace_len(), N + 1);
    for (int i = 0; i <= N; i++)
        CHECK_EQ(check_trace_find(i == N ? 1000 : i), i);
    int left = 0;
    while (left < N && send_status[left] == 0)
        left++;
    CHECK(left > 0 && left < N); /* some left, the peer's queue filled */
    for (int i = left; i < N; i++)
        CHECK_EQ(send_status[i], -ECANCELED);
    /* The peer reads exactly those that left, in order. */
    CHECK_EQ(lull_udp_recv_start(&r.udp, rx_recv), 0);
    run_until(loop, &r.count, left);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(r.count, left);
    for (int i = 0; i < left && i < 256; i++)
        CHECK_EQ(r.seen[i], i & 0xff);
    rx_close(&r);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A close inside a send callback: the rest are cancelled, and the close
 * callback still comes in a turn of its own. */
static lull_udp *close_in_cb_udp;
static void close_in_send_cb(lull_datagram *d, int status) {
    on_sent(d, status);
    if ((intptr_t)d->data == 0) lull_udp_close(close_in_cb_udp, count_close);
}

TEST(close_inside_a_send_callback) {
    lull_loop *loop = new_loop();
    rx r;
    rx_bind(loop, &r, NULL);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    close_in_cb_udp = &tx;
    close_cb_calls = 0;
    sends_done = 0;
    static unsigned char b[3];
    for (int i = 0; i < 3; i++) {
        dgrams[i].data = (void *)(intptr_t)i;
        CHECK_EQ(lull_udp_send(&tx, &dgrams[i], b, 1, (struct sockaddr *)&to,
                               close_in_send_cb),
                 0);
    }
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    run_until(loop, &close_cb_calls, 1);
    CHECK_EQ(sends_done, 3); /* all three had left already */
    CHECK_TRACE(0, 1, 2, 1000);
    rx_close(&r);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(close_inside_the_recv_callback_delivers_nothing_more) {
    lull_loop *loop = new_loop();
    rx r;
    rx_bind(loop, &r, NULL);
    r.close_at = 1;
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    CHECK_EQ(send_n(&tx, 10, (struct sockaddr *)&to), 0);
    /* Nothing but the sends keeps the loop alive once r closed. */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(r.count, 1);
    CHECK_EQ(sends_done, 10);
    CHECK_EQ(r.closes, 0); /* closed with no callback */
    CHECK_EQ(lull_udp_recv_start(&r.udp, rx_recv), -EINVAL);
    lull_udp_close(&tx, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(recv_stop_inside_the_callback_holds_the_rest) {
    lull_loop *loop = new_loop();
    rx r;
    rx_bind(loop, &r, NULL);
    r.stop_at = 3;
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    CHECK_EQ(send_n(&tx, 10, (struct sockaddr *)&to), 0);
    /* Returns: once r stopped, nothing is watched. */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(r.count, 3);
    r.stop_at = 0;
    CHECK_EQ(lull_udp_recv_start(&r.udp, rx_recv), 0);
    CHECK_EQ(r.count, 3); /* the kept rest comes in a later turn */
    run_until(loop, &r.count, 10);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(r.seen[i], i); /* none lost, none twice */
    close_tx_rx_and_loop(loop, &tx, &r);
}

/* Each datagram's sender, whatever the one before it in the same slot: a
 * slot's header is set up again after every recvmmsg that filled it (the
 * kernel shortened its address length to the last sender's). Unix
 * datagram sockets, whose address lengths differ by sender: an unnamed
 * one (none), then one with a long abstract name, into slot 0 both. */
static char from_path[4][108];
static int from_count;

static void from_recv(lull_udp *udp, int status, const void *bytes, size_t len,
                      const struct sockaddr *from, unsigned flags) {
    (void)udp, (void)bytes, (void)len, (void)flags;
    CHECK_EQ(status, 0);
    CHECK(from != NULL);
    /* An unnamed sender has no address (length 0): only a named one's is
     * looked at. */
    const struct sockaddr_un *un = (const struct sockaddr_un *)from;
    if (from_count < 4 && from->sa_family == AF_UNIX) /* a NUL, the name */
        memcpy(from_path[from_count], un->sun_path + 1,
               sizeof un->sun_path - 1);
    from_count++;
}

static socklen_t abstract_name(struct sockaddr_un *a, const char *name) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    size_t n = strlen(name);
    memcpy(a->sun_path + 1, name, n);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

TEST(each_datagram_carries_its_own_sender_in_a_reused_slot) {
    lull_loop *loop = new_loop();
    char name[64], long_name[96];
    snprintf(name, sizeof name, "lull-test-udp-rx-%d", (int)getpid());
    snprintf(long_name, sizeof long_name,
             "lull-test-udp-a-sender-with-a-long-name-%d", (int)getpid());
    struct sockaddr_un rxa, txa;
    socklen_t rxlen = abstract_name(&rxa, name);
    socklen_t txlen = abstract_name(&txa, long_name);
    int rfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int anon = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int named = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(rfd >= 0 && anon >= 0 && named >= 0);
    CHECK_EQ(bind(rfd, (struct sockaddr *)&rxa, rxlen), 0);
    CHECK_EQ(bind(named, (struct sockaddr *)&txa, txlen), 0);
    lull_udp r;
    CHECK_EQ(lull_udp_init(loop, &r, NULL), 0);
    CHECK_EQ(lull_udp_open(&r, rfd), 0);
    CHECK_EQ(lull_udp_recv_start(&r, from_recv), 0);
    from_count = 0;
    memset(from_path, 0x55, sizeof from_path);
    CHECK_EQ(sendto(anon, "a", 1, 0, (struct sockaddr *)&rxa, rxlen), 1);
    run_until(loop, &from_count, 1);
    CHECK_EQ(sendto(named, "n", 1, 0, (struct sockaddr *)&rxa, rxlen), 1);
    run_until(loop, &from_count, 2);
    CHECK_EQ(strcmp(from_path[1], long_name), 0);
    /* A batch of two, then one from the unnamed: slots 0 and 1 again. */
    CHECK_EQ(sendto(anon, "a", 1, 0, (struct sockaddr *)&rxa, rxlen), 1);
    CHECK_EQ(sendto(named, "n", 1, 0, (struct sockaddr *)&rxa, rxlen), 1);
    run_until(loop, &from_count, 4);
    CHECK_EQ(strcmp(from_path[3], long_name), 0);
    close(anon);
    close(named);
    lull_udp_close(&r, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The other order: a named sender's datagram, then an unnamed one's, in
 * slot 0 both. The kernel writes no address for the unnamed (length 0),
 * so the slot still held the named sender's: the second datagram must
 * not be reported as coming from it. */
TEST(an_unnamed_sender_after_a_named_one_is_not_reported_as_it) {
    lull_loop *loop = new_loop();
    char name[64], tx_name[64];
    snprintf(name, sizeof name, "lull-test-udp-rx2-%d", (int)getpid());
    snprintf(tx_name, sizeof tx_name, "lull-test-udp-named-%d", (int)getpid());
    struct sockaddr_un rxa, txa;
    socklen_t rxlen = abstract_name(&rxa, name);
    socklen_t txlen = abstract_name(&txa, tx_name);
    int rfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int anon = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int named = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(rfd >= 0 && anon >= 0 && named >= 0);
    CHECK_EQ(bind(rfd, (struct sockaddr *)&rxa, rxlen), 0);
    CHECK_EQ(bind(named, (struct sockaddr *)&txa, txlen), 0);
    lull_udp r;
    lull_udp_options o = {.recv_batch = 1}; /* one slot: reused */
    CHECK_EQ(lull_udp_init(loop, &r, &o), 0);
    CHECK_EQ(lull_udp_open(&r, rfd), 0);
    CHECK_EQ(lull_udp_recv_start(&r, from_recv), 0);
    from_count = 0;
    memset(from_path, 0, sizeof from_path);
    CHECK_EQ(sendto(named, "n", 1, 0, (struct sockaddr *)&rxa, rxlen), 1);
    run_until(loop, &from_count, 1);
    CHECK_EQ(strcmp(from_path[0], tx_name), 0);
    CHECK_EQ(sendto(anon, "a", 1, 0, (struct sockaddr *)&rxa, rxlen), 1);
    CHECK_EQ(sendto(named, "n", 1, 0, (struct sockaddr *)&rxa, rxlen), 1);
    CHECK_EQ(sendto(anon, "a", 1, 0, (struct sockaddr *)&rxa, rxlen), 1);
    run_until(loop, &from_count, 4);
    CHECK_EQ(strcmp(from_path[1], ""), 0); /* no address, not the named's */
    CHECK_EQ(strcmp(from_path[2], tx_name), 0);
    CHECK_EQ(strcmp(from_path[3], ""), 0);
    close(anon);
    close(named);
    lull_udp_close(&r, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A full receiver: Unix datagram sockets make the sender wait (UDP on
 * loopback would drop instead). Every datagram arrives, in order, once
 * the receiver reads; the sender waited in epoll, not in a spin. */
TEST(full_socket_waits_for_writability) {
    lull_loop *loop = new_loop();
    int sv[2];
    lull_udp tx;
    rx r;
    open_unix_pair(loop, sv, &tx, NULL, &r);
    enum { N = 500 };
    CHECK_EQ(send_n(&tx, N, NULL), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK(sends_done < N); /* the receiver's queue filled */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    uint64_t before = m.iterations;
    CHECK_EQ(lull_udp_recv_start(&r.udp, rx_recv), 0);
    run_until(loop, &r.count, N);
    run_until(loop, &sends_done, N);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(send_status[i], 0);
        if (i < 256) CHECK_EQ(r.seen[i], i & 0xff);
    }
    lull_loop_metrics(loop, &m);
    CHECK(m.iterations - before < 200); /* no spin while waiting */
    close_tx_rx_and_loop(loop, &tx, &r);
}

#ifdef CHECK_SANDBOX_ARCH
/* ENOBUFS from a send is the device's queue, full (a UDP socket polls
 * writable all the while, so waiting for writability would spin): each
 * datagram it refuses fails with -ENOBUFS, as a send's own error, and the
 * loop goes quiet, plain sends and sends split by hand alike. In a child,
 * where a seccomp filter makes every send fail so. */
static void device_queue_full(void *gso) {
    lull_loop *loop = new_loop();
    int sv[2];
    lull_udp_options so = {.gso_segment = gso ? 4 : 0};
    lull_udp tx;
    rx r;
    open_unix_pair(loop, sv, &tx, &so, &r);
    check_deny_syscalls((const int[]){SYS_sendmmsg, SYS_sendto, SYS_sendmsg}, 3,
                        ENOBUFS);
    CHECK_EQ(send_n(&tx, 5, NULL), 0);
    run_until(loop, &sends_done, 5);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(send_status[i], -ENOBUFS);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK(m.iterations < 10);
    close_tx_rx_and_loop(loop, &tx, &r);
}

TEST(device_queue_full_fails_the_datagram_without_spinning) {
    CHECK(check_exits_cleanly(device_queue_full, NULL));
    CHECK(check_exits_cleanly(device_queue_full, (void *)1));
}

/* A seccomp filter that refuses recvmmsg (ENOSYS, or EPERM as older
 * container profiles answer a call they do not know): datagrams are read
 * with recvmsg instead, every one, in order, and the loop goes quiet. It
 * was an error reported four times an iteration for ever, with the
 * socket's datagrams never read. */
static void recvmmsg_denied(void *err) {
    lull_loop *loop = new_loop();
    lull_udp_options o = {.recv_batch = 8};
    rx r;
    rx_bind(loop, &r, &o);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    check_deny_syscalls((const int[]){SYS_recvmmsg}, 1, (int)(intptr_t)err);
    int tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(tx >= 0);
    for (int i = 0; i < 20; i++) {
        unsigned char b = (unsigned char)i;
        CHECK_EQ(sendto(tx, &b, 1, 0, (struct sockaddr *)&to, sizeof to), 1);
    }
    run_until(loop, &r.count, 20);
    for (int i = 0; i < 20; i++)
        CHECK_EQ(r.seen[i], i);
    CHECK_EQ(r.errors, 0);
    CHECK(polls_in(loop, 20) < 10);
    close(tx);
    rx_close(&r);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(recvmmsg_denied_by_seccomp_falls_back_to_recvmsg) {
    CHECK(check_exits_cleanly(recvmmsg_denied, (void *)(intptr_t)ENOSYS));
    CHECK(check_exits_cleanly(recvmmsg_denied, (void *)(intptr_t)EPERM));
}

/* The same for sendmmsg: datagrams leave with sendmsg, every one, in
 * order, each request completing with 0. They failed, each with the
 * filter's errno. */
static void sendmmsg_denied(void *err) {
    lull_loop *loop = new_loop();
    lull_udp_options o = {.recv_batch = 8};
    rx r;
    rx_bind(loop, &r, &o);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    check_deny_syscalls((const int[]){SYS_sendmmsg}, 1, (int)(intptr_t)err);
    CHECK_EQ(send_n(&tx, 20, (struct sockaddr *)&to), 0);
    run_until(loop, &sends_done, 20);
    for (int i = 0; i < 20; i++)
        CHECK_EQ(send_status[i], 0);
    run_until(loop, &r.count, 20);
    for (int i = 0; i < 20; i++)
        CHECK_EQ(r.seen[i], i);
    CHECK_U64_EQ(tx.sent, 20);
    close_tx_rx_and_loop(loop, &tx, &r);
}

TEST(sendmmsg_denied_by_seccomp_falls_back_to_sendmsg) {
    CHECK(check_exits_cleanly(sendmmsg_denied, (void *)(intptr_t)ENOSYS));
    CHECK(check_exits_cleanly(sendmmsg_denied, (void *)(intptr_t)EPERM));
}
#endif

/* One long send cut into datagrams of gso_segment bytes, by the kernel
 * (UDP_SEGMENT) or by lull where the kernel refuses; received plain and
 * with GRO: the receiver sees the same ten datagrams either way. */
static void segmented(bool gro) {
    lull_loop *loop = new_loop();
    lull_udp_options ro = {.gro = gro};
    rx r;
    rx_bind(loop, &r, &ro);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    lull_udp_options so = {.gso_segment = 100};
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, &so), 0);
    static unsigned char big[1000];
    for (int i = 0; i < 1000; i++)
        big[i] = (unsigned char)(i / 100);
    static lull_datagram d;
    CHECK_EQ(lull_udp_send(&tx, &d, big, sizeof big, (struct sockaddr *)&to,
                           on_sent),
             0);
    sends_done = 0;
    run_until(loop, &r.count, 10);
    run_until(loop, &sends_done, 1);
    CHECK_U64_EQ(tx.sent, 10);
    for (int i = 0; i < 10; i++) {
        CHECK_EQ(r.lens[i], 100);
        CHECK_EQ(r.seen[i], i);
    }
    CHECK_EQ(
        lull_udp_send(&tx, &d, big, 100 * 65, (struct sockaddr *)&to, NULL),
        -EMSGSIZE); /* past the kernel's 64 segments */
    close_tx_rx_and_loop(loop, &tx, &r);
}

TEST(gso_send_arrives_as_datagrams) {
    segmented(false);
}

/* A gso_segment longer than one datagram may carry cuts nothing: a send
 * is still refused past one datagram's 65507 bytes, at the call, as the
 * header says, not accepted to fail with the kernel's -EMSGSIZE in its
 * callback. */
TEST(gso_segment_past_one_datagram_refuses_past_one_datagram) {
    lull_loop *loop = new_loop();
    lull_udp_options so = {.gso_segment = 100000};
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, &so), 0);
    static unsigned char big[70000];
    static lull_datagram d;
    struct sockaddr_in to = v4(9);
    CHECK_EQ(
        lull_udp_send(&tx, &d, big, sizeof big, (struct sockaddr *)&to, NULL),
        -EMSGSIZE);
    CHECK_EQ(lull_udp_send(&tx, &d, big, 65508, (struct sockaddr *)&to, NULL),
             -EMSGSIZE);
    lull_udp_close(&tx, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A GSO send within 64 segments but longer than one IP packet holds
 * (50 x 1400 = 70000 > 65507): lull_udp_send takes it, as the header
 * promises, so it must leave as its 50 datagrams, not fail with the
 * kernel's -EMSGSIZE in its callback. */
TEST(gso_send_longer_than_one_packet_arrives_as_datagrams) {
    lull_loop *loop = new_loop();
    lull_udp_options ro = {.recv_batch = 64};
    rx r;
    rx_bind(loop, &r, &ro);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    lull_udp_options so = {.gso_segment = 1400};
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, &so), 0);
    static unsigned char big[50 * 1400];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (unsigned char)(i / 1400);
    static lull_datagram d;
    sends_done = 0;
    send_status[0] = 1;
    d.data = (void *)(intptr_t)0;
    CHECK_EQ(lull_udp_send(&tx, &d, big, sizeof big, (struct sockaddr *)&to,
                           on_sent),
             0);
    run_until(loop, &sends_done, 1);
    CHECK_EQ(send_status[0], 0);
    run_until(loop, &r.count, 50);
    for (int i = 0; i < 50; i++) {
        CHECK_EQ(r.lens[i], 1400);
        CHECK_EQ(r.seen[i], i);
    }
    CHECK_U64_EQ(tx.sent, 50);
    close_tx_rx_and_loop(loop, &tx, &r);
}

/* Where UDP_SEGMENT cannot be used (a Unix datagram socket here), lull
 * cuts the send itself: the same datagrams. */
TEST(gso_without_the_kernel_splits_by_hand) {
    lull_loop *loop = new_loop();
    int sv[2];
    lull_udp_options so = {.gso_segment = 100};
    lull_udp tx;
    rx r;
    open_unix_pair(loop, sv, &tx, &so, &r);
    CHECK_EQ(lull_udp_recv_start(&r.udp, rx_recv), 0);
    static unsigned char big[950];
    for (int i = 0; i < 950; i++)
        big[i] = (unsigned char)(i / 100);
    static lull_datagram d;
    sends_done = 0;
    CHECK_EQ(lull_udp_send(&tx, &d, big, sizeof big, NULL, on_sent), 0);
    run_until(loop, &r.count, 10);
    run_until(loop, &sends_done, 1);
    for (int i = 0; i < 10; i++) {
        CHECK_EQ(r.lens[i], i < 9 ? 100 : 50);
        CHECK_EQ(r.seen[i], i);
    }
    CHECK_U64_EQ(tx.sent, 10);
    close_tx_rx_and_loop(loop, &tx, &r);
}
/* A send lull cuts by hand that meets a full receiver half-way waits for
 * room like any other, and the rest of it leaves then: nothing is failed
 * with -EAGAIN, no segment is sent twice or lost. */
TEST(split_send_meeting_a_full_socket_waits_for_room) {
    lull_loop *loop = new_loop();
    int sv[2];
    lull_udp_options so = {.gso_segment = 100};
    lull_udp tx;
    rx r;
    open_unix_pair(loop, sv, &tx, &so, &r);
    int small = 4096; /* a few datagrams' room: the split meets it */
    CHECK_EQ(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    enum { N = 8 };
    static unsigned char big[N][1000];
    static lull_datagram d[N];
    sends_done = 0;
    for (int k = 0; k < N; k++) {
        for (int i = 0; i < 1000; i++)
            big[k][i] = (unsigned char)(k * 10 + i / 100);
        d[k].data = (void *)(intptr_t)k;
        send_status[k] = 1;
        CHECK_EQ(lull_udp_send(&tx, &d[k], big[k], 1000, NULL, on_sent), 0);
    }
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(lull_udp_recv_start(&r.udp, rx_recv), 0);
    run_until(loop, &sends_done, N);
    for (int k = 0; k < N; k++)
        CHECK_EQ(send_status[k], 0);
    run_until(loop, &r.count, N * 10);
    for (int i = 0; i < N * 10; i++) {
        CHECK_EQ(r.lens[i], 100);
        CHECK_EQ(r.seen[i], i);
    }
    CHECK_U64_EQ(tx.sent, N * 10);
    close_tx_rx_and_loop(loop, &tx, &r);
}

TEST(gro_receive_splits_coalesced_datagrams) {
    segmented(true);
}

/* A stop inside the callback in the middle of a slot GRO filled (one
 * long GSO send, coalesced): the rest of that slot comes after the next
 * start, none lost, none twice; then a close in the middle of one. */
TEST(gro_stop_and_close_in_the_middle_of_a_coalesced_slot) {
    lull_loop *loop = new_loop();
    lull_udp_options ro = {.gro = true};
    rx r;
    rx_bind(loop, &r, &ro);
    r.stop_at = 3;
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    lull_udp_options so = {.gso_segment = 100};
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, &so), 0);
    static unsigned char big[1000];
    for (int i = 0; i < 1000; i++)
        big[i] = (unsigned char)(i / 100);
    static lull_datagram d;
    CHECK_EQ(
        lull_udp_send(&tx, &d, big, sizeof big, (struct sockaddr *)&to, NULL),
        0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(r.count, 3);
    r.stop_at = 0;
    r.close_at = 6;
    CHECK_EQ(lull_udp_recv_start(&r.udp, rx_recv), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(r.count, 6); /* closed at the sixth: nothing after */
    for (int i = 0; i < 6; i++) {
        CHECK_EQ(r.seen[i], i);
        CHECK_EQ(r.lens[i], 100);
    }
    lull_udp_close(&tx, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Sends ten 100-byte datagrams in one GSO send from tx (set up here) to
 * r's port, and runs until r holds `want` datagrams in all. */
static void send_ten_by_gso(lull_loop *loop, lull_udp *tx, rx *r, int want) {
    struct sockaddr_in to = v4(lull_udp_local_port(&r->udp));
    lull_udp_options so = {.gso_segment = 100};
    CHECK_EQ(lull_udp_init(loop, tx, &so), 0);
    static unsigned char big[1000];
    for (int i = 0; i < 1000; i++)
        big[i] = (unsigned char)(i / 100);
    static lull_datagram d;
    sends_done = 0;
    CHECK_EQ(
        lull_udp_send(tx, &d, big, sizeof big, (struct sockaddr *)&to, on_sent),
        0);
    run_until(loop, &sends_done, 1);
    for (int i = 0; i < 50 && r->count < want; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
}

/* GRO with slots smaller than what the kernel coalesces (up to 64 KiB in
 * one slot): ten 100-byte datagrams each fit a 150-byte slot, so all ten
 * arrive whole, none flagged truncated, none lost. */
TEST(gro_with_small_slots_loses_no_datagram_that_fits) {
    lull_loop *loop = new_loop();
    lull_udp_options ro = {.gro = true, .max_datagram = 150};
    rx r;
    rx_bind(loop, &r, &ro);
    lull_udp tx;
    send_ten_by_gso(loop, &tx, &r, 10);
    printf("received %d: first %zu bytes, flags %u\n", r.count, r.lens[0],
           r.flags[0]);
    CHECK_EQ(r.count, 10);
    for (int i = 0; i < 10; i++) {
        CHECK_EQ(r.lens[i], 100);
        CHECK_EQ(r.seen[i], i);
        CHECK_EQ(r.flags[i], 0);
    }
    close_tx_rx_and_loop(loop, &tx, &r);
}

/* With GRO, a slot that held a plain datagram (no control data: the
 * kernel set its control length to 0) takes a coalesced one next: its
 * control length is set again, so the segment size arrives and the ten
 * datagrams are split as before, not delivered as one of 1,000 bytes. */
TEST(gro_slot_reused_after_a_plain_datagram) {
    lull_loop *loop = new_loop();
    lull_udp_options ro = {.gro = true};
    rx r;
    rx_bind(loop, &r, &ro);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    lull_udp plain;
    CHECK_EQ(lull_udp_init(loop, &plain, NULL), 0);
    CHECK_EQ(send_n(&plain, 1, (struct sockaddr *)&to), 0);
    run_until(loop, &r.count, 1);
    CHECK_EQ(r.lens[0], 8);
    lull_udp tx;
    send_ten_by_gso(loop, &tx, &r, 11);
    CHECK_EQ(r.count, 11);
    for (int i = 1; i <= 10; i++) {
        CHECK_EQ(r.lens[i], 100);
        CHECK_EQ(r.seen[i], i - 1);
    }
    lull_udp_close(&plain, NULL);
    close_tx_rx_and_loop(loop, &tx, &r);
}

/* With GRO on a socket the program adopted with other control data asked
 * for (a receive timestamp here; IP_PKTINFO, SO_MARK ... alike): the
 * kernel writes that data before the segment size, so a slot's control
 * room must hold both. Cut short (MSG_CTRUNC), the segment size is lost
 * and the ten datagrams GRO coalesced would arrive glued as one of 1,000
 * bytes. */
TEST(gro_with_a_timestamp_asked_for_still_splits_datagrams) {
    lull_loop *loop = new_loop();
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    int on = 1;
    CHECK_EQ(setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on), 0);
    struct sockaddr_in any = v4(0);
    CHECK_EQ(bind(fd, (struct sockaddr *)&any, sizeof any), 0);
    rx r;
    memset(&r, 0, sizeof r);
    r.udp.data = &r;
    lull_udp_options ro = {.gro = true};
    CHECK_EQ(lull_udp_init(loop, &r.udp, &ro), 0);
    CHECK_EQ(lull_udp_open(&r.udp, fd), 0);
    CHECK_EQ(lull_udp_recv_start(&r.udp, rx_recv), 0);
    lull_udp tx;
    send_ten_by_gso(loop, &tx, &r, 10);
    printf("received %d: first %zu bytes\n", r.count, r.lens[0]);
    CHECK_EQ(r.count, 10);
    for (int i = 0; i < 10; i++) {
        CHECK_EQ(r.lens[i], 100);
        CHECK_EQ(r.seen[i], i);
    }
    close_tx_rx_and_loop(loop, &tx, &r);
}

TEST(multicast_on_the_loopback_interface) {
    lull_loop *loop = new_loop();
    rx r;
    memset(&r, 0, sizeof r);
    r.udp.data = &r;
    CHECK_EQ(lull_udp_init(loop, &r.udp, NULL), 0);
    CHECK_EQ(lull_udp_bind(&r.udp, "0.0.0.0", 0, LULL_UDP_REUSEADDR), 0);
    int rc = lull_udp_set_membership(&r.udp, "239.255.77.1", "127.0.0.1", true);
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    CHECK_EQ(lull_udp_bind(&tx, "127.0.0.1", 0, 0), 0);
    if (rc == 0) rc = lull_udp_set_multicast_interface(&tx, "127.0.0.1");
    if (rc == 0) rc = lull_udp_set_multicast_loop(&tx, true);
    CHECK_EQ(lull_udp_set_multicast_ttl(&tx, 1), 0);
    if (rc != 0) {
        printf("skipped: no multicast on the loopback interface here (%s)\n",
               strerror(-rc));
    } else {
        CHECK_EQ(lull_udp_recv_start(&r.udp, rx_recv), 0);
        struct sockaddr_in group = v4(lull_udp_local_port(&r.udp));
        inet_pton(AF_INET, "239.255.77.1", &group.sin_addr);
        CHECK_EQ(send_n(&tx, 3, (struct sockaddr *)&group), 0);
        run_until(loop, &sends_done, 3);
        if (send_status[0] != 0) {
            printf("skipped: multicast send refused here (%s)\n",
                   strerror(-send_status[0]));
        } else {
            run_until(loop, &r.count, 3);
            CHECK_EQ(lull_udp_set_membership(&r.udp, "239.255.77.1",
                                             "127.0.0.1", false),
                     0);
        }
    }
    CHECK_EQ(lull_udp_set_membership(&r.udp, "not-a-group", NULL, true),
             -EINVAL);
    CHECK_EQ(lull_udp_set_membership(&r.udp, "239.255.77.1", "nope", true),
             -EINVAL);
    lull_udp_close(&tx, NULL);
    lull_udp_close(&r.udp, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* IPv6 carries 65527 bytes in a datagram (no IPv4 header inside its
 * 65535): the kernel sends them and a receive slot holds them, so lull
 * takes them too, and refuses one byte more. It refused everything past
 * IPv4's 65507 with -EMSGSIZE. */
TEST(ipv6_datagram_of_65527_bytes) {
    lull_loop *loop = new_loop();
    rx r;
    memset(&r, 0, sizeof r);
    r.udp.data = &r;
    CHECK_EQ(lull_udp_init(loop, &r.udp, NULL), 0);
    CHECK_EQ(lull_udp_bind(&r.udp, "::1", 0, 0), 0);
    CHECK_EQ(lull_udp_recv_start(&r.udp, rx_recv), 0);
    struct sockaddr_in6 to = {.sin6_family = AF_INET6,
                              .sin6_addr = in6addr_loopback};
    to.sin6_port = htons((uint16_t)lull_udp_local_port(&r.udp));
    static unsigned char big[65528];
    memset(big, 'v', sizeof big);
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    static lull_datagram d, d2;
    CHECK_EQ(lull_udp_send(&tx, &d, big, 65528, (struct sockaddr *)&to, NULL),
             -EMSGSIZE);
    CHECK_EQ(lull_udp_send(&tx, &d, big, 65527, (struct sockaddr *)&to, NULL),
             0);
    run_until(loop, &r.count, 1);
    CHECK_EQ(r.lens[0], 65527);
    CHECK_EQ(r.flags[0], 0);
    /* Connected: the socket's family says it. */
    CHECK_EQ(lull_udp_connect(&r.udp, "::1", lull_udp_local_port(&r.udp)), 0);
    CHECK_EQ(lull_udp_send(&r.udp, &d2, big, 65528, NULL, NULL), -EMSGSIZE);
    CHECK_EQ(lull_udp_send(&r.udp, &d2, big, 65527, NULL, NULL), 0);
    run_until(loop, &r.count, 2);
    CHECK_EQ(r.lens[1], 65527);
    close_tx_rx_and_loop(loop, &tx, &r);
}

/* An IPv4-mapped IPv6 destination (::ffff:127.0.0.1, as a dual-stack
 * socket's sender reads) is an IPv4 one: its bound is IPv4's 65507 bytes,
 * refused by the call as for a sockaddr_in, not accepted to fail in the
 * callback; a socket connected to one (by lull or before) likewise. */
TEST(ipv4_mapped_destination_has_ipv4s_size_bound) {
    lull_loop *loop = new_loop();
    rx r;
    memset(&r, 0, sizeof r);
    r.udp.data = &r;
    CHECK_EQ(lull_udp_init(loop, &r.udp, NULL), 0);
    CHECK_EQ(lull_udp_bind(&r.udp, "::", 0, 0), 0);
    CHECK_EQ(lull_udp_recv_start(&r.udp, rx_recv), 0);
    int port = lull_udp_local_port(&r.udp);
    struct sockaddr_in6 to = {.sin6_family = AF_INET6,
                              .sin6_port = htons((uint16_t)port)};
    CHECK_EQ(inet_pton(AF_INET6, "::ffff:127.0.0.1", &to.sin6_addr), 1);
    static unsigned char big[65508];
    memset(big, 'm', sizeof big);
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    CHECK_EQ(lull_udp_bind(&tx, "::", 0, 0), 0);
    static lull_datagram d, d2;
    CHECK_EQ(lull_udp_send(&tx, &d, big, 65508, (struct sockaddr *)&to, NULL),
             -EMSGSIZE);
    CHECK_EQ(lull_udp_send(&tx, &d, big, 65507, (struct sockaddr *)&to, NULL),
             0);
    run_until(loop, &r.count, 1);
    CHECK_EQ(r.lens[0], 65507);
    CHECK_EQ(r.family[0], AF_INET6); /* as the dual-stack socket reads it */
    /* Connected to the mapped address: the same bound. */
    CHECK_EQ(lull_udp_connect(&tx, "::ffff:127.0.0.1", port), 0);
    CHECK_EQ(lull_udp_send(&tx, &d2, big, 65508, NULL, NULL), -EMSGSIZE);
    CHECK_EQ(lull_udp_send(&tx, &d2, big, 65507, NULL, NULL), 0);
    run_until(loop, &r.count, 2);
    CHECK_EQ(r.lens[1], 65507);
    /* Disconnected, then connected to a plain IPv6 address: 65527 again. */
    CHECK_EQ(lull_udp_connect(&tx, NULL, 0), 0);
    CHECK_EQ(lull_udp_connect(&tx, "::1", port), 0);
    CHECK_EQ(lull_udp_send(&tx, &d2, big, 65508, NULL, NULL), 0);
    run_until(loop, &r.count, 3);
    CHECK_EQ(r.lens[2], 65508);
    /* A socket connected to the mapped address before lull took it. */
    int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    CHECK_EQ(connect(fd, (struct sockaddr *)&to, sizeof to), 0);
    lull_udp adopted;
    CHECK_EQ(lull_udp_init(loop, &adopted, NULL), 0);
    CHECK_EQ(lull_udp_open(&adopted, fd), 0);
    static lull_datagram d3;
    CHECK_EQ(lull_udp_send(&adopted, &d3, big, 65508, NULL, NULL), -EMSGSIZE);
    CHECK_EQ(lull_udp_close(&adopted, NULL), 0);
    close_tx_rx_and_loop(loop, &tx, &r);
}

TEST(hostile_arguments) {
    lull_loop *loop = new_loop();
    lull_udp u;
    lull_udp_options bad = {.recv_batch = 1025};
    CHECK_EQ(lull_udp_init(NULL, &u, NULL), -EINVAL);
    CHECK_EQ(lull_udp_init(loop, NULL, NULL), -EINVAL);
    CHECK_EQ(lull_udp_init(loop, &u, &bad), -EINVAL);
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    static lull_datagram d;
    struct sockaddr_in to = v4(9);
    struct sockaddr un = {.sa_family = AF_UNIX};
    /* Options need a socket; nothing is made for them. */
    CHECK_EQ(lull_udp_set_ttl(&u, 5), -EBADF);
    CHECK_EQ(lull_udp_set_broadcast(&u, true), -EBADF);
    CHECK_EQ(lull_udp_local_port(&u), -EBADF);
    CHECK_EQ(lull_udp_recv_start(&u, rx_recv), -EBADF);
    CHECK_EQ(lull_udp_connect(&u, NULL, 0), -EBADF);
    CHECK_EQ(lull_udp_send(NULL, &d, "x", 1, NULL, NULL), -EINVAL);
    CHECK_EQ(lull_udp_send(&u, NULL, "x", 1, NULL, NULL), -EINVAL);
    CHECK_EQ(lull_udp_send(&u, &d, NULL, 1, (struct sockaddr *)&to, NULL),
             -EINVAL);
    CHECK_EQ(lull_udp_send(&u, &d, "x", 1, NULL, NULL), -EINVAL); /* no peer */
    CHECK_EQ(lull_udp_send(&u, &d, "x", 1, &un, NULL), -EINVAL);
    CHECK_EQ(lull_udp_send(&u, &d, "x", 65508, (struct sockaddr *)&to, NULL),
             -EMSGSIZE);
    CHECK_EQ(lull_udp_bind(&u, "nonsense", 0, 0), -EINVAL);
    CHECK_EQ(lull_udp_bind(&u, NULL, 70000, 0), -EINVAL);
    CHECK_EQ(lull_udp_bind(&u, NULL, -1, 0), -EINVAL);
    CHECK_EQ(lull_udp_bind(&u, NULL, 0, 0x80), -EINVAL);
    CHECK_EQ(lull_udp_bind(&u, NULL, 0, 0), 0);
    CHECK_EQ(lull_udp_bind(&u, NULL, 0, 0), -EBUSY);
    CHECK_EQ(lull_udp_recv_start(&u, NULL), -EINVAL);
    CHECK_EQ(lull_udp_set_ttl(&u, 0), -EINVAL);
    CHECK_EQ(lull_udp_set_ttl(&u, 256), -EINVAL);
    CHECK_EQ(lull_udp_set_ttl(&u, 64), 0);
    CHECK_EQ(lull_udp_set_broadcast(&u, true), 0);
    CHECK_EQ(lull_udp_set_multicast_interface(&u, "x.y"), -EINVAL);
    /* A zero-length datagram is a datagram. */
    CHECK_EQ(lull_udp_send(&u, &d, NULL, 0, (struct sockaddr *)&to, NULL), 0);
    CHECK_EQ(lull_udp_send(&u, &d, NULL, 0, (struct sockaddr *)&to, NULL),
             -EBUSY); /* in flight */
    CHECK_EQ(lull_udp_connect(&u, "127.0.0.1", 0), -EINVAL);
    CHECK_EQ(lull_udp_connect(&u, "127.0.0.1", 9), 0);
    static lull_datagram d2;
    CHECK_EQ(lull_udp_send(&u, &d2, "x", 1, (struct sockaddr *)&to, NULL),
             -EISCONN);
    CHECK_EQ(lull_udp_connect(&u, NULL, 0), 0); /* disconnect */
    CHECK_EQ(lull_udp_send(&u, &d2, "x", 1, NULL, NULL), -EINVAL);
    /* lull_udp_open takes datagram sockets only, and only one. */
    lull_udp o;
    CHECK_EQ(lull_udp_init(loop, &o, NULL), 0);
    int tcp = socket(AF_INET, SOCK_STREAM, 0);
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    CHECK_EQ(lull_udp_open(&o, tcp), -EINVAL);
    CHECK_EQ(lull_udp_open(&o, fds[0]), -EINVAL);
    CHECK_EQ(lull_udp_open(&o, -1), -EINVAL);
    close(tcp);
    close(fds[0]);
    close(fds[1]);
    CHECK_EQ(lull_udp_close(&o, NULL), 0);
    CHECK_EQ(lull_udp_close(NULL, NULL), -EINVAL);
    CHECK_EQ(lull_udp_close(&u, NULL), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_udp_recv_stop(&u), -EINVAL); /* the caller's again */
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A request in flight on one handle is refused by another (-EBUSY), not
 * linked into its queue too, which would cut the first handle's queue; once
 * its callback ran it goes anywhere. */
TEST(request_in_flight_is_refused_by_another_handle) {
    lull_loop *loop = new_loop();
    int sv[2];
    lull_udp tx;
    rx r;
    open_unix_pair(loop, sv, &tx, NULL, &r);
    CHECK_EQ(lull_udp_recv_start(&r.udp, rx_recv), 0);
    static lull_datagram d;
    sends_done = 0;
    d.data = (void *)(intptr_t)0;
    CHECK_EQ(lull_udp_send(&tx, &d, "a", 1, NULL, on_sent), 0);
    CHECK_EQ(lull_udp_send(&r.udp, &d, "b", 1, NULL, on_sent), -EBUSY);
    run_until(loop, &sends_done, 1);
    CHECK_EQ(lull_udp_send(&r.udp, &d, "b", 1, NULL, on_sent), 0);
    run_until(loop, &sends_done, 2);
    CHECK_EQ(send_status[0], 0);
    close_tx_rx_and_loop(loop, &tx, &r);
}

/* A bind that fails leaves the handle as it was: no socket of the
 * failed address's family kept, so a bind to the other family works, and
 * a failed connect the same. */
TEST(failed_bind_leaves_no_socket_behind) {
    lull_loop *loop = new_loop();
    rx r;
    rx_bind(loop, &r, NULL); /* holds 127.0.0.1:port */
    int port = lull_udp_local_port(&r.udp);
    lull_udp u;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    CHECK_EQ(lull_udp_bind(&u, "127.0.0.1", port, 0), -EADDRINUSE);
    CHECK_EQ(lull_udp_local_port(&u), -EBADF); /* no socket kept */
    CHECK_EQ(lull_udp_bind(&u, "::1", 0, 0), 0);
    CHECK(lull_udp_local_port(&u) > 0);
    lull_udp_close(&u, NULL);
    /* A connect refused on the socket it made (broadcast without
     * SO_BROADCAST), then one to the other family. */
    lull_udp v;
    CHECK_EQ(lull_udp_init(loop, &v, NULL), 0);
    CHECK_EQ(lull_udp_connect(&v, "255.255.255.255", 9), -EACCES);
    CHECK_EQ(lull_udp_local_port(&v), -EBADF);
    CHECK_EQ(lull_udp_connect(&v, "::1", 9), 0);
    lull_udp_close(&v, NULL);
    rx_close(&r);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

static void no_accept(lull_server *srv) {
    (void)srv;
}

/* One bind of u to host: its result; the socket closed again. */
static int bind_once(lull_loop *loop, const char *host) {
    lull_udp u;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    int rc = lull_udp_bind(&u, host, 0, 0);
    lull_udp_close(&u, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    return rc;
}

/* An IPv6 zone after '%', an interface's name or index, as libuv's
 * uv_ip6_addr takes it, in every call that takes a numeric host. A
 * link-local address reaches the kernel only with its zone (which finds
 * fe80::1 is not the loopback's: -EADDRNOTAVAIL, where it was refused as
 * not an address). A zone no interface has is -ENODEV. */
TEST(ipv6_zone_by_name_or_index) {
    lull_loop *loop = new_loop();
    unsigned lo = if_nametoindex("lo");
    CHECK(lo > 0);
    char by_index[32];
    snprintf(by_index, sizeof by_index, "[::1%%%u]", lo);
    CHECK_EQ(bind_once(loop, "::1%lo"), 0);
    CHECK_EQ(bind_once(loop, "[::1%lo]"), 0);
    CHECK_EQ(bind_once(loop, by_index), 0);
    CHECK_EQ(bind_once(loop, "fe80::1%lo"), -EADDRNOTAVAIL);
    CHECK_EQ(bind_once(loop, "::1%no-such-if0"), -ENODEV);
    CHECK_EQ(bind_once(loop, "::1%lo]"), -ENODEV); /* a name may hold ']' */
    const char *bad[] = {"::1%",    "%lo", "1.2.3.4%lo",    "::1%0",
                         "[::1%lo", "[]",  "::1%4294967296"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_EQ(bind_once(loop, bad[i]), -EINVAL);
    /* The same parse for TCP. */
    lull_server srv;
    CHECK_EQ(lull_server_listen_tcp(loop, &srv, "::1%lo", 0, 0, no_accept), 0);
    CHECK(lull_server_port(&srv) > 0);
    lull_server_close(&srv);
    CHECK_EQ(lull_server_listen_tcp(loop, &srv, "::1%nope0", 0, 0, no_accept),
             -ENODEV);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A zone's name is looked up through a socket (SIOCGIFINDEX): a process
 * out of fds, or a sandbox that refuses socket(), hears that errno, not
 * -ENODEV or glibc if_nametoindex's ENOENT, as if no such interface. An
 * index needs no socket. */
static void zone_lookup_without_a_socket(void *arg) {
    (void)arg;
    lull_loop *loop = new_loop();
    check_deny_syscalls((const int[]){SYS_socket}, 1, EPERM);
    lull_udp u;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    CHECK_EQ(lull_udp_bind(&u, "::1%lo", 0, 0), -EPERM);
    lull_server srv;
    CHECK_EQ(lull_server_listen_tcp(loop, &srv, "::1%lo", 0, 0, no_accept),
             -EPERM);
    lull_udp_close(&u, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

#ifdef CHECK_SANDBOX_ARCH
/* A sandbox that lets the process open IP sockets alone (systemd's
 * RestrictAddressFamilies=AF_INET AF_INET6): socket(AF_UNIX) fails with
 * EAFNOSUPPORT. A zone's name is still found, as glibc's if_nametoindex
 * finds it, through a socket of a family that opens. */
static void zone_lookup_without_unix_sockets(void *arg) {
    (void)arg;
    lull_loop *loop = new_loop();
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, CHECK_SANDBOX_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                 offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAFNOSUPPORT),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
    CHECK_EQ(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
    CHECK_EQ(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0);
    CHECK_EQ(socket(AF_UNIX, SOCK_DGRAM, 0), -1);
    CHECK_EQ(bind_once(loop, "::1%lo"), 0);
    CHECK_EQ(bind_once(loop, "::1%no-such-if0"), -ENODEV);
    CHECK_EQ(lull_loop_free(loop), 0);
}
#endif

/* A zone's name looked up with SIOCGIFINDEX: where that ioctl says ENXIO
 * for a missing interface, the caller still hears -ENODEV (tcp.c maps it),
 * as it does from kernels that say ENODEV. Played by a seccomp filter. */
static void zone_lookup_says_enxio(void *arg) {
    (void)arg;
#ifdef CHECK_SANDBOX_ARCH
    lull_loop *loop = new_loop();
    check_deny_syscalls((const int[]){SYS_ioctl}, 1, ENXIO);
    CHECK_EQ(bind_once(loop, "::1%no-such-if0"), -ENODEV);
    lull_server srv;
    CHECK_EQ(lull_server_listen_tcp(loop, &srv, "::1%lo", 0, 0, no_accept),
             -ENODEV);
    CHECK_EQ(lull_loop_free(loop), 0);
#endif
}

TEST(ipv6_zone_lookup_enxio_is_no_such_device) {
    CHECK(check_exits_cleanly(zone_lookup_says_enxio, NULL));
}

TEST(ipv6_zone_lookup_reports_the_socket_error) {
    CHECK(check_exits_cleanly(zone_lookup_without_a_socket, NULL));
#ifdef CHECK_SANDBOX_ARCH
    CHECK(check_exits_cleanly(zone_lookup_without_unix_sockets, NULL));
#endif
    lull_loop *loop = new_loop();
    lull_udp u;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    char by_index[32];
    snprintf(by_index, sizeof by_index, "::1%%%u", if_nametoindex("lo"));
    struct rlimit old;
    check_fds_exhaust(&old);
    int by_name = lull_udp_connect(&u, "::1%lo", 9);
    int by_number = lull_udp_bind(&u, by_index, 0, 0);
    check_fds_restore(&old);
    CHECK_EQ(by_name, -EMFILE);
    CHECK_EQ(by_number, -EMFILE); /* the socket() of the bind itself */
    lull_udp_close(&u, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* An IPv6 multicast interface by name (lull_udp_set_multicast_interface,
 * lull_udp_set_membership) reports what kept its lookup from running (no
 * fd for its socket: -EMFILE), where glibc's if_nametoindex said ENOENT
 * and the call said -EINVAL, as for a name no interface has. */
TEST(multicast_interface_lookup_reports_the_socket_error) {
    lull_loop *loop = new_loop();
    lull_udp u;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    CHECK_EQ(lull_udp_bind(&u, "::1", 0, 0), 0);
    CHECK_EQ(lull_udp_set_multicast_interface(&u, "lo"), 0);
    CHECK_EQ(lull_udp_set_multicast_interface(&u, "no-such-if0"), -EINVAL);
    CHECK_EQ(lull_udp_set_multicast_interface(&u, "0"), -EINVAL);
    struct rlimit old;
    check_fds_exhaust(&old);
    int rc = lull_udp_set_multicast_interface(&u, "lo");
    int join = lull_udp_set_membership(&u, "ff02::1:3", "lo", true);
    check_fds_restore(&old);
    CHECK_EQ(rc, -EMFILE);
    CHECK_EQ(join, -EMFILE);
    lull_udp_close(&u, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* An IPv4 destination on an IPv6-only socket: lull_udp_send takes it
 * (mapped), the kernel refuses it, and the callback says so; an IPv6
 * destination on an IPv4 socket is refused at once. */
TEST(ipv4_destination_on_an_ipv6_only_socket) {
    lull_loop *loop = new_loop();
    lull_udp u;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    CHECK_EQ(lull_udp_bind(&u, "::1", 0, LULL_UDP_IPV6ONLY), 0);
    struct sockaddr_in to = v4(9);
    static lull_datagram d;
    d.data = (void *)(intptr_t)0;
    send_status[0] = 1;
    sends_done = 0;
    CHECK_EQ(lull_udp_send(&u, &d, "x", 1, (struct sockaddr *)&to, on_sent), 0);
    run_until(loop, &sends_done, 1);
    printf("v4 on v6only: %d\n", send_status[0]);
    CHECK(send_status[0] < 0);
    lull_udp w;
    CHECK_EQ(lull_udp_init(loop, &w, NULL), 0);
    CHECK_EQ(lull_udp_bind(&w, "127.0.0.1", 0, 0), 0);
    struct sockaddr_in6 to6 = {.sin6_family = AF_INET6,
                               .sin6_port = htons(9),
                               .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    static lull_datagram d2;
    CHECK_EQ(lull_udp_send(&w, &d2, "x", 1, (struct sockaddr *)&to6, NULL),
             -EINVAL);
    lull_udp_close(&u, NULL);
    lull_udp_close(&w, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* An adopted socket that is not bound yet can be bound through the handle
 * (-EBUSY is for one that is); an adopted bound one cannot. */
TEST(adopted_unbound_socket_can_be_bound) {
    lull_loop *loop = new_loop();
    lull_udp u;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    CHECK_EQ(lull_udp_open(&u, fd), 0);
    CHECK_EQ(lull_udp_bind(&u, "127.0.0.1", 0, 0), 0);
    CHECK(lull_udp_local_port(&u) > 0);
    CHECK_EQ(lull_udp_bind(&u, "127.0.0.1", 0, 0), -EBUSY);
    lull_udp_close(&u, NULL);
    lull_udp b;
    CHECK_EQ(lull_udp_init(loop, &b, NULL), 0);
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in any = v4(0);
    CHECK_EQ(bind(fd, (struct sockaddr *)&any, sizeof any), 0);
    CHECK_EQ(lull_udp_open(&b, fd), 0);
    CHECK_EQ(lull_udp_bind(&b, "127.0.0.1", 0, 0), -EBUSY);
    lull_udp_close(&b, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A port the kernel picked (a connect's, or a bind to port 0) it lets go
 * again at the disconnect: the socket is unbound then, so lull_udp_bind
 * binds it (it said -EBUSY, bound already). A port bound by number stays
 * bound through a connect and a disconnect, and the handle with it. */
TEST(disconnect_gives_back_the_port_a_connect_bound) {
    lull_loop *loop = new_loop();
    rx peer;
    rx_bind(loop, &peer, NULL);
    int to = lull_udp_local_port(&peer.udp);
    lull_udp u;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    CHECK_EQ(lull_udp_connect(&u, "127.0.0.1", to), 0);
    CHECK(lull_udp_local_port(&u) > 0);
    CHECK_EQ(lull_udp_connect(&u, NULL, 0), 0);
    CHECK_EQ(lull_udp_local_port(&u), 0);
    CHECK_EQ(lull_udp_bind(&u, "127.0.0.1", 0, 0), 0);
    int port = lull_udp_local_port(&u);
    CHECK(port > 0);
    CHECK_EQ(lull_udp_connect(&u, "127.0.0.1", to), 0);
    CHECK_EQ(lull_udp_connect(&u, NULL, 0), 0);
    CHECK_EQ(lull_udp_local_port(&u), 0);
    CHECK_EQ(lull_udp_bind(&u, "127.0.0.1", port, 0), 0);
    /* Bound by number: kept. */
    CHECK_EQ(lull_udp_connect(&u, "127.0.0.1", to), 0);
    CHECK_EQ(lull_udp_connect(&u, NULL, 0), 0);
    CHECK_EQ(lull_udp_local_port(&u), port);
    CHECK_EQ(lull_udp_bind(&u, "127.0.0.1", 0, 0), -EBUSY);
    lull_udp_close(&u, NULL);
    rx_close(&peer);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* lull_loop_free refuses while a handle reads, and a closed handle's
 * socket is gone. */
TEST(loop_free_waits_for_the_close) {
    lull_loop *loop = new_loop();
    rx r;
    rx_bind(loop, &r, NULL);
    int fd = r.udp.io.fd;
    CHECK_EQ(lull_loop_free(loop), -EBUSY);
    rx_close(&r);
    CHECK_EQ(lull_loop_free(loop), -EBUSY); /* its close callback is owed */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(r.closes, 1);
    CHECK_EQ(fcntl(fd, F_GETFD), -1); /* closed (nothing here reopened it) */
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* An init over a handle the loop still holds (receiving, a send queued,
 * its close callback owed) is refused, as a spawn into a live process or
 * an init of an open tty is: clearing it would leave the socket
 * registered under a handle with no fd (read by nobody, readable for
 * ever: a spin) and the queued tasks' links cut. The handle goes on. */
TEST(init_of_a_live_handle_is_refused) {
    lull_loop *loop = new_loop();
    rx r;
    rx_bind(loop, &r, NULL);
    CHECK_EQ(lull_udp_init(loop, &r.udp, NULL), -EBUSY);
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    static lull_datagram d;
    CHECK_EQ(lull_udp_send(&tx, &d, "x", 1, (struct sockaddr *)&to, NULL), 0);
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), -EBUSY); /* its send queued */
    run_until(loop, &r.count, 1);
    CHECK_EQ(r.seen[0], 'x');
    rx_close(&r);
    CHECK_EQ(lull_udp_init(loop, &r.udp, NULL), -EBUSY); /* close cb owed */
    lull_udp_close(&tx, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(r.closes, 1);
    CHECK_EQ(lull_udp_init(loop, &r.udp, NULL), 0); /* its own again */
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A handle bound and idle (not receiving, nothing queued) still holds its
 * socket: an init over it is refused too. It was accepted, and the loop
 * lost the handle: its socket open for ever (no handle holds the fd now)
 * and its count of open handles never back to 0, so lull_loop_free stayed
 * -EBUSY after every handle was closed. The handle goes on. */
TEST(init_of_a_bound_idle_handle_is_refused) {
    lull_loop *loop = new_loop();
    lull_udp u;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    CHECK_EQ(lull_udp_bind(&u, "127.0.0.1", 0, 0), 0);
    int fd = u.io.fd;
    int port = lull_udp_local_port(&u);
    CHECK(port > 0);
    CHECK_EQ(lull_udp_init(loop, &u, NULL), -EBUSY);
    CHECK_EQ(u.io.fd, fd);
    CHECK_EQ(lull_udp_local_port(&u), port);
    CHECK_EQ(lull_udp_close(&u, NULL), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(fcntl(fd, F_GETFD), -1);           /* closed with the handle */
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0); /* its own again */
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A handle holding a socket on one loop is refused by another loop's init
 * too: the clearing lost the first loop's socket (open for ever, its
 * count of open handles up: lull_loop_free -EBUSY for good). */
TEST(init_of_a_handle_bound_on_another_loop_is_refused) {
    lull_loop *loop = new_loop();
    lull_loop *other = new_loop();
    lull_udp u;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    CHECK_EQ(lull_udp_bind(&u, "127.0.0.1", 0, 0), 0);
    int fd = u.io.fd;
    CHECK_EQ(lull_udp_init(other, &u, NULL), -EBUSY);
    CHECK_EQ(u.io.fd, fd);
    CHECK(u.loop == loop);
    CHECK_EQ(lull_udp_close(&u, NULL), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(fcntl(fd, F_GETFD), -1);
    CHECK_EQ(lull_udp_init(other, &u, NULL), 0); /* closed: free */
    CHECK_EQ(lull_udp_bind(&u, "127.0.0.1", 0, 0), 0);
    CHECK_EQ(lull_udp_close(&u, NULL), 0);
    CHECK_EQ(lull_loop_run(other, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(other), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A handle closed on one loop is that loop's until its close callback
 * has run (the results turn queued there, the sends' callbacks
 * and the close callback owed), socket or not: another loop's init, on
 * this thread or another, must refuse it as it refuses one holding a
 * socket. It was accepted once the socket was gone (the process-wide set
 * held only handles with one): the clearing cut the first loop's queue,
 * and the close callback never ran. */
static int sent_status[2];
static int sent_count;
static void record_sent(lull_datagram *req, int status) {
    (void)req;
    if (sent_count < 2) sent_status[sent_count] = status;
    sent_count++;
}

TEST(init_of_a_handle_closing_on_another_loop_is_refused) {
    lull_loop *loop = new_loop();
    lull_loop *other = new_loop();
    rx r, idle;
    rx_bind(loop, &r, NULL);
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    static lull_datagram d;
    CHECK_EQ(
        lull_udp_send(&tx, &d, "x", 1, (struct sockaddr *)&to, record_sent), 0);
    CHECK_EQ(lull_udp_close(&tx, NULL), 0); /* its send's callback owed */
    rx_close(&r);
    memset(&idle, 0, sizeof idle); /* never held a socket */
    idle.udp.data = &idle;
    CHECK_EQ(lull_udp_init(loop, &idle.udp, NULL), 0);
    CHECK_EQ(lull_udp_close(&idle.udp, rx_closed), 0);
    CHECK_EQ(lull_udp_init(other, &tx, NULL), -EBUSY);
    CHECK_EQ(lull_udp_init(other, &r.udp, NULL), -EBUSY);
    CHECK_EQ(lull_udp_init(other, &idle.udp, NULL), -EBUSY);
    CHECK(tx.loop == loop);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(sent_count, 1);
    CHECK_EQ(sent_status[0], 0); /* it left at the close */
    CHECK_EQ(r.closes, 1);
    CHECK_EQ(idle.closes, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
    /* Each the caller's again after its close callback. */
    CHECK_EQ(lull_udp_init(other, &tx, NULL), 0);
    CHECK_EQ(lull_udp_init(other, &r.udp, NULL), 0);
    CHECK_EQ(lull_udp_init(other, &idle.udp, NULL), 0);
    CHECK_EQ(lull_udp_close(&tx, NULL), 0);
    CHECK_EQ(lull_udp_close(&r.udp, NULL), 0);
    CHECK_EQ(lull_udp_close(&idle.udp, NULL), 0);
    CHECK_EQ(lull_loop_run(other, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(other), 0);
}

/* fork(): datagrams queued before the fork are the parent's to send. A
 * child that called lull_loop_fork and then closes the handle it inherited,
 * or runs its loop (the inherited flush), or sends its own, must not send
 * them again through the shared socket: the peer would read each twice.
 * The child's own datagram leaves; the parent's get -ECANCELED there. */
static int count_waiting(int fd) {
    int n = 0;
    char b[64];
    while (recv(fd, b, sizeof b, MSG_DONTWAIT) >= 0)
        n++;
    return n;
}

static void fork_with_queue(bool child_sends) {
    lull_loop *loop = new_loop();
    int sv[2];
    lull_udp tx;
    rx r;
    open_unix_pair(loop, sv, &tx, NULL, &r);
    CHECK_EQ(send_n(&tx, 3, NULL), 0); /* queued: no flush point yet */
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK_EQ(lull_loop_fork(loop), 0);
        if (child_sends) {
            dgrams[3].data = (void *)(intptr_t)3;
            CHECK_EQ(lull_udp_send(&tx, &dgrams[3], "c", 1, NULL, on_sent), 0);
            run_until(loop, &sends_done, 4);
            CHECK_EQ(send_status[3], 0);
        }
        CHECK_EQ(lull_udp_close(&tx, NULL), 0);
        run_until(loop, &sends_done, child_sends ? 4 : 3);
        for (int i = 0; i < 3; i++)
            CHECK_EQ(send_status[i], -ECANCELED);
        _exit(0);
    }
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    run_until(loop, &sends_done, 3);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(send_status[i], 0);
    CHECK_EQ(count_waiting(sv[1]), child_sends ? 4 : 3);
    close_tx_rx_and_loop(loop, &tx, &r);
}

TEST(fork_child_close_leaves_the_parents_queue_to_the_parent) {
    fork_with_queue(false);
}

TEST(fork_child_send_leaves_the_parents_queue_to_the_parent) {
    fork_with_queue(true);
}

/* An init asks whether the handle is still the loop's (holding a socket,
 * a send queued, its close callback owed). It walked every started fd
 * watcher and the whole ready and flush queues to answer, so each init
 * cost one step per queued task: the answer must not depend on how much is
 * queued. K inits behind 100,000 queued tasks cost about what they cost
 * behind none (thread CPU time, a factor of 4 and 20 ms of slack; the walk
 * made them hundreds of times slower). A handle closed without a socket
 * and owed its close callback is still refused, and is free again once
 * the callback ran. */
static void noop_task(lull_task *t) {
    (void)t;
}

static double udp_inits_cpu_ms(lull_loop *loop, lull_udp *u, int k) {
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    for (int i = 0; i < k; i++)
        CHECK_EQ(lull_udp_init(loop, u, NULL), 0);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    return (double)(b.tv_sec - a.tv_sec) * 1e3 +
           (double)(b.tv_nsec - a.tv_nsec) / 1e6;
}

static int g_udp_closes;
static void count_udp_close(lull_udp *u) {
    (void)u;
    g_udp_closes++;
}

TEST(udp_init_cost_does_not_grow_with_queued_work) {
    enum { QUEUED = 100000, K = 2000 };
    lull_loop *loop = new_loop();
    lull_udp u;
    double idle = udp_inits_cpu_ms(loop, &u, K);
    lull_task *tasks = calloc(QUEUED, sizeof *tasks);
    CHECK(tasks != NULL);
    for (int i = 0; i < QUEUED; i++) {
        lull_task_init(&tasks[i], noop_task);
        lull_task_post(loop, &tasks[i]);
    }
    double busy = udp_inits_cpu_ms(loop, &u, K);
    printf("%d inits: %.2f ms idle, %.2f ms behind %d queued tasks\n", K, idle,
           busy, QUEUED);
    CHECK(busy < 4 * idle + 20);
    CHECK_EQ(lull_udp_close(&u, count_udp_close), 0);
    CHECK_EQ(lull_udp_init(loop, &u, NULL), -EBUSY); /* close cb owed */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(g_udp_closes, 1);
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    free(tasks);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A handle set up without a socket holds nothing, and lull_loop_free
 * accepts its loop. A clean-up that closed it after the loop's teardown
 * (a wrapper's destructor) read the freed loop's owner for its thread
 * check and posted its close turn to the freed loop's ready queue
 * (AddressSanitizer: a use after free). The handle is in the process's
 * set of handles in use from its init now, which the loop's free clears
 * for the handles it leaves: the close asks the set, and a handle not
 * there is the caller's again at once, with no callback (no loop is left
 * to run one), as after a completed close. It can be set up anew. */
TEST(close_after_its_loop_was_freed_touches_no_loop) {
    lull_loop *loop = new_loop();
    lull_udp u;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    CHECK_EQ(lull_udp_recv_stop(&u), 0);
    CHECK_EQ(lull_loop_free(loop), 0); /* no socket: left open */
    CHECK_EQ(lull_udp_close(&u, count_udp_close), 0);
    CHECK_EQ(lull_udp_close(&u, count_udp_close), -EINVAL); /* completed */
    CHECK_EQ(g_udp_closes, 0);
    loop = new_loop();
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    CHECK_EQ(lull_udp_bind(&u, "127.0.0.1", 0, 0), 0);
    CHECK_EQ(lull_loop_free(loop), -EBUSY); /* a socket: held */
    CHECK_EQ(lull_udp_close(&u, count_udp_close), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(g_udp_closes, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A handle left open without a socket at lull_loop_free (allowed) keeps a
 * pointer to the freed loop: a bind, connect, open, send or recv_start
 * made a socket and registered it there, or read the loop's owner (a use
 * after free ASan reports; a debug build's bind returned 0). Each refuses
 * it with -EINVAL now; the options, needing a socket, say -EBADF; a close
 * still returns 0, and an init on a live loop makes it usable again. */
TEST(calls_on_a_handle_its_loop_free_forgot_are_refused) {
    lull_loop *loop = new_loop();
    lull_udp u;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    CHECK_EQ(lull_loop_free(loop), 0); /* no socket: left open */
    static lull_datagram d;
    struct sockaddr_in to = v4(9);
    CHECK_EQ(lull_udp_bind(&u, "127.0.0.1", 0, 0), -EINVAL);
    CHECK_EQ(lull_udp_connect(&u, "127.0.0.1", 9), -EINVAL);
    CHECK_EQ(lull_udp_connect(&u, NULL, 0), -EINVAL);
    CHECK_EQ(lull_udp_send(&u, &d, "x", 1, (struct sockaddr *)&to, NULL),
             -EINVAL);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv), 0);
    CHECK_EQ(lull_udp_open(&u, sv[0]), -EINVAL);
    close(sv[0]);
    close(sv[1]);
    CHECK_EQ(lull_udp_recv_start(&u, rx_recv), -EINVAL);
    CHECK_EQ(lull_udp_set_ttl(&u, 4), -EBADF);
    CHECK_EQ(lull_udp_local_port(&u), -EBADF);
    CHECK_EQ(lull_udp_recv_stop(&u), 0);
    CHECK_EQ(d.udp, NULL); /* the request was not taken */
    loop = new_loop();
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    CHECK_EQ(lull_udp_bind(&u, "127.0.0.1", 0, 0), 0);
    CHECK_EQ(lull_udp_close(&u, count_udp_close), 0);
    g_udp_closes = 0;
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(g_udp_closes, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Two receivers readable in one poll: whichever the loop runs first closes
 * the other inside its recv callback. The other's readiness of that same
 * poll reaches no callback of the closed handle; its close callback runs
 * once, in a later turn. */
static rx *g_pair[2];
static bool g_closed_other;

static void close_other(lull_udp *udp, int status, const void *bytes,
                        size_t len, const struct sockaddr *from,
                        unsigned flags) {
    rx *r = udp->data;
    rx_recv(udp, status, bytes, len, from, flags);
    if (!g_closed_other) {
        g_closed_other = true;
        rx *other = r == g_pair[0] ? g_pair[1] : g_pair[0];
        CHECK_EQ(lull_udp_close(&other->udp, rx_closed), 0);
        CHECK_EQ(other->closes, 0); /* later, not inside the call */
    }
}

TEST(close_of_another_handle_readable_in_the_same_poll) {
    lull_loop *loop = new_loop();
    static rx a, b;
    rx_bind(loop, &a, NULL);
    rx_bind(loop, &b, NULL);
    CHECK_EQ(lull_udp_recv_start(&a.udp, close_other), 0);
    CHECK_EQ(lull_udp_recv_start(&b.udp, close_other), 0);
    g_pair[0] = &a;
    g_pair[1] = &b;
    g_closed_other = false;
    int tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(tx >= 0);
    struct sockaddr_in ta = v4(lull_udp_local_port(&a.udp));
    struct sockaddr_in tb = v4(lull_udp_local_port(&b.udp));
    CHECK_EQ(sendto(tx, "a", 1, 0, (struct sockaddr *)&ta, sizeof ta), 1);
    CHECK_EQ(sendto(tx, "b", 1, 0, (struct sockaddr *)&tb, sizeof tb), 1);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(a.count + b.count, 1);
    rx_close(a.count ? &a : &b);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(a.closes, 1);
    CHECK_EQ(b.closes, 1);
    CHECK_EQ(a.count + b.count, 1);
    close(tx);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A datagram of no bytes is a datagram, as libuv's nread 0 with an
 * address: status 0, len 0, its sender, never taken for "nothing to
 * read" (which lull does not report at all). */
static struct sockaddr_in g_from0;

static void recv_keep_from(lull_udp *udp, int status, const void *bytes,
                           size_t len, const struct sockaddr *from,
                           unsigned flags) {
    rx_recv(udp, status, bytes, len, from, flags);
    if (status == 0 && from->sa_family == AF_INET)
        memcpy(&g_from0, from, sizeof g_from0);
}

TEST(zero_length_datagrams_arrive_with_their_sender) {
    lull_loop *loop = new_loop();
    rx r;
    rx_bind(loop, &r, NULL);
    CHECK_EQ(lull_udp_recv_start(&r.udp, recv_keep_from), 0);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    static lull_datagram d[3];
    for (int i = 0; i < 3; i++)
        CHECK_EQ(lull_udp_send(&tx, &d[i], i == 1 ? "x" : NULL, i == 1,
                               (struct sockaddr *)&to, NULL),
                 0);
    run_until(loop, &r.count, 3);
    CHECK_EQ(r.lens[0], 0);
    CHECK_EQ(r.lens[1], 1);
    CHECK_EQ(r.seen[1], 'x');
    CHECK_EQ(r.lens[2], 0);
    CHECK_EQ(r.errors, 0);
    CHECK_EQ(r.family[0], AF_INET);
    CHECK_EQ(r.family[2], AF_INET);
    CHECK_EQ(ntohs(g_from0.sin_port), lull_udp_local_port(&tx));
    close_tx_rx_and_loop(loop, &tx, &r);
}

/* A stop and a start inside the same callback: the batch goes on, every
 * datagram once, in order, and the loop goes quiet after. */
static void stop_then_start(lull_udp *udp, int status, const void *bytes,
                            size_t len, const struct sockaddr *from,
                            unsigned flags) {
    rx_recv(udp, status, bytes, len, from, flags);
    rx *r = udp->data;
    if (r->count == 2) {
        CHECK_EQ(lull_udp_recv_stop(udp), 0);
        CHECK_EQ(lull_udp_recv_start(udp, stop_then_start), 0);
    }
}

TEST(stop_and_start_inside_the_callback_delivers_each_once) {
    lull_loop *loop = new_loop();
    rx r;
    rx_bind(loop, &r, NULL);
    CHECK_EQ(lull_udp_recv_start(&r.udp, stop_then_start), 0);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    CHECK_EQ(send_n(&tx, 6, (struct sockaddr *)&to), 0);
    run_until(loop, &r.count, 6);
    CHECK(polls_in(loop, 20) < 10);
    CHECK_EQ(r.count, 6);
    for (int i = 0; i < 6; i++)
        CHECK_EQ(r.seen[i], i);
    close_tx_rx_and_loop(loop, &tx, &r);
}

/* Out of fds: the socket a first send, a bind or a connect would make is
 * refused with -EMFILE, the request not taken, nothing kept; with fds
 * back the handle works. */
TEST(out_of_fds_a_handle_without_a_socket_says_emfile) {
    lull_loop *loop = new_loop();
    rx r;
    rx_bind(loop, &r, NULL);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    static lull_datagram d;
    struct rlimit old;
    check_fds_exhaust(&old);
    CHECK_EQ(lull_udp_send(&tx, &d, "x", 1, (struct sockaddr *)&to, on_sent),
             -EMFILE);
    CHECK_EQ(lull_udp_bind(&tx, "127.0.0.1", 0, 0), -EMFILE);
    CHECK_EQ(lull_udp_connect(&tx, "127.0.0.1", 9), -EMFILE);
    check_fds_restore(&old);
    CHECK_EQ(lull_udp_local_port(&tx), -EBADF);
    CHECK_EQ(d.udp, NULL);
    sends_done = 0;
    CHECK_EQ(lull_udp_send(&tx, &d, "x", 1, (struct sockaddr *)&to, on_sent),
             0);
    run_until(loop, &r.count, 1);
    close_tx_rx_and_loop(loop, &tx, &r);
}

/* What hostile_arguments leaves out: ports and hosts out of range or not
 * numeric (a name, 300 digits, ""), an IPv6 destination on an IPv4
 * socket, bad multicast groups and interfaces, and every call on a
 * closed handle. */
TEST(more_hostile_arguments) {
    lull_loop *loop = new_loop();
    lull_udp u;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    CHECK_EQ(lull_udp_connect(&u, "127.0.0.1", 65536), -EINVAL);
    CHECK_EQ(lull_udp_connect(&u, "127.0.0.1", -5), -EINVAL);
    CHECK_EQ(lull_udp_connect(&u, "", 9), -EINVAL);
    CHECK_EQ(lull_udp_connect(&u, "localhost", 9), -EINVAL);
    char longhost[300];
    memset(longhost, '1', sizeof longhost - 1);
    longhost[sizeof longhost - 1] = '\0';
    CHECK_EQ(lull_udp_connect(&u, longhost, 9), -EINVAL);
    CHECK_EQ(lull_udp_bind(&u, longhost, 9, 0), -EINVAL);
    CHECK_EQ(lull_udp_bind(&u, "", 0, 0), -EINVAL);
    CHECK_EQ(lull_udp_bind(&u, "[]", 0, 0), -EINVAL);
    CHECK_EQ(lull_udp_local_port(&u), -EBADF); /* none of these made one */
    CHECK_EQ(lull_udp_set_membership(&u, NULL, NULL, true), -EINVAL);
    CHECK_EQ(lull_udp_bind(&u, "127.0.0.1", 0, 0), 0);
    static lull_datagram d;
    struct sockaddr_in6 to6 = {.sin6_family = AF_INET6,
                               .sin6_port = htons(9),
                               .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    CHECK_EQ(lull_udp_send(&u, &d, "x", 1, (struct sockaddr *)&to6, NULL),
             -EINVAL);
    CHECK_EQ(lull_udp_set_membership(&u, "nonsense", NULL, true), -EINVAL);
    CHECK_EQ(lull_udp_set_membership(&u, "224.0.0.1", "x", true), -EINVAL);
    CHECK_EQ(lull_udp_set_multicast_ttl(&u, -1), -EINVAL);
    CHECK_EQ(lull_udp_set_multicast_ttl(&u, 256), -EINVAL);
    CHECK_EQ(lull_udp_set_multicast_interface(&u, ""), -EINVAL);
    CHECK_EQ(lull_udp_close(&u, NULL), 0);
    CHECK_EQ(lull_udp_close(&u, NULL), 0); /* idempotent while closing */
    CHECK_EQ(lull_udp_bind(&u, NULL, 0, 0), -EINVAL);
    CHECK_EQ(lull_udp_connect(&u, "127.0.0.1", 9), -EINVAL);
    CHECK_EQ(lull_udp_send(&u, &d, "x", 1, NULL, NULL), -EPIPE);
    CHECK_EQ(lull_udp_set_ttl(&u, 4), -EINVAL);
    CHECK_EQ(lull_udp_recv_start(&u, rx_recv), -EINVAL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Every call with a NULL handle refuses (-EINVAL); on a bound socket, the
 * TTLs refuse a negative value and INT_MAX as they refuse 0 and 256, and
 * send a length past any datagram (SIZE_MAX) with -EMSGSIZE. */
TEST(null_handles_and_extreme_values_are_refused) {
    CHECK_EQ(lull_udp_open(NULL, 0), -EINVAL);
    CHECK_EQ(lull_udp_local_port(NULL), -EINVAL);
    CHECK_EQ(lull_udp_recv_stop(NULL), -EINVAL);
    CHECK_EQ(lull_udp_set_broadcast(NULL, true), -EINVAL);
    CHECK_EQ(lull_udp_set_ttl(NULL, 4), -EINVAL);
    CHECK_EQ(lull_udp_set_multicast_ttl(NULL, 4), -EINVAL);
    CHECK_EQ(lull_udp_set_multicast_loop(NULL, true), -EINVAL);
    CHECK_EQ(lull_udp_set_multicast_interface(NULL, NULL), -EINVAL);
    CHECK_EQ(lull_udp_set_membership(NULL, "224.0.0.1", NULL, true), -EINVAL);
    lull_loop *loop = new_loop();
    lull_udp u;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    CHECK_EQ(lull_udp_bind(&u, "127.0.0.1", 0, 0), 0);
    CHECK_EQ(lull_udp_set_ttl(&u, -1), -EINVAL);
    CHECK_EQ(lull_udp_set_ttl(&u, INT_MAX), -EINVAL);
    CHECK_EQ(lull_udp_set_multicast_ttl(&u, INT_MAX), -EINVAL);
    static lull_datagram d;
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons(9),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(lull_udp_send(&u, &d, "x", SIZE_MAX, (struct sockaddr *)&to, NULL),
             -EMSGSIZE);
    CHECK_EQ(u.queued, 0);
    CHECK_EQ(lull_udp_close(&u, NULL), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Unconnected, as libuv's: an ICMP refusal of a datagram sent to a
 * closed port reaches no callback (Linux keeps it from unconnected
 * sockets), the sends succeed, the loop stays quiet and still reads. */
TEST(unconnected_socket_sending_to_a_closed_port_stays_quiet) {
    lull_loop *loop = new_loop();
    rx r;
    rx_bind(loop, &r, NULL);
    struct sockaddr_in to = v4(free_udp_port());
    CHECK_EQ(send_n(&r.udp, 3, (struct sockaddr *)&to), 0);
    run_until(loop, &sends_done, 3);
    CHECK(polls_in(loop, 20) < 10);
    CHECK_EQ(r.errors, 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(send_status[i], 0);
    struct sockaddr_in self = v4(lull_udp_local_port(&r.udp));
    CHECK_EQ(send_n(&r.udp, 1, (struct sockaddr *)&self), 0);
    run_until(loop, &r.count, 1);
    rx_close(&r);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* An unconnected Unix datagram socket (adopted) takes no IP address: a
 * send to one is refused by the call with -EINVAL, as lull.h says of a
 * family the socket does not take, not accepted and failed later in the
 * callback. */
TEST(ip_destination_on_a_unix_socket_is_refused_by_the_call) {
    lull_loop *loop = new_loop();
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    lull_udp u;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    CHECK_EQ(lull_udp_open(&u, fd), 0);
    static lull_datagram d;
    struct sockaddr_in to = v4(9);
    struct sockaddr_in6 to6 = {.sin6_family = AF_INET6,
                               .sin6_port = htons(9),
                               .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    sends_done = 0;
    CHECK_EQ(lull_udp_send(&u, &d, "x", 1, (struct sockaddr *)&to, on_sent),
             -EINVAL);
    CHECK_EQ(lull_udp_send(&u, &d, "x", 1, (struct sockaddr *)&to6, on_sent),
             -EINVAL);
    CHECK_EQ(d.udp, NULL);
    CHECK_EQ(u.queued, 0);
    lull_udp_close(&u, NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(sends_done, 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The close callback is the place to reuse the struct: an init, a bind
 * and a recv_start inside it work, and the handle set up there receives. */
static lull_loop *g_reuse_loop;
static int g_reuse_rc[3];
static void reuse_in_close(lull_udp *udp) {
    rx *r = udp->data;
    r->closes++;
    g_reuse_rc[0] = lull_udp_init(g_reuse_loop, udp, NULL);
    g_reuse_rc[1] = lull_udp_bind(udp, "127.0.0.1", 0, 0);
    g_reuse_rc[2] = lull_udp_recv_start(udp, rx_recv);
}

TEST(set_up_again_inside_its_own_close_callback) {
    lull_loop *loop = new_loop();
    g_reuse_loop = loop;
    rx r;
    rx_bind(loop, &r, NULL);
    CHECK_EQ(lull_udp_close(&r.udp, reuse_in_close), 0);
    for (int i = 0; i < 10 && !r.closes; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(r.closes, 1);
    CHECK_EQ(g_reuse_rc[0], 0);
    CHECK_EQ(g_reuse_rc[1], 0);
    CHECK_EQ(g_reuse_rc[2], 0);
    struct sockaddr_in to = v4(lull_udp_local_port(&r.udp));
    lull_udp tx;
    CHECK_EQ(lull_udp_init(loop, &tx, NULL), 0);
    CHECK_EQ(send_n(&tx, 2, (struct sockaddr *)&to), 0);
    run_until(loop, &r.count, 2);
    close_tx_rx_and_loop(loop, &tx, &r);
}

/* A program that closed its stdin, stdout and stderr, then bound a UDP
 * handle: its socket took 0, where the program's reads of stdin and a
 * child spawned with its stdio inherited would share it. It stays above
 * 2 (as test_stream's sockets_never_take_closed_stdio), and 0 to 2 stay
 * closed. */
TEST(udp_socket_never_takes_closed_stdio) {
    lull_loop *loop = new_loop();
    lull_udp u;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    stdio_gone gone;
    stdio_close(&gone);
    int bound = lull_udp_bind(&u, NULL, 0, 0);
    int fd = u.io.fd;
    stdio_back(&gone);
    CHECK_EQ(bound, 0);
    CHECK(fd > 2);
    CHECK(lull_udp_local_port(&u) > 0);
    CHECK_STDIO_STAYED_CLOSED(&gone);
    CHECK_EQ(lull_udp_close(&u, NULL), 0);
    CHECK(lull_loop_settle(loop) >= 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* lull knows a handle by its address (the process's set of handles in
 * use), so a copy of one set up (memcpy: a struct moved after init) is not
 * it: every call that would make or use a socket refuses the copy, and the
 * handle itself goes on as if no copy were made. */
TEST(a_copy_of_a_set_up_handle_is_refused) {
    lull_loop *loop = new_loop();
    lull_udp u, copy;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    memcpy(&copy, &u, sizeof u);
    static lull_datagram d;
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons(9),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(lull_udp_bind(&copy, "127.0.0.1", 0, 0), -EINVAL);
    CHECK_EQ(lull_udp_connect(&copy, "127.0.0.1", 9), -EINVAL);
    CHECK_EQ(lull_udp_send(&copy, &d, "x", 1, (struct sockaddr *)&to, NULL),
             -EINVAL);
    CHECK_EQ(lull_udp_recv_start(&copy, rx_recv), -EINVAL);
    CHECK_EQ(lull_udp_local_port(&copy), -EBADF);
    CHECK_EQ(lull_udp_bind(&u, "127.0.0.1", 0, 0), 0);
    CHECK(lull_udp_local_port(&u) > 0);
    g_udp_closes = 0;
    CHECK_EQ(lull_udp_close(&u, count_udp_close), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(g_udp_closes, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}
