/* Dialing by name (src/dial.c), on 127.0.0.1 and ::1 only: listeners
 * that accept, a port that refuses, and a "black hole" (a listener whose
 * accept queue is full, so the kernel drops further SYNs: a connect that
 * never answers, without leaving the machine). The attempt delay and the
 * timeout are checked on the virtual clock: the second attempt starts
 * exactly at 250 ms, not before; a refusal starts the next at once; the
 * families interleave; the first to connect wins and the others close;
 * one callback, in a later turn; cancel while resolving and connecting;
 * names from /etc/hosts resolve on the pool; hostile arguments. */
#include "check.h"
#include "stdio_gone.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <lull.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static lull_loop *new_loop(lull_clock clock) {
    lull_loop_options o = {.clock = clock};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    return loop;
}

/* The loopback address of family (AF_INET or AF_INET6) with port, in
 * *ss; returns its length. */
static socklen_t loopback(int family, int port, struct sockaddr_storage *ss) {
    memset(ss, 0, sizeof *ss);
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        return sizeof *a;
    }
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((uint16_t)port);
    a->sin6_addr = in6addr_loopback;
    return sizeof *a;
}

/* A listening socket on addr:0 (family AF_INET or AF_INET6); its port in
 * *port. backlog 0 and one connection queued: a black hole. */
static int listener(int family, int backlog, int *port) {
    /* Non-blocking: accepted() looks, it never waits. */
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    CHECK(fd >= 0);
    struct sockaddr_storage ss;
    socklen_t len = loopback(family, 0, &ss);
    if (bind(fd, (struct sockaddr *)&ss, len) != 0) {
        close(fd);
        return -1;
    }
    CHECK_EQ(listen(fd, backlog), 0);
    CHECK_EQ(getsockname(fd, (struct sockaddr *)&ss, &len), 0);
    *port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                    : ((struct sockaddr_in6 *)&ss)->sin6_port);
    return fd;
}

/* Fills a black hole's accept queue: the next SYN is dropped. */
static int fill_queue(int family, int port) {
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_storage ss;
    socklen_t len = loopback(family, port, &ss);
    CHECK_EQ(connect(fd, (struct sockaddr *)&ss, len), 0);
    return fd;
}

/* A black hole: a connect to port never answers. */
typedef struct hole {
    int lfd;    /* the listener, backlog 0 */
    int filler; /* the connection that fills its queue */
    int port;
} hole;

static hole hole_open(int family) {
    hole h;
    h.lfd = listener(family, 0, &h.port);
    h.filler = fill_queue(family, h.port);
    return h;
}

static void hole_close(hole *h) {
    close(h->filler);
    close(h->lfd);
}

static int closed_port(void) {
    int port;
    int fd = listener(AF_INET, 1, &port);
    close(fd);
    return port;
}

/* A list of addresses, as getaddrinfo would give. */
typedef struct addrs {
    struct addrinfo ai[4];
    struct sockaddr_storage ss[4];
    int n;
} addrs;

static void add(addrs *l, int family, int port) {
    struct addrinfo *ai = &l->ai[l->n];
    struct sockaddr_storage *ss = &l->ss[l->n];
    memset(ai, 0, sizeof *ai);
    ai->ai_family = family;
    ai->ai_socktype = SOCK_STREAM;
    ai->ai_addr = (struct sockaddr *)ss;
    ai->ai_addrlen = loopback(family, port, ss);
    if (l->n) l->ai[l->n - 1].ai_next = ai;
    l->n++;
}

static int dial_calls, dial_status;

static void on_stream_close(lull_endpoint *ep, int reason) {
    (void)ep, (void)reason;
}

static void on_dial(lull_dial *d, int status) {
    dial_calls++;
    dial_status = status;
    if (status == 0) {
        lull_endpoint_set_callbacks(&d->stream->ep, NULL, NULL,
                                    on_stream_close);
        lull_endpoint_close(&d->stream->ep, 0);
    }
}

static void reset(void) {
    dial_calls = dial_status = 0;
}

/* Settles the virtual clock's loop until the dial has reported. */
static void settle_until_dialed(lull_loop *loop) {
    for (int i = 0; i < 100 && !dial_calls; i++)
        CHECK(lull_loop_settle(loop) >= 0);
}

/* The one accepted connection of a listener, or -1. */
static int accepted(int lfd) {
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) close(fd);
    return fd >= 0;
}

TEST(numeric_host_connects_without_a_pool) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    int port, lfd = listener(AF_INET, 8, &port);
    lull_dial d = {0};
    lull_stream s;
    CHECK_EQ(
        lull_dial_start(loop, NULL, &d, &s, "127.0.0.1", port, NULL, on_dial),
        0);
    CHECK_EQ(dial_calls, 0); /* never inside the call */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, 0);
    CHECK_EQ(d.attempts, 1);
    CHECK_EQ(accepted(lfd), 1);
    CHECK_EQ(lull_dial_cancel(&d), -EINVAL); /* done: not dialing */
    close(lfd);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST_THREADED(name_resolves_on_the_pool) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    int port, lfd = listener(AF_INET, 8, &port);
    lull_dial d = {0};
    lull_stream s;
    lull_dial_options o = {.family = AF_INET}; /* only one family */
    CHECK_EQ(
        lull_dial_start(loop, NULL, &d, &s, "localhost", port, &o, on_dial), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, 0);
    CHECK_EQ(accepted(lfd), 1);
    close(lfd);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST_THREADED(a_name_with_no_address_of_the_family) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    lull_dial d = {0};
    lull_stream s;
    lull_dial_options o = {.family = AF_INET6};
    CHECK_EQ(lull_dial_start(loop, NULL, &d, &s, "127.0.0.1", 80, &o, on_dial),
             0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, -EHOSTUNREACH);
    CHECK(d.gai_error != 0);
    CHECK_EQ(d.attempts, 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(refused_address_starts_the_next_at_once) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    int port, lfd = listener(AF_INET, 8, &port);
    addrs l = {0};
    add(&l, AF_INET, closed_port());
    add(&l, AF_INET, port);
    lull_dial d = {0};
    lull_stream s;
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, NULL, on_dial), 0);
    settle_until_dialed(loop);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, 0);
    CHECK_EQ(d.attempts, 2);
    CHECK_U64_EQ(lull_loop_now(loop), 0); /* no time passed */
    CHECK_EQ(accepted(lfd), 1);
    CHECK(lull_loop_settle(loop) >= 0);
    close(lfd);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(silent_address_waits_250_ms_then_the_next_wins) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    hole h = hole_open(AF_INET);
    int port, lfd = listener(AF_INET, 8, &port);
    addrs l = {0};
    add(&l, AF_INET, h.port);
    add(&l, AF_INET, port);
    lull_dial d = {0};
    lull_stream s;
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, NULL, on_dial), 0);
    CHECK(lull_loop_settle(loop) >= 0);
    CHECK_EQ(d.attempts, 1);
    lull_loop_advance(loop, LULL_MS(249));
    CHECK_EQ(d.attempts, 1); /* not early */
    CHECK_EQ(dial_calls, 0);
    lull_loop_advance(loop, LULL_MS(1));
    CHECK_EQ(d.attempts, 2);
    settle_until_dialed(loop);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, 0);
    CHECK_EQ(accepted(lfd), 1); /* the second address won */
    CHECK(lull_loop_settle(loop) >= 0);
    close(lfd);
    hole_close(&h);
    CHECK_EQ(lull_loop_free(loop), 0); /* the silent attempt was closed */
}

