/* UDP: datagram sockets on the loop.
 *
 * Owns: a handle's socket, its send queue (the caller's lull_datagram
 * structs, linked through req->next: no allocation per datagram), its
 * receive buffer (recv_batch slots of max_datagram bytes and their
 * recvmmsg headers, allocated once at the first lull_udp_recv_start) and
 * its close. One thread: the loop's.
 *
 * When datagrams leave. A send appends to the queue and queues the flush
 * task at the loop's next flush point (lull__at_flush, as streams do), so
 * every datagram sent in between leaves in one sendmmsg of up to SEND_BATCH
 * messages, in send order, whatever their destinations (a sendmsg each
 * where a seccomp filter refuses sendmmsg). A sendmmsg that
 * stops early either met a full socket buffer (EAGAIN: the handle waits for
 * writability, BLOCKED, and sends only queue until then) or an error that
 * belongs to the first unsent datagram (it fails with that errno and the
 * rest go on). ENOBUFS, the device's queue full, is such an error: a UDP
 * socket polls writable all the while, so a wait for writability would
 * spin until the device drained, and a datagram may be lost anyway. Results are
 * reported by the event task, in a later turn than the send: a request's
 * callback never runs inside lull_udp_send.
 *
 * When datagrams arrive. A readable socket is read with recvmmsg, up to
 * RECV_ROUNDS batches per iteration (the rest waits for the next one: the
 * watcher is level-triggered), so a flood costs the loop a bounded slice
 * per iteration and timers and other fds still run. With GRO the kernel may
 * hand several datagrams of one sender in one slot; they are split again.
 * Where a seccomp filter refuses recvmmsg, each slot is a recvmsg of its own.
 *
 * Whose code runs where. A recv callback may close the handle, stop
 * receiving or send: after each call the handle is looked at again only if
 * it was not closed (closed_guard, a flag on the reader's stack that a
 * close sets). A close inside a recv callback keeps the receive buffer
 * until the close completes, since the callback may still read its bytes.
 *
 * After fork(): what the parent queued is the parent's to send through
 * the shared socket. The child's copy (after lull_loop_fork) cancels it at
 * its first send, flush, readiness or close (adopt_forked), as a stream's
 * copy drops its parent's frames.
 *
 * Invariants: a request is on exactly one of queue and done list from the
 * send that accepted it to its callback; udp->queued is the bytes on the
 * queue; BLOCKED implies writable interest; a closed handle holds no fd.
 *
 * One free path: the close callback runs exactly once per lull_udp_close,
 * in a later turn, after every request's callback, and is the handle's
 * last.
 *
 * The five rows of a background component, for a UDP handle:
 *   Trigger                 a send (flush point), socket readiness
 *                           (readable while receiving, writable while
 *                           BLOCKED), a close
 *   Source of truth         the send queue and the done list; the socket
 *   Pending-work predicate  queue non-empty, or results owed (done list),
 *                           or a close callback owed
 *   Next deadline or retry  none: a full socket waits for writability
 *   Quiet condition         queue and done list empty: no task queued, no
 *                           writable interest; an idle handle only waits in
 *                           epoll (while receiving), or holds nothing */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"
#include "own_name.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103 /* linux/udp.h, 4.18 */
#endif
#ifndef UDP_GRO
#define UDP_GRO 104 /* linux/udp.h, 5.0 */
#endif

/* The largest UDP payload over IPv4 (65535 - 8 - 20), and over IPv6,
 * whose 65535 bytes of payload length leave out its own header (- 8). */
#define DATAGRAM_MAX  65507u
#define DATAGRAM6_MAX 65527u
/* Receive slots: the largest datagram by default, so nothing is cut. The
 * pages of a slot are touched only as far as datagrams fill them. */
#define MAX_DATAGRAM_DEFAULT ((size_t)65536)
#define RECV_BATCH_DEFAULT   16u
/* recvmmsg and sendmmsg take at most UIO_MAXIOV (1024) messages a call. */
#define BATCH_MAX 1024u
/* Messages per sendmmsg: a burst of small sends costs one call per 64
 * datagrams, and the headers (~4 KiB of stack) stay small. */
#define SEND_BATCH 64
/* recvmmsg calls per readable callback: a flood is read RECV_ROUNDS
 * batches at a time, then the loop moves on (level-triggered, so the rest
 * is reported again at the next poll). */
#define RECV_ROUNDS 4
/* Error-queue entries dropped per error report: a flood of ICMP errors is
 * taken a bounded slice at a time, like datagrams (the rest keeps EPOLLERR
 * up for the next poll). */
#define ERRQUEUE_ROUNDS 64
/* The kernel's limit of segments in one UDP_SEGMENT send (UDP_MAX_SEGMENTS). */
#define GSO_MAX_SEGMENTS 64
/* A slot's control room (GRO only). The segment size (CMSG_SPACE(4), 24
 * bytes) comes after what else the socket asked for, which the kernel
 * writes first (sock_recv_cmsgs): a receive timestamp (32), SO_TIMESTAMPING's
 * (64) and its packet info (32), SO_RXQ_OVFL, SO_RCVMARK, SO_RCVPRIORITY
 * (24 each): 224 with it. With less, a socket the program adopted with a
 * timestamp on had the segment size cut off (MSG_CTRUNC), and a coalesced
 * slot was delivered as one datagram. */
#define SLOT_CONTROL 256

/* lull_udp.state */
#define U_READING   0x01u   /* lull_udp_recv_start */
#define U_BLOCKED   0x02u   /* the socket buffer was full: wait for writable */
#define U_CLOSED    0x04u   /* lull_udp_close was called */
#define U_CONNECTED 0x08u   /* lull_udp_connect: sends need no address */
#define U_BOUND     0x10u   /* bound (by bind, connect or a first send) */
#define U_NO_GSO    0x20u   /* the kernel refused UDP_SEGMENT: split by hand */
#define U_GRO       0x40u   /* UDP_GRO is on */
#define U_INIT      0x80u   /* lull_udp_init ran */
#define U_RPEND     0x100u  /* event task: deliver the rest of a batch */
#define U_INET      0x200u  /* the socket is AF_INET (read once, at adopt) */
#define U_INET6     0x400u  /* the socket is AF_INET6 (ditto) */
#define U_RECV_EACH 0x800u  /* recvmmsg refused (seccomp): recvmsg each */
#define U_SEND_EACH 0x1000u /* sendmmsg refused (seccomp): sendmsg each */
#define U_PEER4     0x2000u /* connected to an IPv4 peer, mapped or not */

/* One receive slot's headers. */
typedef struct recv_meta {
    struct mmsghdr *msgs;
    struct iovec *iov;
    struct sockaddr_storage *from;
    char (*ctl)[SLOT_CONTROL];
    int late; /* an error recv_each met after the last batch's datagrams,
                 owed after them: a recv_stop inside the batch keeps it */
} recv_meta;

