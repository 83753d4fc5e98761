/* resp.h: the request side of RESP2, the Redis protocol, for lull-kv.
 *
 * resp_parse looks at the bytes a connection has buffered and takes one
 * command off the front, or says that more bytes are needed, or that the
 * bytes can never be a request. A command cut at any byte boundary is
 * parsed on from where the last call stopped: resp_parse_resume keeps, in
 * the connection's resp_state, how far the command's bytes were parsed
 * (its header and the arguments all there), and starts the next call at
 * the first argument not all there. So a command of many arguments
 * arriving in many reads costs each byte one look, not one per read; the
 * arguments of earlier calls are pointed at again (a walk of their
 * headers) once the command is complete, since the buffer may have moved
 * in between. resp_parse and resp_parse_need keep no state: they parse a
 * command from its start.
 *
 * What keeps the calls few for a large argument is the `need` of
 * resp_parse_need and resp_parse_resume: on RESP_INCOMPLETE it says how
 * many bytes the buffer must hold before parsing again can make progress
 * (the end of the bulk being received). A caller that appends reads and
 * parses again only then does linear work however the command is cut: a
 * 64 MiB SET arriving in 64 KiB reads is parsed twice, not a thousand
 * times.
 *
 * Two request forms: multibulk (`*<n>\r\n` then n times `$<len>\r\n<bytes>
 * \r\n`, what clients send) and inline (a line of words separated by
 * blanks as Redis splits them, what a person types into `nc`; no quoting). The
 * arguments point into the caller's buffer. */
#ifndef LULL_KV_RESP_H
#define LULL_KV_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct resp_arg {
    const char *p; /* into the parsed buffer */
    size_t len;
} resp_arg;

/* Whether argument a is the word `name`, ASCII case-insensitively (command
 * names). Inline: the command dispatch compares the name against several
 * literals per request, and strncasecmp's call and locale handling cost
 * more than the compare. */
static inline bool resp_is(const resp_arg *a, const char *name) {
    size_t n = strlen(name);
    if (a->len != n) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)a->p[i], y = (unsigned char)name[i];
        if (x >= 'a' && x <= 'z') x = (unsigned char)(x - 'a' + 'A');
        if (y >= 'a' && y <= 'z') y = (unsigned char)(y - 'a' + 'A');
        if (x != y) return false;
    }
    return true;
}

typedef struct resp_limits {
    size_t max_bulk; /* the longest argument accepted (a longer $<len> is a
                        protocol error, before any of it is buffered) */
    size_t max_args; /* the size of the caller's argv; also the most
                        arguments in one command, unless grow_args */
    /* An argv that grows (0: it does not, max_args is the bound): the
     * most arguments in one command. One of more than max_args is parsed
     * up to max_args arguments and then asks for room (RESP_GROW). */
    size_t grow_args;
    /* A client that must AUTH and has not: a multibulk request of at most
     * RESP_NOAUTH_ARGS arguments of RESP_NOAUTH_BULK bytes each (Redis'
     * bounds since CVE-2021-32675), so a peer that never authenticates
     * cannot make the server reserve proto-max-bulk-len bytes for it.
     * Inline lines are bounded by RESP_MAX_INLINE already. */
    bool noauth;
} resp_limits;

#define RESP_NOAUTH_ARGS 10
#define RESP_NOAUTH_BULK 16384

/* 64 KiB: the longest inline line, and the longest header line that could
 * still be completed; the same bound Redis puts on an inline request. */
#define RESP_MAX_INLINE ((size_t)64 << 10)

enum {
    RESP_INCOMPLETE = 0, /* no complete command yet: read more */
    RESP_ERROR = -1,     /* a protocol error: *err says which */
    /* argv is full and the command has more arguments (lim.grow_args):
     * make it hold *argc entries (twice max_args at most, never more than
     * the command needs), max_args that, and call again with the same
     * bytes and state. Asked for only once the next argument's bytes
     * begin to arrive, so a count alone reserves nothing. */
    RESP_GROW = -2,
};

/* Where a connection's parse of the command at the front of its buffer
 * stopped. Zeroed before the first command; resp_parse_resume resets it
 * (all but `scanned`) when it returns a command or an error. */
typedef struct resp_state {
    size_t pos;       /* multibulk: the next argument's header; inline: the
                         bytes of the line searched for its LF */
    size_t nargs;     /* multibulk: the argument count; 0 before it is read */
    size_t got;       /* multibulk: the arguments parsed so far */
    size_t first;     /* multibulk: the first argument's header */
    uint64_t scanned; /* bytes gone over (headers read, bodies stepped
                         over), over every command: what the tests
                         measure the parser's work by */
    /* multibulk, suspended inside argument `got`'s body: where that body
     * starts (0: suspended elsewhere). */
    size_t body;
    /* Set by the caller after such a suspension when that argument is
     * the command's last: its body (ext_len bytes and its CRLF) came
     * elsewhere, not after the header in the buffer, which ends there.
     * The next call takes it so and returns the command. */
    const char *ext;
    size_t ext_len;
} resp_state;

/* Parses one command from buf[0, len). Returns the bytes it took (> 0),
 * with *argc arguments in argv (0 for an empty line or `*0`: skip it);
 * RESP_INCOMPLETE; or RESP_ERROR with *err a static message (no CRLF;
 * "expected '$', got ..." is a buffer per thread, good until its next). */
