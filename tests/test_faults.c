/* Injected syscall faults: the calls lull makes fail with
 * EINTR, EAGAIN, short counts, ECONNRESET, EMFILE, ENOMEM or EPERM at a
 * chosen call (the Nth that matches a rule) or at random seeded calls, and
 * each must be handled: retried (the data arrives complete and in order),
 * reported to the user (a negative errno returned, a close reason
 * delivered) or the one connection closed, while the loop keeps running
 * and other connections lose nothing.
 *
 * The shim (fault_shim.c) is link-time only: tests/CMakeLists.txt passes
 * -Wl,--wrap= for recv, recvmsg, sendmsg, send, accept4, connect, epoll_ctl,
 * epoll_wait, epoll_pwait2, read and write (the wake-up eventfd), syscall
 * (futex), malloc, calloc and realloc to this binary (and lull-kv-sim),
 * and links lull statically, so the library's own calls come here; the
 * library is built as for any user. A fault is injected only while a rule
 * matches (kind, fd, epoll op) and the shim is armed; everything else goes
 * straight to the real call.
 *
 * Every case prints what it injected, by kind and errno (docs/RELIABILITY.md
 * has a run's figures). LULL_FAULT_SEED=<n> runs the random case on one
 * seed; LULL_FAULT_SEEDS=<n> on n seeds; a failure prints its seed. */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <lull.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fault_shim.h"
#include "internal.h"

/* ------------------------------------------------------------ helpers */

static int open_fds(void) {
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        if (fcntl(fd, F_GETFD) >= 0) n++;
    return n;
}

static int fds_at_start;

static lull_loop *new_loop(void) {
    signal(SIGPIPE, SIG_DFL); /* a SIGPIPE anywhere kills the case */
    shim_reset(1);
    fds_at_start = open_fds();
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    return loop;
}

/* Frees the loop; nothing may be left open. */
static void end_loop(lull_loop *loop) {
    arm(false);
    CHECK_EQ(lull_loop_free(loop), 0);
    CHECK_EQ(open_fds(), fds_at_start);
}

/* The watchdog of run_until_pred fails a run only when it stops making
 * progress: each time it fires, a run that called back anything since the
 * last time (the watchdog aside) gets another period. A lost post, wake-up
 * or frame leaves the loop asleep with nothing to call, and fails within
 * two periods; a run that is merely slow goes on (one seed of
 * random_faults_echo took over 20 s under valgrind beside eight busy
 * CPUs), and the case's timeout bounds the rest. */
static bool watchdog_fired;
static uint64_t watchdog_ns;   /* the period */
static uint64_t watchdog_seen; /* callbacks run when it last fired */

static uint64_t callbacks_run(lull_loop *loop) {
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    return m.tasks_run;
}

static void on_watchdog(lull_timer *t) {
    uint64_t now = callbacks_run(t->loop);
    if (now - watchdog_seen > 1) { /* more than this call */
        watchdog_seen = now;
        lull_timer_start(t, watchdog_ns, 0);
        return;
    }
    watchdog_fired = true;
}

/* A frame's bytes: its number first (so a reordering is caught), then a
 * pattern of the flow, the number and the position. */
static size_t frame_size(int id, int k) {
    return 4 + (size_t)((k * 7919 + id * 104729) % 3000);
}

static unsigned char frame_byte(int id, int k, size_t i) {
    return (unsigned char)(id * 131 + k * 31 + (int)i * 7);
}

static void fill_frame(unsigned char *b, int id, int k, size_t len) {
    memcpy(b, &k, 4);
    for (size_t i = 4; i < len; i++)
        b[i] = frame_byte(id, k, i);
}

static bool frame_ok(const unsigned char *b, size_t len, int id, int k) {
    if (len != frame_size(id, k)) return false;
    int got;
    memcpy(&got, b, 4);
    if (got != k) return false;
    for (size_t i = 4; i < len; i++)
        if (b[i] != frame_byte(id, k, i)) return false;
    return true;
}

/* Runs iterations until pred(arg), failing after `seconds` without
 * progress (the watchdog, above); returns the last error a run returned,
 * and counts them in run_errors (a failed poll ends a run with it). */
static int run_errors;
static char fail_note[64]; /* added to a failure's message: the seed */
static int run_until_pred(lull_loop *loop, bool (*pred)(void *), void *arg,
                          int seconds) {
    lull_timer dog;
    lull_timer_init(loop, &dog, on_watchdog);
    watchdog_fired = false;
    watchdog_ns = (uint64_t)seconds * 1000000000u;
    watchdog_seen = callbacks_run(loop);
    lull_timer_start(&dog, watchdog_ns, 0);
    int last_err = 0;
    run_errors = 0;
    while (!pred(arg) && !watchdog_fired) {
        int rc = lull_loop_run(loop, LULL_RUN_ONCE);
        if (rc < 0) {
            run_errors++;
            last_err = rc;
        }
    }
    lull_timer_stop(&dog);
    if (!pred(arg))
        check_fail(__FILE__, __LINE__, "not done: no progress in %d s%s",
                   seconds, fail_note);
    return last_err;
}

/* ------------------------------------------------------------- flows */

/* A flow: stream tx sends n frames to stream rx (over a socketpair, or TCP
 * through a listener), on one loop; rx checks each frame in order as it
 * arrives; tx counts releases. */
#define FLOW_FRAMES 200
typedef struct flow flow;
typedef struct sent {
    lull_frame fr;
    flow *owner;
} sent;
struct flow {
    int id, n;
    lull_stream tx, rx;
    int txfd, rxfd;
    int sent_n, received, released, connect_status;
    bool tx_closed, rx_closed, connected, rx_open;
    int tx_reason, rx_reason;
    sent frames[FLOW_FRAMES];
    unsigned char *bufs[FLOW_FRAMES];
};

static bool in_call; /* a lull call is on the stack: no callback may run */

static void flow_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    flow *f = LULL_CONTAINER_OF(ep, flow, rx.ep);
    CHECK(!in_call);
    if (f->received >= f->n || !frame_ok(bytes, len, f->id, f->received))
        check_fail(__FILE__, __LINE__, "flow %d: frame %d wrong (len %zu)",
                   f->id, f->received, len);
    f->received++;
}

/* Once per stream, whoever closed it, never inside a lull call. */
static void flow_tx_close(lull_endpoint *ep, int reason) {
    flow *f = LULL_CONTAINER_OF(ep, flow, tx.ep);
    CHECK(!in_call);
    CHECK(!f->tx_closed);
    /* A failed connect: its callback first, then this, with its errno. */
    if (f->connect_status < 0) CHECK_EQ(reason, f->connect_status);
    f->tx_closed = true;
    f->tx_reason = reason;
}

static void flow_rx_close(lull_endpoint *ep, int reason) {
    flow *f = LULL_CONTAINER_OF(ep, flow, rx.ep);
    CHECK(!in_call);
    CHECK(!f->rx_closed);
    f->rx_closed = true;
    f->rx_reason = reason;
}

static void flow_release(lull_frame *fr) {
    CHECK(!in_call);
    sent *s = LULL_CONTAINER_OF(fr, sent, fr);
    s->owner->released++;
}

static flow *flow_alloc(int id, int n) {
    flow *f = calloc(1, sizeof *f);
    CHECK(f && n <= FLOW_FRAMES);
    f->id = id;
    f->n = n;
    f->txfd = f->rxfd = -1;
    for (int k = 0; k < n; k++) {
        size_t len = frame_size(id, k);
        f->bufs[k] = malloc(len);
        CHECK(f->bufs[k]);
        fill_frame(f->bufs[k], id, k, len);
        f->frames[k] = (sent){
            .fr = {.bytes = f->bufs[k], .len = len, .release = flow_release},
            .owner = f};
    }
    return f;
}

static void rx_callbacks(flow *f) {
    lull_endpoint_set_callbacks(&f->rx.ep, flow_frame, NULL, flow_rx_close);
    f->rxfd = lull_stream_fd(&f->rx);
    f->rx_open = true;
}

/* Over a socketpair. */
static flow *flow_new(lull_loop *loop, int id, int n) {
    flow *f = flow_alloc(id, n);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    CHECK_EQ(lull_stream_open(loop, &f->tx, sv[0], NULL), 0);
    CHECK_EQ(lull_stream_open(loop, &f->rx, sv[1], NULL), 0);
    lull_endpoint_set_callbacks(&f->tx.ep, NULL, NULL, flow_tx_close);
    rx_callbacks(f);
    f->txfd = sv[0];
    f->connected = true;
    return f;
}

/* A small send buffer: the sender blocks often, so writes are many. */
static void small_sndbuf(int fd) {
    int size = 4096;
    CHECK_EQ(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size), 0);
}

static void flow_send_all(flow *f) {
    for (int k = f->sent_n; k < f->n; k++) {
        in_call = true;
        int rc = lull_endpoint_send(&f->tx.ep, &f->frames[k].fr);
        in_call = false;
        if (rc < 0) break; /* refused: the stream failed meanwhile */
        f->sent_n++;
    }
}

/* Everything arrived, or both ends closed. */
static bool flow_over(const flow *f) {
    return f->received == f->n || (f->tx_closed && f->rx_closed);
}

static bool flows_over(void *arg) {
    flow **fs = arg;
    for (; *fs; fs++)
        if (!flow_over(*fs)) return false;
    return true;
}

/* Arrived complete, in order, with both ends open. */
static void check_complete(const flow *f) {
    if (f->received != f->n || f->tx_closed || f->rx_closed)
        check_fail(__FILE__, __LINE__,
                   "flow %d: %d of %d frames, tx %s (%d), rx %s (%d)", f->id,
                   f->received, f->n, f->tx_closed ? "closed" : "open",
                   f->tx_reason, f->rx_closed ? "closed" : "open",
                   f->rx_reason);
}

/* Closes what is open: each close callback comes in a later turn, never
 * inside lull_endpoint_close (in_call says so to the callbacks). */
static void flow_close(flow *f) {
    in_call = true;
    if (!f->tx_closed) lull_endpoint_close(&f->tx.ep, 0);
    if (f->rx_open && !f->rx_closed) lull_endpoint_close(&f->rx.ep, 0);
    in_call = false;
}

/* Frees a flow whose streams both had their close callback: every frame
 * sent was released. */
static void flow_free(flow *f) {
    CHECK(f->tx_closed && (f->rx_closed || !f->rx_open));
    CHECK_EQ(f->released, f->sent_n);
    for (int k = 0; k < f->n; k++)
        free(f->bufs[k]);
    free(f);
}

/* Sends each flow's frames, then runs until every one is over. */
static int flows_run(lull_loop *loop, flow **all, int seconds) {
    for (flow **f = all; *f; f++)
        flow_send_all(*f);
    return run_until_pred(loop, flows_over, all, seconds);
}

/* Ends each flow of a NULL-ended list: closes what is open, runs the close
 * turns (faults off), and frees it once both its close callbacks ran. */
static void flows_end(lull_loop *loop, flow **all) {
    arm(false);
    for (flow **f = all; *f; f++)
        flow_close(*f);
    CHECK(lull_loop_settle(loop) >= 0);
    for (; *all; all++)
        flow_free(*all);
}

/* ------------------------------------------------------- recv faults */

/* EINTR and EAGAIN from recv: the stream tries again when the socket is
 * next readable; every frame arrives, in order. */