static void on_io(lull_io *io, int events);
static void flush_task(lull_task *t);
static void event_task(lull_task *t);
static bool read_datagrams(lull_udp *udp, bool hangup);
static void prepare_slots(lull_udp *udp, unsigned from, unsigned to);
LULL__OWN_NAME(on_io, "lull_udp socket", lull_udp, io);
LULL__OWN_NAME(flush_task, "lull_udp send flush", lull_udp, flush);
LULL__OWN_NAME(event_task, "lull_udp results turn", lull_udp, event);

/* The process whose sends are queued: the loop's (its pid) when the
 * handle was set up or adopted. Kept in the flush task's data word, which
 * lull's own task leaves unused (the struct's layout is the ABI). */
static void set_owner(lull_udp *udp) {
    udp->flush.data = (void *)(intptr_t)udp->loop->pid;
}

/* A handle a forked child inherited, in the child that called
 * lull_loop_fork (which gave the loop the child's pid), as a stream's
 * lull__stream_inherited. One compare. */
static bool inherited(const lull_udp *udp) {
    return LULL_UNLIKELY((intptr_t)udp->flush.data != (intptr_t)udp->loop->pid);
}

/* Puts udp in the process's set of UDP handles in use and the loop's own
 * from its set-up until its close callback (or its loop's lull_loop_free,
 * which forgets the handles left open: without a socket, allowed), so that
 * an init refuses a live handle and a close after the loop's free knows.
 * Asked by address: udp is garbage before its first init; a handle found
 * there is one lull wrote. 0 when an init may clear it: new, or set up on
 * this loop and idle (no socket, not closing, so nothing queued and no
 * watcher); -EBUSY (live, or set up on another loop), -ENOMEM. */
static int has_socket(const lull_udp *udp);

static int set_up_idle(lull_loop *loop, lull_udp *udp) {
    if (lull__inuse_has(udp))
        return lull__on_loop_thread(loop) &&
                       lull__registry_has(&loop->udps, udp) &&
                       !has_socket(udp) && !(udp->state & U_CLOSED)
                   ? 0
                   : -EBUSY;
    int rc = lull__inuse_add(udp);
    if (rc < 0) return rc;
    rc = lull__registry_add(&loop->udps, udp);
    if (rc < 0) lull__inuse_remove(udp);
    return rc < 0 ? rc : 0;
}

int lull_udp_init(lull_loop *loop, lull_udp *udp,
                  const lull_udp_options *opts) {
    if (!loop || !udp) return -EINVAL;
    lull_udp_options o = {0};
    if (opts) o = *opts;
    if (o.recv_batch > BATCH_MAX) return -EINVAL;
    /* A live handle (holding a socket, receiving or not, a send queued,
     * its close callback owed): clearing it would leave its socket open
     * (and registered under a handle with no fd, readable for ever) and
     * the loop's count of open handles up, and cut the queued tasks' links.
     * Asked by address, of the process's set of handles in use (a hash
     * lookup): udp is garbage before its first init. A send is queued and
     * a watcher started only while a socket is held, so the set answers
     * for them. */
    int rc = set_up_idle(loop, udp);
    if (rc < 0) return rc;
    if (o.max_datagram > MAX_DATAGRAM_DEFAULT)
        o.max_datagram = MAX_DATAGRAM_DEFAULT;
    void *data = udp->data; /* the owner's pointer survives set-up */
    memset(udp, 0, sizeof *udp);
    udp->data = data;
    udp->loop = loop;
    udp->io.fd = -1;
    lull_task_init(&udp->flush, flush_task);
    lull_task_init(&udp->event, event_task);
    set_owner(udp);
    udp->max_datagram = o.max_datagram ? o.max_datagram : MAX_DATAGRAM_DEFAULT;
    udp->recv_batch = o.recv_batch ? o.recv_batch : RECV_BATCH_DEFAULT;
    udp->max_queued = o.max_queued ? o.max_queued : SIZE_MAX;
    udp->gso_segment = o.gso_segment;
    /* The kernel coalesces up to 64 KiB into one slot and cuts what a
     * slot cannot hold: with smaller slots, datagrams that each fit would
     * be lost or flagged truncated. GRO only with full-size slots. */
    bool gro = o.gro && udp->max_datagram >= MAX_DATAGRAM_DEFAULT;
    udp->state = U_INIT | (gro ? U_GRO : 0);
    return 0;
}

static bool usable(const lull_udp *udp) {
    return udp && (udp->state & U_INIT) && !(udp->state & U_CLOSED);
}

static int has_socket(const lull_udp *udp) {
    return udp->io.fd >= 0;
}

/* Left open without a socket by a lull_loop_free, which forgot it
 * (allowed: it held nothing): udp->loop is freed memory, and a bind,
 * connect, open, first send or recv_start would register a socket with it
 * or read its owner. Only such a handle can be: one holding a socket, or
 * closing, keeps its loop from being freed (-EBUSY). The lookup in the
 * process's set of handles in use is made only while no socket is held,
 * never on a send's hot path. */
static bool forgotten(const lull_udp *udp) {
    return !has_socket(udp) && !(udp->state & U_CLOSED) &&
           !lull__inuse_has(udp);
}

/* The socket's interest: readable while receiving, writable while the
 * socket buffer is full. */
static int set_interest(lull_udp *udp) {
    int events = 0;
    if (udp->state & U_READING) events |= LULL_READABLE;
    if (udp->state & U_BLOCKED) events |= LULL_WRITABLE;
    if (!events) {
        lull_io_stop(&udp->io);
        return 0;
    }
    return lull_io_start(&udp->io, events);
}

static void finish(lull_udp *udp, lull_datagram *req, int status);

/* The child's first send, flush, writable socket or close: what is queued
 * was queued by the parent, whose copy sends it through the same socket,
 * so here it is cancelled, not sent twice (a stream's adopt does the
 * same). From here on the handle is the child's. */
static void adopt_forked(lull_udp *udp) {
    set_owner(udp);
    while (udp->head)
        finish(udp, udp->head, -ECANCELED);
    if (udp->state & U_BLOCKED) {
        udp->state &= ~U_BLOCKED;
        if (has_socket(udp)) (void)set_interest(udp);
    }
}

static void enable_gro(lull_udp *udp) {
    int one = 1;
    if (!(udp->state & U_GRO)) return;
    /* Refused by kernels before 5.0: datagrams then arrive one a slot. */
    if (setsockopt(udp->io.fd, IPPROTO_UDP, UDP_GRO, &one, sizeof one) != 0)
        udp->state &= ~U_GRO;
}

