/* The floor of the `udp` scenario (lab/udp.h): what the kernel gives a
 * bare thread with no loop library, batched by hand, so lull's targets are
 * ratios to it. One epoll set watching the socket (level-triggered); on
 * each readiness, recvmmsg batches of FLOOR_BATCH until one comes back
 * short (the socket was empty then), and after each batch the replies it
 * made leave in one sendmmsg, pointing at the received bytes themselves
 * (no copy: they stay put until the send). Each datagram's sender is
 * read with it, as any server must to reply. No timers, no queues,
 * nothing but the calls a datagram needs. */
#include "udp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* Datagrams per recvmmsg, and sends per sendmmsg: above the echo's window
 * (32) and the flood's (64), as lull's send batch is. */
#define FLOOR_BATCH 64
#define FLOOR_OUT   (2 * FLOOR_BATCH) /* a batch's replies and credits */

typedef struct floor_side {
    udp_side *s;
    struct mmsghdr out[FLOOR_OUT];
    struct iovec out_iov[FLOOR_OUT];
    int nout;
} floor_side;

static void fsend(udp_side *s, const void *bytes, size_t len, bool stable) {
    (void)stable; /* sent before the next recvmmsg reuses the buffer */
    floor_side *f = s->impl;
    if (f->nout == FLOOR_OUT) {
        if (!s->err) {
            s->err = -ENOBUFS;
            snprintf(s->why, sizeof s->why, "floor: more than %d sends",
                     FLOOR_OUT);
        }
        return;
    }
    struct mmsghdr *m = &f->out[f->nout];
    f->out_iov[f->nout] = (struct iovec){(void *)bytes, len};
    memset(m, 0, sizeof *m);
    m->msg_hdr.msg_name = &s->peer;
    m->msg_hdr.msg_namelen = sizeof s->peer;
    m->msg_hdr.msg_iov = &f->out_iov[f->nout];
    m->msg_hdr.msg_iovlen = 1;
    f->nout++;
}

/* Sends what the batch made; a full socket buffer is waited out with the
 * same epoll set (never met on loopback within the window). */
static int flush(floor_side *f, int fd, int ep) {
    int done = 0;
    while (done < f->nout) {
        int n = sendmmsg(fd, f->out + done, (unsigned)(f->nout - done), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT};
            epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
            epoll_wait(ep, &ev, 1, -1);
            ev.events = EPOLLIN;
            epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
            continue;
        }
        if (n < 0) return -errno;
        done += n;
    }
    f->nout = 0;
    return 0;
}

int udp_floor_run(udp_side *s) {
    floor_side *f = calloc(1, sizeof *f);
    struct mmsghdr in[FLOOR_BATCH];
    struct iovec iov[FLOOR_BATCH];
    struct sockaddr_in from[FLOOR_BATCH];
    /* A slot a byte longer than a datagram, so a longer one shows. */
    size_t slot = s->size + 1;
    unsigned char *buf = malloc(FLOOR_BATCH * slot);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int rc = !f || !buf ? -ENOMEM : ep < 0 ? -errno : 0;
    struct epoll_event ev = {.events = EPOLLIN};
    if (rc == 0 && epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev) != 0) rc = -errno;
    if (f) f->s = s;
    s->send = fsend;
    s->impl = f;
    udp_side_ready(s);
    if (rc == 0) {
        udp_app_start(s);
        rc = flush(f, s->fd, ep);
    }
    while (rc == 0 && !s->done && !s->err) {
        int n = epoll_wait(ep, &ev, 1, -1);
        if (n < 0 && errno != EINTR) rc = -errno;
        if (n <= 0) continue;
        for (;;) {
            for (int i = 0; i < FLOOR_BATCH; i++) {
                iov[i] = (struct iovec){buf + (size_t)i * slot, slot};
                memset(&in[i].msg_hdr, 0, sizeof in[i].msg_hdr);
                /* Every sender's address, as a server needs it to
                 * reply (and as lull and libuv hand it over). */
                in[i].msg_hdr.msg_name = &from[i];
                in[i].msg_hdr.msg_namelen = sizeof from[i];
                in[i].msg_hdr.msg_iov = &iov[i];
                in[i].msg_hdr.msg_iovlen = 1;
            }
            int got = recvmmsg(s->fd, in, FLOOR_BATCH, MSG_DONTWAIT, NULL);
            if (got < 0) {
                if (errno != EAGAIN && errno != EINTR) rc = -errno;
                break;
            }
            for (int i = 0; i < got && !s->err; i++)
                udp_app_recv(s, buf + (size_t)i * slot, in[i].msg_len);
            if (rc == 0) rc = flush(f, s->fd, ep);
            if (got < FLOOR_BATCH || s->done || s->err || rc) break;
        }
    }
    udp_side_end(s);
    if (ep >= 0) close(ep);
    close(s->fd);
    s->fd = -1;
    free(buf);
    free(f);
    return rc;
}
