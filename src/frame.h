/* What a transport of the frame interface (src/frame.c) shares with it:
 * the endpoint's state bits and the calls a transport makes. Included by
 * the transports (src/loopback.c, later the streams); the core never
 * includes it. */
#ifndef LULL_FRAME_H
#define LULL_FRAME_H

#include "internal.h"

/* What a transport implements. lull_endpoint_send and lull_endpoint_close
 * check the arguments and the state, and count the bytes, before calling
 * these; so queueing cannot fail (the frame is its own queue link), and a
 * transport reports later trouble through the close callback. */
typedef struct lull__frame_ops {
    void (*send)(lull_endpoint *ep, lull_frame *frame); /* queue it */
    void (*close)(lull_endpoint *ep, int reason);
    /* Called inside lull_endpoint_send, where no callback may run: the
     * endpoint must close with `reason` in a later turn (its close callback
     * getting `reason`, the peer told as of any close). Sends are refused
     * already (LULL__EP_PEER_GONE). */
    void (*fail)(lull_endpoint *ep, int reason);
} lull_frame_ops;

/* lull_endpoint_read_stop / _read_start / _shutdown have no entry above:
 * src/frame.c picks the transport's own call by its table. The loopback's
 * and the simulated network's are named here; any other table is the
 * stream's (src/stream.c), whose public calls serve. A new transport adds
 * its table to the dispatch in src/frame.c. */
extern const lull_frame_ops lull__loopback_timer_ops;
extern const lull_frame_ops lull__sim_ops;
/* Reading paused (on false) or resumed; shut down. Open ends only. */
int lull__loopback_read(lull_endpoint *ep, bool on);
int lull__loopback_shutdown(lull_endpoint *ep);
/* lull_endpoint_set_callbacks changed a loopback end's: its delivery turn
 * is picked by them too (src/loopback.c). */
void lull__loopback_callbacks_set(lull_endpoint *ep);

/* lull_endpoint.flags */
#define LULL__EP_CLOSED    0x1u /* closed here, or the peer's close delivered */
#define LULL__EP_PEER_GONE 0x2u /* the peer closed: sends fail with -EPIPE */
#define LULL__EP_BOUNDED                                                       \
    0x4u /* max_queued is set: sends take the checked                          \
            path (frame.c), so unbounded ones pay                              \
            nothing for the bound */
/* A framed byte stream (src/stream.c): each frame goes out with its 4-byte
 * length, and `queued` counts those bytes too (lull__frame_cost), so that
 * high_water and max_queued bound what waits to be written, empty frames
 * included: counted by payload alone, a flood of them never turned the
 * endpoint unwritable nor reached max_queued while the queue grew. */
#define LULL__EP_FRAMED 0x8u
/* A loopback end that delivers by task (lull__loopback_task_ops), or by
 * timer (lull__loopback_timer_ops). Alone in `flags`, such a bit says the
 * end is open, its peer open, and unbounded, and a timer end's pair has
 * no delay (a close, a bound or a delay adds a bit, and a loopback end is
 * never framed): lull_endpoint_send tells its two loopback paths by one
 * compare each, the transport and the absence of any refusal, bound or
 * delay at once. */
#define LULL__EP_LOOPBACK_TASK  0x10u
#define LULL__EP_LOOPBACK_TIMER 0x20u
/* Beside LULL__EP_LOOPBACK_TIMER: the pair delays each frame (delay_ns),
 * so its sends leave lull_endpoint_send's inline path, which claims
 * zero-delay turns, for the transport's own (set by lull_loopback_pair). */
#define LULL__EP_LOOPBACK_DELAYED 0x40u

/* A transport's options: a high-water mark above a max_queued the caller
 * set is -EINVAL. lull_endpoint_writable would say yes up to the bound,
 * and the send past it closes the endpoint, so a producer that waits for
 * on_drain as it should would lose its connection all the same. 0 for
 * either is its default: an unset mark follows the bound. */
static inline bool lull__marks_ok(size_t high_water, size_t max_queued) {
    return !high_water || !max_queued || high_water <= max_queued;
}

/* Sets up the shared half of an endpoint: no callbacks, nothing queued,
 * `data` left as it was. Zero limits take the defaults (max_queued: none). */
void lull__endpoint_init(lull_endpoint *ep, const lull_frame_ops *ops,
                         size_t max_frame, size_t high_water,
                         size_t max_queued);

/* Runs the drain callback of an endpoint whose queue just crossed below
 * the high-water mark, if it is still open (lull__endpoint_sent). */
void lull__endpoint_drain(lull_endpoint *ep);