static int socket_family(const lull_udp *udp);

/* An IPv4 address, or an IPv4-mapped IPv6 one (::ffff:a.b.c.d): either
 * leaves as an IPv4 datagram, 65507 bytes at most. */
static bool ipv4_bound(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET) return true;
    return sa->sa_family == AF_INET6 &&
           IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

/* Takes fd as the handle's socket. UDP_SEGMENT and UDP_GRO are UDP's: on
 * another datagram socket (Unix) a long send is split by lull. */
static int adopt(lull_udp *udp, int fd) {
    lull__io_setup(udp->loop, &udp->io, fd, on_io);
    /* Holding a socket keeps lull_loop_free at -EBUSY, receiving or not
     * (as an open stream does), and lull_udp_init at -EBUSY, until
     * drop_socket or lull_udp_close. */
    udp->loop->handles++;
    /* A socket keeps its family: read it here once, so that a send, which
     * checks its destination against it, makes no system call of its own
     * (it was a getsockname per datagram). */
    int family = socket_family(udp);
    udp->state &= ~(U_INET | U_INET6);
    if (family == AF_INET) udp->state |= U_INET;
    if (family == AF_INET6) udp->state |= U_INET6;
    if (family != AF_INET && family != AF_INET6) {
        udp->state |= U_NO_GSO;
        udp->state &= ~U_GRO;
    }
    enable_gro(udp);
    return 0;
}

static int make_socket(lull_udp *udp, int family) {
    int fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    /* Never the program's closed stdio (lull__fd_above_stdio). */
    fd = fd < 0 ? -errno : lull__fd_above_stdio(fd);
    if (fd < 0) return fd;
    int rc = adopt(udp, fd);
    if (rc < 0) close(fd);
    return rc;
}

static int socket_family(const lull_udp *udp) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(udp->io.fd, (struct sockaddr *)&ss, &len) != 0)
        return -errno;
    return ss.ss_family;
}

/* Undoes a make_socket whose bind or connect then failed: the handle is
 * as before the call, not holding a socket of that address's family
 * (which would refuse the other family's address at the next try). */
static int drop_socket(lull_udp *udp, int rc) {
    lull_io_stop(&udp->io);
    close(udp->io.fd);
    udp->io.fd = -1;
    udp->loop->handles--;
    udp->state &= ~(U_INET | U_INET6 | U_NO_GSO);
    return rc;
}

int lull_udp_bind(lull_udp *udp, const char *host, int port, unsigned flags) {
    if (!usable(udp) || forgotten(udp)) return -EINVAL;
    if (flags & ~(LULL_UDP_REUSEADDR | LULL_UDP_REUSEPORT | LULL_UDP_IPV6ONLY))
        return -EINVAL;
    if (udp->state & U_BOUND) return -EBUSY;
    struct sockaddr_storage ss;
    socklen_t len;
    int family;
    int rc = lull__inet_address(host, port, &ss, &len, &family);
    if (rc < 0) return rc;
    bool made = !has_socket(udp);
    if (made && (rc = make_socket(udp, family)) < 0) return rc;
    int fd = udp->io.fd, one = 1;
    rc = 0;
    if ((flags & LULL_UDP_REUSEADDR) &&
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
        rc = -errno;
    if (!rc && (flags & LULL_UDP_REUSEPORT) &&
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0)
        rc = -errno;
    if (!rc && family == AF_INET6) {
        int v6only = (flags & LULL_UDP_IPV6ONLY) ? 1 : 0;
        if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only) !=
            0)
            rc = -errno;
    }
    if (!rc && bind(fd, (struct sockaddr *)&ss, len) != 0) rc = -errno;
    if (rc < 0) return made ? drop_socket(udp, rc) : rc;
    udp->state |= U_BOUND;
    return 0;
}

int lull_udp_open(lull_udp *udp, int fd) {
    if (!usable(udp) || fd < 0 || forgotten(udp)) return -EINVAL;
    if (has_socket(udp)) return -EBUSY;
    int type;
    socklen_t tl = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0)
        return errno == ENOTSOCK ? -EINVAL : -errno;
    if (type != SOCK_DGRAM) return -EINVAL;
    /* A socket lull reads and writes without blocking; it is the handle's
     * from now on (closed with it), so its description's flag is ours. */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) return -errno;
    int rc = adopt(udp, fd);
    if (rc < 0) return rc;
    /* Bound already, but for an IP socket without a port yet: that one
     * lull_udp_bind may bind (else the kernel does at its first send). A
     * Unix one lull_udp_bind cannot bind in any case. */
    if (lull_udp_local_port(udp) != 0) udp->state |= U_BOUND;
    /* A connected socket (one of a socketpair, one connected before) sends
     * without an address. */
    struct sockaddr_storage peer;
    socklen_t plen = sizeof peer;
    if (getpeername(fd, (struct sockaddr *)&peer, &plen) == 0) {
        udp->state |= U_CONNECTED;
        if (ipv4_bound((struct sockaddr *)&peer)) udp->state |= U_PEER4;
    }
    return 0;
}

int lull_udp_connect(lull_udp *udp, const char *host, int port) {
    if (!usable(udp) || forgotten(udp)) return -EINVAL;
    if (!host) {
        if (!has_socket(udp)) return -EBADF;
        struct sockaddr unspec = {.sa_family = AF_UNSPEC};
        if (connect(udp->io.fd, &unspec, sizeof unspec) != 0) return -errno;
        udp->state &= ~(U_CONNECTED | U_PEER4);
        /* A port the kernel picked (a connect's, or a bind to port 0) it
         * lets go here: unbound again, lull_udp_bind may bind it. */
        if (lull_udp_local_port(udp) == 0) udp->state &= ~U_BOUND;
        return 0;
    }
    if (port <= 0) return -EINVAL;
    struct sockaddr_storage ss;
    socklen_t len;
    int family, rc = lull__inet_address(host, port, &ss, &len, &family);
    if (rc < 0) return rc;
    bool made = !has_socket(udp);
    if (made && (rc = make_socket(udp, family)) < 0) return rc;
    if (connect(udp->io.fd, (struct sockaddr *)&ss, len) != 0)
        return made ? drop_socket(udp, -errno) : -errno;
    udp->state &= ~U_PEER4;
    if (ipv4_bound((struct sockaddr *)&ss)) udp->state |= U_PEER4;
    udp->state |= U_CONNECTED | U_BOUND;
    return 0;
}

int lull_udp_local_port(const lull_udp *udp) {
    if (!udp || !(udp->state & U_INIT)) return -EINVAL;
    if (!has_socket(udp)) return -EBADF;
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(udp->io.fd, (struct sockaddr *)&ss, &len) != 0)
        return -errno;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -EAFNOSUPPORT;
}

