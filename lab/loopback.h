/* The `loopback` scenario's contract between its driver and shared workload
 * (lab/loopback.c) and the implementations that run the workload: lull on
 * its real loopback pair (lab/loopback_lull.c), the C peers on a minimal
 * loopback built from their turn primitive (lab/peers/<peer>_loopback.c,
 * each compiled only when its library is installed) and Node
 * (lab/loopback_node.c, which runs lab/node/loopback.js).
 *
 * The workload (the zero-delay timer's): a client and a server exchange 16-byte
 * messages over a loopback link that delivers one frame per turn. The server
 * applies each COMMIT, then refreshes in a separate zero-delay step: it ACKs
 * the commit and sends an UPDATE to every effect subscribed to the key.
 *   commits  100 sequential commits: COMMIT -> ACK -> next COMMIT
 *   graph    24 effects in a tree (effect e reads key e / 2, writes key e);
 *            each of 10 rounds commits key 0 and ends when all 25 commits
 *            of the round were ACKed (every effect recomputed once)
 * Every implementation runs this same code (or, for Node, the same logic in
 * JavaScript); only the transport and the turn primitive differ. */
#ifndef LAB_LOOPBACK_H
#define LAB_LOOPBACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { LB_COMMITS, LB_GRAPH, LB_WORKLOADS };

#define LB_MAX_EFFECTS                                                         \
    64 /* far above the 24 the zero-delay timer was first measured with */
#define LB_MAX_REPS 256 /* above the 200 runs of a full fast row */

typedef struct lb_params {
    int commits;      /* sequential commits: 100 */
    int effects;      /* effects in the graph: 24 */
    int graph_rounds; /* rounds of the graph: 10 */
    int reps;         /* runs of each workload per measurement, each timed
                         alone; the result is their median (fast modes run
                         many: one run is µs, and a preemption inside one
                         must not move the figure) */
    int round;        /* 0-based round of the driver */
    bool quick;       /* --quick */
} lb_params;

typedef struct lb_result {       /* per run of a workload */
    double ms[LB_WORKLOADS];     /* wall time */
    double frames[LB_WORKLOADS]; /* frames delivered */
    double turns[LB_WORKLOADS];  /* turns: deliveries + fan-out steps */
    double timers[LB_WORKLOADS]; /* timers armed */
    double polls[LB_WORKLOADS];  /* I/O checks: epoll calls of the C rows
                                    (lab/turns_count.c), Node's libuv
                                    iterations */
} lb_result;

/* Classes of rows by their I/O policy: what compares like for like. The
 * × of a row is taken to lull's row of its class, else of class 0. */
enum {
    LB_CLASS_QUANTUM = 0, /* I/O checked once per 0.5 ms of callbacks */
    LB_CLASS_EVERY_TURN,  /* I/O checked on every turn */
    LB_CLASS_NO_POLL,     /* no I/O check between turns */
};

/* Measures both workloads once (p->reps runs each). Returns 0, LB_SKIPPED
 * (not this round), or a negative errno. */
#define LB_SKIPPED 1
typedef int (*lb_fn)(const lb_params *p, lb_result *out);

typedef struct lb_entry {
    const char *mode;  /* "task", "setImmediate", ... (JSON) */
    const char *label; /* the table row */
    lb_fn fn;
    bool slow; /* a real wait per turn: one run per measurement, and with
                  --quick the first round only */
    const char *policy; /* when the row checks I/O (the table's column) */
    int cls;            /* LB_CLASS_* */
} lb_entry;

typedef struct lb_peer {
    const char *name; /* "lull", "libuv", ... (JSON "implementation") */
    const char *(*version)(void);              /* NULL: none */
    bool (*available)(char *why, size_t size); /* NULL: always */
    const lb_entry *entries;
    int count;
} lb_peer;

extern const lb_peer lb_lull; /* lab/loopback_lull.c */
extern const lb_peer lb_node; /* lab/loopback_node.c */
/* No loop: epoll_wait(.., 0) and a call a turn (lab/loopback_floor.c). */
extern const lb_peer lb_floor;
#ifdef LAB_HAVE_UV
extern const lb_peer lb_uv; /* lab/peers/uv_loopback.c */
#endif
#ifdef LAB_HAVE_EV
extern const lb_peer lb_ev; /* lab/peers/ev_loopback.c */
#endif
#ifdef LAB_HAVE_EVENT
extern const lb_peer lb_event; /* lab/peers/event_loopback.c */
#endif

