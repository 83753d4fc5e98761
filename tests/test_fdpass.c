/* Descriptors passed over Unix stream sockets (lull_stream_send_fds,
 * lull_stream_take_fds), the peer's credentials, a listening socket adopted
 * (lull_server_open), and the non-queueing write (lull_stream_try_write).
 *
 * Every fd case counts /proc/self/fd before and after: each passed fd is
 * handed over or closed, whoever closed the connection and whenever (a
 * frame never delivered, a peer gone before reading, a frame cut short,
 * fds the kernel dropped under a lowered RLIMIT_NOFILE). */
#include "check.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lull.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SO_PASSPIDFD
#define SO_PASSPIDFD 76 /* asm-generic/socket.h, Linux 6.5 */
#endif

static lull_loop *new_loop(void) {
    lull_loop_options o = {.clock = LULL_CLOCK_MONOTONIC};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    signal(SIGPIPE, SIG_DFL); /* a SIGPIPE anywhere kills the case */
    return loop;
}

static int fd_count(void) {
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1; /* the directory's own fd */
}

static void run_until(lull_loop *loop, const bool *flag, int max) {
    for (int i = 0; i < max && !*flag; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK(*flag);
}

/* o (NULL: the defaults) with LULL_STREAM_FDS: a stream that takes the
 * fds passed to it. */
static lull_stream_options taking_fds(const lull_stream_options *o) {
    lull_stream_options t = o ? *o : (lull_stream_options){0};
    t.flags |= LULL_STREAM_FDS;
    return t;
}

static const lull_stream_options fds_in = {.flags = LULL_STREAM_FDS};

/* A socketpair whose ends both take fds. */
static void sp_pair(lull_loop *loop, lull_stream *a, lull_stream *b,
                    const lull_stream_options *o) {
    int sv[2];
    lull_stream_options t = taking_fds(o);
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    CHECK_EQ(lull_stream_open(loop, a, sv[0], &t), 0);
    CHECK_EQ(lull_stream_open(loop, b, sv[1], &t), 0);
}

/* What a receiver saw: per frame, its first byte and the fds it took. */
typedef struct rx {
    int frames;
    int take_max; /* fds taken per frame (at most 8) */
    char tag[64];
    int nfds[64];
    int fds[64][8];
    bool closed;
    int reason;
} rx;

static rx g_rx;

static void rx_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    lull_stream *s = LULL_CONTAINER_OF(ep, lull_stream, ep);
    int i = g_rx.frames++;
    CHECK(i < 64);
    g_rx.tag[i] = len ? *(const char *)bytes : 0;
    g_rx.nfds[i] = lull_stream_take_fds(s, g_rx.fds[i], g_rx.take_max);
}

static void rx_close(lull_endpoint *ep, int reason) {
    (void)ep;
    g_rx.closed = true;
    g_rx.reason = reason;
}

static bool g_a_closed;
static void a_close(lull_endpoint *ep, int reason) {
    (void)ep;
    (void)reason;
    g_a_closed = true;
}

static int g_released;
static void count_release(lull_frame *f) {
    (void)f;
    g_released++;
}

/* A case's loop, with the fds open before it in *before (every case
 * checks it is back there at the end) and, when loop_fds is not NULL,
 * how many the loop holds itself. */
static lull_loop *counted_loop(int *before, int *loop_fds) {
    *before = fd_count();
    lull_loop *loop = new_loop();
    if (loop_fds) *loop_fds = fd_count() - *before;
    return loop;
}

/* What s receives is recorded in g_rx, up to take_max fds a frame. */
static void rx_watch(lull_stream *s, int take_max) {
    memset(&g_rx, 0, sizeof g_rx);
    g_rx.take_max = take_max;
    lull_endpoint_set_callbacks(&s->ep, rx_frame, NULL, rx_close);
}

/* A socketpair whose b end is watched by rx_watch. */
static void rx_pair(lull_loop *loop, lull_stream *a, lull_stream *b,
                    const lull_stream_options *o, int take_max) {
    sp_pair(loop, a, b, o);
    rx_watch(b, take_max);
}

/* An RLIMIT_NOFILE that leaves n free fd numbers below it, whatever
 * holes the inherited fds leave. */
static rlim_t limit_leaving(int n) {
    int lim = 0;
    for (int free_seen = 0; free_seen < n; lim++)
        if (fcntl(lim, F_GETFD) < 0) free_seen++;
    return (rlim_t)lim;
}

