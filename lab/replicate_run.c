/* The `replicate` scenario's runs (lab/replicate.h; the driver is
 * lab/replicate.c). The per-record yield: a catch-up sender
 * on a source loop streams a log to replicas over real sockets while the
 * same loop answers pings and publishes its progress.
 *
 * The source (the calling thread, one lull loop) holds a log of N records
 * of ~500 bytes in 10-record transactions, generated in memory, and listens
 * on a Unix socket (--tcp: TCP on 127.0.0.1). P replicas (1 and 4), each a
 * thread with its own loop, connect, say hello, and apply what arrives:
 * each record's checksum and sequence are verified. A ping client on its
 * own thread sends a small request every 1 ms that the source echoes, and
 * records every round trip. When every replica and the pinger are there,
 * the source starts one producer per replica at cursor 0 and a progress
 * timer (a cursor publication every 10 ms) and measures its own thread CPU
 * until every replica acknowledged the end of the log. With two CPUs or
 * more, the source and the pinger are pinned to one and the replicas to
 * another, so that the source's figures are not its replicas' preemptions;
 * its involuntary context switches are reported beside them. A baseline
 * run with no replicas gives the pinger's round trip on an idle source.
 *
 * Modes (the producer's code is the same; only where it yields differs):
 *   per-record       a yield after every record, taken as a full loop turn
 *                    with I/O polled in between (quantum of 1 ns): what the
 *                    per-record yield paid; the "before"
 *   per-record post  a posted continuation after every record, on the
 *                    shared quantum: lull's turns are cheap, so this shows
 *                    what a turn costs when it does not poll
 *   budget shared    lull_loop_should_yield per record, 0.5 ms quantum
 *   budget dedicated the same, 2 ms quantum; the "after"
 * Records are sent zero-copy (a lull_frame pointing into the log) through
 * the frame interface; the stream batches them into writev calls.
 *
 * A skip variant filters out 99% of the records, deciding from the
 * record's payload (a filter reads what it filters), so the run is mostly
 * skipped records: the progress timer must still fire on time, which it
 * does only because skips count against the quantum too.
 *
 * Figures: sender CPU (thread CPU time, user + sys), CPU per entry sent (a
 * record to one replica), records/s per replica, total time, ping round
 * trip p50/p99/max during catch-up, progress-timer lateness p99, writev
 * calls and bytes per writev. Then the write cost of one lull_endpoint_send per
 * record and the 64-byte ping-pong (lab/replicate_write.c).
 *
 * lab_replicate_soak (lab/soak.h, for `lull-lab soak`) is one run at
 * random sizes (records, record size, transaction, replicas, mode, skip,
 * transport); the replicas' checks are the scenario's own. */
#include "replicate.h"
#include "soak.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

const char *const rep_mode_key[MODES] = {"per_record", "per_record_post",
                                         "budget_shared", "budget_dedicated"};
const char *const rep_mode_label[MODES] = {
    "per-record turn (before)", "per-record post", "budget, shared 0.5 ms",
    "budget, dedicated 2 ms"};

enum { CTL_HELLO = 1, CTL_END = 2, CTL_ACK = 3, CTL_PING = 4 };
enum { KIND_REPLICA = 1, KIND_PINGER = 2 };
#define CTL_LEN 16

/* A record's head; the payload fills the rest of record_size. */
typedef struct rec_head {
    uint64_t seq;
    uint32_t txn;
    uint32_t len; /* payload bytes */
    uint64_t sum; /* checksum of the payload */
} rec_head;

/* Frames one sender may have in flight: records written inside
 * lull_endpoint_send are released at the next flush point, so the ring must
 * cover what a 2 ms slice sends (about 10,000 records at 0.2 us each) with room
 * left. */
#define RING 16384
/* Ping and progress-sample arrays: enough for a 20-minute run. */
#define SAMPLES_CAP (1200 * 1000)

/* ---------------------------------------------------------------- log */

