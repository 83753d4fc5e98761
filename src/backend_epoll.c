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
 * reported as such, anything else fails the run (src/loop.c).
 *
 * A registration never carries a pointer to the caller's watcher: its data
 * is a slot in the loop's table of started watchers plus that slot's
 * generation, bumped whenever the slot is released. The kernel keys a
 * registration by open file, not by fd number, so one whose fd was closed
 * before lull_io_stop survives EPOLL_CTL_DEL (EBADF) while a dup, a forked
 * child or an fd passed over a socket keeps the file open, and goes on
 * reporting. Such a report names a free slot or an old generation: it is
 * skipped (no watcher is touched), and before the next poll the epoll set
 * is rebuilt from the started watchers, which is the only way to drop a
 * registration whose fd number is gone. The rebuild costs O(watchers) once
 * per stale report, never per close or per event.
 *
 * A number is also reused: a watcher left started over a closed fd, and a
 * new watcher started on the number the kernel gave a new file. The
 * registration at that number is then the new watcher's, and the old
 * one's stop must not delete it, nor its restart modify it. So the loop
 * keeps, by fd number, the slot whose registration the number names (the
 * last watcher whose add succeeded there); only that slot's watcher
 * deletes or modifies it, and a rebuild registers only owners.
 *
 * Loop thread only. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"

/* The first growth of the watcher table: 64 slots are one 1 KiB block. */
#define SLOTS_MIN_CAP 64

/* A registration's data: slot + 1 in the low half (0 is the wake-up fd, or
 * readiness forgotten by a stop), the slot's generation in the high half.
 * A generation would have to wrap (2^32 stops of one slot) for a stale
 * registration to pass for the slot's current watcher. */
static uint64_t data_of(const lull_loop *loop, const lull_io *io) {
    return (uint64_t)loop->io_slots[io->slot].gen << 32 | (io->slot + 1u);
}

/* The started watcher a registration's data names, or NULL when it names
 * none (a stale registration). */
static lull_io *watcher_of(const lull_loop *loop, uint64_t data) {
    uint32_t slot = (uint32_t)data - 1u;
    if (slot >= loop->io_slots_cap) return NULL;
    const lull__io_slot *s = &loop->io_slots[slot];
    return s->gen == (uint32_t)(data >> 32) ? s->io : NULL;
}

static int slot_acquire(lull_loop *loop, lull_io *io) {
    if (!loop->io_free) {
        uint32_t cap =
            loop->io_slots_cap ? loop->io_slots_cap * 2 : SLOTS_MIN_CAP;
        lull__io_slot *slots =
            realloc(loop->io_slots, (size_t)cap * sizeof *slots);
        if (!slots) return -ENOMEM;
        /* New slots go on the free list lowest first. */
        for (uint32_t i = cap; i-- > loop->io_slots_cap;) {
            slots[i] = (lull__io_slot){.next_free = loop->io_free};
            loop->io_free = i + 1;
        }
        loop->io_slots = slots;
        loop->io_slots_cap = cap;
    }
    uint32_t slot = loop->io_free - 1;
    loop->io_free = loop->io_slots[slot].next_free;
    loop->io_slots[slot].io = io;
    io->slot = slot;
    return 0;
}

/* Frees io's slot, first dropping readiness already collected for it, so
 * that it is neither handed out later in this batch nor mistaken for a
 * stale registration. */
static void slot_release(lull_loop *loop, lull_io *io) {
    uint64_t data = data_of(loop, io);
    for (int i = loop->events_next; i < loop->events_len; i++)
        if (loop->events[i].data.u64 == data) loop->events[i].data.u64 = 0;
    lull__io_slot *s = &loop->io_slots[io->slot];
    s->io = NULL;
    s->gen++;
    s->next_free = loop->io_free;
    loop->io_free = io->slot + 1;
}

/* The slot + 1 that owns fd's registration, 0 for none. */
static uint32_t owner_of(const lull_loop *loop, int fd) {
    return (uint32_t)fd < loop->fd_owner_cap ? loop->fd_owner[fd] : 0;
}

/* Room in the owner table for fd: -ENOMEM, or 0. It grows by doubling as
 * higher numbers are watched; a start, never a dispatch, pays for it. */
