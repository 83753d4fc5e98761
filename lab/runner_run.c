/* lull's transport of the `runner` scenario (lab/runner.h): N runner
 * processes, each spawned with lull_process_spawn, each session's events
 * read from its runner's stdout and handed to a driver by a lull_pump.
 * Two modes, one delivery pass; only what wakes the pass differs:
 *
 *   poll    the polling pump, setInterval(pass, 5) on a runtime
 *           whose timers are whole milliseconds: each session's 5 ms poll
 *           falls on one of five 1 ms slots, and a slot's polls share one
 *           timer and one wakeup (as lab/pump_run.c's poll_ms_grid). The
 *           pipe is not watched: the runner's commit is seen at the next
 *           poll.
 *   notify  the after: the runner's commit is a write to the pipe, the
 *           pipe turns readable, and its lull_io callback wakes the pump;
 *           the pass runs in the next task, never inside the readiness
 *           callback, and several commits before it share one pass.
 *
 * The pass is the transport's one reader of the runner's committed
 * events: one read() of the pipe (a state read, counted) and every whole
 * record in it to the driver, which checks each one (the runner's index,
 * the next sequence number, the checksum, the terminal flag on the last)
 * and records its wait: the runner's CLOCK_MONOTONIC commit stamp to the
 * pass's clock read. The runners' stdin is a lull_stream over a pipe (the
 * start command goes down it; closing it is the runners' signal to exit).
 *
 * The transport's background components and their contract rows, notify
 * mode: trigger, the pipe's readiness; source of truth, the
 * pipe's contents; pending work, unread bytes; next deadline, none (a
 * pass that fills its buffer continues in the next task); quiet, no timer
 * and no task while the pipe is empty. Poll mode has, by design, a timer
 * per slot that runs whatever the pipe holds: that is what is measured.
 *
 * The floor (RUNNER_FLOOR) spawns, readies and reaps its runners the same
 * way, but waits for the idle window and the stream in epoll_wait itself,
 * reading each pipe the moment it is ready, with no loop, no task and no
 * pump: what is left of a wait there is the kernel's.
 *
 * One thread: the caller's, which runs the loop phase by phase (ready,
 * idle window, stream, shutdown), each phase ended by lull_loop_stop. */
#include "runner.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <lull.h>

#define BATCH     64 /* records per read: 2 KiB, a turn of 40 fits */
#define MAX_SLOTS 16

typedef struct rrun rrun;

typedef struct rsess {
    rrun *run;
    uint32_t index;
    lull_process proc;       /* the runner */
    lull_stream in;          /* its stdin: start commands; closed to stop it */
    lull_frame go;           /* the start command (caller-owned frame) */
    runner_go go_cmd;        /* ... its bytes */
    int out;                 /* its stdout's read end (non-blocking); -1 */
    lull_io out_io;          /* notify: readiness wakes the pump */
    lull_pump pump;          /* runs deliver_pass */
    struct rsess *slot_next; /* poll: the next session of its slot */
    unsigned char part[RUNNER_RECORD]; /* a record cut across two reads */
    size_t npart;
    uint32_t next;  /* the event the driver expects next */
    uint64_t reads; /* read() calls of the pass: state reads */
    bool ready;     /* its READY record arrived */
    bool running;   /* spawned, on_exit not yet run */
    bool in_open;   /* its stdin stream's close callback not yet run */
    bool io_on;     /* out_io started */
} rsess;

typedef struct slot {
    lull_timer timer;
    rsess *first;
} slot;

enum { PH_READY, PH_IDLE, PH_STREAM, PH_SHUTDOWN };

