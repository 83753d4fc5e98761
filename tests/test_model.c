/* The reference model: lull's ordering rules written a second
 * time, for obviousness rather than speed, and a seeded generator of random
 * operation sequences that runs each sequence against the model and against
 * the real loop on the virtual clock, in lockstep. After every operation
 * both sides must agree on: the order of every callback, the virtual time
 * each ran at, the deadline a timer reports inside its own callback, the
 * pending / active / quiet state of every handle seen inside each callback
 * and after the operation, what lull_loop_settle returned, what lull_loop_free
 * said, and lull_loop_now.
 *
 * The rules the model encodes (C2-C4, C7):
 *   - one FIFO of ready work: posted tasks, zero-delay timers, listener
 *     calls and pump passes, in the order they were queued; re-posting a
 *     pending task keeps its place; cancel unlinks;
 *   - lull_timer_start re-arms: new deadline, new arm order, so a zero-delay
 *     re-arm goes to the tail; timers due at one instant are queued
 *     together, in (deadline, arm order), and run before the ready FIFO;
 *     a repeating timer's next period is armed (a new arm order) when its
 *     period expires, at previous deadline + period, and is not queued
 *     twice;
 *   - a raise posts each subscriber in subscription order (a pump's
 *     listener posts the pump's pass); unlisten cancels a plain listener's
 *     queued call;
 *   - a pump pass withdraws its queued task and its retry timer, runs, and
 *     then, unless it was woken or closed meanwhile, posts itself again
 *     (AGAIN, or HELD with retry 0) or arms the retry (HELD); a wake stops
 *     the retry and posts the pass; close cancels both and unlistens the
 *     pump's listeners;
 *   - remote posts (made here from the loop thread, outside callbacks) are
 *     taken at the start of the next iteration, oldest first;
 *   - settle iterates until an iteration runs nothing; advance settles,
 *     then steps to each deadline up to the target, settling at each, then
 *     sets the target time and settles; lull_loop_run on the virtual clock runs
 *     while something is ready; lull_loop_stop ends any of them after the
 *     callback in progress (advance then stays at the time it reached);
 *   - lull_loop_free is -EBUSY while anything is queued, armed, subscribed
 *     or remotely posted.
 * Every iteration of the real loop polls and checks its quantum; some seeds
 * use a 1 ns quantum, so every callback ends a slice. Order must not depend
 * on where slices end, and the model has no slices at all.
 *
 * Operations inside callbacks: a top-level "on X: action" operation attaches
 * an action to handle X's callback for its next 1-3 runs, so cascades of
 * callbacks acting on each other (and on themselves: re-post, stop, re-arm,
 * close, free and re-create) are generated like any other operation, and a
 * failing sequence shrinks by dropping operations.
 *
 * A failure prints the seed, the first operation where the two disagree,
 * both traces, and a sequence shrunk by delta debugging (each attempt in a
 * child process, so crashes and hangs shrink too). Reproduce with
 *   LULL_MODEL_SEED=<seed> build/debug/tests/test_model replay
 * A crash or hang in the main process prints the same command.
 *
 * Environment: LULL_MODEL_SEEDS (seeds per group, for valgrind or a
 * longer run), LULL_SOAK_SECONDS (the soak case: random base seeds until the
 * time is up), LULL_MODEL_ALL_OPS=0 (skip the operations listed at
 * MODEL_ALL_OPS_DEFAULT). */
#include "check.h"

#include <errno.h>
#include <lull.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Handles per sequence: few enough that operations collide on the same
 * handles and instants all the time, which is where ordering rules bite. */
#define NT 8 /* tasks */
#define NM 8 /* timers */
#define NN 3 /* notifiers */
#define NL 6 /* listeners */
#define NP 3 /* pumps */

/* Entities: the handles whose callbacks are traced and can carry actions. */
enum {
    E_TASK = 0,
    E_TIMER = E_TASK + NT,
    E_LISTENER = E_TIMER + NM,
    E_PUMP = E_LISTENER + NL,
    NENT = E_PUMP + NP
};

/* Every operation is driven, including the two the model found broken
 * before they were fixed: a listener that left a pump by lull_listener_stop and
 * is reused (or freed) while that pump is open, and a pass that frees its
 * own pump, or closes and initialises it again. LULL_MODEL_ALL_OPS=0 skips
 * exactly those operations for one run (the generator is unchanged, so a
 * seed means the same sequence either way), to bisect a failure. */
#define MODEL_ALL_OPS_DEFAULT 1

/* Generated top-level operations per seed, before the teardown. */
#define SEQ_LEN 1000
/* Seeds per ctest case (LULL_MODEL_SEEDS overrides). Five groups of 256
 * sequences perform about 1.4 million operations on lull per build (at top
 * level and inside callbacks), in about 0.5 s per group in a debug build
 * and 1 s of CPU under ASan; see docs/RELIABILITY.md. */
#define SEEDS_PER_GROUP 256
/* A child running one attempt is ended after this much CPU time (a hang
 * counts as still failing): a sequence takes a few ms of CPU, and CPU time
 * does not stretch on a loaded machine. TRIAL_TIMEOUT_S of real time
 * catches a child that blocks. */
#define TRIAL_CPU_MS    150
#define TRIAL_TIMEOUT_S 10
/* Shrinking stops after this long and prints what it has, so that the
 * report fits in the case's ctest timeout. */
#define SHRINK_BUDGET_S 12
/* The main process gives up on one seed after this long: a hang. */
#define SEED_TIMEOUT_S 20

/* ------------------------------------------------------------ operations */

enum {
    /* Anywhere: top level or inside a callback. */
    A_POST,     /* a: task */
    A_CANCEL,   /* a: task */
    A_TSTART,   /* a: timer, x: delay, y: repeat */
    A_TSTOP,    /* a: timer */
    A_NOTIFY,   /* a: notifier */
    A_LISTEN,   /* a: listener, b: notifier */
    A_UNLISTEN, /* a: listener */
    A_WAKE,     /* a: pump */
    A_CLOSE,    /* a: pump */
    A_PINIT,    /* a: pump (only a closed one) */
    A_PLISTEN,  /* a: pump, b: notifier, c: listener */
    A_RESULT,   /* a pass's result: a: status, x: retry */
    A_STOP,     /* lull_loop_stop */
    A_YIELD,    /* lull_loop_should_yield (result ignored) */
    A_RECYCLE,  /* a: entity: stop it, free its memory, make a new one */
    /* Top level only. */
    A_SETTLE,
    A_ADVANCE,       /* x: ns */
    A_RUN,           /* lull_loop_run(DEFAULT) */
    A_POST_REMOTE,   /* a: task */
    A_NOTIFY_REMOTE, /* a: notifier */
    A_FREE,          /* lull_loop_free; on success a new loop */
    A_CLEAR,         /* forget every attached action (teardown) */
    A_KINDS
};

typedef struct action {
    uint8_t kind;
    uint8_t a, b, c;
    uint32_t x, y;
} action;

typedef struct op {
    action act;
    int8_t on;    /* -1: performed at top level; else attached to entity */
    uint8_t runs; /* attached: for this many runs of the callback */
} op;

static const char *const kind_names[A_KINDS] = {
    "post",       "cancel",       "timer_start", "timer_stop",
    "notify",     "listen",       "unlisten",    "pump_wake",
    "pump_close", "pump_init",    "pump_listen", "result",
    "stop",       "should_yield", "recycle",     "settle",
    "advance",    "run",          "post_remote", "notify_remote",
    "loop_free",  "clear_actions"};

static void entity_name(int e, char *buf, size_t len) {
    if (e < E_TIMER)
        snprintf(buf, len, "t%d", e - E_TASK);
    else if (e < E_LISTENER)
        snprintf(buf, len, "m%d", e - E_TIMER);
    else if (e < E_PUMP)
        snprintf(buf, len, "l%d", e - E_LISTENER);
    else
        snprintf(buf, len, "p%d", e - E_PUMP);
}

