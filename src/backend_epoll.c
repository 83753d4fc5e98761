/* The epoll backend: the only file that speaks epoll.
 *
 * Interest is level-triggered for user watchers (a watcher is called every
 * iteration while its fd is ready: nothing is lost when a callback reads
 * only part of the data) and edge-triggered for lull's own eventfd, which is
 * never read. Timeouts are nanoseconds through epoll_pwait2; where it
 * fails (kernels before 5.11, and sandboxes such as seccomp filters or
 * container runtimes that answer it with EPERM, at the probe or later), a
 * millisecond epoll_wait rounded up, never down, since waking early would be
 * a wasted wakeup. A poll error is never taken for "no events": EINTR is
 * reported as such, anything else fails the run (src/loop.c). Loop thread
 * only. */
#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"

/* Events collected per poll. More ready fds than this are simply reported
 * by the next poll (level-triggered), so this bounds a batch, not a loss. */
#define EVENTS_CAP 256

int lull__backend_init(lull_loop *loop) {
    loop->backend_fd = epoll_create1(EPOLL_CLOEXEC);
    if (loop->backend_fd < 0) return -errno;
    loop->events = calloc(EVENTS_CAP, sizeof *loop->events);
    if (!loop->events) {
        close(loop->backend_fd);
        return -ENOMEM;
    }
    /* Any failure means "use epoll_wait": ENOSYS on old kernels, EPERM (or
     * whatever a filter chose) in a sandbox. */
    struct timespec zero = {0, 0};
    loop->have_pwait2 =
        epoll_pwait2(loop->backend_fd, loop->events, 1, &zero, NULL) >= 0;
    return 0;
}

void lull__backend_close(lull_loop *loop) {
    if (loop->backend_fd >= 0) close(loop->backend_fd);
    loop->backend_fd = -1;
    free(loop->events);
    loop->events = NULL;
}

static uint32_t to_epoll(int events) {
    uint32_t e = 0;
    if (events & LULL_READABLE) e |= EPOLLIN | EPOLLRDHUP;
    if (events & LULL_WRITABLE) e |= EPOLLOUT;
    return e;
}

static int from_epoll(uint32_t e, int interest) {
    int events = 0;
    if (e & EPOLLIN) events |= LULL_READABLE;
    if (e & EPOLLOUT) events |= LULL_WRITABLE;
    if (e & (EPOLLHUP | EPOLLRDHUP)) events |= LULL_HANGUP;
    /* Hang-up and error surface through the calls the watcher makes anyway:
     * report them with every interest it has, so a read sees EOF or the
     * error and a write sees EPIPE. */
    if (e & EPOLLERR) events |= LULL_ERROR | interest;
    if (e & EPOLLHUP) events |= interest & LULL_READABLE;
    return (events & interest) | (events & (LULL_HANGUP | LULL_ERROR));
}

int lull__backend_modify(lull_loop *loop, lull_io *io, int old, int events) {
    int op;
    if (events == 0) {
        if (old == 0) return 0;
        op = EPOLL_CTL_DEL;
    } else {
        op = old ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    }
    struct epoll_event ev = {.events = to_epoll(events), .data.ptr = io};
    if (epoll_ctl(loop->backend_fd, op, io->fd, &ev) != 0) {
        int err = errno;
        /* A watcher removed after its fd was closed: the kernel already
         * dropped it. */
        if (op == EPOLL_CTL_DEL && (err == EBADF || err == ENOENT)) err = 0;
        if (err) return -err;
    }
    return 0;
}

int lull__backend_add_wakeup(lull_loop *loop, int fd) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.ptr = NULL};
    return epoll_ctl(loop->backend_fd, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0
                                                                    : -errno;
}

/* A millisecond timeout for epoll_wait: rounded up, and clamped without
 * ever computing past INT64_MAX. */
static int timeout_ms(int64_t timeout_ns) {
    if (timeout_ns < 0) return -1;
    int64_t ms = timeout_ns / 1000000 + (timeout_ns % 1000000 != 0);
    return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

int lull__backend_poll(lull_loop *loop, int64_t timeout_ns) {
    int n = -1;
    loop->events_len = 0;
    loop->events_next = 0;
    if (loop->have_pwait2) {
        struct timespec ts, *tp = NULL;
        if (timeout_ns >= 0) {
            ts.tv_sec = timeout_ns / 1000000000;
            ts.tv_nsec = timeout_ns % 1000000000;
            tp = &ts;
        }
        n = epoll_pwait2(loop->backend_fd, loop->events, EVENTS_CAP, tp, NULL);
        /* Refused after a successful probe (a filter installed later): the
         * same wait again through epoll_wait, from now on. */
        if (n < 0 && errno != EINTR) loop->have_pwait2 = false;
    }
    if (!loop->have_pwait2)
        n = epoll_wait(loop->backend_fd, loop->events, EVENTS_CAP,
                       timeout_ms(timeout_ns));
    if (n < 0) return -errno;
    loop->events_len = n;
    return n;
}

bool lull__backend_next(lull_loop *loop, lull_io **io, int *events) {
    while (loop->events_next < loop->events_len) {
        struct epoll_event *ev = &loop->events[loop->events_next++];
        lull_io *w = ev->data.ptr;
        if (!w) continue; /* the wake-up fd, or stopped earlier in the batch */
        int e = from_epoll(ev->events, w->events);
        if (!e) continue;
        *io = w;
        *events = e;
        return true;
    }
    loop->events_len = 0;
    loop->events_next = 0;
    return false;
}

void lull__backend_forget(lull_loop *loop, lull_io *io) {
    for (int i = loop->events_next; i < loop->events_len; i++)
        if (loop->events[i].data.ptr == io) loop->events[i].data.ptr = NULL;
}
