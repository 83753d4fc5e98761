/* supervisor: runs N worker processes, restarts the ones that die, and
 * shuts down cleanly on SIGTERM or SIGINT.
 *
 * Each worker is a child process (lull_process_spawn) in a process group
 * of its own, with its stdout on a pipe that comes back as a lull stream
 * and its stderr on the same pipe (2>&1: LULL_STDIO_DUP); the supervisor
 * prints each line it writes, prefixed with the worker's number. When a worker
 * dies, its exit arrives as a callback on the loop (no SIGCHLD handler
 * anywhere), and once its output is drained too the worker is started again
 * after a back-off: 100 ms, doubled for every death that follows a short life
 * (up to 5 s), reset after a life of 10 s. SIGTERM and SIGINT are two
 * lull_signal handles: the first stops the restarts, sends SIGTERM to every
 * worker's process group and gives them 2 s; a worker still alive then gets
 * SIGKILL, and the pipe of one that exited but left something holding it is
 * closed (both at once at a second signal). Once every worker is reaped and
 * every pipe closed, the signal handles stop, nothing is left on the loop,
 * lull_loop_run returns and the loop is freed.
 *
 * The signals are blocked (lull_signal_block) first thing in main, before
 * any thread could be started, as lull's signal handles need (the loop
 * reads them from a signalfd; docs/PROCESS.md). Workers start with every
 * signal unblocked at its default action, whatever the supervisor blocks.
 *
 *   supervisor [N]       run N workers (default 3), each a shell that
 *                        prints a line and dies after a few seconds, until
 *                        SIGTERM or ^C
 *   supervisor --self-test  4 workers that die every 50 ms, one of which
 *                        ignores SIGTERM, and a fifth that leaves behind a
 *                        process holding its stdout and ignoring SIGTERM;
 *                        after 6 restarts the supervisor sends itself
 *                        SIGTERM, and checks that 4 workers stop on
 *                        SIGTERM, the stubborn one on SIGKILL after the
 *                        (shortened) grace period, and that the loop frees
 *                        cleanly. Exits 0 when all of that holds.
 *
 * Build:
 *   cc -O2 -o supervisor supervisor.c $(pkg-config --cflags --libs lull)
 * or with CMake (find_package(lull)), all examples at once:
 *   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=<lull prefix>
 *   cmake --build build-examples */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <lull.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MS          1000000ull
#define MAX_WORKERS 64

typedef struct supervisor supervisor;

typedef struct worker {
    supervisor *sup;
    int index;
    char *const *argv;
    lull_process proc;  /* the running child */
    lull_stream out;    /* its stdout and stderr */
    lull_timer restart; /* the back-off before the next start */
    bool running;       /* spawned, on_exit not yet run */
    bool out_open;      /* the pipe not yet closed */
    uint64_t started;   /* lull_loop_now at the last start */
    uint64_t backoff;   /* the next back-off */
    char line[256];     /* a line being read */
    size_t line_len;
} worker;

struct supervisor {
    lull_loop *loop;
    worker workers[MAX_WORKERS];
    int n;
    lull_signal term, intr; /* SIGTERM, SIGINT */
    lull_timer grace;       /* SIGKILL for workers still alive */
    bool stopping;          /* no more restarts */
    int stop_signal;        /* the signal that started the shutdown */
    uint64_t stop_started;  /* lull_loop_now then */
    uint64_t grace_ns;      /* how long workers get to stop */
    uint64_t backoff_min;   /* the first back-off */
    int restarts;
    int self_test_after;   /* self-test: restarts before SIGTERM; 0 off */
    bool self_test_sent;   /* ... and it was sent */
    bool self_test_failed; /* a worker could not start: the test fails */
    int idle_at_stop;      /* workers between restarts at the shutdown */
    int by_term, by_kill, by_other; /* how the workers ended at shutdown */
    bool quiet;                     /* do not print the workers' lines */
};

static void start_worker(worker *w);
static void shut_down(supervisor *s, int signum, int sender_pid);

/* ------------------------------------------------------------ output */

