/* harness.h: what fuzz_frame.c and fuzz_stream.c share — a lull_stream on
 * one end of a socketpair, the fuzz input's bytes written to the other end
 * in chunks whose sizes the input chooses, the loop run without blocking
 * until each chunk is read, then EOF and a run until the stream closes.
 *
 * An input is 8 bytes of settings, then the bytes the peer sends:
 *   [0]     flags: bit 0 read into a caller buffer (lull_stream_read_into),
 *           bit 1 pause reading inside on_frame at points [4..7] choose
 *   [1..2]  a limit the target reads (max_frame, big-endian)
 *   [3]     the read buffer's size
 *   [4..7]  chunk sizes, used in turn: 1 + byte (1..256 bytes per write)
 *
 * Nothing here may block or wait on time: every run is NOWAIT, and a run
 * that never ends a drain is a defect (abort), not a timeout to wait out. */
#ifndef LULL_FUZZ_HARNESS_H
#define LULL_FUZZ_HARNESS_H

#include <lull.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define FUZZ_SETTINGS 8
#define FUZZ_USER_BUF 8 /* the caller buffer is this + settings[3] bytes */
/* NOWAIT runs a drain may take: one recv per run, and every chunk is at
 * least one byte, so this is far above any real input's need. */
#define FUZZ_MAX_RUNS 100000

typedef struct fuzz_run {
    lull_loop *loop;
    lull_stream s;
    int peer;          /* the socketpair end the input is written to */
    const uint8_t *in; /* the settings */
    bool closed;       /* on_close ran */
    int reason;        /* its reason */
    bool paused;       /* on_frame stopped reading: the drain resumes it */
    unsigned calls;    /* on_frame calls so far */
    unsigned char user_buf[FUZZ_USER_BUF + 256];
} fuzz_run;

static fuzz_run *fuzz_of(lull_endpoint *ep) {
    lull_stream *s = LULL_CONTAINER_OF(ep, lull_stream, ep);
    return LULL_CONTAINER_OF(s, fuzz_run, s);
}

static void fuzz_on_close(lull_endpoint *ep, int reason) {
    fuzz_run *r = fuzz_of(ep);
    if (r->closed) abort(); /* a stream closes once */
    r->closed = true;
    r->reason = reason;
}

/* Called by on_frame after it checked the call: pauses reading there at
 * the points the settings choose, so buffered frames wait for a resume. */
static void fuzz_after_frame(fuzz_run *r) {
    unsigned k = r->calls++;
    if ((r->in[0] & 2) && (r->in[4 + k % 4] & 1) && !r->paused) {
        if (lull_stream_read_stop(&r->s) != 0) abort();
        r->paused = true;
    }
}

/* Opens the stream; false if the input is too short to hold settings. */
static bool fuzz_open(fuzz_run *r, const uint8_t *in, size_t n, unsigned flags,
                      size_t max_frame, lull_frame_fn on_frame) {
    if (n < FUZZ_SETTINGS) return false;
    memset(r, 0, sizeof *r);
    r->in = in;
    int sv[2];
    if (lull_loop_new(&r->loop, NULL) != 0) abort();
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) abort();
    r->peer = sv[1];
    lull_stream_options o = {
        .max_frame = max_frame, .read_size = (size_t)in[3] * 4, .flags = flags};
    if (lull_stream_open(r->loop, &r->s, sv[0], &o) != 0) abort();
    lull_endpoint_set_callbacks(&r->s.ep, on_frame, NULL, fuzz_on_close);
    if ((in[0] & 1) &&
        lull_stream_read_into(&r->s, r->user_buf, FUZZ_USER_BUF + in[3]) != 0)
        abort();
    return true;
}

/* The caller buffer's size, or 0 when the stream reads into its own. */
static inline size_t fuzz_user_cap(const fuzz_run *r) {
    return (r->in[0] & 1) ? FUZZ_USER_BUF + r->in[3] : 0;
}

/* Runs the loop until the socket holds nothing unread and three runs in a
 * row found nothing paused (a resume delivers buffered frames a turn
 * later), or the stream closed. */
static void fuzz_drain(fuzz_run *r) {
    int idle = 0;
    for (int runs = 0; !r->closed && idle < 3; runs++) {
        if (runs == FUZZ_MAX_RUNS) abort(); /* the stream stopped reading */
        if (r->paused) {
            r->paused = false;
            if (lull_stream_read_start(&r->s) != 0) abort();
            idle = 0;
        }
        int unread = 0;
        if (ioctl(lull_stream_fd(&r->s), FIONREAD, &unread) != 0) abort();
        if (lull_loop_run(r->loop, LULL_RUN_NOWAIT) < 0) abort();
        idle = unread == 0 && !r->paused ? idle + 1 : 0;
    }
}

/* Writes the body in chunks, draining after each, then EOF and a drain
 * until the stream closed. */
static void fuzz_feed(fuzz_run *r, const uint8_t *body, size_t n) {
    for (size_t off = 0, k = 0; off < n && !r->closed; k++) {
        size_t c = 1 + (size_t)r->in[4 + k % 4];
        if (c > n - off) c = n - off;
        /* The socket's buffer holds far more than a chunk: never short. */
        if (send(r->peer, body + off, c, MSG_NOSIGNAL) != (ssize_t)c) abort();
        off += c;
        fuzz_drain(r);
    }
    close(r->peer);
    fuzz_drain(r);
    if (!r->closed) abort(); /* EOF must close a stream without on_end */
    if (lull_loop_free(r->loop) != 0) abort();
}

#endif
