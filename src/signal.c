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
 * instead. So the first handle of a signal blocks it in the calling thread
 * (noting that it did, if it was not blocked already), and the last stop
 * unblocks it again there: a signal nobody watches keeps its usual action.
 * Other threads are the program's to mask (lull_signal_block before they
 * start; docs/PROCESS.md). The last stop first takes back (sigtimedwait, no
 * wait) an instance still pending: it arrived while watched, and unblocking
 * would hand it to the default action (death, for most).
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
 * while refs > 0; blocked is a subset of watched.
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

static void on_signalfd(lull_io *io, int events) {
    (void)events;
    lull__signals *ss = &io->loop->signals;
    struct signalfd_siginfo info[READ_BATCH];
    ssize_t n = read(io->fd, info, sizeof info);
    if (n <= 0) return; /* EAGAIN: another reader (a forked copy) took it */
    uint64_t upto = ss->seq;
    for (size_t i = 0; i < (size_t)n / sizeof info[0]; i++) {
        deliver(ss, &info[i], upto);
        if (!ss->watched) return; /* every handle stopped: the fd is gone */
    }
}
LULL__OWN_NAME(on_signalfd, "lull_signal signalfd", lull_loop, signals.io);

/* ------------------------------------------------------ the loop's mask */

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
        rc = fd < 0 ? -errno : 0;
        if (rc == 0) {
            lull_io_init(loop, &ss->io, fd, on_signalfd);
            rc = lull_io_start(&ss->io, LULL_READABLE);
            if (rc < 0) close(fd);
        }
    }
    if (rc < 0) {
        if (!was_blocked) pthread_sigmask(SIG_UNBLOCK, &one, NULL);
        return rc;
    }
    if (!was_blocked) {
        if (!ss->blocked) ss->thread = pthread_self();
        if (pthread_equal(ss->thread, pthread_self())) ss->blocked |= bit;
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
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, signum);
    static const struct timespec zero = {0, 0};
    int got;
    do {
        got = sigtimedwait(&one, NULL, &zero);
    } while (got == signum || (got < 0 && errno == EINTR));
    if ((ss->blocked & bit) && pthread_equal(ss->thread, pthread_self())) {
        ss->blocked &= ~bit;
        pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    }
}

/* ------------------------------------------------------------ handles */

int lull_signal_init(lull_loop *loop, lull_signal *sig, lull_signal_fn fn) {
    if (!loop || !sig || !fn) return -EINVAL;
    memset(sig, 0, sizeof *sig);
    sig->loop = loop;
    sig->fn = fn;
    return 0;
}

int lull_signal_start(lull_signal *sig, int signum) {
    if (!sig || !sig->loop || !sig->fn || !watchable(signum)) return -EINVAL;
    lull_loop *loop = sig->loop;
    LULL_ASSERT_LOOP_THREAD(loop);
    if (sig->flags & SIG_STARTED) {
        if (sig->signum == signum) return 0;
        lull_signal_stop(sig);
    }
    lull__signals *ss = &loop->signals;
    if (!(ss->watched & bit_of(signum))) {
        int rc = watch(loop, signum);
        if (rc < 0) return rc;
    }
    sig->signum = signum;
    sig->seq = ++ss->seq;
    sig->next = NULL;
    sig->prev = ss->tail;
    if (ss->tail)
        ss->tail->next = sig;
    else
        ss->head = sig;
    ss->tail = sig;
    sig->flags |= SIG_STARTED;
    if (!(sig->flags & SIG_UNREF)) ss->refs++;
    update_ref(ss);
    return 0;
}

int lull_signal_stop(lull_signal *sig) {
    if (!sig || !sig->loop) return -EINVAL;
    if (!(sig->flags & SIG_STARTED)) return 0;
    lull_loop *loop = sig->loop;
    LULL_ASSERT_LOOP_THREAD(loop);
    lull__signals *ss = &loop->signals;
    if (ss->next == sig) ss->next = sig->next;
    if (sig->prev)
        sig->prev->next = sig->next;
    else
        ss->head = sig->next;
    if (sig->next)
        sig->next->prev = sig->prev;
    else
        ss->tail = sig->prev;
    sig->next = sig->prev = NULL;
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
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, signum);
    int rc = pthread_sigmask(SIG_BLOCK, &one, NULL);
    return rc ? -rc : 0;
}
