/* fd watchers: readiness, level-triggered delivery, stop and close inside
 * callbacks of the same batch, references, and bad input. Real pipes on a
 * monotonic loop; no case waits for time to pass. */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <lull.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#define MS 1000000ull

typedef struct watch {
    lull_io io;
    int rfd, wfd; /* the pipe; io watches rfd unless a case says otherwise */
    int calls;
    int last_events;
} watch;

static lull_loop *the_loop;

static lull_loop *new_loop(void) {
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    the_loop = loop;
    return loop;
}

static void make_pipe(watch *w) {
    int fds[2];
    CHECK_EQ(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
    w->rfd = fds[0];
    w->wfd = fds[1];
    w->calls = 0;
    w->last_events = 0;
}

static void fill(int fd) {
    CHECK_EQ(write(fd, "x", 1), 1);
}

static void drain(int fd) {
    char buf[256];
    while (read(fd, buf, sizeof buf) > 0) {
    }
}

static void close_pipe(watch *w) {
    if (w->rfd >= 0) close(w->rfd);
    if (w->wfd >= 0) close(w->wfd);
    w->rfd = w->wfd = -1;
}

static void count_only(lull_io *io, int events) {
    watch *w = LULL_CONTAINER_OF(io, watch, io);
    w->calls++;
    w->last_events = events;
}

static void read_and_stop(lull_io *io, int events) {
    watch *w = LULL_CONTAINER_OF(io, watch, io);
    w->calls++;
    w->last_events = events;
    drain(w->rfd);
    lull_io_stop(io);
}

TEST(pipe_readable) {
    lull_loop *loop = new_loop();
    watch w;
    make_pipe(&w);
    CHECK_EQ(lull_io_init(loop, &w.io, w.rfd, read_and_stop), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    CHECK(lull_loop_alive(loop));
    CHECK_EQ(lull_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 0); /* nothing to read yet */
    fill(w.wfd);
    CHECK_EQ(lull_run(loop, LULL_RUN_DEFAULT), 0); /* returns: it stops */
    CHECK_EQ(w.calls, 1);
    CHECK(w.last_events & LULL_READABLE);
    CHECK(!(w.last_events & LULL_WRITABLE));
    CHECK(!lull_loop_alive(loop));
    close_pipe(&w);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Level-triggered (lull.h): called every iteration while ready. */
TEST(level_triggered) {
    lull_loop *loop = new_loop();
    watch w;
    make_pipe(&w);
    CHECK_EQ(lull_io_init(loop, &w.io, w.rfd, count_only), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    fill(w.wfd);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(lull_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 3);
    drain(w.rfd);
    CHECK_EQ(lull_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 3);
    lull_io_stop(&w.io);
    close_pipe(&w);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(pipe_writable) {
    lull_loop *loop = new_loop();
    watch w;
    make_pipe(&w);
    /* Fill the pipe: not writable until the reader drains it. */
    char buf[4096] = {0};
    while (write(w.wfd, buf, sizeof buf) > 0) {
    }
    CHECK_EQ(lull_io_init(loop, &w.io, w.wfd, count_only), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_WRITABLE), 0);
    CHECK_EQ(lull_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 0);
    drain(w.rfd);
    CHECK_EQ(lull_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(w.calls, 1);
    CHECK(w.last_events & LULL_WRITABLE);
    CHECK(!(w.last_events & LULL_READABLE));
    lull_io_stop(&w.io);
    close_pipe(&w);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* lull_io_start on a started watcher changes its interest. */
TEST(restart_changes_interest) {
    lull_loop *loop = new_loop();
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    watch w = {.rfd = sv[0], .wfd = sv[1]};
    CHECK_EQ(lull_io_init(loop, &w.io, sv[0], count_only), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    CHECK_EQ(lull_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE | LULL_WRITABLE), 0);
    CHECK_EQ(lull_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 1);
    CHECK_EQ(w.last_events & (LULL_READABLE | LULL_WRITABLE), LULL_WRITABLE);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    CHECK_EQ(lull_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 1);
    lull_io_stop(&w.io);
    close_pipe(&w);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Stopped inside its own callback, with the data left unread: never called
 * again, and the loop is no longer alive. */
static void stop_self_no_read(lull_io *io, int events) {
    count_only(io, events);
    lull_io_stop(io);
}

TEST(stop_inside_own_callback) {
    lull_loop *loop = new_loop();
    watch w;
    make_pipe(&w);
    CHECK_EQ(lull_io_init(loop, &w.io, w.rfd, stop_self_no_read), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    fill(w.wfd);
    CHECK_EQ(lull_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(w.calls, 1);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(lull_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 1);
    /* Restartable after a stop. */
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    CHECK_EQ(lull_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(w.calls, 2);
    close_pipe(&w);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Two watchers ready in the same batch; whichever runs first stops the
 * other (and reads only its own pipe): the other is not called. */
static watch *pair[2];
static void stop_peer(lull_io *io, int events) {
    watch *w = LULL_CONTAINER_OF(io, watch, io);
    count_only(io, events);
    drain(w->rfd);
    lull_io_stop(&pair[w == pair[0]]->io);
}

TEST(stop_other_watcher_in_same_batch) {
    lull_loop *loop = new_loop();
    watch a, b;
    make_pipe(&a);
    make_pipe(&b);
    pair[0] = &a;
    pair[1] = &b;
    CHECK_EQ(lull_io_init(loop, &a.io, a.rfd, stop_peer), 0);
    CHECK_EQ(lull_io_init(loop, &b.io, b.rfd, stop_peer), 0);
    CHECK_EQ(lull_io_start(&a.io, LULL_READABLE), 0);
    CHECK_EQ(lull_io_start(&b.io, LULL_READABLE), 0);
    fill(a.wfd);
    fill(b.wfd);
    CHECK_EQ(lull_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(a.calls + b.calls, 1);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(lull_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(a.calls + b.calls, 1); /* the stopped one still has data */
    lull_io_stop(&a.io);
    lull_io_stop(&b.io);
    CHECK(!lull_loop_alive(loop));
    close_pipe(&a);
    close_pipe(&b);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The first callback of the batch stops the other watcher and closes its
 * pipe, then opens a new pipe (which takes the freed fd numbers) and
 * watches it: the old watcher is not called, the new one is, and only for
 * its own readiness. */
static watch fresh;
static void close_peer(lull_io *io, int events) {
    watch *w = LULL_CONTAINER_OF(io, watch, io);
    count_only(io, events);
    drain(w->rfd);
    watch *peer = pair[w == pair[0]];
    lull_io_stop(&peer->io);
    close_pipe(peer);
    make_pipe(&fresh);
    CHECK_EQ(lull_io_init(the_loop, &fresh.io, fresh.rfd, read_and_stop), 0);
    CHECK_EQ(lull_io_start(&fresh.io, LULL_READABLE), 0);
    lull_io_stop(io);
}

TEST(fd_closed_inside_callback_of_same_batch) {
    lull_loop *loop = new_loop();
    watch a, b;
    make_pipe(&a);
    make_pipe(&b);
    pair[0] = &a;
    pair[1] = &b;
    CHECK_EQ(lull_io_init(loop, &a.io, a.rfd, close_peer), 0);
    CHECK_EQ(lull_io_init(loop, &b.io, b.rfd, close_peer), 0);
    CHECK_EQ(lull_io_start(&a.io, LULL_READABLE), 0);
    CHECK_EQ(lull_io_start(&b.io, LULL_READABLE), 0);
    fill(a.wfd);
    fill(b.wfd);
    CHECK_EQ(lull_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(a.calls + b.calls, 1);
    /* The fresh pipe is empty: its watcher must not see the old events. */
    for (int i = 0; i < 2; i++)
        CHECK_EQ(lull_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(fresh.calls, 0);
    CHECK(lull_loop_alive(loop));
    fill(fresh.wfd);
    CHECK_EQ(lull_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(fresh.calls, 1);
    CHECK_EQ(a.calls + b.calls, 1);
    close_pipe(&a);
    close_pipe(&b);
    close_pipe(&fresh);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A callback closes its own fd before stopping the watcher (epoll has
 * already forgotten the fd): no crash, not called again, and the fd number
 * can be watched again at once. */
static void close_then_stop(lull_io *io, int events) {
    watch *w = LULL_CONTAINER_OF(io, watch, io);
    count_only(io, events);
    close_pipe(w);
    lull_io_stop(io);
}

TEST(own_fd_closed_before_stop) {
    lull_loop *loop = new_loop();
    watch w;
    make_pipe(&w);
    int old_rfd = w.rfd;
    CHECK_EQ(lull_io_init(loop, &w.io, w.rfd, close_then_stop), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    fill(w.wfd);
    CHECK_EQ(lull_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(w.calls, 1);
    lull_io_stop(&w.io); /* again: a no-op */

    watch n;
    make_pipe(&n);
    CHECK_EQ(n.rfd, old_rfd); /* the lowest free fd */
    CHECK_EQ(lull_io_init(loop, &n.io, n.rfd, read_and_stop), 0);
    CHECK_EQ(lull_io_start(&n.io, LULL_READABLE), 0);
    fill(n.wfd);
    CHECK_EQ(lull_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(n.calls, 1);
    CHECK_EQ(w.calls, 1);
    close_pipe(&n);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(second_watcher_on_same_fd_eexist) {
    lull_loop *loop = new_loop();
    watch a, b;
    make_pipe(&a);
    b = (watch){.rfd = a.rfd, .wfd = a.wfd};
    CHECK_EQ(lull_io_init(loop, &a.io, a.rfd, count_only), 0);
    CHECK_EQ(lull_io_init(loop, &b.io, a.rfd, count_only), 0);
    CHECK_EQ(lull_io_start(&a.io, LULL_READABLE), 0);
    CHECK_EQ(lull_io_start(&b.io, LULL_READABLE), -EEXIST);
    CHECK_EQ(lull_io_start(&b.io, LULL_WRITABLE), -EEXIST);
    /* The refused watcher is not started: the first still works alone. */
    fill(a.wfd);
    CHECK_EQ(lull_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(a.calls, 1);
    CHECK_EQ(b.calls, 0);
    lull_io_stop(&b.io); /* never started: a no-op, a still watched */
    CHECK_EQ(lull_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(a.calls, 2);
    lull_io_stop(&a.io);
    CHECK_EQ(lull_io_start(&b.io, LULL_READABLE), 0);
    CHECK_EQ(lull_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(b.calls, 1);
    CHECK_EQ(a.calls, 2);
    lull_io_stop(&b.io);
    close_pipe(&a);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(invalid_arguments) {
    lull_loop *loop = new_loop();
    watch w;
    make_pipe(&w);
    CHECK_EQ(lull_io_init(loop, NULL, w.rfd, count_only), -EINVAL);
    CHECK_EQ(lull_io_init(NULL, &w.io, w.rfd, count_only), -EINVAL);
    CHECK_EQ(lull_io_init(loop, &w.io, -1, count_only), -EINVAL);
    CHECK_EQ(lull_io_init(loop, &w.io, -42, count_only), -EINVAL);
    CHECK_EQ(lull_io_init(loop, &w.io, w.rfd, NULL), -EINVAL);
    CHECK_EQ(lull_io_start(NULL, LULL_READABLE), -EINVAL);
    CHECK_EQ(lull_io_init(loop, &w.io, w.rfd, count_only), 0);
    CHECK_EQ(lull_io_start(&w.io, 0), -EINVAL);
    CHECK_EQ(lull_io_start(&w.io, 0x100), -EINVAL);
    CHECK(!lull_loop_alive(loop)); /* nothing was started */
    lull_io_stop(NULL);            /* harmless */
    close_pipe(&w);

    /* A closed fd: refused with a negative errno, nothing started. */
    CHECK_EQ(lull_io_init(loop, &w.io, 1000, count_only), 0);
    CHECK(lull_io_start(&w.io, LULL_READABLE) < 0);
    CHECK(!lull_loop_alive(loop));

    /* A regular file: epoll cannot watch it. */
    FILE *f = tmpfile();
    CHECK(f != NULL);
    CHECK_EQ(lull_io_init(loop, &w.io, fileno(f), count_only), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), -EPERM);
    CHECK(!lull_loop_alive(loop));
    fclose(f);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* An unreferenced watcher does not keep lull_run alive, but is still
 * serviced while something else does. */
static void stop_timer_cb(lull_timer *t) {
    (void)t;
}

TEST(unref_io_does_not_keep_loop_alive) {
    lull_loop *loop = new_loop();
    watch w;
    make_pipe(&w);
    CHECK_EQ(lull_io_init(loop, &w.io, w.rfd, read_and_stop), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    lull_io_unref(&w.io);
    CHECK(!lull_loop_alive(loop));
    uint64_t start = check_clock_ns();
    CHECK_EQ(lull_run(loop, LULL_RUN_DEFAULT), 0); /* would block forever */
    CHECK_LE(check_clock_ns() - start, 1000 * MS);
    CHECK_EQ(w.calls, 0);
    CHECK_EQ(lull_loop_free(loop), -EBUSY); /* still started */
    lull_io_ref(&w.io);
    CHECK(lull_loop_alive(loop));
    lull_io_unref(&w.io);

    /* A far referenced timer keeps the loop running: the unreferenced
     * watcher is serviced. */
    lull_timer far;
    lull_timer_init(loop, &far, stop_timer_cb);
    lull_timer_start(&far, 100000 * MS, 0);
    fill(w.wfd);
    CHECK_EQ(lull_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(w.calls, 1);
    lull_timer_stop(&far);
    close_pipe(&w);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The writer closes: the reader's callback sees LULL_HANGUP. */
TEST(hangup_reported) {
    lull_loop *loop = new_loop();
    watch w;
    make_pipe(&w);
    CHECK_EQ(lull_io_init(loop, &w.io, w.rfd, read_and_stop), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    close(w.wfd);
    w.wfd = -1;
    CHECK_EQ(lull_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(w.calls, 1);
    CHECK(w.last_events & LULL_HANGUP);
    close_pipe(&w);
    CHECK_EQ(lull_loop_free(loop), 0);
}
