/* The simulated network (docs/SIMULATION.md): listen, accept and connect
 * between named addresses, connections that are endpoints of the frame
 * interface, and faults drawn from a seed, on a virtual-clock loop.
 *
 * Owns: the network (its generator, its schedule, its servers and live
 * connection ends, the trace), and each connection end's inbox: the
 * peer's frames, linked through the caller's lull_frame structs (no
 * allocation per frame), described by stream positions (bytes since the
 * start): read <= arrived <= sent <= queued. A frame is in the inbox of
 * the end it was sent to from its send until all its bytes were read (or a
 * close dropped it); only then is it released. Sending moves bytes into
 * flight as the window allows (segments cut at sizes the seed picks, each
 * arriving delay + jitter later, never before the one sent before it, and
 * paced by the bandwidth); arriving makes them readable; reading hands
 * them to on_frame, in chunks the seed cuts (LULL_SIMCONN_RAW) or as whole
 * frames (framed: a frame occupies its length plus a 4-byte header on the
 * wire, as on a framed stream, and one over the reader's max_frame closes
 * the reader with -EMSGSIZE). One thread: the loop's.
 *
 * The schedule: every live end has at most one pending event, the earliest
 * of its next arrival, read, partition, break, reset, EOF, connect step or
 * owed close callback; ends are kept in a binary heap by (time, tie), the
 * tie drawn from the seed each time an end is scheduled, so events of
 * different connections due at the same instant run in a seeded order, and
 * each connection's own bytes stay in order by their positions. One lull
 * timer is armed for the earliest event; it runs one event per turn (a
 * zero-delay timer when the next event is due now: by C3, a turn), so
 * nothing arrives inside the call that sent it and each read's callbacks
 * finish before the next event runs.
 *
 * One free path (as the loopback's, src/loopback.c): on_close runs once
 * per end, whoever closed it, as its last callback, once the frames it
 * sent are back with their owners: at once if its peer's inbox holds none,
 * else when that inbox empties (its reads, EOF or close: release_closer).
 * An end with no close callback is the caller's again when
 * lull_endpoint_close returns, and nothing points at it afterwards.
 *
 * Invariants: `other` is mutual and cleared on both ends by the first
 * close; a live end (connecting, open, or owing its close callback) is on
 * the network's list, an end not on it is never touched again; an end is in
 * the heap exactly when next_time() is not NEVER (after every change, via
 * resched); the timer is armed exactly when the heap is not empty (kick).
 *
 * The five rows (README, "The contracts"):
 *   Trigger                 a send, close, shutdown, read pause or resume,
 *                           connect, fault call or heal; the timer
 *   Source of truth         each end's inbox positions, state and fault
 *                           deadlines; the heap orders them
 *   Pending-work predicate  some end's next_time() is not NEVER
 *   Next deadline or retry  the heap's earliest (time, tie)
 *   Quiet condition         no bytes in flight or unread, no fault due, no
 *                           connect or close callback owed: heap empty,
 *                           timer stopped */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "internal.h"

#define NEVER UINT64_MAX
/* A 64 KiB window: a socket buffer's order of magnitude, the default
 * high-water mark, so a sender that fills it is told to wait. */
#define WINDOW_DEFAULT       ((size_t)64 << 10)
#define RESET_WITHIN_DEFAULT ((uint64_t)64 << 10)
/* A framed connection's frame costs its length and a 4-byte header on the
 * wire, as on a framed stream: so an empty frame takes time to travel. */
#define FRAME_HEADER 4
/* The longest read that spans frames, copied into a buffer on the stack;
 * a read within one frame is handed over in place, whatever its length. */
#define SPAN_COPY 4096
/* A segment of the cut that models MTU-sized packets. */
#define MSS 1460

/* lull_simconn.state */
enum {
    ST_CONNECTING = 0x1, /* connect under way: until its callback */
    ST_ANSWERED = 0x2,   /* ... the address answered: `status` at connect_at */
    ST_OPEN = 0x4,       /* connected: reads run */
    ST_PAUSED = 0x8,     /* lull_simconn_read_stop */
    ST_SHUT = 0x10,      /* its write side is shut */
    ST_CLOSED = 0x20,    /* closed, whoever closed it */
    ST_OWED = 0x40,      /* its close callback is owed */
    ST_WAIT = 0x80,      /* ... once its frames leave the peer's inbox */
    ST_LISTED = 0x100,   /* on the network's list */
    ST_RAW = 0x200,      /* LULL_SIMCONN_RAW: reads are chunks */
    ST_PEER_RST = 0x400, /* its pending reset answers its peer's close
                            (close_end), not a fault: a heal keeps it */
};

/* A read running: a close of the end during its callbacks sets `closed`
 * and leaves the inbox it would release here, released after the
 * callback, which may still be reading a frame of it. */
struct lull__simguard {
    bool closed;
    lull_frame *discard;
};
typedef struct lull__simguard simguard;

struct lull_simnet {
    lull_loop *loop;
    lull_timer timer; /* armed for the heap's earliest event */
    uint64_t rng;     /* splitmix64 state */
    lull_simfaults faults;
    bool healed;
    FILE *trace;
    lull_simnet_fn on_event;
    void *arg;
    uint32_t flags; /* LULL_SIMNET_* */
    lull_simnet_stats stats;
    lull_simconn **heap; /* live ends with an event, by (at, tie) */
    uint32_t heap_len, heap_cap;
    lull_simconn *ends; /* live ends, newest first */
    uint32_t nends;
    lull_simserver *servers;
    uint64_t ports;            /* connecting ends named so far */
    bool stepping;             /* an event runs: lull_simnet_free is refused */
    lull_simserver *accepting; /* its on_connection runs; NULL once it
                                  closed inside it (the struct may be gone) */
    lull_simconn *connecting;  /* the connecting end on_connection runs
                                  for; NULL once it closed inside it */
};

/* ------------------------------------------------------------ helpers */