/* A timeout does not hold back the next attempt: with 10 s to go, the
 * second address still starts 250 ms after the first (the timer is armed
 * for the earlier of the two). */
TEST(next_attempt_starts_before_a_later_deadline) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    hole h = hole_open(AF_INET);
    int port, lfd = listener(AF_INET, 8, &port);
    addrs l = {0};
    add(&l, AF_INET, h.port);
    add(&l, AF_INET, port);
    lull_dial d = {0};
    lull_stream s;
    lull_dial_options o = {.timeout_ns = LULL_S(10)};
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, &o, on_dial), 0);
    CHECK(lull_loop_settle(loop) >= 0);
    CHECK_EQ(d.attempts, 1);
    lull_loop_advance(loop, LULL_MS(250));
    CHECK_EQ(d.attempts, 2);
    settle_until_dialed(loop);
    CHECK_EQ(dial_status, 0);
    CHECK_EQ(accepted(lfd), 1);
    CHECK(lull_loop_settle(loop) >= 0);
    close(lfd);
    hole_close(&h);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ... and a deadline before the next attempt ends the dial on time, not
 * at that attempt's start. */
TEST(deadline_before_the_next_attempt_ends_the_dial_on_time) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    hole h = hole_open(AF_INET);
    int port, lfd = listener(AF_INET, 8, &port);
    addrs l = {0};
    add(&l, AF_INET, h.port);
    add(&l, AF_INET, port);
    lull_dial d = {0};
    lull_stream s;
    lull_dial_options o = {.timeout_ns = LULL_MS(100)};
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, &o, on_dial), 0);
    CHECK(lull_loop_settle(loop) >= 0);
    lull_loop_advance(loop, LULL_MS(100) - 1);
    CHECK_EQ(dial_calls, 0);
    lull_loop_advance(loop, 1);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, -ETIMEDOUT);
    CHECK_EQ(d.attempts, 1); /* the second never started */
    CHECK_EQ(accepted(lfd), 0);
    close(lfd);
    hole_close(&h);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* IPv6 first, then IPv4, then IPv6 again: with the first silent, the
 * second attempt is the IPv4 address, not the second IPv6 one. */
TEST(families_interleave) {
    int probe, p6 = listener(AF_INET6, 8, &probe);
    if (p6 < 0) {
        printf("skipped: no IPv6 loopback here\n");
        return;
    }
    close(p6);
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    hole h = hole_open(AF_INET6);
    int port6, l6 = listener(AF_INET6, 8, &port6);
    int port4, l4 = listener(AF_INET, 8, &port4);
    addrs l = {0};
    add(&l, AF_INET6, h.port);
    add(&l, AF_INET6, port6);
    add(&l, AF_INET, port4);
    lull_dial d = {0};
    lull_stream s;
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, NULL, on_dial), 0);
    CHECK(lull_loop_settle(loop) >= 0);
    lull_loop_advance(loop, LULL_MS(250));
    settle_until_dialed(loop);
    CHECK_EQ(dial_status, 0);
    CHECK_EQ(d.attempts, 2);
    CHECK_EQ(accepted(l4), 1);
    CHECK_EQ(accepted(l6), 0);
    CHECK(lull_loop_settle(loop) >= 0);
    close(l4);
    close(l6);
    hole_close(&h);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(timeout_ends_the_dial) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    hole h = hole_open(AF_INET);
    addrs l = {0};
    add(&l, AF_INET, h.port);
    lull_dial d = {0};
    lull_stream s;
    lull_dial_options o = {.timeout_ns = LULL_S(3)};
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, &o, on_dial), 0);
    lull_loop_advance(loop, LULL_S(3) - 1);
    CHECK_EQ(dial_calls, 0);
    lull_loop_advance(loop, 1);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, -ETIMEDOUT);
    hole_close(&h);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The stream options' connect_timeout_ns, which lull_stream_connect_tcp
 * honours, bounds a dial too (the earlier of it and timeout_ns): a dial
 * given it for a host that never answers ended only when the kernel gave
 * up on the SYNs, minutes later, the option silently ignored. */