struct rrun {
    const runner_params *p;
    int mode;
    int phase;
    lull_loop *loop;
    rsess *s;
    int n;         /* sessions spawned */
    int nready;    /* READY records read */
    int done;      /* terminal events delivered */
    int exited;    /* on_exit calls */
    int in_closed; /* stdin streams' close callbacks */
    int killed;    /* shutdown deadline: runners sent SIGKILL */
    slot slots[MAX_SLOTS];
    int nslots;
    lull_timer deadline;   /* a phase that cannot finish (a bug) */
    lull_timer window_end; /* ends the idle window */
    bool timed_out;
    double *wait; /* every event's wait, ns */
    size_t nwait, cap;
    int errors;
    char why[256];
    /* the idle window: */
    uint64_t t0, t1, cpu0, cpu1, cs0, cs1, reads0, reads1;
    /* the stream: the process's CPU and the CPUs' ticks at its start */
    uint64_t stream_cpu0;
    uint64_t stream_reads0; /* the sessions' reads before the stream */
    runner_stat stat0;
};

static void fail(rrun *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A check failed or a runner misbehaved: remembered (the first one's
 * words kept) and the phase ended at once; the shutdown goes on until
 * every runner is reaped. */
static void fail(rrun *r, const char *fmt, ...) {
    if (r->errors++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->why, sizeof r->why, fmt, ap);
        va_end(ap);
    }
    if (r->phase != PH_SHUTDOWN) lull_loop_stop(r->loop);
}

static uint64_t process_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------ driver */

/* The delivered-data checks of one event record: 0, or -EPROTO with why. */
static int check_event(const runner_record *rec, uint32_t index, uint32_t next,
                       int events, char *why, size_t size) {
    if (rec->magic != RUNNER_MAGIC) {
        snprintf(why, size, "a record without the magic number (0x%08x)",
                 rec->magic);
    } else if (rec->runner != index) {
        snprintf(why, size, "a record of runner %u on its pipe", rec->runner);
    } else if (rec->flags & RUNNER_READY) {
        snprintf(why, size, "a second READY record");
    } else if (rec->seq != next) {
        snprintf(why, size,
                 "event %u where event %u was due (lost, repeated or out of "
                 "order)",
                 rec->seq, next);
    } else if ((int)rec->seq >= events) {
        snprintf(why, size, "event %u after the turn's last", rec->seq);
    } else if (rec->check != runner_check(rec->runner, rec->seq, rec->flags)) {
        snprintf(why, size, "event %u: checksum wrong", rec->seq);
    } else if (!(rec->flags & RUNNER_TERMINAL) !=
               ((int)rec->seq + 1 < events)) {
        snprintf(why, size, "event %u: terminal flag wrong", rec->seq);
    } else {
        return 0;
    }
    return -EPROTO;
}

static void driver_receive(rsess *s, const runner_record *rec, uint64_t now) {
    rrun *r = s->run;
    if (!s->ready) {
        if (rec->magic != RUNNER_MAGIC || rec->runner != s->index ||
            rec->flags != RUNNER_READY || rec->seq != RUNNER_NO_SEQ ||
            rec->check != runner_check(s->index, RUNNER_NO_SEQ, RUNNER_READY)) {
            fail(r, "runner %u: its first record is not READY", s->index);
            return;
        }
        s->ready = true;
        if (++r->nready == r->n && r->phase == PH_READY)
            lull_loop_stop(r->loop);
        return;
    }
    char why[160];
    if (r->phase != PH_STREAM) {
        fail(r, "runner %u: a record outside its turn", s->index);
        return;
    }
    if (check_event(rec, s->index, s->next, r->p->events, why, sizeof why) <
        0) {
        fail(r, "runner %u: %s", s->index, why);
        return;
    }
    s->next++;
    r->wait[r->nwait++] =
        now >= rec->commit_ns ? (double)(now - rec->commit_ns) : 0;
    if ((rec->flags & RUNNER_TERMINAL) && ++r->done == r->n)
        lull_loop_stop(r->loop);
}

/* One read of the runner's pipe, every whole record in it to the driver:
 * the delivery pass's body, and the floor's. Returns the records read, 0
 * when the pipe was empty, -EAGAIN after EINTR, or -EPIPE at EOF. */
