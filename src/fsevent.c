/* File-system events: inotify watches as handles.
 *
 * Owns: a loop's inotify fd and its read buffer (struct lull__fsevents,
 * allocated with the loop's first started watch and freed with its last),
 * the list of started watches, and the coalescing of one read's events.
 * One thread: the loop's.
 *
 * One fd for all of a loop's watches, so that both halves of a rename
 * between two watched directories come through one queue and can be
 * matched by inotify's cookie. A readable fd is read once per iteration
 * (BUF_SIZE bytes at most: the rest waits, level-triggered, so a storm of
 * events costs a bounded slice), and that read's events are coalesced per
 * (watch, name) into one callback each, in the order of their first
 * event: a burst of writes to one file is one MODIFIED per turn.
 *
 * Whose code runs where. A callback may stop any watch, start others or
 * stop the last one: entries are matched to their watch by descriptor at
 * delivery time (a stopped watch has none), and the fd and buffer are
 * freed only after the batch (`delivering`).
 *
 * The five rows (README, "The contracts"):
 *   Trigger                 the inotify fd is readable
 *   Source of truth         the kernel's event queue
 *   Pending-work predicate  the fd stays readable (level-triggered)
 *   Next deadline or retry  none
 *   Quiet condition         always between events: the fd waits in epoll,
 *                           no task, no timer */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "internal.h"
#include "own_name.h"

/* One read: at least one event with the longest name fits; 64 KiB takes
 * ~2,000 events of short names, a storm's worth per iteration. */
#define BUF_SIZE ((size_t)64 << 10)
/* Entries one read can yield (each event is at least 16 bytes), and the
 * coalescing table: a power of two at least twice that. */
#define MAX_ENTRIES (BUF_SIZE / sizeof(struct inotify_event))
#define TABLE_SIZE  (2 * MAX_ENTRIES)

/* What a watch asks of the kernel. IN_CLOSE_WRITE is left out: a written
 * file reports IN_MODIFY already, and a created-then-closed file would
 * cost two events per file (a burst of 10,000 new files must fit the
 * kernel's 16,384-event queue). */
#define WATCH_MASK                                                             \
    (IN_CREATE | IN_MODIFY | IN_ATTRIB | IN_DELETE | IN_MOVED_FROM |           \
     IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF)

typedef struct entry {
    int wd;
    unsigned events;   /* LULL_FSEVENT_* */
    const char *name;  /* in the buffer, or NULL */
    const char *other; /* a move's other name, or NULL */
    uint32_t cookie;   /* a pending IN_MOVED_FROM's, to match its TO */
    bool left;         /* the name was deleted or moved away: an arrival
                          after that starts an entry of its own */
} entry;

struct lull__fsevents {
    lull_io io;         /* the inotify fd (first: tests reach it) */
    lull_fsevent *head; /* started watches */
    uint32_t refs;      /* ... referenced ones */
    bool delivering;    /* inside the batch: free only after it */
    /* The overflow's snapshot of the started watches' descriptors, grown
     * by each start so that reporting an overflow never allocates. */
    int *snap;
    size_t watches, snap_cap;
    /* The started watches by descriptor (FORKED ones are in no table):
     * open addressing, linear probing, at most half full, grown by each
     * start. A batch looks up every entry's watch, so a list walk cost
     * entries x watches (10.9 us an event with 10,000 watches). */
    lull_fsevent **wd_table;
    size_t wd_cap;  /* a power of two, or 0 */
    lull_task gone; /* after fork: ends the watches inherited (FORKED) */
    char buf[BUF_SIZE]
        __attribute__((aligned(__alignof__(struct inotify_event))));
    entry entries[MAX_ENTRIES];
    int32_t table[TABLE_SIZE]; /* index + 1 into entries, 0 = empty */
};

/* lull_fsevent.wd of a watch inherited through fork(): started, but of
 * the parent's inotify instance, its GONE still to come (gone_task). */
#define FORKED (-2)

static void on_inotify(lull_io *io, int events);
LULL__OWN_NAME(on_inotify, "lull_fsevent inotify fd", struct lull__fsevents,
               io);