/* `n` accepted bytes left the queue (delivered or written). When that takes
 * the count from at or above the high-water mark to below it, and the
 * endpoint is still open, its drain callback runs here, once: call this
 * where a callback may run, never inside lull_endpoint_send. Inline: it runs
 * once per frame. The bytes must still be counted (an endpoint that closed, or
 * whose peer did, counts none: do not call this for it). The crossing is
 * `before` in [high_water, high_water + n): one unsigned compare.
 * lull__endpoint_unqueue is the count alone, true at that crossing, for a
 * transport that runs the drain later itself (the loopback: after the
 * frame's release, which must not see the frame counted). */
static inline bool lull__endpoint_unqueue(lull_endpoint *ep, size_t n) {
    size_t before = ep->queued;
    LULL_ASSERT(before >= n, "lull: endpoint queued count underflow");
    ep->queued = before - n;
    return __builtin_expect(before - ep->high_water < n, 0);
}
static inline void lull__endpoint_sent(lull_endpoint *ep, size_t n) {
    if (lull__endpoint_unqueue(ep, n)) lull__endpoint_drain(ep);
}

/* The peer is gone: sends fail, nothing is queued any more, no drain. */
void lull__endpoint_peer_gone(lull_endpoint *ep);

/* The framed wire format of the byte-stream transports (src/stream.c,
 * src/tls.c): a 4-byte big-endian length, then the frame's bytes. */
#define LULL__FRAME_HDR 4
/* The longest frame a 4-byte length can announce (and LULL__FRAME_HDR more
 * fits in a size_t everywhere): a framed transport's max_frame is at most
 * this, or a longer send would go out with its length cut to 32 bits and
 * max_frame + LULL__FRAME_HDR (the read buffer's bound) would wrap. */
#define LULL__FRAME_MAX                                                        \
    ((size_t)UINT32_MAX < SIZE_MAX - LULL__FRAME_HDR                           \
         ? (size_t)UINT32_MAX                                                  \
         : SIZE_MAX - LULL__FRAME_HDR)

/* What a frame of len bytes adds to ep->queued: its payload, and on a
 * framed byte stream its length on the wire (LULL__EP_FRAMED: 4 bytes).
 * len is at most max_frame, which is at most UINT32_MAX there: no wrap. */
static inline size_t lull__frame_cost(const lull_endpoint *ep, size_t len) {
    return len + ((ep->flags & LULL__EP_FRAMED) ? (size_t)LULL__FRAME_HDR : 0);
}

/* The length a frame header announces. */
static inline size_t lull__frame_len(const unsigned char *p) {
    return (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 |
           (size_t)p[3];
}

/* Grows a framed read buffer towards `need` bytes: to twice its size, or
 * need if that is more, but never past one frame of max_frame and its
 * header (so *cap may stay below need; at that bound already, true and
 * nothing moves). False, the buffer as it was, when the allocation fails. */
bool lull__frame_buf_grow(unsigned char **buf, size_t *cap, size_t need,
                          size_t max_frame);

/* A frame sent again while it is still queued came back only because its
 * owner rewrote it in flight (a struct assignment clears in_flight), and
 * lull_endpoint_send cut its link already. As the last of its queue a
 * transport sees it at once and fails the endpoint with -EBUSY, the frame
 * queued once; anywhere else the frames behind it are cut off, never to be
 * delivered or released, and finding it is a walk of the queue: debug
 * builds only, as lull_journal_append's. The walk takes the oldest
 * LULL__FRAME_CHECK_DEPTH frames, where a frame long sent and taken for
 * done is: the whole queue made a deep one's sends quadratic (10 s for
 * 100,000 frames to a paused loopback end), as loop_verify's walks are
 * bounded for the same reason. */
#define LULL__FRAME_CHECK_DEPTH 64
static inline void lull__frame_check_unqueued(const lull_frame *queue,
                                              const lull_frame *frame) {
#ifndef NDEBUG
    int n = 0;
    for (const lull_frame *f = queue; f && n < LULL__FRAME_CHECK_DEPTH;
         f = f->next, n++)
        LULL_ASSERT(f != frame, "lull: lull_endpoint_send of a frame already "
                                "queued (rewritten while in flight)");
#else
    (void)queue;
    (void)frame;
#endif
}

/* Gives a frame back to its owner: no longer in flight, then its release
 * callback. The transport must not touch the frame afterwards. `next` is
 * left as it was: it means nothing out of flight, and lull_endpoint_send sets
 * it. */
static inline void lull__frame_release(lull_frame *frame) {
    frame->in_flight = false;
    if (frame->release) frame->release(frame);
}

#endif
