/* The frame interface (C6): the half every transport shares.
 *
 * Owns: the argument and state checks of lull_endpoint_send,
 * lull_endpoint_send_copy and lull_endpoint_close, so that every transport
 * refuses the same things with the same errno; the count of queued bytes and
 * the writable / drain crossing; the copy path's one allocation per frame. The
 * transport owns the queue, the delivery (or the writes) and the close
 * handshake, through lull_frame_ops and src/frame.h. One exception to the
 * indirection: lull_endpoint_send runs the loopback's sends inline, either
 * delivery (src/loopback.h), the in-process round trip being the hot path. And
 * the calls protocol code makes on the reading side (read_stop, read_start,
 * shutdown) go to the transport's own, picked by its ops table (control).
 * Also the framed wire format's read-buffer growth, which the byte-stream
 * transports (src/stream.c, src/tls.c) share.
 *
 * Invariants: a frame is in flight from an accepted send until
 * lull__frame_release; `queued` is the sum of the costs (lull__frame_cost:
 * the lengths, plus a framed stream's 4-byte headers) of the frames in
 * flight that this end sent and that are not yet delivered or written (a
 * released one never counts; 0 once it or its peer closed); writable means
 * open, peer open and queued < high_water; the drain callback runs once
 * for every time `queued` falls from at or above high_water to below it
 * while open, and never inside lull_endpoint_send. Loop thread only (the
 * transport asserts it). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "loopback.h"
#include "own_name.h"
#include "tls.h"

/* The mark a caller left unset: the default, or half of a max_queued set
 * below it, so that a producer that sends only while writable never
 * reaches the bound (at least 1: an empty queue is writable). */
static size_t default_high_water(size_t max_queued) {
    if (!max_queued || max_queued / 2 >= LULL_HIGH_WATER_DEFAULT)
        return LULL_HIGH_WATER_DEFAULT;
    return max_queued / 2 ? max_queued / 2 : 1;
}

void lull__endpoint_init(lull_endpoint *ep, const lull_frame_ops *ops,
                         size_t max_frame, size_t high_water,
                         size_t max_queued) {
    ep->ops = ops; /* `data` is the user's: left as it was */
    ep->on_frame = NULL;
    ep->on_drain = NULL;
    ep->on_close = NULL;
    ep->queued = 0;
    ep->max_frame = max_frame ? max_frame : LULL_FRAME_MAX_DEFAULT;
    ep->high_water = high_water ? high_water : default_high_water(max_queued);
    ep->max_queued = max_queued ? max_queued : LULL_MAX_QUEUED_NONE;
    ep->flags = (max_queued ? LULL__EP_BOUNDED : 0) |
                (ops == &lull__loopback_task_ops    ? LULL__EP_LOOPBACK_TASK
                 : ops == &lull__loopback_timer_ops ? LULL__EP_LOOPBACK_TIMER
                                                    : 0);
}

void lull_endpoint_set_callbacks(lull_endpoint *ep, lull_frame_fn on_frame,
                                 lull_drain_fn on_drain,
                                 lull_close_fn on_close) {
    if (!ep) return;
    ep->on_frame = on_frame;
    ep->on_drain = on_drain;
    ep->on_close = on_close;
    if (ep->ops == &lull__loopback_task_ops ||
        ep->ops == &lull__loopback_timer_ops)
        lull__loopback_callbacks_set(ep);
}

#define LULL__EP_NO_SEND (LULL__EP_CLOSED | LULL__EP_PEER_GONE)

static int check_send(const lull_endpoint *ep, const void *bytes, size_t len) {
    if (!ep || !ep->ops || (len > 0 && !bytes)) return -EINVAL;
    if (ep->flags & LULL__EP_NO_SEND) return -EPIPE;
    if (len > ep->max_frame) return -EMSGSIZE;
    return 0;
}

/* An accepted frame is in flight, unlinked, and counted as queued (its
 * cost: lull__frame_cost) until the transport delivers or writes it,
 * before it releases it. */
static inline void accept_frame_at(lull_endpoint *ep, lull_frame *frame,
                                   size_t cost) {
    frame->in_flight = true;
    frame->next = NULL;
    ep->queued += cost;
}

static inline void accept_frame(lull_endpoint *ep, lull_frame *frame) {
    accept_frame_at(ep, frame, lull__frame_cost(ep, frame->len));
}

/* A loopback end is never framed on a wire: a frame costs its length, with
 * no flag to test on the path the bare turn is measured against. Its link
 * is left as it was: a loopback inbox ends at its tail, whose `next` is
 * never read (src/loopback.h), and linking the frame behind another
 * writes it. */
