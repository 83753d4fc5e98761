/* cmd.c: lull-kv's commands (see cmd.h). One thread, the loop's, runs
 * them; nothing here blocks or knows of sockets.
 *
 * The rule that keeps replicas equal to their primary: a write is logged
 * exactly when it changed the keyspace, as the request that repeats it (a
 * DEL that found nothing and an INCR refused are not logged; FLUSHDB is
 * logged as FLUSHALL, its equal with one database), and it is run only
 * once room for its record is reserved, so it can never be applied and
 * then fail to be logged. A replica runs the records with the same code
 * (the w_* functions below), so the same record on the same keyspace gives
 * the same keyspace. */
#include "cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------- buffers */

bool buf_reserve(buf *b, size_t more) {
    if (b->cap - b->len >= more) return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < more)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

void buf_put(buf *b, const void *p, size_t n) {
    if (!buf_reserve(b, n)) {
        b->oom = true;
        return;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

void buf_str(buf *b, const char *s) {
    buf_put(b, s, strlen(s));
}

/* By hand rather than snprintf: every GET reply has one (its "$len"), and
 * snprintf's format parsing cost more than the rest of the reply. */
void buf_int(buf *b, char tag, long long v) {
    char tmp[24]; /* tag, sign, 19 digits, CRLF */
    char *e = tmp + sizeof tmp, *q = e;
    *--q = '\n';
    *--q = '\r';
    unsigned long long u =
        v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do {
        *--q = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *--q = '-';
    *--q = tag;
    buf_put(b, q, (size_t)(e - q));
}

void buf_bulk(buf *b, const char *p, size_t n) {
    buf_int(b, '$', (long long)n);
    buf_put(b, p, n);
    buf_put(b, "\r\n", 2);
}

bool buf_reserve_upto(buf *b, size_t more, size_t want) {
    if (b->cap - b->len >= more) return true;
    /* The size the buffer will need, in one step: a large argument is
     * received into its final place, with no realloc moving it on the
     * way (the memory is only touched as the bytes arrive). */
    size_t cap = want > b->len + more ? want : b->len + more;
    if (cap < 4096) cap = 4096;
    char *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}

void buf_consume(buf *b, size_t n) {
    if (n == 0) return;
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

void buf_shrink(buf *b, size_t keep) {
    if (b->cap <= keep || b->len > b->cap / 4) return;
    if (b->len == 0) {
        buf_free(b);
        return;
    }
    size_t cap = b->len * 2 > keep ? b->len * 2 : keep;
    char *p = realloc(b->p, cap);
    if (!p) return; /* it stays as it was: still correct */
    b->p = p;
    b->cap = cap;
}

void buf_free(buf *b) {
    free(b->p);
    *b = (buf){0};
}

/* ------------------------------------------------------------ keyspace */

void kv_init(kv *k) {
    memset(k, 0, sizeof *k);
    repl_log_init(&k->log);
    k->peers.next = k->peers.prev = &k->peers;
}

void kv_free(kv *k) {
    store_free(&k->db);
    repl_log_free(&k->log);
}

bool kv_parse_i64(const char *p, size_t n, long long *out) {
    /* At most a sign and 19 digits: INT64_MIN is "-9223372036854775808". */
    if (n == 0 || n > 20) return false;
    bool neg = p[0] == '-';
    size_t i = neg;
    if (i == n) return false;
    /* "0" alone; otherwise the first digit is 1-9 ("007", "-0" refused,
     * as Redis refuses them). */
    if (p[i] == '0') {
        if (n != 1) return false;
        *out = 0;
        return true;
    }
    unsigned long long v = 0;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return false;
        unsigned d = (unsigned)(p[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (unsigned long long)INT64_MAX + 1) return false;
        *out =
            v == (unsigned long long)INT64_MAX + 1 ? INT64_MIN : -(long long)v;
    } else {
        if (v > (unsigned long long)INT64_MAX) return false;
        *out = (long long)v;
    }
    return true;
}

/* The writes, shared by a primary's clients and a replica's log. */

static int w_incr(kv *k, const resp_arg *key, long long *res) {
    size_t vlen;
    const char *v = store_get(&k->db, key->p, key->len, &vlen);
    long long n = 0;
    if (v && !kv_parse_i64(v, vlen, &n)) return -EINVAL;
    if (n == INT64_MAX) return -ERANGE;
    char tmp[32];
    int len = snprintf(tmp, sizeof tmp, "%lld", n + 1);
    if (store_set(&k->db, key->p, key->len, tmp, (size_t)len) < 0)
        return -ENOMEM;
    *res = n + 1;
    return 0;
}

static long long w_del(kv *k, const resp_arg *keys, size_t n) {
    long long gone = 0;
    for (size_t i = 0; i < n; i++)
        gone += store_del(&k->db, keys[i].p, keys[i].len);
    return gone;
}

/* ------------------------------------------------------------ commands */

static void wrong_args(buf *out, const resp_arg *cmd) {
    buf_str(out, "-ERR wrong number of arguments for '");
    buf_put(out, cmd->p, cmd->len > 64 ? 64 : cmd->len);
    buf_str(out, "' command\r\n");
}

static void unknown(buf *out, const resp_arg *cmd) {
    buf_str(out, "-ERR unknown command '");
    /* Echo at most 64 printable bytes: the reply is one line. */
    for (size_t i = 0; i < cmd->len && i < 64; i++) {
        char c = cmd->p[i];
        buf_put(out, (c >= 0x20 && c < 0x7f) ? &c : "?", 1);
    }
    buf_str(out, "'\r\n");
}

/* CONFIG GET: what a server without persistence says for the parameters
 * redis-benchmark and redis-cli ask about at start-up, and the limits the
 * server was started with (k->config); others are unknown (an empty
 * reply, as Redis gives for a name that matches nothing). */
static void config_get(const kv *k, buf *out, const resp_arg *name) {
    static const char *const fixed[][2] = {{"save", ""}, {"appendonly", "no"}};
    const char *match[2 * 8];
    size_t n = 0;
    for (size_t i = 0; i < 2 + k->nconfig && n < 16; i++) {
        const char *const *p = i < 2 ? fixed[i] : k->config[i - 2];
        if (resp_is(name, "*") || resp_is(name, p[0])) {
            match[n++] = p[0];
            match[n++] = p[1];
        }
    }
    buf_int(out, '*', (long long)n);
    for (size_t i = 0; i < n; i++)
        buf_bulk(out, match[i], strlen(match[i]));
}

static bool is_write(const resp_arg *cmd) {
    return resp_is(cmd, "SET") || resp_is(cmd, "DEL") || resp_is(cmd, "INCR") ||
           resp_is(cmd, "FLUSHALL") || resp_is(cmd, "FLUSHDB");
}

/* Reserves room in the primary's log for the record a write would add;
 * true on a replica (nothing is logged there). */
static bool log_room(kv *k, const resp_arg *a, size_t argc, buf *out) {
    if (k->replica) return true;
    if (repl_log_reserve(&k->log, repl_record_len(a, argc)) == 0) return true;
    buf_str(out, "-OOM out of memory\r\n");
    return false;
}

static void log_write(kv *k, const resp_arg *a, size_t argc) {
    if (!k->replica) repl_log_append(&k->log, a, argc);
}

static void run_write(kv *k, const resp_arg *a, size_t argc, buf *out) {
    if (resp_is(&a[0], "SET")) {
        if (argc != 3) { /* plain SET only: no EX, NX, ... */
            wrong_args(out, &a[0]);
            return;
        }
        if (!log_room(k, a, argc, out)) return;
        if (store_set(&k->db, a[1].p, a[1].len, a[2].p, a[2].len) < 0) {
            buf_str(out, "-OOM out of memory\r\n");
            return;
        }
        log_write(k, a, argc);
        buf_str(out, "+OK\r\n");
    } else if (resp_is(&a[0], "DEL")) {
        if (argc < 2) {
            wrong_args(out, &a[0]);
            return;
        }
        if (!log_room(k, a, argc, out)) return;
        long long n = w_del(k, a + 1, argc - 1);
        if (n) log_write(k, a, argc);
        buf_int(out, ':', n);
    } else if (resp_is(&a[0], "INCR")) {
        if (argc != 2) {
            wrong_args(out, &a[0]);
            return;
        }
        if (!log_room(k, a, argc, out)) return;
        long long n;
        int rc = w_incr(k, &a[1], &n);
        if (rc == -EINVAL) {
            buf_str(out, "-ERR value is not an integer or out of range\r\n");
            return;
        }
        if (rc == -ERANGE) {
            buf_str(out, "-ERR increment or decrement would overflow\r\n");
            return;
        }
        if (rc < 0) {
            buf_str(out, "-OOM out of memory\r\n");
            return;
        }
        log_write(k, a, argc);
        buf_int(out, ':', n);
    } else { /* FLUSHALL, FLUSHDB */
        static const resp_arg flushall = {"FLUSHALL", 8};
        if (!log_room(k, &flushall, 1, out)) return;
        store_clear(&k->db);
        log_write(k, &flushall, 1);
        buf_str(out, "+OK\r\n");
    }
}

int kv_exec(kv *k, const resp_arg *a, size_t argc, buf *out) {
    store *db = &k->db;
    if (is_write(&a[0])) {
        if (k->replica)
            buf_str(out, KV_READONLY_ERR "\r\n");
        else
            run_write(k, a, argc, out);
    } else if (resp_is(&a[0], "PING")) {
        if (argc == 1)
            buf_str(out, "+PONG\r\n");
        else if (argc == 2)
            buf_bulk(out, a[1].p, a[1].len);
        else
            wrong_args(out, &a[0]);
    } else if (resp_is(&a[0], "ECHO")) {
        if (argc != 2) {
            wrong_args(out, &a[0]);
            return 0;
        }
        buf_bulk(out, a[1].p, a[1].len);
    } else if (resp_is(&a[0], "GET")) {
        if (argc != 2) {
            wrong_args(out, &a[0]);
            return 0;
        }
        size_t vlen;
        const char *v = store_get(db, a[1].p, a[1].len, &vlen);
        if (v)
            buf_bulk(out, v, vlen);
        else
            buf_str(out, "$-1\r\n");
    } else if (resp_is(&a[0], "EXISTS")) {
        if (argc < 2) {
            wrong_args(out, &a[0]);
            return 0;
        }
        long long n = 0;
        for (size_t i = 1; i < argc; i++) {
            size_t vlen;
            n += store_get(db, a[i].p, a[i].len, &vlen) != NULL;
        }
        buf_int(out, ':', n);
    } else if (resp_is(&a[0], "DBSIZE")) {
        buf_int(out, ':', (long long)db->count);
    } else if (resp_is(&a[0], "INFO")) {
        if (argc > 2) {
            wrong_args(out, &a[0]);
            return 0;
        }
        kv_info(k, argc == 2 ? &a[1] : NULL, out);
    } else if (resp_is(&a[0], "QUIT")) {
        buf_str(out, "+OK\r\n");
        return KV_QUIT;
    } else if (resp_is(&a[0], "COMMAND")) {
        /* redis-cli asks for COMMAND DOCS to offer hints; it copes with an
         * empty answer. */
        buf_str(out, "*0\r\n");
    } else if (resp_is(&a[0], "CONFIG")) {
        if (argc == 3 && resp_is(&a[1], "GET"))
            config_get(k, out, &a[2]);
        else
            buf_str(out, "-ERR CONFIG: only CONFIG GET is supported\r\n");
    } else {
        unknown(out, &a[0]);
    }
    return 0;
}

/* ---------------------------------------------------------- replication */

int kv_apply(kv *k, const resp_arg *a, size_t argc, const char **err) {
    if (argc == 0) {
        *err = "empty record";
        return -EPROTO;
    }
    if (resp_is(&a[0], "SET") && argc == 3) {
        if (store_set(&k->db, a[1].p, a[1].len, a[2].p, a[2].len) < 0)
            return -ENOMEM;
    } else if (resp_is(&a[0], "DEL") && argc >= 2) {
        w_del(k, a + 1, argc - 1);
    } else if (resp_is(&a[0], "INCR") && argc == 2) {
        long long n;
        int rc = w_incr(k, &a[1], &n);
        if (rc == -ENOMEM) return rc;
        if (rc < 0) {
            /* The primary ran it on the same keyspace: refused here means
             * the two have diverged. */
            *err = "INCR on a value that is not an integer";
            return -EPROTO;
        }
    } else if (resp_is(&a[0], "FLUSHALL") && argc == 1) {
        store_clear(&k->db);
    } else {
        *err = "not a logged write (SET, DEL, INCR, FLUSHALL) with its "
               "arguments";
        return -EPROTO;
    }
    return 0;
}

long kv_apply_stream(kv *k, const resp_limits *lim, resp_arg *argv,
                     const char *bytes, size_t len, const char **err,
                     size_t *need) {
    size_t off = 0;
    *need = 1;
    while (off < len) {
        /* The log holds multibulk requests only: an inline line here is
         * not lull-kv's log. */
        if (bytes[off] != '*') {
            *err = "a record that is not a multibulk request";
            return -EPROTO;
        }
        size_t argc;
        long n = resp_parse_need(lim, bytes + off, len - off, argv, &argc, err,
                                 need);
        if (n == RESP_INCOMPLETE) break;
        if (n == RESP_ERROR) return -EPROTO;
        *need = 1;
        int rc = kv_apply(k, argv, argc, err);
        if (rc == -ENOMEM) {
            *err = "out of memory";
            return rc;
        }
        if (rc < 0) return rc;
        off += (size_t)n;
        k->offset += (uint64_t)n;
    }
    return (long)off;
}

/* ---------------------------------------------------------------- INFO */

static void info_line(buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void info_line(buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    buf_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
    buf_put(b, "\r\n", 2);
}

/* The `key:value` lines of Redis's INFO, with the field names Redis uses,
 * so that tools reading Redis's INFO read lull-kv's. */
static void info_replication(const kv *k, buf *b) {
    info_line(b, "# Replication");
    if (k->replica) {
        info_line(b, "role:slave");
        info_line(b, "master_host:%s", k->master_host);
        info_line(b, "master_port:%d", k->master_port);
        info_line(b, "master_link_status:%s", k->link_up ? "up" : "down");
        info_line(b, "slave_repl_offset:%" PRIu64, k->offset);
        info_line(b, "connected_slaves:0");
        info_line(b, "master_repl_offset:%" PRIu64, k->offset);
    } else {
        info_line(b, "role:master");
        info_line(b, "connected_slaves:%zu", k->npeers);
        size_t i = 0;
        for (const repl_peer *p = k->peers.next; p != &k->peers; p = p->next)
            info_line(b,
                      "slave%zu:ip=%s,port=%d,state=online,offset=%" PRIu64
                      ",lag=0",
                      i++, p->ip, p->port, p->offset);
        info_line(b, "master_replid:%s", k->replid);
        info_line(b, "master_repl_offset:%" PRIu64, k->log.end);
    }
}

/* used_memory: the bytes malloc has handed out and not had back (heap
 * and mmap'd blocks), what Redis counts as its own; used_memory_rss: the
 * process's resident pages. */
static void info_memory(buf *b) {
    struct mallinfo2 mi = mallinfo2();
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%*s %ld", &pages) != 1) pages = 0;
        fclose(f);
    }
    info_line(b, "# Memory");
    info_line(b, "used_memory:%zu", mi.uordblks + mi.hblkhd);
    info_line(b, "used_memory_rss:%ld", pages * sysconf(_SC_PAGESIZE));
}

void kv_info(const kv *k, const resp_arg *section, buf *out) {
    bool all = !section || resp_is(section, "all") ||
               resp_is(section, "default") || resp_is(section, "everything");
    buf b = {0};
    if (all || resp_is(section, "clients")) {
        info_line(&b, "# Clients");
        info_line(&b, "connected_clients:%zu", k->clients);
    }
    if (all) info_line(&b, "%s", "");
    if (all || resp_is(section, "memory")) info_memory(&b);
    if (all) info_line(&b, "%s", "");
    if (all || resp_is(section, "replication")) info_replication(k, &b);
    if (b.oom) out->oom = true;
    buf_bulk(out, b.p ? b.p : "", b.len);
    buf_free(&b);
}
