/* Signals as handles: a loop's signal handles share one signalfd, and each
 * signal read from it runs the callback of every handle watching it.
 *
 * Owns: the loop's signalfd (loop->signals.io) and its mask, the list of
 * started handles, and the signals lull blocked in the loop's thread to
 * read them. One thread: the loop's; lull_signal_block alone is
 * thread-safe (it touches the calling thread's mask only).
 *
 * Why one fd per loop: a signal pending for a process is read once, by
 * whichever signalfd read comes first. With one fd per handle, two handles
 * of one signal would each see half of the deliveries; with one per loop,
 * every handle sees every delivery the loop read.
 *
 * The mask. signalfd reads only signals that are blocked: an unblocked
 * one is delivered the usual way (its handler, or its default action)
 * instead. A thread's mask can be changed only by that thread, so lull
 * keeps two records: the loop's `blocked` (signals whose block is lull's,
 * not the program's: they were not blocked when the loop's first handle
 * for them started) and, per thread, `held_here` (signals lull holds
 * blocked in this thread). The rules (docs/PROCESS.md):
 *   - the first handle of a signal blocks it in the calling thread; if it
 *     was not blocked there, the block is lull's (both records);
 *   - a thread that takes the loop over (a run, lull_loop_adopt) and finds
 *     one of the loop's `blocked` signals blocked in its own mask got that
 *     block from the thread that created it: lull holds it there too;
 *   - the last stop of a signal whose block is lull's takes back (no wait)
 *     an instance still pending (it arrived while watched, and unblocking
 *     would hand it to the default action: death, for most) and unblocks
 *     it in the calling thread;
 *   - any other thread where lull still holds it unblocks it at its next
 *     lull_signal_*, lull_loop_adopt or lull_loop_free call (settle): lull
 *     cannot reach into another thread's mask;
 *   - a block that is the program's (lull_signal_block, pthread_sigmask
 *     before the first start) stays, and so does an instance pending at
 *     the last stop: both are the program's.
 * `held` counts, process-wide, the loops holding each signal's block, so
 * that a thread never gives back a block another loop still needs.
 *
 * Delivery. One read of up to READ_BATCH signals per readable callback
 * (level-triggered: the rest come next iteration). A delivery walks the
 * handles in start order and reaches only those started before it began
 * (seq); `next` is the walk's cursor, moved on by a stop of the handle it
 * points at, so any callback may stop, restart or free any handle.
 *
 * Invariants: watched == the union of the started handles' signals; the io
 * is set up (its fd open, started) exactly while watched != 0; refs counts
 * the started handles that are referenced, and the io is referenced exactly
 * while refs > 0; blocked is a subset of watched, but for the signals in
 * `releasing` while a delivery runs; held[n - 1] is the number of loops
 * whose `blocked` has n.
 *
 * The five rows (README, "The contracts"):
 *   Trigger                 a watched signal becomes pending (signalfd
 *                           readable)
 *   Source of truth         the kernel's pending signals, read from the fd
 *   Pending-work predicate  the signalfd is readable
 *   Next deadline or retry  none
 *   Quiet condition         always, between signals: one fd in epoll, no
 *                           timer, no task */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "internal.h"

/* Signals per read: a burst of different signals in one callback; a
 * standard signal is pending at most once, so more rarely wait. */
#define READ_BATCH 16

/* lull_signal.flags */
#define SIG_STARTED 0x1u
#define SIG_UNREF   0x2u

static uint64_t bit_of(int signum) {
    return 1ull << (signum - 1);
}

/* A signal a handle may watch: catchable and blockable, within signalfd's
 * 64, and not one of the two glibc keeps for itself (32 and 33, below
 * SIGRTMIN: thread cancellation and set*id broadcasts), which
 * pthread_sigmask refuses to block. */
static bool watchable(int signum) {
    if (signum < 1 || signum > 64 || signum > SIGRTMAX) return false;
    if (signum == SIGKILL || signum == SIGSTOP) return false;
    return !(signum >= 32 && signum < SIGRTMIN);
}

