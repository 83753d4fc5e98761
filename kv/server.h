/* server.h: what lull-kv's server side shares between its files.
 *
 *   server.c  main: options, listening sockets, the loop; and the socket
 *             transport (kv_net_socket)
 *   node.c    one server's life (set up, start, stop, free), its log
 *             lines, the expiry timer's hooks (expiry.c)
 *   conn.c    client connections: reading, running commands, sending
 *             replies, the input and output limits
 *   link.c    replication: a primary's links to its replicas, and a
 *             replica's link to its primary
 *
 * One loop thread runs all of it. The commands themselves (cmd.c) know
 * nothing of connections; these files know nothing of the keyspace but
 * what cmd.h says, and nothing of sockets: a connection is a
 * lull_endpoint, and the few calls that are about the transport rather
 * than about frames (pausing reads, shutting a write side, the peer's
 * address, the replica's connect) go through the server's kv_net. Sockets
 * are one kv_net (server.c); the simulator's network is another (sim.c),
 * which runs a primary, its replicas and their clients in one process. */
#ifndef LULL_KV_SERVER_H
#define LULL_KV_SERVER_H

#include <lull.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmd.h"
#include "expiry.h"
#include "repl.h"
#include "resp.h"

/* 1,048,576 arguments in one command (Redis' own bound before 7.0): the
 * parser refuses more. The argument table starts at ARGS_START entries
 * (16 KiB; Redis' first argv for a long command is as long) and doubles
 * as a longer command's arguments arrive (server_args), never shrinking:
 * 16 MiB held from the start were counted in used_memory. */
#define MAX_ARGS   ((size_t)1 << 20)
#define ARGS_START ((size_t)1024)

/* Replies at least this long are handed to the stream as they are (the
 * buffer becomes the frame, freed once written) rather than copied, and a
 * connection sends what it has gathered once it reaches this much: 64 KiB,
 * the stream's high-water mark. So a large reply is never copied twice, a
 * connection keeps no buffer larger than about this between bursts, and a
 * pipeline of large replies waits for the client to read (on_drain). */
#define REPLY_HANDOVER ((size_t)64 << 10)

/* Between bursts a connection keeps no larger input buffer than this
 * (64 KiB: one read of the stream's). */
#define INPUT_KEEP ((size_t)64 << 10)

/* Frames a replica link can have in flight: the log's records are sent by
 * pointer, each in a lull_frame of the link's own. 4096 covers a stream's
 * high-water mark (64 KiB) of records of 16 bytes and more; a sender that
 * finds its next frame still in flight waits for that frame's release. */
#define RING 4096

/* The classes of client-output-buffer-limit, as Redis names them. */
enum { CLASS_NORMAL, CLASS_REPLICA, CLASS_PUBSUB, CLASSES };

typedef struct obuf_limit {
    size_t hard;      /* over this: closed at once (0: no hard limit) */
    size_t soft;      /* over this for soft_ns: closed (0: no soft limit) */
    uint64_t soft_ns; /* how long a connection may stay over `soft` */
} obuf_limit;

typedef struct rlink rlink;
typedef struct conn conn;
typedef struct server server;

/* The transport a server's connections run over: what lull-kv needs of a
 * connection beyond lull_endpoint. Each call takes the endpoint of a
 * connection the transport set up (inside a kv_transport). */
