/* The endpoint calls that reach past the frame interface to the transport:
 * lull_endpoint_read_stop, _read_start and _shutdown. The protocol code
 * below sees only lull_endpoint * (and finds its own state through
 * ep->data), and each case runs it unchanged on a loopback pair and on two
 * streams over a socketpair: pausing holds frames back, including inside
 * a frame callback; a resume delivers what waited, in order; a shutdown
 * refuses sends at once, delivers what was sent, and then the peer closes
 * with 0 while this end reads on; a paused peer hears the end only once it
 * resumes. Arguments: NULL, never set up, closed. */
#include "check.h"

#include <errno.h>
#include <lull.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { LOOPBACK, LOOPBACK_TIMER, STREAM };

/* One end's protocol state, reached through ep->data. */
typedef struct side {
    int id;          /* trace: id * 100 + frame value; id * 100 + 99: close */
    int frames;      /* frames received */
    uint32_t got[8]; /* their values */
    int pause_after; /* != 0: read_stop inside the frame callback after this
                        many frames */
    bool closed;
    int reason;
} side;

static void on_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    side *s = ep->data;
    CHECK_EQ(len, sizeof(uint32_t));
    CHECK(s->frames < 8);
    memcpy(&s->got[s->frames++], bytes, sizeof(uint32_t));
    check_trace(s->id * 100 + (int)s->got[s->frames - 1]);
    if (s->pause_after && s->frames == s->pause_after)
        CHECK_EQ(lull_endpoint_read_stop(ep), 0);
}

static void on_close(lull_endpoint *ep, int reason) {
    side *s = ep->data;
    CHECK(!s->closed);
    s->closed = true;
    s->reason = reason;
    check_trace(s->id * 100 + 99);
}

static int send_u32(lull_endpoint *ep, uint32_t v) {
    return lull_endpoint_send_copy(ep, &v, sizeof v);
}

/* The two transports, set up to the same lull_endpoint * pair. */
typedef struct pair {
    lull_loop *loop;
    lull_loopback la, lb;
    lull_stream sa, sb;
    lull_endpoint *a, *b;
    side A, B;
} pair;

static void pair_open(pair *p, int kind) {
    memset(p, 0, sizeof *p);
    signal(SIGPIPE, SIG_DFL); /* a SIGPIPE anywhere fails the case */
    CHECK_EQ(lull_loop_new(&p->loop, NULL), 0);
    check_trace_reset();
    if (kind != STREAM) {
        /* LOOPBACK_TIMER: each frame a zero-delay timer turn. */
        lull_loopback_options o = {.deliver = kind == LOOPBACK_TIMER
                                                  ? LULL_DELIVER_TIMER
                                                  : LULL_DELIVER_TASK};
        CHECK_EQ(lull_loopback_pair(p->loop, &p->la, &p->lb, &o), 0);
        p->a = &p->la.ep;
        p->b = &p->lb.ep;
    } else {
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        CHECK_EQ(lull_stream_open(p->loop, &p->sa, sv[0], NULL), 0);
        CHECK_EQ(lull_stream_open(p->loop, &p->sb, sv[1], NULL), 0);
        p->a = &p->sa.ep;
        p->b = &p->sb.ep;
    }
    p->A.id = 1;
    p->B.id = 2;
    p->a->data = &p->A;
    p->b->data = &p->B;
    lull_endpoint_set_callbacks(p->a, on_frame, NULL, on_close);
    lull_endpoint_set_callbacks(p->b, on_frame, NULL, on_close);
}

/* Iterations without blocking: enough for anything ready to arrive. */
static void run_a_while(pair *p) {
    for (int i = 0; i < 10; i++)
        CHECK_EQ(lull_loop_run(p->loop, LULL_RUN_NOWAIT), 0);
}

/* Runs (blocking for fds) until *v >= want, at most 1000 iterations. */
static void run_until(pair *p, const int *v, int want) {
    for (int i = 0; i < 1000 && *v < want; i++)
        CHECK_EQ(lull_loop_run(p->loop, LULL_RUN_ONCE), 0);
    CHECK_LE(want, *v);
}

static void run_until_closed(pair *p) {
    for (int i = 0; i < 1000 && !(p->A.closed && p->B.closed); i++)
        CHECK_EQ(lull_loop_run(p->loop, LULL_RUN_NOWAIT), 0);
    CHECK(p->A.closed && p->B.closed);
}

static void pair_free(pair *p) {
    if (!p->A.closed) CHECK_EQ(lull_endpoint_close(p->a, 0), 0);
    if (!p->B.closed) CHECK_EQ(lull_endpoint_close(p->b, 0), 0);
    run_until_closed(p);
    CHECK_EQ(lull_loop_free(p->loop), 0);
}

/* ---------------------------------------------------------------- cases */

