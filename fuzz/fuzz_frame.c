/* fuzz_frame: a libFuzzer target for a framed stream's frame decoder
 * (src/stream.c: deliver_frames, make_room, read_eof), driven through the
 * public API (harness.h: a socketpair, the input written in chunks).
 *
 * A reference parser reads the same bytes first: 4-byte big-endian length,
 * payload, repeated. The stream must deliver exactly the frames it finds,
 * in order and byte for byte, and close with what it predicts: -EMSGSIZE at
 * the first length over the limit (max_frame, or what a caller buffer
 * holds), -EPROTO for bytes left over at EOF, 0 for a clean end.
 *
 *   built only by clang with -fsanitize=fuzzer support (fuzz/CMakeLists);
 *   `make fuzz FUZZ_SECONDS=N` runs it on a copy of fuzz/corpus_frame */
#include "harness.h"

#include <errno.h>

#define HDR 4

typedef struct expect {
    const uint8_t *body; /* the bytes the peer sends */
    size_t off[4096];    /* each expected frame's payload offset */
    size_t len[4096];
    size_t frames;
    size_t seen; /* frames delivered so far */
    int reason;  /* the close the reference predicts */
} expect;

static expect want;
static fuzz_run run;

static void reference(const uint8_t *b, size_t n, size_t limit) {
    size_t at = 0;
    want.body = b;
    want.frames = want.seen = 0;
    want.reason = 0;
    while (n - at >= HDR) {
        size_t len = (size_t)b[at] << 24 | (size_t)b[at + 1] << 16 |
                     (size_t)b[at + 2] << 8 | (size_t)b[at + 3];
        if (len > limit) {
            want.reason = -EMSGSIZE;
            return;
        }
        if (n - at - HDR < len) break;
        /* A frame takes at least HDR bytes: n / HDR bounds the count. */
        want.off[want.frames] = at + HDR;
        want.len[want.frames++] = len;
        at += HDR + len;
    }
    if (at < n) want.reason = -EPROTO;
}

static void on_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    (void)ep;
    size_t i = want.seen++;
    if (i >= want.frames || len != want.len[i] ||
        (len && memcmp(bytes, want.body + want.off[i], len) != 0))
        abort();
    fuzz_after_frame(&run);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* Bodies longer than the table holds frames for are not tried. */
    if (size < FUZZ_SETTINGS || size - FUZZ_SETTINGS > 4096 * HDR) return 0;
    size_t max_frame = (size_t)data[1] << 8 | data[2]; /* 0: the default */
    if (!fuzz_open(&run, data, size, 0, max_frame, on_frame)) return 0;
    size_t limit = max_frame ? max_frame : LULL_FRAME_MAX_DEFAULT;
    size_t cap = fuzz_user_cap(&run);
    if (cap && cap - HDR < limit) limit = cap - HDR;
    const uint8_t *body = data + FUZZ_SETTINGS;
    size_t n = size - FUZZ_SETTINGS;
    reference(body, n, limit);
    fuzz_feed(&run, body, n);
    if (want.seen != want.frames || run.reason != want.reason) abort();
    return 0;
}