static int read_records(rsess *s, bool *full) {
    unsigned char buf[BATCH * RUNNER_RECORD];
    size_t have = s->npart;
    memcpy(buf, s->part, have);
    s->reads++;
    *full = false;
    ssize_t got = read(s->out, buf + have, sizeof buf - have);
    if (got < 0) {
        if (errno == EINTR) return -EAGAIN;
        if (errno != EAGAIN)
            fail(s->run, "runner %u: reading its pipe: %s", s->index,
                 strerror(errno));
        return 0;
    }
    if (got == 0) {
        /* EOF: the runner is gone. Its pipe stays readable for ever. */
        if (s->io_on) lull_io_stop(&s->out_io);
        s->io_on = false;
        close(s->out);
        s->out = -1;
        if (have)
            fail(s->run, "runner %u: a record cut short at EOF", s->index);
        return -EPIPE;
    }
    uint64_t now = lab_now_ns();
    size_t total = have + (size_t)got;
    size_t whole = total - total % RUNNER_RECORD;
    for (size_t off = 0; off < whole; off += RUNNER_RECORD) {
        runner_record rec;
        memcpy(&rec, buf + off, sizeof rec);
        driver_receive(s, &rec, now);
    }
    s->npart = total - whole;
    memcpy(s->part, buf + whole, s->npart);
    *full = (size_t)got == sizeof buf - have;
    return (int)(whole / RUNNER_RECORD);
}

/* The delivery pass, the same in both modes: one read of the runner's
 * pipe. A full buffer continues in the next task. */
static lull_pass_result deliver_pass(lull_pump *pump, uint64_t *retry_ns) {
    (void)retry_ns; /* this transport never holds anything back */
    rsess *s = LULL_CONTAINER_OF(pump, rsess, pump);
    if (s->out < 0) return LULL_PASS_QUIET;
    bool full;
    int n = read_records(s, &full);
    if (n == -EAGAIN) return LULL_PASS_AGAIN;
    if (n > 0) lull_pump_delivered(pump, (uint64_t)n);
    return full ? LULL_PASS_AGAIN : LULL_PASS_QUIET;
}

/* notify: the runner committed (or went): look in the next task. */
static void out_ready(lull_io *io, int events) {
    (void)events;

    lull_pump_wake(&LULL_CONTAINER_OF(io, rsess, out_io)->pump);
}

/* poll: every session of this 1 ms slot, every 5 ms. */
static void slot_tick(lull_timer *t) {
    slot *sl = LULL_CONTAINER_OF(t, slot, timer);
    for (rsess *s = sl->first; s; s = s->slot_next)
        lull_pump_wake(&s->pump);
}

/* ------------------------------------------------------ the runners */

static void check_shutdown(rrun *r) {
    if (r->phase == PH_SHUTDOWN && r->exited == r->n && r->in_closed == r->n)
        lull_loop_stop(r->loop);
}

static void runner_exit(lull_process *p, int status, int sig) {
    rsess *s = LULL_CONTAINER_OF(p, rsess, proc);
    rrun *r = s->run;
    s->running = false;
    r->exited++;
    if (r->phase != PH_SHUTDOWN)
        fail(r,
             "runner %u (pid %d) ended before its transport was done: %s "
             "%d",
             s->index, p->pid, sig ? "signal" : "status", sig ? sig : status);
    else if ((status != 0 || sig != 0) && !r->killed)
        fail(r, "runner %u (pid %d) ended with %s %d", s->index, p->pid,
             sig ? "signal" : "status", sig ? sig : status);
    check_shutdown(r);
}

static void in_close(lull_endpoint *ep, int reason) {
    rsess *s = LULL_CONTAINER_OF(ep, rsess, in.ep);
    rrun *r = s->run;
    s->in_open = false;
    r->in_closed++;
    /* -EPIPE: the runner is gone, and its on_exit says how. */
    if (reason != 0 && reason != -EPIPE && r->phase != PH_SHUTDOWN)
        fail(r, "runner %u: its stdin closed: %s", s->index,
             lull_strerror(reason));
    check_shutdown(r);
}

