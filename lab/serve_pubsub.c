/* `serve`'s pub/sub row (lab/serve_more.h): a publisher at full speed,
 * READERS subscribers that read everything and one that never reads, on
 * one channel, against a fresh lull-kv and a fresh redis-server, each
 * with its default client-output-buffer-limit for pubsub (32 MB hard, 8
 * MB for 60 s soft).
 *
 * The publisher keeps WINDOW PUBLISH requests of PAYLOAD-byte messages in
 * flight until every one of the run's messages has been answered. Every
 * reader must receive every message, in order, each compared byte for
 * byte (a message's number is in its payload): a wrong one fails the run
 * as a delivered-data check. The subscriber that never reads holds what
 * its socket buffers take; the rest waits in the server until it passes
 * the hard limit and the server disconnects it, which lull-lab sees in
 * INFO clients (connected_clients, asked every INFO_EVERY_MS on a
 * connection of its own). The server's memory is its peak RSS (VmHWM: a
 * fresh server each run, so its peak is this run's) and what it grew by
 * since the subscribers were in. All clients run on one thread of
 * lull-lab pinned to the client CPU, a poll loop that reads the readers
 * before it publishes more. The servers take turns, the first rotating
 * round by round. One thread, and the client's. */
#include "serve_more.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define READERS 4
#define PAYLOAD 1024
/* Enough in flight that the server always has a batch to fan out, few
 * enough that the readers, on the same thread, keep up with it. */
#define WINDOW 64
/* The subscriber that never reads must pass 32 MB in the server, beyond
 * what its socket buffers hold (a few MB): 60 MB at least. */
#define MESSAGES       100000
#define QUICK_MESSAGES 60000
#define CHANNEL        "lab:pubsub"
#define SEQ_DIGITS     20
#define RUN_LIMIT_MS   60000
#define INFO_EVERY_MS  20
/* After the last message, how long the subscriber that never reads may
 * take to be closed before the run ends without it. */
#define GRACE_MS 2000

enum {
    PV_PUB_RATE,     /* messages published per second */
    PV_READ_RATE,    /* the slowest reader's messages per second */
    PV_DELIVERED,    /* the fewest any reader got ÷ published */
    PV_PEAK_MB,      /* the server's VmHWM */
    PV_GROWTH_MB,    /* VmHWM − VmRSS once subscribed */
    PV_SLOW_GONE_S,  /* the one that never reads seen gone, from the start */
    PV_SLOW_GONE_MB, /* ... and the MB of messages owed it by then */
    PV_CPU_US,       /* the server's CPU per message published */
    PV_CLIENT_BUSY,  /* the clients' thread's CPU ÷ the run's time */
    PV_COUNT
};

static const lab_col cols[PV_COUNT] = {
    {"published_per_s", "published msg/s", LAB_COL_RATE},
    {"slowest_reader_per_s", "slowest reader msg/s", LAB_COL_RATE},
    {"delivered", "delivered ÷ published", LAB_COL_RATE},
    {"peak_rss_mb", "server peak RSS MB", 0},
    {"rss_growth_mb", "RSS growth MB", 0},
    {"slow_closed_s", "non-reader closed at s", 0},
    {"slow_closed_mb", "... owed MB", 0},
    {"server_cpu_us_per_msg", "server CPU µs/msg", 0},
    {"client_busy", "clients' CPU ÷ time", 0},
};

/* What every subscriber receives per message, and what the publisher
 * sends: set once (frames_init). */
static char frame_head[64], req_head[64], payload[PAYLOAD];
static size_t head_len, req_head_len, frame_len, req_len;

static void frames_init(void) {
    head_len = (size_t)snprintf(frame_head, sizeof frame_head,
                                "*3\r\n$7\r\nmessage\r\n$%zu\r\n%s\r\n$%d\r\n",
                                strlen(CHANNEL), CHANNEL, PAYLOAD);
    req_head_len =
        (size_t)snprintf(req_head, sizeof req_head,
                         "*3\r\n$7\r\nPUBLISH\r\n$%zu\r\n%s\r\n$%d\r\n",
                         strlen(CHANNEL), CHANNEL, PAYLOAD);
    frame_len = head_len + PAYLOAD + 2;
    req_len = req_head_len + PAYLOAD + 2;
    for (int i = 0; i < PAYLOAD; i++)
        payload[i] = (char)('a' + i % 26);
}

/* A reader: the message it expects next, and a frame cut by a read. */
typedef struct sub {
    int fd;
    long next;
    size_t have;
    bool dead;
    uint64_t done_ns;
    char frame[64 + PAYLOAD + 2];
} sub;

