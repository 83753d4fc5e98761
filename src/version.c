/* The library's version and the names of the errors it returns.
 *
 * Owns nothing: constant strings. Thread-safe. lull returns negative errnos
 * everywhere, so these take either sign; glibc's strerrordesc_np and
 * strerrorname_np give static strings (strerror may format an unknown
 * value into a static buffer, which is neither thread-safe nor stable). */
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

static int positive(int err) {
    return err < 0 ? -err : err; /* INT_MIN stays negative: unknown */
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