static void gone_task(lull_task *t);
LULL__OWN_NAME(gone_task, "lull_fsevent watches ended by fork",
               struct lull__fsevents, gone);

int lull_fsevent_init(lull_loop *loop, lull_fsevent *w) {
    if (!loop || !w) return -EINVAL;
    /* A started watch: clearing it would cut the loop's list at it (the
     * watches started before it never heard from again). Asked by
     * address: w is garbage before its first init; and on the loop's
     * thread only, the list's. */
    if (loop->fsevents && lull__on_loop_thread(loop))
        for (lull_fsevent *s = loop->fsevents->head; s; s = s->next)
            if (s == w) return -EBUSY;
    /* Started on another loop (asked of the process's set of handles in
     * use: that loop's list is its thread's). */
    if (lull__inuse_has(w)) return -EBUSY;
    void *data = w->data;
    memset(w, 0, sizeof *w);
    w->data = data;
    w->loop = loop;
    w->wd = -1;
    w->ref = true;
    return 0;
}

/* A descriptor's first slot. inotify hands them out counting up (and
 * wrapping), so the low bits alone spread them. */
static size_t wd_home(const struct lull__fsevents *fs, int wd) {
    return (uint32_t)wd & (fs->wd_cap - 1);
}

static lull_fsevent *by_wd(struct lull__fsevents *fs, int wd) {
    if (!fs->wd_cap) return NULL;
    for (size_t i = wd_home(fs, wd);; i = (i + 1) & (fs->wd_cap - 1)) {
        lull_fsevent *w = fs->wd_table[i];
        if (!w || w->wd == wd) return w;
    }
}

static void wd_insert(struct lull__fsevents *fs, lull_fsevent *w) {
    size_t i = wd_home(fs, w->wd);
    while (fs->wd_table[i])
        i = (i + 1) & (fs->wd_cap - 1);
    fs->wd_table[i] = w;
}

/* Takes w out, moving back each later watch of the run that probing
 * would no longer reach past the hole (no tombstones). */
static void wd_remove(struct lull__fsevents *fs, lull_fsevent *w) {
    size_t mask = fs->wd_cap - 1, i = wd_home(fs, w->wd);
    while (fs->wd_table[i] != w)
        i = (i + 1) & mask;
    fs->wd_table[i] = NULL;
    for (size_t j = (i + 1) & mask; fs->wd_table[j]; j = (j + 1) & mask) {
        size_t home = wd_home(fs, fs->wd_table[j]->wd);
        /* Stays if its home lies cyclically in (i, j]. */
        if (((j - home) & mask) < ((j - i) & mask)) continue;
        fs->wd_table[i] = fs->wd_table[j];
        fs->wd_table[j] = NULL;
        i = j;
    }
}

/* Room for one more started watch in the snapshot and the table. */
static int make_room(struct lull__fsevents *fs) {
    if (fs->watches == fs->snap_cap) {
        size_t cap = fs->snap_cap ? 2 * fs->snap_cap : 16;
        int *snap = realloc(fs->snap, cap * sizeof *snap);
        if (!snap) return -ENOMEM;
        fs->snap = snap;
        fs->snap_cap = cap;
    }
    if (2 * (fs->watches + 1) <= fs->wd_cap) return 0;
    size_t cap = fs->wd_cap ? 2 * fs->wd_cap : 32;
    lull_fsevent **t = calloc(cap, sizeof *t);
    if (!t) return -ENOMEM;
    lull_fsevent **old = fs->wd_table;
    size_t old_cap = fs->wd_cap;
    fs->wd_table = t;
    fs->wd_cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i]) wd_insert(fs, old[i]);
    free(old);
    return 0;
}

static void release_if_unused(lull_loop *loop) {
    struct lull__fsevents *fs = loop->fsevents;
    if (!fs || fs->head || fs->delivering) return;
    lull_task_cancel(&fs->gone); /* every inherited watch stopped first */
    lull_io_stop(&fs->io);
    close(fs->io.fd);
    free(fs->snap);
    free(fs->wd_table);
    free(fs);
    loop->fsevents = NULL;
}

