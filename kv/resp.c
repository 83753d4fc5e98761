/* resp.c: the RESP2 request parser (see resp.h). Pure functions over the
 * caller's bytes: no allocation, no state, no lull. */
#include "resp.h"

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
    unsigned long long v = 0;
    for (size_t i = from; i < to; i++) {
        if (buf[i] < '0' || buf[i] > '9') return -1;
        v = v * 10 + (unsigned long long)(buf[i] - '0');
        if (v > (unsigned long long)INT64_MAX) return -1;
    }
    *out = neg ? -(long long)v : (long long)v;
    return 0;
}

/* Reads the header line at buf[*pos] starting with `tag`. 1 done (value in
 * *out, *pos past the CRLF), 0 incomplete, -1 error. */
static int header(const char *buf, size_t len, size_t *pos, int neg_ok,
                  long long *out, const char **err) {
    /* The common header, a few digits and CRLF all in the buffer, without
     * the memchr and the checks below; anything else (a sign, a long or
     * malformed line, one cut short) takes the general path, which gives
     * the same answer for what this one takes. 18 digits cannot overflow. */
    size_t i = *pos + 1;
    unsigned long long v = 0;
    while (i < len && i - *pos <= 18 && buf[i] >= '0' && buf[i] <= '9')
        v = v * 10 + (unsigned long long)(buf[i++] - '0');
    if (i > *pos + 1 && i - *pos <= 19 && len - i >= 2 && buf[i] == '\r' &&
        buf[i + 1] == '\n' && (buf[*pos + 1] != '0' || i == *pos + 2)) {
        *out = (long long)v;
        *pos = i + 2;
        return 1;
    }
    long lf = find_lf(buf, len, *pos);
    if (lf < 0) {
        if (len - *pos > HEADER_MAX) {
            *err = "Protocol error: header line too long";
            return -1;
        }
        return 0;
    }
    if ((size_t)lf - *pos > HEADER_MAX || lf == (long)*pos + 1 ||
        buf[lf - 1] != '\r') {
        *err = "Protocol error: bad header line";
        return -1;
    }
    if (parse_num(buf, *pos + 1, (size_t)lf - 1, neg_ok, out) < 0) {
        *err = buf[*pos] == '*' ? "Protocol error: invalid multibulk length"
                                : "Protocol error: invalid bulk length";
        return -1;
    }
    *pos = (size_t)lf + 1;
    return 1;
}

/* *need, on RESP_INCOMPLETE: the end of the first bulk not all there, or
 * len + 1 when a header line is cut (the next byte may end it). */
static long parse_multibulk(const resp_limits *lim, const char *buf, size_t len,
                            resp_arg *argv, size_t *argc, const char **err,
                            size_t *need) {
    size_t pos = 0;
    long long n;
    *need = len + 1;
    int r = header(buf, len, &pos, 1, &n, err);
    if (r <= 0) return r < 0 ? RESP_ERROR : RESP_INCOMPLETE;
    if (n <= 0) { /* `*0` and `*-1`: an empty command, as Redis takes them */
        *argc = 0;
        return (long)pos;
    }
    if ((unsigned long long)n > lim->max_args) {
        *err = "Protocol error: too many arguments";
        return RESP_ERROR;
    }
    for (long long i = 0; i < n; i++) {
        if (pos == len) return RESP_INCOMPLETE;
        if (buf[pos] != '$') {
            *err = "Protocol error: expected '$'";
            return RESP_ERROR;
        }
        long long blen;
        r = header(buf, len, &pos, 0, &blen, err);
        if (r <= 0) return r < 0 ? RESP_ERROR : RESP_INCOMPLETE;
        if ((unsigned long long)blen > lim->max_bulk) {
            *err = "Protocol error: invalid bulk length";
            return RESP_ERROR;
        }
        size_t body = (size_t)blen + 2;
        if (len - pos < body) {
            /* The CRLF after the body is checked once it is in: nothing
             * can be learnt before the body and its CRLF are all there. */
            *need = pos + body;
            return RESP_INCOMPLETE;
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
    *argc = (size_t)n;
    return (long)pos;
}

static long parse_inline(const resp_limits *lim, const char *buf, size_t len,
                         resp_arg *argv, size_t *argc, const char **err) {
    long lf = find_lf(buf, len, 0);
    if (lf < 0) {
        if (len > RESP_MAX_INLINE) {
            *err = "Protocol error: too big inline request";
            return RESP_ERROR;
        }
        return RESP_INCOMPLETE;
    }
    size_t end = (size_t)lf; /* a bare LF ends a line too, as in Redis */
    if (end > 0 && buf[end - 1] == '\r') end--;
    size_t n = 0, i = 0;
    while (i < end) {
        while (i < end && (buf[i] == ' ' || buf[i] == '\t'))
            i++;
        if (i == end) break;
        size_t start = i;
        while (i < end && buf[i] != ' ' && buf[i] != '\t')
            i++;
        if (n == lim->max_args) {
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

long resp_parse_need(const resp_limits *lim, const char *buf, size_t len,
                     resp_arg *argv, size_t *argc, const char **err,
                     size_t *need) {
    *argc = 0;
    *need = len + 1;
    if (len == 0) return RESP_INCOMPLETE;
    if (buf[0] == '*')
        return parse_multibulk(lim, buf, len, argv, argc, err, need);
    return parse_inline(lim, buf, len, argv, argc, err);
}

long resp_parse(const resp_limits *lim, const char *buf, size_t len,
                resp_arg *argv, size_t *argc, const char **err) {
    size_t need;
    return resp_parse_need(lim, buf, len, argv, argc, err, &need);
}
