/* libuv's rows of the stream figures (compiled when pkg-config finds
 * libuv; lab/stream_peers.h):
 *   uv_write per record      one request per 500-byte record, as a
 *                            producer that writes each record as it makes
 *                            it would
 *   uv_write, 131 bufs       one request per 64 KiB of records, each
 *                            record a uv_buf_t of its own: the batching a
 *                            libuv user writes by hand
 *   ping-pong side           uv_read_start, and uv_write of each reply
 * Both write rows keep at most 64 KiB queued, as every loop row does. */
#include "../lab.h"
#include "../stream_peers.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

/* ---------------------------------------------------------- write cost */

typedef struct uv_writer {
    uv_pipe_t pipe;
    uv_write_t *reqs; /* a ring of STREAM_RING requests */
    uv_buf_t *bufs;   /* per bufs, all pointing at the record */
    wctx *w;
    int per;       /* records per request */
    int next;      /* records handed to uv_write */
    int written;   /* records whose request completed */
    int reqs_next; /* requests made */
    int reqs_done; /* requests completed */
    bool producing;
    int err;
} uv_writer;

static void uw_produce(uv_writer *u);

static void uw_written(uv_write_t *req, int status) {
    uv_writer *u = req->data;
    if (status < 0 && !u->err) u->err = status;
    u->written += (int)req->nbufs;
    u->reqs_done++;
    if (u->written == u->w->records) {
        uv_close((uv_handle_t *)&u->pipe, NULL); /* nothing pending */
        return;
    }
    if (uv_stream_get_write_queue_size((uv_stream_t *)&u->pipe) <
        STREAM_HIGH_WATER / 2)
        uw_produce(u);
}

static void uw_produce(uv_writer *u) {
    if (u->producing || u->err) return;
    u->producing = true;
    /* libuv counts bytes not yet written, not requests whose callbacks
     * are still to come (it runs those on a later iteration), so the ring
     * also bounds the requests in flight: a slot is reused only after its
     * callback ran. */
    while (u->next < u->w->records &&
           u->reqs_next - u->reqs_done < STREAM_RING &&
           uv_stream_get_write_queue_size((uv_stream_t *)&u->pipe) <
               STREAM_HIGH_WATER) {
        uv_write_t *req = &u->reqs[u->reqs_next % STREAM_RING];
        req->data = u;
        int n =
            u->w->records - u->next < u->per ? u->w->records - u->next : u->per;
        int rc = uv_write(req, (uv_stream_t *)&u->pipe, u->bufs, (unsigned)n,
                          uw_written);
        if (rc < 0) {
            u->err = rc;
            break;
        }
        u->next += n;
        u->reqs_next++;
    }
    u->producing = false;
}

static int way(wctx *w, int per) {
    uv_loop_t loop;
    if (uv_loop_init(&loop) < 0) return -ENOMEM;
    uv_writer u = {.w = w, .per = per};
    u.reqs = calloc(STREAM_RING, sizeof *u.reqs);
    u.bufs = calloc((size_t)per, sizeof *u.bufs);
    for (int i = 0; u.bufs && i < per; i++)
        u.bufs[i] = uv_buf_init((char *)w->rec, (unsigned)w->size);
    int rc = u.reqs && u.bufs ? uv_pipe_init(&loop, &u.pipe, 0) : -ENOMEM;
    if (rc == 0) rc = uv_pipe_open(&u.pipe, dup(w->fd));
    if (rc == 0) {
        uw_produce(&u);
        uv_run(&loop, UV_RUN_DEFAULT);
        rc = u.err;
    }
    uv_loop_close(&loop);
    free(u.reqs);
    free(u.bufs);
    return rc < 0 ? -EIO : 0;
}

int uv_way_per_record(wctx *w) {
    return way(w, 1);
}

int uv_way_batched(wctx *w) {
    return way(w, STREAM_HIGH_WATER / w->size);
}

/* ----------------------------------------------------------- ping-pong */

typedef struct uv_pp {
    uv_pipe_t pipe;
    uv_write_t req[2]; /* alternating: the last reply's may still be out */
    int which;
    char bytes[PP_BYTES];
    char in[64 << 10];
    size_t got;
    pp_side *s;
    int left;
} uv_pp;

static void pp_alloc(uv_handle_t *h, size_t size, uv_buf_t *buf) {
    (void)size;
    uv_pp *p = h->data;
    *buf = uv_buf_init(p->in, sizeof p->in);
}

static void pp_written(uv_write_t *req, int status) {
    uv_pp *p = req->data;
    if (status < 0 && !p->s->err) p->s->err = -EIO;
}

static void pp_send(uv_pp *p) {
    uv_write_t *req = &p->req[p->which ^= 1];
    req->data = p;
    uv_buf_t b = uv_buf_init(p->bytes, PP_BYTES);
    if (uv_write(req, (uv_stream_t *)&p->pipe, &b, 1, pp_written) < 0)
        p->s->err = -EIO;
}

static void pp_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
    (void)buf;
    uv_pp *p = st->data;
    if (n < 0) { /* EOF: the starter is done */
        uv_close((uv_handle_t *)st, NULL);
        return;
    }
    p->got += (size_t)n;
    while (p->got >= PP_BYTES) {
        p->got -= PP_BYTES;
        if (p->s->starter && --p->left == 0) {
            uv_close((uv_handle_t *)st, NULL); /* the other side reads EOF */
            return;
        }
        pp_send(p);
    }
}

void *uv_pp_side(void *arg) {
    pp_side *s = arg;
    lab_pin_cpu(s->cpu);
    uv_loop_t loop;
    uv_pp *p = calloc(1, sizeof *p);
    if (!p || uv_loop_init(&loop) < 0) {
        free(p);
        close(s->fd);
        s->err = -ENOMEM;
        return NULL;
    }
    p->s = s;
    p->left = s->trips;
    if (uv_pipe_init(&loop, &p->pipe, 0) == 0 &&
        uv_pipe_open(&p->pipe, s->fd) == 0) {
        p->pipe.data = p;
        uv_read_start((uv_stream_t *)&p->pipe, pp_alloc, pp_read);
        if (s->starter) pp_send(p);
        uv_run(&loop, UV_RUN_DEFAULT);
        if (s->starter && p->left != 0) s->err = -EIO;
    } else {
        close(s->fd);
        s->err = -EIO;
    }
    uv_loop_close(&loop);
    free(p);
    return NULL;
}
