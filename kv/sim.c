/* lull-kv-sim: lull-kv's replication proven on a simulated network
 * (docs/SIMULATION.md).
 *
 * Each seed builds a cluster in one process, on one virtual-clock loop,
 * over lull_simnet: a primary, one to three replicas and one to four
 * clients, every connection with faults drawn from the seed (delay,
 * jitter, bandwidth, windows, slow readers, partitions that resume or
 * break, resets at a random byte, refused connects). The clients run a
 * random workload of strings (SETRANGE too), lists (LREM, LSET, LTRIM,
 * LINSERT, LMOVE, RPOPLPUSH, LRANGE, LPOS too; RPUSH of up to 200
 * items), hashes (HSET, HSETNX, HDEL, HINCRBY, HINCRBYFLOAT, read by HGET,
 * HGETALL, HLEN), sets (SADD, SREM, SMOVE, SPOP, SRANDMEMBER, the
 * SINTER/SUNION/SDIFF of two keys and their STORE into one of them),
 * sorted sets (ZADD's options, ZINCRBY, ZREM, ZPOPMIN, ZPOPMAX, ZRANGE
 * with REV and WITHSCORES, by score with exclusive and infinite bounds,
 * REV and LIMIT, ZCOUNT, ZRANK, ZREVRANK, ZMSCORE, ZREMRANGEBYSCORE and
 * BYRANK), sets and sorted sets of up to 207 (past lull-kv's SCAN_WHOLE)
 * walked by SSCAN and ZSCAN (every member there for the whole walk comes
 * back), every type on every key (WRONGTYPE), RENAME and
 * RENAMENX of two keys, integers at the 2^31/2^32/2^63 edges, values from 0
 * bytes to past the log's chunk size, absolute and relative expiry times (past,
 * soon, hours ahead; SETEX, PSETEX and EXPIRE, whose expiry the model knows
 * only within the command's window; PEXPIREAT's NX, XX, GT and LT), multi-key
 * MSET, MSETNX, MGET and DEL, and transactions (an eighth with a command the
 * server refuses to queue), with pipelining; a client whose connection fails
 * reconnects, and first deletes the keys whose last commands it cannot know the
 * fate of. Half the seeds run with small log chunks and small stream buffers;
 * half with values of 64 KiB and more, overwritten with equal-length ones that
 * differ from a random byte on; half with clients that hang up with requests in
 * flight (most often on a big read). When the clients are done the network
 * heals and the cluster settles. The server is lull-kv's own code (node.c,
 * conn.c, link.c, cmd*.c), the socket program's, over a kv_net of the simulated
 * network's. A third of the seeds (`extra`) also send KEYS and SCAN MATCH
 * COUNT walks of a client's keys, HSCAN (for half the HGETALLs), run
 * pub/sub on the primary and on a replica (ps_start), and in half of
 * those FLUSHALL or FLUSHDB once the clients are done, so the replicas
 * must end empty too. Half the seeds (`grow`) also run the bulk writer
 * (bulk_start): a list, a set, a hash and a sorted set kept at and across
 * a snapshot's batch edges, and one replica that starts late, from a
 * snapshot of them (the clients' own collections rarely outlive their
 * other commands long enough to meet a snapshot).
 *
 * Checked, per seed (docs/SIMULATION.md has what this proves and what
 * it cannot see):
 *   - every reply a client got is one the reference model (model.c)
 *     allows for that command at some instant between its send and its
 *     reply;
 *   - a key set with PX n is there until n ms after its client sent the
 *     SET, and gone 1 ms after that (the prober, on a clean link, and
 *     the clients' own TTL probes): the model shares the server's expiry
 *     rule, these do not; and, in one ms, a key set to expire at it is
 *     there, and PEXPIREAT to it deletes it (the prober's same-ms batch);
 *   - after every network event: each replica's offset is a record
 *     boundary of the primary's log, never inside a transaction, never
 *     going back (but to start a new history); it never holds a
 *     transaction's pair unequal (an atomicity probe, also read over the
 *     network by a client of a replica); one that has applied the whole
 *     log holds the primary's keyspace, expiry times included, so a
 *     divergence is named (key, both values, offset) when it happens;
 *     no replica serves a key past its time (its first to expire, read
 *     with EXISTS), nor hides one at it; once per ms of its clock, no key
 *     the primary held past its time at the last look is still there
 *     (its expiry timer deletes each, which no read would show); no
 *     wakeup is lost: every link behind the log has its sender posted or
 *     waits for a drain, and the expiry timer is armed for the first key
 *     to expire;
 *   - a log line a correct cluster never writes (a malformed record,
 *     ...) fails the seed at once, as logged; a replica that drops its
 *     link says why;
 *   - KEYS names each key the model allows there at some instant of
 *     its window, and none it says is gone throughout (key by key); a
 *     SCAN MATCH walk names only keys there at some instant since its
 *     first step, and by cursor 0 every one there at every reply since;
 *   - the bulk writer's (`grow`): each reply is the count or item its
 *     collections give, and its SSCAN, HSCAN and ZSCAN walks of them
 *     (nothing else walks a hash past 128) name only what is there, 128
 *     or fewer whole (a sorted set's in order), and all by cursor 0;
 *   - each PUBLISH answers how many got it; each subscriber gets, byte
 *     for byte and in order, every message of its channels and patterns
 *     published on its node, once, and nothing else (after UNSUBSCRIBE
 *     and PUNSUBSCRIBE too); a replica's also gets the primary's, each
 *     once, in the log's order, none logged before the sync point of the
 *     replica's history (a full resync delivers no old message), and by
 *     its end every one logged from it on the channels it keeps;
 *   - at the end every key the clients know holds what the model says,
 *     on the primary; every replica's link is up, at the primary's
 *     offset, with its keyspace byte for byte (pending TTLs too); what
 *     did not settle is diagnosed against the log replayed to the
 *     replica's offset; the primary has every replica's acknowledgement
 *     of that offset, one link each, and holds no key past its time;
 *   - then, in a quarter of the seeds, the primary restarts (a last write
 *     of up to 64 KiB in flight): empty, with a new replid; each replica
 *     must drop the old history (keys, offset, a partial record) in a
 *     full resync and end as above with the new primary;
 *   - over a run, each fault kind drawn in 50 seeds had its effect;
 *   - progress: a seed that runs past 1,000 network events per command
 *     of its workload, or past TURNS_PER_INSTANT loop turns at one
 *     virtual instant with no network event, loops, and fails "no
 *     progress" (no_progress);
 *   - nothing is left: every connection closed, lull_simnet_free and
 *     lull_loop_free return 0.
 * A failure prints its seed, the command that replays it, and the end of
 * its trace (written to a file by a second run of the seed, which must
 * fail the same way, with the same trace hash).
 *
 *   lull-kv-sim [--seeds N] [--first S] [--seconds T] [--seed S]
 *               [--plant BUG] [--expect-find N] [--determinism N]
 *               [--trace FILE] [--quiet] [--streams] [--event-budget N]
 *               [--hang-seconds N]
 *     --seeds N        seeds S..S+N-1 (default 100; --first S, default 1)
 *     --seconds T      fresh seeds for T whole seconds (the soak); the first
 *                      is printed
 *     --seed S         one seed; with --trace FILE (- for stdout) its
 *                      trace
 *     --plant BUG      plant a known bug (resume-late, ack-before-log,
 *                      lost-wakeup, expire-relative, multi-split,
 *                      chunk-edge, int32, silent-resync, expire-early,
 *                      batch-death, expire-now, same-length,
 *                      snapshot-ttl, ltrim-off, hincrby-set, lrange-end,
 *                      setrange-shrink, expire-gt, exec-arity,
 *                      snap-list-batch, resume-caught-up,
 *                      lrem-direction, outf-resend, ack-spin,
 *                      msetnx-partial, lpos-tail, expire-seconds,
 *                      smove-same, zpop-past, setstore-source,
 *                      zscore-exclusive, zremrank-negative, scan-skip,
 *                      blob-inplace, resume-replid,
 *                      publish-pattern, scan-match-end,
 *                      flush-unlogged, publish-unlogged,
 *                      publish-again: lull-kv's;
 *                      hollow-partition: the network's; short-write-
 *                      resend, short-write-drop: the stream path's; hang,
 *                      crash: the simulator's own, for --hang-seconds and
 *                      the crash report, crash_signal); with
 *                      --expect-find N, succeed when a seed of the first N
 *                      finds it, fail when none does
 *     --determinism N  a fault-free run of N commands, twice: the traces'
 *                      hashes must be equal; with --once, one run, its
 *                      hash printed (to compare across processes:
 *                      kv/sim_determinism.cmake)
 *     --unread-close   one directed run: a replica closes its link with
 *                      bytes the primary has not read (kv.sim_replica_
 *                      close_unread)
 *     --event-budget N each seed fails "no progress" past N network
 *                      events (default: 1,000 per command of its
 *                      workload, EVENTS_PER_COMMAND): the watchdog's test
 *     --hang-seconds N a seed that has not returned after N seconds of
 *                      real time (default 30) is named and fails: one
 *                      spinning inside a call, or waiting on sockets
 *                      (hang_arm)
 *     --streams        lull-kv's connections as lull streams on
 *                      socketpairs, with the fault shim's seeded plan
 *                      under them (the section "--streams" below); the
 *                      plants short-write-resend and short-write-drop
 *                      turn it on
 * Exit status: 0 when every seed passed (or the planted bug was found). */
#define _POSIX_C_SOURCE 200809L
#include "server.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dump.h"
#include "fault_shim.h"
#include "model.h"
#include "types.h"

#define MS 1000000ull
/* The servers' clock reads this (ms on the Unix epoch) at virtual 0. */
#define BASE_MS      1700000000000ll
#define KEYS         6  /* keys per client */
#define PIPE_MAX     4  /* requests a client may have in flight */
#define SIM_ARGS     64 /* a server's argument table: the workload's need */
#define REPLICAS_MAX 3
#define CLIENTS_MAX  4
/* A large value's pad: up to ~5 KB, past a small log chunk. */
#define PAD_MAX 4900
/* A big value (big seeds): 64 KiB and more, a reply handed to the stream
 * whole (REPLY_HANDOVER). */
#define BIG_MIN (64u << 10)
/* A run that has not settled this long (virtual) after the heal failed. */
#define SETTLE_NS (600 * 1000 * MS)
/* Clients that are not done by then are helped: the network heals. */
#define WORKLOAD_NS (300 * 1000 * MS)
/* The progress watchdog's budget of network events: this many per command
 * the clients were given, plus 100 commands' worth for the prober, the
 * reader and the settling. Measured (2,000 seeds, and 300 with --streams):
 * at most 90 events per command, where a 64 KiB value goes in one-byte
 * segments; so only a loop uses a budget eleven times that, and the
 * largest seed's (1,780,000 events) runs out in a second or two of CPU. */
#define EVENTS_PER_COMMAND 1000
/* The watchdog's budget of loop turns in a row at one virtual instant with
 * no network event among them (run_loop): a task that re-posts itself at
 * one instant, which the network's budget never sees, since the network
 * does not run. Each turn runs one callback (quantum_ns, run_seed).
 * Measured (2,000 seeds, and 300 with --streams): at most 450 and 592
 * such turns; 100,000 is a loop, which uses them up in a fraction of a
 * second. */
#define TURNS_PER_INSTANT 100000

typedef struct sim sim;

typedef struct node {
    server srv; /* first: the server's hooks find the node */
    sim *S;
    lull_simserver ls; /* the primary's listening address */
    char name[24];
    uint64_t last_offset; /* for "offsets never go backwards" */
    char last_replid[41];
    uint64_t compared; /* the offset its keyspace was last compared at + 1 */
    bool why_down;     /* a replica said why its link went down */
    /* The sync point of its history: the primary's log end when it took
     * the REPLSYNC that began it (its newest link's start). A message
     * logged before it must not reach this replica's subscribers; one
     * from `sync_owed` on must. The two differ when the link was gone by
     * the time the history was seen begun (over --streams its EOF can
     * come in the same event): 0 and the log's end then bound it. */
    uint64_t sync_point, sync_owed;
    /* It logged a full sync: a new history, though its replid may read
     * the same at the next look (a snapshot begun and loaded in one
     * event clears it and sets it back); 2: from a snapshot. */
    int full_seen;
    uint64_t backoff_ms;  /* its next retry's wait by link.c's rule; 0: 100 */
    uint64_t backoff_was; /* backoff_ms's wait as its last handshake came
                             (100 for 0); 0: no handshake since the last
                             retry */
    uint64_t up_ns;       /* when that handshake came (virtual ns, as
                             link.c compares them) */
} node;

/* P_MKEY: MSET, MGET, DEL or MSETNX of 2 or 3 of the client's keys,
 * checked key by key (cmd[i].op: OP_SET, OP_MGET_ONE, OP_DEL, OP_SET_NX). */
/* P_KEYS: KEYS, or a step of a SCAN MATCH walk (keys_send). */
enum { P_CMD, P_MULTI, P_FORGET, P_TTL_SET, P_TTL_GET, P_MKEY, P_QUIT, P_KEYS };

/* A request in flight: one command, a transaction, or the DEL that
 * forgets the keys a failed connection left uncertain. */
typedef struct pending {
    int kind;
    int ncmd;
    model_cmd cmd[3];
    int key[3];
    int key2[3];      /* RENAME's, LMOVE's second key; key's otherwise */
    int step;         /* P_MULTI: replies taken (MULTI, QUEUED...) */
    int bad;          /* P_MULTI: the step whose command is refused (an unknown
                         name, the wrong arity), so EXEC discards all; 0: none */
    uint64_t sent_ns; /* when it was sent */
    /* P_TTL_GET: the probe's SET as it was when this GET left (later
     * SETs in the pipeline run after it). */
    uint64_t ttl_sent_ns, ttl_done_ns;
    int ttl_px;
    unsigned ttl_seq;
    int pat;   /* P_KEYS: its pattern (key_pats) */
    bool walk; /* P_KEYS: a SCAN step, not KEYS */
} pending;

/* C_HUNG_UP: it closed with requests in flight (hang_up), and waits for
 * its close callback to connect again. */
enum { C_DOWN, C_CONNECTING, C_UP, C_CLOSING, C_DONE, C_HUNG_UP };

/* The atomicity reader: a client of a replica that reads every client's
 * pair (cN:pa, cN:pb, which only transactions write, both with one tag)
 * in one MGET, again and again while the workload runs: it must never
 * see them differ, which is half a transaction applied. */
typedef struct reader {
    lull_simconn c;
    lull_timer timer;
    buf in;
    int replica; /* the node it reads */
    bool live;   /* connecting or connected: its close callback owed */
    bool up, waiting, closing;
    uint64_t reads; /* MGETs checked */
} reader;

/* The expiry prober: a client on a clean link (no delay, nothing slow,
 * no partition: a command runs at the instant it is sent) that sets
 * probe:ttl with PX n and reads it back in the last millisecond before n
 * ms have passed since its SET left, and again n + 1 ms after: found,
 * then gone. A key that goes before its time, as a client timing from
 * before its SET sees it, or stays past it, is caught here, where the
 * model (which shares the server's rule) cannot see it. */
typedef struct prober {
    lull_simconn c;
    lull_timer timer;
    buf in;
    int step; /* 0: SET in flight, 1: the early GET, 2: the late, 3-6:
                 the same-ms batch (probe_now) */
    bool up, closing;
    uint64_t set_ns; /* the SET's send */
    int px;
    unsigned seq;
    uint64_t probes; /* SETs whose GETs were both checked */
    int64_t now_ms;  /* the same-ms batch's instant */
} prober;

/* The flood (a quarter of the seeds, drawn apart): on a clean link of a
 * 4 KiB window to the primary, one SET of a 4 KiB value, then bursts of
 * GETs of it (each with a 200-byte key) sent without reading a reply, the
 * replies read only once all were sent. A connection's output is held
 * near its stream's high-water mark however many requests one read
 * brings (conn.c's run_batch stops and reading stops until on_drain):
 * check_flood bounds it after every network event, where the clients'
 * pipelines (PIPE_MAX) never ask for more than 4 replies. */
#define FLOOD_BURSTS 8
#define FLOOD_GETS   32
#define FLOOD_VAL    4096
#define FLOOD_KEY    200

typedef struct flooder {
    lull_simconn c;
    lull_timer timer;
    buf in;
    bool up, closing;
    int bursts;       /* sent */
    uint64_t replies; /* read */
    size_t max_out;   /* the most the primary held for it */
} flooder;

/* The bulk writer (seeds with `grow`): on a clean link to the primary, a
 * list, a set, a hash and a sorted set (big:l, big:s, big:h, big:z, which
 * nothing else writes) built to sizes at a snapshot's batch edges
 * (SNAP_BATCH items a record: 127 to 129, 255 to 257, 383 to 385) or
 * anywhere up to 600, then stepped an item over and back across them
 * while the clients run, so that a full resync's snapshot meets each kind
 * of collection whole batches and one past. The clients' own collections
 * rarely are (their other commands overwrite them), so a snapshot's
 * batching went untried in most seeds. Each holds items lo..hi-1 (i<n>,
 * m<n>, field f<n> = v<n>, m<n> scored n % 13 - 6), and each reply must
 * be the count or item that gives; now and then a step is a walk of one
 * by its SCAN (bulk_scan_reply), or a SET of big:t KEEPTTL, a string
 * with an expiry. One command at a time. */
#define BULK_TYPES 4
#define BULK_STEPS 400 /* steps at most (the watchdog's budget) */
typedef struct bulker {
    lull_simconn c;
    lull_timer timer;
    buf in;
    uint64_t rng;
    bool live, up, closing;
    int type;    /* the command in flight's collection; BULK_TYPES: big:t */
    int64_t ttl; /* big:t's expiry time (0: not set yet) */
    int lo[BULK_TYPES], hi[BULK_TYPES], target[BULK_TYPES];
    char want[32]; /* the reply it must get */
    int steps;
    uint64_t checked; /* replies checked */
    /* A walk of big:s, big:h or big:z (scan > 0: its type) by SSCAN,
     * HSCAN or ZSCAN, nothing written meanwhile: each step names only
     * items there (a hash's with its value, a sorted set's with its
     * score), a collection of SCAN_WHOLE or fewer comes whole at once
     * (a sorted set's in its order), and by cursor 0 every item came. */
    int scan;
    uint64_t cursor;
    unsigned char *seen; /* per item lo..hi-1 */
    uint64_t walks;      /* walks checked whole */
} bulker;

typedef struct client {
    sim *S;
    int id;
    lull_simconn c;
    int state;
    pending q[PIPE_MAX];
    int qhead, qlen;
    buf in;
    model_key *keys; /* [KEYS], in client_keys */
    bool unknown[KEYS];
    int64_t lb; /* no command from now on runs before this (ms) */
    int remaining;
    int depth;
    uint64_t rng;
    lull_timer timer; /* think time, reconnect */
    uint64_t replies;
    /* The TTL probe: SET cN:ttl <seq> PX <px>, timed by the client from
     * before its send, then GETs: found until px ms after that send (a
     * key never goes early), gone from px + 1 ms after its reply (nor
     * late). */
    int ttl_state;        /* 0: none known, 1: SET in flight, 2: SET done */
    uint64_t ttl_sent_ns; /* the SET's send */
    uint64_t ttl_done_ns; /* its reply */
    int ttl_px;
    unsigned ttl_seq;
    unsigned tags; /* transactions that wrote the atomicity pair */
    /* The key + 1 of an LREM just made, whose whole list the client's
     * next command reads (LRANGE k 0 -1); 0: none. */
    int lrem_read;
    char set_last[KEYS][8]; /* per key, the member its last SADD added */
    bool quitting; /* QUIT sent (--streams): nothing more on this link */
    /* --streams: every link of this client is clean, no fault that ends a
     * connection on it (the network's resets, breaks and refusals; the
     * plan's resets and ENOBUFS), only those that slow or cut the bytes:
     * it ends only as the client asks (client_closed). */
    bool clean;
    /* An SSCAN or ZSCAN walk under way (scan_step): its key (-1: none),
     * command, next cursor, whether a step is in flight and whether the
     * first came back (then scan_must[id] holds the members there since,
     * scan_seen[id] those the replies named). */
    int scan_key, scan_op;
    uint64_t scan_cursor;
    bool scan_flying, scan_begun;
    /* A SCAN MATCH walk of the keyspace (seeds with `extra`): its pattern
     * (key_pats; -1: none), next cursor, a step in flight, the first
     * back; and of the client's keys (bit i: cN:ki) those there at every
     * reply since its first step, there at some instant since, and named
     * by its steps. */
    int ks_pat;
    uint64_t ks_cursor;
    bool ks_flying, ks_begun;
    unsigned ks_must, ks_ever, ks_seen;
} client;

/* Pub/sub (seeds with `extra`): on a node, a publisher and two
 * subscribers on clean links (ps_start). Each subscriber's ring holds
 * the replies and messages it must get next, byte for byte, in order. */
#define PS_WANT     128
#define PS_WANT_LEN 80
/* Messages a group publishes at most: 34 + 12 (ps_advance's draws). */
#define PS_MSGS 64
typedef struct ps_conn {
    lull_simconn c;
    struct ps_group *g;
    buf in;
    int role; /* 0: the publisher, 1: SUBSCRIBE ch:0 ch:1, 2: PSUBSCRIBE
                 ch:* and SUBSCRIBE ch:1 */
    bool live, up;
    unsigned subs; /* 1: ch:0, 2: ch:1, 4: ch:* */
    /* The primary's messages on a replica's subscriber (ps_primary_msg):
     * the subscriptions it began with and those whose dropping was
     * confirmed; the last one got (2 J + 1 for a pmessage of message J:
     * they come in that order, once each); the messages got, by J. */
    unsigned subs0, dropped;
    int last0;
    uint64_t got0;
    /* The sync point its messages are held to: the replica's history's
     * as of the reply to a PING sent when the history began (messages
     * before that reply may be of the history before), and those of the
     * PINGs still unanswered, oldest first. */
    uint64_t sync, sync_next[4];
    int pings;
    char want[PS_WANT][PS_WANT_LEN];
    uint8_t want_len[PS_WANT];
    int whead, wlen;
} ps_conn;

/* phase 0: subscribing; 1: publishing; 2: A drops ch:1, B ch:*; 3:
 * publishing again; 4: every ring empty (the primary's publisher then
 * sends FLUSHALL in seeds with `flush`, once the clients are done); 5:
 * closed. */
typedef struct ps_group {
    struct sim *S;
    int node;
    int phase, left, seq, depth;
    /* A replica's group: the replica's offset once its subscriptions
     * were confirmed (the primary's messages logged from there on are
     * owed to them, ps_owed). */
    uint64_t sub_off;
    bool flush_sent;
    lull_timer timer;
    ps_conn conn[3];
} ps_group;

/* A planted bug of the network's, not lull-kv's: partitions that hold
 * nothing (LULL_SIMNET_HOLLOW_PARTITIONS). */
enum { PLANT_HOLLOW_PARTITION = 0x10000 };
/* The simulator's own planted bug, for its seed watchdog (hang_arm): a
 * client's frame callback that never returns. Above lull-kv's bits. */
#define PLANT_HANG (1ull << 48)
/* And for its crash report (crash_signal): a client's frame callback that
 * aborts. */
#define PLANT_CRASH (1ull << 49)

struct sim {
    uint64_t seed;
    uint64_t plant;
    FILE *trace;
    lull_loop *loop;
    lull_simnet *net;
    uint64_t rng;       /* the workload's choices */
    uint64_t yield_rng; /* slice ends (should_yield) */
    node nodes[1 + REPLICAS_MAX];
    int nreplicas;
    client clients[CLIENTS_MAX];
    int nclients;
    prober probe;
    flooder fl;
    bool flood; /* the flood runs (drawn apart, from the seed) */
    reader rd;
    int active; /* clients not done */
    bool healed;
    bool failed;
    char why[1024];
    lull_timer deadline; /* WORKLOAD_NS, then SETTLE_NS */
    /* The progress watchdog (no_progress): network events so far, and the
     * most a seed with this workload takes (EVENTS_PER_COMMAND). A loop
     * in lull-kv at one virtual instant never reaches `deadline`. */
    uint64_t events, event_budget;
    bool stuck; /* the budget ran out: every run of the loop stops */
    /* The watchdog's other half (run_loop): loop turns since the virtual
     * clock or the network last moved, and where they were then. A task
     * that re-posts itself at one instant moves neither. */
    uint64_t turns, turns_at, turns_events;
    bool stop_asked; /* the sim stopped the loop: run_loop returns */
    bool per_record;
    size_t repl_limit;      /* replica output limit (0: Redis' default) */
    uint64_t limit_log_end; /* the primary's log end check_link_limits saw */
    size_t high_water;      /* the primary's connections' (0: default) */
    size_t chunk_size;      /* the write log's chunks (0: REPL_CHUNK) */
    uint64_t backlog;       /* the primary's repl-backlog-size (0: default) */
    /* The primary's whole log, which its own trims to the backlog: each
     * byte and record start copied before a trim can free it (the log's
     * `pinned` hook), for the checks that replay it from 0. */
    buf arch;
    uint64_t *arch_starts;
    size_t arch_nrec, arch_cap;
    bool small;                  /* small chunks and stream buffers */
    lull_simfaults clean_faults; /* the seed's profile, less what ends a
                                    connection: a clean client's */
    bool no_faults;              /* --determinism */
    int64_t commands;            /* --determinism: the total */
    uint64_t cmds_run;           /* commands whose replies were checked */
    bool tearing_down;           /* the checks are over */
    uint64_t multis;             /* transactions sent */
    uint64_t lost;               /* client connections lost */
    uint64_t continues;          /* replicas resumed from their offsets */
    uint64_t fulls;              /* full resyncs */
    /* Fault profiles drawn with each kind on (random_faults): a kind
     * drawn again and again must show its effect (fault_effects). */
    uint64_t drawn_partitions, drawn_resets, drawn_slow, drawn_refusals;
    /* A quarter of the seeds: once the checks passed, the primary
     * restarts empty, with a new history, and every replica must drop
     * what it holds and follow it (restart_primary). */
    bool restart;
    lull_timer restart_t; /* the new primary's start */
    uint64_t restarts;    /* primaries restarted */
    /* The first primary's counters, when it restarted. */
    uint64_t old_over_limit, old_expired;
    int64_t expiry_checked;    /* the primary's ms last looked at */
    const dict_entry *overdue; /* a key past its time at that look */
    int64_t overdue_expire;    /* its time */
    bool primary_down;         /* stopped, until it restarts */
    /* Half the seeds: big values, all big_len bytes (0: none), which SETs
     * overwrite with equal-length ones differing from a random byte on
     * (big_value). */
    uint32_t big_len;
    /* Half the seeds: a client hangs up with requests in flight after one
     * send in `hangup` (0: never), so the primary runs a batch it can
     * no longer answer (hang_up). */
    uint32_t hangup;
    uint64_t bigs;       /* big values set */
    uint64_t same_len;   /* of them, aimed at a key holding a big value */
    uint64_t hangups;    /* clients that hung up */
    uint64_t scans;      /* SSCAN and ZSCAN walks checked whole */
    uint64_t scan_parts; /* their steps that gave a cursor to go on */
    /* A third of the seeds (drawn apart from the workload's stream, from
     * `xrng`): the clients send KEYS and SCAN MATCH walks, pub/sub runs
     * on the primary (and on a replica in half of them), and in half of
     * them the primary gets a FLUSHALL once the clients are done. */
    bool extra, flush;
    uint64_t xrng;
    ps_group ps[2];
    int nps;
    /* The primary's group's messages (n0.J, J from 1): each one's channel
     * and its record's offset in the primary's log (found in the
     * archive: ps_record_at), and the log's end once every one was
     * answered (0: not yet). */
    int8_t ps0_chan[PS_MSGS];
    uint64_t ps0_off[PS_MSGS];
    int ps0_found;
    uint64_t ps0_end;
    uint64_t keys_checked; /* KEYS replies checked */
    uint64_t kwalks;       /* SCAN MATCH walks checked whole */
    uint64_t pushes;       /* pub/sub messages checked */
    uint64_t forgotten;    /* replicas made to forget their history */
    uint64_t pushes0;      /* of them, the primary's on a replica */
    uint64_t flushes;      /* FLUSHALLs */
    /* The primary's group holds its next PUBLISH until the replica that
     * forgot its history is in sync: it may be the history's first
     * record, at the sync point (a replica taking the sync point as
     * before it lost that message: only that PUBLISH shows it). */
    bool ps_hold;
    /* Half the seeds (drawn apart, from their own stream): the bulk
     * writer, a log of small chunks that trims, and one replica (`late`)
     * that starts when the collections are built, so its first sync is
     * from a snapshot of them. */
    bool grow;
    bulker bk;
    int late; /* the replica that starts late; 0: none */
    bool late_started;
    lull_timer late_t;
};

static sim *the_sim; /* for should_yield, whose hook has no argument */
/* The clients' model keys: over 1 MiB each, so kept here, not in the
 * sim a seed allocates (and zeroes) whole. */
static model_key client_keys[CLIENTS_MAX][KEYS];
/* The clients' scan walks' members: there since the walk began, and
 * named by its replies (client.scan_*). */
static model_val scan_must[CLIENTS_MAX], scan_seen[CLIENTS_MAX];
/* --streams: lull-kv's connections are lull streams on socketpairs, with
 * the fault shim's plan under them (the section "--streams" below). */
static bool streams_mode;
/* --event-budget N: the watchdog's budget for every seed instead of the
 * one its workload gives (a test of the watchdog: kv.sim_no_progress). */
static uint64_t event_budget_flag;

static uint64_t rnd(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t below(uint64_t *s, uint64_t n) {
    return n ? rnd(s) % n : 0;
}

__attribute__((format(printf, 2, 3))) static void fail(sim *S, const char *fmt,
                                                       ...) {
    if (S->failed || S->tearing_down) return;
    S->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(S->why, sizeof S->why, fmt, ap);
    va_end(ap);
    lull_simnet_log(S->net, "FAIL %s", S->why);
    S->stop_asked = true;
    lull_loop_stop(S->loop);
}

/* A reply or request as one line: CRLF as spaces, cut at 120 bytes. */
static const char *oneline(const char *p, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 4 < cap && o < 120; i++)
        out[o++] = p[i] == '\r' ? ' ' : p[i] == '\n' ? '|' : p[i];
    if (o && out[o - 1] == '|') o--;
    if (o && out[o - 1] == ' ') o--;
    out[o] = 0;
    return out;
}

static int64_t ms_now(sim *S) {
    return BASE_MS + (int64_t)(lull_loop_now(S->loop) / MS);
}

/* ------------------------------------------------ the simulated kv_net */

static lull_simconn *sc(lull_endpoint *ep) {
    return LULL_CONTAINER_OF(ep, lull_simconn, ep);
}

static int sim_read_stop(lull_endpoint *ep) {
    return lull_simconn_read_stop(sc(ep));
}

static int sim_read_start(lull_endpoint *ep) {
    return lull_simconn_read_start(sc(ep));
}

static int sim_shutdown(lull_endpoint *ep) {
    return lull_simconn_shutdown(sc(ep));
}

static void sim_peer(lull_endpoint *ep, char *s, size_t cap, bool with_port) {
    (void)with_port;
    snprintf(s, cap, "%s", sc(ep)->peer);
}

static void sim_connected(lull_simconn *c, int status) {
    master_connected(c->ep.data, status);
}

static int sim_connect(server *srv) {
    master *m = &srv->m;
    m->t.sim.ep.data = srv;
    m->ep = &m->t.sim.ep;
    lull_simconn_options o = {.flags = LULL_SIMCONN_RAW, .name = srv->name};
    return lull_simconn_connect(srv->net_arg, &m->t.sim, m->host, &o,
                                sim_connected);
}

/* The simulated links count no system calls: no io_counts; and have no
 * socket, so replicas catch up on the loop (no fd). */
static const kv_net
    kv_net_sim = {sim_read_stop, sim_read_start, sim_shutdown,
                  sim_peer,      sim_connect,    NULL,
                  NULL,          NULL,           NULL,
                  NULL}; /* connects by node name: nothing to look up */

/* ------------------------------- --streams: lull streams on socketpairs */

/* In this mode every connection of a lull-kv node (the clients' it
 * accepts, a replica's link to its primary) is a lull_stream on one end
 * of a socketpair; the other end is a relay's stream, which copies bytes
 * to and from a connection of the simulated network. So lull-kv's bytes
 * pass through lull's own stream code (queues, writev batching, short
 * writes, EAGAIN, write-side failures) and the kernel, then cross the
 * simulated network with its faults. Under both streams the fault shim
 * (tests/fault_shim.h) runs the seed's plan on every recv, recvmsg, send
 * and sendmsg: short reads and writes at random byte counts, EAGAIN, EINTR,
 * ENOBUFS, and, on a share of the socketpairs, ECONNRESET or EPIPE from a
 * random byte on. Both streams' fds are unreferenced, so the loop's run
 * ends when the network is quiet (run_streams runs what is left in the
 * sockets). A relay that loses either side closes the other: a fault
 * under a stream reaches the peer as a reset, and lull-kv reconnects and
 * resyncs as on the simulated network. The relay's stream checks the
 * streams' own contracts as well (the same code as lull-kv's end): its
 * close reason is its socket's first failure (check_close_reason), it
 * reads nothing while paused, and a drain follows a fall below the mark;
 * and the first client's links are clean (client.clean). */

