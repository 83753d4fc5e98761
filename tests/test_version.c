/* The version calls and the error names (src/version.c): the run-time
 * version matches the header's, and every errno lull returns has a name and
 * a description, whichever sign it is given with. */
#include "check.h"

#include <errno.h>
#include <limits.h>
#include <lull.h>
#include <stdio.h>
#include <string.h>

TEST(version_matches_the_header) {
    CHECK_EQ((int)lull_version(), LULL_VERSION_HEX);
    CHECK_EQ((int)(lull_version() >> 16), LULL_VERSION_MAJOR);
    CHECK_EQ((int)((lull_version() >> 8) & 0xff), LULL_VERSION_MINOR);
    CHECK_EQ((int)(lull_version() & 0xff), LULL_VERSION_PATCH);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", LULL_VERSION_MAJOR,
             LULL_VERSION_MINOR, LULL_VERSION_PATCH);
    CHECK(strcmp(lull_version_string(), want) == 0);
    CHECK(lull_version_string() == lull_version_string()); /* static */
}

/* The errnos lull's calls and callbacks return, by name. */
TEST(error_names_of_lulls_errnos) {
    static const struct {
        int err;
        const char *name;
    } known[] = {{EINVAL, "EINVAL"},         {EBUSY, "EBUSY"},
                 {EPIPE, "EPIPE"},           {EMSGSIZE, "EMSGSIZE"},
                 {ECONNRESET, "ECONNRESET"}, {ETIMEDOUT, "ETIMEDOUT"},
                 {EPROTO, "EPROTO"},         {ECANCELED, "ECANCELED"},
                 {ESHUTDOWN, "ESHUTDOWN"},   {EAGAIN, "EAGAIN"},
                 {ENOBUFS, "ENOBUFS"},       {EDEADLK, "EDEADLK"},
                 {ENOMEM, "ENOMEM"},         {ENOTCONN, "ENOTCONN"}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        int e = known[i].err;
        CHECK(strcmp(lull_err_name(-e), known[i].name) == 0);
        CHECK(strcmp(lull_err_name(e), known[i].name) == 0);
        CHECK(strcmp(lull_strerror(-e), strerror(e)) == 0);
        CHECK(lull_strerror(-e) == lull_strerror(e));
    }
    CHECK(strcmp(lull_strerror(-ECONNRESET), "Connection reset by peer") == 0);
}

TEST(error_names_of_zero_and_unknown_values) {
    CHECK(strcmp(lull_err_name(0), "OK") == 0);
    CHECK(strcmp(lull_strerror(0), "Success") == 0);
    const int odd[] = {INT_MIN, INT_MAX, -4095, 4095, -100000};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        CHECK(strcmp(lull_err_name(odd[i]), "UNKNOWN") == 0);
        CHECK(strcmp(lull_strerror(odd[i]), "Unknown error") == 0);
    }
}
