/* cmd.h: lull-kv's commands, apart from the sockets that carry them.
 *
 * kv_exec runs one client request against the keyspace and writes its
 * reply; kv_apply_stream runs a primary's write log on a replica. Both
 * keep the primary's write log and the replication offsets that INFO
 * shows. No lull here: server.c owns the connections, the clock and the
 * expiry timer, and calls in; tests/test_kv.c drives these directly. */
#ifndef LULL_KV_CMD_H
#define LULL_KV_CMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "repl.h"
#include "resp.h"
#include "store.h"

#define KV_READONLY_ERR "-READONLY You can't write against a read only replica."

typedef struct kv kv;
typedef struct kv_queued kv_queued;
typedef struct kv_sub kv_sub;
typedef struct kv_watch kv_watch;

/* A client's own state, kept by its connection (kv_client_init, and
 * kv_client_reset before it goes). */
typedef struct kv_client {
    void *owner; /* the connection (server side), for kv.wake */
    buf *out;    /* where its replies go: published messages too */
    /* MULTI ... EXEC */
    bool multi;       /* between MULTI and EXEC or DISCARD */
    bool multi_error; /* a command was refused while queueing: EXEC
                         discards the transaction */
    kv_queued *queue; /* the commands queued, in order */
    kv_queued **queue_tail;
    size_t queued; /* how many */
    /* Pub/sub, [0] channels and [1] patterns. A set of names (each entry's
     * data is its kv_sub), so SUBSCRIBE and UNSUBSCRIBE cost the same per
     * name however many the client holds; and the same subscriptions in
     * the order they were made, which UNSUBSCRIBE with no name answers
     * in. */
    dict subs[2];
    kv_sub *first[2], *last[2];
    uint64_t id; /* CLIENT ID: the owner's number for it (kv.last_id) */
    char *name;  /* CLIENT SETNAME's (NULL: none); kv_client_reset frees it */
    /* The owner's: not authenticated yet (requirepass). Only AUTH, HELLO,
     * RESET and QUIT reach kv_exec then; HELLO without AUTH is refused. */
    bool noauth;
    /* CLIENT LIST's cmd: the last command's name as Redis gives it
     * ("client|list"; NULL: none yet, or it was unknown), set by kv_exec. */
    const char *cmd;
    size_t queue_bytes; /* CLIENT LIST's multi-mem: the queue's memory */
    /* WATCH: the keys watched (kv.watched), and whether one of them was
     * written since, which fails the next EXEC. */
    kv_watch *watches;
    bool watch_dirty;
    /* What the watches take (each with its key's entry in kv.watched,
     * shared or not): counted in tot-mem and maxmemory-clients, as the
     * queue is, or a client could hold any memory by WATCHing keys. */
    size_t watch_bytes;
} kv_client;

/* CLIENT LIST's and KILL's types of client, as Redis names them. */
enum {
    KV_CLIENT_NORMAL,
    KV_CLIENT_REPLICA,
    KV_CLIENT_PUBSUB,
    KV_CLIENT_MASTER
};

/* Which clients a CLIENT LIST or KILL is about: every test given. */
typedef struct kv_client_filter {
    int type;            /* KV_CLIENT_*; -1: any */
    uint64_t id;         /* that id (0: any) */
    const resp_arg *ids; /* LIST ID: a line for each of these ids, in
                            their order (each an integer) */
    size_t nids;
    const resp_arg *addr;  /* that peer, as CLIENT LIST's addr (NULL: any) */
    const resp_arg *laddr; /* that local end, as its laddr (NULL: any) */
    bool users;            /* USER default: not a replica's primary, whose
                              user is (superuser) */
    bool skipme;           /* not the client that asked */
} kv_client_filter;

/* CLIENT LIST's connection fields, the owner's (kv_client_line). */
enum { KV_CF_REPLICA = 1, KV_CF_MASTER = 2, KV_CF_CLOSING = 4, KV_CF_UNIX = 8 };
typedef struct kv_conn_info {
    uint64_t id;
    const char *addr, *laddr; /* "ip:port", a Unix socket's "path:0" */
    int fd;                   /* -1: none */
    uint64_t age, idle;       /* seconds since it connected, since it sent */
    unsigned flags;           /* KV_CF_* */
    size_t qbuf, qbuf_free, argv_mem, rbs, rbp, obl, oll, omem, tot_mem;
    const char *events; /* "r" reading, "w" writing */
} kv_conn_info;

/* Appends a client's CLIENT LIST line (with its "\n"): ci's fields and
 * cl's own (cl NULL: a replica's link to its primary, which has none). */
void kv_client_line(const kv_client *cl, const kv_conn_info *ci, buf *out);

void kv_client_init(kv_client *cl, void *owner, buf *out);
/* The client goes (or stops listening): its subscriptions, queued
 * commands and name are dropped. Idempotent. */
