/* Terminals as handles: modes set and always given back, the window size,
 * and the terminal's bytes as a raw lull_stream.
 *
 * Owns: lull's own description of the terminal (`ctl`: opened anew by
 * name, or a dup where the fd has no name), the stream over a dup of it,
 * and one entry per tty in a mode other than NORMAL in a process-wide
 * table that lull_tty_reset_mode reads.
 *
 * Why open anew. O_NONBLOCK is a flag of the open file description, which
 * a terminal fd shares with every process that inherited it: the shell
 * that started the program, the programs after it. Set on fd 0 and left
 * behind by a crash, it makes the shell's next read fail with EAGAIN.
 * Opening the terminal's path again gives lull a description of its own,
 * which it may make non-blocking freely (libuv does the same). A pty's
 * master side cannot be opened again (its name is /dev/ptmx, which makes a
 * new pty), nor can a terminal whose name does not resolve here: then lull
 * uses a dup, the shared description is non-blocking while the tty is open,
 * and its flags are given back by lull_tty_close (its stream's close, as
 * for every lull_stream on the description: the last one gives back
 * O_NONBLOCK) and lull_tty_reset_mode. Several ttys on one such
 * description (stdin's and stdout's) all keep the flags it had before the
 * first, for the reset.
 *
 * The reset table. lull_tty_reset_mode runs in signal handlers and at
 * exit, on any thread, so it reads only this file's static table, each
 * entry a copy (the fd, the termios from init, the flags to give back)
 * guarded by an atomic state: FREE, CLAIMED (being filled or emptied by
 * the loop's thread: skipped), READY; and a count of its users (resets,
 * and the loop thread's own reads of other entries), which only read it
 * and so share it: a reset never skips an entry a read holds, as it did
 * when a read held it alone (a crash handler that interrupted a second
 * tty's init left the terminal raw). A user counts itself in, then
 * checks for READY; the loop's thread moves an entry from READY to
 * CLAIMED, then waits for its users to leave before emptying it, so one
 * of the two sees the other. A reset on the same thread cannot be in
 * progress then, since a handler runs to its end before the interrupted
 * code goes on, and a fork()ed child starts with no users (the parent's
 * other threads are not in it). Entries are entered before the mode
 * changes and emptied after it is given back, so a crash at any point
 * finds the mode to restore.
 *
 * Thread: the loop's, but for lull_tty_reset_mode. Nothing runs in the
 * background: no timer, no task, no fd beyond the stream's. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/kcmp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <termios.h>
#include <unistd.h>

#include "internal.h"
#include "stream.h"

_Static_assert(sizeof(struct termios) <= sizeof(((lull_tty *)0)->saved),
               "lull_tty.saved holds a struct termios");
/* lull_tty_reset_mode runs in signal handlers: its atomics must not lock. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2 && ATOMIC_BOOL_LOCK_FREE == 2,
               "lock-free atomics");

/* Ttys in a mode other than NORMAL at once (and ttys with no name, whose
 * flags are given back): a program has one terminal, a multiplexer a few;
 * 64 is room to spare, and a fixed table is what a signal handler can
 * walk. */
#define RESET_SLOTS 64

enum { SLOT_FREE, SLOT_CLAIMED, SLOT_READY };

/* Which terminal an fd is: its device, and for a pty's master (all of
 * which are /dev/ptmx's device) the pty's number. */
typedef struct term_id {
    dev_t rdev; /* the terminal's, not /dev/tty's (id_of) */
    long ptn;   /* -1: not a master */
    bool own;   /* rdev is the kernel's TIOCGDEV: a pty's slave's on its
                   master too, whose mode calls set the slave's mode */
} term_id;

typedef struct reset_slot {
    _Atomic int state;    /* SLOT_* */
    _Atomic int users;    /* resets and reads using it while READY */
    _Atomic bool moded;   /* the tty is out of NORMAL: restore the mode (a
                             tty with no name is entered for its flags
                             alone while NORMAL) */
    int fd;               /* lull's description of the terminal */
    int fl;               /* the flags to give back; -1: none */
    struct termios saved; /* the mode at init */
    term_id id;           /* the terminal: a later init on it takes saved */
    _Atomic int pid;      /* the process that gives it back: the one that
                             entered it; a fork()ed copy leaves the
                             parent's terminal to the parent */
} reset_slot;