long resp_parse(const resp_limits *lim, const char *buf, size_t len,
                resp_arg *argv, size_t *argc, const char **err);
/* resp_parse, and on RESP_INCOMPLETE *need is the buffered length at
 * which parsing again can give another answer (more than len): until the
 * buffer holds that many bytes, resp_parse would say RESP_INCOMPLETE
 * again. */
long resp_parse_need(const resp_limits *lim, const char *buf, size_t len,
                     resp_arg *argv, size_t *argc, const char **err,
                     size_t *need);
/* resp_parse_resume's every case (resp.c); resp_parse_resume tries the
 * common one first, inline. */
long resp_parse_general(const resp_limits *lim, resp_state *st, const char *buf,
                        size_t len, resp_arg *argv, size_t *argc,
                        const char **err, size_t *need);

/* Whether p[0, 2) is CRLF: one 16-bit load and compare, where two byte
 * compares cost a request's parse some 4 instructions an argument (each
 * argument's header and body end in one). */
static inline __attribute__((always_inline)) bool resp_crlf(const char *p) {
    uint16_t v;
    memcpy(&v, p, 2);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return v == ('\r' << 8 | '\n');
#else
    return v == ('\n' << 8 | '\r');
#endif
}

/* The number of a common header, 1 to 9 digits then CRLF, all in the
 * buffer, at *pp (past the tag): true with *out and *pp past the CRLF;
 * false for anything else (a sign, a leading zero, a longer, malformed or
 * cut line), which the general path reads. */
static inline __attribute__((always_inline)) bool
resp_quick_num(const char **pp, const char *end, size_t *out) {
    const char *p = *pp, *q = p + 1;
    if (end - p >= 4) { /* one or two digits, what almost every one is */
        unsigned d0 = (unsigned)(unsigned char)p[0] - '0';
        unsigned d1 = (unsigned)(unsigned char)p[1] - '0';
        if (d0 <= 9 && resp_crlf(p + 1)) {
            *out = d0;
            *pp = p + 3;
            return true;
        }
        if (d0 - 1 <= 8 && d1 <= 9 && resp_crlf(p + 2)) {
            *out = d0 * 10 + d1;
            *pp = p + 4;
            return true;
        }
    }
    if (end - p < 3) return false; /* a digit and CRLF at least */
    unsigned d = (unsigned)(unsigned char)*p - '0';
    if (d > 9) return false;
    size_t v = d;
    if (d) { /* a 0 may only be alone */
        const char *stop = end - p > 9 ? p + 9 : end;
        while (q < stop && (d = (unsigned)(unsigned char)*q - '0') <= 9) {
            v = v * 10 + d;
            q++;
        }
    }
    if (end - q < 2 || q[0] != '\r' || q[1] != '\n') return false;
    *out = v;
    *pp = q + 2;
    return true;
}

/* The common request: a multibulk command all in bytes[0, len), its count
 * and every length a short header (resp_quick_num), none over the limits.
 * Returns the bytes it took, argv and *argc filled; 0 for anything else
 * (cut short, an error, a count of 0 or less, a long header), which
 * the general path then parses from the start and answers as it would
 * have without this. Pointers kept in registers, no state written: a
 * pipelined GET is parsed in a few dozen instructions, where the general
 * path's resumable bookkeeping cost several times that. */
static inline __attribute__((always_inline)) long
resp_parse_whole(const resp_limits *lim, const char *bytes, size_t len,
                 resp_arg *argv, size_t *argc) {
    const char *p = bytes + 1, *end = bytes + len;
    size_t n;
    /* An unauthenticated client's bounds are the general path's to apply
     * (lull-kv parses such a client with resp_parse_general directly). */
    if (lim->noauth) return 0;
    if (!resp_quick_num(&p, end, &n) || n == 0 || n > lim->max_args) return 0;
    for (size_t i = 0; i < n; i++) {
        size_t blen;
        if (p == end || *p != '$') return 0;
        p++;
        if (!resp_quick_num(&p, end, &blen) || blen > lim->max_bulk) return 0;
        if ((size_t)(end - p) < blen + 2 || !resp_crlf(p + blen)) return 0;
        argv[i].p = p;
        argv[i].len = blen;
        p += blen + 2;
    }
    *argc = n;
    return (long)(p - bytes);
}

/* resp_parse_need, going on from where the last call on st stopped. bytes
 * holds the same command from its first byte as the last call's (it may
 * have moved, and more bytes may have been added at its end); after
 * RESP_INCOMPLETE the caller calls again with them, or zeroes st before
 * another command. Inline, always (the compiler left it out of line once
 * its caller grew): a new command all there (resp_parse_whole) costs no
 * call. */
static inline __attribute__((always_inline)) long
resp_parse_resume(const resp_limits *lim, resp_state *st, const char *bytes,
                  size_t len, resp_arg *argv, size_t *argc, const char **err,
                  size_t *need) {
    if (len && bytes[0] == '*' && st->nargs == 0 && st->pos == 0) {
        long w = resp_parse_whole(lim, bytes, len, argv, argc);
        if (w > 0) {
            st->scanned += (uint64_t)w;
            *need = len + 1;
            return w;
        }
    }
    return resp_parse_general(lim, st, bytes, len, argv, argc, err, need);
}

#endif