static void print_op(FILE *f, const op *o) {
    const action *a = &o->act;
    char who[32] = "";
    if (o->on >= 0) {
        char e[16];
        entity_name(o->on, e, sizeof e);
        snprintf(who, sizeof who, "on %s x%d: ", e, o->runs);
    }
    fprintf(f, "    %s%s", who, kind_names[a->kind]);
    char e[16];
    switch (a->kind) {
    case A_POST:
    case A_CANCEL:
    case A_POST_REMOTE:
        fprintf(f, " t%d", a->a);
        break;
    case A_TSTART:
        fprintf(f, " m%d delay=%u repeat=%u", a->a, a->x, a->y);
        break;
    case A_TSTOP:
        fprintf(f, " m%d", a->a);
        break;
    case A_NOTIFY:
    case A_NOTIFY_REMOTE:
        fprintf(f, " n%d", a->a);
        break;
    case A_LISTEN:
        fprintf(f, " l%d n%d", a->a, a->b);
        break;
    case A_UNLISTEN:
        fprintf(f, " l%d", a->a);
        break;
    case A_WAKE:
    case A_CLOSE:
    case A_PINIT:
        fprintf(f, " p%d", a->a);
        break;
    case A_PLISTEN:
        fprintf(f, " p%d n%d l%d", a->a, a->b, a->c);
        break;
    case A_RESULT:
        fprintf(f, " %s",
                a->a == LULL_PASS_QUIET   ? "quiet"
                : a->a == LULL_PASS_AGAIN ? "again"
                                          : "held");
        if (a->a == LULL_PASS_HELD) fprintf(f, " retry=%u", a->x);
        break;
    case A_RECYCLE:
        entity_name(a->a, e, sizeof e);
        fprintf(f, " %s", e);
        break;
    case A_ADVANCE:
        fprintf(f, " %u", a->x);
        break;
    default:
        break;
    }
    fputc('\n', f);
}

/* ---------------------------------------------------------------- driver */

/* What both sides are driven through. Each side has its own copy of the
 * driver's bookkeeping (below), so neither reads the other. */
typedef struct impl {
    const char *name;
    void (*post)(int t);
    void (*cancel)(int t);
    void (*timer_start)(int m, uint64_t delay, uint64_t repeat);
    void (*timer_stop)(int m);
    void (*notify)(int n);
    void (*listen)(int l, int n);
    void (*unlisten)(int l);
    void (*wake)(int p);
    void (*close)(int p);
    void (*pinit)(int p);
    void (*plisten)(int p, int n, int l);
    void (*stop)(void);
    void (*yield)(void);
    void (*recycle)(int e);
    int (*settle)(void);
    void (*advance)(uint64_t ns);
    void (*run)(void);
    void (*post_remote)(int t);
    void (*notify_remote)(int n);
    int (*loop_free)(void); /* on 0, a new loop with every handle fresh */
    /* Observations, relative to the loop's first lull_loop_now. */
    uint64_t (*now)(void);
    bool (*pending)(int t);
    bool (*active)(int m);
    uint64_t (*deadline)(int m);
    bool (*quiet)(int p);
    bool (*yield_outside)(void); /* lull_loop_should_yield outside a callback */
} impl;

/* One trace record: a callback, or a result of settle / loop_free. */
enum { REC_SETTLE = 1000, REC_FREE = 1001 };
typedef struct rec {
    int32_t what;      /* entity, or REC_* */
    uint32_t now;      /* virtual time at the callback */
    uint32_t deadline; /* a timer's own lull_timer_deadline; a result */
    uint32_t state;    /* the handle state digest at the callback */
} rec;

#define TRACE_MAX  2048 /* records kept per operation for printing */
#define SCRIPT_MAX 6    /* actions attached to one entity at a time */

typedef struct script {
    action act;
    int runs;
} script;

typedef struct side {
    const impl *im;
    script scripts[NENT][SCRIPT_MAX];
    int nscripts[NENT];
    /* What the driver knows from the calls it made (identical on both
     * sides while their traces agree): it keeps the operations valid. */
    bool subscribed[NL];
    int8_t pump_of[NL]; /* pump that subscribed it, until that pump closes */
    bool closed[NP];
    bool remote[NT]; /* posted remotely, maybe not taken yet */
    int in_pass;     /* pump whose pass is running, or -1 */
    int status;      /* the running pass's result */
    uint64_t retry;
    /* The current operation's trace: the first TRACE_MAX records, and a
     * count and hash of all of them. */
    rec trace[TRACE_MAX];
    int ntrace;
    uint64_t hash;
    /* Totals. */
    uint64_t actions;   /* operations performed (lull calls that act) */
    uint64_t inner;     /* ... of them inside callbacks */
    uint64_t callbacks; /* callbacks traced */
    uint64_t checks;    /* state observations compared */
} side;

static side SM, SR;         /* the model's and the real loop's */
static int current_op = -1; /* the operation being applied */
/* In a child: the operation it reached, in memory shared with the parent
 * (a crash or hang then shows where the sequence can be cut off). */
static volatile int *child_reached;
static bool all_ops = MODEL_ALL_OPS_DEFAULT;

static void trace_add(side *s, rec r) {
    if (s->ntrace < TRACE_MAX) s->trace[s->ntrace] = r;
    s->ntrace++;
    uint64_t v[4] = {(uint64_t)r.what, r.now, r.deadline, r.state};
    for (int i = 0; i < 4; i++)
        s->hash = (s->hash ^ v[i]) * 0x100000001b3ull;
}

/* Pending tasks, active timers and quiet pumps, as bits. */
static uint32_t digest(side *s) {
    uint32_t d = 0;
    int bit = 0;
    for (int t = 0; t < NT; t++, bit++)
        if (s->im->pending(t)) d |= 1u << bit;
    for (int m = 0; m < NM; m++, bit++)
        if (s->im->active(m)) d |= 1u << bit;
    for (int p = 0; p < NP; p++, bit++)
        if (s->im->quiet(p)) d |= 1u << bit;
    s->checks += NT + NM + NP;
    return d;
}

/* A listener that left an open pump by lull_listener_stop (see
 * MODEL_ALL_OPS_DEFAULT). */
static bool stale_listener(const side *s, int l) {
    return !all_ops && !s->subscribed[l] && s->pump_of[l] >= 0;
}

static void pump_closed(side *s, int p) {
    s->closed[p] = true;
    for (int l = 0; l < NL; l++) {
        if (s->pump_of[l] != p) continue;
        s->subscribed[l] = false;
        s->pump_of[l] = -1;
    }
}