static void read_stop_and_start(int kind) {
    pair p;
    pair_open(&p, kind);
    CHECK_EQ(lull_endpoint_read_stop(p.b), 0);
    CHECK_EQ(lull_endpoint_read_stop(p.b), 0); /* idempotent */
    for (uint32_t i = 0; i < 3; i++)
        CHECK_EQ(send_u32(p.a, i), 0);
    run_a_while(&p);
    CHECK_EQ(p.B.frames, 0);
    if (kind != STREAM) CHECK_EQ(p.a->queued, 3 * sizeof(uint32_t));
    CHECK_EQ(lull_endpoint_read_start(p.b), 0);
    CHECK_EQ(p.B.frames, 0); /* in a later turn, not inside the call */
    CHECK_EQ(lull_endpoint_read_start(p.b), 0);
    run_until(&p, &p.B.frames, 3);
    CHECK_EQ(p.B.got[0] + p.B.got[1] * 10 + p.B.got[2] * 100, 210);
    /* Paused inside the frame callback: the next frame waits. */
    p.B.pause_after = 4;
    CHECK_EQ(send_u32(p.a, 3), 0);
    CHECK_EQ(send_u32(p.a, 4), 0);
    run_until(&p, &p.B.frames, 4);
    run_a_while(&p);
    CHECK_EQ(p.B.frames, 4);
    CHECK_EQ(lull_endpoint_read_start(p.b), 0);
    run_until(&p, &p.B.frames, 5);
    CHECK_EQ(p.B.got[4], 4);
    CHECK_TRACE(200, 201, 202, 203, 204);
    CHECK_EQ(p.A.frames, 0);
    pair_free(&p);
}

TEST(loopback_read_stop_and_start) {
    read_stop_and_start(LOOPBACK);
}

TEST(loopback_timer_read_stop_and_start) {
    read_stop_and_start(LOOPBACK_TIMER);
}

TEST(stream_read_stop_and_start) {
    read_stop_and_start(STREAM);
}

/* A sends two frames and shuts down; B, not yet aware, sends one. B gets
 * A's two, then closes with 0 (the end); A, which reads on, gets B's frame
 * and then B's close, 0. */
static void shutdown_half_closes(int kind) {
    pair p;
    pair_open(&p, kind);
    CHECK_EQ(send_u32(p.a, 0), 0);
    CHECK_EQ(send_u32(p.a, 1), 0);
    CHECK_EQ(lull_endpoint_shutdown(p.a), 0);
    CHECK_EQ(lull_endpoint_shutdown(p.a), 0); /* idempotent */
    CHECK_EQ(send_u32(p.a, 2), -EPIPE);
    CHECK(!lull_endpoint_writable(p.a));
    CHECK(!lull_endpoint_closed(p.a));
    CHECK_EQ(send_u32(p.b, 7), 0);
    run_until_closed(&p);
    CHECK_EQ(p.B.frames, 2);
    CHECK_EQ(p.B.got[0], 0);
    CHECK_EQ(p.B.got[1], 1);
    CHECK_EQ(p.B.reason, 0);
    CHECK_EQ(p.A.frames, 1);
    CHECK_EQ(p.A.got[0], 7);
    CHECK_EQ(p.A.reason, 0);
    /* Each end's frames come before its own close. */
    CHECK(check_trace_find(201) < check_trace_find(299));
    CHECK(check_trace_find(107) < check_trace_find(199));
    CHECK_EQ(lull_loop_free(p.loop), 0);
}

TEST(loopback_shutdown_half_closes) {
    shutdown_half_closes(LOOPBACK);
}

TEST(loopback_timer_shutdown_half_closes) {
    shutdown_half_closes(LOOPBACK_TIMER);
}

TEST(stream_shutdown_half_closes) {
    shutdown_half_closes(STREAM);
}

/* A paused peer hears of the end only when it reads again. */
static void shutdown_to_a_paused_peer(int kind) {
    pair p;
    pair_open(&p, kind);
    CHECK_EQ(lull_endpoint_read_stop(p.b), 0);
    CHECK_EQ(send_u32(p.a, 5), 0);
    CHECK_EQ(lull_endpoint_shutdown(p.a), 0);
    run_a_while(&p);
    CHECK_EQ(p.B.frames, 0);
    CHECK(!p.B.closed && !p.A.closed);
    CHECK_EQ(lull_endpoint_read_start(p.b), 0);
    run_until_closed(&p);
    CHECK_EQ(p.B.frames, 1);
    CHECK_EQ(p.B.got[0], 5);
    CHECK_EQ(p.B.reason, 0);
    CHECK_EQ(p.A.reason, 0);
    CHECK_EQ(lull_loop_free(p.loop), 0);
}

TEST(loopback_shutdown_to_a_paused_peer) {
    shutdown_to_a_paused_peer(LOOPBACK);
}

