/* fd watchers: readiness, level-triggered delivery, stop and close inside
 * callbacks of the same batch, references, and bad input. Real pipes on a
 * monotonic loop; no case waits for time to pass. */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lull.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h" /* the loop's epoll set, to see it kept */

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
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 0); /* nothing to read yet */
    fill(w.wfd);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0); /* returns: it stops */
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
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 3);
    drain(w.rfd);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
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
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 0);
    drain(w.rfd);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
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
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE | LULL_WRITABLE), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 1);
    CHECK_EQ(w.last_events & (LULL_READABLE | LULL_WRITABLE), LULL_WRITABLE);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 1);
    lull_io_stop(&w.io);
    close_pipe(&w);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Re-starting a watcher replaces its interest in the batch already
 * collected too: two always-writable watchers, each narrowing the other to
 * READABLE when it runs. Whichever the kernel reported first runs; the
 * other's collected writability no longer matches its interest, so it is
 * not called. */
typedef struct narrowing {
    lull_io io;
    int fd;
    int calls;
    struct narrowing *other;
} narrowing;

static void narrow_other(lull_io *io, int events) {
    narrowing *n = LULL_CONTAINER_OF(io, narrowing, io);
    CHECK(events & LULL_WRITABLE);
    n->calls++;
    CHECK_EQ(lull_io_start(&n->other->io, LULL_READABLE), 0);
}

