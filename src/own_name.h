/* Names for lull's own callbacks (src/metrics.c reads them): a module that
 * runs handles of its own declares each callback's name with LULL__OWN_NAME,
 * and lull_loop_print_live and the wake audit name that handle by what it is
 * and whose it is. Needs only lull.h, so the modules built on the public API
 * alone (pool, fs, per-core) can use it too. */
#ifndef LULL_OWN_NAME_H
#define LULL_OWN_NAME_H

#include <stddef.h>

#include "lull.h"

/* The name of a callback of lull's own (a stream's socket, a loopback's
 * delivery turn ...), so that lull_loop_print_live and the wake audit name
 * lull's handles by what they are and whose they are, where a user's
 * unnamed callback shows as an address. A module declares each with
 * LULL__OWN_NAME beside the callback; the linker gathers them into one
 * section (no registration at run time, and the core does not include the
 * modules that declare them). */
typedef struct lull__own_name {
    lull_any_fn fn;    /* the callback of lull's own */
    const char *name;  /* "lull_stream fd" */
    const char *owner; /* the struct the handle lives in: "lull_stream" */
    size_t offset;     /* the handle's offset in it */
} lull__own_name;

#define LULL__OWN_NAME(fn, name_, type, member)                                \
    __attribute__((used, section("lull_own_names"),                            \
                   aligned(sizeof(void *)))) static const lull__own_name       \
        lull__own_name_##fn = {(lull_any_fn)(fn), (name_), #type,              \
                               offsetof(type, member)}

/* The entry for fn, or NULL when fn is not lull's own. */
const lull__own_name *lull__own_name_of(lull_any_fn fn);

#endif