TEST(stream_connect_timeout_ends_the_dial) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    hole h = hole_open(AF_INET);
    addrs l = {0};
    add(&l, AF_INET, h.port);
    lull_dial d = {0};
    lull_stream s;
    lull_stream_options so = {.connect_timeout_ns = LULL_S(2)};
    lull_dial_options o = {.stream = &so};
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, &o, on_dial), 0);
    lull_loop_advance(loop, LULL_S(2) - 1);
    CHECK_EQ(dial_calls, 0);
    lull_loop_advance(loop, 1);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, -ETIMEDOUT);
    /* timeout_ns earlier than it: that one ends the dial. */
    reset();
    o.timeout_ns = LULL_S(1);
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, &o, on_dial), 0);
    lull_loop_advance(loop, LULL_S(1));
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, -ETIMEDOUT);
    /* Later than it: the connect timeout still does. */
    reset();
    o.timeout_ns = LULL_S(5);
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, &o, on_dial), 0);
    lull_loop_advance(loop, LULL_S(2) - 1);
    CHECK_EQ(dial_calls, 0);
    lull_loop_advance(loop, 1);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, -ETIMEDOUT);
    hole_close(&h);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The deadline already past when an attempt fails and the next starts
 * (the refusal's fd callback runs before the due timers of its turn): the
 * dial times out at once, not when a silent next address answers (never).
 * Re-armed for "deadline - now", a wrapped difference, its timer lay
 * centuries ahead. */
TEST(deadline_passed_before_a_refusal_is_seen_still_times_out) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    hole h = hole_open(AF_INET);
    addrs l = {0};
    add(&l, AF_INET, closed_port());
    add(&l, AF_INET, h.port);
    lull_dial d = {0};
    lull_stream s;
    lull_dial_options o = {.timeout_ns = LULL_MS(1),
                           .attempt_delay_ns = LULL_S(10)};
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, &o, on_dial), 0);
    /* The refusal arrives (the socket says so) and the deadline passes,
     * the loop not yet told of either. */
    CHECK(d.io[0].fd >= 0);
    struct pollfd pfd = {.fd = d.io[0].fd, .events = POLLOUT};
    CHECK_EQ(poll(&pfd, 1, 5000), 1);
    check_spin_ns(LULL_MS(5));
    uint64_t give_up = check_clock_ns() + LULL_S(5);
    while (!dial_calls && check_clock_ns() < give_up)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, -ETIMEDOUT);
    CHECK_EQ(d.attempts, 2);
    hole_close(&h);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(every_address_refused_gives_the_last_error) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    addrs l = {0};
    add(&l, AF_INET, closed_port());
    add(&l, AF_INET, closed_port());
    lull_dial d = {0};
    lull_stream s;
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, NULL, on_dial), 0);
    settle_until_dialed(loop);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, -ECONNREFUSED);
    CHECK_EQ(d.attempts, 2);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(cancel_while_connecting) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    hole h = hole_open(AF_INET);
    addrs l = {0};
    add(&l, AF_INET, h.port);
    lull_dial d = {0};
    lull_stream s;
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, NULL, on_dial), 0);
    CHECK(lull_loop_settle(loop) >= 0);
    CHECK_EQ(lull_dial_cancel(&d), 0);
    CHECK_EQ(lull_dial_cancel(&d), 0); /* decided: nothing more */
    CHECK_EQ(dial_calls, 0);           /* not inside the call */
    CHECK(lull_loop_settle(loop) >= 0);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, -ECANCELED);
    CHECK_EQ(lull_dial_cancel(&d), -EINVAL);
    hole_close(&h);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST_THREADED(cancel_while_resolving) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    lull_dial d = {0};
    lull_stream s;
    CHECK_EQ(lull_dial_start(loop, NULL, &d, &s, "localhost", 9, NULL, on_dial),
             0);
    CHECK_EQ(lull_dial_cancel(&d), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(dial_calls, 1); /* once, after the pool gave the lookup back */
    CHECK_EQ(dial_status, -ECANCELED);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(hostile_arguments) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    lull_dial d = {0};
    lull_stream s;
    addrs l = {0};
    add(&l, AF_INET, 9);
    lull_dial_options bad = {.family = AF_UNIX};
    CHECK_EQ(lull_dial_start(NULL, NULL, &d, &s, "x", 1, NULL, on_dial),
             -EINVAL);
    CHECK_EQ(lull_dial_start(loop, NULL, NULL, &s, "x", 1, NULL, on_dial),
             -EINVAL);
    CHECK_EQ(lull_dial_start(loop, NULL, &d, NULL, "x", 1, NULL, on_dial),
             -EINVAL);
    CHECK_EQ(lull_dial_start(loop, NULL, &d, &s, NULL, 1, NULL, on_dial),
             -EINVAL);
    CHECK_EQ(lull_dial_start(loop, NULL, &d, &s, "", 1, NULL, on_dial),
             -EINVAL);
    CHECK_EQ(lull_dial_start(loop, NULL, &d, &s, "x", 0, NULL, on_dial),
             -EINVAL);
    CHECK_EQ(lull_dial_start(loop, NULL, &d, &s, "x", 65536, NULL, on_dial),
             -EINVAL);
    CHECK_EQ(lull_dial_start(loop, NULL, &d, &s, "x", 1, NULL, NULL), -EINVAL);
    CHECK_EQ(lull_dial_start(loop, NULL, &d, &s, "x", 1, &bad, on_dial),
             -EINVAL);
    /* Stream options no TCP stream takes, before any connect. */
    lull_stream_options unknown = {.flags = 0x80000000u};
    lull_stream_options fds = {.flags = LULL_STREAM_FDS};
    lull_dial_options with_unknown = {.stream = &unknown};
    lull_dial_options with_fds = {.stream = &fds};
    CHECK_EQ(lull_dial_start(loop, NULL, &d, &s, "127.0.0.1", 1, &with_unknown,
                             on_dial),
             -EINVAL);
    CHECK_EQ(
        lull_dial_start(loop, NULL, &d, &s, "127.0.0.1", 1, &with_fds, on_dial),
        -ENOTSUP);
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, &with_fds, on_dial),
             -ENOTSUP);
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, NULL, NULL, on_dial), -EINVAL);
    CHECK_EQ(lull_dial_cancel(NULL), -EINVAL);
    CHECK_EQ(lull_dial_cancel(&d), -EINVAL);
    reset();
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, NULL, on_dial), 0);
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, NULL, on_dial), -EBUSY);
    CHECK_EQ(lull_dial_cancel(&d), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A dial started again inside its own callback: the handle is done when
 * the callback runs, so it may be reused there, and the second dial
 * reports once in a later turn. Its stream may not be the first one while
 * that one's close is still to be reported: that is -EBUSY, never a
 * stream overwritten under the loop. */
static int redial_port;
static lull_loop *redial_loop;
static lull_stream redial_streams[2];
static int redial_busy;

static void on_dial_redial(lull_dial *d, int status) {
    on_dial(d, status);
    if (dial_calls != 1) return;
    redial_busy =
        lull_dial_start(redial_loop, NULL, d, &redial_streams[0], "127.0.0.1",
                        redial_port, NULL, on_dial_redial);
    CHECK_EQ(lull_dial_start(redial_loop, NULL, d, &redial_streams[1],
                             "127.0.0.1", redial_port, NULL, on_dial_redial),
             0);
}

TEST(dial_again_inside_its_own_callback) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    redial_loop = loop;
    int lfd = listener(AF_INET, 8, &redial_port);
    lull_dial d = {0};
    CHECK_EQ(lull_dial_start(loop, NULL, &d, &redial_streams[0], "127.0.0.1",
                             redial_port, NULL, on_dial_redial),
             0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(redial_busy, -EBUSY); /* the first stream's close was queued */
    CHECK_EQ(dial_calls, 2);
    CHECK_EQ(dial_status, 0);
    CHECK_EQ(accepted(lfd) + accepted(lfd), 2);
    /* Once its on_close ran, the first stream dials again. */
    CHECK_EQ(lull_dial_start(loop, NULL, &d, &redial_streams[0], "127.0.0.1",
                             redial_port, NULL, on_dial),
             0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(dial_calls, 3);
    CHECK_EQ(dial_status, 0);
    close(lfd);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Two dials done in the same turn: the first's callback cancels the
 * second, whose own callback then says -ECANCELED once, never success. */
static lull_dial sib[2];
static int sib_status[2], sib_calls[2];
static void on_sibling(lull_dial *d, int status) {
    int i = d == &sib[1];
    sib_calls[i]++;
    sib_status[i] = status;
    if (status == 0) {
        lull_endpoint_set_callbacks(&d->stream->ep, NULL, NULL,
                                    on_stream_close);
        lull_endpoint_close(&d->stream->ep, 0);
    }
    if (i == 0) (void)lull_dial_cancel(&sib[1]);
}

TEST(cancel_a_sibling_inside_a_callback) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    int port, lfd = listener(AF_INET, 8, &port);
    lull_stream s[2];
    memset(sib, 0, sizeof sib);
    for (int i = 0; i < 2; i++)
        CHECK_EQ(lull_dial_start(loop, NULL, &sib[i], &s[i], "127.0.0.1", port,
                                 NULL, on_sibling),
                 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(sib_calls[0], 1);
    CHECK_EQ(sib_calls[1], 1);
    CHECK_EQ(sib_status[0], 0);
    /* Cancelled before it reported, or already reported: never twice. */
    CHECK(sib_status[1] == -ECANCELED || sib_status[1] == 0);
    close(lfd);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* No fd left for the socket: the dial reports the error, leaving no fd
 * and no handle behind. */
TEST(dial_out_of_fds) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    int port, lfd = listener(AF_INET, 8, &port);
    struct rlimit old, rl;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
    int hi = lfd; /* fill every fd below a low limit */
    int fill[64], nfill = 0;
    rl = old;
    rl.rlim_cur = (rlim_t)(hi + 1 + 8);
    CHECK(rl.rlim_cur <= 64 + (rlim_t)hi);
    for (;;) {
        int fd = dup(lfd);
        if (fd < 0 || fd >= (int)rl.rlim_cur) {
            if (fd >= 0) close(fd);
            break;
        }
        fill[nfill++] = fd;
        if (nfill == 64) break;
    }
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
    lull_dial d = {0};
    lull_stream s;
    int rc =
        lull_dial_start(loop, NULL, &d, &s, "127.0.0.1", port, NULL, on_dial);
    if (rc == 0) {
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
        CHECK_EQ(dial_calls, 1);
        CHECK_EQ(dial_status, -EMFILE);
    } else {
        CHECK_EQ(rc, -EMFILE);
    }
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
    for (int i = 0; i < nfill; i++)
        close(fill[i]);
    CHECK_EQ(accepted(lfd), 0);
    close(lfd);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A name that cannot be resolved because the process is out of fds
 * (getaddrinfo's EAI_SYSTEM, errno EMFILE: it could not open /etc/hosts)
 * is the process's trouble, not the host's: the dial says -EMFILE, as a
 * numeric host's socket() would, not -EHOSTUNREACH, and d->gai_error
 * still holds getaddrinfo's code. */
TEST_THREADED(dial_name_out_of_fds_says_emfile) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    lull_pool *pool;
    CHECK_EQ(lull_pool_new(&pool, &(lull_pool_options){.threads = 1}), 0);
    struct rlimit old, rl;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
    int lo = dup(0); /* the lowest free fd: fill from here to the limit */
    CHECK(lo >= 0);
    close(lo);
    rl = old;
    rl.rlim_cur = (rlim_t)lo + 4;
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
    int fill[8], nfill = 0;
    for (int fd; nfill < 8 && (fd = dup(0)) >= 0;)
        fill[nfill++] = fd;
    CHECK_EQ(nfill, 4);
    lull_dial d = {0};
    lull_stream s;
    /* One family: glibc says EAI_SYSTEM for it (for AF_UNSPEC it folds
     * the failure into EAI_NONAME, errno EMFILE). */
    lull_dial_options o = {.family = AF_INET};
    CHECK_EQ(lull_dial_start(loop, pool, &d, &s, "localhost", 9, &o, on_dial),
             0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
    for (int i = 0; i < nfill; i++)
        close(fill[i]);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(d.gai_error, EAI_SYSTEM);
    CHECK_EQ(dial_status, -EMFILE);
    CHECK_EQ(lull_pool_free(pool), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The loop cannot be freed under a dial that is still resolving: it says
 * so, and frees once the dial is cancelled and has reported. */
TEST_THREADED(loop_free_while_resolving) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    lull_dial d = {0};
    lull_stream s;
    CHECK_EQ(lull_dial_start(loop, NULL, &d, &s, "localhost", 9, NULL, on_dial),
             0);
    CHECK_EQ(lull_loop_free(loop), -EBUSY);
    CHECK_EQ(lull_dial_cancel(&d), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, -ECANCELED);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* LULL_STREAM_NAGLE asks for Nagle's algorithm left on. A dialed stream
 * is opened as lull_stream_open leaves one, with opts->stream: the flag
 * holds there too, and without it TCP_NODELAY is on. */
static int nodelay_of(lull_stream *s) {
    int v = -1;
    socklen_t len = sizeof v;
    CHECK_EQ(getsockopt(lull_stream_fd(s), IPPROTO_TCP, TCP_NODELAY, &v, &len),
             0);
    return v != 0;
}

static int nagle_nodelay = -1;

static void on_dial_nagle(lull_dial *d, int status) {
    if (status == 0) nagle_nodelay = nodelay_of(d->stream);
    on_dial(d, status);
}

TEST(nagle_flag_holds_on_a_dialed_stream) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    int port, lfd = listener(AF_INET, 8, &port);
    for (int nagle = 0; nagle < 2; nagle++) {
        reset();
        nagle_nodelay = -1;
        lull_stream_options so = {.flags = nagle ? LULL_STREAM_NAGLE : 0};
        lull_dial_options o = {.stream = &so};
        lull_dial d = {0};
        lull_stream s;
        CHECK_EQ(lull_dial_start(loop, NULL, &d, &s, "127.0.0.1", port, &o,
                                 on_dial_nagle),
                 0);
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
        CHECK_EQ(dial_status, 0);
        CHECK_EQ(nagle_nodelay, !nagle);
        CHECK_EQ(accepted(lfd), 1);
    }
    close(lfd);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* timeout_ns bounds the whole dial, the lookup's wait included: a lookup
 * still queued behind a busy pool when the timeout comes is cancelled,
 * and the callback says -ETIMEDOUT then, not whenever the pool gets to
 * the name. */
static int blocker_pipe[2];

static int blocker_run(lull_work *w) {
    (void)w;
    char c;
    while (read(blocker_pipe[0], &c, 1) < 0) {
    }
    return 0;
}

static void blocker_done(lull_work *w, int status) {
    (void)w, (void)status;
}

TEST_THREADED(timeout_ends_a_dial_whose_lookup_waits_on_the_pool) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_pool *pool = NULL;
    lull_pool_options po = {.threads = 1};
    CHECK_EQ(lull_pool_new(&pool, &po), 0);
    CHECK_EQ(pipe(blocker_pipe), 0);
    lull_work blocker;
    CHECK_EQ(lull_work_init(&blocker, blocker_run, blocker_done), 0);
    CHECK_EQ(lull_work_submit(loop, pool, &blocker), 0);
    lull_dial d = {0};
    lull_stream s;
    lull_dial_options o = {.timeout_ns = LULL_MS(100)};
    CHECK_EQ(lull_dial_start(loop, pool, &d, &s, "localhost", 9, &o, on_dial),
             0);
    lull_loop_advance(loop, LULL_MS(100));
    settle_until_dialed(loop);
    CHECK_EQ(dial_calls, 1); /* the pool is still busy */
    CHECK_EQ(dial_status, -ETIMEDOUT);
    CHECK_EQ(write(blocker_pipe[1], "x", 1), 1);
    while (lull_work_busy(&blocker))
        CHECK(lull_loop_settle(loop) >= 0);
    CHECK_EQ(dial_calls, 1);
    close(blocker_pipe[0]);
    close(blocker_pipe[1]);
    CHECK_EQ(lull_pool_free(pool), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The pool closed while the dial's lookup waits on it: the pool hands the
 * lookup back cancelled, but the caller cancelled nothing. The dial said
 * -ECANCELED, which its own docs give to lull_dial_cancel (a caller that
 * retries on failure and not on its own cancel stopped dialing for good),
 * with gai_error -ECANCELED, no getaddrinfo code. It is the pool's refusal,
 * as a start on that pool would say. */
TEST_THREADED(pool_closed_under_a_waiting_lookup_says_eshutdown) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_pool *pool = NULL;
    CHECK_EQ(lull_pool_new(&pool, &(lull_pool_options){.threads = 1}), 0);
    CHECK_EQ(pipe(blocker_pipe), 0);
    lull_work blocker;
    CHECK_EQ(lull_work_init(&blocker, blocker_run, blocker_done), 0);
    CHECK_EQ(lull_work_submit(loop, pool, &blocker), 0);
    lull_dial d = {0};
    lull_stream s;
    CHECK_EQ(lull_dial_start(loop, pool, &d, &s, "localhost", 9, NULL, on_dial),
             0);
    lull_pool_close(pool); /* the lookup still queued behind the blocker */
    settle_until_dialed(loop);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, -ESHUTDOWN);
    CHECK_EQ(d.gai_error, 0);
    CHECK_EQ(lull_dial_start(loop, pool, &d, &s, "localhost", 9, NULL, on_dial),
             -ESHUTDOWN); /* what a start says now */
    CHECK_EQ(write(blocker_pipe[1], "x", 1), 1);
    while (lull_work_busy(&blocker))
        CHECK(lull_loop_settle(loop) >= 0);
    close(blocker_pipe[0]);
    close(blocker_pipe[1]);
    CHECK_EQ(lull_pool_free(pool), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A resolver that hangs: a lookup of SLOW_NAME (and only that name)
 * waits on a pipe until the case writes to it, then answers as for
 * localhost. slow_started says it is waiting. */
#define SLOW_NAME "slow.lull.test"
static int slow_pipe[2] = {-1, -1};
static int slow_started;

int __real_getaddrinfo(const char *node, const char *service,
                       const struct addrinfo *hints, struct addrinfo **res);

/* A lookup of FORKED_NAME answers as for localhost, then holds its
 * thread until the case writes to forked_pipe: the state of a pool
 * thread whose getaddrinfo returned, its answer in the request, waiting
 * for the pool's lock that a fork() holds. forked_list is that answer;
 * freeaddrinfo (wrapped) says whether it was freed. */
#define FORKED_NAME "forked.lull.test"
static int forked_pipe[2] = {-1, -1};
static int forked_started;
static struct addrinfo *forked_list;
static bool forked_list_freed;

static int answer_then_hold(const char *service, const struct addrinfo *hints,
                            struct addrinfo **res) {
    int rc = __real_getaddrinfo("localhost", service, hints, res);
    CHECK_EQ(rc, 0);
    forked_list = *res;
    __atomic_store_n(&forked_started, 1, __ATOMIC_RELEASE);
    char c;
    while (read(forked_pipe[0], &c, 1) < 0) {
    }
    return rc;
}

/* The answer of the last SLOW_NAME lookup, and whether it was freed. With
 * slow_hold_drop, its freeing (a lookup let go, dropped on the pool's
 * thread) first says so (slow_dropping), then waits until the thread
 * slow_forker has forked or waits for a lock in fork() (check.h). */
static struct addrinfo *slow_list;
static bool slow_list_freed;
static bool slow_hold_drop;
static int slow_dropping, slow_forked, slow_forker;

static void hold_the_drop(void) {
    __atomic_store_n(&slow_dropping, 1, __ATOMIC_RELEASE);
    while (
        !__atomic_load_n(&slow_forked, __ATOMIC_ACQUIRE) &&
        !check_in_futex_wait(__atomic_load_n(&slow_forker, __ATOMIC_ACQUIRE)))
        sched_yield();
}

/* A lookup of FAILING_NAME fails with failing_code and errno
 * failing_errno; one of UNIX_ONLY_NAME answers one address, of neither
 * IP family (unix_only, which freeaddrinfo leaves alone). */
#define FAILING_NAME   "failing.lull.test"
#define UNIX_ONLY_NAME "unix-only.lull.test"
static int failing_code, failing_errno;
static struct sockaddr_un unix_only_addr = {.sun_family = AF_UNIX};
static struct addrinfo unix_only = {.ai_family = AF_UNIX,
                                    .ai_socktype = SOCK_STREAM,
                                    .ai_addrlen = sizeof unix_only_addr,
                                    .ai_addr =
                                        (struct sockaddr *)&unix_only_addr};

void __real_freeaddrinfo(struct addrinfo *ai);
void __wrap_freeaddrinfo(struct addrinfo *ai) {
    if (ai == &unix_only) return; /* never allocated */
    if (ai && ai == forked_list) forked_list_freed = true;
    bool slow = ai && ai == slow_list;
    if (slow && slow_hold_drop) hold_the_drop();
    __real_freeaddrinfo(ai);
    if (slow) __atomic_store_n(&slow_list_freed, true, __ATOMIC_RELEASE);
}

/* getaddrinfo calls that may ask a resolver (no AI_NUMERICHOST). */
static int name_lookups;

int __wrap_getaddrinfo(const char *node, const char *service,
                       const struct addrinfo *hints, struct addrinfo **res) {
    if (!(hints && (hints->ai_flags & AI_NUMERICHOST)))
        __atomic_fetch_add(&name_lookups, 1, __ATOMIC_RELAXED);
    if (node && strcmp(node, FAILING_NAME) == 0) {
        errno = failing_errno;
        return failing_code;
    }
    if (node && strcmp(node, UNIX_ONLY_NAME) == 0) {
        *res = &unix_only;
        return 0;
    }
    if (node && strcmp(node, FORKED_NAME) == 0 &&
        !(hints && (hints->ai_flags & AI_NUMERICHOST)))
        return answer_then_hold(service, hints, res);
    if (!node || strcmp(node, SLOW_NAME) != 0 ||
        (hints && (hints->ai_flags & AI_NUMERICHOST))) /* not a lookup */
        return __real_getaddrinfo(node, service, hints, res);
    __atomic_store_n(&slow_started, 1, __ATOMIC_RELEASE);
    char c;
    while (read(slow_pipe[0], &c, 1) < 0) {
    }
    int rc = __real_getaddrinfo("localhost", service, hints, res);
    slow_list = rc == 0 ? *res : NULL;
    return rc;
}

/* Dials SLOW_NAME with o on a pool of one thread, and waits until the
 * lookup runs (getaddrinfo waiting: no cancel can stop it now). */
static lull_pool *dial_slow_name(lull_loop *loop, lull_dial *d, lull_stream *s,
                                 const lull_dial_options *o) {
    reset();
    lull_pool *pool = NULL;
    lull_pool_options po = {.threads = 1};
    CHECK_EQ(lull_pool_new(&pool, &po), 0);
    CHECK_EQ(pipe(slow_pipe), 0);
    slow_started = 0;
    CHECK_EQ(lull_dial_start(loop, pool, d, s, SLOW_NAME, 9, o, on_dial), 0);
    while (!__atomic_load_n(&slow_started, __ATOMIC_ACQUIRE))
        usleep(1000);
    return pool;
}

/* The resolver answers at last: the loop has run out already (the lookup
 * let go keeps nothing of it alive, no second callback), and the pool's
 * free joins the thread that drops the answer; the pipe is closed after
 * it, as that thread reads it until then. */
static void join_slow_name(lull_pool *pool) {
    CHECK_EQ(lull_pool_free(pool), 0);
    close(slow_pipe[0]);
    close(slow_pipe[1]);
}

static void end_slow_name(lull_loop *loop, lull_pool *pool) {
    CHECK_EQ(write(slow_pipe[1], "x", 1), 1);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(dial_calls, 1);
    join_slow_name(pool);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A dial's timeout is the whole dial's, also while getaddrinfo hangs on
 * the pool (a DNS server that does not answer): the callback gets
 * -ETIMEDOUT at the deadline, not when the resolver gives up. */
TEST_THREADED(timeout_ends_a_dial_whose_lookup_hangs) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_dial d = {0};
    lull_stream s;
    lull_dial_options o = {.timeout_ns = LULL_MS(100)};
    lull_pool *pool = dial_slow_name(loop, &d, &s, &o);
    lull_loop_advance(loop, LULL_MS(100));
    settle_until_dialed(loop);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, -ETIMEDOUT);
    end_slow_name(loop, pool);
}

/* The same for a cancel: -ECANCELED in a later turn, and the dial may be
 * started again at once, while the first lookup still hangs. */
TEST_THREADED(cancel_while_the_lookup_hangs) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_dial d = {0};
    lull_stream s;
    lull_pool *pool = dial_slow_name(loop, &d, &s, NULL);
    CHECK_EQ(lull_dial_cancel(&d), 0);
    settle_until_dialed(loop);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, -ECANCELED);
    int port = 0;
    int fd = listener(AF_INET, 1, &port);
    close(fd); /* a port that refuses */
    CHECK_EQ(
        lull_dial_start(loop, pool, &d, &s, "127.0.0.1", port, NULL, on_dial),
        0);
    for (int i = 0; i < 100 && dial_calls < 2; i++)
        CHECK(lull_loop_settle(loop) >= 0);
    CHECK_EQ(dial_calls, 2);
    CHECK_EQ(dial_status, -ECONNREFUSED);
    dial_calls = 1; /* end_slow_name counts the first dial's */
    end_slow_name(loop, pool);
}

/* A lookup let go holds nothing of the loop: once a cancel's callback
 * ran, the loop has nothing left to run (a DEFAULT run returns) and is
 * freed while getaddrinfo still hangs; the late answer is freed on the
 * pool's thread, which touches the freed loop no more (ASan, valgrind). */
TEST_THREADED(cancelled_dial_leaves_the_loop_free_while_the_lookup_hangs) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_dial d = {0};
    lull_stream s;
    lull_pool *pool = dial_slow_name(loop, &d, &s, NULL);
    CHECK_EQ(lull_dial_cancel(&d), 0);
    settle_until_dialed(loop);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, -ECANCELED);
    CHECK(!lull_loop_alive(loop));
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
    CHECK_EQ(write(slow_pipe[1], "x", 1), 1);
    join_slow_name(pool); /* joins the thread that drops it */
    CHECK_EQ(dial_calls, 1);
}

/* The same for a dial's timeout, and a fork() meanwhile: the child's copy
 * of the pool forgets the lookup let go (no thread of the child's would
 * ever end it, and it belongs to no loop), and its loop runs out too. */
TEST_THREADED(timed_out_dial_leaves_the_loop_free_in_parent_and_child) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_dial d = {0};
    lull_stream s;
    lull_dial_options o = {.timeout_ns = LULL_MS(100)};
    lull_pool *pool = dial_slow_name(loop, &d, &s, &o);
    lull_loop_advance(loop, LULL_MS(100));
    settle_until_dialed(loop);
    CHECK_EQ(dial_status, -ETIMEDOUT);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK_EQ(lull_loop_fork(loop), 0);
        CHECK(!lull_loop_alive(loop));
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
        CHECK_EQ(lull_loop_free(loop), 0);
        CHECK_EQ(lull_pool_free(pool), 0);
        _exit(0);
    }
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(!lull_loop_alive(loop));
    CHECK_EQ(lull_loop_free(loop), 0);
    CHECK_EQ(write(slow_pipe[1], "x", 1), 1);
    join_slow_name(pool);
    CHECK_EQ(dial_calls, 1);
}

/* A fork() while the pool's thread drops a lookup let go (its answer
 * being freed): the child's copy of that lookup is freed too, not left
 * with nothing in the child to free it (the thread had let go of it before
 * the drop, outside the pool's lock, so the child's pool forgot it while
 * the parent's thread, which the child lacks, was freeing it). The fork
 * comes from another thread, while the drop waits: the case checks, in
 * the child, that the answer's copy there was freed. */
static void *fork_in_the_drop(void *arg) {
    (void)arg;
    __atomic_store_n(&slow_forker, (int)gettid(), __ATOMIC_RELEASE);
    while (!__atomic_load_n(&slow_dropping, __ATOMIC_ACQUIRE))
        sched_yield();
    pid_t pid = fork();
    if (pid == 0) _exit(slow_list_freed ? 0 : 1);
    __atomic_store_n(&slow_forked, 1, __ATOMIC_RELEASE);
    int status = -1;
    if (pid > 0 && waitpid(pid, &status, 0) != pid) status = -1;
    /* Alive until the drop is over: hold_the_drop reads its state. */
    while (!__atomic_load_n(&slow_list_freed, __ATOMIC_ACQUIRE))
        sched_yield();
    return (void *)(intptr_t)status;
}

TEST_THREADED(fork_while_a_lookup_let_go_is_dropped_frees_the_childs_copy) {
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_dial d = {0};
    lull_stream s;
    slow_list = NULL;
    slow_list_freed = false;
    slow_dropping = slow_forked = slow_forker = 0;
    lull_pool *pool = dial_slow_name(loop, &d, &s, NULL);
    CHECK_EQ(lull_dial_cancel(&d), 0);
    settle_until_dialed(loop);
    CHECK_EQ(dial_status, -ECANCELED);
    slow_hold_drop = true;
    fflush(NULL);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, fork_in_the_drop, NULL), 0);
    while (!__atomic_load_n(&slow_forker, __ATOMIC_ACQUIRE))
        sched_yield();
    CHECK_EQ(write(slow_pipe[1], "x", 1), 1); /* the lookup returns */
    void *status;
    CHECK_EQ(pthread_join(th, &status), 0);
    slow_hold_drop = false;
    int st = (int)(intptr_t)status;
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 0);
    CHECK_EQ(lull_pool_free(pool), 0);
    CHECK(slow_list_freed);
    close(slow_pipe[0]);
    close(slow_pipe[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Huge durations mean "a long time", never "at once": the deadline and
 * the next attempt's start saturate rather than wrap past the clock. */
TEST(huge_timeout_and_attempt_delay_do_not_wrap) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_loop_advance(loop, LULL_S(1)); /* now > 0: a sum would wrap */
    hole h = hole_open(AF_INET);
    int port, lfd = listener(AF_INET, 8, &port);
    addrs l = {0};
    add(&l, AF_INET, h.port);
    add(&l, AF_INET, port);
    lull_dial d = {0};
    lull_stream s;
    lull_dial_options o = {.timeout_ns = UINT64_MAX,
                           .attempt_delay_ns = UINT64_MAX};
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, &o, on_dial), 0);
    CHECK(lull_loop_settle(loop) >= 0);
    lull_loop_advance(loop, LULL_S(3600));
    CHECK(lull_loop_settle(loop) >= 0);
    CHECK_EQ(dial_calls, 0); /* neither timed out nor moved on */
    CHECK_EQ(d.attempts, 1);
    CHECK_EQ(lull_dial_cancel(&d), 0);
    CHECK(lull_loop_settle(loop) >= 0);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, -ECANCELED);
    CHECK_EQ(accepted(lfd), 0);
    close(lfd);
    hole_close(&h);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Two dials given one stream: each start sees it free (nothing is open
 * yet), so the second to connect finds it open by the first. It fails
 * with -EBUSY and closes its socket, as a start would have refused it,
 * rather than opening the live stream again over its nodes. */