void kv_client_reset(kv *k, kv_client *cl);
/* A replica's keyspace `emptied` is replaced by `with` (a full resync's
 * snapshot, once whole; NULL: by none, a replay of the log from 0 to
 * come), between commands, before `emptied` is freed: as Redis 7's
 * touchAllWatchedKeysInDb, the EXEC of a client watching a key that was
 * in `emptied` or is in `with` fails; a watch of a key in neither holds.
 * A snapshot cut short replaces nothing, and calls nothing. */
void kv_watch_touch_all(kv *k, const store *emptied, const store *with);
static inline bool kv_client_subscribed(const kv_client *cl) {
    return cl->subs[0].count + cl->subs[1].count > 0;
}

struct kv {
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
    bool link_up;    /* handshake done, any snapshot taken, link open */
    uint64_t offset; /* bytes of the primary's log applied */
    /* The sync point of the current history: a PUBLISH record before it
     * was published before this replica synced (a full resync replays
     * the log from 0), and is applied without a word to subscribers. Set
     * by each full resync, kept by a continue. */
    uint64_t quiet_until;
    /* A transaction not all in yet (its MULTI at `offset`): the bytes from
     * its MULTI already found to be whole records before its EXEC, so that
     * the next call scans on from there. 0: none. The owner zeroes it when
     * the stream starts over (a new link). */
    size_t txn_scanned;
    /* The last kv_apply_stream failed inside a transaction with some of
     * its records applied: the keyspace is at no offset of the primary's
     * history (the owner's next sync must be a full one). */
    bool torn;
    /* Both: */
    size_t max_string; /* proto-max-bulk-len: a client's APPEND may not
                          grow a string past it (0: no bound) */
    size_t clients;    /* open client connections (INFO) */
    uint64_t last_id;  /* the last client's id: the owner numbers them */
    bool requirepass;  /* a password is set: RESET signs a client out */
    int tcp_port;      /* the TCP port listened on (INFO server; 0: none) */
    int64_t start_ms;  /* when the server started, on `clock` (INFO
                          server's uptime) */
    const char *const (*config)[2]; /* CONFIG GET: name, value pairs */
    size_t nconfig;
    /* Time. The owner's clock, in ms on the Unix epoch: expiry times are
     * kept, logged and compared in it. NULL: the real time of day (the
     * tests that do not care). Read at most once per command (cmd_now). */
    int64_t (*clock)(kv *k);
    void *owner;     /* the server, for `clock` */
    int64_t cmd_now; /* the current command's now; 0 until read */
    /* The earliest expiry may have moved (a key got, changed or lost its
     * expiry): the owner re-arms its timer for store_first_expiry. */
    bool expiry_changed;
    /* kv_expire_due left a due key in place, its DEL finding no memory in
     * the log: the owner's timer tries again later, not at once. */
    bool expire_waits;
    /* The command running asked the log for room (kv_log_room): a DEL its
     * lookups log fits. Without it (a read) an expired key whose DEL finds
     * no memory is left for the timer. */
    bool room_reserved;
    /* The room EXEC asked for its writes (0: none, or not in EXEC), and
     * the log's end and record count then: what is left of it is asked
     * for again by whatever else logs inside the transaction (a read's
     * DEL of an expired key, SPOP's records), which must not take it. */
    size_t exec_room, exec_nrec, exec_rec_from;
    uint64_t exec_from;
    /* Running a record of the primary's (a replica): every key is seen as
     * it is (expiry is the primary's to decide), and writes are allowed. */
    bool applying;
    /* A snapshot's record running (link.c), into a keyspace of the
     * link's, not k->db's: no client saw its writes, so they touch no
     * watch, a FLUSHALL's neither (as Redis' loading of an RDB);
     * kv_watch_touch_all compares the keyspaces once the snapshot
     * replaces the old one. */
    bool loading;
    /* EXEC running: the first write logs MULTI before it, and EXEC ends
     * the run, so a replica applies the transaction as a unit. */
    bool in_exec;
    bool multi_logged;
    /* WATCH: key -> its first watcher (kv_watch *), only keys watched. */
    dict watched;
    /* Pub/sub: channel or pattern -> its subscribers (kv_chan). */
    dict channels;
    dict patterns;
    /* Subscriptions looked at or looked up by (P)SUBSCRIBE and
     * (P)UNSUBSCRIBE: what the tests measure their cost by. */
    uint64_t pubsub_steps;
    /* The watches WATCH looked at for one already there (tests). */
    uint64_t watch_steps;
    /* A message was added to cl->out outside its own command: the owner
     * sends it (and holds the client to its output limit). */
    void (*wake)(kv_client *cl);
    /* cl's first subscription began or its last ended (its output limit
     * is the other class's now), or NULL. */
    void (*class_changed)(kv_client *cl);
    /* INFO stats: the owner's lines (what its event loop counted), or
     * NULL: the section has its header only. */
    void (*stats)(kv *k, buf *b);
    /* CLIENT LIST and INFO: the owner appends the line (kv_client_line) of
     * each of its clients that f matches, oldest first (false: out of
     * memory). CLIENT KILL: it closes those (the asking client cl once
     * its reply is out) and returns how many. NULL: the owner has no
     * clients but cl (tests). */
    bool (*client_list)(kv *k, kv_client *cl, const kv_client_filter *f,
                        buf *out);
    long long (*client_kill)(kv *k, kv_client *cl, const kv_client_filter *f);
    /* AUTH with 2 or more arguments, run where Redis runs it: at once,
     * or from EXEC's queue. The owner checks the password and may mark
     * the client authenticated. NULL: no password is set (tests). */
    void (*auth)(kv_client *cl, const resp_arg *a, size_t argc, buf *out);
    /* GET of a blob (blob.h) for client cl: the owner puts its reply in
     * cl->out by reference, sending the bytes where they are (it holds
     * the blob until they are written); false when it cannot (the reply
     * is copied then). NULL: always copied. */
    bool (*reply_blob)(kv_client *cl, const char *bytes, size_t len);
    /* The bytes of a blob holding the last argument of the command being
     * run (received into it, conn.c), or NULL: SET keeps it as the value
     * instead of a copy, and sets this NULL (the blob is the store's
     * then); else the owner frees it after the command. */
    char *arg_blob;
    /* A record parsed by kv_parse_record asks for a longer argument table
     * (RESP_GROW, lim.grow_args): the owner makes its table n entries or
     * longer and returns it (NULL: out of memory). NULL: lim.grow_args
     * is 0 (tests). */
    resp_arg *(*grow_args)(kv *k, size_t n);
    /* Test only: known replication bugs planted on purpose (KV_PLANT_*),
     * which the simulator (sim.c) must find. 0 in lull-kv itself. */
    uint64_t plant;
    buf held; /* KV_PLANT_ACK_BEFORE_LOG: the write not logged yet */
    size_t held_argc;
    /* CONFIG SET name value: NULL (set: +OK), or the error line to answer;
     * "" for a parameter the owner does not set. NULL: none is set. */
    const char *(*config_set)(kv *k, const resp_arg *name,
                              const resp_arg *value);
};