static void sigset_of(uint64_t bits, sigset_t *set) {
    sigemptyset(set);
    for (int n = 1; n <= 64; n++)
        if (bits & bit_of(n)) sigaddset(set, n);
}

static void update_ref(lull__signals *ss) {
    if (!ss->watched) return;
    if (ss->refs)
        lull_io_ref(&ss->io);
    else
        lull_io_unref(&ss->io);
}

/* ------------------------------------------------------------ delivery */

static void deliver(lull__signals *ss, const struct signalfd_siginfo *info,
                    uint64_t upto) {
    int signum = (int)info->ssi_signo;
    for (lull_signal *h = ss->head; h; h = ss->next) {
        ss->next = h->next;
        if (h->signum != signum || h->seq > upto) continue;
        h->received++;
        h->sender_pid = (int)info->ssi_pid;
        h->fn(h, signum);
    }
    ss->next = NULL;
}

static void release_block(lull__signals *ss, int signum);

static void on_signalfd(lull_io *io, int events) {
    (void)events;
    lull__signals *ss = &io->loop->signals;
    struct signalfd_siginfo info[READ_BATCH];
    ssize_t n = read(io->fd, info, sizeof info);
    if (n <= 0) return; /* EAGAIN: another reader (a forked copy) took it */
    ss->delivering = true;
    for (size_t i = 0; i < (size_t)n / sizeof info[0]; i++) {
        /* Each delivery reaches the handles started before it began, not
         * before the read: a handle restarted by an earlier delivery's
         * callback is owed the next one (a batch of queued real-time
         * signals). */
        deliver(ss, &info[i], ss->seq);
        if (!ss->watched) break; /* every handle stopped: the fd is gone */
    }
    ss->delivering = false;
    /* The blocks whose last handle stopped in a callback and was not
     * started again: given back now (unwatch says why it waits). */
    uint64_t gone = ss->releasing;
    ss->releasing = 0;
    for (int s = 1; gone; s++) {
        if (!(gone & bit_of(s))) continue;
        gone &= ~bit_of(s);
        release_block(ss, s);
    }
}
LULL__OWN_NAME(on_signalfd, "lull_signal signalfd", lull_loop, signals.io);

/* ------------------------------------------------------ the loop's mask */

/* Signals lull holds blocked in this thread (a thread's mask is its own). */
static _Thread_local uint64_t held_here;

/* Per signal, the loops whose block of it is lull's (their `blocked`). */
static uint32_t held[64];

static uint64_t held_anywhere(void) {
    uint64_t bits = 0;
    for (int n = 1; n <= 64; n++)
        if (__atomic_load_n(&held[n - 1], __ATOMIC_ACQUIRE)) bits |= bit_of(n);
    return bits;
}

static void unblock_here(uint64_t bits) {
    sigset_t set;
    sigset_of(bits, &set);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    held_here &= ~bits;
}

/* Gives back the blocks lull holds in this thread that no loop needs any
 * more: their last handle stopped on another thread. An instance pending
 * now goes to its usual action, as it would have without lull. */
static void settle(void) {
    if (!held_here) return; /* the common case: one thread-local read */
    uint64_t stale = held_here & ~held_anywhere();
    if (stale) unblock_here(stale);
}

/* Threads of lull's own (pool workers, the reaper) take no signals: a
 * process-directed one must reach the program's threads, and a sleeping
 * worker is never woken by one. The mask is inherited at pthread_create,
 * so this sets it on the creating thread (old: its own, to put back). But
 * for the faults a thread raises itself: the kernel forces those on the
 * faulting thread, and finding them blocked it resets the program's
 * handler and kills the process, crash handler (lull_tty_reset_mode's
 * terminal restore, a seccomp trap's SIGSYS report) unrun. They keep the
 * creator's mask, so one the program blocked everywhere for a signalfd
 * stays blocked there too. */