static uint64_t payload_sum(const unsigned char *p, size_t n) {
    uint64_t s = 0x243f6a8885a308d3ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        s = (s ^ w) * 0x100000001b3ull;
    }
    for (; i < n; i++)
        s = (s ^ p[i]) * 0x100000001b3ull;
    return s;
}

/* The skip filter: decides from the payload, as a filter that must decode
 * a record to know whether a replica wants it. */
static bool keep_record(const unsigned char *rec, int size) {
    return payload_sum(rec + sizeof(rec_head),
                       (size_t)size - sizeof(rec_head)) %
               SKIP_KEEP ==
           0;
}

int rep_log_make(log_store *l, const params *p) {
    l->records = p->records;
    l->size = p->record_size;
    l->bytes = malloc((size_t)p->records * (size_t)p->record_size);
    if (!l->bytes) return -ENOMEM;
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    l->kept = 0;
    for (int i = 0; i < p->records; i++) {
        unsigned char *r = l->bytes + (size_t)i * (size_t)p->record_size;
        size_t len = (size_t)p->record_size - sizeof(rec_head);
        for (size_t k = 0; k < len; k += 8) {
            uint64_t v = lab_rand(&seed);
            memcpy(r + sizeof(rec_head) + k, &v, len - k < 8 ? len - k : 8);
        }
        rec_head h = {.seq = (uint64_t)i,
                      .txn = (uint32_t)(i / p->txn),
                      .len = (uint32_t)len,
                      .sum = payload_sum(r + sizeof(rec_head), len)};
        memcpy(r, &h, sizeof h);
        if (keep_record(r, p->record_size)) l->kept++;
    }
    return 0;
}

/* -------------------------------------------------------- control frames */

static void ctl_pack(unsigned char *b, uint32_t type, uint32_t a, uint64_t v) {
    memset(b, 0, CTL_LEN);
    memcpy(b, &type, 4);
    memcpy(b + 4, &a, 4);
    memcpy(b + 8, &v, 8);
}

static uint32_t ctl_type(const void *b) {
    uint32_t t;
    memcpy(&t, b, 4);
    return t;
}

static void ctl_send(lull_endpoint *ep, uint32_t type, uint32_t a, uint64_t v) {
    unsigned char b[CTL_LEN];
    ctl_pack(b, type, a, v);
    lull_endpoint_send_copy(ep, b, CTL_LEN);
}

/* ----------------------------------------------------------- one run */

typedef struct run run;

typedef struct ring_frame {
    lull_frame frame;
    struct conn *conn;
} ring_frame;

/* One accepted connection at the source: a replica's sender, or the
 * pinger's, told apart by the hello. */
typedef struct conn {
    lull_stream s;
    lull_task task; /* the producer */
    run *run;
    int kind;
    int id;
    int cursor; /* next record to look at */
    uint64_t sent;
    ring_frame *ring;
    uint64_t ring_next;
    bool starved;  /* waits for a ring frame: its release posts us */
    bool finished; /* the END marker is queued */
    bool acked;
    lull_frame end;
    unsigned char end_bytes[CTL_LEN];
} conn;

struct run {
    const params *p;
    const log_store *log;
    int mode;
    int replicas;
    bool skip;
    lull_loop *loop;
    lull_server srv;
    char path[96];
    int port;
    conn *conns; /* replicas + 1 */
    int accepted;
    int hellos;
    int acks;
    lull_timer progress;
    lull_timer idle_end; /* the idle baseline (no replicas) ends here */
    double *late;        /* progress-timer lateness samples, us */
    size_t nlate;
    uint64_t t_start, t_end, cpu_start, cpu_end;
    uint64_t preempt_start, preempt_end; /* involuntary switches */
    uint64_t published; /* the cursor the progress timer publishes */
    int failed;         /* a negative errno, or a verification failure */
};

static void ring_release(lull_frame *f) {
    conn *c = ((ring_frame *)(void *)f)->conn;
    if (c->starved) {
        c->starved = false;
        lull_task_post(c->run->loop, &c->task);
    }
}