static void perform(side *s, const action *a, bool in_callback) {
    const impl *im = s->im;
    s->actions++;
    s->inner += in_callback;
    switch (a->kind) {
    case A_POST:
        im->post(a->a);
        break;
    case A_CANCEL:
        im->cancel(a->a);
        break;
    case A_TSTART:
        im->timer_start(a->a, a->x, a->y);
        break;
    case A_TSTOP:
        im->timer_stop(a->a);
        break;
    case A_NOTIFY:
        im->notify(a->a);
        break;
    case A_LISTEN:
        if (s->subscribed[a->a] || stale_listener(s, a->a)) break;
        im->listen(a->a, a->b);
        s->subscribed[a->a] = true;
        s->pump_of[a->a] = -1;
        break;
    case A_UNLISTEN:
        im->unlisten(a->a); /* also when not subscribed: a no-op */
        s->subscribed[a->a] = false;
        break;
    case A_WAKE:
        im->wake(a->a);
        break; /* closed: a no-op */
    case A_CLOSE:
        im->close(a->a);
        pump_closed(s, a->a);
        break;
    case A_PINIT:
        if (!s->closed[a->a]) break; /* init only a pump nothing refers to */
        if (!all_ops && s->in_pass == a->a) break; /* MODEL_ALL_OPS_DEFAULT */
        im->pinit(a->a);
        s->closed[a->a] = false;
        break;
    case A_PLISTEN:
        if (s->subscribed[a->c] || stale_listener(s, a->c)) break;
        im->plisten(a->a, a->b, a->c); /* closed: a no-op */
        if (s->closed[a->a]) break;
        s->subscribed[a->c] = true;
        s->pump_of[a->c] = (int8_t)a->a;
        break;
    case A_RESULT:
        if (in_callback && s->in_pass >= 0) {
            s->status = a->a;
            s->retry = a->x;
        }
        break;
    case A_STOP:
        im->stop();
        break;
    case A_YIELD:
        im->yield();
        break;
    case A_RECYCLE: {
        int e = a->a;
        if (e < E_TIMER && s->remote[e - E_TASK]) break; /* still queued */
        if (e >= E_LISTENER && e < E_PUMP && !all_ops &&
            s->pump_of[e - E_LISTENER] >= 0)
            break; /* the pump may hold it: see MODEL_ALL_OPS_DEFAULT */
        if (e >= E_PUMP && !all_ops && s->in_pass == e - E_PUMP) break;
        im->recycle(e);
        if (e >= E_LISTENER && e < E_PUMP) {
            s->subscribed[e - E_LISTENER] = false;
            s->pump_of[e - E_LISTENER] = -1;
        }
        if (e >= E_PUMP) {
            pump_closed(s, e - E_PUMP);
            s->closed[e - E_PUMP] = false; /* a new, open pump */
        }
        break;
    }
    case A_SETTLE:
        trace_add(s, (rec){REC_SETTLE, 0, (uint32_t)im->settle(), 0});
        memset(s->remote, 0, sizeof s->remote); /* taken by its first pass */
        break;
    case A_ADVANCE:
        im->advance(a->x);
        memset(s->remote, 0, sizeof s->remote);
        break;
    case A_RUN:
        im->run();
        break; /* may not take remote posts */
    case A_POST_REMOTE:
        im->post_remote(a->a);
        s->remote[a->a] = true;
        break;
    case A_NOTIFY_REMOTE:
        im->notify_remote(a->a);
        break;
    case A_FREE: {
        int r = im->loop_free();
        trace_add(s, (rec){REC_FREE, 0, (uint32_t)r, 0});
        if (r != 0) break;
        for (int p = 0; p < NP; p++) {
            pump_closed(s, p);
            s->closed[p] = false; /* every pump initialised afresh */
        }
        memset(s->remote, 0, sizeof s->remote);
        break;
    }
    case A_CLEAR:
        memset(s->nscripts, 0, sizeof s->nscripts);
        s->actions--; /* not a lull call */
        break;
    default:
        check_fail(__FILE__, __LINE__, "action %d", a->kind);
    }
}

/* Every callback of either side comes here: trace it, then perform the
 * actions attached to it (each for one more run). */
static void on_callback(side *s, int e) {
    const impl *im = s->im;
    rec r = {e, (uint32_t)im->now(), 0, digest(s)};
    if (e >= E_TIMER && e < E_LISTENER)
        r.deadline = (uint32_t)im->deadline(e - E_TIMER);
    trace_add(s, r);
    s->callbacks++;
    int n = s->nscripts[e];
    script run[SCRIPT_MAX];
    memcpy(run, s->scripts[e], sizeof run);
    int keep = 0;
    for (int i = 0; i < n; i++)
        if (--s->scripts[e][i].runs > 0)
            s->scripts[e][keep++] = s->scripts[e][i];
    s->nscripts[e] = keep;
    for (int i = 0; i < n; i++)
        perform(s, &run[i].act, true);
}

static int on_pass(side *s, int p, uint64_t *retry_ns) {
    s->in_pass = p;
    s->status = LULL_PASS_QUIET;
    s->retry = 0;
    on_callback(s, E_PUMP + p);
    s->in_pass = -1;
    *retry_ns = s->retry;
    return s->status;
}

static void apply(side *s, const op *o) {
    if (o->on < 0) {
        perform(s, &o->act, false);
        return;
    }
    if (s->nscripts[o->on] == SCRIPT_MAX) return;
    s->scripts[o->on][s->nscripts[o->on]++] = (script){o->act, o->runs};
}

static void side_reset(side *s, const impl *im) {
    memset(s, 0, sizeof *s);
    s->im = im;
    s->in_pass = -1;
    memset(s->pump_of, -1, sizeof s->pump_of);
}

/* ----------------------------------------------------------------- model */

/* Every queue-able thing of the model is a node: tasks, timers, listener
 * calls, pump passes, pump retry timers, and the notifiers' remote raises.
 * A queue is not a list: a node records which queue it is in and when it
 * joined, and the front is the smallest stamp. Slow, and obviously FIFO. */
enum {
    N_TASK = 0,
    N_TIMER = N_TASK + NT,
    N_LCALL = N_TIMER + NM,
    N_PASS = N_LCALL + NL,
    N_RETRY = N_PASS + NP,
    N_RAISE = N_RETRY + NP,
    N_COUNT = N_RAISE + NN
};
enum { W_NONE, W_READY, W_DUE };

typedef struct mnode {
    int where;         /* W_*: the queue it is in */
    uint64_t stamp;    /* when it joined that queue */
    bool armed;        /* waiting for a deadline (the timer heap) */
    uint64_t deadline; /* when armed */
    uint64_t arm;      /* arm order, when armed */
    uint64_t repeat;   /* a timer's period, 0 = one-shot */
    bool remote;       /* posted from "another thread", not taken yet */
    uint64_t rstamp;   /* order of remote posts */
} mnode;

static struct {
    mnode n[N_COUNT];
    uint64_t now, stamps, arms, rstamps;
    uint64_t ran; /* callbacks of every kind */
    bool running, stop;
    int subs[NN][NL]; /* subscribers, oldest first */
    int nsubs[NN];
    int l_notifier[NL]; /* -1: not subscribed */
    int l_target[NL];   /* the node a raise posts */
    int l_pump[NL];     /* the pump it was subscribed for, or -1 */
    int listeners;
    bool closed[NP];
    uint32_t pump_gen[NP]; /* bumped by close: a pass's result then lapses */
} M;

static void m_queue(int i, int where) {
    M.n[i].where = where;
    M.n[i].stamp = ++M.stamps;
}

static void m_post(int i) {
    if (M.n[i].where == W_NONE) m_queue(i, W_READY); /* else keeps place */
}

static void m_unqueue(int i) {
    M.n[i].where = W_NONE;
}

static void m_arm(int i, uint64_t deadline) {
    M.n[i].armed = true;
    M.n[i].deadline = deadline;
    M.n[i].arm = ++M.arms;
}

static void m_timer_start_node(int i, uint64_t delay, uint64_t repeat) {
    M.n[i].armed = false;
    m_unqueue(i);
    M.n[i].repeat = repeat;
    if (delay == 0) {
        m_queue(i, W_READY); /* a turn: to the tail of the FIFO */
        if (repeat) m_arm(i, M.now + repeat);
    } else {
        m_arm(i, M.now + delay);
    }
}

static void m_timer_stop_node(int i) {
    M.n[i].armed = false;
    m_unqueue(i);
}

static void m_notify_node(int n) {
    for (int k = 0; k < M.nsubs[n]; k++)
        m_post(M.l_target[M.subs[n][k]]);
}

static void m_subscribe(int l, int n, int target, int pump) {
    M.subs[n][M.nsubs[n]++] = l;
    M.l_notifier[l] = n;
    M.l_target[l] = target;
    M.l_pump[l] = pump;
    M.listeners++;
}