void lull__block_for_thread(sigset_t *old) {
    static const int faults[] = {SIGSEGV, SIGBUS,  SIGFPE,
                                 SIGILL,  SIGTRAP, SIGSYS};
    sigset_t all;
    pthread_sigmask(SIG_BLOCK, NULL, old);
    sigfillset(&all);
    for (size_t i = 0; i < sizeof faults / sizeof *faults; i++)
        if (!sigismember(old, faults[i])) sigdelset(&all, faults[i]);
    pthread_sigmask(SIG_SETMASK, &all, NULL);
}

void lull__signals_take(lull_loop *loop) {
    settle();
    uint64_t lulls = loop->signals.blocked & ~held_here;
    if (!lulls) return;
    sigset_t mask;
    if (pthread_sigmask(SIG_BLOCK, NULL, &mask)) return;
    for (int n = 1; n <= 64; n++)
        if ((lulls & bit_of(n)) && sigismember(&mask, n))
            held_here |= bit_of(n);
}

void lull__signals_settle(void) {
    settle();
}

/* A signalfd's mask belongs to its open file, which fork() shares: the
 * child's start or stop of a handle (signalfd(fd, mask)) would change which
 * signals the parent's loop reads, and a signal the child let go of would
 * stay pending, blocked and unread, in the parent. So the child gets a
 * signalfd of its own, for the same signals, under the same number: the
 * number the watcher holds and the rebuild registers. It reads the child's
 * signals, as the shared one did there. */
int lull__signals_fork(lull_loop *loop) {
    lull__signals *ss = &loop->signals;
    if (!ss->watched) return 0;
    sigset_t mask;
    sigset_of(ss->watched, &mask);
    int fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0) return -errno;
    int rc = dup3(fd, ss->io.fd, O_CLOEXEC) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/* ------------------------------------------------- the started handles */

/* The loops that have a started handle, on any thread, linked through
 * their lull__signals (linked), so that an init can look for a handle on
 * every loop: one started on another loop would have that loop's list cut
 * as surely as one on its own, and init is for any thread. A loop's list
 * changes only under started_lock (a start or stop, on its own thread),
 * which an init holds while it reads; a delivery reads its own loop's list
 * without it (a change to that list can only come from its own thread).
 * Nothing is allocated: lull_signal_start allocates nothing. */
static pthread_mutex_t started_lock = PTHREAD_MUTEX_INITIALIZER;
static lull__signals *started_loops; /* under started_lock */
static pthread_once_t started_once = PTHREAD_ONCE_INIT;

/* A fork() while another thread holds started_lock would leave the
 * child's copy locked for ever: the fork waits for it (held for a start,
 * a stop, or an init's walk) and both sides release it. */
static void started_prepare(void) {
    pthread_mutex_lock(&started_lock);
}

static void started_after(void) {
    pthread_mutex_unlock(&started_lock);
}

static void started_init(void) {
    pthread_atfork(started_prepare, started_after, started_after);
}

static void started_lock_take(void) {
    pthread_once(&started_once, started_init);
    pthread_mutex_lock(&started_lock);
}

/* Is sig started on any loop? */
static bool started_anywhere(const lull_signal *sig) {
    bool found = false;
    started_lock_take();
    for (const lull__signals *ss = started_loops; ss && !found;
         ss = ss->loop_next)
        for (const lull_signal *h = ss->head; h && !found; h = h->next)
            found = h == sig;
    pthread_mutex_unlock(&started_lock);
    return found;
}

/* Links sig last on the loop's list (and the loop on started_loops with
 * its first handle). */
static void link_started(lull__signals *ss, lull_signal *sig) {
    started_lock_take();
    if (!ss->head) {
        ss->loop_prev = NULL;
        ss->loop_next = started_loops;
        if (started_loops) started_loops->loop_prev = ss;
        started_loops = ss;
    }
    sig->next = NULL;
    sig->prev = ss->tail;
    if (ss->tail)
        ss->tail->next = sig;
    else
        ss->head = sig;
    ss->tail = sig;
    pthread_mutex_unlock(&started_lock);
}