/* Not lull-kv's: the plant of the stream path, in the shim's count of a
 * short write (with PLANT_HOLLOW_PARTITION, masked out of kv.plant). */
enum {
    PLANT_SHORT_RESEND = 0x20000, /* a short write said 1-8 bytes shorter:
                                     the stream sends them again */
    PLANT_SHORT_DROP = 0x40000,   /* a short write said whole: the rest of
                                     that write is never sent */
    PLANT_HOLLOW_SHORT = 0x80000  /* the plan's short writes drawn, never
                                     made (its own check must say so) */
};
#define PLANT_STREAMS                                                          \
    (PLANT_SHORT_RESEND | PLANT_SHORT_DROP | PLANT_HOLLOW_SHORT)

/* The fds the plan faults: the socketpairs' (below this, as lull-kv's
 * seeds never hold more). */
#define PLAN_FDS 1024

/* One socketpair fd's plan: its bytes each way, and the reset it gets. */
typedef struct fd_plan {
    bool on;
    uint64_t bytes[2]; /* [K_RECV], [K_SENDMSG] so far */
    uint64_t reset_at; /* bytes of reset_dir before the reset (0: none) */
    int reset_dir;     /* K_RECV or K_SENDMSG */
    int reset_err;     /* ECONNRESET, or EPIPE for a write */
    bool reset_done;   /* every call fails from now on */
    bool clean;    /* no reset, no ENOBUFS: the prober's, a clean client's */
    int first_err; /* the first errno a call on the fd returned that
                      ends a stream (not EAGAIN, EINTR): the plan's or
                      the kernel's; 0 none. The stream's close reason
                      must be it (check_close_reason). */
    char name[48]; /* for the trace */
} fd_plan;

/* The seed's fault plan: each kind's chance per call (thousandths), drawn
 * per seed, and what the shim did. */
typedef struct io_plan {
    uint32_t short_read, short_write, eagain, eintr, enobufs;
    uint32_t reset_permille; /* socketpairs that reset */
    uint64_t reset_within;   /* at a byte below this */
    uint64_t rng;
} io_plan;

/* A fault kind's effects, counted (outcome.io). */
enum {
    IO_SHORT_READ,
    IO_SHORT_WRITE,
    IO_EAGAIN,
    IO_EINTR,
    IO_ENOBUFS,
    IO_RESET,
    IO_PLANTED,
    IO_KINDS
};
static const char *const io_kind_name[IO_KINDS] = {
    "short reads", "short writes", "EAGAINs",          "EINTRs",
    "ENOBUFS",     "resets",       "planted miscounts"};

static fd_plan fd_plans[PLAN_FDS];
static io_plan the_plan;
static uint64_t io_effects[IO_KINDS]; /* this seed's */
static bool io_drawn[IO_KINDS];       /* this seed's plan has the kind */
static size_t cut_to; /* the plan cut the call under way to this many */

static bool chance(uint32_t permille) {
    return permille && below(&the_plan.rng, 1000) < permille;
}

/* An errno a call on p's fd returned: the first that ends a stream is
 * the one its close must give (lull's "the first failure wins"). */
static int saw_errno(fd_plan *p, int err) {
    if (!p->first_err && err != EAGAIN && err != EWOULDBLOCK && err != EINTR)
        p->first_err = err;
    return err;
}

static int plan_before(int kind, int fd, size_t *len) {
    cut_to = 0; /* a call that failed left one */
    if (fd < 0 || fd >= PLAN_FDS || !fd_plans[fd].on || !the_sim) return 0;
    fd_plan *p = &fd_plans[fd];
    sim *S = the_sim;
    if (p->reset_done)
        return saw_errno(p, kind == K_RECV ? ECONNRESET : p->reset_err);
    if (p->reset_at && kind == p->reset_dir) {
        uint64_t b = p->bytes[kind == K_SENDMSG];
        if (b >= p->reset_at) {
            p->reset_done = true;
            io_effects[IO_RESET]++;
            lull_simnet_log(S->net, "%s: %s %s at byte %" PRIu64, p->name,
                            kind == K_RECV ? "recv" : "send",
                            strerror(p->reset_err), b);
            return saw_errno(p, p->reset_err);
        }
        if (*len > p->reset_at - b) {
            *len = (size_t)(p->reset_at - b);
            return SHORT;
        }
    }
    if (chance(the_plan.eintr)) {
        io_effects[IO_EINTR]++;
        return EINTR;
    }
    if (chance(the_plan.eagain)) {
        io_effects[IO_EAGAIN]++;
        return EAGAIN;
    }
    if (kind == K_SENDMSG && !p->clean && chance(the_plan.enobufs)) {
        io_effects[IO_ENOBUFS]++;
        lull_simnet_log(S->net, "%s: send ENOBUFS", p->name);
        return saw_errno(p, ENOBUFS);
    }
    /* A read is cut within what the socket holds (a cut past it would
     * change nothing): at a random byte of the bytes there. */
    size_t have = *len;
    int ready = 0;
    if (kind == K_RECV && ioctl(fd, FIONREAD, &ready) == 0 &&
        (size_t)ready < have)
        have = (size_t)ready;
    if (have > 1 &&
        chance(kind == K_RECV ? the_plan.short_read : the_plan.short_write)) {
        size_t cut = 1 + (size_t)below(&the_plan.rng, have - 1);
        /* Planted: short writes drawn, never made. */
        if (kind == K_SENDMSG && (S->plant & PLANT_HOLLOW_SHORT)) return 0;
        *len = cut_to = cut;
        return SHORT;
    }
    return 0;
}

static ssize_t plan_after(int kind, int fd, ssize_t n, size_t asked) {
    if (fd < 0 || fd >= PLAN_FDS || !fd_plans[fd].on || !the_sim) return n;
    fd_plan *p = &fd_plans[fd];
    if (n < 0) { /* the kernel's own failure */
        int err = errno;
        saw_errno(p, err);
        errno = err;
        return n;
    }
    p->bytes[kind == K_SENDMSG] += (uint64_t)n;
    /* A cut of the plan's counts when the call came back at it (had the
     * kernel had less, the cut did nothing); the kernel's own short
     * writes are not the plan's. */
    size_t cut = cut_to;
    cut_to = 0;
    if (n <= 0 || (size_t)n >= asked) return n;
    if (cut && (size_t)n == cut)
        io_effects[kind == K_RECV ? IO_SHORT_READ : IO_SHORT_WRITE]++;
    if (kind != K_SENDMSG) return n;
    /* The planted miscounts of a short write. */
    if ((the_sim->plant & PLANT_SHORT_RESEND) && n > 1) {
        io_effects[IO_PLANTED]++;
        return n - 1 - (ssize_t)below(&the_plan.rng, n - 1 < 8 ? n - 1 : 8);
    }
    if (the_sim->plant & PLANT_SHORT_DROP) {
        io_effects[IO_PLANTED]++;
        return (ssize_t)asked;
    }
    return n;
}

static void plan_draw(sim *S) {
    io_plan *p = &the_plan;
    memset(p, 0, sizeof *p);
    memset(fd_plans, 0, sizeof fd_plans);
    memset(io_effects, 0, sizeof io_effects);
    p->rng = S->seed ^ 0x9e3779b97f4a7c15ull;
    uint64_t *r = &S->rng;
    /* Each kind in about half the seeds, at up to a third of the calls
     * (short counts), a tenth (EAGAIN, EINTR: each costs a turn), or a
     * few thousandths (ENOBUFS, which ends the connection). */
    if (below(r, 2)) p->short_read = 1 + (uint32_t)below(r, 350);
    if (below(r, 2)) p->short_write = 1 + (uint32_t)below(r, 350);
    if (below(r, 2)) p->eagain = 1 + (uint32_t)below(r, 100);
    if (below(r, 2)) p->eintr = 1 + (uint32_t)below(r, 100);
    /* An eighth of the seeds heavy: most calls cut short, half of them
     * retried (every byte in its own call, a stream blocked at every
     * turn). */
    if (below(r, 8) == 0) {
        p->short_read = 500 + (uint32_t)below(r, 500);
        p->short_write = 500 + (uint32_t)below(r, 500);
        p->eagain = (uint32_t)below(r, 500);
        p->eintr = (uint32_t)below(r, 500);
    }
    if (below(r, 4) == 0) p->enobufs = 1 + (uint32_t)below(r, 5);
    if (below(r, 2)) {
        p->reset_permille = 1 + (uint32_t)below(r, 500);
        p->reset_within = 64 + below(r, 65536);
    }
    /* The stream path's plants need short writes drawn to act on (or, the
     * hollow one, to leave undone). */
    if ((S->plant & PLANT_STREAMS) && !p->short_write) p->short_write = 200;
    io_drawn[IO_SHORT_READ] = p->short_read != 0;
    io_drawn[IO_SHORT_WRITE] = p->short_write != 0;
    io_drawn[IO_EAGAIN] = p->eagain != 0;
    io_drawn[IO_EINTR] = p->eintr != 0;
    io_drawn[IO_ENOBUFS] = p->enobufs != 0;
    io_drawn[IO_RESET] = p->reset_permille != 0;
    io_drawn[IO_PLANTED] =
        (S->plant & (PLANT_SHORT_RESEND | PLANT_SHORT_DROP)) != 0;
    lull_simnet_log(S->net,
                    "streams: short reads %u, short writes %u, EAGAIN %u, "
                    "EINTR %u, ENOBUFS %u (per mille of calls); resets on "
                    "%u per mille of socketpairs, below byte %" PRIu64,
                    p->short_read, p->short_write, p->eagain, p->eintr,
                    p->enobufs, p->reset_permille, p->reset_within);
}

/* A relay: a simulated connection and the far end of a socketpair, whose
 * near end is lull-kv's stream. */
typedef struct relay {
    sim *S;
    lull_simconn sc;    /* the network's side */
    lull_stream rs;     /* the socketpair's far end */
    bool sc_live;       /* sc's close callback owed */
    bool rs_live;       /* rs's */
    bool sc_up;         /* connected (a replica's link: after connect) */
    server *master_of;  /* a replica's link: its server, until connected */
    int kv_fd;          /* lull-kv's end, for peer names */
    int rs_fd;          /* rs's, for its plan (check_close_reason) */
    bool rs_own;        /* the relay closed rs itself (with sc's reason) */
    bool rs_paused;     /* rs's reading stopped (rs_pause), not resumed */
    bool rs_full;       /* rs seen not writable since its last drain */
    struct relay *next; /* S's list, for the peer's name and the check */
    struct relay **prev;
} relay;

static relay *relays; /* the live ones */

static void relay_free_if_done(relay *r) {
    if (r->sc_live || r->rs_live) return;
    *r->prev = r->next;
    if (r->next) r->next->prev = r->prev;
    free(r);
}

/* Bytes from lull-kv to the network: what the network's end cannot take
 * now stops the relay's reading, and so, through the socket, lull-kv's
 * stream. */
/* The relay's stream paused and resumed, as lull-kv's are: between
 * the two no frame may come (relay_rs_frame checks), or backpressure
 * leaks, the paused reader's peer never held back. */
static void rs_pause(relay *r) {
    if (lull_stream_read_stop(&r->rs) == 0) r->rs_paused = true;
}

static void rs_resume(relay *r) {
    if (lull_stream_read_start(&r->rs) == 0) r->rs_paused = false;
}

static void relay_rs_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    relay *r = ep->data;
    if (r->rs_paused)
        fail(r->S, "%s: %zu bytes read while its reading was stopped",
             fd_plans[r->rs_fd].name, len);
    if (!r->sc_up || lull_endpoint_closed(&r->sc.ep)) return;
    if (lull_endpoint_send_copy(&r->sc.ep, bytes, len) < 0) return;
    if (!lull_endpoint_writable(&r->sc.ep)) rs_pause(r);
}

static void relay_sc_drain(lull_endpoint *ep) {
    relay *r = ep->data;
    if (r->rs_live && !lull_endpoint_closed(&r->rs.ep)) rs_resume(r);
}

static void relay_sc_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    relay *r = ep->data;
    if (!r->rs_live || lull_endpoint_closed(&r->rs.ep)) return;
    /* The network's peer closed (not writable with nothing queued: no
     * drain will come), its bytes still arriving: what lull-kv sends it
     * is dropped from now on, as a socket's writes would fail, so the
     * relay reads lull-kv's end again if it had stopped for want of room
     * (a client that hung up: lull-kv, its output full, would wait for
     * good). */
    if (!lull_endpoint_writable(&r->sc.ep) && r->sc.ep.queued == 0)
        rs_resume(r);
    if (lull_endpoint_send_copy(&r->rs.ep, bytes, len) < 0) return;
    if (!lull_endpoint_writable(&r->rs.ep)) {
        r->rs_full = true;
        lull_simconn_read_stop(&r->sc);
    }
}

/* A drain comes once per fall below the high-water mark (docs/API.md):
 * the relay saw rs not writable since the last one, and rs's queue is
 * below the mark now (a failed write side pays a drain owed too, not
 * writable: its next send says why). */
static void relay_rs_drain(lull_endpoint *ep) {
    relay *r = ep->data;
    if (!r->rs_full || r->rs.ep.queued >= r->rs.ep.high_water)
        fail(r->S, "%s: a drain %s (%zu bytes queued, high water %zu)",
             fd_plans[r->rs_fd].name,
             r->rs_full ? "at or above the mark"
                        : "with no fall below the mark",
             r->rs.ep.queued, r->rs.ep.high_water);
    r->rs_full = false;
    if (r->sc_live && !lull_endpoint_closed(&r->sc.ep))
        lull_simconn_read_start(&r->sc);
}

/* The network's end closed: its EOF becomes the socket's (after what was
 * queued), a reset a close. */
static void relay_sc_close(lull_endpoint *ep, int reason) {
    relay *r = ep->data;
    r->sc_live = false;
    if (r->rs_live && !lull_endpoint_closed(&r->rs.ep)) {
        if (reason == 0 && r->sc_up) {
            /* Reading again (the network's end may have paused it): the
             * EOF of lull-kv's end must reach it. */
            rs_resume(r);
            lull_stream_shutdown(&r->rs);
        } else {
            r->rs_own = true;
            lull_endpoint_close(&r->rs.ep, reason);
        }
    }
    relay_free_if_done(r);
}

/* A stream that ended by itself gives as its reason the first failure
 * its socket returned, a read's or a write's, or 0 for the peer's EOF
 * (lull_stream's "the first failure wins"): not one it made up (EOF
 * taken for a reset, EINTR or EAGAIN taken for a failure), nor 0 for a
 * write that failed. The relay's stream shows it for both: lull-kv's end
 * runs the same code. Called from the close callback, right after the
 * stream's teardown closed the fd, whose plan is still this pair's. */
static void check_close_reason(relay *r, int reason) {
    const fd_plan *p = &fd_plans[r->rs_fd];
    int want = -p->first_err;
    if (reason == want) return;
    fail(r->S, "%s: the stream closed with %s, its socket's first failure %s%s",
         p->name, reason ? lull_err_name(reason) : "0 (an EOF)",
         want ? "" : "none: ", want ? lull_err_name(want) : "an EOF's 0");
}

/* lull-kv's end went (closed, or its stream failed): the network's end
 * hears it as a reset, or as EOF after what it was sent. */
static void relay_rs_close(lull_endpoint *ep, int reason) {
    relay *r = ep->data;
    r->rs_live = false;
    r->master_of = NULL; /* a connect under way finds the link gone */
    if (!r->rs_own) check_close_reason(r, reason);
    if (r->sc_live && !lull_endpoint_closed(&r->sc.ep)) {
        if (reason == 0 && r->sc_up) {
            lull_simconn_read_start(&r->sc); /* so its peer's close comes */
            lull_simconn_shutdown(&r->sc);
        } else
            lull_endpoint_close(&r->sc.ep, reason ? reason : -ECONNRESET);
    }
    relay_free_if_done(r);
}

/* A socketpair with a plan for each end: fds[0] lull-kv's, fds[1] the
 * relay's. */
static int relay_pair(sim *S, relay *r, const char *name, bool clean,
                      int fds[2]) {
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0)
        return -errno;
    if (fds[0] >= PLAN_FDS || fds[1] >= PLAN_FDS) {
        close(fds[0]);
        close(fds[1]);
        return -EMFILE;
    }
    if (S->small) {
        /* Small kernel buffers: the streams meet full sockets (real short
         * writes and EAGAIN) as well as the planned ones. */
        int sz = 2048 + (int)below(&S->rng, 32768);
        for (int i = 0; i < 2; i++)
            setsockopt(fds[i], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    }
    for (int i = 0; i < 2; i++) {
        fd_plan *p = &fd_plans[fds[i]];
        memset(p, 0, sizeof *p);
        p->on = true;
        snprintf(p->name, sizeof p->name, "%.40s/%s", name, i ? "relay" : "kv");
        /* The expiry prober's link and a clean client's stay clean: no
         * fault that ends them. */
        p->clean = clean || strstr(name, "probe") != NULL;
        if (!p->clean && chance(the_plan.reset_permille)) {
            p->reset_at = 1 + below(&the_plan.rng, the_plan.reset_within);
            p->reset_dir = below(&the_plan.rng, 2) ? K_SENDMSG : K_RECV;
            p->reset_err = p->reset_dir == K_RECV || below(&the_plan.rng, 2)
                               ? ECONNRESET
                               : EPIPE;
        }
    }
    r->kv_fd = fds[0];
    return 0;
}

static relay *relay_new(sim *S) {
    relay *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->S = S;
    r->next = relays;
    if (relays) relays->prev = &r->next;
    r->prev = &relays;
    relays = r;
    return r;
}

static void relay_unlist(relay *r) {
    r->sc_live = r->rs_live = false;
    relay_free_if_done(r);
}

/* Opens the relay's end: reading at once, its fd unreferenced. */
static int relay_open(sim *S, relay *r, int fd) {
    lull_stream_options o = {.flags = LULL_STREAM_RAW,
                             .max_frame = SIZE_MAX,
                             .high_water = S->high_water};
    r->rs.ep.data = r;
    int rc = lull_stream_open(S->loop, &r->rs, fd, &o);
    if (rc < 0) return rc;
    r->rs_live = true;
    r->rs_fd = fd;
    lull_io_unref(&r->rs.io);
    lull_endpoint_set_callbacks(&r->rs.ep, relay_rs_frame, relay_rs_drain,
                                relay_rs_close);
    return 0;
}

static lull_stream *kv_stream(lull_endpoint *ep) {
    return LULL_CONTAINER_OF(ep, lull_stream, ep);
}

static int streams_read_stop(lull_endpoint *ep) {
    return lull_stream_read_stop(kv_stream(ep));
}

static int streams_read_start(lull_endpoint *ep) {
    return lull_stream_read_start(kv_stream(ep));
}

static int streams_shutdown(lull_endpoint *ep) {
    return lull_stream_shutdown(kv_stream(ep));
}

/* The network's name of the peer, through the relay on the far end. */
static void streams_peer(lull_endpoint *ep, char *s, size_t cap,
                         bool with_port) {
    (void)with_port;
    int fd = lull_stream_fd(kv_stream(ep));
    snprintf(s, cap, "?");
    for (relay *r = relays; r; r = r->next)
        if (r->kv_fd == fd && fd >= 0) snprintf(s, cap, "%s", r->sc.peer);
}

static void streams_io_counts(const lull_endpoint *ep, uint64_t *reads,
                              uint64_t *writes) {
    const lull_stream *s = LULL_CONTAINER_OF(ep, lull_stream, ep);
    *reads = s->reads;
    *writes = s->writes;
}

/* lull-kv's end of a socketpair, as a lull_stream like the socket
 * transport's (raw), its fd unreferenced. */
static int kv_stream_open(sim *S, lull_stream *s, int fd, void *data) {
    lull_stream_options o = {.flags = LULL_STREAM_RAW,
                             .max_frame = SIZE_MAX,
                             .high_water = S->high_water};
    s->ep.data = data;
    int rc = lull_stream_open(S->loop, s, fd, &o);
    if (rc == 0) lull_io_unref(&s->io);
    return rc;
}

static void relay_connected(lull_simconn *c, int status) {
    relay *r = LULL_CONTAINER_OF(c, relay, sc);
    server *srv = r->master_of;
    r->master_of = NULL;
    if (!srv) { /* the link's stream went while connecting */
        if (status == 0) lull_endpoint_close(&r->sc.ep, -ECONNRESET);
        return;
    }
    if (status < 0) {
        /* As a failed connect of a socket: master_connected says so, and
         * the link's close callback follows. */
        master_connected(srv, status);
        lull_endpoint_close(srv->m.ep, status);
        return;
    }
    r->sc_up = true;
    master_connected(srv, 0);
}

/* A replica's connect: its stream is on the socketpair at once; the
 * relay's connect through the network decides (relay_connected). */
static int streams_connect(server *srv) {
    node *n = LULL_CONTAINER_OF(srv, node, srv);
    sim *S = n->S;
    master *m = &srv->m;
    relay *r = relay_new(S);
    if (!r) return -ENOMEM;
    int fds[2];
    char name[96];
    snprintf(name, sizeof name, "%s>%s", n->name, m->host);
    int rc = relay_pair(S, r, name, false, fds);
    if (rc < 0) {
        relay_unlist(r);
        return rc;
    }
    m->ep = &m->t.stream.ep;
    rc = kv_stream_open(S, &m->t.stream, fds[0], srv);
    if (rc < 0) {
        close(fds[1]);
        relay_unlist(r);
        return rc;
    }
    if (relay_open(S, r, fds[1]) < 0) abort();
    lull_simconn_options o = {.flags = LULL_SIMCONN_RAW, .name = srv->name};
    r->sc.ep.data = r;
    r->master_of = srv;
    rc = lull_simconn_connect(S->net, &r->sc, m->host, &o, relay_connected);
    if (rc < 0) abort(); /* the names are the simulator's own */
    r->sc_live = true;
    lull_endpoint_set_callbacks(&r->sc.ep, relay_sc_frame, relay_sc_drain,
                                relay_sc_close);
    return 0;
}

/* No fd for the catch-up sender thread: a thread would make the run
 * depend on the scheduler, and its writes would miss the seeded faults. */
static const kv_net kv_net_streams = {streams_read_stop,
                                      streams_read_start,
                                      streams_shutdown,
                                      streams_peer,
                                      streams_connect,
                                      streams_io_counts,
                                      NULL,
                                      NULL,
                                      NULL, /* connects by node name */
                                      NULL};

/* A connection accepted at a node, over a relay. */
static void streams_accept(node *n, lull_simconn_options *o) {
    sim *S = n->S;
    relay *r = relay_new(S);
    if (!r) return;
    r->sc.ep.data = r;
    if (lull_simserver_accept(&n->ls, &r->sc, o) < 0) {
        relay_unlist(r);
        return;
    }
    r->sc_live = r->sc_up = true;
    lull_endpoint_set_callbacks(&r->sc.ep, relay_sc_frame, relay_sc_drain,
                                relay_sc_close);
    int fds[2];
    char name[96];
    snprintf(name, sizeof name, "%s<%s", n->name, r->sc.peer);
    int id = 0;
    /* pub/sub's links (ps_start) are clean: a message lost with its
     * connection would be no bug; so are the bulk writer's and the
     * flood's, which read every reply. */
    bool clean = (sscanf(r->sc.peer, "c%d:", &id) == 1 && id >= 1 &&
                  id <= S->nclients && S->clients[id - 1].clean) ||
                 strncmp(r->sc.peer, "ps", 2) == 0 ||
                 strncmp(r->sc.peer, "bulk", 4) == 0 ||
                 strncmp(r->sc.peer, "flood", 5) == 0;
    if (relay_pair(S, r, name, clean, fds) < 0) {
        lull_endpoint_close(&r->sc.ep, -ECONNRESET);
        return;
    }
    conn *c = conn_new(&n->srv);
    if (!c) {
        close(fds[0]);
        close(fds[1]);
        lull_endpoint_close(&r->sc.ep, -ECONNRESET);
        return;
    }
    if (kv_stream_open(S, &c->t.stream, fds[0], c) < 0) {
        close(fds[1]);
        conn_abort(c);
        lull_endpoint_close(&r->sc.ep, -ECONNRESET);
        return;
    }
    if (relay_open(S, r, fds[1]) < 0) abort();
    conn_start(c, &c->t.stream.ep);
}

static void run_loop(sim *S);
static bool ps_wake_waiting(sim *S);

/* The loop's run ends when no timer is referenced, but the sockets may
 * still hold bytes (the streams' fds are unreferenced so that idle
 * connections do not keep it running): runs turns until one finds
 * nothing to do, then the loop again if that armed anything. */
static void run_streams(sim *S, bool teardown) {
    for (;;) {
        run_loop(S);
        if ((S->failed && !teardown) || S->stuck) return;
        lull_metrics a, b;
        lull_loop_metrics(S->loop, &a);
        lull_loop_run(S->loop, LULL_RUN_NOWAIT);
        lull_loop_metrics(S->loop, &b);
        bool woke = ps_wake_waiting(S);
        if ((S->failed && !teardown) || S->stuck ||
            (b.tasks_run == a.tasks_run && !woke))
            return;
    }
}

static void random_faults(sim *S, lull_simfaults *f);

static void sim_accept(lull_simserver *ls) {
    node *n = LULL_CONTAINER_OF(ls, node, ls);
    sim *S = n->S;
    lull_simconn_options o = {.flags = LULL_SIMCONN_RAW,
                              .max_frame = SIZE_MAX,
                              .high_water = S->high_water};
    /* A third of the links are asymmetric: what the primary sends (replies,
     * the replication stream) has a delay, jitter, bandwidth, window and
     * slow reader of its own. */
    lull_simfaults back;
    if (!S->no_faults && below(&S->rng, 3) == 0) {
        random_faults(S, &back);
        o.faults = &back;
    }
    if (streams_mode) {
        streams_accept(n, &o);
        return;
    }
    conn *c = conn_new(&n->srv);
    if (!c) return;
    if (lull_simserver_accept(ls, &c->t.sim, &o) < 0) {
        conn_abort(c);
        return;
    }
    conn_start(c, &c->t.sim.ep);
}

/* Lines a correct cluster on this network never logs: the first one is
 * the failure, said as it was logged (a malformed record names its
 * offset), not what it led to. */
static const char *const never_logged[] = {
    "malformed", "not REPLACK", "out of memory", "client-query-buffer-limit",
    "protocol error"};

/* A replica that asked to resume where the primary's log still holds
 * (its history, an offset between the log's base and end) must get
 * +CONTINUE, not a full resync. Its offset and history before the
 * handshake are the ones the last network event left (check_offsets):
 * the link was down since, nothing applied. The log's base only grows,
 * so it held the offset when the primary answered too. */
static void check_resumable(sim *S, node *n) {
    const kv *p = &S->nodes[0].srv.kv;
    if (n == &S->nodes[0] || S->primary_down || !n->last_replid[0] ||
        strcmp(n->last_replid, p->replid) != 0 ||
        n->last_offset < p->log.base || n->last_offset > p->log.end)
        return;
    fail(S,
         "%s: a full resync, though it asked to resume from %" PRIu64
         " of the primary's history, whose log holds [%" PRIu64 ", %" PRIu64
         "]",
         n->name, n->last_offset, p->log.base, p->log.end);
}

/* lull-kv's log lines go to the trace, and are checked. */
static void sim_log(server *srv, const char *line) {
    node *n = LULL_CONTAINER_OF(srv, node, srv);
    sim *S = n->S;
    lull_simnet_log(S->net, "%s", line);
    for (size_t i = 0; i < sizeof never_logged / sizeof never_logged[0]; i++)
        if (strstr(line, never_logged[i])) {
            fail(S, "%s", line + strlen("lull-kv: "));
            return;
        }
    if (strstr(line, "in sync with")) {
        if (strstr(line, "(continue)")) S->continues++;
        if (strstr(line, "(full")) {
            S->fulls++;
            n->full_seen = strstr(line, "snapshot") ? 2 : 1;
        }
    }
    if (strstr(line, "(full)") || strstr(line, "full sync with"))
        check_resumable(S, n);
    /* A replica's link goes down for a reason it says (lost, refused, a
     * connect that failed) before it retries: one that retries with
     * nothing said dropped its link on its own, silently. */
    if (strstr(line, "lost (") || strstr(line, "refused") ||
        strstr(line, "connect to"))
        n->why_down = true;
    /* The reconnect backoff (docs/KV.md): 100 ms after a handshake
     * that succeeded, doubled per retry up to 5 s; a link lost within
     * 5 s of its handshake goes on from the backoff before it. Longer
     * waits pass every other check (the settle is long): they only slow
     * recovery. */
    uint64_t now_ns = lull_loop_now(S->loop);
    if (strstr(line, "(continue)") || strstr(line, "(full)") ||
        strstr(line, "full sync with")) { /* a handshake */
        n->backoff_was = n->backoff_ms ? n->backoff_ms : 100;
        n->up_ns = now_ns;
        n->backoff_ms = 0;
    }
    if (strstr(line, "replica: retrying")) {
        if (n->backoff_was && now_ns - n->up_ns < 5000 * MS)
            n->backoff_ms = n->backoff_was;
        n->backoff_was = 0;
        if (!n->why_down)
            fail(S,
                 "%s: its link went down with no reason said (offset "
                 "%" PRIu64 ")",
                 n->name, srv->kv.offset);
        n->why_down = false;
        const char *in = strstr(line, " in ");
        uint64_t ms = in ? strtoull(in + 4, NULL, 10) : 0;
        uint64_t want = n->backoff_ms ? n->backoff_ms : 100;
        if (ms != want && !S->failed)
            fail(S,
                 "%s: retries in %" PRIu64 " ms, its backoff is %" PRIu64
                 " ms (100 after a sync held 5 s, doubled per retry to "
                 "5000)",
                 n->name, ms, want);
        n->backoff_ms = want * 2 > 5000 ? 5000 : want * 2;
    }
}

/* Slices of busy work end where the seed says, not where real time does
 * (the quantum is real time). */
static bool sim_yield(lull_loop *loop) {
    (void)loop;
    return rnd(&the_sim->yield_rng) % 4 == 0;
}

/* Copies the primary's records not archived yet. */
static void archive_sync(sim *S) {
    const repl_log *log = &S->nodes[0].srv.kv.log;
    if (S->arch_nrec == log->nrec) return;
    if (S->arch_nrec < log->first) abort(); /* trimmed before it was kept */
    for (size_t r = S->arch_nrec; r < log->nrec; r++) {
        if (S->arch_nrec == S->arch_cap) {
            S->arch_cap = S->arch_cap ? 2 * S->arch_cap : 1024;
            S->arch_starts =
                realloc(S->arch_starts, S->arch_cap * sizeof *S->arch_starts);
            if (!S->arch_starts) abort();
        }
        S->arch_starts[S->arch_nrec++] = repl_log_start(log, r);
    }
    for (size_t i = 0; i < log->nchunks; i++) {
        const repl_chunk *c = &log->chunks[i];
        uint64_t from = S->arch.len;
        if (c->start + c->used <= from) continue;
        buf_put(&S->arch, c->p + (from - c->start),
                (size_t)(c->start + c->used - from));
    }
}

static uint64_t archive_pinned(void *arg) {
    sim *S = arg;
    archive_sync(S);
    return links_pinned(&S->nodes[0].srv);
}

static void archive_free(sim *S) {
    buf_free(&S->arch);
    free(S->arch_starts);
    S->arch_starts = NULL;
    S->arch_nrec = S->arch_cap = 0;
}

static int node_open(sim *S, node *n, int index, int64_t clock_ms) {
    server *srv = &n->srv;
    server_defaults(srv);
    n->S = S;
    bool replica = index > 0;
    if (replica)
        snprintf(n->name, sizeof n->name, "replica%d", index);
    else
        snprintf(n->name, sizeof n->name, "primary");
    srv->name = n->name;
    srv->log = sim_log;
    srv->net_arg = S->net;
    srv->should_yield = sim_yield;
    srv->per_record = S->per_record;
    srv->lim.max_args = SIM_ARGS;
    if (S->repl_limit)
        srv->obl[CLASS_REPLICA] = (obuf_limit){S->repl_limit, 0, 0};
    /* A fixed history id: the seed alone decides the run. */
    snprintf(srv->kv.replid, sizeof srv->kv.replid, "%040" PRIx64, S->seed);
    /* The log's and links' planted bugs live on both sides; the older
     * three are the primary's. */
    srv->kv.plant =
        S->plant & ~(uint64_t)(KV_PLANT_RESUME_LATE | KV_PLANT_ACK_BEFORE_LOG |
                               KV_PLANT_LOST_WAKEUP | PLANT_HOLLOW_PARTITION |
                               PLANT_STREAMS | PLANT_HANG | PLANT_CRASH);
    srv->kv.log.chunk_size = S->chunk_size;
    if (replica) {
        srv->kv.replica = true;
        snprintf(srv->m.host, sizeof srv->m.host, "primary");
        srv->m.port = 6380;
        srv->port = 6380 + index;
    } else {
        srv->kv.plant =
            S->plant & ~(uint64_t)(PLANT_HOLLOW_PARTITION | PLANT_STREAMS |
                                   PLANT_HANG | PLANT_CRASH);
        srv->port = 6380;
    }
    if (S->backlog) srv->kv.log.backlog = S->backlog;
    int rc = server_open(
        srv, S->loop, streams_mode ? &kv_net_streams : &kv_net_sim, clock_ms);
    if (rc < 0) return rc;
    if (!replica) { /* a new primary: a new, empty log */
        S->arch.len = 0;
        S->arch_nrec = 0;
        srv->kv.log.pinned = archive_pinned;
        srv->kv.log.pinned_arg = S;
    }
    /* Replicas take clients too: the atomicity reader's. */
    return lull_simserver_listen(S->net, &n->ls, replica ? n->name : "primary",
                                 sim_accept);
}

