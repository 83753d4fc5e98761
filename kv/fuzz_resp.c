/* fuzz_resp: a libFuzzer target for lull-kv's request parser (resp.c).
 *
 * Each input is parsed as the server parses a connection's bytes: every
 * complete command taken off the front until more is needed or an error.
 * It is parsed three ways, from exactly-sized copies made afresh for each
 * call (so ASan sees any read past the end, and an argument left pointing
 * into an earlier call's bytes): whole with resp_parse_need, which keeps
 * no state; cut in two at a point the input's first byte chooses, and a
 * byte at a time (inputs up to 1 KiB), with resp_parse_resume going on from
 * where the last call stopped, as the server does. Every way must give the same
 * commands and the same outcome. As the server does, a feed parses again only
 * once it holds the bytes the parser asked for, so a hint that is too high
 * shows as a difference between the ways.
 *
 *   built only by clang with -fsanitize=fuzzer support (examples/CMakeLists);
 *   ./fuzz_resp -max_total_time=60 */
#include "resp.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 8

static const resp_limits limits = {.max_bulk = 4096, .max_args = MAX_ARGS};

typedef struct result {
    uint64_t sum;   /* a running hash of every argument, in order */
    size_t cmds;    /* commands parsed */
    int error;      /* ended in a protocol error */
    char buf[8192]; /* the connection's buffer */
    size_t len;     /* bytes buffered (after an error: undefined) */
    size_t need;    /* parse again once len reaches it */
    int resume;     /* parse with resp_parse_resume and st */
    resp_state st;
} result;

static void feed(result *r, const uint8_t *p, size_t n) {
    if (r->error || r->len + n > sizeof r->buf) return;
    memcpy(r->buf + r->len, p, n);
    r->len += n;
    if (r->len < r->need) return;
    size_t off = 0;
    for (;;) {
        size_t left = r->len - off, argc;
        char *copy = malloc(left ? left : 1);
        memcpy(copy, r->buf + off, left);
        resp_arg argv[MAX_ARGS];
        const char *err;
        size_t need;
        long got = r->resume ? resp_parse_resume(&limits, &r->st, copy, left,
                                                 argv, &argc, &err, &need)
                             : resp_parse_need(&limits, copy, left, argv, &argc,
                                               &err, &need);
        if (got == RESP_INCOMPLETE) {
            if (need <= left) abort(); /* the hint must ask for more */
            r->need = need;
        }
        if (got <= 0) {
            r->error = got == RESP_ERROR;
            free(copy);
            break;
        }
        if ((size_t)got > left || argc > MAX_ARGS) abort();
        for (size_t i = 0; i < argc; i++) {
            if (argv[i].p < copy || argv[i].p + argv[i].len > copy + left)
                abort();
            for (size_t j = 0; j < argv[i].len; j++)
                r->sum = r->sum * 31 + (unsigned char)argv[i].p[j];
            r->sum = r->sum * 31 + 256; /* argument boundary */
        }
        r->cmds++;
        off += (size_t)got;
        free(copy);
    }
    memmove(r->buf, r->buf + off, r->len - off);
    r->len -= off;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    size_t cut = data[0] % size;
    data++;
    size--;
    if (cut > size) cut = size;
    static result whole, split, bytes;
    memset(&whole, 0, sizeof whole);
    memset(&split, 0, sizeof split);
    memset(&bytes, 0, sizeof bytes);
    split.resume = bytes.resume = 1;
    feed(&whole, data, size);
    feed(&split, data, cut);
    feed(&split, data + cut, size - cut);
    /* A byte at a time copies the input's square: for the shorter ones
     * only, so the fuzzer keeps its pace. */
    int ways = size <= 1024 ? 2 : 1;
    for (size_t i = 0; ways == 2 && i < size; i++)
        feed(&bytes, data + i, 1);
    const result *r[] = {&split, &bytes};
    for (int i = 0; i < ways; i++)
        if (whole.sum != r[i]->sum || whole.cmds != r[i]->cmds ||
            whole.error != r[i]->error ||
            (!whole.error && whole.len != r[i]->len))
            abort(); /* a cut changed what was parsed */
    return 0;
}
