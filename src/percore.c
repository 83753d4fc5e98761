/* One loop per core: N loops on N threads, started and stopped together.
 *
 * Owns: the loops and their threads. Each thread creates its loop (so the
 * loop is owned by the thread that runs it from the start), takes a loop
 * reference so that lull_loop_run waits for remote posts with nothing else to
 * do, runs the user's start function and reports in; lull_percore_start
 * returns when all have. The thread then runs its loop until the stop task
 * has run (a lull_loop_stop from a callback ends one run, not the loop's life).
 *
 * Stopping. lull_percore_stop sets `stopping` and posts a stop task to each
 * loop (lull_task_post_remote, the only way in from another thread): it runs
 * the user's stop function and drops the reference, and the loop runs until
 * nothing keeps it alive (work in flight on a pool comes home first). A
 * loop whose run has ended still receives hand-offs: another loop's stop
 * function, or a task still running there, may post one at any time. So
 * the threads stay, and take what arrives in rounds: in each round every
 * thread counts the posts waiting for its loop, runs them (and what they
 * start) until its loop is idle again, and reports at the end of the round;
 * the last to report decides for all. Invariant: when a round ends, every
 * post made before any thread's previous report has been taken, because
 * each thread looked at its own stack after the previous round ended (the
 * lock orders those pushes before its look). A post is made by a callback
 * (run for a post, or what one started), or by a pool thread for work a
 * loop holds a reference for (and that loop is not idle until its done
 * ran). So a round in which no loop found a post ran nothing on any loop,
 * nothing was posted during it, and nothing is left: the loops are quiet,
 * the threads end, and the loops are freed once every thread is joined.
 * Posts are counted rather than callbacks so that a handle the user left
 * started (an unreferenced watcher of a ready fd) cannot keep the rounds
 * going: it only leaves its loop busy, which lull_percore_stop reports as
 * -EBUSY, as before. Rounds that never end (hand-offs that ignore
 * lull_percore_stopping) are named on stderr once, at BOUNCE_ROUNDS, by
 * each loop that found a post in that round; the stop goes on waiting.
 * A stop from a loop of the set, or from a pool thread whose work a loop
 * may be waiting for, is refused (-EDEADLK). Uses the public API only, and
 * src/pool.h's lull__pool_thread.
 *
 * The five rows (README, "The contracts") of the helper's own part of each
 * loop: trigger: a remote post (a hand-off, or the stop task); source of truth:
 * the loop's remote stack; pending predicate: a post not yet run; next
 * deadline: none; quiet condition: always (it adds a reference, no timer, no
 * task). The rounds at stop: trigger: lull_percore_stop (the stop task); source
 * of truth: each loop's remote stack, read by its own thread after a round
 * ends; pending predicate: some loop found a post in the last round; next
 * deadline: none (a thread between rounds waits on a condition variable
 * with no timeout, a loop in a round blocks in lull_loop_run as usual); quiet
 * condition: a round in which no loop found a post, after which the
 * threads end. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lull.h"
#include "own_name.h"
#include "pool.h"

/* Rounds at stop after which the hand-offs still going are named on
 * stderr, once. A program that honours lull_percore_stopping ends its
 * hand-offs within a few rounds (one for a hand-off, one more for each
 * reply it sends back); one that ignores it bounces for ever, and the stop
 * waits for ever. 1,000 rounds is far past any honest chain, and says
 * which posts keep it going before anyone gives up on a silent hang. */
#define BOUNCE_ROUNDS 1000

/* The most loops a set may have: one per CPU a cpu_set_t can name
 * (CPU_SETSIZE, 1024, as many as pinning can tell apart; libuv caps its
 * thread pool at the same number). A count past it is a wrong argument
 * (a negative number cast, a field left uninitialised), not a machine:
 * refused before a slot is allocated or a thread started. */
#define MAX_LOOPS CPU_SETSIZE

typedef struct slot {
    lull_percore *pc;
    int index;
    int cpu; /* -1: not pinned */
    pthread_t thread;
    lull_loop *loop; /* set by the thread before it reports in */
    lull_task stop;  /* runs the user's stop, drops the reference */
    bool stopped;    /* the stop task ran (the loop's thread only) */
    int rc;          /* setup error, then lull_loop_run's */
} slot;