static uint64_t rnd(lull_simnet *net) {
    uint64_t z = (net->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* 0 to n - 1 (0 for n == 0, without a draw). */
static uint64_t below(lull_simnet *net, uint64_t n) {
    return n ? rnd(net) % n : 0;
}

/* True for permille in 1000; no draw for 0, so a perfect network makes no
 * draw for faults it does not have. */
static bool roll(lull_simnet *net, uint32_t permille) {
    return permille && rnd(net) % 1000 < permille;
}

/* 0 to n inclusive: a span of "up to n" (n may be NEVER). */
static uint64_t upto(lull_simnet *net, uint64_t n) {
    return n == NEVER ? rnd(net) : below(net, n + 1);
}

/* Times and byte positions saturate: a fault of UINT64_MAX ns means
 * "never", not a wrap into the past. */
static uint64_t sat_add(uint64_t a, uint64_t b) {
    return a + b < a ? NEVER : a + b;
}

static uint64_t max64(uint64_t a, uint64_t b) {
    return a > b ? a : b;
}

static uint64_t min64(uint64_t a, uint64_t b) {
    return a < b ? a : b;
}

static uint64_t now_of(lull_simnet *net) {
    return lull_loop_now(net->loop);
}

/* "<seconds>.<nanoseconds, 9 digits> " into p (>= 32 bytes); its length.
 * By hand: every event formats one (for the hash, written or not), and
 * snprintf's share of a simulation's time was a tenth. */
static int stamp(char *p, uint64_t now) {
    char digits[20];
    int n = 0, len = 0;
    uint64_t sec = now / 1000000000u, ns = now % 1000000000u;
    do {
        digits[n++] = (char)('0' + sec % 10);
        sec /= 10;
    } while (sec);
    while (n)
        p[len++] = digits[--n];
    p[len++] = '.';
    for (int i = 8; i >= 0; i--) {
        p[len + i] = (char)('0' + ns % 10);
        ns /= 10;
    }
    len += 9;
    p[len++] = ' ';
    return len;
}

static void vtrace(lull_simnet *net, const char *fmt, va_list ap) {
    char line[320];
    int n = stamp(line, now_of(net));
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2) len = sizeof line - 2;
    line[len++] = '\n';
    line[len] = 0;
    uint64_t h = net->stats.trace_hash;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)line[i]) * 0x100000001b3ull;
    net->stats.trace_hash = h;
    if (net->trace) fputs(line, net->trace);
}

__attribute__((format(printf, 2, 3))) static void trace(lull_simnet *net,
                                                        const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vtrace(net, fmt, ap);
    va_end(ap);
}

static lull_simconn *end_of(lull_endpoint *ep) {
    return LULL_CONTAINER_OF(ep, lull_simconn, ep);
}

/* A frame's bytes on the wire towards an end. */
static uint64_t wire(const lull_simconn *to, const lull_frame *f) {
    return f->len + (to->state & ST_RAW ? 0 : FRAME_HEADER);
}

static void release_list(lull_frame *f) {
    while (f) {
        lull_frame *next = f->next;
        lull__frame_release(f);
        f = next;
    }
}

/* ------------------------------------------------------------ schedule */

static bool earlier(const lull_simconn *a, const lull_simconn *b) {
    return a->at < b->at || (a->at == b->at && a->tie < b->tie);
}

static void heap_set(lull_simnet *net, uint32_t i, lull_simconn *c) {
    net->heap[i] = c;
    c->slot = i + 1;
}

static void heap_up(lull_simnet *net, uint32_t i) {
    lull_simconn *c = net->heap[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (!earlier(c, net->heap[parent])) break;
        heap_set(net, i, net->heap[parent]);
        i = parent;
    }
    heap_set(net, i, c);
}

static void heap_down(lull_simnet *net, uint32_t i) {
    lull_simconn *c = net->heap[i];
    for (;;) {
        uint32_t l = 2 * i + 1, best = i;
        lull_simconn *b = c;
        if (l < net->heap_len && earlier(net->heap[l], b)) {
            best = l;
            b = net->heap[l];
        }
        if (l + 1 < net->heap_len && earlier(net->heap[l + 1], b)) {
            best = l + 1;
            b = net->heap[l + 1];
        }
        if (best == i) break;
        heap_set(net, i, b);
        i = best;
    }
    heap_set(net, i, c);
}

static void heap_remove(lull_simnet *net, lull_simconn *c) {
    if (!c->slot) return;
    uint32_t i = c->slot - 1;
    c->slot = 0;
    lull_simconn *last = net->heap[--net->heap_len];
    if (last == c) return;
    heap_set(net, i, last);
    heap_down(net, i);
    heap_up(net, last->slot - 1);
}

/* Room in the heap for every live end, so scheduling never allocates. */
static int heap_reserve(lull_simnet *net, uint32_t ends) {
    if (ends <= net->heap_cap) return 0;
    uint32_t cap = net->heap_cap ? net->heap_cap * 2 : 16;
    while (cap < ends)
        cap *= 2;
    lull_simconn **h = realloc(net->heap, cap * sizeof *h);
    if (!h) return -ENOMEM;
    net->heap = h;
    net->heap_cap = cap;
    return 0;
}

/* The end's next event at t (NEVER: none). An end whose time does not
 * change keeps its place among same-instant events; a new time draws a
 * new tie. */
static void schedule(lull_simnet *net, lull_simconn *c, uint64_t t) {
    if (t == NEVER) {
        heap_remove(net, c);
        return;
    }
    if (c->slot && c->at == t) return;
    c->at = t;
    c->tie = rnd(net);
    if (!c->slot) {
        LULL_ASSERT(net->heap_len < net->heap_cap, "lull: sim heap full");
        heap_set(net, net->heap_len++, c);
        heap_up(net, c->slot - 1);
        return;
    }
    heap_up(net, c->slot - 1);
    heap_down(net, c->slot - 1);
}

/* Arms the timer for the earliest event, or stops it. */
static void kick(lull_simnet *net) {
    if (!net->heap_len) {
        lull_timer_stop(&net->timer);
        return;
    }
    uint64_t t = net->heap[0]->at, now = now_of(net);
    if (lull_timer_active(&net->timer)) {
        uint64_t armed = lull_timer_deadline(&net->timer);
        if (armed == 0 && t <= now) return; /* a turn is queued */
        if (armed == t && t > now) return;
    }
    lull_timer_start(&net->timer, t > now ? t - now : 0, 0);
}

/* ------------------------------------------------------------ inboxes */

static bool in_raw(const lull_simconn *c) {
    return c->state & ST_RAW;
}

/* Something the end may read now: bytes (raw), or a whole frame. */
static bool readable(const lull_simconn *c) {
    const lull__simdir *d = &c->in;
    if (in_raw(c)) return d->arrived > d->read;
    return d->head && d->head_pos + wire(c, d->head) <= d->arrived;
}

/* The head frame was read to its end (raw: an empty frame, or one read
 * in an earlier chunk): it goes back to its owner. */
static bool head_done(const lull_simconn *c) {
    const lull__simdir *d = &c->in;
    return d->head && d->head_pos + wire(c, d->head) <= d->read &&
           d->head != d->tx;
}

/* Detaches the frames read to their end. */
static lull_frame *take_done(lull_simconn *c) {
    lull__simdir *d = &c->in;
    lull_frame *first = NULL, **link = &first;
    while (d->head && d->head != d->tx &&
           d->head_pos + wire(c, d->head) <= d->read) {
        lull_frame *f = d->head;
        d->head_pos += wire(c, f);
        d->head = f->next;
        *link = f;
        link = &f->next;
    }
    *link = NULL;
    return first;
}

