/* repl.c: the write log (see repl.h). Invariants: chunks[i].start +
 * chunks[i].used == chunks[i + 1].start; base is chunks[0].start (end with
 * no chunk); starts[] is increasing, record `first` starts at base, and
 * every record lies inside one chunk; end is the last chunk's start +
 * used. Records before `first` are trimmed: starts[] keeps them until a
 * compaction (amortised: when they are at least half of it). */
#include "repl.h"

#include "buf.h"

#include <assert.h>
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

/* Drops the trimmed records from the front of starts[] once they are at
 * least half of it: each kept record moves at most once per trimmed one. */
static void compact_starts(repl_log *log) {
    size_t dead = log->first - log->rec0, n = log->nrec - log->rec0;
    if (dead == 0 || dead < n - dead) return;
    memmove(log->starts, log->starts + dead, (n - dead) * sizeof *log->starts);
    log->rec0 = log->first;
}

void repl_log_trim(repl_log *log) {
    if (!log->backlog || log->nchunks < 2) return;
    uint64_t keep = log->pinned ? log->pinned(log->pinned_arg) : UINT64_MAX;
    size_t n = 0;
    /* Never the last chunk (it takes appends); a chunk goes when the bytes
     * after it still cover the backlog and no reader is in it. */
    while (n + 1 < log->nchunks) {
        const repl_chunk *c = &log->chunks[n];
        uint64_t after = c->start + c->used;
        if (log->end - after < log->backlog) break;
        if (after > keep) break;
        n++;
    }
    if (n == 0) return;
    for (size_t i = 0; i < n; i++)
        free(log->chunks[i].p);
    memmove(log->chunks, log->chunks + n,
            (log->nchunks - n) * sizeof *log->chunks);
    log->nchunks -= n;
    log->chunk0 += n;
    log->base = log->chunks[0].start;
    /* The first record at or after the new base: it starts there. */
    size_t lo = log->first, hi = log->nrec;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (repl_log_start(log, mid) < log->base)
            lo = mid + 1;
        else
            hi = mid;
    }
    log->first = lo;
    compact_starts(log);
}

void repl_log_keep(repl_log *log) {
    log->idle = false;
}

int repl_log_reserve(repl_log *log, size_t len) {
    return repl_log_room(log, len, 1);
}

