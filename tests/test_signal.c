/* Signal handles (src/signal.c): every handle of a signal sees every
 * delivery the loop reads, once; a signal from another thread wakes the
 * loop; a stopped handle is never called, also for a signal already
 * pending; a signal nobody watches keeps its usual action; the thread's
 * mask is given back; forks. Real signals (raise, kill, pthread_kill); every
 * wait is bounded. */
#include "check.h"

#include <errno.h>
#include <lull.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define GUARD_NS (10 * 1000000000ull)

static lull_loop *new_loop(void) {
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    check_trace_reset();
    return loop;
}

static void free_loop(lull_loop *loop) {
    int rc = lull_loop_free(loop);
    if (rc != 0) lull_loop_print_live(loop, stderr);
    CHECK_EQ(rc, 0);
}

static void guard_fired(lull_timer *t) {
    (void)t;
    check_fail(__FILE__, __LINE__, "no signal in 10 s");
}

/* Runs iterations until *v >= want, or fails after GUARD_NS. */
static void run_until(lull_loop *loop, const int *v, int want) {
    lull_timer guard;
    lull_timer_init(loop, &guard, guard_fired);
    lull_timer_start(&guard, GUARD_NS, 0);
    while (*v < want)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    lull_timer_stop(&guard);
}

static bool blocked_here(int signum) {
    sigset_t m;
    CHECK_EQ(pthread_sigmask(SIG_BLOCK, NULL, &m), 0);
    return sigismember(&m, signum);
}

static bool pending_here(int signum) {
    sigset_t p;
    CHECK_EQ(sigpending(&p), 0);
    return sigismember(&p, signum);
}

/* A handle and what it saw. */
typedef struct watcher {
    lull_signal sig;
    int id;
    int calls;
    int last;
    int sender;
    bool in_call;
} watcher;

static void seen(lull_signal *s, int signum) {
    watcher *w = LULL_CONTAINER_OF(s, watcher, sig);
    CHECK(!w->in_call);
    CHECK_EQ(signum, s->signum);
    w->calls++;
    w->last = signum;
    w->sender = s->sender_pid;
    check_trace(w->id);
}

static void watch(lull_loop *loop, watcher *w, int id, int signum) {
    w->id = id;
    CHECK_EQ(lull_signal_init(loop, &w->sig, seen), 0);
    w->in_call = true;
    CHECK_EQ(lull_signal_start(&w->sig, signum), 0);
    w->in_call = false;
}

/* ---------------------------------------------------------------- cases */

/* Two handles for SIGUSR1 each see every delivery, once, in start order;
 * a SIGUSR2 handle sees only its own. The signal is read on the loop,
 * never inside raise. */
TEST(two_handles_each_see_every_delivery) {
    lull_loop *loop = new_loop();
    watcher a = {0}, b = {0}, c = {0};
    watch(loop, &a, 1, SIGUSR1);
    watch(loop, &b, 2, SIGUSR1);
    watch(loop, &c, 3, SIGUSR2);
    CHECK(blocked_here(SIGUSR1)); /* so that signalfd reads it */
    for (int i = 1; i <= 5; i++) {
        a.in_call = b.in_call = true;
        CHECK_EQ(raise(SIGUSR1), 0);
        a.in_call = b.in_call = false;
        CHECK_EQ(a.calls, i - 1);
        run_until(loop, &b.calls, i);
        CHECK_EQ(a.calls, i);
        CHECK_EQ(b.calls, i);
    }
    CHECK_TRACE(1, 2, 1, 2, 1, 2, 1, 2, 1, 2);
    CHECK_EQ(c.calls, 0);
    CHECK_EQ(raise(SIGUSR2), 0);
    run_until(loop, &c.calls, 1);
    CHECK_EQ(a.calls, 5);
    CHECK_U64_EQ(a.sig.received, 5);
    CHECK_EQ(a.sender, (int)getpid());
    CHECK_EQ(lull_signal_stop(&a.sig), 0);
    CHECK_EQ(lull_signal_stop(&b.sig), 0);
    CHECK(!blocked_here(SIGUSR1)); /* given back once nobody watches */
    CHECK(blocked_here(SIGUSR2));
    CHECK_EQ(lull_signal_stop(&c.sig), 0);
    CHECK(!blocked_here(SIGUSR2));
    free_loop(loop);
}

/* A signal sent from another thread (to the process, and to the loop's
 * thread) wakes a loop blocked in lull_loop_run. The watched signal is
 * blocked in main before the thread starts (lull_signal_block), as
 * docs/PROCESS.md says every program with threads must. */
typedef struct sender {
    pthread_t loop_thread;
    int how; /* 0: kill() the process; 1: pthread_kill() the loop thread */
} sender;

static void *send_later(void *arg) {
    sender *s = arg;
    usleep(20000);
    if (s->how == 0)
        kill(getpid(), SIGUSR2);
    else
        pthread_kill(s->loop_thread, SIGUSR2);
    return NULL;
}

static void stop_on_signal(lull_signal *s, int signum) {
    seen(s, signum);
    lull_loop_stop(s->loop);
}

TEST_THREADED(signal_from_another_thread) {
    CHECK_EQ(lull_signal_block(SIGUSR2), 0);
    lull_loop *loop = new_loop();
    watcher w = {.id = 1};
    CHECK_EQ(lull_signal_init(loop, &w.sig, stop_on_signal), 0);
    CHECK_EQ(lull_signal_start(&w.sig, SIGUSR2), 0);
    for (int how = 0; how < 2; how++) {
        sender s = {.loop_thread = pthread_self(), .how = how};
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, send_later, &s), 0);
        lull_timer guard;
        lull_timer_init(loop, &guard, guard_fired);
        lull_timer_start(&guard, GUARD_NS, 0);
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
        lull_timer_stop(&guard);
        CHECK_EQ(pthread_join(t, NULL), 0);
        CHECK_EQ(w.calls, how + 1);
    }
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK(m.wakeups_io >= 2); /* the signalfd woke it, not EINTR */
    CHECK_EQ(lull_signal_stop(&w.sig), 0);
    CHECK(blocked_here(SIGUSR2)); /* the program blocked it: it stays */
    free_loop(loop);
}

