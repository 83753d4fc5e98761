/* The `udp` scenario's application and its harness (lab/udp.h): what both
 * sides do with each datagram, the same code for every implementation, and
 * one measurement of an implementation (two sockets, two threads pinned to
 * one CPU, a watchdog).
 *
 * A data datagram: seq (8 bytes), kind (4), check (4), then its payload.
 * The client's payloads are random bytes fixed per window slot, their
 * checksums taken once; a send writes only the header. check is the
 * payload's checksum mixed with seq, so a receiver that recomputes it over
 * every byte catches a corrupt payload and a wrong seq alike. A credit is
 * a header alone: seq is the count the server has received.
 *
 * The watchdog: a lost datagram would leave both sides waiting (echo and
 * flood move only on arrivals), so the driver waits for the threads with
 * a deadline and then sends each side a datagram of kind ABORT; a side
 * that reads one fails with -ETIMEDOUT. */
#include "engine.h"
#include "udp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { KIND_DATA = 0x44415441, KIND_CREDIT = 0x43524454, KIND_ABORT = 0xAB };

/* ---------------------------------------------------------- checksums */

/* Four independent multiply lanes over 8-byte words (about 50 ns for
 * 1,200 bytes): every byte counts, and one flipped bit changes the sum. */
static uint32_t payload_hash(const unsigned char *p, size_t n) {
    const uint64_t k = 0x100000001b3ull;
    uint64_t h[4] = {0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full,
                     0x165667b19e3779f9ull, 0x27d4eb2f165667c5ull};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int l = 0; l < 4; l++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * l, 8);
            h[l] = (h[l] ^ w) * k;
        }
    for (; i < n; i++)
        h[i & 3] = (h[i & 3] ^ p[i]) * k;
    uint64_t x = h[0] ^ (h[1] >> 7) ^ (h[2] << 11) ^ (h[3] >> 13) ^ n;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (uint32_t)x;
}

static uint32_t seq_mix(uint64_t seq) {
    return (uint32_t)((seq * 0x9e3779b97f4a7c15ull) >> 32);
}

static void put_header(unsigned char *b, uint64_t seq, uint32_t kind,
                       uint32_t check) {
    memcpy(b, &seq, 8);
    memcpy(b + 8, &kind, 4);
    memcpy(b + 12, &check, 4);
}

static void get_header(const unsigned char *b, uint64_t *seq, uint32_t *kind,
                       uint32_t *check) {
    memcpy(seq, b, 8);
    memcpy(kind, b + 8, 4);
    memcpy(check, b + 12, 4);
}

static int fail(udp_side *s, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(udp_side *s, int err, const char *fmt, ...) {
    if (!s->err) {
        s->err = err;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->why, sizeof s->why, fmt, ap);
        va_end(ap);
    }
    return s->err;
}

/* -------------------------------------------------------- application */

static void send_data(udp_side *s) {
    uint64_t seq = s->seq++;
    size_t slot = (size_t)(seq % (uint64_t)s->window);
    unsigned char *b = s->slots + slot * s->size;
    put_header(b, seq, KIND_DATA, s->slot_hash[slot] ^ seq_mix(seq));
    if (s->sent_ns) s->sent_ns[slot] = lab_now_ns();
    s->send(s, b, s->size, true);
}

static void send_credit(udp_side *s) {
    unsigned char *b = s->credits[(s->credit / UDP_CREDIT_EVERY) % UDP_CREDITS];
    s->credit = s->received;
    put_header(b, s->credit, KIND_CREDIT, seq_mix(s->credit) ^ 0xc0ffee);
    s->send(s, b, UDP_HEADER, true);
}

void udp_app_start(udp_side *s) {
    if (s->role != UDP_CLIENT) return;
    while (s->seq < s->count && s->seq < (uint64_t)s->window && !s->err)
        send_data(s);
}

/* A data datagram, in order and intact. */
static int check_data(udp_side *s, const unsigned char *b, size_t len,
                      uint64_t seq, uint32_t check) {
    if (len != s->size)
        return fail(s, -EPROTO, "datagram of %zu bytes, expected %zu", len,
                    s->size);
    if (seq != s->received)
        return fail(s, -EPROTO, "seq %llu, expected %llu (%s)",
                    (unsigned long long)seq, (unsigned long long)s->received,
                    seq < s->received ? "repeated or reordered" : "lost");
    uint32_t want = payload_hash(b + UDP_HEADER, len - UDP_HEADER);
    if ((check ^ seq_mix(seq)) != want)
        return fail(s, -EPROTO, "seq %llu: checksum differs (corrupt)",
                    (unsigned long long)seq);
    return 0;
}