static int owner_room(lull_loop *loop, int fd) {
    if ((uint32_t)fd < loop->fd_owner_cap) return 0;
    /* Size the table to a number only once it names an open file: a made-up
     * one (INT_MAX) would reserve and zero 8 GiB before epoll_ctl refused it
     * with EBADF. Only growth pays for the check, and growth is rare. */
    if (fcntl(fd, F_GETFD) < 0) return -errno;
    uint32_t cap = loop->fd_owner_cap ? loop->fd_owner_cap : SLOTS_MIN_CAP;
    while (cap <= (uint32_t)fd)
        cap *= 2;
    uint32_t *t = realloc(loop->fd_owner, (size_t)cap * sizeof *t);
    if (!t) return -ENOMEM;
    for (uint32_t i = loop->fd_owner_cap; i < cap; i++)
        t[i] = 0;
    loop->fd_owner = t;
    loop->fd_owner_cap = cap;
    return 0;
}

int lull__backend_init(lull_loop *loop) {
    loop->wake_fd = -1;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    /* Never the program's closed stdin: a child would inherit the set. */
    loop->backend_fd = ep < 0 ? -errno : lull__fd_above_stdio(ep);
    if (loop->backend_fd < 0) return loop->backend_fd;
    loop->events = calloc(LULL__EVENTS_CAP, sizeof *loop->events);
    /* lull__backend_close, which the caller runs on failure, closes the
     * epoll fd: closing it here too closed the number twice. */
    if (!loop->events) return -ENOMEM;
    /* Any failure means "use epoll_wait": ENOSYS on old kernels, EPERM (or
     * whatever a filter chose) in a sandbox. */
    struct timespec zero = {0, 0};
    loop->have_pwait2 =
        epoll_pwait2(loop->backend_fd, loop->events, 1, &zero, NULL) >= 0;
    return 0;
}

void lull__backend_close(lull_loop *loop) {
    lull__backend_host_forget(loop);
    if (loop->backend_fd >= 0) close(loop->backend_fd);
    loop->backend_fd = -1;
    free(loop->events);
    loop->events = NULL;
    free(loop->io_slots);
    loop->io_slots = NULL;
    loop->io_slots_cap = loop->io_free = 0;
    free(loop->fd_owner);
    loop->fd_owner = NULL;
    loop->fd_owner_cap = 0;
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
    /* A socket shut both ways reports EPOLLHUP alone, without EPOLLOUT, to a
     * writer waiting for room: with the read interest only, a write-only
     * watcher would hear a bare LULL_HANGUP, one that writes when writable
     * (a stream) would never try its write, and the level-triggered HUP
     * would wake the loop for ever. */
    if (e & EPOLLHUP) events |= interest;
    return (events & interest) | (events & (LULL_HANGUP | LULL_ERROR));
}

int lull__backend_modify(lull_loop *loop, lull_io *io, int old, int events) {
    LULL_ASSERT_OWN_PROCESS(loop);
    struct epoll_event ev = {.events = to_epoll(events)};
    bool owner = old != 0 && owner_of(loop, io->fd) == io->slot + 1;
    if (events == 0) {
        if (old == 0) return 0;
        /* EBADF or ENOENT here means the fd was closed first. Whether the
         * registration went with it is unknowable from here; if it did not,
         * its first report finds the slot released and rebuilds the set.
         * Not the owner: the number names another watcher's file now. */
        if (owner) {
            (void)epoll_ctl(loop->backend_fd, EPOLL_CTL_DEL, io->fd, &ev);
            loop->fd_owner[io->fd] = 0;
        }
        slot_release(loop, io);
        return 0;
    }
    /* Started, and its number taken by another watcher since: its own fd
     * was closed, and nothing it could modify is its own. */
    if (old != 0 && !owner) return -EBADF;
    if (old == 0) {
        int err = owner_room(loop, io->fd);
        if (!err) err = slot_acquire(loop, io);
        if (err) return err;
    }
    ev.data.u64 = data_of(loop, io);
    int rc = epoll_ctl(loop->backend_fd, old ? EPOLL_CTL_MOD : EPOLL_CTL_ADD,
                       io->fd, &ev);
    /* The file is registered at this number, yet no watcher's registration
     * is: a watcher whose fd was closed before its stop left it while
     * another reference kept the file open, and the same file is back at
     * the number (a dup2 from that copy). Nobody holds the fd: the new
     * watcher takes the registration over rather than hear -EEXIST until
     * the orphan happens to report and the set is rebuilt. Never the
     * wake-up fd's, which has no watcher either: a stop would take it out
     * of the set, and remote posts would no longer end a sleep. */
    if (rc != 0 && errno == EEXIST && old == 0 && io->fd != loop->wake_fd &&
        !owner_of(loop, io->fd))
        rc = epoll_ctl(loop->backend_fd, EPOLL_CTL_MOD, io->fd, &ev);
    if (rc != 0) {
        /* A started watcher's registration went with its file: its fd was
         * closed, and the number names another file nobody watches (a
         * number nobody reopened says EBADF itself). */
        int err = old != 0 && errno == ENOENT ? -EBADF : -errno;
        if (old == 0) slot_release(loop, io);
        return err;
    }
    loop->fd_owner[io->fd] = io->slot + 1;
    return 0;
}