/* ---------------------------------------------------------------- sends */

static socklen_t addr_len(const struct sockaddr_storage *ss) {
    return ss->ss_family == AF_INET    ? sizeof(struct sockaddr_in)
           : ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                       : 0;
}

/* Checks a send's destination against the handle, and copies it. */
static int take_destination(lull_udp *udp, lull_datagram *req,
                            const struct sockaddr *to) {
    /* Only the address's own bytes are copied (the kernel reads no more:
     * msg_namelen), not the whole sockaddr_storage: a send costs that
     * much less. No address: the family says so (addr_len 0). */
    req->to.ss_family = AF_UNSPEC;
    if (!to) return (udp->state & U_CONNECTED) ? 0 : -EINVAL;
    if (udp->state & U_CONNECTED) return -EISCONN;
    size_t len = to->sa_family == AF_INET    ? sizeof(struct sockaddr_in)
                 : to->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                             : 0;
    if (!len) return -EINVAL;
    if (len == sizeof(struct sockaddr_in)) /* constant sizes: a few moves */
        memcpy(&req->to, to, sizeof(struct sockaddr_in));
    else
        memcpy(&req->to, to, sizeof(struct sockaddr_in6));
    if (!has_socket(udp)) {
        int rc = make_socket(udp, to->sa_family);
        if (rc < 0) return rc;
        udp->state |= U_BOUND;
        return 0;
    }
    /* An IPv4 destination on a dual-stack IPv6 socket goes as a mapped
     * address; an IPv6 one on an IPv4 socket cannot go at all. */
    int family = (udp->state & U_INET)    ? AF_INET
                 : (udp->state & U_INET6) ? AF_INET6
                                          : AF_UNSPEC; /* not an IP socket */
    /* An adopted Unix socket takes no IP address (nor, here, its own
     * kind): refused now, not accepted to fail in the callback. */
    if (family == AF_UNSPEC) return -EINVAL;
    if (family == AF_INET && to->sa_family == AF_INET6) return -EINVAL;
    if (family == AF_INET6 && to->sa_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)to;
        struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&req->to;
        memset(v6, 0, sizeof *v6);
        v6->sin6_family = AF_INET6;
        v6->sin6_port = v4->sin_port;
        v6->sin6_addr.s6_addr[10] = 0xff;
        v6->sin6_addr.s6_addr[11] = 0xff;
        memcpy(&v6->sin6_addr.s6_addr[12], &v4->sin_addr, 4);
    }
    return 0;
}

int lull_udp_send(lull_udp *udp, lull_datagram *req, const void *bytes,
                  size_t len, const struct sockaddr *to, lull_udp_send_fn cb) {
    if (!udp || !req || (!bytes && len)) return -EINVAL;
    if (!(udp->state & U_INIT) || forgotten(udp)) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(udp->loop);
    if (udp->state & U_CLOSED) return -EPIPE;
    if (inherited(udp)) adopt_forked(udp); /* the parent's queue first */
    /* In flight from the accepting send until its callback (which clears
     * req->udp): a request must not be sent again meanwhile, on any handle
     * (on another, it would be linked into two queues). A request is zeroed
     * before its first use (lull.h), so req->udp is NULL then. */
    if (req->udp) return -EBUSY;
    /* IPv6's bound: the destination's family, or a connected socket's
     * peer's; an IPv4-mapped address leaves as IPv4, whose bound the
     * kernel would meet only at the flush (-EMSGSIZE in the callback). */
    bool v6 =
        to ? !ipv4_bound(to) : (udp->state & (U_INET6 | U_PEER4)) == U_INET6;
    size_t one = v6 ? DATAGRAM6_MAX : DATAGRAM_MAX;
    size_t max = udp->gso_segment ? udp->gso_segment * GSO_MAX_SEGMENTS : one;
    if (udp->gso_segment > one) max = one;
    if (len > max) return -EMSGSIZE;
    if (len > udp->max_queued - udp->queued) return -ENOBUFS;
    int rc = take_destination(udp, req, to);
    if (rc < 0) return rc;
    req->bytes = bytes;
    req->len = len;
    req->cb = cb;
    req->udp = udp;
    req->status = 0;
    req->next = NULL;
    if (udp->tail)
        udp->tail->next = req;
    else
        udp->head = req;
    udp->tail = req;
    udp->queued += len;
    if (!(udp->state & U_BLOCKED)) lull__at_flush(udp->loop, &udp->flush);
    return 0;
}

/* The request leaves the queue with its result; its callback is owed
 * (the caller posts the event task). */
static void finish_one(lull_udp *udp, lull_datagram *req, int status) {
    udp->head = req->next;
    if (!udp->head) udp->tail = NULL;
    udp->queued -= req->len;
    req->status = status;
    req->next = NULL;
    if (udp->done_tail)
        udp->done_tail->next = req;
    else
        udp->done = req;
    udp->done_tail = req;
}

static void post_event(lull_udp *udp) {
    if (!lull_task_pending(&udp->event)) lull_task_post(udp->loop, &udp->event);
}

static void finish(lull_udp *udp, lull_datagram *req, int status) {
    finish_one(udp, req, status);
    post_event(udp);
}

/* How many datagrams of gso_segment bytes the request stands for (1 when
 * it fits one). */
static size_t segments(const lull_udp *udp, const lull_datagram *req) {
    if (!udp->gso_segment || req->len <= udp->gso_segment) return 1;
    return (req->len + udp->gso_segment - 1) / udp->gso_segment;
}

/* Fills message i for req: one datagram, or, with GSO, one message the
 * kernel cuts in segments. */
static void fill_msg(lull_udp *udp, lull_datagram *req, struct mmsghdr *m,
                     struct iovec *iov, char *ctl) {
    iov->iov_base = (void *)req->bytes;
    iov->iov_len = req->len;
    memset(m, 0, sizeof *m);
    m->msg_hdr.msg_iov = iov;
    m->msg_hdr.msg_iovlen = 1;
    socklen_t alen = addr_len(&req->to);
    if (alen) {
        m->msg_hdr.msg_name = &req->to;
        m->msg_hdr.msg_namelen = alen;
    }
    if (segments(udp, req) > 1) {
        /* CMSG_SPACE's padding is sent too: zeroed, not the stack's. */
        memset(ctl, 0, CMSG_SPACE(sizeof(uint16_t)));
        m->msg_hdr.msg_control = ctl;
        m->msg_hdr.msg_controllen = CMSG_SPACE(sizeof(uint16_t));
        struct cmsghdr *c = CMSG_FIRSTHDR(&m->msg_hdr);
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t seg = (uint16_t)udp->gso_segment;
        memcpy(CMSG_DATA(c), &seg, sizeof seg);
    }
}