static void m_unlisten(int l) {
    int n = M.l_notifier[l];
    if (n < 0) return;
    int k = 0;
    while (M.subs[n][k] != l)
        k++;
    memmove(&M.subs[n][k], &M.subs[n][k + 1],
            (size_t)(M.nsubs[n] - k - 1) * sizeof(int));
    M.nsubs[n]--;
    if (M.l_pump[l] < 0) m_unqueue(N_LCALL + l);
    M.l_notifier[l] = -1;
    M.l_pump[l] = -1;
    M.listeners--;
}

static void m_close(int p) {
    if (M.closed[p]) return;
    M.closed[p] = true;
    M.pump_gen[p]++;
    m_unqueue(N_PASS + p);
    m_timer_stop_node(N_RETRY + p);
    for (int l = 0; l < NL; l++)
        if (M.l_notifier[l] >= 0 && M.l_pump[l] == p) m_unlisten(l);
}

static void m_pass(int p) {
    if (M.closed[p]) return;
    m_unqueue(N_PASS + p);
    m_timer_stop_node(N_RETRY + p);
    uint32_t gen = M.pump_gen[p];
    uint64_t retry = 0;
    int status = on_pass(&SM, p, &retry);
    if (M.pump_gen[p] != gen || M.n[N_PASS + p].where != W_NONE) return;
    if (status == LULL_PASS_HELD && retry == 0) status = LULL_PASS_AGAIN;
    if (status == LULL_PASS_AGAIN)
        m_post(N_PASS + p);
    else if (status == LULL_PASS_HELD)
        m_timer_start_node(N_RETRY + p, retry, 0);
}

static void m_dispatch(int i) {
    M.ran++;
    if (i < N_TIMER)
        on_callback(&SM, E_TASK + i - N_TASK);
    else if (i < N_LCALL)
        on_callback(&SM, E_TIMER + i - N_TIMER);
    else if (i < N_PASS)
        on_callback(&SM, E_LISTENER + i - N_LCALL);
    else if (i < N_RETRY)
        m_pass(i - N_PASS);
    else if (i < N_RAISE)
        m_pass(i - N_RETRY);
    else
        m_notify_node(i - N_RAISE);
}

/* The front of a queue: the node that joined it first, or -1. */
static int m_front(int where) {
    int best = -1;
    for (int i = 0; i < N_COUNT; i++)
        if (M.n[i].where == where &&
            (best < 0 || M.n[i].stamp < M.n[best].stamp))
            best = i;
    return best;
}

/* The armed timer that fires first: earliest deadline, then arm order. */
static int m_first_armed(void) {
    int best = -1;
    for (int i = 0; i < N_COUNT; i++) {
        const mnode *x = &M.n[i];
        if (!x->armed) continue;
        if (best < 0 || x->deadline < M.n[best].deadline ||
            (x->deadline == M.n[best].deadline && x->arm < M.n[best].arm))
            best = i;
    }
    return best;
}

static void m_take_remote(void) {
    for (;;) {
        int best = -1;
        for (int i = 0; i < N_COUNT; i++)
            if (M.n[i].remote && (best < 0 || M.n[i].rstamp < M.n[best].rstamp))
                best = i;
        if (best < 0) return;
        M.n[best].remote = false;
        m_post(best);
    }
}

static bool m_remote_pending(void) {
    for (int i = 0; i < N_COUNT; i++)
        if (M.n[i].remote) return true;
    return false;
}

static bool m_ready(void) {
    return m_front(W_READY) >= 0 || m_front(W_DUE) >= 0;
}

/* Moves every timer due by now to the due queue, first-firing first. A
 * repeating one is armed for its next period at once; one still queued
 * from its last period is not queued twice. */
static void m_expire(void) {
    for (;;) {
        int i = m_first_armed();
        if (i < 0 || M.n[i].deadline > M.now) return;
        mnode *x = &M.n[i];
        x->armed = false;
        if (x->repeat) {
            uint64_t next = x->deadline + x->repeat;
            while (next <= M.now)
                next += x->repeat;
            m_arm(i, next);
        }
        if (x->where == W_NONE) m_queue(i, W_DUE);
    }
}

static void m_run_queue(int where) {
    for (int i; !M.stop && (i = m_front(where)) >= 0;) {
        m_unqueue(i);
        m_dispatch(i);
    }
}

static void m_iterate(void) {
    m_take_remote();
    m_expire();
    m_run_queue(W_DUE);
    m_run_queue(W_READY);
}

static void m_settle_loop(void) {
    for (;;) {
        uint64_t before = M.ran;
        m_iterate();
        if (M.stop) return;
        if (M.ran == before && !m_ready() && !m_remote_pending()) return;
    }
}

static void m_begin(void) {
    M.running = true;
    M.stop = false;
}

static void m_end(void) {
    M.running = false;
    M.stop = false;
}

static int m_settle(void) {
    m_begin();
    uint64_t before = M.ran;
    m_settle_loop();
    m_end();
    return (int)(M.ran - before);
}

static void m_advance(uint64_t ns) {
    m_begin();
    uint64_t target = M.now + ns;
    m_settle_loop();
    for (int i;
         !M.stop && (i = m_first_armed()) >= 0 && M.n[i].deadline <= target;) {
        if (M.n[i].deadline > M.now) M.now = M.n[i].deadline;
        m_settle_loop();
    }
    if (!M.stop) {
        M.now = target;
        m_settle_loop();
    }
    m_end();
}

static void m_run(void) {
    m_begin();
    while (!M.stop && m_ready())
        m_iterate();
    m_end();
}

static void m_fresh(void) {
    memset(M.n, 0, sizeof M.n);
    M.now = 0;
    memset(M.nsubs, 0, sizeof M.nsubs);
    for (int l = 0; l < NL; l++)
        M.l_notifier[l] = M.l_pump[l] = -1;
    M.listeners = 0;
    memset(M.closed, 0, sizeof M.closed);
}

static int m_loop_free(void) {
    for (int i = 0; i < N_COUNT; i++)
        if (M.n[i].where != W_NONE || M.n[i].armed || M.n[i].remote)
            return -EBUSY;
    if (M.listeners) return -EBUSY;
    m_fresh();
    return 0;
}

static void mi_post(int t) {
    m_post(N_TASK + t);
}
static void mi_cancel(int t) {
    m_unqueue(N_TASK + t);
}
static void mi_timer_start(int m, uint64_t delay, uint64_t repeat) {
    m_timer_start_node(N_TIMER + m, delay, repeat);
}
static void mi_timer_stop(int m) {
    m_timer_stop_node(N_TIMER + m);
}
static void mi_notify(int n) {
    m_notify_node(n);
}
static void mi_listen(int l, int n) {
    m_subscribe(l, n, N_LCALL + l, -1);
}
static void mi_unlisten(int l) {
    m_unlisten(l);
}
static void mi_wake(int p) {
    if (M.closed[p]) return;
    m_timer_stop_node(N_RETRY + p);
    m_post(N_PASS + p);
}
static void mi_close(int p) {
    m_close(p);
}
static void mi_pinit(int p) {
    M.closed[p] = false;
}
static void mi_plisten(int p, int n, int l) {
    if (!M.closed[p]) m_subscribe(l, n, N_PASS + p, p);
}
static void mi_stop(void) {
    if (M.running) M.stop = true;
}
static void mi_yield(void) {}
static void mi_recycle(int e) {
    if (e < E_TIMER)
        m_unqueue(N_TASK + e - E_TASK);
    else if (e < E_LISTENER)
        m_timer_stop_node(N_TIMER + e - E_TIMER);
    else if (e < E_PUMP)
        m_unlisten(e - E_LISTENER);
    else {
        m_close(e - E_PUMP);
        M.closed[e - E_PUMP] = false;
    }
}
static void m_post_remote_node(int i) {
    if (M.n[i].remote) return; /* coalesced */
    M.n[i].remote = true;
    M.n[i].rstamp = ++M.rstamps;
}
static void mi_post_remote(int t) {
    m_post_remote_node(N_TASK + t);
}
static void mi_notify_remote(int n) {
    m_post_remote_node(N_RAISE + n);
}
static uint64_t mi_now(void) {
    return M.now;
}
static bool mi_pending(int t) {
    return M.n[N_TASK + t].where != W_NONE;
}
static bool mi_active(int m) {
    const mnode *x = &M.n[N_TIMER + m];
    return x->armed || x->where != W_NONE;
}
static uint64_t mi_deadline(int m) {
    const mnode *x = &M.n[N_TIMER + m];
    return x->armed ? x->deadline : 0;
}
static bool mi_quiet(int p) {
    return M.n[N_PASS + p].where == W_NONE && !M.n[N_RETRY + p].armed &&
           M.n[N_RETRY + p].where == W_NONE;
}
static bool mi_yield_outside(void) {
    return false;
}

