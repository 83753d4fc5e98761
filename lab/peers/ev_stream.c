/* libev's side of the 64-byte ping-pong (compiled when ev.h and libev are
 * found; lab/stream_peers.h). libev has no stream or buffer of its own: a
 * libev user watches the fd with an ev_io and calls read() and write(),
 * which is what this does. */
#include "../lab.h"
#include "../stream_peers.h"

#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct ev_pp {
    ev_io io;
    char bytes[PP_BYTES];
    char in[64 << 10];
    size_t got;
    pp_side *s;
    int left;
} ev_pp;

static void pp_send(ev_pp *p) {
    if (write(p->io.fd, p->bytes, PP_BYTES) != PP_BYTES && !p->s->err)
        p->s->err = -EIO; /* 64 bytes into an empty socket buffer */
}

static void pp_ready(struct ev_loop *loop, ev_io *w, int revents) {
    (void)revents;
    ev_pp *p = w->data;
    ssize_t n = read(w->fd, p->in, sizeof p->in);
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) { /* EOF: the starter is done */
        ev_break(loop, EVBREAK_ALL);
        return;
    }
    p->got += (size_t)n;
    while (p->got >= PP_BYTES) {
        p->got -= PP_BYTES;
        if (p->s->starter && --p->left == 0) {
            ev_break(loop, EVBREAK_ALL);
            return;
        }
        pp_send(p);
    }
}

void *ev_pp_side(void *arg) {
    pp_side *s = arg;
    lab_pin_cpu(s->cpu);
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    ev_pp *p = calloc(1, sizeof *p);
    if (!loop || !p) {
        if (loop) ev_loop_destroy(loop);
        free(p);
        close(s->fd);
        s->err = -ENOMEM;
        return NULL;
    }
    p->s = s;
    p->left = s->trips;
    fcntl(s->fd, F_SETFL, fcntl(s->fd, F_GETFL) | O_NONBLOCK);
    ev_io_init(&p->io, pp_ready, s->fd, EV_READ);
    p->io.data = p;
    ev_io_start(loop, &p->io);
    if (s->starter) pp_send(p);
    ev_run(loop, 0);
    if (s->starter && p->left != 0) s->err = -EIO;
    ev_io_stop(loop, &p->io);
    ev_loop_destroy(loop);
    close(s->fd); /* the other side reads EOF */
    free(p);
    return NULL;
}