typedef struct ps_job {
    int port;
    pid_t pid;
    long messages;
    double *v;
    long long rss0_kb; /* once subscribed */
    bool slow_closed;
    char why[160];
} ps_job;

static bool frame_ok(const char *p, long seq) {
    char digits[SEQ_DIGITS + 1];
    snprintf(digits, sizeof digits, "%0*ld", SEQ_DIGITS, seq);
    const char *body = p + head_len;
    return memcmp(p, frame_head, head_len) == 0 &&
           memcmp(body, digits, SEQ_DIGITS) == 0 &&
           memcmp(body + SEQ_DIGITS, payload + SEQ_DIGITS,
                  PAYLOAD - SEQ_DIGITS) == 0 &&
           body[PAYLOAD] == '\r' && body[PAYLOAD + 1] == '\n';
}

/* Takes n bytes of reader r's stream; -EPROTO on a wrong message. */
static int feed(sub *r, const char *p, size_t n, long messages) {
    while (n > 0) {
        const char *whole = NULL;
        if (r->have == 0 && n >= frame_len) {
            whole = p;
            p += frame_len;
            n -= frame_len;
        } else {
            size_t take = frame_len - r->have < n ? frame_len - r->have : n;
            memcpy(r->frame + r->have, p, take);
            r->have += take;
            p += take;
            n -= take;
            if (r->have < frame_len) break;
            whole = r->frame;
            r->have = 0;
        }
        if (r->next >= messages || !frame_ok(whole, r->next)) return -EPROTO;
        if (++r->next == messages) r->done_ns = lab_now_ns();
    }
    return 0;
}