/* ------------------------------------------------------------ clients */

static void client_pump(client *cl);
static void client_connect(client *cl);
static void probe_stop(sim *S);
static void reader_stop(sim *S);
static void bulk_stop(sim *S);
static void ps_flush_maybe(sim *S);

static void finished(client *cl) {
    sim *S = cl->S;
    cl->state = C_DONE;
    lull_simnet_log(S->net, "c%d done", cl->id);
    if (S->active == 1) {
        probe_stop(S);
        reader_stop(S);
        bulk_stop(S);
    }
    if (--S->active == 0 && !S->healed && !S->tearing_down) {
        S->healed = true;
        lull_simnet_heal(S->net);
        lull_timer_start(&S->deadline, SETTLE_NS, 0);
        lull_timer_unref(&S->deadline);
    }
    if (!S->active) ps_flush_maybe(S);
}

static pending *push(client *cl) {
    pending *p = &cl->q[(cl->qhead + cl->qlen++) % PIPE_MAX];
    memset(p, 0, sizeof *p);
    p->sent_ns = lull_loop_now(cl->S->loop);
    return p;
}

/* A connection that just failed refuses sends (-EPIPE) before its close
 * callback comes: the request stays in flight, and is forgotten with the
 * others there. */
static void send_bytes(client *cl, const char *b, size_t n) {
    int rc = lull_endpoint_send_copy(&cl->c.ep, b, n);
    if (rc < 0 && rc != -EPIPE)
        fail(cl->S, "c%d: a send was refused: %s", cl->id, strerror(-rc));
}

/* The DEL that forgets the keys a failed connection left uncertain. */
static void send_forget(client *cl) {
    char req[512];
    int nk = 0;
    for (int i = 0; i < KEYS; i++)
        nk += cl->unknown[i];
    if (!nk) return;
    int n = sprintf(req, "*%d\r\n$3\r\nDEL\r\n", nk + 1);
    for (int i = 0; i < KEYS; i++) {
        if (!cl->unknown[i]) continue;
        char key[32];
        int kl = snprintf(key, sizeof key, "c%d:k%d", cl->id, i);
        n += sprintf(req + n, "$%d\r\n%s\r\n", kl, key);
    }
    pending *p = push(cl);
    p->kind = P_FORGET;
    p->ncmd = nk;
    lull_simnet_log(cl->S->net, "c%d > DEL of %d uncertain keys", cl->id, nk);
    send_bytes(cl, req, (size_t)n);
}

static int pick_op(uint64_t *r) {
    static const int weights[OP_COUNT] = {
        15, 8, 4, 3, 12, 5, 8, 5, 4, 6, 3, 8, 6, 3, 2, 4, 3, 2, 2, 2, 3, 2, 2,
        3, 3, 4, 2, 2, 6, 3, 3, 5, 3, 2, 5, 2, 3, 4, 3, 3, 2, 3, 3, 4, 2, 3, 3,
        /* SADD .. SETOP_STORE */
        4, 2, 2, 1, 1, 2, 1, 2, 2, 2,
        /* ZADD .. ZPOPMAX */
        5, 2, 2, 1, 1, 3, 1, 2,
        /* ZRANGEBYSCORE .. ZSCAN */
        3, 1, 1, 1, 2, 1, 3, 3, 3, 3,
        /* GETRANGE */
        2};
    int total = 0;
    for (int i = 0; i < OP_COUNT; i++)
        total += weights[i];
    int x = (int)below(r, (uint64_t)total);
    for (int i = 0; i < OP_COUNT; i++) {
        if (x < weights[i]) return i;
        x -= weights[i];
    }
    return OP_GET;
}

/* Integers where 32- and 64-bit arithmetic and parsing break: around
 * 2^31, 2^32 and 2^63, and their negatives. */
static const long long edges[] = {2147483647ll,
                                  2147483648ll,
                                  -2147483648ll,
                                  -2147483649ll,
                                  4294967295ll,
                                  4294967296ll,
                                  9223372036854775807ll,
                                  -9223372036854775807ll - 1,
                                  0,
                                  -1};

static long long near_edge(uint64_t *r) {
    long long e = edges[below(r, sizeof edges / sizeof edges[0])];
    long long d = (long long)below(r, 5) - 2; /* the edge, or 1-2 off */
    if ((d > 0 && e > INT64_MAX - d) || (d < 0 && e < INT64_MIN - d)) d = 0;
    return e + d;
}

/* The command goes to a key of the client's the model says holds a big
 * value, if one does: false when none does. */
static bool to_big_key(client *cl, model_cmd *c, int *key) {
    for (int i = 0; i < KEYS; i++) {
        int k = (*key + i) % KEYS;
        const model_val *v = &cl->keys[k].c[0];
        if (v->type == MODEL_STRING && v->len >= BIG_MIN) {
            *key = k;
            snprintf(c->key, sizeof c->key, "c%d:k%d", cl->id, k);
            return true;
        }
    }
    return false;
}

/* The key of a GET of a big value this client has in flight, sent
 * before the request being made (the pipeline's last), or -1. */
static int big_get_in_flight(const client *cl) {
    for (int i = 0; i < cl->qlen - 1; i++) {
        const pending *q = &cl->q[(cl->qhead + i) % PIPE_MAX];
        if (q->kind != P_CMD || q->cmd[0].op != OP_GET) continue;
        const model_val *v = &cl->keys[q->key[0]].c[0];
        if (v->type == MODEL_STRING && v->len >= BIG_MIN) return q->key[0];
    }
    return -1;
}

/* A big value: big_len bytes of the pattern, shifted from a random byte
 * on, so two differ only past a prefix of random length. Most go over a
 * key that holds one: an overwrite of equal length, which a replica
 * makes in place (store_put). */
static void big_value(client *cl, model_cmd *c, int *key) {
    sim *S = cl->S;
    uint64_t *r = &S->rng;
    c->val[0] = 0;
    c->pad = S->big_len;
    c->cut = (uint32_t)below(r, S->big_len);
    c->shift = (uint8_t)(1 + below(r, 25));
    S->bigs++;
    if (below(r, 4) && to_big_key(cl, c, key)) S->same_len++;
}

/* c on the client's first key, from *key on, that holds a value of
 * type, if any. */
static void to_type_key(client *cl, model_cmd *c, int *key, int type) {
    for (int i = 0; i < KEYS; i++)
        if (cl->keys[(*key + i) % KEYS].c[0].type == type) {
            *key = (*key + i) % KEYS;
            snprintf(c->key, sizeof c->key, "c%d:k%d", cl->id, *key);
            return;
        }
}

static void make_cmd(client *cl, model_cmd *c, int *key, int *key2) {
    sim *S = cl->S;
    uint64_t *r = &S->rng;
    /* After an LREM, its list read whole (not in --determinism, whose
     * draws stay as they were): which copies an LREM removed shows in a
     * long list's middle, which the ends LRANGE and LPOP read rarely
     * reach before the list is overwritten. */
    if (cl->lrem_read) {
        memset(c, 0, sizeof *c);
        *key = *key2 = cl->lrem_read - 1;
        cl->lrem_read = 0;
        c->op = OP_LRANGE;
        c->i2 = -1;
        snprintf(c->key, sizeof c->key, "c%d:k%d", cl->id, *key);
        snprintf(c->key2, sizeof c->key2, "c%d:k%d", cl->id, *key);
        return;
    }
    int k = (int)below(r, KEYS);
    *key = k;
    memset(c, 0, sizeof *c);
    c->op = pick_op(r);
    /* Half the hash commands go to the last two keys, so that their
     * hashes gather fields between the other commands' overwrites. */
    if (c->op >= OP_HSET && c->op <= OP_HINCRBYFLOAT && below(r, 2))
        *key = k = KEYS - 1 - (int)below(r, 2);
    /* And half the list commands to the first, whose list grows long and
     * repeats its items (LREM's direction shows). */
    bool list_op = c->op == OP_RPUSH || c->op == OP_RPUSH_N ||
                   c->op == OP_LPOP || c->op == OP_LREM || c->op == OP_LSET ||
                   c->op == OP_LRANGE || c->op == OP_LPOS;
    if (list_op && below(r, 2)) *key = k = 0;
    /* Half the set commands to the third key, half the sorted set ones
     * to the fourth: they grow there, and meet the other types
     * (WRONGTYPE) on every key. */
    bool zset_op = (c->op >= OP_ZADD && c->op <= OP_ZMSCORE) ||
                   c->op == OP_ZADD_N || c->op == OP_ZSCAN;
    bool set_op = (c->op >= OP_SADD && c->op <= OP_SETOP_STORE) ||
                  c->op == OP_SADD_N || c->op == OP_SSCAN;
    bool bulk = c->op == OP_SADD_N || c->op == OP_ZADD_N || c->op == OP_SSCAN ||
                c->op == OP_ZSCAN;
    if ((set_op || zset_op) && (bulk ? below(r, 8) : below(r, 2)))
        *key = k = zset_op ? 3 : 2;
    snprintf(c->key, sizeof c->key, "c%d:k%d", cl->id, k);
    /* Indexes past both ends of the short lists RPUSH makes; RENAME's
     * second key (the same one a sixth of the time). */
    c->i1 = (int64_t)below(r, 9) - 4;
    c->i2 = (int64_t)below(r, 9) - 4;
    *key2 = (int)below(r, KEYS);
    snprintf(c->key2, sizeof c->key2, "c%d:k%d", cl->id, *key2);
    /* A hash's field: four names, so that fields meet. */
    snprintf(c->field, sizeof c->field, "f%d", (int)below(r, 4));
    uint64_t kind = below(r, 12);
    if (c->op == OP_INCRBY || c->op == OP_DECRBY || c->op == OP_HINCRBY)
        snprintf(c->val, sizeof c->val, "%lld",
                 kind < 6 ? (long long)below(r, 11) - 5 : near_edge(r));
    else if ((c->op == OP_INCRBYFLOAT || c->op == OP_HINCRBYFLOAT) && kind < 8)
        snprintf(c->val, sizeof c->val, "%d.%0*d", (int)below(r, 21) - 10,
                 1 + (int)below(r, 3), (int)below(r, 100));
    else if (kind < 3)
        snprintf(c->val, sizeof c->val, "%d", (int)below(r, 1000) - 100);
    else if (kind < 5)
        snprintf(c->val, sizeof c->val, "%lld", near_edge(r));
    else if (kind == 5)
        c->val[0] = 0; /* the empty string */
    else
        snprintf(c->val, sizeof c->val, "v%" PRIu64, below(r, 100000));
    /* Large values, some past the log's chunk size in the small mode;
     * in the big seeds, big ones too, and reads of them (replies handed
     * to the stream whole, REPLY_HANDOVER). */
    if ((c->op == OP_SET || c->op == OP_SET_PXAT) && below(r, 12) == 0)
        c->pad = (uint32_t)below(r, PAD_MAX);
    else if ((c->op == OP_SET || c->op == OP_SET_PXAT) && S->big_len &&
             below(r, 8) == 0)
        big_value(cl, c, key);
    if (c->op == OP_GET && S->big_len && below(r, 3) == 0)
        to_big_key(cl, c, key);
    /* SETRANGE: at or past the end of the short strings (a gap of
     * zeros), and inside a big value (in place, unless a reply reads
     * it). */
    if (c->op == OP_PEXPIREAT_IF) c->i2 = (int64_t)below(r, 4); /* NX..LT */
    if (c->op == OP_SETRANGE) {
        c->i1 = (int64_t)below(r, 16) - 1;
        if (S->big_len && below(r, 3) == 0 && to_big_key(cl, c, key))
            c->i1 = (int64_t)below(r, S->big_len - 32);
    }
    /* LREM and LPOS of an item the list holds, half the time its last
     * (often held before too: from which end LREM counts, and where
     * LPOS's negative rank starts, shows) */
    if ((c->op == OP_LREM || c->op == OP_LPOS) && below(r, 4)) {
        to_type_key(cl, c, key, MODEL_LIST);
        const model_val *l = &cl->keys[*key].c[0];
        uint32_t i = (uint32_t)below(r, 300);
        model_list_item(l, below(r, 2) && l->items ? l->items - 1u : i, c);
    }
    /* A third of the LPOSs with MAXLEN: of 1 to 8 items (the item asked
     * for is often further). */
    if (c->op == OP_LPOS && below(r, 3) == 0) c->cnt = 1 + (int64_t)below(r, 8);
    /* LINSERT at an item of a list too: on whatever key was drawn, it
     * found a list of one item or none, and never moved a long list's
     * head side (list_insert's shift of the items before the place). */
    if (c->op == OP_LINSERT && below(r, 4)) {
        to_type_key(cl, c, key, MODEL_LIST);
        model_list_item(&cl->keys[*key].c[0], (uint32_t)below(r, 300), c);
    }
    /* ZADD's options: mostly one of NX and XX, one of GT and LT, CH,
     * INCR, now and then any six bits (the combinations refused);
     * ZRANGE's REV and WITHSCORES. Scores mostly small integers, some
     * halves and infinities (inf - inf is NaN), besides the values
     * drawn above (not floats, edges). */
    if (c->op == OP_ZADD || c->op == OP_ZRANGE) {
        c->flags = (uint8_t)below(r, 64);
        if (below(r, 8))
            c->flags = (uint8_t)(below(r, 3) | below(r, 3) << 2 |
                                 (c->flags & (MODEL_Z_CH | MODEL_Z_INCR)));
    }
    if ((c->op == OP_ZADD || c->op == OP_ZINCRBY) && below(r, 4)) {
        static const char *const scores[] = {"1",  "2",   "-1",  "0",   "3",
                                             "-2", "1.5", "inf", "-inf"};
        snprintf(c->val, sizeof c->val, "%s", scores[below(r, 9)]);
    }
    /* SMOVE, SREM, ZREM half the time of a member there; a third of the
     * SMOVEs onto their own set (nothing moves). ZRANGE mostly of the
     * sorted sets' key, where its negative ranks land inside. */
    if ((c->op == OP_SMOVE || c->op == OP_SREM || c->op == OP_ZREM) &&
        below(r, 2)) {
        uint32_t i = (uint32_t)below(r, 8);
        bool last = false;
        if (c->op == OP_SREM) { /* of a set, a third the last one added */
            to_type_key(cl, c, key, MODEL_SET);
            last = below(r, 3) == 0 && cl->set_last[*key][0];
        }
        if (last)
            snprintf(c->field, sizeof c->field, "%s", cl->set_last[*key]);
        else
            model_member(&cl->keys[*key].c[0], i, c);
    }
    /* And half the reads that walk a set's array of members (SMEMBERS,
     * SPOP, SRANDMEMBER) of a set: on the key drawn they rarely met one
     * that SREMs had changed, where a member's place in the array shows. */
    if ((c->op == OP_SMEMBERS || c->op == OP_SPOP || c->op == OP_SRANDMEMBER) &&
        below(r, 2))
        to_type_key(cl, c, key, MODEL_SET);
    /* A third of the SRANDMEMBERs with a count of a set ask for half its
     * members: the most drawn by random indexes, some drawn twice. */
    if (c->op == OP_SRANDMEMBER && c->i2 >= 0 && below(r, 3) == 0 &&
        cl->keys[*key].c[0].type == MODEL_SET && cl->keys[*key].c[0].items >= 4)
        c->i1 = cl->keys[*key].c[0].items / 2 - 2;
    if (c->op == OP_SMOVE && below(r, 3) == 0) {
        *key2 = *key;
        snprintf(c->key2, sizeof c->key2, "c%d:k%d", cl->id, *key2);
    }
    /* By score: bounds (model.c's zbounds), REV, WITHSCORES, LIMIT with
     * offsets and counts negative, 0, inside and past the end; ZRANK's
     * REV, of a member there half the time; SADD_N's and ZADD_N's first
     * member and number (sets to 200: past SCAN_WHOLE); the SCANs'
     * COUNT. */
    if (c->op == OP_ZRANGEBYSCORE || c->op == OP_ZCOUNT ||
        c->op == OP_ZREMRANGEBYSCORE) {
        static const int64_t offs[] = {-1, 0, 1, 2, 5, 300};
        static const int64_t cnts[] = {-1, 0, 1, 2, 3, 10};
        c->i1 = (int64_t)below(r, 16);
        c->i2 = (int64_t)below(r, 16);
        c->flags = (uint8_t)below(r, 8);
        c->off = offs[below(r, 6)];
        c->cnt = cnts[below(r, 6)];
        /* A count of 0 from offset 0: "*0" however many the range holds
         * (from another offset the range was mostly past it: empty). */
        if (c->cnt == 0) c->off = 0;
    }
    if (c->op == OP_ZRANK) {
        c->flags = (uint8_t)below(r, 2);
        if (below(r, 2))
            model_member(&cl->keys[*key].c[0], (uint32_t)below(r, 300), c);
    }
    if (c->op == OP_SADD_N || c->op == OP_ZADD_N) {
        c->off = (int64_t)below(r, 200);
        c->cnt = 1 + (int64_t)below(r, below(r, 2) ? 20 : 199);
    }
    if (c->op == OP_SSCAN || c->op == OP_ZSCAN)
        c->cnt = 1 + (int64_t)below(r, 40);
    /* Most bulk adds and walks to the key with the largest set (sorted
     * set) of the client's: the others' writes overwrite sets often. A
     * walk with no set past SCAN_WHOLE (128) to walk is a bulk add of
     * 130 or more instead, most of the time: the walks that matter are
     * a part at a time. */
    if (bulk && below(r, 4)) {
        int type = zset_op ? MODEL_ZSET : MODEL_SET, most = -1;
        for (int i = 0; i < KEYS; i++) {
            const model_val *v = &cl->keys[i].c[0];
            if (v->type == type && v->items > most) {
                most = v->items;
                *key = k = i;
            }
        }
        if ((c->op == OP_SSCAN || c->op == OP_ZSCAN) && most <= 128 &&
            cl->scan_key < 0) {
            c->op = zset_op ? OP_ZADD_N : OP_SADD_N;
            c->cnt = 130 + (int64_t)below(r, 60);
            c->off = (int64_t)below(r, 200);
            if (most < 0) k = zset_op ? 3 : 2;
            *key = k;
        }
        snprintf(c->key, sizeof c->key, "c%d:k%d", cl->id, k);
    }
    if ((c->op == OP_ZRANGE || c->op == OP_ZRANGEBYSCORE ||
         c->op == OP_ZREMRANGEBYRANK) &&
        below(r, 2)) {
        *key = 3;
        snprintf(c->key, sizeof c->key, "c%d:k%d", cl->id, *key);
    }
    bool two = model_two_keys(c->op);
    if (!two) *key2 = *key;
    /* Mostly ahead (up to 1.5 s), sometimes just past, sometimes hours
     * ahead (still pending at the end, and compared there). */
    uint64_t when = below(r, 20);
    c->at = ms_now(S) + (when < 2    ? -(int64_t)below(r, 50)
                         : when == 2 ? 3600000 + (int64_t)below(r, 86400000)
                                     : 1 + (int64_t)below(r, 1500));
    /* RPUSH of many: lists past a snapshot's batch (SNAP_BATCH items a
     * record), its value between letters (model.c's rpush_item), so that
     * items recur apart, not only in runs, and LREM's direction shows at
     * the list's ends, where LRANGE and LPOP read. */
    if (c->op == OP_RPUSH_N) c->i2 = 2 + (int64_t)below(r, 199);
    /* Half the pushes of one of three letters: lists that repeat items
     * between others, where LREM's direction shows. */
    if ((c->op == OP_RPUSH || c->op == OP_RPUSH_N) && below(r, 2))
        snprintf(c->val, sizeof c->val, "%c", (char)('a' + below(r, 3)));
    /* A list moved onto grows by what its source holds. Lists to 1,200
     * bytes, some hundreds of items: at 300, a list past SNAP_BATCH was
     * deleted by its next push, and a full sync rarely saw one. */
    if (c->op == OP_APPEND || c->op == OP_RPUSH || c->op == OP_RPUSH_N ||
        c->op == OP_LINSERT || c->op == OP_LMOVE || c->op == OP_RPOPLPUSH) {
        const model_key *mk = &cl->keys[two ? *key2 : *key];
        size_t room = c->op == OP_APPEND ? MODEL_VAL_MAX - 50 : 1200;
        for (int i = 0; i < mk->n; i++)
            if (mk->c[i].len > room) c->op = OP_DEL;
        if (c->op == OP_DEL) *key2 = *key;
    }
    /* SETEX's and EXPIRE's seconds, PSETEX's ms: mostly soon (up to 3 s),
     * sometimes hours ahead, now and then not a time (an error; for
     * EXPIRE, past: the key goes). */
    if (c->op == OP_SETEX)
        c->i1 = when == 0 ? 0 : when == 2 ? 3600 : 1 + (int64_t)below(r, 3);
    else if (c->op == OP_EXPIRE)
        c->i1 = when == 0   ? -(int64_t)below(r, 2)
                : when == 2 ? 3600
                            : 1 + (int64_t)below(r, 3);
    else if (c->op == OP_PSETEX)
        c->i1 = when == 0 ? -(int64_t)below(r, 2) : c->at - ms_now(S);
    if (S->no_faults && (c->op == OP_SET_PXAT || c->op == OP_PEXPIREAT ||
                         c->op == OP_PEXPIREAT_IF || c->op == OP_GETEX_PXAT))
        c->at += 100; /* keys live long enough to be read */
    if (S->no_faults && c->op == OP_PSETEX && c->i1 > 0) c->i1 += 100;
    /* GT and LT at the key's own time, which neither is (nothing set):
     * a quarter of them, when the client knows that time. The coin is
     * the time drawn, so the seed's draws stay as they were. */
    const model_key *mk = &cl->keys[*key];
    if (c->op == OP_PEXPIREAT_IF && c->i2 >= 2 && (c->at & 3) == 0 &&
        mk->n == 1 && mk->c[0].expire > ms_now(S) &&
        mk->c[0].expire == mk->c[0].expire_hi)
        c->at = mk->c[0].expire;
    if (c->op == OP_LREM && !S->no_faults) cl->lrem_read = 1 + *key;
    /* The member an SADD adds last: the last of the set's array while
     * nothing leaves it, the one set_delete moves into a hole. */
    if (c->op == OP_SADD && c->i2 >= 0)
        snprintf(cl->set_last[*key], sizeof cl->set_last[*key], "f%d",
                 (int)(c->i2 + 2) % 100);
    else if (c->op == OP_SADD)
        snprintf(cl->set_last[*key], sizeof cl->set_last[*key], "%s", c->field);
    else if (c->op == OP_SADD_N)
        snprintf(cl->set_last[*key], sizeof cl->set_last[*key], "m%d",
                 (int)((c->off + c->cnt - 1) % 200));
}

static void make_cmd(client *cl, model_cmd *c, int *key, int *key2);
static void send_bytes(client *cl, const char *b, size_t n);

/* MSET, MGET, DEL or MSETNX of 2 or 3 distinct keys of the client's. */
static void send_multikey(client *cl, pending *p, char *req) {
    sim *S = cl->S;
    static const int ops[4] = {OP_SET, OP_MGET_ONE, OP_DEL, OP_SET_NX};
    static const char *const words[4] = {"MSET", "MGET", "DEL", "MSETNX"};
    int w = (int)below(&S->rng, 4);
    bool values = w == 0 || w == 3;
    p->kind = P_MKEY;
    p->ncmd = 2 + (int)below(&S->rng, 2);
    int first = (int)below(&S->rng, KEYS);
    size_t n = (size_t)sprintf(req, "*%d\r\n$%zu\r\n%s\r\n",
                               1 + p->ncmd * (values ? 2 : 1), strlen(words[w]),
                               words[w]);
    char text[200];
    int tn = snprintf(text, sizeof text, "%s", words[w]);
    static char val[MODEL_VAL_MAX];
    for (int i = 0; i < p->ncmd; i++) {
        model_cmd *c = &p->cmd[i];
        int ignored, ignored2;
        make_cmd(cl, c, &ignored, &ignored2);
        p->key[i] = p->key2[i] = (first + i) % KEYS; /* distinct */
        snprintf(c->key, sizeof c->key, "c%d:k%d", cl->id, p->key[i]);
        c->op = ops[w];
        n += (size_t)sprintf(req + n, "$%zu\r\n%s\r\n", strlen(c->key), c->key);
        tn += snprintf(text + tn, sizeof text - (size_t)tn, " %s", c->key);
        if (values) {
            size_t vl = model_value(c, val);
            n += (size_t)sprintf(req + n, "$%zu\r\n", vl);
            memcpy(req + n, val, vl);
            n += vl;
            memcpy(req + n, "\r\n", 2);
            n += 2;
            tn += snprintf(text + tn, sizeof text - (size_t)tn, " %.20s%s",
                           c->val, c->pad ? "..." : "");
        }
    }
    cl->remaining -= p->ncmd;
    lull_simnet_log(S->net, "c%d > %s", cl->id, text);
    send_bytes(cl, req, n);
}

/* A multi-key command's reply, key by key (the model's keys are
 * independent): false when the model allows none of it. */
static bool check_multikey(client *cl, pending *p, const char *r, size_t len,
                           int64_t lo, int64_t now) {
    int op = p->cmd[0].op;
    if (op == OP_SET) {
        for (int i = 0; i < p->ncmd; i++)
            if (len != 5 || memcmp(r, "+OK\r\n", 5) != 0 ||
                !model_apply(&cl->keys[p->key[i]], &p->cmd[i], lo, now, r, len))
                return false;
        return true;
    }
    if (op == OP_SET_NX) {
        /* MSETNX: 1, every key was missing and is set (as by SET NX);
         * 0, some key was there and none is touched. */
        if (len == 4 && memcmp(r, ":1\r\n", 4) == 0) {
            for (int i = 0; i < p->ncmd; i++)
                if (!model_apply(&cl->keys[p->key[i]], &p->cmd[i], lo, now,
                                 "+OK\r\n", 5))
                    return false;
            return true;
        }
        if (len != 4 || memcmp(r, ":0\r\n", 4) != 0) return false;
        static model_key k0;
        bool some = false;
        for (int i = 0; i < p->ncmd && !some; i++) {
            model_cmd c = p->cmd[i];
            c.op = OP_EXISTS;
            model_key_copy(&k0, &cl->keys[p->key[i]]);
            some = model_apply(&k0, &c, lo, now, ":1\r\n", 4);
        }
        return some;
    }
    if (op == OP_MGET_ONE) {
        char head[8];
        int hn = snprintf(head, sizeof head, "*%d\r\n", p->ncmd);
        if (len < (size_t)hn || memcmp(r, head, (size_t)hn) != 0) return false;
        const char *e = r + hn;
        size_t left = len - (size_t)hn;
        for (int i = 0; i < p->ncmd; i++) {
            long el = model_reply_len(e, left);
            if (el <= 0 || !model_apply(&cl->keys[p->key[i]], &p->cmd[i], lo,
                                        now, e, (size_t)el))
                return false;
            e += el;
            left -= (size_t)el;
        }
        return left == 0;
    }
    /* DEL: the count is the keys that were there; each key may have been
     * there or not (an expiry inside the window), so the count must lie
     * between what they allow, and every key is gone after. */
    long long got;
    if (sscanf(r, ":%lld", &got) != 1) return false;
    int lo_n = 0, hi_n = 0;
    static model_key k0, k1;
    bool can0[3], can1[3];
    for (int i = 0; i < p->ncmd; i++) {
        model_key_copy(&k0, &cl->keys[p->key[i]]);
        model_key_copy(&k1, &k0);
        can0[i] = model_apply(&k0, &p->cmd[i], lo, now, ":0\r\n", 4);
        can1[i] = model_apply(&k1, &p->cmd[i], lo, now, ":1\r\n", 4);
        lo_n += !can0[i];
        hi_n += can1[i];
    }
    if (got < lo_n || got > hi_n) return false;
    for (int i = 0; i < p->ncmd; i++) {
        model_key *mk = &cl->keys[p->key[i]];
        model_apply(mk, &p->cmd[i], lo, now, can1[i] ? ":1\r\n" : ":0\r\n", 4);
    }
    return true;
}

/* The atomicity probe's pair: cN:pa first in a transaction, cN:pb last,
 * both with one tag per transaction, so a reader of a replica sees them
 * equal unless it sees part of a transaction (reader_frame). */
static size_t pair_set(client *cl, char *out, char ab, bool next) {
    char key[16], tag[24];
    if (next) cl->tags++;
    int kl = snprintf(key, sizeof key, "c%d:p%c", cl->id, ab);
    int tl = snprintf(tag, sizeof tag, "t%d.%u", cl->id, cl->tags);
    return (size_t)sprintf(out, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n",
                           kl, key, tl, tag);
}

/* A command the server refuses to queue: an unknown name, or SET with
 * no value (the wrong arity). */
static size_t bad_cmd(client *cl, char *out) {
    if (below(&cl->S->rng, 2))
        return (size_t)sprintf(out, "*2\r\n$6\r\nSETXYZ\r\n$1\r\nx\r\n");
    char key[16];
    int kl = snprintf(key, sizeof key, "c%d:k0", cl->id);
    return (size_t)sprintf(out, "*2\r\n$3\r\nSET\r\n$%d\r\n%s\r\n", kl, key);
}

/* A scan drawn: the walk's next step when one is under way (its key,
 * command and cursor), a new walk's first otherwise; while a step is in
 * flight, SCARD or ZCARD of its key instead (one step at a time: each
 * takes its cursor from the reply before). */
static void scan_step(client *cl, model_cmd *c, int *key, int *key2) {
    /* A walk under way goes on at a third of the commands: the other
     * commands' writes to its set (and others') between its steps, and
     * most walks end before their client does. */
    uint64_t *r = &cl->S->rng;
    if (cl->scan_key >= 0 && !cl->scan_flying && below(r, 3) == 0) {
        c->op = cl->scan_op;
        c->cnt = 1 + (int64_t)below(r, 40);
    }
    if (c->op != OP_SSCAN && c->op != OP_ZSCAN) return;
    if (cl->scan_flying) {
        c->op = c->op == OP_SSCAN ? OP_SCARD : OP_ZCARD;
        return;
    }
    if (cl->scan_key >= 0) {
        *key = *key2 = cl->scan_key;
        c->op = cl->scan_op;
        c->cursor = cl->scan_cursor;
        snprintf(c->key, sizeof c->key, "c%d:k%d", cl->id, *key);
    } else {
        cl->scan_key = *key;
        cl->scan_op = c->op;
        cl->scan_begun = false;
        c->cursor = cl->scan_cursor = 0;
    }
    cl->scan_flying = true;
}

static void scan_abandon(client *cl) {
    cl->scan_key = -1;
    cl->scan_flying = false;
}

/* After a command of the client's on key (and key2) is checked: a walk's
 * members stay only while every state the model allows holds them; a
 * walk's step (op) takes its cursor and members, and the last (cursor
 * 0) must have named every member there since the first. */
static void scan_after(client *cl, int op, int key, int key2, const char *r,
                       size_t len) {
    sim *S = cl->S;
    if (cl->scan_key < 0 || (key != cl->scan_key && key2 != cl->scan_key))
        return;
    model_val *must = &scan_must[cl->id - 1], *seen = &scan_seen[cl->id - 1];
    const model_key *mk = &cl->keys[cl->scan_key];
    if (op != cl->scan_op) {
        if (cl->scan_begun) model_scan_keep(must, mk);
        return;
    }
    cl->scan_flying = false;
    if (!cl->scan_begun) {
        model_scan_begin(must, seen, mk);
        cl->scan_begun = true;
    } else {
        model_scan_keep(must, mk);
    }
    if (!model_scan_reply(seen, r, len, op == OP_ZSCAN, &cl->scan_cursor)) {
        scan_abandon(cl); /* WRONGTYPE: the model checked it */
        return;
    }
    if (cl->scan_cursor) {
        S->scan_parts++;
        return;
    }
    char missed[256];
    if (model_scan_missed(must, seen, missed))
        fail(S,
             "c%d: a %s walk of c%d:k%d ended (cursor 0) without %s, there "
             "since its first step",
             cl->id, op == OP_SSCAN ? "SSCAN" : "ZSCAN", cl->id, cl->scan_key,
             missed);
    S->scans++;
    scan_abandon(cl);
}