typedef struct kv_net {
    int (*read_stop)(lull_endpoint *ep);  /* backpressure: stop reading */
    int (*read_start)(lull_endpoint *ep); /* ... and read again */
    /* Half-close once everything queued is written (QUIT). */
    int (*shutdown)(lull_endpoint *ep);
    /* The peer's address for log lines ("ip:port") and INFO ("ip"). */
    void (*peer)(lull_endpoint *ep, char *s, size_t cap, bool with_port);
    /* A replica's connect to its primary (srv->m): sets m.ep (ep->data =
     * srv) and returns 0, then calls master_connected(srv, status) in a
     * later turn (and, on failure, the endpoint's close callback); or
     * returns a negative errno, and nothing follows. */
    int (*connect)(server *srv);
    /* The reads that returned data and the writes the connection's
     * transport made (INFO stats), or NULL: it counts none. */
    void (*io_counts)(const lull_endpoint *ep, uint64_t *reads,
                      uint64_t *writes);
    /* The socket the connection's bytes go over, which the catch-up
     * sender thread writes through a descriptor of its own; -1, or NULL:
     * none (TLS, the simulator): its links catch up on the loop. */
    int (*fd)(lull_endpoint *ep);
    /* CLIENT LIST's laddr: the connection's own end, "ip:port", or a Unix
     * socket's "path:0" (*unix_sock set: its addr is that too, as Redis
     * says it); returns its descriptor, -1 when it has none. primary: ep is
     * a replica's link to its primary (ep->data: the server). NULL: no
     * sockets (laddr is the server's name, fd -1). */
    int (*local)(lull_endpoint *ep, bool primary, char *s, size_t cap,
                 bool *unix_sock);
    /* The primary's name to an address (srv->m.host to srv->m.addr) on a
     * pool thread, before each connect of a host that is not numeric:
     * returns 0, then calls master_resolved in a later turn; or a negative
     * errno, and nothing follows. NULL: the transport connects by name
     * (the simulator). resolve_cancel: the server stops, the answer is
     * not wanted (master_resolved still runs, and ignores it; a lookup
     * already running sets m.lookup_left until then). */
    int (*resolve)(server *srv);
    void (*resolve_cancel)(server *srv);
} kv_net;

/* How a primary sends a catching-up replica its backlog (--repl-catchup):
 * on a thread of its own when a second CPU is there (auto), always there
 * (thread), or always on the loop, between clients (loop). */
enum { CATCHUP_AUTO, CATCHUP_THREAD, CATCHUP_LOOP };

/* How a primary makes a full resync's snapshot (--repl-snapshot): a forked
 * child writes it to the replica's socket while the loop serves clients
 * (fork, Redis' diskless sync), or the loop writes it at once (inline: a
 * transport without a socket, tests, a one-CPU host). */
enum { SNAPSHOT_FORK, SNAPSHOT_INLINE };

/* Room for one connection's handle, whichever transport set it up. */
typedef union kv_transport {
    lull_stream stream;
    lull_simconn sim;
    lull_tls tls;
} kv_transport;

/* M_RESOLVING: the primary's name is being looked up (kv_net.resolve),
 * last so that the simulator's traces, which print the state, keep their
 * numbers. */
enum { M_DOWN, M_CONNECTING, M_SYNC, M_UP, M_RESOLVING };

/* The replica's link to its primary (--replica-of). Its five rows
 * (README, "The contracts"):
 *   trigger          start-up; the link's close or a failed connect, which
 *                    arms the retry timer; the retry timer, which connects
 *   source of truth  m->state, and the offset and replid in srv->kv
 *   pending work     state == M_DOWN: no link, no connect and no name
 *                    lookup under way
 *   next retry       the retry timer, backoff_ns after the failure (100 ms,
 *                    doubling to 5 s; a completed handshake resets it,
 *                    unless the link then proves malformed or is lost
 *                    within 5 s)
 *   quiet            connected or connecting: no timer, one socket in
 *                    epoll; acks are sent only after records were applied
 * There is no periodic check of a live link: a dead primary is seen as the
 * socket's close (EOF, reset), and a silent one is simply idle. */
typedef struct master {
    kv_transport t;     /* the link's handle (kv_net.connect sets it up) */
    lull_endpoint *ep;  /* its endpoint; ep->data: the server */
    int state;          /* M_* */
    char host[64];      /* as given on the command line (INFO master_host) */
    char addr[64];      /* numeric: host, 127.0.0.1 for localhost, or what
                           the last lookup of the name found */
    bool named;         /* host is a name: looked up before each connect */
    lull_lookup lookup; /* that lookup (kv_net.resolve) */
    bool lookup_left;   /* the server stopped while it ran on the pool: its
                           answer is not waited for (server.c's exit) */
    int port;           /* the primary's port */
    char replid[41];    /* the primary's id from the last full resync */
    buf in;             /* bytes of the link not yet applied */
    size_t need;        /* apply again once `in` holds this many bytes */
    size_t max_bulk;    /* the longest record argument taken: the machine's
                           memory and swap (link.c, stream_limits) */
    lull_timer retry;
    uint64_t backoff_ns;  /* the next retry's delay */
    uint64_t backoff_was; /* backoff_ns when this link's handshake reset it
                             (a link found malformed, or lost within
                             RETRY_MAX_NS, goes on from it); 0 */
    lull_task ack;        /* sends REPLACK <offset> */
    lull_frame ack_frame; /* its bytes: ack_buf (no allocation per ack) */
    char ack_buf[64];     /* the REPLACK request in flight */
    bool ack_again;       /* records applied while an ack was in flight */
    uint64_t acked;       /* the offset last acknowledged */
    bool auth_pending;    /* --masterauth: AUTH's +OK is awaited first */
    /* A full resync's snapshot is coming (+FULLRESYNC with an offset):
     * its records are applied without counting, up to its end marker,
     * into a keyspace of their own, which then takes the old one's place
     * (clients read the old one meanwhile, never half of a snapshot). */
    bool snap;
    store snap_db;
    uint64_t snap_off; /* the offset the snapshot stands for */
    char snap_id[41];  /* the primary's replid, taken at the marker */
    uint64_t id;       /* CLIENT LIST's: a client id, given at each M_UP */
    uint64_t up_ns;    /* when it was (loop ns): CLIENT LIST's age */
    uint64_t last_ns;  /* when bytes last came (loop ns): its idle */
} master;

