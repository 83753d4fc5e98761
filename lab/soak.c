/* `lull-lab soak [--seconds N] [--seed S] [--only NAME]`: the
 * scenarios' lull implementations run over and over in this one process,
 * at sizes drawn at random for each run, with every delivered event and
 * frame checked by sequence number and checksum (the hooks of lab/soak.h),
 * and the process's resources watched across the runs. `serve` drives a
 * lull-kv kept across the runs (its fds checked the same way by its end
 * hook), and is dropped with one line when none was built.
 *
 * An iteration runs each entry of `entries` once. The first iteration is
 * the warm-up (the allocator's arenas, thread stacks and caches settle);
 * the resources measured after it are the baseline, and the soak fails
 * when at the end any has grown past its tolerance: resident memory (RSS,
 * /proc/self/statm) or the heap in use (mallinfo2) by more than a few MB,
 * open fds (/proc/self/fd) or threads (/proc/self/status) by any. It fails
 * at once when a run finds an event or frame lost, repeated, out of order
 * or corrupt, and prints the run's seed and sizes.
 *
 * Each run's seed is a hash of the master seed (--seed, else the clock;
 * printed), the iteration and the entry, so `--seed S --only NAME` draws
 * the same runs of that entry as the full soak did. */
#include "soak.h"
#include "lab.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct soak_entry {
    const char *name;
    const char *unit; /* what its runs verify */
    int (*run)(uint64_t *seed, lab_soak_result *out);
    int (*end)(lab_soak_result *out); /* NULL, or releases what runs kept */
} soak_entry;

/* The scenarios soaked. `serve` runs against one lull-kv kept for the
 * whole soak, and is dropped with a line when no lull-kv was built. */
static const soak_entry entries[] = {
    {"pump", "events", lab_pump_soak, NULL},
    {"loopback", "frames", lab_loopback_soak, NULL},
    {"replicate", "records", lab_replicate_soak, NULL},
    {"serve", "replies", lab_serve_soak, lab_serve_soak_end},
};
#define ENTRIES (int)(sizeof entries / sizeof entries[0])

/* Growth allowed from the warm-up to the end: the allocator keeps some
 * freed memory and its arenas fragment, so a few MB are not a leak; a
 * leak of one buffer per run over hundreds of runs is far more. An fd or
 * a thread is never allowed. */
#define RSS_TOLERANCE_KB  (4 * 1024)
#define HEAP_TOLERANCE_KB (1 * 1024)

/* Under AddressSanitizer freed memory waits in its quarantine (RSS grows
 * by design) and mallinfo2 counts nothing: memory is not compared there,
 * LeakSanitizer checks it at exit instead. Fds and threads still are. */
#if defined(__SANITIZE_ADDRESS__)
#define MEMORY_CHECKED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MEMORY_CHECKED 0
#endif
#endif
#ifndef MEMORY_CHECKED
#define MEMORY_CHECKED 1
#endif

typedef struct usage {
    long rss_kb;
    long heap_kb;
    int fds;
    int threads;
} usage;

static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1; /* the directory's own */
}

static int count_threads(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    int n = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1) break;
    fclose(f);
    return n;
}

/* Freed memory goes back to the kernel first (malloc_trim), so what is
 * resident is what is held, plus fragmentation. */
static void measure(usage *u) {
    malloc_trim(0);
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
    if (f) fclose(f);
    u->rss_kb = resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
    u->heap_kb = (long)(lab_heap_bytes() / 1024);
    u->fds = count_fds();
    u->threads = count_threads();
}

static void print_usage_line(const char *when, const usage *u) {
    printf("  %-16s RSS %7.1f MB  heap in use %7.3f MB  open fds %3d  "
           "threads %2d\n",
           when, (double)u->rss_kb / 1024, (double)u->heap_kb / 1024, u->fds,
           u->threads);
}

static uint64_t run_seed(uint64_t master, uint64_t iteration, int entry) {
    uint64_t h =
        master ^ (iteration * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)entry << 56);
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    return (h ^ (h >> 31)) | 1; /* xorshift's state is never 0 */
}

