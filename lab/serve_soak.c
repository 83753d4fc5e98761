/* `lull-lab soak`'s serve entry (lab/soak.h), beside the scenario's own
 * files: lull-kv kept across the soak's runs, every reply checked. */
#include "serve.h"
#include "soak.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* `lull-lab soak`'s serve entry (lab/soak.h): one lull-kv kept across the
 * runs, started by the first and stopped by lab_serve_soak_end, so its own
 * fds and RSS are watched across the runs like the soak's. Each run
 * writes, reads back, counts and deletes its own keys, "soak:<run>:<i>",
 * and leaves the keyspace empty, which the next run checks first.
 *
 * lull-kv's write log keeps every write for the life of the process
 * (docs/KV.md): a long soak would hold GBs. So once the runs have sent
 * SOAK_LOG_LIMIT bytes of requests to one lull-kv, its fds are checked as
 * at the end and a fresh one takes over (a new warm-up). */
#define SOAK_LOG_LIMIT (256ull << 20)

static struct {
    server srv;
    bool started;
    uint64_t runs;      /* runs in all */
    uint64_t life_runs; /* runs on this lull-kv */
    uint64_t sent;      /* bytes of requests sent to this lull-kv */
    int lives;          /* lull-kv processes started */
    long rss_kb[2];     /* after the first run (warm-up), at the end */
    int fds[2];         /* the same */
    long long log_b[2]; /* the write log's length (master_repl_offset) */
} kvs;

/* A buffered reader of one connection's replies. */
typedef struct reply_reader {
    int fd;
    size_t pos, len;
    char buf[65536];
} reply_reader;

static int rr_byte(reply_reader *r, char *c) {
    if (r->pos == r->len) {
        ssize_t n;
        do
            n = recv(r->fd, r->buf, sizeof r->buf, 0);
        while (n < 0 && errno == EINTR);
        if (n <= 0) return -1;
        r->pos = 0;
        r->len = (size_t)n;
    }
    *c = r->buf[r->pos++];
    return 0;
}

/* A line without its CRLF into out (truncated to size-1); 0 or -1. */
static int rr_line(reply_reader *r, char *out, size_t size) {
    size_t n = 0;
    for (char c;;) {
        if (rr_byte(r, &c) < 0) return -1;
        if (c == '\n') break;
        if (n + 1 < size) out[n++] = c;
    }
    if (n > 0 && out[n - 1] == '\r') n--;
    out[n] = '\0';
    return 0;
}

static int rr_bytes(reply_reader *r, char *out, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (rr_byte(r, &out[i]) < 0) return -1;
    return 0;
}

#define SOAK_CONNS     4
#define SOAK_DEPTH     64
#define SOAK_VALUE_MAX 2000
#define SOAK_HEADER    24 /* "%08x%08x%08x": run, key, checksum */

static uint32_t fnv1a(const char *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 16777619u;
    return h;
}

/* Key i's value in this run: random bytes (any byte, CR and LF too) from
 * its own seed; from SOAK_HEADER bytes on, headed by the run, the key and
 * a checksum of the rest, so a wrong reply says whose value it carries. */
static void soak_value(uint64_t run, uint64_t run_seed, int i, size_t len,
                       char *out) {
    uint64_t st = (run_seed ^ ((uint64_t)i * 0x9E3779B97F4A7C15ull)) | 1;
    size_t from = len >= SOAK_HEADER ? SOAK_HEADER : 0;
    for (size_t k = from; k < len; k++)
        out[k] = (char)(lab_rand(&st) >> 56);
    if (from) {
        char head[SOAK_HEADER + 1];
        snprintf(head, sizeof head, "%08x%08x%08x", (unsigned)run, (unsigned)i,
                 fnv1a(out + from, len - from));
        memcpy(out, head, SOAK_HEADER);
    }
}

enum { PH_SET, PH_GET, PH_DEL_EVEN, PH_EXISTS, PH_DEL_ODD };
static const char *const phase_name[] = {"SET", "GET", "DEL", "EXISTS", "DEL"};

typedef struct soak_run {
    uint64_t run, seed;
    int keys, conns, depth;
    uint16_t *len; /* each key's value length */
    long long count[SOAK_CONNS];
    int fd[SOAK_CONNS];
    reply_reader *rd[SOAK_CONNS];
    char *out;   /* one connection's window of requests */
    char *value; /* expected, then received */
    char *got;
    lab_soak_result *res;
} soak_run;