TEST(recv_eintr_eagain_retried) {
    lull_loop *loop = new_loop();
    flow *a = flow_new(loop, 1, FLOW_FRAMES), *b = flow_new(loop, 2, 100);
    fail_nth(K_RECV, a->rxfd, 1, 1, EINTR);
    fail_nth(K_RECV, a->rxfd, 2, 1, EAGAIN);
    const int errs[] = {EINTR, EAGAIN};
    rule *r = add_rule(K_RECV, a->rxfd, 0, 3, UINT64_MAX, 3, errs, 2);
    arm(true);
    flow *all[] = {a, b, NULL};
    flows_run(loop, all, 10);
    CHECK(hits_of(r) > 0);
    check_complete(a);
    check_complete(b);
    report("recv_eintr_eagain_retried");
    flows_end(loop, all);
    end_loop(loop);
}

/* Every recv returns fewer bytes than asked: frames are reassembled. */
TEST(recv_short_reads_reassembled) {
    lull_loop *loop = new_loop();
    flow *a = flow_new(loop, 1, FLOW_FRAMES), *b = flow_new(loop, 2, 100);
    const int errs[] = {SHORT};
    add_rule(K_RECV, a->rxfd, 0, 1, UINT64_MAX, 1, errs, 1);
    arm(true);
    flow *all[] = {a, b, NULL};
    flows_run(loop, all, 20);
    check_complete(a);
    check_complete(b);
    report("recv_short_reads_reassembled");
    flows_end(loop, all);
    end_loop(loop);
}

/* recv fails for good (ECONNRESET, ENOMEM): that stream closes with the
 * errno as its reason after the frames before it; its peer closes too;
 * another stream on the loop loses nothing. */
TEST(recv_error_closes_one_stream) {
    lull_loop *loop = new_loop();
    flow *a = flow_new(loop, 1, FLOW_FRAMES), *b = flow_new(loop, 2, 100),
         *c = flow_new(loop, 3, FLOW_FRAMES);
    fail_nth(K_RECV, a->rxfd, 3, 1, ECONNRESET);
    fail_nth(K_RECV, c->rxfd, 5, 1, ENOMEM);
    arm(true);
    flow *all[] = {a, b, c, NULL};
    flows_run(loop, all, 10);
    CHECK(a->rx_closed && a->tx_closed);
    CHECK_EQ(a->rx_reason, -ECONNRESET);
    CHECK(a->received < a->n);
    CHECK(c->rx_closed && c->tx_closed);
    CHECK_EQ(c->rx_reason, -ENOMEM);
    CHECK(c->received < c->n);
    check_complete(b);
    printf("a: %d frames then ECONNRESET, peer closed with %d; c: %d then "
           "ENOMEM, peer %d\n",
           a->received, a->tx_reason, c->received, c->tx_reason);
    report("recv_error_closes_one_stream");
    flows_end(loop, all);
    end_loop(loop);
}

/* ---------------------------------------------------- sendmsg faults */

TEST(sendmsg_eintr_eagain_retried) {
    lull_loop *loop = new_loop();
    flow *a = flow_new(loop, 1, FLOW_FRAMES), *b = flow_new(loop, 2, 100);
    small_sndbuf(a->txfd);
    fail_nth(K_SENDMSG, a->txfd, 1, 1, EINTR);
    fail_nth(K_SENDMSG, a->txfd, 2, 1, EAGAIN);
    const int errs[] = {EINTR, EAGAIN};
    rule *r = add_rule(K_SENDMSG, a->txfd, 0, 3, UINT64_MAX, 3, errs, 2);
    arm(true);
    flow *all[] = {a, b, NULL};
    flows_run(loop, all, 10);
    CHECK(hits_of(r) > 0);
    check_complete(a);
    check_complete(b);
    CHECK_EQ(a->released, a->n);
    report("sendmsg_eintr_eagain_retried");
    flows_end(loop, all);
    end_loop(loop);
}

/* Every sendmsg writes only part of what it was given: the rest follows,
 * frames cut anywhere, and the peer reads them whole and in order. */
TEST(sendmsg_short_writes_complete) {
    lull_loop *loop = new_loop();
    flow *a = flow_new(loop, 1, FLOW_FRAMES), *b = flow_new(loop, 2, 100);
    small_sndbuf(a->txfd);
    const int errs[] = {SHORT};
    add_rule(K_SENDMSG, a->txfd, 0, 1, UINT64_MAX, 1, errs, 1);
    arm(true);
    flow *all[] = {a, b, NULL};
    flows_run(loop, all, 20);
    check_complete(a);
    check_complete(b);
    CHECK_EQ(a->released, a->n);
    report("sendmsg_short_writes_complete");
    flows_end(loop, all);
    end_loop(loop);
}

/* A raw stream's one large buffer leaves by send, not sendmsg: every
 * send cut short (and the first ones interrupted), the rest follows from
 * where the kernel stopped, and the peer reads every byte in order. */
static unsigned char big_out[256 << 10], big_in[sizeof big_out];
static size_t big_got;
static bool big_released;

static void big_bytes(lull_endpoint *ep, const void *b, size_t n) {
    (void)ep;
    CHECK(big_got + n <= sizeof big_in);
    memcpy(big_in + big_got, b, n);
    big_got += n;
}

static void big_release(lull_frame *f) {
    (void)f;
    big_released = true;
}

