/* The worker pool: blocking work off the loop, back on it when done.
 *
 * Owns: a FIFO of submitted lull_work items (caller-owned, linked through
 * their own fields: no allocation per submission) and the pool's threads.
 * The queue, its counters and the idle stack live under one mutex. The pool
 * reaches loops only through the public API: lull_loop_ref / lull_loop_unref
 * on the submitting loop's thread, lull_task_post_remote from any thread.
 *
 * A work item's life:
 *   submit (loop thread)  queued under the lock, loop referenced, one idle
 *                         thread woken if none is already on its way
 *   a pool thread         unlinks it under the lock, runs fn unlocked, then
 *                         lull_task_post_remote(loop, &work->task): its last
 *                         touch of the item (done may free or resubmit it)
 *   cancel or close       unlinks a waiting item under the lock and hands it
 *                         to the loop with -ECANCELED: the lock decides
 *                         which of thread, cancel and close gets it, so
 *                         done runs exactly once
 *   done (loop thread)    the item is free again, the loop reference
 *                         dropped, then the user's done function runs
 * Completions travel the loop's remote-post stack, which wakes the loop
 * only when it goes from empty to non-empty: a burst costs one wake.
 *
 * Sleeping: each thread has its own futex word. A thread that finds the
 * queue empty pushes itself on the idle stack (LIFO, so the thread that ran
 * last, with warm caches, runs next), sets its word to 1 and waits on it
 * with no timeout. A submitter pops it, sets the word to 0 and wakes it
 * after dropping the lock, so the woken thread does not block on the lock
 * its waker holds. `waking` counts threads woken but not yet back under the
 * lock: a submit wakes another only while waking < queued, so a burst of N
 * items wakes at most N threads, and a thread that is running picks up
 * queued items without any wake at all.
 *
 * The five rows (README, "The contracts") of the pool's idle threads:
 *   trigger              a submit (wakes one idle thread's futex word), or
 *                        lull_pool_close (wakes them all)
 *   source of truth      the queue, under the pool's lock
 *   pending predicate    the queue is not empty
 *   next deadline/retry  none: a thread sleeps with no timeout and no
 *                        thread ever polls the queue
 *   quiet condition      queue empty: every thread asleep on its word, and
 *                        no loop holds a reference for this pool
 * (docs/POOL.md has the same table.) */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"
#include "lull.h"
#include "own_name.h"
#include "pool.h"

/* libuv's default too: enough to overlap a few syncs and lookups, few
 * enough to cost nothing on a small machine. */
#define DEFAULT_THREADS 4
#define MAX_THREADS     1024
/* A queue this long means the pool cannot keep up: the submitter should
 * hear about it (-EAGAIN) rather than hide the latency in a longer queue. */
#define DEFAULT_MAX_QUEUED 1024
/* The least stack a pool thread gets: libuv's for its pool threads too. A
 * new thread's default comes from the main thread's RLIMIT_STACK (ulimit
 * -s) or pthread_setattr_default_np, which a program may make small for
 * threads of its own; work expects an ordinary stack (the file helpers'
 * 64 KiB bounce buffers, getaddrinfo's NSS modules, the user's fn). Only
 * the pages touched cost memory. A larger default is kept. */
#define MIN_STACK ((size_t)8 << 20)

typedef struct worker {
    lull_pool *pool;
    pthread_t thread;
    uint32_t word;            /* futex: 1 while asleep; the waker sets 0 */
    struct worker *next_idle; /* the idle stack (under the lock) */
    lull_work *current;       /* the item it runs, until its completion is
                                 posted (under the lock) */
    lull_work *finished;      /* current once its fn returned (atomic; NULL
                                 under the lock as it is taken): a fork()ed
                                 child hands it back done, not cancelled */
} worker;

struct lull_pool {
    pthread_mutex_t lock; /* guards the fields below, but where noted */
    lull_work *head;      /* waiting items, oldest first */
    lull_work *tail;
    unsigned queued;     /* items in the queue */
    unsigned max_queued; /* submit says -EAGAIN at this length */
    unsigned running;    /* items a thread is running */
    worker *idle;        /* threads asleep, most recent first */
    unsigned idle_count;
    unsigned waking; /* woken, not yet back under the lock */
    bool closed;     /* no more submissions; threads exit when empty */
    bool forked;     /* a fork()ed child's copy: its threads are not here */
    uint64_t submitted, completed, cancelled, rejected;
    uint64_t wakeups; /* atomic: counted as each sleep returns */
    unsigned threads; /* started; fixed after lull_pool_new (no lock), and
                         0 in a fork()ed child (fork_child) */
    worker *workers;  /* `threads` of them (no lock) */
    /* Atomic: lull_pool_free's one, and one per accepted item until its
     * done has run. lull_pool_free returns before the last done functions
     * run, and one of them may submit again (a listing's next batch,
     * src/fsops.c): the memory stays, closed, until the last is done. */
    uint32_t refs;
    lull_pool *next_pool, *prev_pool; /* every pool (under pools_lock) */
    bool listed;                      /* on that list (under pools_lock) */
};