static bool per_record(const run *r) {
    return r->mode == M_PER_RECORD || r->mode == M_PER_RECORD_POST;
}

/* The catch-up sender: one record (sent or skipped) per step. */
static void produce(lull_task *t) {
    conn *c = LULL_CONTAINER_OF(t, conn, task);
    run *r = c->run;
    const log_store *log = r->log;
    while (c->cursor < log->records) {
        if (!lull_endpoint_writable(&c->s.ep)) return; /* on_drain posts us */
        const unsigned char *rec =
            log->bytes + (size_t)c->cursor * (size_t)log->size;
        if (!r->skip || keep_record(rec, log->size)) {
            ring_frame *rf = &c->ring[c->ring_next % RING];
            if (rf->frame.in_flight) {
                c->starved = true;
                return;
            }
            c->ring_next++;
            rf->frame.bytes = rec;
            rf->frame.len = (size_t)log->size;
            if (lull_endpoint_send(&c->s.ep, &rf->frame) < 0) return;
            c->sent++;
        }
        c->cursor++;
        if (per_record(r) || lull_loop_should_yield(r->loop)) {
            lull_task_post(r->loop, t);
            return;
        }
    }
    if (!c->finished) {
        c->finished = true;
        ctl_pack(c->end_bytes, CTL_END, 0, c->sent);
        c->end = (lull_frame){.bytes = c->end_bytes, .len = CTL_LEN};
        lull_endpoint_send(&c->s.ep, &c->end);
    }
}

static void on_drain(lull_endpoint *ep) {
    conn *c = LULL_CONTAINER_OF(ep, conn, s.ep);
    if (c->kind == KIND_REPLICA && !c->finished)
        lull_task_post(c->run->loop, &c->task);
}

static void progress_tick(lull_timer *t) {
    run *r = LULL_CONTAINER_OF(t, run, progress);
    uint64_t now = lull_loop_now_exact(r->loop);
    uint64_t due = lull_timer_deadline(t) - r->p->progress_ns;
    if (r->nlate < SAMPLES_CAP)
        r->late[r->nlate++] = now > due ? (double)(now - due) / 1e3 : 0;
    /* The publication: the slowest replica's cursor. */
    uint64_t min = UINT64_MAX;
    for (int i = 0; i < r->replicas + 1; i++)
        if (r->conns[i].kind == KIND_REPLICA &&
            (uint64_t)r->conns[i].cursor < min)
            min = (uint64_t)r->conns[i].cursor;
    r->published = min;
}

static uint64_t involuntary_switches(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0) return 0;
    return (uint64_t)ru.ru_nivcsw;
}

static void start_catchup(run *r) {
    r->preempt_start = involuntary_switches();
    r->t_start = lab_now_ns();
    r->cpu_start = lab_thread_cpu_ns();
    for (int i = 0; i < r->replicas + 1; i++) {
        conn *c = &r->conns[i];
        c->s.writes = 0;
        c->s.bytes_written = 0;
        if (c->kind == KIND_REPLICA) lull_task_post(r->loop, &c->task);
    }
    lull_timer_start(&r->progress, r->p->progress_ns, r->p->progress_ns);
    if (r->replicas == 0) lull_timer_start(&r->idle_end, r->p->idle_ns, 0);
}

static void finish_catchup(run *r) {
    r->cpu_end = lab_thread_cpu_ns();
    r->t_end = lab_now_ns();
    r->preempt_end = involuntary_switches();
    lull_timer_stop(&r->progress);
    lull_server_close(&r->srv);
    for (int i = 0; i < r->replicas + 1; i++)
        lull_endpoint_close(&r->conns[i].s.ep, 0);
}

static void idle_over(lull_timer *t) {
    finish_catchup(LULL_CONTAINER_OF(t, run, idle_end));
}

