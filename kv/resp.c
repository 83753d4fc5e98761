/* resp.c: the RESP2 request parser (see resp.h). Functions over the
 * caller's bytes and its resp_state: no allocation (a caller's argv that
 * must grow is the caller's to grow: RESP_GROW), no lull. */
#include "resp.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>

/* A header line ($<len> or *<n>) holds a sign, at most 19 digits and CRLF:
 * anything longer without its LF is not a header. */
#define HEADER_MAX 32

/* Finds the LF ending the line at buf[pos]; -1 when not there yet. */
static long find_lf(const char *buf, size_t len, size_t pos) {
    const char *nl = memchr(buf + pos, '\n', len - pos);
    return nl ? (long)(nl - buf) : -1;
}

/* Parses the decimal in buf[from, to): digits only, with one leading '-'
 * when neg_ok. 0, or -1 for an empty, malformed or overflowing number.
 * As Redis reads a length (string2ll): no leading zero ("04", "00"), no
 * "-0", no '+'. */
static int parse_num(const char *buf, size_t from, size_t to, int neg_ok,
                     long long *out) {
    int neg = 0;
    if (from < to && buf[from] == '-' && neg_ok) {
        neg = 1;
        from++;
    }
    if (from == to) return -1;
    if (buf[from] == '0' && (neg || to - from > 1)) return -1;
    /* Checked before each step, not after: v * 10 wraps for a 20-digit
     * number from 18446744073709551620 on, and "-20000000000000000000"
     * came out a small negative count, an empty command, where Redis
     * refuses it. INT64_MIN itself is a number (string2ll's range). */
    unsigned long long max = (unsigned long long)INT64_MAX + (unsigned)neg;
    unsigned long long v = 0;
    for (size_t i = from; i < to; i++) {
        if (buf[i] < '0' || buf[i] > '9') return -1;
        unsigned d = (unsigned)(buf[i] - '0');
        if (v > (max - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = neg ? -(long long)(v - 1) - 1 : (long long)v;
    return 0;
}

/* resp_quick_num (resp.h) for the header at buf[*pos]: 1 with *out and *pos
 * past the CRLF, else 0, and the caller asks header(), which gives the same
 * answer for what this one takes. Inline in the argument loop: the call and the
 * general path's checks cost more than the parse of a short header. */
static inline __attribute__((always_inline)) int
quick_header(const char *buf, size_t len, size_t *pos, long long *out) {
    const char *p = buf + *pos + 1;
    size_t v;
    if (!resp_quick_num(&p, buf + len, &v)) return 0;
    *out = (long long)v;
    *pos = (size_t)(p - buf);
    return 1;
}

/* Reads the header line at buf[*pos] starting with `tag`. 1 done (value in
 * *out, *pos past the CRLF), 0 incomplete, -1 error. The general path,
 * out of line: quick_header takes the common header first. */
static __attribute__((noinline)) int header(const char *buf, size_t len,
                                            size_t *pos, int neg_ok,
                                            long long *out, const char **err) {
    /* The LF is looked for only as far as a header may reach, so a line
     * cut short costs at most that much per look however much follows. */
    /* Every malformed header in Redis' words: it takes the line up to its
     * CR as the number, so a bare LF, no digits or a line longer than any
     * number is an invalid length. */
    const char *invalid = buf[*pos] == '*'
                              ? "Protocol error: invalid multibulk length"
                              : "Protocol error: invalid bulk length";
    size_t window = len - *pos > HEADER_MAX + 1 ? HEADER_MAX + 1 : len - *pos;
    long lf = find_lf(buf, *pos + window, *pos);
    if (lf < 0) {
        if (len - *pos > HEADER_MAX) {
            *err = invalid;
            return -1;
        }
        return 0;
    }
    if (lf == (long)*pos + 1 || buf[lf - 1] != '\r' ||
        parse_num(buf, *pos + 1, (size_t)lf - 1, neg_ok, out) < 0) {
        *err = invalid;
        return -1;
    }
    *pos = (size_t)lf + 1;
    return 1;
}

/* Redis' words for the byte found where a bulk's '$' belongs, that byte
 * in them ("expected '$', got '*'": a nested array, an integer) and a CR
 * or LF as a space, as Redis' error replies carry neither. One buffer per
 * thread: *err stays good until that thread's next such error. */
static const char *expected_dollar(char got) {
    static _Thread_local char msg[] = "Protocol error: expected '$', got '?'";
    msg[sizeof msg - 3] = got == '\r' || got == '\n' ? ' ' : got;
    return msg;
}

/* A new request: nothing of it parsed yet (the count of bytes looked at
 * goes on). */
static void state_reset(resp_state *st) {
    uint64_t scanned = st->scanned;
    *st = (resp_state){.scanned = scanned};
}

/* argv[0, n) once more, for arguments parsed by earlier calls (into a
 * buffer that may since have moved), the first one's header at `first`:
 * their headers are known good, so this walk only reads the lengths.
 * The bytes it goes over are added to *scanned. */
static void refill(const char *buf, size_t len, size_t first, resp_arg *argv,
                   size_t n, uint64_t *scanned) {
    size_t pos = first;
    for (size_t i = 0; i < n; i++) {
        size_t blen = 0, at = pos + 1;
        while (at < len && buf[at] != '\r')
            blen = blen * 10 + (size_t)(buf[at++] - '0');
        argv[i].p = buf + at + 2;
        argv[i].len = blen;
        pos = at + 2 + blen + 2;
    }
    *scanned += pos - first;
}

/* *need, on RESP_INCOMPLETE: the end of the first bulk not all there, or
 * len + 1 when a header line is cut (the next byte may end it). Whole
 * arguments stay parsed in *st: the next call starts at the first one not
 * all there. The state is written only then: a command parsed in one
 * call (the common case) leaves it as it found it, zeroed. st->scanned
 * counts the bytes each call goes over, from where it starts to where it
 * stops (headers read, bodies stepped over): once per call, not per
 * argument, to keep the common path short. */
static long parse_multibulk(const resp_limits *lim, resp_state *st,
                            const char *buf, size_t len, resp_arg *argv,
                            size_t *argc, const char **err, size_t *need) {
    *need = len + 1;
    size_t n = st->nargs, first = st->first, pos = st->pos, i = st->got;
    size_t entry = pos;
    if (n == 0) { /* the count is not read yet */
        long long count;
        int r = quick_header(buf, len, &pos, &count);
        if (!r) r = header(buf, len, &pos, 1, &count, err);
        if (r < 0) return RESP_ERROR;
        if (r == 0) {
            st->scanned += len;
            return RESP_INCOMPLETE;
        }
        /* `*0` and `*-1`: an empty command, as Redis takes them. */
        if (count <= 0) {
            *argc = 0;
            st->scanned += pos;
            return (long)pos;
        }
        /* Redis' order and words: past INT_MAX is not a count at all,
         * then the bound before AUTH; past our own bound (far below
         * INT_MAX) a refusal of lull-kv's. */
        if (count > INT_MAX) {
            *err = "Protocol error: invalid multibulk length";
            return RESP_ERROR;
        }
        if (lim->noauth && count > (long long)RESP_NOAUTH_ARGS) {
            *err = "Protocol error: unauthenticated multibulk length";
            return RESP_ERROR;
        }
        size_t most =
            lim->grow_args > lim->max_args ? lim->grow_args : lim->max_args;
        if ((unsigned long long)count > most) {
            *err = "Protocol error: too many arguments";
            return RESP_ERROR;
        }
        n = (size_t)count;
        first = pos;
    }
    size_t before = i; /* argv[0, before) point into an older buffer */
    size_t body_at = 0;
    if (st->ext) { /* argument i's body came elsewhere (resp_state) */
        argv[i].p = st->ext;
        argv[i].len = st->ext_len;
        pos = st->body;
        i++;
    }
    /* As far as argv reaches: past it, room is asked for (RESP_GROW). */
    size_t stop = n < lim->max_args ? n : lim->max_args;
    for (; i < stop; i++) {
        size_t start = pos; /* where to go on from, if not all there */
        if (pos == len) goto suspend;
        if (buf[pos] != '$') {
            *err = expected_dollar(buf[pos]);
            return RESP_ERROR;
        }
        long long blen;
        int r = quick_header(buf, len, &pos, &blen);
        if (!r) r = header(buf, len, &pos, 0, &blen, err);
        if (r < 0) return RESP_ERROR;
        if (r == 0) {
            pos = start;
            goto suspend;
        }
        if ((unsigned long long)blen > lim->max_bulk) {
            *err = "Protocol error: invalid bulk length";
            return RESP_ERROR;
        }
        if (lim->noauth && blen > (long long)RESP_NOAUTH_BULK) {
            *err = "Protocol error: unauthenticated bulk length";
            return RESP_ERROR;
        }
        size_t body = (size_t)blen + 2;
        if (len - pos < body) {
            /* The CRLF after the body is checked once it is in: nothing
             * can be learnt before the body and its CRLF are all there.
             * The header is read again then (a few bytes). */
            *need = pos + body;
            body_at = pos;
            pos = start;
            goto suspend;
        }
        if (buf[pos + (size_t)blen] != '\r' ||
            buf[pos + (size_t)blen + 1] != '\n') {
            *err = "Protocol error: expected CRLF after bulk";
            return RESP_ERROR;
        }
        argv[i].p = buf + pos;
        argv[i].len = (size_t)blen;
        pos += body;
    }
    if (__builtin_expect(i < n, 0)) { /* argv is full */
        if (pos == len) goto suspend; /* room once the next one comes */
        st->scanned += pos - entry;
        st->nargs = n;
        st->first = first;
        st->pos = pos;
        st->got = i;
        st->body = 0;
        *argc = lim->max_args && lim->max_args <= n / 2 ? 2 * lim->max_args : n;
        return RESP_GROW;
    }
    st->scanned += pos - entry;
    if (entry) { /* resumed: the next call starts a new command */
        refill(buf, len, first, argv, before, &st->scanned);
        state_reset(st);
    }
    *argc = n;
    return (long)pos;
suspend: /* argument i, its header at pos, is not all there */
    st->scanned += len - entry;
    st->nargs = n;
    st->first = first;
    st->pos = pos;
    st->got = i;
    st->body = body_at;
    return RESP_INCOMPLETE;
}

/* What a byte is to the inline splitter (sdssplitargs without quoting):
 * IN_END ends a word (space, tab, CR), IN_SKIP is skipped between words
 * (those, a vertical tab, a form feed: isspace), IN_LF ends the line. */
enum { IN_END = 1, IN_SKIP = 2, IN_LF = 4 };
static const unsigned char inline_class[256] = {
    [' '] = IN_END | IN_SKIP,  ['\t'] = IN_END | IN_SKIP,
    ['\r'] = IN_END | IN_SKIP, ['\v'] = IN_SKIP,
    ['\f'] = IN_SKIP,          ['\n'] = IN_LF,
};

/* parse_inline for a line not looked at before (st->pos 0) that is all
 * there, within RESP_MAX_INLINE and within argv: its words split in the
 * same pass that finds its LF, where the general path searches for the
 * LF first and then goes over the line again. 0 for anything else (no
 * LF yet, a line too long, more words than argv holds), which
 * parse_inline then answers from the start. */
static long inline_one_pass(const resp_limits *lim, resp_state *st,
                            const char *buf, size_t len, resp_arg *argv,
                            size_t *argc) {
    const unsigned char *b = (const unsigned char *)buf;
    /* An LF past RESP_MAX_INLINE is an error parse_inline reports. */
    size_t stop = len <= RESP_MAX_INLINE ? len : RESP_MAX_INLINE + 1;
    size_t n = 0, i = 0;
    for (;;) {
        while (i < stop && (inline_class[b[i]] & IN_SKIP))
            i++;
        if (i == stop) return 0;
        if (b[i] == '\n') break;
        size_t start = i;
        while (i < stop && !(inline_class[b[i]] & (IN_END | IN_LF)))
            i++;
        if (n == lim->max_args) return 0; /* RESP_GROW or an error */
        argv[n].p = buf + start;
        argv[n].len = i - start;
        n++;
    }
    st->scanned += 2 * i + 1; /* as parse_inline counts: LF search, words */
    *argc = n;
    return (long)i + 1;
}

/* st->pos: the bytes of the line already searched for its LF. */
static long parse_inline(const resp_limits *lim, resp_state *st,
                         const char *buf, size_t len, resp_arg *argv,
                         size_t *argc, const char **err) {
    if (st->pos == 0) {
        long r = inline_one_pass(lim, st, buf, len, argv, argc);
        if (r > 0) return r;
    }
    long lf = find_lf(buf, len, st->pos);
    st->scanned += (lf < 0 ? len : (size_t)lf + 1) - st->pos;
    if (lf < 0) {
        if (len > RESP_MAX_INLINE) {
            *err = "Protocol error: too big inline request";
            return RESP_ERROR;
        }
        st->pos = len;
        return RESP_INCOMPLETE;
    }
    st->scanned += (size_t)lf; /* the words, split below */
    if (st->pos) state_reset(st);
    /* The same bound when the LF came with the line: cut before its LF,
     * the line is refused above, and a request's fate must not depend on
     * how its bytes were cut. */
    if ((size_t)lf > RESP_MAX_INLINE) {
        *err = "Protocol error: too big inline request";
        return RESP_ERROR;
    }
    size_t end = (size_t)lf; /* a bare LF ends a line too, as in Redis */
    if (end > 0 && buf[end - 1] == '\r') end--;
    /* Words as Redis' sdssplitargs cuts them (without its quoting): one
     * ends at a space, tab or CR; between words any of those, a vertical
     * tab or a form feed is skipped (isspace). */
    size_t n = 0, i = 0;
    while (i < end) {
        while (i < end && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' ||
                           buf[i] == '\v' || buf[i] == '\f'))
            i++;
        if (i == end) break;
        size_t start = i;
        while (i < end && buf[i] != ' ' && buf[i] != '\t' && buf[i] != '\r')
            i++;
        if (n == lim->max_args) {
            if (lim->grow_args > n) { /* the line is parsed again */
                *argc = n && n <= lim->grow_args / 2 ? 2 * n : lim->grow_args;
                return RESP_GROW;
            }
            *err = "Protocol error: too many arguments";
            return RESP_ERROR;
        }
        argv[n].p = buf + start;
        argv[n].len = i - start;
        n++;
    }
    *argc = n;
    return lf + 1;
}

long resp_parse_general(const resp_limits *lim, resp_state *st, const char *buf,
                        size_t len, resp_arg *argv, size_t *argc,
                        const char **err, size_t *need) {
    *argc = 0;
    *need = len + 1;
    if (st->pos > len) state_reset(st); /* not the bytes it was given */
    if (len == 0) return RESP_INCOMPLETE;
    long r = buf[0] == '*'
                 ? parse_multibulk(lim, st, buf, len, argv, argc, err, need)
                 : parse_inline(lim, st, buf, len, argv, argc, err);
    /* After an error the next call starts a new command (after a command
     * too: the parsers reset the state when they had left it in use). */
    if (r == RESP_ERROR) state_reset(st);
    return r;
}

long resp_parse_need(const resp_limits *lim, const char *buf, size_t len,
                     resp_arg *argv, size_t *argc, const char **err,
                     size_t *need) {
    resp_state st = {0};
    return resp_parse_resume(lim, &st, buf, len, argv, argc, err, need);
}

long resp_parse(const resp_limits *lim, const char *buf, size_t len,
                resp_arg *argv, size_t *argc, const char **err) {
    size_t need;
    return resp_parse_need(lim, buf, len, argv, argc, err, &need);
}