/* Runs the loop until g_rx has n frames, for max turns at most. */
static void run_until_frames(lull_loop *loop, int n, int max) {
    for (int i = 0; i < max && g_rx.frames < n; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
}

/* A case's end once its handles are closed: the loop run out and freed,
 * and no fd left that the case opened. */
static void run_out_free_and_count(lull_loop *loop, int before) {
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
    CHECK_EQ(fd_count(), before);
}

/* A Unix stream pair: b, taking fds, on sv[1], watched by g_rx (8 fds a
 * frame); sv[0] left raw for the case to write the peer's bytes. */
static void fd_receiver_and_raw_peer(lull_loop *loop, int sv[2],
                                     lull_stream *b) {
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    CHECK_EQ(lull_stream_open(loop, b, sv[1], &fds_in), 0);
    rx_watch(b, 8);
}

/* A case's end: first closed, then second, the loop run out and freed,
 * and no fd left that the case opened. */
static void close_and_free(lull_loop *loop, lull_stream *first,
                           lull_stream *second, int before) {
    lull_endpoint_close(&first->ep, 0);
    lull_endpoint_close(&second->ep, 0);
    run_out_free_and_count(loop, before);
}

/* Each frame's fds arrive with that frame, not its neighbours, though
 * the frames around it leave in the same batch of writes. */
TEST(fds_arrive_with_their_frame) {
    int before;
    lull_loop *loop = counted_loop(&before, NULL);
    lull_stream a, b;
    rx_pair(loop, &a, &b, NULL, 8);
    int p1[2], p2[2];
    CHECK_EQ(pipe(p1), 0);
    CHECK_EQ(pipe(p2), 0);
    static char payload[40][100];
    lull_frame f[40];
    for (int i = 0; i < 40; i++) {
        memset(payload[i], 'A' + i % 26, sizeof payload[i]);
        f[i] = (lull_frame){.bytes = payload[i], .len = sizeof payload[i]};
    }
    f[5].len = 0; /* a frame of no bytes carries fds too */
    g_released = 0;
    for (int i = 0; i < 40; i++) {
        f[i].release = count_release;
        if (i == 5) {
            CHECK_EQ(lull_stream_send_fds(&a, &f[i], &p1[1], 1), 0);
        } else if (i == 6 || i == 30) {
            int two[2] = {p2[1], p1[1]};
            CHECK_EQ(lull_stream_send_fds(&a, &f[i], two, 2), 0);
        } else {
            CHECK_EQ(lull_endpoint_send(&a.ep, &f[i]), 0);
        }
    }
    /* The copies are lull's: the caller's may go at once. */
    close(p1[1]);
    close(p2[1]);
    run_until_frames(loop, 40, 100);
    CHECK_EQ(g_rx.frames, 40);
    CHECK_EQ(g_released, 40);
    for (int i = 0; i < 40; i++) {
        int want = i == 5 ? 1 : (i == 6 || i == 30) ? 2 : 0;
        CHECK_EQ(g_rx.nfds[i], want);
        if (i != 5) CHECK_EQ(g_rx.tag[i], 'A' + i % 26);
    }
    /* Received with O_CLOEXEC, and they work: each is a pipe's write end. */
    CHECK(fcntl(g_rx.fds[5][0], F_GETFD) & FD_CLOEXEC);
    CHECK_EQ(write(g_rx.fds[5][0], "x", 1), 1);
    CHECK_EQ(write(g_rx.fds[6][0], "y", 1), 1);
    CHECK_EQ(write(g_rx.fds[30][1], "z", 1), 1);
    char c[2];
    CHECK_EQ(read(p1[0], c, 2), 2);
    CHECK(memcmp(c, "xz", 2) == 0);
    CHECK_EQ(read(p2[0], c, 1), 1);
    CHECK_EQ(c[0], 'y');
    close(g_rx.fds[5][0]);
    close(g_rx.fds[6][0]);
    close(g_rx.fds[6][1]);
    close(g_rx.fds[30][0]);
    close(g_rx.fds[30][1]);
    close(p1[0]);
    close(p2[0]);
    close_and_free(loop, &a, &b, before);
}

/* Fds a frame's callback did not take are closed when it returns; a
 * callback may take some and leave the rest; outside on_frame nothing is
 * there to take. */
TEST(untaken_fds_are_closed) {
    int before, loop_fds;
    lull_loop *loop = counted_loop(&before, &loop_fds);
    lull_stream a, b;
    rx_pair(loop, &a, &b, NULL, 1);
    int three[3] = {0, 1, 2};
    lull_frame f1 = {.bytes = "a", .len = 1}, f2 = {.bytes = "b", .len = 1};
    CHECK_EQ(lull_stream_send_fds(&a, &f1, three, 3), 0);
    CHECK_EQ(lull_stream_send_fds(&a, &f2, three, 3), 0);
    int t;
    CHECK_EQ(lull_stream_take_fds(&b, &t, 1), 0); /* not inside on_frame */
    run_until_frames(loop, 2, 100);
    CHECK_EQ(g_rx.nfds[0], 1);
    CHECK_EQ(g_rx.nfds[1], 1);
    /* The 2 taken are ours; the 4 others were closed. */
    CHECK_EQ(fd_count(), before + loop_fds + 2 + 2);
    close(g_rx.fds[0][0]);
    close(g_rx.fds[1][0]);
    close_and_free(loop, &a, &b, before);
}

/* A raw stream: the fds come with the read that holds the first byte of
 * the send they were attached to. */
TEST(raw_stream_fds_come_with_the_read) {
    int before;
    lull_loop *loop = counted_loop(&before, NULL);
    lull_stream a, b;
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    rx_pair(loop, &a, &b, &raw, 8);
    lull_frame f = {.bytes = "hello", .len = 5}, z = {.bytes = "", .len = 0};
    int in = 0;
    CHECK_EQ(lull_stream_send_fds(&a, &z, &in, 1), -EINVAL); /* no bytes */
    CHECK_EQ(lull_stream_send_fds(&a, &f, &in, 1), 0);
    run_until_frames(loop, 1, 100);
    CHECK_EQ(g_rx.tag[0], 'h');
    CHECK_EQ(g_rx.nfds[0], 1);
    close(g_rx.fds[0][0]);
    close_and_free(loop, &a, &b, before);
}

/* Frames with fds buffered, never delivered (reading paused), when the
 * receiver closes: the fds close with them. */
TEST(undelivered_frames_close_their_fds) {
    int before;
    lull_loop *loop = counted_loop(&before, NULL);
    lull_stream a, b;
    rx_pair(loop, &a, &b, NULL, 8);
    int fds[4] = {0, 1, 2, 0};
    lull_frame f[3] = {{.bytes = "1", .len = 1},
                       {.bytes = "2", .len = 1},
                       {.bytes = "3", .len = 1}};
    for (int i = 0; i < 3; i++)
        CHECK_EQ(lull_stream_send_fds(&a, &f[i], fds, 4), 0);
    /* The first frame's callback pauses reading: the others wait in the
     * buffer, with their fds. */
    bool one = false;
    for (int i = 0; i < 100 && !one; i++) {
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
        if (g_rx.frames > 0 && !one) {
            one = true;
            lull_stream_read_stop(&b);
        }
    }
    /* Let the rest arrive and sit. */
    for (int i = 0; i < 5; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK(g_rx.frames < 3);
    for (int i = 0; i < g_rx.frames; i++)
        for (int j = 0; j < g_rx.nfds[i]; j++)
            close(g_rx.fds[i][j]);
    close_and_free(loop, &b, &a, before);
}

/* A peer that sends fds with the start of a frame and closes before the
 * rest: the stream closes with -EPROTO, and the fds of the cut frame are
 * closed. */
TEST(connection_closed_mid_frame_leaks_nothing) {
    int before;
    lull_loop *loop = counted_loop(&before, NULL);
    int sv[2];
    lull_stream b;
    fd_receiver_and_raw_peer(loop, sv, &b);
    /* A header announcing 1000 bytes, 10 of them, and 3 fds. */
    char buf[14] = {0, 0, 3, (char)232};
    memset(buf + 4, 'x', 10);
    int three[3] = {0, 1, 2};
    union {
        char b[CMSG_SPACE(sizeof three)];
        struct cmsghdr a;
    } ctl;
    memset(&ctl, 0, sizeof ctl); /* the padding is sent too */
    struct iovec iov = {buf, sizeof buf};
    struct msghdr m = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = ctl.b,
                       .msg_controllen = sizeof ctl.b};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof three);
    memcpy(CMSG_DATA(c), three, sizeof three);
    CHECK_EQ(sendmsg(sv[0], &m, 0), (ssize_t)sizeof buf);
    /* Read the start with its fds first, then the EOF. */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    close(sv[0]);
    run_until(loop, &g_rx.closed, 100);
    CHECK_EQ(g_rx.reason, -EPROTO);
    CHECK_EQ(g_rx.frames, 0);
    CHECK_EQ(lull_loop_free(loop), 0);
    CHECK_EQ(fd_count(), before);
}