static inline void accept_loopback_frame(lull_endpoint *ep, lull_frame *frame) {
    LULL_ASSERT(!(ep->flags & LULL__EP_FRAMED), "lull: a framed loopback end");
    frame->in_flight = true;
    ep->queued += frame->len;
}

/* The frame would take the queue past max_queued: refused, and the
 * endpoint closes with -ENOBUFS in a later turn, as Redis disconnects a
 * client past its output limit, so a producer that ignores
 * lull_endpoint_writable loses its connection, not its memory, and the
 * owner hears why. Sends are refused from here on. */
static int over_max_queued(lull_endpoint *ep) {
    ep->flags |= LULL__EP_PEER_GONE;
    ep->ops->fail(ep, -ENOBUFS);
    return -ENOBUFS;
}

/* lull_endpoint_send through the transport's ops: any transport but the
 * loopback. */
__attribute__((noinline)) static int send_by_ops(lull_endpoint *ep,
                                                 lull_frame *frame) {
    if (!ep->ops) return -EINVAL; /* never set up */
    accept_frame(ep, frame);
    ep->ops->send(ep, frame);
    return 0;
}

/* The send the fast path did not take: a refusal, in the documented order
 * of the checks, or an endpoint with a max_queued bound (LULL__EP_BOUNDED),
 * whose sends all come here so that the unbounded ones pay nothing for the
 * bound. */
__attribute__((noinline)) static int send_checked(lull_endpoint *ep,
                                                  lull_frame *frame) {
    if (!frame) return -EINVAL;
    int rc = check_send(ep, frame->bytes, frame->len);
    if (rc < 0) return rc;
    if (frame->in_flight) return -EBUSY;
    if (lull__frame_cost(ep, frame->len) > ep->max_queued - ep->queued)
        return over_max_queued(ep);
    return send_by_ops(ep, frame);
}

/* lull_endpoint_send past its frame checks, for any endpoint but an
 * unbounded, open loopback end: any other transport with nothing to refuse
 * and no bound, or a refusal or a bound (send_checked). Out of line, so
 * that the loopback's paths keep no stack frame; one test passes a
 * stream's send on. */
__attribute__((noinline)) static int send_other(lull_endpoint *ep,
                                                lull_frame *frame) {
    if (LULL_LIKELY(!(ep->flags & (LULL__EP_NO_SEND | LULL__EP_BOUNDED |
                                   LULL__EP_LOOPBACK_TIMER))))
        return send_by_ops(ep, frame);
    return send_checked(ep, frame);
}

int lull_endpoint_send(lull_endpoint *ep, lull_frame *frame) {
    /* One test for every refusal of the frame, so a send costs a few
     * compares. */
    if (__builtin_expect(!ep || !frame || frame->in_flight ||
                             frame->len > ep->max_frame ||
                             (!frame->bytes && frame->len),
                         0))
        return send_checked(ep, frame);
    /* The loopback's hand-over inline, not through an indirect call: its
     * round trip is what the bare turn is measured against. One compare
     * of the state bits tells a loopback end by task that is open, its
     * peer open, and unbounded (LULL__EP_LOOPBACK_TASK). */
    if (LULL_UNLIKELY(ep->flags != LULL__EP_LOOPBACK_TASK)) {
        /* One compare more tells a loopback end by zero-delay timer, open,
         * its peer open, unbounded (LULL__EP_LOOPBACK_TIMER alone): its
         * round trip is measured beside the task's. */
        if (ep->flags != LULL__EP_LOOPBACK_TIMER) return send_other(ep, frame);
        LULL_ASSERT(ep->ops == &lull__loopback_timer_ops,
                    "lull: a loopback end's state bits are not its "
                    "delivery's");
        accept_loopback_frame(ep, frame);
        return lull__loopback_send(LULL_CONTAINER_OF(ep, lull_loopback, ep),
                                   frame, LULL__CLAIM_TIMER0);
    }
    LULL_ASSERT(ep->ops == &lull__loopback_task_ops,
                "lull: a loopback end's state bits are not its delivery's");
    accept_loopback_frame(ep, frame);
    return lull__loopback_send(LULL_CONTAINER_OF(ep, lull_loopback, ep), frame,
                               LULL__CLAIM_TASK);
}

/* The copy path: one block holds the link and the bytes, freed on release. */
typedef struct copied {
    lull_frame frame;
    unsigned char bytes[];
} copied;

static void release_copy(lull_frame *frame) {
    free(LULL_CONTAINER_OF(frame, copied, frame));
}