/* Unlinks sig (and the loop from started_loops with its last handle). */
static void unlink_started(lull__signals *ss, lull_signal *sig) {
    started_lock_take();
    if (sig->prev)
        sig->prev->next = sig->next;
    else
        ss->head = sig->next;
    if (sig->next)
        sig->next->prev = sig->prev;
    else
        ss->tail = sig->prev;
    sig->next = sig->prev = NULL;
    if (!ss->head) {
        if (ss->loop_prev)
            ss->loop_prev->loop_next = ss->loop_next;
        else
            started_loops = ss->loop_next;
        if (ss->loop_next) ss->loop_next->loop_prev = ss->loop_prev;
        ss->loop_next = ss->loop_prev = NULL;
    }
    pthread_mutex_unlock(&started_lock);
}

/* Blocks signum in this thread and makes the signalfd read `watched`. */
static int watch(lull_loop *loop, int signum) {
    lull__signals *ss = &loop->signals;
    uint64_t bit = bit_of(signum), want = ss->watched | bit;
    sigset_t one, old, mask;
    sigemptyset(&one);
    sigaddset(&one, signum);
    /* Blocked first: one arriving meanwhile waits for the fd. */
    int rc = pthread_sigmask(SIG_BLOCK, &one, &old);
    if (rc) return -rc;
    bool was_blocked = sigismember(&old, signum);
    sigset_of(want, &mask);
    if (ss->watched) {
        rc = signalfd(ss->io.fd, &mask, 0) < 0 ? -errno : 0;
    } else {
        int fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
        /* Never the program's closed stdio (lull__fd_above_stdio). */
        fd = fd < 0 ? -errno : lull__fd_above_stdio(fd);
        rc = fd < 0 ? fd : 0;
        if (rc == 0) {
            lull__io_setup(loop, &ss->io, fd, on_signalfd);
            rc = lull_io_start(&ss->io, LULL_READABLE);
            if (rc < 0) close(fd);
        }
    }
    if (rc < 0) {
        if (!was_blocked) pthread_sigmask(SIG_UNBLOCK, &one, NULL);
        return rc;
    }
    /* Blocked before and not by lull: the program's block, which stays.
     * Stopped and started again inside a delivery: still lull's, and
     * still counted (unwatch). */
    if (ss->releasing & bit) {
        ss->releasing &= ~bit;
    } else if (!was_blocked || (held_here & bit)) {
        held_here |= bit;
        ss->blocked |= bit;
        __atomic_fetch_add(&held[signum - 1], 1, __ATOMIC_RELEASE);
    }
    ss->watched = want;
    return 0;
}

/* The last handle of signum stopped. */
static void unwatch(lull_loop *loop, int signum) {
    lull__signals *ss = &loop->signals;
    uint64_t bit = bit_of(signum);
    ss->watched &= ~bit;
    if (ss->watched) {
        sigset_t mask;
        sigset_of(ss->watched, &mask);
        /* Cannot fail on a signalfd with a valid mask; if it did, the fd
         * would only read a signal no handle wants, and drop it. */
        (void)signalfd(ss->io.fd, &mask, 0);
    } else {
        lull_io_stop(&ss->io);
        close(ss->io.fd);
        ss->io.fd = -1;
    }
    if (!(ss->blocked & bit)) return; /* the program's block and instance */
    /* Inside a delivery the callback may start it again at once (a
     * restart): taking back what is pending now would lose what the
     * handle is owed (queued real-time signals past this read, one sent
     * meanwhile). Decided when the deliveries end (on_signalfd). */
    if (ss->delivering) {
        ss->releasing |= bit;
        return;
    }
    release_block(ss, signum);
}

/* Gives back lull's block of signum, whose last handle on this loop
 * stopped: the loop no longer holds it; the last loop to let go takes back
 * a pending instance and unblocks it in this thread. */