static int two_calls, two_ok, two_busy;
static void on_dial_two(lull_dial *d, int status) {
    (void)d;
    two_calls++;
    two_ok += status == 0;
    two_busy += status == -EBUSY;
}

TEST(two_dials_into_one_stream) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    int port, lfd = listener(AF_INET, 8, &port);
    lull_dial d1 = {0}, d2 = {0};
    lull_stream s;
    memset(&s, 0, sizeof s);
    CHECK_EQ(lull_dial_start(loop, NULL, &d1, &s, "127.0.0.1", port, NULL,
                             on_dial_two),
             0);
    CHECK_EQ(lull_dial_start(loop, NULL, &d2, &s, "127.0.0.1", port, NULL,
                             on_dial_two),
             0);
    for (int i = 0; i < 100 && two_calls < 2; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(two_calls, 2);
    CHECK_EQ(two_ok, 1);
    CHECK_EQ(two_busy, 1);
    lull_endpoint_set_callbacks(&s.ep, NULL, NULL, on_stream_close);
    CHECK_EQ(lull_endpoint_close(&s.ep, 0), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    close(lfd);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A server that speaks first (a greeting, then EOF) to a busy loop: the
 * winning socket became the stream inside the attempt's fd callback, and
 * the dial's callback, where the owner sets the stream's callbacks, runs
 * in a later task. When the slice ends in between (a task queued ahead of
 * it: here a pipe's callback in the same batch posts one, and a tiny
 * quantum ends the slice after every callback), ready fds run before
 * those tasks, and the stream read the greeting with no frame callback
 * set: it was dropped, and its EOF would have closed the stream with no
 * close callback, the dial still reporting success. The stream waits with
 * reading paused until the dial's callback has run. */
static lull_task greet_task;
static int greet_frames, greet_closes, greet_reason;
static char greet_buf[16];
static size_t greet_len;

static void greet_noop(lull_task *t) {
    (void)t;
}

static void greet_pipe(lull_io *io, int events) {
    (void)events;
    lull_io_stop(io);
    lull_task_post(io->loop, &greet_task); /* queued ahead of the dial's */
}

static void greet_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    (void)ep;
    greet_frames++;
    if (len > sizeof greet_buf - greet_len) len = sizeof greet_buf - greet_len;
    memcpy(greet_buf + greet_len, bytes, len);
    greet_len += len;
}

static void greet_close(lull_endpoint *ep, int reason) {
    (void)ep;
    greet_closes++;
    greet_reason = reason;
}

static void greet_dialed(lull_dial *d, int status) {
    dial_calls++;
    dial_status = status;
    CHECK(!lull_endpoint_closed(&d->stream->ep));
    CHECK_U64_EQ(d->stream->bytes_read, 0); /* nothing read behind our back */
    lull_endpoint_set_callbacks(&d->stream->ep, greet_frame, NULL, greet_close);
}

TEST(server_speaking_first_to_a_busy_loop_loses_nothing) {
    reset();
    lull_loop_options lo = {.quantum_ns = 1};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &lo), 0);
    int port, lfd = listener(AF_INET, 8, &port);
    int pp[2];
    CHECK_EQ(pipe2(pp, O_CLOEXEC), 0);
    CHECK_EQ(write(pp[1], "x", 1), 1); /* ready before the connect is */
    lull_io pio;
    CHECK_EQ(lull_io_init(loop, &pio, pp[0], greet_pipe), 0);
    CHECK_EQ(lull_io_start(&pio, LULL_READABLE), 0);
    lull_task_init(&greet_task, greet_noop);
    addrs l = {0};
    add(&l, AF_INET, port);
    lull_stream_options so = {.flags = LULL_STREAM_RAW};
    lull_dial_options o = {.stream = &so};
    lull_dial d = {0};
    lull_stream s;
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, &o, greet_dialed), 0);
    /* The connection is in the listener's queue: greet, then EOF. */
    int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    CHECK(c >= 0);
    CHECK_EQ(write(c, "hello", 5), 5);
    close(c);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, 0);
    CHECK_EQ(greet_len, 5);
    CHECK(memcmp(greet_buf, "hello", 5) == 0);
    CHECK_EQ(greet_closes, 1);
    CHECK_EQ(greet_reason, 0);
    close(pp[0]);
    close(pp[1]);
    close(lfd);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* More silent addresses than LULL_DIAL_MAX_ATTEMPTS: once every slot
 * holds an attempt, the next address waits for one of them to fail,
 * which its socket says. No timer ticks meanwhile (C1: the wait has no
 * deadline unless timeout_ns gives one), where one used to fire every
 * attempt delay for as long as the connects hung (minutes, SYN retries). */
