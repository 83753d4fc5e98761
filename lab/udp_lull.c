/* lull's rows of the `udp` scenario (lab/udp.h): one lull_udp handle on
 * its own loop per side, adopting the driver's socket (lull_udp_open).
 * Sends made while a batch of datagrams is delivered leave together at
 * the loop's flush point (one sendmmsg); reads are recvmmsg batches of
 * recv_batch datagrams (16 by default; the UDP_V_BATCH64 row asks for 64).
 * An echo copies the datagram it answers (the received bytes are valid
 * during the callback only) into a ring of its own; requests come from a
 * ring too, so nothing is allocated per datagram. lull's own count of its
 * system calls (send_calls + recv_calls + the loop's polls) is kept beside
 * the lab's count, for the table's footnote. */
#include "udp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lull.h>

typedef struct lside {
    udp_side *s;
    lull_udp udp;
    lull_datagram *reqs;   /* a ring of nreq requests */
    unsigned char *copies; /* nreq echo copies of s->size bytes */
    int nreq, next;
    int outstanding; /* sends whose callback has not run */
    bool closing;
} lside;

static void finish(lside *l) {
    udp_side *s = l->s;
    if (l->closing || (!s->done && !s->err) || l->outstanding > 0) return;
    l->closing = true;
    udp_side_end(s);
    lull_metrics m;
    lull_loop_metrics(l->udp.loop, &m);
    s->own_calls = (double)(l->udp.send_calls + l->udp.recv_calls + m.polls);
    lull_udp_close(&l->udp, NULL);
}

static void sent(lull_datagram *req, int status) {
    lside *l = req->data;
    l->outstanding--;
    if (status < 0 && !l->s->err) {
        l->s->err = status;
        snprintf(l->s->why, sizeof l->s->why, "send: %s",
                 lull_strerror(status));
    }
    finish(l);
}

static void lsend(udp_side *s, const void *bytes, size_t len, bool stable) {
    lside *l = s->impl;
    int i = l->next;
    l->next = (l->next + 1) % l->nreq;
    if (!stable) bytes = memcpy(l->copies + (size_t)i * s->size, bytes, len);
    l->reqs[i].data = l;
    int rc = lull_udp_send(&l->udp, &l->reqs[i], bytes, len,
                           (const struct sockaddr *)&s->peer, sent);
    if (rc < 0) {
        if (!s->err) {
            s->err = rc;
            snprintf(s->why, sizeof s->why, "lull_udp_send: %s",
                     lull_strerror(rc));
        }
        return;
    }
    l->outstanding++;
}

static void received(lull_udp *udp, int status, const void *bytes, size_t len,
                     const struct sockaddr *from, unsigned flags) {
    (void)from;
    lside *l = udp->data;
    udp_side *s = l->s;
    if (status < 0 || (flags & LULL_UDP_TRUNCATED)) {
        if (!s->err) {
            s->err = status < 0 ? status : -EPROTO;
            snprintf(s->why, sizeof s->why, "recv: %s",
                     status < 0 ? lull_strerror(status) : "truncated");
        }
    } else {
        udp_app_recv(s, bytes, len);
    }
    if (s->done || s->err) {
        lull_udp_recv_stop(udp);
        finish(l);
    }
}

int udp_lull_run(udp_side *s) {
    lside l = {.s = s};
    lull_loop *loop = NULL;
    /* In flight at once, at most: the window, and the credits. */
    l.nreq = 2 * s->window + UDP_CREDITS;
    l.reqs = calloc((size_t)l.nreq, sizeof *l.reqs);
    l.copies = malloc((size_t)l.nreq * s->size);
    lull_udp_options o = {.recv_batch = (s->variant & UDP_V_BATCH64) ? 64 : 0};
    int rc = !l.reqs || !l.copies ? -ENOMEM : lull_loop_new(&loop, NULL);
    bool inited = false;
    if (rc == 0) inited = (rc = lull_udp_init(loop, &l.udp, &o)) == 0;
    if (rc == 0) {
        l.udp.data = &l;
        rc = lull_udp_open(&l.udp, s->fd);
        if (rc == 0) s->fd = -1; /* the handle's now */
    }
    if (rc == 0) rc = lull_udp_recv_start(&l.udp, received);
    s->send = lsend;
    s->impl = &l;
    udp_side_ready(s);
    if (rc == 0) {
        udp_app_start(s);
        finish(&l); /* an error in the first sends */
        rc = lull_loop_run(loop, LULL_RUN_DEFAULT);
    } else if (inited) {
        lull_udp_close(&l.udp, NULL);
        lull_loop_run(loop, LULL_RUN_DEFAULT);
    }
    if (s->fd >= 0) close(s->fd);
    if (loop) lull_loop_free(loop);
    free(l.reqs);
    free(l.copies);
    return rc;
}