/* Every pool of the process, for the fork handlers below. Taken after
 * default_lock and before any pool's lock. */
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static lull_pool *pools;

static void pool_destroy(lull_pool *p) {
    pthread_mutex_lock(&pools_lock);
    if (p->listed) {
        if (p->prev_pool)
            p->prev_pool->next_pool = p->next_pool;
        else
            pools = p->next_pool;
        if (p->next_pool) p->next_pool->prev_pool = p->prev_pool;
    }
    pthread_mutex_unlock(&pools_lock);
    pthread_mutex_destroy(&p->lock);
    free(p->workers);
    free(p);
}

static void pool_release(lull_pool *p) {
    if (__atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) == 0) pool_destroy(p);
}

static void futex_wake(uint32_t *word) {
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Under the lock: takes the most recently idle thread off the stack and
 * marks it woken; the caller calls futex_wake on it once unlocked. */
static worker *pop_idle(lull_pool *p) {
    worker *w = p->idle;
    p->idle = w->next_idle;
    p->idle_count--;
    p->waking++;
    __atomic_store_n(&w->word, 0, __ATOMIC_RELEASE);
    return w;
}

static void unlink_work(lull_pool *p, lull_work *w) {
    if (w->prev)
        w->prev->next = w->next;
    else
        p->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        p->tail = w->prev;
    w->next = w->prev = NULL;
    w->queued = false;
    p->queued--;
}

/* Set once by each pool thread, for lull__pool_thread. */
static _Thread_local bool is_pool_thread;

bool lull__pool_thread(void) {
    return is_pool_thread;
}

/* On w's thread, its fn returned, under the lock: an item let go
 * (lull__work_let_go) ends here, with no loop to tell. Dropped in this
 * hold of the lock, which a fork() takes first (fork_prepare): the
 * child's copy is then either still this thread's current, which
 * forget_threads drops, or freed already. Dropped after the unlock, a
 * fork() meanwhile left the child a copy that no thread there held, so
 * nothing freed it, nor its pool reference. drop only frees memory. */
static void drop_let_go(lull_pool *p, worker *me, lull_work *w) {
    w->done(w, w->status); /* frees w */
    me->current = NULL;
    p->running--;
    p->completed++;
    /* Never the last reference: lull_pool_free holds its own until it
     * has joined this thread. */
    __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL);
}