static int open_inotify(lull_loop *loop) {
    if (loop->fsevents) return 0;
    struct lull__fsevents *fs = malloc(sizeof *fs);
    if (!fs) return -ENOMEM;
    memset(fs, 0, offsetof(struct lull__fsevents, buf));
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    /* Never the program's closed stdio (lull__fd_above_stdio). */
    fd = fd < 0 ? -errno : lull__fd_above_stdio(fd);
    if (fd < 0) {
        free(fs);
        return fd;
    }
    lull__io_setup(loop, &fs->io, fd, on_inotify);
    int rc = lull_io_start(&fs->io, LULL_READABLE);
    if (rc < 0) {
        close(fd);
        free(fs);
        return rc;
    }
    lull_io_unref(&fs->io); /* referenced while a referenced watch is */
    lull_task_init(&fs->gone, gone_task);
    loop->fsevents = fs;
    return 0;
}

static void ref_io(struct lull__fsevents *fs, bool up) {
    if (up && fs->refs++ == 0) lull_io_ref(&fs->io);
    if (!up && --fs->refs == 0) lull_io_unref(&fs->io);
}

int lull_fsevent_start(lull_fsevent *w, const char *path, lull_fsevent_fn fn) {
    if (!w || !w->loop || !path || !*path || !fn) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(w->loop);
    if (w->wd != -1) return -EBUSY;
    if (strlen(path) >= PATH_MAX) return -ENAMETOOLONG;
    lull_loop *loop = w->loop;
    int rc = open_inotify(loop);
    if (rc < 0) return rc;
    struct lull__fsevents *fs = loop->fsevents;
    rc = make_room(fs);
    if (rc == 0) rc = lull__inuse_add(w); /* until unlink_watch */
    if (rc < 0) {
        release_if_unused(loop);
        return rc;
    }
    int wd = inotify_add_watch(fs->io.fd, path, WATCH_MASK | IN_MASK_CREATE);
    if (wd < 0) {
        rc = -errno;
        lull__inuse_remove(w);
        release_if_unused(loop);
        return rc;
    }
    w->wd = wd;
    w->fn = fn;
    w->next = fs->head;
    fs->head = w;
    fs->watches++;
    wd_insert(fs, w);
    if (w->ref) ref_io(fs, true);
    return 0;
}

/* Off the list; the kernel's watch is removed by the caller (or is gone). */
static void unlink_watch(struct lull__fsevents *fs, lull_fsevent *w) {
    for (lull_fsevent **p = &fs->head; *p; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            break;
        }
    }
    if (w->ref) ref_io(fs, false);
    if (w->wd != FORKED) wd_remove(fs, w);
    fs->watches--;
    w->next = NULL;
    w->wd = -1;
    lull__inuse_remove(w);
}

int lull_fsevent_stop(lull_fsevent *w) {
    if (!w || !w->loop) return -EINVAL;
    /* Before the thread check: a watch not started holds nothing, and its
     * loop may be freed (lull_loop_free accepts it). */
    if (w->wd == -1) return 0;
    LULL_ASSERT_LOOP_THREAD(w->loop);
    struct lull__fsevents *fs = w->loop->fsevents;
    if (w->wd != FORKED) /* the parent's: not this instance's to remove */
        inotify_rm_watch(fs->io.fd, w->wd); /* EINVAL: the kernel dropped it */
    unlink_watch(fs, w);
    release_if_unused(w->loop);
    return 0;
}

/* !w->loop: never set up (all zero), whose wd of 0 would pass for a
 * started watch's; refused as stop and start refuse it. */
void lull_fsevent_ref(lull_fsevent *w) {
    if (!w || !w->loop || w->ref) return;
    w->ref = true;
    if (w->wd != -1) ref_io(w->loop->fsevents, true);
}

void lull_fsevent_unref(lull_fsevent *w) {
    if (!w || !w->loop || !w->ref) return;
    w->ref = false;
    if (w->wd != -1) ref_io(w->loop->fsevents, false);
}

/* ------------------------------------------------------------ coalescing */