/* Detaches every frame of the inbox. */
static lull_frame *take_all(lull__simdir *d) {
    lull_frame *all = d->head;
    d->head = d->tail = d->tx = NULL;
    d->seg_len = 0;
    d->head_pos = d->tx_pos = d->read = d->arrived = d->sent = d->queued;
    return all;
}

/* When the reset fires: once its segment arrived, after the bytes
 * before it were read (or at once for a reader that has stopped: a
 * reset drops what it did not read). */
static uint64_t reset_time(const lull_simconn *c) {
    const lull__simdir *d = &c->in;
    if (d->rst_at == NEVER) return NEVER;
    if (d->read != d->reset_at && !(c->state & ST_PAUSED)) return NEVER;
    return max64(d->rst_at, d->hold_until);
}

static uint64_t next_time(lull_simnet *net, const lull_simconn *c) {
    uint32_t st = c->state;
    if (st & ST_CONNECTING) return c->connect_at;
    if (st & ST_CLOSED)
        return (st & (ST_OWED | ST_WAIT)) == ST_OWED ? now_of(net) : NEVER;
    const lull__simdir *d = &c->in;
    uint64_t now = now_of(net);
    uint64_t t = min64(c->partition_at, c->break_at);
    if (d->seg_len) t = min64(t, max64(d->seg_at[d->seg_head], d->hold_until));
    t = min64(t, reset_time(c));
    if (!(st & ST_PAUSED)) {
        if (readable(c))
            t = min64(t, max64(now, d->read_at));
        else if (head_done(c) || (d->eof && d->read == d->queued))
            t = now;
    }
    return t;
}

static void resched(lull_simnet *net, lull_simconn *c) {
    schedule(net, c, next_time(net, c));
}

/* Segments whose time came are readable, unless a partition holds
 * them. */
static void arrive(lull_simnet *net, lull__simdir *d) {
    uint64_t now = now_of(net);
    if (now < d->hold_until) return;
    while (d->seg_len && d->seg_at[d->seg_head] <= now) {
        /* Due before the partition's end: it held these bytes. */
        if (d->seg_at[d->seg_head] < d->hold_until)
            net->stats.held += d->seg_end[d->seg_head] - d->arrived;
        d->arrived = d->seg_end[d->seg_head];
        d->seg_head = (uint8_t)((d->seg_head + 1) % LULL__SIM_SEGS);
        d->seg_len--;
    }
}

/* How much of `avail` bytes the next raw segment carries: all, an
 * MTU-sized packet, or a cut anywhere (down to a byte), as the seed
 * says. */
static uint64_t cut(lull_simnet *net, uint64_t avail) {
    switch (rnd(net) % 4) {
    case 0:
        return avail;
    case 1:
        return min64(avail, MSS);
    case 2:
        return 1 + below(net, avail);
    default:
        return min64(avail, 1 + below(net, 16));
    }
}

/* Moves tx past the frames wholly sent (and, raw, the empty ones at the
 * sent position: they carry nothing). */
static void advance_tx(lull_simconn *to) {
    lull__simdir *d = &to->in;
    while (d->tx && d->tx_pos + wire(to, d->tx) <= d->sent) {
        d->tx_pos += wire(to, d->tx);
        d->tx = d->tx->next;
    }
}

/* The time n bytes occupy the link at its bandwidth (NEVER past 2^64 ns:
 * a bandwidth of a byte per second carries 18 GB in that). */
static uint64_t busy_ns(const lull__simdir *d, uint64_t n) {
    if (!d->bandwidth) return 0;
    unsigned __int128 t = (unsigned __int128)n * 1000000000u / d->bandwidth;
    return t > NEVER ? NEVER : (uint64_t)t;
}

/* Puts the sender's queued bytes to `to` in flight, as far as the window
 * and the segments in flight allow, up to the reset's byte. */
static void send_segments(lull_simnet *net, lull_simconn *to) {
    lull__simdir *d = &to->in;
    uint64_t now = now_of(net);
    bool raw = in_raw(to);
    while (d->sent < d->queued && d->seg_len < LULL__SIM_SEGS &&
           d->rst_at == NEVER) {
        uint64_t in_flight = d->sent - d->read;
        uint64_t room = d->window > in_flight ? d->window - in_flight : 0;
        uint64_t n;
        if (raw) {
            if (!room) break;
            n = cut(net, min64(room, d->queued - d->sent));
        } else {
            /* Whole frames; one longer than the window goes alone. */
            n = wire(to, d->tx);
            if (n > room && in_flight) break;
        }
        bool rst = d->reset_at != NEVER && d->sent + n >= d->reset_at;
        if (rst) {
            /* Framed, the frame holding the reset's byte never goes: the
             * reset comes where it would have started. */
            if (!raw && d->sent + n > d->reset_at) d->reset_at = d->sent;
            n = d->reset_at - d->sent;
        }
        uint64_t start = max64(now, d->link_free);
        uint64_t done = sat_add(start, busy_ns(d, n));
        d->link_free = done;
        uint64_t at =
            sat_add(sat_add(done, d->delay_ns), upto(net, d->jitter_ns));
        if (at < d->last_arrival) at = d->last_arrival;
        d->last_arrival = at;
        if (n) {
            uint8_t i = (uint8_t)((d->seg_head + d->seg_len) % LULL__SIM_SEGS);
            d->seg_at[i] = at;
            d->seg_end[i] = d->sent + n;
            d->seg_len++;
            d->sent += n;
            net->stats.segments++;
            net->stats.bytes += n;
        }
        advance_tx(to);
        if (rst) {
            d->rst_at = at;
            break;
        }
    }
    advance_tx(to);
}

/* Appends a frame the peer sent to `to`'s inbox and sends what can go. */
static void inbox_append(lull_simnet *net, lull_simconn *to, lull_frame *f) {
    lull__simdir *d = &to->in;
    f->next = NULL;
    if (d->head)
        d->tail->next = f;
    else {
        d->head = f;
        d->head_pos = d->queued;
    }
    d->tail = f;
    if (!d->tx) {
        d->tx = f;
        d->tx_pos = d->queued;
    }
    d->queued += wire(to, f);
    send_segments(net, to);
}

/* ------------------------------------------------------------ closing */

static void list_remove(lull_simnet *net, lull_simconn *c) {
    if (!(c->state & ST_LISTED)) return;
    c->state &= ~ST_LISTED;
    if (c->net_prev)
        c->net_prev->net_next = c->net_next;
    else
        net->ends = c->net_next;
    if (c->net_next) c->net_next->net_prev = c->net_prev;
    lull__registry_remove(&net->loop->sims, c);
    net->nends--;
    net->loop->handles--;
}

