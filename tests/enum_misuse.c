/* Must NOT compile with -Werror (tests/CMakeLists.txt: docs.enum_types, a
 * build expected to fail): every enum of lull.h has a type, so a constant of
 * one passed where another is expected is a -Wenum-conversion warning, part
 * of gcc's and clang's -Wextra. Here a clock is passed as a run mode. */
#include <lull.h>

int enum_misuse(lull_loop *loop);
int enum_misuse(lull_loop *loop) {
    return lull_loop_run(loop, LULL_CLOCK_VIRTUAL);
}