static void release_block(lull__signals *ss, int signum) {
    uint64_t bit = bit_of(signum);
    ss->blocked &= ~bit;
    if (__atomic_sub_fetch(&held[signum - 1], 1, __ATOMIC_ACQ_REL))
        return; /* another loop still watches it: settled when it stops */
    /* Not held here: lull_signal_block made this thread's block the
     * program's (it and a pending instance stay), or this thread never had
     * it blocked (then nothing can be pending for the process: this thread
     * would have taken it). Another thread that holds it settles later. */
    if (!(held_here & bit)) return;
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, signum);
    static const struct timespec zero = {0, 0};
    int got;
    do {
        got = sigtimedwait(&one, NULL, &zero);
    } while (got == signum || (got < 0 && errno == EINTR));
    unblock_here(bit);
}

/* ------------------------------------------------------------ handles */

int lull_signal_init(lull_loop *loop, lull_signal *sig, lull_signal_fn fn) {
    if (!loop || !sig || !fn) return -EINVAL;
    /* A started handle, on this loop or another: clearing it would cut
     * that loop's list at it (the handles started after it never called
     * again, the signal watched for a handle gone). Asked by address of
     * the process's started handles: sig is garbage before its first
     * init. */
    if (started_anywhere(sig)) return -EBUSY;
    memset(sig, 0, sizeof *sig);
    sig->loop = loop;
    sig->fn = fn;
    return 0;
}

int lull_signal_start(lull_signal *sig, int signum) {
    if (!sig || !sig->loop || !sig->fn || !watchable(signum)) return -EINVAL;
    lull_loop *loop = sig->loop;
    LULL_ASSERT_LOOP_THREAD(loop);
    settle();
    if ((sig->flags & SIG_STARTED) && sig->signum == signum) return 0;
    /* The new signal first, then the old one let go: a move the kernel
     * refuses (signalfd's new mask) leaves the handle on its old signal,
     * and the mask as it was; stopped first, the old one's block was
     * lifted and its next instance took its default action. */
    lull__signals *ss = &loop->signals;
    if (!(ss->watched & bit_of(signum))) {
        int rc = watch(loop, signum);
        if (rc < 0) return rc;
    }
    if (sig->flags & SIG_STARTED) lull_signal_stop(sig);
    sig->signum = signum;
    sig->seq = ++ss->seq;
    link_started(ss, sig);
    sig->flags |= SIG_STARTED;
    if (!(sig->flags & SIG_UNREF)) ss->refs++;
    update_ref(ss);
    return 0;
}

int lull_signal_stop(lull_signal *sig) {
    if (!sig || !sig->loop) return -EINVAL;
    settle();
    if (!(sig->flags & SIG_STARTED)) return 0;
    lull_loop *loop = sig->loop;
    LULL_ASSERT_LOOP_THREAD(loop);
    lull__signals *ss = &loop->signals;
    if (ss->next == sig) ss->next = sig->next;
    unlink_started(ss, sig);
    sig->flags &= ~SIG_STARTED;
    if (!(sig->flags & SIG_UNREF)) ss->refs--;
    int signum = sig->signum;
    sig->signum = 0;
    bool still = false;
    for (lull_signal *h = ss->head; h && !still; h = h->next)
        still = h->signum == signum;
    if (!still) unwatch(loop, signum);
    update_ref(ss);
    return 0;
}

static void set_unref(lull_signal *sig, bool unref) {
    if (!sig || !sig->loop) return;
    bool was = sig->flags & SIG_UNREF;
    if (was == unref) return;
    lull__signals *ss = &sig->loop->signals;
    if (unref)
        sig->flags |= SIG_UNREF;
    else
        sig->flags &= ~SIG_UNREF;
    if (!(sig->flags & SIG_STARTED)) return;
    if (unref)
        ss->refs--;
    else
        ss->refs++;
    update_ref(ss);
}

void lull_signal_ref(lull_signal *sig) {
    set_unref(sig, false);
}

void lull_signal_unref(lull_signal *sig) {
    set_unref(sig, true);
}

int lull_signal_block(int signum) {
    if (!watchable(signum)) return -EINVAL;
    settle();
    /* From now on the block in this thread is the program's, even if lull
     * blocked it first: the last stop leaves it. */
    held_here &= ~bit_of(signum);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, signum);
    int rc = pthread_sigmask(SIG_BLOCK, &one, NULL);
    return rc ? -rc : 0;
}