/* This end's inbox is empty for good: the closed sender waiting for its
 * frames to be read or dropped gets its close callback. */
static void release_closer(lull_simnet *net, lull_simconn *c) {
    lull_simconn *closer = c->in.closer;
    if (!closer) return;
    c->in.closer = NULL;
    closer->state &= ~ST_WAIT;
    resched(net, closer);
}

/* Closes c without running any callback and returns the frames to
 * release: its inbox, and of the frames it sent, those that never left
 * (with `flush`, a socket's close: what the window takes still goes, the
 * rest is dropped; without, a reset: nothing more goes). The peer reads
 * what is in flight, then EOF. c's close callback is owed when `owe`. */
static lull_frame *close_end(lull_simnet *net, lull_simconn *c, int reason,
                             bool owe, bool flush) {
    simguard *g = c->guard;
    c->guard = NULL;
    if (net->connecting == c) {
        /* Closed inside the on_connection its connect runs: nothing is
         * waiting there any more for an accept to take. */
        net->connecting = NULL;
        if (net->accepting) net->accepting->pending = NULL;
    }
    c->ep.flags |= LULL__EP_CLOSED | LULL__EP_PEER_GONE;
    c->ep.queued = 0;
    c->state =
        (c->state & ~(ST_CONNECTING | ST_ANSWERED | ST_OPEN)) | ST_CLOSED;
    c->partition_at = c->break_at = NEVER;
    lull_frame *drop = take_all(&c->in);
    bool unread = drop != NULL; /* the peer's bytes, dropped unread */
    release_closer(net, c);
    /* Frames sent before the connect ended never left. */
    if (c->early) {
        c->early_tail->next = drop;
        drop = c->early;
        c->early = c->early_tail = NULL;
    }
    lull_simconn *p = c->other;
    c->other = NULL;
    if (p) {
        p->other = NULL;
        /* p waits for a drain (not reading, its output full) that its
         * peer's close now rules out: below. */
        bool waiting = p->ep.high_water && p->ep.queued >= p->ep.high_water;
        lull__endpoint_peer_gone(&p->ep);
        lull__simdir *d = &p->in;
        if (flush) send_segments(net, p);
        /* What did not leave is dropped: from the first frame not wholly
         * sent (kept when part of it left: EOF releases it). */
        lull_frame *from = NULL;
        if (d->tx) from = d->tx_pos < d->sent ? d->tx->next : d->tx;
        if (from) {
            lull_frame *prev = NULL;
            for (lull_frame *f = d->head; f != from; f = f->next)
                prev = f;
            if (prev)
                prev->next = NULL;
            else
                d->head = NULL;
            d->tail = prev;
            lull_frame *last = from;
            while (last->next)
                last = last->next;
            last->next = drop;
            drop = from;
        }
        d->tx = NULL;
        d->queued = d->sent;
        if (!flush) d->reset_at = d->rst_at = NEVER;
        if ((unread || waiting) && (p->state & ST_PAUSED)) {
            /* A socket closed with its peer's bytes unread answers them
             * with a reset, and the peer's write of what it still has
             * queued fails: a peer that is not reading (output full,
             * waiting for a drain that can no longer come) learns of the
             * close that way, where it would never read the EOF. It
             * fails now if it is still not reading when the reset comes;
             * one that reads again first reads what came, then EOF. The
             * same for a peer whose bytes were all read in the call that
             * closed (a socket's would drain, its writes done; here the
             * drain is ruled out with the peer gone): reset rather than
             * left waiting for good. */
            d->reset_at = NEVER;
            d->rst_at = now_of(net);
            p->state |= ST_PEER_RST;
        }
        d->eof = true;
        if (owe && d->head) {
            d->closer = c;
            c->state |= ST_WAIT;
        }
        resched(net, p);
    }
    if (owe) {
        c->state |= ST_OWED;
        c->reason = reason;
    } else {
        list_remove(net, c);
    }
    resched(net, c);
    if (g) {
        /* A read of c runs: it releases these after its callback. */
        g->closed = true;
        lull_frame *last = drop;
        if (last) {
            while (last->next)
                last = last->next;
            last->next = g->discard;
            g->discard = drop;
        }
        return NULL;
    }
    return drop;
}

/* The connection fails at both ends (a reset or a break): everything
 * unread is dropped, and each end's close callback gets `err`. */
static void fail_conn(lull_simnet *net, lull_simconn *c, int err) {
    lull_simconn *p = c->other;
    trace(net, "%s %s<>%s", err == -ECONNRESET ? "reset" : "break", c->name,
          p ? p->name : "-");
    lull_frame *a = close_end(net, c, err, c->ep.on_close != NULL, false);
    lull_frame *b =
        p ? close_end(net, p, err, p->ep.on_close != NULL, false) : NULL;
    release_list(a);
    release_list(b);
}

/* The owed close callback: the end's last. */
static void notice(lull_simnet *net, lull_simconn *c) {
    c->state &= ~ST_OWED;
    list_remove(net, c);
    lull_frame *discard = c->early; /* a failing end's frames */
    c->early = c->early_tail = NULL;
    trace(net, "closed %s %s", c->name, lull_err_name(c->reason));
    release_list(discard);
    if (c->ep.on_close) c->ep.on_close(&c->ep, c->reason);
}

/* ------------------------------------------------------------ reading */

static void start_partition(lull_simnet *net, lull_simconn *c, uint64_t span,
                            bool breaks) {
    lull_simconn *p = c->other;
    uint64_t until = sat_add(now_of(net), span);
    if (net->flags & LULL_SIMNET_HOLLOW_PARTITIONS) until = now_of(net);
    c->in.hold_until = max64(c->in.hold_until, until);
    p->in.hold_until = max64(p->in.hold_until, until);
    if (breaks) c->break_at = min64(c->break_at, until);
    net->stats.partitions++;
    trace(net, "partition %s<>%s %" PRIu64 " ns%s", c->name, p->name, span,
          breaks ? " break" : "");
    resched(net, p);
}

/* Up to twice the mean, at random (a mean past 2^63 ns: any time). */
static uint64_t gap(lull_simnet *net, uint64_t every) {
    return every > NEVER / 2 ? rnd(net) % NEVER : below(net, 2 * every);
}

/* The time until the next random partition of a connection. */
static uint64_t partition_gap(lull_simnet *net, const lull_simfaults *f) {
    if (net->healed || !f->partition_every_ns) return NEVER;
    return sat_add(now_of(net), 1 + gap(net, f->partition_every_ns));
}

/* The inbox ends before the bytes its positions count: a frame of it was
 * sent again from the middle (its owner rewrote it in flight, and the send
 * cut its link; sim_send refuses only the last). The frames cut off are
 * lost to this end; it closes with -EBUSY rather than read past the end. */