struct lull_percore {
    lull_percore_options opts;
    int count;
    unsigned next; /* atomic: round robin for lull_percore_next */
    sem_t ready;   /* each thread posts once, set up or failed */
    bool go;       /* written before `run` is posted */
    sem_t run;     /* all set up: run (go) or give up (!go) */
    bool stopping; /* atomic: set before any stop function runs */
    slot *slots;
    /* The rounds at stop (above), under `lock`. */
    pthread_mutex_t lock;
    pthread_cond_t round_ended;
    int members;  /* threads that take part: set up, written before `run` */
    int reported; /* members at the end of the current round */
    unsigned long round;    /* rounds ended */
    uint64_t took;          /* posts the loops found in the current round */
    bool quiet;             /* the last round that ended found none */
    bool warned;            /* atomic: the bounce was named on stderr */
    lull_percore *next_set; /* the list of sets started and not stopped */
    pid_t pid; /* the process that started it: a fork's copy has no threads */
};

/* The sets started and not yet stopped, so that lull_percore_stop can
 * refuse a pointer that is not one (a set stopped already, by a clean-up
 * path run twice) by comparing addresses, never reading the memory it
 * points to. An address is all it has: a set a later start allocated at
 * the same address is that set, and is stopped. Touched only by start and
 * stop, never by a loop. */
static pthread_mutex_t sets_lock = PTHREAD_MUTEX_INITIALIZER;
static lull_percore *sets;
static pthread_once_t sets_once = PTHREAD_ONCE_INIT;

/* A fork() while another thread holds sets_lock would leave the child's
 * copy locked for ever (its next start or stop would wait on it): the
 * fork waits for the lock and both sides release it. Registered before
 * the lock is first taken. */
static void sets_prepare(void) {
    pthread_mutex_lock(&sets_lock);
}

static void sets_after(void) {
    pthread_mutex_unlock(&sets_lock);
}

static void sets_init(void) {
    pthread_atfork(sets_prepare, sets_after, sets_after);
}

static void sets_lock_take(void) {
    pthread_once(&sets_once, sets_init);
    pthread_mutex_lock(&sets_lock);
}

static void sets_add(lull_percore *pc) {
    sets_lock_take();
    pc->next_set = sets;
    sets = pc;
    pthread_mutex_unlock(&sets_lock);
}

static void stop_task(lull_task *task) {
    slot *s = LULL_CONTAINER_OF(task, slot, stop);
    if (s->pc->opts.stop) s->pc->opts.stop(s->loop, s->index, s->pc->opts.arg);
    lull_loop_unref(s->loop);
    s->stopped = true;
}

/* Would lull_loop_run(DEFAULT) run anything: work queued, or a referenced
 * handle that can still fire (a virtual clock's timers fire only when advanced,
 * unless the loop may jump to them itself). */
static bool runnable(const slot *s) {
    lull_metrics m;
    lull_loop_metrics(s->loop, &m);
    const lull_loop_options *o = &s->pc->opts.loop;
    bool timers_fire =
        o->clock != LULL_CLOCK_VIRTUAL || (o->flags & LULL_LOOP_AUTO_ADVANCE);
    return m.live_ready || m.live_io || m.live_refs ||
           (m.live_timers && timers_fire);
}

/* Before the stop task ran, the loop is never idle: the set's reference
 * keeps it waiting for remote posts. Idle then means a lull_loop_unref of
 * the program's dropped that reference (one unref more than its refs, so
 * no assert could see it): every run would return at once without taking a
 * post, the thread would spin, and the stop task would never run. Takes
 * the reference back, which the stop task drops as usual, and says so. */
static void take_reference_back(slot *s) {
    fprintf(stderr,
            "lull_percore: loop %d lost the reference the set holds until "
            "lull_percore_stop (a lull_loop_unref without its "
            "lull_loop_ref?); taken back\n",
            s->index);
    lull_loop_ref(s->loop);
}

/* Runs the loop until it is idle, going round again after a lull_loop_stop. */
static void run_until_idle(slot *s, int rc) {
    while (rc == 0 && (!s->stopped || runnable(s))) {
        if (!s->stopped && !runnable(s)) take_reference_back(s);
        rc = lull_loop_run(s->loop, LULL_RUN_DEFAULT);
    }
    if (rc < 0) s->rc = rc;
}

typedef struct bounce {
    int index; /* the loop's */
} bounce;

static void print_post(const lull_live *e, void *arg) {
    if (e->cause != LULL_LIVE_REMOTE) return;
    const bounce *b = arg;
    if (e->name)
        fprintf(stderr, "  loop %d: task %p  %s\n", b->index, e->handle,
                e->name);
    else
        fprintf(stderr, "  loop %d: task %p  callback %#lx\n", b->index,
                e->handle, (unsigned long)(uintptr_t)e->fn);
}

/* The stop has gone BOUNCE_ROUNDS rounds: names the posts waiting for this
 * loop (the hand-offs that keep the rounds going), under the stderr lock
 * so that the loops' lists do not mix; the first loop to print says what
 * the lists are. The stop goes on waiting. */
