/* lull — a C11 event loop for Linux that is quiet when idle, nearly free per
 * turn, and fair under load.
 *
 * One header, one section per module. Every handle is a caller-owned struct,
 * and the calls made per operation never allocate: posting and cancelling
 * tasks (remote posts too), arming and stopping timers, raising notifiers,
 * pump passes, lull_endpoint_send of frames you own, stream reads and
 * writes, pool submissions and completions (tests/test_alloc.c counts
 * them). lull allocates only in: the _new and _start calls of loops, pools
 * and per-core sets; lull_loop_name (once per name); lull_endpoint_send_copy
 * (one block per frame, by design) and lull_stream_send_fds (one per call);
 * a stream's set-up (its read buffer) and a framed stream's buffer growing
 * for a longer frame than it has seen; a pump's init (its wake-audit row,
 * once); a udp socket's first lull_udp_recv_start (its receive buffers); a
 * loop's fs event watches (the inotify instance, a table of watches);
 * lull_fs_scandir (its batch and DIR), lull_dial_start (its lookup and
 * address list) and lull_lookup_start (getaddrinfo's list, yours to free); the
 * reaper of lull_process_detach; TLS (OpenSSL); and tables when they reach
 * a new high, amortized (each doubles): the loop's own (the timer heap, the
 * fd watcher table, the table of late repeating fires) and the process's
 * set of handles in use, which the set-up of fd watchers, listeners,
 * loopback pairs, pumps, processes, streams, servers, udp sockets and fs
 * event watches adds to (8 growths over the first 1,000 listeners; none when a
 * handle's memory is used again). Functions that can fail return 0 or a
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
 * Getting from a handle back to your own struct: every handle has a
 * `void *data` that is yours, as libuv's handles do: lull never reads it,
 * and writes it only in the call that sets the handle up (its _init,
 * lull_server_listen_*, lull_simserver_listen, lull_process_spawn), which
 * clears it with the rest: set it afterwards. A request with no set-up
 * call (lull_listener, lull_fs, lull_append, lull_lookup, lull_dial) keeps
 * what you put there. Zero a lull_fs, lull_lookup, lull_dial, lull_frame or
 * lull_datagram before its first use (`= {0}` or memset): lull reads its own
 * fields there to refuse one still in flight with -EBUSY, and would read
 * garbage (a lull_listener or lull_append needs nothing). A transport's handle
 * (lull_stream, lull_loopback, lull_simconn) uses its endpoint's: ep.data,
 * which every set-up keeps. The exception is lull_timer, which stays
 * at 48 bytes (a timer costs 64 with its heap slot, the target
 * docs/BENCHMARKS.md holds it to): embed it and use LULL_CONTAINER_OF(ptr,
 * type, member), which works for any handle.
 *
 * A handle stays where it is while lull knows it: from its set-up (a task,
 * timer or fd watcher: its post, arm or start) until it is yours again. lull
 * knows it by address, so a copy (memcpy, a struct moved) is not the handle:
 * where lull can tell, its calls are refused (a udp socket's -EINVAL) or
 * stop debug builds (a pump's); elsewhere they are undefined.
 *
 * Fields. Each struct shows first the fields you may read (and, where a
 * comment says so, write), each with its meaning. The fields inside the
 * unnamed struct marked "lull's own" are lull's bookkeeping: not part of
 * the API, never to be read or written. They are in the header only so that
 * handles can live in your memory; the struct's size is ABI, so they change
 * only with a new major version (NEWS.md).
 *
 * The long form of every contract is in docs/. */
#ifndef LULL_H
#define LULL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h> /* struct sockaddr_storage: UDP send requests */
#include <sys/types.h>  /* pid_t, uid_t, gid_t: lull_stream_peer_cred */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(LULL_BUILDING) && defined(__GNUC__)
#define LULL_EXTERN __attribute__((visibility("default")))
#else
#define LULL_EXTERN
#endif

/* ------------------------------------------------------------- version */

/* lull follows semantic versioning from 1.0 (NEWS.md): a minor release adds
 * to the API and ABI, a patch release changes neither; anything else is a
 * new major version, and a new soname (liblull.so.MAJOR). CI compares the
 * ABI with the committed baseline (abi/lull.abi). The build reads these
 * three lines. */
#define LULL_VERSION_MAJOR 1
#define LULL_VERSION_MINOR 0
#define LULL_VERSION_PATCH 0
/* MAJOR << 16 | MINOR << 8 | PATCH, to compare with lull_version(). */
#define LULL_VERSION_HEX                                                       \
    ((LULL_VERSION_MAJOR << 16) | (LULL_VERSION_MINOR << 8) |                  \
     LULL_VERSION_PATCH)

/* The version of the library linked at run time (which may be newer than
 * the header a program was built with): LULL_VERSION_HEX's encoding, and as
 * "MAJOR.MINOR.PATCH". Thread-safe. */
LULL_EXTERN unsigned lull_version(void);
LULL_EXTERN const char *lull_version_string(void);

/* ------------------------------------------------------------- errors */

/* Every call that can fail returns 0 (or a count) or a negative errno, and
 * callbacks get the same values: lull_strerror(-ECONNRESET) is "Connection
 * reset by peer", lull_err_name(-ECONNRESET) is "ECONNRESET". Either takes
 * err or -err; unknown values give "Unknown error" and "UNKNOWN", 0 gives
 * "Success" and "OK". Thread-safe, no allocation: the strings are static. */
LULL_EXTERN const char *lull_strerror(int err);
LULL_EXTERN const char *lull_err_name(int err);

#define LULL_CONTAINER_OF(ptr, type, member)                                   \
    ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/* ---------------------------------------------------------------- loop */

typedef struct lull_loop lull_loop;
typedef struct lull_task lull_task;
typedef struct lull_timer lull_timer;

/* Every enum has a type, so that a compiler warns (-Wenum-conversion, in
 * gcc's and clang's -Wextra) when a constant of one is passed where another
 * is expected: lull_loop_run(loop, LULL_CLOCK_VIRTUAL) does not compile
 * quietly. Each is int-sized, and lull checks the values it is given at run
 * time as well (-EINVAL). */
typedef enum lull_clock {
    LULL_CLOCK_MONOTONIC = 0, /* CLOCK_MONOTONIC, cached per iteration */
    LULL_CLOCK_VIRTUAL = 1    /* moves only by lull_loop_advance (C7) */
} lull_clock;
typedef enum lull_role {
    LULL_ROLE_SHARED = 0,   /* serves requests: 0.5 ms quantum */
    LULL_ROLE_DEDICATED = 1 /* one long job (a sender): 2 ms quantum */
} lull_role;
typedef enum lull_run_mode {
    LULL_RUN_DEFAULT = 0, /* while the loop is alive */
    LULL_RUN_ONCE = 1,    /* one iteration; it may block */
    LULL_RUN_NOWAIT = 2   /* one iteration without blocking */
} lull_run_mode;

/* lull_loop_options.flags */
#define LULL_LOOP_AUTO_ADVANCE                                                 \
    0x1u /* virtual clock: lull_loop_run jumps to the                          \
            next deadline when nothing can run */

typedef struct lull_loop_options { /* all zero = defaults */
    lull_clock clock;    /* LULL_CLOCK_MONOTONIC (0) or LULL_CLOCK_VIRTUAL */
    lull_role role;      /* LULL_ROLE_SHARED (0): 0.5 ms quantum;
                            LULL_ROLE_DEDICATED: 2 ms quantum */
    uint64_t quantum_ns; /* 0 = the role's default; under 1 us, every
                            callback ends the slice (I/O checked every
                            hop), and while no timer is armed the clock is
                            read every 64 hops, not every hop */
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
 * listeners, held references, undrained remote posts or streams, servers
 * and udp sockets not closed (paused or not receiving too) remain; the loop is
 * then unchanged and usable (lull_loop_print_live lists what remains). Never
 * returns while another thread whose post the loop took is still inside
 * lull_task_post_remote or lull_notifier_raise_remote (it waits for it to
 * leave). A post not ordered before this call (stop and join posting threads
 * first) is a use after free. */
LULL_EXTERN int lull_loop_free(lull_loop *loop);
/* Runs the loop. -EBUSY if already running (nested), -EINVAL on an unknown
 * mode. DEFAULT runs while the loop is alive; ONCE runs one iteration (it may
 * block; a wait a signal handler interrupts with nothing run waits again);
 * NOWAIT runs one iteration without blocking. If the kernel refuses
 * to wait (an error other than EINTR), the run ends and returns it. */
LULL_EXTERN int lull_loop_run(lull_loop *loop, lull_run_mode mode);
/* Ends the current run after the callback in progress; no-op outside a run.
 * From another thread, post a task that calls it. */
LULL_EXTERN void lull_loop_stop(lull_loop *loop);
/* The loop's notion of now in ns. On the real clock, the loop's last
 * CLOCK_MONOTONIC reading: each iteration (every 64th of a loop with
 * quantum_ns under 1 us and no timer armed), every few callbacks while busy
 * work runs, lull_loop_now_exact, a delayed timer arm made outside a
 * callback (set-up code) and the first delayed arm of a callback, which
 * read the clock. A further delayed arm of the same callback reads nothing
 * and leaves it as it was (lull_timer_start). On the virtual clock, the
 * virtual time. Reads no clock. */
LULL_EXTERN uint64_t lull_loop_now(lull_loop *loop);
/* Reads the loop's clock now (a syscall-free vDSO read on the real clock). */
LULL_EXTERN uint64_t lull_loop_now_exact(lull_loop *loop);
/* Makes the calling thread the loop's owner (see Threads, above): for a
 * thread that sets up or tears down a loop another thread ran. The hand-over
 * must be ordered (a join, a mutex): lull does not synchronise it. -EBUSY
 * while the loop runs, -EINVAL for NULL. */
LULL_EXTERN int lull_loop_adopt(lull_loop *loop);
/* Embedding: a program whose main loop is another's (GLib, Qt, a game
 * loop, another event library) drives lull with these two and
 * lull_loop_run(loop, LULL_RUN_NOWAIT). lull_loop_backend_fd gives an fd
 * that polls readable when an fd watcher, signal handle, process or remote
 * post has work (the loop's epoll instance); it stays the same until
 * lull_loop_fork, which makes a new one, and lull_loop_free closes it (stop
 * watching it first: its number may name another file after that).
 * lull_loop_backend_timeout sets *timeout_ns to how long the host may wait
 * before running lull again: 0 when work is ready now, the time to the
 * earliest timer, or -1 when only the fd can bring work. Call it just
 * before the host waits: from then on until the next run, a remote post
 * makes the fd readable (in a forked child too: after lull_loop_fork, the
 * new fd). Round up when the host's wait takes ms, or a timer runs early:
 * ms = (ns + 999999) / 1000000. Both -EINVAL for NULL; the timeout -EBUSY
 * inside a run (a callback). The fd is made at the first call: -EMFILE,
 * -ENFILE or -ENOMEM then, and a later call tries again. Loop thread only. */
LULL_EXTERN int lull_loop_backend_fd(lull_loop *loop);
LULL_EXTERN int lull_loop_backend_timeout(lull_loop *loop, int64_t *timeout_ns);
/* A reference for expected remote posts: keeps lull_loop_run alive. */
LULL_EXTERN void lull_loop_ref(lull_loop *loop);
LULL_EXTERN void lull_loop_unref(lull_loop *loop);
/* Is the loop alive: ready tasks, referenced timers or fd watchers, refs. */
LULL_EXTERN bool lull_loop_alive(lull_loop *loop);
/* Deterministic simulation (docs/SIMULATION.md): with `on`, each batch of
 * ready fd callbacks runs in an order drawn from `seed` instead of the
 * order epoll reported them in, which no contract fixes; the same seed
 * draws the same orders again. Nothing the contracts order moves: tasks
 * stay FIFO, timers run by deadline then arm order, an fd's callbacks stay
 * in order, and the steps of an iteration keep their places. Off (the
 * default) it costs one branch per poll. 0, or -EINVAL for NULL. */
LULL_EXTERN int lull_loop_shuffle(lull_loop *loop, bool on, uint64_t seed);
/* In a child after fork(), before it uses the loop: gives the child its own
 * kernel state (a new epoll set with every started watcher registered
 * again, a new wake-up fd, and a signalfd of its own for its signal
 * handles), so nothing the child does reaches the parent's loop; its fs
 * event watches (the parent's inotify instance) end with
 * LULL_FSEVENT_GONE in a later turn; its pool work in flight at the fork
 * comes back with -ECANCELED (fn runs, if at all, in the parent), but
 * work whose fn had returned comes back done, with fn's status.
 * A child that does not call it must not touch the loop (debug builds
 * abort at its first run, or start or stop of a watcher).
 * Call it on the thread that forked, which must own the loop: fork on the
 * loop's thread (inside a callback is fine), or while no thread runs it
 * (then lull_loop_adopt in the child makes the forking thread the owner).
 * A host's wait that lull_loop_backend_timeout announced before the fork,
 * with no run since, stays announced on the child's new fd: the child's
 * remote posts, and those the fork left queued, make that fd readable.
 * A thread inside lull_task_post_remote on this loop at the fork leaves
 * the child that post half-made (its task stays claimed: a post of it
 * there never runs until lull_task_init), and nothing in the child can
 * tell. A notifier whose listeners are on this loop is put right here:
 * its quiesce does not wait for a raiser the child lacks, and a raise
 * claimed but not pushed is made in the child.
 * 0, or a negative errno (-EMFILE, -ENOMEM ...): the parent's loop is
 * untouched, and the child calls it again (an fd freed, say) before it
 * uses the loop; -EINVAL (the loop untouched) in a process that has not
 * forked since the loop was made or last given its own state. */
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
    struct {                    /* lull's own */
        lull__node node;        /* ready-queue link, first: lull casts */
        lull_task *remote_next; /* cross-thread link, separate from `node` */
    };
    lull_loop *loop; /* the loop it was last queued on (NULL before the
                        first post): in the callback, the loop running it.
                        lull writes it on a post and never reads it. */
    void *data;      /* yours (lull_task_init clears it) */
};

/* Prepares a task; call again only while it is not pending (debug builds
 * assert when the loop reaches a task set up again while queued). -EINVAL
 * for a NULL task or fn. */
LULL_EXTERN int lull_task_init(lull_task *task, lull_task_fn fn);
/* Queues the task at the tail; a no-op if it is already pending on this
 * loop. Pending on another loop, it must not be posted here until it has
 * run or been cancelled there (debug builds assert; release builds leave
 * it where it is). The task never runs inside this call. No allocation. */
LULL_EXTERN void lull_task_post(lull_loop *loop, lull_task *task);
/* Unlinks a pending task: it will not run, even if due in this batch. On
 * the thread that owns the loop it is queued on (debug builds assert). */
LULL_EXTERN void lull_task_cancel(lull_task *task);
LULL_EXTERN bool lull_task_pending(const lull_task *task);

/* --------------------------------------------------------- timers: C3 */

/* Durations: every time in lull is in ns (uint64_t), so
 * lull_timer_start(&t, LULL_MS(250), 0) fires in 250 ms. x is an integer
 * (a fraction is cut: write LULL_US(1500), not LULL_MS(1.5)); it is
 * converted to uint64_t first, so LULL_S(5) does not overflow an int. */
#define LULL_S(x)  ((uint64_t)(x)*1000000000u)
#define LULL_MS(x) ((uint64_t)(x)*1000000u)
#define LULL_US(x) ((uint64_t)(x)*1000u)

typedef void (*lull_timer_fn)(lull_timer *timer);

struct lull_timer {      /* 48 bytes, plus one 16-byte heap slot while armed */
    struct {             /* lull's own */
        lull__node node; /* ready-queue link, first; aux: heap position */
    };
    lull_loop *loop; /* the owning loop */
    uint64_t repeat; /* the period in ns, 0 = one-shot (lull_timer_start) */
};

/* Prepares a stopped timer; call again only while it is not armed (stop
 * it first): an armed timer is linked into its loop (debug builds assert
 * when the loop reaches one set up again). -EINVAL for NULL. */
LULL_EXTERN int lull_timer_init(lull_loop *loop, lull_timer *timer,
                                lull_timer_fn fn);
/* Arms (or re-arms: new deadline, new arm order: timers due at one deadline
 * fire in the order of their arms, for arms fewer than 2^29 apart, a
 * serial number's range) the timer. delay 0 queues it
 * like a posted task; repeat > 0 fires every repeat ns, phase kept. On the
 * real clock the timer never fires before delay_ns has passed since this
 * call on CLOCK_MONOTONIC, and the delay counts from a reading taken here,
 * except for a further delayed arm of a callback that already made one:
 * that one reads nothing, and its delay counts from the loop's next
 * reading, taken when the callback returns or at its next
 * lull_loop_should_yield call, whichever comes first (so a batch of arms
 * pays one reading, and is late by at most the work the callback does
 * after the arm and before that point). Deadlines saturate at
 * UINT64_MAX (never, on the real clock); a repeating timer that fires at
 * UINT64_MAX has no next period and stops, and a delayed arm made with a
 * virtual clock at UINT64_MAX arms nothing. */
