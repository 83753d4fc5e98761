/* fork() (GUIDE.md): after lull_loop_fork in the child, parent and
 * child each have their own kernel state. Both run at the same time, each
 * gets its own fd readiness, and the parent's watcher keeps working after
 * the child has stopped its inherited watchers and freed its loop (with one
 * epoll set shared by both, the child's stop removed the parent's
 * registration). Cross-thread posts wake each process's own loop. Real
 * processes, pipes between them; every wait in the parent is bounded by a
 * timer that fails the case. */
#include "check.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lull.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define GUARD_NS (10 * 1000000000ull) /* no single wait takes this long */

typedef struct watched {
    lull_io io;
    int fds[2];
    int calls;
} watched;

static void on_readable(lull_io *io, int events) {
    watched *w = LULL_CONTAINER_OF(io, watched, io);
    CHECK(events & LULL_READABLE);
    char byte;
    CHECK_EQ(read(w->fds[0], &byte, 1), 1);
    w->calls++;
    lull_loop_stop(io->loop);
}

static void never_called(lull_io *io, int events) {
    (void)io;
    (void)events;
    check_fail(__FILE__, __LINE__, "a watcher of the other process ran");
}

static void guard_fired(lull_timer *t) {
    (void)t;
    check_fail(__FILE__, __LINE__, "pid %d: no readiness in 10 s",
               (int)getpid());
}

static void open_watched(lull_loop *loop, watched *w, lull_io_fn fn) {
    *w = (watched){0};
    CHECK_EQ(pipe(w->fds), 0);
    CHECK_EQ(lull_io_init(loop, &w->io, w->fds[0], fn), 0);
}

static void put_byte(int fd) {
    CHECK_EQ(write(fd, "x", 1), 1);
}

static void take_byte(int fd) {
    char byte;
    CHECK_EQ(read(fd, &byte, 1), 1);
}

/* Runs until a watcher's callback stops the loop, or fails after 10 s. */
static void run_until_called(lull_loop *loop, watched *w) {
    int before = w->calls;
    lull_timer guard;
    lull_timer_init(loop, &guard, guard_fired);
    lull_timer_start(&guard, GUARD_NS, 0);
    while (w->calls == before)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    lull_timer_stop(&guard);
}

/* Waits for the child pid to end; returns its wait status. */
static int wait_for_child(pid_t pid) {
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    return status;
}

TEST(fork_parent_and_child_each_get_their_own_readiness) {
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    watched a, b; /* a: started before the fork; b: the child's own */
    open_watched(loop, &a, on_readable);
    open_watched(loop, &b, never_called);
    CHECK_EQ(lull_io_start(&a.io, LULL_READABLE), 0);
    int to_parent[2], to_child[2];
    CHECK_EQ(pipe(to_parent), 0);
    CHECK_EQ(pipe(to_child), 0);
    fflush(NULL);

    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK_EQ(lull_loop_fork(loop), 0);
        /* The inherited watcher was registered again in the child's set:
         * readiness of a's pipe reaches the child's loop. */
        put_byte(a.fds[1]);
        run_until_called(loop, &a);
        /* Stopped in the child only; the child watches b instead. */
        lull_io_stop(&a.io);
        CHECK_EQ(lull_io_init(loop, &b.io, b.fds[0], on_readable), 0);
        CHECK_EQ(lull_io_start(&b.io, LULL_READABLE), 0);
        put_byte(to_parent[1]); /* "a is mine no more; b is watched" */
        take_byte(to_child[0]); /* the parent has had its readiness */
        put_byte(b.fds[1]);
        run_until_called(loop, &b);
        CHECK_EQ(b.calls, 1);
        lull_io_stop(&b.io);
        CHECK_EQ(lull_loop_free(loop), 0);
        _exit(0);
    }

    /* Parent: while the child runs its loop and watches b (whose byte is
     * written to a pipe the parent does not watch), a's readiness reaches
     * the parent alone. */
    take_byte(to_parent[0]);
    put_byte(a.fds[1]);
    run_until_called(loop, &a);
    CHECK_EQ(a.calls, 1);
    put_byte(to_child[1]);
    int status = wait_for_child(pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* The child stopped a and freed its loop: the parent's a still works. */
    put_byte(a.fds[1]);
    run_until_called(loop, &a);
    CHECK_EQ(a.calls, 2);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.wakeups_io, m.wakeups); /* only a woke it, twice */
    CHECK_U64_EQ(m.wakeups, 2);
    lull_io_stop(&a.io);
    CHECK_EQ(lull_loop_free(loop), 0);
    for (int i = 0; i < 2; i++) {
        close(a.fds[i]);
        close(b.fds[i]);
        close(to_parent[i]);
        close(to_child[i]);
    }
}

/* ------------------------------------------------- timers and signals */

static int timer_fires, signal_calls;

static void count_fire(lull_timer *t) {
    (void)t;
    timer_fires++;
}

static void count_signal(lull_signal *sig, int signum) {
    (void)sig;
    CHECK_EQ(signum, SIGUSR1);
    signal_calls++;
}

/* A timer armed and a signal watched before the fork: each process has
 * its own copy of the timer, which fires in each, and a signal sent to the
 * child reaches the child's watcher alone. */