static const impl model_impl = {
    "model",     mi_post,         mi_cancel,   mi_timer_start, mi_timer_stop,
    mi_notify,   mi_listen,       mi_unlisten, mi_wake,        mi_close,
    mi_pinit,    mi_plisten,      mi_stop,     mi_yield,       mi_recycle,
    m_settle,    m_advance,       m_run,       mi_post_remote, mi_notify_remote,
    m_loop_free, mi_now,          mi_pending,  mi_active,      mi_deadline,
    mi_quiet,    mi_yield_outside};

/* ------------------------------------------------------------- real loop */

/* Handles live on the heap, so that "recycle" really frees them: under
 * ASan, the loop touching a handle after a callback freed it is caught. */
typedef struct rtask {
    lull_task task;
    int idx;
} rtask;
typedef struct rtimer {
    lull_timer timer;
    int idx;
} rtimer;
typedef struct rlistener {
    lull_listener l;
    int idx;
} rlistener;
typedef struct rpump {
    lull_pump pump;
    int idx;
} rpump;

static struct {
    lull_loop *loop;
    uint64_t t0;         /* lull_loop_now when the loop was made */
    uint64_t quantum_ns; /* this sequence's quantum (0 = default) */
    rtask *t[NT];
    rtimer *m[NM];
    rlistener *l[NL];
    rpump *p[NP];
    lull_notifier n[NN];
} R;

static void r_task_fn(lull_task *task) {
    on_callback(&SR, E_TASK + LULL_CONTAINER_OF(task, rtask, task)->idx);
}
static void r_timer_fn(lull_timer *timer) {
    on_callback(&SR, E_TIMER + LULL_CONTAINER_OF(timer, rtimer, timer)->idx);
}
static void r_listener_fn(lull_listener *l) {
    on_callback(&SR, E_LISTENER + LULL_CONTAINER_OF(l, rlistener, l)->idx);
}
static lull_pass_result r_pass_fn(lull_pump *pump, uint64_t *retry_ns) {
    return on_pass(&SR, LULL_CONTAINER_OF(pump, rpump, pump)->idx, retry_ns);
}

static void *r_alloc(size_t size) {
    void *p = calloc(1, size);
    if (!p) check_fail(__FILE__, __LINE__, "out of memory");
    return p;
}

static void r_new_task(int t) {
    R.t[t] = r_alloc(sizeof *R.t[t]);
    R.t[t]->idx = t;
    lull_task_init(&R.t[t]->task, r_task_fn);
}
static void r_new_timer(int m) {
    R.m[m] = r_alloc(sizeof *R.m[m]);
    R.m[m]->idx = m;
    lull_timer_init(R.loop, &R.m[m]->timer, r_timer_fn);
}
static void r_new_listener(int l) {
    R.l[l] = r_alloc(sizeof *R.l[l]); /* zeroed: never subscribed */
    R.l[l]->idx = l;
}
static void r_new_pump(int p) {
    R.p[p] = r_alloc(sizeof *R.p[p]);
    R.p[p]->idx = p;
    lull_pump_init(R.loop, &R.p[p]->pump, r_pass_fn);
}

static void r_new_loop(void) {
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL,
                           .quantum_ns = R.quantum_ns};
    CHECK_EQ(lull_loop_new(&R.loop, &o), 0);
    R.t0 = lull_loop_now(R.loop);
}

static void ri_post(int t) {
    lull_task_post(R.loop, &R.t[t]->task);
}
static void ri_cancel(int t) {
    lull_task_cancel(&R.t[t]->task);
}
static void ri_timer_start(int m, uint64_t delay, uint64_t repeat) {
    lull_timer_start(&R.m[m]->timer, delay, repeat);
}
static void ri_timer_stop(int m) {
    lull_timer_stop(&R.m[m]->timer);
}
static void ri_notify(int n) {
    lull_notifier_raise(&R.n[n]);
}
static void ri_listen(int l, int n) {
    lull_listener_start(R.loop, &R.n[n], &R.l[l]->l, r_listener_fn);
}
static void ri_unlisten(int l) {
    lull_listener_stop(&R.l[l]->l);
}
static void ri_wake(int p) {
    lull_pump_wake(&R.p[p]->pump);
}
static void ri_close(int p) {
    lull_pump_close(&R.p[p]->pump);
}
static void ri_pinit(int p) {
    lull_pump_init(R.loop, &R.p[p]->pump, r_pass_fn);
}
static void ri_plisten(int p, int n, int l) {
    lull_pump_listen(&R.p[p]->pump, &R.n[n], &R.l[l]->l);
}
static void ri_stop(void) {
    lull_loop_stop(R.loop);
}
static void ri_yield(void) {
    (void)lull_loop_should_yield(R.loop);
}
static void ri_recycle(int e) {
    if (e < E_TIMER) {
        int t = e - E_TASK;
        lull_task_cancel(&R.t[t]->task);
        free(R.t[t]);
        r_new_task(t);
    } else if (e < E_LISTENER) {
        int m = e - E_TIMER;
        lull_timer_stop(&R.m[m]->timer);
        free(R.m[m]);
        r_new_timer(m);
    } else if (e < E_PUMP) {
        int l = e - E_LISTENER;
        lull_listener_stop(&R.l[l]->l);
        free(R.l[l]);
        r_new_listener(l);
    } else {
        int p = e - E_PUMP;
        lull_pump_close(&R.p[p]->pump);
        free(R.p[p]);
        r_new_pump(p);
    }
}
static int ri_settle(void) {
    return lull_loop_settle(R.loop);
}
static void ri_advance(uint64_t ns) {
    lull_loop_advance(R.loop, ns);
}
static void ri_run(void) {
    CHECK_EQ(lull_loop_run(R.loop, LULL_RUN_DEFAULT), 0);
}
static void ri_post_remote(int t) {
    lull_task_post_remote(R.loop, &R.t[t]->task);
}
static void ri_notify_remote(int n) {
    lull_notifier_raise_remote(R.loop, &R.n[n]);
}
static int ri_loop_free(void) {
    int r = lull_loop_free(R.loop);
    if (r != 0) return r;
    r_new_loop();
    for (int m = 0; m < NM; m++)
        lull_timer_init(R.loop, &R.m[m]->timer, r_timer_fn);
    for (int p = 0; p < NP; p++)
        lull_pump_init(R.loop, &R.p[p]->pump, r_pass_fn);
    return 0;
}
static uint64_t ri_now(void) {
    return lull_loop_now(R.loop) - R.t0;
}
static bool ri_pending(int t) {
    return lull_task_pending(&R.t[t]->task);
}
static bool ri_active(int m) {
    return lull_timer_active(&R.m[m]->timer);
}
static uint64_t ri_deadline(int m) {
    uint64_t d = lull_timer_deadline(&R.m[m]->timer);
    return d ? d - R.t0 : 0;
}
static bool ri_quiet(int p) {
    return lull_pump_quiet(&R.p[p]->pump);
}
static bool ri_yield_outside(void) {
    return lull_loop_should_yield(R.loop);
}