/* Without UDP_SEGMENT: a long request leaves as one sendto per segment.
 * Returns 0, -EAGAIN when the socket filled part-way (req->status, unused
 * while the request is queued, keeps the bytes sent: the rest leaves once
 * the socket is writable, none twice), or the first other error. */
static int send_split(lull_udp *udp, lull_datagram *req) {
    socklen_t alen = addr_len(&req->to);
    const char *p = req->bytes;
    for (size_t off = (size_t)req->status; off < req->len;
         off += udp->gso_segment) {
        size_t n = req->len - off < udp->gso_segment ? req->len - off
                                                     : udp->gso_segment;
        ssize_t w;
        do {
            w = sendto(udp->io.fd, p + off, n, MSG_NOSIGNAL,
                       alen ? (const struct sockaddr *)&req->to : NULL, alen);
        } while (w < 0 && errno == EINTR);
        udp->send_calls++;
        if (w < 0 && errno == EAGAIN) {
            req->status = (int)off;
            return -EAGAIN;
        }
        if (w < 0) return -errno;
        udp->sent++;
    }
    return 0;
}

/* A request cut by hand: finished, or false when the socket is full (the
 * handle waits for writability, as for a full sendmmsg). */
static bool split_out(lull_udp *udp, lull_datagram *req) {
    int rc = send_split(udp, req);
    if (rc == -EAGAIN) {
        udp->state |= U_BLOCKED;
        set_interest(udp);
        return false;
    }
    finish(udp, req, rc);
    return true;
}

/* The kernel refused a GSO message (no UDP_SEGMENT, or no checksum offload
 * on the route): true when this was the reason, and from now on long sends
 * are split by hand. */
static bool gso_refused(lull_udp *udp, const lull_datagram *req, int err) {
    if (segments(udp, req) <= 1) return false;
    if (err != EIO && err != EINVAL && err != ENOPROTOOPT && err != EOPNOTSUPP)
        return false;
    udp->state |= U_NO_GSO;
    return true;
}

/* A seccomp filter's answer to a call it refuses: ENOSYS, or EPERM from
 * older container profiles. */
static bool refused(int err) {
    return err == ENOSYS || err == EPERM;
}

/* One batch: sendmmsg, or sendmsg a datagram at a time where a seccomp
 * filter refuses sendmmsg. EPERM is also a firewall's answer for one
 * datagram, so a refusal sends that datagram with sendmsg, and only a
 * sendmsg that works says the filter refused the call (U_SEND_EACH from
 * then on). As sendmmsg: the count sent, or -1 and errno when none was (an
 * error after the first is met again by the next call, whose first it is). */
static int send_some(lull_udp *udp, struct mmsghdr *msgs, unsigned n) {
    int sent;
    if (!(udp->state & U_SEND_EACH)) {
        do {
            sent = sendmmsg(udp->io.fd, msgs, n, MSG_NOSIGNAL);
        } while (sent < 0 && errno == EINTR);
        if (sent >= 0 || !refused(errno)) return sent;
    }
    for (sent = 0; (unsigned)sent < n; sent++) {
        ssize_t w;
        do {
            w = sendmsg(udp->io.fd, &msgs[sent].msg_hdr, MSG_NOSIGNAL);
        } while (w < 0 && errno == EINTR);
        if (w < 0) break;
        udp->state |= U_SEND_EACH;
    }
    return sent > 0 ? sent : -1;
}

/* Writes the queue with sendmmsg until it is empty or the socket is full. */
static void send_queue(lull_udp *udp) {
    struct mmsghdr msgs[SEND_BATCH];
    struct iovec iov[SEND_BATCH];
    char ctl[SEND_BATCH][CMSG_SPACE(sizeof(uint16_t))];
    while (udp->head && !(udp->state & U_CLOSED)) {
        lull_datagram *req = udp->head;
        if (segments(udp, req) > 1 && (udp->state & U_NO_GSO)) {
            if (!split_out(udp, req)) return;
            continue;
        }
        int n = 0;
        for (lull_datagram *r = req; r && n < SEND_BATCH; r = r->next) {
            if (segments(udp, r) > 1 && (udp->state & U_NO_GSO)) break;
            fill_msg(udp, r, &msgs[n], &iov[n], ctl[n]);
            n++;
        }
        int sent = send_some(udp, msgs, (unsigned)n);
        udp->send_calls++;
        if (sent < 0) {
            int err = errno;
            if (err == EAGAIN) {
                udp->state |= U_BLOCKED;
                set_interest(udp);
                return;
            }
            if (gso_refused(udp, req, err)) continue;
            if (err == EMSGSIZE && segments(udp, req) > 1) {
                /* One GSO message is one IP packet's payload at most
                 * (65507 bytes): a longer one within the 64 segments
                 * lull_udp_send accepted leaves segment by segment. */
                if (!split_out(udp, req)) return;
                continue;
            }
            finish(udp, req, -err); /* the first message's own error */
            continue;
        }
        for (int i = 0; i < sent; i++) {
            udp->sent += segments(udp, udp->head);
            finish_one(udp, udp->head, 0);
        }
        if (sent > 0) post_event(udp); /* once a call, not a datagram */
    }
    if (udp->state & U_BLOCKED) {
        udp->state &= ~U_BLOCKED;
        set_interest(udp);
    }
}

static void flush_task(lull_task *t) {
    lull_udp *udp = LULL_CONTAINER_OF(t, lull_udp, flush);
    if (inherited(udp)) adopt_forked(udp);
    if (has_socket(udp)) send_queue(udp);
}

/* Later turn: the results of finished sends, then, after a close, the
 * close callback. A callback may send again (those wait for the next
 * flush) or close the handle (the rest are then cancelled, in this turn). */
static void event_task(lull_task *t) {
    lull_udp *udp = LULL_CONTAINER_OF(t, lull_udp, event);
    /* A close made by one of these callbacks gets its own later turn: the
     * close callback never runs in the turn of the call that closed. */
    bool closed_before = udp->state & U_CLOSED;
    if ((udp->state & (U_RPEND | U_READING)) == (U_RPEND | U_READING)) {
        udp->state &= ~U_RPEND;
        read_datagrams(udp, false); /* the kept rest, then the socket */
        if (udp->state & U_CLOSED) closed_before = false;
    }
    udp->state &= ~U_RPEND;
    while (udp->done) {
        lull_datagram *req = udp->done;
        udp->done = req->next;
        if (!udp->done) udp->done_tail = NULL;
        req->next = NULL;
        req->udp = NULL; /* no longer in flight */
        if (req->cb) req->cb(req, req->status);
    }
    if (!(udp->state & U_CLOSED)) return;
    if (!closed_before) {
        lull_task_post(udp->loop, &udp->event);
        return;
    }
    free(udp->rbuf);
    free(udp->rmeta);
    udp->rbuf = NULL;
    udp->rmeta = NULL;
    lull_udp_close_fn fn = udp->on_close;
    udp->on_close = NULL;
    udp->state &= ~U_INIT; /* the caller's again */
    lull__registry_remove(&udp->loop->udps, udp);
    lull__inuse_remove(udp);
    if (fn) fn(udp);
}

