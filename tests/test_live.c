/* What is live: the live_* counts of lull_metrics, lull_loop_walk and
 * lull_loop_print_live name every cause that keeps lull_loop_free at
 * -EBUSY, and the loop stays usable after it. Virtual clock, no waiting. */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <lull.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static lull_loop *new_loop(void) {
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    return loop;
}

static int task_runs, timer_runs, listener_runs, pass_runs;

static void on_task(lull_task *t) {
    (void)t;
    task_runs++;
}
static void on_remote(lull_task *t) {
    (void)t;
    task_runs++;
}
static void on_timer(lull_timer *t) {
    (void)t;
    timer_runs++;
}
static void on_quiet_timer(lull_timer *t) {
    (void)t;
    timer_runs++;
}
static void on_fd(lull_io *io, int events) {
    (void)io;
    (void)events;
}
static void on_change(lull_listener *l) {
    (void)l;
    listener_runs++;
}
static lull_pass_result held_pass(lull_pump *p, uint64_t *retry_ns) {
    (void)p;
    pass_runs++;
    *retry_ns = 1000;
    return LULL_PASS_HELD;
}

typedef struct live_counts {
    uint64_t ready, timers, timers_unref, io, io_unref, listeners, refs, remote;
} live_counts;

static live_counts counts(lull_loop *loop) {
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    return (live_counts){m.live_ready, m.live_timers,   m.live_timers_unref,
                         m.live_io,    m.live_io_unref, m.live_listeners,
                         m.live_refs,  m.live_remote};
}

#define CHECK_COUNTS(loop, ...)                                                \
    do {                                                                       \
        live_counts got_ = counts(loop), want_ = (live_counts){__VA_ARGS__};   \
        CHECK_U64_EQ(got_.ready, want_.ready);                                 \
        CHECK_U64_EQ(got_.timers, want_.timers);                               \
        CHECK_U64_EQ(got_.timers_unref, want_.timers_unref);                   \
        CHECK_U64_EQ(got_.io, want_.io);                                       \
        CHECK_U64_EQ(got_.io_unref, want_.io_unref);                           \
        CHECK_U64_EQ(got_.listeners, want_.listeners);                         \
        CHECK_U64_EQ(got_.refs, want_.refs);                                   \
        CHECK_U64_EQ(got_.remote, want_.remote);                               \
    } while (0)

/* Every cause of -EBUSY is counted, and removing each one, in the way the
 * docs give for it, brings its count to zero; -EBUSY changes nothing, so
 * the loop goes on being used in between. */