struct server {
    lull_loop *loop;
    const kv_net *net; /* the transport: kv_net_socket, or the simulator's */
    void *net_arg;     /* the transport's own (the simulated network) */
    const char *name;  /* for log lines: NULL (sockets) or a simulated node's
                          address */
    bool has_unix;
    int listening;     /* listeners still accepting; the server stops at 0 */
    kv kv;             /* keyspace, write log, replication state */
    kv_expiry expiry;  /* the keyspace's expiry timer and its clock */
    resp_limits lim;   /* proto-max-bulk-len, MAX_ARGS; max_args: the
                          argument table's room */
    size_t qbuf_limit; /* client-query-buffer-limit */
    obuf_limit obl[CLASSES]; /* client-output-buffer-limit, per class */
    resp_arg *argv;          /* the command being run (lim.max_args
                                entries, grown by server_args) */
    bool per_record;         /* --repl-mode per-record */
    int catchup;             /* --repl-catchup: CATCHUP_* */
    int sender_cpu;          /* --repl-sender-cpu: the sender thread's CPU
                                (-1: wherever the process may run) */
    lull_percore *senders;   /* the sender thread's loop (link.c); started
                                at the first hand-off, NULL before */
    size_t senders_out;      /* links whose backlog is out on it */
    int snapshot;            /* --repl-snapshot: SNAPSHOT_* */
    size_t links_held;       /* closed links whose frames or hand-off
                                still read the log: it is not trimmed */
    int snap_timeout_ms;     /* a snapshot child whose link takes nothing
                                this long gives up: 60 s, Redis'
                                repl-timeout (tests shorten it) */
    size_t snap_fds;         /* descriptors the snapshots hold besides
                                their links (a child's pidfd, a relay's
                                pipe): counted against maxclients */
    struct snap_job *job;    /* the socket snapshot child running (link.c):
                                a full resync asked meanwhile waits for its
                                end, then one child serves all that waited */
    bool senders_stopped;    /* server_stop: no hand-off any more */
    int port;                /* the bound TCP port (told to a primary) */
    master m;                /* --replica-of */
    /* requirepass (NULL: none; every client is the default user, signed
     * in) and masterauth (sent as AUTH before REPLSYNC). */
    const char *requirepass;
    const char *masterauth;
    bool protected_mode; /* refuse non-loopback clients without a pass */
    /* Clients and replica links at most (0: no bound); one more is
     * answered "-ERR max number of clients reached" and closed, so that
     * the descriptors set aside stay the server's own. */
    size_t maxclients;
    bool full_said;    /* the log said clients are refused; not since */
    bool oom_said;     /* the log said a new client found no memory; none let
                          in since */
    uint64_t rejected; /* clients refused so (INFO rejected_connections) */
    lull_tls_ctx *repl_tls; /* --tls-replication: the link's client context */
    bool stopping;          /* server_stop: the link is not retried */
    /* Where a slice of busy work ends (the replication sender, the expiry
     * timer): lull_loop_should_yield, or the simulator's seeded stand-in
     * (the quantum is real time, and a simulation must not depend on it). */
    bool (*should_yield)(lull_loop *loop);
    /* Log lines: NULL writes them to stderr; the simulator puts them in
     * its trace. */
    void (*log)(server *srv, const char *line);
    uint64_t links_over_limit; /* replica links closed for their output */
    conn *conns;               /* open connections, linked by conn.next */
    uint64_t gone_reads;       /* the transport's reads and writes of the */
    uint64_t gone_writes;      /* connections closed so far (INFO stats) */
    /* maxmemory-clients: what the clients' buffers may hold together (0:
     * no budget); past it the client holding the most is closed, until
     * they are under it (conn.c's budget). Replica links are not counted,
     * nor closed for it, as Redis spares them. */
    size_t maxmemory_clients;
    size_t clients_mem;       /* the sum of the clients' conn.mem */
    uint64_t evicted_clients; /* clients closed so */
    uint64_t evict_steps;     /* clients looked at to find them (tests) */
    lull_task evict;          /* closes them after CONFIG SET lowered it */
    /* Messages published put the clients over it: the ones holding the
     * most are closed once the running command is done (run_batch). */
    bool evict_due;
    char maxmemory_clients_text[24]; /* CONFIG GET's value */
};

