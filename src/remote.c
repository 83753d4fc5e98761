/* Cross-thread posts: the only code here that runs on other threads.
 *
 * Owns: an MPSC stack of tasks (Treiber push, the loop takes the whole
 * stack at once, so there is no ABA) and an eventfd that wakes the loop.
 * A task's remote_next link is separate from its queue links, so a task may
 * be queued locally and remotely at once.
 *
 *   remote_next == NULL      not queued remotely; a post may claim it
 *   remote_next == CLAIMED   claimed by a poster, being pushed
 *   remote_next == other     queued: the next older entry, or END
 *
 * A poster wakes the loop only when the stack goes from empty to non-empty
 * AND the loop is asleep (loop->sleeping), so a burst of posts costs one
 * wake, and posts to a loop that is awake cost no syscall at all: the loop
 * looks at the stack itself before it sleeps. The two sides form a Dekker
 * pair, all seq_cst: the loop stores sleeping then loads the stack head; a
 * poster stores the head then loads sleeping. At least one sees the other's
 * store, so a post is never left behind a sleeping loop.
 *
 * Why no wake-up is lost (L: the loop, P: the poster whose push made the
 * stack non-empty; only such a push wakes, and while the stack stays
 * non-empty the loop never blocks, so P is the one that matters):
 *   L1 store sleeping = S (S: EPOLL or FUTEX)   P1 CAS head: empty -> task
 *   L2 load head; non-empty: store AWAKE, do    P2 load sleeping
 *      not block (no poll at all for FUTEX:     P3 S == EPOLL: write eventfd
 *      its epoll set holds no fd to look at)       S == FUTEX: CAS S -> AWAKE,
 *   L3 block: epoll_wait, or FUTEX_WAIT on         then FUTEX_WAKE
 *      the word expecting FUTEX
 * In the single order of seq_cst operations, either P1 precedes L2 (L sees
 * the task and does not block), or L1 precedes P2 (P sees S and wakes L).
 * The wake itself cannot be missed: the eventfd's edge stays pending in the
 * epoll set until L's next epoll_wait reports it, however late L gets
 * there; and a FUTEX_WAIT whose word P already swapped returns at once
 * (the kernel compares the word under its hash-bucket lock), while one that
 * blocked first is woken by P's FUTEX_WAKE. The loop looks at the stack
 * after every poll however it woke, so a post made while it was awake
 * (sleeping == AWAKE, no wake at all) runs in that iteration or makes the
 * next L2 see it. tests/test_remote.c has a post land between L2 and L3
 * on every round (remote_post_between_the_look_and_*), and a poster that
 * posts the instant it sees L1 (remote_post_as_the_loop_sleeps_*).
 *
 * How the loop sleeps decides how it is woken:
 *   SLEEP_EPOLL  the loop watches fds and waits in epoll: the poster writes
 *                the eventfd. It is registered edge-triggered and never
 *                read: each write raises a new edge, and skipping the read
 *                saves the loop a syscall per wake. Its counter would need
 *                2^64 writes to saturate; if a write ever finds it full, the
 *                poster drains it and writes again.
 *   SLEEP_FUTEX  the loop watches no fd (a worker or dedicated loop): only a
 *                post or a deadline can wake it, so it waits on the sleeping
 *                word itself with FUTEX_WAIT_BITSET (absolute ns deadline),
 *                and the poster, having swapped the word to awake, calls
 *                FUTEX_WAKE. Same-CPU round trips then cost what a bare
 *                futex ping-pong costs, not an epoll wake-up.
 *
 * Freeing: a poster touches the loop after its task is visible (to read
 * sleeping and wake it), so the loop could run the task and be freed before
 * the poster is done with it. Such posters are counted in loop->posters,
 * raised before the push and dropped after the wake, and lull_loop_free
 * waits for the count to reach 0 (libuv's uv_close spins on an async
 * handle's pending flag for the same reason). The uncontended post pays one
 * atomic add and one subtract; posts onto a non-empty stack pay nothing.
 *
 * The five rows (README, "The contracts"): trigger: a poster's wake (eventfd
 * edge or futex), and the loop looks after every poll; source of truth: the
 * stack; pending-work predicate: stack non-empty; next deadline: none; quiet
 * condition: always quiet between posts (no timer, no task). */
