/* lull — a C11 event loop for Linux that is quiet when idle, nearly free per
 * turn, and fair under load.
 *
 * One header, one section per module. Every handle is a caller-owned struct:
 * lull never allocates per operation. Functions that can fail return 0 or a
 * negative errno.
 *
 * Threads: a loop has one owner thread at a time. It is the thread that
 * created the loop until another thread runs it: lull_loop_run,
 * lull_loop_settle and lull_loop_advance make the calling thread the owner, and
 * it stays the owner after they return. lull_loop_adopt hands the loop to a
 * thread that does not run it (to set it up or tear it down). Unless a
 * prototype says "thread-safe", call it only on the owner; debug builds assert
 * this in the calls that reach the loop, before the first run as well as during
 * one (docs/API.md lists which). lull_loop_free may be called on any thread
 * once no thread runs the loop.
 *
 * Getting from a handle back to your own struct: embed the handle and use
 * LULL_CONTAINER_OF(ptr, type, member). Handles carry no void *data.
 *
 * The long form of every contract is in docs/. */
#ifndef LULL_H
#define LULL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(LULL_BUILDING) && defined(__GNUC__)
#define LULL_EXTERN __attribute__((visibility("default")))
#else
#define LULL_EXTERN
#endif

#define LULL_CONTAINER_OF(ptr, type, member)                                   \
    ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* ---------------------------------------------------------------- loop */

typedef struct lull_loop lull_loop;
typedef struct lull_task lull_task;
typedef struct lull_timer lull_timer;

enum { LULL_CLOCK_MONOTONIC = 0, LULL_CLOCK_VIRTUAL = 1 };
enum { LULL_ROLE_SHARED = 0, LULL_ROLE_DEDICATED = 1 };
enum { LULL_RUN_DEFAULT = 0, LULL_RUN_ONCE = 1, LULL_RUN_NOWAIT = 2 };

/* lull_loop_options.flags */
#define LULL_LOOP_AUTO_ADVANCE                                                 \
    0x1u /* virtual clock: lull_loop_run jumps to the                          \
            next deadline when nothing can run */

typedef struct lull_loop_options { /* all zero = defaults */
    int clock;           /* LULL_CLOCK_MONOTONIC (0) or LULL_CLOCK_VIRTUAL */
    int role;            /* LULL_ROLE_SHARED (0): 0.5 ms quantum;
                            LULL_ROLE_DEDICATED: 2 ms quantum */
    uint64_t quantum_ns; /* 0 = the role's default */
    unsigned flags;      /* LULL_LOOP_* */
    uint64_t stall_ns;   /* a slice this long is a stall; 0 = 8 x quantum */
} lull_loop_options;

/* The largest quantum_ns and stall_ns lull_loop_new accepts (-EINVAL above):
 * an hour per slice is far past any useful quantum, and real-clock slice
 * arithmetic stays far from wrapping. The default stall (8 quanta) always
 * fits. */
#define LULL_QUANTUM_MAX_NS 3600000000000ull /* 1 hour */
#define LULL_STALL_MAX_NS   (8 * LULL_QUANTUM_MAX_NS)

/* Creates a loop (allocates; not a hot path). opts may be NULL. */
LULL_EXTERN int lull_loop_new(lull_loop **out, const lull_loop_options *opts);
/* -EBUSY while ready tasks, armed timers, started fd watchers, subscribed
 * listeners, held references or undrained remote posts remain; the loop is
 * then unchanged and usable (lull_loop_print_live lists what remains).
 * Never returns while another thread is still inside lull_task_post_remote or
 * lull_notifier_raise_remote for this loop (it waits for it to leave). A post
 * made after it returned is a use after free: stop posting threads first. */
LULL_EXTERN int lull_loop_free(lull_loop *loop);
/* Runs the loop. -EBUSY if already running (nested), -EINVAL on an unknown
 * mode. DEFAULT runs while the loop is alive; ONCE runs one iteration (it may
 * block); NOWAIT runs one iteration without blocking. If the kernel refuses
 * to wait (an error other than EINTR), the run ends and returns it. */
LULL_EXTERN int lull_loop_run(lull_loop *loop, int mode);
/* Ends the current run after the callback in progress; no-op outside a run.
 * From another thread, post a task that calls it. */
LULL_EXTERN void lull_loop_stop(lull_loop *loop);
/* The loop's notion of now in ns: cached, refreshed each iteration, while
 * busy work runs and by each delayed timer arm (monotonic), or the virtual
 * time. */
LULL_EXTERN uint64_t lull_loop_now(lull_loop *loop);
/* Reads the loop's clock now (a syscall-free vDSO read on the real clock). */
LULL_EXTERN uint64_t lull_loop_now_exact(lull_loop *loop);
/* Makes the calling thread the loop's owner (see Threads, above): for a
 * thread that sets up or tears down a loop another thread ran. The hand-over
 * must be ordered (a join, a mutex): lull does not synchronise it. -EBUSY
 * while the loop runs, -EINVAL for NULL. */
LULL_EXTERN int lull_loop_adopt(lull_loop *loop);
/* A reference for expected remote posts: keeps lull_loop_run alive. */
LULL_EXTERN void lull_loop_ref(lull_loop *loop);
LULL_EXTERN void lull_loop_unref(lull_loop *loop);
/* Is the loop alive: ready tasks, referenced timers or fd watchers, refs. */
LULL_EXTERN bool lull_loop_alive(lull_loop *loop);
/* In a child after fork(), before it uses the loop: gives the child its own
 * kernel state (a new epoll set with every started watcher registered
 * again, and a new wake-up fd), so nothing the child does reaches the
 * parent's loop. A child that does not call it must not touch the loop.
 * Call it on the thread that forked, which must own the loop: fork on the
 * loop's thread (inside a callback is fine), or while no thread runs it
 * (then lull_loop_adopt in the child makes the forking thread the owner).
 * 0, or a negative errno: the loop is then unusable in the child. */
LULL_EXTERN int lull_loop_fork(lull_loop *loop);

/* The ready-queue link shared by tasks and timers. Owned by the loop; its
 * layout is public only so that handles can live in caller memory. */
typedef struct lull__node {
    struct lull__node *next; /* queue link; NULL while not queued */
    struct lull__node *prev;
    union {
        void (*task)(lull_task *task);
        void (*timer)(lull_timer *timer);
    } fn;           /* the user's callback; `flags` says which member */
    uint32_t flags; /* kind and state bits; a timer's arm order above
                       them (src/internal.h) */
    uint32_t aux;   /* timer: heap position, 0 when not in the heap */
} lull__node;

/* ---------------------------------------------------------- tasks: C2 */

typedef void (*lull_task_fn)(lull_task *task);

struct lull_task {
    lull__node node;        /* ready-queue link (loop-owned) */
    lull_task *remote_next; /* cross-thread link, separate from `node` */
    lull_loop *loop;        /* the loop it was last queued on (NULL before
                               the first post): in the callback, the loop
                               running it. For the user; lull never reads
                               it. */
};

