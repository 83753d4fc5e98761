/* Where lull-lab finds the programs and scripts it runs (lull-lab-so, the
 * floor servers, lull-kv, the Node scripts): under the prefix of an
 * installed lull-lab (`make install`: bin/, libexec/lull/, share/lull/),
 * else where this build made them (the paths lab/CMakeLists.txt compiles
 * in). The installed copy is looked for first, so an installed lull-lab
 * keeps working after its build tree is gone. */
#include "lab.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *lab_installed_path(const char *rel, const char *built, char *buf,
                               size_t size) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        /* <prefix>/bin/lull-lab: cut two names to reach <prefix>. */
        for (int cut = 0; cut < 2; cut++) {
            char *slash = strrchr(exe, '/');
            if (!slash) return built;
            *slash = '\0';
        }
        int len = snprintf(buf, size, "%s/%s", exe, rel);
        if (len > 0 && (size_t)len < size && access(buf, R_OK) == 0) return buf;
    }
    return built;
}
