/* The simulated network (src/sim.c): listen, accept and connect; a
 * stream's guarantees on connections that do not break (bytes in order,
 * none lost, none duplicated) under delay, jitter, bandwidth, small
 * windows and slow readers, for many seeds; each fault kind seen to
 * happen (partitions that resume or break, resets at a byte, refused
 * connects, reads cut into chunks of every size); the close handshake;
 * one event per turn; and the same seed giving the same trace. All on the
 * virtual clock. */
#include "check.h"

#include <errno.h>
#include <lull.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS 1000000ull

static lull_loop *vloop(void) {
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL,
                           .flags = LULL_LOOP_AUTO_ADVANCE};
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    return loop;
}

/* The byte at position i of a test stream. */
static unsigned char pattern(uint64_t i) {
    return (unsigned char)(i * 131u + (i >> 9));
}

/* One end of a connection under test. */
typedef struct end {
    lull_simconn c;
    int connects, connect_status;
    int closes, close_reason;
    uint64_t close_time;
    uint64_t got;    /* bytes read, checked against pattern() (raw) */
    uint64_t frames; /* on_frame calls */
    size_t min_chunk, max_chunk;
    uint64_t first_at; /* virtual time of the first read */
    bool echo;         /* send every frame back (framed) */
    bool bad;          /* a byte out of order was read */
    uint64_t drains;
} end;

static lull_loop *L;

static void on_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    end *e = ep->data;
    if (e->frames == 0) e->first_at = lull_loop_now(L);
    e->frames++;
    if (len < e->min_chunk) e->min_chunk = len;
    if (len > e->max_chunk) e->max_chunk = len;
    const unsigned char *b = bytes;
    for (size_t i = 0; i < len; i++)
        if (b[i] != pattern(e->got + i)) e->bad = true;
    e->got += len;
    if (e->echo) CHECK_EQ(lull_endpoint_send_copy(ep, bytes, len), 0);
}

static void on_drain(lull_endpoint *ep) {
    end *e = ep->data;
    e->drains++;
}

static void on_close(lull_endpoint *ep, int reason) {
    end *e = ep->data;
    e->closes++;
    e->close_reason = reason;
    e->close_time = lull_loop_now(L);
}

static void on_connect(lull_simconn *c, int status) {
    end *e = LULL_CONTAINER_OF(c, end, c);
    e->connects++;
    e->connect_status = status;
}

static void end_setup(end *e) {
    memset(e, 0, sizeof *e);
    e->min_chunk = SIZE_MAX;
    e->c.ep.data = e;
}

/* The server side: accepts into `accepted` (one connection per case). */
static end accepted;
static lull_simconn_options accept_opts;
static bool dont_accept;

static void on_connection(lull_simserver *srv) {
    if (dont_accept) return;
    bool echo = accepted.echo;
    end_setup(&accepted);
    CHECK_EQ(lull_simserver_accept(srv, &accepted.c, &accept_opts), 0);
    accepted.echo = echo;
    lull_endpoint_set_callbacks(&accepted.c.ep, on_frame, on_drain, on_close);
}

static void client_connect(lull_simnet *net, end *e, const char *addr,
                           const lull_simconn_options *o) {
    end_setup(e);
    CHECK_EQ(lull_simconn_connect(net, &e->c, addr, o, on_connect), 0);
    lull_endpoint_set_callbacks(&e->c.ep, on_frame, on_drain, on_close);
}

/* Sends `total` bytes of the pattern from position *pos in frames of
 * random sizes (copied). */
static void send_pattern(lull_endpoint *ep, uint64_t *pos, uint64_t total,
                         uint64_t *rng) {
    static unsigned char buf[8192];
    while (total) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = 1 + (size_t)((*rng >> 33) % sizeof buf);
        if (n > total) n = (size_t)total;
        for (size_t i = 0; i < n; i++)
            buf[i] = pattern(*pos + i);
        CHECK_EQ(lull_endpoint_send_copy(ep, buf, n), 0);
        *pos += n;
        total -= n;
    }
}

