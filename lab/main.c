/* lull-lab's entry point: the scenario table, option parsing, the machine
 * header, the noise measured around each scenario, the verdict that closes
 * the run, the exit status, and the JSON document that wraps it all.
 *
 * To add a scenario: declare its lab_scenario in lab/lab.h and list it in
 * `scenarios` below; its `measures` names the verdict lines it adds (its
 * own line's id is its name), so a run without it still says
 * "not run" on each. `all` runs the table in order.
 *
 * Exit status: 0 when every delivered-data check passed, 1 when one
 * failed or a scenario could not run, 2 for a usage error, 3 with
 * --strict when a target was missed on a machine quiet enough to judge. */
#include "engine.h"
#include "files.h"
#include "runner.h"
#include "soak.h"
#include "udp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

static const lab_scenario *const scenarios[] = {
    &lab_turns, &lab_pump,   &lab_loopback, &lab_replicate,
    &lab_serve, &lab_runner, &lab_udp,      &lab_files,
};
#define SCENARIO_COUNT (sizeof scenarios / sizeof scenarios[0])

static void usage(FILE *out) {
    fprintf(out, "usage: lull-lab SCENARIO|all|help [--quick] [--rounds N] "
                 "[--json FILE] [--plot FILE] [--only FIGURE] [--sessions "
                 "N] [--tcp] [--journal] [--aligned] [--kv PATH] "
                 "[--verbose] [--strict]\n\nscenarios:\n");
    for (size_t i = 0; i < SCENARIO_COUNT; i++)
        fprintf(out, "  %-10s %s\n", scenarios[i]->name,
                scenarios[i]->description);
    fprintf(out,
            "  %-10s every scenario above, in order\n\n"
            "options:\n"
            "  --quick     small sizes (`make demo` runs all --quick)\n"
            "  --rounds N  rounds per figure (default 5, 3 with --quick);\n"
            "              the row that goes first rotates round by round\n"
            "  --json FILE write every figure (median, min, max, rounds)\n"
            "  --only NAME run one figure of the scenario (its JSON key)\n"
            "  --plot FILE write an SVG of every figure (bars: median, "
            "min-max)\n"
            "  --sessions N  pump, runner: sessions in the main table (default "
            "12)\n"
            "  --only check  runner: a few runners, every event checked, "
            "nothing timed\n"
            "  --only notify|floor|node  runner: one transport alone (lull's "
            "notify, the floor, Node's)\n"
            "  LAB_RUNNER_FIFO=PRIO  runner: the transport at SCHED_FIFO PRIO "
            "where permitted\n"
            "  --aligned   runner: every runner commits in the same instant "
            "(default: each on its own phase)\n"
            "  --tcp       replicate: TCP loopback instead of Unix sockets\n"
            "  --journal   pump: add the journal variant (--only journal: "
            "it alone)\n"
            "  --kv PATH   serve: the lull-kv to run (default: the one built "
            "beside lull-lab)\n"
            "  --verbose   every legend and every table (default: one short "
            "table per scenario and the verdict)\n"
            "  --strict    exit 3 when a verdict line missed its target and "
            "is not marked noisy\n\n"
            "  lull-lab soak [--seconds N] [--seed S] [--only NAME]: the "
            "scenarios again and again at random sizes, every event and "
            "frame checked, RSS and fds watched (lab/soak.c)\n",
            "all");
}

/* The CPU model from /proc/cpuinfo, or "unknown". */
static void cpu_model(char *buf, size_t size) {
    snprintf(buf, size, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *colon = strchr(line, ':');
        if (!colon) break;
        colon++;
        while (*colon == ' ')
            colon++;
        snprintf(buf, size, "%s", colon);
        buf[strcspn(buf, "\n")] = '\0';
        break;
    }
    fclose(f);
}

/* The run's first line: when, the machine, the sizes, within 100
 * columns. The CPU's name gets what the rest leaves: a fixed cut of it
 * (28) and of the kernel release (24) made 117 columns on a cloud Intel
 * machine ("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", a Debian
 * cloud kernel), and lab.verdict_shape failed there. */
