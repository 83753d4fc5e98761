/* What the two floor servers share (lab/floor/floor.h): the options, the
 * listening socket, the counters and the protocol: RESP multibulk (what
 * redis-benchmark and lull-lab send) and inline commands (what a person
 * types into nc), answered for what redis-benchmark's default suite sends
 * (PING, GET, SET, INCR, the pushes and pops, SADD, HSET, ZADD, LRANGE,
 * MSET) with replies of the shape and size redis-server gives them, INFO
 * and CONFIG GET, and -ERR for anything else. No keyspace: one counter,
 * one list's length, a pop answers the value GET answers, a set's pops
 * find it empty (redis-benchmark adds one member, then pops it 100,000
 * times). The parser takes only what a floor needs: the command's name
 * and first three arguments. One thread. */
#ifndef _GNU_SOURCE /* test_floor's build defines it */
#define _GNU_SOURCE
#endif
#include "floor.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

floor_counts floor_n;

static const char *floor_name = "floor"; /* "lull-floor-epoll", ... */
static const char *floor_mode = "";      /* how it waits, for INFO */
static char value[512] = "xxx";          /* what GET answers */
static char get_reply[600] = "$3\r\nxxx\r\n";
static size_t get_reply_len = 9;

/* The longest argument a floor takes: its commands have short ones, so a
 * length beyond this is a client gone wrong. */
#define MAX_BULK (1L << 20)
/* Arguments in one command: MSET of redis-benchmark's suite takes 21. */
#define MAX_ARGC 1024
/* The arguments a reply looks at: LRANGE key start stop. */
#define ARGS_KEPT 4
/* The most elements an LRANGE answers: the suite asks for 600. */
#define MAX_RANGE 10000

/* ------------------------------------------------------------- buffers */

bool floor_buf_put(floor_buf *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) return false;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return true;
}

void floor_buf_consume(floor_buf *b, size_t n) {
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
}

void floor_buf_free(floor_buf *b) {
    free(b->p);
    *b = (floor_buf){0};
}

/* ------------------------------------------------------------ protocol */

typedef struct arg {
    const char *p;
    size_t len;
} arg;

/* The number and line end after a type byte ("3\r\n" of "*3\r\n"): the
 * bytes through "\r\n", 0 when the line is not all there, -1 when it is
 * not a number of at most MAX_BULK. */
static long number_line(const char *p, const char *end, long *out) {
    const char *q = p;
    long v = 0;
    while (q < end && (unsigned)(*q - '0') < 10) {
        v = v * 10 + (*q - '0');
        if (v > MAX_BULK) return -1;
        q++;
    }
    if (q < end && *q != '\r') return -1;
    if (end - q < 2) return 0;
    if (q == p || q[1] != '\n') return -1;
    *out = v;
    return q + 2 - p;
}

/* An inline command: one line, words split by spaces. */
static long inline_command(const char *p, const char *end, arg *a, int *argc) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl) return end - p > MAX_BULK ? -1 : 0;
    const char *q = p, *stop = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
    int n = 0;
    while (q < stop) {
        while (q < stop && *q == ' ')
            q++;
        const char *w = q;
        while (q < stop && *q != ' ')
            q++;
        if (q > w) {
            if (n < ARGS_KEPT) a[n] = (arg){w, (size_t)(q - w)};
            n++;
        }
    }
    *argc = n;
    return nl + 1 - p;
}

/* One command at p: its first ARGS_KEPT arguments into a[] and their count;
 * the bytes it takes, 0 when it is not all there, -1 when malformed. */
static long command(const char *p, const char *end, arg *a, int *argc) {
    if (*p != '*') return inline_command(p, end, a, argc);
    long n, len;
    long h = number_line(p + 1, end, &n);
    if (h <= 0) return h;
    if (n < 1 || n > MAX_ARGC) return -1;
    const char *q = p + 1 + h;
    for (long i = 0; i < n; i++) {
        if (q >= end) return 0;
        if (*q != '$') return -1;
        h = number_line(q + 1, end, &len);
        if (h <= 0) return h;
        q += 1 + h;
        if (end - q < len + 2) return 0;
        if (q[len] != '\r' || q[len + 1] != '\n') return -1;
        if (i < ARGS_KEPT) a[i] = (arg){q, (size_t)len};
        q += len + 2;
    }
    *argc = (int)n;
    return q - p;
}

static bool is(const arg *a, const char *name, size_t len) {
    return a->len == len && strncasecmp(a->p, name, len) == 0;
}

static bool put_bulk(floor_buf *out, const char *p, size_t len) {
    char head[32];
    int h = snprintf(head, sizeof head, "$%zu\r\n", len);
    return floor_buf_put(out, head, (size_t)h) && floor_buf_put(out, p, len) &&
           floor_buf_put(out, "\r\n", 2);
}