/* The planted bugs (kv.plant). */
enum {
    /* A replica that continues from its offset is sent the log from one
     * record later: one write is never applied there. */
    KV_PLANT_RESUME_LATE = 0x1,
    /* A write is acknowledged before it is in the log: its record goes in
     * with the next write (so the last one never reaches a replica). */
    KV_PLANT_ACK_BEFORE_LOG = 0x2,
    /* Keys the expiry timer deleted are logged as DELs, but the replica
     * links are not woken to send them. */
    KV_PLANT_LOST_WAKEUP = 0x4,
};

void kv_init(kv *k); /* store_init's error aside: 0 or -ENOMEM */
void kv_free(kv *k);

enum {
    KV_QUIT = 0x1,   /* QUIT: close once the reply is out */
    KV_SERVER = 0x2, /* REPLSYNC: the server runs it (nothing was
                        written to out) */
};

/* Runs one client request (argc > 0); the reply goes to out. cl may be
 * NULL (a client without state of its own: tests). Returns KV_* flags. */
int kv_exec(kv *k, kv_client *cl, const resp_arg *a, size_t argc, buf *out);

/* Applies every complete record at the front of bytes[0, len) (parsed
 * into argv, of lim->max_args entries; one of more, up to lim->grow_args,
 * into the table k->grow_args gives) and adds
 * their bytes to k->offset. Returns the bytes taken (the rest waits for
 * more: *need is how many of the rest must be there before another call
 * can take any, see resp_parse_need), or -EPROTO with *err set: a request
 * that is not multibulk, a protocol error, or a record that is not a
 * write or that fails (the two keyspaces have diverged); or -ENOMEM.
 * A transaction (MULTI ... EXEC) is applied once it is all in, and only
 * if each of its records is a logged write with its arguments; one that
 * fails as it runs sets k->torn. */
long kv_apply_stream(kv *k, const resp_limits *lim, resp_arg *argv,
                     const char *bytes, size_t len, const char **err,
                     size_t *need);

/* resp_parse_need of one record into *argv, which k->grow_args lengthens
 * while the parser asks for room (RESP_GROW; lim->max_args follows it).
 * RESP_GROW: out of memory, *err says so. */
long kv_parse_record(kv *k, resp_limits *lim, resp_arg **argv,
                     const char *bytes, size_t len, size_t *argc,
                     const char **err, size_t *need);

/* Expires the keys whose time has come (a primary: each is deleted and
 * a DEL logged), oldest first, while more_ok() says so; returns how many
 * it deleted. The owner calls it from its expiry timer. */
size_t kv_expire_due(kv *k, bool (*more_ok)(void *arg), void *arg);

/* Redis' integer: an optional '-', digits without a leading zero, within
 * int64; no '+', no spaces. */
bool kv_parse_i64(const char *p, size_t n, long long *out);

/* INFO [section ...]: the n sections named (server, clients, memory, stats,
 * replication, keyspace), each once, in that order; none, or "all",
 * "default" or "everything" among them, gives them all. */
void kv_info(kv *k, const resp_arg *sections, size_t n, buf *out);

#endif
