/* The floor servers' protocol (lab/floor/floor.c): what redis-benchmark's
 * default suite sends is answered in the shape and size redis-server
 * gives it, a command cut anywhere waits for its rest, and what a floor
 * does not know is an error, not a crash. */
#include "check.h"

#include <stdio.h>
#include <string.h>

#include "floor/floor.h"

/* Replies compared whole; a difference prints the start of both. */
#define CHECK_TEXT(got, expected)                                              \
    do {                                                                       \
        if (strcmp((got), (expected)) != 0)                                    \
            check_fail(__FILE__, __LINE__, "%s: \"%.80s\" != \"%.80s\"", #got, \
                       (got), (expected));                                     \
    } while (0)

/* The replies to p, or NULL after a protocol error; *taken is what
 * floor_answer took. */
static const char *answer(const char *p, long *taken) {
    static floor_buf out;
    out.len = 0;
    *taken = floor_answer(p, strlen(p), &out);
    CHECK(floor_buf_put(&out, "", 1)); /* a terminating NUL */
    return out.p;
}

static void check_answer(const char *request, const char *expected) {
    long taken;
    const char *got = answer(request, &taken);
    CHECK_EQ(taken, (long)strlen(request));
    CHECK_TEXT(got, expected);
}

TEST(answers_every_command_of_the_default_suite) {
    check_answer("PING\r\n", "+PONG\r\n"); /* PING_INLINE */
    check_answer("*1\r\n$4\r\nPING\r\n", "+PONG\r\n");
    check_answer("*3\r\n$3\r\nSET\r\n$16\r\nkey:__rand_int__\r\n$3\r\nxxx\r\n",
                 "+OK\r\n");
    check_answer("*2\r\n$3\r\nGET\r\n$16\r\nkey:__rand_int__\r\n",
                 "$3\r\nxxx\r\n");
    /* The suite adds the same member each time: redis-server answers :1
     * once, then :0. */
    check_answer("*3\r\n$4\r\nSADD\r\n$5\r\nmyset\r\n$1\r\ne\r\n", ":0\r\n");
    check_answer("*4\r\n$4\r\nHSET\r\n$1\r\nh\r\n$1\r\nf\r\n$3\r\nxxx\r\n",
                 ":0\r\n");
    check_answer("*4\r\n$4\r\nZADD\r\n$1\r\nz\r\n$1\r\n0\r\n$1\r\ne\r\n",
                 ":0\r\n");
    /* redis-benchmark adds one element, then pops it: the pops after the
     * first find the set empty. */
    check_answer("*2\r\n$4\r\nSPOP\r\n$5\r\nmyset\r\n", "$-1\r\n");
    check_answer("*2\r\n$7\r\nZPOPMIN\r\n$1\r\nz\r\n", "*0\r\n");
    check_answer("*5\r\n$4\r\nMSET\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n"
                 "2\r\n",
                 "+OK\r\n");
    check_answer("*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$4\r\nsave\r\n",
                 "*2\r\n$4\r\nsave\r\n$0\r\n\r\n");
}

/* The integer the reply to request carries. */
static long integer_reply(const char *request) {
    long taken, n = -1;
    CHECK(sscanf(answer(request, &taken), ":%ld\r\n", &n) == 1);
    return n;
}

#define INCR  "*2\r\n$4\r\nINCR\r\n$1\r\nc\r\n"
#define LPUSH "*3\r\n$5\r\nLPUSH\r\n$1\r\nl\r\n$1\r\nx\r\n"
#define RPUSH "*4\r\n$5\r\nRPUSH\r\n$1\r\nl\r\n$1\r\nx\r\n$1\r\ny\r\n"
#define LPOP  "*2\r\n$4\r\nLPOP\r\n$1\r\nl\r\n"

/* INCR's counter grows by one; a push answers the list's length, which
 * the pops shorten, as redis-server's does for the suite's one list. */