/* Spawns runner i: stdin a pipe as a lull stream, stdout a pipe the
 * transport reads itself, stderr the lab's. */
static int spawn_one(rrun *r, rsess *s, char *exe) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return -errno;
    /* Only the transport's end is non-blocking: the runner's writes block,
     * as a program's stdout does. */
    if (fcntl(fds[0], F_SETFL, O_NONBLOCK) != 0) {
        int err = -errno;
        close(fds[0]);
        close(fds[1]);
        return err;
    }
    char id[16], events[16], interval[32];
    snprintf(id, sizeof id, "%u", s->index);
    snprintf(events, sizeof events, "%d", r->p->events);
    snprintf(interval, sizeof interval, "%llu",
             (unsigned long long)r->p->interval_ns);
    char *argv[] = {exe, "runner-child", id, events, interval, NULL};
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    lull_process_options o = {.argv = argv,
                              .stdio = {{.kind = LULL_STDIO_PIPE,
                                         .stream = &s->in,
                                         .stream_opts = &raw},
                                        {.kind = LULL_STDIO_FD, .fd = fds[1]},
                                        {.kind = LULL_STDIO_INHERIT}},
                              .flags = LULL_PROCESS_KILL_ON_CLOSE};
    int rc = lull_process_spawn(r->loop, &s->proc, &o, runner_exit);
    close(fds[1]);
    if (rc < 0) {
        close(fds[0]);
        return rc;
    }
    s->out = fds[0];
    s->running = true;
    s->in_open = true;
    lull_endpoint_set_callbacks(&s->in.ep, NULL, NULL, in_close);
    return 0;
}

static void deadline_hit(lull_timer *t) {
    rrun *r = LULL_CONTAINER_OF(t, rrun, deadline);
    if (r->phase != PH_SHUTDOWN) {
        r->timed_out = true;
        lull_loop_stop(r->loop);
        return;
    }
    /* Shutdown: a runner that did not leave on EOF. */
    for (int i = 0; i < r->n; i++)
        if (r->s[i].running) {
            if (!r->killed++)
                fail(r, "runner %d did not exit on its stdin's EOF", i);
            lull_process_kill(&r->s[i].proc, SIGKILL);
        }
    lull_timer_start(t, 1000000000u, 0); /* and again, until all are gone */
}

static void window_ended(lull_timer *t) {
    rrun *r = LULL_CONTAINER_OF(t, rrun, window_end);
    r->t1 = lab_now_ns();
    r->cpu1 = process_cpu_ns();
    r->cs1 = lab_thread_nvcsw();
    for (int i = 0; i < r->n; i++)
        r->reads1 += r->s[i].reads;
    lull_loop_stop(r->loop);
}

/* ---------------------------------------------------------- phases */

/* Runs the loop until a phase's callback stops it; -ETIMEDOUT when the
 * deadline did. */
static int run_phase(rrun *r, int phase, uint64_t deadline_ns) {
    r->phase = phase;
    r->timed_out = false;
    lull_timer_start(&r->deadline, deadline_ns, 0);
    int rc = lull_loop_run(r->loop, LULL_RUN_DEFAULT);
    lull_timer_stop(&r->deadline);
    if (rc < 0) return rc;
    return r->timed_out ? -ETIMEDOUT : 0;
}