/* Fds sent to a peer that closes before reading them: nothing is left on
 * either side (the kernel frees fds in flight with the socket). */
TEST(peer_closed_before_reading) {
    int before, loop_fds;
    lull_loop *loop = counted_loop(&before, &loop_fds);
    lull_stream a, b;
    rx_pair(loop, &a, &b, NULL, 0);
    g_a_closed = false;
    lull_endpoint_set_callbacks(&a.ep, NULL, NULL, a_close);
    CHECK_EQ(lull_stream_read_stop(&b), 0);
    int fds[2] = {0, 1};
    lull_frame f = {.bytes = "x", .len = 1};
    g_released = 0;
    f.release = count_release;
    CHECK_EQ(lull_stream_send_fds(&a, &f, fds, 2), 0);
    while (g_released == 0)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    lull_endpoint_close(&b.ep, 0);
    run_until(loop, &g_rx.closed, 100);
    run_until(loop, &g_a_closed, 100); /* its EOF */
    CHECK_EQ(g_rx.frames, 0);
    CHECK_EQ(lull_loop_free(loop), 0);
    CHECK_EQ(fd_count(), before);
    /* The same with the sender's copies still queued (never written): a
     * close of the sender discards them. */
    loop = new_loop();
    rx_pair(loop, &a, &b, NULL, 0);
    lull_endpoint_set_callbacks(&a.ep, NULL, NULL, a_close);
    CHECK_EQ(lull_stream_send_fds(&a, &f, fds, 2), 0);
    CHECK_EQ(fd_count(), before + loop_fds + 4); /* the pair, 2 copies */
    close_and_free(loop, &b, &a, before);
}

/* The kernel drops fds it cannot install (the receiver's RLIMIT_NOFILE):
 * MSG_CTRUNC closes the stream with -EMFILE, and the fds that did arrive
 * are closed. */
TEST(fds_dropped_under_low_rlimit_close_the_stream) {
    int before;
    lull_loop *loop = counted_loop(&before, NULL);
    lull_stream a, b;
    rx_pair(loop, &a, &b, NULL, 8);
    CHECK_EQ(lull_stream_read_stop(&b), 0);
    int fds[40];
    for (int i = 0; i < 40; i++)
        fds[i] = i % 3;
    lull_frame f = {.bytes = "x", .len = 1};
    g_released = 0;
    f.release = count_release;
    CHECK_EQ(lull_stream_send_fds(&a, &f, fds, 40), 0);
    while (g_released == 0) /* written: the copies are closed */
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    /* 4 free fd numbers, fewer than the 40 on their way. */
    struct rlimit old, low;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
    low = old;
    low.rlim_cur = limit_leaving(4);
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    CHECK_EQ(lull_stream_read_start(&b), 0);
    run_until(loop, &g_rx.closed, 100);
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
    CHECK_EQ(g_rx.reason, -EMFILE);
    CHECK_EQ(g_rx.frames, 0);
    lull_endpoint_close(&a.ep, 0);
    run_out_free_and_count(loop, before);
}

/* Frames that came whole, with no fds, in the read that the kernel cut
 * (MSG_CTRUNC) are the peer's data like any other: they arrive, in order,
 * and only the frame whose fds were dropped closes the stream (-EMFILE),
 * as a frame too long is refused after the frames before it. */
TEST(frames_before_dropped_fds_still_arrive) {
    int before;
    lull_loop *loop = counted_loop(&before, NULL);
    lull_stream a, b;
    rx_pair(loop, &a, &b, NULL, 8);
    CHECK_EQ(lull_stream_read_stop(&b), 0);
    int fds[40];
    for (int i = 0; i < 40; i++)
        fds[i] = i % 3;
    lull_frame f[3] = {{.bytes = "A", .len = 1},
                       {.bytes = "B", .len = 1},
                       {.bytes = "C", .len = 1}};
    g_released = 0;
    for (int i = 0; i < 3; i++)
        f[i].release = count_release;
    CHECK_EQ(lull_endpoint_send(&a.ep, &f[0]), 0);
    CHECK_EQ(lull_endpoint_send(&a.ep, &f[1]), 0);
    CHECK_EQ(lull_stream_send_fds(&a, &f[2], fds, 40), 0);
    while (g_released < 3) /* all written, waiting in b's socket */
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    struct rlimit old, low;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
    low = old;
    low.rlim_cur = limit_leaving(4);
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    CHECK_EQ(lull_stream_read_start(&b), 0);
    run_until(loop, &g_rx.closed, 100);
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
    CHECK_EQ(g_rx.reason, -EMFILE);
    CHECK_EQ(g_rx.frames, 2);
    CHECK_EQ(g_rx.tag[0], 'A');
    CHECK_EQ(g_rx.tag[1], 'B');
    lull_endpoint_close(&a.ep, 0);
    run_out_free_and_count(loop, before);
}

/* A stream opened without LULL_STREAM_FDS reads with recv: the kernel
 * closes the fds a peer passes (none is added to this process), and the
 * frames they came with arrive whole, in order, with none to take. */
TEST(fds_to_a_stream_not_taking_them_are_closed_on_arrival) {
    int before, loop_fds;
    lull_loop *loop = counted_loop(&before, &loop_fds);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    lull_stream a, b;
    CHECK_EQ(lull_stream_open(loop, &a, sv[0], NULL), 0);
    CHECK_EQ(lull_stream_open(loop, &b, sv[1], NULL), 0);
    rx_watch(&b, 8);
    int p[2];
    CHECK_EQ(pipe(p), 0);
    lull_frame f[3] = {{.bytes = "1", .len = 1},
                       {.bytes = "2", .len = 1},
                       {.bytes = "3", .len = 1}};
    CHECK_EQ(lull_endpoint_send(&a.ep, &f[0]), 0);
    CHECK_EQ(lull_stream_send_fds(&a, &f[1], &p[1], 1), 0);
    CHECK_EQ(lull_endpoint_send(&a.ep, &f[2]), 0);
    close(p[1]); /* lull's copy is the only writer left */
    run_until_frames(loop, 3, 100);
    CHECK_EQ(g_rx.frames, 3);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(g_rx.tag[i], '1' + i);
        CHECK_EQ(g_rx.nfds[i], 0);
    }
    CHECK_EQ(fd_count(), before + loop_fds + 2 + 1); /* the pair, p[0] */
    /* No writer anywhere: the copy that crossed was closed on arrival. */
    char c;
    CHECK_EQ(read(p[0], &c, 1), 0);
    close(p[0]);
    close_and_free(loop, &a, &b, before);
}

/* LULL_STREAM_FDS on a stream that is not one Unix socket: -ENOTSUP from
 * every way to make one (an fd given is closed, as on any failure); an
 * accept refused so leaves the connection waiting for one that fits. */