/* KEYS and SCAN MATCH patterns (after "cN:"), and which of the client's
 * keys each matches (bit i: cN:ki); no other key there matches them. */
static const struct {
    const char *glob;
    unsigned mask;
} key_pats[] = {
    {"k?", 0x3f},    {"k*", 0x3f},      {"k[0-2]", 0x07},
    {"k[^0]", 0x3e}, {"*k[3-5]", 0x38},
};
#define KEY_PATS (int)(sizeof key_pats / sizeof key_pats[0])

/* KEYS cN:<pattern>, or the next step of the client's SCAN MATCH walk
 * (a new walk's first), COUNT 1 to 8. One step at a time: each takes
 * its cursor from the reply before. */
static void keys_send(client *cl, pending *p) {
    sim *S = cl->S;
    uint64_t *r = &S->xrng;
    p->kind = P_KEYS;
    p->walk = cl->ks_pat >= 0 ? !cl->ks_flying : below(r, 2) == 0;
    if (p->walk && cl->ks_pat < 0) {
        cl->ks_pat = (int)below(r, KEY_PATS);
        cl->ks_cursor = 0;
        cl->ks_begun = false;
    }
    p->pat = p->walk ? cl->ks_pat : (int)below(r, KEY_PATS);
    char pat[24], cur[24], cnt[4], req[160];
    int pl = snprintf(pat, sizeof pat, "c%d:%s", cl->id, key_pats[p->pat].glob);
    int n;
    if (p->walk) {
        int cl_ = snprintf(cur, sizeof cur, "%" PRIu64, cl->ks_cursor);
        int nl = snprintf(cnt, sizeof cnt, "%d", 1 + (int)below(r, 8));
        n = sprintf(req,
                    "*6\r\n$4\r\nSCAN\r\n$%d\r\n%s\r\n$5\r\nMATCH\r\n$%d\r\n"
                    "%s\r\n$5\r\nCOUNT\r\n$%d\r\n%s\r\n",
                    cl_, cur, pl, pat, nl, cnt);
        cl->ks_flying = true;
        lull_simnet_log(S->net, "c%d > SCAN %s MATCH %s COUNT %s", cl->id, cur,
                        pat, cnt);
    } else {
        n = sprintf(req, "*2\r\n$4\r\nKEYS\r\n$%d\r\n%s\r\n", pl, pat);
        lull_simnet_log(S->net, "c%d > KEYS %s", cl->id, pat);
    }
    cl->remaining--;
    send_bytes(cl, req, (size_t)n);
}

static void keys_abandon(client *cl) {
    cl->ks_pat = -1;
    cl->ks_flying = cl->ks_begun = false;
}

/* Of the client's keys, those some state the model allows is at some
 * instant in [lo, hi] (*may), and those every state is at every instant
 * (*must), as bit masks. */
static void keys_exist(client *cl, int64_t lo, int64_t hi, unsigned *may,
                       unsigned *must) {
    *may = *must = 0;
    for (int i = 0; i < KEYS; i++) {
        bool m, u;
        model_exists(&cl->keys[i], lo, hi, &m, &u);
        *may |= (unsigned)m << i;
        *must |= (unsigned)u << i;
    }
}

/* A reply checked while a walk is under way (but its own steps): a key
 * stays in the walk's `must` only while it is there at every reply. */
static void keys_after(client *cl, int64_t lo, int64_t hi) {
    if (!cl->ks_begun) return;
    unsigned may, must;
    keys_exist(cl, lo, hi, &may, &must);
    cl->ks_must &= must;
    cl->ks_ever |= may;
}

/* The keys an array of bulk strings names, as a mask of the client's
 * (into *named); false, with what is wrong in why, when it is not such
 * an array, names a key the pattern does not match, or one twice (dup:
 * whether that is wrong). */
static bool keys_named(client *cl, const char *r, size_t len, unsigned mask,
                       bool dup, unsigned *named, char *why, size_t cap) {
    long long n;
    int used;
    *named = 0;
    if (sscanf(r, "*%lld\r\n%n", &n, &used) != 1 || n < 0) {
        snprintf(why, cap, "not an array");
        return false;
    }
    size_t at = (size_t)used;
    for (long long j = 0; j < n; j++) {
        long el = model_reply_len(r + at, len - at);
        long long kl;
        int hl;
        if (el <= 0 || r[at] != '$' ||
            sscanf(r + at, "$%lld\r\n%n", &kl, &hl) != 1 || kl < 0) {
            snprintf(why, cap, "not an array of keys");
            return false;
        }
        const char *k = r + at + hl;
        char want[16];
        int i = -1;
        for (int x = 0; x < KEYS && i < 0; x++) {
            int wl = snprintf(want, sizeof want, "c%d:k%d", cl->id, x);
            if (kl == wl && memcmp(k, want, (size_t)wl) == 0) i = x;
        }
        if (i < 0 || !(mask >> i & 1)) {
            snprintf(why, cap, "%.*s, which the pattern does not match",
                     (int)(kl < 40 ? kl : 40), k);
            return false;
        }
        if (dup && (*named >> i & 1)) {
            snprintf(why, cap, "c%d:k%d twice", cl->id, i);
            return false;
        }
        *named |= 1u << i;
        at += (size_t)el;
    }
    return true;
}

/* KEYS names exactly the keys there, key by key at some instant of its
 * window: each one named may be there, each one not named may be gone.
 * A walk's step names only keys there at some instant since its first;
 * its last (cursor 0) has named every key there at every reply since. */
static void keys_reply(client *cl, const pending *p, const char *r, size_t len,
                       int64_t lo, int64_t hi) {
    sim *S = cl->S;
    unsigned may, must, named, mask = key_pats[p->pat].mask;
    keys_exist(cl, lo, hi, &may, &must);
    char pat[24], why[96], got[160];
    snprintf(pat, sizeof pat, "c%d:%s", cl->id, key_pats[p->pat].glob);
    if (!p->walk) {
        if (!keys_named(cl, r, len, mask, true, &named, why, sizeof why)) {
            fail(S, "c%d: KEYS %s got %s: %s", cl->id, pat,
                 oneline(r, len, got, sizeof got), why);
            return;
        }
        unsigned bad = (named & ~may) | (must & mask & ~named);
        if (bad) {
            int i = __builtin_ctz(bad);
            fail(S,
                 "c%d: KEYS %s %s c%d:k%d; the model says it is %s at every "
                 "instant in [%" PRId64 ", %" PRId64 "] ms",
                 cl->id, pat, named >> i & 1 ? "named" : "left out", cl->id, i,
                 named >> i & 1 ? "gone" : "there", lo, hi);
            return;
        }
        S->keys_checked++;
        return;
    }
    cl->ks_flying = false;
    if (!cl->ks_begun) {
        cl->ks_begun = true;
        cl->ks_must = must & mask;
        cl->ks_ever = may;
        cl->ks_seen = 0;
    } else {
        cl->ks_must &= must;
        cl->ks_ever |= may;
    }
    unsigned long long cursor;
    int used;
    long long bl;
    if (sscanf(r, "*2\r\n$%lld\r\n%llu\r\n%n", &bl, &cursor, &used) != 2) {
        fail(S, "c%d: SCAN ... MATCH %s got %s", cl->id, pat,
             oneline(r, len, got, sizeof got));
        return;
    }
    if (!keys_named(cl, r + used, len - (size_t)used, mask, false, &named, why,
                    sizeof why)) {
        fail(S, "c%d: SCAN %" PRIu64 " MATCH %s got %s: %s", cl->id,
             cl->ks_cursor, pat, oneline(r, len, got, sizeof got), why);
        return;
    }
    if (named & ~cl->ks_ever) {
        fail(S,
             "c%d: SCAN %" PRIu64 " MATCH %s named c%d:k%d, which the model "
             "says was not there at any instant of the walk",
             cl->id, cl->ks_cursor, pat, cl->id,
             __builtin_ctz(named & ~cl->ks_ever));
        return;
    }
    cl->ks_seen |= named;
    cl->ks_cursor = cursor;
    if (cursor) return;
    if (cl->ks_must & ~cl->ks_seen)
        fail(S,
             "c%d: a SCAN MATCH %s walk ended (cursor 0) without c%d:k%d, "
             "there since its first step",
             cl->id, pat, cl->id, __builtin_ctz(cl->ks_must & ~cl->ks_seen));
    S->kwalks++;
    keys_abandon(cl);
}

static void send_cmd(client *cl) {
    sim *S = cl->S;
    static char req[3 * MODEL_REQ_MAX + 64];
    size_t n = 0;
    pending *p = push(cl);
    if (streams_mode && below(&S->rng, 40) == 0) {
        /* QUIT (with --streams only, where it shuts a lull stream's write
         * side once the reply is written): +OK, then the server's EOF,
         * and the client connects again. */
        p->kind = P_QUIT;
        cl->quitting = true;
        cl->remaining--;
        lull_simnet_log(S->net, "c%d > QUIT", cl->id);
        send_bytes(cl, "*1\r\n$4\r\nQUIT\r\n", 14);
        return;
    }
    if (S->extra &&
        (below(&S->xrng, 12) == 0 ||
         (cl->ks_pat >= 0 && !cl->ks_flying && below(&S->xrng, 3) == 0))) {
        keys_send(cl, p);
        return;
    }
    if (below(&S->rng, 12) == 0 && cl->ttl_state != 1) {
        /* The TTL probe: a GET of the key once its SET is done, or a
         * new SET. */
        char key[16];
        int kl = snprintf(key, sizeof key, "c%d:ttl", cl->id);
        if (cl->ttl_state == 2 && below(&S->rng, 3)) {
            p->kind = P_TTL_GET;
            p->ttl_sent_ns = cl->ttl_sent_ns;
            p->ttl_done_ns = cl->ttl_done_ns;
            p->ttl_px = cl->ttl_px;
            p->ttl_seq = cl->ttl_seq;
            n = (size_t)sprintf(req, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", kl,
                                key);
            lull_simnet_log(S->net, "c%d > GET %s", cl->id, key);
        } else {
            p->kind = P_TTL_SET;
            cl->ttl_state = 1;
            cl->ttl_sent_ns = p->sent_ns;
            cl->ttl_px = 1 + (int)below(&S->rng, 40);
            char v[16], px[16];
            int vl = snprintf(v, sizeof v, "%u", ++cl->ttl_seq);
            int pl = snprintf(px, sizeof px, "%d", cl->ttl_px);
            n = (size_t)sprintf(req,
                                "*5\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s"
                                "\r\n$2\r\nPX\r\n$%d\r\n%s\r\n",
                                kl, key, vl, v, pl, px);
            lull_simnet_log(S->net, "c%d > SET %s %s PX %s", cl->id, key, v,
                            px);
        }
        cl->remaining--;
        send_bytes(cl, req, n);
        return;
    }
    if (cl->remaining >= 3 && below(&S->rng, 12) == 0) {
        send_multikey(cl, p, req);
        return;
    }
    /* (behind a GET of a big value in flight, a transaction: below,
     * big_get_in_flight) */
    bool multi =
        cl->remaining >= 2 &&
        (below(&S->rng, 10) == 0 || (S->big_len && big_get_in_flight(cl) >= 0));
    if (multi) {
        p->kind = P_MULTI;
        p->ncmd = 1 + (int)below(&S->rng, 3);
        if (p->ncmd > cl->remaining) p->ncmd = cl->remaining;
        n += (size_t)sprintf(req, "*1\r\n$5\r\nMULTI\r\n");
        n += pair_set(cl, req + n, 'a', true);
    } else {
        p->kind = P_CMD;
        p->ncmd = 1;
    }
    /* An eighth of the transactions queue a command the server refuses
     * (its name unknown, or SET with no value), after the ith of theirs:
     * EXEC must then run none of them. */
    int bad_after = multi && below(&S->rng, 8) == 0
                        ? (int)below(&S->rng, (uint64_t)p->ncmd + 1)
                        : -1;
    if (bad_after >= 0) p->bad = 2 + bad_after;
    for (int i = 0; i < p->ncmd; i++) {
        if (i == bad_after) n += bad_cmd(cl, req + n);
        make_cmd(cl, &p->cmd[i], &p->key[i], &p->key2[i]);
        scan_step(cl, &p->cmd[i], &p->key[i], &p->key2[i]);
        /* Seeds with `extra`: half the HGETALLs as HSCAN (a hash of
         * the workload's comes whole: its fields and values, cursor 0,
         * whatever the COUNT). */
        if (S->extra && p->cmd[i].op == OP_HGETALL && below(&S->xrng, 2)) {
            model_cmd *c = &p->cmd[i];
            c->op = OP_HSCAN;
            c->cursor = 0;
            c->cnt = 1 + (int64_t)below(&S->xrng, 10);
            /* of a key the model holds a hash in, when one does */
            int k0 = (int)below(&S->xrng, KEYS);
            for (int k = 0; k < KEYS; k++)
                if (cl->keys[(k0 + k) % KEYS].c[0].type == MODEL_HASH) {
                    p->key[i] = p->key2[i] = (k0 + k) % KEYS;
                    snprintf(c->key, sizeof c->key, "c%d:k%d", cl->id,
                             p->key[i]);
                    memcpy(c->key2, c->key, sizeof c->key2);
                    break;
                }
        }
        /* Big seeds: half the transactions read a big value first, so
         * EXEC both logs records and answers past REPLY_HANDOVER. */
        if (multi && i == 0 && S->big_len && below(&S->rng, 2) &&
            to_big_key(cl, &p->cmd[0], &p->key[0])) {
            p->cmd[0].op = OP_GET;
            p->key2[0] = p->key[0];
        }
        /* And behind a GET of a big value in flight, a transaction
         * whose commands (but a GET, a walk's step) are SETs of
         * equal-length values to its key, which the server makes in
         * place: the GET's reply may still be going out from the key's
         * own bytes (REPLY_HANDOVER), and must be the value as it was
         * (KV_PLANT_BLOB_INPLACE). Seeds with no such GET draw as
         * before. */
        int got;
        if (S->big_len && p->cmd[i].op != OP_GET && p->cmd[i].op != OP_SSCAN &&
            p->cmd[i].op != OP_ZSCAN && (got = big_get_in_flight(cl)) >= 0) {
            model_cmd *c = &p->cmd[i];
            memset(c, 0, sizeof *c);
            c->op = OP_SET;
            p->key[i] = p->key2[i] = got;
            snprintf(c->key, sizeof c->key, "c%d:k%d", cl->id, got);
            memcpy(c->key2, c->key, sizeof c->key2);
            big_value(cl, c, &p->key[i]);
        }
        n += model_request(&p->cmd[i], req + n);
    }
    if (multi) {
        if (bad_after == p->ncmd) n += bad_cmd(cl, req + n);
        n += pair_set(cl, req + n, 'b', false);
        n += (size_t)sprintf(req + n, "*1\r\n$4\r\nEXEC\r\n");
    }
    cl->remaining -= p->ncmd;
    char text[3][96];
    for (int i = 0; i < p->ncmd; i++)
        model_cmd_text(&p->cmd[i], text[i], sizeof text[i]);
    if (multi)
        lull_simnet_log(S->net, "c%d > MULTI; %s%s%s%s%s; EXEC%s", cl->id,
                        text[0], p->ncmd > 1 ? "; " : "",
                        p->ncmd > 1 ? text[1] : "", p->ncmd > 2 ? "; " : "",
                        p->ncmd > 2 ? text[2] : "",
                        p->bad ? " (a refused command queued)" : "");
    else
        lull_simnet_log(S->net, "c%d > %s", cl->id, text[0]);
    S->multis += multi;
    send_bytes(cl, req, n);
}

/* The transaction just sent reads a value the model says is big (a
 * client waiting on one is the likeliest to time out), which no request
 * in flight writes first: its EXEC logs records, then answers past
 * REPLY_HANDOVER, and fails to send it if the client hangs up now. */
static bool big_reply(const client *cl) {
    const pending *p = &cl->q[(cl->qhead + cl->qlen - 1) % PIPE_MAX];
    if (p->kind != P_MULTI || p->cmd[0].op != OP_GET ||
        cl->keys[p->key[0]].c[0].len < BIG_MIN)
        return false;
    for (int i = 0; i < cl->qlen - 1; i++) {
        const pending *q = &cl->q[(cl->qhead + i) % PIPE_MAX];
        if (q->kind == P_FORGET) return false; /* it may delete the key */
        if (q->kind != P_CMD && q->kind != P_MULTI && q->kind != P_MKEY)
            continue;
        for (int j = 0; j < q->ncmd; j++)
            if (q->key[j] == p->key[0] || q->key2[j] == p->key[0]) return false;
    }
    return true;
}

/* The client hangs up with requests in flight, as one that timed out
 * does: the primary still runs those that reached it, in a batch whose
 * replies it can no longer send. Their fate is unknown (client_closed). */
static void hang_up(client *cl, bool big) {
    sim *S = cl->S;
    S->hangups++;
    lull_simnet_log(S->net, "c%d hangs up, %d in flight%s", cl->id, cl->qlen,
                    big ? ", a big read last" : "");
    cl->state = C_HUNG_UP;
    lull_endpoint_close(&cl->c.ep, 0);
}

/* Sends while the pipeline has room, with think times the seed picks;
 * done and closes once every reply is in. */
static void client_pump(client *cl) {
    sim *S = cl->S;
    if (cl->state != C_UP || S->failed) return;
    while (!cl->quitting && cl->qlen < cl->depth && cl->remaining > 0) {
        if (lull_timer_active(&cl->timer)) return;
        send_cmd(cl);
        if (S->failed || cl->state != C_UP) return;
        bool big = S->hangup && big_reply(cl);
        uint32_t odds = big ? 2 : cl->qlen >= 2 ? S->hangup : 0;
        if (odds && below(&S->rng, odds) == 0) {
            hang_up(cl, big);
            return;
        }
        uint64_t think = below(&S->rng, 4);
        if (think) {
            lull_timer_start(&cl->timer, think * below(&S->rng, MS), 0);
            return;
        }
    }
    if (cl->remaining == 0 && cl->qlen == 0) {
        cl->state = C_CLOSING;
        lull_endpoint_close(&cl->c.ep, 0);
    }
}

/* One reply for the head request. */
static void check_reply(client *cl, const char *r, size_t len) {
    sim *S = cl->S;
    pending *p = &cl->q[cl->qhead];
    int64_t now = ms_now(S);
    int64_t lo = BASE_MS + (int64_t)(p->sent_ns / MS);
    if (lo < cl->lb) lo = cl->lb;
    bool done = true;
    uint64_t now_ns = lull_loop_now(S->loop);
    if (p->kind == P_TTL_SET) {
        if (len != 5 || memcmp(r, "+OK\r\n", 5) != 0)
            fail(S, "c%d: SET c%d:ttl ... PX %d got %.*s", cl->id, cl->id,
                 cl->ttl_px, (int)len, r);
        cl->ttl_state = 2;
        cl->ttl_done_ns = now_ns;
        S->cmds_run++;
    } else if (p->kind == P_TTL_GET) {
        S->cmds_run++;
        char want[48];
        int wl = snprintf(want, sizeof want, "$%d\r\n%u\r\n",
                          snprintf(NULL, 0, "%u", p->ttl_seq), p->ttl_seq);
        bool found = len == (size_t)wl && memcmp(r, want, len) == 0;
        bool nil = len == 5 && memcmp(r, "$-1\r\n", 5) == 0;
        double after = (double)(now_ns - p->ttl_sent_ns) / MS;
        if (!found && !nil)
            fail(S, "c%d: GET c%d:ttl got %.*s; its SET wrote %u", cl->id,
                 cl->id, (int)len, r, p->ttl_seq);
        else if (nil && now_ns < p->ttl_sent_ns + (uint64_t)p->ttl_px * MS)
            fail(S,
                 "c%d: c%d:ttl, set with PX %d, was gone %.3f ms after "
                 "the client sent its SET: before its time",
                 cl->id, cl->id, p->ttl_px, after);
        else if (found &&
                 p->sent_ns >= p->ttl_done_ns + (uint64_t)(p->ttl_px + 1) * MS)
            fail(S,
                 "c%d: c%d:ttl, set with PX %d, was still there for a GET "
                 "sent %.3f ms after the SET's reply",
                 cl->id, cl->id, p->ttl_px,
                 (double)(p->sent_ns - p->ttl_done_ns) / MS);
    } else if (p->kind == P_MKEY) {
        if (!check_multikey(cl, p, r, len, lo, now)) {
            char got[160];
            fail(S,
                 "c%d: a %s of %d keys (%s ...) got %s; the model allows no "
                 "such reply at any instant in [%" PRId64 ", %" PRId64 "] ms",
                 cl->id,
                 p->cmd[0].op == OP_SET        ? "MSET"
                 : p->cmd[0].op == OP_MGET_ONE ? "MGET"
                 : p->cmd[0].op == OP_SET_NX   ? "MSETNX"
                                               : "DEL",
                 p->ncmd, p->cmd[0].key, oneline(r, len, got, sizeof got), lo,
                 now);
            return;
        }
        S->cmds_run += (uint64_t)p->ncmd;
        for (int i = 0; i < p->ncmd; i++)
            scan_after(cl, p->cmd[i].op, p->key[i], p->key[i], r, 0);
    } else if (p->kind == P_KEYS) {
        S->cmds_run++;
        keys_reply(cl, p, r, len, lo, now);
    } else if (p->kind == P_QUIT) {
        if (len != 5 || memcmp(r, "+OK\r\n", 5) != 0)
            fail(S, "c%d: QUIT got %.*s", cl->id, (int)len, r);
    } else if (p->kind == P_FORGET) {
        long long n;
        if (sscanf(r, ":%lld", &n) != 1 || n < 0 || n > p->ncmd)
            fail(S, "c%d: DEL of %d keys got %.*s", cl->id, p->ncmd, (int)len,
                 r);
        for (int i = 0; i < KEYS; i++)
            if (cl->unknown[i]) {
                cl->unknown[i] = false;
                model_key_init(&cl->keys[i]);
            }
    } else if (p->kind == P_MULTI && p->step <= p->ncmd + 2 + !!p->bad) {
        const char *want = p->step == 0 ? "+OK\r\n" : "+QUEUED\r\n";
        if (p->bad && p->step == p->bad) {
            if (len < 5 || memcmp(r, "-ERR ", 5) != 0)
                fail(S, "c%d: a command refused in MULTI got %.*s", cl->id,
                     (int)len, r);
        } else if (len != strlen(want) || memcmp(r, want, len) != 0) {
            fail(S, "c%d: %s got %.*s", cl->id,
                 p->step == 0 ? "MULTI" : "a queued command", (int)len, r);
        }
        p->step++;
        done = false;
    } else if (p->kind == P_MULTI && p->bad) {
        /* Discarded whole: nothing of it ran, the model's keys stay. */
        static const char abort[] = "-EXECABORT Transaction discarded "
                                    "because of previous errors.\r\n";
        if (len != sizeof abort - 1 || memcmp(r, abort, len) != 0)
            fail(S, "c%d: EXEC after a refused command got %.*s", cl->id,
                 (int)len, r);
        S->cmds_run += (uint64_t)p->ncmd; /* checked: none ran */
        for (int i = 0; i < p->ncmd; i++) /* a walk's step: sent again */
            if (p->cmd[i].op == cl->scan_op && p->key[i] == cl->scan_key)
                cl->scan_flying = false;
    } else {
        /* A command's reply, or EXEC's array of them. */
        const char *e = r;
        size_t left = len;
        if (p->kind == P_MULTI) {
            char head[16];
            int hn = snprintf(head, sizeof head, "*%d\r\n+OK\r\n", p->ncmd + 2);
            if (len < (size_t)hn || memcmp(r, head, (size_t)hn) != 0) {
                fail(S, "c%d: EXEC got %.*s", cl->id, (int)len, r);
                return;
            }
            e += hn;
            left -= (size_t)hn;
        }
        for (int i = 0; i < p->ncmd && !S->failed; i++) {
            long el = model_reply_len(e, left);
            if (el <= 0) {
                fail(S, "c%d: a malformed reply %.*s", cl->id, (int)len, r);
                return;
            }
            model_key *mk = &cl->keys[p->key[i]];
            int op = p->cmd[i].op;
            if (!(model_two_keys(op)
                      ? model_apply2(mk, &cl->keys[p->key2[i]], &p->cmd[i], lo,
                                     now, e, (size_t)el)
                      : model_apply(mk, &p->cmd[i], lo, now, e, (size_t)el))) {
                static char want[MODEL_REQ_MAX];
                char req[96], st[800], got[160], w1[160];
                model_cmd_text(&p->cmd[i], req, sizeof req);
                size_t wn = model_reply(&mk->c[0], &p->cmd[i], lo, want);
                model_describe(&mk->c[0], st, sizeof st);
                fail(S,
                     "c%d: %s got %s; the model allows no such reply at any "
                     "instant in [%" PRId64 ", %" PRId64 "] ms (%d states; "
                     "first: %s, which gives %s)",
                     cl->id, req, oneline(e, (size_t)el, got, sizeof got), lo,
                     now, mk->n, st, oneline(want, wn, w1, sizeof w1));
                return;
            }
            S->cmds_run++;
            scan_after(cl, op, p->key[i], p->key2[i], e, (size_t)el);
            e += el;
            left -= (size_t)el;
        }
        if (p->kind == P_MULTI && !S->failed &&
            (left != 5 || memcmp(e, "+OK\r\n", 5) != 0))
            fail(S, "c%d: EXEC's last reply (SET c%d:pb) is %.*s", cl->id,
                 cl->id, (int)left, e);
    }
    if (!done) return;
    char text[160];
    lull_simnet_log(S->net, "c%d < %s", cl->id,
                    oneline(r, len, text, sizeof text));
    if (!(p->kind == P_KEYS && p->walk)) keys_after(cl, lo, now);
    cl->lb = lo;
    for (int i = 0; i < KEYS; i++)
        model_settle(&cl->keys[i], cl->lb);
    cl->qhead = (cl->qhead + 1) % PIPE_MAX;
    cl->qlen--;
    cl->replies++;
}

static void client_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    client *cl = ep->data;
    sim *S = cl->S;
    if (S->plant & PLANT_HANG) /* planted: never returns */
        for (volatile bool spin = true; spin;) {
        }
    if (S->plant & PLANT_CRASH) abort(); /* planted: a fatal signal */
    buf_put(&cl->in, bytes, len);
    size_t at = 0;
    while (at < cl->in.len && !S->failed) {
        long n = model_reply_len(cl->in.p + at, cl->in.len - at);
        if (n == 0) break;
        if (n < 0 || cl->qlen == 0) {
            fail(S, "c%d: a reply nobody asked for: %.*s", cl->id,
                 (int)(cl->in.len - at), cl->in.p + at);
            return;
        }
        check_reply(cl, cl->in.p + at, (size_t)n);
        at += (size_t)n;
    }
    buf_consume(&cl->in, at);
    client_pump(cl);
}

static void client_closed(lull_endpoint *ep, int reason) {
    client *cl = ep->data;
    sim *S = cl->S;
    lull_simnet_log(S->net, "c%d closed (%s), %d in flight", cl->id,
                    lull_err_name(reason), cl->qlen);
    if (cl->state == C_CLOSING) {
        finished(cl);
        return;
    }
    /* A clean link ends when the client hangs up, or at the server's EOF
     * after QUIT and every reply before it: anything else is a stream
     * that ended a connection nothing ended, or lost what it owed. */
    if (cl->clean && cl->state != C_HUNG_UP &&
        !(cl->quitting && cl->qlen == 0 && reason == 0)) {
        fail(S,
             "c%d: its clean link closed (%s)%s with %d replies owed: "
             "no fault ends it",
             cl->id, reason ? lull_err_name(reason) : "an EOF",
             cl->quitting ? " after QUIT" : "", cl->qlen);
        return;
    }
    /* Lost: what was in flight may or may not have run. Those keys are
     * forgotten (deleted first thing on the next connection). A QUIT
     * answered ends it as asked. */
    if (!cl->quitting || cl->qlen) S->lost++;
    for (int i = 0; i < cl->qlen; i++) {
        pending *p = &cl->q[(cl->qhead + i) % PIPE_MAX];
        if (p->kind == P_TTL_SET) cl->ttl_state = 0; /* its fate unknown */
        if (p->kind != P_CMD && p->kind != P_MULTI && p->kind != P_MKEY)
            continue;
        for (int j = 0; j < p->ncmd; j++)
            cl->unknown[p->key[j]] = cl->unknown[p->key2[j]] = true;
    }
    scan_abandon(cl); /* its keys forgotten, its step maybe lost */
    keys_abandon(cl);
    cl->qlen = 0;
    cl->in.len = 0;
    cl->quitting = false;
    cl->state = C_DOWN;
    lull_timer_start(&cl->timer, 1 * MS + below(&S->rng, 20 * MS), 0);
}

static void client_connected(lull_simconn *c, int status) {
    client *cl = c->ep.data;
    if (status < 0) return; /* client_closed, right after, retries */
    cl->state = C_UP;
    send_forget(cl);
    client_pump(cl);
}

static void client_connect(client *cl) {
    sim *S = cl->S;
    char name[16];
    snprintf(name, sizeof name, "c%d", cl->id);
    lull_simconn_options o = {.flags = LULL_SIMCONN_RAW, .name = name};
    if (cl->clean) o.faults = &S->clean_faults;
    cl->c.ep.data = cl;
    cl->state = C_CONNECTING;
    int rc =
        lull_simconn_connect(S->net, &cl->c, "primary", &o, client_connected);
    if (rc < 0) {
        fail(S, "c%d: connect: %s", cl->id, strerror(-rc));
        return;
    }
    lull_endpoint_set_callbacks(&cl->c.ep, client_frame, NULL, client_closed);
}

static void client_timer(lull_timer *t) {
    client *cl = LULL_CONTAINER_OF(t, client, timer);
    if (cl->state == C_DOWN)
        client_connect(cl);
    else
        client_pump(cl);
}

/* ------------------------------------------------------------ prober */

static void probe_send(prober *pr, const char *req) {
    if (lull_endpoint_send_copy(&pr->c.ep, req, strlen(req)) < 0) return;
}

static void probe_next(sim *S) {
    prober *pr = &S->probe;
    pr->step = 0;
    pr->px = 1 + (int)below(&S->rng, 40);
    pr->set_ns = lull_loop_now(S->loop);
    char req[128], v[16], px[16];
    snprintf(v, sizeof v, "%u", ++pr->seq);
    snprintf(px, sizeof px, "%d", pr->px);
    snprintf(req, sizeof req,
             "*5\r\n$3\r\nSET\r\n$9\r\nprobe:ttl\r\n$%zu\r\n%s\r\n"
             "$2\r\nPX\r\n$%zu\r\n%s\r\n",
             strlen(v), v, strlen(px), px);
    lull_simnet_log(S->net, "probe > SET probe:ttl %s PX %s", v, px);
    probe_send(pr, req);
}

/* The same-ms batch: at one instant (a command runs as it is sent),
 * SET probe:now PXAT <this ms> (there, its time not past), GET, then
 * PEXPIREAT probe:now <this ms> (a time that has come deletes it), GET:
 * what the model's windows cannot tell, a ms around the expiry time. */
static void probe_now(sim *S) {
    prober *pr = &S->probe;
    char v[16], at[24], req[400];
    int vl = snprintf(v, sizeof v, "%u", ++pr->seq);
    pr->now_ms = ms_now(S);
    int al = snprintf(at, sizeof at, "%" PRId64, pr->now_ms);
    snprintf(req, sizeof req,
             "*5\r\n$3\r\nSET\r\n$9\r\nprobe:now\r\n$%d\r\n%s\r\n"
             "$4\r\nPXAT\r\n$%d\r\n%s\r\n"
             "*2\r\n$3\r\nGET\r\n$9\r\nprobe:now\r\n"
             "*3\r\n$9\r\nPEXPIREAT\r\n$9\r\nprobe:now\r\n$%d\r\n%s\r\n"
             "*2\r\n$3\r\nGET\r\n$9\r\nprobe:now\r\n",
             vl, v, al, at, al, at);
    lull_simnet_log(S->net,
                    "probe > SET probe:now %s PXAT %s; GET; "
                    "PEXPIREAT probe:now %s; GET",
                    v, at, at);
    probe_send(pr, req);
}

/* A reply of the same-ms batch (step 3 to 6), against what it must be. */
static void probe_now_reply(sim *S, const char *r, long n) {
    prober *pr = &S->probe;
    char want[32];
    static const char *const what[4] = {
        "SET probe:now ... PXAT <its ms>", "GET probe:now in its expiry ms",
        "PEXPIREAT probe:now <its ms>", "GET probe:now after that"};
    if (pr->step == 4)
        snprintf(want, sizeof want, "$%d\r\n%u\r\n",
                 snprintf(NULL, 0, "%u", pr->seq), pr->seq);
    else
        snprintf(want, sizeof want, "%s",
                 pr->step == 3   ? "+OK\r\n"
                 : pr->step == 5 ? ":1\r\n"
                                 : "$-1\r\n");
    if ((size_t)n != strlen(want) || memcmp(r, want, (size_t)n) != 0) {
        char got[64];
        fail(S, "probe: %s, sent at ms %" PRId64 ", got %s", what[pr->step - 3],
             pr->now_ms, oneline(r, (size_t)n, got, sizeof got));
        return;
    }
    if (++pr->step < 7) return;
    pr->probes++;
    pr->step = 0;
    lull_timer_start(&pr->timer, below(&S->rng, 20 * MS), 0);
}

