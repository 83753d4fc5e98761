/* Dialing by name: a TCP connect to host:port as RFC 8305 ("Happy
 * Eyeballs") describes, built on the public API (a lookup on the pool,
 * fd watchers, a timer, lull_stream_open for the winner).
 *
 * Owns: its lookup while it runs (a block of its own, let go by a
 * cancel or a timeout, see `resolving`), the dial's attempts (non-blocking
 * sockets, each watched for writability in io[]), the resolved list and its
 * interleaved order, and the timer that starts the next attempt or ends the
 * dial. The stream the caller gave is untouched until the callback's turn; then
 * lull_stream_open takes the winning socket, right before the callback
 * (so nothing is read before its owner could set its callbacks). One
 * thread: the loop's.
 *
 * Order of attempts: getaddrinfo's order (RFC 6724's preference), with
 * the families interleaved from the first one's (v6, v4, v6, v4 ...).
 * An attempt starts when the previous one fails, or attempt_delay_ns after
 * it started, whichever is first; several stay in flight, up to
 * LULL_DIAL_MAX_ATTEMPTS. The first to connect wins; the others are
 * closed. When every address failed, the dial fails with the last error.
 *
 * The callback runs once, from the `done` task (a later turn than the
 * call that decided it: a start, a cancel, a connect result).
 *
 * The five rows (README, "The contracts"), for a dial:
 *   Trigger                 the lookup's completion; an attempt's socket
 *                           becoming writable; the timer
 *   Source of truth         the attempts' sockets (SO_ERROR)
 *   Pending-work predicate  an address not yet tried, or an attempt in
 *                           flight
 *   Next deadline or retry  the next attempt's start, or the dial's
 *                           timeout, only while dialing
 *   Quiet condition         done: no socket, no timer, no task */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"
#include "lull.h"
#include "own_name.h"
#include "pool.h"
#include "stream.h"

/* RFC 8305's recommended Connection Attempt Delay. */
#define ATTEMPT_DELAY_DEFAULT_NS 250000000ull

/* lull_dial.state */
#define D_DIALING   0x1u /* started, callback not yet run */
#define D_RESOLVING 0x2u /* the lookup is on the pool */
#define D_DECIDED   0x4u /* status set; the done task runs the callback */
#define D_USER_LIST 0x8u /* res is the caller's (lull_dial_start_addrs) */

/* A lookup on the pool, apart from the dial: a lookup already running
 * cannot be stopped, and a cancel or a timeout must not wait for a slow
 * resolver (getaddrinfo may take tens of seconds). Such a lookup is let go
 * (owner NULL): the dial decides at once, and the lookup frees itself and
 * its answer when it ends, on the pool's thread (drop_let_go), so that
 * neither the loop's run nor its free waits for the resolver either. It
 * holds what the pool reads (host, service), so the dial may be started
 * again, or freed, meanwhile. One allocation, as the copy of the host it
 * replaces. */
typedef struct resolving {
    lull_lookup lookup;
    lull_dial *owner; /* NULL once let go */
    char service[8];
    char host[]; /* d->host points here while the dial resolves */
} resolving;

static resolving *resolving_of(const lull_dial *d) {
    return (resolving *)(void *)(d->host - offsetof(resolving, host));
}

static void on_resolved(lull_lookup *req, int status, struct addrinfo *res);

/* A lookup let go ends on the pool's thread: its answer, if any, and the
 * block are freed there. */
static void drop_let_go(lull_work *w, int status) {
    (void)status;
    resolving *r = LULL_CONTAINER_OF(w, resolving, lookup.work);
    if (r->lookup.res) freeaddrinfo(r->lookup.res);
    free(r);
}
static void on_attempt(lull_io *io, int events);
static void on_timer(lull_timer *t);
static void on_done(lull_task *t);
LULL__OWN_NAME(on_timer, "lull_dial attempt timer", lull_dial, timer);
LULL__OWN_NAME(on_done, "lull_dial result turn", lull_dial, done);

static void close_attempt(lull_io *io) {
    if (io->fd < 0) return;
    lull_io_stop(io);
    close(io->fd);
    io->fd = -1;
}