TEST(send_short_writes_complete_one_raw_buffer) {
    lull_loop *loop = new_loop();
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    small_sndbuf(sv[0]);
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    lull_stream tx, rx;
    CHECK_EQ(lull_stream_open(loop, &tx, sv[0], &raw), 0);
    CHECK_EQ(lull_stream_open(loop, &rx, sv[1], &raw), 0);
    lull_endpoint_set_callbacks(&rx.ep, big_bytes, NULL, NULL);
    for (size_t i = 0; i < sizeof big_out; i++)
        big_out[i] = (unsigned char)(i * 7 + i / 251);
    big_got = 0;
    big_released = false;
    fail_nth(K_SENDMSG, sv[0], 1, 1, EINTR);
    fail_nth(K_SENDMSG, sv[0], 2, 1, EAGAIN);
    const int errs[] = {SHORT};
    rule *r = add_rule(K_SENDMSG, sv[0], 0, 3, UINT64_MAX, 1, errs, 1);
    arm(true);
    lull_frame f = {
        .bytes = big_out, .len = sizeof big_out, .release = big_release};
    CHECK_EQ(lull_endpoint_send(&tx.ep, &f), 0);
    for (int i = 0; i < 100000 && big_got < sizeof big_out; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    arm(false);
    CHECK_EQ(big_got, sizeof big_out);
    CHECK(memcmp(big_in, big_out, sizeof big_out) == 0);
    CHECK(big_released);
    CHECK(hits_of(r) > 1);
    report("send_short_writes_complete_one_raw_buffer");
    lull_endpoint_close(&tx.ep, 0);
    lull_endpoint_close(&rx.ep, 0);
    end_loop(loop);
}

/* The I/O plan (fault_shim.h, lull-kv-sim --streams): every recv and
 * sendmsg on one flow's fds cut to one byte, the other flow's let through;
 * both arrive whole, and the plan saw each call and what it moved. */
static int plan_fd[2];
static uint64_t plan_calls, plan_bytes;

static int plan_one_byte(int kind, int fd, size_t *len) {
    (void)kind;
    if (fd != plan_fd[0] && fd != plan_fd[1]) return 0;
    plan_calls++;
    *len = 1;
    return SHORT;
}

static ssize_t plan_count(int kind, int fd, ssize_t n, size_t asked) {
    (void)asked;
    if (kind == K_SENDMSG && fd == plan_fd[0] && n > 0)
        plan_bytes += (uint64_t)n;
    return n;
}

TEST(plan_cuts_every_call_to_one_byte) {
    lull_loop *loop = new_loop();
    flow *a = flow_new(loop, 1, 40), *b = flow_new(loop, 2, 100);
    plan_fd[0] = a->txfd;
    plan_fd[1] = a->rxfd;
    plan_calls = plan_bytes = 0;
    shim_io_before = plan_one_byte;
    shim_io_after = plan_count;
    flow *all[] = {a, b, NULL};
    flows_run(loop, all, 20);
    check_complete(a);
    check_complete(b);
    size_t total = 0;
    for (int k = 0; k < a->n; k++)
        total += frame_size(a->id, k) + 4; /* each with its length */
    CHECK_EQ(plan_bytes, (uint64_t)total);
    CHECK(plan_calls >= 2 * (uint64_t)total);
    shim_io_before = NULL;
    shim_io_after = NULL;
    flows_end(loop, all);
    end_loop(loop);
}

/* An errno from the plan reaches the stream as the kernel's would: a
 * reset recv closes that stream with -ECONNRESET; the other flow goes
 * on. */
static int plan_reset(int kind, int fd, size_t *len) {
    (void)len;
    return kind == K_RECV && fd == plan_fd[1] ? ECONNRESET : 0;
}

TEST(plan_errno_closes_one_stream) {
    lull_loop *loop = new_loop();
    flow *a = flow_new(loop, 1, 40), *b = flow_new(loop, 2, 100);
    plan_fd[0] = a->txfd;
    plan_fd[1] = a->rxfd;
    shim_io_before = plan_reset;
    flow *all[] = {a, b, NULL};
    flows_run(loop, all, 20);
    CHECK(a->rx_closed);
    CHECK_EQ(a->rx_reason, -ECONNRESET);
    CHECK_EQ(a->received, 0);
    check_complete(b);
    shim_io_before = NULL;
    flows_end(loop, all);
    end_loop(loop);
}

/* sendmsg fails for good: the stream closes with the errno (in a later
 * turn when found inside lull_endpoint_send), every queued frame is released,
 * the peer sees what was written and then the end; other streams go on. */
TEST(sendmsg_error_closes_one_stream) {
    lull_loop *loop = new_loop();
    flow *a = flow_new(loop, 1, FLOW_FRAMES), *b = flow_new(loop, 2, 100),
         *c = flow_new(loop, 3, FLOW_FRAMES);
    fail_nth(K_SENDMSG, a->txfd, 3, 1, ECONNRESET);
    /* c's first write happens inside lull_endpoint_send (the queue reaches
     * high_water): its close must come in a later turn. */
    fail_nth(K_SENDMSG, c->txfd, 1, 1, EPIPE);
    arm(true);
    flow *all[] = {a, b, c, NULL};
    flows_run(loop, all, 10);
    CHECK(a->tx_closed && a->rx_closed);
    CHECK_EQ(a->tx_reason, -ECONNRESET);
    CHECK(c->tx_closed && c->rx_closed);
    CHECK_EQ(c->tx_reason, -EPIPE);
    CHECK_EQ(c->received, 0);
    CHECK_EQ(a->released, a->sent_n);
    CHECK_EQ(c->released, c->sent_n);
    check_complete(b);
    printf("a: peer got %d frames, closed with %d; c: peer closed with %d\n",
           a->received, a->rx_reason, c->rx_reason);
    report("sendmsg_error_closes_one_stream");
    flows_end(loop, all);
    end_loop(loop);
}

/* ---------------------------------------------- accept4 and connect */

/* A TCP listener whose connections become the rx ends of flows, in the
 * order they are accepted. */
static lull_server srv;
static flow *accept_queue[8];
static int accept_next, accept_want;
static int accept_rc;

static void on_connection(lull_server *s) {
    CHECK(!in_call);
    if (accept_next >= accept_want) return; /* not taken: closed */
    bool waiting = s->pending >= 0;
    flow *f = accept_queue[accept_next++];
    accept_rc = lull_server_accept(s, &f->rx, NULL);
    if (!waiting && (accept_rc == -EMFILE || accept_rc == -ENFILE ||
                     accept_rc == -ENOBUFS || accept_rc == -ENOMEM)) {
        accept_next--; /* accepting paused, told why: the flow waits on */
        return;
    }
    if (accept_rc == 0) {
        rx_callbacks(f);
    } else {
        f->rx_closed = true; /* never opened */
        f->rx_reason = accept_rc;
    }
}

static void listen_tcp(lull_loop *loop) {
    accept_next = accept_want = 0;
    accept_rc = 0;
    CHECK_EQ(
        lull_server_listen_tcp(loop, &srv, "127.0.0.1", 0, 16, on_connection),
        0);
}

static void flow_connected(lull_stream *s, int status) {
    flow *f = LULL_CONTAINER_OF(s, flow, tx);
    CHECK(!in_call);
    CHECK(!f->tx_closed); /* the close callback comes after this */
    f->connect_status = status;
    f->connected = true;
    /* Failed: no connection, so no rx; the close callback follows. */
    if (status < 0) f->rx_closed = true;
}

/* A flow over TCP: tx connects to srv, the next accepted connection is its
 * rx. Frames are queued before the connect result. */
static flow *flow_tcp(lull_loop *loop, int id, int n) {
    flow *f = flow_alloc(id, n);
    accept_queue[accept_want++] = f;
    in_call = true;
    int rc =
        lull_stream_connect_tcp(loop, &f->tx, "127.0.0.1",
                                lull_server_port(&srv), NULL, flow_connected);
    in_call = false;
    CHECK_EQ(rc, 0);
    lull_endpoint_set_callbacks(&f->tx.ep, NULL, NULL, flow_tx_close);
    f->txfd = lull_stream_fd(&f->tx);
    flow_send_all(f);
    return f;
}

/* accept4 failing: EINTR, ECONNABORTED and EAGAIN are retried at once (or
 * when the listener is next readable); EMFILE, ENOMEM and EPERM pause
 * accepting until the retry timer. The connection waits in the backlog
 * meanwhile and its frames all arrive; a stream already open goes on. */
TEST(accept_faults_retried_or_paused) {
    lull_loop *loop = new_loop();
    listen_tcp(loop);
    srv.retry_ns = 1000000; /* 1 ms, not 100: the case waits for it */
    flow *b = flow_new(loop, 2, 100);
    int lfd = srv.io.fd;
    const int seq[] = {EINTR, ECONNABORTED, EAGAIN, EMFILE, ENOMEM, EPERM};
    for (int i = 0; i < 6; i++)
        fail_nth(K_ACCEPT, lfd, (uint64_t)i + 1, 1, seq[i]);
    arm(true);
    flow *a = flow_tcp(loop, 1, FLOW_FRAMES);
    flow_send_all(b);
    flow *all[] = {a, b, NULL};
    run_until_pred(loop, flows_over, all, 10);
    check_complete(a);
    check_complete(b);
    CHECK_EQ(injected_total(K_ACCEPT), 6);
    CHECK_EQ(srv.paused, 3);
    CHECK_EQ(srv.accepted, 1);
    report("accept_faults_retried_or_paused");
    flows_end(loop, all);
    lull_server_close(&srv);
    end_loop(loop);
}

/* Out of fds, then the retry's re-arm of the listener fails (epoll_ctl
 * ENOMEM): the server must try again later, not stop accepting for good. */
TEST(accept_retry_survives_epoll_ctl_failure) {
    lull_loop *loop = new_loop();
    listen_tcp(loop);
    srv.retry_ns = 1000000;
    int lfd = srv.io.fd;
    fail_nth(K_ACCEPT, lfd, 1, 1, EMFILE);
    add_rule(K_EPOLL_CTL, lfd, EPOLL_CTL_ADD, 1, 1, 1, (const int[]){ENOMEM},
             1);
    arm(true);
    flow *a = flow_tcp(loop, 1, 50);
    flow *all[] = {a, NULL};
    run_until_pred(loop, flows_over, all, 5);
    check_complete(a);
    CHECK_EQ(srv.accepted, 1);
    CHECK_EQ(srv.paused, 2); /* out of fds, then the failed re-arm */
    report("accept_retry_survives_epoll_ctl_failure");
    flows_end(loop, all);
    lull_server_close(&srv);
    end_loop(loop);
}

static bool connects_over(void *arg) {
    flow **fs = arg;
    for (; *fs; fs++)
        if (!(*fs)->connected) return false;
    return true;
}

/* connect: EINTR goes on in the background (the socket turns writable):
 * connected, frames delivered. ECONNREFUSED, EPERM, EAGAIN, and epoll_ctl
 * failing to watch the socket (ENOMEM): the connect callback gets the
 * errno in a later turn, never inside lull_stream_connect_tcp, the frames
 * queued meanwhile are released, nothing is left open. */
TEST(connect_faults_reported_in_a_later_turn) {
    lull_loop *loop = new_loop();
    listen_tcp(loop);
    fail_nth(K_CONNECT, -1, 1, 1, EINTR);
    fail_nth(K_CONNECT, -1, 2, 1, ECONNREFUSED);
    fail_nth(K_CONNECT, -1, 3, 1, EPERM);
    fail_nth(K_CONNECT, -1, 4, 1, EAGAIN);
    arm(true);
    flow *f[6];
    for (int i = 0; i < 4; i++)
        f[i] = flow_tcp(loop, i + 1, 20);
    arm(false);
    /* The fifth connect's epoll_ctl ADD (its only one) fails. */
    add_rule(K_EPOLL_CTL, -1, EPOLL_CTL_ADD, 1, 1, 1, (const int[]){ENOMEM}, 1);
    arm(true);
    f[4] = flow_tcp(loop, 5, 20);
    arm(false);
    f[5] = NULL;
    for (int i = 0; i < 5; i++)
        CHECK(!f[i]->connected); /* not inside the call */
    /* Only the first connection reaches the listener: accept it as 1's. */
    accept_want = 1;
    run_until_pred(loop, connects_over, f, 10);
    flow *first[] = {f[0], NULL};
    run_until_pred(loop, flows_over, first, 10);
    CHECK_EQ(f[0]->connect_status, 0);
    check_complete(f[0]);
    const int want[] = {-ECONNREFUSED, -EPERM, -EAGAIN, -ENOMEM};
    for (int i = 1; i < 5; i++) {
        CHECK_EQ(f[i]->connect_status, want[i - 1]);
        /* Its close callback ran right after the connect callback. */
        CHECK(f[i]->tx_closed);
        CHECK_EQ(f[i]->tx_reason, want[i - 1]);
        CHECK_EQ(f[i]->released, f[i]->sent_n);
        CHECK_EQ(lull_stream_fd(&f[i]->tx), -1);
    }
    report("connect_faults_reported_in_a_later_turn");
    flows_end(loop, f);
    lull_server_close(&srv);
    end_loop(loop);
}

/* ------------------------------------------------- epoll_ctl faults */

static int io_calls;
static void on_pipe(lull_io *io, int events) {
    (void)io;
    (void)events;
    io_calls++;
}

/* epoll_ctl refusing to add or change interest: lull_io_start returns the
 * errno; lull_stream_open returns it and closes the fd; a stream whose
 * interest change fails (it blocks on a full socket: EPOLL_CTL_MOD)
 * closes with the errno and releases its frames; others go on. */
TEST(epoll_ctl_faults_reported_or_close_one_stream) {
    lull_loop *loop = new_loop();
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
    lull_io io;
    CHECK_EQ(lull_io_init(loop, &io, p[0], on_pipe), 0);
    rule *r1 = fail_nth(K_EPOLL_CTL, p[0], 1, 1, ENOMEM);
    arm(true);
    CHECK_EQ(lull_io_start(&io, LULL_READABLE), -ENOMEM);
    CHECK_EQ(hits_of(r1), 1);
    CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0); /* and then it works */
    CHECK_EQ(write(p[1], "x", 1), 1);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(io_calls, 1);
    lull_io_stop(&io);

    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    fail_nth(K_EPOLL_CTL, sv[0], 1, 1, EPERM);
    lull_stream s;
    CHECK_EQ(lull_stream_open(loop, &s, sv[0], NULL), -EPERM);
    CHECK(fcntl(sv[0], F_GETFD) < 0 && errno == EBADF); /* closed */
    close(sv[1]);

    flow *a = flow_new(loop, 1, FLOW_FRAMES), *b = flow_new(loop, 2, 100);
    /* a's first interest change is the one to writable when it blocks. */
    add_rule(K_EPOLL_CTL, a->txfd, EPOLL_CTL_MOD, 1, 1, 1,
             (const int[]){ENOMEM}, 1);
    flow *all[] = {a, b, NULL};
    flows_run(loop, all, 10);
    CHECK(a->tx_closed && a->rx_closed);
    CHECK_EQ(a->tx_reason, -ENOMEM);
    CHECK_EQ(a->released, a->sent_n);
    check_complete(b);
    report("epoll_ctl_faults_reported_or_close_one_stream");
    flows_end(loop, all);
    close(p[0]);
    close(p[1]);
    end_loop(loop);
}

/* EPOLL_CTL_DEL failing while the fd stays open and readable: the kernel
 * keeps reporting a registration no watcher owns. The stopped watcher is
 * never called; the loop rebuilds its epoll set, and when an ADD of that
 * rebuild fails too (ENOMEM), it must try again rather than leave a live
 * stream unwatched. */
TEST(epoll_ctl_del_failure_rebuilds_the_set) {
    lull_loop *loop = new_loop();
    flow *b = flow_new(loop, 2, FLOW_FRAMES);
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
    lull_io io;
    CHECK_EQ(lull_io_init(loop, &io, p[0], on_pipe), 0);
    CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0);
    CHECK_EQ(write(p[1], "x", 1), 1);
    fail_nth(K_EPOLL_CTL, p[0], 1, 1, ENOMEM); /* the DEL of the stop */
    rule *add = add_rule(K_EPOLL_CTL, b->rxfd, EPOLL_CTL_ADD, 1, 1, 1,
                         (const int[]){ENOMEM}, 1);
    arm(true);
    io_calls = 0;
    lull_io_stop(&io);
    flow *all[] = {b, NULL};
    flows_run(loop, all, 5);
    CHECK_EQ(io_calls, 0);
    CHECK_EQ(hits_of(add), 1); /* a rebuild happened, and its ADD failed */
    check_complete(b);
    report("epoll_ctl_del_failure_rebuilds_the_set");
    flows_end(loop, all);
    close(p[0]);
    close(p[1]);
    end_loop(loop);
}

/* ------------------------------------------ epoll_wait, epoll_pwait2 */

/* epoll_wait interrupted (EINTR): the loop iterates again. Refused
 * (EPERM, as a seccomp filter might): the run ends and returns -EPERM;
 * the next run goes on, and no frame is lost. */