int udp_app_recv(udp_side *s, const void *bytes, size_t len) {
    const unsigned char *b = bytes;
    if (s->err) return s->err;
    if (len < UDP_HEADER)
        return fail(s, -EPROTO, "a datagram of %zu bytes", len);
    uint64_t seq;
    uint32_t kind, check;
    get_header(b, &seq, &kind, &check);
    if (kind == KIND_ABORT)
        return fail(s, -ETIMEDOUT, "no progress: stopped by the watchdog");
    if (s->done)
        return fail(s, -EPROTO, "a datagram after the last (seq %llu)",
                    (unsigned long long)seq);
    if (s->workload == UDP_ECHO && s->role == UDP_SERVER) {
        /* The client checks the reply, which checks this hop too. */
        if (kind != KIND_DATA || len != s->size)
            return fail(s, -EPROTO, "echo server: not a data datagram");
        s->send(s, bytes, len, false);
        if (++s->received == s->count) s->done = true;
        return s->err;
    }
    if (s->role == UDP_SERVER || s->workload == UDP_ECHO) {
        if (kind != KIND_DATA)
            return fail(s, -EPROTO, "kind %#x, expected data", kind);
        int rc = check_data(s, b, len, seq, check);
        if (rc < 0) return rc;
        if (s->lat_ns) {
            size_t slot = (size_t)(seq % (uint64_t)s->window);
            s->lat_ns[seq] = (uint32_t)(lab_now_ns() - s->sent_ns[slot]);
        }
        s->received++;
        if (s->workload == UDP_FLOOD) {
            if (s->received % UDP_CREDIT_EVERY == 0 || s->received == s->count)
                send_credit(s);
        } else if (s->seq < s->count) {
            send_data(s); /* the slot of the reply just checked */
        }
        if (s->received == s->count) s->done = true;
        return s->err;
    }
    /* The flood's client: a credit. */
    if (kind != KIND_CREDIT || len != UDP_HEADER ||
        check != (seq_mix(seq) ^ 0xc0ffee))
        return fail(s, -EPROTO, "flood client: not a credit");
    if (seq <= s->credit || seq > s->seq ||
        (seq % UDP_CREDIT_EVERY != 0 && seq != s->count))
        return fail(s, -EPROTO, "credit %llu after %llu, %llu sent",
                    (unsigned long long)seq, (unsigned long long)s->credit,
                    (unsigned long long)s->seq);
    s->credit = seq;
    while (s->seq < s->count && s->seq - s->credit < (uint64_t)s->window &&
           !s->err)
        send_data(s);
    if (s->credit == s->count) s->done = true;
    return s->err;
}

/* ------------------------------------------------------------ sides */

void udp_side_ready(udp_side *s) {
    pthread_barrier_wait(s->start);
    udp_calls_now(&s->c0);
    s->cpu0 = lab_thread_cpu_ns();
    s->t0 = lab_now_ns();
}

void udp_side_end(udp_side *s) {
    if (s->ended) return;
    s->ended = true;
    s->t1 = lab_now_ns();
    s->cpu1 = lab_thread_cpu_ns();
    udp_calls_now(&s->c1);
}

typedef struct side_job {
    udp_side *s;
    udp_run_fn run;
    int rc;
    bool exited; /* atomic */
} side_job;

static void *side_main(void *arg) {
    side_job *j = arg;
    lab_pin_cpu(j->s->cpu);
    j->rc = j->run(j->s);
    if (!j->s->ended) udp_side_end(j->s);
    __atomic_store_n(&j->exited, true, __ATOMIC_RELEASE);
    return NULL;
}

/* A socket on 127.0.0.1, any port; buffers as large as the system allows
 * up to 4 MiB (the window is sized well below the default anyway). */
static int open_socket(struct sockaddr_in *addr) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    int buf = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    memset(addr, 0, sizeof *addr);
    addr->sin_family = AF_INET;
    addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof *addr;
    if (bind(fd, (struct sockaddr *)addr, sizeof *addr) != 0 ||
        getsockname(fd, (struct sockaddr *)addr, &len) != 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    return fd;
}

static void abort_sides(const struct sockaddr_in *a,
                        const struct sockaddr_in *b) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    unsigned char h[UDP_HEADER];
    put_header(h, 0, KIND_ABORT, 0);
    sendto(fd, h, sizeof h, 0, (const struct sockaddr *)a, sizeof *a);
    sendto(fd, h, sizeof h, 0, (const struct sockaddr *)b, sizeof *b);
    close(fd);
}

/* Waits for both sides; past the deadline, aborts them (again every
 * 100 ms: a side may be between its reads) and waits on. */