static size_t put_bulk(char *out, const char *p, size_t n) {
    size_t h = (size_t)sprintf(out, "$%zu\r\n", n);
    memcpy(out + h, p, n);
    memcpy(out + h + n, "\r\n", 2);
    return h + n + 2;
}

static size_t put_command(char *out, const char *cmd, const char *key,
                          const char *value, size_t vlen) {
    size_t n = (size_t)sprintf(out, "*%d\r\n", value ? 3 : 2);
    n += put_bulk(out + n, cmd, strlen(cmd));
    n += put_bulk(out + n, key, strlen(key));
    if (value) n += put_bulk(out + n, value, vlen);
    return n;
}

static int soak_fault(soak_run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int soak_fault(soak_run *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->res->why, sizeof r->res->why, fmt, ap);
    va_end(ap);
    return -EPROTO;
}

/* Reads one reply line and checks it is exactly want. */
static int expect_line(soak_run *r, int c, const char *want, const char *what) {
    char line[128];
    if (rr_line(r->rd[c], line, sizeof line) < 0)
        return soak_fault(r, "%s: connection %d closed or timed out", what, c);
    if (strcmp(line, want) != 0)
        return soak_fault(r, "%s: reply \"%.60s\", expected \"%s\"", what, line,
                          want);
    r->res->verified++;
    return 0;
}

static int expect_int(soak_run *r, int c, long long n, const char *what) {
    char want[32];
    snprintf(want, sizeof want, ":%lld", n);
    return expect_line(r, c, want, what);
}

/* Reads a bulk reply and checks it byte for byte against want; a value
 * with a header that differs is described by what it carries. */
static int expect_bulk(soak_run *r, int c, const char *want, size_t n,
                       const char *what) {
    char line[64];
    if (rr_line(r->rd[c], line, sizeof line) < 0)
        return soak_fault(r, "%s: connection %d closed or timed out", what, c);
    char *end;
    long long len = line[0] == '$' ? strtoll(line + 1, &end, 10) : -2;
    if (len < 0 || *end)
        return soak_fault(r, "%s: reply \"%.60s\", expected a %zu-byte bulk",
                          what, line, n);
    if ((size_t)len != n)
        return soak_fault(r, "%s: %lld bytes, expected %zu", what, len, n);
    char crlf[2];
    if (rr_bytes(r->rd[c], r->got, n) < 0 || rr_bytes(r->rd[c], crlf, 2) < 0)
        return soak_fault(r, "%s: connection %d closed or timed out", what, c);
    if (memcmp(crlf, "\r\n", 2) != 0)
        return soak_fault(r, "%s: no CRLF after the %zu bytes", what, n);
    if (memcmp(r->got, want, n) == 0) {
        r->res->verified++;
        return 0;
    }
    if (n < SOAK_HEADER)
        return soak_fault(r, "%s: %zu bytes differ from those written", what,
                          n);
    unsigned run = 0, key = 0, sum = 0;
    char head[SOAK_HEADER + 1];
    memcpy(head, r->got, SOAK_HEADER);
    head[SOAK_HEADER] = '\0';
    sscanf(head, "%8x%8x%8x", &run, &key, &sum);
    uint32_t actual = fnv1a(r->got + SOAK_HEADER, n - SOAK_HEADER);
    return soak_fault(r,
                      "%s: value differs: it carries run %u key %u, checksum "
                      "%s",
                      what, run, key, actual == sum ? "good" : "bad");
}

static void soak_key(const soak_run *r, int i, char *out, size_t size) {
    snprintf(out, size, "soak:%llu:%d", (unsigned long long)r->run, i);
}

/* One phase over every key it applies to, key i on connection i % conns:
 * each connection gets a window of up to depth requests, then every
 * window's replies are read and checked, in order. */
