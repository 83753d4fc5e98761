/* repl.h: lull-kv's write log, what a primary ships to its replicas.
 *
 * Every write a primary runs (SET, DEL, INCR, FLUSHALL) is appended to the
 * log as the RESP2 multibulk request a replica runs to repeat it: the log
 * is a byte stream of requests, and an offset in it is a byte count (as in
 * Redis), so a replica's offset is simply the bytes it has applied. The
 * log lives in memory, bounded by the backlog size (--repl-backlog-size):
 * repl_log_trim drops the oldest whole chunks past it, so a replica whose
 * offset left the log gets a snapshot instead (docs/KV.md).
 *
 * Bytes are kept in chunks of at least REPL_CHUNK that never move, so a
 * sender can hand a record to a stream by pointer (no copy) and a later
 * append cannot pull it away; a record never straddles two chunks. An
 * index holds each record's start offset, so a sender steps record by
 * record and a replica's offset is checked to be a record boundary.
 *
 * Pure data structure: no lull, no sockets. One thread owns it. */
#ifndef LULL_KV_REPL_H
#define LULL_KV_REPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "resp.h"

/* 1 MiB per chunk: large enough that chunk allocation is rare (one per
 * ~20,000 small SETs), small enough that a quiet primary holds little
 * unused space. A record longer than that gets a chunk of its own size. */
#define REPL_CHUNK ((size_t)1 << 20)
/* The backlog lull-kv keeps by default (--repl-backlog-size): 1 MiB,
 * Redis' repl-backlog-size default. */
#define REPL_BACKLOG_DEFAULT ((uint64_t)1 << 20)

typedef struct repl_chunk {
    char *p;        /* the bytes (never moved; freed only by a trim, once
                       no reader needs them) */
    size_t used;    /* bytes of records in it */
    size_t cap;     /* its size */
    uint64_t start; /* log offset of p[0] */
} repl_chunk;

typedef struct repl_log {
    repl_chunk *chunks; /* the kept ones, oldest first; the last one takes
                           appends */
    size_t nchunks, chunks_cap;
    size_t chunk0;    /* the number (since the log began) of chunks[0] */
    uint64_t *starts; /* starts[i - rec0]: log offset of record i */
    size_t rec0;      /* the number of starts[0]'s record */
    size_t first;     /* the first record kept (rec0 <= first <= nrec) */
    size_t nrec;      /* records appended since the log began */
    size_t rec_cap;   /* room in starts */
    uint64_t base;    /* the first byte kept (INFO's
                         repl_backlog_first_byte_offset - 1) */
    uint64_t end;     /* bytes in the log: INFO's master_repl_offset */
    uint64_t backlog; /* bytes a trim keeps at least (repl-backlog-size);
                         0: no bound, nothing is freed */
    bool idle;        /* no replica yet: a record only moves end (and
                         base with it), as Redis keeps no backlog before
                         its first replica; a replica's first REPLSYNC
                         sets it false (repl_log_keep) */
    /* The lowest offset a reader still needs (UINT64_MAX: none), asked
     * when a trim could free a chunk; NULL: no reader. */
    uint64_t (*pinned)(void *arg);
    void *pinned_arg;
    size_t chunk_size; /* a new chunk's size; 0: REPL_CHUNK (the simulator
                          makes it small, so records cross many chunk
                          boundaries in a short run) */
    /* Test only: the planted bugs of the log (KV_PLANT_* below), and the
     * clock KV_PLANT_EXPIRE_RELATIVE reads (ms, the keyspace's). */
    uint64_t plant;
    bool plant_done; /* KV_PLANT_SILENT_RESYNC: the bad record was sent */
    int64_t (*clock)(void *arg);
    void *clock_arg;
} repl_log;

/* Test only: planted bugs of the log, the links and the keyspace (bits of
 * kv.plant beside cmd.h's), which lull-kv-sim must find (--plant). */
