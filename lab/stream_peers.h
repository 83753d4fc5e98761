/* What the stream figures of the `replicate` scenario (the write cost,
 * lab/replicate_write.c, and the ping-pong, lab/pingpong.c) share with
 * their peers' rows (lab/peers/<peer>_stream.c, each compiled only when
 * its library is installed): the job of one write-cost measurement and
 * one side of a ping-pong. */
#ifndef LAB_STREAM_PEERS_H
#define LAB_STREAM_PEERS_H

#include <stdbool.h>
#include <stdint.h>

#define STREAM_HIGH_WATER (64 << 10) /* every loop row's queue bound */
#define STREAM_RING       16384      /* requests in flight, at most */

/* One write-cost measurement: `records` copies of rec into fd, whose other
 * end a reader thread drains; a loop row keeps at most STREAM_HIGH_WATER
 * bytes queued. The row writes into a dup of fd, which it closes when it
 * is done (so the reader sees EOF once both are closed). */
typedef struct wctx {
    int fd; /* the writing end */
    int records;
    int size;
    const unsigned char *rec; /* one record's bytes, written M times */
    uint64_t writes;          /* system calls that wrote (where known) */
} wctx;
typedef int (*stream_way_fn)(wctx *w);

/* One side of the 64-byte ping-pong: its own thread, pinned to cpu, on
 * its end of a Unix socketpair. The starter sends first and counts trips;
 * after the last it closes its end, and the other side ends on EOF. The
 * side owns fd from the start (it closes it). */
#define PP_BYTES 64
typedef struct pp_side {
    int fd;
    int trips;
    int cpu;
    bool starter; /* sends first */
    int err;      /* 0, or a negative errno */
} pp_side;
typedef void *(*pp_side_fn)(void *side);

#ifdef LAB_HAVE_UV
int uv_way_per_record(wctx *w); /* one uv_write per record */
int uv_way_batched(wctx *w);    /* one uv_write of 131 bufs per request */
void *uv_pp_side(void *side);   /* uv_read_start, uv_write */
#endif
#ifdef LAB_HAVE_EV
void *ev_pp_side(void *side); /* ev_io, read() and write() */
#endif
#ifdef LAB_HAVE_EVENT
int event_way_write(wctx *w);     /* bufferevent_write per record (a copy) */
int event_way_reference(wctx *w); /* evbuffer_add_reference per record */
void *event_pp_side(void *side);  /* a bufferevent */
#endif

#endif /* LAB_STREAM_PEERS_H */