static void queue_cut(lull_simnet *net, lull_simconn *c) {
    trace(net, "queue cut %s", c->name);
    release_list(close_end(net, c, -EBUSY, c->ep.on_close != NULL, false));
}

/* The frames `done` were read to their end: they go back to their owners;
 * then their sender counts them off, each whole (lull__frame_cost: a
 * framed sender's header too), as a stream takes a frame off once it is
 * written whole (src/frame.c: queued is the frames not yet released): the
 * bytes read of a frame still being read stay counted. Its drain may
 * re-send those frames. c's read runs under the guard g: false when c
 * closed meanwhile (released here; c is not touched again). */
static bool hand_back(lull_simconn *c, simguard *g, lull_frame *done) {
    size_t frames = 0, bytes = 0;
    for (const lull_frame *f = done; f; f = f->next) {
        frames++;
        bytes += f->len;
    }
    release_list(done);
    lull_simconn *sender = g->closed ? NULL : c->other;
    if (sender) {
        if (sender->ep.flags & LULL__EP_FRAMED)
            bytes += frames * LULL__FRAME_HDR;
        lull__endpoint_sent(&sender->ep, bytes);
    }
    if (!g->closed) return true;
    release_list(g->discard);
    return false;
}

/* Hands the next chunk (raw) or frame to on_frame, then releases the
 * frames read to their end and tells their sender. The guard on the
 * stack is pointed at from c while the callbacks run; every path that
 * returns while it still is finds it cleared by close_end (which set
 * g.closed), and c may be gone by then, so it is not written again: gcc's
 * dangling-pointer analysis cannot see that. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdangling-pointer"
#endif
static void deliver(lull_simnet *net, lull_simconn *c) {
    lull__simdir *d = &c->in;
    uint64_t now = now_of(net);
    lull_frame *f = d->head;
    if (!in_raw(c) && f->len > c->ep.max_frame) {
        /* As on a framed stream: a frame over this end's max_frame is
         * never handed over; the end closes. */
        trace(net, "too long %s %zu", c->name, f->len);
        release_list(
            close_end(net, c, -EMSGSIZE, c->ep.on_close != NULL, true));
        return;
    }
    const void *bytes;
    size_t n;
    char span[SPAN_COPY];
    if (in_raw(c)) {
        uint64_t avail = d->arrived - d->read;
        /* Frames read to their end were released, but for empty ones
         * appended since: the first frame with bytes holds `read`. */
        while (f && f->len == 0)
            f = f->next;
        if (!f) {
            queue_cut(net, c);
            return;
        }
        uint64_t at = d->read, pos = d->head_pos;
        uint64_t in_head = pos + f->len - at;
        n = (size_t)cut(net, avail);
        if (n <= in_head) {
            bytes = (const char *)f->bytes + (at - pos);
        } else {
            /* A read across frames: copied, up to SPAN_COPY. */
            if (n > sizeof span) n = sizeof span;
            size_t got = 0;
            for (lull_frame *g = f; got < n; g = g->next) {
                if (!g) {
                    queue_cut(net, c);
                    return;
                }
                uint64_t off = at + got - pos;
                size_t take = (size_t)min64(g->len - off, n - got);
                if (take)
                    memcpy(span + got, (const char *)g->bytes + off, take);
                got += take;
                pos += g->len;
            }
            bytes = span;
        }
        d->read += n;
    } else {
        bytes = f->bytes;
        n = f->len;
        d->read += wire(c, f);
    }
    if (d->slow_read_ns) {
        d->read_at = sat_add(now, upto(net, d->slow_read_ns));
        net->stats.slowed += d->read_at > now;
    }
    c->reads++;
    c->bytes_read += n;
    net->stats.reads++;
    trace(net, "read %s %zu", c->name, n);
    simguard g = {false, NULL};
    c->guard = &g;
    if (c->ep.on_frame) c->ep.on_frame(&c->ep, bytes, n);
    if (g.closed) {
        release_list(g.discard);
        return;
    }
    if (!hand_back(c, &g, take_done(c))) return;
    c->guard = NULL;
    send_segments(net, c); /* the window has room again */
    resched(net, c);
}
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic pop
#endif

/* The sender is done and everything was read: EOF closes this end (as a
 * stream without an end callback), its close callback getting 0. */
static void eof(lull_simnet *net, lull_simconn *c) {
    trace(net, "eof %s", c->name);
    lull_frame *rest = take_all(&c->in);
    release_closer(net, c);
    lull_frame *drop = close_end(net, c, 0, c->ep.on_close != NULL, true);
    release_list(rest);
    release_list(drop);
}

/* ------------------------------------------------------------ connecting */

static lull_simserver *find_server(lull_simnet *net, const char *addr) {
    for (lull_simserver *s = net->servers; s; s = s->next)
        if (strcmp(s->addr, addr) == 0) return s;
    return NULL;
}

static void connect_step(lull_simnet *net, lull_simconn *c) {
    if (!(c->state & ST_ANSWERED)) {
        /* The connect reaches the address. */
        lull_simserver *srv = find_server(net, c->target);
        int status = -ECONNREFUSED;
        if (srv && !(!net->healed && roll(net, c->faults.refuse_permille))) {
            uint64_t accepted = net->stats.accepted;
            srv->pending = c;
            net->accepting = srv;
            net->connecting = c;
            srv->on_connection(srv);
            /* It may have closed the server, and freed it: not touched
             * again then. */
            srv = net->accepting;
            net->accepting = NULL;
            if (srv) srv->pending = NULL;
            /* It may have closed c too (its close is all that follows),
             * and freed it: not touched again either. */
            if (!net->connecting) return;
            net->connecting = NULL;
            /* Accepted, though the accepted end may have closed already:
             * connected, then EOF, as for a close a turn later. */
            if (net->stats.accepted != accepted) status = 0;
        }
        if (status) {
            if (srv) srv->refused++;
            net->stats.refused++;
            trace(net, "refused %s <- %s", c->target, c->name);
        }
        c->status = status;
        c->state |= ST_ANSWERED;
        c->connect_at = sat_add(now_of(net), c->faults.delay_ns);
        resched(net, c);
        return;
    }
    /* The answer is back. */
    int status = c->status;
    lull_simconnect_fn fn = c->on_connect;
    c->state &= ~(ST_CONNECTING | ST_ANSWERED);
    if (status == 0) {
        c->state |= ST_OPEN;
        trace(net, "connected %s -> %s", c->name, c->peer);
        lull_simconn *p = c->other;
        lull_frame *f = c->early;
        c->early = c->early_tail = NULL;
        if (p) {
            while (f) {
                lull_frame *next = f->next;
                inbox_append(net, p, f);
                f = next;
            }
            if (c->state & ST_SHUT) p->in.eof = true;
            resched(net, p);
        }
        resched(net, c);
        fn(c, 0);
        /* The peer closed before the answer came: connected, then EOF;
         * what was sent meanwhile never left. */
        release_list(f);
        return;
    }
    /* Refused: closed, the close callback right after this one. Its
     * struct stays live (owed) until then, so a connect of it again
     * inside fn is refused (-EBUSY) rather than handed this close. */
    lull_frame *drop = close_end(net, c, status, true, false);
    fn(c, status);
    release_list(drop);
    heap_remove(net, c);
    notice(net, c);
}

