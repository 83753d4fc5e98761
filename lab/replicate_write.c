/* Two stream figures of the `replicate` scenario (lab/replicate.c).
 *
 * Write cost: M records of 500 bytes into a Unix socketpair whose other end
 * a reader thread drains with 256 KiB reads; the figure is the writing
 * thread's CPU time per record. Rows:
 *   write() per record     a blocking socket, one system call per record
 *   writev, 64 KiB         a blocking socket, 131 records per call, by hand
 *   lull_endpoint_send per record   a producer on a lull loop (shared quantum),
 * one zero-copy lull_endpoint_send per record; the stream batches them (what
 * issue 8 targets: the writev row's cost, <= 0.25 us) uv_write per record libuv
 * (when installed): one uv_write per record, which writes at once while the
 * queue is empty bufferevent_write      libevent (when installed): copies into
 * the output buffer, flushed when the socket is writable Each loop row keeps at
 * most 64 KiB queued (the same backpressure).
 *
 * Ping-pong: 64-byte messages over a Unix socketpair, both threads pinned
 * to one CPU, so a round trip is two context switches: blocking read/write
 * is the floor, against two lull loops each with a raw stream. */
#include "replicate.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <lull.h>

#ifdef LAB_HAVE_UV
#include <uv.h>
#endif
#ifdef LAB_HAVE_EVENT
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#endif

#define HIGH_WATER (64 << 10) /* every loop row's queue bound */
#define RING       16384      /* frames in flight for lull's row */

enum { W_WRITE, W_WRITEV, W_LULL, W_UV, W_EVENT, WAYS };
static const char *const way_key[WAYS] = {"write", "writev_64k",
                                          "lull_endpoint_send", "uv_write",
                                          "bufferevent_write"};
static const char *const way_peer[WAYS] = {"floor", "floor", "lull", "libuv",
                                           "libevent"};
/* BRIEF §5's reference for the row, on this project's machine. */
static const char *const way_ref[WAYS] = {"1.88–2.01", "0.172–0.193",
                                          "≤ 0.25 (target)", "–", "–"};
static const char *const way_label[WAYS] = {
    "write() per record", "writev, 64 KiB by hand",
    "lull_endpoint_send per record", "uv_write per record (libuv)",
    "bufferevent_write (libevent)"};

typedef struct wctx {
    int fd; /* the writing end */
    int records;
    int size;
    const unsigned char *rec; /* one record's bytes, written M times */
    uint64_t writes;          /* system calls that wrote (where known) */
} wctx;

/* ---------------------------------------------------------- the reader */

typedef struct reader {
    int fd;
    uint64_t bytes;
} reader;

static void *reader_main(void *arg) {
    reader *r = arg;
    size_t cap = 256 << 10;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        ssize_t n = read(r->fd, buf, cap);
        if (n <= 0) break;
        r->bytes += (uint64_t)n;
    }
    free(buf);
    return NULL;
}

/* ---------------------------------------------------------- plain rows */

