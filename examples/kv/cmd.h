/* cmd.h: lull-kv's commands, apart from the sockets that carry them.
 *
 * kv_exec runs one client request against the keyspace and writes its
 * reply; kv_apply runs one record of a primary's write log on a replica.
 * Both keep the primary's write log and the replication offsets that INFO
 * shows. No lull here: server.c owns the connections and calls in, and
 * tests/test_kv.c drives these directly. */
#ifndef LULL_KV_CMD_H
#define LULL_KV_CMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "repl.h"
#include "resp.h"
#include "store.h"

/* A growable byte buffer: a connection's input, or the replies to one
 * chunk of it. */
typedef struct buf {
    char *p;
    size_t len, cap;
    bool oom; /* a write did not fit: the connection is dropped */
} buf;

bool buf_reserve(buf *b, size_t more);
void buf_put(buf *b, const void *p, size_t n);
void buf_str(buf *b, const char *s);
void buf_int(buf *b, char tag, long long v); /* ":12\r\n", "*3\r\n", ... */
void buf_bulk(buf *b, const char *p, size_t n);
/* buf_reserve when the final size is known (`want` bytes in all: the
 * command being received, as far as its parser knows): grows to it in
 * one step. */
bool buf_reserve_upto(buf *b, size_t more, size_t want);
/* Drops the first n bytes (the parsed ones). */
void buf_consume(buf *b, size_t n);
/* Gives memory back after a burst: a buffer over `keep` bytes that is at
 * most a quarter full shrinks (freed when empty). */
void buf_shrink(buf *b, size_t keep);
void buf_free(buf *b);

#define KV_READONLY_ERR "-READONLY You can't write against a read only replica."

typedef struct kv {
    store db;
    bool replica; /* --replica-of: clients may only read */
    /* Primary: */
    repl_log log;    /* every write run, as records */
    repl_peer peers; /* list head of its replica links (INFO) */
    size_t npeers;
    char replid[41]; /* this primary's id (40 hex digits): a replica whose
                        id differs holds another history, and starts over */
    /* Replica: */
    const char *master_host;
    int master_port;
    bool link_up;    /* handshake done and the link open */
    uint64_t offset; /* bytes of the primary's log applied */
    /* Both: */
    size_t clients;                 /* open client connections (INFO clients) */
    const char *const (*config)[2]; /* CONFIG GET: name, value pairs */
    size_t nconfig;
} kv;

void kv_init(kv *k); /* store_init's error aside: 0 or -ENOMEM */
void kv_free(kv *k);

enum {
    KV_QUIT = 0x1, /* QUIT: close once the reply is out */
};

/* Runs one client request; the reply goes to out. Returns KV_* flags. */
int kv_exec(kv *k, const resp_arg *a, size_t argc, buf *out);

/* Runs one record of the primary's log (replica). 0; or -EPROTO with *err
 * set when it is not a write lull-kv logs, with its arguments (the link is
 * then closed); or -ENOMEM. */
int kv_apply(kv *k, const resp_arg *a, size_t argc, const char **err);

/* Applies every complete record at the front of bytes[0, len) and adds
 * their bytes to k->offset. Returns the bytes taken (the rest waits for
 * more: *need is how many of the rest must be there before another call
 * can take any, see resp_parse_need), or -EPROTO with *err set: a request
 * that is not multibulk, a protocol error, or a record kv_apply
 * refuses. */
long kv_apply_stream(kv *k, const resp_limits *lim, resp_arg *argv,
                     const char *bytes, size_t len, const char **err,
                     size_t *need);

/* INCR's integer: what Redis accepts (an optional '-', digits without a
 * leading zero, within int64; no '+', no spaces). */
bool kv_parse_i64(const char *p, size_t n, long long *out);

/* INFO [section]: sections "replication" and "clients"; none, "all",
 * "default" or "everything" gives both. */
void kv_info(const kv *k, const resp_arg *section, buf *out);

#endif