TEST(epoll_wait_faults_reported) {
    /* epoll_wait for every wait: the probe of epoll_pwait2 fails. */
    signal(SIGPIPE, SIG_DFL);
    shim_reset(1);
    fds_at_start = open_fds();
    fail_nth(K_EPOLL_PWAIT2, -1, 1, 1, EPERM);
    arm(true);
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    CHECK(!loop->have_pwait2);
    flow *a = flow_new(loop, 1, FLOW_FRAMES);
    small_sndbuf(a->txfd); /* many iterations: more than 3 polls */
    fail_nth(K_EPOLL_WAIT, -1, 1, 1, EINTR);
    fail_nth(K_EPOLL_WAIT, -1, 2, 1, EINTR);
    fail_nth(K_EPOLL_WAIT, -1, 3, 1, EPERM);
    arm(true);
    flow *all[] = {a, NULL};
    int err = flows_run(loop, all, 10);
    CHECK_EQ(run_errors, 1);
    CHECK_EQ(err, -EPERM);
    CHECK_EQ(injected_total(K_EPOLL_WAIT), 3);
    CHECK_EQ(injected_total(K_EPOLL_PWAIT2), 1);
    check_complete(a);
    report("epoll_wait_faults_reported");
    flows_end(loop, all);
    end_loop(loop);
}

/* The same in a loop that checks I/O every hop (quantum_ns = 1), whose
 * looks are plain hops (src/loop.c): an interrupted look is an empty one
 * and its hop runs; a refused one ends the run before its hop, and the
 * next run goes on where the chain was. */
static int chain_hops;
static lull_loop *chain_loop;

static void chain_hop(lull_task *t) {
    chain_hops++;
    if (chain_hops < 300) lull_task_post(chain_loop, t);
}

TEST(every_hop_look_faults_reported) {
    shim_reset(1);
    fds_at_start = open_fds();
    lull_loop_options o = {.quantum_ns = 1};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    chain_loop = loop;
    lull_task task;
    CHECK_EQ(lull_task_init(&task, chain_hop), 0);
    chain_hops = 0;
    lull_task_post(loop, &task);
    fail_nth(K_EPOLL_WAIT, -1, 100, 1, EINTR);
    fail_nth(K_EPOLL_WAIT, -1, 200, 1, EPERM);
    arm(true);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), -EPERM);
    CHECK_EQ(chain_hops, 199);
    CHECK(lull_task_pending(&task));
    CHECK_EQ(injected_total(K_EPOLL_WAIT), 2);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.polls, 200);
    CHECK_U64_EQ(m.empty_polls, 200);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(chain_hops, 300);
    end_loop(loop);
}

static uint64_t timer_at;
static int timer_runs;
static void on_timer(lull_timer *t) {
    (void)t;
    timer_at = check_clock_ns();
    timer_runs++;
}

/* A 1.5 ms timer on a loop watching a pipe (so it sleeps in epoll, and the
 * timeout is not whole milliseconds: epoll_pwait2 where it works). It
 * fires once, never early. */
static void timer_through_epoll(lull_loop *loop) {
    lull_timer t;
    lull_timer_init(loop, &t, on_timer);
    timer_runs = 0;
    uint64_t t0 = check_clock_ns();
    lull_timer_start(&t, 1500000, 0);
    while (timer_runs == 0)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(timer_runs, 1);
    CHECK(timer_at - t0 >= 1500000);
}

/* epoll_pwait2 refused at the probe (EPERM, a sandbox): the loop uses
 * epoll_wait from the start. Interrupted later (EINTR): it stays. Refused
 * later (a filter installed after the probe): that wait is made again
 * with epoll_wait, and from then on. Timers fire on time throughout. */
TEST(epoll_pwait2_faults_fall_back) {
    shim_reset(1);
    fds_at_start = open_fds();
    fail_nth(K_EPOLL_PWAIT2, -1, 1, 1, EPERM);
    arm(true);
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    CHECK(!loop->have_pwait2);
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
    lull_io io;
    CHECK_EQ(lull_io_init(loop, &io, p[0], on_pipe), 0);
    CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0);
    uint64_t before = __atomic_load_n(&calls[K_EPOLL_PWAIT2], __ATOMIC_RELAXED);
    timer_through_epoll(loop);
    CHECK_EQ(__atomic_load_n(&calls[K_EPOLL_PWAIT2], __ATOMIC_RELAXED), before);
    lull_io_stop(&io);
    CHECK_EQ(lull_loop_free(loop), 0);

    shim_reset(1);
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    if (!loop->have_pwait2) {
        printf("skipped the rest: epoll_pwait2 does not work here\n");
    } else {
        CHECK_EQ(lull_io_init(loop, &io, p[0], on_pipe), 0);
        CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0);
        /* A wait the machine's load made 0 goes through epoll_wait: try
         * until a wait went through epoll_pwait2. */
        rule *intr = fail_nth(K_EPOLL_PWAIT2, -1, 1, 1, EINTR);
        arm(true);
        for (int i = 0; i < 100 && !hits_of(intr); i++)
            timer_through_epoll(loop);
        CHECK_EQ(hits_of(intr), 1);
        CHECK(loop->have_pwait2);
        rule *perm = fail_nth(K_EPOLL_PWAIT2, -1, 1, 1, EPERM);
        for (int i = 0; i < 100 && !hits_of(perm); i++)
            timer_through_epoll(loop);
        CHECK_EQ(hits_of(perm), 1);
        CHECK(!loop->have_pwait2);
        before = __atomic_load_n(&calls[K_EPOLL_PWAIT2], __ATOMIC_RELAXED);
        timer_through_epoll(loop);
        CHECK_EQ(__atomic_load_n(&calls[K_EPOLL_PWAIT2], __ATOMIC_RELAXED),
                 before);
        lull_io_stop(&io);
    }
    report("epoll_pwait2_faults_fall_back");
    arm(false);
    CHECK_EQ(lull_loop_free(loop), 0);
    close(p[0]);
    close(p[1]);
    CHECK_EQ(open_fds(), fds_at_start);
}

/* ------------------------------------------------ eventfd and futex */

typedef struct poster {
    lull_loop *loop;
    lull_task task;
    int want_sleep; /* wait for the loop to sleep this way, then post */
    rule *after;    /* or NULL: first wait until this rule has fired */
    int rounds;
    bool ran[4]; /* atomic */
    int round;   /* atomic: which post the task stands for */
} poster;

static void on_posted(lull_task *t) {
    poster *p = LULL_CONTAINER_OF(t, poster, task);
    int r = __atomic_load_n(&p->round, __ATOMIC_ACQUIRE);
    __atomic_store_n(&p->ran[r], true, __ATOMIC_RELEASE);
}

static void *poster_main(void *arg) {
    poster *p = arg;
    for (int r = 0; r < p->rounds; r++) {
        while (p->after && hits_of(p->after) == 0)
            sched_yield();
        while (__atomic_load_n(&p->loop->sleeping, __ATOMIC_SEQ_CST) !=
               p->want_sleep)
            sched_yield();
        __atomic_store_n(&p->round, r, __ATOMIC_RELEASE);
        lull_task_post_remote(p->loop, &p->task);
        while (!__atomic_load_n(&p->ran[r], __ATOMIC_ACQUIRE))
            sched_yield();
    }
    return NULL;
}

static int round_waited;
static bool round_ran(void *arg) {
    poster *p = arg;
    return __atomic_load_n(&p->ran[round_waited], __ATOMIC_ACQUIRE);
}

/* Posts from another thread to a loop asleep in epoll, whose wake-up write
 * is faulted; each post must wake the loop (not the 10 s watchdog). */
static void eventfd_rounds(const int *write_errs, const int *read_errs,
                           int rounds, const char *name) {
    lull_loop *loop = new_loop();
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
    lull_io io;
    CHECK_EQ(lull_io_init(loop, &io, p[0], on_pipe), 0);
    CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0);
    for (int r = 0; r < rounds; r++) {
        /* Each post's first write fails with write_errs[r]. */
        if (write_errs[r])
            fail_nth(K_EVENTFD_WRITE, loop->remote_fd, (uint64_t)r + 1, 1,
                     write_errs[r]);
        if (read_errs && read_errs[r])
            fail_nth(K_EVENTFD_READ, loop->remote_fd, 1, 1, read_errs[r]);
    }
    poster ps = {
        .loop = loop, .want_sleep = LULL__SLEEP_EPOLL, .rounds = rounds};
    lull_task_init(&ps.task, on_posted);
    arm(true);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, poster_main, &ps), 0);
    for (int r = 0; r < rounds; r++) {
        round_waited = r;
        run_until_pred(loop, round_ran, &ps, 10);
        CHECK(!watchdog_fired);
    }
    pthread_join(th, NULL);
    report(name);
    lull_io_stop(&io);
    close(p[0]);
    close(p[1]);
    end_loop(loop);
}

/* The wake-up write interrupted (EINTR) is made again; refused with
 * EAGAIN (the counter full) the poster drains the counter and writes again.
 * Every post wakes the loop and runs once. */
TEST_THREADED(eventfd_write_faults_retried) {
    const int w[] = {EINTR, EAGAIN, 0};
    eventfd_rounds(w, NULL, 3, "eventfd_write_faults_retried");
    CHECK(injected_total(K_EVENTFD_WRITE) == 2);
}

/* The counter full (EAGAIN), and the poster's drain of it interrupted
 * (EINTR): the poster drains again and writes; the post wakes the loop. */
TEST_THREADED(eventfd_drain_read_interrupted) {
    const int w[] = {EAGAIN}, r[] = {EINTR};
    eventfd_rounds(w, r, 1, "eventfd_drain_read_interrupted");
    CHECK(injected_total(K_EVENTFD_READ) == 1);
}

static void on_timer_stop(lull_timer *t) {
    on_timer(t);
    lull_loop_stop(t->loop);
}

static void on_loop_post(lull_task *t) {
    poster *p = LULL_CONTAINER_OF(t, poster, task);
    on_posted(t);
    lull_loop_unref(p->loop);
}

static lull_timer far_timer;
static void on_far_post(lull_task *t) {
    on_posted(t);
    lull_timer_stop(&far_timer);
}

/* FUTEX_WAIT returning at once (EINTR: a signal; EAGAIN: the word changed;
 * ETIMEDOUT) is a spurious wake: the loop sleeps again. A timer fires once
 * and not early; a remote post still wakes the loop.
 *
 * The faults are driven, not left to the scheduler: a loop with a deadline
 * an hour away makes its first three waits (each faulted) and a fourth,
 * and only then does another thread post the task that ends the run; so
 * all three are made however slow the machine is, and the hour's timer
 * must not fire (a spurious ETIMEDOUT is no deadline). A post then wakes
 * the loop asleep on its futex after one more spurious return. */