static int write_full(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int way_write(wctx *w) {
    for (int i = 0; i < w->records; i++) {
        int rc = write_full(w->fd, w->rec, (size_t)w->size);
        if (rc < 0) return rc;
        w->writes++;
    }
    return 0;
}

static int way_writev(wctx *w) {
    int per = HIGH_WATER / w->size;
    struct iovec iov[IOV_MAX];
    if (per > IOV_MAX) per = IOV_MAX;
    for (int i = 0; i < per; i++) {
        iov[i].iov_base = (void *)w->rec;
        iov[i].iov_len = (size_t)w->size;
    }
    int left = w->records;
    while (left > 0) {
        int n = left < per ? left : per;
        size_t want = (size_t)n * (size_t)w->size;
        ssize_t got = writev(w->fd, iov, n);
        if (got < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        w->writes++;
        if ((size_t)got < want) {
            /* A blocking socket writes all unless interrupted; finish. */
            size_t done = (size_t)got;
            for (int i = 0; i < n; i++) {
                size_t off = (size_t)i * (size_t)w->size;
                if (done >= off + (size_t)w->size) continue;
                size_t from = done > off ? done - off : 0;
                int rc =
                    write_full(w->fd, w->rec + from, (size_t)w->size - from);
                if (rc < 0) return rc;
            }
        }
        left -= n;
    }
    return 0;
}

/* ------------------------------------------------------------ lull row */

typedef struct lull_writer {
    lull_stream s;
    lull_task task;
    lull_frame *ring;
    wctx *w;
    int next;
    bool starved; /* the next ring frame is in flight: its release posts */
} lull_writer;

static lull_writer *the_writer;

static void lw_release(lull_frame *f) {
    (void)f;
    if (the_writer->starved) {
        the_writer->starved = false;
        lull_task_post(the_writer->s.loop, &the_writer->task);
    }
}

static void lw_produce(lull_task *t) {
    lull_writer *lw = LULL_CONTAINER_OF(t, lull_writer, task);
    while (lw->next < lw->w->records) {
        if (!lull_endpoint_writable(&lw->s.ep)) return; /* on_drain */
        lull_frame *f = &lw->ring[lw->next % RING];
        if (f->in_flight) { /* released at the next flush point */
            lw->starved = true;
            return;
        }
        f->bytes = lw->w->rec;
        f->len = (size_t)lw->w->size;
        f->release = lw_release;
        if (lull_endpoint_send(&lw->s.ep, f) < 0) return;
        lw->next++;
        if (lull_loop_should_yield(lw->s.loop)) {
            lull_task_post(lw->s.loop, t);
            return;
        }
    }
    /* Written out, then the write side shut: the reader sees EOF, and with
     * reading off the stream leaves the loop nothing to wait for. */
    lull_stream_shutdown(&lw->s);
}

static void lw_drain(lull_endpoint *ep) {
    lull_writer *lw = LULL_CONTAINER_OF(ep, lull_writer, s.ep);
    lull_task_post(lw->s.loop, &lw->task);
}

static int way_lull(wctx *w) {
    lull_loop *loop;
    int rc = lull_loop_new(&loop, NULL);
    if (rc < 0) return rc;
    lull_writer lw = {.w = w};
    lw.ring = calloc(RING, sizeof *lw.ring);
    lull_stream_options o = {.flags = LULL_STREAM_RAW,
                             .high_water = HIGH_WATER};
    int fd = dup(w->fd);
    rc = lw.ring ? lull_stream_open(loop, &lw.s, fd, &o) : -ENOMEM;
    the_writer = &lw;
    if (rc == 0) {
        lull_stream_read_stop(&lw.s); /* it only writes */
        lull_endpoint_set_callbacks(&lw.s.ep, NULL, lw_drain, NULL);
        lull_task_init(&lw.task, lw_produce);
        lull_task_post(loop, &lw.task);
        rc = lull_loop_run(loop, LULL_RUN_DEFAULT);
        w->writes = lw.s.writes;
        if (rc == 0 && lw.next != w->records) rc = -EPIPE;
        lull_endpoint_close(&lw.s.ep, 0);
    }
    free(lw.ring);
    lull_loop_free(loop);
    return rc;
}

/* ----------------------------------------------------------- libuv row */

#ifdef LAB_HAVE_UV
typedef struct uv_writer {
    uv_pipe_t pipe;
    uv_write_t *reqs;
    wctx *w;
    int next;
    int completed;
    bool producing;
    int err;
} uv_writer;

static void uw_produce(uv_writer *u);

static void uw_written(uv_write_t *req, int status) {
    uv_writer *u = req->data;
    if (status < 0 && !u->err) u->err = status;
    if (++u->completed == u->w->records) {
        uv_close((uv_handle_t *)&u->pipe, NULL); /* nothing pending */
        return;
    }
    if (uv_stream_get_write_queue_size((uv_stream_t *)&u->pipe) <
        HIGH_WATER / 2)
        uw_produce(u);
}

static void uw_produce(uv_writer *u) {
    if (u->producing || u->err) return;
    u->producing = true;
    /* libuv counts bytes not yet written, not requests whose callbacks
     * are still to come (it runs those on a later iteration), so the ring
     * also bounds the requests in flight: a slot is reused only after its
     * callback ran. */
    while (u->next < u->w->records && u->next - u->completed < RING &&
           uv_stream_get_write_queue_size((uv_stream_t *)&u->pipe) <
               HIGH_WATER) {
        uv_write_t *req = &u->reqs[u->next % RING];
        req->data = u;
        uv_buf_t b = uv_buf_init((char *)u->w->rec, (unsigned)u->w->size);
        int rc = uv_write(req, (uv_stream_t *)&u->pipe, &b, 1, uw_written);
        if (rc < 0) {
            u->err = rc;
            break;
        }
        u->next++;
    }
    u->producing = false;
}

static int way_uv(wctx *w) {
    uv_loop_t loop;
    if (uv_loop_init(&loop) < 0) return -ENOMEM;
    uv_writer u = {.w = w};
    u.reqs = calloc(RING, sizeof *u.reqs);
    int rc = u.reqs ? uv_pipe_init(&loop, &u.pipe, 0) : -ENOMEM;
    if (rc == 0) rc = uv_pipe_open(&u.pipe, dup(w->fd));
    if (rc == 0) {
        uw_produce(&u);
        uv_run(&loop, UV_RUN_DEFAULT);
        rc = u.err;
    }
    uv_loop_close(&loop);
    free(u.reqs);
    return rc < 0 ? -EIO : 0;
}
#endif

/* -------------------------------------------------------- libevent row */

#ifdef LAB_HAVE_EVENT
typedef struct ev_writer {
    struct bufferevent *bev;
    wctx *w;
    int next;
    bool done;
} ev_writer;

static void ew_produce(struct bufferevent *bev, void *arg) {
    ev_writer *e = arg;
    struct evbuffer *out = bufferevent_get_output(bev);
    while (e->next < e->w->records && evbuffer_get_length(out) < HIGH_WATER) {
        bufferevent_write(bev, e->w->rec, (size_t)e->w->size);
        e->next++;
    }
    if (e->next < e->w->records || e->done) return;
    if (evbuffer_get_length(out) == 0) {
        e->done = true;
        bufferevent_free(bev); /* closes the fd: the reader sees EOF */
    } else {
        /* All queued: be called back when the output is empty. */
        bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
    }
}

static int way_event(wctx *w) {
    struct event_base *base = event_base_new();
    if (!base) return -ENOMEM;
    ev_writer e = {.w = w};
    int fd = dup(w->fd);
    evutil_make_socket_nonblocking(fd);
    e.bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!e.bev) {
        event_base_free(base);
        return -ENOMEM;
    }
    /* The write callback runs when the output falls to the low mark. */
    bufferevent_setwatermark(e.bev, EV_WRITE, HIGH_WATER / 2, 0);
    bufferevent_setcb(e.bev, NULL, ew_produce, NULL, &e);
    bufferevent_enable(e.bev, EV_WRITE);
    ew_produce(e.bev, &e);
    event_base_dispatch(base);
    event_base_free(base);
    return e.done ? 0 : -EIO;
}
#endif

/* ----------------------------------------------------------- the figure */

static bool way_available(int way) {
#ifndef LAB_HAVE_UV
    if (way == W_UV) return false;
#endif
#ifndef LAB_HAVE_EVENT
    if (way == W_EVENT) return false;
#endif
    (void)way;
    return true;
}

/* One measurement: CPU ns per record of the writing thread. */
static int measure_way(int way, int records, const unsigned char *rec, int size,
                       double *ns_per_record, double *per_call) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    reader rd = {.fd = sv[1]};
    pthread_t th;
    if (pthread_create(&th, NULL, reader_main, &rd) != 0) {
        close(sv[0]);
        close(sv[1]);
        return -EAGAIN;
    }
    wctx w = {.fd = sv[0], .records = records, .size = size, .rec = rec};
    uint64_t c0 = lab_thread_cpu_ns();
    int rc = 0;
    switch (way) {
    case W_WRITE:
        rc = way_write(&w);
        break;
    case W_WRITEV:
        rc = way_writev(&w);
        break;
    case W_LULL:
        rc = way_lull(&w);
        break;
#ifdef LAB_HAVE_UV
    case W_UV:
        rc = way_uv(&w);
        break;
#endif
#ifdef LAB_HAVE_EVENT
    case W_EVENT:
        rc = way_event(&w);
        break;
#endif
    default:
        rc = -ENOSYS;
    }
    uint64_t c1 = lab_thread_cpu_ns();
    close(sv[0]); /* every row closed its dup: the reader sees EOF */
    pthread_join(th, NULL);
    close(sv[1]);
    if (rc == 0 && rd.bytes != (uint64_t)records * (uint64_t)size) rc = -EIO;
    *ns_per_record = (double)(c1 - c0) / records;
    *per_call = w.writes ? (double)records / (double)w.writes : 0;
    return rc;
}