int lull_endpoint_send_copy(lull_endpoint *ep, const void *bytes, size_t len) {
    int rc = check_send(ep, bytes, len);
    if (rc < 0) return rc;
    /* queued never exceeds max_queued: the subtraction cannot wrap. */
    if (lull__frame_cost(ep, len) > ep->max_queued - ep->queued)
        return over_max_queued(ep);
    /* max_frame may be lifted to SIZE_MAX: the block's size must not wrap. */
    if (len > SIZE_MAX - sizeof(copied)) return -ENOMEM;
    copied *c = malloc(sizeof *c + len);
    if (!c) return -ENOMEM;
    if (len) memcpy(c->bytes, bytes, len);
    c->frame =
        (lull_frame){.bytes = c->bytes, .len = len, .release = release_copy};
    rc = lull_endpoint_send(ep, &c->frame);
    if (rc < 0) free(c);
    return rc;
}

bool lull_endpoint_writable(const lull_endpoint *ep) {
    return ep && ep->ops && !(ep->flags & LULL__EP_NO_SEND) &&
           ep->queued < ep->high_water;
}

int lull_endpoint_close(lull_endpoint *ep, int reason) {
    if (!ep || !ep->ops) return -EINVAL;
    if (ep->flags & LULL__EP_CLOSED) return 0;
    /* Closed before the transport runs: a release callback it calls while
     * discarding frames sees a closed endpoint (sends fail, no drain). */
    ep->flags |= LULL__EP_CLOSED;
    ep->queued = 0;
    ep->ops->close(ep, reason);
    return 0;
}

/* The endpoint calls lull_frame_ops has no entry for, by transport
 * (src/frame.h). */
enum { READ_STOP, READ_START, SHUTDOWN };

static int control(lull_endpoint *ep, int what) {
    if (!ep || !ep->ops) return -EINVAL;
    if (ep->flags & LULL__EP_CLOSED) return -ENOTCONN;
    const lull_frame_ops *ops = ep->ops;
    if (ops == &lull__loopback_task_ops || ops == &lull__loopback_timer_ops)
        return what == SHUTDOWN ? lull__loopback_shutdown(ep)
                                : lull__loopback_read(ep, what == READ_START);
    if (ops == &lull__sim_ops) {
        lull_simconn *c = LULL_CONTAINER_OF(ep, lull_simconn, ep);
        return what == SHUTDOWN     ? lull_simconn_shutdown(c)
               : what == READ_START ? lull_simconn_read_start(c)
                                    : lull_simconn_read_stop(c);
    }
    if (ops == &lull__tls_ops)
        return what == SHUTDOWN ? lull__tls_shutdown(ep)
                                : lull__tls_read(ep, what == READ_START);
    lull_stream *s = LULL_CONTAINER_OF(ep, lull_stream, ep);
#ifndef NDEBUG
    const lull__own_name *own = lull__own_name_of((lull_any_fn)s->io.fn);
    LULL_ASSERT(own && strcmp(own->owner, "lull_stream") == 0,
                "lull: an endpoint of a transport src/frame.c does not know");
#endif
    return what == SHUTDOWN     ? lull_stream_shutdown(s)
           : what == READ_START ? lull_stream_read_start(s)
                                : lull_stream_read_stop(s);
}

int lull_endpoint_read_stop(lull_endpoint *ep) {
    return control(ep, READ_STOP);
}

int lull_endpoint_read_start(lull_endpoint *ep) {
    return control(ep, READ_START);
}

int lull_endpoint_shutdown(lull_endpoint *ep) {
    return control(ep, SHUTDOWN);
}

bool lull_endpoint_closed(const lull_endpoint *ep) {
    return ep && (ep->flags & LULL__EP_CLOSED);
}

void lull__endpoint_drain(lull_endpoint *ep) {
    if (!(ep->flags & LULL__EP_NO_SEND) && ep->on_drain) ep->on_drain(ep);
}

void lull__endpoint_peer_gone(lull_endpoint *ep) {
    ep->flags |= LULL__EP_PEER_GONE;
    ep->queued = 0;
}

bool lull__frame_buf_grow(unsigned char **buf, size_t *cap, size_t need,
                          size_t max_frame) {
    size_t n = *cap * 2 > need ? *cap * 2 : need;
    if (n > max_frame + LULL__FRAME_HDR) n = max_frame + LULL__FRAME_HDR;
    /* At the frame limit already: a reader asking for a record's room
     * with a smaller limit would realloc to the same size every read. */
    if (n <= *cap) return true;
    unsigned char *b = realloc(*buf, n);
    if (!b) return false;
    *buf = b;
    *cap = n;
    return true;
}