static int in_flight(const lull_dial *d) {
    int n = 0;
    for (int i = 0; i < LULL_DIAL_MAX_ATTEMPTS; i++)
        n += d->io[i].fd >= 0;
    return n;
}

/* Releases everything the dial holds but the stream, and queues the
 * callback with status. */
static void decide(lull_dial *d, int status) {
    if (d->state & D_DECIDED) return;
    d->state |= D_DECIDED;
    d->status = status;
    for (int i = 0; i < LULL_DIAL_MAX_ATTEMPTS; i++)
        close_attempt(&d->io[i]);
    lull_timer_stop(&d->timer);
    /* A lookup still queued on the pool is cancelled: its callback comes
     * in a later turn and the dial's with it, so that a timeout or a
     * cancel is not held up behind the pool's other work. One already
     * running is let go (see resolving): nor behind a slow resolver. */
    if ((d->state & D_RESOLVING) &&
        lull_lookup_cancel(&resolving_of(d)->lookup) == 0)
        return;
    if (d->state & D_RESOLVING) {
        resolving *r = resolving_of(d);
        r->owner = NULL;
        /* Refused where its completion was posted already: it comes in
         * a later turn, and on_resolved drops it there. */
        (void)lull__work_let_go(&r->lookup.work, drop_let_go);
        d->host = NULL;
        d->state &= ~D_RESOLVING;
    }
    lull_task_post(d->loop, &d->done);
}

static void free_resolved(lull_dial *d) {
    if (d->res && !(d->state & D_USER_LIST)) freeaddrinfo(d->res);
    free(d->order);
    d->res = NULL;
    d->order = NULL;
    d->n = d->next = 0;
}

static int open_winner(lull_dial *d);

static void on_done(lull_task *t) {
    lull_dial *d = LULL_CONTAINER_OF(t, lull_dial, done);
    if (d->status == 0) d->status = open_winner(d);
    free_resolved(d);
    d->state = 0;
    d->fn(d, d->status); /* the struct is the caller's again */
}

/* now + ns, saturating: a huge timeout_ns or attempt_delay_ns means a
 * long time, where a wrapped sum came before now and fired at once. */
static uint64_t later(uint64_t now, uint64_t ns) {
    return ns > UINT64_MAX - now ? UINT64_MAX : now + ns;
}

/* Arms the timer for whichever comes first: the next attempt's start (when
 * addresses remain) or the dial's deadline. */
static void arm(lull_dial *d, bool attempt_pending) {
    uint64_t now = lull_loop_now(d->loop);
    uint64_t at = d->deadline;
    if (attempt_pending && d->next < d->n) {
        uint64_t next = later(now, d->attempt_delay_ns);
        if (!at || next < at) at = next;
    }
    if (!at) {
        lull_timer_stop(&d->timer);
        return;
    }
    lull_timer_start(&d->timer, at > now ? at - now : 0, 0);
}

/* The winner: every other attempt closed, its socket kept, unwatched, in
 * io[0] for the done task, which opens the stream on it (open_winner). */
static void win(lull_dial *d, lull_io *io) {
    int fd = io->fd;
    lull_io_stop(io);
    io->fd = -1;
    decide(d, 0);
    d->io[0].fd = fd;
}

/* In the callback's turn, right before it: the stream takes the winning
 * socket. Not earlier: the stream would read at once, and a busy loop
 * may run ready fds before this task, so a server that speaks first
 * would be read into a stream whose owner has set no callbacks yet (the
 * bytes dropped, its EOF closing it untold). The status: 0, or why not. */
static int open_winner(lull_dial *d) {
    int fd = d->io[0].fd;
    d->io[0].fd = -1;
    /* The stream was free at the start, but another dial given it (or its
     * owner) may have opened it since: -EBUSY, as the start would say. */
    if (lull__stream_live(d->loop, d->stream)) {
        close(fd);
        return -EBUSY;
    }
    /* TCP_NODELAY is lull_stream_open's to set: it leaves Nagle on when
     * opts->stream asks for LULL_STREAM_NAGLE, which setting it here first
     * overrode (the open never clears it). lull_stream_open owns fd even
     * on failure. */
    return lull_stream_open(d->loop, d->stream, fd,
                            d->has_opts ? &d->opts : NULL);
}