/* A handle stopped while its signal is pending (sent, not yet read) is not
 * called; another handle of the signal still is. When the last one stops
 * with the signal still pending, the signal is dropped: it arrived while
 * watched, and unblocking it would hand it to its default action, which
 * for SIGUSR1 ends the process. */
TEST(handle_stopped_while_signal_pending) {
    lull_loop *loop = new_loop();
    watcher a = {0}, b = {0};
    watch(loop, &a, 1, SIGUSR1);
    watch(loop, &b, 2, SIGUSR1);
    CHECK_EQ(raise(SIGUSR1), 0);
    CHECK(pending_here(SIGUSR1));
    CHECK_EQ(lull_signal_stop(&a.sig), 0);
    CHECK_EQ(lull_signal_stop(&a.sig), 0); /* idempotent */
    run_until(loop, &b.calls, 1);
    CHECK_EQ(a.calls, 0);
    CHECK_EQ(raise(SIGUSR1), 0);
    CHECK(pending_here(SIGUSR1));
    CHECK_EQ(lull_signal_stop(&b.sig), 0);
    CHECK(!pending_here(SIGUSR1));
    CHECK(!blocked_here(SIGUSR1));
    for (int i = 0; i < 3; i++)
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(a.calls, 0);
    CHECK_EQ(b.calls, 1);
    /* Watched again: a new delivery arrives as usual. */
    CHECK_EQ(lull_signal_start(&a.sig, SIGUSR1), 0);
    CHECK_EQ(raise(SIGUSR1), 0);
    run_until(loop, &a.calls, 1);
    CHECK_EQ(lull_signal_stop(&a.sig), 0);
    free_loop(loop);
}

/* Inside a delivery: a callback that stops the next handle keeps it from
 * being called; a handle started inside the delivery does not see it (it
 * started after); a handle that stops itself and frees nothing breaks
 * nothing. */
static watcher *g_victim, *g_late;
static void stopper(lull_signal *s, int signum) {
    seen(s, signum);
    if (g_victim) CHECK_EQ(lull_signal_stop(&g_victim->sig), 0);
    if (g_late) CHECK_EQ(lull_signal_start(&g_late->sig, SIGUSR1), 0);
    CHECK_EQ(lull_signal_stop(s), 0);
}

/* One SIGUSR1 raised and run until a's handler was called, with victim
 * for it to stop (g_victim) and late to start (g_late; late's handler,
 * `seen`, set here). */
static void deliver_to_a_stopping(lull_loop *loop, watcher *a, watcher *victim,
                                  watcher *late) {
    CHECK_EQ(lull_signal_init(loop, &late->sig, seen), 0);
    g_victim = victim;
    g_late = late;
    CHECK_EQ(raise(SIGUSR1), 0);
    run_until(loop, &a->calls, 1);
}

TEST(handles_changed_inside_a_delivery) {
    lull_loop *loop = new_loop();
    watcher a = {.id = 1}, b = {0}, late = {0};
    CHECK_EQ(lull_signal_init(loop, &a.sig, stopper), 0);
    CHECK_EQ(lull_signal_start(&a.sig, SIGUSR1), 0);
    watch(loop, &b, 2, SIGUSR1);
    late.id = 3;
    deliver_to_a_stopping(loop, &a, &b, &late);
    CHECK_EQ(b.calls, 0);
    CHECK_EQ(late.calls, 0);
    g_victim = g_late = NULL;
    CHECK_EQ(raise(SIGUSR1), 0);
    run_until(loop, &late.calls, 1);
    CHECK_EQ(a.calls, 1);
    CHECK_TRACE(1, 3);
    CHECK_EQ(lull_signal_stop(&late.sig), 0);
    free_loop(loop);
}

/* A handle that stopped itself inside a delivery gives its block back
 * when the deliveries end; started again later and stopped outside any
 * delivery, it gives the new block back too. (A delivery's list of blocks
 * to give back, left set after the batch, made the later start take the
 * block as "restarted inside the delivery", uncounted, so the later stop
 * left the signal blocked in the thread for good.) */
static void seen_then_stop(lull_signal *s, int signum) {
    seen(s, signum);
    CHECK_EQ(lull_signal_stop(s), 0);
}

TEST(stopped_in_its_delivery_then_started_and_stopped_again_unblocks) {
    lull_loop *loop = new_loop();
    watcher a = {0};
    a.id = 1;
    CHECK_EQ(lull_signal_init(loop, &a.sig, seen_then_stop), 0);
    CHECK_EQ(lull_signal_start(&a.sig, SIGUSR1), 0);
    CHECK_EQ(raise(SIGUSR1), 0);
    run_until(loop, &a.calls, 1);
    CHECK(!blocked_here(SIGUSR1));
    CHECK_EQ(lull_signal_init(loop, &a.sig, seen), 0);
    CHECK_EQ(lull_signal_start(&a.sig, SIGUSR1), 0);
    CHECK(blocked_here(SIGUSR1));
    CHECK_EQ(raise(SIGUSR1), 0);
    run_until(loop, &a.calls, 2);
    CHECK_EQ(lull_signal_stop(&a.sig), 0);
    CHECK(!blocked_here(SIGUSR1));
    free_loop(loop);
}