static void start_polls(rrun *r) {
    const runner_params *p = r->p;
    r->nslots = (int)(p->poll_ns / p->grid_ns);
    if (r->nslots > MAX_SLOTS) r->nslots = MAX_SLOTS;
    if (r->nslots < 1) r->nslots = 1;
    uint64_t seed = p->seed;
    for (int i = 0; i < r->n; i++) {
        /* Sessions open at unrelated times: a random phase each, rounded
         * to the runtime's 1 ms unit. */
        slot *sl = &r->slots[lab_rand(&seed) % (uint64_t)r->nslots];
        r->s[i].slot_next = sl->first;
        sl->first = &r->s[i];
    }
    uint64_t now = lull_loop_now_exact(r->loop);
    uint64_t origin = (now / p->grid_ns + 1) * p->grid_ns;
    for (int k = 0; k < r->nslots; k++)
        if (r->slots[k].first)
            lull_timer_start(&r->slots[k].timer,
                             origin + (uint64_t)k * p->grid_ns - now,
                             p->poll_ns);
}

static int start_watches(rrun *r) {
    for (int i = 0; i < r->n; i++) {
        rsess *s = &r->s[i];
        int rc = lull_io_init(r->loop, &s->out_io, s->out, out_ready);
        if (rc == 0) rc = lull_io_start(&s->out_io, LULL_READABLE);
        if (rc < 0) return rc;
        s->io_on = true;
    }
    return 0;
}

static void idle_begin(rrun *r) {
    r->reads0 = r->reads1 = 0;
    for (int i = 0; i < r->n; i++)
        r->reads0 += r->s[i].reads;
    lull_loop_audit_reset(r->loop);
    r->t0 = lab_now_ns();
    r->cpu0 = process_cpu_ns();
    r->cs0 = lab_thread_nvcsw();
}

/* The idle window's figures. The window ends in a timer's callback: that
 * wakeup is the harness's, not the transport's, and is left out (one
 * voluntary switch, one audited wakeup); its CPU, a few µs, is counted. */
static void idle_figures(rrun *r, runner_result *out) {
    double secs = (double)(r->t1 - r->t0) / 1e9;
    double per = secs * r->n;
    out->idle_s = secs;
    out->idle_reads = (double)(r->reads1 - r->reads0) / per;
    double cs = (double)(r->cs1 - r->cs0) - 1;
    out->idle_wakeups = (cs > 0 ? cs : 0) / per;
    out->idle_cpu_ms = (double)(r->cpu1 - r->cpu0) / 1e6 / secs;
    lull_audit_entry a[8];
    int total = lull_loop_audit(r->loop, a, 8, NULL);
    double wakeups = 0;
    for (int i = 0; i < total && i < 8; i++)
        if (!a[i].name || !strstr(a[i].name, "end of the idle window"))
            wakeups += (double)a[i].wakeups;
    out->loop_wakeups = wakeups / per;
}

static void stream_figures(rrun *r, runner_result *out) {
    size_t n = r->nwait;
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += r->wait[i];
    out->delivered = (double)n;
    out->wait_mean_us = n ? sum / (double)n / 1e3 : NAN;
    out->wait_p50_us = lab_percentile(r->wait, n, 0.50) / 1e3;
    out->wait_p95_us = lab_percentile(r->wait, n, 0.95) / 1e3;
    out->wait_p99_us = lab_percentile(r->wait, n, 0.99) / 1e3;
    out->wait_max_us = n ? r->wait[n - 1] / 1e3 : NAN; /* sorted above */
}

/* The stream's CPU figures are taken from before the start commands leave
 * to the last event delivered: the transport's whole work for the turn. */
static uint64_t reads_now(const rrun *r) {
    uint64_t reads = 0;
    for (int i = 0; i < r->n; i++)
        reads += r->s[i].reads;
    return reads;
}

static void stream_begin(rrun *r) {
    r->stream_reads0 = reads_now(r);
    runner_stat_read(&r->stat0);
    r->stream_cpu0 = process_cpu_ns();
}

static void stream_end(rrun *r, runner_result *out) {

    uint64_t cpu = process_cpu_ns() - r->stream_cpu0;
    runner_stat s1;
    runner_stat_read(&s1);
    runner_stat_figures(&r->stat0, &s1, out);
    out->cpu_per_event_ns = r->nwait ? (double)cpu / (double)r->nwait : NAN;
    uint64_t reads = reads_now(r) - r->stream_reads0;
    out->events_per_read = reads ? (double)r->nwait / (double)reads : NAN;
}

