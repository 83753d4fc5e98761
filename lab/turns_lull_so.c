/* lull linked as a shared library: the rows where a call's cost is a few
 * nanoseconds (the chains, timers at scale), measured by lull-lab-so
 * (lab/so/main.c), which runs lab/turns_lull.c's entries against
 * liblull.so. lull-lab itself links lull statically; the peers it compares
 * with are mostly the distribution's shared libraries, whose every call
 * goes through the PLT. Each measurement is one process (fork + exec), the
 * parameters and results passed raw through pipes. Skipped with a line when
 * the program was not built beside lull-lab. */
#include "lab.h"
#include "turns.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef LAB_SO_RUNNER
#define LAB_SO_RUNNER "lull-lab-so"
#endif

/* lull-lab-so, installed or where this build made it. */
static const char *so_runner(void) {
    static char buf[4096];
    return lab_installed_path("libexec/lull/lull-lab-so", LAB_SO_RUNNER, buf,
                              sizeof buf);
}

/* Runs lull-lab-so on lull's entry `label` of `figure`. */
static int run(int figure, const char *label, const turns_params *p,
               turns_result *out) {
    int in[2], res[2];
    if (pipe2(in, O_CLOEXEC) != 0) return -errno;
    if (pipe2(res, O_CLOEXEC) != 0) {
        int e = errno;
        close(in[0]);
        close(in[1]);
        return -e;
    }
    char fig[16];
    snprintf(fig, sizeof fig, "%d", figure);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], STDIN_FILENO);
        dup2(res[1], STDOUT_FILENO);
        execl(so_runner(), so_runner(), fig, label, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(res[1]);
    int rc = pid < 0 ? -errno : 0;
    /* turns_params is far smaller than a pipe's buffer: no deadlock. */
    if (rc == 0 && write(in[1], p, sizeof *p) != (ssize_t)sizeof *p)
        rc = -EPIPE;
    close(in[1]);
    int child_rc = -EPROTO;
    if (rc == 0 &&
        (read(res[0], &child_rc, sizeof child_rc) != (ssize_t)sizeof child_rc ||
         read(res[0], out, sizeof *out) != (ssize_t)sizeof *out))
        child_rc = -EPROTO;
    close(res[0]);
    if (pid > 0) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
    }
    return rc < 0 ? rc : child_rc;
}

static int chain_task(const turns_params *p, turns_result *out) {
    return run(TURNS_CHAIN_TASK, "lull: lull_task_post", p, out);
}

static int chain_timer0(const turns_params *p, turns_result *out) {
    return run(TURNS_CHAIN_TIMER0, "lull: lull_timer_start(0)", p, out);
}

static int timers(const turns_params *p, turns_result *out) {
    return run(TURNS_TIMERS, "lull: armed in callbacks", p, out);
}

static bool available(char *why, size_t size) {
    if (access(so_runner(), X_OK) == 0) return true;
    snprintf(why, size, "%s not built", so_runner());
    return false;
}

static const turns_entry entries[] = {
    {TURNS_CHAIN_TASK, "lull (liblull.so): lull_task_post", chain_task,
     "every 0.5 ms (quantum)", 0, TURNS_CLASS_QUANTUM},
    {TURNS_CHAIN_TIMER0, "lull (liblull.so): lull_timer_start(0)", chain_timer0,
     "every 0.5 ms (quantum)", 0, TURNS_CLASS_QUANTUM},
    {TURNS_TIMERS, "lull (liblull.so): armed in callbacks", timers, NULL, 0, 0},
};

const turns_peer turns_lull_so = {
    "lull.so",
    NULL,
    available,
    entries,
    (int)(sizeof entries / sizeof entries[0]),
    "shared library (liblull.so) of the same build, own process per "
    "measurement",
};