TEST(every_slot_busy_arms_no_timer) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    hole h = hole_open(AF_INET);
    enum { N = LULL_DIAL_MAX_ATTEMPTS + 2 };
    struct addrinfo ai[N];
    struct sockaddr_storage ss[N];
    for (int i = 0; i < N; i++) {
        memset(&ai[i], 0, sizeof ai[i]);
        ai[i].ai_family = AF_INET;
        ai[i].ai_socktype = SOCK_STREAM;
        ai[i].ai_addr = (struct sockaddr *)&ss[i];
        ai[i].ai_addrlen = loopback(AF_INET, h.port, &ss[i]);
        ai[i].ai_next = i + 1 < N ? &ai[i + 1] : NULL;
    }
    lull_dial d = {0};
    lull_stream s;
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, ai, NULL, on_dial), 0);
    CHECK(lull_loop_settle(loop) >= 0);
    lull_loop_advance(loop, LULL_MS(250) * (LULL_DIAL_MAX_ATTEMPTS - 1));
    CHECK_EQ(d.attempts, LULL_DIAL_MAX_ATTEMPTS);
    lull_loop_metrics_reset(loop);
    lull_loop_advance(loop, LULL_S(10));
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_EQ(m.tasks_run, 0); /* nothing ran: no attempt timer */
    CHECK_EQ(d.attempts, LULL_DIAL_MAX_ATTEMPTS);
    CHECK_EQ(dial_calls, 0);
    CHECK_EQ(lull_dial_cancel(&d), 0);
    settle_until_dialed(loop);
    CHECK_EQ(dial_status, -ECANCELED);
    hole_close(&h);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* opts->family holds for a list the caller resolved too: with AF_INET6
 * asked for, an IPv4 entry is skipped as an AF_UNIX one is, and a list
 * with nothing of that family fails as a name without such an address
 * does, where the option was checked and then ignored (the IPv4
 * address dialed and connected). */