/* A signal nobody watches keeps its default action: after a handle for
 * SIGUSR1 started and stopped, SIGUSR1 ends the process as before. In a
 * child process of the test. */
static void raise_after_watch(void *arg) {
    (void)arg;
    lull_loop *loop = new_loop();
    watcher w = {0};
    watch(loop, &w, 1, SIGUSR1);
    CHECK_EQ(lull_signal_stop(&w.sig), 0);
    free_loop(loop);
    raise(SIGUSR1); /* the default action: death */
    _exit(3);
}

TEST(unwatched_signal_keeps_its_default_action) {
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) raise_after_watch(NULL);
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFSIGNALED(st));
    CHECK_EQ(WTERMSIG(st), SIGUSR1);
}

/* Real-time signals queue: three sent before the loop reads them arrive
 * as three deliveries. */
TEST(realtime_signals_queue) {
    lull_loop *loop = new_loop();
    watcher w = {0};
    watch(loop, &w, 1, SIGRTMIN + 1);
    union sigval v = {.sival_int = 0};
    for (int i = 0; i < 3; i++)
        CHECK_EQ(sigqueue(getpid(), SIGRTMIN + 1, v), 0);
    run_until(loop, &w.calls, 3);
    CHECK_EQ(w.calls, 3);
    CHECK_EQ(lull_signal_stop(&w.sig), 0);
    free_loop(loop);
}

/* A handle that stops and starts itself again inside its callback (a
 * program re-arming its handler) goes on seeing the deliveries after the
 * one it was called for: three real-time signals read in one batch are
 * still three calls. The restart makes it a handle started after the first
 * delivery began, not after the second. */
static void restarter(lull_signal *s, int signum) {
    watcher *w = LULL_CONTAINER_OF(s, watcher, sig);
    w->calls++;
    CHECK_EQ(lull_signal_stop(s), 0);
    CHECK_EQ(lull_signal_start(s, signum), 0);
}

TEST(restart_inside_the_callback_keeps_queued_deliveries) {
    lull_loop *loop = new_loop();
    watcher w = {0};
    CHECK_EQ(lull_signal_init(loop, &w.sig, restarter), 0);
    CHECK_EQ(lull_signal_start(&w.sig, SIGRTMIN + 1), 0);
    union sigval v = {.sival_int = 0};
    for (int i = 0; i < 3; i++)
        CHECK_EQ(sigqueue(getpid(), SIGRTMIN + 1, v), 0);
    run_until(loop, &w.calls, 1);
    /* Whatever was not delivered is read at the next iteration. */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, 3);
    CHECK_EQ(lull_signal_stop(&w.sig), 0);
    free_loop(loop);
}

/* The same restart, with more queued than one read takes (16) and one
 * standard signal that arrives during the callback: the restart's stop was
 * the signal's last, so it took back every instance still pending (the
 * queued real-time ones past the first read, the standard one sent from
 * the callback) before the start blocked it again: all lost, though a
 * handle watched the signal the whole time. A libuv user's stop and start
 * in a callback loses nothing. The take-back waits until the delivery
 * ends, and is not made when the signal is watched again by then. */
static void restarter_raising(lull_signal *s, int signum) {
    watcher *w = LULL_CONTAINER_OF(s, watcher, sig);
    if (w->calls++ == 0) CHECK_EQ(raise(SIGUSR2), 0);
    CHECK_EQ(lull_signal_stop(s), 0);
    CHECK_EQ(lull_signal_start(s, signum), 0);
}

TEST(restart_inside_the_callback_keeps_what_arrives_meanwhile) {
    enum { QUEUED = 40 };
    lull_loop *loop = new_loop();
    watcher w = {0}, u = {0};
    CHECK_EQ(lull_signal_init(loop, &w.sig, restarter), 0);
    CHECK_EQ(lull_signal_start(&w.sig, SIGRTMIN + 1), 0);
    union sigval v = {.sival_int = 0};
    for (int i = 0; i < QUEUED; i++)
        CHECK_EQ(sigqueue(getpid(), SIGRTMIN + 1, v), 0);
    run_until(loop, &w.calls, QUEUED);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(w.calls, QUEUED);
    CHECK_EQ(lull_signal_init(loop, &u.sig, restarter_raising), 0);
    CHECK_EQ(lull_signal_start(&u.sig, SIGUSR2), 0);
    CHECK_EQ(raise(SIGUSR2), 0);
    run_until(loop, &u.calls, 2);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(u.calls, 2);
    CHECK_EQ(lull_signal_stop(&w.sig), 0);
    CHECK_EQ(lull_signal_stop(&u.sig), 0);
    CHECK(!blocked_here(SIGRTMIN + 1));
    CHECK(!blocked_here(SIGUSR2));
    free_loop(loop);
}

/* A started handle keeps the loop alive unless unreferenced; a stopped one
 * never does; a started one keeps lull_loop_free at -EBUSY. */