TEST(loopback_timer_shutdown_to_a_paused_peer) {
    shutdown_to_a_paused_peer(LOOPBACK_TIMER);
}

TEST(stream_shutdown_to_a_paused_peer) {
    shutdown_to_a_paused_peer(STREAM);
}

/* A paused end closed by its own call still gets its close callback. */
static void close_while_paused(int kind) {
    pair p;
    pair_open(&p, kind);
    CHECK_EQ(lull_endpoint_read_stop(p.b), 0);
    CHECK_EQ(send_u32(p.a, 1), 0);
    run_a_while(&p);
    CHECK_EQ(lull_endpoint_close(p.b, -ECANCELED), 0);
    run_until_closed(&p);
    CHECK_EQ(p.B.frames, 0);
    CHECK_EQ(p.B.reason, -ECANCELED);
    CHECK_EQ(lull_loop_free(p.loop), 0);
}

TEST(loopback_close_while_paused) {
    close_while_paused(LOOPBACK);
}

TEST(loopback_timer_close_while_paused) {
    close_while_paused(LOOPBACK_TIMER);
}

TEST(stream_close_while_paused) {
    close_while_paused(STREAM);
}

/* NULL and never-set-up endpoints are -EINVAL; a closed one -ENOTCONN. */
static void control_errors(int kind) {
    CHECK_EQ(lull_endpoint_read_stop(NULL), -EINVAL);
    CHECK_EQ(lull_endpoint_read_start(NULL), -EINVAL);
    CHECK_EQ(lull_endpoint_shutdown(NULL), -EINVAL);
    lull_endpoint zero;
    memset(&zero, 0, sizeof zero);
    CHECK_EQ(lull_endpoint_read_stop(&zero), -EINVAL);
    CHECK_EQ(lull_endpoint_read_start(&zero), -EINVAL);
    CHECK_EQ(lull_endpoint_shutdown(&zero), -EINVAL);
    pair p;
    pair_open(&p, kind);
    CHECK_EQ(lull_endpoint_close(p.a, 0), 0);
    CHECK_EQ(lull_endpoint_read_stop(p.a), -ENOTCONN);
    CHECK_EQ(lull_endpoint_read_start(p.a), -ENOTCONN);
    CHECK_EQ(lull_endpoint_shutdown(p.a), -ENOTCONN);
    pair_free(&p);
}

TEST(loopback_control_errors) {
    control_errors(LOOPBACK);
}

TEST(loopback_timer_control_errors) {
    control_errors(LOOPBACK_TIMER);
}

TEST(stream_control_errors) {
    control_errors(STREAM);
}

/* Hostile use from inside callbacks: the sender shuts down from inside
 * the receiver's frame callback, the receiver pauses and resumes itself
 * there, and a closed end answers -ENOTCONN inside its close callback
 * (where it is the caller's, and may be freed). */
static pair *g_p;
static int g_in_close_rc = 1;

static void on_frame_meddling(lull_endpoint *ep, const void *bytes,
                              size_t len) {
    on_frame(ep, bytes, len);
    side *s = ep->data;
    if (s->frames == 1) {
        CHECK_EQ(lull_endpoint_shutdown(g_p->a), 0); /* the sender's */
        CHECK_EQ(lull_endpoint_read_stop(ep), 0);
        CHECK_EQ(lull_endpoint_read_start(ep), 0);
    }
}

static void on_close_asking(lull_endpoint *ep, int reason) {
    on_close(ep, reason);
    g_in_close_rc = lull_endpoint_read_start(ep);
}

static void meddling_in_callbacks(int kind) {
    pair p;
    pair_open(&p, kind);
    g_p = &p;
    g_in_close_rc = 1;
    lull_endpoint_set_callbacks(p.b, on_frame_meddling, NULL, on_close_asking);
    CHECK_EQ(send_u32(p.a, 0), 0);
    CHECK_EQ(send_u32(p.a, 1), 0);
    run_until_closed(&p);
    CHECK_EQ(p.B.frames, 2); /* sent before the shutdown: delivered */
    CHECK_EQ(p.B.reason, 0);
    CHECK_EQ(p.A.reason, 0);
    CHECK_EQ(g_in_close_rc, -ENOTCONN);
    CHECK_EQ(lull_loop_free(p.loop), 0);
}

TEST(loopback_meddling_in_callbacks) {
    meddling_in_callbacks(LOOPBACK);
}

TEST(loopback_timer_meddling_in_callbacks) {
    meddling_in_callbacks(LOOPBACK_TIMER);
}

TEST(stream_meddling_in_callbacks) {
    meddling_in_callbacks(STREAM);
}

