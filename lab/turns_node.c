/* Node's row of the `turns` figures: each entry runs lab/node/turns.js
 * (found through LAB_SOURCE_DIR, set by lab/CMakeLists.txt) with `node` from
 * PATH, one process per measurement, and reads the one JSON line it prints:
 * {"figure": "...", "values": [v0, v1, ...]} (null for a value Node cannot
 * measure). Node is skipped with a line when it is not on PATH. The round
 * trip pins the whole Node process (main thread and worker) to the CPUs the
 * C round trips pin their two threads to; the lateness rows give it the
 * timer slack the driver gave the C rows' thread (inherited across exec).
 * Polls per hop are Node's libuv iterations per hop
 * (performance.nodeTiming.uvMetricsInfo.loopCount; one poll each). */
#include "lab.h"
#include "turns.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef LAB_SOURCE_DIR
#define LAB_SOURCE_DIR "."
#endif
#define SCRIPT LAB_SOURCE_DIR "/node/turns.js"

static char node_path[512];
static char node_version[32];

/* Looks for an executable `node` on PATH. */
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

/* Runs node with argv (argv[0] is set here), optionally pinned to the CPUs
 * pin_cpu and pin_cpu_b (-1: not pinned) and at the timer slack slack_ns
 * (0: the caller's); reads at most size-1 bytes of stdout into buf.
 * Returns 0 when node exited 0. */
static int run_node(char *const *args, int pin_cpu, int pin_cpu_b,
                    long slack_ns, char *buf, size_t size) {
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
        if (pin_cpu >= 0) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(pin_cpu, &set);
            CPU_SET(pin_cpu_b, &set);
            sched_setaffinity(0, sizeof set, &set);
        }
        if (slack_ns > 0) prctl(PR_SET_TIMERSLACK, slack_ns, 0, 0, 0);
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

/* Reads the numbers of "values": [...] into out (null -> NaN). */
static int parse_values(const char *json, turns_result *out) {
    const char *p = strstr(json, "\"values\"");
    if (!p) return -EPROTO;
    p = strchr(p, '[');
    if (!p) return -EPROTO;
    p++;
    for (int i = 0; i < TURNS_VALUES; i++) {
        while (*p == ' ' || *p == '\n')
            p++;
        if (*p == ']') break;
        if (strncmp(p, "null", 4) == 0) {
            out->v[i] = NAN;
            p += 4;
        } else {
            char *end;
            out->v[i] = strtod(p, &end);
            if (end == p) return -EPROTO;
            p = end;
        }
        while (*p == ' ')
            p++;
        if (*p == ',') p++;
    }
    return 0;
}

static int measure(const char *figure, const turns_params *p, bool pin,
                   turns_result *out) {
    char a[10][48];
    snprintf(a[0], sizeof a[0], "hops=%llu", (unsigned long long)p->hops);
    snprintf(a[1], sizeof a[1], "slow_hops=%llu",
             (unsigned long long)p->slow_hops);
    snprintf(a[2], sizeof a[2], "samples=%d", p->lateness_samples);
    snprintf(a[3], sizeof a[3], "handles=%d", p->idle_handles_peer);
    snprintf(a[4], sizeof a[4], "window_ms=%llu",
             (unsigned long long)(p->idle_window_ns / 1000000));
    snprintf(a[5], sizeof a[5], "trips=%d", p->trips);
    snprintf(a[6], sizeof a[6], "warmup=%d", p->warmup_trips);
    snprintf(a[7], sizeof a[7], "timers=%d", p->timers);
    snprintf(a[8], sizeof a[8], "pairs=%d", p->timer_pairs);
    snprintf(a[9], sizeof a[9], "seed=%llu",
             (unsigned long long)(p->seed & 0xFFFFFFFFu));
    char *args[] = {node_path, "--expose-gc", SCRIPT, (char *)figure, a[0],
                    a[1],      a[2],          a[3],   a[4],           a[5],
                    a[6],      a[7],          a[8],   a[9],           NULL};
    char buf[4096];
    int rc = run_node(args, pin ? p->cpu : -1, p->cpu_b, p->slack_ns, buf,
                      sizeof buf);
    if (rc < 0) return rc;
    return parse_values(buf, out);
}

static int chain_task(const turns_params *p, turns_result *out) {
    return measure("chain_task", p, false, out);
}

static int chain_timer0(const turns_params *p, turns_result *out) {
    return measure("chain_timer0", p, false, out);
}

static int lateness(const turns_params *p, turns_result *out) {
    return measure("lateness", p, false, out);
}

static int idle(const turns_params *p, turns_result *out) {
    return measure("idle", p, false, out);
}

/* On one CPU both threads share it; on two, Node's main thread and its
 * worker may each run on either (Node cannot pin its own threads). */
static int roundtrip(const turns_params *p, turns_result *out) {
    return measure("roundtrip", p, true, out);
}

static int timers(const turns_params *p, turns_result *out) {
    /* A million Timeout objects take Node seconds to build: --quick
     * measures them in the first round only. */
    if (p->quick && p->round > 0) return TURNS_SKIPPED;
    return measure("timers", p, false, out);
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
    if (run_node(args, -1, -1, 0, node_version, sizeof node_version) != 0) {
        snprintf(why, size, "`node --version` failed");
        return false;
    }
    node_version[strcspn(node_version, "\n")] = '\0';
    return true;
}

static const char *version(void) {
    return node_version;
}

static const turns_entry entries[] = {
    {TURNS_CHAIN_TASK, "node: setImmediate", chain_task, "every hop", 0,
     TURNS_CLASS_EVERY_HOP},
    {TURNS_CHAIN_TIMER0, "node: setTimeout(0)", chain_timer0,
     "every hop (1 ms clamp)", 0, TURNS_CLASS_EVERY_HOP},
    {TURNS_LATENESS, "node: setTimeout(1)", lateness, NULL, TURNS_SLACK_BOTH,
     0},
    {TURNS_IDLE, "node (process CPU)", idle, NULL, 0, 0},
    {TURNS_ROUNDTRIP, "node: worker MessagePort", roundtrip, NULL, 0, 0},
    {TURNS_TIMERS, "node: setTimeout", timers, NULL, 0, 0},
};

const turns_peer turns_node = {
    "node",
    version,
    available,
    entries,
    (int)(sizeof entries / sizeof entries[0]),
    "the `node` on PATH, one process per measurement",
};