TEST(signal_ref_unref_and_liveness) {
    lull_loop *loop = new_loop();
    watcher a = {0}, b = {0};
    CHECK_EQ(lull_signal_init(loop, &a.sig, seen), 0);
    CHECK(!lull_loop_alive(loop));
    lull_signal_unref(&a.sig); /* before start: remembered */
    CHECK_EQ(lull_signal_start(&a.sig, SIGUSR1), 0);
    CHECK(!lull_loop_alive(loop));
    CHECK_EQ(lull_loop_free(loop), -EBUSY);
    watch(loop, &b, 2, SIGUSR2);
    CHECK(lull_loop_alive(loop));
    lull_signal_unref(&b.sig);
    CHECK(!lull_loop_alive(loop));
    lull_signal_ref(&a.sig);
    CHECK(lull_loop_alive(loop));
    CHECK_EQ(lull_signal_stop(&a.sig), 0);
    CHECK(!lull_loop_alive(loop));
    /* Restarting on another signal moves the handle. */
    CHECK_EQ(lull_signal_start(&b.sig, SIGUSR1), 0);
    CHECK_EQ(b.sig.signum, SIGUSR1);
    CHECK(!blocked_here(SIGUSR2));
    CHECK_EQ(lull_signal_start(&b.sig, SIGUSR1), 0); /* same: no-op */
    CHECK_EQ(raise(SIGUSR1), 0);
    CHECK_EQ(lull_loop_settle(loop) > 0, 1);
    CHECK_EQ(b.calls, 1);
    CHECK_EQ(lull_signal_stop(&b.sig), 0);
    free_loop(loop);
}

/* Hostile arguments: -EINVAL, nothing watched, no mask changed. */
TEST(signal_argument_errors) {
    lull_loop *loop = new_loop();
    lull_signal s;
    CHECK_EQ(lull_signal_init(NULL, &s, seen), -EINVAL);
    CHECK_EQ(lull_signal_init(loop, NULL, seen), -EINVAL);
    CHECK_EQ(lull_signal_init(loop, &s, NULL), -EINVAL);
    CHECK_EQ(lull_signal_init(loop, &s, seen), 0);
    int bad[] = {0,          -1,      65,      1000, -2147483647 - 1,
                 2147483647, SIGKILL, SIGSTOP, 32,   33};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ(lull_signal_start(&s, bad[i]), -EINVAL);
        CHECK_EQ(lull_signal_block(bad[i]), -EINVAL);
    }
    CHECK_EQ(lull_signal_start(NULL, SIGUSR1), -EINVAL);
    CHECK_EQ(lull_signal_stop(NULL), -EINVAL);
    lull_signal zero = {0};
    CHECK_EQ(lull_signal_start(&zero, SIGUSR1), -EINVAL);
    CHECK_EQ(lull_signal_stop(&zero), -EINVAL);
    lull_signal_ref(NULL);
    lull_signal_unref(NULL);
    lull_signal_ref(&zero);
    lull_signal_unref(&zero);
    CHECK_EQ(lull_signal_stop(&s), 0); /* never started */
    CHECK(!blocked_here(SIGUSR1));
    CHECK(!lull_loop_alive(loop));
    free_loop(loop);
}

/* lull_signal_init on a started handle: refused, and both handles of the
 * signal still see its delivery. A clearing init left the handle at the
 * head of the loop's list with its links cleared, which cut off every
 * handle started after it. */
TEST(init_of_a_started_signal_is_refused) {
    lull_loop *loop = new_loop();
    watcher a = {0}, b = {0};
    watch(loop, &a, 1, SIGUSR1);
    watch(loop, &b, 2, SIGUSR1);
    CHECK_EQ(lull_signal_init(loop, &a.sig, seen), -EBUSY);
    CHECK_EQ(a.sig.signum, SIGUSR1);
    raise(SIGUSR1);
    run_until(loop, &b.calls, 1);
    CHECK_EQ(a.calls, 1);
    CHECK_EQ(lull_signal_stop(&a.sig), 0);
    CHECK_EQ(lull_signal_init(loop, &a.sig, seen), 0); /* stopped: free */
    CHECK_EQ(lull_signal_stop(&b.sig), 0);
    CHECK(!blocked_here(SIGUSR1));
    free_loop(loop);
}

/* lull_signal_init on a handle started on another loop: refused as well.
 * It was accepted (the check asked the new loop's list only), and the
 * clearing cut the first loop's list at the handle: the handles started
 * after it there were never called again, and the first loop kept the
 * signal watched and a reference for a handle no longer on it. */
TEST(init_of_a_signal_started_on_another_loop_is_refused) {
    lull_loop *a_loop = new_loop(), *b_loop = new_loop();
    watcher a = {0}, b = {0}, c = {0};
    watch(a_loop, &a, 1, SIGUSR1);
    watch(a_loop, &b, 2, SIGUSR1);
    watch(a_loop, &c, 3, SIGUSR1);
    CHECK_EQ(lull_signal_init(b_loop, &b.sig, seen), -EBUSY);
    CHECK(b.sig.loop == a_loop);
    CHECK_EQ(b.sig.signum, SIGUSR1);
    raise(SIGUSR1);
    run_until(a_loop, &c.calls, 1);
    CHECK_EQ(a.calls, 1);
    CHECK_EQ(b.calls, 1);
    CHECK_EQ(lull_signal_stop(&b.sig), 0);
    CHECK_EQ(lull_signal_init(b_loop, &b.sig, seen), 0); /* stopped: free */
    CHECK_EQ(lull_signal_stop(&a.sig), 0);
    CHECK_EQ(lull_signal_stop(&c.sig), 0);
    CHECK(!blocked_here(SIGUSR1));
    free_loop(a_loop);
    free_loop(b_loop);
}

/* After fork() and lull_loop_fork, the child's handles read the child's
 * signals, and the parent's the parent's. */
static watcher g_fork_w;

static void child_side(void *arg) {
    lull_loop *loop = arg;
    CHECK_EQ(lull_loop_fork(loop), 0);
    int before = g_fork_w.calls;
    CHECK_EQ(raise(SIGUSR1), 0);
    run_until(loop, &g_fork_w.calls, before + 1);
    CHECK_EQ(lull_signal_stop(&g_fork_w.sig), 0);
    free_loop(loop);
}