static void *worker_main(void *arg) {
    worker *me = arg;
    lull_pool *p = me->pool;
    is_pool_thread = true;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        lull_work *w = p->head;
        if (w) {
            /* An item lull_work_init cleared while queued: the queue was
             * cut at it (the items behind it are lost) and it has no loop
             * to go back to. Debug builds stop here, where it is seen. */
            LULL_ASSERT(w->queued && w->pool == p,
                        "lull: lull_work_init on an item still submitted");
            unlink_work(p, w);
            p->running++;
            me->current = w;
            me->finished = NULL;
            pthread_mutex_unlock(&p->lock);
            w->status = w->fn(w);
            /* Before the lock, which a fork() may hold: its child then
             * knows the work was done (fork_child), and what fn made (an
             * open's fd, a lookup's answer) reaches the child's done. */
            __atomic_store_n(&me->finished, w, __ATOMIC_RELEASE);
            /* Pushed to the loop with current cleared in one hold of the
             * lock: lull__pool_holds sees the item here or, from then on,
             * on the loop's remote stack, never neither nor a stale one.
             * The wake-up (a system call) is made after the unlock, so the
             * loop's next submit does not wait behind it. */
            pthread_mutex_lock(&p->lock);
            lull_loop *loop = w->loop; /* NULL once let go */
            /* Let go, it keeps its pool; cleared by lull_work_init while
             * fn ran, it has none, and no loop to give its done to. */
            LULL_ASSERT(w->pool == p,
                        "lull: lull_work_init on an item still submitted");
            if (!loop) {
                drop_let_go(p, me, w);
                continue;
            }
            int wake = lull__post_remote_push(loop, &w->task); /* last
                                                            touch of w */
            me->current = NULL;
            p->running--;
            p->completed++;
            if (wake) {
                pthread_mutex_unlock(&p->lock);
                lull__post_remote_wake(loop);
                pthread_mutex_lock(&p->lock);
            }
            continue;
        }
        if (p->closed) break;
        me->next_idle = p->idle;
        p->idle = me;
        p->idle_count++;
        __atomic_store_n(&me->word, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&p->lock);
        /* No timeout: only a submit or a close ends this sleep (C1). A
         * return with the word still 1 (a signal, or a late wake meant for
         * an earlier sleep) is counted and slept again. */
        while (__atomic_load_n(&me->word, __ATOMIC_ACQUIRE) == 1) {
            syscall(SYS_futex, &me->word, FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
            __atomic_fetch_add(&p->wakeups, 1, __ATOMIC_RELAXED);
        }
        pthread_mutex_lock(&p->lock);
        p->waking--;
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static void work_done(lull_task *task) {
    lull_work *w = LULL_CONTAINER_OF(task, lull_work, task);
    lull_loop *loop = w->loop;
    lull_pool *pool = w->pool;
    w->pool = NULL; /* free again: done may resubmit it */
    lull_loop_unref(loop);
    if (w->done) w->done(w, w->status);
    pool_release(pool); /* after done, which may submit to it (w may be
                           gone by now: only the local is used) */
}
LULL__OWN_NAME(work_done, "lull_work completion", lull_work, task);

/* Under the lock: whether one of the threads runs w. current is cleared
 * in the hold of the lock that posts w's completion, so a thread holding
 * w has not posted it. */
static bool running_on_a_thread(const lull_pool *p, const lull_work *w) {
    for (unsigned i = 0; i < p->threads; i++)
        if (p->workers[i].current == w) return true;
    return false;
}

bool lull__pool_holds(lull_pool *pool, const lull_work *w) {
    pthread_mutex_lock(&pool->lock);
    bool held = false;
    for (const lull_work *q = pool->head; q && !held; q = q->next)
        held = q == w;
    held = held || running_on_a_thread(pool, w);
    pthread_mutex_unlock(&pool->lock);
    return held;
}

int lull_work_init(lull_work *work, lull_work_fn fn, lull_work_done_fn done) {
    if (!work) return -EINVAL;
    memset(work, 0, sizeof *work);
    lull_task_init(&work->task, work_done);
    work->fn = fn;
    work->done = done;
    return 0;
}

bool lull_work_busy(const lull_work *work) {
    return work && work->pool != NULL;
}

/* bounded: refused (-EAGAIN) once max_queued items wait; not for the next
 * trip of work accepted once (lull__work_submit_again). */
static int submit(lull_loop *loop, lull_pool *pool, lull_work *work,
                  bool bounded) {
    if (!loop || !pool || !work || !work->fn) return -EINVAL;
    if (work->pool) return -EBUSY;
    /* First, so that a call from the wrong thread trips the loop's check
     * before anything is queued; done runs on this thread, after we
     * return, so the reference is in place before it can be dropped. */
    lull_loop_ref(loop);
    pthread_mutex_lock(&pool->lock);
    int rc = 0;
    if (pool->forked) {
        rc = -ECHILD; /* no thread here would ever run it */
    } else if (pool->closed) {
        rc = -ESHUTDOWN;
    } else if (bounded && pool->queued >= pool->max_queued) {
        pool->rejected++;
        rc = -EAGAIN;
    }
    if (rc) {
        pthread_mutex_unlock(&pool->lock);
        lull_loop_unref(loop);
        return rc;
    }
    work->loop = loop;
    work->pool = pool;
    work->status = 0;
    work->next = NULL;
    work->prev = pool->tail;
    if (pool->tail)
        pool->tail->next = work;
    else
        pool->head = work;
    pool->tail = work;
    work->queued = true;
    pool->queued++;
    pool->submitted++;
    __atomic_fetch_add(&pool->refs, 1, __ATOMIC_RELAXED);
    worker *wake = NULL;
    if (pool->idle && pool->waking < pool->queued) wake = pop_idle(pool);
    pthread_mutex_unlock(&pool->lock);
    if (wake) futex_wake(&wake->word);
    return 0;
}

int lull_work_submit(lull_loop *loop, lull_pool *pool, lull_work *work) {
    return submit(loop, pool, work, true);
}

int lull__work_submit_again(lull_loop *loop, lull_pool *pool, lull_work *work) {
    return submit(loop, pool, work, false);
}

int lull_work_cancel(lull_work *work) {
    if (!work) return -EINVAL;
    lull_pool *p = work->pool;
    if (!p) return -EINVAL;
    /* Whatever the item's state: the checks below read the loop's task
     * state, which only its thread may. */
    LULL_ASSERT_LOOP_THREAD(work->loop);
    /* Its done already on its way (posted by its thread or by
     * lull_pool_close, or by an earlier cancel): past cancelling, and the
     * pool may be freed by now (lull_pool_free returns before the last
     * done functions run), so its lock is not touched. */
    if (__atomic_load_n(&work->task.remote_next, __ATOMIC_ACQUIRE) ||
        lull_task_pending(&work->task))
        return -EBUSY;
    pthread_mutex_lock(&p->lock);
    bool waiting = work->queued;
    if (waiting) {
        unlink_work(p, work);
        p->cancelled++;
    }
    pthread_mutex_unlock(&p->lock);
    if (!waiting) return -EBUSY;
    work->status = -ECANCELED;
    lull_task_post(work->loop, &work->task); /* a later task, never inline */
    return 0;
}

int lull__work_let_go(lull_work *w, lull_work_done_fn drop) {
    lull_pool *p = w->pool;
    lull_loop *loop = w->loop;
    LULL_ASSERT_LOOP_THREAD(loop);
    if (!p || __atomic_load_n(&w->task.remote_next, __ATOMIC_ACQUIRE) ||
        lull_task_pending(&w->task))
        return -EBUSY;
    pthread_mutex_lock(&p->lock);
    bool running = running_on_a_thread(p, w);
    if (running) {
        w->loop = NULL;
        w->done = drop;
    }
    pthread_mutex_unlock(&p->lock);
    if (!running) return -EBUSY;
    lull_loop_unref(loop);
    return 0;
}

/* ----------------------------------------------------------- the pool */

static pthread_mutex_t default_lock = PTHREAD_MUTEX_INITIALIZER;
static lull_pool *default_pool; /* under default_lock */
/* A fork()ed child's copy of the parent's default pool: none of its
 * threads are in the child, so work handed to it there would never run.
 * The child forgets it (its next lull_pool_default makes its own, as
 * libuv's child does) but keeps the memory, which items copied from the
 * parent still point to (their done drops a pool reference). */
static lull_pool *forked_default;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* Held across fork(), default_lock, pools_lock and every pool's lock, so
 * the child's copy of each is one no thread was in the middle of changing
 * (a pool thread holds its pool's lock as it takes or hands back work). */
static void fork_prepare(void) {
    pthread_mutex_lock(&default_lock);
    pthread_mutex_lock(&pools_lock);
    for (lull_pool *p = pools; p; p = p->next_pool)
        pthread_mutex_lock(&p->lock);
}

static void fork_parent(void) {
    for (lull_pool *p = pools; p; p = p->next_pool)
        pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&pools_lock);
    pthread_mutex_unlock(&default_lock);
}

/* Hands w back to the child's copy of its loop: with fn's status where
 * its fn had returned before the fork (ran), else as never run (its fn
 * runs, if at all, in the parent). Its done then drops the loop's
 * reference in the child too, after lull_loop_fork. */
static void hand_back_forked(lull_work *w, bool ran) {
    w->next = w->prev = NULL;
    w->queued = false;
    if (!ran) w->status = -ECANCELED;
    lull__post_remote_forked(w->loop, &w->task);
}

/* In the child, a pool made before the fork has none of its threads: it
 * refuses work (-ECHILD) instead of queueing what would never run, and
 * lull_pool_free frees it without joining threads that are not there.
 * What it held, waiting or running, would never come back to the child's
 * loops, which would wait for it for ever (uv_loop_fork's child must not
 * count on the threadpool either): it comes back cancelled, as from
 * lull_pool_close, but for an item whose fn had returned (its thread
 * waiting for the lock the fork holds), which comes back done. */
static void forget_threads(lull_pool *p) {
    unsigned ran = 0;
    for (unsigned i = 0; i < p->threads; i++) {
        worker *t = &p->workers[i];
        lull_work *w = t->current;
        t->current = NULL;
        if (!w) continue;
        /* Let go, it belongs to no loop: the child drops its copy here,
         * as the parent's thread drops the parent's when fn returns. Its
         * pool reference is never the last: lull_pool_free's is held
         * until this thread is joined, which it was not. */
        if (!w->loop) {
            w->done(w, -ECANCELED);
            __atomic_sub_fetch(&p->refs, 1, __ATOMIC_RELAXED);
            continue;
        }
        /* Its fn returned, its thread waiting for the lock the fork
         * holds: done, in the child too (the fd an open made is there). */
        bool done = __atomic_load_n(&t->finished, __ATOMIC_ACQUIRE) == w;
        ran += done;
        hand_back_forked(w, done);
    }
    lull_work *w = p->head;
    while (w) {
        lull_work *next = w->next;
        hand_back_forked(w, false);
        w = next;
    }
    p->completed += ran;
    p->cancelled += p->queued + p->running - ran;
    p->head = p->tail = NULL;
    p->queued = p->running = 0;
    p->forked = true;
    p->closed = true;
    p->threads = 0;
    p->idle = NULL;
    p->idle_count = 0;
    p->waking = 0;
}

static void fork_child(void) {
    for (lull_pool *p = pools; p; p = p->next_pool) {
        forget_threads(p);
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_unlock(&pools_lock);
    if (default_pool) forked_default = default_pool;
    default_pool = NULL;
    pthread_mutex_unlock(&default_lock);
}

static void register_atfork(void) {
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Every taker of default_lock registers the fork handlers first: a fork()
 * made while a thread held the lock before they were registered (a close
 * of a pool of its own, in a program that never asked for the default
 * pool) gave the copy the lock taken for good. */
static void default_lock_take(void) {
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&default_lock);
}

/* lull_pool_close without its check: refuses new work, cancels the waiting
 * work and wakes the sleeping threads to exit. */
static void close_pool(lull_pool *pool) {
    pthread_mutex_lock(&pool->lock);
    if (pool->closed) {
        pthread_mutex_unlock(&pool->lock);
        return;
    }
    pool->closed = true;
    lull_work *cancelled = pool->head;
    for (lull_work *w = cancelled; w; w = w->next)
        w->queued = false;
    pool->cancelled += pool->queued;
    pool->head = pool->tail = NULL;
    pool->queued = 0;
    worker *sleepers = NULL, *w;
    while (pool->idle) {
        w = pop_idle(pool);
        w->next_idle = sleepers;
        sleepers = w;
    }
    /* Unlinked under the lock, so nobody else can take these any more;
     * posted under it too, so that an item is always in the queue, on a
     * thread or on its way back (lull__pool_holds). */
    while (cancelled) {
        lull_work *next = cancelled->next; /* before the post: done may
                                              resubmit it at once */
        cancelled->next = cancelled->prev = NULL;
        cancelled->status = -ECANCELED;
        lull_task_post_remote(cancelled->loop, &cancelled->task);
        cancelled = next;
    }
    pthread_mutex_unlock(&pool->lock);
    for (w = sleepers; w; w = w->next_idle)
        futex_wake(&w->word);
}

/* Closes the pool, joins its threads and drops lull_pool_free's reference:
 * lull_pool_free past its checks, and the undoing of a lull_pool_new whose
 * threads did not all start (inside lull_pool_default, which holds
 * default_lock: hence no check that takes it here). */
static void stop_pool(lull_pool *pool) {
    close_pool(pool);
    for (unsigned i = 0; i < pool->threads; i++)
        pthread_join(pool->workers[i].thread, NULL);
    pool_release(pool); /* freed now, or by the last done still to run */
}

int lull_pool_new(lull_pool **out, const lull_pool_options *opts) {
    static const lull_pool_options defaults;
    if (!out) return -EINVAL;
    *out = NULL;
    if (!opts) opts = &defaults;
    pthread_once(&atfork_once, register_atfork);
    unsigned threads = opts->threads ? opts->threads : DEFAULT_THREADS;
    if (threads > MAX_THREADS) return -EINVAL;
    lull_pool *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->workers = calloc(threads, sizeof *p->workers);
    if (!p->workers) {
        free(p);
        return -ENOMEM;
    }
    pthread_mutex_init(&p->lock, NULL);
    p->refs = 1; /* lull_pool_free's */
    p->max_queued = opts->max_queued ? opts->max_queued : DEFAULT_MAX_QUEUED;

    char name[16] = "lull-pool";
    if (opts->name) {
        strncpy(name, opts->name, sizeof name - 1);
        name[sizeof name - 1] = '\0';
    }
    /* The process's defaults for new threads, but MIN_STACK at least. */
    pthread_attr_t attr;
    size_t stack = 0;
    int rc = -pthread_getattr_default_np(&attr);
    if (rc == 0) {
        if (pthread_attr_getstacksize(&attr, &stack) == 0 && stack < MIN_STACK)
            rc = -pthread_attr_setstacksize(&attr, MIN_STACK);
        if (rc) pthread_attr_destroy(&attr);
    }
    if (rc) {
        stop_pool(p);
        return rc;
    }
    /* Pool threads take no signals but the faults a work function may
     * raise itself (src/signal.c). */
    sigset_t old;
    lull__block_for_thread(&old);
    for (unsigned i = 0; i < threads; i++) {
        worker *w = &p->workers[i];
        w->pool = p;
        rc = -pthread_create(&w->thread, &attr, worker_main, w);
        if (rc) break;
        p->threads++;
        pthread_setname_np(w->thread, name);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc) {
        stop_pool(p);
        return rc;
    }
    pthread_mutex_lock(&pools_lock);
    p->next_pool = pools;
    if (pools) pools->prev_pool = p;
    pools = p;
    p->listed = true;
    pthread_mutex_unlock(&pools_lock);
    *out = p;
    return 0;
}

static bool is_default_pool(const lull_pool *pool) {
    default_lock_take();
    bool is_default = pool == default_pool;
    pthread_mutex_unlock(&default_lock);
    return is_default;
}

void lull_pool_close(lull_pool *pool) {
    if (!pool) return;
    /* The default pool is every user's in the process: one user's close
     * would refuse and cancel all the others' work (a libuv user cannot
     * close its shared pool either). Refused, as lull_pool_free refuses
     * it; a programming error, so a debug build says so. */
    /* Under default_lock (then the pool's, as lull_pool_set_default takes
     * them): a set_default racing this close cannot make the pool the
     * default after the check and see it open. */
    default_lock_take();
    bool is_default = pool == default_pool;
    if (!is_default) close_pool(pool);
    pthread_mutex_unlock(&default_lock);
    LULL_ASSERT(!is_default, "lull: lull_pool_close on the default pool, "
                             "which every user in the process shares");
}

int lull_pool_free(lull_pool *pool) {
    if (!pool) return -EINVAL;
    if (is_default_pool(pool)) return -EBUSY;
    for (unsigned i = 0; i < pool->threads; i++)
        if (pthread_equal(pool->workers[i].thread, pthread_self()))
            return -EDEADLK;
    stop_pool(pool);
    return 0;
}

int lull_pool_default(lull_pool **out) {
    if (!out) return -EINVAL;
    int rc = 0;
    default_lock_take();
    if (!default_pool) {
        lull_pool_options o = {.threads = DEFAULT_THREADS};
        const char *env = getenv("LULL_POOL_THREADS");
        if (env) {
            char *end;
            long n = strtol(env, &end, 10);
            if (*env && !*end && n >= 1 && n <= MAX_THREADS)
                o.threads = (unsigned)n;
        }
        rc = lull_pool_new(&default_pool, &o);
    }
    *out = default_pool;
    pthread_mutex_unlock(&default_lock);
    return rc;
}

int lull_pool_set_default(lull_pool *pool) {
    if (!pool) return -EINVAL;
    /* A closed pool as the default would refuse every user's work in the
     * process until exit. Checked and set under both locks (default_lock
     * first, as lull_pool_close takes them), so a close racing this call
     * either comes first and is seen, or finds the pool the default and
     * is refused. */
    default_lock_take();
    pthread_mutex_lock(&pool->lock);
    int rc = pool->closed ? -EINVAL : default_pool ? -EBUSY : 0;
    if (rc == 0) default_pool = pool;
    pthread_mutex_unlock(&pool->lock);
    pthread_mutex_unlock(&default_lock);
    return rc;
}

void lull_pool_get_stats(lull_pool *pool, lull_pool_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    out->submitted = pool->submitted;
    out->completed = pool->completed;
    out->cancelled = pool->cancelled;
    out->rejected = pool->rejected;
    out->wakeups = __atomic_load_n(&pool->wakeups, __ATOMIC_RELAXED);
    out->threads = pool->threads;
    out->idle = pool->idle_count;
    out->queued = pool->queued;
    out->running = pool->running;
    pthread_mutex_unlock(&pool->lock);
}