/* Prepares a task; call again only while it is not pending. */
LULL_EXTERN void lull_task_init(lull_task *task, lull_task_fn fn);
/* Queues the task at the tail; a no-op if it is already pending. The task
 * never runs inside this call. No allocation. */
LULL_EXTERN void lull_task_post(lull_loop *loop, lull_task *task);
/* Unlinks a pending task: it will not run, even if due in this batch. */
LULL_EXTERN void lull_task_cancel(lull_task *task);
LULL_EXTERN bool lull_task_pending(const lull_task *task);

/* --------------------------------------------------------- timers: C3 */

typedef void (*lull_timer_fn)(lull_timer *timer);

struct lull_timer {  /* 48 bytes, plus one 16-byte heap slot while armed */
    lull__node node; /* ready-queue link; aux holds the heap position */
    lull_loop *loop; /* owning loop */
    uint64_t repeat; /* period in ns, 0 = one-shot */
};

LULL_EXTERN void lull_timer_init(lull_loop *loop, lull_timer *timer,
                                 lull_timer_fn fn);
/* Arms (or re-arms: new deadline, new arm order) the timer. delay 0 queues it
 * like a posted task; repeat > 0 fires every repeat ns, phase kept. A delay
 * counts from this call: on the real clock it reads CLOCK_MONOTONIC, so the
 * timer never fires before delay_ns has passed since the call. Deadlines
 * saturate at UINT64_MAX (never, on the real clock); a repeating timer that
 * fires at UINT64_MAX has no next period and stops. */
LULL_EXTERN void lull_timer_start(lull_timer *timer, uint64_t delay_ns,
                                  uint64_t repeat_ns);
LULL_EXTERN void lull_timer_stop(lull_timer *timer);
LULL_EXTERN bool lull_timer_active(const lull_timer *timer);
/* The absolute deadline (loop clock, ns) the timer is armed for, or 0 when
 * it is not waiting for one (stopped, or due and queued). A repeating timer
 * is armed for its next period before its callback runs, so inside the
 * callback this is already the next deadline. */
LULL_EXTERN uint64_t lull_timer_deadline(const lull_timer *timer);
/* Inside the timer's own callback, when it fires for a deadline: how many
 * periods this fire stands for (timerfd's expiration count). 1 when the loop
 * was on time; on the real clock, a repeating timer whose loop was too busy
 * to see some periods fires once for all of them, and this says how many
 * (the skipped ones plus this one). On the virtual clock lull_loop_advance
 * fires once per period crossed, so it is 1. 0 outside the timer's callback and
 * in a zero-delay turn (which has no deadline). */
LULL_EXTERN uint64_t lull_timer_overrun(const lull_timer *timer);
/* An unreferenced timer does not keep lull_loop_run alive. */
LULL_EXTERN void lull_timer_ref(lull_timer *timer);
LULL_EXTERN void lull_timer_unref(lull_timer *timer);

/* ---------------------------------------------------- file descriptors */

#define LULL_READABLE 0x1
#define LULL_WRITABLE 0x2
#define LULL_HANGUP   0x4 /* reported with the interest bits; never asked */
#define LULL_ERROR    0x8

typedef struct lull_io lull_io;
typedef void (*lull_io_fn)(lull_io *io, int events);

struct lull_io {
    lull_loop *loop; /* owning loop */
    lull_io_fn fn;   /* called with the ready LULL_* bits */
    int fd;          /* the watched descriptor (not owned: never closed) */
    int events;      /* interest the kernel holds; 0 while stopped */
    uint32_t flags;  /* state bits (src/internal.h) */
    uint32_t slot;   /* its slot in the loop's table while started */
};

/* Level-triggered: the callback runs every iteration while the fd is ready
 * and watched. -EINVAL for a NULL loop, watcher or fn, or a negative fd.
 * Only on a watcher that is not started. */
LULL_EXTERN int lull_io_init(lull_loop *loop, lull_io *io, int fd,
                             lull_io_fn fn);
/* Starts watching for events (LULL_READABLE | LULL_WRITABLE); on a started
 * watcher, replaces its interest (as uv_poll_start does: the way to add or
 * drop LULL_WRITABLE), and readiness already collected for this batch is
 * filtered by the new interest. 0, or: -EINVAL for a NULL or uninitialised
 * watcher, events 0 (use lull_io_stop) or unknown bits; -EEXIST if another
 * watcher holds the fd; -EBADF if the fd is not open; -EPERM for fds epoll
 * cannot watch (regular files, directories); -ENOMEM; or another errno of
 * epoll_ctl (-ENOSPC past fs.epoll.max_user_watches). On failure the
 * watcher is as it was: a started one keeps its old interest. */
LULL_EXTERN int lull_io_start(lull_io *io, int events);
/* Safe inside any callback: a stopped watcher is not called again, even for
 * readiness already collected in this batch or when its fd was closed
 * first; its memory is not touched after this returns. */
LULL_EXTERN void lull_io_stop(lull_io *io);
LULL_EXTERN void lull_io_ref(lull_io *io);
LULL_EXTERN void lull_io_unref(lull_io *io);

/* ------------------------------------------------------- cross-thread */

/* Thread-safe. Queues the task on the loop from any thread; a no-op while the
 * same task is already queued remotely. One eventfd write per burst. The
 * loop does not touch the task after calling its function. The loop must
 * exist when the call begins; lull_loop_free waits for the call to end. */
LULL_EXTERN void lull_task_post_remote(lull_loop *loop, lull_task *task);

/* -------------------------------------------- notifier, listener: C4 */

typedef struct lull_notifier lull_notifier;
typedef struct lull_listener lull_listener;
typedef void (*lull_listener_fn)(lull_listener *l);

struct lull_listener {
    lull_task task;      /* queued on raise; runs fn */
    lull_task *target;   /* what a raise posts: &task, or a pump's pass */
    lull_listener *next; /* subscription list, in subscription order */
    lull_listener *prev;
    lull_notifier *notifier; /* NULL while not subscribed */
    lull_loop *loop;
    lull_listener_fn fn;
    lull_listener *pump_next; /* a pump's listeners, closed with it */
    lull_listener *pump_prev;
    lull_listener *loop_next; /* the loop's subscribed listeners, for */
    lull_listener *loop_prev; /* lull_loop_walk (no allocation) */
};

struct lull_notifier {
    lull_listener *head; /* subscribers, oldest first */
    lull_listener *tail;
    lull_task remote; /* carries lull_notifier_raise_remote to the loop */
    uint64_t raised;  /* lull_notifier_raise calls, for tests and audits */
    unsigned raisers; /* threads inside lull_notifier_raise_remote (atomic) */
};

LULL_EXTERN void lull_notifier_init(lull_notifier *n);
/* Subscribes l: each raise queues fn(l) in a later task, once however often
 * the notifier was raised before it ran. l needs no initialisation, but must
 * not be subscribed already. (lull_listener_stop reads l: call it only on a
 * listener that was subscribed once, or that you zeroed.) */