static void machine_line(const char *when, long nproc, const char *cpu,
                         const char *sys, const char *release, bool quick,
                         bool rounds_set) {
    char head[64], tail[96];
    int h =
        snprintf(head, sizeof head, "lull-lab %.20s | %ld CPUs, ", when, nproc);
    int t =
        snprintf(tail, sizeof tail, " | %.8s %.24s | %s%s", sys, release,
                 quick ? "quick" : "full", rounds_set ? ", rounds set" : "");
    int room = 100 - h - t; /* 1 at worst: 1024 CPUs, all cuts, rounds set */
    printf("%s%.*s%s\n", head, room > 0 ? room : 0, cpu, tail);
}

static void machine_notes(const lab_options *opts, lab_json *json) {
    struct utsname u;
    char cpu[128];
    uname(&u);
    cpu_model(cpu, sizeof cpu);
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    time_t t = time(NULL);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    machine_line(when, nproc, cpu, u.sysname, u.release, opts->quick,
                 opts->rounds > 0);
    if (!json) return;
    lab_json_key(json, "machine");
    lab_json_begin_object(json);
    lab_json_field(json, "nproc", (double)nproc);
    lab_json_key(json, "cpu");
    lab_json_string(json, cpu);
    lab_json_key(json, "kernel");
    lab_json_string(json, u.release);
    lab_json_key(json, "machine");
    lab_json_string(json, u.machine);
    lab_json_key(json, "date");
    lab_json_string(json, when);
    lab_json_end_object(json);
    lab_json_key(json, "quick");
    lab_json_bool(json, opts->quick);
}

/* The contracts every verdict has a line for (README: The contracts). */
static const char *const contracts[] = {"C1", "C2", "C3", "C4",
                                        "C5", "C6", "C7", "C8"};

/* A line for every contract and every scenario, "not run" with the
 * reason when no scenario of this run measured it. With --only FIGURE
 * (figure), the scenario ran that figure alone: a line it did not add is
 * "not measured (--only FIGURE)", not "did not run (see above)" under the
 * figure's table. */
static void expect_verdict(const lab_scenario *only, const char *figure) {
    char why[96];
    for (size_t c = 0; c < sizeof contracts / sizeof contracts[0]; c++) {
        const lab_scenario *by = NULL;
        for (size_t i = 0; i < SCENARIO_COUNT && !by; i++)
            if (strstr(scenarios[i]->measures, contracts[c])) by = scenarios[i];
        if (!by)
            snprintf(why, sizeof why, "no scenario measures it");
        else if (only && only != by)
            snprintf(why, sizeof why, "`lull-lab %s` measures it", by->name);
        else if (figure)
            snprintf(why, sizeof why, "not measured (--only %.40s)", figure);
        else
            snprintf(why, sizeof why, "%s did not measure it (see above)",
                     by->name);
        lab_verdict_expect(contracts[c], why);
    }
    for (size_t i = 0; i < SCENARIO_COUNT; i++) {
        const lab_scenario *s = scenarios[i];
        if (!strstr(s->measures, s->name)) continue;
        if (only && only != s)
            snprintf(why, sizeof why, "`lull-lab %s` reproduces it", s->name);
        else if (figure)
            snprintf(why, sizeof why, "not measured (--only %.40s)", figure);
        else
            snprintf(why, sizeof why, "%s did not run (see above)", s->name);
        lab_verdict_expect(s->name, why);
    }
}

/* `lull-lab titles`: every fixed line of the short output, each variant
 * once, one a line, measuring nothing. The width test reads it
 * (lab/CMakeLists.txt: lab.title_widths), so a variant this machine would
 * not print (no tracefs, no io_uring) is checked all the same. */
static int titles(void) {
    /* The first line at its widest: a long CPU name (45 characters), a
     * kernel release past the 24 kept, 4-digit CPUs, --rounds set. */
    machine_line("2026-12-31T23:59:59Z", 1024,
                 "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "Linux",
                 "6.1.0-18-cloud-amd64+deb12-1-extra-long", true, true);
    printf("%s\n%s\n%s\n", LAB_RATIO_RULE, LAB_WORDS_RULE, LAB_TERMS_RULE);
    for (size_t i = 0; i < SCENARIO_COUNT; i++) {
        printf("%s\n", scenarios[i]->title);
        for (const char *const *h = scenarios[i]->headings; h && *h; h++)
            printf("%s\n", *h[0] == '\n' ? *h + 1 : *h);
    }
    lab_verdict_titles();
    return 0;
}