enum { WV_CPU, WV_PER_CALL, WV_COUNT };
static const lab_col wcols[WV_COUNT] = {
    {"cpu_per_record_us", "CPU / record µs", 0},
    {"records_per_syscall", "records / syscall", 0},
};

typedef struct wfig_ctx {
    int records;
    int size;
    const unsigned char *rec;
} wfig_ctx;

static int wmeasure(lab_fig *fig, lab_row *row, int round, double *v) {
    (void)round;
    const wfig_ctx *c = fig->ctx;
    double ns = 0, per = 0;
    int rc = measure_way((int)row->tag, c->records, c->rec, c->size, &ns, &per);
    if (rc < 0) return rc;
    v[WV_CPU] = ns / 1e3;
    if (per > 0) v[WV_PER_CALL] = per;
    return 0;
}

static void wrow_json(const lab_fig *fig, const lab_row *row, lab_json *j) {
    (void)fig;
    if (!row) return;
    lab_json_key(j, "way");
    lab_json_string(j, way_key[row->tag]);
}

int replicate_write_cost(const lab_options *opts, lab_json *json,
                         int record_size, lab_fig **out) {
    int records = opts->quick ? 20000 : 200000;
    int rounds = lab_rounds(opts, 5, 3);
    unsigned char *rec = malloc((size_t)record_size);
    if (!rec) return -ENOMEM;
    memset(rec, 0x5a, (size_t)record_size);
    lab_detail("write cost: %d records of %d bytes into a Unix socket "
               "drained by a reader thread; the writing thread's CPU per "
               "record; %d rounds, the way that goes first rotating\n",
               records, record_size, rounds);
    wfig_ctx c = {records, record_size, rec};
    lab_fig_spec spec = {"write_cost", "write cost", NULL, wcols,
                         WV_COUNT,     WV_CPU,       0,    wmeasure,
                         NULL,         wrow_json,    &c};
    lab_fig *fig = lab_fig_new(&spec);
    if (!fig) {
        free(rec);
        return -ENOMEM;
    }
    for (int way = 0; way < WAYS; way++) {
        if (!way_available(way)) continue;
        /* write() and writev by hand are floors: no loop at all. */
        unsigned flags = way == W_LULL ? LAB_ROW_LULL | LAB_ROW_BASE
                         : way == W_WRITE || way == W_WRITEV ? LAB_ROW_FLOOR
                                                             : 0;
        lab_row *r =
            lab_fig_add(fig, way_peer[way], flags, "%s", way_label[way]);
        r->tag = way;
        r->policy = way_ref[way];
    }
    lab_fig_run(fig, opts, rounds);
    free(rec);
    int rc = 0;
    for (int i = 0; i < fig->nrows; i++)
        if (fig->rows[i].failures) rc = fig->rows[i].last_error;
    if (rc == 0) {
        const char *header[] = {"way", "CPU / record µs", "records / syscall",
                                "reference (peers, §5)", "×"};
        lab_table t;
        lab_table_init(&t, 5, header);
        const lab_row *base = lab_fig_base(fig, 0);
        for (int i = 0; i < fig->nrows; i++) {
            const lab_row *r = &fig->rows[i];
            int row = lab_table_row(&t);
            char buf[LAB_CELL];
            lab_table_set(&t, row, 0, "%s", r->label);
            lab_format_series(buf, sizeof buf, &r->v[WV_CPU]);
            lab_table_set(&t, row, 1, "%s", buf);
            double per = lab_row_median(r, WV_PER_CALL);
            lab_table_set(&t, row, 2, "%s",
                          isfinite(per) ? lab_fmt(buf, per) : "–");
            lab_table_set(&t, row, 3, "%s", r->policy);
            lab_table_set(&t, row, 4, "%s",
                          lab_fmt(buf, lab_ratio(fig, base, r, WV_CPU)));
        }
        for (int way = 0; way < WAYS; way++)
            if (!way_available(way)) {
                int row = lab_table_row(&t);
                lab_table_set(&t, row, 0, "%s", way_label[way]);
                lab_table_set(&t, row, 1, "not installed: skipped");
            }
        lab_table_detail(&t);
        lab_detail("  × : the row's CPU per record ÷ lull_endpoint_send's\n");
        lab_fig_plot(fig, opts->plot, WV_CPU,
                     "replicate: CPU per 500-byte record written", "us");
        if (json) {
            lab_json_key(json, "write_cost_params");
            lab_json_begin_object(json);
            lab_json_field(json, "records", records);
            lab_json_field(json, "record_bytes", record_size);
            lab_json_end_object(json);
            lab_fig_json(fig, json);
        }
    }
    if (rc == 0 && out)
        *out = fig;
    else
        lab_fig_free(fig);
    return rc;
}