TEST(restart_filters_readiness_collected_in_the_same_batch) {
    lull_loop *loop = new_loop();
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    narrowing a = {.fd = sv[0]}, b = {.fd = sv[1]};
    a.other = &b;
    b.other = &a;
    CHECK_EQ(lull_io_init(loop, &a.io, a.fd, narrow_other), 0);
    CHECK_EQ(lull_io_init(loop, &b.io, b.fd, narrow_other), 0);
    CHECK_EQ(lull_io_start(&a.io, LULL_READABLE | LULL_WRITABLE), 0);
    CHECK_EQ(lull_io_start(&b.io, LULL_READABLE | LULL_WRITABLE), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(a.calls + b.calls, 1);
    lull_io_stop(&a.io);
    lull_io_stop(&b.io);
    close(sv[0]);
    close(sv[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A failed lull_io_start leaves the watcher as it was: a started one stays
 * started with its old interest. */
TEST(failed_restart_leaves_the_watcher_as_it_was) {
    lull_loop *loop = new_loop();
    watch w;
    make_pipe(&w);
    CHECK_EQ(lull_io_init(loop, &w.io, w.rfd, count_only), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    CHECK_EQ(lull_io_start(&w.io, 0), -EINVAL);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE | 0x100), -EINVAL);
    CHECK(lull_loop_alive(loop));
    fill(w.wfd);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 1);
    CHECK_EQ(w.last_events, LULL_READABLE);

    /* The fd closed under a started watcher: the kernel dropped the
     * registration, and a re-start is refused with -EBADF. */
    close(w.rfd);
    w.rfd = -1;
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE | LULL_WRITABLE), -EBADF);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.live_io, 1); /* still started */
    CHECK_EQ(lull_loop_free(loop), -EBUSY);
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
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(w.calls, 1);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 1);
    /* Restartable after a stop. */
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
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
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(a.calls + b.calls, 1);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
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
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(a.calls + b.calls, 1);
    /* The fresh pipe is empty: its watcher must not see the old events. */
    for (int i = 0; i < 2; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(fresh.calls, 0);
    CHECK(lull_loop_alive(loop));
    fill(fresh.wfd);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
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
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(w.calls, 1);
    lull_io_stop(&w.io); /* again: a no-op */

    watch n;
    make_pipe(&n);
    CHECK_EQ(n.rfd, old_rfd); /* the lowest free fd */
    CHECK_EQ(lull_io_init(loop, &n.io, n.rfd, read_and_stop), 0);
    CHECK_EQ(lull_io_start(&n.io, LULL_READABLE), 0);
    fill(n.wfd);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(n.calls, 1);
    CHECK_EQ(w.calls, 1);
    close_pipe(&n);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A watcher left started over a closed fd whose number a new watcher took:
 * the old one's stop must leave the new registration alone, and a restart
 * of it must not take over the new one's file. */
TEST(stop_of_a_watcher_whose_fd_number_was_reused) {
    lull_loop *loop = new_loop();
    watch old;
    make_pipe(&old);
    int number = old.rfd;
    CHECK_EQ(lull_io_init(loop, &old.io, number, count_only), 0);
    CHECK_EQ(lull_io_start(&old.io, LULL_READABLE), 0);
    close_pipe(&old); /* not stopped first */

    watch n;
    make_pipe(&n);
    CHECK_EQ(n.rfd, number); /* the lowest free fd */
    CHECK_EQ(lull_io_init(loop, &n.io, n.rfd, count_only), 0);
    CHECK_EQ(lull_io_start(&n.io, LULL_READABLE), 0);
    CHECK_EQ(lull_io_start(&old.io, LULL_WRITABLE), -EBADF);
    lull_io_stop(&old.io);

    fill(n.wfd);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(n.calls, 1);
    CHECK_EQ(n.last_events, LULL_READABLE);
    CHECK_EQ(old.calls, 0);
    lull_io_stop(&n.io);
    close_pipe(&n);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The same with nobody watching the new file: the restart of the old
 * watcher, whose registration went with its file, is refused with the
 * documented -EBADF (it said -ENOENT, from epoll), and leaves the watcher
 * as it was; a stop and a start then watch the new file. */
TEST(restart_of_a_watcher_whose_fd_was_closed_and_the_number_reopened) {
    lull_loop *loop = new_loop();
    watch old;
    make_pipe(&old);
    int number = old.rfd;
    CHECK_EQ(lull_io_init(loop, &old.io, number, count_only), 0);
    CHECK_EQ(lull_io_start(&old.io, LULL_READABLE), 0);
    close_pipe(&old);
    CHECK_EQ(lull_io_start(&old.io, LULL_WRITABLE), -EBADF); /* not open */

    watch n;
    make_pipe(&n);
    CHECK_EQ(n.rfd, number); /* the lowest free fd */
    CHECK_EQ(lull_io_start(&old.io, LULL_READABLE | LULL_WRITABLE), -EBADF);
    CHECK_EQ(old.io.events, LULL_READABLE);
    CHECK(lull_loop_alive(loop));
    fill(n.wfd);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(old.calls, 0);
    lull_io_stop(&old.io);
    CHECK(!lull_loop_alive(loop));
    CHECK_EQ(lull_io_start(&old.io, LULL_READABLE), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(old.calls, 1);
    CHECK_EQ(old.last_events, LULL_READABLE);
    lull_io_stop(&old.io);
    close_pipe(&n);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The same while a dup keeps the old file open, so its registration
 * outlives the close and reports to the old watcher until it stops; the
 * epoll set rebuilt after that holds the new watcher's file only. */
TEST(reused_fd_number_survives_the_old_watchers_rebuild) {
    lull_loop *loop = new_loop();
    watch old;
    make_pipe(&old);
    int number = old.rfd;
    CHECK_EQ(lull_io_init(loop, &old.io, number, count_only), 0);
    CHECK_EQ(lull_io_start(&old.io, LULL_READABLE), 0);
    int keep = fcntl(number, F_DUPFD_CLOEXEC, 100);
    CHECK(keep >= 0);
    fill(old.wfd);
    close(old.rfd);

    watch n;
    make_pipe(&n);
    CHECK_EQ(n.rfd, number);
    CHECK_EQ(lull_io_init(loop, &n.io, n.rfd, count_only), 0);
    CHECK_EQ(lull_io_start(&n.io, LULL_READABLE), 0);
    lull_io_stop(&old.io); /* its file still ready: a stale report next */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(old.calls, 0);
    CHECK_EQ(n.calls, 0);
    fill(n.wfd);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(n.calls, 1);
    CHECK_EQ(old.calls, 0);
    lull_io_stop(&n.io);
    close_pipe(&n);
    close(old.wfd);
    close(keep);
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
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(a.calls, 1);
    CHECK_EQ(b.calls, 0);
    lull_io_stop(&b.io); /* never started: a no-op, a still watched */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(a.calls, 2);
    lull_io_stop(&a.io);
    CHECK_EQ(lull_io_start(&b.io, LULL_READABLE), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
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
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), -EBADF);
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

/* lull_io_init on a started watcher is a programming error (debug builds
 * stop); a release build refuses it with -EBUSY and leaves the watcher as
 * it was. Clearing it once left the loop counting a watcher no stop could
 * end (lull_loop_free -EBUSY for ever), its slot and kernel registration
 * delivering to the new callback, and a second start took a second slot. */
static void other_fn(lull_io *io, int events) {
    (void)io;
    (void)events;
    CHECK(!"the re-initialised callback ran");
}

/* Started on loop a, set up again on loop b (a itself, or another: b's
 * own set of started watchers once never heard of it), refused; stopped,
 * set up on b for another fd, it watches that one. arg: two loops or one. */
static void init_started(void *arg) {
    lull_loop *a = new_loop(), *b = arg ? new_loop() : a;
    watch w, o;
    make_pipe(&w);
    make_pipe(&o);
    CHECK_EQ(lull_io_init(a, &w.io, w.rfd, count_only), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    CHECK_EQ(lull_io_init(b, &w.io, o.rfd, other_fn), -EBUSY);
    CHECK(w.io.loop == a);
    CHECK_EQ(w.io.fd, w.rfd);
    fill(w.wfd);
    CHECK_EQ(lull_loop_run(a, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 1);
    lull_io_stop(&w.io);
    CHECK(!lull_loop_alive(a));
    CHECK_EQ(lull_io_init(b, &w.io, o.rfd, count_only), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    fill(o.wfd);
    CHECK_EQ(lull_loop_run(b, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 2);
    lull_io_stop(&w.io);
    close_pipe(&w);
    close_pipe(&o);
    CHECK_EQ(lull_loop_free(a), 0);
    if (b != a) CHECK_EQ(lull_loop_free(b), 0);
}

static void init_refused(bool two_loops) {
    void *arg = two_loops ? &arg : NULL;
    if (check_debug_build())
        CHECK(check_dies(init_started, arg,
                         "lull: lull_io_init on a started watcher"));
    else
        init_started(arg);
}

TEST(init_of_a_started_watcher_is_refused) {
    init_refused(false);
}

TEST(init_of_a_watcher_started_on_another_loop_is_refused) {
    init_refused(true);
}

/* A number that names no open file is refused before the loop sizes its fd
 * table to it: INT_MAX once made the start reserve and zero 8 GiB (a hang,
 * or -ENOMEM) on its way to epoll's EBADF. The address-space limit turns
 * that old cost into a quick -ENOMEM; sanitizers reserve far more address
 * space of their own, so they run the case without it. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define IO_LIMIT_ADDRESS_SPACE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define IO_LIMIT_ADDRESS_SPACE 0
#endif
#endif
#ifndef IO_LIMIT_ADDRESS_SPACE
#define IO_LIMIT_ADDRESS_SPACE 1
#endif

TEST(start_on_a_huge_number_that_is_not_open) {
#if IO_LIMIT_ADDRESS_SPACE
    struct rlimit as = {.rlim_cur = (rlim_t)1 << 30, .rlim_max = RLIM_INFINITY};
    CHECK_EQ(setrlimit(RLIMIT_AS, &as), 0);
#endif
    lull_loop *loop = new_loop();
    watch w;
    CHECK_EQ(lull_io_init(loop, &w.io, INT_MAX, count_only), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), -EBADF);
    CHECK_EQ(lull_io_init(loop, &w.io, (1 << 30) + 7, count_only), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_WRITABLE), -EBADF);
    CHECK(!lull_loop_alive(loop));
    /* The loop is as it was: a real watcher still starts and is served. */
    make_pipe(&w);
    CHECK_EQ(lull_io_init(loop, &w.io, w.rfd, count_only), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    fill(w.wfd);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 1);
    lull_io_stop(&w.io);
    close_pipe(&w);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* An unreferenced watcher does not keep lull_loop_run alive, but is still
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
    lull_loop_metrics_reset(loop);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT),
             0); /* would block forever */
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    /* Returned without a wait that could block (a clock bound here would
     * measure the machine's load, not lull: a run that blocked for good
     * fails on the case's timeout, one that blocked at all counts a
     * wakeup). */
    CHECK_U64_EQ(m.wakeups, 0);
    CHECK_U64_EQ(m.iterations, 0);
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
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(w.calls, 1);
    lull_timer_stop(&far);
    close_pipe(&w);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* lull_io_unref and lull_io_ref on a stopped watcher change only what its
 * next start counts: a watcher unreferenced before its start never keeps
 * the loop alive, and one referenced again while stopped keeps it alive
 * only while started. (Counting the stopped watcher's change as well left
 * the loop's reference count one below zero, and every later run alive.) */
TEST(ref_and_unref_of_a_stopped_watcher_count_from_its_start) {
    lull_loop *loop = new_loop();
    watch w;
    make_pipe(&w);
    CHECK_EQ(lull_io_init(loop, &w.io, w.rfd, read_and_stop), 0);
    lull_io_unref(&w.io);
    CHECK(!lull_loop_alive(loop));
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    CHECK(!lull_loop_alive(loop));
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(w.calls, 0);
    lull_io_stop(&w.io);
    lull_io_ref(&w.io);
    CHECK(!lull_loop_alive(loop));
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    CHECK(lull_loop_alive(loop));
    lull_io_stop(&w.io);
    CHECK(!lull_loop_alive(loop));
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
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(w.calls, 1);
    CHECK(w.last_events & LULL_HANGUP);
    close_pipe(&w);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A socket shut both ways while a write-only watcher waits for room: the
 * kernel reports EPOLLHUP without EPOLLOUT. The watcher hears it as
 * writable (its write then says EPIPE), once per wait, not never while the
 * loop wakes for ever. */
static void stop_on_any(lull_io *io, int events) {
    watch *w = LULL_CONTAINER_OF(io, watch, io);
    w->calls++;
    w->last_events = events;
    lull_io_stop(io);
}

TEST(write_watcher_hears_a_shutdown_both_ways) {
    lull_loop *loop = new_loop();
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    static char buf[65536];
    while (write(sv[0], buf, sizeof buf) > 0) { /* the peer never reads */
    }
    CHECK_EQ(errno, EAGAIN);
    watch w = {.rfd = sv[0], .wfd = sv[1]};
    CHECK_EQ(lull_io_init(loop, &w.io, sv[0], stop_on_any), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_WRITABLE), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 0); /* full: nothing yet */
    int keep = dup(sv[0]);
    CHECK(keep >= 0);
    CHECK_EQ(shutdown(keep, SHUT_RDWR), 0);
    lull_metrics m0, m1;
    lull_loop_metrics(loop, &m0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    lull_loop_metrics(loop, &m1);
    CHECK_EQ(w.calls, 1);
    CHECK(w.last_events & LULL_WRITABLE);
    CHECK(w.last_events & LULL_HANGUP);
    CHECK(m1.polls - m0.polls <= 2);
    CHECK_EQ(send(sv[0], "x", 1, MSG_NOSIGNAL), -1);
    CHECK_EQ(errno, EPIPE);
    close(keep);
    close_pipe(&w);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ------------------------------------------------ sandboxed epoll_pwait2 */

/* A seccomp filter (check_deny_syscalls), as older container runtimes and
 * systemd's SystemCallFilter= install, that fails the listed system calls
 * with EPERM. Filters cannot be removed, so each scenario runs in a child
 * process of its own (run_in_child). */
#ifndef SYS_epoll_pwait2
#define SYS_epoll_pwait2 441 /* the same number on every architecture */
#endif

#ifdef CHECK_SANDBOX_ARCH
static void deny_with_eperm(const int *nrs, int n) {
    check_deny_syscalls(nrs, n, EPERM);
    /* The filter is in force. (Under valgrind, which does not know
     * epoll_pwait2, the call never reaches the kernel: ENOSYS.) */
    CHECK_EQ(syscall(SYS_epoll_pwait2, -1, NULL, 0, NULL, NULL, 0), -1);
    CHECK(errno == EPERM || errno == ENOSYS);
}

static void deny_pwait2(void) {
    deny_with_eperm((const int[]){SYS_epoll_pwait2}, 1);
}

/* Every way of waiting on an epoll set. */
static void deny_every_epoll_wait(void) {
    static const int nrs[] = {
        SYS_epoll_pwait2,
        SYS_epoll_pwait,
#ifdef SYS_epoll_wait
        SYS_epoll_wait,
#endif
    };
    deny_with_eperm(nrs, (int)(sizeof nrs / sizeof nrs[0]));
}
#endif

/* Runs fn in a child process and fails the case unless it exits with 0
 * (a failed CHECK in the child exits with 1 and prints why). */
static void run_in_child(void (*fn)(void)) {
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        fn();
        fflush(NULL);
        _exit(0);
    }
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
}

static void no_op_timer(lull_timer *t) {
    (void)t;
}

/* A loop whose epoll_pwait2 is refused: an fd that becomes readable calls
 * its watcher on the first poll, a blocking wait sleeps instead of spinning
 * (a handful of polls while a 20 ms timer runs out, not thousands), and the
 * largest timeout converts to milliseconds without overflowing. */
static void readiness_seen(lull_loop *loop) {
    watch w;
    make_pipe(&w);
    CHECK_EQ(lull_io_init(loop, &w.io, w.rfd, count_only), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    fill(w.wfd);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(w.calls, 1);
    drain(w.rfd);

    lull_timer t;
    lull_timer_init(loop, &t, no_op_timer);
    lull_timer_start(&t, 20 * MS, 0);
    lull_io_unref(&w.io);
    lull_metrics m;
    lull_loop_metrics_reset(loop);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0); /* until the timer */
    lull_loop_metrics(loop, &m);
    CHECK_LE(m.polls, 4);
    CHECK_EQ(w.calls, 1);

    /* A deadline at the end of the clock: the poll's timeout is as large as
     * lull passes, and readiness still ends it. */
    lull_timer_start(&t, UINT64_MAX, 0);
    fill(w.wfd);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(w.calls, 2);
    lull_timer_stop(&t);
    lull_io_stop(&w.io);
    close_pipe(&w);
    CHECK_EQ(lull_loop_free(loop), 0);
}

#ifdef CHECK_SANDBOX_ARCH
static void sandboxed_before_loop_new(void) {
    deny_pwait2();
    readiness_seen(new_loop());
}

static void sandboxed_after_loop_new(void) {
    lull_loop *loop = new_loop();
    deny_pwait2();
    readiness_seen(loop);
}

/* No way to wait is left: the run fails with the kernel's error instead of
 * spinning on polls that report nothing. */
static void no_wait_allowed(void) {
    lull_loop *loop = new_loop();
    watch w;
    make_pipe(&w);
    CHECK_EQ(lull_io_init(loop, &w.io, w.rfd, count_only), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    deny_every_epoll_wait();
    lull_metrics m;
    lull_loop_metrics_reset(loop);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), -EPERM);
    lull_loop_metrics(loop, &m);
    CHECK_LE(m.polls, 2); /* pwait2, or the fallback's first try */
    CHECK_EQ(lull_loop_settle(loop), -EPERM);
    CHECK_EQ(w.calls, 0);
    lull_io_stop(&w.io);
    close_pipe(&w);
    CHECK_EQ(lull_loop_free(loop), 0);
}
#endif

TEST(epoll_pwait2_refused_at_start_falls_back) {
#ifdef CHECK_SANDBOX_ARCH
    run_in_child(sandboxed_before_loop_new);
#else
    printf("skipped: no seccomp architecture constant for this machine\n");
#endif
}

TEST(epoll_pwait2_refused_later_falls_back) {
#ifdef CHECK_SANDBOX_ARCH
    run_in_child(sandboxed_after_loop_new);
#else
    printf("skipped: no seccomp architecture constant for this machine\n");
#endif
}

TEST(poll_error_fails_the_run) {
#ifdef CHECK_SANDBOX_ARCH
    run_in_child(no_wait_allowed);
#else
    printf("skipped: no seccomp architecture constant for this machine\n");
#endif
}

/* ------------------------------------- fd closed before lull_io_stop */

/* The kernel keys a registration by open file, so closing a watched fd does
 * not remove it while another reference to the file is open. A stopped
 * watcher must still never be called nor its memory touched, and the loop
 * must not spin on the orphaned registration. Each case closes the write
 * end too, so the file is both readable and hung up: a registration that
 * kept reporting would report on every poll. The window is a 20 ms timer:
 * the loop should poll a handful of times, not thousands. */
static int stale_calls;
static void stale_count(lull_io *io, int events) {
    (void)io;
    (void)events;
    stale_calls++;
}

static lull_timer window_timer;
static void end_window(lull_timer *t) {
    (void)t;
}

/* Runs the loop over a 20 ms window (the timer is the only referenced
 * handle) and returns the polls it made. The cases keep another watcher
 * started, as a real program would: a loop with none sleeps on a futex and
 * never asks epoll at all. */
static uint64_t polls_over_window(lull_loop *loop) {
    lull_timer_init(loop, &window_timer, end_window);
    lull_timer_start(&window_timer, 20 * MS, 0);
    lull_metrics m;
    lull_loop_metrics_reset(loop);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    lull_loop_metrics(loop, &m);
    return m.polls;
}

TEST(stopped_watcher_with_fd_closed_and_a_dup_open) {
    lull_loop *loop = new_loop();
    watch p;
    make_pipe(&p);
    lull_io *io = malloc(sizeof *io); /* ASan sees any later touch */
    CHECK(io != NULL);
    CHECK_EQ(lull_io_init(loop, io, p.rfd, stale_count), 0);
    CHECK_EQ(lull_io_start(io, LULL_READABLE), 0);
    int keep = dup(p.rfd);
    CHECK(keep >= 0);
    fill(p.wfd);
    close(p.wfd);
    close(p.rfd);
    lull_io_stop(io);
    free(io);

    /* A watcher started now takes the stopped one's slot: the orphaned
     * registration must not reach it either, and it must survive the
     * rebuild of the epoll set. */
    watch n;
    make_pipe(&n);
    CHECK_EQ(lull_io_init(loop, &n.io, n.rfd, count_only), 0);
    CHECK_EQ(lull_io_start(&n.io, LULL_READABLE), 0);
    lull_io_unref(&n.io);

    CHECK_LE(polls_over_window(loop), 4);
    CHECK_EQ(stale_calls, 0);
    CHECK_EQ(n.calls, 0);
    fill(n.wfd);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    CHECK_EQ(n.calls, 1);
    CHECK_EQ(n.last_events, LULL_READABLE);
    lull_io_stop(&n.io);
    close_pipe(&n);
    close(keep);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The same with the other reference held by a forked child, as a server
 * that forks a helper process with its fds would have it. */
TEST(stopped_watcher_with_fd_closed_and_a_child_holding_it) {
    lull_loop *loop = new_loop();
    watch p;
    make_pipe(&p);
    int hold[2]; /* the child exits when the parent closes hold[1] */
    CHECK_EQ(pipe2(hold, O_CLOEXEC), 0);
    static watch w; /* kept alive: a call would be counted, not a crash */
    w.calls = 0;
    CHECK_EQ(lull_io_init(loop, &w.io, p.rfd, count_only), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_READABLE), 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(p.wfd);
        close(hold[1]);
        char c;
        while (read(hold[0], &c, 1) < 0 && errno == EINTR) {
        }
        _exit(0);
    }
    close(hold[0]);
    fill(p.wfd);
    close(p.wfd);
    close(p.rfd); /* the child still holds the file */
    lull_io_stop(&w.io);

    watch n;
    make_pipe(&n);
    CHECK_EQ(lull_io_init(loop, &n.io, n.rfd, count_only), 0);
    CHECK_EQ(lull_io_start(&n.io, LULL_READABLE), 0);
    lull_io_unref(&n.io);
    CHECK_LE(polls_over_window(loop), 4);
    CHECK_EQ(w.calls, 0);
    CHECK_EQ(n.calls, 0);
    lull_io_stop(&n.io);
    close_pipe(&n);
    close(hold[1]);
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A watcher stopped after its fd was closed leaves its registration in
 * the epoll set while a dup holds the file. The same file back at the same
 * number (dup2 from the copy, as a program restoring its stdin does) is
 * then watched by nobody: a new watcher must start on it, and hear it,
 * not be told another watcher holds it while the file stays quiet. */
TEST(same_file_back_at_a_number_whose_watcher_stopped_after_the_close) {
    lull_loop *loop = new_loop();
    watch p;
    make_pipe(&p);
    int number = p.rfd;
    watch old = {.rfd = -1, .wfd = -1};
    CHECK_EQ(lull_io_init(loop, &old.io, number, count_only), 0);
    CHECK_EQ(lull_io_start(&old.io, LULL_READABLE), 0);
    int keep = fcntl(number, F_DUPFD_CLOEXEC, 100);
    CHECK(keep >= 0);
    close(number);
    lull_io_stop(&old.io);
    CHECK(!lull_loop_alive(loop));
    CHECK_EQ(dup2(keep, number), number);

    CHECK_EQ(lull_io_init(loop, &p.io, number, count_only), 0);
    CHECK_EQ(lull_io_start(&p.io, LULL_READABLE), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(p.calls, 0); /* quiet: nothing yet */
    fill(p.wfd);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(p.calls, 1);
    CHECK_EQ(p.last_events, LULL_READABLE);
    CHECK_EQ(old.calls, 0);
    /* Its interest moves and its stop ends the registration, as any
     * watcher's: once stopped, the ready pipe reaches nobody. */
    CHECK_EQ(lull_io_start(&p.io, LULL_READABLE | LULL_WRITABLE), 0);
    lull_io_stop(&p.io);
    CHECK_EQ(lull_io_init(loop, &old.io, number, count_only), 0);
    CHECK_EQ(lull_io_start(&old.io, LULL_READABLE), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(old.calls, 1);
    CHECK_EQ(p.calls, 1);
    lull_io_stop(&old.io);
    close_pipe(&p);
    close(keep);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* The loop's own fds (its epoll set, its wake-up eventfd, the set
 * lull_loop_backend_fd gives a host) found by number and watched: each
 * start is refused and leaves the loop as it was. The wake-up eventfd's
 * registration has no watcher behind it: taken over as an orphan, a stop
 * would then have taken it out of the set, and a remote post would no
 * longer make the host's fd readable. */
static int fds_open(bool *open, int cap) {
    int n = 0;
    for (int fd = 0; fd < cap; fd++) {
        open[fd] = fcntl(fd, F_GETFD) >= 0;
        n += open[fd];
    }
    return n;
}

static int posted_runs;
static void count_post(lull_task *t) {
    (void)t;
    posted_runs++;
}

TEST(the_loops_own_fds_cannot_be_watched) {
    enum { CAP = 256 };
    bool before[CAP], after[CAP];
    fds_open(before, CAP);
    lull_loop *loop = new_loop();
    int host = lull_loop_backend_fd(loop);
    CHECK(host >= 0 && host < CAP);
    int tried = 0;
    fds_open(after, CAP);
    for (int fd = 0; fd < CAP; fd++) {
        if (before[fd] || !after[fd]) continue;
        watch w = {.rfd = fd, .wfd = -1};
        CHECK_EQ(lull_io_init(loop, &w.io, fd, count_only), 0);
        CHECK(lull_io_start(&w.io, LULL_READABLE) < 0);
        lull_io_stop(&w.io); /* not started: a no-op */
        CHECK(!lull_loop_alive(loop));
        tried++;
    }
    CHECK_EQ(tried, 3); /* the epoll set, the eventfd, the host's set */
    lull_task post;
    CHECK_EQ(lull_task_init(&post, count_post), 0);
    int64_t ns = 0;
    CHECK_EQ(lull_loop_backend_timeout(loop, &ns), 0);
    CHECK_EQ(ns, -1);                   /* nothing but the fd can bring work */
    lull_task_post_remote(loop, &post); /* as from another thread */
    struct pollfd pfd = {.fd = host, .events = POLLIN};
    CHECK_EQ(poll(&pfd, 1, 0), 1);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(posted_runs, 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* One callback starts 10,000 watchers, all ready at once (the watcher
 * table and the fd table grow inside a batch) and stops every other one
 * again; the rest are served over the following polls, LULL__EVENTS_CAP a
 * batch, each once (each stops itself), and the loop then ends. Fewer
 * where the hard fd limit is lower: the growth is what is checked. */
enum { MANY = 10000 };
static lull_io many[MANY];
static int many_calls[MANY], many_n;

static void many_once(lull_io *io, int events) {
    CHECK_EQ(events, LULL_READABLE);
    many_calls[io - many]++;
    lull_io_stop(io);
}

static void start_many(lull_io *io, int events) {
    (void)events;
    watch *w = LULL_CONTAINER_OF(io, watch, io);
    drain(w->rfd);
    lull_io_stop(io);
    for (int i = 0; i < many_n; i++)
        CHECK_EQ(lull_io_start(&many[i], LULL_READABLE), 0);
    for (int i = 0; i < many_n; i += 2)
        lull_io_stop(&many[i]);
}

TEST(ten_thousand_watchers_started_and_stopped_inside_a_callback) {
    struct rlimit rl;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rlim_t want = MANY + 64;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) want = rl.rlim_max;
    rl.rlim_cur = want;
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
    many_n = (int)want - 64 < MANY ? (int)want - 64 : MANY;
    CHECK(many_n >= 512); /* past the first table and two batches */
    lull_loop *loop = new_loop();
    int fds[2];
    CHECK_EQ(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
    fill(fds[1]); /* the read end of every watcher: a dup of this */
    for (int i = 0; i < many_n; i++) {
        int fd = fcntl(fds[0], F_DUPFD_CLOEXEC, 3);
        CHECK(fd >= 0);
        CHECK_EQ(lull_io_init(loop, &many[i], fd, many_once), 0);
    }
    watch trigger;
    make_pipe(&trigger);
    CHECK_EQ(lull_io_init(loop, &trigger.io, trigger.rfd, start_many), 0);
    CHECK_EQ(lull_io_start(&trigger.io, LULL_READABLE), 0);
    fill(trigger.wfd);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    for (int i = 0; i < many_n; i++)
        CHECK_EQ(many_calls[i], i % 2);
    CHECK(!lull_loop_alive(loop));
    for (int i = 0; i < many_n; i++)
        close(many[i].fd);
    close(fds[0]);
    close(fds[1]);
    close_pipe(&trigger);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ------------------------------------------------ lull_loop_shuffle */

enum { SHUF_N = 8 };

typedef struct shuf_fd {
    watch w;
    int id;
    lull_task task; /* posted by the fd's callback */
} shuf_fd;

static int shuf_order[4 * SHUF_N], shuf_len;
static int task_order[4 * SHUF_N], task_len;

static void shuf_task(lull_task *t) {
    shuf_fd *s = LULL_CONTAINER_OF(t, shuf_fd, task);
    task_order[task_len++] = s->id;
}

static void shuf_read(lull_io *io, int events) {
    (void)events;
    shuf_fd *s = LULL_CONTAINER_OF(io, shuf_fd, w.io);
    drain(s->w.rfd);
    shuf_order[shuf_len++] = s->id;
    lull_task_post(io->loop, &s->task);
}

/* Makes SHUF_N pipes readable at once and runs one iteration: the order
 * the fd callbacks ran in goes to out[] (and the posted tasks' order is
 * checked to be the same). `seed` < 0: no shuffle. */
static void one_batch(long long seed, int *out) {
    lull_loop *loop = new_loop();
    if (seed >= 0) CHECK_EQ(lull_loop_shuffle(loop, true, (uint64_t)seed), 0);
    shuf_fd s[SHUF_N];
    for (int i = 0; i < SHUF_N; i++) {
        s[i].id = i;
        make_pipe(&s[i].w);
        CHECK_EQ(lull_io_init(loop, &s[i].w.io, s[i].w.rfd, shuf_read), 0);
        CHECK_EQ(lull_io_start(&s[i].w.io, LULL_READABLE), 0);
        CHECK_EQ(lull_task_init(&s[i].task, shuf_task), 0);
    }
    for (int i = 0; i < SHUF_N; i++)
        fill(s[i].w.wfd);
    shuf_len = task_len = 0;
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    /* Where slices end at random (LULL_TEST_YIELD_OFTEN), the tasks may
     * be left for a later iteration: they run there, in the same order. */
    for (int i = 0; i < 100 && task_len < SHUF_N; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    /* One batch: every fd once; the tasks they posted ran after the fd
     * callbacks, in post order (C2), which is the callbacks' order. */
    CHECK_EQ(shuf_len, SHUF_N);
    CHECK_EQ(task_len, SHUF_N);
    for (int i = 0; i < SHUF_N; i++) {
        CHECK_EQ(task_order[i], shuf_order[i]);
        out[i] = shuf_order[i];
    }
    bool seen[SHUF_N] = {0};
    for (int i = 0; i < SHUF_N; i++) {
        CHECK(!seen[out[i]]);
        seen[out[i]] = true;
    }
    for (int i = 0; i < SHUF_N; i++) {
        lull_io_stop(&s[i].w.io);
        close_pipe(&s[i].w);
    }
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(shuffle_orders_a_batch_by_seed) {
    /* Eight fds ready in one poll: without a shuffle they run in epoll's
     * order; with one, in an order the seed picks, the same for the same
     * seed; over 20 seeds, several orders (a shuffle that never moved
     * anything would pass the rest). */
    int plain[SHUF_N], a[SHUF_N], b[SHUF_N];
    one_batch(-1, plain);
    int distinct = 0, differs_from_plain = 0;
    int seen[20][SHUF_N];
    for (int seed = 0; seed < 20; seed++) {
        one_batch(seed, a);
        one_batch(seed, b);
        for (int i = 0; i < SHUF_N; i++)
            CHECK_EQ(a[i], b[i]);
        bool is_new = true;
        for (int j = 0; j < distinct; j++)
            if (memcmp(seen[j], a, sizeof a) == 0) is_new = false;
        if (is_new) memcpy(seen[distinct++], a, sizeof a);
        if (memcmp(a, plain, sizeof a) != 0) differs_from_plain++;
    }
    if (distinct < 10 || differs_from_plain < 10)
        check_fail(__FILE__, __LINE__, "%d orders, %d not epoll's", distinct,
                   differs_from_plain);
}

static lull_timer *order_timers; /* the case's array: an id is an index */

static void order_timer(lull_timer *t) {
    check_trace((int)(t - order_timers));
}

static void order_task(lull_task *t) {
    (void)t;
    check_trace(100);
}

TEST(shuffle_keeps_the_contracted_orders) {
    /* With the shuffle on: timers due at one deadline run in arm order,
     * zero-delay timers and posted tasks share one FIFO (C2, C3), and a
     * re-armed timer goes to the tail, on a virtual clock. */
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    CHECK_EQ(lull_loop_shuffle(loop, true, 42), 0);
    check_trace_reset();
    lull_timer t[6];
    lull_task task;
    CHECK_EQ(lull_task_init(&task, order_task), 0);
    order_timers = t;
    for (int i = 0; i < 6; i++)
        CHECK_EQ(lull_timer_init(loop, &t[i], order_timer), 0);
    /* Same deadline, armed 3, 1, 2: fire 3, 1, 2. */
    int ids[3] = {3, 1, 2};
    for (int i = 0; i < 3; i++)
        lull_timer_start(&t[ids[i]], 5 * MS, 0);
    lull_loop_advance(loop, 5 * MS);
    int want1[] = {3, 1, 2};
    check_trace_expect(__FILE__, __LINE__, want1, 3);
    /* Zero-delay timers and a task, in arm/post order; 4 re-armed last. */
    check_trace_reset();
    lull_timer_start(&t[4], 0, 0);
    lull_task_post(loop, &task);
    lull_timer_start(&t[5], 0, 0);
    lull_timer_start(&t[4], 0, 0);
    CHECK(lull_loop_settle(loop) >= 3);
    int want2[] = {100, 5, 4};
    check_trace_expect(__FILE__, __LINE__, want2, 3);
    CHECK_EQ(lull_loop_free(loop), 0);
    CHECK_EQ(lull_loop_shuffle(NULL, true, 1), -EINVAL);
}

/* A started watcher freed (its memory reused) by the callback of another
 * watcher reported in the same poll: loop_verify's walk at the iteration
 * boundary comes too late, and the dispatch called through the scribbled
 * callback pointer (SIGSEGV, no message), where docs/API.md promises a
 * debug assert for corrupted structures. Each reported watcher is now
 * checked against its slot before its callback runs (debug builds). */
static lull_io g_pair_io[2];
static void scribble_on_the_other(lull_io *io, int events) {
    (void)events;
    memset(&g_pair_io[io == &g_pair_io[0]], 0xab, sizeof(lull_io));
}

static void free_a_started_watcher(void *arg) {
    (void)arg;
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    for (int i = 0; i < 2; i++) {
        int p[2];
        CHECK_EQ(pipe(p), 0);
        CHECK_EQ(write(p[1], "x", 1), 1);
        CHECK_EQ(lull_io_init(loop, &g_pair_io[i], p[0], scribble_on_the_other),
                 0);
        CHECK_EQ(lull_io_start(&g_pair_io[i], LULL_READABLE), 0);
    }
    lull_loop_run(loop, LULL_RUN_NOWAIT);
}

TEST(watcher_freed_while_reported_is_caught_in_debug_builds) {
    if (!check_debug_build()) return;
    CHECK(check_dies(free_a_started_watcher, NULL,
                     "lull: fd watcher corrupted (freed while started?)"));
}

/* A full pipe whose reader closes: the kernel reports EPOLLERR alone to a
 * writer waiting for room (no EPOLLOUT: still full). The write-only
 * watcher hears it as writable too, with LULL_ERROR, so a watcher that
 * writes when writable tries the write and meets EPIPE. */
TEST(write_watcher_on_a_full_pipe_hears_its_reader_close) {
    lull_loop *loop = new_loop();
    watch w;
    make_pipe(&w);
    static char buf[65536];
    while (write(w.wfd, buf, sizeof buf) > 0) { /* nobody reads */
    }
    CHECK_EQ(errno, EAGAIN);
    CHECK_EQ(lull_io_init(loop, &w.io, w.wfd, stop_on_any), 0);
    CHECK_EQ(lull_io_start(&w.io, LULL_WRITABLE), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 0); /* full: nothing yet */
    close(w.rfd);
    w.rfd = -1;
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(w.calls, 1);
    CHECK(w.last_events & LULL_WRITABLE);
    CHECK(w.last_events & LULL_ERROR);
    close_pipe(&w);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Watchers on fds whose numbers are the edges of the loop's fd table
 * (it starts at 64 entries and doubles): each can change its interest
 * and stop, as on any other number. */
TEST(watchers_on_fd_numbers_at_the_tables_edges) {
    lull_loop *loop = new_loop();
    static const int nums[] = {63, 64, 127, 128};
    enum { N = sizeof nums / sizeof nums[0] };
    struct rlimit rl;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur <= 128) {
        printf("skipped: fd limit %llu is under 129\n",
               (unsigned long long)rl.rlim_cur);
        CHECK_EQ(lull_loop_free(loop), 0);
        return;
    }
    watch w[N];
    for (int i = 0; i < N; i++) {
        make_pipe(&w[i]);
        CHECK(fcntl(nums[i], F_GETFD) < 0); /* free: this case's */
        CHECK_EQ(dup3(w[i].rfd, nums[i], O_CLOEXEC), nums[i]);
        close(w[i].rfd);
        w[i].rfd = nums[i];
        CHECK_EQ(lull_io_init(loop, &w[i].io, nums[i], count_only), 0);
        CHECK_EQ(lull_io_start(&w[i].io, LULL_READABLE), 0);
    }
    for (int i = 0; i < N; i++) {
        CHECK_EQ(lull_io_start(&w[i].io, LULL_READABLE | LULL_WRITABLE), 0);
        CHECK_EQ(lull_io_start(&w[i].io, LULL_READABLE), 0);
        fill(w[i].wfd);
    }
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(w[i].calls, 1);
        lull_io_stop(&w[i].io);
    }
    /* Stopped: a readable fd wakes nothing. */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(w[i].calls, 1);
        close_pipe(&w[i]);
    }
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Two fds ready in one batch, and the first one's callback stops the
 * other, whose event is the next in the batch: that event is dropped as
 * the stopped watcher's, not taken for an fd nobody owns, which would
 * make the loop rebuild its whole epoll set for nothing. */
static watch *g_pair;
static void stop_the_other(lull_io *io, int events) {
    watch *w = LULL_CONTAINER_OF(io, watch, io);
    w->calls++;
    w->last_events = events;
    watch *other = w == &g_pair[0] ? &g_pair[1] : &g_pair[0];
    lull_io_stop(&other->io);
}

TEST(stop_of_the_next_watcher_in_the_batch_keeps_the_epoll_set) {
    lull_loop *loop = new_loop();
    static watch w[2];
    g_pair = w;
    for (int i = 0; i < 2; i++) {
        make_pipe(&w[i]);
        CHECK_EQ(lull_io_init(loop, &w[i].io, w[i].rfd, stop_the_other), 0);
        CHECK_EQ(lull_io_start(&w[i].io, LULL_READABLE), 0);
        fill(w[i].wfd);
    }
    int set = loop->backend_fd;
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w[0].calls + w[1].calls, 1);
    CHECK(!loop->backend_stale);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(loop->backend_fd, set); /* no rebuild */
    for (int i = 0; i < 2; i++) {
        lull_io_stop(&w[i].io);
        close_pipe(&w[i]);
    }
    CHECK_EQ(lull_loop_free(loop), 0);
}