/* lull's posted-task hop, ns: the unit the round trip is compared with;
 * and lull's loopback alone, a frame each way per round trip and nothing
 * else. Both the `turns` chain's way: a fresh loop watching one idle
 * socket. */
int lb_lull_task_hop(uint64_t hops, double *ns_per_hop);
int lb_lull_round_trip(uint64_t trips, double *ns_per_trip);

/* ------------------------------------------------------ the workload */

typedef struct lb_work lb_work;

/* How the workload reaches its transport. */
typedef struct lb_link_ops {
    /* Sends a message from side 0 (client) or 1 (server) to the other. */
    void (*send)(lb_work *w, int side, const void *bytes, size_t len);
    /* Claims the server's refresh step (lb_work_refresh on a later turn);
     * a no-op while it is claimed. */
    void (*refresh)(lb_work *w);
} lb_link_ops;

struct lb_work {
    const lb_link_ops *ops;
    int workload; /* LB_COMMITS or LB_GRAPH */
    int commits;  /* the workload's size */
    int effects;
    int rounds;
    /* The server. */
    uint64_t store[LB_MAX_EFFECTS + 1]; /* key -> value */
    int dirty[LB_MAX_EFFECTS + 1];      /* keys committed, not refreshed */
    int ndirty;
    /* The client. */
    int acked;      /* commits ACKed (this round, in the graph) */
    int round;      /* graph round */
    uint64_t value; /* the next input value */
    bool done;
    /* Counts. */
    uint64_t frames;    /* messages delivered, both ways */
    uint64_t refreshes; /* refresh steps run */
};

void lb_work_init(lb_work *w, const lb_link_ops *ops, int workload,
                  const lb_params *p);
/* The client's first message. */
void lb_work_start(lb_work *w);
/* A message arrived at `side`. */
void lb_work_frame(lb_work *w, int side, const void *bytes, size_t len);
/* The server's refresh step. */
void lb_work_refresh(lb_work *w);
/* Frames one run of the workload delivers (what a correct run counts). */
uint64_t lb_work_expected_frames(int workload, const lb_params *p);

/* -------------------------------- the peers' loopback, over their turns */

/* A peer's turn: a callback the peer runs on a later turn of its loop.
 * The peer sets `arm` (start a zero-delay timer, an idle watcher...) and
 * calls lb_turn_run from the watcher's callback; the link sets `fn`. */
typedef struct lb_turn lb_turn;
struct lb_turn {
    void (*arm)(lb_turn *t); /* the peer's: claim the turn */
    void (*fn)(lb_turn *t);  /* the link's: what the turn runs */
    bool is_timer;           /* arms count as timers armed */
    bool armed;              /* claimed and not yet run */
    uint64_t arms;
};
void lb_turn_run(lb_turn *t);

/* A peer's loop as the link drives it: run(loop) runs it until stop(loop),
 * which the link calls from a turn when the workload is done. Every
 * peer's loop also watches one idle socket (lb_idle_open), so that its
 * I/O check is real (libuv skips epoll when it watches no fd): the rows
 * then differ only in when they check. */
typedef struct lb_loop {
    void (*run)(void *loop);
    void (*stop)(void *loop);
    void *loop;
} lb_loop;

/* Measures both workloads over a loopback made of three turns (delivery to
 * the client, to the server, and the server's refresh): p->reps runs each,
 * every run ending when the workload is done. */
int lb_link_measure(const lb_params *p, lb_turn *to_client, lb_turn *to_server,
                    lb_turn *refresh, const lb_loop *loop, lb_result *out);

/* A socketpair whose fds[0] a row's loop watches and nobody writes;
 * 0 or a negative errno. lb_idle_close closes both ends. */
int lb_idle_open(int fds[2]);
void lb_idle_close(int fds[2]);

#endif /* LAB_LOOPBACK_H */