static void finish(lull_loop *loop, lull_simnet *net, lull_simserver *srv) {
    if (srv) lull_simserver_close(srv);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_simnet_free(net), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(connect_send_echo_close) {
    /* A framed echo on a perfect network: frames back whole and in
     * order, nothing inside the sender's call, each close callback once,
     * and everything freed. */
    lull_loop *loop = L = vloop();
    lull_simnet *net;
    lull_simnet_options no = {.trace = getenv("SIM_TRACE") ? stderr : NULL};
    CHECK_EQ(lull_simnet_new(&net, loop, &no), 0);
    lull_simserver srv;
    accept_opts = (lull_simconn_options){0};
    dont_accept = false;
    CHECK_EQ(lull_simserver_listen(net, &srv, "echo", on_connection), 0);
    accepted.echo = true;
    end cl;
    client_connect(net, &cl, "echo", NULL);
    uint64_t pos = 0, rng = 1;
    send_pattern(&cl.c.ep, &pos, 3000, &rng); /* queued before connect */
    CHECK_EQ(cl.frames, 0);
    CHECK_EQ(lull_loop_settle(loop) > 0, 1);
    CHECK_EQ(cl.connects, 1);
    CHECK_EQ(cl.connect_status, 0);
    CHECK_EQ(srv.accepted, 1);
    CHECK(strcmp(accepted.c.peer, "client:1") == 0);
    CHECK(strcmp(cl.c.peer, "echo#1") == 0);
    CHECK_U64_EQ(accepted.got, 3000);
    CHECK_U64_EQ(cl.got, 3000);
    CHECK(!cl.bad && !accepted.bad);
    CHECK_U64_EQ(cl.frames, accepted.frames); /* framed: whole frames */
    CHECK_EQ(lull_endpoint_close(&cl.c.ep, 0), 0);
    CHECK_EQ(cl.closes, 0); /* a later turn */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(cl.closes, 1);
    CHECK_EQ(cl.close_reason, 0);
    CHECK_EQ(accepted.closes, 1);
    CHECK_EQ(accepted.close_reason, 0);      /* EOF */
    CHECK_EQ(lull_simnet_free(net), -EBUSY); /* still listening */
    finish(loop, net, &srv);
}

TEST(refused_connects) {
    /* Nobody listening, a refusal fault, and a server that does not
     * accept: the connect callback gets -ECONNREFUSED in a later turn,
     * then the close callback, in the same turn. */
    lull_loop *loop = L = vloop();
    lull_simnet *net;
    lull_simnet_options o = {.seed = 3};
    o.faults.delay_ns = 5 * MS;
    CHECK_EQ(lull_simnet_new(&net, loop, &o), 0);
    end a;
    client_connect(net, &a, "nobody", NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(a.connect_status, -ECONNREFUSED);
    CHECK_EQ(a.closes, 1);
    CHECK_EQ(a.close_reason, -ECONNREFUSED);
    CHECK_U64_EQ(a.close_time, 10 * MS); /* there and back */
    lull_simserver srv;
    dont_accept = false;
    accept_opts = (lull_simconn_options){0};
    CHECK_EQ(lull_simserver_listen(net, &srv, "s", on_connection), 0);
    lull_simfaults refuse = {.refuse_permille = 1000};
    lull_simconn_options co = {.faults = &refuse};
    client_connect(net, &a, "s", &co);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(a.connect_status, -ECONNREFUSED);
    CHECK_EQ(a.closes, 1);
    CHECK_EQ(srv.refused, 1);
    dont_accept = true;
    client_connect(net, &a, "s", NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(a.connect_status, -ECONNREFUSED);
    CHECK_EQ(srv.refused, 2);
    CHECK_EQ(srv.accepted, 0);
    lull_simnet_stats st;
    lull_simnet_get_stats(net, &st);
    CHECK_U64_EQ(st.refused, 3);
    dont_accept = false;
    finish(loop, net, &srv);
}

/* A raw connection with every fault that does not break it: the bytes
 * arrive in order, none lost, none duplicated, in chunks of every size. */
static void stream_case(uint64_t seed, bool raw, end *cl_out) {
    lull_loop *loop = L = vloop();
    lull_simnet *net;
    lull_simnet_options o = {.seed = seed};
    o.faults = (lull_simfaults){.delay_ns = 2 * MS,
                                .jitter_ns = 3 * MS,
                                .bandwidth = 10u << 20,
                                .window = 3000,
                                .slow_permille = 500,
                                .slow_read_ns = 1 * MS};
    CHECK_EQ(lull_simnet_new(&net, loop, &o), 0);
    lull_simserver srv;
    accept_opts = (lull_simconn_options){.flags = raw ? LULL_SIMCONN_RAW : 0};
    dont_accept = false;
    CHECK_EQ(lull_simserver_listen(net, &srv, "sink", on_connection), 0);
    end *cl = cl_out;
    client_connect(net, cl, "sink", NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    uint64_t pos = 0, rng = seed + 1, total = 200000;
    send_pattern(&cl->c.ep, &pos, total, &rng);
    uint64_t t0 = lull_loop_now(loop);
    CHECK_EQ(lull_simconn_shutdown(&cl->c), 0);
    CHECK_EQ(lull_endpoint_send_copy(&cl->c.ep, "x", 1), -EPIPE);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    if (accepted.got != total || accepted.bad)
        check_fail(__FILE__, __LINE__, "seed %llu: got %llu of %llu%s",
                   (unsigned long long)seed, (unsigned long long)accepted.got,
                   (unsigned long long)total, accepted.bad ? ", bad" : "");
    /* EOF after the last byte, and the client's close callback after
     * that (the server closed on EOF, the client reads its EOF). */
    CHECK_EQ(accepted.closes, 1);
    CHECK_EQ(accepted.close_reason, 0);
    CHECK_EQ(cl->closes, 1);
    CHECK_EQ(cl->close_reason, 0);
    /* The bandwidth: 200,000 bytes at 10 MiB/s take 19 ms at least; the
     * delay: nothing before 2 ms. */
    CHECK(accepted.close_time - t0 >= 19 * MS);
    CHECK(accepted.first_at >= 2 * MS);
    finish(loop, net, &srv);
}

TEST(raw_stream_guarantees_for_many_seeds) {
    size_t min_chunk = SIZE_MAX, max_chunk = 0;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        end cl;
        stream_case(seed, true, &cl);
        if (accepted.min_chunk < min_chunk) min_chunk = accepted.min_chunk;
        if (accepted.max_chunk > max_chunk) max_chunk = accepted.max_chunk;
    }
    /* Partial reads of every size: single bytes, and reads across frames
     * (longer than any one send's piece of the window). */
    CHECK_EQ(min_chunk, 1);
    CHECK(max_chunk > 1460);
}

TEST(framed_frames_whole_for_many_seeds) {
    for (uint64_t seed = 1; seed <= 20; seed++) {
        end cl;
        stream_case(seed, false, &cl);
        CHECK(accepted.frames > 0);
    }
}

TEST(partition_holds_then_resumes) {
    lull_loop *loop = L = vloop();
    lull_simnet *net;
    lull_simnet_options o = {.seed = 9};
    o.faults.delay_ns = 1 * MS;
    CHECK_EQ(lull_simnet_new(&net, loop, &o), 0);
    lull_simserver srv;
    accept_opts = (lull_simconn_options){.flags = LULL_SIMCONN_RAW};
    dont_accept = false;
    CHECK_EQ(lull_simserver_listen(net, &srv, "p", on_connection), 0);
    end cl;
    client_connect(net, &cl, "p", NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    uint64_t t0 = lull_loop_now(loop);
    CHECK_EQ(lull_simconn_partition(&cl.c, 500 * MS, false), 0);
    uint64_t pos = 0, rng = 5;
    send_pattern(&cl.c.ep, &pos, 50000, &rng);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(accepted.got, 50000);
    CHECK(!accepted.bad);
    CHECK_U64_EQ(accepted.first_at, t0 + 500 * MS); /* held, then on */
    CHECK_EQ(accepted.closes, 0);
    lull_simnet_stats st;
    lull_simnet_get_stats(net, &st);
    CHECK_U64_EQ(st.partitions, 1);
    CHECK_U64_EQ(st.breaks, 0);
    /* A partition that breaks: both ends closed with -ETIMEDOUT when it
     * ends; what was held is lost. */
    t0 = lull_loop_now(loop);
    CHECK_EQ(lull_simconn_partition(&accepted.c, 200 * MS, true), 0);
    send_pattern(&cl.c.ep, &pos, 1000, &rng);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(cl.closes, 1);
    CHECK_EQ(cl.close_reason, -ETIMEDOUT);
    CHECK_EQ(accepted.closes, 1);
    CHECK_EQ(accepted.close_reason, -ETIMEDOUT);
    CHECK_U64_EQ(cl.close_time, t0 + 200 * MS);
    CHECK_U64_EQ(accepted.got, 50000);
    lull_simnet_get_stats(net, &st);
    CHECK_U64_EQ(st.breaks, 1);
    finish(loop, net, &srv);
}

TEST(reset_at_a_byte) {
    /* lull_simconn_reset: the receiver reads exactly the bytes before the
     * reset's, then both ends close with -ECONNRESET. */
    lull_loop *loop = L = vloop();
    lull_simnet *net;
    CHECK_EQ(lull_simnet_new(&net, loop, NULL), 0);
    lull_simserver srv;
    accept_opts = (lull_simconn_options){.flags = LULL_SIMCONN_RAW};
    dont_accept = false;
    CHECK_EQ(lull_simserver_listen(net, &srv, "r", on_connection), 0);
    end cl;
    client_connect(net, &cl, "r", NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_simconn_reset(&cl.c, 1234), 0);
    uint64_t pos = 0, rng = 7;
    send_pattern(&cl.c.ep, &pos, 20000, &rng);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(accepted.got, 1234);
    CHECK(!accepted.bad);
    CHECK_EQ(accepted.close_reason, -ECONNRESET);
    CHECK_EQ(cl.close_reason, -ECONNRESET);
    CHECK_EQ(cl.closes, 1);
    CHECK_EQ(accepted.closes, 1);
    finish(loop, net, &srv);
}

TEST(random_resets_cut_at_random_bytes) {
    /* Every connection resets (reset_permille 1000) within its first
     * 5,000 bytes of one direction: a prefix of the bytes, in order, then
     * -ECONNRESET at both ends; the cut falls at many places. */
    int cuts_seen = 0;
    uint64_t last_cut = UINT64_MAX;
    for (uint64_t seed = 1; seed <= 30; seed++) {
        lull_loop *loop = L = vloop();
        lull_simnet *net;
        lull_simnet_options o = {.seed = seed};
        o.faults = (lull_simfaults){
            .reset_permille = 1000, .reset_within = 5000, .jitter_ns = MS};
        CHECK_EQ(lull_simnet_new(&net, loop, &o), 0);
        lull_simserver srv;
        accept_opts = (lull_simconn_options){.flags = LULL_SIMCONN_RAW};
        accepted.echo = false;
        dont_accept = false;
        CHECK_EQ(lull_simserver_listen(net, &srv, "r", on_connection), 0);
        end cl;
        lull_simconn_options co = {.flags = LULL_SIMCONN_RAW};
        client_connect(net, &cl, "r", &co);
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
        uint64_t p1 = 0, p2 = 0, rng = seed;
        send_pattern(&cl.c.ep, &p1, 6000, &rng);
        send_pattern(&accepted.c.ep, &p2, 6000, &rng);
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
        CHECK_EQ(cl.close_reason, -ECONNRESET);
        CHECK_EQ(accepted.close_reason, -ECONNRESET);
        CHECK(!cl.bad && !accepted.bad);
        /* The reset's direction was cut before byte 5,000; the other one
         * wherever it was when the reset came. */
        uint64_t cut = cl.got < accepted.got ? cl.got : accepted.got;
        CHECK(cut < 5000);
        if (cut != last_cut) cuts_seen++;
        last_cut = cut;
        lull_simnet_stats st;
        lull_simnet_get_stats(net, &st);
        CHECK_U64_EQ(st.resets, 1);
        finish(loop, net, &srv);
    }
    CHECK(cuts_seen > 20);
}

TEST(random_partitions_happen_and_heal_ends_them) {
    /* A connection partitioned every 100 ms on average for up to 50 ms,
     * never breaking: the bytes still all arrive; partitions were seen;
     * after lull_simnet_heal no new one starts. */
    lull_loop *loop = L = vloop();
    lull_simnet *net;
    lull_simnet_options o = {.seed = 11};
    o.faults = (lull_simfaults){.partition_every_ns = 100 * MS,
                                .partition_ns = 50 * MS,
                                .bandwidth = 1 << 20};
    CHECK_EQ(lull_simnet_new(&net, loop, &o), 0);
    lull_simserver srv;
    accept_opts = (lull_simconn_options){.flags = LULL_SIMCONN_RAW};
    dont_accept = false;
    CHECK_EQ(lull_simserver_listen(net, &srv, "p", on_connection), 0);
    end cl;
    client_connect(net, &cl, "p", NULL);
    lull_loop_advance(loop, MS);
    uint64_t pos = 0, rng = 3;
    send_pattern(&cl.c.ep, &pos, 2000000, &rng); /* ~2 s at 1 MiB/s */
    lull_loop_advance(loop, 5000 * MS);
    CHECK_U64_EQ(accepted.got, 2000000);
    CHECK(!accepted.bad);
    lull_simnet_stats st;
    lull_simnet_get_stats(net, &st);
    CHECK(st.partitions >= 10);
    uint64_t before = st.partitions;
    lull_simnet_heal(net);
    lull_loop_advance(loop, 5000 * MS);
    lull_simnet_get_stats(net, &st);
    CHECK_U64_EQ(st.partitions, before);
    CHECK_EQ(lull_endpoint_close(&cl.c.ep, 0), 0);
    finish(loop, net, &srv);
}

TEST(slow_reader_backpressure_and_drain) {
    /* A reader that stops: the window fills, the sender's queue passes
     * high water (not writable); resumed, everything arrives and the
     * sender is drained once. */
    lull_loop *loop = L = vloop();
    lull_simnet *net;
    CHECK_EQ(lull_simnet_new(&net, loop, NULL), 0);
    lull_simserver srv;
    accept_opts = (lull_simconn_options){.flags = LULL_SIMCONN_RAW};
    dont_accept = false;
    CHECK_EQ(lull_simserver_listen(net, &srv, "s", on_connection), 0);
    end cl;
    lull_simconn_options co = {.high_water = 10000};
    client_connect(net, &cl, "s", &co);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_simconn_read_stop(&accepted.c), 0);
    uint64_t pos = 0, rng = 2;
    send_pattern(&cl.c.ep, &pos, 100000, &rng);
    CHECK(!lull_endpoint_writable(&cl.c.ep));
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(accepted.got, 0);
    CHECK(!lull_endpoint_writable(&cl.c.ep));
    CHECK_U64_EQ(cl.c.ep.queued, 100000);
    CHECK_EQ(lull_simconn_read_start(&accepted.c), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(accepted.got, 100000);
    CHECK_U64_EQ(cl.drains, 1);
    CHECK(lull_endpoint_writable(&cl.c.ep));
    CHECK_EQ(lull_endpoint_close(&accepted.c.ep, -ECONNABORTED), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(accepted.close_reason, -ECONNABORTED);
    CHECK_EQ(cl.close_reason, 0);
    finish(loop, net, &srv);
}

TEST(close_sends_what_the_window_takes) {
    /* A close drops what never left, as a socket's does: the reader
     * (paused) gets the window's worth, then EOF; the sender's frames are
     * all released before its close callback. */
    lull_loop *loop = L = vloop();
    lull_simnet *net;
    lull_simnet_options o = {.faults = {.window = 4096}};
    CHECK_EQ(lull_simnet_new(&net, loop, &o), 0);
    lull_simserver srv;
    accept_opts = (lull_simconn_options){.flags = LULL_SIMCONN_RAW};
    dont_accept = false;
    CHECK_EQ(lull_simserver_listen(net, &srv, "s", on_connection), 0);
    end cl;
    client_connect(net, &cl, "s", NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_simconn_read_stop(&accepted.c), 0);
    uint64_t pos = 0, rng = 4;
    send_pattern(&cl.c.ep, &pos, 20000, &rng);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_endpoint_close(&cl.c.ep, 0), 0);
    CHECK_EQ(lull_simconn_read_start(&accepted.c), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(accepted.got, 4096);
    CHECK(!accepted.bad);
    CHECK_EQ(accepted.close_reason, 0);
    CHECK_EQ(cl.closes, 1);
    finish(loop, net, &srv);
}

/* A frame of our own, to see its release. */
typedef struct owned {
    lull_frame f;
    int released;
} owned;

static void owned_release(lull_frame *f) {
    LULL_CONTAINER_OF(f, owned, f)->released++;
}

static end *closing_end;
static void close_inside_frame(lull_endpoint *ep, const void *b, size_t n) {
    on_frame(ep, b, n);
    lull_endpoint_close(ep, -ECANCELED);
    lull_endpoint_close(ep, 0); /* idempotent */
}

TEST(close_inside_on_frame) {
    /* The reader closes in its frame callback: the frame is released
     * after the callback returned, once; the sender's own frames too,
     * before its close callback. */
    lull_loop *loop = L = vloop();
    lull_simnet *net;
    CHECK_EQ(lull_simnet_new(&net, loop, NULL), 0);
    lull_simserver srv;
    accept_opts = (lull_simconn_options){0};
    dont_accept = false;
    CHECK_EQ(lull_simserver_listen(net, &srv, "s", on_connection), 0);
    end cl;
    client_connect(net, &cl, "s", NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    closing_end = &accepted;
    lull_endpoint_set_callbacks(&accepted.c.ep, close_inside_frame, NULL,
                                on_close);
    owned fr[3];
    static const char text[] = "0123456789";
    for (int i = 0; i < 3; i++) {
        fr[i] =
            (owned){.f = {.bytes = text, .len = 10, .release = owned_release}};
        CHECK_EQ(lull_endpoint_send(&cl.c.ep, &fr[i].f), 0);
    }
    CHECK_EQ(lull_endpoint_send(&cl.c.ep, &fr[0].f), -EBUSY);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_U64_EQ(accepted.frames, 1);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(fr[i].released, 1);
    CHECK_EQ(accepted.close_reason, -ECANCELED);
    CHECK_EQ(cl.close_reason, 0);
    CHECK_EQ(accepted.closes, 1);
    CHECK_EQ(cl.closes, 1);
    finish(loop, net, &srv);
}

TEST(max_queued_closes_with_enobufs) {
    lull_loop *loop = L = vloop();
    lull_simnet *net;
    CHECK_EQ(lull_simnet_new(&net, loop, NULL), 0);
    lull_simserver srv;
    accept_opts = (lull_simconn_options){0};
    dont_accept = false;
    CHECK_EQ(lull_simserver_listen(net, &srv, "s", on_connection), 0);
    end cl;
    lull_simconn_options co = {.max_queued = 100};
    client_connect(net, &cl, "s", &co);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    char b[60] = {0};
    CHECK_EQ(lull_endpoint_send_copy(&cl.c.ep, b, 60), 0);
    CHECK_EQ(lull_endpoint_send_copy(&cl.c.ep, b, 60), -ENOBUFS);
    CHECK_EQ(cl.closes, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(cl.closes, 1);
    CHECK_EQ(cl.close_reason, -ENOBUFS);
    CHECK_EQ(accepted.closes, 1);
    finish(loop, net, &srv);
}

/* ------------------------------------------------ order and determinism */

enum { NCONN = 5 };
static end conns[NCONN], servs[NCONN];
static int order[64], norder;

static void order_frame(lull_endpoint *ep, const void *b, size_t n) {
    (void)b;
    (void)n;
    end *e = ep->data;
    order[norder++] = (int)(e - servs);
}

static int naccepted;
static void accept_many(lull_simserver *srv) {
    end *e = &servs[naccepted++];
    end_setup(e);
    CHECK_EQ(lull_simserver_accept(srv, &e->c, NULL), 0);
    lull_endpoint_set_callbacks(&e->c.ep, order_frame, NULL, on_close);
}

/* NCONN connections each send one frame at the same instant: the order
 * the frames are read in. Returns the trace hash. */
static uint64_t same_instant(uint64_t seed, FILE *trace) {
    lull_loop *loop = L = vloop();
    lull_simnet *net;
    lull_simnet_options o = {.seed = seed, .trace = trace};
    o.faults.delay_ns = MS;
    CHECK_EQ(lull_simnet_new(&net, loop, &o), 0);
    lull_simserver srv;
    naccepted = norder = 0;
    CHECK_EQ(lull_simserver_listen(net, &srv, "s", accept_many), 0);
    for (int i = 0; i < NCONN; i++)
        client_connect(net, &conns[i], "s", NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(naccepted, NCONN);
    /* servs[] in accept order; each client sends one frame to its own. */
    for (int i = 0; i < NCONN; i++)
        CHECK_EQ(lull_endpoint_send_copy(&conns[i].c.ep, "x", 1), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(norder, NCONN);
    for (int i = 0; i < NCONN; i++)
        lull_endpoint_close(&conns[i].c.ep, 0);
    lull_simserver_close(&srv);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    lull_simnet_stats st;
    lull_simnet_get_stats(net, &st);
    CHECK_EQ(lull_simnet_free(net), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
    return st.trace_hash;
}

TEST(same_instant_order_is_drawn_from_the_seed) {
    int first[NCONN];
    int distinct = 0;
    int seen[16][NCONN];
    for (uint64_t seed = 1; seed <= 16; seed++) {
        same_instant(seed, NULL);
        memcpy(first, order, sizeof first);
        same_instant(seed, NULL);
        CHECK(memcmp(first, order, sizeof first) == 0);
        bool is_new = true;
        for (int j = 0; j < distinct; j++)
            if (memcmp(seen[j], first, sizeof first) == 0) is_new = false;
        if (is_new) memcpy(seen[distinct++], first, sizeof first);
    }
    CHECK(distinct >= 8);
}

/* A busy case with every fault: the trace, written and hashed. */
static uint64_t faulty_run(uint64_t seed, FILE *trace) {
    lull_loop *loop = L = vloop();
    lull_simnet *net;
    lull_simnet_options o = {.seed = seed, .trace = trace};
    o.faults = (lull_simfaults){.delay_ns = MS,
                                .jitter_ns = 2 * MS,
                                .bandwidth = 1 << 20,
                                .window = 2000,
                                .slow_permille = 300,
                                .slow_read_ns = MS,
                                .partition_every_ns = 20 * MS,
                                .partition_ns = 10 * MS,
                                .break_permille = 200,
                                .reset_permille = 300};
    CHECK_EQ(lull_simnet_new(&net, loop, &o), 0);
    lull_simserver srv;
    accept_opts = (lull_simconn_options){.flags = LULL_SIMCONN_RAW};
    accepted.echo = true;
    dont_accept = false;
    CHECK_EQ(lull_simserver_listen(net, &srv, "s", on_connection), 0);
    end cl;
    client_connect(net, &cl, "s", NULL);
    lull_loop_advance(loop, 10 * MS);
    uint64_t pos = 0, rng = seed;
    if (cl.connect_status == 0) send_pattern(&cl.c.ep, &pos, 30000, &rng);
    lull_loop_advance(loop, 2000 * MS);
    lull_simnet_log(net, "client got %llu", (unsigned long long)cl.got);
    if (!cl.closes) lull_endpoint_close(&cl.c.ep, 0);
    lull_simserver_close(&srv);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    accepted.echo = false;
    lull_simnet_stats st;
    lull_simnet_get_stats(net, &st);
    CHECK_EQ(lull_simnet_free(net), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
    return st.trace_hash;
}

TEST(same_seed_same_trace) {
    /* The trace of a faulty run, written twice and compared byte for
     * byte; its hash kept without writing it; another seed, another
     * trace. */
    for (uint64_t seed = 1; seed <= 10; seed++) {
        char *b1 = NULL, *b2 = NULL;
        size_t n1 = 0, n2 = 0;
        FILE *f1 = open_memstream(&b1, &n1);
        FILE *f2 = open_memstream(&b2, &n2);
        uint64_t h1 = faulty_run(seed, f1);
        uint64_t h2 = faulty_run(seed, f2);
        fclose(f1);
        fclose(f2);
        CHECK(n1 > 0 && n1 == n2 && memcmp(b1, b2, n1) == 0);
        CHECK_U64_EQ(h1, h2);
        CHECK_U64_EQ(faulty_run(seed, NULL), h1);
        CHECK(faulty_run(seed + 1000, NULL) != h1);
        free(b1);
        free(b2);
    }
}

/* ------------------------------------------------------- bad arguments */

TEST(invalid_arguments) {
    lull_loop *real = NULL;
    CHECK_EQ(lull_loop_new(&real, NULL), 0);
    lull_simnet *net = NULL;
    CHECK_EQ(lull_simnet_new(&net, real, NULL), -EINVAL);
    CHECK(net == NULL);
    CHECK_EQ(lull_loop_free(real), 0);
    lull_loop *loop = L = vloop();
    CHECK_EQ(lull_simnet_new(NULL, loop, NULL), -EINVAL);
    CHECK_EQ(lull_simnet_new(&net, NULL, NULL), -EINVAL);
    CHECK_EQ(lull_simnet_new(&net, loop, NULL), 0);
    lull_simserver a, b;
    CHECK_EQ(lull_simserver_listen(net, &a, "", on_connection), -EINVAL);
    CHECK_EQ(lull_simserver_listen(net, &a, "x", NULL), -EINVAL);
    CHECK_EQ(lull_simserver_listen(net, &a, "x", on_connection), 0);
    CHECK_EQ(lull_simserver_listen(net, &b, "x", on_connection), -EADDRINUSE);
    lull_simconn c;
    CHECK_EQ(lull_simserver_accept(&a, &c, NULL), -ENOENT);
    CHECK_EQ(lull_simconn_connect(net, &c, "x", NULL, NULL), -EINVAL);
    CHECK_EQ(lull_simconn_connect(net, &c, NULL, NULL, on_connect), -EINVAL);
    CHECK_EQ(lull_simconn_read_stop(NULL), -EINVAL);
    CHECK_EQ(lull_simconn_partition(NULL, 1, false), -EINVAL);
    end e;
    client_connect(net, &e, "x", NULL);
    CHECK_EQ(lull_simconn_partition(&e.c, 1, false), -ENOTCONN);
    CHECK_EQ(lull_simconn_reset(&e.c, 1), -ENOTCONN);
    CHECK_EQ(lull_simnet_free(net), -EBUSY);
    lull_simserver_close(&a);
    lull_simserver_close(&a); /* idempotent */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(e.connect_status, -ECONNREFUSED);
    CHECK_EQ(lull_simnet_free(net), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* --------------------------------------------------------- turns */

static lull_task cascade;
static int cascade_pending, cascade_broken, turn_frames;

static void cascade_fn(lull_task *t) {
    (void)t;
    cascade_pending = 0;
}

static void turn_frame(lull_endpoint *ep, const void *b, size_t n) {
    (void)b;
    (void)n;
    /* The task posted by the read before ran before this read: each
     * read's cascade finishes before the next event. */
    if (cascade_pending) cascade_broken++;
    cascade_pending = 1;
    turn_frames++;
    lull_task_post(L, &cascade);
    (void)ep;
}

TEST(each_read_is_a_turn) {
    lull_loop *loop = L = vloop();
    lull_simnet *net;
    CHECK_EQ(lull_simnet_new(&net, loop, NULL), 0);
    lull_simserver srv;
    accept_opts = (lull_simconn_options){0};
    dont_accept = false;
    CHECK_EQ(lull_simserver_listen(net, &srv, "s", on_connection), 0);
    end cl;
    client_connect(net, &cl, "s", NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_task_init(&cascade, cascade_fn), 0);
    lull_endpoint_set_callbacks(&accepted.c.ep, turn_frame, NULL, on_close);
    for (int i = 0; i < 50; i++)
        CHECK_EQ(lull_endpoint_send_copy(&cl.c.ep, "abc", 3), 0);
    CHECK_EQ(turn_frames, 0); /* never inside the send */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(turn_frames, 50);
    CHECK_EQ(cascade_broken, 0);
    lull_endpoint_close(&cl.c.ep, 0);
    finish(loop, net, &srv);
}