static lull_stream g_tcp_side;
static int g_tcp_accepts;
static void accept_tcp(lull_server *srv) {
    CHECK_EQ(lull_server_accept(srv, &g_tcp_side, &fds_in), -ENOTSUP);
    CHECK_EQ(lull_server_accept(srv, &g_tcp_side, NULL), 0);
    g_tcp_accepts++;
}

static bool g_tcp_connected;
static void tcp_connected(lull_stream *s, int status) {
    (void)s;
    CHECK_EQ(status, 0);
    g_tcp_connected = true;
}

TEST(fds_flag_refused_where_no_fd_can_pass) {
    int before;
    lull_loop *loop = counted_loop(&before, NULL);
    lull_stream s;
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK_EQ(lull_stream_open(loop, &s, p[0], &fds_in), -ENOTSUP);
    CHECK_EQ(fcntl(p[0], F_GETFD), -1); /* given, so closed */
    close(p[1]);
    CHECK_EQ(pipe(p), 0);
    CHECK_EQ(lull_stream_open_pair(loop, &s, p[0], p[1], &fds_in), -ENOTSUP);
    CHECK_EQ(fcntl(p[0], F_GETFD), -1);
    CHECK_EQ(fcntl(p[1], F_GETFD), -1);
    lull_server srv;
    CHECK_EQ(lull_server_listen_tcp(loop, &srv, NULL, 0, 0, accept_tcp), 0);
    int port = lull_server_port(&srv);
    CHECK(port > 0);
    CHECK_EQ(lull_stream_connect_tcp(loop, &s, "127.0.0.1", port, &fds_in,
                                     tcp_connected),
             -ENOTSUP);
    g_tcp_connected = false;
    g_tcp_accepts = 0;
    CHECK_EQ(lull_stream_connect_tcp(loop, &s, "127.0.0.1", port, NULL,
                                     tcp_connected),
             0);
    run_until(loop, &g_tcp_connected, 100);
    for (int i = 0; i < 100 && g_tcp_accepts == 0; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(g_tcp_accepts, 1);
    /* The adopted TCP socket itself. */
    int c = dup(lull_stream_fd(&s));
    CHECK(c >= 0);
    lull_stream t;
    CHECK_EQ(lull_stream_open(loop, &t, c, &fds_in), -ENOTSUP);
    CHECK_EQ(fcntl(c, F_GETFD), -1);
    lull_server_close(&srv);
    lull_endpoint_close(&s.ep, 0);
    lull_endpoint_close(&g_tcp_side.ep, 0);
    run_out_free_and_count(loop, before);
}

TEST(send_fds_hostile_arguments) {
    int before, loop_fds;
    lull_loop *loop = counted_loop(&before, &loop_fds);
    lull_stream a, b;
    sp_pair(loop, &a, &b, NULL);
    lull_frame f = {.bytes = "x", .len = 1};
    int many[254];
    for (int i = 0; i < 254; i++)
        many[i] = 0;
    CHECK_EQ(lull_stream_send_fds(NULL, &f, many, 1), -EINVAL);
    CHECK_EQ(lull_stream_send_fds(&a, NULL, many, 1), -EINVAL);
    CHECK_EQ(lull_stream_send_fds(&a, &f, NULL, 1), -EINVAL);
    CHECK_EQ(lull_stream_send_fds(&a, &f, many, 0), -EINVAL);
    CHECK_EQ(lull_stream_send_fds(&a, &f, many, -1), -EINVAL);
    CHECK_EQ(lull_stream_send_fds(&a, &f, many, 254), -EINVAL);
    /* A number that is not open, after good ones: nothing is kept. */
    /* Not a freed low number: the copies of 0 and 1 would take it. */
    int dead = 900;
    CHECK_EQ(fcntl(dead, F_GETFD), -1);
    int mixed[3] = {0, 1, dead};
    CHECK_EQ(lull_stream_send_fds(&a, &f, mixed, 3), -EBADF);
    mixed[2] = -5;
    CHECK_EQ(lull_stream_send_fds(&a, &f, mixed, 3), -EBADF);
    CHECK(!f.in_flight);
    CHECK_EQ(fd_count(), before + loop_fds + 2);
    /* In flight already. */
    CHECK_EQ(lull_endpoint_send(&a.ep, &f), 0);
    CHECK_EQ(lull_stream_send_fds(&a, &f, many, 1), -EBUSY);
    /* The most the kernel passes at once is fine. */
    lull_frame g = {.bytes = "y", .len = 1};
    CHECK_EQ(lull_stream_send_fds(&a, &g, many, 253), 0);
    int t[4];
    CHECK_EQ(lull_stream_take_fds(NULL, t, 1), -EINVAL);
    CHECK_EQ(lull_stream_take_fds(&b, t, -1), -EINVAL);
    CHECK_EQ(lull_stream_take_fds(&b, NULL, 1), -EINVAL);
    CHECK_EQ(lull_stream_take_fds(&b, NULL, 0), 0);
    /* A pipe is no socket; TCP carries no fds. */
    int p[2];
    CHECK_EQ(pipe(p), 0);
    lull_stream ps;
    CHECK_EQ(lull_stream_open(loop, &ps, p[1], NULL), 0);
    lull_frame h = {.bytes = "z", .len = 1};
    CHECK_EQ(lull_stream_send_fds(&ps, &h, many, 1), -ENOTSUP);
    CHECK_EQ(lull_stream_peer_cred(&ps, NULL, NULL, NULL), -ENOTSUP);
    lull_endpoint_close(&ps.ep, 0);
    close(p[0]);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sin;
    CHECK_EQ(bind(l, (struct sockaddr *)&sin, sizeof sin), 0);
    CHECK_EQ(listen(l, 1), 0);
    CHECK_EQ(getsockname(l, (struct sockaddr *)&sin, &sl), 0);
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK_EQ(connect(c, (struct sockaddr *)&sin, sizeof sin), 0);
    lull_stream tcp;
    CHECK_EQ(lull_stream_open(loop, &tcp, c, NULL), 0);
    CHECK_EQ(lull_stream_send_fds(&tcp, &h, many, 1), -ENOTSUP);
    CHECK_EQ(lull_stream_peer_cred(&tcp, NULL, NULL, NULL), -ENOTSUP);
    lull_endpoint_close(&tcp.ep, 0);
    close(l);
    /* Closed: -EPIPE, as any send. */
    lull_endpoint_close(&a.ep, 0);
    lull_endpoint_close(&b.ep, 0);
    CHECK_EQ(lull_stream_send_fds(&a, &h, many, 1), -EPIPE);
    CHECK_EQ(lull_stream_peer_cred(&a, NULL, NULL, NULL), -ENOTCONN);
    run_out_free_and_count(loop, before);
}

/* A send with fds refuses a frame in lull_endpoint_send's order: a frame
 * in flight elsewhere (here on a loopback end) that is longer than this
 * stream's max_frame gets -EMSGSIZE, which waiting will not mend, not
 * -EBUSY, after which a caller waits for the release and then hears
 * -EMSGSIZE anyway; and no fd is copied for a frame that cannot go. */
TEST(send_fds_refuses_in_the_order_of_endpoint_send) {
    int before, loop_fds;
    lull_loop *loop = counted_loop(&before, &loop_fds);
    lull_stream a, b;
    lull_stream_options small = {.max_frame = 4};
    sp_pair(loop, &a, &b, &small);
    lull_loopback la, lb;
    CHECK_EQ(lull_loopback_pair(loop, &la, &lb, NULL), 0);
    lull_frame f = {.bytes = "too long", .len = 8};
    CHECK_EQ(lull_endpoint_send(&la.ep, &f), 0); /* in flight there */
    CHECK(f.in_flight);
    int one[1] = {0};
    CHECK_EQ(lull_endpoint_send(&a.ep, &f), -EMSGSIZE);
    CHECK_EQ(lull_stream_send_fds(&a, &f, one, 1), -EMSGSIZE);
    /* Bytes NULL with a length: -EINVAL before any copy, as a send. */
    lull_frame n = {.bytes = NULL, .len = 2};
    CHECK_EQ(lull_endpoint_send(&a.ep, &n), -EINVAL);
    CHECK_EQ(lull_stream_send_fds(&a, &n, one, 1), -EINVAL);
    CHECK(!n.in_flight);
    CHECK_EQ(fd_count(), before + loop_fds + 2);
    /* A frame that fits, in flight: -EBUSY. */
    lull_frame g = {.bytes = "ok", .len = 2};
    CHECK_EQ(lull_endpoint_send(&la.ep, &g), 0);
    CHECK_EQ(lull_stream_send_fds(&a, &g, one, 1), -EBUSY);
    lull_endpoint_close(&la.ep, 0);
    lull_endpoint_close(&lb.ep, 0);
    lull_endpoint_close(&a.ep, 0);
    lull_endpoint_close(&b.ep, 0);
    run_out_free_and_count(loop, before);
}

/* SO_PEERCRED: a socketpair's peer is this process; so is a Unix
 * listener's client. */
static lull_stream g_srv_side;
static bool g_accepted;
static void accept_into(lull_server *srv) {
    CHECK_EQ(lull_server_accept(srv, &g_srv_side, &fds_in), 0);
    g_accepted = true;
}

TEST(peer_credentials) {
    lull_loop *loop = new_loop();
    lull_stream a, b;
    sp_pair(loop, &a, &b, NULL);
    pid_t pid = 0;
    uid_t uid = 1;
    gid_t gid = 1;
    CHECK_EQ(lull_stream_peer_cred(&a, &pid, &uid, &gid), 0);
    CHECK_EQ(pid, getpid());
    CHECK_EQ(uid, getuid());
    CHECK_EQ(gid, getgid());
    CHECK_EQ(lull_stream_peer_cred(NULL, &pid, &uid, &gid), -EINVAL);
    lull_endpoint_close(&a.ep, 0);
    lull_endpoint_close(&b.ep, 0);
    /* Over a Unix listener, both ways, and fds pass there too. */
    char path[64];
    snprintf(path, sizeof path, "@lull-fdpass-%d", (int)getpid());
    lull_server srv;
    CHECK_EQ(lull_server_listen_unix(loop, &srv, path, 0, accept_into), 0);
    g_accepted = false;
    CHECK_EQ(lull_stream_connect_unix(loop, &a, path, NULL, NULL), 0);
    lull_frame f = {.bytes = "q", .len = 1};
    int zero = 0;
    CHECK_EQ(lull_stream_send_fds(&a, &f, &zero, 1), 0); /* while connecting */
    run_until(loop, &g_accepted, 100);
    rx_watch(&g_srv_side, 8);
    pid = 0;
    CHECK_EQ(lull_stream_peer_cred(&g_srv_side, &pid, NULL, NULL), 0);
    CHECK_EQ(pid, getpid());
    run_until_frames(loop, 1, 100);
    CHECK_EQ(g_rx.nfds[0], 1);
    close(g_rx.fds[0][0]);
    lull_server_close(&srv);
    lull_endpoint_close(&a.ep, 0);
    lull_endpoint_close(&g_srv_side.ep, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ------------------------------------------- a listening socket passed */

/* The worker: takes the listening socket that comes with the first frame,
 * adopts it (lull_server_open), accepts one connection and echoes it. */
static lull_server w_srv;
static lull_stream w_conn;
static bool w_done;
static int w_listen_fd = -1;

static void w_echo(lull_endpoint *ep, const void *bytes, size_t len) {
    CHECK_EQ(lull_endpoint_send_copy(ep, bytes, len), 0);
}

static void w_conn_close(lull_endpoint *ep, int reason) {
    (void)ep;
    (void)reason;
    w_done = true;
}

static void w_accept(lull_server *srv) {
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    CHECK_EQ(lull_server_accept(srv, &w_conn, &raw), 0);
    lull_endpoint_set_callbacks(&w_conn.ep, w_echo, NULL, w_conn_close);
    lull_server_close(srv);
}

static void w_ctl_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    (void)bytes;
    (void)len;
    lull_stream *s = LULL_CONTAINER_OF(ep, lull_stream, ep);
    CHECK_EQ(lull_stream_take_fds(s, &w_listen_fd, 1), 1);
}

static void worker(int ctl) {
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    lull_stream s;
    CHECK_EQ(lull_stream_open(loop, &s, ctl, &fds_in), 0);
    lull_endpoint_set_callbacks(&s.ep, w_ctl_frame, NULL, NULL);
    while (w_listen_fd < 0)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(lull_server_open(loop, &w_srv, w_listen_fd, w_accept), 0);
    while (!w_done)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    lull_endpoint_close(&s.ep, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
    _exit(0);
}

TEST(worker_takes_over_a_listening_socket) {
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        worker(sv[1]);
    }
    close(sv[1]);
    lull_loop *loop = new_loop();
    lull_stream ctl;
    CHECK_EQ(lull_stream_open(loop, &ctl, sv[0], NULL), 0);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sin;
    CHECK_EQ(bind(l, (struct sockaddr *)&sin, sizeof sin), 0);
    CHECK_EQ(listen(l, 4), 0);
    CHECK_EQ(getsockname(l, (struct sockaddr *)&sin, &sl), 0);
    lull_frame f = {.bytes = "listen", .len = 6};
    g_released = 0;
    f.release = count_release;
    CHECK_EQ(lull_stream_send_fds(&ctl, &f, &l, 1), 0);
    close(l); /* the worker has it now */
    while (g_released == 0)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    /* A client, blocking: the worker accepts and echoes. */
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK_EQ(connect(c, (struct sockaddr *)&sin, sizeof sin), 0);
    CHECK_EQ(write(c, "ping", 4), 4);
    char got[4];
    size_t have = 0;
    while (have < 4) {
        ssize_t n = read(c, got + have, 4 - have);
        CHECK(n > 0);
        have += (size_t)n;
    }
    CHECK(memcmp(got, "ping", 4) == 0);
    close(c);
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    lull_endpoint_close(&ctl.ep, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(server_open_refuses_what_is_not_listening) {
    int before;
    lull_loop *loop = counted_loop(&before, NULL);
    lull_server srv;
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    CHECK_EQ(lull_server_open(loop, &srv, sv[0], w_accept), -EINVAL);
    CHECK_EQ(fcntl(sv[0], F_GETFD), -1); /* owned, also on failure */
    CHECK_EQ(lull_server_open(loop, &srv, sv[1], NULL), -EINVAL);
    CHECK_EQ(lull_server_open(loop, &srv, -1, w_accept), -EINVAL);
    CHECK_EQ(lull_server_open(NULL, &srv, -1, w_accept), -EINVAL);
    CHECK_EQ(lull_loop_free(loop), 0);
    CHECK_EQ(fd_count(), before);
}

/* A frame far larger than the socket's buffer, its fd with it: the fd goes
 * with the first part written, and still reaches that frame, not the small
 * one after it. */
static char big_payload[1 << 20];

TEST(fds_of_a_frame_written_in_parts) {
    int before = fd_count();
    lull_loop *loop = new_loop();
    lull_stream a, b;
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    int small = 4096;
    CHECK_EQ(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    CHECK_EQ(lull_stream_open(loop, &a, sv[0], NULL), 0);
    lull_stream_options ob = {.read_size = 1000, /* grows to the frame */
                              .flags = LULL_STREAM_FDS};
    CHECK_EQ(lull_stream_open(loop, &b, sv[1], &ob), 0);
    rx_watch(&b, 8);
    memset(big_payload, 'B', sizeof big_payload);
    lull_frame f0 = {.bytes = "0", .len = 1};
    lull_frame f1 = {.bytes = big_payload, .len = sizeof big_payload};
    lull_frame f2 = {.bytes = "2", .len = 1};
    int in[2] = {0, 1};
    CHECK_EQ(lull_endpoint_send(&a.ep, &f0), 0);
    CHECK_EQ(lull_stream_send_fds(&a, &f1, in, 2), 0);
    CHECK_EQ(lull_stream_send_fds(&a, &f2, in, 1), 0);
    run_until_frames(loop, 3, 10000);
    CHECK_EQ(g_rx.frames, 3);
    CHECK(a.writes > 3); /* it did leave in parts */
    CHECK_EQ(g_rx.tag[0], '0');
    CHECK_EQ(g_rx.nfds[0], 0);
    CHECK_EQ(g_rx.tag[1], 'B');
    CHECK_EQ(g_rx.nfds[1], 2);
    CHECK_EQ(g_rx.tag[2], '2');
    CHECK_EQ(g_rx.nfds[2], 1);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < g_rx.nfds[i]; j++)
            close(g_rx.fds[i][j]);
    close_and_free(loop, &a, &b, before);
}

/* A frame callback that closes its stream without taking the fds, or
 * after taking some: the rest are closed with the stream. */
static int g_close_after_take;
static void close_in_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    (void)bytes;
    (void)len;
    lull_stream *s = LULL_CONTAINER_OF(ep, lull_stream, ep);
    int fd;
    if (g_close_after_take && lull_stream_take_fds(s, &fd, 1) == 1) close(fd);
    lull_endpoint_close(ep, 0);
    CHECK_EQ(lull_stream_take_fds(s, &fd, 1), 0); /* closed: nothing */
}

TEST(close_inside_on_frame_closes_untaken_fds) {
    for (g_close_after_take = 0; g_close_after_take < 2; g_close_after_take++) {
        int before = fd_count();
        lull_loop *loop = new_loop();
        lull_stream a, b;
        sp_pair(loop, &a, &b, NULL);
        lull_endpoint_set_callbacks(&b.ep, close_in_frame, NULL, NULL);
        int three[3] = {0, 1, 2};
        lull_frame f1 = {.bytes = "a", .len = 1}, f2 = {.bytes = "b", .len = 1};
        CHECK_EQ(lull_stream_send_fds(&a, &f1, three, 3), 0);
        CHECK_EQ(lull_stream_send_fds(&a, &f2, three, 3), 0);
        for (int i = 0; i < 100 && !lull_endpoint_closed(&b.ep); i++)
            CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
        CHECK(lull_endpoint_closed(&b.ep));
        lull_endpoint_close(&a.ep, 0);
        run_out_free_and_count(loop, before);
    }
}

/* The sender out of fds for its copies: -EMFILE, nothing kept, the stream
 * fine for the next send. */
TEST(send_fds_out_of_fds_for_the_copies) {
    int before = fd_count();
    lull_loop *loop = new_loop();
    lull_stream a, b;
    sp_pair(loop, &a, &b, NULL);
    struct rlimit old, low;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
    low = old;
    low.rlim_cur = limit_leaving(2);
    int five[5] = {0, 1, 2, 0, 1};
    lull_frame f = {.bytes = "x", .len = 1};
    int open_now = fd_count();
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    int rc = lull_stream_send_fds(&a, &f, five, 5);
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
    CHECK_EQ(rc, -EMFILE);
    CHECK(!f.in_flight);
    CHECK_EQ(fd_count(), open_now);
    CHECK_EQ(lull_stream_send_fds(&a, &f, five, 1), 0);
    close_and_free(loop, &a, &b, before);
}

/* A hostile peer (not lull: a plain socket) that attaches fds to every
 * byte of one long frame: each recvmsg stops after the buffer that
 * carried fds, so without a bound the receiver would hold every fd sent
 * until the frame ends, up to RLIMIT_NOFILE, and the process's other
 * streams and its accepts would run out of fds. One frame carries at most
 * 253 (SCM_MAX_FD, what lull_stream_send_fds takes): past that the
 * stream closes with -ETOOMANYREFS, its fds closed, and the receiver
 * never held more than one frame's worth. */
static void send_with_fds(int sock, const void *bytes, size_t len, int fd,
                          int n) {
    union {
        char buf[CMSG_SPACE(sizeof(int) * 253)];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {(void *)bytes, len};
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = ctl.buf,
                         .msg_controllen = CMSG_SPACE(sizeof(int) * n)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * n);
    for (int i = 0; i < n; i++)
        memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof fd);
    CHECK_EQ(sendmsg(sock, &msg, MSG_NOSIGNAL), (ssize_t)len);
}

TEST(peer_flooding_one_frame_with_fds_is_closed) {
    int before;
    lull_loop *loop = counted_loop(&before, NULL);
    int sv[2];
    lull_stream b;
    fd_receiver_and_raw_peer(loop, sv, &b);
    int base = fd_count();
    static const unsigned char hdr[4] = {0, 0, 0, 100}; /* a 100-byte frame */
    CHECK_EQ(write(sv[0], hdr, sizeof hdr), 4);
    int most = 0;
    for (int i = 0; i < 8 && !g_rx.closed; i++) {
        /* 253 copies of one fd per byte: 253 new fds each in the reader. */
        send_with_fds(sv[0], "z", 1, sv[0], 253);
        for (int k = 0; k < 5 && !g_rx.closed; k++)
            CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
        int held = fd_count() - base;
        if (held > most) most = held;
    }
    CHECK(g_rx.closed);
    CHECK_EQ(g_rx.reason, -ETOOMANYREFS);
    CHECK_EQ(g_rx.frames, 0);
    CHECK_LE(most, 253);
    close(sv[0]);
    run_out_free_and_count(loop, before);
}

/* The bound is per frame: a frame read in many parts with 253 fds, and
 * the next with 253 more arriving in the read that completes it, both
 * arrive whole with their fds. */
TEST(frames_with_253_fds_each_arrive) {
    int before;
    lull_loop *loop = counted_loop(&before, NULL);
    lull_stream a, b;
    lull_stream_options o = {.read_size = 4096};
    rx_pair(loop, &a, &b, &o, 8);
    int fds[253];
    for (int i = 0; i < 253; i++)
        fds[i] = i % 3;
    /* 6000 bytes: the buffer grows past the first frame (to 8192), so
     * the read that ends it goes on into the next, up to that one's fds:
     * two frames' fds held at once for a moment. */
    static char big[6000], small[10];
    memset(big, 'B', sizeof big);
    memset(small, 'S', sizeof small);
    lull_frame f[3] = {{.bytes = big, .len = sizeof big},
                       {.bytes = small, .len = sizeof small},
                       {.bytes = big, .len = sizeof big}};
    for (int i = 0; i < 3; i++)
        CHECK_EQ(lull_stream_send_fds(&a, &f[i], fds, 253), 0);
    run_until_frames(loop, 3, 1000);
    CHECK(!g_rx.closed);
    CHECK_EQ(g_rx.frames, 3);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(g_rx.tag[i], i == 1 ? 'S' : 'B');
        CHECK_EQ(g_rx.nfds[i], 8);
        for (int k = 0; k < 8; k++)
            close(g_rx.fds[i][k]);
    }
    close_and_free(loop, &a, &b, before);
}

/* A receiving socket with SO_PASSCRED (set by the program, or inherited
 * from a listening socket, systemd's PassCredentials=yes) gets the
 * sender's credentials with every read, beside the fds: a frame with the
 * most fds lull sends still arrives whole, not cut off as if the reader
 * were out of fds. */
TEST(fds_arrive_beside_credentials) {
    int before;
    lull_loop *loop = counted_loop(&before, NULL);
    lull_stream a, b;
    rx_pair(loop, &a, &b, NULL, 8);
    int on = 1;
    CHECK_EQ(
        setsockopt(lull_stream_fd(&b), SOL_SOCKET, SO_PASSCRED, &on, sizeof on),
        0);
    int fds[253];
    for (int i = 0; i < 253; i++)
        fds[i] = i % 3;
    lull_frame f = {.bytes = "F", .len = 1};
    CHECK_EQ(lull_stream_send_fds(&a, &f, fds, 253), 0);
    run_until_frames(loop, 1, 100);
    CHECK(!g_rx.closed);
    CHECK_EQ(g_rx.frames, 1);
    CHECK_EQ(g_rx.tag[0], 'F');
    CHECK_EQ(g_rx.nfds[0], 8);
    for (int k = 0; k < 8; k++)
        close(g_rx.fds[0][k]);
    close_and_free(loop, &a, &b, before);
}

/* A receiving socket with SO_PASSPIDFD (set by the program, or inherited
 * from a listening socket, as SO_PASSCRED is) gets a pidfd of the sender
 * with every read (SCM_PIDFD), installed in this process: each one is
 * closed, not leaked read after read, and the fds of a frame with the most
 * lull sends still arrive beside it. Skipped before Linux 6.5. */
TEST(pidfds_the_kernel_attaches_to_each_read_are_closed) {
    int before;
    lull_loop *loop = counted_loop(&before, NULL);
    lull_stream a, b;
    rx_pair(loop, &a, &b, NULL, 8);
    int on = 1;
    if (setsockopt(lull_stream_fd(&b), SOL_SOCKET, SO_PASSPIDFD, &on,
                   sizeof on) != 0) {
        printf("skipped: no SO_PASSPIDFD (errno %d)\n", errno);
        close_and_free(loop, &a, &b, before);
        return;
    }
    CHECK_EQ(
        setsockopt(lull_stream_fd(&b), SOL_SOCKET, SO_PASSCRED, &on, sizeof on),
        0);
    /* Frames sent one turn apart: each arrives in a read of its own. */
    static lull_frame f[8];
    for (int i = 0; i < 8; i++) {
        f[i] = (lull_frame){.bytes = "P", .len = 1};
        CHECK_EQ(lull_endpoint_send(&a.ep, &f[i]), 0);
        run_until_frames(loop, i + 1, 100);
    }
    int fds[253];
    for (int i = 0; i < 253; i++)
        fds[i] = i % 3;
    lull_frame g = {.bytes = "F", .len = 1};
    CHECK_EQ(lull_stream_send_fds(&a, &g, fds, 253), 0);
    run_until_frames(loop, 9, 100);
    CHECK(!g_rx.closed);
    CHECK_EQ(g_rx.frames, 9);
    CHECK_EQ(g_rx.tag[8], 'F');
    CHECK_EQ(g_rx.nfds[8], 8);
    for (int k = 0; k < 8; k++)
        close(g_rx.fds[8][k]);
    close_and_free(loop, &a, &b, before);
}

/* A peer that is not lull's writes 40 frames (0 to 2999 bytes, a quarter
 * empty) as one byte stream cut anywhere, in sends of 50 to 699 bytes, a
 * third of them carrying 1 to 3 fds; the reader's buffer starts at 64 to
 * 4159 bytes, it takes 0 to 4 fds a frame and pauses now and then, its
 * owner resuming it between sends. 200 seeds: every frame arrives whole,
 * in order, the stream ends with the peer's EOF (0), and every fd the
 * peer passed was handed over or closed (the count is back where it
 * was), wherever its send began or ended. */
static uint32_t fz_state;
static uint32_t fz_rand(void) {
    fz_state = fz_state * 1103515245u + 12345u;
    return fz_state >> 8;
}
enum { FZ_FRAMES = 40 };
static size_t fz_len[FZ_FRAMES];
static int fz_got, fz_bad, fz_taken;
static bool fz_closed, fz_paused;
static int fz_reason;

static void fz_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    lull_stream *s = LULL_CONTAINER_OF(ep, lull_stream, ep);
    int i = fz_got++;
    if (i >= FZ_FRAMES || len != fz_len[i]) {
        fz_bad++;
    } else {
        for (size_t k = 0; k < len; k++)
            if (((const unsigned char *)bytes)[k] != (unsigned char)i) {
                fz_bad++;
                break;
            }
    }
    int fds[300];
    int n = lull_stream_take_fds(s, fds, (int)(fz_rand() % 5));
    CHECK(n >= 0);
    for (int k = 0; k < n; k++)
        close(fds[k]);
    fz_taken += n;
    if (fz_rand() % 6 == 0) {
        CHECK_EQ(lull_stream_read_stop(s), 0);
        fz_paused = true;
    }
}