static const impl real_impl = {
    "lull",        ri_post,   ri_cancel,       ri_timer_start,
    ri_timer_stop, ri_notify, ri_listen,       ri_unlisten,
    ri_wake,       ri_close,  ri_pinit,        ri_plisten,
    ri_stop,       ri_yield,  ri_recycle,      ri_settle,
    ri_advance,    ri_run,    ri_post_remote,  ri_notify_remote,
    ri_loop_free,  ri_now,    ri_pending,      ri_active,
    ri_deadline,   ri_quiet,  ri_yield_outside};

static void real_begin(uint64_t quantum_ns) {
    memset(&R, 0, sizeof R);
    R.quantum_ns = quantum_ns;
    r_new_loop();
    for (int t = 0; t < NT; t++)
        r_new_task(t);
    for (int m = 0; m < NM; m++)
        r_new_timer(m);
    for (int l = 0; l < NL; l++)
        r_new_listener(l);
    for (int p = 0; p < NP; p++)
        r_new_pump(p);
    for (int n = 0; n < NN; n++)
        lull_notifier_init(&R.n[n]);
}

/* Takes everything down whatever state the sequence left (it may have been
 * cut short), and frees it. Returns lull_loop_free's result. */
static int real_end(void) {
    memset(SR.nscripts, 0, sizeof SR.nscripts);
    for (int p = 0; p < NP; p++)
        lull_pump_close(&R.p[p]->pump);
    for (int l = 0; l < NL; l++)
        lull_listener_stop(&R.l[l]->l);
    for (int m = 0; m < NM; m++)
        lull_timer_stop(&R.m[m]->timer);
    for (int t = 0; t < NT; t++)
        lull_task_cancel(&R.t[t]->task);
    lull_loop_settle(R.loop); /* remote posts: taken, run with no actions */
    for (int m = 0; m < NM; m++)
        lull_timer_stop(&R.m[m]->timer);
    for (int p = 0; p < NP; p++)
        lull_pump_close(&R.p[p]->pump);
    int r = lull_loop_free(R.loop);
    for (int t = 0; t < NT; t++)
        free(R.t[t]);
    for (int m = 0; m < NM; m++)
        free(R.m[m]);
    for (int l = 0; l < NL; l++)
        free(R.l[l]);
    for (int p = 0; p < NP; p++)
        free(R.p[p]);
    return r;
}

/* ------------------------------------------------------------- generator */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int below(rng *r, int n) {
    return (int)(rng_next(r) % (uint64_t)n);
}

static int weighted(rng *r, const int *w, int n) {
    int total = 0;
    for (int i = 0; i < n; i++)
        total += w[i];
    int x = below(r, total);
    for (int i = 0; i < n; i++) {
        if (x < w[i]) return i;
        x -= w[i];
    }
    return n - 1;
}

/* Small sets of times, so that deadlines coincide often: same-instant
 * timers are where arm order matters. Zero delays are common (turns). */
static const uint32_t delays[] = {0, 0, 0, 0, 1, 2, 3, 5, 8, 10, 20};
static const uint32_t repeats[] = {0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 5, 10};
static const uint32_t advances[] = {0, 1, 1, 2, 3, 5, 8, 13, 30};
static const uint32_t retries[] = {0, 1, 2, 5, 10};
#define PICK(r, arr) (arr)[below((r), (int)(sizeof(arr) / sizeof(arr)[0]))]

/* Weights of top-level operations, and of actions attached to callbacks
 * (index = A_*; A_KINDS is "attach an action"). */
static const int top_weights[A_KINDS + 1] = {
    [A_POST] = 8,   [A_CANCEL] = 3,      [A_TSTART] = 9,        [A_TSTOP] = 3,
    [A_NOTIFY] = 5, [A_LISTEN] = 3,      [A_UNLISTEN] = 2,      [A_WAKE] = 4,
    [A_CLOSE] = 1,  [A_PINIT] = 2,       [A_PLISTEN] = 2,       [A_STOP] = 1,
    [A_YIELD] = 1,  [A_RECYCLE] = 2,     [A_SETTLE] = 7,        [A_ADVANCE] = 9,
    [A_RUN] = 2,    [A_POST_REMOTE] = 2, [A_NOTIFY_REMOTE] = 2, [A_FREE] = 1,
    [A_KINDS] = 30};
static const int callback_weights[A_KINDS] = {
    [A_POST] = 10,  [A_CANCEL] = 4, [A_TSTART] = 10,  [A_TSTOP] = 4,
    [A_NOTIFY] = 6, [A_LISTEN] = 2, [A_UNLISTEN] = 2, [A_WAKE] = 5,
    [A_CLOSE] = 1,  [A_PINIT] = 1,  [A_PLISTEN] = 1,  [A_STOP] = 1,
    [A_YIELD] = 2,  [A_RECYCLE] = 2};

/* A handle index of kind [base, base + n): the entity `self` itself a third
 * of the time when it is of that kind (re-post, stop, re-arm, close self). */
static uint8_t handle(rng *r, int self, int base, int n) {
    if (self >= base && self < base + n && below(r, 3) == 0)
        return (uint8_t)(self - base);
    return (uint8_t)below(r, n);
}

static action gen_action(rng *r, int kind, int self) {
    action a = {.kind = (uint8_t)kind};
    switch (kind) {
    case A_POST:
    case A_CANCEL:
    case A_POST_REMOTE:
        a.a = handle(r, self, E_TASK, NT);
        break;
    case A_TSTART:
        a.a = handle(r, self, E_TIMER, NM);
        a.x = PICK(r, delays);
        a.y = PICK(r, repeats);
        break;
    case A_TSTOP:
        a.a = handle(r, self, E_TIMER, NM);
        break;
    case A_NOTIFY:
    case A_NOTIFY_REMOTE:
        a.a = (uint8_t)below(r, NN);
        break;
    case A_LISTEN:
        a.a = handle(r, self, E_LISTENER, NL);
        a.b = (uint8_t)below(r, NN);
        break;
    case A_UNLISTEN:
        a.a = handle(r, self, E_LISTENER, NL);
        break;
    case A_WAKE:
    case A_CLOSE:
    case A_PINIT:
        a.a = handle(r, self, E_PUMP, NP);
        break;
    case A_PLISTEN:
        a.a = handle(r, self, E_PUMP, NP);
        a.b = (uint8_t)below(r, NN);
        a.c = (uint8_t)below(r, NL);
        break;
    case A_RESULT:
        a.a = (uint8_t)below(r, 3);
        a.x = PICK(r, retries);
        break;
    case A_RECYCLE:
        a.a = self >= 0 && below(r, 3) == 0 ? (uint8_t)self
                                            : (uint8_t)below(r, NENT);
        break;
    case A_ADVANCE:
        a.x = PICK(r, advances);
        break;
    default:
        break;
    }
    return a;
}

/* The teardown every sequence ends with: nothing may be left behind, so
 * lull_loop_free must succeed on both sides. */
static int gen_teardown(op *ops) {
    int n = 0;
    ops[n++] = (op){{.kind = A_CLEAR}, -1, 0};
    ops[n++] = (op){{.kind = A_SETTLE}, -1, 0};
    for (int p = 0; p < NP; p++)
        ops[n++] = (op){{.kind = A_CLOSE, .a = (uint8_t)p}, -1, 0};
    for (int l = 0; l < NL; l++)
        ops[n++] = (op){{.kind = A_UNLISTEN, .a = (uint8_t)l}, -1, 0};
    for (int m = 0; m < NM; m++)
        ops[n++] = (op){{.kind = A_TSTOP, .a = (uint8_t)m}, -1, 0};
    for (int t = 0; t < NT; t++)
        ops[n++] = (op){{.kind = A_CANCEL, .a = (uint8_t)t}, -1, 0};
    ops[n++] = (op){{.kind = A_FREE}, -1, 0};
    return n;
}
#define TEARDOWN_LEN (3 + NP + NL + NM + NT)