TEST(live_counts_every_cause_of_ebusy) {
    lull_loop *loop = new_loop();
    CHECK_COUNTS(loop, 0, 0, 0, 0, 0, 0, 0, 0);
    CHECK_EQ(lull_loop_free(loop), 0);
    loop = new_loop();

    lull_task task, remote;
    lull_task_init(&task, on_task);
    lull_task_init(&remote, on_remote);
    lull_timer ref_timer, unref_timer;
    lull_timer_init(loop, &ref_timer, on_timer);
    lull_timer_init(loop, &unref_timer, on_quiet_timer);
    int a[2], b[2];
    CHECK_EQ(pipe2(a, O_NONBLOCK | O_CLOEXEC), 0);
    CHECK_EQ(pipe2(b, O_NONBLOCK | O_CLOEXEC), 0);
    lull_io ref_io, unref_io;
    CHECK_EQ(lull_io_init(loop, &ref_io, a[0], on_fd), 0);
    CHECK_EQ(lull_io_init(loop, &unref_io, b[0], on_fd), 0);
    lull_notifier n;
    lull_listener l;
    lull_notifier_init(&n);

    /* An undrained remote post alone: not alive, but busy. */
    lull_task_post_remote(loop, &remote);
    CHECK(!lull_loop_alive(loop));
    CHECK_EQ(lull_loop_free(loop), -EBUSY);
    CHECK_COUNTS(loop, 0, 0, 0, 0, 0, 0, 0, 1);
    /* An unreferenced armed timer alone: the same. */
    CHECK_EQ(lull_loop_settle(loop), 1); /* settle takes the post and runs it */
    CHECK_EQ(task_runs, 1);
    lull_timer_start(&unref_timer, 1000, 0);
    lull_timer_unref(&unref_timer);
    CHECK(!lull_loop_alive(loop));
    CHECK_EQ(lull_loop_free(loop), -EBUSY);
    CHECK_COUNTS(loop, 0, 0, 1, 0, 0, 0, 0, 0);

    lull_task_post(loop, &task);
    lull_timer_start(&ref_timer, 500, 0);
    CHECK_EQ(lull_io_start(&ref_io, LULL_READABLE), 0);
    CHECK_EQ(lull_io_start(&unref_io, LULL_READABLE), 0);
    lull_io_unref(&unref_io);
    lull_listener_start(loop, &n, &l, on_change);
    lull_loop_ref(loop);
    lull_loop_ref(loop);
    lull_task_post_remote(loop, &remote);
    CHECK_COUNTS(loop, 1, 1, 1, 1, 1, 1, 2, 1);
    CHECK_EQ(lull_loop_free(loop), -EBUSY);

    /* Each cause, and what it needs. */
    CHECK(lull_loop_settle(loop) >= 2); /* ready tasks and remote posts: run */
    CHECK_EQ(task_runs, 3);
    CHECK_COUNTS(loop, 0, 1, 1, 1, 1, 1, 2, 0);
    lull_loop_advance(loop, 500); /* an armed timer: its deadline (or a stop) */
    CHECK_EQ(timer_runs, 1);
    CHECK_COUNTS(loop, 0, 0, 1, 1, 1, 1, 2, 0);
    lull_timer_stop(&unref_timer); /* unreferenced, never due here: stop */
    lull_io_stop(&ref_io);
    lull_io_stop(&unref_io);
    CHECK_COUNTS(loop, 0, 0, 0, 0, 0, 1, 2, 0);
    lull_notifier_raise(&n); /* a queued listener task is ready work */
    CHECK_COUNTS(loop, 1, 0, 0, 0, 0, 1, 2, 0);
    lull_listener_stop(&l); /* ... and leaves with the subscription */
    CHECK_COUNTS(loop, 0, 0, 0, 0, 0, 0, 2, 0);
    lull_loop_unref(loop);
    lull_loop_unref(loop);
    CHECK_COUNTS(loop, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int i = 0; i < 2; i++) {
        close(a[i]);
        close(b[i]);
    }
    CHECK_EQ(listener_runs, 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ----------------------------------------------------------- the walk */

#define MAX_ENTRIES 32

typedef struct seen {
    lull_live e[MAX_ENTRIES];
    int n;
} seen;

static void collect(const lull_live *e, void *arg) {
    seen *s = arg;
    CHECK(s->n < MAX_ENTRIES);
    s->e[s->n++] = *e;
}

/* The entry for handle with cause, which must be there exactly once. */
static const lull_live *find(const seen *s, const void *handle,
                             lull_live_cause cause) {
    const lull_live *found = NULL;
    for (int i = 0; i < s->n; i++) {
        if (s->e[i].handle != handle || s->e[i].cause != cause) continue;
        CHECK(found == NULL);
        found = &s->e[i];
    }
    CHECK(found != NULL);
    return found;
}

static void check_entry(const lull_live *e, int kind, lull_any_fn fn,
                        const char *name, bool ref) {
    CHECK_EQ(e->kind, kind);
    CHECK(e->fn == fn);
    if (name) {
        CHECK(e->name != NULL);
        CHECK(strcmp(e->name, name) == 0);
    } else {
        CHECK(e->name == NULL);
    }
    CHECK_EQ(e->ref, ref);
}

TEST(walk_names_every_live_handle) {
    lull_loop *loop = new_loop();
    LULL_NAME(loop, on_task, "app.task");
    LULL_NAME(loop, on_timer, "app.timer");
    LULL_NAME(loop, on_fd, "app.fd");
    LULL_NAME(loop, on_change, "app.change");
    LULL_NAME(loop, held_pass, "app.pass");
    /* on_remote and on_quiet_timer stay unnamed. */

    lull_task task, remote;
    lull_task_init(&task, on_task);
    lull_task_init(&remote, on_remote);
    lull_timer zero, armed, repeat;
    lull_timer_init(loop, &zero, on_timer);
    lull_timer_init(loop, &armed, on_quiet_timer);
    lull_timer_init(loop, &repeat, on_timer);
    int fds[2];
    CHECK_EQ(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
    lull_io io;
    CHECK_EQ(lull_io_init(loop, &io, fds[0], on_fd), 0);
    lull_notifier n, n_remote;
    lull_listener l, pl, l_remote;
    lull_notifier_init(&n);
    lull_notifier_init(&n_remote);
    lull_pump pump, held;
    lull_pump_init(loop, &pump, held_pass);
    lull_pump_init(loop, &held, held_pass);

    lull_task_post(loop, &task);
    lull_timer_start(&zero, 0, 0);
    lull_timer_start(&armed, 700, 0);
    lull_timer_unref(&armed);
    CHECK_EQ(lull_io_start(&io, LULL_READABLE), 0);
    lull_io_unref(&io);
    lull_listener_start(loop, &n, &l, on_change);
    lull_notifier_raise(&n); /* l's task queued */
    lull_pump_listen(&pump, &n, &pl);
    lull_pump_wake(&pump);
    lull_pump_wake(&held);
    CHECK_EQ(lull_loop_settle(loop), 5); /* task, zero, listener, two passes */
    CHECK_EQ(pass_runs, 2);              /* both held: retry timers armed */
    lull_pump_wake(&pump);               /* pass queued, its retry cancelled */
    lull_task_post(loop, &task);
    lull_timer_start(&zero, 0, 0);
    lull_notifier_raise(&n); /* l's task queued; the pump's pass already is */
    lull_timer_start(&repeat, 100, 100);
    lull_listener_start(loop, &n_remote, &l_remote, on_change);
    lull_task_post_remote(loop, &remote);
    lull_notifier_raise_remote(loop, &n_remote);
    lull_loop_ref(loop);

    seen s = {.n = 0};
    int count = lull_loop_walk(loop, collect, &s);
    CHECK_EQ(count, s.n);

    check_entry(find(&s, &task, LULL_LIVE_READY), LULL_HANDLE_TASK,
                (lull_any_fn)on_task, "app.task", true);
    check_entry(find(&s, &zero, LULL_LIVE_READY), LULL_HANDLE_TIMER,
                (lull_any_fn)on_timer, "app.timer", true);
    check_entry(find(&s, &l, LULL_LIVE_READY), LULL_HANDLE_LISTENER,
                (lull_any_fn)on_change, "app.change", true);
    check_entry(find(&s, &pump, LULL_LIVE_READY), LULL_HANDLE_PUMP,
                (lull_any_fn)held_pass, "app.pass", true);
    const lull_live *e = find(&s, &armed, LULL_LIVE_ARMED);
    check_entry(e, LULL_HANDLE_TIMER, (lull_any_fn)on_quiet_timer, NULL, false);
    CHECK_U64_EQ(e->deadline, 700);
    e = find(&s, &repeat, LULL_LIVE_ARMED);
    check_entry(e, LULL_HANDLE_TIMER, (lull_any_fn)on_timer, "app.timer", true);
    CHECK_U64_EQ(e->deadline, 100);
    e = find(&s, &held, LULL_LIVE_ARMED); /* its retry timer */
    check_entry(e, LULL_HANDLE_PUMP, (lull_any_fn)held_pass, "app.pass", true);
    CHECK_U64_EQ(e->deadline, 1000);
    e = find(&s, &io, LULL_LIVE_STARTED);
    check_entry(e, LULL_HANDLE_IO, (lull_any_fn)on_fd, "app.fd", false);
    CHECK_EQ(e->fd, fds[0]);
    check_entry(find(&s, &l, LULL_LIVE_SUBSCRIBED), LULL_HANDLE_LISTENER,
                (lull_any_fn)on_change, "app.change", false);
    check_entry(find(&s, &pl, LULL_LIVE_SUBSCRIBED), LULL_HANDLE_LISTENER,
                (lull_any_fn)held_pass, "app.pass", false);
    check_entry(find(&s, &l_remote, LULL_LIVE_SUBSCRIBED), LULL_HANDLE_LISTENER,
                (lull_any_fn)on_change, "app.change", false);
    check_entry(find(&s, &remote, LULL_LIVE_REMOTE), LULL_HANDLE_TASK,
                (lull_any_fn)on_remote, NULL, false);
    /* A remote raise leads to the notifier's first listener. */
    check_entry(find(&s, &n_remote, LULL_LIVE_REMOTE), LULL_HANDLE_NOTIFIER,
                (lull_any_fn)on_change, "app.change", false);
    CHECK_EQ(s.n, 13); /* nothing else, nothing twice */

    /* The counts agree with the walk. */
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.live_ready, 4);
    CHECK_U64_EQ(m.live_timers + m.live_timers_unref, 3);
    CHECK_U64_EQ(m.live_io + m.live_io_unref, 1);
    CHECK_U64_EQ(m.live_listeners, 3);
    CHECK_U64_EQ(m.live_remote, 2);
    CHECK_U64_EQ(m.live_refs, 1);

    /* Close everything; the walk then finds nothing and free succeeds. */
    lull_loop_unref(loop);
    CHECK(lull_loop_settle(loop) >
          0); /* runs the ready work, takes the posts */
    lull_task_cancel(&task);
    lull_timer_stop(&zero);
    lull_timer_stop(&armed);
    lull_timer_stop(&repeat);
    lull_io_stop(&io);
    lull_listener_stop(&l);
    lull_listener_stop(&l_remote);
    lull_pump_close(&pump);
    lull_pump_close(&held);
    s.n = 0;
    CHECK_EQ(lull_loop_walk(loop, collect, &s), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
    close(fds[0]);
    close(fds[1]);
}

/* A repeating timer that is due and already armed for its next period is
 * live for both reasons, and the walk says so. */
static lull_loop *walk_loop;
static seen inside;
static void walk_from_callback(lull_timer *t) {
    (void)t;
    inside.n = 0;
    lull_loop_walk(walk_loop, collect, &inside);
}

TEST(walk_inside_a_callback_sees_a_repeat_armed_again) {
    lull_loop *loop = walk_loop = new_loop();
    lull_timer a, b;
    lull_timer_init(loop, &a, walk_from_callback);
    lull_timer_init(loop, &b, on_timer);
    lull_timer_start(&a, 10, 10);
    lull_timer_start(&b, 10, 10);
    lull_loop_advance(loop, 10); /* a runs first: b is still on the due list */
    CHECK_EQ(timer_runs, 1);
    find(&inside, &a, LULL_LIVE_ARMED);
    find(&inside, &b, LULL_LIVE_ARMED);
    find(&inside, &b, LULL_LIVE_READY);
    CHECK_EQ(inside.n, 3);
    lull_timer_stop(&a);
    lull_timer_stop(&b);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* lull_loop_print_live's text, echoed to stderr for the reader of a
 * failure, and the caller's to free; it must have counted `entries`. */
static char *live_text(lull_loop *loop, int entries) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    CHECK(out != NULL);
    int n = lull_loop_print_live(loop, out);
    CHECK_EQ(fclose(out), 0);
    fputs(text, stderr);
    CHECK_EQ(n, entries);
    return text;
}

/* lull_loop_print_live counts `entries`, and its text holds want. */
static void live_says(lull_loop *loop, int entries, const char *want) {
    char *text = live_text(loop, entries);
    CHECK(strstr(text, want) != NULL);
    free(text);
}

/* A paused stream holds an fd and no started watcher: lull_loop_free is
 * -EBUSY for it, and lull_loop_print_live must say why. */
TEST(print_live_counts_an_idle_open_stream) {
    lull_loop *loop = new_loop();
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    lull_stream s;
    CHECK_EQ(lull_stream_open(loop, &s, sv[0], NULL), 0);
    CHECK_EQ(lull_endpoint_read_stop(&s.ep), 0);
    CHECK_EQ(lull_loop_settle(loop), 0);
    CHECK_EQ(lull_loop_free(loop), -EBUSY);
    live_says(loop, 0, "1 stream, server or udp handle open");
    CHECK_EQ(lull_endpoint_close(&s.ep, 0), 0);
    CHECK_EQ(lull_loop_settle(loop), 0);
    close(sv[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A bound UDP socket that is not receiving has no started watcher but
 * holds an fd: lull_loop_free must stay -EBUSY (freeing would leave the
 * handle pointing at a freed loop, its socket open), and print_live must
 * say why. */
static void on_udp_closed(lull_udp *u) {
    (void)u;
}

TEST(print_live_counts_an_idle_bound_udp) {
    lull_loop *loop = new_loop();
    lull_udp u;
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    CHECK_EQ(lull_loop_free(loop), 0); /* no socket yet: nothing to keep */
    loop = new_loop();
    CHECK_EQ(lull_udp_init(loop, &u, NULL), 0);
    CHECK_EQ(lull_udp_bind(&u, NULL, 0, 0), 0);
    CHECK_EQ(lull_loop_settle(loop), 0);
    CHECK_EQ(lull_loop_free(loop), -EBUSY);
    live_says(loop, 0, "1 stream, server or udp handle open");
    CHECK_EQ(lull_udp_close(&u, on_udp_closed), 0);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* lull_loop_print_live: one line per entry, names, and the references. */
TEST(print_live_lists_what_keeps_free_busy) {
    lull_loop *loop = new_loop();
    LULL_NAME(loop, on_timer, "session.idle-timeout");
    lull_timer t;
    lull_timer_init(loop, &t, on_timer);
    lull_timer_start(&t, 5000, 0);
    lull_timer_unref(&t);
    lull_task remote;
    lull_task_init(&remote, on_remote);
    lull_task_post_remote(loop, &remote);
    lull_loop_ref(loop);

    char *text = live_text(loop, 2);
    CHECK(strstr(text, "2 live handle entries, 1 reference held") != NULL);
    CHECK(strstr(text, "session.idle-timeout") != NULL);
    CHECK(strstr(text, "due in 5000 ns  unref") != NULL);
    CHECK(strstr(text, "remote") != NULL);
    CHECK(strstr(text, "task") != NULL);
    char addr[64];
    snprintf(addr, sizeof addr, "callback %#lx",
             (unsigned long)(uintptr_t)on_remote);
    CHECK(strstr(text, addr) != NULL); /* unnamed: its address */
    free(text);

    CHECK_EQ(lull_loop_print_live(NULL, stderr), -EINVAL);
    CHECK_EQ(lull_loop_print_live(loop, NULL), -EINVAL);
    CHECK_EQ(lull_loop_walk(loop, NULL, NULL), -EINVAL);
    CHECK_EQ(lull_loop_walk(NULL, collect, NULL), -EINVAL);

    lull_loop_unref(loop);
    lull_timer_stop(&t);
    CHECK_EQ(lull_loop_settle(loop), 1);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* Output that cannot be written is the call's error, not a count of lines
 * nobody will read: a pipe whose reader is gone (-EPIPE), and a full pipe
 * the caller made non-blocking (-EAGAIN), which also never hangs. */
TEST(print_live_reports_an_output_it_cannot_write) {
    CHECK(signal(SIGPIPE, SIG_IGN) != SIG_ERR);
    lull_loop *loop = new_loop();
    enum { TASKS = 4096 }; /* 4096 lines: more than a pipe's 64 KiB */
    static lull_task tasks[TASKS];
    for (int i = 0; i < TASKS; i++) {
        lull_task_init(&tasks[i], on_task);
        lull_task_post(loop, &tasks[i]);
    }

    int gone[2];
    CHECK_EQ(pipe2(gone, O_CLOEXEC), 0);
    CHECK_EQ(close(gone[0]), 0);
    FILE *out = fdopen(gone[1], "w");
    CHECK(out != NULL);
    CHECK_EQ(lull_loop_print_live(loop, out), -EPIPE);
    fclose(out);

    int full[2];
    CHECK_EQ(pipe2(full, O_CLOEXEC | O_NONBLOCK), 0);
    out = fdopen(full[1], "w");
    CHECK(out != NULL);
    CHECK_EQ(lull_loop_print_live(loop, out), -EAGAIN);
    fclose(out);
    close(full[0]);

    CHECK_EQ(lull_loop_settle(loop), TASKS);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A stream's write waiting for the loop's next flush point is ready work,
 * and the walk shows it (the stream's own flush task). */
TEST(walk_shows_a_write_waiting_for_the_flush_point) {
    lull_loop *loop = new_loop();
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    lull_stream s;
    CHECK_EQ(lull_stream_open(loop, &s, sv[0], NULL), 0);
    CHECK_EQ(lull_endpoint_send_copy(&s.ep, "hello", 5), 0);
    seen w = {.n = 0};
    lull_loop_walk(loop, collect, &w);
    const lull_live *e = find(&w, &s.flush, LULL_LIVE_READY);
    CHECK_EQ(e->kind, LULL_HANDLE_TASK);
    find(&w, &s.io, LULL_LIVE_STARTED);
    CHECK_EQ(w.n, 2);
    CHECK_U64_EQ(counts(loop).ready, 1);
    CHECK(lull_loop_settle(loop) >= 1); /* the flush point writes it */
    CHECK_U64_EQ(counts(loop).ready, 0);
    CHECK_EQ(lull_endpoint_close(&s.ep, 0), 0);
    close(sv[1]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* lull's own handles are named by what they are and whose they are: a
 * stream's socket and write flush, a loopback end's delivery turn, and a
 * user callback keeps the name the user gave it. */
TEST(print_live_names_lulls_own_handles) {
    lull_loop *loop = new_loop();
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    lull_stream s;
    CHECK_EQ(lull_stream_open(loop, &s, sv[0], NULL), 0);
    CHECK_EQ(lull_endpoint_send_copy(&s.ep, "hello", 5), 0);
    lull_loopback a, b;
    CHECK_EQ(lull_loopback_pair(loop, &a, &b, NULL), 0);
    CHECK_EQ(lull_endpoint_send_copy(&a.ep, "x", 1), 0);

    char *text = live_text(loop, 3);
    char want[128];
    snprintf(want, sizeof want, "lull_stream fd of lull_stream %p", (void *)&s);
    CHECK(strstr(text, want) != NULL);
    snprintf(want, sizeof want, "lull_stream write flush of lull_stream %p",
             (void *)&s);
    CHECK(strstr(text, want) != NULL);
    snprintf(want, sizeof want,
             "lull_loopback delivery task of lull_loopback %p", (void *)&b);
    CHECK(strstr(text, want) != NULL);
    CHECK(strstr(text, "callback 0x") == NULL); /* nothing unnamed */
    free(text);

    CHECK(lull_loop_settle(loop) >= 2);
    CHECK_EQ(lull_endpoint_close(&a.ep, 0), 0);
    CHECK_EQ(lull_endpoint_close(&b.ep, 0), 0);
    CHECK_EQ(lull_endpoint_close(&s.ep, 0), 0);
    close(sv[1]);
    CHECK(lull_loop_settle(loop) >= 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* An unref with no reference is a programming error: debug builds assert;
 * release builds leave the count at zero (it never wraps to 2^32 - 1,
 * which would keep lull_loop_free at -EBUSY for ever). */
static void unref_below_zero(void *arg) {
    (void)arg;
    lull_loop *loop = new_loop();
    lull_loop_ref(loop);
    lull_loop_unref(loop);
    lull_loop_unref(loop);
    lull_metrics m;
    lull_loop_metrics(loop, &m);
    CHECK_U64_EQ(m.live_refs, 0);
    CHECK(!lull_loop_alive(loop));
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(unref_without_a_reference) {
    if (check_debug_build())
        CHECK(check_dies(unref_below_zero, NULL,
                         "lull: lull_loop_unref without a reference"));
    else
        CHECK(check_exits_cleanly(unref_below_zero, NULL));
}

/* Timers armed inside a callback, the later ones deferred (their deadline
 * waits for the loop's next clock reading, src/timer.c): a walk from that
 * callback lists every one of them as armed (it takes a reading to give
 * them their deadlines). */
typedef struct arm_then_walk {
    lull_task task;
    lull_timer timers[3];
    int armed_seen;
} arm_then_walk;

static void count_our_armed(const lull_live *e, void *arg) {
    arm_then_walk *a = arg;
    for (int i = 0; i < 3; i++)
        if (e->cause == LULL_LIVE_ARMED && e->handle == &a->timers[i])
            a->armed_seen++;
}

static void arm_and_walk(lull_task *t) {
    arm_then_walk *a = LULL_CONTAINER_OF(t, arm_then_walk, task);
    for (int i = 0; i < 3; i++)
        lull_timer_start(&a->timers[i], 1000000000ull + (uint64_t)i, 0);
    CHECK(lull_loop_walk(t->loop, count_our_armed, a) >= 3);
}

TEST(walk_inside_a_callback_lists_the_timers_it_armed) {
    lull_loop *loop = NULL; /* the real clock: only there are arms deferred */
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    static arm_then_walk a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < 3; i++)
        lull_timer_init(loop, &a.timers[i], on_timer);
    /* Room in the heap first: an arm that finds it full reads the clock
     * rather than defer. */
    for (int i = 0; i < 3; i++)
        lull_timer_start(&a.timers[i], 1000000000ull, 0);
    for (int i = 0; i < 3; i++)
        lull_timer_stop(&a.timers[i]);
    lull_task_init(&a.task, arm_and_walk);
    lull_task_post(loop, &a.task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_NOWAIT), 0);
    CHECK_EQ(a.armed_seen, 3);
    for (int i = 0; i < 3; i++)
        lull_timer_stop(&a.timers[i]);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* One entry is one "entry". */
TEST(print_live_of_one_entry) {
    lull_loop *loop = new_loop();
    lull_timer t;
    lull_timer_init(loop, &t, on_timer);
    lull_timer_start(&t, 5000, 0);
    live_says(loop, 1, "1 live handle entry, 0 references held");
    lull_timer_stop(&t);
    CHECK_EQ(lull_loop_free(loop), 0);
}
