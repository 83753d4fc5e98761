/* Where the `runner` scenario's processes run, and what the CPUs did
 * meanwhile (lab/runner.h). On a machine of two CPUs or more the transport
 * (lull's, the floor, Node: the process that reads the runners' pipes) is
 * pinned to one CPU and every runner to another, so that the runners'
 * own work (1,000 of them keep a CPU busy) is not a queue the transport
 * waits in for a CPU: what is left of a wait is the wake-up across CPUs
 * and the transport's own work. The runners pin themselves at their start
 * (LAB_RUNNER_CPU in their environment, which Node's children inherit
 * too); the transport's process is lull-lab's thread, and Node's process
 * inherits that thread's CPU when lull-lab starts it.
 *
 * LAB_RUNNER_FIFO=PRIO (where permitted: root or CAP_SYS_NICE) also runs
 * the transport at SCHED_FIFO PRIO, Node's process too (it inherits it),
 * while every runner returns to SCHED_OTHER at its start: other work on
 * a shared machine then cannot keep the transport from its CPU, and the
 * wait is what the transport and the kernel's wake-up cost. The default
 * is the ordinary class, what a program gets.
 *
 * /proc/stat's line of each of the two CPUs, read at the start and at the
 * end of a measurement's stream, gives each CPU's busy share (user, nice,
 * system, irq, softirq over all ticks: 100 a second, so a stream of
 * 0.6 s reads to about 2%) and the hypervisor's steal: a round whose
 * transport CPU was busy with other work says so. One thread: the
 * scenario's. */
#include "runner.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUNNER_CPU_ENV  "LAB_RUNNER_CPU"
#define RUNNER_FIFO_ENV "LAB_RUNNER_FIFO"

static cpu_set_t saved;          /* the thread's CPUs before runner_pin_begin */
static bool have_saved;          /* ... read, to be restored */
static int pinned[2] = {-1, -1}; /* transport, runners; -1: not pinned */

int runner_pin_begin(char *why, size_t size) {
    why[0] = '\0';
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        snprintf(why, size, "not pinned: sched_getaffinity: %s",
                 strerror(errno));
        return -errno;
    }
    int cpus[2], n = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && n < 2; cpu++)
        if (CPU_ISSET(cpu, &set)) cpus[n++] = cpu;
    if (n < 2) {
        snprintf(why, size,
                 "not pinned: one CPU (%d) allowed, the transport and the "
                 "runners share it",
                 cpus[0]);
        return -ENODEV;
    }
    saved = set;
    have_saved = true;
    int rc = lab_pin_cpu(cpus[0]);
    if (rc < 0) {
        snprintf(why, size, "not pinned: %s", strerror(-rc));
        return rc;
    }
    char buf[16];
    snprintf(buf, sizeof buf, "%d", cpus[1]);
    setenv(RUNNER_CPU_ENV, buf, 1);
    pinned[0] = cpus[0];
    pinned[1] = cpus[1];
    snprintf(why, size, "the transport on CPU %d, every runner on CPU %d",
             cpus[0], cpus[1]);
    return 0;
}

void runner_pin_end(void) {
    if (have_saved)
        pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
    have_saved = false;
    unsetenv(RUNNER_CPU_ENV);
    pinned[0] = pinned[1] = -1;
}

int runner_pinned_cpu(int which) {
    return which == 0 || which == 1 ? pinned[which] : -1;
}

void runner_child_pin(void) {
    /* A runner is ordinary work whatever its transport's class. */
    if (sched_getscheduler(0) != SCHED_OTHER) {
        struct sched_param sp = {0};
        sched_setscheduler(0, SCHED_OTHER, &sp);
    }
    const char *s = getenv(RUNNER_CPU_ENV);
    if (!s || !*s) return;
    char *end;
    long cpu = strtol(s, &end, 10);
    if (*end || cpu < 0 || cpu >= CPU_SETSIZE) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET((int)cpu, &set);
    sched_setaffinity(0, sizeof set, &set); /* a failure leaves it unpinned */
}

static int saved_policy = -1;       /* before runner_fifo_begin; -1: none */
static struct sched_param saved_sp; /* ... and its priority */

int runner_fifo_begin(char *why, size_t size) {
    why[0] = '\0';
    const char *s = getenv(RUNNER_FIFO_ENV);
    if (!s || !*s) return 0;
    char *end;
    long prio = strtol(s, &end, 10);
    if (*end || prio < 1 || prio > 99) {
        snprintf(why, size, "%s=%s: not a priority 1-99, not raised",
                 RUNNER_FIFO_ENV, s);
        return -EINVAL;
    }
    int policy = sched_getscheduler(0);
    struct sched_param old;
    if (policy < 0 || sched_getparam(0, &old) != 0) {
        snprintf(why, size, "SCHED_FIFO: %s, not raised", strerror(errno));
        return -EINVAL;
    }
    struct sched_param sp = {.sched_priority = (int)prio};
    if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
        int err = -errno;
        snprintf(why, size, "SCHED_FIFO %ld: %s, not raised", prio,
                 strerror(-err));
        return err;
    }
    saved_policy = policy;
    saved_sp = old;
    snprintf(why, size, "the transport at SCHED_FIFO %ld, the runners not",
             prio);
    return 1;
}

void runner_fifo_end(void) {
    if (saved_policy >= 0) sched_setscheduler(0, saved_policy, &saved_sp);
    saved_policy = -1;
}

/* One CPU's line ("cpu" for all of them when cpu < 0): busy, steal and all
 * ticks. */
static void read_line(const char *text, int cpu, unsigned long long out[3]) {
    out[0] = out[1] = out[2] = 0;
    char name[16];
    if (cpu < 0)
        snprintf(name, sizeof name, "cpu ");
    else
        snprintf(name, sizeof name, "cpu%d ", cpu);
    const char *p = text;
    size_t len = strlen(name);
    while (p && strncmp(p, name, len) != 0) {
        p = strchr(p, '\n');
        if (p) p++;
    }
    if (!p) return;
    unsigned long long v[8] = {0};
    if (sscanf(p + len, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
               &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) < 7)
        return;
    out[0] = v[0] + v[1] + v[2] + v[5] + v[6];
    out[1] = v[7];
    for (int i = 0; i < 8; i++)
        out[2] += v[i];
}

void runner_stat_read(runner_stat *s) {
    memset(s, 0, sizeof *s);
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return;
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    for (int k = 0; k < 2; k++)
        read_line(text, pinned[k], s->t[k]);
}

void runner_stat_figures(const runner_stat *a, const runner_stat *b,
                         runner_result *out) {
    double pct[2], steal = 0, total = 0;
    for (int k = 0; k < 2; k++) {
        double all = (double)(b->t[k][2] - a->t[k][2]);
        pct[k] =
            all > 0 ? 100.0 * (double)(b->t[k][0] - a->t[k][0]) / all : NAN;
        steal += (double)(b->t[k][1] - a->t[k][1]);
        total += all;
    }
    out->busy_transport_pct = pct[0];
    out->busy_runners_pct = pct[1];
    /* Unpinned, both are the machine's line: its steal once. */
    out->steal_pct = total > 0 ? 100.0 * steal / total : NAN;
}