static int subscribe(int port) {
    static const char req[] = "*2\r\n$9\r\nSUBSCRIBE\r\n$10\r\n" CHANNEL "\r\n";
    static const char want[] =
        "*3\r\n$9\r\nsubscribe\r\n$10\r\n" CHANNEL "\r\n:1\r\n";
    char got[sizeof want - 1];
    int fd = serve_client_connect(port);
    if (fd < 0) return -1;
    if (serve_send_all(fd, req, sizeof req - 1) < 0 ||
        serve_recv_exact(fd, got, sizeof got) < 0 ||
        memcmp(got, want, sizeof got) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static long connected_clients(int fd) {
    static char text[8192];
    if (serve_info(fd, "clients", text, sizeof text) < 0) return -1;
    return (long)serve_info_number(text, "connected_clients");
}

/* The publisher: requests numbered `sent` on, written from out. */
typedef struct pub {
    int fd;
    long sent, answered;
    char *out;
    size_t len, off;
} pub;

static void pub_refill(pub *p, long messages) {
    if (p->off < p->len) return;
    p->len = p->off = 0;
    while (p->sent - p->answered < WINDOW && p->sent < messages) {
        char *q = p->out + p->len;
        memcpy(q, req_head, req_head_len);
        memcpy(q + req_head_len, payload, PAYLOAD);
        char digits[SEQ_DIGITS + 1];
        snprintf(digits, sizeof digits, "%0*ld", SEQ_DIGITS, p->sent);
        memcpy(q + req_head_len, digits, SEQ_DIGITS);
        memcpy(q + req_head_len + PAYLOAD, "\r\n", 2);
        p->len += req_len;
        p->sent++;
    }
}

static int pub_write(pub *p) {
    while (p->off < p->len) {
        ssize_t w = send(p->fd, p->out + p->off, p->len - p->off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) return 0;
        if (w <= 0) return -EIO;
        p->off += (size_t)w;
    }
    return 0;
}

/* The replies, ":<receivers>\r\n": one line each. */
static int pub_read(pub *p) {
    char buf[16384];
    ssize_t r = recv(p->fd, buf, sizeof buf, 0);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
    if (r <= 0) return -EIO;
    for (ssize_t i = 0; i < r; i++)
        p->answered += buf[i] == '\n';
    return 0;
}

static void set_nonblocking(int fd) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* The run's loop, on the client's thread. */
static int run(ps_job *j, sub *readers, int control, pub *p) {
    static char buf[262144];
    uint64_t cpu0 = 0, cpu1 = 0;
    serve_cpu_ns(j->pid, &cpu0);
    uint64_t t0 = lab_now_ns(), pub_done = 0, all_done = 0, next_info = t0;
    uint64_t closed_at = 0, thread0 = lab_thread_cpu_ns(), thread1 = 0;
    long closed_after = 0; /* messages answered when seen closed */
    int rc = 0;
    for (;;) {
        pub_refill(p, j->messages);
        if (pub_write(p) < 0) {
            snprintf(j->why, sizeof j->why,
                     "the publisher's connection failed");
            return -EIO;
        }
        struct pollfd pfd[1 + READERS];
        int map[1 + READERS], n = 0;
        pfd[n] =
            (struct pollfd){p->fd, POLLIN | (p->off < p->len ? POLLOUT : 0), 0};
        map[n++] = -1;
        for (int i = 0; i < READERS; i++)
            if (!readers[i].dead && readers[i].next < j->messages) {
                pfd[n] = (struct pollfd){readers[i].fd, POLLIN, 0};
                map[n++] = i;
            }
        int ready = poll(pfd, (nfds_t)n, INFO_EVERY_MS);
        if (ready < 0 && errno != EINTR) return -errno;
        for (int k = 1; ready > 0 && k < n; k++) { /* the readers first */
            if (!pfd[k].revents) continue;
            sub *r = &readers[map[k]];
            ssize_t got = recv(r->fd, buf, sizeof buf, 0);
            if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (got <= 0) {
                r->dead = true; /* closed by the server: counted below */
                continue;
            }
            if (feed(r, buf, (size_t)got, j->messages) < 0) {
                snprintf(j->why, sizeof j->why,
                         "reader %d: message %ld is wrong or out of order",
                         map[k], r->next);
                return -EPROTO;
            }
        }
        if (ready > 0 && (pfd[0].revents & (POLLIN | POLLERR | POLLHUP)) &&
            pub_read(p) < 0) {
            snprintf(j->why, sizeof j->why,
                     "the publisher's connection failed");
            return -EIO;
        }
        uint64_t now = lab_now_ns();
        if (!pub_done && p->answered >= j->messages) pub_done = now;
        bool readers_done = true;
        for (int i = 0; i < READERS; i++)
            readers_done &= readers[i].dead || readers[i].next == j->messages;
        if (pub_done && readers_done && !all_done) {
            all_done = now;
            serve_cpu_ns(j->pid, &cpu1);
            thread1 = lab_thread_cpu_ns();
        }
        if (!j->slow_closed && now >= next_info) {
            long clients = connected_clients(control);
            if (clients < 0) {
                snprintf(j->why, sizeof j->why, "INFO clients failed");
                return -EIO;
            }
            /* The readers, the publisher and this connection. */
            if (clients <= READERS + 2) {
                j->slow_closed = true;
                closed_at = lab_now_ns();
                closed_after = p->answered;
            }
            next_info = lab_now_ns() + INFO_EVERY_MS * MS;
        }
        if (all_done && (j->slow_closed || now - all_done > GRACE_MS * MS))
            break;
        if (now - t0 > RUN_LIMIT_MS * MS) {
            snprintf(j->why, sizeof j->why, "not done within %d s",
                     RUN_LIMIT_MS / 1000);
            return -ETIMEDOUT;
        }
    }
    double m = (double)j->messages;
    long fewest = j->messages;
    uint64_t slowest = 0;
    for (int i = 0; i < READERS; i++) {
        if (readers[i].next < fewest) fewest = readers[i].next;
        if (readers[i].done_ns > slowest) slowest = readers[i].done_ns;
    }
    j->v[PV_PUB_RATE] = m / ((double)(pub_done - t0) / 1e9);
    j->v[PV_DELIVERED] = (double)fewest / m;
    if (fewest == j->messages)
        j->v[PV_READ_RATE] = m / ((double)(slowest - t0) / 1e9);
    if (j->slow_closed) {
        j->v[PV_SLOW_GONE_S] = (double)(closed_at - t0) / 1e9;
        /* What the server owed it by then, in MB as Redis counts them. */
        j->v[PV_SLOW_GONE_MB] =
            (double)closed_after * (double)frame_len / (1 << 20);
    }
    if (cpu1 > cpu0) j->v[PV_CPU_US] = (double)(cpu1 - cpu0) / 1e3 / m;
    j->v[PV_CLIENT_BUSY] =
        (double)(thread1 - thread0) / (double)(all_done - t0);
    return rc;
}

static void *client(void *arg) {
    ps_job *j = arg;
    sub readers[READERS];
    int slow = -1, control = serve_client_connect(j->port);
    pub p = {.fd = -1, .out = malloc((size_t)WINDOW * req_len)};
    int rc = control >= 0 && p.out ? 0 : -EIO;
    for (int i = 0; i < READERS; i++) {
        memset(&readers[i], 0, sizeof readers[i]);
        readers[i].fd = rc == 0 ? subscribe(j->port) : -1;
        if (readers[i].fd < 0)
            rc = -EIO;
        else
            set_nonblocking(readers[i].fd);
    }
    if (rc == 0 && (slow = subscribe(j->port)) < 0) rc = -EIO;
    if (rc == 0 && (p.fd = serve_client_connect(j->port)) < 0) rc = -EIO;
    if (rc < 0) {
        snprintf(j->why, sizeof j->why, "cannot connect and subscribe");
    } else {
        set_nonblocking(p.fd);
        j->rss0_kb = serve_status_field(j->pid, "VmRSS");
        rc = run(j, readers, control, &p);
    }
    for (int i = 0; i < READERS; i++)
        if (readers[i].fd >= 0) close(readers[i].fd);
    if (slow >= 0) close(slow);
    if (p.fd >= 0) close(p.fd);
    if (control >= 0) close(control);
    free(p.out);
    return (void *)(intptr_t)rc;
}

static int measure(lab_fig *f, lab_row *row, int round, double *v) {
    (void)round;
    const long *messages = f->ctx;
    int s = (int)row->tag;
    server srv;
    bool ok = s == S_KV ? serve_start_kv(&srv, NULL, serve_cpu_server)
                        : serve_start_redis(&srv, 0, serve_cpu_server, -1);
    if (!ok) {
        printf("pub/sub, %s: %s\n", server_name[s], srv.why);
        return -EIO;
    }
    ps_job j = {
        .port = srv.port, .pid = srv.pid, .messages = *messages, .v = v};
    int rc = serve_run_pinned(serve_cpu_client, client, &j);
    long long hwm = serve_status_field(srv.pid, "VmHWM");
    serve_server_stop(&srv);
    if (rc < 0) {
        printf("pub/sub, %s: %s\n", server_name[s],
               j.why[0] ? j.why : strerror(-rc));
        return rc;
    }
    if (hwm >= 0) {
        v[PV_PEAK_MB] = (double)hwm / 1024;
        if (j.rss0_kb >= 0) v[PV_GROWTH_MB] = (double)(hwm - j.rss0_kb) / 1024;
    }
    if (v[PV_DELIVERED] < 1)
        printf("pub/sub, %s: a reader got %.1f%% of the messages\n",
               server_name[s], 100 * v[PV_DELIVERED]);
    if (!j.slow_closed)
        printf("pub/sub, %s: the subscriber that never reads was not "
               "closed\n",
               server_name[s]);
    return 0;
}

int serve_pubsub(const lab_options *opts, lab_json *json, lab_table *brief) {
    static long messages;
    messages = opts->quick ? QUICK_MESSAGES : MESSAGES;
    frames_init();
    int rounds = lab_rounds(opts, 3, 1);
    lab_detail("\npub/sub: a publisher (%d PUBLISH of %d bytes in flight, "
               "%ld messages), %d subscribers that read every message and "
               "one that never reads, on one channel; a fresh server each "
               "run, its default pubsub output limit (32 MB hard, 8 MB for "
               "60 s); the clients on one thread of lull-lab on the client "
               "CPU; %d round%s\n",
               WINDOW, PAYLOAD, messages, READERS, rounds,
               rounds == 1 ? "" : "s");
    lab_fig_spec spec = {"pubsub",
                         "serve: pub/sub, a subscriber that never "
                         "reads",
                         NULL,
                         cols,
                         PV_COUNT,
                         PV_READ_RATE,
                         0,
                         measure,
                         NULL,
                         NULL,
                         &messages};
    lab_fig *f = lab_fig_new(&spec);
    if (!f) return -ENOMEM;
    for (int s = 0; s < SERVERS; s++)
        lab_fig_add(f, s == S_KV ? "lull" : "redis-server",
                    s == S_KV ? LAB_ROW_LULL | LAB_ROW_BASE : 0, "%s",
                    server_name[s])
            ->tag = s;
    lab_fig_run(f, opts, rounds);
    int rc = lab_fig_error(f);
    if (rc == 0) {
        lab_fig_print(f);
        const lab_row *kv = &f->rows[S_KV], *redis = &f->rows[S_REDIS];
        char label[64];
        snprintf(label, sizeof label, "pub/sub: msg/s, slowest of %d readers",
                 READERS);
        serve_brief_row(brief, label, lab_row_median(kv, PV_READ_RATE),
                        lab_row_median(redis, PV_READ_RATE),
                        lab_ratio(f, kv, redis, PV_READ_RATE));
        serve_brief_row(brief, "pub/sub: server peak RSS, MB",
                        lab_row_median(kv, PV_PEAK_MB),
                        lab_row_median(redis, PV_PEAK_MB),
                        lab_ratio(f, kv, redis, PV_PEAK_MB));
        serve_brief_row(brief, "pub/sub: non-reader closed after MB",
                        lab_row_median(kv, PV_SLOW_GONE_MB),
                        lab_row_median(redis, PV_SLOW_GONE_MB), NAN);
        lab_fig_json(f, json);
    }
    lab_fig_free(f);
    return rc;
}
