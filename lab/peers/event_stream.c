/* libevent's rows of the stream figures (compiled when pkg-config finds
 * libevent; lab/stream_peers.h):
 *   bufferevent_write per record         copies each record into the
 *                                        output buffer, which is flushed
 *                                        when the socket is writable
 *   evbuffer_add_reference per record    the same without the copy: the
 *                                        buffer refers to the record
 *   ping-pong side                       a bufferevent, its read callback
 *                                        writing each reply
 * Both write rows keep at most 64 KiB queued, as every loop row does.
 * Every base is made with EVENT_BASE_FLAG_NOLOCK: one thread uses it, and
 * once another figure has called evthread_use_pthreads() a base would
 * otherwise lock on every operation (lab/peers/event.c). */
#include "../lab.h"
#include "../stream_peers.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct event_base *new_base(void) {
    struct event_config *cfg = event_config_new();
    if (!cfg) return NULL;
    event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
    struct event_base *base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    return base;
}

/* ---------------------------------------------------------- write cost */

typedef struct ev_writer {
    struct bufferevent *bev;
    wctx *w;
    int next;
    bool done;
    bool reference; /* evbuffer_add_reference, not bufferevent_write */
} ev_writer;

static void ew_produce(struct bufferevent *bev, void *arg) {
    ev_writer *e = arg;
    struct evbuffer *out = bufferevent_get_output(bev);
    while (e->next < e->w->records &&
           evbuffer_get_length(out) < STREAM_HIGH_WATER) {
        if (e->reference)
            evbuffer_add_reference(out, e->w->rec, (size_t)e->w->size, NULL,
                                   NULL);
        else
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

static int way(wctx *w, bool reference) {
    struct event_base *base = new_base();
    if (!base) return -ENOMEM;
    ev_writer e = {.w = w, .reference = reference};
    int fd = dup(w->fd);
    evutil_make_socket_nonblocking(fd);
    e.bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!e.bev) {
        close(fd);
        event_base_free(base);
        return -ENOMEM;
    }
    /* The write callback runs when the output falls to the low mark. */
    bufferevent_setwatermark(e.bev, EV_WRITE, STREAM_HIGH_WATER / 2, 0);
    bufferevent_setcb(e.bev, NULL, ew_produce, NULL, &e);
    bufferevent_enable(e.bev, EV_WRITE);
    ew_produce(e.bev, &e);
    event_base_dispatch(base);
    event_base_free(base);
    return e.done ? 0 : -EIO;
}

int event_way_write(wctx *w) {
    return way(w, false);
}

int event_way_reference(wctx *w) {
    return way(w, true);
}

/* ----------------------------------------------------------- ping-pong */

typedef struct ev_pp {
    struct bufferevent *bev;
    char bytes[PP_BYTES];
    pp_side *s;
    int left;
} ev_pp;

static void pp_read(struct bufferevent *bev, void *arg) {
    ev_pp *p = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    while (evbuffer_get_length(in) >= PP_BYTES) {
        evbuffer_drain(in, PP_BYTES);
        if (p->s->starter && --p->left == 0) {
            /* Closes the socket: the other side reads EOF. */
            event_base_loopbreak(bufferevent_get_base(bev));
            return;
        }
        bufferevent_write(bev, p->bytes, PP_BYTES);
    }
}

static void pp_event(struct bufferevent *bev, short what, void *arg) {
    (void)arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        event_base_loopbreak(bufferevent_get_base(bev));
}

void *event_pp_side(void *arg) {
    pp_side *s = arg;
    lab_pin_cpu(s->cpu);
    struct event_base *base = new_base();
    ev_pp p = {.s = s, .left = s->trips};
    evutil_make_socket_nonblocking(s->fd);
    p.bev = base ? bufferevent_socket_new(base, s->fd, BEV_OPT_CLOSE_ON_FREE)
                 : NULL;
    if (!p.bev) {
        close(s->fd);
        s->err = -ENOMEM;
        if (base) event_base_free(base);
        return NULL;
    }
    bufferevent_setcb(p.bev, pp_read, NULL, pp_event, &p);
    bufferevent_enable(p.bev, EV_READ | EV_WRITE);
    if (s->starter) bufferevent_write(p.bev, p.bytes, PP_BYTES);
    event_base_dispatch(base);
    if (s->starter && p.left != 0) s->err = -EIO;
    bufferevent_free(p.bev);
    event_base_free(base);
    return NULL;
}
