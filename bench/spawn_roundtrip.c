/* Spawn + exit round trip: start /bin/true, learn of its exit on the loop,
 * start the next. Rows, in the same run:
 *
 *  - lull: lull_process_spawn, the next spawn inside on_exit;
 *  - libuv: uv_spawn, the next spawn once the handle's close callback ran
 *    (libuv's exit callback may not reuse the handle before uv_close);
 *    when pkg-config found libuv at build time, skipped with a line
 *    otherwise;
 *  - reference: posix_spawn and a blocking waitpid, no loop (not a floor:
 *    its file actions open /dev/null three times in each child, where the
 *    other rows' children dup an fd opened once).
 *
 * Each child gets /dev/null as stdin, stdout and stderr in every row
 * (libuv's UV_IGNORE is /dev/null). Rows run in turn, round after round
 * (lull, libuv, reference, lull, ...), so drift on the machine spreads over
 * all of them. Each row reports the median over rounds of the per-round
 * median trip, with the min and max of those medians, and the ratio of
 * lull's median to libuv's.
 *
 *   spawn_roundtrip [--trips N] [--rounds N] [--program PATH] */
#include "args.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lull.h"
#ifdef LAB_HAVE_UV
#include <uv.h>
#endif

extern char **environ;

static int trips = 300;
static int warmup = 20;
static const char *program = "/bin/true";

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
    return v[n / 2];
}

/* One round's samples: trip k's duration in ns, warm-up trips dropped. */
typedef struct samples {
    uint64_t *v;
    int n;          /* trips done, warm-up included */
    uint64_t start; /* when the current trip began */
    int failed;     /* a spawn or an exit that went wrong */
} samples;

static void sample(samples *s) {
    uint64_t t = now_ns();
    int k = s->n++ - warmup;
    if (k >= 0) s->v[k] = t - s->start;
    s->start = t;
}

static bool more(const samples *s) {
    return s->n < warmup + trips && !s->failed;
}

/* ----------------------------------------------------------------- lull */

static samples *lull_s;
static lull_loop *lull_l;
static lull_process lull_p;

static void lull_spawn_next(void);

static void lull_exited(lull_process *p, int status, int sig) {
    (void)p;
    if (status != 0 || sig != 0) lull_s->failed = 1;
    sample(lull_s);
    if (more(lull_s)) lull_spawn_next();
}

static void lull_spawn_next(void) {
    char *argv[] = {(char *)program, NULL};
    lull_process_options o = {.argv = argv,
                              .stdio = {{.kind = LULL_STDIO_NULL},
                                        {.kind = LULL_STDIO_NULL},
                                        {.kind = LULL_STDIO_NULL}}};
    int rc = lull_process_spawn(lull_l, &lull_p, &o, lull_exited);
    if (rc < 0) {
        fprintf(stderr, "lull_process_spawn: %s\n", lull_strerror(rc));
        lull_s->failed = 1;
    }
}

static int run_lull(samples *s) {
    lull_s = s;
    if (lull_loop_new(&lull_l, NULL) != 0) return -1;
    s->start = now_ns();
    lull_spawn_next();
    lull_loop_run(lull_l, LULL_RUN_DEFAULT);
    lull_loop_free(lull_l);
    return s->failed ? -1 : 0;
}

/* ---------------------------------------------------------------- libuv */

#ifdef LAB_HAVE_UV
static samples *uv_s;
static uv_loop_t uv_l;
static uv_process_t uv_p;

static void uv_spawn_next(void);

static void uv_closed(uv_handle_t *h) {
    (void)h;
    sample(uv_s);
    if (more(uv_s)) uv_spawn_next();
}

static void uv_exited(uv_process_t *p, int64_t status, int sig) {
    if (status != 0 || sig != 0) uv_s->failed = 1;
    uv_close((uv_handle_t *)p, uv_closed);
}

static void uv_spawn_next(void) {
    char *argv[] = {(char *)program, NULL};
    uv_stdio_container_t stdio[3] = {
        {.flags = UV_IGNORE}, {.flags = UV_IGNORE}, {.flags = UV_IGNORE}};
    uv_process_options_t o = {.file = program,
                              .args = argv,
                              .exit_cb = uv_exited,
                              .stdio_count = 3,
                              .stdio = stdio};
    int rc = uv_spawn(&uv_l, &uv_p, &o);
    if (rc < 0) {
        fprintf(stderr, "uv_spawn: %s\n", uv_strerror(rc));
        uv_s->failed = 1;
    }
}

static int run_uv(samples *s) {
    uv_s = s;
    if (uv_loop_init(&uv_l) != 0) return -1;
    s->start = now_ns();
    uv_spawn_next();
    uv_run(&uv_l, UV_RUN_DEFAULT);
    uv_loop_close(&uv_l);
    return s->failed ? -1 : 0;
}
#endif