/* ------------------------------------------------------------ the step */

static void step(lull_simnet *net, lull_simconn *c) {
    uint32_t st = c->state;
    uint64_t now = now_of(net);
    if (st & ST_CONNECTING) {
        connect_step(net, c);
        return;
    }
    if (st & ST_CLOSED) {
        if ((st & (ST_OWED | ST_WAIT)) == ST_OWED) notice(net, c);
        return;
    }
    if (c->break_at <= now) {
        net->stats.breaks++;
        fail_conn(net, c, -ETIMEDOUT);
        return;
    }
    if (c->partition_at <= now) {
        c->partition_at = NEVER;
        if (c->other) {
            const lull_simfaults *f = &c->faults;
            uint64_t span = sat_add(1, below(net, f->partition_ns));
            start_partition(net, c, span, roll(net, f->break_permille));
            c->partition_at = sat_add(max64(c->in.hold_until, now),
                                      1 + gap(net, f->partition_every_ns));
        }
    }
    lull__simdir *d = &c->in;
    arrive(net, d);
    if (reset_time(c) <= now) {
        if (!(c->state & ST_PEER_RST)) net->stats.resets++;
        fail_conn(net, c, -ECONNRESET);
        return;
    }
    if (!(st & ST_PAUSED)) {
        if (readable(c) && d->read_at <= now) {
            deliver(net, c);
            return;
        }
        if (head_done(c)) {
            /* Empty frames of a raw connection, read with what came
             * before them. */
            lull_frame *done = take_done(c);
            send_segments(net, c);
            resched(net, c);
            simguard g = {false, NULL};
            c->guard = &g;
            if (hand_back(c, &g, done)) c->guard = NULL;
            return;
        }
        if (d->eof && d->read == d->queued) {
            eof(net, c);
            return;
        }
    }
    send_segments(net, c);
    resched(net, c);
}

static void tick(lull_timer *t) {
    lull_simnet *net = LULL_CONTAINER_OF(t, lull_simnet, timer);
    if (net->heap_len && net->heap[0]->at <= now_of(net)) {
        lull_simconn *c = net->heap[0];
        heap_remove(net, c);
        net->stats.events++;
        net->stepping = true;
        step(net, c);
        if (net->on_event) net->on_event(net, net->arg);
        net->stepping = false;
    }
    kick(net);
}
LULL__OWN_NAME(tick, "lull_simnet event", lull_simnet, timer);

/* ------------------------------------------------------------ frame ops */

static void sim_fail(lull_endpoint *ep, int reason);

static void sim_send(lull_endpoint *ep, lull_frame *frame) {
    lull_simconn *c = end_of(ep);
    lull_simnet *net = c->net;
    LULL_ASSERT_LOOP_THREAD(net->loop);
    frame->next = NULL;
    /* A frame still queued here came back only because its owner rewrote
     * it in flight (in_flight cleared): lull_endpoint_send cut its link
     * already, so it can only be the last of the queue it joins, and
     * linking it again would make that queue a cycle. Refused as a frame
     * in flight is (-EBUSY), but accepted already: the end fails, as past
     * max_queued, and the frame stays queued once. */
    const lull__simdir *to = c->other ? &c->other->in : NULL;
    if (LULL_UNLIKELY(
            (c->early && frame == c->early_tail) ||
            (!(c->state & ST_CONNECTING) && to->head && frame == to->tail))) {
        ep->flags |= LULL__EP_PEER_GONE;
        sim_fail(ep, -EBUSY);
        return;
    }
    lull__frame_check_unqueued(c->early, frame);
    if (to) lull__frame_check_unqueued(to->head, frame);
    if (c->state & ST_CONNECTING) {
        if (c->early)
            c->early_tail->next = frame;
        else
            c->early = frame;
        c->early_tail = frame;
        return;
    }
    lull_simconn *p = c->other;
    trace(net, "send %s>%s %zu", c->name, p->name, frame->len);
    inbox_append(net, p, frame);
    resched(net, p);
    kick(net);
}

static void sim_close(lull_endpoint *ep, int reason) {
    lull_simconn *c = end_of(ep);
    lull_simnet *net = c->net;
    LULL_ASSERT_LOOP_THREAD(net->loop);
    trace(net, "close %s %s", c->name, lull_err_name(reason));
    lull_frame *drop = close_end(net, c, reason, ep->on_close != NULL, true);
    kick(net);
    release_list(drop); /* last: a release callback may do anything */
}

/* A send past max_queued, inside lull_endpoint_send: closed now, its
 * frames released and its close callback run in its close turn. */
static void sim_fail(lull_endpoint *ep, int reason) {
    lull_simconn *c = end_of(ep);
    lull_simnet *net = c->net;
    trace(net, "close %s %s", c->name, lull_err_name(reason));
    lull_frame *drop = close_end(net, c, reason, true, true);
    c->early = drop;
    c->early_tail = NULL;
    kick(net);
}

const lull_frame_ops lull__sim_ops = {sim_send, sim_close, sim_fail};

/* ------------------------------------------------------------ set-up */

/* Is c a live end, or srv a listening server, of any network on the
 * loop, its struct still in use? Decided by the loop's set of them alone
 * (loop->sims, src/registry.c: by address, O(1)), never by the struct's
 * fields: one handed in to be set up may hold anything, uninitialised
 * memory included. Not the network's own list: a struct live on another
 * network would be set up again over that network's links. Walking the
 * list also made setting up n connections O(n^2). The set is only asked,
 * never walked, so addresses order nothing. The loop's, not the
 * process's: a harness that abandons a stuck run's loop, network and
 * structs whole starts the next on a new loop, whose set knows none of
 * them. */
static bool end_live(lull_simnet *net, const lull_simconn *c) {
    return lull__registry_has(&net->loop->sims, c);
}

static bool server_listed(lull_simnet *net, const lull_simserver *srv) {
    return lull__registry_has(&net->loop->sims, srv);
}

