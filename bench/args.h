/* A count on a bench program's command line (the bench programs). */
#ifndef LULL_BENCH_ARGS_H
#define LULL_BENCH_ARGS_H

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

/* Decimal digits only, within [min, max]: atoi and strtoul read "10x" as
 * 10, "1e6" as 1, "abc" as 0 (CPU 0 for --cpu), " 5" and "+5" as 5, and
 * wrapped "-1" or 2^32+1 to a huge or a small count; each of those ran a
 * benchmark nobody asked for, with no word said. */
static inline bool bench_count(const char *s, unsigned long long min,
                               unsigned long long max,
                               unsigned long long *out) {
    if (*s < '0' || *s > '9') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno || v < min || v > max) return false;
    *out = v;
    return true;
}

#endif /* LULL_BENCH_ARGS_H */
