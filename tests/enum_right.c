/* The control for tests/enum_misuse.c: the same call with the right enum
 * compiles cleanly under the same flags, so the misuse case fails for its
 * enum alone. */
#include <lull.h>

int enum_right(lull_loop *loop);
int enum_right(lull_loop *loop) {
    return lull_loop_run(loop, LULL_RUN_NOWAIT);
}