/* A share is in thousandths: more than 1000 is a mistake, not "always". */
static bool faults_ok(const lull_simfaults *f) {
    return f->slow_permille <= 1000 && f->break_permille <= 1000 &&
           f->reset_permille <= 1000 && f->refuse_permille <= 1000;
}

static void dir_init(lull_simnet *net, lull__simdir *d,
                     const lull_simfaults *f) {
    memset(d, 0, sizeof *d);
    d->reset_at = d->rst_at = NEVER;
    d->delay_ns = f->delay_ns;
    d->jitter_ns = f->jitter_ns;
    d->bandwidth = f->bandwidth;
    d->window = f->window ? f->window : WINDOW_DEFAULT;
    d->slow_read_ns = roll(net, f->slow_permille) ? f->slow_read_ns : 0;
}

static int end_init(lull_simnet *net, lull_simconn *c,
                    const lull_simconn_options *o) {
    if (heap_reserve(net, net->nends + 1) < 0 ||
        lull__registry_add(&net->loop->sims, c) < 0)
        return -ENOMEM;
    lull__endpoint_init(&c->ep, &lull__sim_ops, o->max_frame, o->high_water,
                        o->max_queued);
    /* A framed end's frames each cost a header on top of their bytes, as
     * on a framed stream, so that empty ones fill its queue too. */
    if (!(o->flags & LULL_SIMCONN_RAW)) c->ep.flags |= LULL__EP_FRAMED;
    /* Framed, as on a stream: no longer than a 4-byte length says, so a
     * frame and its header always fit in a position. */
    if (!(o->flags & LULL_SIMCONN_RAW) && c->ep.max_frame > UINT32_MAX)
        c->ep.max_frame = UINT32_MAX;
    c->net = net;
    c->reads = c->bytes_read = 0;
    memset(&c->in, 0, sizeof c->in);
    c->other = NULL;
    c->on_connect = NULL;
    c->early = c->early_tail = NULL;
    c->at = c->tie = 0;
    c->connect_at = c->partition_at = c->break_at = NEVER;
    c->slot = 0;
    c->state = ST_LISTED | ((o->flags & LULL_SIMCONN_RAW) ? ST_RAW : 0);
    c->status = c->reason = 0;
    c->guard = NULL;
    c->net_prev = NULL;
    c->net_next = net->ends;
    if (net->ends) net->ends->net_prev = c;
    net->ends = c;
    net->nends++;
    /* Until it is done, it keeps lull_loop_free at -EBUSY, as an open
     * stream does: its close callback, its peer's and the network's
     * timer need the loop. */
    net->loop->handles++;
    return 0;
}

int lull_simnet_new(lull_simnet **out, lull_loop *loop,
                    const lull_simnet_options *opts) {
    static const lull_simnet_options defaults;
    if (!out) return -EINVAL;
    *out = NULL;
    if (!loop || !loop->virtual_clock) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(loop);
    if (!opts) opts = &defaults;
    if (!faults_ok(&opts->faults)) return -EINVAL;
    if (opts->flags & ~LULL_SIMNET_HOLLOW_PARTITIONS) return -EINVAL;
    lull_simnet *net = calloc(1, sizeof *net);
    if (!net) return -ENOMEM;
    net->loop = loop;
    net->rng = opts->seed;
    net->faults = opts->faults;
    net->trace = opts->trace;
    net->on_event = opts->on_event;
    net->arg = opts->arg;
    net->flags = opts->flags;
    net->stats.trace_hash = 0xcbf29ce484222325ull; /* FNV-1a's basis */
    lull_timer_init(loop, &net->timer, tick);
    trace(net, "net seed %" PRIu64, opts->seed);
    *out = net;
    return 0;
}

int lull_simnet_free(lull_simnet *net) {
    if (!net) return -EINVAL;
    if (net->nends || net->servers || net->stepping) return -EBUSY;
    lull_timer_stop(&net->timer);
    free(net->heap);
    free(net);
    return 0;
}

void lull_simnet_heal(lull_simnet *net) {
    if (!net) return;
    LULL_ASSERT_LOOP_THREAD(net->loop);
    net->healed = true;
    trace(net, "heal");
    for (lull_simconn *c = net->ends; c; c = c->net_next) {
        c->partition_at = c->break_at = NEVER;
        c->in.hold_until = 0;
        if (!(c->state & ST_PEER_RST)) c->in.reset_at = c->in.rst_at = NEVER;
        if (!(c->state & ST_CLOSED)) send_segments(net, c);
    }
    for (lull_simconn *c = net->ends; c; c = c->net_next)
        resched(net, c);
    kick(net);
}

void lull_simnet_log(lull_simnet *net, const char *fmt, ...) {
    if (!net || !fmt) return;
    LULL_ASSERT_LOOP_THREAD(net->loop);
    va_list ap;
    va_start(ap, fmt);
    vtrace(net, fmt, ap);
    va_end(ap);
}

void lull_simnet_get_stats(const lull_simnet *net, lull_simnet_stats *out) {
    if (!net || !out) return;
    LULL_ASSERT_LOOP_THREAD(net->loop);
    *out = net->stats;
}

/* ------------------------------------------------------------ servers */

static bool addr_ok(const char *addr, size_t cap) {
    return addr && addr[0] && strlen(addr) < cap;
}

int lull_simserver_listen(lull_simnet *net, lull_simserver *srv,
                          const char *addr, lull_simconnection_fn fn) {
    if (!net || !srv || !fn || !addr_ok(addr, sizeof srv->addr)) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(net->loop);
    if (server_listed(net, srv)) return -EBUSY;
    if (find_server(net, addr)) return -EADDRINUSE;
    if (lull__registry_add(&net->loop->sims, srv) < 0) /* until its close */
        return -ENOMEM;
    memset(srv, 0, sizeof *srv);
    srv->net = net;
    snprintf(srv->addr, sizeof srv->addr, "%s", addr);
    srv->on_connection = fn;
    srv->next = net->servers;
    net->servers = srv;
    net->loop->handles++; /* until lull_simserver_close, as a server */
    trace(net, "listen %s", addr);
    return 0;
}