LULL_EXTERN void lull_listener_start(lull_loop *loop, lull_notifier *n,
                                     lull_listener *l, lull_listener_fn fn);
/* Unsubscribes; a queued, not yet run listener task is cancelled. A pump's
 * listener also leaves the pump. The listener is then free to be reused
 * with lull_listener_start or lull_pump_listen, on any notifier and loop. */
LULL_EXTERN void lull_listener_stop(lull_listener *l);
/* Raises: O(listeners), no allocation, never runs a listener inline. */
LULL_EXTERN void lull_notifier_raise(lull_notifier *n);
/* Thread-safe raise for a notifier whose listeners all live on `loop`. The
 * notifier must exist when the call begins; see lull_notifier_quiesce. */
LULL_EXTERN void lull_notifier_raise_remote(lull_loop *loop, lull_notifier *n);
/* Before freeing a notifier that other threads raise: waits until no thread
 * is inside lull_notifier_raise_remote(loop, n) any more, then withdraws a
 * remote raise of n that has not run yet. Afterwards n may be freed, provided
 * no thread begins another lull_notifier_raise_remote on it. Loop thread of
 * `loop`. */
LULL_EXTERN void lull_notifier_quiesce(lull_loop *loop, lull_notifier *n);

/* ------------------------------------------------------------ pump: C4 */

enum { LULL_PASS_QUIET = 0, LULL_PASS_AGAIN = 1, LULL_PASS_HELD = 2 };

typedef struct lull_pump lull_pump;
/* A pass returns LULL_PASS_QUIET, LULL_PASS_AGAIN (next task) or
 * LULL_PASS_HELD with *retry_ns set (0 means AGAIN). */
typedef int (*lull_pass_fn)(lull_pump *pump, uint64_t *retry_ns);

struct lull_pump {
    lull_task task;   /* the queued pass */
    lull_timer retry; /* armed only while something is held */
    lull_loop *loop;
    lull_pass_fn pass;
    lull_listener *listeners; /* subscribed by lull_pump_listen */
    int source;               /* its row in the wake audit, -1 if none */
    uint64_t passes;          /* passes run */
    uint64_t empty;           /* passes that reported no delivery */
    uint64_t delivered;       /* items reported by lull_pump_delivered */
    bool closed;
    struct lull__pass_frame *frame; /* the pass running, if any (pump.c) */
};

LULL_EXTERN void lull_pump_init(lull_loop *loop, lull_pump *pump,
                                lull_pass_fn pass);
/* Schedules one pass in a later task; wakes before it runs share it. A wake
 * while held cancels the retry timer: the pass re-decides. */
LULL_EXTERN void lull_pump_wake(lull_pump *pump);
/* Subscribes the pump to n through l: a raise queues the pass itself. */
LULL_EXTERN void lull_pump_listen(lull_pump *pump, lull_notifier *n,
                                  lull_listener *l);
/* The pass reports what it handed on; a pass reporting nothing is empty. */
LULL_EXTERN void lull_pump_delivered(lull_pump *pump, uint64_t n);
/* Cancels the queued pass and the retry and unsubscribes the pump's
 * listeners. A pass may close its own pump and then free it (the pass's
 * return value is then ignored and the pump not touched again). */
LULL_EXTERN void lull_pump_close(lull_pump *pump);
/* True exactly when no pass is queued and no retry timer is armed. */
LULL_EXTERN bool lull_pump_quiet(const lull_pump *pump);

/* ---------------------------------------------------------- budget: C5 */

/* True once the current slice of busy work has run for the quantum, or a
 * timer came due during it; false outside a callback. A few ns amortized:
 * call it per record. */
LULL_EXTERN bool lull_loop_should_yield(lull_loop *loop);
LULL_EXTERN uint64_t lull_loop_quantum(lull_loop *loop);

/* ---------------------------------------------------- virtual clock: C7 */

/* Moves virtual time forward by ns, firing due timers in deadline order and
 * running ready work between them. No-op on a monotonic loop. */
LULL_EXTERN void lull_loop_advance(lull_loop *loop, uint64_t ns);
/* Runs ready work with time frozen, in rounds that each poll fds once
 * (without blocking) and take remote posts, until a round runs nothing, or
 * only fd callbacks of watchers the round before also ran, with nothing
 * queued after it: a level-triggered fd that stays ready (a writable pipe)
 * runs twice and settle returns; work that re-posts itself forever keeps
 * it running. Returns the callbacks run, -EBUSY when called inside a run,
 * or the poll's error as lull_loop_run does. */
LULL_EXTERN int lull_loop_settle(lull_loop *loop);

/* --------------------------------------------------------- metrics: C8 */

/* Log-linear histogram of ns values: 16 sub-buckets per power of two, so a
 * percentile is exact to within 1/16 (6%). Public so tools can reuse it. */
#define LULL_HIST_SUB     16
#define LULL_HIST_BUCKETS (64 * LULL_HIST_SUB)
typedef struct lull_histogram {
    uint64_t count;
    uint64_t sum;
    uint64_t max;
    uint32_t buckets[LULL_HIST_BUCKETS];
} lull_histogram;
LULL_EXTERN void lull_histogram_record(lull_histogram *h, uint64_t value);
/* p in [0, 1]; returns 0 for an empty histogram. */
LULL_EXTERN uint64_t lull_histogram_percentile(const lull_histogram *h,
                                               double p);

typedef struct lull_latency { /* a histogram's summary, ns */
    uint64_t count, p50, p95, p99, max;
} lull_latency;

typedef struct lull_metrics {
    uint64_t wakeups;        /* returns from a blocking wait in the kernel */
    uint64_t tasks_run;      /* callbacks run: tasks, timers, io, listeners */
    uint64_t polls;          /* I/O checks, blocking or not */
    uint64_t busy_ns;        /* time spent running callbacks */
    uint64_t idle_ns;        /* time spent blocked in the kernel */
    uint64_t stalls;         /* slices that ran past stall_ns */
    uint64_t wakeups_timer;  /* wakeups a timer deadline caused */
    uint64_t wakeups_io;     /* wakeups fd readiness caused */
    uint64_t wakeups_remote; /* wakeups a cross-thread post caused */
    uint64_t wakeups_signal; /* waits a signal interrupted (EINTR) */
    uint64_t empty_polls;    /* polls that found nothing */
    uint64_t iterations;     /* loop iterations */
    uint64_t worst_stall_ns;
    const char *worst_stall; /* callback running when the worst stall was
                                seen (see lull_loop_name); NULL if none */
    lull_latency task_wait;  /* post -> run, sampled */
    lull_latency task_run;   /* callback duration, sampled */
    /* What is live when the metrics are read (never reset): everything that
     * keeps lull_loop_free at -EBUSY, by cause. lull_loop_walk lists the
     * handles behind each count. Counting walks the ready queue and the
     * remote posts: O(queued), not a hot path. */
    uint64_t live_ready;        /* tasks and timers queued to run: ready
                                   queue, due list, flush queue (listener
                                   tasks and pump passes included) */
    uint64_t live_timers;       /* timers armed for a deadline, referenced */
    uint64_t live_timers_unref; /* ... unreferenced (do not keep lull_loop_run
                                   going, but keep lull_loop_free busy) */
    uint64_t live_io;           /* started fd watchers, referenced */
    uint64_t live_io_unref;     /* ... unreferenced */
    uint64_t live_listeners;    /* subscribed listeners (pumps' included) */
    uint64_t live_refs;         /* lull_loop_ref references held */
    uint64_t live_remote; /* lull_task_post_remote / lull_notifier_raise_remote
                             posts the loop has not taken yet */
} lull_metrics;

