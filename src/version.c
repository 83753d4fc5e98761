/* The library's version and the names of the errors it returns.
 *
 * Owns nothing: constant strings. Thread-safe. lull returns negative errnos
 * everywhere, so these take either sign; glibc's strerrordesc_np and
 * strerrorname_np give static strings (strerror may format an unknown
 * value into a static buffer, which is neither thread-safe nor stable). */
#include <limits.h>
#include <string.h>

#include "internal.h"

#define STR_(x) #x
#define STR(x)  STR_(x)

unsigned lull_version(void) {
    return LULL_VERSION_HEX;
}

const char *lull_version_string(void) {
    return STR(LULL_VERSION_MAJOR) "." STR(LULL_VERSION_MINOR) "." STR(
        LULL_VERSION_PATCH);
}

/* -INT_MIN does not fit in an int (undefined behaviour): it is no errno,
 * so any value that names none will do. */
static int positive(int err) {
    if (err == INT_MIN) return INT_MAX;
    return err < 0 ? -err : err;
}

const char *lull_strerror(int err) {
    if (err == 0) return "Success";
    const char *s = strerrordesc_np(positive(err));
    return s ? s : "Unknown error";
}

const char *lull_err_name(int err) {
    if (err == 0) return "OK";
    const char *s = strerrorname_np(positive(err));
    return s ? s : "UNKNOWN";
}