static int soak_phase(soak_run *r, int ph) {
    int next[SOAK_CONNS], pend[SOAK_CONNS][SOAK_DEPTH], npend[SOAK_CONNS];
    for (int c = 0; c < r->conns; c++)
        next[c] = c;
    char key[48], what[96];
    for (bool more = true; more;) {
        more = false;
        for (int c = 0; c < r->conns; c++) {
            size_t used = 0;
            npend[c] = 0;
            for (; next[c] < r->keys && npend[c] < r->depth;
                 next[c] += r->conns) {
                int i = next[c];
                if ((ph == PH_DEL_EVEN && i % 2) ||
                    (ph == PH_DEL_ODD && !(i % 2)))
                    continue;
                soak_key(r, i, key, sizeof key);
                if (ph == PH_SET) {
                    soak_value(r->run, r->seed, i, r->len[i], r->value);
                    used += put_command(r->out + used, "SET", key, r->value,
                                        r->len[i]);
                    char counter[48];
                    snprintf(counter, sizeof counter, "soak:%llu:count:%d",
                             (unsigned long long)r->run, c);
                    used +=
                        put_command(r->out + used, "INCR", counter, NULL, 0);
                } else {
                    used += put_command(r->out + used,
                                        ph == PH_GET      ? "GET"
                                        : ph == PH_EXISTS ? "EXISTS"
                                                          : "DEL",
                                        key, NULL, 0);
                }
                pend[c][npend[c]++] = i;
            }
            if (npend[c] == 0) continue;
            more |= next[c] < r->keys;
            kvs.sent += used;
            if (serve_send_all(r->fd[c], r->out, used) < 0)
                return soak_fault(r, "%s: send on connection %d failed",
                                  phase_name[ph], c);
        }
        for (int c = 0; c < r->conns; c++)
            for (int k = 0; k < npend[c]; k++) {
                int i = pend[c][k], rc;
                soak_key(r, i, key, sizeof key);
                snprintf(what, sizeof what, "%s %s (%u bytes)", phase_name[ph],
                         key, (unsigned)r->len[i]);
                if (ph == PH_SET) {
                    rc = expect_line(r, c, "+OK", what);
                    if (rc == 0) {
                        snprintf(what, sizeof what,
                                 "INCR soak:%llu:count:%d after %s",
                                 (unsigned long long)r->run, c, key);
                        rc = expect_int(r, c, ++r->count[c], what);
                    }
                } else if (ph == PH_GET) {
                    soak_value(r->run, r->seed, i, r->len[i], r->value);
                    rc = expect_bulk(r, c, r->value, r->len[i], what);
                } else if (ph == PH_EXISTS) {
                    rc = expect_int(r, c, i % 2, what); /* evens deleted */
                } else {
                    rc = expect_int(r, c, 1, what);
                }
                if (rc < 0) return rc;
            }
    }
    return 0;
}

static int soak_dbsize(soak_run *r, long long want, const char *when) {
    static const char req[] = "*1\r\n$6\r\nDBSIZE\r\n";
    if (serve_send_all(r->fd[0], req, sizeof req - 1) < 0)
        return soak_fault(r, "DBSIZE %s: send failed", when);
    char what[64];
    snprintf(what, sizeof what, "DBSIZE %s", when);
    return expect_int(r, 0, want, what);
}

/* The counters: GET each (the number of SETs its connection made), then
 * DEL it. */
static int soak_counters(soak_run *r, bool del) {
    for (int c = 0; c < r->conns; c++) {
        char counter[48], want[24], what[80];
        snprintf(counter, sizeof counter, "soak:%llu:count:%d",
                 (unsigned long long)r->run, c);
        size_t n = put_command(r->out, del ? "DEL" : "GET", counter, NULL, 0);
        if (serve_send_all(r->fd[0], r->out, n) < 0)
            return soak_fault(r, "GET %s: send failed", counter);
        snprintf(what, sizeof what, "%s %s", del ? "DEL" : "GET", counter);
        int len = snprintf(want, sizeof want, "%lld", r->count[c]);
        int rc = del ? expect_int(r, 0, 1, what)
                     : expect_bulk(r, 0, want, (size_t)len, what);
        if (rc < 0) return rc;
    }
    return 0;
}