/* Sends every runner its start command: all commit together. */
static void send_go(rrun *r) {
    /* Far enough ahead that every runner has read it before the first
     * event is due: the sends leave in the loop's first iteration. */
    uint64_t lead = 2000000u + 10000u * (uint64_t)r->n;
    uint64_t start = lab_now_ns() + lead;
    for (int i = 0; i < r->n; i++) {
        rsess *s = &r->s[i];
        s->go_cmd = (runner_go){.start_ns = start,
                                .flags = r->p->aligned ? RUNNER_GO_ALIGNED : 0};
        s->go.bytes = &s->go_cmd;
        s->go.len = sizeof s->go_cmd;
        s->go.release = NULL;
        int rc = lull_endpoint_send(&s->in.ep, &s->go);
        if (rc < 0)
            fail(r, "runner %d: sending its start: %s", i, lull_strerror(rc));
    }
}

/* Closes every runner's stdin and reaps them all: the loop runs until the
 * last exit and the last close callback. */
static void shutdown_runners(rrun *r) {
    r->phase = PH_SHUTDOWN;
    for (int k = 0; k < r->nslots; k++)
        lull_timer_stop(&r->slots[k].timer);
    for (int i = 0; i < r->n; i++) {
        rsess *s = &r->s[i];
        if (s->io_on) lull_io_stop(&s->out_io);
        s->io_on = false;
        lull_pump_close(&s->pump);
        if (s->in_open) lull_endpoint_close(&s->in.ep, 0);
    }
    /* 10 s for every runner to read EOF and exit, then SIGKILL. */
    lull_timer_start(&r->deadline, 10000000000u, 0);
    while (r->exited < r->n || r->in_closed < r->n)
        if (lull_loop_run(r->loop, LULL_RUN_DEFAULT) < 0) break;
    lull_timer_stop(&r->deadline);
}

/* ------------------------------------------------------------ floor */

/* The floor's idle window: one epoll_wait for idle_ns on every pipe
 * (nothing is due, so it sleeps through), measured as the loop's is. */
static int floor_idle(rrun *r, int efd, runner_result *out) {
    idle_begin(r);
    struct epoll_event ev[8];
    int ms = (int)(r->p->idle_ns / 1000000u);
    uint64_t end = lab_now_ns() + r->p->idle_ns;
    for (;;) {
        int n = epoll_wait(efd, ev, 8, ms);
        if (n < 0 && errno != EINTR) return -errno;
        if (n > 0) {
            fail(r, "a runner wrote during the idle window");
            return 0;
        }
        uint64_t t = lab_now_ns();
        if (t >= end) break;
        ms = (int)((end - t + 999999u) / 1000000u);
    }
    window_ended(&r->window_end);
    idle_figures(r, out);
    out->loop_wakeups = NAN; /* no loop */
    return 0;
}

/* A runner's pipe ended in the floor's stream, its turn unfinished: its
 * exit says why (on_exit, run by the loop the floor otherwise leaves). */
static void floor_pipe_ended(rrun *r, rsess *s) {
    lull_timer_start(&r->deadline, 10000000000u, 0);
    while (s->running && !r->timed_out && !r->errors)
        if (lull_loop_run(r->loop, LULL_RUN_ONCE) < 0) break;
    lull_timer_stop(&r->deadline);
    if (!r->errors)
        fail(r, "runner %u: its pipe closed before its turn ended", s->index);
}