/* Every chosen entry's end hook; the first failure is printed. Returns 1
 * when one failed. */
static int end_entries(const bool *run) {
    int failed = 0;
    for (int k = 0; k < ENTRIES; k++) {
        if (!run[k] || !entries[k].end) continue;
        lab_soak_result res;
        if (entries[k].end(&res) < 0 && !failed) {
            printf("soak: FAILED: %s: %s\n", entries[k].name,
                   res.why[0] ? res.why : "its end check failed");
            failed = 1;
        }
    }
    return failed;
}

static void usage_text(FILE *out) {
    fprintf(out, "usage: lull-lab soak [--seconds N] [--seed S] [--only "
                 "NAME]\n"
                 "  runs");
    for (int i = 0; i < ENTRIES; i++)
        fprintf(out, " %s", entries[i].name);
    fprintf(out, " over and over for N seconds (default 60) at random "
                 "sizes, checking every event and frame, and fails when "
                 "one is lost, repeated, reordered or corrupt, or when RSS, "
                 "heap, fds or threads grow past the warm-up\n");
}

int lab_soak_main(int argc, char **argv) {
    double seconds = 60;
    uint64_t master = 0;
    bool seeded = false;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char *end;
        if (strcmp(a, "--seconds") == 0 && i + 1 < argc) {
            /* A number of seconds, 0 (one pass) up to 10^9: the deadline
             * in ns must fit in 64 bits. atof read "abc" as 0, and the
             * soak passed after one pass. */
            const char *v = argv[++i];
            seconds = strtod(v, &end);
            if (end == v || *end || !(seconds >= 0 && seconds <= 1e9)) {
                fprintf(stderr,
                        "lull-lab soak: --seconds takes 0..1000000000, not "
                        "'%s'\n",
                        v);
                return 2;
            }
        } else if (strcmp(a, "--seed") == 0 && i + 1 < argc) {
            /* The seed a failure printed (0x...): strtoull read a mistyped
             * one as 0, a different run from the one asked for. */
            const char *v = argv[++i];
            errno = 0;
            master = strtoull(v, &end, 0);
            if (end == v || *end || errno || *v == '-') {
                fprintf(stderr,
                        "lull-lab soak: --seed takes a number, not "
                        "'%s'\n",
                        v);
                return 2;
            }
            seeded = true;
        } else if (strcmp(a, "--only") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else {
            if (strcmp(a, "--help") != 0)
                fprintf(stderr, "lull-lab soak: %s%s\n", a,
                        strcmp(a, "--seconds") == 0 ||
                                strcmp(a, "--seed") == 0 ||
                                strcmp(a, "--only") == 0
                            ? " needs a value"
                            : ": unknown argument");
            usage_text(strcmp(a, "--help") == 0 ? stdout : stderr);
            return strcmp(a, "--help") == 0 ? 0 : 2;
        }
    }
    bool run[ENTRIES];
    int chosen = 0;
    for (int k = 0; k < ENTRIES; k++)
        chosen += run[k] = !only || strcmp(only, entries[k].name) == 0;
    if (!chosen) {
        fprintf(stderr, "lull-lab soak: --only takes one of:");
        for (int k = 0; k < ENTRIES; k++)
            fprintf(stderr, " %s", entries[k].name);
        fprintf(stderr, "; not '%s'\n", only);
        usage_text(stderr);
        return 2;
    }
    if (!seeded) master = lab_now_ns() ^ ((uint64_t)getpid() << 32);
    setvbuf(stdout, NULL, _IOLBF, 0);
    lab_raise_nofile();

    printf("soak: seed 0x%016" PRIx64 ", %.0f s; every run at random sizes, "
           "every event, frame and reply checked by sequence number and "
           "checksum\n",
           master, seconds);
    usage u0, u1, u2;
    measure(&u0);
    print_usage_line("start", &u0);

    uint64_t verified[ENTRIES] = {0}, runs[ENTRIES] = {0};
    uint64_t t0 = lab_now_ns(), next_report = t0 + 10000000000ull;
    uint64_t iteration = 0;
    do {
        for (int k = 0; k < ENTRIES; k++) {
            if (!run[k]) continue;
            uint64_t seed = run_seed(master, iteration, k);
            uint64_t drawn = seed;
            lab_soak_result res;
            memset(&res, 0, sizeof res);
            int rc = entries[k].run(&seed, &res);
            if (rc == LAB_SOAK_SKIPPED) {
                printf("soak: %s skipped: %s\n", entries[k].name, res.why);
                run[k] = false;
                if (--chosen == 0) return 0;
                continue;
            }
            if (rc < 0) {
                printf("soak: FAILED in iteration %" PRIu64 ", %s (run seed "
                       "0x%016" PRIx64 "; %s): %s\n"
                       "  reproduce: lull-lab soak --seed 0x%016" PRIx64
                       " --only %s\n",
                       iteration, entries[k].name, drawn, res.sizes,
                       res.why[0] ? res.why : strerror(-rc), master,
                       entries[k].name);
                end_entries(run);
                return 1;
            }
            verified[k] += res.verified;
            runs[k]++;
        }
        if (iteration++ == 0) {
            measure(&u1);
            print_usage_line("after warm-up", &u1);
        }
        uint64_t now = lab_now_ns();
        if (now >= next_report) {
            usage u;
            measure(&u);
            char when[32];
            snprintf(when, sizeof when, "%.0f s, it. %" PRIu64,
                     (double)(now - t0) / 1e9, iteration);
            print_usage_line(when, &u);
            next_report = now + 10000000000ull;
        }
    } while ((double)(lab_now_ns() - t0) / 1e9 < seconds);
    double elapsed = (double)(lab_now_ns() - t0) / 1e9;
    measure(&u2);
    print_usage_line("end", &u2);

    printf("soak: %.1f s, %" PRIu64 " iterations\n", elapsed, iteration);
    for (int k = 0; k < ENTRIES; k++)
        if (run[k])
            printf("  %-10s %8" PRIu64 " runs  %12" PRIu64 " %s verified\n",
                   entries[k].name, runs[k], verified[k], entries[k].unit);
    /* After the soak's own end figures: an entry's end hook may close what
     * it kept open since the warm-up. */
    int failed = end_entries(run);
    if (!MEMORY_CHECKED)
        printf("soak: RSS and heap not compared (AddressSanitizer build: "
               "its quarantine keeps freed memory; LeakSanitizer checks at "
               "exit)\n");
    if (MEMORY_CHECKED && u1.rss_kb >= 0 &&
        u2.rss_kb - u1.rss_kb > RSS_TOLERANCE_KB) {
        printf("soak: FAILED: RSS grew %.1f MB after the warm-up (tolerance "
               "%d MB)\n",
               (double)(u2.rss_kb - u1.rss_kb) / 1024, RSS_TOLERANCE_KB / 1024);
        failed = 1;
    }
    if (MEMORY_CHECKED && u2.heap_kb - u1.heap_kb > HEAP_TOLERANCE_KB) {
        printf("soak: FAILED: the heap in use grew %.1f MB after the warm-up "
               "(tolerance %d MB)\n",
               (double)(u2.heap_kb - u1.heap_kb) / 1024,
               HEAP_TOLERANCE_KB / 1024);
        failed = 1;
    }
    if (u2.fds != u1.fds || u2.threads != u1.threads) {
        printf("soak: FAILED: open fds %d -> %d, threads %d -> %d after the "
               "warm-up\n",
               u1.fds, u2.fds, u1.threads, u2.threads);
        failed = 1;
    }
    if (!failed)
        printf("soak: ok: nothing lost, repeated, reordered or corrupt; RSS "
               "%+.1f MB, heap %+.1f MB, fds %+d, threads %+d since the "
               "warm-up\n",
               (double)(u2.rss_kb - u1.rss_kb) / 1024,
               (double)(u2.heap_kb - u1.heap_kb) / 1024, u2.fds - u1.fds,
               u2.threads - u1.threads);
    return failed;
}