/* ------------------------------------------------------------- receives */

static int make_recv_buffer(lull_udp *udp) {
    unsigned n = udp->recv_batch;
    size_t slot = udp->max_datagram;
    udp->rbuf = malloc(slot * n);
    size_t meta = sizeof(recv_meta) +
                  n * (sizeof(struct mmsghdr) + sizeof(struct iovec) +
                       sizeof(struct sockaddr_storage) + SLOT_CONTROL);
    udp->rmeta = calloc(1, meta);
    if (!udp->rbuf || !udp->rmeta) {
        free(udp->rbuf);
        free(udp->rmeta);
        udp->rbuf = udp->rmeta = NULL;
        return -ENOMEM;
    }
    recv_meta *m = udp->rmeta;
    char *p = (char *)(m + 1);
    m->from = (struct sockaddr_storage *)p;
    p += n * sizeof(struct sockaddr_storage);
    m->msgs = (struct mmsghdr *)p;
    p += n * sizeof(struct mmsghdr);
    m->iov = (struct iovec *)p;
    p += n * sizeof(struct iovec);
    m->ctl = (char(*)[SLOT_CONTROL])p;
    udp->rnext = udp->rgot = 0;
    udp->roff = 0;
    prepare_slots(udp, 0, n);
    return 0;
}

int lull_udp_recv_start(lull_udp *udp, lull_udp_recv_fn fn) {
    if (!usable(udp) || !fn || forgotten(udp)) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(udp->loop);
    if (!has_socket(udp)) return -EBADF;
    if (!udp->rbuf) {
        int rc = make_recv_buffer(udp);
        if (rc < 0) return rc;
    }
    udp->on_recv = fn;
    if (udp->state & U_READING) return 0;
    udp->state |= U_READING;
    int rc = set_interest(udp);
    if (rc < 0) {
        udp->state &= ~U_READING;
        return rc;
    }
    /* What a recv_stop left of the last batch comes first, in a later
     * turn (never inside this call): datagrams, or an error owed after
     * them. */
    if (udp->rnext < udp->rgot || ((recv_meta *)udp->rmeta)->late) {
        udp->state |= U_RPEND;
        if (!lull_task_pending(&udp->event))
            lull_task_post(udp->loop, &udp->event);
    }
    return 0;
}

int lull_udp_recv_stop(lull_udp *udp) {
    if (!udp || !(udp->state & U_INIT)) return -EINVAL;
    if (!(udp->state & U_READING)) return 0;
    udp->state &= ~U_READING;
    if (udp->state & U_CLOSED) return 0;
    return set_interest(udp);
}

/* The GRO segment size the kernel reported for message m, or 0. */
static size_t gro_size(struct msghdr *h) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c)) {
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            int v;
            memcpy(&v, CMSG_DATA(c), sizeof v);
            return v > 0 ? (size_t)v : 0;
        }
    }
    return 0;
}

/* Delivers what is left of the last batch, slot by slot (a slot GRO
 * filled is split into its datagrams). The position moves before each
 * call, so a recv_stop inside it keeps exactly the rest. False when a
 * callback closed the handle or stopped reading. */
static bool deliver_batch(lull_udp *udp, bool *closed) {
    recv_meta *meta = udp->rmeta;
    if (!(udp->state & U_GRO) && udp->roff == 0) {
        /* Without GRO a slot is one datagram: no segment to cut, and the
         * buffer and its stride are read once, not after every callback
         * (one that closes keeps them until its close completes). */
        const unsigned char *rbuf = udp->rbuf;
        size_t stride = udp->max_datagram;
        while (udp->rnext < udp->rgot) {
            unsigned i = udp->rnext++;
            const struct mmsghdr *m = &meta->msgs[i];
            unsigned flags =
                (m->msg_hdr.msg_flags & MSG_TRUNC) ? LULL_UDP_TRUNCATED : 0;
            /* A sender without an address (an unnamed Unix socket): the
             * kernel writes none, and the slot still holds the one before. */
            if (m->msg_hdr.msg_namelen == 0)
                meta->from[i].ss_family = AF_UNSPEC;
            udp->received++;
            udp->on_recv(udp, 0, rbuf + (size_t)i * stride, m->msg_len,
                         (const struct sockaddr *)&meta->from[i], flags);
            if (*closed || !(udp->state & U_READING)) return false;
        }
        return true;
    }
    while (udp->rnext < udp->rgot) {
        unsigned i = udp->rnext;
        struct mmsghdr *m = &meta->msgs[i];
        const unsigned char *buf = udp->rbuf + (size_t)i * udp->max_datagram;
        const struct sockaddr *from = (const struct sockaddr *)&meta->from[i];
        size_t len = m->msg_len;
        unsigned flags =
            (m->msg_hdr.msg_flags & MSG_TRUNC) ? LULL_UDP_TRUNCATED : 0;
        if (m->msg_hdr.msg_namelen == 0) meta->from[i].ss_family = AF_UNSPEC;
        size_t seg = (udp->state & U_GRO) ? gro_size(&m->msg_hdr) : 0;
        if (!seg || seg >= len) seg = len;
        bool last;
        do {
            size_t off = udp->roff;
            size_t n = len - off < seg ? len - off : seg;
            udp->roff += n;
            last = udp->roff >= len; /* a zero-length datagram too */
            if (last) {
                udp->roff = 0;
                udp->rnext++;
            }
            udp->received++;
            udp->on_recv(udp, 0, buf + off, n, from, flags);
            if (*closed || !(udp->state & U_READING)) return false;
        } while (!last);
    }
    return true;
}

/* Sets up the headers of slots [from, to) for a recvmmsg, whole: at the
 * buffer's allocation, and after a failed call (rare). */
static void prepare_slots(lull_udp *udp, unsigned from, unsigned to) {
    recv_meta *meta = udp->rmeta;
    bool gro = udp->state & U_GRO;
    for (unsigned i = from; i < to; i++) {
        struct mmsghdr *m = &meta->msgs[i];
        meta->iov[i].iov_base = udp->rbuf + (size_t)i * udp->max_datagram;
        meta->iov[i].iov_len = udp->max_datagram;
        memset(&m->msg_hdr, 0, sizeof m->msg_hdr);
        m->msg_hdr.msg_name = &meta->from[i];
        m->msg_hdr.msg_namelen = sizeof meta->from[i];
        m->msg_hdr.msg_iov = &meta->iov[i];
        m->msg_hdr.msg_iovlen = 1;
        if (gro) {
            m->msg_hdr.msg_control = meta->ctl[i];
            m->msg_hdr.msg_controllen = sizeof meta->ctl[i];
        }
    }
}

