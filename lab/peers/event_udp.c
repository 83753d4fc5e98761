/* libevent's row of the `udp` scenario (lab/udp.h), compiled when
 * pkg-config finds libevent: libevent has no datagram handle, so this is
 * what its users write, an event_new on the socket (EV_READ | EV_PERSIST)
 * whose callback reads with recvfrom until the socket is empty (at most
 * 32 a callback, as libuv does, so one socket cannot hold the loop), and
 * sends each reply at once with sendto. A sendto that meets a full socket
 * buffer fails the row (never met on loopback within the window). */
#include "../udp.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define READS_PER_CALLBACK 32

typedef struct eside {
    udp_side *s;
    struct event_base *base;
    unsigned char *buf; /* one datagram and a byte: a longer one shows */
} eside;

const char *udp_event_version(void) {
    return event_get_version();
}

static void set_err(udp_side *s, int err, const char *what) {
    if (s->err) return;
    s->err = err;
    snprintf(s->why, sizeof s->why, "%s: %s", what, strerror(-err));
}

static void esend(udp_side *s, const void *bytes, size_t len, bool stable) {
    (void)stable; /* sent before this returns */
    ssize_t n;
    do {
        n = sendto(s->fd, bytes, len, 0, (const struct sockaddr *)&s->peer,
                   sizeof s->peer);
    } while (n < 0 && errno == EINTR);
    if (n < 0) set_err(s, -errno, "sendto");
}

static void readable(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    eside *e = arg;
    udp_side *s = e->s;
    for (int i = 0; i < READS_PER_CALLBACK && !s->done && !s->err; i++) {
        struct sockaddr_in from; /* a server replies to it */
        socklen_t fromlen = sizeof from;
        ssize_t n = recvfrom(fd, e->buf, s->size + 1, 0,
                             (struct sockaddr *)&from, &fromlen);
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR) set_err(s, -errno, "recv");
            if (errno != EINTR) break;
            continue;
        }
        udp_app_recv(s, e->buf, (size_t)n);
    }
    if (s->done || s->err) {
        udp_side_end(s);
        event_base_loopbreak(e->base);
    }
}

int udp_event_run(udp_side *s) {
    eside e = {.s = s};
    struct event_config *cfg = event_config_new();
    if (cfg) {
        /* One thread per base: no locks (lab/peers/event.c says why). */
        event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
        e.base = event_base_new_with_config(cfg);
        event_config_free(cfg);
    }
    e.buf = malloc(s->size + 1);
    struct event *ev =
        e.base ? event_new(e.base, s->fd, EV_READ | EV_PERSIST, readable, &e)
               : NULL;
    int rc = !ev || !e.buf ? -ENOMEM : event_add(ev, NULL) < 0 ? -EIO : 0;
    s->send = esend;
    s->impl = &e;
    udp_side_ready(s);
    if (rc == 0) {
        udp_app_start(s);
        if (!s->done && !s->err && event_base_dispatch(e.base) < 0) rc = -EIO;
    }
    udp_side_end(s);
    if (ev) event_free(ev);
    if (e.base) event_base_free(e.base);
    close(s->fd);
    s->fd = -1;
    free(e.buf);
    return rc;
}
