/* repl.c: the write log (see repl.h). Invariants: chunks[i].start +
 * chunks[i].used == chunks[i + 1].start; starts[] is increasing, starts[0]
 * == 0, and every record lies inside one chunk; end is the last chunk's
 * start + used (0 with no chunk). */
#include "repl.h"

#include "buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void repl_log_init(repl_log *log) {
    memset(log, 0, sizeof *log);
}

void repl_log_free(repl_log *log) {
    for (size_t i = 0; i < log->nchunks; i++)
        free(log->chunks[i].p);
    free(log->chunks);
    free(log->starts);
    repl_log_init(log);
}

/* Two digits a step: the lengths and counts of a record are almost all
 * below 100, so most take a compare or two. */
static size_t digits(size_t n) {
    size_t d = 1;
    while (n >= 100) {
        n /= 100;
        d += 2;
    }
    return d + (n >= 10);
}

size_t repl_record_len(const resp_arg *argv, size_t argc) {
    size_t n = 1 + digits(argc) + 2; /* *<argc>\r\n */
    for (size_t i = 0; i < argc; i++)
        n += 1 + digits(argv[i].len) + 2 + argv[i].len + 2;
    return n;
}

int repl_log_reserve(repl_log *log, size_t len) {
    if (log->nrec == log->rec_cap) {
        size_t cap = log->rec_cap ? log->rec_cap * 2 : 1024;
        uint64_t *s = realloc(log->starts, cap * sizeof *s);
        if (!s) return -ENOMEM;
        log->starts = s;
        log->rec_cap = cap;
    }
    size_t n = log->nchunks;
    if (n && log->chunks[n - 1].cap - log->chunks[n - 1].used >= len) return 0;
    if (n == log->chunks_cap) {
        size_t cap = log->chunks_cap ? log->chunks_cap * 2 : 16;
        repl_chunk *c = realloc(log->chunks, cap * sizeof *c);
        if (!c) return -ENOMEM;
        log->chunks = c;
        log->chunks_cap = cap;
    }
    size_t chunk = log->chunk_size ? log->chunk_size : REPL_CHUNK;
    size_t cap = len > chunk ? len : chunk;
    char *p = malloc(cap);
    if (!p) return -ENOMEM;
    /* An empty chunk left at the tail (a reserve whose append never came)
     * is replaced rather than followed: chunks stay contiguous either way,
     * and no record would ever live in it. */
    repl_chunk *last = n ? &log->chunks[n - 1] : NULL;
    if (last && last->used == 0) {
        free(last->p);
        last->p = p;
        last->cap = cap;
        return 0;
    }
    log->chunks[log->nchunks++] =
        (repl_chunk){.p = p, .used = 0, .cap = cap, .start = log->end};
    return 0;
}

/* KV_PLANT_EXPIRE_RELATIVE: PEXPIREAT k t logged as PEXPIRE k (t - now),
 * in the room reserved for it (never longer: a shorter name, a number of
 * at most as many digits). */
static bool expire_relative(repl_log *log, const resp_arg *argv, size_t argc,
                            resp_arg *out, char *num, size_t cap) {
    if (argc != 3 || argv[0].len != 9 || memcmp(argv[0].p, "PEXPIREAT", 9) ||
        !log->clock || argv[2].len >= cap)
        return false;
    char t[24];
    memcpy(t, argv[2].p, argv[2].len);
    t[argv[2].len] = 0;
    long long when = strtoll(t, NULL, 10);
    long long rel = when - log->clock(log->clock_arg);
    if (rel < 1) return false;
    out[0] = (resp_arg){"PEXPIRE", 7};
    out[1] = argv[1];
    out[2] = (resp_arg){num, (size_t)snprintf(num, cap, "%lld", rel)};
    return true;
}

const char *repl_log_append_arg(repl_log *log, const resp_arg *argv,
                                size_t argc, size_t want) {
    resp_arg rel[3];
    char num[24];
    if ((log->plant & KV_PLANT_EXPIRE_RELATIVE) &&
        expire_relative(log, argv, argc, rel, num, sizeof num))
        argv = rel;
    repl_chunk *c = &log->chunks[log->nchunks - 1];
    char *w = c->p + c->used, *begin = w;
    const char *at = NULL;
    /* Counts and lengths of a record held in memory: far below LLONG_MAX. */
    w = buf_int_at(w, '*', (long long)argc);
    for (size_t i = 0; i < argc; i++) {
        w = buf_int_at(w, '$', (long long)argv[i].len);
        if (i == want) at = w;
        memcpy(w, argv[i].p, argv[i].len);
        w += argv[i].len;
        *w++ = '\r';
        *w++ = '\n';
    }
    size_t len = (size_t)(w - begin);
    c->used += len;
    log->starts[log->nrec++] = log->end;
    log->end += len;
    return at;
}

void repl_log_append(repl_log *log, const resp_arg *argv, size_t argc) {
    repl_log_append_arg(log, argv, argc, SIZE_MAX);
}

/* The first record starting at or after offset. */
static size_t first_record_from(const repl_log *log, uint64_t offset) {
    size_t lo = 0, hi = log->nrec;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (log->starts[mid] < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int repl_log_seek(const repl_log *log, uint64_t offset, repl_cursor *cur) {
    if (offset > log->end) return -EINVAL;
    size_t r = first_record_from(log, offset);
    if (r < log->nrec && log->starts[r] != offset) return -EINVAL;
    /* r == nrec: offset == end, the place of the next append. The chunk:
     * the last one starting at or before offset (0 for an empty log). */
    size_t c = 0, lo = 0, hi = log->nchunks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (log->chunks[mid].start <= offset) {
            c = mid;
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    cur->rec = r;
    cur->chunk = c;
    return 0;
}

uint64_t repl_log_offset(const repl_log *log, const repl_cursor *cur) {
    return cur->rec < log->nrec ? log->starts[cur->rec] : log->end;
}

const char *repl_log_next(const repl_log *log, repl_cursor *cur, size_t *len) {
    if (cur->rec >= log->nrec) return NULL;
    uint64_t at = log->starts[cur->rec];
    uint64_t next =
        cur->rec + 1 < log->nrec ? log->starts[cur->rec + 1] : log->end;
    /* Step to the chunk holding the record: chunks are contiguous, and a
     * record never straddles two. */
    while (at >= log->chunks[cur->chunk].start + log->chunks[cur->chunk].used)
        cur->chunk++;
    const repl_chunk *c = &log->chunks[cur->chunk];
    cur->rec++;
    *len = (size_t)(next - at);
    if ((log->plant & KV_PLANT_CHUNK_EDGE) && at == c->start && cur->chunk &&
        c[-1].used >= *len)
        return c[-1].p + c[-1].used - *len; /* the chunk before's tail */
    return c->p + (at - c->start);
}