/* The floor's stream: epoll_wait, then every ready pipe read at once. */
static __attribute__((noinline)) int floor_stream(rrun *r, int efd) {
    uint64_t turn = (uint64_t)(r->p->events + 2) * r->p->interval_ns;
    uint64_t end = lab_now_ns() + turn + 30000000000u;
    r->phase = PH_STREAM;
    struct epoll_event ev[64];
    while (r->done < r->n && !r->errors) {
        uint64_t t = lab_now_ns();
        if (t >= end) return -ETIMEDOUT;
        int n = epoll_wait(efd, ev, 64, (int)((end - t) / 1000000u) + 1);
        if (n < 0 && errno != EINTR) return -errno;

        for (int i = 0; i < n; i++) {
            rsess *s = ev[i].data.ptr;
            bool full = true;
            int got = 1;
            while (full && s->out >= 0 && (got = read_records(s, &full)) != 0)
                if (got == -EPIPE) break;
            if (got == -EPIPE && (int)s->next < r->p->events)
                floor_pipe_ended(r, s);
        }
    }
    return 0;
}

/* The loop's stream: one function, so that a profile can take the stream
 * alone (valgrind --tool=callgrind --toggle-collect=loop_stream; the
 * floor's is floor_stream). */
static __attribute__((noinline)) int loop_stream(rrun *r, runner_result *out) {
    stream_begin(r);
    send_go(r);
    uint64_t turn = (uint64_t)(r->p->events + 2) * r->p->interval_ns;
    int rc = run_phase(r, PH_STREAM, turn + 30000000000u);
    stream_end(r, out);
    if (rc == -ETIMEDOUT)
        fail(r, "%d of %d turns delivered in full before the deadline", r->done,
             r->n);
    stream_figures(r, out);
    return rc;
}

/* Runs the floor's two phases on an epoll set of its own; the runners'
 * start commands leave through their lull streams first. */
static int floor_run(rrun *r, runner_result *out) {
    for (int i = 0; i < r->n; i++) {
        if (r->s[i].io_on) lull_io_stop(&r->s[i].out_io);
        r->s[i].io_on = false;
    }
    lull_loop_run(r->loop, LULL_RUN_NOWAIT);
    int efd = epoll_create1(EPOLL_CLOEXEC);
    if (efd < 0) return -errno;
    int rc = 0;
    for (int i = 0; i < r->n && rc == 0; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &r->s[i]};
        if (epoll_ctl(efd, EPOLL_CTL_ADD, r->s[i].out, &ev) != 0) rc = -errno;
    }
    if (rc == 0) rc = floor_idle(r, efd, out);
    if (rc == 0 && !r->errors) {
        stream_begin(r);
        send_go(r);
        /* The commands' writes leave at the loop's flush point. */
        for (int k = 0; k < 100; k++) {
            bool queued = false;
            for (int i = 0; i < r->n; i++)
                queued |= r->s[i].in.ep.queued > 0;
            if (!queued) break;
            lull_loop_run(r->loop, LULL_RUN_NOWAIT);
        }
        rc = floor_stream(r, efd);
        stream_end(r, out);
        if (rc == -ETIMEDOUT)
            fail(r, "%d of %d turns delivered in full before the deadline",
                 r->done, r->n);
    }
    close(efd);
    return rc;
}

static void run_free(rrun *r) {
    for (int i = 0; i < r->n; i++)
        if (r->s[i].out >= 0) close(r->s[i].out);
    int rc = r->loop ? lull_loop_free(r->loop) : 0;
    if (rc < 0) {
        fprintf(stderr, "runner: lull_loop_free: %s (a handle leaked)\n",
                strerror(-rc));
        lull_loop_print_live(r->loop, stderr);
    }
    free(r->s);
    free(r->wait);
}