int repl_log_room(repl_log *log, size_t len, size_t nrec) {
    if (log->idle) return 0; /* nothing is kept */
    size_t used = log->nrec - log->rec0;
    if (log->rec_cap - used < nrec) {
        size_t cap = log->rec_cap ? log->rec_cap * 2 : 1024;
        while (cap - used < nrec)
            cap *= 2;
        uint64_t *s = realloc(log->starts, cap * sizeof *s);
        if (!s) return -ENOMEM;
        log->starts = s;
        log->rec_cap = cap;
    }
    size_t n = log->nchunks;
    if (n && log->chunks[n - 1].cap - log->chunks[n - 1].used >= len) return 0;
    /* A chunk starts: the one time a trim may free the front. */
    repl_log_trim(log);
    n = log->nchunks;
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

/* KV_PLANT_LTRIM_OFF: LTRIM k start stop logged with stop one nearer
 * zero (0 and -1 as sent), never longer: 10 is 9, -10 is -9. */
static bool ltrim_off(const resp_arg *argv, size_t argc, resp_arg *out,
                      char *num, size_t cap) {
    if (argc != 4 || argv[0].len != 5 || memcmp(argv[0].p, "LTRIM", 5) ||
        argv[3].len >= cap)
        return false;
    char t[24];
    memcpy(t, argv[3].p, argv[3].len);
    t[argv[3].len] = 0;
    long long stop = strtoll(t, NULL, 10);
    if (stop == 0 || stop == -1) return false;
    memcpy(out, argv, 3 * sizeof *argv);
    out[3] = (resp_arg){num, (size_t)snprintf(num, cap, "%lld",
                                              stop > 0 ? stop - 1 : stop + 1)};
    return true;
}

/* KV_PLANT_HINCRBY_SET: HINCRBY k f n logged as HSET k f n (a shorter
 * name: it fits the room reserved). */
static bool hincrby_set(const resp_arg *argv, size_t argc, resp_arg *out) {
    if (argc != 4 || argv[0].len != 7 || memcmp(argv[0].p, "HINCRBY", 7))
        return false;
    memcpy(out, argv, 4 * sizeof *argv);
    out[0] = (resp_arg){"HSET", 4};
    return true;
}

void repl_log_append(repl_log *log, const resp_arg *argv, size_t argc) {
    if (log->idle) { /* counted, not kept: nothing can read it */
        log->end += repl_record_len(argv, argc);
        log->base = log->end;
        return;
    }
    resp_arg rel[4];
    char num[24];
    if ((log->plant & KV_PLANT_EXPIRE_RELATIVE) &&
        expire_relative(log, argv, argc, rel, num, sizeof num))
        argv = rel;
    else if ((log->plant & KV_PLANT_LTRIM_OFF) &&
             ltrim_off(argv, argc, rel, num, sizeof num))
        argv = rel;
    else if ((log->plant & KV_PLANT_HINCRBY_SET) &&
             hincrby_set(argv, argc, rel))
        argv = rel;
    repl_chunk *c = &log->chunks[log->nchunks - 1];
    char *w = c->p + c->used, *begin = w;
    /* Counts and lengths of a record held in memory: far below LLONG_MAX. */
    w = buf_int_at(w, '*', (long long)argc);
    for (size_t i = 0; i < argc; i++) {
        w = buf_int_at(w, '$', (long long)argv[i].len);
        memcpy(w, argv[i].p, argv[i].len);
        w += argv[i].len;
        *w++ = '\r';
        *w++ = '\n';
    }
    size_t len = (size_t)(w - begin);
    c->used += len;
    log->starts[log->nrec++ - log->rec0] = log->end;
    log->end += len;
}

/* The record's length is found once: a write on a server with no replica
 * costs only that walk of its lengths (reserve and append each walked
 * them: ~90 instructions of a SET's ~1,400, callgrind). */
/* repl_log_write's kept record, out of line: the append inlined here
 * takes a large stack frame and six saved registers, which the idle
 * log's every write (a primary with no replica: each SET of a benchmark)
 * paid for a few additions (some 25 instructions a SET, callgrind). */
static __attribute__((noinline)) int
write_kept(repl_log *log, const resp_arg *argv, size_t argc, size_t len) {
    if (repl_log_reserve(log, len) < 0) return -ENOMEM;
    repl_log_append(log, argv, argc);
    return 0;
}

int repl_log_write(repl_log *log, const resp_arg *argv, size_t argc) {
    size_t len = repl_record_len(argv, argc);
    if (log->idle) { /* counted, not kept: nothing can read it */
        log->end += len;
        log->base = log->end;
        return 0;
    }
    return write_kept(log, argv, argc, len);
}

/* The first kept record starting at or after offset. */
static size_t first_record_from(const repl_log *log, uint64_t offset) {
    size_t lo = log->first, hi = log->nrec;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (repl_log_start(log, mid) < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int repl_log_seek(const repl_log *log, uint64_t offset, repl_cursor *cur) {
    if (offset > log->end) return -EINVAL;
    if (offset < log->base) return -ERANGE;
    size_t r = first_record_from(log, offset);
    if (r < log->nrec && repl_log_start(log, r) != offset) return -EINVAL;
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
    cur->chunk = log->chunk0 + c;
    return 0;
}

uint64_t repl_log_offset(const repl_log *log, const repl_cursor *cur) {
    return cur->rec < log->nrec ? repl_log_start(log, cur->rec) : log->end;
}

const char *repl_log_next(const repl_log *log, repl_cursor *cur, size_t *len) {
    if (cur->rec >= log->nrec) return NULL;
    /* A reader pins what it reads (repl_log.pinned): one behind the base
     * is a reader that did not. */
    assert(cur->rec >= log->first);
    /* Its last chunk may be gone: the record is in a later one. */
    if (cur->chunk < log->chunk0) cur->chunk = log->chunk0;
    uint64_t at = repl_log_start(log, cur->rec);
    uint64_t next =
        cur->rec + 1 < log->nrec ? repl_log_start(log, cur->rec + 1) : log->end;
    /* Step to the chunk holding the record: chunks are contiguous, and a
     * record never straddles two. */
    const repl_chunk *c = &log->chunks[cur->chunk - log->chunk0];
    while (at >= c->start + c->used) {
        cur->chunk++;
        c++;
    }
    cur->rec++;
    *len = (size_t)(next - at);
    if ((log->plant & KV_PLANT_CHUNK_EDGE) && at == c->start &&
        c > log->chunks && c[-1].used >= *len)
        return c[-1].p + c[-1].used - *len; /* the chunk before's tail */
    return c->p + (at - c->start);
}