static void fz_close(lull_endpoint *ep, int reason) {
    (void)ep;
    fz_closed = true;
    fz_reason = reason;
}

TEST(random_cuts_with_fds_lose_nothing_and_leak_nothing) {
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(devnull >= 0);
    for (uint32_t seed = 1; seed <= 200; seed++) {
        fz_state = seed;
        int before = fd_count();
        lull_loop *loop = new_loop();
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        lull_stream b;
        lull_stream_options o = {.flags = LULL_STREAM_FDS,
                                 .read_size = 64 + fz_rand() % 4096};
        CHECK_EQ(lull_stream_open(loop, &b, sv[1], &o), 0);
        lull_endpoint_set_callbacks(&b.ep, fz_frame, NULL, fz_close);
        fz_got = fz_bad = fz_taken = 0;
        fz_closed = fz_paused = false;
        static unsigned char wire[FZ_FRAMES * 3004];
        size_t wl = 0;
        for (int i = 0; i < FZ_FRAMES; i++) {
            fz_len[i] = fz_rand() % 3000;
            if (fz_rand() % 4 == 0) fz_len[i] = 0;
            uint32_t be = htonl((uint32_t)fz_len[i]);
            memcpy(wire + wl, &be, 4);
            wl += 4;
            memset(wire + wl, i, fz_len[i]);
            wl += fz_len[i];
        }
        size_t off = 0;
        while (off < wl) {
            size_t n = 50 + fz_rand() % 650;
            if (n > wl - off) n = wl - off;
            int nf = fz_rand() % 3 == 0 ? 1 + (int)(fz_rand() % 3) : 0;
            union {
                char buf[CMSG_SPACE(sizeof(int) * 3)];
                struct cmsghdr align;
            } ctl;
            memset(&ctl, 0, sizeof ctl);
            struct iovec iov = {wire + off, n};
            struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
            if (nf) {
                m.msg_control = ctl.buf;
                m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nf);
                struct cmsghdr *c = CMSG_FIRSTHDR(&m);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nf);
                for (int k = 0; k < nf; k++)
                    memcpy(CMSG_DATA(c) + k * sizeof(int), &devnull,
                           sizeof(int));
            }
            ssize_t w = sendmsg(sv[0], &m, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w < 0) {
                CHECK_EQ(errno, EAGAIN);
                if (fz_paused) {
                    fz_paused = false;
                    CHECK_EQ(lull_stream_read_start(&b), 0);
                }
                CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
                continue;
            }
            off += (size_t)w;
            int turns = (int)(fz_rand() % 3);
            for (int t = 0; t < turns; t++) {
                if (fz_paused && fz_rand() % 2) {
                    fz_paused = false;
                    CHECK_EQ(lull_stream_read_start(&b), 0);
                }
                CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
            }
        }
        close(sv[0]);
        for (int i = 0; i < 1000 && !fz_closed; i++) {
            if (fz_paused) {
                fz_paused = false;
                CHECK_EQ(lull_stream_read_start(&b), 0);
            }
            CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
        }
        CHECK(fz_closed);
        CHECK_EQ(fz_reason, 0);
        CHECK_EQ(fz_got, FZ_FRAMES);
        CHECK_EQ(fz_bad, 0);
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
        CHECK_EQ(lull_loop_free(loop), 0);
        CHECK_EQ(fd_count(), before);
    }
    close(devnull);
}