static uint32_t hash(int wd, const char *name) {
    uint32_t h = 2166136261u ^ (uint32_t)wd; /* FNV-1a */
    for (const char *p = name ? name : ""; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return h;
}

static bool same_name(const char *a, const char *b) {
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* The entry for (wd, name) in this batch, made if new (or, with `fresh`,
 * made anew over one the name has left, with `departs`, over one it
 * arrived in by a move, and with `last`, over one that is not the batch's
 * last: later events go to the new one); NULL when the batch's entries are
 * used up (cannot happen: one per event at most). */
static entry *entry_for(struct lull__fsevents *fs, int *n, int wd,
                        const char *name, bool fresh, bool departs, bool last) {
    uint32_t i = hash(wd, name) & (TABLE_SIZE - 1);
    while (fs->table[i]) {
        entry *e = &fs->entries[fs->table[i] - 1];
        if (e->wd == wd && same_name(e->name, name)) {
            if (!(fresh && e->left) &&
                !(departs && (e->events & LULL_FSEVENT_MOVED_TO)) &&
                !(last && e != &fs->entries[*n - 1]))
                return e;
            break; /* this slot is the name's from here on */
        }
        i = (i + 1) & (TABLE_SIZE - 1);
    }
    if (*n >= (int)MAX_ENTRIES) return NULL;
    entry *e = &fs->entries[*n];
    *e = (entry){.wd = wd, .name = name};
    fs->table[i] = ++*n;
    return e;
}

static unsigned to_bits(uint32_t mask) {
    unsigned b = 0;
    if (mask & IN_CREATE) b |= LULL_FSEVENT_CREATED;
    if (mask & IN_MODIFY) b |= LULL_FSEVENT_MODIFIED;
    if (mask & IN_ATTRIB) b |= LULL_FSEVENT_ATTRIB;
    if (mask & IN_DELETE) b |= LULL_FSEVENT_DELETED;
    if (mask & IN_MOVED_FROM) b |= LULL_FSEVENT_MOVED_FROM;
    if (mask & IN_MOVED_TO) b |= LULL_FSEVENT_MOVED_TO;
    if (mask & IN_MOVE_SELF) b |= LULL_FSEVENT_MOVED_SELF;
    if (mask & (IN_IGNORED | IN_UNMOUNT)) b |= LULL_FSEVENT_GONE;
    return b;
}

/* A MOVED_TO whose cookie matches this batch's last unmatched MOVED_FROM:
 * each side learns the other's name. inotify queues the two halves of one
 * rename next to each other, so the last FROM is the one to look at. */
static void match_move(entry *from, entry *to, uint32_t cookie) {
    if (!from || !to || from->cookie != cookie || !cookie) return;
    from->cookie = 0;
    to->other = from->name;
    if (from->wd == to->wd) {
        /* A rename inside one watched directory: one callback, on the new
         * name, with both bits and the old name. */
        from->events &= ~LULL_FSEVENT_MOVED_FROM;
        to->events |= LULL_FSEVENT_MOVED_FROM;
        return;
    }
    from->other = to->name;
}

/* Parses one read into coalesced entries; returns how many. */
static int coalesce(struct lull__fsevents *fs, size_t len, bool *overflow) {
    memset(fs->table, 0, sizeof fs->table);
    int n = 0;
    entry *last_from = NULL;
    for (size_t off = 0; off + sizeof(struct inotify_event) <= len;) {
        struct inotify_event *ev = (struct inotify_event *)(fs->buf + off);
        off += sizeof *ev + ev->len;
        if (ev->mask & IN_Q_OVERFLOW) {
            *overflow = true;
            continue;
        }
        const char *name = ev->len ? ev->name : NULL;
        /* A name that arrives after it left (removed and made again,
         * renamed away and back) gets a call of its own after the one
         * that says it left: coalesced, DELETED | CREATED would say it
         * came and went, and its calls in first-event order would end on
         * the departure. */
        bool arrives = ev->mask & (IN_CREATE | IN_MOVED_TO);
        /* The watch's end is its last call: coalesced into an earlier
         * entry of the directory itself, it ended the watch before the
         * entries after that one (its files' removals), which were then
         * dropped. */
        bool ends = ev->mask & (IN_IGNORED | IN_UNMOUNT);
        /* A name moved away after it was moved in (a to b, then b to c)
         * leaves in a call of its own: coalesced, the arrival's entry
         * would hold two moves' bits and one other name, and a rename in
         * one directory, matched, takes MOVED_FROM off its source's entry,
         * taking with it the bit that said the first move's name left. */
        bool departs = ev->mask & IN_MOVED_FROM;
        entry *e = entry_for(fs, &n, ev->wd, name, arrives, departs, ends);
        if (!e) break;
        e->events |= to_bits(ev->mask);
        if (ev->mask & (IN_DELETE | IN_MOVED_FROM)) e->left = true;
        if (ev->mask & IN_MOVED_FROM) {
            e->cookie = ev->cookie;
            last_from = e;
        } else if (ev->mask & IN_MOVED_TO) {
            match_move(last_from, e, ev->cookie);
        }
    }
    return n;
}

/* Calls the watch of each entry that is still started. A GONE watch ends
 * before its callback (the kernel already dropped it). */
static void deliver(struct lull__fsevents *fs, int n) {
    for (int i = 0; i < n; i++) {
        entry *e = &fs->entries[i];
        lull_fsevent *w = by_wd(fs, e->wd);
        if (!w || !e->events) continue;
        if (e->events & LULL_FSEVENT_GONE) unlink_watch(fs, w);
        w->fn(w, e->events, e->name, e->other);
    }
}

/* Orders descriptors by magnitude: live_watches marks one by negating it,
 * which keeps the order (descriptors start at 1). */
static int by_magnitude(const void *a, const void *b) {
    int x = abs(*(const int *)a), y = abs(*(const int *)b);
    return (x > y) - (x < y);
}

/* Moves a[i] down the max-heap a[0..n). */
static void sift_down(int *a, size_t i, size_t n) {
    for (size_t c; (c = 2 * i + 1) < n; i = c) {
        if (c + 1 < n && a[c + 1] > a[c]) c++;
        if (a[i] >= a[c]) return;
        int t = a[i];
        a[i] = a[c];
        a[c] = t;
    }
}

/* Sorts the (positive) descriptors a[0..n) in place: a heapsort, since
 * glibc's qsort allocates for a few hundred of them, and reporting an
 * overflow allocates nothing (the snapshot is grown by each start). */
static void sort_wds(int *a, size_t n) {
    for (size_t k = n / 2; k-- > 0;)
        sift_down(a, k, n);
    for (size_t end = n; end-- > 1;) {
        int t = a[0];
        a[0] = a[end];
        a[end] = t;
        sift_down(a, 0, end);
    }
}

/* Marks (negates) each descriptor of snap[0..n), sorted by magnitude, that
 * the kernel still holds: the instance's fdinfo lists its live watches,
 * one "inotify wd:<hex> ..." line each (Linux 3.8 on). Read through buf,
 * whose names the batch no longer needs. false where it cannot be read
 * (no /proc, no fd left) or lists no watch at all (a /proc that leaves
 * inotify's lines out would otherwise end every watch; a kernel that
 * ended all of them leaves their ends to the rescan): every watch is
 * then taken to be alive, as before this check. */
static bool live_watches(struct lull__fsevents *fs, int *snap, size_t n) {
    static const char tag[] = "inotify wd:";
    char name[48];
    snprintf(name, sizeof name, "/proc/self/fdinfo/%d", fs->io.fd);
    int fd = open(name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    size_t have = 0, listed = 0;
    bool ok = true;
    for (;;) {
        ssize_t r = read(fd, fs->buf + have, sizeof fs->buf - have);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            ok = false;
            break;
        }
        have += (size_t)r;
        char *p = fs->buf, *end = fs->buf + have, *nl;
        while ((nl = memchr(p, '\n', (size_t)(end - p)))) {
            *nl = '\0';
            if (strncmp(p, tag, sizeof tag - 1) == 0) {
                listed++;
                int wd = (int)strtol(p + sizeof tag - 1, NULL, 16);
                int *at =
                    wd > 0 ? bsearch(&wd, snap, n, sizeof *snap, by_magnitude)
                           : NULL;
                if (at) *at = -wd;
            }
            p = nl + 1;
        }
        have = (size_t)(end - p);
        if (r == 0) break;
        if (have == sizeof fs->buf) { /* a line longer than a batch: not */
            ok = false;               /* the format above */
            break;
        }
        memmove(fs->buf, p, have);
    }
    close(fd);
    return ok && listed > 0;
}

static void deliver_overflow(struct lull__fsevents *fs) {
    /* Every watch started when the overflow was read lost events. The list
     * changes under the calls (a watch stopped, one started at the head),
     * so a walk by position would skip the watch after one that stopped
     * itself: the descriptors are taken first and each looked up at its
     * call, as deliver() does. A watch started inside is not called: its
     * descriptor is new (inotify does not reuse them at once). */
    size_t n = 0;
    for (lull_fsevent *w = fs->head; w; w = w->next)
        if (w->wd != FORKED) fs->snap[n++] = w->wd;
    /* The events lost may include a watch's IN_IGNORED: the kernel ended
     * it (its path deleted, its file system unmounted) and the overflow
     * dropped the word. Such a watch, left started, was never called
     * again and kept the loop alive for ever: it ends here, with a GONE
     * beside its OVERFLOW. */
    sort_wds(fs->snap, n);
    bool checked = live_watches(fs, fs->snap, n);
    for (size_t i = 0; i < n; i++) {
        bool live = !checked || fs->snap[i] < 0;
        lull_fsevent *w = by_wd(fs, abs(fs->snap[i]));
        if (!w) continue;
        if (live) {
            w->fn(w, LULL_FSEVENT_OVERFLOW, NULL, NULL);
        } else {
            unlink_watch(fs, w);
            w->fn(w, LULL_FSEVENT_OVERFLOW | LULL_FSEVENT_GONE, NULL, NULL);
        }
    }
}

static void on_inotify(lull_io *io, int events) {
    struct lull__fsevents *fs =
        LULL_CONTAINER_OF(io, struct lull__fsevents, io);
    lull_loop *loop = io->loop;
    (void)events;
    ssize_t len;
    do {
        len = read(io->fd, fs->buf, sizeof fs->buf);
    } while (len < 0 && errno == EINTR);
    if (len <= 0) return; /* EAGAIN: another reader's turn took them */
    bool overflow = false;
    fs->delivering = true;
    int n = coalesce(fs, (size_t)len, &overflow);
    deliver(fs, n);
    if (overflow) deliver_overflow(fs);
    fs->delivering = false;
    release_if_unused(loop);
}

/* ---------------------------------------------------------------- fork */

/* The inotify fd is the parent's instance, shared through fork(): a child
 * reading it would take the parent's events, and its stops would remove
 * the parent's watches. The child's fd number is pointed at a new instance
 * of its own (dup3: the parent keeps the old one), and the watches it
 * inherited, which the new instance does not hold, end with GONE in the
 * next turn, as a deleted path's do; the child watches anew from there. */
int lull__fsevents_fork(lull_loop *loop) {
    struct lull__fsevents *fs = loop->fsevents;
    if (!fs) return 0;
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) return -errno;
    int rc = dup3(fd, fs->io.fd, O_CLOEXEC) < 0 ? -errno : 0;
    close(fd);
    if (rc < 0) return rc;
    for (lull_fsevent *w = fs->head; w; w = w->next)
        w->wd = FORKED;
    /* The new instance holds none of them: no descriptor names one. */
    if (fs->wd_cap) memset(fs->wd_table, 0, fs->wd_cap * sizeof *fs->wd_table);
    if (fs->head) lull_task_post(loop, &fs->gone);
    return 0;
}

/* Each inherited watch, looked for again after every call (a callback may
 * stop others, or start watches of the new instance). */
static void gone_task(lull_task *t) {
    struct lull__fsevents *fs =
        LULL_CONTAINER_OF(t, struct lull__fsevents, gone);
    lull_loop *loop = fs->io.loop;
    fs->delivering = true;
    for (;;) {
        lull_fsevent *w = fs->head;
        while (w && w->wd != FORKED)
            w = w->next;
        if (!w) break;
        unlink_watch(fs, w);
        w->fn(w, LULL_FSEVENT_GONE, NULL, NULL);
    }
    fs->delivering = false;
    release_if_unused(loop);
}