static int generate(uint64_t seed, op *ops, int len) {
    rng r = {seed};
    for (int i = 0; i < len; i++) {
        int k = weighted(&r, top_weights, A_KINDS + 1);
        if (k != A_KINDS) {
            ops[i] = (op){gen_action(&r, k, -1), -1, 0};
            continue;
        }
        int on = below(&r, NENT);
        int ak = on >= E_PUMP && below(&r, 5) < 2
                     ? A_RESULT
                     : weighted(&r, callback_weights, A_KINDS);
        uint8_t runs = (uint8_t)(below(&r, 4) == 0 ? 2 + below(&r, 2) : 1);
        ops[i] = (op){gen_action(&r, ak, on), (int8_t)on, runs};
    }
    return len + gen_teardown(ops + len);
}

/* A seed chooses the quantum too: the default, or 1 ns (every callback
 * ends its slice), or 1 us. Ordering must not change. */
static uint64_t seed_quantum(uint64_t seed) {
    static const uint64_t q[] = {0, 1, 1000};
    return q[(seed >> 7) % 3];
}

/* ----------------------------------------------------------------- runner */

static void print_rec(const rec *r) {
    char e[16];
    if (r->what == REC_SETTLE) {
        fprintf(stderr, "settle returned %d", (int)r->deadline);
    } else if (r->what == REC_FREE) {
        fprintf(stderr, "loop_free returned %d", (int)r->deadline);
    } else {
        entity_name(r->what, e, sizeof e);
        fprintf(stderr, "%s at %u", e, r->now);
        if (r->what >= E_TIMER && r->what < E_LISTENER)
            fprintf(stderr, " deadline %u", r->deadline);
        fprintf(stderr, " state %05x", r->state);
    }
}

static void print_traces(void) {
    int n = SM.ntrace > SR.ntrace ? SM.ntrace : SR.ntrace;
    int first = 0;
    while (first < n && first < SM.ntrace && first < SR.ntrace &&
           first < TRACE_MAX &&
           memcmp(&SM.trace[first], &SR.trace[first], sizeof(rec)) == 0)
        first++;
    fprintf(stderr, "  callbacks and results (model | lull), %d | %d:\n",
            SM.ntrace, SR.ntrace);
    int from = first > 8 ? first - 8 : 0;
    for (int i = from; i < n && i < first + 8 && i < TRACE_MAX; i++) {
        fprintf(stderr, "  %c %4d  ", i == first ? '>' : ' ', i);
        if (i < SM.ntrace)
            print_rec(&SM.trace[i]);
        else
            fprintf(stderr, "-");
        fprintf(stderr, "  |  ");
        if (i < SR.ntrace)
            print_rec(&SR.trace[i]);
        else
            fprintf(stderr, "-");
        fputc('\n', stderr);
    }
    fprintf(stderr, "  (state: bits 0-7 tasks pending, 8-15 timers active, "
                    "16-18 pumps quiet)\n");
}

/* Compares the sides after an operation; prints the difference if loud. */
static bool agree(bool loud) {
    bool same = SM.ntrace == SR.ntrace && SM.hash == SR.hash;
    const char *what = "the callbacks";
    if (same) {
        uint64_t mn = SM.im->now(), rn = SR.im->now();
        uint32_t md = digest(&SM), rd = digest(&SR);
        same = mn == rn && md == rd;
        what = "time or handle state";
        for (int m = 0; same && m < NM; m++)
            same = SM.im->deadline(m) == SR.im->deadline(m);
        SM.checks += NM;
        SR.checks += NM;
        if (same && SR.im->yield_outside()) {
            same = false;
            what = "lull_loop_should_yield outside a callback";
        }
        if (!same && loud)
            fprintf(stderr,
                    "  now %" PRIu64 " | %" PRIu64 ", state %05x | %05x\n", mn,
                    rn, md, rd);
        if (!same && loud)
            for (int m = 0; m < NM; m++)
                fprintf(stderr, "  m%d deadline %" PRIu64 " | %" PRIu64 "\n", m,
                        SM.im->deadline(m), SR.im->deadline(m));
    }
    if (!same && loud) {
        fprintf(stderr, "  model and lull differ in %s\n", what);
        print_traces();
    }
    return same;
}

/* Runs ops on both sides in lockstep. Returns the index of the first
 * operation after which they differ, or -1. */
static int run_ops(const op *ops, int n, uint64_t quantum_ns, bool loud) {
    side_reset(&SM, &model_impl);
    side_reset(&SR, &real_impl);
    memset(&M, 0, sizeof M);
    m_fresh();
    real_begin(quantum_ns);
    int fail = -1;
    for (int i = 0; i < n && fail < 0; i++) {
        current_op = i;
        if (child_reached) *child_reached = i;
        SM.ntrace = SR.ntrace = 0;
        SM.hash = SR.hash = 0;
        apply(&SM, &ops[i]);
        apply(&SR, &ops[i]);
        if (!agree(loud)) {
            fail = i;
            if (loud) {
                fprintf(stderr, "  at operation %d:\n", i);
                print_op(stderr, &ops[i]);
            }
        }
    }
    current_op = -1;
    int freed = real_end();
    if (fail < 0 && freed != 0) {
        if (loud) fprintf(stderr, "  lull_loop_free at the end: %d\n", freed);
        fail = n;
    }
    return fail;
}

static void child_on_alarm(int sig) {
    (void)sig;
    char msg[80];
    int len = current_op >= 0
                  ? snprintf(msg, sizeof msg, "model: hung in operation %d\n",
                             current_op)
                  : snprintf(msg, sizeof msg,
                             "model: hung taking everything down after the "
                             "last operation\n");
    ssize_t ignored = write(2, msg, (size_t)len);
    (void)ignored;
    _exit(3);
}

/* A child process runs one attempt: no crash note of the parent's, a hang
 * ends it after TRIAL_TIMEOUT_S. */
static void child_mode(void) {
    int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], SIG_DFL);
    signal(SIGALRM, child_on_alarm);
    signal(SIGPROF, child_on_alarm);
    alarm(TRIAL_TIMEOUT_S);
    struct itimerval cpu = {{0, 0}, {0, TRIAL_CPU_MS * 1000}};
    setitimer(ITIMER_PROF, &cpu, NULL);
}

/* Runs ops in a child (loud: printing the difference). Returns -1 when
 * they pass, else the index of the operation where they failed. */