/* INFO: the counters, as "name:value" lines. */
static bool put_info(floor_buf *out) {
    char text[512];
    int n = snprintf(text, sizeof text,
                     "# Floor\r\nserver:%s\r\nmode:%s\r\nsyscalls:%" PRIu64
                     "\r\nwaits:%" PRIu64 "\r\nreads:%" PRIu64
                     "\r\nwrites:%" PRIu64 "\r\ncommands:%" PRIu64 "\r\n",
                     floor_name, floor_mode, floor_n.syscalls, floor_n.waits,
                     floor_n.reads, floor_n.writes, floor_n.commands);
    return put_bulk(out, text, (size_t)n);
}

#define PUT(s) floor_buf_put(out, s, sizeof s - 1)

/* What a command is answered with: redis-server's reply to what
 * redis-benchmark's default suite sends (no -r: every key and member is
 * the same literal), in shape and size. */
enum {
    REPLY_PONG,   /* +PONG, or PING's argument */
    REPLY_VALUE,  /* the value GET answers */
    REPLY_OK,     /* +OK (SET, MSET) */
    REPLY_INCR,   /* INCR's counter, 1, 2, ... */
    REPLY_PUSH,   /* the list's length after the push */
    REPLY_POP,    /* GET's value, the list one shorter */
    REPLY_ADDED,  /* :0: SADD, HSET and ZADD add the member already
                     there (redis-server's :1 to the first is as long) */
    REPLY_NIL,    /* $-1: SPOP finds the set empty */
    REPLY_EMPTY,  /* *0: ZPOPMIN finds the sorted set empty */
    REPLY_RANGE,  /* LRANGE key start stop: stop - start + 1 values */
    REPLY_INFO,   /* the counters */
    REPLY_CONFIG, /* CONFIG GET name: an empty value */
};

typedef struct known {
    const char *name;
    size_t len;
    int argc; /* the fewest arguments, the name included */
    int most; /* the most, or 0: no limit */
    int reply;
} known;

#define KNOWN(name, argc, most, reply)                                         \
    { name, sizeof name - 1, argc, most, reply }
static const known commands[] = {
    KNOWN("GET", 2, 2, REPLY_VALUE),     KNOWN("SET", 3, 0, REPLY_OK),
    KNOWN("PING", 1, 2, REPLY_PONG),     KNOWN("INCR", 2, 2, REPLY_INCR),
    KNOWN("LPUSH", 3, 0, REPLY_PUSH),    KNOWN("RPUSH", 3, 0, REPLY_PUSH),
    KNOWN("LPOP", 2, 2, REPLY_POP),      KNOWN("RPOP", 2, 2, REPLY_POP),
    KNOWN("SADD", 3, 0, REPLY_ADDED),    KNOWN("HSET", 4, 0, REPLY_ADDED),
    KNOWN("SPOP", 2, 2, REPLY_NIL),      KNOWN("ZADD", 4, 0, REPLY_ADDED),
    KNOWN("ZPOPMIN", 2, 2, REPLY_EMPTY), KNOWN("LRANGE", 4, 4, REPLY_RANGE),
    KNOWN("MSET", 3, 0, REPLY_OK),       KNOWN("INFO", 1, 0, REPLY_INFO),
    KNOWN("CONFIG", 3, 3, REPLY_CONFIG),
};

/* ":n\r\n" or "*n\r\n", the digits written without printf. */
static bool put_number(floor_buf *out, char type, uint64_t n) {
    char text[24], *q = text + sizeof text;
    *--q = '\n';
    *--q = '\r';
    do
        *--q = (char)('0' + n % 10);
    while (n /= 10);
    *--q = type;
    return floor_buf_put(out, q, (size_t)(text + sizeof text - q));
}

/* A non-negative decimal argument; -1 when it is not one. */
static long argument_number(const arg *a) {
    long v = 0;
    if (a->len == 0 || a->len > 9) return -1;
    for (size_t i = 0; i < a->len; i++) {
        if ((unsigned)(a->p[i] - '0') >= 10) return -1;
        v = v * 10 + (a->p[i] - '0');
    }
    return v;
}

static bool put_range(const arg *a, floor_buf *out) {
    long start = argument_number(&a[2]), stop = argument_number(&a[3]);
    if (start < 0 || stop < 0) return PUT("-ERR value is not an integer\r\n");
    long n = stop < start ? 0 : stop - start + 1;
    if (n > MAX_RANGE) n = MAX_RANGE;
    if (!put_number(out, '*', (uint64_t)n)) return false;
    for (long i = 0; i < n; i++)
        if (!floor_buf_put(out, get_reply, get_reply_len)) return false;
    return true;
}

