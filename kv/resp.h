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
 * spaces, what a person types into `nc`; no quoting). The arguments point
 * into the caller's buffer. */
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
    size_t max_args; /* the most arguments in one command; also the size of
                        the caller's argv */
} resp_limits;

/* 64 KiB: the longest inline line, and the longest header line that could
 * still be completed; the same bound Redis puts on an inline request. */
#define RESP_MAX_INLINE ((size_t)64 << 10)

enum {
    RESP_INCOMPLETE = 0, /* no complete command yet: read more */
    RESP_ERROR = -1,     /* a protocol error: *err says which */
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
} resp_state;

/* Parses one command from buf[0, len). Returns the bytes it took (> 0),
 * with *argc arguments in argv (0 for an empty line or `*0`: skip it);
 * RESP_INCOMPLETE; or RESP_ERROR with *err a static message (no CRLF). */
long resp_parse(const resp_limits *lim, const char *buf, size_t len,
                resp_arg *argv, size_t *argc, const char **err);
/* resp_parse, and on RESP_INCOMPLETE *need is the buffered length at
 * which parsing again can give another answer (more than len): until the
 * buffer holds that many bytes, resp_parse would say RESP_INCOMPLETE
 * again. */
long resp_parse_need(const resp_limits *lim, const char *buf, size_t len,
                     resp_arg *argv, size_t *argc, const char **err,
                     size_t *need);
/* resp_parse_need, going on from where the last call on st stopped. buf
 * holds the same command from its first byte as the last call's (it may
 * have moved, and more bytes may have been added at its end); after
 * RESP_INCOMPLETE the caller calls again with them, or zeroes st before
 * another command. */
long resp_parse_resume(const resp_limits *lim, resp_state *st, const char *buf,
                       size_t len, resp_arg *argv, size_t *argc,
                       const char **err, size_t *need);

#endif