/* The text of `INFO <section>` from fd; 0 or -1. */
static int kv_info(int fd, const char *section, char *buf, size_t size) {
    char req[64];
    int n = snprintf(req, sizeof req, "*2\r\n$4\r\nINFO\r\n$%zu\r\n%s\r\n",
                     strlen(section), section);
    if (serve_send_all(fd, req, (size_t)n) < 0) return -1;
    reply_reader *r = malloc(sizeof *r);
    if (!r) return -1;
    r->fd = fd;
    r->pos = r->len = 0;
    char head[32];
    int rc = rr_line(r, head, sizeof head);
    long len = rc == 0 && head[0] == '$' ? strtol(head + 1, NULL, 10) : -1;
    /* One reply at a time: nothing follows it in the reader. */
    if (len < 0 || (size_t)len + 2 > size ||
        rr_bytes(r, buf, (size_t)len + 2) < 0)
        rc = -1;
    else
        buf[len] = '\0';
    free(r);
    return rc;
}

/* lull-kv's RSS, open fds and write log, read once it has closed every
 * connection but the one asking (connected_clients:1, up to 2 s): a
 * client's close reaches it a moment after ours. */
static int kv_measure(long *rss_kb, int *fds, long long *log_b) {
    int fd = serve_client_connect(kvs.srv.port);
    if (fd < 0) return -1;
    char text[4096];
    for (int waited = 0; waited < 2000; waited += 2) {
        if (kv_info(fd, "clients", text, sizeof text) < 0) break;
        if (serve_info_number(text, "connected_clients") == 1) break;
        serve_sleep_ms(2);
    }
    *log_b = kv_info(fd, "replication", text, sizeof text) == 0
                 ? serve_info_number(text, "master_repl_offset")
                 : -1;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/statm", (int)kvs.srv.pid);
    long pages = 0, resident = -1;
    FILE *f = fopen(path, "r");
    if (!f || fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
    if (f) fclose(f);
    *rss_kb = resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
    snprintf(path, sizeof path, "/proc/%d/fd", (int)kvs.srv.pid);
    DIR *d = opendir(path);
    *fds = -1;
    if (d) {
        *fds = 0;
        for (struct dirent *e; (e = readdir(d));)
            if (e->d_name[0] != '.') (*fds)++;
        closedir(d);
    }
    close(fd);
    return 0;
}

/* Measures this lull-kv against its warm-up, prints the figures when print,
 * and stops it. -EPROTO when its open fds changed. */
static int kv_life_end(lab_soak_result *out, bool print) {
    int rc = 0;
    if (kvs.life_runs > 0 &&
        kv_measure(&kvs.rss_kb[1], &kvs.fds[1], &kvs.log_b[1]) == 0) {
        /* RSS gets no verdict: the write log holds every SET, INCR and DEL
         * (docs/KV.md), so lull-kv's memory grows with the runs by design;
         * the log's growth is printed beside it. Its fds must not grow by
         * one. */
        if (print)
            printf("  lull-kv          RSS %.1f MB -> %.1f MB, write log "
                   "%.1f -> %.1f MB (kept by design: not compared); open fds "
                   "%d -> %d; %d process%s (a fresh one every %llu MB of "
                   "requests)\n",
                   (double)kvs.rss_kb[0] / 1024, (double)kvs.rss_kb[1] / 1024,
                   (double)kvs.log_b[0] / 1048576,
                   (double)kvs.log_b[1] / 1048576, kvs.fds[0], kvs.fds[1],
                   kvs.lives, kvs.lives == 1 ? "" : "es", SOAK_LOG_LIMIT >> 20);
        if (kvs.fds[1] != kvs.fds[0]) {
            snprintf(out->why, sizeof out->why,
                     "lull-kv's open fds %d -> %d after its warm-up",
                     kvs.fds[0], kvs.fds[1]);
            rc = -EPROTO;
        }
    }
    serve_server_stop(&kvs.srv);
    kvs.started = false;
    return rc;
}

int lab_serve_soak(uint64_t *seed, lab_soak_result *out) {
    memset(out, 0, sizeof *out);
    if (kvs.started && kvs.sent >= SOAK_LOG_LIMIT) {
        int rc = kv_life_end(out, false);
        if (rc < 0) return rc;
    }
    if (!kvs.started) {
        char why[sizeof serve_kv_path + 64];
        if (!serve_kv_available(why, sizeof why)) {
            snprintf(out->why, sizeof out->why, "lull-kv %.200s", why);
            return LAB_SOAK_SKIPPED;
        }
        if (kvs.lives == 0) serve_guard_children(true);
        if (!serve_start_kv(&kvs.srv, NULL, -1)) {
            snprintf(out->why, sizeof out->why, "lull-kv: %s", kvs.srv.why);
            if (kvs.lives == 0) serve_guard_children(false);
            return -EIO;
        }
        kvs.started = true;
        kvs.lives++;
        kvs.life_runs = 0;
        kvs.sent = 0;
    }
    soak_run r = {.run = kvs.runs, .seed = lab_rand(seed), .res = out};
    /* Many small runs, some large: keys 100–5,000 and the longest value
     * 0–2,000 bytes, each skewed low (a random bound, then a value under
     * it), since lull-kv keeps every write in its log (docs/KV.md). */
    r.keys = 100 + (int)(lab_rand(seed) % (1 + lab_rand(seed) % 4901));
    r.conns = 1 + (int)(lab_rand(seed) % SOAK_CONNS);
    r.depth = 1 + (int)(lab_rand(seed) % SOAK_DEPTH);
    int vmax =
        (int)(lab_rand(seed) % (1 + lab_rand(seed) % (SOAK_VALUE_MAX + 1)));
    r.len = malloc((size_t)r.keys * sizeof *r.len);
    r.out = malloc((size_t)SOAK_DEPTH * (SOAK_VALUE_MAX + 256));
    r.value = malloc(SOAK_VALUE_MAX);
    r.got = malloc(SOAK_VALUE_MAX);
    for (int c = 0; c < SOAK_CONNS; c++)
        r.fd[c] = -1;
    int rc = r.len && r.out && r.value && r.got ? 0 : -ENOMEM;
    for (int i = 0; rc == 0 && i < r.keys; i++)
        r.len[i] = (uint16_t)(lab_rand(seed) % ((uint64_t)vmax + 1));
    snprintf(out->sizes, sizeof out->sizes,
             "%d keys, values 0-%d bytes, %d connection%s, pipeline %d", r.keys,
             vmax, r.conns, r.conns == 1 ? "" : "s", r.depth);
    for (int c = 0; rc == 0 && c < r.conns; c++) {
        r.rd[c] = malloc(sizeof *r.rd[c]);
        r.fd[c] = serve_client_connect(kvs.srv.port);
        if (!r.rd[c] || r.fd[c] < 0) {
            rc = serve_exited(kvs.srv.pid) ? -ECHILD : -ECONNREFUSED;
            snprintf(out->why, sizeof out->why, "lull-kv: %s",
                     rc == -ECHILD ? "exited" : "refused a connection");
            break;
        }
        r.rd[c]->fd = r.fd[c];
        r.rd[c]->pos = r.rd[c]->len = 0;
    }
    if (rc == 0) rc = soak_dbsize(&r, 0, "before the run (the last left none)");
    if (rc == 0) rc = soak_phase(&r, PH_SET);
    if (rc == 0) rc = soak_counters(&r, false);
    if (rc == 0) rc = soak_phase(&r, PH_GET);
    if (rc == 0) rc = soak_counters(&r, true);
    if (rc == 0) rc = soak_phase(&r, PH_DEL_EVEN);
    if (rc == 0) rc = soak_dbsize(&r, r.keys / 2, "after deleting the evens");
    if (rc == 0) rc = soak_phase(&r, PH_EXISTS);
    if (rc == 0) rc = soak_phase(&r, PH_DEL_ODD);
    if (rc == 0) rc = soak_dbsize(&r, 0, "after deleting all");
    for (int c = 0; c < SOAK_CONNS; c++) {
        if (r.fd[c] >= 0) close(r.fd[c]);
        free(r.rd[c]);
    }
    free(r.len);
    free(r.out);
    free(r.value);
    free(r.got);
    kvs.runs++;
    if (rc == 0 && kvs.life_runs++ == 0 &&
        kv_measure(&kvs.rss_kb[0], &kvs.fds[0], &kvs.log_b[0]) < 0) {
        snprintf(out->why, sizeof out->why,
                 "lull-kv: INFO after warm-up failed");
        rc = -EIO;
    }
    return rc;
}

int lab_serve_soak_end(lab_soak_result *out) {
    memset(out, 0, sizeof *out);
    int rc = kvs.started ? kv_life_end(out, true) : 0;
    if (kvs.lives > 0) serve_guard_children(false);
    return rc;
}