int lull_simserver_accept(lull_simserver *srv, lull_simconn *p,
                          const lull_simconn_options *opts) {
    static const lull_simconn_options defaults;
    if (!srv || !p) return -EINVAL;
    const lull_simconn_options *o = opts ? opts : &defaults;
    if (o->faults && !faults_ok(o->faults)) return -EINVAL;
    if (o->flags & ~LULL_SIMCONN_RAW) return -EINVAL;
    if (!lull__marks_ok(o->high_water, o->max_queued)) return -EINVAL;
    lull_simconn *c = srv->pending;
    if (!c || c->other) return -ENOENT;
    lull_simnet *net = srv->net;
    LULL_ASSERT_LOOP_THREAD(net->loop);
    if (end_live(net, p)) return -EBUSY;
    int rc = end_init(net, p, o);
    if (rc < 0) return rc;
    srv->pending = NULL; /* one accept per connect */
    srv->accepted++;
    net->stats.accepted++;
    p->state |= ST_OPEN;
    snprintf(p->name, sizeof p->name, "%s#%" PRIu64, srv->addr, srv->accepted);
    memcpy(p->peer, c->name, sizeof p->peer);
    memcpy(c->peer, p->name, sizeof c->peer);
    p->faults = c->faults;
    c->other = p;
    p->other = c;
    dir_init(net, &p->in, &c->faults);
    /* What this end sends: its own profile, if it gave one. */
    dir_init(net, &c->in, o->faults ? o->faults : &c->faults);
    if (!net->healed && roll(net, c->faults.reset_permille)) {
        lull__simdir *d = rnd(net) & 1 ? &p->in : &c->in;
        uint64_t within = c->faults.reset_within ? c->faults.reset_within
                                                 : RESET_WITHIN_DEFAULT;
        d->reset_at = below(net, within);
    }
    c->partition_at = partition_gap(net, &c->faults);
    trace(net, "accept %s <- %s", p->name, c->name);
    return 0;
}

void lull_simserver_close(lull_simserver *srv) {
    if (!srv || !srv->net) return;
    lull_simnet *net = srv->net;
    LULL_ASSERT_LOOP_THREAD(net->loop);
    for (lull_simserver **s = &net->servers; *s; s = &(*s)->next)
        if (*s == srv) {
            *s = srv->next;
            net->loop->handles--;
            lull__registry_remove(&net->loop->sims, srv);
            break;
        }
    trace(net, "unlisten %s", srv->addr);
    if (net->accepting == srv) net->accepting = NULL;
    srv->pending = NULL;
    srv->net = NULL;
}

/* ------------------------------------------------------------ connections */

int lull_simconn_connect(lull_simnet *net, lull_simconn *c, const char *addr,
                         const lull_simconn_options *opts,
                         lull_simconnect_fn fn) {
    static const lull_simconn_options defaults;
    if (!net || !c || !fn || !addr_ok(addr, sizeof c->target)) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(net->loop);
    const lull_simconn_options *o = opts ? opts : &defaults;
    const char *name = o->name ? o->name : "client";
    if (strlen(name) > 24) return -EINVAL;
    if (o->faults && !faults_ok(o->faults)) return -EINVAL;
    if (o->flags & ~LULL_SIMCONN_RAW) return -EINVAL;
    if (!lull__marks_ok(o->high_water, o->max_queued)) return -EINVAL;
    if (end_live(net, c)) return -EBUSY;
    int rc = end_init(net, c, o); /* keeps ep.data, the caller's */
    if (rc < 0) return rc;
    net->stats.connects++;
    snprintf(c->name, sizeof c->name, "%s:%" PRIu64, name, ++net->ports);
    snprintf(c->peer, sizeof c->peer, "%s", addr);
    snprintf(c->target, sizeof c->target, "%s", addr);
    c->faults = o->faults ? *o->faults : net->faults;
    c->on_connect = fn;
    c->state |= ST_CONNECTING;
    c->connect_at = sat_add(now_of(net), c->faults.delay_ns);
    trace(net, "connect %s -> %s", c->name, addr);
    resched(net, c);
    kick(net);
    return 0;
}

/* An end whose close callback ran is done, and its network may be freed
 * since (lull_simnet_free): calls on it answer from the end alone. */
static bool end_done(const lull_simconn *c) {
    return (c->state & (ST_CLOSED | ST_OWED)) == ST_CLOSED;
}

int lull_simconn_read_stop(lull_simconn *c) {
    if (!c || !c->net) return -EINVAL;
    if (end_done(c)) return 0; /* harmless, as on any closed end */
    LULL_ASSERT_LOOP_THREAD(c->net->loop);
    if (!(c->state & ST_PAUSED)) trace(c->net, "pause %s", c->name);
    c->state |= ST_PAUSED;
    if (c->state & ST_LISTED) resched(c->net, c);
    kick(c->net);
    return 0;
}

int lull_simconn_read_start(lull_simconn *c) {
    if (!c || !c->net) return -EINVAL;
    if (end_done(c)) return 0;
    LULL_ASSERT_LOOP_THREAD(c->net->loop);
    if (c->state & ST_PAUSED) trace(c->net, "resume %s", c->name);
    if ((c->state & (ST_PAUSED | ST_PEER_RST)) == (ST_PAUSED | ST_PEER_RST)) {
        /* Reading again before the reset its peer's close sent came: it
         * reads what came, then EOF, paused on the way or not
         * (close_end). */
        c->in.rst_at = NEVER;
        c->state &= ~ST_PEER_RST;
    }
    c->state &= ~ST_PAUSED;
    if (c->state & ST_LISTED) resched(c->net, c);
    kick(c->net);
    return 0;
}

int lull_simconn_shutdown(lull_simconn *c) {
    if (!c || !c->net) return -EINVAL;
    if (!(c->state & (ST_OPEN | ST_CONNECTING))) return -ENOTCONN;
    LULL_ASSERT_LOOP_THREAD(c->net->loop);
    if (c->state & ST_SHUT) return 0;
    c->state |= ST_SHUT;
    /* Sends fail from now on; what is queued still goes and counts. */
    c->ep.flags |= LULL__EP_PEER_GONE;
    trace(c->net, "shutdown %s", c->name);
    if (c->other && !(c->state & ST_CONNECTING)) {
        c->other->in.eof = true;
        resched(c->net, c->other);
        kick(c->net);
    }
    return 0;
}

int lull_simconn_partition(lull_simconn *c, uint64_t span_ns, bool breaks) {
    if (!c || !c->net) return -EINVAL;
    if (!(c->state & ST_OPEN) || !c->other) return -ENOTCONN;
    LULL_ASSERT_LOOP_THREAD(c->net->loop);
    start_partition(c->net, c, span_ns, breaks);
    resched(c->net, c);
    kick(c->net);
    return 0;
}

int lull_simconn_reset(lull_simconn *c, uint64_t after_bytes) {
    if (!c || !c->net) return -EINVAL;
    lull_simconn *p = c->other;
    if (!(c->state & ST_OPEN) || !p) return -ENOTCONN;
    LULL_ASSERT_LOOP_THREAD(c->net->loop);
    lull__simdir *d = &p->in;
    d->reset_at = sat_add(d->sent, after_bytes); /* NEVER: no reset */
    d->rst_at = NEVER;
    trace(c->net, "reset %s>%s after %" PRIu64, c->name, p->name, after_bytes);
    send_segments(c->net, p);
    resched(c->net, p);
    kick(c->net);
    return 0;
}