static void source_frame(lull_endpoint *ep, const void *b, size_t n) {
    conn *c = LULL_CONTAINER_OF(ep, conn, s.ep);
    run *r = c->run;
    if (n != CTL_LEN) {
        r->failed = -EPROTO;
        return;
    }
    uint32_t type = ctl_type(b), a;
    memcpy(&a, (const char *)b + 4, 4);
    if (type == CTL_PING) {
        lull_endpoint_send_copy(ep, b, n); /* the answer */
    } else if (type == CTL_HELLO) {
        c->kind = (int)a;
        if (++r->hellos == r->replicas + 1) start_catchup(r);
    } else if (type == CTL_ACK && !c->acked) {
        c->acked = true;
        if (++r->acks == r->replicas) finish_catchup(r);
    }
}

static void source_close(lull_endpoint *ep, int reason) {
    conn *c = LULL_CONTAINER_OF(ep, conn, s.ep);
    if (!c->acked && c->kind == KIND_REPLICA)
        c->run->failed = reason ? reason : -EPIPE;
}

static void source_accept(lull_server *srv) {
    run *r = LULL_CONTAINER_OF(srv, run, srv);
    if (r->accepted == r->replicas + 1) return; /* not ours: closed */
    conn *c = &r->conns[r->accepted];
    lull_stream_options o = {0};
    if (lull_server_accept(srv, &c->s, &o) < 0) {
        r->failed = -EIO;
        return;
    }
    c->run = r;
    c->id = r->accepted++;
    lull_task_init(&c->task, produce);
    for (int k = 0; k < RING; k++) {
        c->ring[k].frame = (lull_frame){.release = ring_release};
        c->ring[k].conn = c;
    }
    lull_endpoint_set_callbacks(&c->s.ep, source_frame, on_drain, source_close);
}

/* ------------------------------------------------------------ replicas */

typedef struct replica {
    pthread_t thread;
    run *run;
    lull_loop *loop;
    lull_stream s;
    uint64_t expect; /* the next sequence number it may accept */
    uint64_t got;
    uint64_t bad;
    bool kind_pinger;
    int cpu; /* pinned to it, or -1 */
    /* pinger */
    lull_timer tick;
    double *rtt;  /* us */
    uint64_t *at; /* send time, ns */
    size_t nrtt;
    int connect_status;
} replica;

static void replica_frame(lull_endpoint *ep, const void *b, size_t n) {
    replica *rp = LULL_CONTAINER_OF(ep, replica, s.ep);
    const run *r = rp->run;
    if (n == CTL_LEN) {
        if (ctl_type(b) == CTL_END) ctl_send(ep, CTL_ACK, 0, rp->got);
        return;
    }
    const unsigned char *rec = b;
    rec_head h;
    memcpy(&h, rec, sizeof h);
    bool ok = n == (size_t)r->log->size && h.len == n - sizeof h &&
              h.seq >= rp->expect &&
              payload_sum(rec + sizeof h, h.len) == h.sum;
    if (ok && !r->skip) ok = h.seq == rp->expect;
    if (ok && r->skip) ok = keep_record(rec, (int)n);
    if (!ok) rp->bad++;
    rp->expect = h.seq + 1;
    rp->got++;
}

static void pinger_frame(lull_endpoint *ep, const void *b, size_t n) {
    replica *rp = LULL_CONTAINER_OF(ep, replica, s.ep);
    uint64_t now = lab_now_ns(), sent;
    if (n != CTL_LEN || ctl_type(b) != CTL_PING) return;
    memcpy(&sent, (const char *)b + 8, 8);
    if (rp->nrtt < SAMPLES_CAP) {
        rp->at[rp->nrtt] = sent;
        rp->rtt[rp->nrtt++] = (double)(now - sent) / 1e3;
    }
}

static void pinger_tick(lull_timer *t) {
    replica *rp = LULL_CONTAINER_OF(t, replica, tick);
    ctl_send(&rp->s.ep, CTL_PING, 0, lab_now_ns());
}