LULL_EXTERN void lull_timer_start(lull_timer *timer, uint64_t delay_ns,
                                  uint64_t repeat_ns);
LULL_EXTERN void lull_timer_stop(lull_timer *timer);
LULL_EXTERN bool lull_timer_active(const lull_timer *timer);
/* The absolute deadline (loop clock, ns) the timer is armed for, or 0 when
 * it is not waiting for one (stopped, or due and queued). A repeating timer
 * is armed for its next period before its callback runs, so inside the
 * callback this is already the next deadline. An arm still waiting for the
 * loop's next reading gets its deadline from a reading taken here. */
LULL_EXTERN uint64_t lull_timer_deadline(const lull_timer *timer);
/* Inside the timer's own callback, when it fires for a deadline: how many
 * periods this fire stands for (timerfd's expiration count). 1 when the loop
 * was on time; on the real clock, a repeating timer whose loop was too busy
 * to see some periods fires once for all of them, and this says how many
 * (the skipped ones plus this one). On the virtual clock lull_loop_advance
 * fires once per period crossed, so it is 1. 0 outside the timer's callback and
 * in a zero-delay turn (which has no deadline). */
LULL_EXTERN uint64_t lull_timer_overrun(const lull_timer *timer);
/* Inside a repeating timer's own callback, when it fires for a deadline:
 * the deadline this fire is for (with an overrun above 1, the first of the
 * periods it stands for), so that its lateness is lull_loop_now() minus
 * this. It equals lull_timer_deadline() - repeat * lull_timer_overrun()
 * read at the start of the callback, unless that next deadline saturated
 * at UINT64_MAX, and is kept even if the callback re-arms or stops the
 * timer. 0 outside the callback, for a one-shot timer and in a zero-delay
 * turn. */
LULL_EXTERN uint64_t lull_timer_fire_deadline(const lull_timer *timer);
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
    void *data;         /* yours (lull_io_init clears it) */
    lull_loop *loop;    /* the owning loop */
    int fd;             /* the watched descriptor (not owned: never closed) */
    int events;         /* the interest the kernel holds; 0 while stopped */
    struct {            /* lull's own */
        lull_io_fn fn;  /* called with the ready LULL_* bits */
        uint32_t flags; /* state bits (src/internal.h) */
        uint32_t slot;  /* its slot in the loop's table while started */
    };
};

/* Level-triggered: the callback runs every iteration while the fd is ready
 * and watched. -EINVAL for a NULL loop, watcher or fn, or a negative fd.
 * Only on a watcher that is not started (-EBUSY; debug builds assert). */
LULL_EXTERN int lull_io_init(lull_loop *loop, lull_io *io, int fd,
                             lull_io_fn fn);
/* Starts watching for events (LULL_READABLE | LULL_WRITABLE); on a started
 * watcher, replaces its interest (as uv_poll_start does: the way to add or
 * drop LULL_WRITABLE), and readiness already collected for this batch is
 * filtered by the new interest. 0, or: -EINVAL for a NULL or uninitialised
 * watcher, events 0 (use lull_io_stop) or unknown bits; -EEXIST if another
 * watcher holds the fd; -EBADF if the fd is not open (on a started watcher:
 * its fd was closed, whether or not the number names a file again); -EPERM for
 * fds epoll cannot watch (regular files, directories); -ENOMEM; or another
 * errno of epoll_ctl (-ENOSPC past fs.epoll.max_user_watches). On failure the
 * watcher is as it was: a started one keeps its old interest. */
LULL_EXTERN int lull_io_start(lull_io *io, int events);
/* Safe inside any callback: a stopped watcher is not called again, even for
 * readiness already collected in this batch or when its fd was closed
 * first (a new watcher on the reused number keeps its registration); its
 * memory is not touched after this returns. */
LULL_EXTERN void lull_io_stop(lull_io *io);
LULL_EXTERN void lull_io_ref(lull_io *io);
LULL_EXTERN void lull_io_unref(lull_io *io);

/* ------------------------------------------------------- cross-thread */

/* Thread-safe. Queues the task on the loop from any thread; a no-op while the
 * same task is already queued remotely (on any loop: it runs on the loop
 * that post named). Taken by a loop while pending on another loop, it
 * asserts there in debug builds, as lull_task_post. One eventfd write per
 * burst. The
 * loop does not touch the task after calling its function. The loop must
 * exist when the call begins; lull_loop_free waits for the call to end. */
LULL_EXTERN void lull_task_post_remote(lull_loop *loop, lull_task *task);

/* -------------------------------------------- notifier, listener: C4 */

typedef struct lull_notifier lull_notifier;
typedef struct lull_listener lull_listener;
typedef void (*lull_listener_fn)(lull_listener *l);

struct lull_listener {
    void *data;              /* yours (lull never touches it) */
    lull_notifier *notifier; /* the notifier it listens to; NULL while not
                                subscribed */
    lull_loop *loop;         /* the loop its callback runs on */
    struct {                 /* lull's own */
        lull_task task;      /* queued on raise; runs fn */
        lull_task *target;   /* what a raise posts: &task, or a pump's pass */
        lull_listener *next; /* subscription list, in subscription order */
        lull_listener *prev;
        lull_listener_fn fn;
        lull_listener *pump_next; /* a pump's listeners, closed with it */
        lull_listener *pump_prev;
        lull_listener *loop_next; /* the loop's subscribed listeners, for */
        lull_listener *loop_prev; /* lull_loop_walk (no allocation) */
    };
};

struct lull_notifier {
    void *data;      /* yours (lull_notifier_init clears it) */
    uint64_t raised; /* raises so far (lull_notifier_raise and the remote
                        ones taken by the loop), for tests and audits */
    struct {         /* lull's own */
        lull_listener *head; /* subscribers, oldest first */
        lull_listener *tail;
        lull_task remote; /* carries lull_notifier_raise_remote to the loop */
        unsigned raisers; /* threads inside lull_notifier_raise_remote
                             (atomic) */
    };
};

/* -EINVAL for NULL; -EBUSY while a listener is subscribed to n. A zeroed
 * notifier (static storage, calloc) needs no init: subscribing sets up what
 * carries its remote raises. */
LULL_EXTERN int lull_notifier_init(lull_notifier *n);
/* Subscribes l: each raise queues fn(l) in a later task, once however often
 * the notifier was raised before it ran. l needs no initialisation, but must
 * not be subscribed already: -EBUSY (debug builds assert); -EINVAL for NULL.
 * (lull_listener_stop reads l: call it only on a listener that was
 * subscribed once, or that you zeroed.) */