LULL_EXTERN void lull_loop_metrics(lull_loop *loop, lull_metrics *out);
LULL_EXTERN void lull_loop_metrics_reset(lull_loop *loop);

/* Names a callback for stalls and the audit: every handle whose callback is
 * fn reports under this name. Allocates once per name; not a hot path. */
typedef void (*lull_any_fn)(void);
LULL_EXTERN int lull_loop_name(lull_loop *loop, lull_any_fn fn,
                               const char *name);
#define LULL_NAME(loop, fn, name)                                              \
    lull_loop_name((loop), (lull_any_fn)(fn), (name))

/* ------------------------------------------------------ wake audit: C8 */

/* Every kernel wakeup is attributed to its cause, and every pump pass is
 * counted against its pass function, per callback (so 10,000 pumps sharing
 * a pass function are one source). A component that polls shows up as a
 * source with steady wakeups or empty passes per second while nothing
 * happens. docs/AUDIT.md shows how to read it. */
enum {
    LULL_SOURCE_TIMER = 1,  /* a timer's deadline woke the loop */
    LULL_SOURCE_IO = 2,     /* fd readiness woke the loop */
    LULL_SOURCE_REMOTE = 3, /* a cross-thread post woke the loop: its task,
                               or the listener a lull_notifier_raise_remote
                               reached */
    LULL_SOURCE_PUMP =
        4,                 /* a pump's passes, and the wakeups of the
                              lull_notifier_raise_remote raises that reached it */
    LULL_SOURCE_SIGNAL = 5 /* a signal interrupted the wait (one row) */
};

typedef struct lull_audit_entry {
    const char *name;      /* lull_loop_name, or "<kind> <address>" */
    int kind;              /* LULL_SOURCE_* */
    uint64_t wakeups;      /* kernel wakeups it caused in the window */
    uint64_t passes;       /* pump passes in the window */
    uint64_t empty_passes; /* ... that delivered nothing */
    double wakeups_per_s;  /* over the window */
    double empty_per_s;
} lull_audit_entry;

/* Fills up to max entries, busiest first (wakeups + empty passes), for the
 * window since the loop was created or lull_loop_audit_reset; returns how
 * many sources there are (may exceed max). *window_ns gets the window. */
LULL_EXTERN int lull_loop_audit(lull_loop *loop, lull_audit_entry *out, int max,
                                uint64_t *window_ns);
LULL_EXTERN void lull_loop_audit_reset(lull_loop *loop);

/* ------------------------------------------------------ what is live: C8 */

/* What keeps lull_loop_free at -EBUSY, handle by handle (libuv's uv_walk).
 * Each entry is one handle and one cause; a handle with two causes is
 * reported twice (a subscribed listener whose task is queued; a repeating
 * timer that is due and already armed for its next period). The loop keeps
 * no list of every handle: it reports what it can reach, which is every
 * cause of -EBUSY except held references (a count: live_refs).
 *
 * lull_live.cause: what makes the handle live. */
enum {
    LULL_LIVE_READY = 1,      /* queued to run: ready queue, due list or
                                 flush queue */
    LULL_LIVE_ARMED = 2,      /* a timer waiting for its deadline */
    LULL_LIVE_STARTED = 3,    /* a started fd watcher */
    LULL_LIVE_SUBSCRIBED = 4, /* a listener on a notifier */
    LULL_LIVE_REMOTE = 5      /* posted from another thread, not yet taken
                                 by the loop (a run or lull_loop_settle takes it) */
};
/* lull_live.kind: what `handle` points at. */
enum {
    LULL_HANDLE_TASK = 1,     /* lull_task */
    LULL_HANDLE_TIMER = 2,    /* lull_timer */
    LULL_HANDLE_IO = 3,       /* lull_io */
    LULL_HANDLE_LISTENER = 4, /* lull_listener (a pump's too) */
    LULL_HANDLE_PUMP = 5,     /* lull_pump: its pass queued or its retry
                                 timer armed */
    LULL_HANDLE_NOTIFIER = 6  /* lull_notifier: a lull_notifier_raise_remote
                                 raise  on its way */
};

typedef struct lull_live {
    int cause;          /* LULL_LIVE_* */
    int kind;           /* LULL_HANDLE_* */
    const void *handle; /* the handle, of the type `kind` names */
    lull_any_fn fn;     /* the callback it leads to: yours, also behind
                           lull's own forwarding (a listener's task, a
                           pump's pass or retry: the pass; a notifier
                           raise: its first listener's callback); NULL for
                           a raise of a notifier with no listener */
    const char *name;   /* lull_loop_name of fn, or NULL */
    bool ref;           /* keeps lull_loop_run going (lull_loop_alive) */
    uint64_t deadline;  /* ARMED: the absolute deadline; else 0 */
    int fd;             /* STARTED: the watched fd; else -1 */
} lull_live;

typedef void (*lull_walk_fn)(const lull_live *live, void *arg);
/* Calls fn once per entry, in this order: ready queue, due list, flush
 * queue (a stream's pending write), timer heap (not in deadline order), fd
 * watchers, listeners (newest first), remote posts (newest first). fn must not
 * start, stop, post or free anything on this loop. Returns the number of
 * entries, or -EINVAL. Loop thread. */
LULL_EXTERN int lull_loop_walk(lull_loop *loop, lull_walk_fn fn, void *arg);
/* Prints the walk, one line per entry, and the references held, to out
 * (uv_print_active_handles). Returns the number of entries, or -EINVAL.
 * Loop thread. */
LULL_EXTERN int lull_loop_print_live(lull_loop *loop, FILE *out);

/* ---------------------------------------------------------- frames: C6 */

/* The frame interface: whole frames to and from a peer, whatever carries
 * them. Application code holds a lull_endpoint * and uses only this
 * section, so it runs unchanged on a loopback pair (below) or on a socket
 * stream; the transport fills in `ops`. Delivery rules are the transport's
 * to keep, and they are the same for all: a frame is never delivered inside
 * the call that sent it, frames arrive in send order, one callback at a
 * time. docs/LOOPBACK.md has the delivery model. */

typedef struct lull_frame lull_frame;
typedef struct lull_endpoint lull_endpoint;

/* The transport is done with a handed-over frame: the peer's frame callback
 * returned, or a close discarded the frame. Called once per accepted send;
 * the frame and its bytes are the caller's again (re-send or free them). */