int lull__backend_add_wakeup(lull_loop *loop, int fd) {
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = 0};
    if (epoll_ctl(loop->backend_fd, EPOLL_CTL_ADD, fd, &ev) != 0) return -errno;
    loop->wake_fd = fd;
    return 0;
}

/* The fd a host waits on (lull_loop_backend_fd): not the backend's own
 * set, which a rebuild replaces, but a set holding it, made at the first
 * call. A rebuild moves the new set into it, so the host's fd, and its own
 * registration of that fd (a libuv uv_poll_t), stay valid, and takes the
 * old set out. Readable while the backend's set has readiness. */
int lull__backend_host_fd(lull_loop *loop) {
    if (loop->host_fd >= 0) return loop->host_fd;
    int fd = epoll_create1(EPOLL_CLOEXEC);
    fd = fd < 0 ? -errno : lull__fd_above_stdio(fd);
    if (fd < 0) return fd;
    struct epoll_event ev = {.events = EPOLLIN};
    if (epoll_ctl(fd, EPOLL_CTL_ADD, loop->backend_fd, &ev) != 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    loop->host_fd = fd;
    return fd;
}

void lull__backend_host_forget(lull_loop *loop) {
    if (loop->host_fd >= 0) close(loop->host_fd);
    loop->host_fd = -1;
}

int lull__backend_rebuild(lull_loop *loop) {
    int fd = epoll_create1(EPOLL_CLOEXEC);
    fd = fd < 0 ? -errno : lull__fd_above_stdio(fd);
    if (fd < 0) return fd;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = 0};
    if (loop->wake_fd >= 0 &&
        epoll_ctl(fd, EPOLL_CTL_ADD, loop->wake_fd, &ev) != 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    for (uint32_t i = 0; i < loop->io_slots_cap; i++) {
        lull_io *io = loop->io_slots[i].io;
        /* A watcher whose number another took stays unregistered. */
        if (!io || owner_of(loop, io->fd) != i + 1) continue;
        ev.events = to_epoll(io->events);
        ev.data.u64 = data_of(loop, io);
        /* A started watcher whose fd is closed (EBADF), or whose number
         * now names a file epoll cannot watch (EPERM), has nothing to
         * report in the old set either; it stays started, unregistered.
         * Out of kernel memory (ENOMEM, ENOSPC), a live watcher would be
         * left deaf: keep the old set, and rebuild at the next poll. */
        if (epoll_ctl(fd, EPOLL_CTL_ADD, io->fd, &ev) != 0 &&
            (errno == ENOMEM || errno == ENOSPC)) {
            int err = -errno;
            close(fd);
            return err;
        }
    }
    struct epoll_event host = {.events = EPOLLIN};
    if (loop->host_fd >= 0 &&
        epoll_ctl(loop->host_fd, EPOLL_CTL_ADD, fd, &host) != 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    /* Taken out of the host's set by name: a close removes it only with
     * the last reference to the old set, and a forked child that never
     * touches the loop holds one until it exits or execs, while the old
     * set goes on reporting the fds it still holds. */
    if (loop->host_fd >= 0)
        (void)epoll_ctl(loop->host_fd, EPOLL_CTL_DEL, loop->backend_fd, NULL);
    close(loop->backend_fd);
    loop->backend_fd = fd;
    loop->backend_stale = false;
    loop->events_len = loop->events_next = 0;
    return 0;
}

/* A millisecond timeout for epoll_wait: rounded up, and clamped without
 * ever computing past INT64_MAX. */
static int timeout_ms(int64_t timeout_ns) {
    if (timeout_ns < 0) return -1;
    int64_t ms = timeout_ns / 1000000 + (timeout_ns % 1000000 != 0);
    return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

/* lull_loop_shuffle: a batch of readiness in an order drawn from the
 * loop's generator (splitmix64, then a Fisher-Yates pass), so a seed picks
 * one of the orders epoll may report and the same seed picks it again.
 * Only the order of different fds moves: each fd is in a batch once. */
static uint64_t shuffle_next(lull_loop *loop) {
    uint64_t z = (loop->shuffle_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__attribute__((noinline)) static void shuffle_batch(lull_loop *loop, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(shuffle_next(loop) % (uint64_t)(i + 1));
        struct epoll_event t = loop->events[i];
        loop->events[i] = loop->events[j];
        loop->events[j] = t;
    }
}

int lull_loop_shuffle(lull_loop *loop, bool on, uint64_t seed) {
    if (!loop) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(loop);
    loop->shuffle = on;
    loop->shuffle_state = seed;
    return 0;
}

/* A wait that may block: epoll_pwait2 only where a millisecond cannot say
 * the timeout. A wait without limit (-1) and whole milliseconds go through
 * epoll_wait, which costs 150-450 ns less per call here (measured: 254-443
 * against 464-756 ns for a zero timeout). Out of line, so a look keeps
 * lull__backend_poll's frame small. Returns epoll's result (errno set). */
LULL__HOT __attribute__((noinline)) static int wait_events(lull_loop *loop,
                                                           int64_t timeout_ns) {
    int n = -1;
    bool whole_ms = timeout_ns < 0 || timeout_ns % 1000000 == 0;
    if (loop->have_pwait2 && !whole_ms) {
        struct timespec ts = {.tv_sec = timeout_ns / 1000000000,
                              .tv_nsec = timeout_ns % 1000000000};
        n = epoll_pwait2(loop->backend_fd, loop->events, LULL__EVENTS_CAP, &ts,
                         NULL);
        /* Refused after a successful probe (a filter installed later): the
         * same wait again through epoll_wait, from now on. */
        if (n < 0 && errno != EINTR) loop->have_pwait2 = false;
    }
    if (!loop->have_pwait2 || whole_ms)
        n = epoll_wait(loop->backend_fd, loop->events, LULL__EVENTS_CAP,
                       timeout_ms(timeout_ns));
    return n;
}

LULL__HOT int lull__backend_collected(lull_loop *loop, int n) {
    if (n < 0) return -errno;
    loop->events_next = 0;
    loop->events_len = n;
    /* Off, this is one predictable branch per poll. */
    if (LULL_UNLIKELY(loop->shuffle) && n > 1) shuffle_batch(loop, n);
    return n;
}

LULL__HOT int lull__backend_poll(lull_loop *loop, int64_t timeout_ns) {
    /* A failed rebuild (out of fds) is retried at every poll: meanwhile the
     * stale registration may end sleeps early, but calls no watcher. */
    if (LULL_UNLIKELY(loop->backend_stale)) (void)lull__backend_rebuild(loop);
    loop->events_len = 0;
    loop->events_next = 0;
    /* A look (0; a loop that checks I/O on every hop makes one per hop)
     * is a plain epoll_wait, with nothing to convert. */
    int n = timeout_ns == 0 ? epoll_wait(loop->backend_fd, loop->events,
                                         LULL__EVENTS_CAP, 0)
                            : wait_events(loop, timeout_ns);
    return lull__backend_collected(loop, n);
}

bool lull__backend_next(lull_loop *loop, lull_io **io, int *events) {
    while (loop->events_next < loop->events_len) {
        struct epoll_event *ev = &loop->events[loop->events_next++];
        if (!ev->data.u64) continue; /* the wake-up fd, or forgotten */
        lull_io *w = watcher_of(loop, ev->data.u64);
        if (LULL_UNLIKELY(!w)) {
            loop->backend_stale = true; /* nobody owns it: rebuild */
            continue;
        }
        /* A watcher freed by a callback of this batch: loop_verify's walk
         * at the iteration's end is too late. Its own fields only. */
        LULL_ASSERT(w->slot == (uint32_t)ev->data.u64 - 1u && w->loop == loop &&
                        (w->flags & LULL__IO_ACTIVE),
                    "lull: fd watcher corrupted (freed while started?)");
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

lull_io *lull__backend_first(lull_loop *loop, bool *wakeup) {
    uint64_t data = loop->events_len ? loop->events[0].data.u64 : 0;
    *wakeup = loop->events_len && data == 0;
    return data ? watcher_of(loop, data) : NULL;
}
