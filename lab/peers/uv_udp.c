/* libuv's rows of the `udp` scenario (lab/udp.h), compiled when pkg-config
 * finds libuv: a uv_udp_t adopting the driver's socket (uv_udp_open).
 *   default       uv_udp_init: one recvmsg per datagram (up to 32 per
 *                 readiness), the alloc_cb giving one 64 KiB buffer
 *   UV_UDP_RECVMMSG  uv_udp_init_ex with the flag (libuv 1.37 and later):
 *                 recvmmsg, as many datagrams a call as 64 KiB slots fit
 *                 in the alloc_cb's buffer (libuv takes at most 20), so the
 *                 buffer is 20 slots
 * Sends are uv_udp_send, from a ring of requests; an echo copies what it
 * answers (the receive buffer is reused at the next read). libuv sends at
 * once when its queue is empty and otherwise at the next writable event,
 * with sendmmsg. */
#include "../udp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#define SLOT       65536 /* libuv's UV__UDP_DGRAM_MAXSIZE */
#define MMSG_SLOTS 20    /* libuv's UV__MMSG_MAXWIDTH */
#define HAS_MMSG   (UV_VERSION_HEX >= 0x012500) /* 1.37.0 */

typedef struct uside {
    udp_side *s;
    uv_loop_t loop;
    uv_udp_t h;
    uv_udp_send_t *reqs;
    bool *busy;
    unsigned char *copies;
    char *rbuf;
    size_t rlen;
    int nreq, next, outstanding;
    bool closing;
} uside;

const char *udp_uv_version(void) {
    return uv_version_string();
}

bool udp_uv_has_mmsg(void) {
    return HAS_MMSG;
}

static void set_err(udp_side *s, int err, const char *what) {
    if (s->err) return;
    s->err = err;
    snprintf(s->why, sizeof s->why, "%s: %s", what, uv_strerror(err));
}

static void finish(uside *u) {
    udp_side *s = u->s;
    if (u->closing || (!s->done && !s->err) || u->outstanding > 0) return;
    u->closing = true;
    udp_side_end(s);
    uv_close((uv_handle_t *)&u->h, NULL);
}

static void sent(uv_udp_send_t *req, int status) {
    uside *u = req->data;
    u->busy[req - u->reqs] = false;
    u->outstanding--;
    if (status < 0) set_err(u->s, status, "uv_udp_send");
    finish(u);
}

static void usend(udp_side *s, const void *bytes, size_t len, bool stable) {
    uside *u = s->impl;
    int i = u->next;
    u->next = (u->next + 1) % u->nreq;
    if (u->busy[i]) {
        set_err(s, UV_EBUSY, "request ring");
        return;
    }
    if (!stable) bytes = memcpy(u->copies + (size_t)i * s->size, bytes, len);
    uv_buf_t b = uv_buf_init((char *)bytes, (unsigned)len);
    u->reqs[i].data = u;
    int rc = uv_udp_send(&u->reqs[i], &u->h, &b, 1,
                         (const struct sockaddr *)&s->peer, sent);
    if (rc < 0) {
        set_err(s, rc, "uv_udp_send");
        return;
    }
    u->busy[i] = true;
    u->outstanding++;
}

static void alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    (void)suggested;
    uside *u = h->data;
    *buf = uv_buf_init(u->rbuf, (unsigned)u->rlen);
}

static void received(uv_udp_t *h, ssize_t nread, const uv_buf_t *buf,
                     const struct sockaddr *addr, unsigned flags) {
    uside *u = h->data;
    udp_side *s = u->s;
    if (nread < 0) {
        set_err(s, (int)nread, "recv");
    } else if (nread == 0 && !addr) {
        return; /* nothing more to read, or the batch's buffer back */
    } else if (flags & UV_UDP_PARTIAL) {
        set_err(s, UV_EMSGSIZE, "recv");
    } else {
        udp_app_recv(s, buf->base, (size_t)nread);
    }
    if (s->done || s->err) {
        uv_udp_recv_stop(h);
        finish(u);
    }
}

int udp_uv_run(udp_side *s) {
    uside *u = calloc(1, sizeof *u);
    if (!u) {
        udp_side_ready(s);
        return -ENOMEM;
    }
    u->s = s;
    u->nreq = 2 * s->window + UDP_CREDITS;
    u->reqs = calloc((size_t)u->nreq, sizeof *u->reqs);
    u->busy = calloc((size_t)u->nreq, sizeof *u->busy);
    u->copies = malloc((size_t)u->nreq * s->size);
    unsigned flags = 0;
#if HAS_MMSG
    if (s->variant & UDP_V_MMSG) flags = UV_UDP_RECVMMSG;
#endif
    u->rlen = flags ? (size_t)MMSG_SLOTS * SLOT : SLOT;
    u->rbuf = malloc(u->rlen);
    int rc = !u->reqs || !u->busy || !u->copies || !u->rbuf
                 ? -ENOMEM
                 : uv_loop_init(&u->loop);
    bool loop_ok = rc == 0, handle_ok = false;
    if (rc == 0) handle_ok = (rc = uv_udp_init_ex(&u->loop, &u->h, flags)) == 0;
    if (rc == 0) {
        u->h.data = u;
        rc = uv_udp_open(&u->h, s->fd);
        if (rc == 0) s->fd = -1; /* closed with the handle */
    }
    if (rc == 0) rc = uv_udp_recv_start(&u->h, alloc, received);
    s->send = usend;
    s->impl = u;
    udp_side_ready(s);
    if (rc == 0) {
        udp_app_start(s);
        finish(u);
        rc = uv_run(&u->loop, UV_RUN_DEFAULT);
        rc = rc > 0 ? -EIO : rc; /* handles left alive: should not be */
    } else if (handle_ok) {
        uv_close((uv_handle_t *)&u->h, NULL);
        uv_run(&u->loop, UV_RUN_DEFAULT);
    }
    if (loop_ok) uv_loop_close(&u->loop);
    if (s->fd >= 0) close(s->fd);
    free(u->reqs);
    free(u->busy);
    free(u->copies);
    free(u->rbuf);
    free(u);
    return rc;
}