typedef void (*lull_release_fn)(lull_frame *frame);

struct lull_frame {    /* caller-owned; embed it and use LULL_CONTAINER_OF */
    const void *bytes; /* the payload: read in place, never copied */
    size_t len;        /* bytes of payload; 0 is a valid frame */
    lull_release_fn release; /* may be NULL */
    lull_frame *next;        /* the transport's queue link while in flight */
    bool in_flight;          /* accepted and not yet released */
};

/* A frame from the peer; bytes are valid during the call only. */
typedef void (*lull_frame_fn)(lull_endpoint *ep, const void *bytes, size_t len);
/* Queued bytes fell back below the high-water mark: writable again. */
typedef void (*lull_drain_fn)(lull_endpoint *ep);
/* The peer closed with `reason` (what it passed to lull_endpoint_close),
 * after every frame it sent before closing was delivered; or the transport
 * failed (a negative errno). The endpoint's last callback. */
typedef void (*lull_close_fn)(lull_endpoint *ep, int reason);

/* What a transport implements. lull_endpoint_send and lull_endpoint_close check
 * the arguments and the state, and count the bytes, before calling these; so
 * queueing cannot fail (the frame is its own queue link), and a transport
 * reports later trouble through the peer's close callback. */
typedef struct lull_frame_ops {
    void (*send)(lull_endpoint *ep, lull_frame *frame); /* queue it */
    void (*close)(lull_endpoint *ep, int reason);
} lull_frame_ops;

struct lull_endpoint {
    const lull_frame_ops *ops; /* the transport's; NULL until it set up */
    lull_frame_fn on_frame;    /* NULL: frames are delivered to nobody */
    lull_drain_fn on_drain;    /* may be NULL */
    lull_close_fn on_close;    /* may be NULL */
    size_t queued;     /* bytes accepted and not yet delivered (or written) */
    size_t high_water; /* writable while queued < high_water */
    size_t max_frame;  /* a longer frame is refused with -EMSGSIZE */
    uint32_t flags;    /* state bits (src/frame.h) */
};

/* 16 MiB: far above any message lull's users exchange, low enough that a
 * corrupt length cannot make a stream reserve gigabytes. */
#define LULL_FRAME_MAX_DEFAULT ((size_t)16 << 20)
/* 64 KiB: a socket's default send buffer order of magnitude; enough for
 * many small frames in flight before a producer is asked to wait. */
#define LULL_HIGH_WATER_DEFAULT ((size_t)64 << 10)

/* Sets the callbacks (any may be NULL). Call it before the loop can deliver
 * anything: right after the transport set the endpoint up. */
LULL_EXTERN void lull_endpoint_set_callbacks(lull_endpoint *ep,
                                             lull_frame_fn on_frame,
                                             lull_drain_fn on_drain,
                                             lull_close_fn on_close);
/* Hands the frame over: no copy, no allocation; frame->release runs when
 * the transport is done with it. 0, or: -EINVAL (NULL, or bytes NULL with
 * len > 0), -EBUSY (that frame is still in flight), -EPIPE (this end or
 * its peer closed), -EMSGSIZE (len > max_frame). On an error the frame
 * stays the caller's and nothing else changes. Past the high-water mark a
 * send is still accepted: lull_endpoint_writable says when to stop. */
LULL_EXTERN int lull_endpoint_send(lull_endpoint *ep, lull_frame *frame);
/* Borrows and copies the bytes (allocates one block per frame); the same
 * errors, and -ENOMEM. */
LULL_EXTERN int lull_endpoint_send_copy(lull_endpoint *ep, const void *bytes,
                                        size_t len);
/* Open, peer open, and fewer than high_water bytes queued. */
LULL_EXTERN bool lull_endpoint_writable(const lull_endpoint *ep);
/* Closes this end: its queued incoming frames are released undelivered and
 * it gets no more callbacks; frames it already sent are still delivered,
 * then the peer's close callback gets `reason`. Idempotent: 0, or -EINVAL
 * for NULL or an endpoint no transport set up. */
LULL_EXTERN int lull_endpoint_close(lull_endpoint *ep, int reason);
/* Closed by lull_endpoint_close, or the peer's close was delivered. */
LULL_EXTERN bool lull_endpoint_closed(const lull_endpoint *ep);

/* ------------------------------------------------------------- loopback */

/* Two connected endpoints on one loop: the honest in-process transport
 * (C6). Frames queue at the receiving end and are delivered one per turn,
 * in send order, by a posted task (or, for comparisons, a timer), so
 * nothing arrives inside the sender's call and each frame's callback
 * returns before the next frame is delivered. The hand-over path never
 * allocates. */

enum { LULL_DELIVER_TASK = 0, LULL_DELIVER_TIMER = 1 };

typedef struct lull_loopback_options { /* all zero = defaults */
    size_t max_frame;                  /* 0 = LULL_FRAME_MAX_DEFAULT */
    size_t high_water;                 /* 0 = LULL_HIGH_WATER_DEFAULT */
    int deliver;       /* LULL_DELIVER_TASK (0): one posted task per frame;
                          LULL_DELIVER_TIMER: a timer armed for delay_ns */
    uint64_t delay_ns; /* timer delivery: 0 is a zero-delay turn (by C3 the
                          same order and cost as a task); more is a link
                          that holds each frame that long */
} lull_loopback_options;

typedef struct lull_loopback lull_loopback;
struct lull_loopback {
    lull_endpoint ep;    /* the frame interface: give &ep to your code */
    lull_task task;      /* the delivery turn (LULL_DELIVER_TASK) */
    lull_timer timer;    /* the delivery turn (LULL_DELIVER_TIMER) */
    lull_loop *loop;     /* owning loop */
    lull_loopback *peer; /* the other end; NULL once either end closed */
    lull_frame *head;    /* the peer's frames not yet delivered, oldest */
    lull_frame *tail;    /* first */
    uint64_t delay_ns;   /* timer delivery's delay */
    int deliver;         /* LULL_DELIVER_* */
    int reason;          /* the peer's close reason, while close_pending */
    bool close_pending;  /* the peer closed: deliver it after the frames */
    uint64_t delivered;  /* frames delivered to this end */
    uint64_t turns;      /* delivery turns claimed: posts or timer arms */
    bool *closed_flag;   /* set by a close while a delivery to this end runs */
};

/* Connects a and b on loop (opts may be NULL): what &a->ep sends arrives at
 * b's frame callback and the other way round. -EINVAL for NULL, a == b or
 * an unknown delivery. Re-pair ends only once both are closed and not
 * pending. */
LULL_EXTERN int lull_loopback_pair(lull_loop *loop, lull_loopback *a,
                                   lull_loopback *b,
                                   const lull_loopback_options *opts);
/* A delivery turn (a frame, or the peer's close) is queued for this end. */
LULL_EXTERN bool lull_loopback_pending(const lull_loopback *lb);

/* -------------------------------------------------------------- streams */