/* ----------------------------------------------------------- ping-pong */

#define PP_BYTES 64

typedef struct pp_side {
    int fd;
    int trips;
    int cpu;
    bool starter; /* sends first */
    int err;
} pp_side;

static void *pp_raw_main(void *arg) {
    pp_side *s = arg;
    lab_pin_cpu(s->cpu);
    char b[PP_BYTES] = {0};
    for (int i = 0; i < s->trips; i++) {
        if (s->starter && write_full(s->fd, b, PP_BYTES) < 0) break;
        size_t got = 0;
        while (got < PP_BYTES) {
            ssize_t n = read(s->fd, b + got, PP_BYTES - got);
            if (n <= 0) {
                s->err = -EIO;
                return NULL;
            }
            got += (size_t)n;
        }
        if (!s->starter && write_full(s->fd, b, PP_BYTES) < 0) break;
    }
    return NULL;
}

typedef struct pp_lull {
    lull_stream s;
    lull_frame frame;
    char bytes[PP_BYTES];
    size_t got;
    int left;
    bool starter;
} pp_lull;

static void pp_send(pp_lull *p) {
    if (p->frame.in_flight) {
        lull_endpoint_send_copy(&p->s.ep, p->bytes, PP_BYTES);
    } else {
        lull_endpoint_send(&p->s.ep, &p->frame);
    }
}

