/* Running `node` for the lab's Node rows (lab/loopback_node.c,
 * lab/turns_node.c): finding it on PATH, checking the scenario's script and
 * reading its version once, and running one process per measurement with
 * its stdout captured. Both scenarios share one node_path, so they measure
 * the same binary. */
#include "lab.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* How long Node may stay silent before it is taken for hung and killed:
 * `node --version` answers in well under a second; a measurement prints
 * its one line at its end, and the longest (the idle figure, a million
 * timers, runner.js driving its runners) takes a few seconds at --quick
 * sizes (3.5 s on a loaded 2-CPU machine) and more at full sizes. A
 * `node` that hung (not Node, or Node unable to start its threads under a
 * low ulimit -u) hung lull-lab for good. */
#define NODE_VERSION_MS 5000
#define NODE_QUICK_MS   30000
#define NODE_FULL_MS    120000
static int node_run_ms = NODE_FULL_MS;
/* Node hung once: its later rows are not run, rather than each waiting
 * out the same silence. */
static bool node_hung;

void lab_node_sizes(bool quick) {
    node_run_ms = quick ? NODE_QUICK_MS : NODE_FULL_MS;
}

/* Runs node with args, its stdout into buf; -ETIMEDOUT (node killed) when
 * it prints nothing for timeout_ms, -ENODATA when it exits 0 having
 * printed nothing, -ECHILD when it fails. */
static int run_node(char *const *args, int pin_cpu, int pin_cpu_b,
                    long slack_ns, char *buf, size_t size, int timeout_ms) {
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) return -errno;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(pipefd[0]);
        close(pipefd[1]);
        return -e;
    }
    if (pid == 0) {
        /* Node ends with lull-lab, however lull-lab ends (SIGKILL too):
         * orphaned, it ran its measurement to the end, for seconds. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127); /* the parent is gone already */
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
    int rc = 0;
    while (used < size - 1) {
        struct pollfd pfd = {.fd = pipefd[0], .events = POLLIN};
        int n = poll(&pfd, 1, timeout_ms);
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) {
            rc = -ETIMEDOUT;
            break;
        }
        ssize_t r = read(pipefd[0], buf + used, size - 1 - used);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        used += (size_t)r;
    }
    buf[used] = '\0';
    close(pipefd[0]);
    if (rc < 0) kill(pid, SIGKILL);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (rc < 0) return rc;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return -ECHILD;
    return used == 0 ? -ENODATA : 0;
}

int lab_node_run(char *const *args, int pin_cpu, int pin_cpu_b, long slack_ns,
                 char *buf, size_t size) {
    if (node_hung) return -ETIMEDOUT;
    int rc =
        run_node(args, pin_cpu, pin_cpu_b, slack_ns, buf, size, node_run_ms);
    if (rc == -ETIMEDOUT) {
        node_hung = true;
        printf("  %s\n", lab_node_error(rc));
    }
    return rc;
}

const char *lab_node_error(int rc) {
    static char text[96];
    if (rc == -ETIMEDOUT)
        snprintf(text, sizeof text,
                 "node printed nothing for %d s: killed; Node's other rows "
                 "not run",
                 node_run_ms / 1000);
    else if (rc == -ENODATA)
        snprintf(text, sizeof text, "node printed no result");
    else if (rc == -ECHILD)
        snprintf(text, sizeof text, "node exited with a failure");
    else
        snprintf(text, sizeof text, "starting node: %s", strerror(-rc));
    return text;
}

bool lab_node_available(const char *script, char *why, size_t size) {
    /* `node --version` is asked once: a node that hangs costs its
     * timeout once, not once per scenario. */
    static int probed; /* 0: not yet, 1: Node, -1: not (reason in said) */
    static char said[128];
    if (probed == 0) {
        probed = -1;
        char *args[] = {node_path, "--version", NULL};
        int rc = find_node() ? run_node(args, -1, -1, 0, node_version,
                                        sizeof node_version, NODE_VERSION_MS)
                             : 1;
        node_version[strcspn(node_version, "\n")] = '\0';
        if (rc == 1)
            snprintf(said, sizeof said, "`node` not on PATH");
        else if (rc == -ETIMEDOUT)
            snprintf(said, sizeof said,
                     "`node --version` gave no answer in %d s",
                     NODE_VERSION_MS / 1000);
        else if (rc < 0 && rc != -ENODATA)
            snprintf(said, sizeof said, "`node --version` failed");
        else if (node_version[0] != 'v' || node_version[1] < '0' ||
                 node_version[1] > '9')
            /* Node says "v20.11.1"; anything else is not Node, and its
             * rows would report its silence as lost events. */
            snprintf(said, sizeof said,
                     "`node --version` printed '%.24s', not a version",
                     node_version);
        else
            probed = 1;
    }
    if (probed < 0) {
        snprintf(why, size, "%s", said);
        return false;
    }
    if (access(script, R_OK) != 0) {
        snprintf(why, size, "%s not found", script);
        return false;
    }
    return true;
}

char *lab_node_path(void) {
    return node_path;
}

const char *lab_node_version(void) {
    return node_version;
}
