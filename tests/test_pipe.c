/* Streams over pipes and other fds that are not sockets (src/stream.c):
 * lull_stream_open on a pipe end, lull_stream_open_pair over a pipe each
 * way, what each kind's EOF, EPIPE and errors become, the same write
 * batching, backpressure and read pause as a socket's, and SIGPIPE: a write
 * to a pipe whose reader is gone is a close reason, never a signal, whatever
 * the process's disposition and the thread's mask. Real pipes, real clock;
 * every wait is bounded. */
#include "check.h"

#include "polls.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <lull.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

static lull_loop *new_loop(void) {
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    /* The default action: a SIGPIPE anywhere kills the case. */
    signal(SIGPIPE, SIG_DFL);
    return loop;
}

/* Runs what is left (the close callbacks of local closes come in a later
 * turn) and frees the loop. */
static void free_loop(lull_loop *loop) {
    CHECK(lull_loop_settle(loop) >= 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A stream and what reached it. */
typedef struct end {
    lull_stream s;
    char *got; /* bytes (raw) or frames' bytes (framed), appended */
    size_t len, cap;
    int frames;
    int closes;
    int reason;
    int drains;
} end;

static void on_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    end *e = LULL_CONTAINER_OF(ep, end, s.ep);
    if (e->len + len > e->cap) {
        e->cap = (e->len + len) * 2 + 64;
        e->got = realloc(e->got, e->cap);
        CHECK(e->got != NULL);
    }
    memcpy(e->got + e->len, bytes, len);
    e->len += len;
    e->frames++;
}

static void on_drain(lull_endpoint *ep) {
    LULL_CONTAINER_OF(ep, end, s.ep)->drains++;
}

static void on_close(lull_endpoint *ep, int reason) {
    end *e = LULL_CONTAINER_OF(ep, end, s.ep);
    e->closes++;
    e->reason = reason;
}

static void watch(end *e) {
    lull_endpoint_set_callbacks(&e->s.ep, on_frame, on_drain, on_close);
}

static void end_free(end *e) {
    free(e->got);
    e->got = NULL;
}

/* Runs iterations until *v reaches want, at most `max` of them. */
static void run_until_at_least(lull_loop *loop, const int *v, int want,
                               int max) {
    for (int i = 0; i < max && *v < want; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK(*v >= want);
}

static void run_until_len(lull_loop *loop, const end *e, size_t want) {
    for (int i = 0; i < 100000 && e->len < want; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(e->len, want);
}

static int ioctl_fionread(int fd, int *n) {
    return ioctl(fd, FIONREAD, n);
}

static bool sigpipe_pending(void) {
    sigset_t p;
    CHECK_EQ(sigpending(&p), 0);
    return sigismember(&p, SIGPIPE);
}

static bool sigpipe_blocked(void) {
    sigset_t m;
    CHECK_EQ(pthread_sigmask(SIG_BLOCK, NULL, &m), 0);
    return sigismember(&m, SIGPIPE);
}

/* ---------------------------------------------------------------- cases */

/* A pipe's two ends as two streams: framed sends on the write end arrive
 * whole and in order at the read end; the writer's close is the reader's
 * EOF, reason 0. The read end cannot send; the write end reads nothing. */
TEST(pipe_ends_carry_frames_and_eof) {
    lull_loop *loop = new_loop();
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    end w = {0}, r = {0};
    CHECK_EQ(lull_stream_open(loop, &w.s, p[1], NULL), 0);
    CHECK_EQ(lull_stream_open(loop, &r.s, p[0], NULL), 0);
    watch(&w);
    watch(&r);
    CHECK(lull_endpoint_writable(&w.s.ep));
    CHECK(!lull_endpoint_writable(&r.s.ep)); /* a read end */
    CHECK_EQ(lull_endpoint_send_copy(&r.s.ep, "x", 1), -EPIPE);
    for (int i = 0; i < 10; i++) {
        char msg[16];
        int n = snprintf(msg, sizeof msg, "frame %d;", i);
        CHECK_EQ(lull_endpoint_send_copy(&w.s.ep, msg, (size_t)n), 0);
    }
    CHECK_EQ(r.frames, 0); /* never inside the sends */
    run_until_at_least(loop, &r.frames, 10, 100);
    CHECK_EQ(memcmp(r.got, "frame 0;frame 1;", 16), 0);
    CHECK_EQ(lull_endpoint_close(&w.s.ep, 7), 0);
    CHECK_EQ(w.closes, 0); /* a local close: its callback comes later */
    run_until_at_least(loop, &r.closes, 1, 100);
    CHECK_EQ(r.reason, 0);
    CHECK(lull_loop_settle(loop) >= 0);
    CHECK_EQ(w.closes, 1); /* once, with the reason given */
    CHECK_EQ(w.reason, 7);
    CHECK_EQ(r.frames, 10);
    end_free(&w);
    end_free(&r);
    free_loop(loop);
}

/* a and b, each a stream over a pipe each way (lull_stream_open_pair),
 * watched; the fd a reads from. */
static int two_pipe_streams(lull_loop *loop, end *a, end *b) {
    int ab[2], ba[2];
    CHECK_EQ(pipe2(ab, O_CLOEXEC), 0);
    CHECK_EQ(pipe2(ba, O_CLOEXEC), 0);
    *a = (end){0};
    *b = (end){0};
    CHECK_EQ(lull_stream_open_pair(loop, &a->s, ba[0], ab[1], NULL), 0);
    CHECK_EQ(lull_stream_open_pair(loop, &b->s, ab[0], ba[1], NULL), 0);
    watch(a);
    watch(b);
    return ba[0];
}

/* "ping" from a to b, "pong" back, each arrived whole. */
static void ping_pong(lull_loop *loop, end *a, end *b) {
    CHECK_EQ(lull_endpoint_send_copy(&a->s.ep, "ping", 4), 0);
    run_until_at_least(loop, &b->frames, 1, 100);
    CHECK_EQ(lull_endpoint_send_copy(&b->s.ep, "pong", 4), 0);
    run_until_at_least(loop, &a->frames, 1, 100);
    CHECK_EQ(memcmp(a->got, "pong", 4), 0);
    CHECK_EQ(memcmp(b->got, "ping", 4), 0);
}

/* One stream over a pipe each way is one endpoint: frames go both ways
 * between two pairs; a pair's shutdown closes only its write fd (the peer
 * reads EOF) and reading goes on. */
TEST(pair_of_pipes_is_one_endpoint) {
    lull_loop *loop = new_loop();
    end a, b;
    int a_reads = two_pipe_streams(loop, &a, &b);
    CHECK_EQ(lull_stream_fd(&a.s), a_reads);
    ping_pong(loop, &a, &b);
    /* a shuts its write side: b reads the frame, then EOF, and closes. */
    CHECK_EQ(lull_endpoint_send_copy(&a.s.ep, "last", 4), 0);
    CHECK_EQ(lull_stream_shutdown(&a.s), 0);
    CHECK_EQ(lull_endpoint_send_copy(&a.s.ep, "x", 1), -EPIPE);
    run_until_at_least(loop, &b.closes, 1, 100);
    CHECK_EQ(b.reason, 0);
    CHECK_EQ(b.frames, 2);
    CHECK_EQ(a.closes, 0);
    /* b closed, so its write fd did: a reads EOF and closes, reason 0. */
    run_until_at_least(loop, &a.closes, 1, 100);
    CHECK_EQ(a.reason, 0);
    end_free(&a);
    end_free(&b);
    free_loop(loop);
}

/* The pipe's reader is gone: a send is a close with -EPIPE, and the
 * process, whose SIGPIPE has its default action (death), lives on; no
 * SIGPIPE is left pending and the thread's mask is as it was. */
TEST(write_to_gone_reader_is_epipe_not_sigpipe) {
    lull_loop *loop = new_loop();
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    end w = {0};
    CHECK_EQ(lull_stream_open(loop, &w.s, p[1], NULL), 0);
    watch(&w);
    close(p[0]);
    /* The write-only end watches for its reader's close: the close comes
     * without any send. */
    run_until_at_least(loop, &w.closes, 1, 100);
    CHECK_EQ(w.reason, -EPIPE);

    /* A pair does not watch its write fd while idle (its reads go on
     * after the reader of its writes left, as a socket's do): the flush's
     * writev meets the gone reader, and so would a SIGPIPE. The write side
     * ends there; the stream closes, with the write's -EPIPE, once its
     * read side reaches EOF too. */
    int in[2];
    CHECK_EQ(pipe2(in, O_CLOEXEC), 0);
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    end w2 = {0};
    CHECK_EQ(lull_stream_open_pair(loop, &w2.s, in[0], p[1], NULL), 0);
    watch(&w2);
    close(p[0]);
    CHECK_EQ(lull_endpoint_send_copy(&w2.s.ep, "lost", 4), 0);
    for (int i = 0; i < 100 && w2.s.writes < 1; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_U64_EQ(w2.s.writes, 1);
    CHECK_EQ(lull_endpoint_send_copy(&w2.s.ep, "more", 4), -EPIPE);
    CHECK_EQ(w2.closes, 0);
    close(in[1]);
    run_until_at_least(loop, &w2.closes, 1, 100);
    CHECK_EQ(w2.reason, -EPIPE);
    CHECK(!sigpipe_pending());
    CHECK(!sigpipe_blocked());
    end_free(&w);
    end_free(&w2);
    free_loop(loop);
}

/* A thread that blocks SIGPIPE itself keeps its mask, and a SIGPIPE that
 * was already pending for it (not lull's) stays pending. */
TEST(sigpipe_blocked_by_the_program_stays_its_own) {
    lull_loop *loop = new_loop();
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    CHECK_EQ(pthread_sigmask(SIG_BLOCK, &set, NULL), 0);
    CHECK_EQ(raise(SIGPIPE), 0); /* pending: blocked */
    CHECK(sigpipe_pending());
    int q[2], in[2];
    CHECK_EQ(pipe2(q, O_CLOEXEC), 0);
    CHECK_EQ(pipe2(in, O_CLOEXEC), 0);
    end w2 = {0};
    CHECK_EQ(lull_stream_open_pair(loop, &w2.s, in[0], q[1], NULL), 0);
    watch(&w2);
    close(q[0]);
    CHECK_EQ(lull_endpoint_send_copy(&w2.s.ep, "x", 1), 0);
    for (int i = 0; i < 100 && w2.s.writes < 1; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    close(in[1]); /* the read side ends too: the stream closes */
    run_until_at_least(loop, &w2.closes, 1, 100);
    CHECK_EQ(w2.reason, -EPIPE);
    CHECK(sigpipe_blocked());
    CHECK(sigpipe_pending()); /* the program's own, left alone */
    static const struct timespec zero = {0, 0};
    CHECK_EQ(sigtimedwait(&set, NULL, &zero), SIGPIPE);
    CHECK_EQ(pthread_sigmask(SIG_UNBLOCK, &set, NULL), 0);
    end_free(&w2);
    free_loop(loop);
}

/* Writes queued in one callback leave together: 1,000 sends are a few
 * writevs, not 1,000 writes. */
TEST(pipe_writes_are_batched) {
    lull_loop *loop = new_loop();
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    end w = {0}, r = {0};
    lull_stream_options raw = {.flags = LULL_STREAM_RAW, .high_water = 1 << 20};
    CHECK_EQ(lull_stream_open(loop, &w.s, p[1], &raw), 0);
    CHECK_EQ(lull_stream_open(loop, &r.s, p[0], &raw), 0);
    watch(&w);
    watch(&r);
    static lull_frame frames[1000];
    static const char rec[] = "0123456789abcdef"; /* 16 bytes */
    for (int i = 0; i < 1000; i++) {
        frames[i] = (lull_frame){.bytes = rec, .len = 16};
        CHECK_EQ(lull_endpoint_send(&w.s.ep, &frames[i]), 0);
    }
    run_until_len(loop, &r, 16000);
    printf("1000 sends of 16 bytes: %llu writev calls\n",
           (unsigned long long)w.s.writes);
    CHECK_LE(w.s.writes, 4);
    CHECK_U64_EQ(w.s.bytes_written, 16000);
    CHECK_EQ(lull_endpoint_close(&w.s.ep, 0), 0);
    CHECK_EQ(lull_endpoint_close(&r.s.ep, 0), 0);
    end_free(&w);
    end_free(&r);
    free_loop(loop);
}

/* Backpressure on a pipe nobody reads: the pipe takes what fits, the queue
 * grows to high_water and writable turns false; the loop is never blocked
 * (a timer fires meanwhile). Once the reader reads, the queue drains, one
 * drain callback runs, and every byte arrives in order. */
static int timer_fires;
static void count_fire(lull_timer *t) {
    (void)t;
    timer_fires++;
}

TEST(pipe_backpressure_bounds_and_drains) {
    lull_loop *loop = new_loop();
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    end w = {0}, r = {0};
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    CHECK_EQ(lull_stream_open(loop, &w.s, p[1], &raw), 0);
    watch(&w);
    enum { CHUNK = 4096 };
    static char data[4 << 20];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (char)(i * 7 + (i >> 12));
    size_t sent = 0;
    static lull_frame frames[sizeof data / CHUNK];
    int nf = 0;
    while (lull_endpoint_writable(&w.s.ep) && sent < sizeof data) {
        frames[nf] = (lull_frame){.bytes = data + sent, .len = CHUNK};
        CHECK_EQ(lull_endpoint_send(&w.s.ep, &frames[nf]), 0);
        nf++;
        sent += CHUNK;
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    }
    CHECK(!lull_endpoint_writable(&w.s.ep));
    CHECK(sent < sizeof data); /* the bound held */
    CHECK(w.s.ep.queued >= w.s.ep.high_water);
    CHECK_LE(w.s.ep.queued, w.s.ep.high_water + CHUNK);
    lull_timer t;
    timer_fires = 0;
    lull_timer_init(loop, &t, count_fire);
    lull_timer_start(&t, 1000000, 0);
    run_until_at_least(loop, &timer_fires, 1, 100);
    CHECK_EQ(w.drains, 0);
    CHECK_EQ(lull_stream_open(loop, &r.s, p[0], &raw), 0);
    watch(&r);
    run_until_len(loop, &r, sent);
    CHECK_EQ(memcmp(r.got, data, sent), 0);
    CHECK_EQ(w.drains, 1);
    CHECK_EQ(lull_endpoint_close(&w.s.ep, 0), 0);
    run_until_at_least(loop, &r.closes, 1, 100);
    CHECK_EQ(r.reason, 0);
    end_free(&w);
    end_free(&r);
    free_loop(loop);
}

/* lull_stream_read_stop on a pipe: nothing more is read (the bytes wait in
 * the kernel, so the writer feels it); read_start resumes in order. */
TEST(pipe_read_stop_leaves_bytes_in_the_pipe) {
    lull_loop *loop = new_loop();
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    end r = {0};
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    CHECK_EQ(lull_stream_open(loop, &r.s, p[0], &raw), 0);
    watch(&r);
    CHECK_EQ(write(p[1], "abc", 3), 3);
    run_until_len(loop, &r, 3);
    CHECK_EQ(lull_stream_read_stop(&r.s), 0);
    CHECK_EQ(write(p[1], "def", 3), 3);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(r.len, 3);
    int queued = 0;
    CHECK_EQ(ioctl_fionread(p[0], &queued), 0);
    CHECK_EQ(queued, 3);
    CHECK_EQ(lull_stream_read_start(&r.s), 0);
    run_until_len(loop, &r, 6);
    CHECK_EQ(memcmp(r.got, "abcdef", 6), 0);
    close(p[1]);
    run_until_at_least(loop, &r.closes, 1, 100);
    CHECK_EQ(r.reason, 0);
    end_free(&r);
    free_loop(loop);
}

/* A socketpair end through lull_stream_open_pair(fd, fd) is an ordinary
 * socket stream; a pair of a socket (reads) and a pipe (writes) works
 * too. */
TEST(pair_of_socket_and_pipe) {
    lull_loop *loop = new_loop();
    int sv[2], p[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    end a = {0}, b = {0}, c = {0};
    CHECK_EQ(lull_stream_open_pair(loop, &a.s, sv[0], sv[0], NULL), 0);
    CHECK_EQ(lull_stream_open_pair(loop, &b.s, sv[1], p[1], NULL), 0);
    CHECK_EQ(lull_stream_open(loop, &c.s, p[0], NULL), 0);
    watch(&a);
    watch(&b);
    watch(&c);
    CHECK_EQ(lull_endpoint_send_copy(&a.s.ep, "to b", 4), 0);
    CHECK_EQ(lull_endpoint_send_copy(&b.s.ep, "to c", 4), 0);
    run_until_at_least(loop, &b.frames, 1, 100);
    run_until_at_least(loop, &c.frames, 1, 100);
    CHECK_EQ(memcmp(b.got, "to b", 4), 0);
    CHECK_EQ(memcmp(c.got, "to c", 4), 0);
    CHECK_EQ(lull_endpoint_close(&a.s.ep, 0), 0);
    run_until_at_least(loop, &b.closes, 1, 100); /* a's EOF */
    run_until_at_least(loop, &c.closes, 1, 100); /* b closed its pipe */
    end_free(&a);
    end_free(&b);
    end_free(&c);
    free_loop(loop);
}

/* A pair whose two fds are one socket (an inetd-style service's stdin and
 * stdout, or a socket and its dup): lull_stream_shutdown must reach the
 * peer, which reads the queue and then EOF. Closing the write fd alone
 * does not end a socket another fd still holds (the stream's own read
 * fd, here), so the peer waited for good, and the stream's own reading,
 * waiting for the peer's EOF in turn, with it. */
TEST(pair_of_one_socket_twice_shuts_it_down) {
    lull_loop *loop = new_loop();
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    int out = fcntl(sv[0], F_DUPFD_CLOEXEC, 0);
    CHECK(out >= 0);
    end a = {0}, b = {0};
    CHECK_EQ(lull_stream_open_pair(loop, &a.s, sv[0], out, NULL), 0);
    CHECK_EQ(lull_stream_open(loop, &b.s, sv[1], NULL), 0);
    watch(&a);
    watch(&b);
    CHECK_EQ(lull_endpoint_send_copy(&a.s.ep, "last", 4), 0);
    CHECK_EQ(lull_stream_shutdown(&a.s), 0);
    run_until_at_least(loop, &b.closes, 1, 100); /* the frame, then EOF */
    CHECK_EQ(b.frames, 1);
    CHECK_EQ(memcmp(b.got, "last", 4), 0);
    CHECK_EQ(b.reason, 0);
    run_until_at_least(loop, &a.closes, 1, 100); /* b's close: a's EOF */
    CHECK_EQ(a.reason, 0);
    end_free(&a);
    end_free(&b);
    free_loop(loop);
}

/* A TCP connection on loopback: *client and *server, plain sockets. */
static void tcp_pair(int *client, int *server) {
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(l >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    CHECK_EQ(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    CHECK_EQ(listen(l, 1), 0);
    CHECK_EQ(getsockname(l, (struct sockaddr *)&a, &len), 0);
    *client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(*client >= 0);
    CHECK_EQ(connect(*client, (struct sockaddr *)&a, sizeof a), 0);
    *server = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    CHECK(*server >= 0);
    close(l);
}

static int nodelay(int fd) {
    int on = -1;
    socklen_t len = sizeof on;
    CHECK_EQ(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, &len), 0);
    return on;
}

/* TCP_NODELAY is on for a stream's TCP writes unless LULL_STREAM_NAGLE,
 * a pair's too: its write fd is the one Nagle's algorithm would hold
 * back (an inetd-style service's stdout is the TCP connection). Only
 * the read fd was ever set, and only by lull_stream_open. */
TEST(pair_writing_tcp_turns_nagle_off) {
    for (int nagle = 0; nagle < 2; nagle++) {
        lull_loop *loop = new_loop();
        int c, srv, p[2];
        tcp_pair(&c, &srv);
        CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
        int probe = fcntl(c, F_DUPFD_CLOEXEC, 0); /* the same socket */
        CHECK(probe >= 0);
        CHECK_EQ(nodelay(probe), 0);
        lull_stream_options o = {.flags = nagle ? LULL_STREAM_NAGLE : 0};
        end e = {0};
        CHECK_EQ(lull_stream_open_pair(loop, &e.s, p[0], c, &o), 0);
        watch(&e);
        CHECK_EQ(nodelay(probe) != 0, !nagle);
        CHECK_EQ(lull_endpoint_close(&e.s.ep, 0), 0);
        close(probe);
        close(srv);
        close(p[1]);
        end_free(&e);
        free_loop(loop);
    }
}

/* What a stream cannot be: -EINVAL, and the fds are closed (the stream
 * owns them from the call on, also on failure). */
static bool is_open(int fd) {
    return fcntl(fd, F_GETFD) >= 0;
}

TEST(pipe_argument_errors) {
    lull_loop *loop = new_loop();
    end e = {0};
    int file = memfd_create("lull-test", MFD_CLOEXEC); /* a regular file */
    CHECK(file >= 0);
    CHECK_EQ(lull_stream_open(loop, &e.s, file, NULL), -EINVAL);
    CHECK(!is_open(file));
    int efd = eventfd(0, EFD_CLOEXEC); /* no byte stream */
    CHECK(efd >= 0);
    CHECK_EQ(lull_stream_open(loop, &e.s, efd, NULL), -EINVAL);
    CHECK(!is_open(efd));
    int dg[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, dg), 0);
    CHECK_EQ(lull_stream_open(loop, &e.s, dg[0], NULL), -EINVAL);
    close(dg[1]);
    CHECK_EQ(lull_stream_open(loop, &e.s, 1 << 20, NULL), -EINVAL);
    CHECK_EQ(lull_stream_open(loop, &e.s, -1, NULL), -EINVAL);
    CHECK_EQ(lull_stream_open(loop, &e.s, 0x7fffffff, NULL), -EINVAL);
    /* A pair whose read fd is a write end, or whose write fd a read end. */
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    CHECK_EQ(lull_stream_open_pair(loop, &e.s, p[1], p[0], NULL), -EINVAL);
    CHECK(!is_open(p[0]) && !is_open(p[1]));
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    CHECK_EQ(lull_stream_open_pair(NULL, &e.s, p[0], p[1], NULL), -EINVAL);
    CHECK(!is_open(p[0]) && !is_open(p[1]));
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    CHECK_EQ(lull_stream_open_pair(loop, NULL, p[0], p[1], NULL), -EINVAL);
    CHECK(!is_open(p[0]) && !is_open(p[1]));
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    CHECK_EQ(lull_stream_open_pair(loop, &e.s, p[0], -1, NULL), -EINVAL);
    CHECK(!is_open(p[0]));
    CHECK_EQ(lull_stream_open_pair(loop, &e.s, -7, p[1], NULL), -EINVAL);
    CHECK(!is_open(p[1]));
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    lull_stream_options bad = {.flags = 0x80};
    CHECK_EQ(lull_stream_open_pair(loop, &e.s, p[0], p[1], &bad), -EINVAL);
    CHECK(!is_open(p[0]) && !is_open(p[1]));
    free_loop(loop);
}

/* A framed stream over a pipe closes on a frame cut short by EOF, as a
 * socket stream does (-EPROTO), and on an oversized length (-EMSGSIZE). */
TEST(pipe_bad_frames_close_with_reasons) {
    lull_loop *loop = new_loop();
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    end r = {0};
    CHECK_EQ(lull_stream_open(loop, &r.s, p[0], NULL), 0);
    watch(&r);
    CHECK_EQ(write(p[1],
                   "\0\0\0\x08"
                   "abc",
                   7),
             7); /* 8 promised, 3 sent */
    close(p[1]);
    run_until_at_least(loop, &r.closes, 1, 100);
    CHECK_EQ(r.reason, -EPROTO);
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    end r2 = {0};
    lull_stream_options small = {.max_frame = 16};
    CHECK_EQ(lull_stream_open(loop, &r2.s, p[0], &small), 0);
    watch(&r2);
    CHECK_EQ(write(p[1], "\0\0\1\0", 4), 4); /* 256 > 16 */
    run_until_at_least(loop, &r2.closes, 1, 100);
    CHECK_EQ(r2.reason, -EMSGSIZE);
    close(p[1]);
    end_free(&r);
    end_free(&r2);
    free_loop(loop);
}

/* A character device: a pty's master as a raw stream. Bytes go both ways;
 * the slave's last close is the master's -EIO. */
TEST(pty_master_is_a_stream) {
    lull_loop *loop = new_loop();
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0) {
        printf("no pty here (%s): skipped\n", strerror(errno));
        free_loop(loop);
        return;
    }
    CHECK_EQ(grantpt(master), 0);
    CHECK_EQ(unlockpt(master), 0);
    int slave = open(ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
    CHECK(slave >= 0);
    struct termios t;
    CHECK_EQ(tcgetattr(slave, &t), 0);
    cfmakeraw(&t);
    CHECK_EQ(tcsetattr(slave, TCSANOW, &t), 0);
    end m = {0};
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    CHECK_EQ(lull_stream_open(loop, &m.s, master, &raw), 0);
    watch(&m);
    CHECK_EQ(write(slave, "hello", 5), 5);
    run_until_len(loop, &m, 5);
    CHECK_EQ(memcmp(m.got, "hello", 5), 0);
    CHECK_EQ(lull_endpoint_send_copy(&m.s.ep, "abc", 3), 0);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    char buf[8];
    CHECK_EQ(read(slave, buf, sizeof buf), 3);
    CHECK_EQ(memcmp(buf, "abc", 3), 0);
    close(slave);
    run_until_at_least(loop, &m.closes, 1, 100);
    CHECK_EQ(m.reason, -EIO);
    end_free(&m);
    free_loop(loop);
}

/* A pty, both sides raw; -1 where the system has none. */
static int open_pty(int *slave) {
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0) return -1;
    CHECK_EQ(grantpt(master), 0);
    CHECK_EQ(unlockpt(master), 0);
    *slave = open(ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
    CHECK(*slave >= 0);
    struct termios t;
    CHECK_EQ(tcgetattr(*slave, &t), 0);
    cfmakeraw(&t);
    CHECK_EQ(tcsetattr(*slave, TCSANOW, &t), 0);
    return master;
}

static int g_pty_released;
static void pty_release(lull_frame *f) {
    (void)f;
    g_pty_released++;
}

/* The side of a pty a stream holds, paused and waiting for room to write,
 * when the other side closes: the kernel reports a hang-up that lasts (a
 * master whose slave closed; a slave hung up by its master's close). The
 * write is tried and fails (EIO), and the loop goes quiet instead of waking
 * for ever; resumed, the read finds the end. */
static void pty_blocked_when_the_other_side_closes(bool hold_master) {
    lull_loop *loop = new_loop();
    int slave, master = open_pty(&slave);
    if (master < 0) {
        printf("no pty here (%s): skipped\n", strerror(errno));
        free_loop(loop);
        return;
    }
    int mine = hold_master ? master : slave;
    int other = hold_master ? slave : master;
    end e = {0};
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    CHECK_EQ(lull_stream_open(loop, &e.s, mine, &raw), 0);
    watch(&e);
    CHECK_EQ(lull_stream_read_stop(&e.s), 0);
    static char blob[1 << 20];
    static lull_frame f;
    f = (lull_frame){.bytes = blob, .len = sizeof blob, .release = pty_release};
    g_pty_released = 0;
    CHECK_EQ(lull_endpoint_send(&e.s.ep, &f), 0);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(g_pty_released, 0); /* blocked: the other side reads nothing */
    close(other);
    CHECK(polls_in(loop, 20) < 10);
    CHECK_EQ(g_pty_released, 1); /* the write side ended */
    CHECK_EQ(e.closes, 0);
    CHECK_EQ(lull_stream_read_start(&e.s), 0);
    run_until_at_least(loop, &e.closes, 1, 100);
    CHECK(e.reason == -EIO || e.reason == 0);
    end_free(&e);
    free_loop(loop);
}

TEST(pty_master_blocked_and_paused_when_the_slave_closes) {
    pty_blocked_when_the_other_side_closes(true);
}

TEST(pty_slave_blocked_and_paused_when_the_master_closes) {
    pty_blocked_when_the_other_side_closes(false);
}

/* The pty master as a pair's write fd (its reads from a pipe): the write
 * watcher hears the lasting hang-up of the slave's close the same way. */
TEST(pty_master_as_a_pairs_write_fd_when_the_slave_closes) {
    lull_loop *loop = new_loop();
    int slave, master = open_pty(&slave);
    if (master < 0) {
        printf("no pty here (%s): skipped\n", strerror(errno));
        free_loop(loop);
        return;
    }
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    end e = {0};
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    CHECK_EQ(lull_stream_open_pair(loop, &e.s, p[0], master, &raw), 0);
    watch(&e);
    static char blob[1 << 20];
    static lull_frame f;
    f = (lull_frame){.bytes = blob, .len = sizeof blob, .release = pty_release};
    g_pty_released = 0;
    CHECK_EQ(lull_endpoint_send(&e.s.ep, &f), 0);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(g_pty_released, 0);
    close(slave);
    CHECK(polls_in(loop, 20) < 10);
    CHECK_EQ(g_pty_released, 1);
    CHECK_EQ(e.closes, 0); /* the pipe is still open for reading */
    close(p[1]);
    run_until_at_least(loop, &e.closes, 1, 100);
    CHECK_EQ(e.reason, -EIO);
    end_free(&e);
    free_loop(loop);
}

/* A pair whose write fd is a socket its peer shuts both ways while the
 * stream waits for room: the write watcher hears EPOLLHUP alone, tries
 * the write (EPIPE) and the loop goes quiet; reading the pipe goes on. */
TEST(pairs_socket_write_fd_shut_both_ways_while_blocked) {
    lull_loop *loop = new_loop();
    int p[2], sv[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    end e = {0};
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    CHECK_EQ(lull_stream_open_pair(loop, &e.s, p[0], sv[0], &raw), 0);
    watch(&e);
    static char blob[1 << 20];
    static lull_frame f;
    f = (lull_frame){.bytes = blob, .len = sizeof blob, .release = pty_release};
    g_pty_released = 0;
    CHECK_EQ(lull_endpoint_send(&e.s.ep, &f), 0);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(g_pty_released, 0); /* blocked: the peer reads nothing */
    CHECK_EQ(shutdown(sv[1], SHUT_RDWR), 0);
    CHECK(polls_in(loop, 20) < 10);
    CHECK_EQ(g_pty_released, 1);
    CHECK_EQ(e.closes, 0);
    CHECK_EQ(write(p[1], "ab", 2), 2); /* reading goes on */
    run_until_len(loop, &e, 2);
    close(p[1]);
    run_until_at_least(loop, &e.closes, 1, 100);
    CHECK_EQ(e.reason, -EPIPE);
    close(sv[1]);
    end_free(&e);
    free_loop(loop);
}

/* The same sides, paused and not writing: nothing is registered, so the
 * lasting hang-up never reaches the loop. */
static void pty_idle_when_the_other_side_closes(bool hold_master) {
    lull_loop *loop = new_loop();
    int slave, master = open_pty(&slave);
    if (master < 0) {
        printf("no pty here (%s): skipped\n", strerror(errno));
        free_loop(loop);
        return;
    }
    end e = {0};
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    CHECK_EQ(lull_stream_open(loop, &e.s, hold_master ? master : slave, &raw),
             0);
    watch(&e);
    CHECK_EQ(lull_stream_read_stop(&e.s), 0);
    close(hold_master ? slave : master);
    CHECK(polls_in(loop, 20) < 10);
    CHECK_EQ(e.closes, 0);
    CHECK_EQ(lull_stream_read_start(&e.s), 0);
    run_until_at_least(loop, &e.closes, 1, 100);
    CHECK(e.reason == -EIO || e.reason == 0);
    end_free(&e);
    free_loop(loop);
}

TEST(pty_master_paused_when_the_slave_closes) {
    pty_idle_when_the_other_side_closes(true);
}

TEST(pty_slave_paused_when_the_master_closes) {
    pty_idle_when_the_other_side_closes(false);
}

/* ------------------------------------ a failed write ends one direction */

/* 1 MiB of input, more than any pipe or socket buffer holds: the writer
 * is always blocked when its reader goes. */
#define BIG ((size_t)1 << 20)
static char g_big[BIG];

static int g_big_released;
static void big_release(lull_frame *f) {
    (void)f;
    g_big_released++;
}

/* Sends 1 MiB that starts with a line: "first line\n". */
static void send_big(end *e) {
    static lull_frame f;
    memset(g_big, 'x', BIG);
    memcpy(g_big, "first line\n", 11);
    f = (lull_frame){.bytes = g_big, .len = BIG, .release = big_release};
    g_big_released = 0;
    CHECK_EQ(lull_endpoint_send(&e->s.ep, &f), 0);
}

/* Runs until the stream's write side has ended: the input, never written
 * whole, is released, and sends are refused. */
static void run_until_write_ended(lull_loop *loop, end *e) {
    for (int i = 0; i < 1000 && !g_big_released; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(g_big_released, 1);
    CHECK(e->s.bytes_written < BIG);
    CHECK(!lull_endpoint_writable(&e->s.ep));
}

/* One socket is the peer's stdin and stdout (a child on a socketpair): it
 * read a little of a 1 MiB input, wrote its output and went away with the
 * rest unread. Our write fails (-EPIPE); the output, already in our socket,
 * is still read, and the stream closes once, after it, with the write's
 * error. Sends after the failure are refused, never a crash. */
TEST(failed_write_keeps_reading_a_socket) {
    lull_loop *loop = new_loop();
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    end e = {0};
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    CHECK_EQ(lull_stream_open(loop, &e.s, sv[0], &raw), 0);
    watch(&e);
    send_big(&e);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    char line[16];
    CHECK_EQ(read(sv[1], line, sizeof line), (ssize_t)sizeof line);
    CHECK_EQ(write(sv[1], "first line\n", 11), 11);
    close(sv[1]); /* unread input: a reset for us, after the output */
    run_until_at_least(loop, &e.closes, 1, 1000);
    CHECK_EQ(e.len, 11);
    CHECK_EQ(memcmp(e.got, "first line\n", 11), 0);
    CHECK_EQ(e.reason, -EPIPE);
    CHECK_EQ(lull_endpoint_send_copy(&e.s.ep, "late", 4), -EPIPE);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(e.closes, 1);
    end_free(&e);
    free_loop(loop);
}

/* The same over a pipe each way (a child's stdin and stdout): the peer
 * closed its stdin first, then wrote its output, as head does. The write
 * side ends at the failed write; sends, and a shutdown, change nothing;
 * the output arrives, and the close (the write's -EPIPE) waits for the
 * output's EOF. */
TEST(failed_write_keeps_reading_a_pair) {
    lull_loop *loop = new_loop();
    int in[2], out[2];
    CHECK_EQ(pipe2(in, O_CLOEXEC), 0);
    CHECK_EQ(pipe2(out, O_CLOEXEC), 0);
    end e = {0};
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    CHECK_EQ(lull_stream_open_pair(loop, &e.s, in[0], out[1], &raw), 0);
    watch(&e);
    send_big(&e);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    close(out[0]); /* the peer's stdin */
    run_until_write_ended(loop, &e);
    CHECK_EQ(e.closes, 0);
    CHECK_EQ(lull_endpoint_send_copy(&e.s.ep, "late", 4), -EPIPE);
    CHECK_EQ(lull_stream_shutdown(&e.s), 0); /* already ended: nothing */
    CHECK_EQ(write(in[1], "first line\n", 11), 11);
    run_until_len(loop, &e, 11);
    CHECK_EQ(e.closes, 0);
    CHECK_EQ(write(in[1], "second\n", 7), 7);
    close(in[1]);
    run_until_at_least(loop, &e.closes, 1, 1000);
    CHECK_EQ(e.len, 18);
    CHECK_EQ(memcmp(e.got, "first line\nsecond\n", 18), 0);
    CHECK_EQ(e.reason, -EPIPE);
    CHECK(!sigpipe_pending());
    end_free(&e);
    free_loop(loop);
}

/* A read callback closes the stream after its write side failed: one
 * close callback, with the caller's reason. */
static void close_on_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    on_frame(ep, bytes, len);
    lull_endpoint_close(ep, 77);
    lull_endpoint_close(ep, 78); /* a second close: nothing */
}

TEST(read_callback_closes_after_failed_write) {
    lull_loop *loop = new_loop();
    int in[2], out[2];
    CHECK_EQ(pipe2(in, O_CLOEXEC), 0);
    CHECK_EQ(pipe2(out, O_CLOEXEC), 0);
    end e = {0};
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    CHECK_EQ(lull_stream_open_pair(loop, &e.s, in[0], out[1], &raw), 0);
    lull_endpoint_set_callbacks(&e.s.ep, close_on_frame, on_drain, on_close);
    send_big(&e);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    close(out[0]);
    run_until_write_ended(loop, &e);
    CHECK_EQ(write(in[1], "out", 3), 3);
    run_until_at_least(loop, &e.closes, 1, 1000);
    CHECK_EQ(e.reason, 77);
    CHECK_EQ(e.len, 3);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(e.closes, 1);
    close(in[1]);
    end_free(&e);
    free_loop(loop);
}

/* Over TCP, the peer resets (SO_LINGER 0) while our 1 MiB is queued and
 * its bytes are on their way: one close callback, with the first failure
 * (-ECONNRESET or -EPIPE), and nothing else. */
static end g_tcp;
static void accept_one(lull_server *srv) {
    CHECK_EQ(lull_server_accept(srv, &g_tcp.s, NULL), 0);
    watch(&g_tcp);
}

TEST(peer_reset_mid_read_after_failed_write) {
    lull_loop *loop = new_loop();
    lull_server srv;
    CHECK_EQ(lull_server_listen_tcp(loop, &srv, "127.0.0.1", 0, 0, accept_one),
             0);
    int port = lull_server_port(&srv);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_EQ(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    for (int i = 0; i < 100 && srv.accepted == 0; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_U64_EQ(srv.accepted, 1);
    lull_server_close(&srv);
    send_big(&g_tcp);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    /* Half a frame on its way, then the reset. */
    uint32_t hdr = htonl(100);
    CHECK_EQ(write(fd, &hdr, sizeof hdr), (ssize_t)sizeof hdr);
    CHECK_EQ(write(fd, "half", 4), 4);
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    CHECK_EQ(setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l), 0);
    close(fd);
    run_until_at_least(loop, &g_tcp.closes, 1, 1000);
    CHECK(g_tcp.reason == -ECONNRESET || g_tcp.reason == -EPIPE);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(g_tcp.closes, 1);
    end_free(&g_tcp);
    free_loop(loop);
}

/* head -n 1 fed 1 MiB through one stream for both its stdin and its
 * stdout: a pipe each way, and one socket for both. head reads a buffer,
 * closes its stdin and then writes its line, so our write fails while its
 * output is on its way: the line arrives, head exits 0 (no SIGPIPE: we
 * never closed its stdout's reader), and the stream closes once, with the
 * write's -EPIPE. A few runs each, since where the failure lands varies. */
static int g_exits, g_exit_status, g_exit_signal;
static void on_head_exit(lull_process *p, int status, int sig) {
    (void)p;
    g_exits++;
    g_exit_status = status;
    g_exit_signal = sig;
}

TEST(head_gets_its_line_through_one_stream) {
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    for (int run = 0; run < 6; run++) {
        bool sock = run % 2;
        lull_loop *loop = new_loop();
        end e = {0};
        lull_process p;
        lull_process_options o = {.argv = (char *[]){"head", "-n", "1", NULL}};
        int sv[2] = {-1, -1};
        if (sock) {
            CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
            o.stdio[0] = (lull_stdio){.kind = LULL_STDIO_FD, .fd = sv[1]};
            o.stdio[1] = (lull_stdio){.kind = LULL_STDIO_FD, .fd = sv[1]};
        } else {
            o.stdio[0] = (lull_stdio){
                .kind = LULL_STDIO_PIPE, .stream = &e.s, .stream_opts = &raw};
            o.stdio[1] = o.stdio[0];
        }
        g_exits = 0;
        g_exit_status = g_exit_signal = -1;
        CHECK_EQ(lull_process_spawn(loop, &p, &o, on_head_exit), 0);
        if (sock) {
            close(sv[1]);
            CHECK_EQ(lull_stream_open(loop, &e.s, sv[0], &raw), 0);
        }
        watch(&e);
        send_big(&e);
        for (int i = 0; i < 100000 && (!e.closes || !g_exits); i++)
            CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
        CHECK_EQ(g_exits, 1);
        CHECK_EQ(g_exit_signal, 0);
        CHECK_EQ(g_exit_status, 0);
        CHECK_EQ(e.closes, 1);
        CHECK_EQ(e.reason, -EPIPE);
        CHECK_EQ(e.len, 11);
        CHECK_EQ(memcmp(e.got, "first line\n", 11), 0);
        end_free(&e);
        free_loop(loop);
    }
}

/* Signals land while the stream writes and reads (SIGALRM every 50 us,
 * a handler without SA_RESTART, so a call it interrupts fails EINTR):
 * 16 MiB through a pipe arrive whole, and the writer ends with reason 0
 * (its shutdown), not an error. The mask lull sets around a pipe write is
 * restored each time. */
static volatile sig_atomic_t g_alarms;
static void on_alarm(int sig) {
    (void)sig;
    g_alarms++;
}

static end g_w;
static int g_rounds;
static void resend(lull_frame *f) {
    if (++g_rounds < 16) {
        CHECK_EQ(lull_endpoint_send(&g_w.s.ep, f), 0);
    } else {
        CHECK_EQ(lull_stream_shutdown(&g_w.s), 0);
    }
}

TEST(signals_during_writes_change_nothing) {
    lull_loop *loop = new_loop();
    struct sigaction sa = {.sa_handler = on_alarm}, old;
    sigemptyset(&sa.sa_mask);
    CHECK_EQ(sigaction(SIGALRM, &sa, &old), 0);
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    end r = {0};
    g_w = (end){0};
    CHECK_EQ(lull_stream_open(loop, &r.s, p[0], &raw), 0);
    CHECK_EQ(lull_stream_open(loop, &g_w.s, p[1], &raw), 0);
    watch(&r);
    watch(&g_w);
    static lull_frame f;
    memset(g_big, 'y', BIG);
    f = (lull_frame){.bytes = g_big, .len = BIG, .release = resend};
    g_rounds = 0;
    CHECK_EQ(lull_endpoint_send(&g_w.s.ep, &f), 0);
    struct itimerval it = {{0, 50}, {0, 50}}, off = {{0, 0}, {0, 0}};
    CHECK_EQ(setitimer(ITIMER_REAL, &it, NULL), 0);
    for (int i = 0; i < 1000000 && (!r.closes || !g_w.closes); i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(setitimer(ITIMER_REAL, &off, NULL), 0);
    CHECK_EQ(sigaction(SIGALRM, &old, NULL), 0);
    CHECK_EQ(g_rounds, 16);
    CHECK_EQ(r.len, 16 * BIG);
    CHECK_EQ(r.reason, 0);
    CHECK_EQ(g_w.reason, 0);
    CHECK_EQ(g_w.closes, 1);
    CHECK(!sigpipe_blocked());
    for (size_t i = 0; i < r.len; i += 4096)
        CHECK_EQ(r.got[i], 'y');
    printf("%d alarms during the transfer\n", (int)g_alarms);
    end_free(&r);
    end_free(&g_w);
    free_loop(loop);
}

/* ------------------------------------- the descriptions' flags are kept */

static bool nonblocking(int fd) {
    int fl = fcntl(fd, F_GETFL);
    CHECK(fl >= 0);
    return fl & O_NONBLOCK;
}

/* Pipes take RWF_NOWAIT, and honour it, from Linux 6.5 (STREAMS.md). */
static bool pipes_take_nowait(void) {
    struct utsname u;
    int major = 0, minor = 0;
    CHECK_EQ(uname(&u), 0);
    CHECK(sscanf(u.release, "%d.%d", &major, &minor) == 2);
    return major > 6 || (major == 6 && minor >= 5);
}

/* Bytes both ways through a raw stream and the peer's fds. */
static void exchange(lull_loop *loop, end *e, int peer_in, int peer_out) {
    size_t had = e->len;
    CHECK_EQ(write(peer_out, "ping", 4), 4);
    run_until_len(loop, e, had + 4);
    CHECK_EQ(lull_endpoint_send_copy(&e->s.ep, "pong", 4), 0);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    char buf[4];
    CHECK_EQ(read(peer_in, buf, 4), 4);
    CHECK_EQ(memcmp(buf, "pong", 4), 0);
}

/* A socket and a pipe each way, their descriptions shared with a dup
 * lull does not know of, left blocking by their owner: they stay
 * blocking while the stream uses them (MSG_DONTWAIT, RWF_NOWAIT) and
 * after it closed its fds. */
TEST(open_leaves_a_shared_description_blocking) {
    lull_loop *loop = new_loop();
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    int keep = dup(sv[0]);
    end e = {0};
    CHECK_EQ(lull_stream_open(loop, &e.s, sv[0], &raw), 0);
    watch(&e);
    CHECK(!nonblocking(keep));
    exchange(loop, &e, sv[1], sv[1]);
    CHECK(!nonblocking(keep));
    lull_endpoint_close(&e.s.ep, 0);
    CHECK(!nonblocking(keep));
    close(keep);
    close(sv[1]);
    end_free(&e);

    bool nowait = pipes_take_nowait();
    int in[2], out[2];
    CHECK_EQ(pipe2(in, O_CLOEXEC), 0);
    CHECK_EQ(pipe2(out, O_CLOEXEC), 0);
    int keep_r = dup(in[0]), keep_w = dup(out[1]);
    end p = {0};
    CHECK_EQ(lull_stream_open_pair(loop, &p.s, in[0], out[1], &raw), 0);
    watch(&p);
    exchange(loop, &p, out[0], in[1]);
    if (nowait) {
        CHECK(!nonblocking(keep_r));
        CHECK(!nonblocking(keep_w));
    } else {
        printf("Linux before 6.5: pipes are made non-blocking while open\n");
    }
    CHECK_EQ(lull_stream_shutdown(&p.s), 0); /* closes out[1] */
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK(!nonblocking(keep_w));
    lull_endpoint_close(&p.s.ep, 0);
    CHECK(!nonblocking(keep_r));
    close(keep_r);
    close(keep_w);
    close(in[1]);
    close(out[0]);
    end_free(&p);
    free_loop(loop);
}

/* Where the kernel has no per-call way (a named FIFO: RWF_NOWAIT is
 * refused; a tty), the description is non-blocking while the stream has
 * the fd and as its owner left it once the stream closed it; a flag the
 * owner set stays set. */
TEST(open_gives_the_flag_back_where_it_sets_it) {
    lull_loop *loop = new_loop();
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    char dir[] = "/tmp/lull-fifo-XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/f", dir);
    CHECK_EQ(mkfifo(path, 0600), 0);
    int fd = open(path, O_RDWR | O_CLOEXEC); /* reads its own writes */
    CHECK(fd >= 0);
    int keep = dup(fd);
    end e = {0};
    CHECK_EQ(lull_stream_open(loop, &e.s, fd, &raw), 0);
    watch(&e);
    CHECK_EQ(lull_endpoint_send_copy(&e.s.ep, "loop", 4), 0);
    run_until_len(loop, &e, 4);
    CHECK(nonblocking(keep)); /* refused RWF_NOWAIT: the flag, for now */
    lull_endpoint_close(&e.s.ep, 0);
    CHECK(!nonblocking(keep));
    run_until_at_least(loop, &e.closes, 1, 10);
    close(keep);
    end_free(&e);

    /* The owner's own O_NONBLOCK is the owner's: it stays. */
    fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
    CHECK(fd >= 0);
    keep = dup(fd);
    e = (end){0};
    CHECK_EQ(lull_stream_open(loop, &e.s, fd, &raw), 0);
    watch(&e);
    CHECK_EQ(lull_endpoint_send_copy(&e.s.ep, "loop", 4), 0);
    run_until_len(loop, &e, 4);
    lull_endpoint_close(&e.s.ep, 0);
    CHECK(nonblocking(keep));
    run_until_at_least(loop, &e.closes, 1, 10);
    close(keep);
    end_free(&e);
    CHECK_EQ(unlink(path), 0);
    CHECK_EQ(rmdir(dir), 0);

    /* A pty's master, also as a pair's write fd, given back at shutdown. */
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0) {
        printf("no pty here (%s): that part skipped\n", strerror(errno));
        free_loop(loop);
        return;
    }
    CHECK_EQ(grantpt(master), 0);
    CHECK_EQ(unlockpt(master), 0);
    int slave = open(ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
    CHECK(slave >= 0);
    int in[2];
    CHECK_EQ(pipe2(in, O_CLOEXEC), 0);
    e = (end){0};
    CHECK_EQ(lull_stream_open_pair(loop, &e.s, in[0], dup(master), &raw), 0);
    watch(&e);
    CHECK(nonblocking(master));
    CHECK_EQ(lull_stream_shutdown(&e.s), 0);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK(!nonblocking(master));
    lull_endpoint_close(&e.s.ep, 0);
    close(in[1]);
    close(slave);
    close(master);
    end_free(&e);
    free_loop(loop);
}

/* The case that hurt: a stream has one end of a pipe, and a child writes
 * 1,000,000 bytes into the same description. Non-blocking, its stdout
 * would fail with EAGAIN once the pipe is full (head exited 1 after
 * 65,536 bytes); blocking, as its owner left it, all arrive. */
TEST(child_sharing_the_description_writes_all) {
    if (!pipes_take_nowait()) {
        printf("Linux before 6.5: the pipe is non-blocking while open "
               "(documented): skipped\n");
        return;
    }
    lull_loop *loop = new_loop();
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
    end r = {0}, w = {0};
    CHECK_EQ(lull_stream_open(loop, &r.s, p[0], &raw), 0);
    CHECK_EQ(lull_stream_open(loop, &w.s, dup(p[1]), &raw), 0);
    watch(&r);
    watch(&w);
    lull_process proc;
    lull_process_options o = {
        .argv = (char *[]){"head", "-c", "1000000", "/dev/zero", NULL}};
    o.stdio[1] = (lull_stdio){.kind = LULL_STDIO_FD, .fd = p[1]};
    g_exits = 0;
    CHECK_EQ(lull_process_spawn(loop, &proc, &o, on_head_exit), 0);
    close(p[1]);
    for (int i = 0; i < 100000 && (r.len < 1000000 || !g_exits); i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(g_exits, 1);
    CHECK_EQ(g_exit_status, 0);
    CHECK_EQ(r.len, 1000000);
    lull_endpoint_close(&w.s.ep, 0); /* the last writer: r reads EOF */
    run_until_at_least(loop, &r.closes, 1, 100);
    CHECK_EQ(r.reason, 0);
    end_free(&r);
    end_free(&w);
    free_loop(loop);
}

/* A pty master opened for the case: -1 (and a message) where there is none. */
static int open_master(int *slave) {
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0) {
        printf("no pty here (%s): skipped\n", strerror(errno));
        return -1;
    }
    CHECK_EQ(grantpt(master), 0);
    CHECK_EQ(unlockpt(master), 0);
    *slave = open(ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
    CHECK(*slave >= 0);
    struct termios t;
    CHECK_EQ(tcgetattr(*slave, &t), 0);
    cfmakeraw(&t);
    CHECK_EQ(tcsetattr(*slave, TCSANOW, &t), 0);
    return master;
}

/* Two streams on one description (a terminal's stdin and stdout are one):
 * the first to close leaves the flag to the other, which still needs it
 * (a blocking read would stall its loop); the last clears it. */
TEST(streams_sharing_a_description_share_its_flag) {
    int slave;
    int master = open_master(&slave);
    if (master < 0) return;
    lull_loop *loop = new_loop();
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    end a = {0}, b = {0};
    CHECK_EQ(lull_stream_open(loop, &a.s, dup(master), &raw), 0);
    CHECK_EQ(lull_stream_open(loop, &b.s, dup(master), &raw), 0);
    watch(&a);
    watch(&b);
    CHECK(nonblocking(master));
    lull_endpoint_close(&a.s.ep, 0);
    CHECK(nonblocking(master)); /* b still reads it */
    run_until_at_least(loop, &a.closes, 1, 10);
    exchange(loop, &b, slave, slave);
    for (int i = 0; i < 10; i++) /* nothing to read: must not block */
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    lull_endpoint_close(&b.s.ep, 0);
    CHECK(!nonblocking(master));
    run_until_at_least(loop, &b.closes, 1, 10);
    close(slave);
    close(master);
    end_free(&a);
    end_free(&b);
    free_loop(loop);
}

/* After fork(), the child's copy of a stream shares the parent's
 * description: the child closing its copy leaves the flag alone (the
 * parent's stream still needs it); the parent's close gives it back. */
TEST(a_forked_child_leaves_the_parents_flag) {
    int slave;
    int master = open_master(&slave);
    if (master < 0) return;
    lull_loop *loop = new_loop();
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    end e = {0};
    CHECK_EQ(lull_stream_open(loop, &e.s, dup(master), &raw), 0);
    watch(&e);
    CHECK(nonblocking(master));
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int ok = lull_loop_fork(loop) == 0;
        lull_endpoint_close(&e.s.ep, 0);
        for (int i = 0; i < 10 && !e.closes; i++)
            lull_loop_run(loop, LULL_RUN_NOWAIT);
        ok = ok && e.closes == 1 && nonblocking(master);
        _exit(ok ? 0 : 1);
    }
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(nonblocking(master));
    exchange(loop, &e, slave, slave);
    lull_endpoint_close(&e.s.ep, 0);
    CHECK(!nonblocking(master));
    run_until_at_least(loop, &e.closes, 1, 10);
    close(slave);
    close(master);
    end_free(&e);
    free_loop(loop);
}

/* The fd closed under the stream (a misuse) and its number reused by a
 * non-blocking pipe: the stream's close must not take the flag from a
 * description that is not its own. */
TEST(fd_closed_early_and_reused_keeps_its_flag) {
    int slave;
    int master = open_master(&slave);
    if (master < 0) return;
    lull_loop *loop = new_loop();
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    end e = {0};
    int fd = dup(master);
    CHECK_EQ(lull_stream_open(loop, &e.s, fd, &raw), 0);
    watch(&e);
    CHECK(nonblocking(master));
    CHECK_EQ(lull_stream_read_stop(&e.s), 0); /* no watcher on the fd */
    int p[2];
    CHECK_EQ(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
    close(fd);
    CHECK_EQ(dup2(p[0], fd), fd);    /* the number, now a pipe's */
    lull_endpoint_close(&e.s.ep, 0); /* closes fd: the pipe's dup */
    run_until_at_least(loop, &e.closes, 1, 10);
    CHECK(nonblocking(p[0]));
    /* The stream's own description is left as lull set it: it had no fd
     * left to give it back through. */
    CHECK(nonblocking(master));
    close(p[0]);
    close(p[1]);
    close(slave);
    close(master);
    end_free(&e);
    free_loop(loop);
}

/* A producer that saw the queue full and stopped reading to wait for the
 * drain (lull-kv's backpressure), then the peer goes away: the write
 * fails, and the drain owed still comes, so the producer hears of it (its
 * next send is -EPIPE) and can read on to the close, instead of waiting
 * for a drain that would never come. */
TEST(drain_owed_is_paid_after_a_failed_write) {
    lull_loop *loop = new_loop();
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    end e = {0};
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    CHECK_EQ(lull_stream_open(loop, &e.s, sv[0], &raw), 0);
    watch(&e);
    send_big(&e); /* past high_water: the user sees it full */
    CHECK(!lull_endpoint_writable(&e.s.ep));
    CHECK_EQ(lull_stream_read_stop(&e.s), 0);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(e.drains, 0); /* the peer reads nothing: still full */
    close(sv[1]);
    run_until_at_least(loop, &e.drains, 1, 1000);
    CHECK_EQ(e.drains, 1);
    CHECK_EQ(e.closes, 0); /* reading was stopped: the close waits for it */
    CHECK_EQ(lull_endpoint_send_copy(&e.s.ep, "late", 4), -EPIPE);
    CHECK_EQ(lull_stream_read_start(&e.s), 0);
    run_until_at_least(loop, &e.closes, 1, 1000);
    CHECK_EQ(e.reason, -EPIPE);
    CHECK_EQ(e.drains, 1);
    end_free(&e);
    free_loop(loop);
}

#ifdef CHECK_SANDBOX_ARCH
/* In a child: preadv2 and pwritev2 refused (err), as a seccomp profile
 * that predates them refuses what it does not know (systemd's
 * SystemCallFilter=, older container runtimes). A pipe stream on a kernel
 * whose pipes take RWF_NOWAIT falls back to read, write and O_NONBLOCK,
 * as on an older kernel: frames go both ways and EOF closes with 0, where
 * the first read or write used to close the stream with the filter's
 * errno. */
static void pipes_without_rwf_nowait(void *arg) {
    check_deny_syscalls((const int[]){SYS_preadv2, SYS_pwritev2}, 2,
                        (int)(intptr_t)arg);
    lull_loop *loop = new_loop();
    end a, b;
    two_pipe_streams(loop, &a, &b);
    ping_pong(loop, &a, &b);
    CHECK_EQ(a.closes + b.closes, 0);
    CHECK_EQ(lull_stream_shutdown(&a.s), 0);
    CHECK_EQ(lull_stream_shutdown(&b.s), 0);
    run_until_at_least(loop, &a.closes, 1, 100);
    run_until_at_least(loop, &b.closes, 1, 100);
    CHECK_EQ(a.reason, 0);
    CHECK_EQ(b.reason, 0);
    end_free(&a);
    end_free(&b);
    free_loop(loop);
}
#endif

TEST(pipes_work_where_a_sandbox_refuses_rwf_nowait) {
#ifdef CHECK_SANDBOX_ARCH
    CHECK(check_exits_cleanly(pipes_without_rwf_nowait,
                              (void *)(intptr_t)ENOSYS));
    CHECK(
        check_exits_cleanly(pipes_without_rwf_nowait, (void *)(intptr_t)EPERM));
#else
    printf("no seccomp filter here: skipped\n");
#endif
}