static void out_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    worker *w = LULL_CONTAINER_OF(ep, worker, out.ep);
    const char *p = bytes;
    for (size_t i = 0; i < len; i++) {
        bool end = p[i] == '\n';
        if (!end && w->line_len < sizeof w->line - 1)
            w->line[w->line_len++] = p[i];
        if (end || w->line_len == sizeof w->line - 1) {
            w->line[w->line_len] = '\0';
            if (!w->sup->quiet) printf("[worker %d] %s\n", w->index, w->line);
            w->line_len = 0;
            /* Whoever read stdout is gone (`supervisor | head`): stop the
             * workers as on SIGTERM, rather than die of SIGPIPE and leave
             * them running in groups of their own, out of ^C's reach. */
            if (ferror(stdout) && errno == EPIPE && !w->sup->stopping)
                shut_down(w->sup, SIGPIPE, getpid());
        }
    }
}

/* A worker is done with once both its exit and its pipe's end arrived
 * (in either order): then it may be restarted, or the shutdown finish. */
static void worker_settled(worker *w);

static void out_close(lull_endpoint *ep, int reason) {
    worker *w = LULL_CONTAINER_OF(ep, worker, out.ep);
    (void)reason; /* 0: EOF, the worker and all it started closed it */
    w->out_open = false;
    worker_settled(w);
}

/* --------------------------------------------------------- lifecycle */

static void finish_if_done(supervisor *s) {
    for (int i = 0; i < s->n; i++)
        if (s->workers[i].running || s->workers[i].out_open) return;
    /* Nothing left: stop what keeps the loop alive; lull_loop_run returns. */
    lull_signal_stop(&s->term);
    lull_signal_stop(&s->intr);
    lull_timer_stop(&s->grace);
}

static void on_exit_cb(lull_process *p, int status, int sig) {
    worker *w = LULL_CONTAINER_OF(p, worker, proc);
    supervisor *s = w->sup;
    w->running = false;
    if (s->stopping) {
        if (sig == SIGTERM)
            s->by_term++;
        else if (sig == SIGKILL)
            s->by_kill++;
        else
            s->by_other++;
    }
    if (!s->quiet || s->stopping) {
        if (sig)
            printf("worker %d (pid %d) killed by signal %d\n", w->index, p->pid,
                   sig);
        else
            printf("worker %d (pid %d) exited with %d\n", w->index, p->pid,
                   status);
    }
    worker_settled(w);
}

static void worker_settled(worker *w) {
    supervisor *s = w->sup;
    if (w->running || w->out_open) return;
    if (s->stopping) {
        finish_if_done(s);
        return;
    }
    /* A short life doubles the back-off; a long one resets it. */
    uint64_t lived = lull_loop_now(s->loop) - w->started;
    w->backoff = lived >= 10000 * MS ? s->backoff_min : w->backoff * 2;
    if (w->backoff < s->backoff_min) w->backoff = s->backoff_min;
    if (w->backoff > 5000 * MS) w->backoff = 5000 * MS;
    lull_timer_start(&w->restart, w->backoff, 0);
}

static void restart_due(lull_timer *t) {
    worker *w = LULL_CONTAINER_OF(t, worker, restart);
    supervisor *s = w->sup;
    s->restarts++;
    start_worker(w);
    if (!s->self_test_after || s->restarts < s->self_test_after ||
        s->self_test_sent)
        return;
    for (int i = 0; i < s->n; i++)
        if (!s->workers[i].running) return; /* wait until all run */
    printf("self-test: %d restarts, sending SIGTERM to myself\n", s->restarts);
    s->self_test_sent = true;
    kill(getpid(), SIGTERM);
}