static reset_slot slots[RESET_SLOTS];

static const struct termios *saved_of(const lull_tty *t) {
    return (const struct termios *)(const void *)t->saved;
}

/* tcsetattr, again after a signal. */
static int set_attr(int fd, const struct termios *tio) {
    while (tcsetattr(fd, TCSANOW, tio) < 0) {
        if (errno != EINTR) return -errno;
    }
    return 0;
}

static term_id id_of(int fd) {
    term_id id = {.rdev = 0, .ptn = -1, .own = false};
    struct stat st;
    if (fstat(fd, &st) == 0) id.rdev = st.st_rdev;
    /* The device of the terminal itself: an fd of /dev/tty, the alias of
     * the controlling terminal, is device 5,0 whichever terminal that is,
     * and taken for another terminal beside a tty on the terminal's own
     * name, it gave back that tty's RAW for the mode before lull. The
     * kernel's encoding (new_encode_dev); st_rdev where it is missing. */
    unsigned dev;
    if (ioctl(fd, TIOCGDEV, &dev) == 0) {
        id.rdev = makedev((dev & 0xfff00u) >> 8,
                          (dev & 0xffu) | ((dev >> 12) & 0xfff00u));
        id.own = true;
    }
    unsigned n;
    if (ioctl(fd, TIOCGPTN, &n) == 0) id.ptn = (long)n;
    return id;
}

/* Whether x and y are one terminal's mode. A pty's master and its slave
 * are: the master's tcsetattr sets the slave's mode, and TIOCGDEV names
 * the slave on both. Without TIOCGDEV a master is known by its number
 * alone (st_rdev is /dev/ptmx's), and taken for a terminal of its own. */
static bool same_terminal(term_id x, term_id y) {
    if (x.rdev != y.rdev) return false;
    return (x.own && y.own) || x.ptn == y.ptn;
}

/* Counts a user of s in if it is READY: true, and it stays READY and
 * unchanged (but for `moded`) until slot_put. Async-signal-safe. */
static bool slot_get(reset_slot *s) {
    atomic_fetch_add(&s->users, 1);
    if (atomic_load(&s->state) == SLOT_READY) return true;
    atomic_fetch_sub(&s->users, 1);
    return false;
}

static void slot_put(reset_slot *s) {
    atomic_fetch_sub(&s->users, 1);
}

/* A fork()ed child has one thread, the forking one, which was in no read
 * of the table: the counts it copied are readers on the parent's other
 * threads, which will never leave in the child, and a close of a tty it
 * inherited (slot_leave) waited for them forever. Its own readers start
 * at none. */