enum {
    /* The primary logs PEXPIREAT k t as PEXPIRE k (t - now): a replica
     * applying it later gets a later expiry. */
    KV_PLANT_EXPIRE_RELATIVE = 0x8,
    /* A replica applies a transaction's writes one by one as they come,
     * not as a unit once its EXEC is in. */
    KV_PLANT_MULTI_SPLIT = 0x10,
    /* A record that starts a chunk is read from the chunk before. */
    KV_PLANT_CHUNK_EDGE = 0x20,
    /* An integer string in [2^31, 2^32) is stored as its 32-bit wrap
     * (INCR past INT32_MAX goes negative). */
    KV_PLANT_INT32 = 0x40,
    /* The primary sends one record per link corrupted, and the replica,
     * finding it malformed, resyncs without a word. */
    KV_PLANT_SILENT_RESYNC = 0x80,
    /* The expiry timer deletes a key when the clock reads its time, not
     * once it is past it: up to 1 ms early, as the client measures. */
    KV_PLANT_EXPIRE_EARLY = 0x100,
    /* A connection that dies in the middle of a batch (a reply refused at
     * REPLY_HANDOVER) leaves without waking the replica links for the
     * records the batch logged, or rearming the expiry timer. */
    KV_PLANT_BATCH_DEATH = 0x200,
    /* PEXPIREAT to the current ms arms the key, as if that time were
     * still ahead, instead of deleting it. */
    KV_PLANT_EXPIRE_NOW = 0x400,
    /* A replica overwriting a value of 64 KiB or more with one of the
     * same length and the same first KiB keeps the old one. */
    KV_PLANT_SAME_LENGTH = 0x800,

    /* A full resync's snapshot leaves out the keys that carry an expiry
     * time. */
    KV_PLANT_SNAPSHOT_TTL = 0x1000,
    /* The primary logs LTRIM k start stop with its stop one nearer zero:
     * a replica keeps one element less (or more) than the primary. */
    KV_PLANT_LTRIM_OFF = 0x2000,
    /* The primary logs HINCRBY k f n as HSET k f n: a replica holds the
     * increment, not the sum. */
    KV_PLANT_HINCRBY_SET = 0x4000,
    /* LRANGE leaves out the last element of its range. */
    KV_PLANT_LRANGE_END = 0x8000,
    /* SETRANGE inside a string cuts it at the written range's end. */
    KV_PLANT_SETRANGE_SHRINK = 0x100000,
    /* PEXPIREAT's GT passes a key with no expiry (an infinite one). */
    KV_PLANT_EXPIRE_GT = 0x200000,
    /* Inside MULTI, only an unknown command spoils the transaction: one
     * with the wrong arity is refused, and EXEC runs the rest. */
    KV_PLANT_EXEC_ARITY = 0x400000,
    /* A full resync's snapshot holds a list's first SNAP_BATCH items
     * only (one RPUSH record). */
    KV_PLANT_SNAP_BATCH = 0x800000,
    /* The primary resumes a replica only when it asks from the log's end:
     * one behind it gets a full resync. */
    KV_PLANT_RESUME_CAUGHT_UP = 0x1000000,
    /* LREM counts from the tail for a positive count, from the head for
     * a negative one. */
    KV_PLANT_LREM_DIRECTION = 0x2000000,
    /* A connection's reply frame is not marked busy once sent (conn.c's
     * send_out): the next batch rewrites and sends it while in flight. */
    KV_PLANT_OUTF_RESEND = 0x4000000,
    /* A replica whose REPLACK is still in flight re-posts its ack task
     * instead of waiting for the frame's release: a task that re-posts
     * itself at one instant, while the network it waits on never runs. */
    KV_PLANT_ACK_SPIN = 0x8000000,
    /* MSETNX with a key there sets the keys before it, answering 0. */
    KV_PLANT_MSETNX_PARTIAL = 0x10000000,
    /* LPOS with a negative RANK answers a match's place counted from the
     * tail, not its index. */
    KV_PLANT_LPOS_TAIL = 0x20000000,
    /* EXPIRE k s takes its seconds as ms (EXPIREAT's are right). */
    KV_PLANT_EXPIRE_SECONDS = 0x40000000,
};

/* More planted bugs, past the 31 bits an enum constant (an int) holds:
 * the set and sorted set commands'. */
/* SMOVE onto its own set moves the member as if to another: it is lost. */
#define KV_PLANT_SMOVE_SAME (1ull << 32)
/* ZPOPMIN and ZPOPMAX with a count past the set's size pop all but one. */
#define KV_PLANT_ZPOP_PAST (1ull << 33)
/* SINTERSTORE, SUNIONSTORE and SDIFFSTORE empty their destination before
 * reading it as one of their sources. */