/* Before the next recvmmsg: a call writes back, of the headers of the
 * slots it filled and of no others, only the lengths of the sender's
 * address and of the control data (and msg_flags, msg_len: outputs), so
 * only those two are set again, and only for the last call's slots (a
 * batch of 2 costs 2, not recv_batch). */
static void rearm_slots(lull_udp *udp) {
    recv_meta *meta = udp->rmeta;
    unsigned n = udp->rgot;
    for (unsigned i = 0; i < n; i++)
        meta->msgs[i].msg_hdr.msg_namelen = sizeof meta->from[i];
    if (udp->state & U_GRO)
        for (unsigned i = 0; i < n; i++)
            meta->msgs[i].msg_hdr.msg_controllen = sizeof meta->ctl[i];
}

/* Fills slots from the socket as recvmmsg does, with one recvmsg each:
 * for a process whose seccomp filter refuses recvmmsg. The count read, or
 * -1 and errno when none was; an error met after the first datagram is
 * left in *late, to be reported after them (recvmmsg keeps it in the
 * socket for the next call, which user space cannot). */
static int recv_each(lull_udp *udp, int *late) {
    struct mmsghdr *msgs = ((recv_meta *)udp->rmeta)->msgs;
    unsigned got = 0;
    while (got < udp->recv_batch) {
        ssize_t n;
        do {
            n = recvmsg(udp->io.fd, &msgs[got].msg_hdr, MSG_DONTWAIT);
        } while (n < 0 && errno == EINTR);
        if (n < 0) break;
        msgs[got++].msg_len = (unsigned)n;
    }
    if (got == 0) return -1;
    if (got < udp->recv_batch && errno != EAGAIN) *late = errno;
    return (int)got;
}

/* One batch: recvmmsg, or recvmsg a datagram at a time where a seccomp
 * filter refuses recvmmsg (found at the first refusal, which recvmsg then
 * answers instead: a recvmsg refused too is the error reported). */
static int recv_some(lull_udp *udp, int *late) {
    *late = 0;
    if (!(udp->state & U_RECV_EACH)) {
        int got;
        do {
            got = recvmmsg(udp->io.fd, ((recv_meta *)udp->rmeta)->msgs,
                           udp->recv_batch, MSG_DONTWAIT, NULL);
        } while (got < 0 && errno == EINTR);
        if (got >= 0 || !refused(errno)) return got;
    }
    int got = recv_each(udp, late);
    if (got >= 0 || !refused(errno)) udp->state |= U_RECV_EACH;
    return got;
}

/* Delivers what a stopped read left, then reads up to RECV_ROUNDS
 * batches. hangup: the readiness said the read side is shut down (a
 * datagram socket reports it for nothing else). False when a recv
 * callback closed the handle. */
static bool read_datagrams(lull_udp *udp, bool hangup) {
    bool closed = false;
    recv_meta *meta = udp->rmeta;
    udp->closed_guard = &closed;
    if (!deliver_batch(udp, &closed)) goto out;
    /* What a recv_stop in the last batch kept: its datagrams came first. */
    int kept = meta->late;
    meta->late = 0;
    for (int round = 0; round < RECV_ROUNDS; round++) {
        int late = 0, got = 0, err = kept;
        kept = 0;
        if (!err) {
            rearm_slots(udp);
            got = recv_some(udp, &late);
            err = got < 0 ? errno : late;
        }
        if (got > 0) {
            udp->recv_calls++;
            udp->rnext = 0;
            udp->rgot = (unsigned)got;
            udp->roff = 0;
            if (!deliver_batch(udp, &closed)) {
                /* Stopped: the error is owed after the rest of the batch
                 * (recv_each took it from the socket, which would have
                 * kept it for the next call). Closed: nothing more is. */
                if (!closed) meta->late = late;
                break;
            }
            if (!late && (unsigned)got < udp->recv_batch)
                break; /* the socket is empty */
        }
        if (err) {
            /* Shut down for reading (shutdown(SHUT_RD) by whoever holds
             * the socket; Linux sets it even where the call fails on an
             * unconnected socket) and empty: the socket polls readable
             * for ever with nothing to read, so receiving ends, told as
             * -ESHUTDOWN, or the loop would wake at every iteration. */
            if (err == EAGAIN && !hangup) break;
            if (err == EAGAIN) err = ESHUTDOWN;
            /* An error the socket carries (an ICMP error on a connected
             * socket, most often): reported, and reading goes on. The
             * call may have written any slot's header: all are set up
             * again (rare). */
            prepare_slots(udp, 0, udp->recv_batch);
            /* The fd closed behind the handle (EBADF) or its number now
             * naming another file (ENOTSOCK), its read side shut down
             * (ESHUTDOWN, above), or recvmsg refused by a
             * seccomp filter as well: no read can work again, and the
             * registration (a dup or a forked child's copy keeps it)
             * goes on reporting. Receiving ends after the report, or it
             * would be made at every iteration for ever. */
            bool gone = err == EBADF || err == ENOTSOCK || err == ESHUTDOWN ||
                        refused(err);
            if (gone) {
                udp->state &= ~U_READING;
                (void)set_interest(udp);
            }
            udp->on_recv(udp, -err, NULL, 0, NULL, 0);
            if (gone || closed || !(udp->state & U_READING)) break;
            continue;
        }
        if (got == 0) break;
    }
out:
    if (!closed) udp->closed_guard = NULL;
    return !closed;
}

/* Empties the socket's error queue, which a socket given with IP_RECVERR
 * (or IPV6_RECVERR, or one asking for transmit timestamps) fills: the
 * queue polls EPOLLERR until it is read with MSG_ERRQUEUE, so left there
 * it would wake the loop for ever. Its ICMP errors were reported already
 * through the socket's pending error (a recv says it, or the next send),
 * as on a socket without the option: the entries are dropped. Called
 * after the read, since taking an entry clears that pending error. */
static void drain_errqueue(lull_udp *udp) {
    unsigned char byte;
    char ctl[512];
    for (int i = 0; i < ERRQUEUE_ROUNDS; i++) {
        struct iovec iov = {&byte, sizeof byte};
        struct msghdr h = {.msg_iov = &iov,
                           .msg_iovlen = 1,
                           .msg_control = ctl,
                           .msg_controllen = sizeof ctl};
        if (recvmsg(udp->io.fd, &h, MSG_ERRQUEUE | MSG_DONTWAIT) < 0 &&
            errno != EINTR)
            return; /* EAGAIN: empty */
    }
}

