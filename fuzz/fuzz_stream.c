/* fuzz_stream: a libFuzzer target for a raw stream's read path
 * (src/stream.c: read_some with LULL_STREAM_RAW), driven through the public
 * API (harness.h: a socketpair, the input written in chunks cut where the
 * input says, reads paused and resumed where it says).
 *
 * Whatever the cuts, the bytes on_frame hands over, joined, must be the
 * bytes sent: none lost, none twice, none reordered; and EOF closes the
 * stream with 0.
 *
 *   built only by clang with -fsanitize=fuzzer support (fuzz/CMakeLists);
 *   `make fuzz FUZZ_SECONDS=N` runs it on a copy of fuzz/corpus_stream */
#include "harness.h"

static fuzz_run run;
static const uint8_t *body;
static size_t body_len, got;

static void on_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    (void)ep;
    /* A raw read hands over what one recv returned: never nothing. */
    if (len == 0 || len > body_len - got || memcmp(bytes, body + got, len) != 0)
        abort();
    got += len;
    fuzz_after_frame(&run);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fuzz_open(&run, data, size, LULL_STREAM_RAW, 0, on_frame)) return 0;
    body = data + FUZZ_SETTINGS;
    body_len = size - FUZZ_SETTINGS;
    got = 0;
    fuzz_feed(&run, body, body_len);
    if (got != body_len || run.reason != 0) abort();
    return 0;
}