static void name_bounce(slot *s) {
    bounce b = {s->index};
    flockfile(stderr);
    if (!__atomic_exchange_n(&s->pc->warned, true, __ATOMIC_RELAXED))
        fprintf(stderr,
                "lull_percore_stop: hand-offs still going after %d rounds "
                "(does a hand-off ignore lull_percore_stopping?); still "
                "waiting for them:\n",
                BOUNCE_ROUNDS);
    lull_loop_walk(s->loop, print_post, &b);
    funlockfile(stderr);
}

/* One round on this loop: takes the posts waiting for it and runs until
 * idle. Returns how many posts it found. A loop whose run failed takes
 * nothing more: its posts stay, and stop reports the loop busy. */
static uint64_t drain(slot *s, unsigned long round) {
    if (s->rc < 0) return 0;
    lull_metrics m;
    lull_loop_metrics(s->loop, &m);
    if (round == BOUNCE_ROUNDS && m.live_remote) name_bounce(s);
    run_until_idle(s, lull_loop_run(s->loop, LULL_RUN_NOWAIT));
    return m.live_remote;
}

/* Reports this thread's round and waits for the others. True when the
 * round found no post on any loop: the loops are quiet. */
static bool round_end(lull_percore *pc, uint64_t took) {
    pthread_mutex_lock(&pc->lock);
    pc->took += took;
    if (++pc->reported == pc->members) {
        pc->quiet = pc->took == 0;
        pc->took = 0;
        pc->reported = 0;
        pc->round++;
        pthread_cond_broadcast(&pc->round_ended);
    } else {
        unsigned long round = pc->round;
        while (pc->round == round)
            pthread_cond_wait(&pc->round_ended, &pc->lock);
    }
    /* No round can end before this thread reports again: stable. */
    bool quiet = pc->quiet;
    pthread_mutex_unlock(&pc->lock);
    return quiet;
}
LULL__OWN_NAME(stop_task, "lull_percore stop", slot, stop);

static void *loop_main(void *arg) {
    slot *s = arg;
    lull_percore *pc = s->pc;
    if (s->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(s->cpu, &set);
        s->rc = -pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    }
    if (s->rc == 0) s->rc = lull_loop_new(&s->loop, &pc->opts.loop);
    if (s->rc == 0) {
        lull_loop_ref(s->loop);
        if (pc->opts.start) pc->opts.start(s->loop, s->index, pc->opts.arg);
    }
    sem_post(&pc->ready);
    while (sem_wait(&pc->run) != 0) {
    }
    if (s->rc != 0) return NULL;
    if (!pc->go) /* another loop failed: undo what start did */
        stop_task(&s->stop);
    run_until_idle(s, 0);
    /* The first round ran the stop task: never quiet. Every thread takes
     * part in every round, so each counts the same rounds. */
    bool quiet = round_end(pc, 1);
    for (unsigned long round = 1; !quiet; round++)
        quiet = round_end(pc, drain(s, round));
    return NULL;
}

/* The i-th CPU of the set this process may run on, wrapping around. */
static int nth_cpu(const cpu_set_t *set, int i) {
    int n = CPU_COUNT(set);
    if (n == 0) return -1;
    i %= n;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, set) && i-- == 0) return cpu;
    return -1;
}

/* After the threads are joined: frees the loops and pc. The loops are freed
 * here rather than by their threads, so that the stop task's poster has
 * left lull_task_post_remote before its loop goes. */
static int release(lull_percore *pc) {
    int rc = 0;
    for (int i = 0; i < pc->count; i++) {
        slot *s = &pc->slots[i];
        if (rc == 0) rc = s->rc;
        if (!s->loop) continue;
        int err = lull_loop_free(s->loop);
        if (rc == 0) rc = err; /* -EBUSY: handles left, the loop leaks */
    }
    sem_destroy(&pc->ready);
    sem_destroy(&pc->run);
    pthread_mutex_destroy(&pc->lock);
    pthread_cond_destroy(&pc->round_ended);
    free(pc->slots);
    free(pc);
    return rc;
}