TEST(counter_and_list_length_follow_the_suite) {
    long c = integer_reply(INCR);
    CHECK_EQ(integer_reply(INCR), c + 1);
    long len = integer_reply(LPUSH);
    CHECK(len >= 1);
    CHECK_EQ(integer_reply(RPUSH), len + 2); /* two values */
    CHECK_EQ(integer_reply(INCR), c + 2);    /* its own count */
    check_answer(LPOP, "$3\r\nxxx\r\n");
    check_answer("*2\r\n$4\r\nRPOP\r\n$1\r\nl\r\n", "$3\r\nxxx\r\n");
    CHECK_EQ(integer_reply(LPUSH), len + 1);
    for (long i = 0; i < len + 3; i++) /* past empty: stays at 0 */
        check_answer(LPOP, "$3\r\nxxx\r\n");
    CHECK_EQ(integer_reply(LPUSH), 1);
}

TEST(lrange_answers_stop_minus_start_plus_one_values) {
    check_answer("*4\r\n$6\r\nLRANGE\r\n$1\r\nl\r\n$1\r\n0\r\n$1\r\n2\r\n",
                 "*3\r\n$3\r\nxxx\r\n$3\r\nxxx\r\n$3\r\nxxx\r\n");
    check_answer("*4\r\n$6\r\nLRANGE\r\n$1\r\nl\r\n$1\r\n5\r\n$1\r\n4\r\n",
                 "*0\r\n");
    long taken;
    const char *got = answer(
        "*4\r\n$6\r\nLRANGE\r\n$1\r\nl\r\n$1\r\n0\r\n$3\r\n599\r\n", &taken);
    CHECK(strncmp(got, "*600\r\n", 6) == 0);
    CHECK_EQ((long)strlen(got), 6 + 600 * 9);
    /* A range no client of a floor asks for is capped, not allocated. */
    got = answer("*4\r\n$6\r\nLRANGE\r\n$1\r\nl\r\n$1\r\n0\r\n$9\r\n999999999"
                 "\r\n",
                 &taken);
    CHECK(strncmp(got, "*10000\r\n", 8) == 0);
    check_answer("*4\r\n$6\r\nLRANGE\r\n$1\r\nl\r\n$2\r\n-1\r\n$1\r\n2\r\n",
                 "-ERR value is not an integer\r\n");
}

TEST(get_answers_the_value_set_for_it) {
    CHECK(floor_set_value("hello"));
    check_answer("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", "$5\r\nhello\r\n");
    char big[600];
    memset(big, 'v', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CHECK(!floor_set_value(big)); /* too long: refused, nothing changes */
    check_answer("*2\r\n$4\r\nLPOP\r\n$1\r\nl\r\n", "$5\r\nhello\r\n");
    CHECK(floor_set_value("xxx"));
}

TEST(a_command_cut_anywhere_waits_for_its_rest) {
    const char *whole = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nxxx\r\n";
    char part[64];
    for (size_t n = 1; n < strlen(whole); n++) {
        memcpy(part, whole, n);
        part[n] = '\0';
        long taken;
        const char *got = answer(part, &taken);
        CHECK_EQ(taken, 0);
        CHECK_TEXT(got, "");
    }
}

TEST(unknown_commands_and_wrong_argument_counts_are_errors) {
    const char *err = "-ERR unknown command or wrong number of arguments\r\n";
    check_answer("*1\r\n$5\r\nHELLO\r\n", err);
    check_answer("*1\r\n$3\r\nGET\r\n", err);
    check_answer("*3\r\n$4\r\nHSET\r\n$1\r\nh\r\n$1\r\nf\r\n", err);
    check_answer("*2\r\n$6\r\nCONFIG\r\n$3\r\nSET\r\n", err);
    /* Too many, where redis-server has an exact count. */
    check_answer("*3\r\n$3\r\nGET\r\n$1\r\nk\r\n$1\r\nj\r\n", err);
    check_answer("*3\r\n$4\r\nPING\r\n$1\r\na\r\n$1\r\nb\r\n", err);
    check_answer("*4\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$1\r\na\r\n$1\r\nb"
                 "\r\n",
                 err);
    long taken;
    const char *got = answer("*1\r\n#4\r\nPING\r\n", &taken);
    CHECK_EQ(taken, -1);
    CHECK_TEXT(got, "-ERR Protocol error\r\n");
}