LULL_EXTERN int lull_listener_start(lull_loop *loop, lull_notifier *n,
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

typedef enum lull_pass_result {
    LULL_PASS_QUIET = 0, /* nothing left: no task, no timer */
    LULL_PASS_AGAIN = 1, /* stopped early on purpose: again in the next task */
    LULL_PASS_HELD = 2   /* something is held: retry after *retry_ns */
} lull_pass_result;

typedef struct lull_pump lull_pump;
/* A pass returns LULL_PASS_QUIET, LULL_PASS_AGAIN (next task) or
 * LULL_PASS_HELD with *retry_ns set (0 means AGAIN). */
typedef lull_pass_result (*lull_pass_fn)(lull_pump *pump, uint64_t *retry_ns);

struct lull_pump {
    void *data;           /* yours (lull_pump_init clears it) */
    lull_loop *loop;      /* the owning loop */
    uint64_t passes;      /* passes run */
    uint64_t empty;       /* passes that reported no delivery */
    uint64_t delivered;   /* items reported by lull_pump_delivered */
    struct {              /* lull's own */
        lull_task task;   /* the queued pass */
        lull_timer retry; /* armed only while something is held */
        lull_pass_fn pass;
        lull_listener *listeners; /* subscribed by lull_pump_listen */
        int source;               /* its row in the wake audit, -1 if none */
        bool closed;
        struct lull__pass_frame *frame; /* the pass running (pump.c) */
    };
};

/* 0; -EINVAL; -EBUSY for a pump in use (pass queued or running, retry
 * armed, a listener subscribed) or open on another loop; -ENOMEM. The
 * loop knows it until lull_pump_close. */
LULL_EXTERN int lull_pump_init(lull_loop *loop, lull_pump *pump,
                               lull_pass_fn pass);
/* Schedules one pass in a later task; wakes before it runs share it. A wake
 * while held cancels the retry timer: the pass re-decides. */
LULL_EXTERN void lull_pump_wake(lull_pump *pump);
/* Subscribes the pump to n through l: a raise queues the pass itself. The
 * rules and errors of lull_listener_start (-EINVAL also for a closed pump). */
LULL_EXTERN int lull_pump_listen(lull_pump *pump, lull_notifier *n,
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
/* Runs ready work with time frozen (on the real clock, timers that come due
 * during it wait for the next run), in rounds that each poll fds once
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
    uint64_t wakeups;        /* returns from a blocking wait in the kernel:
                                the four kinds below, or a wait that ended
                                early with nothing to do (a late FUTEX_WAKE) */
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
typedef enum lull_source_kind {
    LULL_SOURCE_TIMER = 1,  /* a timer's deadline woke the loop */
    LULL_SOURCE_IO = 2,     /* fd readiness woke the loop */
    LULL_SOURCE_REMOTE = 3, /* a cross-thread post woke the loop: its task,
                               or the listener a lull_notifier_raise_remote
                               reached */
    LULL_SOURCE_PUMP =
        4,                 /* a pump's passes, and the wakeups of the
                              lull_notifier_raise_remote raises that reached it */
    LULL_SOURCE_SIGNAL = 5 /* a signal interrupted the wait (one row) */
} lull_source_kind;

typedef struct lull_audit_entry {
    const char *name;      /* lull_loop_name, or "<kind> <address>": valid
                              until the loop next runs (a new source may
                              move the table it points into) or is freed;
                              copy it to keep it */
    lull_source_kind kind; /* LULL_SOURCE_* */
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
typedef enum lull_live_cause {
    LULL_LIVE_READY = 1,      /* queued to run: ready queue, due list or
                                 flush queue */
    LULL_LIVE_ARMED = 2,      /* a timer waiting for its deadline */
    LULL_LIVE_STARTED = 3,    /* a started fd watcher */
    LULL_LIVE_SUBSCRIBED = 4, /* a listener on a notifier */
    LULL_LIVE_REMOTE = 5      /* posted from another thread, not yet taken
                                 by the loop (a run or lull_loop_settle takes it) */
} lull_live_cause;
/* lull_live.kind: what `handle` points at. */
typedef enum lull_handle_kind {
    LULL_HANDLE_TASK = 1,     /* lull_task */
    LULL_HANDLE_TIMER = 2,    /* lull_timer */
    LULL_HANDLE_IO = 3,       /* lull_io */
    LULL_HANDLE_LISTENER = 4, /* lull_listener (a pump's too) */
    LULL_HANDLE_PUMP = 5,     /* lull_pump: its pass queued or its retry
                                 timer armed */
    LULL_HANDLE_NOTIFIER = 6  /* lull_notifier: a lull_notifier_raise_remote
                                 raise  on its way */
} lull_handle_kind;

typedef struct lull_live {
    lull_live_cause cause; /* LULL_LIVE_* */
    lull_handle_kind kind; /* LULL_HANDLE_* */
    const void *handle;    /* the handle, of the type `kind` names */
    lull_any_fn fn;        /* the callback it leads to: yours, also behind
                              lull's own forwarding (a listener's task, a
                              pump's pass or retry: the pass; a notifier
                              raise: its first listener's callback); NULL for
                              a raise of a notifier with no listener */
    const char *name;      /* lull_loop_name of fn, or NULL */
    bool ref;              /* keeps lull_loop_run going (lull_loop_alive) */
    uint64_t deadline;     /* ARMED: the absolute deadline; else 0 */
    int fd;                /* STARTED: the watched fd; else -1 */
} lull_live;

typedef void (*lull_walk_fn)(const lull_live *live, void *arg);
/* Calls fn once per entry, in this order: ready queue, due list, flush
 * queue (a stream's pending write), timer heap (not in deadline order), fd
 * watchers, listeners (newest first), remote posts (newest first). fn must not
 * start, stop, post or free anything on this loop. Returns the number of
 * entries, or -EINVAL. Loop thread. */
LULL_EXTERN int lull_loop_walk(lull_loop *loop, lull_walk_fn fn, void *arg);
/* Prints the walk, one line per entry, and the references held, to out
 * (uv_print_active_handles), and flushes it. Returns the number of
 * entries, -EINVAL, or the write's error (-EPIPE, -EAGAIN ...) when out
 * has failed. Loop thread. */
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

struct lull_frame { /* caller-owned; embed it and use LULL_CONTAINER_OF */
    /* Yours to set before a send (not while in flight): */
    const void *bytes;       /* the payload: read in place, never copied */
    size_t len;              /* bytes of payload; 0 is a valid frame */
    lull_release_fn release; /* may be NULL */
    bool in_flight;          /* read: accepted and not yet released */
    struct {                 /* lull's own */
        lull_frame *next;    /* the transport's queue link while in flight */
    };
};

/* A frame from the peer; bytes are valid during the call only. */
typedef void (*lull_frame_fn)(lull_endpoint *ep, const void *bytes, size_t len);
/* Queued bytes fell back below the high-water mark: writable again. A
 * stream whose write failed (the peer went) still pays a drain owed, once,
 * so a producer waiting for it learns: its next send returns -EPIPE. */
typedef void (*lull_drain_fn)(lull_endpoint *ep);
/* The endpoint's last callback, run exactly once for every endpoint a
 * transport set up (lull_loopback_pair, lull_server_accept,
 * lull_stream_open, a connect that returned 0), whoever closed it: the one
 * place to free or reuse the struct. `reason` is what this end passed to
 * lull_endpoint_close (then it runs in a later turn, never inside that
 * call); or what the peer passed to it (loopback: after every frame the
 * peer sent before closing; a socket carries no reason: its peer reads 0,
 * EOF); or the transport's failure, a negative errno. Every frame this
 * end sent has been released when it runs. */
typedef void (*lull_close_fn)(lull_endpoint *ep, int reason);

struct lull__frame_ops; /* what a transport implements (src/frame.h) */

struct lull_endpoint {
    /* Yours to read and write; lull never touches it, and a transport's
     * set-up keeps it: the way back from the endpoint to your own object
     * when the endpoint lives inside a transport's struct (a lull_stream,
     * a lull_loopback) and your protocol code sees only lull_endpoint *. */
    void *data;
    /* Read: */
    lull_frame_fn on_frame; /* lull_endpoint_set_callbacks */
    lull_drain_fn on_drain;
    lull_close_fn on_close;
    size_t queued;     /* bytes accepted and not yet delivered (or written;
                          a framed stream's or TLS connection's 4-byte
                          lengths included) */
    size_t high_water; /* writable while queued < high_water */
    size_t max_frame;  /* a longer frame is refused with -EMSGSIZE */
    size_t max_queued; /* a send past it is refused with -ENOBUFS and closes
                          the endpoint with -ENOBUFS; SIZE_MAX: no bound */
    struct {           /* lull's own */
        const struct lull__frame_ops *ops; /* NULL until a transport set up */
        uint32_t flags;                    /* state bits (src/frame.h) */
    };
};

/* 16 MiB: far above any message lull's users exchange, low enough that a
 * corrupt length cannot make a stream reserve gigabytes. */
#define LULL_FRAME_MAX_DEFAULT ((size_t)16 << 20)
/* 64 KiB: a socket's default send buffer order of magnitude; enough for
 * many small frames in flight before a producer is asked to wait. With
 * max_queued set below twice that, an unset mark is half of max_queued.
 * A mark set above a max_queued set is refused (-EINVAL) by every
 * transport's set-up: writable would hold until a send closed the end. */
#define LULL_HIGH_WATER_DEFAULT ((size_t)64 << 10)
/* No bound on queued bytes unless max_queued is set: as with a socket's
 * writes in libuv, a producer that ignores lull_endpoint_writable grows the
 * queue; set max_queued to make that a close instead (STREAMS.md). */
#define LULL_MAX_QUEUED_NONE SIZE_MAX

/* Sets the callbacks (any may be NULL). Call it before the loop can deliver
 * anything: right after the transport set the endpoint up, which clears
 * callbacks set before it. With on_close
 * NULL nothing is told of the close, and lull_endpoint_close hands the
 * struct back at once. */
LULL_EXTERN void lull_endpoint_set_callbacks(lull_endpoint *ep,
                                             lull_frame_fn on_frame,
                                             lull_drain_fn on_drain,
                                             lull_close_fn on_close);
/* Hands the frame over: no copy, no allocation; frame->release runs when
 * the transport is done with it. 0, or: -EINVAL (NULL, or bytes NULL with
 * len > 0), -EPIPE (this end or its peer closed), -EMSGSIZE (len >
 * max_frame), -EBUSY (that frame is still in flight), -ENOBUFS (queued +
 * len would pass max_queued). On an error the frame stays the caller's;
 * only -ENOBUFS changes anything else: the endpoint closes, with -ENOBUFS
 * for its close callback in a later turn, and refuses sends from then on.
 * Past the high-water mark a send is still accepted (up to max_queued):
 * lull_endpoint_writable says when to stop. */
LULL_EXTERN int lull_endpoint_send(lull_endpoint *ep, lull_frame *frame);
/* Borrows and copies the bytes (allocates one block per frame); the same
 * errors, and -ENOMEM. */
LULL_EXTERN int lull_endpoint_send_copy(lull_endpoint *ep, const void *bytes,
                                        size_t len);
/* Open, peer open (a stream: write side not shut or failed), and fewer
 * than high_water bytes queued. */
LULL_EXTERN bool lull_endpoint_writable(const lull_endpoint *ep);
/* Closes this end: its queued incoming frames are released undelivered and
 * it gets no frame or drain callback any more; frames it already sent are
 * still delivered (loopback), then the peer's close callback gets
 * `reason`. This end's own close callback, if set, runs in a later turn,
 * never inside this call, with `reason`, once the frames it sent are
 * released; the struct must stay valid until it has (lull_loop_free is
 * -EBUSY meanwhile). Without one, the struct is the caller's again when
 * this returns. A close of this end before the peer's close reached it
 * replaces that: one close callback, this reason. Idempotent: 0, or
 * -EINVAL for NULL or an endpoint no transport set up. */
LULL_EXTERN int lull_endpoint_close(lull_endpoint *ep, int reason);
/* Closed by lull_endpoint_close, or the peer's close was delivered. */
LULL_EXTERN bool lull_endpoint_closed(const lull_endpoint *ep);
/* Reading paused and resumed through the endpoint, whatever the transport
 * (on a stream, lull_stream_read_stop / _read_start; a simulated
 * connection, lull_simconn_*): while paused, no frame and no close from
 * the peer reach ep; the peer's frames wait, counted in its `queued`, so
 * its lull_endpoint_writable turns false at its high-water mark; after a
 * resume they arrive in a later turn. Idempotent. 0, or: -EINVAL (NULL, or
 * an endpoint no transport set up), -ENOTCONN once closed. */
LULL_EXTERN int lull_endpoint_read_stop(lull_endpoint *ep);
LULL_EXTERN int lull_endpoint_read_start(lull_endpoint *ep);
/* Half-close through the endpoint (lull_stream_shutdown on a stream,
 * lull_simconn_shutdown on a simulated connection): sends fail with -EPIPE
 * from now on, frames already sent are still delivered, and then the peer
 * hears the end: a stream's peer reads EOF (its on_end, or its close with
 * 0); a loopback peer closes itself with reason 0, as a stream without an
 * on_end does, so this end, which reads on, gets the frames the peer sent
 * before and then its close callback with 0. Idempotent (0 also once the
 * peer closed); the errors of lull_endpoint_read_stop. */
LULL_EXTERN int lull_endpoint_shutdown(lull_endpoint *ep);

/* ------------------------------------------------------------- loopback */

/* Two connected endpoints on one loop: the honest in-process transport
 * (C6). Frames queue at the receiving end and are delivered one per turn,
 * in send order, by a posted task (or, for comparisons, a timer), so
 * nothing arrives inside the sender's call and each frame's callback
 * returns before the next frame is delivered. The hand-over path never
 * allocates. */

typedef enum lull_deliver {
    LULL_DELIVER_TASK = 0, /* one posted task per frame */
    LULL_DELIVER_TIMER = 1 /* a timer armed for delay_ns per frame */
} lull_deliver;

typedef struct lull_loopback_options { /* all zero = defaults */
    size_t max_frame;                  /* 0 = LULL_FRAME_MAX_DEFAULT */
    size_t high_water;                 /* 0 = LULL_HIGH_WATER_DEFAULT */
    size_t max_queued;                 /* 0 = no bound (lull_endpoint) */
    lull_deliver deliver; /* LULL_DELIVER_TASK (0): one posted task per frame;
                          LULL_DELIVER_TIMER: a timer armed for delay_ns */
    uint64_t delay_ns;    /* timer delivery: 0 is a zero-delay turn (by C3 the
                             same order and cost as a task); more is a link
                             that holds each frame that long */
} lull_loopback_options;

typedef struct lull_loopback lull_loopback;
struct lull_loopback {
    lull_endpoint ep;          /* the frame interface: give &ep to your code */
    lull_loop *loop;           /* the owning loop */
    uint64_t delivered;        /* frames delivered to this end */
    uint64_t turns;            /* delivery turns claimed: posts or timer arms */
    struct {                   /* lull's own */
        lull_task task;        /* the delivery turn (LULL_DELIVER_TASK) */
        lull_timer timer;      /* the delivery turn (LULL_DELIVER_TIMER) */
        lull_loopback *peer;   /* the other end; NULL once either closed */
        lull_frame *head;      /* the peer's frames not yet delivered, */
        lull_frame *tail;      /* oldest first */
        uint64_t delay_ns;     /* timer delivery's delay */
        lull_deliver deliver;  /* LULL_DELIVER_* */
        int reason;            /* the close callback's reason, while pending */
        bool close_pending;    /* a close callback is owed: the peer's close
                                  (after its frames), this end's own close
                                  (after the frames it sent), or a send past
                                  max_queued (-ENOBUFS) */
        bool failing;          /* ... that last: close this end in its turn */
        bool paused;           /* lull_endpoint_read_stop: no delivery */
        bool eof;              /* the peer shut down: once the inbox is
                                  empty, this end closes with 0 */
        lull_loopback *closer; /* the closed peer whose close callback waits
                                  until this end's inbox is empty */
        lull_frame *discard;   /* a failing end's inbox, released in its
                                  turn (never inside a send) */
        bool *closed_flag;     /* unused, kept for the layout */
    };
};

/* Connects a and b on loop (opts may be NULL): what &a->ep sends arrives at
 * b's frame callback and the other way round; each end gets its close
 * callback once, whichever closed. -EINVAL for NULL, a == b or an unknown
 * delivery; -EBUSY for an end still paired or owed its close callback (it
 * is free again in that callback); -ENOMEM. */
LULL_EXTERN int lull_loopback_pair(lull_loop *loop, lull_loopback *a,
                                   lull_loopback *b,
                                   const lull_loopback_options *opts);
/* A delivery turn (a frame, or the peer's close) is queued for this end,
 * or its own close callback is still owed. */
LULL_EXTERN bool lull_loopback_pending(const lull_loopback *lb);

/* -------------------------------------------------------------- streams */

/* Streams (C6): TCP (IPv4 and IPv6, numeric addresses) and Unix sockets,
 * pipes and other byte-stream fds (lull_stream_open, lull_stream_open_pair),
 * each an endpoint of the frame interface above. By default a
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
 * ever (MSG_NOSIGNAL on sockets; on a pipe, SIGPIPE blocked in the loop's
 * thread around the write and taken back): a dead peer is a close reason.
 *
 * on_close runs once per stream, whoever closed it (none after
 * lull_stream_detach), as its last callback, after every frame was
 * released: the one place to free the stream. It gets 0 for the peer's
 * orderly EOF, else -ECONNRESET, -EPIPE, -ETIMEDOUT (idle_timeout_ns),
 * -EMSGSIZE, -EPROTO, -EMFILE or -ETOOMANYREFS (passed fds:
 * lull_stream_take_fds) or another errno, at once; or the reason given to
 * lull_endpoint_close, in a later turn. That closes now:
 * one last write attempt, then what is still queued is released
 * unwritten and the socket is closed (the peer reads EOF); the struct stays
 * the library's until on_close ran, or, without one, is the caller's when
 * the call returns, inside any of the stream's callbacks too. A failed
 * write ends the writing only (sends fail with -EPIPE; the peer reads
 * EOF): reading goes on to the peer's EOF, and on_close then gets the
 * write's error, the first failure.
 * lull_stream_shutdown is the graceful way: the queue is written, then the
 * write side is shut. A server (lull_server_close) has no close callback:
 * it is the caller's when that returns. docs/STREAMS.md has the long
 * form. */

#define LULL_STREAM_RAW   0x1u /* bytes, not length-prefixed frames */
#define LULL_STREAM_NAGLE 0x2u /* TCP: leave Nagle's algorithm on */
/* A Unix stream socket: receive the fds a peer passes with its frames
 * (lull_stream_take_fds; its reads then use recvmsg). Without it the kernel
 * closes any that arrive and reads use recv, ~250 ns cheaper a call here.
 * -ENOTSUP where no fd can pass (TCP, a pipe; TLS options refuse it with
 * -EINVAL). Sending fds needs no flag. */
#define LULL_STREAM_FDS 0x4u

typedef struct lull_stream lull_stream;
typedef struct lull_server lull_server;
/* Connected (status 0), or failed: -ECONNREFUSED, -ETIMEDOUT, -ENOENT ...
 * A failed stream is closed: its close callback runs right after this one,
 * in the same turn, with the same status. Free the struct or connect again
 * there, not here (debug builds assert a stream set up again before its
 * close callback). */
typedef void (*lull_connect_fn)(lull_stream *s, int status);
/* The peer shut its write side; the stream stays open for writing. */
typedef void (*lull_end_fn)(lull_stream *s);
/* A connection is waiting: take it with lull_server_accept inside this
 * call, or it is closed when the call returns. Also run when accepting
 * pauses or stops: lull_server_accept then says why. */
typedef void (*lull_connection_fn)(lull_server *srv);

typedef struct lull_stream_options { /* all zero = defaults */
    size_t max_frame;                /* 0 = LULL_FRAME_MAX_DEFAULT; framed,
                                        at most UINT32_MAX (a 4-byte length) */
    size_t high_water;               /* 0 = LULL_HIGH_WATER_DEFAULT */
    size_t read_size;                /* the stream's read buffer: 0 = 64 KiB;
                                        framed, it grows to hold a frame,
                                        and back once empty from past 16x */
    uint64_t connect_timeout_ns;     /* 0 = the kernel's (minutes) */
    uint64_t idle_timeout_ns;        /* nothing read or written this long:
                                        close with -ETIMEDOUT; 0 = never.
                                        Not counted while reading is
                                        paused and nothing is queued */
    size_t max_queued;               /* 0 = no bound (lull_endpoint) */
    unsigned flags;                  /* LULL_STREAM_* */
} lull_stream_options;

typedef struct lull__stream_guard lull__stream_guard;

struct lull_stream {
    lull_endpoint ep;       /* the frame interface: give &ep to your code */
    lull_loop *loop;        /* the owning loop */
    uint64_t writes;        /* send, sendmsg or writev calls */
    uint64_t bytes_written; /* bytes they wrote */
    uint64_t reads;         /* reads that returned data */
    uint64_t bytes_read;    /* bytes they returned */
    struct {                /* lull's own */
        lull_io io;         /* the fd (owned: closed with the stream) */
        lull_io wio;        /* lull_stream_open_pair: the write fd (owned);
                               unused otherwise */
        lull_task flush;    /* queued at the loop's flush points while
                               writes wait */
        lull_task event;    /* later turn: connect result, buffered frames
                               after a resume, a failure found inside
                               lull_endpoint_send, the close callback */
        lull_timer timer;   /* connect and idle timeouts */
        lull_connect_fn on_connect;
        lull_end_fn on_end; /* NULL: the peer's EOF closes the stream */
        lull_frame *head;   /* queued writes, oldest first */
        lull_frame *tail;
        size_t head_done;      /* bytes of head (its length included) written */
        lull_frame *done;      /* written inside lull_endpoint_send, released */
        lull_frame *done_tail; /* at the next flush point */
        unsigned char *rbuf;   /* read buffer: owned, or the caller's */
        size_t rcap;           /* its size */
        size_t rstart;         /* unconsumed bytes are [rstart, rend) */
        size_t rend;
        lull__stream_guard *guard;    /* innermost callback of ours running */
        uint64_t idle_ns;             /* idle_timeout_ns */
        uint64_t active_ns;           /* loop time of the last read or write */
        unsigned flags;               /* LULL_STREAM_* */
        uint32_t state;               /* state bits (src/stream.c) */
        int error;                    /* a failure the event task delivers */
        int pid;                      /* the process that set it up */
        struct lull__stream_fds *fds; /* descriptors passed either way over
                                         a Unix socket; NULL until then */
    };
};

struct lull_server {
    void *data;           /* yours (lull_server_listen_* clears it) */
    lull_loop *loop;      /* the owning loop */
    uint64_t accepted;    /* connections handed to on_connection */
    uint64_t paused;      /* times accepting paused: out of fds, the
                             kernel short of memory, or a refusal retried */
    struct {              /* lull's own */
        lull_io io;       /* the listening socket (owned) */
        lull_timer retry; /* resumes accepting after a pause */
        lull_connection_fn on_connection;
        lull__stream_guard *guard; /* on_connection running, if any */
        int family;                /* AF_INET, AF_INET6 or AF_UNIX */
        int pending; /* the accepted fd lull_server_accept takes; -1 */
        int failed;  /* accept's errno once it failed for good; 0; or minus
                        the retries in a row after an error that may pass */
        uint64_t retry_ns; /* the pause before accepting again */
    };
};

/* Listens on host (numeric IPv4 or IPv6, "fe80::1%eth0" with a zone;
 * NULL = "127.0.0.1") and port (0 = any: see lull_server_port). backlog
 * <= 0 means SOMAXCONN. Running out of fds (EMFILE, ENFILE) pauses accepting
 * for 100 ms, leaving the waiting connections in the kernel's backlog; nothing
 * spins. fn runs at each pause, and lull_server_accept returns its errno.
 * -EBUSY (here and in lull_server_open) for a server not closed since its
 * set-up, on any loop. */
LULL_EXTERN int lull_server_listen_tcp(lull_loop *loop, lull_server *srv,
                                       const char *host, int port, int backlog,
                                       lull_connection_fn fn);
/* path: a filesystem path (removed by lull only when the listen fails), or
 * "@name" for Linux's abstract namespace. */
LULL_EXTERN int lull_server_listen_unix(lull_loop *loop, lull_server *srv,
                                        const char *path, int backlog,
                                        lull_connection_fn fn);
/* Adopts a listening stream socket (TCP or Unix), one passed by another
 * process (lull_stream_take_fds) say: accepts as the listen calls do.
 * Sets O_NONBLOCK on it, which its other holders share. Owns fd from here
 * on, also on failure; -EINVAL for anything but a listening socket. */
LULL_EXTERN int lull_server_open(lull_loop *loop, lull_server *srv, int fd,
                                 lull_connection_fn fn);
/* The bound TCP port, or a negative errno. */
LULL_EXTERN int lull_server_port(const lull_server *srv);
/* Inside on_connection: makes s the waiting connection, reading at once;
 * it gets its close callback once, whoever closes it. -ENOENT when nothing
 * is waiting. When accept fails for good (the listening socket was shut
 * down: -EINVAL; accept4 refused by seccomp: -EPERM), on_connection runs once
 * more, this returns that error, and the server stops accepting: close it. */
LULL_EXTERN int lull_server_accept(lull_server *srv, lull_stream *s,
                                   const lull_stream_options *opts);
/* Stops listening and closes the socket; safe in any callback. No callback
 * follows: the struct is the caller's when this returns. */
LULL_EXTERN void lull_server_close(lull_server *srv);

/* Non-blocking connect; fn runs in a later turn, never inside this call
 * (then, if it failed, the close callback). Frames sent before it runs are
 * queued. Argument errors return at once, and no callback follows. */
LULL_EXTERN int lull_stream_connect_tcp(lull_loop *loop, lull_stream *s,
                                        const char *host, int port,
                                        const lull_stream_options *opts,
                                        lull_connect_fn fn);
LULL_EXTERN int lull_stream_connect_unix(lull_loop *loop, lull_stream *s,
                                         const char *path,
                                         const lull_stream_options *opts,
                                         lull_connect_fn fn);
/* Adopts a byte-stream fd: a connected stream socket (one end of a
 * socketpair), a pipe or FIFO end, or a character device such as a tty.
 * Its shared O_NONBLOCK is left alone for a socket (MSG_DONTWAIT) and a
 * pipe on Linux 6.5+ (RWF_NOWAIT); a tty, a named FIFO or an older
 * kernel's pipe gets it set while the stream has the fd, cleared again
 * when the stream closes it (STREAMS.md, "The fd's flags"). The stream
 * owns fd from here on, also on failure.
 * Reading starts at once; on success the stream gets its close callback
 * once, whoever closes it. An fd opened for reading only refuses sends
 * (-EPIPE) and closes at EOF (reason 0); one opened for writing only never
 * reads, and a pipe's write end closes with -EPIPE when its reader goes,
 * also while nothing is queued. -EINVAL for anything else (a datagram
 * socket, a listening socket, a regular file, a number that is not an
 * open fd). */
LULL_EXTERN int lull_stream_open(lull_loop *loop, lull_stream *s, int fd,
                                 const lull_stream_options *opts);
/* One stream over two fds: it reads rfd and writes wfd (a pipe each way,
 * say: a child's stdout and stdin). Owns both from here on, also on
 * failure. lull_stream_shutdown closes wfd once the queue is written (a
 * socket shut down first, also held by another fd), so its reader sees
 * EOF; reading goes on. rfd == wfd is lull_stream_open.
 * -EINVAL when rfd cannot be read or wfd written. */
LULL_EXTERN int lull_stream_open_pair(lull_loop *loop, lull_stream *s, int rfd,
                                      int wfd, const lull_stream_options *opts);
/* Pause and resume reading (backpressure on the peer). Frames already
 * buffered wait too; on resume they arrive in a later turn. */
LULL_EXTERN int lull_stream_read_stop(lull_stream *s);
LULL_EXTERN int lull_stream_read_start(lull_stream *s);
/* Reads into the caller's buffer from now on (it must outlive the stream).
 * Framed, it bounds the frame: a longer one closes with -EMSGSIZE. Call it
 * only between reads (not inside on_frame); -EBUSY while bytes are
 * buffered. */
LULL_EXTERN int lull_stream_read_into(lull_stream *s, void *buf, size_t cap);
/* Keeps the stream open for writing after the peer's EOF; fn hears of it.
 * After this end's own lull_stream_shutdown the peer's EOF closes the
 * stream with 0 instead, and fn does not run. */
LULL_EXTERN void lull_stream_set_on_end(lull_stream *s, lull_end_fn fn);
/* Half-close: once everything queued is written, shut the write side (the
 * peer reads EOF); sends fail with -EPIPE from now on. Reading goes on. */
LULL_EXTERN int lull_stream_shutdown(lull_stream *s);
/* The fd it reads (a pair's rfd), or -1 for NULL, never set up or closed. */
LULL_EXTERN int lull_stream_fd(const lull_stream *s);
/* Takes the socket (or other fd) out of an open stream and returns it, the
 * caller's to close (Tokio's into_std): to lull_tls_open over a dialed
 * stream, say. Unwatched, no timer, O_NONBLOCK as the stream got it (set
 * on a socket lull connected or accepted); a shutdown or the peer's EOF
 * carries over. Frames it wrote are released inside the call; then no
 * callback of the stream's runs again, and the struct is the caller's, at once,
 * also inside those callbacks (on_frame's bytes stay valid until it returns).
 * -EBUSY while a write is queued or read bytes wait undelivered (nothing is
 * lost: the stream goes on), -ENOTCONN while connecting, once closed or
 * with a failure on its way to on_close, -ENOTSUP for a pair, -EINVAL. */
LULL_EXTERN int lull_stream_detach(lull_stream *s);
/* Sends frame as lull_endpoint_send does, with nfds descriptors (1 to 253,
 * SCM_MAX_FD) attached over a Unix stream socket (SCM_RIGHTS). They are
 * dup'ed: close yours when this returns; lull closes its copies once the
 * frame's first byte is written, or when a close discards it. One
 * allocation per call. 0, or, checked in this order: -EINVAL (nfds out of
 * range, a NULL, bytes NULL with len > 0, a raw frame of 0 bytes), -EPIPE,
 * -ENOTSUP (not a Unix socket: TCP, a pipe), -EMSGSIZE, -EBUSY (as
 * lull_endpoint_send), then -EBADF (a number in fds that is not open),
 * -EMFILE (no fd left for the copies), -ENOMEM, then -ENOBUFS (as
 * lull_endpoint_send: the stream closes). */
LULL_EXTERN int lull_stream_send_fds(lull_stream *s, lull_frame *frame,
                                     const int *fds, int nfds);
/* Inside on_frame of a stream opened with LULL_STREAM_FDS: moves up to max
 * of the descriptors that came with this frame into fds (received with
 * O_CLOEXEC) and returns how many (0: none, not inside on_frame, or a
 * stream without the flag, whose fds the kernel closed on arrival). They are
 * the caller's to close; the ones not taken when on_frame returns are closed by
 * lull, as are those of a frame a close discards. Framed, they come with the
 * frame they were sent with; raw, with the read whose bytes hold the first byte
 * of that send. Descriptors the kernel dropped on the way (the receiver out of
 * fds: RLIMIT_NOFILE) close the stream with -EMFILE, after the frames before
 * theirs (raw: after the read that brought them); more than 253 passed with
 * one frame (a peer that is not lull's, holding the reader's fds) close it
 * with -ETOOMANYREFS. -EINVAL for NULL or max < 0. */
LULL_EXTERN int lull_stream_take_fds(lull_stream *s, int *fds, int max);
/* The peer's process, user and group when it connected (SO_PEERCRED; a
 * socketpair's: its creator). Any out pointer may be NULL. 0, -EINVAL,
 * -ENOTCONN once closed, -ENOTSUP for anything but a Unix socket. */
LULL_EXTERN int lull_stream_peer_cred(const lull_stream *s, pid_t *pid,
                                      uid_t *uid, gid_t *gid);
/* Writes now what the kernel takes of bytes, without queueing (raw streams
 * only): how many (>= 0, perhaps fewer than len; 0 for len 0), or -EAGAIN
 * (nothing fits now, or still connecting), -EBUSY (queued writes are pending:
 * writing around them would reorder the bytes), -EPIPE (closed, shut or failed
 * for writing), -ENOTSUP (a framed stream), -EINVAL (also len > SSIZE_MAX). A
 * failure of the write itself ends the write side as a failed queued write
 * does. */
LULL_EXTERN int lull_stream_try_write(lull_stream *s, const void *bytes,
                                      size_t len);

/* ------------------------------------------------------------------ UDP */

/* Datagram sockets with the loop's discipline (docs/API.md, "UDP"): sends
 * queued within a slice leave together in one sendmmsg at the loop's next flush
 * point, in send order (several destinations in one call), and a readable
 * socket is drained with recvmmsg, a bounded number of batches per
 * iteration, so a flood cannot hold the loop. Nothing is allocated per
 * datagram: a send takes a caller-owned request, received datagrams are
 * read into the handle's buffer (allocated once, at lull_udp_recv_start).
 * Datagrams are lossy by nature: a send past max_queued is refused, the
 * handle stays open. IPv4 and IPv6 (numeric addresses, as streams take). */

typedef struct lull_udp lull_udp;
typedef struct lull_datagram lull_datagram;

/* A datagram arrived: bytes and len are valid during the call only; from is
 * the sender (family AF_UNSPEC for one without an address: an unnamed
 * Unix socket). flags: LULL_UDP_TRUNCATED when it was longer than
 * max_datagram (bytes holds its first max_datagram bytes). status < 0
 * instead reports an error the socket carries (-ECONNREFUSED: an ICMP port
 * unreachable answered an earlier send of a connected socket), with bytes
 * NULL; reading goes on, but not after -EBADF or -ESHUTDOWN (the socket's
 * read side was shut down). */
typedef void (*lull_udp_recv_fn)(lull_udp *udp, int status, const void *bytes,
                                 size_t len, const struct sockaddr *from,
                                 unsigned flags);
/* The datagram was handed to the kernel (0), or was not: a negative errno
 * (-EMSGSIZE, -ECONNREFUSED, -ENETUNREACH ..., -ENOBUFS when the device's
 * queue was full, -ECANCELED when the handle closed first). Runs in a later
 * turn than lull_udp_send, never inside it; the request and its bytes are the
 * caller's again. */
typedef void (*lull_udp_send_fn)(lull_datagram *req, int status);
/* The handle's last callback, in a later turn than lull_udp_close, after
 * every pending send's callback: the one place to free or reuse it. */
typedef void (*lull_udp_close_fn)(lull_udp *udp);

#define LULL_UDP_TRUNCATED 0x1u /* lull_udp_recv_fn flags */

/* lull_udp_bind flags */
#define LULL_UDP_REUSEADDR 0x1u /* SO_REUSEADDR */
#define LULL_UDP_REUSEPORT                                                     \
    0x2u /* SO_REUSEPORT: the kernel spreads datagrams                         \
            over the sockets bound to the port */
#define LULL_UDP_IPV6ONLY                                                      \
    0x4u /* an IPv6 socket takes no IPv4 datagrams                             \
            (default: dual-stack) */

typedef struct lull_udp_options { /* all zero = defaults */
    size_t max_datagram; /* a receive slot's size; 0 = 65536, the largest
                            datagram UDP carries. A longer one is truncated
                            (LULL_UDP_TRUNCATED). */
    unsigned recv_batch; /* datagrams per recvmmsg; 0 = 16, at most 1024 */
    size_t max_queued;   /* bytes queued for sending before a send is
                            refused with -ENOBUFS; 0 = no bound */
    size_t gso_segment;  /* > 0: a send longer than this leaves as datagrams
                            of this size (the last may be shorter), as one
                            message with UDP_SEGMENT where the kernel takes
                            it, else one datagram each */
    bool gro;            /* receive with UDP_GRO where the kernel has it:
                            datagrams it coalesced are split again, so the
                            callback still sees one datagram a call. Only
                            with full-size slots (max_datagram 0): the
                            kernel fills a slot with up to 64 KiB */
} lull_udp_options;

struct lull_datagram { /* caller-owned, one per datagram in flight */
    void *data;        /* yours; lull never touches it */
    const void *bytes; /* what lull_udp_send was given */
    size_t len;
    struct {                 /* lull's own */
        lull_datagram *next; /* the handle's queue while in flight */
        lull_udp_send_fn cb;
        lull_udp *udp;
        struct sockaddr_storage to; /* the destination; family 0 on a
                                       connected socket */
        int status; /* the result its callback gets (queued: the bytes a
                       send lull cuts by hand has sent) */
    };
};

struct lull_udp {
    void *data;          /* yours; lull never touches it */
    lull_loop *loop;     /* the owning loop */
    size_t queued;       /* bytes of datagrams waiting to be sent */
    uint64_t sent;       /* datagrams handed to the kernel */
    uint64_t send_calls; /* sendmmsg calls that sent them */
    uint64_t received;   /* datagrams delivered to the callback */
    uint64_t recv_calls; /* recvmmsg calls that returned them */
    struct {             /* lull's own */
        lull_io io;      /* the socket (owned: closed with the handle) */
        lull_task flush; /* at the loop's flush point while sends wait */
        lull_task event; /* later turn: send results, the close callback */
        lull_udp_recv_fn on_recv;
        lull_udp_close_fn on_close;
        lull_datagram *head; /* sends not yet handed to the kernel */
        lull_datagram *tail;
        lull_datagram *done; /* sends whose callback is owed */
        lull_datagram *done_tail;
        unsigned char *rbuf; /* recv_batch slots of max_datagram bytes */
        void *rmeta;         /* recvmmsg's headers for the slots */
        size_t max_datagram;
        size_t max_queued;
        size_t gso_segment;
        unsigned recv_batch;
        unsigned state;     /* src/udp.c */
        unsigned rnext;     /* the last batch's next slot to deliver */
        unsigned rgot;      /* ... and its slots: a recv_stop inside the
                               callback keeps the rest for the next
                               lull_udp_recv_start */
        size_t roff;        /* delivered bytes of slot rnext (GRO) */
        bool *closed_guard; /* set by a close inside our callback */
    };
};

/* Prepares the handle; no socket yet (bind, connect or the first send
 * makes one). opts may be NULL. -EINVAL for NULL or recv_batch > 1024;
 * -EBUSY into a handle still live (until its close callback has run), on
 * this loop or another (there, also one set up and idle); -ENOMEM. One
 * left open without a socket at lull_loop_free may be set up again here
 * or closed; a bind, connect, open, send or recv_start refuses it
 * (-EINVAL), the options and lull_udp_local_port say -EBADF. */
LULL_EXTERN int lull_udp_init(lull_loop *loop, lull_udp *udp,
                              const lull_udp_options *opts);
/* Binds to host (numeric; NULL = "127.0.0.1", "::" for every address of
 * both families) and port (0 = any: lull_udp_local_port). -EINVAL,
 * -EADDRINUSE, another errno of socket or bind; -EBUSY if already bound.
 * A failed bind (or connect) keeps no socket it made. */
LULL_EXTERN int lull_udp_bind(lull_udp *udp, const char *host, int port,
                              unsigned flags);
/* Adopts a datagram socket (made non-blocking; closed with the handle);
 * an IP one not bound yet may be bound with lull_udp_bind. -EINVAL for a
 * socket that is not SOCK_DGRAM, -EBUSY if it has one. */
LULL_EXTERN int lull_udp_open(lull_udp *udp, int fd);
/* Connects: sends then go to host:port with to == NULL, only datagrams
 * from it are received, and ICMP errors reach the callbacks. host NULL
 * disconnects. Binds to any port first if unbound. */
LULL_EXTERN int lull_udp_connect(lull_udp *udp, const char *host, int port);
/* The bound port, or a negative errno (-EBADF before a socket exists). */
LULL_EXTERN int lull_udp_local_port(const lull_udp *udp);
/* Queues one datagram of len bytes (read in place: they must stay valid
 * until cb runs) to `to` (NULL on a connected socket). 0, or: -EINVAL
 * (NULL handle or request, bytes NULL with len > 0, to NULL on an
 * unconnected socket, a family the socket does not take), -EISCONN (to
 * given on a connected socket), -EMSGSIZE (len > 65507, 65527 to IPv6
 * not IPv4-mapped, or past gso_segment's 64 segments), -EBUSY (the
 * request is in flight), -ENOBUFS (queued + len would pass max_queued),
 * -EPIPE (closed); on a handle with no socket yet, the errno of the
 * socket it makes (-EMFILE, -ENFILE: nothing is kept). cb may be NULL. */
LULL_EXTERN int lull_udp_send(lull_udp *udp, lull_datagram *req,
                              const void *bytes, size_t len,
                              const struct sockaddr *to, lull_udp_send_fn cb);
/* Starts (or, with another fn, redirects) receiving. Allocates the
 * receive buffer on first use. -EINVAL, -EBADF without a socket,
 * -ENOMEM. */
LULL_EXTERN int lull_udp_recv_start(lull_udp *udp, lull_udp_recv_fn fn);
/* No recv callback after this. Datagrams already read from the socket in
 * this batch are kept, not dropped: the next lull_udp_recv_start delivers
 * them first, in a later turn. Idempotent. */
LULL_EXTERN int lull_udp_recv_stop(lull_udp *udp);
/* Closes the socket; queued sends complete with -ECANCELED, then fn runs,
 * all in later turns. Safe in any callback of the handle. Idempotent:
 * -EINVAL for NULL. */
LULL_EXTERN int lull_udp_close(lull_udp *udp, lull_udp_close_fn fn);
/* Socket options, each 0 or a negative errno (-EBADF without a socket). */
LULL_EXTERN int lull_udp_set_broadcast(lull_udp *udp, bool on);
LULL_EXTERN int lull_udp_set_ttl(lull_udp *udp, int ttl); /* 1..255 */
LULL_EXTERN int lull_udp_set_multicast_ttl(lull_udp *udp, int ttl);
LULL_EXTERN int lull_udp_set_multicast_loop(lull_udp *udp, bool on);
/* iface: the numeric address of the interface (IPv4) or its name (IPv6);
 * NULL = the kernel's choice. */
LULL_EXTERN int lull_udp_set_multicast_interface(lull_udp *udp,
                                                 const char *iface);
/* Joins (join true) or leaves the multicast group (numeric) on iface. */
LULL_EXTERN int lull_udp_set_membership(lull_udp *udp, const char *group,
                                        const char *iface, bool join);

/* ------------------------------------------------ file-system events */

/* Watches a file or a directory (inotify; docs/API.md "File-system
 * events"). A loop's watches share one inotify fd, read in bounded batches;
 * the events of one batch are coalesced per watch and name, so a burst of
 * writes to one file is one MODIFIED in that turn, and a rename between
 * two watched directories is matched by inotify's cookie. An idle watch
 * makes no wakeup. */

typedef struct lull_fsevent lull_fsevent;

#define LULL_FSEVENT_CREATED  0x001u /* a name appeared */
#define LULL_FSEVENT_MODIFIED 0x002u /* contents written */
#define LULL_FSEVENT_ATTRIB   0x004u /* metadata: mode, owner, times, links */
#define LULL_FSEVENT_DELETED  0x008u /* a name was removed */
#define LULL_FSEVENT_MOVED_FROM                                                \
    0x010u /* a name left: other_name is where it                              \
              went, if into a watched directory */
#define LULL_FSEVENT_MOVED_TO                                                  \
    0x020u /* a name arrived: other_name is the                                \
              name it had, if it came from a                                   \
              watched directory */
#define LULL_FSEVENT_MOVED_SELF                                                \
    0x040u /* the watched path itself was moved;                               \
              the watch follows it */
#define LULL_FSEVENT_GONE                                                      \
    0x080u /* the watched path was deleted (or its                             \
              file system unmounted): the watch                                \
              has ended, no callback follows */
#define LULL_FSEVENT_OVERFLOW                                                  \
    0x100u /* the kernel's queue overflowed and                                \
              events were lost: rescan (with GONE:                             \
              the lost events ended this watch) */

/* events: LULL_FSEVENT_* bits seen for `name` in this turn (CREATED |
 * DELETED: it came and went; a name made again after it left, or moved
 * away after it was moved in, gets a call of its own after that one).
 * name: the entry in a watched directory, or NULL for the watched path
 * itself (and for OVERFLOW). Both strings are valid during the call only. */
typedef void (*lull_fsevent_fn)(lull_fsevent *w, unsigned events,
                                const char *name, const char *other_name);

struct lull_fsevent {
    void *data;      /* yours; lull never touches it */
    lull_loop *loop; /* the owning loop */
    struct {         /* lull's own */
        lull_fsevent_fn fn;
        lull_fsevent *next; /* the loop's started watches */
        int wd;             /* inotify's watch descriptor; -1 stopped */
        bool ref;
    };
};

/* -EINVAL for NULL; -EBUSY for a started watch, on any loop. */
LULL_EXTERN int lull_fsevent_init(lull_loop *loop, lull_fsevent *w);
/* Starts watching path (a file or a directory; a symbolic link is
 * followed). 0, or -EINVAL (NULL, empty, fn NULL), -EBUSY (started),
 * the errno of inotify_add_watch (-ENOENT, -EACCES, -ENOSPC: the
 * watch limit, fs.inotify.max_user_watches) or of inotify_init1
 * (-EMFILE: fs.inotify.max_user_instances), -ENOMEM. Two watches of one path on
 * a loop: -EEXIST (inotify gives both one descriptor). */
LULL_EXTERN int lull_fsevent_start(lull_fsevent *w, const char *path,
                                   lull_fsevent_fn fn);
/* No callback after this, also for events already read. Safe inside any
 * callback. Idempotent. */
LULL_EXTERN int lull_fsevent_stop(lull_fsevent *w);
/* An unreferenced watch does not keep lull_loop_run alive. */
LULL_EXTERN void lull_fsevent_ref(lull_fsevent *w);
LULL_EXTERN void lull_fsevent_unref(lull_fsevent *w);

/* ------------------------------------------------------------ terminals */

/* A terminal as a handle (docs/API.md "Terminals"): its modes, set and
 * always given back, its window size, and its bytes as a raw lull_stream.
 * lull_tty_init opens the terminal anew by its name (ttyname_r, then
 * O_RDWR | O_NOCTTY | O_NONBLOCK), so the non-blocking flag lull needs is
 * on a file description of lull's own, never on the one the program's fd
 * shares with the shell. An fd with no name to open (a pty's master side,
 * a terminal from another mount namespace) is used through a dup instead:
 * the shared description is then non-blocking while a tty on it is open,
 * and the last lull_tty_close on it, or lull_tty_reset_mode, gives it the
 * flags it had before the first. Window changes arrive as SIGWINCH: watch
 * it with a lull_signal and call lull_tty_get_winsize in its callback
 * (examples/tty_raw.c). */

typedef struct lull_tty lull_tty;

/* Modes. NORMAL: the one the terminal had at init (before another
 * lull_tty took it out of NORMAL). RAW: keys as typed, no echo, no line
 * editing, ^C and ^Z are bytes; output still turns "\n" into "\r\n".
 * IO: cfmakeraw, output unprocessed too. */
#define LULL_TTY_MODE_NORMAL 0
#define LULL_TTY_MODE_RAW    1
#define LULL_TTY_MODE_IO     2

struct lull_tty {
    lull_stream stream; /* the terminal's bytes, raw: hand &stream.ep to
                           your code and set its callbacks after init */
    void *data;         /* yours (lull_tty_init clears it) */
    lull_loop *loop;    /* the owning loop */
    int fd;             /* the fd given to lull_tty_init: the caller's, never
                           closed, its file status flags never changed when
                           the terminal could be opened anew */
    int mode;           /* LULL_TTY_MODE_* in force */
    struct {            /* lull's own */
        int ctl;        /* lull's description of the terminal: modes and
                           size; -1 once closed */
        int slot;       /* its entry in lull_tty_reset_mode's table; -1 */
        int fl_saved;   /* no name: the shared description's flags to give
                           back; -1 when opened anew */
        uint32_t saved[16]; /* the struct termios at init (src/tty.c
                               asserts it fits) */
    };
};

/* Opens the terminal behind fd (kept open by the caller while the tty
 * lives) and its stream, reading at once (for fd 1, fd 2 or a write-only
 * fd: once lull_endpoint_read_start asks). opts as for lull_stream_open,
 * always raw. 0, or -EINVAL (NULL, fd < 0), -ENOTTY (not a terminal),
 * -EBADF, an error of open or of lull_stream_open (-EMFILE); nothing is
 * left open on failure. Set a tty up again only once its stream's
 * on_close ran, as for a stream: before, -EBUSY. */
LULL_EXTERN int lull_tty_init(lull_loop *loop, lull_tty *t, int fd,
                              const lull_stream_options *opts);
/* LULL_TTY_MODE_*. The first mode other than NORMAL enters the tty in
 * lull_tty_reset_mode's table (-ENOSPC past 64 such ttys at once). 0, or
 * -EINVAL, -EBADF once closed, tcsetattr's errno (-EIO: hung up). */
LULL_EXTERN int lull_tty_set_mode(lull_tty *t, int mode);
/* The window's size in character cells. 0, -EINVAL, -EBADF once closed,
 * or the ioctl's errno. */
LULL_EXTERN int lull_tty_get_winsize(lull_tty *t, int *cols, int *rows);
/* Gives the terminal its mode (and, with no name, its flags) back (a
 * fork()ed child only a mode it set from NORMAL, not the parent's), closes
 * lull's description of it and the stream. The stream's on_close, if it
 * has not run yet, runs in a later turn, the tty's last callback: free the
 * tty there, or when this returns if it has run or none is set. Call it
 * also after the stream ended by itself. Idempotent. 0, -EINVAL, or the
 * restore's error (-EIO: the terminal is gone); closed either way. */
LULL_EXTERN int lull_tty_close(lull_tty *t);
/* Async-signal-safe and thread-safe: gives every tty lull set to a mode
 * other than NORMAL its mode from init back (tcsetattr of a saved copy),
 * and a shared description its flags, as lull_tty_close would (a fork()ed
 * child leaves its parent's). Call it at exit (atexit) and in the
 * handlers of fatal signals (SIGSEGV, SIGABRT ...), where the loop cannot
 * run. The handles are not told: it is for a program that is ending. */
LULL_EXTERN void lull_tty_reset_mode(void);
/* ------------------------------------------------------------------ TLS */

/* TLS 1.2 and 1.3 (OpenSSL 3) as an endpoint of the frame interface: a
 * protocol written against lull_endpoint runs unchanged over it. A
 * lull_tls carries its records on a lull_stream of its own (raw), so
 * connect, accept, timeouts and the flush-point batching are the
 * stream's: the frames sent within a slice are encrypted together at the
 * loop's flush point, small ones coalesced into full records, and leave in
 * one write; a frame is released once its records were written, as on a
 * stream. Plaintext is framed (a 4-byte length) or raw, as the stream
 * options say. Sends made before the handshake completes wait for it.
 *
 * Verification is on by default: a client checks the server's chain
 * against ca_file / ca_dir / ca_pem (none given: the system store) and the
 * name in options.server_name (also sent as SNI). Tickets resume sessions
 * (a client context keeps the last one, for the next connection to the
 * same name). TLS 1.3 key updates are answered; TLS 1.2 renegotiation is
 * refused.
 *
 * on_close gets, besides the stream's reasons: 0 for the peer's
 * close_notify; -ECONNABORTED when the handshake failed; -EKEYREJECTED
 * when a certificate was refused (by this end or, as its alert says, the
 * peer); -EPROTO for a protocol error after the handshake, or an EOF
 * without close_notify (a truncation); -ETIMEDOUT when the handshake
 * outlived handshake_timeout_ns. lull_tls_error_string says why in
 * OpenSSL's words. lull_endpoint_close sends close_notify first.
 *
 * Built without OpenSSL, every call returns -ENOTSUP (or NULL / false),
 * so a program compiles the same either way: lull_tls_available says. */

typedef struct lull_tls lull_tls;
typedef struct lull_tls_ctx lull_tls_ctx; /* opaque; thread-safe */
/* The handshake completed: the peer's name, ALPN and resumption can be
 * read. Runs once, before any frame arrives. */
typedef void (*lull_tls_handshake_fn)(lull_tls *tls);

typedef struct lull_tls_config { /* all zero = a verifying client */
    bool server;
    /* This end's certificate chain and key: files, or PEM text in memory
     * (a NUL-terminated string). A server needs one; a client's is sent
     * to a server that asks (mutual TLS). */
    const char *cert_file, *key_file;
    const char *cert_pem, *key_pem;
    /* Whom to trust (a client: servers; a server: clients). None given:
     * the system store. */
    const char *ca_file, *ca_dir, *ca_pem;
    bool verify_client;        /* server: ask for a client certificate and
                                  verify one that is sent */
    bool require_client_cert;  /* server: ... and refuse a client without */
    bool insecure_skip_verify; /* client: accept ANY server certificate
                                  and name; for tests only */
    const char *alpn;          /* "h2,http/1.1": offered (client) or
                                  accepted in this order (server) */
    int min_version;           /* 0x0303 TLS 1.2 (0: the default), 0x0304 */
    int max_version;           /* 0: the newest */
    bool no_tickets;           /* no session resumption */
} lull_tls_config;

typedef struct lull_tls_options {       /* all zero = defaults */
    lull_stream_options stream;         /* framing and limits of the plaintext,
                                           the socket's timeouts */
    const char *server_name;            /* client: SNI, and the name (or IP)
                                           the certificate must carry;
                                           "[::1]" and "name." as a host
                                           (the address, the name), at
                                           most 255 bytes (-EINVAL) */
    uint64_t handshake_timeout_ns;      /* 0 = 10 s; from the connection
                                           (a connect's own wait is
                                           stream.connect_timeout_ns) */
    lull_tls_handshake_fn on_handshake; /* may be NULL */
} lull_tls_options;

struct lull_tls {
    lull_endpoint ep;         /* the frame interface: give &ep to your code */
    lull_loop *loop;          /* the owning loop */
    uint64_t flushes;         /* flush points that encrypted frames */
    uint64_t cipher_bytes;    /* record bytes handed to the socket's stream */
    struct {                  /* lull's own */
        lull_stream stream;   /* the socket the records travel on */
        lull_task flush;      /* at the loop's flush point: encrypt */
        lull_task event;      /* later turn: resume, failure, close */
        lull_timer timer;     /* the handshake timeout */
        lull_tls_ctx *ctx;    /* a reference, dropped at the close */
        void *ssl;            /* OpenSSL's SSL * */
        void *guard;          /* innermost callback of ours running */
        lull_frame *head;     /* plaintext frames not yet encrypted, */
        lull_frame *tail;     /* oldest first */
        void *out;            /* ciphertext chunks: filling and spare */
        unsigned char *pbuf;  /* decrypted bytes, framed: parsed here */
        size_t pcap;          /* its size */
        size_t pstart, pend;  /* unconsumed bytes are [pstart, pend) */
        unsigned char *stage; /* small frames gathered into a record */
        unsigned char *saved; /* ciphertext read while paused */
        size_t saved_cap;     /* its size */
        size_t saved_len;     /* ... and what it holds */
        const unsigned char *in; /* ciphertext OpenSSL is reading */
        size_t in_len;           /* ... and what is left of it */
        lull_tls_handshake_fn on_handshake;
        uint32_t state; /* state bits (src/tls.c) */
        int error;      /* the reason the event task delivers */
        char why[120];  /* lull_tls_error_string */
    };
};

/* True when lull was built with OpenSSL. */
LULL_EXTERN bool lull_tls_available(void);
/* A context for many connections (on any loops): its certificates, trust
 * and options. 0, or -EINVAL (a bad config, an unreadable certificate or
 * key, a key that does not match), -ENOENT (a file missing), -ENOMEM,
 * -ENOTSUP. Free it once no connection made with it is open. */
LULL_EXTERN int lull_tls_ctx_new(const lull_tls_config *cfg,
                                 lull_tls_ctx **out);
LULL_EXTERN void lull_tls_ctx_free(lull_tls_ctx *ctx);
/* Inside on_connection: the waiting connection becomes a TLS server end
 * (ctx a server's). The handshake starts at once. */
LULL_EXTERN int lull_tls_accept(lull_server *srv, lull_tls *tls,
                                lull_tls_ctx *ctx,
                                const lull_tls_options *opts);
/* A client: connects, then shakes hands. Without insecure_skip_verify,
 * a non-empty opts->server_name is required (-EINVAL). */
LULL_EXTERN int lull_tls_connect_tcp(lull_loop *loop, lull_tls *tls,
                                     lull_tls_ctx *ctx, const char *host,
                                     int port, const lull_tls_options *opts);
LULL_EXTERN int lull_tls_connect_unix(lull_loop *loop, lull_tls *tls,
                                      lull_tls_ctx *ctx, const char *path,
                                      const lull_tls_options *opts);
/* Over a connected stream socket (owned from here on, also on failure),
 * in the role ctx has. */
LULL_EXTERN int lull_tls_open(lull_loop *loop, lull_tls *tls, lull_tls_ctx *ctx,
                              int fd, const lull_tls_options *opts);
/* After the handshake: the session was resumed; the SNI name the client
 * sent (NULL if none); the ALPN protocol chosen, copied into buf
 * (its length, or -ENOENT when none was). */
LULL_EXTERN bool lull_tls_resumed(const lull_tls *tls);
LULL_EXTERN const char *lull_tls_server_name(const lull_tls *tls);
LULL_EXTERN int lull_tls_alpn(const lull_tls *tls, char *buf, size_t cap);
/* TLS 1.3: new keys for both directions, sent at the next flush point.
 * -EINVAL before the handshake or on TLS 1.2; -EPIPE after a shutdown. */
LULL_EXTERN int lull_tls_key_update(lull_tls *tls);
/* Why the connection failed, in OpenSSL's words ("certificate verify
 * failed: certificate has expired"); "" if it did not. Valid until the
 * struct is set up again. */
LULL_EXTERN const char *lull_tls_error_string(const lull_tls *tls);

/* ----------------------------------------------------------- simulation */

/* A simulated network for deterministic tests (docs/SIMULATION.md): named
 * addresses, listen, accept and connect, and connections that are
 * endpoints of the frame interface, so protocol code written against
 * lull_endpoint runs over it unchanged, many peers in one process on one
 * virtual-clock loop. Each connection carries faults drawn from the
 * network's seed: per direction a delay with jitter, a bandwidth, a
 * window of bytes in flight and a slow reader; partitions that hold
 * everything for a span and then resume or break the connection; resets
 * at a random byte; and refused connects. On a connection that does not
 * break, a stream's guarantees hold: bytes in order, none lost, none
 * duplicated. The same seed gives the same run: every event, the same
 * byte counts at the same virtual instants, a line each in the trace.
 *
 * Delivery: one event per turn, never inside the call that caused it. The
 * network keeps its own schedule and one lull timer armed for its
 * earliest event; events due at the same instant on different connections
 * run in an order drawn from the seed (what no contract fixes), and each
 * connection's bytes stay in order. A connection made with
 * LULL_SIMCONN_RAW hands on_frame the bytes in chunks of any size, cut
 * where the seed says (a raw stream's partial reads); without it, whole
 * frames (a framed stream's). A frame counts in its sender's ep.queued
 * until it was read whole, as a stream's until it was written whole: the
 * bytes read of a frame still being read stay counted. on_close runs once
 * per connection end, whoever closed it, as its last callback, after every
 * frame it sent was released: as for streams, 0 for the peer's close or
 * shutdown (EOF), -ECONNRESET for a reset, -ETIMEDOUT for a partition that
 * broke the connection, or the reason given to lull_endpoint_close, in a
 * later turn.
 * A close writes what the window takes and drops the rest, as a socket's
 * close does; lull_simconn_shutdown sends everything first. The loop must
 * run on the virtual clock. */

typedef struct lull_simnet lull_simnet;
typedef struct lull_simconn lull_simconn;
typedef struct lull_simserver lull_simserver;

/* Faults, drawn from the network's seed. All zero: a perfect network (no
 * delay, no bandwidth limit, a 64 KiB window, nothing breaks). A share is
 * in thousandths (over 1000: -EINVAL). Times and counts saturate: a
 * delay, span or byte count of UINT64_MAX means never. The first five
 * fields are per direction (an accept may give its own for what its end
 * sends); the rest are the connection's, from its connect. */
typedef struct lull_simfaults {
    uint64_t delay_ns;           /* one-way delay of every segment */
    uint64_t jitter_ns;          /* plus 0 to this per segment (order kept) */
    uint64_t bandwidth;          /* bytes per virtual second each way; 0 =
                                    no limit */
    size_t window;               /* bytes in flight each way (sent, not yet
                                    read); 0 = 64 KiB */
    uint32_t slow_permille;      /* directions whose reader is slow: it */
    uint64_t slow_read_ns;       /* ... waits up to this between reads */
    uint64_t partition_every_ns; /* a connection is partitioned about this
                                    often (mean); 0 = never */
    uint64_t partition_ns;       /* a partition lasts up to this */
    uint32_t break_permille;     /* partitions that end by breaking the
                                    connection (-ETIMEDOUT) */
    uint32_t reset_permille;     /* connections reset (-ECONNRESET) at a
                                    random byte of one direction, */
    uint64_t reset_within;       /* ... among its first this many; 0 =
                                    64 KiB */
    uint32_t refuse_permille;    /* connects to a listening address that are
                                    refused (-ECONNREFUSED) */
} lull_simfaults;

typedef void (*lull_simnet_fn)(lull_simnet *net, void *arg);

typedef struct lull_simnet_options { /* all zero = defaults */
    uint64_t seed;                   /* every choice the network makes */
    lull_simfaults faults;   /* each connection's, unless its connect names
                                its own */
    FILE *trace;             /* a line per event; NULL = none (the trace's
                                hash is kept either way) */
    lull_simnet_fn on_event; /* after every event the network runs: the
                                place for invariant checks; may be NULL */
    void *arg;               /* for on_event */
    uint32_t flags;          /* LULL_SIMNET_* */
} lull_simnet_options;

/* Test only, a canary for a harness's fault accounting: partitions begin
 * (and are counted) but hold nothing. A harness that checks each drawn
 * fault had its effect (lull_simnet_stats.held) must find it. */
#define LULL_SIMNET_HOLLOW_PARTITIONS 0x1u

typedef struct lull_simnet_stats {
    uint64_t events;     /* events run (one per turn) */
    uint64_t connects;   /* lull_simconn_connect calls */
    uint64_t accepted;   /* connections accepted */
    uint64_t refused;    /* connects refused: nobody listening, a refusal
                            fault, or not accepted */
    uint64_t segments;   /* segments sent */
    uint64_t bytes;      /* bytes sent */
    uint64_t reads;      /* on_frame calls */
    uint64_t partitions; /* partitions begun */
    uint64_t breaks;     /* ... that broke their connection */
    uint64_t resets;     /* connections reset */
    uint64_t held;       /* bytes a partition held: arrived only once it
                            ended */
    uint64_t slowed;     /* reads a slow reader put off */
    uint64_t trace_hash; /* FNV-1a 64 of every trace line, written or not:
                            two runs with equal hashes ran the same events */
} lull_simnet_stats;

/* Segments a direction holds in flight (sent, not yet arrived): the
 * sender waits for an arrival past this many. */
#define LULL__SIM_SEGS 16

/* One direction of a connection, kept by its receiving end: the peer's
 * frames not yet read, in stream positions (bytes since the start). */
typedef struct lull__simdir {
    lull_frame *head, *tail; /* frames sent to this end, not yet all read */
    uint64_t head_pos;       /* stream position of head's first byte */
    lull_frame *tx;          /* the first frame not wholly sent */
    uint64_t tx_pos;         /* ... its first byte's position */
    uint64_t read;           /* bytes read (handed to on_frame) */
    uint64_t arrived;        /* bytes arrived */
    uint64_t sent;           /* bytes sent */
    uint64_t queued;         /* bytes accepted; where EOF is, once `eof` */
    uint64_t reset_at;       /* the reset's byte; UINT64_MAX: none */
    uint64_t rst_at;         /* when the reset arrives, once sent */
    uint64_t link_free;      /* bandwidth: the link is busy until then */
    uint64_t last_arrival;   /* arrivals keep send order */
    uint64_t hold_until;     /* a partition: nothing arrives before */
    uint64_t read_at;        /* a slow reader reads again from then */
    uint64_t delay_ns, jitter_ns, bandwidth, slow_read_ns; /* its faults */
    size_t window;
    uint64_t seg_at[LULL__SIM_SEGS];  /* segments in flight: arrival, */
    uint64_t seg_end[LULL__SIM_SEGS]; /* ... end position */
    uint8_t seg_head, seg_len;
    bool eof;             /* the sender is done: EOF at `queued` */
    lull_simconn *closer; /* the closed sender whose close callback
                             waits for this inbox to empty */
} lull__simdir;

/* A connection arrived at a listening address: accept it inside this
 * call with lull_simserver_accept, or the connect is refused. */
typedef void (*lull_simconnection_fn)(lull_simserver *srv);
/* Connected (0), or refused (-ECONNREFUSED): a failed connection is
 * closed, its close callback runs right after this, in the same turn. */
typedef void (*lull_simconnect_fn)(lull_simconn *c, int status);

#define LULL_SIMCONN_RAW 0x1u /* bytes in chunks, as LULL_STREAM_RAW */

typedef struct lull_simconn_options { /* all zero = defaults */
    size_t max_frame;                 /* 0 = LULL_FRAME_MAX_DEFAULT */
    size_t high_water;                /* 0 = LULL_HIGH_WATER_DEFAULT */
    size_t max_queued;                /* 0 = no bound (lull_endpoint) */
    unsigned flags;                   /* LULL_SIMCONN_* */
    const char *name;             /* connect: this end's name in the trace and
                                     its peer's `peer` ("client:N" with N a
                                     port the network counts); NULL =
                                     "client" */
    const lull_simfaults *faults; /* connect: this connection's faults;
                                     NULL = the network's. accept: the
                                     delay, jitter, bandwidth, window and
                                     slow reader of what this end sends,
                                     when they differ; NULL = the
                                     connection's */
} lull_simconn_options;

struct lull_simconn {
    lull_endpoint ep;        /* the frame interface: give &ep to your code */
    lull_simnet *net;        /* the network */
    char name[40];           /* this end ("client:3", or "primary#3" for the
                                third connection accepted at "primary") */
    char peer[40];           /* the other end's name */
    uint64_t reads;          /* on_frame calls */
    uint64_t bytes_read;     /* bytes they carried */
    struct {                 /* lull's own */
        lull__simdir in;     /* what the peer sends to this end */
        lull_simconn *other; /* the peer end; NULL once either closed */
        lull_simconn *net_next, *net_prev; /* the network's live ends */
        lull_simconnect_fn on_connect;
        lull_frame *early, *early_tail; /* sent before the connect ended */
        lull_simfaults faults;          /* the connection's */
        char target[32];                /* connect: the address */
        uint64_t at;                    /* its next event, when scheduled */
        uint64_t tie;                   /* same-instant order, from the seed */
        uint64_t connect_at;            /* the connect's next step */
        uint64_t partition_at; /* the next partition (connecting end) */
        uint64_t break_at;     /* a partition breaks the connection */
        uint32_t slot;         /* its place in the schedule + 1; 0: none */
        uint32_t state;        /* src/sim.c */
        int status;            /* the connect's result */
        int reason;            /* the close callback's, while owed */
        struct lull__simguard *guard; /* a read running (src/sim.c) */
    };
};

struct lull_simserver {
    void *data;        /* yours (lull_simserver_listen clears it) */
    lull_simnet *net;  /* the network */
    uint64_t accepted; /* connections accepted */
    uint64_t refused;  /* connects refused here */
    struct {           /* lull's own */
        char addr[32];
        lull_simconnection_fn on_connection;
        lull_simserver *next;  /* the network's servers */
        lull_simconn *pending; /* the connect lull_simserver_accept takes */
    };
};

/* Creates a network on a virtual-clock loop (allocates; not a hot path).
 * opts may be NULL. -EINVAL for a NULL loop, one on the real clock, or a
 * share over 1000. */
LULL_EXTERN int lull_simnet_new(lull_simnet **out, lull_loop *loop,
                                const lull_simnet_options *opts);
/* -EBUSY while a server listens or a connection end is not done (its
 * close callback owed), and inside the network's own callbacks; the
 * network is then unchanged. */
LULL_EXTERN int lull_simnet_free(lull_simnet *net);
/* From now on, no fault: partitions under way end (what they held moves
 * on), pending resets and breaks are called off, no connect is refused.
 * Delays, bandwidths, windows and slow readers stay. */
LULL_EXTERN void lull_simnet_heal(lull_simnet *net);
/* Adds a line of the caller's to the trace (and to its hash), stamped
 * with the virtual time like the network's own. */
LULL_EXTERN void lull_simnet_log(lull_simnet *net, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
LULL_EXTERN void lull_simnet_get_stats(const lull_simnet *net,
                                       lull_simnet_stats *out);

/* Listens at addr (up to 31 bytes): connects to it reach fn. -EADDRINUSE,
 * -EBUSY for a server already listening, -EINVAL for an empty or long
 * addr. */
LULL_EXTERN int lull_simserver_listen(lull_simnet *net, lull_simserver *srv,
                                      const char *addr,
                                      lull_simconnection_fn fn);
/* Inside on_connection: c becomes this end of the waiting connection,
 * open at once; it gets its close callback once, whoever closes it.
 * -ENOENT when nothing is waiting, -EBUSY when c is a live end (its close
 * callback not run yet). */
LULL_EXTERN int lull_simserver_accept(lull_simserver *srv, lull_simconn *c,
                                      const lull_simconn_options *opts);
/* Stops listening; connects still under way are refused. No callback
 * follows: the struct is the caller's when this returns (also inside its
 * own on_connection). */
LULL_EXTERN void lull_simserver_close(lull_simserver *srv);

/* Connects to addr; fn runs in a later turn (then, on failure, the close
 * callback). Frames sent before it runs are queued. Argument errors return
 * at once, and no callback follows: -EINVAL, or -EBUSY when c is a live
 * end (its close callback not run yet). */
LULL_EXTERN int lull_simconn_connect(lull_simnet *net, lull_simconn *c,
                                     const char *addr,
                                     const lull_simconn_options *opts,
                                     lull_simconnect_fn fn);
/* Pause and resume reading: the sender's window fills, and its queue. */
LULL_EXTERN int lull_simconn_read_stop(lull_simconn *c);
LULL_EXTERN int lull_simconn_read_start(lull_simconn *c);
/* Half-close: everything queued is sent, then the peer reads EOF; sends
 * fail with -EPIPE from now on. Reading goes on. */
LULL_EXTERN int lull_simconn_shutdown(lull_simconn *c);
/* Faults on demand, for a test that wants one now: the connection holds
 * everything for span_ns, then resumes, or breaks (-ETIMEDOUT at both
 * ends); or it resets once after_bytes more bytes of c's direction were
 * sent. -ENOTCONN when it is not open. */
LULL_EXTERN int lull_simconn_partition(lull_simconn *c, uint64_t span_ns,
                                       bool breaks);
LULL_EXTERN int lull_simconn_reset(lull_simconn *c, uint64_t after_bytes);

/* ------------------------------------------------------------ processes */

/* Child processes (docs/PROCESS.md). lull_process_spawn starts a program
 * in a child and watches the child's pidfd: its exit arrives as on_exit on
 * the loop, exactly once, from the pidfd's readiness, and the child is
 * reaped: never left a zombie. No SIGCHLD handler is installed and no pid
 * is waited for but the child's own, so other libraries' children are
 * theirs. If another part of the program reaps lull's child first (a
 * SIGCHLD handler calling waitpid(-1), or SIGCHLD set to SIG_IGN), on_exit
 * still runs once, with the status the kernel kept for the pidfd (Linux
 * 6.15), or -ECHILD where it keeps none. Each of stdin, stdout and stderr
 * is inherited, /dev/null, a pipe or a socketpair whose other end comes
 * back as a lull_stream, or a given fd, and so may be fds 3 and up
 * (more_stdio); every other fd is closed in the child. The child may get
 * another uid, gid and groups, resource limits, and a pty as its
 * controlling terminal. Needs Linux 5.4 (pidfd, waitid(P_PIDFD)). */

typedef struct lull_process lull_process;
/* The child ended. It exited with exit_status (0-255; term_signal 0), or
 * a signal ended it (term_signal; exit_status 0). exit_status is a
 * negative errno when lull could not learn how it ended: -ECHILD for a
 * handle inherited through fork() (lull_loop_fork), whose process is the
 * parent's child, not this one's, and for a child another part of the
 * program reaped on a kernel that keeps no status for its pidfd (before
 * Linux 6.15). The handle's last callback: free or reuse p inside it
 * (never called after lull_process_detach). */
typedef void (*lull_process_exit_fn)(lull_process *p, int exit_status,
                                     int term_signal);

typedef enum lull_stdio_kind {
    LULL_STDIO_INHERIT = 0,    /* the parent's own fd 0, 1 or 2 */
    LULL_STDIO_NULL = 1,       /* /dev/null */
    LULL_STDIO_PIPE = 2,       /* a pipe; the parent's end opens as `stream` */
    LULL_STDIO_SOCKETPAIR = 3, /* a Unix socketpair, both ways; the
                                  parent's end opens as `stream` */
    LULL_STDIO_FD = 4,         /* `fd`, the caller's (lull never closes it) */
    LULL_STDIO_DUP = 5         /* a copy of what the child's lower fd `fd`
                                  gets: stdio[2] = {LULL_STDIO_DUP, 1} is
                                  2>&1, its stderr on stdout's pipe */
} lull_stdio_kind;

/* lull_stdio.flags. FRAMED: the stream carries length-prefixed frames
 * (a 4-byte big-endian length before each), for a child that speaks lull's
 * framing. Without it a PIPE or SOCKETPAIR stream is raw (LULL_STREAM_RAW,
 * whatever stream_opts says): a program's stdio is bytes. */
#define LULL_STDIO_FRAMED 0x1u
/* lull_stdio.flags, a PIPE at fd 3 or above: the child reads it and the
 * parent's stream writes. Without it the child writes and the stream
 * reads. (fd 0 is always the child's to read, 1 and 2 to write.) */
#define LULL_STDIO_CHILD_READS 0x2u
/* The most fds a child is given: stdio[0..2] and more_stdio, fds 3 to 63. */
#define LULL_STDIO_MAX 64

typedef struct lull_stdio { /* all zero = inherit */
    lull_stdio_kind kind;   /* LULL_STDIO_* */
    int fd;                 /* LULL_STDIO_FD: the fd the child gets;
                               LULL_STDIO_DUP: the child's fd it copies */
    lull_stream *stream;    /* PIPE, SOCKETPAIR: opened by the spawn over the
                               parent's end, yours to close. stdin and
                               stdout naming the same stream (both PIPE) open
                               one stream that writes the child's stdin and
                               reads its stdout (lull_stream_open_pair) */
    const lull_stream_options *stream_opts; /* NULL = defaults (raw) */
    unsigned flags;                         /* LULL_STDIO_FRAMED; PIPE,
                                               SOCKETPAIR only;
                                               LULL_STDIO_CHILD_READS */
} lull_stdio;

/* lull_process_options.flags. NEW_GROUP: setpgid(0, 0), a process group
 * of its own (kill(-pid, sig) then reaches what it starts too). NEW_SESSION:
 * setsid(), a session of its own, without a controlling terminal.
 * KILL_ON_CLOSE: lull_process_close sends SIGKILL. SETUID, SETGID: the
 * child takes uid, gid (and with either, the groups below) before exec;
 * not permitted is the spawn's -EPERM. The parent stays dumpable (core
 * dumps, its /proc files, ptrace) as it was, unless it changed its own
 * ids meanwhile (another thread's setuid); such spawns go one at a time,
 * and a fork() waits for one in flight. CONTROLLING_TTY: a new session
 * (implies NEW_SESSION) whose controlling terminal is the child's fd 0, a
 * terminal such as a pty's slave given as LULL_STDIO_FD (TIOCSCTTY; not a
 * terminal: -ENOTTY; another session's: -EPERM). */
#define LULL_PROCESS_NEW_GROUP       0x1u
#define LULL_PROCESS_NEW_SESSION     0x2u
#define LULL_PROCESS_KILL_ON_CLOSE   0x4u
#define LULL_PROCESS_SETUID          0x8u
#define LULL_PROCESS_SETGID          0x10u
#define LULL_PROCESS_CONTROLLING_TTY 0x20u

/* A resource limit for the child, set before exec (prlimit): resource is
 * an RLIMIT_* of <sys/resource.h>, cur and max its soft and hard limits
 * (UINT64_MAX: RLIM_INFINITY). Above the parent's hard limit needs
 * privilege (-EPERM); an unknown resource or cur > max: -EINVAL. */
typedef struct lull_rlimit {
    int resource;
    uint64_t cur;
    uint64_t max;
} lull_rlimit;
/* The most limits one spawn sets: one per resource Linux has. */
#define LULL_RLIMIT_MAX 16

typedef struct lull_process_options {
    const char *file;    /* the program: a path with a '/', or a name looked up
                            in PATH (envp's, else the parent's); NULL = argv[0] */
    char *const *argv;   /* NULL-terminated; argv[0] set */
    char *const *envp;   /* NULL-terminated; NULL = the parent's environ */
    const char *cwd;     /* NULL = the parent's */
    lull_stdio stdio[3]; /* stdin, stdout, stderr */
    unsigned flags;      /* LULL_PROCESS_* */
    const lull_stdio *more_stdio; /* the child's fds 3, 4 ...: more_stdio[i]
                                     is fd 3 + i (INHERIT: the parent's fd
                                     3 + i); the same kinds as stdio */
    int more_stdio_count;         /* 0 to LULL_STDIO_MAX - 3; fds past
                                     RLIMIT_NOFILE: -EMFILE */
    uint32_t uid;                 /* LULL_PROCESS_SETUID */
    uint32_t gid;                 /* LULL_PROCESS_SETGID */
    const uint32_t *groups; /* supplementary groups (setgroups), group_count
                               of them; NULL with count 0: with SETUID or
                               SETGID, none where permitted, else the
                               parent's */
    int group_count;
    const lull_rlimit *rlimits; /* set in the child before exec */
    int rlimit_count;           /* 0 to LULL_RLIMIT_MAX */
} lull_process_options;

struct lull_process {
    void *data;      /* yours (lull_process_spawn clears it) */
    lull_loop *loop; /* the owning loop */
    int pid;         /* the child's pid (a pid_t), kept after its exit */
    int exit_status; /* once reaped: what on_exit got */
    int term_signal;
    struct {                          /* lull's own */
        lull_io io;                   /* watches the pidfd, or edge_fd
                                         while a tracer holds the exit */
        int pidfd;                    /* the child's pidfd (owned); -1 once
                                         reaped */
        lull_task done;               /* on_exit for a close in a fork */
        lull_process_exit_fn on_exit; /* the last callback */
        int owner_pid;                /* the process that spawned it */
        unsigned flags;               /* LULL_PROCESS_* */
        uint32_t state;               /* src/process.c */
        uint32_t retries;             /* exit seen before its status was
                                         recorded (src/process.c) */
    };
};

/* Starts opts->file in a child and returns once it runs the program: an
 * exec that fails (no such file, not executable, a cwd that does not exist)
 * is this call's error (-ENOENT, -EACCES ...), never a child that exits
 * 127; so is running out of fds (-EMFILE) or processes (-EAGAIN). Nothing
 * is left behind on failure: no child, no fd, no stream. on_exit (required)
 * runs once, on the loop, never inside this call. The handle keeps the loop
 * alive until then (lull_process_unref). -EBUSY into a handle that is still
 * live (on_exit not yet run), on any loop; after on_exit (or
 * lull_process_detach) it may be spawned into again. */
LULL_EXTERN int lull_process_spawn(lull_loop *loop, lull_process *p,
                                   const lull_process_options *opts,
                                   lull_process_exit_fn on_exit);
/* Sends signum (0 probes) with pidfd_send_signal: never to a reused pid.
 * -ESRCH once on_exit ran, -ECHILD in a forked copy of the loop. */
LULL_EXTERN int lull_process_kill(lull_process *p, int signum);
/* Sends signum to the child's process group, kill(-pid): the group the
 * child leads (LULL_PROCESS_NEW_GROUP or _NEW_SESSION), its own children
 * too, even after the child itself exited. Until lull reaps the child its
 * pid cannot be reused, so the signal cannot reach a stranger's group;
 * from the reap on it is refused: -ESRCH once on_exit ran or another part
 * of the program reaped the child, and when the child leads no group.
 * -ECHILD in a forked copy of the loop. */
LULL_EXTERN int lull_process_kill_group(lull_process *p, int signum);
/* Stops watching the child and ends the handle at once, with no callback:
 * p is the caller's again when this returns, the loop no longer holds it
 * (lull_loop_free may follow), and the child runs on. lull still reaps it
 * when it exits, on a thread of its own started by the first detach, so it
 * is never left a zombie. -ESRCH once on_exit ran (or is queued, or after
 * a detach). In a forked copy of the loop the handle just lets go of the
 * parent's child. */
LULL_EXTERN int lull_process_detach(lull_process *p);
/* Done with the child. With LULL_PROCESS_KILL_ON_CLOSE it is sent SIGKILL;
 * without, it runs on, and the handle stops keeping the loop alive. Either
 * way the handle reaps it: on_exit still runs once, as the last callback,
 * when it ends (in a forked copy of the loop: in a later turn, with
 * -ECHILD, and nothing is killed). Idempotent. */
LULL_EXTERN int lull_process_close(lull_process *p);
/* An unreferenced process does not keep lull_loop_run alive. */
LULL_EXTERN void lull_process_ref(lull_process *p);
LULL_EXTERN void lull_process_unref(lull_process *p);

/* -------------------------------------------------------------- signals */

/* Signals as handles (docs/PROCESS.md): a loop reads the signals its
 * handles watch from one signalfd, and each delivery runs the callback of
 * every handle watching that signal, once, on the loop. The kernel keeps one
 * pending instance of a standard signal: several sent before the loop reads
 * them may arrive as one (real-time signals queue). A watched signal must be
 * blocked in every thread, or a thread that does not block it takes it
 * with its usual action: call lull_signal_block in main before creating
 * threads, and threads inherit it. lull installs no handler, and a thread's
 * mask is its own, so the mask rules are (docs/API.md, "The mask rules"):
 * the first handle of a signal blocks it in the calling thread, and the
 * block is lull's if it was not blocked there. The last stop of a signal
 * lull blocked drops an instance still pending (it arrived while watched)
 * and unblocks it in the calling thread; in another thread lull blocked it
 * in (set up in main, run on another thread), at that thread's next
 * lull_signal_*, lull_loop_adopt or lull_loop_free call. A block that is
 * the program's (lull_signal_block, before or after the start) stays, and
 * so does an instance pending at the last stop. Each signal is read by one
 * loop: watch it on one. */

typedef struct lull_signal lull_signal;
typedef void (*lull_signal_fn)(lull_signal *sig, int signum);

struct lull_signal {
    void *data;        /* yours (lull_signal_init clears it) */
    lull_loop *loop;   /* the owning loop */
    int signum;        /* the signal watched; 0 while stopped */
    int sender_pid;    /* in the callback: the sender's pid (si_pid; 0 when
                          the kernel sent it) */
    uint64_t received; /* deliveries this handle saw */
    struct {           /* lull's own */
        lull_signal_fn fn;
        lull_signal *next; /* the loop's started handles, in start order */
        lull_signal *prev;
        uint64_t seq;   /* start order: a delivery reaches older handles */
        unsigned flags; /* src/signal.c */
    };
};

/* -EINVAL for NULL; -EBUSY for a started handle, on any loop. */
LULL_EXTERN int lull_signal_init(lull_loop *loop, lull_signal *sig,
                                 lull_signal_fn fn);
/* Watches signum (restarting a started handle on another signal). -EINVAL
 * for a signal that cannot be caught or blocked (SIGKILL, SIGSTOP, glibc's
 * own 32 and 33) or out of range; signalfd's errno: the handle (a moved one
 * on its old signal) and the mask as they were. */
LULL_EXTERN int lull_signal_start(lull_signal *sig, int signum);
/* No callback after this, also for a delivery already read. Idempotent. */
LULL_EXTERN int lull_signal_stop(lull_signal *sig);
/* An unreferenced signal handle does not keep lull_loop_run alive. */
LULL_EXTERN void lull_signal_ref(lull_signal *sig);
LULL_EXTERN void lull_signal_unref(lull_signal *sig);
/* Thread-safe: blocks signum in the calling thread (pthread_sigmask), so
 * that threads created afterwards inherit it. Call it in main, before any
 * thread starts, for every signal a loop will watch. The block is the
 * program's: lull never lifts it. */
LULL_EXTERN int lull_signal_block(int signum);

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
    void *data;                 /* yours (lull_work_init clears it) */
    lull_loop *loop;            /* the submitting loop, while submitted */
    lull_pool *pool;            /* non-NULL from submit until done runs */
    struct {                    /* lull's own */
        lull_task task;         /* carries the completion to the loop */
        lull_work_fn fn;        /* runs on a pool thread */
        lull_work_done_fn done; /* runs on the loop; may be NULL */
        lull_work *next;        /* the pool's queue (under the pool's lock) */
        lull_work *prev;
        int status;  /* fn's return value or -ECANCELED, handed to done */
        bool queued; /* waiting in the pool's queue (under its lock) */
    };
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

/* Creates a pool and starts its threads, each with a stack of 8 MiB at
 * least (allocates; not a hot path). opts may be NULL. A pool does not
 * survive fork(): in a child, one made before the fork refuses work
 * (-ECHILD; lull_pool_free frees the child's copy); the child's
 * lull_pool_default makes its own. */
LULL_EXTERN int lull_pool_new(lull_pool **out, const lull_pool_options *opts);
/* Thread-safe, never blocks. Refuses new work (-ESHUTDOWN) and cancels the
 * waiting work: each done runs on its loop with -ECANCELED. Work already
 * running finishes and completes normally. The default pool is refused (it
 * stays open; a debug build aborts), as lull_pool_free refuses it. */
LULL_EXTERN void lull_pool_close(lull_pool *pool);
/* Closes the pool, waits for running work to finish and its threads to
 * exit, and frees it. Not from a pool thread (-EDEADLK), not on the default
 * pool (-EBUSY), not while another thread may still submit to it. The done
 * functions of the last items still run on their loops afterwards (a
 * submit from one: -ESHUTDOWN); the memory goes with the last of them. */
LULL_EXTERN int lull_pool_free(lull_pool *pool);
/* Thread-safe. The process's default pool, created on first use with the
 * thread count in LULL_POOL_THREADS (1 to 1024) or 4; it lives until exit. */
LULL_EXTERN int lull_pool_default(lull_pool **out);
/* Thread-safe. Makes `pool` the default before anything asked for one
 * (-EBUSY afterwards); lull owns it from then on. */
LULL_EXTERN int lull_pool_set_default(lull_pool *pool);
/* Thread-safe: a snapshot of the pool's counters. */
LULL_EXTERN void lull_pool_get_stats(lull_pool *pool, lull_pool_stats *out);

/* Prepares a work item; call again only while it is not submitted (debug
 * builds abort when the pool or loop reaches one set up again). */
LULL_EXTERN int lull_work_init(lull_work *work, lull_work_fn fn,
                               lull_work_done_fn done);
/* Loop thread of `loop`; any number of loops may share one pool.
 * Queues fn for a pool thread; done then runs on `loop`, which stays alive
 * (a loop reference) until it has. -EBUSY while work is still submitted,
 * -EAGAIN when the queue is full, -ESHUTDOWN once the pool is closed,
 * -ECHILD in a fork()ed child for a pool made before the fork; done never
 * runs for a refused submit. No allocation. */
LULL_EXTERN int lull_work_submit(lull_loop *loop, lull_pool *pool,
                                 lull_work *work);
/* Loop thread. Cancels work that has not started: 0, and done runs in a
 * later task with -ECANCELED. -EBUSY once it runs or ran (done still comes),
 * -EINVAL when it is not submitted. */
LULL_EXTERN int lull_work_cancel(lull_work *work);
/* Submitted and its done function not yet run. */
LULL_EXTERN bool lull_work_busy(const lull_work *work);

/* ----------------------------------------------- pool: file helpers */

/* One-shot file operations on a pool (docs/POOL.md): the request is
 * caller-owned, cb runs on the loop once with the result (a non-negative
 * value or a negative errno, the kernel's; -ECANCELED when cancelled). Paths
 * and buffers stay the caller's and must stay valid until cb runs. Refused
 * at once (cb never runs): -EINVAL for NULL arguments, a path of PATH_MAX
 * bytes or more, a length past SSIZE_MAX; -EBUSY while req is in flight;
 * -EAGAIN, -ESHUTDOWN as lull_work_submit. Give files a pool of their own
 * (a lane), so a slow disk never holds up other work. Loop thread. */
typedef struct lull_fs lull_fs;
typedef void (*lull_fs_fn)(lull_fs *req, int64_t result);

/* lull_fs_stat's result, filled from statx (fstatat where statx is
 * missing: btime then stays 0). Times are nanoseconds since the epoch. */
typedef struct lull_stat {
    uint64_t dev, ino, rdev;
    uint32_t mode, nlink, uid, gid;
    uint64_t size, blksize, blocks;
    int64_t atime_ns, mtime_ns, ctime_ns, btime_ns;
} lull_stat;

/* One directory entry of a lull_fs_scandir batch. */
typedef struct lull_dirent {
    uint64_t ino;
    unsigned char type; /* DT_REG, DT_DIR, ... (DT_UNKNOWN on some fs) */
    char name[256];     /* NUL-terminated; never "." or ".." */
} lull_dirent;

/* Runs on the loop for each batch of at most LULL_FS_DIR_BATCH entries;
 * the array is lull's, valid during the call. Return false to stop (cb
 * then gets the count so far). */
typedef bool (*lull_fs_dir_fn)(lull_fs *req, const lull_dirent *ents, size_t n);
#define LULL_FS_DIR_BATCH 256

struct iovec;
struct timespec;

struct lull_fs {
    void *data;         /* yours (lull never touches it) */
    int64_t result;     /* what cb receives, once it ran */
    struct {            /* lull's own */
        lull_work work; /* the operation, on the pool */
        lull_fs_fn cb;
        int op;            /* which operation (src/fs.c) */
        int fd, fd2;       /* fd2: the destination of copies */
        int flags;         /* open */
        unsigned mode;     /* open, mkdir, chmod */
        uint32_t uid, gid; /* chown */
        const char *path;  /* the path, or a link's target */
        const char *path2; /* rename, link, symlink: the new name */
        void *buf;         /* read, write, readlink, realpath, stat */
        size_t len;
        uint64_t offset, offset2; /* offset2: the destination's */
        const struct iovec *iov;  /* readv, writev */
        int iovcnt;
        bool stop;             /* scandir: cancelled (inside a batch, or
                                  while a trip is off the loop) */
        int64_t times[4];      /* utime: atime, mtime (sec, nsec) */
        lull_fs_dir_fn dir_cb; /* scandir */
        void *dir;             /* scandir: its state, allocated */
    };
};

/* Result: the new fd (opened with O_CLOEXEC added). */
LULL_EXTERN int lull_fs_open(lull_loop *loop, lull_pool *pool, lull_fs *req,
                             const char *path, int flags, unsigned mode,
                             lull_fs_fn cb);
/* Result: 0. */
LULL_EXTERN int lull_fs_close(lull_loop *loop, lull_pool *pool, lull_fs *req,
                              int fd, lull_fs_fn cb);
/* The offset of a read or write at the fd's own position (read(2) and
 * write(2), which move it): libuv's -1. */
#define LULL_FS_CURRENT UINT64_MAX
/* Reads up to len bytes at offset (fewer only at end of file; at
 * LULL_FS_CURRENT one read(2), so a pipe gives what it has). Result: the
 * bytes read. A read or write of 0 bytes still makes the call (-EBADF for
 * a closed fd). */
LULL_EXTERN int lull_fs_read(lull_loop *loop, lull_pool *pool, lull_fs *req,
                             int fd, void *buf, size_t len, uint64_t offset,
                             lull_fs_fn cb);
/* Writes all len bytes at offset. Result: len, or what was written before
 * an error (the error when nothing was). */
LULL_EXTERN int lull_fs_write(lull_loop *loop, lull_pool *pool, lull_fs *req,
                              int fd, const void *buf, size_t len,
                              uint64_t offset, lull_fs_fn cb);
/* preadv/pwritev, completed as lull_fs_read/lull_fs_write; 1 to IOV_MAX
 * buffers (the array stays the caller's until cb). */
LULL_EXTERN int lull_fs_readv(lull_loop *loop, lull_pool *pool, lull_fs *req,
                              int fd, const struct iovec *iov, int iovcnt,
                              uint64_t offset, lull_fs_fn cb);
LULL_EXTERN int lull_fs_writev(lull_loop *loop, lull_pool *pool, lull_fs *req,
                               int fd, const struct iovec *iov, int iovcnt,
                               uint64_t offset, lull_fs_fn cb);
/* Fill *out (the caller's until cb). Result: 0. lstat does not follow a
 * final symlink. */
LULL_EXTERN int lull_fs_stat(lull_loop *loop, lull_pool *pool, lull_fs *req,
                             const char *path, lull_stat *out, lull_fs_fn cb);
LULL_EXTERN int lull_fs_lstat(lull_loop *loop, lull_pool *pool, lull_fs *req,
                              const char *path, lull_stat *out, lull_fs_fn cb);
LULL_EXTERN int lull_fs_fstat(lull_loop *loop, lull_pool *pool, lull_fs *req,
                              int fd, lull_stat *out, lull_fs_fn cb);
/* Path operations. Result: 0. */
LULL_EXTERN int lull_fs_rename(lull_loop *loop, lull_pool *pool, lull_fs *req,
                               const char *from, const char *to, lull_fs_fn cb);
LULL_EXTERN int lull_fs_unlink(lull_loop *loop, lull_pool *pool, lull_fs *req,
                               const char *path, lull_fs_fn cb);
LULL_EXTERN int lull_fs_mkdir(lull_loop *loop, lull_pool *pool, lull_fs *req,
                              const char *path, unsigned mode, lull_fs_fn cb);
LULL_EXTERN int lull_fs_rmdir(lull_loop *loop, lull_pool *pool, lull_fs *req,
                              const char *path, lull_fs_fn cb);
/* tmpl ends in "XXXXXX", replaced in place by the new directory's name. */
LULL_EXTERN int lull_fs_mkdtemp(lull_loop *loop, lull_pool *pool, lull_fs *req,
                                char *tmpl, lull_fs_fn cb);
LULL_EXTERN int lull_fs_link(lull_loop *loop, lull_pool *pool, lull_fs *req,
                             const char *from, const char *to, lull_fs_fn cb);
LULL_EXTERN int lull_fs_symlink(lull_loop *loop, lull_pool *pool, lull_fs *req,
                                const char *target, const char *linkpath,
                                lull_fs_fn cb);
/* Into buf (NUL-terminated). Result: the length; -ENAMETOOLONG when it
 * does not fit. */
LULL_EXTERN int lull_fs_readlink(lull_loop *loop, lull_pool *pool, lull_fs *req,
                                 const char *path, char *buf, size_t size,
                                 lull_fs_fn cb);
LULL_EXTERN int lull_fs_realpath(lull_loop *loop, lull_pool *pool, lull_fs *req,
                                 const char *path, char *buf, size_t size,
                                 lull_fs_fn cb);
/* Lists path in batches: dir_cb per batch, then cb with the entry count.
 * The batches are separate pool trips, so the loop runs between them. The
 * one file operation that allocates: one batch (about 70 KB) per listing,
 * freed before cb. */
LULL_EXTERN int lull_fs_scandir(lull_loop *loop, lull_pool *pool, lull_fs *req,
                                const char *path, lull_fs_dir_fn dir_cb,
                                lull_fs_fn cb);
/* Result: 0. */
LULL_EXTERN int lull_fs_fsync(lull_loop *loop, lull_pool *pool, lull_fs *req,
                              int fd, lull_fs_fn cb);
LULL_EXTERN int lull_fs_fdatasync(lull_loop *loop, lull_pool *pool,
                                  lull_fs *req, int fd, lull_fs_fn cb);
LULL_EXTERN int lull_fs_ftruncate(lull_loop *loop, lull_pool *pool,
                                  lull_fs *req, int fd, uint64_t len,
                                  lull_fs_fn cb);
/* Copies len bytes from fd_in at off_in to fd_out at off_out with
 * copy_file_range, by pread/pwrite where the kernel refuses (EXDEV, EINVAL,
 * ENOSYS, EOPNOTSUPP). Result: bytes copied (fewer at fd_in's end). A len
 * of 0 still asks both fds (-EBADF for a closed one). */
LULL_EXTERN int lull_fs_copy_range(lull_loop *loop, lull_pool *pool,
                                   lull_fs *req, int fd_out, uint64_t off_out,
                                   int fd_in, uint64_t off_in, size_t len,
                                   lull_fs_fn cb);
/* sendfile: fd_in at off_in to fd_out at its current position (a socket,
 * a pipe), by pread/write where the kernel refuses. Result: bytes sent. */
LULL_EXTERN int lull_fs_sendfile(lull_loop *loop, lull_pool *pool, lull_fs *req,
                                 int fd_out, int fd_in, uint64_t off_in,
                                 size_t len, lull_fs_fn cb);
/* Result: 0. uid or gid (uint32_t)-1 leaves it unchanged. */
LULL_EXTERN int lull_fs_chmod(lull_loop *loop, lull_pool *pool, lull_fs *req,
                              const char *path, unsigned mode, lull_fs_fn cb);
LULL_EXTERN int lull_fs_fchmod(lull_loop *loop, lull_pool *pool, lull_fs *req,
                               int fd, unsigned mode, lull_fs_fn cb);
LULL_EXTERN int lull_fs_chown(lull_loop *loop, lull_pool *pool, lull_fs *req,
                              const char *path, uint32_t uid, uint32_t gid,
                              lull_fs_fn cb);
LULL_EXTERN int lull_fs_fchown(lull_loop *loop, lull_pool *pool, lull_fs *req,
                               int fd, uint32_t uid, uint32_t gid,
                               lull_fs_fn cb);
/* utimensat/futimens: ts[0] atime, ts[1] mtime (copied; UTIME_NOW and
 * UTIME_OMIT as the kernel's; NULL = now). Result: 0. */
LULL_EXTERN int lull_fs_utime(lull_loop *loop, lull_pool *pool, lull_fs *req,
                              const char *path, const struct timespec *ts,
                              lull_fs_fn cb);
LULL_EXTERN int lull_fs_futime(lull_loop *loop, lull_pool *pool, lull_fs *req,
                               int fd, const struct timespec *ts,
                               lull_fs_fn cb);
/* lull_work_cancel for a file request: 0 while it waits (cb then gets
 * -ECANCELED once, in a later task); -EBUSY once a thread runs it. A
 * scandir is cancelled (0) at any time before its cb: inside its dir_cb,
 * or between batches, also while a thread runs its next trip (that trip's
 * batch is then not handed over); -EBUSY once cancelled. */
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
    void *data;            /* yours (lull never touches it) */
    uint64_t offset;       /* where its bytes start in the file */
    uint64_t sync;         /* the fdatasync that made it durable, counted from 1
                              per journal: appends that shared one share it */
    struct {               /* lull's own */
        lull_append *next; /* the journal's queue (loop thread) */
        lull_append_fn cb; /* on the loop: 0 once the bytes are durable */
        const void *buf;   /* caller's, valid until cb runs */
        size_t len;
    };
};

struct lull_journal {
    void *data; /* yours (lull_journal_init clears it) */
    lull_loop *loop;
    lull_pool *pool;
    int fd;                /* not owned: never closed */
    int error;             /* sticky: the first write or sync error */
    uint64_t end;          /* file offset the next batch starts at */
    uint64_t syncs;        /* batches made durable */
    struct {               /* lull's own */
        lull_work work;    /* one batch: its writes and its fdatasync */
        lull_task start;   /* starts the next batch in a later task */
        lull_append *head; /* waiting for a batch, oldest first */
        lull_append *tail;
        lull_append *batch;   /* in flight; the pool thread reads it */
        uint64_t batch_start; /* its first byte's offset */
        uint64_t batch_bytes;
    };
};

/* Writes start at the file's current end (lseek SEEK_END). -EBUSY while
 * j's appends are in flight, as `loop` (asked on its thread) and `pool`
 * see it: busy on another loop or pool, it is not seen, and debug builds
 * abort when that one reaches the cleared journal. */
LULL_EXTERN int lull_journal_init(lull_loop *loop, lull_pool *pool,
                                  lull_journal *j, int fd);
/* Queues len bytes: 0, -EINVAL (NULL, len past SSIZE_MAX), or the sticky
 * error (cb then never runs). req must not be queued already (-EBUSY where
 * seen at once: the first or last queued, the first in flight; elsewhere a
 * debug build stops). No allocation. Loop thread of the journal's loop
 * (asserted). */
LULL_EXTERN int lull_journal_append(lull_journal *j, lull_append *req,
                                    const void *buf, size_t len,
                                    lull_append_fn cb);
/* True while appends are queued or a batch is in flight: close the file,
 * or free the journal (also inside an append's cb), only once it is
 * false. */
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
    void *data;           /* yours (lull never touches it) */
    struct addrinfo *res; /* set on success, handed to cb (yours to free) */
    int sys_errno;        /* errno when the status is EAI_SYSTEM */
    struct {              /* lull's own */
        lull_work work;
        lull_lookup_fn cb;
        const char *node;
        const char *service;
        const struct addrinfo *hints;
    };
};

LULL_EXTERN int lull_lookup_start(lull_loop *loop, lull_pool *pool,
                                  lull_lookup *req, const char *node,
                                  const char *service,
                                  const struct addrinfo *hints,
                                  lull_lookup_fn cb);
/* lull_work_cancel for a lookup: 0 when it had not started (cb then runs in
 * a later task with -ECANCELED), -EBUSY once it runs or ran. */
LULL_EXTERN int lull_lookup_cancel(lull_lookup *req);

/* ----------------------------------------------------- dialing by name */

/* A TCP connection to a host name and port, as RFC 8305 ("Happy
 * Eyeballs") describes: the name resolves on a pool (a numeric host
 * does not need one), the addresses are tried with IPv6 and IPv4
 * interleaved, the next attempt starts attempt_delay_ns after the previous
 * one unless that one failed first, the first to connect wins and the rest
 * are closed. One callback for the whole dial; on success the stream is
 * open on the winning socket, as lull_stream_open leaves it. */

struct addrinfo;
typedef struct lull_dial lull_dial;
/* status 0: d->stream is open (its close callback owed, as for any
 * stream). Else the dial failed and the stream was never set up:
 * -ECANCELED (lull_dial_cancel), -ETIMEDOUT (timeout_ns, or the stream
 * options' connect_timeout_ns if earlier), -EHOSTUNREACH
 * (the name has no address of the family asked for: d->gai_error holds
 * getaddrinfo's code; -EMFILE, -ENOMEM ... when it failed for want of
 * fds or memory), -ESHUTDOWN (the pool was closed before the lookup
 * ran), -EBUSY (the stream was opened meanwhile: by another
 * dial given it, say), or the last attempt's connect error
 * (-ECONNREFUSED ...). Runs in a later turn than lull_dial_start. */
typedef void (*lull_dial_fn)(lull_dial *d, int status);

typedef struct lull_dial_options {     /* all zero = defaults */
    const lull_stream_options *stream; /* for the stream, as connect's:
                                          its connect_timeout_ns bounds
                                          the whole dial, as timeout_ns */
    uint64_t attempt_delay_ns;         /* 0 = 250 ms (RFC 8305's default) */
    uint64_t timeout_ns; /* the whole dial; 0 = none (the earlier of this
                            and stream's connect_timeout_ns counts) */
    int family;          /* AF_INET or AF_INET6 only; 0 = both */
} lull_dial_options;

/* Addresses in flight at once: an attempt every 250 ms, and a connect
 * to a host that does not answer takes minutes to fail. */
#define LULL_DIAL_MAX_ATTEMPTS 8

struct lull_dial {
    void *data;          /* yours; lull never touches it */
    lull_stream *stream; /* the stream given to lull_dial_start */
    int attempts;        /* connects started */
    int gai_error;       /* getaddrinfo's code when the name failed */
    struct {             /* lull's own */
        lull_loop *loop;
        /* lookup: unused, the lookup lives apart (src/dial.c) */
        lull_lookup lookup;
        lull_timer timer; /* the next attempt; the whole dial's end */
        lull_task done;   /* the callback's turn */
        lull_io io[LULL_DIAL_MAX_ATTEMPTS]; /* attempts in flight */
        struct addrinfo *res;    /* resolved (getaddrinfo's, freed at end) */
        struct addrinfo **order; /* the addresses, families interleaved */
        int n, next;             /* ... how many, the next to try */
        char *host;              /* a copy, for the pool */
        char service[8];
        lull_stream_options opts;
        bool has_opts;
        uint64_t attempt_delay_ns;
        uint64_t deadline; /* the whole dial's, or 0 */
        lull_dial_fn fn;
        int status;     /* the callback's, once decided */
        unsigned state; /* src/dial.c */
    };
};

/* Starts dialing host:port (a name, or a numeric address: "::1" or
 * "[::1]"). pool: where the name resolves (NULL: lull_pool_default). 0,
 * or -EINVAL (NULL, port outside 1..65535, a family other than 0,
 * AF_INET, AF_INET6), -EBUSY
 * (dialing already, or s still open or closed with its on_close yet to
 * run), -ENOMEM. Cancel with lull_dial_cancel; the callback runs once, in
 * a later turn, after which d may be started again (from the callback
 * too). */
LULL_EXTERN int lull_dial_start(lull_loop *loop, lull_pool *pool, lull_dial *d,
                                lull_stream *s, const char *host, int port,
                                const lull_dial_options *opts, lull_dial_fn fn);
/* The same with addresses the caller resolved (a list as getaddrinfo
 * gives; entries that are not AF_INET or AF_INET6, or not opts->family,
 * are skipped): no pool. The list must stay valid until the callback
 * runs. */
LULL_EXTERN int lull_dial_start_addrs(lull_loop *loop, lull_dial *d,
                                      lull_stream *s,
                                      const struct addrinfo *list,
                                      const lull_dial_options *opts,
                                      lull_dial_fn fn);
/* Stops the dial: attempts closed, the callback gets -ECANCELED in a later
 * turn (or the status it was about to get, when it was decided already).
 * A lookup already running on the pool is let go, as at the dial's
 * timeout: neither the callback nor the loop waits for getaddrinfo (the
 * loop may run out and be freed meanwhile; the pool's thread frees the
 * lookup when it returns). 0, or -EINVAL when it is not dialing. */
LULL_EXTERN int lull_dial_cancel(lull_dial *d);

/* ---------------------------------------------- pool: one loop per core */

/* N loops on N threads (pinned when asked), started together and stopped
 * together (docs/POOL.md). Hand a task or an accepted connection to another
 * loop with lull_task_post_remote(lull_percore_loop(pc, i), task). */
typedef struct lull_percore lull_percore;
/* Runs on loop `index`'s own thread. */
typedef void (*lull_percore_fn)(lull_loop *loop, int index, void *arg);

typedef struct lull_percore_options { /* all zero = defaults */
    int loops;              /* 0 = one per CPU this process may run on;
                               at most 1024 (CPU_SETSIZE), else -EINVAL */
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
/* Thread-safe: the number of loops, fixed from start to stop. */
LULL_EXTERN int lull_percore_count(const lull_percore *pc);
/* Thread-safe: loop `index` (NULL out of range), fixed from start to stop;
 * the address to lull_task_post_remote a hand-off to. */
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
 * of pc nor from a pool thread (-EDEADLK). Hand-offs that never stop keep
 * it waiting; after 1,000 rounds it names them on stderr, once. -EBUSY if
 * a loop still held handles at the end (that loop is not freed); -EINVAL
 * for NULL, a set stopped already (by its address: one a later start got
 * again is that set), or a set a forked child inherited. */
LULL_EXTERN int lull_percore_stop(lull_percore *pc);

#ifdef __cplusplus
}
#endif
#endif /* LULL_H */