static void replica_close(lull_endpoint *ep, int reason) {
    (void)reason;
    replica *rp = LULL_CONTAINER_OF(ep, replica, s.ep);
    if (rp->kind_pinger) lull_timer_stop(&rp->tick);
}

static void replica_connected(lull_stream *s, int status) {
    replica *rp = LULL_CONTAINER_OF(s, replica, s);
    rp->connect_status = status;
    if (status < 0) {
        if (rp->kind_pinger) lull_timer_stop(&rp->tick);
        return;
    }
    lull_endpoint_set_callbacks(&s->ep,
                                rp->kind_pinger ? pinger_frame : replica_frame,
                                NULL, replica_close);
    ctl_send(&s->ep, CTL_HELLO, rp->kind_pinger ? KIND_PINGER : KIND_REPLICA,
             0);
    if (rp->kind_pinger)
        lull_timer_start(&rp->tick, rp->run->p->ping_ns, rp->run->p->ping_ns);
}

static void *replica_main(void *arg) {
    replica *rp = arg;
    const run *r = rp->run;
    if (rp->cpu >= 0) lab_pin_cpu(rp->cpu);
    lull_loop_options lo = {.role = LULL_ROLE_DEDICATED};
    if (lull_loop_new(&rp->loop, &lo) < 0) {
        rp->connect_status = -ENOMEM;
        return NULL;
    }
    /* A big read buffer: a replica takes what the socket holds in one go. */
    lull_stream_options o = {.read_size = 256 << 10};
    if (rp->kind_pinger) lull_timer_init(rp->loop, &rp->tick, pinger_tick);
    int rc = r->p->tcp ? lull_stream_connect_tcp(rp->loop, &rp->s, "127.0.0.1",
                                                 r->port, &o, replica_connected)
                       : lull_stream_connect_unix(rp->loop, &rp->s, r->path, &o,
                                                  replica_connected);
    if (rc < 0) {
        rp->connect_status = rc;
    } else {
        lull_loop_run(rp->loop, LULL_RUN_DEFAULT);
    }
    lull_loop_free(rp->loop);
    return NULL;
}

/* ------------------------------------------------------------- a run */

static int loop_for_mode(int mode, lull_loop **loop) {
    lull_loop_options o = {0};
    switch (mode) {
    case M_PER_RECORD:
        /* Every callback spends the slice: each continuation is a loop
         * turn with a poll before it, as the per-record yield's were. */
        o.quantum_ns = 1;
        break;
    case M_BUDGET_DEDICATED:
        o.role = LULL_ROLE_DEDICATED;
        break;
    default:
        o.role = LULL_ROLE_SHARED;
    }
    return lull_loop_new(loop, &o);
}

/* The next CPU this process may use after `first`, or -1. */
static int second_cpu(int first) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
    for (int cpu = first + 1; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &set)) return cpu;
    return -1;
}