TEST(signals_after_fork) {
    lull_loop *loop = new_loop();
    watch(loop, &g_fork_w, 1, SIGUSR1);
    CHECK(check_exits_cleanly(child_side, loop));
    CHECK_EQ(g_fork_w.calls, 0); /* the child's signal was the child's */
    CHECK_EQ(raise(SIGUSR1), 0);
    run_until(loop, &g_fork_w.calls, 1);
    CHECK_EQ(lull_signal_stop(&g_fork_w.sig), 0);
    free_loop(loop);
}

/* One signal watched on two loops of one thread (docs/PROCESS.md: one
 * loop reads each delivery, whichever reads first). The block is lull's
 * and held while either loop watches: the first loop's last stop leaves
 * it, and the other loop still hears the signal; the second's gives it
 * back. */
TEST(one_signal_on_two_loops_of_one_thread) {
    lull_loop *a_loop = new_loop(), *b_loop = new_loop();
    watcher a = {0}, b = {0};
    CHECK(!blocked_here(SIGUSR1));
    watch(a_loop, &a, 1, SIGUSR1);
    watch(b_loop, &b, 2, SIGUSR1);
    CHECK_EQ(raise(SIGUSR1), 0);
    CHECK_EQ(lull_loop_run(a_loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(lull_loop_run(b_loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(a.calls + b.calls, 1); /* read once */
    CHECK_EQ(lull_signal_stop(&a.sig), 0);
    CHECK(blocked_here(SIGUSR1)); /* b_loop still watches */
    int before = b.calls;
    CHECK_EQ(raise(SIGUSR1), 0);
    run_until(b_loop, &b.calls, before + 1);
    CHECK_EQ(a.calls + b.calls, 2);
    CHECK_EQ(lull_signal_stop(&b.sig), 0);
    CHECK(!blocked_here(SIGUSR1));
    free_loop(a_loop);
    free_loop(b_loop);
}

/* The signalfd's mask belongs to the open file, which fork() shares: a
 * child that changed the signals its copy of the loop watches (stopped
 * one of two, after lull_loop_fork) changed the parent's signalfd too,
 * and the parent no longer heard the signal the child let go of. */
static watcher g_fork_usr1, g_fork_usr2;

static void child_lets_go_of_one(void *arg) {
    lull_loop *loop = arg;
    CHECK_EQ(lull_loop_fork(loop), 0);
    CHECK_EQ(lull_signal_stop(&g_fork_usr2.sig), 0);
    int before = g_fork_usr1.calls;
    CHECK_EQ(raise(SIGUSR1), 0);
    run_until(loop, &g_fork_usr1.calls, before + 1);
    CHECK_EQ(lull_signal_stop(&g_fork_usr1.sig), 0);
    free_loop(loop);
}

TEST(child_changing_its_signals_leaves_the_parents_alone) {
    lull_loop *loop = new_loop();
    watch(loop, &g_fork_usr1, 1, SIGUSR1);
    watch(loop, &g_fork_usr2, 2, SIGUSR2);
    CHECK(check_exits_cleanly(child_lets_go_of_one, loop));
    CHECK_EQ(g_fork_usr1.calls + g_fork_usr2.calls, 0);
    CHECK_EQ(raise(SIGUSR2), 0);
    run_until(loop, &g_fork_usr2.calls, 1);
    CHECK_EQ(raise(SIGUSR1), 0);
    run_until(loop, &g_fork_usr1.calls, 1);
    CHECK_EQ(lull_signal_stop(&g_fork_usr1.sig), 0);
    CHECK_EQ(lull_signal_stop(&g_fork_usr2.sig), 0);
    CHECK(!blocked_here(SIGUSR1));
    CHECK(!blocked_here(SIGUSR2));
    free_loop(loop);
}

/* ------------------------------------------------- masks across threads */

/* Set up on one thread, run on another (the pattern of lull.h's Threads
 * paragraph): main starts a SIGTERM handle, so lull blocks SIGTERM in main,
 * and the loop's thread inherits the block. The handle stops on the loop's
 * thread: SIGTERM is unblocked there at once, and in main at main's next
 * lull call (lull_loop_adopt, or lull_loop_free), since a thread's mask is
 * its own. Then a
 * SIGTERM does what it did before lull: here, run the test's handler. */
static volatile sig_atomic_t g_handled;
static void count_signal(int signum) {
    (void)signum;
    g_handled++;
}

static void install_counter(int signum) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = count_signal;
    sigemptyset(&sa.sa_mask);
    CHECK_EQ(sigaction(signum, &sa, NULL), 0);
    g_handled = 0;
}

/* Waits (bounded) for the handler: a sanitizer may hold a signal back
 * until the thread's next intercepted call. */
static bool handled_soon(int want) {
    for (int i = 0; i < 10000 && g_handled < want; i++)
        usleep(1000);
    return g_handled >= want;
}

static lull_timer *g_guard; /* stopped with the handle, when set */
static void stop_self(lull_signal *s, int signum) {
    seen(s, signum);
    CHECK_EQ(lull_signal_stop(s), 0);
    if (g_guard) lull_timer_stop(g_guard);
}

typedef struct runner {
    lull_loop *loop;
    watcher *w;
    bool blocked_after; /* SIGTERM blocked in the loop's thread at the end */
    bool blocked_in_run;
} runner;

static void *run_then_report(void *arg) {
    runner *r = arg;
    r->blocked_in_run = blocked_here(SIGTERM); /* inherited from main */
    CHECK_EQ(kill(getpid(), SIGTERM), 0);
    CHECK_EQ(lull_loop_run(r->loop, LULL_RUN_DEFAULT), 0); /* stop_self */
    r->blocked_after = blocked_here(SIGTERM);
    return NULL;
}

static void set_up_here_run_there(bool adopt) {
    install_counter(SIGTERM);
    CHECK(!blocked_here(SIGTERM));
    lull_loop *loop = new_loop();
    watcher w = {.id = 1};
    CHECK_EQ(lull_signal_init(loop, &w.sig, stop_self), 0);
    CHECK_EQ(lull_signal_start(&w.sig, SIGTERM), 0);
    CHECK(blocked_here(SIGTERM));
    lull_timer guard; /* unreferenced: the handle keeps the run alive */
    lull_timer_init(loop, &guard, guard_fired);
    lull_timer_start(&guard, GUARD_NS, 0);
    lull_timer_unref(&guard);
    g_guard = adopt ? NULL : &guard;
    runner r = {.loop = loop, .w = &w};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, run_then_report, &r), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK(r.blocked_in_run);
    CHECK_EQ(w.calls, 1);
    CHECK_EQ(g_handled, 0);       /* the handle took it, not the handler */
    CHECK(!r.blocked_after);      /* given back in the thread that stopped it */
    CHECK(blocked_here(SIGTERM)); /* main's own: given back at its next call */
    if (adopt) {
        CHECK_EQ(lull_loop_adopt(loop), 0);
        CHECK(!blocked_here(SIGTERM));
        lull_timer_stop(&guard);
    }
    free_loop(loop);
    CHECK(!blocked_here(SIGTERM));
    CHECK_EQ(kill(getpid(), SIGTERM), 0);
    CHECK(handled_soon(1)); /* its usual action again */
}

TEST_THREADED(signal_set_up_on_one_thread_run_on_another) {
    set_up_here_run_there(true); /* main adopts the loop back */
}

TEST_THREADED(signal_set_up_here_run_there_then_freed_here) {
    set_up_here_run_there(false); /* main only frees it */
}

/* The loop handed back: main sets up, a thread runs it for a while, main
 * adopts it again and stops the handle. lull unblocks in main; no
 * instance is left pending. */
static void *run_nowait(void *arg) {
    lull_loop *loop = arg;
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    return NULL;
}

TEST_THREADED(signal_loop_handed_back_and_stopped_on_main) {
    install_counter(SIGUSR1);
    lull_loop *loop = new_loop();
    watcher w = {0};
    watch(loop, &w, 1, SIGUSR1);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, run_nowait, loop), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(lull_loop_adopt(loop), 0);
    CHECK(blocked_here(SIGUSR1));
    CHECK_EQ(raise(SIGUSR1), 0); /* arrives while watched: lull's */
    CHECK_EQ(lull_signal_stop(&w.sig), 0);
    CHECK(!blocked_here(SIGUSR1));
    CHECK(!pending_here(SIGUSR1));
    CHECK_EQ(g_handled, 0); /* taken back, not handed to the handler */
    free_loop(loop);
}

/* A block that is the program's stays after the last stop, and so does an
 * instance pending then: lull took neither. Blocked before the first start
 * (lull_signal_block in main), or made the program's after it. */
TEST(program_block_and_instance_outlive_the_last_stop) {
    for (int when = 0; when < 2; when++) {
        lull_loop *loop = new_loop();
        watcher w = {0};
        if (when == 0) CHECK_EQ(lull_signal_block(SIGUSR1), 0);
        watch(loop, &w, 1, SIGUSR1);
        if (when == 1) CHECK_EQ(lull_signal_block(SIGUSR1), 0);
        CHECK_EQ(raise(SIGUSR1), 0);
        CHECK_EQ(lull_signal_stop(&w.sig), 0);
        CHECK(blocked_here(SIGUSR1));
        CHECK(pending_here(SIGUSR1)); /* the program's to take */
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, SIGUSR1);
        static const struct timespec zero = {0, 0};
        CHECK_EQ(sigtimedwait(&one, NULL, &zero), SIGUSR1);
        CHECK_EQ(w.calls, 0);
        free_loop(loop);
        CHECK(blocked_here(SIGUSR1));
        CHECK_EQ(pthread_sigmask(SIG_UNBLOCK, &one, NULL), 0);
    }
}