static void probe_timer(lull_timer *t) {
    sim *S = LULL_CONTAINER_OF(t, sim, probe.timer);
    prober *pr = &S->probe;
    if (!pr->up || pr->closing) return;
    if (pr->step == 0) {
        probe_next(S);
        return;
    }
    if (pr->step == 3) {
        probe_now(S);
        return;
    }
    lull_simnet_log(S->net, "probe > GET probe:ttl (%.3f ms after the SET)",
                    (double)(lull_loop_now(S->loop) - pr->set_ns) / MS);
    probe_send(pr, "*2\r\n$3\r\nGET\r\n$9\r\nprobe:ttl\r\n");
}

static void probe_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    sim *S = ep->data;
    prober *pr = &S->probe;
    buf_put(&pr->in, bytes, len);
    long n;
    while ((n = model_reply_len(pr->in.p, pr->in.len)) > 0 && !S->failed) {
        const char *r = pr->in.p;
        uint64_t now = lull_loop_now(S->loop);
        double after = (double)(now - pr->set_ns) / MS;
        char v[16];
        int vl = snprintf(v, sizeof v, "%u", pr->seq);
        bool nil = n == 5 && memcmp(r, "$-1\r\n", 5) == 0;
        bool found = n == vl + 6 && memcmp(r + 4, v, (size_t)vl) == 0;
        if (pr->step >= 3) {
            probe_now_reply(S, r, n);
        } else if (pr->step == 0) {
            if (n != 5 || memcmp(r, "+OK\r\n", 5) != 0)
                fail(S, "probe: SET probe:ttl got %.*s", (int)n, r);
            /* The early GET: in the millisecond before px ms from the
             * SET's send (the clock's grain). */
            pr->step = 1;
            uint64_t at =
                pr->set_ns + (uint64_t)pr->px * MS - 1 - below(&S->rng, MS - 1);
            if (at <= now) {
                /* The reply came too late (what the primary sends may be
                 * slow): no early read this time; a new SET. */
                pr->step = 0;
                at = now + below(&S->rng, 20 * MS);
            }
            lull_timer_start(&pr->timer, at - now, 0);
        } else if (pr->step == 1) {
            if (!found)
                fail(S,
                     "probe:ttl, set with PX %d, was %s %.6f ms after its "
                     "SET was sent: before its time",
                     pr->px, nil ? "gone" : "changed", after);
            pr->step = 2;
            uint64_t at = pr->set_ns + (uint64_t)(pr->px + 1) * MS;
            lull_timer_start(&pr->timer, at > now ? at - now : 0, 0);
        } else {
            if (!nil)
                fail(S,
                     "probe:ttl, set with PX %d, was still there %.6f ms "
                     "after its SET was sent",
                     pr->px, after);
            pr->probes++;
            /* Then, half the time, the same-ms batch. */
            pr->step = below(&S->rng, 2) ? 3 : 0;
            lull_timer_start(&pr->timer, below(&S->rng, 20 * MS), 0);
        }
        buf_consume(&pr->in, (size_t)n);
    }
}

static void probe_closed(lull_endpoint *ep, int reason) {
    sim *S = ep->data;
    prober *pr = &S->probe;
    pr->up = false;
    lull_timer_stop(&pr->timer);
    if (!pr->closing && !S->tearing_down)
        fail(S, "probe: its clean link closed (%s)", lull_err_name(reason));
}

static void probe_connected(lull_simconn *c, int status) {
    sim *S = c->ep.data;
    if (status < 0) return; /* probe_closed says it */
    S->probe.up = true;
    probe_next(S);
}

static void probe_start(sim *S) {
    prober *pr = &S->probe;
    lull_timer_init(S->loop, &pr->timer, probe_timer);
    static const lull_simfaults clean;
    lull_simconn_options o = {
        .flags = LULL_SIMCONN_RAW, .name = "probe", .faults = &clean};
    pr->c.ep.data = S;
    if (lull_simconn_connect(S->net, &pr->c, "primary", &o, probe_connected) <
        0) {
        fail(S, "probe: connect refused");
        return;
    }
    lull_endpoint_set_callbacks(&pr->c.ep, probe_frame, NULL, probe_closed);
}

static void probe_stop(sim *S) {
    prober *pr = &S->probe;
    if (pr->closing) return;
    pr->closing = true;
    lull_timer_stop(&pr->timer);
    lull_endpoint_close(&pr->c.ep, 0);
}

/* ----------------------------------------------------------- flood */

static void flood_key(char *k) {
    memcpy(k, "flood:", 6);
    memset(k + 6, 'f', FLOOD_KEY - 6);
}

static void flood_timer(lull_timer *t) {
    sim *S = LULL_CONTAINER_OF(t, sim, fl.timer);
    flooder *f = &S->fl;
    if (!f->up || f->closing) return;
    char key[FLOOD_KEY];
    flood_key(key);
    static char req[FLOOD_GETS * (FLOOD_KEY + 32)];
    size_t n = 0;
    for (int i = 0; i < FLOOD_GETS; i++) {
        n += (size_t)sprintf(req + n, "*2\r\n$3\r\nGET\r\n$%d\r\n", FLOOD_KEY);
        memcpy(req + n, key, FLOOD_KEY);
        n += FLOOD_KEY;
        memcpy(req + n, "\r\n", 2);
        n += 2;
    }
    if (lull_endpoint_send_copy(&f->c.ep, req, n) < 0) return; /* closed */
    if (++f->bursts < FLOOD_BURSTS) {
        lull_timer_start(&f->timer, 1 * MS, 0);
        return;
    }
    lull_simnet_log(S->net, "flood: %d GETs sent, reading",
                    FLOOD_BURSTS * FLOOD_GETS);
    lull_simconn_read_start(&f->c);
}

static void flood_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    sim *S = ep->data;
    flooder *f = &S->fl;
    buf_put(&f->in, bytes, len);
    uint64_t want = 1 + FLOOD_BURSTS * FLOOD_GETS;
    size_t off = 0;
    while (off < f->in.len && !S->failed) {
        const char *r = f->in.p + off;
        long n = model_reply_len(r, f->in.len - off);
        if (n == 0) break;
        /* The SET's +OK, then the value, or nil once a FLUSHALL after
         * the clients went first. */
        bool ok = f->replies == 0 ? n == 5 && memcmp(r, "+OK\r\n", 5) == 0
                  : n == 5
                      ? memcmp(r, "$-1\r\n", 5) == 0
                      : n == 9 + FLOOD_VAL && memcmp(r, "$4096\r\n", 7) == 0;
        if (n < 0 || !ok || f->replies >= want) {
            char a[128];
            fail(S, "flood: reply %" PRIu64 " of %" PRIu64 " was %s",
                 f->replies + 1, want,
                 oneline(r, n > 0 ? (size_t)n : f->in.len - off, a, sizeof a));
            return;
        }
        f->replies++;
        off += (size_t)n;
    }
    buf_consume(&f->in, off);
    if (f->replies == want && !f->closing) {
        lull_simnet_log(S->net, "flood: every reply read");
        f->closing = true;
        lull_endpoint_close(&f->c.ep, 0);
    }
}

static void flood_closed(lull_endpoint *ep, int reason) {
    sim *S = ep->data;
    flooder *f = &S->fl;
    f->up = false;
    lull_timer_stop(&f->timer);
    buf_free(&f->in);
    if (!f->closing && !S->tearing_down)
        fail(S, "flood: its clean link closed (%s) after %" PRIu64 " replies",
             lull_err_name(reason), f->replies);
}

static void flood_connected(lull_simconn *c, int status) {
    sim *S = c->ep.data;
    flooder *f = &S->fl;
    if (status < 0) return; /* flood_closed says it */
    f->up = true;
    /* Nothing read until every request is out: the replies pile up. */
    lull_simconn_read_stop(&f->c);
    char key[FLOOD_KEY];
    flood_key(key);
    static char req[FLOOD_KEY + FLOOD_VAL + 64];
    size_t n = (size_t)sprintf(req, "*3\r\n$3\r\nSET\r\n$%d\r\n", FLOOD_KEY);
    memcpy(req + n, key, FLOOD_KEY);
    n += FLOOD_KEY;
    n += (size_t)sprintf(req + n, "\r\n$%d\r\n", FLOOD_VAL);
    memset(req + n, 'v', FLOOD_VAL);
    n += FLOOD_VAL;
    memcpy(req + n, "\r\n", 2);
    n += 2;
    if (lull_endpoint_send_copy(&f->c.ep, req, n) == 0)
        lull_timer_start(&f->timer, 1 * MS, 0);
}

static void flood_start(sim *S) {
    flooder *f = &S->fl;
    lull_timer_init(S->loop, &f->timer, flood_timer);
    static const lull_simfaults narrow = {.window = 4096};
    lull_simconn_options o = {
        .flags = LULL_SIMCONN_RAW, .name = "flood", .faults = &narrow};
    f->c.ep.data = S;
    if (lull_simconn_connect(S->net, &f->c, "primary", &o, flood_connected) <
        0) {
        fail(S, "flood: connect refused");
        return;
    }
    lull_endpoint_set_callbacks(&f->c.ep, flood_frame, NULL, flood_closed);
}

static void flood_stop(sim *S) {
    flooder *f = &S->fl;
    if (!S->flood || f->closing) return;
    f->closing = true;
    lull_timer_stop(&f->timer);
    lull_endpoint_close(&f->c.ep, 0);
}

/* The primary's connection of the flood holds at most its stream's
 * high-water mark, one handover's worth of replies (REPLY_HANDOVER) and
 * the reply that crossed it: with its output full it runs nothing more
 * and stops reading until on_drain. (Its requests kept are what one read
 * brought: over lull's streams that is the kernel's, not bounded here.) */
static void check_flood(sim *S) {
    if (!S->flood) return;
    for (conn *c = S->nodes[0].srv.conns; c; c = c->next) {
        if (c->gone || strncmp(c->name, "flood:", 6) != 0) continue;
        size_t out = c->out.len + c->ep->queued;
        size_t most = c->ep->high_water + REPLY_HANDOVER + 2 * (FLOOD_VAL + 9);
        if (out > S->fl.max_out) S->fl.max_out = out;
        if (out > most)
            fail(S,
                 "primary: the flood's connection holds %zu bytes of "
                 "replies, past its high-water mark (%zu), a handover "
                 "(%zu) and a reply: it went on running requests",
                 out, c->ep->high_water, REPLY_HANDOVER);
        return;
    }
}

/* ------------------------------------------------------------ bulk */

static const char bulk_keys[BULK_TYPES] = {'l', 's', 'h', 'z'};

/* A size at or next to a batch edge, or any from past one batch to 600. */
static int bulk_size(bulker *b) {
    uint64_t x = rnd(&b->rng) % 12;
    if (x < 9) return (int)(x / 3 + 1) * 128 - 1 + (int)(x % 3);
    return 129 + (int)(rnd(&b->rng) % 472);
}

/* Items [from, to) of collection t added: RPUSH, SADD, HSET or ZADD. */
static int bulk_add(bulker *b, int t, int from, int to, char *req, size_t cap) {
    static const char *const cmd[BULK_TYPES] = {"RPUSH", "SADD", "HSET",
                                                "ZADD"};
    int per = t >= 2 ? 2 : 1, n = to - from;
    int w = snprintf(req, cap, "*%d\r\n$%zu\r\n%s\r\n$5\r\nbig:%c\r\n",
                     2 + per * n, strlen(cmd[t]), cmd[t], bulk_keys[t]);
    for (int i = from; i < to; i++) {
        char a[16], m[16];
        if (t == 3)
            snprintf(a, sizeof a, "%d", i % 13 - 6);
        else if (t == 2)
            snprintf(a, sizeof a, "f%d", i);
        snprintf(m, sizeof m, "%c%d", t == 0 ? 'i' : t == 2 ? 'v' : 'm', i);
        if (per == 2)
            w += snprintf(req + w, cap - (size_t)w, "$%zu\r\n%s\r\n", strlen(a),
                          a);
        w += snprintf(req + w, cap - (size_t)w, "$%zu\r\n%s\r\n", strlen(m), m);
    }
    snprintf(b->want, sizeof b->want, ":%d\r\n", t == 0 ? to - b->lo[t] : n);
    return w;
}

/* While building: the next 64 items of the first collection short of
 * its size, sent; false when all are built. */
static bool bulk_build(sim *S) {
    bulker *b = &S->bk;
    static char req[4096];
    int t = 0;
    while (t < BULK_TYPES && b->hi[t] >= b->target[t])
        t++;
    if (t == BULK_TYPES) return false;
    int to = b->hi[t] + 64 < b->target[t] ? b->hi[t] + 64 : b->target[t];
    int w = bulk_add(b, t, b->hi[t], to, req, sizeof req);
    b->hi[t] = to;
    b->type = t;
    if (lull_endpoint_send_copy(&b->c.ep, req, (size_t)w) < 0)
        fail(S, "bulk: a send was refused");
    return true;
}

/* The walk's next step: SSCAN, HSCAN or ZSCAN big:<t> cursor COUNT 1-40. */
static void bulk_scan_send(sim *S) {
    bulker *b = &S->bk;
    static const char *const cmd[BULK_TYPES] = {NULL, "SSCAN", "HSCAN",
                                                "ZSCAN"};
    char req[160], cur[24], cnt[8];
    int cl = snprintf(cur, sizeof cur, "%" PRIu64, b->cursor);
    int nl = snprintf(cnt, sizeof cnt, "%d", 1 + (int)(rnd(&b->rng) % 40));
    int w = snprintf(req, sizeof req,
                     "*5\r\n$5\r\n%s\r\n$5\r\nbig:%c\r\n$%d\r\n%s\r\n"
                     "$5\r\nCOUNT\r\n$%d\r\n%s\r\n",
                     cmd[b->scan], bulk_keys[b->scan], cl, cur, nl, cnt);
    b->type = b->scan;
    if (lull_endpoint_send_copy(&b->c.ep, req, (size_t)w) < 0)
        fail(S, "bulk: a send was refused");
}

/* A bulk string of r at *at (its bytes and length), or NULL. */
static const char *bulk_str(const char *r, size_t len, size_t *at, size_t *n) {
    long el = model_reply_len(r + *at, len - *at);
    unsigned long long v;
    int hl;
    if (el <= 0 || r[*at] != '$' ||
        sscanf(r + *at, "$%llu\r\n%n", &v, &hl) != 1)
        return NULL;
    const char *p = r + *at + hl;
    *n = (size_t)v;
    *at += (size_t)el;
    return p;
}

/* An item's number from its name (<c><n>), or -1. */
static long bulk_item(const char *p, size_t n, char c) {
    if (n < 2 || n > 10 || p[0] != c) return -1;
    long v = 0;
    for (size_t i = 1; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

/* A step's reply, against what the collection holds: false (and the
 * seed failed) when it names what is not there, leaves out a small
 * collection's item, or (cursor 0) any item. */
static bool bulk_scan_reply(sim *S, const char *r, size_t len) {
    bulker *b = &S->bk;
    int t = b->scan, per = t == 1 ? 1 : 2;
    long lo = b->lo[t], hi = b->hi[t], size = hi - lo;
    size_t at = 0, n;
    long long k;
    int hl;
    const char *cur = NULL;
    char why[160] = "";
    if (len < 4 || memcmp(r, "*2\r\n", 4) != 0) goto bad;
    at = 4;
    if (!(cur = bulk_str(r, len, &at, &n)) || n > 20) goto bad;
    char num[24];
    memcpy(num, cur, n);
    num[n] = 0;
    b->cursor = strtoull(num, NULL, 10);
    if (at >= len || sscanf(r + at, "*%lld\r\n%n", &k, &hl) != 1 ||
        k % per != 0)
        goto bad;
    at += (size_t)hl;
    long prev = -1;
    for (long long j = 0; j < k; j += per) {
        const char *m = bulk_str(r, len, &at, &n);
        long i = m ? bulk_item(m, n, t == 2 ? 'f' : 'm') : -1;
        if (i < lo || i >= hi) {
            snprintf(why, sizeof why, "%.*s, not there",
                     m ? (int)(n < 20 ? n : 20) : 1, m ? m : "?");
            break;
        }
        if (per == 2) {
            char want[16];
            const char *v = bulk_str(r, len, &at, &n);
            int wl = t == 2 ? snprintf(want, sizeof want, "v%ld", i)
                            : snprintf(want, sizeof want, "%ld", i % 13 - 6);
            if (!v || n != (size_t)wl || memcmp(v, want, n) != 0) {
                snprintf(why, sizeof why, "%c%ld with %.*s, not %s",
                         t == 2 ? 'f' : 'm', i, v ? (int)(n < 20 ? n : 20) : 1,
                         v ? v : "?", want);
                break;
            }
        }
        /* A small sorted set comes in its order: score, then name. */
        if (t == 3 && size <= 128 && prev >= 0) {
            long ps = prev % 13 - 6, s = i % 13 - 6;
            char a[16], c[16];
            snprintf(a, sizeof a, "m%ld", prev);
            snprintf(c, sizeof c, "m%ld", i);
            if (ps > s || (ps == s && strcmp(a, c) >= 0)) {
                snprintf(why, sizeof why, "m%ld after m%ld: out of order", i,
                         prev);
                break;
            }
        }
        prev = i;
        b->seen[i - lo] = 1;
    }
    if (!why[0] && size <= 128 && (b->cursor != 0 || k != per * size))
        snprintf(why, sizeof why,
                 "cursor %" PRIu64 " with %lld of %ld items: not whole",
                 b->cursor, k / per, size);
    for (long i = lo; !why[0] && b->cursor == 0 && i < hi; i++)
        if (!b->seen[i - lo])
            snprintf(why, sizeof why, "cursor 0, never named %c%ld",
                     t == 2 ? 'f' : 'm', i);
    if (!why[0]) return true;
bad:
    if (!why[0]) snprintf(why, sizeof why, "not a SCAN reply");
    char got[64];
    fail(S, "bulk: a SCAN step of big:%c (%ld items) got %s: %s", bulk_keys[t],
         size, oneline(r, len, got, sizeof got), why);
    return false;
}

/* Built: an item added at the end of one collection, or its first taken,
 * towards its target (redrawn now and then): a size steps over its edge
 * and back. */
static void bulk_step(sim *S) {
    bulker *b = &S->bk;
    static const char *const del[BULK_TYPES] = {"LPOP", "SREM", "HDEL", "ZREM"};
    char req[256];
    int w, t = (int)(rnd(&b->rng) % BULK_TYPES);
    b->steps++;
    /* Now and then big:t, a string with an expiry an hour or two ahead,
     * set again with KEEPTTL, which a replica must keep (the clients
     * never send KEEPTTL: the model does not know it). */
    if (rnd(&b->rng) % 8 == 0) {
        char v[16], at[24];
        int vl = snprintf(v, sizeof v, "%d", b->steps), al = 0;
        if (!b->ttl) {
            b->ttl = ms_now(S) + 3600000 + (int64_t)(rnd(&b->rng) % 3600000);
            al = snprintf(at, sizeof at, "%" PRId64, b->ttl);
        }
        w = al ? snprintf(req, sizeof req,
                          "*5\r\n$3\r\nSET\r\n$5\r\nbig:t\r\n$%d\r\n%s\r\n"
                          "$4\r\nPXAT\r\n$%d\r\n%s\r\n",
                          vl, v, al, at)
               : snprintf(req, sizeof req,
                          "*4\r\n$3\r\nSET\r\n$5\r\nbig:t\r\n$%d\r\n%s\r\n"
                          "$7\r\nKEEPTTL\r\n",
                          vl, v);
        snprintf(b->want, sizeof b->want, "+OK\r\n");
        b->type = BULK_TYPES;
        if (lull_endpoint_send_copy(&b->c.ep, req, (size_t)w) < 0)
            fail(S, "bulk: a send was refused");
        return;
    }
    if (t > 0 && rnd(&b->rng) % 4 == 0) { /* a walk, not a write */
        b->scan = t;
        b->cursor = 0;
        free(b->seen);
        b->seen = calloc((size_t)(b->hi[t] - b->lo[t]) + 1, 1);
        if (!b->seen) abort();
        bulk_scan_send(S);
        return;
    }
    if (rnd(&b->rng) % 16 == 0) b->target[t] = bulk_size(b);
    if (b->hi[t] - b->lo[t] <= b->target[t]) {
        w = bulk_add(b, t, b->hi[t], b->hi[t] + 1, req, sizeof req);
        b->hi[t]++;
    } else {
        char m[16];
        char kind = "imfm"[t];
        int ml = snprintf(m, sizeof m, "%c%d", kind, b->lo[t]);
        w = t == 0 ? snprintf(req, sizeof req,
                              "*2\r\n$4\r\nLPOP\r\n$5\r\nbig:l\r\n")
                   : snprintf(req, sizeof req,
                              "*3\r\n$4\r\n%s\r\n$5\r\nbig:%c\r\n$%d\r\n%s\r\n",
                              del[t], bulk_keys[t], ml, m);
        if (t == 0)
            snprintf(b->want, sizeof b->want, "$%d\r\n%s\r\n", ml, m);
        else
            snprintf(b->want, sizeof b->want, ":1\r\n");
        b->lo[t]++;
    }
    b->type = t;
    if (lull_endpoint_send_copy(&b->c.ep, req, (size_t)w) < 0)
        fail(S, "bulk: a send was refused");
}

/* After a reply (or the connect): the build's next command, or a step
 * later. */
static void bulk_after(sim *S) {
    bulker *b = &S->bk;
    if (b->closing || bulk_build(S)) return;
    if (b->steps < BULK_STEPS)
        lull_timer_start(&b->timer, MS + rnd(&b->rng) % (20 * MS), 0);
}

static void bulk_timer(lull_timer *t) {
    sim *S = LULL_CONTAINER_OF(t, sim, bk.timer);
    if (S->bk.up && !S->bk.closing) bulk_step(S);
}

static void bulk_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    sim *S = ep->data;
    bulker *b = &S->bk;
    buf_put(&b->in, bytes, len);
    long n;
    while ((n = model_reply_len(b->in.p, b->in.len)) > 0 && !S->failed) {
        if (b->scan) {
            if (!bulk_scan_reply(S, b->in.p, (size_t)n)) return;
            buf_consume(&b->in, (size_t)n);
            b->checked++;
            if (b->cursor && !b->closing) {
                bulk_scan_send(S);
                continue;
            }
            if (!b->cursor) b->walks++;
            b->scan = 0;
            bulk_after(S);
            continue;
        }
        if ((size_t)n != strlen(b->want) ||
            memcmp(b->in.p, b->want, (size_t)n) != 0) {
            char got[64];
            if (b->type == BULK_TYPES)
                fail(S, "bulk: SET big:t got %s, not +OK",
                     oneline(b->in.p, (size_t)n, got, sizeof got));
            else
                fail(S, "bulk: big:%c (items %d to %d) got %s, not %.*s",
                     bulk_keys[b->type], b->lo[b->type], b->hi[b->type] - 1,
                     oneline(b->in.p, (size_t)n, got, sizeof got),
                     (int)strlen(b->want) - 2, b->want);
            return;
        }
        b->checked++;
        buf_consume(&b->in, (size_t)n);
        bulk_after(S);
    }
}

static void bulk_closed(lull_endpoint *ep, int reason) {
    sim *S = ep->data;
    bulker *b = &S->bk;
    b->up = b->live = false;
    lull_timer_stop(&b->timer);
    if (!b->closing && !S->tearing_down)
        fail(S, "bulk: its clean link closed (%s)", lull_err_name(reason));
}

static void bulk_connected(lull_simconn *c, int status) {
    sim *S = c->ep.data;
    if (status < 0) return; /* bulk_closed says it */
    S->bk.up = true;
    bulk_after(S);
}

static void bulk_start(sim *S) {
    bulker *b = &S->bk;
    lull_timer_init(S->loop, &b->timer, bulk_timer);
    for (int t = 0; t < BULK_TYPES; t++)
        b->target[t] = bulk_size(b);
    static const lull_simfaults clean;
    lull_simconn_options o = {
        .flags = LULL_SIMCONN_RAW, .name = "bulk", .faults = &clean};
    b->c.ep.data = S;
    if (lull_simconn_connect(S->net, &b->c, "primary", &o, bulk_connected) <
        0) {
        fail(S, "bulk: connect refused");
        return;
    }
    b->live = true;
    lull_endpoint_set_callbacks(&b->c.ep, bulk_frame, NULL, bulk_closed);
}

static void bulk_stop(sim *S) {
    bulker *b = &S->bk;
    if (!S->grow || b->closing) return;
    b->closing = true;
    lull_timer_stop(&b->timer);
    if (b->live) lull_endpoint_close(&b->c.ep, 0);
}

/* The late replica's start: the collections built, the log trimmed. */
static void late_start(lull_timer *t) {
    sim *S = LULL_CONTAINER_OF(t, sim, late_t);
    S->late_started = true;
    lull_simnet_log(S->net, "replica%d starts", S->late);
    server_start(&S->nodes[S->late].srv);
}

/* ------------------------------------------------------------ reader */

static void reader_connect(sim *S);

static void reader_timer(lull_timer *t) {
    sim *S = LULL_CONTAINER_OF(t, sim, rd.timer);
    reader *rd = &S->rd;
    if (rd->closing) return;
    if (!rd->up) {
        reader_connect(S);
        return;
    }
    if (rd->waiting) return;
    char req[512];
    int n = sprintf(req, "*%d\r\n$4\r\nMGET\r\n", 1 + 2 * S->nclients);
    for (int i = 1; i <= S->nclients; i++)
        for (char ab = 'a'; ab <= 'b'; ab++)
            n += sprintf(req + n, "$%d\r\nc%d:p%c\r\n", i < 10 ? 5 : 6, i, ab);
    if (lull_endpoint_send_copy(&rd->c.ep, req, (size_t)n) == 0)
        rd->waiting = true;
}

static void reader_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    sim *S = ep->data;
    reader *rd = &S->rd;
    buf_put(&rd->in, bytes, len);
    long n;
    while ((n = model_reply_len(rd->in.p, rd->in.len)) > 0 && !S->failed) {
        const char *r = rd->in.p, *e = memchr(r, '\n', (size_t)n) + 1;
        const char *end = r + n;
        for (int i = 1; i <= S->nclients && e < end; i++) {
            long la = model_reply_len(e, (size_t)(end - e));
            long lb =
                la > 0 ? model_reply_len(e + la, (size_t)(end - e - la)) : -1;
            if (la <= 0 || lb <= 0) {
                fail(S, "%s: MGET got %.*s", S->nodes[rd->replica].name, (int)n,
                     r);
                break;
            }
            if (la != lb || memcmp(e, e + la, (size_t)la) != 0) {
                char a[64], b[64];
                fail(S,
                     "%s (offset %" PRIu64 "): c%d:pa is %s, c%d:pb is %s: "
                     "half a transaction, read by a client of the replica",
                     S->nodes[rd->replica].name,
                     S->nodes[rd->replica].srv.kv.offset, i,
                     oneline(e, (size_t)la, a, sizeof a), i,
                     oneline(e + la, (size_t)lb, b, sizeof b));
                break;
            }
            e += la + lb;
        }
        rd->reads++;
        rd->waiting = false;
        buf_consume(&rd->in, (size_t)n);
    }
    if (!rd->closing) lull_timer_start(&rd->timer, below(&S->rng, 3 * MS), 0);
}

static void reader_closed(lull_endpoint *ep, int reason) {
    sim *S = ep->data;
    reader *rd = &S->rd;
    (void)reason;
    rd->live = rd->up = rd->waiting = false;
    rd->in.len = 0;
    if (rd->closing || S->tearing_down) return;
    lull_timer_start(&rd->timer, 1 * MS + below(&S->rng, 20 * MS), 0);
}

static void reader_connected(lull_simconn *c, int status) {
    sim *S = c->ep.data;
    if (status < 0) return; /* reader_closed retries */
    S->rd.up = true;
    lull_timer_start(&S->rd.timer, 0, 0);
}

static void reader_connect(sim *S) {
    reader *rd = &S->rd;
    lull_simconn_options o = {.flags = LULL_SIMCONN_RAW, .name = "reader"};
    rd->c.ep.data = S;
    if (lull_simconn_connect(S->net, &rd->c, S->nodes[rd->replica].name, &o,
                             reader_connected) < 0) {
        fail(S, "reader: connect refused at once");
        return;
    }
    rd->live = true;
    lull_endpoint_set_callbacks(&rd->c.ep, reader_frame, NULL, reader_closed);
}

static void reader_stop(sim *S) {
    reader *rd = &S->rd;
    if (rd->closing) return;
    rd->closing = true;
    lull_timer_stop(&rd->timer);
    if (rd->live) lull_endpoint_close(&rd->c.ep, 0);
}

/* ------------------------------------------------------------ pub/sub */

/* Seeds with `extra`: on the primary (and on a replica in half of them)
 * a publisher and two subscribers, on links with the seed's faults less
 * those that end a connection: A subscribes to ch:0 and ch:1, B to the
 * pattern ch:* and the channel ch:1. The publisher sends PUBLISHes to
 * ch:0, ch:1 and ch:2, pipelined; then A drops ch:1 and B ch:*, and it
 * publishes again. Each PUBLISH must answer how many got it, and each
 * subscriber must get every message of its subscriptions once, in the
 * order published, a channel's before a pattern's (Redis' order), and
 * nothing else: not one of a channel it dropped, nor (on the primary)
 * one published on a replica. A replica's subscribers also hear the
 * primary's messages (PUBLISH is logged), interleaved with their own
 * node's as replication goes: those are checked apart (ps_primary_msg,
 * ps_owed_done), and the replica is made once to resync in full
 * (ps_forget_history), so that its sync point is met; the primary's
 * next PUBLISH waits until it is in sync (ps_hold). */

static void ps_expect(ps_conn *pc, const char *bytes, size_t n) {
    sim *S = pc->g->S;
    if (pc->wlen == PS_WANT || n > PS_WANT_LEN) {
        fail(S, "pubsub: more owed than the simulator keeps");
        return;
    }
    int i = (pc->whead + pc->wlen++) % PS_WANT;
    memcpy(pc->want[i], bytes, n);
    pc->want_len[i] = (uint8_t)n;
}

static void ps_send(ps_conn *pc, const char *req, size_t n) {
    int rc = lull_endpoint_send_copy(&pc->c.ep, req, n);
    if (rc < 0) fail(pc->g->S, "pubsub: a send was refused: %s", strerror(-rc));
}

/* A subscribe or unsubscribe command (kind: "subscribe", ...) of one
 * name, and its confirmation, which says how many the client then has. */
static void ps_sub(ps_conn *pc, const char *kind, const char *name, int after) {
    char req[96], want[96];
    size_t kl = strlen(kind), nl = strlen(name);
    int n =
        sprintf(req, "*2\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n", kl, kind, nl, name);
    int w = sprintf(want, "*3\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n:%d\r\n", kl, kind,
                    nl, name, after);
    ps_expect(pc, want, (size_t)w);
    lull_simnet_log(pc->g->S->net, "ps%d.%d > %s %s", pc->g->node, pc->role,
                    kind, name);
    ps_send(pc, req, (size_t)n);
}

static bool ps_settled(const ps_group *g) {
    for (int i = 0; i < 3; i++)
        if (!g->conn[i].up || g->conn[i].wlen || g->conn[i].pings) return false;
    return true;
}

static void ps_close(ps_group *g) {
    g->phase = 5;
    lull_timer_stop(&g->timer);
    for (int i = 0; i < 3; i++)
        if (g->conn[i].live) lull_endpoint_close(&g->conn[i].c.ep, 0);
}

/* The primary's group, done, sends FLUSHALL or FLUSHDB (with SYNC or
 * ASYNC, or neither) once the clients are done; its +OK empties every
 * client's model. */
static void ps_flush_maybe(sim *S) {
    ps_group *g = &S->ps[0];
    if (!S->nps || g->phase != 4 || S->active) return;
    if (!S->flush) {
        ps_close(g);
        return;
    }
    if (g->flush_sent) return;
    g->flush_sent = true;
    /* FLUSHDB is logged as FLUSHALL; SYNC and ASYNC are the same here */
    static const char *const how[][2] = {
        {"FLUSHALL", "*1\r\n$8\r\nFLUSHALL\r\n"},
        {"FLUSHDB", "*1\r\n$7\r\nFLUSHDB\r\n"},
        {"FLUSHALL SYNC", "*2\r\n$8\r\nFLUSHALL\r\n$4\r\nSYNC\r\n"},
        {"FLUSHDB ASYNC", "*2\r\n$7\r\nFLUSHDB\r\n$5\r\nASYNC\r\n"}};
    int h = (int)below(&S->xrng, 4);
    ps_expect(&g->conn[0], "+OK\r\n", 5);
    lull_simnet_log(S->net, "ps0.0 > %s", how[h][0]);
    ps_send(&g->conn[0], how[h][1], strlen(how[h][1]));
}