static void wait_sides(side_job *jobs, const struct sockaddr_in *a,
                       const struct sockaddr_in *b, uint64_t deadline_ns) {
    for (;;) {
        bool all = __atomic_load_n(&jobs[0].exited, __ATOMIC_ACQUIRE) &&
                   __atomic_load_n(&jobs[1].exited, __ATOMIC_ACQUIRE);
        if (all) return;
        uint64_t now = lab_now_ns();
        if (now > deadline_ns) abort_sides(a, b);
        if (now > deadline_ns + 30000000000ull) {
            /* A side that ignores the abort: better a crash than a
             * `make demo` that never ends. */
            fprintf(stderr, "lull-lab: udp: a side does not stop\n");
            abort();
        }
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static int alloc_client(udp_side *c, uint64_t *rng) {
    size_t w = (size_t)c->window;
    c->slots = malloc(w * c->size);
    c->slot_hash = malloc(w * sizeof *c->slot_hash);
    if (!c->slots || !c->slot_hash) return -ENOMEM;
    for (size_t i = 0; i < w * c->size; i++)
        c->slots[i] = (unsigned char)lab_rand(rng);
    for (size_t i = 0; i < w; i++)
        c->slot_hash[i] = payload_hash(c->slots + i * c->size + UDP_HEADER,
                                       c->size - UDP_HEADER);
    if (c->workload == UDP_ECHO) {
        c->sent_ns = calloc(w, sizeof *c->sent_ns);
        c->lat_ns = malloc((size_t)c->count * sizeof *c->lat_ns);
        if (!c->sent_ns || !c->lat_ns) return -ENOMEM;
    }
    return 0;
}

int udp_measure(udp_run_fn run, unsigned variant, int workload, size_t size,
                uint64_t count, int window, udp_result *out, char *why,
                size_t why_size) {
    static uint64_t rng = 0x5eed0dd5;
    udp_side *sides = calloc(2, sizeof *sides);
    if (!sides) return -ENOMEM;
    udp_side *srv = &sides[0], *cli = &sides[1];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 3);
    int rc = 0;
    srv->fd = cli->fd = -1;
    for (int i = 0; i < 2; i++) {
        udp_side *s = &sides[i];
        s->workload = workload;
        s->role = i == 0 ? UDP_SERVER : UDP_CLIENT;
        s->size = size;
        s->count = count;
        s->window = window;
        s->cpu = lab_first_cpu();
        s->variant = variant;
        s->start = &start;
    }
    struct sockaddr_in a, b;
    if ((srv->fd = open_socket(&a)) < 0 || (cli->fd = open_socket(&b)) < 0) {
        rc = srv->fd < 0 ? srv->fd : cli->fd;
        goto out;
    }
    srv->peer = b;
    cli->peer = a;
    if ((rc = alloc_client(cli, &rng)) < 0) goto out;

    side_job jobs[2] = {{srv, run, 0, false}, {cli, run, 0, false}};
    pthread_t t[2];
    int started = 0;
    for (; started < 2; started++)
        if (pthread_create(&t[started], NULL, side_main, &jobs[started]) != 0)
            break;
    if (started < 2) {
        /* The barrier waits for three: nothing can run. Abandoning a side
         * that waits there is not possible, so this is fatal. */
        fprintf(stderr, "lull-lab: udp: cannot start a thread\n");
        abort();
    }
    pthread_barrier_wait(&start); /* the sides own their fds now */
    uint64_t deadline = lab_now_ns() + 5000000000ull + count * 50000ull;
    wait_sides(jobs, &a, &b, deadline);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    srv->fd = cli->fd = -1; /* closed by the sides */

    rc = jobs[0].rc ? jobs[0].rc : jobs[1].rc;
    const udp_side *bad = srv->err ? srv : cli->err ? cli : NULL;
    if (bad) {
        rc = bad->err;
        snprintf(why, why_size, "%s: %s",
                 bad->role == UDP_SERVER ? "server" : "client", bad->why);
    } else if (rc == 0 && (!srv->done || !cli->done)) {
        rc = -EPROTO;
        snprintf(why, why_size, "a side ended before its last datagram");
    }
    if (rc < 0) goto out;
    memset(out, 0, sizeof *out);
    out->dgrams = (double)count * (workload == UDP_ECHO ? 2 : 1);
    uint64_t t0 = srv->t0 < cli->t0 ? srv->t0 : cli->t0;
    uint64_t t1 = srv->t1 > cli->t1 ? srv->t1 : cli->t1;
    out->seconds = (double)(t1 - t0) / 1e9;
    out->cpu_ns = (double)(srv->cpu1 - srv->cpu0 + cli->cpu1 - cli->cpu0);
    for (int i = 0; i < 2; i++) {
        const udp_side *s = &sides[i];
        out->calls.sends += s->c1.sends - s->c0.sends;
        out->calls.recvs += s->c1.recvs - s->c0.recvs;
        out->calls.polls += s->c1.polls - s->c0.polls;
        out->calls.other += s->c1.other - s->c0.other;
    }
    out->own_calls = srv->own_calls + cli->own_calls;
    out->p50_us = out->p99_us = NAN;
    if (cli->lat_ns) {
        qsort(cli->lat_ns, (size_t)count, sizeof *cli->lat_ns, cmp_u32);
        out->p50_us = cli->lat_ns[(size_t)((double)(count - 1) * 0.5)] / 1e3;
        out->p99_us = cli->lat_ns[(size_t)((double)(count - 1) * 0.99)] / 1e3;
    }
out:
    if (srv->fd >= 0) close(srv->fd);
    if (cli->fd >= 0) close(cli->fd);
    pthread_barrier_destroy(&start);
    free(cli->slots);
    free(cli->slot_hash);
    free(cli->sent_ns);
    free(cli->lat_ns);
    free(sides);
    return rc;
}