static void start_worker(worker *w) {
    supervisor *s = w->sup;
    lull_process_options o = {
        .argv = w->argv,
        .flags = LULL_PROCESS_NEW_GROUP, /* a group kill reaches its children */
        .stdio = {{.kind = LULL_STDIO_NULL},
                  {.kind = LULL_STDIO_PIPE, .stream = &w->out}, /* bytes */
                  {.kind = LULL_STDIO_DUP, .fd = 1}}};          /* 2>&1 */
    int rc = lull_process_spawn(s->loop, &w->proc, &o, on_exit_cb);
    if (rc < 0 && s->self_test_after) {
        /* The self-test waits for every worker to run: one that cannot
         * start (out of fds: ulimit -n) would keep it retrying for good.
         * It fails instead, through the shutdown a SIGTERM starts. */
        fprintf(stderr, "self-test: worker %d could not start: %s\n", w->index,
                lull_strerror(rc));
        s->self_test_failed = true;
        if (!s->self_test_sent) {
            s->self_test_sent = true;
            kill(getpid(), SIGTERM);
        }
        return;
    }
    if (rc < 0) {
        fprintf(stderr, "worker %d: %s; retrying\n", w->index,
                lull_strerror(rc));
        w->started = lull_loop_now(s->loop);
        worker_settled(w); /* neither running nor open: a back-off */
        return;
    }
    w->running = true;
    w->out_open = true;
    w->line_len = 0;
    w->started = lull_loop_now(s->loop);
    lull_endpoint_set_callbacks(&w->out.ep, out_frame, NULL, out_close);
}

/* ---------------------------------------------------------- shutdown */

static void kill_group(worker *w, int sig) {
    /* The worker leads its own group; lull refuses once it reaped the
     * worker (-ESRCH), when its pid could name a stranger's group. */
    if (w->running) (void)lull_process_kill_group(&w->proc, sig);
}

/* The last resort, for a worker that is reaped but whose pipe something
 * it started still holds: that group can no longer be signalled safely,
 * so the supervisor stops waiting and closes its end (a writer there gets
 * EPIPE or SIGPIPE); out_close then settles the worker. Without this, a
 * leftover that ignores SIGTERM would hold the shutdown for as long as it
 * lives. */
static void kill_or_let_go(worker *w) {
    if (w->running)
        kill_group(w, SIGKILL);
    else if (w->out_open)
        (void)lull_endpoint_close(&w->out.ep, 0);
}

static void grace_over(lull_timer *t) {
    supervisor *s = LULL_CONTAINER_OF(t, supervisor, grace);
    for (int i = 0; i < s->n; i++) {
        worker *w = &s->workers[i];
        if (w->running)
            printf("worker %d still running after %.0f ms: SIGKILL\n", i,
                   (double)s->grace_ns / MS);
        else if (w->out_open)
            printf("worker %d exited, its stdout still held after %.0f ms: "
                   "closed\n",
                   i, (double)s->grace_ns / MS);
        kill_or_let_go(w);
    }
}

static void on_signal(lull_signal *sig, int signum) {
    supervisor *s = LULL_CONTAINER_OF(sig, supervisor, term);
    if (signum == SIGINT) s = LULL_CONTAINER_OF(sig, supervisor, intr);
    shut_down(s, signum, sig->sender_pid);
}

static void shut_down(supervisor *s, int signum, int sender_pid) {
    if (s->stopping) { /* a second signal: no more waiting */
        printf("signal %d again: no more waiting for any worker\n", signum);
        for (int i = 0; i < s->n; i++)
            kill_or_let_go(&s->workers[i]);
        return;
    }
    printf("signal %d (from pid %d): stopping %d workers\n", signum, sender_pid,
           s->n);
    s->stopping = true;
    s->stop_signal = signum;
    s->stop_started = lull_loop_now(s->loop);
    for (int i = 0; i < s->n; i++) {
        lull_timer_stop(&s->workers[i].restart);
        if (!s->workers[i].running) s->idle_at_stop++;
        kill_group(&s->workers[i], SIGTERM);
    }
    lull_timer_start(&s->grace, s->grace_ns, 0);
    finish_if_done(s); /* nothing was running: done now */
}

/* -------------------------------------------------------------- main */

static char *const normal_argv[] = {
    "/bin/sh", "-c",
    "echo \"up as pid $$\"; sleep $((2 + $$ % 4)); echo \"pid $$ dies\" >&2;"
    " exit 1",
    NULL};
static char *const quick_argv[] = {"/bin/sh", "-c", "echo up; exec sleep 0.05",
                                   NULL};
static char *const stubborn_argv[] = {
    "/bin/sh", "-c", "trap '' TERM; echo 'up, ignoring SIGTERM'; exec sleep 30",
    NULL};