struct conn {
    kv_transport t;    /* the connection's handle (its transport sets it up) */
    lull_endpoint *ep; /* its endpoint; ep->data: this conn */
    server *srv;
    buf in;          /* bytes read and not yet parsed into a command */
    size_t need;     /* parse `in` again once it holds this many bytes */
    resp_state ps;   /* how far the command at the front of `in` is parsed */
    buf out;         /* replies not yet handed to the stream */
    buf sent;        /* the replies the stream is writing (outf), or the
                        spare buffer `out` changes places with */
    lull_frame outf; /* sent's bytes, while outf_busy */
    bool outf_busy;  /* outf is in flight */
    kv_client cl;    /* its state in the command layer */
    bool closing;    /* QUIT or a protocol error: input is ignored now */
    bool waiting;    /* replies filled the stream: `in` waits for on_drain */
    bool gone;       /* conn_drop closed it: on_close frees it */
    lull_frame fin;  /* the last replies (bytes: out): its release closes */
    lull_timer soft; /* armed while over the soft output limit */
    bool soft_armed; /* `soft` is armed */
    lull_task kick;  /* sends messages published to it (conn_wake) */
    rlink *link;     /* set by REPLSYNC: this is a replica's link */
    uint64_t auth_unsaid; /* failed AUTHs not in the log yet */
    uint64_t auth_said;   /* when a failure was last logged (loop ns; 0:
                             never) */
    lull_timer auth_due;  /* armed while auth_unsaid waits for its line */
    bool tls;             /* the transport's: t is a lull_tls */
    conn *next;           /* srv->conns, for INFO stats */
    conn *prev;
    /* The peer's "ip:port" for log lines, taken at accept: once the peer
     * has gone the socket can no longer say (getpeername fails). */
    char name[64];
    uint64_t born_ns; /* when it started (loop ns): CLIENT LIST's age */
    uint64_t last_ns; /* when it last sent bytes or drained: its idle */
    bool kill;        /* CLIENT KILL matched it: closed after the walk */
    /* A large last argument (KV_BLOB_MIN bytes on) is received into a blob
     * of its own (blob.h), the bytes before it kept in `in`: the blob is
     * filling while blob_got < blob_want (its bytes and CRLF), then waits
     * to run as ps.ext. NULL: none. */
    char *blob;
    size_t blob_want, blob_got;
    /* A GET's blob to send after out[0, vref_at), by reference (held
     * until written); NULL: none. */
    const char *vref;
    size_t vref_at, vref_len;
    /* Its part of srv->clients_mem: what it held when last looked at
     * (conn_mem: input kept, and replies and a queued transaction from
     * CLIENT_MEM_MIN on). */
    size_t mem;
    /* flush's one test: replies and queue under this need no look (the
     * normal hard limit; with a budget, CLIENT_MEM_MIN while its replies
     * and transaction count 0, and 0 while they do not, so a client they
     * count in is looked at each send). */
    size_t check_at;
    /* run_batch's test of a queued transaction's bytes, the same way:
     * client-query-buffer-limit, or less while the budget counts. */
    size_t queue_check;
};

/* node.c */
/* kv_init and Redis' default limits, before options change them. */
void server_defaults(server *srv);
/* Sets the server up on a loop and a transport: its keyspace, argument
 * table (lim.max_args entries: ARGS_START) and expiry timer, on a clock reading
 * clock_ms (ms on the Unix epoch) at the loop's now. 0 or -ENOMEM. */
int server_open(server *srv, lull_loop *loop, const kv_net *net,
                int64_t clock_ms);