/* Socket streams (C6): TCP (IPv4 and IPv6, numeric addresses) and Unix
 * sockets, each an endpoint of the frame interface above. By default a
 * send is written as a 4-byte big-endian length and the bytes, and the
 * peer's frames arrive whole at on_frame; a frame longer than max_frame,
 * or cut short by the peer's EOF, closes that stream alone (-EMSGSIZE,
 * -EPROTO). With LULL_STREAM_RAW, sends are written as given and on_frame
 * gets the bytes in chunks as they arrive.
 *
 * Writes queue (the caller's frames, no copy) and leave together, in as few
 * writev calls as the kernel takes: after the fd callbacks of an iteration,
 * at the end of its slice, and at once when the queue reaches high_water.
 * Past high_water, lull_endpoint_writable turns false; on_drain runs once when
 * the queue falls back below. A frame's release runs once it is written (never
 * inside lull_endpoint_send) or discarded by a close. TCP_NODELAY is on unless
 * LULL_STREAM_NAGLE: batching is lull's job, not the kernel's. No SIGPIPE
 * ever (MSG_NOSIGNAL): a dead peer is a close reason.
 *
 * on_close gets 0 for the peer's orderly EOF, else -ECONNRESET, -EPIPE,
 * -ETIMEDOUT (idle_timeout_ns), -EMSGSIZE, -EPROTO or another errno; it is
 * the stream's last callback. lull_endpoint_close closes now: one last
 * write attempt, then what is still queued is released unwritten, the
 * socket is closed, and the struct may be freed or reused when it returns,
 * inside any of the stream's callbacks too. lull_stream_shutdown is the
 * graceful way: the queue is written, then the write side is shut.
 * docs/STREAMS.md has the long form. */

#define LULL_STREAM_RAW   0x1u /* bytes, not length-prefixed frames */
#define LULL_STREAM_NAGLE 0x2u /* TCP: leave Nagle's algorithm on */

typedef struct lull_stream lull_stream;
typedef struct lull_server lull_server;
/* Connected (status 0), or failed: -ECONNREFUSED, -ETIMEDOUT, -ENOENT ...;
 * a failed stream is already closed, its struct free to reuse. */
typedef void (*lull_connect_fn)(lull_stream *s, int status);
/* The peer shut its write side; the stream stays open for writing. */
typedef void (*lull_end_fn)(lull_stream *s);
/* A connection is waiting: take it with lull_server_accept inside this
 * call, or it is closed when the call returns. */
typedef void (*lull_connection_fn)(lull_server *srv);

typedef struct lull_stream_options { /* all zero = defaults */
    size_t max_frame;                /* 0 = LULL_FRAME_MAX_DEFAULT; framed,
                                        at most UINT32_MAX (a 4-byte length) */
    size_t high_water;               /* 0 = LULL_HIGH_WATER_DEFAULT */
    size_t read_size;                /* the stream's read buffer: 0 = 64 KiB;
                                        framed, it grows to hold a frame */
    uint64_t connect_timeout_ns;     /* 0 = the kernel's (minutes) */
    uint64_t idle_timeout_ns;        /* nothing read or written this long:
                                        close with -ETIMEDOUT; 0 = never */
    unsigned flags;                  /* LULL_STREAM_* */
} lull_stream_options;

typedef struct lull__stream_guard lull__stream_guard;

struct lull_stream {
    lull_endpoint ep; /* the frame interface: give &ep to your code */
    lull_io io;       /* the socket (owned: closed with the stream) */
    lull_task flush;  /* queued at the loop's flush points while writes wait */
    lull_task event;  /* later turn: connect result, buffered frames after
                         a resume, a failure found inside lull_endpoint_send */
    lull_timer timer; /* connect and idle timeouts */
    lull_loop *loop;
    lull_connect_fn on_connect;
    lull_end_fn on_end; /* NULL: the peer's EOF closes the stream */
    lull_frame *head;   /* queued writes, oldest first */
    lull_frame *tail;
    size_t head_done; /* bytes of head (its length included) written */
    lull_frame *done; /* written inside lull_endpoint_send, released at the */
    lull_frame *done_tail; /* next flush point */
    unsigned char *rbuf;   /* read buffer: owned, or the caller's */
    size_t rcap;           /* its size */
    size_t rstart;         /* unconsumed bytes are [rstart, rend) */
    size_t rend;
    lull__stream_guard *guard; /* innermost callback of ours running */
    uint64_t idle_ns;          /* idle_timeout_ns */
    uint64_t active_ns;        /* loop time of the last read or write */
    unsigned flags;            /* LULL_STREAM_* */
    uint32_t state;            /* state bits (src/stream.c) */
    int error;                 /* a failure the event task delivers */
    uint64_t writes;           /* writev (sendmsg) calls */
    uint64_t bytes_written;
    uint64_t reads; /* recv calls that returned data */
    uint64_t bytes_read;
};

struct lull_server {
    lull_io io;       /* the listening socket (owned) */
    lull_timer retry; /* resumes accepting after EMFILE / ENFILE */
    lull_loop *loop;
    lull_connection_fn on_connection;
    lull__stream_guard *guard; /* on_connection running, if any */
    int family;                /* AF_INET, AF_INET6 or AF_UNIX */
    int pending;       /* the accepted fd lull_server_accept takes; -1 */
    uint64_t retry_ns; /* pause after running out of fds */
    uint64_t accepted; /* connections handed to on_connection */
    uint64_t paused;   /* times accepting paused: out of fds, or accept
                          failing for another reason than a race */
};

/* Listens on host (numeric IPv4 or IPv6; NULL = "127.0.0.1") and port (0 =
 * any: see lull_server_port). backlog <= 0 means SOMAXCONN. Running out of
 * fds (EMFILE, ENFILE) pauses accepting for 100 ms, leaving the waiting
 * connections in the kernel's backlog; nothing spins. */
LULL_EXTERN int lull_server_listen_tcp(lull_loop *loop, lull_server *srv,
                                       const char *host, int port, int backlog,
                                       lull_connection_fn fn);
/* path: a filesystem path (not removed by lull), or "@name" for Linux's
 * abstract namespace. */
LULL_EXTERN int lull_server_listen_unix(lull_loop *loop, lull_server *srv,
                                        const char *path, int backlog,
                                        lull_connection_fn fn);
/* The bound TCP port, or a negative errno. */
LULL_EXTERN int lull_server_port(const lull_server *srv);
/* Inside on_connection: makes s the waiting connection, reading at once.
 * -ENOENT when nothing is waiting. */
LULL_EXTERN int lull_server_accept(lull_server *srv, lull_stream *s,
                                   const lull_stream_options *opts);
/* Stops listening and closes the socket; safe in any callback. */
LULL_EXTERN void lull_server_close(lull_server *srv);

/* Non-blocking connect; fn runs in a later turn, never inside this call.
 * Frames sent before it runs are queued. Argument errors return at once. */
LULL_EXTERN int lull_stream_connect_tcp(lull_loop *loop, lull_stream *s,
                                        const char *host, int port,
                                        const lull_stream_options *opts,
                                        lull_connect_fn fn);
