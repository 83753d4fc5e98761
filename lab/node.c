/* Running `node` for the lab's Node rows (lab/loopback_node.c,
 * lab/turns_node.c): finding it on PATH, checking the scenario's script and
 * reading its version once, and running one process per measurement with
 * its stdout captured. Both scenarios share one node_path, so they measure
 * the same binary. */
#include "lab.h"

#include <errno.h>
#include <fcntl.h>
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

int lab_node_run(char *const *args, int pin_cpu, int pin_cpu_b, long slack_ns,
                 char *buf, size_t size) {
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

bool lab_node_available(const char *script, char *why, size_t size) {
    if (!find_node()) {
        snprintf(why, size, "`node` not on PATH");
        return false;
    }
    if (access(script, R_OK) != 0) {
        snprintf(why, size, "%s not found", script);
        return false;
    }
    char *args[] = {node_path, "--version", NULL};
    if (lab_node_run(args, -1, -1, 0, node_version, sizeof node_version) != 0) {
        snprintf(why, size, "`node --version` failed");
        return false;
    }
    node_version[strcspn(node_version, "\n")] = '\0';
    return true;
}

char *lab_node_path(void) {
    return node_path;
}

const char *lab_node_version(void) {
    return node_version;
}