#define KV_PLANT_SETSTORE_SOURCE (1ull << 34)
/* A score range's exclusive max ("(2") taken as inclusive. */
#define KV_PLANT_ZSCORE_EXCLUSIVE (1ull << 35)
/* ZREMRANGEBYRANK's negative stop counted one further from the end. */
#define KV_PLANT_ZREMRANK_NEGATIVE (1ull << 36)
/* SSCAN and ZSCAN of a large set skip a bucket after each step. */
#define KV_PLANT_SCAN_SKIP (1ull << 37)
/* A value of 64 KiB or more written over one of the same length in
 * place, though a reply still sends the old one from those bytes: the
 * reply carries the new value (or part of each). */
#define KV_PLANT_BLOB_INPLACE (1ull << 38)
/* The primary resumes a replica that asks from a record boundary of its
 * log whatever replid it names: one from another history too. */
#define KV_PLANT_RESUME_REPLID (1ull << 39)
/* PUBLISH skips the pattern subscribers once a channel subscriber got
 * the message. */
#define KV_PLANT_PUBLISH_PATTERN (1ull << 40)
/* SCAN with MATCH answers cursor 0 after a step that matched nothing:
 * the walk ends early. */
#define KV_PLANT_SCAN_MATCH_END (1ull << 41)
/* FLUSHALL (and FLUSHDB) empties the keyspace without logging it. */
#define KV_PLANT_FLUSH_UNLOGGED (1ull << 42)
/* PUBLISH is not logged: a replica's subscribers hear nothing of the
 * primary's messages. */
#define KV_PLANT_PUBLISH_UNLOGGED (1ull << 43)
/* A replica's full resync from the log's 0 ignores its sync point: the
 * messages logged before it are heard (again). */
#define KV_PLANT_PUBLISH_AGAIN (1ull << 44)

/* A sender's place in the log: the next record and the chunk holding it,
 * both numbered since the log began (a trim does not move them). */
typedef struct repl_cursor {
    size_t rec;
    size_t chunk;
} repl_cursor;

void repl_log_init(repl_log *log);
void repl_log_free(repl_log *log);
/* The bytes argv would take as a record. */
size_t repl_record_len(const resp_arg *argv, size_t argc);
/* Makes room for a record of len bytes, so that the append after it cannot
 * fail: a write is logged only if it is applied, and applied only if it
 * can be logged. 0 or -ENOMEM. */
int repl_log_reserve(repl_log *log, size_t len);
/* repl_log_reserve for nrec records of len bytes together: the appends of
 * all of them fit the last chunk, with no allocation. 0 or -ENOMEM. */
int repl_log_room(repl_log *log, size_t len, size_t nrec);
/* Appends argv as one multibulk record (after a successful reserve of
 * repl_record_len(argv, argc) bytes). */
void repl_log_append(repl_log *log, const resp_arg *argv, size_t argc);
/* repl_log_reserve then repl_log_append, the record's length found
 * once; an idle log only counts it. 0 or -ENOMEM (nothing logged). */
int repl_log_write(repl_log *log, const resp_arg *argv, size_t argc);

/* From now on records are kept (a replica came): the log holds nothing
 * before its end now, so a replica gets a snapshot. */
void repl_log_keep(repl_log *log);

/* Frees the chunks at the front that the backlog and the readers no
 * longer need (see above); repl_log_reserve calls it when it starts a
 * chunk. */
void repl_log_trim(repl_log *log);
/* Points cur at the record starting at offset (offset == end: at the end,
 * waiting for the next append). 0, -ERANGE when offset is below the base
 * (trimmed), or -EINVAL when it is past the end or inside a record. */
int repl_log_seek(const repl_log *log, uint64_t offset, repl_cursor *cur);
/* The record at cur, and steps past it; NULL at the end of the log. */
const char *repl_log_next(const repl_log *log, repl_cursor *cur, size_t *len);
/* True when records remain after cur. */
static inline bool repl_log_more(const repl_log *log, const repl_cursor *cur) {
    return cur->rec < log->nrec;
}
/* The log offset of cur. */
uint64_t repl_log_offset(const repl_log *log, const repl_cursor *cur);
/* The offset record r starts at (first <= r < nrec). */
static inline uint64_t repl_log_start(const repl_log *log, size_t r) {
    return log->starts[r - log->rec0];
}

/* What a replica's INFO shows of one replica link, kept by the primary. */
typedef struct repl_peer {
    struct repl_peer *next, *prev; /* the primary's links, oldest first */
    char ip[48];                   /* the replica's address */
    int port;                      /* the port it listens on (it says so) */
    uint64_t offset;               /* the offset it acknowledged applying */
    bool snapshot; /* its snapshot is to come or being written: INFO's
                      state wait_bgsave, as Redis', not online */
} repl_peer;

#endif