/* Started on the loop's thread, for a signal sent to that thread: lull
 * blocks and unblocks it there; main's mask is never touched. */
static watcher *g_started;
static void start_on_loop(lull_task *t) {
    (void)t;
    CHECK(!blocked_here(SIGUSR2));
    CHECK_EQ(lull_signal_start(&g_started->sig, SIGUSR2), 0);
    CHECK(blocked_here(SIGUSR2));
    CHECK_EQ(raise(SIGUSR2), 0); /* to this thread */
}

static void *run_default(void *arg) {
    runner *r = arg;
    CHECK_EQ(lull_loop_run(r->loop, LULL_RUN_DEFAULT), 0);
    r->blocked_after = blocked_here(SIGUSR2);
    return NULL;
}

TEST_THREADED(signal_started_and_stopped_on_the_loop_thread) {
    lull_loop *loop = new_loop();
    watcher w = {.id = 1};
    CHECK_EQ(lull_signal_init(loop, &w.sig, stop_self), 0);
    lull_task task;
    g_started = &w;
    CHECK_EQ(lull_task_init(&task, start_on_loop), 0);
    lull_task_post(loop, &task);
    lull_timer guard;
    lull_timer_init(loop, &guard, guard_fired);
    lull_timer_start(&guard, GUARD_NS, 0);
    lull_timer_unref(&guard);
    runner r = {.loop = loop, .w = &w};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, run_default, &r), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(w.calls, 1);
    CHECK(!r.blocked_after);
    CHECK(!blocked_here(SIGUSR2));
    CHECK_EQ(lull_loop_adopt(loop), 0);
    lull_timer_stop(&guard);
    free_loop(loop);
    CHECK(!blocked_here(SIGUSR2));
}