LULL_EXTERN int lull_stream_connect_unix(lull_loop *loop, lull_stream *s,
                                         const char *path,
                                         const lull_stream_options *opts,
                                         lull_connect_fn fn);
/* Adopts a connected stream socket (e.g. one end of a socketpair): the
 * stream owns fd from here on, also on failure. Reading starts at once. */
LULL_EXTERN int lull_stream_open(lull_loop *loop, lull_stream *s, int fd,
                                 const lull_stream_options *opts);
/* Pause and resume reading (backpressure on the peer). Frames already
 * buffered wait too; on resume they arrive in a later turn. */
LULL_EXTERN int lull_stream_read_stop(lull_stream *s);
LULL_EXTERN int lull_stream_read_start(lull_stream *s);
/* Reads into the caller's buffer from now on (it must outlive the stream).
 * Framed, it bounds the frame: a longer one closes with -EMSGSIZE. Call it
 * only between reads (not inside on_frame); -EBUSY while bytes are
 * buffered. */
LULL_EXTERN int lull_stream_read_into(lull_stream *s, void *buf, size_t cap);
/* Keeps the stream open for writing after the peer's EOF; fn hears of it. */
LULL_EXTERN void lull_stream_set_on_end(lull_stream *s, lull_end_fn fn);
/* Half-close: once everything queued is written, shut the write side (the
 * peer reads EOF); sends fail with -EPIPE from now on. Reading goes on. */
LULL_EXTERN int lull_stream_shutdown(lull_stream *s);
/* The socket, or -1 once closed. */
LULL_EXTERN int lull_stream_fd(const lull_stream *s);

/* ------------------------------------------------------------------ pool */

/* Blocking work off the loop (docs/POOL.md). A pool is a set of threads that
 * sleep on a futex while its queue is empty: no timer, no wakeup. Work is
 * submitted from a loop's thread; its done function runs back on that loop,
 * carried by lull_task_post_remote, so a burst of completions costs the loop
 * one wake. Lanes: create one pool per purpose (fsync, DNS, ...) so that slow
 * work in one never holds up short work in another. No allocation per
 * submission: the caller owns every lull_work. */

typedef struct lull_pool lull_pool;
typedef struct lull_work lull_work;
/* Runs on a pool thread. Its return value is the status done receives. */
typedef int (*lull_work_fn)(lull_work *work);
/* Runs on the submitting loop's thread, exactly once per accepted submit:
 * status is fn's return value, or -ECANCELED when fn never ran. */
typedef void (*lull_work_done_fn)(lull_work *work, int status);

struct lull_work {
    lull_task task;         /* carries the completion to the loop */
    lull_work_fn fn;        /* runs on a pool thread */
    lull_work_done_fn done; /* runs on the loop; may be NULL */
    lull_loop *loop;        /* the submitting loop, while submitted */
    lull_pool *pool;        /* non-NULL from submit until done runs */
    lull_work *next;        /* the pool's queue (under the pool's lock) */
    lull_work *prev;
    int status;  /* fn's return value or -ECANCELED, handed to done */
    bool queued; /* waiting in the pool's queue (under the pool's lock) */
};

typedef struct lull_pool_options { /* all zero = defaults */
    unsigned threads;    /* pool threads, started by lull_pool_new; 0 = 4 */
    unsigned max_queued; /* waiting items before submit returns -EAGAIN;
                            0 = 1024 */
    const char *name;    /* thread name (first 15 bytes); NULL = "lull-pool" */
} lull_pool_options;

typedef struct lull_pool_stats {
    uint64_t submitted; /* accepted by lull_work_submit */
    uint64_t completed; /* ran, and the completion handed to its loop */
    uint64_t cancelled; /* never ran: lull_work_cancel or lull_pool_close */
    uint64_t rejected;  /* refused with -EAGAIN: the queue was full */
    uint64_t wakeups;   /* returns of a pool thread from its sleep */
    unsigned threads;   /* threads started */
    unsigned idle;      /* ... asleep now */
    unsigned queued;    /* items waiting now */
    unsigned running;   /* items running now */
} lull_pool_stats;

/* Creates a pool and starts its threads (allocates; not a hot path). opts
 * may be NULL. A pool does not survive fork(): a child must not use, close
 * or free one made before the fork, the default pool included (POOL.md). */
LULL_EXTERN int lull_pool_new(lull_pool **out, const lull_pool_options *opts);
/* Thread-safe, never blocks. Refuses new work (-ESHUTDOWN) and cancels the
 * waiting work: each done runs on its loop with -ECANCELED. Work already
 * running finishes and completes normally. */
LULL_EXTERN void lull_pool_close(lull_pool *pool);
/* Closes the pool, waits for running work to finish and its threads to
 * exit, and frees it. Not from a pool thread (-EDEADLK), not on the default
 * pool (-EBUSY), not while another thread may still submit to it. The done
 * functions of the last items still run on their loops afterwards. */
LULL_EXTERN int lull_pool_free(lull_pool *pool);
/* Thread-safe. The process's default pool, created on first use with the
 * thread count in LULL_POOL_THREADS (1 to 1024) or 4; it lives until exit. */
LULL_EXTERN int lull_pool_default(lull_pool **out);
/* Thread-safe. Makes `pool` the default before anything asked for one
 * (-EBUSY afterwards); lull owns it from then on. */
LULL_EXTERN int lull_pool_set_default(lull_pool *pool);
/* Thread-safe: a snapshot of the pool's counters. */
LULL_EXTERN void lull_pool_get_stats(lull_pool *pool, lull_pool_stats *out);

/* Prepares a work item; call again only while it is not submitted. */
LULL_EXTERN void lull_work_init(lull_work *work, lull_work_fn fn,
                                lull_work_done_fn done);
/* Loop thread of `loop`; thread-safe towards the pool (loops may share one).
 * Queues fn for a pool thread; done then runs on `loop`, which stays alive
 * (a loop reference) until it has. -EBUSY while work is still submitted,
 * -EAGAIN when the queue is full, -ESHUTDOWN once the pool is closed; done
 * never runs for a refused submit. No allocation. */
LULL_EXTERN int lull_work_submit(lull_loop *loop, lull_pool *pool,
                                 lull_work *work);
/* Loop thread. Cancels work that has not started: 0, and done runs in a
 * later task with -ECANCELED. -EBUSY once it runs or ran (done still comes),
 * -EINVAL when it is not submitted. */
LULL_EXTERN int lull_work_cancel(lull_work *work);
/* Submitted and its done function not yet run. */
LULL_EXTERN bool lull_work_busy(const lull_work *work);

/* ----------------------------------------------- pool: file helpers */

/* One-shot file operations on a pool: the request is caller-owned, cb runs
 * on the loop with the result (a non-negative value or a negative errno;
 * -ECANCELED when cancelled). Paths and buffers stay the caller's and must
 * stay valid until cb runs. */
typedef struct lull_fs lull_fs;
typedef void (*lull_fs_fn)(lull_fs *req, int64_t result);