TEST_THREADED(futex_wait_faults_spurious) {
    lull_loop *loop = new_loop();
    const int errs[3] = {EINTR, EAGAIN, ETIMEDOUT};
    rule *spurious[3];
    for (int i = 0; i < 3; i++)
        spurious[i] = fail_nth(K_FUTEX_WAIT, -1, (uint64_t)i + 1, 1, errs[i]);
    arm(true);
    lull_timer_init(loop, &far_timer, on_timer);
    timer_runs = 0;
    lull_timer_start(&far_timer, 3600000000000u, 0);
    poster ps = {.loop = loop,
                 .want_sleep = LULL__SLEEP_FUTEX,
                 .after = spurious[2],
                 .rounds = 1};
    lull_task_init(&ps.task, on_far_post);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, poster_main, &ps), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0); /* until the post */
    pthread_join(th, NULL);
    CHECK(ps.ran[0]);
    CHECK_EQ(timer_runs, 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(hits_of(spurious[i]), 1);

    /* A timer fires once and not early (no fault is needed for that). */
    lull_timer t;
    lull_timer_init(loop, &t, on_timer);
    uint64_t t0 = check_clock_ns();
    lull_timer_start(&t, 20000000, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(timer_runs, 1);
    CHECK(timer_at - t0 >= 20000000);

    /* A post from another thread to the loop asleep on its futex, after
     * the first wait returned at once; a watchdog (unref'd) would stop the
     * run if the post were lost. */
    rule *intr = fail_nth(K_FUTEX_WAIT, -1, 1, 1, EINTR);
    ps = (poster){.loop = loop,
                  .want_sleep = LULL__SLEEP_FUTEX,
                  .after = intr,
                  .rounds = 1};
    lull_task_init(&ps.task, on_loop_post);
    lull_timer dog;
    lull_timer_init(loop, &dog, on_timer_stop);
    lull_timer_unref(&dog);
    timer_runs = 0;
    lull_timer_start(&dog, 10000000000u, 0);
    lull_loop_ref(loop);
    CHECK_EQ(pthread_create(&th, NULL, poster_main, &ps), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    pthread_join(th, NULL);
    CHECK_EQ(timer_runs, 0); /* the post woke it, not the watchdog */
    CHECK(ps.ran[0]);
    lull_timer_stop(&dog);
    CHECK_EQ(hits_of(intr), 1);
    CHECK_EQ(injected_total(K_FUTEX_WAIT), 4);
    report("futex_wait_faults_spurious");
    end_loop(loop);
}

static int pool_work(lull_work *w) {
    (void)w;
    return 7;
}

/* A pool thread's FUTEX_WAIT returning at once (EINTR, EAGAIN) is counted
 * and slept again; the loop waiting for the completions sleeps on its own
 * futex and is faulted too. Each work item runs once and its done once,
 * with the work's status. The shim is armed before the pool thread first
 * sleeps, and the first item waits until that sleep was faulted (idle
 * alone is not enough: a thread preempted between going idle and its wait
 * sees the submit and never waits), so a fault is injected however busy
 * the machine is; whether the loop's own waits come before its completions
 * is up to the scheduler, so they are faulted but not counted on. */
TEST_THREADED(pool_futex_wait_faults_spurious) {
    lull_loop *loop = new_loop();
    const int errs[] = {EINTR, EAGAIN};
    rule *pool_waits =
        add_rule(K_FUTEX_WAIT, -1, FUTEX_WAIT_PRIVATE, 1, 6, 1, errs, 2);
    add_rule(K_FUTEX_WAIT, -1, FUTEX_WAIT_BITSET_PRIVATE, 1, 6, 1, errs, 2);
    arm(true); /* before the pool thread's first wait */
    lull_pool *pool = NULL;
    lull_pool_options o = {.threads = 1};
    CHECK_EQ(lull_pool_new(&pool, &o), 0);
    lull_work w[3];
    for (int i = 0; i < 3; i++) {
        /* One at a time: the pool thread sleeps between them. */
        lull_work_init(&w[i], pool_work, NULL);
        lull_pool_stats st;
        do {
            usleep(1000);
            lull_pool_get_stats(pool, &st);
        } while (st.idle != 1 || (i == 0 && hits_of(pool_waits) == 0));
        CHECK_EQ(lull_work_submit(loop, pool, &w[i]), 0);
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
        CHECK(w[i].pool == NULL); /* done ran */
        CHECK_EQ(w[i].status, 7);
    }
    arm(false);
    /* The thread counts a completion after posting it: wait until it is
     * idle again before reading the counts. */
    lull_pool_stats st;
    do {
        usleep(1000);
        lull_pool_get_stats(pool, &st);
    } while (st.idle != 1);
    CHECK_EQ(st.submitted, 3);
    CHECK_EQ(st.completed, 3);
    CHECK(hits_of(pool_waits) > 0);
    report("pool_futex_wait_faults_spurious");
    CHECK_EQ(lull_pool_free(pool), 0);
    end_loop(loop);
}

/* ------------------------------------------------------------ malloc */

static void heap_growth_fails(void *arg) {
    (void)arg;
    lull_loop *loop = NULL;
    if (lull_loop_new(&loop, NULL) != 0) return;
    lull_timer t;
    lull_timer_init(loop, &t, on_timer);
    fail_nth(K_MALLOC, -1, 1, UINT64_MAX, ENOMEM);
    arm(true);
    lull_timer_start(&t, 1000, 0); /* the heap's first slots */
}

/* close, wrapped for this binary (tests/CMakeLists.txt): counts the calls
 * that closed no fd. A second close of a number lull closed already is a
 * bug however it ends: with another thread opening files meanwhile, it
 * closes theirs. */
int __real_close(int fd);
static int closes_of_no_fd; /* atomic */
int __wrap_close(int fd) {
    int rc = __real_close(fd);
    if (rc < 0 && errno == EBADF)
        __atomic_fetch_add(&closes_of_no_fd, 1, __ATOMIC_RELAXED);
    return rc;
}

/* lull_loop_new failing at each of its allocations closes what it opened
 * once: the epoll fd, closed where its event array could not be
 * allocated, was closed again by the clean-up after it. */
TEST(loop_new_out_of_memory_closes_each_fd_once) {
    shim_reset(1);
    for (uint64_t n = 1;; n++) {
        pthread_mutex_lock(&shim_lock);
        nrules = 0;
        pthread_mutex_unlock(&shim_lock);
        fail_nth(K_MALLOC, -1, n, 1, ENOMEM);
        __atomic_store_n(&closes_of_no_fd, 0, __ATOMIC_RELAXED);
        lull_loop *loop = NULL;
        arm(true);
        int rc = lull_loop_new(&loop, NULL);
        arm(false);
        CHECK_EQ(__atomic_load_n(&closes_of_no_fd, __ATOMIC_RELAXED), 0);
        if (rc == 0) {
            CHECK_EQ(lull_loop_free(loop), 0);
            break;
        }
        CHECK_EQ(rc, -ENOMEM);
    }
}

/* A UDP handle that runs out of memory taking a socket held none, but
 * kept the number, so its close closed the caller's fd (or a number reused
 * since) and counted one open handle fewer than there were. Taking a socket
 * needs no memory now (the handle joined the set of live handles at its
 * init, which is where memory can run out): with every allocation failing,
 * lull_udp_open and lull_udp_bind take theirs, and the close closes each
 * once, never a number it does not hold. */
TEST(udp_out_of_memory_taking_a_socket_holds_none) {
    lull_loop *loop = new_loop();
    lull_udp u;
    memset(&u, 0, sizeof u);
    fail_nth(K_MALLOC, -1, 1, UINT64_MAX, ENOMEM);
    arm(true);
    int rc = lull_udp_init(loop, &u, NULL);
    arm(false);
    CHECK_EQ(rc, -ENOMEM);
    CHECK_EQ(lull_loop_free(loop), 0); /* it holds nothing */
    loop = new_loop();
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    fail_nth(K_MALLOC, -1, 1, UINT64_MAX, ENOMEM);
    arm(true);
    rc = lull_udp_open(&u, fd);
    arm(false);
    CHECK_EQ(rc, 0);
    CHECK_EQ(lull_udp_local_port(&u), 0); /* not bound */
    __atomic_store_n(&closes_of_no_fd, 0, __ATOMIC_RELAXED);
    CHECK_EQ(lull_udp_close(&u, NULL), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK(fcntl(fd, F_GETFD) < 0); /* the handle's: closed with it */
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    fail_nth(K_MALLOC, -1, 1, UINT64_MAX, ENOMEM);
    arm(true);
    rc = lull_udp_bind(&u, "127.0.0.1", 0, 0);
    arm(false);
    CHECK_EQ(rc, 0);
    CHECK(lull_udp_local_port(&u) > 0);
    CHECK_EQ(lull_udp_close(&u, NULL), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(__atomic_load_n(&closes_of_no_fd, __ATOMIC_RELAXED), 0);
    end_loop(loop);
}

#if defined(CHECK_SANDBOX_ARCH) && defined(SYS_recvmmsg)
/* recvmmsg refused by a seccomp filter: datagrams are read with one recvmsg
 * each, and an error met after the first of a batch (the third recvmsg
 * fails here) is reported after the datagrams before it. A callback that
 * stopped reading inside that batch lost it: the rest of the batch came
 * after the restart, the error never (the failed call had taken it from
 * the socket, where recvmmsg would have left it for the next call). */
static int udp_seen[8], udp_seen_n;
static int udp_stop_at; /* the datagram whose callback stops reading */

static void udp_on_recv(lull_udp *u, int status, const void *buf, size_t len,
                        const struct sockaddr *from, unsigned flags) {
    (void)from;
    (void)flags;
    if (udp_seen_n == 8) return;
    udp_seen[udp_seen_n++] = status < 0 ? status : ((const char *)buf)[0];
    CHECK(status < 0 || len == 1);
    if (udp_seen_n == udp_stop_at + 1 && status == 0)
        CHECK_EQ(lull_udp_recv_stop(u), 0);
}

static void udp_late_error_after_stop(void *arg) {
    udp_stop_at = (int)(intptr_t)arg; /* 0, or 1: the batch's last */
    lull_loop *loop = new_loop();
    lull_udp u;
    memset(&u, 0, sizeof u);
    lull_udp_options o = {.recv_batch = 8};
    CHECK_EQ(lull_udp_init(loop, &u, &o), 0);
    int rx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof to;
    CHECK_EQ(bind(rx, (struct sockaddr *)&to, sizeof to), 0);
    CHECK_EQ(getsockname(rx, (struct sockaddr *)&to, &len), 0);
    CHECK_EQ(lull_udp_open(&u, rx), 0);
    check_deny_syscalls((const int[]){SYS_recvmmsg}, 1, EPERM);
    int tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    CHECK(tx >= 0);
    CHECK_EQ(sendto(tx, "a", 1, 0, (struct sockaddr *)&to, sizeof to), 1);
    CHECK_EQ(sendto(tx, "b", 1, 0, (struct sockaddr *)&to, sizeof to), 1);
    CHECK_EQ(lull_udp_recv_start(&u, udp_on_recv), 0);
    fail_nth(K_RECV, rx, 3, 1, ECONNREFUSED);
    arm(true);
    for (int i = 0; i < 10 && udp_seen_n <= udp_stop_at; i++)
        lull_loop_run(loop, LULL_RUN_ONCE);
    arm(false);
    CHECK_EQ(udp_seen_n, udp_stop_at + 1); /* stopped there */
    CHECK_EQ(lull_udp_recv_start(&u, udp_on_recv), 0);
    for (int i = 0; i < 10 && udp_seen_n < 3; i++)
        lull_loop_run(loop, LULL_RUN_NOWAIT);
    CHECK_EQ(sendto(tx, "c", 1, 0, (struct sockaddr *)&to, sizeof to), 1);
    for (int i = 0; i < 10 && udp_seen_n < 4; i++)
        lull_loop_run(loop, LULL_RUN_NOWAIT); /* "c" is there already */
    CHECK_EQ(udp_seen_n, 4);
    CHECK_EQ(udp_seen[0], 'a');
    CHECK_EQ(udp_seen[1], 'b');
    CHECK_EQ(udp_seen[2], -ECONNREFUSED);
    CHECK_EQ(udp_seen[3], 'c');
    close(tx);
    CHECK_EQ(lull_udp_close(&u, NULL), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    end_loop(loop);
}

TEST(udp_recvmsg_fallback_error_kept_across_a_stop_in_the_batch) {
    CHECK(check_exits_cleanly(udp_late_error_after_stop, (void *)0));
    CHECK(check_exits_cleanly(udp_late_error_after_stop, (void *)1));
}
#endif

/* Where lull allocates, out of memory is an errno: lull_loop_new at each
 * of its allocations (nothing leaks: ASan checks), lull_io_start growing
 * the watcher table, lull_stream_open and lull_server_accept (the read
 * buffer: the fd is closed), lull_endpoint_send_copy (nothing queued),
 * lull_loop_name. lull_timer_start cannot return one: growing the timer
 * heap aborts with a message, as its documentation says. */
TEST(malloc_faults_return_enomem) {
    shim_reset(1);
    signal(SIGPIPE, SIG_DFL);
    fds_at_start = open_fds();
    lull_loop *loop = NULL;
    int failed = 0;
    for (uint64_t n = 1;; n++) {
        pthread_mutex_lock(&shim_lock);
        nrules = 0; /* the counts stay */
        pthread_mutex_unlock(&shim_lock);
        fail_nth(K_MALLOC, -1, n, 1, ENOMEM);
        arm(true);
        int rc = lull_loop_new(&loop, NULL);
        arm(false);
        if (rc == 0) break;
        CHECK_EQ(rc, -ENOMEM);
        CHECK(loop == NULL);
        failed++;
        CHECK_EQ(open_fds(), fds_at_start);
    }
    CHECK(failed >= 3); /* the loop, its audit table, its event array */
    printf("lull_loop_new: allocations 1..%d failed, each -ENOMEM\n", failed);

    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
    lull_io io;
    CHECK_EQ(lull_io_init(loop, &io, p[0], on_pipe), 0);
    fail_nth(K_MALLOC, -1, 1, 1, ENOMEM);
    arm(true);
    CHECK_EQ(lull_io_start(&io, LULL_READABLE), -ENOMEM);
    arm(false);
    CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0);
    lull_io_stop(&io);

    CHECK_EQ(lull_loop_name(loop, (lull_any_fn)on_pipe, "x"),
             0); /* table of 8 made */
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    lull_stream s;
    fail_nth(K_MALLOC, -1, 1, 1, ENOMEM);
    arm(true);
    CHECK_EQ(lull_stream_open(loop, &s, sv[0], NULL), -ENOMEM);
    arm(false);
    CHECK(fcntl(sv[0], F_GETFD) < 0 && errno == EBADF);
    close(sv[1]);

    flow *a = flow_new(loop, 1, 10);
    size_t q = a->tx.ep.queued;
    fail_nth(K_MALLOC, -1, 1, 1, ENOMEM);
    arm(true);
    CHECK_EQ(lull_endpoint_send_copy(&a->tx.ep, "abcd", 4), -ENOMEM);
    arm(false);
    CHECK_EQ(a->tx.ep.queued, q);
    flow *all[] = {a, NULL};
    flows_run(loop, all, 10);
    check_complete(a);
    flows_end(loop, all);

    /* lull_loop_name growing its table past 8 names. */
    static const lull_any_fn fns[9] = {
        (lull_any_fn)on_pipe,       (lull_any_fn)on_timer,
        (lull_any_fn)on_watchdog,   (lull_any_fn)flow_frame,
        (lull_any_fn)flow_tx_close, (lull_any_fn)flow_rx_close,
        (lull_any_fn)flow_release,  (lull_any_fn)on_posted,
        (lull_any_fn)on_connection};
    for (int i = 1; i < 8; i++)
        CHECK_EQ(lull_loop_name(loop, fns[i], "x"), 0);
    fail_nth(K_MALLOC, -1, 1, 1, ENOMEM);
    arm(true);
    CHECK_EQ(lull_loop_name(loop, fns[8], "x"), -ENOMEM);
    arm(false);

    /* lull_server_accept: the connection is closed, the next one taken. */
    listen_tcp(loop);
    flow *b = flow_alloc(2, 10), *c = flow_alloc(3, 10);
    accept_queue[0] = b;
    accept_queue[1] = c;
    accept_want = 2;
    fail_nth(K_MALLOC, -1, 1, 1, ENOMEM);
    in_call = true;
    CHECK_EQ(lull_stream_connect_tcp(loop, &b->tx, "127.0.0.1",
                                     lull_server_port(&srv), NULL,
                                     flow_connected),
             0);
    in_call = false;
    lull_endpoint_set_callbacks(&b->tx.ep, NULL, NULL, flow_tx_close);
    flow_send_all(b);
    arm(true); /* the next allocation is the accept's read buffer */
    while (accept_next < 1)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    arm(false);
    CHECK_EQ(accept_rc, -ENOMEM);
    in_call = true;
    CHECK_EQ(lull_stream_connect_tcp(loop, &c->tx, "127.0.0.1",
                                     lull_server_port(&srv), NULL,
                                     flow_connected),
             0);
    in_call = false;
    lull_endpoint_set_callbacks(&c->tx.ep, NULL, NULL, flow_tx_close);
    flow_send_all(c);
    flow *bc[] = {b, c, NULL};
    run_until_pred(loop, flows_over, bc, 10);
    CHECK(b->tx_closed); /* its connection was closed: EOF or reset */
    check_complete(c);
    flows_end(loop, bc);
    lull_server_close(&srv);

    CHECK(check_dies(heap_growth_fails, NULL,
                     "out of memory growing the timer heap"));
    report("malloc_faults_return_enomem");
    close(p[0]);
    close(p[1]);
    end_loop(loop);
}

/* The same growth from a further arm inside a callback: the first arm
 * reads and takes the heap's first slots, the arms after it defer into
 * them, and the one that finds them full reads the clock and grows the heap
 * (src/timer.c). Out of memory there aborts with the same message, never
 * leaving a timer half armed. */
#define GROW_TIMERS 200
static lull_timer grow_timers[GROW_TIMERS];
static int grow_armed;

static void arm_until_growth_fails(lull_task *t) {
    (void)t;
    lull_timer_start(&grow_timers[0], 1000000000, 0);
    fail_nth(K_MALLOC, -1, 1, UINT64_MAX, ENOMEM);
    arm(true);
    for (grow_armed = 1; grow_armed < GROW_TIMERS; grow_armed++)
        lull_timer_start(&grow_timers[grow_armed], 1000000000, 0);
    arm(false);
    fprintf(stderr, "all %d arms returned\n", grow_armed);
}

static void deferred_growth_fails(void *arg) {
    (void)arg;
    lull_loop *loop = NULL;
    if (lull_loop_new(&loop, NULL) != 0) return;
    for (int i = 0; i < GROW_TIMERS; i++)
        lull_timer_init(loop, &grow_timers[i], on_timer);
    lull_task task;
    lull_task_init(&task, arm_until_growth_fails);
    lull_task_post(loop, &task);
    (void)lull_loop_run(loop, LULL_RUN_NOWAIT);
}

TEST(malloc_fault_growing_the_heap_inside_a_callback_aborts) {
    shim_reset(1);
    CHECK(check_dies(deferred_growth_fails, NULL,
                     "out of memory growing the timer heap"));
}

/* A framed stream's read buffer cannot grow for a long frame: that stream
 * closes with -ENOMEM; another stream on the loop goes on. */
TEST(malloc_read_buffer_growth_closes_one_stream) {
    lull_loop *loop = new_loop();
    flow *a = flow_alloc(1, 50);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    lull_stream_options small = {.read_size = 64};
    CHECK_EQ(lull_stream_open(loop, &a->tx, sv[0], NULL), 0);
    CHECK_EQ(lull_stream_open(loop, &a->rx, sv[1], &small), 0);
    lull_endpoint_set_callbacks(&a->tx.ep, NULL, NULL, flow_tx_close);
    rx_callbacks(a);
    a->txfd = sv[0];
    flow *b = flow_new(loop, 2, 100);
    /* No allocation happens on the loop's hot paths: the first one while
     * the loop runs is the read buffer's growth, once the timer heap has
     * its first slots (the watchdog's). */
    lull_timer t;
    lull_timer_init(loop, &t, on_timer);
    lull_timer_start(&t, 1000000000, 0);
    lull_timer_stop(&t);
    rule *r = fail_nth(K_MALLOC, -1, 1, 1, ENOMEM);
    flow_send_all(a);
    flow_send_all(b);
    arm(true);
    flow *all[] = {a, b, NULL};
    run_until_pred(loop, flows_over, all, 10);
    arm(false);
    CHECK_EQ(hits_of(r), 1);
    CHECK(a->rx_closed);
    CHECK_EQ(a->rx_reason, -ENOMEM);
    CHECK_EQ(a->received, 0);
    check_complete(b);
    report("malloc_read_buffer_growth_closes_one_stream");
    flows_end(loop, all);
    end_loop(loop);
}

/* ----------------------------------------------------- random faults */

/* Connections echo frames through a TCP server while recv, sendmsg,
 * accept4 and epoll_ctl fail at random seeded calls. A fault that ends a
 * connection (ECONNRESET, EPIPE; ENOMEM or EPERM from epoll_ctl on its
 * fd) marks it "hit"; the others (EINTR, EAGAIN, short counts, any
 * accept4 failure) must cost nothing. Every connection either receives
 * all its echoes in order or, if hit, a prefix of them in order and then
 * its close; every frame is released; nothing stays open. */
#define R_CONNS  16
#define R_FRAMES 100
#define FD_MAX   4096

typedef struct rconn {
    int id, port, echoed, sent_n, released;
    bool closed, done, hit, closing;
    int reason;
    lull_stream cli;
    sent frames[R_FRAMES];
    unsigned char *bufs[R_FRAMES];
} rconn;

typedef struct sconn {
    lull_stream s;
    bool open;
} sconn;

static rconn *rconns;
static sconn sconns[R_CONNS * 2];
static int nsconns, sconns_open;
static int fd_conn[FD_MAX]; /* fd -> connection id + 1 (0: none) */
static uint64_t r_seed;
static int r_hits, r_complete;

static void r_fail(int line, const char *what, int id) {
    check_fail(__FILE__, line, "seed %" PRIu64 ": connection %d: %s", r_seed,
               id, what);
}

static void r_inject(int kind, int fd, int err) {
    bool ends = err == ECONNRESET || err == EPIPE || kind == K_EPOLL_CTL;
    if (!ends || fd < 0 || fd >= FD_MAX || !fd_conn[fd]) return;
    rconns[fd_conn[fd] - 1].hit = true;
}

static void r_cli_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    rconn *c = LULL_CONTAINER_OF(ep, rconn, cli.ep);
    if (c->echoed >= R_FRAMES || !frame_ok(bytes, len, c->id, c->echoed))
        r_fail(__LINE__, "echo out of order or corrupt", c->id);
    if (++c->echoed == R_FRAMES) {
        c->done = true;
        c->closing = true;
        lull_endpoint_close(ep, 0); /* on_close follows, in a later turn */
        c->closing = false;
        if (c->closed) r_fail(__LINE__, "closed inside the call", c->id);
    }
}

/* Every connection's one free path: its close callback, exactly once,
 * whoever closed it (itself when done, a fault, the server). */
static void r_cli_close(lull_endpoint *ep, int reason) {
    rconn *c = LULL_CONTAINER_OF(ep, rconn, cli.ep);
    if (c->closed) r_fail(__LINE__, "closed twice", c->id);
    if (c->closing) r_fail(__LINE__, "closed inside the call", c->id);
    if (c->done && reason != 0) r_fail(__LINE__, "not its own reason", c->id);
    c->closed = true;
    c->reason = reason;
}

static void r_cli_connected(lull_stream *s, int status) {
    rconn *c = LULL_CONTAINER_OF(s, rconn, cli);
    if (c->closed) r_fail(__LINE__, "closed before its connect", c->id);
    if (status < 0) c->reason = status; /* the close callback follows */
}

static void r_release(lull_frame *fr) {
    sent *s = LULL_CONTAINER_OF(fr, sent, fr);
    ((rconn *)(void *)s->owner)->released++;
}

static void r_srv_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    (void)lull_endpoint_send_copy(ep, bytes, len); /* -EPIPE once it failed */
}

static void r_srv_close(lull_endpoint *ep, int reason) {
    (void)reason;
    sconn *sc = LULL_CONTAINER_OF(ep, sconn, s.ep);
    sc->open = false;
    sconns_open--;
}

static void r_connection(lull_server *s) {
    if (s->pending < 0) return; /* accepting paused (EMFILE): told why */
    CHECK(nsconns < R_CONNS * 2);
    struct sockaddr_in peer;
    socklen_t len = sizeof peer;
    CHECK_EQ(getpeername(s->pending, (struct sockaddr *)&peer, &len), 0);
    int port = ntohs(peer.sin_port), id = -1;
    for (int i = 0; i < R_CONNS; i++)
        if (rconns[i].port == port) id = i;
    CHECK(id >= 0 && s->pending < FD_MAX);
    fd_conn[s->pending] = id + 1;
    sconn *sc = &sconns[nsconns++];
    if (lull_server_accept(s, &sc->s, NULL) < 0) return; /* fd closed */
    sc->open = true;
    sconns_open++;
    lull_endpoint_set_callbacks(&sc->s.ep, r_srv_frame, NULL, r_srv_close);
}

static bool r_over(void *arg) {
    (void)arg;
    for (int i = 0; i < R_CONNS; i++)
        if (!rconns[i].closed) return false;
    return sconns_open == 0;
}

static uint64_t r_injected[K_COUNT][NERR];

static void random_seed(uint64_t seed) {
    r_seed = seed;
    lull_loop *loop = new_loop();
    shim_reset(seed);
    memset(fd_conn, 0, sizeof fd_conn);
    nsconns = sconns_open = 0;
    rconns = calloc(R_CONNS, sizeof *rconns);
    CHECK(rconns);
    CHECK_EQ(
        lull_server_listen_tcp(loop, &srv, "127.0.0.1", 0, 64, r_connection),
        0);
    srv.retry_ns = 1000000;
    for (int i = 0; i < R_CONNS; i++) {
        rconn *c = &rconns[i];
        c->id = i;
        CHECK_EQ(lull_stream_connect_tcp(loop, &c->cli, "127.0.0.1",
                                         lull_server_port(&srv), NULL,
                                         r_cli_connected),
                 0);
        lull_endpoint_set_callbacks(&c->cli.ep, r_cli_frame, NULL, r_cli_close);
        int fd = lull_stream_fd(&c->cli);
        struct sockaddr_in me;
        socklen_t len = sizeof me;
        CHECK_EQ(getsockname(fd, (struct sockaddr *)&me, &len), 0);
        c->port = ntohs(me.sin_port);
        CHECK(fd < FD_MAX);
        fd_conn[fd] = i + 1;
        for (int k = 0; k < R_FRAMES; k++) {
            size_t n = frame_size(i, k);
            c->bufs[k] = malloc(n);
            CHECK(c->bufs[k]);
            fill_frame(c->bufs[k], i, k, n);
            c->frames[k] = (sent){
                .fr = {.bytes = c->bufs[k], .len = n, .release = r_release},
                .owner = (flow *)(void *)c};
            if (lull_endpoint_send(&c->cli.ep, &c->frames[k].fr) == 0)
                c->sent_n++;
        }
    }
    const int rw[] = {EINTR, EINTR, EINTR, EAGAIN, EAGAIN, EAGAIN,
                      SHORT, SHORT, SHORT, SHORT,  SHORT,  ECONNRESET};
    const int sw[] = {EINTR, EINTR, EINTR, EAGAIN, EAGAIN, EAGAIN,
                      SHORT, SHORT, SHORT, SHORT,  SHORT,  EPIPE};
    const int ac[] = {EINTR, EAGAIN, ECONNABORTED, EMFILE, ENOMEM, EPERM};
    const int ep[] = {ENOMEM, EPERM};
    add_rule(K_RECV, -1, 0, 1, UINT64_MAX, 4, rw, 12);
    add_rule(K_SENDMSG, -1, 0, 1, UINT64_MAX, 4, sw, 12);
    add_rule(K_ACCEPT, -1, 0, 1, UINT64_MAX, 3, ac, 6);
    add_rule(K_EPOLL_CTL, -1, EPOLL_CTL_ADD, 1, UINT64_MAX, 20, ep, 2);
    add_rule(K_EPOLL_CTL, -1, EPOLL_CTL_MOD, 1, UINT64_MAX, 20, ep, 2);
    on_inject = r_inject;
    snprintf(fail_note, sizeof fail_note, " (seed %" PRIu64 ")", seed);
    arm(true);
    run_until_pred(loop, r_over, NULL, 20);
    arm(false);
    fail_note[0] = '\0';
    for (int i = 0; i < R_CONNS; i++) {
        rconn *c = &rconns[i];
        if (!c->hit && !c->done) {
            char what[96];
            snprintf(what, sizeof what,
                     "no fault ended it, yet %d of %d echoes, reason %d",
                     c->echoed, R_FRAMES, c->reason);
            r_fail(__LINE__, what, i);
        }
        if (c->released != c->sent_n)
            r_fail(__LINE__, "frames not released", i);
        r_hits += c->hit && !c->done;
        r_complete += c->done;
        for (int k = 0; k < R_FRAMES; k++)
            free(c->bufs[k]);
    }
    lull_server_close(&srv);
    pthread_mutex_lock(&shim_lock);
    for (int k = 0; k < K_COUNT; k++)
        for (int e = 0; e < NERR; e++)
            r_injected[k][e] += injected[k][e];
    pthread_mutex_unlock(&shim_lock);
    free(rconns);
    end_loop(loop);
}

TEST(random_faults_echo) {
    const char *one = getenv("LULL_FAULT_SEED");
    const char *many = getenv("LULL_FAULT_SEEDS");
    uint64_t first = one ? strtoull(one, NULL, 0) : 1;
    int seeds = one ? 1 : many ? atoi(many) : 32;
    for (int i = 0; i < seeds; i++)
        random_seed(first + (uint64_t)i);
    memcpy(injected, r_injected, sizeof injected);
    printf("%d seeds from %" PRIu64 ", %d connections of %d frames each: %d "
           "complete, %d ended by a fault, the rest (hit but complete) %d\n",
           seeds, first, seeds * R_CONNS, R_FRAMES, r_complete, r_hits,
           seeds * R_CONNS - r_complete - r_hits);
    report("random_faults_echo");
}

/* A UDP handle is in the process's set of handles in use from its init
 * (without memory for the set, the init fails), so that an init refuses
 * it until its close callback ran. The close cannot fail and needs no
 * memory: with none, the init still refuses it. */
static int udp_closes;
static void count_udp_close(lull_udp *u) {
    (void)u;
    udp_closes++;
}

TEST(udp_closed_without_memory_for_the_in_use_set_is_still_refused) {
    lull_loop *loop = new_loop();
    lull_udp u;
    fail_nth(K_MALLOC, -1, 1, UINT64_MAX, ENOMEM);
    arm(true);
    CHECK_EQ(lull_udp_init(loop, &u, NULL), -ENOMEM);
    arm(false);
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    fail_nth(K_MALLOC, -1, 1, UINT64_MAX, ENOMEM);
    arm(true);
    CHECK_EQ(lull_udp_close(&u, count_udp_close), 0);
    arm(false);
    CHECK_EQ(lull_udp_init(loop, &u, NULL), -EBUSY);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(udp_closes, 1);
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A Unix listen that fails after its bind made the socket file (here: no
 * memory for the set of handles in use) leaves no file behind: it was
 * lull's to remove, and a stale one made every later listen on that path
 * fail with -EADDRINUSE, so the failure could never be retried. */
static void on_no_connection(lull_server *s) {
    (void)s;
}

TEST(failed_unix_listen_leaves_no_socket_file) {
    lull_loop *loop = new_loop();
    char path[64];
    snprintf(path, sizeof path, "/tmp/lull-faults-listen-%d", (int)getpid());
    unlink(path);
    lull_server u;
    fail_nth(K_MALLOC, -1, 1, UINT64_MAX, ENOMEM);
    arm(true);
    int rc = lull_server_listen_unix(loop, &u, path, 0, on_no_connection);
    arm(false);
    CHECK_EQ(rc, -ENOMEM);
    CHECK_EQ(access(path, F_OK), -1);
    CHECK_EQ(lull_server_listen_unix(loop, &u, path, 0, on_no_connection), 0);
    lull_server_close(&u);
    unlink(path);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ----------------------------------------- lull_loop_fork failing midway */

/* lull_loop_fork in a child whose epoll_ctl fails (ENOMEM: out of kernel
 * memory) at each of its steps in turn: the rebuild of the epoll set and
 * the registration of the child's own eventfd. The call says -ENOMEM, and
 * once the kernel has memory again a second call gives the child a
 * working loop (its pipe watcher, signal handle, fs watch and remote
 * posts), while the parent's loop, the same handles, goes on as before
 * after each child. */
typedef struct forked_case {
    lull_loop *loop;
    lull_io io;
    int pipe[2];
    int reads;
    lull_signal sig;
    int signals;
    lull_fsevent watch;
    unsigned fs_events;
    lull_task post;
    int posts;
} forked_case;

static forked_case g_fc;

static void fc_readable(lull_io *io, int events) {
    (void)io;
    CHECK(events & LULL_READABLE);
    char c;
    CHECK_EQ(read(g_fc.pipe[0], &c, 1), 1);
    g_fc.reads++;
}

static void fc_signal(lull_signal *s, int signum) {
    (void)s;
    CHECK_EQ(signum, SIGUSR1);
    g_fc.signals++;
}

static void fc_fsevent(lull_fsevent *w, unsigned events, const char *name,
                       const char *other) {
    (void)w;
    (void)name;
    (void)other;
    g_fc.fs_events |= events;
}

static void fc_posted(lull_task *t) {
    (void)t;
    g_fc.posts++;
}

static void *fc_poster(void *arg) {
    lull_task_post_remote(arg, &g_fc.post);
    return NULL;
}

static void fc_guard(lull_timer *t) {
    (void)t;
    check_fail(__FILE__, __LINE__, "pid %d: the loop heard nothing in 10 s",
               (int)getpid());
}

/* Each of a byte on the pipe, a SIGUSR1 and a remote post from another
 * thread reaches its handle through the loop's own kernel state. */
static void fc_check_working(void) {
    lull_loop *loop = g_fc.loop;
    lull_timer guard;
    lull_timer_init(loop, &guard, fc_guard);
    lull_timer_start(&guard, 10ull * 1000000000u, 0);
    lull_timer_unref(&guard);
    int reads = g_fc.reads, signals = g_fc.signals, posts = g_fc.posts;
    CHECK_EQ(write(g_fc.pipe[1], "x", 1), 1);
    while (g_fc.reads == reads)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(kill(getpid(), SIGUSR1), 0);
    while (g_fc.signals == signals)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, fc_poster, loop), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    while (g_fc.posts == posts)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    lull_timer_stop(&guard);
}

TEST_THREADED(fork_failing_midway_can_be_called_again) {
    lull_loop *loop = new_loop();
    g_fc.loop = loop;
    CHECK_EQ(pipe2(g_fc.pipe, O_CLOEXEC), 0);
    CHECK_EQ(lull_io_init(loop, &g_fc.io, g_fc.pipe[0], fc_readable), 0);
    CHECK_EQ(lull_io_start(&g_fc.io, LULL_READABLE), 0);
    CHECK_EQ(lull_signal_init(loop, &g_fc.sig, fc_signal), 0);
    CHECK_EQ(lull_signal_start(&g_fc.sig, SIGUSR1), 0);
    char dir[] = "/tmp/lull-faults-fork-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK_EQ(lull_fsevent_init(loop, &g_fc.watch), 0);
    CHECK_EQ(lull_fsevent_start(&g_fc.watch, dir, fc_fsevent), 0);
    lull_task_init(&g_fc.post, fc_posted);
    CHECK(lull_loop_backend_fd(loop) >= 0); /* a host's set, too */
    fc_check_working();
    int failed = 0;
    for (uint64_t nth = 1;; nth++) {
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            shim_reset(1);
            add_rule(K_EPOLL_CTL, -1, EPOLL_CTL_ADD, nth, 1, 1,
                     (const int[]){ENOMEM}, 1);
            arm(true);
            int rc = lull_loop_fork(loop);
            arm(false);
            bool hit = hits_of(&rules[0]) > 0;
            if (hit) {
                CHECK_EQ(rc, -ENOMEM);
                CHECK_EQ(lull_loop_fork(loop), 0);
            } else {
                CHECK_EQ(rc, 0);
            }
            fc_check_working();
            /* The inherited watch ended in the child. */
            CHECK(g_fc.fs_events & LULL_FSEVENT_GONE);
            CHECK(lull_loop_backend_fd(loop) >= 0);
            fflush(NULL);
            _exit(hit ? 10 : 11);
        }
        int status;
        CHECK_EQ(waitpid(pid, &status, 0), pid);
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 10 || WEXITSTATUS(status) == 11);
        /* The parent's loop, after the child's. */
        fc_check_working();
        CHECK(!(g_fc.fs_events & LULL_FSEVENT_GONE));
        if (WEXITSTATUS(status) == 11) break; /* no call left to fail */
        failed++;
        CHECK(nth < 64);
    }
    /* The rebuild registers the three watchers, then the eventfd. */
    CHECK(failed >= 4);
    printf("lull_loop_fork failed at %d epoll_ctl calls, each retried\n",
           failed);
    lull_fsevent_stop(&g_fc.watch);
    lull_signal_stop(&g_fc.sig);
    lull_io_stop(&g_fc.io);
    close(g_fc.pipe[0]);
    close(g_fc.pipe[1]);
    rmdir(dir);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ------------------------------------- every allocation of a program */

/* One program on streams, loopback, timers, a pool and its file helpers,
 * run again and again with its Nth allocation failing (N = 1, 2, ...,
 * until none is left to fail), each run in a child. Every public call
 * that allocates returns 0 or -ENOMEM; one refused leaves its handle
 * unopened (a stream's fd closed) or usable; what was accepted arrives
 * whole and in order, every callback owed runs, and the loop frees
 * cleanly with no fd left open. Growing the timer heap stops the program
 * with a message, as lull.h says: that run passes. */

#if defined(__SANITIZE_ADDRESS__)
#define SW_LEAK_CHECK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SW_LEAK_CHECK 1
#endif
#endif
#ifndef SW_LEAK_CHECK
#define SW_LEAK_CHECK 0
#endif
#if SW_LEAK_CHECK
#include <sanitizer/lsan_interface.h>
#endif

enum { SW_SENDS = 4 };
static lull_loop *sw_loop;
static size_t sw_lb_got, sw_lb_want, sw_st_got, sw_st_want;
static bool sw_lb_bad, sw_st_bad;
static int sw_timers, sw_closes, sw_closes_owed;
static int sw_work_status = 1, sw_fs_status = 1;
static int64_t sw_fs_result;
static size_t sw_dir_entries;

static void sw_lb_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    (void)ep;
    /* Frames are "0", "1", ...: in order, none lost before a refusal. */
    if (len != 1 || ((const char *)bytes)[0] != (char)('0' + sw_lb_got))
        sw_lb_bad = true;
    sw_lb_got++;
}

static void sw_st_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    (void)ep;
    for (size_t i = 0; i < len; i++)
        if (((const char *)bytes)[i] != (char)('a' + (sw_st_got + i) % 26))
            sw_st_bad = true;
    sw_st_got += len;
}