int rep_run_once(const params *p, const log_store *log, int mode, int replicas,
                 bool skip, int serial, result *out) {
    memset(out, 0, sizeof *out);
    run *r = calloc(1, sizeof *r);
    replica *reps = calloc((size_t)replicas + 1, sizeof *reps);
    if (!r || !reps) {
        free(r);
        free(reps);
        return -ENOMEM;
    }
    r->p = p;
    r->log = log;
    r->mode = mode;
    r->replicas = replicas;
    r->skip = skip;
    r->conns = calloc((size_t)replicas + 1, sizeof *r->conns);
    r->late = malloc(SAMPLES_CAP * sizeof *r->late);
    int rc = r->conns && r->late ? 0 : -ENOMEM;
    for (int i = 0; rc == 0 && i < replicas + 1; i++) {
        r->conns[i].ring = calloc(RING, sizeof(ring_frame));
        if (!r->conns[i].ring) rc = -ENOMEM;
    }
    reps[replicas].kind_pinger = true;
    reps[replicas].rtt = malloc(SAMPLES_CAP * sizeof(double));
    reps[replicas].at = malloc(SAMPLES_CAP * sizeof(uint64_t));
    if (!reps[replicas].rtt || !reps[replicas].at) rc = -ENOMEM;
    if (rc == 0) rc = loop_for_mode(mode, &r->loop);
    if (rc == 0) {
        lull_timer_init(r->loop, &r->progress, progress_tick);
        lull_timer_init(r->loop, &r->idle_end, idle_over);
        if (p->tcp) {
            rc = lull_server_listen_tcp(r->loop, &r->srv, "127.0.0.1", 0, 64,
                                        source_accept);
            if (rc == 0) r->port = lull_server_port(&r->srv);
        } else {
            snprintf(r->path, sizeof r->path, "@lull-lab-replicate-%d-%d",
                     (int)getpid(), serial);
            rc = lull_server_listen_unix(r->loop, &r->srv, r->path, 64,
                                         source_accept);
        }
    }
    /* The source and the pinger share one CPU, the replicas the other: the
     * source's figures are then its own, not its replicas' preemptions. */
    cpu_set_t saved;
    bool pinned = false;
    int c0 = lab_first_cpu(), c1 = second_cpu(c0);
    if (c1 >= 0 &&
        pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) == 0)
        pinned = lab_pin_cpu(c0) == 0;
    int started = 0;
    for (int i = 0; rc == 0 && i < replicas + 1; i++) {
        reps[i].run = r;
        reps[i].cpu = !pinned ? -1 : reps[i].kind_pinger ? c0 : c1;
        if (pthread_create(&reps[i].thread, NULL, replica_main, &reps[i]) != 0)
            rc = -EAGAIN;
        else
            started++;
    }
    if (rc == 0) rc = lull_loop_run(r->loop, LULL_RUN_DEFAULT);
    if (rc < 0 && r->loop) {
        /* Could not start: close what is open so the threads end, and
         * run the close callbacks (later turns) so the loop can be freed. */
        lull_server_close(&r->srv);
        for (int i = 0; i < r->accepted; i++)
            lull_endpoint_close(&r->conns[i].s.ep, 0);
        lull_loop_settle(r->loop);
    }
    for (int i = 0; i < started; i++)
        pthread_join(reps[i].thread, NULL);
    if (pinned) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);

    if (rc == 0 && (r->failed || r->acks != replicas))
        rc = r->failed ? r->failed : -EPIPE;
    for (int i = 0; rc == 0 && i < replicas + 1; i++)
        if (reps[i].connect_status < 0) rc = reps[i].connect_status;
    if (rc == 0) {
        uint64_t entries = 0, writes = 0, bytes = 0;
        for (int i = 0; i < replicas + 1; i++) {
            conn *c = &r->conns[i];
            if (c->kind != KIND_REPLICA) continue;
            entries += c->sent;
            writes += c->s.writes;
            bytes += c->s.bytes_written;
        }
        uint64_t want = (uint64_t)(skip ? log->kept : log->records);
        for (int i = 0; i < replicas; i++) {
            if ((reps[i].bad || reps[i].got != want) && !out->bad)
                snprintf(out->why, sizeof out->why,
                         "replica %d: %" PRIu64 " records received of %" PRIu64
                         ", %" PRIu64 " out of sequence or corrupt",
                         i, reps[i].got, want, reps[i].bad);
            out->bad += (int)reps[i].bad;
            if (reps[i].got != want) out->bad++;
            out->received += reps[i].got - reps[i].bad;
        }
        out->entries = entries;
        out->cpu_s = (double)(r->cpu_end - r->cpu_start) / 1e9;
        out->total_s = (double)(r->t_end - r->t_start) / 1e9;
        out->cpu_per_entry_us = entries ? (double)(r->cpu_end - r->cpu_start) /
                                              1e3 / (double)entries
                                        : 0;
        out->rate = out->total_s > 0 ? (double)log->records / out->total_s : 0;
        out->writes_per_record = entries ? (double)writes / (double)entries : 0;
        out->bytes_per_writev = writes ? (double)bytes / (double)writes : 0;
        out->preemptions = (double)(r->preempt_end - r->preempt_start);
        /* Pings sent during the catch-up only. */
        replica *pg = &reps[replicas];
        size_t k = 0;
        for (size_t i = 0; i < pg->nrtt; i++)
            if (pg->at[i] >= r->t_start && pg->at[i] < r->t_end)
                pg->rtt[k++] = pg->rtt[i];
        out->pings = k;
        out->ping_p50 = lab_percentile(pg->rtt, k, 0.5);
        out->ping_p99 = lab_percentile(pg->rtt, k, 0.99);
        out->ping_max = lab_percentile(pg->rtt, k, 1.0);
        out->late_p99 = lab_percentile(r->late, r->nlate, 0.99);
    }
    if (r->loop) {
        lull_server_close(&r->srv);
        lull_loop_free(r->loop);
    }
    for (int i = 0; i < replicas + 1; i++)
        if (r->conns) free(r->conns[i].ring);
    free(reps[replicas].rtt);
    free(reps[replicas].at);
    free(r->conns);
    free(r->late);
    free(r);
    free(reps);
    return rc;
}