TEST(fork_timer_and_signal_are_each_process_own) {
    CHECK_EQ(lull_signal_block(SIGUSR1), 0);
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    lull_timer t;
    lull_signal sig;
    CHECK_EQ(lull_timer_init(loop, &t, count_fire), 0);
    CHECK_EQ(lull_signal_init(loop, &sig, count_signal), 0);
    CHECK_EQ(lull_signal_start(&sig, SIGUSR1), 0);
    lull_timer_start(&t, LULL_MS(20), 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK_EQ(lull_loop_fork(loop), 0);
        CHECK_EQ(kill(getpid(), SIGUSR1), 0);
        lull_timer guard;
        lull_timer_init(loop, &guard, guard_fired);
        lull_timer_start(&guard, GUARD_NS, 0);
        while (timer_fires == 0 || signal_calls == 0)
            CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
        lull_timer_stop(&guard);
        CHECK_EQ(lull_signal_stop(&sig), 0);
        CHECK_EQ(lull_loop_free(loop), 0);
        _exit(timer_fires == 1 && signal_calls == 1 ? 0 : 1);
    }
    int status = wait_for_child(pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* The parent's timer is its own: it still fires, once, and the
     * child's signal never reached the parent. */
    CHECK_EQ(lull_signal_stop(&sig), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(timer_fires, 1);
    CHECK_EQ(signal_calls, 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ------------------------------------------------------- cross-thread */

typedef struct remote_case {
    lull_loop *loop;
    lull_task task;
    int runs;
} remote_case;

static void on_post(lull_task *t) {
    remote_case *rc = LULL_CONTAINER_OF(t, remote_case, task);
    rc->runs++;
    lull_loop_unref(rc->loop);
}

static void *post_from_thread(void *arg) {
    remote_case *rc = arg;
    lull_task_post_remote(rc->loop, &rc->task);
    return NULL;
}

/* A thread of this process posts; the loop (sleeping in epoll, since it
 * watches an fd) is woken through its own eventfd. */
static void post_and_run(remote_case *rc) {
    int runs = rc->runs;
    lull_loop_ref(rc->loop);
    lull_timer guard;
    lull_timer_init(rc->loop, &guard, guard_fired);
    lull_timer_start(&guard, GUARD_NS, 0);
    lull_timer_unref(&guard);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, post_from_thread, rc), 0);
    CHECK_EQ(lull_loop_run(rc->loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    lull_timer_stop(&guard);
    CHECK_EQ(rc->runs, runs + 1);
}

static void check_no_remote_wakeup(lull_loop *loop) {
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.wakeups_remote, 0);
    CHECK_U64_EQ(m.wakeups, 1); /* the control pipe's byte */
}

/* A post made before the fork and not yet taken runs in both processes
 * (the child is a copy of the loop, posts included). Afterwards each
 * process's posts wake its own loop and never the other's: each sleeps in
 * epoll (it watches an fd) while the other posts, and must see no remote
 * wakeup. */
TEST_THREADED(fork_remote_posts_wake_each_process_own_loop) {
    remote_case rc = {0};
    CHECK_EQ(lull_loop_new(&rc.loop, NULL), 0);
    lull_task_init(&rc.task, on_post);
    watched idle, ctl;
    open_watched(rc.loop, &idle, never_called);
    CHECK_EQ(lull_io_start(&idle.io, LULL_READABLE), 0);
    lull_io_unref(&idle.io);
    open_watched(rc.loop, &ctl, on_readable); /* parent -> child */
    int to_parent[2], to_child[2];
    CHECK_EQ(pipe(to_parent), 0);
    CHECK_EQ(pipe(to_child), 0);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, post_from_thread, &rc), 0);
    CHECK_EQ(pthread_join(th, NULL), 0); /* queued, not taken */
    lull_loop_ref(rc.loop);              /* dropped by on_post */
    fflush(NULL);

    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK_EQ(lull_loop_fork(rc.loop), 0);
        CHECK_EQ(lull_loop_settle(rc.loop), 1); /* the pre-fork post */
        CHECK_EQ(rc.runs, 1);
        CHECK_EQ(lull_io_start(&ctl.io, LULL_READABLE), 0);
        lull_loop_metrics_reset(rc.loop);
        put_byte(to_parent[1]); /* the parent posts now */
        run_until_called(rc.loop, &ctl);
        check_no_remote_wakeup(rc.loop);
        lull_io_stop(&ctl.io);
        take_byte(to_child[0]); /* the parent sleeps now */
        for (int i = 0; i < 3; i++)
            post_and_run(&rc);
        lull_io_stop(&idle.io);
        CHECK_EQ(lull_loop_free(rc.loop), 0);
        put_byte(to_parent[1]); /* done */
        _exit(0);
    }
    CHECK_EQ(lull_loop_settle(rc.loop), 1); /* the pre-fork post, here too */
    CHECK_EQ(rc.runs, 1);
    take_byte(to_parent[0]);
    for (int i = 0; i < 3; i++)
        post_and_run(&rc);
    put_byte(ctl.fds[1]); /* the child checks its wakeups */
    /* Now the parent sleeps while the child posts, until it is done. */
    watched done = {.fds = {to_parent[0], to_parent[1]}}; /* child -> */
    CHECK_EQ(lull_io_init(rc.loop, &done.io, to_parent[0], on_readable), 0);
    CHECK_EQ(lull_io_start(&done.io, LULL_READABLE), 0);
    lull_loop_metrics_reset(rc.loop);
    put_byte(to_child[1]);
    run_until_called(rc.loop, &done);
    check_no_remote_wakeup(rc.loop);
    lull_io_stop(&done.io);
    int status = wait_for_child(pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* The child closed its copies and freed its loop: no matter here. */
    post_and_run(&rc);
    lull_io_stop(&idle.io);
    CHECK_EQ(lull_loop_free(rc.loop), 0);
    for (int i = 0; i < 2; i++) {
        close(idle.fds[i]);
        close(ctl.fds[i]);
        close(to_parent[i]);
        close(to_child[i]);
    }
}

/* A child that skips lull_loop_fork shares the parent's epoll set: its
 * lull_io_stop removes the parent's registration, and the parent's
 * watcher goes deaf. Debug builds stop such a child at its first call that
 * would touch the kernel state (a watcher's start or stop, a run), before
 * it does; the parent's watcher then still hears its fd. (Release builds
 * check nothing: the child would do the damage.) */
static void stop_without_lull_loop_fork(void *arg) {
    watched *w = arg;
    lull_io_stop(&w->io);
}

static void run_without_lull_loop_fork(void *arg) {
    (void)lull_loop_run(arg, LULL_RUN_NOWAIT);
}

TEST(child_that_skips_lull_loop_fork_asserts_in_debug_builds) {
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    watched w;
    open_watched(loop, &w, on_readable);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    if (check_debug_build()) {
        static const char msg[] =
            "lull: a forked child used the loop before lull_loop_fork";
        CHECK(check_dies(stop_without_lull_loop_fork, &w, msg));
        CHECK(check_dies(run_without_lull_loop_fork, loop, msg));
        put_byte(w.fds[1]);
        run_until_called(loop, &w);
        CHECK_EQ(w.calls, 1);
    } else {
        fprintf(stderr, "release build: no fork asserts to check\n");
    }
    lull_io_stop(&w.io);
    CHECK_EQ(lull_loop_free(loop), 0);
    close(w.fds[0]);
    close(w.fds[1]);
}

/* A child that closes the streams it inherited (what a child does with
 * handles it will not use) writes nothing on them: a frame the parent
 * queued before the fork is the parent's to write, and a close's last
 * write in the copy would send it twice (or, cut mid-frame, garble the
 * framing for the peer). The peer gets it once, from the parent. */
static int fork_frames;
static void fork_count_frame(lull_endpoint *ep, const void *b, size_t n) {
    (void)ep, (void)b, (void)n;
    fork_frames++;
}

static void fork_ignore_close(lull_endpoint *ep, int reason) {
    (void)ep, (void)reason;
}

/* A loop and a connected Unix stream pair on it (options o): a sends and
 * ignores its close, b reads with on_frame and on_close. */
static lull_loop *loop_with_stream_pair(lull_stream *a, lull_stream *b,
                                        const lull_stream_options *o,
                                        lull_frame_fn on_frame,
                                        lull_close_fn on_close) {
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    CHECK_EQ(lull_stream_open(loop, a, sv[0], o), 0);
    CHECK_EQ(lull_stream_open(loop, b, sv[1], o), 0);
    lull_endpoint_set_callbacks(&a->ep, NULL, NULL, fork_ignore_close);
    lull_endpoint_set_callbacks(&b->ep, on_frame, NULL, on_close);
    return loop;
}

/* Closes both streams of the pair, runs the loop out and frees it. */
static void close_pair_and_free(lull_loop *loop, lull_stream *a,
                                lull_stream *b) {
    CHECK_EQ(lull_endpoint_close(&a->ep, 0), 0);
    CHECK_EQ(lull_endpoint_close(&b->ep, 0), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(fork_child_closing_inherited_streams_writes_nothing) {
    fork_frames = 0;
    lull_stream a, b;
    lull_loop *loop = loop_with_stream_pair(&a, &b, NULL, fork_count_frame,
                                            fork_ignore_close);
    CHECK_EQ(lull_endpoint_send_copy(&a.ep, "once", 4), 0); /* queued */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (lull_loop_fork(loop) != 0) _exit(2);
        lull_endpoint_close(&a.ep, 0);
        lull_endpoint_close(&b.ep, 0);
        lull_loop_run(loop, LULL_RUN_DEFAULT);
        _exit(lull_loop_free(loop) == 0 ? 0 : 3);
    }
    int status = wait_for_child(pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(fork_frames, 1);
    close_pair_and_free(loop, &a, &b);
}

/* The same when the child runs its loop first (the flush the parent
 * queued before the fork is in the child's copy too) and sends a frame of
 * its own: the parent's frame reaches the peer once, the child's once. */
TEST(fork_child_running_its_loop_writes_only_its_own_frames) {
    lull_stream a, b;
    lull_loop *loop = loop_with_stream_pair(&a, &b, NULL, fork_count_frame,
                                            fork_ignore_close);
    fork_frames = 0;
    CHECK_EQ(lull_endpoint_send_copy(&a.ep, "parent", 6), 0); /* queued */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (lull_loop_fork(loop) != 0) _exit(2);
        lull_stream_read_stop(&b); /* the parent reads */
        for (int i = 0; i < 5; i++)
            lull_loop_run(loop, LULL_RUN_NOWAIT);
        if (lull_endpoint_send_copy(&a.ep, "child", 5) != 0) _exit(4);
        for (int i = 0; i < 5; i++)
            lull_loop_run(loop, LULL_RUN_NOWAIT);
        lull_endpoint_close(&a.ep, 0);
        lull_endpoint_close(&b.ep, 0);
        lull_loop_run(loop, LULL_RUN_DEFAULT);
        _exit(lull_loop_free(loop) == 0 ? 0 : 3);
    }
    int status = wait_for_child(pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(fork_frames, 2); /* "parent" once, "child" once */
    close_pair_and_free(loop, &a, &b);
}

/* A shutdown the parent asked for before the fork, behind a queued
 * frame: the child running its loop neither writes the frame nor shuts
 * the shared socket down ahead of it, so the peer reads the frame, then
 * the EOF (the parent's shutdown, once its queue is written). */
static int fork_closes, fork_reason;
static void fork_note_close(lull_endpoint *ep, int reason) {
    (void)ep;
    fork_closes++;
    fork_reason = reason;
}

TEST(fork_child_leaves_the_parents_shutdown_to_the_parent) {
    lull_stream a, b;
    lull_loop *loop =
        loop_with_stream_pair(&a, &b, NULL, fork_count_frame, fork_note_close);
    fork_frames = fork_closes = 0;
    CHECK_EQ(lull_endpoint_send_copy(&a.ep, "last", 4), 0);
    CHECK_EQ(lull_stream_shutdown(&a), 0); /* after the queue */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (lull_loop_fork(loop) != 0) _exit(2);
        lull_stream_read_stop(&b); /* the parent reads */
        for (int i = 0; i < 5; i++)
            lull_loop_run(loop, LULL_RUN_NOWAIT);
        _exit(0); /* its copies go with it */
    }
    int status = wait_for_child(pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    for (int i = 0; i < 10 && !fork_closes; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(fork_frames, 1);
    CHECK_EQ(fork_closes, 1);
    CHECK_EQ(fork_reason, 0); /* the EOF after the frame */
    CHECK_EQ(lull_endpoint_close(&a.ep, 0), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A child's first send on an inherited stream may carry fds: the frames
 * it drops are the parent's, and its own frame keeps its fds. */
static int fork_fds_seen = -1;
static void fork_take_frame(lull_endpoint *ep, const void *b, size_t n) {
    lull_stream *s = LULL_CONTAINER_OF(ep, lull_stream, ep);
    int fds[4];
    fork_fds_seen = lull_stream_take_fds(s, fds, 4);
    for (int i = 0; i < fork_fds_seen; i++)
        close(fds[i]);
    fork_count_frame(ep, b, n);
}

TEST(fork_child_sends_fds_on_an_inherited_stream) {
    lull_stream_options o = {.flags = LULL_STREAM_FDS};
    lull_stream a, b;
    lull_loop *loop =
        loop_with_stream_pair(&a, &b, &o, fork_take_frame, fork_ignore_close);
    fork_frames = 0;
    CHECK_EQ(lull_endpoint_send_copy(&a.ep, "parent", 6), 0); /* queued */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) { /* the parent leaves the streams to the child */
        if (lull_loop_fork(loop) != 0) _exit(2);
        lull_frame f = {.bytes = "child", .len = 5};
        int one = 0; /* stdin: any open fd */
        if (lull_stream_send_fds(&a, &f, &one, 1) != 0) _exit(3);
        for (int i = 0; i < 10 && fork_frames == 0; i++)
            lull_loop_run(loop, LULL_RUN_NOWAIT);
        _exit(fork_frames == 1 && fork_fds_seen == 1 ? 0 : 4);
    }
    int status = wait_for_child(pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    close_pair_and_free(loop, &a, &b);
}

/* A shutdown the child asks for itself on an inherited stream is the
 * child's: done at once (the parent's queued frame is not its to write),
 * and the peer reads the EOF. */
TEST(fork_child_shuts_down_an_inherited_stream) {
    lull_stream a, b;
    lull_loop *loop =
        loop_with_stream_pair(&a, &b, NULL, fork_count_frame, fork_note_close);
    fork_frames = fork_closes = 0;
    fork_reason = 1;
    CHECK_EQ(lull_endpoint_send_copy(&a.ep, "parent", 6), 0); /* queued */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) { /* the parent leaves the streams to the child */
        if (lull_loop_fork(loop) != 0) _exit(2);
        if (lull_stream_shutdown(&a) != 0) _exit(3);
        for (int i = 0; i < 10 && !fork_closes; i++)
            lull_loop_run(loop, LULL_RUN_NOWAIT);
        _exit(fork_closes == 1 && fork_reason == 0 && fork_frames == 0 ? 0 : 4);
    }
    int status = wait_for_child(pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    close_pair_and_free(loop, &a, &b);
}

/* The peer's EOF read in a child before its first flush, with a frame the
 * parent queued before the fork: the child's read_eof takes the queue for
 * one to write before the end (as for any EOF with writes queued), then
 * its first flush finds the queue the parent's and drops it. Both ways are
 * done in the copy then, and it closes with 0 (no on_end): it used to be
 * left open for good, unwatched, its close callback never run, the loop
 * refusing lull_loop_free. The parent writes its frame, once, then ends. */
TEST(fork_child_reading_the_peers_eof_with_the_parents_queue_closes) {
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    lull_stream a;
    CHECK_EQ(lull_stream_open(loop, &a, sv[0], NULL), 0);
    lull_endpoint_set_callbacks(&a.ep, NULL, NULL, fork_note_close);
    fork_closes = 0;
    fork_reason = 1;
    CHECK_EQ(lull_endpoint_send_copy(&a.ep, "parent", 6), 0); /* queued */
    CHECK_EQ(shutdown(sv[1], SHUT_WR), 0);                    /* a reads EOF */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (lull_loop_fork(loop) != 0) _exit(2);
        for (int i = 0; i < 10 && !fork_closes; i++)
            lull_loop_run(loop, LULL_RUN_NOWAIT);
        if (fork_closes != 1 || fork_reason != 0) _exit(3);
        _exit(lull_loop_free(loop) == 0 ? 0 : 4);
    }
    int status = wait_for_child(pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    for (int i = 0; i < 10 && !fork_closes; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(fork_closes, 1);
    CHECK_EQ(fork_reason, 0);
    char buf[32];
    CHECK_EQ(recv(sv[1], buf, sizeof buf, MSG_DONTWAIT), 10); /* once */
    CHECK_EQ(memcmp(buf + 4, "parent", 6), 0);
    CHECK_EQ(recv(sv[1], buf, sizeof buf, MSG_DONTWAIT), 0); /* then EOF */
    close(sv[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The same with the parent's queue stuck behind a full socket (the peer
 * reads nothing more): the child has nothing of its own to write, so the
 * peer's EOF closes its copy at once; it used to wait for writability to
 * drop the parent's queue, for as long as the peer did not read. */
TEST(fork_child_reading_the_peers_eof_behind_a_full_socket_closes) {
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    lull_stream a;
    CHECK_EQ(lull_stream_open(loop, &a, sv[0], NULL), 0);
    lull_endpoint_set_callbacks(&a.ep, NULL, NULL, fork_note_close);
    fork_closes = 0;
    fork_reason = 1;
    static char big[1 << 20];
    CHECK_EQ(lull_endpoint_send_copy(&a.ep, big, sizeof big), 0);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK(a.ep.queued > 0);                /* stuck: the socket is full */
    CHECK_EQ(shutdown(sv[1], SHUT_WR), 0); /* a reads EOF */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (lull_loop_fork(loop) != 0) _exit(2);
        for (int i = 0; i < 10 && !fork_closes; i++)
            lull_loop_run(loop, LULL_RUN_NOWAIT);
        if (fork_closes != 1 || fork_reason != 0) _exit(3);
        _exit(lull_loop_free(loop) == 0 ? 0 : 4);
    }
    int status = wait_for_child(pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    CHECK_EQ(fork_closes, 0); /* the parent still writes its queue */
    close(sv[1]);
    for (int i = 0; i < 100 && !fork_closes; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(fork_closes, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

static void count_readable(lull_io *io, int events) {
    watched *w = LULL_CONTAINER_OF(io, watched, io);
    CHECK(events & LULL_READABLE);
    take_byte(w->fds[0]);
    w->calls++;
}

/* lull_loop_fork called where no fork happened (in the parent too, say,
 * after a fork that both sides follow with the same code) is refused: it
 * used to close the host's fd (lull_loop_backend_fd, which a host has in
 * its own poll set) and the wake-up eventfd other threads post through,
 * and to forget the posters still inside lull_task_post_remote. The loop
 * goes on as before. */
TEST(fork_call_without_a_fork_is_einval) {
    lull_loop *loop;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    int host = lull_loop_backend_fd(loop);
    CHECK(host >= 0);
    watched w;
    open_watched(loop, &w, count_readable);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    CHECK_EQ(lull_loop_fork(loop), -EINVAL);
    CHECK_EQ(lull_loop_backend_fd(loop), host);
    put_byte(w.fds[1]);
    struct pollfd p = {.fd = host, .events = POLLIN};
    CHECK_EQ(poll(&p, 1, 10000), 1);
    CHECK_EQ(p.revents, POLLIN); /* not POLLNVAL: still open, still lull's */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 1);
    /* A child's first call still works; its second, where no fork came
     * between, is refused as well. */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (lull_loop_fork(loop) != 0) _exit(2);
        if (lull_loop_fork(loop) != -EINVAL) _exit(3);
        _exit(0);
    }
    int status = wait_for_child(pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    lull_io_stop(&w.io);
    close(w.fds[0]);
    close(w.fds[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A host that embeds lull (lull_loop_backend_fd) asked
 * lull_loop_backend_timeout before the fork and waits after it, in the
 * child, on the child's new fd, with the timeout it was given (-1: only
 * the fd can bring work). Until the next run, a remote post must make the
 * fd readable: lull_loop_fork is no run. Two ways the child's host slept
 * through a post: one made in the child after lull_loop_fork (the fork had
 * reset the wait's announcement, so the poster wrote no eventfd), and one
 * made before the fork, which wrote the parent's eventfd (its edge stays
 * in the parent's set) and which the child's new fd never showed. */
typedef struct host_case {
    lull_loop *loop;
    lull_task task;
    int runs;
} host_case;

static void host_case_ran(lull_task *t) {
    LULL_CONTAINER_OF(t, host_case, task)->runs++;
}

static void *host_case_post(void *arg) {
    host_case *hc = arg;
    lull_task_post_remote(hc->loop, &hc->task);
    return NULL;
}

static void host_waits_across_a_fork(bool post_before_fork) {
    host_case hc = {0};
    CHECK_EQ(lull_loop_new(&hc.loop, NULL), 0);
    CHECK(lull_loop_backend_fd(hc.loop) >= 0);
    lull_task_init(&hc.task, host_case_ran);
    int64_t timeout;
    CHECK_EQ(lull_loop_backend_timeout(hc.loop, &timeout), 0);
    CHECK_EQ(timeout, -1); /* the host would wait for the fd alone */
    pthread_t th;
    if (post_before_fork) {
        CHECK_EQ(pthread_create(&th, NULL, host_case_post, &hc), 0);
        CHECK_EQ(pthread_join(th, NULL), 0);
    }
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK_EQ(lull_loop_fork(hc.loop), 0);
        int fd = lull_loop_backend_fd(hc.loop); /* a new one: re-watched */
        CHECK(fd >= 0);
        if (!post_before_fork) {
            CHECK_EQ(pthread_create(&th, NULL, host_case_post, &hc), 0);
            CHECK_EQ(pthread_join(th, NULL), 0);
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        CHECK_EQ(poll(&p, 1, 10000), 1); /* the post, not the 10 s limit */
        CHECK_EQ(lull_loop_run(hc.loop, LULL_RUN_NOWAIT), 0);
        CHECK_EQ(hc.runs, 1);
        CHECK_EQ(lull_loop_free(hc.loop), 0);
        _exit(0);
    }
    int status = wait_for_child(pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    /* The parent's own copy of a pre-fork post runs here. */
    CHECK_EQ(lull_loop_run(hc.loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(hc.runs, post_before_fork ? 1 : 0);
    CHECK_EQ(lull_loop_free(hc.loop), 0);
}

TEST_THREADED(fork_child_host_waiting_hears_a_post_made_after_the_fork) {
    host_waits_across_a_fork(false);
}

TEST_THREADED(fork_child_host_waiting_hears_a_post_made_before_the_fork) {
    host_waits_across_a_fork(true);
}

/* ------------------------------------------- nothing of lull's crosses exec */

/* Every fd lull opens is close-on-exec, whoever execs: a program that
 * runs fork() and exec (system(), posix_spawn, another library's spawn)
 * while lull's handles are open must not hand its child the loop's epoll
 * set, eventfds, signalfd, inotify fd, sockets or pipes (a child holding
 * a listening socket keeps the port bound after the parent closes it; one
 * holding a pipe's write end keeps the reader from ever seeing EOF). One
 * handle of each kind is opened, the fds that appeared since are listed,
 * each must carry FD_CLOEXEC, and a child forked and exec'd (/bin/sh,
 * blocked reading a pipe) must hold none of them. lull_process's own
 * children are covered in test_process: its spawn closes every fd. */

#define FD_SET_MAX 1024

typedef struct fd_list {
    int n;
    int fd[FD_SET_MAX];
} fd_list;

static void list_fds(fd_list *out) {
    out->n = 0;
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        int fd = atoi(e->d_name);
        if (fd == dirfd(d)) continue;
        CHECK(out->n < FD_SET_MAX);
        out->fd[out->n++] = fd;
    }
    closedir(d);
}

static bool in_list(const fd_list *l, int fd) {
    for (int i = 0; i < l->n; i++)
        if (l->fd[i] == fd) return true;
    return false;
}

/* What /proc/<pid>/fd/<fd> names ("socket:[123]", "anon_inode:[eventfd]",
 * a path), or "" when the fd is not open there. */
static void fd_target(pid_t pid, int fd, char *buf, size_t len) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, fd);
    ssize_t n = readlink(path, buf, len - 1);
    buf[n < 0 ? 0 : n] = '\0';
}

typedef struct every_kind {
    lull_loop *loop;
    lull_server srv, usrv;
    lull_stream client, accepted[2], piped, dialed;
    int accepts;
    int connects;
    int dial_status;
    bool dial_done;
    lull_dial dial;
    lull_udp udp;
    lull_signal sig;
    lull_fsevent watch;
    lull_process proc;
    int exits;
    lull_pool *pool;
    lull_fs open_req;
    int64_t opened;
    bool open_done;
    lull_percore *pc;
    char dir[64];
    char sock[96];
} every_kind;

static every_kind g_ek;

/* Both connections (the client's, the dial's) are taken: one left would
 * be closed when this returns, and its end would see EOF and close, an fd
 * fewer, whenever its read came before the count. */
static void ek_accept(lull_server *srv) {
    (void)srv;
    if (g_ek.accepts < 2)
        CHECK_EQ(
            lull_server_accept(&g_ek.srv, &g_ek.accepted[g_ek.accepts], NULL),
            0);
    g_ek.accepts++;
}

static void ek_uaccept(lull_server *srv) {
    (void)srv;
    check_fail(__FILE__, __LINE__, "nobody connects to the unix server");
}

static void ek_connected(lull_stream *s, int status) {
    (void)s;
    CHECK_EQ(status, 0);
    g_ek.connects++;
}

static void ek_dialed(lull_dial *d, int status) {
    (void)d;
    g_ek.dial_status = status;
    g_ek.dial_done = true;
}

static void ek_exit(lull_process *p, int status, int sig) {
    (void)p;
    (void)status;
    (void)sig;
    g_ek.exits++;
}

static void ek_signal(lull_signal *s, int signum) {
    (void)s;
    (void)signum;
}

static void ek_fsevent(lull_fsevent *w, unsigned events, const char *name,
                       const char *other) {
    (void)w;
    (void)events;
    (void)name;
    (void)other;
}

static void ek_opened(lull_fs *req, int64_t result) {
    (void)req;
    g_ek.opened = result;
    g_ek.open_done = true;
}

static void ek_udp_closed(lull_udp *udp) {
    (void)udp;
}

static void ek_guard(lull_timer *t) {
    (void)t;
    check_fail(__FILE__, __LINE__, "the handles did not open in 10 s");
}

static void open_every_kind(every_kind *ek) {
    lull_loop *loop = ek->loop;
    CHECK(lull_loop_backend_fd(loop) >= 0); /* the host's epoll set */
    CHECK_EQ(lull_server_listen_tcp(loop, &ek->srv, NULL, 0, 0, ek_accept), 0);
    int port = lull_server_port(&ek->srv);
    CHECK(port > 0);
    snprintf(ek->sock, sizeof ek->sock, "@lull-fork-cloexec-%d", (int)getpid());
    CHECK_EQ(lull_server_listen_unix(loop, &ek->usrv, ek->sock, 0, ek_uaccept),
             0);
    CHECK_EQ(lull_stream_connect_tcp(loop, &ek->client, NULL, port, NULL,
                                     ek_connected),
             0);
    /* A dial to the same server, by address: its attempt's socket. */
    static struct sockaddr_in sin;
    sin = (struct sockaddr_in){.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    static struct addrinfo ai;
    ai = (struct addrinfo){.ai_family = AF_INET,
                           .ai_socktype = SOCK_STREAM,
                           .ai_addrlen = sizeof sin,
                           .ai_addr = (struct sockaddr *)&sin};
    CHECK_EQ(lull_dial_start_addrs(loop, &ek->dial, &ek->dialed, &ai, NULL,
                                   ek_dialed),
             0);
    CHECK_EQ(lull_udp_init(loop, &ek->udp, NULL), 0);
    CHECK_EQ(lull_udp_bind(&ek->udp, NULL, 0, 0), 0);
    CHECK_EQ(lull_signal_init(loop, &ek->sig, ek_signal), 0);
    CHECK_EQ(lull_signal_start(&ek->sig, SIGUSR2), 0);
    snprintf(ek->dir, sizeof ek->dir, "/tmp/lull-cloexec-XXXXXX");
    CHECK(mkdtemp(ek->dir) != NULL);
    CHECK_EQ(lull_fsevent_init(loop, &ek->watch), 0);
    CHECK_EQ(lull_fsevent_start(&ek->watch, ek->dir, ek_fsevent), 0);
    /* A child with a pipe for its stdout: the parent's end, the pidfd. */
    lull_process_options po = {
        .file = "/bin/sh",
        .argv = (char *[]){"sh", "-c", "read x", NULL},
    };
    po.stdio[0].kind = LULL_STDIO_PIPE;
    po.stdio[0].stream = &ek->piped;
    CHECK_EQ(lull_process_spawn(loop, &ek->proc, &po, ek_exit), 0);
    /* A pool, and a file it opened for the program. */
    CHECK_EQ(lull_pool_new(&ek->pool, NULL), 0);
    char file[96];
    snprintf(file, sizeof file, "%.*s/f", (int)sizeof ek->dir - 1, ek->dir);
    CHECK_EQ(lull_fs_open(loop, ek->pool, &ek->open_req, file, O_CREAT | O_RDWR,
                          0600, ek_opened),
             0);
    /* Loops on threads of their own. */
    lull_percore_options pco = {.loops = 2};
    CHECK_EQ(lull_percore_start(&ek->pc, &pco), 0);

    lull_timer guard;
    lull_timer_init(loop, &guard, ek_guard);
    lull_timer_start(&guard, GUARD_NS, 0);
    while (!ek->open_done || ek->accepts < 2 || ek->connects < 1 ||
           !ek->dial_done)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    lull_timer_stop(&guard);
    CHECK(ek->opened >= 0);
    CHECK_EQ(ek->dial_status, 0);
}

/* Whether this process is given pidfds (valgrind refuses pidfd_open). */
static bool pidfds_given(void) {
    int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (fd < 0) return false;
    close(fd);
    return true;
}

TEST(no_fd_of_lull_survives_an_exec) {
    if (access("/bin/sh", X_OK) != 0) {
        printf("skipped: no /bin/sh to exec\n");
        return;
    }
    fd_list before, after;
    list_fds(&before);
    every_kind *ek = &g_ek;
    CHECK_EQ(lull_loop_new(&ek->loop, NULL), 0);
    open_every_kind(ek);
    list_fds(&after);
    int fresh = 0;
    for (int i = 0; i < after.n; i++) {
        int fd = after.fd[i];
        if (in_list(&before, fd)) continue;
        fresh++;
        char what[128];
        fd_target(getpid(), fd, what, sizeof what);
        int fl = fcntl(fd, F_GETFD);
        if (fl < 0 || !(fl & FD_CLOEXEC))
            check_fail(__FILE__, __LINE__, "fd %d (%s) is not close-on-exec",
                       fd, what);
    }
    /* The loop's set and eventfd, the host's set, two servers, four TCP
     * ends, a UDP socket, a signalfd, an inotify fd, a pipe end and a
     * pidfd (where one is given: valgrind refuses pidfd_open, and the
     * process handle then waits without), an opened file, two loops' sets
     * and eventfds at least. */
    CHECK(fresh >= (pidfds_given() ? 19 : 18));

    /* fork and exec, as a program's own spawn would: the child waits on
     * its stdin until the parent has looked at its fds. exec has happened
     * once the report pipe's end (close-on-exec) is gone from the child. */
    int in[2], report[2];
    CHECK_EQ(pipe2(in, O_CLOEXEC), 0);
    CHECK_EQ(pipe2(report, O_CLOEXEC), 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (dup2(in[0], 0) < 0) _exit(126);
        execl("/bin/sh", "sh", "-c", "read x", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(report[1]);
    char byte;
    CHECK_EQ(read(report[0], &byte, 1), 0); /* EOF: the child has exec'd */
    close(report[0]);
    for (int i = 0; i < after.n; i++) {
        int fd = after.fd[i];
        if (in_list(&before, fd)) continue;
        char mine[128], theirs[128];
        fd_target(getpid(), fd, mine, sizeof mine);
        fd_target(pid, fd, theirs, sizeof theirs);
        if (strcmp(mine, theirs) == 0)
            check_fail(__FILE__, __LINE__, "fd %d (%s) reached an exec'd child",
                       fd, mine);
    }
    close(in[1]); /* the shell's read ends */
    int status = wait_for_child(pid);
    CHECK(WIFEXITED(status));

    /* Everything closed, the loop freed. */
    CHECK_EQ(lull_percore_stop(ek->pc), 0);
    close((int)ek->opened);
    CHECK_EQ(lull_pool_free(ek->pool), 0);
    CHECK_EQ(lull_endpoint_close(&ek->piped.ep, 0), 0); /* the shell exits */
    lull_fsevent_stop(&ek->watch);
    lull_signal_stop(&ek->sig);
    CHECK_EQ(lull_udp_close(&ek->udp, ek_udp_closed), 0);
    CHECK_EQ(lull_endpoint_close(&ek->dialed.ep, 0), 0);
    CHECK_EQ(lull_endpoint_close(&ek->client.ep, 0), 0);
    lull_server_close(&ek->srv);
    lull_server_close(&ek->usrv);
    lull_timer guard;
    lull_timer_init(ek->loop, &guard, ek_guard);
    lull_timer_start(&guard, GUARD_NS, 0);
    lull_timer_unref(&guard);
    while (ek->exits == 0)
        CHECK_EQ(lull_loop_run(ek->loop, LULL_RUN_ONCE), 0);
    lull_timer_stop(&guard);
    CHECK_EQ(lull_loop_settle(ek->loop) >= 0, 1);
    char file[96];
    snprintf(file, sizeof file, "%.*s/f", (int)sizeof ek->dir - 1, ek->dir);
    unlink(file);
    rmdir(ek->dir);
    int rc = lull_loop_free(ek->loop);
    if (rc != 0) lull_loop_print_live(ek->loop, stderr);
    CHECK_EQ(rc, 0);
}

/* A loop with no signal watched at the fork, never (its signal fd not made)
 * or no more (the last handle stopped): lull_loop_fork succeeds and makes
 * no signalfd for the copy, and so never puts one over an fd of the
 * program's, such as the copy's stdin. */
typedef struct no_signals {
    lull_loop *never, *stopped;
    int stdin_pipe[2];
} no_signals;

static void no_signals_child(void *arg) {
    no_signals *ns = arg;
    CHECK_EQ(dup2(ns->stdin_pipe[0], 0), 0);
    CHECK_EQ(write(ns->stdin_pipe[1], "x", 1), 1);
    CHECK_EQ(lull_loop_fork(ns->never), 0);
    CHECK_EQ(lull_loop_fork(ns->stopped), 0);
    char byte = 0;
    CHECK_EQ(read(0, &byte, 1), 1); /* still the pipe, with its byte */
    CHECK_EQ(byte, 'x');
    CHECK_EQ(lull_loop_free(ns->never), 0);
    CHECK_EQ(lull_loop_free(ns->stopped), 0);
}

TEST(fork_of_loops_without_signals_leaves_stdin_alone) {
    static no_signals ns;
    ns = (no_signals){0};
    CHECK_EQ(lull_loop_new(&ns.never, NULL), 0);
    CHECK_EQ(lull_loop_new(&ns.stopped, NULL), 0);
    lull_signal sig;
    CHECK_EQ(lull_signal_init(ns.stopped, &sig, count_signal), 0);
    CHECK_EQ(lull_signal_start(&sig, SIGUSR2), 0);
    CHECK_EQ(lull_signal_stop(&sig), 0);
    CHECK_EQ(pipe(ns.stdin_pipe), 0);
    CHECK(check_exits_cleanly(no_signals_child, &ns));
    close(ns.stdin_pipe[0]);
    close(ns.stdin_pipe[1]);
    CHECK_EQ(lull_loop_free(ns.never), 0);
    CHECK_EQ(lull_loop_free(ns.stopped), 0);
}