/* Its subshell outlives it, ignores SIGTERM and holds its stdout: it ends
 * at its first write once the supervisor closed the pipe (SIGPIPE). */
static char *const leaver_argv[] = {
    "/bin/sh", "-c",
    "(trap '' TERM; while echo tick; do sleep 0.05; done) & exec sleep 30",
    NULL};

int main(int argc, char **argv) {
    /* Before anything could start a thread: the loop reads these two from
     * a signalfd, so every thread must keep them blocked. */
    if (lull_signal_block(SIGTERM) != 0 || lull_signal_block(SIGINT) != 0)
        return 1;
    /* A closed stdout is an EPIPE to act on (out_frame), not a death that
     * orphans the workers; they start with SIGPIPE at its default. */
    signal(SIGPIPE, SIG_IGN);
    static supervisor s;
    bool self_test = argc > 1 && strcmp(argv[1], "--self-test") == 0;
    s.n = self_test ? 5 : 3;
    if (argc > 1 && !self_test) {
        /* Digits only, whole and in range: atoi took "3abc" as 3, and
         * "4294967299" wrapped to 3. */
        char *end;
        long n = strtol(argv[1], &end, 10);
        bool digits = *argv[1] >= '0' && *argv[1] <= '9' && !*end;
        s.n = digits && n <= MAX_WORKERS ? (int)n : -1;
    }
    /* --help is asked for: the usage on stdout, exit 0; a mistake: stderr, 2.
     */
    bool help = argc == 2 && strcmp(argv[1], "--help") == 0;
    if (help || argc > 2 || s.n < 1 || s.n > MAX_WORKERS) {
        fprintf(help ? stdout : stderr,
                "usage: supervisor [N (1-%d)] | --self-test\n", MAX_WORKERS);
        return help ? 0 : 2;
    }
    s.grace_ns = self_test ? 200 * MS : 2000 * MS;
    s.backoff_min = self_test ? 10 * MS : 100 * MS;
    s.self_test_after = self_test ? 6 : 0;
    s.quiet = self_test;
    if (lull_loop_new(&s.loop, NULL) != 0) return 1;
    lull_signal_init(s.loop, &s.term, on_signal);
    lull_signal_init(s.loop, &s.intr, on_signal);
    if (lull_signal_start(&s.term, SIGTERM) != 0 ||
        lull_signal_start(&s.intr, SIGINT) != 0) {
        lull_signal_stop(&s.term);
        lull_loop_free(s.loop);
        return 1;
    }
    lull_timer_init(s.loop, &s.grace, grace_over);
    for (int i = 0; i < s.n; i++) {
        worker *w = &s.workers[i];
        w->sup = &s;
        w->index = i;
        w->argv = !self_test ? normal_argv
                  : i == 3   ? stubborn_argv
                  : i == 4   ? leaver_argv
                             : quick_argv;
        lull_timer_init(s.loop, &w->restart, restart_due);
        start_worker(w);
    }
    /* stdout may be a pipe (a test): each line as it happens. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    int rc = lull_loop_run(s.loop, LULL_RUN_DEFAULT);
    double ms = (double)(lull_loop_now(s.loop) - s.stop_started) / MS;
    int freed = lull_loop_free(s.loop);
    printf("supervisor: shut down on %s in %.0f ms: %d restarts; %d "
           "workers stopped by SIGTERM, %d by SIGKILL, %d otherwise, %d were "
           "between restarts; every child reaped, loop %s\n",
           s.stop_signal == SIGINT    ? "SIGINT"
           : s.stop_signal == SIGPIPE ? "a closed stdout"
                                      : "SIGTERM",
           ms, s.restarts, s.by_term, s.by_kill, s.by_other, s.idle_at_stop,
           freed == 0 ? "freed" : "NOT freed");
    if (rc != 0 || freed != 0) return 1;
    /* The self-test's own checks: the three quick workers and the one
     * that left a process behind stopped on SIGTERM (unless a quick one
     * happened to be between restarts), the stubborn one only on SIGKILL. */
    if (self_test && (s.self_test_failed || s.by_term + s.idle_at_stop != 4 ||
                      s.by_kill != 1 || s.by_other != 0 || s.restarts < 6))
        return 1;
    return 0;
}