static void pp_frame(lull_endpoint *ep, const void *b, size_t n) {
    (void)b;
    pp_lull *p = LULL_CONTAINER_OF(ep, pp_lull, s.ep);
    p->got += n;
    while (p->got >= PP_BYTES) {
        p->got -= PP_BYTES;
        if (p->starter) {
            if (--p->left == 0) {
                lull_endpoint_close(ep, 0); /* the other side reads EOF */
                return;
            }
        }
        pp_send(p);
    }
}

static void *pp_lull_main(void *arg) {
    pp_side *s = arg;
    lab_pin_cpu(s->cpu);
    lull_loop *loop;
    if (lull_loop_new(&loop, NULL) < 0) {
        s->err = -ENOMEM;
        return NULL;
    }
    pp_lull p = {.left = s->trips, .starter = s->starter};
    p.frame = (lull_frame){.bytes = p.bytes, .len = PP_BYTES};
    lull_stream_options o = {.flags = LULL_STREAM_RAW};
    if (lull_stream_open(loop, &p.s, s->fd, &o) == 0) {
        lull_endpoint_set_callbacks(&p.s.ep, pp_frame, NULL, NULL);
        if (s->starter) pp_send(&p);
        lull_loop_run(loop, LULL_RUN_DEFAULT);
        if (s->starter && p.left != 0) s->err = -EIO;
    } else {
        s->err = -EIO;
    }
    if (!lull_endpoint_closed(&p.s.ep)) lull_endpoint_close(&p.s.ep, 0);
    lull_loop_free(loop);
    return NULL;
}