static const known *lookup(const arg *name) {
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (is(name, commands[i].name, commands[i].len)) return &commands[i];
    return NULL;
}

static bool reply(const arg *a, int argc, floor_buf *out) {
    /* The one counter and the one list the suite uses (no keyspace: the
     * suite's keys are the same literal throughout). */
    static uint64_t counter, list_len;
    floor_n.commands++;
    const known *k = lookup(&a[0]);
    if (k && (argc < k->argc || (k->most && argc > k->most))) k = NULL;
    switch (k ? k->reply : -1) {
    case REPLY_PONG:
        if (argc == 1) return PUT("+PONG\r\n");
        return put_bulk(out, a[1].p, a[1].len);
    case REPLY_VALUE:
        return floor_buf_put(out, get_reply, get_reply_len);
    case REPLY_OK:
        return PUT("+OK\r\n");
    case REPLY_INCR:
        return put_number(out, ':', ++counter);
    case REPLY_PUSH:
        list_len += (uint64_t)(argc - 2);
        return put_number(out, ':', list_len);
    case REPLY_POP:
        if (list_len) list_len--;
        return floor_buf_put(out, get_reply, get_reply_len);
    case REPLY_ADDED:
        return PUT(":0\r\n");
    case REPLY_NIL:
        return PUT("$-1\r\n");
    case REPLY_EMPTY:
        return PUT("*0\r\n");
    case REPLY_RANGE:
        return put_range(a, out);
    case REPLY_INFO:
        return put_info(out);
    case REPLY_CONFIG:
        /* redis-benchmark asks for `save` and `appendonly` at its start:
         * an empty value of the name asked. */
        if (is(&a[1], "GET", 3))
            return PUT("*2\r\n") && put_bulk(out, a[2].p, a[2].len) &&
                   PUT("$0\r\n\r\n");
        break;
    }
    return PUT("-ERR unknown command or wrong number of arguments\r\n");
}

long floor_answer(const char *p, size_t len, floor_buf *out) {
    const char *q = p, *end = p + len;
    while (q < end) {
        arg a[ARGS_KEPT];
        int argc = 0;
        long n = command(q, end, a, &argc);
        if (n == 0) break;
        if (n < 0) {
            PUT("-ERR Protocol error\r\n");
            return -1;
        }
        q += n;
        if (argc > 0 && !reply(a, argc, out)) return -1;
    }
    return q - p;
}

/* ----------------------------------------------------- start, signals */

int floor_sigfd = -1;

static void report(void) {
    double per = floor_n.commands ? (double)floor_n.commands : 1;
    fprintf(stderr,
            "%s (%s): %" PRIu64 " commands, %" PRIu64
            " system calls (%.3f per command): %" PRIu64 " waits, %" PRIu64
            " reads, %" PRIu64 " writes\n",
            floor_name, floor_mode, floor_n.commands, floor_n.syscalls,
            (double)floor_n.syscalls / per, floor_n.waits, floor_n.reads,
            floor_n.writes);
}

void floor_on_signal(void) {
    struct signalfd_siginfo si;
    while (read(floor_sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        floor_n.syscalls++;
        report();
        if (si.ssi_signo != SIGUSR1) exit(0);
    }
    floor_n.syscalls++; /* the read that found no more */
}

static void usage(const char *name) {
    fprintf(stderr, "usage: %s [--port N] [--value V]\n", name);
    exit(2);
}

bool floor_set_value(const char *v) {
    if (strlen(v) >= sizeof value) return false;
    snprintf(value, sizeof value, "%s", v);
    get_reply_len = (size_t)snprintf(get_reply, sizeof get_reply,
                                     "$%zu\r\n%s\r\n", strlen(value), value);
    return true;
}

int floor_start(int argc, char **argv, const char *name, const char *mode) {
    floor_name = name;
    floor_mode = mode;
    int port = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (strcmp(argv[i], "--value") == 0 && i + 1 < argc &&
                 floor_set_value(argv[i + 1]))
            i++;
        else
            usage(name);
    }
    if (port < 0 || port > 65535) usage(name);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
    floor_sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (floor_sigfd < 0) {
        fprintf(stderr, "%s: signalfd: %s\n", name, strerror(errno));
        exit(1);
    }
    signal(SIGPIPE, SIG_IGN);

    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sin;
    if (fd < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&sin, sizeof sin) != 0 ||
        listen(fd, 511) != 0 ||
        getsockname(fd, (struct sockaddr *)&sin, &len) != 0) {
        fprintf(stderr, "%s: listen on 127.0.0.1:%d: %s\n", name, port,
                strerror(errno));
        exit(1);
    }
    printf("%s: listening on 127.0.0.1:%d (%s)\n", name, ntohs(sin.sin_port),
           mode);
    fflush(stdout);
    return fd;
}