/* ------------------------------------------------------------ reference */

static int run_reference(samples *s) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    for (int fd = 0; fd < 3; fd++)
        posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", O_RDWR, 0);
    char *argv[] = {(char *)program, NULL};
    s->start = now_ns();
    while (more(s)) {
        pid_t pid;
        int st;
        if (posix_spawn(&pid, program, &fa, NULL, argv, environ) != 0 ||
            waitpid(pid, &st, 0) != pid || st != 0) {
            s->failed = 1;
            break;
        }
        sample(s);
    }
    posix_spawn_file_actions_destroy(&fa);
    return s->failed ? -1 : 0;
}

/* ----------------------------------------------------------------- main */

typedef struct row {
    const char *name;
    int (*run)(samples *s);
    uint64_t *medians; /* one per round */
    int rounds;
} row;

static int refuse(const char *opt, int max, const char *s) {
    fprintf(stderr, "spawn_roundtrip: %s takes 1..%d, not '%s'\n", opt, max, s);
    return 2;
}

int main(int argc, char **argv) {
    int rounds = 7;
    for (int i = 1; i < argc; i++) {
        unsigned long long v;
        if (!strcmp(argv[i], "--trips") && i + 1 < argc) {
            if (!bench_count(argv[++i], 1, 1000000, &v))
                return refuse("--trips", 1000000, argv[i]);
            trips = (int)v;
        } else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            if (!bench_count(argv[++i], 1, 1000, &v))
                return refuse("--rounds", 1000, argv[i]);
            rounds = (int)v;
        } else if (!strcmp(argv[i], "--program") && i + 1 < argc) {
            program = argv[++i];
        } else {
            fprintf(stderr, "usage: spawn_roundtrip [--trips N] [--rounds N] "
                            "[--program PATH]\n");
            return 2;
        }
    }
    if (trips < 1 || rounds < 1) return 2;
    row rows[] = {
        {"lull  lull_process_spawn -> on_exit", run_lull, NULL, 0},
#ifdef LAB_HAVE_UV
        {"libuv uv_spawn -> exit_cb -> close_cb", run_uv, NULL, 0},
#endif
        {"ref.  posix_spawn + waitpid (no loop)", run_reference, NULL, 0},
    };
    int nrows = (int)(sizeof rows / sizeof rows[0]);
#ifndef LAB_HAVE_UV
    printf("libuv: not found at build time (pkg-config libuv), skipped\n");
#endif
    uint64_t *v = calloc((size_t)trips, sizeof *v);
    for (int r = 0; r < nrows; r++)
        rows[r].medians = calloc((size_t)rounds, sizeof(uint64_t));
    printf("spawn %s + exit round trip: %d rounds x %d trips (+%d warm-up), "
           "rows alternating\n",
           program, rounds, trips, warmup);
    for (int k = 0; k < rounds; k++) {
        for (int r = 0; r < nrows; r++) {
            samples s = {.v = v};
            if (rows[r].run(&s) != 0) {
                fprintf(stderr, "%s: failed\n", rows[r].name);
                return 1;
            }
            rows[r].medians[rows[r].rounds++] = median(v, trips);
        }
    }
#ifdef LAB_HAVE_UV
    /* lull ÷ libuv per round (rows 0 and 1 ran back to back), before the
     * medians are sorted. */
    double *ratio = calloc((size_t)rounds, sizeof *ratio);
    for (int k = 0; k < rounds; k++)
        ratio[k] = (double)rows[0].medians[k] / (double)rows[1].medians[k];
    for (int i = 0; i < rounds; i++) /* sort */
        for (int j = i + 1; j < rounds; j++)
            if (ratio[j] < ratio[i]) {
                double t = ratio[i];
                ratio[i] = ratio[j];
                ratio[j] = t;
            }
    printf("  (libuv %s)\n", uv_version_string());
#endif
    uint64_t med[8] = {0};
    for (int r = 0; r < nrows; r++) {
        uint64_t *m = rows[r].medians;
        qsort(m, (size_t)rounds, sizeof *m, cmp_u64);
        med[r] = m[rounds / 2];
        printf("  %-40s median %7.1f us  [min %7.1f  max %7.1f]\n",
               rows[r].name, (double)med[r] / 1e3, (double)m[0] / 1e3,
               (double)m[rounds - 1] / 1e3);
    }
#ifdef LAB_HAVE_UV
    printf("  lull / libuv per round: median %.2fx [min %.2f  max %.2f] "
           "(below 1: lull is faster)\n",
           ratio[rounds / 2], ratio[0], ratio[rounds - 1]);
    free(ratio);
#endif
    (void)med;
    free(v);
    for (int r = 0; r < nrows; r++)
        free(rows[r].medians);
    return 0;
}