static const lab_scenario *find(const char *name) {
    for (size_t i = 0; i < SCENARIO_COUNT; i++)
        if (strcmp(scenarios[i]->name, name) == 0) return scenarios[i];
    return NULL;
}

/* A count option's value: digits only, within [min, max]; anything else
 * (empty, "5x", "-1", past INT_MAX) is refused rather than read as
 * atoi would. */
static bool parse_count(const char *s, int min, int max, int *out) {
    if (!*s || *s < '0' || *s > '9') return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || errno || v < min || v > max) return false;
    *out = (int)v;
    return true;
}

/* The options that take a value, for "needs a value" rather than
 * "unknown argument" when the value is missing. */
static bool takes_value(const char *a) {
    static const char *const names[] = {"--rounds", "--plot", "--sessions",
                                        "--kv",     "--only", "--json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(a, names[i]) == 0) return true;
    return false;
}

/* --only NAME against the names the scenario takes; says which on a
 * miss, before anything runs. */
static bool only_known(const lab_scenario *s, const char *name) {
    for (const char *const *n = s->only; n && *n; n++)
        if (strcmp(*n, name) == 0) return true;
    if (!s->only) {
        fprintf(stderr,
                "lull-lab: %s has no figures to pick: --only '%s' "
                "refused\n",
                s->name, name);
        return false;
    }
    fprintf(stderr, "lull-lab: %s has no figure '%s' (only:", s->name, name);
    for (const char *const *n = s->only; *n; n++)
        fprintf(stderr, "%s %s", n == s->only ? "" : ",", *n);
    fprintf(stderr, ")\n");
    return false;
}

/* A file lull-lab will write at the end of the run: refused now if it
 * cannot be created, not after minutes of measuring. The check leaves no
 * empty file behind, should the run never reach its end. */
static bool writable(const char *opt, const char *path) {
    bool existed = *path && access(path, F_OK) == 0;
    FILE *f = *path ? fopen(path, "a") : NULL;
    if (!f) {
        fprintf(stderr, "lull-lab: %s: cannot write '%s': %s\n", opt, path,
                *path ? strerror(errno) : "empty file name");
        return false;
    }
    fclose(f);
    if (!existed) unlink(path);
    return true;
}

/* --json's file is written as the run goes, into a temporary file beside
 * it that replaces it only when the run ends: an interrupted run (SIGINT,
 * SIGTERM, SIGHUP: lab/cleanup.c removes the temporary file) leaves the
 * last whole run's figures in place, not half a document. A path that is
 * not a regular file (/dev/stdout, a FIFO) is written in place. Sets
 * *tmp (to free) when a temporary file is used. */
static lab_json *json_open(const char *path, char **tmp) {
    struct stat st;
    *tmp = NULL;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return lab_json_open(path);
    size_t size = strlen(path) + sizeof ".XXXXXX";
    char *t = malloc(size);
    if (!t) return NULL;
    snprintf(t, size, "%s.XXXXXX", path);
    int fd = mkostemp(t, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        free(t);
        /* A file that may be written in a directory that may not (its
         * owner let this user write the file alone): in place, as
         * before. */
        if (access(path, W_OK) == 0) return lab_json_open(path);
        errno = e;
        return NULL;
    }
    /* mkostemp's 0600, widened to what creating the file would give. */
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    close(fd);
    lab_tmp_note(t);
    lab_json *json = lab_json_open(t);
    if (!json) {
        int e = errno;
        unlink(t);
        lab_tmp_forget(t);
        free(t);
        errno = e;
        return NULL;
    }
    *tmp = t;
    return json;
}

/* Ends the JSON document: the temporary file, whole, replaces path. */
static int json_close(lab_json *json, const char *path, char *tmp) {
    int rc = lab_json_close(json);
    if (!tmp) return rc;
    if (rc == 0 && rename(tmp, path) != 0) rc = -errno;
    if (rc < 0) unlink(tmp);
    lab_tmp_forget(tmp);
    free(tmp);
    return rc;
}

/* stdout closed (`>&-`): refused, since the tables would be lost and the
 * first socket opened would take fd 1 (libuv, a peer here, asserts no fd
 * of its own is 0, 1 or 2). A closed stdin or stderr gets /dev/null. */
static bool std_fds_open(void) {
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0) continue;
        int null = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
        if (null >= 0 && null != fd) {
            dup2(null, fd);
            close(null);
        }
        if (fd == 1) {
            fprintf(stderr, "lull-lab: stdout is closed: the tables have "
                            "nowhere to go\n");
            return false;
        }
    }
    return true;
}