static void slots_after_fork(void) {
    for (int i = 0; i < RESET_SLOTS; i++)
        atomic_store(&slots[i].users, 0);
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static int fork_error; /* pthread_atfork's, if it failed */

static void register_fork(void) {
    fork_error = pthread_atfork(NULL, NULL, slots_after_fork);
}

/* fl: the flags the entry gives back, -1 for none. */
static int slot_enter(lull_tty *t, int fl) {
    /* Before the first entry: a child forked with one must find counts
     * it can trust. */
    pthread_once(&fork_once, register_fork);
    if (fork_error) return -fork_error;
    for (int i = 0; i < RESET_SLOTS; i++) {
        int want = SLOT_FREE;
        if (!atomic_compare_exchange_strong(&slots[i].state, &want,
                                            SLOT_CLAIMED))
            continue;
        atomic_store(&slots[i].moded, false);
        slots[i].fd = t->ctl;
        slots[i].fl = fl;
        memcpy(&slots[i].saved, saved_of(t), sizeof(struct termios));
        slots[i].id = id_of(t->ctl);
        atomic_store(&slots[i].pid, (int)getpid());
        atomic_store(&slots[i].state, SLOT_READY);
        t->slot = i;
        return 0;
    }
    return -ENOSPC;
}

static void slot_leave(lull_tty *t) {
    if (t->slot < 0) return;
    reset_slot *s = &slots[t->slot];
    atomic_store(&s->state, SLOT_CLAIMED); /* READY: only this thread
                                              changes it from there */
    while (atomic_load(&s->users))
        sched_yield(); /* a reset on another thread uses it: brief */
    s->fd = -1;
    atomic_store(&s->state, SLOT_FREE);
    t->slot = -1;
}

/* The mode fd's terminal had before lull changed it, where another tty
 * holds it out of NORMAL: a second tty on a terminal the first holds RAW
 * must give back the first one's NORMAL, not RAW (closed last, or reset
 * after the first, it would leave the terminal raw). Each entry is used
 * (slot_get) while read, so that no thread empties or refills it
 * meanwhile. */
static void mode_before_lull(int fd, struct termios *tio) {
    term_id id = id_of(fd);
    for (int i = 0; i < RESET_SLOTS; i++) {
        reset_slot *s = &slots[i];
        if (!slot_get(s)) continue;
        bool same = atomic_load(&s->moded) && same_terminal(s->id, id);
        if (same) memcpy(tio, &s->saved, sizeof *tio);
        slot_put(s);
        if (same) return;
    }
}

/* Whether a and b are one open file description, whose flags one F_SETFL
 * sets for both: kcmp says so exactly; where it is missing, the same
 * terminal on the same side is taken for it (a pty's master, the tty with
 * no name a test or multiplexer holds, is one description with all its
 * dups; its slave, one terminal with it, is another description). */
static bool same_description(int a, int b) {
    long r =
        syscall(SYS_kcmp, (pid_t)getpid(), (pid_t)getpid(), KCMP_FILE, a, b);
    if (r >= 0) return r == 0;
    term_id x = id_of(a), y = id_of(b);
    return x.rdev == y.rdev && x.ptn == y.ptn;
}

/* Another tty of this process (not the one entered at `skip`; -1: any)
 * on fd's shared description: true, with its saved flags in *fl (if not
 * NULL). Only this process's ttys: a forked child's copy of its parent's
 * entry is the parent's to give back. Each entry is used while read, as
 * mode_before_lull does. */
static bool slot_sharing(int skip, int fd, int *fl) {
    int self = (int)getpid();
    for (int i = 0; i < RESET_SLOTS; i++) {
        reset_slot *s = &slots[i];
        if (i == skip || !slot_get(s)) continue;
        bool same = s->fl >= 0 && atomic_load(&s->pid) == self &&
                    same_description(s->fd, fd);
        if (same && fl) *fl = s->fl;
        slot_put(s);
        if (same) return true;
    }
    return false;
}

/* The flags fd's description had before lull made it non-blocking, where
 * another tty with no name holds it: a second tty on it (stdin's and
 * stdout's, one description) finds O_NONBLOCK set by the first one's
 * stream, and giving that back would leave it non-blocking for good (a
 * forked child gives back the flags it found, as lull_stream does). */
static void flags_before_lull(int fd, int *fl) {
    (void)slot_sharing(-1, fd, fl);
}

/* Whether a tty of this process other than the one entered at `slot` still
 * uses fd's shared description: then the flags are not given back yet (its
 * stream needs O_NONBLOCK; the last one gives them back). */
static bool description_in_use(int slot, int fd) {
    return slot_sharing(slot, fd, NULL);
}

/* Whether this process gives t's terminal back: it set the mode (or, with
 * no name, the flags), not a parent it was fork()ed from, which holds them
 * still. */
static bool gives_back(const lull_tty *t) {
    return t->slot >= 0 && atomic_load(&slots[t->slot].pid) == (int)getpid();
}

/* Only async-signal-safe calls: getpid, tcsetattr (an ioctl), fcntl. errno
 * is kept for the code the handler interrupted. A fork()ed copy (a child
 * crashing, or exiting through atexit) leaves what its parent set. */
void lull_tty_reset_mode(void) {
    int saved_errno = errno;
    int self = (int)getpid();
    for (int i = 0; i < RESET_SLOTS; i++) {
        reset_slot *s = &slots[i];
        if (!slot_get(s)) continue;
        if (atomic_load(&s->pid) == self) {
            if (atomic_load(&s->moded))
                (void)tcsetattr(s->fd, TCSANOW, &s->saved);
            if (s->fl >= 0) (void)fcntl(s->fd, F_SETFL, s->fl);
        }
        slot_put(s);
    }
    errno = saved_errno;
}

/* A pty's master side: TIOCGPTN answers only there. */
static bool pty_master(int fd) {
    unsigned n;
    return ioctl(fd, TIOCGPTN, &n) == 0;
}

/* lull's description of fd's terminal: opened by name, or -1 when it has
 * none that opens to the same terminal. */
static int open_anew(int fd) {
    char name[PATH_MAX];
    if (pty_master(fd) || ttyname_r(fd, name, sizeof name) != 0) return -1;
    int nfd = open(name, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    /* Never the program's closed stdio (lull__fd_above_stdio). */
    if (nfd < 0 || (nfd = lull__fd_above_stdio(nfd)) < 0) return -1;
    struct stat a, b;
    if (fstat(fd, &a) < 0 || fstat(nfd, &b) < 0 || a.st_rdev != b.st_rdev) {
        close(nfd);
        return -1;
    }
    return nfd;
}

int lull_tty_init(lull_loop *loop, lull_tty *t, int fd,
                  const lull_stream_options *opts) {
    if (!loop || !t || fd < 0) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(loop);
    /* A tty still open, or closed with its stream's on_close still queued:
     * the clearing below would orphan the stream's registered fd, the
     * description and the reset table's entry, and lose the mode to give
     * back. Asked by address only: t is garbage before its first init. */
    if (lull__stream_live(loop, &t->stream)) return -EBUSY;
    struct termios tio;
    if (tcgetattr(fd, &tio) < 0) return -errno;
    mode_before_lull(fd, &tio);
    memset(t, 0, sizeof *t);
    t->loop = loop;
    t->fd = fd;
    t->slot = -1;
    t->fl_saved = -1;
    memcpy(t->saved, &tio, sizeof tio);
    t->ctl = open_anew(fd);
    if (t->ctl < 0) {
        /* No name: the shared description, given its flags back later. */
        t->fl_saved = fcntl(fd, F_GETFL);
        if (t->fl_saved >= 0) flags_before_lull(fd, &t->fl_saved);
        t->ctl = fcntl(fd, F_DUPFD_CLOEXEC, 3); /* never 0 to 2 */
        if (t->fl_saved < 0 || t->ctl < 0) {
            int err = -errno;
            if (t->ctl >= 0) close(t->ctl);
            t->ctl = -1;
            return err;
        }
        int rc = slot_enter(t, t->fl_saved);
        if (rc < 0) {
            close(t->ctl);
            t->ctl = -1;
            return rc;
        }
    }
    int sfd = fcntl(t->ctl, F_DUPFD_CLOEXEC, 3);
    int rc = sfd < 0 ? -errno : 0;
    if (rc == 0) {
        lull_stream_options so = {0};
        if (opts) so = *opts;
        so.flags |= LULL_STREAM_RAW; /* a terminal's bytes are not frames */
        rc = lull_stream_open(loop, &t->stream, sfd, &so); /* owns sfd */
    }
    /* A tty for output (stdout, stderr, an fd opened write-only) reads
     * nothing until asked, as libuv's: lull's description reads the
     * terminal that stdin usually shares, and would take the keys typed
     * for stdin's reader. */
    int acc = rc == 0 ? fcntl(fd, F_GETFL) : -1;
    if (rc == 0 && (fd == STDOUT_FILENO || fd == STDERR_FILENO ||
                    (acc >= 0 && (acc & O_ACCMODE) == O_WRONLY)))
        (void)lull_stream_read_stop(&t->stream); /* open: cannot fail */
    if (rc < 0) {
        /* Not under another tty's live stream on the same description:
         * given back blocking, its next write to a reader that does not
         * read would block the loop's thread. The last one closed gives
         * the flags back. */
        if (t->fl_saved >= 0 && !description_in_use(t->slot, t->ctl))
            (void)fcntl(t->ctl, F_SETFL, t->fl_saved);
        slot_leave(t);
        close(t->ctl);
        t->ctl = -1;
        return rc;
    }
    return 0;
}

/* The mode's termios, made from the one at init. RAW is libuv's raw mode
 * (output processing stays, so "\n" still starts a line); IO is
 * cfmakeraw. */
static void make_mode(struct termios *tio, int mode) {
    if (mode == LULL_TTY_MODE_RAW) {
        tio->c_iflag &= ~(tcflag_t)(BRKINT | ICRNL | INPCK | ISTRIP | IXON);
        tio->c_oflag |= ONLCR;
        tio->c_cflag |= CS8;
        tio->c_lflag &= ~(tcflag_t)(ECHO | ICANON | IEXTEN | ISIG);
        tio->c_cc[VMIN] = 1;
        tio->c_cc[VTIME] = 0;
    } else if (mode == LULL_TTY_MODE_IO) {
        cfmakeraw(tio);
    }
}

/* Back in NORMAL: nothing to restore. A tty with no name keeps its entry
 * for its flags. */
static void normal_again(lull_tty *t) {
    if (t->slot < 0) return;
    if (t->fl_saved >= 0)
        atomic_store(&slots[t->slot].moded, false);
    else
        slot_leave(t);
}

int lull_tty_set_mode(lull_tty *t, int mode) {
    if (!t || !t->loop || mode < LULL_TTY_MODE_NORMAL ||
        mode > LULL_TTY_MODE_IO)
        return -EINVAL;
    if (t->ctl < 0) return -EBADF; /* closed: its loop may be freed */
    LULL_ASSERT_LOOP_THREAD(t->loop);
    if (mode == t->mode) return 0;
    struct termios tio = *saved_of(t);
    make_mode(&tio, mode);
    /* Entered before the change: a crash right after it is covered. */
    if (mode != LULL_TTY_MODE_NORMAL) {
        /* A fork()ed child taking a tty it inherited in NORMAL out of it:
         * the mode is the child's to give back (its reset, its close), as
         * for a tty with a name, which has no entry in NORMAL. With no
         * name, the entry it inherited is its parent's, kept for the
         * shared description's flags, which stay the parent's: the child
         * makes one of its own, for the mode alone. */
        if (t->slot >= 0 && t->mode == LULL_TTY_MODE_NORMAL && !gives_back(t))
            slot_leave(t);
        if (t->slot < 0) {
            int rc = slot_enter(t, -1); /* a tty's flags: entered at init */
            if (rc < 0) return rc;
        }
        atomic_store(&slots[t->slot].moded, true);
    }
    /* TCSANOW, not TCSADRAIN: draining waits for the reader of the
     * terminal's output, which may never read, and this is the loop's
     * thread. */
    int rc = set_attr(t->ctl, &tio);
    if (rc < 0) {
        if (t->mode == LULL_TTY_MODE_NORMAL) normal_again(t);
        return rc;
    }
    t->mode = mode;
    if (mode == LULL_TTY_MODE_NORMAL) normal_again(t);
    return 0;
}

int lull_tty_get_winsize(lull_tty *t, int *cols, int *rows) {
    if (!t || !t->loop || !cols || !rows) return -EINVAL;
    if (t->ctl < 0) return -EBADF; /* closed: its loop may be freed */
    LULL_ASSERT_LOOP_THREAD(t->loop);
    struct winsize ws;
    if (ioctl(t->ctl, TIOCGWINSZ, &ws) < 0) return -errno;
    *cols = ws.ws_col;
    *rows = ws.ws_row;
    return 0;
}

int lull_tty_close(lull_tty *t) {
    if (!t || !t->loop) return -EINVAL;
    if (t->ctl < 0) return 0; /* closed: its loop may be freed */
    LULL_ASSERT_LOOP_THREAD(t->loop);
    /* Closed from here on: a frame's release, which the stream's close
     * runs, may close the tty again. */
    int ctl = t->ctl, mode = t->mode;
    /* A fork()ed copy closing what it inherited: the mode and the shared
     * description's O_NONBLOCK are the parent's, whose tty and stream use
     * them still. */
    bool restore = gives_back(t);
    t->ctl = -1;
    t->mode = LULL_TTY_MODE_NORMAL;
    /* The stream first: its close makes one last try at its queue, which
     * must meet the description still non-blocking (a dup's flags given
     * back would block the loop's thread on a reader that does not read),
     * and in the mode its bytes were written for. Its close gives a shared
     * description's O_NONBLOCK back, the only flag lull sets there, where
     * no other stream of this process holds it: a lull_stream on it too
     * (a program's stdin, beside stdout as a tty) is one the ttys' own
     * entries do not know of, and the flags from before given back here
     * made its fd blocking under it. */
    (void)lull_endpoint_close(&t->stream.ep, 0); /* idempotent */
    int rc = 0;
    if (restore && mode != LULL_TTY_MODE_NORMAL)
        rc = set_attr(ctl, saved_of(t));
    /* Emptied after the restore: a crash in between still restores. */
    slot_leave(t);
    close(ctl);
    return rc;
}
