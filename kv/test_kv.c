/* lull-kv's request parser, keyspace, commands and write log
 * (resp.c, store.c, cmd.c, repl.c beside this file), tested directly: no loop,
 * no sockets.
 *
 * The parser is driven the way the server drives it: bytes arrive in
 * chunks, are appended to a buffer, and every complete command at its
 * front is taken off. Each request set is fed whole, cut in two at every
 * byte boundary, and one byte at a time; the commands that come out must be
 * the same every time. Malformed input must end in an error (never a
 * crash, never a read outside the buffer: the ASan build checks that),
 * however it is cut, and the commands before it must still come out. */
#include "check.h"

#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "blob.h"
#include "bytes.h"
#include "cmd.h"
#include "dict.h"
#include "dump.h"
#include "fault_shim.h"
#include "repl.h"
#include "resp.h"
#include "store.h"

#define MAX_ARGS 16

/* What a feed produced: every command as "arg|arg|...;" and the error. */
typedef struct feed {
    char log[4096];
    size_t log_len;
    const char *err; /* NULL while no protocol error */
    char buf[8192];  /* the connection's input buffer */
    size_t len;
    size_t need;   /* parse again once len reaches it (resp_parse_need) */
    size_t parses; /* resp_parse_need calls */
    resp_state st; /* the parse of the command at the front of buf */
} feed;

static const resp_limits limits = {.max_bulk = 1000, .max_args = MAX_ARGS};
/* The limits feed_chunk parses with: `limits` unless a case says other. */
static const resp_limits *feed_limits = &limits;

static void logs(feed *f, const char *p, size_t n) {
    CHECK(f->log_len + n < sizeof f->log);
    memcpy(f->log + f->log_len, p, n);
    f->log_len += n;
    f->log[f->log_len] = 0;
}

/* Appends a chunk and takes every complete command off the front; as the
 * server does, it parses again only once the buffer holds the bytes the
 * parser said it needs, so a hint that was too high shows as a command
 * missing from the log. */
static void feed_chunk(feed *f, const char *p, size_t n) {
    if (f->err) return; /* the connection is closing: input is ignored */
    CHECK(f->len + n <= sizeof f->buf);
    memcpy(f->buf + f->len, p, n);
    f->len += n;
    if (f->len < f->need) return;
    size_t off = 0;
    for (;;) {
        resp_arg argv[MAX_ARGS];
        size_t argc = 99;
        const char *err = NULL;
        /* Parse from a copy of exactly the unparsed bytes, so ASan sees any
         * read past the end; a new copy each time, so an argument pointing
         * into an earlier call's bytes shows too. */
        size_t left = f->len - off;
        char *copy = malloc(left ? left : 1);
        memcpy(copy, f->buf + off, left);
        size_t need = 0;
        long r = resp_parse_resume(feed_limits, &f->st, copy, left, argv, &argc,
                                   &err, &need);
        f->parses++;
        if (r == RESP_INCOMPLETE) {
            CHECK(need > left);
            f->need = need;
            free(copy);
            break;
        }
        if (r == RESP_ERROR) {
            CHECK(err != NULL);
            f->err = err;
            free(copy);
            return;
        }
        CHECK(r > 0 && (size_t)r <= left);
        CHECK(argc <= MAX_ARGS);
        for (size_t i = 0; i < argc; i++) {
            CHECK(argv[i].p >= copy && argv[i].p + argv[i].len <= copy + left);
            logs(f, argv[i].p, argv[i].len);
            logs(f, i + 1 < argc ? "|" : "", i + 1 < argc);
        }
        logs(f, ";", 1);
        off += (size_t)r;
        free(copy);
    }
    memmove(f->buf, f->buf + off, f->len - off);
    f->len -= off;
}

/* Feeds `in` whole, then cut at every boundary, then byte by byte; every
 * way must give the same log and the same error (or none). The whole-feed
 * result is returned in *out. */
static void feed_all_ways(const char *in, size_t n, feed *out) {
    memset(out, 0, sizeof *out);
    feed_chunk(out, in, n);
    for (size_t cut = 0; cut <= n; cut++) {
        feed f = {0};
        feed_chunk(&f, in, cut);
        feed_chunk(&f, in + cut, n - cut);
        if (strcmp(f.log, out->log) != 0 || f.err != out->err) {
            check_fail(__FILE__, __LINE__,
                       "cut at %zu: \"%s\" (%s), whole: "
                       "\"%s\" (%s)",
                       cut, f.log, f.err ? f.err : "-", out->log,
                       out->err ? out->err : "-");
            return;
        }
    }
    feed f = {0};
    for (size_t i = 0; i < n; i++)
        feed_chunk(&f, in + i, 1);
    CHECK(strcmp(f.log, out->log) == 0);
    CHECK(f.err == out->err);
}

#define S(lit) lit, sizeof(lit) - 1

/* ------------------------------------------------------- the key hash */

/* Keys a client makes to land in one bucket whatever the server's seed:
 * 1,024 keys of 160 bytes, each a choice of 10 block pairs, flipped in the
 * bits a multiply-and-shift mixer carries through unchanged (the top bit
 * of a word, and where its shift moves it), or not. */
static void flood_key(char *key, unsigned pick) {
    memset(key, 'k', 160);
    for (int pair = 0; pair < 10; pair++) {
        if (!(pick >> pair & 1)) continue;
        uint64_t w1, w2;
        memcpy(&w1, key + pair * 16, 8);
        memcpy(&w2, key + pair * 16 + 8, 8);
        w1 ^= 1ull << 63;
        w2 ^= 1ull << 63 | 1ull << 34;
        memcpy(key + pair * 16, &w1, 8);
        memcpy(key + pair * 16 + 8, &w2, 8);
    }
}

/* The most keys of one bucket of 1,024 (a hash's low ten bits). */
static int fullest_bucket(void) {
    static int bucket[1024];
    memset(bucket, 0, sizeof bucket);
    int most = 0;
    char key[160];
    for (unsigned pick = 0; pick < 1024; pick++) {
        flood_key(key, pick);
        int b = (int)(dict_hash(key, sizeof key) & 1023);
        if (++bucket[b] > most) most = bucket[b];
    }
    return most;
}

/* A client cannot choose keys that share a bucket: the hash is keyed
 * (dict_seed; lull-kv seeds it at random at its start), and its per-block
 * mixing has no difference that passes through unchanged, so the keys
 * above spread as random ones would (1,024 into 1,024 buckets: rarely
 * more than 8 in one), under the default seed and others. Before, all
 * 1,024 had one hash, and a chain of them made each lookup walk them all. */
TEST(hash_flood_keys_spread_under_any_seed) {
    for (uint64_t seed = 0; seed < 4; seed++) {
        if (seed) dict_seed(seed * 0x9e3779b97f4a7c15ull);
        CHECK(fullest_bucket() <= 10);
    }
    /* Another seed, another hash; one seed, one hash. */
    dict_seed(1);
    uint64_t a = dict_hash("key:000000012345", 16);
    CHECK_U64_EQ(dict_hash("key:000000012345", 16), a);
    dict_seed(2);
    CHECK(dict_hash("key:000000012345", 16) != a);
}

/* Every length from 0 to 40 hashes every byte: a change of any one byte,
 * or of the length, changes the hash. */
TEST(hash_reads_every_byte_of_every_length) {
    char k[41];
    for (size_t n = 0; n <= 40; n++) {
        memset(k, 'a', sizeof k);
        uint64_t h = dict_hash(k, n);
        CHECK(h != dict_hash(k, n + 1));
        for (size_t i = 0; i < n; i++) {
            k[i] = 'b';
            CHECK(dict_hash(k, n) != h);
            k[i] = 'a';
        }
    }
}

TEST(resp_split_points) {
    static const struct {
        const char *in;
        size_t n;
        const char *want;
    } cases[] = {
        {S("*1\r\n$4\r\nPING\r\n"), "PING;"},
        {S("*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n"),
         "SET|key|value;"},
        /* a pipeline, an empty bulk, binary bytes (CRLF inside a bulk) */
        {S("*2\r\n$3\r\nGET\r\n$1\r\na\r\n*3\r\n$3\r\nSET\r\n$0\r\n\r\n"
           "$4\r\na\r\nb\r\n*1\r\n$6\r\nDBSIZE\r\n"),
         "GET|a;SET||a\r\nb;DBSIZE;"},
        /* inline, with CRLF and bare LF, extra blanks, an empty line */
        {S("PING\r\nSET  k\tv \r\n\r\nGET k\n"), "PING;SET|k|v;;GET|k;"},
        /* *0 and *-1 are empty commands, mixed with inline and multibulk */
        {S("*0\r\n*-1\r\nECHO x\r\n*2\r\n$4\r\nECHO\r\n$2\r\nyz\r\n"),
         ";;ECHO|x;ECHO|yz;"},
        /* the longest accepted bulk and the most arguments */
        {S("*16\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n"
           "$1\r\nf\r\n$1\r\ng\r\n$1\r\nh\r\n$1\r\ni\r\n$1\r\nj\r\n$1\r\nk\r\n"
           "$1\r\nl\r\n$1\r\nm\r\n$1\r\nn\r\n$1\r\no\r\n$1\r\np\r\n"),
         "a|b|c|d|e|f|g|h|i|j|k|l|m|n|o|p;"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        feed f;
        feed_all_ways(cases[i].in, cases[i].n, &f);
        if (strcmp(f.log, cases[i].want) != 0 || f.err)
            check_fail(__FILE__, __LINE__, "case %zu: got \"%s\" (%s)", i,
                       f.log, f.err ? f.err : "no error");
    }
}

TEST(resp_longest_bulk) {
    /* max_bulk (1000) bytes parse; one more is refused at the header,
     * before any of the body is buffered. */
    static char in[1100];
    int n = snprintf(in, sizeof in, "*1\r\n$1000\r\n");
    memset(in + n, 'x', 1000);
    memcpy(in + n + 1000, "\r\n", 2);
    feed f = {0};
    feed_chunk(&f, in, (size_t)n + 1002);
    CHECK(f.err == NULL);
    CHECK_EQ(f.log_len, 1001);
    feed g = {0};
    feed_chunk(&g, "*1\r\n$1001\r\n", 11);
    CHECK(g.err != NULL);
}

TEST(resp_large_argument_parsed_in_linear_time) {
    /* A SET of a 900-byte value fed a byte at a time: with the parser's
     * hint the buffer is parsed a few times (the headers, then once the
     * value is in), not once per byte; and the hint names the end of the
     * value as soon as its header is read. */
    static char in[1000];
    int n = snprintf(in, sizeof in, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$900\r\n");
    size_t head = (size_t)n;
    memset(in + head, 'v', 900);
    memcpy(in + head + 900, "\r\n", 2);
    size_t total = head + 902;
    feed f = {0};
    for (size_t i = 0; i < total; i++)
        feed_chunk(&f, in + i, 1);
    CHECK(f.err == NULL);
    CHECK_EQ(f.log_len, 3 + 1 + 1 + 1 + 900 + 1); /* SET|k|v...; */
    CHECK(f.parses <= head + 2);
    resp_arg argv[MAX_ARGS];
    size_t argc, need = 0;
    const char *err = NULL;
    CHECK_EQ(resp_parse_need(&limits, in, head, argv, &argc, &err, &need),
             RESP_INCOMPLETE);
    CHECK_EQ(need, total);
    CHECK_EQ(resp_parse_need(&limits, in, total - 1, argv, &argc, &err, &need),
             RESP_INCOMPLETE);
    CHECK_EQ(need, total);
}

TEST(resp_malformed) {
    static const struct {
        const char *in;
        size_t n;
        const char *before; /* commands that come out before the error */
    } cases[] = {
        {S("*1\r\n$-1\r\n"), ""},                   /* negative bulk */
        {S("*1\r\n$-5\r\nhello\r\n"), ""},          /* negative size */
        {S("*1\r\n$1001\r\n"), ""},                 /* over max_bulk */
        {S("*1\r\n$99999999999999999999\r\n"), ""}, /* overflows */
        {S("*1\r\n$9223372036854775807\r\n"), ""},  /* huge */
        {S("*17\r\n"), ""},                         /* over max_args */
        {S("*1\r\n$4x\r\nPING\r\n"), ""},           /* non-digit */
        {S("*x\r\n"), ""},                          /* non-digit count */
        {S("*+1\r\n$4\r\nPING\r\n"), ""},           /* a sign */
        {S("*\r\n"), ""},                           /* no digits */
        {S("*1\r\n$\r\n\r\n"), ""},                 /* no digits */
        {S("*1\n$4\r\nPING\r\n"), ""},              /* LF without CR */
        {S("*1\r\n$4\nPING\r\n"), ""},              /* LF without CR */
        {S("*1\r\n$4\r\nPINGxx"), ""},              /* no CRLF after bulk */
        {S("*1\r\n$4\r\nPING\n\n"), ""},            /* LF LF */
        {S("*2\r\n$4\r\nECHO\r\n:1\r\n"), ""},      /* not a bulk */
        {S("*1\r\n$4\r\nPING\r\n*1\r\n$x\r\n"), "PING;"}, /* after a good one */
        {S("PING\r\n*1\r\n$1\r\nab\r\n"), "PING;"},
        /* a header line that never ends */
        {S("*1\r\n$111111111111111111111111111111111111111111111"), ""},
        {S("*111111111111111111111111111111111111111111111111"), ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        feed f;
        feed_all_ways(cases[i].in, cases[i].n, &f);
        if (!f.err || strcmp(f.log, cases[i].before) != 0)
            check_fail(__FILE__, __LINE__, "case %zu: got \"%s\" (%s)", i,
                       f.log, f.err ? f.err : "no error");
        else if (strncmp(f.err, "Protocol error", 14) != 0)
            check_fail(__FILE__, __LINE__, "case %zu: error \"%s\"", i, f.err);
    }
}

TEST(resp_inline_words_split_as_redis) {
    /* Redis splits an inline line with sdssplitargs: a word ends at a
     * space, tab or CR, and a vertical tab or form feed is skipped
     * between words but kept inside one (what redis-server 7.0.15 did
     * with each; kv/kvdiff.py found "ECHO a\rb" echoed whole). */
    static const struct {
        const char *in;
        size_t n;
        const char *log;
    } cases[] = {
        {S("ECHO a\rb\r\n"), "ECHO|a|b;"}, {S("ECHO\ra\r\n"), "ECHO|a;"},
        {S("ECHO a\r\r\n"), "ECHO|a;"},    {S("ECHO \va\r\n"), "ECHO|a;"},
        {S("ECHO \fa\n"), "ECHO|a;"},      {S("ECHO a\vb\r\n"), "ECHO|a\vb;"},
        {S("\r \t\v\f\r\n"), ";"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        feed f;
        feed_all_ways(cases[i].in, cases[i].n, &f);
        if (f.err || strcmp(f.log, cases[i].log) != 0)
            check_fail(__FILE__, __LINE__, "case %zu: got \"%s\" (%s)", i,
                       f.log, f.err ? f.err : "no error");
    }
}

/* The general path's answer for an inline line: the same bytes, once
 * searched in part already (st->pos set by a call on a prefix that holds
 * no LF), so that the line's complete parse goes by the LF search and the
 * split after it. */
static long inline_resumed(const resp_limits *lim, const char *in, size_t n,
                           size_t cut, resp_arg *argv, size_t *argc,
                           const char **err) {
    resp_state st = {0};
    size_t need;
    long r = resp_parse_resume(lim, &st, in, cut, argv, argc, err, &need);
    if (r != RESP_INCOMPLETE) return r;
    CHECK_EQ(st.pos, cut); /* the next call starts past the bytes seen */
    return resp_parse_resume(lim, &st, in, n, argv, argc, err, &need);
}

TEST(resp_inline_one_pass_agrees_with_general_path) {
    /* A new inline line all there is split in the pass that finds its LF;
     * a line resumed is searched for its LF and split after. Both must
     * give the same words, length, error or request for room: random
     * lines of words, every separator, NULs and bare CRs, some past
     * argv's size (with and without room to grow), cut after their first
     * byte for the general path. */
    static const char alphabet[] = {'a', 'b', ' ', '\t', '\r', '\v', '\f', 0};
    const resp_limits fixed = {.max_bulk = 1000, .max_args = 4};
    const resp_limits grows = {
        .max_bulk = 1000, .max_args = 4, .grow_args = 64};
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    size_t compared = 0, refused = 0, grown = 0;
    for (int round = 0; round < 20000; round++) {
        char in[48];
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = 2 + (size_t)(seed >> 59); /* 2 to 33 bytes */
        for (size_t i = 0; i + 1 < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            in[i] = alphabet[(seed >> 40) % sizeof alphabet];
        }
        in[n - 1] = '\n';
        if (in[0] == '*') in[0] = 'a'; /* (not a multibulk) */
        const resp_limits *lim = round % 2 ? &grows : &fixed;
        resp_arg a1[4], a2[4];
        size_t c1 = 99, c2 = 99;
        const char *e1 = NULL, *e2 = NULL;
        long whole = resp_parse(lim, in, n, a1, &c1, &e1);
        long resumed = inline_resumed(lim, in, n, 1, a2, &c2, &e2);
        CHECK_EQ(whole, resumed);
        if (whole == RESP_ERROR) {
            CHECK(e1 && e2 && strcmp(e1, e2) == 0);
            refused++;
            continue;
        }
        CHECK_EQ(c1, c2);
        if (whole == RESP_GROW) {
            grown++;
            continue;
        }
        CHECK_EQ(whole, (long)n);
        for (size_t i = 0; i < c1; i++)
            CHECK(a1[i].p == a2[i].p && a1[i].len == a2[i].len);
        compared++;
    }
    printf("%zu lines split alike, %zu refused alike, %zu grown alike\n",
           compared, refused, grown);
    CHECK(compared > 1000 && refused > 100 && grown > 100);
    /* What the one pass counts as looked at, as the general path did for a
     * line found whole: its bytes to the LF, and the words again. */
    resp_state st = {0};
    resp_arg argv[4];
    size_t argc, need;
    const char *err;
    CHECK_EQ(resp_parse_resume(&fixed, &st, S("GET k\r\n"), argv, &argc, &err,
                               &need),
             7);
    CHECK_EQ(st.scanned, 7 + 6);
    CHECK_EQ(st.pos, 0);
}

TEST(resp_inline_too_long) {
    /* An inline line with no end is refused once it passes the limit,
     * rather than buffered for ever. */
    size_t n = RESP_MAX_INLINE + 1;
    char *in = malloc(n);
    memset(in, 'a', n);
    resp_arg argv[MAX_ARGS];
    size_t argc;
    const char *err = NULL;
    CHECK_EQ(resp_parse(&limits, in, n - 1, argv, &argc, &err),
             RESP_INCOMPLETE);
    CHECK_EQ(resp_parse(&limits, in, n, argv, &argc, &err), RESP_ERROR);
    CHECK(err != NULL);
    /* Too many inline words is an error too. */
    static const char words[] = "a b c d e f g h i j k l m n o p q\r\n";
    CHECK_EQ(resp_parse(&limits, words, sizeof words - 1, argv, &argc, &err),
             RESP_ERROR);
    free(in);
}

TEST(resp_inline_bound_however_cut) {
    /* A line of RESP_MAX_INLINE + 1 bytes before its LF is refused when it
     * arrives cut before the LF; it must be whole too (it was taken then),
     * and one byte shorter is taken either way. */
    for (size_t line = RESP_MAX_INLINE; line <= RESP_MAX_INLINE + 1; line++) {
        size_t n = line + 1;
        char *in = malloc(n);
        CHECK(in != NULL);
        memset(in, 'a', line - 1);
        in[line - 1] = '\r';
        in[line] = '\n';
        resp_arg argv[MAX_ARGS];
        size_t argc, need;
        const char *err = NULL;
        long whole = resp_parse(&limits, in, n, argv, &argc, &err);
        resp_state st = {0};
        long cut =
            resp_parse_resume(&limits, &st, in, line, argv, &argc, &err, &need);
        if (cut == RESP_INCOMPLETE)
            cut = resp_parse_resume(&limits, &st, in, n, argv, &argc, &err,
                                    &need);
        if (line > RESP_MAX_INLINE) {
            CHECK_EQ(cut, RESP_ERROR);
            CHECK_EQ(whole, RESP_ERROR);
            CHECK(strcmp(err, "Protocol error: too big inline request") == 0);
        } else {
            CHECK_EQ(cut, (long)n);
            CHECK_EQ(whole, (long)n);
            CHECK(argc == 1 && argv[0].len == line - 1);
        }
        free(in);
    }
}

TEST(resp_unauthenticated_bounds_as_redis) {
    /* A client that has not passed AUTH may send what Redis lets one send
     * (CVE-2021-32675): a multibulk count of 10 and bulks of 16384 bytes
     * at most, refused at the header with Redis' words, however the
     * request is cut (the quick path included); inline lines keep their
     * own bound only. */
    static const resp_limits na = {
        .max_bulk = 1 << 20, .max_args = MAX_ARGS, .noauth = true};
    static const struct {
        const char *in;
        size_t n;
        const char *err; /* NULL: it parses, to `log` */
        const char *log;
    } cases[] = {
        {S("*11\r\n"), "Protocol error: unauthenticated multibulk length", ""},
        {S("*2\r\n$4\r\nAUTH\r\n$16385\r\n"),
         "Protocol error: unauthenticated bulk length", ""},
        {S("*1\r\n$100000\r\n"), "Protocol error: unauthenticated bulk length",
         ""},
        {S("*1\r\n$16384\r\n"), NULL, ""}, /* taken: the body is awaited */
        {S("*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*0\r\n"), NULL, "AUTH|pw;;"},
        {S("*10\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n"
           "$1\r\nf\r\n$1\r\ng\r\n$1\r\nh\r\n$1\r\ni\r\n$1\r\nj\r\n"),
         NULL, "a|b|c|d|e|f|g|h|i|j;"},
        {S("a b c d e f g h i j k l\r\n"), NULL, "a|b|c|d|e|f|g|h|i|j|k|l;"},
    };
    feed_limits = &na;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        feed f;
        feed_all_ways(cases[i].in, cases[i].n, &f);
        bool ok =
            strcmp(f.log, cases[i].log) == 0 &&
            (cases[i].err ? f.err && strcmp(f.err, cases[i].err) == 0 : !f.err);
        if (!ok)
            check_fail(__FILE__, __LINE__, "case %zu: got \"%s\" (%s)", i,
                       f.log, f.err ? f.err : "no error");
    }
    feed_limits = &limits;
}

TEST(store_keys) {
    store st;
    CHECK_EQ(store_init(&st), 0);
    char k[32], v[32];
    for (int i = 0; i < 10000; i++) {
        int kn = snprintf(k, sizeof k, "key:%d", i);
        int vn = snprintf(v, sizeof v, "value:%d", i * 7);
        CHECK_EQ(store_set(&st, k, (size_t)kn, v, (size_t)vn), 0);
    }
    CHECK_EQ(store_count(&st), 10000);
    /* Overwrite half, delete a third, read all back. */
    for (int i = 0; i < 10000; i += 2) {
        int kn = snprintf(k, sizeof k, "key:%d", i);
        CHECK_EQ(store_set(&st, k, (size_t)kn, "", 0), 0);
    }
    int deleted = 0;
    for (int i = 0; i < 10000; i += 3) {
        int kn = snprintf(k, sizeof k, "key:%d", i);
        CHECK_EQ(store_del(&st, k, (size_t)kn), 1);
        CHECK_EQ(store_del(&st, k, (size_t)kn), 0);
        deleted++;
    }
    CHECK_EQ(store_count(&st), 10000 - deleted);
    for (int i = 0; i < 10000; i++) {
        int kn = snprintf(k, sizeof k, "key:%d", i);
        size_t vlen = 99;
        const char *got = store_get(&st, k, (size_t)kn, &vlen);
        if (i % 3 == 0) {
            CHECK(got == NULL);
        } else if (i % 2 == 0) {
            CHECK(got != NULL && vlen == 0);
        } else {
            int vn = snprintf(v, sizeof v, "value:%d", i * 7);
            CHECK(got != NULL && vlen == (size_t)vn &&
                  memcmp(got, v, vlen) == 0);
        }
    }
    /* Binary keys: a NUL inside, and the empty key. */
    CHECK_EQ(store_set(&st, "a\0b", 3, "1", 1), 0);
    CHECK_EQ(store_set(&st, "", 0, "2", 1), 0);
    size_t vlen;
    CHECK(store_get(&st, "a", 1, &vlen) == NULL);
    CHECK(store_get(&st, "a\0b", 3, &vlen) != NULL);
    CHECK(store_get(&st, "", 0, &vlen) != NULL);
    store_clear(&st);
    CHECK_EQ(store_count(&st), 0);
    CHECK(store_get(&st, "key:1", 5, &vlen) == NULL);
    CHECK_EQ(store_set(&st, "k", 1, "v", 1), 0);
    CHECK_EQ(store_count(&st), 1);
    store_free(&st);
}

/* A string of at most KOBJ_INLINE bytes (a small counter, a flag: what
 * most values are) is kept in its key's entry, with no allocation of its
 * own; a longer one has its own. Every length on both sides of that, as
 * written and read. */
TEST(store_short_string_in_its_entry) {
    store st;
    CHECK_EQ(store_init(&st), 0);
    char val[32];
    for (size_t n = 0; n <= 24; n++) {
        memset(val, 'a' + (int)n, n);
        CHECK_EQ(store_set(&st, "key:123456", 10, val, n), 0);
        dict_entry *e = store_find(&st, "key:123456", 10);
        size_t vlen = 99;
        const char *got = store_get(&st, "key:123456", 10, &vlen);
        CHECK(got != NULL && vlen == n && memcmp(got, val, n) == 0);
        bool inside = got >= (const char *)e &&
                      got + n <= (const char *)e + malloc_usable_size(e);
        CHECK_EQ(inside, n <= KOBJ_INLINE);
    }
    store_free(&st);
}

/* A key as a benchmark's (10 bytes) with a short value and an expiry is
 * one malloc block of glibc's 64-byte size class (at most 56 bytes asked
 * for, 8 of malloc's own beside them): the entry's link, hash and length, the
 * value and its place in the expiry heap, and the key. The expiry time itself
 * is in the heap, read back as set. */
TEST(store_key_with_expiry_in_one_64_byte_block) {
    store st;
    CHECK_EQ(store_init(&st), 0);
    char k[16];
    for (int i = 0; i < 1000; i++) {
        int kn = snprintf(k, sizeof k, "key:%06d", i * 997);
        dict_entry *e = NULL;
        CHECK_EQ(store_set_entry(&st, k, (size_t)kn, "v", 1, &e), 0);
        CHECK_EQ(store_set_expire(&st, e, 1000000 - i), 0);
        /* (what dict_add asks malloc for: glibc may hand a larger
         * chunk it had free, so malloc_usable_size would not say) */
        CHECK(sizeof *e + st.d.extra + e->klen <= 56);
    }
    for (int i = 0; i < 1000; i++) {
        int kn = snprintf(k, sizeof k, "key:%06d", i * 997);
        dict_entry *e = store_find(&st, k, (size_t)kn);
        CHECK(e != NULL);
        CHECK_EQ(store_expire(&st, e), 1000000 - i);
    }
    CHECK_EQ(store_expire(&st, store_first_expiry(&st)), 1000000 - 999);
    store_free(&st);
}

/* ---------------------------------------------------------- replication */

/* Runs one request given as words on k; returns the reply. */
static const char *exec_words(kv *k, buf *out, const char *line) {
    static char copy[4096];
    resp_arg argv[MAX_ARGS];
    size_t argc = 0;
    snprintf(copy, sizeof copy, "%s", line);
    for (char *w = strtok(copy, " "); w; w = strtok(NULL, " ")) {
        CHECK(argc < MAX_ARGS); /* a case of more words needs a larger argv */
        argv[argc++] = (resp_arg){w, strlen(w)};
    }
    out->len = 0;
    kv_exec(k, NULL, argv, argc, out);
    buf_put(out, "", 1); /* NUL: the reply as a string */
    return out->p;
}

static void kv_setup(kv *k, bool replica) {
    kv_init(k);
    CHECK_EQ(store_init(&k->db), 0);
    k->replica = replica;
    memset(k->replid, 'a', 40);
}

/* Keys and values of every length around the word sizes the lookup and the
 * reply copy take without a call (0 to 40 bytes): a key and its sibling
 * that differs in one byte, at every position, are two keys; GET answers
 * each value byte for byte, with its length. */
static void short_bytes(char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        p[i] = (char)('a' + (seed * 7 + i * 13) % 26);
}

TEST(keys_and_values_of_every_short_length) {
    kv k;
    kv_setup(&k, false);
    buf out = {0};
    char key[48], sib[48], val[48], want[64];
    for (size_t n = 0; n <= 40; n++) {
        short_bytes(key, n, (unsigned)n);
        short_bytes(val, n, (unsigned)n + 100);
        CHECK_EQ(store_set(&k.db, key, n, val, n), 0);
        for (size_t at = 0; at < n; at++) {
            memcpy(sib, key, n);
            sib[at] = (char)(sib[at] ^ 0x20); /* one byte, one bit off */
            size_t vlen;
            CHECK(store_get(&k.db, sib, n, &vlen) == NULL);
            CHECK_EQ(store_set(&k.db, sib, n, "s", 1), 0);
            const char *got = store_get(&k.db, key, n, &vlen);
            CHECK(got != NULL && vlen == n && memcmp(got, val, n) == 0);
            CHECK_EQ(store_del(&k.db, sib, n), 1);
        }
        resp_arg a[2] = {{"GET", 3}, {key, n}};
        out.len = 0;
        CHECK_EQ(kv_exec(&k, NULL, a, 2, &out), 0);
        int wn = snprintf(want, sizeof want, "$%zu\r\n", n);
        memcpy(want + wn, val, n);
        memcpy(want + wn + n, "\r\n", 2);
        CHECK_EQ(out.len, (size_t)wn + n + 2);
        CHECK(memcmp(out.p, want, out.len) == 0);
    }
    CHECK_EQ(store_count(&k.db), 41);
    buf_free(&out);
    kv_free(&k);
    /* The compare alone, as a lookup whose hash and length matched calls
     * it: equal, and one byte off at every position. */
    for (size_t n = 0; n <= 40; n++) {
        short_bytes(key, n, 7);
        memcpy(sib, key, n);
        CHECK(bytes_same(key, sib, n));
        for (size_t at = 0; at < n; at++) {
            sib[at] = (char)(sib[at] ^ 0x01);
            CHECK(!bytes_same(key, sib, n));
            sib[at] = key[at];
        }
    }
}

/* Strings that grow out of their entry and shrink back into it, by every
 * command that writes one: each answer and each value as Redis has it. */
TEST(strings_move_in_and_out_of_their_entry) {
    kv k;
    kv_setup(&k, false);
    buf out = {0};
#define STEP(req, want)                                                        \
    { req, want, sizeof want - 1 }
    static const struct {
        const char *req, *want;
        size_t len; /* the answer's (some hold NULs) */
    } steps[] = {
        STEP("SET s abcd", "+OK\r\n"),
        STEP("APPEND s efgh", ":8\r\n"),
        STEP("GET s", "$8\r\nabcdefgh\r\n"),
        STEP("APPEND s i", ":9\r\n"),
        STEP("GET s", "$9\r\nabcdefghi\r\n"),
        STEP("APPEND s 0123456789", ":19\r\n"),
        STEP("SET s xy GET", "$19\r\nabcdefghi0123456789\r\n"),
        STEP("GET s", "$2\r\nxy\r\n"),
        STEP("SETRANGE s 7 Z", ":8\r\n"),
        STEP("GETRANGE s 0 -1", "$8\r\nxy\0\0\0\0\0Z\r\n"),
        STEP("SETRANGE s 8 long", ":12\r\n"),
        STEP("GETRANGE s 7 -1", "$5\r\nZlong\r\n"),
        STEP("STRLEN s", ":12\r\n"),
        STEP("SETRANGE t 3 ab", ":5\r\n"),
        STEP("SETRANGE u 5 abcdefgh", ":13\r\n"),
        STEP("GETRANGE u 4 -1", "$9\r\n\0abcdefgh\r\n"),
        STEP("SET n 99999998", "+OK\r\n"),
        STEP("INCR n", ":99999999\r\n"),
        STEP("INCR n", ":100000000\r\n"),
        STEP("DECR n", ":99999999\r\n"),
        STEP("INCRBYFLOAT n 0.5", "$10\r\n99999999.5\r\n"),
        STEP("GETSET n 1", "$10\r\n99999999.5\r\n"),
        STEP("GETSET n 123456789", "$1\r\n1\r\n"),
        STEP("RENAME n m", "+OK\r\n"),
        STEP("GET m", "$9\r\n123456789\r\n"),
        STEP("RENAME t m", "+OK\r\n"),
        STEP("GETDEL m", "$5\r\n\0\0\0ab\r\n"),
        STEP("LPUSH s x", "-WRONGTYPE Operation against a key holding the "
                          "wrong kind of value\r\n"),
        STEP("DEL s u", ":2\r\n"),
        STEP("LPUSH s x", ":1\r\n"),
        STEP("DBSIZE", ":1\r\n"),
    };
#undef STEP
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        exec_words(&k, &out, steps[i].req);
        if (out.len - 1 != steps[i].len ||
            memcmp(out.p, steps[i].want, steps[i].len) != 0)
            check_fail(__FILE__, __LINE__, "step %zu (%s): got \"%.*s\"", i,
                       steps[i].req, (int)out.len - 1, out.p);
    }
    buf_free(&out);
    kv_free(&k);
}

/* A buffer asked for more than half the address space refuses (false, the
 * buffer as it was), where doubling toward it would wrap; a bulk reply
 * that long marks the buffer out of memory and writes nothing. */
TEST(buf_refuses_sizes_past_memory) {
    buf b = {0};
    buf_put(&b, "abc", 3);
    CHECK(!buf_grow(&b, SIZE_MAX - 10));
    CHECK(!buf_grow(&b, SIZE_MAX / 2));
    CHECK(!buf_reserve_upto(&b, SIZE_MAX - 10, SIZE_MAX));
    CHECK(b.len == 3 && memcmp(b.p, "abc", 3) == 0 && !b.oom);
    /* Neither a constant to the compiler, which would warn of the copy
     * that the size check never reaches. */
    volatile size_t huge = SIZE_MAX - 20;
    const char *volatile from = "x";
    buf_bulk(&b, from, huge);
    CHECK(b.oom && b.len == 3);
    buf_free(&b);
}

static bool same_keys(const store *a, const store *b, const char *const *keys,
                      size_t n) {
    if (store_count(a) != store_count(b)) return false;
    for (size_t i = 0; i < n; i++) {
        size_t la, lb;
        const char *va = store_get(a, keys[i], strlen(keys[i]), &la);
        const char *vb = store_get(b, keys[i], strlen(keys[i]), &lb);
        if (!va != !vb) return false;
        if (va && (la != lb || memcmp(va, vb, la) != 0)) return false;
    }
    return true;
}

TEST(repl_log_record_bytes_at_digit_boundaries) {
    /* A record is the multibulk request itself, byte for byte: every
     * header's count and lengths around each change in their number of
     * digits, against the same request written by snprintf. */
    static const size_t lens[] = {
        0,   1,    9,    10,    11,    99,     100,     101,
        999, 1000, 9999, 10000, 99999, 100000, 1000000, REPL_CHUNK + 7};
    static const size_t argcs[] = {1, 2, 9, 10, 11, 12};
    static char val[REPL_CHUNK + 7];
    memset(val, 'x', sizeof val);
    static char want[REPL_CHUNK + 1000];
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (size_t ci = 0; ci < sizeof argcs / sizeof *argcs; ci++) {
            size_t argc = argcs[ci];
            resp_arg a[12];
            a[0] = (resp_arg){"RPUSH", 5};
            for (size_t i = 1; i < argc; i++)
                a[i] = (resp_arg){val, i == argc - 1 ? lens[li] : i};
            size_t n = (size_t)snprintf(want, sizeof want, "*%zu\r\n", argc);
            for (size_t i = 0; i < argc; i++) {
                n += (size_t)snprintf(want + n, sizeof want - n, "$%zu\r\n",
                                      a[i].len);
                memcpy(want + n, a[i].p, a[i].len);
                n += a[i].len;
                memcpy(want + n, "\r\n", 2);
                n += 2;
            }
            repl_log log;
            repl_log_init(&log);
            CHECK_EQ(repl_record_len(a, argc), n);
            CHECK_EQ(repl_log_reserve(&log, n), 0);
            repl_log_append(&log, a, argc);
            repl_cursor cur;
            CHECK_EQ(repl_log_seek(&log, 0, &cur), 0);
            size_t got;
            const char *p = repl_log_next(&log, &cur, &got);
            CHECK(p != NULL && got == n && memcmp(p, want, n) == 0);
            repl_log_free(&log);
        }
}

TEST(repl_record_len_past_every_size_limit) {
    /* The length of a record whose value is far past any default limit
     * (16 MiB + 1, 512 MiB, past 2^32, 10^15): its header's digits
     * counted as snprintf writes them. Only lengths: nothing is copied. */
    static const size_t lens[] = {(16u << 20) + 1, 512u << 20,
                                  ((size_t)1 << 32) + 5, 999999999999999,
                                  1000000000000000};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        resp_arg a[2] = {{"SET", 3}, {"", lens[i]}};
        char head[48];
        size_t want = (size_t)snprintf(head, sizeof head,
                                       "*2\r\n$3\r\nSET\r\n"
                                       "$%zu\r\n",
                                       lens[i]) +
                      lens[i] + 2;
        CHECK_U64_EQ(repl_record_len(a, 2), want);
    }
}

TEST(repl_log_records_and_offsets) {
    /* Records of many sizes, twenty longer than a chunk (so the chunk
     * table grows past its first 16 entries): walking the log
     * gives every record back, in order, each one multibulk request that
     * parses to what was appended; the offsets are byte counts. */
    repl_log log;
    repl_log_init(&log);
    static char big[REPL_CHUNK + 100];
    memset(big, 'v', sizeof big);
    enum { N = 30000 };
    char key[32];
    uint64_t expect_end = 0;
    for (int i = 0; i < N; i++) {
        int kn = snprintf(key, sizeof key, "key:%d", i);
        size_t vlen = i % 1500 == 0 ? sizeof big : (size_t)(i % 97);
        resp_arg a[3] = {{"SET", 3}, {key, (size_t)kn}, {big, vlen}};
        size_t len = repl_record_len(a, 3);
        CHECK_EQ(repl_log_reserve(&log, len), 0);
        repl_log_append(&log, a, 3);
        expect_end += len;
    }
    CHECK_U64_EQ(log.end, expect_end);
    CHECK_EQ(log.nrec, N);
    CHECK(log.nchunks > 20); /* the walk crosses chunks */
    resp_limits lim = {.max_bulk = sizeof big, .max_args = 4};
    repl_cursor cur;
    CHECK_EQ(repl_log_seek(&log, 0, &cur), 0);
    uint64_t off = 0;
    for (int i = 0; i < N; i++) {
        CHECK_U64_EQ(repl_log_offset(&log, &cur), off);
        size_t len;
        const char *p = repl_log_next(&log, &cur, &len);
        CHECK(p != NULL);
        resp_arg a[4];
        size_t argc;
        const char *err = NULL;
        CHECK_EQ(resp_parse(&lim, p, len, a, &argc, &err), (long)len);
        int kn = snprintf(key, sizeof key, "key:%d", i);
        size_t vlen = i % 1500 == 0 ? sizeof big : (size_t)(i % 97);
        CHECK(argc == 3 && a[1].len == (size_t)kn &&
              memcmp(a[1].p, key, (size_t)kn) == 0 && a[2].len == vlen);
        off += len;
    }
    size_t len;
    CHECK(repl_log_next(&log, &cur, &len) == NULL);
    CHECK_U64_EQ(off, log.end);

    /* Seeking: to every 997th record's start, inside a record, past the
     * end; and at the end, the next append is the next record. */
    for (size_t r = 0; r < log.nrec; r += 997) {
        CHECK_EQ(repl_log_seek(&log, log.starts[r], &cur), 0);
        const char *p = repl_log_next(&log, &cur, &len);
        repl_cursor c0;
        CHECK_EQ(repl_log_seek(&log, 0, &c0), 0);
        for (size_t j = 0; j < r; j++)
            repl_log_next(&log, &c0, &len);
        CHECK(repl_log_next(&log, &c0, &len) == p);
        CHECK_EQ(repl_log_seek(&log, log.starts[r] + 1, &cur), -EINVAL);
    }
    CHECK_EQ(repl_log_seek(&log, log.end + 1, &cur), -EINVAL);
    CHECK_EQ(repl_log_seek(&log, log.end, &cur), 0);
    CHECK(!repl_log_more(&log, &cur));
    resp_arg f = {"FLUSHALL", 8};
    CHECK_EQ(repl_log_reserve(&log, repl_record_len(&f, 1)), 0);
    repl_log_append(&log, &f, 1);
    const char *p = repl_log_next(&log, &cur, &len);
    CHECK(p && len == 18 && memcmp(p, "*1\r\n$8\r\nFLUSHALL\r\n", 18) == 0);
    repl_log_free(&log);
}

TEST(repl_replica_equals_primary) {
    /* What a primary runs is logged; a replica applying the log, cut at
     * every byte, ends with the same keys and an offset equal to the
     * primary's. Reads, refused INCRs and DELs that find nothing are not
     * logged. */
    static const char *const script[] = {
        "SET a 1", "SET b hello",  "INCR a",    "INCR a",     "GET a",
        "INCR b",  "DEL nothing",  "SET c x",   "DEL b c zz", "INCR n",
        "FLUSHDB", "SET k1 v1",    "SET k2 v2", "INCR k3",    "EXISTS k1",
        "DEL k1",  "SET k2 other", "DBSIZE",    "INCR k3",
    };
    static const char *const keys[] = {"a", "b", "c", "n", "k1", "k2", "k3"};
    kv p;
    kv_setup(&p, false);
    buf out = {0};
    for (size_t i = 0; i < sizeof script / sizeof script[0]; i++)
        exec_words(&p, &out, script[i]);
    CHECK_EQ(p.log.nrec, 14); /* 19 requests less 5 that wrote nothing */
    /* the log, contiguous (it fits one chunk) */
    CHECK_EQ(p.log.nchunks, 1);
    const char *bytes = p.log.chunks[0].p;
    size_t n = (size_t)p.log.end;
    resp_limits lim = {.max_bulk = 1000, .max_args = MAX_ARGS};
    resp_arg argv[MAX_ARGS];
    for (size_t cut = 0; cut <= n; cut++) {
        kv r;
        kv_setup(&r, true);
        const char *err = NULL;
        size_t need;
        long a = kv_apply_stream(&r, &lim, argv, bytes, cut, &err, &need);
        CHECK(need >= 1 && (size_t)a + need > cut);
        CHECK(a >= 0 && (size_t)a <= cut);
        CHECK_U64_EQ(r.offset, (uint64_t)a);
        /* the rest of the first piece, then the second */
        long b = kv_apply_stream(&r, &lim, argv, bytes + a, n - (size_t)a, &err,
                                 &need);
        CHECK_EQ((size_t)a + (size_t)b, n);
        CHECK_U64_EQ(r.offset, p.log.end);
        CHECK(same_keys(&p.db, &r.db, keys, sizeof keys / sizeof keys[0]));
        kv_free(&r);
    }
    buf_free(&out);
    kv_free(&p);
}

/* Applies in[0, n) on a new replica as its primary's log, then frees it:
 * what kv_apply_stream returned, its *err (NULL if it set none; its
 * errors are in static storage, so they outlive the replica) and the
 * replica's offset after it. */
static long apply_to_new_replica(const char *in, size_t n, const char **err,
                                 uint64_t *offset) {
    resp_limits lim = {.max_bulk = 1000, .max_args = MAX_ARGS};
    resp_arg argv[MAX_ARGS];
    size_t need;
    kv r;
    kv_setup(&r, true);
    *err = NULL;
    long got = kv_apply_stream(&r, &lim, argv, in, n, err, &need);
    *offset = r.offset;
    kv_free(&r);
    return got;
}

TEST(repl_malformed_stream) {
    /* A replica refuses what is not a logged write with its arguments:
     * the records before it are applied and counted, then an error. */
    static const struct {
        const char *in;
        size_t n;
        size_t good; /* bytes of good records before the bad one */
    } cases[] = {
        {S("PING\r\n"), 0},                               /* inline */
        {S("*2\r\n$3\r\nGET\r\n$1\r\na\r\n"), 0},         /* a read */
        {S("*2\r\n$3\r\nSET\r\n$1\r\na\r\n"), 0},         /* arity */
        {S("*1\r\n$4\r\nINCR\r\n"), 0},                   /* arity */
        {S("*0\r\n"), 0},                                 /* empty */
        {S("*1\r\n$8\r\nFLUSHALL\r\n*1\r\n$x\r\n"), 18},  /* garbage */
        {S("*1\r\n$8\r\nFLUSHALL\r\n$3\r\nSET\r\n"), 18}, /* not '*' */
        {S("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"
           "*2\r\n$4\r\nINCR\r\n$1\r\nk\r\n"),
         27}, /* INCR of "v": the two have diverged */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *err;
        uint64_t offset;
        long got = apply_to_new_replica(cases[i].in, cases[i].n, &err, &offset);
        if (got != -EPROTO || !err || offset != cases[i].good)
            check_fail(__FILE__, __LINE__, "case %zu: %ld, offset %llu", i, got,
                       (unsigned long long)offset);
    }
}

/* A record refused as no logged write names its command in the line the
 * replica logs (up to 32 bytes, what is not printable as '?'): it said
 * "not a logged write with its arguments", and the reader was left to
 * guess which of the primary's records that was (a PING, a SELECT). */
TEST(repl_refused_record_names_its_command) {
    static const struct {
        const char *in;
        size_t n;
        const char *named;
    } cases[] = {
        {S("*2\r\n$6\r\nSELECT\r\n$1\r\n9\r\n"), "'SELECT'"},
        {S("*1\r\n$4\r\nPING\r\n"), "'PING'"},
        {S("*2\r\n$3\r\nSET\r\n$1\r\na\r\n"), "'SET'"},
        {S("*1\r\n$5\r\nMULTI\r\n*1\r\n$3\r\nF\nO\r\n"
           "*1\r\n$4\r\nEXEC\r\n"),
         "'F?O'"},
        {S("*1\r\n$40\r\n0123456789012345678901234567890123456789\r\n"),
         "'01234567890123456789012345678901...'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *err;
        uint64_t offset;
        long got = apply_to_new_replica(cases[i].in, cases[i].n, &err, &offset);
        if (got != -EPROTO || !err || !strstr(err, cases[i].named))
            check_fail(__FILE__, __LINE__, "case %zu: %ld, \"%s\"", i, got,
                       err ? err : "(none)");
    }
}

/* A transaction arriving in pieces is scanned for its EXEC once: each
 * call goes on from where the last one stopped, not from its MULTI. The
 * scan started over at every read, so a transaction of n bytes cost the
 * replica n^2 / read-size bytes of parsing (a 44 MB MULTI of 600,000 SETs
 * took it some 20 s). The bytes already scanned are made unreadable
 * between the calls: a second scan of them is a fault. */
TEST(repl_transaction_scanned_once_however_it_arrives) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), cap = 64 * page;
    char *b = mmap(NULL, cap, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(b != MAP_FAILED);
    size_t n = (size_t)sprintf(b, "*1\r\n$5\r\nMULTI\r\n");
    size_t cut = 0; /* the end of the first piece: a record boundary */
    int keys = 0;
    while (n < cap - 2 * page) {
        if (!cut && n >= 32 * page) cut = n;
        n += (size_t)sprintf(
            b + n, "*3\r\n$3\r\nSET\r\n$6\r\nk%05d\r\n$1\r\nv\r\n", keys++);
    }
    size_t total = n + (size_t)sprintf(b + n, "*1\r\n$4\r\nEXEC\r\n");
    resp_limits lim = {.max_bulk = 1000, .max_args = MAX_ARGS};
    resp_arg argv[MAX_ARGS];
    const char *err = NULL;
    size_t need;
    kv r;
    kv_setup(&r, true);
    CHECK_EQ(kv_apply_stream(&r, &lim, argv, b, cut, &err, &need), 0);
    /* Its MULTI is read again (the call starts there); the records after
     * its first page, scanned already, must not be. */
    CHECK_EQ(mprotect(b + page, 31 * page, PROT_NONE), 0);
    CHECK_EQ(kv_apply_stream(&r, &lim, argv, b, n, &err, &need), 0);
    CHECK(need > n && need <= total);
    CHECK_U64_EQ(r.offset, 0);
    CHECK_EQ(store_count(&r.db), 0);
    CHECK_EQ(mprotect(b + page, 31 * page, PROT_READ | PROT_WRITE), 0);
    CHECK_EQ(kv_apply_stream(&r, &lim, argv, b, total, &err, &need),
             (long)total);
    CHECK_U64_EQ(r.offset, total);
    CHECK_EQ(store_count(&r.db), (size_t)keys);
    kv_free(&r);
    munmap(b, cap);
}

/* SPOP with a count larger than a request's argument limit (lull-kv's
 * MAX_ARGS, 2^20) is logged as SREMs a replica can parse: it was one SREM
 * of every member taken, which a replica refused as a protocol error, then
 * got again on every resume, and never caught up. The batches sit in one
 * transaction, so a replica's clients never see half of the SPOP. */
TEST(repl_spop_past_the_argument_limit_replicates) {
    const size_t max_args = (size_t)1 << 20, half = max_args / 2 + 8;
    kv p;
    kv_setup(&p, false);
    p.log.backlog = 0; /* the whole log kept: it is replayed below */
    resp_arg *argv = malloc((half + 2) * sizeof *argv);
    char *names = malloc(2 * half * 8);
    CHECK(argv && names);
    buf out = {0};
    for (size_t part = 0; part < 2; part++) {
        argv[0] = (resp_arg){"SADD", 4};
        argv[1] = (resp_arg){"s", 1};
        for (size_t i = 0; i < half; i++) {
            char *m = names + (part * half + i) * 8;
            size_t v = part * half + i; /* 7 digits, below 10^7 */
            for (int d = 6; d >= 0; d--, v /= 10)
                m[d] = (char)('0' + v % 10);
            argv[i + 2] = (resp_arg){m, 7};
        }
        out.len = 0;
        kv_exec(&p, NULL, argv, half + 2, &out);
    }
    resp_arg spop[3] = {{"SPOP", 4}, {"s", 1}, {"2000000", 7}};
    out.len = 0;
    kv_exec(&p, NULL, spop, 3, &out);
    kv_exec(&p, NULL, argv, 4, &out); /* SADD s: two members left */
    CHECK_EQ(store_count(&p.db), 1);
    /* The log, applied by a replica under the server's limits. */
    buf log = {0};
    for (size_t c = 0; c < p.log.nchunks; c++)
        buf_put(&log, p.log.chunks[c].p, p.log.chunks[c].used);
    CHECK_EQ(log.len, (size_t)p.log.end);
    resp_limits lim = {.max_bulk = 1 << 20, .max_args = max_args};
    resp_arg *rargv = malloc(max_args * sizeof *rargv);
    CHECK(rargv != NULL);
    kv r;
    kv_setup(&r, true);
    const char *err = "";
    size_t need;
    long n = kv_apply_stream(&r, &lim, rargv, log.p, log.len, &err, &need);
    if (n != (long)log.len)
        check_fail(__FILE__, __LINE__, "applied %ld of %zu: %s", n, log.len,
                   err);
    buf a = {0}, b = {0};
    kv_dump(&p, &a);
    kv_dump(&r, &b);
    CHECK(a.len == b.len && memcmp(a.p, b.p, a.len) == 0);
    buf_free(&a);
    buf_free(&b);
    kv_free(&r);
    kv_free(&p);
    buf_free(&log);
    buf_free(&out);
    free(rargv);
    free(argv);
    free(names);
}

TEST(replica_is_read_only) {
    kv r;
    kv_setup(&r, true);
    buf out = {0};
    static const char *const writes[] = {"SET a 1",  "DEL a",   "INCR a",
                                         "FLUSHALL", "FLUSHDB", "set a 1"};
    for (size_t i = 0; i < sizeof writes / sizeof writes[0]; i++)
        CHECK(strcmp(exec_words(&r, &out, writes[i]),
                     "-READONLY You can't write against a read only "
                     "replica.\r\n") == 0);
    CHECK_EQ(store_count(&r.db), 0);
    CHECK_EQ(r.log.nrec, 0);
    /* Reads are answered, from what the primary's log put there. */
    CHECK_EQ(store_set(&r.db, "a", 1, "1", 1), 0);
    CHECK(strcmp(exec_words(&r, &out, "GET a"), "$1\r\n1\r\n") == 0);
    CHECK(strcmp(exec_words(&r, &out, "EXISTS a"), ":1\r\n") == 0);
    CHECK(strcmp(exec_words(&r, &out, "DBSIZE"), ":1\r\n") == 0);
    buf_free(&out);
    kv_free(&r);
}

/* The value of field `name` in an INFO reply, or NULL. */
static const char *info_field(const char *info, const char *name, char *val,
                              size_t cap) {
    size_t n = strlen(name);
    for (const char *l = info; l && *l;
         l = strstr(l, "\r\n"), l = l ? l + 2 : l)
        if (strncmp(l, name, n) == 0 && l[n] == ':') {
            const char *end = strstr(l, "\r\n");
            size_t len = (size_t)(end - l) - n - 1;
            if (len >= cap) len = cap - 1;
            memcpy(val, l + n + 1, len);
            val[len] = 0;
            return val;
        }
    return NULL;
}

/* An owner's INFO stats lines (server.c writes what its loop counted). */
static void stats_lines(kv *k, buf *b) {
    (void)k;
    buf_str(b, "loop_polls:7\r\n");
}

TEST(info_replication_fields) {
    char v[128];
    buf out = {0};
    kv p;
    kv_setup(&p, false);
    exec_words(&p, &out, "SET a 1");
    repl_peer r1 = {.ip = "127.0.0.1", .port = 7001, .offset = 10};
    repl_peer r2 = {.ip = "10.0.0.2", .port = 7002, .offset = 29};
    r1.prev = &p.peers;
    r1.next = &r2;
    r2.prev = &r1;
    r2.next = &p.peers;
    p.peers.next = &r1;
    p.peers.prev = &r2;
    p.npeers = 2;
    const char *info = exec_words(&p, &out, "INFO replication");
    /* A bulk string: $<len>, then the lines. */
    CHECK(info[0] == '$');
    CHECK(strcmp(info_field(info, "role", v, sizeof v), "master") == 0);
    CHECK(strcmp(info_field(info, "connected_slaves", v, sizeof v), "2") == 0);
    CHECK(strcmp(info_field(info, "slave0", v, sizeof v),
                 "ip=127.0.0.1,port=7001,state=online,offset=10,lag=0") == 0);
    CHECK(strcmp(info_field(info, "slave1", v, sizeof v),
                 "ip=10.0.0.2,port=7002,state=online,offset=29,lag=0") == 0);
    CHECK(strcmp(info_field(info, "master_repl_offset", v, sizeof v), "27") ==
          0); /* SET a 1 */
    /* The bulk length is the body's. */
    const char *body = strstr(info, "\r\n") + 2;
    CHECK_EQ((size_t)atoi(info + 1), strlen(body) - 2);
    /* INFO and INFO all include replication and clients; another section
     * is empty. */
    p.clients = 3;
    info = exec_words(&p, &out, "INFO");
    CHECK(strcmp(info_field(info, "connected_clients", v, sizeof v), "3") == 0);
    CHECK(info_field(info, "role", v, sizeof v) != NULL);
    CHECK(strcmp(exec_words(&p, &out, "INFO nosuchsection"), "$0\r\n\r\n") ==
          0);
    /* INFO stats: the owner's lines under the section's header, in INFO
     * alone too. */
    CHECK(strcmp(exec_words(&p, &out, "INFO stats"), "$9\r\n# Stats\r\n\r\n") ==
          0);
    p.stats = stats_lines;
    info = exec_words(&p, &out, "INFO stats");
    CHECK(strcmp(info_field(info, "loop_polls", v, sizeof v), "7") == 0);
    info = exec_words(&p, &out, "INFO");
    CHECK(strcmp(info_field(info, "loop_polls", v, sizeof v), "7") == 0);
    CHECK(info_field(info, "role", v, sizeof v) != NULL);

    kv r;
    kv_setup(&r, true);
    r.master_host = "127.0.0.1";
    r.master_port = 6380;
    r.offset = 29;
    info = exec_words(&r, &out, "info REPLICATION");
    CHECK(strcmp(info_field(info, "role", v, sizeof v), "slave") == 0);
    CHECK(strcmp(info_field(info, "master_host", v, sizeof v), "127.0.0.1") ==
          0);
    CHECK(strcmp(info_field(info, "master_port", v, sizeof v), "6380") == 0);
    CHECK(strcmp(info_field(info, "master_link_status", v, sizeof v), "down") ==
          0);
    CHECK(strcmp(info_field(info, "slave_repl_offset", v, sizeof v), "29") ==
          0);
    CHECK(strcmp(info_field(info, "master_repl_offset", v, sizeof v), "29") ==
          0);
    r.link_up = true;
    info = exec_words(&r, &out, "INFO replication");
    CHECK(strcmp(info_field(info, "master_link_status", v, sizeof v), "up") ==
          0);
    buf_free(&out);
    kv_free(&r);
    kv_free(&p);
}

TEST(incr_integers_as_redis_reads_them) {
    static const struct {
        const char *s;
        bool ok;
        long long v;
    } cases[] = {
        {"0", true, 0},
        {"7", true, 7},
        {"-7", true, -7},
        {"9223372036854775807", true, INT64_MAX},
        {"-9223372036854775808", true, INT64_MIN},
        {"9223372036854775808", false, 0},
        {"-9223372036854775809", false, 0},
        {"99999999999999999999", false, 0},
        {"007", false, 0}, /* leading zeros */
        {"00", false, 0},
        {"-0", false, 0},
        {"-01", false, 0},
        {"+1", false, 0}, /* a plus sign */
        {" 1", false, 0}, /* spaces */
        {"1 ", false, 0},
        {"", false, 0},
        {"-", false, 0},
        {"1x", false, 0},
        {"0x10", false, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long long v = 12345;
        bool ok = kv_parse_i64(cases[i].s, strlen(cases[i].s), &v);
        if (ok != cases[i].ok || (ok && v != cases[i].v))
            check_fail(__FILE__, __LINE__, "\"%s\": %s %lld", cases[i].s,
                       ok ? "accepted" : "refused", v);
    }
    /* And through INCR: refused values are not changed, nor logged. */
    kv p;
    kv_setup(&p, false);
    buf out = {0};
    exec_words(&p, &out, "SET z 007");
    CHECK(strcmp(exec_words(&p, &out, "INCR z"),
                 "-ERR value is not an integer or out of range\r\n") == 0);
    exec_words(&p, &out, "SET z 9223372036854775807");
    CHECK(strcmp(exec_words(&p, &out, "INCR z"),
                 "-ERR increment or decrement would overflow\r\n") == 0);
    exec_words(&p, &out, "SET z -1");
    CHECK(strcmp(exec_words(&p, &out, "INCR z"), ":0\r\n") == 0);
    CHECK_EQ(p.log.nrec, 4); /* three SETs and the INCR that ran */
    buf_free(&out);
    kv_free(&p);
}

/* -------------------------------------------------------------- expiry */

#include <lull.h>

#include "expiry.h"

#define MS 1000000ull /* ns */

/* A primary (or replica) on a virtual-clock loop, its clock at 10^12 ms
 * (a time of day in 2001) when the loop's clock reads 0. */
typedef struct vkv {
    lull_loop *loop;
    kv k;
    kv_expiry x;
    buf out;
} vkv;

static void vkv_open(vkv *v, lull_loop *loop, bool replica) {
    memset(v, 0, sizeof *v);
    v->loop = loop;
    kv_setup(&v->k, replica);
    kv_expiry_init(&v->x, loop, &v->k, 1000000000000ll);
}

/* Runs a command as the server does: then the timer follows. */
static const char *vexec(vkv *v, const char *line) {
    const char *r = exec_words(&v->k, &v->out, line);
    if (v->k.expiry_changed) kv_expiry_rearm(&v->x);
    return r;
}

static void vkv_close(vkv *v) {
    kv_expiry_stop(&v->x);
    buf_free(&v->out);
    kv_free(&v->k);
}

static lull_loop *virtual_loop(void) {
    lull_loop *loop;
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    CHECK_EQ(lull_loop_new(&loop, &o), 0);
    return loop;
}

/* The last record of a primary's log, NUL-terminated in a static buffer. */
static const char *last_record(const kv *k) {
    static char rec[256];
    CHECK(k->log.nrec > 0);
    uint64_t at = k->log.starts[k->log.nrec - 1];
    const repl_chunk *c = &k->log.chunks[k->log.nchunks - 1];
    size_t len = (size_t)(k->log.end - at);
    CHECK(at >= c->start && len < sizeof rec);
    memcpy(rec, c->p + (at - c->start), len);
    rec[len] = 0;
    return rec;
}

TEST(expiry_never_early_never_late) {
    /* A key set with PX 100 is there, with its time left, until the
     * clock is past 100 ms later (Redis' now > when), and gone from then
     * on: deleted by the timer at that instant with no command touching
     * it, and the DEL logged for the replicas. */
    lull_loop *loop = virtual_loop();
    vkv v;
    vkv_open(&v, loop, false);
    CHECK(strcmp(vexec(&v, "SET a 1 PX 100"), "+OK\r\n") == 0);
    CHECK(strstr(last_record(&v.k), "PXAT\r\n$13\r\n1000000000100\r\n"));
    CHECK(lull_timer_active(&v.x.timer));
    CHECK(strcmp(vexec(&v, "PTTL a"), ":100\r\n") == 0);
    CHECK(strcmp(vexec(&v, "TTL a"), ":0\r\n") == 0); /* (100 + 500) / 1000 */
    lull_loop_advance(loop, 100 * MS + 999999);
    CHECK_EQ(v.x.fired, 0);
    CHECK(strcmp(vexec(&v, "GET a"), "$1\r\n1\r\n") == 0);
    CHECK(strcmp(vexec(&v, "PTTL a"), ":0\r\n") == 0);
    CHECK(strcmp(vexec(&v, "EXISTS a"), ":1\r\n") == 0);
    lull_loop_advance(loop, 1);
    CHECK_EQ(v.x.fired, 1);
    CHECK_EQ(store_count(&v.k.db), 0);
    CHECK(strcmp(last_record(&v.k), "*2\r\n$3\r\nDEL\r\n$1\r\na\r\n") == 0);
    CHECK(!lull_timer_active(&v.x.timer));
    CHECK(strcmp(vexec(&v, "GET a"), "$-1\r\n") == 0);
    CHECK(strcmp(vexec(&v, "TTL a"), ":-2\r\n") == 0);

    /* A command that reaches an expired key before the timer runs (the
     * loop busy elsewhere) finds it gone too, and deletes it itself. */
    vexec(&v, "SET b 1 PX 5");
    lull_timer_stop(&v.x.timer); /* as if the timer were late */
    lull_loop_advance(loop, 6 * MS);
    size_t nrec = v.k.log.nrec;
    CHECK(strcmp(vexec(&v, "GET b"), "$-1\r\n") == 0);
    CHECK_EQ(v.k.log.nrec, nrec + 1); /* the DEL */
    CHECK_EQ(store_count(&v.k.db), 0);
    vkv_close(&v);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(dbsize_counts_no_key_whose_time_is_past) {
    /* A key whose time has come is gone for every command, DBSIZE too,
     * even when the timer has not run yet (the loop busy elsewhere): it
     * counted such keys, where GET found them gone. */
    lull_loop *loop = virtual_loop();
    vkv v;
    vkv_open(&v, loop, false);
    vexec(&v, "SET a 1 PX 5");
    vexec(&v, "SET b 1");
    lull_timer_stop(&v.x.timer); /* as if the timer were late */
    lull_loop_advance(loop, 6 * MS);
    CHECK(strcmp(vexec(&v, "DBSIZE"), ":1\r\n") == 0);
    CHECK_EQ(store_count(&v.k.db), 1);
    vkv_close(&v);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(expiry_commands) {
    lull_loop *loop = virtual_loop();
    vkv v;
    vkv_open(&v, loop, false);
    vexec(&v, "SET k v");
    CHECK(strcmp(vexec(&v, "TTL k"), ":-1\r\n") == 0);
    CHECK(strcmp(vexec(&v, "EXPIRE k 10"), ":1\r\n") == 0);
    CHECK(strcmp(last_record(&v.k),
                 "*3\r\n$9\r\nPEXPIREAT\r\n$1\r\nk\r\n$13\r\n1000000010000"
                 "\r\n") == 0);
    CHECK(strcmp(vexec(&v, "TTL k"), ":10\r\n") == 0);
    CHECK(strcmp(vexec(&v, "EXPIRE k 20 NX"), ":0\r\n") == 0);
    CHECK(strcmp(vexec(&v, "EXPIRE k 5 GT"), ":0\r\n") == 0);
    CHECK(strcmp(vexec(&v, "EXPIRE k 5 LT"), ":1\r\n") == 0);
    CHECK(strcmp(vexec(&v, "PEXPIRE k 3000 XX"), ":1\r\n") == 0);
    CHECK(strcmp(vexec(&v, "PTTL k"), ":3000\r\n") == 0);
    CHECK(strcmp(vexec(&v, "PERSIST k"), ":1\r\n") == 0);
    CHECK(strcmp(vexec(&v, "PERSIST k"), ":0\r\n") == 0);
    CHECK(!lull_timer_active(&v.x.timer));
    CHECK(strcmp(vexec(&v, "EXPIREAT k 1000000001"), ":1\r\n") == 0);
    CHECK(strcmp(vexec(&v, "PTTL k"), ":1000\r\n") == 0);
    /* SET without KEEPTTL drops the expiry; with it, keeps it. */
    CHECK(strcmp(vexec(&v, "SET k w KEEPTTL"), "+OK\r\n") == 0);
    CHECK(strcmp(vexec(&v, "PTTL k"), ":1000\r\n") == 0);
    CHECK(strcmp(vexec(&v, "SET k w"), "+OK\r\n") == 0);
    CHECK(strcmp(vexec(&v, "PTTL k"), ":-1\r\n") == 0);
    /* NX, XX, GET; EX and EXAT. */
    CHECK(strcmp(vexec(&v, "SET k x NX"), "$-1\r\n") == 0);
    CHECK(strcmp(vexec(&v, "SET n x XX"), "$-1\r\n") == 0);
    CHECK(strcmp(vexec(&v, "SET k x XX GET"), "$1\r\nw\r\n") == 0);
    CHECK(strcmp(vexec(&v, "SET k y EX 2"), "+OK\r\n") == 0);
    CHECK(strcmp(vexec(&v, "PTTL k"), ":2000\r\n") == 0);
    CHECK(strcmp(vexec(&v, "SET k y EXAT 1000000003"), "+OK\r\n") == 0);
    CHECK(strcmp(vexec(&v, "PTTL k"), ":3000\r\n") == 0);
    /* A time already past deletes the key, and logs a DEL. */
    CHECK(strcmp(vexec(&v, "EXPIRE k -1"), ":1\r\n") == 0);
    CHECK(strcmp(last_record(&v.k), "*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n") == 0);
    CHECK(strcmp(vexec(&v, "EXISTS k"), ":0\r\n") == 0);
    /* Redis' errors, word for word (redis-server 7.0). */
    static const char *const errors[][2] = {
        {"SET k v EX 0", "-ERR invalid expire time in 'set' command\r\n"},
        {"SET k v PX -5", "-ERR invalid expire time in 'set' command\r\n"},
        {"SET k v EX x", "-ERR value is not an integer or out of range\r\n"},
        {"SET k v NX XX", "-ERR syntax error\r\n"},
        {"SET k v EX 1 PX 1", "-ERR syntax error\r\n"},
        {"SET k v KEEPTTL EX 1", "-ERR syntax error\r\n"},
        {"SET k v EX", "-ERR syntax error\r\n"},
        {"SET k", "-ERR wrong number of arguments for 'set' command\r\n"},
        {"EXPIRE k 10 NX XX", "-ERR NX and XX, GT or LT options at the same "
                              "time are not compatible\r\n"},
        {"EXPIRE k 10 GT LT",
         "-ERR GT and LT options at the same time are not compatible\r\n"},
        {"EXPIRE k 10 FOO", "-ERR Unsupported option FOO\r\n"},
        {"EXPIRE k 99999999999999999",
         "-ERR invalid expire time in 'expire' command\r\n"},
        {"TTL", "-ERR wrong number of arguments for 'ttl' command\r\n"},
    };
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        const char *got = vexec(&v, errors[i][0]);
        if (strcmp(got, errors[i][1]) != 0)
            check_fail(__FILE__, __LINE__, "%s: %s", errors[i][0], got);
    }
    vkv_close(&v);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(expiry_far_keys_arm_one_timer) {
    /* 10,000 keys that expire in a day and more: one timer, armed for the
     * earliest, and nothing runs for a day; then every key goes at its
     * own millisecond, in a few timer runs. Removing the earliest key's
     * expiry moves the timer to the next. */
    lull_loop *loop = virtual_loop();
    vkv v;
    vkv_open(&v, loop, false);
    enum { N = 10000 };
    char line[64];
    for (int i = 0; i < N; i++) {
        snprintf(line, sizeof line, "SET key:%d v PX %d", i,
                 86400000 + (N - i));
        vexec(&v, line);
    }
    CHECK_EQ(v.k.db.nheap, N);
    /* Each key goes the ms after its time (store_expired). */
    CHECK_U64_EQ(lull_timer_deadline(&v.x.timer), (86400000ull + 2) * MS);
    vexec(&v, "PERSIST key:9999");
    CHECK_U64_EQ(lull_timer_deadline(&v.x.timer), (86400000ull + 3) * MS);
    lull_loop_advance(loop, 86400002 * MS);
    CHECK_EQ(v.x.fired, 0);
    CHECK_EQ(store_count(&v.k.db), N);
    lull_loop_advance(loop, 1 * MS);
    CHECK_EQ(v.x.fired, 1);
    CHECK_EQ(store_count(&v.k.db), N - 1); /* key:9998; 9999 persists */
    lull_loop_advance(loop, (uint64_t)N * MS);
    CHECK_EQ(store_count(&v.k.db), 1);
    CHECK_EQ(v.k.db.nheap, 0);
    if (v.x.fired > N - 1) /* each run expires a key at least */
        check_fail(__FILE__, __LINE__, "fired %llu",
                   (unsigned long long)v.x.fired);
    CHECK(!lull_timer_active(&v.x.timer));
    vkv_close(&v);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(expiry_replicates_as_redis) {
    /* A replica applies the primary's absolute times; it hides a key
     * whose time has come but never deletes it on its own (no timer of
     * its own): the primary's DEL does. */
    lull_loop *loop = virtual_loop();
    vkv p, r;
    vkv_open(&p, loop, false);
    vkv_open(&r, loop, true);
    vexec(&p, "SET a 1 EX 10");
    vexec(&p, "SET b 2");
    vexec(&p, "PEXPIRE b 20000");
    vexec(&p, "SET c 3 PX 30000");
    vexec(&p, "PERSIST c");
    resp_limits lim = {.max_bulk = 1000, .max_args = MAX_ARGS};
    resp_arg argv[MAX_ARGS];
    const char *err = NULL;
    size_t need;
    CHECK_EQ(kv_apply_stream(&r.k, &lim, argv, p.k.log.chunks[0].p,
                             (size_t)p.k.log.end, &err, &need),
             (long)p.k.log.end);
    if (r.k.expiry_changed) kv_expiry_rearm(&r.x);
    CHECK(!lull_timer_active(&r.x.timer));
    CHECK(strcmp(vexec(&r, "PTTL a"), ":10000\r\n") == 0);
    CHECK(strcmp(vexec(&r, "PTTL b"), ":20000\r\n") == 0);
    CHECK(strcmp(vexec(&r, "PTTL c"), ":-1\r\n") == 0);
    /* The primary's timer is stopped (busy elsewhere): its DEL has not
     * come; the replica hides the key from its clients and keeps it. */
    lull_timer_stop(&p.x.timer);
    lull_loop_advance(loop, 10001 * MS); /* past a's time */
    CHECK(strcmp(vexec(&r, "GET a"), "$-1\r\n") == 0);
    CHECK(strcmp(vexec(&r, "EXISTS a"), ":0\r\n") == 0);
    CHECK(strcmp(vexec(&r, "TTL a"), ":-2\r\n") == 0);
    CHECK_EQ(store_count(&r.k.db), 3);
    /* The primary expires it and logs the DEL; the replica applies it. */
    uint64_t from = p.k.log.end;
    kv_expiry_rearm(&p.x);
    lull_loop_settle(loop);
    CHECK_EQ(store_count(&p.k.db), 2);
    CHECK(p.k.log.end > from);
    CHECK_EQ(
        kv_apply_stream(&r.k, &lim, argv,
                        p.k.log.chunks[0].p + (from - p.k.log.chunks[0].start),
                        (size_t)(p.k.log.end - from), &err, &need),
        (long)(p.k.log.end - from));
    CHECK_EQ(store_count(&r.k.db), 2);
    CHECK_U64_EQ(r.k.offset, p.k.log.end);
    vkv_close(&r);
    vkv_close(&p);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* ------------------------------------------------ types, MULTI, pub/sub */

#include "cmd_int.h"
#include "types.h"

/* Runs a request given as words on k for client cl (may be NULL):
 * kv_exec's return, the reply in out (NUL-terminated, not counted). */
static int exec_rc(kv *k, kv_client *cl, buf *out, const char *line) {
    static char copy[4096];
    resp_arg argv[MAX_ARGS];
    size_t argc = 0;
    snprintf(copy, sizeof copy, "%s", line);
    for (char *w = strtok(copy, " "); w; w = strtok(NULL, " "))
        argv[argc++] = (resp_arg){w, strlen(w)};
    out->len = 0;
    int rc = kv_exec(k, cl, argv, argc, out);
    buf_put(out, "", 1);
    out->len--;
    return rc;
}

/* A reply is the one expected; both are shown when not. */
#define CHECK_REPLY(got, want)                                                 \
    do {                                                                       \
        const char *got_ = (got), *want_ = (want);                             \
        if (strcmp(got_, want_) != 0)                                          \
            fprintf(stderr, "reply:    %s\nexpected: %s\n", got_, want_);      \
        CHECK(strcmp(got_, want_) == 0);                                       \
    } while (0)

/* The same, returning the reply. */
static const char *exec_cl(kv *k, kv_client *cl, buf *out, const char *line) {
    exec_rc(k, cl, out, line);
    return out->p;
}

/* A store k (a replica or not) and one client cl on it answering into out. */
static void open_kv_with_client(kv *k, bool replica, kv_client *cl, buf *out) {
    kv_setup(k, replica);
    *out = (buf){0};
    kv_client_init(cl, NULL, out);
}

/* Ends open_kv_with_client: the client reset, then out and k freed. */
static void close_kv_with_client(kv *k, kv_client *cl, buf *out) {
    kv_client_reset(k, cl);
    buf_free(out);
    kv_free(k);
}

/* Two keyspaces are equal when their dumps are (dump.c). */
#define dump_keyspace kv_dump

static const char *const type_script[] = {
    "LPUSH l a b c",
    "RPUSH l d e",
    "LPOP l",
    "RPOP l 2",
    "LPUSHX nol x",
    "RPUSHX l f",
    "SADD s a b c d e f g",
    "SREM s a zz",
    "SPOP s",
    "SPOP s 2",
    "HSET h f1 v1 f2 v2",
    "HSET h f1 w1",
    "HDEL h f2 nof",
    "HMSET h f3 v3",
    "ZADD z 1 a 2 b 3 c",
    "ZADD z INCR 5 a",
    "ZADD z XX 0 b",
    "ZADD z NX 9 b 4 d",
    "ZADD z GT CH 1 c 10 d",
    "ZINCRBY z -1.5 c",
    "ZPOPMIN z",
    "ZREM z nope d",
    "MSET m1 1 m2 2",
    "SETNX m1 x",
    "SETNX m3 3",
    "APPEND m1 23",
    "APPEND m4 new",
    "GETSET m2 two",
    "INCRBY m3 10",
    "DECRBY m3 4",
    "DECR m3",
    "SET t v EX 100",
    "EXPIRE m1 50",
    "LPOP nol 10",
    "SADD e x",
    "SPOP e",
    "HSET hh a 1",
    "HDEL hh a",
    "ZADD zz 1 a",
    "ZPOPMIN zz 5",
    "DEL m4",
    "ZADD zr 1 a 2 b 3 c 4 d",
    "ZREMRANGEBYRANK zr 0 0",
    "ZREMRANGEBYSCORE zr (3 +inf",
    "ZREMRANGEBYSCORE zr 9 10",
    "ZREMRANGEBYRANK zr 5 9",
    "SET big x",
    "LPUSH big y",
    "GET nokey",
};

TEST(types_replicate) {
    /* A primary runs writes of every type (with some that change nothing
     * and some that fail); a replica applying the log, cut at every byte,
     * ends with the same keyspace, and the same offset. */
    kv p;
    kv_setup(&p, false);
    buf out = {0};
    for (size_t i = 0; i < sizeof type_script / sizeof type_script[0]; i++)
        exec_cl(&p, NULL, &out, type_script[i]);
    CHECK(strcmp(exec_cl(&p, NULL, &out, "LPUSH big y"),
                 "-WRONGTYPE Operation against a key holding the wrong kind "
                 "of value\r\n") == 0);
    buf dp = {0}, dr = {0};
    dump_keyspace(&p, &dp);
    CHECK(strstr(dp.p, "\n1:l type=1 expire=0: 1:b,1:a,1:f,\n")); /* in order */
    CHECK(strstr(dp.p, "\n1:z type=4 expire=0: 1:c=1.5,1:a=6,\n"));
    CHECK(strstr(dp.p, "\n2:zr type=4 expire=0: 1:b=2,1:c=3,\n"));
    CHECK(strstr(dp.p, "\n1:h type=3 expire=0: 2:f1=2:w1,2:f3=2:v3,\n"));
    CHECK(!strstr(dp.p, "1:e type")); /* emptied keys are gone */
    CHECK(!strstr(dp.p, "2:hh type") && !strstr(dp.p, "2:zz type"));
    CHECK_EQ(p.log.nchunks, 1);
    const char *bytes = p.log.chunks[0].p;
    size_t n = (size_t)p.log.end;
    resp_limits lim = {.max_bulk = 1000, .max_args = MAX_ARGS};
    resp_arg argv[MAX_ARGS];
    for (size_t cut = 0; cut <= n; cut++) {
        kv r;
        kv_setup(&r, true);
        const char *err = NULL;
        size_t need;
        long a = kv_apply_stream(&r, &lim, argv, bytes, cut, &err, &need);
        CHECK(a >= 0);
        long b = kv_apply_stream(&r, &lim, argv, bytes + a, n - (size_t)a, &err,
                                 &need);
        if (b < 0) check_fail(__FILE__, __LINE__, "cut %zu: %s", cut, err);
        CHECK_U64_EQ(r.offset, p.log.end);
        dump_keyspace(&r, &dr);
        if (strcmp(dp.p, dr.p) != 0)
            check_fail(__FILE__, __LINE__, "cut %zu:\n%s\nvs\n%s", cut, dp.p,
                       dr.p);
        kv_free(&r);
    }
    buf_free(&dp);
    buf_free(&dr);
    buf_free(&out);
    kv_free(&p);
}

TEST(types_replies_as_redis) {
    /* Replies and errors word for word as redis-server 7.0 gives them. */
    static const char *const cases[][2] = {
        {"RPUSH l a b c", ":3\r\n"},
        {"LRANGE l 0 -1", "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"},
        {"LRANGE l -2 99", "*2\r\n$1\r\nb\r\n$1\r\nc\r\n"},
        {"LRANGE l 5 9", "*0\r\n"},
        {"LINDEX l -1", "$1\r\nc\r\n"},
        {"LINDEX l 9", "$-1\r\n"},
        {"LINDEX l x", "-ERR value is not an integer or out of range\r\n"},
        {"LPOP l 0", "*0\r\n"},
        {"LPOP l -1", "-ERR value is out of range, must be positive\r\n"},
        {"LPOP nokey", "$-1\r\n"},
        {"LPOP nokey 2", "*-1\r\n"},
        {"LPOP l 1 2", "-ERR wrong number of arguments for 'lpop' command\r\n"},
        {"LLEN l", ":3\r\n"},
        {"LLEN nokey", ":0\r\n"},
        {"SPOP nokey", "$-1\r\n"},
        {"SPOP nokey 2", "*0\r\n"},
        {"SADD s a", ":1\r\n"},
        {"SPOP s -1", "-ERR value is out of range, must be positive\r\n"},
        {"SPOP s 0", "*0\r\n"},
        {"SISMEMBER s a", ":1\r\n"},
        {"SCARD s", ":1\r\n"},
        {"HSET h a", "-ERR wrong number of arguments for 'hset' command\r\n"},
        {"HSET h a 1 b",
         "-ERR wrong number of arguments for 'hset' command\r\n"},
        {"HSET h a 1 b 2", ":2\r\n"},
        {"HGET h a", "$1\r\n1\r\n"},
        {"HMSET h c 3", "+OK\r\n"},
        {"HLEN h", ":3\r\n"},
        {"ZADD z 1.5 a", ":1\r\n"},
        {"ZADD z 0.1 b", ":1\r\n"},
        {"ZSCORE z b", "$19\r\n0.10000000000000001\r\n"},
        {"ZADD z 3 c 1e300 d inf e", ":3\r\n"},
        {"ZRANGE z 0 -1 WITHSCORES",
         "*10\r\n$1\r\nb\r\n$19\r\n0.10000000000000001\r\n$1\r\na\r\n$3\r\n"
         "1.5\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nd\r\n$23\r\n1.0000000000000001e+"
         "300\r\n$1\r\ne\r\n$3\r\ninf\r\n"},
        {"ZADD z nan f", "-ERR value is not a valid float\r\n"},
        {"ZADD z x f", "-ERR value is not a valid float\r\n"},
        {"ZADD z 1", "-ERR wrong number of arguments for 'zadd' command\r\n"},
        {"ZADD z 1 a 2", "-ERR syntax error\r\n"},
        {"ZADD z INCR 1 a 2 b",
         "-ERR INCR option supports a single increment-element pair\r\n"},
        {"ZADD z NX XX 1 a",
         "-ERR XX and NX options at the same time are not compatible\r\n"},
        {"ZADD z GT LT 1 a", "-ERR GT, LT, and/or NX options at the same time "
                             "are not compatible\r\n"},
        {"ZINCRBY z 1 a", "$3\r\n2.5\r\n"},
        {"ZPOPMIN z", "*2\r\n$1\r\nb\r\n$19\r\n0.10000000000000001\r\n"},
        {"ZPOPMIN z -1", "-ERR value is out of range, must be positive\r\n"},
        {"ZRANGE z 0 1 REV", "*2\r\n$1\r\ne\r\n$1\r\nd\r\n"},
        {"ZCARD nokey", ":0\r\n"},
        {"ZCARD z", ":4\r\n"},
        {"MSET a", "-ERR wrong number of arguments for 'mset' command\r\n"},
        {"MSET a 1 b", "-ERR wrong number of arguments for 'mset' command\r\n"},
        {"MGET a b zz", "*3\r\n$-1\r\n$-1\r\n$-1\r\n"},
        {"SETNX a 1", ":1\r\n"},
        {"APPEND a xyz", ":4\r\n"},
        {"STRLEN a", ":4\r\n"},
        {"GETSET a new", "$4\r\n1xyz\r\n"},
        {"GETSET h x", "-WRONGTYPE Operation against a key holding the wrong "
                       "kind of value\r\n"},
        {"STRLEN h", "-WRONGTYPE Operation against a key holding the wrong "
                     "kind of value\r\n"},
        {"GET l", "-WRONGTYPE Operation against a key holding the wrong kind "
                  "of value\r\n"},
        {"INCR l", "-WRONGTYPE Operation against a key holding the wrong kind "
                   "of value\r\n"},
        {"LPUSH a x", "-WRONGTYPE Operation against a key holding the wrong "
                      "kind of value\r\n"},
        {"SADD h x", "-WRONGTYPE Operation against a key holding the wrong "
                     "kind of value\r\n"},
        {"HGET s x", "-WRONGTYPE Operation against a key holding the wrong "
                     "kind of value\r\n"},
        {"ZADD l 1 x", "-WRONGTYPE Operation against a key holding the wrong "
                       "kind of value\r\n"},
        {"TYPE h", "+hash\r\n"},
        {"TYPE z", "+zset\r\n"},
        {"TYPE nokey", "+none\r\n"},
        {"SCAN 0 COUNT x", "-ERR value is not an integer or out of range\r\n"},
        {"SCAN x", "-ERR invalid cursor\r\n"},
        {"SCAN 0 COUNT 0", "-ERR syntax error\r\n"},
        {"SCAN 0 MATCH", "-ERR syntax error\r\n"},
        {"KEYS", "-ERR wrong number of arguments for 'keys' command\r\n"},
        {"NOSUCH a b", "-ERR unknown command 'NOSUCH', with args beginning "
                       "with: 'a' 'b' \r\n"},
        {"EXEC", "-ERR EXEC without MULTI\r\n"},
        {"DISCARD", "-ERR DISCARD without MULTI\r\n"},
    };
    kv p;
    buf out;
    kv_client cl;
    open_kv_with_client(&p, false, &cl, &out);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = exec_cl(&p, &cl, &out, cases[i][0]);
        if (strcmp(got, cases[i][1]) != 0)
            check_fail(__FILE__, __LINE__, "%s: %s", cases[i][0], got);
    }
    close_kv_with_client(&p, &cl, &out);
}

TEST(multi_exec_is_one_unit) {
    kv p;
    buf out;
    kv_client cl;
    open_kv_with_client(&p, false, &cl, &out);
    CHECK(strcmp(exec_cl(&p, &cl, &out, "MULTI"), "+OK\r\n") == 0);
    CHECK(strcmp(exec_cl(&p, &cl, &out, "MULTI"),
                 "-ERR MULTI calls can not be nested\r\n") == 0);
    CHECK(strcmp(exec_cl(&p, &cl, &out, "SET a 1"), "+QUEUED\r\n") == 0);
    CHECK(strcmp(exec_cl(&p, &cl, &out, "INCR a"), "+QUEUED\r\n") == 0);
    CHECK(strcmp(exec_cl(&p, &cl, &out, "GET a"), "+QUEUED\r\n") == 0);
    CHECK(strcmp(exec_cl(&p, &cl, &out, "LPUSH a x"), "+QUEUED\r\n") == 0);
    CHECK_EQ(store_count(&p.db), 0); /* nothing ran yet */
    CHECK_EQ(p.log.nrec, 0);
    CHECK(strcmp(exec_cl(&p, &cl, &out, "EXEC"),
                 "*4\r\n+OK\r\n:2\r\n$1\r\n2\r\n-WRONGTYPE Operation against a "
                 "key holding the wrong kind of value\r\n") == 0);
    CHECK_EQ(p.log.nrec, 4); /* MULTI, SET, INCR, EXEC */
    /* A refused command spoils the transaction; DISCARD drops it. */
    exec_cl(&p, &cl, &out, "MULTI");
    CHECK(strcmp(exec_cl(&p, &cl, &out, "GET"),
                 "-ERR wrong number of arguments for 'get' command\r\n") == 0);
    exec_cl(&p, &cl, &out, "SET b 1");
    CHECK(strcmp(exec_cl(&p, &cl, &out, "EXEC"),
                 "-EXECABORT Transaction discarded because of previous "
                 "errors.\r\n") == 0);
    exec_cl(&p, &cl, &out, "MULTI");
    exec_cl(&p, &cl, &out, "SET b 1");
    CHECK(strcmp(exec_cl(&p, &cl, &out, "DISCARD"), "+OK\r\n") == 0);
    CHECK(strcmp(exec_cl(&p, &cl, &out, "EXISTS b"), ":0\r\n") == 0);
    /* A transaction that writes nothing logs nothing. */
    exec_cl(&p, &cl, &out, "MULTI");
    exec_cl(&p, &cl, &out, "GET a");
    exec_cl(&p, &cl, &out, "EXEC");
    CHECK_EQ(p.log.nrec, 4);
    /* A replica given the log cut inside the transaction applies none of
     * it, and its offset stays before MULTI; with the rest, all of it. */
    resp_limits lim = {.max_bulk = 1000, .max_args = MAX_ARGS};
    resp_arg argv[MAX_ARGS];
    const char *bytes = p.log.chunks[0].p;
    size_t n = (size_t)p.log.end;
    for (size_t cut = 1; cut < n; cut++) {
        kv r;
        kv_setup(&r, true);
        const char *err;
        size_t need;
        CHECK_EQ(kv_apply_stream(&r, &lim, argv, bytes, cut, &err, &need), 0);
        CHECK(need > cut);
        CHECK_EQ(store_count(&r.db), 0);
        CHECK_EQ(kv_apply_stream(&r, &lim, argv, bytes, n, &err, &need),
                 (long)n);
        CHECK(strcmp(exec_words(&r, &out, "GET a"), "$1\r\n2\r\n") == 0);
        kv_free(&r);
    }
    close_kv_with_client(&p, &cl, &out);
}

static int woken;
static void count_wake(kv_client *cl) {
    (void)cl;
    woken++;
}

TEST(pubsub_fan_out) {
    kv k;
    kv_setup(&k, false);
    k.wake = count_wake;
    buf o1 = {0}, o2 = {0}, o3 = {0}, tmp = {0};
    kv_client a, b, c;
    kv_client_init(&a, NULL, &o1);
    kv_client_init(&b, NULL, &o2);
    kv_client_init(&c, NULL, &o3);
    CHECK(strcmp(exec_cl(&k, &a, &o1, "SUBSCRIBE news"),
                 "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &b, &o2, "PSUBSCRIBE n*"),
                 "*3\r\n$10\r\npsubscribe\r\n$2\r\nn*\r\n:1\r\n") == 0);
    exec_cl(&k, &b, &o2, "SUBSCRIBE news");
    CHECK(strcmp(exec_cl(&k, &a, &o1, "GET x"),
                 "-ERR Can't execute 'get': only (P|S)SUBSCRIBE / "
                 "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this "
                 "context\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &a, &o1, "PING"),
                 "*2\r\n$4\r\npong\r\n$0\r\n\r\n") == 0);
    o1.len = o2.len = 0;
    woken = 0;
    CHECK(strcmp(exec_cl(&k, &c, &tmp, "PUBLISH news hi"), ":3\r\n") == 0);
    CHECK_EQ(woken, 3);
    buf_put(&o1, "", 1);
    buf_put(&o2, "", 1);
    CHECK(strcmp(o1.p, "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n") ==
          0);
    CHECK(strstr(o2.p, "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n"));
    CHECK(strstr(o2.p, "*4\r\n$8\r\npmessage\r\n$2\r\nn*\r\n$4\r\nnews\r\n"
                       "$2\r\nhi\r\n"));
    CHECK(strcmp(exec_cl(&k, &c, &tmp, "PUBLISH other x"), ":0\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &a, &o1, "UNSUBSCRIBE"),
                 "*3\r\n$11\r\nunsubscribe\r\n$4\r\nnews\r\n:0\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &a, &o1, "UNSUBSCRIBE"),
                 "*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &a, &o1, "GET x"), "$-1\r\n") == 0);
    kv_client_reset(&k, &b); /* b goes: its subscriptions with it */
    CHECK_EQ(k.channels.count, 0);
    CHECK_EQ(k.patterns.count, 0);
    CHECK(strcmp(exec_cl(&k, &c, &tmp, "PUBLISH news hi"), ":0\r\n") == 0);
    /* Each PUBLISH logged, heard or not, for the replicas' subscribers. */
    CHECK_EQ(k.log.nrec, 3);
    kv_client_reset(&k, &a);
    kv_client_reset(&k, &c);
    buf_free(&o1);
    buf_free(&o2);
    buf_free(&o3);
    buf_free(&tmp);
    kv_free(&k);
}

TEST(pubsub_counts_as_redis) {
    /* Replies as redis-server 7.0 gave them: NUMSUB counts a channel's
     * subscribers (not its patterns'), in the order asked, names as sent;
     * NUMPAT counts each pattern once however many hold it; CHANNELS
     * lists channels with a subscriber, matching the glob. */
    kv k;
    kv_setup(&k, false);
    buf o1 = {0}, o2 = {0}, out = {0};
    kv_client a, b, c;
    kv_client_init(&a, NULL, &o1);
    kv_client_init(&b, NULL, &o2);
    kv_client_init(&c, NULL, &out);
    exec_cl(&k, &a, &o1, "SUBSCRIBE news sport");
    exec_cl(&k, &b, &o2, "SUBSCRIBE news");
    exec_cl(&k, &a, &o1, "PSUBSCRIBE n* s?ort");
    exec_cl(&k, &b, &o2, "PSUBSCRIBE n*");
    CHECK_REPLY(exec_cl(&k, &c, &out, "PUBSUB NUMSUB news sport none news"),
                "*8\r\n$4\r\nnews\r\n:2\r\n$5\r\nsport\r\n:1\r\n"
                "$4\r\nnone\r\n:0\r\n$4\r\nnews\r\n:2\r\n");
    CHECK_REPLY(exec_cl(&k, &c, &out, "PUBSUB NUMSUB"), "*0\r\n");
    CHECK_REPLY(exec_cl(&k, &c, &out, "pubsub numpat"), ":2\r\n");
    CHECK_REPLY(exec_cl(&k, &c, &out, "PUBSUB CHANNELS s*"),
                "*1\r\n$5\r\nsport\r\n");
    CHECK_REPLY(exec_cl(&k, &c, &out, "PUBSUB CHANNELS x*"), "*0\r\n");
    exec_cl(&k, &c, &out, "PUBSUB CHANNELS");
    CHECK(strncmp(out.p, "*2\r\n", 4) == 0 && strstr(out.p, "$4\r\nnews\r\n") &&
          strstr(out.p, "$5\r\nsport\r\n"));
    /* One of two leaves: the count follows; the last: the channel goes. */
    exec_cl(&k, &b, &o2, "UNSUBSCRIBE news");
    exec_cl(&k, &a, &o1, "PUNSUBSCRIBE n*");
    CHECK_REPLY(exec_cl(&k, &c, &out, "PUBSUB NUMSUB news"),
                "*2\r\n$4\r\nnews\r\n:1\r\n");
    CHECK_REPLY(exec_cl(&k, &c, &out, "PUBSUB NUMPAT"), ":2\r\n");
    kv_client_reset(&k, &a);
    CHECK_REPLY(exec_cl(&k, &c, &out, "PUBSUB NUMSUB news sport"),
                "*4\r\n$4\r\nnews\r\n:0\r\n$5\r\nsport\r\n:0\r\n");
    CHECK_REPLY(exec_cl(&k, &c, &out, "PUBSUB CHANNELS"), "*0\r\n");
    CHECK_REPLY(exec_cl(&k, &c, &out, "PUBSUB NUMPAT"), ":1\r\n");
    kv_client_reset(&k, &b);
    kv_client_reset(&k, &c);
    buf_free(&o1);
    buf_free(&o2);
    buf_free(&out);
    kv_free(&k);
}

TEST(pubsub_refusals_as_redis) {
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    CHECK_REPLY(exec_cl(&k, &cl, &out, "PUBSUB"),
                "-ERR wrong number of arguments for 'pubsub' command\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "PUBSUB NUMPAT x"),
                "-ERR wrong number of arguments for 'pubsub|numpat' "
                "command\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "PUBSUB Channels a b"),
                "-ERR unknown subcommand or wrong number of arguments for "
                "'Channels'. Try PUBSUB HELP.\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "pubsub shardchannels"),
                "-ERR unknown subcommand 'shardchannels'. Try PUBSUB "
                "HELP.\r\n");
    exec_cl(&k, &cl, &out, "PUBSUB HELP");
    CHECK(strncmp(out.p, "*10\r\n+PUBSUB <subcommand>", 25) == 0);
    /* Queued in a transaction, and an unknown one spoils it. */
    exec_cl(&k, &cl, &out, "MULTI");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "PUBSUB NUMPAT"), "+QUEUED\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "EXEC"), "*1\r\n:0\r\n");
    exec_cl(&k, &cl, &out, "MULTI");
    exec_cl(&k, &cl, &out, "PUBSUB NOPE");
    CHECK(strncmp(exec_cl(&k, &cl, &out, "EXEC"), "-EXECABORT", 10) == 0);
    /* Not while subscribed (RESP2), as any command but pub/sub's own. */
    exec_cl(&k, &cl, &out, "SUBSCRIBE c");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "PUBSUB NUMSUB c"),
                "-ERR Can't execute 'pubsub|numsub': only (P|S)SUBSCRIBE / "
                "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this "
                "context\r\n");
    close_kv_with_client(&k, &cl, &out);
}

static void count_visit(const dict *d, dict_entry *e, void *arg) {
    (void)d;
    (void)e;
    (*(size_t *)arg)++;
}

/* How many times the walk met the entry "k0". */
static void k0_visit(const dict *d, dict_entry *e, void *arg) {
    if (e->klen == 2 && memcmp(dict_key(d, e), "k0", 2) == 0)
        (*(size_t *)arg)++;
}

TEST(dict_table_shrinks_as_its_entries_go) {
    /* A table kept the size of its largest day: a set that had held 10^6
     * members and held one had 2^20 buckets, every SSCAN, SMEMBERS-like
     * walk (HGETALL, KEYS, SCAN after FLUSHALL) crossed all of them (0.3
     * s a call measured for 4 x 10^6), and their memory never came back.
     * Redis shrinks a table under 10% full. */
    dict d;
    dict_init(&d, 0);
    enum { N = 100000 };
    char key[16];
    for (int i = 0; i < N; i++)
        CHECK(dict_add(&d, key, (size_t)sprintf(key, "k%d", i)));
    CHECK(d.nbuckets >= N);
    /* a walk begun on the full table, the table shrinking under it: every
     * entry there throughout comes back */
    size_t k0 = 0;
    uint64_t cur = dict_scan(&d, 0, 10, k0_visit, &k0);
    for (int i = 1; i < N; i++)
        dict_delete(&d, dict_find(&d, key, (size_t)sprintf(key, "k%d", i)));
    CHECK_EQ(d.count, 1);
    CHECK(d.nbuckets <= 16);
    while (cur)
        cur = dict_scan(&d, cur, 10, k0_visit, &k0);
    CHECK(k0 >= 1);
    size_t seen = 0, scans = 0;
    cur = 0;
    do
        cur = dict_scan(&d, cur, 1, count_visit, &seen), scans++;
    while (cur);
    CHECK_EQ(seen, 1);
    CHECK(scans <= 16);
    /* clearing gives the table back; the next add makes a small one */
    dict_clear(&d, NULL, NULL);
    CHECK_EQ(d.nbuckets, 0);
    CHECK(dict_add(&d, "x", 1));
    CHECK(dict_find(&d, "x", 1));
    CHECK(d.nbuckets <= 16);
    dict_free(&d);
}

TEST(list_and_set_arrays_shrink_as_they_empty) {
    /* A list used as a queue that once held 10^6 elements kept its ring
     * of 2^20 slots (16 MiB) while it held one, and a set its array of
     * members likewise: 64 MiB of a 4 x 10^6 list LTRIMmed to one
     * element stayed allocated (redis-server's quicklist and dict give it
     * back). Each by pops, LTRIM, LREM and SREM (SPOP). */
    enum { N = 100000 };
    char v[16];
    for (int how = 0; how < 4; how++) {
        kv_list *l = list_new();
        CHECK(l);
        /* every element "x" but the middle one, "0" */
        for (int i = 0; i < N; i++)
            CHECK_EQ(list_push(l, i % 2, i == N / 2 ? "0" : "x", 1), 0);
        CHECK(l->cap >= N);
        kv_elem e;
        switch (how) {
        case 0: /* LPOP and RPOP, by turns */
            for (int i = 0; l->n > 1; i++) {
                list_pop(l, i % 2, &e);
                elem_free(&e);
            }
            break;
        case 1: /* LTRIM l 1 1 */
            list_trim(l, 1, l->n - 2);
            break;
        case 2: /* LREM l -(N/2) x, then LREM l 0 x */
            CHECK_EQ(list_remove(l, "x", 1, N / 2, true), N / 2);
            CHECK_EQ(list_remove(l, "x", 1, 0, false), N - 1 - N / 2);
            CHECK_EQ(l->n, 1);
            CHECK(elem_bytes(list_at(l, 0))[0] == '0');
            break;
        default: /* pushed and popped around a small size: no shrink */
            while (l->n > 40) {
                list_pop(l, false, &e);
                elem_free(&e);
            }
            CHECK(l->cap <= 256);
            for (int i = 0; i < 1000; i++) {
                size_t cap = l->cap;
                CHECK_EQ(list_push(l, false, "x", 1), 0);
                list_pop(l, true, &e);
                elem_free(&e);
                CHECK_EQ(l->cap, cap);
            }
            break;
        }
        CHECK(l->cap <= (how == 3 ? 256 : 16));
        list_free(l);
    }
    kv_set *s = set_new();
    CHECK(s);
    for (int i = 0; i < N; i++)
        CHECK_EQ(set_add(s, v, (size_t)sprintf(v, "%d", i)), 1);
    while (s->d.count > 1)
        set_delete(s, set_random(s));
    CHECK(s->cap <= 16);
    dict_entry *m = s->arr[0];
    CHECK(dict_find(&s->d, dict_key(&s->d, m), m->klen) == m);
    set_free(s);
}

/* HSET of a field that is there (redis-benchmark's HSET: one field, set
 * again and again) writes the new value over the old one when it has the
 * same length, or when both are short enough to be held inline: no
 * allocation, a long value's memory stays where it was. A value of
 * another length takes the field's value whole, and the field is still
 * one entry. */
TEST(hash_set_of_a_field_there_reuses_its_value) {
    kv_hash *h = hash_new();
    CHECK(h);
    CHECK_EQ(hash_set(h, "f", 1, "abcdefghijkl", 12), 1);
    dict_entry *e = dict_find(&h->d, "f", 1);
    CHECK(e);
    const char *was = elem_bytes(hash_value(e));
    CHECK_EQ(hash_set(h, "f", 1, "0123456789xy", 12), 0);
    CHECK(dict_find(&h->d, "f", 1) == e);
    CHECK(elem_bytes(hash_value(e)) == was);
    CHECK_EQ(hash_value(e)->len, 12);
    CHECK(memcmp(elem_bytes(hash_value(e)), "0123456789xy", 12) == 0);
    static const char *const next[] = {
        "xyz", "", "12345678", "longer value", "a", "exactly9!", "ab"};
    for (size_t i = 0; i < sizeof next / sizeof *next; i++) {
        size_t n = strlen(next[i]);
        CHECK_EQ(hash_set(h, "f", 1, next[i], n), 0);
        CHECK_EQ(hash_value(e)->len, n);
        CHECK(memcmp(elem_bytes(hash_value(e)), next[i], n) == 0);
    }
    CHECK_EQ(h->d.count, 1);
    hash_free(h);
}

TEST(zset_ranks_follow_a_model) {
    /* Random ZADD, moves and deletes on a skip list, checked after each
     * step against a sorted array: order, ranks (zset_at, zset_rank,
     * zset_count_below) and back links. */
    kv_zset *z = zset_new();
    enum { M = 200 };
    double score[M];
    bool in[M] = {0};
    uint64_t x = 12345;
    char name[16];
    for (int step = 0; step < 5000; step++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int m = (int)((x >> 33) % M);
        snprintf(name, sizeof name, "m%03d", m);
        if ((x >> 20) % 4 == 0 && in[m]) {
            zset_delete(z, dict_find(&z->d, name, strlen(name)));
            in[m] = false;
        } else {
            score[m] = (double)((x >> 40) % 50);
            CHECK(zset_set(z, name, strlen(name), score[m]) >= 0);
            in[m] = true;
        }
        /* the model: members in (score, name) order */
        int order[M], n = 0;
        for (int i = 0; i < M; i++)
            if (in[i]) order[n++] = i;
        for (int i = 1; i < n; i++)
            for (int j = i; j > 0; j--) {
                int p = order[j - 1], q = order[j];
                if (score[p] < score[q] || (score[p] == score[q] && p < q))
                    break;
                order[j - 1] = q;
                order[j] = p;
            }
        CHECK_EQ(zset_len(z), n);
        znode *prev = NULL;
        for (int r = 0; r < n; r++) {
            znode *nd = zset_at(z, (size_t)r);
            size_t len;
            const char *nm = znode_name(z, nd, &len);
            snprintf(name, sizeof name, "m%03d", order[r]);
            CHECK(len == strlen(name) && memcmp(nm, name, len) == 0);
            CHECK(nd->score == score[order[r]]);
            CHECK(nd->back == prev);
            CHECK(zset_rank(z, nd) == (size_t)r);
            prev = nd;
        }
        CHECK(z->tail == prev);
        /* the ranks ZCOUNT and ZRANGEBYSCORE start and end at */
        for (int t = -1; t <= 50; t += 3) {
            size_t below = 0, not_above = 0;
            for (int r = 0; r < n; r++) {
                below += score[order[r]] < t;
                not_above += score[order[r]] <= t;
            }
            CHECK(zset_count_below(z, t, false) == below);
            CHECK(zset_count_below(z, t, true) == not_above);
        }
    }
    zset_free(z);
}

TEST(large_value_outlives_its_log_chunk) {
    /* A large SET's value is the store's own copy: the log frees the
     * chunk that held its record once it leaves the backlog, and the key
     * still reads, appends and replays the same. */
    kv p;
    kv_setup(&p, false);
    p.log.chunk_size = 4096;
    p.log.backlog = 8192;
    buf out = {0};
    size_t n = ((size_t)64 << 10) + 10;
    char *big = malloc(n);
    memset(big, 'a', n);
    resp_arg set[3] = {{"SET", 3}, {"k", 1}, {big, n}};
    kv_exec(&p, NULL, set, 3, &out);
    for (int i = 0; i < 2000; i++) { /* many chunks past it */
        char v[16];
        resp_arg s2[3] = {{"SET", 3}, {"s", 1}, {v, 0}};
        s2[2].len = (size_t)snprintf(v, sizeof v, "%d", i);
        out.len = 0;
        kv_exec(&p, NULL, s2, 3, &out);
    }
    CHECK(p.log.base > n); /* the big record is gone from the log */
    size_t vlen;
    const char *v = store_get(&p.db, "k", 1, &vlen);
    CHECK(v && vlen == n && v[0] == 'a' && v[n - 1] == 'a');
    resp_arg app[3] = {{"APPEND", 6}, {"k", 1}, {"zz", 2}};
    out.len = 0;
    kv_exec(&p, NULL, app, 3, &out);
    v = store_get(&p.db, "k", 1, &vlen);
    CHECK(v && vlen == n + 2 && v[n] == 'z');
    kv_free(&p);
    buf_free(&out);
    free(big);
}

/* The log's memory: every chunk's size. */
static size_t log_bytes(const repl_log *log) {
    size_t n = 0;
    for (size_t i = 0; i < log->nchunks; i++)
        n += log->chunks[i].cap;
    return n;
}

TEST(standalone_primary_log_stays_within_backlog) {
    /* A primary with no replica under a steady SET load: its log keeps
     * the backlog, the chunk it starts in and the chunk taking appends,
     * and INFO says so (it grew without bound, and lull-kv stopped when
     * it could not grow). */
    kv p;
    kv_setup(&p, false);
    buf out = {0};
    char val[100];
    memset(val, 'x', sizeof val);
    size_t most = 0;
    for (int i = 0; i < 200000; i++) {
        char key[24];
        resp_arg set[3] = {{"SET", 3}, {key, 0}, {val, sizeof val}};
        set[1].len = (size_t)snprintf(key, sizeof key, "key:%d", i % 1000);
        out.len = 0;
        kv_exec(&p, NULL, set, 3, &out);
        if (log_bytes(&p.log) > most) most = log_bytes(&p.log);
    }
    CHECK(p.log.end > 20 * REPL_BACKLOG_DEFAULT); /* 25 MB were written */
    CHECK(most <= REPL_BACKLOG_DEFAULT + 2 * REPL_CHUNK);
    CHECK(p.log.end - p.log.base <= REPL_BACKLOG_DEFAULT + 2 * REPL_CHUNK);
    CHECK(p.log.end - p.log.base >= REPL_BACKLOG_DEFAULT);
    /* The record index is trimmed too: it holds about the kept records. */
    CHECK(p.log.nrec - p.log.rec0 < 3 * (p.log.nrec - p.log.first) + 1024);
    resp_arg info[2] = {{"INFO", 4}, {"replication", 11}};
    out.len = 0;
    kv_exec(&p, NULL, info, 2, &out);
    buf_put(&out, "", 1);
    char want[96];
    snprintf(want, sizeof want, "repl_backlog_first_byte_offset:%" PRIu64,
             p.log.base + 1);
    CHECK(strstr(out.p, want));
    snprintf(want, sizeof want, "repl_backlog_histlen:%" PRIu64,
             p.log.end - p.log.base);
    CHECK(strstr(out.p, want));
    CHECK(strstr(out.p,
                 "repl_backlog_active:1\r\nrepl_backlog_size:1048576\r\n"));
    /* Idle (no replica yet): Redis' repl_backlog_active:0, nothing held. */
    p.log.idle = true;
    out.len = 0;
    kv_exec(&p, NULL, info, 2, &out);
    buf_put(&out, "", 1);
    CHECK(strstr(out.p, "repl_backlog_active:0\r\n"));
    kv_free(&p);
    buf_free(&out);
}

static uint64_t pin_at;
static uint64_t pin_of(void *arg) {
    (void)arg;
    return pin_at;
}

/* An idle log (no replica yet) counts records without keeping them: its
 * base follows its end, so nothing below the end can be sought; once kept,
 * records are there from that offset on. */
TEST(idle_log_counts_records_and_keeps_none) {
    repl_log log;
    repl_log_init(&log);
    log.idle = true;
    resp_arg a[3] = {{"SET", 3}, {"k", 1}, {"v", 1}};
    size_t len = repl_record_len(a, 3);
    for (int i = 0; i < 10; i++) {
        CHECK_EQ(repl_log_reserve(&log, len), 0);
        repl_log_append(&log, a, 3);
    }
    CHECK_U64_EQ(log.end, 10 * len);
    CHECK_U64_EQ(log.base, log.end);
    CHECK_EQ(log.nchunks, 0);
    repl_cursor cur;
    CHECK_EQ(repl_log_seek(&log, 0, &cur), -ERANGE);
    CHECK_EQ(repl_log_seek(&log, log.end, &cur), 0);
    repl_log_keep(&log);
    CHECK_EQ(repl_log_reserve(&log, len), 0);
    repl_log_append(&log, a, 3);
    CHECK_U64_EQ(log.end, 11 * len);
    CHECK_U64_EQ(log.base, 10 * len);
    size_t got;
    const char *rec = repl_log_next(&log, &cur, &got);
    CHECK(rec != NULL);
    CHECK_EQ(got, len);
    CHECK(memcmp(rec, "*3\r\n$3\r\nSET\r\n", 13) == 0);
    repl_log_free(&log);
}

/* repl_log_write, the write path's one call (kv_log): idle, it moves end
 * and base by the record's length and keeps nothing; kept, it appends the
 * same record repl_log_reserve + repl_log_append would. */
TEST(log_write_counts_when_idle_and_appends_when_kept) {
    repl_log log;
    repl_log_init(&log);
    log.idle = true;
    char v[300]; /* a length of three digits */
    memset(v, 'v', sizeof v);
    resp_arg a[3] = {{"SET", 3}, {"key", 3}, {v, sizeof v}};
    size_t len = repl_record_len(a, 3);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(repl_log_write(&log, a, 3), 0);
    CHECK_U64_EQ(log.end, 5 * len);
    CHECK_U64_EQ(log.base, log.end);
    CHECK_EQ(log.nchunks, 0);
    CHECK_EQ(log.nrec, 0);
    repl_log_keep(&log);
    CHECK_EQ(repl_log_write(&log, a, 3), 0);
    CHECK_U64_EQ(log.end, 6 * len);
    CHECK_EQ(log.nrec, 1);
    repl_cursor cur;
    CHECK_EQ(repl_log_seek(&log, 5 * len, &cur), 0);
    size_t got;
    const char *rec = repl_log_next(&log, &cur, &got);
    CHECK(rec != NULL);
    CHECK_EQ(got, len);
    CHECK(memcmp(rec, "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$300\r\nvvv", 31) == 0);
    repl_log_free(&log);
}

TEST(log_trim_keeps_pinned_chunks_and_refuses_seek_below_base) {
    repl_log log;
    repl_log_init(&log);
    log.chunk_size = 1000;
    log.backlog = 3000;
    log.pinned = pin_of;
    pin_at = 0; /* a reader at the start: nothing may go */
    char v[50];
    memset(v, 'v', sizeof v);
    resp_arg a[3] = {{"SET", 3}, {"k", 1}, {v, sizeof v}};
    size_t len = repl_record_len(a, 3);
    for (int i = 0; i < 400; i++) {
        CHECK_EQ(repl_log_reserve(&log, len), 0);
        repl_log_append(&log, a, 3);
    }
    CHECK_U64_EQ(log.base, 0);
    repl_cursor cur;
    CHECK_EQ(repl_log_seek(&log, 0, &cur), 0);
    /* The reader moves to record 200: the chunks before it may go, its
     * own stays, whatever the backlog allows. */
    for (int i = 0; i < 200; i++)
        repl_log_next(&log, &cur, &len);
    pin_at = repl_log_offset(&log, &cur);
    for (int i = 0; i < 10; i++) { /* one more chunk starts: a trim */
        CHECK_EQ(repl_log_reserve(&log, len), 0);
        repl_log_append(&log, a, 3);
    }
    CHECK(log.base > 0 && log.base <= pin_at);
    CHECK(pin_at - log.base < 1000); /* only the reader's chunk is left */
    CHECK_EQ(repl_log_seek(&log, 0, &cur), -ERANGE);
    CHECK_EQ(repl_log_seek(&log, log.base - 1, &cur), -ERANGE);
    CHECK_EQ(repl_log_seek(&log, log.base, &cur), 0);
    CHECK_EQ(repl_log_seek(&log, pin_at, &cur), 0);
    /* The reader reads on to the end, record by record, across chunks
     * that trims freed behind it (pinned wherever it is). */
    uint64_t off = pin_at;
    while (repl_log_more(&log, &cur)) {
        const char *p = repl_log_next(&log, &cur, &len);
        CHECK(p && len == repl_record_len(a, 3) && p[0] == '*');
        off += len;
        pin_at = off;
        CHECK_EQ(repl_log_reserve(&log, len), 0);
        repl_log_append(&log, a, 3);
        if (off > 40000) break;
    }
    /* No reader: only the backlog (and the chunk it starts in) is kept. */
    pin_at = UINT64_MAX;
    for (int i = 0; i < 200; i++) {
        CHECK_EQ(repl_log_reserve(&log, len), 0);
        repl_log_append(&log, a, 3);
    }
    CHECK(log.end - log.base >= 3000 && log.end - log.base < 3000 + 2000);
    CHECK_EQ(repl_log_seek(&log, log.base, &cur), 0);
    CHECK(repl_log_next(&log, &cur, &len) == log.chunks[0].p);
    repl_log_free(&log);
}

/* ---------------------------------------------------------------- globs */

/* lull-kv's glob before it became a one-pass walk: a recursion on every
 * '*'. Kept here as the reference for patterns where it is fast and where
 * it already gave redis-server's answers (glob_agrees_with_the_old_one). */
static bool old_glob(const char *pat, size_t plen, const char *s, size_t slen,
                     bool nocase) {
    while (plen) {
        switch (pat[0]) {
        case '*':
            while (plen > 1 && pat[1] == '*') {
                pat++;
                plen--;
            }
            if (plen == 1) return true;
            for (size_t i = 0; i <= slen; i++)
                if (old_glob(pat + 1, plen - 1, s + i, slen - i, nocase))
                    return true;
            return false;
        case '?':
            if (!slen) return false;
            s++;
            slen--;
            break;
        case '[': {
            if (!slen) return false;
            pat++;
            plen--;
            bool neg = plen && pat[0] == '^';
            if (neg) {
                pat++;
                plen--;
            }
            bool match = false;
            while (plen && pat[0] != ']') {
                if (pat[0] == '\\' && plen >= 2) {
                    pat++;
                    plen--;
                    if (pat[0] == s[0]) match = true;
                } else if (plen >= 3 && pat[1] == '-') {
                    unsigned char lo = (unsigned char)pat[0];
                    unsigned char hi = (unsigned char)pat[2];
                    unsigned char c = (unsigned char)s[0];
                    if (lo > hi) {
                        unsigned char t = lo;
                        lo = hi;
                        hi = t;
                    }
                    if (nocase) {
                        if (lo >= 'A' && lo <= 'Z') lo |= 0x20;
                        if (hi >= 'A' && hi <= 'Z') hi |= 0x20;
                        if (c >= 'A' && c <= 'Z') c |= 0x20;
                    }
                    pat += 2;
                    plen -= 2;
                    if (c >= lo && c <= hi) match = true;
                } else {
                    char x = pat[0], y = s[0];
                    if (nocase && x >= 'A' && x <= 'Z') x |= 0x20;
                    if (nocase && y >= 'A' && y <= 'Z') y |= 0x20;
                    if (x == y) match = true;
                }
                pat++;
                plen--;
            }
            if (!plen) return false;
            if (neg) match = !match;
            if (!match) return false;
            s++;
            slen--;
            break;
        }
        case '\\':
            if (plen >= 2) {
                pat++;
                plen--;
            }
            /* fall through */
        default: {
            if (!slen) return false;
            char x = pat[0], y = s[0];
            if (nocase && x >= 'A' && x <= 'Z') x |= 0x20;
            if (nocase && y >= 'A' && y <= 'Z') y |= 0x20;
            if (x != y) return false;
            s++;
            slen--;
            break;
        }
        }
        pat++;
        plen--;
    }
    return slen == 0;
}

typedef struct glob_case {
    const char *pat, *s;
    size_t plen, slen; /* 0: strlen (for cases with a NUL in them) */
    bool nocase, match;
} glob_case;

/* redis-server 7.0's answers (KEYS pattern against one key; CONFIG GET's
 * nocase where marked), including the corners where lull-kv's old glob
 * answered otherwise: the empty key, a class with no closing ], and
 * ranges over bytes of 0x80 and more. */
static const glob_case redis_globs[] = {
    {"**", "", 0, 0, false, false},
    {"", "", 0, 0, false, true},
    {"", "a", 0, 0, false, false},
    {"?", "", 0, 0, false, false},
    {"*?", "", 0, 0, false, false},
    {"*?", "a", 0, 0, false, true},
    {"*a", "a", 0, 0, false, true},
    {"a*", "a", 0, 0, false, true},
    {"a**", "a", 0, 0, false, true},
    {"**a**", "a", 0, 0, false, true},
    {"*****", "x", 0, 0, false, true},
    {"[abc", "a", 0, 0, false, true},
    {"[abc", "d", 0, 0, false, false},
    {"[", "[", 0, 0, false, false},
    {"[", "a", 0, 0, false, false},
    {"[^", "a", 0, 0, false, true},
    {"[^a", "b", 0, 0, false, true},
    {"[^a", "a", 0, 0, false, false},
    {"x[ab", "xa", 0, 0, false, true},
    {"x[ab", "xab", 0, 0, false, false},
    {"[ab*", "a", 0, 0, false, true},
    {"[ab*", "*", 0, 0, false, true},
    {"[ab*", "ab", 0, 0, false, false},
    {"*[", "a[", 0, 0, false, false},
    {"*[a", "xa", 0, 0, false, true},
    {"\\", "\\", 0, 0, false, true},
    {"a\\", "a\\", 0, 0, false, true},
    {"a\\", "a", 0, 0, false, false},
    {"*\\", "x\\", 0, 0, false, true},
    {"\\*", "*", 0, 0, false, true},
    {"\\*", "a", 0, 0, false, false},
    {"\\a", "a", 0, 0, false, true},
    {"[z-a]", "m", 0, 0, false, true},
    {"[z-a]", "Z", 0, 0, false, false},
    {"[a-z]", "-", 0, 0, false, false},
    {"[a-]", "-", 0, 0, false, false},
    {"[a-]", "a", 0, 0, false, true},
    {"[a-]x", "-x", 0, 0, false, false},
    {"[a-]x", "]x", 0, 0, false, false},
    {"[-a]", "-", 0, 0, false, true},
    {"[]]", "]", 0, 0, false, false},
    {"[]a]", "a", 0, 0, false, false},
    {"[]", "a", 0, 0, false, false},
    {"[]", "]", 0, 0, false, false},
    {"a[]", "a]", 0, 0, false, false},
    {"[^]", "a", 0, 0, false, true},
    {"[^]]", "a", 0, 0, false, false},
    {"[^]]", "]", 0, 0, false, false},
    {"[\\]]", "]", 0, 0, false, true},
    {"[a\\]", "]", 0, 0, false, true},
    {"[a\\]", "a", 0, 0, false, true},
    {"[a\\", "\\", 0, 0, false, true},
    {"[\\", "\\", 0, 0, false, true},
    {"[\\", "a", 0, 0, false, false},
    {"[\\-]", "-", 0, 0, false, true},
    {"[a-\\]]", "]", 0, 0, false, false},
    {"[a-\xff]", "b", 0, 0, false, false},
    {"[a-\xff]", "0", 0, 0, false, true},
    {"[a-\xff]", "\x80", 0, 0, false, false},
    {"[\x80-\xff]", "\x90", 0, 0, false, true},
    {"[!a]", "!", 0, 0, false, true},
    {"a?c", "abc", 0, 0, false, true},
    {"a?c", "ac", 0, 0, false, false},
    {"a\0b", "a\0b", 3, 3, false, true},
    {"a\0*", "a\0bc", 3, 4, false, true},
    {"*\0", "\0", 2, 1, false, true},
    {"?", "\0", 0, 1, false, true},
    {"[\0]", "\0", 3, 1, false, true},
    {"*a*b", "xaxb", 0, 0, false, true},
    {"*a*b", "xaxbx", 0, 0, false, false},
    {"h[^e]llo", "hallo", 0, 0, false, true},
    {"h[^e]llo", "hello", 0, 0, false, false},
    {"[A-Z]", "a", 0, 0, false, false},
    {"[a-Z]", "_", 0, 0, false, true},
    {"[a-c-e]", "d", 0, 0, false, false},
    {"[a-c-e]", "-", 0, 0, false, true},
    {"[a-c-e]", "e", 0, 0, false, true},
    /* nocase (CONFIG GET): A-Z fold; a range is folded after its ends
     * are put in order, so [Z-a] folds to the empty z..a; a \ in a class
     * compares as is. */
    {"SAV[A-E]", "save", 0, 0, true, true},
    {"*OUTPUT*", "client-output-buffer-limit", 0, 0, true, true},
    {"[Z-a]", "_", 0, 0, true, false},
    {"[Z-a]", "_", 0, 0, false, true},
    {"[\\A]", "a", 0, 0, true, false},
    {"[^A]", "a", 0, 0, true, false},
    {"\xc0", "\xe0", 0, 0, true, false},
};

TEST(glob_answers_as_redis) {
    for (size_t i = 0; i < sizeof redis_globs / sizeof redis_globs[0]; i++) {
        const glob_case *g = &redis_globs[i];
        size_t pl = g->plen ? g->plen : strlen(g->pat);
        size_t sl = g->slen ? g->slen : strlen(g->s);
        bool m = kv_glob(g->pat, pl, g->s, sl, g->nocase);
        if (m != g->match)
            fprintf(stderr, "case %zu: \"%s\" against \"%s\": %d\n", i, g->pat,
                    g->s, m);
        CHECK(m == g->match);
    }
}

/* A random pattern of well-formed elements (every class closed, ranges
 * over bytes below 0x80, at most a few stars): where the old glob was
 * fast and already answered as redis-server does. */
static size_t random_pattern(uint64_t *x, char *p) {
    static const char lit[] = "ab-]^\0\xff";
    static const char mem[] = "ab*?\0\xff";
    static const char rng[] = "abcA0";
    size_t n = 0, stars = 0;
    size_t elems = 1 + (size_t)(*x >> 60) % 6;
    for (size_t e = 0; e < elems; e++) {
        *x = *x * 6364136223846793005ull + 1442695040888963407ull;
        unsigned r = (unsigned)(*x >> 33);
        switch (r % 6) {
        case 0:
            p[n++] = lit[(r >> 3) % (sizeof lit - 1)];
            break;
        case 1:
            p[n++] = '?';
            break;
        case 2:
            if (stars++ < 4) p[n++] = '*';
            break;
        case 3:
            p[n++] = '\\';
            p[n++] = "*[\\a]?"[(r >> 3) % 6];
            break;
        default: {
            p[n++] = '[';
            if ((r >> 3) & 1) p[n++] = '^';
            for (unsigned m = 0; m < ((r >> 4) & 3); m++) {
                unsigned k = r >> (6 + 4 * m);
                if (k % 3 == 0) {
                    p[n++] = mem[(k >> 2) % (sizeof mem - 1)];
                } else if (k % 3 == 1) {
                    p[n++] = '\\';
                    p[n++] = "]\\a-"[(k >> 2) % 4];
                } else {
                    p[n++] = rng[(k >> 2) % (sizeof rng - 1)];
                    p[n++] = '-';
                    p[n++] = rng[(k >> 5) % (sizeof rng - 1)];
                }
            }
            p[n++] = ']';
        }
        }
    }
    if ((*x >> 20) % 16 == 0) p[n++] = '\\'; /* a trailing backslash */
    return n;
}

TEST(glob_agrees_with_the_old_one) {
    uint64_t x = 7;
    char pat[64], s[16];
    static const char bytes[] = "abcA*?[]\\-\0\xff";
    size_t matched = 0;
    for (int t = 0; t < 200000; t++) {
        size_t pl = random_pattern(&x, pat);
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t sl = 1 + (size_t)(x >> 61); /* the old glob differed on "" */
        for (size_t i = 0; i < sl; i++)
            s[i] = bytes[(x >> (4 * i + 8)) % (sizeof bytes - 1)];
        bool nocase = (x >> 7) & 1;
        bool old = old_glob(pat, pl, s, sl, nocase);
        if (kv_glob(pat, pl, s, sl, nocase) != old)
            fprintf(stderr, "\"%.*s\" against \"%.*s\": old %d\n", (int)pl, pat,
                    (int)sl, s, old);
        CHECK(kv_glob(pat, pl, s, sl, nocase) == old);
        matched += old;
    }
    CHECK(matched > 1000); /* the sample is not all misses */
}

/* The glob's work is at most one step per pattern byte per string byte
 * (plus one), against slen 'a's and against slen - 1 'a's and a 'b'; the
 * answers are those given. */
static void check_glob_bound(const char *pat, size_t plen, size_t slen,
                             bool all_a, bool ends_b) {
    char *s = malloc(slen);
    memset(s, 'a', slen);
    size_t steps;
    CHECK(kv_glob_steps(pat, plen, s, slen, false, &steps) == all_a);
    CHECK(steps <= (plen + 1) * (slen + 1));
    s[slen - 1] = 'b';
    CHECK(kv_glob_steps(pat, plen, s, slen, false, &steps) == ends_b);
    CHECK(steps <= (plen + 1) * (slen + 1));
    free(s);
}

/* "*a" n - 1 times then "*b": a recursion on every '*' takes time
 * exponential in n for it. */
static void check_stars(size_t stars, size_t slen) {
    size_t plen = 2 * stars;
    char *pat = malloc(plen);
    for (size_t i = 0; i < stars; i++) {
        pat[2 * i] = '*';
        pat[2 * i + 1] = i + 1 < stars ? 'a' : 'b';
    }
    check_glob_bound(pat, plen, slen, false, stars <= slen);
    free(pat);
}

TEST(glob_pathological_pattern_is_polynomial) {
    check_stars(12, 60);
    check_stars(200, 5000);
    check_stars(1000, 1000);
    /* The walk's own worst case: one '*', then elements that match long
     * runs before failing ("*" "a" x 300 "b", and the same with classes),
     * retried from each byte. */
    char pat[2048];
    pat[0] = '*';
    memset(pat + 1, 'a', 300);
    pat[301] = 'b';
    check_glob_bound(pat, 302, 2000, false, true);
    size_t n = 1;
    for (int i = 0; i < 200; i++) {
        memcpy(pat + n, "[xa]", 4);
        n += 4;
    }
    pat[n++] = '?';
    pat[n++] = 'b';
    check_glob_bound(pat, n, 1000, false, true);
    /* Through the commands: KEYS, SCAN MATCH, PSUBSCRIBE and PUBLISH, with
     * the old glob's hang: 12 stars against a key of 60 'a's. */
    kv k;
    kv_setup(&k, false);
    buf out = {0};
    kv_client cl, pub;
    kv_client_init(&cl, NULL, &out);
    kv_client_init(&pub, NULL, &out);
    char key[61];
    memset(key, 'a', 60);
    key[60] = 0;
    for (int i = 0; i < 12; i++) {
        pat[2 * i] = '*';
        pat[2 * i + 1] = i < 11 ? 'a' : 'b';
    }
    pat[24] = 0;
    char line[2200];
    snprintf(line, sizeof line, "SET %s 1", key);
    exec_cl(&k, &cl, &out, line);
    snprintf(line, sizeof line, "KEYS %s", pat);
    CHECK(strcmp(exec_cl(&k, &cl, &out, line), "*0\r\n") == 0);
    snprintf(line, sizeof line, "SCAN 0 MATCH %s COUNT 1000", pat);
    CHECK(strcmp(exec_cl(&k, &cl, &out, line), "*2\r\n$1\r\n0\r\n*0\r\n") == 0);
    snprintf(line, sizeof line, "PSUBSCRIBE %s", pat);
    exec_cl(&k, &cl, &out, line);
    snprintf(line, sizeof line, "PUBLISH %s m", key);
    CHECK(strcmp(exec_cl(&k, &pub, &out, line), ":0\r\n") == 0);
    kv_client_reset(&k, &cl);
    kv_client_reset(&k, &pub);
    buf_free(&out);
    kv_free(&k);
}

/* Runs a request of binary arguments on k for cl; the reply as a string. */
static const char *exec_args(kv *k, kv_client *cl, buf *out,
                             const resp_arg *argv, size_t argc) {
    out->len = 0;
    kv_exec(k, cl, argv, argc, out);
    buf_put(out, "", 1);
    out->len--;
    return out->p;
}

/* kv.reply_blob of the reference tests: the reply is "<ref>" and the blob
 * is held, as a connection holds it until it is written. */
static const char *held_blob;
static size_t held_len, held_count;
static bool hold_reply(kv_client *cl, const char *bytes, size_t len) {
    CHECK(held_blob == NULL);
    kv_blob_ref(bytes);
    held_blob = bytes;
    held_len = len;
    held_count++;
    buf_str(cl->out, "<ref>");
    return true;
}

/* The held reply is written: its blob let go. */
static void release_held(void) {
    kv_blob_unref(held_blob);
    held_blob = NULL;
}

/* GETDEL and SET ... GET of a value of KV_BLOB_MIN bytes or more answer as
 * GET does, by reference to the value's blob (they copied it): the reply
 * holds the old bytes while the key is deleted, set again, or overwritten
 * by the SET itself; SET ... NX GET that writes nothing too. Within EXEC
 * the reply is copied, as GET's is. */
TEST(big_value_reply_by_reference_outlives_getdel_and_set_get) {
    kv k;
    kv_client cl;
    buf out;
    open_kv_with_client(&k, false, &cl, &out);
    k.reply_blob = hold_reply;
    size_t big = KV_BLOB_MIN + 100, n;
    char *v = malloc(big);
    CHECK(v != NULL);
    memset(v, 'a', big);
    resp_arg set[5] = {{"SET", 3}, {"k", 1}, {v, big}, {"GET", 3}, {"NX", 2}};
    resp_arg getdel[2] = {{"GETDEL", 6}, {"k", 1}};
    CHECK_REPLY(exec_args(&k, &cl, &out, set, 3), "+OK\r\n");
    CHECK_REPLY(exec_args(&k, &cl, &out, getdel, 2), "<ref>");
    CHECK_EQ(held_count, 1);
    CHECK(store_get(&k.db, "k", 1, &n) == NULL);
    memset(v, 'b', big); /* the key again, maybe in the same place */
    CHECK_REPLY(exec_args(&k, &cl, &out, set, 3), "+OK\r\n");
    CHECK(held_len == big && held_blob[0] == 'a' && held_blob[big - 1] == 'a');
    release_held();
    memset(v, 'c', big); /* SET k <c...> GET: the b's are the reply */
    CHECK_REPLY(exec_args(&k, &cl, &out, set, 4), "<ref>");
    CHECK_EQ(held_count, 2);
    const char *now = store_get(&k.db, "k", 1, &n);
    CHECK(now != NULL && n == big && now[0] == 'c' && now[big - 1] == 'c');
    CHECK(held_len == big && held_blob[0] == 'b' && held_blob[big - 1] == 'b');
    release_held();
    CHECK_REPLY(exec_args(&k, &cl, &out, set, 5), "<ref>"); /* NX: no write */
    CHECK(held_blob[0] == 'c');
    release_held();
    CHECK_REPLY(exec_cl(&k, &cl, &out, "MULTI"), "+OK\r\n");
    CHECK_REPLY(exec_args(&k, &cl, &out, set, 4), "+QUEUED\r\n");
    CHECK_REPLY(exec_args(&k, &cl, &out, getdel, 2), "+QUEUED\r\n");
    exec_cl(&k, &cl, &out, "EXEC");
    CHECK_EQ(held_count, 3);
    CHECK_EQ(out.len, 4 + 2 * (8 + big + 2));
    close_kv_with_client(&k, &cl, &out);
    free(v);
}

/* The dump of a keyspace with one write made: k's after `argv`. */
static void dump_after(const resp_arg *argv, size_t argc, buf *d) {
    kv k;
    kv_setup(&k, false);
    buf out = {0};
    exec_args(&k, NULL, &out, argv, argc);
    kv_dump(&k, d);
    buf_free(&out);
    kv_free(&k);
}

static bool same_dump(const buf *a, const buf *b) {
    return a->len == b->len && memcmp(a->p, b->p, a->len) == 0;
}

TEST(dump_tells_binary_and_long_names_apart) {
    /* Keys, members and fields are bytes: the dump of each holds them
     * whole, so keyspaces that differ after a NUL, or past the 500th byte
     * of a key's name, dump differently (a NUL in a key crashed it). */
    static char long1[700], long2[700];
    memset(long1, 'k', sizeof long1);
    memcpy(long2, long1, sizeof long2);
    long2[sizeof long2 - 1] = 'K';
    static const resp_arg cases[][4] = {
        {{"SET", 3}, {"k\0a", 3}, {"v", 1}},
        {{"SET", 3}, {"k\0b", 3}, {"v", 1}},
        {{"SADD", 4}, {"s", 1}, {"m\0a", 3}},
        {{"SADD", 4}, {"s", 1}, {"m\0b", 3}},
        {{"HSET", 4}, {"h", 1}, {"f\0a", 3}, {"v", 1}},
        {{"HSET", 4}, {"h", 1}, {"f\0b", 3}, {"v", 1}},
        {{"SET", 3}, {long1, sizeof long1}, {"v", 1}},
        {{"SET", 3}, {long2, sizeof long2}, {"v", 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i += 2) {
        size_t argc = cases[i][3].p ? 4 : 3;
        buf a = {0}, b = {0}, again = {0};
        dump_after(cases[i], argc, &a);
        dump_after(cases[i + 1], argc, &b);
        dump_after(cases[i], argc, &again);
        CHECK(same_dump(&a, &again));
        CHECK(a.len > cases[i][1].len + cases[i][2].len);
        if (same_dump(&a, &b))
            check_fail(__FILE__, __LINE__, "case %zu: one dump for two", i);
        buf_free(&a);
        buf_free(&b);
        buf_free(&again);
    }
}

TEST(dump_tells_element_boundaries_apart) {
    /* A separator inside a value is no boundary: each pair's keyspaces
     * differ, and dumped equal while elements were only separated (a
     * list of "a,b" and one of "a" and "b"; a hash's field "a=b" of "c"
     * and field "a" of "b=c"; one key whose value holds the next key's
     * line and the two keys). */
    static const resp_arg cases[][6] = {
        {{"RPUSH", 5}, {"l", 1}, {"a,b", 3}},
        {{"RPUSH", 5}, {"l", 1}, {"a", 1}, {"b", 1}},
        {{"SADD", 4}, {"s", 1}, {"a,b", 3}},
        {{"SADD", 4}, {"s", 1}, {"a", 1}, {"b", 1}},
        {{"HSET", 4}, {"h", 1}, {"a=b", 3}, {"c", 1}},
        {{"HSET", 4}, {"h", 1}, {"a", 1}, {"b=c", 3}},
        {{"ZADD", 4}, {"z", 1}, {"2", 1}, {"a=1,b", 5}},
        {{"ZADD", 4}, {"z", 1}, {"1", 1}, {"a", 1}, {"2", 1}, {"b", 1}},
        {{"MSET", 4}, {"k", 1}, {"v\nm type=0 expire=0: w", 22}},
        {{"MSET", 4}, {"k", 1}, {"v", 1}, {"m", 1}, {"w", 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i += 2) {
        size_t argc[2] = {0, 0};
        for (size_t j = 0; j < 2; j++)
            while (argc[j] < 6 && cases[i + j][argc[j]].p)
                argc[j]++;
        buf a = {0}, b = {0};
        dump_after(cases[i], argc[0], &a);
        dump_after(cases[i + 1], argc[1], &b);
        if (same_dump(&a, &b))
            check_fail(__FILE__, __LINE__, "case %zu: one dump for two: %s", i,
                       a.p);
        buf_free(&a);
        buf_free(&b);
    }
}

TEST(glob_huge_empty_and_binary_patterns) {
    /* A pattern of a million stars: one run, matching everything but the
     * empty string. */
    size_t big = (size_t)1 << 20;
    char *stars = malloc(big + 2);
    memset(stars, '*', big);
    size_t steps;
    CHECK(kv_glob_steps(stars, big, "key", 3, false, &steps));
    CHECK(steps <= 1);
    CHECK(!kv_glob(stars, big, "", 0, false));
    /* redis-server stops at 1000 runs of '*' before the pattern's end:
     * "*a" 1000 times matches 2000 'a's, 1001 times nothing, and 1000
     * times then a last "*" all of them. */
    char *pat = malloc(2 * 1002), *s = malloc(2000);
    memset(s, 'a', 2000);
    for (size_t i = 0; i < 1002; i++) {
        pat[2 * i] = '*';
        pat[2 * i + 1] = 'a';
    }
    CHECK(kv_glob(pat, 2000, s, 2000, false));
    CHECK(!kv_glob(pat, 2002, s, 2000, false));
    CHECK(kv_glob(pat, 2001, s, 2000, false));
    CHECK(!kv_glob(pat, 2003, s, 2000, false));
    /* Through KEYS: the empty pattern finds the empty key only; "**" all
     * but it; NULs in patterns and keys are bytes like others. */
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    resp_arg set[3] = {{"SET", 3}, {"", 0}, {"v", 1}};
    exec_args(&k, &cl, &out, set, 3);
    set[1] = (resp_arg){"a\0b", 3};
    exec_args(&k, &cl, &out, set, 3);
    resp_arg keys[2] = {{"KEYS", 4}, {"", 0}};
    CHECK(strcmp(exec_args(&k, &cl, &out, keys, 2), "*1\r\n$0\r\n\r\n") == 0);
    keys[1] = (resp_arg){"**", 2};
    exec_args(&k, &cl, &out, keys, 2);
    CHECK(out.len == 13 && memcmp(out.p, "*1\r\n$3\r\na\0b\r\n", 13) == 0);
    keys[1] = (resp_arg){"?\0?", 3};
    exec_args(&k, &cl, &out, keys, 2);
    CHECK(out.len == 13 && memcmp(out.p, "*1\r\n$3\r\na\0b\r\n", 13) == 0);
    keys[1] = (resp_arg){"a[\0]", 4};
    CHECK(strcmp(exec_args(&k, &cl, &out, keys, 2), "*0\r\n") == 0);
    keys[1] = (resp_arg){stars, big};
    exec_args(&k, &cl, &out, keys, 2);
    CHECK(out.len == 13 && memcmp(out.p, "*1\r\n$3\r\na\0b\r\n", 13) == 0);
    resp_arg scan[4] = {{"SCAN", 4}, {"0", 1}, {"MATCH", 5}, {"", 0}};
    CHECK(strcmp(exec_args(&k, &cl, &out, scan, 4),
                 "*2\r\n$1\r\n0\r\n*1\r\n$0\r\n\r\n") == 0);
    /* PUBLISH to the empty channel reaches a "" subscriber, not a "*"
     * one (as redis-server). */
    kv_client sub, pub;
    buf sout = {0};
    kv_client_init(&sub, NULL, &sout);
    kv_client_init(&pub, NULL, &out);
    resp_arg ps[4] = {{"PSUBSCRIBE", 10}, {"*", 1}, {"**", 2}, {"", 0}};
    exec_args(&k, &sub, &sout, ps, 4);
    sout.len = 0;
    resp_arg publish[3] = {{"PUBLISH", 7}, {"", 0}, {"m", 1}};
    CHECK(strcmp(exec_args(&k, &pub, &out, publish, 3), ":1\r\n") == 0);
    CHECK(sout.len == 37 && memcmp(sout.p,
                                   "*4\r\n$8\r\npmessage\r\n$0\r\n\r\n$0\r\n"
                                   "\r\n$1\r\nm\r\n",
                                   37) == 0);
    publish[1] = (resp_arg){"x", 1};
    CHECK(strcmp(exec_args(&k, &pub, &out, publish, 3), ":2\r\n") == 0);
    kv_client_reset(&k, &sub);
    kv_client_reset(&k, &pub);
    kv_client_reset(&k, &cl);
    buf_free(&sout);
    buf_free(&out);
    kv_free(&k);
    free(stars);
    free(pat);
    free(s);
}

/* ------------------------------------------------- CLIENT and REPLSYNC */

static int kills;
static long long count_kills(kv *k, kv_client *cl, const kv_client_filter *f) {
    (void)k;
    (void)cl;
    CHECK_EQ(f->type, KV_CLIENT_REPLICA);
    CHECK(f->skipme);
    kills++;
    return 2;
}

/* What redis-server 7.0 answers, byte for byte (REPLSYNC aside, which it
 * does not know: refused as it refuses SYNC). */
TEST(client_and_replsync_keep_transactions_and_subscriptions) {
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    k.client_kill = count_kills;
    /* CLIENT queues inside MULTI and answers in EXEC's array. */
    exec_cl(&k, &cl, &out, "MULTI");
    CHECK(strcmp(exec_cl(&k, &cl, &out, "CLIENT SETNAME x"), "+QUEUED\r\n") ==
          0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "CLIENT KILL TYPE replica"),
                 "+QUEUED\r\n") == 0);
    CHECK_EQ(kills, 0);
    exec_cl(&k, &cl, &out, "SET a 1");
    CHECK(strcmp(exec_cl(&k, &cl, &out, "EXEC"),
                 "*3\r\n+OK\r\n:2\r\n+OK\r\n") == 0);
    CHECK_EQ(kills, 1);
    /* An unknown subcommand, or a wrong arity, spoils the transaction. */
    static const char *const spoil[][2] = {
        {"CLIENT FOO", "-ERR unknown subcommand 'FOO'. Try CLIENT HELP.\r\n"},
        {"client setname",
         "-ERR wrong number of arguments for 'client|setname' command\r\n"},
        {"CLIENT", "-ERR wrong number of arguments for 'client' command\r\n"},
        {"CLIENT KILL",
         "-ERR wrong number of arguments for 'client|kill' command\r\n"},
        {"REPLSYNC ? 0 1", "-ERR Command not allowed inside a transaction\r\n"},
    };
    for (size_t i = 0; i < sizeof spoil / sizeof spoil[0]; i++) {
        exec_cl(&k, &cl, &out, "MULTI");
        out.len = 0;
        resp_arg argv[MAX_ARGS];
        char copy[64];
        size_t argc = 0;
        snprintf(copy, sizeof copy, "%s", spoil[i][0]);
        for (char *w = strtok(copy, " "); w; w = strtok(NULL, " "))
            argv[argc++] = (resp_arg){w, strlen(w)};
        CHECK_EQ(kv_exec(&k, &cl, argv, argc, &out), 0); /* not KV_SERVER */
        buf_put(&out, "", 1);
        CHECK(strcmp(out.p, spoil[i][1]) == 0);
        CHECK(strcmp(exec_cl(&k, &cl, &out, "SET b 1"), "+QUEUED\r\n") == 0);
        CHECK(strcmp(exec_cl(&k, &cl, &out, "EXEC"),
                     "-EXECABORT Transaction discarded because of previous "
                     "errors.\r\n") == 0);
    }
    CHECK(strcmp(exec_cl(&k, &cl, &out, "EXISTS b"), ":0\r\n") == 0);
    CHECK_EQ(kills, 1);
    /* Outside a transaction: REPLSYNC is the server's, CLIENT runs. */
    resp_arg rs[4] = {{"REPLSYNC", 8}, {"?", 1}, {"0", 1}, {"1", 1}};
    out.len = 0;
    CHECK_EQ(kv_exec(&k, &cl, rs, 4, &out), KV_SERVER);
    CHECK_EQ(out.len, 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "CLIENT KILL TYPE slave"), ":2\r\n") ==
          0);
    /* Subscribed: both refused as Redis refuses any other command; an
     * unknown subcommand and a wrong arity are refused first. */
    exec_cl(&k, &cl, &out, "SUBSCRIBE c");
    out.len = 0;
    CHECK_EQ(kv_exec(&k, &cl, rs, 4, &out), 0);
    buf_put(&out, "", 1);
    CHECK(strcmp(out.p, "-ERR Can't execute 'replsync': only (P|S)SUBSCRIBE / "
                        "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed "
                        "in this context\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "CLIENT SETNAME x"),
                 "-ERR Can't execute 'client|setname': only (P|S)SUBSCRIBE / "
                 "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this "
                 "context\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "CLIENT KILL TYPE replica"),
                 "-ERR Can't execute 'client|kill': only (P|S)SUBSCRIBE / "
                 "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this "
                 "context\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "CLIENT foo"),
                 "-ERR unknown subcommand 'foo'. Try CLIENT HELP.\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "CLIENT"),
                 "-ERR wrong number of arguments for 'client' command\r\n") ==
          0);
    CHECK_EQ(kills, 2);
    exec_cl(&k, &cl, &out, "UNSUBSCRIBE");
    close_kv_with_client(&k, &cl, &out);
}

/* kv_exec runs most commands on a short path that skips the checks at a
 * glance: each command that must take the checked path still does. */
TEST(exec_short_path_keeps_every_check) {
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    /* QUIT: answered and reported, outside and inside MULTI (never
     * queued) and while subscribed. */
    CHECK_EQ(exec_rc(&k, &cl, &out, "QUIT"), KV_QUIT);
    CHECK(strcmp(out.p, "+OK\r\n") == 0);
    exec_rc(&k, &cl, &out, "MULTI");
    CHECK_EQ(exec_rc(&k, &cl, &out, "QUIT"), KV_QUIT);
    CHECK(strcmp(out.p, "+OK\r\n") == 0);
    kv_client_reset(&k, &cl);
    exec_rc(&k, &cl, &out, "SUBSCRIBE c");
    CHECK_EQ(exec_rc(&k, &cl, &out, "QUIT"), KV_QUIT);
    CHECK(strcmp(out.p, "+OK\r\n") == 0);
    /* PING runs while subscribed (cmd_ping picks its RESP2 form itself),
     * GET is refused. */
    CHECK_EQ(exec_rc(&k, &cl, &out, "PING"), 0);
    CHECK(strcmp(out.p, "*2\r\n$4\r\npong\r\n$0\r\n\r\n") == 0);
    CHECK_EQ(exec_rc(&k, &cl, &out, "GET a"), 0);
    CHECK(strncmp(out.p, "-ERR Can't execute 'get'", 24) == 0);
    kv_client_reset(&k, &cl);
    /* Inside MULTI a plain command is queued, not run. */
    exec_rc(&k, &cl, &out, "MULTI");
    CHECK_EQ(exec_rc(&k, &cl, &out, "SET a 1"), 0);
    CHECK(strcmp(out.p, "+QUEUED\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "DISCARD"), "+OK\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "EXISTS a"), ":0\r\n") == 0);
    /* The server's command is returned to the caller, unrun; a container
     * runs its subcommand, or names the one it does not know. */
    resp_arg rs[4] = {{"REPLSYNC", 8}, {"?", 1}, {"0", 1}, {"1", 1}};
    out.len = 0;
    CHECK_EQ(kv_exec(&k, &cl, rs, 4, &out), KV_SERVER);
    CHECK_EQ(out.len, 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "CLIENT SETNAME x"), "+OK\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "CLIENT FOO"),
                 "-ERR unknown subcommand 'FOO'. Try CLIENT HELP.\r\n") == 0);
    /* No client (a queued or applied command): runs, as before. */
    CHECK_EQ(exec_rc(&k, NULL, &out, "SET a 1"), 0);
    CHECK(strcmp(out.p, "+OK\r\n") == 0);
    /* An arity the command refuses; names short and long, known and not,
     * in any case. */
    CHECK(strcmp(exec_cl(&k, &cl, &out, "GET"),
                 "-ERR wrong number of arguments for 'get' command\r\n") == 0);
    CHECK(strncmp(exec_cl(&k, &cl, &out, "G"), "-ERR unknown command 'G'",
                  24) == 0);
    CHECK(strncmp(exec_cl(&k, &cl, &out, "NOSUCHCOMMANDATALL"),
                  "-ERR unknown command 'NOSUCHCOMMANDATALL'", 41) == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "gEt a"), "$1\r\n1\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "pExPiReAt a 1"), ":1\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "EXISTS a"), ":0\r\n") == 0);
    close_kv_with_client(&k, &cl, &out);
    /* A replica refuses writes from a client and from no client alike. */
    open_kv_with_client(&k, true, &cl, &out);
    CHECK_EQ(exec_rc(&k, &cl, &out, "SET a 1"), 0);
    CHECK(strncmp(out.p, "-READONLY", 9) == 0);
    CHECK_EQ(exec_rc(&k, NULL, &out, "SET a 1"), 0);
    CHECK(strncmp(out.p, "-READONLY", 9) == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "GET a"), "$-1\r\n") == 0);
    close_kv_with_client(&k, &cl, &out);
}

TEST(exec_refused_aborts_the_transaction_as_redis) {
    /* Redis answers an EXEC it refuses (an arity, a subscribed client)
     * with -EXECABORT and the reason, and discards the transaction, in
     * MULTI or not (rejectCommand, execCommandAbort): the commands queued
     * never run and the client is out of MULTI. lull-kv answered -ERR and
     * kept the transaction open, so what followed was queued. Bytes as
     * redis-server 7.0.15 sends them. */
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    static const char abort_arity[] =
        "-EXECABORT Transaction discarded because of: wrong number of "
        "arguments for 'exec' command\r\n";
    CHECK(strcmp(exec_cl(&k, &cl, &out, "EXEC x"), abort_arity) == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "MULTI"), "+OK\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "SET a 1"), "+QUEUED\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "EXEC x"), abort_arity) == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "GET a"), "$-1\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "EXEC"),
                 "-ERR EXEC without MULTI\r\n") == 0);
    exec_cl(&k, &cl, &out, "SUBSCRIBE c");
    CHECK(strcmp(exec_cl(&k, &cl, &out, "EXEC"),
                 "-EXECABORT Transaction discarded because of: Can't execute "
                 "'exec': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / "
                 "QUIT / RESET are allowed in this context\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "EXEC x"), abort_arity) == 0);
    close_kv_with_client(&k, &cl, &out);
}

TEST(unknown_command_words_end_at_a_nul_as_redis) {
    /* Redis prints an unknown command's name and arguments with %s: each
     * ends at its first NUL (kv_reply_bad_sub already did so). lull-kv wrote
     * the NUL and what follows into the error line. */
    kv k;
    kv_setup(&k, false);
    buf out = {0};
    static const resp_arg name[] = {{"PI\0G", 4}};
    exec_args(&k, NULL, &out, name, 1);
    static const char want1[] =
        "-ERR unknown command 'PI', with args beginning with: \r\n";
    CHECK(out.len == sizeof want1 - 1 && memcmp(out.p, want1, out.len) == 0);
    static const resp_arg args[] = {{"G\0T", 3}, {"a\0b", 3}, {"cd", 2}};
    exec_args(&k, NULL, &out, args, 3);
    static const char want2[] =
        "-ERR unknown command 'G', with args beginning with: 'a' 'cd' \r\n";
    CHECK(out.len == sizeof want2 - 1 && memcmp(out.p, want2, out.len) == 0);
    buf_free(&out);
    kv_free(&k);
}

TEST(client_subcommands_as_redis) {
    kv k;
    buf out;
    kv_client cl;
    /* no client_kill: no connections */
    open_kv_with_client(&k, false, &cl, &out);
    /* The subcommand's name as Redis formats it: 128 bytes at most, up to
     * a NUL, CR and LF as spaces; the command in upper case. */
    char longname[200];
    memset(longname, 'z', sizeof longname);
    resp_arg a[3] = {{"cLiEnT", 6}, {"a\r\nb", 4}, {"", 0}};
    CHECK(strcmp(exec_args(&k, &cl, &out, a, 2),
                 "-ERR unknown subcommand 'a  b'. Try CLIENT HELP.\r\n") == 0);
    a[1] = (resp_arg){"x\0y", 3};
    CHECK(strcmp(exec_args(&k, &cl, &out, a, 2),
                 "-ERR unknown subcommand 'x'. Try CLIENT HELP.\r\n") == 0);
    a[1] = (resp_arg){longname, sizeof longname};
    exec_args(&k, &cl, &out, a, 2);
    CHECK_EQ(out.len,
             sizeof "-ERR unknown subcommand ''. Try CLIENT HELP.\r\n" - 1 +
                 128);
    /* SETNAME checks the name as Redis does. */
    a[1] = (resp_arg){"SETNAME", 7};
    a[2] = (resp_arg){"a b", 3};
    CHECK(strcmp(exec_args(&k, &cl, &out, a, 3),
                 "-ERR Client names cannot contain spaces, newlines or "
                 "special characters.\r\n") == 0);
    a[2] = (resp_arg){"\x7f", 1};
    CHECK(strncmp(exec_args(&k, &cl, &out, a, 3), "-ERR Client names", 17) ==
          0);
    a[2] = (resp_arg){"", 0};
    CHECK(strcmp(exec_args(&k, &cl, &out, a, 3), "+OK\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "CLIENT SETNAME ~!"), "+OK\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "CLIENT SETINFO lib-name x"),
                 "+OK\r\n") == 0);
    /* KILL: without connections, none matches. */
    CHECK(strcmp(exec_cl(&k, &cl, &out, "CLIENT KILL TYPE Replica"),
                 ":0\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "CLIENT KILL 1.2.3.4:5"),
                 "-ERR No such client\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "CLIENT KILL TYPE normal"), ":0\r\n") ==
          0);
    /* A subcommand's full name is no command of its own. */
    CHECK(strcmp(exec_cl(&k, &cl, &out, "client|kill"),
                 "-ERR unknown command 'client|kill', with args beginning "
                 "with: \r\n") == 0);
    /* Without a client (a replica's log, tests): CLIENT is not a write. */
    resp_limits lim = {.max_bulk = 1000, .max_args = MAX_ARGS};
    resp_arg argv[MAX_ARGS];
    const char *rec = "*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$1\r\nx\r\n";
    const char *err = NULL;
    size_t need;
    CHECK_EQ(kv_apply_stream(&k, &lim, argv, rec, strlen(rec), &err, &need),
             -EPROTO);
    close_kv_with_client(&k, &cl, &out);
}

/* SELECT, as redis-server 7.0.15 answers it for a server of one database:
 * 0 is taken (clients and pools send it on connect, or from a URL's
 * redis://host/0); any other index in int range is out of range. It
 * queues inside MULTI and is refused while subscribed, as Redis does. */
TEST(select_database_zero_as_redis) {
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    static const char *const answers[][2] = {
        {"SELECT 0", "+OK\r\n"},
        {"select 0", "+OK\r\n"},
        {"SELECT 1", "-ERR DB index is out of range\r\n"},
        {"SELECT -1", "-ERR DB index is out of range\r\n"},
        {"SELECT 2147483647", "-ERR DB index is out of range\r\n"},
        {"SELECT 2147483648", "-ERR value is out of range, value must between "
                              "-2147483648 and 2147483647\r\n"},
        {"SELECT -2147483649", "-ERR value is out of range, value must "
                               "between -2147483648 and 2147483647\r\n"},
        {"SELECT 00", "-ERR value is not an integer or out of range\r\n"},
        {"SELECT abc", "-ERR value is not an integer or out of range\r\n"},
        {"SELECT", "-ERR wrong number of arguments for 'select' command\r\n"},
        {"SELECT 0 1",
         "-ERR wrong number of arguments for 'select' command\r\n"},
    };
    for (size_t i = 0; i < sizeof answers / sizeof answers[0]; i++)
        CHECK_REPLY(exec_cl(&k, &cl, &out, answers[i][0]), answers[i][1]);
    /* Without a client (tests), and on a replica: not a write. */
    CHECK_REPLY(exec_cl(&k, NULL, &out, "SELECT 0"), "+OK\r\n");
    exec_cl(&k, &cl, &out, "MULTI");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "SELECT 0"), "+QUEUED\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "SELECT 3"), "+QUEUED\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "EXEC"),
                "*2\r\n+OK\r\n-ERR DB index is out of range\r\n");
    exec_cl(&k, &cl, &out, "SUBSCRIBE c");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "SELECT 0"),
                "-ERR Can't execute 'select': only (P|S)SUBSCRIBE / "
                "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this "
                "context\r\n");
    close_kv_with_client(&k, &cl, &out);
    kv r;
    kv_setup(&r, true);
    CHECK_REPLY(exec_cl(&r, NULL, &out, "SELECT 0"), "+OK\r\n");
    buf_free(&out);
    kv_free(&r);
}

/* CLIENT ID and GETNAME, which pools call, and SETNAME's name kept for
 * them (and for CLIENT LIST), as redis-server 7.0.15 answers. */
TEST(client_id_and_name_kept_as_redis) {
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    cl.id = 7; /* the owner numbers its clients */
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT ID"), ":7\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT GETNAME"), "$-1\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT SETNAME pool-1"), "+OK\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "client getname"), "$6\r\npool-1\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT SETNAME other"), "+OK\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT GETNAME"), "$5\r\nother\r\n");
    /* A refused name leaves the one there; an empty one clears it. */
    resp_arg a[3] = {{"CLIENT", 6}, {"SETNAME", 7}, {"a b", 3}};
    CHECK(strncmp(exec_args(&k, &cl, &out, a, 3), "-ERR Client names", 17) ==
          0);
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT GETNAME"), "$5\r\nother\r\n");
    a[2] = (resp_arg){"", 0};
    CHECK_REPLY(exec_args(&k, &cl, &out, a, 3), "+OK\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT GETNAME"), "$-1\r\n");
    static const char *const arity[][2] = {
        {"CLIENT ID x",
         "-ERR wrong number of arguments for 'client|id' command\r\n"},
        {"CLIENT GETNAME x",
         "-ERR wrong number of arguments for 'client|getname' command\r\n"},
    };
    for (size_t i = 0; i < sizeof arity / sizeof arity[0]; i++)
        CHECK_REPLY(exec_cl(&k, &cl, &out, arity[i][0]), arity[i][1]);
    /* Queued inside MULTI, answered in EXEC's array. */
    exec_cl(&k, &cl, &out, "MULTI");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT SETNAME n"), "+QUEUED\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT ID"), "+QUEUED\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT GETNAME"), "+QUEUED\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "EXEC"),
                "*3\r\n+OK\r\n:7\r\n$1\r\nn\r\n");
    /* Without a client of its own (tests): no id, no name to keep. */
    CHECK_REPLY(exec_cl(&k, NULL, &out, "CLIENT ID"), ":0\r\n");
    CHECK_REPLY(exec_cl(&k, NULL, &out, "CLIENT SETNAME x"), "+OK\r\n");
    CHECK_REPLY(exec_cl(&k, NULL, &out, "CLIENT GETNAME"), "$-1\r\n");
    /* The name goes with the client (ASan: no leak), and reset twice. */
    close_kv_with_client(&k, &cl, &out);
    CHECK(cl.name == NULL);
}

/* CLIENT LIST, INFO and KILL as redis-server 7.0.15 parses them and
 * answers them (the replies taken from one); without an owner (no
 * connections) the list is the asking client's own line. */
TEST(client_list_info_and_kill_parse_as_redis) {
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    cl.id = 7;
    static const char *const answers[][2] = {
        {"CLIENT INFO x",
         "-ERR wrong number of arguments for 'client|info' command\r\n"},
        {"CLIENT LIST foo", "-ERR syntax error\r\n"},
        {"CLIENT LIST TYPE normal x", "-ERR syntax error\r\n"},
        {"CLIENT LIST ID", "-ERR syntax error\r\n"},
        {"CLIENT LIST TYPE foo", "-ERR Unknown client type 'foo'\r\n"},
        {"CLIENT LIST ID 7 abc", "-ERR Invalid client ID\r\n"},
        {"CLIENT LIST ID 07", "-ERR Invalid client ID\r\n"},
        {"CLIENT LIST ID 99999999999999999999", "-ERR Invalid client ID\r\n"},
        {"CLIENT LIST ID 0 -1 8", "$0\r\n\r\n"},
        {"CLIENT LIST TYPE replica", "$0\r\n\r\n"},
        {"CLIENT LIST TYPE master", "$0\r\n\r\n"},
        {"CLIENT KILL ID 0", "-ERR client-id should be greater than 0\r\n"},
        {"CLIENT KILL ID abc", "-ERR client-id should be greater than 0\r\n"},
        {"CLIENT KILL ID +5", "-ERR client-id should be greater than 0\r\n"},
        {"CLIENT KILL ID 1 TYPE", "-ERR syntax error\r\n"},
        {"CLIENT KILL TYPE foo ID", "-ERR Unknown client type 'foo'\r\n"},
        {"CLIENT KILL SKIPME maybe", "-ERR syntax error\r\n"},
        {"CLIENT KILL USER nobody", "-ERR No such user 'nobody'\r\n"},
        {"CLIENT KILL USER Default", "-ERR No such user 'Default'\r\n"},
        {"CLIENT KILL a b", "-ERR syntax error\r\n"},
        {"CLIENT KILL USER default", ":0\r\n"},
        {"CLIENT KILL ADDR 1.2.3.4:5 LADDR x SKIPME no", ":0\r\n"},
        {"CLIENT KILL 1.2.3.4:5", "-ERR No such client\r\n"},
    };
    for (size_t i = 0; i < sizeof answers / sizeof answers[0]; i++)
        CHECK_REPLY(exec_cl(&k, &cl, &out, answers[i][0]), answers[i][1]);
    /* Every field, in Redis' order; the connection's are the owner's. */
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT SETNAME pool"), "+OK\r\n");
    static const char line[] =
        "id=7 addr=?:0 laddr=?:0 fd=-1 name=pool age=0 idle=0 flags=N db=0 "
        "sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 "
        "multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=5 events= "
        "cmd=client|info user=default redir=-1 resp=2\n";
    char want[512];
    snprintf(want, sizeof want, "$%zu\r\n%s\r\n", sizeof line - 1, line);
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT INFO"), want);
    char *list = strstr(want, "cmd=client|info");
    memcpy(list, "cmd=client|list", 15);
    CHECK_REPLY(exec_cl(&k, &cl, &out, "client list"), want);
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT LIST TYPE Normal"), want);
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT LIST TYPE pubsub"),
                "$0\r\n\r\n");
    /* ID: a line for each id given, in its order, a repeat repeated. */
    exec_cl(&k, &cl, &out, "CLIENT LIST ID 7 1 7");
    CHECK(strncmp(out.p, "$462\r\nid=7 ", 11) == 0);
    CHECK(strstr(out.p + 11, "\nid=7 ") != NULL);
    /* The last command's name as Redis': NULL when it was unknown. */
    exec_cl(&k, &cl, &out, "NOSUCH");
    exec_cl(&k, &cl, &out, "CLIENT FOO");
    exec_cl(&k, &cl, &out, "GET");
    exec_cl(&k, &cl, &out, "MULTI");
    exec_cl(&k, &cl, &out, "SET x 1");
    exec_cl(&k, &cl, &out, "CLIENT LIST");
    CHECK_REPLY(
        exec_cl(&k, &cl, &out, "EXEC"),
        "*2\r\n+OK\r\n$224\r\n"
        "id=7 addr=?:0 laddr=?:0 fd=-1 name=pool age=0 idle=0 "
        "flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 "
        "argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 "
        "tot-mem=5 events= cmd=exec user=default redir=-1 resp=2\n\r\n");
    /* multi-mem: what the queue holds, gone with it. */
    exec_cl(&k, &cl, &out, "MULTI");
    exec_cl(&k, &cl, &out, "SET x 1");
    CHECK(cl.queue_bytes >= 5);
    exec_cl(&k, &cl, &out, "DISCARD");
    CHECK_EQ(cl.queue_bytes, 0);
    /* Subscribed: refused as any command but the pub/sub ones. */
    exec_cl(&k, &cl, &out, "SUBSCRIBE c");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT LIST"),
                "-ERR Can't execute 'client|list': only (P|S)SUBSCRIBE / "
                "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this "
                "context\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT INFO"),
                "-ERR Can't execute 'client|info': only (P|S)SUBSCRIBE / "
                "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this "
                "context\r\n");
    exec_cl(&k, &cl, &out, "UNSUBSCRIBE");
    /* Without a client of its own (tests): nothing to list. */
    CHECK_REPLY(exec_cl(&k, NULL, &out, "CLIENT INFO"), "$0\r\n\r\n");
    CHECK_REPLY(exec_cl(&k, NULL, &out, "CLIENT LIST"), "$0\r\n\r\n");
    close_kv_with_client(&k, &cl, &out);
}

/* CLIENT HELP: every refusal of an unknown CLIENT subcommand says "Try
 * CLIENT HELP", so it must answer: Redis' array of lines in its format,
 * naming the subcommands lull-kv has (and nothing it lacks). */
TEST(client_help_answers_as_redis) {
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    exec_cl(&k, &cl, &out, "CLIENT HELP");
    CHECK(strncmp(out.p, "*", 1) == 0);
    CHECK(strstr(out.p, "\r\n+CLIENT <subcommand> [<arg> [value] [opt] ...]. "
                        "Subcommands are:\r\n") != NULL);
    static const char *const subs[] = {
        "GETNAME",        "ID",  "INFO", "KILL <ip:port>", "LIST [options ...]",
        "SETNAME <name>", "HELP"};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        char line[64];
        snprintf(line, sizeof line, "\r\n+%s\r\n", subs[i]);
        CHECK(strstr(out.p, line) != NULL);
    }
    CHECK(strstr(out.p, "TRACKING") == NULL); /* not lull-kv's */
    /* The count is the lines'. */
    long n = strtol(out.p + 1, NULL, 10);
    long lines = 0;
    for (const char *p = strstr(out.p, "\r\n"); p; p = strstr(p + 2, "\r\n"))
        lines++;
    CHECK_EQ(n, lines - 1);
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT HELP x"),
                "-ERR wrong number of arguments for 'client|help' command\r\n");
    exec_cl(&k, &cl, &out, "SUBSCRIBE c");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT HELP"),
                "-ERR Can't execute 'client|help': only (P|S)SUBSCRIBE / "
                "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this "
                "context\r\n");
    close_kv_with_client(&k, &cl, &out);
}

/* ------------------------------------------------- the reference model */

#include "model.h"

TEST(model_agrees_with_the_commands) {
    /* The simulator's reference model (model.c) against
     * kv_exec: random commands on a few keys, strings, lists (LINSERT,
     * LMOVE and RPOPLPUSH too) and hashes,
     * expiry times in the past and future (SETEX and PSETEX too), time
     * moving between them (so keys expire by the timer and by lookup). Each
     * reply must be one the model allows at that instant, and the model must be
     * left with one state per key, the store's. */
    lull_loop *loop = virtual_loop();
    vkv v;
    vkv_open(&v, loop, false);
    enum { KEYS = 4 };
    static model_key keys[KEYS]; /* over 1 MiB each */
    for (int i = 0; i < KEYS; i++)
        model_key_init(&keys[i]);
    uint64_t x = 99;
    static char req[4096]; /* SADD_N's and ZADD_N's hundreds of words */
    static resp_arg argv[400];
    buf out = {0};
    int ops_seen[OP_COUNT] = {0}, lrem_found = 0, ltrim_cut = 0;
    int scan_parts = 0,
        bulk_key[2] = {-1, -1}; /* the last SADD_N's, ZADD_N's */
    int linsert_found = 0, moved = 0;
    for (int step = 0; step < 40000; step++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        /* A quarter RPUSHes: lists long enough to cut inside. */
        model_cmd c = {.op = (x >> 33) % 4 ? (int)((x >> 35) % OP_GETRANGE)
                                           : OP_RPUSH};
        /* Half the GETs a GETRANGE (the op added last: the other draws
         * stay as they were) */
        if (c.op == OP_GET && (x >> 19) % 2) c.op = OP_GETRANGE;
        int key = (int)((x >> 20) % KEYS);
        snprintf(c.key, sizeof c.key, "k%d", key);
        int64_t now = 1000000000000ll + (int64_t)(lull_loop_now(loop) / MS);
        uint32_t r = (uint32_t)(x >> 40);
        if (r % 3 == 0)
            snprintf(c.val, sizeof c.val, "%d", (int)(r % 200) - 20);
        else
            snprintf(c.val, sizeof c.val, "v%u", r % 1000);
        c.at = now - 50 + (int64_t)(r % 400);
        /* Indexes past both ends; LREM mostly of an item there. */
        c.i1 = (int64_t)(r % 9) - 4;
        c.i2 = (int64_t)(r / 9 % 9) - 4;
        /* SETEX's seconds, PSETEX's ms: mostly ahead, now and then not a
         * time. A hash's field: one of three. */
        if (c.op == OP_SETEX) c.i1 = r % 4;
        if (c.op == OP_PSETEX) c.i1 = (int64_t)(r % 300) - 20;
        snprintf(c.field, sizeof c.field, "f%u", r / 7 % 3);
        /* ZADD's options (an eighth of them any six bits: the invalid
         * combinations), ZRANGE's REV and WITHSCORES; scores from the
         * values, and small ones, infinities, halves. */
        c.flags =
            (uint8_t)((x >> 8) % 8
                          ? (x >> 11) % 3 | ((x >> 13) % 3 << 2) |
                                ((x >> 15) % 2 << 4) | ((x >> 16) % 3 == 0) << 5
                          : (x >> 11) % 64);
        if ((c.op == OP_ZADD || c.op == OP_ZINCRBY) && r % 5 < 3)
            snprintf(c.val, sizeof c.val, "%s",
                     (const char *[]){"1", "2", "-1", "0", "inf", "-inf", "1.5",
                                      "3"}[r / 5 % 8]);
        if ((c.op == OP_LREM || c.op == OP_LINSERT || c.op == OP_LPOS) && r % 4)
            model_list_item(&keys[key].c[0], r, &c);
        /* By score: LIMIT's offset and count negative, 0, inside, past
         * the end; bulk adds to sets past SCAN_WHOLE (128); scans from 0
         * and from other cursors; ZRANK of a member there. */
        c.off = (int64_t)(r / 13 % 8) - 1;
        c.cnt = (int64_t)(r / 101 % 5) - 1;
        if (c.op == OP_SADD_N || c.op == OP_ZADD_N) {
            c.off = r / 13 % 200;
            c.cnt = 1 + r / 101 % 180;
            bulk_key[c.op == OP_ZADD_N] = key;
        }
        if (c.op == OP_SSCAN || c.op == OP_ZSCAN) { /* mostly of a bulk add */
            if (r % 4 && bulk_key[c.op == OP_ZSCAN] >= 0) {
                key = bulk_key[c.op == OP_ZSCAN];
                snprintf(c.key, sizeof c.key, "k%d", key);
            }
            c.cnt = 1 + r / 101 % 20;
            c.cursor = r % 2 ? r / 3 % 256 : 0;
        }
        if ((c.op == OP_ZRANK || c.op == OP_ZMSCORE) && r % 2)
            model_member(&keys[key].c[0], r / 11, &c);
        int key2 = (int)(r / 81 % KEYS);
        snprintf(c.key2, sizeof c.key2, "k%d", key2);
        if ((c.op == OP_APPEND || c.op == OP_RPUSH || c.op == OP_RPUSH_N ||
             c.op == OP_LINSERT) &&
            keys[key].c[0].len > 400)
            c.op = OP_DEL;
        ops_seen[c.op]++;
        int items = keys[key].c[0].items;
        size_t n = model_request(&c, req);
        size_t argc;
        const char *err = NULL;
        resp_limits lim = {.max_bulk = 1000, .max_args = 400};
        CHECK_EQ(resp_parse(&lim, req, n, argv, &argc, &err), (long)n);
        out.len = 0;
        v.k.cmd_now = 0;
        kv_exec(&v.k, NULL, argv, argc, &out);
        if (v.k.expiry_changed) kv_expiry_rearm(&v.x);
        bool two = model_two_keys(c.op);
        if (!(two ? model_apply2(&keys[key], &keys[key2], &c, now, now, out.p,
                                 out.len)
                  : model_apply(&keys[key], &c, now, now, out.p, out.len))) {
            static char want[MODEL_REQ_MAX];
            char st[800];
            size_t w = model_reply(&keys[key].c[0], &c, now, want);
            model_describe(&keys[key].c[0], st, sizeof st);
            check_fail(__FILE__, __LINE__,
                       "step %d: %.*s: got %.*s, model %.*s (%s)", step, (int)n,
                       req, (int)out.len, out.p, (int)w, want, st);
        }
        model_settle(&keys[key], now);
        model_settle(&keys[key2], now);
        lrem_found += c.op == OP_LREM && out.p[0] == ':' && out.p[1] != '0';
        ltrim_cut += c.op == OP_LTRIM && items > keys[key].c[0].items &&
                     keys[key].c[0].items > 0;
        linsert_found += c.op == OP_LINSERT && out.p[0] == ':' &&
                         out.p[1] != '0' && out.p[1] != '-';
        moved += (c.op == OP_LMOVE || c.op == OP_RPOPLPUSH) &&
                 out.p[0] == '$' && out.p[1] != '-';
        scan_parts += (c.op == OP_SSCAN || c.op == OP_ZSCAN) &&
                      memcmp(out.p, "*2\r\n$1\r\n0\r\n", 11) != 0 &&
                      out.p[0] == '*';
        CHECK_EQ(keys[key].n, 1);
        CHECK_EQ(keys[key2].n, 1);
        if (r % 7 == 0) lull_loop_advance(loop, (r % 100) * MS);
    }
    for (int i = 0; i < OP_COUNT; i++)
        CHECK(ops_seen[i] > 100);
    CHECK(lrem_found > 20);    /* LREM drawn with items it finds */
    CHECK(ltrim_cut > 20);     /* LTRIM inside a list */
    CHECK(linsert_found > 20); /* LINSERT at a pivot there */
    CHECK(moved > 20);         /* LMOVE and RPOPLPUSH of an item */
    CHECK(scan_parts > 3);     /* SSCAN, ZSCAN a part of a large set (few:
                                  other writes overwrite large sets soon) */
    /* The store holds what the model says. */
    lull_loop_advance(loop, 1000 * MS);
    int64_t now = 1000000000000ll + (int64_t)(lull_loop_now(loop) / MS);
    for (int i = 0; i < KEYS; i++) {
        char name[8];
        snprintf(name, sizeof name, "k%d", i);
        model_val s;
        CHECK(model_from_store(&v.k.db, name, now, &s));
        model_settle(&keys[i], now);
        CHECK(model_key_has(&keys[i], &s));
    }
    buf_free(&out);
    vkv_close(&v);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* One command through kv_exec (req: model_request's), its reply in out. */
static void exec_model_cmd(vkv *v, const model_cmd *c, buf *out) {
    static char req[4096];
    static resp_arg argv[400];
    size_t n = model_request(c, req), argc;
    const char *err = NULL;
    resp_limits lim = {.max_bulk = 1000, .max_args = 400};
    CHECK_EQ(resp_parse(&lim, req, n, argv, &argc, &err), (long)n);
    out->len = 0;
    v->k.cmd_now = 0;
    kv_exec(&v->k, NULL, argv, argc, out);
}

TEST(model_checks_a_scan_walk) {
    /* SSCAN and ZSCAN in the model: a walk of a set past SCAN_WHOLE
     * (128) a part at a time names every member, each reply only members
     * there; a reply naming one not there, or a small set not whole, is
     * refused; a member there all along and never named is missed. */
    lull_loop *loop = virtual_loop();
    vkv v;
    vkv_open(&v, loop, false);
    buf out = {0};
    int64_t now = 1000000000000ll;
    for (int z = 0; z < 2; z++) {
        static model_key k;
        static model_val must, seen;
        model_key_init(&k);
        model_cmd add = {
            .op = z ? OP_ZADD_N : OP_SADD_N, .key = "s", .cnt = 180};
        exec_model_cmd(&v, &add, &out);
        CHECK(model_apply(&k, &add, now, now, out.p, out.len));
        model_cmd scan = {.op = z ? OP_ZSCAN : OP_SSCAN, .key = "s", .cnt = 7};
        int steps = 0;
        do {
            exec_model_cmd(&v, &scan, &out);
            CHECK(model_apply(&k, &scan, now, now, out.p, out.len));
            if (steps++ == 0) model_scan_begin(&must, &seen, &k);
            CHECK(model_scan_reply(&seen, out.p, out.len, z, &scan.cursor));
        } while (scan.cursor && steps < 1000);
        CHECK(steps > 10);
        char missed[256];
        CHECK(!model_scan_missed(&must, &seen, missed));
        CHECK_EQ(must.items, 180);
        model_val none;
        memset(&none, 0, sizeof none);
        CHECK(model_scan_missed(&must, &none, missed));
        /* m999 is no member; m0's score is -3 */
        static const char *const bad[2] = {
            "*2\r\n$1\r\n5\r\n*1\r\n$4\r\nm999\r\n",
            "*2\r\n$1\r\n5\r\n*2\r\n$2\r\nm0\r\n$1\r\n3\r\n"};
        CHECK(!model_apply(&k, &scan, now, now, bad[z], strlen(bad[z])));
        /* A small set comes whole, cursor 0. */
        model_cmd small = add, del = {.op = OP_DEL, .key = "t"};
        snprintf(small.key, sizeof small.key, "t");
        small.cnt = 2;
        model_key_init(&k);
        exec_model_cmd(&v, &small, &out);
        CHECK(model_apply(&k, &small, now, now, out.p, out.len));
        snprintf(scan.key, sizeof scan.key, "t");
        scan.cursor = 0;
        static const char *const part[2] = {
            "*2\r\n$1\r\n5\r\n*1\r\n$2\r\nm0\r\n",
            "*2\r\n$1\r\n0\r\n*2\r\n$2\r\nm0\r\n$2\r\n-3\r\n"};
        CHECK(!model_apply(&k, &scan, now, now, part[z], strlen(part[z])));
        exec_model_cmd(&v, &scan, &out);
        CHECK(model_apply(&k, &scan, now, now, out.p, out.len));
        exec_model_cmd(&v, &del, &out);
        del.key[0] = 's';
        exec_model_cmd(&v, &del, &out);
    }
    buf_free(&out);
    vkv_close(&v);
    CHECK_EQ(lull_loop_free(loop), 0);
}

TEST(model_checks_hscan_and_what_keys_may_name) {
    /* HSCAN in the model: a hash of up to 128 fields comes whole, cursor
     * 0, whatever the COUNT, each field once with its value, in any
     * order; lull-kv's reply is one. */
    lull_loop *loop = virtual_loop();
    vkv v;
    vkv_open(&v, loop, false);
    buf out = {0};
    int64_t now = 1000000000000ll;
    static model_key k; /* over 1 MiB */
    model_key_init(&k);
    for (int i = 0; i < 3; i++) { /* f0 c, f1 cc, f2 ccc */
        model_cmd hs = {.op = OP_HSET, .key = "h"};
        snprintf(hs.field, sizeof hs.field, "f%d", i);
        snprintf(hs.val, sizeof hs.val, "%.*s", i + 1, "ccc");
        exec_model_cmd(&v, &hs, &out);
        CHECK(model_apply(&k, &hs, now, now, out.p, out.len));
    }
    model_cmd hscan = {.op = OP_HSCAN, .key = "h", .cnt = 1};
    exec_model_cmd(&v, &hscan, &out);
    CHECK(model_apply(&k, &hscan, now, now, out.p, out.len));
    static const char other[] =
        "*2\r\n$1\r\n0\r\n*6\r\n$2\r\nf2\r\n$3\r\nccc\r\n$2\r\nf0\r\n$1\r\n"
        "c\r\n$2\r\nf1\r\n$2\r\ncc\r\n";
    CHECK(model_apply(&k, &hscan, now, now, other, sizeof other - 1));
    static const char *const bad[] = {
        /* a wrong value */
        "*2\r\n$1\r\n0\r\n*6\r\n$2\r\nf2\r\n$3\r\nccc\r\n$2\r\nf0\r\n$1\r\n"
        "x\r\n$2\r\nf1\r\n$2\r\ncc\r\n",
        /* a field left out */
        "*2\r\n$1\r\n0\r\n*4\r\n$2\r\nf2\r\n$3\r\nccc\r\n$2\r\nf0\r\n$1\r\n"
        "c\r\n",
        /* a field twice */
        "*2\r\n$1\r\n0\r\n*6\r\n$2\r\nf0\r\n$1\r\nc\r\n$2\r\nf0\r\n$1\r\n"
        "c\r\n$2\r\nf1\r\n$2\r\ncc\r\n",
        /* whole, but a cursor to go on */
        "*2\r\n$1\r\n5\r\n*6\r\n$2\r\nf2\r\n$3\r\nccc\r\n$2\r\nf0\r\n$1\r\n"
        "c\r\n$2\r\nf1\r\n$2\r\ncc\r\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(!model_apply(&k, &hscan, now, now, bad[i], strlen(bad[i])));
    model_cmd set = {.op = OP_SET, .key = "h", .val = "1"};
    exec_model_cmd(&v, &set, &out);
    CHECK(model_apply(&k, &set, now, now, out.p, out.len));
    exec_model_cmd(&v, &hscan, &out);
    CHECK(model_apply(&k, &hscan, now, now, out.p, out.len)); /* WRONGTYPE */
    CHECK(strstr(out.p, "WRONGTYPE") == out.p + 1);
    buf_free(&out);
    vkv_close(&v);
    CHECK_EQ(lull_loop_free(loop), 0);

    /* model_exists: what KEYS and SCAN run in [lo, hi] may name (a key
     * there at some instant) and must (there at every one). A key with
     * PXAT 150 is there in ms 150, gone from 151. */
    static model_key e;
    model_key_init(&e);
    bool may, must;
    model_exists(&e, 0, 10, &may, &must);
    CHECK(!may && !must);
    model_cmd px = {.op = OP_SET_PXAT, .key = "a", .val = "1", .at = 150};
    CHECK(model_apply(&e, &px, 100, 100, "+OK\r\n", 5));
    model_exists(&e, 100, 150, &may, &must);
    CHECK(may && must);
    model_exists(&e, 100, 151, &may, &must);
    CHECK(may && !must);
    model_exists(&e, 150, 200, &may, &must);
    CHECK(may && !must);
    model_exists(&e, 151, 200, &may, &must);
    CHECK(!may && !must);
    /* PSETEX 50 sent in [100, 120]: it expires at some ms in [150,
     * 170], so in [160, 165] it may be there and need not be; it is
     * there throughout [120, 150], and gone for sure after 170. */
    static model_key u;
    model_key_init(&u);
    model_cmd psx = {.op = OP_PSETEX, .key = "b", .val = "1", .i1 = 50};
    CHECK(model_apply(&u, &psx, 100, 120, "+OK\r\n", 5));
    model_exists(&u, 160, 165, &may, &must);
    CHECK(may && !must);
    model_exists(&u, 120, 150, &may, &must);
    CHECK(may && must);
    model_exists(&u, 171, 180, &may, &must);
    CHECK(!may && !must);
}

TEST(model_keeps_what_an_uncertain_instant_allows) {
    /* A key that expires inside a command's window may be read as there
     * or gone; the reply decides, and the model keeps only that. */
    static model_key k, k2, k3, k4; /* over 1 MiB each */
    model_key_init(&k);
    model_cmd set = {.op = OP_SET_PXAT, .key = "a", .val = "1", .at = 150};
    CHECK(model_apply(&k, &set, 100, 100, "+OK\r\n", 5));
    model_cmd get = {.op = OP_GET, .key = "a"};
    k2 = k;
    CHECK(model_apply(&k, &get, 120, 200, "$1\r\n1\r\n", 7));
    CHECK(model_apply(&k2, &get, 120, 200, "$-1\r\n", 5));
    k3 = k2;
    CHECK(!model_apply(&k3, &get, 200, 300, "$1\r\n1\r\n", 7));
    model_cmd incr = {.op = OP_INCR, .key = "a"};
    model_key_init(&k4);
    CHECK(model_apply(&k4, &set, 100, 100, "+OK\r\n", 5));
    CHECK(model_apply(&k4, &incr, 120, 200, ":2\r\n", 4));
    CHECK_EQ(k4.n, 1);
    CHECK(!model_apply(&k4, &incr, 120, 200, ":9\r\n", 4));
    /* RENAME of a key expiring in its window: the reply says whether it
     * moved, and its expiry moves with it. */
    static model_key a, b, a2, b2;
    model_key_init(&a);
    model_key_init(&b);
    CHECK(model_apply(&a, &set, 100, 100, "+OK\r\n", 5));
    model_cmd ren = {.op = OP_RENAMENX, .key = "a", .key2 = "b"};
    model_key_copy(&a2, &a);
    model_key_copy(&b2, &b);
    CHECK(!model_apply2(&a2, &b2, &ren, 200, 300, ":1\r\n", 4));
    CHECK(model_apply2(&a2, &b2, &ren, 120, 200, "-ERR no such key\r\n", 18));
    CHECK(a2.c[0].type == MODEL_NONE && b2.c[0].type == MODEL_NONE);
    CHECK(model_apply2(&a, &b, &ren, 120, 200, ":1\r\n", 4));
    CHECK(a.n == 1 && a.c[0].type == MODEL_NONE);
    CHECK(b.n == 1 && b.c[0].type == MODEL_STRING && b.c[0].expire == 150);
    /* PSETEX in a window: its expiry is somewhere in [lo + ms, hi + ms];
     * a read inside that range may find the key or not, and narrows it;
     * the store's exact time is within what is left. */
    static model_key p1;
    static model_val st;
    model_key_init(&p1);
    model_cmd psx = {.op = OP_PSETEX, .key = "a", .val = "1", .i1 = 50};
    CHECK(model_apply(&p1, &psx, 100, 120, "+OK\r\n", 5));
    CHECK(p1.n == 1 && p1.c[0].expire == 150 && p1.c[0].expire_hi == 170);
    model_key_copy(&k3, &p1);
    CHECK(model_apply(&k3, &get, 160, 160, "$-1\r\n", 5));
    CHECK(k3.c[0].type == MODEL_NONE);
    CHECK(model_apply(&p1, &get, 160, 160, "$1\r\n1\r\n", 7));
    CHECK(p1.n == 1 && p1.c[0].expire == 160 && p1.c[0].expire_hi == 170);
    CHECK(!model_apply(&p1, &get, 171, 171, "$1\r\n1\r\n", 7));
    st = (model_val){.type = MODEL_STRING,
                     .expire = 165,
                     .expire_hi = 165,
                     .len = 1,
                     .v = "1"};
    CHECK(model_key_has(&p1, &st));
    st.expire = st.expire_hi = 155;
    CHECK(!model_key_has(&p1, &st));
    /* The reply lengths RESP says. */
    CHECK_EQ(model_reply_len("*2\r\n$1\r\na\r\n:3\r\n", 15), 15);
    CHECK_EQ(model_reply_len("*2\r\n$1\r\na\r\n:3\r", 14), 0);
    CHECK_EQ(model_reply_len("$-1\r\n+OK\r\n", 10), 5);
    CHECK_EQ(model_reply_len("?x\r\n", 4), -1);
}

TEST(model_checks_random_members_by_membership_and_count) {
    /* SPOP and SRANDMEMBER pick at random: the model takes the members
     * the reply names when they are the set's, as many as the count
     * allows (distinct, but for a negative count), and SPOP's go. */
    static model_key s, t; /* over 1 MiB each */
    model_key_init(&s);
    model_cmd sadd = {.op = OP_SADD, .key = "s", .field = "f0", .i2 = 0};
    CHECK(model_apply(&s, &sadd, 100, 100, ":2\r\n", 4)); /* f0, f2 */
    model_cmd pop = {.op = OP_SPOP, .key = "s", .i2 = -1};
    model_key_copy(&t, &s);
    CHECK(!model_apply(&t, &pop, 100, 100, "$2\r\nf9\r\n", 8));
    CHECK(!model_apply(&t, &pop, 100, 100, "$-1\r\n", 5));
    CHECK(model_apply(&t, &pop, 100, 100, "$2\r\nf2\r\n", 8));
    CHECK(t.n == 1 && t.c[0].type == MODEL_SET && t.c[0].items == 1);
    CHECK(model_apply(&t, &pop, 100, 100, "$2\r\nf0\r\n", 8));
    CHECK(t.c[0].type == MODEL_NONE); /* emptied: the key goes */
    /* A count of 3 (i1 + 2) on two members: both, once each. */
    model_cmd pop3 = {.op = OP_SPOP, .key = "s", .i1 = 1, .i2 = 0};
    model_key_copy(&t, &s);
    CHECK(!model_apply(&t, &pop3, 100, 100, "*1\r\n$2\r\nf0\r\n", 13));
    CHECK(!model_apply(&t, &pop3, 100, 100, "*2\r\n$2\r\nf0\r\n$2\r\nf0\r\n",
                       20));
    CHECK(
        model_apply(&t, &pop3, 100, 100, "*2\r\n$2\r\nf2\r\n$2\r\nf0\r\n", 20));
    CHECK(t.c[0].type == MODEL_NONE);
    /* SRANDMEMBER -2: repeats allowed, nothing goes; 2: distinct. */
    model_cmd rnd = {.op = OP_SRANDMEMBER, .key = "s", .i1 = -4, .i2 = 0};
    CHECK(
        model_apply(&s, &rnd, 100, 100, "*2\r\n$2\r\nf2\r\n$2\r\nf2\r\n", 20));
    CHECK(s.c[0].type == MODEL_SET && s.c[0].items == 2);
    rnd.i1 = 0;
    CHECK(
        !model_apply(&s, &rnd, 100, 100, "*2\r\n$2\r\nf2\r\n$2\r\nf2\r\n", 20));
    CHECK(
        model_apply(&s, &rnd, 100, 100, "*2\r\n$2\r\nf2\r\n$2\r\nf0\r\n", 20));
    /* SMOVE onto its own set: 1, and the member stays. */
    model_cmd mv = {.op = OP_SMOVE, .key = "s", .key2 = "s", .field = "f0"};
    CHECK(model_apply2(&s, &s, &mv, 100, 100, ":1\r\n", 4));
    CHECK(s.c[0].items == 2);
}

/* ------------------------------- pub/sub sets, resumed parses, SPOP "" */

TEST(spop_of_the_empty_member) {
    /* A set whose only member is "": SPOP takes it, logs SREM s "" and a
     * replica applying the log ends with no key. The record's argument
     * must not point at NULL (the sanitizer build stops on a NULL
     * memcpy source, even of 0 bytes). */
    kv p, r;
    kv_setup(&p, false);
    kv_setup(&r, true);
    buf out = {0};
    resp_arg sadd[] = {{"SADD", 4}, {"s", 1}, {"", 0}};
    kv_exec(&p, NULL, sadd, 3, &out);
    buf_put(&out, "", 1);
    CHECK(strcmp(out.p, ":1\r\n") == 0);
    CHECK(strcmp(exec_words(&p, &out, "SPOP s"), "$0\r\n\r\n") == 0);
    CHECK(strcmp(exec_words(&p, &out, "EXISTS s"), ":0\r\n") == 0);
    kv_exec(&p, NULL, sadd, 3, &out);
    CHECK(strcmp(exec_words(&p, &out, "SPOP s 5"), "*1\r\n$0\r\n\r\n") == 0);
    static const char rec[] = "*3\r\n$4\r\nSREM\r\n$1\r\ns\r\n$0\r\n\r\n";
    CHECK(p.log.end >= sizeof rec - 1);
    CHECK(memcmp(p.log.chunks[0].p + p.log.end - (sizeof rec - 1), rec,
                 sizeof rec - 1) == 0);
    resp_limits lim = {.max_bulk = 1000, .max_args = MAX_ARGS};
    resp_arg argv[MAX_ARGS];
    const char *err = NULL;
    size_t need;
    CHECK_EQ(kv_apply_stream(&r, &lim, argv, p.log.chunks[0].p,
                             (size_t)p.log.end, &err, &need),
             (long)p.log.end);
    CHECK_EQ(store_count(&r.db), 0);
    buf_free(&out);
    kv_free(&r);
    kv_free(&p);
}

/* Runs `cmd` with n channel names c0 ... c<n-1> on client cl. */
static void exec_names(kv *k, kv_client *cl, buf *out, const char *cmd,
                       size_t from, size_t n) {
    resp_arg *argv = malloc((n + 1) * sizeof *argv);
    char *names = malloc(n * 16);
    CHECK(argv && names);
    argv[0] = (resp_arg){cmd, strlen(cmd)};
    for (size_t i = 0; i < n; i++) {
        int len = snprintf(names + i * 16, 16, "c%zu", from + i);
        argv[i + 1] = (resp_arg){names + i * 16, (size_t)len};
    }
    out->len = 0;
    kv_exec(k, cl, argv, n + 1, out);
    free(names);
    free(argv);
}

/* The subscriptions looked at while one client subscribes to n channels,
 * subscribes to them again, unsubscribes from half by name and the rest
 * with no name. */
static uint64_t subscribe_steps(size_t n) {
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    exec_names(&k, &cl, &out, "SUBSCRIBE", 0, n);
    CHECK_EQ(k.channels.count, n);
    /* A lookup in the client's set is one step: its table has a bucket
     * per name at least, so its chains stay short. */
    CHECK_EQ(cl.subs[0].count, n);
    CHECK(cl.subs[0].nbuckets >= n);
    exec_names(&k, &cl, &out, "SUBSCRIBE", 0, n);
    exec_names(&k, &cl, &out, "UNSUBSCRIBE", 0, n / 2);
    CHECK_EQ(k.channels.count, n - n / 2);
    exec_names(&k, &cl, &out, "UNSUBSCRIBE", 0, 0);
    CHECK_EQ(k.channels.count, 0);
    CHECK(!kv_client_subscribed(&cl));
    uint64_t steps = k.pubsub_steps;
    close_kv_with_client(&k, &cl, &out);
    return steps;
}

TEST(pubsub_subscribe_cost_is_linear) {
    /* Twice the channels, twice the work (a walk of the client's list per
     * name made it four times); and a few steps per name, not n. */
    uint64_t a = subscribe_steps(1000), b = subscribe_steps(2000);
    printf("steps: %llu for 1,000 channels, %llu for 2,000\n",
           (unsigned long long)a, (unsigned long long)b);
    CHECK(a <= 10 * 1000);
    CHECK(b * 10 <= a * 25);
}

/* The replies to `line` from client cl, each (kind, name, count) of
 * `want` in turn (name NULL: a nil). */
static void check_sub_replies(kv *k, kv_client *cl, buf *out, const char *line,
                              const char *const *want, size_t n) {
    char exp[1024];
    size_t len = 0;
    for (size_t i = 0; i < n; i += 3) {
        const char *kind = want[i], *name = want[i + 1], *count = want[i + 2];
        len += (size_t)snprintf(exp + len, sizeof exp - len,
                                "*3\r\n$%zu\r\n%s\r\n", strlen(kind), kind);
        if (name)
            len += (size_t)snprintf(exp + len, sizeof exp - len,
                                    "$%zu\r\n%s\r\n", strlen(name), name);
        else
            len += (size_t)snprintf(exp + len, sizeof exp - len, "$-1\r\n");
        len += (size_t)snprintf(exp + len, sizeof exp - len, ":%s\r\n", count);
    }
    const char *got = exec_cl(k, cl, out, line);
    if (strcmp(got, exp) != 0)
        check_fail(__FILE__, __LINE__, "%s: got %s, want %s", line, got, exp);
}

#define SUB_REPLIES(line, ...)                                                 \
    do {                                                                       \
        static const char *const w_[] = {__VA_ARGS__};                         \
        check_sub_replies(&k, &cl, &out, line, w_, sizeof w_ / sizeof *w_);    \
    } while (0)

TEST(pubsub_replies_as_redis) {
    /* What redis-server 7.0 answered, reply for reply: a name subscribed
     * twice counts once, a name not subscribed is answered with the count
     * unchanged, a channel and a pattern of the same name are two
     * subscriptions, and UNSUBSCRIBE with no name answers every one, then
     * a nil. Redis answers those in its hash table's order (seeded at
     * random per process), lull-kv oldest first. */
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    SUB_REPLIES("SUBSCRIBE a b c d e f g h a", "subscribe", "a", "1",
                "subscribe", "b", "2", "subscribe", "c", "3", "subscribe", "d",
                "4", "subscribe", "e", "5", "subscribe", "f", "6", "subscribe",
                "g", "7", "subscribe", "h", "8", "subscribe", "a", "8");
    SUB_REPLIES("UNSUBSCRIBE x b", "unsubscribe", "x", "8", "unsubscribe", "b",
                "7");
    SUB_REPLIES("UNSUBSCRIBE", "unsubscribe", "a", "6", "unsubscribe", "c", "5",
                "unsubscribe", "d", "4", "unsubscribe", "e", "3", "unsubscribe",
                "f", "2", "unsubscribe", "g", "1", "unsubscribe", "h", "0");
    CHECK_EQ(k.channels.count, 0);
    SUB_REPLIES("UNSUBSCRIBE", "unsubscribe", NULL, "0");
    SUB_REPLIES("PSUBSCRIBE p1 p2 p3 p1", "psubscribe", "p1", "1", "psubscribe",
                "p2", "2", "psubscribe", "p3", "3", "psubscribe", "p1", "3");
    SUB_REPLIES("SUBSCRIBE z p1", "subscribe", "z", "4", "subscribe", "p1",
                "5");
    SUB_REPLIES("PUNSUBSCRIBE p9", "punsubscribe", "p9", "5");
    SUB_REPLIES("PUNSUBSCRIBE", "punsubscribe", "p1", "4", "punsubscribe", "p2",
                "3", "punsubscribe", "p3", "2");
    CHECK_EQ(k.patterns.count, 0);
    SUB_REPLIES("PUNSUBSCRIBE", "punsubscribe", NULL, "2");
    SUB_REPLIES("UNSUBSCRIBE", "unsubscribe", "z", "1", "unsubscribe", "p1",
                "0");
    CHECK(strcmp(exec_cl(&k, &cl, &out, "PING"), "+PONG\r\n") == 0);
    /* A client reset, then subscribed again: its set starts over. Two
     * subscribers of one channel: the channel stays while one is left. */
    SUB_REPLIES("SUBSCRIBE a", "subscribe", "a", "1");
    kv_client_reset(&k, &cl);
    CHECK_EQ(k.channels.count, 0);
    CHECK(!kv_client_subscribed(&cl));
    buf o2 = {0};
    kv_client other;
    kv_client_init(&other, NULL, &o2);
    SUB_REPLIES("SUBSCRIBE a b", "subscribe", "a", "1", "subscribe", "b", "2");
    exec_cl(&k, &other, &o2, "SUBSCRIBE a");
    SUB_REPLIES("UNSUBSCRIBE a", "unsubscribe", "a", "1");
    CHECK_EQ(k.channels.count, 2);
    buf o3 = {0};
    CHECK(strcmp(exec_words(&k, &o3, "PUBLISH a m"), ":1\r\n") == 0);
    buf_free(&o3);
    kv_client_reset(&k, &other);
    kv_client_reset(&k, &other); /* twice: nothing left to do */
    CHECK_EQ(k.channels.count, 1);
    kv_client_reset(&k, &cl);
    CHECK_EQ(k.channels.count, 0);
    buf_free(&o2);
    buf_free(&out);
    kv_free(&k);
}

TEST(resp_lengths_as_redis_reads_them) {
    /* Redis reads a length with string2ll: no leading zero, no '+', no
     * "-0". Each of these got "-ERR Protocol error: invalid (multi)bulk
     * length" from redis-server 7.0, which then closed the connection;
     * "*-5" and "*0" are empty commands there, "$0" an empty argument. */
    static const struct {
        const char *in;
        size_t n;
        const char *err; /* NULL: it parses, to `log` */
        const char *log;
    } cases[] = {
        {S("*1\r\n$04\r\nPING\r\n"), "Protocol error: invalid bulk length", ""},
        {S("*1\r\n$00\r\n\r\n"), "Protocol error: invalid bulk length", ""},
        {S("*1\r\n$-0\r\n"), "Protocol error: invalid bulk length", ""},
        {S("*1\r\n$+4\r\nPING\r\n"), "Protocol error: invalid bulk length", ""},
        {S("*1\r\n$000000000000000000004\r\nPING\r\n"),
         "Protocol error: invalid bulk length", ""},
        {S("*01\r\n$4\r\nPING\r\n"), "Protocol error: invalid multibulk length",
         ""},
        {S("*00\r\n"), "Protocol error: invalid multibulk length", ""},
        {S("*-0\r\n"), "Protocol error: invalid multibulk length", ""},
        {S("*-01\r\n"), "Protocol error: invalid multibulk length", ""},
        {S("*+1\r\n"), "Protocol error: invalid multibulk length", ""},
        {S("PING\r\n*02\r\n"), "Protocol error: invalid multibulk length",
         "PING;"},
        {S("*0\r\n*-5\r\n*1\r\n$0\r\n\r\n"), NULL, ";;;"},
        {S("*1\r\n$10\r\n0123456789\r\n"), NULL, "0123456789;"},
        {S("*10\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n"
           "$1\r\nf\r\n$1\r\ng\r\n$1\r\nh\r\n$1\r\ni\r\n$1\r\nj\r\n"),
         NULL, "a|b|c|d|e|f|g|h|i|j;"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        feed f;
        feed_all_ways(cases[i].in, cases[i].n, &f);
        bool ok =
            strcmp(f.log, cases[i].log) == 0 &&
            (cases[i].err ? f.err && strcmp(f.err, cases[i].err) == 0 : !f.err);
        if (!ok)
            check_fail(__FILE__, __LINE__, "case %zu: got \"%s\" (%s)", i,
                       f.log, f.err ? f.err : "no error");
    }
}

TEST(resp_lengths_past_64_bits_refused) {
    /* A count or length of 20 digits whose first 19 fit in 64 bits wrapped
     * (v * 10 checked only after): "-18446744073709551620" was an empty
     * command (-4), "$18446744073709551617" a bulk of 1 byte. Redis'
     * string2ll refuses both, and takes INT64_MIN. */
    static const struct {
        const char *in;
        size_t n;
        const char *err; /* NULL: it parses, to `log` */
        const char *log;
    } cases[] = {
        {S("*-20000000000000000000\r\n*1\r\n$4\r\nPING\r\n"),
         "Protocol error: invalid multibulk length", ""},
        {S("*-18446744073709551620\r\n"),
         "Protocol error: invalid multibulk length", ""},
        {S("*-9223372036854775809\r\n"),
         "Protocol error: invalid multibulk length", ""},
        {S("*-9223372036854775808\r\n*1\r\n$4\r\nPING\r\n"), NULL, ";PING;"},
        {S("*1\r\n$18446744073709551617\r\nx\r\n"),
         "Protocol error: invalid bulk length", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        feed f;
        feed_all_ways(cases[i].in, cases[i].n, &f);
        bool ok =
            strcmp(f.log, cases[i].log) == 0 &&
            (cases[i].err ? f.err && strcmp(f.err, cases[i].err) == 0 : !f.err);
        if (!ok)
            check_fail(__FILE__, __LINE__, "case %zu: got \"%s\" (%s)", i,
                       f.log, f.err ? f.err : "no error");
    }
}

TEST(resp_whole_command_path_agrees_at_its_bounds) {
    /* A command all in one chunk with short headers takes the parser's
     * quick path, one cut anywhere takes the resumable one: at the edges
     * of what the quick path takes (9 digits, a lone 0, the limits, a
     * wrong byte where a CRLF or '$' belongs) both give the same answer,
     * the one the general path gave before there was a quick one. */
    static const struct {
        const char *in;
        size_t n;
        const char *err; /* NULL: it parses, to `log` */
        const char *log;
    } cases[] = {
        {S("*1\r\n$0\r\n\r\n"), NULL, ";"},
        {S("*1\r\n$01\r\nx\r\n"), "Protocol error: invalid bulk length", ""},
        {S("*1\r\n$000000001\r\nx\r\n"), "Protocol error: invalid bulk length",
         ""},
        {S("*1\r\n$100000000\r\n"), "Protocol error: invalid bulk length", ""},
        {S("*1\r\n$1000000000\r\n"), "Protocol error: invalid bulk length", ""},
        {S("*123456789\r\n"), "Protocol error: too many arguments", ""},
        {S("*1234567890\r\n"), "Protocol error: too many arguments", ""},
        {S("*17\r\n"), "Protocol error: too many arguments", ""},
        {S("*1\r\n$3\r\nGETx\r\n"), "Protocol error: expected CRLF after bulk",
         ""},
        {S("*1\r\n$3\r\nGET\rx"), "Protocol error: expected CRLF after bulk",
         ""},
        {S("*2\r\n$3\r\nGET\r\n:1\r\n"),
         "Protocol error: expected '$', got ':'", ""},
        {S("*1\r\n$3\nGET\r\n"), "Protocol error: invalid bulk length", ""},
        {S("*1\n$3\r\nGET\r\n"), "Protocol error: invalid multibulk length",
         ""},
        {S("*1\r\n$3x\r\nGET\r\n"), "Protocol error: invalid bulk length", ""},
        {S("*1\r\n$\r\n"), "Protocol error: invalid bulk length", ""},
        {S("*1\r\n$3\r\nGET\r\n*1\r\n$4\r\nPI"), NULL, "GET;"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        feed f;
        feed_all_ways(cases[i].in, cases[i].n, &f);
        bool ok =
            strcmp(f.log, cases[i].log) == 0 &&
            (cases[i].err ? f.err && strcmp(f.err, cases[i].err) == 0 : !f.err);
        if (!ok)
            check_fail(__FILE__, __LINE__, "case %zu: got \"%s\" (%s)", i,
                       f.log, f.err ? f.err : "no error");
    }
}

TEST(resp_bad_header_line_in_redis_words) {
    /* Redis reads a header up to its CR and parses all before it as the
     * number: a bare LF, no digits, or a line longer than any number is
     * "invalid multibulk length" after '*', "invalid bulk length" after
     * '$' (what redis-server 7.0.15 answered; kv/kvdiff.py found lull-kv
     * saying "bad header line" and "header line too long"). */
    static const struct {
        const char *in;
        size_t n;
        const char *err;
    } cases[] = {
        {S("*1\n$4\r\nPING\r\n"), "Protocol error: invalid multibulk length"},
        {S("*1\r\n$4\nPING\r\n"), "Protocol error: invalid bulk length"},
        {S("*\n"), "Protocol error: invalid multibulk length"},
        {S("*1\r\n$\n"), "Protocol error: invalid bulk length"},
        {S("*111111111111111111111111111111111111111111111111\r\n"),
         "Protocol error: invalid multibulk length"},
        {S("*1\r\n$111111111111111111111111111111111111111111111\r\n"),
         "Protocol error: invalid bulk length"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        feed f;
        feed_all_ways(cases[i].in, cases[i].n, &f);
        if (!f.err || strcmp(f.err, cases[i].err) != 0 || f.log[0])
            check_fail(__FILE__, __LINE__, "case %zu: got \"%s\" (%s)", i,
                       f.log, f.err ? f.err : "no error");
    }
}

TEST(resp_malformed_in_redis_words) {
    /* What redis-server 7.0 answered each of these (then closed): a byte
     * where a bulk's '$' belongs is named in the error (a nested array,
     * an integer; a CR or LF as a space), and a count past INT_MAX is an
     * invalid one, not one over lull-kv's own bound ("expected '$'" and
     * "too many arguments" were all a client got). Before AUTH, a count
     * past the bound is refused as Redis refuses any count over 10. */
    static const struct {
        const char *in;
        size_t n;
        const char *err;
        bool noauth;
    } cases[] = {
        {S("*1\r\n*1\r\n$4\r\nPING\r\n"),
         "Protocol error: expected '$', got '*'", false},
        {S("*1\r\n:4\r\n"), "Protocol error: expected '$', got ':'", false},
        {S("*1\r\n\r4\r\nPING\r\n"), "Protocol error: expected '$', got ' '",
         false},
        {S("*1\r\n\n4\r\nPING\r\n"), "Protocol error: expected '$', got ' '",
         false},
        {S("*2\r\n$3\r\nGET\r\n!x\r\n"),
         "Protocol error: expected '$', got '!'", false},
        {S("*2147483648\r\n"), "Protocol error: invalid multibulk length",
         false},
        {S("*99999999999\r\n"), "Protocol error: invalid multibulk length",
         false},
        {S("*2147483647\r\n"), "Protocol error: too many arguments", false},
        {S("*2000000\r\n"), "Protocol error: unauthenticated multibulk length",
         true},
        {S("*2147483648\r\n"), "Protocol error: invalid multibulk length",
         true},
    };
    static const resp_limits na = {
        .max_bulk = 1 << 20, .max_args = MAX_ARGS, .noauth = true};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        feed_limits = cases[i].noauth ? &na : &limits;
        feed f;
        feed_all_ways(cases[i].in, cases[i].n, &f);
        if (!f.err || strcmp(f.err, cases[i].err) != 0)
            check_fail(__FILE__, __LINE__, "case %zu: got \"%s\" (%s)", i,
                       f.log, f.err ? f.err : "no error");
    }
    feed_limits = &limits;
}

/* Feeds n bytes of `in` in chunks of `chunk` bytes to a parse of its own
 * (max_args `max`), as a connection does: into a buffer of the bytes not
 * parsed yet, parsed again once it holds what the parser needs. The
 * bytes the parser looked at; the commands it returned in *cmds. */
static uint64_t feed_scanned(const char *in, size_t n, size_t chunk, size_t max,
                             size_t *cmds) {
    resp_limits lim = {.max_bulk = 1000, .max_args = max};
    resp_arg *argv = malloc(max * sizeof *argv);
    char *b = malloc(n);
    CHECK(argv && b);
    resp_state st = {0};
    size_t len = 0, need = 0;
    *cmds = 0;
    for (size_t at = 0; at < n; at += chunk) {
        size_t k = n - at < chunk ? n - at : chunk;
        memcpy(b + len, in + at, k);
        len += k;
        while (len >= need) {
            size_t argc;
            const char *err = NULL;
            long r =
                resp_parse_resume(&lim, &st, b, len, argv, &argc, &err, &need);
            CHECK(r != RESP_ERROR);
            if (r == RESP_INCOMPLETE) break;
            /* Every argument points into the buffer as it is now (the
             * PING after the command aside). */
            for (size_t i = 0; i < argc && argc > 1; i++)
                CHECK(argv[i].p >= b && argv[i].p + argv[i].len <= b + len &&
                      argv[i].len == 1 && argv[i].p[0] == "ab"[i % 2]);
            (*cmds)++;
            memmove(b, b + r, len - (size_t)r);
            len -= (size_t)r;
            need = 0;
        }
    }
    CHECK_EQ(len, 0);
    free(b);
    free(argv);
    return st.scanned;
}

/* A command of n arguments "a", "b", "a", ... and a PING after it. */
static char *many_args(size_t n, size_t *len) {
    char *p = malloc(32 + n * 7 + 16);
    CHECK(p);
    size_t w = (size_t)sprintf(p, "*%zu\r\n", n);
    for (size_t i = 0; i < n; i++)
        w += (size_t)sprintf(p + w, "$1\r\n%c\r\n", "ab"[i % 2]);
    w += (size_t)sprintf(p + w, "PING\r\n");
    *len = w;
    return p;
}

TEST(resp_many_arguments_parsed_in_linear_time) {
    /* A command of 20,000 arguments arriving a byte at a time, then in
     * 100-byte reads, then whole: each byte is looked at a few times, not
     * once per read (parsed from its start on every read, the byte at a
     * time feed would look at some 10^10 bytes). Twice the arguments,
     * twice the work. */
    size_t n, cmds;
    char *in = many_args(20000, &n);
    uint64_t one = feed_scanned(in, n, 1, 1 << 20, &cmds);
    CHECK_EQ(cmds, 2);
    uint64_t hundred = feed_scanned(in, n, 100, 1 << 20, &cmds);
    CHECK_EQ(cmds, 2);
    uint64_t whole = feed_scanned(in, n, n, 1 << 20, &cmds);
    CHECK_EQ(cmds, 2);
    printf("bytes looked at for %zu: %llu a byte at a time, %llu in 100-byte "
           "reads, %llu whole\n",
           n, (unsigned long long)one, (unsigned long long)hundred,
           (unsigned long long)whole);
    CHECK(one <= 4 * (uint64_t)n);
    CHECK(hundred <= 3 * (uint64_t)n);
    CHECK(whole <= 2 * (uint64_t)n);
    size_t n2;
    char *in2 = many_args(40000, &n2);
    uint64_t two = feed_scanned(in2, n2, 100, 1 << 20, &cmds);
    CHECK(two * 10 <= hundred * 25);
    /* An inline line a byte at a time: its bytes are searched once. */
    char line[4000];
    memset(line, 'x', sizeof line - 2);
    memcpy(line + sizeof line - 2, "\r\n", 2);
    resp_limits lim = {.max_bulk = 1000, .max_args = 4};
    resp_state st = {0};
    resp_arg argv[4];
    size_t argc, need;
    const char *err;
    for (size_t i = 1; i < sizeof line; i++)
        CHECK_EQ(
            resp_parse_resume(&lim, &st, line, i, argv, &argc, &err, &need),
            RESP_INCOMPLETE);
    CHECK_EQ(resp_parse_resume(&lim, &st, line, sizeof line, argv, &argc, &err,
                               &need),
             (long)sizeof line);
    CHECK_EQ(argc, 1);
    CHECK(st.scanned <= 3 * sizeof line);
    free(in2);
    free(in);
}

/* Feeds in[0, n) in chunks of `chunk` bytes as a connection does, into an
 * argv of 4 entries grown on RESP_GROW (to at most `most` arguments): the
 * commands it returned in *cmds, the room argv ended with. */
static size_t feed_growing(const char *in, size_t n, size_t chunk, size_t most,
                           size_t *cmds) {
    resp_limits lim = {.max_bulk = 1000, .max_args = 4, .grow_args = most};
    resp_arg *argv = malloc(lim.max_args * sizeof *argv);
    char *b = malloc(n);
    CHECK(argv && b);
    resp_state st = {0};
    size_t len = 0, need = 1, at = 0;
    *cmds = 0;
    for (;;) {
        if (len < need) { /* a read */
            if (at == n) break;
            size_t k = n - at < chunk ? n - at : chunk;
            memcpy(b + len, in + at, k);
            len += k;
            at += k;
            continue;
        }
        size_t argc;
        const char *err = NULL;
        long r = resp_parse_resume(&lim, &st, b, len, argv, &argc, &err, &need);
        CHECK(r != RESP_ERROR);
        if (r == RESP_GROW) {
            /* More room, twice at most, and only once the bytes of an
             * argument past the room are in. */
            CHECK(argc > lim.max_args && argc <= 2 * lim.max_args);
            CHECK(len > 7 * lim.max_args);
            argv = realloc(argv, argc * sizeof *argv);
            CHECK(argv != NULL);
            lim.max_args = argc;
            need = 0;
            continue;
        }
        if (r == RESP_INCOMPLETE) continue;
        for (size_t i = 0; i < argc && argc > 1; i++)
            CHECK(argv[i].p >= b && argv[i].p + argv[i].len <= b + len &&
                  argv[i].len == 1 && argv[i].p[0] == "ab"[i % 2]);
        (*cmds)++;
        memmove(b, b + r, len - (size_t)r);
        len -= (size_t)r;
        need = 0;
    }
    CHECK_EQ(len, 0);
    free(b);
    free(argv);
    return lim.max_args;
}

/* An argv that can grow (grow_args): a command of more arguments than it
 * holds is parsed as far as it reaches, then RESP_GROW asks for twice the
 * room, once the next argument's bytes arrive (a count alone asks for
 * nothing), however the command is cut; the count's bound is grow_args;
 * an inline line of more words asks for room too. */
TEST(resp_argv_grown_as_arguments_arrive) {
    size_t n, cmds;
    char *in = many_args(3000, &n);
    size_t chunks[] = {1, 7, 100, 4096, n};
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        CHECK_EQ(feed_growing(in, n, chunks[i], 3000, &cmds), 3000);
        CHECK_EQ(cmds, 2);
    }
    free(in);
    resp_limits lim = {.max_bulk = 1000, .max_args = 1, .grow_args = 3000};
    resp_arg argv[MAX_ARGS];
    size_t argc, need;
    const char *err = NULL;
    CHECK_EQ(resp_parse_need(&lim, S("*3000\r\n$1\r\na\r\n"), argv, &argc, &err,
                             &need),
             RESP_INCOMPLETE);
    CHECK_EQ(resp_parse(&lim, S("*3000\r\n$1\r\na\r\n$"), argv, &argc, &err),
             RESP_GROW);
    CHECK_EQ(argc, 2);
    CHECK_EQ(resp_parse(&lim, S("*3001\r\n"), argv, &argc, &err), RESP_ERROR);
    CHECK(strcmp(err, "Protocol error: too many arguments") == 0);
    /* Inline: 100 words into 4 entries, grown to 8, 16, ..., 128. */
    char line[400];
    size_t w = 0;
    for (int i = 0; i < 100; i++)
        w += (size_t)sprintf(line + w, "%s%c", i ? " " : "", "ab"[i % 2]);
    w += (size_t)sprintf(line + w, "\r\n");
    resp_limits il = {.max_bulk = 1000, .max_args = 4, .grow_args = 1000};
    resp_arg *av = malloc(4 * sizeof *av);
    long r;
    int grows = 0;
    while ((r = resp_parse(&il, line, w, av, &argc, &err)) == RESP_GROW) {
        CHECK_EQ(argc, 2 * il.max_args);
        av = realloc(av, argc * sizeof *av);
        CHECK(av != NULL);
        il.max_args = argc;
        grows++;
    }
    CHECK_EQ(r, (long)w);
    CHECK_EQ(argc, 100);
    CHECK_EQ(grows, 5);
    CHECK(av[99].len == 1 && av[99].p[0] == 'b');
    il.grow_args = 50; /* more words than the bound */
    il.max_args = 4;
    while ((r = resp_parse(&il, line, w, av, &argc, &err)) == RESP_GROW) {
        CHECK(argc <= 50);
        il.max_args = argc; /* av holds 128 already */
    }
    CHECK_EQ(r, RESP_ERROR);
    CHECK(strcmp(err, "Protocol error: too many arguments") == 0);
    free(av);
}

TEST(resp_resume_after_errors_and_misuse) {
    resp_state st = {0};
    resp_arg argv[MAX_ARGS];
    size_t argc, need;
    const char *err = NULL;
    /* Two arguments in, then a bad header: an error, and the state is a
     * new command's again. */
    static const char bad[] = "*3\r\n$1\r\na\r\n$1\r\nb\r\n$x\r\n";
    CHECK_EQ(resp_parse_resume(&limits, &st, bad, 20, argv, &argc, &err, &need),
             RESP_INCOMPLETE);
    CHECK_EQ(st.got, 2);
    CHECK_EQ(resp_parse_resume(&limits, &st, bad, sizeof bad - 1, argv, &argc,
                               &err, &need),
             RESP_ERROR);
    CHECK(strcmp(err, "Protocol error: invalid bulk length") == 0);
    CHECK(st.nargs == 0 && st.got == 0 && st.pos == 0);
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    CHECK_EQ(resp_parse_resume(&limits, &st, ping, sizeof ping - 1, argv, &argc,
                               &err, &need),
             (long)sizeof ping - 1);
    CHECK(argc == 1 && argv[0].len == 4 && argv[0].p == ping + 8);
    /* A caller that gives fewer bytes than were parsed (not the same
     * command) gets a parse from the start, not a read past its bytes. */
    CHECK_EQ(resp_parse_resume(&limits, &st, bad, 20, argv, &argc, &err, &need),
             RESP_INCOMPLETE);
    static const char inl[] = "PING\r\n";
    CHECK_EQ(resp_parse_resume(&limits, &st, inl, sizeof inl - 1, argv, &argc,
                               &err, &need),
             (long)sizeof inl - 1);
    CHECK(argc == 1 && argv[0].len == 4);
    /* An inline line cut, then the rest. */
    CHECK_EQ(
        resp_parse_resume(&limits, &st, "ECHO h", 6, argv, &argc, &err, &need),
        RESP_INCOMPLETE);
    CHECK_EQ(resp_parse_resume(&limits, &st, "ECHO hi\r\n", 9, argv, &argc,
                               &err, &need),
             9);
    CHECK(argc == 2 && argv[1].len == 2 && memcmp(argv[1].p, "hi", 2) == 0);
    /* Too many arguments: refused at the count, before any argument. */
    CHECK_EQ(
        resp_parse_resume(&limits, &st, "*17\r\n", 5, argv, &argc, &err, &need),
        RESP_ERROR);
    CHECK(st.nargs == 0);
}

TEST(expiry_a_key_lives_its_whole_ttl_seen_from_the_client) {
    /* A client that starts timing before its SET ... PX 20 finds the key
     * there for the whole 20 ms, whatever fraction of a millisecond the
     * SET ran at: the clock counts whole ms, and a key expires only once
     * the clock is past its time (Redis: now > when), not when it reads
     * it (which let a key set at x.8 ms vanish 19.2 ms later). */
    static const uint64_t frac[] = {0, 1, 200000, 800000, 999999};
    for (size_t i = 0; i < sizeof frac / sizeof frac[0]; i++) {
        lull_loop *loop = virtual_loop();
        vkv v;
        vkv_open(&v, loop, false);
        lull_loop_advance(loop, 7 * MS + frac[i]);
        uint64_t t0 = lull_loop_now(loop); /* the client's start */
        CHECK(strcmp(vexec(&v, "SET a 1 PX 20"), "+OK\r\n") == 0);
        lull_loop_advance(loop, t0 + 20 * MS - 1 - lull_loop_now(loop));
        CHECK_EQ(v.x.fired, 0);
        CHECK(strcmp(vexec(&v, "GET a"), "$1\r\n1\r\n") == 0);
        const char *ttl = vexec(&v, "PTTL a");
        CHECK(strcmp(ttl, ":0\r\n") == 0 || strcmp(ttl, ":1\r\n") == 0);
        /* Gone within a millisecond more (the clock's grain), by the
         * timer, with its DEL logged. */
        lull_loop_advance(loop, 1 * MS + 1);
        CHECK_EQ(v.x.fired, 1);
        CHECK_EQ(store_count(&v.k.db), 0);
        CHECK(strcmp(vexec(&v, "GET a"), "$-1\r\n") == 0);
        vkv_close(&v);
        CHECK_EQ(lull_loop_free(loop), 0);
    }
    /* The reference model reads time the same way: alive at its expiry
     * ms, gone one ms later. */
    static model_key k, k2; /* over 1 MiB each */
    model_key_init(&k);
    model_cmd set = {.op = OP_SET_PXAT, .key = "a", .val = "1", .at = 150};
    model_cmd get = {.op = OP_GET, .key = "a"};
    CHECK(model_apply(&k, &set, 100, 100, "+OK\r\n", 5));
    k2 = k;
    CHECK(model_apply(&k, &get, 150, 150, "$1\r\n1\r\n", 7));
    CHECK(!model_apply(&k2, &get, 150, 150, "$-1\r\n", 5));
    CHECK(model_apply(&k2, &get, 151, 151, "$-1\r\n", 5));
}

/* ------------------------------------------------------ AUTH and CONFIG */

/* kv.auth for the tests: counts its calls, and answers as a server whose
 * password is "pw". */
static int auth_calls;
static void test_auth(kv_client *cl, const resp_arg *a, size_t argc, buf *out) {
    (void)cl;
    auth_calls++;
    buf_str(out, resp_is(&a[argc - 1], "pw") ? "+OK\r\n" : "-WRONGPASS x\r\n");
}

/* A clock that moves a millisecond each time it is read. */
static int64_t ticking_now;
static int64_t ticking_clock(kv *k) {
    (void)k;
    return ticking_now++;
}

TEST(exec_sees_one_time_for_all_its_commands) {
    /* Redis 7.0 reads the clock once for a whole EXEC (call()'s
     * fixed_time_expire): a key alive when EXEC starts is alive for every
     * command in it, so MULTI EXISTS k GET k EXEC cannot answer 1 and
     * nil. lull-kv read the clock again for each queued command. */
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    k.clock = ticking_clock;
    ticking_now = 1000000;
    CHECK_REPLY(exec_cl(&k, &cl, &out, "SET k v PX 2"), "+OK\r\n");
    exec_cl(&k, &cl, &out, "MULTI");
    for (int i = 0; i < 4; i++)
        CHECK_REPLY(exec_cl(&k, &cl, &out, "EXISTS k"), "+QUEUED\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "GET k"), "+QUEUED\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "EXEC"),
                "*5\r\n:1\r\n:1\r\n:1\r\n:1\r\n$1\r\nv\r\n");
    /* DBSIZE, KEYS and SCAN delete the due keys first: at EXEC's time */
    CHECK_REPLY(exec_cl(&k, &cl, &out, "SET k v PX 2"), "+OK\r\n");
    exec_cl(&k, &cl, &out, "MULTI");
    exec_cl(&k, &cl, &out, "DBSIZE");
    exec_cl(&k, &cl, &out, "KEYS *");
    exec_cl(&k, &cl, &out, "SCAN 0");
    exec_cl(&k, &cl, &out, "EXISTS k");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "EXEC"),
                "*4\r\n:1\r\n*1\r\n$1\r\nk\r\n"
                "*2\r\n$1\r\n0\r\n*1\r\n$1\r\nk\r\n:1\r\n");
    /* and a command after it reads the clock again: the key is gone */
    ticking_now++;
    CHECK_REPLY(exec_cl(&k, &cl, &out, "EXISTS k"), ":0\r\n");
    close_kv_with_client(&k, &cl, &out);
}

TEST(auth_inside_multi_is_queued_as_redis_does) {
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    k.auth = test_auth;
    auth_calls = 0;
    /* Queued, and run by EXEC in its place (redis-server 7: AUTH is not
     * one of the commands MULTI refuses or runs at once). */
    exec_cl(&k, &cl, &out, "MULTI");
    CHECK(strcmp(exec_cl(&k, &cl, &out, "AUTH nope"), "+QUEUED\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "PING"), "+QUEUED\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "AUTH default pw"), "+QUEUED\r\n") ==
          0);
    CHECK_EQ(auth_calls, 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "EXEC"),
                 "*3\r\n-WRONGPASS x\r\n+PONG\r\n+OK\r\n") == 0);
    CHECK_EQ(auth_calls, 2);
    /* Too few arguments: refused while queueing, spoiling the
     * transaction; too many: queued, and a syntax error when it runs. */
    exec_cl(&k, &cl, &out, "MULTI");
    CHECK(strcmp(exec_cl(&k, &cl, &out, "AUTH"),
                 "-ERR wrong number of arguments for 'auth' command\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "EXEC"),
                 "-EXECABORT Transaction discarded because of previous "
                 "errors.\r\n") == 0);
    k.auth = NULL; /* no password set: the fallback answers */
    exec_cl(&k, &cl, &out, "MULTI");
    exec_cl(&k, &cl, &out, "AUTH a b c");
    exec_cl(&k, &cl, &out, "AUTH x");
    CHECK(strcmp(exec_cl(&k, &cl, &out, "EXEC"),
                 "*2\r\n-ERR syntax error\r\n-ERR AUTH <password> called "
                 "without any password configured for the default user. "
                 "Are you sure your configuration is correct?\r\n") == 0);
    /* DISCARD drops a queued AUTH unrun. */
    k.auth = test_auth;
    exec_cl(&k, &cl, &out, "MULTI");
    exec_cl(&k, &cl, &out, "AUTH pw");
    CHECK(strcmp(exec_cl(&k, &cl, &out, "DISCARD"), "+OK\r\n") == 0);
    CHECK_EQ(auth_calls, 2);
    /* A subscribed client is refused AUTH (RESP2), as any command but the
     * pub/sub ones. */
    exec_cl(&k, &cl, &out, "SUBSCRIBE c");
    CHECK(strcmp(exec_cl(&k, &cl, &out, "AUTH pw"),
                 "-ERR Can't execute 'auth': only (P|S)SUBSCRIBE / "
                 "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this "
                 "context\r\n") == 0);
    CHECK_EQ(auth_calls, 2);
    close_kv_with_client(&k, &cl, &out);
}

/* HELLO, which clients such as Lettuce send first: redis-server 7.0.15's
 * answers for a RESP2-only server (HELLO 3 refused as RESP2 servers must
 * refuse it), its options (AUTH through kv.auth, SETNAME kept), and its
 * place in MULTI (queued) and while subscribed (refused). */
static const char hello_map[] =
    "*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.0.0\r\n"
    "$5\r\nproto\r\n:2\r\n$2\r\nid\r\n:9\r\n$4\r\nmode\r\n$10\r\nstandalone"
    "\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n";

TEST(hello_as_a_resp2_redis) {
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    cl.id = 9;
    k.auth = test_auth;
    auth_calls = 0;
    CHECK_REPLY(exec_cl(&k, &cl, &out, "HELLO"), hello_map);
    CHECK_REPLY(exec_cl(&k, &cl, &out, "hello 2"), hello_map);
    static const char *const refused[][2] = {
        {"HELLO 3", "-NOPROTO unsupported protocol version\r\n"},
        {"HELLO 1", "-NOPROTO unsupported protocol version\r\n"},
        {"HELLO -2", "-NOPROTO unsupported protocol version\r\n"},
        {"HELLO abc",
         "-ERR Protocol version is not an integer or out of range\r\n"},
        {"HELLO 2 FOO", "-ERR Syntax error in HELLO option 'FOO'\r\n"},
        {"HELLO 2 AUTH default",
         "-ERR Syntax error in HELLO option 'AUTH'\r\n"},
        {"HELLO 2 SETNAME", "-ERR Syntax error in HELLO option 'SETNAME'\r\n"},
        {"HELLO 3 FOO", "-NOPROTO unsupported protocol version\r\n"},
        {"HELLO 2 AUTH default wrong SETNAME n", "-WRONGPASS x\r\n"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        CHECK_REPLY(exec_cl(&k, &cl, &out, refused[i][0]), refused[i][1]);
    CHECK_EQ(auth_calls, 1);
    CHECK(cl.name == NULL); /* the failed AUTH set no name */
    CHECK_REPLY(exec_cl(&k, &cl, &out, "HELLO 2 AUTH default pw SETNAME n"),
                hello_map);
    CHECK_EQ(auth_calls, 2);
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT GETNAME"), "$1\r\nn\r\n");
    resp_arg a[4] = {{"HELLO", 5}, {"2", 1}, {"setname", 7}, {"a b", 3}};
    CHECK(strncmp(exec_args(&k, &cl, &out, a, 4), "-ERR Client names", 17) ==
          0);
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT GETNAME"), "$1\r\nn\r\n");
    /* Not authenticated (the owner says so): HELLO without AUTH is
     * refused in Redis' words, after its version and option checks. */
    cl.noauth = true;
    CHECK_REPLY(exec_cl(&k, &cl, &out, "HELLO 2"),
                "-NOAUTH HELLO must be called with the client already "
                "authenticated, otherwise the HELLO AUTH <user> <pass> option "
                "can be used to authenticate the client and select the RESP "
                "protocol version at the same time\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "HELLO 1"),
                "-NOPROTO unsupported protocol version\r\n");
    cl.noauth = false;
    /* Queued in MULTI; refused while subscribed. */
    exec_cl(&k, &cl, &out, "MULTI");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "HELLO 2"), "+QUEUED\r\n");
    out.len = 0;
    exec_rc(&k, &cl, &out, "EXEC");
    CHECK(strncmp(out.p, "*1\r\n*14\r\n", 9) == 0);
    exec_cl(&k, &cl, &out, "SUBSCRIBE c");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "HELLO 2"),
                "-ERR Can't execute 'hello': only (P|S)SUBSCRIBE / "
                "(P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this "
                "context\r\n");
    close_kv_with_client(&k, &cl, &out);
    /* A replica says so. */
    kv r;
    kv_setup(&r, true);
    out = (buf){0};
    CHECK(strstr(exec_cl(&r, NULL, &out, "HELLO"),
                 "$4\r\nrole\r\n$7\r\nreplica\r\n") != NULL);
    buf_free(&out);
    kv_free(&r);
}

/* kv.auth as the owner's: the password signs the client in. */
static void signing_auth(kv_client *cl, const resp_arg *a, size_t argc,
                         buf *out) {
    test_auth(cl, a, argc, out);
    if (resp_is(&a[argc - 1], "pw")) cl->noauth = false;
}

/* HELLO with a name Redis refuses, beside a right password: refused
 * before the password is tried (redis-server 7.0.15 checks each option in
 * its order, and a name before AUTH stops it there), so the client that
 * was told -ERR is not signed in. It was: AUTH ran first, then the name's
 * error went out, and the next command ran as authenticated. */
TEST(hello_with_a_bad_name_signs_no_one_in) {
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    cl.id = 9; /* hello_map's */
    k.auth = signing_auth;
    k.requirepass = true;
    cl.noauth = true;
    auth_calls = 0;
    resp_arg a[7] = {{"HELLO", 5}, {"2", 1},       {"SETNAME", 7}, {"a b", 3},
                     {"AUTH", 4},  {"default", 7}, {"pw", 2}};
    CHECK_REPLY(exec_args(&k, &cl, &out, a, 7),
                "-ERR Client names cannot contain spaces, newlines or special "
                "characters.\r\n");
    CHECK_EQ(auth_calls, 0);
    CHECK(cl.noauth);
    a[3] = (resp_arg){"a\nb", 3};
    CHECK_REPLY(exec_args(&k, &cl, &out, a, 7),
                "-ERR Client names cannot contain spaces, newlines or special "
                "characters.\r\n");
    CHECK(cl.noauth);
    CHECK(cl.name == NULL);
    a[3] = (resp_arg){"ok", 2};
    CHECK_REPLY(exec_args(&k, &cl, &out, a, 7), hello_map);
    CHECK_EQ(auth_calls, 1);
    CHECK(!cl.noauth);
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT GETNAME"), "$2\r\nok\r\n");
    close_kv_with_client(&k, &cl, &out);
}

/* RESET, which the subscribed-mode error names as allowed: as
 * redis-server 7.0.15, it runs at once inside MULTI (discarding it), is
 * allowed while subscribed, drops subscriptions and the name, and signs
 * the client out when a password is set. */
TEST(reset_as_redis) {
    kv k;
    buf out, pout = {0};
    kv_client cl, pub;
    open_kv_with_client(&k, false, &cl, &out);
    kv_client_init(&pub, NULL, &pout);
    exec_cl(&k, &cl, &out, "CLIENT SETNAME n");
    exec_cl(&k, &cl, &out, "MULTI");
    exec_cl(&k, &cl, &out, "SET a 1");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "RESET"), "+RESET\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "EXEC"), "-ERR EXEC without MULTI\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "GET a"), "$-1\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "CLIENT GETNAME"), "$-1\r\n");
    exec_cl(&k, &cl, &out, "SUBSCRIBE c d");
    exec_cl(&k, &cl, &out, "PSUBSCRIBE p*");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "RESET"), "+RESET\r\n");
    CHECK(!kv_client_subscribed(&cl));
    CHECK_REPLY(exec_cl(&k, &pub, &pout, "PUBLISH c x"), ":0\r\n");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "PING"), "+PONG\r\n");
    /* Subscribing again after it works (the sets were emptied, not
     * broken). */
    exec_cl(&k, &cl, &out, "SUBSCRIBE c");
    CHECK_REPLY(exec_cl(&k, &pub, &pout, "PUBLISH c x"), ":1\r\n");
    exec_cl(&k, &cl, &out, "RESET");
    CHECK_REPLY(exec_cl(&k, &cl, &out, "RESET x"),
                "-ERR wrong number of arguments for 'reset' command\r\n");
    /* A password set: RESET signs the client out. */
    CHECK(!cl.noauth);
    k.requirepass = true;
    exec_cl(&k, &cl, &out, "RESET");
    CHECK(cl.noauth);
    kv_client_reset(&k, &pub);
    buf_free(&pout);
    close_kv_with_client(&k, &cl, &out);
}

TEST(config_get_names_patterns_and_several_as_redis) {
    kv k;
    kv_setup(&k, false);
    static const char *const table[][2] = {
        {"port", "6380"}, {"tls-port", "0"}, {"requirepass", "p w"}};
    k.config = table;
    k.nconfig = 3;
    buf out = {0};
    /* redis-server 7.0's answers: a name ignoring case, under the
     * client's spelling; a pattern under the parameter's own name; each
     * parameter once. */
    CHECK(strcmp(exec_cl(&k, NULL, &out, "CONFIG GET PORT"),
                 "*2\r\n$4\r\nPORT\r\n$4\r\n6380\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, NULL, &out, "CONFIG GET P*RT"),
                 "*2\r\n$4\r\nport\r\n$4\r\n6380\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, NULL, &out, "CONFIG GET PORT p*rt port"),
                 "*2\r\n$4\r\nPORT\r\n$4\r\n6380\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, NULL, &out, "CONFIG GET p*rt PORT"),
                 "*2\r\n$4\r\nport\r\n$4\r\n6380\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, NULL, &out, "CONFIG GET *port"),
                 "*4\r\n$4\r\nport\r\n$4\r\n6380\r\n$8\r\ntls-port\r\n$1\r\n0"
                 "\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, NULL, &out, "CONFIG GET requirepass save nosuch"),
                 "*4\r\n$11\r\nrequirepass\r\n$3\r\np w\r\n$4\r\nsave\r\n$0\r\n"
                 "\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, NULL, &out, "CONFIG GET port*"),
                 "*2\r\n$4\r\nport\r\n$4\r\n6380\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, NULL, &out, "CONFIG GET nosuch"), "*0\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, NULL, &out, "CONFIG GET por"), "*0\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, NULL, &out, "CONFIG GET *"), "") != 0);
    CHECK(strncmp(out.p, "*10\r\n", 5) == 0); /* save, appendonly, 3 */
    CHECK(strcmp(exec_cl(&k, NULL, &out, "CONFIG GET"),
                 "-ERR wrong number of arguments for 'config|get' "
                 "command\r\n") == 0);
    CHECK(strcmp(exec_cl(&k, NULL, &out, "CONFIG"),
                 "-ERR wrong number of arguments for 'config' command\r\n") ==
          0);
    CHECK(strcmp(exec_cl(&k, NULL, &out, "CONFIG SET port 1"),
                 "-ERR CONFIG: only CONFIG GET is supported\r\n") == 0);
    /* A name holding a NUL matches nothing. */
    resp_arg bin[] = {{"CONFIG", 6}, {"GET", 3}, {"port\0x", 6}};
    CHECK(strcmp(exec_args(&k, NULL, &out, bin, 3), "*0\r\n") == 0);
    buf_free(&out);
    kv_free(&k);
}

/* Each request's reply as redis-server 7.0 gives it, in order, on one
 * client: for the cases below, which check an argument. */
static void replies_as_redis(const char *const (*cases)[2], size_t n) {
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    for (size_t i = 0; i < n; i++) {
        const char *got = exec_cl(&k, &cl, &out, cases[i][0]);
        if (strcmp(got, cases[i][1]) != 0)
            check_fail(__FILE__, __LINE__, "%s: %s", cases[i][0], got);
    }
    close_kv_with_client(&k, &cl, &out);
}

TEST(lindex_looks_up_the_key_before_the_index_as_redis) {
    /* A missing key is nil and another type WRONGTYPE, whatever the
     * index; only a list's index is read. */
    static const char *const cases[][2] = {
        {"LINDEX nokey x", "$-1\r\n"},
        {"LINDEX nokey 9223372036854775808", "$-1\r\n"},
        {"SET s x", "+OK\r\n"},
        {"LINDEX s x", "-WRONGTYPE Operation against a key holding the wrong "
                       "kind of value\r\n"},
        {"LPUSH l a", ":1\r\n"},
        {"LINDEX l x", "-ERR value is not an integer or out of range\r\n"},
        {"LINDEX l -1", "$1\r\na\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
}

TEST(zrange_options_checked_first_as_redis) {
    /* Redis reads the options before the range, and REV only once. */
    static const char *const cases[][2] = {
        {"ZADD zz 1 a 2 b", ":2\r\n"},
        {"ZRANGE zz 0 -1 REV REV", "-ERR syntax error\r\n"},
        {"ZRANGE zz x -1 REV rev", "-ERR syntax error\r\n"},
        {"ZRANGE zz 0 -1 WITHSCORES withscores REV",
         "*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\na\r\n$1\r\n1\r\n"},
        {"SET s x", "+OK\r\n"},
        {"ZRANGE s x -1 REV REV", "-ERR syntax error\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
}

TEST(zrank_zrevrange_zcount_as_redis) {
    /* Replies as redis-server 7.0.15 gave them: ranks from the skip
     * list's spans, ZCOUNT's bounds read as Redis reads them (strtod up
     * to the first NUL: "" is 0, leading space taken; "(" exclusive) and
     * before the key. */
    static const char *const cases[][2] = {
        {"ZADD z 1 a 2 b 2 c 3 d inf e -inf f", ":6\r\n"},
        {"ZRANK z c", ":3\r\n"},
        {"ZRANK z nosuch", "$-1\r\n"},
        {"ZRANK nokey a", "$-1\r\n"},
        {"ZREVRANK z c", ":2\r\n"},
        {"ZREVRANK z f", ":5\r\n"},
        {"ZRANK z f", ":0\r\n"},
        {"ZREVRANK z e", ":0\r\n"},
        {"ZRANK z a WITHSCORE",
         "-ERR wrong number of arguments for 'zrank' command\r\n"},
        {"SET s x", "+OK\r\n"},
        {"ZRANK s a", "-WRONGTYPE Operation against a key holding the wrong "
                      "kind of value\r\n"},
        {"ZREVRANK s a", "-WRONGTYPE Operation against a key holding the "
                         "wrong kind of value\r\n"},
        {"ZREVRANGE z 0 -1", "*6\r\n$1\r\ne\r\n$1\r\nd\r\n$1\r\nc\r\n$1\r\nb\r"
                             "\n$1\r\na\r\n$1\r\nf\r\n"},
        {"ZREVRANGE z 0 1 withscores WITHSCORES",
         "*4\r\n$1\r\ne\r\n$3\r\ninf\r\n$1\r\nd\r\n$1\r\n3\r\n"},
        {"ZREVRANGE z 0 1 REV", "-ERR syntax error\r\n"},
        {"ZREVRANGE z 0 1 BYSCORE", "-ERR syntax error\r\n"},
        {"ZREVRANGE z 0 1 LIMIT 0 1",
         "-ERR syntax error, LIMIT is only supported in combination with "
         "either BYSCORE or BYLEX\r\n"},
        {"ZREVRANGE z 0 1 LIMIT x 1",
         "-ERR value is not an integer or out of range\r\n"},
        {"ZREVRANGE z 0 1 LIMIT 0", "-ERR syntax error\r\n"},
        {"ZREVRANGE nokey x 1",
         "-ERR value is not an integer or out of range\r\n"},
        {"ZREVRANGE s 0 1", "-WRONGTYPE Operation against a key holding the "
                            "wrong kind of value\r\n"},
        {"ZREVRANGE s x 1 FOO", "-ERR syntax error\r\n"},
        {"ZREVRANGE z 5 9", "*1\r\n$1\r\nf\r\n"},
        {"ZREVRANGE z -2 -1", "*2\r\n$1\r\na\r\n$1\r\nf\r\n"},
        {"ZRANGE z 0 1 LIMIT 1 -1", "*2\r\n$1\r\nf\r\n$1\r\na\r\n"},
        {"ZRANGE z x y LIMIT 0 1",
         "-ERR syntax error, LIMIT is only supported in combination with "
         "either BYSCORE or BYLEX\r\n"},
        {"ZCOUNT z -inf +inf", ":6\r\n"},
        {"ZCOUNT z 2 2", ":2\r\n"},
        {"ZCOUNT z (2 3", ":1\r\n"},
        {"ZCOUNT z (2 (3", ":0\r\n"},
        {"ZCOUNT z 3 2", ":0\r\n"},
        {"ZCOUNT z (1 (1", ":0\r\n"},
        {"ZCOUNT z x 1", "-ERR min or max is not a float\r\n"},
        {"ZCOUNT z 1 x", "-ERR min or max is not a float\r\n"},
        {"ZCOUNT z nan 1", "-ERR min or max is not a float\r\n"},
        {"ZCOUNT z ((1 3", "-ERR min or max is not a float\r\n"},
        {"ZCOUNT z 1e400 inf", ":1\r\n"},
        {"ZCOUNT z -inf -inf", ":1\r\n"},
        {"ZCOUNT z 0x10 20", ":0\r\n"},
        {"ZCOUNT z +inf -inf", ":0\r\n"},
        {"ZCOUNT nokey x 1", "-ERR min or max is not a float\r\n"},
        {"ZCOUNT nokey 0 1", ":0\r\n"},
        {"ZCOUNT s 0 1", "-WRONGTYPE Operation against a key holding the "
                         "wrong kind of value\r\n"},
        {"ZCOUNT s x 1", "-ERR min or max is not a float\r\n"},
        {"ZCOUNT z 1 2 3",
         "-ERR wrong number of arguments for 'zcount' command\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
}

/* Runs one multibulk request (any bytes) on k for cl, as exec_cl does. */
static const char *exec_raw(kv *k, kv_client *cl, buf *out, const char *req,
                            size_t len) {
    resp_arg argv[MAX_ARGS];
    size_t argc = 0, need = 0;
    const char *err = NULL;
    resp_state st = {0};
    CHECK(resp_parse_resume(&limits, &st, req, len, argv, &argc, &err, &need) ==
          (long)len);
    out->len = 0;
    kv_exec(k, cl, argv, argc, out);
    buf_put(out, "", 1);
    out->len--;
    return out->p;
}

/* ZCOUNT with bounds that inline requests cannot spell ("", a space, a
 * NUL): multibulk, as redis-server 7.0.15 answered them. */
TEST(zcount_bounds_read_as_redis_strtod) {
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    CHECK(strcmp(exec_cl(&k, &cl, &out, "ZADD z 1 a 2 b 2 c 3 d inf e"),
                 ":5\r\n") == 0);
    static const struct {
        const char *req;
        size_t len;
        const char *want;
    } cases[] = {
        {S("*4\r\n$6\r\nZCOUNT\r\n$1\r\nz\r\n$0\r\n\r\n$1\r\n1\r\n"), ":1\r\n"},
        {S("*4\r\n$6\r\nZCOUNT\r\n$1\r\nz\r\n$1\r\n(\r\n$1\r\n1\r\n"),
         ":1\r\n"},
        {S("*4\r\n$6\r\nZCOUNT\r\n$1\r\nz\r\n$2\r\n 1\r\n$1\r\n4\r\n"),
         ":4\r\n"},
        {S("*4\r\n$6\r\nZCOUNT\r\n$1\r\nz\r\n$3\r\n( 1\r\n$1\r\n4\r\n"),
         ":3\r\n"},
        {S("*4\r\n$6\r\nZCOUNT\r\n$1\r\nz\r\n$2\r\n1 \r\n$1\r\n4\r\n"),
         "-ERR min or max is not a float\r\n"},
        {S("*4\r\n$6\r\nZCOUNT\r\n$1\r\nz\r\n$3\r\n1\0x\r\n$1\r\n5\r\n"),
         ":4\r\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = exec_raw(&k, &cl, &out, cases[i].req, cases[i].len);
        if (strcmp(got, cases[i].want) != 0)
            check_fail(__FILE__, __LINE__, "case %zu: %s", i, got);
    }
    close_kv_with_client(&k, &cl, &out);
}

TEST(zrangebyscore_and_zremrange_as_redis) {
    /* Replies as redis-server 7.0.15 gave them: options (LIMIT's numbers
     * included) before the bounds, the bounds before the key; LIMIT's
     * offset negative is nothing, its count negative everything. */
    static const char *const cases[][2] = {
        {"ZADD z 1 a 2 b 2 c 3 d inf e -inf f", ":6\r\n"},
        {"SET s x", "+OK\r\n"},
        {"ZRANGEBYSCORE z -inf +inf WITHSCORES",
         "*12\r\n$1\r\nf\r\n$4\r\n-inf\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1"
         "\r\n2\r\n$1\r\nc\r\n$1\r\n2\r\n$1\r\nd\r\n$1\r\n3\r\n$1\r\ne\r\n$3"
         "\r\ninf\r\n"},
        {"ZRANGEBYSCORE z 2 3 LIMIT 1 1", "*1\r\n$1\r\nc\r\n"},
        {"ZRANGEBYSCORE z 2 3 LIMIT -1 1", "*0\r\n"},
        {"ZRANGEBYSCORE z 2 3 LIMIT 0 -5",
         "*3\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n"},
        {"ZRANGEBYSCORE z 2 3 LIMIT 0 0", "*0\r\n"},
        {"ZRANGEBYSCORE z 2 3 LIMIT 5 1", "*0\r\n"},
        {"ZRANGEBYSCORE z 2 3 LIMIT 9223372036854775807 1", "*0\r\n"},
        {"ZRANGEBYSCORE z 2 3 LIMIT 9223372036854775808 1",
         "-ERR value is not an integer or out of range\r\n"},
        {"ZRANGEBYSCORE z -inf inf LIMIT 2 9223372036854775807",
         "*4\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n"},
        {"ZRANGEBYSCORE z -inf inf LIMIT 1 -9223372036854775808",
         "*5\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n"},
        {"ZRANGEBYSCORE z 2 3 LIMIT 0", "-ERR syntax error\r\n"},
        {"ZRANGEBYSCORE z x 3 LIMIT x 1",
         "-ERR value is not an integer or out of range\r\n"},
        {"ZRANGEBYSCORE z x 3 FOO", "-ERR syntax error\r\n"},
        {"ZRANGEBYSCORE z 2 3 REV", "-ERR syntax error\r\n"},
        {"ZRANGEBYSCORE z 2 3 BYSCORE", "-ERR syntax error\r\n"},
        {"ZRANGEBYSCORE z 2 3 withscores WITHSCORES limit 0 1 LIMIT 1 2",
         "*4\r\n$1\r\nc\r\n$1\r\n2\r\n$1\r\nd\r\n$1\r\n3\r\n"},
        {"ZRANGEBYSCORE z 1",
         "-ERR wrong number of arguments for 'zrangebyscore' command\r\n"},
        {"ZREVRANGEBYSCORE z 3 2", "*3\r\n$1\r\nd\r\n$1\r\nc\r\n$1\r\nb\r\n"},
        {"ZREVRANGEBYSCORE z 2 3", "*0\r\n"},
        {"ZREVRANGEBYSCORE z +inf -inf WITHSCORES LIMIT 1 2",
         "*4\r\n$1\r\nd\r\n$1\r\n3\r\n$1\r\nc\r\n$1\r\n2\r\n"},
        {"ZREVRANGEBYSCORE z (3 (1", "*2\r\n$1\r\nc\r\n$1\r\nb\r\n"},
        {"ZREVRANGEBYSCORE nokey 1 2", "*0\r\n"},
        {"ZREVRANGEBYSCORE s 1 2", "-WRONGTYPE Operation against a key "
                                   "holding the wrong kind of value\r\n"},
        {"ZREVRANGEBYSCORE s x 2", "-ERR min or max is not a float\r\n"},
        {"ZREVRANGEBYSCORE s 1 2 FOO", "-ERR syntax error\r\n"},
        {"ZRANGE z 0 -1 BYSCORE", "*0\r\n"},
        {"ZRANGE z (1 3 BYSCORE WITHSCORES",
         "*6\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n2\r\n$1\r\nd\r\n$1\r\n3"
         "\r\n"},
        {"ZRANGE z 3 (1 BYSCORE REV",
         "*3\r\n$1\r\nd\r\n$1\r\nc\r\n$1\r\nb\r\n"},
        {"ZRANGE z 3 (1 REV BYSCORE LIMIT 1 1", "*1\r\n$1\r\nc\r\n"},
        {"ZRANGE z 0 1 BYSCORE BYSCORE", "-ERR syntax error\r\n"},
        {"ZRANGE z x 1 BYSCORE", "-ERR min or max is not a float\r\n"},
        {"ZRANGE z 0 -1 LIMIT -1 -1",
         "*6\r\n$1\r\nf\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\n"
         "e\r\n"},
        {"ZRANGE s 0 1 BYSCORE LIMIT 0 1", "-WRONGTYPE Operation against a "
                                           "key holding the wrong kind of "
                                           "value\r\n"},
        {"ZREMRANGEBYRANK z x 1",
         "-ERR value is not an integer or out of range\r\n"},
        {"ZREMRANGEBYRANK nokey 0 1", ":0\r\n"},
        {"ZREMRANGEBYRANK s 0 1", "-WRONGTYPE Operation against a key "
                                  "holding the wrong kind of value\r\n"},
        {"ZREMRANGEBYRANK z 3 2", ":0\r\n"},
        {"ZREMRANGEBYRANK z 9 20", ":0\r\n"},
        {"ZREMRANGEBYRANK z -2 -1", ":2\r\n"},
        {"ZREMRANGEBYSCORE z x 1", "-ERR min or max is not a float\r\n"},
        {"ZREMRANGEBYSCORE s x 1", "-ERR min or max is not a float\r\n"},
        {"ZREMRANGEBYSCORE s 0 1", "-WRONGTYPE Operation against a key "
                                   "holding the wrong kind of value\r\n"},
        {"ZREMRANGEBYSCORE nokey 0 1", ":0\r\n"},
        {"ZREMRANGEBYSCORE z (2 2", ":0\r\n"},
        {"ZREMRANGEBYSCORE z (1 2", ":2\r\n"},
        {"ZRANGE z 0 -1 WITHSCORES",
         "*4\r\n$1\r\nf\r\n$4\r\n-inf\r\n$1\r\na\r\n$1\r\n1\r\n"},
        {"ZREMRANGEBYRANK z 0 -1", ":2\r\n"},
        {"EXISTS z", ":0\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
}

TEST(set_repeated_expiry_option_last_wins_as_redis) {
    /* Redis takes EX (PX, EXAT, PXAT) again and keeps the last value;
     * only two different ones, or one with KEEPTTL, are a syntax error. */
    static const char *const cases[][2] = {
        {"SET a 1 EX 10 EX abc",
         "-ERR value is not an integer or out of range\r\n"},
        {"SET a 1 PX 0 PX 100000", "+OK\r\n"},
        {"TTL a", ":100\r\n"},
        {"SET a 1 EX 100 EX -1",
         "-ERR invalid expire time in 'set' command\r\n"},
        {"SET a 1 PXAT 1 PXAT 99999999999999", "+OK\r\n"},
        {"SET a 1 EX 1 PX 1", "-ERR syntax error\r\n"},
        {"SET a 1 PXAT 1 PXAT", "-ERR syntax error\r\n"},
        {"SET a 1 EX 1 KEEPTTL", "-ERR syntax error\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
}

TEST(scores_read_as_redis_reads_them) {
    /* Redis takes what strtod takes whole, but not an overflow to
     * infinity nor an underflow to zero; a subnormal is a score, and a
     * long spelling of one is too. A bad score is answered before the
     * key's type is looked at. */
    static const char *const cases[][2] = {
        {"SET s x", "+OK\r\n"},
        {"ZADD s 1e400 m", "-ERR value is not a valid float\r\n"},
        {"ZINCRBY s -1e400 m", "-ERR value is not a valid float\r\n"},
        {"ZADD z 1e-400 m", "-ERR value is not a valid float\r\n"},
        {"ZADD z 1e-310 m", ":1\r\n"},
        {"ZADD z 4.9e-324 n", ":1\r\n"},
        {"ZSCORE z m", "$23\r\n9.9999999999999694e-311\r\n"},
        {"ZSCORE z n", "$23\r\n4.9406564584124654e-324\r\n"},
        {"ZADD z 0.000000000000000000000000000000000000000000000000000000000"
         "000000000000000000000001 p",
         ":1\r\n"},
        {"ZSCORE z p", "$22\r\n9.9999999999999996e-82\r\n"},
        {"ZADD z inf q", ":1\r\n"},
        {"ZINCRBY z 1e308 q", "$3\r\ninf\r\n"},
        {"ZADD z 1e308 r", ":1\r\n"},
        {"ZINCRBY z 1e308 r", "$3\r\ninf\r\n"},
        {"ZCARD z", ":5\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
    kv k;
    kv_setup(&k, false);
    buf out = {0};
    resp_arg nul[] = {{"ZADD", 4}, {"z", 1}, {"1\0", 2}, {"m", 1}};
    CHECK(strcmp(exec_args(&k, NULL, &out, nul, 4),
                 "-ERR value is not a valid float\r\n") == 0);
    buf_free(&out);
    kv_free(&k);
}

/* redis-benchmark's writes on a server with no replica (an idle log), each
 * sent again and again to one key: once the key, member or field is
 * there, a ZADD of its score or an HSET of a value as long changes
 * memory nowhere, and an element of a few bytes pushed on a list with
 * room is held in its slot, so each asks malloc for nothing (they asked
 * for a score array per ZADD, a value copy per HSET and an element copy
 * per push). */
TEST(repeated_benchmark_writes_allocate_nothing) {
    static const char *const writes[][2] = {
        {"ZADD myzset 0 element:1", ":0\r\n"},
        {"ZADD myzset 1.5 element:2 -2 element:3", ":0\r\n"},
        {"HSET myhash element:1 xxx", ":0\r\n"},
        {"SADD myset element:1", ":0\r\n"},
        {"LPUSH mylist xxx", ":3\r\n"},
        {"RPUSH mylist 12345678", ":6\r\n"},
        {"RPOP mylist", "$8\r\n12345678\r\n"}};
    kv k;
    kv_setup(&k, false);
    k.log.idle = true;
    buf out = {0};
    for (size_t i = 0; i < sizeof writes / sizeof *writes; i++) {
        exec_words(&k, &out, writes[i][0]); /* the key and member made */
        exec_words(&k, &out, writes[i][0]); /* the reply buffer grown */
        shim_reset(1);
        fail_nth(K_MALLOC, -1, 1, UINT64_MAX, ENOMEM); /* every one fails */
        arm(true);
        const char *r = exec_words(&k, &out, writes[i][0]);
        arm(false);
        uint64_t asked = injected_total(K_MALLOC);
        if (asked)
            check_fail(__FILE__, __LINE__, "%s: %llu allocations (%s)",
                       writes[i][0], (unsigned long long)asked, r);
        CHECK(strcmp(r, writes[i][1]) == 0);
    }
    CHECK(strcmp(exec_words(&k, &out, "ZSCORE myzset element:3"),
                 "$2\r\n-2\r\n") == 0);
    CHECK(strcmp(exec_words(&k, &out, "LRANGE mylist 0 -1"),
                 "*3\r\n$3\r\nxxx\r\n$3\r\nxxx\r\n$3\r\nxxx\r\n") == 0);
    buf_free(&out);
    kv_free(&k);
}

/* LMOVE and RPOPLPUSH of a list onto itself when its ring is full: the
 * push grows the ring, which moves the element being moved (its bytes
 * are in its slot when short), so the push takes a copy of it first. */
TEST(list_moved_onto_itself_as_its_ring_grows) {
    kv k;
    kv_setup(&k, false);
    buf out = {0};
    exec_words(&k, &out, "RPUSH l a b c d e f g h"); /* 8: the ring full */
    CHECK(strcmp(exec_words(&k, &out, "LMOVE l l LEFT RIGHT"), "$1\r\na\r\n") ==
          0);
    exec_words(&k, &out, "RPUSH l i j k l m n o p"); /* 16: full again */
    CHECK(strcmp(exec_words(&k, &out, "RPOPLPUSH l l"), "$1\r\np\r\n") == 0);
    CHECK(strcmp(exec_words(&k, &out, "LRANGE l 0 -1"),
                 "*16\r\n$1\r\np\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n"
                 "$1\r\ne\r\n$1\r\nf\r\n$1\r\ng\r\n$1\r\nh\r\n"
                 "$1\r\na\r\n$1\r\ni\r\n$1\r\nj\r\n$1\r\nk\r\n"
                 "$1\r\nl\r\n$1\r\nm\r\n$1\r\nn\r\n$1\r\no\r\n") == 0);
    buf_free(&out);
    kv_free(&k);
}

/* A score spelled as an integer is read without strtod when it is one
 * kv_parse_i64 takes within +-2^53; every spelling, taken that way or not,
 * gives strtod's value (ZSCORE shows it as %.17g; a -0 is kept as 0). */
TEST(integer_scores_read_as_strtod_reads_them) {
    static const char *const spell[] = {"0",
                                        "-0",
                                        "7",
                                        "-7",
                                        "007",
                                        "+5",
                                        "10",
                                        "-10",
                                        "123456789",
                                        "9007199254740991",
                                        "9007199254740992",
                                        "9007199254740993",
                                        "-9007199254740992",
                                        "-9007199254740993",
                                        "99999999999999999",
                                        "12345678901234567",
                                        "9223372036854775807",
                                        "-9223372036854775808",
                                        "18446744073709551616",
                                        "1e3",
                                        "0.5",
                                        "-1.25"};
    kv k;
    kv_setup(&k, false);
    buf out = {0};
    char line[128], want[64];
    for (size_t i = 0; i < sizeof spell / sizeof *spell; i++) {
        snprintf(line, sizeof line, "ZADD z %s m", spell[i]);
        exec_words(&k, &out, line);
        const char *r = exec_words(&k, &out, "ZSCORE z m");
        double d = strtod(spell[i], NULL);
        char num[40];
        int n = snprintf(num, sizeof num, "%.17g", d == 0 ? 0 : d);
        snprintf(want, sizeof want, "$%d\r\n%s\r\n", n, num);
        if (strcmp(r, want) != 0)
            check_fail(__FILE__, __LINE__, "ZADD %s: ZSCORE %s, not %s",
                       spell[i], r, want);
    }
    buf_free(&out);
    kv_free(&k);
}

TEST(zadd_out_of_memory_logs_only_the_pairs_it_added) {
    /* A ZADD of several pairs that runs out of memory part way has added
     * the pairs before; its record must repeat just those, as SADD's and
     * HSET's do, or a replica applying it (with memory to spare) holds
     * members the primary does not. Each allocation of the ZADD fails in
     * turn; the replica that applies the log must end as the primary. */
    resp_limits lim = {.max_bulk = 1000, .max_args = MAX_ARGS};
    resp_arg argv[MAX_ARGS];
    bool failed_part_way = false;
    for (uint64_t nth = 1;; nth++) {
        kv p, r;
        kv_setup(&p, false);
        kv_setup(&r, true);
        buf out = {0}, dp = {0}, dr = {0};
        exec_words(&p, &out, "ZADD z 1 a");
        shim_reset(1);
        fail_nth(K_MALLOC, -1, nth, 1, ENOMEM);
        arm(true);
        exec_words(&p, &out, "ZADD z 2 b 3 c 4 d 5 e");
        arm(false);
        bool hit = injected_total(K_MALLOC) > 0;
        if (hit && strcmp(out.p, "-OOM command not allowed when used memory > "
                                 "'maxmemory'.\r\n") == 0) {
            exec_words(&p, &out, "ZCARD z");
            if (strcmp(out.p, ":1\r\n") != 0) failed_part_way = true;
        }
        const char *err = NULL;
        size_t need;
        CHECK_EQ(p.log.nchunks, 1);
        long n = kv_apply_stream(&r, &lim, argv, p.log.chunks[0].p,
                                 (size_t)p.log.end, &err, &need);
        CHECK_EQ(n, (long)p.log.end);
        kv_dump(&p, &dp);
        kv_dump(&r, &dr);
        if (!same_dump(&dp, &dr))
            check_fail(__FILE__, __LINE__, "malloc %llu failed: %s / %s",
                       (unsigned long long)nth, dp.p, dr.p);
        buf_free(&out);
        buf_free(&dp);
        buf_free(&dr);
        kv_free(&p);
        kv_free(&r);
        if (!hit) break; /* the ZADD made fewer allocations than nth */
    }
    CHECK(failed_part_way); /* the case this is about was reached */
}

TEST(writes_out_of_memory_part_way_replicate_exactly) {
    /* Each allocation of each write fails in turn, on a primary with keys
     * of every type: whatever the write did before it gave up, its record
     * must repeat exactly that on a replica (and be a record a replica
     * takes). MSET out of memory at its first key logged a bare "MSET",
     * which a replica refuses, closing its link, again at each retry.
     * (SPOP is left out: a record it cannot build stops lull-kv, as a
     * log that cannot grow does.) */
    static const char *const setup[] = {"SET s hello",    "RPUSH l a b c d",
                                        "SADD t a b c",   "SADD u c d e",
                                        "HSET h a 1 b 2", "ZADD z 1 a 2 b 3 c",
                                        "SET n 10",       "SET f 1.5",
                                        "SET e x",        "PEXPIRE e 100000000",
                                        "SETEX g 10000 v"};
    static const char *const cmds[] = {"SET s2 v",
                                       "SET s v GET",
                                       "SET s v EX 100",
                                       "SETNX q v",
                                       "GETSET s v",
                                       "MSET a 1 b 2 c 3 d 4",
                                       "MSETNX a 1 b 2 c 3",
                                       "APPEND s xyz",
                                       "APPEND new xyz",
                                       "SETRANGE s 10 x",
                                       "SETRANGE new 3 x",
                                       "INCR n",
                                       "INCR new",
                                       "INCRBY n 5",
                                       "INCRBYFLOAT f 1",
                                       "INCRBYFLOAT new 1",
                                       "GETDEL s",
                                       "GETEX e PERSIST",
                                       "GETEX s EX 100",
                                       "SETEX s 100 v",
                                       "PSETEX s 100 v",
                                       "DEL s l t",
                                       "RENAME s s3",
                                       "RENAME l t",
                                       "RENAMENX l s9",
                                       "EXPIRE s 100",
                                       "PEXPIREAT s 99999999999999",
                                       "PERSIST e",
                                       "LPUSH l w x y z",
                                       "RPUSH new w x y z",
                                       "LPUSHX l w x",
                                       "LPOP l 2",
                                       "RPOP l",
                                       "LSET l 1 qqq",
                                       "LREM l 0 a",
                                       "LTRIM l 1 2",
                                       "LINSERT l BEFORE b x",
                                       "LMOVE l new LEFT RIGHT",
                                       "LMOVE l l LEFT RIGHT",
                                       "RPOPLPUSH l t2",
                                       "SADD t d e f g",
                                       "SADD new d e f g",
                                       "SREM t a b",

                                       "SMOVE t u a",
                                       "SMOVE t new a",
                                       "SINTERSTORE d t u",
                                       "SUNIONSTORE d t u",
                                       "SDIFFSTORE d t u",
                                       "SUNIONSTORE t t u",
                                       "HSET h c 3 d 4 e 5",
                                       "HSET new c 3 d 4",
                                       "HMSET h a 9 x 8",
                                       "HSETNX h z 1",
                                       "HDEL h a",
                                       "HINCRBY h a 5",
                                       "HINCRBY h new 5",
                                       "HINCRBYFLOAT h a 1.5",
                                       "HINCRBYFLOAT new a 1.5",
                                       "ZADD z 5 d 6 e 7 f",
                                       "ZADD new 5 d 6 e",
                                       "ZADD z XX CH 9 a 9 b",
                                       "ZADD z INCR 2 a",
                                       "ZINCRBY z 1 a",
                                       "ZINCRBY new 1 a",
                                       "ZREM z a b",
                                       "ZPOPMIN z 2",
                                       "ZPOPMAX z",
                                       "ZREMRANGEBYRANK z 0 1",
                                       "ZREMRANGEBYSCORE z 1 2",
                                       "FLUSHALL"};
    resp_limits lim = {.max_bulk = 1000, .max_args = MAX_ARGS};
    resp_arg argv[MAX_ARGS];
    for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++) {
        for (uint64_t nth = 1;; nth++) {
            kv p, r;
            kv_setup(&p, false);
            kv_setup(&r, true);
            buf out = {0}, dp = {0}, dr = {0};
            for (size_t i = 0; i < sizeof setup / sizeof setup[0]; i++)
                exec_words(&p, &out, setup[i]);
            shim_reset(1);
            fail_nth(K_MALLOC, -1, nth, 1, ENOMEM);
            arm(true);
            exec_words(&p, &out, cmds[c]);
            arm(false);
            bool hit = injected_total(K_MALLOC) > 0;
            const char *err = NULL;
            size_t need;
            CHECK_EQ(p.log.nchunks, 1);
            long n = kv_apply_stream(&r, &lim, argv, p.log.chunks[0].p,
                                     (size_t)p.log.end, &err, &need);
            if (n != (long)p.log.end)
                check_fail(__FILE__, __LINE__, "%s malloc %llu: apply %ld %s",
                           cmds[c], (unsigned long long)nth, n, err ? err : "");
            kv_dump(&p, &dp);
            kv_dump(&r, &dr);
            if (!same_dump(&dp, &dr))
                check_fail(__FILE__, __LINE__, "%s malloc %llu (%s): %s / %s",
                           cmds[c], (unsigned long long)nth, out.p, dp.p, dr.p);
            buf_free(&out);
            buf_free(&dp);
            buf_free(&dr);
            kv_free(&p);
            kv_free(&r);
            if (!hit) break;
        }
    }
}

TEST(zincrby_reads_zadd_options_as_redis) {
    /* Redis runs ZINCRBY as ZADD INCR, so an option word where the
     * increment goes is taken as an option and leaves an odd count of
     * score-member words: a syntax error, before the key's type. */
    static const char *const cases[][2] = {
        {"SET s x", "+OK\r\n"},
        {"ZINCRBY s CH 1", "-ERR syntax error\r\n"},
        {"ZINCRBY z nx m", "-ERR syntax error\r\n"},
        {"ZINCRBY z INCR m", "-ERR syntax error\r\n"},
        {"ZINCRBY z Gt 1", "-ERR syntax error\r\n"},
        {"ZINCRBY z x m", "-ERR value is not a valid float\r\n"},
        {"ZINCRBY z 2 nx", "$1\r\n2\r\n"},
        {"ZINCRBY s 1 m", "-WRONGTYPE Operation against a key holding the "
                          "wrong kind of value\r\n"},
        {"EXISTS z", ":1\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
}

TEST(scan_cursor_read_as_redis_reads_it) {
    /* Redis reads the cursor with strtoul before any option: a sign is
     * taken (-1 is 2^64 - 1), as is an empty cursor (0); a leading
     * space, or anything after the digits, is an invalid cursor. */
    static const char *const cases[][2] = {
        {"SET a 1", "+OK\r\n"},
        {"SCAN -1 FOO", "-ERR syntax error\r\n"},
        {"SCAN +0", "*2\r\n$1\r\n0\r\n*1\r\n$1\r\na\r\n"},
        {"SCAN 00000000000000000000000000000000000000000",
         "*2\r\n$1\r\n0\r\n*1\r\n$1\r\na\r\n"},
        {"SCAN -18446744073709551615 COUNT x",
         "-ERR value is not an integer or out of range\r\n"},
        {"SCAN -18446744073709551616", "-ERR invalid cursor\r\n"},
        {"SCAN 18446744073709551616", "-ERR invalid cursor\r\n"},
        {"SCAN -", "-ERR invalid cursor\r\n"},
        {"SCAN +", "-ERR invalid cursor\r\n"},
        {"SCAN 0x1", "-ERR invalid cursor\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
    kv k;
    kv_setup(&k, false);
    buf out = {0};
    exec_cl(&k, NULL, &out, "SET a 1");
    resp_arg empty[] = {{"SCAN", 4}, {"", 0}, {"COUNT", 5}, {"x", 1}};
    CHECK(strcmp(exec_args(&k, NULL, &out, empty, 4),
                 "-ERR value is not an integer or out of range\r\n") == 0);
    resp_arg nul[] = {{"SCAN", 4}, {"0\0x", 3}};
    CHECK(strcmp(exec_args(&k, NULL, &out, nul, 2),
                 "*2\r\n$1\r\n0\r\n*1\r\n$1\r\na\r\n") == 0);
    resp_arg space[] = {{"SCAN", 4}, {" 0", 2}, {"FOO", 3}};
    CHECK(strcmp(exec_args(&k, NULL, &out, space, 3),
                 "-ERR invalid cursor\r\n") == 0);
    resp_arg tab[] = {{"SCAN", 4}, {"\t0", 2}};
    CHECK(strcmp(exec_args(&k, NULL, &out, tab, 2),
                 "-ERR invalid cursor\r\n") == 0);
    resp_arg trail[] = {{"SCAN", 4}, {"0 ", 2}};
    CHECK(strcmp(exec_args(&k, NULL, &out, trail, 2),
                 "-ERR invalid cursor\r\n") == 0);
    buf_free(&out);
    kv_free(&k);
}

TEST(expire_unsupported_option_quoted_as_redis) {
    /* Redis formats the option with %s and turns CR and LF into spaces:
     * the reply stays one line, whatever the client sent. */
    kv k;
    kv_setup(&k, false);
    buf out = {0};
    resp_arg crlf[] = {{"PEXPIRE", 7}, {"b", 1}, {"100", 3}, {"a\r\nb\0c", 6}};
    CHECK(strcmp(exec_args(&k, NULL, &out, crlf, 4),
                 "-ERR Unsupported option a  b\r\n") == 0);
    resp_arg cr[] = {{"EXPIRE", 6}, {"b", 1}, {"100", 3}, {"x\ry", 3}};
    CHECK(strcmp(exec_args(&k, NULL, &out, cr, 4),
                 "-ERR Unsupported option x y\r\n") == 0);
    buf_free(&out);
    kv_free(&k);
}
TEST(expire_unsupported_option_trailing_crlf_trimmed_as_redis) {
    /* Redis' addReplyErrorFormat trims CR and LF off the formatted
     * message's ends before it maps the rest to spaces: an option ending
     * in CRLF (or in CRLF before a NUL) loses them. redis-server 7.0.15
     * answered each of these so (kv/kvdiff.py found the first). */
    kv k;
    kv_setup(&k, false);
    buf out = {0};
    static const struct {
        const char *opt;
        size_t len;
        const char *reply;
    } cases[] = {
        {"x\r\n", 3, "-ERR Unsupported option x\r\n"},
        {"x\r\n\0y", 5, "-ERR Unsupported option x\r\n"},
        {"\r\n", 2, "-ERR Unsupported option \r\n"},
        {"\n\rx\n\r", 5, "-ERR Unsupported option   x\r\n"},
        {"a\r\nb", 4, "-ERR Unsupported option a  b\r\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        resp_arg a[] = {
            {"EXPIRE", 6}, {"k", 1}, {"10", 2}, {cases[i].opt, cases[i].len}};
        const char *got = exec_args(&k, NULL, &out, a, 4);
        if (strcmp(got, cases[i].reply) != 0)
            check_fail(__FILE__, __LINE__, "case %zu: %s", i, got);
    }
    buf_free(&out);
    kv_free(&k);
}
TEST(zset_negative_zero_kept_as_zero_as_redis) {
    /* A small sorted set in Redis 7.0 (a listpack: every one lull-kv
     * tests against) keeps a score of -0 as 0; only the reply to the
     * command that added it repeats the -0 it was given. */
    static const char *const cases[][2] = {
        {"ZADD t -0 m", ":1\r\n"},
        {"ZRANGE t 0 -1 WITHSCORES", "*2\r\n$1\r\nm\r\n$1\r\n0\r\n"},
        {"ZSCORE t m", "$1\r\n0\r\n"},
        {"ZINCRBY t -0 m", "$1\r\n0\r\n"},
        {"ZINCRBY t -0 n", "$2\r\n-0\r\n"},
        {"ZSCORE t n", "$1\r\n0\r\n"},
        {"ZADD t INCR -0.0 o", "$2\r\n-0\r\n"},
        {"ZSCORE t o", "$1\r\n0\r\n"},
        {"ZPOPMIN t", "*2\r\n$1\r\nm\r\n$1\r\n0\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
}

TEST(scan_last_match_wins_as_redis) {
    /* Redis keeps the last MATCH given, "*" (every key) included. */
    static const char *const cases[][2] = {
        {"SET a 1", "+OK\r\n"},
        {"SCAN 0 MATCH b MATCH *", "*2\r\n$1\r\n0\r\n*1\r\n$1\r\na\r\n"},
        {"SCAN 0 MATCH * MATCH b", "*2\r\n$1\r\n0\r\n*0\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
}

TEST(config_subcommand_checked_when_queued_as_redis) {
    /* Redis checks CONFIG GET's arity (config|get, -3) and refuses an
     * unknown CONFIG subcommand before queueing: the refusal spoils the
     * transaction, so EXEC aborts and nothing queued runs. lull-kv
     * queued both and answered them from EXEC, running the SET beside
     * them. Bytes as redis-server 7.0.15 sends them. */
    static const char *const cases[][2] = {
        {"CONFIG FOO", "-ERR unknown subcommand 'FOO'. Try CONFIG HELP.\r\n"},
        {"MULTI", "+OK\r\n"},
        {"SET a 1", "+QUEUED\r\n"},
        {"CONFIG GET",
         "-ERR wrong number of arguments for 'config|get' command\r\n"},
        {"EXEC",
         "-EXECABORT Transaction discarded because of previous errors.\r\n"},
        {"GET a", "$-1\r\n"},
        {"MULTI", "+OK\r\n"},
        {"SET a 1", "+QUEUED\r\n"},
        {"config nosuch x", "-ERR unknown subcommand 'nosuch'. Try CONFIG "
                            "HELP.\r\n"},
        {"EXEC",
         "-EXECABORT Transaction discarded because of previous errors.\r\n"},
        {"GET a", "$-1\r\n"},
        {"MULTI", "+OK\r\n"},
        {"CONFIG GET nosuch", "+QUEUED\r\n"},
        {"CONFIG SET port 1", "+QUEUED\r\n"},
        {"EXEC", "*2\r\n*0\r\n-ERR CONFIG: only CONFIG GET is supported\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
}

/* A clock that reads fixed_now (ms on the Unix epoch). */
static int64_t fixed_now;
static int64_t fixed_clock(kv *k) {
    (void)k;
    return fixed_now;
}

/* INFO keyspace's avg_ttl of db0: Redis' is the average TTL in ms of the
 * keys with an expiry (its estimate, from sampling), which monitoring
 * reads; lull-kv said 0 whatever the keys' TTLs. Kept exactly: the mean
 * of the heap's times less now, as times are set, moved, renamed away,
 * removed and flushed. */
static const char *avg_ttl_of(kv *k, buf *out, char *v, size_t n) {
    const char *info = exec_words(k, out, "INFO keyspace");
    const char *at = strstr(info, "avg_ttl=");
    CHECK(at != NULL);
    snprintf(v, n, "%.*s", (int)strcspn(at + 8, "\r"), at + 8);
    return v;
}

TEST(info_keyspace_avg_ttl_as_redis) {
    buf out = {0};
    kv k;
    char v[32];
    kv_setup(&k, false);
    k.clock = fixed_clock;
    fixed_now = 1000000000000;
    exec_words(&k, &out, "SET c 1");
    CHECK(strcmp(avg_ttl_of(&k, &out, v, sizeof v), "0") ==
          0); /* none expires */
    exec_words(&k, &out, "SET a 1 PX 10000");
    exec_words(&k, &out, "SET b 1 PX 30000");
    CHECK(strcmp(avg_ttl_of(&k, &out, v, sizeof v), "20000") == 0);
    fixed_now += 5000;
    CHECK(strcmp(avg_ttl_of(&k, &out, v, sizeof v), "15000") == 0);
    exec_words(&k, &out, "PEXPIRE a 1000"); /* moved: 1000 and 25000 */
    CHECK(strcmp(avg_ttl_of(&k, &out, v, sizeof v), "13000") == 0);
    exec_words(&k, &out, "RENAME b d"); /* its time goes with it */
    CHECK(strcmp(avg_ttl_of(&k, &out, v, sizeof v), "13000") == 0);
    exec_words(&k, &out, "SET e 1 PX 4000");
    exec_words(&k, &out, "RENAME e d"); /* d's 25000 replaced by 4000 */
    CHECK(strcmp(avg_ttl_of(&k, &out, v, sizeof v), "2500") == 0);
    exec_words(&k, &out, "PERSIST d");
    CHECK(strcmp(avg_ttl_of(&k, &out, v, sizeof v), "1000") == 0);
    exec_words(&k, &out, "DEL a");
    CHECK(strcmp(avg_ttl_of(&k, &out, v, sizeof v), "0") == 0);
    exec_words(&k, &out, "SET f 1 PX 700");
    exec_words(&k, &out, "FLUSHALL");
    exec_words(&k, &out, "SET g 1 PX 300");
    CHECK(strcmp(avg_ttl_of(&k, &out, v, sizeof v), "300") == 0);
    buf_free(&out);
    kv_free(&k);
}

TEST(info_several_sections_as_redis) {
    /* Redis 7 takes any number of sections (redis-py's info("clients",
     * "keyspace") sends two) and answers each one asked for once, in its
     * own order; lull-kv answered more than one with -ERR syntax error. */
    buf out = {0};
    kv k;
    kv_setup(&k, false);
    k.clients = 2;
    exec_words(&k, &out, "SET a 1");
    static const char both[] = "$78\r\n# Clients\r\nconnected_clients:2\r\n"
                               "\r\n# Keyspace\r\ndb0:keys=1,expires=0,"
                               "avg_ttl=0\r\n\r\n";
    CHECK(strcmp(exec_words(&k, &out, "INFO clients keyspace"), both) == 0);
    CHECK(strcmp(exec_words(&k, &out, "INFO KEYSPACE nosuch clients Clients"),
                 both) == 0);
    CHECK(strcmp(exec_words(&k, &out, "INFO nosuch other"), "$0\r\n\r\n") == 0);
    char v[128];
    const char *info = exec_words(&k, &out, "INFO nosuch everything");
    CHECK(info_field(info, "role", v, sizeof v) != NULL);
    CHECK(strcmp(info_field(info, "connected_clients", v, sizeof v), "2") == 0);
    buf_free(&out);
    kv_free(&k);
}

/* The section headers of an INFO reply, one letter each (S)erver,
 * (C)lients, (M)emory, s(T)ats, (R)eplication, (K)eyspace, in order. */
static const char *info_order(const char *info) {
    static char order[16];
    static const char *const names[] = {"Server", "Clients",     "Memory",
                                        "Stats",  "Replication", "Keyspace"};
    size_t n = 0;
    for (const char *h = strstr(info, "# "); h && n + 1 < sizeof order;
         h = strstr(h + 2, "\r\n# "), h = h ? h + 2 : h)
        for (size_t i = 0; i < 6; i++)
            if (strncmp(h + 2, names[i], strlen(names[i])) == 0)
                order[n++] = "SCMTRK"[i];
    order[n] = 0;
    return order;
}

TEST(info_server_section_as_redis) {
    /* Client libraries and tools read INFO server's redis_version to pick
     * what they may send (job queues refuse to start without it); Redis 7
     * gives # Server first in INFO, INFO all, default and everything, and
     * alone for INFO server. lull-kv had no such section. */
    buf out = {0};
    kv k;
    kv_setup(&k, false);
    k.tcp_port = 6390;
    k.start_ms = 1000; /* the clock below: 3 days and 5 s later */
    k.clock = fixed_clock;
    fixed_now = 1000 + (3 * 86400 + 5) * 1000ll;
    char v[128];
    const char *info = exec_words(&k, &out, "INFO server");
    CHECK(strncmp(info, "$", 1) == 0);
    CHECK(strncmp(strstr(info, "\r\n") + 2,
                  "# Server\r\nredis_version:7.0.0\r\n", 31) == 0);
    CHECK(strcmp(info_order(info), "S") == 0);
    CHECK(strcmp(info_field(info, "redis_mode", v, sizeof v), "standalone") ==
          0);
    CHECK(strncmp(info_field(info, "os", v, sizeof v), "Linux ", 6) == 0);
    CHECK(strcmp(info_field(info, "arch_bits", v, sizeof v),
                 sizeof(void *) == 8 ? "64" : "32") == 0);
    CHECK_EQ(atoi(info_field(info, "process_id", v, sizeof v)), getpid());
    CHECK(strcmp(info_field(info, "tcp_port", v, sizeof v), "6390") == 0);
    CHECK(strcmp(info_field(info, "uptime_in_seconds", v, sizeof v),
                 "259205") == 0);
    CHECK(strcmp(info_field(info, "uptime_in_days", v, sizeof v), "3") == 0);
    const char *const all[] = {"INFO", "INFO all", "INFO everything",
                               "INFO default",
                               ("info SERVER clients memory "
                                "stats replication keyspace")};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        CHECK(strcmp(info_order(exec_words(&k, &out, all[i])), "SCMTRK") == 0);
    CHECK(strcmp(info_order(exec_words(&k, &out, "INFO keyspace Server")),
                 "SK") == 0);
    buf_free(&out);
    kv_free(&k);
}

TEST(append_past_the_bulk_limit_refused_as_redis) {
    /* Redis refuses an APPEND whose result would pass proto-max-bulk-len
     * (a client could otherwise grow one string without bound, 512 MB
     * a request); a replica applying its primary's records is not held
     * to its own limit. */
    buf out = {0};
    kv k;
    kv_setup(&k, false);
    k.max_string = 8;
    CHECK(strcmp(exec_words(&k, &out, "APPEND s 12345"), ":5\r\n") == 0);
    CHECK(strcmp(exec_words(&k, &out, "APPEND s 678"), ":8\r\n") == 0);
    CHECK(strcmp(exec_words(&k, &out, "APPEND s 9"),
                 "-ERR string exceeds maximum allowed size "
                 "(proto-max-bulk-len)\r\n") == 0);
    CHECK(strcmp(exec_words(&k, &out, "STRLEN s"), ":8\r\n") == 0);
    k.applying = true;
    exec_words(&k, &out, "APPEND s 9");
    k.applying = false;
    CHECK(strcmp(exec_words(&k, &out, "STRLEN s"), ":9\r\n") == 0);
    buf_free(&out);
    kv_free(&k);
}

/* A replica applying p's whole log ends with p's keyspace. */
static void check_replica_agrees(kv *p) {
    kv r;
    kv_setup(&r, true);
    resp_limits lim = {.max_bulk = 1 << 20, .max_args = MAX_ARGS};
    static resp_arg argv[MAX_ARGS];
    const char *err = NULL;
    size_t need;
    CHECK_EQ(p->log.nchunks, 1);
    long n = kv_apply_stream(&r, &lim, argv, p->log.chunks[0].p,
                             (size_t)p->log.end, &err, &need);
    if (n != (long)p->log.end)
        check_fail(__FILE__, __LINE__, "applied %ld: %s", n, err ? err : "");
    buf dp = {0}, dr = {0};
    dump_keyspace(p, &dp);
    dump_keyspace(&r, &dr);
    if (strcmp(dp.p, dr.p) != 0)
        check_fail(__FILE__, __LINE__, "%s\nvs\n%s", dp.p, dr.p);
    buf_free(&dp);
    buf_free(&dr);
    kv_free(&r);
}

TEST(expiretime_getrange_setrange_as_redis) {
    /* Replies as redis-server 7.0.15 gave them: EXPIRETIME rounds to the
     * nearest second; GETRANGE's and SETRANGE's numbers are read before
     * the key, SETRANGE's offset checked before it too; an empty SETRANGE
     * makes no key. */
    static const char *const cases[][2] = {
        {"SET k hello", "+OK\r\n"},
        {"EXPIRETIME k", ":-1\r\n"},
        {"PEXPIRETIME k", ":-1\r\n"},
        {"EXPIRETIME nokey", ":-2\r\n"},
        {"PEXPIRETIME nokey", ":-2\r\n"},
        {"PEXPIREAT k 33177600000499", ":1\r\n"},
        {"EXPIRETIME k", ":33177600000\r\n"},
        {"PEXPIRETIME k", ":33177600000499\r\n"},
        {"PEXPIREAT k 33177600000500", ":1\r\n"},
        {"EXPIRETIME k", ":33177600001\r\n"},
        {"SET big 1 PXAT 9223372036854775807", "+OK\r\n"},
        {"EXPIRETIME big", ":9223372036854776\r\n"},
        {"PEXPIRETIME big", ":9223372036854775807\r\n"},
        {"SET big 1 PXAT 9223372036854775307", "+OK\r\n"},
        {"EXPIRETIME big", ":9223372036854775\r\n"},
        {"EXPIRETIME k x",
         "-ERR wrong number of arguments for 'expiretime' command\r\n"},
        {"LPUSH l a", ":1\r\n"},
        {"EXPIRETIME l", ":-1\r\n"},
        {"GETRANGE k 0 -1", "$5\r\nhello\r\n"},
        {"GETRANGE k 1 3", "$3\r\nell\r\n"},
        {"GETRANGE k -3 -1", "$3\r\nllo\r\n"},
        {"GETRANGE k -1 -3", "$0\r\n\r\n"},
        {"GETRANGE k 0 -100", "$1\r\nh\r\n"},
        {"GETRANGE k -100 -100", "$1\r\nh\r\n"},
        {"GETRANGE k 3 1", "$0\r\n\r\n"},
        {"GETRANGE k 10 20", "$0\r\n\r\n"},
        {"GETRANGE k 4 100", "$1\r\no\r\n"},
        {"GETRANGE k -9223372036854775808 9223372036854775807",
         "$5\r\nhello\r\n"},
        {"GETRANGE k x 1", "-ERR value is not an integer or out of range\r\n"},
        {"GETRANGE nokey x 1",
         "-ERR value is not an integer or out of range\r\n"},
        {"GETRANGE nokey 0 1", "$0\r\n\r\n"},
        {"GETRANGE l 0 1", "-WRONGTYPE Operation against a key holding the "
                           "wrong kind of value\r\n"},
        {"GETRANGE l x 1", "-ERR value is not an integer or out of range\r\n"},
        {"GETRANGE k 0",
         "-ERR wrong number of arguments for 'getrange' command\r\n"},
        {"SETRANGE k 1 EL", ":5\r\n"},
        {"GET k", "$5\r\nhELlo\r\n"},
        {"SETRANGE k -1 x", "-ERR offset is out of range\r\n"},
        {"SETRANGE l -1 x", "-ERR offset is out of range\r\n"},
        {"SETRANGE l 0 x", "-WRONGTYPE Operation against a key holding the "
                           "wrong kind of value\r\n"},
        {"SETRANGE nokey2 2 ab", ":4\r\n"},
        {"SETRANGE k x y", "-ERR value is not an integer or out of range\r\n"},
        {"SETRANGE k 9223372036854775808 ab",
         "-ERR value is not an integer or out of range\r\n"},
        {"SETRANGE k 1",
         "-ERR wrong number of arguments for 'setrange' command\r\n"},
        {"EXISTS nokey", ":0\r\n"},
        {"SET i 12345", "+OK\r\n"},
        {"GETRANGE i 1 2", "$2\r\n23\r\n"},
        {"SETRANGE i 0 9", ":5\r\n"},
        {"GET i", "$5\r\n92345\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
}

/* SETRANGE with an empty value or past the string's end (zeros between),
 * multibulk since inline words cannot be empty or hold a NUL; and each
 * write logged as sent, so a replica ends the same. */
TEST(setrange_pads_with_zeros_and_is_logged_as_sent) {
    kv k;
    buf out;
    kv_client cl;
    open_kv_with_client(&k, false, &cl, &out);
    k.max_string = 16;
    static const struct {
        const char *req;
        size_t len;
        const char *want;
        size_t wlen;
    } cases[] = {
        {S("*4\r\n$8\r\nSETRANGE\r\n$1\r\nn\r\n$1\r\n5\r\n$0\r\n\r\n"),
         S(":0\r\n")},
        {S("*2\r\n$6\r\nEXISTS\r\n$1\r\nn\r\n"), S(":0\r\n")},
        {S("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n"), S("+OK\r\n")},
        {S("*4\r\n$8\r\nSETRANGE\r\n$1\r\nk\r\n$3\r\n100\r\n$0\r\n\r\n"),
         S(":5\r\n")},
        {S("*4\r\n$8\r\nSETRANGE\r\n$1\r\nk\r\n$1\r\n7\r\n$2\r\nxy\r\n"),
         S(":9\r\n")},
        {S("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), S("$9\r\nhello\0\0xy\r\n")},
        {S("*4\r\n$8\r\nSETRANGE\r\n$1\r\nz\r\n$1\r\n2\r\n$2\r\nab\r\n"),
         S(":4\r\n")},
        {S("*2\r\n$3\r\nGET\r\n$1\r\nz\r\n"), S("$4\r\n\0\0ab\r\n")},
        /* proto-max-bulk-len (16 here) bounds the result, as APPEND's */
        {S("*4\r\n$8\r\nSETRANGE\r\n$1\r\nk\r\n$2\r\n15\r\n$1\r\nx\r\n"),
         S(":16\r\n")},
        {S("*4\r\n$8\r\nSETRANGE\r\n$1\r\nk\r\n$2\r\n15\r\n$2\r\nxy\r\n"),
         S("-ERR string exceeds maximum allowed size "
           "(proto-max-bulk-len)\r\n")},
        {S("*4\r\n$8\r\nSETRANGE\r\n$1\r\nw\r\n$2\r\n16\r\n$1\r\nx\r\n"),
         S("-ERR string exceeds maximum allowed size "
           "(proto-max-bulk-len)\r\n")},
        {S("*2\r\n$6\r\nEXISTS\r\n$1\r\nw\r\n"), S(":0\r\n")},
        {S("*4\r\n$8\r\nSETRANGE\r\n$1\r\nk\r\n$19\r\n"
           "9223372036854775807\r\n$2\r\nab\r\n"),
         S("-ERR string exceeds maximum allowed size "
           "(proto-max-bulk-len)\r\n")},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = exec_raw(&k, &cl, &out, cases[i].req, cases[i].len);
        if (out.len != cases[i].wlen || memcmp(got, cases[i].want, out.len))
            check_fail(__FILE__, __LINE__, "case %zu: %s", i, got);
    }
    CHECK(
        strcmp(last_record(&k),
               "*4\r\n$8\r\nSETRANGE\r\n$1\r\nk\r\n$2\r\n15\r\n$1\r\nx\r\n") ==
        0);
    check_replica_agrees(&k);
    close_kv_with_client(&k, &cl, &out);
}

TEST(getdel_getex_as_redis) {
    /* Redis 7.0's words (redis-server 7.0.15 answered each of these):
     * GETEX reads its options first, then the key and its type, and only
     * then the time; a missing key is nil whatever the time says. */
    static const char *const cases[][2] = {
        {"GETDEL k", "$-1\r\n"},
        {"GETEX k", "$-1\r\n"},
        {"GETEX k EX 0", "$-1\r\n"},
        {"GETEX k EX x", "$-1\r\n"},
        {"GETEX k FOO", "-ERR syntax error\r\n"},
        {"GETEX k EX", "-ERR syntax error\r\n"},
        {"SET k v", "+OK\r\n"},
        {"GETEX k EX 0", "-ERR invalid expire time in 'getex' command\r\n"},
        {"GETEX k EX x", "-ERR value is not an integer or out of range\r\n"},
        {"GETEX k EX -1", "-ERR invalid expire time in 'getex' command\r\n"},
        {"GETEX k PX 9223372036854775807",
         "-ERR invalid expire time in 'getex' command\r\n"},
        {"GETEX k EX 9223372036854775",
         "-ERR invalid expire time in 'getex' command\r\n"},
        {"GETEX k PXAT 0", "-ERR invalid expire time in 'getex' command\r\n"},
        {"GETEX k EXAT 9223372036854775807",
         "-ERR invalid expire time in 'getex' command\r\n"},
        {"GETEX k EX 100 EX 200", "$1\r\nv\r\n"},
        {"TTL k", ":200\r\n"},
        {"GETEX k EX 100 PX 200", "-ERR syntax error\r\n"},
        {"GETEX k PERSIST", "$1\r\nv\r\n"},
        {"TTL k", ":-1\r\n"},
        {"GETEX k PERSIST PERSIST", "$1\r\nv\r\n"},
        {"GETEX k EX 10 PERSIST", "-ERR syntax error\r\n"},
        {"GETEX k PERSIST EX 10", "-ERR syntax error\r\n"},
        {"GETEX k KEEPTTL", "-ERR syntax error\r\n"},
        {"GETEX k NX", "-ERR syntax error\r\n"},
        {"GETEX k GET", "-ERR syntax error\r\n"},
        {"GETEX k ex 100", "$1\r\nv\r\n"},
        {"TTL k", ":100\r\n"},
        {"GETEX k EXAT 1", "$1\r\nv\r\n"},
        {"EXISTS k", ":0\r\n"},
        {"LPUSH l a", ":1\r\n"},
        {"GETEX l", "-WRONGTYPE Operation against a key holding the wrong "
                    "kind of value\r\n"},
        {"GETEX l EX 0", "-WRONGTYPE Operation against a key holding the "
                         "wrong kind of value\r\n"},
        {"GETEX l FOO", "-ERR syntax error\r\n"},
        {"GETDEL l", "-WRONGTYPE Operation against a key holding the wrong "
                     "kind of value\r\n"},
        {"SET k v", "+OK\r\n"},
        {"GETDEL k", "$1\r\nv\r\n"},
        {"EXISTS k", ":0\r\n"},
        {"GETDEL", "-ERR wrong number of arguments for 'getdel' command\r\n"},
        {"GETDEL a b",
         "-ERR wrong number of arguments for 'getdel' command\r\n"},
        {"GETEX", "-ERR wrong number of arguments for 'getex' command\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
}

TEST(getdel_getex_logged_so_replicas_agree) {
    /* GETEX is logged as what it did (Redis propagates it as PEXPIREAT,
     * DEL or PERSIST), GETDEL as a DEL; a read changes nothing and logs
     * nothing; a replica refuses both as writes. */
    kv p;
    kv_setup(&p, false);
    buf out = {0};
    exec_words(&p, &out, "SET a 1");
    exec_words(&p, &out, "SET b 2");
    exec_words(&p, &out, "SET c 3 PX 100000");
    exec_words(&p, &out, "SET d 4");
    uint64_t end = p.log.end;
    CHECK(strcmp(exec_words(&p, &out, "GETEX a"), "$1\r\n1\r\n") == 0);
    CHECK(strcmp(exec_words(&p, &out, "GETEX d PERSIST"), "$1\r\n4\r\n") == 0);
    CHECK(strcmp(exec_words(&p, &out, "GETDEL nokey"), "$-1\r\n") == 0);
    CHECK_U64_EQ(p.log.end, end);
    CHECK(strcmp(exec_words(&p, &out, "GETEX a PXAT 99999999999999"),
                 "$1\r\n1\r\n") == 0);
    CHECK(strcmp(last_record(&p), "*3\r\n$9\r\nPEXPIREAT\r\n$1\r\na\r\n$14\r\n"
                                  "99999999999999\r\n") == 0);
    CHECK(strcmp(exec_words(&p, &out, "GETEX b EX 1000"), "$1\r\n2\r\n") == 0);
    CHECK(strncmp(last_record(&p), "*3\r\n$9\r\nPEXPIREAT\r\n$1\r\nb\r\n",
                  26) == 0);
    CHECK(strcmp(exec_words(&p, &out, "GETEX c PERSIST"), "$1\r\n3\r\n") == 0);
    CHECK(strcmp(last_record(&p), "*2\r\n$7\r\nPERSIST\r\n$1\r\nc\r\n") == 0);
    CHECK(strcmp(exec_words(&p, &out, "GETEX a EXAT 1"), "$1\r\n1\r\n") == 0);
    CHECK(strcmp(last_record(&p), "*2\r\n$3\r\nDEL\r\n$1\r\na\r\n") == 0);
    CHECK(strcmp(exec_words(&p, &out, "GETDEL d"), "$1\r\n4\r\n") == 0);
    CHECK(strcmp(last_record(&p), "*2\r\n$3\r\nDEL\r\n$1\r\nd\r\n") == 0);
    check_replica_agrees(&p);
    kv r;
    kv_setup(&r, true);
    CHECK(strcmp(exec_words(&r, &out, "GETEX b"), KV_READONLY_ERR "\r\n") == 0);
    CHECK(strcmp(exec_words(&r, &out, "GETDEL b"), KV_READONLY_ERR "\r\n") ==
          0);
    kv_free(&r);
    buf_free(&out);
    kv_free(&p);
}

TEST(incrbyfloat_as_redis) {
    /* Redis 7.0's words and digits (redis-server 7.0.15 answered each of
     * these): long double arithmetic, printed %.17Lf with the zeros after
     * the point trimmed, -0 as 0; a value or increment strtold does not
     * take whole, NaN, an overflow or a leading space is not a float. */
    static const char *const cases[][2] = {
        {"SET f 10.5", "+OK\r\n"},
        {"INCRBYFLOAT f 0.1", "$4\r\n10.6\r\n"},
        {"INCRBYFLOAT nf 5.0e3", "$4\r\n5000\r\n"},
        {"INCRBYFLOAT f inf",
         "-ERR increment would produce NaN or Infinity\r\n"},
        {"INCRBYFLOAT f nan", "-ERR value is not a valid float\r\n"},
        {"INCRBYFLOAT f x", "-ERR value is not a valid float\r\n"},
        {"SET s abc", "+OK\r\n"},
        {"INCRBYFLOAT s x", "-ERR value is not a valid float\r\n"},
        {"INCRBYFLOAT s 1", "-ERR value is not a valid float\r\n"},
        {"SET n -0", "+OK\r\n"},
        {"INCRBYFLOAT n 0", "$1\r\n0\r\n"},
        {"INCRBYFLOAT n2 -0.0", "$1\r\n0\r\n"},
        {"INCRBYFLOAT n4 0x10", "$2\r\n16\r\n"},
        {"INCRBYFLOAT n5 1e-20", "$1\r\n0\r\n"},
        {"INCRBYFLOAT n7 1.23456789012345678901",
         "$19\r\n1.23456789012345679\r\n"},
        {"INCRBYFLOAT n11 1e5000", "-ERR value is not a valid float\r\n"},
        {"SET hs 1e4932", "+OK\r\n"},
        {"INCRBYFLOAT hs 1e4932",
         "-ERR increment would produce NaN or Infinity\r\n"},
        {"LPUSH l a", ":1\r\n"},
        {"INCRBYFLOAT l x", "-WRONGTYPE Operation against a key holding the "
                            "wrong kind of value\r\n"},
        {"INCRBYFLOAT f",
         "-ERR wrong number of arguments for 'incrbyfloat' command\r\n"},
        {"INCRBYFLOAT n10 1e308",
         "$308\r\n9999999999999999999668587965584564566056009984741556720779"
         "704799492173486883806187210012692188853932044674722505401322315213"
         "474959396058359742081443019641876795910001960319077866310960450710"
         "666793915339578893891456054356306126836490161863021708658925344488"
         "1623791300855757318142424510452728255046343928578048\r\n"},
        {"INCRBYFLOAT n10 1e308",
         "$309\r\n1999999999999999999933717593116912913211201996948311344155"
         "940959898434697376761237442002538437770786408934944501080264463042"
         "694991879211671948416288603928375359182000392063815573262192090142"
         "133358783067915778778291210871261225367298032372604341731785068897"
         "63247582601711514636284849020905456510092687857156096\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
    kv k;
    kv_setup(&k, false);
    buf out = {0};
    static const char *const bad[] = {"", " 1", "1 ", "\t1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        resp_arg a[] = {
            {"INCRBYFLOAT", 11}, {"x", 1}, {bad[i], strlen(bad[i])}};
        CHECK_REPLY(exec_args(&k, NULL, &out, a, 3),
                    "-ERR value is not a valid float\r\n");
    }
    resp_arg nul[] = {{"INCRBYFLOAT", 11}, {"x", 1}, {"1\0abc", 5}};
    CHECK_REPLY(exec_args(&k, NULL, &out, nul, 3),
                "-ERR value is not a valid float\r\n");
    CHECK(strcmp(exec_words(&k, &out, "EXISTS x"), ":0\r\n") == 0);
    buf_free(&out);
    kv_free(&k);
}

TEST(incrbyfloat_logged_as_set_keepttl) {
    /* Redis replicates INCRBYFLOAT as SET key result KEEPTTL, so a
     * replica never rounds on its own; the key keeps its time to live. */
    kv p;
    kv_setup(&p, false);
    buf out = {0};
    exec_words(&p, &out, "SET f 1.1 PX 100000");
    CHECK(strcmp(exec_words(&p, &out, "INCRBYFLOAT f 2.2"), "$3\r\n3.3\r\n") ==
          0);
    CHECK(strcmp(last_record(&p), "*4\r\n$3\r\nSET\r\n$1\r\nf\r\n$3\r\n3.3\r\n"
                                  "$7\r\nKEEPTTL\r\n") == 0);
    CHECK(strcmp(exec_words(&p, &out, "TTL f"), ":100\r\n") == 0);
    uint64_t end = p.log.end;
    exec_words(&p, &out, "INCRBYFLOAT f x");
    exec_words(&p, &out, "INCRBYFLOAT f inf");
    CHECK_U64_EQ(p.log.end, end); /* refused: nothing logged */
    exec_words(&p, &out, "HINCRBYFLOAT h a 0.5");
    CHECK(strcmp(last_record(&p), "*4\r\n$4\r\nHSET\r\n$1\r\nh\r\n$1\r\na\r\n"
                                  "$3\r\n0.5\r\n") == 0);
    exec_words(&p, &out, "HINCRBYFLOAT h a 1e-3");
    check_replica_agrees(&p);
    buf_free(&out);
    kv_free(&p);
}

TEST(hincrbyfloat_as_redis) {
    /* Redis 7.0's words (redis-server 7.0.15 answered each of these): the
     * increment is read first, then the key's type, then the field. */
    static const char *const cases[][2] = {
        {"HINCRBYFLOAT h f 1.5", "$3\r\n1.5\r\n"},
        {"HINCRBYFLOAT h f inf", "-ERR value is NaN or Infinity\r\n"},
        {"HINCRBYFLOAT h f nan", "-ERR value is not a valid float\r\n"},
        {"HINCRBYFLOAT h f x", "-ERR value is not a valid float\r\n"},
        {"HSET h g abc", ":1\r\n"},
        {"HINCRBYFLOAT h g 1", "-ERR hash value is not a float\r\n"},
        {"HINCRBYFLOAT h g x", "-ERR value is not a valid float\r\n"},
        {"SET s 1", "+OK\r\n"},
        {"HINCRBYFLOAT s f 1", "-WRONGTYPE Operation against a key holding "
                               "the wrong kind of value\r\n"},
        {"HINCRBYFLOAT s f x", "-ERR value is not a valid float\r\n"},
        {"HINCRBYFLOAT s f inf", "-ERR value is NaN or Infinity\r\n"},
        {"HSET h big 1e4932", ":1\r\n"},
        {"HINCRBYFLOAT h big 1e4932",
         "-ERR increment would produce NaN or Infinity\r\n"},
        {"HINCRBYFLOAT h f 1.5", "$1\r\n3\r\n"},
        {"HINCRBYFLOAT nh f -0", "$1\r\n0\r\n"},
        {"HGETALL nh", "*2\r\n$1\r\nf\r\n$1\r\n0\r\n"},
        {"HINCRBYFLOAT h",
         "-ERR wrong number of arguments for 'hincrbyfloat' command\r\n"},
        {"HINCRBYFLOAT h f 1 2",
         "-ERR wrong number of arguments for 'hincrbyfloat' command\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
}

TEST(sscan_hscan_zscan_as_redis) {
    /* Redis 7.0's words (redis-server 7.0.15 answered each of these): the
     * cursor first, then the key (missing: an empty scan, whatever the
     * options) and its type, then the options (no TYPE); a small
     * collection comes whole, cursor 0, whatever COUNT says; a sorted
     * set in score order. */
    static const char *const cases[][2] = {
        {"SSCAN s 0", "*2\r\n$1\r\n0\r\n*0\r\n"},
        {"SSCAN s x", "-ERR invalid cursor\r\n"},
        {"SSCAN s 0 COUNT x", "*2\r\n$1\r\n0\r\n*0\r\n"},
        {"SSCAN s 0 TYPE string", "*2\r\n$1\r\n0\r\n*0\r\n"},
        {"SADD s c", ":1\r\n"},
        {"SSCAN s 0", "*2\r\n$1\r\n0\r\n*1\r\n$1\r\nc\r\n"},
        {"SSCAN s 0 TYPE string", "-ERR syntax error\r\n"},
        {"SSCAN s 0 COUNT 0", "-ERR syntax error\r\n"},
        {"SSCAN s 0 COUNT -1", "-ERR syntax error\r\n"},
        {"SSCAN s 0 COUNT x",
         "-ERR value is not an integer or out of range\r\n"},
        {"SSCAN s 0 COUNT 9223372036854775808",
         "-ERR value is not an integer or out of range\r\n"},
        {"SSCAN s 0 MATCH", "-ERR syntax error\r\n"},
        {"SSCAN s 0 NOSUCH", "-ERR syntax error\r\n"},
        {"SSCAN s 0 MATCH [ab]", "*2\r\n$1\r\n0\r\n*0\r\n"},
        {"SSCAN s -1", "*2\r\n$1\r\n0\r\n*1\r\n$1\r\nc\r\n"},
        {"HSET h a 2", ":1\r\n"},
        {"HSCAN h 0 COUNT 1", "*2\r\n$1\r\n0\r\n*2\r\n$1\r\na\r\n$1\r\n2\r\n"},
        {"HSCAN h 0 MATCH b", "*2\r\n$1\r\n0\r\n*0\r\n"},
        {"ZADD z 2 b 1 a 1.5 c inf d 0.1 e", ":5\r\n"},
        {"ZSCAN z 0",
         "*2\r\n$1\r\n0\r\n*10\r\n$1\r\ne\r\n$19\r\n0.10000000000000001\r\n$1"
         "\r\na\r\n$1\r\n1\r\n$1\r\nc\r\n$3\r\n1.5\r\n$1\r\nb\r\n$1\r\n2\r\n$1"
         "\r\nd\r\n$3\r\ninf\r\n"},
        {"ZSCAN z 0 MATCH c",
         "*2\r\n$1\r\n0\r\n*2\r\n$1\r\nc\r\n$3\r\n1.5\r\n"},
        {"SET str x", "+OK\r\n"},
        {"SSCAN str 0", "-WRONGTYPE Operation against a key holding the wrong "
                        "kind of value\r\n"},
        {"SSCAN str x", "-ERR invalid cursor\r\n"},
        {"HSCAN s 0", "-WRONGTYPE Operation against a key holding the wrong "
                      "kind of value\r\n"},
        {"ZSCAN h 0 COUNT x", "-WRONGTYPE Operation against a key holding the "
                              "wrong kind of value\r\n"},
        {"SSCAN s", "-ERR wrong number of arguments for 'sscan' command\r\n"},
        {"HSCAN h", "-ERR wrong number of arguments for 'hscan' command\r\n"},
        {"ZSCAN z", "-ERR wrong number of arguments for 'zscan' command\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
}

/* Walks "<cmd> key cursor COUNT n" to cursor 0, adding members to the
 * key between steps when grow says so: each member there from the start
 * must come back, and each reply must be well formed. */
static void scan_walk_sees_every_member(const char *cmd, const char *add,
                                        bool pairs, bool grow) {
    kv k;
    kv_setup(&k, false);
    buf out = {0};
    char line[256];
    enum { START = 1000 };
    for (int i = 0; i < START; i++) {
        snprintf(line, sizeof line, add, i, i);
        exec_words(&k, &out, line);
    }
    static bool seen[START];
    memset(seen, 0, sizeof seen);
    unsigned long long cur = 0;
    int steps = 0, added = START;
    do {
        snprintf(line, sizeof line, "%s key %llu COUNT %d", cmd, cur,
                 1 + steps % 13);
        const char *r = exec_words(&k, &out, line);
        char *end;
        CHECK(strncmp(r, "*2\r\n$", 5) == 0);
        r = strchr(r, '\n') + 1; /* the cursor's length */
        r = strchr(r, '\n') + 1;
        cur = strtoull(r, &end, 10);
        CHECK(*end == '\r');
        r = end + 2;
        CHECK(*r == '*');
        long n = strtol(r + 1, &end, 10);
        r = end + 2;
        CHECK(!pairs || n % 2 == 0);
        for (long i = 0; i < n; i++) {
            long len = strtol(r + 1, &end, 10);
            r = end + 2;
            if (!pairs || i % 2 == 0) {
                int m = -1;
                CHECK(sscanf(r, "m%d", &m) == 1 || sscanf(r, "%d", &m) == 1);
                if (m >= 0 && m < START) seen[m] = true;
            }
            r += len + 2;
        }
        if (grow && steps % 3 == 0) { /* the table doubles as it goes */
            for (int j = 0; j < 50; j++, added++) {
                snprintf(line, sizeof line, add, added, added);
                exec_words(&k, &out, line);
            }
        }
        CHECK(++steps < 100000);
    } while (cur != 0);
    for (int i = 0; i < START; i++)
        if (!seen[i]) check_fail(__FILE__, __LINE__, "%s: m%d missed", cmd, i);
    CHECK(steps > 10); /* a large collection is walked in steps */
    buf_free(&out);
    kv_free(&k);
}

TEST(collection_scans_return_every_member) {
    /* SCAN's promise for SSCAN, HSCAN and ZSCAN: every member there for
     * the whole walk comes back at least once, while the collection
     * grows between the steps. */
    scan_walk_sees_every_member("SSCAN", "SADD key m%d", false, false);
    scan_walk_sees_every_member("SSCAN", "SADD key m%d", false, true);
    scan_walk_sees_every_member("HSCAN", "HSET key m%d %d", true, true);
    scan_walk_sees_every_member("ZSCAN", "ZADD key %2$d m%1$d", true, true);
}

TEST(hash_commands_as_redis) {
    /* HINCRBY, HKEYS, HVALS, HSETNX and HSTRLEN in Redis 7.0's words
     * (redis-server 7.0.15 answered each of these): HINCRBY reads its
     * increment, then the key's type, then the field's value (Redis'
     * string2ll: no leading zero, no "-0"). */
    static const char *const cases[][2] = {
        {"HINCRBY h f 5", ":5\r\n"},
        {"HINCRBY h f -7", ":-2\r\n"},
        {"HINCRBY h f x", "-ERR value is not an integer or out of range\r\n"},
        {"HINCRBY h f 9223372036854775808",
         "-ERR value is not an integer or out of range\r\n"},
        {"HINCRBY h f 1.5", "-ERR value is not an integer or out of range\r\n"},
        {"HINCRBY h f 9223372036854775807", ":9223372036854775805\r\n"},
        {"HINCRBY h g 9223372036854775807", ":9223372036854775807\r\n"},
        {"HINCRBY h g 1", "-ERR increment or decrement would overflow\r\n"},
        {"HINCRBY h g -9223372036854775808", ":-1\r\n"},
        {"HSET h s abc", ":1\r\n"},
        {"HINCRBY h s 1", "-ERR hash value is not an integer\r\n"},
        {"HINCRBY h s x", "-ERR value is not an integer or out of range\r\n"},
        {"HSET h z 007", ":1\r\n"},
        {"HINCRBY h z 1", "-ERR hash value is not an integer\r\n"},
        {"HSET h m -0", ":1\r\n"},
        {"HINCRBY h m 1", "-ERR hash value is not an integer\r\n"},
        {"HGET h f", "$19\r\n9223372036854775805\r\n"},
        {"SET str v", "+OK\r\n"},
        {"HINCRBY str f 1", "-WRONGTYPE Operation against a key holding the "
                            "wrong kind of value\r\n"},
        {"HINCRBY str f x", "-ERR value is not an integer or out of range\r\n"},
        {"HINCRBY nh f 0", ":0\r\n"},
        {"HGETALL nh", "*2\r\n$1\r\nf\r\n$1\r\n0\r\n"},
        {"HINCRBY h f",
         "-ERR wrong number of arguments for 'hincrby' command\r\n"},
        {"HINCRBY h f 1 2",
         "-ERR wrong number of arguments for 'hincrby' command\r\n"},
        {"HKEYS nokey", "*0\r\n"},
        {"HVALS nokey", "*0\r\n"},
        {"HKEYS str", "-WRONGTYPE Operation against a key holding the wrong "
                      "kind of value\r\n"},
        {"HVALS str", "-WRONGTYPE Operation against a key holding the wrong "
                      "kind of value\r\n"},
        {"HKEYS nh", "*1\r\n$1\r\nf\r\n"},
        {"HVALS nh", "*1\r\n$1\r\n0\r\n"},
        {"HKEYS", "-ERR wrong number of arguments for 'hkeys' command\r\n"},
        {"HVALS a b", "-ERR wrong number of arguments for 'hvals' command\r\n"},
        {"HSETNX hs a 1", ":1\r\n"},
        {"HSETNX hs a 2", ":0\r\n"},
        {"HGET hs a", "$1\r\n1\r\n"},
        {"HSETNX str a 1", "-WRONGTYPE Operation against a key holding the "
                           "wrong kind of value\r\n"},
        {"HSETNX hs",
         "-ERR wrong number of arguments for 'hsetnx' command\r\n"},
        {"HSETNX hs a",
         "-ERR wrong number of arguments for 'hsetnx' command\r\n"},
        {"HSETNX hs a 1 2",
         "-ERR wrong number of arguments for 'hsetnx' command\r\n"},
        {"HSTRLEN hs a", ":1\r\n"},
        {"HSTRLEN hs b", ":0\r\n"},
        {"HSTRLEN nokey a", ":0\r\n"},
        {"HSTRLEN str a", "-WRONGTYPE Operation against a key holding the "
                          "wrong kind of value\r\n"},
        {"HINCRBY hs n 100", ":100\r\n"},
        {"HSTRLEN hs n", ":3\r\n"},
        {"HSTRLEN hs",
         "-ERR wrong number of arguments for 'hstrlen' command\r\n"},
        {"HSTRLEN hs a b",
         "-ERR wrong number of arguments for 'hstrlen' command\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
}

TEST(hash_commands_logged_so_replicas_agree) {
    /* HINCRBY and HSETNX are logged as sent when they change the hash
     * (deterministic), and not when refused or a no-op; the reads log
     * nothing. */
    kv p;
    kv_setup(&p, false);
    buf out = {0};
    exec_words(&p, &out, "HINCRBY h a 5");
    CHECK(strcmp(last_record(&p), "*4\r\n$7\r\nHINCRBY\r\n$1\r\nh\r\n$1\r\na"
                                  "\r\n$1\r\n5\r\n") == 0);
    exec_words(&p, &out, "HSETNX h b x");
    CHECK(strcmp(last_record(&p), "*4\r\n$6\r\nHSETNX\r\n$1\r\nh\r\n$1\r\nb"
                                  "\r\n$1\r\nx\r\n") == 0);
    uint64_t end = p.log.end;
    exec_words(&p, &out, "HSETNX h b y");
    exec_words(&p, &out, "HINCRBY h b 1");
    exec_words(&p, &out, "HINCRBY h a x");
    exec_words(&p, &out, "HKEYS h");
    exec_words(&p, &out, "HVALS h");
    exec_words(&p, &out, "HSTRLEN h a");
    CHECK_U64_EQ(p.log.end, end);
    exec_words(&p, &out, "HINCRBY h a -9");
    exec_words(&p, &out, "HSETNX n f v");
    check_replica_agrees(&p);
    kv r;
    kv_setup(&r, true);
    CHECK(strcmp(exec_words(&r, &out, "HINCRBY h a 1"),
                 KV_READONLY_ERR "\r\n") == 0);
    CHECK(strcmp(exec_words(&r, &out, "HSETNX h a 1"),
                 KV_READONLY_ERR "\r\n") == 0);
    CHECK(strcmp(exec_words(&r, &out, "HKEYS h"), "*0\r\n") == 0);
    kv_free(&r);
    buf_free(&out);
    kv_free(&p);
}

TEST(hkeys_and_hvals_in_one_order) {
    /* HKEYS and HVALS walk a hash in the same order (as HGETALL), so a
     * client may zip them, as Redis allows. */
    kv k;
    kv_setup(&k, false);
    buf out = {0};
    char line[64];
    for (int i = 0; i < 300; i++) {
        snprintf(line, sizeof line, "HSET h f%d v%d", i, i);
        exec_words(&k, &out, line);
    }
    char *keys = strdup(exec_words(&k, &out, "HKEYS h"));
    const char *vals = exec_words(&k, &out, "HVALS h");
    CHECK(strncmp(keys, "*300\r\n", 6) == 0 &&
          strncmp(vals, "*300\r\n", 6) == 0);
    const char *kp = keys + 6, *vp = vals + 6;
    for (int i = 0; i < 300; i++) {
        int a = -1, b = -2;
        CHECK(sscanf(strchr(kp, '\n') + 1, "f%d", &a) == 1);
        CHECK(sscanf(strchr(vp, '\n') + 1, "v%d", &b) == 1);
        CHECK_EQ(a, b);
        kp = strchr(strchr(kp, '\n') + 1, '\n') + 1;
        vp = strchr(strchr(vp, '\n') + 1, '\n') + 1;
    }
    free(keys);
    buf_free(&out);
    kv_free(&k);
}

TEST(setex_psetex_unlink_touch_as_redis) {
    /* Redis 7.0's words (redis-server 7.0.15 answered each of these):
     * SETEX and PSETEX read the time first, as SET ... EX does (its
     * errors name the command), and replace a key of any type; UNLINK is
     * DEL, TOUCH counts as EXISTS does (a key named twice twice). */
    static const char *const cases[][2] = {
        {"SETEX k 100 v", "+OK\r\n"},
        {"TTL k", ":100\r\n"},
        {"GET k", "$1\r\nv\r\n"},
        {"SETEX k 0 v", "-ERR invalid expire time in 'setex' command\r\n"},
        {"SETEX k -1 v", "-ERR invalid expire time in 'setex' command\r\n"},
        {"SETEX k x v", "-ERR value is not an integer or out of range\r\n"},
        {"SETEX k 9223372036854775807 v",
         "-ERR invalid expire time in 'setex' command\r\n"},
        {"SETEX k 9223372036854775 v",
         "-ERR invalid expire time in 'setex' command\r\n"},
        {"SETEX k 9223372036854774 v",
         "-ERR invalid expire time in 'setex' command\r\n"},
        {"SETEX k 1.5 v", "-ERR value is not an integer or out of range\r\n"},
        {"PSETEX k 100000 w", "+OK\r\n"},
        {"TTL k", ":100\r\n"}, /* rounded: a slow run's ms do not show */
        {"GET k", "$1\r\nw\r\n"},
        {"PSETEX k 0 v", "-ERR invalid expire time in 'psetex' command\r\n"},
        {"PSETEX k -5 v", "-ERR invalid expire time in 'psetex' command\r\n"},
        {"PSETEX k x v", "-ERR value is not an integer or out of range\r\n"},
        {"PSETEX k 9223372036854775807 v",
         "-ERR invalid expire time in 'psetex' command\r\n"},
        {"GET k", "$1\r\nw\r\n"},
        {"LPUSH l a", ":1\r\n"},
        {"SETEX l 100 v", "+OK\r\n"},
        {"TYPE l", "+string\r\n"},
        {"TTL l", ":100\r\n"},
        {"SETEX l x v", "-ERR value is not an integer or out of range\r\n"},
        {"SETEX k 100",
         "-ERR wrong number of arguments for 'setex' command\r\n"},
        {"SETEX k 100 v w",
         "-ERR wrong number of arguments for 'setex' command\r\n"},
        {"PSETEX k", "-ERR wrong number of arguments for 'psetex' command\r\n"},
        {"UNLINK nokey", ":0\r\n"},
        {"SET a 1", "+OK\r\n"},
        {"SET b 2", "+OK\r\n"},
        {"UNLINK a b c a", ":2\r\n"},
        {"EXISTS a b", ":0\r\n"},
        {"UNLINK", "-ERR wrong number of arguments for 'unlink' command\r\n"},
        {"TOUCH nokey", ":0\r\n"},
        {"SET a 1", "+OK\r\n"},
        {"TOUCH a a nokey b l", ":3\r\n"},
        {"TOUCH", "-ERR wrong number of arguments for 'touch' command\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
}

TEST(setex_logged_as_set_pxat) {
    /* SETEX and PSETEX are logged as SET ... PXAT of an absolute time
     * (as Redis 7.0 propagates them), UNLINK as a DEL of what it found;
     * TOUCH is a read, allowed on a replica. */
    kv p;
    kv_setup(&p, false);
    buf out = {0};
    CHECK(strcmp(exec_words(&p, &out, "SETEX a 100 v"), "+OK\r\n") == 0);
    char want[128];
    snprintf(want, sizeof want,
             "*5\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\nv\r\n$4\r\nPXAT\r\n$13\r\n"
             "%lld\r\n",
             (long long)(p.cmd_now + 100000));
    CHECK(strcmp(last_record(&p), want) == 0);
    CHECK(strcmp(exec_words(&p, &out, "PSETEX b 5000 w"), "+OK\r\n") == 0);
    snprintf(want, sizeof want,
             "*5\r\n$3\r\nSET\r\n$1\r\nb\r\n$1\r\nw\r\n$4\r\nPXAT\r\n$13\r\n"
             "%lld\r\n",
             (long long)(p.cmd_now + 5000));
    CHECK(strcmp(last_record(&p), want) == 0);
    uint64_t end = p.log.end;
    exec_words(&p, &out, "SETEX a 0 v");
    exec_words(&p, &out, "PSETEX a x v");
    exec_words(&p, &out, "UNLINK nokey");
    exec_words(&p, &out, "TOUCH a b");
    CHECK_U64_EQ(p.log.end, end);
    exec_words(&p, &out, "SET c 1");
    CHECK(strcmp(exec_words(&p, &out, "UNLINK c nokey"), ":1\r\n") == 0);
    check_replica_agrees(&p);
    kv r;
    kv_setup(&r, true);
    CHECK(strcmp(exec_words(&r, &out, "SETEX a 1 v"), KV_READONLY_ERR "\r\n") ==
          0);
    CHECK(strcmp(exec_words(&r, &out, "UNLINK a"), KV_READONLY_ERR "\r\n") ==
          0);
    CHECK(strcmp(exec_words(&r, &out, "TOUCH a"), ":0\r\n") == 0);
    kv_free(&r);
    buf_free(&out);
    kv_free(&p);
}

TEST(rename_renamenx_as_redis) {
    /* Redis 7.0's words (redis-server 7.0.15 answered each of these): a
     * missing source is an error even onto itself; a key renamed onto
     * itself is left; the key's expiry moves with it, and the target's
     * old value and expiry go. */
    static const char *const cases[][2] = {
        {"RENAME a b", "-ERR no such key\r\n"},
        {"RENAMENX a b", "-ERR no such key\r\n"},
        {"RENAME a a", "-ERR no such key\r\n"},
        {"RENAMENX a a", "-ERR no such key\r\n"},
        {"SET a 1", "+OK\r\n"},
        {"RENAME a a", "+OK\r\n"},
        {"RENAMENX a a", ":0\r\n"},
        {"GET a", "$1\r\n1\r\n"},
        {"RENAME a b", "+OK\r\n"},
        {"EXISTS a", ":0\r\n"},
        {"GET b", "$1\r\n1\r\n"},
        {"SET c 3 EX 100", "+OK\r\n"},
        {"RENAME c b", "+OK\r\n"},
        {"TTL b", ":100\r\n"},
        {"GET b", "$1\r\n3\r\n"},
        {"RENAME b c", "+OK\r\n"},
        {"TTL c", ":100\r\n"},
        {"LPUSH l x y", ":2\r\n"},
        {"RENAMENX l c", ":0\r\n"},
        {"RENAMENX l d", ":1\r\n"},
        {"LRANGE d 0 -1", "*2\r\n$1\r\ny\r\n$1\r\nx\r\n"},
        {"TYPE l", "+none\r\n"},
        {"SET e 5", "+OK\r\n"},
        {"RENAMENX c e", ":0\r\n"},
        {"RENAME d e", "+OK\r\n"},
        {"TYPE e", "+list\r\n"},
        {"TTL e", ":-1\r\n"},
        {"RENAME e", "-ERR wrong number of arguments for 'rename' command\r\n"},
        {"RENAME e f g",
         "-ERR wrong number of arguments for 'rename' command\r\n"},
        {"RENAMENX e",
         "-ERR wrong number of arguments for 'renamenx' command\r\n"},
        {"SET x 1 EX 50", "+OK\r\n"},
        {"SET y 2", "+OK\r\n"},
        {"RENAME y x", "+OK\r\n"},
        {"TTL x", ":-1\r\n"},
        {"SET p 1 EX 50", "+OK\r\n"},
        {"SET q 2 EX 70", "+OK\r\n"},
        {"RENAME q p", "+OK\r\n"},
        {"TTL p", ":70\r\n"},
        {"EXISTS q", ":0\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
}

TEST(rename_moves_the_expiry_and_is_logged) {
    /* RENAME and RENAMENX are logged as sent when they moved a key (the
     * same move on the same keyspace); the store's expiry heap then holds
     * the key under its new name, and a target's old expiry is gone. */
    kv p;
    kv_setup(&p, false);
    buf out = {0};
    exec_words(&p, &out, "SET a 1 PX 100000");
    exec_words(&p, &out, "SET b 2 PX 50000");
    exec_words(&p, &out, "SET c 3");
    CHECK(strcmp(exec_words(&p, &out, "RENAME a n"), "+OK\r\n") == 0);
    CHECK(strcmp(last_record(&p),
                 "*3\r\n$6\r\nRENAME\r\n$1\r\na\r\n$1\r\nn\r\n") == 0);
    CHECK_EQ(p.db.nheap, 2);
    CHECK(strcmp(exec_words(&p, &out, "RENAMENX c b"), ":0\r\n") == 0);
    uint64_t end = p.log.end;
    exec_words(&p, &out, "RENAME nokey x");
    exec_words(&p, &out, "RENAME c c");
    exec_words(&p, &out, "RENAMENX c c");
    CHECK_U64_EQ(p.log.end, end);
    CHECK(strcmp(exec_words(&p, &out, "RENAME c b"), "+OK\r\n") == 0);
    CHECK_EQ(p.db.nheap, 1); /* b's old expiry went with its value */
    dict_entry *first = store_first_expiry(&p.db);
    CHECK(first && first->klen == 1 && dict_key(&p.db.d, first)[0] == 'n');
    CHECK(strcmp(exec_words(&p, &out, "RENAMENX n m"), ":1\r\n") == 0);
    first = store_first_expiry(&p.db);
    CHECK(first && first->klen == 1 && dict_key(&p.db.d, first)[0] == 'm');
    CHECK(strcmp(exec_words(&p, &out, "PTTL b"), ":-1\r\n") == 0);
    check_replica_agrees(&p);
    kv r;
    kv_setup(&r, true);
    CHECK(strcmp(exec_words(&r, &out, "RENAME a b"), KV_READONLY_ERR "\r\n") ==
          0);
    kv_free(&r);
    buf_free(&out);
    kv_free(&p);
}

TEST(lrem_lset_ltrim_as_redis) {
    /* Redis 7.0's words (redis-server 7.0.15 answered each of these):
     * LREM and LTRIM read their numbers first, LSET its key first (a
     * missing one: no such key); a list emptied goes. */
    static const char *const cases[][2] = {
        {"LSET l 0 x", "-ERR no such key\r\n"},
        {"LSET l x x", "-ERR no such key\r\n"},
        {"LREM l 0 a", ":0\r\n"},
        {"LREM l x a", "-ERR value is not an integer or out of range\r\n"},
        {"LTRIM l 0 1", "+OK\r\n"},
        {"LTRIM l x 1", "-ERR value is not an integer or out of range\r\n"},
        {"RPUSH l a b a c a d a", ":7\r\n"},
        {"LREM l 2 a", ":2\r\n"},
        {"LRANGE l 0 -1",
         "*5\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\na\r\n$1\r\nd\r\n$1\r\na\r\n"},
        {"LREM l -1 a", ":1\r\n"},
        {"LRANGE l 0 -1", "*4\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\na\r\n$1\r\nd\r\n"},
        {"LREM l 0 a", ":1\r\n"},
        {"LRANGE l 0 -1", "*3\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n"},
        {"LREM l 0 zz", ":0\r\n"},
        {"LREM l 1.5 a", "-ERR value is not an integer or out of range\r\n"},
        {"LSET l 0 X", "+OK\r\n"},
        {"LSET l -1 Y", "+OK\r\n"},
        {"LSET l 3 Z", "-ERR index out of range\r\n"},
        {"LSET l -4 Z", "-ERR index out of range\r\n"},
        {"LSET l 9223372036854775807 Z", "-ERR index out of range\r\n"},
        {"LSET l x Z", "-ERR value is not an integer or out of range\r\n"},
        {"LRANGE l 0 -1", "*3\r\n$1\r\nX\r\n$1\r\nc\r\n$1\r\nY\r\n"},
        {"RPUSH l e f g", ":6\r\n"},
        {"LTRIM l 1 -2", "+OK\r\n"},
        {"LRANGE l 0 -1", "*4\r\n$1\r\nc\r\n$1\r\nY\r\n$1\r\ne\r\n$1\r\nf\r\n"},
        {"LTRIM l -100 100", "+OK\r\n"},
        {"LRANGE l 0 -1", "*4\r\n$1\r\nc\r\n$1\r\nY\r\n$1\r\ne\r\n$1\r\nf\r\n"},
        {"LTRIM l 2 1", "+OK\r\n"},
        {"EXISTS l", ":0\r\n"},
        {"RPUSH m a b c", ":3\r\n"},
        {"LTRIM m x 1", "-ERR value is not an integer or out of range\r\n"},
        {"LTRIM m 0 -9223372036854775808", "+OK\r\n"},
        {"EXISTS m", ":0\r\n"},
        {"RPUSH m a a a", ":3\r\n"},
        {"LREM m -9223372036854775808 a", ":3\r\n"},
        {"EXISTS m", ":0\r\n"},
        {"SET s v", "+OK\r\n"},
        {"LSET s 0 x", "-WRONGTYPE Operation against a key holding the wrong "
                       "kind of value\r\n"},
        {"LSET s x x", "-WRONGTYPE Operation against a key holding the wrong "
                       "kind of value\r\n"},
        {"LREM s 0 a", "-WRONGTYPE Operation against a key holding the wrong "
                       "kind of value\r\n"},
        {"LREM s x a", "-ERR value is not an integer or out of range\r\n"},
        {"LTRIM s 0 1", "-WRONGTYPE Operation against a key holding the wrong "
                        "kind of value\r\n"},
        {"LTRIM s x 0", "-ERR value is not an integer or out of range\r\n"},
        {"LSET s", "-ERR wrong number of arguments for 'lset' command\r\n"},
        {"LREM s 0", "-ERR wrong number of arguments for 'lrem' command\r\n"},
        {"LTRIM s 0", "-ERR wrong number of arguments for 'ltrim' command\r\n"},
        {"LSET s 0 x y",
         "-ERR wrong number of arguments for 'lset' command\r\n"},
    };
    replies_as_redis(cases, sizeof cases / sizeof cases[0]);
}

TEST(lrem_lset_ltrim_on_a_wrapped_list) {
    /* The list's ring wraps (pushed at both ends): LREM from either end,
     * LSET and LTRIM keep the order LRANGE shows, and are logged as sent
     * when they changed the list, so a replica agrees. */
    kv p;
    kv_setup(&p, false);
    buf out = {0};
    exec_words(&p, &out, "RPUSH l a x b x");
    exec_words(&p, &out, "LPUSH l x c x d");
    CHECK(strcmp(exec_words(&p, &out, "LRANGE l 0 -1"),
                 "*8\r\n$1\r\nd\r\n$1\r\nx\r\n$1\r\nc\r\n$1\r\nx\r\n$1\r\na\r\n"
                 "$1\r\nx\r\n$1\r\nb\r\n$1\r\nx\r\n") == 0);
    CHECK(strcmp(exec_words(&p, &out, "LREM l -2 x"), ":2\r\n") == 0);
    CHECK(strcmp(last_record(&p), "*4\r\n$4\r\nLREM\r\n$1\r\nl\r\n$2\r\n-2\r\n"
                                  "$1\r\nx\r\n") == 0);
    CHECK(strcmp(exec_words(&p, &out, "LRANGE l 0 -1"),
                 "*6\r\n$1\r\nd\r\n$1\r\nx\r\n$1\r\nc\r\n$1\r\nx\r\n$1\r\na\r\n"
                 "$1\r\nb\r\n") == 0);
    CHECK(strcmp(exec_words(&p, &out, "LREM l 1 x"), ":1\r\n") == 0);
    CHECK(strcmp(exec_words(&p, &out, "LSET l -2 A"), "+OK\r\n") == 0);
    CHECK(
        strcmp(
            exec_words(&p, &out, "LRANGE l 0 -1"),
            "*5\r\n$1\r\nd\r\n$1\r\nc\r\n$1\r\nx\r\n$1\r\nA\r\n$1\r\nb\r\n") ==
        0);
    exec_words(&p, &out, "LPUSH l y z");
    CHECK(strcmp(exec_words(&p, &out, "LTRIM l 1 -2"), "+OK\r\n") == 0);
    CHECK(
        strcmp(
            exec_words(&p, &out, "LRANGE l 0 -1"),
            "*5\r\n$1\r\ny\r\n$1\r\nd\r\n$1\r\nc\r\n$1\r\nx\r\n$1\r\nA\r\n") ==
        0);
    uint64_t end = p.log.end;
    exec_words(&p, &out, "LTRIM l 0 -1");
    exec_words(&p, &out, "LREM l 0 nope");
    exec_words(&p, &out, "LSET l 9 v");
    CHECK_U64_EQ(p.log.end, end);
    exec_words(&p, &out, "RPUSH e a a");
    exec_words(&p, &out, "LREM e 0 a");
    exec_words(&p, &out, "RPUSH f a b");
    exec_words(&p, &out, "LTRIM f 5 9");
    CHECK(strcmp(exec_words(&p, &out, "EXISTS e f"), ":0\r\n") == 0);
    check_replica_agrees(&p);
    buf_free(&out);
    kv_free(&p);
}

/* ------------------- set algebra, SMOVE, SRANDMEMBER, LMOVE, LINSERT, LPOS */

#define WRONGTYPE                                                              \
    "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"

/* Runs cases[i][0] on k, each reply word for word cases[i][1]. */
static void check_cases(kv *k, const char *const (*cases)[2], size_t n) {
    buf out = {0};
    for (size_t i = 0; i < n; i++) {
        const char *got = exec_words(k, &out, cases[i][0]);
        if (strcmp(got, cases[i][1]) != 0)
            check_fail(__FILE__, __LINE__, "%s: %s", cases[i][0], got);
    }
    buf_free(&out);
}

TEST(set_algebra_as_redis) {
    /* Replies as redis-server 7.0.15 gave them (results of more than one
     * member are in each server's own order: counted here, compared as
     * sets by kv/kvdiff.py). Every key's type is checked, a missing key
     * before a wrong one or not; SINTERCARD checks numkeys, then its
     * options, then the keys. */
    static const char *const cases[][2] = {
        {"SADD s a b c", ":3\r\n"},
        {"SADD t b c d", ":3\r\n"},
        {"SET str x", "+OK\r\n"},
        {"SINTER s nokey", "*0\r\n"},
        {"SINTER nokey s", "*0\r\n"},
        {"SINTER s str", WRONGTYPE},
        {"SINTER nokey str", WRONGTYPE},
        {"SUNION nokey str", WRONGTYPE},
        {"SDIFF nokey str", WRONGTYPE},
        {"SDIFF str s", WRONGTYPE},
        {"SINTER s t nokey", "*0\r\n"},
        {"SDIFF s t", "*1\r\n$1\r\na\r\n"},
        {"SDIFF t s", "*1\r\n$1\r\nd\r\n"},
        {"SDIFF s s", "*0\r\n"},
        {"SDIFF nokey s", "*0\r\n"},
        {"SINTER s t s t", "*2\r\n$1\r\nb\r\n$1\r\nc\r\n"},
        {"SUNION nokey", "*0\r\n"},
        {"SINTER", "-ERR wrong number of arguments for 'sinter' command\r\n"},
        {"SINTERSTORE d",
         "-ERR wrong number of arguments for 'sinterstore' command\r\n"},
        {"SINTERSTORE d s t", ":2\r\n"},
        {"SUNIONSTORE d s t", ":4\r\n"},
        {"SDIFFSTORE d s t", ":1\r\n"},
        {"SMEMBERS d", "*1\r\n$1\r\na\r\n"},
        {"SINTERSTORE d s str", WRONGTYPE},
        {"SMEMBERS d", "*1\r\n$1\r\na\r\n"}, /* a refused STORE: kept */
        {"SINTERCARD 2 s t", ":2\r\n"},
        {"SINTERCARD 2 s t LIMIT 1", ":1\r\n"},
        {"SINTERCARD 2 s t limit 0", ":2\r\n"},
        {"SINTERCARD 1 s LIMIT 1 LIMIT 0", ":3\r\n"},
        {"SINTERCARD 2 s nokey", ":0\r\n"},
        {"SINTERCARD 0 s", "-ERR numkeys should be greater than 0\r\n"},
        {"SINTERCARD -1 s", "-ERR numkeys should be greater than 0\r\n"},
        {"SINTERCARD x s", "-ERR numkeys should be greater than 0\r\n"},
        {"SINTERCARD 3 s t",
         "-ERR Number of keys can't be greater than number of args\r\n"},
        {"SINTERCARD 9223372036854775807 s",
         "-ERR Number of keys can't be greater than number of args\r\n"},
        {"SINTERCARD 1 s LIMIT -1", "-ERR LIMIT can't be negative\r\n"},
        {"SINTERCARD 1 s LIMIT x", "-ERR LIMIT can't be negative\r\n"},
        {"SINTERCARD 1 s LIMIT", "-ERR syntax error\r\n"},
        {"SINTERCARD 1 s FOO 1", "-ERR syntax error\r\n"},
        {"SINTERCARD 1 str", WRONGTYPE},
        {"SINTERCARD 1 str LIMIT -1", "-ERR LIMIT can't be negative\r\n"},
        {"SINTERCARD 1",
         "-ERR wrong number of arguments for 'sintercard' command\r\n"},
        {"SMISMEMBER s a z c", "*3\r\n:1\r\n:0\r\n:1\r\n"},
        {"SMISMEMBER nokey a", "*1\r\n:0\r\n"},
        {"SMISMEMBER str a", WRONGTYPE},
        {"SMISMEMBER s",
         "-ERR wrong number of arguments for 'smismember' command\r\n"},
    };
    kv p;
    kv_setup(&p, false);
    check_cases(&p, cases, sizeof cases / sizeof cases[0]);
    check_replica_agrees(&p);
    kv_free(&p);
}

TEST(set_store_replaces_the_destination) {
    /* A *STORE's result replaces the destination whatever it held, and
     * clears its time to live (Redis' setKey); the destination may be one
     * of the sets read. An empty result deletes the destination (of any
     * type), and one that was not there changes nothing: no record. */
    static const char *const cases[][2] = {
        {"SADD s a b c", ":3\r\n"},
        {"SADD x b c z", ":3\r\n"},
        {"SINTERSTORE s s x", ":2\r\n"},
        {"SMEMBERS s", "*2\r\n$1\r\nb\r\n$1\r\nc\r\n"},
        {"SDIFFSTORE s s s", ":0\r\n"},
        {"EXISTS s", ":0\r\n"},
        {"SET str v EX 100", "+OK\r\n"},
        {"SUNIONSTORE str x", ":3\r\n"},
        {"TYPE str", "+set\r\n"},
        {"TTL str", ":-1\r\n"},
        {"LPUSH l a", ":1\r\n"},
        {"EXPIRE l 100", ":1\r\n"},
        {"SINTERSTORE l x nokey", ":0\r\n"},
        {"EXISTS l", ":0\r\n"},
        {"SADD big 1 2 3 4 5 6 7 8 9 10 11 12 13 14", ":14\r\n"},
        {"SUNIONSTORE big x", ":3\r\n"}, /* a set replaced by a set */
        {"SCARD big", ":3\r\n"},
    };
    kv p;
    kv_setup(&p, false);
    check_cases(&p, cases, sizeof cases / sizeof cases[0]);
    uint64_t nrec = p.log.nrec;
    buf out = {0};
    CHECK(strcmp(exec_words(&p, &out, "SINTERSTORE none x nokey"), ":0\r\n") ==
          0);
    CHECK_U64_EQ(p.log.nrec, nrec); /* nothing changed, nothing logged */
    /* A destination whose time has come is replaced, without a time. */
    p.clock = fixed_clock;
    fixed_now = 1000000;
    CHECK(strcmp(exec_words(&p, &out, "SET old v PXAT 1000010"), "+OK\r\n") ==
          0);
    fixed_now = 1000020;
    p.cmd_now = 0;
    CHECK(strcmp(exec_words(&p, &out, "SUNIONSTORE old x"), ":3\r\n") == 0);
    p.cmd_now = 0;
    CHECK(strcmp(exec_words(&p, &out, "PTTL old"), ":-1\r\n") == 0);
    CHECK(store_first_expiry(&p.db) == NULL);
    buf_free(&out);
    check_replica_agrees(&p);
    kv_free(&p);
}

TEST(smove_as_redis) {
    /* SMOVE: a missing source is 0 before any type is looked at; then
     * both types; a set moved onto itself is its member's test; an emptied
     * source goes; a missing destination is made. */
    static const char *const cases[][2] = {
        {"SADD s a b", ":2\r\n"},
        {"SADD t c", ":1\r\n"},
        {"SET str x", "+OK\r\n"},
        {"SMOVE nokey str a", ":0\r\n"},
        {"SMOVE s str a", WRONGTYPE},
        {"SMOVE str s a", WRONGTYPE},
        {"SMOVE str str a", WRONGTYPE},
        {"SMOVE s s a", ":1\r\n"},
        {"SMOVE s s zz", ":0\r\n"},
        {"SMOVE s t zz", ":0\r\n"},
        {"SMOVE s t a", ":1\r\n"},
        {"SMOVE s new b", ":1\r\n"},
        {"EXISTS s", ":0\r\n"},
        {"SMEMBERS new", "*1\r\n$1\r\nb\r\n"},
        {"SMOVE t new c", ":1\r\n"},
        {"SMOVE t new a", ":1\r\n"},
        {"EXISTS t", ":0\r\n"},
        {"SCARD new", ":3\r\n"},
        {"SMOVE new s",
         "-ERR wrong number of arguments for 'smove' command\r\n"},
    };
    kv p;
    kv_setup(&p, false);
    check_cases(&p, cases, sizeof cases / sizeof cases[0]);
    check_replica_agrees(&p);
    kv_free(&p);
}

/* The members of a multibulk reply of one-byte bulks, as a bit per byte
 * value; false when one repeats. */
static bool distinct_bytes(const char *reply, size_t *n) {
    unsigned char seen[256] = {0};
    *n = 0;
    for (const char *p = strstr(reply, "$1\r\n"); p;
         p = strstr(p + 5, "$1\r\n")) {
        unsigned char c = (unsigned char)p[4];
        if (seen[c]++) return false;
        (*n)++;
    }
    return true;
}

TEST(srandmember_counts) {
    /* SRANDMEMBER: a count >= 0 gives that many distinct members, at
     * most the set's; a negative one |count| picks, repeats allowed, as
     * Redis. A huge negative count stops once the reply passes the output
     * limit (Redis' own bound: its client-output-buffer-limit), never
     * spinning through 2^62 picks or allocating for them. A read: no
     * record. */
    static const char *const cases[][2] = {
        {"SRANDMEMBER nokey", "$-1\r\n"},
        {"SRANDMEMBER nokey 3", "*0\r\n"},
        {"SRANDMEMBER nokey -3", "*0\r\n"},
        {"SET str x", "+OK\r\n"},
        {"SRANDMEMBER str", WRONGTYPE},
        {"SRANDMEMBER str x",
         "-ERR value is not an integer or out of range\r\n"},
        {"SADD s a", ":1\r\n"},
        {"SRANDMEMBER s", "$1\r\na\r\n"},
        {"SRANDMEMBER s 0", "*0\r\n"},
        {"SRANDMEMBER s -3", "*3\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n"},
        {"SRANDMEMBER s 9223372036854775807", "*1\r\n$1\r\na\r\n"},
        {"SRANDMEMBER s -9223372036854775808",
         "-ERR value is out of range, value must between "
         "-9223372036854775807 and 9223372036854775807\r\n"},
        {"SRANDMEMBER s x", "-ERR value is not an integer or out of range\r\n"},
        {"SRANDMEMBER s 1.5",
         "-ERR value is not an integer or out of range\r\n"},
        {"SRANDMEMBER s 1 2", "-ERR syntax error\r\n"},
    };
    kv p;
    kv_setup(&p, false);
    check_cases(&p, cases, sizeof cases / sizeof cases[0]);
    buf out = {0};
    exec_words(&p, &out, "SADD s b c d e f g h i j");
    uint64_t nrec = p.log.nrec;
    /* Every count from 0 to past the size, both ways of sampling. */
    for (int count = 0; count <= 12; count++) {
        for (int round = 0; round < 50; round++) {
            char req[32];
            snprintf(req, sizeof req, "SRANDMEMBER s %d", count);
            const char *got = exec_words(&p, &out, req);
            size_t n;
            CHECK(distinct_bytes(got, &n));
            CHECK_EQ(n, (size_t)(count < 10 ? count : 10));
        }
    }
    CHECK(strncmp(exec_words(&p, &out, "SRANDMEMBER s -20"), "*20\r\n", 5) ==
          0);
    /* 2^62 - 1 picks asked for: the reply stops at its limit. */
    resp_arg a[3] = {
        {"SRANDMEMBER", 11}, {"s", 1}, {"-4611686018427387903", 20}};
    buf cap = {.max = 1 << 16};
    kv_exec(&p, NULL, a, 3, &cap);
    CHECK(cap.oom && cap.over);
    CHECK(cap.len <= 1 << 16);
    CHECK_U64_EQ(p.log.nrec, nrec);
    buf_free(&cap);
    buf_free(&out);
    kv_free(&p);
}

TEST(lists_lmove_linsert_lpos_as_redis) {
    /* As redis-server 7.0.15 answered: LMOVE's and LINSERT's words before
     * the key; LMOVE's source (missing: nil) before the destination's
     * type; a list moved onto itself rotates, and a one-element list
     * stays; an emptied source goes. LPOS's options before the key, and
     * its RANK -9223372036854775808, which Redis 7.0 takes as every
     * match from the tail, COUNT ignored. */
    static const char *const cases[][2] = {
        {"RPUSH l a b c", ":3\r\n"},
        {"SET str x", "+OK\r\n"},
        {"LMOVE l l LEFT RIGHT", "$1\r\na\r\n"},
        {"LMOVE l l right left", "$1\r\na\r\n"},
        {"LMOVE l l LEFT LEFT", "$1\r\na\r\n"},
        {"RPOPLPUSH l l", "$1\r\nc\r\n"},
        {"LRANGE l 0 -1", "*3\r\n$1\r\nc\r\n$1\r\na\r\n$1\r\nb\r\n"},
        {"LMOVE l l UP LEFT", "-ERR syntax error\r\n"},
        {"LMOVE nokey l UP LEFT", "-ERR syntax error\r\n"},
        {"LMOVE nokey str LEFT LEFT", "$-1\r\n"},
        {"LMOVE l str LEFT LEFT", WRONGTYPE},
        {"LMOVE str l LEFT LEFT", WRONGTYPE},
        {"RPOPLPUSH nokey l", "$-1\r\n"},
        {"RPOPLPUSH l str", WRONGTYPE},
        {"LMOVE l m RIGHT LEFT", "$1\r\nb\r\n"},
        {"LMOVE l m LEFT RIGHT", "$1\r\nc\r\n"},
        {"RPOPLPUSH l m", "$1\r\na\r\n"},
        {"EXISTS l", ":0\r\n"},
        {"LRANGE m 0 -1", "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"},
        {"RPUSH one x", ":1\r\n"},
        {"LMOVE one one LEFT RIGHT", "$1\r\nx\r\n"},
        {"LRANGE one 0 -1", "*1\r\n$1\r\nx\r\n"},
        {"LINSERT m MIDDLE a x", "-ERR syntax error\r\n"},
        {"LINSERT str MIDDLE a x", "-ERR syntax error\r\n"},
        {"LINSERT str BEFORE a x", WRONGTYPE},
        {"LINSERT nokey BEFORE a x", ":0\r\n"},
        {"EXISTS nokey", ":0\r\n"},
        {"LINSERT m BEFORE zz x", ":-1\r\n"},
        {"LINSERT m before a x", ":4\r\n"},
        {"LINSERT m AFTER c y", ":5\r\n"},
        {"LINSERT m after b a", ":6\r\n"},
        {"LRANGE m 0 -1", "*6\r\n$1\r\nx\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\na\r\n"
                          "$1\r\nc\r\n$1\r\ny\r\n"},
        {"LPOS m a", ":1\r\n"},
        {"LPOS m a RANK -1", ":3\r\n"},
        {"LPOS m a RANK 2", ":3\r\n"},
        {"LPOS m a RANK 3", "$-1\r\n"},
        {"LPOS m a COUNT 0", "*2\r\n:1\r\n:3\r\n"},
        {"LPOS m a RANK -1 COUNT 0", "*2\r\n:3\r\n:1\r\n"},
        {"LPOS m a COUNT 1", "*1\r\n:1\r\n"},
        {"LPOS m a MAXLEN 2 COUNT 0", "*1\r\n:1\r\n"},
        {"LPOS m a MAXLEN 1", "$-1\r\n"},
        {"LPOS m zz COUNT 1", "*0\r\n"},
        {"LPOS m a RANK -9223372036854775808", ":3\r\n"},
        {"LPOS m a RANK -9223372036854775808 COUNT 1", "*2\r\n:3\r\n:1\r\n"},
        {"LPOS m a RANK 9223372036854775807 COUNT 0", "*0\r\n"},
        {"LPOS m a RANK 0",
         "-ERR RANK can't be zero: use 1 to start from the first match, 2 "
         "from the second ... or use negative to start from the end of the "
         "list\r\n"},
        {"LPOS m a RANK x", "-ERR value is not an integer or out of range\r\n"},
        {"LPOS m a COUNT -1", "-ERR COUNT can't be negative\r\n"},
        {"LPOS m a COUNT x", "-ERR COUNT can't be negative\r\n"},
        {"LPOS m a MAXLEN -1", "-ERR MAXLEN can't be negative\r\n"},
        {"LPOS m a RANK", "-ERR syntax error\r\n"},
        {"LPOS str a FOO", "-ERR syntax error\r\n"},
        {"LPOS str a", WRONGTYPE},
        {"LPOS nokey a", "$-1\r\n"},
        {"LPOS nokey a COUNT 1", "*0\r\n"},
    };
    kv p;
    kv_setup(&p, false);
    check_cases(&p, cases, sizeof cases / sizeof cases[0]);
    check_replica_agrees(&p);
    kv_free(&p);
}

TEST(list_insert_at_every_place) {
    /* list_insert moves the shorter side: at every place of lists around
     * the ring's sizes, wrapped or not, the order is the one asked for. */
    for (size_t n = 0; n <= 17; n++) {
        for (size_t at = 0; at <= n; at++) {
            kv_list *l = list_new();
            CHECK(l != NULL);
            for (size_t i = 0; i < n; i++) { /* half pushed left: wrapped */
                char c = (char)('a' + i);
                CHECK_EQ(list_push(l, false, &c, 1), 0);
                if (i % 2) {
                    kv_elem e;
                    list_pop(l, false, &e);
                    CHECK_EQ(list_push(l, true, elem_bytes(&e), 1), 0);
                    elem_free(&e);
                    kv_elem f;
                    list_pop(l, true, &f);
                    CHECK_EQ(list_push(l, false, elem_bytes(&f), 1), 0);
                    elem_free(&f);
                }
            }
            CHECK_EQ(list_insert(l, at, "X", 1), 0);
            CHECK_EQ(l->n, n + 1);
            for (size_t i = 0; i <= n; i++) {
                char want = i < at    ? (char)('a' + i)
                            : i == at ? 'X'
                                      : (char)('a' + i - 1);
                CHECK_EQ(elem_bytes(list_at(l, i))[0], want);
            }
            list_free(l);
        }
    }
}

TEST(zpopmax_zmscore_msetnx_as_redis) {
    static const char *const cases[][2] = {
        {"ZADD z 1 a 2 b 3 c", ":3\r\n"},
        {"SET str x", "+OK\r\n"},
        {"ZPOPMAX z", "*2\r\n$1\r\nc\r\n$1\r\n3\r\n"},
        {"ZPOPMAX z 0", "*0\r\n"},
        {"ZPOPMAX z -1", "-ERR value is out of range, must be positive\r\n"},
        {"ZPOPMAX z x", "-ERR value is out of range, must be positive\r\n"},
        {"ZPOPMAX z 1 2", "-ERR syntax error\r\n"},
        {"ZPOPMAX nokey", "*0\r\n"},
        {"ZPOPMAX nokey 2", "*0\r\n"},
        {"ZPOPMAX str", WRONGTYPE},
        {"ZMSCORE z a x b", "*3\r\n$1\r\n1\r\n$-1\r\n$1\r\n2\r\n"},
        {"ZPOPMAX z 9223372036854775807",
         "*4\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\na\r\n$1\r\n1\r\n"},
        {"EXISTS z", ":0\r\n"},
        {"ZMSCORE nokey a", "*1\r\n$-1\r\n"},
        {"ZMSCORE str a", WRONGTYPE},
        {"ZMSCORE z",
         "-ERR wrong number of arguments for 'zmscore' command\r\n"},
        {"MSETNX a 1 b 2", ":1\r\n"},
        {"MSETNX c 3 a 1", ":0\r\n"},
        {"EXISTS c", ":0\r\n"},
        {"MSETNX a", "-ERR wrong number of arguments for 'msetnx' command\r\n"},
        {"MSETNX a 1 b",
         "-ERR wrong number of arguments for 'msetnx' command\r\n"},
        {"MSETNX x 1 x 2", ":1\r\n"},
        {"GET x", "$1\r\n2\r\n"},
        {"MSETNX str y", ":0\r\n"}, /* any type is there */
    };
    kv p;
    kv_setup(&p, false);
    check_cases(&p, cases, sizeof cases / sizeof cases[0]);
    check_replica_agrees(&p);
    kv_free(&p);
}

/* ------------------------------------ SCAN's promise, growing and shrinking */

static uint64_t prop_rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One step of a walk: the cursor next, and the members (or keys) of the
 * reply ("m<i>", pairs' first halves only) passed to fn. */
static unsigned long long scan_step(kv *k, buf *out, const char *line,
                                    bool pairs, void (*fn)(int m, void *arg),
                                    void *arg) {
    const char *r = exec_words(k, out, line);
    char *end;
    if (strncmp(r, "*2\r\n$", 5) != 0)
        check_fail(__FILE__, __LINE__, "%s: %s", line, r);
    r = strchr(r, '\n') + 1; /* the cursor's length */
    r = strchr(r, '\n') + 1;
    unsigned long long cur = strtoull(r, &end, 10);
    CHECK(*end == '\r');
    r = end + 2;
    CHECK(*r == '*');
    long n = strtol(r + 1, &end, 10);
    r = end + 2;
    CHECK(!pairs || n % 2 == 0);
    for (long i = 0; i < n; i++) {
        long len = strtol(r + 1, &end, 10);
        r = end + 2;
        if (!pairs || i % 2 == 0) {
            int m = -1;
            CHECK(sscanf(r, "m%d", &m) == 1);
            fn(m, arg);
        }
        r += len + 2;
    }
    return cur;
}

enum { PROP_U = 1500 }; /* members a walk draws from */

typedef struct prop_walk {
    bool present[PROP_U]; /* there now */
    bool always[PROP_U];  /* there since the walk began */
    bool seen[PROP_U];    /* returned by the walk */
    const char *what;
    unsigned seed;
} prop_walk;

static void prop_seen(int m, void *arg) {
    prop_walk *w = arg;
    CHECK(m >= 0 && m < PROP_U);
    /* none invented: what a step returns is there when it runs */
    if (!w->present[m])
        check_fail(__FILE__, __LINE__, "%s seed %u: m%d returned, not there",
                   w->what, w->seed, m);
    w->seen[m] = true;
}

static void prop_no_check(int m, void *arg) {
    (void)m;
    (void)arg;
}

typedef struct prop_kind {
    const char *scan; /* "SCAN" or "SSCAN key" ... */
    const char *add;  /* a format of the member's number, twice */
    const char *del;
    bool pairs;
} prop_kind;

static const prop_kind prop_kinds[] = {
    {"SCAN", "SET m%d %d", "DEL m%d", false},
    {"SSCAN key", "SADD key m%d", "SREM key m%d", false},
    {"HSCAN key", "HSET key m%d %d", "HDEL key m%d", true},
    {"ZSCAN key", "ZADD key %2$d m%1$d", "ZREM key m%d", true},
};

static void prop_set(kv *k, buf *out, const prop_kind *pk, prop_walk *w, int m,
                     bool on) {
    char line[64];
    if (w->present[m] == on) return;
    snprintf(line, sizeof line, on ? pk->add : pk->del, m, m);
    exec_words(k, out, line);
    w->present[m] = on;
    if (!on) w->always[m] = false;
}

/* Between steps: a burst of adds (the table doubles), a burst of deletes
 * (it halves, several times), or a few of each. */
static void prop_mutate(kv *k, buf *out, const prop_kind *pk, prop_walk *w,
                        uint64_t *rng) {
    unsigned mode = (unsigned)(prop_rng(rng) % 4);
    int n = mode == 3 ? 1 + (int)(prop_rng(rng) % 8)
                      : (int)(prop_rng(rng) % PROP_U);
    for (int i = 0; i < n; i++) {
        int m = (int)(prop_rng(rng) % PROP_U);
        bool on = mode == 0 || (mode == 3 && prop_rng(rng) % 2);
        if (mode == 1 || mode == 2) on = false;
        prop_set(k, out, pk, w, m, on);
    }
}

TEST(scan_promise_across_growth_and_shrinking) {
    /* SCAN, SSCAN, HSCAN and ZSCAN with random adds and deletes between
     * every two steps, the tables growing and halving under the walk:
     * every member there from the walk's start to its end comes back at
     * least once, and nothing comes back that is not there. */
    for (size_t kind = 0; kind < sizeof prop_kinds / sizeof prop_kinds[0];
         kind++) {
        const prop_kind *pk = &prop_kinds[kind];
        for (unsigned seed = 1; seed <= 60; seed++) {
            kv k;
            kv_setup(&k, false);
            buf out = {0};
            static prop_walk w;
            memset(&w, 0, sizeof w);
            w.what = pk->scan;
            w.seed = seed;
            uint64_t rng = 0x9e3779b97f4a7c15ull * seed;
            int start = (int)(prop_rng(&rng) % PROP_U);
            for (int i = 0; i < start; i++)
                prop_set(&k, &out, pk, &w, (int)(prop_rng(&rng) % PROP_U),
                         true);
            memcpy(w.always, w.present, sizeof w.always);
            unsigned long long cur = 0;
            int steps = 0;
            do {
                char line[96];
                snprintf(line, sizeof line, "%s %llu COUNT %d", pk->scan, cur,
                         1 + (int)(prop_rng(&rng) % 40));
                cur = scan_step(&k, &out, line, pk->pairs, prop_seen, &w);
                prop_mutate(&k, &out, pk, &w, &rng);
                CHECK(++steps < 100000);
            } while (cur != 0);
            for (int m = 0; m < PROP_U; m++)
                if (w.always[m] && !w.seen[m])
                    check_fail(__FILE__, __LINE__, "%s seed %u: m%d missed",
                               pk->scan, seed, m);
            buf_free(&out);
            kv_free(&k);
        }
    }
}

TEST(scan_cursor_from_before_flushall) {
    /* FLUSHALL gives the tables back: a cursor from the walk before it,
     * given to the new keyspace (empty, small or large again), ends the
     * walk in a bounded number of steps, returning only what is there. */
    for (size_t kind = 0; kind < sizeof prop_kinds / sizeof prop_kinds[0];
         kind++) {
        const prop_kind *pk = &prop_kinds[kind];
        for (int after = 0; after < 3; after++) {
            kv k;
            kv_setup(&k, false);
            buf out = {0};
            static prop_walk w;
            memset(&w, 0, sizeof w);
            w.what = pk->scan;
            for (int m = 0; m < PROP_U; m++)
                prop_set(&k, &out, pk, &w, m, true);
            char line[96];
            unsigned long long cur = 0;
            for (int i = 0; i < 5; i++) {
                snprintf(line, sizeof line, "%s %llu COUNT 7", pk->scan, cur);
                cur = scan_step(&k, &out, line, pk->pairs, prop_no_check, NULL);
            }
            CHECK(cur != 0);
            CHECK(strcmp(exec_words(&k, &out, "FLUSHALL"), "+OK\r\n") == 0);
            memset(w.present, 0, sizeof w.present);
            int n = after == 0 ? 0 : after == 1 ? 3 : PROP_U / 2;
            for (int m = 0; m < n; m++)
                prop_set(&k, &out, pk, &w, m, true);
            int steps = 0;
            do {
                snprintf(line, sizeof line, "%s %llu COUNT 7", pk->scan, cur);
                cur = scan_step(&k, &out, line, pk->pairs, prop_seen, &w);
                CHECK(++steps <= PROP_U);
            } while (cur != 0);
            buf_free(&out);
            kv_free(&k);
        }
    }
}

TEST(shrink_never_thrashes_at_a_size_boundary) {
    /* A list, a set's array and a hash table held at any size, one
     * element pushed and popped (added and deleted) over and over: at
     * most one resize over the whole run, never one per step (growth at
     * full and halving at a quarter or an eighth leave room both ways). */
    for (size_t n = 1; n <= 300; n++) {
        kv_list *l = list_new();
        kv_set *s = set_new();
        dict d;
        dict_init(&d, 0);
        CHECK(l && s);
        char m[16];
        for (size_t i = 0; i < n; i++) {
            int len = sprintf(m, "m%zu", i);
            CHECK_EQ(list_push(l, false, m, (size_t)len), 0);
            CHECK_EQ(set_add(s, m, (size_t)len), 1);
            CHECK(dict_add(&d, m, (size_t)len));
        }
        int len = sprintf(m, "x");
        for (int way = 0; way < 2; way++) { /* +1 -1, then -1 +1 */
            size_t lcap = l->cap, scap = s->cap, nb = d.nbuckets;
            int lchanges = 0, schanges = 0, dchanges = 0;
            for (int step = 0; step < 200; step++) {
                bool add = (step % 2 == 0) == (way == 0);
                kv_elem e;
                if (add) {
                    CHECK_EQ(list_push(l, false, m, (size_t)len), 0);
                    CHECK_EQ(set_add(s, m, (size_t)len), 1);
                    CHECK(dict_add(&d, m, (size_t)len));
                } else {
                    list_pop(l, false, &e);
                    elem_free(&e);
                    /* "x", or at way 1's first step "m0" */
                    const char *k = step == 0 ? "m0" : m;
                    size_t klen = step == 0 ? 2 : (size_t)len;
                    set_delete(s, dict_find(&s->d, k, klen));
                    dict_delete(&d, dict_find(&d, k, klen));
                }
                lchanges += l->cap != lcap;
                schanges += s->cap != scap;
                dchanges += d.nbuckets != nb;
                lcap = l->cap;
                scap = s->cap;
                nb = d.nbuckets;
            }
            if (lchanges > 1 || schanges > 1 || dchanges > 1)
                check_fail(__FILE__, __LINE__,
                           "size %zu: %d, %d and %d resizes in 200 steps", n,
                           lchanges, schanges, dchanges);
        }
        list_free(l);
        set_free(s);
        dict_free(&d);
    }
}

/* A write whose record cannot be logged stopped lull-kv (kv_oom): the
 * keyspace had taken the write, and a replica would never have seen it.
 * A large value does this under memory pressure: its record needs a
 * chunk of its own as long as the value, asked for after the keyspace
 * took the value. Each allocation of such writes fails in turn, each in
 * a child (a stop is a signal): every one must end in a reply, -OOM or
 * the failure-free one, with the log holding exactly what the keyspace
 * took, which a replica applying it ends equal to. */
#include <sys/wait.h>

static const char *const log_room_cmds[] = {"SET", "APPEND", "RPUSH", "MULTI"};

/* 0: a failure was injected and all was well; 3: none was left to fail. */
static int log_room_child(size_t which, uint64_t nth) {
    static char big[3 * REPL_CHUNK];
    memset(big, 'v', sizeof big);
    kv p, r;
    kv_setup(&p, false);
    kv_setup(&r, true);
    buf out = {0}, dp = {0}, dr = {0};
    kv_client cl;
    kv_client_init(&cl, NULL, &out);
    exec_words(&p, &out, "SET a 1");
    resp_arg set[3] = {{"SET", 3}, {"big", 3}, {big, sizeof big}};
    resp_arg append[3] = {{"APPEND", 6}, {"a", 1}, {big, sizeof big}};
    resp_arg push[4] = {{"RPUSH", 5}, {"l", 1}, {"x", 1}, {big, sizeof big}};
    resp_arg multi = {"MULTI", 5}, exec = {"EXEC", 4};
    shim_reset(1);
    fail_nth(K_MALLOC, -1, nth, 1, ENOMEM);
    arm(true);
    const char *reply;
    if (which == 0) {
        reply = exec_args(&p, &cl, &out, set, 3);
    } else if (which == 1) {
        reply = exec_args(&p, &cl, &out, append, 3);
    } else if (which == 2) {
        reply = exec_args(&p, &cl, &out, push, 4);
    } else {
        /* Queued before the failures: the EXEC is what is tested. */
        arm(false);
        exec_args(&p, &cl, &out, &multi, 1);
        exec_args(&p, &cl, &out, set, 3);
        exec_args(&p, &cl, &out, push, 4);
        arm(true);
        reply = exec_args(&p, &cl, &out, &exec, 1);
    }
    arm(false);
    /* (Without a failure left to inject: 3, with everything freed, as
     * valgrind's leak check in this child wants.) */
    bool hit = injected_total(K_MALLOC) > 0;
    if (hit) {
        CHECK(reply[0] == '+' || reply[0] == ':' || reply[0] == '*' ||
              strncmp(reply, "-OOM ", 5) == 0);
        CHECK(!cl.multi); /* an EXEC refused ends the transaction too */
        resp_limits lim = {.max_bulk = sizeof big, .max_args = MAX_ARGS};
        resp_arg argv[MAX_ARGS];
        const char *err = NULL;
        size_t need, at = 0;
        for (size_t i = 0; i < p.log.nchunks; i++) {
            long n = kv_apply_stream(&r, &lim, argv, p.log.chunks[i].p,
                                     p.log.chunks[i].used, &err, &need);
            CHECK_EQ(n, (long)p.log.chunks[i].used);
            at += (size_t)n;
        }
        CHECK_EQ(at, (size_t)(p.log.end - p.log.base));
        kv_dump(&p, &dp);
        kv_dump(&r, &dr);
        CHECK(same_dump(&dp, &dr));
    }
    kv_client_reset(&p, &cl);
    buf_free(&out);
    buf_free(&dp);
    buf_free(&dr);
    kv_free(&p);
    kv_free(&r);
    return hit ? 0 : 3;
}

TEST(write_whose_record_finds_no_room_is_refused_before_it_runs) {
    for (size_t w = 0; w < sizeof log_room_cmds / sizeof *log_room_cmds; w++) {
        for (uint64_t nth = 1;; nth++) {
            fflush(NULL);
            pid_t pid = fork();
            CHECK(pid >= 0);
            if (pid == 0) _exit(log_room_child(w, nth));
            int status;
            CHECK_EQ(waitpid(pid, &status, 0), pid);
            if (!WIFEXITED(status))
                check_fail(__FILE__, __LINE__,
                           "%s with allocation %llu failing: signal %d",
                           log_room_cmds[w], (unsigned long long)nth,
                           WTERMSIG(status));
            CHECK(WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 3);
            if (WEXITSTATUS(status) == 3) break;
        }
    }
}

/* The expiry timer deletes a key and logs its DEL; a DEL that found no
 * memory in the log stopped lull-kv (kv_oom), every client's keyspace
 * with it. The timer now leaves such a key in place (its DEL unlogged, so
 * deleting it would part the replicas from the primary) and tries again
 * 100 ms later, rather than at once, which would spin the loop while
 * memory stays short. In a child: the stop was a signal. */
/* Key "a" expired, its DEL refused once by the timer for want of memory,
 * which stays short (every allocation fails) until arm(false). Returns
 * the log's record count. */
static size_t expired_without_room(vkv *v, lull_loop *loop) {
    vkv_open(v, loop, false);
    v->k.log.chunk_size = 16; /* every record needs a chunk of its own */
    CHECK(strcmp(vexec(v, "SET a 1 PX 100"), "+OK\r\n") == 0);
    /* A record longer than the room a write reserves, so that its chunk
     * ends full: the next record needs a chunk of its own. */
    static char pad[300];
    memset(pad, 'p', sizeof pad);
    resp_arg padrec[2] = {{"PING", 4}, {pad, sizeof pad}};
    CHECK_EQ(repl_log_write(&v->k.log, padrec, 2), 0);
    const repl_chunk *last = &v->k.log.chunks[v->k.log.nchunks - 1];
    CHECK_EQ(last->used, last->cap);
    size_t nrec = v->k.log.nrec;
    shim_reset(1);
    fail_nth(K_MALLOC, -1, 1, UINT64_MAX, ENOMEM);
    arm(true);
    lull_loop_advance(loop, 101 * MS);
    CHECK_EQ(v->x.fired, 1);
    CHECK_EQ(store_count(&v->k.db), 1); /* kept: its DEL has no room */
    CHECK_EQ(v->k.log.nrec, nrec);
    CHECK(lull_timer_active(&v->x.timer));
    return nrec;
}

static int expiry_waits_child(void) {
    lull_loop *loop = virtual_loop();
    vkv v;
    expired_without_room(&v, loop);
    arm(false);
    lull_loop_advance(loop, 99 * MS);
    CHECK_EQ(v.x.fired, 1); /* not again before 100 ms */
    lull_loop_advance(loop, 1 * MS);
    CHECK_EQ(v.x.fired, 2);
    CHECK_EQ(store_count(&v.k.db), 0);
    CHECK(strcmp(last_record(&v.k), "*2\r\n$3\r\nDEL\r\n$1\r\na\r\n") == 0);
    CHECK(!lull_timer_active(&v.x.timer));
    vkv_close(&v);
    CHECK_EQ(lull_loop_free(loop), 0);
    return 0;
}

/* A read that finds the key expired, with no memory for its DEL, answers
 * as if it were gone and leaves it for the timer: it reserved no room (it
 * writes nothing), and a DEL that then failed stopped lull-kv. A write's
 * lookup still logs the DEL (its reservation covers it). */
static int read_of_expired_child(void) {
    lull_loop *loop = virtual_loop();
    vkv v;
    size_t nrec = expired_without_room(&v, loop);
    CHECK(strcmp(vexec(&v, "GET a"), "$-1\r\n") == 0);
    CHECK(strcmp(vexec(&v, "EXISTS a"), ":0\r\n") == 0);
    CHECK_EQ(store_count(&v.k.db), 1);
    CHECK_EQ(v.k.log.nrec, nrec);
    arm(false);
    lull_loop_advance(loop, 100 * MS);
    CHECK_EQ(store_count(&v.k.db), 0);
    CHECK(strcmp(last_record(&v.k), "*2\r\n$3\r\nDEL\r\n$1\r\na\r\n") == 0);
    vkv_close(&v);
    CHECK_EQ(lull_loop_free(loop), 0);
    return 0;
}

static void in_child(int (*fn)(void)) {
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) _exit(fn());
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status))
        check_fail(__FILE__, __LINE__, "stopped by signal %d",
                   WTERMSIG(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
}

TEST(read_of_expired_key_whose_del_finds_no_memory_waits) {
    in_child(read_of_expired_child);
}

TEST(expired_key_whose_del_finds_no_memory_waits) {
    in_child(expiry_waits_child);
}

/* ---------------------------------------------------------------- WATCH */

/* Two clients, a and b, on a primary with a fixed clock. */
typedef struct watch_pair {
    kv k;
    kv_client a, b;
    buf oa, ob;
} watch_pair;

static void watch_open(watch_pair *w) {
    kv_setup(&w->k, false);
    w->k.clock = fixed_clock;
    fixed_now = 1000000000000;
    w->oa = w->ob = (buf){0};
    kv_client_init(&w->a, NULL, &w->oa);
    kv_client_init(&w->b, NULL, &w->ob);
}

static void watch_close(watch_pair *w) {
    kv_client_reset(&w->k, &w->a);
    kv_client_reset(&w->k, &w->b);
    CHECK_EQ(w->k.watched.count, 0); /* every watch gone with its client */
    buf_free(&w->oa);
    buf_free(&w->ob);
    kv_free(&w->k);
}

#define A(w, line) exec_cl(&(w)->k, &(w)->a, &(w)->oa, line)
#define B(w, line) exec_cl(&(w)->k, &(w)->b, &(w)->ob, line)

/* a: WATCH key, then b runs `write`, then a's MULTI SET EXEC: whether
 * the EXEC ran (redis-server 7.0's answers for each case). */
static bool exec_after(const char *setup, const char *key, const char *write) {
    watch_pair w;
    watch_open(&w);
    char line[128];
    if (setup) B(&w, setup);
    snprintf(line, sizeof line, "WATCH %s", key);
    CHECK(strcmp(A(&w, line), "+OK\r\n") == 0);
    if (write) B(&w, write);
    CHECK(strcmp(A(&w, "MULTI"), "+OK\r\n") == 0);
    CHECK(strcmp(A(&w, "SET done 1"), "+QUEUED\r\n") == 0);
    const char *r = A(&w, "EXEC");
    bool ran = strcmp(r, "*1\r\n+OK\r\n") == 0;
    CHECK(ran || strcmp(r, "*-1\r\n") == 0);
    CHECK(strcmp(B(&w, "GET done"), ran ? "$1\r\n1\r\n" : "$-1\r\n") == 0);
    watch_close(&w);
    return ran;
}

TEST(watch_fails_exec_after_a_write_to_the_key) {
    CHECK(exec_after(NULL, "k", NULL));
    CHECK(!exec_after(NULL, "k", "SET k 1"));
    CHECK(!exec_after("SET k 1", "k", "DEL k"));
    CHECK(!exec_after("SET k 1", "k", "APPEND k x"));
    CHECK(!exec_after("SET k 1", "k", "EXPIRE k 100"));
    CHECK(!exec_after("SADD s x", "s", "SADD s y"));
    CHECK(!exec_after("LPUSH l x", "l", "RPOP l"));
    CHECK(!exec_after("SET k 1", "k", "FLUSHALL"));
    CHECK(!exec_after("SET k 1", "k", "RENAME k k2"));
    CHECK(!exec_after("SET k 1", "k2", "RENAME k k2"));
    CHECK(!exec_after(NULL, "m2", "MSET m1 a m2 b"));
    CHECK(!exec_after("SADD s x", "d", "SMOVE s d x"));
}

TEST(watch_ignores_what_changes_nothing_and_other_keys) {
    CHECK(exec_after("SET k 1", "k", "GET k"));
    CHECK(exec_after(NULL, "k", "SET other 1"));
    CHECK(exec_after("SADD s x", "s", "SADD s x")); /* no member added */
    CHECK(exec_after(NULL, "k", "DEL k"));          /* nothing deleted */
    CHECK(exec_after(NULL, "k", "FLUSHALL"));       /* k was not there */
    CHECK(exec_after(NULL, "v", "MSET m v"));       /* a value, not a key */
    CHECK(exec_after(NULL, "k", "PUBLISH k hi"));   /* a channel */
    CHECK(exec_after(NULL, "x", "SMOVE s d x"));    /* a member */
}

TEST(watch_and_its_own_writes) {
    watch_pair w;
    watch_open(&w);
    /* Its own write before MULTI fails its EXEC, as anyone's. */
    A(&w, "WATCH k");
    A(&w, "SET k 1");
    A(&w, "MULTI");
    A(&w, "GET k");
    CHECK(strcmp(A(&w, "EXEC"), "*-1\r\n") == 0);
    /* EXEC ended the watch: the next transaction runs. */
    A(&w, "MULTI");
    A(&w, "GET k");
    CHECK(strcmp(A(&w, "EXEC"), "*1\r\n$1\r\n1\r\n") == 0);
    /* Inside the transaction its writes fail nothing of its own, and
     * another's watch does fail. */
    A(&w, "WATCH k");
    B(&w, "WATCH k");
    A(&w, "MULTI");
    A(&w, "INCR k");
    CHECK(strcmp(A(&w, "EXEC"), "*1\r\n:2\r\n") == 0);
    B(&w, "MULTI");
    B(&w, "INCR k");
    CHECK(strcmp(B(&w, "EXEC"), "*-1\r\n") == 0);
    CHECK(strcmp(B(&w, "GET k"), "$1\r\n2\r\n") == 0);
    CHECK_EQ(w.k.watched.count, 0);
    watch_close(&w);
}

TEST(watch_ends_with_unwatch_discard_reset_and_execabort) {
    static const char *const ends[][2] = {
        {"UNWATCH", NULL},
        {"MULTI", "DISCARD"},
        {"RESET", NULL},
        {"MULTI", "NOSUCH"}, /* then EXEC: EXECABORT */
    };
    for (size_t i = 0; i < sizeof ends / sizeof *ends; i++) {
        watch_pair w;
        watch_open(&w);
        A(&w, "WATCH k j");
        A(&w, "WATCH k"); /* twice: one watch */
        CHECK_EQ(w.k.watched.count, 2);
        B(&w, "SET k 1");
        A(&w, ends[i][0]);
        if (ends[i][1]) A(&w, ends[i][1]);
        if (strcmp(ends[i][1] ? ends[i][1] : "", "NOSUCH") == 0)
            CHECK(strncmp(A(&w, "EXEC"), "-EXECABORT", 10) == 0);
        CHECK_EQ(w.k.watched.count, 0);
        /* Nothing watched: the write before does not fail this one. */
        A(&w, "MULTI");
        A(&w, "GET k");
        CHECK(strcmp(A(&w, "EXEC"), "*1\r\n$1\r\n1\r\n") == 0);
        watch_close(&w);
    }
}

TEST(watch_is_refused_inside_multi_and_needs_a_key) {
    watch_pair w;
    watch_open(&w);
    CHECK(strcmp(A(&w, "WATCH"),
                 "-ERR wrong number of arguments for 'watch' command\r\n") ==
          0);
    A(&w, "MULTI");
    CHECK(strcmp(A(&w, "WATCH k"),
                 "-ERR WATCH inside MULTI is not allowed\r\n") == 0);
    CHECK_EQ(w.k.watched.count, 0);
    CHECK(strcmp(A(&w, "UNWATCH"), "+QUEUED\r\n") == 0);
    /* The refusal does not spoil the transaction (redis-server 7). */
    CHECK(strcmp(A(&w, "EXEC"), "*1\r\n+OK\r\n") == 0);
    watch_close(&w);
}

/* A watched key that expires fails EXEC, whether or not anything deleted
 * it yet; one already expired at WATCH is gone already, and its DEL by
 * the expiry changes nothing. */
TEST(watch_and_expiry) {
    watch_pair w;
    watch_open(&w);
    B(&w, "SET e 1 PX 100");
    A(&w, "WATCH e");
    fixed_now += 101;
    CHECK_EQ(store_count(&w.k.db), 1); /* nothing deleted it yet */
    A(&w, "MULTI");
    CHECK(strcmp(A(&w, "EXEC"), "*-1\r\n") == 0);
    /* Already expired at WATCH: a read deletes it (DEL), EXEC runs. */
    A(&w, "WATCH e");
    CHECK(strcmp(B(&w, "GET e"), "$-1\r\n") == 0);
    CHECK_EQ(store_count(&w.k.db), 0);
    A(&w, "MULTI");
    CHECK(strcmp(A(&w, "EXEC"), "*0\r\n") == 0);
    /* The expiry timer's delete of a live watched key fails it. */
    B(&w, "SET t 1 PX 100");
    A(&w, "WATCH t");
    fixed_now += 101;
    CHECK_EQ(kv_expire_due(&w.k, NULL, NULL), 1);
    A(&w, "MULTI");
    CHECK(strcmp(A(&w, "EXEC"), "*-1\r\n") == 0);
    watch_close(&w);
}

/* An LTRIM of a list that removes nothing is a write to WATCH in
 * redis-server 7.0, though there is nothing to log. */
TEST(watch_fails_after_an_ltrim_that_removes_nothing) {
    CHECK(!exec_after("RPUSH l a b", "l", "LTRIM l 0 -1"));
    CHECK(exec_after(NULL, "l", "LTRIM l 0 -1")); /* no list: no write */
}

/* An SMOVE of a member the destination has already fails only the
 * source's watch (redis-server 7.0). */
TEST(watch_smove_onto_a_member_is_no_write_of_the_destination) {
    watch_pair w;
    watch_open(&w);
    B(&w, "SADD s x y");
    B(&w, "SADD d x");
    A(&w, "WATCH d");
    CHECK(strcmp(B(&w, "SMOVE s d x"), ":1\r\n") == 0);
    A(&w, "MULTI");
    CHECK(strcmp(A(&w, "EXEC"), "*0\r\n") == 0);
    A(&w, "WATCH s");
    CHECK(strcmp(B(&w, "SMOVE s d y"), ":1\r\n") == 0);
    A(&w, "MULTI");
    CHECK(strcmp(A(&w, "EXEC"), "*-1\r\n") == 0);
    CHECK(strcmp(B(&w, "SMEMBERS s"), "*0\r\n") == 0);
    watch_close(&w);
}

/* cl's CLIENT LIST line, NUL-ended, into line (emptied first), for a
 * connection made up for it. */
static void client_line_of(const kv_client *cl, buf *line) {
    kv_conn_info ci = {
        .id = 1, .addr = "a:1", .laddr = "b:2", .fd = -1, .events = "r"};
    line->len = 0;
    kv_client_line(cl, &ci, line);
    buf_put(line, "", 1);
}

/* The keys a client watches are memory it holds: CLIENT LIST's tot-mem
 * grows with them (as redis-server 7.0's, by 56 bytes a key there) and
 * falls back at UNWATCH; a key watched twice counts once. */
static size_t tot_mem_of(const kv_client *cl) {
    buf line = {0};
    client_line_of(cl, &line);
    const char *t = strstr(line.p, " tot-mem=");
    CHECK(t != NULL);
    size_t n = strtoull(t + 9, NULL, 10);
    buf_free(&line);
    return n;
}

TEST(watched_keys_count_in_the_clients_memory) {
    watch_pair w;
    watch_open(&w);
    size_t before = tot_mem_of(&w.a);
    CHECK_EQ(w.a.watch_bytes, 0);
    char line[64];
    for (int i = 0; i < 1000; i++) {
        snprintf(line, sizeof line, "WATCH key:%04d", i);
        CHECK(strcmp(A(&w, line), "+OK\r\n") == 0);
    }
    A(&w, "WATCH key:0000 key:0999"); /* watched already */
    B(&w, "WATCH key:0000");
    size_t with = tot_mem_of(&w.a);
    /* at least the key and a pointer each, however it is kept */
    CHECK(with >= before + 1000 * (8 + sizeof(void *)));
    CHECK_EQ(with - before, w.a.watch_bytes);
    CHECK_EQ(tot_mem_of(&w.b), before + w.a.watch_bytes / 1000);
    A(&w, "UNWATCH");
    CHECK_EQ(tot_mem_of(&w.a), before);
    CHECK_EQ(w.a.watch_bytes, 0);
    watch_close(&w);
}

/* A transaction's writes have their room in the log asked for at EXEC
 * (their records, with slack for the DEL of a key of theirs expired);
 * the commands before them must not take it. A read's lookup of an
 * expired key logged its DEL into it (the EXEC had reserved), and SPOP's
 * own ask for its records started a chunk only as long as they: either
 * way a later write's record then found no memory and stopped lull-kv
 * (kv_oom). */

/* On a kv with a fixed clock (watch_pair) whose log's every chunk is as
 * long as asked (chunk_size 16): `setup` run by b, the clock moved on
 * `later` ms, then a's MULTI and `queued`, and a chunk with exactly the
 * room a's EXEC will ask for. */
static void exec_room_setup(watch_pair *w, const char *const *setup,
                            size_t nsetup, int64_t later,
                            const char *const *queued, size_t n) {
    watch_open(w);
    w->k.log.chunk_size = 16;
    for (size_t i = 0; i < nsetup; i++)
        B(w, setup[i]);
    fixed_now += later;
    static char echo[1200] = "ECHO ";
    memset(echo + 5, 'x', 1000); /* the reply buffer grows no more */
    A(w, echo);
    CHECK(strcmp(A(w, "MULTI"), "+OK\r\n") == 0);
    size_t len = 0, nrec = 2;
    for (size_t i = 0; i < n; i++) {
        static char copy[2048];
        resp_arg argv[64];
        size_t argc = 0, r;
        snprintf(copy, sizeof copy, "%s", queued[i]);
        for (char *t = strtok(copy, " "); t; t = strtok(NULL, " "))
            argv[argc++] = (resp_arg){t, strlen(t)};
        const kv_cmd *c = kv_command(&argv[0]);
        CHECK(c != NULL);
        if (c->flags & CMD_WRITE) {
            len += kv_log_need(argv, argc, &r);
            nrec += r;
        }
        CHECK(strcmp(A(w, queued[i]), "+QUEUED\r\n") == 0);
    }
    CHECK_EQ(repl_log_room(&w->k.log, len + 32, nrec), 0);
    CHECK(w->k.log.nchunks < w->k.log.chunks_cap);
}

static int exec_read_of_expired_child(void) {
    static const char *const setup[] = {"SET expired:key:number:0 1 PX 100",
                                        "SET expired:key:number:1 1 PX 100",
                                        "SET expired:key:number:2 1 PX 100",
                                        "SET expired:key:number:3 1 PX 100",
                                        "SET expired:key:number:4 1 PX 100",
                                        "SET expired:key:number:5 1 PX 100",
                                        "SET expired:key:number:6 1 PX 100",
                                        "SET expired:key:number:7 1 PX 100",
                                        "SET x z"};
    static const char *const queued[] = {
        "MGET expired:key:number:0 expired:key:number:1 "
        "expired:key:number:2 expired:key:number:3 expired:key:number:4 "
        "expired:key:number:5 expired:key:number:6 expired:key:number:7",
        "SET x y"};
    watch_pair w;
    exec_room_setup(&w, setup, 9, 101, queued, 2);
    shim_reset(1);
    fail_nth(K_MALLOC, -1, 1, UINT64_MAX, ENOMEM); /* no more memory */
    arm(true);
    const char *r = A(&w, "EXEC");
    arm(false);
    CHECK(strcmp(r, "*2\r\n*8\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n$-1\r\n"
                    "$-1\r\n$-1\r\n$-1\r\n+OK\r\n") == 0);
    CHECK(strcmp(last_record(&w.k), "*1\r\n$4\r\nEXEC\r\n") == 0);
    /* The expired keys wait for the timer (or a write that finds them). */
    CHECK_EQ(store_count(&w.k.db), 9);
    CHECK(strcmp(A(&w, "DEL expired:key:number:0"), ":0\r\n") == 0);
    CHECK_EQ(store_count(&w.k.db), 8);
    CHECK(strcmp(A(&w, "GET x"), "$1\r\ny\r\n") == 0);
    watch_close(&w);
    return 0;
}

TEST(exec_read_of_expired_key_leaves_the_writes_their_room) {
    in_child(exec_read_of_expired_child);
}

/* The set that SPOP s 10 empties in the EXEC cases: ten members of 37
 * bytes. */
static const char sadd_ten_members[] =
    "SADD s member:number:00000000000000000000001 "
    "member:number:00000000000000000000002 "
    "member:number:00000000000000000000003 "
    "member:number:00000000000000000000004 "
    "member:number:00000000000000000000005 "
    "member:number:00000000000000000000006 "
    "member:number:00000000000000000000007 "
    "member:number:00000000000000000000008 "
    "member:number:00000000000000000000009 "
    "member:number:00000000000000000000010";

static int exec_spop_child(void) {
    static const char *const setup[] = {sadd_ten_members, "SET x z"};
    static const char *const queued[] = {"SPOP s 10", "SET x y"};
    watch_pair w;
    exec_room_setup(&w, setup, 2, 0, queued, 2);
    shim_reset(1);
    /* SPOP's copy of its arguments and one chunk, no more memory */
    fail_nth(K_MALLOC, -1, 3, UINT64_MAX, ENOMEM);
    arm(true);
    const char *r = A(&w, "EXEC");
    arm(false);
    CHECK(strncmp(r, "*2\r\n", 4) == 0);
    CHECK(strcmp(last_record(&w.k), "*1\r\n$4\r\nEXEC\r\n") == 0);
    CHECK(strcmp(B(&w, "GET x"), "$1\r\ny\r\n") == 0);
    watch_close(&w);
    return 0;
}

TEST(exec_spop_leaves_the_writes_after_it_their_room) {
    in_child(exec_spop_child);
}

/* Two records inside EXEC that asked for room of their own (a read's DEL
 * of an expired key, SPOP's SREMs) before a write: each was counted
 * against the writes' room as well, so the second asked for too little
 * and the write after it found no memory (a stop). */
static void exec_extras_run(const char *const *setup, size_t nsetup,
                            const char *const *queued, uint64_t mallocs) {
    watch_pair w;
    exec_room_setup(&w, setup, nsetup, 101, queued, 3);
    shim_reset(1);
    fail_nth(K_MALLOC, -1, mallocs + 1, UINT64_MAX, ENOMEM);
    arm(true);
    const char *r = A(&w, "EXEC");
    arm(false);
    CHECK(strncmp(r, "*3\r\n", 4) == 0);
    CHECK(strstr(r, "$-1\r\n+OK\r\n") != NULL);
    CHECK(strcmp(last_record(&w.k), "*1\r\n$4\r\nEXEC\r\n") == 0);
    CHECK(strcmp(B(&w, "GET x"), "$1\r\ny\r\n") == 0);
    watch_close(&w);
}

/* "SET <key> 1 PX 100" and "GET <key>" of a key of n bytes of c. */
static void long_key_cmds(char c, size_t n, char *set, char *get, size_t size) {
    char key[400];
    memset(key, c, n);
    key[n] = 0;
    snprintf(set, size, "SET %s 1 PX 100", key);
    snprintf(get, size, "GET %s", key);
}

static int exec_two_expired_reads_child(void) {
    static char s1[480], s2[480], g1[480], g2[480];
    long_key_cmds('a', 150, s1, g1, sizeof s1);
    long_key_cmds('b', 150, s2, g2, sizeof s2);
    const char *setup[] = {s1, s2, "SET x z"};
    const char *queued[] = {g1, g2, "SET x y"};
    exec_extras_run(setup, 3, queued, 1); /* the first DEL's chunk */
    return 0;
}

static int exec_spop_and_expired_read_child(void) {
    static char s1[480], g1[480];
    long_key_cmds('a', 360, s1, g1, sizeof s1);
    const char *setup[] = {sadd_ten_members, s1, "SET x z"};
    const char *queued[] = {"SPOP s 10", g1, "SET x y"};
    /* SPOP's copy of its arguments and its chunk */
    exec_extras_run(setup, 3, queued, 2);
    return 0;
}

TEST(exec_two_records_of_their_own_leave_the_writes_their_room) {
    in_child(exec_two_expired_reads_child);
    in_child(exec_spop_and_expired_read_child);
}

/* Thousands of clients watching one key: a WATCH looked for the client
 * among every watcher of the key (as Redis 7.0 looks among every key of
 * the client), so N clients' WATCHes took N^2/2 steps, and one client's
 * WATCH of that key again took N each. It now walks the key's watchers
 * and the client's watches side by side, and stops at the shorter. */
TEST(watch_of_a_key_thousands_watch_costs_no_walk_of_them) {
    kv k;
    kv_setup(&k, false);
    enum { N = 4000 };
    kv_client *c = calloc(N, sizeof *c);
    buf *o = calloc(N, sizeof *o);
    CHECK(c != NULL && o != NULL);
    uint64_t steps = k.watch_steps;
    for (int i = 0; i < N; i++) {
        kv_client_init(&c[i], NULL, &o[i]);
        CHECK(strcmp(exec_cl(&k, &c[i], &o[i], "WATCH hot"), "+OK\r\n") == 0);
    }
    CHECK(k.watch_steps - steps <= 2 * N);
    steps = k.watch_steps;
    for (int i = 0; i < 1000; i++)
        exec_cl(&k, &c[N / 2], &o[N / 2], "WATCH hot");
    CHECK(k.watch_steps - steps <= 2 * 1000);
    CHECK_EQ(k.watched.count, 1);
    /* One write: each watcher marked, once. */
    exec_cl(&k, &c[0], &o[0], "SET hot 1");
    for (int i = 0; i < N; i++) {
        exec_cl(&k, &c[i], &o[i], "MULTI");
        CHECK(strcmp(exec_cl(&k, &c[i], &o[i], "EXEC"), "*-1\r\n") == 0);
    }
    CHECK_EQ(k.watched.count, 0);
    for (int i = 0; i < N; i++) {
        kv_client_reset(&k, &c[i]);
        buf_free(&o[i]);
    }
    free(c);
    free(o);
    kv_free(&k);
}

/* CLIENT LIST's flags show a watch that will fail EXEC ('d'). */
TEST(watch_dirty_shows_in_client_flags) {
    watch_pair w;
    watch_open(&w);
    buf line = {0};
    A(&w, "WATCH k");
    client_line_of(&w.a, &line);
    CHECK(strstr(line.p, " flags=N "));
    B(&w, "SET k 1");
    client_line_of(&w.a, &line);
    CHECK(strstr(line.p, " flags=d "));
    buf_free(&line);
    watch_close(&w);
}

/* On a replica the primary's records are the writes: they fail a watch
 * there as a client's would on the primary; a new history from an empty
 * keyspace (a replay from 0) fails the watches of the keys there, not of
 * one that was not (watch_across_a_replaced_keyspace has the rule). */
TEST(watch_on_a_replica) {
    kv r;
    buf out;
    kv_client c;
    open_kv_with_client(&r, true, &c, &out);
    CHECK(strcmp(exec_cl(&r, &c, &out, "WATCH k"), "+OK\r\n") == 0);
    resp_limits lim = {.max_bulk = 1000, .max_args = MAX_ARGS};
    resp_arg argv[8];
    static const char rec[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n1\r\n";
    const char *err;
    size_t need;
    CHECK_EQ(kv_apply_stream(&r, &lim, argv, rec, sizeof rec - 1, &err, &need),
             (long)sizeof rec - 1);
    exec_cl(&r, &c, &out, "MULTI");
    exec_cl(&r, &c, &out, "GET k");
    CHECK(strcmp(exec_cl(&r, &c, &out, "EXEC"), "*-1\r\n") == 0);
    exec_cl(&r, &c, &out, "WATCH k");
    kv_watch_touch_all(&r, &r.db, NULL);
    exec_cl(&r, &c, &out, "MULTI");
    CHECK(strcmp(exec_cl(&r, &c, &out, "EXEC"), "*-1\r\n") == 0);
    exec_cl(&r, &c, &out, "WATCH j");
    kv_watch_touch_all(&r, &r.db, NULL);
    exec_cl(&r, &c, &out, "MULTI");
    CHECK(strcmp(exec_cl(&r, &c, &out, "EXEC"), "*0\r\n") == 0);
    close_kv_with_client(&r, &c, &out);
}

/* A keyspace replaced (a replica's full resync, kv_watch_touch_all): as
 * redis-server 7's swap of the loaded keyspace, a watch fails for a key
 * in either keyspace, expired or not, but for one already expired at
 * WATCH that is gone after (no live key was there to see), and one in
 * neither. A key the new keyspace holds fails its watches even expired
 * there: Redis swaps while still loading, when no key is expired
 * (keyIsExpired), so "still" and "late" fail there too. A client per
 * key: a failed watch fails its client's EXEC whichever key it was. */
TEST(watch_across_a_replaced_keyspace) {
    static const struct {
        const char *key;
        int before; /* at WATCH: 0 absent, 1 live, 2 expired, 3 live then
                       expired (still there) */
        int after;  /* in the new keyspace: 0 absent, 1 live, 2 expired */
        bool fails;
    } cases[] = {
        {"none", 0, 0, false}, {"gone", 1, 0, true},  {"came", 0, 1, true},
        {"kept", 1, 1, true},  {"dead", 2, 0, false}, {"still", 2, 2, true},
        {"back", 2, 1, true},  {"late", 0, 2, true},  {"aged", 3, 0, true},
        {"aged2", 3, 2, true},
    };
    enum { N = sizeof cases / sizeof *cases };
    watch_pair w;
    watch_open(&w);
    kv_client c[N];
    buf o[N];
    char line[64];
    for (int i = 0; i < N; i++) {
        static const char *const ttl[] = {"", "", " PX 100", " PX 200"};
        if (cases[i].before) {
            snprintf(line, sizeof line, "SET %s 1%s", cases[i].key,
                     ttl[cases[i].before]);
            B(&w, line);
        }
    }
    fixed_now += 101; /* the PX 100 keys expired, not deleted */
    store with;
    CHECK_EQ(store_init(&with), 0);
    for (int i = 0; i < N; i++) {
        o[i] = (buf){0};
        kv_client_init(&c[i], NULL, &o[i]);
        snprintf(line, sizeof line, "WATCH %s", cases[i].key);
        CHECK(strcmp(exec_cl(&w.k, &c[i], &o[i], line), "+OK\r\n") == 0);
        const char *key = cases[i].key;
        if (cases[i].after) {
            CHECK_EQ(store_set(&with, key, strlen(key), "2", 1), 0);
            dict_entry *e = store_find(&with, key, strlen(key));
            if (cases[i].after == 2)
                CHECK_EQ(store_set_expire(&with, e, fixed_now - 1), 0);
        }
    }
    fixed_now += 100; /* the PX 200 keys expired since WATCH */
    kv_watch_touch_all(&w.k, &w.k.db, &with);
    store_free(&w.k.db);
    w.k.db = with;
    for (int i = 0; i < N; i++) {
        exec_cl(&w.k, &c[i], &o[i], "MULTI");
        const char *got = exec_cl(&w.k, &c[i], &o[i], "EXEC");
        if (strcmp(got, cases[i].fails ? "*-1\r\n" : "*0\r\n") != 0)
            fprintf(stderr, "WATCH %s: EXEC answered %s", cases[i].key, got);
        CHECK(strcmp(got, cases[i].fails ? "*-1\r\n" : "*0\r\n") == 0);
        kv_client_reset(&w.k, &c[i]);
        buf_free(&o[i]);
    }
    watch_close(&w);
}

/* FLUSHALL fails the watches of the keys it deletes and no other (Redis
 * 7's touchAllWatchedKeysInDb with nothing to replace them): not of a
 * key absent, nor of one already expired at WATCH; of one live at WATCH
 * and expired since, yes. */
TEST(watch_and_flushall_of_expired_keys) {
    static const struct {
        const char *setup;
        int64_t wait; /* ms after WATCH */
        bool fails;
    } cases[] = {
        {NULL, 0, false},
        {"SET k 1", 0, true},
        {"SET k 1 PX 100", 0, true},
        {"SET k 1 PX 100", 101, true}, /* live at WATCH */
        {"SET k 1 PX 1", -1, false},   /* expired at WATCH */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        watch_pair w;
        watch_open(&w);
        if (cases[i].setup) B(&w, cases[i].setup);
        if (cases[i].wait < 0) fixed_now += 2;
        A(&w, "WATCH k");
        if (cases[i].wait > 0) fixed_now += cases[i].wait;
        CHECK(strcmp(B(&w, "FLUSHALL"), "+OK\r\n") == 0);
        A(&w, "MULTI");
        CHECK(strcmp(A(&w, "EXEC"), cases[i].fails ? "*-1\r\n" : "*0\r\n") ==
              0);
        watch_close(&w);
    }
}

/* Watching many keys, and many clients on one key, then each going in
 * turn: every list stays whole (ASan, and the counts). */
TEST(watch_lists_survive_clients_going_in_any_order) {
    kv k;
    kv_setup(&k, false);
    enum { N = 8 };
    kv_client c[N];
    buf o[N];
    for (int i = 0; i < N; i++) {
        o[i] = (buf){0};
        kv_client_init(&c[i], NULL, &o[i]);
        exec_cl(&k, &c[i], &o[i], "WATCH a b c d");
    }
    CHECK_EQ(k.watched.count, 4);
    static const int order[N] = {3, 0, 7, 5, 1, 6, 2, 4};
    for (int i = 0; i < N; i++) {
        if (i == N / 2)
            exec_cl(&k, &c[order[N - 1]], &o[order[N - 1]], "SET c 1");
        kv_client_reset(&k, &c[order[i]]);
        CHECK_EQ(k.watched.count, i == N - 1 ? 0 : 4);
    }
    for (int i = 0; i < N; i++)
        buf_free(&o[i]);
    kv_free(&k);
}