void rep_set_params(const lab_options *opts, params *p) {
    memset(p, 0, sizeof *p);
    p->records = opts->quick ? 50000 : 1000000;
    p->txn = 10;
    p->record_size = 500;
    p->replicas[0] = 1;
    p->replicas[1] = 4;
    p->rounds = lab_rounds(opts, 3, 1);
    p->tcp = opts->tcp;
    p->ping_ns = 1 * MS;
    /* Quick sizes catch up in under 10 ms (the skip variant in ~9): a
     * period that long would leave the lateness with no sample. */
    p->progress_ns = (opts->quick ? 1 : 10) * MS;
    p->idle_ns = (opts->quick ? 300 : 1000) * MS;
}

/* ---------------------------------------------------------------- soak */

/* One soak run (lab/soak.h): the log's length and record size, the
 * replicas, the mode, the skip filter and the transport drawn from *seed;
 * each replica checks every record's sequence number and checksum (the
 * scenario always does) and must receive the whole log, each record once.
 * The log is at most 32 MB. */
int lab_replicate_soak(uint64_t *seed, lab_soak_result *out) {
    static int serial = 1 << 20; /* socket names apart from the scenario's */
    memset(out, 0, sizeof *out);
    params p;
    rep_set_params(&(lab_options){.quick = true}, &p);
    p.record_size = (int)sizeof(rec_head) + (int)(lab_rand(seed) % 4073);
    p.records = 1 + (int)(lab_rand(seed) % 100000);
    if ((uint64_t)p.records * (uint64_t)p.record_size > 32u << 20)
        p.records = (int)((32u << 20) / (unsigned)p.record_size);
    p.txn = 1 + (int)(lab_rand(seed) % 32);
    int replicas = 1 + (int)(lab_rand(seed) % 4);
    int mode = (int)(lab_rand(seed) % MODES);
    bool skip = lab_rand(seed) % 4 == 0;
    p.tcp = lab_rand(seed) % 3 == 0;
    snprintf(out->sizes, sizeof out->sizes,
             "%d records of %d B, %d replicas, %s%s, %s", p.records,
             p.record_size, replicas, rep_mode_key[mode], skip ? " (skip)" : "",
             p.tcp ? "tcp" : "unix");
    log_store log;
    int rc = rep_log_make(&log, &p);
    if (rc < 0) return rc;
    result res;
    rc = rep_run_once(&p, &log, mode, replicas, skip, serial++, &res);
    free(log.bytes);
    if (rc < 0) {
        snprintf(out->why, sizeof out->why, "replicate: the run failed: %s",
                 strerror(-rc));
        return rc == -EPROTO || rc == -EPIPE ? -EPROTO : rc;
    }
    out->verified = res.received;
    if (res.bad) {
        snprintf(out->why, sizeof out->why, "replicate: %s", res.why);
        return -EPROTO;
    }
    return 0;
}