#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"

/* Marker values for remote_next: distinct addresses no task can have. */
static char claimed_marker, end_marker;
#define CLAIMED ((lull_task *)(void *)&claimed_marker)
#define END     ((lull_task *)(void *)&end_marker)

LULL__HOT static void wake_loop(lull_loop *loop) {
    uint64_t one = 1;
    while (write(loop->remote_fd, &one, sizeof one) < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN) {
            /* EBADF: a close() of the program's took the eventfd (a double
             * close, a close-all after fork). The loop sleeps on with this
             * post queued and nothing can wake it: a hang with no clue,
             * unless debug builds say so here (libuv aborts too). */
            LULL_ASSERT(false, "lull: the loop's wake-up eventfd is gone "
                               "(closed by a close() not lull's?)");
            return;
        }
        uint64_t drain;
        /* An interrupted drain goes round again like an interrupted write:
         * returning would leave the loop asleep with this post queued. */
        if (read(loop->remote_fd, &drain, sizeof drain) < 0 &&
            errno != EAGAIN && errno != EINTR)
            return;
    }
}

/* The push half of a remote post: 0 (coalesced, or the stack was not
 * empty: nothing more to do), or 1 when the poster pushed onto an empty
 * stack and must wake the loop and drop its count (lull__post_remote_wake),
 * which it may do after releasing its own locks (a pool worker: the loop's
 * next submit does not wait behind the wake-up). */