static void sw_closed(lull_endpoint *ep, int reason) {
    (void)ep;
    (void)reason;
    sw_closes++;
}

static void sw_timer(lull_timer *t) {
    (void)t;
    sw_timers++;
}

static int sw_work(lull_work *w) {
    (void)w;
    return 7;
}

static void sw_work_done(lull_work *w, int status) {
    (void)w;
    sw_work_status = status;
}

static bool sw_dir(lull_fs *req, const lull_dirent *ents, size_t n) {
    (void)req;
    (void)ents;
    sw_dir_entries += n;
    return true;
}

static void sw_fs_done(lull_fs *req, int64_t result) {
    (void)req;
    sw_fs_result = result;
    sw_fs_status = 0;
}

static bool sw_ok(int rc) {
    if (rc != 0 && rc != -ENOMEM)
        check_fail(__FILE__, __LINE__, "a call returned %d, not 0 or -ENOMEM",
                   rc);
    return rc == 0;
}

/* 0: a failure was injected and all was well; 3: none was left. */
static int sweep_child(uint64_t nth) {
    int fds = open_fds();
    shim_reset(1);
    fail_nth(K_MALLOC, -1, nth, 1, ENOMEM);
    arm(true);
    lull_loop *loop = NULL;
    if (!sw_ok(lull_loop_new(&loop, NULL))) {
        arm(false);
        CHECK(loop == NULL);
        CHECK_EQ(open_fds(), fds);
        return 0;
    }
    sw_loop = loop;
    lull_timer t[3];
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(lull_timer_init(loop, &t[i], sw_timer), 0);
        lull_timer_start(&t[i], 1000000u * (uint64_t)(i + 1), 0);
    }
    lull_loopback a, b;
    bool lb = sw_ok(lull_loopback_pair(loop, &a, &b, NULL));
    if (lb) {
        lull_endpoint_set_callbacks(&a.ep, NULL, NULL, sw_closed);
        lull_endpoint_set_callbacks(&b.ep, sw_lb_frame, NULL, sw_closed);
        sw_closes_owed += 2;
        for (int i = 0; i < SW_SENDS; i++) {
            char c = (char)('0' + sw_lb_want);
            if (sw_ok(lull_endpoint_send_copy(&a.ep, &c, 1))) sw_lb_want++;
        }
    }
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    lull_stream s1, s2;
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    bool st1 = sw_ok(lull_stream_open(loop, &s1, sv[0], &raw));
    if (!st1) CHECK(fcntl(sv[0], F_GETFD) < 0 && errno == EBADF);
    bool st2 = sw_ok(lull_stream_open(loop, &s2, sv[1], &raw));
    if (!st2) CHECK(fcntl(sv[1], F_GETFD) < 0 && errno == EBADF);
    if (st1) {
        lull_endpoint_set_callbacks(&s1.ep, NULL, NULL, sw_closed);
        sw_closes_owed++;
    }
    if (st2) {
        lull_endpoint_set_callbacks(&s2.ep, sw_st_frame, NULL, sw_closed);
        sw_closes_owed++;
    }
    if (st1 && st2) {
        char chunk[100];
        for (int i = 0; i < SW_SENDS; i++) {
            for (size_t k = 0; k < sizeof chunk; k++)
                chunk[k] = (char)('a' + (sw_st_want + k) % 26);
            if (sw_ok(lull_endpoint_send_copy(&s1.ep, chunk, sizeof chunk)))
                sw_st_want += sizeof chunk;
        }
    }
    lull_pool *pool = NULL;
    lull_pool_options po = {.threads = 1};
    bool pooled = sw_ok(lull_pool_new(&pool, &po));
    lull_work w;
    lull_fs fs = {0};
    if (pooled) {
        CHECK_EQ(lull_work_init(&w, sw_work, sw_work_done), 0);
        CHECK_EQ(lull_work_submit(loop, pool, &w), 0);
        if (!sw_ok(lull_fs_scandir(loop, pool, &fs, ".", sw_dir, sw_fs_done)))
            sw_fs_status = 0; /* refused: cb never runs */
    } else {
        sw_work_status = 7;
        sw_fs_status = 0;
    }
    /* Runs until what is owed came. */
    for (int i = 0; i < 100000; i++) {
        bool lb_done = !lb || sw_lb_got == sw_lb_want;
        bool st_done = !(st1 && st2) || sw_st_got >= sw_st_want;
        if (sw_timers == 3 && lb_done && st_done && sw_work_status != 1 &&
            sw_fs_status != 1)
            break;
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    }
    CHECK_EQ(sw_timers, 3);
    CHECK(!sw_lb_bad && !sw_st_bad);
    if (lb) CHECK_EQ(sw_lb_got, sw_lb_want);
    /* A stream whose read buffer could not grow closes (-ENOMEM): what
     * came before is whole; otherwise all of it came. */
    CHECK(sw_st_got <= sw_st_want);
    CHECK_EQ(sw_work_status, 7);
    CHECK(sw_fs_result >= 0 || sw_fs_result == -ENOMEM);
    if (lb) {
        lull_endpoint_close(&a.ep, 0);
        lull_endpoint_close(&b.ep, 0);
    }
    if (st1) lull_endpoint_close(&s1.ep, 0);
    if (st2) lull_endpoint_close(&s2.ep, 0);
    for (int i = 0; i < 1000 && sw_closes < sw_closes_owed; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(sw_closes, sw_closes_owed);
    if (pooled) CHECK_EQ(lull_pool_free(pool), 0);
    for (int i = 0; i < 1000 && lull_loop_alive(loop); i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    arm(false);
    bool hit = injected_total(K_MALLOC) > 0;
    CHECK_EQ(lull_loop_free(loop), 0);
    CHECK_EQ(open_fds(), fds);
    return hit ? 0 : 3;
}

TEST(every_allocation_of_a_program_fails_in_turn) {
    int heap_stops = 0;
    uint64_t nth = 1;
    for (;; nth++) {
        CHECK(nth < 10000);
        FILE *err = tmpfile();
        CHECK(err != NULL);
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            dup2(fileno(err), 2);
            int rc = sweep_child(nth);
            fflush(NULL);
#if SW_LEAK_CHECK
            /* _exit runs no exit-time leak check: what a refusal lost
             * is looked for now. */
            if (__lsan_do_recoverable_leak_check()) _exit(4);
#endif
            _exit(rc);
        }
        int status;
        CHECK_EQ(waitpid(pid, &status, 0), pid);
        char said[2048] = "";
        rewind(err);
        said[fread(said, 1, sizeof said - 1, err)] = 0;
        fclose(err);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 3) break;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT &&
            strstr(said, "out of memory growing the timer heap")) {
            heap_stops++;
            continue;
        }
        check_fail(
            __FILE__, __LINE__, "allocation %llu failing: %s %d: %s",
            (unsigned long long)nth, WIFSIGNALED(status) ? "signal" : "exit",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), said);
    }
    printf("%llu allocations failed in turn (%d stopped growing the timer "
           "heap)\n",
           (unsigned long long)nth - 1, heap_stops);
}