/* Two handles share one callback and find their own objects through
 * `data` (not their struct's place): set after init, kept across starts,
 * stops and deliveries; lull_signal_init clears it. */
typedef struct service {
    const char *name;
    int signals;
} service;

static void count_for_service(lull_signal *s, int signum) {
    (void)signum;
    service *svc = s->data;
    svc->signals++;
}

TEST(shared_callback_finds_its_own_data) {
    lull_loop *loop = new_loop();
    service web = {.name = "web"}, db = {.name = "db"};
    lull_signal a, b;
    a.data = &db; /* before init: cleared */
    CHECK_EQ(lull_signal_init(loop, &a, count_for_service), 0);
    CHECK(a.data == NULL);
    CHECK_EQ(lull_signal_init(loop, &b, count_for_service), 0);
    a.data = &web;
    b.data = &db;
    CHECK_EQ(lull_signal_start(&a, SIGUSR1), 0);
    CHECK_EQ(lull_signal_start(&b, SIGUSR2), 0);
    CHECK_EQ(raise(SIGUSR1), 0);
    run_until(loop, &web.signals, 1);
    CHECK_EQ(raise(SIGUSR2), 0);
    run_until(loop, &db.signals, 1);
    CHECK_EQ(raise(SIGUSR2), 0);
    run_until(loop, &db.signals, 2);
    CHECK_EQ(web.signals, 1);
    CHECK_EQ(lull_signal_stop(&a), 0);
    CHECK_EQ(lull_signal_start(&a, SIGUSR2), 0); /* both on SIGUSR2 now */
    CHECK(a.data == &web);
    CHECK_EQ(raise(SIGUSR2), 0);
    run_until(loop, &db.signals, 3);
    CHECK_EQ(web.signals, 2);
    CHECK_EQ(lull_signal_stop(&a), 0);
    CHECK_EQ(lull_signal_stop(&b), 0);
    CHECK(a.data == &web && b.data == &db);
    free_loop(loop);
}

/* A started handle moved to another signal, where the kernel refuses the
 * signalfd's new mask (a seccomp filter, as a container's): the start
 * fails, and the handle and the mask are as they were. The old signal was
 * let go first: the handle stopped, lull's block of it lifted, so that
 * the next one took its default action (death, for SIGUSR1) instead of
 * reaching the handle. */
#ifdef CHECK_SANDBOX_ARCH
static void move_refused_body(void *arg) {
    (void)arg;
    lull_loop *loop = new_loop();
    watcher h = {0}, other = {0};
    watch(loop, &other, 2, SIGUSR2); /* keeps the loop's signalfd open */
    watch(loop, &h, 1, SIGUSR1);
    CHECK(!blocked_here(SIGTERM));
    check_deny_syscalls((const int[]){SYS_signalfd4, SYS_signalfd}, 2, EPERM);
    CHECK_EQ(lull_signal_start(&h.sig, SIGTERM), -EPERM);
    CHECK_EQ(h.sig.signum, SIGUSR1);
    CHECK(blocked_here(SIGUSR1));
    CHECK(!blocked_here(SIGTERM));
    CHECK_EQ(raise(SIGUSR1), 0);
    run_until(loop, &h.calls, 1);
    CHECK_EQ(h.last, SIGUSR1);
    CHECK_EQ(lull_signal_stop(&h.sig), 0);
    CHECK_EQ(lull_signal_stop(&other.sig), 0);
    CHECK(!blocked_here(SIGUSR1));
    free_loop(loop);
}
#endif

TEST(move_to_a_signal_the_kernel_refuses_keeps_the_old_one) {
#ifdef CHECK_SANDBOX_ARCH
    CHECK(check_exits_cleanly(move_refused_body, NULL));
#else
    printf("skipped: no seccomp architecture constant for this machine\n");
#endif
}

/* Out of fds at a loop's first start (the signalfd cannot be made): the
 * start says -EMFILE, the handle stays stopped and the signal unblocked
 * (the mask as it was); with an fd free again the same start works and
 * the signal arrives. */
TEST(first_start_out_of_fds_then_again) {
    lull_loop *loop = new_loop();
    watcher h = {0};
    h.id = 1;
    CHECK_EQ(lull_signal_init(loop, &h.sig, seen), 0);
    CHECK(!blocked_here(SIGUSR1));
    struct rlimit old;
    check_fds_exhaust(&old);
    int rc = lull_signal_start(&h.sig, SIGUSR1);
    check_fds_restore(&old);
    CHECK_EQ(rc, -EMFILE);
    CHECK(!blocked_here(SIGUSR1));
    CHECK(!lull_loop_alive(loop));
    CHECK_EQ(lull_signal_start(&h.sig, SIGUSR1), 0);
    CHECK(blocked_here(SIGUSR1));
    CHECK_EQ(raise(SIGUSR1), 0);
    run_until(loop, &h.calls, 1);
    CHECK_EQ(h.last, SIGUSR1);
    CHECK_EQ(lull_signal_stop(&h.sig), 0);
    CHECK(!blocked_here(SIGUSR1));
    free_loop(loop);
}

/* A callback that stops the next handle in line and starts a new one:
 * the walk goes on past the stopped handle to the ones behind it (c), and
 * the new handle, added at the tail behind c, is not called for the
 * delivery that was under way when it started; the next delivery reaches
 * it. */