/* Starts what runs on its own: a replica's link to its primary. */
void server_start(server *srv);
/* Stops what runs on its own: a replica's link is closed and not retried,
 * the expiry timer stopped. Connections close when their peers do. */
void server_stop(server *srv);
/* Frees what server_open and the options made. */
void server_free(server *srv);
/* RESP_GROW: the argument table made n entries long or longer (never
 * shorter), srv->lim.max_args its room; it, or NULL when out of memory
 * (the table as it was). kv.grow_args too. */
resp_arg *server_args(server *srv, size_t n);
/* SIZE as Redis reads it (memtoll): digits, then no unit or b, k / m / g
 * (powers of 1000) or kb / mb / gb (powers of 1024), in any case. */
bool kv_parse_size(const char *s, size_t len, size_t *out);
/* A log line (printf-style), "lull-kv: " first, to stderr or srv->log. */
void srv_log(server *srv, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Keys were expired by the timer (kv_expiry.expired): their DELs are in
 * the log, for the links. */
void keys_expired(void *arg);

/* conn.c */
/* A new client connection of srv: its transport sets up c->t (with
 * ep.data = c), then calls conn_start with the endpoint, or conn_abort if
 * that failed. NULL when out of memory. */
conn *conn_new(server *srv);
/* False when c is one past maxclients: it is answered so and closes. */
bool conn_start(conn *c, lull_endpoint *ep);
void conn_abort(conn *c);
/* The reads and writes of every connection, open or closed (INFO stats). */
void conn_io_totals(const server *srv, uint64_t *reads, uint64_t *writes);
/* Closes the connection now and frees it, after a line on stderr saying
 * why (fmt NULL: no line). No callback of it runs afterwards. */
void conn_drop(conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Stops serving c: its last replies (c->out) are sent, the write side
 * shut, and the connection closed once they are written. */
void conn_finish(conn *c);
/* Holds c to its class's output limits (closing it when over); false
 * when it was closed. */
bool conn_check_output(conn *c);
/* maxmemory-clients was set to `budget` (CONFIG SET): its CONFIG GET text
 * follows, each client's next look too, and the clients over it are
 * closed in a later turn (srv->evict). */
void conn_budget_set(server *srv, size_t budget);
/* srv->evict: closes the clients holding the most while they are over
 * maxmemory-clients. */
void clients_evict(lull_task *t);
/* kv.config_set: CONFIG SET maxmemory-clients SIZE; NULL, or the error
 * line to answer. */
const char *conn_config_set(kv *k, const resp_arg *name, const resp_arg *value);
/* Answers the new connection with `reply` (a whole RESP line) and closes
 * it, after a log line saying why (protected mode). */
void conn_refuse(conn *c, const char *reply, const char *why);
/* kv.wake: a message was added to a client's output. */
void conn_wake(kv_client *cl);
/* kv.class_changed: the client's output cap follows its class (set_cap). */
void conn_class_changed(kv_client *cl);
/* kv.reply_blob: a GET's blob, sent by reference. */
bool conn_reply_blob(kv_client *cl, const char *bytes, size_t len);
/* kv.auth: AUTH for a client connection (the password is srv's). */
void conn_auth(kv_client *cl, const resp_arg *a, size_t argc, buf *out);
/* kv.client_list and kv.client_kill: CLIENT LIST, INFO and KILL over the
 * server's connections and a replica's link to its primary. */
bool conn_client_list(kv *k, kv_client *cl, const kv_client_filter *f,
                      buf *out);
long long conn_client_kill(kv *k, kv_client *cl, const kv_client_filter *f);

/* link.c, primary side */
typedef struct ring_frame {
    lull_frame f;
    rlink *l;
    uint64_t at; /* the log offset of its record (the link's pin) */
} ring_frame;

/* A link's full resync by snapshot (rlink.snap). */
enum {
    SNAP_NONE,  /* the log is sent */
    SNAP_WANT,  /* +FULLRESYNC <id> <X> and the snapshot are to be sent */
    SNAP_HELLO, /* fork: waits for the stream to empty before the child */
    SNAP_WAIT,  /* fork: the line is written, and another child runs:
                   the next child, when it ends, serves this link too */
    SNAP_CHILD, /* fork: the child writes it; the loop sends nothing */
    SNAP_RELAY  /* fork, TLS: the child writes it to a pipe, the loop
                   relays the pipe into the link's stream */
};

struct rlink {
    repl_peer peer;       /* in kv.peers while the connection is open */
    server *srv;          /* the primary */
    conn *c;              /* the connection; NULL once it closed */
    bool skip_next;       /* planted bug (KV_PLANT_RESUME_LATE): the next
                             record is not sent */
    lull_task task;       /* the producer */
    repl_cursor cur;      /* the next record to send */
    uint64_t start;       /* the log's end when the link started */
    size_t inflight;      /* ring frames the stream holds (not released) */
    uint64_t ring_next;   /* the next ring frame to use */
    uint64_t ring_tail;   /* the oldest ring frame not released (a close
                             may release later ones first) */
    bool starved;         /* waits for ring[ring_next]'s release */
    bool flushing;        /* waits for its stream to empty, to hand off */
    bool handed;          /* its backlog is out on the sender thread: the
                             loop sends it nothing until that comes back */
    bool no_thread;       /* a hand-off failed: it stays on the loop */
    bool finish_pending;  /* the connection finished while handed: its
                             last reply waits for the backlog */
    struct rsender *sx;   /* the sender thread's state (NULL: never handed) */
    bool held;            /* closed with frames or a hand-off out: counted
                             in srv->links_held until freed */
    int snap;             /* SNAP_*: a snapshot before the log from cur */
    lull_frame hello;     /* the +FULLRESYNC line of a snapshot */
    char hello_buf[80];   /* its bytes */
    bool hello_out;       /* hello is in flight */
    size_t snap_queued;   /* bytes of a snapshot in the stream: not output
                             (Redis counts no RDB transfer either) */
    size_t blocks;        /* snapshot frames the stream holds */
    lull_timer snap_due;  /* an inline snapshot's progress check, armed
                             while it is queued (snap_timeout_ms) */
    size_t snap_seen;     /* snap_queued at the last check */
    void *spare;          /* SNAP_RELAY: a block for the next read */
    int pipe_rd;          /* SNAP_RELAY: the child's pipe (-1: closed) */
    lull_io pipe_io;      /* ... watched while it is empty */
    struct snap_job *job; /* the snapshot child writing to it (NULL: none) */
    size_t slot;          /* its place among job's links */
    ring_frame ring[RING];
};

/* REPLSYNC: c becomes a replica link; its answer goes to c->out. */
void start_link(conn *c, const resp_arg *a, size_t argc);
/* What a replica may send on its link (REPLACK); false for anything else. */
bool link_command(conn *c, const resp_arg *a, size_t argc);
/* The link's connection is closing: its snapshot child, if any, is killed
 * and reaped (it holds the socket open too). */
void link_stop_child(rlink *l);
/* The pid of the snapshot child writing to l (0: none); for the tests. */
int link_child(const rlink *l);
/* The link's connection is closing: it leaves INFO and its producer stops. */
void link_drop(rlink *l);
/* New records in the log: every link sends them, and is held to its
 * output limits. */
void wake_links(server *srv);
/* The bytes a replica link is behind that count as its output buffer:
 * what the log grew since the link started and it has not been sent yet,
 * plus what waits in its stream; before its snapshot is taken, only the
 * stream's (the snapshot will hold those writes). */
size_t link_output(const rlink *l);
/* Closes every replica link (they reconnect and continue from their
 * offsets): how many it closed. */
long long kill_replicas(kv *k);
/* The log's readers (repl_log.pinned): the lowest offset a link or a
 * hand-off still reads, UINT64_MAX when none does. */
uint64_t links_pinned(void *srv);
/* Kills every snapshot child still running and closes its link (they
 * resync when they reconnect): server_stop. */
void snapshots_stop(server *srv);
/* Ends the sender thread: every backlog out on it is cut short (its link
 * closes), the thread is joined and the links hear of it. From outside the
 * loop's run (server_stop); idempotent. */
void senders_stop(server *srv);

/* link.c, replica side: connects to the primary, and keeps doing so. */
void master_start(server *srv);
/* The transport's answer to kv_net.connect. */
void master_connected(server *srv, int status);
/* The transport's answer to kv_net.resolve: NULL, m.addr holds the
 * address; else why the name did not resolve. */
void master_resolved(server *srv, const char *failed);
/* Closes the link for good (server_stop). */
void master_stop(server *srv);
/* CLIENT KILL of the link: it closes, and is retried as a lost one. */
void master_kill(server *srv);

/* server.c: the socket transport. */
extern const kv_net kv_net_socket;

#endif