static void ps_publish(ps_group *g) {
    sim *S = g->S;
    int c = (int)below(&S->xrng, 3);
    char chan[8], msg[32], req[128], want[PS_WANT_LEN];
    snprintf(chan, sizeof chan, "ch:%d", c);
    if (g->seq + 1 >= PS_MSGS) {
        fail(S, "pubsub: more messages than the simulator keeps");
        return;
    }
    int ml = snprintf(msg, sizeof msg, "n%d.%d", g->node, ++g->seq);
    if (g->node == 0) S->ps0_chan[g->seq] = (int8_t)c;
    int n = sprintf(req, "*3\r\n$7\r\nPUBLISH\r\n$4\r\n%s\r\n$%d\r\n%s\r\n",
                    chan, ml, msg);
    int got = 0;
    for (int i = 1; i < 3; i++) {
        ps_conn *pc = &g->conn[i];
        if (c < 2 && (pc->subs >> c & 1)) {
            int w = sprintf(want,
                            "*3\r\n$7\r\nmessage\r\n$4\r\n%s\r\n$%d\r\n%s\r\n",
                            chan, ml, msg);
            ps_expect(pc, want, (size_t)w);
            got++;
        }
        if (pc->subs & 4) {
            int w =
                sprintf(want,
                        "*4\r\n$8\r\npmessage\r\n$4\r\nch:*\r\n$4\r\n%s\r\n$%d"
                        "\r\n%s\r\n",
                        chan, ml, msg);
            ps_expect(pc, want, (size_t)w);
            got++;
        }
    }
    int w = sprintf(want, ":%d\r\n", got);
    ps_expect(&g->conn[0], want, (size_t)w);
    lull_simnet_log(S->net, "ps%d.0 > PUBLISH %s %s", g->node, chan, msg);
    ps_send(&g->conn[0], req, (size_t)n);
}

/* The offset of the PUBLISH record of the primary's group's message J
 * in the primary's log, found in the archive (UINT64_MAX: not logged).
 * The records are found in J's order, each after the one before. */
static uint64_t ps_record_at(sim *S, int j) {
    archive_sync(S);
    while (S->ps0_found < j) {
        int i = S->ps0_found + 1;
        char msg[16], rec[96];
        int ml = snprintf(msg, sizeof msg, "n0.%d", i);
        int n = snprintf(rec, sizeof rec,
                         "*3\r\n$7\r\nPUBLISH\r\n$4\r\nch:%d\r\n$%d\r\n%s\r\n",
                         S->ps0_chan[i], ml, msg);
        uint64_t from = S->ps0_found ? S->ps0_off[S->ps0_found] : 0;
        uint64_t at = from;
        while (at + (size_t)n <= S->arch.len &&
               memcmp(S->arch.p + at, rec, (size_t)n) != 0)
            at++;
        if (at + (size_t)n > S->arch.len) return UINT64_MAX;
        S->ps0_off[i] = at;
        S->ps0_found = i;
    }
    return S->ps0_off[j];
}

/* A replica's group ends once the primary's group is done (every
 * PUBLISH answered, so logged), the replica has applied the log past
 * them in the primary's history, and its subscribers got every message
 * owed to them: A each one on ch:0, B each on ch:1 (channels they keep),
 * whose record is at or after both the replica's offset when their
 * subscriptions were confirmed and its history's sync point. */
static bool ps_owed_done(ps_group *g) {
    sim *S = g->S;
    node *n = &S->nodes[g->node];
    if (!S->ps0_end || n->srv.kv.offset < S->ps0_end ||
        strcmp(n->srv.m.replid, S->nodes[0].srv.kv.replid) != 0)
        return false;
    uint64_t from = g->sub_off > n->sync_owed ? g->sub_off : n->sync_owed;
    for (int j = 1; j <= S->ps[0].seq; j++) {
        int c = S->ps0_chan[j];
        if (c > 1) continue;
        const ps_conn *pc = &g->conn[c == 0 ? 1 : 2];
        uint64_t off = ps_record_at(S, j);
        if (off == UINT64_MAX || (off >= from && !(pc->got0 >> j & 1)))
            return false;
    }
    return true;
}

/* A message of the primary's group (n0.J) on a replica's subscriber: the
 * replica applied its PUBLISH record (PUBLISH is passed on, as Redis
 * passes it). It must be of a subscription pc began with and whose drop
 * was not confirmed yet, come after every such message it got (J's
 * message before J's pmessage: each once, in the order published), and
 * be logged at or after the sync point of the replica's history: none
 * published before the replica synced. 0: not such a message (the ring
 * checks it); 1: checked; -1: the seed failed. */
static int ps_primary_msg(ps_conn *pc, const char *r, size_t n) {
    ps_group *g = pc->g;
    sim *S = g->S;
    static const char m[] = "*3\r\n$7\r\nmessage\r\n$4\r\nch:";
    static const char pm[] = "*4\r\n$8\r\npmessage\r\n$4\r\nch:*\r\n$4\r\nch:";
    char t[96];
    if (g->node == 0 || pc->role == 0 || n >= sizeof t) return 0;
    memcpy(t, r, n);
    t[n] = 0;
    bool pat = strncmp(t, pm, sizeof pm - 1) == 0;
    if (!pat && strncmp(t, m, sizeof m - 1) != 0) return 0;
    int c, len, j;
    if (sscanf(t + (pat ? sizeof pm : sizeof m) - 1, "%d\r\n$%d\r\nn0.%d", &c,
               &len, &j) != 3)
        return 0;
    unsigned bit = pat ? 4u : c < 2 ? 1u << c : 0;
    uint64_t off = 0, sync = pc->sync;
    const char *why = NULL;
    if (j < 1 || j > S->ps[0].seq || S->ps0_chan[j] != c)
        why = "not a message the primary's publisher sent";
    else if (!(pc->subs0 & bit))
        why = "not of its subscriptions";
    else if (pc->dropped & bit)
        why = "after its drop was confirmed";
    else if (2 * j + pat <= pc->last0)
        why = "again, or out of the order published";
    else if ((off = ps_record_at(S, j)) == UINT64_MAX)
        why = "not in the primary's log";
    else if (off < sync)
        why = "logged before the sync point of the replica's history";
    char got[160];
    if (why) {
        fail(S,
             "pubsub: subscriber %c of %s got %s: %s (its record at %" PRIu64
             ", the sync point %" PRIu64 ")",
             pc->role == 1 ? 'A' : 'B', S->nodes[g->node].name,
             oneline(r, n, got, sizeof got), why, off, sync);
        return -1;
    }
    pc->last0 = 2 * j + pat;
    if (!pat) pc->got0 |= 1ull << j;
    S->pushes++;
    S->pushes0++;
    lull_simnet_log(S->net, "ps%d.%d < %s", g->node, pc->role,
                    oneline(r, n, got, sizeof got));
    return 1;
}

/* Once the primary's group has published its first messages, the
 * replica with a group forgets its history, as one that restarted (or
 * ran out of memory mid-record) does, and its link is cut: it syncs in
 * full, from the log's 0 while nothing was trimmed, and its subscribers
 * must hear none of the messages logged before its new sync point
 * again, nor any it missed meanwhile, but every one after it. */
static void ps_forget_history(sim *S) {
    if (S->nps < 2) return;
    node *n = &S->nodes[S->ps[1].node];
    if (n->srv.m.state != M_UP || !n->srv.m.replid[0]) return;
    lull_simnet_log(S->net, "%s forgets its history", n->name);
    n->srv.m.replid[0] = 0;
    kill_replicas(&S->nodes[0].srv.kv);
    S->forgotten++;
    S->ps_hold = true;
}

/* The group's next move, after anything it got. */
static void ps_advance(ps_group *g) {
    sim *S = g->S;
    if (S->failed || S->tearing_down) return;
    if (g->phase == 0 && ps_settled(g)) {
        g->phase = 1;
        g->sub_off = S->nodes[g->node].srv.kv.offset;
        g->left = 5 + (int)below(&S->xrng, 30);
    }
    if (g->phase == 1 || g->phase == 3) {
        ps_conn *pub = &g->conn[0];
        while (g->left > 0 && pub->wlen < g->depth &&
               !lull_timer_active(&g->timer) && !(!g->node && S->ps_hold)) {
            ps_publish(g);
            g->left--;
            uint64_t think = below(&S->xrng, 3);
            if (think)
                lull_timer_start(&g->timer, think * below(&S->xrng, MS), 0);
        }
        if (g->left == 0 && pub->wlen == 0) {
            if (g->phase == 1) {
                g->phase = 2;
                g->conn[1].subs &= ~2u;
                ps_sub(&g->conn[1], "unsubscribe", "ch:1", 1);
                g->conn[2].subs &= ~4u;
                ps_sub(&g->conn[2], "punsubscribe", "ch:*", 1);
                return;
            }
            g->phase = 4;
            if (g->node == 0) S->ps0_end = S->nodes[0].srv.kv.log.end;
        }
    }
    if (g->phase == 2 && ps_settled(g)) {
        g->phase = 3;
        if (g->node == 0) ps_forget_history(S);
        g->left = 3 + (int)below(&S->xrng, 10);
        ps_advance(g);
        return;
    }
    if (g->phase == 4 && ps_settled(g)) {
        if (!g->node)
            ps_flush_maybe(S);
        else if (ps_owed_done(g))
            ps_close(g);
    }
}

static void ps_timer(lull_timer *t) {
    ps_advance(LULL_CONTAINER_OF(t, ps_group, timer));
}

static void ps_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    ps_conn *pc = ep->data;
    ps_group *g = pc->g;
    sim *S = g->S;
    buf_put(&pc->in, bytes, len);
    size_t at = 0;
    while (at < pc->in.len && !S->failed) {
        const char *r = pc->in.p + at;
        long n = model_reply_len(r, pc->in.len - at);
        if (n == 0) break;
        int from0 = n > 0 ? ps_primary_msg(pc, r, (size_t)n) : 0;
        if (from0 < 0) return;
        /* The reply to a PING of ps_new_history: out of the ring, as the
         * messages of a PUBLISH sent before it may come after it. */
        if (from0 == 0 && pc->pings && n == 20 &&
            memcmp(r, "*2\r\n$4\r\npong\r\n$0\r\n\r\n", 20) == 0) {
            pc->sync = pc->sync_next[0];
            memmove(pc->sync_next, pc->sync_next + 1,
                    (size_t)--pc->pings * sizeof *pc->sync_next);
            from0 = 1;
        }
        if (from0 > 0) {
            at += (size_t)n;
            continue;
        }
        char got[160], want[160];
        const char *who = pc->role == 0   ? "the publisher"
                          : pc->role == 1 ? "subscriber A"
                                          : "subscriber B";
        if (n < 0 || !pc->wlen) {
            fail(S, "pubsub: %s of %s got %s, nothing owed to it", who,
                 S->nodes[g->node].name,
                 oneline(r, pc->in.len - at, got, sizeof got));
            return;
        }
        const char *w = pc->want[pc->whead];
        size_t wl = pc->want_len[pc->whead];
        if ((size_t)n != wl || memcmp(r, w, wl) != 0) {
            fail(S, "pubsub: %s of %s got %s; next owed: %s", who,
                 S->nodes[g->node].name, oneline(r, (size_t)n, got, sizeof got),
                 oneline(w, wl, want, sizeof want));
            return;
        }
        lull_simnet_log(S->net, "ps%d.%d < %s", g->node, pc->role,
                        oneline(r, (size_t)n, got, sizeof got));
        if (pc->role) S->pushes++;
        /* A drop confirmed: no message of it may come after. */
        if (strncmp(w, "*3\r\n$11\r\nunsubscribe\r\n$4\r\nch:1", 30) == 0)
            pc->dropped |= 2;
        if (strncmp(w, "*3\r\n$12\r\npunsubscribe\r\n", 23) == 0)
            pc->dropped |= 4;
        if (pc->role == 0 && g->flush_sent && pc->wlen == 1) {
            S->flushes++;
            for (int c = 0; c < S->nclients; c++)
                for (int k = 0; k < KEYS; k++)
                    model_key_init(&S->clients[c].keys[k]);
        }
        pc->whead = (pc->whead + 1) % PS_WANT;
        pc->wlen--;
        at += (size_t)n;
    }
    buf_consume(&pc->in, at);
    if (g->flush_sent && !g->conn[0].wlen) {
        ps_close(g);
        return;
    }
    ps_advance(g);
}

static void ps_closed(lull_endpoint *ep, int reason) {
    ps_conn *pc = ep->data;
    ps_group *g = pc->g;
    pc->live = pc->up = false;
    if (g->phase != 5)
        fail(g->S, "pubsub: a clean link to %s closed (%s) in phase %d",
             g->S->nodes[g->node].name,
             reason ? lull_err_name(reason) : "an EOF", g->phase);
}

static void ps_connected(lull_simconn *c, int status) {
    ps_conn *pc = c->ep.data;
    if (status < 0) return; /* ps_closed says so */
    pc->up = true;
    /* Its messages are of the replica's history now, or a later one. */
    pc->sync = pc->g->S->nodes[pc->g->node].sync_point;
    if (pc->role == 1) {
        pc->subs = pc->subs0 = 3;
        ps_sub(pc, "subscribe", "ch:0", 1);
        ps_sub(pc, "subscribe", "ch:1", 2);
    } else if (pc->role == 2) {
        pc->subs = pc->subs0 = 6;
        ps_sub(pc, "psubscribe", "ch:*", 1);
        ps_sub(pc, "subscribe", "ch:1", 2);
    }
    ps_advance(pc->g);
}

static void ps_start(sim *S, ps_group *g, int at) {
    g->S = S;
    g->node = at;
    g->depth = 1 + (int)below(&S->xrng, PIPE_MAX);
    lull_timer_init(S->loop, &g->timer, ps_timer);
    for (int i = 0; i < 3; i++) {
        ps_conn *pc = &g->conn[i];
        char name[16];
        snprintf(name, sizeof name, "ps%d.%d", at, i);
        lull_simconn_options o = {.flags = LULL_SIMCONN_RAW,
                                  .name = name,
                                  .faults = &S->clean_faults};
        pc->g = g;
        pc->role = i;
        pc->c.ep.data = pc;
        if (lull_simconn_connect(S->net, &pc->c, S->nodes[at].name, &o,
                                 ps_connected) < 0) {
            fail(S, "pubsub: connect refused at once");
            return;
        }
        pc->live = true;
        lull_endpoint_set_callbacks(&pc->c.ep, ps_frame, NULL, ps_closed);
    }
}

/* What a group that did not finish waits for, into out. */
static bool ps_unfinished(sim *S, char *out, size_t cap) {
    for (int i = 0; i < S->nps; i++) {
        ps_group *g = &S->ps[i];
        if (g->phase == 5) continue;
        int c = 0;
        while (c < 2 && !g->conn[c].wlen)
            c++;
        ps_conn *pc = &g->conn[c];
        char w[160];
        if (g->node && g->phase == 4 && !pc->wlen) {
            snprintf(out, cap,
                     "pubsub on %s stuck in phase 4: the primary's messages "
                     "owed to its subscribers not all got (its offset %" PRIu64
                     ", the last message's log end %" PRIu64 ")",
                     S->nodes[g->node].name, S->nodes[g->node].srv.kv.offset,
                     S->ps0_end);
            return true;
        }
        snprintf(out, cap, "pubsub on %s stuck in phase %d: %s%s",
                 S->nodes[g->node].name, g->phase,
                 pc->wlen ? "owed " : "nothing owed",
                 pc->wlen ? oneline(pc->want[pc->whead],
                                    pc->want_len[pc->whead], w, sizeof w)
                          : "");
        return true;
    }
    return false;
}

/* ------------------------------------------------------------ checks */

/* The bytes of record r of a log, read from its chunks directly (not by
 * repl_log_next, which a planted bug may bend). */
static const char *record_at(const sim *S, size_t r, size_t *len) {
    uint64_t at = S->arch_starts[r];
    uint64_t next = r + 1 < S->arch_nrec ? S->arch_starts[r + 1] : S->arch.len;
    *len = (size_t)(next - at);
    return S->arch.p + at;
}

/* The archived record starting at off (arch_nrec: off is the end), or
 * SIZE_MAX when off is not a record boundary. */
static size_t archive_seek(const sim *S, uint64_t off) {
    size_t lo = 0, hi = S->arch_nrec;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (S->arch_starts[mid] < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < S->arch_nrec ? S->arch_starts[lo] != off : off != S->arch.len)
        return SIZE_MAX;
    return lo;
}

static bool record_is(const char *p, size_t len, const char *name) {
    char want[32];
    int n =
        snprintf(want, sizeof want, "*1\r\n$%zu\r\n%s\r\n", strlen(name), name);
    return len == (size_t)n && memcmp(p, want, len) == 0;
}

/* The offset where the transaction holding `off` began (its MULTI), or
 * UINT64_MAX when off is not inside one. Transactions here are short: a
 * few records back tell. */
static uint64_t inside_transaction(const sim *S, size_t rec) {
    for (size_t r = rec; r-- > 0 && rec - r <= 8;) {
        size_t len;
        const char *p = record_at(S, r, &len);
        if (record_is(p, len, "EXEC")) return UINT64_MAX;
        if (record_is(p, len, "MULTI")) return S->arch_starts[r];
    }
    return UINT64_MAX;
}

/* One side of first_difference: its line, or a long one's head and
 * its bytes from `at`, where the two differ. */
static int diff_line(char *out, size_t cap, const char *name, const char *l,
                     int at) {
    int len = (int)strcspn(l, "\n");
    if (!len) return snprintf(out, cap, "\n  %s: (none)", name);
    if (len <= 160) return snprintf(out, cap, "\n  %s: %.*s", name, len, l);
    return snprintf(out, cap, "\n  %s: %.60s ... from byte %d: %.*s", name, l,
                    at, len - at < 40 ? len - at : 40, l + at);
}

/* The first line where two dumps differ, as "key: a" / "key: b". */
static void first_difference(const buf *a, const buf *b, char *out, size_t cap,
                             const char *an, const char *bn) {
    const char *x = a->p ? a->p : "", *y = b->p ? b->p : "";
    const char *x0 = x;
    while (*x && *x == *y)
        x++, y++;
    const char *d = x;
    while (x > x0 && x[-1] != '\n')
        x--, y--;
    int n = diff_line(out, cap, an, x, (int)(d - x));
    if (n > 0 && (size_t)n < cap)
        diff_line(out + n, cap - (size_t)n, bn, y, (int)(d - x));
}

/* Whether two hashes, sets or sorted sets (type t) hold the same: each
 * member of one in the other, with the same value or score (bit for
 * bit: the dump's %.17g tells every two doubles apart). */
static bool same_members(int t, kobj *x, kobj *y) {
    const dict *d = t == KV_SET    ? &((kv_set *)x->val)->d
                    : t == KV_HASH ? &((kv_hash *)x->val)->d
                                   : &((kv_zset *)x->val)->d;
    const dict *o = t == KV_SET    ? &((kv_set *)y->val)->d
                    : t == KV_HASH ? &((kv_hash *)y->val)->d
                                   : &((kv_zset *)y->val)->d;
    if (d->count != o->count) return false;
    for (size_t i = 0; i < d->nbuckets; i++)
        for (dict_entry *e = d->buckets[i]; e; e = e->next) {
            dict_entry *f = dict_find(o, dict_key(d, e), e->klen);
            if (!f) return false;
            if (t == KV_HASH) {
                kv_elem *u = hash_value(e), *v = hash_value(f);
                if (u->len != v->len ||
                    memcmp(elem_bytes(u), elem_bytes(v), u->len) != 0)
                    return false;
            } else if (t == KV_ZSET &&
                       memcmp(&zset_member(e)->score, &zset_member(f)->score,
                              sizeof(double)) != 0) {
                return false;
            }
        }
    return true;
}

/* Whether two keyspaces hold the same keys, each with one type, expiry
 * time and value: the same answer as comparing their dumps (kv_dump),
 * without making them (for the workload's types; -1 when another type
 * is there, then the dumps say). */
static int same_keys(kv *a, kv *b) {
    if (store_count(&a->db) != store_count(&b->db)) return 0;
    for (size_t i = 0; i < a->db.d.nbuckets; i++)
        for (dict_entry *e = a->db.d.buckets[i]; e; e = e->next) {
            dict_entry *f = store_find(&b->db, dict_key(&a->db.d, e), e->klen);
            if (!f) return 0;
            kobj *x = store_obj(e), *y = store_obj(f);
            if (x->type != y->type ||
                store_expire(&a->db, e) != store_expire(&b->db, f))
                return 0;
            if (x->type == KV_STRING) {
                if (x->len != y->len ||
                    memcmp(kobj_str(x), kobj_str(y), x->len) != 0)
                    return 0;
            } else if (x->type == KV_LIST) {
                kv_list *l = x->val, *m = y->val;
                if (l->n != m->n) return 0;
                for (size_t j = 0; j < l->n; j++) {
                    kv_elem *u = list_at(l, j), *v = list_at(m, j);
                    if (u->len != v->len ||
                        memcmp(elem_bytes(u), elem_bytes(v), u->len) != 0)
                        return 0;
                }
            } else if (x->type == KV_SET || x->type == KV_HASH ||
                       x->type == KV_ZSET) {
                if (!same_members(x->type, x, y)) return 0;
            } else {
                return -1;
            }
        }
    return 1;
}

/* Each set's member array as types.c keeps it: arr[j] a member of the
 * set whose index is j. SMEMBERS, SUNION, SPOP and SRANDMEMBER read the
 * array; the dumps and same_keys read the table, so an array gone wrong
 * (a member deleted still in it, a live one left out) showed only when a
 * read happened to reach that slot. Empty, or the first key whose array
 * is wrong (into `bad`). */
static bool sets_consistent(kv *k, char *bad, size_t cap) {
    for (size_t i = 0; i < k->db.d.nbuckets; i++)
        for (dict_entry *e = k->db.d.buckets[i]; e; e = e->next) {
            kobj *o = store_obj(e);
            if (o->type != KV_SET) continue;
            kv_set *s = o->val;
            for (size_t j = 0; j < s->d.count; j++) {
                dict_entry *m = s->arr[j];
                if (*(const size_t *)dict_data(m) == j &&
                    dict_find(&s->d, dict_key(&s->d, m), m->klen) == m)
                    continue;
                snprintf(bad, cap, "%.*s (slot %zu of %zu)", (int)e->klen,
                         (const char *)dict_key(&k->db.d, e), j, s->d.count);
                return false;
            }
        }
    return true;
}

/* A replica that has applied the whole log holds the primary's keyspace,
 * expiry times included: compared each time one gets there at a new
 * offset, so the first divergence is caught at the offset it shows,
 * while the run goes on, not at the end. */
static void check_caught_up(sim *S, node *n) {
    server *p = &S->nodes[0].srv;
    uint64_t off = n->srv.kv.offset;
    if (off != p->kv.log.end || n->compared == off + 1 ||
        strcmp(n->srv.m.replid, p->kv.replid) != 0)
        return;
    n->compared = off + 1;
    char bad[96];
    for (int i = 0; i < 2; i++) {
        node *x = i ? n : &S->nodes[0];
        if (!sets_consistent(&x->srv.kv, bad, sizeof bad)) {
            fail(S,
                 "%s: set %s: its member array does not match its members "
                 "(offset %" PRIu64 ")",
                 x->name, bad, off);
            return;
        }
    }
    if (same_keys(&p->kv, &n->srv.kv) == 1) return;
    static buf dp, dr;
    kv_dump(&p->kv, &dp);
    kv_dump(&n->srv.kv, &dr);
    if (dp.len == dr.len && memcmp(dp.p, dr.p, dp.len) == 0) return;
    char d[900];
    first_difference(&dp, &dr, d, sizeof d, "primary", n->name);
    fail(S,
         "%s differs from the primary with the whole log applied (offset "
         "%" PRIu64 "):%s",
         n->name, off, d);
}

/* The atomicity pairs as a replica holds them after every event (what a
 * client of it would read at that instant, without the network's delay
 * between it and the instant): never unequal. */
static void check_pairs(sim *S, node *n) {
    static const char *const pairs[CLIENTS_MAX][2] = {{"c1:pa", "c1:pb"},
                                                      {"c2:pa", "c2:pb"},
                                                      {"c3:pa", "c3:pb"},
                                                      {"c4:pa", "c4:pb"}};
    for (int i = 1; i <= S->nclients; i++) {
        const char *ka = pairs[i - 1][0], *kb = pairs[i - 1][1];
        size_t la = 0, lb = 0;
        const char *a = store_get(&n->srv.kv.db, ka, 5, &la);
        const char *b = store_get(&n->srv.kv.db, kb, 5, &lb);
        if ((!a) == (!b) && la == lb && (!a || memcmp(a, b, la) == 0)) continue;
        fail(S,
             "%s at offset %" PRIu64 " holds %s = %.*s and %s = %.*s: part "
             "of a transaction",
             n->name, n->srv.kv.offset, ka, a ? (int)la : 6, a ? a : "(none)",
             kb, b ? (int)lb : 6, b ? b : "(none)");
        return;
    }
}

/* The keyspace whose table a walk is of. */
static const store *store_of(const dict *d) {
    return (const store *)(const void *)((const char *)d - offsetof(store, d));
}

static void no_key_past_time(const dict *d, dict_entry *e, void *arg) {
    int64_t *now_and_found = arg; /* [0] now, [1] an expire seen past it */
    int64_t t = store_expire(store_of(d), e);
    if (store_expired(t, now_and_found[0]) && !now_and_found[1])
        now_and_found[1] = t;
}

/* A key past its time, looked for in the primary's keyspace. */
typedef struct overdue {
    int64_t now;
    const dict_entry *seen; /* found at the last look (NULL: none) */
    int64_t seen_expire;
    bool still;              /* it is there, as it was */
    const dict_entry *first; /* the first found at this look */
    int64_t first_expire;
} overdue;

static void find_overdue(const dict *d, dict_entry *e, void *arg) {
    overdue *o = arg;
    int64_t t = store_expire(store_of(d), e);
    if (!store_expired(t, o->now)) return;
    if (e == o->seen && t == o->seen_expire) o->still = true;
    if (!o->first) {
        o->first = e;
        o->first_expire = t;
    }
}

/* The primary's expiry timer deletes a key (and logs the DEL its
 * replicas apply) as soon as its time is past: no key stays longer than
 * that. A read hides one it missed (a lookup deletes it); DBSIZE, the
 * replicas and memory do not. Looked at once per ms of the primary's
 * clock: a key past its time at one look (one set with a time already
 * past goes a turn later) must be gone at the next. */
static void check_expiry_on_time(sim *S) {
    kv *k = &S->nodes[0].srv.kv;
    if (S->primary_down) return; /* its expiry timer stopped */
    overdue o = {.now = k->clock(k),
                 .seen = S->overdue,
                 .seen_expire = S->overdue_expire};
    if (o.now == S->expiry_checked) return;
    S->expiry_checked = o.now;
    uint64_t cursor = 0;
    do
        cursor = dict_scan(&k->db.d, cursor, 64, find_overdue, &o);
    while (cursor);
    if (o.still) {
        fail(S,
             "primary: a key that expired at %" PRId64 " is still held at "
             "%" PRId64 ": the expiry timer missed it",
             o.seen_expire, o.now);
        return;
    }
    S->overdue = o.first;
    S->overdue_expire = o.first_expire;
}

/* EXISTS of e's key on a replica (which deletes nothing): 1 or 0. */
static int replica_exists(kv *k, dict_entry *e) {
    resp_arg a[2] = {{"EXISTS", 6}, {dict_key(&k->db.d, e), e->klen}};
    static buf out;
    out.len = 0;
    kv_exec(k, NULL, a, 2, &out);
    return out.len >= 2 && memcmp(out.p, ":1", 2) == 0;
}

/* Keys of the expiry heap from index i on whose time is the clock's ms:
 * each must still be served (it expires once the clock is past it). */
static dict_entry *hidden_at_its_time(kv *k, size_t i, int64_t now) {
    if (i >= k->db.nheap || k->db.heap[i].expire > now) return NULL;
    dict_entry *e = k->db.heap[i].e;
    if (k->db.heap[i].expire == now && !replica_exists(k, e)) return e;
    dict_entry *d = hidden_at_its_time(k, 2 * i + 1, now);
    return d ? d : hidden_at_its_time(k, 2 * i + 2, now);
}

/* A replica deletes no key by its own clock (it waits for the primary's
 * DEL), but it must not serve one past its time: its first key to expire,
 * when that time has passed, is read as a client would (EXISTS, which on
 * a replica deletes nothing) and must be gone; nor hide one whose time
 * its clock reads. The model cannot see this: no client reads a
 * replica's expiring keys. */
static void check_no_stale(sim *S, node *n) {
    kv *k = &n->srv.kv;
    dict_entry *e = store_first_expiry(&k->db);
    int64_t now = k->clock(k);
    if (!e || store_expire(&k->db, e) > now) return;
    if (store_expired(store_expire(&k->db, e), now) && replica_exists(k, e)) {
        fail(S,
             "%s serves %.*s, which expired at %" PRId64 " (its clock %" PRId64
             ")",
             n->name, (int)e->klen, dict_key(&k->db.d, e),
             store_expire(&k->db, e), now);
        return;
    }
    if ((e = hidden_at_its_time(k, 0, now)))
        fail(S, "%s hides %.*s at %" PRId64 ", its expiry time: early", n->name,
             (int)e->klen, dict_key(&k->db.d, e), now);
}

/* No wakeup of the primary's is lost: after every event, each replica
 * link behind the log's end has its sender posted or waits for a drain
 * or a frame's release (or is closing), and the expiry timer is armed
 * for the first key to expire. A batch that logged records, or moved an
 * expiry, and left without waking them (a connection that died in it,
 * say) is caught here, not only when no later write wakes them. */
static void check_wakeups(sim *S) {
    server *p = &S->nodes[0].srv;
    if (S->primary_down) return;
    const repl_log *log = &p->kv.log;
    for (repl_peer *q = p->kv.peers.next; q != &p->kv.peers; q = q->next) {
        rlink *l = LULL_CONTAINER_OF(q, rlink, peer);
        uint64_t at = repl_log_offset(log, &l->cur);
        if (!l->c || l->c->gone || l->c->closing || at >= log->end ||
            lull_task_pending(&l->task) || l->starved ||
            !lull_endpoint_writable(l->c->ep))
            continue;
        fail(S,
             "primary: the link to the replica at port %d is at offset "
             "%" PRIu64 " of %" PRIu64 ", its sender not woken",
             q->port, at, log->end);
        return;
    }
    const kv_expiry *x = &p->expiry;
    dict_entry *e = store_first_expiry(&p->kv.db);
    if (e ? !lull_timer_active(&x->timer) ||
                x->armed_at != store_expire(&p->kv.db, e)
          : lull_timer_active(&x->timer))
        fail(S,
             "primary: its expiry timer is %s, its first key to expire "
             "at %" PRId64,
             lull_timer_active(&x->timer) ? "armed for another" : "not armed",
             e ? store_expire(&p->kv.db, e) : 0);
    /* And armed to fire once the clock reads that time + 1, the first ms
     * the key is past it, not later: a key left past its time is counted
     * (DBSIZE), held by the replicas and in memory, which no read shows
     * (the per-ms look, check_expiry_on_time, allows a turn's grace). */
    int64_t at = e ? store_expire(&p->kv.db, e) : 0;
    uint64_t due = lull_timer_deadline(&x->timer);
    if (!S->failed && e && at >= x->base_ms && due &&
        due > x->base_ns + (uint64_t)(at - x->base_ms + 1) * MS)
        fail(S,
             "primary: its expiry timer fires at %" PRIu64
             " ns, past the first ms after its first key's time %" PRId64,
             due, at);
}

/* The seed used up its budget of network events, or of loop turns at one
 * instant (run_loop): lull-kv (or the network) loops, at one virtual
 * instant or without end. The seed fails, as any check's failure does,
 * but also while tearing down, and every run of the loop from here on is
 * stopped at its next event, so the seed ends (its loop is not freed)
 * instead of hanging. Counts events and turns, not time: the same seed
 * trips at the same one. */
static void no_progress(sim *S, const char *what) {
    if (!S->failed) {
        S->failed = true;
        snprintf(S->why, sizeof S->why, "no progress: %s", what);
        lull_simnet_log(S->net, "FAIL %s", S->why);
    }
    S->stuck = true;
    S->stop_asked = true;
    lull_loop_stop(S->loop);
}

static void out_of_events(sim *S) {
    char what[160];
    snprintf(what, sizeof what,
             "%" PRIu64 " network events, the most this seed's workload "
             "takes (a loop?)",
             S->event_budget);
    no_progress(S, what);
}

/* lull_loop_run(loop, LULL_RUN_DEFAULT) a turn at a time, counting the
 * turns that neither advance the virtual clock nor see a network event
 * between them: past TURNS_PER_INSTANT, a task re-posts itself (or a
 * timer re-arms itself for now) at one instant, and the seed fails "no
 * progress" rather than hang where check_offsets is never called. Ends
 * as the run would: the loop has nothing left, or the sim stopped it. */