static int run_open(rrun *r, const runner_params *p, int mode) {
    memset(r, 0, sizeof *r);
    r->p = p;
    r->mode = mode;
    int rc = lull_loop_new(&r->loop, NULL);
    if (rc < 0) return rc;
    LULL_NAME(r->loop, slot_tick, "runner: poll timer list (5 ms, 1 ms slot)");
    LULL_NAME(r->loop, deliver_pass, "runner: delivery pass");
    LULL_NAME(r->loop, out_ready, "runner: a runner's pipe readable");
    LULL_NAME(r->loop, window_ended, "runner: end of the idle window");
    lull_timer_init(r->loop, &r->deadline, deadline_hit);
    lull_timer_init(r->loop, &r->window_end, window_ended);
    for (int k = 0; k < MAX_SLOTS; k++)
        lull_timer_init(r->loop, &r->slots[k].timer, slot_tick);
    r->s = calloc((size_t)p->runners, sizeof *r->s);
    r->cap = (size_t)p->runners * (size_t)p->events;
    r->wait = malloc(r->cap * sizeof *r->wait);
    if (!r->s || !r->wait) return -ENOMEM;
    /* Written now, not first inside a pass: a fresh page's fault would land
     * in a measured wait (pump does the same). */
    for (size_t i = 0; i < r->cap; i++)
        r->wait[i] = NAN;
    for (int i = 0; i < p->runners; i++) {
        r->s[i].run = r;
        r->s[i].index = (uint32_t)i;
        r->s[i].out = -1;
        lull_pump_init(r->loop, &r->s[i].pump, deliver_pass);
    }
    return 0;
}

int runner_lull_measure(const runner_params *p, int mode, runner_result *out) {
    memset(out, 0, sizeof *out);
    out->loop_wakeups = NAN;
    out->cpu_per_event_ns = out->busy_transport_pct = NAN;
    out->events_per_read = NAN;
    out->busy_runners_pct = out->steal_pct = NAN;
    rrun r;
    int rc = run_open(&r, p, mode);
    char exe[] = "/proc/self/exe"; /* lull-lab itself, whatever argv[0] */
    uint64_t t_spawn = lab_now_ns();
    for (int i = 0; rc == 0 && i < p->runners; i++) {
        rc = spawn_one(&r, &r.s[i], p->exe ? (char *)p->exe : exe);
        if (rc < 0)
            snprintf(out->why, sizeof out->why, "spawning runner %d of %d: %s",
                     i + 1, p->runners, strerror(-rc));
        else
            r.n = i + 1;
    }
    if (rc == 0)
        rc = mode == RUNNER_POLL ? (start_polls(&r), 0) : start_watches(&r);
    /* Up: every runner's READY read (30 s, and 10 ms a runner). The floor
     * readies its runners as notify does, then goes on alone. */
    if (rc == 0)
        rc = run_phase(&r, PH_READY, 30000000000u + 10000000u * (uint64_t)r.n);
    out->ready_ms = (double)(lab_now_ns() - t_spawn) / 1e6;
    if (rc == 0 && !r.errors && mode == RUNNER_FLOOR) {
        rc = floor_run(&r, out);
        stream_figures(&r, out);
    } else if (rc == 0 && !r.errors) {
        /* Anything left over from start-up runs before the window. */
        lull_loop_run(r.loop, LULL_RUN_NOWAIT);
        idle_begin(&r);
        lull_timer_start(&r.window_end, p->idle_ns, 0);
        rc = run_phase(&r, PH_IDLE, p->idle_ns + 30000000000u);
        if (rc == 0) idle_figures(&r, out);
    }
    if (rc == 0 && !r.errors && mode != RUNNER_FLOOR) rc = loop_stream(&r, out);
    if (r.loop) shutdown_runners(&r);
    run_free(&r);
    if (r.errors) {
        snprintf(out->why, sizeof out->why, "%s", r.why);
        return -EPROTO;
    }
    if (rc == -ETIMEDOUT && !out->why[0])
        snprintf(out->why, sizeof out->why,
                 "the runners did not all start in time");
    return rc;
}

long runner_fds_needed(int runners) {
    /* A runner holds three of the transport's fds (its pidfd, its stdin's
     * write end, its stdout's read end) and briefly four more while it is
     * spawned; the loop and the lab keep a few dozen. */
    return 3L * runners + 64;
}