/* A frame whose struct was rewritten while queued (a struct assignment
 * clears in_flight) and sent again. The last queued (the transport sees
 * it at once): refused as a frame in flight is, the endpoint closes with
 * -EBUSY, the frame delivered at most once and released once. A loopback
 * linked it to itself, and delivered it for ever. */
static int g_releases;
static void count_release(lull_frame *f) {
    (void)f;
    g_releases++;
}

static void resent_last_closes(int kind) {
    pair p;
    pair_open(&p, kind);
    g_releases = 0;
    static uint32_t v = 7;
    static lull_frame f;
    f = (lull_frame){.bytes = &v, .len = sizeof v, .release = count_release};
    CHECK_EQ(lull_endpoint_send(p.a, &f), 0);
    f = (lull_frame){.bytes = &v, .len = sizeof v, .release = count_release};
    (void)lull_endpoint_send(p.a, &f);
    for (int i = 0; i < 1000 && !p.A.closed; i++)
        CHECK_EQ(lull_loop_run(p.loop, LULL_RUN_NOWAIT), 0);
    CHECK(p.A.closed);
    CHECK_EQ(p.A.reason, -EBUSY);
    run_until_closed(&p);
    CHECK_LE(p.B.frames, 1);
    CHECK_EQ(g_releases, 1);
    CHECK_EQ(lull_loop_free(p.loop), 0);
}

TEST(loopback_resent_last_frame_closes) {
    resent_last_closes(LOOPBACK);
}

TEST(loopback_timer_resent_last_frame_closes) {
    resent_last_closes(LOOPBACK_TIMER);
}

TEST(stream_resent_last_frame_closes) {
    resent_last_closes(STREAM);
}

/* The same from the middle of the queue: the send cut the queue there,
 * and the frames behind it were never delivered nor released. Finding it
 * is a walk of the queue: a debug build stops, as lull_journal_append's
 * does. */
static void resend_from_the_middle(void *arg) {
    pair p;
    pair_open(&p, (int)(intptr_t)arg);
    static uint32_t v[3] = {0, 1, 2};
    static lull_frame f[3];
    for (int i = 0; i < 3; i++) {
        f[i] = (lull_frame){.bytes = &v[i], .len = sizeof v[i]};
        CHECK_EQ(lull_endpoint_send(p.a, &f[i]), 0);
    }
    f[1] = (lull_frame){.bytes = &v[1], .len = sizeof v[1]};
    (void)lull_endpoint_send(p.a, &f[1]);
}

static void resent_from_the_middle_stops(int kind) {
    if (!check_debug_build()) {
        printf("skipped: asserts are compiled out of this build\n");
        return;
    }
    CHECK(check_dies(resend_from_the_middle, (void *)(intptr_t)kind,
                     "lull: lull_endpoint_send of a frame already queued"));
}

TEST(loopback_resent_frame_from_the_middle_stops) {
    resent_from_the_middle_stops(LOOPBACK);
}

TEST(loopback_timer_resent_frame_from_the_middle_stops) {
    resent_from_the_middle_stops(LOOPBACK_TIMER);
}

TEST(stream_resent_frame_from_the_middle_stops) {
    resent_from_the_middle_stops(STREAM);
}

/* A deep queue: 500,000 frames sent to an end that does not read (the
 * loopback's inbox, the stream's queue to a peer that is not read). Debug
 * builds looked for each frame in the whole queue before appending it
 * (lull__frame_check_unqueued): 125 billion steps, 10 s at 100,000 and
 * hours here, where a send costs the same at any depth. Every frame is
 * released once, at the close. */
static void deep_queue_sends(int kind) {
    enum { DEEP = 500000 };
    pair p;
    pair_open(&p, kind);
    g_releases = 0;
    static uint32_t v = 7;
    lull_frame *f = calloc(DEEP, sizeof *f);
    CHECK(f);
    CHECK_EQ(lull_endpoint_read_stop(p.b), 0);
    for (int i = 0; i < DEEP; i++) {
        f[i] = (lull_frame){
            .bytes = &v, .len = sizeof v, .release = count_release};
        CHECK_EQ(lull_endpoint_send(p.a, &f[i]), 0);
    }
    CHECK_EQ(lull_endpoint_close(p.a, -ECONNABORTED), 0);
    CHECK_EQ(lull_endpoint_close(p.b, -ECONNABORTED), 0);
    run_until_closed(&p);
    CHECK_EQ(g_releases, DEEP);
    CHECK_EQ(lull_loop_free(p.loop), 0);
    free(f);
}

TEST(loopback_deep_queue_sends_in_linear_time) {
    deep_queue_sends(LOOPBACK);
}

TEST(loopback_timer_deep_queue_sends_in_linear_time) {
    deep_queue_sends(LOOPBACK_TIMER);
}

TEST(stream_deep_queue_sends_in_linear_time) {
    deep_queue_sends(STREAM);
}