/* ns per round trip, both sides pinned to one CPU. */
static int pp_measure(bool with_lull, int trips, double *ns) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    int cpu = lab_first_cpu();
    pp_side a = {.fd = sv[0], .trips = trips, .cpu = cpu, .starter = true};
    pp_side b = {.fd = sv[1], .trips = trips, .cpu = cpu};
    void *(*fn)(void *) = with_lull ? pp_lull_main : pp_raw_main;
    pthread_t ta, tb;
    uint64_t t0 = lab_now_ns();
    if (pthread_create(&tb, NULL, fn, &b) != 0) return -EAGAIN;
    if (pthread_create(&ta, NULL, fn, &a) != 0) {
        close(sv[0]);
        pthread_join(tb, NULL);
        close(sv[1]);
        return -EAGAIN;
    }
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    uint64_t t1 = lab_now_ns();
    if (!with_lull) {
        close(sv[0]);
        close(sv[1]);
    } /* with lull, the streams owned and closed them */
    *ns = (double)(t1 - t0) / trips;
    return a.err ? a.err : b.err;
}

enum { PV_US, PV_COUNT };
static const lab_col pcols[PV_COUNT] = {
    {"us_per_round_trip", "µs / round trip", 0}};

static int pmeasure(lab_fig *fig, lab_row *row, int round, double *v) {
    (void)round;
    const int *trips = fig->ctx;
    double ns = 0;
    int rc = pp_measure(row->tag != 0, *trips, &ns);
    if (rc == 0) v[PV_US] = ns / 1e3;
    return rc;
}

int replicate_pingpong(const lab_options *opts, lab_json *json, lab_fig **out) {
    int trips = opts->quick ? 10000 : 100000;
    int rounds = lab_rounds(opts, 5, 3);
    lab_detail("ping-pong: %d round trips of %d bytes over a Unix socketpair, "
               "both threads pinned to CPU %d; %d rounds, the row that goes "
               "first rotating\n",
               trips, PP_BYTES, lab_first_cpu(), rounds);
    lab_fig_spec spec = {"pingpong", "ping-pong", NULL, pcols, PV_COUNT, PV_US,
                         0,          pmeasure,    NULL, NULL,  &trips};
    lab_fig *fig = lab_fig_new(&spec);
    if (!fig) return -ENOMEM;
    lab_fig_add(fig, "floor", LAB_ROW_FLOOR, "blocking read/write (floor)")
        ->tag = 0;
    lab_fig_add(fig, "lull", LAB_ROW_LULL | LAB_ROW_BASE, "lull streams")->tag =
        1;
    lab_fig_run(fig, opts, rounds);
    int rc = 0;
    for (int i = 0; i < fig->nrows; i++)
        if (fig->rows[i].failures) rc = fig->rows[i].last_error;
    if (rc < 0) {
        lab_fig_free(fig);
        return rc;
    }
    /* lull ÷ the floor, per round: the two ran in the same round. */
    lab_series ratio = {0};
    const lab_series *fl = &fig->rows[0].v[PV_US], *lu = &fig->rows[1].v[PV_US];
    for (int i = 0; i < fl->n && i < lu->n; i++)
        lab_series_add(&ratio, lu->v[i] / fl->v[i]);
    const char *header[] = {"", "µs / round trip", "lull ÷ floor, per round"};
    lab_table t;
    lab_table_init(&t, 3, header);
    char buf[LAB_CELL];
    for (int i = 0; i < 2; i++) {
        int row = lab_table_row(&t);
        lab_table_set(&t, row, 0, "%s", fig->rows[i].label);
        lab_format_series(buf, sizeof buf, &fig->rows[i].v[PV_US]);
        lab_table_set(&t, row, 1, "%s", buf);
        if (i == 0) {
            lab_table_set(&t, row, 2, "1");
        } else {
            lab_format_series(buf, sizeof buf, &ratio);
            lab_table_set(&t, row, 2, "%s", buf);
        }
    }
    lab_table_detail(&t);
    lab_detail("  target: within 1.15x of the floor (peers: libevent 1.14x, "
               "libuv 1.17x, libev 1.53x)\n");
    if (json) {
        lab_json_field(json, "pingpong_round_trips", trips);
        lab_json_series(json, "pingpong_lull_over_floor", &ratio);
        lab_fig_json(fig, json);
    }
    if (out)
        *out = fig;
    else
        lab_fig_free(fig);
    return 0;
}