LULL__HOT int lull__post_remote_push(lull_loop *loop, lull_task *task) {
    /* Claims the task, or finds it queued (or being pushed) and is
     * coalesced into the run it gets anyway. A coalesced post must still
     * publish what its poster wrote before it, or the task's run need not
     * see it and no later run carries it: a failed compare-and-swap is
     * only a load and releases nothing. So the coalescing poster rewrites
     * the link with the value it found (a release read-modify-write), and
     * every later write of the link is a read-modify-write too (the push
     * below, the drain's exchanges), so that the drain's acquiring
     * exchange, which comes before the run, reads the end of that
     * release sequence. Sequentially consistent (on x86 the same locked
     * cmpxchg): a post that finds the link non-NULL comes before the
     * drain's reset in their single order, so its run follows it. */
    lull_task *seen = __atomic_load_n(&task->remote_next, __ATOMIC_RELAXED);
    for (;;) {
        if (__atomic_compare_exchange_n(&task->remote_next, &seen,
                                        seen ? seen : CLAIMED, false,
                                        __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
            if (seen) return 0; /* coalesced, its writes published */
            break;              /* claimed: push it */
        }
    }
    /* Only a push onto an empty stack goes on to touch the loop (to wake
     * it), so only such a poster is counted; the count is raised before the
     * push makes the task visible, and the push's release orders it before
     * the loop's drain. A poster that finds the stack non-empty is done with
     * the loop the moment its push succeeds. */
    bool counted = false;
    lull_task *head = __atomic_load_n(&loop->remote_head, __ATOMIC_RELAXED);
    do {
        if (head == NULL && !counted) {
            __atomic_fetch_add(&loop->posters, 1, __ATOMIC_RELAXED);
            counted = true;
        }
        /* An exchange, not a store: a store would end the release
         * sequence of a post coalesced while the task was claimed. */
        (void)__atomic_exchange_n(&task->remote_next, head ? head : END,
                                  __ATOMIC_RELAXED);
    } while (!__atomic_compare_exchange_n(&loop->remote_head, &head, task, true,
                                          __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    if (head == NULL) return 1;
    /* Counted on an empty stack that another push filled first. */
    if (counted) __atomic_fetch_sub(&loop->posters, 1, __ATOMIC_RELEASE);
    return 0;
}

/* The wake half, after a push that returned 1. */
LULL__HOT void lull__post_remote_wake(lull_loop *loop) {
    int sleeping = __atomic_load_n(&loop->sleeping, __ATOMIC_SEQ_CST);
    if (sleeping == LULL__SLEEP_EPOLL) {
        wake_loop(loop);
    } else if (sleeping == LULL__SLEEP_FUTEX &&
               __atomic_compare_exchange_n(&loop->sleeping, &sleeping,
                                           LULL__AWAKE, false, __ATOMIC_SEQ_CST,
                                           __ATOMIC_RELAXED)) {
        syscall(SYS_futex, &loop->sleeping, FUTEX_WAKE_PRIVATE, 1, NULL, NULL,
                0);
    }
    /* The last touch of the loop: from here lull_loop_free may return. */
    __atomic_fetch_sub(&loop->posters, 1, __ATOMIC_RELEASE);
}

void lull__post_remote_forked(lull_loop *loop, lull_task *task) {
    if (lull__post_remote_push(loop, task))
        __atomic_fetch_sub(&loop->posters, 1, __ATOMIC_RELEASE);
}

LULL__HOT void lull_task_post_remote(lull_loop *loop, lull_task *task) {
    /* A task never set up: as lull_task_post (src/task.c). */
    if (LULL_UNLIKELY(!loop || !task || !task->node.fn.task)) {
        LULL_ASSERT(!task || !loop, "lull: posting a task with no function");
        return;
    }
    if (lull__post_remote_push(loop, task)) lull__post_remote_wake(loop);
}

/* Waits until no poster is left inside lull_task_post_remote for this loop (one
 * that has published can still be about to wake it). Posters leave after a
 * bounded number of steps, so a short spin that yields the CPU is enough;
 * the loop thread calls this only at lull_loop_free. */
void lull__remote_quiesce(lull_loop *loop) {
    while (__atomic_load_n(&loop->posters, __ATOMIC_ACQUIRE) != 0)
        sched_yield();
}

/* Takes every remote post and queues it locally, oldest first. */
LULL__HOT void lull__remote_drain(lull_loop *loop) {
    lull_task *stack =
        __atomic_exchange_n(&loop->remote_head, NULL, __ATOMIC_ACQUIRE);
    /* The stack is newest first: reverse it through the claimed links. */
    lull_task *fifo = END;
    while (stack != END && stack != NULL) {
        /* Acquiring: what a post coalesced into this one wrote before it
         * (lull__post_remote_push) is visible from here. Never NULL, so
         * no poster claims the task during the reversal. */
        lull_task *older =
            __atomic_exchange_n(&stack->remote_next, fifo, __ATOMIC_ACQUIRE);
        /* Every link on the stack is an older post or END. NULL is one
         * that lull_task_init (or a free) cleared while the task was
         * queued here: the posts older than it would be dropped without a
         * word, and, their links still set, take every later post of
         * theirs as coalesced into one that never runs. */
        LULL_ASSERT(older != NULL,
                    "lull: remote posts corrupted (a task set up again or "
                    "freed while queued remotely?)");
        fifo = stack;
        stack = older;
    }
    if (loop->audit_remote && fifo != END) {
        loop->audit_remote = false;
        lull__audit_remote_wakeup(loop, fifo);
    }
    while (fifo != END) {
        lull_task *t = fifo;
        /* From here another thread may claim the task again. Sequentially
         * consistent, as the claim is: a post that finds the link set
         * before this reset in their single order is coalesced into the
         * run below, and the exchange acquires what that poster wrote
         * first (lull__post_remote_push). */
        fifo = __atomic_exchange_n(&t->remote_next, NULL, __ATOMIC_SEQ_CST);
        lull_task_post(loop, t);
    }
}

/* Called with a blocking wait ahead: announces how the loop will sleep, and
 * says whether it may (false: a post arrived meanwhile, do not block). */
LULL__HOT bool lull__remote_sleep(lull_loop *loop, int how) {
    __atomic_store_n(&loop->sleeping, how, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&loop->remote_head, __ATOMIC_SEQ_CST) == NULL)
        return true;
    __atomic_store_n(&loop->sleeping, LULL__AWAKE, __ATOMIC_RELAXED);
    return false;
}

LULL__HOT void lull__remote_awake(lull_loop *loop) {
    __atomic_store_n(&loop->sleeping, LULL__AWAKE, __ATOMIC_RELAXED);
}

/* Sleeps on the sleeping word (announced as SLEEP_FUTEX) until a poster
 * wakes it or the real clock reaches now_ns + timeout_ns (-1: no limit).
 * Spurious returns are harmless: the loop simply iterates. Returns 0, or
 * the futex call's errno: EINTR (a signal), EAGAIN (a poster swapped the
 * word first), ETIMEDOUT, or another when the kernel refused to wait. */
LULL__HOT int lull__remote_wait(lull_loop *loop, int64_t timeout_ns,
                                uint64_t now_ns) {
    struct timespec deadline, *dp = NULL;
    if (timeout_ns >= 0) {
        uint64_t at = now_ns + (uint64_t)timeout_ns;
        deadline.tv_sec = (time_t)(at / 1000000000u);
        deadline.tv_nsec = (long)(at % 1000000000u);
        dp = &deadline;
    }
    if (syscall(SYS_futex, &loop->sleeping, FUTEX_WAIT_BITSET_PRIVATE,
                LULL__SLEEP_FUTEX, dp, NULL, FUTEX_BITSET_MATCH_ANY) < 0)
        return errno;
    return 0;
}

int lull__remote_init(lull_loop *loop) {
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    /* Never the program's closed stdout: its writes would wake the loop. */
    loop->remote_fd = fd < 0 ? -errno : lull__fd_above_stdio(fd);
    if (loop->remote_fd < 0) return loop->remote_fd;
    /* Ending the epoll sleep is its whole job, so no watcher stands behind
     * it: the loop takes the stack after every poll, however it woke. */
    return lull__backend_add_wakeup(loop, loop->remote_fd);
}

void lull__remote_close(lull_loop *loop) {
    if (loop->remote_fd < 0) return;
    close(loop->remote_fd); /* the kernel drops its epoll registration */
    loop->remote_fd = -1;
}

/* Calls fn for each post not yet taken, newest first. Loop thread: only the
 * loop takes the stack, and posters only push onto its head, so the links
 * below the head read here stay as they are during the walk. */
void lull__remote_each(lull_loop *loop, void (*fn)(lull_task *t, void *arg),
                       void *arg) {
    lull_task *t = __atomic_load_n(&loop->remote_head, __ATOMIC_ACQUIRE);
    while (t != NULL && t != END) {
        lull_task *older = __atomic_load_n(&t->remote_next, __ATOMIC_RELAXED);
        fn(t, arg);
        t = older;
    }
}

/* lull_loop_fork, in the child, once the epoll set is the child's own: the
 * eventfd is still shared with the parent, so it gets its own, registered
 * in the new set. Only the forking thread exists in the child, so no poster
 * is inside and the loop is not asleep: both words are reset. Posts
 * already on the stack stay and run in the child too, like the rest of its
 * copy of the loop. */
int lull__remote_fork(lull_loop *loop) {
    __atomic_store_n(&loop->sleeping, LULL__AWAKE, __ATOMIC_RELAXED);
    __atomic_store_n(&loop->posters, 0u, __ATOMIC_RELAXED);
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    fd = fd < 0 ? -errno : lull__fd_above_stdio(fd);
    if (fd < 0) return fd;
    int err = lull__backend_add_wakeup(loop, fd);
    if (err) {
        close(fd);
        return err;
    }
    close(loop->remote_fd); /* the child's reference to the parent's */
    loop->remote_fd = fd;
    return 0;
}

/* lull_loop_fork, last, when lull_loop_backend_timeout announced a host's
 * wait and no run came since (loop->embedded): the host waits in the child
 * too, on the child's new fd, so the wait stays announced (the reset in
 * lull__remote_fork had the child's posters write no eventfd), and work
 * the fork left ready (`ready`: posts made before it, which wrote the
 * parent's eventfd and which lull__notify_fork's drain queued, so the
 * stack is empty here; what the fork itself queued) writes the new
 * eventfd, so that the new fd shows it. */
void lull__remote_fork_host(lull_loop *loop, bool ready) {
    __atomic_store_n(&loop->sleeping, LULL__SLEEP_EPOLL, __ATOMIC_SEQ_CST);
    if (ready) wake_loop(loop);
}