static void run_loop(sim *S) {
    S->stop_asked = false;
    while (!S->stop_asked && !S->stuck && lull_loop_alive(S->loop)) {
        lull_loop_run(S->loop, LULL_RUN_ONCE);
        ps_wake_waiting(S);
        uint64_t now = lull_loop_now(S->loop);
        if (now != S->turns_at || S->events != S->turns_events) {
            S->turns_at = now;
            S->turns_events = S->events;
            S->turns = 0;
        } else if (++S->turns > TURNS_PER_INSTANT) {
            char what[160];
            snprintf(what, sizeof what,
                     "%d loop turns at %" PRIu64 ".%09" PRIu64
                     " s with no network event (a task that re-posts "
                     "itself?)",
                     TURNS_PER_INSTANT, now / 1000000000, now % 1000000000);
            no_progress(S, what);
        }
    }
}

/* After every event: no replica's offset goes back, but to begin a new
 * history (a full resync from another replid); it is a record boundary
 * of the primary's log and never inside a transaction; one that has
 * applied the whole log holds the primary's keyspace. */
/* A replica link is held to the replica class's hard limit as records
 * are logged (wake_links checks each link the log grew for): so after a
 * network event that grew the primary's log, no link still open holds
 * the limit or more (client-output-buffer-limit: at the limit is over
 * it, as in Redis). Between writes a link may stay over (a resume's
 * backlog queued at once is checked at the next write or drain). */
static void check_link_limits(sim *S) {
    server *srv = &S->nodes[0].srv;
    size_t hard = srv->obl[CLASS_REPLICA].hard;
    bool grew = srv->kv.log.end != S->limit_log_end;
    S->limit_log_end = srv->kv.log.end;
    if (!hard || !grew) return;
    for (repl_peer *p = srv->kv.peers.next; p != &srv->kv.peers; p = p->next) {
        rlink *l = LULL_CONTAINER_OF(p, rlink, peer);
        if (!l->c || l->c->gone || l->c->closing) continue;
        size_t used = link_output(l);
        if (used >= hard) {
            fail(S,
                 "primary: replica link %s holds %zu bytes of output, at "
                 "or over the replica hard limit (%zu), after records "
                 "were logged, and is still open",
                 l->c->name, used, hard);
            return;
        }
    }
}

/* The primary's log end when it took the newest REPLSYNC of replica i
 * (its link's start) into *start; false when it has no link. */
static bool newest_link_start(sim *S, int i, uint64_t *start) {
    server *srv = &S->nodes[0].srv;
    bool found = false;
    for (repl_peer *p = srv->kv.peers.next; p != &srv->kv.peers; p = p->next)
        if (p->port == S->nodes[i].srv.port) {
            *start = LULL_CONTAINER_OF(p, rlink, peer)->start;
            found = true;
        }
    return found;
}

/* Replica i began a history with sync point `sync`: its group's
 * subscribers send a PING, and the messages after its reply are held to
 * that sync point (ps_primary_msg). */
static void ps_new_history(sim *S, int i, uint64_t sync) {
    for (int k = 1; k < S->nps; k++) {
        ps_group *g = &S->ps[k];
        if (g->node != i || g->phase == 5) continue;
        for (int r = 1; r < 3; r++) {
            ps_conn *pc = &g->conn[r];
            if (!pc->up) continue;
            if (pc->pings == 4) {
                fail(S, "pubsub: more PINGs owed than the simulator keeps");
                return;
            }
            pc->sync_next[pc->pings++] = sync;
            lull_simnet_log(S->net,
                            "ps%d.%d > PING (a new history from %" PRIu64 ")",
                            i, r, sync);
            ps_send(pc, "*1\r\n$4\r\nPING\r\n", 14);
        }
    }
}

/* A replica's group waiting for the primary's messages (ps_owed_done),
 * and the primary's held (ps_hold), are looked at again after each
 * network event and each loop turn (run_loop, run_streams): nothing else
 * wakes them. Over --streams a replica reads its link in a socket's
 * callback, not a network event, and may come in sync after the last
 * one. True when it started a group's timer. */
static bool ps_wake_waiting(sim *S) {
    bool woke = false;
    if (S->failed || S->tearing_down) return false;
    if (S->ps_hold && strcmp(S->nodes[S->ps[1].node].srv.m.replid,
                             S->nodes[0].srv.kv.replid) == 0) {
        S->ps_hold = false;
        lull_timer_start(&S->ps[0].timer, 0, 0);
        woke = true;
    }
    for (int i = 1; i < S->nps; i++) {
        ps_group *g = &S->ps[i];
        if (g->phase == 4 && !lull_timer_active(&g->timer) && ps_settled(g) &&
            ps_owed_done(g)) {
            lull_timer_start(&g->timer, 0, 0);
            woke = true;
        }
    }
    return woke;
}

static void check_offsets(lull_simnet *net, void *arg) {
    (void)net;
    sim *S = arg;
    if (++S->events > S->event_budget) {
        out_of_events(S);
        return;
    }
    if (S->failed || S->tearing_down) return;
    const repl_log *log = &S->nodes[0].srv.kv.log;
    /* The log keeps its backlog (repl-backlog-size): a trim (chunk0 > 0)
     * leaves at least that many bytes, and the base moves only by trims.
     * Less passes the other checks: replicas resync in full instead. */
    if (!log->idle && log->chunk0 > 0 && log->end - log->base < log->backlog) {
        fail(S,
             "primary: its log holds [%" PRIu64 ", %" PRIu64
             "], less than its backlog of %" PRIu64 " bytes",
             log->base, log->end, log->backlog);
        return;
    }
    check_expiry_on_time(S);
    if (S->failed) return;
    check_wakeups(S);
    if (S->failed) return;
    check_link_limits(S);
    if (S->failed) return;
    check_flood(S);
    if (S->failed) return;
    ps_wake_waiting(S);
    for (int i = 1; i <= S->nreplicas; i++) {
        node *n = &S->nodes[i];
        const master *m = &n->srv.m;
        uint64_t off = n->srv.kv.offset;
        if (strcmp(m->replid, n->last_replid) != 0 || n->full_seen) {
            memcpy(n->last_replid, m->replid, sizeof n->last_replid);
            bool snap = n->full_seen == 2;
            n->full_seen = 0;
            if (m->replid[0]) {
                uint64_t start;
                bool known = newest_link_start(S, i, &start);
                n->sync_point = known ? start : 0;
                n->sync_owed = known ? start : S->nodes[0].srv.kv.log.end;
                /* A snapshot's: from its offset, past the link's start
                 * by what was written before the snapshot was taken. */
                if (snap && off > n->sync_owed) n->sync_owed = off;
                ps_new_history(S, i, n->sync_point);
                if (S->failed) return;
            }
        } else if (off < n->last_offset) {
            fail(S, "%s: offset went back from %" PRIu64 " to %" PRIu64,
                 n->name, n->last_offset, off);
            return;
        }
        /* Bytes of an old history (a restarted primary's) may still
         * arrive: only offsets in the primary's own are checked. */
        if (off != n->last_offset && m->replid[0] &&
            strcmp(m->replid, S->nodes[0].srv.kv.replid) == 0) {
            archive_sync(S);
            size_t rec = archive_seek(S, off);
            if (rec == SIZE_MAX) {
                fail(S,
                     "%s: offset %" PRIu64 " is not a record boundary of "
                     "the primary's log (its end %" PRIu64 ")",
                     n->name, off, log->end);
                return;
            }
            uint64_t t = inside_transaction(S, rec);
            if (t != UINT64_MAX) {
                fail(S,
                     "%s: offset %" PRIu64 " is inside the transaction "
                     "whose MULTI is at %" PRIu64
                     ": its clients see half of it",
                     n->name, off, t);
                return;
            }
        }
        n->last_offset = off;
        check_no_stale(S, n);
        if (S->failed) return;
        check_pairs(S, n);
        if (S->failed) return;
        check_caught_up(S, n);
        if (S->failed) return;
    }
}

static void deadline_due(lull_timer *t) {
    sim *S = LULL_CONTAINER_OF(t, sim, deadline);
    if (!S->healed) {
        /* Clients still busy: heal, and let them finish. */
        lull_simnet_log(S->net, "workload deadline: heal");
        S->healed = true;
        lull_simnet_heal(S->net);
        lull_timer_start(&S->deadline, SETTLE_NS, 0);
        lull_timer_unref(&S->deadline);
        return;
    }
    /* Keys that expire hours ahead keep the loop going: this far after
     * the heal, the cluster is judged as it stands (final_checks says
     * what has not settled, and why). */
    lull_simnet_log(S->net, "settle deadline: the checks");
    S->stop_asked = true;
    lull_loop_stop(S->loop);
}

/* The keyspace the primary's log gives at `off`: its records from 0
 * applied to an empty replica, as a reference for a replica at that
 * offset. 0, or -1 when the log does not apply. */
static int log_keyspace(sim *S, uint64_t off, buf *dump) {
    archive_sync(S);
    buf all = S->arch; /* borrowed: not freed here */
    kv ref;
    kv_init(&ref);
    store_init(&ref.db);
    ref.replica = true;
    static resp_arg argv[SIM_ARGS];
    resp_limits lim = {.max_bulk = (size_t)1 << 30, .max_args = SIM_ARGS};
    const char *err = "";
    size_t need;
    long n = kv_apply_stream(&ref, &lim, argv, all.p, (size_t)off, &err, &need);
    int rc = n == (long)off ? 0 : -1;
    if (rc == 0) kv_dump(&ref, dump);
    kv_free(&ref);
    return rc;
}

/* Why a replica that did not settle is where it is: the first key where
 * it differs from the primary's log at its own offset (a replica that
 * went wrong before it stopped), or that it matches it (it stopped, or
 * fell behind, with what it holds right). */
static void diagnose(sim *S, node *n, char *out, size_t cap) {
    buf ref = {0}, mine = {0};
    uint64_t off = n->srv.kv.offset;
    if (log_keyspace(S, off, &ref) < 0) {
        snprintf(out, cap,
                 "; the primary's log does not apply up to its "
                 "offset");
    } else {
        kv_dump(&n->srv.kv, &mine);
        if (ref.len == mine.len &&
            (!ref.len || !memcmp(ref.p, mine.p, ref.len)))
            snprintf(out, cap,
                     "; what it holds is the log's up to its "
                     "offset");
        else {
            char d[900];
            first_difference(&ref, &mine, d, sizeof d, "the log", n->name);
            snprintf(out, cap, "; it differs from the log at its offset:%s", d);
        }
    }
    buf_free(&ref);
    buf_free(&mine);
}

static void final_replicas(sim *S);

static void final_checks(sim *S) {
    server *p = &S->nodes[0].srv;
    int64_t now = ms_now(S);
    char stuck[300];
    if (ps_unfinished(S, stuck, sizeof stuck)) {
        fail(S, "%s", stuck);
        return;
    }
    for (int c = 0; c < S->nclients && !S->failed; c++) {
        client *cl = &S->clients[c];
        if (cl->state != C_DONE) {
            fail(S, "c%d did not finish (%d commands left)", cl->id,
                 cl->remaining);
            return;
        }
        for (int k = 0; k < KEYS; k++) {
            char key[32];
            snprintf(key, sizeof key, "c%d:k%d", cl->id, k);
            model_val s;
            if (!model_from_store(&p->kv.db, key, now, &s)) {
                fail(S, "primary: %s holds what no command wrote", key);
                return;
            }
            model_settle(&cl->keys[k], now);
            if (!model_key_has(&cl->keys[k], &s)) {
                char got[800], want[800];
                model_describe(&s, got, sizeof got);
                model_describe(&cl->keys[k].c[0], want, sizeof want);
                fail(S, "primary: %s is %s; the model says %s%s", key, got,
                     want, cl->keys[k].n > 1 ? " (or another)" : "");
                return;
            }
        }
    }
    final_replicas(S);
}

/* After the settle, every replica: its link up at the primary's offset,
 * its keyspace the primary's; the primary knows each one's offset from
 * its acks; and the primary holds no key past its time (its expiry
 * timer deletes each one when it is due, and a key the timer missed is
 * served by no read but still held, counted and copied to replicas). */
static void final_replicas(sim *S) {
    server *p = &S->nodes[0].srv;
    int64_t now[2] = {p->kv.clock(&p->kv) - 1, 0}; /* a ms of grace */
    uint64_t cursor = 0;
    do
        cursor = dict_scan(&p->kv.db.d, cursor, 64, no_key_past_time, now);
    while (cursor);
    if (now[1]) {
        fail(S,
             "primary: a key that expired at %" PRId64 " is still held at "
             "%" PRId64 ": the expiry timer missed it",
             now[1], now[0] + 1);
        return;
    }
    buf dp = {0}, dr = {0};
    kv_dump(&p->kv, &dp);
    for (int i = 1; i <= S->nreplicas && !S->failed; i++) {
        node *n = &S->nodes[i];
        server *r = &n->srv;
        char why[1000];
        if (r->m.state != M_UP || !r->kv.link_up ||
            r->kv.offset != p->kv.log.end)
            diagnose(S, n, why, sizeof why);
        if (r->m.state != M_UP || !r->kv.link_up)
            fail(S,
                 "%s: link not up after the settle (state %d, offset "
                 "%" PRIu64 " of %" PRIu64 ")%s",
                 n->name, r->m.state, r->kv.offset, p->kv.log.end, why);
        else if (r->kv.offset != p->kv.log.end)
            fail(S, "%s: offset %" PRIu64 ", the primary's %" PRIu64 "%s",
                 n->name, r->kv.offset, p->kv.log.end, why);
        if (S->failed) break;
        kv_dump(&r->kv, &dr);
        if (dp.len != dr.len || memcmp(dp.p, dr.p, dp.len) != 0) {
            char d[900];
            first_difference(&dp, &dr, d, sizeof d, "primary", n->name);
            fail(S, "%s: keyspace differs from the primary's at:%s", n->name,
                 d);
        }
    }
    buf_free(&dp);
    buf_free(&dr);
    if (S->failed) return;
    size_t links = 0;
    for (repl_peer *q = p->kv.peers.next; q != &p->kv.peers; q = q->next) {
        links++;
        if (q->offset != p->kv.log.end) {
            fail(S,
                 "primary: the replica at port %d acknowledged offset "
                 "%" PRIu64 " of %" PRIu64 " after the settle",
                 q->port, q->offset, p->kv.log.end);
            return;
        }
    }
    if (links != (size_t)S->nreplicas)
        fail(S, "primary: %zu replica links after the settle, for %d replicas",
             links, S->nreplicas);
}

/* The new primary's start: once the old one's connections are all closed
 * (each replica's link sees its end), at a whole ms, so that its clock
 * reads what the replicas' do. */
static void restart_open(lull_timer *t) {
    sim *S = LULL_CONTAINER_OF(t, sim, restart_t);
    node *p = &S->nodes[0];
    uint64_t ns = lull_loop_now(S->loop);
    if (p->srv.kv.npeers || p->srv.kv.clients || ns % MS) {
        lull_timer_start(t, MS - ns % MS, 0);
        return;
    }
    S->old_over_limit = p->srv.links_over_limit;
    S->old_expired = p->srv.expiry.fired;
    server_free(&p->srv);
    if (node_open(S, p, 0, ms_now(S)) < 0) abort();
    S->primary_down = false;
    S->overdue = NULL;
    /* Another history: another id, an empty log. */
    snprintf(p->srv.kv.replid, sizeof p->srv.kv.replid, "%040" PRIx64,
             ~S->seed);
    lull_simnet_log(S->net, "primary restarted: replid %s", p->srv.kv.replid);
    for (int i = 1; i <= S->nreplicas; i++)
        S->nodes[i].compared = 0;
    /* Its first write, a key the clients used (c1:k0), so that a replica
     * keeping the old history's keys, or its offset, is caught. */
    resp_arg set[3] = {{"SET", 3}, {"c1:k0", 5}, {"new history", 11}};
    static buf out;
    out.len = 0;
    kv_exec(&p->srv.kv, NULL, set, 3, &out);
    /* Then one whose value brings the log's end to the first replica's
     * offset in the old history (when that is ahead, by up to 1 MiB, and
     * a record that long is within the replicas' output limit): a record
     * boundary of this log, which it asks to resume from with the old
     * replid, and must be fully resynced all the same: the replid, not
     * the offset, says which history (KV_PLANT_RESUME_REPLID). */
    uint64_t at = S->nodes[1].srv.kv.offset, end = p->srv.kv.log.end;
    uint64_t most = S->repl_limit ? S->repl_limit / 2 : 1u << 20;
    if (at <= end || at - end > most || at - end > (1u << 20)) return;
    uint64_t gap = at - end;
    resp_arg pad[3] = {{"SET", 3}, {"c1:k2", 5}, {"", 0}};
    size_t fixed = repl_record_len(pad, 3) - 1; /* all but the length's */
    for (size_t d = 1; d < 8 && fixed + d <= gap; d++) { /* digits */
        pad[2].len = (size_t)gap - fixed - d;
        if (repl_record_len(pad, 3) == gap) break;
    }
    if (repl_record_len(pad, 3) != gap) return;
    char *v = malloc(pad[2].len + 1);
    if (!v) abort();
    memset(v, 'h', pad[2].len);
    pad[2].p = v;
    out.len = 0;
    kv_exec(&p->srv.kv, NULL, pad, 3, &out);
    free(v);
}

/* The old primary stops, a few ms after its last write, which its
 * replicas may be receiving: a replica that had part of a record when
 * its link went must forget it (the new history's first record is
 * another). */
static void restart_stop(lull_timer *t) {
    sim *S = LULL_CONTAINER_OF(t, sim, restart_t);
    node *p = &S->nodes[0];
    lull_simnet_log(S->net, "primary stops");
    S->primary_down = true;
    lull_simserver_close(&p->ls);
    kill_replicas(&p->srv.kv);
    server_stop(&p->srv);
    lull_timer_init(S->loop, &S->restart_t, restart_open);
    /* Down up to 400 ms; a tenth of the time 8 to 12 s, past where the
     * replicas' backoff reaches its 5 s cap (the wait drawn decides, so
     * the seed's draws stay as they were). */
    uint64_t down = 1 * MS + below(&S->rng, 400 * MS);
    if (down <= 40 * MS) down = 8000 * MS + down * 100;
    lull_timer_start(&S->restart_t, down, 0);
}

/* The primary restarts: after a last write of up to 64 KiB, its
 * replicas are cut off, and it comes back empty with a new replid a
 * while later (after their reconnects were refused, with their backoff).
 * Each replica must take a full resync: drop the old history's keys and
 * any partial record, start its offset over, and end with the new
 * primary's keyspace, at its offset, acknowledged. Without it no seed has
 * a replica resync from another history (one history: every resume
 * continues). */
static void restart_primary(sim *S) {
    node *p = &S->nodes[0];
    S->restarts++;
    static char big[64 << 10];
    size_t len = 1 + below(&S->rng, sizeof big);
    memset(big, 'r', len);
    resp_arg set[3] = {{"SET", 3}, {"c1:k1", 5}, {big, len}};
    static buf out;
    out.len = 0;
    kv_exec(&p->srv.kv, NULL, set, 3, &out);
    wake_links(&p->srv); /* as a client's batch ends (run_commands) */
    if (p->srv.kv.expiry_changed) kv_expiry_rearm(&p->srv.expiry);
    lull_timer_init(S->loop, &S->restart_t, restart_stop);
    lull_timer_start(&S->restart_t, below(&S->rng, 3 * MS), 0);
    lull_timer_start(&S->deadline, SETTLE_NS, 0);
    lull_timer_unref(&S->deadline);
    if (streams_mode)
        run_streams(S, false);
    else
        run_loop(S);
    if (S->failed) return;
    if (lull_timer_active(&S->restart_t)) {
        fail(S, "primary: not restarted (its connections did not close)");
        return;
    }
    final_replicas(S);
}

/* ------------------------------------------------------------ one seed */

typedef struct outcome {
    bool failed;
    char why[1024];
    uint64_t trace_hash;
    lull_simnet_stats stats;
    uint64_t commands;
    uint64_t over_limit;
    uint64_t multis, lost, continues, fulls, expired, restarts;
    uint64_t drawn_partitions, drawn_resets, drawn_slow, drawn_refusals;
    uint64_t probes;  /* the prober's SETs read back early and late */
    uint64_t floods;  /* floods whose every reply was read */
    size_t flood_out; /* the most the primary held for one */
    uint64_t reads;   /* the atomicity reader's MGETs checked */
    uint64_t bulks;   /* the bulk writer's replies checked */
    uint64_t bwalks;  /* and its SCAN walks checked whole */
    uint64_t bigs, same_len, hangups;
    uint64_t scans, scan_parts; /* SSCAN and ZSCAN walks checked whole */
    uint64_t keys_checked, kwalks, pushes, flushes; /* `extra`'s */
    uint64_t pushes0, forgotten;
    uint64_t io[IO_KINDS]; /* --streams: each fault kind's effects */
    bool io_drawn[IO_KINDS];
} outcome;

static void random_faults(sim *S, lull_simfaults *f) {
    uint64_t *r = &S->rng;
    memset(f, 0, sizeof *f);
    if (S->no_faults) return;
    f->delay_ns = below(r, 5 * MS);
    f->jitter_ns = below(r, 3) ? below(r, 5 * MS) : 0;
    f->bandwidth = below(r, 2) ? 50000 + below(r, 10u << 20) : 0;
    f->window = below(r, 2) ? 256 + below(r, 16384) : 0;
    f->slow_permille = (uint32_t)below(r, 500);
    f->slow_read_ns = below(r, 2 * MS);
    if (below(r, 4)) {
        f->partition_every_ns = 50 * MS + below(r, 2000 * MS);
        f->partition_ns = 1 + below(r, 1000 * MS);
        f->break_permille = (uint32_t)below(r, 600);
    }
    f->reset_permille = below(r, 4) ? (uint32_t)below(r, 600) : 0;
    f->reset_within = 256 + below(r, 32768);
    f->refuse_permille = below(r, 3) ? 0 : (uint32_t)below(r, 300);
    S->drawn_partitions += f->partition_every_ns != 0;
    S->drawn_resets += f->reset_permille != 0;
    S->drawn_slow += f->slow_permille && f->slow_read_ns > 1;
    S->drawn_refusals += f->refuse_permille != 0;
}

static void run_seed(uint64_t seed, uint64_t plant, FILE *trace,
                     int64_t determinism, outcome *out) {
    sim *S = calloc(1, sizeof *S);
    if (!S) abort();
    the_sim = S;
    S->seed = seed;
    S->plant = plant;
    S->trace = trace;
    /* A failed seed may have left relays behind (its loop not freed):
     * forgotten, so nothing of them reaches this run. */
    relays = NULL;
    S->rng = seed * 0x2545f4914f6cdd1dull + 1;
    S->yield_rng = seed ^ 0x5bd1e995u;
    /* SPOP's and SRANDMEMBER's picks, from the seed: a replay repeats
     * them. */
    types_seed(seed * 0x9e3779b97f4a7c15ull + 1);
    S->no_faults = determinism > 0;
    /* Drawn apart from the workload's stream: the rest of a seed's run is
     * what it was before seeds restarted their primary. */
    uint64_t rs = seed ^ 0x7265737461727421ull;
    S->restart = !S->no_faults && rnd(&rs) % 4 == 0;
    /* Drawn apart too: a seed without `extra` runs as it did before. */
    S->xrng = seed ^ 0x7075627375622121ull;
    S->extra = !S->no_faults && rnd(&S->xrng) % 3 == 0;
    S->flush = S->extra && rnd(&S->xrng) % 2 == 0;
    /* Drawn apart too: a seed without the flood runs as it did. */
    uint64_t fs = seed ^ 0x666c6f6f64212121ull;
    S->flood = !S->no_faults && rnd(&fs) % 4 == 0;
    if (S->extra) S->nps = 1 + (int)(rnd(&S->xrng) % 2);
    uint64_t *r = &S->rng;
    S->nreplicas = 1 + (int)below(r, REPLICAS_MAX);
    S->nclients = 1 + (int)below(r, CLIENTS_MAX);
    S->per_record = below(r, 4) == 0;
    if (!S->no_faults && below(r, 3) == 0) {
        /* Small limits: a replica left behind by a partition is closed
         * for its output and must come back. */
        S->repl_limit = 2048 + below(r, 8192);
        S->high_water = 1024;
    }
    /* Half the seeds run small: the write log in chunks of a few hundred
     * bytes to a few KiB (records cross chunk boundaries all the time,
     * large values are past a chunk's size) and small stream buffers
     * (the producer waits for drains, a reader gets its input in many
     * pieces). */
    S->small = below(r, 2) == 0;
    if (S->small) {
        S->chunk_size = 256 + below(r, 4096);
        S->high_water = 128 + below(r, 1024);
    }
    /* Drawn apart from the workload's stream, as `restart` is. */
    uint64_t bs = seed ^ 0x6269672068616e67ull;
    if (!S->no_faults && rnd(&bs) % 2 == 0) {
        S->big_len = BIG_MIN + (uint32_t)(rnd(&bs) % 1024);
        /* A replica output limit below a record can never be met: one
         * big record and then some. */
        if (S->repl_limit) S->repl_limit += 2 * S->big_len;
        /* A third of the big seeds left at the default mark (64 KiB,
         * BIG_MIN, which a blob alone fills: its connection then waits
         * until the blob is read whole, as a stream's until it is written
         * whole) get one above four big replies, so the commands behind a
         * GET's blob run while the blob is still being read. Drawn apart:
         * the rest of the seed as it was. */
        uint64_t hs = seed ^ 0x6869676877617465ull;
        if (!S->small && !S->repl_limit && rnd(&hs) % 3 == 0)
            S->high_water = 4 * BIG_MIN;
    }
    if (!S->no_faults && rnd(&bs) % 2 == 0)
        S->hangup = 10 + (uint32_t)(rnd(&bs) % 40);
    /* Drawn apart too. A grown seed's log comes in chunks of 256 bytes to
     * 2 KiB, if not small already, so that the late replica's first sync
     * is from a snapshot. */
    uint64_t gs = seed ^ 0x67726f7720626967ull;
    S->grow = !S->no_faults && rnd(&gs) % 2 == 0;
    if (S->grow) {
        S->bk.rng = rnd(&gs);
        if (!S->chunk_size) S->chunk_size = 256 + rnd(&gs) % 1792;
        S->late = 1 + (int)(rnd(&gs) % (uint64_t)S->nreplicas);
    }
    /* The long fault-free run crosses a chunk edge every hundred or so
     * records: tens of thousands in 1,000,000 commands. */
    if (S->no_faults) S->chunk_size = 4096;
    /* A backlog of four chunks where they are small: the log trims all
     * the time, and a replica that was away long gets a snapshot. */
    if (S->chunk_size) S->backlog = 4 * S->chunk_size;
    lull_simnet_options no = {.seed = seed ^ 0xabcdef12345ull,
                              .trace = trace,
                              .on_event = check_offsets,
                              .arg = S};
    if (plant & PLANT_HOLLOW_PARTITION)
        no.flags |= LULL_SIMNET_HOLLOW_PARTITIONS;
    random_faults(S, &no.faults);
    S->clean_faults = no.faults;
    S->clean_faults.break_permille = 0;
    S->clean_faults.reset_permille = 0;
    S->clean_faults.refuse_permille = 0;
    lull_loop_options lo = {.clock = LULL_CLOCK_VIRTUAL,
                            .flags = LULL_LOOP_AUTO_ADVANCE};
    /* The quantum is real time: a drain of ready tasks it cut short would
     * let the sockets' readiness in between, where another run (on a
     * busier machine) would not. Under 1 us every callback ends the
     * slice instead, whatever the time: one task per turn, so a task that
     * re-posts itself turns the loop, where run_loop counts it (an hour's
     * quantum kept it inside one turn for ever). */
    lo.quantum_ns = 1;
    if (lull_loop_new(&S->loop, &lo) < 0 ||
        lull_simnet_new(&S->net, S->loop, &no) < 0)
        abort();
    lull_simnet_log(S->net,
                    "seed %" PRIu64 ": %d replicas, %d clients, %s, replica "
                    "limit %zu, log chunks %zu, high water %zu, big values "
                    "%u, hang-ups 1 in %u",
                    seed, S->nreplicas, S->nclients,
                    S->per_record ? "per-record" : "budget", S->repl_limit,
                    S->chunk_size, S->high_water, S->big_len, S->hangup);
    if (streams_mode) plan_draw(S);
    for (int i = 0; i <= S->nreplicas; i++)
        if (node_open(S, &S->nodes[i], i, BASE_MS) < 0) abort();
    lull_timer_init(S->loop, &S->deadline, deadline_due);
    if (!S->no_faults) lull_timer_start(&S->deadline, WORKLOAD_NS, 0);
    for (int i = 0; i <= S->nreplicas; i++)
        if (i != S->late) server_start(&S->nodes[i].srv);
    if (S->late) {
        lull_timer_init(S->loop, &S->late_t, late_start);
        lull_timer_start(&S->late_t, 20 * MS + rnd(&gs) % (300 * MS), 0);
    }
    int64_t per_client =
        determinism > 0 ? (determinism + S->nclients - 1) / S->nclients : 0;
    S->active = S->nclients;
    uint64_t planned = 100;
    for (int i = 0; i < S->nclients; i++) {
        client *cl = &S->clients[i];
        cl->S = S;
        cl->id = i + 1;
        cl->remaining = per_client ? (int)per_client : 20 + (int)below(r, 400);
        planned += (uint64_t)cl->remaining;
        cl->depth = 1 + (int)below(r, PIPE_MAX);
        cl->keys = client_keys[i];
        cl->scan_key = -1;
        cl->ks_pat = -1;
        /* Over the streams, the first client's links are clean: the stream
         * code's short counts and retries under it, and nothing that may
         * end a connection, so that a stream which loses a reply or ends
         * early shows (client_closed). */
        cl->clean = streams_mode && !S->no_faults && i == 0;
        for (int k = 0; k < KEYS; k++)
            model_key_init(&cl->keys[k]);
        lull_timer_init(S->loop, &cl->timer, client_timer);
        cl->state = C_DOWN;
        lull_timer_start(&cl->timer, below(r, 5 * MS), 0);
    }
    S->event_budget =
        event_budget_flag ? event_budget_flag : EVENTS_PER_COMMAND * planned;
    probe_start(S);
    if (S->flood) {
        flood_start(S);
        if (!event_budget_flag)
            S->event_budget += EVENTS_PER_COMMAND * FLOOD_BURSTS * 4;
    }
    if (S->grow) {
        bulk_start(S);
        if (!event_budget_flag)
            S->event_budget += EVENTS_PER_COMMAND * (BULK_STEPS + 40);
    }
    S->rd.replica = 1 + (int)below(r, (uint64_t)S->nreplicas);
    lull_timer_init(S->loop, &S->rd.timer, reader_timer);
    lull_timer_start(&S->rd.timer, below(r, 20 * MS), 0);
    for (int i = 0; i < S->nps; i++)
        ps_start(S, &S->ps[i],
                 i ? 1 + (int)below(&S->xrng, (uint64_t)S->nreplicas) : 0);
    if (streams_mode)
        run_streams(S, false);
    else
        run_loop(S);
    if (!S->failed) final_checks(S);
    if (!S->failed && S->restart) restart_primary(S);
    out->commands = S->cmds_run;
    out->over_limit = S->old_over_limit + S->nodes[0].srv.links_over_limit;
    out->multis = S->multis;
    out->lost = S->lost;
    out->continues = S->continues;
    out->fulls = S->fulls;
    out->restarts = S->restarts;
    out->expired = S->old_expired + S->nodes[0].srv.expiry.fired;
    out->probes = S->probe.probes;
    out->floods = S->flood && S->fl.replies == 1 + FLOOD_BURSTS * FLOOD_GETS;
    out->flood_out = S->fl.max_out;
    out->reads = S->rd.reads;
    out->bulks = S->bk.checked;
    out->bwalks = S->bk.walks;
    out->scans = S->scans;
    out->scan_parts = S->scan_parts;
    out->keys_checked = S->keys_checked;
    out->kwalks = S->kwalks;
    out->pushes = S->pushes;
    out->pushes0 = S->pushes0;
    out->forgotten = S->forgotten;
    out->flushes = S->flushes;
    out->bigs = S->bigs;
    out->same_len = S->same_len;
    out->hangups = S->hangups;
    out->drawn_partitions = S->drawn_partitions;
    out->drawn_resets = S->drawn_resets;
    out->drawn_slow = S->drawn_slow;
    out->drawn_refusals = S->drawn_refusals;
    /* Tear down: the replicas' links close, the primary stops listening,
     * and every connection's close reaches both ends. */
    S->tearing_down = true;
    probe_stop(S);
    flood_stop(S);
    reader_stop(S);
    bulk_stop(S);
    if (S->late && !S->late_started) { /* a seed that failed early */
        lull_timer_stop(&S->late_t);
        server_start(&S->nodes[S->late].srv);
    }
    for (int i = 0; i < S->nps; i++)
        if (S->ps[i].phase != 5) ps_close(&S->ps[i]);
    for (int i = 0; i < S->nclients; i++) {
        client *cl = &S->clients[i];
        lull_timer_stop(&cl->timer);
        if (cl->state == C_UP || cl->state == C_CONNECTING) {
            cl->state = C_CLOSING;
            lull_endpoint_close(&cl->c.ep, 0);
        }
        if (cl->state == C_HUNG_UP) cl->state = C_CLOSING; /* closed */
    }
    for (int i = 1; i <= S->nreplicas; i++) {
        server_stop(&S->nodes[i].srv);
        lull_simserver_close(&S->nodes[i].ls);
    }
    lull_simserver_close(&S->nodes[0].ls);
    server_stop(&S->nodes[0].srv);
    lull_timer_stop(&S->deadline);
    if (S->restarts) lull_timer_stop(&S->restart_t);
    if (streams_mode)
        run_streams(S, true);
    else
        run_loop(S);
    server *p = &S->nodes[0].srv;
    if (!S->failed && (p->kv.clients || p->kv.npeers)) {
        S->failed = true;
        snprintf(S->why, sizeof S->why,
                 "primary: %zu clients and %zu replica links left",
                 p->kv.clients, p->kv.npeers);
    }
    if (!S->failed && relays) {
        S->failed = true;
        snprintf(S->why, sizeof S->why, "a relay left open (%s)",
                 fd_plans[relays->kv_fd].name);
    }
    memcpy(out->io, io_effects, sizeof out->io);
    memcpy(out->io_drawn, io_drawn, sizeof out->io_drawn);
    memset(io_drawn, 0, sizeof io_drawn);
    lull_simnet_get_stats(S->net, &out->stats);
    for (int i = 0; i <= S->nreplicas; i++)
        server_free(&S->nodes[i].srv);
    archive_free(S);
    for (int i = 0; i < S->nclients; i++)
        buf_free(&S->clients[i].in);
    buf_free(&S->probe.in);
    buf_free(&S->bk.in);
    free(S->bk.seen);
    buf_free(&S->rd.in);
    for (int i = 0; i < S->nps; i++)
        for (int c = 0; c < 3; c++)
            buf_free(&S->ps[i].conn[c].in);
    int rc = lull_simnet_free(S->net);
    if (rc < 0 && !S->failed) {
        S->failed = true;
        snprintf(S->why, sizeof S->why, "lull_simnet_free: %s", strerror(-rc));
    }
    rc = lull_loop_free(S->loop);
    if (rc < 0) {
        if (!S->failed) {
            S->failed = true;
            snprintf(S->why, sizeof S->why, "lull_loop_free: %s",
                     strerror(-rc));
        }
        lull_loop_print_live(S->loop, stderr);
    }
    out->failed = S->failed;
    memcpy(out->why, S->why, sizeof out->why);
    out->trace_hash = out->stats.trace_hash;
    the_sim = NULL;
    free(S);
}

