/* The write cost, a stream figure of the `replicate` scenario
 * (lab/replicate.c): M records of 500 bytes into a Unix socketpair whose
 * other end a reader thread drains with 256 KiB reads; the figure is the
 * writing thread's CPU time per record. Rows:
 *   write() per record          a blocking socket, a system call per record
 *   writev, 64 KiB by hand      a blocking socket, 131 records per call
 *   lull_endpoint_send per record  a producer on a lull loop (shared
 *                               quantum), one zero-copy send per record;
 *                               the stream batches them into writev calls
 *   uv_write per record, uv_write of 131 bufs, bufferevent_write per
 *   record, evbuffer_add_reference per record: libuv's and libevent's,
 *                               when installed (lab/peers/<peer>_stream.c)
 * Each loop row keeps at most 64 KiB queued (the same backpressure). The
 * per-record rows are what a producer that sends each record as it makes
 * it costs; the batched ones, what batching by hand saves. */
#include "replicate.h"
#include "stream_peers.h"

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

#define HIGH_WATER STREAM_HIGH_WATER
#define RING       STREAM_RING /* frames in flight for lull's row */

static int way_write(wctx *w);
static int way_writev(wctx *w);
static int way_lull(wctx *w);

typedef struct way_row {
    const char *key;   /* JSON */
    const char *label; /* the table's */
    const char *peer;
    const char *ref; /* the figure the target was set from, measured on
                        another machine: a reference, not this run's */
    stream_way_fn fn;
    int cls; /* 0: a call per record; 1: batched by hand */
} way_row;

static const way_row ways[] = {
    {"write", "write() per record", "floor", "1.88–2.01", way_write, 0},
    {"writev_64k", "writev, 64 KiB by hand", "floor", "0.172–0.193", way_writev,
     1},
    {"lull_endpoint_send", "lull_endpoint_send per record", "lull",
     "≤ 0.25 (target)", way_lull, 0},
#ifdef LAB_HAVE_UV
    {"uv_write", "uv_write per record (libuv)", "libuv", "–", uv_way_per_record,
     0},
    {"uv_write_bufs", "uv_write, 131 bufs a request (libuv)", "libuv", "–",
     uv_way_batched, 1},
#endif
#ifdef LAB_HAVE_EVENT
    {"bufferevent_write", "bufferevent_write per record (libevent)", "libevent",
     "–", event_way_write, 0},
    {"evbuffer_add_reference", "evbuffer_add_reference per record (libevent)",
     "libevent", "–", event_way_reference, 0},
#endif
};
#define WAYS (int)(sizeof ways / sizeof ways[0])
enum { W_WRITE, W_WRITEV, W_LULL };

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

/* ----------------------------------------------------------- the figure */

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
    int rc = ways[way].fn(&w);
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
    lab_json_string(j, ways[row->tag].key);
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
        /* write() and writev by hand are floors: no loop at all. */
        unsigned flags = way == W_LULL ? LAB_ROW_LULL | LAB_ROW_BASE
                         : way == W_WRITE || way == W_WRITEV ? LAB_ROW_FLOOR
                                                             : 0;
        lab_row *r =
            lab_fig_add(fig, ways[way].peer, flags, "%s", ways[way].label);
        r->tag = way;
        r->cls = ways[way].cls;
        r->policy = ways[way].ref;
    }
    lab_fig_run(fig, opts, rounds);
    free(rec);
    int rc = lab_fig_error(fig);
    if (rc == 0) {
        const char *header[] = {"way", "CPU / record µs", "records / syscall",
                                "reference, elsewhere", "×"};
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
