/* The 64-byte ping-pong, a stream figure of the `replicate` scenario
 * (lab/replicate.c): two threads pinned to one CPU pass 64 bytes back and
 * forth over a Unix socketpair, so a round trip is two context switches
 * and two reads and writes. Rows, all in the same run and rounds: blocking
 * read()/write() (the floor), two lull loops each with a raw stream, and
 * the peers' own (lab/peers/<peer>_stream.c): libuv's uv_read_start and
 * uv_write, libevent's bufferevent, libev's ev_io with read() and
 * write(), when installed. */
#include "replicate.h"
#include "stream_peers.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <lull.h>

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
    close(s->fd);
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

/* ns per round trip, both sides pinned to one CPU; each side owns its
 * end of the socketpair. */
static int pp_measure(pp_side_fn fn, int trips, double *ns) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    int cpu = lab_first_cpu();
    pp_side a = {.fd = sv[0], .trips = trips, .cpu = cpu, .starter = true};
    pp_side b = {.fd = sv[1], .trips = trips, .cpu = cpu};
    pthread_t ta, tb;
    uint64_t t0 = lab_now_ns();
    if (pthread_create(&tb, NULL, fn, &b) != 0) {
        close(sv[0]);
        close(sv[1]);
        return -EAGAIN;
    }
    if (pthread_create(&ta, NULL, fn, &a) != 0) {
        close(sv[0]); /* b reads EOF */
        pthread_join(tb, NULL);
        return -EAGAIN;
    }
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    uint64_t t1 = lab_now_ns();
    *ns = (double)(t1 - t0) / trips;
    return a.err ? a.err : b.err;
}

/* The rows: the floor, lull, and each peer built in. */
static const struct {
    const char *peer, *label;
    pp_side_fn fn;
    unsigned flags;
} sides[] = {
    {"floor", "blocking read/write (floor)", pp_raw_main, LAB_ROW_FLOOR},
    {"lull", "lull streams", pp_lull_main, LAB_ROW_LULL | LAB_ROW_BASE},
#ifdef LAB_HAVE_UV
    {"libuv", "libuv: uv_read_start, uv_write", uv_pp_side, 0},
#endif
#ifdef LAB_HAVE_EV
    {"libev", "libev: ev_io, read, write", ev_pp_side, 0},
#endif
#ifdef LAB_HAVE_EVENT
    {"libevent", "libevent: bufferevent", event_pp_side, 0},
#endif
};
#define SIDES (int)(sizeof sides / sizeof sides[0])

enum { PV_US, PV_COUNT };
static const lab_col pcols[PV_COUNT] = {
    {"us_per_round_trip", "µs / round trip", 0}};

static int pmeasure(lab_fig *fig, lab_row *row, int round, double *v) {
    (void)round;
    const int *trips = fig->ctx;
    double ns = 0;
    int rc = pp_measure(sides[row->tag].fn, *trips, &ns);
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
    for (int i = 0; i < SIDES; i++)
        lab_fig_add(fig, sides[i].peer, sides[i].flags, "%s", sides[i].label)
            ->tag = i;
    lab_fig_run(fig, opts, rounds);
    int rc = lab_fig_error(fig);
    if (rc < 0) {
        lab_fig_free(fig);
        return rc;
    }
    /* Each row ÷ the floor, per round: they ran in the same round. */
    const lab_series *fl = &fig->rows[0].v[PV_US];
    lab_series ratio[SIDES];
    memset(ratio, 0, sizeof ratio);
    for (int r = 1; r < fig->nrows; r++)
        ratio[r] = lab_series_ratios(&fig->rows[r].v[PV_US], fl);
    const char *header[] = {"", "µs / round trip", "÷ floor, per round", "×"};
    lab_table t;
    lab_table_init(&t, 4, header);
    char buf[LAB_CELL];
    const lab_row *base = lab_fig_base(fig, 0);
    for (int i = 0; i < fig->nrows; i++) {
        int row = lab_table_row(&t);
        lab_table_set(&t, row, 0, "%s", fig->rows[i].label);
        lab_format_series(buf, sizeof buf, &fig->rows[i].v[PV_US]);
        lab_table_set(&t, row, 1, "%s", buf);
        if (i == 0) {
            lab_table_set(&t, row, 2, "1");
        } else {
            lab_format_series(buf, sizeof buf, &ratio[i]);
            lab_table_set(&t, row, 2, "%s", buf);
        }
        lab_table_set(&t, row, 3, "%s",
                      lab_fmt(buf, lab_ratio(fig, base, &fig->rows[i], PV_US)));
    }
    lab_table_detail(&t);
    lab_detail("  × : the row's µs per round trip ÷ lull's; target: lull "
               "within 1.15× of the floor\n");
    if (json) {
        lab_json_field(json, "pingpong_round_trips", trips);
        lab_json_series(json, "pingpong_lull_over_floor", &ratio[1]);
        lab_fig_json(fig, json);
    }
    if (out)
        *out = fig;
    else
        lab_fig_free(fig);
    return 0;
}