TEST(family_holds_for_a_callers_list) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    int port, lfd = listener(AF_INET, 8, &port);
    addrs l = {0};
    add(&l, AF_INET, port);
    lull_dial d = {0};
    lull_stream s;
    lull_dial_options o = {.family = AF_INET6};
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, &o, on_dial), 0);
    settle_until_dialed(loop);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, -EHOSTUNREACH);
    CHECK_EQ(d.attempts, 0);
    CHECK_EQ(accepted(lfd), 0);
    /* The family asked for is dialed. */
    reset();
    o.family = AF_INET;
    CHECK_EQ(lull_dial_start_addrs(loop, &d, &s, l.ai, &o, on_dial), 0);
    settle_until_dialed(loop);
    CHECK_EQ(dial_status, 0);
    CHECK_EQ(accepted(lfd), 1);
    CHECK(lull_loop_settle(loop) >= 0);
    close(lfd);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* "[::1]", the bracketed form lull_stream_connect_tcp and the listen calls
 * take (a URL's), is the numeric address inside, not a name: dialed at
 * once, without the pool, where the lookup failed (-EHOSTUNREACH). */
TEST(bracketed_ipv6_literal_is_numeric) {
    int port, l6 = listener(AF_INET6, 8, &port);
    if (l6 < 0) {
        printf("skipped: no IPv6 loopback here\n");
        return;
    }
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    lull_dial d = {0};
    lull_stream s;
    CHECK_EQ(lull_dial_start(loop, NULL, &d, &s, "[::1]", port, NULL, on_dial),
             0);
    CHECK_EQ(d.attempts, 1); /* numeric: no lookup on a pool */
    settle_until_dialed(loop);
    CHECK_EQ(dial_status, 0);
    CHECK_EQ(accepted(l6), 1);
    CHECK(lull_loop_settle(loop) >= 0);
    close(l6);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A numeric host of the other family than opts->family asked for has no
 * address to dial, and no resolver can give it one: -EHOSTUNREACH with
 * EAI_ADDRFAMILY, decided on the loop. It went to the pool as a name,
 * "[::1]" in its brackets to the name services (/etc/hosts, then NSS's
 * modules) before they said no. */
TEST(numeric_host_of_the_other_family_asks_no_resolver) {
    const char *hosts[] = {"[::1]", "::1", "127.0.0.1"};
    const int fams[] = {AF_INET, AF_INET, AF_INET6};
    for (int i = 0; i < 3; i++) {
        reset();
        lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
        lull_dial d = {0};
        lull_stream s;
        lull_dial_options o = {.family = fams[i]};
        __atomic_store_n(&name_lookups, 0, __ATOMIC_RELAXED);
        CHECK_EQ(lull_dial_start(loop, NULL, &d, &s, hosts[i], 9, &o, on_dial),
                 0);
        CHECK_EQ(dial_calls, 0); /* a later turn */
        settle_until_dialed(loop);
        CHECK_EQ(dial_calls, 1);
        CHECK_EQ(dial_status, -EHOSTUNREACH);
        CHECK_EQ(d.gai_error, EAI_ADDRFAMILY);
        CHECK_EQ(d.attempts, 0);
        CHECK_EQ(__atomic_load_n(&name_lookups, __ATOMIC_RELAXED), 0);
        CHECK_EQ(lull_loop_free(loop), 0);
    }
}

/* A paused stream is open (its fd held) with no watcher started and
 * nothing queued: a dial into it is -EBUSY, as into one reading. */
TEST(dial_into_paused_stream_is_busy) {
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    lull_stream s;
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    CHECK_EQ(lull_stream_open(loop, &s, sv[0], &raw), 0);
    CHECK_EQ(lull_stream_read_stop(&s), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    lull_dial d = {0};
    CHECK_EQ(lull_dial_start(loop, NULL, &d, &s, "127.0.0.1", 1, NULL, on_dial),
             -EBUSY);
    CHECK_EQ(lull_stream_fd(&s), sv[0]);
    lull_endpoint_close(&s.ep, 0);
    close(sv[1]);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* fork() while a pool thread holds a lookup's answer (its getaddrinfo
 * returned, the thread not yet back under the pool's lock, which the
 * fork holds): in the child the pool hands the lookup back cancelled and
 * the dial says -ESHUTDOWN, and the answer, in the child's copy of the
 * request, is freed there, not leaked. The parent's dial goes on. */
TEST_THREADED(fork_while_a_lookup_holds_its_answer) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    lull_pool *pool = NULL;
    CHECK_EQ(lull_pool_new(&pool, &(lull_pool_options){.threads = 1}), 0);
    CHECK_EQ(pipe(forked_pipe), 0);
    lull_dial d = {0};
    lull_stream s;
    CHECK_EQ(lull_dial_start(loop, pool, &d, &s, FORKED_NAME, closed_port(),
                             NULL, on_dial),
             0);
    while (!__atomic_load_n(&forked_started, __ATOMIC_ACQUIRE))
        usleep(1000);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK_EQ(lull_loop_fork(loop), 0);
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
        CHECK_EQ(dial_calls, 1);
        CHECK_EQ(dial_status, -ESHUTDOWN);
        CHECK(forked_list_freed);
        _exit(0);
    }
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(write(forked_pipe[1], "x", 1), 1);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(dial_calls, 1);
    CHECK(dial_status != -ESHUTDOWN); /* resolved: the connects' answer */
    CHECK(d.attempts > 0);
    close(forked_pipe[0]);
    close(forked_pipe[1]);
    CHECK_EQ(lull_pool_free(pool), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A cancel after the dial was decided (its attempt connected, the
 * callback queued) returns 0 and changes nothing: the callback gets the
 * status it was decided with, 0 here, and the stream is open, as
 * lull.h says and docs/API.md now says too (it promised -ECANCELED). The
 * cancel runs from a timer, which the loop runs after the fd callbacks of
 * its iteration and before its tasks: between the win and the callback. */
static lull_dial *late_dial;
static int late_cancel_rc = 1;
static void cancel_late(lull_timer *t) {
    (void)t;
    late_cancel_rc = lull_dial_cancel(late_dial);
}

TEST(cancel_after_the_dial_was_decided_keeps_its_status) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    int port, lfd = listener(AF_INET, 8, &port);
    lull_dial d = {0};
    lull_stream s;
    late_dial = &d;
    CHECK_EQ(
        lull_dial_start(loop, NULL, &d, &s, "127.0.0.1", port, NULL, on_dial),
        0);
    /* The attempt connects meanwhile, outside the loop. */
    struct pollfd p = {.fd = d.io[0].fd, .events = POLLOUT};
    CHECK(p.fd >= 0);
    CHECK_EQ(poll(&p, 1, 5000), 1);
    lull_timer t;
    lull_timer_init(loop, &t, cancel_late);
    lull_timer_start(&t, 0, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(late_cancel_rc, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, 0); /* on_dial closed the open stream */
    CHECK_EQ(accepted(lfd), 1);
    close(lfd);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* What a failed lookup says: -ENOMEM for EAI_MEMORY, the errno for
 * EAI_SYSTEM, -EHOSTUNREACH for EAI_NONAME, for a name whose addresses
 * are all of other families (gai_error EAI_NONAME then) and for an
 * EAI_SYSTEM that left no errno: never 0, which would be a dial with no
 * stream said to be open. */
static void dial_failing(int code, int err, const char *name, int want,
                         int want_gai) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_MONOTONIC);
    lull_pool *pool = NULL;
    CHECK_EQ(lull_pool_new(&pool, &(lull_pool_options){.threads = 1}), 0);
    failing_code = code;
    failing_errno = err;
    lull_dial d = {0};
    lull_stream s;
    CHECK_EQ(lull_dial_start(loop, pool, &d, &s, name, 9, NULL, on_dial), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, want);
    CHECK_EQ(d.gai_error, want_gai);
    CHECK_EQ(d.attempts, 0);
    CHECK_EQ(lull_pool_free(pool), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(failed_lookups_say_why) {
    dial_failing(EAI_MEMORY, 0, FAILING_NAME, -ENOMEM, EAI_MEMORY);
    dial_failing(EAI_SYSTEM, EMFILE, FAILING_NAME, -EMFILE, EAI_SYSTEM);
    dial_failing(EAI_SYSTEM, 0, FAILING_NAME, -EHOSTUNREACH, EAI_SYSTEM);
    dial_failing(EAI_NONAME, 0, FAILING_NAME, -EHOSTUNREACH, EAI_NONAME);
    dial_failing(0, 0, UNIX_ONLY_NAME, -EHOSTUNREACH, EAI_NONAME);
}

/* A program that closed its stdin, stdout and stderr, then dialed: the
 * attempt's socket took 0 and became the stream's, which the program's
 * own reads of stdin, and a child spawned with its stdio inherited, then
 * shared with lull. It stays above 2 (as test_stream's
 * sockets_never_take_closed_stdio), and 0 to 2 stay closed. */
static int dialed_fd = -1;

static void on_dial_keep_fd(lull_dial *d, int status) {
    dialed_fd = status == 0 ? lull_stream_fd(d->stream) : status;
    on_dial(d, status);
}

TEST(dial_socket_never_takes_closed_stdio) {
    reset();
    lull_loop *loop = new_loop(LULL_CLOCK_VIRTUAL);
    int port, lfd = listener(AF_INET, 8, &port);
    addrs l = {0};
    add(&l, AF_INET, port);
    lull_dial d = {0};
    lull_stream s;
    stdio_gone gone;
    stdio_close(&gone);
    int started =
        lull_dial_start_addrs(loop, &d, &s, l.ai, NULL, on_dial_keep_fd);
    for (int i = 0; i < 100 && started == 0 && !dial_calls; i++)
        if (lull_loop_settle(loop) < 0) break;
    stdio_back(&gone);
    CHECK_EQ(started, 0);
    CHECK_EQ(dial_calls, 1);
    CHECK_EQ(dial_status, 0);
    CHECK(dialed_fd > 2);
    CHECK_STDIO_STAYED_CLOSED(&gone);
    CHECK_EQ(accepted(lfd), 1);
    CHECK(lull_loop_settle(loop) >= 0);
    close(lfd);
    CHECK_EQ(lull_loop_free(loop), 0);
}