static int run_in_child(const op *ops, int n, uint64_t quantum_ns, bool loud) {
    if (!child_reached) {
        child_reached =
            mmap(NULL, sizeof *child_reached, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (child_reached == MAP_FAILED)
            check_fail(__FILE__, __LINE__, "mmap: %d", errno);
    }
    *child_reached = n - 1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) check_fail(__FILE__, __LINE__, "fork: %d", errno);
    if (pid == 0) {
        child_mode();
        if (!loud) freopen("/dev/null", "w", stderr); /* sanitizers too */
        _exit(run_ops(ops, n, quantum_ns, loud) >= 0 ? 1 : 0);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return -1;
    if (loud && WIFSIGNALED(status))
        fprintf(stderr, "model: died by signal %d in operation %d\n",
                WTERMSIG(status), *child_reached);
    return *child_reached < n ? *child_reached : n - 1;
}

/* Delta debugging: drop chunks of operations, halving the chunk when no
 * chunk of that size can go, while the sequence still fails; a failure
 * also cuts off everything after the operation that failed. */
static int shrink(op *ops, int n, uint64_t quantum_ns, uint64_t budget_s) {
    op *trial = malloc((size_t)n * sizeof *trial);
    if (!trial) check_fail(__FILE__, __LINE__, "out of memory");
    int tries = 0;
    uint64_t end = check_clock_ns() + budget_s * 1000000000ull;
    for (int chunk = n / 2; chunk >= 1 && check_clock_ns() < end;) {
        bool dropped = false;
        for (int at = 0; at < n && check_clock_ns() < end;) {
            int cut = at + chunk <= n ? chunk : n - at;
            memcpy(trial, ops, (size_t)at * sizeof *ops);
            memcpy(trial + at, ops + at + cut,
                   (size_t)(n - at - cut) * sizeof *ops);
            tries++;
            int failed = n - cut > 0
                             ? run_in_child(trial, n - cut, quantum_ns, false)
                             : -1;
            if (failed >= 0) {
                n = failed + 1;
                memcpy(ops, trial, (size_t)n * sizeof *ops);
                dropped = true;
            } else {
                at += cut;
            }
        }
        if (!dropped) chunk /= 2;
        if (chunk > n / 2) chunk = n / 2;
    }
    free(trial);
    fprintf(stderr, "model: shrunk in %d attempts%s\n", tries,
            check_clock_ns() < end ? "" : " (out of time: not minimal)");
    return n;
}

/* Reports a failing seed: where it failed, then a shrunk sequence and what
 * that one shows. */
static void report_failure(uint64_t seed, const char *argv0,
                           uint64_t budget_s) {
    static op ops[SEQ_LEN + TEARDOWN_LEN];
    int n = generate(seed, ops, SEQ_LEN);
    uint64_t q = seed_quantum(seed);
    fprintf(stderr,
            "model: seed 0x%016" PRIx64 " (quantum %" PRIu64
            " ns) fails; reproduce with\n  LULL_MODEL_SEED=0x%016" PRIx64
            "%s %s replay\n",
            seed, q, seed, all_ops ? "" : " LULL_MODEL_ALL_OPS=0", argv0);
    int at = run_in_child(ops, n, q, true);
    if (at < 0) {
        fprintf(stderr, "model: seed 0x%016" PRIx64 " passes here\n", seed);
        return;
    }
    n = shrink(ops, at + 1, q, budget_s);
    fprintf(stderr, "model: shrunk to %d operations:\n", n);
    for (int i = 0; i < n; i++)
        print_op(stderr, &ops[i]);
    fprintf(stderr, "model: what the shrunk sequence does:\n");
    run_in_child(ops, n, q, true);
}

/* A crash or hang in the main process cannot shrink there: say how to
 * reproduce it (the replay case shrinks in children). */
static char crash_note[256];
static void on_fatal(int sig) {
    ssize_t ignored = write(2, crash_note, strlen(crash_note));
    (void)ignored;
    signal(sig, SIG_DFL);
    raise(sig);
}

static const char *program = "test_model";

static void note_seed(uint64_t seed) {
    snprintf(crash_note, sizeof crash_note,
             "\nmodel: died or hung in seed 0x%016" PRIx64
             "; reproduce and shrink with\n  LULL_MODEL_SEED=0x%016" PRIx64
             "%s %s replay\n",
             seed, seed, all_ops ? "" : " LULL_MODEL_ALL_OPS=0", program);
}

static void install_handlers(void) {
    const char *env = getenv("LULL_MODEL_ALL_OPS");
    if (env && *env) all_ops = *env == '1';
    char path[256];
    ssize_t len = readlink("/proc/self/exe", path, sizeof path - 1);
    if (len > 0) {
        path[len] = 0;
        program = strdup(path);
    }
    int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGALRM};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], on_fatal);
}

typedef struct totals {
    uint64_t seeds;     /* sequences run */
    uint64_t ops;       /* top-level operations, attachments included */
    uint64_t actions;   /* operations performed on lull */
    uint64_t inner;     /* ... of them inside callbacks */
    uint64_t callbacks; /* callbacks compared */
    uint64_t checks;    /* handle states compared */
} totals;

/* Runs one seed in process; on a difference, reports and fails the case. */
static void run_seed(uint64_t seed, totals *tot) {
    static op ops[SEQ_LEN + TEARDOWN_LEN];
    int n = generate(seed, ops, SEQ_LEN);
    note_seed(seed);
    alarm(SEED_TIMEOUT_S);
    int at = run_ops(ops, n, seed_quantum(seed), false);
    alarm(0);
    if (at >= 0) {
        report_failure(seed, program, SHRINK_BUDGET_S);
        check_fail(__FILE__, __LINE__, "lull differs from the model");
    }
    tot->seeds++;
    tot->ops += (uint64_t)n;
    tot->actions += SR.actions;
    tot->inner += SR.inner;
    tot->callbacks += SR.callbacks;
    tot->checks += SR.checks;
}

static void print_totals(const char *what, const totals *t, double secs) {
    printf("%s: %" PRIu64 " sequences of %" PRIu64
           " operations in all; %" PRIu64
           " operations performed on lull (%" PRIu64
           " inside callbacks); %" PRIu64 " callbacks and %" PRIu64
           " handle states compared with the model; %.2f s\n",
           what, t->seeds, t->ops, t->actions, t->inner, t->callbacks,
           t->checks, secs);
}

static uint64_t env_u64(const char *name, uint64_t fallback) {
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 0) : fallback;
}

static double seconds_since(uint64_t t0) {
    return (double)(check_clock_ns() - t0) / 1e9;
}

/* Under valgrind (which preloads its vgpreload libraries), code runs 20-50
 * times slower: a quarter of the seeds keeps a case near 5 s there. */
static bool under_valgrind(void) {
    const char *p = getenv("LD_PRELOAD");
    return p && strstr(p, "vgpreload");
}

/* Group g runs seeds (g << 32) + i: fixed, so a failure in CI reproduces. */
static void run_group(uint64_t g) {
    install_handlers();
    uint64_t seeds =
        env_u64("LULL_MODEL_SEEDS",
                under_valgrind() ? SEEDS_PER_GROUP / 4 : SEEDS_PER_GROUP);
    totals t = {0};
    uint64_t t0 = check_clock_ns();
    for (uint64_t i = 0; i < seeds; i++)
        run_seed((g << 32) + i, &t);
    char what[32];
    snprintf(what, sizeof what, "group %" PRIu64, g);
    print_totals(what, &t, seconds_since(t0));
}

TEST(random_ops_0) {
    run_group(0);
}

TEST(random_ops_1) {
    run_group(1);
}

TEST(random_ops_2) {
    run_group(2);
}

TEST(random_ops_3) {
    run_group(3);
}

TEST(random_ops_4) {
    run_group(4);
}

/* Not ctest cases (no TEST line): run by name. */

/* `make soak SECONDS=N`: fresh seeds from the clock until time is up. */
CHECK_REGISTER_(soak) {
    install_handlers();
    uint64_t secs = env_u64("LULL_SOAK_SECONDS", 0);
    if (!secs) {
        printf("soak: set LULL_SOAK_SECONDS\n");
        return;
    }
    uint64_t base = check_clock_ns() & ~0xffffffull;
    printf("soak: seeds from 0x%016" PRIx64 "\n", base);
    fflush(stdout);
    totals t = {0};
    uint64_t t0 = check_clock_ns(), end = t0 + secs * 1000000000ull;
    for (uint64_t i = 0; check_clock_ns() < end; i++)
        run_seed(base + i, &t);
    print_totals("soak", &t, seconds_since(t0));
}

/* LULL_MODEL_SEED=<seed> test_model replay: shows and shrinks one seed. */
CHECK_REGISTER_(replay) {
    install_handlers();
    const char *v = getenv("LULL_MODEL_SEED");
    if (!v) check_fail(__FILE__, __LINE__, "set LULL_MODEL_SEED");
    report_failure(strtoull(v, NULL, 0), program,
                   env_u64("LULL_MODEL_SHRINK_SECONDS", 300));
}