static void stop_b_start_late(lull_signal *s, int signum) {
    seen(s, signum);
    if (g_victim) CHECK_EQ(lull_signal_stop(&g_victim->sig), 0);
    if (g_late) CHECK_EQ(lull_signal_start(&g_late->sig, SIGUSR1), 0);
    g_victim = g_late = NULL;
}

TEST(delivery_walks_past_a_handle_stopped_in_it_to_the_ones_behind) {
    lull_loop *loop = new_loop();
    watcher a = {.id = 1}, b = {0}, c = {0}, late = {.id = 4};
    CHECK_EQ(lull_signal_init(loop, &a.sig, stop_b_start_late), 0);
    CHECK_EQ(lull_signal_start(&a.sig, SIGUSR1), 0);
    watch(loop, &b, 2, SIGUSR1);
    watch(loop, &c, 3, SIGUSR1);
    deliver_to_a_stopping(loop, &a, &b, &late);
    CHECK_EQ(b.calls, 0);
    CHECK_EQ(c.calls, 1);
    CHECK_EQ(late.calls, 0);
    CHECK_TRACE(1, 3);
    CHECK_EQ(raise(SIGUSR1), 0);
    run_until(loop, &late.calls, 1);
    CHECK_EQ(a.calls, 2);
    CHECK_EQ(c.calls, 2);
    CHECK_TRACE(1, 3, 1, 3, 4);
    CHECK_EQ(lull_signal_stop(&a.sig), 0);
    CHECK_EQ(lull_signal_stop(&c.sig), 0);
    CHECK_EQ(lull_signal_stop(&late.sig), 0);
    free_loop(loop);
}

/* The highest signal, SIGRTMAX (64), is watched like any other: read from
 * the signalfd and delivered, and unblocked again at the stop. Skipped
 * where the signal cannot be sent (under valgrind, which keeps it). */
TEST(sigrtmax_is_delivered) {
    lull_loop *loop = new_loop();
    watcher w = {0};
    watch(loop, &w, 1, SIGRTMAX);
    CHECK(blocked_here(SIGRTMAX));
    union sigval v = {.sival_int = 0};
    if (sigqueue(getpid(), SIGRTMAX, v) < 0) {
        /* valgrind keeps the highest signal for itself (EINVAL). */
        CHECK_EQ(errno, EINVAL);
        printf("skipped: SIGRTMAX cannot be sent here (valgrind's own)\n");
        CHECK_EQ(lull_signal_stop(&w.sig), 0);
        free_loop(loop);
        return;
    }
    run_until(loop, &w.calls, 1);
    CHECK_EQ(w.last, SIGRTMAX);
    CHECK_EQ(lull_signal_stop(&w.sig), 0);
    CHECK(!blocked_here(SIGRTMAX));
    free_loop(loop);
}

/* A real-time signal queued three times while watched, and the handle
 * stopped before the loop read any: lull takes back every instance, not
 * one, so none reaches the program's handler once the signal is
 * unblocked. */
TEST(stop_takes_back_every_queued_realtime_instance) {
    int sig = SIGRTMIN + 2;
    install_counter(sig);
    lull_loop *loop = new_loop();
    watcher w = {0};
    watch(loop, &w, 1, sig);
    union sigval v = {.sival_int = 0};
    for (int i = 0; i < 3; i++)
        CHECK_EQ(sigqueue(getpid(), sig, v), 0);
    CHECK_EQ(lull_signal_stop(&w.sig), 0);
    CHECK(!blocked_here(sig));
    CHECK(!pending_here(sig));
    CHECK_EQ(g_handled, 0);
    CHECK_EQ(w.calls, 0);
    free_loop(loop);
}

/* A start and stop over the program's own block leave lull's count of
 * the signal as it was: after the program unblocks it, two loops of this
 * thread watch it, and the first one's stop leaves it blocked for the
 * second, which still reads it; the second's stop gives it back. */
TEST(program_block_then_two_loops_keep_their_count) {
    lull_loop *one = new_loop(), *two = new_loop();
    watcher w = {0}, a = {0}, b = {0};
    CHECK_EQ(lull_signal_block(SIGUSR2), 0);
    watch(one, &w, 1, SIGUSR2);
    CHECK_EQ(lull_signal_stop(&w.sig), 0);
    CHECK(blocked_here(SIGUSR2)); /* the program's */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    CHECK_EQ(pthread_sigmask(SIG_UNBLOCK, &set, NULL), 0);
    watch(one, &a, 2, SIGUSR2);
    watch(two, &b, 3, SIGUSR2);
    CHECK_EQ(lull_signal_stop(&a.sig), 0);
    CHECK(blocked_here(SIGUSR2)); /* still lull's, for two */
    CHECK_EQ(raise(SIGUSR2), 0);
    run_until(two, &b.calls, 1);
    CHECK_EQ(lull_signal_stop(&b.sig), 0);
    CHECK(!blocked_here(SIGUSR2)); /* given back */
    free_loop(one);
    free_loop(two);
}

/* A first start that fails (no fd for the signalfd) over a signal the
 * program had blocked leaves it blocked: lull unblocks only what it
 * blocked itself. */
TEST(failed_start_keeps_the_programs_block) {
    lull_loop *loop = new_loop();
    watcher h = {0};
    h.id = 1;
    CHECK_EQ(lull_signal_init(loop, &h.sig, seen), 0);
    CHECK_EQ(lull_signal_block(SIGUSR1), 0);
    struct rlimit old;
    check_fds_exhaust(&old);
    int rc = lull_signal_start(&h.sig, SIGUSR1);
    check_fds_restore(&old);
    CHECK_EQ(rc, -EMFILE);
    CHECK(blocked_here(SIGUSR1));
    free_loop(loop);
}
