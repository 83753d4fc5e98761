/* The backend contract: how the core asks the kernel about fds.
 *
 * The core keeps timers, queues and the order of an iteration; a backend
 * only registers interest and waits. Readiness collected by one poll is
 * handed out one event at a time, so that a watcher stopped by an earlier
 * callback of the same batch can be forgotten before its turn. */
#ifndef LULL_BACKEND_H
#define LULL_BACKEND_H

#include <sys/epoll.h>

#include "internal.h"

/* Events collected per poll. More ready fds than this are simply reported
 * by the next poll (level-triggered), so this bounds a batch, not a loss. */
#define LULL__EVENTS_CAP 256

/* 0 or a negative errno; on failure the caller runs lull__backend_close,
 * which releases what init had made. */
int lull__backend_init(lull_loop *loop);
void lull__backend_close(lull_loop *loop);
/* Moves the kernel's interest for io from `old` to `events` (either may be
 * 0: add, remove). 0 or a negative errno. Removal always succeeds and drops
 * io's readiness already collected, so io is not handed out again. */
int lull__backend_modify(lull_loop *loop, lull_io *io, int old, int events);
/* Registers the loop's wake-up fd (src/remote.c): readable, edge-triggered,
 * and with no watcher behind it, so its readiness ends a sleep and is then
 * skipped by lull__backend_next. 0 or a negative errno. */
int lull__backend_add_wakeup(lull_loop *loop, int fd);
/* Replaces the epoll set with a new one holding the wake-up fd last given
 * to lull__backend_add_wakeup and every started watcher. Used when a
 * registration nobody owns reported; also what a forked child needs. 0 or a
 * negative errno (the old set is kept). */
int lull__backend_rebuild(lull_loop *loop);
/* lull_loop_backend_fd's fd, made at the first call (or a negative errno),
 * and its close: lull__backend_close, and lull_loop_fork (the parent's). */
int lull__backend_host_fd(lull_loop *loop);
void lull__backend_host_forget(lull_loop *loop);
/* Waits up to timeout_ns (-1: no limit, 0: do not block) and collects
 * readiness. Returns the number of events collected, -EINTR when a signal
 * ended the wait, or another negative errno when the kernel refused the
 * wait (nothing collected either way). */
int lull__backend_poll(lull_loop *loop, int64_t timeout_ns);
/* Takes epoll's result n (errno set when negative) as the poll's batch:
 * returns n, or -errno. */
int lull__backend_collected(lull_loop *loop, int n);
/* lull__backend_poll(loop, 0) for a loop that looks on every hop
 * (src/loop.c's plain hops), inline where the look finds nothing. It asks
 * more of its caller: no registration nobody owns (backend_stale) waiting
 * to be rebuilt, and no event left from an earlier poll (events_len and
 * events_next 0), which an empty look then leaves as they are. */
static inline int lull__backend_look(lull_loop *loop) {
    int n = epoll_wait(loop->backend_fd, loop->events, LULL__EVENTS_CAP, 0);
    return LULL_LIKELY(n == 0) ? 0 : lull__backend_collected(loop, n);
}
/* The next collected event that is still wanted, or false when done. */
bool lull__backend_next(lull_loop *loop, lull_io **io, int *events);
/* Right after a poll that collected events: the started watcher the first
 * one belongs to, or NULL with *wakeup telling the wake-up fd (true) from
 * a stale registration (false). For attributing the wakeup. */
lull_io *lull__backend_first(lull_loop *loop, bool *wakeup);

#endif