static void start_attempts(lull_dial *d);

/* One attempt failed: the next starts now, not at the timer. */
static void attempt_failed(lull_dial *d, lull_io *io, int err) {
    close_attempt(io);
    d->status = err;
    start_attempts(d);
}

/* Starts the next address's connect; false when none could start (the
 * caller then decides). */
static bool start_one(lull_dial *d) {
    while (d->next < d->n) {
        int slot = -1;
        for (int i = 0; i < LULL_DIAL_MAX_ATTEMPTS && slot < 0; i++)
            if (d->io[i].fd < 0) slot = i;
        if (slot < 0) return true; /* all slots busy: wait for one */
        struct addrinfo *ai = d->order[d->next++];
        int fd = socket(ai->ai_family,
                        SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        /* Never the program's closed stdio (lull__fd_above_stdio). */
        fd = fd < 0 ? -errno : lull__fd_above_stdio(fd);
        if (fd < 0) {
            d->status = fd;
            continue;
        }
        d->attempts++;
        lull_io *io = &d->io[slot];
        lull__io_setup(d->loop, io, fd, on_attempt);
        io->data = d;
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc == 0 || errno == EINPROGRESS) {
            rc = lull_io_start(io, LULL_WRITABLE);
            if (rc == 0) return true;
        } else {
            rc = -errno;
        }
        close(fd);
        io->fd = -1;
        d->status = rc;
    }
    return false;
}

static void start_attempts(lull_dial *d) {
    if (d->state & D_DECIDED) return;
    if (start_one(d)) {
        /* Every slot taken: the next address waits for an attempt to
         * fail, which its socket says. A timer for it would only find the
         * slots still full, every attempt delay, as long as the connects
         * hang (minutes of SYN retries). */
        arm(d, in_flight(d) < LULL_DIAL_MAX_ATTEMPTS);
        return;
    }
    if (in_flight(d) == 0)
        decide(d, d->status ? d->status : -EHOSTUNREACH);
    else
        arm(d, false);
}

static void on_attempt(lull_io *io, int events) {
    lull_dial *d = io->data;
    (void)events;
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(io->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err == 0)
        win(d, io);
    else
        attempt_failed(d, io, -err);
}

static void on_timer(lull_timer *t) {
    lull_dial *d = LULL_CONTAINER_OF(t, lull_dial, timer);
    if (d->deadline && lull_loop_now(d->loop) >= d->deadline) {
        decide(d, -ETIMEDOUT);
        return;
    }
    start_attempts(d);
}

/* An address the dial may try: IPv4 or IPv6, of `family` when one was
 * asked for (0: either). */
static bool usable(const struct addrinfo *ai, int family) {
    return (ai->ai_family == AF_INET || ai->ai_family == AF_INET6) &&
           (!family || ai->ai_family == family);
}

/* getaddrinfo's order, the families interleaved from the first one's;
 * only `family` when one was asked for (a list the caller resolved: a
 * lookup asked for it already). */
static int interleave(lull_dial *d, struct addrinfo *res, int family) {
    int n = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
        n += usable(ai, family);
    if (!n) return 0;
    d->order = malloc(sizeof *d->order * (size_t)n);
    if (!d->order) return -ENOMEM;
    int first = -1, k = 0;
    struct addrinfo *a = res, *b = res; /* next of the first family, other */
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
        if (usable(ai, family)) {
            first = ai->ai_family;
            break;
        }
    /* One family asked for: no other to interleave (-1 is none). */
    int other = family ? -1 : first == AF_INET ? AF_INET6 : AF_INET;
    for (bool take_first = true; k < n; take_first = !take_first) {
        struct addrinfo **p = take_first ? &a : &b;
        while (*p && (*p)->ai_family != (take_first ? first : other))
            *p = (*p)->ai_next;
        if (*p) {
            d->order[k++] = *p;
            *p = (*p)->ai_next;
        }
    }
    d->n = n;
    return n;
}

