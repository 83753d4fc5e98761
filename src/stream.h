/* What the address modules (src/tcp.c, src/unix.c, src/dial.c) share with
 * the stream core (src/stream.c): they turn an address into a sockaddr, the
 * core does the rest; and what a module that sets up a stream of its own
 * (dial, src/tty.c, src/tls.c) asks of it. The core never includes them. */
#ifndef LULL_STREAM_H
#define LULL_STREAM_H

#include <sys/socket.h>

#include "internal.h"

/* Creates a listening socket of `family` bound to addr and starts
 * accepting into fn. 0 or a negative errno (nothing is left open). */
int lull__server_listen(lull_loop *loop, lull_server *srv, int family,
                        const struct sockaddr *addr, socklen_t len, int backlog,
                        lull_connection_fn fn);

/* Starts a non-blocking connect of s to addr; the result reaches fn in a
 * later turn. 0 or a negative errno (argument errors, socket()). */
int lull__stream_connect(lull_loop *loop, lull_stream *s, int family,
                         const struct sockaddr *addr, socklen_t len,
                         const lull_stream_options *opts, lull_connect_fn fn);

/* Whether opts fit a stream of a socket of `family`: 0, -EINVAL (unknown
 * flags) or -ENOTSUP (LULL_STREAM_FDS where no fd can pass). */
int lull__stream_options_check(const lull_stream_options *opts, int family);

/* Whether s is open, or closed with its on_close still queued, on any
 * loop (loop is the one asking): setting it up again would unlink nodes
 * that loop still holds. A lookup in the process's set of handles in use:
 * for set-up and checks, not a hot path. */
bool lull__stream_live(lull_loop *loop, const lull_stream *s);

/* s, set up (open or connecting), is part of another handle (a lull_tls's
 * socket), which alone ends it: lull_stream_detach refuses it (a debug
 * assert, else -EINVAL). Until its close. */
void lull__stream_own(lull_stream *s);

/* Whether s is a copy a forked child inherited: set up by another process
 * than its loop's, since lull_loop_fork. Its frames and its session (TLS)
 * are the parent's to write; the copy writes none of them. One compare. */
static inline bool lull__stream_inherited(const lull_stream *s) {
    return LULL_UNLIKELY(s->pid != (int)s->loop->pid);
}

#endif