static void on_io(lull_io *io, int events) {
    lull_udp *udp = LULL_CONTAINER_OF(io, lull_udp, io);
    if (inherited(udp)) adopt_forked(udp);
    if ((events & (LULL_WRITABLE | LULL_ERROR)) && (udp->state & U_BLOCKED)) {
        udp->state &= ~U_BLOCKED;
        set_interest(udp);
        send_queue(udp);
    }
    if ((udp->state & U_READING) &&
        (events & (LULL_READABLE | LULL_ERROR | LULL_HANGUP)) &&
        !read_datagrams(udp, events & LULL_HANGUP))
        return; /* closed inside a recv callback: not looked at again */
    if ((events & LULL_ERROR) && has_socket(udp)) drain_errqueue(udp);
}

/* ---------------------------------------------------------------- close */

int lull_udp_close(lull_udp *udp, lull_udp_close_fn fn) {
    if (!udp || !(udp->state & U_INIT)) return -EINVAL;
    if (!(udp->state & U_CLOSED) && !lull__inuse_has(udp)) {
        /* Left open without a socket by a lull_loop_free that forgot it:
         * its loop is freed memory, and no turn is left to run fn. It
         * held nothing: the caller's again, as after a completed close. */
        udp->state &= ~U_INIT;
        return 0;
    }
    LULL_ASSERT_LOOP_THREAD(udp->loop);
    if (udp->state & U_CLOSED) return 0;
    /* One last send of the queue, as far as the socket takes it now, as
     * a stream's close writes once more: a notice sent just before the
     * close (a last "done") leaves, as it would have with libuv, which
     * sends at once. What is left is cancelled below. A forked copy
     * sends nothing of what the parent queued (adopt_forked). */
    if (inherited(udp)) adopt_forked(udp);
    if (udp->head && has_socket(udp)) send_queue(udp);
    udp->state |= U_CLOSED;
    udp->state &= ~(U_READING | U_BLOCKED);
    udp->on_close = fn;
    if (udp->closed_guard) {
        *udp->closed_guard = true;
        udp->closed_guard = NULL;
    }
    lull_task_cancel(&udp->flush);
    if (has_socket(udp)) {
        lull_io_stop(&udp->io);
        close(udp->io.fd);
        udp->io.fd = -1;
        udp->loop->handles--;
    }
    while (udp->head)
        finish(udp, udp->head, -ECANCELED);
    if (!lull_task_pending(&udp->event)) lull_task_post(udp->loop, &udp->event);
    return 0;
}

/* -------------------------------------------------------------- options */

static int set_int(lull_udp *udp, int level, int name, int v) {
    if (!usable(udp)) return -EINVAL;
    if (!has_socket(udp)) return -EBADF;
    return setsockopt(udp->io.fd, level, name, &v, sizeof v) == 0 ? 0 : -errno;
}

/* The option for the socket's family: IPv4's, or IPv6's. */
static int set_by_family(lull_udp *udp, int v4name, int v6name, int v) {
    if (!usable(udp)) return -EINVAL;
    if (!has_socket(udp)) return -EBADF;
    int family = socket_family(udp);
    if (family < 0) return family;
    return family == AF_INET6 ? set_int(udp, IPPROTO_IPV6, v6name, v)
                              : set_int(udp, IPPROTO_IP, v4name, v);
}

int lull_udp_set_broadcast(lull_udp *udp, bool on) {
    return set_int(udp, SOL_SOCKET, SO_BROADCAST, on);
}

int lull_udp_set_ttl(lull_udp *udp, int ttl) {
    if (ttl < 1 || ttl > 255) return -EINVAL;
    return set_by_family(udp, IP_TTL, IPV6_UNICAST_HOPS, ttl);
}

int lull_udp_set_multicast_ttl(lull_udp *udp, int ttl) {
    if (ttl < 0 || ttl > 255) return -EINVAL;
    return set_by_family(udp, IP_MULTICAST_TTL, IPV6_MULTICAST_HOPS, ttl);
}

int lull_udp_set_multicast_loop(lull_udp *udp, bool on) {
    return set_by_family(udp, IP_MULTICAST_LOOP, IPV6_MULTICAST_LOOP, on);
}

/* An IPv6 interface by name (or a number), 0 for NULL; -EINVAL if none,
 * or the errno of the socket its name's lookup needed (-EMFILE ...). */
static int v6_index(const char *iface, unsigned *out) {
    *out = 0;
    if (!iface) return 0;
    uint32_t index;
    int rc = lull__if_index(iface, &index);
    if (rc < 0) return rc == -ENODEV ? -EINVAL : rc;
    *out = index;
    return 0;
}

int lull_udp_set_multicast_interface(lull_udp *udp, const char *iface) {
    if (!usable(udp)) return -EINVAL;
    if (!has_socket(udp)) return -EBADF;
    int family = socket_family(udp);
    if (family < 0) return family;
    if (family == AF_INET6) {
        unsigned idx;
        int rc = v6_index(iface, &idx);
        if (rc < 0) return rc;
        return set_int(udp, IPPROTO_IPV6, IPV6_MULTICAST_IF, (int)idx);
    }
    struct in_addr a = {.s_addr = htonl(INADDR_ANY)};
    if (iface && inet_pton(AF_INET, iface, &a) != 1) return -EINVAL;
    return setsockopt(udp->io.fd, IPPROTO_IP, IP_MULTICAST_IF, &a, sizeof a) ==
                   0
               ? 0
               : -errno;
}

int lull_udp_set_membership(lull_udp *udp, const char *group, const char *iface,
                            bool join) {
    if (!usable(udp) || !group) return -EINVAL;
    if (!has_socket(udp)) return -EBADF;
    struct ip_mreqn m4 = {0};
    if (inet_pton(AF_INET, group, &m4.imr_multiaddr) == 1) {
        m4.imr_address.s_addr = htonl(INADDR_ANY);
        if (iface && inet_pton(AF_INET, iface, &m4.imr_address) != 1)
            return -EINVAL;
        int opt = join ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP;
        return setsockopt(udp->io.fd, IPPROTO_IP, opt, &m4, sizeof m4) == 0
                   ? 0
                   : -errno;
    }
    struct ipv6_mreq m6 = {0};
    if (inet_pton(AF_INET6, group, &m6.ipv6mr_multiaddr) != 1) return -EINVAL;
    int rc = v6_index(iface, &m6.ipv6mr_interface);
    if (rc < 0) return rc;
    int opt = join ? IPV6_ADD_MEMBERSHIP : IPV6_DROP_MEMBERSHIP;
    return setsockopt(udp->io.fd, IPPROTO_IPV6, opt, &m6, sizeof m6) == 0
               ? 0
               : -errno;
}
