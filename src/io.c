/* fd watchers: readable/writable interest on a caller's descriptor.
 *
 * Owns: a watcher's state and its callback dispatch. A watcher never closes
 * its fd. Invariant: io_active counts started watchers; a stopped
 * watcher's collected readiness is forgotten at once, so no callback runs
 * after lull_io_stop, even later in the same batch, and the watcher's memory
 * is not touched after it, whatever the caller closed first: the kernel's
 * registrations never point at a watcher (src/backend_epoll.c). A watcher
 * still started when its fd was closed and the number reused by another
 * watcher leaves that one's registration alone (the backend knows which
 * watcher each number's registration is). Loop thread only. */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "backend.h"

int lull__fd_above_stdio(int fd) {
    if (fd > 2) return fd;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    int err = errno;
    close(fd);
    return moved >= 0 ? moved : -err;
}

void lull__io_setup(lull_loop *loop, lull_io *io, int fd, lull_io_fn fn) {
    io->loop = loop;
    io->fn = fn;
    io->fd = fd;
    io->events = 0;
    io->flags = 0;
    io->data = NULL;
}

int lull_io_init(lull_loop *loop, lull_io *io, int fd, lull_io_fn fn) {
    if (!loop || !io || fd < 0 || !fn) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(loop);
    /* A started watcher: clearing it would leave its slot and registration
     * delivering to it and its loop counting it, with no stop able to end
     * either. Asked by address (io is garbage before its first init) of
     * the process's set of handles in use, not of `loop`'s: one started
     * on another loop is as live, and that loop's set cannot be asked from
     * here. A programming error that debug builds stop at, as a stream
     * opened twice is. */
    bool live = lull__inuse_has(io);
    LULL_ASSERT(!live, "lull: lull_io_init on a started watcher");
    if (live) return -EBUSY;
    lull__io_setup(loop, io, fd, fn);
    io->flags = LULL__IO_USER;
    return 0;
}

static void count_active(lull_io *io, int delta) {
    io->loop->io_active += delta;
    if (!(io->flags & LULL__IO_UNREF)) io->loop->io_ref += delta;
}

LULL__HOT int lull_io_start(lull_io *io, int events) {
    if (!io || !io->loop || !io->fn) return -EINVAL;
    if (events & ~(LULL_READABLE | LULL_WRITABLE)) return -EINVAL;
    if (!(events & (LULL_READABLE | LULL_WRITABLE))) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(io->loop);
    /* A user's watcher is entered before it is started: a start never
     * fails half done. */
    bool enter =
        (io->flags & (LULL__IO_ACTIVE | LULL__IO_USER)) == LULL__IO_USER;
    if (enter) {
        int rc = lull__inuse_add(io);
        if (rc < 0) return rc;
    }
    /* io->events is exactly what the kernel holds (0 while stopped). */
    int err = lull__backend_modify(io->loop, io, io->events, events);
    if (err) {
        if (enter) lull__inuse_remove(io);
        return err;
    }
    io->events = events;
    if (!(io->flags & LULL__IO_ACTIVE)) {
        io->flags |= LULL__IO_ACTIVE;
        count_active(io, +1);
    }
    return 0;
}

LULL__HOT void lull_io_stop(lull_io *io) {
    if (!io || !io->loop || !(io->flags & LULL__IO_ACTIVE)) return;
    LULL_ASSERT_LOOP_THREAD(io->loop);
    lull__backend_modify(io->loop, io, io->events, 0);
    io->events = 0;
    io->flags &= ~LULL__IO_ACTIVE;
    count_active(io, -1);
    if (io->flags & LULL__IO_USER) lull__inuse_remove(io);
}

static void set_unref(lull_io *io, bool unref) {
    if (!io || !io->loop) return;
    bool was = io->flags & LULL__IO_UNREF;
    if (was == unref) return;
    if (io->flags & LULL__IO_ACTIVE) io->loop->io_ref += unref ? -1 : 1;
    if (unref)
        io->flags |= LULL__IO_UNREF;
    else
        io->flags &= ~LULL__IO_UNREF;
}

void lull_io_ref(lull_io *io) {
    set_unref(io, false);
}

void lull_io_unref(lull_io *io) {
    set_unref(io, true);
}

LULL__HOT void lull__io_dispatch(lull_loop *loop, lull_io *io, int events) {
    loop->current = (lull_any_fn)io->fn;
    loop->tasks_run++;
    if (LULL_UNLIKELY(loop->settling)) lull__settle_note_io(loop, io);
    io->fn(io, events);
}
