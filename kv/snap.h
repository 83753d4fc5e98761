/* snap.h: a keyspace as the write records that rebuild it, for a full
 * resync (link.c): each key as SET, RPUSH, SADD, HSET or ZADD (a
 * collection in batches of SNAP_BATCH elements, so no record is huge),
 * PEXPIREAT for a key with an expiry time, then the end marker
 * `REPLSNAPEND <keys>`, a command only a snapshot has (no client can run
 * it, so the log never holds it), with the number of keys sent: the
 * replica checks it before it takes the snapshot's offset.
 *
 * The bytes go out through a buffer of the caller's, handed on whenever
 * it is full (snap_out.flush): a forked child writes it to a socket, the
 * loop sends it as a frame. No allocation, no lull: a forked child of a
 * threaded program may run it. */
#ifndef LULL_KV_SNAP_H
#define LULL_KV_SNAP_H

#include <stddef.h>

#include "cmd.h"

/* Elements per record of a collection: 128 members of a set of 10^6 are
 * one record of a few KiB, not one of tens of MiB. */
#define SNAP_BATCH 128
/* The buffer a writer hands on: 64 KiB, a socket's write. */
#define SNAP_BUF ((size_t)64 << 10)
#define SNAP_END "REPLSNAPEND"

typedef struct snap_out snap_out;
struct snap_out {
    char *p;    /* the buffer (cap bytes) */
    size_t len; /* bytes in it */
    size_t cap;
    /* Hands p[0, len) on and leaves room for cap bytes (len 0, p may
     * change): 0, or a negative errno, which ends the snapshot. */
    int (*flush)(snap_out *o);
    void *arg; /* the flush's own */
};

/* Writes k's keyspace and the end marker through o, and flushes the last
 * bytes: 0, or the first flush error. k->plant's KV_PLANT_SNAPSHOT_TTL
 * (repl.h) leaves out the keys with an expiry time. */
int snap_write(kv *k, snap_out *o);

#endif
