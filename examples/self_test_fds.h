/* self_test_fds.h: the fd check of the examples whose self-test holds
 * both ends of many connections in one process (prefork, reuseport). With
 * fewer fds allowed than it holds, such a test would wait for an fd its
 * own clients keep, for good, or fail half-way: so it raises the soft
 * limit (RLIMIT_NOFILE, `ulimit -n`) to what it needs where the hard
 * limit allows, or says what it needs and returns false. */
#ifndef SELF_TEST_FDS_H
#define SELF_TEST_FDS_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/resource.h>

static inline bool self_test_fds(const char *program, rlim_t need) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= need) return true;
    if (rl.rlim_max >= need) {
        rl.rlim_cur = need;
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0) return true;
    }
    fprintf(stderr,
            "%s: the self-test needs %llu fds; RLIMIT_NOFILE is %llu, at "
            "most %llu (ulimit -n)\n",
            program, (unsigned long long)need, (unsigned long long)rl.rlim_cur,
            (unsigned long long)rl.rlim_max);
    return false;
}

#endif