int lull_percore_start(lull_percore **out, const lull_percore_options *opts) {
    static const lull_percore_options defaults;
    if (!out) return -EINVAL;
    *out = NULL;
    if (!opts) opts = &defaults;
    if (opts->loops < 0 || opts->loops > MAX_LOOPS) return -EINVAL;
    /* Only a count taken from the mask, or pinning, needs it: a sandbox
     * that denies sched_getaffinity, or a machine with more CPUs than a
     * cpu_set_t names (EINVAL), must not stop a set that asks for neither. */
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    if ((opts->loops == 0 || opts->pin) &&
        sched_getaffinity(0, sizeof cpus, &cpus) < 0)
        return -errno;
    int count = opts->loops ? opts->loops : CPU_COUNT(&cpus);
    if (count < 1) count = 1;

    lull_percore *pc = calloc(1, sizeof *pc);
    if (!pc) return -ENOMEM;
    pc->slots = calloc((size_t)count, sizeof *pc->slots);
    if (!pc->slots) {
        free(pc);
        return -ENOMEM;
    }
    pc->opts = *opts;
    pc->count = count;
    pc->pid = getpid();
    sem_init(&pc->ready, 0, 0);
    sem_init(&pc->run, 0, 0);
    pthread_mutex_init(&pc->lock, NULL);
    pthread_cond_init(&pc->round_ended, NULL);

    int rc = 0, started = 0;
    for (int i = 0; i < count; i++) {
        slot *s = &pc->slots[i];
        s->pc = pc;
        s->index = i;
        s->cpu = opts->pin ? nth_cpu(&cpus, i) : -1;
        lull_task_init(&s->stop, stop_task);
        rc = -pthread_create(&s->thread, NULL, loop_main, s);
        if (rc) break;
        started++;
    }
    for (int i = 0; i < started; i++)
        while (sem_wait(&pc->ready) != 0) {
        }
    for (int i = 0; i < started && rc == 0; i++)
        rc = pc->slots[i].rc;
    pc->go = rc == 0;
    for (int i = 0; i < started; i++)
        pc->members += pc->slots[i].rc == 0;
    if (!pc->go) __atomic_store_n(&pc->stopping, true, __ATOMIC_RELEASE);
    for (int i = 0; i < started; i++)
        sem_post(&pc->run);
    if (rc == 0) {
        sets_add(pc);
        *out = pc;
        return 0;
    }
    for (int i = 0; i < started; i++)
        pthread_join(pc->slots[i].thread, NULL);
    pc->count = started;
    release(pc);
    return rc;
}

int lull_percore_count(const lull_percore *pc) {
    return pc ? pc->count : 0;
}

lull_loop *lull_percore_loop(const lull_percore *pc, int index) {
    if (!pc || index < 0 || index >= pc->count) return NULL;
    return pc->slots[index].loop;
}

lull_loop *lull_percore_next(lull_percore *pc) {
    if (!pc) return NULL;
    unsigned i = __atomic_fetch_add(&pc->next, 1, __ATOMIC_RELAXED);
    return pc->slots[i % (unsigned)pc->count].loop;
}

bool lull_percore_stopping(const lull_percore *pc) {
    return pc && __atomic_load_n(&pc->stopping, __ATOMIC_ACQUIRE);
}

/* A stop from one of pc's own loops would wait for itself. A pool thread
 * would wait for loops whose work in flight needs it (a loop holds a
 * reference for its work until done ran): the same deadlock, one hop
 * away. */
static bool stop_would_deadlock(const lull_percore *pc) {
    for (int i = 0; i < pc->count; i++)
        if (pthread_equal(pc->slots[i].thread, pthread_self())) return true;
    return lull__pool_thread();
}

/* Takes pc off the list of sets for its stop: -EINVAL if it is not on it
 * (so pc is read only once it is known to be a set) or this process did
 * not start it (a forked child's copy, whose threads are not there),
 * -EDEADLK (and it stays) if this thread may not stop it. Of two racing
 * stops, one is refused. */
static int sets_take(lull_percore *pc) {
    sets_lock_take();
    lull_percore **at = &sets;
    while (*at && *at != pc)
        at = &(*at)->next_set;
    int rc = !*at                      ? -EINVAL
             : pc->pid != getpid()     ? -EINVAL
             : stop_would_deadlock(pc) ? -EDEADLK
                                       : 0;
    if (rc == 0) *at = pc->next_set;
    pthread_mutex_unlock(&sets_lock);
    return rc;
}

int lull_percore_stop(lull_percore *pc) {
    if (!pc) return -EINVAL;
    int rc = sets_take(pc);
    if (rc) return rc;
    /* Before the stop tasks are posted, so that every stop function, and
     * every hand-off that runs after one, sees it. */
    __atomic_store_n(&pc->stopping, true, __ATOMIC_RELEASE);
    for (int i = 0; i < pc->count; i++)
        lull_task_post_remote(pc->slots[i].loop, &pc->slots[i].stop);
    for (int i = 0; i < pc->count; i++)
        pthread_join(pc->slots[i].thread, NULL);
    return release(pc);
}