/* sys_errno: errno with EAI_SYSTEM. A lookup that failed for the
 * process's own want (out of fds, of memory) says so, as the numeric
 * host's socket() would: -EHOSTUNREACH is for a name without an address. */
static void resolved(lull_dial *d, int status, int sys_errno,
                     struct addrinfo *res, int family) {
    d->state &= ~D_RESOLVING;
    if (d->state & D_DECIDED) { /* cancelled while queued on the pool */
        if (res) freeaddrinfo(res);
        lull_task_post(d->loop, &d->done);
        return;
    }
    if (status == -ECANCELED) {
        /* Not this dial's cancel (that decided first, above): the pool
         * was closed (or is a fork()ed copy) before a thread took the
         * lookup. The pool's refusal, as a start on it would say; not
         * -ECANCELED, which says the caller cancelled. */
        decide(d, -ESHUTDOWN);
        return;
    }
    if (status != 0) {
        d->gai_error = status;
        int err = -EHOSTUNREACH;
        if (status == EAI_MEMORY) err = -ENOMEM;
        if (status == EAI_SYSTEM && sys_errno > 0) err = -sys_errno;
        decide(d, err);
        return;
    }
    d->res = res;
    int n = interleave(d, res, family);
    if (n < 0) {
        decide(d, n);
        return;
    }
    if (n == 0) {
        d->gai_error = EAI_NONAME;
        decide(d, -EHOSTUNREACH);
        return;
    }
    start_attempts(d);
}

static void on_resolved(lull_lookup *req, int status, struct addrinfo *res) {
    resolving *r = LULL_CONTAINER_OF(req, resolving, lookup);
    lull_dial *d = r->owner;
    int sys_errno = req->sys_errno;
    free(r);
    if (!d) { /* let go: the dial has ended */
        if (res) freeaddrinfo(res);
        return;
    }
    d->host = NULL;
    resolved(d, status, sys_errno, res, 0);
}

/* What both starts share: checks, then the dial's state, timeout armed. */
static int begin(lull_loop *loop, lull_dial *d, lull_stream *s,
                 const lull_dial_options *opts, lull_dial_fn fn) {
    if (!loop || !d || !s || !fn) return -EINVAL;
    if (opts && opts->family != 0 && opts->family != AF_INET &&
        opts->family != AF_INET6)
        return -EINVAL;
    /* Stream options no TCP stream takes: refused now, not after a
     * connect. */
    int rc = lull__stream_options_check(opts ? opts->stream : NULL, AF_INET);
    if (rc < 0) return rc;
    if (d->state & D_DIALING) return -EBUSY;
    /* A stream still open, or closed with its on_close yet to run, would
     * be overwritten under the loop's feet. */
    if (lull__stream_live(loop, s)) return -EBUSY;
    void *data = d->data;
    memset(d, 0, sizeof *d);
    d->data = data;
    d->loop = loop;
    d->stream = s;
    d->fn = fn;
    for (int i = 0; i < LULL_DIAL_MAX_ATTEMPTS; i++)
        d->io[i].fd = -1;
    lull_timer_init(loop, &d->timer, on_timer);
    lull_task_init(&d->done, on_done);
    d->attempt_delay_ns = opts && opts->attempt_delay_ns
                              ? opts->attempt_delay_ns
                              : ATTEMPT_DELAY_DEFAULT_NS;
    if (opts && opts->stream) {
        d->opts = *opts->stream;
        d->has_opts = true;
    }
    d->state = D_DIALING;
    /* The stream's connect_timeout_ns, which a connect of that stream
     * honours, bounds the dial as timeout_ns does (the earlier of the
     * two): the dial is that stream's connect. lull_stream_open, which
     * takes the winner, has no connect to time. */
    uint64_t timeout = opts ? opts->timeout_ns : 0;
    uint64_t connect_ns = d->has_opts ? d->opts.connect_timeout_ns : 0;
    if (connect_ns && (!timeout || connect_ns < timeout)) timeout = connect_ns;
    if (timeout) {
        d->deadline = later(lull_loop_now(loop), timeout);
        arm(d, false);
    }
    return 0;
}