/* Whether everything printed reached stdout (a full disk, /dev/full, a
 * closed pipe): said on stderr, and the exit status says it too. */
static int stdout_status(int rc) {
    if (fflush(stdout) == 0 && !ferror(stdout)) return rc;
    fprintf(stderr, "lull-lab: writing to stdout failed: %s\n",
            errno ? strerror(errno) : "error");
    return rc ? rc : 1;
}

int main(int argc, char **argv) {
    /* A runner child (lab/runner_child.c) is started by the runner
     * scenario, never by hand, with the fds it is given; the soak has
     * options of its own. */
    if (argc > 1 && strcmp(argv[1], "runner-child") == 0)
        return runner_child_main(argc - 1, argv + 1);
    if (!std_fds_open()) return 2;
    lab_tmp_guard();
    if (argc > 1 && strcmp(argv[1], "soak") == 0)
        return lab_soak_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "titles") == 0)
        return stdout_status(titles());
    lab_options opts = {.argv0 = argv[0]};
    const char *command = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--quick") == 0) {
            opts.quick = true;
        } else if (takes_value(a) && i + 1 >= argc) {
            fprintf(stderr, "lull-lab: %s needs a value\n", a);
            return 2;
        } else if (strcmp(a, "--rounds") == 0) {
            if (!parse_count(argv[++i], 1, LAB_MAX_ROUNDS, &opts.rounds)) {
                fprintf(stderr, "lull-lab: --rounds takes 1..%d, not '%s'\n",
                        LAB_MAX_ROUNDS, argv[i]);
                return 2;
            }
        } else if (strcmp(a, "--plot") == 0) {
            opts.plot_path = argv[++i];
        } else if (strcmp(a, "--sessions") == 0) {
            if (!parse_count(argv[++i], 1, LAB_MAX_SESSIONS, &opts.sessions)) {
                fprintf(stderr, "lull-lab: --sessions takes 1..%d, not '%s'\n",
                        LAB_MAX_SESSIONS, argv[i]);
                return 2;
            }
        } else if (strcmp(a, "--verbose") == 0 || strcmp(a, "-v") == 0) {
            opts.verbose = true;
        } else if (strcmp(a, "--strict") == 0) {
            opts.strict = true;
        } else if (strcmp(a, "--tcp") == 0) {
            opts.tcp = true;
        } else if (strcmp(a, "--journal") == 0) {
            opts.journal = true;
        } else if (strcmp(a, "--aligned") == 0) {
            opts.aligned = true;
        } else if (strcmp(a, "--kv") == 0) {
            opts.kv_path = argv[++i];
        } else if (strcmp(a, "--only") == 0) {
            opts.only = argv[++i];
        } else if (strcmp(a, "--json") == 0) {
            opts.json_path = argv[++i];
        } else if (strcmp(a, "help") == 0 || strcmp(a, "--help") == 0 ||
                   strcmp(a, "-h") == 0) {
            usage(stdout);
            return stdout_status(0);
        } else if (a[0] != '-' && !command) {
            command = a;
        } else {
            fprintf(stderr, "lull-lab: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!command) {
        usage(stderr);
        return 2;
    }
    const lab_scenario *only = NULL;
    if (strcmp(command, "all") != 0) {
        only = find(command);
        if (!only) {
            fprintf(stderr, "lull-lab: no scenario '%s'\n", command);
            usage(stderr);
            return 2;
        }
    }
    if (opts.only && !only) {
        fprintf(stderr, "lull-lab: --only picks a figure of one scenario, "
                        "not of all\n");
        return 2;
    }
    if (opts.only && !only_known(only, opts.only)) return 2;
    if (opts.kv_path && access(opts.kv_path, X_OK) != 0) {
        fprintf(stderr, "lull-lab: --kv '%s': %s\n", opts.kv_path,
                *opts.kv_path ? strerror(errno) : "empty path");
        return 2;
    }
    if (opts.plot_path && !writable("--plot", opts.plot_path)) return 2;

    lab_verbose = opts.verbose;
    lab_node_sizes(opts.quick);
    /* Tables are read while they print; do not hold them in a buffer. */
    setvbuf(stdout, NULL, _IOLBF, 0);

    if (opts.plot_path && !(opts.plot = lab_plot_open(opts.plot_path))) {
        fprintf(stderr, "lull-lab: out of memory for the plot\n");
        return 1;
    }
    lab_json *json = NULL;
    char *json_tmp = NULL;
    if (opts.json_path) {
        json = json_open(opts.json_path, &json_tmp);
        if (!json) {
            fprintf(stderr, "lull-lab: cannot write %s: %s\n", opts.json_path,
                    strerror(errno));
            return 1;
        }
        lab_json_begin_object(json);
        /* Its first byte written through: a file that takes nothing
         * (/dev/full, a full disk) is refused now, not after minutes of
         * measuring. */
        int flushed = lab_json_flush(json);
        if (flushed < 0) {
            fprintf(stderr, "lull-lab: writing %s: %s\n", opts.json_path,
                    strerror(-flushed));
            json_close(json, opts.json_path, json_tmp);
            return 1;
        }
    }
    machine_notes(&opts, json);
    if (json) {
        lab_json_key(json, "scenarios");
        lab_json_begin_object(json);
    }

    /* --verbose too: its tables use the same ×, floor and p99. */
    printf("%s\n%s\n%s\n", LAB_RATIO_RULE, LAB_WORDS_RULE, LAB_TERMS_RULE);
    int failed = 0;
    static lab_noise noise[SCENARIO_COUNT];
    for (size_t i = 0; i < SCENARIO_COUNT; i++) {
        const lab_scenario *s = scenarios[i];
        if (only && s != only) continue;
        if (opts.verbose)
            printf("\n=== %s: %s\n", s->name, s->description);
        else if (!(opts.quick && s->verdict_only_when_quick))
            printf("\n%s\n", s->title);
        fflush(stdout);
        if (json) {
            lab_json_key(json, s->name);
            lab_json_begin_object(json);
        }
        lab_noise_begin(&noise[i]);
        lab_verdict_begin(s->name);
        int rc = s->run(&opts, json);
        lab_noise_end(&noise[i]);
        lab_verdict_end(&noise[i]);
        if (json) lab_json_end_object(json);
        if (rc < 0) {
            fprintf(stderr, "lull-lab: %s failed: %s\n", s->name,
                    strerror(-rc));
            failed = 1;
        }
    }
    if (json) {
        lab_json_end_object(json); /* scenarios */
        lab_json_key(json, "noise");
        lab_json_begin_object(json);
        for (size_t i = 0; i < SCENARIO_COUNT; i++)
            if (!only || scenarios[i] == only)
                lab_noise_json(json, scenarios[i]->name, &noise[i]);
        lab_json_end_object(json);
    }
    expect_verdict(only, opts.only);
    lab_noise ran[SCENARIO_COUNT];
    int nran = 0;
    for (size_t i = 0; i < SCENARIO_COUNT; i++)
        if (!only || scenarios[i] == only) ran[nran++] = noise[i];
    char busy[320];
    if (lab_noise_summary(ran, nran, busy, sizeof busy) > 0)
        printf("\n%s\n", busy);
    int strict_misses = lab_verdict_print(json);
    if (lab_checks_failed() > 0) failed = 1;
    if (json) {
        lab_json_field(json, "checks_failed", lab_checks_failed());
        lab_json_end_object(json);
        int rc = json_close(json, opts.json_path, json_tmp);
        if (rc < 0) {
            fprintf(stderr, "lull-lab: writing %s: %s\n", opts.json_path,
                    strerror(-rc));
            return 1;
        }
        printf("figures written to %s%s", opts.json_path,
               opts.plot ? "" : "\n");
    }
    if (opts.plot) {
        int rc = lab_plot_close(opts.plot);
        if (rc < 0) {
            fprintf(stderr, "lull-lab: writing %s: %s\n", opts.plot_path,
                    strerror(-rc));
            return 1;
        }
        printf("%s%s\n", opts.json_path ? ", plot to " : "plot written to ",
               opts.plot_path);
    }
    if (failed) return stdout_status(1);
    return stdout_status(opts.strict && strict_misses > 0 ? 3 : 0);
}