/* A raw stream's read that the kernel cut (MSG_CTRUNC: out of fds)
 * carries the peer's bytes like any other: a read glues the bytes sent
 * before the fds (a plain write, no fd with it) to the send that carried
 * them. They arrive, then the stream closes with -EMFILE, rather than the
 * whole read being dropped with the error. */
static char raw_got[64];
static size_t raw_len;
static int raw_taken;
static void raw_bytes(lull_endpoint *ep, const void *bytes, size_t len) {
    lull_stream *s = LULL_CONTAINER_OF(ep, lull_stream, ep);
    CHECK(raw_len + len <= sizeof raw_got);
    memcpy(raw_got + raw_len, bytes, len);
    raw_len += len;
    int fd;
    int n = lull_stream_take_fds(s, &fd, 1);
    CHECK(n >= 0);
    if (n > 0) close(fd);
    raw_taken += n;
}

TEST(raw_read_whose_fds_were_dropped_keeps_its_bytes) {
    int before;
    lull_loop *loop = counted_loop(&before, NULL);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    lull_stream b;
    lull_stream_options o = {.flags = LULL_STREAM_FDS | LULL_STREAM_RAW};
    CHECK_EQ(lull_stream_open(loop, &b, sv[1], &o), 0);
    memset(&g_rx, 0, sizeof g_rx);
    raw_len = 0;
    raw_taken = 0;
    lull_endpoint_set_callbacks(&b.ep, raw_bytes, NULL, rx_close);
    CHECK_EQ(lull_stream_read_stop(&b), 0);
    CHECK_EQ(write(sv[0], "hello", 5), 5);
    send_with_fds(sv[0], "X", 1, sv[0], 40);
    /* 4 free fd numbers, fewer than the 40 on their way. */
    struct rlimit old, low;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
    low = old;
    low.rlim_cur = limit_leaving(4);
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    CHECK_EQ(lull_stream_read_start(&b), 0);
    run_until(loop, &g_rx.closed, 100);
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
    CHECK_EQ(g_rx.reason, -EMFILE);
    CHECK_EQ(raw_len, 6);
    CHECK(memcmp(raw_got, "helloX", 6) == 0);
    CHECK_EQ(raw_taken, 0); /* none of the dropped read's fds is handed */
    close(sv[0]);
    run_out_free_and_count(loop, before);
}