/* A start that failed after begin: nothing queued, the dial not started. */
static int abandon(lull_dial *d, int rc) {
    lull_timer_stop(&d->timer);
    if (d->host) free(resolving_of(d));
    d->host = NULL;
    d->state = 0;
    return rc;
}

int lull_dial_start(lull_loop *loop, lull_pool *pool, lull_dial *d,
                    lull_stream *s, const char *host, int port,
                    const lull_dial_options *opts, lull_dial_fn fn) {
    if (!host || !*host || port < 1 || port > 65535) return -EINVAL;
    int rc = begin(loop, d, s, opts, fn);
    if (rc < 0) return rc;
    snprintf(d->service, sizeof d->service, "%d", port);
    struct addrinfo hints = {.ai_family = opts ? opts->family : AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    /* A numeric host needs no pool: getaddrinfo answers without asking
     * anyone (and without blocking). */
    struct addrinfo numeric = hints, *res = NULL;
    numeric.ai_flags |= AI_NUMERICHOST;
    /* "[::1]" (a URL's form, which lull_stream_connect_tcp and the listen
     * calls take too) is the address inside; getaddrinfo knows no
     * brackets. 64: an IPv6 address (45) with a zone ("%" and a name of
     * up to 15). */
    char inside[64];
    const char *literal = host;
    size_t hl = strlen(host);
    if (hl > 2 && host[0] == '[' && host[hl - 1] == ']' &&
        hl - 2 < sizeof inside) {
        memcpy(inside, host + 1, hl - 2);
        inside[hl - 2] = '\0';
        literal = inside;
    }
    int gai = getaddrinfo(literal, d->service, &numeric, &res);
    /* A numeric host of the other family than asked for (EAI_ADDRFAMILY)
     * is decided here too: no lookup can give it an address, and "[::1]"
     * went to the name services as a name (a pool round trip, NSS). */
    if (gai == 0 || gai == EAI_ADDRFAMILY) {
        resolved(d, gai, 0, res, 0);
        return 0;
    }
    if (!pool && (rc = lull_pool_default(&pool)) < 0) return abandon(d, rc);
    size_t hlen = strlen(host) + 1;
    resolving *r = calloc(1, sizeof *r + hlen);
    if (!r) return abandon(d, -ENOMEM);
    r->owner = d;
    memcpy(r->service, d->service, sizeof r->service);
    memcpy(r->host, host, hlen);
    d->host = r->host;
    /* The pool reads the hints when it runs: they must outlive this call. */
    static const struct addrinfo by_family[] = {
        {.ai_family = AF_UNSPEC,
         .ai_socktype = SOCK_STREAM,
         .ai_flags = AI_NUMERICSERV},
        {.ai_family = AF_INET,
         .ai_socktype = SOCK_STREAM,
         .ai_flags = AI_NUMERICSERV},
        {.ai_family = AF_INET6,
         .ai_socktype = SOCK_STREAM,
         .ai_flags = AI_NUMERICSERV},
    };
    int k = hints.ai_family == AF_INET    ? 1
            : hints.ai_family == AF_INET6 ? 2
                                          : 0;
    rc = lull_lookup_start(loop, pool, &r->lookup, r->host, r->service,
                           &by_family[k], on_resolved);
    if (rc < 0) return abandon(d, rc);
    d->state |= D_RESOLVING;
    return 0;
}

int lull_dial_start_addrs(lull_loop *loop, lull_dial *d, lull_stream *s,
                          const struct addrinfo *list,
                          const lull_dial_options *opts, lull_dial_fn fn) {
    if (!list) return -EINVAL;
    int rc = begin(loop, d, s, opts, fn);
    if (rc < 0) return rc;
    d->state |= D_USER_LIST;
    resolved(d, 0, 0, (struct addrinfo *)list, opts ? opts->family : 0);
    return 0;
}

int lull_dial_cancel(lull_dial *d) {
    if (!d || !(d->state & D_DIALING)) return -EINVAL;
    if (d->state & D_DECIDED) return 0;
    /* A lookup already running finishes on the pool; its result is then
     * dropped (resolved, D_DECIDED). One not started never runs (decide). */
    decide(d, -ECANCELED);
    return 0;
}