struct lull_fs {
    lull_work work; /* the operation, on the pool */
    lull_fs_fn cb;
    int op;           /* which operation (src/fs.c) */
    int fd;           /* read, close */
    int flags;        /* open */
    unsigned mode;    /* open */
    const char *path; /* open */
    void *buf;        /* read: filled with up to len bytes */
    size_t len;
    uint64_t offset; /* read: file offset */
    int64_t result;  /* what cb receives */
};

/* Result: the new fd (opened with O_CLOEXEC added). */
LULL_EXTERN int lull_fs_open(lull_loop *loop, lull_pool *pool, lull_fs *req,
                             const char *path, int flags, unsigned mode,
                             lull_fs_fn cb);
/* Result: 0. */
LULL_EXTERN int lull_fs_close(lull_loop *loop, lull_pool *pool, lull_fs *req,
                              int fd, lull_fs_fn cb);
/* Reads up to len bytes at offset (fewer only at end of file). Result: the
 * bytes read. */
LULL_EXTERN int lull_fs_read(lull_loop *loop, lull_pool *pool, lull_fs *req,
                             int fd, void *buf, size_t len, uint64_t offset,
                             lull_fs_fn cb);
/* lull_work_cancel for a file request. */
LULL_EXTERN int lull_fs_cancel(lull_fs *req);

/* A journal: appends to one file, written and made durable with fdatasync
 * on a pool, batched. Appends made while no batch is in flight leave
 * together in the next task; appends made while one is in flight leave
 * together when it completes; each batch is one pwritev run and one
 * fdatasync. Completions run in append order. A write or sync error is
 * sticky: the failed batch, everything queued behind it and every later
 * append fail with it (the file's state is then unknown). Loop thread. */
typedef struct lull_journal lull_journal;
typedef struct lull_append lull_append;
typedef void (*lull_append_fn)(lull_append *req, int status);

struct lull_append {
    lull_append *next; /* the journal's queue (loop thread) */
    lull_append_fn cb; /* on the loop: 0 once the bytes are durable */
    const void *buf;   /* caller's, valid until cb runs */
    size_t len;
    uint64_t offset; /* where its bytes start in the file */
    uint64_t sync;   /* the fdatasync that made it durable, counted from 1
                        per journal: appends that shared one share it */
};

struct lull_journal {
    lull_work work;  /* one batch: its writes and its fdatasync */
    lull_task start; /* starts the next batch in a later task */
    lull_loop *loop;
    lull_pool *pool;
    int fd;            /* not owned: never closed */
    int error;         /* sticky: the first write or sync error */
    uint64_t end;      /* file offset the next batch starts at */
    uint64_t syncs;    /* batches made durable */
    lull_append *head; /* waiting for a batch, oldest first */
    lull_append *tail;
    lull_append *batch;   /* in flight; the pool thread reads it */
    uint64_t batch_start; /* its first byte's offset */
    uint64_t batch_bytes;
};

/* Writes start at the file's current end (lseek SEEK_END). */
LULL_EXTERN int lull_journal_init(lull_loop *loop, lull_pool *pool,
                                  lull_journal *j, int fd);
/* Queues len bytes: 0, or the sticky error (cb then never runs). req must
 * not be queued already. No allocation. */
LULL_EXTERN int lull_journal_append(lull_journal *j, lull_append *req,
                                    const void *buf, size_t len,
                                    lull_append_fn cb);
/* True while appends are queued or a batch is in flight: close the file
 * only once it is false. */
LULL_EXTERN bool lull_journal_busy(const lull_journal *j);

/* Name resolution on a pool: getaddrinfo(node, service, hints) on a pool
 * thread. node, service and hints stay the caller's until cb runs. cb gets
 * getaddrinfo's status (0 or an EAI_* code: gai_strerror describes it) or
 * -ECANCELED, and on success the list, which the caller frees with
 * freeaddrinfo. */
struct addrinfo;
typedef struct lull_lookup lull_lookup;
typedef void (*lull_lookup_fn)(lull_lookup *req, int status,
                               struct addrinfo *res);

struct lull_lookup {
    lull_work work;
    lull_lookup_fn cb;
    const char *node;
    const char *service;
    const struct addrinfo *hints;
    struct addrinfo *res; /* set on success, handed to cb */
    int sys_errno;        /* errno when status is EAI_SYSTEM */
};

LULL_EXTERN int lull_lookup_start(lull_loop *loop, lull_pool *pool,
                                  lull_lookup *req, const char *node,
                                  const char *service,
                                  const struct addrinfo *hints,
                                  lull_lookup_fn cb);

/* ---------------------------------------------- pool: one loop per core */

/* N loops on N threads (pinned when asked), started together and stopped
 * together (docs/POOL.md). Hand a task or an accepted connection to another
 * loop with lull_task_post_remote(lull_percore_loop(pc, i), task). */
typedef struct lull_percore lull_percore;
/* Runs on loop `index`'s own thread. */
typedef void (*lull_percore_fn)(lull_loop *loop, int index, void *arg);

typedef struct lull_percore_options { /* all zero = defaults */
    int loops;              /* 0 = one per CPU this process may run on */
    bool pin;               /* pin loop i's thread to the i-th allowed CPU
                               (wrapping around) */
    lull_loop_options loop; /* options of every loop */
    lull_percore_fn start;  /* before the loop runs: start its handles */
    lull_percore_fn stop;   /* at lull_percore_stop: stop and close them */
    void *arg;              /* passed to start and stop */
} lull_percore_options;

/* Starts the loops and returns once every start function has returned
 * (allocates; not a hot path). Each loop holds a reference until stop, so
 * it waits for remote posts with nothing else to do. */
LULL_EXTERN int lull_percore_start(lull_percore **out,
                                   const lull_percore_options *opts);
/* Thread-safe. */
LULL_EXTERN int lull_percore_count(const lull_percore *pc);
LULL_EXTERN lull_loop *lull_percore_loop(const lull_percore *pc, int index);
/* Thread-safe: the loops in turn (round robin), for spreading hand-offs. */
LULL_EXTERN lull_loop *lull_percore_next(lull_percore *pc);
/* Thread-safe: true once lull_percore_stop has begun, before any stop
 * function runs (false for NULL). A hand-off that finds it true closes what
 * it carries instead of starting it: its loop's stop function may already
 * have run. */
LULL_EXTERN bool lull_percore_stopping(const lull_percore *pc);
/* Runs each stop function on its loop, lets each loop finish what is left
 * (work in flight, timers) until it is no longer alive, and runs every
 * hand-off the loops post meanwhile on its target loop's thread, also one
 * that lands after that loop's stop function (see lull_percore_stopping);
 * then joins the threads and frees the loops and pc. Other threads must
 * have made their last post to the loops before this call. Not from a loop
 * of pc (-EDEADLK). -EBUSY if a loop still held handles at the end (that
 * loop is not freed). */
LULL_EXTERN int lull_percore_stop(lull_percore *pc);

#ifdef __cplusplus
}
#endif
#endif /* LULL_H */
