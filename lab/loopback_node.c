/* Node's rows of the `loopback` scenario: each measurement runs
 * lab/node/loopback.js (found through LAB_SOURCE_DIR, set by
 * lab/CMakeLists.txt) with `node` from PATH, one process per measurement,
 * and reads the one JSON line it prints. Node is skipped with a line when it
 * is not on PATH. The fast modes first run as many unmeasured runs as they
 * measure, so V8 has compiled the workload (the C rows need one). */
#include "lab.h"
#include "loopback.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef LAB_SOURCE_DIR
#define LAB_SOURCE_DIR "."
#endif
#define SCRIPT LAB_SOURCE_DIR "/node/loopback.js"

static char node_path[512];
static char node_version[32];

static bool find_node(void) {
    const char *path = getenv("PATH");
    if (!path) return false;
    while (*path) {
        size_t len = strcspn(path, ":");
        if (len > 0 && len + 6 < sizeof node_path) {
            snprintf(node_path, sizeof node_path, "%.*s/node", (int)len, path);
            if (access(node_path, X_OK) == 0) return true;
        }
        path += len;
        if (*path == ':') path++;
    }
    return false;
}

/* Runs node with args (args[0] is node_path); reads at most size-1 bytes of
 * its stdout into buf. 0 when node exited 0. */
static int run_node(char *const *args, char *buf, size_t size) {
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(pipefd[0]);
        close(pipefd[1]);
        return -e;
    }
    if (pid == 0) {
        dup2(pipefd[1], STDOUT_FILENO);
        execv(node_path, args);
        _exit(127);
    }
    close(pipefd[1]);
    size_t used = 0;
    for (;;) {
        ssize_t r = read(pipefd[0], buf + used, size - 1 - used);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        used += (size_t)r;
        if (used == size - 1) break;
    }
    buf[used] = '\0';
    close(pipefd[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return -ECHILD;
    return 0;
}

/* The number after "key": in a flat JSON object, or NaN. */
static double field(const char *json, const char *key) {
    char pat[48];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    if (!p) return NAN;
    char *end;
    double v = strtod(p + strlen(pat), &end);
    return end == p + strlen(pat) ? NAN : v;
}

static int measure(const char *mode, const lb_params *p, lb_result *out) {
    char a[6][48];
    snprintf(a[0], sizeof a[0], "mode=%s", mode);
    snprintf(a[1], sizeof a[1], "reps=%d", p->reps);
    snprintf(a[2], sizeof a[2], "warmup=%d", p->reps > 1 ? p->reps : 0);
    snprintf(a[3], sizeof a[3], "commits=%d", p->commits);
    snprintf(a[4], sizeof a[4], "effects=%d", p->effects);
    snprintf(a[5], sizeof a[5], "rounds=%d", p->graph_rounds);
    char *args[] = {node_path, SCRIPT, a[0], a[1], a[2],
                    a[3],      a[4],   a[5], NULL};
    char buf[1024];
    int rc = run_node(args, buf, sizeof buf);
    if (rc < 0) return rc;
    static const char *const names[LB_WORKLOADS] = {"commits", "graph"};
    for (int w = 0; w < LB_WORKLOADS; w++) {
        char key[32];
        snprintf(key, sizeof key, "%s_ms", names[w]);
        out->ms[w] = field(buf, key);
        snprintf(key, sizeof key, "%s_frames", names[w]);
        out->frames[w] = field(buf, key);
        snprintf(key, sizeof key, "%s_turns", names[w]);
        out->turns[w] = field(buf, key);
        snprintf(key, sizeof key, "%s_timers", names[w]);
        out->timers[w] = field(buf, key);
        if (!isfinite(out->ms[w]) ||
            out->frames[w] != (double)lb_work_expected_frames(w, p))
            return -EPROTO;
    }
    return 0;
}

static int set_timeout(const lb_params *p, lb_result *out) {
    return measure("setTimeout", p, out);
}

static int set_immediate(const lb_params *p, lb_result *out) {
    return measure("setImmediate", p, out);
}

static int message_channel(const lb_params *p, lb_result *out) {
    return measure("MessageChannel", p, out);
}

static bool available(char *why, size_t size) {
    if (!find_node()) {
        snprintf(why, size, "`node` not on PATH");
        return false;
    }
    if (access(SCRIPT, R_OK) != 0) {
        snprintf(why, size, "%s not found", SCRIPT);
        return false;
    }
    char *args[] = {node_path, "--version", NULL};
    if (run_node(args, node_version, sizeof node_version) != 0) {
        snprintf(why, size, "`node --version` failed");
        return false;
    }
    node_version[strcspn(node_version, "\n")] = '\0';
    return true;
}

static const char *version(void) {
    return node_version;
}

static const lb_entry entries[] = {
    {"setTimeout", "node: setTimeout(0)", set_timeout, true},
    {"setImmediate", "node: setImmediate", set_immediate, false},
    {"MessageChannel", "node: MessageChannel", message_channel, false},
};

const lb_peer lb_node = {
    "node",
    version,
    available,
    entries,
    (int)(sizeof entries / sizeof entries[0]),
};