/* ------------------------------------------- a replica's close, unread */

/* A replica closes its link right after sending a REPLACK, so the
 * primary's end holds unread bytes when it learns its peer is gone (the
 * simulated network, as the loopback pair, marks it at once; a socket
 * learns it only from a failed write, which closes the stream). The
 * primary must still read them and the EOF after, close its end (which
 * releases the replica's REPLACK, and so runs the replica's close
 * callback), and the replica must reconnect and resume. One run, no
 * seed: 0 when it did. */
static void unread_step(lull_timer *t) {
    sim *S = LULL_CONTAINER_OF(t, sim, deadline);
    server *r = &S->nodes[1].srv;
    server *p = &S->nodes[0].srv;
    static const char ack[] = "*2\r\n$7\r\nREPLACK\r\n$1\r\n0\r\n";
    int step = (int)S->cmds_run++;
    if ((step == 1 || step == 3) && (p->kv.npeers != 1 || r->m.state != M_UP)) {
        fail(S,
             "2 s after replica1 closed its link (%s): the primary has %zu "
             "replica links, replica1's link is %s",
             step == 1 ? "a REPLACK unread at the primary"
                       : "the primary not reading, its output full",
             p->kv.npeers, r->m.state == M_UP ? "up" : "not up");
        return;
    }
    switch (step) {
    case 0: /* the close, a REPLACK just sent */
    case 2: /* the close, the primary's end not reading (below) */
        if (r->m.state != M_UP) {
            fail(S, "replica1: link not up before the close");
            return;
        }
        if (step == 0) lull_endpoint_send_copy(r->m.ep, ack, sizeof ack - 1);
        S->nodes[1].why_down = true; /* the scenario's close, said here */
        r->m.state = M_DOWN;         /* master_closed retries */
        lull_endpoint_close(r->m.ep, 0);
        lull_timer_start(t, 2000 * MS, 0);
        return;
    case 1: {
        /* The replica stops reading; the primary's output to it fills
         * (64 records of 1 KiB over a high-water mark of 1 KiB); then a
         * REPLACK comes, which the primary reads with its output full,
         * and stops reading. */
        lull_simconn_read_stop(&r->m.t.sim);
        static char val[1024];
        memset(val, 'x', sizeof val);
        for (int i = 0; i < 64; i++) {
            char key[16];
            resp_arg a[3] = {{"SET", 3}, {key, 0}, {val, sizeof val}};
            a[1].len = (size_t)snprintf(key, sizeof key, "k%d", i);
            buf out = {0};
            kv_exec(&p->kv, NULL, a, 3, &out);
            buf_free(&out);
        }
        wake_links(p);
        lull_timer_start(t, 100 * MS, 0);
        lull_endpoint_send_copy(r->m.ep, ack, sizeof ack - 1);
        return;
    }
    default:
        lull_loop_stop(S->loop);
        return;
    }
}

static int run_unread_close(void) {
    sim *S = calloc(1, sizeof *S);
    if (!S) abort();
    the_sim = S;
    S->seed = 1;
    S->no_faults = true;
    S->nreplicas = 1;
    S->high_water = 1024;
    lull_simnet_options no = {.seed = 1, .faults.delay_ns = 2 * MS};
    lull_loop_options lo = {.clock = LULL_CLOCK_VIRTUAL,
                            .flags = LULL_LOOP_AUTO_ADVANCE};
    if (lull_loop_new(&S->loop, &lo) < 0 ||
        lull_simnet_new(&S->net, S->loop, &no) < 0)
        abort();
    for (int i = 0; i <= S->nreplicas; i++)
        if (node_open(S, &S->nodes[i], i, BASE_MS) < 0) abort();
    for (int i = 0; i <= S->nreplicas; i++)
        server_start(&S->nodes[i].srv);
    lull_timer_init(S->loop, &S->deadline, unread_step);
    lull_timer_start(&S->deadline, 500 * MS, 0);
    lull_loop_run(S->loop, LULL_RUN_DEFAULT);
    S->tearing_down = true;
    server_stop(&S->nodes[1].srv);
    lull_simserver_close(&S->nodes[1].ls);
    lull_simserver_close(&S->nodes[0].ls);
    server_stop(&S->nodes[0].srv);
    lull_timer_stop(&S->deadline);
    lull_loop_run(S->loop, LULL_RUN_NOWAIT);
    for (int i = 0; i <= S->nreplicas; i++)
        server_free(&S->nodes[i].srv);
    archive_free(S);
    int bad = S->failed;
    printf("replica close with unread data: %s\n",
           S->failed ? S->why
                     : "the primary read the EOF, the replica "
                       "resumed");
    /* A stalled run leaves its connections behind: not freed. */
    if (!bad) {
        lull_simnet_free(S->net);
        lull_loop_free(S->loop);
    }
    the_sim = NULL;
    free(S);
    return bad;
}

/* ------------------------------------------------------------ main */

static const struct {
    const char *name;
    uint64_t bit;
} plants[] = {{"resume-late", KV_PLANT_RESUME_LATE},
              {"ack-before-log", KV_PLANT_ACK_BEFORE_LOG},
              {"lost-wakeup", KV_PLANT_LOST_WAKEUP},
              {"expire-relative", KV_PLANT_EXPIRE_RELATIVE},
              {"multi-split", KV_PLANT_MULTI_SPLIT},
              {"chunk-edge", KV_PLANT_CHUNK_EDGE},
              {"int32", KV_PLANT_INT32},
              {"silent-resync", KV_PLANT_SILENT_RESYNC},
              {"expire-early", KV_PLANT_EXPIRE_EARLY},
              {"batch-death", KV_PLANT_BATCH_DEATH},
              {"expire-now", KV_PLANT_EXPIRE_NOW},
              {"same-length", KV_PLANT_SAME_LENGTH},
              {"snapshot-ttl", KV_PLANT_SNAPSHOT_TTL},
              {"ltrim-off", KV_PLANT_LTRIM_OFF},
              {"hincrby-set", KV_PLANT_HINCRBY_SET},
              {"lrange-end", KV_PLANT_LRANGE_END},
              {"setrange-shrink", KV_PLANT_SETRANGE_SHRINK},
              {"expire-gt", KV_PLANT_EXPIRE_GT},
              {"exec-arity", KV_PLANT_EXEC_ARITY},
              {"snap-list-batch", KV_PLANT_SNAP_BATCH},
              {"resume-caught-up", KV_PLANT_RESUME_CAUGHT_UP},
              {"lrem-direction", KV_PLANT_LREM_DIRECTION},
              {"outf-resend", KV_PLANT_OUTF_RESEND},
              {"ack-spin", KV_PLANT_ACK_SPIN},
              {"msetnx-partial", KV_PLANT_MSETNX_PARTIAL},
              {"lpos-tail", KV_PLANT_LPOS_TAIL},
              {"expire-seconds", KV_PLANT_EXPIRE_SECONDS},
              {"smove-same", KV_PLANT_SMOVE_SAME},
              {"zpop-past", KV_PLANT_ZPOP_PAST},
              {"setstore-source", KV_PLANT_SETSTORE_SOURCE},
              {"zscore-exclusive", KV_PLANT_ZSCORE_EXCLUSIVE},
              {"zremrank-negative", KV_PLANT_ZREMRANK_NEGATIVE},
              {"scan-skip", KV_PLANT_SCAN_SKIP},
              {"blob-inplace", KV_PLANT_BLOB_INPLACE},
              {"resume-replid", KV_PLANT_RESUME_REPLID},
              {"publish-pattern", KV_PLANT_PUBLISH_PATTERN},
              {"scan-match-end", KV_PLANT_SCAN_MATCH_END},
              {"flush-unlogged", KV_PLANT_FLUSH_UNLOGGED},
              {"publish-unlogged", KV_PLANT_PUBLISH_UNLOGGED},
              {"publish-again", KV_PLANT_PUBLISH_AGAIN},
              {"hollow-partition", PLANT_HOLLOW_PARTITION},
              {"short-write-resend", PLANT_SHORT_RESEND},
              {"short-write-drop", PLANT_SHORT_DROP},
              {"hollow-short-write", PLANT_HOLLOW_SHORT},
              {"hang", PLANT_HANG},
              {"crash", PLANT_CRASH}};

static const char *plant_name(uint64_t plant) {
    for (size_t i = 0; i < sizeof plants / sizeof plants[0]; i++)
        if (plants[i].bit == plant) return plants[i].name;
    return "none";
}

/* Faults proven to happen: a kind drawn in this many seeds of a run
 * must have had its effect at least once (bytes held by partitions,
 * connections reset, reads slowed, connects refused), or the network
 * (or the way the seeds draw it) does not do what the run counts on.
 * Each kind, once drawn, acts in most seeds (the run's counts over
 * thousands say so): 50 seeds without one is no accident. */
#define DRAWN_ENOUGH 50

typedef struct fault_tally {
    uint64_t drawn_partitions, drawn_resets, drawn_slow, drawn_refusals;
    uint64_t partitions, held, resets, slowed, refused;
    uint64_t io_drawn[IO_KINDS], io[IO_KINDS]; /* --streams */
} fault_tally;

static void tally(fault_tally *t, const outcome *o) {
    t->drawn_partitions += o->drawn_partitions != 0;
    t->drawn_resets += o->drawn_resets != 0;
    t->drawn_slow += o->drawn_slow != 0;
    t->drawn_refusals += o->drawn_refusals != 0;
    t->partitions += o->stats.partitions;
    t->held += o->stats.held;
    t->resets += o->stats.resets;
    t->slowed += o->stats.slowed;
    t->refused += o->stats.refused;
    for (int k = 0; k < IO_KINDS; k++) {
        t->io_drawn[k] += o->io_drawn[k];
        t->io[k] += o->io[k];
    }
}

/* The first fault kind drawn enough and never seen, said; NULL when
 * every one was. */
static const char *fault_without_effect(const fault_tally *t, char *out,
                                        size_t cap) {
    if (t->drawn_partitions >= DRAWN_ENOUGH && t->partitions >= 20 &&
        t->held == 0)
        snprintf(out, cap,
                 "partitions drawn in %" PRIu64 " seeds began %" PRIu64
                 " times and held no byte",
                 t->drawn_partitions, t->partitions);
    else if (t->drawn_resets >= DRAWN_ENOUGH && t->resets == 0)
        snprintf(out, cap,
                 "resets drawn in %" PRIu64 " seeds reset no connection",
                 t->drawn_resets);
    else if (t->drawn_slow >= DRAWN_ENOUGH && t->slowed == 0)
        snprintf(out, cap,
                 "slow readers drawn in %" PRIu64 " seeds put off no read",
                 t->drawn_slow);
    else if (t->drawn_refusals >= DRAWN_ENOUGH && t->refused == 0)
        snprintf(out, cap,
                 "refusals drawn in %" PRIu64 " seeds refused no connect",
                 t->drawn_refusals);
    else {
        for (int k = 0; k < IO_KINDS; k++)
            if (t->io_drawn[k] >= DRAWN_ENOUGH && t->io[k] == 0) {
                snprintf(out, cap,
                         "%s drawn in %" PRIu64 " seeds happened not once",
                         io_kind_name[k], t->io_drawn[k]);
                return out;
            }
        return NULL;
    }
    return out;
}

static double real_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *streams_flag(void);

/* A failed seed: said, the command that replays it, and the end of its
 * trace from a second run, which must fail the same way. */
/* The seed watchdog. A seed that hangs inside one call (a loop that never
 * returns, a wait on sockets nothing will make ready) is out of reach of
 * the progress watchdog, which counts network events and loop turns, and
 * would hang the whole run without naming its seed. So each seed of a run
 * gets hang_s seconds of real time (30 unless --hang-seconds: the slowest
 * of 2,000 --streams seeds took 0.2 s in Release, of 100 under ASan
 * 0.42 s), then the process says which seed and ends. It only reports:
 * nothing of a seed's run depends on it. */
static unsigned hang_s = 30;
static char hang_msg[512]; /* written by the handler as it stands */
static size_t hang_len;
static int hang_rc;

static void hang_alarm(int sig) {
    (void)sig;
    ssize_t w = write(STDOUT_FILENO, hang_msg, hang_len);
    (void)w;
    _exit(hang_rc);
}

/* A seed that dies of a signal (a wild pointer; a heap the allocator
 * finds corrupt, and aborts) ended the run with nothing said of it: the
 * seed and its replay (or the planted crash found) are written as it dies
 * (the message built by hang_arm, as the watchdog's), with the signal's
 * number, and the process ends with 1 (0 for a planted bug sought). */
static char crash_head[256], crash_tail[512];
static size_t crash_head_len, crash_tail_len; /* 0: no seed running */
static int crash_rc;

static void crash_signal(int sig) {
    if (!crash_head_len) { /* no seed running: the signal's own end */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    char num[16];
    size_t n = sizeof num;
    for (int v = sig; n == sizeof num || v; v /= 10)
        num[--n] = (char)('0' + v % 10);
    ssize_t w = write(STDOUT_FILENO, crash_head, crash_head_len);
    w = write(STDOUT_FILENO, num + n, sizeof num - n);
    w = write(STDOUT_FILENO, crash_tail, crash_tail_len);
    (void)w;
    _exit(crash_rc);
}

static size_t msg_len(int n, size_t cap) {
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

/* Arms the watchdog for one seed; hang_arm(0, ...) with seed 0 and
 * arm false disarms it. A planted bug sought (--expect-find) is found by
 * a hang as by a failure. */
static void hang_arm(bool arm, uint64_t seed, uint64_t plant, bool seeking,
                     const char *argv0) {
    if (!arm) {
        alarm(0);
        crash_head_len = crash_tail_len = 0;
        return;
    }
    int n;
    if (plant && seeking) {
        n = snprintf(hang_msg, sizeof hang_msg,
                     "planted %s: found by seed %" PRIu64
                     ": no return in %u s of real time\n",
                     plant_name(plant), seed, hang_s);
        hang_rc = 0;
        crash_head_len = msg_len(snprintf(crash_head, sizeof crash_head,
                                          "planted %s: found by seed %" PRIu64
                                          ": crashed (signal ",
                                          plant_name(plant), seed),
                                 sizeof crash_head);
        crash_tail_len = msg_len(snprintf(crash_tail, sizeof crash_tail, ")\n"),
                                 sizeof crash_tail);
        crash_rc = 0;
    } else {
        crash_head_len =
            msg_len(snprintf(crash_head, sizeof crash_head,
                             "seed %" PRIu64 " FAILED: crashed (signal ", seed),
                    sizeof crash_head);
        crash_tail_len =
            msg_len(snprintf(crash_tail, sizeof crash_tail,
                             ")\nreplay: %s --seed %" PRIu64 "%s%s%s\n", argv0,
                             seed, streams_flag(), plant ? " --plant " : "",
                             plant ? plant_name(plant) : ""),
                    sizeof crash_tail);
        crash_rc = 1;
        n = snprintf(hang_msg, sizeof hang_msg,
                     "seed %" PRIu64 " FAILED: no return in %u s of real "
                     "time (a call that spins, or a wait nothing ends)\n"
                     "replay: %s --seed %" PRIu64 "%s%s%s\n",
                     seed, hang_s, argv0, seed, streams_flag(),
                     plant ? " --plant " : "", plant ? plant_name(plant) : "");
        hang_rc = 1;
    }
    hang_len = n < 0                         ? 0
               : (size_t)n < sizeof hang_msg ? (size_t)n
                                             : sizeof hang_msg - 1;
    fflush(stdout); /* what the run printed comes first */
    alarm(hang_s);
}

static void report_failure(uint64_t seed, uint64_t plant, const outcome *o,
                           const char *argv0) {
    char path[64];
    snprintf(path, sizeof path, "lull-kv-sim-%" PRIu64 ".trace", seed);
    printf("seed %" PRIu64 " FAILED: %s\n", seed, o->why);
    printf("replay: %s --seed %" PRIu64 "%s%s%s --trace %s\n", argv0, seed,
           streams_flag(), plant ? " --plant " : "",
           plant ? plant_name(plant) : "", path);
    FILE *f = fopen(path, "w");
    outcome again;
    run_seed(seed, plant, f, 0, &again);
    if (f) fclose(f);
    if (!again.failed || strcmp(again.why, o->why) != 0 ||
        again.trace_hash != o->trace_hash)
        printf("the replay did NOT repeat the run (%s; hash %016" PRIx64
               " vs %016" PRIx64 ")\n",
               again.failed ? again.why : "passed", again.trace_hash,
               o->trace_hash);
    f = fopen(path, "r");
    if (!f) return;
    /* The last 40 lines. */
    static char lines[40][400];
    int n = 0;
    while (fgets(lines[n % 40], sizeof lines[0], f))
        n++;
    fclose(f);
    printf("the trace (%s), last %d lines:\n", path, n < 40 ? n : 40);
    for (int i = n < 40 ? 0 : n - 40; i < n; i++)
        fputs(lines[i % 40], stdout);
}

/* The replay's flags for the mode (and a budget given). */
static const char *streams_flag(void) {
    static char flags[48];
    snprintf(flags, sizeof flags, "%s", streams_mode ? " --streams" : "");
    if (event_budget_flag)
        snprintf(flags + strlen(flags), sizeof flags - strlen(flags),
                 " --event-budget %" PRIu64, event_budget_flag);
    return flags;
}

static int usage(void) {
    fprintf(
        stderr,
        "usage: lull-kv-sim [--seeds N] [--first S] [--seconds T] "
        "[--seed S]\n"
        "                   [--plant BUG [--expect-find N]] "
        "[--determinism N [--once]]\n"
        "                   [--trace FILE] [--quiet] [--unread-close] "
        "[--streams]\n"
        "                   [--event-budget N] [--hang-seconds N]\n"
        "  BUG: resume-late ack-before-log lost-wakeup expire-relative\n"
        "       multi-split chunk-edge int32 silent-resync expire-early\n"
        "       batch-death expire-now same-length snapshot-ttl ltrim-off\n"
        "       hincrby-set lrange-end setrange-shrink expire-gt exec-arity\n"
        "       snap-list-batch resume-caught-up lrem-direction outf-resend\n"
        "       ack-spin msetnx-partial lpos-tail expire-seconds\n"
        "       hollow-partition\n"
        "       short-write-resend short-write-drop hollow-short-write "
        "(--streams)\n"
        "       hang (with --hang-seconds N: the seed watchdog)\n");
    return 2;
}

/* A count or seed argument: decimal digits only, within 64 bits, and for a
 * count (min 1) not 0. strtoull took "-1" as 2^64 - 1 seeds (a run
 * without end), "0" as none (a run that passed having checked nothing)
 * and "x" as 0. */
static bool number_arg(const char *a, uint64_t min, uint64_t *out) {
    if (*a < '0' || *a > '9') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(a, &end, 10);
    if (*end || errno || v < min) return false;
    *out = v;
    return true;
}

int main(int argc, char **argv) {
    uint64_t first = 1, seeds = 100, num;
    double seconds = 0;
    bool one = false, quiet = false, first_given = false, once = false;
    uint64_t plant = 0;
    uint64_t expect_find = 0;
    int64_t determinism = 0;
    const char *trace_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (more && strcmp(a, "--seeds") == 0) {
            if (!number_arg(argv[++i], 1, &seeds)) return usage();
        } else if (more && strcmp(a, "--first") == 0) {
            if (!number_arg(argv[++i], 0, &first)) return usage();
            first_given = true;
        } else if (more && strcmp(a, "--seconds") == 0) {
            if (!number_arg(argv[++i], 1, &num)) return usage();
            seconds = (double)num;
        } else if (more && strcmp(a, "--seed") == 0) {
            if (!number_arg(argv[++i], 0, &first)) return usage();
            one = true;
        } else if (more && strcmp(a, "--plant") == 0) {
            const char *n = argv[++i];
            for (size_t j = 0; j < sizeof plants / sizeof plants[0]; j++)
                if (strcmp(n, plants[j].name) == 0) plant = plants[j].bit;
            if (!plant) return usage();
        } else if (more && strcmp(a, "--expect-find") == 0) {
            if (!number_arg(argv[++i], 1, &expect_find)) return usage();
        } else if (more && strcmp(a, "--determinism") == 0) {
            if (!number_arg(argv[++i], 1, &num) || num > INT64_MAX)
                return usage();
            determinism = (int64_t)num;
        } else if (more && strcmp(a, "--trace") == 0) {
            trace_path = argv[++i];
        } else if (strcmp(a, "--quiet") == 0) {
            quiet = true;
        } else if (strcmp(a, "--once") == 0) {
            once = true;
        } else if (strcmp(a, "--streams") == 0) {
            streams_mode = true;
        } else if (more && strcmp(a, "--event-budget") == 0) {
            if (!number_arg(argv[++i], 1, &event_budget_flag)) return usage();
        } else if (more && strcmp(a, "--hang-seconds") == 0) {
            uint64_t h;
            if (!number_arg(argv[++i], 1, &h) || h > 86400) return usage();
            hang_s = (unsigned)h;
        } else if (strcmp(a, "--unread-close") == 0) {
            return run_unread_close();
        } else {
            return usage();
        }
    }
    /* The determinism run is fault-free: a plant there would be ignored,
     * and the run pass, where the caller asked for a bug to be found. */
    if (determinism > 0 && plant) return usage();
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* The stream path's planted bugs live under the streams. */
    if (plant & PLANT_STREAMS) streams_mode = true;
    if (streams_mode) {
        shim_io_before = plan_before;
        shim_io_after = plan_after;
    }
    if (determinism > 0) {
        /* One fault-free seed, twice: the same trace, by its hash. A
         * failure says its seed and the command that replays it, as any
         * seed's does. */
        outcome a, b;
        FILE *f = NULL;
        if (trace_path)
            f = strcmp(trace_path, "-") == 0 ? stdout : fopen(trace_path, "w");
        double t0 = real_s();
        run_seed(first, 0, f, determinism, &a);
        double t1 = real_s();
        if (f && f != stdout) fclose(f);
        char replay[300];
        snprintf(replay, sizeof replay,
                 "replay: %s --first %" PRIu64 " --determinism %" PRId64
                 " --once --trace lull-kv-sim-%" PRIu64 ".trace",
                 argv[0], first, determinism, first);
        bool short_run = a.commands < (uint64_t)determinism;
        if (once) {
            printf("determinism: seed %" PRIu64 ", %" PRIu64
                   " commands, %" PRIu64 " events, trace hash %016" PRIx64
                   " (%.1f s)\n",
                   first, a.commands, a.stats.events, a.trace_hash, t1 - t0);
            if (a.failed || short_run)
                printf("seed %" PRIu64 " FAILED: %s\n%s\n", first,
                       a.failed ? a.why : "fewer commands than asked", replay);
            return a.failed || short_run;
        }
        run_seed(first, 0, NULL, determinism, &b);
        double t2 = real_s();
        printf("determinism: seed %" PRIu64 ", %" PRIu64 " commands, %" PRIu64
               " events, trace hash %016" PRIx64 " and %016" PRIx64
               " (%.1f s, %.1f s)\n",
               first, a.commands, a.stats.events, a.trace_hash, b.trace_hash,
               t1 - t0, t2 - t1);
        if (a.failed || b.failed || short_run) {
            printf("seed %" PRIu64 " FAILED: %s\n%s\n", first,
                   a.failed   ? a.why
                   : b.failed ? b.why
                              : "fewer commands than asked",
                   replay);
            return 1;
        }
        if (a.trace_hash != b.trace_hash) {
            printf("seed %" PRIu64 " FAILED: the two runs differ\n%s "
                   "(twice, to two files, and diff them)\n",
                   first, replay);
            return 1;
        }
        return 0;
    }
    if (one) {
        FILE *f = NULL;
        if (trace_path)
            f = strcmp(trace_path, "-") == 0 ? stdout : fopen(trace_path, "w");
        outcome o;
        run_seed(first, plant, f, 0, &o);
        if (f && f != stdout) fclose(f);
        printf("seed %" PRIu64 ": %s%s (%" PRIu64 " commands, %" PRIu64
               " events, trace hash %016" PRIx64 ")\n",
               first, o.failed ? "FAILED: " : "passed", o.failed ? o.why : "",
               o.commands, o.stats.events, o.trace_hash);
        return o.failed ? 1 : 0;
    }
    if (seconds > 0 && !first_given) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        first = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    }
    if (expect_find) seeds = expect_find;
    double t0 = real_s();
    uint64_t n = 0, failures = 0;
    lull_simnet_stats total = {0};
    uint64_t commands = 0, over_limit = 0, multis = 0, lost = 0;
    uint64_t continues = 0, fulls = 0, expired = 0, probes = 0, restarts = 0;
    uint64_t floods = 0;
    size_t flood_out = 0;
    uint64_t reads = 0, bulks = 0, bwalks = 0;
    uint64_t bigs = 0, same_len = 0, hangups = 0, scans = 0;
    uint64_t scan_parts = 0, keys_checked = 0, kwalks = 0, pushes = 0;
    uint64_t pushes0 = 0, forgotten = 0;
    uint64_t flushes = 0;
    fault_tally faults = {0};
    signal(SIGALRM, hang_alarm); /* the seed watchdog (hang_arm) */
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++)
        signal(fatal[i], crash_signal); /* the crash report (crash_signal) */
    if (seconds > 0 && !quiet)
        printf("soak: %.0f s of seeds from %" PRIu64 "\n", seconds, first);
    for (uint64_t s = first;; s++) {
        if (seconds > 0 ? real_s() - t0 >= seconds : n >= seeds) break;
        outcome o;
        hang_arm(true, s, plant, expect_find != 0, argv[0]);
        run_seed(s, plant, NULL, 0, &o);
        hang_arm(false, 0, 0, false, NULL);
        n++;
        commands += o.commands;
        over_limit += o.over_limit;
        multis += o.multis;
        lost += o.lost;
        continues += o.continues;
        fulls += o.fulls;
        restarts += o.restarts;
        expired += o.expired;
        probes += o.probes;
        floods += o.floods;
        if (o.flood_out > flood_out) flood_out = o.flood_out;
        reads += o.reads;
        bulks += o.bulks;
        bwalks += o.bwalks;
        bigs += o.bigs;
        same_len += o.same_len;
        hangups += o.hangups;
        scans += o.scans;
        scan_parts += o.scan_parts;
        keys_checked += o.keys_checked;
        kwalks += o.kwalks;
        pushes += o.pushes;
        pushes0 += o.pushes0;
        forgotten += o.forgotten;
        flushes += o.flushes;
        total.events += o.stats.events;
        total.partitions += o.stats.partitions;
        total.breaks += o.stats.breaks;
        total.resets += o.stats.resets;
        total.refused += o.stats.refused;
        tally(&faults, &o);
        char none[300];
        if (!o.failed && fault_without_effect(&faults, none, sizeof none)) {
            if (plant && expect_find) {
                printf("planted %s: found by seed %" PRIu64 " (%" PRIu64
                       " seeds run): %s\n",
                       plant_name(plant), s, n, none);
                return 0;
            }
            printf("seeds %" PRIu64 "..%" PRIu64 " FAILED: %s\n", first, s,
                   none);
            printf("replay: %s --first %" PRIu64 " --seeds %" PRIu64 "%s%s%s\n",
                   argv[0], first, n, streams_flag(), plant ? " --plant " : "",
                   plant ? plant_name(plant) : "");
            return 1;
        }
        if (!o.failed) continue;
        failures++;
        if (plant && expect_find) {
            printf("planted %s: found by seed %" PRIu64 " (%" PRIu64
                   " seeds run): %s\n",
                   plant_name(plant), s, n, o.why);
            printf("replay: %s --seed %" PRIu64 "%s --plant %s --trace "
                   "lull-kv-sim-%" PRIu64 ".trace\n",
                   argv[0], s, streams_flag(), plant_name(plant), s);
            return 0;
        }
        report_failure(s, plant, &o, argv[0]);
        return 1;
    }
    double dt = real_s() - t0;
    if (plant && expect_find) {
        printf("planted %s: NOT found in %" PRIu64 " seeds\n",
               plant_name(plant), n);
        return 1;
    }
    printf("%" PRIu64 " seeds passed in %.1f s (%.0f seeds/s): %" PRIu64
           " commands checked (%" PRIu64 " transactions), %" PRIu64
           " network events; faults: %" PRIu64 " partitions (%" PRIu64
           " broke, %" PRIu64 " bytes held), %" PRIu64 " resets, %" PRIu64
           " reads slowed, %" PRIu64 " refused connects; %" PRIu64
           " client connections lost, %" PRIu64
           " replica links closed for their output, %" PRIu64
           " replica resumes from an offset, %" PRIu64 " full syncs (%" PRIu64
           " primaries restarted), %" PRIu64 " expiry timer runs, %" PRIu64
           " expiry probes, %" PRIu64 " atomicity reads of replicas, %" PRIu64
           " replies of the bulk writer (%" PRIu64 " SCAN walks); %" PRIu64
           " big values set (%" PRIu64 " over one of equal length), %" PRIu64
           " clients hung up; %" PRIu64
           " SSCAN and ZSCAN walks checked whole (%" PRIu64
           " steps with a cursor to go on); %" PRIu64 " KEYS and %" PRIu64
           " SCAN MATCH walks checked, %" PRIu64
           " pub/sub replies and messages (%" PRIu64
           " the primary's on a replica, %" PRIu64
           " replicas made to resync in full), %" PRIu64 " flushes, %" PRIu64
           " floods read whole (at most %zu bytes of replies held)\n",
           n, dt, n / (dt > 0 ? dt : 1), commands, multis, total.events,
           total.partitions, total.breaks, faults.held, total.resets,
           faults.slowed, total.refused, lost, over_limit, continues, fulls,
           restarts, expired, probes, reads, bulks, bwalks, bigs, same_len,
           hangups, scans, scan_parts, keys_checked, kwalks, pushes, pushes0,
           forgotten, flushes, floods, flood_out);
    if (streams_mode) {
        printf("streams: ");
        for (int k = 0; k < IO_KINDS - 1; k++)
            printf("%s%" PRIu64 " %s (drawn in %" PRIu64 " seeds)",
                   k ? ", " : "", faults.io[k], io_kind_name[k],
                   faults.io_drawn[k]);
        printf("\n");
    }
    return failures ? 1 : 0;
}
