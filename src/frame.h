/* What a transport of the frame interface (src/frame.c) shares with it:
 * the endpoint's state bits and the calls a transport makes. Included by
 * the transports (src/loopback.c, later the streams); the core never
 * includes it. */
#ifndef LULL_FRAME_H
#define LULL_FRAME_H

#include "lull.h"

/* lull_endpoint.flags */
#define LULL__EP_CLOSED    0x1u /* closed here, or the peer's close delivered */
#define LULL__EP_PEER_GONE 0x2u /* the peer closed: sends fail with -EPIPE */

/* Sets up the shared half of an endpoint: no callbacks, nothing queued.
 * Zero limits take the defaults. */
void lull__endpoint_init(lull_endpoint *ep, const lull_frame_ops *ops,
                         size_t max_frame, size_t high_water);

/* `n` accepted bytes left the queue (delivered or written). When that takes
 * the count from at or above the high-water mark to below it, and the
 * endpoint is still open, its drain callback runs here, once: call this
 * where a callback may run, never inside lull_send. */
void lull__endpoint_sent(lull_endpoint *ep, size_t n);

/* The peer is gone: sends fail, nothing is queued any more, no drain. */
void lull__endpoint_peer_gone(lull_endpoint *ep);

/* Gives a frame back to its owner: no longer in flight, then its release
 * callback. The transport must not touch the frame afterwards. */
void lull__frame_release(lull_frame *frame);

#endif
