/* The runner of the `runner` scenario (lab/runner.h): lull-lab re-executed
 * as `lull-lab runner-child ID EVENTS INTERVAL_NS`, one per session, by
 * lull's transport (lull_process_spawn) or Node's (child_process.spawn).
 *
 * It is deliberately plain blocking code with no loop: what it costs and
 * when it wakes is not what the scenario measures, and the same runner
 * must serve every transport alike. It reads a command (runner_go) from
 * stdin, sleeps to each event's absolute due time (clock_nanosleep,
 * TIMER_ABSTIME: no drift over a turn), stamps the event with
 * CLOCK_MONOTONIC and writes it to stdout: that write is the commit, and
 * the instant the parent could first see the event. stdin's EOF ends it
 * with status 0; anything unexpected exits 1 with a line on stderr. One
 * thread.
 *
 * LAB_RUNNER_FAULT makes runner 1 misbehave on purpose, so a test can
 * see the transports' checks fail (lab/runner_faults.cmake): "lose" skips
 * its event 3, "repeat" writes it twice, "corrupt" spoils its checksum,
 * "exit" exits 3 after it. */
#include "runner.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

enum { FAULT_NONE, FAULT_LOSE, FAULT_REPEAT, FAULT_CORRUPT, FAULT_EXIT };

static int write_all(const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(STDOUT_FILENO, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -errno;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Reads exactly len bytes: 1, 0 at EOF before the first byte, or a
 * negative errno (a command cut short is -EPROTO). */
static int read_all(void *buf, size_t len) {
    char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(STDIN_FILENO, p + got, len - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -errno;
        if (n == 0) return got == 0 ? 0 : -EPROTO;
        got += (size_t)n;
    }
    return 1;
}

static int emit(uint32_t id, uint32_t seq, uint32_t flags, uint32_t turn,
                int fault) {
    runner_record r = {.magic = RUNNER_MAGIC,
                       .runner = id,
                       .seq = seq,
                       .flags = flags,
                       .check = runner_check(id, seq, flags),
                       .turn = turn};
    bool faulty = fault != FAULT_NONE && seq == 3;
    if (faulty && fault == FAULT_LOSE) return 0;
    if (faulty && fault == FAULT_CORRUPT) r.check ^= 1;
    r.commit_ns = lab_now_ns();
    int rc = write_all(&r, sizeof r);
    if (rc == 0 && faulty && fault == FAULT_REPEAT)
        rc = write_all(&r, sizeof r);
    if (rc == 0 && faulty && fault == FAULT_EXIT) _exit(3);
    return rc;
}

static int fault_of(uint32_t id) {
    const char *f = getenv("LAB_RUNNER_FAULT");
    if (!f || id != 1) return FAULT_NONE;
    if (strcmp(f, "lose") == 0) return FAULT_LOSE;
    if (strcmp(f, "repeat") == 0) return FAULT_REPEAT;
    if (strcmp(f, "corrupt") == 0) return FAULT_CORRUPT;
    if (strcmp(f, "exit") == 0) return FAULT_EXIT;
    return FAULT_NONE;
}

static void sleep_until(uint64_t t) {
    struct timespec at = {(time_t)(t / 1000000000u), (long)(t % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR)
        ;
}

int runner_child_main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: lull-lab runner-child ID EVENTS INTERVAL_NS "
                        "(started by `lull-lab runner`)\n");
        return 2;
    }
    /* Started through /proc/PID/exe (lab/runner.c), the kernel names it
     * "exe": named lull-lab again, for ps and pgrep. */
    prctl(PR_SET_NAME, "lull-lab", 0, 0, 0);
    uint32_t id = (uint32_t)strtoul(argv[1], NULL, 10);
    long events = strtol(argv[2], NULL, 10);
    uint64_t interval = strtoull(argv[3], NULL, 10);
    if (events < 1 || interval == 0) {
        fprintf(stderr, "runner-child: bad EVENTS or INTERVAL_NS\n");
        return 2;
    }
    /* A parent that died mid-turn: the write fails with EPIPE, and this
     * runner exits quietly instead of dying of SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    runner_child_pin();
    int fault = fault_of(id);
    if (emit(id, RUNNER_NO_SEQ, RUNNER_READY, 0, FAULT_NONE) < 0) return 1;
    for (uint32_t turn = 0;; turn++) {
        runner_go cmd;
        int rc = read_all(&cmd, sizeof cmd);
        if (rc == 0) return 0; /* EOF: the transport is done with us */
        if (rc < 0) {
            fprintf(stderr, "runner-child %u: reading a command: %s\n", id,
                    strerror(-rc));
            return 1;
        }
        uint64_t phase =
            cmd.flags & RUNNER_GO_ALIGNED ? 0 : runner_phase(id, interval);
        for (long k = 0; k < events; k++) {
            sleep_until(cmd.start_ns + phase + (uint64_t)(k + 1) * interval);
            uint32_t flags = k + 1 == events ? RUNNER_TERMINAL : 0;
            rc = emit(id, (uint32_t)k, flags, turn, fault);
            if (rc == -EPIPE) return 0; /* the parent has gone */
            if (rc < 0) {
                fprintf(stderr, "runner-child %u: writing event %ld: %s\n", id,
                        k, strerror(-rc));
                return 1;
            }
        }
    }
}
